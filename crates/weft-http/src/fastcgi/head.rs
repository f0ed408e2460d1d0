//! The CGI response head (RFC 3875 §6) at the start of a program's output:
//! header fields, each on a line (LF or CRLF), then an empty line. Three
//! fields are the server's: `Status` (code and reason; default 200, or 302
//! for a client redirect), `Content-Type`, and `Location` (a path starting
//! with `/` is a local redirect the server resolves itself; an absolute URI
//! is a client redirect). Every other field passes through to the HTTP
//! response, except the framing and hop-by-hop ones the server owns
//! ([`CgiHead::fields`] leaves them out).
//!
//! Parsing writes into the caller's `httparse::Header` array (its length is
//! the field limit) and allocates nothing; a head longer than `max_len`
//! without its empty line, a bad line, a bad Status or a head with none of
//! the three fields is an error (the caller answers 502).

use super::FcgiError;

/// What the program asked for (RFC 3875 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgiKind {
    /// A document: the body follows.
    Document,
    /// `Location: /path` with no body: the server serves that path instead.
    LocalRedirect,
    /// `Location: scheme://...`: a redirect sent to the client.
    ClientRedirect,
}

/// A parsed CGI response head, borrowing the output bytes and the field array.
#[derive(Debug)]
pub struct CgiHead<'h, 'b> {
    /// The status code to send.
    pub status: u16,
    /// The reason phrase from `Status` (empty when absent).
    pub reason: &'b [u8],
    /// The `Content-Type` value.
    pub content_type: Option<&'b [u8]>,
    /// The `Location` value.
    pub location: Option<&'b [u8]>,
    /// What kind of response this is.
    pub kind: CgiKind,
    /// Length of the head including its empty line: the body starts here.
    pub len: usize,
    all: &'h [httparse::Header<'b>],
}

/// Fields the server sets itself (framing, connection management) or takes
/// from the head (`Status`, `Content-Type`, `Location`).
const OWNED: &[&str] = &[
    "status",
    "content-type",
    "location",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

impl<'b> CgiHead<'_, 'b> {
    /// The other fields to copy into the HTTP response, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&'b str, &'b [u8])> + '_ {
        self.all
            .iter()
            .filter(|h| !OWNED.iter().any(|o| h.name.eq_ignore_ascii_case(o)))
            .map(|h| (h.name, h.value))
    }

    /// The program's `Content-Length`, when it sent a valid one (the server
    /// cuts the body there and replaces a worker that writes more).
    pub fn content_length(&self) -> Option<u64> {
        let h = self
            .all
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))?;
        let v = trim(h.value);
        if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(v).ok()?.parse().ok()
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let s = v.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(v.len());
    let e = v.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(s, |e| e + 1);
    &v[s..e]
}

fn parse_status(v: &[u8]) -> Result<(u16, &[u8]), FcgiError> {
    let v = trim(v);
    let bad = FcgiError::BadHead("Status is not a 3-digit code from 200 to 599");
    if v.len() < 3 || !v[..3].iter().all(u8::is_ascii_digit) || v.get(3).is_some_and(|&b| b != b' ') {
        return Err(bad);
    }
    let code = (v[0] - b'0') as u16 * 100 + (v[1] - b'0') as u16 * 10 + (v[2] - b'0') as u16;
    if !(200..=599).contains(&code) {
        return Err(bad);
    }
    Ok((code, trim(v.get(4..).unwrap_or(&[]))))
}

/// Parse the head at the start of `out` (the program's STDOUT so far).
/// `Ok(None)`: incomplete, and still within `max_len`: wait for more output.
pub fn parse_head<'h, 'b>(
    out: &'b [u8],
    fields: &'h mut [httparse::Header<'b>],
    max_len: usize,
) -> Result<Option<CgiHead<'h, 'b>>, FcgiError> {
    let (len, all) = match httparse::parse_headers(out, fields) {
        Ok(httparse::Status::Complete((len, all))) => (len, all),
        Ok(httparse::Status::Partial) if out.len() <= max_len => return Ok(None),
        Ok(httparse::Status::Partial) => return Err(FcgiError::HeadTooLarge),
        Err(httparse::Error::TooManyHeaders) => return Err(FcgiError::BadHead("too many fields")),
        Err(_) => return Err(FcgiError::BadHead("malformed field line")),
    };
    if len > max_len {
        return Err(FcgiError::HeadTooLarge);
    }
    let one = |name: &str| -> Result<Option<&'b [u8]>, FcgiError> {
        let mut it = all.iter().filter(|h| h.name.eq_ignore_ascii_case(name));
        let first = it.next().map(|h| trim(h.value));
        if it.next().is_some() {
            return Err(FcgiError::BadHead("a Status, Content-Type or Location field repeated"));
        }
        Ok(first)
    };
    let status = one("status")?.map(parse_status).transpose()?;
    let content_type = one("content-type")?;
    let location = one("location")?.filter(|l| !l.is_empty());
    let kind = match location {
        Some(l) if l.starts_with(b"/") && !l.starts_with(b"//") => CgiKind::LocalRedirect,
        Some(_) => CgiKind::ClientRedirect,
        None => CgiKind::Document,
    };
    if status.is_none() && content_type.is_none() && location.is_none() {
        return Err(FcgiError::BadHead("no Status, Content-Type or Location"));
    }
    let (status, reason) = match (status, kind) {
        (Some(s), _) => s,
        (None, CgiKind::ClientRedirect) => (302, &b""[..]),
        (None, _) => (200, &b""[..]),
    };
    Ok(Some(CgiHead {
        status,
        reason,
        content_type,
        location,
        kind,
        len,
        all,
    }))
}
