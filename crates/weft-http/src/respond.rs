//! Writing response heads and small generated bodies into a connection's
//! output buffer, without allocating: the buffer is reused across requests.
//! Shared by `weft serve` and `weft proxy` (the proxy's own answers: errors,
//! cache hits, CONNECT replies).
//!
//! The rules every response weft writes itself follows, kept here so every
//! role gets them:
//! - it carries `Date` (RFC 9110 §6.6.1) and `Server` ([`start_head`]);
//! - a 4xx or 5xx carries a short `text/plain` body saying what was wrong,
//!   except to HEAD, whose head still announces its length ([`simple`]);
//! - a 304 carries only the fields RFC 9110 §15.4.5 lists of those a 200
//!   would have had: Cache-Control, Content-Location, Date, ETag, Expires,
//!   Vary, and Last-Modified when there is no ETag ([`not_modified`]);
//! - `Age` is the caller's to add, and only to a 200, 206 or 304 derived
//!   from a stored response: never to a response it generates (a 412 or
//!   416 with `Age` reads as a stored one).

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

/// Whether a 304 carries the field `name` of those a 200 to the same request
/// would carry (RFC 9110 §15.4.5): Cache-Control, Content-Location, Date,
/// ETag, Expires and Vary; Last-Modified only when there is no ETag (it
/// then guides the cache update); and the response's own metadata, `Server`
/// and a proxy's `Via`. Representation metadata (Content-Type,
/// Content-Length, Accept-Ranges...) is not sent.
pub fn kept_in_304(name: &[u8], has_etag: bool) -> bool {
    const KEPT: [&[u8]; 8] = [
        b"cache-control",
        b"content-location",
        b"date",
        b"etag",
        b"expires",
        b"vary",
        b"server",
        b"via",
    ];
    KEPT.iter().any(|k| k.eq_ignore_ascii_case(name)) || (!has_etag && name.eq_ignore_ascii_case(b"last-modified"))
}

/// The header lines of `fields` (`Name: value`, each ending in CRLF or LF):
/// each line's name and the line without its end.
fn lines(fields: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    fields.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((line[..colon].trim_ascii(), line))
    })
}

/// The head of a 304 built from the fields a 200 would carry (`fields`:
/// header lines, e.g. a file's precomputed fields or a stored response's
/// head after its status line): the status line, then only the lines
/// [`kept_in_304`] keeps, then `Server: weft` and `Date: date` if `fields`
/// had none (a stored response keeps its own). No `Content-Length`, no
/// blank line: the caller adds `Age` (from a stored response), the
/// connection field and the end ([`end_head`] with `None`).
pub fn not_modified(out: &mut Vec<u8>, date: &[u8], fields: &[u8]) {
    encode::status_line(out, 304);
    let has_etag = lines(fields).any(|(name, _)| name.eq_ignore_ascii_case(b"etag"));
    let (mut has_date, mut has_server) = (false, false);
    for (name, line) in lines(fields) {
        if kept_in_304(name, has_etag) {
            has_date |= name.eq_ignore_ascii_case(b"date");
            has_server |= name.eq_ignore_ascii_case(b"server");
            out.extend_from_slice(line);
            out.extend_from_slice(b"\r\n");
        }
    }
    if !has_server {
        encode::field(out, b"Server", b"weft");
    }
    if !has_date {
        encode::date(out, date);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_304_keeps_only_what_rfc_9110_lists() {
        let file = b"Content-Type: text/html\r\nLast-Modified: L\r\nETag: \"e\"\r\nAccept-Ranges: bytes\r\n";
        let mut out = Vec::new();
        not_modified(&mut out, b"D", file);
        end_head(&mut out, None, Persist::Default);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\nServer: weft\r\nDate: D\r\n\r\n"
        );
        // A stored head keeps its own Date and Server; Last-Modified stays
        // when there is no ETag.
        let stored = b"Date: d\r\nServer: o\r\nContent-Type: x\r\nContent-Length: 5\r\nLast-Modified: L\r\n\
                       Cache-Control: max-age=5\r\nVary: a\r\nExpires: e\r\nContent-Location: /c\r\nVia: 1.1 p\r\nX-Other: y\r\n";
        let mut out = Vec::new();
        not_modified(&mut out, b"NOW", stored);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 304 Not Modified\r\nDate: d\r\nServer: o\r\nLast-Modified: L\r\nCache-Control: max-age=5\r\n\
             Vary: a\r\nExpires: e\r\nContent-Location: /c\r\nVia: 1.1 p\r\n"
        );
    }

    #[test]
    fn errors_have_a_body_except_to_head() {
        let mut out = Vec::new();
        let n = simple(&mut out, 404, b"D", b"", "", true, Persist::Default);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 404 Not Found\r\nServer: weft\r\nDate: D\r\n"),
            "{text}"
        );
        assert!(text.contains("Content-Type: text/plain; charset=utf-8\r\n"));
        assert!(text.ends_with(&format!("Content-Length: {n}\r\n\r\n")), "{text}");
    }

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
