//! A connection's output chain: everything queued for one socket, in order,
//! sent with the fewest system calls.
//!
//! Items are of five kinds:
//! - **own bytes** the role wrote itself (heads, error bodies, small files),
//!   appended to one `Vec` that is reused across requests; the chain records
//!   ranges of it, so appending never moves a pending item's bytes;
//! - **shared** immutable buffers (`Bytes`; a `weft_buf::Aggregate` is pushed
//!   as its segments): a cached body costs reference counts, never a copy
//!   (IO-Lite's aggregates);
//! - **cyclic** runs of a static pattern stored twice in a row (the origin
//!   emulator's bodies), so any run up to the period is one slice;
//! - **file ranges**, sent with sendfile(2), or with pread(2) into the
//!   caller's per-worker scratch buffer and writev(2);
//! - **pipe segments**, moved from a pipe's read end with splice(2).
//!
//! [`OutChain::flush`] gathers adjacent memory items (and the caller's `tail`)
//! into one writev, or one send(2) when there is a single slice; a head before
//! a sendfile or splice goes out with MSG_MORE, so a small response leaves in
//! one segment; a head before a copied file range shares the writev of the
//! file's first chunk. Partial writes are accounted here only: whatever the
//! socket did not take stays at the front. The bytes sent by each path are
//! returned ([`Flushed`]) for the caller's counters; the chain keeps none.
//!
//! Invariants: a file range whose file ends early is an EIO (the length was
//! announced; only cutting the connection is honest); a pipe segment's pipe
//! must stay open and hold at least the queued bytes until they are sent.

use crate::sys::{self, retry, FdArg};
use bytes::{Buf, Bytes};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

/// Slices gathered into one writev.
const IOV: usize = 64;
/// Largest sendfile count per call.
const SENDFILE_CHUNK: u64 = 0x7fff_f000;

/// How a file range is moved to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileSend {
    /// sendfile(2).
    Sendfile,
    /// pread(2) into the caller's scratch buffer, then writev(2).
    Copy,
}

enum Item {
    Own {
        start: usize,
        end: usize,
    },
    Shared(Bytes),
    Cyclic {
        doubled: &'static [u8],
        at: usize,
        left: u64,
    },
    File {
        file: Rc<dyn AsRawFd>,
        offset: u64,
        end: u64,
        how: FileSend,
    },
    Pipe {
        fd: RawFd,
        left: usize,
    },
}

/// Bytes one [`OutChain::flush`] sent, by path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Own bytes.
    pub own: usize,
    /// Shared buffers and cyclic runs.
    pub shared: usize,
    /// Bytes of the caller's `tail`.
    pub tail: usize,
    /// File bytes sent with sendfile.
    pub sendfile: u64,
    /// File bytes sent with pread + writev.
    pub copied: u64,
    /// Pipe bytes spliced.
    pub spliced: usize,
    /// The socket took less than offered (or EAGAIN): wait until writable.
    pub blocked: bool,
}

impl Flushed {
    /// Every byte sent.
    #[inline]
    pub fn total(&self) -> u64 {
        (self.own + self.shared + self.tail + self.spliced) as u64 + self.sendfile + self.copied
    }
}

/// Own-bytes buffers of one worker, lent to output chains while they have
/// something to send (issue 21: a connection waiting for its next request
/// holds no output buffer either). A buffer that grew past `max_capacity`
/// (a burst of large in-memory answers) is freed when given back, and at
/// most `keep` wait in the pool.
///
/// The pool also keeps the overflow queues of chains that held more than two
/// items (a head and an aggregate's segments): given back with the buffer,
/// lent again with the next one, so neither the queue nor its allocation
/// stays with an idle connection.
pub struct OwnPool {
    idle: Vec<Vec<u8>>,
    idle_bytes: usize,
    #[allow(clippy::vec_box)] // the boxes move into and out of chains as they are
    queues: Vec<Box<VecDeque<Item>>>,
    keep: usize,
    initial: usize,
    max_capacity: usize,
    lent: usize,
}

/// Largest overflow queue (items) a pool keeps.
const QUEUE_KEEP_MAX: usize = 64;

impl std::fmt::Debug for OwnPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (idle, queues) = (self.idle.len(), self.queues.len());
        write!(f, "OwnPool {{ idle: {idle}, queues: {queues}, lent: {} }}", self.lent)
    }
}

impl OwnPool {
    /// A pool whose new buffers start with `initial` bytes of capacity,
    /// keeping at most `keep` idle ones of at most `max_capacity` bytes.
    pub fn new(initial: usize, max_capacity: usize, keep: usize) -> OwnPool {
        OwnPool {
            idle: Vec::new(),
            idle_bytes: 0,
            queues: Vec::new(),
            keep,
            initial,
            max_capacity,
            lent: 0,
        }
    }

    /// Buffers lent to chains now.
    #[inline]
    pub fn lent(&self) -> usize {
        self.lent
    }

    /// Buffers waiting in the pool.
    #[inline]
    pub fn idle(&self) -> usize {
        self.idle.len()
    }

    /// Bytes of the buffers waiting in the pool.
    #[inline]
    pub fn idle_bytes(&self) -> usize {
        self.idle_bytes
    }

    /// Overflow queues waiting in the pool.
    #[inline]
    pub fn idle_queues(&self) -> usize {
        self.queues.len()
    }

    /// Free idle buffers (and queues) beyond `keep`.
    pub fn trim(&mut self, keep: usize) {
        while self.idle.len() > keep {
            if let Some(v) = self.idle.pop() {
                self.idle_bytes -= v.capacity();
            }
        }
        self.queues.truncate(keep);
    }

    /// Halve the idle buffers and queues, never below
    /// [`DECAY_FLOOR`](crate::input::DECAY_FLOOR) (as [`BufPool::decay`](crate::BufPool::decay)).
    /// True when some remain above the floor.
    pub fn decay(&mut self) -> bool {
        let floor = crate::input::DECAY_FLOOR;
        self.trim((self.idle.len() / 2).max(floor));
        self.queues.truncate((self.queues.len() / 2).max(floor));
        self.idle.shrink_to(self.idle.len().max(floor));
        self.above_floor()
    }

    /// More idle buffers or queues than [`decay`](Self::decay) would keep?
    #[inline]
    pub fn above_floor(&self) -> bool {
        let floor = crate::input::DECAY_FLOOR;
        self.idle.len() > floor || self.queues.len() > floor
    }
}

/// The chain's items, in order: two inline (a head and a file range, serve's
/// common case, need no allocation), the rest spilled into a boxed
/// `VecDeque` (boxed so the inline part stays small in every connection).
/// Invariant: `second` is empty only if `rest` is.
#[derive(Default)]
#[allow(clippy::box_collection)] // boxed on purpose: see above
struct Items {
    first: Option<Item>,
    second: Option<Item>,
    rest: Option<Box<VecDeque<Item>>>,
}

impl Items {
    #[inline]
    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    #[inline]
    fn front(&self) -> Option<&Item> {
        self.first.as_ref()
    }

    #[inline]
    fn front_mut(&mut self) -> Option<&mut Item> {
        self.first.as_mut()
    }

    #[inline]
    fn spilled(&self) -> bool {
        self.rest.as_ref().is_some_and(|r| !r.is_empty())
    }

    #[inline]
    fn back_mut(&mut self) -> Option<&mut Item> {
        if self.spilled() {
            self.rest.as_mut().and_then(|r| r.back_mut())
        } else if self.second.is_some() {
            self.second.as_mut()
        } else {
            self.first.as_mut()
        }
    }

    #[inline]
    fn push_back(&mut self, it: Item) {
        if self.first.is_none() {
            self.first = Some(it);
        } else if self.second.is_none() {
            self.second = Some(it);
        } else {
            self.rest.get_or_insert_with(Default::default).push_back(it);
        }
    }

    #[inline]
    fn pop_front(&mut self) {
        self.first = self.second.take();
        self.second = self.rest.as_mut().and_then(|r| r.pop_front());
    }

    fn iter(&self) -> impl Iterator<Item = &Item> {
        let rest = self.rest.as_deref().into_iter().flatten();
        self.first.iter().chain(self.second.iter()).chain(rest)
    }

    fn clear(&mut self) {
        self.first = None;
        self.second = None;
        if let Some(r) = &mut self.rest {
            r.clear();
        }
    }
}

/// One connection's output queue (see the module doc).
///
/// Own bytes appended after the last item are "loose": they need no item
/// until something else is queued behind them, so a role that answers from
/// memory only (most of serve) never touches the item queue.
#[derive(Default)]
pub struct OutChain {
    own: Vec<u8>,
    /// `own[loose..]` is pending, after every item.
    loose: usize,
    items: Items,
    /// Pending bytes of the items.
    len: u64,
    /// Pending bytes of own and shared items.
    mem_len: usize,
    /// File and pipe items queued.
    special: usize,
    /// Bytes sent to the descriptor: by [`flush`](Self::flush) (its `tail`
    /// too) and by the owner past the chain ([`note_sent`](Self::note_sent)).
    sent: u64,
}

impl OutChain {
    /// An empty chain (no allocation).
    pub fn new() -> OutChain {
        OutChain::default()
    }

    /// Bytes waiting to be sent.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len + (self.own.len() - self.loose) as u64
    }

    /// Every byte this connection was given to send: those sent and those
    /// still queued. Its growth between two points is what the connection
    /// sent or queued in between, by any path (an access log's body bytes).
    #[inline]
    pub fn handed(&self) -> u64 {
        self.sent + self.len()
    }

    /// The owner wrote `n` bytes to the descriptor past the chain (a splice
    /// from a pipe it holds, a chain of submissions, a kernel redirect):
    /// counted in [`handed`](Self::handed).
    #[inline]
    pub fn note_sent(&mut self, n: u64) {
        self.sent += n;
    }

    /// Nothing to send?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.own.len() == self.loose
    }

    /// Own and shared bytes waiting to be sent (cyclic runs are not held
    /// per connection and do not count).
    #[inline]
    pub fn memory_len(&self) -> usize {
        self.mem_len + self.own.len() - self.loose
    }

    /// Own bytes appended since the chain was last empty (sent or not).
    #[inline]
    pub fn own_len(&self) -> usize {
        self.own.len()
    }

    /// Capacity of the own-bytes buffer (kept across requests).
    #[inline]
    pub fn own_capacity(&self) -> usize {
        self.own.capacity()
    }

    /// No file range or pipe segment queued?
    #[inline]
    pub fn is_memory_only(&self) -> bool {
        self.special == 0
    }

    /// The own-bytes buffer, to append to (never to rewrite: bytes already in
    /// it may be queued). Whatever is appended is queued after every item.
    #[inline]
    pub fn own_mut(&mut self) -> &mut Vec<u8> {
        &mut self.own
    }

    /// Borrow an own-bytes buffer from `pool` unless one is held: call it
    /// before answering, so appending does not allocate.
    #[inline]
    pub fn lend_own(&mut self, pool: &mut OwnPool) {
        if self.own.capacity() == 0 {
            self.own = match pool.idle.pop() {
                Some(v) => {
                    pool.idle_bytes -= v.capacity();
                    v
                }
                None => Vec::with_capacity(pool.initial),
            };
            pool.lent += 1;
        }
        if self.items.rest.is_none() {
            self.items.rest = pool.queues.pop();
        }
    }

    /// Give the own-bytes buffer back to `pool` if nothing is queued. True
    /// when the chain now holds no buffer.
    #[inline]
    pub fn release_own(&mut self, pool: &mut OwnPool) -> bool {
        if !self.is_empty() {
            return false;
        }
        if self.own.capacity() > 0 {
            let mut v = std::mem::take(&mut self.own);
            self.loose = 0;
            pool.lent = pool.lent.saturating_sub(1);
            if v.capacity() <= pool.max_capacity && pool.idle.len() < pool.keep {
                v.clear();
                pool.idle_bytes += v.capacity();
                pool.idle.push(v);
            }
        }
        if let Some(mut q) = self.items.rest.take() {
            q.clear();
            if q.capacity() <= QUEUE_KEEP_MAX && pool.queues.len() < pool.keep {
                pool.queues.push(q);
            }
        }
        true
    }

    /// Append a copy of `data`.
    #[inline]
    pub fn push_copy(&mut self, data: &[u8]) {
        self.own.extend_from_slice(data);
    }

    /// Turn the loose own bytes into an item (merged with a preceding own
    /// item they directly follow), before something else is queued.
    fn seal(&mut self) {
        let (start, end) = (self.loose, self.own.len());
        if end == start {
            return;
        }
        self.loose = end;
        self.len += (end - start) as u64;
        self.mem_len += end - start;
        if let Some(Item::Own { end: e, .. }) = self.items.back_mut() {
            if *e == start {
                *e = end;
                return;
            }
        }
        self.items.push_back(Item::Own { start, end });
    }

    /// Append a shared buffer (no copy).
    pub fn push_shared(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.seal();
        self.len += b.len() as u64;
        self.mem_len += b.len();
        self.items.push_back(Item::Shared(b));
    }

    /// Append an aggregate's segments (reference counts, no copy).
    pub fn push_aggregate(&mut self, a: &weft_buf::Aggregate) {
        for s in a.segments() {
            self.push_shared(s.clone());
        }
    }

    /// Append bytes `[start, end)` of an aggregate (reference counts, no
    /// copy, and no aggregate built for the range: this is a cache hit's
    /// per-response path).
    pub fn push_range(&mut self, a: &weft_buf::Aggregate, start: usize, end: usize) {
        for s in a.range(start, end) {
            self.push_shared(s);
        }
    }

    /// Append `len` bytes of a periodic pattern starting `at` bytes into it;
    /// `doubled` holds the period twice in a row (its length is twice the
    /// period), so any run up to a period is one slice.
    pub fn push_cyclic(&mut self, doubled: &'static [u8], at: usize, len: u64) {
        if len == 0 {
            return;
        }
        debug_assert!(at < doubled.len() / 2);
        self.seal();
        self.len += len;
        self.items.push_back(Item::Cyclic { doubled, at, left: len });
    }

    /// Append bytes `offset..end` of `file`.
    pub fn push_file(&mut self, file: Rc<dyn AsRawFd>, offset: u64, end: u64, how: FileSend) {
        if end <= offset {
            return;
        }
        self.seal();
        self.len += end - offset;
        self.special += 1;
        self.items.push_back(Item::File { file, offset, end, how });
    }

    /// Append `len` bytes waiting in the pipe whose read end is `fd` (merged
    /// with a preceding segment of the same pipe). The caller keeps the pipe
    /// open until they are sent.
    pub fn push_pipe(&mut self, fd: RawFd, len: usize) {
        if len == 0 {
            return;
        }
        self.seal();
        self.len += len as u64;
        if let Some(Item::Pipe { fd: f, left }) = self.items.back_mut() {
            if *f == fd {
                *left += len;
                return;
            }
        }
        self.special += 1;
        self.items.push_back(Item::Pipe { fd, left: len });
    }

    /// Everything queued, when it is own bytes only (no item: a head and the
    /// body bytes that came with it): a caller that moves them some other
    /// way (the relay writes them into its pipe) then calls [`clear`](Self::clear).
    pub fn pending_own(&self) -> Option<&[u8]> {
        self.items.is_empty().then(|| &self.own[self.loose..])
    }

    /// Drop everything queued (the peer is gone).
    pub fn clear(&mut self) {
        self.items.clear();
        self.own.clear();
        self.loose = 0;
        self.len = 0;
        self.mem_len = 0;
        self.special = 0;
    }

    /// Send as much as the socket `fd` takes: the queued items in order, then
    /// `tail` (bytes the caller keeps, e.g. a body being relayed). `scratch`
    /// is the buffer [`FileSend::Copy`] ranges are read through (it must not
    /// be empty when such a range is queued). Returns the bytes sent by each
    /// path; EAGAIN or a short write sets [`Flushed::blocked`].
    pub fn flush(&mut self, fd: impl FdArg, tail: &[u8], scratch: &mut [u8]) -> io::Result<Flushed> {
        let mut f = Flushed::default();
        let r = self.flush_into(fd.raw_for_call(), tail, scratch, &mut f);
        self.sent += f.total();
        r.map(|()| f)
    }

    /// [`flush`](Self::flush), counting into `f` as it goes (an error keeps
    /// what was sent before it).
    fn flush_into(&mut self, fd: RawFd, tail: &[u8], scratch: &mut [u8], f: &mut Flushed) -> io::Result<()> {
        loop {
            let r = match self.items.front() {
                None if f.tail == tail.len() && self.own.len() == self.loose => {
                    self.clear();
                    return Ok(());
                }
                None | Some(Item::Own { .. } | Item::Shared(_) | Item::Cyclic { .. }) => {
                    self.send_memory(fd, &tail[f.tail..], scratch, f)
                }
                Some(Item::File {
                    how: FileSend::Sendfile,
                    ..
                }) => self.send_file(fd, f),
                Some(Item::File {
                    how: FileSend::Copy, ..
                }) => self.send_memory(fd, &[], scratch, f),
                Some(Item::Pipe { .. }) => self.send_pipe(fd, f),
            };
            match r {
                Ok(true) => {}
                Ok(false) => {
                    f.blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    f.blocked = true;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One send/writev of the leading memory items; when they are all the
    /// chain holds, plus the loose own bytes and `tail`; when a copied file
    /// range follows them, plus its next chunk. Ok(false): the socket took
    /// less than offered.
    fn send_memory(&mut self, fd: RawFd, tail: &[u8], scratch: &mut [u8], f: &mut Flushed) -> io::Result<bool> {
        let mut iov = [IoSlice::new(&[]); IOV];
        let mut n = 0;
        let mut from_mem = 0usize;
        // The first item not gathered, when it is a file or a pipe.
        let mut next: Option<&Item> = None;
        // Every item gathered (whole): the loose bytes and the tail may follow.
        let mut complete = true;
        for it in self.items.iter() {
            let s: &[u8] = match it {
                Item::Own { start, end } => &self.own[*start..*end],
                Item::Shared(b) => b,
                Item::Cyclic { doubled, at, .. } => &doubled[*at..*at + cyclic_run(it)],
                Item::File { .. } | Item::Pipe { .. } => {
                    next = Some(it);
                    complete = false;
                    break;
                }
            };
            if n == IOV - 2 {
                // Two slots stay free for the loose bytes and a tail or chunk.
                complete = false;
                break;
            }
            iov[n] = IoSlice::new(s);
            n += 1;
            from_mem += s.len();
            if let Item::Cyclic { left, .. } = it {
                if (s.len() as u64) < *left {
                    // A run longer than the period continues in the next
                    // call: nothing may follow it in this one.
                    complete = false;
                    break;
                }
            }
        }
        let mut extra = 0usize;
        let mut more = false;
        let mut copy_file = false;
        if complete {
            if self.loose < self.own.len() {
                iov[n] = IoSlice::new(&self.own[self.loose..]);
                n += 1;
                from_mem += self.own.len() - self.loose;
            }
            if !tail.is_empty() {
                iov[n] = IoSlice::new(tail);
                n += 1;
                extra = tail.len();
            }
        } else if let Some(Item::File {
            file,
            offset,
            end,
            how: FileSend::Copy,
        }) = next
        {
            if scratch.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "no scratch buffer for a copied file",
                ));
            }
            let want = (end - offset).min(scratch.len() as u64) as usize;
            let fdf = file.as_raw_fd();
            let got = retry(|| sys::pread(fdf, &mut scratch[..want], *offset))?;
            if got == 0 {
                return Err(shrunk());
            }
            iov[n] = IoSlice::new(&scratch[..got]);
            n += 1;
            extra = got;
            copy_file = true;
        } else {
            more = next.is_some();
        }
        let offered = from_mem + extra;
        let wrote = if n == 1 && !copy_file {
            retry(|| sys::send(fd, &iov[0], more))?
        } else {
            retry(|| sys::writev(fd, &iov[..n]))?
        };
        let mem = wrote.min(from_mem);
        self.advance_memory(mem, f);
        let rest = wrote - mem;
        if copy_file {
            // Bytes read but not taken are read again next time (pread at
            // the new offset): cheaper than a per-connection copy buffer
            // for the rare short write.
            self.advance_file(rest as u64);
            f.copied += rest as u64;
        } else {
            f.tail += rest;
        }
        Ok(wrote == offered)
    }

    /// One sendfile of the front file range. Ok(false): short.
    fn send_file(&mut self, fd: RawFd, f: &mut Flushed) -> io::Result<bool> {
        let Some(Item::File { file, offset, end, .. }) = self.items.front() else {
            return Ok(true);
        };
        let want = (end - offset).min(SENDFILE_CHUNK) as usize;
        let fdf = file.as_raw_fd();
        let mut off = *offset;
        let n = retry(|| sys::sendfile(fd, fdf, &mut off, want))?;
        if n == 0 {
            return Err(shrunk());
        }
        self.advance_file(n as u64);
        f.sendfile += n as u64;
        Ok(n == want)
    }

    /// One splice of the front pipe segment. Ok(false): short.
    fn send_pipe(&mut self, fd: RawFd, f: &mut Flushed) -> io::Result<bool> {
        let Some(Item::Pipe { fd: pfd, left }) = self.items.front() else {
            return Ok(true);
        };
        let (pfd, want) = (*pfd, *left);
        // No SPLICE_F_MORE: it would hold the last partial segment back until
        // the next splice (the proxy measured more pacing interrupts with it).
        let n = retry(|| sys::splice(pfd, fd, want, false))?;
        if n == 0 {
            return Err(sys::Errno::BrokenPipe.into());
        }
        self.len -= n as u64;
        if n == want {
            self.items.pop_front();
            self.special -= 1;
        } else if let Some(Item::Pipe { left, .. }) = self.items.front_mut() {
            *left -= n;
        }
        f.spliced += n;
        Ok(n == want)
    }

    /// `n` bytes of the leading memory items (then of the loose own bytes)
    /// were sent.
    fn advance_memory(&mut self, mut n: usize, f: &mut Flushed) {
        while n > 0 {
            let Some(front) = self.items.front_mut() else { break };
            let (take, done) = match front {
                Item::Own { start, end } => {
                    let take = n.min(*end - *start);
                    *start += take;
                    self.mem_len -= take;
                    f.own += take;
                    (take, start == end)
                }
                Item::Shared(b) => {
                    let take = n.min(b.len());
                    b.advance(take);
                    self.mem_len -= take;
                    f.shared += take;
                    (take, b.is_empty())
                }
                Item::Cyclic { doubled, at, left } => {
                    let take = (n as u64).min(*left) as usize;
                    let period = doubled.len() / 2;
                    *at = (*at + take) % period;
                    *left -= take as u64;
                    f.shared += take;
                    (take, *left == 0)
                }
                Item::File { .. } | Item::Pipe { .. } => break,
            };
            self.len -= take as u64;
            n -= take;
            if done {
                self.items.pop_front();
            }
        }
        if n > 0 && self.items.is_empty() {
            let take = n.min(self.own.len() - self.loose);
            self.loose += take;
            f.own += take;
        }
        if self.items.is_empty() && self.loose == self.own.len() {
            self.own.clear();
            self.loose = 0;
        }
    }

    /// `n` bytes of the front file range were sent.
    fn advance_file(&mut self, n: u64) {
        self.len -= n;
        if let Some(Item::File { offset, end, .. }) = self.items.front_mut() {
            *offset += n;
            if *offset >= *end {
                self.items.pop_front();
                self.special -= 1;
            }
        }
    }
}

/// Bytes of a cyclic item one slice can carry (at most one period).
#[inline]
fn cyclic_run(it: &Item) -> usize {
    match it {
        Item::Cyclic { doubled, left, .. } => (*left).min((doubled.len() / 2) as u64) as usize,
        _ => 0,
    }
}

fn shrunk() -> io::Error {
    // The file ended before the length already announced.
    sys::Errno::Io.into()
}

#[cfg(test)]
mod tests;
