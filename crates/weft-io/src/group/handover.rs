//! Listener hand-over for a graceful reload (`weft reload`, SIGHUP).
//!
//! The binary turns recording on ([`enable`]) before its role starts: every
//! listener group [`bind_listeners`](crate::workers::bind_listeners) binds is
//! kept here as duplicates, by the address it was asked for, and every admin
//! endpoint by its address. A reload then starts the role again with the new
//! configuration between [`begin`] and [`finish`]: a bind of an address kept
//! here gets duplicates of the same sockets (the same accept queues: a
//! connection queued there is accepted by a new worker, none is reset), and an
//! admin endpoint of a kept address swaps what it serves instead of binding.
//! The caller then stops the old workers' accepting and lets them finish what
//! is in flight (their graceful drain).
//!
//! [`finish`]`(true)` keeps what the new start claimed or bound and closes
//! this module's copies of what it did not (an address removed from the
//! configuration stops listening when the old workers close theirs);
//! `finish(false)` (the new start failed) forgets what it bound and leaves
//! the records as they were: the running server is untouched.
//!
//! A kept listener group is handed over whole: a different worker count for
//! the same address is refused (the sockets' accept queues cannot be split or
//! merged without dropping connections); a restart changes it.

use crate::admin::Pages;
use crate::sys::Fd;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

struct Kept {
    asked: SocketAddr,
    bound: SocketAddr,
    fds: Vec<Fd>,
    claimed: bool,
}

struct Endpoint {
    asked: SocketAddr,
    bound: SocketAddr,
    pages: Arc<RwLock<Pages>>,
    /// A reload's new pages, installed at `finish(true)`.
    pending: Option<Pages>,
}

#[derive(Default)]
struct State {
    enabled: bool,
    reloading: bool,
    kept: Vec<Kept>,
    /// Bound anew during the reload (an address not kept).
    fresh: Vec<Kept>,
    endpoints: Vec<Endpoint>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Record listeners and admin endpoints from now on (the binary, before
/// starting its role; never in tests that start servers in-process).
pub fn enable() {
    state().get_or_insert_with(State::default).enabled = true;
}

/// A reload starts: the next binds reuse what is kept.
pub fn begin() {
    if let Some(s) = state().as_mut() {
        s.reloading = true;
    }
}

/// The reload's start succeeded (`ok`) or failed; see the module doc.
pub fn finish(ok: bool) {
    let mut g = state();
    let Some(s) = g.as_mut() else { return };
    s.reloading = false;
    let fresh = std::mem::take(&mut s.fresh);
    if ok {
        s.kept.retain(|k| k.claimed);
        s.kept.extend(fresh);
        for e in &mut s.endpoints {
            if let Some(p) = e.pending.take() {
                *e.pages.write().unwrap_or_else(|e| e.into_inner()) = p;
            }
        }
    } else {
        for e in &mut s.endpoints {
            e.pending = None;
        }
    }
    for k in &mut s.kept {
        k.claimed = false;
    }
}

fn dups(fds: &[Fd]) -> io::Result<Vec<Fd>> {
    fds.iter()
        .map(|f| f.as_fd().try_clone_to_owned().map(Fd::from))
        .collect::<io::Result<Vec<Fd>>>()
}

/// `bind_listeners` through the records: during a reload, the kept group
/// for `asked` (duplicated); otherwise `bind` (recorded when enabled).
pub(crate) fn listeners(
    asked: SocketAddr,
    n: usize,
    bind: impl FnOnce() -> io::Result<(Vec<Fd>, SocketAddr)>,
) -> io::Result<(Vec<Fd>, SocketAddr)> {
    let mut g = state();
    let Some(s) = g.as_mut().filter(|s| s.enabled) else {
        drop(g);
        return bind();
    };
    if s.reloading {
        if let Some(k) = s.kept.iter_mut().find(|k| k.asked == asked && !k.claimed) {
            if k.fds.len() != n.max(1) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "key `workers`: {} listeners on {asked} cannot become {} on a reload (restart to change it)",
                        k.fds.len(),
                        n.max(1)
                    ),
                ));
            }
            k.claimed = true;
            // The file status is shared by every duplicate: MT workers make
            // their listener blocking; event-driven ones need it not to be.
            for f in &k.fds {
                crate::sys::set_nonblocking(f)?;
            }
            return Ok((dups(&k.fds)?, k.bound));
        }
    }
    let (fds, bound) = bind()?;
    let kept = Kept {
        asked,
        bound,
        fds: dups(&fds)?,
        claimed: false,
    };
    if s.reloading {
        s.fresh.push(kept);
    } else {
        s.kept.push(kept);
    }
    Ok((fds, bound))
}

/// An admin endpoint for `asked`: during a reload, a kept one takes `pages`
/// at [`finish`] and its address is returned (`Ok(Err(pages))`: bind anew).
/// `Ok(Ok(shared))` from a fresh start: the caller binds and serves
/// `shared`, recorded here when enabled.
pub(crate) fn admin(asked: SocketAddr, pages: Pages) -> AdminStart {
    let mut g = state();
    let Some(s) = g.as_mut().filter(|s| s.enabled) else {
        return AdminStart::Bind(Arc::new(RwLock::new(pages)), None);
    };
    if s.reloading {
        if let Some(e) = s.endpoints.iter_mut().find(|e| e.asked == asked && e.pending.is_none()) {
            e.pending = Some(pages);
            return AdminStart::Kept(e.bound);
        }
    }
    AdminStart::Bind(Arc::new(RwLock::new(pages)), Some(asked))
}

/// What [`admin`] decided.
pub(crate) enum AdminStart {
    /// Serve these pages on a new listener (record it under the address).
    Bind(Arc<RwLock<Pages>>, Option<SocketAddr>),
    /// A kept endpoint at this address will serve the new pages.
    Kept(SocketAddr),
}

/// Record an admin endpoint bound for `asked`.
pub(crate) fn record_admin(asked: SocketAddr, bound: SocketAddr, pages: Arc<RwLock<Pages>>) {
    if let Some(s) = state().as_mut().filter(|s| s.enabled) {
        s.endpoints.push(Endpoint {
            asked,
            bound,
            pages,
            pending: None,
        });
    }
}

/// The descriptor numbers (tests).
#[cfg(test)]
fn raw(fds: &[Fd]) -> Vec<i32> {
    fds.iter().map(|f| f.raw()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the records are process-wide.
    #[test]
    fn a_reload_reuses_the_sockets_and_a_failed_one_changes_nothing() {
        enable();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let (first, addr) = crate::workers::bind_reuseport(any, 2, 16).unwrap();
        let first_ino: Vec<_> = first.iter().map(|f| crate::sys::fstat(f).unwrap().ino).collect();
        begin();
        let (again, addr2) = crate::workers::bind_reuseport(any, 2, 16).unwrap();
        assert_eq!(addr, addr2);
        let again_ino: Vec<_> = again.iter().map(|f| crate::sys::fstat(f).unwrap().ino).collect();
        assert_eq!(first_ino, again_ino, "the same sockets");
        assert_ne!(raw(&first), raw(&again));
        finish(false);
        begin();
        let e = crate::workers::bind_reuseport(any, 3, 16).unwrap_err();
        assert!(e.to_string().contains("key `workers`"), "{e}");
        finish(false);
        *state() = None;
    }
}
