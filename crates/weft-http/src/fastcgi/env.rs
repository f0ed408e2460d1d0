//! The CGI/1.1 meta-variables (RFC 3875 §4.1) for a request, as FastCGI
//! PARAMS or as a fork-per-request program's environment.
//!
//! [`cgi_env`] calls `emit(name, value)` once per variable; the caller
//! encodes the pairs ([`super::encode_pair`]) or collects them for `execve`.
//! Names and values are built in one reused scratch buffer: nothing is
//! allocated per request once it has grown.
//!
//! Request header fields become `HTTP_*` variables (upper case, `-` → `_`;
//! repeated fields joined with `, `, `Cookie` with `; `), except:
//! `Content-Length` and `Content-Type` (they are `CONTENT_LENGTH` and
//! `CONTENT_TYPE`), `Proxy` (httpoxy: `HTTP_PROXY` would be taken for the
//! program's outgoing proxy), hop-by-hop fields, and names with bytes other
//! than letters, digits and `-` (so `X_Foo` cannot pose as `X-Foo`).

use crate::request::RequestHead;
use std::net::SocketAddr;

/// What the server knows about a CGI request besides its head.
#[derive(Clone, Copy, Debug)]
pub struct CgiRequest<'a> {
    /// The request head and the buffer it was parsed from.
    pub head: &'a RequestHead,
    /// The buffer `head` was parsed from.
    pub data: &'a [u8],
    /// The URL path of the script (`SCRIPT_NAME`), e.g. `/cgi-bin/app`.
    pub script_name: &'a [u8],
    /// The rest of the path after the script (`PATH_INFO`), possibly empty.
    pub path_info: &'a [u8],
    /// The program's file, for servers that need it (`SCRIPT_FILENAME`, php-fpm).
    pub script_filename: Option<&'a [u8]>,
    /// The document root (`DOCUMENT_ROOT`; `PATH_TRANSLATED` is it + path_info).
    pub document_root: &'a [u8],
    /// `SERVER_NAME`: the Host without port, or the configured name.
    pub server_name: &'a [u8],
    /// The address the connection was accepted on.
    pub local: SocketAddr,
    /// The client's address.
    pub remote: SocketAddr,
    /// The request body's length, when it has one (`CONTENT_LENGTH`).
    pub content_length: Option<u64>,
    /// `HTTPS=on` for a TLS connection.
    pub https: bool,
    /// `SERVER_SOFTWARE`.
    pub server_software: &'a str,
}

fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn header_name_ok(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

/// Emit every meta-variable of `req` through `emit`. `scratch` is reused.
pub fn cgi_env(req: &CgiRequest<'_>, scratch: &mut Vec<u8>, mut emit: impl FnMut(&[u8], &[u8])) {
    let target = req.head.target(req.data);
    let query = memchr::memchr(b'?', target).map_or(&b""[..], |q| &target[q + 1..]);
    let mut num = [0u8; 20];
    emit(b"GATEWAY_INTERFACE", b"CGI/1.1");
    emit(b"SERVER_SOFTWARE", req.server_software.as_bytes());
    emit(b"SERVER_PROTOCOL", req.head.version().as_str().as_bytes());
    emit(b"REQUEST_METHOD", req.head.method().as_str().as_bytes());
    emit(b"REQUEST_URI", target);
    emit(b"QUERY_STRING", query);
    emit(b"SCRIPT_NAME", req.script_name);
    emit(b"PATH_INFO", req.path_info);
    if !req.path_info.is_empty() {
        scratch.clear();
        scratch.extend_from_slice(req.document_root);
        scratch.extend_from_slice(req.path_info);
        emit(b"PATH_TRANSLATED", scratch);
    }
    if let Some(f) = req.script_filename {
        emit(b"SCRIPT_FILENAME", f);
    }
    emit(b"DOCUMENT_ROOT", req.document_root);
    emit(b"SERVER_NAME", req.server_name);
    emit(b"SERVER_PORT", decimal(req.local.port() as u64, &mut num));
    emit_ip(b"SERVER_ADDR", req.local, scratch, &mut emit);
    emit_ip(b"REMOTE_ADDR", req.remote, scratch, &mut emit);
    emit(b"REMOTE_PORT", decimal(req.remote.port() as u64, &mut num));
    if req.https {
        emit(b"HTTPS", b"on");
    }
    if let Some(n) = req.content_length {
        emit(b"CONTENT_LENGTH", decimal(n, &mut num));
    }
    if let Some(ct) = req.head.header(req.data, "content-type") {
        emit(b"CONTENT_TYPE", ct);
    }
    http_vars(req, scratch, &mut emit);
}

fn emit_ip(name: &[u8], addr: SocketAddr, scratch: &mut Vec<u8>, emit: &mut impl FnMut(&[u8], &[u8])) {
    use std::io::Write;
    scratch.clear();
    let _ = write!(scratch, "{}", addr.ip());
    emit(name, scratch);
}

/// The `HTTP_*` variables, one per distinct field name.
fn http_vars(req: &CgiRequest<'_>, scratch: &mut Vec<u8>, emit: &mut impl FnMut(&[u8], &[u8])) {
    let fields = req.head.fields();
    for (i, f) in fields.iter().enumerate() {
        let name = f.name(req.data);
        let skip = !header_name_ok(name)
            || name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"content-type")
            || name.eq_ignore_ascii_case(b"proxy")
            || crate::is_hop_by_hop(name)
            || fields[..i].iter().any(|g| g.name(req.data).eq_ignore_ascii_case(name));
        if skip {
            continue;
        }
        let sep: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
            b"; "
        } else {
            b", "
        };
        scratch.clear();
        scratch.extend_from_slice(b"HTTP_");
        scratch.extend(
            name.iter()
                .map(|b| if *b == b'-' { b'_' } else { b.to_ascii_uppercase() }),
        );
        let name_len = scratch.len();
        for (j, g) in fields[i..]
            .iter()
            .filter(|g| g.name(req.data).eq_ignore_ascii_case(name))
            .enumerate()
        {
            if j > 0 {
                scratch.extend_from_slice(sep);
            }
            scratch.extend_from_slice(g.value(req.data));
        }
        let (n, v) = scratch.split_at(name_len);
        emit(n, v);
    }
}
