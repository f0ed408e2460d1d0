//! Access log lines in Combined Log Format:
//!
//! `127.0.0.1 - - [22/Nov/2026:13:45:00 +0000] "GET / HTTP/1.1" 200 14 "referer" "user-agent"`
//!
//! Written into a per-worker buffer (flushed by the worker with one write), with
//! the timestamp formatted once per second. Bytes that could forge a line or a
//! field (`"`, `\`, control and non-ASCII bytes) are written as `\xHH`, as nginx does.

use std::io::Write;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The `[dd/Mon/yyyy:hh:mm:ss +0000]` stamp, reformatted when the second changes.
pub struct ClfClock {
    second: u64,
    stamp: Vec<u8>,
}

impl Default for ClfClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ClfClock {
    /// A clock with nothing formatted yet.
    pub fn new() -> ClfClock {
        ClfClock {
            second: u64::MAX,
            stamp: Vec::with_capacity(32),
        }
    }

    fn get(&mut self, now: SystemTime) -> &[u8] {
        let secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if secs != self.second {
            self.second = secs;
            // Reuse the HTTP date's calendar arithmetic: "Sun, 06 Nov 1994 08:49:37 GMT".
            let d = weft_http::fmt_http_date(now);
            self.stamp.clear();
            let _ = write!(
                self.stamp,
                "[{}/{}/{}:{} +0000]",
                std::str::from_utf8(&d[5..7]).unwrap_or("01"),
                std::str::from_utf8(&d[8..11]).unwrap_or(MONTHS[0]),
                std::str::from_utf8(&d[12..16]).unwrap_or("1970"),
                std::str::from_utf8(&d[17..25]).unwrap_or("00:00:00"),
            );
        }
        &self.stamp
    }
}

fn escaped(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b);
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
}

/// Append one log line.
#[allow(clippy::too_many_arguments)]
pub fn write_clf(
    out: &mut Vec<u8>,
    clock: &mut ClfClock,
    ip: IpAddr,
    now: SystemTime,
    request_line: &[u8],
    status: u16,
    bytes: u64,
    referer: Option<&[u8]>,
    user_agent: Option<&[u8]>,
) {
    let _ = write!(out, "{ip} - - ");
    out.extend_from_slice(clock.get(now));
    out.extend_from_slice(b" \"");
    escaped(out, request_line);
    let _ = write!(out, "\" {status} ");
    if bytes == 0 {
        out.push(b'-');
    } else {
        weft_http::push_decimal(out, bytes);
    }
    for field in [referer, user_agent] {
        out.extend_from_slice(b" \"");
        match field {
            Some(v) => escaped(out, v),
            None => out.push(b'-'),
        }
        out.push(b'"');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn combined_format() {
        let mut out = Vec::new();
        let mut clock = ClfClock::new();
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        write_clf(
            &mut out,
            &mut clock,
            IpAddr::from([127, 0, 0, 1]),
            t,
            b"GET /a\"b HTTP/1.1",
            200,
            12,
            Some(b"http://x/"),
            None,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a\\x22b HTTP/1.1\" 200 12 \"http://x/\" \"-\"\n"
        );
    }
}
