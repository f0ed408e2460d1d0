//! `--handoff-socket`: client connections handed over by `weft front --mode
//! handoff` (protocol: `weft_io::handoff`).
//!
//! Every worker holds a duplicate of the one Unix SEQPACKET listener; a
//! front-end worker connects once and the serve worker that accepts it owns
//! that channel. Each handoff message carries a client socket and the bytes
//! the front-end read from it: the worker adopts the socket through the same
//! path as an accepted connection (`Worker::add_conn`), its input buffer
//! starting with those bytes, and from then on the connection is an ordinary
//! one. Its later requests follow the rule the handoff named
//! (`weft_io::handoff::NextRule`, docs/front.md "the next request"): all
//! answered here (`keep`), each given back after its response (`return`),
//! answered here when this back-end owns the next request's target in the
//! front-end's map and given back otherwise (`owner`: the map is the
//! front-end's shared table, mapped read-only when the channel opens), or
//! answered with `Connection: close` (`close`). When an adopted
//! connection closes, for any reason, its id is queued on its channel and
//! every channel's ids go back to the front-end in one message per loop
//! batch, so the front-end's load for this back-end falls exactly once per
//! connection.

use super::{Handed, Worker};
use crate::conn::{Conn, Slot};
use std::io::{self, IoSlice};
use weft_io::handoff::{self as proto, MAX_MESSAGE, MAX_REPORT_IDS};
use weft_io::handoff::{NextRule, OwnerMap};
use weft_io::sys::{self, Fd};
use weft_io::{Ctx, Interest, Poller, Readiness, Slab, Token};

/// The handoff listener's event token.
pub(super) const LISTENER: Token = Token::new(u32::MAX - 2, 0);
/// Channel tokens are the channel slab's, moved up to here (far above any
/// connection's slot index).
const CHANNEL_BASE: u32 = 0xFFF0_0000;

/// One front-end worker's connection.
struct Channel {
    fd: Fd,
    /// Ids of adopted connections closed since the last report.
    closed: Vec<u64>,
    /// `--handoff-next owner`: the front-end's owner table and this
    /// back-end's index in it.
    owners: Option<(sys::SharedWords, u64)>,
}

/// What a handed connection does with its next request (after the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Go back to the front-end with the bytes read.
    Back,
    /// Answer it here.
    Answer,
    /// Its request line is not all read yet: read on.
    Wait,
}

/// The next request's fate on a connection whose rule may give it back.
pub(super) fn next_step(h: Option<&Handoff>, c: &Conn) -> Step {
    let Some(at) = c.handed else { return Step::Answer };
    match at.rule() {
        NextRule::Keep | NextRule::Close => Step::Answer,
        NextRule::Return => Step::Back,
        NextRule::Owner => {
            let Some(target) = proto::request_target(c.input.pending()) else {
                return Step::Wait;
            };
            let owners = h
                .and_then(|h| h.channels.get(at.get().0))
                .and_then(|ch| ch.owners.as_ref());
            let Some((table, me)) = owners else { return Step::Back };
            // The front-end places by the normalized origin-form target; a
            // path without dot-segments is its own normal form.
            let id = if !target.starts_with(b"/") {
                return Step::Back; // absolute-form: the front-end decides
            } else if memchr::memmem::find(target, b"/.").is_none() {
                proto::target_id(target)
            } else {
                let mut norm = Vec::with_capacity(target.len());
                if weft_http::normalize_path(target, &mut norm).is_err() {
                    return Step::Back;
                }
                proto::target_id(&norm)
            };
            if OwnerMap(table.words()).owner(id) == Some(*me) {
                Step::Answer
            } else {
                Step::Back
            }
        }
    }
}

/// Go back now (the worker's `drive`, once the connection is idle)?
pub(super) fn goes_back(h: Option<&Handoff>, c: &Conn) -> bool {
    next_step(h, c) == Step::Back
}

/// Answer with `Connection: close` (`--handoff-next close`)?
pub(super) fn closes(c: &Conn) -> bool {
    c.handed.is_some_and(|h| h.rule() == NextRule::Close)
}

/// A worker's handoff state.
pub(crate) struct Handoff {
    listener: Option<Fd>,
    channels: Slab<Channel>,
    /// One message's room (allocated once, when the worker starts).
    buf: Vec<u8>,
    /// Channels with ids to report.
    due: Vec<Token>,
    report: Vec<u8>,
}

impl Handoff {
    pub(crate) fn new(listener: Fd) -> Handoff {
        Handoff {
            listener: Some(listener),
            channels: Slab::new(),
            buf: vec![0; MAX_MESSAGE],
            due: Vec::new(),
            report: Vec::with_capacity(1 + 8 * MAX_REPORT_IDS),
        }
    }

    pub(super) fn register<P: Poller>(&self, cx: &mut Ctx<P>) -> io::Result<()> {
        if let Some(l) = &self.listener {
            cx.register(l.raw(), LISTENER, Interest::READ)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(())
    }

    /// Stop taking new front-end connections (draining).
    pub(super) fn stop_listening<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if let Some(l) = self.listener.take() {
            cx.close_later(l, true);
        }
    }

    /// Is `t` one of this worker's channels?
    pub(super) fn is_channel(t: Token) -> bool {
        (CHANNEL_BASE..u32::MAX - 16).contains(&t.index())
    }

    /// Reports could not all be sent (a full channel): wake soon to retry.
    pub(super) fn reports_waiting(&self) -> bool {
        !self.due.is_empty()
    }

    /// Queue the close of connection `id` handed over on `channel`.
    pub(super) fn closed(&mut self, channel: Token, id: u64) {
        if let Some(ch) = self.channels.get_mut(channel) {
            if ch.closed.is_empty() {
                self.due.push(channel);
            }
            ch.closed.push(id);
        }
    }

    /// Send the queued reports: one message per channel (ids in chunks of
    /// MAX_REPORT_IDS). A full channel keeps the rest for the next batch; a
    /// broken one is dropped.
    pub(super) fn send_reports<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let mut due = std::mem::take(&mut self.due);
        due.retain(|&t| {
            let Some(ch) = self.channels.get_mut(t) else {
                return false;
            };
            while !ch.closed.is_empty() {
                let k = ch.closed.len().min(MAX_REPORT_IDS);
                self.report.clear();
                proto::closed_report(&mut self.report, &ch.closed[..k]);
                match sys::send(&ch.fd, &self.report, false) {
                    Ok(_) => {
                        ch.closed.drain(..k);
                    }
                    Err(e) if sys::is(&e, sys::Errno::WouldBlock) => return true,
                    Err(_) => {
                        ch.closed.clear();
                        if let Some(ch) = self.channels.remove(t) {
                            cx.close_later(ch.fd, true);
                        }
                        return false;
                    }
                }
            }
            false
        });
        self.due = due;
    }
}

impl Worker<'_> {
    /// Accept front-end connections (until EAGAIN: they are few).
    pub(super) fn accept_channels<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some(h) = self.handoff.as_mut() else { return };
        let Some(l) = h.listener.as_ref() else { return };
        loop {
            match sys::accept(l) {
                Ok((fd, _)) => {
                    let slot = h.channels.next_token();
                    let t = Token::new(CHANNEL_BASE + slot.index(), slot.generation());
                    if cx.register(fd.raw(), t, Interest::READ).is_err() {
                        continue; // dropped: the front-end sees EOF
                    }
                    h.channels.insert_with(|_| Channel {
                        fd,
                        closed: Vec::new(),
                        owners: None,
                    });
                }
                Err(e) if sys::is(&e, sys::Errno::WouldBlock) => {
                    cx.learned(l.raw(), Readiness::default());
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    weft_core::debug!("handoff accept: {e}");
                    return;
                }
            }
        }
    }

    /// A channel is readable: adopt every connection it carries (until
    /// EAGAIN), or drop it when the front-end is gone.
    pub(super) fn read_channel<P: Poller>(&mut self, cx: &mut Ctx<P>, event: Token) {
        let t = Token::new(event.index() - CHANNEL_BASE, event.generation());
        let Some(h) = self.handoff.as_mut() else { return };
        let mut buf = std::mem::take(&mut h.buf);
        while let Some(ch) = self.handoff.as_mut().and_then(|h| h.channels.get_mut(t)) {
            match sys::recv_fd_with(&ch.fd, &mut buf) {
                Ok((None, 0)) => {
                    self.drop_channel(cx, t);
                    break;
                }
                Ok((Some(fd), n)) if proto::parse_owner_table(&buf[..n]).is_some() => {
                    let me = proto::parse_owner_table(&buf[..n]).unwrap_or(u64::MAX);
                    match sys::SharedWords::open(fd) {
                        Ok(t) => ch.owners = Some((t, me)),
                        Err(e) => weft_core::warn!("handoff channel: cannot map the owner table: {e}"),
                    }
                }
                Ok((fd, n)) => match (fd, proto::parse_handoff(&buf[..n])) {
                    (Some(fd), Some((id, rule, bytes))) => {
                        // The client's address is only for the access log: no
                        // getpeername per handoff without one.
                        let peer = match self.shared.log {
                            Some(_) => sys::peer_addr(&fd).ok(),
                            None => None,
                        };
                        let handed = Handed {
                            channel: t,
                            id,
                            rule,
                            bytes,
                        };
                        self.add_conn(cx, fd, peer, Some(handed));
                    }
                    // No socket came with it: closed at once.
                    (None, Some((id, _, _))) => {
                        if let Some(h) = self.handoff.as_mut() {
                            h.closed(t, id);
                        }
                    }
                    (_, None) => {
                        weft_core::warn!("handoff channel: not a handoff message: dropping the channel");
                        self.drop_channel(cx, t);
                        break;
                    }
                },
                Err(e) if sys::is(&e, sys::Errno::WouldBlock) => {
                    cx.learned(ch.fd.raw(), Readiness::default());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    weft_core::warn!("handoff channel: {e}: dropping the channel");
                    self.drop_channel(cx, t);
                    break;
                }
            }
        }
        if let Some(h) = self.handoff.as_mut() {
            h.buf = buf;
        }
    }

    /// Give connection `token` back to the front-end it came from, with the
    /// bytes read after its last answer (`wants_back`). False: kept (its
    /// channel is gone or full): it is served here as usual.
    pub(super) fn give_back<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) -> bool {
        let (Some(h), Some(Slot::Busy(c))) = (self.handoff.as_mut(), self.conns.get(token)) else {
            return false;
        };
        let Some((channel, id)) = c.handed.map(|at| at.get()) else {
            return false;
        };
        let Some(ch) = h.channels.get_mut(channel) else {
            return false;
        };
        let header = proto::back_header(id);
        let parts = [IoSlice::new(&header), IoSlice::new(c.input.pending())];
        if sys::send_fd_with(&ch.fd, &c.fd, &parts).is_err() {
            return false;
        }
        self.shared.stats.given_back += 1;
        let Some(Slot::Busy(c)) = self.conns.remove(token) else {
            return true;
        };
        let mut c = self.shared.records.give_back(c, super::RECORDS_KEPT);
        weft_io::pools::release_all(
            &mut c.input,
            &mut c.out,
            &mut self.shared.pool,
            &mut self.shared.own_pool,
        );
        // The socket lives on in the front-end: out of our epoll set
        // explicitly (closing does not), closed here without a report.
        cx.close_shared_later(c.fd);
        true
    }

    /// The front-end worker is gone: its connections stay ours (and are
    /// answered), their reports have nowhere to go.
    fn drop_channel<P: Poller>(&mut self, cx: &mut Ctx<P>, t: Token) {
        if let Some(ch) = self.handoff.as_mut().and_then(|h| h.channels.remove(t)) {
            cx.close_later(ch.fd, true);
        }
    }
}
