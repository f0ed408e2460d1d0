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
//! [`RESIDENT_TRUST`]: crate::worker::amped::RESIDENT_TRUST

use crate::config::{ResidencyTest, SendMode};
use crate::conn::Conn;
use crate::files::CachedFile;
use crate::worker::{amped, Shared, Wait};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use weft_io::mapcache::chunk_bytes;

/// Queue the next chunk while less than this is waiting to be sent: the
/// head and the first chunk go in one `writev`.
const FEED_BELOW: u64 = 64 * 1024;

/// A large body being sent: from `next` to `end` of `file`.
pub(crate) struct Feed {
    file: Rc<CachedFile>,
    next: u64,
    end: u64,
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
    s.feeds.insert(
        c.token,
        Feed {
            file: f,
            next: start,
            end,
        },
    );
    c.feeding = true;
}

/// The connection closed: forget its feed.
pub(crate) fn closed(c: &Conn, s: &mut Shared<'_>) {
    if c.feeding {
        s.feeds.remove(&c.token);
    }
}

/// Queue the next chunk of `c`'s feed if its output has (nearly) drained.
pub(crate) fn feed(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> Fed {
    if c.out.len() >= FEED_BELOW {
        return Fed::Idle;
    }
    let (Some(fd), Some(files)) = (s.feeds.get_mut(&c.token), s.files.as_mut()) else {
        c.feeding = false;
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
    c.out.push_shared(chunk_bytes(&chunk, from..to));
    s.stats.bytes_mapped += (to - from) as u64;
    fd.next += (to - from) as u64;
    if fd.next >= fd.end {
        let f = s.feeds.remove(&c.token).map(|fd| fd.file);
        c.feeding = false;
        if let Some(f) = f {
            amped::sending_from(s, f);
        }
    }
    Fed::Queued
}

fn abort(c: &mut Conn, s: &mut Shared<'_>) -> Fed {
    s.feeds.remove(&c.token);
    c.feeding = false;
    Fed::Abort
}
