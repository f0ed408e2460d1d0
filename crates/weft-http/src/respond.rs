//! Writing response heads and small generated bodies into a connection's
//! output buffer, without allocating: the buffer is reused across requests.
//! Shared by `weft serve` and `weft proxy` (the proxy's own answers: errors,
//! cache hits, CONNECT replies).

use crate::encode;
use std::io::Write;

pub use crate::encode::{push_u64, Persist};

/// Status line, `Server` and `Date`.
#[inline]
pub fn start_head(out: &mut Vec<u8>, status: u16, date: &[u8]) {
    encode::status_line(out, status);
    encode::field(out, b"Server", b"weft");
    encode::date(out, date);
}

/// `Content-Length` (when given), the connection header, and the blank line.
#[inline]
pub fn end_head(out: &mut Vec<u8>, content_length: Option<u64>, persist: Persist) {
    if let Some(n) = content_length {
        encode::content_length(out, n);
    }
    encode::connection(out, persist);
    encode::end(out);
}

/// A complete short text response (errors, redirects, OPTIONS).
/// `extra` holds full header lines ending in CRLF. The body is omitted for HEAD
/// (its length is still announced) and for 204/304.
#[allow(clippy::too_many_arguments)]
pub fn simple(
    out: &mut Vec<u8>,
    status: u16,
    date: &[u8],
    extra: &[u8],
    detail: &str,
    head_only: bool,
    persist: Persist,
) -> u64 {
    simple_with(
        out,
        status,
        date,
        |o| o.extend_from_slice(extra),
        detail,
        head_only,
        persist,
    )
}

/// [`simple`] whose extra fields are written by `extra` straight into `out`
/// (a 416's `Content-Range`, say, with [`encode::content_range`]), so no
/// buffer is built for them.
#[allow(clippy::too_many_arguments)]
pub fn simple_with(
    out: &mut Vec<u8>,
    status: u16,
    date: &[u8],
    extra: impl FnOnce(&mut Vec<u8>),
    detail: &str,
    head_only: bool,
    persist: Persist,
) -> u64 {
    start_head(out, status, date);
    extra(out);
    if status == 204 || status == 304 {
        end_head(out, None, persist);
        return 0;
    }
    encode::field(out, b"Content-Type", b"text/plain; charset=utf-8");
    let reason = crate::reason_phrase(status);
    // "404 Not Found\n" or "400 Bad Request: both Content-Length and Transfer-Encoding\n"
    let len = 3 + 1 + reason.len() + if detail.is_empty() { 0 } else { 2 + detail.len() } + 1;
    end_head(out, Some(len as u64), persist);
    if !head_only {
        let _ = write!(out, "{status} {reason}");
        if !detail.is_empty() {
            let _ = write!(out, ": {detail}");
        }
        out.push(b'\n');
    }
    len as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        for n in [0u64, 1, 9, 10, 12345, u64::MAX] {
            let mut v = Vec::new();
            push_u64(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }

    #[test]
    fn simple_response_length_matches_body() {
        let mut out = Vec::new();
        let n = simple(
            &mut out,
            404,
            b"Sun, 22 Nov 2026 13:45:00 GMT",
            b"",
            "",
            false,
            Persist::Default,
        );
        let text = String::from_utf8(out).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len() as u64, n);
        assert_eq!(body, "404 Not Found\n");
        let mut out = Vec::new();
        let n = simple(&mut out, 400, b"D", b"", "bare CR", false, Persist::Close);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Connection: close\r\n"));
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len() as u64, n);
    }
}
