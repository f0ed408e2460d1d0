//! The worker's front-end hooks: each request of a client connection is
//! placed on its own by the dispatcher (content-aware per request), its load
//! is released exactly once when its transaction ends (response complete,
//! failure, or client gone), and a back-end that refuses connections or
//! drops a request before answering is marked down and the request is placed
//! again when that is safe (idempotent, nothing sent to the client yet).
//!
//! A transaction holds a load slot while `txn.addrs` names its back-end
//! (filled only by a placement here; cleared when the slot is released), so
//! no field is added to the transaction for this.

use super::{Admitted, Front};
use crate::config::ProxyConfig;
use crate::conn::{Phase, Txn};
use crate::worker::{client_of, Flow, Worker};
use weft_http::Method;
use weft_io::{Ctx, Poller, Token};
use weft_policy::distribution::{Placement, Reject};

/// The target's id for the policy: a hash of the request target (path and
/// query), the one the back-ends compute too (`--handoff-next owner`).
pub(crate) fn target_id(path: &[u8]) -> u64 {
    weft_io::handoff::target_id(path)
}

/// The transaction's back-end slot goes back to the dispatcher (once).
pub(crate) fn release(cfg: &ProxyConfig, txn: &mut Txn) {
    let Some(front) = cfg.front.as_deref() else { return };
    if let Some(a) = txn.addrs.first() {
        match front.booster() {
            // Keyed by site, not by origin: sites may share an origin.
            Some(b) => txn
                .booster_site
                .take()
                .into_iter()
                .for_each(|(site, _)| b.finished(site)),
            None => front.index_of(a).into_iter().for_each(|s| front.finished(s)),
        }
        txn.addrs.clear();
        txn.addr_index = 0;
    }
}

/// Response bytes from the transaction's back-end (head and announced body).
pub(crate) fn count_bytes(cfg: &ProxyConfig, txn: &Txn, n: u64) {
    if let Some(front) = cfg.front.as_deref() {
        if let Some(s) = txn.addrs.first().and_then(|a| front.index_of(a)) {
            front.add_bytes(s, n);
        }
    }
}

/// May the request go to another back-end after this one failed? Nothing of
/// the response was sent, the request had no body (it cannot be sent again)
/// and it is idempotent.
fn may_place_again(txn: &Txn, connected: bool) -> bool {
    let idempotent = txn.method.is_safe() || matches!(txn.method, Method::Put | Method::Delete);
    !txn.responded && !txn.connect && (!connected || (idempotent && !txn.had_body))
}

impl Worker<'_> {
    /// Place the transaction of `ct` (it has just been routed): send it to
    /// the chosen back-end, leave it waiting for admission, or answer 503.
    pub(crate) fn front_place<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, front: &Front) {
        if let Some(b) = front.booster() {
            return self.booster_place(cx, ct, b);
        }
        let index = self.sh.index;
        let Some(c) = client_of(&mut self.slab, ct) else { return };
        let Some(txn) = c.txn.as_mut() else { return };
        let placed = front.place(index, ct, target_id(&txn.path));
        match placed {
            Placement::Assigned(s) if front.hands_off() => self.hand_off(cx, ct, s, front),
            Placement::Assigned(s) => {
                txn.addrs.clear();
                txn.addrs.push(front.addr(s));
                txn.addr_index = 0;
                txn.phase = Phase::Connect;
            }
            // Phase::Resolve waits for an event; the admission comes
            // through the front-end's mailbox (`on_front_admitted`).
            Placement::Queued => txn.phase = Phase::Resolve,
            Placement::Rejected(Reject::QueueFull) => {
                self.fail(cx, ct, 503, "the front-end's queue is full");
            }
            Placement::Rejected(Reject::NoBackend) => {
                self.fail(cx, ct, 503, "no back-end is up");
            }
        }
    }

    /// Requests let in by another placement's end (on any worker).
    pub(crate) fn on_front_admitted<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let cfg = self.sh.cfg;
        let Some(front) = cfg.front.as_deref() else { return };
        let mut admitted: Vec<Admitted> = Vec::new();
        front.take_admitted(self.sh.index, &mut admitted);
        for a in admitted {
            let waiting = client_of(&mut self.slab, a.token)
                .and_then(|c| c.txn.as_mut())
                .filter(|t| t.phase == Phase::Resolve && t.addrs.is_empty());
            match (waiting, a.server) {
                (Some(_), Some(s)) if front.hands_off() => self.hand_off(cx, a.token, s, front),
                (Some(txn), Some(s)) => {
                    txn.addrs.push(front.addr(s));
                    txn.addr_index = 0;
                    txn.phase = Phase::Connect;
                }
                (Some(_), None) => {
                    self.fail(cx, a.token, 503, "no back-end is up");
                }
                // The client left while it waited: its slot is free again.
                (None, Some(s)) => {
                    front.finished(s);
                    continue;
                }
                (None, None) => continue,
            }
            self.drive(cx, a.token);
        }
    }

    /// The back-end of `ct`'s transaction failed (`connected`: after the
    /// connection was up, so the request may have reached it). Mark it down,
    /// release its slot and place the request again when safe. None: not in
    /// front-end mode, or not safe (the caller answers 502).
    pub(crate) fn front_backend_failed<P: Poller>(
        &mut self,
        cx: &mut Ctx<P>,
        ct: Token,
        connected: bool,
    ) -> Option<Flow> {
        let cfg = self.sh.cfg;
        let front = cfg.front.as_deref()?;
        if front.booster().is_some() {
            return self.booster_failed(cx, ct, connected);
        }
        let c = client_of(&mut self.slab, ct)?;
        let txn = c.txn.as_mut()?;
        let s = txn.addrs.first().and_then(|a| front.index_of(a))?;
        front.failed(s);
        if !may_place_again(txn, connected) {
            return None;
        }
        let ut = txn.up.take();
        release(cfg, txn);
        if let Some(ut) = ut {
            self.close_upstream(cx, ut);
        }
        front.count_retry();
        self.sh.stats.upstream_retries += 1;
        self.front_place(cx, ct, front);
        Some(Flow::Again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids_are_stable_and_spread() {
        assert_eq!(target_id(b"/a"), target_id(b"/a"));
        assert_ne!(target_id(b"/a"), target_id(b"/b"));
        assert_ne!(target_id(b"/a?x=1"), target_id(b"/a"));
    }

    #[test]
    fn only_safe_requests_are_placed_again() {
        let mut t = Txn::new();
        assert!(may_place_again(&t, true), "a GET with nothing sent");
        t.method = Method::Post;
        assert!(!may_place_again(&t, true), "a POST that may have arrived");
        assert!(may_place_again(&t, false), "a POST never connected");
        t.method = Method::Get;
        t.responded = true;
        assert!(!may_place_again(&t, false), "part of the response went out");
    }
}
