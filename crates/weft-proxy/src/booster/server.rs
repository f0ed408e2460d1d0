//! A running booster: the proxy's workers in `weft front --mode booster`
//! (cache off, every request placed by [`Booster`]), the load monitor when
//! `--boost auto`, and the admin endpoint (`/stats`: the booster's counters
//! and sites, the proxy's totals, and the figures per request).

use super::{Boost, Booster, BoosterConfig};
use crate::config::{HostPort, ProxyConfig};
use crate::front::{Front, FrontConfig, Mode};
use crate::{Proxy, ProxyStats};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use weft_io::Shutdown;

/// Bytes read from an origin connection at once for response heads.
const BOOSTER_FIRST_READ: usize = 64 * 1024;

/// A running booster.
pub struct BoosterServer {
    proxy: Proxy,
    booster: Arc<Booster>,
    admin_addr: Option<SocketAddr>,
}

/// The per-request figures of the proxy's totals: system calls (all kinds
/// the workers count) and upstream connections opened.
fn per_request(b: &Booster, t: &ProxyStats) -> String {
    let requests = t.requests.max(1) as f64;
    let calls: u64 = t.syscalls.0.iter().sum();
    let responses = b.stats.upstream_responses.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "{{\"syscalls\":{:.2},\"upstream_connects\":{:.4},\"upstream_responses\":{:.3}}}",
        calls as f64 / requests,
        t.upstream_connects as f64 / requests,
        responses as f64 / requests
    )
}

impl BoosterServer {
    /// Start: `admin` is the booster's admin address; `proxy` gives the
    /// listener, workers, timeouts and buffers.
    pub fn start(cfg: BoosterConfig, admin: Option<SocketAddr>, mut proxy: ProxyConfig) -> io::Result<BoosterServer> {
        let Some(first) = cfg.sites.first().map(|s| s.origin) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "booster: no site (--site HOST=ORIGIN[@ADMIN])",
            ));
        };
        let workers = proxy.workers.max(1);
        let front_cfg = FrontConfig {
            backends: cfg
                .sites
                .iter()
                .map(|s| crate::front::BackendSpec {
                    addr: s.origin,
                    weight: 1,
                })
                .collect(),
            mode: Mode::Booster,
            ..FrontConfig::default()
        };
        let boost = cfg.boost;
        let booster = Arc::new(Booster::new(cfg, workers));
        let front = Arc::new(Front::new(&front_cfg, workers)?.with_booster(booster.clone()));
        proxy.upstream = Some(HostPort {
            host: first.ip().to_string(),
            port: first.port(),
        });
        proxy.routes.clear();
        proxy.cache_size = 0;
        proxy.cache_dir = None;
        proxy.admin = None;
        proxy.front = Some(front);
        // The responses of a line come back to back: one read takes several
        // heads (and small bodies) at once, and the next owners parse theirs
        // from the connection's input without a system call.
        proxy.first_read = proxy.first_read.max(BOOSTER_FIRST_READ);
        let proxy = Proxy::start(proxy)?;
        if boost == Boost::Auto {
            super::monitor::start(booster.clone(), proxy.shutdown_handle())?;
        }
        let admin_addr = match admin {
            Some(a) => {
                let (b, slots) = (booster.clone(), proxy.slots());
                let render = Arc::new(move || {
                    let t = Proxy::live_totals(&slots);
                    let doc = format!("{{\"total\":{},\"per_request\":{}}}", t.to_json(), per_request(&b, &t));
                    b.render(&doc)
                });
                let pages = weft_io::admin::Pages {
                    stats: render,
                    metrics: None,
                };
                Some(
                    weft_io::admin::serve(a, pages)
                        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on admin address {a}: {e}")))?,
                )
            }
            None => None,
        };
        Ok(BoosterServer {
            proxy,
            booster,
            admin_addr,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.proxy.local_addr()
    }

    /// The admin endpoint's address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The switch that stops the booster gracefully.
    pub fn shutdown_handle(&self) -> Shutdown {
        self.proxy.shutdown_handle()
    }

    /// Wait for the workers; the proxy's counters and the booster's JSON.
    pub fn wait(self) -> io::Result<(ProxyStats, String)> {
        let (stats, _) = self.proxy.wait()?;
        let doc = format!(
            "{{\"total\":{},\"per_request\":{}}}",
            stats.to_json(),
            per_request(&self.booster, &stats)
        );
        Ok((stats, self.booster.render(&doc)))
    }
}
