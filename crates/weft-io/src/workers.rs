//! Worker threads on SO_REUSEPORT listeners, and coordinated shutdown.
//!
//! Each worker owns a listener bound to the same address with SO_REUSEPORT: the
//! kernel spreads new connections by hash and no accept lock is needed. When
//! port 0 is asked for, the first listener picks the port and the others join it.

use crate::sys::{self, Fd};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Bind `n` listeners on `addr` with SO_REUSEPORT; returns them and the bound address.
pub fn bind_reuseport(addr: SocketAddr, n: usize, backlog: i32) -> io::Result<(Vec<Fd>, SocketAddr)> {
    let first = sys::tcp_listener(&addr, true, backlog)?;
    let bound = sys::local_addr(first.raw())?;
    let mut all = vec![first];
    for _ in 1..n.max(1) {
        all.push(sys::tcp_listener(&bound, true, backlog)?);
    }
    Ok((all, bound))
}

/// A shutdown flag that wakes every worker through its eventfd.
#[derive(Clone)]
pub struct Shutdown {
    inner: Arc<ShutdownInner>,
}

struct ShutdownInner {
    requested: AtomicBool,
    wakers: Vec<Fd>,
}

impl Shutdown {
    /// One eventfd per worker.
    pub fn new(workers: usize) -> io::Result<Shutdown> {
        let mut wakers = Vec::with_capacity(workers);
        for _ in 0..workers {
            wakers.push(sys::eventfd()?);
        }
        Ok(Shutdown {
            inner: Arc::new(ShutdownInner {
                requested: AtomicBool::new(false),
                wakers,
            }),
        })
    }

    /// The eventfd worker `i` registers for reading.
    pub fn waker(&self, i: usize) -> RawFd {
        self.inner.wakers[i].raw()
    }

    /// Ask every worker to stop accepting and drain.
    pub fn trigger(&self) {
        self.inner.requested.store(true, Ordering::SeqCst);
        for w in &self.inner.wakers {
            let _ = sys::eventfd_signal(w.raw());
        }
    }

    /// Has shutdown been asked for?
    #[inline]
    pub fn requested(&self) -> bool {
        self.inner.requested.load(Ordering::Relaxed)
    }

    /// Start a thread that waits for SIGTERM/SIGINT and triggers this shutdown.
    /// The signals must already be blocked in every thread
    /// ([`sys::block_shutdown_signals`] before spawning workers).
    pub fn on_signals(&self) -> io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new().name("weft-signals".into()).spawn(move || {
            if let Ok(sig) = sys::wait_shutdown_signal() {
                eprintln!("weft: signal {sig} received, shutting down gracefully");
                me.trigger();
                // A second signal means "now".
                if sys::wait_shutdown_signal().is_ok() {
                    eprintln!("weft: second signal, exiting immediately");
                    std::process::exit(130);
                }
            }
        })?;
        Ok(())
    }
}
