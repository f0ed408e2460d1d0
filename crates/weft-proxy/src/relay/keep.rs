//! KeepCopy: the relay's copy for the cache. Bytes the client gets another
//! way are appended to the object being filled; on the tee path the intake
//! pipe's bytes are duplicated into the output pipe (`tee`) and the
//! duplicates read into the object, and a fill that outgrows its limit stops
//! keeping (paper 001's KeepCopy, with its size cap).

use super::{Ends, Path, Relay};
use crate::stats::ProxyStats;
use bytes::{Buf, BytesMut};
use std::io;
use std::os::fd::RawFd;
use weft_io::sys;

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
}
