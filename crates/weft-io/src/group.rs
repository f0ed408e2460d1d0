//! A group of worker threads, one event loop each, started and joined as one.
//!
//! Every role (serve, proxy, origin) runs N workers, each on its own
//! SO_REUSEPORT listener ([`bind_reuseport`](crate::bind_reuseport)) with its
//! own eventfd in a shared [`Shutdown`]. [`WorkerGroup::start`] spawns the
//! threads (named `{name}-{index}`) and hands each a [`WorkerSeat`]: its
//! index, its listener and the shutdown switch. [`WorkerGroup::wait`] joins
//! them all and sums the counters each returned ([`GroupStats`]); the first
//! error wins, and a worker that panicked is an error. Graceful stop stays the
//! role's own drain logic: the group only delivers the switch.
//! [`WorkerGroup::start_shared`] gives every worker a duplicate of one
//! listener instead (the accept model without SO_REUSEPORT: every worker
//! watches the same queue).

pub mod handover;

use crate::sys::Fd;
use crate::workers::Shutdown;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Draining (shutdown, or a reload's old workers): an idle keep-alive
/// connection active this recently is kept this long, not closed at once, so
/// a request its client is sending right now is answered (with `Connection:
/// close`) instead of meeting a reset; quieter ones are closed at once.
pub const DRAIN_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// What draining does with one client connection: the rule every role's
/// drain applies, so they keep and close the same connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// Idle, but active within [`DRAIN_QUIET`]: kept until this instant, as
    /// its client may be sending its next request right now.
    KeepUntil(Instant),
    /// Idle and quiet: closed now.
    Close,
    /// A request or response in flight: it finishes, then the connection
    /// closes.
    Finish,
}

impl Drain {
    /// The rule for a connection that is `idle` (no request in flight, not
    /// lingering) and was last active at `last_activity`.
    pub fn of(idle: bool, last_activity: Instant, now: Instant) -> Drain {
        if !idle {
            return Drain::Finish;
        }
        let until = last_activity + DRAIN_QUIET;
        if until > now {
            Drain::KeepUntil(until)
        } else {
            Drain::Close
        }
    }

    /// How long a connection waiting for its next request is kept past its
    /// last activity: `idle_timeout`, or while draining at most
    /// [`DRAIN_QUIET`]. A role that sets an idle connection's deadline each
    /// time it drives it uses this, so the deadline [`Drain::of`] gave it
    /// holds however often it is driven meanwhile (epoll-once reports every
    /// writable socket at every wait: the drain's deadline, reset each
    /// time, held idle clients until the grace period ended).
    pub fn idle_for(idle_timeout: std::time::Duration, draining: bool) -> std::time::Duration {
        if draining {
            idle_timeout.min(DRAIN_QUIET)
        } else {
            idle_timeout
        }
    }
}

/// Counters a worker returns when it stops, summed over the group.
pub trait GroupStats: Default + Send + 'static {
    /// Add `other`'s counters to these.
    fn merge(&mut self, other: &Self);
}

/// Workers that return nothing to sum.
impl GroupStats for () {
    fn merge(&mut self, _: &()) {}
}

/// What one worker thread is handed.
pub struct WorkerSeat {
    /// The worker's index, `0..n`.
    pub index: usize,
    /// The worker's own listener.
    pub listener: Fd,
    /// The group's shutdown switch (its eventfd for this worker is
    /// `shutdown.waker(index)`).
    pub shutdown: Shutdown,
}

/// Running worker threads (see the module doc).
pub struct WorkerGroup<S> {
    shutdown: Shutdown,
    handles: Vec<JoinHandle<io::Result<S>>>,
}

impl<S: GroupStats> WorkerGroup<S> {
    /// Spawn one thread per listener, named `{name}-{index}`, each running
    /// `run` with its seat. If a thread cannot be spawned, the ones already
    /// running are stopped and joined, and the error returned.
    pub fn start<F>(name: &str, listeners: Vec<Fd>, run: F) -> io::Result<WorkerGroup<S>>
    where
        F: Fn(WorkerSeat) -> io::Result<S> + Send + Sync + 'static,
    {
        let shutdown = Shutdown::new(listeners.len())?;
        let run = Arc::new(run);
        let mut group = WorkerGroup {
            shutdown: shutdown.clone(),
            handles: Vec::with_capacity(listeners.len()),
        };
        for (index, listener) in listeners.into_iter().enumerate() {
            let run = run.clone();
            let seat = WorkerSeat {
                index,
                listener,
                shutdown: shutdown.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || run(seat));
            match spawned {
                Ok(h) => group.handles.push(h),
                Err(e) => {
                    shutdown.trigger();
                    let _ = group.wait();
                    return Err(e);
                }
            }
        }
        Ok(group)
    }

    /// Spawn `workers` threads as [`start`](Self::start) does, each with a
    /// duplicate of the one `listener`.
    pub fn start_shared<F>(name: &str, workers: usize, listener: Fd, run: F) -> io::Result<WorkerGroup<S>>
    where
        F: Fn(WorkerSeat) -> io::Result<S> + Send + Sync + 'static,
    {
        let first = OwnedFd::from(listener);
        let mut listeners = Vec::with_capacity(workers.max(1));
        for _ in 1..workers.max(1) {
            listeners.push(Fd::from(first.try_clone()?));
        }
        listeners.insert(0, Fd::from(first));
        Self::start(name, listeners, run)
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// No workers?
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The switch that stops every worker gracefully.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Join every worker; returns their summed counters, or the first error
    /// (a panicked worker is an error).
    pub fn wait(self) -> io::Result<S> {
        let mut total = S::default();
        let mut first_err = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(s)) => total.merge(&s),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other("worker thread panicked"));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn an_idle_connection_is_kept_no_longer_than_the_drain_allows() {
        use std::time::Duration;
        let idle = Duration::from_secs(60);
        assert_eq!(Drain::idle_for(idle, false), idle);
        assert_eq!(Drain::idle_for(idle, true), DRAIN_QUIET);
        // A shorter idle timeout still wins.
        let short = Duration::from_millis(200);
        assert_eq!(Drain::idle_for(short, true), short);
        // The deadline it gives is the one `Drain::of` keeps a client until.
        let now = Instant::now();
        let last = now - Duration::from_millis(300);
        assert_eq!(
            Drain::of(true, last, now),
            Drain::KeepUntil(last + Drain::idle_for(idle, true))
        );
    }

    #[derive(Default, Debug, PartialEq)]
    struct Count(u64);

    impl GroupStats for Count {
        fn merge(&mut self, other: &Count) {
            self.0 += other.0;
        }
    }

    fn listeners(n: usize) -> Vec<Fd> {
        crate::bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)), n, 16)
            .unwrap()
            .0
    }

    #[test]
    fn workers_get_their_seat_and_their_counters_are_summed() {
        let g = WorkerGroup::start("weft-test", listeners(3), |seat: WorkerSeat| {
            assert_eq!(
                std::thread::current().name(),
                Some(format!("weft-test-{}", seat.index).as_str())
            );
            assert!(seat.listener.raw() >= 0);
            let _ = seat.shutdown.waker(seat.index);
            Ok(Count(seat.index as u64 + 1))
        })
        .unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g.wait().unwrap(), Count(6));
    }

    #[test]
    fn first_error_wins_and_a_panic_is_an_error() {
        let g: WorkerGroup<Count> = WorkerGroup::start("weft-test", listeners(2), |seat: WorkerSeat| {
            if seat.index == 0 {
                Err(io::Error::other("worker 0 failed"))
            } else {
                Ok(Count(1))
            }
        })
        .unwrap();
        assert_eq!(g.wait().unwrap_err().to_string(), "worker 0 failed");
        let g: WorkerGroup<()> = WorkerGroup::start("weft-test", listeners(1), |_seat: WorkerSeat| -> io::Result<()> {
            panic!("on purpose")
        })
        .unwrap();
        assert_eq!(g.wait().unwrap_err().to_string(), "worker thread panicked");
    }

    #[test]
    fn a_shared_listener_is_duplicated_for_every_worker() {
        let l = crate::sys::tcp_listener(&SocketAddr::from(([127, 0, 0, 1], 0)), false, 16).unwrap();
        let addr = crate::sys::local_addr(&l).unwrap();
        let g = WorkerGroup::start_shared("weft-test", 3, l, move |seat: WorkerSeat| {
            assert_eq!(crate::sys::local_addr(&seat.listener).unwrap(), addr);
            Ok(Count(seat.listener.raw() as u64))
        })
        .unwrap();
        assert_eq!(g.len(), 3);
        assert!(g.wait().unwrap().0 > 0);
    }

    #[test]
    fn draining_keeps_recent_idle_connections_and_finishes_busy_ones() {
        let t0 = Instant::now();
        let later = t0 + DRAIN_QUIET;
        assert_eq!(Drain::of(true, t0, t0), Drain::KeepUntil(later));
        assert_eq!(Drain::of(true, t0, later), Drain::Close);
        assert_eq!(Drain::of(false, t0, later), Drain::Finish);
    }

    #[test]
    fn the_switch_reaches_every_worker() {
        let g: WorkerGroup<()> = WorkerGroup::start("weft-test", listeners(2), |seat: WorkerSeat| {
            while !seat.shutdown.requested() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(())
        })
        .unwrap();
        g.shutdown().trigger();
        g.wait().unwrap();
    }
}
