//! Which fields a shared cache takes its directives from.
//!
//! - Targeted cache control (RFC 9213): a surrogate (a reverse proxy) uses
//!   the first field of its target list the response carries — a configured
//!   `*-Cache-Control` name, then `CDN-Cache-Control` — instead of
//!   Cache-Control and Expires, with the same directive grammar. A forward
//!   proxy has an empty list and uses Cache-Control. The targeted fields are
//!   still passed on downstream.
//! - `no-cache="Set-Cookie"` (RFC 9111 §5.2.2.4): the named fields are
//!   [`withheld`] from the stored head, and the response is reused without them.

use crate::cache_control::CacheControl;
use crate::caching::Heuristic;
use crate::list_items;
use crate::response::ResponseHead;

/// Longest configurable targeted field name.
pub const MAX_TARGETED_NAME: usize = 48;

const CDN: &str = "cdn-cache-control";

/// A cache's target list (RFC 9213 §2.1), in precedence order: an optional
/// configured field, then CDN-Cache-Control. Empty for a forward proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Targeted {
    cdn: bool,
    name: [u8; MAX_TARGETED_NAME],
    len: u8,
}

impl Default for Targeted {
    /// No targeted field: Cache-Control only.
    fn default() -> Self {
        Targeted {
            cdn: false,
            name: [0; MAX_TARGETED_NAME],
            len: 0,
        }
    }
}

impl Targeted {
    /// A surrogate's list: `extra` (e.g. `Weft-Cache-Control`) first when
    /// given, then CDN-Cache-Control. `extra` must be a field name ending in
    /// `-Cache-Control` (RFC 9213's convention, which is also what lets
    /// [`withheld`] find its `no-cache` lists) of at most 48 bytes.
    pub fn surrogate(extra: Option<&str>) -> Result<Targeted, String> {
        let mut t = Targeted {
            cdn: true,
            ..Targeted::default()
        };
        if let Some(name) = extra {
            let b = name.as_bytes();
            let token = b
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c));
            if !token || b.len() > MAX_TARGETED_NAME || !ends_with_ci(b, b"-cache-control") || b.len() == 14 {
                return Err(format!(
                    "targeted-cache-control: {name:?} is not a field name ending in -Cache-Control (at most {MAX_TARGETED_NAME} bytes)"
                ));
            }
            t.name[..b.len()].copy_from_slice(b);
            t.len = b.len() as u8;
        }
        Ok(t)
    }

    /// The configured field name, if any.
    pub fn name(&self) -> Option<&str> {
        (self.len > 0).then(|| std::str::from_utf8(&self.name[..self.len as usize]).unwrap_or(""))
    }

    /// The first field of the list the response carries (non-empty).
    pub fn select(&self, resp: &ResponseHead, data: &[u8]) -> Option<&str> {
        let present = |n: &str| resp.header_all(data, n).any(|v| !v.is_empty());
        if let Some(n) = self.name().filter(|n| present(n)) {
            return Some(n);
        }
        (self.cdn && present(CDN)).then_some(CDN)
    }
}

/// What a cache applies beyond RFC 9111's fixed rules: the freshness
/// heuristic and the targeted fields.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheRules {
    /// The heuristic for responses without explicit freshness.
    pub heuristic: Heuristic,
    /// The target list (empty: Cache-Control only).
    pub targeted: Targeted,
}

impl CacheRules {
    /// The directives a response is cached by, and whether its Expires
    /// counts: a targeted field's when one is present (Cache-Control and
    /// Expires are then ignored, RFC 9213 §2.2), else Cache-Control's.
    pub fn directives(&self, resp: &ResponseHead, data: &[u8]) -> (CacheControl, bool) {
        match self.targeted.select(resp, data) {
            Some(name) => (CacheControl::parse(resp.header_all(data, name)), false),
            None => (CacheControl::parse(resp.header_all(data, "cache-control")), true),
        }
    }
}

fn ends_with_ci(s: &[u8], suffix: &[u8]) -> bool {
    s.len() >= suffix.len() && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// Does a `no-cache="..."` directive of the response (in Cache-Control or a
/// targeted `*-Cache-Control` field) name `field`? Such a field is left out
/// of the stored head, so the stored response may be reused without it
/// (RFC 9111 §5.2.2.4). Allocates nothing.
pub fn withheld(resp: &ResponseHead, data: &[u8], field: &[u8]) -> bool {
    resp.fields()
        .iter()
        .filter(|f| ends_with_ci(f.name(data), b"cache-control"))
        .any(|f| {
            let mut named = false;
            CacheControl::directives(f.value(data), |n, arg, ok| {
                if ok && n.eq_ignore_ascii_case(b"no-cache") {
                    named |= arg.is_some_and(|a| list_items(a).any(|x| x.eq_ignore_ascii_case(field)));
                }
            });
            named
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targeted_fields_go_first_in_a_surrogate_only() {
        let d = b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nExpires: 0\r\nCDN-Cache-Control: max-age=60\r\nWeft-Cache-Control: max-age=5\r\n\r\n";
        let r = ResponseHead::parsed(d);
        let forward = CacheRules::default();
        let (cc, expires) = forward.directives(&r, d);
        assert!(cc.no_store && expires);
        let cdn = CacheRules {
            targeted: Targeted::surrogate(None).unwrap(),
            ..CacheRules::default()
        };
        let (cc, expires) = cdn.directives(&r, d);
        assert_eq!((cc.max_age, cc.no_store, expires), (Some(60), false, false));
        let weft = CacheRules {
            targeted: Targeted::surrogate(Some("Weft-Cache-Control")).unwrap(),
            ..CacheRules::default()
        };
        assert_eq!(weft.directives(&r, d).0.max_age, Some(5));
        // Without the targeted fields: Cache-Control, as a forward proxy.
        let d = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=7\r\nCDN-Cache-Control:\r\n\r\n";
        assert_eq!(weft.directives(&ResponseHead::parsed(d), d).0.max_age, Some(7));
    }

    #[test]
    fn bad_targeted_names_are_refused() {
        for bad in ["Cache-Control", "-cache-control", "X Cache-Control", "Weft-Cache", ""] {
            let e = Targeted::surrogate(Some(bad)).unwrap_err();
            assert!(e.starts_with("targeted-cache-control:") && !e.contains('\n'), "{e}");
        }
        let long = format!("{}-Cache-Control", "x".repeat(40));
        assert!(Targeted::surrogate(Some(&long)).is_err());
        assert_eq!(
            Targeted::surrogate(Some("Acme-Cache-Control")).unwrap().name(),
            Some("Acme-Cache-Control")
        );
    }

    #[test]
    fn no_cache_with_field_names_withholds_them() {
        let d = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60, no-cache=\"Set-Cookie, X-A\"\r\nCDN-Cache-Control: no-cache=X-B\r\nSet-Cookie: s=1\r\n\r\n";
        let r = ResponseHead::parsed(d);
        for f in ["set-cookie", "X-A", "x-b"] {
            assert!(withheld(&r, d, f.as_bytes()), "{f}");
        }
        assert!(!withheld(&r, d, b"max-age"));
        assert!(!withheld(&r, d, b"Content-Type"));
    }
}
