//! What a timer that ran out does to its connection: a client (idle, slow to
//! send its head, a tunnel or a body whose kernel forwarding may still be
//! moving) or an upstream (connecting, answering, or waiting on its client).
//! `Worker::on_timer` has found the timer expired and counted the timeout;
//! these take it back when the connection turns out to be alive.

use super::Worker;
use crate::conn::{client_of, upstream_of, Phase};
use crate::tunnel::IdleLook;
use std::os::fd::AsFd;
use std::time::Instant;
use weft_io::{Ctx, Poller, Token};

impl Worker<'_> {
    /// Client `token`'s timer ran out (an idle one already woken).
    pub(super) fn client_timed_out<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) -> Option<Instant> {
        let c = client_of(&mut self.slab, token)?;
        if c.fill_wait.take().is_some() {
            // The fill it waited for is slow: it asks the origin
            // itself (the fill's wake-up will find it gone).
            self.sh.stats.timeouts -= 1;
            self.drive(cx, token);
            return None;
        }
        // A sockmap tunnel is idle if no peer acked a byte (`idle_timer`).
        let up = c.tunnel.as_ref().map(|&(_, up)| up);
        let up_fd = up.and_then(|up| Some(upstream_of(&mut self.slab, up)?.fd.raw()));
        let c = client_of(&mut self.slab, token)?;
        if let Some((t, _)) = c.tunnel.as_mut() {
            let idle = cx.now >= c.last_activity + self.sh.cfg.tunnel_idle();
            let fds = c.fd.as_ref().map(|fd| fd.raw()).zip(up_fd).map(|(a, b)| [a, b]);
            match t.idle_timer(&mut self.sh.sockmap, fds, idle) {
                IdleLook::Look => {
                    self.sh.stats.timeouts -= 1;
                    self.drive(cx, token);
                    return None;
                }
                IdleLook::Alive { drive } => {
                    self.sh.stats.timeouts -= 1;
                    let later = cx.now + self.sh.cfg.tunnel_idle();
                    (c.last_activity, c.deadline, c.timer_at) = (cx.now, Some(later), Some(later));
                    if drive && !self.ready.contains(&token) {
                        self.ready.push(token);
                    }
                    return Some(later);
                }
                IdleLook::Idle => {}
            }
        }
        // Likewise a body: the bytes its client acknowledged.
        let relay = c.txn.as_mut().and_then(|t| t.relay.as_mut());
        if let (Some(r), Some(fd)) = (relay, c.fd.as_ref()) {
            if r.kernel_progress(&mut self.sh.sockmap, fd.as_fd()) == Some(true) {
                self.sh.stats.timeouts -= 1;
                let later = cx.now + self.sh.cfg.send_timeout;
                (c.last_activity, c.deadline, c.timer_at) = (cx.now, Some(later), Some(later));
                // It may have found the body's end (a report the full ring lost).
                if !self.ready.contains(&token) {
                    self.ready.push(token);
                }
                return Some(later);
            }
        }
        c.tell_head_timed_out(self.sh.date.get());
        self.close_client(cx, token);
        None
    }

    /// Upstream `token`'s timer ran out: `owner`, the client it serves
    /// (None: idle in the pool), `connecting` and `waiting` (for its own
    /// socket) as they were.
    pub(super) fn upstream_timed_out<P: Poller>(
        &mut self,
        cx: &mut Ctx<P>,
        token: Token,
        owner: Option<Token>,
        connecting: bool,
        waiting: bool,
    ) -> Option<Instant> {
        let Some(ct) = owner else {
            self.close_upstream(cx, token);
            return None;
        };
        let client = client_of(&mut self.slab, ct);
        let present = client.as_ref().is_some_and(|c| c.fd.is_some());
        let phase = client.and_then(|c| c.txn.as_ref()).map(|t| t.phase);
        if !waiting && !connecting && present && phase == Some(Phase::Body) {
            // The body waits on the client, not the upstream: the
            // client's send timeout governs. (Not once the client
            // has gone and a cache fill goes on without it: it has
            // no send timeout, and a fill that waits on anything
            // but its upstream for this long is given up.)
            self.sh.stats.timeouts -= 1;
            let later = cx.now + self.sh.cfg.upstream_timeout;
            let u = upstream_of(&mut self.slab, token)?;
            u.deadline = Some(later);
            u.timer_at = Some(later);
            return Some(later);
        }
        match phase {
            Some(Phase::Body) => {
                self.close_client(cx, ct);
            }
            Some(_) => {
                let reason = if connecting {
                    "upstream connect timed out"
                } else {
                    "upstream response timed out"
                };
                self.fail(cx, ct, 504, reason);
                self.drive(cx, ct);
            }
            None => self.close_upstream(cx, token),
        }
        None
    }
}
