//! io_uring as a readiness backend: one multishot poll per descriptor, whose
//! completions the kernel posts into a ring mapped into our address space.
//!
//! This is the modern form of uselect's shared readiness region (000, §2): when
//! the completion ring is not empty, [`Uring::wait`] reads events from shared
//! memory without entering the kernel; only an empty ring costs an
//! io_uring_enter, which also hands over any queued poll additions and removals
//! in the same call. Multishot polls fire on each wake-up of the socket, so the
//! backend is edge-triggered in effect and registrations are made once for both
//! directions. Closing a descriptor does not cancel a poll (the request holds the
//! file), so `delete` queues a removal before every close.

use super::{Caps, Event, Interest, Poller, Token};
use crate::sys::uring::Ring;
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// User data of poll-removal submissions (their completions are ignored).
const REMOVAL: u64 = u64::MAX;

fn mask(interest: Interest) -> u32 {
    let mut m = 0u32;
    if interest.read {
        m |= (libc::POLLIN | libc::POLLRDHUP) as u32;
    }
    if interest.write {
        m |= libc::POLLOUT as u32;
    }
    m
}

/// The io_uring readiness backend.
pub struct Uring {
    ring: Ring,
    /// Live registrations: fd → (token, mask).
    by_fd: HashMap<RawFd, (Token, u32)>,
    /// token → fd, to re-arm a multishot poll the kernel ended.
    by_token: HashMap<u64, RawFd>,
}

impl Uring {
    fn arm(&mut self, fd: RawFd, token: Token, m: u32) -> io::Result<()> {
        if m == 0 {
            return Ok(());
        }
        self.ring.poll_add(fd, m, token.0, true)
    }
}

impl Poller for Uring {
    const CAPS: Caps = Caps {
        name: "uring",
        edge_triggered: true,
        fixed_interest: true,
        max_fd: None,
        close_deregisters: false,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Ok(Uring {
            ring: Ring::new(4096)?,
            by_fd: HashMap::new(),
            by_token: HashMap::new(),
        })
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        if self.by_fd.contains_key(&fd) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let m = mask(interest);
        self.by_fd.insert(fd, (token, m));
        self.by_token.insert(token.0, fd);
        self.arm(fd, token, m)
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let (old, old_mask) = *self
            .by_fd
            .get(&fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let m = mask(interest);
        if old == token && old_mask == m {
            return Ok(());
        }
        if old_mask != 0 {
            self.ring.poll_remove(old.0, REMOVAL)?;
        }
        self.by_token.remove(&old.0);
        self.by_fd.insert(fd, (token, m));
        self.by_token.insert(token.0, fd);
        self.arm(fd, token, m)
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        let (token, m) = self
            .by_fd
            .remove(&fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.by_token.remove(&token.0);
        if m != 0 {
            self.ring.poll_remove(token.0, REMOVAL)?;
        }
        Ok(())
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        if !self.ring.has_completions() {
            // Nothing in shared memory: enter the kernel, submitting queued
            // polls and removals in the same call.
            match timeout {
                Some(t) if t.is_zero() => {
                    if self.ring.pending_submissions() > 0 {
                        self.ring.submit_and_wait(0, None)?;
                    }
                }
                t => {
                    self.ring.submit_and_wait(1, t)?;
                }
            }
        }
        let mut rearm: Vec<(RawFd, Token, u32)> = Vec::new();
        let by_token = &self.by_token;
        let by_fd = &self.by_fd;
        self.ring.drain(|c| {
            if c.user_data == REMOVAL {
                return;
            }
            let token = Token(c.user_data);
            let live = by_token.get(&c.user_data).copied();
            if !c.more {
                // The kernel ended this multishot poll (cancelled, or an error,
                // or CQ overflow): re-arm if the registration is still ours.
                if let Some(fd) = live {
                    if let Some(&(t, m)) = by_fd.get(&fd) {
                        if t == token && c.result != -libc::ECANCELED {
                            rearm.push((fd, t, m));
                        }
                    }
                }
            }
            if c.result < 0 {
                if c.result != -libc::ECANCELED && live.is_some() {
                    events.push(Event {
                        token,
                        readable: true,
                        writable: true,
                        error: true,
                        read_closed: false,
                    });
                }
                return;
            }
            let r = c.result as u32;
            events.push(Event {
                token,
                readable: r & (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP) as u32 != 0,
                writable: r & libc::POLLOUT as u32 != 0,
                error: r & (libc::POLLERR | libc::POLLHUP) as u32 != 0,
                read_closed: r & (libc::POLLRDHUP | libc::POLLHUP) as u32 != 0,
            });
        });
        for (fd, t, m) in rearm {
            self.arm(fd, t, m)?;
        }
        Ok(())
    }
}
