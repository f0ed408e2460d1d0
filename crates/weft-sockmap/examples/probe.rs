//! Experiment behind docs/proxy.md (sockmap): RUNS tunnels of SIZE bytes
//! (client -> b ~kernel~> c -> upstream), end of stream on b, marker to c,
//! EPIPE on c, half-close; byte-exact each time. With a third argument both
//! ends send before the join (bytes waiting in the receive queues).
//!
//!   cargo run -p weft-sockmap --example probe -- [RUNS] [SIZE] [banner]
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use weft_io::sys;
use weft_sockmap::Forwarder;

mod common;
use common::pair;

fn main() {
    let mut f = Forwarder::load().expect("load");
    let runs: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(50);
    let size: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let banner = std::env::args().nth(3).is_some();
    let (mut immediate, mut evented) = (0, 0);
    for run in 0..runs {
        let (mut a, b) = pair(); // a: client, b: weft's client socket
        let (c, mut d) = pair(); // c: weft's upstream socket, d: upstream
        if banner {
            d.write_all(b"banner").unwrap();
            a.write_all(b"early").unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let p = f.join(b.as_fd(), c.as_fd(), 0, None).expect("join");
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let w = {
            let data = data.clone();
            let mut a2 = a.try_clone().unwrap();
            std::thread::spawn(move || {
                a2.write_all(&data).unwrap();
                a2.shutdown(Shutdown::Write).unwrap();
            })
        };
        let r = std::thread::spawn(move || {
            let mut got = Vec::new();
            d.read_to_end(&mut got).unwrap();
            got
        });
        // Wait for the FIN on b (an experiment may poll; weft waits for EPOLLRDHUP).
        let t0 = Instant::now();
        loop {
            if sys::bpf::fin_received(b.as_fd()).unwrap() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
            assert!(t0.elapsed() < Duration::from_secs(10), "no eof");
        }
        let _ = sys::bpf::fin_received(b.as_fd());
        f.mark(&p, 1).unwrap();
        c.set_nonblocking(true).unwrap();
        let e = sys::take_socket_error(c.as_fd()).unwrap();
        if e.is_some() {
            immediate += 1;
        } else {
            let ok = sys::wait_ready(c.as_fd(), false, Duration::from_secs(5)).unwrap();
            assert!(ok, "run {run}: no marker");
            let e = sys::take_socket_error(c.as_fd()).unwrap();
            assert!(e.is_some(), "run {run}: woken, no error");
            if run < 2 {
                println!("error: {e:?}");
            }
            evented += 1;
        }

        if run == 0 {
            println!("forwarded {} {}", f.forwarded(&p, 0), f.forwarded(&p, 1));
        }
        sys::shutdown_write(c.as_fd()).unwrap();
        w.join().unwrap();
        let got = r.join().unwrap();
        let want = if banner {
            [b"early".as_slice(), &data].concat()
        } else {
            data
        };
        assert_eq!(got.len(), want.len(), "run {run}");
        assert!(got == want, "run {run}: bytes differ");
        if banner {
            let mut buf = [0u8; 6];
            a.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"banner");
        }
        f.leave(p, Some([b.as_fd(), c.as_fd()]));
    }
    // Cost of a join and a leave (map updates), no traffic.
    let (mut tj, mut tl) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..200 {
        let (_a, b) = pair();
        let (c, _d) = pair();
        let t = Instant::now();
        let p = f.join(b.as_fd(), c.as_fd(), 0, None).expect("join");
        tj += t.elapsed();
        let t = Instant::now();
        f.leave(p, Some([b.as_fd(), c.as_fd()]));
        tl += t.elapsed();
    }
    println!("join {:?}, leave {:?} (mean of 200)", tj / 200, tl / 200);
    println!("runs {runs}: marker already through {immediate}, by EPOLLERR (EPIPE) {evented}");
}
