//! The front-end's one decision state: loads, health, the admission limit S
//! and the queue in front of it (§3.1.1, §3.1.4).
//!
//! The caller reports every request's life: [`Dispatcher::place`] when it
//! arrives (the load of the chosen back-end rises at once),
//! [`Dispatcher::finished`] when its back-end is done with it, and then
//! [`Dispatcher::next_queued`] until it returns `None`, to send what waited.
//! At most S requests are in flight, S = (n−1)·T_high + T_low − 1 for the n
//! back-ends up, so that at most n−2 back-ends can reach T_high while none is
//! below T_low; the rest wait in FIFO order in a bounded queue, and a request
//! that finds the queue full is rejected (the live front-end answers 503).

use super::{Backends, Nanos, Request, ServerId, Strategy};
use std::collections::VecDeque;

/// Admission settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatcherConfig {
    /// T_low of the admission limit (LARD's own T_low by default).
    pub t_low: u32,
    /// T_high of the admission limit.
    pub t_high: u32,
    /// Requests that may wait for admission; more are rejected.
    pub queue_limit: usize,
    /// Apply the limit S (false: every request is sent at once).
    pub admission: bool,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            t_low: 25,
            t_high: 65,
            queue_limit: 4096,
            admission: true,
        }
    }
}

/// Why a request was not placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// The admission queue is full.
    QueueFull,
    /// Every back-end is down.
    NoBackend,
}

/// What happened to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Send it to this back-end now.
    Assigned(ServerId),
    /// It waits; [`Dispatcher::next_queued`] will hand it out with its ticket.
    Queued,
    /// Refuse it.
    Rejected(Reject),
}

/// The front-end's decision state, over one [`Strategy`].
pub struct Dispatcher<T = u64> {
    strategy: Box<dyn Strategy>,
    backends: Backends,
    config: DispatcherConfig,
    in_flight: usize,
    queue: VecDeque<(T, Request)>,
    placed: Vec<u64>,
}

impl<T> Dispatcher<T> {
    /// A dispatcher for back-ends of `weights`, all up.
    pub fn new(strategy: Box<dyn Strategy>, weights: &[u32], config: DispatcherConfig) -> Dispatcher<T> {
        Dispatcher {
            strategy,
            backends: Backends::new(weights),
            config,
            in_flight: 0,
            queue: VecDeque::new(),
            placed: vec![0; weights.len()],
        }
    }

    /// The admission limit S for the back-ends up now (at least 1 while one is up).
    pub fn limit(&self) -> usize {
        let n = self.backends.up_count();
        if n == 0 {
            return 0;
        }
        if !self.config.admission {
            return usize::MAX;
        }
        let (lo, hi) = (self.config.t_low as usize, self.config.t_high as usize);
        ((n - 1) * hi + lo).saturating_sub(1).max(1)
    }

    /// The back-ends: load, health, weight.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// The strategy.
    pub fn strategy(&self) -> &dyn Strategy {
        self.strategy.as_ref()
    }

    /// Requests sent and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests waiting for admission.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Requests sent to each back-end so far.
    pub fn placed(&self) -> &[u64] {
        &self.placed
    }

    fn assign(&mut self, req: &Request, now: Nanos) -> Option<ServerId> {
        let s = self.strategy.choose(req, &self.backends, now)?;
        debug_assert!(self.backends.is_up(s), "strategy chose a back-end that is down");
        self.backends.add_load(s);
        self.in_flight += 1;
        self.placed[s] += 1;
        Some(s)
    }

    /// A request arrives: send it, queue it behind earlier ones, or refuse it.
    pub fn place(&mut self, ticket: T, req: Request, now: Nanos) -> Placement {
        if self.backends.up_count() == 0 {
            return Placement::Rejected(Reject::NoBackend);
        }
        if self.queue.is_empty() && self.in_flight < self.limit() {
            return match self.assign(&req, now) {
                Some(s) => Placement::Assigned(s),
                None => Placement::Rejected(Reject::NoBackend),
            };
        }
        if self.queue.len() >= self.config.queue_limit {
            return Placement::Rejected(Reject::QueueFull);
        }
        self.queue.push_back((ticket, req));
        Placement::Queued
    }

    /// The request sent to `server` is done (answered, failed or closed).
    pub fn finished(&mut self, server: ServerId, _now: Nanos) {
        if self.backends.load(server) > 0 {
            self.backends.sub_load(server);
            self.in_flight -= 1;
        }
    }

    /// The oldest waiting request, if the limit now lets it in, with its back-end.
    pub fn next_queued(&mut self, now: Nanos) -> Option<(T, ServerId)> {
        if self.in_flight >= self.limit() {
            return None;
        }
        let (ticket, req) = self.queue.pop_front()?;
        match self.assign(&req, now) {
            Some(s) => Some((ticket, s)),
            None => {
                self.queue.push_front((ticket, req));
                None
            }
        }
    }

    /// Drop every waiting request (e.g. when all back-ends are down), oldest first.
    pub fn drain_queue(&mut self) -> Vec<T> {
        self.queue.drain(..).map(|(t, _)| t).collect()
    }

    /// Health: `server` is up or down. A back-end going down leaves the
    /// strategy's target map; its requests in flight still count until the
    /// caller reports them finished.
    pub fn set_up(&mut self, server: ServerId, up: bool, _now: Nanos) {
        if self.backends.set_up(server, up) {
            if up {
                self.strategy.backend_up(server);
            } else {
                self.strategy.backend_down(server);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Wrr;
    use super::*;

    #[test]
    fn the_limit_is_s_and_the_queue_is_fifo_and_bounded() {
        let config = DispatcherConfig {
            t_low: 2,
            t_high: 4,
            queue_limit: 2,
            admission: true,
        };
        let mut d: Dispatcher<u32> = Dispatcher::new(Box::new(Wrr::new()), &[1, 1], config);
        assert_eq!(d.limit(), 4 + 2 - 1);
        for i in 0..5 {
            assert!(matches!(d.place(i, Request::new(i.into()), 0), Placement::Assigned(_)));
        }
        assert_eq!(d.place(5, Request::new(5), 0), Placement::Queued);
        assert_eq!(d.place(6, Request::new(6), 0), Placement::Queued);
        assert_eq!(d.place(7, Request::new(7), 0), Placement::Rejected(Reject::QueueFull));
        assert_eq!(d.next_queued(0), None);
        d.finished(0, 1);
        assert_eq!(d.next_queued(1).map(|x| x.0), Some(5));
        assert_eq!(d.next_queued(1), None);
        // One back-end down: S = T_low − 1 = 1; the down one gets nothing.
        d.set_up(1, false, 2);
        assert_eq!(d.limit(), 1);
        for s in 0..2 {
            while d.backends().load(s) > 0 {
                d.finished(s, 3);
            }
        }
        assert_eq!(d.next_queued(3), Some((6, 0)));
        d.set_up(0, false, 4);
        assert_eq!(d.place(8, Request::new(8), 4), Placement::Rejected(Reject::NoBackend));
    }
}
