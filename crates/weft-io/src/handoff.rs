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
//!   Kind `b'R'` instead of `b'H'` asks the back-end to give the connection
//!   back after each response (`weft front --handoff-next return`).
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

/// The header of a handoff of connection `id` (`give_back`: after each
/// response, the back-end returns it).
pub fn handoff_header(id: u64, give_back: bool) -> [u8; HEADER] {
    header(if give_back { HANDOFF_RETURN } else { HANDOFF }, id)
}

/// A received handoff: its id, whether to give the connection back after
/// each response, and the client's bytes. None: not a handoff.
pub fn parse_handoff(msg: &[u8]) -> Option<(u64, bool, &[u8])> {
    match parse(HANDOFF, msg) {
        Some((id, b)) => Some((id, false, b)),
        None => parse(HANDOFF_RETURN, msg).map(|(id, b)| (id, true, b)),
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
        let mut m = handoff_header(0x0102_0304_0506_0708, false).to_vec();
        m.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let got = parse_handoff(&m).unwrap();
        assert_eq!(got, (0x0102_0304_0506_0708, false, &b"GET / HTTP/1.1\r\n\r\n"[..]));
        assert_eq!(parse_handoff(&handoff_header(5, true)).unwrap(), (5, true, &b""[..]));
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
}
