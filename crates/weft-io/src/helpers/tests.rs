use super::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn temp_path(tag: &str) -> std::path::PathBuf {
    crate::testutil::temp_path(&format!("helpers-{tag}"))
}

/// Wait (poll) for `fd` to become readable; true if it did within `ms`.
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(sys::poll(&mut p, ms), Ok(1))
}

fn collect<J: Send + 'static, R: Send + 'static>(pool: &HelperPool<J, R>, want: usize) -> Vec<R> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < want && Instant::now() < deadline {
        if readable(pool.waker(0), 100) {
            pool.take(0, &mut out);
        }
    }
    out
}

#[test]
fn submit_never_blocks_while_helpers_are_stuck_on_a_fifo() {
    let fifo = temp_path("fifo");
    // Made in-process: a `mkfifo` child would hold the other tests' pipes
    // open between its fork and its exec (see `sys::mkfifo`).
    let c_fifo = CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    sys::mkfifo(&c_fifo).expect("mkfifo");
    let results = Arc::new(Mailboxes::new(1).unwrap());
    // A job is a path to read to the end (the FIFO blocks in open and read).
    let pool: HelperPool<(u32, std::path::PathBuf), (u32, usize)> = HelperPool::new(2, 4, results, |(id, p)| {
        let mut s = Vec::new();
        let n = std::fs::File::open(p)
            .and_then(|mut f| f.read_to_end(&mut s))
            .unwrap_or(0);
        (id, n)
    });
    assert_eq!(pool.stats().started, 0, "helpers start on demand");
    let t = Instant::now();
    for id in 0..2 {
        pool.submit(0, (id, fifo.clone())).unwrap();
    }
    // Both helpers take a job and are stuck; more jobs queue, then the queue
    // refuses.
    while pool.stats().queued > 0 || pool.stats().started < 2 {
        assert!(t.elapsed() < Duration::from_secs(5), "helpers never started");
        std::thread::yield_now();
    }
    let t2 = Instant::now();
    for id in 2..6 {
        pool.submit(0, (id, fifo.clone())).unwrap();
    }
    let mut refused = 0;
    for id in 6..10 {
        if let Err(Full((back, _))) = pool.submit(0, (id, fifo.clone())) {
            assert_eq!(back, id);
            refused += 1;
        }
    }
    assert!(
        t2.elapsed() < Duration::from_millis(500),
        "submit waited: {:?}",
        t2.elapsed()
    );
    assert_eq!(refused, 4, "a full queue refuses");
    let st = pool.stats();
    assert_eq!(st.started, 2, "never more than max_helpers");
    assert!(!readable(pool.waker(0), 50), "nothing finished yet");
    // Unblock: each open-for-write + close releases the readers waiting then
    // with EOF (non-blocking open: no reader left means ENXIO, not a hang).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (fifo, stop) = (fifo.clone(), Arc::clone(&stop));
        move || {
            use std::os::unix::fs::OpenOptionsExt;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
                if let Ok(mut f) = f {
                    let _ = f.write_all(b"abc");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    let done = collect(&pool, 10 - refused);
    assert_eq!(done.len(), 10 - refused, "every accepted job reports by eventfd");
    // A helper posts its result before it counts it and goes idle: wait for
    // the counters to settle.
    let settle = Instant::now() + Duration::from_secs(5);
    while (pool.stats().completed as usize, pool.stats().idle) != (10 - refused, 2) && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(pool.stats().completed as usize, 10 - refused);
    assert_eq!(pool.stats().idle, 2, "helpers stay in reserve");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pool.shutdown();
    assert!(pool.submit(0, (99, fifo.clone())).is_err(), "no jobs after shutdown");
    writer.join().unwrap();
    std::fs::remove_file(fifo).unwrap();
}

#[test]
fn disk_jobs_open_stat_and_load() {
    let dir = temp_path("root");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), vec![7u8; 100_000]).unwrap();
    let root = Arc::new(sys::open_dir(&CString::new(dir.to_str().unwrap()).unwrap()).unwrap());
    let pool = HelperPool::new(1, 16, Arc::new(Mailboxes::new(2).unwrap()), run_disk_job);
    let job = |tag, name: &str| DiskJob::Open {
        tag,
        root: Arc::clone(&root),
        path: CString::new(name).unwrap(),
        resolve: Resolve::Beneath,
        preload: 1 << 20,
        method: LoadMethod::Readahead,
    };
    pool.submit(1, job(1, "f.txt")).unwrap();
    pool.submit(1, job(2, "missing")).unwrap();
    pool.submit(1, job(3, "../etc/passwd")).unwrap();
    let mut out = Vec::new();
    while out.len() < 3 {
        assert!(readable(pool.waker(1), 5000));
        pool.take(1, &mut out);
    }
    let mut file = None;
    for d in out {
        match d {
            DiskDone::Opened { tag: 1, result } => {
                let (fd, st) = result.unwrap();
                assert_eq!(st.size, 100_000);
                file = Some(Arc::new(fd));
            }
            DiskDone::Opened { tag: 2 | 3, result } => assert!(result.is_err()),
            other => panic!("unexpected {other:?}"),
        }
    }
    // Both ways of loading end with the range resident and its length known
    // (short at end of file).
    for (tag, method) in [(4, LoadMethod::Readahead), (5, LoadMethod::Read)] {
        let file = file.clone().unwrap();
        let _ = residency::advise_dontneed(&*file, 0, 0);
        pool.submit(
            1,
            DiskJob::Load {
                tag,
                file,
                offset: 0,
                len: 1 << 20,
                method,
            },
        )
        .unwrap();
        let mut out = Vec::new();
        while out.is_empty() {
            assert!(readable(pool.waker(1), 5000));
            pool.take(1, &mut out);
        }
        assert!(
            matches!(out[0], DiskDone::Loaded { tag: t, result: Ok(100_000) } if t == tag),
            "{method:?}: {:?}",
            out[0]
        );
    }
    drop(pool);
    std::fs::remove_dir_all(dir).unwrap();
}
