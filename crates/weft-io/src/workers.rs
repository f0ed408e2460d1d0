//! Worker listeners on one address, and coordinated shutdown.
//!
//! Each worker owns a listener bound to the same address with SO_REUSEPORT: the
//! kernel spreads new connections by hash and no accept lock is needed. When
//! port 0 is asked for, the first listener picks the port and the others join it.
//!
//! A port is shared only on purpose. By default ([`PortShare::Exclusive`]) the
//! first listener is bound and put in the listening state *without*
//! SO_REUSEPORT: if any other socket listens on the address (another weft,
//! another server, with or without SO_REUSEPORT), bind or listen fails with
//! EADDRINUSE and the role refuses to start (`address already in use: ADDR`).
//! Only once it listens is SO_REUSEPORT turned on, and the other workers'
//! listeners join it. There is no race in which a second process that does
//! not ask to share could slip in: from the first listener's listen(2) on,
//! a bind without SO_REUSEPORT to the address fails; before it, the other
//! process's listener holds the address and ours fails (two sockets bound
//! but not yet listening both pass bind with SO_REUSEADDR, but the kernel
//! checks the address again at listen(2), where the second one fails). What
//! remains possible is a process that asks to share ([`PortShare::Shared`],
//! `--reuse-port`, the same user, as the kernel requires) joining after the
//! first listener has turned SO_REUSEPORT on: that is what it asked for.
//!
//! Turning SO_REUSEPORT on after listen(2) is what lets the others join: the
//! kernel checks the flag of the sockets already bound when a new one binds,
//! and makes the reuseport group when the second listener is hashed (Linux
//! 4.6 and later; measured on 6.x). If a worker's listener cannot join all
//! the same, the workers share the first listener instead (duplicates of one
//! descriptor: one accept queue watched by every worker).
//!
//! The reload hand-over (a new process taking over from the old one on the
//! same port) shares on purpose: it binds with [`PortShare::Shared`] while the
//! old process, which turned SO_REUSEPORT on after taking the port, still
//! listens.

use crate::sys::{self, Errno, Fd};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether the listening port may be shared with other processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PortShare {
    /// The port must be free: another process listening on it is an error
    /// (the default; see the module doc).
    #[default]
    Exclusive,
    /// Join other processes on the port with SO_REUSEPORT (`--reuse-port`:
    /// several processes behind one port; the reload hand-over). They must
    /// run as the same user, and have SO_REUSEPORT on (every weft turns it
    /// on once it holds the port).
    Shared,
}

impl PortShare {
    /// From a role's `reuse_port` setting.
    pub fn from_reuse_port(reuse_port: bool) -> PortShare {
        if reuse_port {
            PortShare::Shared
        } else {
            PortShare::Exclusive
        }
    }
}

/// Bind `n` listeners on `addr` for the workers of one process; returns them
/// and the bound address. The port must be free ([`PortShare::Exclusive`]).
pub fn bind_reuseport(addr: SocketAddr, n: usize, backlog: i32) -> io::Result<(Vec<Fd>, SocketAddr)> {
    bind_listeners(addr, n, backlog, PortShare::Exclusive)
}

/// Bind `n` listeners on `addr`, sharing the port with other processes only
/// when `share` says so (see the module doc); returns them and the bound
/// address. Errors are whole sentences naming the address: `address already
/// in use: 127.0.0.1:8080`, or `cannot listen on ADDR: <why>`.
pub fn bind_listeners(addr: SocketAddr, n: usize, backlog: i32, share: PortShare) -> io::Result<(Vec<Fd>, SocketAddr)> {
    // A reload takes the running server's sockets (`group::handover`).
    crate::group::handover::listeners(addr, n, || bind_new(addr, n, backlog, share))
}

fn bind_new(addr: SocketAddr, n: usize, backlog: i32, share: PortShare) -> io::Result<(Vec<Fd>, SocketAddr)> {
    let named = |e: io::Error| {
        if sys::is(&e, Errno::AddrInUse) {
            io::Error::new(io::ErrorKind::AddrInUse, format!("address already in use: {addr}"))
        } else {
            io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
        }
    };
    let first = match share {
        PortShare::Exclusive => exclusive_listener(&addr, backlog),
        PortShare::Shared => sys::tcp_listener(&addr, true, backlog),
    }
    .map_err(named)?;
    let bound = sys::local_addr(first.raw()).map_err(named)?;
    let mut all = vec![first];
    for _ in 1..n.max(1) {
        match sys::tcp_listener(&bound, true, backlog) {
            Ok(l) => all.push(l),
            Err(e) if share == PortShare::Exclusive && sys::is(&e, Errno::AddrInUse) => {
                // A kernel that does not let a listener join one that turned
                // SO_REUSEPORT on after listen(2): every worker watches the
                // first listener's queue.
                drop(all.split_off(1));
                return shared_first(all.pop().expect("the first listener"), n).map(|l| (l, bound));
            }
            Err(e) => return Err(named(e)),
        }
    }
    Ok((all, bound))
}

/// The first listener of a port that must be free: bound and listening
/// without SO_REUSEPORT (so any other listener on the address makes this
/// fail), then opened to this process's other listeners.
fn exclusive_listener(addr: &SocketAddr, backlog: i32) -> io::Result<Fd> {
    let l = sys::tcp_listener(addr, false, backlog)?;
    sys::set_reuseport(&l, true)?;
    Ok(l)
}

/// `n` duplicates of one listener.
fn shared_first(first: Fd, n: usize) -> io::Result<Vec<Fd>> {
    let first = OwnedFd::from(first);
    let mut all = Vec::with_capacity(n.max(1));
    for _ in 1..n.max(1) {
        all.push(Fd::from(first.try_clone()?));
    }
    all.insert(0, Fd::from(first));
    Ok(all)
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
                weft_core::stderr_line!("weft: signal {sig} received, shutting down gracefully");
                me.trigger();
                // A second signal means "now".
                if sys::wait_shutdown_signal().is_ok() {
                    weft_core::stderr_line!("weft: second signal, exiting immediately");
                    std::process::exit(130);
                }
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_port() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[test]
    fn the_workers_of_one_process_share_the_port() {
        let (ls, addr) = bind_reuseport(any_port(), 3, 16).unwrap();
        assert_eq!(ls.len(), 3);
        assert_ne!(addr.port(), 0);
        for l in &ls {
            assert_eq!(sys::local_addr(l).unwrap(), addr);
        }
        // Each has its own accept queue (not duplicates of one).
        assert_ne!(ls[0].raw(), ls[1].raw());
    }

    #[test]
    fn a_port_another_listener_holds_is_refused() {
        // Held by a listener with SO_REUSEPORT (another weft) and by one without.
        let (_held, addr) = bind_reuseport(any_port(), 2, 16).unwrap();
        let e = bind_reuseport(addr, 2, 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(e.to_string(), format!("address already in use: {addr}"));
        let plain = sys::tcp_listener(&any_port(), false, 16).unwrap();
        let addr = sys::local_addr(&plain).unwrap();
        let e = bind_reuseport(addr, 1, 16).unwrap_err();
        assert_eq!(e.to_string(), format!("address already in use: {addr}"));
        // A wildcard listener on the same port overlaps too.
        let wild = SocketAddr::from(([0, 0, 0, 0], addr.port()));
        assert_eq!(
            bind_listeners(wild, 1, 16, PortShare::Exclusive).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        // Asking to share does not help against a listener that does not.
        assert!(bind_listeners(addr, 1, 16, PortShare::Shared).is_err());
    }

    #[test]
    fn sharing_is_on_purpose() {
        let (_first, addr) = bind_reuseport(any_port(), 2, 16).unwrap();
        let (second, addr2) = bind_listeners(addr, 2, 16, PortShare::Shared).unwrap();
        assert_eq!((second.len(), addr2), (2, addr));
        let (third, _) = bind_listeners(addr, 1, 16, PortShare::Shared).unwrap();
        drop(third);
        // A process that shares does not make the port free for one that does not.
        assert!(bind_reuseport(addr, 1, 16).is_err());
    }

    #[test]
    fn other_errors_name_the_address() {
        let addr = SocketAddr::from(([192, 0, 2, 1], 1));
        let e = bind_reuseport(addr, 1, 16).unwrap_err();
        assert!(e.to_string().starts_with("cannot listen on 192.0.2.1:1: "), "{e}");
    }
}
