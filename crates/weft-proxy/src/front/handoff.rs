//! `--mode handoff`: the client's connection itself goes to the back-end.
//!
//! Each front-end worker keeps one Unix SEQPACKET channel per back-end
//! (`weft serve --handoff-socket`), connected on first use. When the
//! dispatcher places a connection's first request, the worker sends the
//! client socket (SCM_RIGHTS) with every byte it read from it (the request
//! head, and whatever followed: pipelined requests, a body's start), closes
//! its own copy and forgets the client. The back-end answers the client
//! directly; its later requests follow `--handoff-next` (docs/front.md, "the
//! next request"): answered there (`keep`), the connection given back after
//! each response (`return`), answered there when the back-end owns their
//! target in this front-end's map and given back otherwise (`owner`: the
//! map's owner table is shared memory sent once per channel), or closed
//! after the response (`close`). Response bytes never cross the front-end.
//!
//! Load: a handed-over connection holds its back-end's load slot until the
//! back-end reports it closed on the same channel (protocol:
//! `weft_io::handoff`); then `Dispatcher::finished` runs once for it. When a
//! channel ends (the back-end died or restarted), every connection handed
//! over on it and not yet reported is finished at once and the back-end is
//! marked down (passive health; the active checks bring it back). A worker
//! only needs a count per channel: reports come back on the channel the
//! connection went out on, each id once.

use super::Front;
use crate::worker::{client_of, Worker};
use std::io::{self, IoSlice};
use weft_io::handoff::{self as proto, MAX_MESSAGE};
use weft_io::sys::{self, Fd};
use weft_io::{Ctx, Interest, Poller, Token};
use weft_policy::distribution::ServerId;

/// Channel tokens count down from here (back-end s: `CHANNEL_TOP - s`),
/// below the worker's fixed tokens and far above any slab slot.
const CHANNEL_TOP: u32 = u32::MAX - 64;
/// Back-ends a front-end may hand off to.
pub(crate) const MAX_BACKENDS: usize = 4096;

/// One back-end's channel in one worker.
struct Channel {
    fd: Fd,
    /// Connections handed over and not yet reported closed.
    outstanding: u64,
}

/// A worker's channels, by back-end.
#[derive(Default)]
pub(crate) struct Channels {
    by_backend: Vec<Option<Channel>>,
    next_id: u64,
    /// Room for one report message.
    buf: Vec<u8>,
}

/// The back-end whose channel has event token `t`, if it is one.
pub(crate) fn channel_of(t: Token) -> Option<ServerId> {
    let i = t.index();
    (i <= CHANNEL_TOP && i > CHANNEL_TOP - MAX_BACKENDS as u32 && t.generation() == 0)
        .then(|| (CHANNEL_TOP - i) as ServerId)
}

fn channel_token(s: ServerId) -> Token {
    Token::new(CHANNEL_TOP - s as u32, 0)
}

/// Why a handoff did not happen.
enum Refused {
    /// The channel could not be opened or is broken: the back-end is down;
    /// nothing was sent, so the request may go elsewhere.
    Down,
    /// The back-end's queue is full (it is not taking connections fast
    /// enough): 503.
    Busy,
    /// More bytes than one message carries (cannot happen within the head
    /// limits): 502.
    TooLarge,
}

impl Worker<'_> {
    /// Hand client `ct` to back-end `s` (placed there: its load is held).
    /// On refusal the load is given back and the request placed again
    /// (back-end down) or answered 503 / 502.
    pub(crate) fn hand_off<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, s: ServerId, front: &Front) {
        match self.send_client(cx, ct, s, front) {
            Ok(()) => {
                front.count_handoff();
                self.forget_handed_client(cx, ct);
            }
            Err(Refused::Down) => {
                front.finished(s);
                front.failed(s);
                front.count_retry();
                self.front_place(cx, ct, front);
            }
            Err(Refused::Busy) => {
                front.finished(s);
                self.fail(cx, ct, 503, "the back-end is not taking connections");
            }
            Err(Refused::TooLarge) => {
                front.finished(s);
                self.fail(cx, ct, 502, "request too large to hand over");
            }
        }
    }

    /// One message on `s`'s channel: the client's socket and its bytes.
    fn send_client<P: Poller>(
        &mut self,
        cx: &mut Ctx<P>,
        ct: Token,
        s: ServerId,
        front: &Front,
    ) -> Result<(), Refused> {
        self.open_channel(cx, s, front)?;
        let id = self.channels.next_id;
        let header = proto::handoff_header(id, front.next_rule());
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Ok(()); // gone: nothing to send (its load is released by close)
        };
        let Some(fd) = c.fd.as_ref() else { return Ok(()) };
        let parts = [
            IoSlice::new(&header),
            IoSlice::new(&c.req_data),
            IoSlice::new(c.input.pending()),
        ];
        if parts.iter().map(|p| p.len()).sum::<usize>() > MAX_MESSAGE {
            return Err(Refused::TooLarge);
        }
        let Some(ch) = self.channels.by_backend[s].as_mut() else {
            return Err(Refused::Down);
        };
        match sys::send_fd_with(&ch.fd, fd, &parts) {
            Ok(_) => {
                ch.outstanding += 1;
                self.channels.next_id += 1;
                Ok(())
            }
            Err(e) if sys::is(&e, sys::Errno::WouldBlock) => Err(Refused::Busy),
            Err(e) => {
                weft_core::debug!("handoff to back-end {s}: {e}");
                self.channel_ended(cx, s, front);
                Err(Refused::Down)
            }
        }
    }

    /// Connect `s`'s channel if this worker has none yet.
    fn open_channel<P: Poller>(&mut self, cx: &mut Ctx<P>, s: ServerId, front: &Front) -> Result<(), Refused> {
        let chans = &mut self.channels.by_backend;
        if chans.len() <= s {
            chans.resize_with(s + 1, || None);
        }
        if chans[s].is_some() {
            return Ok(());
        }
        let path = front.handoff_path(s).ok_or(Refused::Down)?;
        let fd = sys::seqpacket_connect(path).map_err(|e| {
            weft_core::warn!("cannot connect to back-end {s}'s handoff socket {path}: {e}");
            Refused::Down
        })?;
        // `--handoff-next owner`: the back-end maps the front-end's owner
        // table first (the channel's first message, so it is there before
        // any handoff).
        if let Some(t) = front.owner_table() {
            let header = proto::owner_table_header(s as u64);
            sys::send_fd_with(&fd, t.fd(), &[IoSlice::new(&header)]).map_err(|e| {
                weft_core::warn!("cannot send the owner table to back-end {s}: {e}");
                Refused::Down
            })?;
        }
        cx.register(fd.raw(), channel_token(s), Interest::READ)
            .map_err(|_| Refused::Down)?;
        chans[s] = Some(Channel { fd, outstanding: 0 });
        Ok(())
    }

    /// The client went to a back-end: its socket is the back-end's now.
    /// Drop it here without touching the connection (no shutdown, no
    /// linger) and without releasing its load (the back-end's report will).
    fn forget_handed_client<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let Some(c) = client_of(&mut self.slab, ct) else { return };
        if let Some(mut txn) = c.txn.take() {
            txn.addrs.clear();
            c.spare = Some(txn);
        }
        c.input.clear();
        // The socket lives on in the back-end, so closing our descriptor
        // would not end epoll's registration of it: `close_client` removes
        // it first in handoff mode.
        self.close_client(cx, ct);
    }

    /// `s`'s channel is readable: closed reports, or its end.
    pub(crate) fn on_handoff_channel<P: Poller>(&mut self, cx: &mut Ctx<P>, s: ServerId) {
        let Some(front) = self.sh.cfg.front.as_deref() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.channels.buf);
        buf.resize(MAX_MESSAGE, 0);
        while let Some(ch) = self.channels.by_backend.get_mut(s).and_then(Option::as_mut) {
            match sys::recv_fd_with(&ch.fd, &mut buf) {
                Ok((None, 0)) => {
                    self.channel_ended(cx, s, front);
                    break;
                }
                Ok((Some(fd), n)) if proto::parse_back(&buf[..n]).is_some() => {
                    // A connection given back: its load ends here, and its
                    // next request is placed like a new connection's.
                    ch.outstanding = ch.outstanding.saturating_sub(1);
                    front.finished_n(s, 1);
                    front.count_handed_back();
                    let bytes = proto::parse_back(&buf[..n]).map_or(&[][..], |(_, b)| b);
                    let peer = sys::peer_addr(&fd).ok();
                    self.add_client(cx, fd, peer, bytes);
                }
                // Any other descriptor is not in the protocol: it is closed.
                Ok((_, n)) => match proto::parse_closed(&buf[..n]) {
                    Some(ids) => {
                        let k = (ids.count() as u64).min(ch.outstanding);
                        ch.outstanding -= k;
                        front.finished_n(s, k);
                    }
                    None => {
                        weft_core::warn!("back-end {s}'s handoff channel sent an unknown message: dropped");
                        self.channel_ended(cx, s, front);
                        break;
                    }
                },
                Err(e) if sys::is(&e, sys::Errno::WouldBlock) => {
                    cx.learned(ch.fd.raw(), weft_io::Readiness::default());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.channel_ended(cx, s, front);
                    break;
                }
            }
        }
        self.channels.buf = buf;
    }

    /// `s`'s channel is gone: what it carried counts as finished, and the
    /// back-end is down until the health checks see it again.
    fn channel_ended<P: Poller>(&mut self, cx: &mut Ctx<P>, s: ServerId, front: &Front) {
        let Some(ch) = self.channels.by_backend.get_mut(s).and_then(Option::take) else {
            return;
        };
        front.finished_n(s, ch.outstanding);
        front.failed(s);
        cx.close_later(ch.fd, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_tokens_name_their_back_end_only() {
        for s in [0, 1, MAX_BACKENDS - 1] {
            assert_eq!(channel_of(channel_token(s)), Some(s));
        }
        assert_eq!(channel_of(Token::new(0, 0)), None);
        assert_eq!(channel_of(Token::new(u32::MAX - 5, 0)), None);
        assert_eq!(channel_of(Token::new(CHANNEL_TOP - MAX_BACKENDS as u32, 0)), None);
    }
}
