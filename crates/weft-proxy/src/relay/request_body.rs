//! Spliced request bodies: a POST or PUT body of known length at or above
//! the splice threshold goes client socket → pipe → upstream socket without
//! entering user space, as response bodies do. Bytes that arrived with the
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

/// Move the request body through a pipe while the splice path applies: a
/// body of known length with nothing of it buffered and nothing queued
/// before it. `None`: it does not apply (the copied path goes on);
/// `Some(Ok)`: the body is done or waits for a socket (the views and
/// interests say which); `Some(Err)`: the transaction ends.
pub(crate) fn splice_request_body(
    c: &mut Client,
    u: &mut Upstream,
    pipes: &mut PipePool,
    cfg: &ProxyConfig,
    st: &mut ProxyStats,
    now: Instant,
) -> Option<Result<(), BodyEnd>> {
    let txn = c.txn.as_mut()?;
    let ReqBody::Length(left) = &mut txn.body else {
        return None;
    };
    let fd = c.fd.as_ref()?;
    if !c.input.is_empty() || !u.out.is_empty() {
        return None;
    }
    if txn.req_pipe.is_none() {
        if *left == 0 || *left < pipe_min(cfg) {
            return None;
        }
        // No pipe to be had (the budget is spent): copy, as responses do.
        let pipe = pipes.get().ok()?;
        txn.req_pipe = Some(BodyPipe { pipe, held: 0 });
    }
    let bp = txn.req_pipe.as_mut()?;
    loop {
        let mut progress = false;
        if bp.held > 0 {
            if u.may_write {
                st.calls_splice_up += 1;
                match sys::splice(bp.pipe.read_fd(), &u.fd, bp.held, false) {
                    Ok(0) => return Some(Err(BodyEnd::UpstreamClosed)),
                    Ok(n) => {
                        bp.held -= n;
                        st.bytes_spliced_up += n as u64;
                        u.last_activity = now;
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => u.may_write = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
                    Err(_) => return Some(Err(BodyEnd::UpstreamClosed)),
                }
            }
            if !u.may_write {
                u.want.write = true;
            }
        }
        let room = bp.pipe.capacity() - bp.held;
        if *left > 0 && room > 0 {
            if c.may_read {
                st.calls_splice_up += 1;
                let want = (*left).min(room as u64) as usize;
                match sys::splice(fd, bp.pipe.write_fd(), want, false) {
                    Ok(0) => return Some(Err(BodyEnd::ClientGone)),
                    Ok(n) => {
                        bp.held += n;
                        *left -= n as u64;
                        c.last_activity = now;
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.may_read = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
                    Err(_) => return Some(Err(BodyEnd::ClientGone)),
                }
            }
            if !c.may_read {
                c.want.read = true;
            }
        }
        if *left == 0 && bp.held == 0 {
            if let Some(done) = txn.req_pipe.take() {
                pipes.put(done.pipe, 0);
            }
            txn.body = ReqBody::None;
            return Some(Ok(()));
        }
        if !progress {
            return Some(Ok(()));
        }
    }
}
