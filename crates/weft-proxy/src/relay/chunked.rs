//! Chunked response bodies: chunk framing is parsed (and forwarded, or
//! dropped for HTTP/1.0 clients) in user space from the upstream's input
//! buffer; chunk data runs of at least the splice threshold go through the
//! pipe, shorter ones through the output queue. The queue is only appended to
//! while the pipe is empty, so nothing overtakes anything.

use super::*;

/// The framing a decoupled fill's client is still to be sent, and for each
/// run of it, where that run ends in `framing` and where the chunk data
/// after it ends in the relay's `acc`. The data goes to the client as
/// slices of the object once the pull freezes `acc`, not as a second copy.
/// Empty (no allocation) for every other relay.
#[derive(Default)]
pub(super) struct SharedPull {
    framing: Vec<u8>,
    runs: Vec<(usize, usize)>,
}

impl Relay {
    /// Chunked bodies: framing through user space, long data runs through the pipe.
    pub(super) fn pull_chunked(&mut self, e: &mut Ends<'_>, st: &mut ProxyStats) -> Result<usize, Option<Pump>> {
        let Framing::Chunked { dec, keep_framing } = &mut self.framing else {
            return Ok(0);
        };
        let keep_framing = *keep_framing && !self.client_gone;
        let data_left = dec.data_remaining();
        let buffered = !e.up_buf.is_empty();
        if !buffered && !*e.up_may_read {
            return Ok(0);
        }
        // Data phase through the pipe.
        if data_left >= self.pipe_min && !buffered {
            let target = match &mut self.path {
                Path::Copy | Path::Kernel(_) => None,
                Path::Splice { pipe, bytes } => Some((pipe.write_fd(), pipe.capacity(), bytes)),
                Path::Tee { intake, in_intake, .. } => Some((intake.write_fd(), intake.capacity(), in_intake)),
            };
            if let Some((wfd, cap, bytes)) = target {
                let room = cap.saturating_sub(*bytes);
                if room == 0 {
                    return Ok(0);
                }
                let want = data_left.min(room as u64) as usize;
                st.calls_splice_in += 1;
                return match sys::splice(e.up, wfd, want, false) {
                    Ok(0) => Err(Some(Pump::UpstreamFailed("upstream closed the connection mid-body"))),
                    Ok(n) => {
                        *bytes += n;
                        dec.consume_data(n as u64);
                        Ok(n)
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        if *bytes == 0 {
                            *e.up_may_read = false;
                        }
                        Ok(0)
                    }
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(0),
                    Err(err) if is_peer_error(&err) => {
                        Err(Some(Pump::UpstreamFailed("upstream connection failed mid-body")))
                    }
                    Err(_) => Err(None),
                };
            }
        }
        // Framing (and short data) in user space: only once the pipe is empty,
        // so the output queue never overtakes piped bytes. Once the client
        // is gone, the bytes its pipe holds will never be sent (the pipe is
        // closed at the end, not pooled) and order nothing: waiting for them
        // would stall the cache fill for good.
        let piped = match &self.path {
            Path::Copy | Path::Kernel(_) => 0,
            Path::Splice { bytes, .. } => *bytes,
            Path::Tee { in_intake, in_out, .. } => in_intake + if self.client_gone { 0 } else { *in_out },
        };
        // The client's queue paces the reads, except for a fill that others
        // follow (`Relay::decouple`): that one reads at the upstream's pace,
        // as a Length body's does, and the queue holds the client's copy of
        // what it has not taken (bounded by the object's limit: past it the
        // fill stops and the queue paces again).
        let paced = !(self.decouple && self.fill.is_some());
        if piped > 0 || (paced && !self.client_gone && e.out.len() >= OUTQ_HIGH as u64) {
            return Ok(0);
        }
        if !buffered {
            let read_size = if matches!(self.path, Path::Copy) {
                RELAY_BUF
            } else {
                self.framing_read
            };
            let room = e.up_buf.reserve(read_size, RELAY_BUF.max(self.framing_read), e.bufs);
            st.calls_copy_read += 1;
            match sys::read(e.up, &mut e.up_buf.spare_mut()[..room]) {
                Ok(0) => return Err(Some(Pump::UpstreamFailed("upstream closed the connection mid-body"))),
                Ok(n) => e.up_buf.commit(n),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    *e.up_may_read = false;
                    return Ok(0);
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok(0),
                Err(_) => return Err(Some(Pump::UpstreamFailed("upstream connection failed mid-body"))),
            }
        }
        // A decoupled fill's client may be far behind: its share of the
        // data is queued as slices of the object (`share_pulled`), so the
        // queue holds only the framing, not a second copy of the object.
        let share = !paced && !self.client_gone;
        let share_from = self.acc.len();
        let mut total = 0;
        while !e.up_buf.is_empty() && !dec.is_done() {
            let input = e.up_buf.pending();
            let d = match dec.decode(input) {
                Ok(d) => d,
                Err(_) => return Err(Some(Pump::UpstreamFailed("invalid chunked body from upstream"))),
            };
            if d.consumed == 0 {
                break;
            }
            let consumed = &input[..d.consumed];
            // Chunk data, when reached, ends what this call consumed.
            let data = d.data.map_or(&consumed[d.consumed..], |r| &consumed[r]);
            let framing = &consumed[..d.consumed - data.len()];
            if share {
                if keep_framing {
                    self.shared_pull.framing.extend_from_slice(framing);
                }
            } else if keep_framing {
                e.out.push_copy(consumed);
            } else if !self.client_gone {
                e.out.push_copy(data);
            }
            if !self.client_gone {
                st.bytes_copied += data.len() as u64;
            }
            if let Some(f) = &mut self.fill {
                self.acc.extend_from_slice(data);
                f.size += data.len() as u64;
                st.bytes_filled += data.len() as u64;
            }
            if share {
                self.shared_pull
                    .runs
                    .push((self.shared_pull.framing.len(), self.acc.len()));
            }
            total += d.consumed;
            e.up_buf.consume(d.consumed);
            // Leave long data runs to the pipe.
            if dec.data_remaining() >= self.pipe_min && !matches!(self.path, Path::Copy) {
                break;
            }
        }
        if dec.is_done() {
            self.body_done = true;
        }
        if share {
            self.share_pulled(share_from, e.out);
        }
        self.sent = self.acc.len();
        self.check_fill_limit();
        Ok(total.max(1))
    }

    /// Queue for the client what a decoupled fill's pull read (the runs
    /// recorded in `shared_pull`, their data in
    /// `acc[from..]`): `acc` becomes a segment of the object, and the
    /// client's data goes out as slices of it between copies of the
    /// framing. One segment a pull: the reads' size, as a fill that others
    /// follow is cut into anyway (`Relay::cut`).
    fn share_pulled(&mut self, from: usize, out: &mut OutChain) {
        let frozen = self.acc.split().freeze();
        let (mut framing_at, mut data_at) = (0, from);
        for &(framing_end, data_end) in &self.shared_pull.runs {
            if framing_end > framing_at {
                out.push_copy(&self.shared_pull.framing[framing_at..framing_end]);
            }
            if data_end > data_at {
                out.push_shared(frozen.slice(data_at..data_end));
            }
            (framing_at, data_at) = (framing_end, data_end);
        }
        self.shared_pull.framing.clear();
        self.shared_pull.runs.clear();
        // A pull that read only framing leaves no data: no empty segment.
        if let (Some(f), false) = (&mut self.fill, frozen.is_empty()) {
            f.segs.push(frozen);
        }
    }
}
