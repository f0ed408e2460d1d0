//! Byte ranges (RFC 9110 §14): one range is served as 206; several may be
//! answered with the whole representation (the RFC allows ignoring Range), which
//! avoids multipart bodies and the amplification they allow.

/// What a Range field asks for, against a representation of a known length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// No usable range (absent, malformed, or another unit): send everything.
    Full,
    /// Several ranges, at least one satisfiable: weft sends everything (200).
    Multiple,
    /// One satisfiable range.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte (inclusive).
        end_inclusive: u64,
    },
    /// No range is satisfiable: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// More range specs than this and the field is ignored.
const MAX_SPECS: usize = 64;

fn num(s: &[u8]) -> Option<u64> {
    crate::parse_decimal(crate::trim(s))
}

/// Evaluate the value of a Range field for a representation of `len` bytes.
pub fn evaluate_range(value: &[u8], len: u64) -> RangeOutcome {
    let v = crate::trim(value);
    if v.len() < 6 || !v[..6].eq_ignore_ascii_case(b"bytes=") {
        return RangeOutcome::Full;
    }
    let mut specs = 0usize;
    let mut first: Option<(u64, u64)> = None;
    let mut satisfiable = 0usize;
    for spec in v[6..].split(|&b| b == b',') {
        let spec = crate::trim(spec);
        if spec.is_empty() {
            continue;
        }
        specs += 1;
        if specs > MAX_SPECS {
            return RangeOutcome::Full;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return RangeOutcome::Full;
        };
        let (a, b) = (&spec[..dash], &spec[dash + 1..]);
        let r = if a.is_empty() {
            // Suffix: the last n bytes.
            let Some(n) = num(b) else {
                return RangeOutcome::Full;
            };
            (n > 0 && len > 0).then(|| (len - n.min(len), len - 1))
        } else {
            let Some(start) = num(a) else {
                return RangeOutcome::Full;
            };
            let end = if crate::trim(b).is_empty() {
                u64::MAX
            } else {
                match num(b) {
                    Some(e) if e >= start => e,
                    _ => return RangeOutcome::Full,
                }
            };
            (start < len).then(|| (start, end.min(len - 1)))
        };
        if let Some(r) = r {
            satisfiable += 1;
            first.get_or_insert(r);
        }
    }
    match (specs, satisfiable, first) {
        (0, _, _) => RangeOutcome::Full,
        (_, 0, _) => RangeOutcome::Unsatisfiable,
        (1, _, Some((start, end_inclusive))) => RangeOutcome::Partial { start, end_inclusive },
        _ => RangeOutcome::Multiple,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeOutcome::*;

    fn p(start: u64, end_inclusive: u64) -> RangeOutcome {
        Partial { start, end_inclusive }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(evaluate_range(b"bytes=0-4", 12), p(0, 4));
        assert_eq!(evaluate_range(b"bytes=7-", 12), p(7, 11));
        assert_eq!(evaluate_range(b"bytes=-5", 12), p(7, 11));
        assert_eq!(evaluate_range(b"bytes=-50", 12), p(0, 11));
        assert_eq!(evaluate_range(b"bytes=5-100", 12), p(5, 11));
        assert_eq!(
            evaluate_range(b"Bytes = 1-1", 12),
            Full,
            "whitespace around = is not allowed"
        );
        assert_eq!(evaluate_range(b"BYTES=1-1", 12), p(1, 1));
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(evaluate_range(b"bytes=100-200", 12), Unsatisfiable);
        assert_eq!(evaluate_range(b"bytes=12-", 12), Unsatisfiable);
        assert_eq!(evaluate_range(b"bytes=-0", 12), Unsatisfiable);
        assert_eq!(evaluate_range(b"bytes=0-", 0), Unsatisfiable);
        assert_eq!(evaluate_range(b"bytes=5-1", 12), Full);
        assert_eq!(evaluate_range(b"items=0-1", 12), Full);
        assert_eq!(evaluate_range(b"bytes=x-1", 12), Full);
        assert_eq!(evaluate_range(b"bytes=", 12), Full);
    }

    #[test]
    fn multiple() {
        assert_eq!(evaluate_range(b"bytes=0-1,4-5", 12), Multiple);
        assert_eq!(evaluate_range(b"bytes=0-1,100-200", 12), Multiple);
        assert_eq!(evaluate_range(b"bytes=50-60,100-200", 12), Unsatisfiable);
        let many = format!("bytes={}", "0-0,".repeat(100));
        assert_eq!(evaluate_range(many.as_bytes(), 12), Full);
    }
}
