//! What a relay does for the requests following its cache fill
//! (collapsed forwarding's stream, `fill.rs`): it hands the bytes it has
//! filled over in parts, and it does not let its own client pace the fill.

use super::Relay;
use crate::stats::ProxyStats;
use bytes::Bytes;
use weft_io::OutChain;

impl Relay {
    /// Bytes of the object filled and not handed over yet (0 when not
    /// filling).
    pub fn unfed(&self) -> usize {
        match &self.fill {
            Some(f) => f.segs.len() - f.handed + self.acc.len(),
            None => 0,
        }
    }

    /// Hand over the bytes filled since the last cut, for the requests
    /// following this fill (`fill.rs`): the relay buffer becomes one shared
    /// segment, which is also the stored object's, and what the client has
    /// not been sent of it yet is queued as a slice of it (the order stays:
    /// the queue goes out before the copy tail). The part handed over is
    /// that segment and those the copy path added since the last cut (a
    /// body of unknown length, block by block). The rest of the buffer's
    /// room stays for the next reads (no reallocation). The segments come
    /// as shared slices, without an aggregate of their own.
    pub fn cut(&mut self, out: &mut OutChain, st: &mut ProxyStats) -> Option<impl Iterator<Item = Bytes> + '_> {
        if self.unfed() == 0 {
            return None;
        }
        self.seal_fill(out, st);
        let f = self.fill.as_mut()?;
        let from = std::mem::replace(&mut f.handed, f.segs.len());
        Some(f.segs.range(from, f.handed))
    }

    /// Others follow this fill (`fill.rs`): while the client is slower than
    /// the upstream, the fill is not to wait for it ([`Relay::pump`] then
    /// goes on by copying, which reads the upstream into the object whatever
    /// the client takes).
    pub fn decouple(&mut self) {
        self.decouple = true;
    }
}
