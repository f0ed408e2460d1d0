//! Large file bodies sent chunk by chunk from mappings (thesis 004 §4.4.4):
//! residency tested per chunk while the body is sent.
//!
//! A body longer than one chunk (`--send auto`, no object cache) is not
//! queued whole: the answer queues its head and starts a *feed* (the file,
//! the next offset, the end). Before the connection's output is flushed, and
//! again whenever it has drained, [`feed`] queues the next chunk: the
//! worker's [`FileCache`](crate::files::FileCache) maps it (or finds it
//! mapped, under the cache's one LRU byte budget), AMPED tests its residency
//! (mincore on the mapping, a positive answer trusted for
//! [`RESIDENT_TRUST`]), and a miss parks the connection on a helper's
//! `DiskJob::Load` of that chunk alone; the helper's answer resumes the feed.
//! So a 1 GiB file of which a client reads the start costs one chunk of
//! address space, and a cold chunk in the middle of a hot file stalls only
//! its own connection, never the loop.
//!
//! Each chunk goes out with `writev` from the mapping (the page cache's
//! pages, no copy in weft; the response's `Bytes` keeps the chunk active so
//! the budget never unmaps it under a send). Before each chunk the file is
//! checked (inode, size, mtime): a changed file aborts the response (a
//! response is a snapshot, §2.2.5); the last chunk goes through the same
//! resumed-flush check as a sendfile body.
//!
//! With `--zero-copy-send`, a chunk is first offered to the socket with
//! `MSG_ZEROCOPY` when nothing else is queued ahead of it: the kernel pins the
//! mapped pages instead of copying them, and the feed holds each such slice
//! (its `Bytes`, so its mapping) until the socket's error queue says the
//! kernel released it ([`reap`], run whenever the connection is driven: a
//! completion raises EPOLLERR). What the socket does not take goes the usual
//! way. A completion that reports a copy (loopback always does) turns the
//! switch off for that connection, as a zero-copy send that copies costs more
//! than a plain one.
//!
//! [`RESIDENT_TRUST`]: crate::worker::amped::RESIDENT_TRUST

use crate::config::{ResidencyTest, SendMode};
use crate::conn::{Conn, FEEDING, ZC_HELD};
use crate::files::CachedFile;
use crate::worker::{amped, Shared, Wait};
use bytes::Bytes;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use weft_io::mapcache::chunk_bytes;
use weft_io::sys::mmap::MappedChunk;
use weft_io::sys::zerocopy;

/// Slices shorter than this are not worth pinning (the kernel would copy them).
const ZC_MIN: usize = 16 * 1024;

/// Queue the next chunk while less than this is waiting to be sent: the
/// head and the first chunk go in one `writev`.
const FEED_BELOW: u64 = 64 * 1024;

/// A large body being sent: from `next` to `end` of `file`; and the slices
/// sent with `MSG_ZEROCOPY` the kernel has not released yet.
pub(crate) struct Feed {
    file: Rc<CachedFile>,
    next: u64,
    end: u64,
    zc: Zc,
}

/// A connection's zero-copy sends in flight.
#[derive(Default)]
struct Zc {
    /// SO_ZEROCOPY set on the socket.
    enabled: bool,
    /// Zero-copy is off for this connection (refused, or the kernel copied).
    off: bool,
    /// The next send's sequence number.
    seq: u32,
    /// Slices held until their completion, by sequence number.
    held: VecDeque<(u32, Bytes)>,
}

/// What [`feed`] did.
pub(crate) enum Fed {
    /// Nothing to do now (no feed, or enough queued).
    Idle,
    /// A chunk was queued.
    Queued,
    /// AMPED: the chunk is not resident; `Shared::wait` says which to load.
    Park,
    /// The file changed or cannot be mapped: close the connection.
    Abort,
}

/// Is `[start, end)` of `f` sent as a feed of mapped chunks?
pub(crate) fn streams(s: &Shared<'_>, f: &CachedFile, start: u64, end: u64) -> bool {
    f.body.is_none()
        && s.cfg.send == SendMode::Auto
        && s.objects.is_none()
        && s.files.as_ref().is_some_and(|c| end - start > c.chunk_size())
}

/// The answer queued the head of a response whose body is `[start, end)`
/// of `f`: feed it from here.
pub(crate) fn start(c: &mut Conn, s: &mut Shared<'_>, f: Rc<CachedFile>, start: u64, end: u64) {
    let zc = s.feeds.remove(&c.token).map(|f| f.zc).unwrap_or_default();
    s.feeds.insert(
        c.token,
        Feed {
            file: f,
            next: start,
            end,
            zc,
        },
    );
    c.set_stream(FEEDING, true);
}

/// The connection closed: forget its feed. Slices still held for the kernel
/// are file pages of mappings; unmapping them is safe while the kernel holds
/// page references (it keeps the pages, and nothing rewrites them here).
pub(crate) fn closed(c: &Conn, s: &mut Shared<'_>) {
    if c.feeding() || c.zc_held() {
        s.feeds.remove(&c.token);
    }
}

/// Read the zero-copy completions on `c`'s error queue and release the
/// slices they cover.
pub(crate) fn reap(c: &mut Conn, s: &mut Shared<'_>) {
    if !c.zc_held() {
        return;
    }
    let Some(fd) = s.feeds.get_mut(&c.token) else {
        c.set_stream(ZC_HELD, false);
        return;
    };
    while let Ok(Some(done)) = zerocopy::reap(&c.fd) {
        let covered = |seq: u32| seq.wrapping_sub(done.lo) <= done.hi.wrapping_sub(done.lo);
        while fd.zc.held.front().is_some_and(|(seq, _)| covered(*seq)) {
            fd.zc.held.pop_front();
        }
        if done.copied {
            s.stats.zerocopy_copied += 1;
            fd.zc.off = true;
        }
    }
    if fd.zc.held.is_empty() {
        c.set_stream(ZC_HELD, false);
        if !c.feeding() {
            s.feeds.remove(&c.token);
        }
    }
}

/// `--zero-copy-send`: offer `[from, to)` of the chunk to the socket with
/// MSG_ZEROCOPY when nothing is queued ahead of it; returns how far it took.
fn send_zerocopy(
    c: &mut Conn,
    s: &mut Shared<'_>,
    chunk: &Arc<MappedChunk>,
    from: usize,
    to: usize,
) -> Result<usize, ()> {
    let Some(fd) = s.feeds.get_mut(&c.token) else {
        return Ok(from);
    };
    if !s.cfg.zero_copy_send || fd.zc.off || to - from < ZC_MIN || !c.out.is_empty() {
        return Ok(from);
    }
    if !fd.zc.enabled {
        // One setsockopt per connection, at its first large body.
        if zerocopy::enable(&c.fd).is_err() {
            fd.zc.off = true;
            return Ok(from);
        }
        fd.zc.enabled = true;
    }
    match zerocopy::send(&c.fd, &chunk[from..to]) {
        Ok(n) => {
            fd.zc.held.push_back((fd.zc.seq, chunk_bytes(chunk, from..from + n)));
            fd.zc.seq = fd.zc.seq.wrapping_add(1);
            c.set_stream(ZC_HELD, true);
            s.stats.bytes_zerocopy += n as u64;
            Ok(from + n)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(from),
        Err(_) => Err(()),
    }
}

/// Queue the next chunk of `c`'s feed if its output has (nearly) drained.
pub(crate) fn feed(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> Fed {
    reap(c, s);
    if c.out.len() >= FEED_BELOW || !c.feeding() {
        return Fed::Idle;
    }
    let (Some(fd), Some(files)) = (s.feeds.get_mut(&c.token), s.files.as_mut()) else {
        c.set_stream(FEEDING, false);
        return Fed::Idle;
    };
    if s.cfg.snapshot_check && !amped::same_file(&fd.file) {
        s.stats.snapshot_aborts += 1;
        return abort(c, s);
    }
    let Ok((key, chunk)) = files.chunk(&fd.file, fd.next) else {
        return abort(c, s);
    };
    let from = (fd.next - chunk.offset()) as usize;
    let to = ((fd.end - chunk.offset()) as usize).min(chunk.len());
    let test = s.amped && !s.loaded && s.cfg.residency != ResidencyTest::None;
    if test && !s.overloaded {
        s.stats.residency_tests += 1;
        if s.cfg.test_miss || !files.chunk_resident(key, now) {
            s.stats.residency_misses += 1;
            s.wait = Some(Wait::Load {
                file: Arc::clone(&fd.file.fd),
                offset: fd.next,
                len: (to - from) as u64,
            });
            return Fed::Park;
        }
    }
    // A full helper queue (`overloaded`) sends the chunk from the loop, as
    // SPED would: the head is out, there is no 503 to give any more.
    s.loaded = false;
    s.stats.bytes_mapped += (to - from) as u64;
    let Ok(sent) = send_zerocopy(c, s, &chunk, from, to) else {
        return abort(c, s);
    };
    c.out.push_shared(chunk_bytes(&chunk, sent..to));
    let Some(fd) = s.feeds.get_mut(&c.token) else {
        return Fed::Queued;
    };
    fd.next += (to - from) as u64;
    if fd.next >= fd.end {
        c.set_stream(FEEDING, false);
        let f = Rc::clone(&fd.file);
        if !c.zc_held() {
            s.feeds.remove(&c.token);
        }
        amped::sending_from(s, f);
    }
    Fed::Queued
}

fn abort(c: &mut Conn, s: &mut Shared<'_>) -> Fed {
    s.feeds.remove(&c.token);
    c.set_stream(FEEDING, false);
    c.set_stream(ZC_HELD, false);
    Fed::Abort
}
