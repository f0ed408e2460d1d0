//! Spliced request bodies: a POST or PUT body of known length at or above
//! the splice threshold goes client socket → pipe → upstream socket without
//! entering user space, as response bodies do; a chunked one is decoded at
//! chunk boundaries (its framing in user space, forwarded as it came) and
//! each chunk's data at or above the threshold goes through the pipe. Bytes that arrived with the
//! head (or were read with it) are copied first, behind the head, through
//! the upstream's output queue; the pipe is used only while that queue is
//! empty, so nothing overtakes anything. Exactly the body's length is taken
//! from the client socket, so a pipelined request behind it stays there for
//! the client's next read. Limits, timeouts and errors are those of the
//! copied path: the same readiness views and interests (`may_read`,
//! `want`), the same deadlines, and a client that ends mid-body or an
//! upstream that refuses bytes ends the transaction the same way.

use crate::config::ProxyConfig;
use crate::conn::{Client, ReqBody, Upstream};
use crate::response::pipe_min;
use crate::stats::ProxyStats;
use std::io;
use std::time::Instant;
use weft_io::sys;
use weft_io::{Pipe, PipePool};

/// The pipe of a request body being spliced, and what it holds.
#[derive(Debug)]
pub struct BodyPipe {
    pipe: Pipe,
    held: usize,
}

/// How a spliced body stopped.
pub(crate) enum BodyEnd {
    /// The client closed or failed before the body's end.
    ClientGone,
    /// The upstream refused the bytes.
    UpstreamClosed,
}

/// What one splice of a request body came to.
enum Moved {
    /// This many bytes.
    Bytes(usize),
    /// EAGAIN: the socket has nothing, or no room.
    Blocked,
    /// EINTR: try again.
    Again,
    /// End of stream, or an error: the transaction ends.
    Ended,
}

fn splice_once(from: impl sys::FdArg, to: impl sys::FdArg, len: usize, st: &mut ProxyStats) -> Moved {
    st.calls_splice_up += 1;
    match sys::splice(from, to, len, false) {
        Ok(0) => Moved::Ended,
        Ok(n) => Moved::Bytes(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Moved::Blocked,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Moved::Again,
        Err(_) => Moved::Ended,
    }
}

/// Body bytes that may go through the pipe now: the rest of a body of
/// known length, or the rest of the current chunk's data (its framing is
/// decoded in user space, by the copied path).
fn spliceable(body: &ReqBody) -> Option<u64> {
    match body {
        ReqBody::Length(left) => Some(*left),
        ReqBody::Chunked(dec) if !dec.is_done() => Some(dec.data_remaining()),
        _ => None,
    }
}

/// Move the request body through a pipe while the splice path applies: a
/// body of known length, or a chunk's data, with nothing of it buffered and
/// nothing queued before it. `None`: it does not apply (the copied path goes
/// on: buffered bytes, chunk framing, short bodies); `Some(Ok)`: the body is
/// done or waits for a socket (the views and interests say which);
/// `Some(Err)`: the transaction ends.
pub(crate) fn splice_request_body(
    c: &mut Client,
    u: &mut Upstream,
    pipes: &mut PipePool,
    cfg: &ProxyConfig,
    st: &mut ProxyStats,
    now: Instant,
) -> Option<Result<(), BodyEnd>> {
    let txn = c.txn.as_mut()?;
    let avail = spliceable(&txn.body)?;
    let fd = c.fd.as_ref()?;
    let held = txn.req_pipe.as_ref().map_or(0, |b| b.held);
    let start = avail > 0 && (txn.req_pipe.is_some() || avail >= pipe_min(cfg));
    if held == 0 && (!start || !c.input.is_empty() || !u.out.is_empty()) {
        if let Some(idle) = txn.req_pipe.take() {
            pipes.put(idle.pipe, 0);
        }
        return None;
    }
    if txn.req_pipe.is_none() {
        // No pipe to be had (the budget is spent): copy, as responses do.
        let pipe = pipes.get().ok()?;
        txn.req_pipe = Some(BodyPipe { pipe, held: 0 });
    }
    let bp = txn.req_pipe.as_mut()?;
    loop {
        let mut progress = false;
        if bp.held > 0 {
            if u.may_write {
                match splice_once(bp.pipe.read_fd(), &u.fd, bp.held, st) {
                    Moved::Bytes(n) => {
                        bp.held -= n;
                        st.bytes_spliced_up += n as u64;
                        u.last_activity = now;
                        progress = true;
                    }
                    Moved::Blocked => u.may_write = false,
                    Moved::Again => progress = true,
                    Moved::Ended => return Some(Err(BodyEnd::UpstreamClosed)),
                }
            }
            if !u.may_write {
                u.want.write = true;
            }
        }
        let left = spliceable(&txn.body).unwrap_or(0);
        let room = bp.pipe.capacity() - bp.held;
        if left > 0 && room > 0 {
            if c.may_read {
                let want = left.min(room as u64) as usize;
                match splice_once(fd, bp.pipe.write_fd(), want, st) {
                    Moved::Bytes(n) => {
                        bp.held += n;
                        match &mut txn.body {
                            ReqBody::Length(l) => *l -= n as u64,
                            ReqBody::Chunked(dec) => dec.consume_data(n as u64),
                            ReqBody::None => {}
                        }
                        c.last_activity = now;
                        progress = true;
                    }
                    Moved::Blocked => c.may_read = false,
                    Moved::Again => progress = true,
                    Moved::Ended => return Some(Err(BodyEnd::ClientGone)),
                }
            }
            if !c.may_read {
                c.want.read = true;
            }
        }
        if bp.held == 0 && spliceable(&txn.body) == Some(0) {
            if let Some(done) = txn.req_pipe.take() {
                pipes.put(done.pipe, 0);
            }
            if matches!(txn.body, ReqBody::Length(_)) {
                txn.body = ReqBody::None;
                return Some(Ok(()));
            }
            // The chunk's data is through: its framing, and the next
            // chunk's size, go by the copied path.
            return None;
        }
        if !progress {
            return Some(Ok(()));
        }
    }
}
