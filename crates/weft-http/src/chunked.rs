//! The chunked transfer coding (RFC 9112 §7.1): a strict incremental decoder and
//! the encoder.
//!
//! The decoder is a byte-level state machine that never buffers: it consumes
//! framing bytes and points at chunk data inside the caller's input, so the
//! caller can copy the data, discard it, or — in the proxy — move it with
//! splice after reading only the framing ([`ChunkedDecoder::data_remaining`] and
//! [`ChunkedDecoder::consume_data`]). It is strict where leniency has been used
//! for request smuggling: CRLF is required (no bare LF or CR), chunk sizes are
//! hex digits only and at most 16 of them, extensions and trailers are bounded.

use std::fmt;
use std::ops::Range;

/// Longest chunk extension accepted, in bytes.
const MAX_EXTENSION: usize = 4096;
/// Largest trailer section accepted, in bytes.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid chunked body: {}", self.0)
    }
}

impl std::error::Error for ChunkError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size (`digits` so far).
    Size { value: u64, digits: u8 },
    /// Whitespace after the size, before `;` or CR.
    SizeWs { value: u64 },
    /// Inside a chunk extension.
    Ext { value: u64, len: usize },
    /// Expecting LF after the size line.
    SizeLf { value: u64 },
    /// Chunk data still to come.
    Data(u64),
    /// CR after chunk data.
    DataCr,
    /// LF after chunk data.
    DataLf,
    /// Start of a trailer line (or the final CRLF).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// LF ending a trailer line.
    TrailerLf,
    /// LF of the final CRLF.
    EndLf,
    /// The body is complete.
    Done,
}

/// What one call to [`ChunkedDecoder::decode`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes of the input consumed (framing and data).
    pub consumed: usize,
    /// Chunk data within the input, if any was reached.
    pub data: Option<Range<usize>>,
}

/// Incremental decoder of one chunked body.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    trailer_bytes: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

fn hex(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some((b - b'0') as u64),
        b'a'..=b'f' => Some((b - b'a' + 10) as u64),
        b'A'..=b'F' => Some((b - b'A' + 10) as u64),
        _ => None,
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size { value: 0, digits: 0 },
            trailer_bytes: 0,
        }
    }

    /// Has the last chunk and the trailer section been read?
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Chunk data bytes expected before the next framing bytes (0 while
    /// framing is being read).
    pub fn data_remaining(&self) -> u64 {
        match self.state {
            State::Data(n) => n,
            _ => 0,
        }
    }

    /// Record `n` chunk data bytes moved by other means (e.g. splice). `n` must
    /// not exceed [`data_remaining`](Self::data_remaining).
    pub fn consume_data(&mut self, n: u64) {
        if let State::Data(left) = self.state {
            let left = left.saturating_sub(n);
            self.state = if left == 0 { State::DataCr } else { State::Data(left) };
        }
    }

    /// Consume framing from `input` up to the next chunk data, the end of the
    /// body, or the end of the input. Chunk data is reported (and consumed) up to
    /// the end of the current chunk; call again for the rest.
    pub fn decode(&mut self, input: &[u8]) -> Result<Decoded, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                State::Size { value, digits } => match hex(b) {
                    Some(d) => {
                        if digits >= 16 {
                            return Err(ChunkError("chunk size too large"));
                        }
                        State::Size {
                            value: (value << 4) | d,
                            digits: digits + 1,
                        }
                    }
                    None if digits == 0 => return Err(ChunkError("chunk size is not a hex number")),
                    None => match b {
                        b'\r' => State::SizeLf { value },
                        b';' => State::Ext { value, len: 0 },
                        b' ' | b'\t' => State::SizeWs { value },
                        _ => return Err(ChunkError("chunk size is not a hex number")),
                    },
                },
                // BWS is allowed only before a chunk extension (RFC 9112
                // §7.1.1): `5 \r\n` is refused, never passed on as it came.
                State::SizeWs { value } => match b {
                    b' ' | b'\t' => State::SizeWs { value },
                    b';' => State::Ext { value, len: 0 },
                    b'\r' => return Err(ChunkError("whitespace after chunk size")),
                    _ => return Err(ChunkError("junk after chunk size")),
                },
                State::Ext { value, len } => match b {
                    b'\r' => State::SizeLf { value },
                    b'\n' => return Err(ChunkError("bare LF in chunk extension")),
                    0..=8 | 10..=31 | 127 => return Err(ChunkError("control byte in chunk extension")),
                    _ if len >= MAX_EXTENSION => return Err(ChunkError("chunk extension too long")),
                    _ => State::Ext { value, len: len + 1 },
                },
                State::SizeLf { value } => match b {
                    b'\n' if value == 0 => State::TrailerStart,
                    b'\n' => State::Data(value),
                    _ => return Err(ChunkError("bare CR after chunk size")),
                },
                State::Data(left) => {
                    let take = ((input.len() - i) as u64).min(left) as usize;
                    let left = left - take as u64;
                    self.state = if left == 0 { State::DataCr } else { State::Data(left) };
                    return Ok(Decoded {
                        consumed: i + take,
                        data: Some(i..i + take),
                    });
                }
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    _ => return Err(ChunkError("chunk data longer than its size")),
                },
                State::DataLf => match b {
                    b'\n' => State::Size { value: 0, digits: 0 },
                    _ => return Err(ChunkError("bare CR after chunk data")),
                },
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => return Err(ChunkError("bare LF in trailer section")),
                    _ => {
                        self.trailer_bytes += 1;
                        State::Trailer
                    }
                },
                State::Trailer => {
                    self.trailer_bytes += 1;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err(ChunkError("trailer section too large"));
                    }
                    match b {
                        b'\r' => State::TrailerLf,
                        b'\n' => return Err(ChunkError("bare LF in trailer section")),
                        0..=8 | 11..=31 | 127 => return Err(ChunkError("control byte in trailer")),
                        _ => State::Trailer,
                    }
                }
                State::TrailerLf => match b {
                    b'\n' => State::TrailerStart,
                    _ => return Err(ChunkError("bare CR in trailer section")),
                },
                State::EndLf => match b {
                    b'\n' => {
                        self.state = State::Done;
                        return Ok(Decoded {
                            consumed: i + 1,
                            data: None,
                        });
                    }
                    _ => return Err(ChunkError("bare CR at end of body")),
                },
                State::Done => {
                    return Ok(Decoded {
                        consumed: i,
                        data: None,
                    })
                }
            };
            i += 1;
        }
        Ok(Decoded {
            consumed: i,
            data: None,
        })
    }

    /// Decode all of `input`, handing each piece of chunk data to `sink`.
    /// Returns bytes consumed (less than `input.len()` only when the body ended).
    pub fn decode_all(&mut self, input: &[u8], mut sink: impl FnMut(&[u8])) -> Result<usize, ChunkError> {
        let mut off = 0;
        while off < input.len() && !self.is_done() {
            let d = self.decode(&input[off..])?;
            if let Some(r) = d.data {
                sink(&input[off + r.start..off + r.end]);
            }
            off += d.consumed;
        }
        Ok(off)
    }
}

/// The last chunk and an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Append the size line of a chunk of `len` bytes (`len` must not be 0: that
/// is [`LAST_CHUNK`]).
pub fn encode_chunk_head(len: usize, out: &mut Vec<u8>) {
    let mut tmp = [0u8; 16];
    let mut i = tmp.len();
    let mut n = len;
    loop {
        i -= 1;
        tmp[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
    out.extend_from_slice(b"\r\n");
}

/// Encode `body` as chunks of at most `chunk` bytes, with the last chunk.
pub fn encode(body: &[u8], chunk: usize, out: &mut Vec<u8>) {
    for piece in body.chunks(chunk.max(1)) {
        encode_chunk_head(piece.len(), out);
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(LAST_CHUNK);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_whole(input: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let n = d.decode_all(input, |b| out.extend_from_slice(b))?;
        Ok((out, n, d.is_done()))
    }

    #[test]
    fn decodes_with_extensions_and_trailers() {
        let body = b"5;name=val\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (out, n, done) = decode_whole(body).unwrap();
        assert_eq!(out, b"hello world");
        assert!(done);
        assert_eq!(&body[n..], b"NEXT");
        let (out, _, done) = decode_whole(b"A \t;x\r\n0123456789\r\n0\r\n\r\n").unwrap();
        assert_eq!(out.len(), 10);
        assert!(done);
    }

    #[test]
    fn strict_framing() {
        for bad in [
            &b"zz\r\nabc\r\n0\r\n\r\n"[..],
            b"\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"-1\r\n",
            b"0x5\r\n",
            b"5 x\r\n",
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"5\t\r\nhello\r\n0\r\n\r\n",
            b"0\r\nX: 1\n\r\n",
            b"0\r\n\n",
        ] {
            assert!(decode_whole(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn splice_style_data_accounting() {
        let mut d = ChunkedDecoder::new();
        let r = d.decode(b"400\r\n").unwrap();
        assert_eq!(r.consumed, 5);
        assert_eq!(d.data_remaining(), 0x400);
        d.consume_data(0x400);
        assert_eq!(d.data_remaining(), 0);
        d.decode(b"\r\n0\r\n\r\n").unwrap();
        assert!(d.is_done());
    }

    #[test]
    fn encoder_writes_hex_sizes() {
        let mut out = Vec::new();
        encode(&[7u8; 300], 256, &mut out);
        assert!(out.starts_with(b"100\r\n"));
        assert!(out.ends_with(b"\r\n0\r\n\r\n"));
    }

    proptest! {
        /// Encoding then decoding, with the encoded stream split anywhere, gives
        /// the body back.
        #[test]
        fn round_trip(body in proptest::collection::vec(any::<u8>(), 0..2000), chunk in 1usize..700, cuts in proptest::collection::vec(0usize..3000, 0..6)) {
            let mut enc = Vec::new();
            encode(&body, chunk, &mut enc);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (enc.len() + 1)).collect();
            cuts.push(0);
            cuts.push(enc.len());
            cuts.sort();
            let mut d = ChunkedDecoder::new();
            let mut out = Vec::new();
            for w in cuts.windows(2) {
                let n = d.decode_all(&enc[w[0]..w[1]], |b| out.extend_from_slice(b)).unwrap();
                prop_assert_eq!(n, w[1] - w[0]);
            }
            prop_assert!(d.is_done());
            prop_assert_eq!(out, body);
        }
    }
}
