//! In-kernel forwarding of a tunnel (`--splice sockmap`), event-driven.
//!
//! Before the join weft reads the client until EAGAIN (so no skb is left
//! half-read: the kernel redirects whole skbs) and writes out what it holds
//! (the `200`, the client's early bytes). Then both sockets join
//! weft-sockmap's maps, and weft only reacts to events:
//!
//! - EPOLLRDHUP on a source: TCP_INFO confirms the FIN (and, by taking the
//!   socket's lock, waits out the softirq that redirects the bytes before
//!   it); weft then queues the end-of-stream marker behind those bytes;
//! - EPOLLERR on a destination: SO_ERROR is EPIPE when the psock worker
//!   reached the marker, i.e. sent everything before it; weft half-closes
//!   the destination (any other error ends the tunnel);
//! - both directions half-closed: the sockets leave the maps (their psock
//!   queues are empty by then) and the tunnel is done.
//!
//! Direction 0 is client → upstream, 1 upstream → client; the pair's side 0
//! is the client, side 1 the upstream, so direction `d` reads side `d` and
//! writes side `1 - d`.

use super::{Side, Tunnel, TunnelEnds, TunnelState};
pub use crate::sockmap::KernelFwd;
use crate::sockmap::Seen;
use crate::stats::ProxyStats;
use weft_io::sys;
use weft_io::OutChain;
use weft_sockmap::{Forwarder, Pair};

/// Bytes of client input read before the join in one pump.
const PRE_JOIN_READ: usize = 256 * 1024;

/// One tunnel's in-kernel state.
#[derive(Default)]
pub(super) struct Kernel {
    pair: Option<Pair>,
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
    /// Take the sockets out of the maps (at close).
    pub(super) fn leave(self, fwd: &mut KernelFwd) {
        if let (Some(pair), KernelFwd::Ready(f)) = (self.pair, fwd) {
            f.leave(pair);
        }
    }
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
    /// available.
    pub fn want_kernel(&mut self, fwd: &mut KernelFwd, st: &mut ProxyStats) {
        if fwd.get().is_none() {
            st.sockmap_declined += 1;
            return;
        }
        self.kernel = Some(Kernel::default());
    }

    /// Whether the tunnel means to join the maps (it may still decline, and
    /// then splices): its client socket must not bound its unsent bytes
    /// (`set_notsent_lowat`).
    pub fn to_kernel(&self) -> bool {
        self.kernel.is_some()
    }

    /// Whether the sockets have joined the maps: the kernel moves the
    /// bytes, and weft waits only for ends of stream and errors.
    pub fn in_kernel(&self) -> bool {
        self.kernel.as_ref().is_some_and(|k| k.pair.is_some())
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

    /// Whether the kernel forwarded bytes since the last call (the idle
    /// timer asks: weft itself sees none of them).
    pub fn kernel_progress(&mut self, fwd: &mut KernelFwd) -> bool {
        let (Some(k), KernelFwd::Ready(f)) = (self.kernel.as_mut(), fwd) else {
            return false;
        };
        let Some(pair) = k.pair.as_ref() else {
            return false;
        };
        let now = f.forwarded(pair, 0) + f.forwarded(pair, 1);
        let moved = now != k.seen;
        k.seen = now;
        moved
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
        match (k.on_event(f, 0, &mut e.client, st), k.on_event(f, 1, &mut e.up, st)) {
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
        let Ok(pair) = f.join(client.fd, up.fd) else {
            return self.decline(st);
        };
        let k = self.kernel.as_mut()?;
        k.pair = Some(pair);
        k.written_at_join = [ci.written(), ui.written()];
        k.taken_at_join = [ct, ut];
        st.sockmap_sessions += 1;
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
                if !KernelFwd::check(Seen::Written, written, f.forwarded(pair, 1 - me), st) {
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
        if !self.eof[me] {
            // TCP_INFO takes the socket's lock: once it shows the FIN, every
            // byte before it has been through the program.
            let Ok(info) = sys::tcp_info(side.fd) else {
                return Step::Failed;
            };
            if info.fin_received() {
                self.eof[me] = true;
                let redirected = f.forwarded(pair, me);
                // The program must have been handed each byte received
                // after the join once (a kernel that hands one twice
                // corrupts the stream: docs/proxy.md).
                let received = info.data_received().checked_sub(self.taken_at_join[me]);
                if !KernelFwd::check(Seen::Received, received, redirected, st) {
                    return Step::Mismatch;
                }
                st.sockmap_bytes += redirected;
                if f.mark(pair, 1 - me).is_err() {
                    return Step::Failed;
                }
                self.marked[me] = true;
            }
        }
        Step::Ok
    }

    /// Done once both destinations are half-closed; otherwise wait for each
    /// source still open (read interest: EPOLLRDHUP). Errors, and so the
    /// markers, come whatever the interest.
    fn state(&self) -> TunnelState {
        if self.shut[0] && self.shut[1] {
            return TunnelState::Done;
        }
        TunnelState::Wait {
            client_read: !self.eof[0],
            client_write: false,
            up_read: !self.eof[1],
            up_write: false,
        }
    }
}
