//! Cache-Control (RFC 9111 §5.2): a small parser that allocates nothing.
//!
//! Like Pingora's `cache_control.rs`, the directives a cache acts on are
//! parsed once per message into plain fields; unknown extensions are skipped.
//! Directive names are case-insensitive; arguments may be tokens or quoted
//! strings (`max-age="60"` is accepted, as §5.2 asks of recipients), and a
//! quoted argument may contain commas (`no-cache="Set-Cookie, X"`).
//!
//! Rules for bad input, from §1.2.2 and §4.2.1:
//! - a delta-seconds value too large to represent counts as 2^31 seconds;
//! - a freshness directive (`max-age`, `s-maxage`) that is malformed, or given
//!   twice with different values, makes the response stale
//!   ([`CacheControl::invalid_freshness`]);
//! - the qualified form `private="field"` is treated as its unqualified form
//!   (a cache MAY do so, and it is the safe choice); `no-cache="field"` sets
//!   [`CacheControl::no_cache_fields`] instead of `no_cache`: the response
//!   may be reused without the fields it names (RFC 9111 §5.2.2.4, see
//!   [`crate::caching::withheld`]).

/// delta-seconds larger than this are clamped to it (RFC 9111 §1.2.2).
pub const DELTA_MAX: u64 = 1 << 31;

/// The directives of one message's Cache-Control fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `no-store`: never store the message.
    pub no_store: bool,
    /// `no-cache`: a stored response must be validated before each use
    /// (response), or the client wants a validated response (request).
    pub no_cache: bool,
    /// `no-cache="field, ..."` (response): those fields must not be sent from
    /// the store without validation; the rest of the response may be reused.
    pub no_cache_fields: bool,
    /// `private`: a shared cache must not store the response.
    pub private: bool,
    /// `public`: storable even when it would not be otherwise.
    pub public: bool,
    /// `must-revalidate`: never served stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate`: never served stale by a shared cache.
    pub proxy_revalidate: bool,
    /// `only-if-cached` (request): answer from the cache or with 504.
    pub only_if_cached: bool,
    /// `immutable` (RFC 8246): the response will not change while fresh.
    pub immutable: bool,
    /// `no-transform`.
    pub no_transform: bool,
    /// `max-age=N`.
    pub max_age: Option<u64>,
    /// `s-maxage=N` (responses; shared caches only).
    pub s_maxage: Option<u64>,
    /// `min-fresh=N` (requests).
    pub min_fresh: Option<u64>,
    /// `max-stale[=N]` (requests); `Some(DELTA_MAX)` when no limit was given.
    pub max_stale: Option<u64>,
    /// `stale-if-error=N` (RFC 5861 §4): a stale response may stand in for
    /// an error from the origin while it is stale by at most N seconds.
    pub stale_if_error: Option<u64>,
    /// `stale-while-revalidate=N` (RFC 5861 §3, responses): a response stale
    /// by at most N seconds may be served while a revalidation runs in the
    /// background.
    pub stale_while_revalidate: Option<u64>,
    /// A freshness directive was malformed or contradicted itself.
    pub invalid_freshness: bool,
    /// At least one Cache-Control field was present (even an empty one).
    pub present: bool,
}

impl CacheControl {
    /// Parse every Cache-Control field value of a message, in order.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> CacheControl {
        let mut cc = CacheControl::default();
        for v in values {
            cc.present = true;
            cc.parse_value(v);
        }
        cc
    }

    /// Parse one field value into `self` (directives accumulate).
    pub fn parse_value(&mut self, value: &[u8]) {
        Self::directives(value, |name, arg, arg_ok| self.apply(name, arg, arg_ok));
    }

    /// Call `f(name, argument, well_formed)` for each directive of one
    /// Cache-Control-like field value (token or quoted-string arguments).
    pub fn directives<'a>(value: &'a [u8], mut f: impl FnMut(&'a [u8], Option<&'a [u8]>, bool)) {
        let mut i = 0;
        let n = value.len();
        while i < n {
            // Skip separators and whitespace before a directive.
            while i < n && matches!(value[i], b',' | b' ' | b'\t') {
                i += 1;
            }
            if i >= n {
                break;
            }
            let name_start = i;
            while i < n && !matches!(value[i], b',' | b'=' | b' ' | b'\t') {
                i += 1;
            }
            let name = &value[name_start..i];
            while i < n && matches!(value[i], b' ' | b'\t') {
                i += 1;
            }
            let mut arg: Option<&[u8]> = None;
            let mut arg_ok = true;
            if i < n && value[i] == b'=' {
                i += 1;
                while i < n && matches!(value[i], b' ' | b'\t') {
                    i += 1;
                }
                if i < n && value[i] == b'"' {
                    // Quoted string: ends at the first unescaped quote. An
                    // unterminated one swallows the rest of the field.
                    i += 1;
                    let s = i;
                    let mut escaped = false;
                    while i < n && (escaped || value[i] != b'"') {
                        escaped = !escaped && value[i] == b'\\';
                        i += 1;
                    }
                    if i >= n {
                        arg_ok = false;
                    }
                    arg = Some(&value[s..i.min(n)]);
                    i = (i + 1).min(n);
                } else {
                    let s = i;
                    while i < n && !matches!(value[i], b',' | b' ' | b'\t') {
                        i += 1;
                    }
                    arg = Some(&value[s..i]);
                }
            }
            // Anything up to the next comma other than whitespace is junk that
            // belongs to this directive: skip it.
            while i < n && value[i] != b',' {
                if !matches!(value[i], b' ' | b'\t') {
                    arg_ok = false;
                }
                i += 1;
            }
            f(name, arg, arg_ok);
        }
    }

    fn apply(&mut self, name: &[u8], arg: Option<&[u8]>, arg_ok: bool) {
        let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
        let delta = arg.filter(|_| arg_ok).and_then(parse_delta);
        match name.len() {
            6 if is(b"public") => self.public = true,
            7 if is(b"private") => self.private = true,
            7 if is(b"max-age") => set_freshness(&mut self.max_age, delta, &mut self.invalid_freshness),
            8 if is(b"no-store") => self.no_store = true,
            // A qualified no-cache naming fields withholds them; an empty
            // or broken list is the unqualified form.
            8 if is(b"no-cache") => match arg {
                Some(a) if arg_ok && crate::list_items(a).next().is_some() => self.no_cache_fields = true,
                _ => self.no_cache = true,
            },
            8 if is(b"s-maxage") => set_freshness(&mut self.s_maxage, delta, &mut self.invalid_freshness),
            9 if is(b"immutable") => self.immutable = true,
            9 if is(b"min-fresh") => {
                if let Some(d) = delta {
                    self.min_fresh = Some(self.min_fresh.map_or(d, |m| m.max(d)));
                }
            }
            9 if is(b"max-stale") => {
                // Without an argument the client accepts any staleness; a bad
                // argument accepts none (the conservative reading).
                let v = match arg {
                    None => Some(DELTA_MAX),
                    Some(_) => delta,
                };
                if let Some(v) = v {
                    self.max_stale = Some(self.max_stale.map_or(v, |m| m.min(v)));
                }
            }
            12 if is(b"no-transform") => self.no_transform = true,
            14 if is(b"only-if-cached") => self.only_if_cached = true,
            14 if is(b"stale-if-error") => {
                if let Some(d) = delta {
                    self.stale_if_error = Some(self.stale_if_error.map_or(d, |m| m.max(d)));
                }
            }
            15 if is(b"must-revalidate") => self.must_revalidate = true,
            22 if is(b"stale-while-revalidate") => {
                if let Some(d) = delta {
                    let m = self.stale_while_revalidate.map_or(d, |m| m.max(d));
                    self.stale_while_revalidate = Some(m);
                }
            }
            16 if is(b"proxy-revalidate") => self.proxy_revalidate = true,
            _ => {}
        }
    }
}

fn set_freshness(slot: &mut Option<u64>, v: Option<u64>, invalid: &mut bool) {
    match (v, *slot) {
        (None, _) => *invalid = true,
        (Some(v), None) => *slot = Some(v),
        (Some(v), Some(old)) if v != old => *invalid = true,
        _ => {}
    }
}

/// delta-seconds: digits only; values beyond 2^31 are clamped to 2^31.
pub fn parse_delta(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        n = n * 10 + (b - b'0') as u64;
        if n >= DELTA_MAX {
            return Some(DELTA_MAX);
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(v: &str) -> CacheControl {
        CacheControl::parse([v.as_bytes()])
    }

    #[test]
    fn empty_and_absent() {
        let c = CacheControl::parse(std::iter::empty::<&[u8]>());
        assert!(!c.present);
        assert_eq!(c, CacheControl::default());
        let c = cc("");
        assert!(c.present);
        assert!(!c.no_store && c.max_age.is_none());
    }

    #[test]
    fn boolean_directives_any_case() {
        let c = cc("No-Store, NO-CACHE, private, Public, must-revalidate, proxy-revalidate, only-if-cached, immutable, no-transform");
        assert!(c.no_store && c.no_cache && c.private && c.public);
        assert!(c.must_revalidate && c.proxy_revalidate && c.only_if_cached && c.immutable && c.no_transform);
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(cc("max-age=60").max_age, Some(60));
        assert_eq!(cc("max-age = 60").max_age, Some(60), "whitespace around = is tolerated");
        assert_eq!(cc("max-age=\"60\"").max_age, Some(60), "quoted form accepted");
        assert_eq!(cc("s-maxage=0").s_maxage, Some(0));
        assert_eq!(cc("max-age=99999999999999999999999").max_age, Some(DELTA_MAX));
        assert_eq!(cc("min-fresh=5").min_fresh, Some(5));
    }

    #[test]
    fn malformed_freshness_makes_it_invalid() {
        for v in [
            "max-age",
            "max-age=",
            "max-age=-1",
            "max-age=1.5",
            "max-age=abc",
            "s-maxage=x",
        ] {
            let c = cc(v);
            assert!(c.invalid_freshness, "{v}");
            assert_eq!(c.max_age, None, "{v}");
        }
        let c = cc("max-age=10, max-age=20");
        assert!(c.invalid_freshness, "conflicting duplicates");
        let c = cc("max-age=10, max-age=10");
        assert!(!c.invalid_freshness, "identical duplicates are one value");
        assert_eq!(c.max_age, Some(10));
    }

    #[test]
    fn stale_while_revalidate_takes_the_larger_value() {
        assert_eq!(
            cc("max-age=1, stale-while-revalidate=30").stale_while_revalidate,
            Some(30)
        );
        assert_eq!(
            cc("stale-while-revalidate=5, stale-while-revalidate=9").stale_while_revalidate,
            Some(9)
        );
        assert_eq!(
            cc("stale-while-revalidate").stale_while_revalidate,
            None,
            "no value: none"
        );
        assert_eq!(cc("stale-while-revalidate=x").stale_while_revalidate, None);
    }

    #[test]
    fn max_stale_with_and_without_value() {
        assert_eq!(cc("max-stale").max_stale, Some(DELTA_MAX));
        assert_eq!(cc("max-stale=30").max_stale, Some(30));
        assert_eq!(cc("max-stale=x").max_stale, None, "bad value allows no staleness");
        assert_eq!(cc("max-stale=30, max-stale=10").max_stale, Some(10));
    }

    #[test]
    fn quoted_arguments_may_hold_commas() {
        let c = cc("no-cache=\"Set-Cookie, X-Foo\", max-age=5");
        assert!(c.no_cache_fields && !c.no_cache);
        assert!(cc("no-cache=\"\"").no_cache, "an empty list is plain no-cache");
        assert_eq!(c.max_age, Some(5));
        let c = cc("private=\"a,b\\\"c\", public");
        assert!(c.private && c.public);
        let c = cc("community=\"UCI\", max-age=7");
        assert_eq!(c.max_age, Some(7), "unknown extensions are skipped");
    }

    #[test]
    fn several_fields_accumulate() {
        let c = CacheControl::parse([&b"max-age=5"[..], b"no-cache"]);
        assert_eq!(c.max_age, Some(5));
        assert!(c.no_cache);
    }

    #[test]
    fn junk_is_skipped_not_fatal() {
        let c = cc(",,, max-age=5 junk, no-store");
        assert!(c.no_store);
        assert!(c.invalid_freshness, "junk after a freshness value makes it unusable");
        let c = cc("max-age=\"5");
        assert!(c.invalid_freshness, "unterminated quote");
    }
}
