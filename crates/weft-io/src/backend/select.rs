//! select(2): bitmaps of FD_SETSIZE (1024) bits, copied to and scanned by the
//! kernel on every call. Descriptors at or above FD_SETSIZE cannot be
//! represented: `add` refuses them with EMFILE-like `OutOfRange` and the caller
//! closes that connection (writing past the bitmap would corrupt memory).

use super::{timeout_ms, Caps, Event, Interest, Poller, Token};
use crate::sys::{self, FdSet, FD_SETSIZE};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// select(2) backend.
pub struct Select {
    read: FdSet,
    write: FdSet,
    tokens: Vec<Option<Token>>,
    /// Registered descriptors, densely, for the scan after select returns.
    registered: Vec<RawFd>,
    pos: Vec<u32>,
    max_fd: RawFd,
}

/// The error `Select::add` returns for a descriptor that does not fit.
pub fn out_of_range(fd: RawFd) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("descriptor {fd} is at or above select's FD_SETSIZE ({FD_SETSIZE})"),
    )
}

impl Poller for Select {
    const CAPS: Caps = Caps {
        name: "select",
        edge_triggered: false,
        fixed_interest: false,
        max_fd: Some(FD_SETSIZE),
        close_deregisters: false,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Ok(Select {
            read: FdSet::new(),
            write: FdSet::new(),
            tokens: vec![None; FD_SETSIZE as usize],
            registered: Vec::new(),
            pos: vec![u32::MAX; FD_SETSIZE as usize],
            max_fd: -1,
        })
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        if !(0..FD_SETSIZE).contains(&fd) {
            return Err(out_of_range(fd));
        }
        if self.tokens[fd as usize].is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.pos[fd as usize] = self.registered.len() as u32;
        self.registered.push(fd);
        self.max_fd = self.max_fd.max(fd);
        self.modify(fd, token, interest)
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        if !(0..FD_SETSIZE).contains(&fd) {
            return Err(out_of_range(fd));
        }
        self.tokens[fd as usize] = Some(token);
        // No RDHUP in select: a FIN reads as readable, so hangup is read.
        if interest.read || interest.hangup {
            self.read.insert(fd);
        } else {
            self.read.remove(fd);
        }
        if interest.write {
            self.write.insert(fd);
        } else {
            self.write.remove(fd);
        }
        Ok(())
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        if !(0..FD_SETSIZE).contains(&fd) || self.tokens[fd as usize].is_none() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.tokens[fd as usize] = None;
        self.read.remove(fd);
        self.write.remove(fd);
        let p = self.pos[fd as usize] as usize;
        self.registered.swap_remove(p);
        if let Some(&moved) = self.registered.get(p) {
            self.pos[moved as usize] = p as u32;
        }
        self.pos[fd as usize] = u32::MAX;
        if fd == self.max_fd {
            self.max_fd = self.registered.iter().copied().max().unwrap_or(-1);
        }
        Ok(())
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        // select overwrites its arguments: work on copies, keep the interest sets.
        let mut r = self.read.clone();
        let mut w = self.write.clone();
        let ms = timeout_ms(timeout);
        let t = (ms >= 0).then(|| Duration::from_millis(ms as u64));
        let n = match sys::select(self.max_fd + 1, &mut r, &mut w, t) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        for &fd in &self.registered {
            let readable = r.contains(fd);
            let writable = w.contains(fd);
            if readable || writable {
                if let Some(token) = self.tokens[fd as usize] {
                    events.push(Event {
                        token,
                        readable,
                        writable,
                        error: false,
                        read_closed: false,
                    });
                }
            }
        }
        Ok(())
    }
}
