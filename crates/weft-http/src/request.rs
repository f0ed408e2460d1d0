//! Request heads: parsed with httparse into offsets, then checked the way a
//! server that sits in front of other servers must check them.
//!
//! Refused with 400 (and the connection closed by the caller): both
//! Content-Length and Transfer-Encoding, differing or malformed Content-Length,
//! Transfer-Encoding whose last coding is not chunked, obs-fold, bare CR, NUL or
//! other invalid bytes in the request line or field names, HTTP/0.9, a missing
//! or repeated Host in HTTP/1.1, and request targets that are neither
//! origin-form (`/...`), absolute-form (`http://...`), `*` for OPTIONS, nor
//! authority-form for CONNECT, a Host value (or an absolute-form target's
//! authority) that is not `uri-host [":" port]` (RFC 9112 §3.2: spaces,
//! userinfo). Limits: request line (414), head size and field count (431).
//! Unknown methods get 501 (unless the head accepts extension methods), as do
//! transfer codings other than chunked.

use crate::MAX_HEADERS_CAP;
use crate::{list_items, parse_decimal, split_absolute, trim, BodyFraming, Limits, Method, ParseError, Version};
use std::mem::MaybeUninit;

/// A byte range `[start, start + len)` of the buffer a head was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    pub(crate) fn of(buf: &[u8], part: &[u8]) -> Span {
        // `part` normally lies inside `buf` (the offset is a subtraction of
        // addresses, no unsafe needed), but httparse hands back a static ""
        // for a missing reason phrase: anything outside `buf` is an empty span.
        // An empty part inside `buf` (an empty field value) keeps its place, so
        // that [`Field::line`] still ends after the colon.
        let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        if start > buf.len() || buf.len() - start < part.len() {
            return Span::default();
        }
        Span {
            start: start as u32,
            len: part.len() as u32,
        }
    }
    #[inline]
    pub(crate) fn get(self, data: &[u8]) -> &[u8] {
        let s = self.start as usize;
        data.get(s..s + self.len as usize).unwrap_or(&[])
    }
}

/// One header field, as spans of the parsed buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    pub(crate) name: Span,
    pub(crate) value: Span,
}

impl Field {
    /// The field name as sent (compare case-insensitively).
    #[inline]
    pub fn name<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        self.name.get(data)
    }
    /// The field value, without surrounding whitespace.
    #[inline]
    pub fn value<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        trim(self.value.get(data))
    }
    /// The whole field line `name: value` (without CRLF), for copying a field
    /// verbatim into another head.
    pub fn line<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let s = self.name.start as usize;
        let e = (self.value.start + self.value.len) as usize;
        data.get(s..e.max(s + self.name.len as usize)).unwrap_or(&[])
    }
}

/// What request and response heads share: parsing a complete head, and the
/// field lookups (`$head` keeps its fields as `fields: Vec<Field>` over the
/// buffer it parsed).
macro_rules! head_common {
    ($head:ty) => {
        impl $head {
            /// A head parsed from `buf`, which holds a complete one, under
            /// default limits (for tests).
            ///
            /// # Panics
            /// When `buf` holds no complete head, or one that is refused.
            pub fn parsed(buf: &[u8]) -> $head {
                let mut h = <$head>::new();
                match h.parse(buf, &$crate::Limits::default()) {
                    Ok(Some(_)) => h,
                    other => panic!("not a complete head ({other:?})"),
                }
            }
            /// The first field named `name` (ASCII case-insensitive), trimmed.
            #[inline]
            pub fn header<'a>(&self, data: &'a [u8], name: &str) -> Option<&'a [u8]> {
                let name = name.as_bytes();
                self.fields
                    .iter()
                    .find(|f| f.name.len as usize == name.len() && f.name(data).eq_ignore_ascii_case(name))
                    .map(|f| f.value(data))
            }
            /// Every field named `name`, in order.
            pub fn header_all<'a, 'b>(&'b self, data: &'a [u8], name: &'b str) -> impl Iterator<Item = &'a [u8]> + 'b
            where
                'a: 'b,
            {
                self.fields
                    .iter()
                    .filter(move |f| f.name(data).eq_ignore_ascii_case(name.as_bytes()))
                    .map(move |f| f.value(data))
            }
            /// Every field, in order.
            pub fn fields(&self) -> &[$crate::request::Field] {
                &self.fields
            }
            /// Does a Connection field list `token`?
            pub fn connection_has(&self, data: &[u8], token: &str) -> bool {
                self.connection_has_bytes(data, token.as_bytes())
            }
            /// [`connection_has`](Self::connection_has) for a token given as
            /// bytes (a field name read from another message).
            pub fn connection_has_bytes(&self, data: &[u8], token: &[u8]) -> bool {
                self.header_all(data, "connection")
                    .any(|v| $crate::list_items(v).any(|t| t.eq_ignore_ascii_case(token)))
            }
        }
    };
}
pub(crate) use head_common;

head_common!(RequestHead);

/// Target forms (RFC 9112 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path`
    Absolute,
    /// `host:port` (CONNECT only)
    Authority,
    /// `*` (OPTIONS only)
    Asterisk,
}

/// A parsed request head, reused across requests (its field table keeps its
/// capacity). All accessors take the buffer the head was parsed from.
#[derive(Clone, Debug)]
pub struct RequestHead {
    method: Method,
    method_span: Span,
    extension_methods: bool,
    version: Version,
    target: Span,
    form: TargetForm,
    fields: Vec<Field>,
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
    host: Option<Span>,
    len: usize,
}

impl Default for RequestHead {
    fn default() -> Self {
        Self::new()
    }
}

const fn err(status: u16, reason: &'static str) -> ParseError {
    ParseError::new(status, reason)
}

/// Whether the request line at the start of `buf` is complete. Checked before
/// httparse so a client cannot make us buffer a huge line (and so it gets
/// 414, not 431).
#[inline]
fn request_line_complete(buf: &[u8], limits: &Limits) -> Result<bool, ParseError> {
    let line_max = limits.max_request_line;
    let skip = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(buf.len());
    let rest = &buf[skip..];
    match memchr::memchr(b'\n', &rest[..rest.len().min(line_max + 1)]) {
        Some(_) => Ok(true),
        None if rest.len() > line_max => Err(err(414, "request line too long")),
        None if buf.len() > limits.max_head => Err(err(431, "request head too large")),
        None => Ok(false),
    }
}

fn map_httparse(e: httparse::Error) -> ParseError {
    use httparse::Error as E;
    match e {
        E::HeaderName => err(400, "invalid header field name (or obs-fold)"),
        E::HeaderValue => err(400, "invalid byte in a header field value"),
        E::NewLine => err(400, "bare CR or malformed line ending"),
        E::Token => err(400, "malformed request line"),
        E::Version => err(400, "malformed or missing HTTP version"),
        E::TooManyHeaders => err(431, "too many header fields"),
        E::Status => err(400, "malformed request line"),
    }
}

impl RequestHead {
    /// An empty head.
    pub fn new() -> RequestHead {
        RequestHead {
            fields: Vec::with_capacity(32),
            ..RequestHead::empty()
        }
    }

    /// Back to an empty head, keeping the field table's capacity (a head
    /// reused by another connection shows nothing of the last one's).
    pub fn clear(&mut self) {
        let mut fields = std::mem::take(&mut self.fields);
        fields.clear();
        *self = RequestHead {
            fields,
            ..RequestHead::empty()
        };
    }

    /// An empty head without a field table (no allocation).
    pub const fn empty() -> RequestHead {
        RequestHead {
            method: Method::Get,
            method_span: Span { start: 0, len: 0 },
            extension_methods: false,
            version: Version::Http11,
            target: Span { start: 0, len: 0 },
            form: TargetForm::Origin,
            fields: Vec::new(),
            framing: BodyFraming::None,
            keep_alive: true,
            expect_continue: false,
            host: None,
            len: 0,
        }
    }

    /// Parse the head at the start of `buf`. `Ok(Some(n))`: a complete head of
    /// `n` bytes (the body, if any, follows); `Ok(None)`: incomplete, read more;
    /// `Err`: refuse with the given status and close the connection.
    pub fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, ParseError> {
        if !request_line_complete(buf, limits)? {
            return Ok(None);
        }
        let max_fields = limits.max_headers.min(MAX_HEADERS_CAP);
        let mut raw: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS_CAP] =
            [const { MaybeUninit::uninit() }; MAX_HEADERS_CAP];
        let mut req = httparse::Request::new(&mut []);
        let n = match req.parse_with_uninit_headers(buf, &mut raw[..max_fields]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if buf.len() > limits.max_head {
                    return Err(err(431, "request head too large"));
                }
                return Ok(None);
            }
            Err(e) => {
                // httparse reports an over-long head only once it sees its end;
                // a head that is too large is 431 whatever broke inside it.
                if buf.len() > limits.max_head && e != httparse::Error::TooManyHeaders {
                    return Err(err(431, "request head too large"));
                }
                return Err(map_httparse(e));
            }
        };
        if n > limits.max_head {
            return Err(err(431, "request head too large"));
        }
        let method_bytes = req.method.unwrap_or("").as_bytes();
        let method = match Method::from_bytes(method_bytes) {
            Some(m) => m,
            None if self.extension_methods => Method::Other,
            None => return Err(err(501, "method not implemented")),
        };
        self.method_span = Span::of(buf, method_bytes);
        let target = req.path.unwrap_or("").as_bytes();
        let version = match req.version {
            Some(0) => Version::Http10,
            Some(1) => Version::Http11,
            _ => return Err(err(400, "unsupported HTTP version")),
        };
        self.method = method;
        self.version = version;
        self.target = Span::of(buf, target);
        self.form = classify_target(method, target)?;
        self.len = n;
        self.fields.clear();
        self.host = None;
        self.expect_continue = false;

        let mut content_length: Option<u64> = None;
        let mut transfer_encoding = false;
        let mut te_chunked_last = false;
        let mut te_other = false;
        let mut conn_close = false;
        let mut conn_keep_alive = false;
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            let value = h.value;
            self.fields.push(Field {
                name: Span::of(buf, name),
                value: Span::of(buf, value),
            });
            let value = trim(value);
            match name.len() {
                4 if name.eq_ignore_ascii_case(b"host") => {
                    if self.host.is_some() {
                        return Err(err(400, "more than one Host field"));
                    }
                    if !crate::host::valid_authority(value) {
                        return Err(err(400, "invalid Host field (not host[:port])"));
                    }
                    self.host = Some(Span::of(buf, value));
                }
                6 if name.eq_ignore_ascii_case(b"expect") => {
                    self.expect_continue = value.eq_ignore_ascii_case(b"100-continue");
                }
                10 if name.eq_ignore_ascii_case(b"connection") => {
                    for t in list_items(value) {
                        if t.eq_ignore_ascii_case(b"close") {
                            conn_close = true;
                        } else if t.eq_ignore_ascii_case(b"keep-alive") {
                            conn_keep_alive = true;
                        }
                    }
                }
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    // `Content-Length: 5, 5` and repeated equal fields are one
                    // length (RFC 9110 §8.6); anything else is a smuggling risk.
                    for item in value.split(|&b| b == b',').map(trim) {
                        let Some(n) = parse_decimal(item) else {
                            return Err(err(400, "invalid Content-Length"));
                        };
                        match content_length {
                            Some(m) if m != n => return Err(err(400, "differing Content-Length values")),
                            _ => content_length = Some(n),
                        }
                    }
                }
                17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                    transfer_encoding = true;
                    for coding in list_items(value) {
                        if te_chunked_last {
                            // chunked must be applied exactly once, last.
                            return Err(err(400, "chunked is not the last transfer coding"));
                        }
                        if coding.eq_ignore_ascii_case(b"chunked") {
                            te_chunked_last = true;
                        } else {
                            te_other = true;
                        }
                    }
                }
                _ => {}
            }
        }
        self.framing = if transfer_encoding {
            if content_length.is_some() {
                return Err(err(400, "both Content-Length and Transfer-Encoding"));
            }
            if version == Version::Http10 {
                return Err(err(400, "Transfer-Encoding in an HTTP/1.0 request"));
            }
            if !te_chunked_last {
                return Err(err(400, "request body framing is not chunked"));
            }
            if te_other {
                return Err(err(501, "transfer coding not implemented"));
            }
            BodyFraming::Chunked
        } else {
            match content_length {
                Some(0) | None => BodyFraming::None,
                Some(n) => BodyFraming::Length(n),
            }
        };
        if version == Version::Http11 && self.host.is_none() {
            return Err(err(400, "missing Host field"));
        }
        if self.form == TargetForm::Absolute
            && !split_absolute(target).is_some_and(|(_, a, _)| crate::host::valid_authority(a))
        {
            return Err(err(400, "invalid authority in the request target"));
        }
        self.keep_alive = match version {
            Version::Http11 => !conn_close,
            Version::Http10 => conn_keep_alive && !conn_close,
        };
        Ok(Some(n))
    }

    /// The method.
    #[inline]
    pub fn method(&self) -> Method {
        self.method
    }
    /// The method token as sent (the only name of a [`Method::Other`]).
    #[inline]
    pub fn method_bytes<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        self.method_span.get(data)
    }
    /// Accept methods weft does not know as [`Method::Other`] instead of
    /// refusing them with 501 (a proxy forwards them).
    #[inline]
    pub fn set_extension_methods(&mut self, on: bool) {
        self.extension_methods = on;
    }
    /// The version.
    #[inline]
    pub fn version(&self) -> Version {
        self.version
    }
    /// The request target as sent.
    #[inline]
    pub fn target<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        self.target.get(data)
    }
    /// Which form the target has.
    #[inline]
    pub fn target_form(&self) -> TargetForm {
        self.form
    }
    /// Is the target in absolute form (`http://host/path`, sent to proxies)?
    #[inline]
    pub fn is_absolute_form(&self) -> bool {
        self.form == TargetForm::Absolute
    }
    /// Body framing.
    #[inline]
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }
    /// May the connection carry another request after this one (RFC 9112 §9.3)?
    #[inline]
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }
    /// Did the client send `Expect: 100-continue`?
    #[inline]
    pub fn expect_continue(&self) -> bool {
        self.expect_continue
    }
    /// Length of the head in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// True before the first successful parse.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The Host field's value, if present.
    pub fn host<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        self.host.map(|s| s.get(data))
    }
}

fn classify_target(method: Method, target: &[u8]) -> Result<TargetForm, ParseError> {
    match target.first() {
        Some(b'/') if method != Method::Connect => Ok(TargetForm::Origin),
        Some(b'*') if target.len() == 1 && method == Method::Options => Ok(TargetForm::Asterisk),
        _ if method == Method::Connect => {
            if is_authority_with_port(target) {
                Ok(TargetForm::Authority)
            } else {
                Err(err(400, "CONNECT needs host:port"))
            }
        }
        _ if split_absolute(target).is_some() => Ok(TargetForm::Absolute),
        _ => Err(err(400, "request target is not a path")),
    }
}

fn is_authority_with_port(t: &[u8]) -> bool {
    let Some(colon) = t.iter().rposition(|&b| b == b':') else {
        return false;
    };
    let (host, port) = (&t[..colon], &t[colon + 1..]);
    !host.is_empty()
        && !port.is_empty()
        && port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && !host.iter().any(|&b| b == b'/' || b == b'@')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &[u8]) -> Result<Option<usize>, ParseError> {
        RequestHead::new().parse(s, &Limits::default())
    }

    fn status(s: &[u8]) -> u16 {
        parse(s).unwrap_err().status
    }

    #[test]
    fn simple_get() {
        let req = b"GET /a?b HTTP/1.1\r\nHost: x\r\nUser-Agent:  t \r\n\r\nrest";
        let mut h = RequestHead::new();
        let n = h.parse(req, &Limits::default()).unwrap().unwrap();
        assert_eq!(&req[n..], b"rest");
        assert_eq!(h.method(), Method::Get);
        assert_eq!(h.target(req), b"/a?b");
        assert_eq!(h.header(req, "user-agent"), Some(&b"t"[..]));
        assert_eq!(h.header(req, "HOST"), Some(&b"x"[..]));
        assert_eq!(h.framing(), BodyFraming::None);
        assert!(h.keep_alive());
        assert_eq!(h.fields()[1].line(req), b"User-Agent:  t");
    }

    #[test]
    fn a_cleared_head_shows_nothing_of_the_last_and_keeps_its_table() {
        // A proxy client record reused by another connection clears its head.
        let req = b"POST /upload HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
        let mut h = RequestHead::new();
        h.parse(req, &Limits::default()).unwrap().unwrap();
        let table = h.fields.capacity();
        h.clear();
        assert!(h.fields().is_empty() && h.fields.capacity() == table);
        assert_eq!((h.method(), h.len(), h.host(b"")), (Method::Get, 0, None));
        assert_eq!(h.framing(), BodyFraming::None);
        assert!(h.keep_alive() && h.target(b"").is_empty());
        // An empty head allocates no table at all.
        assert_eq!(RequestHead::empty().fields.capacity(), 0);
    }

    #[test]
    fn empty_values_keep_their_colon() {
        let d = b"GET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-B:   \r\nVary:\r\nVary: *\r\n\r\n";
        let h = RequestHead::parsed(d);
        let lines: Vec<&[u8]> = h.fields().iter().map(|f| f.line(d)).collect();
        assert_eq!(lines, [&b"Host: x"[..], b"X-Empty:", b"X-B:   ", b"Vary:", b"Vary: *"]);
        assert_eq!(h.header(d, "x-empty"), Some(&b""[..]));
    }

    #[test]
    fn incomplete_heads_ask_for_more() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(parse(b"GE"), Ok(None));
        assert_eq!(parse(b""), Ok(None));
    }

    #[test]
    fn keep_alive_rules() {
        let mut h = RequestHead::new();
        let l = Limits::default();
        h.parse(b"GET / HTTP/1.0\r\n\r\n", &l).unwrap();
        assert!(!h.keep_alive());
        h.parse(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &l)
            .unwrap();
        assert!(h.keep_alive());
        h.parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n", &l)
            .unwrap();
        assert!(!h.keep_alive());
    }

    #[test]
    fn framing() {
        let mut h = RequestHead::new();
        let l = Limits::default();
        h.parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", &l)
            .unwrap();
        assert_eq!(h.framing(), BodyFraming::Length(5));
        h.parse(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n",
            &l,
        )
        .unwrap();
        assert_eq!(h.framing(), BodyFraming::Length(5));
        h.parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", &l)
            .unwrap();
        assert_eq!(h.framing(), BodyFraming::Chunked);
    }

    #[test]
    fn smuggling_and_malformed_requests_are_refused() {
        let cases: &[(&[u8], u16)] = &[
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                400,
            ),
            (b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 4\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 0x10\r\n\r\n", 400),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                400,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                501,
            ),
            (b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\r\nX-A: b\r\n  folded\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n", 400),
            (b"GET /a\0b HTTP/1.1\r\nHost: t\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: t\r\nX: a\0b\r\n\r\n", 400),
            (b"GET /\r\n\r\n", 400),
            (b"GET hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", 400),
            (b"GET * HTTP/1.1\r\nHost: t\r\n\r\n", 400),
            (b"CONNECT /x HTTP/1.1\r\nHost: t\r\n\r\n", 400),
            (b"CONNECT host HTTP/1.1\r\nHost: t\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 400),
            (b"FROB / HTTP/1.1\r\nHost: t\r\n\r\n", 501),
            (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: user@h\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: h:x\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: h/x\r\n\r\n", 400),
            (b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            (b"GET http://h:1:2/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ];
        for (req, want) in cases {
            assert_eq!(status(req), *want, "{:?}", String::from_utf8_lossy(req));
        }
    }

    #[test]
    fn extension_methods_when_asked() {
        let d = b"PURGE /x HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut h = RequestHead::new();
        assert_eq!(h.parse(d, &Limits::default()).unwrap_err().status, 501);
        h.set_extension_methods(true);
        assert!(h.parse(d, &Limits::default()).unwrap().is_some());
        assert_eq!(h.method(), Method::Other);
        assert!(!h.method().is_safe());
        assert_eq!(h.method_bytes(d), b"PURGE");
        h.parse(b"GET / HTTP/1.1\r\nHost: \r\n\r\n", &Limits::default())
            .unwrap();
        assert_eq!(h.method(), Method::Get);
        assert_eq!(
            h.host(b"GET / HTTP/1.1\r\nHost: \r\n\r\n"),
            Some(&b""[..]),
            "an empty Host is valid"
        );
    }

    #[test]
    fn accepted_target_forms() {
        let mut h = RequestHead::new();
        let l = Limits::default();
        h.parse(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n", &l).unwrap();
        assert_eq!(h.target_form(), TargetForm::Asterisk);
        h.parse(b"GET http://e.com/x HTTP/1.1\r\nHost: e.com\r\n\r\n", &l)
            .unwrap();
        assert!(h.is_absolute_form());
        h.parse(b"CONNECT e.com:443 HTTP/1.1\r\nHost: e.com:443\r\n\r\n", &l)
            .unwrap();
        assert_eq!(h.target_form(), TargetForm::Authority);
    }

    #[test]
    fn limits() {
        let l = Limits::default();
        let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
        assert_eq!(status(long.as_bytes()), 414);
        // Also while still incomplete: no need to wait for the end of the line.
        assert_eq!(status(&long.as_bytes()[..8500]), 414);
        let many = format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", "X-A: b\r\n".repeat(100));
        assert_eq!(status(many.as_bytes()), 431);
        let ok = format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", "X-A: b\r\n".repeat(99));
        assert!(RequestHead::new().parse(ok.as_bytes(), &l).unwrap().is_some());
        let huge = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(70_000));
        assert_eq!(status(huge.as_bytes()), 431);
        assert_eq!(status(&huge.as_bytes()[..66_000]), 431);
    }

    #[test]
    fn leading_empty_lines_are_skipped() {
        assert!(parse(b"\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap().is_some());
    }

    fn request_strategy() -> impl Strategy<Value = Vec<u8>> {
        let path = "/[a-z0-9/._-]{0,40}";
        let field = ("[A-Za-z][A-Za-z0-9-]{0,15}", "[ -~]{0,30}");
        (
            prop_oneof![Just("GET"), Just("HEAD"), Just("OPTIONS"), Just("POST")],
            path,
            proptest::collection::vec(field, 0..8),
            0u8..2,
        )
            .prop_map(|(m, p, fields, minor)| {
                let mut s = format!("{m} {p} HTTP/1.{minor}\r\nHost: h\r\n");
                for (n, v) in fields {
                    let n =
                        if ["host", "content-length", "transfer-encoding"].contains(&n.to_ascii_lowercase().as_str()) {
                            format!("X-{n}")
                        } else {
                            n
                        };
                    s.push_str(&format!("{n}: {}\r\n", v.trim()));
                }
                s.push_str("\r\n");
                s.into_bytes()
            })
    }

    proptest! {
        /// Any valid request stream, split at any byte boundary, parses the same
        /// as when it arrives whole: incomplete prefixes ask for more, never err.
        #[test]
        fn split_anywhere_parses_the_same(reqs in proptest::collection::vec(request_strategy(), 1..4)) {
            let stream: Vec<u8> = reqs.concat();
            let l = Limits::default();
            let mut whole = Vec::new();
            let mut off = 0;
            let mut h = RequestHead::new();
            while off < stream.len() {
                let n = h.parse(&stream[off..], &l).unwrap().unwrap();
                whole.push((h.method(), h.target(&stream[off..]).to_vec(), n));
                off += n;
            }
            for split in 0..stream.len() {
                // Deliver `split` bytes first, then the rest.
                let mut buf: Vec<u8> = stream[..split].to_vec();
                let mut got = Vec::new();
                let mut fed = split;
                let mut h = RequestHead::new();
                loop {
                    match h.parse(&buf, &l).unwrap() {
                        Some(n) => {
                            got.push((h.method(), h.target(&buf).to_vec(), n));
                            buf.drain(..n);
                        }
                        None if fed < stream.len() => {
                            buf.extend_from_slice(&stream[fed..]);
                            fed = stream.len();
                        }
                        None => break,
                    }
                }
                prop_assert_eq!(&got, &whole);
            }
        }
    }
}
