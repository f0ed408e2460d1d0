//! Tests of `relay.rs`.

use super::*;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use weft_io::PipeBudget;

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

struct Rig {
    up_w: UnixStream,
    up_r: UnixStream,
    cl_w: UnixStream,
    cl_r: UnixStream,
    out: OutChain,
    up_buf: InputBuf,
    bufs: BufPool,
    pool: PipePool,
    st: ProxyStats,
    kernel: crate::sockmap::KernelFwd,
    /// The object a relay handed over whole (`Pump::Whole`).
    whole: Option<Aggregate>,
}

impl Rig {
    /// One pump of `relay` from `up` (this rig's own upstream socket when
    /// None) to the rig's client socket.
    fn pump(
        &mut self,
        relay: &mut Relay,
        up: Option<BorrowedFd<'_>>,
        may_read: &mut bool,
        may_write: &mut bool,
    ) -> Pump {
        let mut e = Ends {
            client: Some(self.cl_w.as_fd()),
            client_may_write: may_write,
            out: &mut self.out,
            up: up.unwrap_or(self.up_r.as_fd()),
            up_may_read: may_read,
            up_buf: &mut self.up_buf,
            bufs: &mut self.bufs,
            kernel: &mut self.kernel,
        };
        relay.pump(&mut e, &mut self.st)
    }

    /// Pump `relay` until it is done, with both sockets taken as ready again
    /// after each wait (`on_wait` runs first); fails the test on any other
    /// outcome or after 20 s.
    fn pump_to_done(&mut self, relay: &mut Relay, up: Option<BorrowedFd<'_>>, mut on_wait: impl FnMut()) {
        let (mut may_read, mut may_write) = (true, true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match self.pump(relay, up, &mut may_read, &mut may_write) {
                Pump::Done => break,
                Pump::Whole => self.take_whole(relay),
                Pump::Yield => {}
                Pump::Wait { .. } => {
                    on_wait();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    may_read = true;
                    may_write = true;
                }
                other => panic!("{other:?}"),
            }
            assert!(std::time::Instant::now() < deadline, "relay stuck");
        }
    }
}

impl Rig {
    /// Keep the object `relay` says is whole (once).
    fn take_whole(&mut self, relay: &mut Relay) {
        assert!(self.whole.is_none(), "Whole twice");
        self.whole = relay.take_whole(&mut self.out, &mut self.st);
        assert!(self.whole.is_some(), "Whole without an object");
    }

    /// End `relay`: the object it handed over, whole, or at the end.
    fn finish(&mut self, relay: Relay) -> Option<Vec<u8>> {
        let at_end = relay.finish(&mut self.out, &mut self.pool, &mut self.st);
        assert!(
            self.whole.is_none() || at_end.is_none(),
            "the object was handed over twice"
        );
        self.whole.take().or(at_end).map(|a| a.to_vec())
    }

    /// A relay from this rig's pipe pool, without a cache fill.
    fn relay(&mut self, framing: Framing, plan: Plan) -> Relay {
        Relay::new(framing, plan, None, &mut self.pool, &mut self.st)
    }
}

/// The plan of most tests: one pipe at least, a 4 KiB framing read, a 64 KiB
/// read batch.
fn plan(want: Want, fill_max: Option<u64>) -> Plan {
    Plan {
        want,
        fill_max,
        pipe_min: 1,
        framing_read: 4096,
        rcv_lowat: 64 * 1024,
        linked: false,
        linked_head: false,
        token: 0,
    }
}

fn rig() -> Rig {
    let (up_w, up_r) = UnixStream::pair().unwrap();
    let (cl_w, cl_r) = UnixStream::pair().unwrap();
    up_r.set_nonblocking(true).unwrap();
    cl_w.set_nonblocking(true).unwrap();
    Rig {
        up_w,
        up_r,
        cl_w,
        cl_r,
        out: OutChain::new(),
        up_buf: InputBuf::new(),
        bufs: BufPool::new(4096, 4),
        pool: PipePool::new(PipeBudget::new(8, 1 << 20), 8),
        st: ProxyStats::default(),
        // Never loaded here: a Kernel session declines and splices.
        kernel: crate::sockmap::KernelFwd::Unavailable,
        whole: None,
    }
}

/// Write `wire` into the rig's upstream socket from a thread.
fn feed(r: &Rig, wire: Vec<u8>) -> std::thread::JoinHandle<()> {
    let mut w = r.up_w.try_clone().unwrap();
    std::thread::spawn(move || {
        for c in wire.chunks(100_000) {
            w.write_all(c).unwrap();
        }
    })
}

/// Read everything the rig's client socket receives, from a thread, until
/// its peer is dropped.
fn drain(r: &Rig) -> std::thread::JoinHandle<Vec<u8>> {
    let mut cl_r = r.cl_r.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        cl_r.read_to_end(&mut got).unwrap();
        got
    })
}

/// Feed `wire` from a thread, pump until done, return what the client got
/// and the filled object.
fn run(
    framing: Framing,
    want: Want,
    fill: bool,
    wire: Vec<u8>,
    up_fd: Option<BorrowedFd<'_>>,
) -> (Vec<u8>, Option<Vec<u8>>, ProxyStats) {
    run_plan(framing, plan(want, fill.then_some(1 << 30)), b"", wire, up_fd)
}

/// `run` with a whole plan, and `head` queued on the client's output first.
fn run_plan(
    framing: Framing,
    plan: Plan,
    head: &[u8],
    wire: Vec<u8>,
    up_fd: Option<BorrowedFd<'_>>,
) -> (Vec<u8>, Option<Vec<u8>>, ProxyStats) {
    let mut r = rig();
    let mut relay = r.relay(framing, plan);
    r.out.push_copy(head);
    let feeder = feed(&r, wire);
    let reader = drain(&r);
    r.pump_to_done(&mut relay, up_fd, || {});
    // Whatever the output queue still holds.
    while !r.out.is_empty() {
        r.out.flush(r.cl_w.as_fd(), &[], &mut []).unwrap();
    }
    feeder.join().unwrap();
    let cached = r.finish(relay);
    drop(r.cl_w);
    let got = reader.join().unwrap();
    (got, cached, r.st)
}

#[test]
fn length_bodies_by_every_path() {
    let b = body(3_000_000);
    for (want, fill) in [
        (Want::Copy, false),
        (Want::Copy, true),
        (Want::Splice, false),
        (Want::Tee, true),
        (Want::Kernel, false),
    ] {
        let (got, cached, st) = run(Framing::Length(b.len() as u64), want, fill, b.clone(), None);
        assert!(got == b, "{want:?} fill={fill}");
        if fill {
            assert!(cached.as_deref() == Some(&b[..]), "{want:?}: cached copy");
        } else {
            assert!(cached.is_none());
        }
        match want {
            Want::Splice => assert_eq!(st.bytes_spliced, b.len() as u64),
            Want::Tee => {
                assert_eq!(st.bytes_spliced, b.len() as u64);
                assert_eq!(st.bytes_teed, b.len() as u64);
            }
            Want::Copy => assert_eq!(st.bytes_copied, b.len() as u64),
            // Without the sockmap (here: never loaded) it splices, said in a counter.
            Want::Kernel => {
                assert_eq!(st.bytes_spliced, b.len() as u64);
                // (Not counted when the whole body was in the pipe before
                // the decline: on a loaded machine the feeder can be that
                // far ahead.)
                assert!(st.sockmap_declined <= 1);
                assert_eq!(st.sessions_splice, 1);
            }
        }
    }
}

/// `b` as a chunked body of `chunk`-byte chunks, with its last chunk.
fn chunked_wire(b: &[u8], chunk: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for c in b.chunks(chunk) {
        weft_http::chunked::encode_chunk_head(c.len(), &mut wire);
        wire.extend_from_slice(c);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    wire
}

#[test]
fn chunked_framing_is_kept_and_data_cached() {
    let b = body(500_000);
    let wire = chunked_wire(&b, 70_001);
    for want in [Want::Copy, Want::Splice, Want::Tee] {
        let f = Framing::Chunked {
            dec: ChunkedDecoder::new(),
            keep_framing: true,
        };
        let (got, cached, _) = run(f, want, want != Want::Splice, wire.clone(), None);
        assert!(got == wire, "{want:?}: framing forwarded verbatim");
        if want != Want::Splice {
            assert!(
                cached.as_deref() == Some(&b[..]),
                "{want:?}: data cached without framing"
            );
        }
        // HTTP/1.0 client: de-chunked.
        let f = Framing::Chunked {
            dec: ChunkedDecoder::new(),
            keep_framing: false,
        };
        let (got, _, _) = run(f, want, false, wire.clone(), None);
        assert!(got == b, "{want:?}: de-chunked");
    }
}

/// A fill that others follow reads at the upstream's pace whatever its own
/// client takes (`Relay::decouple`). A chunked body's share for that client
/// then waits in its queue as slices of the object: a client that takes
/// nothing until the body is read costs the framing, not a second copy.
#[test]
fn a_decoupled_chunked_fill_queues_slices_of_the_object() {
    let b = body(2_000_000);
    let wire = chunked_wire(&b, 10_007);
    for (want, keep_framing) in [(Want::Copy, true), (Want::Copy, false), (Want::Tee, true)] {
        let mut r = rig();
        let framing = Framing::Chunked {
            dec: ChunkedDecoder::new(),
            keep_framing,
        };
        let mut relay = r.relay(framing, plan(want, Some(1 << 30)));
        relay.decouple();
        let feeder = feed(&r, wire.clone());
        // Nobody reads the client socket until the body is in: once its
        // buffer is full the client stays unwritable.
        let (mut may_read, mut may_write) = (true, true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match r.pump(&mut relay, None, &mut may_read, &mut may_write) {
                Pump::Done => break,
                Pump::Whole => r.take_whole(&mut relay),
                Pump::Yield => {}
                Pump::Wait { .. } => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    may_read = true;
                }
                other => panic!("{want:?}: {other:?}"),
            }
            assert!(std::time::Instant::now() < deadline, "{want:?}: relay stuck");
        }
        feeder.join().unwrap();
        let queued = r.out.memory_len();
        assert!(
            queued > b.len() / 2,
            "{want:?}: the client took most of the body ({queued} queued)"
        );
        assert!(
            r.out.own_len() < 16 * 1024,
            "{want:?} keep_framing={keep_framing}: {} bytes copied into the queue for {queued} queued",
            r.out.own_len()
        );
        let reader = drain(&r);
        while !r.out.is_empty() {
            r.out.flush(r.cl_w.as_fd(), &[], &mut []).unwrap();
        }
        let cached = r.finish(relay);
        drop(r.cl_w);
        let got = reader.join().unwrap();
        let expect = if keep_framing { &wire } else { &b };
        assert!(
            got == *expect,
            "{want:?} keep_framing={keep_framing}: the client's bytes"
        );
        assert!(cached.as_deref() == Some(&b[..]), "{want:?}: the object");
    }
}

#[test]
fn splice_failure_falls_back_to_copying() {
    // splice(2) from an eventfd fails with EINVAL; read(2) of it works
    // (8 bytes: the counter). The session must finish by copying.
    let ev = weft_io::sys::eventfd().unwrap();
    weft_io::sys::eventfd_signal(&ev).unwrap();
    let (got, cached, st) = run(Framing::Length(8), Want::Tee, true, Vec::new(), Some(ev.as_fd()));
    assert_eq!(got, 1u64.to_ne_bytes());
    assert_eq!(cached.as_deref(), Some(&1u64.to_ne_bytes()[..]));
    assert_eq!(st.sessions_fallback, 1);
    assert_eq!(st.sessions_copy, 1);
}

/// SO_RCVLOWAT follows the body: asked only after a bulk delivery, never
/// above the rest of the body, lowered for the last part, back to 1 when
/// the body is complete (the connection may be pooled), never set for a
/// trickle, and cut for good by `stop_batching`.
#[test]
fn read_batches_follow_the_body() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut w = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (up, _) = l.accept().unwrap();
    up.set_nonblocking(true).unwrap();
    let fd = up.as_fd();
    let lowat = || sys::rcvlowat(fd).unwrap();
    let mut r = rig();
    let mut relay = r.relay(
        Framing::Length(300_000),
        Plan {
            rcv_lowat: 128 * 1024,
            ..plan(Want::Splice, None)
        },
    );
    let b = body(300_000);
    let reader = drain(&r);
    // Wait until the socket holds exactly `n` unread bytes from `w`.
    let settle = |n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while sys::bytes_readable(fd).unwrap() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    // Pump until the relay waits on the upstream (the client side drains
    // in the reader thread) or the body is done.
    let pump = |relay: &mut Relay, r: &mut Rig| loop {
        let (mut mr, mut mw) = (true, true);
        match r.pump(relay, Some(fd), &mut mr, &mut mw) {
            Pump::Wait { up_read: false, .. } | Pump::Yield => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            p => return p,
        }
    };
    let mut sent = 0;
    // A trickle (under MIN_BATCH since the socket last ran dry) never batches.
    w.write_all(&b[..1000]).unwrap();
    sent += 1000;
    settle(1000);
    assert!(matches!(pump(&mut relay, &mut r), Pump::Wait { up_read: true, .. }));
    assert_eq!(lowat(), 1);
    assert!(!relay.batching());
    // A bulk delivery: batch the next 128 KiB.
    w.write_all(&b[sent..sent + 100_000]).unwrap();
    sent += 100_000;
    settle(100_000);
    assert!(matches!(pump(&mut relay, &mut r), Pump::Wait { up_read: true, .. }));
    assert_eq!(lowat(), 128 * 1024);
    assert!(relay.batching());
    // Another bulk delivery: the rest of the body is less than a batch.
    w.write_all(&b[sent..sent + 150_000]).unwrap();
    sent += 150_000;
    settle(150_000);
    assert!(matches!(pump(&mut relay, &mut r), Pump::Wait { up_read: true, .. }));
    assert_eq!(lowat(), 300_000 - sent, "never above the rest of the body");
    // The batch does not fill in time: cut, and not asked again.
    relay.stop_batching(fd, &mut r.st);
    assert_eq!((lowat(), r.st.read_batches_cut), (1, 1));
    w.write_all(&b[sent..sent + 30_000]).unwrap();
    sent += 30_000;
    settle(30_000);
    assert!(matches!(pump(&mut relay, &mut r), Pump::Wait { up_read: true, .. }));
    assert_eq!(lowat(), 1);
    // The rest completes the body.
    w.write_all(&b[sent..]).unwrap();
    settle(300_000 - sent);
    assert_eq!(pump(&mut relay, &mut r), Pump::Done);
    assert_eq!(lowat(), 1, "a complete body leaves the socket as it was");
    r.finish(relay);
    drop(r.cl_w);
    assert!(reader.join().unwrap() == b);
}

#[test]
fn close_delimited_ends_at_eof_and_short_length_fails() {
    let b = body(200_000);
    let mut r = rig();
    let mut relay = r.relay(Framing::Close, plan(Want::Splice, None));
    r.up_w.write_all(&b).unwrap();
    r.up_w.shutdown(std::net::Shutdown::Write).unwrap();
    let reader = drain(&r);
    r.pump_to_done(&mut relay, None, || {});
    drop(r.cl_w);
    assert!(reader.join().unwrap() == b);
    // A Content-Length body cut short is a failure, not a completion.
    let mut r = rig();
    let mut relay = r.relay(Framing::Length(1000), plan(Want::Copy, Some(1 << 20)));
    r.up_w.write_all(&b[..10]).unwrap();
    r.up_w.shutdown(std::net::Shutdown::Write).unwrap();
    let (mut mr, mut mw) = (true, true);
    assert!(matches!(
        r.pump(&mut relay, None, &mut mr, &mut mw),
        Pump::UpstreamFailed(_)
    ));
}

/// io_uring refused here (seccomp, sysctl): the linked tests are skipped.
fn uring_refused() -> bool {
    let refused = weft_io::sys::probe_io_uring().is_err();
    if refused {
        eprintln!("skipped: io_uring is not permitted here");
    }
    refused
}

/// uring linked chains (relay/linked.rs): the head written into the pipe,
/// then splice in, tee, splice out per chunk; byte-exact on both paths, with
/// and without a cache fill, and the same as the per-call path's counters.
#[test]
fn linked_chains_move_head_and_body_exactly() {
    if uring_refused() {
        return;
    }
    let b = body(2_500_000);
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 2500000\r\n\r\n";
    for (want, fill, linked_head) in [
        (Want::Splice, false, true),
        (Want::Tee, true, true),
        (Want::Splice, false, false),
        (Want::Tee, true, false),
    ] {
        let p = Plan {
            linked: true,
            linked_head,
            ..plan(want, fill.then_some(1 << 30))
        };
        let (got, cached, st) = run_plan(Framing::Length(b.len() as u64), p, head, b.clone(), None);
        assert!(got.len() == head.len() + b.len(), "{want:?}: {} bytes", got.len());
        assert!(&got[..head.len()] == head, "{want:?}: head first");
        assert!(got[head.len()..] == b[..], "{want:?}: body exact");
        assert!(st.calls_linked > 0, "{want:?}: chains ran");
        assert_eq!(st.bytes_spliced, b.len() as u64, "{want:?}");
        assert!(st.bytes_linked > 0 && st.bytes_linked <= st.bytes_spliced);
        if fill {
            assert!(cached.as_deref() == Some(&b[..]), "cached copy");
            assert_eq!(st.bytes_teed, b.len() as u64);
        }
    }
}

/// A client that goes away in the middle of a linked KeepCopy: the object is
/// still completed from the intake.
#[test]
fn linked_keep_copy_survives_a_client_abort() {
    if uring_refused() {
        return;
    }
    // Larger than the pipes can hold while the client takes nothing: the
    // abort is seen before the body is whole.
    let b = body(6_000_000);
    let mut r = rig();
    let mut relay = r.relay(
        Framing::Length(b.len() as u64),
        Plan {
            linked: true,
            ..plan(Want::Tee, Some(1 << 30))
        },
    );
    let feeder = feed(&r, b.clone());
    // Read a little, then hang up.
    let mut first = vec![0u8; 10_000];
    let (mut aborted, mut got) = (false, 0);
    let mut cl = r.cl_r.try_clone().unwrap();
    // Non-blocking: the first Wait may come before any byte reached the
    // client (a blocking read here would wait for a relay nobody pumps).
    cl.set_nonblocking(true).unwrap();
    r.pump_to_done(&mut relay, None, || {
        if aborted {
            return;
        }
        match cl.read(&mut first[got..]) {
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("client read: {e}"),
        }
        if got == first.len() {
            cl.shutdown(std::net::Shutdown::Both).unwrap();
            aborted = true;
        }
    });
    feeder.join().unwrap();
    assert!(first[..] == b[..first.len()]);
    assert!(relay.client_gone(), "the abort was seen");
    let cached = r.finish(relay);
    assert!(cached.as_deref() == Some(&b[..]), "object completed after the abort");
    assert_eq!(r.st.sessions_orphan_fill, 1);
}

/// The object is handed over whole (`Pump::Whole`) before the client has
/// been sent the last of it, on every filling path: the request a client
/// sends once it has the whole response finds the object stored, whichever
/// worker takes it.
#[test]
fn the_object_is_whole_before_the_client_has_the_last_bytes() {
    let b = body(50_000);
    // (path, linked chains, chunked)
    let cases = [
        (Want::Copy, false, false),
        (Want::Tee, false, false),
        (Want::Tee, true, false),
        (Want::Copy, false, true),
        (Want::Tee, false, true),
    ];
    for (want, linked, chunked) in cases {
        if linked && uring_refused() {
            continue;
        }
        let what = format!("{want:?} linked={linked} chunked={chunked}");
        let (framing, wire) = if chunked {
            let dec = ChunkedDecoder::new();
            let framing = Framing::Chunked {
                dec,
                keep_framing: true,
            };
            (framing, chunked_wire(&b, 10_007))
        } else {
            (Framing::Length(b.len() as u64), b.clone())
        };
        let mut r = rig();
        let mut relay = r.relay(
            framing,
            Plan {
                linked,
                ..plan(want, Some(1 << 30))
            },
        );
        // All of it is there from the start (it fits the socket's buffer).
        r.up_w.write_all(&wire).unwrap();
        let mut pumps = 0;
        loop {
            let (mut may_read, mut may_write) = (true, true);
            match r.pump(&mut relay, None, &mut may_read, &mut may_write) {
                Pump::Whole => break,
                Pump::Yield | Pump::Wait { .. } => {}
                other => panic!("{what}: {other:?}"),
            }
            pumps += 1;
            assert!(pumps < 1000, "{what}: never whole");
        }
        let delivered = sys::bytes_readable(r.cl_r.as_fd()).unwrap();
        assert!(
            delivered < wire.len(),
            "{what}: the client had it all ({delivered}) first"
        );
        r.take_whole(&mut relay);
        let reader = drain(&r);
        r.pump_to_done(&mut relay, None, || {});
        while !r.out.is_empty() {
            r.out.flush(r.cl_w.as_fd(), &[], &mut []).unwrap();
        }
        let cached = r.finish(relay);
        drop(r.cl_w);
        assert!(reader.join().unwrap() == wire, "{what}: the client's bytes");
        assert!(cached.as_deref() == Some(&b[..]), "{what}: the object");
        if want == Want::Copy && !chunked {
            assert_eq!(r.st.bytes_copied, b.len() as u64, "{what}: copied bytes counted once");
        }
    }
}

/// An upstream that stops part way through a KeepCopy fill's body: the
/// client has the head and every byte read before the session ends, as on
/// the copy and splice paths. Per call, the FIN is found by the read right
/// after the tee that put the last bytes in the client's pipe. With linked
/// chains it is found by the chain after the one that read the last bytes,
/// or by the first chain, while the bytes (and the head) wait in the
/// client's pipe: a chain that may complete the object ends at the tee.
/// Either way `Relay::ended` sends them before the session ends.
#[test]
fn a_fill_cut_short_has_sent_the_client_what_came() {
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n";
    let cases = [
        (false, false, 50_000),
        (false, false, 0),
        (true, true, 50_000),
        (true, false, 50_000),
        (true, true, 0),
        (true, false, 0),
    ];
    for (linked, linked_head, sent) in cases {
        if linked && uring_refused() {
            continue;
        }
        let b = body(sent);
        let mut r = rig();
        let mut relay = r.relay(
            Framing::Length(60_000),
            Plan {
                linked,
                linked_head,
                ..plan(Want::Tee, Some(1 << 30))
            },
        );
        r.out.push_copy(head);
        r.up_w.write_all(&b).unwrap();
        r.up_w.shutdown(std::net::Shutdown::Write).unwrap();
        let reader = drain(&r);
        let mut pumps = 0;
        loop {
            let (mut may_read, mut may_write) = (true, true);
            match r.pump(&mut relay, None, &mut may_read, &mut may_write) {
                Pump::UpstreamFailed(_) => break,
                Pump::Yield | Pump::Wait { .. } => {}
                other => panic!("linked={linked} linked_head={linked_head} sent={sent}: {other:?}"),
            }
            pumps += 1;
            assert!(
                pumps < 1000,
                "linked={linked} linked_head={linked_head} sent={sent}: never failed"
            );
        }
        // The session ends here (the client is closed): nothing may wait in
        // the output queue.
        assert!(
            r.out.is_empty(),
            "linked={linked} linked_head={linked_head} sent={sent}: head left queued"
        );
        assert!(r.finish(relay).is_none(), "a cut object is not kept");
        drop(r.cl_w);
        let got = reader.join().unwrap();
        assert_eq!(
            got.len(),
            head.len() + b.len(),
            "linked={linked} linked_head={linked_head} sent={sent}"
        );
        assert!(&got[..head.len()] == head && got[head.len()..] == b[..]);
    }
}

/// A client that goes away once the whole body has been read from the
/// upstream ends the session as Done (the upstream connection stays
/// reusable), and the pipe that held its bytes is closed, never pooled.
#[test]
fn a_client_gone_after_the_whole_body_ends_done_and_its_pipe_is_not_pooled() {
    let b = body(20_000);
    let mut r = rig();
    let mut relay = r.relay(Framing::Length(b.len() as u64), plan(Want::Splice, None));
    r.up_w.write_all(&b).unwrap();
    // The client is gone before anything was sent to it.
    let (dead_w, dead_r) = UnixStream::pair().unwrap();
    dead_w.set_nonblocking(true).unwrap();
    drop(dead_r);
    let (mut may_read, mut may_write) = (true, true);
    let mut e = Ends {
        client: Some(dead_w.as_fd()),
        client_may_write: &mut may_write,
        out: &mut r.out,
        up: r.up_r.as_fd(),
        up_may_read: &mut may_read,
        up_buf: &mut r.up_buf,
        bufs: &mut r.bufs,
        kernel: &mut r.kernel,
    };
    let mut pumps = 0;
    let end = loop {
        match relay.pump(&mut e, &mut r.st) {
            Pump::Yield | Pump::Wait { .. } => {}
            p => break p,
        }
        pumps += 1;
        assert!(pumps < 1000, "never ended");
    };
    assert_eq!(end, Pump::Done);
    assert!(relay.client_gone());
    let idle = r.pool.idle();
    assert!(r.finish(relay).is_none());
    assert_eq!(r.pool.idle(), idle, "a pipe a gone client used is not pooled");
    assert_eq!(r.st.sessions_client_abort, 1);
}
