use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    (a, b)
}

fn temp_file(name: &str, data: &[u8]) -> Rc<std::fs::File> {
    let p = std::env::temp_dir().join(format!("weft-outchain-{}-{name}", std::process::id()));
    std::fs::File::create(&p).unwrap().write_all(data).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    Rc::new(f)
}

fn drain(mut a: UnixStream, mut b: UnixStream) -> Vec<u8> {
    a.flush().unwrap();
    drop(a);
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    got
}

static DOUBLED: &[u8] = b"0123456789012345678901234567890123456789";

#[test]
fn every_kind_leaves_in_order_with_counts_by_path() {
    let (a, b) = pair();
    let file = temp_file("order", b"FILEDATA");
    let (pr, pw) = sys::pipe().unwrap();
    sys::write(pw.raw(), b"piped").unwrap();
    let mut q = OutChain::new();
    q.push_copy(b"HEAD ");
    q.push_shared(Bytes::from_static(b"shared "));
    q.own_mut().extend_from_slice(b"own ");
    q.push_cyclic(DOUBLED, 7, 25);
    q.push_file(file.clone(), 4, 8, FileSend::Sendfile);
    q.push_copy(b" mid ");
    q.push_file(file, 0, 4, FileSend::Copy);
    q.push_pipe(pr.raw(), 5);
    let mut scratch = vec![0u8; 3];
    assert_eq!(q.len(), 5 + 7 + 4 + 25 + 4 + 5 + 4 + 5);
    assert!(!q.is_memory_only());
    let f = q.flush(a.as_raw_fd(), b"", &mut scratch).unwrap();
    assert!(!f.blocked);
    assert!(q.is_empty() && q.is_memory_only());
    assert_eq!((f.own, f.shared, f.sendfile, f.copied, f.spliced), (14, 32, 4, 4, 5));
    let got = drain(a, b);
    assert_eq!(
        String::from_utf8(got).unwrap(),
        "HEAD shared own 7890123456789012345678901DATA mid FILEpiped"
    );
}

#[test]
fn tail_follows_the_queue() {
    let (a, b) = pair();
    let mut q = OutChain::new();
    q.push_copy(b"queued ");
    q.push_shared(Bytes::from_static(b"shared "));
    let f = q.flush(a.as_raw_fd(), b"tail", &mut []).unwrap();
    assert_eq!((f.own, f.shared, f.tail, f.blocked), (7, 7, 4, false));
    // A tail alone goes out too.
    let f = q.flush(a.as_raw_fd(), b" more", &mut []).unwrap();
    assert_eq!(f.tail, 5);
    assert_eq!(drain(a, b), b"queued shared tail more");
}

#[test]
fn partial_writes_resume_where_they_stopped() {
    let (a, mut b) = pair();
    let big = Bytes::from(vec![7u8; 4 << 20]);
    let file = temp_file("partial", &vec![9u8; 3 << 20]);
    let mut q = OutChain::new();
    q.push_copy(b"x");
    q.push_shared(big.clone());
    q.push_copy(b"y");
    q.push_file(file.clone(), 0, 3 << 20, FileSend::Sendfile);
    q.push_copy(b"z");
    q.push_file(file, 1 << 20, 3 << 20, FileSend::Copy);
    q.push_cyclic(DOUBLED, 3, 1 << 20);
    let mut scratch = vec![0u8; 64 * 1024];
    let mut received = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    let mut blocked = 0;
    let mut tail_sent = 0;
    let tail = b"end";
    while !q.is_empty() || tail_sent < tail.len() {
        let f = q.flush(a.as_raw_fd(), &tail[tail_sent..], &mut scratch).unwrap();
        total += f.total();
        tail_sent += f.tail;
        if f.blocked {
            blocked += 1;
            let n = b.read(&mut buf).unwrap();
            received.extend_from_slice(&buf[..n]);
        }
    }
    assert!(blocked > 0, "the socketpair's buffer is smaller than the chain");
    received.extend_from_slice(&drain(a, b));
    let want_len = 1 + (4 << 20) + 1 + (3 << 20) + 1 + (2 << 20) + (1 << 20) + 3;
    assert_eq!(received.len(), want_len);
    assert_eq!(total, want_len as u64);
    let mut at = 0;
    let mut expect = |bytes: &[u8]| {
        assert!(&received[at..at + bytes.len()] == bytes, "differs at {at}");
        at += bytes.len();
    };
    expect(b"x");
    expect(&vec![7u8; 4 << 20]);
    expect(b"y");
    expect(&vec![9u8; 3 << 20]);
    expect(b"z");
    expect(&vec![9u8; 2 << 20]);
    let cyc: Vec<u8> = (0..1usize << 20).map(|i| DOUBLED[(3 + i) % 20]).collect();
    expect(&cyc);
    expect(b"end");
}

#[test]
fn a_file_that_shrank_is_an_error() {
    let (a, _b) = pair();
    let file = temp_file("shrunk", b"short");
    for how in [FileSend::Sendfile, FileSend::Copy] {
        let mut q = OutChain::new();
        q.push_file(file.clone(), 0, 100, how);
        let mut scratch = vec![0u8; 16];
        let mut err = None;
        for _ in 0..10 {
            match q.flush(a.as_raw_fd(), b"", &mut scratch) {
                Ok(_) => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert!(sys::is(&err.unwrap(), sys::Errno::Io), "{how:?}");
    }
}

#[test]
fn one_slice_is_one_send_and_a_head_joins_a_copied_chunk() {
    let (a, b) = pair();
    let file = temp_file("calls", b"0123456789");
    let before = sys::SysCounts::current();
    let mut q = OutChain::new();
    q.push_copy(b"head:");
    q.push_file(file, 0, 10, FileSend::Copy);
    let mut scratch = vec![0u8; 64];
    let f = q.flush(a.as_raw_fd(), b"", &mut scratch).unwrap();
    assert_eq!((f.own, f.copied), (5, 10));
    q.push_copy(b"|next");
    q.flush(a.as_raw_fd(), b"", &mut scratch).unwrap();
    let after = sys::SysCounts::current();
    assert_eq!(after.get(sys::SysKind::Writev) - before.get(sys::SysKind::Writev), 1);
    assert_eq!(after.get(sys::SysKind::Write) - before.get(sys::SysKind::Write), 1);
    assert_eq!(drain(a, b), b"head:0123456789|next");
}

#[test]
fn many_items_spill_past_the_inline_two_and_keep_order() {
    let (a, b) = pair();
    let mut q = OutChain::new();
    let mut want = Vec::new();
    for i in 0..200u32 {
        let s = format!("{i},");
        if i % 2 == 0 {
            q.push_copy(s.as_bytes());
        } else {
            q.push_shared(Bytes::from(s.clone().into_bytes()));
        }
        want.extend_from_slice(s.as_bytes());
    }
    q.push_copy(b"loose");
    want.extend_from_slice(b"loose");
    assert_eq!(q.memory_len(), want.len());
    while !q.is_empty() {
        assert!(!q.flush(a.as_raw_fd(), b"", &mut []).unwrap().blocked);
    }
    assert_eq!(q.own_len(), 0, "the own buffer is reused from its start");
    assert_eq!(drain(a, b), want);
}

#[test]
fn own_buffers_are_lent_while_something_is_queued() {
    let (a, b) = pair();
    let mut pool = OwnPool::new(64, 1024, 1);
    let mut q = OutChain::new();
    assert!(q.release_own(&mut pool), "nothing held");
    q.lend_own(&mut pool);
    assert_eq!((pool.lent(), q.own_capacity()), (1, 64));
    q.push_copy(b"answer");
    assert!(!q.release_own(&mut pool), "bytes queued: kept");
    q.flush(a.as_raw_fd(), b"", &mut []).unwrap();
    assert!(q.release_own(&mut pool));
    assert_eq!((pool.lent(), pool.idle(), q.own_capacity()), (0, 1, 0));
    // Reused, not reallocated; one that grew past the bound is freed.
    q.lend_own(&mut pool);
    assert_eq!(pool.idle(), 0);
    q.push_copy(&[b'x'; 2000]);
    q.clear();
    assert!(q.release_own(&mut pool));
    assert_eq!((pool.lent(), pool.idle()), (0, 0));
    assert_eq!(drain(a, b), b"answer");
}

#[test]
fn overflow_queues_go_back_to_the_pool() {
    let (a, b) = pair();
    let mut pool = OwnPool::new(64, 1024, 4);
    let mut q = OutChain::new();
    q.lend_own(&mut pool);
    q.push_copy(b"head ");
    for part in [&b"one "[..], b"two ", b"three"] {
        q.push_shared(Bytes::from_static(part));
    }
    assert!(q.items.spilled());
    q.flush(a.as_raw_fd(), b"", &mut []).unwrap();
    assert!(q.release_own(&mut pool));
    assert!(q.items.rest.is_none(), "an idle chain holds no queue");
    assert_eq!((pool.idle(), pool.idle_queues(), pool.idle_bytes()), (1, 1, 64));
    // Lent again with the next buffer.
    q.lend_own(&mut pool);
    assert!(q.items.rest.is_some());
    assert_eq!((pool.idle(), pool.idle_queues(), pool.idle_bytes()), (0, 0, 0));
    assert!(q.release_own(&mut pool));
    assert_eq!(drain(a, b), b"head one two three");
}

#[test]
fn the_chain_stays_small() {
    // Every connection of every role carries one (issue 21).
    let size = std::mem::size_of::<OutChain>();
    println!(
        "size_of::<OutChain>() = {size}, size_of::<InputBuf>() = {}",
        std::mem::size_of::<crate::InputBuf>()
    );
    assert!(size <= 160, "OutChain grew to {size} bytes");
}

#[test]
fn aggregates_are_pushed_as_segments() {
    let (a, b) = pair();
    let mut agg = weft_buf::Aggregate::new();
    agg.push(Bytes::from_static(b"one "));
    agg.push(Bytes::from_static(b"two"));
    let mut q = OutChain::new();
    q.push_aggregate(&agg);
    assert_eq!((q.len(), q.memory_len()), (7, 7));
    let f = q.flush(a.as_raw_fd(), b"", &mut []).unwrap();
    assert_eq!(f.shared, 7);
    assert_eq!(drain(a, b), b"one two");
}

/// A range of an aggregate crosses segment borders without building a
/// new aggregate; an empty or inverted range queues nothing.
#[test]
fn aggregate_ranges_are_pushed_as_slices() {
    let (a, b) = pair();
    let mut agg = weft_buf::Aggregate::new();
    agg.push(Bytes::from_static(b"one "));
    agg.push(Bytes::from_static(b"two "));
    agg.push(Bytes::from_static(b"three"));
    let mut q = OutChain::new();
    q.push_range(&agg, 2, 10);
    q.push_range(&agg, 5, 5);
    q.push_range(&agg, 9, 3);
    assert_eq!((q.len(), q.memory_len()), (8, 8));
    let f = q.flush(a.as_raw_fd(), b"", &mut []).unwrap();
    assert_eq!(f.shared, 8);
    assert_eq!(drain(a, b), b"e two th");
}

#[test]
fn handed_counts_what_was_sent_queued_or_written_past_the_chain() {
    let (a, b) = pair();
    let mut q = OutChain::new();
    assert_eq!(q.handed(), 0);
    q.push_copy(b"head ");
    q.push_shared(Bytes::from_static(b"body"));
    // Queued, not sent yet: counted.
    assert_eq!(q.handed(), 9);
    let mark = q.handed();
    // Sent with a tail the caller keeps: the tail counts too; the queue
    // leaving for the socket does not count twice.
    let f = q.flush(a.as_raw_fd(), b" tail", &mut []).unwrap();
    assert_eq!(f.total(), 14);
    assert_eq!(q.handed() - mark, 5);
    // A splice of the owner's pipe straight to the socket.
    q.note_sent(7);
    assert_eq!(q.handed(), 21);
    // Dropping what is queued (the peer left) takes back only the unsent.
    q.push_copy(b"unsent");
    assert_eq!(q.handed(), 27);
    q.clear();
    assert_eq!(q.handed(), 21);
    assert_eq!(drain(a, b), b"head body tail");
}
