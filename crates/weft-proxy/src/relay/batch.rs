//! Read batching: while a body's upstream delivers in bulk, SO_RCVLOWAT
//! holds its wake-ups until a batch has arrived, and the worker cuts a batch
//! that does not fill in time (`BATCH_WAIT`).

use super::*;

impl Relay {
    /// The upstream has nothing more for now: ask the kernel (SO_RCVLOWAT)
    /// to wake us when a batch is waiting — `--rcv-lowat` bytes, or the rest
    /// of the body or the room we have if less — instead of at every arrival.
    /// A sender paced by its congestion control (BBR on this machine's
    /// loopback) delivers a 256 KiB body in a dozen pieces, and each piece
    /// was a wake-up, an epoll_wait and a splice in and out; measured, the
    /// batch cuts a 256 KiB or 1 MiB miss by a quarter (docs/results.md).
    ///
    /// Only an upstream that just delivered in bulk (at least `MIN_BATCH`
    /// since it last ran dry) is asked to batch, so a slow one streams on as
    /// it arrives. Never more than the rest of a Content-Length body, so the
    /// last byte is never held; a batch that does not fill within the
    /// worker's `BATCH_WAIT` ends batching for the session
    /// (`stop_batching`). Chunked bodies are read framing by framing and do
    /// not batch.
    pub(super) fn batch_reads(&mut self, up: BorrowedFd<'_>) {
        let bulk = std::mem::take(&mut self.pulled) >= MIN_BATCH;
        if self.rcv_lowat == 0 || self.batching_off || self.body_done {
            return;
        }
        let left = match self.framing {
            Framing::Length(n) => n.min(usize::MAX as u64) as usize,
            Framing::Close => usize::MAX,
            Framing::Chunked { .. } => return,
        };
        let batch = self.rcv_lowat.min(left).min(self.read_room());
        // A small batch saves less than the setsockopt costs; but a value
        // left from a larger batch must come down (never above the rest).
        self.set_lowat(up, if bulk && batch >= MIN_BATCH { batch } else { 1 });
    }

    pub(super) fn set_lowat(&mut self, up: BorrowedFd<'_>, v: usize) {
        if self.lowat_set.max(1) == v {
            return;
        }
        // A failure leaves the kernel's default (wake at every arrival): slower, never stuck.
        let ok = sys::set_rcvlowat(up, v).is_ok();
        self.batch_started |= ok && v > 1 && self.lowat_set <= 1;
        self.lowat_set = if ok { v } else { 1 };
        if !ok {
            self.batching_off = true;
        }
    }

    /// Did the session start waiting for read batches since the last call?
    /// (The worker then watches it for a stalled sender.)
    pub fn take_batch_start(&mut self) -> bool {
        std::mem::take(&mut self.batch_started)
    }

    /// Is the session waiting for a read batch (see `batch_reads`)?
    pub fn batching(&self) -> bool {
        self.lowat_set > 1
    }

    /// A batch did not fill within the worker's `BATCH_WAIT`: the upstream is
    /// slower than batching assumes. Wake at every arrival for the rest of the session
    /// (the caller reads what is there now).
    pub fn stop_batching(&mut self, up: BorrowedFd<'_>, st: &mut ProxyStats) {
        if self.batching() {
            st.read_batches_cut += 1;
        }
        self.batching_off = true;
        self.set_lowat(up, 1);
    }
}
