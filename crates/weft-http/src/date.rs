//! HTTP dates (IMF-fixdate, RFC 9110 §5.6.7).
//!
//! Formatting is done by hand into a fixed 29-byte array (no allocation, no
//! locale); [`DateCache`] keeps the current second's `Date` value so a server
//! formats it once per second, not once per response. Parsing accepts the
//! three historical forms through `httpdate`.
//!
//! Nothing here reads the clock: the caller passes the time it read (an event
//! loop reads it once per iteration), so tests choose the time they need.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const HTTP_DATE_LEN: usize = 29;

const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Civil date (year, month 1-12, day 1-31) from days since 1970-01-01
/// (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn two(out: &mut [u8], v: u32) {
    out[0] = b'0' + (v / 10 % 10) as u8;
    out[1] = b'0' + (v % 10) as u8;
}

/// Format `t` (truncated to the second; times before 1970 format as the epoch).
pub fn fmt_http_date(t: SystemTime) -> [u8; HTTP_DATE_LEN] {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        .min(253_402_300_799);
    let days = (secs / 86_400) as i64;
    let rem = (secs % 86_400) as u32;
    let (y, m, d) = civil_from_days(days);
    let mut b = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    b[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two(&mut b[5..7], d);
    b[8..11].copy_from_slice(MONTHS[(m - 1) as usize]);
    let y = y as u32;
    two(&mut b[12..14], y / 100);
    two(&mut b[14..16], y % 100);
    two(&mut b[17..19], rem / 3600);
    two(&mut b[20..22], rem / 60 % 60);
    two(&mut b[23..25], rem % 60);
    b
}

/// Parse an HTTP date in any of the three forms RFC 9110 accepts.
pub fn parse_http_date(s: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(s).ok()?;
    httpdate::parse_http_date(s.trim()).ok()
}

/// Seconds since the epoch, for comparisons at HTTP's one-second resolution.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Truncate a time to whole seconds.
pub fn to_second(t: SystemTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix_secs(t))
}

/// The current `Date` value, reformatted only when the second changes.
///
/// It holds the time it was last given: [`new`](Self::new) starts at the
/// epoch, and the owner moves it with [`update`](Self::update) before the
/// first head it writes (an event loop does so when it registers and at the
/// top of each iteration).
#[derive(Clone, Debug)]
pub struct DateCache {
    second: u64,
    value: [u8; HTTP_DATE_LEN],
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    /// A cache holding the epoch, until the first [`update`](Self::update).
    pub fn new() -> DateCache {
        DateCache::at(UNIX_EPOCH)
    }

    /// A cache holding `now`.
    pub fn at(now: SystemTime) -> DateCache {
        DateCache {
            second: unix_secs(now),
            value: fmt_http_date(now),
        }
    }

    /// Move to `now` (cheap when the second has not changed).
    #[inline]
    pub fn update(&mut self, now: SystemTime) {
        let s = unix_secs(now);
        if s != self.second {
            self.second = s;
            self.value = fmt_http_date(now);
        }
    }

    /// The formatted date.
    #[inline]
    pub fn get(&self) -> &[u8] {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_httpdate() {
        for secs in [
            0u64,
            784_111_777,
            951_782_400,
            1_700_000_000,
            4_102_444_800,
            1_798_000_000,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            let ours = fmt_http_date(t);
            assert_eq!(
                std::str::from_utf8(&ours).unwrap(),
                httpdate::fmt_http_date(t),
                "{secs}"
            );
            assert_eq!(parse_http_date(&ours), Some(t));
        }
        assert_eq!(
            &fmt_http_date(UNIX_EPOCH + Duration::from_secs(784_111_777)),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }

    #[test]
    fn parses_old_forms() {
        let want = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(want));
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(want));
        assert_eq!(parse_http_date(b"yesterday"), None);
    }

    #[test]
    fn cache_starts_where_it_is_told() {
        assert_eq!(DateCache::new().get(), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(DateCache::default().get(), DateCache::new().get());
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(DateCache::at(t).get(), b"Sun, 06 Nov 1994 08:49:37 GMT");
        let mut c = DateCache::new();
        c.update(t);
        assert_eq!(c.get(), DateCache::at(t).get());
    }

    #[test]
    fn cache_changes_with_the_second() {
        let mut c = DateCache::new();
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        c.update(t);
        let a = c.get().to_vec();
        c.update(t + Duration::from_millis(500));
        assert_eq!(c.get(), &a[..]);
        c.update(t + Duration::from_secs(1));
        assert_ne!(c.get(), &a[..]);
    }
}
