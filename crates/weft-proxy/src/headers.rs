//! Heads the proxy writes: the request it forwards upstream, the response head
//! it relays to the client, the head it stores, and the cache key.
//!
//! Forwarding follows RFC 9110 §7.6: hop-by-hop fields (Connection and every
//! field it names, Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, the
//! proxy authentication fields) are removed; `Via` gets this proxy's entry;
//! `X-Forwarded-For` gets the client's address. The request goes upstream as
//! HTTP/1.1 in origin-form whatever the client spoke, with one Content-Length
//! (repeated equal ones collapsed). Field lines are copied byte for byte, an
//! empty value with its colon.

use std::net::IpAddr;
use weft_http::{is_hop_by_hop, list_items, Method, RequestHead, ResponseHead};

/// `host[:port]` → (host, port); IPv6 literals keep their brackets off.
/// None for an empty host or a bad port.
pub fn split_authority(a: &[u8], default_port: u16) -> Option<(&[u8], u16)> {
    let (host, port) = if a.first() == Some(&b'[') {
        let close = a.iter().position(|&b| b == b']')?;
        let host = &a[1..close];
        match &a[close + 1..] {
            [] => (host, None),
            [b':', p @ ..] => (host, Some(p)),
            _ => return None,
        }
    } else {
        match a.iter().rposition(|&b| b == b':') {
            Some(i) => (&a[..i], Some(&a[i + 1..])),
            None => (a, None),
        }
    };
    if host.is_empty() || host.iter().any(|&b| b <= b' ' || b == b'/' || b == b'@' || b >= 0x7f) {
        return None;
    }
    let port = match port {
        None | Some([]) => default_port,
        Some(p) => match weft_http::parse_decimal(p) {
            Some(n @ 1..=65535) => n as u16,
            _ => return None,
        },
    };
    Some((host, port))
}

/// The primary cache key: `http://host[:port]path`, host lowercased and the
/// default port left out, so equivalent URIs share an entry.
pub fn cache_key(out: &mut Vec<u8>, host: &[u8], port: u16, path: &[u8]) {
    out.clear();
    out.extend_from_slice(b"http://");
    let v6 = host.contains(&b':');
    if v6 {
        out.push(b'[');
    }
    out.extend(host.iter().map(|b| b.to_ascii_lowercase()));
    if v6 {
        out.push(b']');
    }
    if port != 80 {
        out.push(b':');
        weft_http::push_decimal(out, port as u64);
    }
    out.extend_from_slice(path);
}

/// The primary cache key of an absolute `http://` URL (a Location field, a
/// URL to purge) into `out`; None for another scheme or a bad authority.
pub fn url_key(url: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let (scheme, authority, path) = weft_http::split_absolute(url)?;
    if !scheme.eq_ignore_ascii_case(b"http") {
        return None;
    }
    let (h, p) = split_authority(authority, 80)?;
    cache_key(out, h, p, if path.is_empty() { b"/" } else { path });
    Some(())
}

/// Does a Via field of the request already list `name` as a recipient (the
/// request went round in a loop)?
pub fn via_lists(req: &RequestHead, data: &[u8], name: &[u8]) -> bool {
    req.header_all(data, "via").any(|v| {
        list_items(v).any(|item| {
            let mut parts = item.split(|&b| b == b' ' || b == b'\t').filter(|p| !p.is_empty());
            parts.next();
            parts.next().is_some_and(|by| by.eq_ignore_ascii_case(name))
        })
    })
}

/// A stored response's validators: (ETag, Last-Modified).
pub type Validators<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// What [`write_request`] adds or changes.
pub struct Forward<'a> {
    /// The method to send.
    pub method: Method,
    /// origin-form target (`/path?query`).
    pub path: &'a [u8],
    /// The Host value to send.
    pub host: &'a [u8],
    /// This proxy's Via entry value (`1.1 name`).
    pub via: &'a [u8],
    /// The client's address, for X-Forwarded-For.
    pub client: Option<IpAddr>,
    /// Keep `Transfer-Encoding: chunked` (the body is forwarded as it came).
    pub chunked_body: bool,
    /// Forward the client's `Upgrade` with `Connection: upgrade` (a
    /// protocol switch the proxy will tunnel).
    pub upgrade: bool,
    /// Revalidating a stored response: drop the client's conditionals and
    /// Range (the full response refreshes the store) and send these validators.
    pub validators: Option<Validators<'a>>,
}

fn skip_request_field(name: &[u8], req: &RequestHead, data: &[u8], f: &Forward<'_>) -> bool {
    if name.eq_ignore_ascii_case(b"host")
        || name.eq_ignore_ascii_case(b"expect")
        // The booster's header to the origin: never a client's own copy.
        || name.eq_ignore_ascii_case(crate::booster::TARGET_HEADER.as_bytes())
        || name.eq_ignore_ascii_case(b"content-length")
    {
        return true;
    }
    if name.eq_ignore_ascii_case(b"transfer-encoding") {
        return !f.chunked_body;
    }
    if name.eq_ignore_ascii_case(b"upgrade") {
        return !f.upgrade;
    }
    if is_hop_by_hop(name) || req.connection_has_bytes(data, name) {
        return true;
    }
    if f.validators.is_some() {
        return is_conditional(name);
    }
    false
}

/// A client's conditional or range field: the answer to a request with one
/// may be a 304, 412 or 206, which does not refresh a stored response.
fn is_conditional(name: &[u8]) -> bool {
    const CONDITIONAL: [&[u8]; 6] = [
        b"if-none-match",
        b"if-modified-since",
        b"if-match",
        b"if-unmodified-since",
        b"if-range",
        b"range",
    ];
    CONDITIONAL.iter().any(|c| c.eq_ignore_ascii_case(name))
}

/// The head of a background revalidation (`background.rs`) made from the
/// client request that found its stored response stale: the same request
/// line and fields (so routing, the cache key and Vary select the same
/// response) without the client's conditionals and Range, whose answers
/// would not refresh the store.
pub(crate) fn background_head(req: &RequestHead, data: &[u8], out: &mut Vec<u8>) {
    let line_end = memchr::memmem::find(data, b"\r\n").map_or(data.len(), |i| i + 2);
    out.extend_from_slice(&data[..line_end]);
    for f in req.fields() {
        if !is_conditional(f.name(data)) {
            out.extend_from_slice(f.line(data));
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Write the request to send upstream into `out`.
pub fn write_request(out: &mut Vec<u8>, req: &RequestHead, data: &[u8], f: &Forward<'_>) {
    match f.method {
        Method::Other => out.extend_from_slice(req.method_bytes(data)),
        m => out.extend_from_slice(m.as_str().as_bytes()),
    }
    out.push(b' ');
    out.extend_from_slice(f.path);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(f.host);
    out.extend_from_slice(b"\r\n");
    for field in req.fields() {
        let name = field.name(data);
        if skip_request_field(name, req, data, f) {
            continue;
        }
        out.extend_from_slice(field.line(data));
        out.extend_from_slice(b"\r\n");
    }
    // One Content-Length of the length the parser settled on.
    if req.header(data, "content-length").is_some() {
        let n = match req.framing() {
            weft_http::BodyFraming::Length(n) => n,
            _ => 0,
        };
        weft_http::encode::content_length(out, n);
    }
    if let Some((etag, lm)) = f.validators {
        if let Some(e) = etag {
            out.extend_from_slice(b"If-None-Match: ");
            out.extend_from_slice(e);
            out.extend_from_slice(b"\r\n");
        }
        if let Some(l) = lm {
            out.extend_from_slice(b"If-Modified-Since: ");
            out.extend_from_slice(l);
            out.extend_from_slice(b"\r\n");
        }
    }
    if f.upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    }
    out.extend_from_slice(b"Via: ");
    out.extend_from_slice(f.via);
    out.extend_from_slice(b"\r\n");
    if let Some(ip) = f.client {
        use std::io::Write;
        let _ = write!(out, "X-Forwarded-For: {ip}\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Which response fields a relayed or stored head keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum HeadFor {
    /// Relayed to the client now (Age passes through).
    Client,
    /// Stored (Date added if missing; the first Age kept, as part of the
    /// object's age, fields a `no-cache="..."` names left out).
    Store,
    /// Stored as the complete 200 that a 206 carried all of
    /// (`bytes 0-(n-1)/n`, RFC 9111 §3.4): as `Store`, with status 200 and
    /// no Content-Range.
    StoreWhole,
}

/// Status line and end-to-end fields of `resp`, plus this proxy's Via entry;
/// no Content-Length / Transfer-Encoding (the caller frames the body), no
/// blank line. A response without Date gets `date` (RFC 9110 §6.6.1).
pub fn write_response_fields(
    out: &mut Vec<u8>,
    resp: &ResponseHead,
    data: &[u8],
    via: &[u8],
    date: &[u8],
    for_: HeadFor,
) {
    let whole = for_ == HeadFor::StoreWhole;
    let status = if whole { 200 } else { resp.status() };
    out.extend_from_slice(b"HTTP/1.1 ");
    weft_http::push_decimal(out, status as u64);
    out.push(b' ');
    let reason = resp.reason(data);
    if whole || reason.is_empty() || reason.iter().any(|&b| b < b' ' && b != b'\t') {
        out.extend_from_slice(weft_http::reason_phrase(status).as_bytes());
    } else {
        out.extend_from_slice(reason);
    }
    out.extend_from_slice(b"\r\n");
    let (mut has_date, mut has_age) = (false, false);
    for field in resp.fields() {
        let name = field.name(data);
        if is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"content-length") || resp.connection_has_bytes(data, name)
        {
            continue;
        }
        if whole && name.eq_ignore_ascii_case(b"content-range") {
            continue;
        }
        if for_ != HeadFor::Client {
            if name.eq_ignore_ascii_case(b"age") {
                if has_age {
                    continue;
                }
                has_age = true;
            } else if weft_http::caching::withheld(resp, data, name) {
                continue;
            }
        }
        if name.eq_ignore_ascii_case(b"date") {
            has_date = true;
        }
        out.extend_from_slice(field.line(data));
        out.extend_from_slice(b"\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Via: ");
    out.extend_from_slice(via);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_head_has_no_conditionals() {
        let data = b"GET /a HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"1\"\r\nRange: bytes=0-1\r\nAccept: */*\r\n\r\n";
        let req = RequestHead::parsed(data);
        let mut out = Vec::new();
        background_head(&req, data, &mut out);
        assert_eq!(out, b"GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
    }

    #[test]
    fn authorities() {
        assert_eq!(split_authority(b"example.com", 80), Some((&b"example.com"[..], 80)));
        assert_eq!(
            split_authority(b"example.com:8080", 80),
            Some((&b"example.com"[..], 8080))
        );
        assert_eq!(split_authority(b"[::1]:443", 80), Some((&b"::1"[..], 443)));
        assert_eq!(split_authority(b"[::1]", 80), Some((&b"::1"[..], 80)));
        assert_eq!(split_authority(b"h:", 80), Some((&b"h"[..], 80)));
        for bad in [
            &b""[..],
            b":80",
            b"h:0",
            b"h:70000",
            b"h:x",
            b"a b:1",
            b"u@h:1",
            b"[::1]x",
        ] {
            assert_eq!(split_authority(bad, 80), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn cache_keys_normalize_host_and_port() {
        let mut k = Vec::new();
        cache_key(&mut k, b"Example.COM", 80, b"/a?b");
        assert_eq!(k, b"http://example.com/a?b");
        cache_key(&mut k, b"h", 8080, b"/");
        assert_eq!(k, b"http://h:8080/");
        cache_key(&mut k, b"::1", 81, b"/");
        assert_eq!(k, b"http://[::1]:81/");
    }

    #[test]
    fn via_loops() {
        let d = b"GET / HTTP/1.1\r\nHost: h\r\nVia: 1.0 fred, 1.1 me:3128 (weft)\r\n\r\n";
        let r = RequestHead::parsed(d);
        assert!(via_lists(&r, d, b"me:3128"));
        assert!(via_lists(&r, d, b"FRED"));
        assert!(!via_lists(&r, d, b"other"));
        assert!(!via_lists(&r, d, b"1.1"));
    }

    #[test]
    fn forwarded_request_drops_hop_by_hop_fields() {
        let d = b"GET http://o.example/x?y HTTP/1.1\r\nHost: wrong\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\nProxy-Authorization: Basic x\r\nAccept: */*\r\nVia: 1.0 a\r\nX-Forwarded-For: 10.0.0.1\r\nIf-None-Match: \"c\"\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n";
        let r = RequestHead::parsed(d);
        let forward = Forward {
            method: Method::Get,
            path: b"/x?y",
            host: b"o.example",
            via: b"1.1 me",
            client: Some("127.0.0.1".parse().unwrap()),
            chunked_body: false,
            upgrade: false,
            validators: None,
        };
        let written = |f: &Forward<'_>| {
            let mut out = Vec::new();
            write_request(&mut out, &r, d, f);
            String::from_utf8(out).unwrap()
        };
        let s = written(&forward);
        assert_eq!(
            s,
            "GET /x?y HTTP/1.1\r\nHost: o.example\r\nAccept: */*\r\nVia: 1.0 a\r\nX-Forwarded-For: 10.0.0.1\r\nIf-None-Match: \"c\"\r\nContent-Length: 0\r\nVia: 1.1 me\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
        );
        // Revalidation replaces the client's conditionals with the stored validators.
        let s = written(&Forward {
            client: None,
            validators: Some((Some(b"\"v1\""), Some(b"Thu, 01 Jan 1970 00:00:00 GMT"))),
            ..forward
        });
        assert!(s.contains("If-None-Match: \"v1\"\r\n") && !s.contains("\"c\""));
        assert!(s.contains("If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"));
    }

    #[test]
    fn a_forwarded_upgrade_keeps_upgrade_and_names_it_alone() {
        let d = b"GET /chat HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade, X-Secret\r\nX-Secret: s\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\r\n";
        let r = RequestHead::parsed(d);
        let mut out = Vec::new();
        let f = Forward {
            method: Method::Get,
            path: b"/chat",
            host: b"h",
            via: b"1.1 me",
            client: None,
            chunked_body: false,
            upgrade: true,
            validators: None,
        };
        write_request(&mut out, &r, d, &f);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\
             Connection: upgrade\r\nVia: 1.1 me\r\n\r\n"
        );
    }

    /// The head `write_response_fields` writes for the response head `d`
    /// (date `DATE`, via `1.1 me`), as text.
    fn written_response(d: &[u8], to: HeadFor) -> String {
        let mut out = Vec::new();
        write_response_fields(&mut out, &ResponseHead::parsed(d), d, b"1.1 me", b"DATE", to);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn relayed_and_stored_response_heads() {
        let d = b"HTTP/1.1 200 Fine\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nAge: 3\r\nETag: \"e\"\r\n\r\n";
        for to in [HeadFor::Client, HeadFor::Store] {
            assert_eq!(
                written_response(d, to),
                "HTTP/1.1 200 Fine\r\nAge: 3\r\nETag: \"e\"\r\nDate: DATE\r\nVia: 1.1 me\r\n"
            );
        }
    }

    #[test]
    fn a_whole_part_is_stored_as_the_complete_response() {
        let d = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\nETag: \"e\"\r\nSet-Cookie: a\r\nCache-Control: no-cache=\"set-cookie\"\r\n\r\n";
        assert_eq!(
            written_response(d, HeadFor::StoreWhole),
            "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nCache-Control: no-cache=\"set-cookie\"\r\nDate: DATE\r\nVia: 1.1 me\r\n"
        );
        assert!(written_response(d, HeadFor::Client)
            .starts_with("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/10\r\n"));
    }
    #[test]
    fn empty_values_and_withheld_fields() {
        let d = b"HTTP/1.1 200 OK\r\nX-Empty:\r\nVary:\r\nVary: *\r\nCache-Control: max-age=9, no-cache=\"Set-Cookie\"\r\nSet-Cookie: a=1\r\nAge: 1\r\nAge: 2\r\n\r\n";
        let s = written_response(d, HeadFor::Client);
        assert!(
            s.contains("\r\nX-Empty:\r\nVary:\r\nVary: *\r\n") && s.contains("Set-Cookie: a=1"),
            "{s}"
        );
        let s = written_response(d, HeadFor::Store);
        assert!(!s.contains("Set-Cookie:") && s.contains("X-Empty:\r\n"), "{s}");
        assert!(s.contains("Age: 1\r\n") && !s.contains("Age: 2"), "{s}");
    }

    #[test]
    fn forwarded_length_and_methods() {
        let d = b"PURGE /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nX-Empty:\r\nContent-Length: 3, 3\r\n\r\n";
        let mut r = RequestHead::new();
        r.set_extension_methods(true);
        r.parse(d, &weft_http::Limits::default()).unwrap().unwrap();
        let mut out = Vec::new();
        let f = Forward {
            method: r.method(),
            path: b"/x",
            host: b"h",
            via: b"1.1 me",
            client: None,
            chunked_body: false,
            upgrade: false,
            validators: None,
        };
        write_request(&mut out, &r, d, &f);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PURGE /x HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nContent-Length: 3\r\nVia: 1.1 me\r\n\r\n"
        );
    }
}
