//! Content codings a client accepts (RFC 9110 §12.5.3 `Accept-Encoding`),
//! for a server that has a representation already encoded (a precompressed
//! `X.gz` or `X.br` beside `X`) and must not send it to a client that did
//! not ask for it.
//!
//! A coding is acceptable when the field lists it (or `*`, for codings the
//! field does not name) with a weight above 0. `x-gzip` is `gzip` (RFC 9110
//! §8.4.1.3). No field, or an empty one, accepts no coding here: the RFC lets
//! a server assume any coding then, but every client that can decode one
//! says so, and a proxy or script that cannot would get bytes it cannot read.

/// Does an `Accept-Encoding` field (its values, all lines) accept `coding`
/// (lowercase, e.g. `gzip`, `br`)?
pub fn accepts<'a>(values: impl IntoIterator<Item = &'a [u8]>, coding: &[u8]) -> bool {
    let mut named = None;
    let mut star = None;
    for (name, q) in listings(values) {
        if same_coding(name, coding) {
            // The most favourable listing counts (a client that lists a
            // coding twice is not refusing it).
            named = Some(named.unwrap_or(false) || q);
        } else if name == b"*" {
            star = Some(star.unwrap_or(false) || q);
        }
    }
    named.or(star).unwrap_or(false)
}

/// The codings an `Accept-Encoding` field lists, each with whether its
/// weight is above 0 (no weight: 1); empty items skipped.
fn listings<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> impl Iterator<Item = (&'a [u8], bool)> {
    values
        .into_iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .filter_map(|item| {
            let mut parts = item.split(|&b| b == b';');
            let name = crate::trim(parts.next().unwrap_or(b""));
            let q = parts.find_map(weight).unwrap_or(true);
            (!name.is_empty()).then_some((name, q))
        })
}

/// `q=` of a parameter: Some(true) above 0, Some(false) at 0 (or a malformed
/// weight, which refuses rather than guesses), None for another parameter.
fn weight(param: &[u8]) -> Option<bool> {
    let p = crate::trim(param);
    let (name, value) = p.split_at(p.iter().position(|&b| b == b'=')?);
    if !crate::trim(name).eq_ignore_ascii_case(b"q") {
        return None;
    }
    let v = crate::trim(&value[1..]);
    // qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
    let valid = match v {
        [b'0'] | [b'1'] => true,
        [b'0' | b'1', b'.', rest @ ..] => rest.len() <= 3 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    Some(valid && v.iter().any(|&b| (b'1'..=b'9').contains(&b)))
}

/// What an `Accept-Encoding` field (its values, all lines) says, written
/// so that fields that accept and refuse the same codings are written the
/// same: the codings it accepts (weight above 0), sorted, lowercased,
/// `x-gzip` as `gzip`, then `!coding` for those it refuses, `*` or `!*` last.
/// A shared cache keys `Vary: Accept-Encoding` variants by this (RFC 9111
/// §4.1 lets it normalize), so `gzip, deflate, br` and `br,gzip, deflate`
/// share a variant. The weights' order is left out: any variant stored for
/// a set of accepted codings is in a coding every request of that set
/// accepts; a request may prefer another it also accepts, as a server may
/// choose (RFC 9110 §12.5.3).
pub fn normalized<'a>(values: impl IntoIterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    // Few codings per field; more than this and the rest are ignored (no
    // allocation per request, and a bound on what a client makes us sort).
    const MAX: usize = 16;
    let mut seen: [(&[u8], bool); MAX] = [(b"", false); MAX];
    let mut n = 0;
    let mut star = None;
    for (name, q) in listings(values) {
        if name == b"*" {
            star = Some(star.unwrap_or(false) || q);
            continue;
        }
        let name: &[u8] = if name.eq_ignore_ascii_case(b"x-gzip") {
            b"gzip"
        } else {
            name
        };
        match seen[..n].iter_mut().find(|(s, _)| s.eq_ignore_ascii_case(name)) {
            Some(e) => e.1 |= q,
            None if n < MAX => {
                seen[n] = (name, q);
                n += 1;
            }
            None => {}
        }
    }
    let seen = &mut seen[..n];
    // Accepted first, then by name.
    seen.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| cmp_lower(a.0, b.0)));
    let start = out.len();
    for (name, q) in seen.iter() {
        if out.len() > start {
            out.push(b',');
        }
        if !q {
            out.push(b'!');
        }
        out.extend(name.iter().map(u8::to_ascii_lowercase));
    }
    if let Some(q) = star {
        if out.len() > start {
            out.push(b',');
        }
        out.extend_from_slice(if q { b"*" } else { b"!*" });
    }
}

fn cmp_lower(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.iter()
        .map(u8::to_ascii_lowercase)
        .cmp(b.iter().map(u8::to_ascii_lowercase))
}

fn same_coding(name: &[u8], coding: &[u8]) -> bool {
    name.eq_ignore_ascii_case(coding) || (coding == b"gzip" && name.eq_ignore_ascii_case(b"x-gzip"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(field: &str, coding: &str) -> bool {
        accepts([field.as_bytes()], coding.as_bytes())
    }

    #[test]
    fn listed_codings_with_weights() {
        assert!(ok("gzip", "gzip"));
        assert!(ok("deflate, GZIP", "gzip"));
        assert!(ok("br;q=1.0, gzip;q=0.8", "gzip"));
        assert!(ok("gzip ; q=0.001", "gzip"));
        assert!(ok("x-gzip", "gzip"));
        assert!(!ok("x-gzip", "br"));
        assert!(!ok("gzip;q=0", "gzip"));
        assert!(!ok("gzip;q=0.000", "gzip"));
        assert!(!ok("gzip; q=0, br", "gzip"));
        assert!(ok("gzip;q=0, gzip", "gzip"), "the favourable listing counts");
        assert!(!ok("deflate", "gzip"));
        assert!(!ok("gzipped", "gzip"));
        assert!(!ok("", "gzip"), "no coding without asking");
        assert!(!ok("identity", "gzip"));
    }

    #[test]
    fn star_covers_what_is_not_named() {
        assert!(ok("*", "br"));
        assert!(ok("*;q=0.5", "gzip"));
        assert!(!ok("*;q=0", "gzip"));
        assert!(!ok("gzip;q=0, *", "gzip"), "named beats the star");
        assert!(ok("br;q=0, *", "gzip"));
    }

    #[test]
    fn malformed_weights_refuse() {
        for bad in [
            "gzip;q=2",
            "gzip;q=0.5.5",
            "gzip;q=",
            "gzip;q=.5",
            "gzip;q=1.0000",
            "gzip;q=x",
        ] {
            assert!(!ok(bad, "gzip"), "{bad}");
        }
        assert!(ok("gzip;level=9", "gzip"), "another parameter is no weight");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_answered_without_panic(field: Vec<u8>) {
            let _ = accepts([&field[..]], b"gzip");
        }

        #[test]
        fn normalized_is_blind_to_order_case_and_space(mut items in proptest::collection::vec("(gzip|br|deflate|zstd|identity|\\*)(;q=0|;q=0.5|;q=1)?", 0..6), seed: u64) {
            let a = items.join(", ");
            // Reordered (deterministically by the seed), upper-cased, spaced.
            let n = items.len().max(1);
            items.rotate_left((seed as usize) % n);
            let b = items.iter().map(|i| i.to_uppercase()).collect::<Vec<_>>().join(" ,  ");
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            normalized([a.as_bytes()], &mut ka);
            normalized([b.as_bytes()], &mut kb);
            proptest::prop_assert_eq!(ka, kb);
        }

        #[test]
        fn a_plain_listing_wins_whatever_follows(rest in "[ -~]{0,40}") {
            // A later listing with q=0 of the same coding cannot take back
            // an acceptable one (the favourable listing counts).
            let field = format!("gzip, {rest}");
            proptest::prop_assert!(accepts([field.as_bytes()], b"gzip"));
        }
    }

    fn norm(fields: &[&str]) -> String {
        let mut out = b"x".to_vec();
        normalized(fields.iter().map(|f| f.as_bytes()), &mut out);
        String::from_utf8(out[1..].to_vec()).unwrap()
    }

    #[test]
    fn normalized_fields_say_what_is_accepted() {
        assert_eq!(norm(&["gzip, deflate, br"]), "br,deflate,gzip");
        assert_eq!(norm(&["br,GZIP", "deflate"]), "br,deflate,gzip");
        assert_eq!(
            norm(&["gzip;q=0.5, br;q=1.0, deflate"]),
            "br,deflate,gzip",
            "weights' order left out"
        );
        assert_eq!(norm(&["x-gzip"]), "gzip");
        assert_eq!(norm(&["gzip, x-gzip;q=0"]), "gzip", "the favourable listing counts");
        assert_eq!(norm(&["gzip;q=0, br"]), "br,!gzip");
        assert_eq!(norm(&["*;q=0, identity"]), "identity,!*");
        assert_eq!(norm(&["br, *"]), "br,*");
        assert_eq!(
            norm(&["gzip, deflate, br, zstd"]),
            "br,deflate,gzip,zstd",
            "zstd is another set"
        );
        assert_eq!(norm(&[""]), "");
        assert_eq!(norm(&[]), "");
    }

    #[test]
    fn several_field_lines() {
        assert!(accepts([&b"deflate"[..], &b"br"[..]], b"br"));
        assert!(!accepts(std::iter::empty(), b"gzip"));
    }
}
