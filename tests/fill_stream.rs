//! Collapsed forwarding streams (weft-proxy `fill.rs`, read-while-write):
//! requests for an object whose fill is under way get its head and the
//! bytes that have arrived at once, and the rest as it comes, instead of
//! waiting for the last byte. The origin here sends a head and half of a
//! large body, then holds the rest until the test lets it go (or, for the
//! failure case, closes instead).

use crate::common;

use common::{counter, next_head, pattern, stop_stats, wait_until, Reader, Weft};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LEN: usize = 600_000;
const HALF: usize = LEN / 2;

/// Stages of the held origin: 0 holds the answer, 1 sends the head and
/// the first half, 2 sends the rest, 3 closes after the half instead, 4
/// sends a quarter more and holds the last quarter until 5.
struct HeldBody {
    addr: SocketAddr,
    stage: Arc<AtomicUsize>,
    seen: Arc<AtomicUsize>,
}

/// How the held origin frames its body.
#[derive(Clone, Copy)]
enum Body {
    /// Content-Length.
    Length,
    /// Chunked, 70,000 bytes a chunk.
    Chunked,
    /// No framing: ended by the close.
    Close,
}

impl HeldBody {
    fn start() -> HeldBody {
        HeldBody::framed(Body::Length)
    }

    fn framed(framing: Body) -> HeldBody {
        let stage = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let (st, sn) = (stage.clone(), seen.clone());
        let wire = move |part: &[u8]| match framing {
            Body::Chunked => {
                let mut wire = Vec::new();
                for piece in part.chunks(70_000) {
                    wire.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    wire.extend_from_slice(piece);
                    wire.extend_from_slice(b"\r\n");
                }
                wire
            }
            Body::Length | Body::Close => part.to_vec(),
        };
        let addr = common::tcp_server(move |mut s| {
            let mut buf = Vec::new();
            while next_head(&mut s, &mut buf).is_some() {
                sn.fetch_add(1, Ordering::SeqCst);
                let at_least = |n: usize| {
                    while st.load(Ordering::SeqCst) < n {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                };
                at_least(1);
                let body = pattern(LEN);
                let field = match framing {
                    Body::Length => format!("Content-Length: {LEN}"),
                    Body::Chunked => "Transfer-Encoding: chunked".to_string(),
                    Body::Close => "Connection: close".to_string(),
                };
                let head = format!("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\n{field}\r\n\r\n");
                if s.write_all(head.as_bytes()).is_err() || s.write_all(&wire(&body[..HALF])).is_err() {
                    return;
                }
                at_least(2);
                let mut from = HALF;
                if st.load(Ordering::SeqCst) == 4 {
                    from += LEN / 4;
                    if s.write_all(&wire(&body[HALF..from])).is_err() {
                        return;
                    }
                    at_least(5);
                }
                let mut rest = wire(&body[from..]);
                if let Body::Chunked = framing {
                    rest.extend_from_slice(b"0\r\n\r\n");
                }
                if st.load(Ordering::SeqCst) == 3 || s.write_all(&rest).is_err() {
                    return;
                }
                if let Body::Close = framing {
                    return;
                }
            }
        });
        HeldBody { addr, stage, seen }
    }
}

/// The end of a fill that went well: the origin saw one request, and the
/// proxy (stopped here) stored one object and cut no follower short.
fn one_fetch_stored(o: &HeldBody, p: Weft, what: &str) {
    assert_eq!(o.seen.load(Ordering::SeqCst), 1, "{what}: one request at the origin");
    let stats = stop_stats(p);
    assert_eq!(counter(&stats, "stored"), 1, "{what}: {stats}");
    assert_eq!(counter(&stats, "followers_cut"), 0, "{what}: {stats}");
}

/// A leader whose fill the origin has begun and a waiter that follows it,
/// once the follower has the head and the first half.
fn leader_and_follower_at_half(o: &HeldBody, p: &Weft) -> (Reader, Reader) {
    let leader = ask(p);
    assert!(wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 1));
    let mut follower = ask(p);
    assert!(wait_until(Duration::from_secs(10), || stats_of(p, "collapsed") == 1));
    o.stage.store(1, Ordering::SeqCst);
    read_head_and(&mut follower, HALF);
    (leader, follower)
}

/// A client that sent `GET /big` and reads its answer.
fn ask(p: &Weft) -> Reader {
    ask_with(p, b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
}

/// A client that sent `request`.
fn ask_with(p: &Weft, request: &[u8]) -> Reader {
    let s = p.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = Reader::new(s);
    r.send(request);
    r
}

/// Read until the head and `n` body bytes are in; the head's text.
fn read_head_and(r: &mut Reader, n: usize) -> String {
    loop {
        if let Some(i) = r.buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if r.buf.len() >= i + 4 + n {
                return String::from_utf8_lossy(&r.buf[..i + 4]).into_owned();
            }
        }
        assert!(r.fill() > 0, "closed after {} bytes", r.buf.len());
    }
}

fn stats_of(p: &Weft, name: &str) -> u64 {
    common::admin_total(p, name)
}

fn proxy(o: &HeldBody, event: &str, splice: &str) -> Weft {
    common::collapsing_proxy(&o.addr.to_string(), event, &["--splice", splice])
}

/// Waiters (woken when the head comes) and a request that comes later
/// (joining the stream at once) get the first half while the origin holds
/// the second; then all bodies are whole, the origin saw one request, and
/// the object is stored. Under each backend, spliced (tee into the cache)
/// and copied.
#[test]
fn waiters_follow_a_fill_as_it_arrives() {
    let whole = pattern(LEN);
    for (event, splice) in [("epoll", "auto"), ("uring", "off"), ("tracked", "auto")] {
        let o = HeldBody::start();
        let p = proxy(&o, event, splice);
        let what = format!("{event}, --splice {splice}");
        let mut leader = ask(&p);
        assert!(wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 1));
        let mut waiters: Vec<Reader> = (0..3).map(|_| ask(&p)).collect();
        // A HEAD waits too and gets the head alone; a client that pipelined
        // a second GET behind its first gets it after the followed body.
        let mut head_only = ask_with(&p, b"HEAD /big HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut pipelined = ask_with(&p, &b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n".repeat(2));
        assert!(
            wait_until(Duration::from_secs(10), || stats_of(&p, "collapsed") == 5),
            "{what}: {} waited",
            stats_of(&p, "collapsed")
        );
        // Head and half: everyone has them while the origin holds the rest.
        o.stage.store(1, Ordering::SeqCst);
        let head = head_only.response(true);
        assert_eq!(head.header("content-length"), Some(LEN.to_string().as_str()), "{what}");
        read_head_and(&mut pipelined, HALF);
        read_head_and(&mut leader, HALF);
        for w in &mut waiters {
            let head = read_head_and(w, HALF);
            assert!(head.contains(&format!("Content-Length: {LEN}")), "{what}: {head}");
            assert!(head.starts_with("HTTP/1.1 200"), "{what}: {head}");
        }
        let mut late = ask(&p);
        let head = read_head_and(&mut late, HALF);
        assert!(head.contains("Age: "), "{what}: answered from the cache: {head}");
        // A worker publishes its counters after the batch that wrote these
        // bytes: a reader may see the bytes a moment before the count.
        assert!(
            wait_until(Duration::from_secs(5), || stats_of(&p, "followed") == 6),
            "{what}: {} followed",
            stats_of(&p, "followed")
        );
        // The rest.
        o.stage.store(2, Ordering::SeqCst);
        for _ in 0..2 {
            assert!(pipelined.response(false).body == whole, "{what}: pipelined");
        }
        head_only.send(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(head_only.response(false).body == whole, "{what}: after the HEAD");
        for mut r in std::iter::once(leader).chain(waiters).chain([late]) {
            let resp = r.response(false);
            assert_eq!(resp.status, 200, "{what}");
            assert!(resp.body == whole, "{what}: {} bytes, not the object", resp.body.len());
            // The connection goes on: a hit now.
            r.send(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
            assert!(r.response(false).body == whole, "{what}");
        }
        one_fetch_stored(&o, p, &what);
    }
}

/// Ranges and conditionals are answered from a fill's stream as a hit's
/// are: a conditional that matches gets its 304 at once, a range whose
/// first byte has arrived its 206 (and the rest of its part as it comes);
/// a range beyond what has arrived does not wait, it goes to the origin.
#[test]
fn ranges_and_conditionals_are_answered_from_the_stream() {
    let whole = pattern(LEN);
    let o = HeldBody::start();
    let p = proxy(&o, "epoll", "auto");
    let mut leader = ask(&p);
    assert!(wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 1));
    o.stage.store(1, Ordering::SeqCst);
    read_head_and(&mut leader, HALF);
    // The leader's client can have a byte before the fill does (a tee
    // sends it on before the copy for the cache is read), and a range
    // follows only what the fill has: without this wait, one run in ten
    // forwarded the first range, and the origin held its answer.
    assert!(
        wait_until(Duration::from_secs(5), || stats_of(&p, "bytes_filled") >= HALF as u64),
        "{} bytes filled",
        stats_of(&p, "bytes_filled")
    );
    let get = |extra: &str| format!("GET /big HTTP/1.1\r\nHost: h\r\n{extra}\r\n").into_bytes();
    // Within the first half: a 206 now, from the stream.
    let mut near = ask_with(&p, &get("Range: bytes=1000-1999\r\n"));
    let r = near.response(false);
    assert_eq!(
        (r.status, r.header("content-range")),
        (206, Some("bytes 1000-1999/600000"))
    );
    assert!(r.body == whole[1000..2000]);
    // Across the half: the head and what has arrived now, the rest later.
    let mut across = ask_with(&p, &get(&format!("Range: bytes={}-{}\r\n", HALF - 10, HALF + 9)));
    let head = read_head_and(&mut across, 10);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    // A validator that matches: 304 at once, no body to wait for.
    let mut cond = ask_with(&p, &get("If-None-Match: \"v1\"\r\n"));
    assert_eq!(cond.response(true).status, 304);
    assert!(
        wait_until(Duration::from_secs(5), || stats_of(&p, "followed") == 3),
        "{} followed",
        stats_of(&p, "followed")
    );
    assert_eq!(o.seen.load(Ordering::SeqCst), 1, "all three from the stream");
    // Beyond what has arrived: forwarded, not held behind the fill.
    let _far = ask_with(&p, &get("Range: bytes=500000-500099\r\n"));
    assert!(
        wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 2),
        "the far range did not reach the origin"
    );
    o.stage.store(2, Ordering::SeqCst);
    let r = across.response(false);
    assert!(r.body == whole[HALF - 10..HALF + 10], "{} bytes", r.body.len());
    assert!(leader.response(false).body == whole);
    // The connections go on after their partial answers.
    near.send(&get("Range: bytes=-5\r\n"));
    let r = near.response(false);
    assert_eq!((r.status, r.body.as_slice()), (206, &whole[LEN - 5..]));
    let stats = stop_stats(p);
    assert_eq!(counter(&stats, "followers_cut"), 0, "{stats}");
}

/// Without range fills a Range request waits for a fill like any other:
/// a range and a conditional that came before the head are woken by the
/// stream and answered from it (206 and 304) while the origin still holds
/// the second half; one request reached the origin.
#[test]
fn waiting_ranges_and_conditionals_are_woken_by_the_stream() {
    let whole = pattern(LEN);
    let o = HeldBody::start();
    let p = common::collapsing_proxy(&o.addr.to_string(), "epoll", &["--range-fill", "false"]);
    let mut leader = ask(&p);
    assert!(wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 1));
    let get = |extra: &str| format!("GET /big HTTP/1.1\r\nHost: h\r\n{extra}\r\n").into_bytes();
    let mut range = ask_with(&p, &get("Range: bytes=100-299\r\n"));
    let mut cond = ask_with(&p, &get("If-None-Match: \"v1\"\r\n"));
    assert!(
        wait_until(Duration::from_secs(10), || stats_of(&p, "collapsed") == 2),
        "{} waited",
        stats_of(&p, "collapsed")
    );
    o.stage.store(1, Ordering::SeqCst);
    let r = range.response(false);
    assert_eq!(
        (r.status, r.header("content-range")),
        (206, Some("bytes 100-299/600000"))
    );
    assert!(r.body == whole[100..300]);
    assert_eq!(cond.response(true).status, 304);
    assert_eq!(stats_of(&p, "followed"), 2);
    assert_eq!(o.seen.load(Ordering::SeqCst), 1, "both from the stream");
    o.stage.store(2, Ordering::SeqCst);
    assert!(leader.response(false).body == whole);
    let stats = stop_stats(p);
    assert_eq!(counter(&stats, "followers_cut"), 0, "{stats}");
}

/// A fill that fails mid-body cuts its followers' answers short (their
/// connections close before the length they were sent, or, chunked,
/// without the last chunk), stores nothing, and the next request asks the
/// origin again.
#[test]
fn a_failed_fill_cuts_its_followers() {
    for framing in [Body::Length, Body::Chunked] {
        let o = HeldBody::framed(framing);
        let p = proxy(&o, "epoll", "auto");
        let (mut leader, mut follower) = leader_and_follower_at_half(&o, &p);
        // The origin closes instead of sending the rest.
        o.stage.store(3, Ordering::SeqCst);
        for r in [&mut leader, &mut follower] {
            assert!(r.response_any(false).is_err(), "a cut answer is not whole");
        }
        assert!(wait_until(Duration::from_secs(10), || stats_of(&p, "followers_cut") == 1));
        // Nothing stored: the next request goes to the origin (which now sends all).
        o.stage.store(2, Ordering::SeqCst);
        let mut again = ask(&p);
        assert!(again.response_any(false).unwrap().body == pattern(LEN));
        assert_eq!(o.seen.load(Ordering::SeqCst), 2);
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "stored"), 1, "{stats}");
    }
}

/// A fill that others follow is not paced by its own client: the leader's
/// client here reads nothing until its follower has the whole object (a
/// tee would wait for it; the relay goes on by copying, counted). The same
/// for a chunked body, whose copied path once stopped reading the origin
/// while the leader's queue was full.
#[test]
fn a_slow_leader_client_does_not_hold_its_followers() {
    const BIG: usize = 8_000_000;
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let addr = common::tcp_server(move |mut s| {
        let mut buf = Vec::new();
        while let Some(head) = next_head(&mut s, &mut buf) {
            counted.fetch_add(1, Ordering::SeqCst);
            let chunked = head.starts_with("GET /chunked ");
            let field = if chunked {
                "Transfer-Encoding: chunked".to_string()
            } else {
                format!("Content-Length: {BIG}")
            };
            let head = format!("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n{field}\r\n\r\n");
            let mut body = Vec::with_capacity(BIG + BIG / 1000);
            if chunked {
                for piece in pattern(BIG).chunks(100_000) {
                    body.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    body.extend_from_slice(piece);
                    body.extend_from_slice(b"\r\n");
                }
                body.extend_from_slice(b"0\r\n\r\n");
            } else {
                body = pattern(BIG);
            }
            if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
                return;
            }
        }
    });
    for (event, path) in [
        ("epoll", "/big"),
        ("uring", "/big"),
        ("epoll", "/chunked"),
        ("uring", "/chunked"),
    ] {
        let what = format!("{event} {path}");
        let p = common::collapsing_proxy(&addr.to_string(), event, &["--splice", "auto"]);
        let before = seen.load(Ordering::SeqCst);
        let request = format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n");
        // The leader's socket takes little, so its queue in the proxy fills.
        let s = std::net::TcpStream::connect(p.addr).unwrap();
        weft_io::sys::set_rcvbuf(&s, 16 * 1024).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut leader = Reader::new(s);
        leader.send(request.as_bytes());
        assert!(wait_until(Duration::from_secs(10), || seen.load(Ordering::SeqCst) == before + 1));
        let mut follower = ask_with(&p, request.as_bytes());
        let got = follower.response_any(false).unwrap();
        assert!(
            got.body == pattern(BIG),
            "{what}: {} bytes, not the object",
            got.body.len()
        );
        assert!(leader.response_any(false).unwrap().body == pattern(BIG), "{what}");
        assert_eq!(seen.load(Ordering::SeqCst), before + 1, "{what}");
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "followed"), 1, "{what}: {stats}");
        assert!(counter(&stats, "fills_decoupled") >= 1, "{what}: {stats}");
    }
}

/// A chunked fill is streamed too: its length is unknown until its last
/// chunk, so HTTP/1.1 followers get it chunked and an HTTP/1.0 one up to
/// the close, with the first half while the origin holds the second. A
/// conditional gets its 304 from the stream; a Range, which needs the
/// length, waits for the end and gets its 206 from the stored object. The
/// same for a body the origin ended with its close.
#[test]
fn a_chunked_fill_is_streamed_chunked() {
    let whole = pattern(LEN);
    for (event, splice, close_delimited) in [
        ("epoll", "auto", false),
        ("uring", "off", false),
        ("epoll", "auto", true),
    ] {
        let what = format!("{event}, --splice {splice}, close-delimited {close_delimited}");
        let o = HeldBody::framed(if close_delimited { Body::Close } else { Body::Chunked });
        let p = common::collapsing_proxy(
            &o.addr.to_string(),
            event,
            &["--splice", splice, "--range-fill", "false"],
        );
        let leader = ask(&p);
        assert!(wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 1));
        let get = |extra: &str| format!("GET /big HTTP/1.1\r\nHost: h\r\n{extra}\r\n").into_bytes();
        let mut waiters: Vec<Reader> = (0..2).map(|_| ask(&p)).collect();
        let mut old = ask_with(&p, b"GET /big HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n");
        let mut head_only = ask_with(&p, b"HEAD /big HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut cond = ask_with(&p, &get("If-None-Match: \"v1\"\r\n"));
        let mut range = ask_with(&p, &get("Range: bytes=1000-1999\r\n"));
        assert!(
            wait_until(Duration::from_secs(10), || stats_of(&p, "collapsed") == 6),
            "{what}: {} waited",
            stats_of(&p, "collapsed")
        );
        o.stage.store(1, Ordering::SeqCst);
        for w in &mut waiters {
            let head = read_head_and(w, HALF);
            assert!(head.starts_with("HTTP/1.1 200"), "{what}: {head}");
            assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{what}: {head}");
            assert!(!head.contains("Content-Length"), "{what}: {head}");
        }
        let head = read_head_and(&mut old, HALF);
        assert!(head.contains("Connection: close\r\n"), "{what}: {head}");
        assert!(
            !head.contains("Transfer-Encoding") && !head.contains("Content-Length"),
            "{what}: {head}"
        );
        let r = head_only.response_any(true).unwrap();
        assert_eq!(r.status, 200, "{what}");
        assert_eq!(cond.response(true).status, 304, "{what}");
        // The late comer joins the stream at once.
        let mut late = ask(&p);
        read_head_and(&mut late, HALF);
        assert_eq!(stats_of(&p, "followed"), 6, "{what}");
        o.stage.store(2, Ordering::SeqCst);
        let mut leader = leader;
        let resp = leader.response_any(false).unwrap();
        assert!(resp.body == whole, "{what}: the leader's {} bytes", resp.body.len());
        for mut r in waiters.into_iter().chain([late]) {
            let resp = r.response_any(false).unwrap();
            assert_eq!(resp.status, 200, "{what}");
            let differs = resp.body.iter().zip(&whole).position(|(a, b)| a != b);
            assert!(
                resp.body == whole,
                "{what}: {} bytes, not the object (from {differs:?})",
                resp.body.len()
            );
            // The connection goes on: a hit, with its length.
            r.send(&get(""));
            let hit = r.response(false);
            assert!(hit.body == whole, "{what}");
        }
        let r = old.response_any(false).unwrap();
        assert!(r.close_delimited && r.body == whole, "{what}: {} bytes", r.body.len());
        let r = range.response(false);
        assert_eq!(
            (r.status, r.header("content-range")),
            (206, Some("bytes 1000-1999/600000")),
            "{what}"
        );
        assert!(r.body == whole[1000..2000], "{what}");
        one_fetch_stored(&o, p, &what);
    }
}

/// A chunked fill that grows past `--max-object-size` is not kept: its
/// follower is cut then (the rest would not be kept for it), not when the
/// leader's transfer ends, and the key passes at once: a request that
/// comes while the leader still reads goes to the origin. The leader gets
/// all of it; nothing is stored.
#[test]
fn a_chunked_fill_past_the_size_limit_cuts_its_followers_and_passes() {
    let o = HeldBody::framed(Body::Chunked);
    let limit = (HALF + LEN / 8).to_string();
    let p = common::collapsing_proxy(&o.addr.to_string(), "epoll", &["--max-object-size", &limit]);
    let (mut leader, mut follower) = leader_and_follower_at_half(&o, &p);
    // Past the limit, and the origin holds the last quarter: the follower's
    // answer ends now (a read that waited for the leader's end would time
    // out and fail the test).
    o.stage.store(4, Ordering::SeqCst);
    assert!(follower.response_any(false).is_err(), "the follower's answer is cut");
    let mut again = ask(&p);
    assert!(
        wait_until(Duration::from_secs(10), || o.seen.load(Ordering::SeqCst) == 2),
        "the key passes while the leader reads"
    );
    o.stage.store(5, Ordering::SeqCst);
    assert!(leader.response_any(false).unwrap().body == pattern(LEN));
    assert!(again.response_any(false).unwrap().body == pattern(LEN));
    let stats = stop_stats(p);
    assert_eq!(counter(&stats, "stored"), 0, "{stats}");
    assert_eq!(counter(&stats, "followers_cut"), 1, "{stats}");
}
