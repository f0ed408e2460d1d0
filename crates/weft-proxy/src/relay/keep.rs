//! KeepCopy: the relay's copy for the cache. Bytes the client gets another
//! way are appended to the object being filled; on the tee path the intake
//! pipe's bytes are duplicated into the output pipe (`tee`) and the
//! duplicates read into the object, and a fill that outgrows its limit stops
//! keeping (paper 001's KeepCopy, with its size cap). A whole object is
//! handed over before the client has its last bytes (`take_whole`).

use super::{Ends, Path, Relay};
use crate::stats::ProxyStats;
use bytes::{Buf, BytesMut};
use std::io;
use std::os::fd::RawFd;
use weft_buf::Aggregate;
use weft_io::{sys, OutChain};

impl Relay {
    /// Append body bytes to the object being filled (paths where the client
    /// gets them some other way).
    pub(super) fn keep_for_cache(&mut self, data: &[u8], st: &mut ProxyStats) {
        if let Some(f) = &mut self.fill {
            self.acc.extend_from_slice(data);
            self.sent = self.acc.len();
            f.size += data.len() as u64;
            st.bytes_filled += data.len() as u64;
        }
    }

    pub(super) fn check_fill_limit(&mut self) {
        let over = self.fill.as_ref().is_some_and(|f| f.size > f.max);
        if over {
            // Too big to keep: stop filling. The relay buffer keeps only what
            // the client still needs.
            self.fill = None;
            if self.tail_mode() {
                self.acc.advance(self.sent);
            } else {
                self.acc = BytesMut::new();
            }
            self.sent = 0;
        }
    }

    /// KeepCopy: duplicate intake bytes into the output pipe and read them
    /// into the cache (or, without a client, only read them; without a fill,
    /// only move them). Err: tee failed (fall back).
    pub(super) fn tee_step(&mut self, _e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<usize, ()> {
        let Path::Tee {
            intake,
            in_intake,
            out,
            in_out,
        } = &mut self.path
        else {
            return Ok(0);
        };
        if *in_intake == 0 {
            return Ok(0);
        }
        let n = if self.client_gone {
            *in_intake
        } else if self.fill.is_none() {
            // Filling stopped (object too large): move, do not duplicate.
            st.calls_tee += 1;
            match sys::splice(intake.read_fd(), out.write_fd(), *in_intake, false) {
                Ok(k) => {
                    *in_intake -= k;
                    *in_out += k;
                    return Ok(k);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(_) => return Err(()),
            }
        } else {
            st.calls_tee += 1;
            match sys::tee(intake.read_fd(), out.write_fd(), *in_intake) {
                Ok(0) => return Ok(0),
                Ok(t) => {
                    *in_out += t;
                    st.bytes_teed += t as u64;
                    t
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok(0),
                Err(_) => return Err(()),
            }
        };
        let fd = intake.read_fd();
        *in_intake -= n;
        self.keep_teed(fd, n, st)?;
        Ok(n)
    }

    /// Consume exactly the `n` duplicated bytes from the intake (read end
    /// `intake`) into the object.
    pub(super) fn keep_teed(&mut self, intake: RawFd, n: usize, st: &mut ProxyStats) -> Result<(), ()> {
        let mut got = 0;
        while got < n {
            st.calls_tee_read += 1;
            match sys::read_to_bytes(intake, &mut self.acc, n - got) {
                Ok(0) => return Err(()),
                Ok(k) => got += k,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
        self.sent = self.acc.len();
        if let Some(f) = &mut self.fill {
            f.size += n as u64;
            st.bytes_filled += n as u64;
        }
        self.check_fill_limit();
        Ok(())
    }

    /// Tee'd bytes still wait in the intake (to be read into the object).
    pub(super) fn intake_left(&self) -> bool {
        matches!(self.path, Path::Tee { in_intake, .. } if in_intake > 0)
    }

    /// The object being filled holds the whole body: all of it is read from
    /// the upstream and, on the tee path, out of the intake.
    pub(super) fn fill_whole(&self) -> bool {
        self.body_done && self.fill.is_some() && !self.intake_left()
    }

    /// The relay buffer becomes one shared segment of the object being
    /// filled; what the client has not been sent of it yet is queued on
    /// `out` as a slice of it (the order stays: the queue goes out before
    /// the copy tail, and a copy session has no pipe).
    pub(super) fn seal_fill(&mut self, out: &mut OutChain, st: &mut ProxyStats) {
        if self.acc.is_empty() {
            return;
        }
        let tail_mode = self.tail_mode();
        let frozen = self.acc.split().freeze();
        if tail_mode && self.sent < frozen.len() && !self.client_gone {
            // Counted as copied now, as bytes pushed to the queue are.
            st.bytes_copied += (frozen.len() - self.sent) as u64;
            out.push_shared(frozen.slice(self.sent..));
        }
        self.sent = 0;
        if let Some(f) = &mut self.fill {
            f.segs.push(frozen);
        }
    }

    /// The filled object's body, once it is whole ([`Pump::Whole`](super::Pump::Whole)),
    /// before the client has been sent all of it: the client's share of the
    /// relay buffer moves to `out`, and the session goes on without a fill
    /// (pipes still hold the client's last bytes). None while it is not
    /// whole, or after it was taken.
    pub fn take_whole(&mut self, out: &mut OutChain, st: &mut ProxyStats) -> Option<Aggregate> {
        if !self.fill_whole() {
            return None;
        }
        self.seal_fill(out, st);
        let fill = self.fill.take()?;
        if fill.segs.len() as u64 != fill.size {
            // Never store an object whose bytes do not add up.
            debug_assert!(false, "fill of {} bytes holds {}", fill.size, fill.segs.len());
            return None;
        }
        if self.client_gone && !self.no_client {
            st.sessions_orphan_fill += 1;
        }
        Some(fill.segs)
    }
}
