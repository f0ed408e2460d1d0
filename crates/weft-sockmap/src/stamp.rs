//! Reading what the verdict passed up, in stream order.
//!
//! Past a tunnel source's budget the verdict passes its skbs up to weft
//! instead of redirecting them, and this kernel's code allows passed skbs
//! to be delivered out of order (bpf/sockmap.bpf.c, "Stamps"; docs/proxy.md,
//! "Why the takeover corrupted"). So the verdict stamps each: it overwrites
//! the skb's first bytes (up to [`STAMP`]) with its sequence number, little
//! endian, and records the skb's stream offset, length and the bytes it
//! overwrote in the `stamps` map. [`Unstamper`] reads the bytes weft takes from the
//! source: it names each skb from its first bytes, puts the recorded bytes
//! back, and hands out the skbs in stream order, holding back those that
//! came early. An skb's bytes always arrive together (the kernel queues one
//! message per skb and a read copies messages in turn), so weft meets each
//! stamp at the start of an skb.
//!
//! Names are unambiguous as long as the skbs weft has not read yet differ
//! in their sequence numbers' low bytes: the verdict keeps at most
//! [`STAMP_SLOTS`] of them per source. An skb shorter than a stamp carries
//! only the stamp's low bytes; it is named by looking through the unread
//! sequence numbers, and a name that fits two skbs is refused
//! ([`Unplaced::Ambiguous`]), as is any byte that fits none: weft then
//! resets the tunnel rather than guess.

use std::collections::{BTreeMap, BTreeSet};

/// Bytes of a whole stamp (a u32 sequence number).
pub const STAMP: usize = 4;

/// Unread passed skbs the verdict keeps per source (`STAMP_SLOTS` in the
/// BPF source): the `stamps` map's slot is the sequence number modulo this.
pub const STAMP_SLOTS: u64 = 65536;

/// Bytes weft holds back for skbs that came before an earlier one: more
/// than a takeover's clamped window ever passes in a reordering.
const MAX_AHEAD: usize = 16 << 20;

/// The verdict's record of one passed skb (`struct stamp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The skb's first byte among the source's passed bytes.
    pub offset: u64,
    /// Its sequence number (the low 32 bits of the count before it).
    pub seq: u32,
    /// Its length.
    pub len: u32,
    /// The bytes the stamp overwrote: the first `min(len, 4)`.
    pub first: [u8; STAMP],
}

/// What the verdict has stamped from one source so far (from `peers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamped {
    /// Passed skbs stamped: the next one's sequence number.
    pub count: u64,
    /// Of those, shorter than a whole stamp.
    pub tiny: u64,
}

/// Where the verdict's records are: the `stamps` map, or a test's table.
pub trait StampMap {
    /// The record of the skb numbered `seq` (its slot's, if it is that
    /// skb's).
    fn get(&mut self, seq: u64) -> Option<Stamp>;
    /// The skb numbered `seq` has been read: free its slot.
    fn forget(&mut self, seq: u64);
}

/// Why passed bytes could not be put in order; the tunnel is reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unplaced {
    /// The bytes at an skb's start name no unread skb.
    NoStamp,
    /// A short skb's partial stamp names two unread skbs.
    Ambiguous,
    /// An skb's bytes fall where bytes were already handed out.
    Overlap,
    /// More than `MAX_AHEAD` (16 MiB) came before an earlier skb.
    TooFarAhead,
    /// Every passed byte was taken, and some before the last are missing.
    Gap,
}

impl std::fmt::Display for Unplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unplaced::NoStamp => "bytes passed up without a stamp",
            Unplaced::Ambiguous => "a short skb's stamp names two skbs",
            Unplaced::Overlap => "a passed skb overlaps bytes already written",
            Unplaced::TooFarAhead => "too many bytes passed up ahead of an earlier skb",
            Unplaced::Gap => "passed bytes missing before the last",
        })
    }
}

/// One source's passed bytes, put back in stream order.
#[derive(Debug, Default)]
pub struct Unstamper {
    /// The offset of the next byte to hand out.
    next: u64,
    /// The skb being read: where its next byte goes and how many are left.
    cur: Option<(u64, u32)>,
    /// Bytes at an skb's start not yet enough to name it.
    head: [u8; STAMP],
    head_len: usize,
    /// Bytes read before an earlier skb's, by offset.
    ahead: BTreeMap<u64, Vec<u8>>,
    ahead_bytes: usize,
    /// The lowest sequence number not read yet.
    lo: u64,
    /// Sequence numbers above `lo` already read.
    read_above: BTreeSet<u64>,
    /// Short skbs read.
    tiny_read: u64,
    /// skbs read before one the verdict stamped earlier.
    reordered: u64,
}

impl Unstamper {
    /// Read `input`, the next bytes taken from the source, and append what
    /// is now in order to `out`. `seen` is what the verdict had stamped
    /// (read after `input` was); `complete` says every passed byte has been
    /// taken, so a start shorter than a stamp is whole short skbs.
    pub fn feed(
        &mut self,
        mut input: &[u8],
        seen: Stamped,
        complete: bool,
        map: &mut impl StampMap,
        out: &mut Vec<u8>,
    ) -> Result<(), Unplaced> {
        loop {
            if let Some((at, left)) = self.cur {
                // The skb's bytes: those held at its start first.
                let n;
                if self.head_len > 0 {
                    let head = self.head;
                    n = (left as usize).min(self.head_len);
                    self.place(at, &head[..n], out)?;
                    self.head.copy_within(n..self.head_len, 0);
                    self.head_len -= n;
                } else {
                    if input.is_empty() {
                        return Ok(());
                    }
                    n = (left as usize).min(input.len());
                    self.place(at, &input[..n], out)?;
                    input = &input[n..];
                }
                self.cur = (n < left as usize).then(|| (at + n as u64, left - n as u32));
                continue;
            }
            let take = (STAMP - self.head_len).min(input.len());
            self.head[self.head_len..self.head_len + take].copy_from_slice(&input[..take]);
            self.head_len += take;
            input = &input[take..];
            if self.head_len == 0 {
                return Ok(());
            }
            let Some((seq, stamp)) = self.name(seen, complete, map)? else {
                return Ok(());
            };
            self.mark_read(seq, stamp, map);
            let k = (stamp.len as usize).min(STAMP);
            self.head[..k].copy_from_slice(&stamp.first[..k]);
            self.cur = Some((stamp.offset, stamp.len));
        }
    }

    /// Whether nothing is held: every byte read has been handed out.
    pub fn at_rest(&self) -> bool {
        self.cur.is_none() && self.head_len == 0 && self.ahead.is_empty()
    }

    /// skbs the kernel delivered before one stamped earlier (each put back
    /// in its place).
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Sequence numbers stamped (`count` of them) and not read: their
    /// records are still in the map.
    pub fn unread(&self, count: u64) -> impl Iterator<Item = u64> + '_ {
        (self.lo..count).filter(|s| !self.read_above.contains(s))
    }

    /// Which unread skb the bytes in `head` start; `None` while too few are
    /// in to tell.
    fn name(&self, seen: Stamped, complete: bool, map: &mut impl StampMap) -> Result<Option<(u64, Stamp)>, Unplaced> {
        if self.head_len < STAMP && !complete {
            // A longer skb's stamp may still be coming: no lookups yet.
            return Ok(None);
        }
        let mut found = None;
        let mut names = 0;
        if self.head_len == STAMP {
            let low = u32::from_le_bytes(self.head);
            let seq = self.lo + u64::from(low.wrapping_sub(self.lo as u32));
            if let Some(s) = self.unread_stamp(seq, seen, map).filter(|s| s.len as usize >= STAMP) {
                found = Some((seq, s));
                names += 1;
            }
        }
        if seen.tiny > self.tiny_read {
            for k in 1..self.head_len.min(STAMP - 1) + 1 {
                let modulus = 1u64 << (8 * k);
                let mut low = [0u8; 8];
                low[..k].copy_from_slice(&self.head[..k]);
                let low = u64::from_le_bytes(low);
                let mut seq = self.lo + (low + modulus - self.lo % modulus) % modulus;
                while seq < seen.count {
                    if let Some(s) = self.unread_stamp(seq, seen, map).filter(|s| s.len as usize == k) {
                        found = Some((seq, s));
                        names += 1;
                    }
                    seq += modulus;
                }
            }
        }
        match names {
            0 => Err(Unplaced::NoStamp),
            1 => Ok(found),
            _ => Err(Unplaced::Ambiguous),
        }
    }

    /// The record of unread skb `seq`, if it was stamped and not read.
    fn unread_stamp(&self, seq: u64, seen: Stamped, map: &mut impl StampMap) -> Option<Stamp> {
        if seq < self.lo || seq >= seen.count || self.read_above.contains(&seq) {
            return None;
        }
        map.get(seq).filter(|s| s.seq == seq as u32)
    }

    fn mark_read(&mut self, seq: u64, stamp: Stamp, map: &mut impl StampMap) {
        map.forget(seq);
        if (stamp.len as usize) < STAMP {
            self.tiny_read += 1;
        }
        if seq == self.lo {
            self.lo += 1;
            while self.read_above.remove(&self.lo) {
                self.lo += 1;
            }
        } else {
            self.read_above.insert(seq);
            self.reordered += 1;
        }
    }

    /// Bytes of the skb whose byte `at` they start at: out now if they are
    /// next, held back otherwise.
    fn place(&mut self, at: u64, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Unplaced> {
        if at < self.next {
            return Err(Unplaced::Overlap);
        }
        if at > self.next {
            self.ahead_bytes += bytes.len();
            if self.ahead_bytes > MAX_AHEAD {
                return Err(Unplaced::TooFarAhead);
            }
            // An skb split across reads continues its own entry.
            if let Some((&start, held)) = self.ahead.range_mut(..at).next_back() {
                if start + held.len() as u64 == at {
                    held.extend_from_slice(bytes);
                    return Ok(());
                }
                if start + held.len() as u64 > at {
                    return Err(Unplaced::Overlap);
                }
            }
            if self.ahead.insert(at, bytes.to_vec()).is_some() {
                return Err(Unplaced::Overlap);
            }
            return Ok(());
        }
        out.extend_from_slice(bytes);
        self.next += bytes.len() as u64;
        while let Some(entry) = self.ahead.first_entry() {
            if *entry.key() != self.next {
                if *entry.key() < self.next {
                    return Err(Unplaced::Overlap);
                }
                break;
            }
            let held = entry.remove();
            self.ahead_bytes -= held.len();
            self.next += held.len() as u64;
            out.extend_from_slice(&held);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The verdict, in a test: stamps skbs as bpf/sockmap.bpf.c does.
    #[derive(Default)]
    struct Verdict {
        map: HashMap<u64, Stamp>,
        seen: Stamped,
        passed: u64,
    }

    impl Verdict {
        /// Stamp one skb of `data`; the bytes as weft would read them.
        fn pass(&mut self, data: &[u8]) -> Vec<u8> {
            let seq = self.seen.count;
            let slot = seq % STAMP_SLOTS;
            assert!(!self.map.contains_key(&slot), "the verdict would refuse");
            let k = data.len().min(STAMP);
            let mut first = [0; STAMP];
            first[..k].copy_from_slice(&data[..k]);
            self.map.insert(
                slot,
                Stamp {
                    offset: self.passed,
                    seq: seq as u32,
                    len: data.len() as u32,
                    first,
                },
            );
            let mut skb = data.to_vec();
            skb[..k].copy_from_slice(&(seq as u32).to_le_bytes()[..k]);
            self.seen.count += 1;
            self.seen.tiny += u64::from(data.len() < STAMP);
            self.passed += data.len() as u64;
            skb
        }
    }

    impl StampMap for Verdict {
        fn get(&mut self, seq: u64) -> Option<Stamp> {
            self.map.get(&(seq % STAMP_SLOTS)).copied()
        }
        fn forget(&mut self, seq: u64) {
            self.map.remove(&(seq % STAMP_SLOTS));
        }
    }

    /// `skbs` passed up, delivered in `order`, read in pieces of `reads`
    /// bytes (cycled): what weft writes out.
    fn read_back(skbs: &[Vec<u8>], order: &[usize], reads: &[usize]) -> Result<Vec<u8>, Unplaced> {
        let mut v = Verdict::default();
        let stamped: Vec<Vec<u8>> = skbs.iter().map(|s| v.pass(s)).collect();
        let stream: Vec<u8> = order.iter().flat_map(|&i| stamped[i].clone()).collect();
        let mut u = Unstamper::default();
        let mut out = Vec::new();
        let mut at = 0;
        for &n in reads.iter().cycle() {
            let end = (at + n.max(1)).min(stream.len());
            let seen = v.seen;
            u.feed(&stream[at..end], seen, end == stream.len(), &mut v, &mut out)?;
            at = end;
            if at == stream.len() {
                break;
            }
        }
        assert!(u.at_rest(), "everything read was handed out");
        assert!(v.map.is_empty(), "every record was freed");
        Ok(out)
    }

    #[test]
    fn an_skb_that_overtakes_an_earlier_one_is_put_back() {
        let skbs = [b"hello ".to_vec(), b"world, ".to_vec(), b"again".to_vec()];
        let out = read_back(&skbs, &[0, 2, 1], &[3]).unwrap();
        assert_eq!(out, b"hello world, again");
    }

    #[test]
    fn short_skbs_are_named_by_their_partial_stamps() {
        let skbs = [
            b"a".to_vec(),
            b"bc".to_vec(),
            b"defg".to_vec(),
            b"h".to_vec(),
            b"ijk".to_vec(),
        ];
        let out = read_back(&skbs, &[1, 0, 2, 4, 3], &[1, 2, 7]).unwrap();
        assert_eq!(out, b"abcdefghijk");
    }

    #[test]
    fn bytes_without_a_stamp_are_refused() {
        let mut v = Verdict::default();
        let skb = v.pass(b"stamped");
        let mut u = Unstamper::default();
        let mut out = Vec::new();
        u.feed(&skb, v.seen, false, &mut v, &mut out).unwrap();
        assert_eq!(out, b"stamped");
        let seen = v.seen;
        assert_eq!(
            u.feed(b"plain bytes", seen, true, &mut v, &mut out),
            Err(Unplaced::NoStamp)
        );
    }

    #[test]
    fn an_skb_read_twice_is_refused() {
        let mut v = Verdict::default();
        let skb = v.pass(b"once only");
        let mut u = Unstamper::default();
        let mut out = Vec::new();
        u.feed(&skb, v.seen, true, &mut v, &mut out).unwrap();
        let seen = v.seen;
        assert_eq!(u.feed(&skb, seen, true, &mut v, &mut out), Err(Unplaced::NoStamp));
    }

    #[test]
    fn a_short_stamp_that_fits_two_skbs_is_refused() {
        // Sequence numbers 0 and 256 share their low byte; the 1-byte skb
        // numbered 256 and the 4-byte skb 0 could both start "\0".
        let mut v = Verdict::default();
        let mut stamped = Vec::new();
        for i in 0..257 {
            let data: &[u8] = if i == 0 {
                b"\0\0\0\0"
            } else if i == 256 {
                b"z"
            } else {
                b"wxyz"
            };
            stamped.push(v.pass(data));
        }
        let mut u = Unstamper::default();
        let mut out = Vec::new();
        // Skb 256 first: "\0" then skb 0's bytes "\0\0\0\0".
        let mut stream = stamped[256].clone();
        stream.extend_from_slice(&stamped[0]);
        let seen = v.seen;
        assert_eq!(u.feed(&stream, seen, false, &mut v, &mut out), Err(Unplaced::Ambiguous));
    }

    #[test]
    fn sequence_numbers_past_u32_still_name_their_skbs() {
        let mut v = Verdict {
            seen: Stamped {
                count: u64::from(u32::MAX) - 1,
                tiny: 0,
            },
            ..Verdict::default()
        };
        let mut u = Unstamper {
            lo: u64::from(u32::MAX) - 1,
            ..Unstamper::default()
        };
        let skbs: Vec<Vec<u8>> = (0..4).map(|i| vec![b'a' + i; 9]).collect();
        let stamped: Vec<Vec<u8>> = skbs.iter().map(|s| v.pass(s)).collect();
        let mut out = Vec::new();
        for i in [1, 0, 3, 2] {
            let seen = v.seen;
            u.feed(&stamped[i], seen, false, &mut v, &mut out).unwrap();
        }
        assert_eq!(out, skbs.concat());
        assert_eq!(u.reordered(), 2);
    }

    proptest! {
        /// Any stream of skbs, each moved up to a few places earlier (as
        /// the kernel's race moves them) and read in any pieces, comes out
        /// as it went in.
        #[test]
        fn reordered_skbs_come_out_in_order(
            sizes in proptest::collection::vec(1usize..3000, 1..40),
            moves in proptest::collection::vec(0usize..4, 40),
            reads in proptest::collection::vec(1usize..5000, 1..8),
        ) {
            let skbs: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
                .collect();
            let mut order: Vec<usize> = (0..skbs.len()).collect();
            for (i, &m) in moves.iter().enumerate().take(order.len()) {
                let to = i.saturating_sub(m);
                let x = order.remove(i);
                order.insert(to, x);
            }
            let out = read_back(&skbs, &order, &reads);
            // A short skb's partial stamp may fit a later skb too: refused,
            // never misplaced.
            match out {
                Ok(out) => prop_assert_eq!(out, skbs.concat()),
                Err(e) => prop_assert_eq!(e, Unplaced::Ambiguous),
            }
        }
    }
}
