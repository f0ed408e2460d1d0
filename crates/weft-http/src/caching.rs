//! The rules of a shared HTTP cache (RFC 9111), as plain functions.
//!
//! Nothing here reads a clock: times are whole seconds since the epoch, passed
//! in by the caller (the proxy uses its loop's cached wall clock), so every
//! rule is a unit test. The proxy's store keeps, per object, the values these
//! functions need (Date, Age, request and response times, lifetime) and asks:
//!
//! - [`storable`]: may this response be stored at all (§3)?
//! - [`freshness_lifetime`]: how long is it fresh (§4.2.1, with the heuristic of
//!   §4.2.2 from Last-Modified)?
//! - [`current_age`]: how old is it now (§4.2.3)?
//! - [`decide`]: may this request be answered with it as is, stale, or only
//!   after validation (§4.2, §4.2.4, §5.2.1, §5.2.2)?
//! - [`vary_key`] / [`vary_has_star`]: which stored variant a request selects (§4.1);
//! - [`merge_304`]: a stored head updated with a 304's fields (§3.2, §4.3.4);
//! - [`invalidates`]: does an unsafe request invalidate the URI (§4.4)?

use crate::cache_control::{CacheControl, DELTA_MAX};
use crate::date::{parse_http_date, unix_secs};
use crate::request::RequestHead;
use crate::response::ResponseHead;
pub use crate::targeted::{withheld, CacheRules, Targeted};
use crate::{is_hop_by_hop, list_items, Method};

/// Status codes that are heuristically cacheable (RFC 9110 §15.1).
pub const HEURISTIC_STATUSES: [u16; 12] = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Is `status` heuristically cacheable?
pub fn heuristically_cacheable(status: u16) -> bool {
    HEURISTIC_STATUSES.contains(&status)
}

/// Final status codes this cache understands well enough to store (§3: "the
/// response status code is final and understood"). 206 is left out (only
/// complete responses are stored, ranges are cut from them) and 304 updates a
/// stored response instead of being one.
pub fn understood_status(status: u16) -> bool {
    matches!(
        status,
        200 | 203
            | 204
            | 300
            | 301
            | 302
            | 303
            | 307
            | 308
            | 400
            | 403
            | 404
            | 405
            | 410
            | 414
            | 500
            | 501
            | 502
            | 503
            | 504
    )
}

/// Why a response is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStorable {
    /// Only GET responses are stored (HEAD is answered from them).
    Method,
    /// Not a final status this cache understands (or 206/304).
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private`: a shared cache must not store it.
    Private,
    /// The request had Authorization and the response does not allow sharing it.
    Authorization,
    /// Nothing makes it cacheable: no explicit freshness, not `public`, and
    /// the status is not heuristically cacheable.
    NoFreshness,
    /// `Vary: *` never matches a later request.
    VaryStar,
}

impl NotStorable {
    /// A short description.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method is not GET",
            NotStorable::Status => "status is not storable",
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "request had Authorization",
            NotStorable::NoFreshness => "no freshness information",
            NotStorable::VaryStar => "Vary: *",
        }
    }
}

/// What [`storable`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct StoreQuery<'a> {
    /// The request method.
    pub method: Method,
    /// The response status.
    pub status: u16,
    /// The request's Cache-Control.
    pub request: &'a CacheControl,
    /// The response's Cache-Control.
    pub response: &'a CacheControl,
    /// The request carried Authorization.
    pub authorization: bool,
    /// The response has an Expires field (valid or not: an invalid one still
    /// makes the response storable, and stale).
    pub expires: bool,
    /// The response's Vary lists `*`.
    pub vary_star: bool,
}

/// May a shared cache store this response (RFC 9111 §3, §3.5)?
pub fn storable(q: &StoreQuery<'_>) -> Result<(), NotStorable> {
    if q.method != Method::Get {
        return Err(NotStorable::Method);
    }
    if !understood_status(q.status) {
        return Err(NotStorable::Status);
    }
    if q.request.no_store || q.response.no_store {
        return Err(NotStorable::NoStore);
    }
    if q.response.private {
        return Err(NotStorable::Private);
    }
    if q.authorization && !(q.response.must_revalidate || q.response.public || q.response.s_maxage.is_some()) {
        return Err(NotStorable::Authorization);
    }
    let explicit = q.response.public || q.expires || q.response.max_age.is_some() || q.response.s_maxage.is_some();
    if !explicit && !heuristically_cacheable(q.status) {
        return Err(NotStorable::NoFreshness);
    }
    if q.vary_star {
        return Err(NotStorable::VaryStar);
    }
    Ok(())
}

/// The heuristic used when a response has no explicit expiration (§4.2.2):
/// a fraction of the time since Last-Modified, capped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Heuristic {
    /// Fraction of (Date − Last-Modified); 10 % is the customary value.
    pub fraction: f64,
    /// Upper bound in seconds.
    pub max: u64,
}

impl Default for Heuristic {
    fn default() -> Self {
        Heuristic {
            fraction: 0.1,
            max: 24 * 3600,
        }
    }
}

/// What [`freshness_lifetime`] looks at, all times in seconds since the epoch.
#[derive(Clone, Copy, Debug)]
pub struct LifetimeQuery<'a> {
    /// The response's Cache-Control.
    pub response: &'a CacheControl,
    /// The Expires field value, if any.
    pub expires: Option<&'a [u8]>,
    /// The Date field, parsed (None if absent or invalid).
    pub date: Option<u64>,
    /// The Last-Modified field, parsed.
    pub last_modified: Option<u64>,
    /// The response status.
    pub status: u16,
    /// When the response was received.
    pub response_time: u64,
}

/// The freshness lifetime in seconds (§4.2.1): s-maxage, then max-age, then
/// Expires − Date, then the heuristic for heuristically cacheable (or public)
/// responses with Last-Modified; otherwise 0. A malformed freshness
/// directive or Expires value means 0 (stale).
pub fn freshness_lifetime(q: &LifetimeQuery<'_>, heuristic: &Heuristic) -> u64 {
    let cc = q.response;
    if cc.invalid_freshness {
        return 0;
    }
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    let date = q.date.unwrap_or(q.response_time);
    if let Some(e) = q.expires {
        return match parse_http_date(e) {
            Some(t) => unix_secs(t).saturating_sub(date).min(DELTA_MAX),
            // "0" and other invalid dates mean "already expired".
            None => 0,
        };
    }
    if heuristically_cacheable(q.status) || cc.public {
        if let Some(lm) = q.last_modified {
            let since = date.saturating_sub(lm);
            return ((since as f64 * heuristic.fraction) as u64).min(heuristic.max);
        }
    }
    0
}

/// The current age in seconds (§4.2.3).
///
/// `date`: the response's Date (or `response_time` when it had none);
/// `age_value`: its Age field (0 when absent); `request_time`/`response_time`:
/// when the request was sent and the response received; `now`: the current time.
pub fn current_age(date: u64, age_value: u64, request_time: u64, response_time: u64, now: u64) -> u64 {
    let apparent_age = response_time.saturating_sub(date);
    let response_delay = response_time.saturating_sub(request_time);
    let corrected_age_value = age_value.saturating_add(response_delay);
    let corrected_initial_age = apparent_age.max(corrected_age_value);
    let resident_time = now.saturating_sub(response_time);
    corrected_initial_age.saturating_add(resident_time)
}

/// Parse an Age field value (delta-seconds; a bad one is ignored).
pub fn parse_age(v: Option<&[u8]>) -> u64 {
    v.and_then(crate::cache_control::parse_delta).unwrap_or(0)
}

/// How a stored response may be used for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usable {
    /// Fresh: serve it.
    Fresh,
    /// Stale, but the client accepts it (`max-stale`) and the response does
    /// not forbid it: serve it.
    StaleAllowed,
    /// Validate with the origin first (conditional request).
    Revalidate,
}

/// Decide how a stored response of freshness `lifetime` and current `age`
/// may answer a request (§4.2, §4.2.4, §5.2.1, §5.2.2).
///
/// - response `no-cache`: always validated;
/// - response `immutable` and fresh: served even when the client asks for a
///   reload (`no-cache`, `max-age=0`), which is what `immutable` is for;
/// - request `no-cache` (or `Pragma: no-cache` without Cache-Control, passed
///   in as `request.no_cache`), `max-age`, `min-fresh`: validated when not met;
/// - stale: served only if the request's `max-stale` covers the staleness and
///   the response has none of `must-revalidate`, `proxy-revalidate`,
///   `s-maxage` (which implies proxy-revalidate in a shared cache).
pub fn decide(lifetime: u64, age: u64, response: &CacheControl, request: &CacheControl) -> Usable {
    let fresh = lifetime > age;
    if response.no_cache {
        return Usable::Revalidate;
    }
    if fresh && response.immutable {
        return Usable::Fresh;
    }
    if request.no_cache {
        return Usable::Revalidate;
    }
    if let Some(m) = request.max_age {
        if age > m {
            return Usable::Revalidate;
        }
    }
    if let Some(mf) = request.min_fresh {
        if lifetime < age.saturating_add(mf) {
            return Usable::Revalidate;
        }
    }
    if fresh {
        return Usable::Fresh;
    }
    if response.must_revalidate || response.proxy_revalidate || response.s_maxage.is_some() {
        return Usable::Revalidate;
    }
    match request.max_stale {
        Some(ms) if age - lifetime <= ms => Usable::StaleAllowed,
        _ => Usable::Revalidate,
    }
}

/// Does RFC 9111 §4.2.4 let a shared cache serve this stored response
/// stale at all, whatever extension asks? Not with `no-cache`,
/// `must-revalidate`, `proxy-revalidate` or `s-maxage` in the response, nor
/// for a request that asks for a validated response (`no-cache`).
fn may_serve_stale(response: &CacheControl, request: &CacheControl) -> bool {
    !(response.no_cache
        || response.must_revalidate
        || response.proxy_revalidate
        || response.s_maxage.is_some()
        || request.no_cache)
}

/// What a stale stored response would be used for, by RFC 5861.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleUse {
    /// §4 `stale-if-error`: standing in for an error from the origin (a
    /// failed connection, a timeout, or a 500, 502, 503 or 504 answer).
    IfError,
    /// §3 `stale-while-revalidate`: answering now while it is revalidated
    /// in the background.
    WhileRevalidate,
}

/// May a response stored `lifetime` seconds fresh and `age` seconds old be
/// used stale for `why`? Never where RFC 9111 §4.2.4 forbids serving stale
/// (`may_serve_stale`). The window:
/// - `IfError`: the request's `stale-if-error` if it has one, else the
///   larger of the response's and `configured` (the operator's default; 0:
///   only where the response asks);
/// - `WhileRevalidate`: the larger of the response's
///   `stale-while-revalidate` and `configured`; never for a request that
///   limits the age or freshness it accepts (`max-age`, `min-fresh`): its
///   client asked for fresher than a stale answer.
pub fn stale_usable(
    why: StaleUse,
    (lifetime, age): (u64, u64),
    response: &CacheControl,
    request: &CacheControl,
    configured: u64,
) -> bool {
    if !may_serve_stale(response, request) {
        return false;
    }
    let window = match why {
        StaleUse::IfError => match request.stale_if_error {
            Some(w) => w,
            None => response.stale_if_error.unwrap_or(0).max(configured),
        },
        StaleUse::WhileRevalidate => {
            if request.max_age.is_some() || request.min_fresh.is_some() {
                return false;
            }
            response.stale_while_revalidate.unwrap_or(0).max(configured)
        }
    };
    window > 0 && age.saturating_sub(lifetime) <= window
}

/// Does a response to `method` with `status` invalidate the stored responses
/// for the target URI (§4.4)? Unsafe methods with a non-error answer do.
pub fn invalidates(method: Method, status: u16) -> bool {
    !method.is_safe() && (200..400).contains(&status)
}

/// Does any Vary value list `*`?
pub fn vary_has_star<'a>(vary: impl IntoIterator<Item = &'a [u8]>) -> bool {
    vary.into_iter().any(|v| list_items(v).any(|n| n == b"*"))
}

/// The secondary cache key of a request for a response with these Vary values
/// (§4.1): for each listed field, in order, `name:` then the request's values
/// of that field (all its lines, trimmed, joined by `,`) and a newline. Two
/// requests select the same stored variant exactly when their keys are equal.
/// Field names are compared case-insensitively and written lowercased.
/// `Accept-Encoding` is written as what it accepts and refuses
/// ([`crate::coding::normalized`]), so browsers that list the same codings
/// in another order or case share a variant (§4.1 allows normalizing).
pub fn vary_key<'a>(vary: impl IntoIterator<Item = &'a [u8]>, req: &RequestHead, data: &[u8], out: &mut Vec<u8>) {
    out.clear();
    for v in vary {
        for name in list_items(v) {
            out.extend(name.iter().map(|b| b.to_ascii_lowercase()));
            out.push(b':');
            if name.eq_ignore_ascii_case(b"accept-encoding") {
                // `=` marks a field that is there: an empty one accepts
                // only identity, an absent one any coding (RFC 9110 §12.5.3).
                let values = req.fields().iter().filter(|f| f.name(data).eq_ignore_ascii_case(name));
                if values.clone().next().is_some() {
                    out.push(b'=');
                    crate::coding::normalized(values.map(|f| f.value(data)), out);
                }
                out.push(b'\n');
                continue;
            }
            let mut first = true;
            for f in req.fields() {
                if f.name(data).eq_ignore_ascii_case(name) {
                    for item in list_items(f.value(data)) {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        out.extend_from_slice(item);
                    }
                }
            }
            out.push(b'\n');
        }
    }
}

/// Is this field one a 304 must not replace in a stored response (§3.2)?
/// Content-Length (the stored body's length stands) and hop-by-hop fields.
fn kept_from_stored(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"content-length") || is_hop_by_hop(name)
}

/// A stored head (`stored`, parsed as `stored_head`) updated with the fields
/// of a 304 response (`fresh`, parsed as `fresh_head`), into `out` (§3.2):
/// the stored status line, the stored fields the 304 does not carry, then the
/// 304's fields — except Content-Length, hop-by-hop fields and fields the
/// 304's Connection names — and the blank line. The stored Age is dropped in
/// any case: the refreshed response's age is the 304's (§4.2.3).
pub fn merge_304(
    stored: &[u8],
    stored_head: &ResponseHead,
    fresh: &[u8],
    fresh_head: &ResponseHead,
    out: &mut Vec<u8>,
) {
    out.clear();
    let status_line_end = memchr::memmem::find(stored, b"\r\n").map(|i| i + 2).unwrap_or(0);
    out.extend_from_slice(&stored[..status_line_end]);
    let replaced = |name: &[u8]| {
        !kept_from_stored(name)
            && !fresh_head.connection_has_bytes(fresh, name)
            && fresh_head
                .fields()
                .iter()
                .any(|f| f.name(fresh).eq_ignore_ascii_case(name))
    };
    for f in stored_head.fields() {
        let name = f.name(stored);
        if !replaced(name) && !name.eq_ignore_ascii_case(b"age") {
            out.extend_from_slice(f.line(stored));
            out.extend_from_slice(b"\r\n");
        }
    }
    for f in fresh_head.fields() {
        let name = f.name(fresh);
        if kept_from_stored(name) || fresh_head.connection_has_bytes(fresh, name) {
            continue;
        }
        out.extend_from_slice(f.line(fresh));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(v: &str) -> CacheControl {
        CacheControl::parse([v.as_bytes()])
    }

    fn store(status: u16, req: &str, resp: &str) -> Result<(), NotStorable> {
        storable(&StoreQuery {
            method: Method::Get,
            status,
            request: &cc(req),
            response: &cc(resp),
            authorization: false,
            expires: false,
            vary_star: false,
        })
    }

    #[test]
    fn storable_statuses_and_methods() {
        assert_eq!(store(200, "", ""), Ok(()), "200 is heuristically cacheable");
        assert_eq!(store(404, "", ""), Ok(()));
        assert_eq!(
            store(302, "", ""),
            Err(NotStorable::NoFreshness),
            "302 needs explicit freshness"
        );
        assert_eq!(store(302, "", "max-age=10"), Ok(()));
        assert_eq!(store(206, "", "max-age=10"), Err(NotStorable::Status));
        assert_eq!(store(304, "", "max-age=10"), Err(NotStorable::Status));
        assert_eq!(store(100, "", "max-age=10"), Err(NotStorable::Status));
        assert_eq!(store(299, "", "max-age=10"), Err(NotStorable::Status), "not understood");
        let q = StoreQuery {
            method: Method::Head,
            status: 200,
            request: &cc(""),
            response: &cc("max-age=5"),
            authorization: false,
            expires: false,
            vary_star: false,
        };
        assert_eq!(storable(&q), Err(NotStorable::Method));
        let q = StoreQuery {
            method: Method::Post,
            ..q
        };
        assert_eq!(storable(&q), Err(NotStorable::Method));
    }

    #[test]
    fn no_store_and_private() {
        assert_eq!(store(200, "no-store", ""), Err(NotStorable::NoStore));
        assert_eq!(store(200, "", "no-store, max-age=60"), Err(NotStorable::NoStore));
        assert_eq!(store(200, "", "private, max-age=60"), Err(NotStorable::Private));
        assert_eq!(
            store(200, "", "no-cache"),
            Ok(()),
            "no-cache may be stored (validated on use)"
        );
    }

    #[test]
    fn authorization_needs_explicit_permission() {
        let q = |resp: &str| {
            storable(&StoreQuery {
                method: Method::Get,
                status: 200,
                request: &cc(""),
                response: &cc(resp),
                authorization: true,
                expires: false,
                vary_star: false,
            })
        };
        assert_eq!(q("max-age=60"), Err(NotStorable::Authorization));
        assert_eq!(q("public"), Ok(()));
        assert_eq!(q("s-maxage=5"), Ok(()));
        assert_eq!(q("must-revalidate"), Ok(()));
    }

    #[test]
    fn expires_or_public_make_other_statuses_storable_and_vary_star_does_not() {
        let base = StoreQuery {
            method: Method::Get,
            status: 307,
            request: &CacheControl::default(),
            response: &CacheControl::default(),
            authorization: false,
            expires: true,
            vary_star: false,
        };
        assert_eq!(storable(&base), Ok(()));
        let public = cc("public");
        assert_eq!(
            storable(&StoreQuery {
                expires: false,
                response: &public,
                ..base
            }),
            Ok(())
        );
        assert_eq!(
            storable(&StoreQuery {
                vary_star: true,
                ..base
            }),
            Err(NotStorable::VaryStar)
        );
    }

    fn lifetime(resp: &str, expires: Option<&str>, date: Option<u64>, lm: Option<u64>, status: u16) -> u64 {
        freshness_lifetime(
            &LifetimeQuery {
                response: &cc(resp),
                expires: expires.map(str::as_bytes),
                date,
                last_modified: lm,
                status,
                response_time: 1_000_000,
            },
            &Heuristic::default(),
        )
    }

    #[test]
    fn lifetime_precedence() {
        // s-maxage beats max-age beats Expires beats the heuristic.
        assert_eq!(lifetime("max-age=60, s-maxage=5", None, None, None, 200), 5);
        assert_eq!(
            lifetime("max-age=60", Some("Thu, 01 Jan 1970 00:00:00 GMT"), None, Some(0), 200),
            60
        );
        // Expires - Date: Date 1,000,000 s; Expires 1,000,100 s after the epoch.
        let exp = String::from_utf8(
            crate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_100)).to_vec(),
        )
        .unwrap();
        assert_eq!(lifetime("", Some(&exp), Some(1_000_000), Some(0), 200), 100);
        // Without Date, the response time stands in for it.
        assert_eq!(lifetime("", Some(&exp), None, None, 200), 100);
        // Expires in the past, and invalid Expires ("0"), mean already expired.
        assert_eq!(lifetime("", Some(&exp), Some(2_000_000), None, 200), 0);
        assert_eq!(lifetime("", Some("0"), None, Some(0), 200), 0);
    }

    #[test]
    fn heuristic_from_last_modified() {
        // 10 % of (Date - Last-Modified).
        assert_eq!(lifetime("", None, Some(1_000_000), Some(1_000_000 - 5000), 200), 500);
        // Capped at a day.
        assert_eq!(lifetime("", None, Some(1_000_000), Some(0), 200), 86_400);
        // No Last-Modified: no heuristic.
        assert_eq!(lifetime("", None, Some(1_000_000), None, 200), 0);
        // Not heuristically cacheable (302) unless public.
        assert_eq!(lifetime("", None, Some(1_000_000), Some(1_000_000 - 5000), 302), 0);
        assert_eq!(
            lifetime("public", None, Some(1_000_000), Some(1_000_000 - 5000), 302),
            500
        );
        // Last-Modified in the future: zero, not negative.
        assert_eq!(lifetime("", None, Some(1_000_000), Some(2_000_000), 200), 0);
    }

    #[test]
    fn invalid_freshness_is_stale() {
        assert_eq!(lifetime("max-age=abc", None, None, Some(0), 200), 0);
        assert_eq!(lifetime("max-age=1, max-age=2", None, None, Some(0), 200), 0);
    }

    #[test]
    fn age_calculation() {
        // Fresh off the wire, no Age, no delay: age 0.
        assert_eq!(current_age(100, 0, 100, 100, 100), 0);
        // Resident for 30 s.
        assert_eq!(current_age(100, 0, 100, 100, 130), 30);
        // The origin's Age plus the response delay.
        assert_eq!(current_age(100, 10, 98, 100, 100), 12);
        // Apparent age from a Date in the past wins when larger.
        assert_eq!(current_age(50, 10, 100, 100, 100), 50);
        // A Date in the future gives no negative age.
        assert_eq!(current_age(500, 0, 100, 100, 100), 0);
        assert_eq!(parse_age(Some(b"42")), 42);
        assert_eq!(parse_age(Some(b"-1")), 0);
        assert_eq!(parse_age(None), 0);
    }

    #[test]
    fn an_upstream_age_counts_against_freshness() {
        // max-age=3600 arriving with Age: 7200 is stale on arrival.
        let age = current_age(1000, 7200, 1000, 1000, 1000);
        assert_eq!(age, 7200);
        assert_eq!(decide(3600, age, &cc("max-age=3600"), &cc("")), Usable::Revalidate);
        // Age plus the time in flight plus the time resident.
        assert_eq!(current_age(1000, 100, 998, 1001, 1031), 100 + 3 + 30);
        // Expires with the origin's Date skewed an hour ahead of this
        // clock: the lifetime is Expires − Date (skew-free), and Age counts.
        let date = 10_000 + 3600;
        let life = lifetime("", Some(&fmt_secs(date + 600)), Some(date), None, 200);
        assert_eq!(life, 600);
        assert_eq!(current_age(date, 0, 10_000, 10_000, 10_000), 0);
        assert_eq!(
            decide(life, current_age(date, 700, 10_000, 10_000, 10_000), &cc(""), &cc("")),
            Usable::Revalidate
        );
        // ... and an hour behind: the apparent age (response time − Date) counts.
        let date = 10_000 - 3600;
        let life = lifetime("", Some(&fmt_secs(date + 7200)), Some(date), None, 200);
        assert_eq!(life, 7200);
        assert_eq!(current_age(date, 0, 10_000, 10_000, 10_000), 3600);
    }

    fn fmt_secs(t: u64) -> String {
        String::from_utf8(crate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)).to_vec())
            .unwrap()
    }

    #[test]
    fn decide_fresh_and_stale() {
        let none = CacheControl::default();
        assert_eq!(decide(60, 10, &none, &none), Usable::Fresh);
        assert_eq!(
            decide(60, 60, &none, &none),
            Usable::Revalidate,
            "age == lifetime is stale"
        );
        assert_eq!(decide(0, 0, &none, &none), Usable::Revalidate);
    }

    #[test]
    fn decide_response_directives() {
        let none = CacheControl::default();
        assert_eq!(decide(60, 1, &cc("no-cache"), &none), Usable::Revalidate);
        // must-revalidate, proxy-revalidate and s-maxage forbid stale even
        // when the client would accept it.
        let any_stale = cc("max-stale");
        assert_eq!(decide(10, 20, &none, &any_stale), Usable::StaleAllowed);
        for r in ["must-revalidate", "proxy-revalidate", "s-maxage=10"] {
            assert_eq!(decide(10, 20, &cc(r), &any_stale), Usable::Revalidate, "{r}");
        }
    }

    #[test]
    fn decide_request_directives() {
        let none = CacheControl::default();
        assert_eq!(decide(60, 10, &none, &cc("no-cache")), Usable::Revalidate);
        assert_eq!(decide(60, 10, &none, &cc("max-age=5")), Usable::Revalidate);
        assert_eq!(decide(60, 10, &none, &cc("max-age=10")), Usable::Fresh);
        assert_eq!(decide(60, 10, &none, &cc("min-fresh=50")), Usable::Fresh);
        assert_eq!(decide(60, 10, &none, &cc("min-fresh=51")), Usable::Revalidate);
        assert_eq!(decide(10, 15, &none, &cc("max-stale=5")), Usable::StaleAllowed);
        assert_eq!(decide(10, 16, &none, &cc("max-stale=5")), Usable::Revalidate);
        // only-if-cached does not change the decision; the caller answers 504
        // instead of revalidating.
        assert_eq!(decide(10, 16, &none, &cc("only-if-cached")), Usable::Revalidate);
    }

    fn swr(lifetime: u64, age: u64, resp: &CacheControl, req: &CacheControl, configured: u64) -> bool {
        stale_usable(StaleUse::WhileRevalidate, (lifetime, age), resp, req, configured)
    }

    fn sie(lifetime: u64, age: u64, resp: &CacheControl, req: &CacheControl, configured: u64) -> bool {
        stale_usable(StaleUse::IfError, (lifetime, age), resp, req, configured)
    }

    #[test]
    fn stale_while_revalidate_windows() {
        let none = CacheControl::default();
        let asks = cc("max-age=10, stale-while-revalidate=10");
        assert!(!swr(10, 20, &none, &none, 0), "off unless asked for");
        assert!(swr(10, 20, &asks, &none, 0));
        assert!(!swr(10, 21, &asks, &none, 0), "past the window");
        assert!(swr(10, 30, &asks, &none, 20), "the operator's is larger");
        assert!(swr(10, 15, &none, &none, 5));
        for forbids in ["no-cache", "must-revalidate", "proxy-revalidate", "s-maxage=10"] {
            let r = cc(&format!("max-age=10, stale-while-revalidate=10, {forbids}"));
            assert!(!swr(10, 15, &r, &none, 0), "{forbids}");
        }
        for asks_fresher in ["no-cache", "max-age=5", "min-fresh=1"] {
            assert!(!swr(10, 15, &asks, &cc(asks_fresher), 0), "{asks_fresher}");
        }
    }

    #[test]
    fn stale_if_error_windows() {
        let none = CacheControl::default();
        // Off unless asked for: by the response, the request or the operator.
        assert!(!sie(10, 20, &none, &none, 0));
        assert!(sie(10, 20, &cc("max-age=10, stale-if-error=10"), &none, 0));
        assert!(!sie(10, 21, &cc("max-age=10, stale-if-error=10"), &none, 0));
        assert!(sie(10, 20, &none, &none, 10));
        assert!(!sie(10, 21, &none, &none, 10));
        // The larger of response and operator; the request's own overrides both.
        assert!(sie(10, 40, &cc("stale-if-error=30"), &none, 10));
        assert!(!sie(10, 40, &cc("stale-if-error=30"), &cc("stale-if-error=5"), 10));
        assert!(sie(10, 40, &none, &cc("stale-if-error=30"), 0));
        // A bad value asks for nothing.
        assert!(!sie(10, 20, &cc("stale-if-error=x"), &none, 0));
        // Never where serving stale is forbidden.
        for r in ["no-cache", "must-revalidate", "proxy-revalidate", "s-maxage=10"] {
            let resp = cc(&format!("{r}, stale-if-error=100"));
            assert!(!sie(10, 20, &resp, &none, 100), "{r}");
        }
        assert!(!sie(10, 20, &cc("stale-if-error=100"), &cc("no-cache"), 100));
    }

    #[test]
    fn immutable_skips_reloads_while_fresh_only() {
        let imm = cc("max-age=60, immutable");
        assert_eq!(decide(60, 10, &imm, &cc("no-cache")), Usable::Fresh);
        assert_eq!(decide(60, 10, &imm, &cc("max-age=0")), Usable::Fresh);
        assert_eq!(decide(60, 70, &imm, &CacheControl::default()), Usable::Revalidate);
    }

    #[test]
    fn invalidation_by_unsafe_methods() {
        assert!(invalidates(Method::Post, 200));
        assert!(invalidates(Method::Delete, 204));
        assert!(invalidates(Method::Put, 301));
        assert!(!invalidates(Method::Post, 500), "errors do not invalidate");
        assert!(!invalidates(Method::Post, 404));
        assert!(!invalidates(Method::Get, 200));
        assert!(!invalidates(Method::Head, 200));
    }

    #[test]
    fn vary_keys() {
        let a = b"GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\nAccept-Language: en\r\n\r\n";
        let b = b"GET / HTTP/1.1\r\nHost: h\r\naccept-encoding:  gzip \r\n\r\n";
        let c = b"GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: br\r\n\r\n";
        let d = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let key = |data: &[u8], vary: &[u8]| {
            let mut out = Vec::new();
            vary_key([vary], &RequestHead::parsed(data), data, &mut out);
            out
        };
        assert_eq!(key(a, b"Accept-Encoding"), b"accept-encoding:=gzip\n");
        assert_eq!(key(a, b"accept-encoding"), key(b, b"Accept-Encoding"));
        // Accept-Encoding by what it accepts: order, case and weights' order
        // left out; an empty field (identity only) is not an absent one.
        let reordered = b"GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: BR;q=0.9, deflate,gzip\r\n\r\n";
        let browser = b"GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n";
        assert_eq!(key(reordered, b"Accept-Encoding"), key(browser, b"Accept-Encoding"));
        let empty = b"GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding:\r\n\r\n";
        assert_eq!(key(empty, b"Accept-Encoding"), b"accept-encoding:=\n");
        assert_ne!(key(a, b"Accept-Encoding"), key(c, b"Accept-Encoding"));
        assert_ne!(
            key(a, b"Accept-Encoding"),
            key(d, b"Accept-Encoding"),
            "absent differs from present"
        );
        assert_eq!(key(d, b"Accept-Encoding"), b"accept-encoding:\n");
        // Several names; a name the request lacks.
        assert_eq!(
            key(a, b"Accept-Language, X-None"),
            b"accept-language:en\nx-none:\n".to_vec()
        );
        // Multiple field lines combine like one list.
        let m = b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\nX: b, c\r\n\r\n";
        let n = b"GET / HTTP/1.1\r\nHost: h\r\nX: a, b,c\r\n\r\n";
        assert_eq!(key(m, b"X"), key(n, b"X"));
        assert!(vary_has_star([&b"Accept, *"[..]]));
        assert!(!vary_has_star([&b"Accept"[..]]));
    }

    #[test]
    fn merging_a_304() {
        let stored = b"HTTP/1.1 200 OK\r\nDate: old\r\nETag: \"v1\"\r\nAge: 70\r\nCache-Control: max-age=10\r\nContent-Length: 5\r\nX-Keep: yes\r\n\r\n";
        let fresh = b"HTTP/1.1 304 Not Modified\r\nDate: new\r\nCache-Control: max-age=99\r\nContent-Length: 0\r\nConnection: close, X-Hop\r\nX-Hop: no\r\nKeep-Alive: timeout=5\r\n\r\n";
        let mut out = Vec::new();
        merge_304(
            stored,
            &ResponseHead::parsed(stored),
            fresh,
            &ResponseHead::parsed(fresh),
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 5\r\nX-Keep: yes\r\nDate: new\r\nCache-Control: max-age=99\r\n\r\n"
        );
        // The result is a valid head again.
        let h = ResponseHead::parsed(text.as_bytes());
        assert_eq!(h.status(), 200);
        assert_eq!(h.content_length(), Some(5));
    }
}
