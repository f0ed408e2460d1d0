//! weft-http: sans-I/O HTTP/1.1 for both roles.
//!
//! Nothing here touches a socket or reads a clock: functions take bytes (and,
//! where time matters, a `SystemTime` the caller read) and return decisions,
//! so the server, the proxy and the load generator share one strict codec and
//! tests need no network.
//!
//! - [`request`]: request heads (httparse underneath) with the checks that matter
//!   for security — smuggling (CL+TE, differing lengths), obs-fold, bare CR, bad
//!   bytes, HTTP/0.9, bad targets — and the limits (414, 431, 501);
//! - [`response`]: response heads for the client role (proxy, load generator),
//!   with body framing per RFC 9112 §6.3;
//! - [`chunked`]: the chunked transfer coding, decoder and encoder;
//! - [`date`]: HTTP dates, and a Date value formatted once per second;
//! - [`conditional`]: strong ETags, If-Match / If-None-Match /
//!   If-Modified-Since / If-Unmodified-Since / If-Range (RFC 9110 §13);
//! - [`range`]: single byte ranges (RFC 9110 §14);
//! - [`cache_control`] and [`caching`]: the Cache-Control parser and the rules
//!   of a shared cache (RFC 9111: storability, freshness, age, Vary, 304
//!   merging, invalidation), with the clock passed in;
//! - [`targeted`]: which field a cache takes its directives from (RFC 9213
//!   targeted fields in a surrogate) and the fields `no-cache="..."` withholds;
//! - [`represent`]: the answer to a request from a representation already
//!   held (a file, a cache hit): preconditions, If-Range and Range in RFC
//!   order, giving 200 / 206 / 304 / 412 / 416 and the bytes to send;
//! - [`encode`]: the head writer (status line, Date, Content-Length,
//!   Content-Range, validators) with integers formatted without allocating;
//! - [`respond`]: whole heads and short generated responses built on it;
//! - [`host`]: Host / authority validation (RFC 9112 §3.2) and the
//!   dot-segment removal of a target's path (RFC 3986 §5.2.4) for forwarding;
//! - [`fastcgi`]: the FastCGI responder role's records, the CGI response head
//!   and the CGI/1.1 environment, for zero-copy dynamic content.
//!
//! Heads are parsed into offsets, not copies: a [`RequestHead`] or
//! [`ResponseHead`] is reused across messages and answers questions about the
//! buffer it was parsed from, so parsing allocates nothing per request.

#![forbid(unsafe_code)]

pub mod cache_control;
pub mod caching;
pub mod chunked;
pub mod coding;
pub mod conditional;
pub mod date;
pub mod encode;
pub mod fastcgi;
pub mod host;
pub mod range;
pub mod represent;
pub mod request;
pub mod respond;
pub mod response;
pub mod targeted;

pub use cache_control::CacheControl;
pub use chunked::{ChunkError, ChunkedDecoder, Decoded};
pub use conditional::{evaluate_preconditions, if_range_allows, make_etag, Precondition};
pub use date::{fmt_http_date, parse_http_date, DateCache};
pub use host::{normalize_path, valid_authority};
pub use range::{evaluate_range, RangeOutcome};
pub use represent::{Answer, Conditions, Representation, Role};
pub use request::RequestHead;

/// The header in which a web booster (`weft front --mode booster`) passes
/// the request target it parsed to the origin (`weft serve --booster-from`).
pub const TARGET_HEADER: &str = "X-Weft-Target";
pub use response::ResponseHead;

/// Largest rest of a request body a server (or a proxy, towards its client)
/// reads and drops to keep the connection after answering without it; a
/// larger one is not worth reading, and the connection closes instead.
/// Shared by `weft serve` and the proxy so both roles keep the same
/// connections.
pub const MAX_BODY_DISCARD: u64 = 1 << 20;

use std::fmt;

/// Limits on what a peer may send before weft refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line (method, target, version) in bytes; longer → 414.
    pub max_request_line: usize,
    /// Largest head (request line and fields) in bytes; larger → 431.
    pub max_head: usize,
    /// Most header fields; more → 431.
    pub max_headers: usize,
}

/// The most header fields any head may carry, whatever the configuration: the
/// parser's field table lives on the stack.
pub const MAX_HEADERS_CAP: usize = 512;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_head: 64 * 1024,
            max_headers: 100,
        }
    }
}

/// Why a message was refused: the status to answer with and a short reason
/// (used in the error body and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 400, 414, 431, 501 (requests) or 502 (responses, in a proxy).
    pub status: u16,
    /// What was wrong, in a few words.
    pub reason: &'static str,
}

impl ParseError {
    pub(crate) const fn new(status: u16, reason: &'static str) -> ParseError {
        ParseError { status, reason }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, reason_phrase(self.status), self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Request methods weft knows. Anything else is answered 501, unless the
/// head was told to accept extension methods ([`RequestHead::set_extension_methods`],
/// a proxy forwarding them): then it is [`Method::Other`] and its token is
/// [`RequestHead::method_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
    /// OPTIONS
    Options,
    /// TRACE
    Trace,
    /// PATCH
    Patch,
    /// Any other method token (RFC 9110 §9.1: the method set is extensible),
    /// neither safe nor cacheable.
    Other,
}

impl Method {
    /// Recognise a method token (case-sensitive, as RFC 9110 §9.1 says).
    pub fn from_bytes(b: &[u8]) -> Option<Method> {
        Some(match b {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"CONNECT" => Method::Connect,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            _ => return None,
        })
    }

    /// The method token.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            // Written from the request's own bytes by whoever forwards it.
            Method::Other => "",
        }
    }

    /// Safe methods (RFC 9110 §9.2.1): a cache is not invalidated by them.
    pub fn is_safe(self) -> bool {
        matches!(self, Method::Get | Method::Head | Method::Options | Method::Trace)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// HTTP version of a message (only 1.0 and 1.1 are spoken).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// HTTP/1.0
    Http10,
    /// HTTP/1.1
    Http11,
}

impl Version {
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// How the body of a message is delimited (RFC 9112 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (responses only).
    UntilClose,
}

/// The reason phrase for a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        508 => "Loop Detected",
        _ => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

/// Iterate over the comma-separated elements of a list-valued field
/// (RFC 9110 §5.6.1), trimmed, skipping empty elements.
pub fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim).filter(|s| !s.is_empty())
}

/// Trim optional whitespace (SP and HTAB) from both ends.
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Parse a non-negative decimal (Content-Length, max-age): digits only, no
/// sign, no spaces; `None` on anything else or on overflow.
pub fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        // 19 digits always fit in u64; longer values are refused rather than
        // checked digit by digit (no real length needs them).
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as u64;
    }
    Some(n)
}

/// Append a decimal number to `out` without allocating (the one integer
/// formatter: [`encode::push_u64`]).
#[inline]
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    encode::push_u64(out, n);
}

/// Hop-by-hop fields (RFC 9110 §7.6.1): they describe one connection and are
/// never forwarded by a proxy nor stored by a cache. Besides the fields named
/// by Connection: Connection, Keep-Alive, Proxy-Connection, TE, Trailer,
/// Transfer-Encoding, Upgrade, and the proxy authentication fields that are
/// meant for the next hop only.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-authenticate",
    ];
    HOP.iter()
        .any(|h| h.len() == name.len() && h.eq_ignore_ascii_case(name))
}

/// Split an absolute-form target `scheme://authority/path?query` into
/// (scheme, authority, path-and-query); the path is `/` when absent.
pub fn split_absolute(target: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let sep = target.windows(3).position(|w| w == b"://")?;
    let scheme = &target[..sep];
    if scheme.is_empty() || !scheme[0].is_ascii_alphabetic() {
        return None;
    }
    if !scheme
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let rest = &target[sep + 3..];
    let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() {
        return None;
    }
    let path: &[u8] = if end == rest.len() { b"/" } else { &rest[end..] };
    Some((scheme, authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"1234"), Some(1234));
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"+1"), None);
        assert_eq!(parse_decimal(b"1 "), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
        let mut v = Vec::new();
        push_decimal(&mut v, 0);
        push_decimal(&mut v, u64::MAX);
        assert_eq!(v, format!("0{}", u64::MAX).as_bytes());
    }

    #[test]
    fn lists_and_trim() {
        let items: Vec<&[u8]> = list_items(b" close ,, keep-alive\t").collect();
        assert_eq!(items, vec![&b"close"[..], &b"keep-alive"[..]]);
        assert_eq!(trim(b"  \t"), b"");
    }

    #[test]
    fn absolute_targets() {
        assert_eq!(
            split_absolute(b"http://example.com:8080/a?b"),
            Some((&b"http"[..], &b"example.com:8080"[..], &b"/a?b"[..]))
        );
        assert_eq!(split_absolute(b"http://h"), Some((&b"http"[..], &b"h"[..], &b"/"[..])));
        assert_eq!(
            split_absolute(b"http://h?q"),
            Some((&b"http"[..], &b"h"[..], &b"?q"[..]))
        );
        assert_eq!(split_absolute(b"http:///x"), None);
        assert_eq!(split_absolute(b"/x"), None);
    }

    #[test]
    fn reasons() {
        assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
        assert_eq!(reason_phrase(599), "Server Error");
    }
}
