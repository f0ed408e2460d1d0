//! A small safe wrapper around an io_uring instance, for the `uring` event
//! backend and the batched epoll backend.
//!
//! Pushing a submission is `unsafe` in the io-uring crate because the kernel may
//! read the memory an entry points at until it completes; every entry built here
//! either points at nothing (poll add/remove) or at memory the caller keeps alive
//! until [`Ring::submit_and_wait`] has returned its completion (epoll_ctl), which
//! the signatures enforce by borrowing.

use super::{bump, SysKind};
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

/// An io_uring with its submission and completion queues mapped in.
pub struct Ring {
    ring: IoUring,
}

impl Ring {
    /// A ring with `entries` submission slots.
    pub fn new(entries: u32) -> io::Result<Ring> {
        // COOP_TASKRUN: a readiness completion is posted at the task's next
        // transition to or from the kernel (our reads and writes provide plenty)
        // instead of interrupting the running thread with an IPI to post it at
        // once. Without it every wake-up of a polled socket interrupts the
        // worker, which measured as less than half the reply rate of epoll on the
        // one-byte workload. Kernels older than 5.19 reject the flag: fall back.
        bump(SysKind::Other);
        let ring = match IoUring::builder().setup_clamp().setup_coop_taskrun().build(entries) {
            Ok(r) => r,
            Err(_) => {
                bump(SysKind::Other);
                IoUring::builder().setup_clamp().build(entries)?
            }
        };
        Ok(Ring { ring })
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
    pub fn poll_add(&mut self, fd: RawFd, mask: u32, user_data: u64, multishot: bool) -> io::Result<()> {
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

    /// Is the completion queue (shared memory) non-empty? No system call.
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Hand queued submissions to the kernel and wait for at least `want`
    /// completions, up to `timeout` — one io_uring_enter.
    pub fn submit_and_wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<usize> {
        bump(SysKind::UringEnter);
        let r = match timeout {
            Some(t) if want > 0 => {
                let ts = types::Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ => self.ring.submit_and_wait(want),
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
