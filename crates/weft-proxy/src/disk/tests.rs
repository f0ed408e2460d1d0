//! Tests of `disk.rs`.

use super::*;
use crate::config::CachePolicy;

/// A fresh directory, removed when the test ends (declared first in a
/// test, it outlives the stores opened on it), even if the test fails.
struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(tag: &str) -> TestDir {
    let p = std::env::temp_dir().join(format!("weft-disk-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    TestDir(p)
}

fn object(body: &[u8], vary_key: &[u8]) -> Arc<Object> {
    let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nETag: \"x\"\r\n\r\n");
    let mut agg = Aggregate::new();
    agg.push(Bytes::copy_from_slice(body));
    Arc::new(Object::build(head, agg, vary_key, 1000, 1001, &CacheRules::default()).unwrap())
}

/// Poll `done` every 2 ms until it holds or 10 s pass (whether it held):
/// the store's threads are slow to be scheduled on a loaded machine, and a
/// quiet one returns at once.
fn poll_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A 1 MiB memory store and the settings of a disk store over `dir`.
fn setup(dir: &Path, cap: u64) -> (DiskConfig, Arc<Mutex<Store>>) {
    let store = Arc::new(Mutex::new(Store::new(1 << 20, 1 << 20, CachePolicy::Lru)));
    let cfg = DiskConfig {
        dir: dir.to_path_buf(),
        cap,
        max_object: 1 << 20,
        rules: CacheRules::default(),
    };
    (cfg, store)
}

/// Open a disk store over `dir` and wait for its scan.
fn open(dir: &Path, cap: u64) -> (DiskStore, Arc<Mutex<Store>>) {
    let (cfg, store) = setup(dir, cap);
    let d = DiskStore::open(cfg, 1, store.clone()).unwrap();
    assert!(poll_until(|| !d.stats().scanning), "scan never finished");
    (d, store)
}

/// Write `objects` (key, body, secondary key) into a disk store over
/// `dir` and close it, as a proxy that stopped would leave it.
fn stored(dir: &Path, objects: &[(&[u8], &[u8], &[u8])]) {
    let (d, _) = open(dir, 1 << 20);
    for (key, body, vary_key) in objects {
        d.write(key, &object(body, vary_key));
    }
    d.stop(); // finishes the queue
    assert_eq!(d.stats().written, objects.len() as u64);
}

/// Wait for one load to be reported to worker 0.
fn load(d: &DiskStore, key: &[u8]) -> Loaded {
    d.load(key, 0, Token::new(7, 0), 9);
    let mut out = Vec::new();
    assert!(
        poll_until(|| {
            d.take_loaded(0, &mut out);
            !out.is_empty()
        }),
        "load never reported"
    );
    let l = out.pop().unwrap();
    assert_eq!(l.wait, 9);
    l
}

#[test]
fn objects_survive_a_restart_byte_for_byte() {
    let dir = tmpdir("restart");
    stored(
        &dir,
        &[
            (b"http://a/x", b"hello body", b""),
            (b"http://a/y", &[7u8; 5000], b"gzip"),
        ],
    );
    let (d, store) = open(&dir, 1 << 20);
    let s = d.stats();
    assert_eq!((s.scanned, s.objects, s.errors), (2, 2, 0));
    assert!(d.contains(b"http://a/x") && d.contains(b"http://a/y") && !d.contains(b"http://a/z"));
    load(&d, b"http://a/y");
    let (_, o) = lock(&store)
        .lookup(b"http://a/y", |_| true)
        .expect("loaded into memory");
    assert_eq!(o.body.segments().concat(), vec![7u8; 5000]);
    assert_eq!(&o.vary_key[..], b"gzip");
    assert_eq!((o.request_time, o.response_time, o.lifetime), (1000, 1001, 600));
    assert_eq!(d.stats().loaded, 1);
}

#[test]
fn a_load_hands_its_objects_to_the_waiting_request() {
    let dir = tmpdir("handoff");
    stored(&dir, &[(b"k", b"gzip body", b"gzip"), (b"k", b"plain body", b"")]);
    let (d, store) = open(&dir, 1 << 20);
    let l = load(&d, b"k");
    // Other loads or fills took the room before the worker got to the
    // request: it is still answered from what was read.
    assert_eq!(lock(&store).invalidate(b"k"), 2);
    let mut bodies: Vec<Vec<u8>> = l.objects.iter().map(|(_, o)| o.body.segments().concat()).collect();
    bodies.sort();
    assert_eq!(bodies, [b"gzip body".to_vec(), b"plain body".to_vec()]);
    // A newer object for a variant, whether still queued for writing
    // (it replaces what its old file held) or already written, is the
    // one handed over, once.
    d.write(b"k", &object(b"newer plain", b""));
    let l = load(&d, b"k");
    let mut bodies: Vec<Vec<u8>> = l.objects.iter().map(|(_, o)| o.body.segments().concat()).collect();
    bodies.sort();
    assert_eq!(bodies, [b"gzip body".to_vec(), b"newer plain".to_vec()]);
}

#[test]
fn requests_for_a_key_being_loaded_join_the_load() {
    let dir = tmpdir("join");
    let (d, _) = open(&dir, 1 << 20);
    d.write(b"k", &object(b"body", b""));
    // Several requests for one key: every one is woken, and the key is
    // read once, or again if the first load finished before the others
    // asked, never once per request.
    for wait in 1..=3u64 {
        d.load(b"k", 0, Token::new(10 + wait as u32, 0), wait);
    }
    let mut got = Vec::new();
    poll_until(|| {
        d.take_loaded(0, &mut got);
        got.len() == 3
    });
    let mut waits: Vec<u64> = got.iter().map(|l| l.wait).collect();
    waits.sort();
    assert_eq!(waits, [1, 2, 3]);
    assert!((1..=3).contains(&d.stats().loaded));
}

#[test]
fn one_directory_serves_one_proxy() {
    let dir = tmpdir("owner");
    let (d, _) = open(&dir, 1 << 20);
    let (cfg, store) = setup(&dir, 1 << 20);
    let err = DiskStore::open(cfg.clone(), 1, store.clone())
        .err()
        .expect("second opener refused");
    assert!(err.to_string().contains("in use by another weft proxy"), "{err}");
    drop(d);
    assert!(DiskStore::open(cfg, 1, store).is_ok(), "free again once closed");
}

#[test]
fn partial_and_foreign_files_are_removed_at_start() {
    let dir = tmpdir("partial");
    stored(&dir, &[(b"k1", b"one", b""), (b"k2", b"two", b"")]);
    // Truncate one file, drop junk into a bucket and the temp dir.
    let p = file_path(&dir, file_id(b"k1", b""));
    let len = fs::metadata(&p).unwrap().len();
    File::options().write(true).open(&p).unwrap().set_len(len - 1).unwrap();
    fs::create_dir_all(dir.join("ab")).unwrap();
    fs::write(dir.join("ab").join("0123456789abcdef"), b"junk").unwrap();
    fs::write(dir.join("tmp").join("half"), b"WEFTOBJ1").unwrap();
    let (d, _) = open(&dir, 1 << 20);
    let s = d.stats();
    assert_eq!((s.scanned, s.errors), (1, 2));
    assert!(!d.contains(b"k1") && d.contains(b"k2"));
    assert!(!p.exists());
    assert!(!dir.join("tmp").join("half").exists());
}

#[test]
fn a_file_whose_bytes_changed_is_never_served() {
    let dir = tmpdir("crc");
    stored(&dir, &[(b"k", &[5u8; 3000], b"")]);
    // Same length, one body byte different: what a power failure can
    // leave behind without fsync.
    let p = file_path(&dir, file_id(b"k", b""));
    let mut bytes = fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&p, &bytes).unwrap();
    let (d, store) = open(&dir, 1 << 20);
    assert!(d.contains(b"k"), "the scan checks lengths only");
    load(&d, b"k");
    assert!(lock(&store).lookup(b"k", |_| true).is_none());
    let s = d.stats();
    assert_eq!((s.loaded, s.errors, s.objects), (0, 1, 0), "{s:?}");
    assert!(!p.exists());
}

#[test]
fn a_failed_write_is_counted_and_leaves_nothing_behind() {
    let dir = tmpdir("write-error");
    let (d, _) = open(&dir, 1 << 20);
    // A file where `k`'s bucket directory should be: its rename fails
    // (ENOTDIR), as a full or read-only disk would fail a write.
    let bucket = file_path(&dir, file_id(b"k", b"")).parent().unwrap().to_path_buf();
    let _ = fs::remove_dir_all(&bucket);
    fs::write(&bucket, b"in the way").unwrap();
    d.write(b"k", &object(b"body", b""));
    d.write(b"other", &object(b"body", b""));
    d.stop(); // finishes the queue
    let s = d.stats();
    if file_id(b"other", b"") >> 56 == file_id(b"k", b"") >> 56 {
        assert_eq!((s.errors, s.written), (2, 0), "{s:?}");
    } else {
        assert_eq!((s.errors, s.written), (1, 1), "{s:?}");
        assert!(d.contains(b"other"));
    }
    assert!(!d.contains(b"k"), "a failed write is not indexed");
    let tmp: Vec<_> = fs::read_dir(dir.join("tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temporary file left: {tmp:?}");
}

/// Set the time of `key`'s file to `secs_ago` seconds ago.
fn age_file(dir: &Path, key: &[u8], secs_ago: u64) {
    let t = SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    File::options()
        .write(true)
        .open(file_path(dir, file_id(key, b"")))
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn a_restart_keeps_the_least_recently_used_order() {
    let dir = tmpdir("restart-lru");
    let keys: Vec<Vec<u8>> = (0..10).map(|i| format!("k{i}").into_bytes()).collect();
    let objects: Vec<(&[u8], &[u8], &[u8])> = keys.iter().map(|k| (&k[..], &[1u8; 1000][..], &b""[..])).collect();
    stored(&dir, &objects);
    let file_len = fs::metadata(file_path(&dir, file_id(b"k0", b""))).unwrap().len();
    // Written k0 first ... k9 last; then k0 was read back, which counts
    // as a use and survives the restart.
    for (i, k) in keys.iter().enumerate() {
        age_file(&dir, k, 1000 - 10 * i as u64);
    }
    {
        let (d, _) = open(&dir, 1 << 20);
        load(&d, b"k0");
    }
    // Room for five files at the next start: k1..k5, the least recently
    // used, go, whatever order the directory lists the files in.
    let (d, _) = open(&dir, 5 * file_len);
    let s = d.stats();
    assert_eq!((s.objects, s.evicted), (5, 5), "{s:?}");
    let kept: Vec<bool> = keys.iter().map(|k| d.contains(k)).collect();
    let mut want = vec![true];
    want.extend([false; 5]);
    want.extend([true; 4]);
    assert_eq!(kept, want);
}

#[test]
fn a_file_removed_under_the_store_is_forgotten() {
    let dir = tmpdir("vanished");
    stored(&dir, &[(b"k", b"body", b"")]);
    let (d, _) = open(&dir, 1 << 20);
    fs::remove_file(file_path(&dir, file_id(b"k", b""))).unwrap();
    assert!(load(&d, b"k").objects.is_empty());
    assert!(!d.contains(b"k"));
}

#[test]
fn a_file_the_system_cannot_open_stays_indexed() {
    let dir = tmpdir("unopenable");
    stored(&dir, &[(b"k", b"body", b"")]);
    let (d, _) = open(&dir, 1 << 20);
    // A symlink to itself: open fails with ELOOP, as it would with EMFILE
    // at the descriptor limit. Not the file's fault: it is not removed.
    let path = file_path(&dir, file_id(b"k", b""));
    fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&path, &path).unwrap();
    assert!(load(&d, b"k").objects.is_empty());
    let s = d.stats();
    assert_eq!((s.errors, s.objects), (1, 1), "{s:?}");
    assert!(d.contains(b"k") && fs::symlink_metadata(&path).is_ok());
}

#[test]
fn the_cap_evicts_the_least_recently_used() {
    let dir = tmpdir("cap");
    let (d, _) = open(&dir, 3 * 1200);
    for k in [b"a", b"b", b"c"] {
        d.write(k, &object(&[1u8; 1000], b""));
    }
    // Wait for the writer, then use `a` so that `b` is the oldest.
    poll_until(|| d.stats().written == 3);
    load(&d, b"a");
    d.write(b"d", &object(&[1u8; 1000], b""));
    d.stop();
    let s = d.stats();
    assert_eq!((s.objects, s.evicted), (3, 1), "{s:?}");
    assert!(d.contains(b"a") && !d.contains(b"b") && d.contains(b"c") && d.contains(b"d"));
    assert!(s.bytes <= 3 * 1200);
}

#[test]
fn a_key_invalidated_during_the_scan_is_not_indexed() {
    let dir = tmpdir("scan-inval");
    {
        let (d, _) = open(&dir, 1 << 30);
        for i in 0..2000 {
            d.write(format!("k{i}").as_bytes(), &object(b"x", b""));
        }
        d.stop();
    }
    // Whether the scan has reached the key or not when it is removed,
    // it ends up neither indexed nor on disk.
    let (cfg, store) = setup(&dir, 1 << 30);
    let d = DiskStore::open(cfg, 1, store).unwrap();
    d.remove(b"k1234");
    d.remove(b"k7");
    while d.stats().scanning {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    d.stop(); // carries out the removals
    let s = d.stats();
    assert_eq!(s.objects, 1998, "{s:?}");
    assert!(!d.contains(b"k1234") && !d.contains(b"k7") && d.contains(b"k8"));
    assert!(!file_path(&dir, file_id(b"k1234", b"")).exists());
    assert!(!file_path(&dir, file_id(b"k7", b"")).exists());
}

#[test]
fn an_invalidated_key_never_comes_back() {
    let dir = tmpdir("inval");
    let (d, store) = open(&dir, 1 << 20);
    d.write(b"k", &object(b"old", b""));
    // Removed before the writer may even have written it: the queued
    // write is dropped or its file deleted, and a load finds nothing.
    d.remove(b"k");
    assert!(!d.contains(b"k"));
    load(&d, b"k");
    assert!(lock(&store).lookup(b"k", |_| true).is_none());
    // A write after the removal stands.
    d.write(b"k", &object(b"new", b""));
    d.stop();
    assert!(d.contains(b"k"));
    drop(d);
    let (d, _) = open(&dir, 1 << 20);
    assert_eq!(d.stats().objects, 1);
    load(&d, b"k");
}

/// A write that the writer finishes while a load reads the key's files
/// (it leaves the queue and enters the index under one lock hold) is still
/// handed over: each round writes a newer object and loads at once, so the
/// two threads race on every round (before the fix, the load's snapshot of
/// files came before the write's end and its look at the queue after it,
/// and the object was in neither).
#[test]
fn a_write_finishing_during_a_load_is_handed_over() {
    let dir = tmpdir("race");
    let (d, _store) = open(&dir, 1 << 20);
    for round in 0..300 {
        let body = format!("body of round {round}").into_bytes();
        d.write(b"k", &object(&body, b""));
        let l = load(&d, b"k");
        let bodies: Vec<Vec<u8>> = l.objects.iter().map(|(_, o)| o.body.segments().concat()).collect();
        assert_eq!(bodies, [body], "round {round}: {:?}", d.stats());
    }
}
