//! io_uring as a readiness backend: multishot polls whose completions the
//! kernel posts into a ring mapped into our address space.
//!
//! This is the modern form of uselect's shared readiness region (000, §2): when
//! the completion ring is not empty, [`Uring::wait`] reads events from shared
//! memory without entering the kernel; only an empty ring costs an
//! io_uring_enter, which also hands over any queued poll additions and removals
//! in the same call. Multishot polls fire on each wake-up of the socket, so the
//! backend is edge-triggered in effect.
//!
//! Each registration has up to two polls: one for reading (armed while any
//! interest is registered; a read wake-up while the connection waits to write
//! is reported, and an edge-triggered handler remembers it) and one for
//! writing, armed only while the interest includes writing. A socket's
//! write-space wake-ups (each ACK that frees room) would otherwise post a
//! completion for every connection, wanted or not. Arming or removing a poll
//! is a submission queued in the shared ring that rides with the next enter:
//! no system call of its own. Closing a descriptor does not cancel a poll (the
//! request holds the file), so `delete` queues the removals before every close,
//! and a removal the kernel refuses with EALREADY (a wake-up of that poll was
//! being completed) is submitted again: a multishot poll left armed would keep
//! a closed socket open, its peer waiting for a FIN that never comes.
//!
//! Waking can be batched ([`BackendOptions::wake_interval`], `--wake-interval`):
//! under load, a wait that finds the ring empty asks the kernel for the
//! completions expected within one interval at the recent completion rate
//! (never more than half the armed read polls, so a closed-loop client is
//! never waited for until it runs dry), and io_uring's min-wait (Linux 6.12)
//! bounds how long the first completion is held back: ten intervals. Below
//! two expected completions per interval (light load) the wait is the plain
//! one, so light load pays no latency; under load a request waits about one
//! interval more on average, for far fewer io_uring_enter calls.

use super::{BackendOptions, Caps, Event, Interest, Poller, Token};
use crate::sys::uring::{Ring, TaskRun};
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Flag of a poll removal's user data: the rest is the target poll's user
/// data, so a removal that must be retried knows its target.
const REMOVAL: u64 = 1 << 63;
/// Direction bit of a poll's user data.
const WRITE_POLL: u64 = 1;

const READ_MASK: u32 = (libc::POLLIN | libc::POLLRDHUP) as u32;
const WRITE_MASK: u32 = libc::POLLOUT as u32;
/// A read poll for the end of stream alone ([`Interest::hangup`]): without
/// POLLIN, io_uring's wake-up callback drops a data-ready wake-up (its key is
/// EPOLLIN) before it posts anything, as epoll does for such a registration;
/// errors and hang-ups are always in a poll's mask.
const HANGUP_MASK: u32 = libc::POLLRDHUP as u32;

/// One registered descriptor.
#[derive(Clone, Copy)]
struct Reg {
    token: Token,
    registered: bool,
    /// Arm number of the live read poll (0: none armed).
    read_arm: u32,
    /// Arm number of the live write poll (0: none armed).
    write_arm: u32,
    /// The read poll is (or is to be) armed with [`HANGUP_MASK`].
    hangup_only: bool,
}

const EMPTY: Reg = Reg {
    token: Token(0),
    registered: false,
    read_arm: 0,
    write_arm: 0,
    hangup_only: false,
};

/// A poll's user data: the arm number (so a completion of an earlier poll of
/// the same descriptor is recognised), the descriptor, and the direction.
#[inline]
fn user_data(arm: u32, fd: RawFd, write: bool) -> u64 {
    ((arm as u64) << 32) | ((fd as u32 as u64) << 1) | if write { WRITE_POLL } else { 0 }
}

/// Wake-up batching (see the module doc): how many completions a sleeping
/// wait asks for, from the completion rate measured over recent waits.
struct Pace {
    /// Target interval between wake-ups under load (zero: batching off).
    interval: Duration,
    /// Completions per second, smoothed over windows of [`PACE_WINDOW`].
    rate: f64,
    window_start: Instant,
    window_events: u32,
}

/// Completion-rate sampling window.
const PACE_WINDOW: Duration = Duration::from_millis(2);
/// Most completions one wait asks for.
const MAX_BATCH: usize = 256;
/// The min-wait bound is this many intervals: long enough that its timer
/// seldom fires while the rate holds (a timer expiry costs more CPU than the
/// enters it saves on this project's machine; an armed timer that is
/// cancelled costs little), short enough to bound the wait when the rate
/// drops.
const MIN_WAIT_INTERVALS: u32 = 10;

impl Pace {
    /// (completions to wait for, min-wait): the completions expected within
    /// one interval at the recent rate, at most `cap`; plain (1, zero) when
    /// that is under 2.
    fn want(&self, cap: usize) -> (usize, Duration) {
        if self.interval.is_zero() {
            return (1, Duration::ZERO);
        }
        let expected = ((self.rate * self.interval.as_secs_f64()) as usize)
            .min(cap)
            .min(MAX_BATCH);
        if expected < 2 {
            return (1, Duration::ZERO);
        }
        (expected, self.interval * MIN_WAIT_INTERVALS)
    }

    fn record(&mut self, completions: usize) {
        self.window_events = self.window_events.saturating_add(completions as u32);
        let now = Instant::now();
        let span = now.duration_since(self.window_start);
        if span >= PACE_WINDOW {
            let r = self.window_events as f64 / span.as_secs_f64();
            self.rate = (self.rate + r) / 2.0;
            self.window_start = now;
            self.window_events = 0;
        }
    }
}

/// The io_uring readiness backend.
pub struct Uring {
    ring: Ring,
    /// Indexed by descriptor.
    regs: Vec<Reg>,
    /// Source of arm numbers (never 0).
    arms: u32,
    /// Multishot polls the kernel ended (not cancelled) to re-arm after a
    /// drain; kept to reuse its allocation.
    rearm: Vec<(RawFd, bool)>,
    /// Removals the kernel refused with EALREADY, to submit again.
    retry_removals: Vec<u64>,
    pace: Pace,
    task_run: TaskRun,
    /// Waits answered from the ring while submissions stayed queued.
    held_back: u32,
    /// Read polls armed: the most completions one wait can count on from
    /// connections whose clients wait for us.
    armed_reads: u32,
}

/// A queued arm is handed to the kernel at the latest after this many waits
/// answered from a non-empty ring, so a connection waiting for its first
/// poll is not left unwatched while other completions keep the ring busy.
const MAX_HELD_BACK: u32 = 4;

impl Uring {
    fn next_arm(&mut self) -> u32 {
        // 31 bits: the top bit of the user data marks removals (REMOVAL).
        self.arms = (self.arms.wrapping_add(1) & 0x7fff_ffff).max(1);
        self.arms
    }

    fn arm(&mut self, fd: RawFd, write: bool) -> io::Result<()> {
        let arm = self.next_arm();
        let r = &mut self.regs[fd as usize];
        if write {
            r.write_arm = arm;
        } else {
            if r.read_arm == 0 {
                self.armed_reads += 1;
            }
            r.read_arm = arm;
        }
        let mask = match (write, r.hangup_only) {
            (true, _) => WRITE_MASK,
            (false, true) => HANGUP_MASK,
            (false, false) => READ_MASK,
        };
        self.ring.poll_add(fd, mask, user_data(arm, fd, write), true)
    }

    fn disarm(&mut self, fd: RawFd, write: bool) -> io::Result<()> {
        let r = &mut self.regs[fd as usize];
        let arm = if write {
            std::mem::take(&mut r.write_arm)
        } else {
            std::mem::take(&mut r.read_arm)
        };
        if arm == 0 {
            return Ok(());
        }
        if !write {
            self.armed_reads -= 1;
        }
        let target = user_data(arm, fd, write);
        self.ring.poll_remove(target, target | REMOVAL)
    }

    fn reg(&mut self, fd: RawFd) -> io::Result<&mut Reg> {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.regs.get_mut(i))
            .filter(|r| r.registered)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// Arm or remove polls so they match `interest`: the write poll follows
    /// it exactly; the read poll stays armed while anything is wanted, for
    /// the end of stream alone when that is all that is wanted (a sockmap'd
    /// tunnel: its sockets' data-ready wake-ups, one per batch the kernel
    /// forwards, would each post a completion). A read poll whose mask must
    /// change is removed and armed anew (two queued submissions).
    fn apply(&mut self, fd: RawFd, interest: Interest) -> io::Result<()> {
        let r = self.regs[fd as usize];
        let any = interest.read || interest.write || interest.hangup;
        let hangup_only = interest.hangup && !interest.read && !interest.write;
        if r.read_arm != 0 && (!any || r.hangup_only != hangup_only) {
            self.disarm(fd, false)?;
        }
        self.regs[fd as usize].hangup_only = hangup_only;
        if any && self.regs[fd as usize].read_arm == 0 {
            self.arm(fd, false)?;
        }
        if interest.write && r.write_arm == 0 {
            self.arm(fd, true)?;
        } else if !interest.write && r.write_arm != 0 {
            self.disarm(fd, true)?;
        }
        Ok(())
    }

    /// Enter the kernel when the ring holds nothing (or queued submissions
    /// have waited long enough); see the module doc for the batching.
    fn enter(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let pending = self.ring.pending_submissions() > 0;
        if self.ring.has_completions() {
            if !pending {
                self.held_back = 0;
                return Ok(());
            }
            self.held_back += 1;
            if self.held_back < MAX_HELD_BACK {
                return Ok(());
            }
            // Hand the queued polls over without waiting.
            self.held_back = 0;
            self.ring.submit_and_wait(0, None)?;
            return Ok(());
        }
        self.held_back = 0;
        match timeout {
            Some(t) if t.is_zero() => {
                // Only look: worth a call when there is something to hand
                // over or completions wait to be posted.
                if pending || self.ring.work_pending() {
                    self.ring.submit_and_wait(0, None)?;
                }
            }
            t => {
                // Half the armed read polls: with a closed-loop client (each
                // connection sends its next request only after our answer)
                // no more than those can arrive while we sleep.
                let (want, min_wait) = self.pace.want(self.armed_reads as usize / 2);
                self.ring.submit_and_wait_batched(want, min_wait, t)?;
            }
        }
        Ok(())
    }
}

impl Poller for Uring {
    const CAPS: Caps = Caps {
        name: "uring",
        edge_triggered: true,
        fixed_interest: false,
        max_fd: None,
        close_deregisters: false,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Ok(Uring {
            ring: Ring::new(4096)?,
            regs: Vec::new(),
            arms: 0,
            rearm: Vec::new(),
            retry_removals: Vec::new(),
            pace: Pace {
                interval: Duration::ZERO,
                rate: 0.0,
                window_start: Instant::now(),
                window_events: 0,
            },
            task_run: TaskRun::Coop,
            held_back: 0,
            armed_reads: 0,
        })
    }
    fn configure(&mut self, opts: &BackendOptions) {
        let batch = !opts.wake_interval.is_zero() && self.ring.supports_min_wait();
        // Batching wants deferred task running: a waiting worker is woken once
        // its batch is complete, not at each completion (with COOP_TASKRUN
        // every arrival wakes it to post its completion, and it sleeps again).
        // Without batching, cooperative running lets completions reach the
        // ring during the worker's own system calls, so a pass often finds
        // them there without entering the kernel at all.
        let mode = if batch { TaskRun::Defer } else { TaskRun::Coop };
        if mode != self.task_run && self.regs.iter().all(|r| !r.registered) {
            if let Ok(ring) = Ring::with_task_run(4096, mode) {
                self.ring = ring;
                self.task_run = mode;
            }
        }
        self.pace.interval = if batch && self.task_run == TaskRun::Defer {
            opts.wake_interval
        } else {
            Duration::ZERO
        };
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let i = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        if self.regs.len() <= i {
            self.regs.resize(i + 1, EMPTY);
        }
        if self.regs[i].registered {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.regs[i] = Reg {
            token,
            registered: true,
            ..EMPTY
        };
        self.apply(fd, interest)
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.reg(fd)?.token = token;
        self.apply(fd, interest)
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        self.reg(fd)?;
        self.disarm(fd, false)?;
        self.disarm(fd, true)?;
        self.regs[fd as usize].registered = false;
        Ok(())
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.enter(timeout)?;
        let mut rearm = std::mem::take(&mut self.rearm);
        let mut retry = std::mem::take(&mut self.retry_removals);
        let regs = &self.regs;
        let mut completions = 0usize;
        self.ring.drain(|c| {
            completions += 1;
            if c.user_data & REMOVAL != 0 {
                // EALREADY: the poll was being completed (a wake-up's task
                // work had not run yet) and stays armed; a multishot poll
                // left so would hold its file — a closed socket that never
                // sends its FIN. Ask again; once the poll is idle it goes.
                // ENOENT (already gone) and success need nothing.
                if c.result == -libc::EALREADY {
                    retry.push(c.user_data & !REMOVAL);
                }
                return;
            }
            let fd = ((c.user_data as u32) >> 1) as RawFd;
            let write = c.user_data & WRITE_POLL != 0;
            let arm = (c.user_data >> 32) as u32;
            let Some(r) = regs.get(fd as usize).filter(|r| r.registered) else {
                return;
            };
            if arm != if write { r.write_arm } else { r.read_arm } {
                return; // a poll removed (or replaced) since
            }
            if !c.more && c.result != -libc::ECANCELED {
                // The kernel ended this multishot poll (an error, or a full
                // completion ring): arm it again.
                rearm.push((fd, write));
            }
            if c.result < 0 {
                if c.result != -libc::ECANCELED {
                    events.push(Event {
                        token: r.token,
                        readable: true,
                        writable: true,
                        error: true,
                        read_closed: false,
                    });
                }
                return;
            }
            let m = c.result as u32;
            events.push(Event {
                token: r.token,
                readable: m & (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP) as u32 != 0,
                writable: m & libc::POLLOUT as u32 != 0,
                error: m & (libc::POLLERR | libc::POLLHUP) as u32 != 0,
                read_closed: m & (libc::POLLRDHUP | libc::POLLHUP) as u32 != 0,
            });
        });
        if !self.pace.interval.is_zero() {
            self.pace.record(completions);
        }
        for &(fd, write) in &rearm {
            self.arm(fd, write)?;
        }
        rearm.clear();
        self.rearm = rearm;
        for &target in &retry {
            self.ring.poll_remove(target, target | REMOVAL)?;
        }
        retry.clear();
        self.retry_removals = retry;
        Ok(())
    }
}
