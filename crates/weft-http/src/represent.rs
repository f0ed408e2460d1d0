//! Answering a request from a representation the server already holds: a
//! file (`weft serve`) or a stored response (`weft proxy`'s cache hits).
//!
//! [`answer`] is the whole decision, with no I/O and no allocation: given the
//! request's method and its conditional and range fields ([`Conditions`]),
//! and the representation's validators and length ([`Representation`]), it
//! returns an [`Answer`]: 200, 206, 304, 412 or 416, the bytes of the
//! representation to send, and what the head carries (validators,
//! `Content-Length`, `Content-Range`). The caller writes the head with
//! [`crate::encode`] and sends the bytes its own way (sendfile, shared
//! segments).
//!
//! The order is RFC 9110 §13.2.2: If-Match, If-Unmodified-Since,
//! If-None-Match, If-Modified-Since (see [`crate::conditional`]), then, for a
//! GET whose preconditions pass, If-Range (§13.1.5) and Range (§14, see
//! [`crate::range`]). Only one range is ever served: several are answered
//! with the whole representation (200), which the RFC allows and which avoids
//! multipart bodies.

use crate::conditional::{self, Precondition, Preconditions};
use crate::encode::ContentRange;
use crate::range::{evaluate_range, RangeOutcome};
use crate::{Method, RequestHead};
use std::ops::Range;
use std::time::SystemTime;

/// The fields of a request that decide an answer from a representation,
/// as sent (first occurrence of each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conditions<'a> {
    /// If-Match.
    pub if_match: Option<&'a [u8]>,
    /// If-Unmodified-Since.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// If-None-Match.
    pub if_none_match: Option<&'a [u8]>,
    /// If-Modified-Since.
    pub if_modified_since: Option<&'a [u8]>,
    /// If-Range.
    pub if_range: Option<&'a [u8]>,
    /// Range.
    pub range: Option<&'a [u8]>,
}

impl<'a> Conditions<'a> {
    /// Collect the six fields from a parsed head (`data` is the buffer it was
    /// parsed from) in one pass over its fields, where looking each up with
    /// [`RequestHead::header`] would scan them six times.
    pub fn from_head(head: &RequestHead, data: &'a [u8]) -> Conditions<'a> {
        let mut c = Conditions::default();
        for f in head.fields() {
            let name = f.name(data);
            let slot = match name.len() {
                5 if name.eq_ignore_ascii_case(b"range") => &mut c.range,
                8 if name.eq_ignore_ascii_case(b"if-match") => &mut c.if_match,
                8 if name.eq_ignore_ascii_case(b"if-range") => &mut c.if_range,
                13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut c.if_none_match,
                17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut c.if_modified_since,
                19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => &mut c.if_unmodified_since,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(f.value(data));
            }
        }
        c
    }

    /// Whether a cache may answer this request from a stored response.
    /// Not when it carries If-Match or If-Unmodified-Since: RFC 9111 §4.3.2
    /// says those are not for a cache to evaluate (they guard a change of
    /// state at the origin, and the stored response may not be what the
    /// origin holds now). Such a request goes to the origin, whose answer is
    /// relayed (and stored) as usual; [`answer`] with [`Role::Cache`] is only
    /// for requests this allows.
    #[inline]
    pub fn cache_may_answer(&self) -> bool {
        self.if_match.is_none() && self.if_unmodified_since.is_none()
    }

    fn preconditions(&self) -> Preconditions<'a> {
        Preconditions {
            if_match: self.if_match,
            if_unmodified_since: self.if_unmodified_since,
            if_none_match: self.if_none_match,
            if_modified_since: self.if_modified_since,
        }
    }
}

/// What the server knows of the representation it would send with 200.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Representation<'a> {
    /// The entity tag, with its quotes (and `W/` if weak), if it has one.
    pub etag: Option<&'a [u8]>,
    /// The modification date, if it has one (compared to the second).
    pub last_modified: Option<SystemTime>,
    /// Length in bytes.
    pub len: u64,
}

/// Who answers: the two differ only where the representation lacks an
/// entity tag (see [`crate::conditional`]'s `check`): an origin evaluates
/// If-None-Match against "no tag", a cache ignores the field and decides on
/// If-Modified-Since. A file served by `weft serve` always has both
/// validators, so for it the two agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The origin server of the representation (`weft serve`).
    Origin,
    /// A cache answering from a stored response (`weft proxy`), for a
    /// request [`Conditions::cache_may_answer`] allows.
    Cache,
}

/// The answer to a request for a representation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200: the whole representation, `Content-Length: len`; its bytes follow
    /// the head unless `body` is false (HEAD).
    Full {
        /// Length of the representation.
        len: u64,
        /// Whether the body is sent (false for HEAD).
        body: bool,
    },
    /// 206: bytes `start..end` (end exclusive) of a representation of `len`
    /// bytes, with `Content-Range: bytes start-(end-1)/len`. Only for GET.
    Partial {
        /// First byte sent.
        start: u64,
        /// One past the last byte sent.
        end: u64,
        /// Length of the whole representation.
        len: u64,
    },
    /// 304: no body and no `Content-Length`; the head carries only what
    /// RFC 9110 §15.4.5 lists of the fields a 200 would have (written with
    /// [`crate::respond::not_modified`]).
    NotModified,
    /// 412: the representation is not sent; the caller's own short answer
    /// ([`crate::respond::simple`]: `Date`, `Server`, a text body, no `Age`).
    PreconditionFailed,
    /// 416: no range is satisfiable; `Content-Range: bytes */len` on the
    /// caller's own short answer, as for 412.
    RangeNotSatisfiable {
        /// Length of the whole representation.
        len: u64,
    },
}

impl Answer {
    /// The status code.
    #[inline]
    pub fn status(self) -> u16 {
        match self {
            Answer::Full { .. } => 200,
            Answer::Partial { .. } => 206,
            Answer::NotModified => 304,
            Answer::PreconditionFailed => 412,
            Answer::RangeNotSatisfiable { .. } => 416,
        }
    }

    /// The `Content-Length` of a head that carries (part of) the
    /// representation: 200 and 206 (also for HEAD). `None` for 304, which
    /// has none, and for 412 and 416, whose length is that of the caller's
    /// own short body.
    #[inline]
    pub fn content_length(self) -> Option<u64> {
        match self {
            Answer::Full { len, .. } => Some(len),
            Answer::Partial { start, end, .. } => Some(end - start),
            _ => None,
        }
    }

    /// The bytes of the representation that follow the head, if any.
    #[inline]
    pub fn body(self) -> Option<Range<u64>> {
        match self {
            Answer::Full { len, body: true } => Some(0..len),
            Answer::Partial { start, end, .. } => Some(start..end),
            _ => None,
        }
    }

    /// The `Content-Range` field the head carries (206 and 416).
    #[inline]
    pub fn content_range(self) -> Option<ContentRange> {
        match self {
            Answer::Partial { start, end, len } => Some(ContentRange::Bytes {
                first: start,
                last: end - 1,
                complete: len,
            }),
            Answer::RangeNotSatisfiable { len } => Some(ContentRange::Unsatisfied { complete: len }),
            _ => None,
        }
    }

    /// Whether the head carries the representation's validators (ETag,
    /// Last-Modified): 200, 206 and 304 do, 412 and 416 do not.
    #[inline]
    pub fn carries_validators(self) -> bool {
        matches!(self, Answer::Full { .. } | Answer::Partial { .. } | Answer::NotModified)
    }
}

/// Decide the answer to a `method` request with the fields `req` for the
/// representation `rep`. See the module documentation for the order.
///
/// Range applies to GET only (RFC 9110 §14.2: HEAD and other methods ignore
/// it), and only when If-Range, if present, holds. A representation the
/// caller would not answer with 200 (a stored 404 or 301, say) is not one to
/// call this for: preconditions and ranges do not apply to it (§13.2.1).
pub fn answer(method: Method, req: &Conditions<'_>, rep: &Representation<'_>, role: Role) -> Answer {
    match conditional::check(method, &req.preconditions(), rep.etag, rep.last_modified, role) {
        Precondition::Proceed => {}
        Precondition::NotModified => return Answer::NotModified,
        Precondition::Failed => return Answer::PreconditionFailed,
    }
    let len = rep.len;
    let full = Answer::Full {
        len,
        body: method != Method::Head,
    };
    if method != Method::Get {
        return full;
    }
    let Some(range) = req.range else {
        return full;
    };
    if let Some(v) = req.if_range {
        if !conditional::if_range_holds(v, rep.etag, rep.last_modified) {
            return full;
        }
    }
    match evaluate_range(range, len) {
        RangeOutcome::Full | RangeOutcome::Multiple => full,
        RangeOutcome::Partial { start, end_inclusive } => Answer::Partial {
            start,
            end: end_inclusive + 1,
            len,
        },
        RangeOutcome::Unsatisfiable => Answer::RangeNotSatisfiable { len },
    }
}

#[cfg(test)]
mod tests;
