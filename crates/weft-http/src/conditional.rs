//! Validators and conditional requests (RFC 9110 §8.8 and §13).
//!
//! [`evaluate_preconditions`] applies the precedence of §13.2.2: If-Match,
//! then If-Unmodified-Since (only without If-Match), then If-None-Match, then
//! If-Modified-Since (only for GET/HEAD and only without If-None-Match).

use crate::date::{parse_http_date, unix_secs};
use crate::represent::Role;
use crate::Method;
use std::time::SystemTime;

/// What a conditional request asks the server to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Serve the request normally.
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// A strong entity tag from a file's identity: inode, size and modification
/// time in nanoseconds, in hex (`"ino-size-mtime"`), as nginx and Apache do.
pub fn make_etag(ino: u64, size: u64, mtime_ns: i128) -> Vec<u8> {
    format!("\"{ino:x}-{size:x}-{:x}\"", mtime_ns as u128 as u64).into_bytes()
}

/// One entity tag of a list: (weak, opaque-tag including quotes).
fn entity_tags(list: &[u8]) -> impl Iterator<Item = (bool, &[u8])> {
    let mut rest = list;
    std::iter::from_fn(move || {
        while let [b' ' | b'\t' | b',', r @ ..] = rest {
            rest = r;
        }
        if rest.is_empty() {
            return None;
        }
        let weak = rest.starts_with(b"W/");
        let body = if weak { &rest[2..] } else { rest };
        if body.first() != Some(&b'"') {
            // Malformed: stop, matching nothing more.
            rest = &[];
            return None;
        }
        let close = body[1..].iter().position(|&b| b == b'"')?;
        let tag = &body[..close + 2];
        rest = &body[close + 2..];
        Some((weak, tag))
    })
}

fn is_star(v: &[u8]) -> bool {
    crate::trim(v) == b"*"
}

/// Strong comparison: both strong and identical.
fn matches_strong(list: &[u8], etag: &[u8]) -> bool {
    is_star(list) || entity_tags(list).any(|(weak, t)| !weak && t == etag)
}

/// Weak comparison: identical opaque tags, weakness ignored.
fn matches_weak(list: &[u8], etag: &[u8]) -> bool {
    let etag = etag.strip_prefix(b"W/").unwrap_or(etag);
    is_star(list) || entity_tags(list).any(|(_, t)| t == etag)
}

/// Decide a conditional request against a representation with strong `etag`
/// and last modification `mtime` (an origin server's view, both validators
/// known; [`crate::represent::answer`] takes either as optional).
pub fn evaluate_preconditions(
    method: Method,
    if_match: Option<&[u8]>,
    if_unmodified_since: Option<&[u8]>,
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: &[u8],
    mtime: SystemTime,
) -> Precondition {
    let fields = Preconditions {
        if_match,
        if_unmodified_since,
        if_none_match,
        if_modified_since,
    };
    check(method, &fields, Some(etag), Some(mtime), Role::Origin)
}

/// The four precondition fields of a request, as sent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Preconditions<'a> {
    pub(crate) if_match: Option<&'a [u8]>,
    pub(crate) if_unmodified_since: Option<&'a [u8]>,
    pub(crate) if_none_match: Option<&'a [u8]>,
    pub(crate) if_modified_since: Option<&'a [u8]>,
}

/// RFC 9110 §13.2.2, steps 1 to 4, against a representation that may lack
/// an entity tag or a modification date.
///
/// - If-Match without an ETag is satisfied only by `*` (no tag can match).
/// - If-Unmodified-Since and If-Modified-Since are ignored without a date
///   (§13.1.4, §13.1.3: "MUST ignore ... if the resource does not have a
///   modification date available") and when unparseable.
/// - If-None-Match without an ETag: an origin evaluates it (`*` matches, a
///   list does not, and either way If-Modified-Since is then ignored); a
///   [`Role::Cache`] ignores the field, because a stored response without a
///   tag cannot tell whether the client's tags name it, and falls back to
///   If-Modified-Since, as `weft proxy` has always done.
pub(crate) fn check(
    method: Method,
    p: &Preconditions<'_>,
    etag: Option<&[u8]>,
    mtime: Option<SystemTime>,
    role: Role,
) -> Precondition {
    let mtime_s = mtime.map(unix_secs);
    if let Some(v) = p.if_match {
        if !matches_strong(v, etag.unwrap_or(b"")) {
            return Precondition::Failed;
        }
    } else if let (Some(m), Some(date)) = (mtime_s, p.if_unmodified_since.and_then(parse_http_date)) {
        if m > unix_secs(date) {
            return Precondition::Failed;
        }
    }
    let get_or_head = matches!(method, Method::Get | Method::Head);
    let if_none_match = match (etag, role) {
        (None, Role::Cache) => None,
        _ => p.if_none_match,
    };
    if let Some(v) = if_none_match {
        if matches_weak(v, etag.unwrap_or(b"")) {
            return if get_or_head {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if get_or_head {
        if let (Some(m), Some(date)) = (mtime_s, p.if_modified_since.and_then(parse_http_date)) {
            if m <= unix_secs(date) {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// If-Range (RFC 9110 §13.1.5): may the Range be honoured? An entity tag must
/// match strongly; a date must equal the modification time exactly.
pub fn if_range_allows(if_range: &[u8], etag: &[u8], mtime: SystemTime) -> bool {
    if_range_holds(if_range, Some(etag), Some(mtime))
}

/// [`if_range_allows`] for a representation that may lack either validator:
/// a validator it does not have never matches.
pub(crate) fn if_range_holds(if_range: &[u8], etag: Option<&[u8]>, mtime: Option<SystemTime>) -> bool {
    let v = crate::trim(if_range);
    if v.starts_with(b"W/") {
        return false;
    }
    if v.starts_with(b"\"") {
        return etag == Some(v);
    }
    match (parse_http_date(v), mtime) {
        (Some(d), Some(m)) => unix_secs(d) == unix_secs(m),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const ETAG: &[u8] = b"\"abc-1-2\"";

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> Vec<u8> {
        crate::fmt_http_date(t(secs)).to_vec()
    }

    fn eval(im: Option<&[u8]>, ius: Option<&[u8]>, inm: Option<&[u8]>, ims: Option<&[u8]>) -> Precondition {
        evaluate_preconditions(Method::Get, im, ius, inm, ims, ETAG, t(1_000_000))
    }

    #[test]
    fn if_none_match_and_modified_since() {
        assert_eq!(eval(None, None, Some(ETAG), None), Precondition::NotModified);
        assert_eq!(
            eval(None, None, Some(b"\"x\", W/\"abc-1-2\""), None),
            Precondition::NotModified
        );
        assert_eq!(eval(None, None, Some(b"*"), None), Precondition::NotModified);
        assert_eq!(eval(None, None, Some(b"\"x\""), None), Precondition::Proceed);
        assert_eq!(
            eval(None, None, None, Some(&date(1_000_000))),
            Precondition::NotModified
        );
        assert_eq!(eval(None, None, None, Some(&date(999_999))), Precondition::Proceed);
        assert_eq!(eval(None, None, None, Some(b"garbage")), Precondition::Proceed);
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            eval(None, None, Some(b"\"x\""), Some(&date(2_000_000))),
            Precondition::Proceed
        );
        let post = evaluate_preconditions(Method::Post, None, None, Some(ETAG), None, ETAG, t(1));
        assert_eq!(post, Precondition::Failed);
    }

    #[test]
    fn if_match_and_unmodified_since() {
        assert_eq!(eval(Some(ETAG), None, None, None), Precondition::Proceed);
        assert_eq!(
            eval(Some(b"W/\"abc-1-2\""), None, None, None),
            Precondition::Failed,
            "weak never matches strongly"
        );
        assert_eq!(eval(Some(b"\"nope\""), None, None, None), Precondition::Failed);
        assert_eq!(eval(None, Some(&date(999_999)), None, None), Precondition::Failed);
        assert_eq!(eval(None, Some(&date(1_000_000)), None, None), Precondition::Proceed);
        // If-Match present: If-Unmodified-Since is ignored.
        assert_eq!(eval(Some(ETAG), Some(&date(1)), None, None), Precondition::Proceed);
    }

    #[test]
    fn if_range() {
        assert!(if_range_allows(ETAG, ETAG, t(5)));
        assert!(!if_range_allows(b"\"other\"", ETAG, t(5)));
        assert!(!if_range_allows(b"W/\"abc-1-2\"", ETAG, t(5)));
        assert!(if_range_allows(&date(5), ETAG, t(5)));
        assert!(!if_range_allows(&date(4), ETAG, t(5)));
    }

    #[test]
    fn etags_are_quoted_hex() {
        assert_eq!(make_etag(255, 16, 4096), b"\"ff-10-1000\"");
    }
}
