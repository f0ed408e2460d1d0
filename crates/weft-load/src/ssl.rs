//! SSL handshake emulation (paper 001, Table III): client and server exchange
//! messages of the lengths and in the order of a real SSL handshake, without
//! any cryptography, so a proxy tunnelling CONNECT sees the same traffic shape.
//!
//! | handshake | sequence (source and bytes) |
//! | --- | --- |
//! | full | Clt(98) Srv(2239) Clt(73) Srv(6) Clt(67) Srv(61) |
//! | abbreviated | Clt(98) Srv(79) Srv(6) Srv(61) Clt(6) Clt(61) |
//!
//! 60 % of handshakes are abbreviated (session resumption). Each message looks
//! like a TLS record (content type, version 3.1, 16-bit length) so a capture
//! reads naturally. The ClientHello says which handshake follows the way TLS
//! does: a non-empty session id (byte 43 = 32) asks for resumption. The server
//! (`weft origin`) recognises a handshake by the first byte of the connection,
//! 0x16, which no HTTP request starts with. Consecutive messages from the same
//! side travel in one write.

/// Who sends a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// The two handshakes of Table III.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// A full handshake (certificate, key exchange).
    Full,
    /// An abbreviated handshake (session resumption).
    Abbreviated,
}

/// Share of abbreviated handshakes (paper 001: "Among all handshakes, 60% are abbreviated").
pub const ABBREVIATED_SHARE: f64 = 0.6;

/// Length of the ClientHello.
pub const CLIENT_HELLO: usize = 98;
/// Offset of the session-id length in the ClientHello (record 5 + handshake 4 + version 2 + random 32).
const SESSION_ID_LEN_AT: usize = 43;

const FULL: [(Side, usize); 6] = [
    (Side::Client, 98),
    (Side::Server, 2239),
    (Side::Client, 73),
    (Side::Server, 6),
    (Side::Client, 67),
    (Side::Server, 61),
];
const ABBREVIATED: [(Side, usize); 6] = [
    (Side::Client, 98),
    (Side::Server, 79),
    (Side::Server, 6),
    (Side::Server, 61),
    (Side::Client, 6),
    (Side::Client, 61),
];

impl Handshake {
    /// The messages in order.
    pub fn messages(self) -> &'static [(Side, usize)] {
        match self {
            Handshake::Full => &FULL,
            Handshake::Abbreviated => &ABBREVIATED,
        }
    }

    /// The exchange as alternating flights: consecutive messages of one side
    /// merged, as (side, total bytes, message lengths).
    pub fn flights(self) -> Vec<(Side, usize, Vec<usize>)> {
        let mut out: Vec<(Side, usize, Vec<usize>)> = Vec::new();
        for &(side, len) in self.messages() {
            match out.last_mut() {
                Some((s, total, lens)) if *s == side => {
                    *total += len;
                    lens.push(len);
                }
                _ => out.push((side, len, vec![len])),
            }
        }
        out
    }

    /// Which handshake a ClientHello asks for (None: not a ClientHello).
    pub fn from_client_hello(hello: &[u8]) -> Option<Handshake> {
        if hello.len() < CLIENT_HELLO || hello[0] != 0x16 || hello[5] != 0x01 {
            return None;
        }
        Some(if hello[SESSION_ID_LEN_AT] == 0 {
            Handshake::Full
        } else {
            Handshake::Abbreviated
        })
    }

    /// Bytes a side sends for one flight: TLS-looking records of the given lengths.
    pub fn render_flight(self, lens: &[usize], first_of_connection: bool, out: &mut Vec<u8>) {
        for (i, &len) in lens.iter().enumerate() {
            let start = out.len();
            // A 6-byte message is a ChangeCipherSpec record (5 + 1); the others
            // are handshake records.
            let content_type = if len == 6 { 0x14 } else { 0x16 };
            let body = len.saturating_sub(5) as u16;
            out.extend_from_slice(&[content_type, 3, 1, (body >> 8) as u8, body as u8]);
            out.resize(start + len, 0);
            if len == 6 {
                out[start + 5] = 1;
            } else if len > 5 {
                // Handshake type: ClientHello (1) for the connection's first
                // message, ServerHello (2) or Finished (20) otherwise.
                out[start + 5] = if first_of_connection && i == 0 {
                    1
                } else if len == 61 {
                    20
                } else {
                    2
                };
                if first_of_connection && i == 0 && self == Handshake::Abbreviated && len > SESSION_ID_LEN_AT {
                    out[start + SESSION_ID_LEN_AT] = 32;
                }
            }
        }
    }
}

/// Is `first` the first byte of an emulated handshake (a TLS handshake record)?
#[inline]
pub fn starts_handshake(first: u8) -> bool {
    first == 0x16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_three() {
        let f = Handshake::Full.flights();
        let sizes: Vec<(Side, usize)> = f.iter().map(|(s, n, _)| (*s, *n)).collect();
        assert_eq!(
            sizes,
            vec![
                (Side::Client, 98),
                (Side::Server, 2239),
                (Side::Client, 73),
                (Side::Server, 6),
                (Side::Client, 67),
                (Side::Server, 61)
            ]
        );
        let a = Handshake::Abbreviated.flights();
        let sizes: Vec<(Side, usize)> = a.iter().map(|(s, n, _)| (*s, *n)).collect();
        assert_eq!(sizes, vec![(Side::Client, 98), (Side::Server, 146), (Side::Client, 67)]);
        let total = |h: Handshake| h.messages().iter().map(|m| m.1).sum::<usize>();
        assert_eq!(total(Handshake::Full), 2544);
        assert_eq!(total(Handshake::Abbreviated), 311);
    }

    #[test]
    fn client_hello_says_which_handshake() {
        for h in [Handshake::Full, Handshake::Abbreviated] {
            let mut out = Vec::new();
            h.render_flight(&[CLIENT_HELLO], true, &mut out);
            assert_eq!(out.len(), CLIENT_HELLO);
            assert!(starts_handshake(out[0]));
            assert_eq!(Handshake::from_client_hello(&out), Some(h));
        }
        assert_eq!(Handshake::from_client_hello(b"GET / HTTP/1.1\r\n"), None);
        let mut out = Vec::new();
        Handshake::Abbreviated.render_flight(&[79, 6, 61], false, &mut out);
        assert_eq!(out.len(), 146);
        assert_eq!(out[79], 0x14, "ChangeCipherSpec record");
        assert_eq!(&out[85..88], &[0x16, 3, 1]);
    }
}
