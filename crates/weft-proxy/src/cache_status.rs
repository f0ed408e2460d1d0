//! The `Cache-Status` response field (RFC 9211, `--cache-status`): what this
//! cache did with a request, for the operator or client debugging it —
//! Fastly's, Cloudflare's and the standard's replacement for the ad-hoc
//! `X-Cache`. One entry per answer, naming this cache by its `Via` name:
//!
//! - `"ID"; hit; ttl=N`: answered from a stored response, `N` seconds of
//!   freshness left (negative: stale), with `detail=max-stale`,
//!   `stale-while-revalidate` or `stale-if-error` when it was stale, and
//!   `collapsed` when the request waited for another's fill;
//! - `"ID"; fwd=miss|stale|bypass; fwd-status=S[; stored]`: forwarded
//!   (nothing stored, a stored response that needed revalidating, or not
//!   cacheable), the upstream's status, and whether the answer was stored.

/// The cache's identifier: `name` as a structured-field string (quoted,
/// `"` and `\` escaped, bytes outside printable ASCII left out).
pub(crate) fn id(name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(name.len() + 2);
    v.push(b'"');
    for &b in name {
        if b == b'"' || b == b'\\' {
            v.push(b'\\');
        }
        if (0x20..0x7f).contains(&b) {
            v.push(b);
        }
    }
    v.push(b'"');
    v
}

/// An answer from a stored response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Why a stale response was used, if it was.
    pub detail: Option<&'static str>,
    /// The request waited for another request's fill of its key.
    pub collapsed: bool,
}

/// Append `Cache-Status` for an answer from a stored response with `ttl`
/// seconds of freshness left.
pub(crate) fn write_hit(v: &mut Vec<u8>, id: &[u8], ttl: i64, hit: Hit) {
    v.extend_from_slice(b"Cache-Status: ");
    v.extend_from_slice(id);
    v.extend_from_slice(b"; hit; ttl=");
    if ttl < 0 {
        v.push(b'-');
    }
    weft_http::push_decimal(v, ttl.unsigned_abs());
    if hit.collapsed {
        v.extend_from_slice(b"; collapsed");
    }
    if let Some(d) = hit.detail {
        v.extend_from_slice(b"; detail=");
        v.extend_from_slice(d.as_bytes());
    }
    v.extend_from_slice(b"\r\n");
}

/// Append `Cache-Status` for a forwarded request: `fwd` (`miss`, `stale`,
/// `bypass`), the upstream's `status`, and whether the answer is `stored`.
pub(crate) fn write_forwarded(v: &mut Vec<u8>, id: &[u8], fwd: &str, status: u16, stored: bool) {
    v.extend_from_slice(b"Cache-Status: ");
    v.extend_from_slice(id);
    v.extend_from_slice(b"; fwd=");
    v.extend_from_slice(fwd.as_bytes());
    v.extend_from_slice(b"; fwd-status=");
    weft_http::push_decimal(v, status as u64);
    if stored {
        v.extend_from_slice(b"; stored");
    }
    v.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_structured_fields() {
        assert_eq!(id(b"cache-1:3128"), b"\"cache-1:3128\"");
        assert_eq!(id(b"a\"b\\c\x01"), b"\"a\\\"b\\\\c\"");
        let mut v = Vec::new();
        write_hit(&mut v, b"\"c\"", 42, Hit::default());
        assert_eq!(v, b"Cache-Status: \"c\"; hit; ttl=42\r\n");
        v.clear();
        let stale = Hit {
            detail: Some("stale-while-revalidate"),
            collapsed: true,
        };
        write_hit(&mut v, b"\"c\"", -3, stale);
        assert_eq!(
            v,
            b"Cache-Status: \"c\"; hit; ttl=-3; collapsed; detail=stale-while-revalidate\r\n"
        );
        v.clear();
        write_forwarded(&mut v, b"\"c\"", "miss", 200, true);
        assert_eq!(v, b"Cache-Status: \"c\"; fwd=miss; fwd-status=200; stored\r\n");
    }
}
