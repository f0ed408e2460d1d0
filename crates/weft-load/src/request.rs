//! Rendering request heads without formatting per request.
//!
//! Everything that does not change between requests (the absolute-form prefix
//! for a proxy, the version, `Host`, the user's headers, the connection
//! header) is rendered once into byte strings; a request is then a handful of
//! `extend_from_slice` calls into the connection's reused output buffer.

use weft_http::{Method, Version};

/// One origin server the requests name (for absolute-form URIs and `Host`).
#[derive(Clone, Debug)]
pub struct Authority {
    /// `http://host:port` when requests go through a proxy, else empty.
    pub abs_prefix: Vec<u8>,
    /// `Host: ...\r\n`.
    pub host_line: Vec<u8>,
    /// `host:port` as written.
    pub name: String,
}

/// Renders requests.
#[derive(Clone, Debug)]
pub struct Writer {
    /// Origin servers; index 0 is the command line's URL.
    pub authorities: Vec<Authority>,
    /// HTTP/1.0 or 1.1.
    pub version: Version,
    /// The user's `--header` lines, each ending in CRLF.
    pub user_headers: Vec<u8>,
    /// `--close`: every request asks the server to close.
    pub close: bool,
    /// Requests go through a proxy (absolute form).
    pub via_proxy: bool,
    tail_keep: Vec<u8>,
    tail_close: Vec<u8>,
}

impl Writer {
    /// A writer for these origins. `host_override` replaces every `Host` value.
    pub fn new(
        origins: &[String],
        host_override: Option<&str>,
        version: Version,
        headers: &[String],
        close: bool,
        via_proxy: bool,
    ) -> Writer {
        let authorities = origins
            .iter()
            .map(|o| {
                let host = host_override.unwrap_or(o);
                Authority {
                    abs_prefix: if via_proxy {
                        format!("http://{o}").into_bytes()
                    } else {
                        Vec::new()
                    },
                    host_line: format!("Host: {host}\r\n").into_bytes(),
                    name: o.clone(),
                }
            })
            .collect();
        let mut user_headers = Vec::new();
        for h in headers {
            user_headers.extend_from_slice(h.trim().as_bytes());
            user_headers.extend_from_slice(b"\r\n");
        }
        let mut tail_keep = Vec::new();
        let mut tail_close = Vec::new();
        match version {
            Version::Http11 => {
                tail_keep.extend_from_slice(b"\r\n");
                tail_close.extend_from_slice(b"Connection: close\r\n\r\n");
            }
            Version::Http10 => {
                tail_keep.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
                tail_close.extend_from_slice(b"\r\n");
            }
        }
        Writer {
            authorities,
            version,
            user_headers,
            close,
            via_proxy,
            tail_keep,
            tail_close,
        }
    }

    /// Append one request. `extra` holds per-request header lines (CRLF
    /// terminated); `keep_alive` asks for a persistent connection (ignored with
    /// `--close`); `body` is sent with a Content-Length.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn push(
        &self,
        out: &mut Vec<u8>,
        method: Method,
        authority: usize,
        path: &[u8],
        extra: &[u8],
        keep_alive: bool,
        body: &[u8],
    ) -> usize {
        let start = out.len();
        let a = &self.authorities[authority.min(self.authorities.len() - 1)];
        out.extend_from_slice(method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(&a.abs_prefix);
        out.extend_from_slice(path);
        out.push(b' ');
        out.extend_from_slice(self.version.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&a.host_line);
        out.extend_from_slice(&self.user_headers);
        out.extend_from_slice(extra);
        if !body.is_empty() || method == Method::Post {
            weft_http::encode::content_length(out, body.len() as u64);
        }
        if keep_alive && !self.close {
            out.extend_from_slice(&self.tail_keep);
        } else {
            out.extend_from_slice(&self.tail_close);
        }
        out.extend_from_slice(body);
        out.len() - start
    }

    /// `CONNECT host:port` for the tunnel of an emulated SSL connection.
    pub fn push_connect(&self, out: &mut Vec<u8>, authority: usize) {
        let a = &self.authorities[authority.min(self.authorities.len() - 1)];
        out.extend_from_slice(b"CONNECT ");
        out.extend_from_slice(a.name.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(a.name.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.user_headers);
        out.extend_from_slice(b"\r\n");
    }

    /// The same writer without proxy prefixes (requests inside a CONNECT tunnel
    /// go to the origin itself, in origin form).
    pub fn direct(&self) -> Writer {
        let mut w = self.clone();
        w.via_proxy = false;
        for a in &mut w.authorities {
            a.abs_prefix.clear();
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_render_as_expected() {
        let w = Writer::new(
            &["127.0.0.1:9000".into()],
            None,
            Version::Http11,
            &["X-A: 1".into()],
            false,
            false,
        );
        let mut out = Vec::new();
        w.push(&mut out, Method::Get, 0, b"/a", b"", true, b"");
        assert_eq!(out, b"GET /a HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nX-A: 1\r\n\r\n");
        out.clear();
        w.push(
            &mut out,
            Method::Head,
            0,
            b"/a",
            b"If-Modified-Since: x\r\n",
            false,
            b"",
        );
        assert_eq!(
            out,
            b"HEAD /a HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nX-A: 1\r\nIf-Modified-Since: x\r\nConnection: close\r\n\r\n"
        );
        let p = Writer::new(&["o:80".into()], Some("h"), Version::Http10, &[], false, true);
        out.clear();
        p.push(&mut out, Method::Post, 0, b"/p", b"", true, b"xy");
        assert_eq!(
            out,
            b"POST http://o:80/p HTTP/1.0\r\nHost: h\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nxy"
        );
        out.clear();
        p.push_connect(&mut out, 0);
        assert_eq!(out, b"CONNECT o:80 HTTP/1.1\r\nHost: o:80\r\n\r\n");
        out.clear();
        p.direct().push(&mut out, Method::Get, 0, b"/", b"", false, b"");
        assert_eq!(out, b"GET / HTTP/1.0\r\nHost: h\r\n\r\n");
    }
}
