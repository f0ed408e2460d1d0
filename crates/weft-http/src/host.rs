//! What a recipient checks of a request's authority and path before it acts
//! on them or passes them on.
//!
//! - [`valid_authority`]: a Host value (or an absolute-form target's
//!   authority) is `uri-host [":" port]` (RFC 9112 §3.2, RFC 3986 §3.2.2):
//!   no spaces, no userinfo (`user@host`), no path, a decimal port;
//! - [`normalize_path`]: a target's path with its dot-segments removed (RFC
//!   3986 §5.2.4, `%2e` counting as a dot), so that a proxy forwards, and
//!   keys its cache by, the path the origin will resolve; a path that climbs
//!   above the root, a NUL (`%00`) or a malformed escape is refused.

/// unreserved / sub-delims of RFC 3986 §2 (a reg-name byte besides `%`).
fn reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        )
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

/// Is `v` a valid `uri-host [":" port]`? An empty value is valid (a Host
/// field may be empty when the target has no authority).
pub fn valid_authority(v: &[u8]) -> bool {
    let (host, port) = if v.first() == Some(&b'[') {
        let Some(close) = v.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &v[1..close];
        let ok = match inner.first() {
            // IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
            Some(b'v' | b'V') => inner[1..].iter().all(|&b| reg_name_byte(b) || b == b':'),
            Some(_) => inner.iter().all(|&b| is_hex(b) || b == b':' || b == b'.') && inner.contains(&b':'),
            None => false,
        };
        if !ok {
            return false;
        }
        match &v[close + 1..] {
            [] => (&v[..0], None),
            [b':', p @ ..] => (&v[..0], Some(p)),
            _ => return false,
        }
    } else {
        match v.iter().position(|&b| b == b':') {
            Some(i) => (&v[..i], Some(&v[i + 1..])),
            None => (v, None),
        }
    };
    let mut i = 0;
    while i < host.len() {
        match host[i] {
            b'%' if host.len() > i + 2 && is_hex(host[i + 1]) && is_hex(host[i + 2]) => i += 3,
            b if reg_name_byte(b) => i += 1,
            _ => return false,
        }
    }
    match port {
        None | Some([]) => true,
        Some(p) => p.len() <= 5 && crate::parse_decimal(p).is_some_and(|n| n <= 65535),
    }
}

/// Is this path segment `.` (or its percent-encoded form)?
fn is_dot(seg: &[u8]) -> bool {
    seg == b"." || seg.eq_ignore_ascii_case(b"%2e")
}

/// Is this path segment `..` (in any mix of `.` and `%2e`)?
fn is_dot_dot(seg: &[u8]) -> bool {
    match seg.len() {
        2 | 4 | 6 => {
            let first = if seg[0] == b'.' { 1 } else { 3 };
            seg.len() > first && is_dot(&seg[..first]) && is_dot(&seg[first..])
        }
        _ => false,
    }
}

/// `target` (`/path?query`, or a `?query` alone) into `out` with the path's
/// dot-segments removed (RFC 3986 §5.2.4); the query is copied as it is.
/// Refused: a path climbing above the root, `%00`, a `%` not followed by
/// two hex digits. A path without dot-segments is copied unchanged.
pub fn normalize_path(target: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
    let (path, query) = target.split_at(path_end);
    let mut dots = false;
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b'%' => {
                if path.len() <= i + 2 || !is_hex(path[i + 1]) || !is_hex(path[i + 2]) {
                    return Err("malformed percent-encoding in the target");
                }
                if path[i + 1] == b'0' && path[i + 2] == b'0' {
                    return Err("NUL (%00) in the target");
                }
                dots |= path[i + 1] == b'2' && path[i + 2] | 0x20 == b'e';
                i += 3;
            }
            b'.' => {
                dots = true;
                i += 1;
            }
            _ => i += 1,
        }
    }
    out.clear();
    if !dots || path.first() != Some(&b'/') {
        out.extend_from_slice(target);
        return Ok(());
    }
    out.push(b'/');
    let mut segs = path[1..].split(|&b| b == b'/').peekable();
    while let Some(seg) = segs.next() {
        let last = segs.peek().is_none();
        // `out` ends with '/' here.
        if is_dot(seg) {
            continue;
        }
        if is_dot_dot(seg) {
            if out.len() == 1 {
                return Err("the target's path climbs above the root");
            }
            out.pop();
            let cut = out.iter().rposition(|&b| b == b'/').map_or(1, |p| p + 1);
            out.truncate(cut);
            continue;
        }
        out.extend_from_slice(seg);
        if !last {
            out.push(b'/');
        }
    }
    out.extend_from_slice(query);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        for ok in [
            &b""[..],
            b"example.com",
            b"example.com:8080",
            b"h:",
            b"127.0.0.1:80",
            b"[::1]",
            b"[::1]:443",
            b"[v1.fe]",
            b"a%41b",
            b"xn--bcher-kva.example",
        ] {
            assert!(valid_authority(ok), "{:?}", String::from_utf8_lossy(ok));
        }
        for bad in [
            &b"a b"[..],
            b"user@host",
            b"user:pw@host:80",
            b"h/x",
            b"h:80:80",
            b"h:x",
            b"h:99999",
            b"h:123456",
            b"[::1",
            b"[]",
            b"[zz]",
            b"[::1]x",
            b"h\t",
            b"a%4",
            b"h\xc3\xa9",
        ] {
            assert!(!valid_authority(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn norm(t: &str) -> Result<String, &'static str> {
        let mut out = Vec::new();
        normalize_path(t.as_bytes(), &mut out).map(|_| String::from_utf8(out).unwrap())
    }

    #[test]
    fn dot_segments_are_removed() {
        let cases = [
            ("/a/b/c", "/a/b/c"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/%2e%2E/b", "/b"),
            ("/a/.%2e/b?x=/../y", "/b?x=/../y"),
            ("/a/b/../../c/", "/c/"),
            ("/a//../b", "/a/b"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a/..b/c.d", "/a/..b/c.d"),
            ("/", "/"),
            ("/..a", "/..a"),
            ("?q", "?q"),
            ("/a%20b", "/a%20b"),
        ];
        for (t, want) in cases {
            assert_eq!(norm(t).as_deref(), Ok(want), "{t}");
        }
        for bad in [
            "/..",
            "/a/../..",
            "/%2e%2e/x",
            "/a/b/../../../c",
            "/a%00b",
            "/a%0",
            "/a%zz",
            "/%",
        ] {
            assert!(norm(bad).is_err(), "{bad}");
        }
    }
}
