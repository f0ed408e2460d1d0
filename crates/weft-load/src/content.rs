//! Deterministic content: the body bytes of a URL are a pure function of its
//! path, so any intermediary (a proxy, a cache, a splice) can be checked byte
//! for byte by a client that stores nothing.
//!
//! One pseudo-random pattern of [`PERIOD`] bytes (a prime, so no power-of-two
//! misalignment can line up with it) is generated once per process from a fixed
//! seed with splitmix64. The body of a path starts at `offset(path)` in the
//! pattern — a hash of the path — and wraps around. The pattern is kept twice
//! in a row ([`doubled`]), so any run of up to `PERIOD` bytes is one contiguous
//! slice: the origin sends bodies as slices of it (no per-byte work per
//! response), and `--verify` compares what arrives against slices of it
//! (a `memcmp`, no generation).
//!
//! Validators are derived from the same hash: `Last-Modified` is a fixed base
//! date minus up to 30 days, the `ETag` spells the hash and size. The client
//! can therefore craft `If-Modified-Since` values that must (or must not)
//! produce a 304.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of the content pattern in bytes (2^20 − 3, the largest prime below 2^20).
pub const PERIOD: usize = 1_048_573;

/// Base of every Last-Modified date: 2001-11-01T00:00:00Z (the 4th cache-off).
const LM_BASE: u64 = 1_004_572_800;

/// splitmix64 step: a fast, well-mixed 64-bit generator.
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern, twice in a row (2·PERIOD bytes), built on first use.
pub fn doubled() -> &'static [u8] {
    static PATTERN: OnceLock<Box<[u8]>> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let mut v = vec![0u8; 2 * PERIOD];
        let mut s = 0x5745_4654_u64; // "WEFT"
        for chunk in v[..PERIOD].chunks_mut(8) {
            let x = splitmix64(&mut s).to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
        let (a, b) = v.split_at_mut(PERIOD);
        b.copy_from_slice(a);
        v.into_boxed_slice()
    })
}

/// 64-bit hash of a path (FNV-1a, then a splitmix finish for good low bits).
#[inline]
pub fn path_hash(path: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut s = h;
    splitmix64(&mut s)
}

/// Where the body of a path starts in the pattern.
#[inline]
pub fn offset_of_hash(h: u64) -> usize {
    (h % PERIOD as u64) as usize
}

/// Offset for a path.
#[inline]
pub fn offset(path: &[u8]) -> usize {
    offset_of_hash(path_hash(path))
}

/// The part of a request target the content depends on: the origin-form path
/// and query (an absolute-form target loses its scheme and authority, so a
/// client talking through a proxy and the origin agree).
pub fn origin_form(target: &[u8]) -> &[u8] {
    if let Some((_, _, path)) = weft_http::split_absolute(target) {
        path
    } else {
        target
    }
}

/// Last-Modified of a path's content (whole seconds).
pub fn last_modified(h: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(LM_BASE - (h >> 20) % (30 * 86_400))
}

/// Strong ETag of a path's content of `size` bytes, appended to `out` with its quotes.
pub fn push_etag(out: &mut Vec<u8>, h: u64, size: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for i in (0..16).rev() {
        out.push(HEX[((h >> (i * 4)) & 0xf) as usize]);
    }
    out.push(b'-');
    weft_http::push_decimal(out, size);
    out.push(b'"');
}

/// A run of `len` bytes of content starting `pos` bytes into a body whose
/// pattern offset is `off`; `len` must be at most PERIOD.
#[inline]
pub fn slice(off: usize, pos: u64, len: usize) -> &'static [u8] {
    debug_assert!(len <= PERIOD);
    let start = ((off as u64 + pos) % PERIOD as u64) as usize;
    &doubled()[start..start + len]
}

/// Does `data`, found `pos` bytes into a body with pattern offset `off`, match?
#[inline]
pub fn matches(off: usize, pos: u64, data: &[u8]) -> bool {
    let mut done = 0usize;
    while done < data.len() {
        let n = (data.len() - done).min(PERIOD);
        if slice(off, pos + done as u64, n) != &data[done..done + n] {
            return false;
        }
        done += n;
    }
    true
}

/// Write the full body of `path` (`size` bytes) to `w` (file sets for `weft load gen`).
pub fn write_body(w: &mut impl std::io::Write, path: &[u8], size: u64) -> std::io::Result<()> {
    let off = offset(path);
    let mut pos = 0u64;
    while pos < size {
        let n = ((size - pos) as usize).min(PERIOD);
        w.write_all(slice(off, pos, n))?;
        pos += n as u64;
    }
    Ok(())
}

/// The tests' fixed-size content: `len` xorshift bytes seeded by `len`, the
/// same for every caller (test fixtures, `weft-fcgi-app`), so a body of a
/// given size can be checked byte for byte without knowing its path.
pub fn sized_pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9 ^ len as u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_a_function_of_the_path() {
        let a = offset(b"/size/100/a");
        assert_eq!(a, offset(b"/size/100/a"));
        assert_ne!(a, offset(b"/size/100/b"));
        assert_eq!(origin_form(b"http://h:1/size/1/x?q"), b"/size/1/x?q");
        assert_eq!(origin_form(b"/p"), b"/p");
        let p = doubled();
        assert_eq!(p.len(), 2 * PERIOD);
        assert_eq!(&p[..PERIOD], &p[PERIOD..]);
        // The pattern is not trivially repetitive.
        assert_ne!(&p[..4096], &p[4096..8192]);
    }

    #[test]
    fn verification_at_any_split() {
        let path = b"/size/3000000/big";
        let off = offset(path);
        let mut body = Vec::new();
        write_body(&mut body, path, 3_000_000).unwrap();
        assert_eq!(body.len(), 3_000_000);
        // Wraps around the period seamlessly.
        assert!(matches(off, 0, &body));
        let mut pos = 0usize;
        for step in [1usize, 7, 4096, 65536, 1_048_573, 17].iter().cycle() {
            if pos >= body.len() {
                break;
            }
            let n = (*step).min(body.len() - pos);
            assert!(matches(off, pos as u64, &body[pos..pos + n]), "at {pos}+{n}");
            pos += n;
        }
        let mut bad = body[1000..2000].to_vec();
        bad[500] ^= 1;
        assert!(!matches(off, 1000, &bad));
        assert!(!matches(off, 1001, &body[1000..2000]), "shifted content must not match");
    }

    #[test]
    fn validators() {
        let h = path_hash(b"/x");
        let lm = last_modified(h);
        assert!(lm <= UNIX_EPOCH + Duration::from_secs(LM_BASE));
        assert!(lm > UNIX_EPOCH + Duration::from_secs(LM_BASE - 31 * 86_400));
        let mut e = Vec::new();
        push_etag(&mut e, 0xab, 12);
        assert_eq!(e, b"\"00000000000000ab-12\"");
    }
}
