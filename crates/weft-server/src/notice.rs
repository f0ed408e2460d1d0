//! Change notices for cached files (`--snapshot-check notify`): the snapshot
//! rule's check before a response's head without an `fstat` per response.
//!
//! The worker watches every file it caches with inotify; the kernel queues an
//! event when a watched file is written, truncated or has its metadata
//! changed, and the worker's event loop reads the queue when its descriptor
//! is readable. A cached file no event has touched is taken as unchanged
//! (no system call); a file with an event (or after the queue overflowed)
//! is checked with `fstat` from then on, as without notices, so a file
//! replaced by rename or only `chmod`ed is not mistaken for a changed one.
//!
//! What this gives up, and why it is a switch: a write that lands after the
//! loop last read the queue (within the current batch of events) is seen
//! one batch later, where an `fstat` just before the head sees it at once;
//! both miss a write between the check and the send itself. inotify does not
//! report writes through a shared writable mapping, nor writes made on
//! another host (NFS). The checks before a blocked send resumes and before
//! each mapped chunk of a large body stay `fstat`s.

use crate::files::CachedFile;
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use weft_io::sys::{self, notify, Fd};

/// A cached file's standing with the notices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Watch {
    /// Not watched (notices off, or the watch could not be added): `fstat`.
    #[default]
    None,
    /// Watched, and no event since: unchanged.
    Quiet,
    /// An event came (or may have been lost): `fstat` from now on.
    Noticed,
}

/// One worker's inotify instance and what each watch covers.
pub struct ChangeNotice {
    fd: Fd,
    /// Watch descriptor → the cache entries of that inode (one watch per
    /// inode: entries of the same file share it).
    watched: HashMap<i32, Vec<Weak<CachedFile>>>,
    buf: Box<[u8]>,
}

impl ChangeNotice {
    /// A new instance (None when inotify is not available: `fstat` then).
    pub fn new() -> Option<ChangeNotice> {
        let fd = sys::notify::init().ok()?;
        Some(ChangeNotice {
            fd,
            watched: HashMap::new(),
            buf: vec![0u8; 4096].into_boxed_slice(),
        })
    }

    /// The descriptor the event loop watches for readability.
    pub fn fd(&self) -> &Fd {
        &self.fd
    }

    /// Watch `f` (a new cache entry). A file that cannot be watched (the
    /// user's watch limit) stays [`Watch::None`].
    pub fn watch(&mut self, f: &Rc<CachedFile>) {
        if let Ok(wd) = notify::watch_open_file(&self.fd, &*f.fd) {
            self.watched.entry(wd).or_default().push(Rc::downgrade(f));
            f.watch.set(Watch::Quiet);
        }
    }

    /// Read the queued events and mark the entries they touch. Returns the
    /// number of events.
    pub fn take(&mut self) -> usize {
        let mut touched: Vec<(i32, u32)> = Vec::new();
        let n = notify::read_events(&self.fd, &mut self.buf, |wd, mask| touched.push((wd, mask))).unwrap_or(0);
        for (wd, mask) in touched {
            if mask & notify::OVERFLOW != 0 {
                // Events were lost: every watched entry is checked again.
                for f in self.watched.values().flatten().filter_map(Weak::upgrade) {
                    f.watch.set(Watch::Noticed);
                }
                continue;
            }
            let gone = mask & notify::IGNORED != 0;
            if let Some(v) = self.watched.get(&wd) {
                for f in v.iter().filter_map(Weak::upgrade) {
                    f.watch.set(Watch::Noticed);
                }
            }
            if gone {
                self.watched.remove(&wd);
            }
        }
        n
    }

    /// Forget entries the cache dropped; remove watches no entry uses.
    pub fn sweep(&mut self) {
        let mut idle = Vec::new();
        for (wd, v) in self.watched.iter_mut() {
            v.retain(|f| f.strong_count() > 0);
            if v.is_empty() {
                idle.push(*wd);
            }
        }
        for wd in idle {
            self.watched.remove(&wd);
            let _ = notify::unwatch(&self.fd, wd);
        }
    }

    /// Watches held (for the counters).
    pub fn watches(&self) -> usize {
        self.watched.len()
    }
}

/// Is `f` known unchanged without asking the kernel (watched, no event)?
pub fn quiet(f: &CachedFile) -> bool {
    f.watch.get() == Watch::Quiet
}

/// A cell for [`CachedFile`].
pub type WatchCell = Cell<Watch>;
