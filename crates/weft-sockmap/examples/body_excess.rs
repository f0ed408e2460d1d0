//! Experiment behind the body path's `passed` bytes (bpf/sockmap.bpf.c): a
//! 100,000-byte body joined, then the upstream sends it with 0, 7 and 70,000
//! bytes past it in one write. The skb holding the body's end and the bytes
//! past it is passed up (bpf_skb_change_tail cannot cut it); the client must
//! get exactly the body once the passed tail is written after the marker.
//!
//!   cargo run -p weft-sockmap --example body_excess
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;
use weft_io::sys;
use weft_sockmap::Forwarder;

mod common;
use common::pair;

fn main() {
    let mut f = Forwarder::load().expect("load");
    for extra in [0usize, 7, 70000] {
        let (mut a, b) = pair();
        let (c, mut d) = pair();
        let n = 100_000u64;
        let body = f.join_body(b.as_fd(), c.as_fd(), n, 1).unwrap();
        let data = vec![b'x'; n as usize + extra];
        d.write_all(&data).unwrap();
        let mut done = Vec::new();
        let ring = f.ring_fd();
        let ok = sys::wait_ready(ring, false, Duration::from_millis(300)).unwrap();
        f.take_done(&mut done);
        let p0 = f.body_progress(&body).unwrap();
        let mut tail = vec![0u8; p0.passed as usize];
        if !tail.is_empty() {
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            (&c).read_exact(&mut tail).unwrap();
        }
        let p = f.release_upstream(&body, c.as_fd()).unwrap();
        println!("extra {extra}: ring {ok} {done:?} progress {p:?}");
        f.mark_body(&body).unwrap();
        let ok = sys::wait_ready(b.as_fd(), false, Duration::from_secs(2)).unwrap();
        println!("  marker {ok} {:?}", sys::take_socket_error(b.as_fd()));
        f.leave_body(body);
        (&b).write_all(&tail).unwrap();
        drop(b);
        a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut got = Vec::new();
        let r = a.read_to_end(&mut got);
        println!("  client got {} ({r:?})", got.len());
    }
}
