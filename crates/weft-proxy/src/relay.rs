//! Moving one response body from the upstream to the client: a *splice
//! session* (papers 000 §3 and 001).
//!
//! The response head has been read into user space (the first segment, as the
//! paper's Squid reads 2896 bytes); the body then moves one of three ways:
//!
//! - **Copy**: read(2) into a buffer, write(2) out. For a cacheable response
//!   the buffer *is* the cache object being filled (one `BytesMut` reserved to
//!   the Content-Length, frozen into the object at the end), so a copied body
//!   is still read only once.
//! - **Splice**: upstream socket → pipe → client socket with splice(2); no
//!   byte enters user space. Unidirectional, ending at the Content-Length or
//!   when the upstream closes.
//! - **Tee** (KeepCopy): upstream → *intake* pipe; tee(2) intake → *output*
//!   pipe; read the tee'd bytes from the intake into the cache object; splice
//!   output → client. The intake pattern matters: tee duplicates from the head
//!   of its source, so bytes must leave the intake exactly as they are tee'd
//!   (`linux-mechanisms.md`). If the client goes away, the body keeps coming
//!   into the cache (tee stops, reads go on) up to `--max-object-size`.
//!
//! The cache's copy (the tee step, bytes kept for the fill, its size cap) is in
//! `relay/keep.rs`. Chunked bodies alternate (`relay/chunked.rs`): framing is read and parsed
//! in user space (`ChunkedDecoder`), chunk data of at least the splice threshold goes
//! through the pipe (`data_remaining` / `consume_data`). Framing is forwarded
//! verbatim to HTTP/1.1 clients and dropped for HTTP/1.0 ones.
//!
//! Order on the client socket is: the connection's output queue, then the
//! copy buffer's unsent bytes, then the pipe. Bytes are appended to the queue
//! only while the pipe is empty, so nothing overtakes anything.
//!
//! Readiness is tracked in user space (`may_read`/`may_write`), cleared only
//! by EAGAIN: a short splice from a socket can mean the pipe ran out of slots
//! rather than the socket out of data, so EAGAIN with bytes in the pipe is
//! taken as "drain the pipe first", never as "the socket is empty".
//!
//! Any splice or tee failure other than EAGAIN and peer errors (EINVAL,
//! ENOSYS, ENOMEM...) moves the bytes already in the pipes into the output
//! queue and the session continues by copying (counted as a fallback).

use crate::stats::ProxyStats;
use bytes::{Buf, BytesMut};
use chunked::SharedPull;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use weft_buf::Aggregate;
use weft_http::ChunkedDecoder;
use weft_io::sys;
use weft_io::{BufPool, InputBuf, OutChain, Pipe, PipePool};

/// Copy-path read size (and relay buffer) when not filling the cache.
const RELAY_BUF: usize = 128 * 1024;
/// Growth step of a cache fill of unknown length.
const FILL_STEP: usize = 256 * 1024;
/// Bytes one `pump` call may move before yielding to other connections.
const PUMP_BUDGET: u64 = 4 << 20;
/// Output queue size above which a chunked relay stops reading.
const OUTQ_HIGH: usize = 256 * 1024;
/// Smallest read batch worth a setsockopt (`batch_reads`).
const MIN_BATCH: usize = 16 * 1024;

/// How the body is delimited.
pub enum Framing {
    /// This many bytes still to read from the upstream.
    Length(u64),
    /// Chunked; `keep_framing`: forward the framing (HTTP/1.1 client).
    Chunked {
        /// The decoder.
        dec: ChunkedDecoder,
        /// Forward framing bytes (false: de-chunk for an HTTP/1.0 client).
        keep_framing: bool,
    },
    /// Until the upstream closes.
    Close,
}

enum Path {
    Copy,
    Splice {
        pipe: Pipe,
        bytes: usize,
    },
    Tee {
        intake: Pipe,
        in_intake: usize,
        out: Pipe,
        in_out: usize,
    },
    /// Forwarded by the sockmap program (`relay/kernel.rs`).
    Kernel(Box<kernel::KernelBody>),
}

/// Which path a session asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Copy through user space.
    Copy,
    /// Splice through one pipe.
    Splice,
    /// Splice with tee into the cache (needs a fill).
    Tee,
    /// In the kernel by the sockmap program (a body of known length, not
    /// stored); splices where that is declined.
    Kernel,
}

/// The two sockets, as a session sees them.
pub struct Ends<'a> {
    /// The client socket (None once the client is gone).
    pub client: Option<BorrowedFd<'a>>,
    /// The client socket may accept writes.
    pub client_may_write: &'a mut bool,
    /// The client's output queue (heads before the body, framing).
    pub out: &'a mut OutChain,
    /// The upstream socket.
    pub up: BorrowedFd<'a>,
    /// The upstream socket may have input.
    pub up_may_read: &'a mut bool,
    /// The upstream's input buffer (the first body bytes arrive with the head).
    pub up_buf: &'a mut InputBuf,
    /// The worker's input buffers (`up_buf` borrows from them).
    pub bufs: &'a mut BufPool,
    /// The worker's sockmap forwarder (`Want::Kernel`).
    pub kernel: &'a mut crate::sockmap::KernelFwd,
}

/// What a pump call ended with.
#[derive(Debug, PartialEq, Eq)]
pub enum Pump {
    /// The object being filled holds the whole body, and the client has not
    /// been sent its last bytes yet: take it ([`Relay::take_whole`]), store
    /// it, and pump again. Stored before the client has all of it, the object
    /// is there for whatever request that client (or anyone who saw the
    /// response end) sends next, on any worker.
    Whole,
    /// The body is complete and handed to the client socket (the output queue
    /// may still hold some of it) or, after a client abort, to the cache.
    Done,
    /// Waiting for readiness.
    Wait {
        /// On the upstream being readable.
        up_read: bool,
        /// On the client being writable.
        client_write: bool,
    },
    /// Budget used: drive again after other connections had their turn.
    Yield,
    /// The client went away and nothing is left to do for it.
    ClientAborted,
    /// The upstream closed or failed before the end of the body.
    UpstreamFailed(&'static str),
}

struct Fill {
    segs: Aggregate,
    size: u64,
    max: u64,
    /// Bytes of `segs` handed over to the fill's followers
    /// ([`Relay::cut`]): the copy path of a body of unknown length adds
    /// segments of its own when its block is full.
    handed: usize,
}

/// One body transfer.
pub struct Relay {
    framing: Framing,
    path: Path,
    /// Copy buffer; while filling, the object being filled.
    acc: BytesMut,
    /// `acc[..sent]` needs no more sending (sent, or not the client's path).
    sent: usize,
    fill: Option<Fill>,
    client_gone: bool,
    /// There never was a client (`without_client`).
    no_client: bool,
    body_done: bool,
    /// Chunk data runs at least this long go through the pipe.
    pipe_min: u64,
    /// Upstream read size while parsing chunk framing with a pipe available.
    framing_read: usize,
    fell_back: bool,
    /// Read batch asked for (`--rcv-lowat`; 0: wake on every arrival).
    rcv_lowat: usize,
    /// SO_RCVLOWAT now set on the upstream socket (0 and 1: the default).
    lowat_set: usize,
    /// A batch did not fill in time: wake on every arrival from now on.
    batching_off: bool,
    /// Bytes read from the upstream since it last ran dry.
    pulled: usize,
    /// A batch was asked for since `take_batch_start` last looked.
    batch_started: bool,
    /// The last `pump` moved nothing (see `moved_nothing`).
    idle_pump: bool,
    /// Move chunks with uring linked chains (`relay/linked.rs`).
    linked: bool,
    /// Chains may write the queued head into the client's pipe.
    linked_head: bool,
    /// Head bytes written into the client's pipe by a chain, not spliced out yet.
    head_piped: usize,
    /// The upstream connection must not be pooled (`relay/kernel.rs`).
    tainted: bool,
    /// Others follow the fill: a client slower than the upstream must not
    /// hold it back ([`Relay::decouple`]).
    decouple: bool,
    /// A decoupled chunked fill's pull: what its client is still to be sent.
    shared_pull: SharedPull,
}

/// Splice what `pipe` holds (`bytes`) to the client while it takes it;
/// bytes moved, each splice counted in the client's `out` as it goes (an
/// error after some keeps them counted: the access log's bytes). EAGAIN
/// clears `may_write`.
fn splice_to_client(
    pipe: &Pipe,
    bytes: &mut usize,
    cfd: BorrowedFd<'_>,
    (may_write, out): (&mut bool, &mut OutChain),
    st: &mut ProxyStats,
) -> io::Result<usize> {
    let mut total = 0;
    while *bytes > 0 && *may_write {
        // No SPLICE_F_MORE: it would hold the last partial segment back
        // until the next splice, which waits on the upstream; measured,
        // it also cost more pacing timer interrupts than it saved.
        st.calls_splice_out += 1;
        match sys::splice(pipe.read_fd(), cfd, *bytes, false) {
            Ok(0) => return Err(sys::Errno::BrokenPipe.into()),
            Ok(n) => {
                *bytes -= n;
                st.bytes_spliced += n as u64;
                out.note_sent(n as u64);
                total += n;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => *may_write = false,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(total)
}

fn is_peer_error(e: &io::Error) -> bool {
    sys::is_peer_gone(e)
}

/// How a session is to move its body.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The path asked for (a Tee without a fill is a Splice).
    pub want: Want,
    /// Fill the cache, up to this many bytes.
    pub fill_max: Option<u64>,
    /// Chunk data runs at least this long go through the pipe.
    pub pipe_min: u64,
    /// Read size for chunk framing (`--first-read`).
    pub framing_read: usize,
    /// Read batch of a long body (`--rcv-lowat`).
    pub rcv_lowat: usize,
    /// Move spliced chunks with uring linked chains (`--uring-linked`).
    pub linked: bool,
    /// Chains carry the head too (`--uring-linked-head`).
    pub linked_head: bool,
    /// The client's token, which the sockmap ring names a body by (`Want::Kernel`).
    pub token: u64,
}

impl Relay {
    /// Start a session as `plan` says; pipes come from `pool` and a shortage
    /// means copying (counted). `spare`: a recycled copy buffer.
    pub fn new(
        framing: Framing,
        plan: Plan,
        spare: Option<BytesMut>,
        pool: &mut PipePool,
        st: &mut ProxyStats,
    ) -> Relay {
        let Plan {
            want,
            fill_max,
            pipe_min,
            framing_read,
            rcv_lowat,
            linked,
            linked_head,
            token,
        } = plan;
        let want = match (want, fill_max) {
            (Want::Tee, None) => Want::Splice,
            (w, _) => w,
        };
        let path = match want {
            Want::Copy => Path::Copy,
            Want::Splice => match pool.get() {
                Ok(pipe) => Path::Splice { pipe, bytes: 0 },
                Err(_) => {
                    st.sessions_no_pipe += 1;
                    Path::Copy
                }
            },
            Want::Tee => match (pool.get(), pool.get()) {
                (Ok(intake), Ok(out)) => Path::Tee {
                    intake,
                    in_intake: 0,
                    out,
                    in_out: 0,
                },
                (a, b) => {
                    for p in [a, b].into_iter().flatten() {
                        pool.put(p, 0);
                    }
                    st.sessions_no_pipe += 1;
                    Path::Copy
                }
            },
            Want::Kernel => match pool.get() {
                Ok(pipe) => Path::Kernel(Box::new(kernel::KernelBody::new(pipe, token))),
                Err(_) => {
                    st.sessions_no_pipe += 1;
                    Path::Copy
                }
            },
        };
        let fill = fill_max.map(|max| Fill {
            segs: Aggregate::new(),
            size: 0,
            max,
            handed: 0,
        });
        let mut acc = BytesMut::new();
        if let (Some(f), Framing::Length(n)) = (&fill, &framing) {
            // One allocation for the whole object: it becomes one segment.
            acc.reserve((*n).min(f.max) as usize);
        } else if fill.is_none() {
            // The worker's recycled relay buffer (no allocation per request).
            acc = spare.unwrap_or_default();
            acc.clear();
        }
        Relay {
            framing,
            path,
            acc,
            sent: 0,
            fill,
            client_gone: false,
            no_client: false,
            body_done: false,
            pipe_min: pipe_min.max(1),
            framing_read,
            fell_back: false,
            rcv_lowat,
            lowat_set: 0,
            batching_off: false,
            pulled: 0,
            batch_started: false,
            idle_pump: false,
            linked,
            linked_head,
            head_piped: 0,
            tainted: false,
            decouple: false,
            shared_pull: SharedPull::default(),
        }
    }

    /// Is the body still being read into an object for the cache (not
    /// over `--max-object-size`)?
    pub fn filling(&self) -> bool {
        self.fill.is_some()
    }

    /// Has the client gone away (the session only fills the cache)?
    pub fn client_gone(&self) -> bool {
        self.client_gone
    }

    fn tail_mode(&self) -> bool {
        matches!(self.path, Path::Copy) && !matches!(self.framing, Framing::Chunked { .. })
    }

    /// Bytes waiting in pipes on their way to the client.
    fn piped(&self) -> usize {
        match &self.path {
            Path::Copy | Path::Kernel(_) => 0,
            Path::Splice { bytes, .. } => *bytes,
            Path::Tee { in_intake, in_out, .. } => in_intake + in_out,
        }
    }

    /// Consume body bytes that arrived with the head (Length and Close bodies;
    /// chunked ones are decoded from the upstream buffer by the pump).
    pub fn start(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) {
        if matches!(self.framing, Framing::Chunked { .. }) {
            return;
        }
        let pending = e.up_buf.pending();
        let take = match self.framing {
            Framing::Length(n) => (n.min(pending.len() as u64)) as usize,
            _ => pending.len(),
        };
        if take == 0 {
            return;
        }
        let data = &pending[..take];
        if self.tail_mode() {
            self.acc.extend_from_slice(data);
            if let Some(f) = &mut self.fill {
                f.size += take as u64;
                st.bytes_filled += take as u64;
            }
        } else {
            e.out.push_copy(data);
            st.bytes_copied += take as u64;
            self.keep_for_cache(data, st);
        }
        if let Framing::Length(n) = &mut self.framing {
            *n -= take as u64;
            if *n == 0 {
                self.body_done = true;
            }
        }
        e.up_buf.consume(take);
        self.check_fill_limit();
    }

    /// Move the body along as far as readiness allows.
    pub fn pump(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Pump {
        self.idle_pump = false;
        if let Some(r) = self.pump_kernel(e, st) {
            return r;
        }
        if self.fill_whole() {
            // The bytes that came with the head completed it.
            return Pump::Whole;
        }
        let mut moved: u64 = 0;
        let mut chain_idle = false;
        let mut any = false;
        loop {
            let progress;
            // One linked chain moves a chunk in and out (and tees it) when
            // both sockets are ready; otherwise the steps below, one call each.
            let chained = if chain_idle { None } else { self.linked_step(e, st) };
            match chained {
                Some(Ok(n)) => {
                    // A chain that moved nothing hands over to the steps.
                    progress = true;
                    chain_idle = n == 0;
                    any |= n > 0;
                    moved += n as u64;
                }
                Some(Err(r)) => return self.ended(r, e, st),
                None => match self.steps(e, st, &mut moved) {
                    Ok(p) => {
                        progress = p;
                        any |= p;
                    }
                    Err(r) => return self.ended(r, e, st),
                },
            }
            if self.fill_whole() {
                return Pump::Whole;
            }
            // Never with a fill: a whole one was taken (above), and one not
            // whole yet still has bytes to read.
            if self.body_done
                && !self.intake_left()
                && (self.client_gone || (self.piped() == 0 && self.sent == self.acc.len()))
            {
                return Pump::Done;
            }
            if self.client_gone && self.fill.is_none() {
                return Pump::ClientAborted;
            }
            if moved >= PUMP_BUDGET {
                return Pump::Yield;
            }
            // (A fill that is whole is stored already: nothing to decouple.)
            if !progress && self.decouple && self.fill.is_some() && !*e.client_may_write {
                if let Path::Tee { .. } = self.path {
                    // The client holds the tee back, and with it the fill
                    // that others follow (what is read, what waits in the
                    // intake to be tee'd, and the store at the end): copy
                    // from here on, so the upstream is read into the object
                    // at its own pace and the object is stored when it is
                    // whole, the client's share queued for it.
                    st.fills_decoupled += 1;
                    if let Err(r) = self.switch_to_copy(e, st) {
                        return r;
                    }
                    continue;
                }
            }
            if !progress {
                self.idle_pump = !any;
                let client_pending = !self.client_gone
                    && (!e.out.is_empty()
                        || (self.tail_mode() && self.sent < self.acc.len())
                        || self.client_piped() > 0);
                return Pump::Wait {
                    up_read: !self.body_done && !*e.up_may_read,
                    client_write: client_pending && !*e.client_may_write,
                };
            }
        }
    }

    /// The session ends with `r`. On an upstream failure the client is first
    /// sent what its pipe holds, as much as its socket takes now: those
    /// bytes were read, and the read that finds the upstream's end often
    /// comes right after the tee that put the last of them there.
    fn ended(&mut self, r: Pump, e: &mut Ends<'_>, st: &mut ProxyStats) -> Pump {
        if matches!(r, Pump::UpstreamFailed(_)) && !self.client_gone && self.client_piped() > 0 {
            // A client error here changes nothing: the session ends anyway.
            let _ = self.push_client(e, st);
        }
        r
    }

    /// One call per step: flush to the client, tee, read from the upstream.
    /// Ok(progress), or how the session ended.
    fn steps(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats, moved: &mut u64) -> Result<bool, Pump> {
        let mut progress = false;
        if !self.client_gone {
            match self.push_client(e, st) {
                Ok(n) => {
                    progress |= n > 0;
                    *moved += n as u64;
                }
                Err(r) => {
                    if let Some(r) = self.on_client_error(r, e) {
                        return Err(r);
                    }
                    progress = true;
                }
            }
        }
        match self.tee_step(e, st) {
            Ok(n) => progress |= n > 0,
            Err(()) => {
                self.fallback(e, st)?;
                progress = true;
            }
        }
        match self.pull(e, st) {
            Ok(n) => {
                progress |= n > 0;
                *moved += n as u64;
            }
            Err(Some(r)) => return Err(r),
            Err(None) => {
                self.fallback(e, st)?;
                progress = true;
            }
        }
        Ok(progress)
    }

    fn client_piped(&self) -> usize {
        match &self.path {
            Path::Copy | Path::Kernel(_) => 0,
            Path::Splice { bytes, .. } => *bytes,
            Path::Tee { in_out, .. } => *in_out,
        }
    }

    /// The client hung up (seen by a read): keep filling the cache without it
    /// if there is a fill; false when nothing is left to do.
    pub fn client_left(&mut self, out: &mut OutChain) -> bool {
        self.client_gone = true;
        out.clear();
        self.sent = self.acc.len();
        self.fill.is_some()
    }

    /// No client from the start (a background revalidation): the body
    /// only fills the cache; not counted as a client abort.
    pub fn without_client(&mut self, out: &mut OutChain) {
        self.client_left(out);
        self.no_client = true;
    }

    /// Client write failed: keep filling without it, or give up.
    fn on_client_error(&mut self, _e: io::Error, ends: &mut Ends<'_>) -> Option<Pump> {
        self.client_gone = true;
        ends.out.clear();
        // With the whole body read (a whole object is stored already), the
        // session ends as Done: the upstream connection stays reusable.
        if self.fill.is_none() && !self.body_done {
            return Some(Pump::ClientAborted);
        }
        self.sent = self.acc.len();
        None
    }

    /// Output queue and copy tail, then the pipe, to the client.
    fn push_client(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<usize, io::Error> {
        let Some(cfd) = e.client else { return Ok(0) };
        let mut total = 0;
        let tail_mode = self.tail_mode();
        let has_tail = tail_mode && self.sent < self.acc.len();
        if !e.out.is_empty() || has_tail {
            if !*e.client_may_write {
                return Ok(0);
            }
            let tail: &[u8] = if has_tail { &self.acc[self.sent..] } else { &[] };
            st.calls_client_send += 1;
            let sent = e.out.flush(cfd, tail, &mut [])?;
            self.sent += sent.tail;
            st.bytes_copied += sent.tail as u64;
            total += sent.total() as usize;
            if sent.blocked {
                *e.client_may_write = false;
            }
            if tail_mode && self.fill.is_none() {
                if self.sent == self.acc.len() {
                    // Everything relayed: reuse the buffer from its start.
                    self.acc.clear();
                } else {
                    // Drop the sent prefix so the next read can reuse its room.
                    self.acc.advance(self.sent);
                }
                self.sent = 0;
            }
            if !e.out.is_empty() || (tail_mode && self.sent < self.acc.len()) {
                return Ok(total);
            }
        }
        let (pipe, bytes) = match &mut self.path {
            Path::Copy | Path::Kernel(_) => return Ok(total),
            Path::Splice { pipe, bytes } => (pipe, bytes),
            Path::Tee { out, in_out, .. } => (out, in_out),
        };
        let n = splice_to_client(pipe, bytes, cfd, (e.client_may_write, e.out), st)?;
        // Head bytes a chain wrote into the pipe (`linked.rs`) are not body.
        let head = n.min(self.head_piped);
        self.head_piped -= head;
        st.bytes_spliced -= head as u64;
        Ok(total + n)
    }

    /// Read from the upstream. Err(Some): finished badly; Err(None): splice
    /// failed, fall back to copying.
    fn pull(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<usize, Option<Pump>> {
        if self.body_done {
            return Ok(0);
        }
        if let Framing::Chunked { .. } = self.framing {
            // Framing bytes may already be buffered (they came with the head).
            return self.pull_chunked(e, st);
        }
        if !*e.up_may_read {
            return Ok(0);
        }
        let left = match self.framing {
            Framing::Length(n) => n,
            _ => u64::MAX,
        };
        let room = self.read_room();
        let got = match &mut self.path {
            // Never pulled: the kernel moves its body (`relay/kernel.rs`).
            Path::Kernel(_) => return Ok(0),
            Path::Copy => {
                if self.client_gone && self.fill.is_none() {
                    return Ok(0);
                }
                let want = if let Some(f) = &self.fill {
                    let room = self.acc.capacity() - self.acc.len();
                    if room == 0 {
                        // Unknown length: hand the full part to the object and
                        // start another block (no reallocation of filled bytes).
                        let frozen = self.acc.split().freeze();
                        if self.sent < frozen.len() && !self.client_gone {
                            e.out.push_shared(frozen.slice(self.sent..));
                        }
                        self.sent = 0;
                        let step = (f.max.saturating_sub(f.size) as usize).clamp(1, FILL_STEP);
                        self.acc.reserve(step);
                        if let Some(f) = &mut self.fill {
                            f.segs.push(frozen);
                        }
                    }
                    (self.acc.capacity() - self.acc.len()).min(left.min(usize::MAX as u64) as usize)
                } else {
                    if self.acc.len() - self.sent >= RELAY_BUF {
                        return Ok(0);
                    }
                    let size = RELAY_BUF.min(left.min(RELAY_BUF as u64) as usize);
                    if self.acc.capacity() < size {
                        self.acc.reserve(size);
                    }
                    (RELAY_BUF - (self.acc.len() - self.sent)).min(left.min(usize::MAX as u64) as usize)
                };
                if want == 0 {
                    return Ok(0);
                }
                st.calls_copy_read += 1;
                match sys::read_to_bytes(e.up, &mut self.acc, want) {
                    Ok(n) => {
                        if n > 0 {
                            if let Some(f) = &mut self.fill {
                                f.size += n as u64;
                                st.bytes_filled += n as u64;
                            }
                            if self.client_gone {
                                self.sent = self.acc.len();
                            }
                        }
                        Ok(n)
                    }
                    Err(err) => Err(err),
                }
            }
            // Into the pipe the body leaves by (Splice), or the intake pipe
            // that is tee'd into the cache (Tee): the same splice.
            Path::Splice { pipe, bytes }
            | Path::Tee {
                intake: pipe,
                in_intake: bytes,
                ..
            } => {
                if room == 0 {
                    return Ok(0);
                }
                let want = (left.min(room as u64)) as usize;
                st.calls_splice_in += 1;
                match sys::splice(e.up, pipe.write_fd(), want, false) {
                    Ok(n) => {
                        *bytes += n;
                        Ok(n)
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock && *bytes > 0 => return Ok(0),
                    Err(err) => Err(err),
                }
            }
        };
        match got {
            Ok(0) => {
                // End of stream.
                if matches!(self.framing, Framing::Close) {
                    self.body_done = true;
                    Ok(1)
                } else {
                    Err(Some(Pump::UpstreamFailed("upstream closed the connection mid-body")))
                }
            }
            Ok(n) => {
                if let Framing::Length(l) = &mut self.framing {
                    *l -= n as u64;
                    if *l == 0 {
                        self.body_done = true;
                        // The connection may go back to the pool: the next
                        // response head must wake us at its first byte.
                        self.set_lowat(e.up, 1);
                    }
                }
                self.check_fill_limit();
                self.pulled += n;
                Ok(n)
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                *e.up_may_read = false;
                self.batch_reads(e.up);
                Ok(0)
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(err) if is_peer_error(&err) || matches!(self.path, Path::Copy) => {
                Err(Some(Pump::UpstreamFailed("upstream connection failed mid-body")))
            }
            Err(_) => Err(None),
        }
    }

    /// Did the last [`Relay::pump`] move nothing at all (a wake-up that was
    /// no news: level-triggered backends that keep both directions report a
    /// writable socket at every wait)? Such a pump is no activity: the
    /// timeouts keep counting from the last step that moved something.
    pub fn moved_nothing(&self) -> bool {
        self.idle_pump
    }

    /// Bytes the next upstream read may take: the room in the pipe (splice),
    /// the intake (tee), the object being filled (a full one starts another
    /// block) or the relay buffer's unsent window (copy).
    fn read_room(&self) -> usize {
        match &self.path {
            Path::Copy if self.fill.is_some() => match self.acc.capacity() - self.acc.len() {
                0 => FILL_STEP,
                n => n,
            },
            Path::Copy => RELAY_BUF.saturating_sub(self.acc.len() - self.sent),
            Path::Splice { pipe, bytes } => pipe.capacity().saturating_sub(*bytes),
            Path::Tee { intake, in_intake, .. } => intake.capacity().saturating_sub(*in_intake),
            Path::Kernel(_) => 0,
        }
    }

    /// A splice or tee failed: move what the pipes hold into the output queue
    /// (and the cache) and continue by copying.
    fn fallback(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<(), Pump> {
        if !self.fell_back {
            self.fell_back = true;
            st.sessions_fallback += 1;
        }
        self.switch_to_copy(e, st)
    }

    /// Move what the pipes hold into the output queue (and the cache) and
    /// continue by copying.
    fn switch_to_copy(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<(), Pump> {
        let path = std::mem::replace(&mut self.path, Path::Copy);
        let drain = |fd: RawFd, n: usize, out: &mut Vec<u8>| -> bool {
            let mut got = 0;
            let mut tmp = [0u8; 16 * 1024];
            while got < n {
                let want = (n - got).min(16 * 1024);
                match sys::read(fd, &mut tmp[..want]) {
                    Ok(0) => return false,
                    Ok(k) => {
                        out.extend_from_slice(&tmp[..k]);
                        got += k;
                    }
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            true
        };
        let mut client_bytes: Vec<u8> = Vec::new();
        let mut uncached: Vec<u8> = Vec::new();
        let ok = match &path {
            Path::Copy | Path::Kernel(_) => true,
            Path::Splice { pipe, bytes } => drain(pipe.read_fd(), *bytes, &mut client_bytes),
            Path::Tee {
                intake,
                in_intake,
                out,
                in_out,
            } => drain(out.read_fd(), *in_out, &mut client_bytes) && drain(intake.read_fd(), *in_intake, &mut uncached),
        };
        drop(path);
        if !ok {
            return Err(Pump::UpstreamFailed("splice failed and the pipe could not be drained"));
        }
        if !self.client_gone {
            e.out.push_copy(&client_bytes);
            e.out.push_copy(&uncached);
            st.bytes_copied += (client_bytes.len() + uncached.len()) as u64;
        }
        if !uncached.is_empty() {
            self.keep_for_cache(&uncached, st);
        }
        // From here on the copy path's tail follows the output queue.
        self.sent = self.acc.len();
        self.check_fill_limit();
        Ok(())
    }

    /// The relay buffer, for the next session, when it is not part of a
    /// cached object.
    pub fn take_buffer(&mut self) -> Option<BytesMut> {
        if self.fill.is_some() || self.acc.capacity() == 0 {
            return None;
        }
        Some(std::mem::take(&mut self.acc))
    }

    /// End of a completed session: give the pipes back, and hand over the
    /// filled object's body if [`Pump::Whole`] has not (None when not
    /// filling, or the client aborted a non-filling session).
    pub fn finish(mut self, out: &mut OutChain, pool: &mut PipePool, st: &mut ProxyStats) -> Option<Aggregate> {
        let body = self.take_whole(out, st);
        match std::mem::replace(&mut self.path, Path::Copy) {
            Path::Copy => st.sessions_copy += 1,
            Path::Splice { pipe, bytes } => {
                st.sessions_splice += 1;
                // A client that left may have left bytes in it: closed, as
                // the tee path's output pipe is (a session that read the
                // whole body ends as Done even so).
                pool.put(pipe, if self.client_gone { bytes.max(1) } else { bytes });
            }
            Path::Tee {
                intake,
                in_intake,
                out,
                in_out,
            } => {
                st.sessions_keep_copy += 1;
                pool.put(intake, in_intake);
                // After a client abort the output pipe may hold unsent bytes:
                // it is then closed, not pooled.
                pool.put(out, if self.client_gone { in_out.max(1) } else { in_out });
            }
            Path::Kernel(mut k) => {
                st.sockmap_bodies += 1;
                if let Some(pipe) = k.take_pipe() {
                    pool.put(pipe, usize::from(self.client_gone));
                }
            }
        }
        if self.client_gone && !self.no_client {
            st.sessions_client_abort += 1;
        }
        body
    }

    /// Abandon the session (errors): pipes are closed, nothing is cached.
    pub fn abandon(self, st: &mut ProxyStats, upstream_failed: bool) {
        if upstream_failed {
            st.sessions_upstream_abort += 1;
        } else {
            st.sessions_client_abort += 1;
        }
        // Dropping the pipes closes them (they may hold bytes).
        drop(self);
    }
}

mod batch;
mod chunked;
mod follow;
mod keep;
mod kernel;
mod linked;
pub(crate) use kernel::KERNEL_BODY_MAX;
mod request_body;
pub(crate) use request_body::{splice_request_body, BodyEnd, BodyPipe};
#[cfg(test)]
mod tests;
