//! The URL grammar `weft origin` answers and `weft load` generates, shared so
//! both sides agree on sizes and cacheability without talking.
//!
//! - `/size/N[/FLAG]/...`: a body of N bytes (N may carry a unit: `8KiB`).
//!   An optional FLAG segment right after the size sets cacheability:
//!   `c` (cacheable, the origin's default lifetime), `cSECONDS`
//!   (`max-age=SECONDS`), `nc` (`no-store`).
//! - `.../dirNNNNN/classC_F`: the SPECweb99 file of class C (0..3) and index
//!   F (0..8), whatever prefix precedes it.
//!
//! The body bytes of any such URL are `content::` bytes of its path.

/// Sizes of the nine files of a SPECweb99 class (paper sources in workloads.md).
pub fn specweb99_size(class: usize, file: usize) -> u64 {
    const CLASS0: [u64; 9] = [102, 204, 307, 409, 512, 614, 716, 819, 921];
    match class {
        0 => CLASS0[file],
        c => (file as u64 + 1) * 1024 * 10u64.pow(c as u32 - 1),
    }
}

/// Cacheability asked for by a URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheFlag {
    /// No flag: the origin's default.
    Default,
    /// `c`: cacheable with the default lifetime.
    Cacheable,
    /// `cN`: cacheable for N seconds.
    MaxAge(u64),
    /// `nc`: not cacheable.
    NoStore,
}

/// What a path asks the origin for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Body size.
    pub size: u64,
    /// Cacheability.
    pub cache: CacheFlag,
}

/// Parse a path (origin-form, query ignored) into what it asks for.
pub fn parse(path: &[u8]) -> Option<Spec> {
    let path = match memchr::memchr(b'?', path) {
        Some(i) => &path[..i],
        None => path,
    };
    if let Some(rest) = path.strip_prefix(b"/size/") {
        let mut segs = rest.split(|&b| b == b'/');
        let n = segs.next()?;
        let size = parse_size(n)?;
        let cache = match segs.next() {
            Some(b"c") => CacheFlag::Cacheable,
            Some(b"nc") => CacheFlag::NoStore,
            Some(f) if f.len() > 1 && f[0] == b'c' => match weft_http::parse_decimal(&f[1..]) {
                Some(s) => CacheFlag::MaxAge(s),
                None => CacheFlag::Default,
            },
            _ => CacheFlag::Default,
        };
        return Some(Spec { size, cache });
    }
    // SPECweb99: .../dirNNNNN/classC_F
    let last = path.rsplit(|&b| b == b'/').next()?;
    let rest = last.strip_prefix(b"class")?;
    if rest.len() != 3 || rest[1] != b'_' {
        return None;
    }
    let (c, f) = (rest[0].wrapping_sub(b'0') as usize, rest[2].wrapping_sub(b'0') as usize);
    if c > 3 || f > 8 {
        return None;
    }
    let dir = path[..path.len() - last.len()].strip_suffix(b"/")?;
    let dname = dir.rsplit(|&b| b == b'/').next()?;
    let digits = dname.strip_prefix(b"dir")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(Spec {
        size: specweb99_size(c, f),
        cache: CacheFlag::Default,
    })
}

fn parse_size(s: &[u8]) -> Option<u64> {
    if let Some(n) = weft_http::parse_decimal(s) {
        return Some(n);
    }
    let s = std::str::from_utf8(s).ok()?;
    if s.contains(' ') {
        return None;
    }
    weft_core::units::parse_size(s).ok()
}

/// Append `/size/N` (and a flag segment) to `out`.
pub fn push_size_path(out: &mut Vec<u8>, size: u64, cache: CacheFlag) {
    out.extend_from_slice(b"/size/");
    weft_http::push_decimal(out, size);
    match cache {
        CacheFlag::Default => {}
        CacheFlag::Cacheable => out.extend_from_slice(b"/c"),
        CacheFlag::NoStore => out.extend_from_slice(b"/nc"),
        CacheFlag::MaxAge(s) => {
            out.extend_from_slice(b"/c");
            weft_http::push_decimal(out, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_urls() {
        assert_eq!(
            parse(b"/size/8192/x"),
            Some(Spec {
                size: 8192,
                cache: CacheFlag::Default
            })
        );
        assert_eq!(parse(b"/size/8KiB").unwrap().size, 8192);
        assert_eq!(parse(b"/size/1/nc/a.gif").unwrap().cache, CacheFlag::NoStore);
        assert_eq!(parse(b"/size/1/c/a").unwrap().cache, CacheFlag::Cacheable);
        assert_eq!(parse(b"/size/1/c60/a?x=1").unwrap().cache, CacheFlag::MaxAge(60));
        assert_eq!(parse(b"/size/x/a"), None);
        assert_eq!(parse(b"/size/"), None);
        assert_eq!(parse(b"/other"), None);
        let mut v = Vec::new();
        push_size_path(&mut v, 5, CacheFlag::MaxAge(7));
        assert_eq!(v, b"/size/5/c7");
    }

    #[test]
    fn specweb99_urls() {
        assert_eq!(parse(b"/dir00012/class0_8").unwrap().size, 921);
        assert_eq!(parse(b"/file_set/dir00000/class1_0").unwrap().size, 1024);
        assert_eq!(parse(b"/dir00000/class3_8").unwrap().size, 921_600);
        assert_eq!(parse(b"/dir00000/class4_0"), None);
        assert_eq!(parse(b"/dir00000/class0_9"), None);
        assert_eq!(parse(b"/dirx/class0_1"), None);
        assert_eq!(parse(b"/class0_1"), None);
    }
}
