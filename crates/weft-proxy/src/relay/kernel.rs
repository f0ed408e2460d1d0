//! Response bodies forwarded in the kernel (`--splice sockmap`): a
//! non-cacheable response of known length at or above the splice threshold.
//!
//! The head and the body bytes that came with it are written first; then
//! the upstream socket joins weft-sockmap's body map with the body's
//! remaining length as its budget, and the client its redirect targets. The
//! BPF stream parser cuts the upstream's byte stream at the body's end and
//! every message is redirected to the client's send side; weft is not woken
//! per chunk. It wakes:
//!
//! - when the parser has cut the body's last byte (the ring buffer the
//!   worker polls names the client; the worker calls
//!   [`Relay::kernel_redirected`]): weft makes one TCP_INFO call on the
//!   upstream (its lock waits out the parser still queueing that byte) and
//!   queues the end-of-stream marker behind the body;
//! - at the marker's EPIPE on the client (EPOLLERR, whatever the interest):
//!   every body byte has been sent, both sockets leave the maps, and the
//!   client goes on with its next request, the upstream back to the pool;
//! - at an error on either socket, or the upstream's end of stream before
//!   the body's end: the client gets a cut response (closed), as on the
//!   other paths.
//!
//! Before the join nothing is lost by declining: the session splices (the
//! pipe is held for that), said once where BPF or the stream parser is not
//! available. An upstream whose FIN is already in (the whole response is
//! there) is spliced too: it could not say whether the parser has seen every
//! byte before its FIN. Nothing is copied: a client that goes away ends the
//! transfer (these bodies are never stored).

use super::*;
use crate::sockmap::{orphan, KernelFwd};
use weft_sockmap::{Body, Forwarder};

/// A body forwarded by the sockmap program.
pub(super) struct KernelBody {
    /// Kept to splice with if the join is declined.
    pipe: Option<Pipe>,
    /// What the ring names the body by (the client's token).
    token: u64,
    /// In the maps: between the join and the leave.
    body: Option<Body>,
    /// Bytes in the pipe (drained from the upstream before the join).
    piped: usize,
    /// Body bytes handed to the program at the join.
    len: u64,
    /// The body's last byte has been redirected (the ring said so, or the
    /// idle timer found the budget spent).
    redirected: bool,
    /// The marker is queued behind the body.
    marked: bool,
    /// The upstream's end of stream has been read.
    up_ended: bool,
    /// The client's acknowledged bytes when the idle timer last looked.
    acked: u64,
}

impl KernelBody {
    pub(super) fn new(pipe: Pipe, token: u64) -> KernelBody {
        KernelBody {
            pipe: Some(pipe),
            token,
            body: None,
            piped: 0,
            len: 0,
            redirected: false,
            marked: false,
            up_ended: false,
            acked: 0,
        }
    }

    /// The pipe to give back (or to splice with).
    pub(super) fn take_pipe(&mut self) -> Option<Pipe> {
        self.pipe.take()
    }
}

impl Drop for KernelBody {
    fn drop(&mut self) {
        // A session dropped without its leave (a timeout, an error path):
        // the worker takes the entries out later.
        if let Some(body) = self.body.take() {
            orphan(body);
        }
    }
}

impl Relay {
    /// Whether the body is in the kernel now (joined, not yet left): the
    /// client's socket is not read meanwhile (its pending error is the
    /// marker's).
    pub fn in_kernel(&self) -> bool {
        matches!(&self.path, Path::Kernel(k) if k.body.is_some())
    }

    /// Whether the upstream connection must not be pooled after this body
    /// (it ended, or sent bytes past the body, which were dropped).
    pub fn upstream_tainted(&self) -> bool {
        self.tainted
    }

    /// The ring reported the last byte of the body whose upstream socket
    /// has `cookie` redirected. False when that is not this session's.
    pub fn kernel_redirected(&mut self, cookie: u64) -> bool {
        match &mut self.path {
            Path::Kernel(k) if k.body.as_ref().is_some_and(|b| b.upstream_cookie() == cookie) => {
                k.redirected = true;
                true
            }
            _ => false,
        }
    }

    /// The idle timer's look at a body in the kernel: did the client
    /// acknowledge bytes since the last look (`client` is its socket)? Also
    /// notices a budget spent whose ring report was lost (a full ring):
    /// `Some(true)` then, and the caller drives the session.
    pub fn kernel_progress(&mut self, fwd: &mut KernelFwd, client: BorrowedFd<'_>) -> Option<bool> {
        let Path::Kernel(k) = &mut self.path else { return None };
        let body = k.body.as_ref()?;
        let mut moved = false;
        if !k.redirected && fwd.ready()?.body_progress(body).is_some_and(|p| p.redirect_left == 0) {
            k.redirected = true;
            moved = true;
        }
        let acked = sys::tcp_info(client).map(|t| t.bytes_acked).unwrap_or(0);
        moved |= acked != k.acked;
        k.acked = acked;
        Some(moved)
    }

    /// The sockmap path of [`Relay::pump`]; `None` when the session splices
    /// instead (declined before the join).
    pub(super) fn pump_kernel(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Option<Pump> {
        let Path::Kernel(k) = &mut self.path else { return None };
        if k.body.is_none() {
            return self.join_kernel(e, st);
        }
        let Some(client) = e.client else {
            return Some(self.kernel_failed(e.kernel, Pump::ClientAborted));
        };
        // The client: the marker's EPIPE, or an error (anything else that
        // woke it is no news).
        if std::mem::take(e.client_may_write) {
            match sys::take_socket_error(client) {
                Ok(None) => {}
                Ok(Some(x)) if k.marked && Forwarder::is_marker(&x) => return Some(self.kernel_done(e.kernel, st)),
                _ => {
                    self.client_gone = true;
                    return Some(self.kernel_failed(e.kernel, Pump::ClientAborted));
                }
            }
        }
        // The upstream: its end of stream, or an error (nothing is passed
        // up to its own receive queue).
        if *e.up_may_read && !k.marked && !k.up_ended {
            let mut b = [0u8; 1];
            match sys::read(e.up, &mut b) {
                Ok(0) => {
                    // Read only once the parser has cut every byte before the FIN.
                    k.up_ended = true;
                    self.tainted = true;
                    let left = e.kernel.ready().and_then(|f| f.body_progress(k.body.as_ref()?));
                    if left.is_none_or(|p| p.redirect_left != 0) {
                        return Some(self.kernel_failed(e.kernel, UPSTREAM_CLOSED));
                    }
                    k.redirected = true;
                }
                Ok(_) => return Some(self.kernel_failed(e.kernel, UPSTREAM_FAILED)),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    // A FIN with bytes before it still to parse (the parser
                    // runs from a work queue while weft holds the socket):
                    // look again after this batch.
                    match sys::bpf::fin_received(e.up) {
                        Ok(true) => return Some(Pump::Yield),
                        Ok(false) => *e.up_may_read = false,
                        Err(_) => return Some(self.kernel_failed(e.kernel, UPSTREAM_FAILED)),
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(self.kernel_failed(e.kernel, UPSTREAM_FAILED)),
            }
        }
        let Path::Kernel(k) = &mut self.path else { return None };
        if k.redirected && !k.marked {
            // TCP_INFO takes the upstream's lock: the parser that cut the
            // last byte has queued it on the client by the time it returns,
            // so the marker goes behind it.
            let queued = sys::bpf::fin_received(e.up).is_ok();
            let marked = match (e.kernel.ready(), k.body.as_ref()) {
                (Some(f), Some(body)) if queued => f.mark_body(body).is_ok(),
                _ => false,
            };
            if !marked {
                return Some(self.kernel_failed(e.kernel, UPSTREAM_FAILED));
            }
            k.marked = true;
        }
        Some(Pump::Wait {
            up_read: !k.marked && !k.up_ended,
            client_write: false,
        })
    }

    /// Before the join: write out the head (and the body bytes that came
    /// with it), drain the upstream socket to EAGAIN through the pipe, then
    /// join, or decline. Draining matters: the parser's `skb->len` counts
    /// the part of an skb weft has already read, so a first message inside
    /// a half-read skb would come out longer than what is there, and every
    /// message after it would wait for the next skb (with bytes left in the
    /// receive queue, which a level-triggered poller reports as readable).
    fn join_kernel(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Option<Pump> {
        let client = e.client?;
        let Path::Kernel(k) = &mut self.path else { return None };
        let Some(pipe) = k.pipe.as_ref() else {
            return self.decline_kernel(st);
        };
        let mut left = match self.framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let blocked = Some(Pump::Wait {
            up_read: false,
            client_write: true,
        });
        loop {
            if !e.out.is_empty() || k.piped > 0 {
                if !*e.client_may_write {
                    self.framing = Framing::Length(left);
                    return blocked;
                }
                if flush_before_join(e, client, pipe, &mut k.piped, st).is_err() {
                    self.framing = Framing::Length(left);
                    self.client_gone = true;
                    e.out.clear();
                    return Some(Pump::ClientAborted);
                }
                if !e.out.is_empty() || k.piped > 0 {
                    self.framing = Framing::Length(left);
                    return blocked;
                }
            }
            if left == 0 {
                // All of it came before the join: done by splicing.
                self.framing = Framing::Length(0);
                self.body_done = true;
                self.decline_kernel(st);
                return Some(Pump::Done);
            }
            let room = pipe.capacity().saturating_sub(k.piped);
            st.calls_splice_in += 1;
            match sys::splice(e.up, pipe.write_fd(), left.min(room as u64) as usize, false) {
                Ok(0) => {
                    self.framing = Framing::Length(left);
                    return Some(UPSTREAM_CLOSED);
                }
                Ok(n) => {
                    k.piped += n;
                    left -= n as u64;
                }
                // Drained (an empty pipe: EAGAIN is the socket's).
                Err(err) if err.kind() == io::ErrorKind::WouldBlock && k.piped == 0 => break,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.framing = Framing::Length(left);
                    return Some(UPSTREAM_FAILED);
                }
            }
        }
        self.framing = Framing::Length(left);
        e.kernel.reap();
        let Path::Kernel(k) = &mut self.path else { return None };
        let joined = e.kernel.bodies().map(|f| f.join_body(client, e.up, left, k.token));
        let Some(Ok(body)) = joined else {
            return self.decline_kernel(st);
        };
        k.body = Some(body);
        k.len = left;
        // From here a client event is its marker or an error, an upstream
        // one its end of stream (or an error); any event after this pump is
        // delivered to a later one.
        *e.client_may_write = false;
        *e.up_may_read = false;
        Some(Pump::Wait {
            up_read: true,
            client_write: false,
        })
    }

    /// Splice instead (before the join; the pipe may hold bytes already).
    fn decline_kernel(&mut self, st: &mut ProxyStats) -> Option<Pump> {
        let (pipe, bytes) = match &mut self.path {
            Path::Kernel(k) => (k.take_pipe(), k.piped),
            _ => (None, 0),
        };
        if !self.body_done {
            st.sockmap_declined += 1;
        }
        self.path = match pipe {
            Some(pipe) => Path::Splice { pipe, bytes },
            None => Path::Copy,
        };
        None
    }

    /// The marker's EPIPE: every body byte has been sent. Both sockets
    /// leave the maps; the body is complete.
    fn kernel_done(&mut self, fwd: &mut KernelFwd, st: &mut ProxyStats) -> Pump {
        if let Path::Kernel(k) = &mut self.path {
            if let (Some(body), Some(f)) = (k.body.take(), fwd.ready()) {
                if f.leave_body(body) > 0 {
                    self.tainted = true;
                }
            }
            st.sockmap_body_bytes += k.len;
        }
        self.framing = Framing::Length(0);
        self.body_done = true;
        Pump::Done
    }

    /// Leave the maps and end with `how` (the client is closed: the body is
    /// cut, and whatever was still queued for it is dropped).
    fn kernel_failed(&mut self, fwd: &mut KernelFwd, how: Pump) -> Pump {
        if let Path::Kernel(k) = &mut self.path {
            if let (Some(body), Some(f)) = (k.body.take(), fwd.ready()) {
                f.leave_body(body);
            }
        }
        self.tainted = true;
        how
    }
}

/// Before the join: the output queue, then the pipe, to the client.
fn flush_before_join(
    e: &mut Ends<'_>,
    client: BorrowedFd<'_>,
    pipe: &Pipe,
    piped: &mut usize,
    st: &mut ProxyStats,
) -> io::Result<()> {
    if !e.out.is_empty() {
        st.calls_client_send += 1;
        if e.out.flush(client, &[], &mut [])?.blocked {
            *e.client_may_write = false;
        }
        if !e.out.is_empty() {
            return Ok(());
        }
    }
    while *piped > 0 && *e.client_may_write {
        st.calls_splice_out += 1;
        match sys::splice(pipe.read_fd(), client, *piped, false) {
            Ok(0) => return Err(sys::Errno::BrokenPipe.into()),
            Ok(n) => {
                *piped -= n;
                st.bytes_spliced += n as u64;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => *e.client_may_write = false,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

const UPSTREAM_CLOSED: Pump = Pump::UpstreamFailed("upstream closed the connection mid-body");
const UPSTREAM_FAILED: Pump = Pump::UpstreamFailed("upstream connection failed mid-body");
