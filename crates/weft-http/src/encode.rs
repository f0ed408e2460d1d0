//! The encode side of a response head: each function appends one piece (the
//! status line, one field, the blank line) to a connection's reused output
//! `Vec`, formatting integers by hand, so writing a head allocates nothing
//! once that `Vec` has grown to its working size. This is the mirror of
//! [`crate::response`]'s parser, as hyper's `proto/h1/encode.rs` mirrors its
//! decoder.
//!
//! Every role writes its heads here (`weft serve`, the proxy's own answers and
//! relayed heads, the origin emulator, the load generator's requests), so
//! `Content-Length`, `Content-Range` and the validators are spelled once.
//! The functions are small and `#[inline]`: a head is a sequence of calls, in
//! the order the fields should appear on the wire.

use crate::date::fmt_http_date;
use std::time::SystemTime;

/// The longest decimal a `u64` needs.
const U64_DIGITS: usize = 20;

/// Append the decimal digits of `n`.
#[inline]
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; U64_DIGITS];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// `HTTP/1.1 <status> <reason>\r\n`.
#[inline]
pub fn status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_u64(out, status as u64);
    out.push(b' ');
    out.extend_from_slice(crate::reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `<name>: <value>\r\n` (the value is written as given).
#[inline]
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `<name>: <n>\r\n` for a field whose value is a decimal (`Age`, ...).
#[inline]
pub fn field_u64(out: &mut Vec<u8>, name: &[u8], n: u64) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    push_u64(out, n);
    out.extend_from_slice(b"\r\n");
}

/// `Date: <date>\r\n`, from a preformatted IMF-fixdate (a
/// [`DateCache`](crate::DateCache) value).
#[inline]
pub fn date(out: &mut Vec<u8>, date: &[u8]) {
    field(out, b"Date", date);
}

/// `Content-Length: <n>\r\n`.
#[inline]
pub fn content_length(out: &mut Vec<u8>, n: u64) {
    field_u64(out, b"Content-Length", n);
}

/// `ETag: <etag>\r\n` (the entity tag with its quotes, and `W/` if weak).
#[inline]
pub fn etag(out: &mut Vec<u8>, etag: &[u8]) {
    field(out, b"ETag", etag);
}

/// `Last-Modified: <date>\r\n`, formatted from `t` (to the second).
#[inline]
pub fn last_modified(out: &mut Vec<u8>, t: SystemTime) {
    field(out, b"Last-Modified", &fmt_http_date(t));
}

/// The value of a `Content-Range` field (RFC 9110 §14.4), bytes unit only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/complete`: a 206 carries this part.
    Bytes {
        /// First byte sent.
        first: u64,
        /// Last byte sent (inclusive, as the field spells it).
        last: u64,
        /// Length of the whole representation.
        complete: u64,
    },
    /// `bytes */complete`: a 416 says how long the representation is.
    Unsatisfied {
        /// Length of the whole representation.
        complete: u64,
    },
}

impl ContentRange {
    /// Parse a `Content-Range` value (RFC 9110 §14.4): `bytes first-last/complete`
    /// or `bytes */complete`. None for another unit, an unknown complete length
    /// (`/*`), a last byte before the first or past the end, or anything malformed.
    pub fn parse(value: &[u8]) -> Option<ContentRange> {
        let v = crate::trim(value);
        let rest = v.get(..6).filter(|u| u.eq_ignore_ascii_case(b"bytes "))?;
        let rest = crate::trim(&v[rest.len()..]);
        let slash = rest.iter().position(|&b| b == b'/')?;
        let complete = crate::parse_decimal(&rest[slash + 1..])?;
        let range = &rest[..slash];
        if range == b"*" {
            return Some(ContentRange::Unsatisfied { complete });
        }
        let dash = range.iter().position(|&b| b == b'-')?;
        let first = crate::parse_decimal(&range[..dash])?;
        let last = crate::parse_decimal(&range[dash + 1..])?;
        (first <= last && last < complete).then_some(ContentRange::Bytes { first, last, complete })
    }

    /// A part that is the whole representation (`bytes 0-(n-1)/n`).
    pub fn is_whole(&self) -> bool {
        matches!(*self, ContentRange::Bytes { first: 0, last, complete } if last + 1 == complete)
    }
}

/// `Content-Range: bytes first-last/complete\r\n` or `bytes */complete`.
#[inline]
pub fn content_range(out: &mut Vec<u8>, range: ContentRange) {
    out.extend_from_slice(b"Content-Range: bytes ");
    match range {
        ContentRange::Bytes { first, last, complete } => {
            push_u64(out, first);
            out.push(b'-');
            push_u64(out, last);
            out.push(b'/');
            push_u64(out, complete);
        }
        ContentRange::Unsatisfied { complete } => {
            out.extend_from_slice(b"*/");
            push_u64(out, complete);
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// How the connection continues after this response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persist {
    /// HTTP/1.1 keep-alive (the default: no header needed).
    Default,
    /// HTTP/1.0 keep-alive: must be announced.
    KeepAlive10,
    /// The connection closes after this response.
    Close,
}

impl Persist {
    /// From the two facts every role knows: whether it will close, and
    /// whether the client spoke HTTP/1.0 (whose keep-alive must be announced).
    #[inline]
    pub fn new(close: bool, http10: bool) -> Persist {
        if close {
            Persist::Close
        } else if http10 {
            Persist::KeepAlive10
        } else {
            Persist::Default
        }
    }
}

/// The `Connection` field `persist` needs, if any.
#[inline]
pub fn connection(out: &mut Vec<u8>, persist: Persist) {
    match persist {
        Persist::Default => {}
        Persist::KeepAlive10 => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        Persist::Close => out.extend_from_slice(b"Connection: close\r\n"),
    }
}

/// The blank line that ends a head.
#[inline]
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn written(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn fields() {
        assert_eq!(written(|v| status_line(v, 206)), "HTTP/1.1 206 Partial Content\r\n");
        assert_eq!(written(|v| status_line(v, 599)), "HTTP/1.1 599 Server Error\r\n");
        assert_eq!(written(|v| content_length(v, 0)), "Content-Length: 0\r\n");
        assert_eq!(written(|v| field_u64(v, b"Age", 42)), "Age: 42\r\n");
        assert_eq!(written(|v| date(v, b"D")), "Date: D\r\n");
        assert_eq!(written(|v| etag(v, b"\"a-1\"")), "ETag: \"a-1\"\r\n");
        assert_eq!(
            written(|v| last_modified(v, UNIX_EPOCH + Duration::from_secs(784_111_777))),
            "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        assert_eq!(written(|v| connection(v, Persist::Default)), "");
        assert_eq!(
            written(|v| connection(v, Persist::new(true, true))),
            "Connection: close\r\n"
        );
        assert_eq!(
            written(|v| connection(v, Persist::new(false, true))),
            "Connection: keep-alive\r\n"
        );
        assert_eq!(written(end), "\r\n");
    }

    #[test]
    fn content_ranges() {
        let part = ContentRange::Bytes {
            first: 0,
            last: 4,
            complete: 12,
        };
        assert_eq!(written(|v| content_range(v, part)), "Content-Range: bytes 0-4/12\r\n");
        let none = ContentRange::Unsatisfied { complete: 12 };
        assert_eq!(written(|v| content_range(v, none)), "Content-Range: bytes */12\r\n");
    }

    #[test]
    fn content_ranges_parse() {
        let parse = |s: &str| ContentRange::parse(s.as_bytes());
        let part = |first, last, complete| Some(ContentRange::Bytes { first, last, complete });
        assert_eq!(parse("bytes 0-4/12"), part(0, 4, 12));
        assert_eq!(parse(" Bytes 11-11/12 "), part(11, 11, 12));
        assert_eq!(parse("bytes */12"), Some(ContentRange::Unsatisfied { complete: 12 }));
        for bad in [
            "bytes 0-4/*",
            "bytes 5-4/12",
            "bytes 0-12/12",
            "bytes 0-4",
            "bytes -4/12",
            "bytes 0-/12",
            "items 0-4/12",
            "bytes 0--4/12",
            "bytes +0-4/12",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert!(part(0, 11, 12).unwrap().is_whole());
        assert!(!part(0, 10, 12).unwrap().is_whole());
        assert!(!part(1, 11, 12).unwrap().is_whole());
        assert!(!ContentRange::Unsatisfied { complete: 0 }.is_whole());
    }

    #[test]
    fn writing_into_a_grown_vec_does_not_reallocate() {
        let mut v = Vec::with_capacity(256);
        let p = v.as_ptr();
        status_line(&mut v, 206);
        date(&mut v, b"Sun, 06 Nov 1994 08:49:37 GMT");
        content_length(&mut v, u64::MAX);
        content_range(
            &mut v,
            ContentRange::Bytes {
                first: u64::MAX - 1,
                last: u64::MAX - 1,
                complete: u64::MAX,
            },
        );
        last_modified(&mut v, UNIX_EPOCH);
        end(&mut v);
        assert_eq!(v.as_ptr(), p);
    }

    proptest! {
        #[test]
        fn integers_format_like_std(n: u64) {
            let mut v = b"x".to_vec();
            push_u64(&mut v, n);
            prop_assert_eq!(v, format!("x{n}").into_bytes());
        }

        #[test]
        fn content_range_formats_like_std(first: u64, last: u64, complete: u64) {
            let s = written(|v| content_range(v, ContentRange::Bytes { first, last, complete }));
            prop_assert_eq!(s, format!("Content-Range: bytes {first}-{last}/{complete}\r\n"));
        }

        #[test]
        fn content_range_parses_what_it_writes(first in 0u64..1 << 58, len in 0u64..1 << 58, more in 0u64..1 << 58) {
            // (parse_decimal takes up to 19 digits.)
            let (last, complete) = (first + len, first + len + more + 1);
            let r = ContentRange::Bytes { first, last, complete };
            let s = written(|v| content_range(v, r));
            let value = s.trim_start_matches("Content-Range:").trim_end();
            prop_assert_eq!(ContentRange::parse(value.as_bytes()), Some(r));
        }
    }
}
