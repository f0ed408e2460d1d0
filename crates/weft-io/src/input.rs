//! A connection's input bytes, with storage lent from a per-worker pool.
//!
//! Every role (serve, the proxy's client and upstream sides, the origin
//! emulator) reads a socket into an [`InputBuf`]: unparsed bytes live in
//! `storage[start..end]`, consumed bytes are compacted away only when room is
//! needed, and the storage doubles (up to the caller's bound, e.g. the largest
//! request head) only when it is full of one incomplete message.
//!
//! An empty buffer holds no storage. [`InputBuf::fill`] borrows a buffer from
//! the worker's [`BufPool`] on the first read and gives it back at once when the
//! read brings nothing (EAGAIN, end of file, error); the caller gives it back
//! with [`InputBuf::release`] once it has consumed every byte. An idle
//! keep-alive connection therefore costs the three words of the struct, not a
//! buffer (nginx's `large_client_header_buffers` are lent the same way; issue
//! 21). Pooled buffers are not zeroed again, so lending costs a `Vec` pop.

use crate::sys::{self, FdArg};
use std::io;
use std::time::Duration;

/// How long a lingering close waits for the peer's end of stream.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// Bytes a lingering close reads (per wake-up) before it gives up and closes.
pub const LINGER_MAX: usize = 256 * 1024;

/// What [`InputBuf::linger`] leaves the connection to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Linger {
    /// The socket ran dry: wait for more (or for the linger deadline).
    Wait,
    /// End of stream, an error, or [`LINGER_MAX`] bytes thrown away: close now.
    Close,
}

/// Whether a connection that closes after its last response must close
/// lingering (shut down its side, then read and drop what the peer still
/// sends, [`InputBuf::linger`]) rather than at once: `close()` with unread
/// bytes in the kernel makes it send a reset, which discards whatever the
/// socket has not transmitted yet, the tail of the response the peer is
/// reading. `eof`: the peer has finished sending (nothing can be unread);
/// `seen_more`: the role's own flags say more may come (bytes buffered, a
/// socket that may hold more, reads unwatched while a response waited).
///
/// Those flags lag the socket (a relay that yielded its budget with no
/// interest registered, a readiness report still waiting in the next poll
/// while another event ends the response), so when they see nothing one
/// `FIONREAD` asks the kernel; a failed call lingers too. A clean
/// request-response-close exchange finds 0 and closes at once (nginx's
/// heuristic), at the price of that one call per such close.
pub fn must_linger(fd: impl FdArg, eof: bool, seen_more: bool) -> bool {
    !eof && (seen_more || !matches!(sys::bytes_readable(fd), Ok(0)))
}

/// What one [`InputBuf::fill`] brought.
#[derive(Debug)]
pub enum Fill {
    /// `n` new bytes (`n > 0`).
    Data(usize),
    /// The peer closed its side (read returned 0).
    Eof,
    /// Nothing to read now (EAGAIN).
    WouldBlock,
    /// The buffer holds `max` unconsumed bytes and may not grow.
    Full,
    /// Any other read error (ECONNRESET and the like).
    Reset(io::Error),
}

/// Input buffers of one worker, lent to connections while they hold bytes.
///
/// Buffers of the pool's size are kept for reuse, at most `keep` of them.
/// A buffer that grew past the pool's size (a long head, the proxy's 128 KiB
/// chunked-relay buffer) is kept apart, at most `keep_large` of them, and
/// lent again to the next buffer that must grow, so a role that grows a
/// buffer for every response does not allocate one per response, and a
/// connection need not keep its grown buffer while idle. [`BufPool::decay`]
/// halves the idle buffers (down to a floor) so a burst does not pin its
/// peak. The counters make the memory a worker lends visible (admin,
/// `--stats-on-exit`).
#[derive(Debug)]
pub struct BufPool {
    size: usize,
    keep: usize,
    idle: Vec<Vec<u8>>,
    large: Vec<Vec<u8>>,
    keep_large: usize,
    large_bytes: usize,
    lent: usize,
    lent_bytes: usize,
}

/// Grown buffers a pool keeps unless told otherwise ([`BufPool::keep_large`]).
const KEEP_LARGE: usize = 4;
/// Idle buffers [`BufPool::decay`] never goes below.
pub const DECAY_FLOOR: usize = 16;

impl BufPool {
    /// A pool of `size`-byte buffers keeping at most `keep` idle ones.
    pub fn new(size: usize, keep: usize) -> BufPool {
        BufPool {
            size: size.max(1),
            keep,
            idle: Vec::new(),
            large: Vec::new(),
            keep_large: KEEP_LARGE,
            large_bytes: 0,
            lent: 0,
            lent_bytes: 0,
        }
    }

    /// Keep at most `n` grown buffers for reuse (default 4).
    pub fn keep_large(mut self, n: usize) -> BufPool {
        self.keep_large = n;
        self
    }

    /// Buffers waiting in the pool, grown ones included.
    #[inline]
    pub fn idle_total(&self) -> usize {
        self.idle.len() + self.large.len()
    }

    /// Bytes of the buffers waiting in the pool.
    #[inline]
    pub fn idle_bytes(&self) -> usize {
        self.idle.len() * self.size + self.large_bytes
    }

    /// Halve the idle buffers, never below [`DECAY_FLOOR`] plain ones and
    /// one grown one: called about once a second, a burst's buffers are
    /// freed within seconds while a steady load keeps what it reuses.
    /// True when buffers remain above the floor (call again later).
    pub fn decay(&mut self) -> bool {
        let keep = (self.idle.len() / 2).max(DECAY_FLOOR);
        self.idle.truncate(keep);
        self.idle.shrink_to(keep);
        if self.large.len() > 1 {
            self.large.truncate(self.large.len() / 2);
            self.large_bytes = self.large.iter().map(Vec::len).sum();
        }
        self.above_floor()
    }

    /// More idle buffers than [`decay`](Self::decay) would keep?
    #[inline]
    pub fn above_floor(&self) -> bool {
        self.idle.len() > DECAY_FLOOR || self.large.len() > 1
    }

    /// Size of a fresh buffer.
    #[inline]
    pub fn buf_size(&self) -> usize {
        self.size
    }

    /// Buffers lent out now.
    #[inline]
    pub fn lent(&self) -> usize {
        self.lent
    }

    /// Bytes of the buffers lent out now (grown buffers counted at their size).
    #[inline]
    pub fn lent_bytes(&self) -> usize {
        self.lent_bytes
    }

    /// Buffers waiting in the pool.
    #[inline]
    pub fn idle(&self) -> usize {
        self.idle.len()
    }

    /// Free idle buffers beyond `keep` (after a burst of busy connections).
    pub fn trim(&mut self, keep: usize) {
        self.idle.truncate(keep);
        self.large.truncate(keep.min(self.keep_large));
        self.large_bytes = self.large.iter().map(Vec::len).sum();
    }

    /// A kept grown buffer of `size..=max` bytes, if any (never more than
    /// the caller's bound: it is what limits a head's size).
    fn take_large(&mut self, size: usize, max: usize) -> Option<Vec<u8>> {
        let i = self.large.iter().position(|v| v.len() >= size && v.len() <= max)?;
        let v = self.large.swap_remove(i);
        self.large_bytes -= v.len();
        Some(v)
    }

    #[inline]
    fn lend(&mut self) -> Vec<u8> {
        let v = self.idle.pop().unwrap_or_else(|| vec![0u8; self.size]);
        self.lent += 1;
        self.lent_bytes += v.len();
        v
    }

    #[inline]
    fn grew(&mut self, from: usize, to: usize) {
        self.lent_bytes = self.lent_bytes + to - from;
    }

    #[inline]
    fn give_back(&mut self, v: Vec<u8>) {
        self.lent = self.lent.saturating_sub(1);
        self.lent_bytes = self.lent_bytes.saturating_sub(v.len());
        if v.len() == self.size {
            if self.idle.len() < self.keep {
                self.idle.push(v);
            }
        } else if v.len() > self.size && self.large.len() < self.keep_large {
            self.large_bytes += v.len();
            self.large.push(v);
        }
    }
}

/// A connection's unconsumed input (see the module doc).
#[derive(Debug, Default)]
pub struct InputBuf {
    /// Lent storage; `len()` is its usable size (zero: none held).
    storage: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuf {
    /// An empty buffer holding no storage (no allocation).
    pub const fn new() -> InputBuf {
        InputBuf {
            storage: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The unconsumed bytes.
    #[inline]
    pub fn pending(&self) -> &[u8] {
        &self.storage[self.start..self.end]
    }

    /// Number of unconsumed bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// No unconsumed bytes?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Is storage lent to this buffer now?
    #[inline]
    pub fn has_storage(&self) -> bool {
        !self.storage.is_empty()
    }

    /// Size of the storage held (0 when none).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.storage.len()
    }

    /// Room after the unconsumed bytes, without compacting or growing. After
    /// a [`Fill::Data`], 0 means the read filled every byte offered, so the
    /// socket may hold more.
    #[inline]
    pub fn spare_len(&self) -> usize {
        self.storage.len() - self.end
    }

    /// After a [`Fill::Data`]: may the socket still hold unread input? This
    /// is the one rule of user-level readiness tracking for stream sockets,
    /// used by every role that reads requests (serve, the proxy's client
    /// side, `weft origin`; the proxy reads a response head to EAGAIN, since
    /// a close-delimited body ends on the FIN that may come with it). A read
    /// that filled every byte offered may have left more behind. A short read
    /// took all the socket held (its receive queue and backlog), so any later
    /// arrival raises a new event, level- or edge-triggered, and reading again
    /// now would only find EAGAIN (one wasted call per keep-alive request).
    /// The one arrival that raises no new event is a FIN that came with the
    /// last data: once the backend has reported it (`fin_in`, from
    /// [`Event::read_closed`](crate::Event::read_closed)), a short read is not
    /// taken as drained, since the next read returns the end of file that an
    /// edge-triggered backend will not report again.
    #[inline]
    pub fn may_hold_more(&self, fin_in: bool) -> bool {
        self.spare_len() == 0 || fin_in
    }

    /// Mark the first `n` unconsumed bytes as used.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Drop every unconsumed byte (keeps the storage).
    #[inline]
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Make at least `want` bytes of room after the unconsumed ones if the
    /// bound allows: borrow storage from `pool` if none is held, compact the
    /// consumed prefix away, then double (up to `max` bytes in all). Returns
    /// the room now available, which is below `want` only when `max` stops
    /// the growth (0: full).
    pub fn reserve(&mut self, want: usize, max: usize, pool: &mut BufPool) -> usize {
        if self.storage.is_empty() {
            self.storage = pool.lend();
            self.start = 0;
            self.end = 0;
        }
        if self.spare_len() >= want {
            return self.spare_len();
        }
        if self.start > 0 {
            self.storage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.spare_len() >= want {
                return self.spare_len();
            }
        }
        let old = self.storage.len();
        let mut size = old;
        while size - self.end < want && size < max {
            size = (size * 2).min(max);
        }
        if size > old {
            if let Some(mut big) = pool.take_large(size, max.max(size)) {
                // A grown buffer given back earlier: move the pending bytes
                // (the consumed prefix is compacted away, start is 0).
                big[..self.end].copy_from_slice(&self.storage[..self.end]);
                let small = std::mem::replace(&mut self.storage, big);
                pool.grew(old, self.storage.len());
                pool.lent_bytes += small.len();
                pool.lent += 1;
                pool.give_back(small);
            } else {
                self.storage.resize(size, 0);
                pool.grew(old, size);
            }
        }
        self.spare_len()
    }

    /// The room after the unconsumed bytes, for a caller that reads another
    /// way (after [`reserve`](Self::reserve)); then [`commit`](Self::commit).
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.end..]
    }

    /// `n` bytes were written into [`spare_mut`](Self::spare_mut).
    #[inline]
    pub fn commit(&mut self, n: usize) {
        debug_assert!(n <= self.spare_len());
        self.end += n.min(self.spare_len());
    }

    /// One read(2) from `fd` (EINTR retried), making room first as
    /// [`reserve`](Self::reserve) does with a bound of `max` bytes. When the
    /// read brings nothing and no bytes are pending, the storage goes back to
    /// the pool before returning.
    pub fn fill(&mut self, fd: impl FdArg, max: usize, pool: &mut BufPool) -> Fill {
        if self.reserve(1, max, pool) == 0 {
            return Fill::Full;
        }
        let fd = fd.raw_for_call();
        let r = sys::retry(|| sys::read(fd, self.spare_mut()));
        let fill = match r {
            Ok(0) => Fill::Eof,
            Ok(n) => {
                self.end += n;
                return Fill::Data(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Fill::WouldBlock,
            Err(e) => Fill::Reset(e),
        };
        self.release(pool);
        fill
    }

    /// Give the storage back to `pool` if no bytes are pending. True when the
    /// buffer now holds no storage.
    #[inline]
    pub fn release(&mut self, pool: &mut BufPool) -> bool {
        if self.start != self.end {
            return false;
        }
        if !self.storage.is_empty() {
            pool.give_back(std::mem::take(&mut self.storage));
            self.start = 0;
            self.end = 0;
        }
        true
    }

    /// Drop any pending bytes and give the storage back (the connection is
    /// closing).
    pub fn discard(&mut self, pool: &mut BufPool) {
        self.clear();
        self.release(pool);
    }

    /// One step of a lingering close (nginx's `lingering_close`): after our
    /// side is shut down (`sys::shutdown_write`), read and throw away what the
    /// peer still sends until it closes. Closing a socket with unread bytes
    /// makes the kernel answer with RST, and a RST discards whatever of our
    /// last response the peer has not read yet: a request body we never read,
    /// or pipelined requests behind the last answered one, would cut that
    /// response. Pending bytes are dropped; the storage never grows (one pool
    /// buffer is enough to throw bytes away) and goes back when the socket
    /// runs dry. The caller closes at [`LINGER_TIME`] at the latest.
    pub fn linger(&mut self, fd: impl FdArg + Copy, pool: &mut BufPool) -> Linger {
        self.clear();
        let mut total = 0usize;
        loop {
            match self.fill(fd, pool.buf_size(), pool) {
                Fill::Data(n) => {
                    self.clear();
                    total += n;
                    if total > LINGER_MAX {
                        return Linger::Close;
                    }
                }
                Fill::WouldBlock => {
                    self.release(pool);
                    return Linger::Wait;
                }
                Fill::Eof | Fill::Full | Fill::Reset(_) => return Linger::Close,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (sys::Fd, sys::Fd) {
        sys::pipe().unwrap()
    }

    /// A pipe's read and write ends, a pool of `buf`-byte buffers (four
    /// kept) and an empty input buffer: where each test starts.
    fn reader(buf: usize) -> (sys::Fd, sys::Fd, BufPool, InputBuf) {
        let (r, w) = pipe();
        (r, w, BufPool::new(buf, 4), InputBuf::new())
    }

    #[test]
    fn must_linger_asks_the_kernel_when_the_flags_see_nothing() {
        let (r, w) = pipe();
        assert!(!must_linger(&r, false, false), "nothing waiting: close at once");
        assert!(must_linger(&r, false, true), "the flags say more may come");
        sys::write(w.raw(), b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(
            must_linger(&r, false, false),
            "bytes in the kernel the flags have not seen"
        );
        assert!(!must_linger(&r, true, true), "the peer has finished sending");
    }

    #[test]
    fn linger_throws_bytes_away_until_the_end_of_stream() {
        let (r, w, mut pool, mut b) = reader(16);
        sys::write(w.raw(), b"a pipelined request the answer will never see").unwrap();
        b.fill(&r, 8, &mut pool);
        assert_eq!(b.linger(&r, &mut pool), Linger::Wait, "dry: wait for more");
        assert!(b.is_empty() && !b.has_storage(), "nothing kept while waiting");
        sys::write(w.raw(), &[7u8; 100]).unwrap();
        drop(w);
        assert_eq!(b.linger(&r, &mut pool), Linger::Close, "the end of stream closes");
        assert_eq!(pool.lent(), 0);
    }

    #[test]
    fn linger_gives_up_past_its_cap() {
        // More than the cap waiting at one wake-up (the cap is per wake-up;
        // LINGER_TIME bounds the rest). A pipe made large enough holds it all
        // at once: a writer racing the reader made this a matter of timing.
        let (r, w, mut pool, mut b) = reader(4096);
        sys::set_pipe_size(&w, 1 << 20).unwrap();
        let chunk = vec![1u8; 64 * 1024];
        let mut queued = 0;
        while queued <= LINGER_MAX {
            queued += sys::write(w.raw(), &chunk).unwrap();
        }
        assert_eq!(
            b.linger(&r, &mut pool),
            Linger::Close,
            "a peer that never stops is cut off"
        );
        // Below the cap, the socket running dry means: wait for more.
        let (r, w, mut pool, mut b) = reader(4096);
        sys::write(w.raw(), &chunk).unwrap();
        assert_eq!(b.linger(&r, &mut pool), Linger::Wait);
    }

    #[test]
    fn empty_buffer_holds_no_storage_until_bytes_arrive() {
        let (r, w, mut pool, mut b) = reader(16);
        assert!(!b.has_storage());
        assert!(matches!(b.fill(&r, 64, &mut pool), Fill::WouldBlock));
        assert!(!b.has_storage(), "an empty read gives the storage back");
        assert_eq!((pool.lent(), pool.idle()), (0, 1));
        sys::write(w.raw(), b"GET / HTTP/1.1\r\n").unwrap();
        assert!(matches!(b.fill(&r, 64, &mut pool), Fill::Data(16)));
        assert_eq!(b.pending(), b"GET / HTTP/1.1\r\n");
        assert_eq!(b.spare_len(), 0, "the read filled the buffer");
        assert_eq!((pool.lent(), pool.lent_bytes(), pool.idle()), (1, 16, 0));
        assert!(!b.release(&mut pool), "bytes pending: kept");
        b.consume(16);
        assert!(b.is_empty());
        assert!(b.release(&mut pool));
        assert!(!b.has_storage());
        assert_eq!((pool.lent(), pool.idle()), (0, 1));
    }

    #[test]
    fn compacts_then_doubles_up_to_the_bound_then_full() {
        let (r, w, mut pool, mut b) = reader(8);
        sys::write(w.raw(), b"abcdefgh").unwrap();
        assert!(matches!(b.fill(&r, 20, &mut pool), Fill::Data(8)));
        b.consume(6);
        sys::write(w.raw(), b"ijklmn").unwrap();
        // Compaction makes room for six bytes without growing.
        assert!(matches!(b.fill(&r, 20, &mut pool), Fill::Data(6)));
        assert_eq!(b.pending(), b"ghijklmn");
        assert_eq!(b.capacity(), 8);
        sys::write(w.raw(), &[b'x'; 30]).unwrap();
        assert!(matches!(b.fill(&r, 20, &mut pool), Fill::Data(8)));
        assert_eq!(b.capacity(), 16);
        assert_eq!(pool.lent_bytes(), 16);
        assert!(matches!(b.fill(&r, 20, &mut pool), Fill::Data(4)));
        assert_eq!(b.capacity(), 20, "doubling stops at the bound");
        assert!(matches!(b.fill(&r, 20, &mut pool), Fill::Full));
        assert_eq!(b.len(), 20);
        // A grown buffer is freed, not pooled.
        b.discard(&mut pool);
        assert_eq!((pool.lent(), pool.lent_bytes(), pool.idle()), (0, 0, 0));
    }

    #[test]
    fn end_of_file_and_errors_give_the_storage_back() {
        let (r, w, mut pool, mut b) = reader(8);
        sys::write(w.raw(), b"ab").unwrap();
        drop(w);
        assert!(matches!(b.fill(&r, 64, &mut pool), Fill::Data(2)));
        assert!(b.spare_len() > 0, "a short read");
        assert!(matches!(b.fill(&r, 64, &mut pool), Fill::Eof));
        assert!(b.has_storage(), "pending bytes keep their storage");
        b.consume(2);
        assert!(matches!(b.fill(&r, 64, &mut pool), Fill::Eof));
        assert!(!b.has_storage());
        let (_r2, w2) = pipe();
        // Reading a pipe's write end fails with EBADF.
        assert!(matches!(b.fill(&w2, 64, &mut pool), Fill::Reset(_)));
        assert!(!b.has_storage());
        assert_eq!(pool.lent(), 0);
    }

    #[test]
    fn a_short_read_means_drained_unless_the_fin_is_in() {
        let (r, w, mut pool, mut b) = reader(8);
        sys::write(w.raw(), b"abcdefghij").unwrap();
        // 8 of 10 bytes: the read filled every byte offered, more may wait.
        assert!(matches!(b.fill(&r, 8, &mut pool), Fill::Data(8)));
        assert!(b.may_hold_more(false));
        b.consume(8);
        // 2 bytes into 8 of room: drained, a new arrival is a new event...
        assert!(matches!(b.fill(&r, 8, &mut pool), Fill::Data(2)));
        assert!(!b.may_hold_more(false));
        // ...unless the peer's FIN was reported: then one more read is owed,
        // and it returns the end of file.
        assert!(b.may_hold_more(true));
        drop(w);
        b.consume(2);
        assert!(matches!(b.fill(&r, 8, &mut pool), Fill::Eof));
    }

    #[test]
    fn reserve_and_commit_for_other_readers() {
        let mut pool = BufPool::new(4, 1);
        let mut b = InputBuf::new();
        assert_eq!(b.reserve(10, 64, &mut pool), 16, "4 → 8 → 16");
        b.spare_mut()[..3].copy_from_slice(b"xyz");
        b.commit(3);
        assert_eq!(b.pending(), b"xyz");
        assert_eq!(b.reserve(100, 8, &mut pool), 13, "never shrinks below what it holds");
        let mut c = InputBuf::new();
        assert_eq!(c.reserve(1, 64, &mut pool), 4);
        c.commit(4);
        assert_eq!(c.reserve(1, 4, &mut pool), 0, "full at the bound");
    }

    #[test]
    fn grown_buffers_are_lent_again_within_the_bound() {
        let mut pool = BufPool::new(4, 4);
        let mut b = InputBuf::new();
        assert_eq!(b.reserve(30, 64, &mut pool), 32);
        b.commit(2);
        b.consume(2);
        assert!(b.release(&mut pool));
        assert_eq!((pool.lent(), pool.idle_total(), pool.idle_bytes()), (0, 1, 32));
        // The next growth takes the kept 32-byte buffer, pending bytes moved.
        let mut c = InputBuf::new();
        c.reserve(1, 64, &mut pool);
        c.spare_mut()[..4].copy_from_slice(b"abcd");
        c.commit(4);
        assert_eq!(c.reserve(20, 64, &mut pool), 28);
        assert_eq!(c.pending(), b"abcd");
        assert_eq!(
            (pool.lent(), pool.lent_bytes(), pool.idle(), pool.idle_bytes()),
            (1, 32, 1, 4)
        );
        // A bound below the kept buffer's size leaves it alone.
        c.discard(&mut pool);
        let mut d = InputBuf::new();
        d.reserve(1, 16, &mut pool);
        assert_eq!(d.reserve(8, 16, &mut pool), 8);
        assert_eq!(d.capacity(), 8);
        d.discard(&mut pool);
        assert_eq!((pool.lent(), pool.lent_bytes()), (0, 0));
        for _ in 0..40 {
            pool.idle.push(vec![0; 4]);
        }
        assert!(pool.decay());
        assert_eq!(pool.idle(), 20);
        while pool.decay() {}
        assert_eq!(pool.idle(), DECAY_FLOOR);
    }

    #[test]
    fn pool_keeps_at_most_its_bound_and_trims() {
        let mut pool = BufPool::new(4, 2);
        let mut bufs: Vec<InputBuf> = (0..4).map(|_| InputBuf::new()).collect();
        for b in &mut bufs {
            b.reserve(1, 4, &mut pool);
        }
        assert_eq!(pool.lent(), 4);
        for b in &mut bufs {
            assert!(b.release(&mut pool));
        }
        assert_eq!((pool.lent(), pool.idle()), (0, 2));
        pool.trim(1);
        assert_eq!(pool.idle(), 1);
    }
}
