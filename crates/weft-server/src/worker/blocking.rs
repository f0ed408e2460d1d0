//! MT and MP (thesis 004 §4.2): one connection at a time per thread (or per
//! process), blocking I/O, answered by the same request code as the event
//! loop ([`drive_conn`]). Only the dispatch differs: the thread blocks in
//! `accept`, then in `recv` and `send` (with the socket in blocking mode and
//! the header and send timeouts as `SO_RCVTIMEO` / `SO_SNDTIMEO`), and the
//! disk is read inline.

use super::{drive_conn, linger_read, Next, Worker};
use crate::conn::Conn;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant, SystemTime};
use weft_io::sys::Fd;
use weft_io::{Interest, Token};

/// The longest a send blocks before the thread looks again (`SO_SNDTIMEO`).
const SEND_SLICE: Duration = Duration::from_millis(50);
/// How often a thread blocked in `accept` looks at the shutdown switch.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

impl Worker<'_> {
    /// Accept and serve connections one at a time until shutdown.
    pub fn run_blocking(&mut self) -> io::Result<()> {
        let Some(l) = self.listener.take() else {
            return Ok(());
        };
        // SO_RCVTIMEO bounds accept(2) too: set it through a stream view.
        let l = TcpStream::from(OwnedFd::from(l));
        l.set_nonblocking(false)?;
        l.set_read_timeout(Some(ACCEPT_POLL))?;
        let l = TcpListener::from(OwnedFd::from(l));
        // An MP process ends with the server that started it, even one
        // killed without a chance to stop it.
        let parent = std::os::unix::process::parent_id();
        let orphaned = || self.shared.cfg.mp_child && std::os::unix::process::parent_id() != parent;
        while !self.shutdown.requested() && !orphaned() {
            match l.accept() {
                Ok((s, peer)) => {
                    self.shared.stats.accepted += 1;
                    self.serve_blocking(s, Some(peer));
                    self.slot.counters.publish(&self.stats());
                    self.slot.latency.publish(&mut self.shared.latency, Instant::now());
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    weft_core::warn!("accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Ok(())
    }

    /// Serve one connection to its end, blocking.
    fn serve_blocking(&mut self, s: TcpStream, peer: Option<std::net::SocketAddr>) {
        let cfg = self.shared.cfg;
        let wait = cfg.header_timeout.max(Duration::from_millis(1));
        // Sends block in slices of SEND_SLICE, so a body's file is checked
        // between them (a response is a snapshot) and the send timeout is
        // counted here.
        if s.set_nonblocking(false).is_err()
            || s.set_read_timeout(Some(wait)).is_err()
            || s.set_write_timeout(Some(SEND_SLICE)).is_err()
        {
            return;
        }
        let _ = s.set_nodelay(true);
        let now = Instant::now();
        let mut c = Conn::new(Fd::from(s), Token::new(0, 0), peer, Interest::READ, now);
        c.may_read = true;
        let mut progress = now;
        loop {
            let (t0, answered, queued) = (Instant::now(), c.requests, c.out.len());
            self.shared.date.update(SystemTime::now());
            let next = if c.lingering {
                linger_read(&mut c, &mut self.shared.pool)
            } else {
                drive_conn(&mut c, &mut self.shared, t0, SystemTime::now())
            };
            c.input.release(&mut self.shared.pool);
            c.out.release_own(&mut self.shared.own_pool);
            let idle = c.requests == answered && t0.elapsed() >= wait.mul_f32(0.9);
            if c.out.len() != queued || c.requests != answered {
                progress = Instant::now();
            }
            match next {
                Next::Close => break,
                // A send slice ended with bytes left: go on, unless nothing
                // moved for the send timeout.
                Next::Write if progress.elapsed() >= cfg.send_timeout => break,
                Next::Write => {}
                _ if c.lingering && !c.may_read => break,
                // A receive that timed out with nothing answered.
                Next::Read if idle && !c.may_read => break,
                Next::Read | Next::Resume => c.may_read = true,
            }
        }
        if c.snapshot {
            self.shared.tails.remove(&c.token);
        }
        c.input.discard(&mut self.shared.pool);
        c.out.clear();
        c.out.release_own(&mut self.shared.own_pool);
    }
}
