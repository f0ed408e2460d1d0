//! The handoff protocol between `weft front --mode handoff` and `weft serve
//! --handoff-socket` on one host: messages on a Unix SOCK_SEQPACKET
//! connection (one per front-end worker and back-end), built and read here
//! so both sides agree byte for byte. Sans-I/O: sending and receiving are
//! `sys::send_fd_with` / `sys::recv_fd_with` and `sys::send`.
//!
//! - front → back, **handoff**: `b'H'`, the connection's id (u64, little
//!   endian, chosen by the front-end worker), then the bytes the front-end
//!   already read from the client (its first request head, and whatever
//!   followed it); the client's socket travels as SCM_RIGHTS. The back-end
//!   adopts the socket as a connection of its own whose input starts with
//!   those bytes, and answers the client directly.
//!   The kind says what happens to the connection's later requests
//!   ([`NextRule`], `weft front --handoff-next`): `b'H'` the back-end keeps
//!   it and answers them (`keep`); `b'R'` it gives the connection back after
//!   each response (`return`); `b'O'` it answers a later request when it owns
//!   its target in the front-end's map and gives the connection back
//!   otherwise (`owner`); `b'L'` it answers the request(s) it was handed with
//!   `Connection: close` and closes (`close`).
//! - front → back, **owner table**: `b'T'`, the back-end's index in the
//!   front-end's list as the id, and a memfd (SCM_RIGHTS): the front-end's
//!   map of targets to owners ([`OwnerMap`]), shared memory the back-end maps
//!   read-only. Sent once, first on a channel, with `--handoff-next owner`.
//! - back → front, **back**: `b'B'`, the id, then the bytes the back-end read
//!   and did not answer (the start of the next request, or nothing), with the
//!   client's socket: the connection is idle there (its responses are sent)
//!   and returns to the front-end for its next request's placement. It ends
//!   the id as a closed report would.
//! - back → front, **closed**: `b'C'`, then one or more ids (u64 LE each) of
//!   handed-off connections the back-end has closed since its last report
//!   (one message per loop batch, not per connection). Each id is reported
//!   exactly once. A handoff message that arrives without a descriptor is
//!   reported closed at once.
//!
//! The end of the channel (EOF) means the peer is gone: to the front-end,
//! every connection handed over on it and not yet reported is finished and
//! the back-end is down; to the back-end, its adopted connections go on and
//! their reports are dropped.
//!
//! A message is at most [`MAX_MESSAGE`] bytes.

/// Kind byte of a handoff (front → back).
pub const HANDOFF: u8 = b'H';
/// Kind byte of a handoff whose connection comes back after each response.
pub const HANDOFF_RETURN: u8 = b'R';
/// Kind byte of a handoff whose later requests the back-end answers when it
/// owns their targets (else the connection comes back).
pub const HANDOFF_OWNER: u8 = b'O';
/// Kind byte of a handoff whose connection the back-end closes after its
/// response.
pub const HANDOFF_CLOSE: u8 = b'L';
/// Kind byte of the owner table (front → back, with a memfd).
pub const OWNER_TABLE: u8 = b'T';
/// Kind byte of a connection given back (back → front).
pub const BACK: u8 = b'B';
/// Kind byte of a closed report (back → front).
pub const CLOSED: u8 = b'C';
/// Kind and id.
pub const HEADER: usize = 9;
/// The largest message either side sends or accepts: a front-end refuses to
/// hand over more bytes than fit (its head limit is far below).
pub const MAX_MESSAGE: usize = 256 * 1024;
/// Ids in one closed report at most.
pub const MAX_REPORT_IDS: usize = 1024;

fn header(kind: u8, id: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0] = kind;
    h[1..].copy_from_slice(&id.to_le_bytes());
    h
}

fn parse(kind: u8, msg: &[u8]) -> Option<(u64, &[u8])> {
    if msg.len() < HEADER || msg[0] != kind {
        return None;
    }
    let id = u64::from_le_bytes(msg[1..HEADER].try_into().ok()?);
    Some((id, &msg[HEADER..]))
}

/// What the back-end does with a handed connection's later requests
/// (`weft front --handoff-next`; docs/front.md, "the next request").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NextRule {
    /// It answers them all.
    #[default]
    Keep,
    /// It gives the connection back after each response.
    Return,
    /// It answers one when it owns its target in the front-end's map, and
    /// gives the connection back (with the bytes read) otherwise.
    Owner,
    /// It closes the connection after the response (`Connection: close`).
    Close,
}

impl NextRule {
    /// Every rule, in `--handoff-next` order.
    pub const ALL: [NextRule; 4] = [NextRule::Keep, NextRule::Return, NextRule::Owner, NextRule::Close];

    /// The `--handoff-next` name.
    pub fn name(self) -> &'static str {
        match self {
            NextRule::Keep => "keep",
            NextRule::Return => "return",
            NextRule::Owner => "owner",
            NextRule::Close => "close",
        }
    }

    fn kind(self) -> u8 {
        match self {
            NextRule::Keep => HANDOFF,
            NextRule::Return => HANDOFF_RETURN,
            NextRule::Owner => HANDOFF_OWNER,
            NextRule::Close => HANDOFF_CLOSE,
        }
    }

    /// Two bits (0-3), for storing beside an id.
    pub fn bits(self) -> u64 {
        self as u64
    }

    /// The rule of [`NextRule::bits`].
    pub fn from_bits(b: u64) -> NextRule {
        NextRule::ALL[(b & 3) as usize]
    }
}

impl std::str::FromStr for NextRule {
    type Err = String;
    fn from_str(s: &str) -> Result<NextRule, String> {
        NextRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("unknown next-request rule `{s}` (expected keep, return, owner or close)"))
    }
}

/// The header of a handoff of connection `id` under `rule`.
pub fn handoff_header(id: u64, rule: NextRule) -> [u8; HEADER] {
    header(rule.kind(), id)
}

/// A received handoff: its id, its rule and the client's bytes. None: not a
/// handoff.
pub fn parse_handoff(msg: &[u8]) -> Option<(u64, NextRule, &[u8])> {
    let rule = NextRule::ALL.into_iter().find(|r| msg.first() == Some(&r.kind()))?;
    parse(rule.kind(), msg).map(|(id, b)| (id, rule, b))
}

/// The header of the owner-table message for back-end `server`.
pub fn owner_table_header(server: u64) -> [u8; HEADER] {
    header(OWNER_TABLE, server)
}

/// An owner-table message: the back-end's index. None: not one.
pub fn parse_owner_table(msg: &[u8]) -> Option<u64> {
    parse(OWNER_TABLE, msg).filter(|(_, b)| b.is_empty()).map(|(s, _)| s)
}

/// The target id both sides use: FNV-1a of the normalized origin-form
/// target (path and query), then a finalizer so nearby paths spread (the
/// front-end's policies place by it).
pub fn target_id(path: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // weft_policy's mix64 (splitmix64's finalizer).
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The request target of the request line at the start of `input`: Some
/// once the line is complete (None: not all read yet). The line is not
/// validated here (the back-end's parser does that if it answers).
pub fn request_target(input: &[u8]) -> Option<&[u8]> {
    // Leading empty lines are allowed before a request (RFC 9112 §2.2).
    let start = input.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let line = &input[start..];
    let end = line.iter().position(|&b| b == b'\n')?;
    let line = &line[..end];
    let mut parts = line.split(|&b| b == b' ');
    let _method = parts.next();
    Some(parts.next().unwrap_or(b""))
}

/// The front-end's target map as the back-ends see it: one word per slot,
/// the slot chosen by the target id modulo the table's length, holding the id's high bits
/// and the owner's index + 1 in the low [`OWNER_BITS`] (0: empty). Written
/// by the front-end after every placement (the only time its map changes:
/// a LARD reassignment happens when the target is placed), read by the
/// back-ends. A slot another target took since answers "not the owner", so
/// a collision costs a hand-back, never a wrong answer.
pub struct OwnerMap<'a>(pub &'a [std::sync::atomic::AtomicU64]);

/// Low bits of a slot holding the owner (back-ends up to 4095).
pub const OWNER_BITS: u32 = 12;
/// Slots in the table the front-end creates (4 MiB: 512 Ki targets).
pub const OWNER_SLOTS: usize = 1 << 19;

impl OwnerMap<'_> {
    fn slot(&self, target: u64) -> Option<&std::sync::atomic::AtomicU64> {
        let n = self.0.len();
        (n > 0).then(|| &self.0[(target % n as u64) as usize])
    }

    /// `target` was just placed on `owner`.
    pub fn record(&self, target: u64, owner: u64) {
        if owner + 1 >= 1 << OWNER_BITS {
            return;
        }
        if let Some(w) = self.slot(target) {
            let mask = !((1u64 << OWNER_BITS) - 1);
            w.store((target & mask) | (owner + 1), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The back-end `target` was last placed on, if its slot still holds it.
    pub fn owner(&self, target: u64) -> Option<u64> {
        let v = self.slot(target)?.load(std::sync::atomic::Ordering::Relaxed);
        let mask = !((1u64 << OWNER_BITS) - 1);
        let s = v & !mask;
        (s != 0 && v & mask == target & mask).then(|| s - 1)
    }
}

/// The header of connection `id` given back.
pub fn back_header(id: u64) -> [u8; HEADER] {
    header(BACK, id)
}

/// A connection given back: its id and the bytes read after its last
/// answered request. None: not a give-back.
pub fn parse_back(msg: &[u8]) -> Option<(u64, &[u8])> {
    parse(BACK, msg)
}

/// Append a closed report of `ids` (at most [`MAX_REPORT_IDS`]) to `out`.
pub fn closed_report(out: &mut Vec<u8>, ids: &[u64]) {
    out.push(CLOSED);
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

/// The ids of a closed report. None: not a well-formed report.
pub fn parse_closed(msg: &[u8]) -> Option<impl Iterator<Item = u64> + '_> {
    if msg.first() != Some(&CLOSED) || msg.len() < HEADER || !(msg.len() - 1).is_multiple_of(8) {
        return None;
    }
    Some(
        msg[1..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_and_reports_round_trip() {
        let mut m = handoff_header(0x0102_0304_0506_0708, NextRule::Keep).to_vec();
        m.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let got = parse_handoff(&m).unwrap();
        assert_eq!(
            got,
            (0x0102_0304_0506_0708, NextRule::Keep, &b"GET / HTTP/1.1\r\n\r\n"[..])
        );
        for r in NextRule::ALL {
            assert_eq!(parse_handoff(&handoff_header(5, r)).unwrap(), (5, r, &b""[..]));
            assert_eq!(NextRule::from_bits(r.bits()), r);
            assert_eq!(r.name().parse::<NextRule>(), Ok(r));
        }
        assert_eq!(parse_owner_table(&owner_table_header(3)), Some(3));
        assert!(parse_handoff(&owner_table_header(3)).is_none());
        let mut b = back_header(9).to_vec();
        b.extend_from_slice(b"GET");
        assert_eq!(parse_back(&b).unwrap(), (9, &b"GET"[..]));
        assert!(parse_back(&m).is_none() && parse_handoff(&b).is_none());
        assert!(parse_handoff(b"H1234567").is_none(), "too short");
        let mut r = Vec::new();
        closed_report(&mut r, &[1, 2, u64::MAX]);
        assert_eq!(parse_closed(&r).unwrap().collect::<Vec<_>>(), vec![1, 2, u64::MAX]);
        assert!(parse_closed(&r[..r.len() - 1]).is_none(), "a torn id");
        assert!(parse_closed(b"C").is_none(), "no id");
        assert!(parse_closed(&m).is_none(), "a handoff is not a report");
    }

    #[test]
    fn request_targets_and_the_owner_map() {
        assert_eq!(request_target(b"GET /a?b HTTP/1.1\r\nHost"), Some(&b"/a?b"[..]));
        assert_eq!(request_target(b"\r\nGET /x HTTP/1.1\n"), Some(&b"/x"[..]));
        assert_eq!(request_target(b"GET /a HTTP/1.1"), None, "line not complete");
        assert_eq!(request_target(b""), None);
        let words: Vec<std::sync::atomic::AtomicU64> = (0..64).map(|_| Default::default()).collect();
        let map = OwnerMap(&words);
        let (a, b) = (target_id(b"/a"), target_id(b"/b"));
        assert_eq!(map.owner(a), None);
        map.record(a, 2);
        assert_eq!(map.owner(a), Some(2));
        map.record(a, 0);
        assert_eq!(map.owner(a), Some(0), "moved: the last placement wins");
        // A target sharing a's slot takes it: a then has no known owner.
        let c = (1..)
            .map(|i| target_id(format!("/c{i}").as_bytes()))
            .find(|t| t % 64 == a % 64)
            .unwrap();
        map.record(c, 1);
        assert_eq!((map.owner(a), map.owner(c)), (None, Some(1)));
        assert_eq!(map.owner(b).filter(|_| b % 64 != a % 64), None);
    }
}
