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
//! With `--splice sockmap` a tunnel is forwarded in the kernel instead (see
//! [`Kernel`]): once the `200` and the client's early bytes are out, both
//! sockets join weft-sockmap's map and the BPF verdict program redirects
//! every skb to the peer; weft only waits for each end of stream.

use crate::stats::ProxyStats;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use weft_io::sys;
use weft_io::{OutChain, Pipe, PipePool};

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

/// A worker's sockmap forwarder: not tried yet, loaded, or unavailable.
#[derive(Default)]
pub enum KernelFwd {
    /// Not needed yet (loaded at the first `--splice sockmap` tunnel).
    #[default]
    Untried,
    /// Loaded and attached.
    Ready(Box<weft_sockmap::Forwarder>),
    /// BPF is not permitted (or not built): tunnels splice.
    Unavailable,
}

/// Said once per process when sockmap forwarding is unavailable.
static SAID: AtomicBool = AtomicBool::new(false);

impl KernelFwd {
    fn get(&mut self) -> Option<&mut weft_sockmap::Forwarder> {
        if matches!(self, KernelFwd::Untried) {
            *self = match weft_sockmap::Forwarder::load() {
                Ok(f) => KernelFwd::Ready(Box::new(f)),
                Err(e) => {
                    if !SAID.swap(true, Ordering::Relaxed) {
                        eprintln!("weft proxy: --splice sockmap unavailable ({e}); tunnels splice instead");
                    }
                    KernelFwd::Unavailable
                }
            };
        }
        match self {
            KernelFwd::Ready(f) => Some(f),
            _ => None,
        }
    }
}

/// In-kernel forwarding of one tunnel (0: client → upstream, 1: upstream →
/// client).
struct Kernel {
    pair: Option<weft_sockmap::Pair>,
    /// Each source socket's bytes_received when it joined.
    base_received: [u64; 2],
    /// Each destination socket's bytes written when it joined.
    base_written: [u64; 2],
    eof: [bool; 2],
    shut: [bool; 2],
    /// `base_received` taken.
    based: bool,
}

/// A tunnel between the client and an upstream.
pub struct Tunnel {
    c2u: Direction,
    u2c: Direction,
    kernel: Option<Kernel>,
    /// Bytes for the upstream before the tunnel's own (what the client sent
    /// right after its CONNECT head).
    pub to_upstream: OutChain,
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
        }
    }

    /// Ask for in-kernel forwarding (`--splice sockmap`): the tunnel joins
    /// the map once its queued output is out, or splices if BPF is not
    /// available.
    pub fn want_kernel(&mut self, fwd: &mut KernelFwd, st: &mut ProxyStats) {
        if fwd.get().is_none() {
            st.sockmap_declined += 1;
            return;
        }
        self.kernel = Some(Kernel {
            pair: None,
            base_received: [0; 2],
            base_written: [0; 2],
            eof: [false; 2],
            shut: [false; 2],
            based: false,
        });
    }

    /// The sockmap path of [`Tunnel::pump`]; `None` when the tunnel went back
    /// to splicing (bytes were already waiting when the sockets joined).
    fn pump_kernel(
        &mut self,
        client: &mut Side<'_>,
        up: &mut Side<'_>,
        client_out: &mut OutChain,
        st: &mut ProxyStats,
        fwd: &mut KernelFwd,
    ) -> Option<TunnelState> {
        let k = self.kernel.as_mut()?;
        if k.pair.is_none() && !k.based {
            // What each socket received before the 200 went out: a client
            // sends its tunnel bytes after the 200, and bytes arriving before
            // the join are redirected once it is made, so they count as the
            // program's.
            let (Ok(cb), Ok(ub)) = (sys::bpf::tcp_bytes(client.fd), sys::bpf::tcp_bytes(up.fd)) else {
                self.kernel = None;
                st.sockmap_declined += 1;
                return None;
            };
            k.base_received = [cb.received, ub.received];
            k.based = true;
        }
        if k.pair.is_none() {
            // Queued output first: the 200 to the client, early bytes upstream.
            let (cfd, ufd) = (client.fd, up.fd);
            for (pre, fd, writable) in [
                (&mut *client_out, cfd, &mut *client.may_write),
                (&mut self.to_upstream, ufd, &mut *up.may_write),
            ] {
                if pre.is_empty() || !*writable {
                    continue;
                }
                match pre.flush(fd, &[], &mut []) {
                    Ok(sent) if sent.blocked => *writable = false,
                    Ok(_) => {}
                    Err(_) => return Some(TunnelState::Failed),
                }
            }
            if !client_out.is_empty() || !self.to_upstream.is_empty() {
                return Some(TunnelState::Wait {
                    client_read: false,
                    client_write: !client_out.is_empty() && !*client.may_write,
                    up_read: false,
                    up_write: !self.to_upstream.is_empty() && !*up.may_write,
                });
            }
            let Some(f) = fwd.get() else {
                self.kernel = None;
                st.sockmap_declined += 1;
                return None;
            };
            let (Ok(cb), Ok(ub)) = (sys::bpf::tcp_bytes(client.fd), sys::bpf::tcp_bytes(up.fd)) else {
                self.kernel = None;
                st.sockmap_declined += 1;
                return None;
            };
            // Written after the queued output, which is weft's, not the program's.
            k.base_written = [ub.written(), cb.written()];
            let pair = match f.join(client.fd, up.fd) {
                Ok(p) => p,
                Err(_) => {
                    self.kernel = None;
                    st.sockmap_declined += 1;
                    return None;
                }
            };
            // Bytes that arrived before the join stay in their socket's queue
            // (the program sees only later skbs): splice this tunnel instead.
            let waiting = sys::bytes_readable(client.fd).unwrap_or(1) + sys::bytes_readable(up.fd).unwrap_or(1);
            if waiting > 0 {
                f.leave(pair);
                self.kernel = None;
                st.sockmap_declined += 1;
                return None;
            }
            k.pair = Some(pair);
            st.sockmap_sessions += 1;
        }
        // Joined: the kernel moves the bytes; weft waits for each end of stream.
        let mut again = false;
        for d in 0..2 {
            let (cfd, ufd) = (client.fd, up.fd);
            let (src, dst, ready) = if d == 0 {
                (cfd, ufd, &mut *client.may_read)
            } else {
                (ufd, cfd, &mut *up.may_read)
            };
            // The end of stream, from the TCP state: a socket in a sockmap
            // answers read(2) with EPIPE once its own write side is shut.
            if !k.eof[d] && *ready {
                match sys::bpf::tcp_bytes(src) {
                    Ok(t) if t.fin_received => k.eof[d] = true,
                    Ok(_) => *ready = false,
                    Err(_) => return Some(TunnelState::Failed),
                }
            }
            if k.eof[d] && !k.shut[d] {
                // Half-close only after every redirected byte reached dst
                // (bytes_received counts the FIN too).
                let Some((r, w)) = weft_sockmap::Pair::delivered(src, dst, k.base_received[d], k.base_written[d])
                else {
                    return Some(TunnelState::Failed);
                };
                if w + 1 >= r {
                    let _ = sys::shutdown_write(dst);
                    k.shut[d] = true;
                    st.sockmap_bytes += w;
                } else {
                    again = true;
                }
            }
        }
        if k.shut[0] && k.shut[1] {
            return Some(TunnelState::Done);
        }
        if again {
            // The kernel's backlog is still writing: look again shortly.
            return Some(TunnelState::Yield);
        }
        Some(TunnelState::Wait {
            client_read: !k.eof[0] && !*client.may_read,
            client_write: false,
            up_read: !k.eof[1] && !*up.may_read,
            up_write: false,
        })
    }

    /// Move bytes both ways. `client_out`: queued client output (the
    /// `200 Connection established`), delivered before upstream bytes.
    pub fn pump(
        &mut self,
        client: &mut Side<'_>,
        up: &mut Side<'_>,
        client_out: &mut OutChain,
        bufs: &mut TunnelBufs,
        st: &mut ProxyStats,
        fwd: &mut KernelFwd,
    ) -> TunnelState {
        if let Some(state) = self.pump_kernel(client, up, client_out, st, fwd) {
            return state;
        }
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
        TunnelState::Wait {
            client_read: !self.c2u.eof && !*client.may_read,
            client_write: (self.u2c.pending() > 0 || !client_out.is_empty()) && !*client.may_write,
            up_read: !self.u2c.eof && !*up.may_read,
            up_write: (self.c2u.pending() > 0 || !self.to_upstream.is_empty()) && !*up.may_write,
        }
    }

    /// Return the pipes (closed if they still hold bytes) and the copy buffers.
    pub fn close(self, pool: &mut PipePool, bufs: &mut TunnelBufs, fwd: &mut KernelFwd) {
        if let (Some(k), KernelFwd::Ready(f)) = (self.kernel, fwd) {
            if let Some(pair) = k.pair {
                f.leave(pair);
            }
        }
        self.c2u.give_back(pool, bufs);
        self.u2c.give_back(pool, bufs);
    }
}
