//! The booster's part of a running `weft front --mode booster`
//! (`FrontServer` runs it: the proxy's workers with the cache off, every
//! request placed by [`Booster`]): the proxy settings it tunes, the load
//! monitor when `--boost auto`, and the admin endpoint (`/stats`: the
//! booster's counters and sites, the proxy's totals, and the figures per
//! request).

use super::{Boost, Booster};
use crate::config::ProxyConfig;
use crate::{Proxy, ProxyStats};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bytes read from an origin connection at once for response heads.
const BOOSTER_FIRST_READ: usize = 64 * 1024;

/// The proxy settings of booster mode.
pub fn tune_proxy(proxy: &mut ProxyConfig) {
    // The responses of a line come back to back: one read takes several
    // heads (and small bodies) at once, and the next owners parse theirs
    // from the connection's input without a system call.
    proxy.first_read = proxy.first_read.max(BOOSTER_FIRST_READ);
}

/// The per-request figures of the proxy's totals: system calls (all kinds
/// the workers count), upstream connections opened, origin responses.
fn per_request(b: &Booster, t: &ProxyStats) -> String {
    let requests = t.requests.max(1) as f64;
    let calls: u64 = t.syscalls.0.iter().sum();
    let responses = b.stats.upstream_responses.load(Ordering::Relaxed);
    format!(
        "{{\"syscalls\":{:.2},\"upstream_connects\":{:.4},\"upstream_responses\":{:.3}}}",
        calls as f64 / requests,
        t.upstream_connects as f64 / requests,
        responses as f64 / requests
    )
}

impl Booster {
    /// The `/stats` document for the proxy's totals `t` (also printed at
    /// exit by `--stats-on-exit`).
    pub fn document(&self, t: &ProxyStats) -> String {
        self.render(&format!(
            "{{\"total\":{},\"per_request\":{}}}",
            t.to_json(),
            per_request(self, t)
        ))
    }
}

/// `POST /boost/HOST/on` (or `off`): the manual switch, for an operator
/// (or the lab) who knows a peak is coming. With `--boost auto` the
/// monitor may switch the site again at its next reading.
fn manual_switch(b: &Booster, line: &[u8]) -> Option<String> {
    let line = std::str::from_utf8(line).ok()?;
    let path = line.strip_prefix("POST /boost/")?.split(' ').next()?;
    let (host, how) = path.rsplit_once('/')?;
    let on = match how {
        "on" => true,
        "off" => false,
        _ => return None,
    };
    b.switch(host, on)
        .then(|| format!("{{\"site\":\"{}\",\"boosting\":{on}}}\n", host.escape_default()))
}

/// Once the proxy runs: the load monitor (`--boost auto`) and the admin
/// endpoint at `admin`; its bound address.
pub fn start(b: &Arc<Booster>, admin: Option<SocketAddr>, proxy: &Proxy) -> io::Result<Option<SocketAddr>> {
    if b.cfg.boost == Boost::Auto {
        super::monitor::start(b.clone(), proxy.bound().shutdown)?;
    }
    let Some(a) = admin else { return Ok(None) };
    let (b2, slots) = (b.clone(), proxy.slots());
    let b = b.clone();
    let pages = weft_io::admin::Pages {
        settle: Some(crate::stats::settle_pages(slots.clone())),
        stats: Arc::new(move || b2.document(&Proxy::live_totals(&slots))),
        metrics: None,
        control: Some(Arc::new(move |line| manual_switch(&b, line))),
    };
    weft_io::admin::serve(a, pages)
        .map(Some)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on admin address {a}: {e}")))
}
