//! Response heads, for the client role (the proxy's upstream side and the load
//! generator). Same approach as [`crate::request`]: httparse into offsets, then
//! the framing rules of RFC 9112 §6.3 and the smuggling checks a proxy needs —
//! a response with both Content-Length and Transfer-Encoding, or with differing
//! lengths, is refused (a proxy answers its client 502).

use crate::request::{Field, Span};
use crate::{list_items, parse_decimal, trim, BodyFraming, Limits, Method, ParseError, Version, MAX_HEADERS_CAP};
use std::mem::MaybeUninit;

/// A parsed response head, reused across responses.
#[derive(Clone, Debug)]
pub struct ResponseHead {
    version: Version,
    status: u16,
    reason: Span,
    fields: Vec<Field>,
    content_length: Option<u64>,
    chunked: bool,
    transfer_encoding: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    len: usize,
}

impl Default for ResponseHead {
    fn default() -> Self {
        Self::new()
    }
}

const fn bad(reason: &'static str) -> ParseError {
    ParseError::new(502, reason)
}

impl ResponseHead {
    /// An empty head.
    pub fn new() -> ResponseHead {
        ResponseHead {
            version: Version::Http11,
            status: 0,
            reason: Span::default(),
            fields: Vec::with_capacity(32),
            content_length: None,
            chunked: false,
            transfer_encoding: false,
            conn_close: false,
            conn_keep_alive: false,
            len: 0,
        }
    }

    /// Parse the head at the start of `buf`: `Ok(Some(n))` complete head of `n`
    /// bytes, `Ok(None)` incomplete, `Err` malformed (status 502).
    pub fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, ParseError> {
        let max_fields = limits.max_headers.min(MAX_HEADERS_CAP);
        let mut raw: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS_CAP] =
            [const { MaybeUninit::uninit() }; MAX_HEADERS_CAP];
        let mut resp = httparse::Response::new(&mut []);
        let n = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            buf,
            &mut raw[..max_fields],
        ) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if buf.len() > limits.max_head {
                    return Err(bad("response head too large"));
                }
                return Ok(None);
            }
            Err(httparse::Error::TooManyHeaders) => return Err(bad("too many header fields in the response")),
            Err(_) => return Err(bad("malformed response head")),
        };
        if n > limits.max_head {
            return Err(bad("response head too large"));
        }
        self.version = if resp.version == Some(0) {
            Version::Http10
        } else {
            Version::Http11
        };
        self.status = resp.code.unwrap_or(0);
        if !(100..=999).contains(&self.status) {
            return Err(bad("invalid status code"));
        }
        self.reason = Span::of(buf, resp.reason.unwrap_or("").as_bytes());
        self.fields.clear();
        self.content_length = None;
        self.chunked = false;
        self.transfer_encoding = false;
        self.conn_close = false;
        self.conn_keep_alive = false;
        self.len = n;
        let mut te_last_chunked = false;
        for h in resp.headers.iter() {
            let name = h.name.as_bytes();
            self.fields.push(Field {
                name: Span::of(buf, name),
                value: Span::of(buf, h.value),
            });
            let value = trim(h.value);
            if name.eq_ignore_ascii_case(b"content-length") {
                for item in value.split(|&b| b == b',').map(trim) {
                    let Some(v) = parse_decimal(item) else {
                        return Err(bad("invalid Content-Length in the response"));
                    };
                    match self.content_length {
                        Some(m) if m != v => return Err(bad("differing Content-Length values in the response")),
                        _ => self.content_length = Some(v),
                    }
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                self.transfer_encoding = true;
                for c in list_items(value) {
                    te_last_chunked = c.eq_ignore_ascii_case(b"chunked");
                }
            } else if name.eq_ignore_ascii_case(b"connection") {
                for t in list_items(value) {
                    if t.eq_ignore_ascii_case(b"close") {
                        self.conn_close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        self.conn_keep_alive = true;
                    }
                }
            }
        }
        if self.transfer_encoding && self.content_length.is_some() {
            return Err(bad("response has both Content-Length and Transfer-Encoding"));
        }
        self.chunked = self.transfer_encoding && te_last_chunked && self.version == Version::Http11;
        Ok(Some(n))
    }

    /// Status code.
    #[inline]
    pub fn status(&self) -> u16 {
        self.status
    }
    /// Version.
    #[inline]
    pub fn version(&self) -> Version {
        self.version
    }
    /// Reason phrase as sent.
    pub fn reason<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        self.reason.get(data)
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
    /// Content-Length, when given.
    #[inline]
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }
    /// Is the body chunked?
    #[inline]
    pub fn is_chunked(&self) -> bool {
        self.chunked
    }

    /// How the body is delimited, given the request's method (RFC 9112 §6.3).
    /// A 2xx answer to CONNECT has no body: the connection becomes a tunnel.
    pub fn framing(&self, request_method: Method) -> BodyFraming {
        let s = self.status;
        if request_method == Method::Head || (100..200).contains(&s) || s == 204 || s == 304 {
            return BodyFraming::None;
        }
        if request_method == Method::Connect && (200..300).contains(&s) {
            return BodyFraming::None;
        }
        if self.transfer_encoding {
            // A coding other than chunked last: only the close delimits it.
            return if self.chunked {
                BodyFraming::Chunked
            } else {
                BodyFraming::UntilClose
            };
        }
        match self.content_length {
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::UntilClose,
        }
    }

    /// May the connection be reused after this response's body? (HTTP/1.1
    /// unless `close`; HTTP/1.0 only with `keep-alive`.) Close-delimited bodies
    /// end the connection whatever the header says.
    pub fn keep_alive(&self, request_method: Method) -> bool {
        if self.framing(request_method) == BodyFraming::UntilClose {
            return false;
        }
        match self.version {
            Version::Http11 => !self.conn_close,
            Version::Http10 => self.conn_keep_alive && !self.conn_close,
        }
    }
}

crate::request::head_common!(ResponseHead);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_rules() {
        let h = ResponseHead::parsed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(h.framing(Method::Get), BodyFraming::Length(10));
        assert_eq!(h.framing(Method::Head), BodyFraming::None);
        assert!(h.keep_alive(Method::Get));
        let h = ResponseHead::parsed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing(Method::Get), BodyFraming::Chunked);
        let h = ResponseHead::parsed(b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(h.framing(Method::Get), BodyFraming::UntilClose);
        assert!(!h.keep_alive(Method::Get));
        let h = ResponseHead::parsed(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(h.framing(Method::Get), BodyFraming::None);
        let h = ResponseHead::parsed(b"HTTP/1.1 200 Connection established\r\n\r\n");
        assert_eq!(h.framing(Method::Connect), BodyFraming::None);
        let h = ResponseHead::parsed(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
        assert!(!h.keep_alive(Method::Get));
        let h = ResponseHead::parsed(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n");
        assert!(h.keep_alive(Method::Get));
        let h = ResponseHead::parsed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
        assert_eq!(h.framing(Method::Get), BodyFraming::UntilClose);
    }

    #[test]
    fn smuggling_responses_are_refused() {
        let mut h = ResponseHead::new();
        let l = Limits::default();
        for r in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTX/1.1 200 OK\r\n\r\n",
        ] {
            assert_eq!(
                h.parse(r, &l).unwrap_err().status,
                502,
                "{:?}",
                String::from_utf8_lossy(r)
            );
        }
        assert_eq!(h.parse(b"HTTP/1.1 200 OK\r\nX: y\r\n", &l), Ok(None));
        // No reason phrase at all (found by the response_head fuzz target).
        let data = b"HTTP/1.1 200\r\n\r\n";
        assert_eq!(h.parse(data, &l), Ok(Some(data.len())));
        assert_eq!(h.reason(data), b"");
    }

    #[test]
    fn header_access() {
        let data = b"HTTP/1.1 404 Not Found\r\nX-A: 1\r\nx-a: 2\r\nConnection: close\r\n\r\n";
        let h = ResponseHead::parsed(data);
        assert_eq!(h.status(), 404);
        assert_eq!(h.reason(data), b"Not Found");
        assert_eq!(h.header(data, "X-A"), Some(&b"1"[..]));
        assert_eq!(h.header_all(data, "x-a").count(), 2);
        assert!(h.connection_has(data, "close"));
    }
}
