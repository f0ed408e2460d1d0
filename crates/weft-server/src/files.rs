//! The per-worker file cache: Flash's pathname, response-header and
//! mapped-file caches in one table.
//!
//! A hit turns a request path into an open descriptor, its metadata, the
//! precomputed header fields (Content-Type, Last-Modified, ETag) and, for small
//! files in `auto` mode, the file's bytes — with no system call. Entries are
//! revalidated with one fstatat when older than `file_cache_valid` (nginx's
//! `open_file_cache_valid`), so an edited file is picked up within that time.
//! Each worker has its own cache: no locks, and a descriptor per worker per file.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};
use weft_io::sys::{self, Fd, FileStat, Resolve};

/// A cached open file.
pub struct CachedFile {
    /// Open descriptor (read-only).
    pub fd: Fd,
    /// Metadata at open/revalidation time.
    pub stat: FileStat,
    /// Strong validator.
    pub etag: Vec<u8>,
    /// `Content-Type: ..\r\nLast-Modified: ..\r\nETag: ..\r\nAccept-Ranges: bytes\r\n`.
    pub fields: Vec<u8>,
    /// The bytes, for small files in memory mode.
    pub body: Option<Box<[u8]>>,
    checked: Cell<Instant>,
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
    /// A directory (not cached; the descriptor is for listing it).
    Dir(Fd),
    /// Nothing there.
    NotFound,
    /// There, but not ours to serve (permissions, escapes the root, not a
    /// regular file).
    Forbidden,
}

/// The cache.
pub struct FileCache {
    root: Fd,
    resolve: Resolve,
    entries: HashMap<Box<[u8]>, Rc<CachedFile>>,
    max_entries: usize,
    valid: Duration,
    small_max: Option<u64>,
    path: Vec<u8>,
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
    ) -> FileCache {
        FileCache {
            root,
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
        }
    }

    /// Look up `rel` (a normalized relative path, no NUL, "" for the root).
    pub fn lookup(&mut self, rel: &[u8], now: Instant) -> Lookup {
        if let Some(f) = self.entries.get(rel) {
            if now.duration_since(f.checked.get()) < self.valid {
                return Lookup::File(f.clone());
            }
            // Stale: revalidate by opening again and comparing identity.
            let f = f.clone();
            match self.open(rel) {
                Ok((fd, st)) if st.ino == f.stat.ino && st.size == f.stat.size && st.mtime == f.stat.mtime => {
                    drop(fd);
                    f.checked.set(now);
                    return Lookup::File(f);
                }
                _ => {
                    self.entries.remove(rel);
                }
            }
        }
        let (fd, st) = match self.open(rel) {
            Ok(x) => x,
            Err(e) => return classify(&e),
        };
        if st.is_dir {
            return Lookup::Dir(fd);
        }
        if !st.is_file {
            return Lookup::Forbidden;
        }
        let body = match self.small_max {
            Some(max) if st.size <= max => match read_all(&fd, st.size) {
                Ok(b) => Some(b),
                Err(_) => return Lookup::Forbidden,
            },
            _ => None,
        };
        let etag = weft_http::make_etag(st.ino, st.size, st.mtime_ns);
        let mut fields = Vec::with_capacity(160);
        fields.extend_from_slice(b"Content-Type: ");
        fields.extend_from_slice(crate::mime::content_type(rel).as_bytes());
        fields.extend_from_slice(b"\r\nLast-Modified: ");
        fields.extend_from_slice(&weft_http::fmt_http_date(st.mtime));
        fields.extend_from_slice(b"\r\nETag: ");
        fields.extend_from_slice(&etag);
        fields.extend_from_slice(b"\r\nAccept-Ranges: bytes\r\n");
        let f = Rc::new(CachedFile {
            fd,
            stat: st,
            etag,
            fields,
            body,
            checked: Cell::new(now),
        });
        if self.entries.len() >= self.max_entries {
            // Arbitrary eviction keeps the bound (and the descriptor budget) hard;
            // the cache is a convenience in front of openat2, not a store.
            if let Some(k) = self.entries.keys().next().cloned() {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(rel.into(), f.clone());
        Lookup::File(f)
    }

    fn open(&mut self, rel: &[u8]) -> io::Result<(Fd, FileStat)> {
        self.path.clear();
        if rel.is_empty() {
            self.path.push(b'.');
        } else {
            self.path.extend_from_slice(rel);
        }
        let c = CString::new(self.path.as_slice()).map_err(|_| io::Error::from(sys::Errno::InvalidInput))?;
        let fd = sys::open_beneath(&self.root, &c, self.resolve)?;
        let st = sys::fstat(&fd)?;
        Ok((fd, st))
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

fn classify(e: &io::Error) -> Lookup {
    match sys::Errno::of(e) {
        Some(n) if n.is_no_such_path() => Lookup::NotFound,
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
