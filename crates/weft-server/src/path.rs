//! Request path safety: percent-decode once, normalize, refuse escapes.
//!
//! The result is a relative path under the document root with no `.`/`..`
//! segments, no empty segments and no NUL, ready for `openat2(RESOLVE_BENEATH)`
//! — which then refuses, in the kernel, any symlink that leads outside the root.
//! Two independent fences: a mistake in one is caught by the other.

/// What the decoded path looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathInfo {
    /// The path ended with `/` (a directory was asked for).
    pub trailing_slash: bool,
}

/// Why a path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// `%` not followed by two hex digits.
    BadEscape,
    /// A NUL byte, raw or encoded.
    Nul,
    /// `..` would leave the document root.
    Escape,
    /// Longer than any path the kernel accepts.
    TooLong,
    /// Not an origin-form path.
    NotAPath,
}

impl PathError {
    /// The status to answer with.
    pub fn status(self) -> u16 {
        match self {
            PathError::Escape => 403,
            PathError::TooLong => 414,
            _ => 400,
        }
    }
    /// A short reason for the response body.
    pub fn reason(self) -> &'static str {
        match self {
            PathError::BadEscape => "malformed percent-encoding in the path",
            PathError::Nul => "NUL in the path",
            PathError::Escape => "path leaves the document root",
            PathError::TooLong => "path too long",
            PathError::NotAPath => "request target is not a path",
        }
    }
}

/// Longest relative path accepted (Linux's PATH_MAX).
const MAX_PATH: usize = 4096;

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Turn a request target into a normalized relative path in `rel` (cleared
/// first; `""` is the root). The query is ignored. One pass, decoding straight
/// into `rel` (a buffer the caller reuses), so nothing is allocated.
pub fn resolve(target: &[u8], rel: &mut Vec<u8>) -> Result<PathInfo, PathError> {
    rel.clear();
    let path = match target.iter().position(|&b| b == b'?' || b == b'#') {
        Some(i) => &target[..i],
        None => target,
    };
    if path.first() != Some(&b'/') {
        return Err(PathError::NotAPath);
    }
    if path.len() > 3 * MAX_PATH {
        return Err(PathError::TooLong);
    }
    // `before`: length of `rel` before the current segment (and its separator).
    let mut before = 0usize;
    let mut seg_start = 0usize;
    let mut last_was_dot_segment;
    let mut ends_with_slash = false;
    let mut i = 1; // the leading '/'
    loop {
        let d = if i < path.len() {
            let b = path[i];
            if b == b'%' {
                let (Some(h), Some(l)) = (
                    path.get(i + 1).and_then(|&c| hex(c)),
                    path.get(i + 2).and_then(|&c| hex(c)),
                ) else {
                    return Err(PathError::BadEscape);
                };
                i += 3;
                Some(h << 4 | l)
            } else {
                i += 1;
                Some(b)
            }
        } else {
            None
        };
        match d {
            Some(0) => return Err(PathError::Nul),
            Some(b'/') | None => {
                // A segment ends: drop empty and `.`, pop for `..`.
                if d.is_some() {
                    ends_with_slash = true;
                }
                last_was_dot_segment = false;
                match &rel[seg_start..] {
                    b"" | b"." => {
                        last_was_dot_segment = rel.len() > seg_start;
                        rel.truncate(before);
                    }
                    b".." => {
                        last_was_dot_segment = true;
                        if before == 0 {
                            return Err(PathError::Escape);
                        }
                        let prev = rel[..before].iter().rposition(|&b| b == b'/').unwrap_or(0);
                        rel.truncate(prev);
                    }
                    _ => {}
                }
                if d.is_none() {
                    break;
                }
                before = rel.len();
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                seg_start = rel.len();
            }
            Some(b) => {
                ends_with_slash = false;
                rel.push(b);
            }
        }
    }
    if rel.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    Ok(PathInfo {
        trailing_slash: ends_with_slash || last_was_dot_segment || rel.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(t: &str) -> Result<(String, bool), PathError> {
        let mut rel = Vec::new();
        resolve(t.as_bytes(), &mut rel).map(|i| (String::from_utf8(rel).unwrap(), i.trailing_slash))
    }

    #[test]
    fn normalizes() {
        assert_eq!(r("/"), Ok(("".into(), true)));
        assert_eq!(r("/a/b.txt"), Ok(("a/b.txt".into(), false)));
        assert_eq!(r("//a///b/"), Ok(("a/b".into(), true)));
        assert_eq!(r("/a/./b"), Ok(("a/b".into(), false)));
        assert_eq!(r("/a/c/../b"), Ok(("a/b".into(), false)));
        assert_eq!(r("/a/.."), Ok(("".into(), true)));
        assert_eq!(r("/x/y/../../z?q=/../.."), Ok(("z".into(), false)));
        assert_eq!(r("/%6fk.txt"), Ok(("ok.txt".into(), false)));
        assert_eq!(r("/a%20b"), Ok(("a b".into(), false)));
        assert_eq!(r("/%2541"), Ok(("%41".into(), false)), "decoded exactly once");
    }

    #[test]
    fn refuses() {
        assert_eq!(r("/../x"), Err(PathError::Escape));
        assert_eq!(r("/a/../../x"), Err(PathError::Escape));
        assert_eq!(r("/%2e%2e/x"), Err(PathError::Escape));
        assert_eq!(r("/%2E%2e%2fx"), Err(PathError::Escape));
        assert_eq!(r("/..%2fx"), Err(PathError::Escape));
        assert_eq!(r("/%00"), Err(PathError::Nul));
        assert_eq!(r("/%zz"), Err(PathError::BadEscape));
        assert_eq!(r("/%4"), Err(PathError::BadEscape));
        assert_eq!(r("x"), Err(PathError::NotAPath));
        assert_eq!(r(&format!("/{}", "a".repeat(5000))), Err(PathError::TooLong));
    }
}
