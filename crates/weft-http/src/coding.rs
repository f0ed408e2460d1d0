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
    for value in values {
        for item in value.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let name = crate::trim(parts.next().unwrap_or(b""));
            if name.is_empty() {
                continue;
            }
            let q = parts.find_map(weight).unwrap_or(true);
            if same_coding(name, coding) {
                // The most favourable listing counts (a client that lists a
                // coding twice is not refusing it).
                named = Some(named.unwrap_or(false) || q);
            } else if name == b"*" {
                star = Some(star.unwrap_or(false) || q);
            }
        }
    }
    named.or(star).unwrap_or(false)
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
        fn a_plain_listing_wins_whatever_follows(rest in "[ -~]{0,40}") {
            // A later listing with q=0 of the same coding cannot take back
            // an acceptable one (the favourable listing counts).
            let field = format!("gzip, {rest}");
            proptest::prop_assert!(accepts([field.as_bytes()], b"gzip"));
        }
    }

    #[test]
    fn several_field_lines() {
        assert!(accepts([&b"deflate"[..], &b"br"[..]], b"br"));
        assert!(!accepts(std::iter::empty(), b"gzip"));
    }
}
