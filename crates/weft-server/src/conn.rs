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
//! and edge-triggered backends.

use crate::files::CachedFile;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;
use weft_io::{Fd, Interest, Token};

/// Input buffer size at first read; grows (up to the head limit) only when a
/// request head does not fit.
pub const INITIAL_INPUT: usize = 4096;

/// How a file body is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPath {
    /// sendfile(2).
    Sendfile,
    /// pread(2) + writev(2).
    Copy,
}

/// A file body still to send.
pub struct FileBody {
    /// The file.
    pub file: Rc<CachedFile>,
    /// Next byte to send.
    pub offset: u64,
    /// One past the last byte to send.
    pub end: u64,
    /// Transfer path.
    pub path: BodyPath,
}

/// Connection state.
pub struct Conn {
    pub fd: Fd,
    pub token: Token,
    pub peer: Option<SocketAddr>,
    /// Input bytes live in `buf[start..end]`; `buf.len()` is the capacity in use.
    pub buf: Vec<u8>,
    pub start: usize,
    pub end: usize,
    /// The socket may have unread input (see the module doc).
    pub may_read: bool,
    /// The backend reported the peer's FIN (see the module doc).
    pub read_closed: bool,
    /// The peer closed its side.
    pub eof: bool,
    /// Response bytes queued in `out[out_pos..]`, sent before `body`.
    pub out: Vec<u8>,
    pub out_pos: usize,
    pub body: Option<FileBody>,
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
}

impl Conn {
    pub fn new(fd: Fd, token: Token, peer: Option<SocketAddr>, interest: Interest, now: Instant) -> Conn {
        Conn {
            fd,
            token,
            peer,
            buf: Vec::new(),
            start: 0,
            end: 0,
            may_read: false,
            read_closed: false,
            eof: false,
            out: Vec::new(),
            out_pos: 0,
            body: None,
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
        }
    }

    /// Anything queued to send?
    #[inline]
    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len() || self.body.is_some()
    }

    /// Nothing in flight: no output, no buffered or partial request.
    #[inline]
    pub fn is_idle(&self) -> bool {
        !self.has_output() && self.start == self.end && self.head_started.is_none()
    }

    /// Make room to read: compact consumed bytes away, allocate on first use,
    /// grow (doubling, up to `max`) when the buffer is full of an incomplete head.
    /// Returns false when the buffer is full and may not grow.
    pub fn reserve_input(&mut self, max: usize) -> bool {
        if self.buf.is_empty() {
            self.buf = vec![0u8; INITIAL_INPUT];
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= max {
                return false;
            }
            let n = (self.buf.len() * 2).min(max);
            self.buf.resize(n, 0);
        }
        true
    }
}
