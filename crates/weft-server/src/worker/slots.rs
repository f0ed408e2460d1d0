//! The connection table's slots: connections falling asleep between
//! requests, waking for the next one, and closed.
//!
//! A keep-alive connection with nothing in flight keeps only its
//! [`IdleConn`](crate::conn::IdleConn), inline in its slab slot; its [`Conn`]
//! record goes back to the worker's [`weft_io::RecordPool`] and is lent again
//! when anything acts on the connection: an event, its timer, a stop, a
//! close. An idle connection's slot shrinks from a 352-byte record to its
//! idle record (issue 21; the proxy does the same with its clients), and a
//! request on a kept-alive connection still allocates nothing: the records
//! move between the pool and the slots in the same allocations.

use super::{Worker, RECORDS_KEPT};
use crate::conn::{Conn, HandedAt, Slot};
use weft_io::group::Drain;
use weft_io::sys::Fd;
use weft_io::{pools, timer, Ctx, Poller, Slab, Token};

/// The busy connection in slot `t`; None for an idle one (wake it first).
pub(crate) fn busy(conns: &mut Slab<Slot>, t: Token) -> Option<&mut Conn> {
    match conns.get_mut(t)? {
        Slot::Busy(c) => Some(&mut **c),
        Slot::Idle(_) => None,
    }
}

impl Worker<'_> {
    /// An idle connection gets its whole record again, before anything acts
    /// on it. No-op for a busy one or a stale token.
    pub(super) fn wake(&mut self, t: Token) {
        if !matches!(self.conns.get(t), Some(Slot::Idle(_))) {
            return;
        }
        let records = &mut self.shared.records;
        self.conns.update(t, |slot| match slot {
            Slot::Idle(idle) => Slot::Busy(records.lend(Conn::from_idle(idle, t))),
            busy => busy,
        });
        self.shared.stats.idle_connections -= 1;
    }

    /// A connection with nothing in flight keeps only its idle record; the
    /// rest goes back to the pool. No-op unless [`Conn::may_sleep`] (its
    /// buffers given back first) and no CGI request of it is in flight (the
    /// application's answer is what it waits for).
    pub(super) fn sleep(&mut self, t: Token) {
        let quiet = |c: &Conn| c.may_sleep() && !crate::cgi::busy(&self.shared, c);
        if !matches!(self.conns.get(t), Some(Slot::Busy(c)) if quiet(c)) {
            return;
        }
        let records = &mut self.shared.records;
        self.conns.update(t, |slot| match slot {
            Slot::Busy(c) => Slot::Idle(records.give_back(c, RECORDS_KEPT).into_idle()),
            idle => idle,
        });
        self.shared.stats.idle_connections += 1;
    }

    /// A stop finds `t` idle: it is closed, or kept asleep until the
    /// drain's deadline. False: `t` is not an idle connection.
    pub(super) fn drain_idle<P: Poller>(&mut self, cx: &mut Ctx<P>, t: Token) -> bool {
        let Some(Slot::Idle(i)) = self.conns.get_mut(t) else {
            return false;
        };
        match Drain::of(true, i.last_activity, cx.now) {
            Drain::KeepUntil(until) => {
                i.deadline = until;
                timer::arm(cx, t, until, &mut i.timer_at);
            }
            // (An idle connection is never `Finish`: nothing is in flight.)
            Drain::Close | Drain::Finish => self.close(cx, t),
        }
        true
    }

    /// Close connection `t`, busy or idle: its buffers back to the pools,
    /// its record back to the pool, its request in flight dropped.
    pub(super) fn close<P: Poller>(&mut self, cx: &mut Ctx<P>, t: Token) {
        let mut c = match self.conns.remove(t) {
            None => return,
            Some(Slot::Busy(c)) => self.shared.records.give_back(c, RECORDS_KEPT),
            Some(Slot::Idle(idle)) => {
                self.shared.stats.idle_connections -= 1;
                let (fd, handed) = idle.into_parts();
                self.closed_socket(cx, fd, handed);
                return;
            }
        };
        let s = &mut self.shared;
        pools::release_all(&mut c.input, &mut c.out, &mut s.pool, &mut s.own_pool);
        // cgi: drop its request in flight.
        crate::cgi::client_closed(s, t);
        if c.snapshot {
            s.tails.remove(&t);
        }
        crate::stream::closed(&c, s);
        self.closed_socket(cx, c.fd, c.handed);
    }

    /// A closed connection's socket: its front-end told (a handed-over
    /// one), then closed after the batch.
    fn closed_socket<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd, handed: Option<HandedAt>) {
        if let (Some(at), Some(h)) = (handed, self.handoff.as_mut()) {
            let (channel, id) = at.get();
            h.closed(channel, id);
        }
        if handed.is_some() {
            // The front-end may still hold it: out of our set first.
            cx.close_shared_later(fd);
        } else {
            cx.close_later(fd, true);
        }
    }
}
