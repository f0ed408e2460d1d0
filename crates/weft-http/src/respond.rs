//! Writing response heads and small generated bodies into a connection's
//! output buffer, without allocating: the buffer is reused across requests.
//! Shared by `weft serve` and `weft proxy` (the proxy's own answers: errors,
//! cache hits, CONNECT replies).

use std::io::Write;

/// Append a decimal number (same as [`crate::push_decimal`]).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    crate::push_decimal(out, n);
}

/// Status line, `Server` and `Date`.
#[inline]
pub fn start_head(out: &mut Vec<u8>, status: u16, date: &[u8]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_u64(out, status as u64);
    out.push(b' ');
    out.extend_from_slice(crate::reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\nServer: weft\r\nDate: ");
    out.extend_from_slice(date);
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

/// `Content-Length` (when given), the connection header, and the blank line.
#[inline]
pub fn end_head(out: &mut Vec<u8>, content_length: Option<u64>, persist: Persist) {
    if let Some(n) = content_length {
        out.extend_from_slice(b"Content-Length: ");
        push_u64(out, n);
        out.extend_from_slice(b"\r\n");
    }
    match persist {
        Persist::Default => {}
        Persist::KeepAlive10 => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        Persist::Close => out.extend_from_slice(b"Connection: close\r\n"),
    }
    out.extend_from_slice(b"\r\n");
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
    start_head(out, status, date);
    out.extend_from_slice(extra);
    if status == 204 || status == 304 {
        end_head(out, None, persist);
        return 0;
    }
    out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
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
