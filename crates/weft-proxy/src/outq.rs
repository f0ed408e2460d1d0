//! A connection's output queue: bytes the proxy wrote itself (heads, error
//! bodies, chunk framing) interleaved with shared immutable buffers (cached
//! bodies), sent together with one writev and never copied.
//!
//! Own bytes live in one growing `Vec` reused across requests; the queue
//! records ranges of it, so appending never moves a pending item's bytes out
//! from under it. Shared items are `Bytes` handles on a cached object's
//! segments: a cache hit costs reference-count increments, not a copy
//! (IO-Lite's aggregates, thesis 004 ch. 2).

use bytes::Bytes;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use weft_io::sys;

/// Slices gathered into one writev.
const IOV: usize = 64;

enum Item {
    Own { start: usize, end: usize },
    Shared(Bytes),
}

/// The output queue.
#[derive(Default)]
pub struct OutQueue {
    own: Vec<u8>,
    items: VecDeque<Item>,
    /// Bytes of the front item already sent.
    front_sent: usize,
    len: usize,
}

impl OutQueue {
    /// An empty queue.
    pub fn new() -> OutQueue {
        OutQueue::default()
    }

    /// Bytes waiting to be sent.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing to send?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append own bytes written by `f` into the queue's buffer.
    #[inline]
    pub fn write_own(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.own.len();
        f(&mut self.own);
        let end = self.own.len();
        self.commit(start, end);
    }

    /// Append a copy of `data`.
    #[inline]
    pub fn push_copy(&mut self, data: &[u8]) {
        self.write_own(|v| v.extend_from_slice(data));
    }

    fn commit(&mut self, start: usize, end: usize) {
        if end == start {
            return;
        }
        self.len += end - start;
        if let Some(Item::Own { end: e, .. }) = self.items.back_mut() {
            if *e == start {
                *e = end;
                return;
            }
        }
        self.items.push_back(Item::Own { start, end });
    }

    /// Append a shared buffer (no copy).
    #[inline]
    pub fn push_shared(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.items.push_back(Item::Shared(b));
        }
    }

    /// Send as much as the socket takes, followed by `tail` (bytes the caller
    /// keeps itself, e.g. a body being relayed). Returns (queue bytes sent,
    /// tail bytes sent); EAGAIN is `Ok((0, 0))` with `would_block` set.
    pub fn flush(&mut self, fd: RawFd, tail: &[u8], would_block: &mut bool) -> io::Result<(usize, usize)> {
        let mut queue_sent = 0;
        let mut tail_sent = 0;
        loop {
            let queued = self.len;
            let tail_left = &tail[tail_sent..];
            if queued == 0 && tail_left.is_empty() {
                self.reset();
                return Ok((queue_sent, tail_sent));
            }
            let mut iov = [IoSlice::new(&[]); IOV];
            let mut n = 0;
            for (i, it) in self.items.iter().enumerate() {
                if n == IOV - 1 {
                    break;
                }
                let s: &[u8] = match it {
                    Item::Own { start, end } => &self.own[*start..*end],
                    Item::Shared(b) => b,
                };
                let s = if i == 0 { &s[self.front_sent..] } else { s };
                iov[n] = IoSlice::new(s);
                n += 1;
            }
            let all_items = n == self.items.len();
            if all_items && !tail_left.is_empty() {
                iov[n] = IoSlice::new(tail_left);
                n += 1;
            }
            let offered: usize = iov[..n].iter().map(|s| s.len()).sum();
            let r = if n == 1 {
                sys::send(fd, &iov[0], false)
            } else {
                sys::writev(fd, &iov[..n])
            };
            let wrote = match r {
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *would_block = true;
                    return Ok((queue_sent, tail_sent));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let from_queue = wrote.min(queued);
            self.advance(from_queue);
            queue_sent += from_queue;
            tail_sent += wrote - from_queue;
            if wrote < offered {
                // The socket buffer is full: a new writable event will come.
                *would_block = true;
                return Ok((queue_sent, tail_sent));
            }
        }
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let Some(front) = self.items.front() else { break };
            let flen = match front {
                Item::Own { start, end } => end - start,
                Item::Shared(b) => b.len(),
            } - self.front_sent;
            if n >= flen {
                n -= flen;
                self.items.pop_front();
                self.front_sent = 0;
            } else {
                self.front_sent += n;
                n = 0;
            }
        }
        if self.items.is_empty() {
            self.reset();
        }
    }

    fn reset(&mut self) {
        self.items.clear();
        self.own.clear();
        self.front_sent = 0;
        self.len = 0;
    }

    /// Drop everything queued (the peer is gone).
    pub fn clear(&mut self) {
        self.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn own_and_shared_bytes_leave_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut q = OutQueue::new();
        q.push_copy(b"HEAD ");
        q.push_shared(Bytes::from_static(b"body "));
        q.write_own(|v| v.extend_from_slice(b"more "));
        q.push_copy(b"own");
        assert_eq!(q.len(), 18);
        let mut wb = false;
        let (n, t) = q.flush(a.as_raw_fd(), b" tail", &mut wb).unwrap();
        assert_eq!((n, t, wb), (18, 5, false));
        assert!(q.is_empty());
        drop(a);
        let mut got = String::new();
        b.read_to_string(&mut got).unwrap();
        assert_eq!(got, "HEAD body more own tail");
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let big = Bytes::from(vec![7u8; 4 << 20]);
        let mut q = OutQueue::new();
        q.push_copy(b"x");
        q.push_shared(big.clone());
        q.push_copy(b"y");
        let mut received = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while !q.is_empty() {
            let mut wb = false;
            q.flush(a.as_raw_fd(), &[], &mut wb).unwrap();
            if wb {
                let n = b.read(&mut buf).unwrap();
                received.extend_from_slice(&buf[..n]);
            }
        }
        drop(a);
        b.read_to_end(&mut received).unwrap();
        assert_eq!(received.len(), big.len() + 2);
        assert_eq!(received[0], b'x');
        assert_eq!(*received.last().unwrap(), b'y');
        assert!(received[1..received.len() - 1].iter().all(|&c| c == 7));
    }
}
