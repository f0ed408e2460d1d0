//! The disk store (`--cache-dir`): a second tier under the memory store, with
//! its own size cap, that survives a restart.
//!
//! - **Write-through.** Every object the memory store takes (a fill, or a 304
//!   that refreshed one) is queued to a writer thread, which writes it to a
//!   temporary file and renames it into place: a crash leaves whole files or
//!   none. The queue holds reference counts on the object's buffers, no copy.
//! - **Loads.** A request that misses in memory but whose key is in the disk
//!   index parks; a reader thread reads that key's files, rebuilds the
//!   objects and puts them in the memory store, and the worker answers the
//!   request again, now from memory (IO-Lite's unified cache: one copy of an
//!   object in memory, whoever asks). The event loop never touches the disk;
//!   the threads are Flash's helpers, signalling through an eventfd like the
//!   resolver's.
//! - **Index and cap.** The index (key → files, with sizes) lives in memory
//!   and is rebuilt at start by the writer thread, which scans the directory
//!   before it takes any job, while the proxy already serves (keys not yet
//!   indexed are misses); files that are not whole are removed. Beyond
//!   `--cache-dir-size` the least recently used files go; a file's mtime is
//!   its last write or load, so the order survives a restart.
//! - **Consistency.** A key is removed from the index at once when it is
//!   invalidated, and writes queued for it before are dropped (a tombstone
//!   per key until the removal has been carried out); a load re-checks the
//!   index under its lock before it inserts, so an invalidated object never
//!   comes back from disk; it takes the objects still queued for writing in
//!   the same lock hold as its last look at the index, so a write finishing
//!   meanwhile is found in one place or the other. At shutdown the writer
//!   finishes its queue.
//!
//! A file is `DIR/XX/XXXXXXXXXXXXXXXX`, named by a hash of the primary key
//! and the secondary (Vary) key: a fixed header (magic, lengths, the
//! exchange's request and response times, a CRC-32 of head and body that
//! every load checks), the primary key, the secondary key, the stored head,
//! the body. Files are not fsync'd: the scan checks lengths, loads check the
//! checksum, and a file that fails either is removed, never served.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::SystemTime;
use weft_buf::Aggregate;
use weft_http::caching::CacheRules;
use weft_io::Token;
use weft_policy::{Lru, Replacement};

use crate::store::{Object, Store};
use weft_io::mailbox::Mailboxes;

const MAGIC: &[u8; 8] = b"WEFTOBJ2";
const HEADER: usize = 48;
/// Longest primary or secondary key accepted from a file.
const MAX_KEY: usize = 1 << 20;
/// Largest stored head accepted from a file.
const MAX_HEAD: usize = 4 << 20;
/// Most bytes of objects waiting for the writer: beyond it (a disk slower
/// than the fills) new objects are not written, rather than held in memory
/// outside the memory store's budget.
const MAX_QUEUED: u64 = 64 << 20;

/// Settings of the disk store.
#[derive(Clone, Debug)]
pub struct DiskConfig {
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// Most bytes of files kept.
    pub cap: u64,
    /// Largest body accepted from a file (`--max-object-size`).
    pub max_object: u64,
    /// The rules objects read back are built by.
    pub rules: CacheRules,
}

/// Counters of the disk store.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStats {
    /// Objects indexed.
    pub objects: u64,
    /// Bytes of indexed files.
    pub bytes: u64,
    /// Objects found by the scan at start.
    pub scanned: u64,
    /// Files written.
    pub written: u64,
    /// Objects put back into memory (read from their files, or taken from
    /// the write queue when not written yet).
    pub loaded: u64,
    /// Files removed by invalidation.
    pub removed: u64,
    /// Files removed for the size cap.
    pub evicted: u64,
    /// Files that could not be written or read (or were not whole).
    pub errors: u64,
    /// Objects not written because the write queue was full.
    pub skipped: u64,
    /// The start-up scan is still indexing the directory.
    pub scanning: bool,
}

struct Entry {
    key: Box<[u8]>,
    size: u64,
    /// The write that made the file (0: found by the scan).
    seq: u64,
}

/// An object queued for writing, with its write's sequence number.
type QueuedWrite = (u64, Arc<Object>);

#[derive(Default)]
struct Index {
    files: HashMap<u64, Entry>,
    by_key: HashMap<Box<[u8]>, Vec<u64>>,
    lru: Lru<u64>,
    bytes: u64,
    /// Key → sequence number of its last invalidation, until carried out.
    tombstones: HashMap<Box<[u8]>, u64>,
    /// Objects queued for writing, by key (with their write's sequence
    /// number): already on their way to disk, so a load takes them from
    /// here and a request right after a fill does not miss.
    pending: HashMap<Box<[u8]>, Vec<QueuedWrite>>,
    /// The start-up scan is still running.
    scanning: bool,
    /// Files loaded while the scan runs, in order: the most recently used
    /// when the scan orders the LRU at its end.
    used_in_scan: Vec<u64>,
    stats: DiskStats,
}

impl Index {
    fn add(&mut self, id: u64, key: &[u8], size: u64, seq: u64) {
        self.drop_file(id);
        self.files.insert(
            id,
            Entry {
                key: key.into(),
                size,
                seq,
            },
        );
        self.by_key.entry(key.into()).or_default().push(id);
        self.lru.insert(id, size, 1.0);
        self.bytes += size;
    }

    /// Forget file `id` (if indexed).
    fn drop_file(&mut self, id: u64) {
        let Some(e) = self.files.remove(&id) else {
            return;
        };
        self.bytes -= e.size;
        self.lru.remove(&id);
        if let Some(ids) = self.by_key.get_mut(&e.key) {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                self.by_key.remove(&e.key);
            }
        }
    }

    /// Least recently used files beyond `cap`, forgotten.
    fn over_cap(&mut self, cap: u64) -> Vec<u64> {
        let mut out = Vec::new();
        while self.bytes > cap {
            let Some(id) = self.lru.evict() else { break };
            self.drop_file(id);
            out.push(id);
        }
        out
    }
}

enum Job {
    Write { seq: u64, key: Box<[u8]>, obj: Arc<Object> },
    Remove { seq: u64, key: Box<[u8]>, ids: Vec<u64> },
}

/// A request waiting for a load: (worker, client, park number).
type Waiter = (usize, Token, u64);

/// Objects a load put into the memory store, with their ids there.
pub type LoadedObjects = Arc<[(u64, Arc<Object>)]>;

/// A load finished: wake the request parked as (`token`, `wait`).
#[derive(Clone)]
pub struct Loaded {
    /// The client.
    pub token: Token,
    /// The park it answers.
    pub wait: u64,
    /// What the load read. The request is answered from these when the
    /// memory store has evicted them meanwhile (other loads, or fills, can
    /// take the room before the worker gets to it): a load is never wasted
    /// on a trip to the origin.
    pub objects: LoadedObjects,
}

struct Queue<T> {
    jobs: Mutex<VecDeque<T>>,
    cv: Condvar,
}

impl<T> Queue<T> {
    fn new() -> Queue<T> {
        Queue {
            jobs: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
        }
    }
}

struct Inner {
    cfg: DiskConfig,
    index: Mutex<Index>,
    writes: Queue<Job>,
    /// Keys to load.
    loads: Queue<Box<[u8]>>,
    /// Keys queued or being loaded, with the requests waiting for them: a
    /// second request for a key already on its way joins the first.
    loading: Mutex<HashMap<Box<[u8]>, Vec<Waiter>>>,
    next_seq: AtomicU64,
    /// Bytes of objects in the write queue.
    queued: AtomicU64,
    stop: AtomicBool,
    mailboxes: Mailboxes<Loaded>,
    store: Arc<Mutex<Store>>,
    rules: CacheRules,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The disk store and its two helper threads.
pub struct DiskStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// `DIR/lock`, locked (flock) while this store is open.
    _owner: File,
}

/// File name of (primary key, secondary key): 64-bit FNV-1a, length-prefixed
/// so that no two pairs run together. Stable across versions and runs (the
/// scan does not depend on it: it reads keys from the files).
fn file_id(key: &[u8], vary_key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let len = (key.len() as u64).to_le_bytes();
    for &b in len.iter().chain(key).chain(vary_key) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn file_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{:02x}", id >> 56)).join(format!("{id:016x}"))
}

impl Inner {
    fn path(&self, id: u64) -> PathBuf {
        file_path(&self.cfg.dir, id)
    }

    /// Where file `id` is written before it is renamed into place.
    fn tmp_path(&self, id: u64) -> PathBuf {
        self.cfg.dir.join("tmp").join(format!("{id:016x}"))
    }
}

impl DiskStore {
    /// Open (or create) the directory and start the writer, which first
    /// indexes what the directory holds (removing files that are not whole,
    /// and the oldest beyond the cap; `stats().scanning` until done), and the
    /// reader, for `workers` workers. Loads go into `store`.
    pub fn open(cfg: DiskConfig, workers: usize, store: Arc<Mutex<Store>>) -> io::Result<DiskStore> {
        fs::create_dir_all(&cfg.dir)
            .map_err(|e| io::Error::new(e.kind(), format!("cache-dir: cannot create {}: {e}", cfg.dir.display())))?;
        // One proxy per directory: two would remove each other's temporary
        // files and overwrite each other's index decisions.
        let owner = File::create(cfg.dir.join("lock")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cache-dir: cannot write in {}: {e}", cfg.dir.display()),
            )
        })?;
        owner.try_lock().map_err(|_| {
            io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("cache-dir: {} is in use by another weft proxy", cfg.dir.display()),
            )
        })?;
        let tmp = cfg.dir.join("tmp");
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cache-dir: cannot write in {}: {e}", cfg.dir.display()),
            )
        })?;
        let mailboxes = Mailboxes::new(workers)?;
        let index = Index {
            scanning: true,
            ..Index::default()
        };
        let rules = cfg.rules;
        let inner = Arc::new(Inner {
            cfg,
            index: Mutex::new(index),
            writes: Queue::new(),
            loads: Queue::new(),
            loading: Mutex::new(HashMap::new()),
            next_seq: AtomicU64::new(1),
            queued: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            mailboxes,
            store,
            rules,
        });
        let mut threads = Vec::new();
        let i = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("weft-disk-write".into())
                .spawn(move || writer(&i))?,
        );
        let i = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("weft-disk-read".into())
                .spawn(move || reader(&i))?,
        );
        Ok(DiskStore {
            inner,
            threads: Mutex::new(threads),
            _owner: owner,
        })
    }

    /// The eventfd worker `worker` watches for finished loads.
    pub fn waker(&self, worker: usize) -> RawFd {
        self.inner.mailboxes.waker(worker)
    }

    /// Counters.
    pub fn stats(&self) -> DiskStats {
        let ix = lock(&self.inner.index);
        let mut s = ix.stats;
        s.objects = ix.files.len() as u64;
        s.bytes = ix.bytes;
        s.scanning = ix.scanning;
        s
    }

    /// Is anything stored (or being written) under `key`?
    pub fn contains(&self, key: &[u8]) -> bool {
        let ix = lock(&self.inner.index);
        ix.by_key.contains_key(key) || ix.pending.contains_key(key)
    }

    /// Queue `obj`, just stored in memory under `key`, for writing (the
    /// queue holds reference counts on its buffers, no copy).
    pub fn write(&self, key: &[u8], obj: &Arc<Object>) {
        let q = &self.inner.writes;
        let mut jobs = lock(&q.jobs);
        if self.inner.queued.load(Ordering::Relaxed) + obj.size() > MAX_QUEUED {
            lock(&self.inner.index).stats.skipped += 1;
            return;
        }
        self.inner.queued.fetch_add(obj.size(), Ordering::Relaxed);
        // Taken under the queue's lock: sequence order is queue order.
        let seq = self.inner.next_seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.index)
            .pending
            .entry(key.into())
            .or_default()
            .push((seq, obj.clone()));
        jobs.push_back(Job::Write {
            seq,
            key: key.into(),
            obj: obj.clone(),
        });
        drop(jobs);
        q.cv.notify_one();
    }

    /// The keys indexed or being written that start with `prefix` (a purge
    /// by prefix), and whether the start-up scan is still indexing (the
    /// files it has not reached yet are not among them).
    pub fn keys_with_prefix(&self, prefix: &[u8]) -> (Vec<Box<[u8]>>, bool) {
        let ix = lock(&self.inner.index);
        let mut keys: Vec<Box<[u8]>> = ix
            .by_key
            .keys()
            .chain(ix.pending.keys())
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        (keys, ix.scanning)
    }

    /// Remove every variant of `key`, at once for lookups and loads; the
    /// files go in the writer's order (after writes queued before).
    pub fn remove(&self, key: &[u8]) {
        let q = &self.inner.writes;
        let mut jobs = lock(&q.jobs);
        let seq = self.inner.next_seq.fetch_add(1, Ordering::Relaxed);
        let ids = {
            let mut ix = lock(&self.inner.index);
            let ids = ix.by_key.get(key).cloned().unwrap_or_default();
            for &id in &ids {
                ix.drop_file(id);
            }
            ix.pending.remove(key);
            ix.tombstones.insert(key.into(), seq);
            ids
        };
        jobs.push_back(Job::Remove {
            seq,
            key: key.into(),
            ids,
        });
        drop(jobs);
        q.cv.notify_one();
    }

    /// Read `key`'s files into the memory store, then wake worker `worker`
    /// with (`token`, `wait`).
    pub fn load(&self, key: &[u8], worker: usize, token: Token, wait: u64) {
        let mut loading = lock(&self.inner.loading);
        if let Some(waiters) = loading.get_mut(key) {
            waiters.push((worker, token, wait));
            return;
        }
        loading.insert(key.into(), vec![(worker, token, wait)]);
        drop(loading);
        let q = &self.inner.loads;
        lock(&q.jobs).push_back(key.into());
        q.cv.notify_one();
    }

    /// Move worker `worker`'s finished loads into `out`.
    pub fn take_loaded(&self, worker: usize, out: &mut Vec<Loaded>) {
        self.inner.mailboxes.take(worker, out);
    }

    /// Finish the queued writes and stop the threads.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.writes.cv.notify_all();
        self.inner.loads.cv.notify_all();
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait for the next job; None once stopping and (for the writer) drained.
fn next<T>(inner: &Inner, q: &Queue<T>, drain: bool) -> Option<T> {
    let mut jobs = lock(&q.jobs);
    loop {
        let stopping = inner.stop.load(Ordering::SeqCst);
        if stopping && !drain {
            return None;
        }
        if let Some(j) = jobs.pop_front() {
            return Some(j);
        }
        if stopping {
            return None;
        }
        jobs = q.cv.wait(jobs).unwrap_or_else(|e| e.into_inner());
    }
}

fn writer(inner: &Inner) {
    // The index is built here, before any queued job runs: the proxy serves
    // (what it has not indexed yet is a miss) while a large directory is
    // read, and no file is written or removed under the scan's feet.
    scan(inner);
    while let Some(job) = next(inner, &inner.writes, true) {
        match job {
            Job::Write { seq, key, obj } => {
                inner.queued.fetch_sub(obj.size(), Ordering::Relaxed);
                let dead = |ix: &Index| ix.tombstones.get(&key).is_some_and(|&t| t > seq);
                if dead(&lock(&inner.index)) {
                    continue;
                }
                let id = file_id(&key, &obj.vary_key);
                let path = inner.path(id);
                let written = write_file(inner, id, &path, &key, &obj);
                let victims = {
                    let mut ix = lock(&inner.index);
                    if let Some(p) = ix.pending.get_mut(&key) {
                        p.retain(|(s, _)| *s != seq);
                        if p.is_empty() {
                            ix.pending.remove(&key);
                        }
                    }
                    let size = match written {
                        Ok(n) => n,
                        Err(e) => {
                            ix.stats.errors += 1;
                            // A full disk fails every write: log the 1st, 2nd,
                            // 4th... failure, not each one.
                            if ix.stats.errors.is_power_of_two() {
                                let n = ix.stats.errors;
                                weft_core::warn!("cache-dir: cannot write {} ({n} errors so far): {e}", path.display());
                            }
                            let _ = fs::remove_file(inner.tmp_path(id));
                            continue;
                        }
                    };
                    if dead(&ix) {
                        // Invalidated while it was being written.
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    ix.add(id, &key, size, seq);
                    ix.stats.written += 1;
                    let v = ix.over_cap(inner.cfg.cap);
                    ix.stats.evicted += v.len() as u64;
                    v
                };
                for v in victims {
                    let _ = fs::remove_file(inner.path(v));
                }
            }
            Job::Remove { seq, key, ids } => {
                let mut n = 0;
                // Writes queued after the removal come after this job.
                for id in ids {
                    if fs::remove_file(inner.path(id)).is_ok() {
                        n += 1;
                    }
                }
                let mut ix = lock(&inner.index);
                ix.stats.removed += n;
                if ix.tombstones.get(&key) == Some(&seq) {
                    ix.tombstones.remove(&key);
                }
            }
        }
    }
}

fn write_file(inner: &Inner, id: u64, path: &Path, key: &[u8], obj: &Object) -> io::Result<u64> {
    let (vary_key, head, body) = (&obj.vary_key, &obj.head, &obj.body);
    let mut hdr = Vec::with_capacity(HEADER + key.len() + vary_key.len());
    hdr.extend_from_slice(MAGIC);
    hdr.extend_from_slice(&(key.len() as u32).to_le_bytes());
    hdr.extend_from_slice(&(vary_key.len() as u32).to_le_bytes());
    hdr.extend_from_slice(&(head.len() as u32).to_le_bytes());
    hdr.extend_from_slice(&(body.len() as u64).to_le_bytes());
    hdr.extend_from_slice(&obj.request_time.to_le_bytes());
    hdr.extend_from_slice(&obj.response_time.to_le_bytes());
    hdr.extend_from_slice(&content_crc(head, body.segments()).to_le_bytes());
    hdr.extend_from_slice(key);
    hdr.extend_from_slice(vary_key);
    let tmp = inner.tmp_path(id);
    let mut f = File::create(&tmp)?;
    f.write_all(&hdr)?;
    f.write_all(head)?;
    for seg in body.segments() {
        f.write_all(seg)?;
    }
    drop(f);
    // The bucket directory exists after its first file: rename first, and
    // create it only when the rename says it is missing.
    if let Err(e) = fs::rename(&tmp, path) {
        match path.parent() {
            Some(parent) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(parent)?;
                fs::rename(&tmp, path)?;
            }
            _ => return Err(e),
        }
    }
    Ok((hdr.len() + head.len() + body.len()) as u64)
}

/// A file's header: (primary key, secondary key, head length, body length,
/// request time, response time), checked against the file's length.
struct Header {
    key: Vec<u8>,
    vary_key: Vec<u8>,
    head_len: usize,
    body_len: u64,
    request_time: u64,
    response_time: u64,
    /// `content_crc` of head and body.
    crc: u32,
}

fn read_header(f: &mut impl Read, file_len: u64, max_object: u64) -> Option<Header> {
    let mut fixed = [0u8; HEADER];
    f.read_exact(&mut fixed).ok()?;
    if &fixed[..8] != MAGIC {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(fixed[i..i + 4].try_into().unwrap()) as usize;
    let u64_at = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().unwrap());
    let (klen, vlen, hlen, blen) = (u32_at(8), u32_at(12), u32_at(16), u64_at(20));
    if klen == 0 || klen > MAX_KEY || vlen > MAX_KEY || hlen == 0 || hlen > MAX_HEAD || blen > max_object {
        return None;
    }
    let prefix = HEADER + klen + vlen;
    if file_len != (prefix + hlen) as u64 + blen {
        return None;
    }
    let mut keys = vec![0u8; klen + vlen];
    f.read_exact(&mut keys).ok()?;
    let vary_key = keys.split_off(klen);
    Some(Header {
        key: keys,
        vary_key,
        head_len: hlen,
        body_len: blen,
        request_time: u64_at(28),
        response_time: u64_at(36),
        crc: u32::from_le_bytes(fixed[44..48].try_into().unwrap()),
    })
}

/// Index the directory's files; remove those that are not whole, those of
/// keys invalidated meanwhile, and the least recently used beyond the cap.
fn scan(inner: &Inner) {
    let cfg = &inner.cfg;
    let started = std::time::Instant::now();
    let mut damaged = 0u64;
    let mut last_used: Vec<(SystemTime, u64)> = Vec::new();
    let dirs = fs::read_dir(&cfg.dir).into_iter().flatten().flatten();
    for d in dirs {
        if inner.stop.load(Ordering::SeqCst) {
            break;
        }
        let name = d.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(files) = fs::read_dir(d.path()) else { continue };
        for f in files.flatten() {
            let path = f.path();
            let id = f
                .file_name()
                .to_str()
                .filter(|n| n.len() == 16)
                .and_then(|n| u64::from_str_radix(n, 16).ok());
            let header = id.and_then(|_| {
                let mut file = File::open(&path).ok()?;
                let meta = file.metadata().ok()?;
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                read_header(&mut file, meta.len(), cfg.max_object).map(|h| (h, meta.len(), used))
            });
            let mut ix = lock(&inner.index);
            match (id, header) {
                (Some(id), Some((h, len, used))) if file_id(&h.key, &h.vary_key) == id => {
                    // Invalidated before the scan got here: its removal is
                    // still queued behind the scan, so the tombstone stands.
                    if ix.tombstones.contains_key(&h.key[..]) {
                        drop(ix);
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    ix.add(id, &h.key, len, 0);
                    ix.stats.scanned += 1;
                    last_used.push((used, id));
                }
                _ => {
                    ix.stats.errors += 1;
                    damaged += 1;
                    drop(ix);
                    let _ = fs::remove_file(&path);
                }
            }
        }
    }
    // Directory order says nothing of use: order the LRU by each file's time
    // (its last write or load), then the loads made during the scan.
    last_used.sort_unstable();
    let (victims, objects, bytes) = {
        let mut ix = lock(&inner.index);
        let used_in_scan = std::mem::take(&mut ix.used_in_scan);
        for id in last_used.into_iter().map(|(_, id)| id).chain(used_in_scan) {
            if ix.files.contains_key(&id) {
                ix.lru.touch(&id);
            }
        }
        let v = ix.over_cap(cfg.cap);
        ix.stats.evicted += v.len() as u64;
        ix.scanning = false;
        (v, ix.files.len(), ix.bytes)
    };
    for v in victims {
        let _ = fs::remove_file(inner.path(v));
    }
    weft_core::info!(
        "cache dir {}: {objects} objects ({} MiB) indexed in {} ms, {damaged} damaged files removed",
        cfg.dir.display(),
        bytes >> 20,
        started.elapsed().as_millis()
    );
}

/// Rounds of file reads one load makes before it settles for what it has,
/// beyond one for each write of the key queued when it starts (a key whose
/// files keep being replaced while they are read).
const LOAD_ROUNDS: usize = 4;

fn reader(inner: &Inner) {
    while let Some(key) = next(inner, &inner.loads, false) {
        let objects: LoadedObjects = load_key(inner, &key).into();
        let waiters = lock(&inner.loading).remove(&key).unwrap_or_default();
        for (worker, token, wait) in waiters {
            let objects = objects.clone();
            inner.mailboxes.post(worker, Loaded { token, wait, objects });
        }
    }
}

/// Read `key`'s files and its objects still queued for writing into the
/// memory store; the objects put there, one per variant.
///
/// The writer moves an object from `pending` to the index under one hold of
/// the index lock, so the round that finds no file left to read takes the
/// pending objects in that same hold: a write finishing while files are read
/// is then seen in one of the two places, never in neither. A file replaced
/// while it was read (its sequence number changed) is read again in the next
/// round. Each such round is paid for by a write of the key that finished,
/// so a load gets one round for each write queued when it starts: a writer
/// far behind (a busy disk, a starved thread) that finishes them one by one
/// during the load still leaves it the newest file. Nothing goes into the
/// memory store before that last hold: an object read from a file replaced
/// since (when the rounds run out) is dropped there, never put back in
/// place of the newer object that replaced it.
fn load_key(inner: &Inner, key: &[u8]) -> Vec<(u64, Arc<Object>)> {
    // File → the write (sequence number) already read for this load.
    let mut tried: HashMap<u64, u64> = HashMap::new();
    // File → the write read from it and its object.
    let mut got: HashMap<u64, (u64, Arc<Object>)> = HashMap::new();
    let mut rounds = LOAD_ROUNDS;
    let mut round = 0;
    loop {
        let files: Vec<(u64, u64)> = {
            let mut ix = lock(&inner.index);
            if round == 0 {
                rounds += ix.pending.get(key).map_or(0, Vec::len);
            }
            let files: Vec<(u64, u64)> = ix.by_key.get(key).map_or_else(Vec::new, |ids| {
                ids.iter()
                    .filter_map(|id| ix.files.get(id).map(|e| (*id, e.seq)))
                    .filter(|(id, seq)| tried.get(id) != Some(seq))
                    .collect()
            });
            if files.is_empty() || round + 1 >= rounds {
                // (Files left unread after the last round stay indexed: a
                // later request reads them.)
                return settle(inner, &mut ix, key, got);
            }
            files
        };
        for (id, seq) in files {
            tried.insert(id, seq);
            let obj = load_file(inner, &inner.path(id), key);
            let mut ix = lock(&inner.index);
            match obj {
                Ok(obj) => {
                    // Still the indexed file? (Not invalidated or replaced
                    // meanwhile: what was read may be either write.)
                    if ix.files.get(&id).is_some_and(|e| e.seq == seq) {
                        ix.lru.touch(&id);
                        if ix.scanning {
                            ix.used_in_scan.push(id);
                        }
                        got.insert(id, (seq, Arc::new(obj)));
                    }
                }
                Err(LoadError::Damaged) => {
                    if ix.files.get(&id).is_some_and(|e| e.seq == seq) {
                        ix.stats.errors += 1;
                        ix.drop_file(id);
                        let _ = fs::remove_file(inner.path(id));
                    }
                }
                // The file stays indexed; a later request may read it.
                Err(LoadError::Io) => ix.stats.errors += 1,
            }
        }
        round += 1;
    }
}

/// The end of [`load_key`], under the index lock: the objects read from
/// files that are still the indexed ones, then those of `key` still on
/// their way to disk (newer than any file), go into the memory store.
fn settle(inner: &Inner, ix: &mut Index, key: &[u8], got: HashMap<u64, (u64, Arc<Object>)>) -> Vec<(u64, Arc<Object>)> {
    let current = got
        .into_iter()
        .filter(|(id, (seq, _))| ix.files.get(id).is_some_and(|e| e.seq == *seq))
        .map(|(_, (_, obj))| obj);
    let pending = ix.pending.get(key).into_iter().flatten().map(|(_, obj)| obj.clone());
    let mut objects: Vec<(u64, Arc<Object>)> = Vec::new();
    let mut store = lock(&inner.store);
    for obj in current.chain(pending) {
        if let Some(mem_id) = store.insert_shared(key, obj.clone()) {
            // It replaced any same-variant object put there before it.
            replace_variant(&mut objects, mem_id, &obj);
        }
    }
    ix.stats.loaded += objects.len() as u64;
    objects
}

/// Put `obj` (now `mem_id` in the memory store) in the load's answer in
/// place of any object of the same variant it replaced there.
fn replace_variant(objects: &mut Vec<(u64, Arc<Object>)>, mem_id: u64, obj: &Arc<Object>) {
    objects.retain(|(_, o)| o.vary != obj.vary || o.vary_key != obj.vary_key);
    objects.push((mem_id, obj.clone()));
}

/// CRC-32 of the stored head and body. Files are not fsync'd (a cache can
/// lose what the last seconds wrote), so after a power failure a file can
/// have its full length and blocks that never reached the disk: the checksum
/// keeps those from being served.
fn content_crc(head: &[u8], body: &[Bytes]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    for seg in body {
        h.update(seg);
    }
    h.finalize()
}

/// Why a file gave no object.
#[derive(Debug, PartialEq)]
enum LoadError {
    /// Not whole, not ours, or its checksum fails: remove it.
    Damaged,
    /// The system refused (no descriptors, an I/O error): keep the file,
    /// this request goes to the origin.
    Io,
}

fn load_file(inner: &Inner, path: &Path, key: &[u8]) -> Result<Object, LoadError> {
    let io = |_| LoadError::Io;
    let mut f = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => LoadError::Damaged, // removed under us: forget it
        _ => LoadError::Io,
    })?;
    let len = f.metadata().map_err(io)?.len();
    let obj = read_record(&mut f, len, Some(key), inner.cfg.max_object, &inner.rules)?;
    // Its time is when it was last written or read: the next start orders
    // the cap's LRU by it. Failing to set it costs only that order.
    let _ = f.set_modified(std::time::SystemTime::now());
    Ok(obj)
}

/// One record read from `f` (of `len` bytes): header, keys (the primary key
/// must equal `key` when given), head and body checked against the CRC, and
/// the object built from them. Anything short, long or inconsistent is
/// `Damaged`; only a failing read is `Io`.
fn read_record(
    f: &mut impl Read,
    len: u64,
    key: Option<&[u8]>,
    max_object: u64,
    rules: &CacheRules,
) -> Result<Object, LoadError> {
    let h = read_header(f, len, max_object).ok_or(LoadError::Damaged)?;
    if key.is_some_and(|k| h.key != k) {
        return Err(LoadError::Damaged);
    }
    // One buffer for head and body (the body becomes one segment), read
    // into its spare capacity: no zeroing first.
    let total = h.head_len + h.body_len as usize;
    let mut buf = Vec::with_capacity(total);
    f.take(total as u64).read_to_end(&mut buf).map_err(|_| LoadError::Io)?;
    if buf.len() != total || crc32fast::hash(&buf) != h.crc {
        return Err(LoadError::Damaged);
    }
    let mut all = Bytes::from(buf);
    let head = all.split_to(h.head_len);
    let mut body = Aggregate::new();
    if !all.is_empty() {
        body.push(all);
    }
    Object::build(head, body, &h.vary_key, h.request_time, h.response_time, rules).ok_or(LoadError::Damaged)
}

/// The record reader on a file's bytes, for the fuzz target: `Some` with the
/// object's head and body lengths when the record is whole and consistent.
#[doc(hidden)]
pub fn decode_record(file: &[u8], max_object: u64) -> Option<(usize, usize)> {
    let mut r = file;
    let obj = read_record(&mut r, file.len() as u64, None, max_object, &CacheRules::default()).ok()?;
    Some((obj.head.len(), obj.body.len()))
}

#[cfg(test)]
mod tests;
