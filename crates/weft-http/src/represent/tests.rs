//! Unit tests of [`answer`], and property tests that compare it with a model
//! written from the text of RFC 9110 §13.2.2 (precondition order), §13.1.5
//! (If-Range) and §14 (ranges), over generated requests.

use super::*;
use crate::fmt_http_date;
use proptest::prelude::*;
use std::time::{Duration, UNIX_EPOCH};

const ETAG: &[u8] = b"\"abc-1-2\"";
const MTIME: u64 = 1_000_000;

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn date(secs: u64) -> Vec<u8> {
    fmt_http_date(t(secs)).to_vec()
}

fn file(len: u64) -> Representation<'static> {
    Representation {
        etag: Some(ETAG),
        last_modified: Some(t(MTIME)),
        len,
    }
}

/// [`file`] of 12 bytes without a Last-Modified date.
fn undated() -> Representation<'static> {
    Representation {
        last_modified: None,
        ..file(12)
    }
}

fn get(req: Conditions<'_>) -> Answer {
    answer(Method::Get, &req, &file(12), Role::Origin)
}

fn ranged(range: &[u8]) -> Conditions<'_> {
    Conditions {
        range: Some(range),
        ..Conditions::default()
    }
}

#[test]
fn plain_get_and_head() {
    assert_eq!(get(Conditions::default()), Answer::Full { len: 12, body: true });
    let head = answer(Method::Head, &Conditions::default(), &file(12), Role::Origin);
    assert_eq!(head, Answer::Full { len: 12, body: false });
    assert_eq!(head.content_length(), Some(12));
    assert_eq!(head.body(), None);
    assert!(head.carries_validators());
}

#[test]
fn ranges() {
    let a = get(ranged(b"bytes=2-4"));
    assert_eq!(
        a,
        Answer::Partial {
            start: 2,
            end: 5,
            len: 12
        }
    );
    assert_eq!(a.status(), 206);
    assert_eq!(a.body(), Some(2..5));
    assert_eq!(a.content_length(), Some(3));
    assert_eq!(
        a.content_range(),
        Some(ContentRange::Bytes {
            first: 2,
            last: 4,
            complete: 12
        })
    );
    assert_eq!(get(ranged(b"bytes=-5")).body(), Some(7..12));
    assert_eq!(get(ranged(b"bytes=10-")).body(), Some(10..12));
    let none = get(ranged(b"bytes=12-"));
    assert_eq!(none, Answer::RangeNotSatisfiable { len: 12 });
    assert_eq!(none.content_range(), Some(ContentRange::Unsatisfied { complete: 12 }));
    assert_eq!((none.body(), none.content_length()), (None, None));
    assert!(!none.carries_validators());
    // Several ranges, overlapping or not: the whole representation.
    assert_eq!(get(ranged(b"bytes=0-5,3-")), Answer::Full { len: 12, body: true });
    // HEAD ignores Range.
    let head = answer(Method::Head, &ranged(b"bytes=2-4"), &file(12), Role::Origin);
    assert_eq!(head, Answer::Full { len: 12, body: false });
}

#[test]
fn if_range() {
    let old = date(MTIME - 1);
    let now = date(MTIME);
    let with = |ir: &'static [u8]| Conditions {
        if_range: Some(ir),
        range: Some(b"bytes=0-0"),
        ..Conditions::default()
    };
    assert_eq!(get(with(ETAG)).status(), 206);
    assert_eq!(get(with(b"\"other\"")).status(), 200);
    assert_eq!(get(with(b"W/\"abc-1-2\"")).status(), 200, "If-Range compares strongly");
    let by_date = |d: &[u8]| {
        let c = Conditions {
            if_range: Some(d),
            range: Some(b"bytes=0-0"),
            ..Conditions::default()
        };
        get(c).status()
    };
    assert_eq!(by_date(&now), 206);
    assert_eq!(by_date(&old), 200);
    // If-Range without Range changes nothing.
    let c = Conditions {
        if_range: Some(b"\"other\""),
        ..Conditions::default()
    };
    assert_eq!(get(c).status(), 200);
    // A validator the representation lacks never matches.
    let epoch = date(0);
    let c = Conditions {
        if_range: Some(&epoch),
        range: Some(b"bytes=0-0"),
        ..Conditions::default()
    };
    assert_eq!(answer(Method::Get, &c, &undated(), Role::Cache).status(), 200);
}

#[test]
fn preconditions() {
    let inm = Conditions {
        if_none_match: Some(ETAG),
        ..Conditions::default()
    };
    let a = get(inm);
    assert_eq!(a, Answer::NotModified);
    assert_eq!((a.body(), a.content_length(), a.content_range()), (None, None, None));
    assert!(a.carries_validators());
    assert_eq!(
        answer(Method::Post, &inm, &file(12), Role::Origin),
        Answer::PreconditionFailed
    );
    // 412 from If-Match comes before any 304.
    let both = Conditions {
        if_match: Some(b"\"nope\""),
        if_none_match: Some(ETAG),
        ..Conditions::default()
    };
    assert_eq!(get(both), Answer::PreconditionFailed);
    // A failed precondition wins over Range.
    let d = date(MTIME);
    let ims_and_range = Conditions {
        if_modified_since: Some(&d),
        range: Some(b"bytes=100-"),
        ..Conditions::default()
    };
    assert_eq!(get(ims_and_range), Answer::NotModified);
}

#[test]
fn a_cache_ignores_if_none_match_without_a_tag() {
    let untagged = Representation { etag: None, ..file(12) };
    let d = date(MTIME);
    let c = Conditions {
        if_none_match: Some(b"\"x\""),
        if_modified_since: Some(&d),
        ..Conditions::default()
    };
    assert_eq!(answer(Method::Get, &c, &untagged, Role::Cache), Answer::NotModified);
    assert_eq!(
        answer(Method::Get, &c, &untagged, Role::Origin),
        Answer::Full { len: 12, body: true },
        "an origin lets If-None-Match (no tag matches) overrule If-Modified-Since"
    );
    let star = Conditions {
        if_none_match: Some(b"*"),
        ..Conditions::default()
    };
    assert_eq!(answer(Method::Get, &star, &untagged, Role::Origin), Answer::NotModified);
    assert_eq!(answer(Method::Get, &star, &untagged, Role::Cache).status(), 200);
    // If-Match without a tag: only `*` holds.
    let im = |v: &'static [u8]| Conditions {
        if_match: Some(v),
        ..Conditions::default()
    };
    assert_eq!(answer(Method::Get, &im(b"*"), &untagged, Role::Cache).status(), 200);
    assert_eq!(answer(Method::Get, &im(b"\"x\""), &untagged, Role::Cache).status(), 412);
    // Without a date, the date conditions are ignored.
    let old = date(1);
    let ius = Conditions {
        if_unmodified_since: Some(&old),
        if_modified_since: Some(&d),
        ..Conditions::default()
    };
    assert_eq!(answer(Method::Get, &ius, &undated(), Role::Cache).status(), 200);
    assert_eq!(answer(Method::Get, &ius, &file(12), Role::Cache).status(), 412);
}

#[test]
fn conditions_from_a_head() {
    let data = b"GET / HTTP/1.1\r\nHost: h\r\nrange: bytes=1-2\r\nIf-Match: \"a\"\r\nIF-RANGE: \"b\"\r\n\
If-None-Match:  \"c\" \r\nIf-Modified-Since: x\r\nIf-Unmodified-Since: y\r\nRange: bytes=3-4\r\n\r\n";
    let mut head = RequestHead::new();
    let n = head.parse(data, &crate::Limits::default()).unwrap().unwrap();
    let c = Conditions::from_head(&head, &data[..n]);
    let want = Conditions {
        if_match: Some(b"\"a\""),
        if_unmodified_since: Some(b"y"),
        if_none_match: Some(b"\"c\""),
        if_modified_since: Some(b"x"),
        if_range: Some(b"\"b\""),
        range: Some(b"bytes=1-2"),
    };
    assert_eq!(c, want, "the first of each, trimmed, names in any case");
    for name in [
        "if-match",
        "if-unmodified-since",
        "if-none-match",
        "if-modified-since",
        "if-range",
        "range",
    ] {
        assert!(head.header(&data[..n], name).is_some(), "{name}");
    }
    assert_eq!(c.range, head.header(&data[..n], "range"));
}

// ---- The model ------------------------------------------------------------

/// A Range spec as generated: the model knows what each one means.
#[derive(Clone, Debug)]
enum Spec {
    /// `a-b`
    FromTo(u64, u64),
    /// `a-`
    From(u64),
    /// `-n`
    Suffix(u64),
    /// Not a byte-range-spec: the whole field is ignored.
    Garbage,
}

impl Spec {
    fn text(&self) -> String {
        match self {
            Spec::FromTo(a, b) => format!("{a}-{b}"),
            Spec::From(a) => format!("{a}-"),
            Spec::Suffix(n) => format!("-{n}"),
            Spec::Garbage => "x-1".to_string(),
        }
    }

    /// §14.1.2: the satisfiable part of this spec, as first..=last, if any.
    fn satisfiable(&self, len: u64) -> Option<(u64, u64)> {
        match *self {
            Spec::FromTo(a, b) if a < len => Some((a, b.min(len - 1))),
            Spec::From(a) if a < len => Some((a, len - 1)),
            Spec::Suffix(n) if n > 0 && len > 0 => Some((len - n.min(len), len - 1)),
            _ => None,
        }
    }
}

/// A generated request: each field absent or one of a few values that hit
/// every branch (matching, not matching, `*`, weak, lists, garbage, dates
/// before / at / after the modification time).
#[derive(Clone, Debug)]
struct Req {
    method: Method,
    if_match: Option<Vec<u8>>,
    if_unmodified_since: Option<Vec<u8>>,
    if_none_match: Option<Vec<u8>>,
    if_modified_since: Option<Vec<u8>>,
    if_range: Option<Vec<u8>>,
    range: Option<Vec<Spec>>,
}

impl Req {
    fn range_text(&self) -> Option<Vec<u8>> {
        let specs = self.range.as_ref()?;
        let list: Vec<String> = specs.iter().map(Spec::text).collect();
        Some(format!("bytes={}", list.join(",")).into_bytes())
    }
}

fn tag_list() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(ETAG.to_vec()),
        Just(b"W/\"abc-1-2\"".to_vec()),
        Just(b"\"other\"".to_vec()),
        Just(b"\"other\", \"abc-1-2\"".to_vec()),
        Just(b"*".to_vec()),
        Just(b"garbage".to_vec()),
    ]
}

fn a_date() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (MTIME - 2..=MTIME + 2).prop_map(date),
        Just(date(0)),
        Just(b"not a date".to_vec()),
    ]
}

fn spec(len: u64) -> impl Strategy<Value = Spec> {
    let n = len + 3;
    prop_oneof![
        4 => (0..n, 0..n).prop_map(|(a, b)| Spec::FromTo(a.min(b), a.max(b))),
        1 => (0..n, 0..n).prop_map(|(a, b)| Spec::FromTo(a, b)),
        2 => (0..n).prop_map(Spec::From),
        2 => (0..n).prop_map(Spec::Suffix),
        1 => Just(Spec::Garbage),
    ]
}

fn request(len: u64) -> impl Strategy<Value = Req> {
    let method = prop_oneof![
        4 => Just(Method::Get),
        2 => Just(Method::Head),
        1 => Just(Method::Post),
        1 => Just(Method::Put),
    ];
    let if_range = prop_oneof![tag_list(), a_date()];
    (
        method,
        proptest::option::weighted(0.2, tag_list()),
        proptest::option::weighted(0.2, a_date()),
        proptest::option::weighted(0.3, tag_list()),
        proptest::option::weighted(0.3, a_date()),
        proptest::option::weighted(0.3, if_range),
        proptest::option::weighted(0.7, proptest::collection::vec(spec(len), 1..4)),
    )
        .prop_map(|(method, im, ius, inm, ims, ir, range)| Req {
            method,
            if_match: im,
            if_unmodified_since: ius,
            if_none_match: inm,
            if_modified_since: ims,
            if_range: ir,
            range,
        })
}

fn representation() -> impl Strategy<Value = (bool, bool, u64)> {
    (proptest::bool::weighted(0.8), proptest::bool::weighted(0.8), 0..20u64)
}

fn secs_of(v: &[u8]) -> Option<u64> {
    crate::parse_http_date(v).map(crate::date::unix_secs)
}

/// Entity tags of a list field, `None` for `*`; garbage ends the list.
fn tags(v: &[u8]) -> Option<Vec<(bool, Vec<u8>)>> {
    if v == b"*" {
        return None;
    }
    let text = std::str::from_utf8(v).unwrap();
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let (weak, tag) = match item.strip_prefix("W/") {
            Some(t) => (true, t),
            None => (false, item),
        };
        if !tag.starts_with('"') {
            break;
        }
        out.push((weak, tag.as_bytes().to_vec()));
    }
    Some(out)
}

/// RFC 9110 §13.2.2, §13.1.5 and §14, as the text reads, plus weft's two
/// documented choices (several ranges → 200; a cache ignores If-None-Match
/// when it holds no tag).
fn model(r: &Req, etag: Option<&[u8]>, mtime: Option<u64>, len: u64, role: Role) -> Answer {
    let get_or_head = matches!(r.method, Method::Get | Method::Head);
    // Step 1: If-Match. `*` holds when a representation exists; a list holds
    // when one tag matches strongly (both strong, same opaque tag).
    if let Some(v) = &r.if_match {
        let holds = match tags(v) {
            None => true,
            Some(list) => list.iter().any(|(weak, t)| !weak && Some(&t[..]) == etag),
        };
        if !holds {
            return Answer::PreconditionFailed;
        }
    } else if let (Some(v), Some(m)) = (&r.if_unmodified_since, mtime) {
        // Step 2: If-Unmodified-Since, only without If-Match; ignored when
        // invalid or when there is no modification date (§13.1.4).
        if let Some(d) = secs_of(v) {
            if m > d {
                return Answer::PreconditionFailed;
            }
        }
    }
    // Step 3: If-None-Match: false when any tag matches weakly or it is `*`.
    let inm = match (etag, role) {
        (None, Role::Cache) => None,
        _ => r.if_none_match.as_ref(),
    };
    if let Some(v) = inm {
        let strip = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        let matched = match tags(v) {
            None => true,
            Some(list) => etag.is_some_and(|e| list.iter().any(|(_, t)| *t == strip(e))),
        };
        if matched {
            return if get_or_head {
                Answer::NotModified
            } else {
                Answer::PreconditionFailed
            };
        }
    } else if let (true, Some(v), Some(m)) = (get_or_head, &r.if_modified_since, mtime) {
        // Step 4: If-Modified-Since, GET/HEAD only, without If-None-Match.
        if secs_of(v).is_some_and(|d| m <= d) {
            return Answer::NotModified;
        }
    }
    let full = Answer::Full {
        len,
        body: r.method != Method::Head,
    };
    // Step 5: Range, GET only, if If-Range (when present) holds.
    if r.method != Method::Get {
        return full;
    }
    let Some(specs) = &r.range else { return full };
    if let Some(v) = &r.if_range {
        let holds = if v.starts_with(b"\"") {
            Some(&v[..]) == etag
        } else if v.starts_with(b"W/") {
            false
        } else {
            matches!((secs_of(v), mtime), (Some(d), Some(m)) if d == m)
        };
        if !holds {
            return full;
        }
    }
    // §14.2: an invalid field is ignored.
    if specs
        .iter()
        .any(|s| matches!(s, Spec::Garbage) || matches!(s, Spec::FromTo(a, b) if b < a))
    {
        return full;
    }
    let satisfiable: Vec<(u64, u64)> = specs.iter().filter_map(|s| s.satisfiable(len)).collect();
    match (specs.len(), satisfiable.first()) {
        (_, None) => Answer::RangeNotSatisfiable { len },
        (1, Some(&(first, last))) => Answer::Partial {
            start: first,
            end: last + 1,
            len,
        },
        _ => full,
    }
}

fn run(r: &Req, rep: &Representation<'_>, role: Role) -> Answer {
    let range = r.range_text();
    let c = Conditions {
        if_match: r.if_match.as_deref(),
        if_unmodified_since: r.if_unmodified_since.as_deref(),
        if_none_match: r.if_none_match.as_deref(),
        if_modified_since: r.if_modified_since.as_deref(),
        if_range: r.if_range.as_deref(),
        range: range.as_deref(),
    };
    answer(r.method, &c, rep, role)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn agrees_with_the_rfc((has_tag, has_date, len) in representation(), r in request(19), cache in any::<bool>()) {
        let etag = has_tag.then_some(ETAG);
        let mtime = has_date.then_some(MTIME);
        let rep = Representation { etag, last_modified: mtime.map(t), len };
        let role = if cache { Role::Cache } else { Role::Origin };
        prop_assert_eq!(run(&r, &rep, role), model(&r, etag, mtime, len, role));
    }

    #[test]
    fn answers_are_consistent((has_tag, has_date, len) in representation(), r in request(19)) {
        let rep = Representation {
            etag: has_tag.then_some(ETAG),
            last_modified: has_date.then(|| t(MTIME)),
            len,
        };
        let a = run(&r, &rep, Role::Origin);
        match a {
            // 304 never carries a body nor a length; it does carry validators.
            Answer::NotModified => {
                prop_assert!(matches!(r.method, Method::Get | Method::Head));
                prop_assert_eq!((a.body(), a.content_length()), (None, None));
                prop_assert!(a.carries_validators());
            }
            Answer::Partial { start, end, len: l } => {
                prop_assert_eq!(r.method, Method::Get);
                prop_assert!(start < end && end <= len && l == len);
                prop_assert_eq!(a.content_length(), Some(end - start));
                prop_assert_eq!(a.content_range(), Some(ContentRange::Bytes { first: start, last: end - 1, complete: len }));
            }
            Answer::Full { len: l, body } => {
                prop_assert_eq!(l, len);
                prop_assert_eq!(body, r.method != Method::Head);
                prop_assert_eq!(a.body(), body.then_some(0..len));
            }
            Answer::RangeNotSatisfiable { len: l } => {
                prop_assert_eq!(r.method, Method::Get);
                prop_assert_eq!(l, len);
                prop_assert_eq!(a.body(), None);
            }
            Answer::PreconditionFailed => prop_assert_eq!(a.body(), None),
        }
    }

    #[test]
    fn a_failed_if_match_is_412_whatever_follows(r in request(19), len in 0..20u64) {
        let r = Req { if_match: Some(b"\"nope\"".to_vec()), ..r };
        prop_assert_eq!(run(&r, &file(len), Role::Origin), Answer::PreconditionFailed);
    }

    #[test]
    fn head_is_get_without_range_or_body(r in request(19), len in 0..20u64) {
        let as_head = Req { method: Method::Head, ..r.clone() };
        let as_plain_get = Req { method: Method::Get, range: None, ..r };
        let head = run(&as_head, &file(len), Role::Origin);
        let get = run(&as_plain_get, &file(len), Role::Origin);
        let want = match get {
            Answer::Full { len, .. } => Answer::Full { len, body: false },
            other => other,
        };
        prop_assert_eq!(head, want);
    }

    #[test]
    fn one_satisfiable_range_is_206_with_those_bytes(len in 1..50u64, a in 0..60u64, b in 0..60u64) {
        let (a, b) = (a.min(b), a.max(b));
        let v = format!("bytes={a}-{b}");
        let got = get_len(v.as_bytes(), len);
        if a < len {
            prop_assert_eq!(got, Answer::Partial { start: a, end: b.min(len - 1) + 1, len });
        } else {
            prop_assert_eq!(got, Answer::RangeNotSatisfiable { len });
        }
        // Suffix and open-ended forms.
        let suffix = get_len(format!("bytes=-{b}").as_bytes(), len);
        if b == 0 {
            prop_assert_eq!(suffix, Answer::RangeNotSatisfiable { len });
        } else {
            prop_assert_eq!(suffix.body(), Some(len - b.min(len)..len));
        }
        let open = get_len(format!("bytes={a}-").as_bytes(), len);
        prop_assert_eq!(open.body(), (a < len).then_some(a..len));
        // Two ranges, overlapping or not, satisfiable or not: never a 206.
        let two = get_len(format!("bytes={a}-{b},0-").as_bytes(), len);
        prop_assert_eq!(two, Answer::Full { len, body: true });
    }
}

fn get_len(range: &[u8], len: u64) -> Answer {
    answer(Method::Get, &ranged(range), &file(len), Role::Origin)
}

#[test]
fn a_cache_forwards_if_match_and_if_unmodified_since() {
    assert!(Conditions::default().cache_may_answer());
    let inm = Conditions {
        if_none_match: Some(ETAG),
        if_modified_since: Some(b"x"),
        range: Some(b"bytes=0-1"),
        ..Conditions::default()
    };
    assert!(inm.cache_may_answer());
    for c in [
        Conditions {
            if_match: Some(b"*"),
            ..Conditions::default()
        },
        Conditions {
            if_unmodified_since: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            ..Conditions::default()
        },
    ] {
        assert!(!c.cache_may_answer());
    }
}
