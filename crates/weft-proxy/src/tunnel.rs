//! CONNECT tunnels: the bidirectional splice of paper 000 §3 (and the SSL
//! tunnels of paper 001), built from two unidirectional relays.
//!
//! Each direction moves bytes source → pipe → destination with splice(2), or
//! through a user-space buffer when splicing is off, no pipe is available or
//! a splice fails (the pipe's bytes are read out first, so nothing is lost
//! or reordered). An end of stream is forwarded as a half-close
//! (shutdown(SHUT_WR)) once everything before it has been delivered; the tunnel
//! ends when both directions have been closed this way, or at the first error.
//!
//! With `--splice sockmap` a tunnel is forwarded in the kernel instead
//! (module `kernel`): once the `200` and the client's early bytes are out,
//! both sockets join weft-sockmap's maps and the BPF verdict program
//! redirects every skb to the peer; weft wakes only at each end of stream,
//! at each end-of-stream marker and at errors.

use crate::stats::ProxyStats;
use std::io;
use std::os::fd::BorrowedFd;
use weft_io::sys;
use weft_io::{OutChain, Pipe, PipePool};

mod kernel;
pub use kernel::{IdleLook, KernelFwd};

const BUF: usize = 64 * 1024;
const PUMP_BUDGET: usize = 4 << 20;
/// Copy buffers a worker keeps for its next tunnels.
const SPARE_BUFS: usize = 64;

/// A worker's spare copy buffers: a tunnel that copies takes two and gives
/// them back when it closes, so no tunnel allocates (and zero-fills) 128 KiB.
#[derive(Default)]
pub struct TunnelBufs {
    spare: Vec<Vec<u8>>,
}

impl TunnelBufs {
    fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| vec![0u8; BUF])
    }

    fn give(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFS && buf.len() == BUF {
            self.spare.push(buf);
        }
    }
}

enum Path {
    Copy { buf: Vec<u8>, start: usize, end: usize },
    Splice { pipe: Pipe, bytes: usize },
}

/// One direction of a tunnel.
pub struct Direction {
    path: Path,
    eof: bool,
    shut: bool,
}

/// One side's sockets and readiness, as a direction sees it.
pub struct Side<'a> {
    /// Descriptor.
    pub fd: BorrowedFd<'a>,
    /// May have input.
    pub may_read: &'a mut bool,
    /// May accept output.
    pub may_write: &'a mut bool,
}

/// What one pump call of a tunnel works on: both sides, the client's queued
/// output and the worker's shared means.
pub struct TunnelEnds<'a> {
    /// The client side.
    pub client: Side<'a>,
    /// The upstream side.
    pub up: Side<'a>,
    /// Queued client output (the `200 Connection established`), delivered
    /// before upstream bytes.
    pub client_out: &'a mut OutChain,
    /// The worker's spare copy buffers.
    pub bufs: &'a mut TunnelBufs,
    /// The worker's sockmap forwarder (`--splice sockmap`).
    pub fwd: &'a mut KernelFwd,
}

/// What a pump call ended with.
#[derive(Debug, PartialEq, Eq)]
pub enum TunnelState {
    /// Both directions ended cleanly.
    Done,
    /// Waiting: (client read, client write, upstream read, upstream write).
    Wait {
        /// Client readable.
        client_read: bool,
        /// Client writable.
        client_write: bool,
        /// Upstream readable.
        up_read: bool,
        /// Upstream writable.
        up_write: bool,
    },
    /// Budget used; drive again later.
    Yield,
    /// A socket failed: close both.
    Failed,
}

impl Direction {
    fn new(splice: bool, pool: &mut PipePool, bufs: &mut TunnelBufs, st: &mut ProxyStats) -> Direction {
        let path = if splice {
            match pool.get() {
                Ok(pipe) => Path::Splice { pipe, bytes: 0 },
                Err(_) => {
                    st.sessions_no_pipe += 1;
                    copy_path(bufs.take())
                }
            }
        } else {
            copy_path(bufs.take())
        };
        Direction {
            path,
            eof: false,
            shut: false,
        }
    }

    fn pending(&self) -> usize {
        match &self.path {
            Path::Copy { start, end, .. } => end - start,
            Path::Splice { bytes, .. } => *bytes,
        }
    }

    /// Move bytes `src` → `dst`, after `pre` (bytes queued for `dst` first).
    /// Returns bytes moved; Err on a socket error.
    fn pump(
        &mut self,
        src: &mut Side<'_>,
        dst: &mut Side<'_>,
        pre: &mut OutChain,
        bufs: &mut TunnelBufs,
        st: &mut ProxyStats,
    ) -> Result<usize, ()> {
        let mut moved = 0;
        loop {
            let mut progress = false;
            if !pre.is_empty() {
                if !*dst.may_write {
                    return Ok(moved);
                }
                let sent = pre.flush(dst.fd, &[], &mut []).map_err(drop)?;
                moved += sent.total() as usize;
                if sent.blocked {
                    *dst.may_write = false;
                }
                if !pre.is_empty() {
                    return Ok(moved);
                }
            }
            // Deliver what is buffered.
            if self.pending() > 0 && *dst.may_write {
                let r = match &mut self.path {
                    Path::Copy { buf, start, end } => match sys::send(dst.fd, &buf[*start..*end], false) {
                        Ok(n) => {
                            *start += n;
                            if start == end {
                                *start = 0;
                                *end = 0;
                            }
                            st.tunnel_bytes_copied += n as u64;
                            Ok(n)
                        }
                        Err(e) => Err(e),
                    },
                    Path::Splice { pipe, bytes } => match sys::splice(pipe.read_fd(), dst.fd, *bytes, false) {
                        Ok(n) => {
                            *bytes -= n;
                            st.tunnel_bytes_spliced += n as u64;
                            Ok(n)
                        }
                        Err(e) => Err(e),
                    },
                };
                match r {
                    Ok(0) => return Err(()),
                    Ok(n) => {
                        moved += n;
                        progress = true;
                    }
                    Err(e) => progress |= self.failed(&e, dst.may_write, bufs, st)?,
                }
            }
            // Take more from the source.
            if !self.eof && *src.may_read {
                let r = match &mut self.path {
                    Path::Copy { buf, start, end } => {
                        if *end == buf.len() && *start > 0 {
                            buf.copy_within(*start..*end, 0);
                            *end -= *start;
                            *start = 0;
                        }
                        if *end < buf.len() {
                            let e = *end;
                            sys::read(src.fd, &mut buf[e..]).inspect(|&n| *end += n)
                        } else {
                            Ok(usize::MAX)
                        }
                    }
                    Path::Splice { pipe, bytes } => {
                        let room = pipe.capacity().saturating_sub(*bytes);
                        if room == 0 {
                            Ok(usize::MAX)
                        } else {
                            match sys::splice(src.fd, pipe.write_fd(), room, false) {
                                Ok(n) => {
                                    *bytes += n;
                                    Ok(n)
                                }
                                // Slots may be full rather than the socket empty.
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock && *bytes > 0 => Ok(usize::MAX),
                                Err(e) => Err(e),
                            }
                        }
                    }
                };
                match r {
                    Ok(usize::MAX) => {}
                    Ok(0) => {
                        self.eof = true;
                        progress = true;
                    }
                    Ok(n) => {
                        moved += n;
                        progress = true;
                    }
                    Err(e) => progress |= self.failed(&e, src.may_read, bufs, st)?,
                }
            }
            if self.eof && self.pending() == 0 && !self.shut {
                // Forward the end of stream as a half-close.
                let _ = sys::shutdown_write(dst.fd);
                self.shut = true;
                progress = true;
            }
            if !progress || moved >= PUMP_BUDGET {
                return Ok(moved);
            }
        }
    }

    /// A read or write that failed with `e`: a socket not ready clears its
    /// `ready` flag, EINTR is retried on the next pass, splice refused on this
    /// kernel falls back to copying (progress: Ok(true)); anything else ends
    /// the tunnel.
    fn failed(
        &mut self,
        e: &io::Error,
        ready: &mut bool,
        bufs: &mut TunnelBufs,
        st: &mut ProxyStats,
    ) -> Result<bool, ()> {
        match e.kind() {
            io::ErrorKind::WouldBlock => *ready = false,
            io::ErrorKind::Interrupted => {}
            _ if matches!(self.path, Path::Splice { .. }) && is_splice_failure(e) => {
                self.fallback(bufs, st)?;
                return Ok(true);
            }
            _ => return Err(()),
        }
        Ok(false)
    }

    fn fallback(&mut self, bufs: &mut TunnelBufs, st: &mut ProxyStats) -> Result<(), ()> {
        st.sessions_fallback += 1;
        let old = std::mem::replace(&mut self.path, copy_path(bufs.take()));
        if let (Path::Splice { pipe, bytes }, Path::Copy { buf, end, .. }) = (old, &mut self.path) {
            if bytes > buf.len() {
                buf.resize(bytes, 0);
            }
            let mut got = 0;
            while got < bytes {
                match sys::read(pipe.read_fd(), &mut buf[got..bytes]) {
                    Ok(0) => return Err(()),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                }
            }
            *end = bytes;
        }
        Ok(())
    }

    fn give_back(self, pool: &mut PipePool, bufs: &mut TunnelBufs) {
        match self.path {
            Path::Splice { pipe, bytes } => pool.put(pipe, bytes),
            Path::Copy { buf, .. } => bufs.give(buf),
        }
    }
}

fn copy_path(buf: Vec<u8>) -> Path {
    Path::Copy { buf, start: 0, end: 0 }
}

fn is_splice_failure(e: &io::Error) -> bool {
    sys::is_splice_unsupported(e)
}

/// A tunnel between the client and an upstream.
pub struct Tunnel {
    c2u: Direction,
    u2c: Direction,
    kernel: Option<kernel::Kernel>,
    /// Bytes for the upstream before the tunnel's own (what the client sent
    /// right after its CONNECT head).
    pub to_upstream: OutChain,
    /// The last `pump` moved nothing (see `moved_nothing`).
    idle_pump: bool,
}

impl Tunnel {
    /// A tunnel splicing both directions (or copying when `splice` is false
    /// or pipes are short).
    pub fn new(splice: bool, pool: &mut PipePool, bufs: &mut TunnelBufs, st: &mut ProxyStats) -> Tunnel {
        st.tunnels += 1;
        Tunnel {
            c2u: Direction::new(splice, pool, bufs, st),
            u2c: Direction::new(splice, pool, bufs, st),
            kernel: None,
            to_upstream: OutChain::new(),
            idle_pump: false,
        }
    }

    /// Move bytes both ways (the client's queued output first).
    pub fn pump(&mut self, e: &mut TunnelEnds<'_>, st: &mut ProxyStats) -> TunnelState {
        let joined = self.in_kernel();
        if let Some(state) = self.pump_kernel(e, st) {
            // Joined, the kernel moves the bytes: a wake-up is a marker or
            // no news, and the idle timer asks the kernel what moved.
            self.idle_pump = joined;
            return state;
        }
        let TunnelEnds {
            client,
            up,
            client_out,
            bufs,
            ..
        } = e;
        let a = self.u2c.pump(up, client, client_out, bufs, st);
        let b = self.c2u.pump(client, up, &mut self.to_upstream, bufs, st);
        let (Ok(a), Ok(b)) = (a, b) else {
            return TunnelState::Failed;
        };
        if self.c2u.shut && self.u2c.shut {
            return TunnelState::Done;
        }
        if a + b >= PUMP_BUDGET {
            return TunnelState::Yield;
        }
        self.idle_pump = a + b == 0;
        TunnelState::Wait {
            client_read: !self.c2u.eof && !*client.may_read,
            client_write: (self.u2c.pending() > 0 || !client_out.is_empty()) && !*client.may_write,
            up_read: !self.u2c.eof && !*up.may_read,
            up_write: (self.c2u.pending() > 0 || !self.to_upstream.is_empty()) && !*up.may_write,
        }
    }

    /// Did the last [`Tunnel::pump`] move nothing (a wake-up that was no
    /// news, as level-triggered backends that keep both directions report a
    /// writable socket at every wait)? Then it is no activity for the idle
    /// timeout.
    pub fn moved_nothing(&self) -> bool {
        self.idle_pump
    }

    /// Return the pipes (closed if they still hold bytes) and the copy
    /// buffers; `fds` are the client's and the upstream's sockets, still
    /// open (a sockmap tunnel leaves the maps with them).
    pub fn close(
        self,
        pool: &mut PipePool,
        bufs: &mut TunnelBufs,
        fwd: &mut KernelFwd,
        fds: Option<[BorrowedFd<'_>; 2]>,
    ) {
        if let Some(k) = self.kernel {
            k.leave(fwd, fds);
        }
        self.c2u.give_back(pool, bufs);
        self.u2c.give_back(pool, bufs);
    }
}
