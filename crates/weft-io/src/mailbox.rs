//! One mailbox per worker for results from helper threads (the resolver's
//! answers, the disk store's finished loads): a helper appends a result for
//! worker `i` and signals `i`'s eventfd, which that worker's event loop
//! watches like any socket (Flash's helpers notify the server the same way).
//! It lives here, under every role, because AMPED helpers and persistent CGI
//! workers report to their event loops the same way.

use crate::sys::{self, Fd};
use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// The workers' mailboxes for results of type `T`.
pub struct Mailboxes<T> {
    boxes: Vec<(Fd, Mutex<Vec<T>>)>,
}

impl<T> Mailboxes<T> {
    /// A mailbox (and an eventfd) for each of `workers` workers.
    pub fn new(workers: usize) -> io::Result<Mailboxes<T>> {
        let mut boxes = Vec::with_capacity(workers);
        for _ in 0..workers {
            boxes.push((sys::eventfd()?, Mutex::new(Vec::new())));
        }
        Ok(Mailboxes { boxes })
    }

    /// The eventfd `worker` watches.
    pub fn waker(&self, worker: usize) -> RawFd {
        self.boxes[worker].0.raw()
    }

    /// Leave `item` for `worker` and wake it. Only a post into an empty box
    /// signals: one that finds items there is taken with them, since
    /// [`Mailboxes::take`] resets the eventfd before it empties the box
    /// (a burst of posts, such as one per follower of a stream, costs one
    /// system call).
    pub fn post(&self, worker: usize, item: T) {
        let (wake, items) = &self.boxes[worker];
        let first = {
            let mut items = items.lock().unwrap_or_else(|e| e.into_inner());
            items.push(item);
            items.len() == 1
        };
        if first {
            let _ = sys::eventfd_signal(wake.raw());
        }
    }

    /// Move what `worker` was left into `out` (and reset its eventfd).
    pub fn take(&self, worker: usize, out: &mut Vec<T>) {
        let (wake, items) = &self.boxes[worker];
        sys::eventfd_drain(wake.raw());
        out.append(&mut items.lock().unwrap_or_else(|e| e.into_inner()));
    }
}
