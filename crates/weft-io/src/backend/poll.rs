//! poll(2): the interest set lives in user space as a `pollfd` array that the
//! kernel scans in full on every call (the cost the µserver study measures).

use super::{timeout_ms, Caps, Event, Interest, Poller, Token};
use crate::sys;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const NO_SLOT: u32 = u32::MAX;

/// poll(2) backend. Registrations are a dense `pollfd` array with a
/// descriptor-indexed position table, so add, modify and delete are O(1).
pub struct Poll {
    fds: Vec<libc::pollfd>,
    tokens: Vec<Token>,
    pos: Vec<u32>,
}

fn bits(interest: Interest) -> i16 {
    let mut b = 0;
    // RDHUP only with read interest (see the epoll backend: level-triggered,
    // it would wake the loop at every wait while the socket is half-closed).
    if interest.read {
        b |= libc::POLLIN | libc::POLLRDHUP;
    } else if interest.hangup {
        // As in the epoll backend: pollwake skips wake-ups whose key is not asked for.
        b |= libc::POLLRDHUP;
    }
    if interest.write {
        b |= libc::POLLOUT;
    }
    b
}

impl Poll {
    fn slot(&self, fd: RawFd) -> Option<usize> {
        let p = *self.pos.get(usize::try_from(fd).ok()?)?;
        (p != NO_SLOT).then_some(p as usize)
    }
}

impl Poller for Poll {
    const CAPS: Caps = Caps {
        name: "poll",
        edge_triggered: false,
        fixed_interest: false,
        max_fd: None,
        close_deregisters: false,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Ok(Poll {
            fds: Vec::new(),
            tokens: Vec::new(),
            pos: Vec::new(),
        })
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let i = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        if self.slot(fd).is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        if self.pos.len() <= i {
            self.pos.resize(i + 1, NO_SLOT);
        }
        self.pos[i] = self.fds.len() as u32;
        self.fds.push(libc::pollfd {
            fd,
            events: bits(interest),
            revents: 0,
        });
        self.tokens.push(token);
        Ok(())
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let p = self
            .slot(fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.fds[p].events = bits(interest);
        self.tokens[p] = token;
        Ok(())
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        let p = self
            .slot(fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.fds.swap_remove(p);
        self.tokens.swap_remove(p);
        self.pos[fd as usize] = NO_SLOT;
        if let Some(moved) = self.fds.get(p) {
            self.pos[moved.fd as usize] = p as u32;
        }
        Ok(())
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let mut n = match sys::poll(&mut self.fds, timeout_ms(timeout)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        for (pfd, token) in self.fds.iter().zip(self.tokens.iter()) {
            if n == 0 {
                break;
            }
            let r = pfd.revents;
            if r == 0 {
                continue;
            }
            n -= 1;
            events.push(Event {
                token: *token,
                readable: r & (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP) != 0,
                writable: r & libc::POLLOUT != 0,
                error: r & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
                read_closed: r & (libc::POLLRDHUP | libc::POLLHUP) != 0,
            });
        }
        Ok(())
    }
}
