//! Response bodies forwarded in the kernel (`--splice sockmap`): a
//! non-cacheable response of known length at or above the splice threshold.
//!
//! The head, the body bytes that came with it, and whatever else already
//! waits in the upstream socket (drained to EAGAIN through the session's
//! pipe: the verdict is handed whole skbs, also one weft has half read) are
//! written first; then the upstream socket joins weft-sockmap's body map
//! with the body's remaining length as its budget, and the client its
//! redirect targets. The BPF verdict redirects every skb to the client's
//! send side, cutting the last at the body's end; weft is not woken per
//! chunk. It wakes:
//!
//! - when the verdict has redirected the body's last byte (the ring buffer
//!   the worker polls names the client; the worker calls
//!   [`Relay::kernel_redirected`]): weft takes the upstream out of the map
//!   (a TCP_INFO call then waits out a verdict still running) and queues
//!   the end-of-stream marker behind the last byte;
//! - at the marker's EPIPE on the client (EPOLLERR, whatever the interest):
//!   every body byte has been sent and the client leaves the maps: the
//!   client goes on with its next request, the upstream back to the pool;
//! - at an error on either socket, or the upstream's end of stream before
//!   the body's end: the client gets a cut response (closed), as on the
//!   other paths.
//!
//! Before the join nothing is lost by declining: the session splices (the
//! pipe is held for that), said once where BPF is not available. A body
//! that has all arrived before the join is spliced to its end. Nothing is
//! copied: a client that goes away ends the transfer (these bodies are
//! never stored). Only bodies up to [`KERNEL_BODY_MAX`] go to the kernel:
//! a redirected skb is charged to no socket while it waits for the client,
//! so a client that stops reading lets the upstream send its whole body
//! into kernel memory (and a socket cannot leave the map while its bytes
//! still flow, so the body cannot be taken back part way).

use super::*;
use crate::sockmap::{orphan, KernelFwd, Seen};
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
    /// idle timer found it).
    redirected: bool,
    /// The upstream is out of the map and the marker queued behind the
    /// body's last byte.
    marked: bool,
    /// The upstream's end of stream has been read.
    up_ended: bool,
    /// The client's acknowledged bytes when the idle timer last looked.
    acked: u64,
    /// The body's last bytes when the verdict passed them up (see
    /// `read_passed`); written after the marker.
    tail: Vec<u8>,
    /// What the client socket had been written at the join
    /// ([`weft_io::sys::TcpInfo::written`]): at the marker it must have
    /// been written exactly the redirected body bytes on top.
    written_at_join: u64,
    /// What had been taken from the upstream's receive queue at the join
    /// ([`weft_io::sys::bytes_taken`]): when it leaves the map, the program
    /// must have seen exactly the bytes taken since.
    taken_at_join: u64,
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
            tail: Vec::new(),
            written_at_join: 0,
            taken_at_join: 0,
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
        // (Passed-up bytes are waited for by the upstream's readiness.)
        if !k.redirected
            && fwd
                .ready()?
                .body_progress(body)
                .is_some_and(|p| p.redirect_left == 0 && p.passed == 0)
        {
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
            return Some(self.kernel_failed(e, Pump::ClientAborted));
        };
        // The client: the marker's EPIPE, or an error (anything else that
        // woke it is no news).
        if std::mem::take(e.client_may_write) {
            match sys::take_socket_error(client) {
                Ok(None) => {}
                Ok(Some(x)) if k.marked && Forwarder::is_marker(&x) => {
                    // Every redirected body byte is written by now, and
                    // nothing else (the passed-up tail comes after).
                    let written = sys::tcp_info(client)
                        .ok()
                        .and_then(|t| t.written().checked_sub(k.written_at_join));
                    if !KernelFwd::check(Seen::Written, written, k.len - k.tail.len() as u64, st) {
                        return Some(self.kernel_corrupt(e, client));
                    }
                    return self.kernel_drained(e, st);
                }
                _ => {
                    self.client_gone = true;
                    return Some(self.kernel_failed(e, Pump::ClientAborted));
                }
            }
        }
        // The upstream: its end of stream, or an error (nothing is passed
        // up to its own receive queue).
        if *e.up_may_read && !k.redirected && !k.up_ended {
            // The body's last bytes, passed up in an skb that also held
            // bytes past the body (an upstream that overran its length).
            let passed = match (e.kernel.ready(), k.body.as_ref()) {
                (Some(f), Some(body)) => f.body_progress(body).map_or(0, |p| p.passed),
                _ => 0,
            };
            if passed > 0 {
                self.tainted = true;
                match read_passed(e, &mut k.tail, passed as usize) {
                    Ok(true) => k.redirected = true,
                    Ok(false) => {}
                    Err(()) => return Some(self.kernel_failed(e, UPSTREAM_FAILED)),
                }
            } else {
                let mut b = [0u8; 1];
                match sys::read(e.up, &mut b) {
                    Ok(0) => {
                        // Read only once the verdict has seen every byte
                        // before the FIN: the body is complete, or cut
                        // (seen below).
                        k.up_ended = true;
                        self.tainted = true;
                        k.redirected = true;
                    }
                    Ok(_) => return Some(self.kernel_failed(e, UPSTREAM_FAILED)),
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        // A FIN with bytes before it not yet judged (the
                        // receive queue was not empty): look again after
                        // this batch.
                        match sys::bpf::fin_received(e.up) {
                            Ok(true) => return Some(Pump::Yield),
                            Ok(false) => *e.up_may_read = false,
                            Err(_) => return Some(self.kernel_failed(e, UPSTREAM_FAILED)),
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Some(self.kernel_failed(e, UPSTREAM_FAILED)),
                }
            }
        }
        let Path::Kernel(k) = &mut self.path else { return None };
        if k.redirected && !k.marked {
            // The upstream out of the map first (no redirect after it: its
            // next bytes, if the body has more, wait in its receive queue),
            // then the marker behind the last byte redirected.
            let released = match (e.kernel.ready(), k.body.as_ref()) {
                (Some(f), Some(body)) => f
                    .release_upstream(body, e.up)
                    .and_then(|p| f.mark_body(body).map(|()| p))
                    .ok(),
                _ => None,
            };
            let Some(progress) = released else {
                return Some(self.kernel_failed(e, UPSTREAM_FAILED));
            };
            // Out of the map, the upstream's queue moves no more on its own:
            // the program must have seen each byte taken from it since the
            // join once (body, passed-up tail and excess alike).
            let seen = k.len - progress.redirect_left + progress.excess;
            // Except the bytes past the body in a passed-up skb: they stay
            // unread in the psock (weft reads only the tail), and `excess`
            // counts them with the dropped ones, so with a passed-up skb
            // (an upstream that overran its length, not reused) the check
            // allows for up to `excess` bytes seen and not taken.
            let taken = sys::bytes_taken(e.up)
                .ok()
                .and_then(|t| t.checked_sub(k.taken_at_join))
                .map(|t| {
                    let overran = progress.passed > 0 && t < seen && t + progress.excess >= seen;
                    if overran {
                        seen
                    } else {
                        t
                    }
                });
            if !KernelFwd::check(Seen::Received, taken, seen, st) {
                return Some(self.kernel_corrupt(e, client));
            }
            if progress.excess > 0 {
                self.tainted = true;
            }
            if progress.redirect_left > 0 {
                // Only an upstream that ended before the body's end gets here.
                return Some(self.kernel_failed(e, UPSTREAM_CLOSED));
            }
            let redirected = k.len - k.tail.len() as u64;
            st.sockmap_body_bytes += redirected;
            e.out.note_sent(redirected);
            k.marked = true;
        }
        Some(Pump::Wait {
            up_read: !k.marked && !k.up_ended,
            client_write: false,
        })
    }

    /// Before the join: write out the head (and the body bytes that came
    /// with it), drain the upstream socket to EAGAIN through the pipe, then
    /// join, or decline. Draining matters: the verdict is handed whole skbs
    /// (tcp_read_skb), so the part of one weft had already read would be
    /// sent again.
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
        // The counts the kernel's forwarding is checked against.
        let (Ok(info), Ok(taken)) = (sys::tcp_info(client), sys::bytes_taken(e.up)) else {
            return self.decline_kernel(st);
        };
        let joined = e.kernel.bodies().map(|f| f.join_body(client, e.up, left, k.token));
        let Some(Ok(body)) = joined else {
            return self.decline_kernel(st);
        };
        KernelFwd::note_joined();
        k.body = Some(body);
        k.len = left;
        k.written_at_join = info.written();
        k.taken_at_join = taken;
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

    /// The marker's EPIPE: every body byte redirected has been sent. The
    /// client leaves the maps; the body is complete (its passed-up tail, if
    /// any, queued last).
    fn kernel_drained(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Option<Pump> {
        let Path::Kernel(k) = &mut self.path else { return None };
        if let (Some(body), Some(f)) = (k.body.take(), e.kernel.ready()) {
            f.leave_body(body);
        }
        // Both sockets are plain again, their readiness unknown (the join
        // cleared it, and an edge-triggered backend will not report it
        // anew): a call will tell.
        *e.client_may_write = true;
        *e.up_may_read = true;
        if !k.tail.is_empty() {
            e.out.push_copy(&k.tail);
            st.bytes_copied += k.tail.len() as u64;
            k.tail = Vec::new();
        }
        self.framing = Framing::Length(0);
        self.body_done = true;
        Some(Pump::Done)
    }

    /// The kernel forwarded other bytes than it was given
    /// ([`KernelFwd::check`]): they cannot be taken back, so the client gets
    /// a reset, not a response that looks complete.
    fn kernel_corrupt(&mut self, e: &mut Ends<'_>, client: BorrowedFd<'_>) -> Pump {
        let _ = sys::set_linger_zero(client);
        self.client_gone = true;
        self.kernel_failed(e, Pump::ClientAborted)
    }

    /// Leave the maps and end with `how` (the client is closed: the body is
    /// cut, and whatever was still queued for it is dropped).
    fn kernel_failed(&mut self, e: &mut Ends<'_>, how: Pump) -> Pump {
        self.note_kernel_cut(e.out, e.client);
        if let Path::Kernel(k) = &mut self.path {
            if let (Some(body), Some(f)) = (k.body.take(), e.kernel.ready()) {
                f.leave_body(body);
            }
        }
        self.tainted = true;
        how
    }

    /// A body leaves the kernel before its marker (the client gone, the
    /// upstream failed, a timeout): count in `out` the body bytes the kernel
    /// wrote into the client socket since the join, as the marker would
    /// have counted them all (`OutChain::note_sent`), so that the access
    /// log says what the client was given. One TCP_INFO, on this path only.
    pub fn note_kernel_cut(&self, out: &mut OutChain, client: Option<BorrowedFd<'_>>) {
        let Path::Kernel(k) = &self.path else { return };
        if k.body.is_none() || k.marked {
            return;
        }
        let written = client
            .and_then(|c| sys::tcp_info(c).ok())
            .and_then(|t| t.written().checked_sub(k.written_at_join));
        if let Some(w) = written {
            out.note_sent(w.min(k.len));
        }
    }
}

/// Read the `passed` body bytes the verdict passed up to the upstream
/// socket's own queue into `tail`: Ok(true) once all are there, Ok(false)
/// to wait for the rest, Err on an end of stream or error.
fn read_passed(e: &mut Ends<'_>, tail: &mut Vec<u8>, passed: usize) -> Result<bool, ()> {
    let mut buf = [0u8; 16 * 1024];
    while tail.len() < passed {
        let want = (passed - tail.len()).min(buf.len());
        match sys::read(e.up, &mut buf[..want]) {
            Ok(0) => return Err(()),
            Ok(n) => tail.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                *e.up_may_read = false;
                return Ok(false);
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    Ok(true)
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
    splice_to_client(pipe, piped, client, (e.client_may_write, e.out), st)?;
    Ok(())
}

/// The largest body given to the kernel. A redirected skb is charged to no
/// socket while it waits for the client, so a client that stops reading
/// pins the whole body in kernel memory; this bounds it near what the
/// splice path's socket buffers and pipe hold for such a client (up to
/// 4 MiB sent and 6 MiB received by default, and a 1 MiB pipe). Larger
/// bodies splice.
pub(crate) const KERNEL_BODY_MAX: u64 = 8 << 20;

const UPSTREAM_CLOSED: Pump = Pump::UpstreamFailed("upstream closed the connection mid-body");
const UPSTREAM_FAILED: Pump = Pump::UpstreamFailed("upstream connection failed mid-body");
