//! MT and MP (thesis 004 §4.2): one connection at a time per thread (or per
//! process), blocking I/O, answered by the same request code as the event
//! loop ([`drive_conn`]). Only the dispatch differs: the thread blocks in
//! `accept` (MT's threads on one listener; MP's processes on the one their
//! parent passed them, `crate::blocking`), then waits for its one socket
//! (poll with the header, idle or send timeout) between non-blocking reads
//! and sends, and reads the disk inline.
//!
//! An idle thread sleeps without a timeout of its own: its waits end on its
//! socket or listener, on its worker's stop notice (the shutdown eventfd),
//! or, in an MP process, on the pipe to its server reporting that the
//! server is gone ([`StopNotice`]). Nothing wakes it to look at a switch.

use super::{drive_conn, linger_read, Next, Worker, LINGER};
use crate::conn::Conn;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};
use weft_io::group::Drain;
use weft_io::sys::{self, AcceptWait, Fd, StopNotice, Woken};
use weft_io::{Interest, Token};

/// The longest wait of a thread whose connection has a CGI request in flight.
const CGI_SLICE: Duration = Duration::from_millis(50);
/// How often a thread publishes its counters (and an MP process reports
/// them to its server) at most.
const REPORT_EVERY: Duration = Duration::from_millis(250);

/// When a thread may report its counters next, and whether a change waits
/// for that time.
struct Report {
    next: Instant,
    owed: bool,
}

impl Report {
    fn new() -> Report {
        Report {
            next: Instant::now(),
            owed: false,
        }
    }

    /// How long a wait may last before an owed report is due (None: none is).
    fn owed_in(&self, now: Instant) -> Option<Duration> {
        self.owed.then(|| self.next.saturating_duration_since(now))
    }
}

impl Worker<'_> {
    /// Accept and serve connections one at a time until shutdown.
    pub fn run_blocking(&mut self) -> io::Result<()> {
        let Some(l) = self.door.take_listener() else {
            return Ok(());
        };
        // Non-blocking: a wake-up can find the queue already emptied by
        // another thread or process. Under MP the listener is the parent's,
        // shared by every process (one open file description): each sets
        // the same mode, so none undoes another's.
        sys::set_nonblocking(&l)?;
        let wait = AcceptWait::new(l.raw(), self.notice())?;
        let mut report = Report::new();
        while !self.door.stop_requested() && !self.orphaned() {
            match sys::accept(&l) {
                Ok((s, peer)) => {
                    self.shared.stats.accepted += 1;
                    self.serve_blocking(s, peer, &mut report);
                    self.report(&mut report, Instant::now());
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, say: the connection stays queued.
                    weft_core::warn!("accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
            // Nothing queued: sleep until a connection comes, the stop
            // notice fires, or a report held back by its interval is due.
            match wait.wait(report.owed_in(Instant::now())) {
                Ok(Woken::Timeout) => self.report(&mut report, Instant::now()),
                Ok(Woken::ParentGone) => break,
                Ok(_) => {}
                Err(e) => {
                    weft_core::warn!("waiting to accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        // The last counters, whatever the interval: the parent sums the
        // processes' reports once they have exited.
        report.next = Instant::now();
        self.report(&mut report, Instant::now());
        Ok(())
    }

    /// What ends this thread's waits besides its own descriptor: the
    /// worker's stop notice and, in an MP process, its stdout, the pipe its
    /// server reads its reports from.
    fn notice(&self) -> StopNotice {
        StopNotice {
            stop: self.door.waker(),
            parent: self.shared.cfg.mp_parent.map(|_| std::io::stdout().as_raw_fd()),
        }
    }

    /// Publish the counters (`/stats`) and, in an MP process, send them to
    /// the server on stdout (`crate::blocking::MP_STATS_LINE`), unless the
    /// last report is under [`REPORT_EVERY`] old: then one is owed, made
    /// when a wait ends at [`Report::owed_in`]. Called after every pass
    /// over a connection, not only at its end: a keep-alive connection
    /// lasts as long as its client wants, and until it closed `/stats`
    /// (and the server's sum) did not show a request it carried.
    fn report(&mut self, r: &mut Report, now: Instant) {
        if now < r.next {
            r.owed = true;
            return;
        }
        r.next = now + REPORT_EVERY;
        r.owed = false;
        self.slot.counters.publish(&self.stats());
        self.slot.latency.publish(&mut self.shared.latency, now);
        if self.shared.cfg.mp_parent.is_none() {
            return;
        }
        let mut line = String::from(crate::blocking::MP_STATS_LINE);
        for w in self.slot.counters.words() {
            line.push(' ');
            line.push_str(&w.to_string());
        }
        line.push('\n');
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
        let _ = std::io::stdout().lock().flush();
    }

    /// An MP process whose server is gone, even one killed without a
    /// chance to stop it: it ends too. The pid comes from the server, since
    /// one killed while this process was starting is no longer the parent
    /// by the time this thread could ask. (A system call: asked between
    /// connections and when a wait was ended by its notice, not per
    /// request. The pipe's error, [`Woken::ParentGone`], is the prompt
    /// sign; this is the check that needs no pipe.)
    fn orphaned(&self) -> bool {
        let parent = self.shared.cfg.mp_parent;
        parent.is_some_and(|p| std::os::unix::process::parent_id() != p)
    }

    /// Wait until `c`'s socket is ready (`write`: for sending) or `until`;
    /// the stop notice (or, for an MP process, its server's end) ends the
    /// wait too ([`StopNotice`]), and the connection is then drained
    /// by the event loop's rule ([`Drain`]): an idle one closes at once, or
    /// after [`DRAIN_QUIET`](weft_io::group::DRAIN_QUIET) if it was just
    /// active; a request in flight is answered with `Connection: close` and
    /// its response finishes. False: close it.
    fn wait_conn(&mut self, c: &mut Conn, write: bool, mut until: Instant, report: &mut Report) -> bool {
        let mut stopping = self.door.stop_requested();
        loop {
            let now = Instant::now();
            if report.owed && now >= report.next {
                self.report(report, now);
            }
            if stopping {
                // answer() closes after a response once this is set.
                self.shared.draining = true;
                match Drain::of(c.is_idle() && !c.lingering, c.last_activity, now) {
                    Drain::Close => return false,
                    Drain::KeepUntil(t) => until = until.min(t),
                    Drain::Finish => c.close_after |= c.has_output(),
                }
            }
            if now >= until {
                return false;
            }
            // Once stopping, the notice would end every wait at once: only
            // the socket and the drain's deadline count then.
            let notice = (!stopping).then(|| self.notice());
            // An owed report ends the wait early; the loop makes it.
            let wait = report.owed_in(now).map_or(until - now, |d| d.min(until - now));
            match sys::wait_ready_or(c.fd.raw(), write, notice, Some(wait)) {
                Ok(Woken::Ready) => return true,
                Ok(Woken::ParentGone) => stopping = true,
                Ok(_) => stopping = self.door.stop_requested() || self.orphaned(),
                Err(_) => return false,
            }
        }
    }

    /// Serve one connection to its end, blocking, reporting its counters
    /// on the way.
    fn serve_blocking(&mut self, s: Fd, peer: Option<std::net::SocketAddr>, report: &mut Report) {
        let cfg = self.shared.cfg;
        // The socket is non-blocking (accept4) and the thread blocks in
        // poll: a send then never runs past what the socket buffer takes,
        // so a body's file is checked between sends (a response is a
        // snapshot).
        let _ = sys::set_nodelay(&s, true);
        let now = Instant::now();
        let mut c = Conn::new(s, Token::new(0, 0), peer, Interest::READ, now);
        c.may_read = true;
        loop {
            self.shared.date.update(SystemTime::now());
            let now = Instant::now();
            let next = if c.lingering {
                linger_read(&mut c, &mut self.shared.pool)
            } else {
                drive_conn(&mut c, &mut self.shared, None, now, SystemTime::now())
            };
            self.report(report, now);
            c.input.release(&mut self.shared.pool);
            c.out.release_own(&mut self.shared.own_pool);
            let (write, limit) = match next {
                Next::Close => break,
                Next::Resume => continue,
                Next::Write => (true, cfg.send_timeout),
                Next::Read if c.lingering => (false, LINGER),
                Next::Read if c.is_idle() => (false, cfg.idle_timeout),
                Next::Read => (false, cfg.header_timeout),
            };
            // cgi: a request in flight waits for its application too, in
            // short slices (its own timeout is the CGI's).
            // Only the client to wait for, to take a reply that is whole
            // (queued, the application released): that is a send like any
            // other, bounded by --send-timeout below. In slices, a client
            // that never read held the thread for good.
            match crate::cgi::blocking_step(&mut self.shared, c.token, Instant::now()) {
                Some(None) if write => {}
                Some(up) => {
                    if sys::wait_ready2(c.fd.raw(), write, up, CGI_SLICE).is_err() {
                        break;
                    }
                    c.may_read |= !write;
                    continue;
                }
                None => {}
            }
            if !self.wait_conn(&mut c, write, Instant::now() + limit, report) {
                break; // timed out, drained, or the wait failed: close
            }
            c.may_read |= !write;
        }
        // cgi: drop a request still in flight.
        crate::cgi::client_closed(&mut self.shared, c.token);
        if c.snapshot {
            self.shared.tails.remove(&c.token);
        }
        c.input.discard(&mut self.shared.pool);
        c.out.clear();
        c.out.release_own(&mut self.shared.own_pool);
    }
}
