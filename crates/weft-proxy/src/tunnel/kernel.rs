//! In-kernel forwarding of a tunnel (`--splice sockmap`), event-driven.
//!
//! Before the join weft reads the client until EAGAIN (so no skb is left
//! half-read: the kernel redirects whole skbs) and writes out what it holds
//! (the `200`, the client's early bytes). Then both sockets join
//! weft-sockmap's maps, and weft only reacts to events:
//!
//! - EPOLLRDHUP on a source: TCP_INFO confirms the FIN (and, by taking the
//!   socket's lock, waits out the softirq that redirects the bytes before
//!   it). If the other direction has ended too, weft queues the
//!   end-of-stream marker behind those bytes; otherwise it looks (TCP_INFO
//!   on the destination, after [`Tunnel::drain_wait`]) until the
//!   destination has been written every redirected byte, and half-closes
//!   it then. The marker breaks the destination's psock, which is the
//!   other direction's source: while that direction is open, a broken
//!   psock would drop the bytes its verdict passes up (below);
//! - EPOLLERR on a destination: SO_ERROR is EPIPE when the psock worker
//!   reached the marker, i.e. sent everything before it; weft half-closes
//!   the destination (any other error ends the tunnel);
//! - both directions half-closed: the sockets leave the maps (their psock
//!   queues are empty by then) and the tunnel is done.
//!
//! A redirected skb waits on the destination's psock charged to no socket,
//! so without a bound a destination that stops reading would let its
//! source fill kernel memory. Two bounds hold it: in time, the idle timer
//! counts the bytes the peers acknowledge, not those forwarded, and closes
//! a tunnel whose peers took nothing ([`Tunnel::idle_timer`]); in bytes,
//! each direction redirects at most [`KERNEL_BUDGET`] bytes more than its
//! destination has been written ([`BOUND_ON`]).
//! Halfway through a grant the program posts the tunnel's token to the
//! ring, and weft raises the budget by what the destination has been
//! written since (one wake-up per 2 MiB while it keeps up). Past the budget
//! the program passes the source's skbs up (they wait on the source's
//! psock, charged to its receive buffer, whose window closes) and posts the
//! token again. weft then takes that direction over (`Phase`): it waits
//! until the destination has been written every redirected byte, reads the
//! passed bytes, writes them, and grants a new budget (bpf/sockmap.bpf.c
//! has the protocol). The counts say when: bytes passed against bytes
//! taken, never a read's EAGAIN or EOF (a passed skb can wait on the
//! psock's backlog behind the other direction's bytes). This kernel's code
//! allows it to deliver passed skbs out of order, so the program stamps
//! each with its place and weft puts them back in order as it reads them
//! (weft-sockmap's `Unstamper`); bytes it cannot place reset the tunnel.
//! While the destination stays slower than the source, weft keeps the
//! direction (it copies, as a spliced tunnel would move it); it hands it
//! back to the kernel once it has caught up. A hand-back that finds the
//! program already redirected on the new grant and passed up again drains
//! the destination again before writing those bytes.
//!
//! Direction 0 is client → upstream, 1 upstream → client; the pair's side 0
//! is the client, side 1 the upstream, so direction `d` reads side `d` and
//! writes side `1 - d`.

use super::{Side, Tunnel, TunnelEnds, TunnelState};
pub use crate::sockmap::KernelFwd;
use crate::sockmap::Seen;
use crate::stats::ProxyStats;
use std::os::fd::{BorrowedFd, RawFd};
use weft_io::sys;
use weft_io::OutChain;
use weft_sockmap::{Forwarder, Pair};

/// Bytes of client input read before the join in one pump.
const PRE_JOIN_READ: usize = 256 * 1024;

/// Bytes a direction may redirect per grant. What a destination that stops
/// reading can leave queued on its psock, charged to no socket, is at most
/// this: tcp_wmem's default largest send buffer, so a sockmap tunnel pins
/// about what a spliced one does (its pipe and send buffer) plus one such
/// buffer. A destination that keeps up costs one wake-up and a short copy
/// per this many bytes; a 1 MiB transfer none.
pub const KERNEL_BUDGET: u64 = 4 << 20;

/// Whether tunnels get a redirect budget. It was off from Dec 1 to Dec 2:
/// now and then a takeover let a stream through in the wrong order, which
/// was this file's hand-back (see `take_over`), not the kernel. The kernel's
/// pass path may reorder passed skbs too (an unlocked empty-queue test in
/// `sk_psock_verdict_apply`), so the program stamps each with its place and
/// the takeover puts them back in order (weft-sockmap's stamp.rs;
/// docs/proxy.md, "Why the takeover corrupted"). Off, a destination that
/// stops reading lets its source fill kernel memory until the idle timer.
const BOUND_ON: bool = true;

/// How soon weft first looks whether a draining direction's destination has
/// been written every redirected byte; each look that finds it has not
/// doubles the wait, up to [`DRAIN_POLL_MAX`]. The first look is at once: a
/// destination that keeps up has usually been written all by the time its
/// source ends.
const DRAIN_POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(1);

/// The longest wait between two looks (a stalled destination costs weft
/// about 60 wake-ups a second).
const DRAIN_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(16);

/// Bytes weft reads from a taken-over source at a time.
const TAKEOVER_CHUNK: usize = 64 * 1024;

/// Who moves a direction's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// The program redirects them.
    #[default]
    Kernel,
    /// The program passes them up; weft waits until the destination has
    /// been written every redirected byte.
    Drain,
    /// weft reads the passed bytes and writes them.
    Copy,
}

/// One tunnel's in-kernel state.
#[derive(Default)]
pub(super) struct Kernel {
    pair: Option<Pair>,
    /// The client's token, which the program posts to the ring when a
    /// direction begins passing up.
    token: u64,
    /// Who moves each direction's bytes now.
    phase: [Phase; 2],
    /// Passed bytes weft has read from each direction's source.
    took: [u64; 2],
    /// Each direction's grant: redirect until this many bytes in all.
    budget: [u64; 2],
    /// Each direction's grant: the ring is posted when the bytes
    /// redirected cross this.
    notify_at: [u64; 2],
    /// Bytes weft has written to each direction's destination.
    wrote: [u64; 2],
    /// Each taken-over source's TCP_WINDOW_CLAMP before the takeover, while
    /// weft holds it small (see `take_over`).
    clamp: [Option<usize>; 2],
    /// Looks that found a draining destination not yet written every
    /// redirected byte, since the last that found it had.
    drain_looks: u32,
    /// Passed bytes put in order and not yet written: the buffer and where
    /// its unwritten part starts (no buffer outside a takeover).
    held: [(Vec<u8>, usize); 2],
    /// What a takeover reads from each source before its stamps are undone
    /// (no buffer outside a takeover).
    raw: [Vec<u8>; 2],
    /// Direction's source FIN seen.
    eof: [bool; 2],
    /// Direction's marker sent to its destination.
    marked: [bool; 2],
    /// Direction's destination half-closed.
    shut: [bool; 2],
    /// Side no longer polled (see [`Tunnel::take_quiet`]).
    quiet: [bool; 2],
    /// Bytes forwarded both ways when the idle timer last looked.
    seen: u64,
    /// Bytes the two peers had acknowledged when the idle timer last looked.
    acked: u64,
    /// Bytes each side (0 client, 1 upstream) had been written at the join
    /// ([`weft_io::sys::TcpInfo::written`]): at its marker it must have
    /// been written exactly the bytes redirected to it on top.
    written_at_join: [u64; 2],
    /// Bytes weft had taken from each side's receive queue at the join
    /// ([`weft_io::sys::bytes_taken`]): at its FIN the program must have
    /// redirected exactly the bytes it received after them.
    taken_at_join: [u64; 2],
}

impl Kernel {
    /// Take the sockets out of the maps (at close); `fds` are the client's
    /// and the upstream's, still open.
    pub(super) fn leave(self, fwd: &mut KernelFwd, fds: Option<[BorrowedFd<'_>; 2]>) {
        if let (Some(pair), KernelFwd::Ready(f)) = (self.pair, fwd) {
            f.leave(pair, fds);
        }
    }
}

/// What the idle timer finds moved in a joined tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelProgress {
    /// The program forwarded or passed up bytes, or weft wrote some: passed
    /// bytes whose ring report was lost are found so (the caller drives
    /// the tunnel).
    pub forwarded: bool,
    /// A peer acknowledged bytes: the tunnel is not idle. Forwarded bytes
    /// alone do not count, as they do not for a spliced tunnel: a peer that
    /// stops reading while the other sends would otherwise keep the tunnel,
    /// and what the kernel queues for it, forever.
    pub delivered: bool,
}

/// What the client's timer does with a tunnel ([`Tunnel::idle_timer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleLook {
    /// Not idle yet: a draining destination is due another look (drive
    /// the tunnel).
    Look,
    /// A peer acknowledged bytes: the tunnel lives another idle timeout.
    /// `drive` when it may have passed bytes up (a report the full ring
    /// lost) or waits for a destination to drain.
    Alive { drive: bool },
    /// Idle: close it.
    Idle,
}

/// The outcome of one socket's event in the joined state.
enum Step {
    Ok,
    Failed,
    /// The socket's own counts disagree with the bytes the program
    /// redirected from it (as a source) or to it (as a destination).
    Mismatch,
}

impl Tunnel {
    /// Ask for in-kernel forwarding (`--splice sockmap`): the tunnel joins
    /// the maps once its queued output is out, or splices if BPF is not
    /// available or the worker cannot poll the program's ring (`ring`: the
    /// bound on what a tunnel pins needs its wake-ups). `token` is the
    /// client's, which the ring reports.
    pub fn want_kernel(&mut self, fwd: &mut KernelFwd, ring: bool, token: u64, st: &mut ProxyStats) {
        if !ring || fwd.get().is_none() {
            st.sockmap_declined += 1;
            return;
        }
        self.kernel = Some(Kernel {
            token,
            ..Kernel::default()
        });
    }

    /// Whether the tunnel means to join the maps (it may still decline, and
    /// then splices): its client socket must not bound its unsent bytes
    /// (`set_notsent_lowat`).
    pub fn to_kernel(&self) -> bool {
        self.kernel.is_some()
    }

    /// Whether the sockets have joined the maps and weft moves no byte of
    /// either direction: it waits only for ends of stream, errors and the
    /// ring (a direction weft took over reads and writes as a copy does).
    pub fn in_kernel(&self) -> bool {
        self.kernel
            .as_ref()
            .is_some_and(|k| k.pair.is_some() && !k.phase.contains(&Phase::Copy))
    }

    /// Whether a direction waits for its destination to be written the
    /// redirected bytes (taken over, or ended): the worker drives the tunnel
    /// after [`Tunnel::drain_wait`] until it has.
    pub fn draining(&self) -> bool {
        self.kernel.as_ref().is_some_and(|k| k.phase.contains(&Phase::Drain))
    }

    /// How long until the next look at a draining destination.
    pub fn drain_wait(&self) -> std::time::Duration {
        let looks = self.kernel.as_ref().map_or(0, |k| k.drain_looks.min(8));
        (DRAIN_POLL_FIRST * (1 << looks)).min(DRAIN_POLL_MAX)
    }

    /// The ring reported that the source with `cookie` began passing up:
    /// whether it is one of this tunnel's (then drive the tunnel).
    pub fn kernel_passing(&self, cookie: u64) -> bool {
        self.kernel
            .as_ref()
            .and_then(|k| k.pair.as_ref())
            .is_some_and(|p| p.side_of(cookie).is_some())
    }

    /// Sides that have just finished (their source ended and their own
    /// half-close is done) while the other still waits for its marker:
    /// hung up both ways, a level-triggered poller would report them at
    /// every wait, so the caller stops polling them. Each side once.
    pub fn take_quiet(&mut self) -> [bool; 2] {
        let Some(k) = self.kernel.as_mut().filter(|k| k.pair.is_some()) else {
            return [false; 2];
        };
        let done = [k.eof[0] && k.shut[1], k.eof[1] && k.shut[0]];
        let now = [done[0] && !k.quiet[0], done[1] && !k.quiet[1]];
        k.quiet = done;
        now
    }

    /// The client's timer has fired: `idle` says the tunnel's idle timeout
    /// has passed since weft last saw it move. `fds` are the client's and
    /// the upstream's sockets. Only a joined tunnel is kept past its idle
    /// timeout, and only if a peer acknowledged bytes since the last look.
    pub fn idle_timer(&mut self, fwd: &mut KernelFwd, fds: Option<[RawFd; 2]>, idle: bool) -> IdleLook {
        if self.draining() && !idle {
            return IdleLook::Look;
        }
        let Some(fds) = fds else {
            return IdleLook::Idle;
        };
        match self.kernel_progress(fwd, fds) {
            Some(p) if p.delivered => IdleLook::Alive {
                drive: p.forwarded || self.draining(),
            },
            Some(_) => {
                // Bytes the kernel holds for a side, on a psock rather than
                // a receive queue, are unseen by the close, which would end
                // with a FIN (a cut stream that looks whole; and a source
                // held back by its budget would wait on a zero window):
                // then reset both.
                if self.kernel.as_ref().is_none_or(|k| k.holds_bytes(fwd, fds)) {
                    for fd in fds {
                        let _ = sys::set_linger_zero(fd);
                    }
                }
                IdleLook::Idle
            }
            None => IdleLook::Idle,
        }
    }

    /// What moved in a joined tunnel since the idle timer last looked
    /// (`None` when it is not joined): weft itself sees none of it. `fds`
    /// are the client's and the upstream's sockets.
    fn kernel_progress(&mut self, fwd: &mut KernelFwd, fds: [RawFd; 2]) -> Option<KernelProgress> {
        let (Some(k), KernelFwd::Ready(f)) = (self.kernel.as_mut(), fwd) else {
            return None;
        };
        let pair = k.pair.as_ref()?;
        let [a, b] = [f.flow(pair, 0), f.flow(pair, 1)];
        let now = a.redirected + a.passed + b.redirected + b.passed + k.wrote[0] + k.wrote[1];
        let acked = fds
            .iter()
            .map(|&fd| sys::tcp_info(fd).map_or(0, |t| t.bytes_acked))
            .sum();
        let moved = KernelProgress {
            forwarded: now != k.seen,
            delivered: acked != k.acked,
        };
        (k.seen, k.acked) = (now, acked);
        Some(moved)
    }

    /// Give up in-kernel forwarding before the join: the tunnel splices.
    fn decline(&mut self, st: &mut ProxyStats) -> Option<TunnelState> {
        self.kernel = None;
        st.sockmap_declined += 1;
        None
    }

    /// The sockmap path of [`Tunnel::pump`]; `None` when the tunnel splices
    /// (no sockmap wanted, or it was declined before the join).
    pub(super) fn pump_kernel(&mut self, e: &mut TunnelEnds<'_>, st: &mut ProxyStats) -> Option<TunnelState> {
        let joined = self.kernel.as_ref()?.pair.is_some();
        if !joined {
            return self.join(e, st);
        }
        let KernelFwd::Ready(f) = &mut *e.fwd else {
            return Some(TunnelState::Failed);
        };
        let k = self.kernel.as_mut()?;
        let events = (k.on_event(f, 0, &mut e.client, st), k.on_event(f, 1, &mut e.up, st));
        let moved = match events {
            (Step::Ok, Step::Ok) => (
                k.take_over(f, 0, [&e.client, &e.up], st),
                k.take_over(f, 1, [&e.up, &e.client], st),
            ),
            other => other,
        };
        match moved {
            (Step::Ok, Step::Ok) => Some(k.state()),
            (Step::Mismatch, _) | (_, Step::Mismatch) => {
                // The receiving peer got a corrupt stream; a reset (not a
                // FIN) tells both peers the tunnel failed.
                let _ = sys::set_linger_zero(e.client.fd);
                let _ = sys::set_linger_zero(e.up.fd);
                Some(TunnelState::Failed)
            }
            _ => Some(TunnelState::Failed),
        }
    }

    /// Before the join: read the client to EAGAIN, write out the queued
    /// output, then join. `Some(Wait)` while that is under way.
    fn join(&mut self, e: &mut TunnelEnds<'_>, st: &mut ProxyStats) -> Option<TunnelState> {
        let TunnelEnds {
            client,
            up,
            client_out,
            fwd,
            ..
        } = e;
        let mut read = 0;
        let mut buf = [0u8; 16 * 1024];
        while *client.may_read && read < PRE_JOIN_READ && self.to_upstream.len() < PRE_JOIN_READ as u64 {
            match sys::read(client.fd, &mut buf) {
                // The client ended before the join: the splice path forwards it.
                Ok(0) => return self.decline(st),
                Ok(n) => {
                    self.to_upstream.push_copy(&buf[..n]);
                    st.tunnel_bytes_copied += n as u64;
                    read += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => *client.may_read = false,
                Err(_) => return Some(TunnelState::Failed),
            }
        }
        if flush(client_out, client).is_err() || flush(&mut self.to_upstream, up).is_err() {
            return Some(TunnelState::Failed);
        }
        if *client.may_read && self.to_upstream.len() < PRE_JOIN_READ as u64 {
            return Some(TunnelState::Yield);
        }
        if *client.may_read || !client_out.is_empty() || !self.to_upstream.is_empty() {
            return Some(TunnelState::Wait {
                client_read: !*client.may_read,
                client_write: !client_out.is_empty() && !*client.may_write,
                up_read: false,
                up_write: !self.to_upstream.is_empty() && !*up.may_write,
            });
        }
        let Some(f) = fwd.get() else {
            return self.decline(st);
        };
        // The counts the kernel's forwarding is checked against (see
        // `Kernel::on_event`).
        let (Ok(ci), Ok(ui), Ok(ct), Ok(ut)) = (
            sys::tcp_info(client.fd),
            sys::tcp_info(up.fd),
            sys::bytes_taken(client.fd),
            sys::bytes_taken(up.fd),
        ) else {
            return self.decline(st);
        };
        let token = self.kernel.as_ref()?.token;
        // Without a grant the program never passes up, so no direction is
        // ever taken over or raised.
        let bound = BOUND_ON.then_some((KERNEL_BUDGET, KERNEL_BUDGET / 2));
        let Ok(pair) = f.join(client.fd, up.fd, token, bound) else {
            return self.decline(st);
        };
        let k = self.kernel.as_mut()?;
        let (budget, notify_at) = bound.unwrap_or((u64::MAX, u64::MAX));
        k.budget = [budget; 2];
        k.notify_at = [notify_at; 2];
        k.pair = Some(pair);
        k.written_at_join = [ci.written(), ui.written()];
        k.taken_at_join = [ct, ut];
        st.sockmap_sessions += 1;
        KernelFwd::note_joined();
        // Both may already have ended (their FIN came before the join).
        *client.may_read = true;
        *up.may_read = true;
        self.pump_kernel(e, st)
    }
}

/// Write what `pre` holds to `side` as far as it takes it.
fn flush(pre: &mut OutChain, side: &mut Side<'_>) -> std::io::Result<()> {
    if !pre.is_empty() && *side.may_write && pre.flush(side.fd, &[], &mut [])?.blocked {
        *side.may_write = false;
    }
    Ok(())
}

impl Kernel {
    /// React to whatever woke side `me` (0: client, 1: upstream): an error
    /// or its marker, an end of stream.
    fn on_event(&mut self, f: &mut Forwarder, me: usize, side: &mut Side<'_>, st: &mut ProxyStats) -> Step {
        if !*side.may_read && !*side.may_write {
            return Step::Ok;
        }
        *side.may_read = false;
        *side.may_write = false;
        let Some(pair) = self.pair.as_ref() else {
            return Step::Failed;
        };
        // As a destination (of direction 1 - me): its marker, or an error.
        match sys::take_socket_error(side.fd) {
            Ok(None) => {}
            Ok(Some(e)) if Forwarder::is_marker(&e) && self.marked[1 - me] && !self.shut[1 - me] => {
                // Every byte redirected to this side is written by now.
                let written = sys::tcp_info(side.fd)
                    .ok()
                    .and_then(|t| t.written().checked_sub(self.written_at_join[me]));
                let given = f.forwarded(pair, 1 - me) + self.wrote[1 - me];
                if !KernelFwd::check(Seen::Written, written, given, st) {
                    return Step::Mismatch;
                }
                if sys::shutdown_write(side.fd).is_err() {
                    return Step::Failed;
                }
                self.shut[1 - me] = true;
            }
            _ => return Step::Failed,
        }
        // As a source (of direction me): its end of stream.
        self.source_end(f, me, side.fd, st)
    }

    /// Whether direction `d`'s source has ended (its FIN is in); at the
    /// end, check the counts and queue the marker, or leave the end to the
    /// takeover when weft moves some of the direction's bytes.
    fn source_end(&mut self, f: &mut Forwarder, d: usize, fd: BorrowedFd<'_>, st: &mut ProxyStats) -> Step {
        let Some(pair) = self.pair.as_mut() else {
            return Step::Failed;
        };
        if self.eof[d] {
            return Step::Ok;
        }
        // TCP_INFO takes the socket's lock: once it shows the FIN, every
        // byte before it has been through the program.
        let Ok(info) = sys::tcp_info(fd) else {
            return Step::Failed;
        };
        if !info.fin_received() {
            return Step::Ok;
        }
        self.eof[d] = true;
        let flow = f.flow(pair, d);
        pair.source_ended(d, &flow);
        // The program must have been handed each byte received after the
        // join once (a kernel that hands one twice corrupts the stream:
        // docs/proxy.md).
        let received = info.data_received().checked_sub(self.taken_at_join[d]);
        if !KernelFwd::check(Seen::Received, received, flow.redirected + flow.passed, st) {
            return Step::Mismatch;
        }
        st.sockmap_bytes += flow.redirected;
        if self.phase[d] != Phase::Kernel || flow.passed > self.took[d] {
            // Passed bytes come after the redirected ones: weft writes
            // them, then half-closes the destination itself.
            if self.phase[d] == Phase::Kernel {
                self.phase[d] = Phase::Drain;
                st.sockmap_takeovers += 1;
            }
            return Step::Ok;
        }
        if !self.eof[1 - d] {
            // The marker would break the destination's psock, and the
            // destination is the other direction's source, still open: a
            // psock whose pipe is broken drops what its verdict passes up,
            // so that direction could no longer be held to its budget.
            // weft looks for the drain itself instead (`take_over`).
            self.phase[d] = Phase::Drain;
            return Step::Ok;
        }
        if f.mark(pair, 1 - d).is_err() {
            return Step::Failed;
        }
        self.marked[d] = true;
        Step::Ok
    }

    /// Direction `d` (source `sides[0]`, destination `sides[1]`): take it
    /// over when the program has passed bytes up, wait for its destination
    /// to be written every redirected byte, then move the passed bytes and
    /// grant a new budget (or half-close the destination at the source's
    /// end). The module documentation has the why.
    fn take_over(&mut self, f: &mut Forwarder, d: usize, sides: [&Side<'_>; 2], st: &mut ProxyStats) -> Step {
        let [src, dst] = [sides[0].fd, sides[1].fd];
        let Some(pair) = self.pair.as_mut() else {
            return Step::Failed;
        };
        if self.phase[d] == Phase::Kernel {
            let flow = f.flow(pair, d);
            if self.eof[d] || flow.passed <= self.took[d] {
                if !self.eof[d] && flow.redirected >= self.notify_at[d] {
                    return self.raise(f, d, src, dst);
                }
                return Step::Ok;
            }
            self.phase[d] = Phase::Drain;
            st.sockmap_takeovers += 1;
            clamp_window(&mut self.clamp[d], src);
        }
        if self.phase[d] == Phase::Drain {
            let Ok(info) = sys::tcp_info(dst) else {
                return Step::Failed;
            };
            let given = f.forwarded(pair, d) + self.wrote[d];
            match info.written().checked_sub(self.written_at_join[1 - d]) {
                Some(w) if w == given => {
                    self.phase[d] = Phase::Copy;
                    self.drain_looks = 0;
                }
                Some(w) if w < given => {
                    self.drain_looks += 1;
                    return Step::Ok;
                }
                w => {
                    return if KernelFwd::check(Seen::Written, w, given, st) {
                        Step::Ok
                    } else {
                        Step::Mismatch
                    }
                }
            }
        }
        loop {
            let (out, start) = &mut self.held[d];
            if *start < out.len() {
                match sys::write(dst, &out[*start..]) {
                    Ok(n) => {
                        *start += n;
                        self.wrote[d] += n as u64;
                        st.tunnel_bytes_copied += n as u64;
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Ok,
                    Err(_) => return Step::Failed,
                }
            }
            out.clear();
            *start = 0;
            // Read what the source holds, not only what the program says it
            // passed: more than that would be bytes the kernel handed over
            // twice (docs/proxy.md, "A kernel that forwards a byte twice"),
            // which must not go out as a whole stream. The verdict counts a
            // passed skb before it is queued for reading.
            let raw = &mut self.raw[d];
            raw.resize(TAKEOVER_CHUNK, 0);
            let got = sys::read(src, raw);
            let flow = f.flow(pair, d);
            let passed = flow.passed;
            match got {
                Ok(n) if n > 0 => {
                    self.took[d] += n as u64;
                    if self.took[d] > passed {
                        KernelFwd::check(Seen::Taken, Some(self.took[d]), passed, st);
                        return Step::Mismatch;
                    }
                    // The kernel may deliver passed skbs out of order: put
                    // them back by their stamps (weft-sockmap's stamp.rs).
                    let complete = self.took[d] == passed;
                    match f.take_passed(pair, d, &raw[..n], flow, complete, out) {
                        Ok(reordered) => st.sockmap_reordered += reordered,
                        Err(e) => {
                            KernelFwd::unplaced(e, st);
                            return Step::Mismatch;
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Step::Failed,
            }
            if self.took[d] < passed {
                // A passed skb still on the psock's backlog: its arrival
                // wakes the source (read interest).
                return Step::Ok;
            }
            // Every passed byte is taken and written.
            if self.eof[d] {
                let written = sys::tcp_info(dst)
                    .ok()
                    .and_then(|t| t.written().checked_sub(self.written_at_join[1 - d]));
                if !KernelFwd::check(Seen::Written, written, f.forwarded(pair, d) + self.wrote[d], st) {
                    return Step::Mismatch;
                }
                if sys::shutdown_write(dst).is_err() {
                    return Step::Failed;
                }
                self.shut[d] = true;
                self.phase[d] = Phase::Kernel;
                self.held[d] = Default::default();
                self.raw[d] = Vec::new();
                return Step::Ok;
            }
            let forwarded = f.forwarded(pair, d);
            let budget = forwarded + KERNEL_BUDGET;
            let notify_at = budget - KERNEL_BUDGET / 2;
            if f.grant(pair, d, budget, self.took[d], notify_at).is_err() {
                return Step::Failed;
            }
            (self.budget[d], self.notify_at[d]) = (budget, notify_at);
            // A verdict that read the old grant may have passed one more
            // skb: TCP_INFO takes the source's lock, waiting it out.
            if sys::tcp_info(src).is_err() {
                return Step::Failed;
            }
            let flow = f.flow(pair, d);
            if flow.passed != self.took[d] && flow.redirected != forwarded {
                // The program took the grant, redirected, used it up and
                // passed up again, all before this look: the bytes it
                // passed now come after redirected ones that may still wait
                // for the destination, so drain again before writing them.
                self.phase[d] = Phase::Drain;
                self.drain_looks = 0;
                st.sockmap_takeovers += 1;
                return Step::Ok;
            }
            if flow.passed == self.took[d] {
                self.phase[d] = Phase::Kernel;
                self.held[d] = Default::default();
                self.raw[d] = Vec::new();
                if let Some(was) = self.clamp[d].take() {
                    if sys::set_window_clamp(src, was).is_err() {
                        return Step::Failed;
                    }
                }
                return Step::Ok;
            }
        }
    }

    /// Direction `d` has redirected past the middle of its grant: raise the
    /// budget to [`KERNEL_BUDGET`] past what its destination has sent of
    /// the redirected bytes. If the destination sent nothing since, the
    /// budget stays, and the program passes up at its end (a takeover). A
    /// destination more than half a budget behind is likely to meet it:
    /// its source's window is clamped now ([`clamp_window`]).
    fn raise(&mut self, f: &mut Forwarder, d: usize, src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> Step {
        let Some(pair) = self.pair.as_ref() else {
            return Step::Failed;
        };
        let Ok(info) = sys::tcp_info(dst) else {
            return Step::Failed;
        };
        // What the destination was written of the redirected bytes (weft's
        // own writes of passed bytes come out of it).
        let sent = info
            .written()
            .saturating_sub(self.written_at_join[1 - d] + self.wrote[d]);
        if f.forwarded(pair, d).saturating_sub(sent) > KERNEL_BUDGET / 2 {
            clamp_window(&mut self.clamp[d], src);
        }
        let budget = sent + KERNEL_BUDGET;
        if budget <= self.budget[d] {
            // No news until the budget runs out.
            self.notify_at[d] = self.budget[d];
            return Step::Ok;
        }
        let notify_at = budget - KERNEL_BUDGET / 2;
        if f.grant(pair, d, budget, self.took[d], notify_at).is_err() {
            return Step::Failed;
        }
        (self.budget[d], self.notify_at[d]) = (budget, notify_at);
        Step::Ok
    }

    /// Whether bytes of either direction are still on their way to its
    /// destination (`fds`: the client's and the upstream's sockets):
    /// redirected and not yet written to it, passed up and not yet taken,
    /// or taken and not yet written. A count that cannot be read counts as
    /// bytes held.
    fn holds_bytes(&self, fwd: &mut KernelFwd, fds: [RawFd; 2]) -> bool {
        let (Some(pair), KernelFwd::Ready(f)) = (self.pair.as_ref(), fwd) else {
            return true;
        };
        (0..2).any(|d| {
            let flow = f.flow(pair, d);
            let written = sys::tcp_info(fds[1 - d]).map(|t| t.written().saturating_sub(self.written_at_join[1 - d]));
            flow.passed > self.took[d]
                || self.held[d].1 < self.held[d].0.len()
                || written.map_or(true, |w| w < flow.redirected + self.wrote[d])
        })
    }

    /// Done once both destinations are half-closed; otherwise wait for each
    /// source still open (read interest: EPOLLRDHUP). Errors, and so the
    /// markers, come whatever the interest.
    ///
    /// A taken-over direction waits for its source's passed bytes (read
    /// interest) or for its destination to take what weft holds (write
    /// interest); one that waits for its destination to drain asks nothing
    /// of the poller (the worker's timer drives it, [`Tunnel::drain_wait`]).
    fn state(&self) -> TunnelState {
        if self.shut[0] && self.shut[1] {
            return TunnelState::Done;
        }
        let holds = |d: usize| self.held[d].1 < self.held[d].0.len();
        let reads = |d: usize| match self.phase[d] {
            Phase::Kernel => !self.eof[d] && !self.shut[d],
            Phase::Drain => false,
            Phase::Copy => !holds(d),
        };
        let writes = |d: usize| self.phase[d] == Phase::Copy && holds(d);
        TunnelState::Wait {
            client_read: reads(0),
            client_write: writes(1),
            up_read: reads(1),
            up_write: writes(0),
        }
    }
}

/// Hold a taken-over (or about to be) source to a small receive window,
/// once, keeping what it was in `was`: a source sends at most the window it
/// was given past what weft has read, and all of it is passed up once the
/// budget is used, so weft then has a window's worth to copy, not a whole
/// autotuned buffer, and catches up even when the destination is the
/// slower one. Without it weft, reading, kept reopening the window and
/// never caught up. Restored when weft hands the direction back.
fn clamp_window(was: &mut Option<usize>, src: BorrowedFd<'_>) {
    if was.is_some() {
        return;
    }
    if let Ok(now) = sys::window_clamp(src) {
        if sys::set_window_clamp(src, TAKEOVER_CHUNK).is_ok() {
            *was = Some(now);
        }
    }
}
