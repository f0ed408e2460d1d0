//! Every backend through the generic loop: readiness delivery, interest changes,
//! timers, deferred close, and select's descriptor limit.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use weft_io::sys;
use weft_io::{BackendKind, Ctx, Event, Handler, Interest, Poller, Token};

struct Probe {
    seen: Vec<Event>,
    timers: Vec<Token>,
    stop_after: usize,
    deadline: Instant,
}

impl Probe {
    /// Stops after the first event or timer (or 5 s).
    fn one() -> Probe {
        Probe {
            seen: vec![],
            timers: vec![],
            stop_after: 1,
            deadline: Instant::now() + Duration::from_secs(5),
        }
    }
}

impl<P: Poller> Handler<P> for Probe {
    fn on_event(&mut self, _cx: &mut Ctx<P>, event: Event) {
        self.seen.push(event);
    }
    fn on_timer(&mut self, _cx: &mut Ctx<P>, token: Token, _due: Instant) -> Option<Instant> {
        self.timers.push(token);
        None
    }
    fn max_wait(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }
    fn keep_running(&self) -> bool {
        self.seen.len() + self.timers.len() < self.stop_after && Instant::now() < self.deadline
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// `p` reports nothing within 30 ms (into `ev`, cleared first).
#[track_caller]
fn assert_nothing_reported<P: Poller>(p: &mut P, ev: &mut Vec<Event>) {
    ev.clear();
    p.wait(ev, Some(Duration::from_millis(30))).unwrap();
    assert!(ev.is_empty(), "{ev:?}");
}

fn readiness<P: Poller>() {
    readiness_with::<P>(&weft_io::BackendOptions::default());
}

fn readiness_with<P: Poller>(opts: &weft_io::BackendOptions) {
    let mut cx = Ctx::<P>::with_options(opts).unwrap();
    let (mut a, b) = pair();
    let t = Token::new(7, 3);
    cx.register(b.as_raw_fd(), t, Interest::READ)
        .map_err(|e| e.to_string())
        .unwrap();
    a.write_all(b"ping").unwrap();
    let mut p = Probe::one();
    weft_io::run(&mut cx, &mut p).unwrap();
    assert_eq!(p.seen.len(), 1, "{}", P::CAPS.name);
    assert_eq!(p.seen[0].token, t, "the token (with its generation) comes back");
    assert!(p.seen[0].readable);
    // Ask for writability instead: a fresh socket is writable at once.
    cx.reregister(b.as_raw_fd(), t, Interest::WRITE).unwrap();
    let mut p = Probe::one();
    weft_io::run(&mut cx, &mut p).unwrap();
    assert!(p.seen[0].writable, "{}", P::CAPS.name);
    // A timer fires with its token.
    cx.reregister(b.as_raw_fd(), t, Interest::NONE).unwrap();
    let tt = Token::new(1, 1);
    cx.arm_timer(tt, Instant::now() + Duration::from_millis(30));
    let mut p = Probe::one();
    let t0 = Instant::now();
    weft_io::run(&mut cx, &mut p).unwrap();
    assert_eq!(p.timers, vec![tt]);
    assert!(t0.elapsed() >= Duration::from_millis(25));
    if !P::CAPS.close_deregisters {
        cx.poller.delete(b.as_raw_fd()).unwrap();
    }
}

/// One test per plain backend, each running `readiness` under it.
macro_rules! delivers_events {
    ($($test:ident: $backend:ident),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                readiness::<weft_io::backend::$backend>();
            }
        )+
    };
}

delivers_events!(
    select_delivers_events: Select,
    poll_delivers_events: Poll,
    epoll_delivers_events: Epoll,
    epoll_et_delivers_events: EpollEt,
    epoll_once_delivers_events: EpollOnce,
    epoll_batched_delivers_events: EpollBatched,
    uring_delivers_events: Uring,
);

#[test]
fn select_refuses_descriptors_at_fd_setsize() {
    let mut cx = Ctx::<weft_io::backend::Select>::new().unwrap();
    let err = cx
        .register(sys::FD_SETSIZE, Token::new(0, 0), Interest::READ)
        .unwrap_err();
    assert!(err.to_string().contains("1024"), "{err}");
    let err = cx.poller.add(5000, Token::new(0, 0), Interest::READ).unwrap_err();
    assert!(err.to_string().contains("FD_SETSIZE"), "{err}");
}

#[test]
fn poll_and_select_forget_deleted_descriptors() {
    fn check<P: Poller>() {
        let mut p = P::new().unwrap();
        let (_a, b) = pair();
        let (_c, d) = pair();
        p.add(b.as_raw_fd(), Token::new(1, 0), Interest::WRITE).unwrap();
        p.add(d.as_raw_fd(), Token::new(2, 0), Interest::WRITE).unwrap();
        p.delete(b.as_raw_fd()).unwrap();
        let mut ev = Vec::new();
        p.wait(&mut ev, Some(Duration::from_millis(100))).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].token, Token::new(2, 0));
        assert!(p.delete(b.as_raw_fd()).is_err());
    }
    check::<weft_io::backend::Poll>();
    check::<weft_io::backend::Select>();
}

#[test]
fn backend_names_round_trip() {
    for b in BackendKind::ALL {
        assert_eq!(b.name().parse::<BackendKind>().unwrap(), *b);
    }
    let e = "kqueue".parse::<BackendKind>().unwrap_err();
    assert!(e.contains("select|poll|epoll|epoll-et|epoll-once|epoll-batched|uring|tracked"));
    assert_eq!("tracked:uring".parse::<BackendKind>().unwrap(), BackendKind::Tracked);
}

#[test]
fn reuseport_group_shares_a_port_zero() {
    let (ls, addr) = weft_io::bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)), 3, 16).unwrap();
    assert_eq!(ls.len(), 3);
    assert_ne!(addr.port(), 0);
    for l in &ls {
        assert_eq!(sys::local_addr(l.raw()).unwrap(), addr);
    }
    TcpStream::connect(addr).unwrap();
}

#[test]
fn syscalls_are_counted() {
    let before = sys::SysCounts::current();
    let (r, w) = sys::pipe().unwrap();
    sys::write(w.raw(), b"abc").unwrap();
    let mut b = [0u8; 3];
    sys::read(r.raw(), &mut b).unwrap();
    drop((r, w));
    let after = sys::SysCounts::current();
    assert_eq!(after.get(sys::SysKind::Write) - before.get(sys::SysKind::Write), 1);
    assert_eq!(after.get(sys::SysKind::Read) - before.get(sys::SysKind::Read), 1);
    assert_eq!(after.get(sys::SysKind::Close) - before.get(sys::SysKind::Close), 2);
}

/// Wake-up batching changes when a wait returns, never what it returns.
#[test]
fn uring_and_tracked_deliver_events_with_wake_batching() {
    let opts = weft_io::BackendOptions {
        wake_interval: Duration::from_millis(1),
        ..Default::default()
    };
    readiness_with::<weft_io::backend::Uring>(&opts);
    readiness_with::<weft_io::backend::Tracked<weft_io::backend::Uring>>(&opts);
}

/// Once the completion rate is high enough for the backend to wait for a
/// batch, a lone completion is still delivered: the min-wait bound (ten
/// intervals) ends the wait, not the caller's long timeout.
#[test]
fn uring_batched_wait_returns_a_lone_completion() {
    use weft_io::backend::Uring;
    let mut p = Uring::new().unwrap();
    p.configure(&weft_io::BackendOptions {
        wake_interval: Duration::from_millis(2),
        ..Default::default()
    });
    let pairs: Vec<(TcpStream, TcpStream)> = (0..16).map(|_| pair()).collect();
    for (i, (_, b)) in pairs.iter().enumerate() {
        p.add(b.as_raw_fd(), Token::new(i as u32, 0), Interest::READ).unwrap();
    }
    let mut buf = [0u8; 64];
    let mut ev = Vec::new();
    // Bursts of 16 completions, back to back, for ~50 ms: a high rate.
    let until = Instant::now() + Duration::from_millis(50);
    while Instant::now() < until {
        for (a, _) in &pairs {
            (&*a).write_all(b"x").unwrap();
        }
        let mut got = 0;
        while got < pairs.len() {
            ev.clear();
            p.wait(&mut ev, Some(Duration::from_secs(5))).unwrap();
            got += ev.len();
        }
        for (_, b) in &pairs {
            while sys::read(b.as_raw_fd(), &mut buf).is_ok() {}
        }
    }
    (&pairs[3].0).write_all(b"x").unwrap();
    let t0 = Instant::now();
    ev.clear();
    while ev.is_empty() && t0.elapsed() < Duration::from_secs(5) {
        p.wait(&mut ev, Some(Duration::from_secs(5))).unwrap();
    }
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].token, Token::new(3, 0));
    assert!(t0.elapsed() < Duration::from_secs(2), "held back {:?}", t0.elapsed());
}

/// A ready completion ring is read without entering the kernel.
#[test]
fn uring_reads_ready_completions_without_a_syscall() {
    use weft_io::backend::Uring;
    let mut p = Uring::new().unwrap();
    let (mut a, b) = pair();
    let (mut c, d) = pair();
    p.add(b.as_raw_fd(), Token::new(1, 0), Interest::READ).unwrap();
    p.add(d.as_raw_fd(), Token::new(2, 0), Interest::READ).unwrap();
    a.write_all(b"x").unwrap();
    c.write_all(b"y").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut ev = Vec::new();
    let before = sys::SysCounts::current().get(sys::SysKind::UringEnter);
    // First wait submits the polls (one enter) and collects what is ready.
    p.wait(&mut ev, Some(Duration::from_millis(200))).unwrap();
    let mid = sys::SysCounts::current().get(sys::SysKind::UringEnter);
    assert_eq!(mid - before, 1);
    // Make more events arrive, then read them: the ring is non-empty, no enter.
    a.write_all(b"x").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut ev2 = Vec::new();
    p.wait(&mut ev2, Some(Duration::from_millis(200))).unwrap();
    let after = sys::SysCounts::current().get(sys::SysKind::UringEnter);
    assert!(ev.len() + ev2.len() >= 2, "{ev:?} {ev2:?}");
    assert!(ev.iter().chain(ev2.iter()).all(|e| e.readable));
    assert!(after - mid <= 1);
}

#[test]
fn batched_epoll_applies_changes_in_one_enter() {
    use weft_io::backend::EpollBatched;
    let mut p = EpollBatched::new().unwrap();
    let pairs: Vec<_> = (0..8).map(|_| pair()).collect();
    let before = sys::SysCounts::current();
    for (i, (_, b)) in pairs.iter().enumerate() {
        p.add(b.as_raw_fd(), Token::new(i as u32, 0), Interest::WRITE).unwrap();
    }
    let mut ev = Vec::new();
    p.wait(&mut ev, Some(Duration::from_millis(200))).unwrap();
    let after = sys::SysCounts::current();
    assert_eq!(ev.len(), 8);
    let ctl = after.get(sys::SysKind::EpollCtl) - before.get(sys::SysKind::EpollCtl);
    let enter = after.get(sys::SysKind::UringEnter) - before.get(sys::SysKind::UringEnter);
    if sys::probe_io_uring().is_ok() {
        assert_eq!((ctl, enter), (0, 1), "eight registrations, one io_uring_enter");
    } else {
        assert_eq!(ctl, 8);
    }
}

#[test]
fn tracked_delivers_events_over_every_inner_backend() {
    use weft_io::backend::{Epoll, EpollEt, Poll, Select, Tracked, Uring};
    readiness::<Tracked<Uring>>();
    readiness::<Tracked<EpollEt>>();
    readiness::<Tracked<Epoll>>();
    readiness::<Tracked<Poll>>();
    readiness::<Tracked<Select>>();
}

fn event_syscalls() -> u64 {
    let c = sys::SysCounts::current();
    [
        sys::SysKind::EpollWait,
        sys::SysKind::EpollCtl,
        sys::SysKind::Poll,
        sys::SysKind::Select,
        sys::SysKind::UringEnter,
    ]
    .iter()
    .map(|k| c.get(*k))
    .sum()
}

/// A descriptor known ready is handed out again from the table, without any
/// system call, until the handler reports it used up; then the kernel is asked.
#[test]
fn tracked_serves_known_ready_descriptors_from_user_space() {
    use weft_io::backend::{EpollEt, Tracked, Uring};
    fn check<P: Poller>() {
        let mut p = P::new().unwrap();
        let (mut a, b) = pair();
        let t = Token::new(4, 9);
        p.add(b.as_raw_fd(), t, Interest::READ).unwrap();
        a.write_all(b"ping").unwrap();
        let mut ev = Vec::new();
        p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
        assert_eq!(ev.len(), 1, "{}", P::CAPS.name);
        assert!(ev[0].readable && ev[0].token == t);
        // Not drained and not reported: still ready, served from user space.
        let before = event_syscalls();
        for _ in 0..3 {
            ev.clear();
            p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
            assert_eq!(ev.len(), 1);
            assert!(ev[0].readable && ev[0].token == t);
        }
        assert_eq!(
            event_syscalls(),
            before,
            "{}: no system call for known readiness",
            P::CAPS.name
        );
        let st = p.tracker_stats().unwrap();
        assert_eq!((st.user_passes, st.user_events), (3, 3));
        // Drain and report EAGAIN: the kernel is asked again (and has nothing).
        let mut buf = [0u8; 16];
        assert_eq!(sys::read(b.as_raw_fd(), &mut buf).unwrap(), 4);
        p.learned(b.as_raw_fd(), weft_io::Readiness::default());
        assert_nothing_reported(&mut p, &mut ev);
        assert!(event_syscalls() > before);
        // Readiness the handler itself reports (it stopped before EAGAIN) is
        // served without the kernel too.
        p.learned(
            b.as_raw_fd(),
            weft_io::Readiness {
                readable: true,
                writable: false,
            },
        );
        let before = event_syscalls();
        ev.clear();
        p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(event_syscalls(), before);
        p.delete(b.as_raw_fd()).unwrap();
    }
    check::<Tracked<EpollEt>>();
    check::<Tracked<Uring>>();
}

/// After `max_pass` passes from the table the kernel is asked, so a descriptor
/// the table does not know about is not starved by one that stays ready.
#[test]
fn tracked_asks_the_kernel_after_max_pass() {
    use weft_io::backend::{EpollEt, Tracked};
    let mut p = Tracked::<EpollEt>::new().unwrap();
    p.configure(&weft_io::BackendOptions {
        max_pass: 2,
        ..Default::default()
    });
    let (mut a, b) = pair();
    let (mut c, d) = pair();
    let (tb, td) = (Token::new(1, 0), Token::new(2, 0));
    p.add(b.as_raw_fd(), tb, Interest::READ).unwrap();
    p.add(d.as_raw_fd(), td, Interest::READ).unwrap();
    a.write_all(b"x").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut ev = Vec::new();
    p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
    assert_eq!(ev.iter().map(|e| e.token).collect::<Vec<_>>(), vec![tb]);
    c.write_all(b"y").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    for pass in 0..2 {
        ev.clear();
        p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
        assert_eq!(ev.iter().map(|e| e.token).collect::<Vec<_>>(), vec![tb], "pass {pass}");
    }
    ev.clear();
    p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
    let mut got: Vec<Token> = ev.iter().map(|e| e.token).collect();
    got.sort();
    assert_eq!(got, vec![tb, td], "the third pass asks the kernel (zero timeout)");
    let st = p.tracker_stats().unwrap();
    assert_eq!((st.user_passes, st.kernel_polls, st.forced_polls), (2, 2, 1));
}

/// Over edge-triggered epoll, interest changes stay in user space and a
/// remembered edge answers them.
#[test]
fn tracked_changes_interest_without_system_calls() {
    use weft_io::backend::{EpollEt, Tracked};
    let mut p = Tracked::<EpollEt>::new().unwrap();
    let (_a, b) = pair();
    let t = Token::new(3, 1);
    p.add(b.as_raw_fd(), t, Interest::READ).unwrap();
    let mut ev = Vec::new();
    // The registration's writable edge is remembered, not reported (interest is READ).
    assert_nothing_reported(&mut p, &mut ev);
    let before = event_syscalls();
    p.modify(b.as_raw_fd(), t, Interest::WRITE).unwrap();
    p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
    assert_eq!(event_syscalls(), before);
    assert_eq!(ev.len(), 1);
    assert!(ev[0].writable && !ev[0].readable);
    // A short write clears it; the table then waits for the kernel.
    p.learned(b.as_raw_fd(), weft_io::Readiness::default());
    assert_nothing_reported(&mut p, &mut ev);
}

/// `used_up` (the roles' report through `Ctx::settled`) clears only the
/// directions it names: an edge the table took in for a direction the
/// handler was not listening to survives the handler's report on the other.
#[test]
fn tracked_used_up_clears_only_what_it_names() {
    use weft_io::backend::{EpollEt, Tracked};
    let mut p = Tracked::<EpollEt>::new().unwrap();
    let (mut a, b) = pair();
    let t = Token::new(4, 1);
    p.add(b.as_raw_fd(), t, Interest::WRITE).unwrap();
    a.write_all(b"data").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut ev = Vec::new();
    p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
    assert!(ev.len() == 1 && ev[0].writable && !ev[0].readable, "{ev:?}");
    // The handler's write came up short; it knows nothing of the read side.
    let gone = weft_io::Readiness {
        readable: false,
        writable: true,
    };
    p.used_up(b.as_raw_fd(), gone);
    assert_nothing_reported(&mut p, &mut ev);
    // Now it wants to read: the remembered edge answers, no new arrival needed.
    let before = event_syscalls();
    p.modify(b.as_raw_fd(), t, Interest::READ).unwrap();
    p.wait(&mut ev, Some(Duration::from_secs(2))).unwrap();
    assert_eq!(event_syscalls(), before);
    assert!(ev.len() == 1 && ev[0].readable, "{ev:?}");
    let gone = weft_io::Readiness {
        readable: true,
        writable: false,
    };
    p.used_up(b.as_raw_fd(), gone);
    assert_nothing_reported(&mut p, &mut ev);
}

/// An event for an earlier registration of the same descriptor is dropped.
#[test]
fn tracked_drops_events_of_earlier_registrations() {
    use weft_io::backend::{Tracked, Uring};
    let mut p = Tracked::<Uring>::new().unwrap();
    let (mut a, b) = pair();
    let (old, new) = (Token::new(5, 1), Token::new(5, 2));
    p.add(b.as_raw_fd(), old, Interest::READ).unwrap();
    a.write_all(b"x").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // The first poll is still queued (or completes) when it is replaced.
    p.delete(b.as_raw_fd()).unwrap();
    p.add(b.as_raw_fd(), new, Interest::READ).unwrap();
    let mut ev = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while ev.is_empty() && Instant::now() < deadline {
        p.wait(&mut ev, Some(Duration::from_millis(100))).unwrap();
    }
    assert!(!ev.is_empty());
    assert!(ev.iter().all(|e| e.token == new), "{ev:?}");
    p.delete(b.as_raw_fd()).unwrap();
}

/// Data and a FIN that arrive together: the event says the read side is
/// closed, so a handler that stops at a short read knows one more read will
/// return end-of-file (edge-triggered backends report this only once).
fn half_close_is_reported<P: Poller>() {
    let mut cx = Ctx::<P>::new().unwrap();
    let (mut a, b) = pair();
    let t = Token::new(3, 1);
    cx.register(b.as_raw_fd(), t, Interest::READ)
        .map_err(|e| e.to_string())
        .unwrap();
    a.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    a.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut p = Probe::one();
    weft_io::run(&mut cx, &mut p).unwrap();
    let name = P::CAPS.name;
    assert!(
        !p.seen.is_empty() && p.seen.iter().all(|e| e.token == t && e.readable),
        "{name}"
    );
    let said = p.seen.iter().any(|e| e.read_closed);
    if name == "select" {
        assert!(!said, "select cannot tell a FIN from data");
    } else {
        assert!(said, "{name}: {:?}", p.seen);
        assert!(p.seen.iter().all(|e| !e.error), "{name}: a half-close is not an error");
    }
    if !P::CAPS.close_deregisters {
        cx.poller.delete(b.as_raw_fd()).unwrap();
    }
}

/// Runs a generic check under every plain backend (the `tracked` wrappers
/// are listed by the tests that take them).
macro_rules! plain_backends {
    ($check:ident) => {
        $check::<weft_io::backend::Select>();
        $check::<weft_io::backend::Poll>();
        $check::<weft_io::backend::Epoll>();
        $check::<weft_io::backend::EpollEt>();
        $check::<weft_io::backend::EpollOnce>();
        $check::<weft_io::backend::EpollBatched>();
        $check::<weft_io::backend::Uring>();
    };
}

#[test]
fn every_backend_reports_a_half_close() {
    plain_backends!(half_close_is_reported);
    half_close_is_reported::<weft_io::backend::Tracked<weft_io::backend::Uring>>();
    half_close_is_reported::<weft_io::backend::Tracked<weft_io::backend::EpollEt>>();
}

/// A half-closed socket registered without read interest (kept for writing,
/// or parked) stays quiet: a level-triggered backend that asked for RDHUP
/// regardless would report it at every wait and spin the loop.
fn half_close_without_read_interest_is_quiet<P: Poller>() {
    let mut p = P::new().unwrap();
    let (a, b) = pair();
    let t = Token::new(4, 1);
    p.add(b.as_raw_fd(), t, Interest::NONE).unwrap();
    a.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut ev = Vec::new();
    for _ in 0..3 {
        p.wait(&mut ev, Some(Duration::from_millis(20))).unwrap();
    }
    assert!(ev.is_empty(), "{}: {ev:?}", P::CAPS.name);
    p.delete(b.as_raw_fd()).unwrap();
}

#[test]
fn level_triggered_backends_do_not_report_a_half_close_nobody_reads() {
    plain_backends!(half_close_without_read_interest_is_quiet);
}

/// A registration for the end of stream alone (`Interest::HANGUP`: a
/// tunnel's sockets while the kernel forwards their bytes) is not woken by
/// bytes, nor by send-buffer space freed as the peer reads (the psock's
/// sends, when it is the destination), only by the FIN; asked to read again,
/// it reports the bytes that came meanwhile. (Select cannot tell: it reports
/// bytes too.) Edge-triggered backends are moved there from both directions,
/// as the proxy moves a tunnel's sockets at the join.
fn hangup_interest_hears_the_fin_not_bytes<P: Poller>() {
    let name = P::CAPS.name;
    let mut p = P::new().unwrap();
    let (mut a, b) = pair();
    let fd = b.as_raw_fd();
    let t = Token::new(5, 1);
    let first = if P::CAPS.edge_triggered {
        Interest::BOTH
    } else {
        Interest::READ
    };
    p.add(fd, t, first).unwrap();
    let mut ev = Vec::new();
    p.wait(&mut ev, Some(Duration::from_millis(30))).unwrap(); // a first edge, if any
    p.modify(fd, t, Interest::HANGUP).unwrap();
    assert_nothing_reported(&mut p, &mut ev);
    a.write_all(b"bytes").unwrap();
    assert!(sys::wait_ready(&b, false, Duration::from_secs(5)).unwrap());
    assert_nothing_reported(&mut p, &mut ev);
    // Fill b's send buffer, then let the peer read it all: space frees.
    let chunk = [7u8; 65536];
    let mut sent = 0usize;
    loop {
        match (&b).write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{name}: {e}"),
        }
    }
    let mut sink = vec![0u8; sent];
    a.read_exact(&mut sink).unwrap();
    assert_nothing_reported(&mut p, &mut ev);
    a.shutdown(std::net::Shutdown::Write).unwrap();
    ev.clear();
    p.wait(&mut ev, Some(Duration::from_secs(5))).unwrap();
    assert!(ev.iter().any(|e| e.token == t && e.read_closed), "{name}: {ev:?}");
    p.modify(fd, t, Interest::READ).unwrap();
    ev.clear();
    p.wait(&mut ev, Some(Duration::from_secs(5))).unwrap();
    assert!(ev.iter().any(|e| e.token == t && e.readable), "{name}: {ev:?}");
    p.delete(fd).unwrap();
}

#[test]
fn hangup_interest_is_not_woken_by_bytes() {
    hangup_interest_hears_the_fin_not_bytes::<weft_io::backend::Epoll>();
    hangup_interest_hears_the_fin_not_bytes::<weft_io::backend::EpollEt>();
    hangup_interest_hears_the_fin_not_bytes::<weft_io::backend::Poll>();
    hangup_interest_hears_the_fin_not_bytes::<weft_io::backend::EpollBatched>();
    hangup_interest_hears_the_fin_not_bytes::<weft_io::backend::Uring>();
}

/// A descriptor deleted (and closed) while a wake-up of its poll is still on
/// its way is really closed: the kernel refuses to remove a poll whose
/// wake-up it is completing (EALREADY), and a multishot poll left armed would
/// hold the socket open — no FIN, a peer waiting forever. Here a writer
/// thread keeps waking each socket while it is deleted; every peer must see
/// the close.
#[test]
fn uring_deleted_sockets_close_despite_racing_wakeups() {
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use weft_io::backend::Uring;
    let mut p = Uring::new().unwrap();
    let mut ev = Vec::new();
    for i in 0..1000u32 {
        let (a, b) = pair();
        let fd = b.as_raw_fd();
        p.add(fd, Token::new(i, 0), Interest::READ).unwrap();
        ev.clear();
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap(); // hand the poll over
                                                        // One thread writes, another drains the socket (so the writer never
                                                        // blocks): a wake-up every few microseconds, each one's task work
                                                        // queued to this thread until it next enters the kernel.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (a, stop) = (a.try_clone().unwrap(), stop.clone());
            a.set_nonblocking(true).unwrap(); // never blocks: stops when told
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = (&a).write(b"x");
                }
            })
        };
        let drainer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let _ = sys::read(fd, &mut buf);
                }
            })
        };
        std::thread::sleep(Duration::from_micros(50));
        // Delete and hand the removal over at once, with no other system
        // call between (one would run the pending wake-up's task work first).
        p.delete(fd).unwrap();
        ev.clear();
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
        stop.store(true, Ordering::Relaxed);
        drainer.join().unwrap();
        drop(b);
        writer.join().unwrap();
        // The loop runs on (completions, retried removals) until the peer
        // sees the close.
        let mut buf = [0u8; 16];
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            ev.clear();
            p.wait(&mut ev, Some(Duration::from_millis(1))).unwrap();
            match (&a).read(&mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => break,
                r => assert!(
                    Instant::now() < deadline,
                    "iteration {i}: the deleted socket is still open ({r:?})"
                ),
            }
        }
    }
}
