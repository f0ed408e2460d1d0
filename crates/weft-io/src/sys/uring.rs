//! A small safe wrapper around an io_uring instance, for the `uring` event
//! backend and the batched epoll backend.
//!
//! Pushing a submission is `unsafe` in the io-uring crate because the kernel may
//! read the memory an entry points at until it completes; every entry built here
//! either points at nothing (poll add/remove) or at memory the caller keeps alive
//! until [`Ring::submit_and_wait`] has returned its completion (epoll_ctl), which
//! the signatures enforce by borrowing.

use super::{bump, FdArg, SysKind};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// One completion.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// The submission's user data.
    pub user_data: u64,
    /// Result (negative errno on failure; a poll mask for polls).
    pub result: i32,
    /// More completions will follow for this (multishot) request.
    pub more: bool,
}

/// How the kernel runs the task work that posts readiness completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TaskRun {
    /// `IORING_SETUP_COOP_TASKRUN`: posted at the task's next transition into
    /// or out of the kernel (any system call), so completions show up in the
    /// shared ring while the worker does its reads and writes, without an
    /// io_uring_enter of their own. Each arrival while the worker sleeps wakes
    /// it (a context switch), also when it waits for several completions.
    #[default]
    Coop,
    /// `IORING_SETUP_DEFER_TASKRUN` (with `SINGLE_ISSUER`): posted only inside
    /// io_uring_enter, so the ring is never filled behind the worker's back
    /// (every pass costs an enter), but a worker waiting for N completions is
    /// woken once, when the N-th arrives, not at each of them.
    Defer,
}

/// An io_uring with its submission and completion queues mapped in.
pub struct Ring {
    ring: IoUring,
}

/// Longest single wait handed to the kernel when the caller has no bound: a
/// min-wait enter needs an overall timeout (without one the kernel ends the
/// wait at the min-wait deadline even with no completion), and the loop simply
/// waits again after it.
const NO_TIMEOUT: Duration = Duration::from_secs(3600);

impl Ring {
    /// A ring with `entries` submission slots and cooperative task running.
    pub fn new(entries: u32) -> io::Result<Ring> {
        Self::with_task_run(entries, TaskRun::Coop)
    }

    /// A ring with `entries` submission slots whose completions are posted as
    /// `mode` says.
    pub fn with_task_run(entries: u32, mode: TaskRun) -> io::Result<Ring> {
        // COOP_TASKRUN: a readiness completion is posted at the task's next
        // transition to or from the kernel (our reads and writes provide plenty)
        // instead of interrupting the running thread with an IPI to post it at
        // once. Without it every wake-up of a polled socket interrupts the
        // worker, which measured as less than half the reply rate of epoll on the
        // one-byte workload. Kernels older than 5.19 reject the flag (and older
        // than 6.1 DEFER_TASKRUN): fall back to the plain ring.
        bump(SysKind::Other);
        let mut b = IoUring::builder();
        b.setup_clamp();
        match mode {
            TaskRun::Coop => {
                b.setup_coop_taskrun();
            }
            TaskRun::Defer => {
                b.setup_single_issuer().setup_defer_taskrun();
            }
        }
        // TASKRUN_FLAG: the kernel raises a flag in the shared ring while
        // completions wait to be posted ([`Ring::work_pending`]).
        b.setup_taskrun_flag();
        let ring = match b.build(entries) {
            Ok(r) => r,
            Err(_) => {
                bump(SysKind::Other);
                IoUring::builder().setup_clamp().build(entries)?
            }
        };
        Ok(Ring { ring })
    }

    /// Does the kernel honour a min-wait (`IORING_FEAT_MIN_TIMEOUT`, 6.12)?
    pub fn supports_min_wait(&self) -> bool {
        self.ring.params().is_feature_min_timeout()
    }

    fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry passed here references no user memory, or
            // memory the caller keeps borrowed until the completion is reaped
            // (see `epoll_ctl_batch`).
            let pushed = unsafe { self.ring.submission().push(&e) }.is_ok();
            if pushed {
                return Ok(());
            }
            // Queue full: hand what is queued to the kernel and retry.
            bump(SysKind::UringEnter);
            self.ring.submit()?;
        }
    }

    /// Queue a poll of `fd` for `mask` (poll(2) bits); multishot keeps it armed.
    pub fn poll_add(&mut self, fd: impl FdArg, mask: u32, user_data: u64, multishot: bool) -> io::Result<()> {
        let fd = fd.raw_for_call();
        let e = opcode::PollAdd::new(types::Fd(fd), mask)
            .multi(multishot)
            .build()
            .user_data(user_data);
        self.push(e)
    }

    /// Queue removal of the poll request whose user data is `target`.
    pub fn poll_remove(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        let e = opcode::PollRemove::new(target).build().user_data(user_data);
        self.push(e)
    }

    /// Submissions waiting to be handed to the kernel.
    pub fn pending_submissions(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Are completions waiting to be posted (their task work not run yet)?
    /// A memory read of the ring's flags; no system call.
    pub fn work_pending(&mut self) -> bool {
        self.ring.submission().taskrun()
    }

    /// Is the completion queue (shared memory) non-empty? No system call.
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Hand queued submissions to the kernel and wait for at least `want`
    /// completions, up to `timeout` — one io_uring_enter.
    pub fn submit_and_wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<usize> {
        self.submit_and_wait_batched(want, Duration::ZERO, timeout)
    }

    /// Hand queued submissions to the kernel and wait — one io_uring_enter.
    /// With a zero `min_wait`: until `want` completions or `timeout`. With a
    /// min-wait (kernels with [`Ring::supports_min_wait`]): until `want`
    /// completions, or until `min_wait` has passed since the call began and
    /// at least one completion is there, or `timeout`; so `want` > 1 batches
    /// wake-ups at a latency of at most `min_wait`.
    pub fn submit_and_wait_batched(
        &mut self,
        want: usize,
        min_wait: Duration,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        bump(SysKind::UringEnter);
        let r = if want == 0 {
            self.ring.submit()
        } else if min_wait.is_zero() && timeout.is_none() {
            self.ring.submit_and_wait(want)
        } else {
            let t = timeout.unwrap_or(NO_TIMEOUT);
            let ts = types::Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
            // The kernel arms its min-wait timer before looking at the overall
            // timeout: never ask for a min-wait longer than the timeout.
            let mw = min_wait.min(t).as_micros().min(u32::MAX as u128) as u32;
            let args = types::SubmitArgs::new().timespec(&ts).min_wait_usec(mw);
            self.ring.submitter().submit_with_args(want, &args)
        };
        match r {
            Ok(n) => Ok(n),
            // Timeout and signals are not errors for an event loop.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Take every completion from the shared ring — no system call.
    pub fn drain(&mut self, mut f: impl FnMut(Completion)) {
        let mut cq = self.ring.completion();
        cq.sync();
        for c in &mut cq {
            f(Completion {
                user_data: c.user_data(),
                result: c.result(),
                more: cqueue::more(c.flags()),
            });
        }
    }

    /// Apply epoll_ctl operations `(op, fd, events, data)` to `epfd` in one
    /// io_uring_enter (IORING_OP_EPOLL_CTL): the paper's epoll_ctlv. Returns the
    /// per-operation results in order.
    pub fn epoll_ctl_batch(
        &mut self,
        epfd: RawFd,
        ops: &[(i32, RawFd, u32, u64)],
        results: &mut Vec<i32>,
    ) -> io::Result<()> {
        results.clear();
        if ops.is_empty() {
            return Ok(());
        }
        // The kernel reads these until each completion is posted; they live
        // on this stack frame until every completion has been reaped below.
        let events: Vec<libc::epoll_event> = ops
            .iter()
            .map(|&(_, _, ev, data)| libc::epoll_event { events: ev, u64: data })
            .collect();
        results.resize(ops.len(), 0);
        let mut reaped = 0;
        let mut start = 0;
        while start < ops.len() {
            let room = (self.ring.params().sq_entries() as usize).min(ops.len() - start);
            for i in start..start + room {
                let (op, fd, _, _) = ops[i];
                let e = opcode::EpollCtl::new(
                    types::Fd(epfd),
                    types::Fd(fd),
                    op,
                    (&events[i] as *const libc::epoll_event).cast(),
                )
                .build()
                .user_data(i as u64);
                self.push(e)?;
            }
            start += room;
            while reaped < start {
                self.submit_and_wait(start - reaped, None)?;
                self.drain(|c| {
                    if let Some(r) = results.get_mut(c.user_data as usize) {
                        *r = c.result;
                    }
                    reaped += 1;
                });
            }
        }
        Ok(())
    }
}

/// One operation of a [`LinkRing`] chain. Descriptors are borrowed for the
/// call only: [`LinkRing::run`] returns after every operation has completed.
#[derive(Clone, Copy, Debug)]
pub enum LinkOp {
    /// write(2) the ring's staged bytes ([`LinkRing::stage`]) into `fd` (a
    /// pipe). A short write cancels the rest of the chain (a soft link), so
    /// nothing overtakes the unwritten part.
    WriteStaged {
        /// The pipe's write end.
        fd: RawFd,
    },
    /// splice(2) up to `len` bytes, non-blocking.
    Splice {
        /// Source (a socket or a pipe's read end).
        fd_in: RawFd,
        /// Destination (a pipe's write end or a socket).
        fd_out: RawFd,
        /// Most bytes to move.
        len: u32,
    },
    /// tee(2) up to `len` bytes from pipe to pipe, non-blocking.
    Tee {
        /// Source pipe's read end.
        fd_in: RawFd,
        /// Destination pipe's write end.
        fd_out: RawFd,
        /// Most bytes to duplicate.
        len: u32,
    },
}

/// Most operations in one chain.
pub const LINK_MAX: usize = 8;

/// A small io_uring of its own for linked data-path submissions: a chain of
/// splices, a tee and a staged write handed to the kernel and completed in
/// one io_uring_enter (the proxy's relay; issue 27).
///
/// Splices and tees are *hard*-linked: a short splice (the norm: the socket
/// holds less than asked) would otherwise fail the link and cancel the rest
/// with -ECANCELED; a hard link runs the next operation whatever the last one
/// returned, and every step of the relay's chain is correct on its own (a
/// splice out of a pipe moves what is there, a tee duplicates what is there).
/// An -EAGAIN is an operation's own result, not the chain's end. The io_uring
/// kernel code runs splice and tee in its worker threads (they are always
/// punted), so the caller waits in the enter until the chain is done.
pub struct LinkRing {
    ring: IoUring,
    /// Bytes [`LinkOp::WriteStaged`] writes; owned here so the kernel never
    /// reads memory the caller may free.
    staged: Vec<u8>,
    /// An enter failed with operations possibly still in flight: the ring
    /// (and its staged bytes) is never used again.
    broken: bool,
}

impl LinkRing {
    /// A ring for chains of up to [`LINK_MAX`] operations.
    pub fn new() -> io::Result<LinkRing> {
        bump(SysKind::Other);
        // Plain task running, not deferred: an io_uring worker thread that
        // drops its reference to a request after the request's completion
        // was reaped frees it through task work, and a deferred ring runs
        // that only at its next enter. Until then the request holds its file:
        // a client socket the proxy closed after its last chain stayed open
        // with its FIN unsent (seen on a worker's first chains, 1 client in
        // 10–50). Plain task work runs at once, even while the worker sleeps
        // in its event backend's wait. Measured: no cost per request
        // (proxy_bench, uring linked, 64 and 100 KiB misses).
        let mut b = IoUring::builder();
        b.setup_clamp().setup_single_issuer();
        let ring = match b.build(LINK_MAX as u32 * 2) {
            Ok(r) => r,
            Err(_) => {
                bump(SysKind::Other);
                IoUring::builder().setup_clamp().build(LINK_MAX as u32 * 2)?
            }
        };
        Ok(LinkRing {
            ring,
            staged: Vec::new(),
            broken: false,
        })
    }

    /// The bytes the next [`LinkOp::WriteStaged`] writes (cleared after each
    /// [`LinkRing::run`]).
    pub fn stage(&mut self) -> &mut Vec<u8> {
        &mut self.staged
    }

    /// Can the ring still be used?
    pub fn usable(&self) -> bool {
        !self.broken
    }

    /// Submit `ops` as one chain and wait for all of them: one io_uring_enter
    /// (more only if a wait is interrupted). `results[i]` is the result of
    /// `ops[i]` (bytes moved, or a negative errno; -ECANCELED after a short
    /// staged write).
    pub fn run(&mut self, ops: &[LinkOp], results: &mut [i32]) -> io::Result<()> {
        if self.broken {
            return Err(io::Error::from_raw_os_error(libc::EBADFD));
        }
        let n = ops.len().min(LINK_MAX).min(results.len());
        if n == 0 {
            return Ok(());
        }
        let staged_len = self.staged.len().min(u32::MAX as usize) as u32;
        for (i, op) in ops[..n].iter().enumerate() {
            let (e, link) = match *op {
                LinkOp::WriteStaged { fd } => (
                    opcode::Write::new(types::Fd(fd), self.staged.as_ptr(), staged_len)
                        .offset(u64::MAX)
                        .build(),
                    squeue::Flags::IO_LINK,
                ),
                LinkOp::Splice { fd_in, fd_out, len } => (
                    opcode::Splice::new(types::Fd(fd_in), -1, types::Fd(fd_out), -1, len)
                        .flags(libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK)
                        .build(),
                    squeue::Flags::IO_HARDLINK,
                ),
                LinkOp::Tee { fd_in, fd_out, len } => (
                    opcode::Tee::new(types::Fd(fd_in), types::Fd(fd_out), len)
                        .flags(libc::SPLICE_F_NONBLOCK)
                        .build(),
                    squeue::Flags::IO_HARDLINK,
                ),
            };
            // Every entry but the last links to the next.
            let e = if i + 1 < n { e.flags(link) } else { e };
            // SAFETY: the only memory referenced is `self.staged`, which this
            // ring owns and does not touch again until every completion of
            // the chain is reaped below (or never, once `broken`).
            if unsafe { self.ring.submission().push(&e.user_data(i as u64)) }.is_err() {
                // Cannot happen (the ring is empty between runs and holds
                // 2 × LINK_MAX entries): refuse rather than run half a chain.
                self.broken = true;
                return Err(io::Error::from_raw_os_error(libc::EBUSY));
            }
        }
        let mut reaped = 0;
        while reaped < n {
            bump(SysKind::UringEnter);
            match self.ring.submit_and_wait(n - reaped) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    self.broken = true;
                    return Err(e);
                }
            }
            let mut cq = self.ring.completion();
            cq.sync();
            for c in &mut cq {
                if let Some(r) = results.get_mut(c.user_data() as usize) {
                    *r = c.result();
                }
                reaped += 1;
            }
        }
        self.staged.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// A staged write, a splice in, a tee and a splice out in one chain; a
    /// short splice does not cancel what is hard-linked behind it, and an
    /// empty source is an -EAGAIN of that step only.
    #[test]
    fn linked_chain_moves_tees_and_reports_each_step() {
        let Ok(mut ring) = LinkRing::new() else {
            eprintln!("skipped: io_uring refused");
            return;
        };
        let (mut up_w, up_r) = UnixStream::pair().unwrap();
        let (cl_w, mut cl_r) = UnixStream::pair().unwrap();
        up_r.set_nonblocking(true).unwrap();
        cl_w.set_nonblocking(true).unwrap();
        let (intake_r, intake_w) = crate::sys::pipe().unwrap();
        let (out_r, out_w) = crate::sys::pipe().unwrap();
        up_w.write_all(b"body bytes").unwrap();
        ring.stage().extend_from_slice(b"head:");
        let ops = [
            LinkOp::WriteStaged { fd: out_w.raw() },
            LinkOp::Splice {
                fd_in: up_r.as_raw_fd(),
                fd_out: intake_w.raw(),
                len: 1000,
            },
            LinkOp::Tee {
                fd_in: intake_r.raw(),
                fd_out: out_w.raw(),
                len: 1000,
            },
            LinkOp::Splice {
                fd_in: out_r.raw(),
                fd_out: cl_w.as_raw_fd(),
                len: 1000,
            },
        ];
        let mut res = [0i32; 4];
        ring.run(&ops, &mut res).unwrap();
        assert_eq!(
            res,
            [5, 10, 10, 15],
            "short splice in (10 of 1000) did not cancel the rest"
        );
        let mut got = [0u8; 15];
        cl_r.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"head:body bytes");
        // The intake still holds the tee'd bytes (the caller reads them).
        let mut kept = [0u8; 10];
        assert_eq!(crate::sys::read(intake_r.raw(), &mut kept).unwrap(), 10);
        // Nothing to read: EAGAIN for the splice in, the rest still runs.
        let mut res = [0i32; 2];
        ring.run(&ops[1..2], &mut res[..1]).unwrap();
        assert_eq!(res[0], -libc::EAGAIN);
    }

    /// A socket a chain used is released when its descriptor closes: its
    /// peer reads the end of stream at once. A chain's last request may be
    /// freed after its completion was reaped (the io_uring worker thread can
    /// drop its reference last); a ring that deferred that free to its next
    /// enter (IORING_SETUP_DEFER_TASKRUN) kept the socket open, so a client
    /// answered with `Connection: close` waited for a FIN that came only
    /// with the worker's next chain. Seen on a thread's first chain (a new
    /// io_uring worker thread); each round is one, on a thread of its own.
    #[test]
    fn a_socket_closed_after_a_chain_ends_at_once() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        for round in 0..400 {
            let (up_w, up_r, cl_r, cl_w) = {
                let up_w = std::net::TcpStream::connect(addr).unwrap();
                let up_r = l.accept().unwrap().0;
                let cl_r = std::net::TcpStream::connect(addr).unwrap();
                (up_w, up_r, cl_r, l.accept().unwrap().0)
            };
            let (closed_tx, closed) = std::sync::mpsc::channel();
            let (read_tx, read) = std::sync::mpsc::channel::<()>();
            let chained = std::thread::spawn(move || {
                // (A ring serves the thread that made it: single issuer.)
                let Ok(mut ring) = LinkRing::new() else {
                    let _ = closed_tx.send(false);
                    return;
                };
                let (intake_r, intake_w) = crate::sys::pipe().unwrap();
                up_r.set_nonblocking(true).unwrap();
                cl_w.set_nonblocking(true).unwrap();
                // The upstream has ended (a close-delimited body's end) and
                // the pipe is empty: 0, then -EAGAIN, as the proxy's last
                // chain of such a body.
                drop(up_w);
                let ops = [
                    LinkOp::Splice {
                        fd_in: up_r.as_raw_fd(),
                        fd_out: intake_w.raw(),
                        len: 1000,
                    },
                    LinkOp::Splice {
                        fd_in: intake_r.raw(),
                        fd_out: cl_w.as_raw_fd(),
                        len: 1000,
                    },
                ];
                let mut res = [0i32; 2];
                ring.run(&ops, &mut res).unwrap();
                assert_eq!(res, [0, -libc::EAGAIN]);
                drop(cl_w);
                closed_tx.send(true).unwrap();
                // The ring lives on, unused, as a worker's does between
                // chains, until the peer has read.
                let _ = read.recv();
                drop(ring);
            });
            if !closed.recv().unwrap() {
                eprintln!("skipped: io_uring refused");
                return;
            }
            // A generous bound: a held socket never ends while its ring lives.
            let mut cl_r = cl_r;
            cl_r.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
            let mut b = [0u8; 1];
            let got = cl_r.read(&mut b);
            read_tx.send(()).unwrap();
            chained.join().unwrap();
            assert!(
                matches!(got, Ok(0)),
                "round {round}: the closed socket's peer read {got:?}, not its end"
            );
        }
    }
}
