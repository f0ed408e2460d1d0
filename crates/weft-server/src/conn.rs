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

/// A slot of the worker's connection table.
pub enum Slot {
    /// A connection with a request in flight (or about to be read): its
    /// whole record, lent from the worker's [`weft_io::RecordPool`].
    Busy(Box<Conn>),
    /// A keep-alive connection between requests: only what outlives a
    /// request, inline in the slot (issue 21: an idle connection holds no
    /// buffer; here it holds no output chain or request state either).
    Idle(IdleConn),
}

impl Slot {
    /// The connection's socket, busy or idle.
    pub fn fd(&self) -> &Fd {
        match self {
            Slot::Busy(c) => &c.fd,
            Slot::Idle(i) => &i.fd,
        }
    }

    /// When its timer is due, busy or idle.
    pub fn timer_at(&self) -> Option<Instant> {
        match self {
            Slot::Busy(c) => c.timer_at,
            Slot::Idle(i) => i.timer_at,
        }
    }

    /// Its timer entry and its deadline, busy or idle (`weft_io::timer::expired`).
    pub fn timer_mut(&mut self) -> (&mut Option<Instant>, Instant) {
        match self {
            Slot::Busy(c) => (&mut c.timer_at, c.deadline),
            Slot::Idle(i) => (&mut i.timer_at, i.deadline),
        }
    }
}

/// What an idle keep-alive connection keeps between requests: its socket,
/// its peer and the state that spans requests (readiness, interest, the
/// request count, timers, where a handed-over connection came from).
/// Everything else a [`Conn`] holds is empty while it is idle
/// ([`Conn::may_sleep`]), so none of it is kept.
pub struct IdleConn {
    fd: Fd,
    peer: Option<SocketAddr>,
    requests: u64,
    pub last_activity: Instant,
    pub deadline: Instant,
    pub timer_at: Option<Instant>,
    handed: Option<HandedAt>,
    interest: Interest,
    may_read: bool,
    read_closed: bool,
}

impl IdleConn {
    /// The connection's socket and its handover record, at close.
    pub fn into_parts(self) -> (Fd, Option<HandedAt>) {
        (self.fd, self.handed)
    }
}

impl Conn {
    /// Is there nothing here but what an [`IdleConn`] keeps? Nothing read or
    /// queued (buffers already given back to the pools), no body to skip, no
    /// helper or stream in flight, not closing, not waiting to resume.
    pub fn may_sleep(&self) -> bool {
        self.is_idle()
            && !self.input.has_storage()
            && self.out.own_capacity() == 0
            && !(self.eof || self.close_after || self.lingering || self.linger_on_close)
            && self.discard == 0
            && !(self.parked || self.snapshot || self.resume_queued)
            && self.stream == 0
    }

    /// The connection's idle record (see [`Conn::may_sleep`]).
    pub fn into_idle(self) -> IdleConn {
        debug_assert!(self.may_sleep());
        IdleConn {
            fd: self.fd,
            peer: self.peer,
            requests: self.requests,
            last_activity: self.last_activity,
            deadline: self.deadline,
            timer_at: self.timer_at,
            handed: self.handed,
            interest: self.interest,
            may_read: self.may_read,
            read_closed: self.read_closed,
        }
    }

    /// The whole record of the idle connection `idle` in slot `token`.
    pub fn from_idle(idle: IdleConn, token: Token) -> Conn {
        let IdleConn {
            fd,
            peer,
            requests,
            last_activity,
            deadline,
            timer_at,
            handed,
            interest,
            may_read,
            read_closed,
        } = idle;
        Conn {
            requests,
            deadline,
            timer_at,
            handed,
            may_read,
            read_closed,
            ..Conn::new(fd, token, peer, interest, last_activity)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connection_keeps_only_its_idle_record() {
        // An idle connection's whole cost is its slot (issue 21): the idle
        // record inline, its `Conn` back in the pool.
        let slot = std::mem::size_of::<Slot>();
        println!(
            "size_of::<Slot>() = {slot}, IdleConn {}",
            std::mem::size_of::<IdleConn>()
        );
        assert!(slot <= 128, "Slot grew to {slot} bytes");
        // Asleep and awake again, nothing of the connection is lost.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a = Fd::from(a);
        let now = Instant::now();
        let t = Token::new(3, 1);
        let mut c = Conn::new(a, t, None, Interest::READ, now);
        (c.requests, c.may_read, c.read_closed) = (5, true, true);
        c.handed = Some(HandedAt::new(Token::new(1, 2), 9, weft_io::handoff::NextRule::Keep));
        c.timer_at = Some(now);
        assert!(c.may_sleep());
        let raw = c.fd.raw();
        let back = Conn::from_idle(c.into_idle(), t);
        assert_eq!((back.fd.raw(), back.token, back.requests), (raw, t, 5));
        assert!(back.may_read && back.read_closed && back.timer_at == Some(now));
        assert_eq!(back.handed.map(HandedAt::get), Some((Token::new(1, 2), 9)));
        // Anything in flight keeps it awake.
        let mut busy = back;
        busy.discard = 1;
        assert!(!busy.may_sleep());
        (busy.discard, busy.close_after) = (0, true);
        assert!(!busy.may_sleep());
        (busy.close_after, busy.parked) = (false, true);
        assert!(!busy.may_sleep());
        busy.parked = false;
        busy.head_started = Some(now);
        assert!(!busy.may_sleep());
    }

    #[test]
    fn connection_state_stays_small() {
        // A busy connection's record (its input buffer is lent only while
        // bytes are pending, the record itself only while it is busy).
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
