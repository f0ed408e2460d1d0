//! uring linked submissions (issue 27): one io_uring_enter moves a chunk.
//!
//! When the upstream may be read and the client written, the relay hands the
//! kernel one chain instead of one system call per step:
//!
//! ```text
//!   [write head → client pipe] → splice upstream → pipe → [tee intake → out] → splice pipe → client
//! ```
//!
//! - The **head** (and the body bytes that came with it: the client's output
//!   queue, own bytes only) is written into the client's pipe while that pipe
//!   is empty, so it leaves in the same splice as the first body bytes (what
//!   a `send` with MSG_MORE would do). A send linked before the splices could
//!   come up short without breaking the link, and the body would overtake the
//!   rest of the head; a write of at most half an empty pipe is never short,
//!   and if it were, its soft link cancels the rest of the chain.
//! - The **splices and the tee** are hard-linked: a short splice (the norm)
//!   would fail a soft link and cancel the rest with -ECANCELED, and each
//!   step is correct on its own (a splice out of a pipe moves what is there;
//!   a tee duplicates from the intake's head, which holds only bytes not yet
//!   tee'd). An -EAGAIN is that step's result only: the upstream's clears its
//!   readiness (when the pipe was empty; see relay.rs on ambiguous EAGAIN),
//!   the client's clears its readiness when the pipe held bytes, and the
//!   session waits for readiness as before.
//! - KeepCopy reads the tee'd bytes from the intake into the object after
//!   the chain (their count is known only then): one enter and one read per
//!   chunk instead of splice, tee, read, splice. The chain of the chunk that
//!   may complete the object ends at the tee: the object is stored before
//!   the client's last bytes leave (one splice after it). Whatever such
//!   chains leave in the client's pipe (the head too) goes out at the next
//!   per-call step: when the upstream pauses, when the pipes are full, once
//!   the object is stored, or, if the upstream stops short, before the
//!   session ends (`Relay::ended`).
//!
//! The ring is the worker's own (a thread-local: a worker is a thread), apart
//! from the event backend's: the chain is submitted and waited for in one
//! enter. The kernel runs splice and tee in its io-wq threads (io_uring always
//! punts them), so the worker sleeps in the enter while the chain runs.

use super::*;
use std::cell::RefCell;
use std::os::fd::AsRawFd;
use weft_io::sys::uring::{LinkOp, LinkRing};

thread_local! {
    /// This worker's ring: None until first used; Err once creation failed.
    static RING: RefCell<Option<Result<LinkRing, ()>>> = const { RefCell::new(None) };
}

/// Run `ops` on this thread's ring. None: no ring (io_uring refused).
fn run_chain(head: Option<&[u8]>, ops: &[LinkOp], results: &mut [i32]) -> Option<io::Result<()>> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ring = slot.get_or_insert_with(|| LinkRing::new().map_err(|_| ()));
        let ring = ring.as_mut().ok().filter(|r| r.usable())?;
        if let Some(h) = head {
            ring.stage().extend_from_slice(h);
        }
        Some(ring.run(ops, results))
    })
}

/// The steps of one linked chain besides its splice in.
struct Chain {
    /// The queue's bytes written into the client's pipe first: their length.
    staged: Option<usize>,
    /// A tee from the intake to the client's pipe follows the splice in.
    tee: bool,
    /// The chain stops at the tee (no splice out to the client).
    completes_fill: bool,
}

/// Where a chunk's bytes are as the chain's results are taken in order.
struct Tally {
    /// Bytes in the pipe the client is served from.
    client_pipe: usize,
    /// Bytes moved (in and out), for the pump's budget.
    moved: usize,
}

impl Relay {
    /// Move one chunk with a linked chain. None: a chain does not apply now
    /// (the per-call steps run instead).
    pub(super) fn linked_step(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Option<Result<usize, Pump>> {
        if !self.linked || self.client_gone || self.body_done || !*e.up_may_read || !*e.client_may_write {
            return None;
        }
        let cfd = e.client?.as_raw_fd();
        let left = match self.framing {
            Framing::Length(n) => n,
            Framing::Close => u64::MAX,
            Framing::Chunked { .. } => return None,
        };
        let want = left.min(self.read_room() as u64).min(u32::MAX as u64) as u32;
        if want == 0 {
            return None;
        }
        let tee = match &self.path {
            Path::Splice { .. } => false,
            // Without a fill (too large to keep) the per-call path moves
            // intake → output instead of duplicating.
            Path::Tee { .. } if self.fill.is_some() => true,
            _ => return None,
        };
        // A chunk that may complete the object being filled ends its chain
        // at the tee (below).
        let completes_fill = tee && u64::from(want) == left;
        let (client_pipe, in_fd, out_w, out_r, cap) = match &self.path {
            Path::Splice { pipe, bytes } => (
                *bytes,
                pipe.write_fd(),
                pipe.write_fd(),
                pipe.read_fd(),
                pipe.capacity(),
            ),
            Path::Tee {
                intake, out, in_out, ..
            } => (
                *in_out,
                intake.write_fd(),
                out.write_fd(),
                out.read_fd(),
                out.capacity(),
            ),
            Path::Copy | Path::Kernel(_) => return None,
        };
        // What is queued ahead of the body goes into the client's pipe, or
        // the chain waits until the queue is flushed.
        let stageable = self.linked_head && client_pipe == 0;
        let head = match e.out.pending_own() {
            _ if e.out.is_empty() => None,
            Some(own) if stageable && own.len() <= cap / 2 => Some(own),
            // Flush the queue first (one send), then chain the body.
            _ => {
                if client_pipe > 0 {
                    return None;
                }
                st.calls_client_send += 1;
                match e.out.flush(e.client?, &[], &mut []) {
                    Ok(f) if f.blocked || !e.out.is_empty() => {
                        *e.client_may_write = false;
                        return Some(Ok(f.total() as usize));
                    }
                    Ok(_) => None,
                    Err(err) => {
                        return Some(match self.on_client_error(err, e) {
                            Some(p) => Err(p),
                            None => Ok(1),
                        })
                    }
                }
            }
        };
        let mut ops = [LinkOp::WriteStaged { fd: out_w }; 4];
        let mut n = 0;
        if head.is_some() {
            n += 1;
        }
        let pipe_len = cap.min(u32::MAX as usize) as u32;
        ops[n] = LinkOp::Splice {
            fd_in: e.up.as_raw_fd(),
            fd_out: in_fd,
            len: want,
        };
        n += 1;
        if let Path::Tee { intake, .. } = &self.path {
            ops[n] = LinkOp::Tee {
                fd_in: intake.read_fd(),
                fd_out: out_w,
                len: intake.capacity().min(u32::MAX as usize) as u32,
            };
            n += 1;
        }
        // A chunk that may complete the object being filled stops at the
        // tee: the object is stored (`Pump::Whole`) before the client is
        // sent its last bytes, by the per-call step after it.
        if !completes_fill {
            ops[n] = LinkOp::Splice {
                fd_in: out_r,
                fd_out: cfd,
                len: pipe_len,
            };
            n += 1;
        }
        let mut res = [0i32; 4];
        match run_chain(head, &ops[..n], &mut res[..n]) {
            None => {
                self.linked = false;
                return None;
            }
            Some(Err(_)) => {
                // The chain may have run in part: pipe contents are unknown.
                return Some(Err(Pump::UpstreamFailed("uring linked chain failed")));
            }
            Some(Ok(())) => {}
        }
        st.calls_linked += 1;
        let chain = Chain {
            staged: head.map(|h| h.len()),
            tee,
            completes_fill,
        };
        Some(self.linked_results(&res[..n], chain, client_pipe, e, st))
    }

    /// Takes in a linked chain's results, in the order of its steps (`res`,
    /// shaped as `chain` says), into the pipes' counts: the bytes moved, or
    /// how the session ends.
    fn linked_results(
        &mut self,
        res: &[i32],
        chain: Chain,
        client_pipe: usize,
        e: &mut Ends<'_>,
        st: &mut ProxyStats,
    ) -> Result<usize, Pump> {
        let mut t = Tally { client_pipe, moved: 0 };
        let mut i = 0;
        if let Some(head_len) = chain.staged {
            let r = res[0];
            i = 1;
            if r as usize != head_len || r < 0 {
                if r > 0 {
                    // Never seen (an empty pipe takes half its size whole);
                    // the queue cannot be cut, so the session cannot go on.
                    return Err(Pump::UpstreamFailed("uring linked head write came up short"));
                }
                // Nothing ran: leave the queue to the per-call steps.
                self.linked = false;
                return Ok(0);
            }
            e.out.clear();
            self.head_piped += head_len;
            t.client_pipe += head_len;
            self.set_client_piped(t.client_pipe);
        }
        // Every step's result is counted before an error ends this turn:
        // the steps are hard-linked, so a tee and a splice out run after a
        // splice in that found the upstream's end, and the pipes' counts
        // must say what they moved (on an upstream failure the client is
        // then sent what its pipe holds, `Relay::ended`).
        let pulled = self.linked_in(res[i], e, &mut t);
        i += 1;
        let mut teed = Ok(());
        if chain.tee {
            teed = self.linked_tee(res[i], e, st, &mut t);
            i += 1;
        }
        let sent = if chain.completes_fill {
            Ok(())
        } else {
            self.linked_out(res[i], e, st, &mut t).map_err(Err)
        };
        pulled.and(teed).and(sent).map_or_else(|r| r, |()| Ok(t.moved))
    }

    fn set_client_piped(&mut self, n: usize) {
        match &mut self.path {
            Path::Splice { bytes, .. } => *bytes = n,
            Path::Tee { in_out, .. } => *in_out = n,
            Path::Copy | Path::Kernel(_) => {}
        }
    }

    /// The splice upstream → pipe: as `pull` takes a splice's result.
    fn linked_in(&mut self, r: i32, e: &mut Ends<'_>, t: &mut Tally) -> Result<(), Result<usize, Pump>> {
        if r > 0 {
            let n = r as usize;
            match &mut self.path {
                Path::Splice { bytes, .. } => {
                    *bytes += n;
                    t.client_pipe += n;
                }
                Path::Tee { in_intake, .. } => *in_intake += n,
                Path::Copy | Path::Kernel(_) => {}
            }
            t.moved += n;
            if let Framing::Length(l) = &mut self.framing {
                *l -= n as u64;
                if *l == 0 {
                    self.body_done = true;
                    self.set_lowat(e.up, 1);
                }
            }
            self.pulled += n;
            self.check_fill_limit();
            return Ok(());
        }
        if r == 0 {
            if matches!(self.framing, Framing::Close) {
                self.body_done = true;
                t.moved += 1;
                return Ok(());
            }
            return Err(Err(Pump::UpstreamFailed("upstream closed the connection mid-body")));
        }
        let err = io::Error::from_raw_os_error(-r);
        if err.kind() == io::ErrorKind::WouldBlock {
            // With bytes in the pipe EAGAIN may mean "no slot" (relay.rs).
            if self.piped() == 0 {
                *e.up_may_read = false;
                self.batch_reads(e.up);
            }
            return Ok(());
        }
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(());
        }
        if sys::is_peer_gone(&err) {
            return Err(Err(Pump::UpstreamFailed("upstream connection failed mid-body")));
        }
        // EINVAL and the like: the per-call steps fall back to copying.
        self.linked = false;
        Ok(())
    }

    /// The tee intake → output, then the duplicated bytes into the object.
    fn linked_tee(
        &mut self,
        r: i32,
        e: &mut Ends<'_>,
        st: &mut ProxyStats,
        t: &mut Tally,
    ) -> Result<(), Result<usize, Pump>> {
        let Path::Tee {
            intake,
            in_intake,
            in_out,
            ..
        } = &mut self.path
        else {
            return Ok(());
        };
        if r <= 0 {
            if r < 0 && io::Error::from_raw_os_error(-r).kind() != io::ErrorKind::WouldBlock {
                self.linked = false;
            }
            return Ok(());
        }
        let n = (r as usize).min(*in_intake);
        *in_out += n;
        *in_intake -= n;
        t.client_pipe += n;
        st.bytes_teed += n as u64;
        let fd = intake.read_fd();
        if self.keep_teed(fd, n, st).is_err() {
            self.fallback(e, st).map_err(Err)?;
        }
        Ok(())
    }

    /// The splice pipe → client.
    fn linked_out(&mut self, r: i32, e: &mut Ends<'_>, st: &mut ProxyStats, t: &mut Tally) -> Result<(), Pump> {
        if r > 0 {
            let n = (r as usize).min(t.client_pipe);
            t.client_pipe -= n;
            self.set_client_piped(t.client_pipe);
            let head = n.min(self.head_piped);
            self.head_piped -= head;
            st.bytes_spliced += (n - head) as u64;
            st.bytes_linked += (n - head) as u64;
            // The staged head left the output queue uncounted (`e.out.clear()`
            // when it went into the pipe): it counts as it leaves the pipe.
            e.out.note_sent(n as u64);
            t.moved += n;
            return Ok(());
        }
        let err = if r == 0 {
            // Only an empty pipe gives 0 (never asked of one: EAGAIN).
            return Ok(());
        } else {
            io::Error::from_raw_os_error(-r)
        };
        match err.kind() {
            // An empty pipe says EAGAIN too: only a full socket blocks.
            io::ErrorKind::WouldBlock => {
                if t.client_pipe > 0 {
                    *e.client_may_write = false;
                }
                Ok(())
            }
            io::ErrorKind::Interrupted => Ok(()),
            _ => match self.on_client_error(err, e) {
                Some(p) => Err(p),
                None => {
                    t.moved += 1;
                    Ok(())
                }
            },
        }
    }
}
