//! One client connection: buffers, output queue, readiness and deadlines.
//!
//! The connection keeps its own view of the socket's readiness (`may_read`):
//! set by a readable event, cleared by a short read or EAGAIN. A short read means
//! the kernel's queue was empty at that moment and any later arrival raises a new
//! event, so the connection never issues a read that is bound to return EAGAIN.
//! The one arrival that raises no new event is a FIN that came with the last
//! data: the event that reported the data also said the peer closed its side
//! (`read_closed`, from RDHUP), and from then on a short read is not taken as
//! "drained" — the next read returns the end-of-file. That is user-level
//! readiness tracking in its simplest form, and it is correct for both level-
//! and edge-triggered backends. The rule is written once, in weft-io
//! (`Event::merge_read`, `InputBuf::may_hold_more`), for every role.

use std::net::SocketAddr;
use std::time::Instant;
use weft_io::{Fd, InputBuf, Interest, OutChain, Token};

/// Connection state.
pub struct Conn {
    pub fd: Fd,
    pub token: Token,
    pub peer: Option<SocketAddr>,
    /// Unparsed input; holds a buffer lent from the worker's pool only while
    /// bytes are pending (an idle keep-alive connection holds none).
    pub input: InputBuf,
    /// The socket may have unread input (see the module doc).
    pub may_read: bool,
    /// The backend reported the peer's FIN (see the module doc).
    pub read_closed: bool,
    /// The peer closed its side.
    pub eof: bool,
    /// Response heads and bodies queued to send (a file body as a range);
    /// its own-bytes buffer is lent from the worker's pool while bytes are
    /// queued, like the input's.
    pub out: OutChain,
    /// Current registration (level-triggered backends update it).
    pub interest: Interest,
    /// Requests answered on this connection.
    pub requests: u64,
    /// Close once the queued output is sent.
    pub close_after: bool,
    /// Answered with an error: close lingering, so the client can read the
    /// response before the kernel would reset the connection.
    pub linger_on_close: bool,
    /// Shut down for writing; reading and discarding until EOF or the deadline.
    pub lingering: bool,
    /// Request body bytes still to skip.
    pub discard: u64,
    /// When the current request head began to arrive.
    pub head_started: Option<Instant>,
    /// Last read or write progress.
    pub last_activity: Instant,
    /// The connection's single deadline (which timeout applies depends on state).
    pub deadline: Instant,
    /// When the earliest timer entry for this connection is due (see `Worker::schedule`).
    pub timer_at: Option<Instant>,
    /// In the worker's list of connections to resume after this pass (it
    /// used up its request budget with work left).
    pub resume_queued: bool,
    /// Handed over by a front-end: its channel and id there, reported back
    /// when the connection closes (`worker/handoff.rs`).
    pub handed: Option<HandedAt>,
    /// AMPED: waiting for a helper (the request stays in `input`).
    pub parked: bool,
    /// A file body's last bytes wait in the worker's table until the file
    /// is checked again (a response is a snapshot; `worker/amped.rs`).
    pub snapshot: bool,
    /// `crate::stream`'s state, one byte so the struct keeps its size:
    /// [`FEEDING`] (a large body is being fed chunk by chunk) and
    /// [`ZC_HELD`] (slices sent with MSG_ZEROCOPY wait for the kernel).
    pub stream: u8,
}

/// See [`Conn::stream`].
pub const FEEDING: u8 = 1;
/// See [`Conn::stream`].
pub const ZC_HELD: u8 = 2;

/// Where a handed-over connection came from, in 16 bytes (the channel's
/// slot index is stored + 1, so `Option<HandedAt>` needs no tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandedAt {
    id: u64,
    slot: std::num::NonZeroU32,
    generation: u32,
}

/// The top two bits of a stored id: the next-request rule
/// (`weft_io::handoff::NextRule`).
const RULE_SHIFT: u32 = 62;

impl HandedAt {
    pub fn new(channel: Token, id: u64, rule: weft_io::handoff::NextRule) -> HandedAt {
        HandedAt {
            id: (id & ((1 << RULE_SHIFT) - 1)) | (rule.bits() << RULE_SHIFT),
            slot: std::num::NonZeroU32::MIN.saturating_add(channel.index()),
            generation: channel.generation(),
        }
    }

    /// The channel's token and the connection's id on it.
    pub fn get(self) -> (Token, u64) {
        (
            Token::new(self.slot.get() - 1, self.generation),
            self.id & ((1 << RULE_SHIFT) - 1),
        )
    }

    /// What the back-end does with the connection's later requests.
    pub fn rule(self) -> weft_io::handoff::NextRule {
        weft_io::handoff::NextRule::from_bits(self.id >> RULE_SHIFT)
    }

    /// May the connection go back to the front-end after a response?
    pub fn gives_back(self) -> bool {
        use weft_io::handoff::NextRule;
        matches!(self.rule(), NextRule::Return | NextRule::Owner)
    }
}

impl Conn {
    /// The client may still be sending: bytes read but unanswered, a body
    /// being skipped, a socket that may hold more, or one whose reads went
    /// unwatched while a long response waited for the socket (a
    /// level-triggered registration asks for WRITE alone then) — nginx's heuristic for a lingering
    /// close, the flags' part of [`weft_io::must_linger`], which asks the
    /// kernel when these see nothing.
    pub fn may_send_more(&self) -> bool {
        !self.eof && (!self.input.is_empty() || self.discard > 0 || self.may_read || self.interest == Interest::WRITE)
    }

    pub fn new(fd: Fd, token: Token, peer: Option<SocketAddr>, interest: Interest, now: Instant) -> Conn {
        Conn {
            fd,
            token,
            peer,
            input: InputBuf::new(),
            may_read: false,
            read_closed: false,
            eof: false,
            out: OutChain::new(),
            interest,
            requests: 0,
            close_after: false,
            linger_on_close: false,
            lingering: false,
            discard: 0,
            head_started: None,
            last_activity: now,
            deadline: now,
            timer_at: None,
            resume_queued: false,
            handed: None,
            parked: false,
            snapshot: false,
            stream: 0,
        }
    }

    /// Anything queued to send?
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Nothing in flight: no output, no buffered or partial request.
    #[inline]
    pub fn is_idle(&self) -> bool {
        !self.has_output() && self.input.is_empty() && self.head_started.is_none()
    }
}

impl Conn {
    /// A large body is being fed chunk by chunk.
    #[inline]
    pub fn feeding(&self) -> bool {
        self.stream & FEEDING != 0
    }

    /// Zero-copy slices wait for the kernel.
    #[inline]
    pub fn zc_held(&self) -> bool {
        self.stream & ZC_HELD != 0
    }

    /// Set or clear a [`Conn::stream`] flag.
    #[inline]
    pub fn set_stream(&mut self, flag: u8, on: bool) {
        if on {
            self.stream |= flag;
        } else {
            self.stream &= !flag;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_state_stays_small() {
        // An idle connection's whole cost is this struct (its input buffer
        // is lent only while bytes are pending): issue 21 tracks it.
        let size = std::mem::size_of::<Conn>();
        println!("size_of::<Conn>() = {size}");
        // 320 before handoff added `handed` (16 bytes, no tag); 336 before
        // `Interest` gained `hangup` (sockmap tunnels wait for RDHUP alone):
        // one byte more of small fields, past the padding they shared; 344
        // before `OutChain` counted the bytes a socket was handed (8 bytes,
        // the proxy's access log measures relayed bodies with it).
        assert!(size <= 352, "Conn grew to {size} bytes");
        assert_eq!(std::mem::size_of::<Option<HandedAt>>(), 16);
        let t = Token::new(7, 3);
        use weft_io::handoff::NextRule;
        assert_eq!(HandedAt::new(t, 9, NextRule::Keep).get(), (t, 9));
        for r in NextRule::ALL {
            let h = HandedAt::new(t, 9, r);
            assert_eq!((h.get(), h.rule()), ((t, 9), r));
        }
        assert!(HandedAt::new(t, 9, NextRule::Owner).gives_back());
    }
}
