//! The per-worker file cache: Flash's pathname, response-header and
//! mapped-file caches in one table, each switchable (Figure 4.11 of thesis
//! 004): `--path-cache N` (0: translate every request), `--head-cache`
//! (off: header fields built per request), `--file-cache BYTES` (small
//! files' bytes held up to this budget; 0: read or sent from the file each time).
//!
//! Under AMPED ([`FileCache::lookup`] with `inline = false`) a path that needs
//! the disk (not cached, or due for revalidation) is a [`Lookup::Miss`]: the
//! worker has a helper open and stat it and hands the result back with
//! [`FileCache::adopt`] before the request is answered again.
//!
//! A hit turns a request path into an open descriptor, its metadata, the
//! precomputed header fields (Content-Type, Last-Modified, ETag) and, for small
//! files in `auto` mode, the file's bytes — with no system call. Entries are
//! revalidated with one fstatat when older than `file_cache_valid` (nginx's
//! `open_file_cache_valid`), so an edited file is picked up within that time.
//! Each worker has its own cache: no locks, and a descriptor per worker per file.
//!
//! One LRU byte budget (`--file-cache BYTES`) covers everything the cache
//! keeps: small files' bytes, the mapped chunks large files are sent from
//! (thesis 004 §4.4.4, [`MapCache`]), and each open descriptor (counted as
//! [`ENTRY_COST`] plus its header fields: the kernel's open file and this
//! entry). Entries and chunks share one clock; past the budget the least
//! recently used go first, those no response in flight holds before the rest
//! (§2.2.7), down to 7/8 of the budget so eviction runs in batches. A chunk a
//! response still holds stays mapped until it is sent. Chunks are keyed by
//! the file's content generation (inode, size, mtime): a changed file maps
//! afresh and its old chunks age out.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use weft_io::mapcache::{ChunkKey, MapCache};
use weft_io::sys::mmap::{MappedChunk, DEFAULT_CHUNK};
use weft_io::sys::{self, Fd, FileStat, Resolve};

/// What an open descriptor counts against the budget besides its header
/// fields: the kernel's open file and inode references and this entry, about.
pub const ENTRY_COST: u64 = 512;

/// What opening a path gave.
type Opened = io::Result<(Fd, FileStat)>;

/// The least time a directory stays known (see [`FileCache::lookup`]).
const DIR_VALID_MIN: Duration = Duration::from_secs(1);

/// A cached open file.
pub struct CachedFile {
    /// Open descriptor (read-only), shared with helper jobs that load it.
    pub fd: Arc<Fd>,
    /// Content-Type (for header fields built per request).
    pub content_type: &'static str,
    /// Metadata at open/revalidation time.
    pub stat: FileStat,
    /// Strong validator.
    pub etag: Vec<u8>,
    /// `Content-Type: ..\r\nLast-Modified: ..\r\nETag: ..\r\nAccept-Ranges: bytes\r\n`.
    pub fields: Vec<u8>,
    /// The bytes, for small files in memory mode.
    pub body: Option<Box<[u8]>>,
    checked: Cell<Instant>,
    /// When a residency test last found the whole file in the page cache.
    pub resident_at: Cell<Option<Instant>>,
    /// Last use on the cache's clock (LRU).
    used: Cell<u64>,
    /// `--page-cache-admit reuse`: the admission clock at the last request
    /// for the body (`crate::admit`).
    pub reuse_at: Cell<Option<u64>>,
    /// Its pages are to be dropped once its response is out (queued in
    /// `crate::admit`); a request within the horizon clears it.
    pub condemned: Cell<bool>,
    /// Change notices (`--snapshot-check notify`, `crate::notice`).
    pub watch: crate::notice::WatchCell,
}

impl CachedFile {
    /// The file's content generation (its chunks' key).
    pub fn generation(&self) -> u64 {
        weft_buf::FileId {
            ino: self.stat.ino,
            size: self.stat.size,
            mtime_ns: self.stat.mtime_ns,
        }
        .generation()
    }

    fn cost(&self) -> u64 {
        ENTRY_COST + self.fields.len() as u64 + self.body.as_ref().map_or(0, |b| b.len() as u64)
    }
}

/// A file body queued on a connection's output chain keeps the file open
/// (the chain holds an `Rc` of the entry) even if the cache drops it.
impl std::os::fd::AsRawFd for CachedFile {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.raw()
    }
}

/// What a path is.
pub enum Lookup {
    /// A regular file.
    File(Rc<CachedFile>),
    /// A directory: its descriptor when it was just opened (for a listing),
    /// `None` when the path cache knew it.
    Dir(Option<Fd>),
    /// Nothing there.
    NotFound,
    /// AMPED: finding out needs the disk; ask a helper, then [`FileCache::adopt`].
    Miss,
    /// There, but not ours to serve (permissions, escapes the root, not a
    /// regular file).
    Forbidden,
    /// Could not be opened for want of a descriptor (EMFILE/ENFILE): 503,
    /// try again later.
    Unavailable,
}

/// The cache.
pub struct FileCache {
    root: Arc<Fd>,
    /// Virtual hosts' roots: a path starting with NUL and a two-byte site
    /// number `n` opens below `sites[n - 1]` (`vhost.rs`).
    sites: Vec<Arc<Fd>>,
    resolve: Resolve,
    entries: HashMap<Box<[u8]>, Rc<CachedFile>>,
    max_entries: usize,
    valid: Duration,
    small_max: Option<u64>,
    path: Vec<u8>,
    /// Bytes of entries (bodies, fields, [`ENTRY_COST`]) held, and the budget
    /// for them and the mapped chunks together (`--file-cache`).
    held: u64,
    max_held: u64,
    /// Large files' mapped chunks (on the same clock and budget).
    maps: MapCache,
    /// Entries and chunks evicted for the budget.
    evictions: u64,
    /// A helper's answer for one path, used by the next lookup of it.
    /// (None once used: the entry it made counts as fresh until cleared.)
    adopted: Option<(Box<[u8]>, Option<Opened>)>,
    /// Answering requests a helper just served: entries count as fresh (they
    /// were checked at most one helper round ago), so a request is never
    /// sent round again by `--path-cache 0`.
    resuming: bool,
    /// Paths known to be directories, and when they were checked.
    dirs: HashMap<Box<[u8]>, Instant>,
    /// Sidecars (`--precompressed`) known to be missing, and when that was
    /// found: most files have none, and asking again each request would cost
    /// an open (or, under AMPED, a helper's round) per request.
    missing: HashMap<Box<[u8]>, Instant>,
    /// `--snapshot-check notify`: every entry's file watched for changes.
    notice: Option<crate::notice::ChangeNotice>,
}

impl FileCache {
    /// A cache over `root` (an open directory). `small_max`: keep files up to
    /// this size in memory (None: never, as in sendfile and copy modes).
    pub fn new(
        root: Fd,
        follow_symlinks: bool,
        max_entries: usize,
        valid: Duration,
        small_max: Option<u64>,
        max_held: u64,
    ) -> FileCache {
        FileCache {
            root: Arc::new(root),
            sites: Vec::new(),
            resolve: if follow_symlinks {
                Resolve::FollowSymlinks
            } else {
                Resolve::Beneath
            },
            entries: HashMap::new(),
            max_entries: max_entries.max(1),
            valid,
            small_max,
            path: Vec::with_capacity(256),
            held: 0,
            max_held,
            maps: MapCache::new(DEFAULT_CHUNK, u64::MAX),
            evictions: 0,
            adopted: None,
            dirs: HashMap::new(),
            missing: HashMap::new(),
            resuming: false,
            notice: None,
        }
    }

    /// Watch every cached file for changes (`--snapshot-check notify`);
    /// without inotify, nothing changes (every check is an `fstat`).
    pub fn with_notices(mut self) -> FileCache {
        self.notice = crate::notice::ChangeNotice::new();
        self
    }

    /// The change notices, if on (the worker reads their events).
    pub fn notice(&mut self) -> Option<&mut crate::notice::ChangeNotice> {
        self.notice.as_mut()
    }

    /// Open the virtual hosts' roots beside the top-level one (`vhost.rs`).
    pub fn with_sites(mut self, roots: Vec<Fd>) -> FileCache {
        self.sites = roots.into_iter().map(Arc::new).collect();
        self
    }

    /// The root `rel` opens below, `rel` without its site prefix, and how
    /// paths below the root resolve (for a helper's open too).
    pub fn root_for<'r>(&self, rel: &'r [u8]) -> (&Arc<Fd>, &'r [u8], Resolve) {
        if let [0, hi, lo, rest @ ..] = rel {
            let n = u16::from_be_bytes([*hi, *lo]) as usize;
            if let Some(root) = n.checked_sub(1).and_then(|i| self.sites.get(i)) {
                return (root, rest, self.resolve);
            }
        }
        (&self.root, rel, self.resolve)
    }

    /// A helper opened `rel` for a [`Lookup::Miss`]: the next lookup of
    /// `rel` uses this instead of the disk.
    pub fn adopt(&mut self, rel: Box<[u8]>, result: io::Result<(Fd, FileStat)>) {
        self.adopted = Some((rel, Some(result)));
    }

    /// The path and file to open or revalidate, from an adopted result or
    /// the disk (`inline`); `None`: a miss.
    fn open_now(&mut self, rel: &[u8], inline: bool) -> Option<io::Result<(Fd, FileStat)>> {
        if let Some((p, r)) = &mut self.adopted {
            if &p[..] == rel {
                // An error stays for every request parked on the same open;
                // a file becomes a cache entry at its first use.
                match r {
                    Some(Err(e)) => return Some(Err(io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(5)))),
                    Some(Ok(_)) => return r.take(),
                    None => {}
                }
            }
        }
        if !inline {
            return None;
        }
        Some(self.open(rel))
    }

    /// A helper's answer is being used (true) or has been (false): see `resuming`.
    pub fn set_resuming(&mut self, on: bool) {
        self.resuming = on;
        if !on {
            self.adopted = None;
        }
    }

    fn remove(&mut self, rel: &[u8]) {
        if let Some(f) = self.entries.remove(rel) {
            self.held -= f.cost();
        }
    }

    /// The entry of `rel` if cached, without counting a use or checking it.
    pub fn peek(&self, rel: &[u8]) -> Option<&Rc<CachedFile>> {
        self.entries.get(rel)
    }

    /// Look up `rel` (a normalized relative path, no NUL, "" for the root).
    /// `inline`: open and read here when needed (SPED); otherwise a path that
    /// needs the disk is a [`Lookup::Miss`].
    pub fn lookup(&mut self, rel: &[u8], now: Instant, inline: bool) -> Lookup {
        if let Some(f) = self.entries.get(rel) {
            f.used.set(self.maps.tick());
            // A helper's answer for this path wins; once used, it is fresh.
            let answer = self
                .adopted
                .as_ref()
                .filter(|(p, _)| &p[..] == rel)
                .map(|(_, r)| r.is_some());
            if answer == Some(false)
                || (answer.is_none() && self.resuming)
                || now.duration_since(f.checked.get()) < self.valid
            {
                return Lookup::File(f.clone());
            }
            // Stale: revalidate by opening again and comparing identity.
            let f = f.clone();
            match self.open_now(rel, inline) {
                None => return Lookup::Miss,
                Some(Ok((fd, st))) if st.ino == f.stat.ino && st.size == f.stat.size && st.mtime == f.stat.mtime => {
                    drop(fd);
                    f.checked.set(now);
                    return Lookup::File(f);
                }
                Some(Err(e)) if sys::is_fd_exhaustion(&e) => {
                    // No descriptor to revalidate with: the one this entry
                    // holds still serves (the next request checks again),
                    // rather than failing a file that is open already.
                    return Lookup::File(f);
                }
                Some(r) => {
                    self.remove(rel);
                    return self.insert(rel, r, now);
                }
            }
        }
        if let Some(&at) = self.dirs.get(rel) {
            // Directories stay known for a second even with `--path-cache 0`,
            // so an index found by a helper is not chased round again.
            if now.duration_since(at) < self.valid.max(DIR_VALID_MIN) {
                return Lookup::Dir(None);
            }
            self.dirs.remove(rel);
        }
        match self.open_now(rel, inline) {
            None => Lookup::Miss,
            Some(r) => self.insert(rel, r, now),
        }
    }

    /// Look up a sidecar path (`--precompressed`): as [`FileCache::lookup`],
    /// with its absence remembered as a directory is (at least a second,
    /// else `file_cache_valid`), so a file without sidecars costs a hash
    /// lookup per request, not an open.
    pub fn lookup_sidecar(&mut self, rel: &[u8], now: Instant, inline: bool) -> Lookup {
        if let Some(&at) = self.missing.get(rel) {
            if now.duration_since(at) < self.valid.max(DIR_VALID_MIN) {
                return Lookup::NotFound;
            }
            self.missing.remove(rel);
        }
        let found = self.lookup(rel, now, inline);
        if matches!(found, Lookup::NotFound) {
            if self.missing.len() >= self.max_entries {
                self.missing.clear();
            }
            self.missing.insert(rel.into(), now);
        }
        found
    }

    fn insert(&mut self, rel: &[u8], opened: io::Result<(Fd, FileStat)>, now: Instant) -> Lookup {
        let (fd, st) = match opened {
            Ok(x) => x,
            Err(e) => return classify(&e),
        };
        if st.is_dir {
            if self.dirs.len() >= self.max_entries {
                self.dirs.clear();
            }
            self.dirs.insert(rel.into(), now);
            return Lookup::Dir(Some(fd));
        }
        if !st.is_file {
            return Lookup::Forbidden;
        }
        let body = match self.small_max {
            Some(max) if st.size <= max && st.size <= self.max_held / 8 => match read_all(&fd, st.size) {
                Ok(b) => Some(b),
                Err(_) => return Lookup::Forbidden,
            },
            _ => None,
        };
        let etag = weft_http::make_etag(st.ino, st.size, st.mtime_ns);
        let content_type = crate::mime::content_type(rel);
        let mut fields = Vec::with_capacity(160);
        write_fields(&mut fields, content_type, &st, &etag);
        let f = Rc::new(CachedFile {
            fd: Arc::new(fd),
            content_type,
            stat: st,
            etag,
            fields,
            body,
            checked: Cell::new(now),
            resident_at: Cell::new(None),
            used: Cell::new(self.maps.tick()),
            reuse_at: Cell::new(None),
            condemned: Cell::new(false),
            watch: Default::default(),
        });
        if let Some(n) = &mut self.notice {
            n.watch(&f);
        }
        if self.entries.len() >= self.max_entries {
            // The count bound (`--path-cache`) is hard: the least recently
            // used eighth goes, so a full cache sorts once per many inserts.
            let n = (self.max_entries / 8).max(1);
            self.evict_files(n, true);
        }
        self.held += f.cost();
        self.entries.insert(rel.into(), f.clone());
        self.trim();
        Lookup::File(f)
    }

    /// Evict up to `n` entries, least recently used first; `any`: those a
    /// response holds too (their descriptor closes when it is sent).
    fn evict_files(&mut self, n: usize, any: bool) {
        let mut v: Vec<(u64, Box<[u8]>)> = self
            .entries
            .iter()
            .filter(|(_, f)| any || Rc::strong_count(f) == 1)
            .map(|(k, f)| (f.used.get(), k.clone()))
            .collect();
        v.sort_unstable_by_key(|(u, _)| *u);
        for (_, k) in v.into_iter().take(n) {
            self.remove(&k);
            self.evictions += 1;
        }
    }

    /// Bytes counted against the budget: entries and mapped chunks.
    pub fn total_bytes(&self) -> u64 {
        self.held + self.maps.stats().mapped_bytes
    }

    /// Keep the budget: past it, evict least recently used entries and
    /// inactive chunks (those no response holds) down to 7/8 of it, then
    /// entries in use if that was not enough. A budget of 0 keeps no
    /// chunk past its send, and bounds entries by count only.
    pub fn trim(&mut self) {
        let budget = self.max_held;
        if self.total_bytes() <= budget {
            return;
        }
        if budget == 0 {
            self.maps.unmap_inactive();
            return;
        }
        let low = budget - budget / 8;
        enum Victim {
            File(Box<[u8]>),
            Chunk(ChunkKey),
        }
        let mut v: Vec<(u64, Victim)> = self
            .entries
            .iter()
            .filter(|(_, f)| Rc::strong_count(f) == 1)
            .map(|(k, f)| (f.used.get(), Victim::File(k.clone())))
            .collect();
        v.extend(self.maps.inactive().map(|(u, k)| (u, Victim::Chunk(k))));
        v.sort_unstable_by_key(|(u, _)| *u);
        for (_, victim) in v {
            if self.total_bytes() <= low {
                return;
            }
            match victim {
                Victim::File(k) => self.remove(&k),
                Victim::Chunk(k) => self.maps.unmap(k),
            }
            self.evictions += 1;
        }
        while self.total_bytes() > budget && !self.entries.is_empty() {
            let before = self.entries.len();
            self.evict_files(1, true);
            if self.entries.len() == before {
                break;
            }
        }
    }

    /// Memory pressure: drop every entry and chunk no response in flight
    /// uses (they are rebuilt on demand). Returns the bytes released.
    pub fn shrink(&mut self) -> u64 {
        let before = self.total_bytes();
        self.maps.unmap_inactive();
        self.evict_files(self.entries.len(), false);
        before - self.total_bytes()
    }

    /// The mapped chunk of `f` holding byte `offset` (mapped now if it is
    /// not), then the budget kept.
    pub fn chunk(&mut self, f: &CachedFile, offset: u64) -> io::Result<(ChunkKey, Arc<MappedChunk>)> {
        let c = self.maps.get(&*f.fd, f.generation(), f.stat.size, offset)?;
        let key = ChunkKey {
            generation: f.generation(),
            index: offset / self.maps.chunk_size() as u64,
        };
        self.trim();
        Ok((key, c))
    }

    /// Unmap every chunk of `f` (admission dropping its pages: the kernel
    /// keeps mapped pages). A chunk a response still holds stays mapped
    /// until that response lets it go.
    pub fn unmap_chunks(&mut self, f: &CachedFile) {
        for index in 0..f.stat.size.div_ceil(self.chunk_size()) {
            self.maps.unmap(ChunkKey {
                generation: f.generation(),
                index,
            });
        }
    }

    /// Is the chunk `key` in the page cache (see [`MapCache::resident`])?
    pub fn chunk_resident(&mut self, key: ChunkKey, now: Instant) -> bool {
        self.maps.resident(key, now, crate::worker::amped::RESIDENT_TRUST)
    }

    /// The size of mapped chunks.
    pub fn chunk_size(&self) -> u64 {
        self.maps.chunk_size() as u64
    }

    /// Bytes of chunks mapped now.
    pub fn mapped_bytes(&self) -> u64 {
        self.maps.stats().mapped_bytes
    }

    /// Entries and chunks evicted for the budget so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn open(&mut self, rel: &[u8]) -> io::Result<(Fd, FileStat)> {
        let (root, rel, resolve) = self.root_for(rel);
        let root = Arc::clone(root);
        self.path.clear();
        if rel.is_empty() {
            self.path.push(b'.');
        } else {
            self.path.extend_from_slice(rel);
        }
        let c = CString::new(self.path.as_slice()).map_err(|_| io::Error::from(sys::Errno::InvalidInput))?;
        let fd = sys::open_beneath(&*root, &c, resolve)?;
        let st = sys::fstat(&fd)?;
        Ok((fd, st))
    }

    /// Open a directory the path cache knew, for a listing (in the loop:
    /// listings are rare and read the directory in the loop anyway).
    pub fn open_dir(&mut self, rel: &[u8]) -> io::Result<Fd> {
        self.open(rel).map(|(fd, _)| fd)
    }

    /// Bytes the entries count (bodies, fields, descriptors).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Number of cached files.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `Content-Type`, `Last-Modified`, `ETag` and `Accept-Ranges` of a file:
/// kept ready in the cache entry, or written per request with `--head-cache off`.
pub fn write_fields(out: &mut Vec<u8>, content_type: &str, st: &FileStat, etag: &[u8]) {
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\nLast-Modified: ");
    out.extend_from_slice(&weft_http::fmt_http_date(st.mtime));
    out.extend_from_slice(b"\r\nETag: ");
    out.extend_from_slice(etag);
    out.extend_from_slice(b"\r\nAccept-Ranges: bytes\r\n");
}

fn classify(e: &io::Error) -> Lookup {
    match sys::Errno::of(e) {
        Some(n) if n.is_no_such_path() => Lookup::NotFound,
        // EMFILE/ENFILE: out of descriptors for now, not the file's fault.
        Some(n) if n.is_fd_exhaustion() => Lookup::Unavailable,
        // EXDEV: RESOLVE_BENEATH refused an escape (.., absolute or outward symlink);
        // ELOOP: symlink loop or magic link; EACCES/EPERM: permissions.
        _ => Lookup::Forbidden,
    }
}

fn read_all(fd: &Fd, size: u64) -> io::Result<Box<[u8]>> {
    let mut buf = vec![0u8; size as usize];
    let mut off = 0usize;
    while off < buf.len() {
        let n = sys::pread(fd, &mut buf[off..], off as u64)?;
        if n == 0 {
            // The file shrank under us: serve what is there would lie about the
            // length; treat it as unreadable until revalidation.
            return Err(sys::Errno::Io.into());
        }
        off += n;
    }
    Ok(buf.into_boxed_slice())
}

/// Modification time for conditional requests, truncated to seconds as HTTP dates are.
pub fn http_mtime(st: &FileStat) -> SystemTime {
    let secs = st
        .mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}
