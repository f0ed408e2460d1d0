//! Access log lines in Combined Log Format (the default):
//!
//! `127.0.0.1 - - [22/Nov/2026:13:45:00 +0000] "GET / HTTP/1.1" 200 14 "referer" "user-agent"`
//!
//! or Common Log Format (`clf`: the same without referer and user agent), or
//! JSON lines (`json`) that add the request time and the cache status:
//!
//! `{"remote_addr":"127.0.0.1","time":"22/Nov/2026:13:45:00 +0000","request":"GET / HTTP/1.1","status":200,"bytes":14,"referer":"-","user_agent":"-","request_time":0.000120,"cache":"-"}`
//!
//! Written into a per-worker buffer (flushed by the worker with one write), with
//! the timestamp formatted once per second. Bytes that could forge a line or a
//! field (`"`, `\`, control and non-ASCII bytes) are written as `\xHH`, as nginx
//! does (`\u00HH` in JSON). [`AccessLog`] is one worker's buffer over the shared
//! O_APPEND file, a [`LogFile`] reopened on SIGUSR1.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weft_http::RequestHead;
use weft_io::logfile::LogFile;
use weft_io::sys::{self, Fd};

/// The line format of the access log (`--access-log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Common Log Format (`clf`).
    Common,
    /// Combined Log Format (`combined`, the default).
    #[default]
    Combined,
    /// One JSON object a line (`json`), with request time and cache status.
    Json,
}

weft_core::enum_names!(Format, error = "unknown access log format `{s}` (expected clf, combined or json)", {
    Common => "clf" | "common",
    Combined => "combined",
    Json => "json",
});

/// What one log line says beyond the request itself.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// Response status.
    pub status: u16,
    /// Response bytes (head and body).
    pub bytes: u64,
    /// The wall-clock time of the request.
    pub wall: SystemTime,
    /// A HEAD request: no body bytes logged.
    pub head_only: bool,
    /// From the request head's first byte to the response queued.
    pub took: Option<Duration>,
    /// Cache status (`HIT`, `MISS`, ...), None: `-`.
    pub cache: Option<&'a str>,
}

/// Buffered bytes that trigger a write.
const FLUSH_BYTES: usize = 32 * 1024;
/// Longest a line waits in the buffer.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Combined Log Format lines buffered per worker and appended to the shared
/// file with one write per flush (O_APPEND keeps whole lines intact).
pub struct AccessLog {
    file: Arc<LogFile>,
    fd: Arc<Fd>,
    generation: u64,
    format: Format,
    buf: Vec<u8>,
    last_flush: Instant,
    clock: ClfClock,
}

impl AccessLog {
    /// Log to an already opened (O_APPEND) file.
    pub fn new(file: Arc<LogFile>, format: Format, now: Instant) -> AccessLog {
        let (generation, fd) = file.current();
        AccessLog {
            file,
            fd,
            generation,
            format,
            buf: Vec::with_capacity(64 * 1024),
            last_flush: now,
            clock: ClfClock::new(),
        }
    }

    /// Lines wait in the buffer?
    pub fn has_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The longest the worker may sleep before the buffer is due.
    pub fn max_wait(&self) -> Option<Duration> {
        self.has_pending().then_some(FLUSH_EVERY)
    }

    /// Write the buffer when it is large or old enough.
    pub fn flush_if_due(&mut self, now: Instant) {
        if self.buf.len() >= FLUSH_BYTES || now.duration_since(self.last_flush) >= FLUSH_EVERY {
            self.flush(now);
        }
    }

    /// Write the buffered lines.
    pub fn flush(&mut self, now: Instant) {
        if self.file.generation() != self.generation {
            // Reopened (SIGUSR1): write to the new file from now on.
            (self.generation, self.fd) = self.file.current();
        }
        let mut off = 0;
        while off < self.buf.len() {
            match sys::write(self.fd.raw(), &self.buf[off..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => off += n,
            }
        }
        self.buf.clear();
        self.last_flush = now;
    }

    /// Log the request whose head is `data` (parsed into `head`, unless it
    /// failed to parse: then only the request line is taken from `data`).
    pub fn log(&mut self, head: &RequestHead, data: &[u8], e: &Entry<'_>) {
        let line_end = memchr::memchr(b'\n', data).unwrap_or(data.len().min(8192));
        let line = data[..line_end].strip_suffix(b"\r").unwrap_or(&data[..line_end]);
        let status = e.status;
        let (referer, ua) = if status < 400 || status == 404 || status == 403 || status == 405 {
            (head.header(data, "referer"), head.header(data, "user-agent"))
        } else {
            (None, None)
        };
        let ip = e.peer.map(|p| p.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let bytes = if e.head_only { 0 } else { e.bytes };
        let (referer, ua) = match self.format {
            Format::Common => (None, None),
            _ => (referer, ua),
        };
        let (out, clock) = (&mut self.buf, &mut self.clock);
        if self.format == Format::Json {
            write_json(out, clock, ip, e, line, bytes, [referer, ua]);
            return;
        }
        write_clf(out, clock, ip, e.wall, line, status, bytes, referer, ua);
        if self.format == Format::Common {
            // Common Log Format ends after the byte count.
            if let Some(cut) = out.len().checked_sub(b" \"-\" \"-\"\n".len()) {
                out.truncate(cut);
                out.push(b'\n');
            }
        }
    }
}

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

/// One JSON line: the combined fields plus `request_time` (seconds) and `cache`.
fn write_json(
    out: &mut Vec<u8>,
    clock: &mut ClfClock,
    ip: IpAddr,
    e: &Entry<'_>,
    request_line: &[u8],
    bytes: u64,
    fields: [Option<&[u8]>; 2],
) {
    let stamp = clock.get(e.wall);
    let stamp = &stamp[1..stamp.len().saturating_sub(1)];
    let _ = write!(out, "{{\"remote_addr\":\"{ip}\",\"time\":\"");
    out.extend_from_slice(stamp);
    out.extend_from_slice(b"\",\"request\":\"");
    json_escaped(out, request_line);
    let _ = write!(out, "\",\"status\":{},\"bytes\":{bytes}", e.status);
    for (key, v) in ["referer", "user_agent"].iter().zip(fields) {
        let _ = write!(out, ",\"{key}\":\"");
        json_escaped(out, v.unwrap_or(b"-"));
        out.push(b'"');
    }
    match e.took {
        Some(d) => {
            let _ = write!(out, ",\"request_time\":{:.6}", d.as_secs_f64());
        }
        None => out.extend_from_slice(b",\"request_time\":null"),
    }
    out.extend_from_slice(b",\"cache\":\"");
    json_escaped(out, e.cache.unwrap_or("-").as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// Append `s` with printable ASCII as it is and every other byte, `"` and
/// `\` written by `escape`: one rule for both formats, so a client's bytes
/// can neither end a field nor start a line in either log.
fn escape_with(out: &mut Vec<u8>, s: &[u8], escape: fn(&mut Vec<u8>, u8)) {
    for &b in s {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b);
        } else {
            escape(out, b);
        }
    }
}

fn json_escaped(out: &mut Vec<u8>, s: &[u8]) {
    escape_with(out, s, |out, b| {
        let _ = write!(out, "\\u{b:04x}");
    });
}

fn escaped(out: &mut Vec<u8>, s: &[u8]) {
    escape_with(out, s, |out, b| {
        let _ = write!(out, "\\x{b:02X}");
    });
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

    #[test]
    fn formats_parse_and_json_lines() {
        assert_eq!("clf".parse::<Format>(), Ok(Format::Common));
        assert_eq!("json".parse::<Format>(), Ok(Format::Json));
        assert!("xml".parse::<Format>().unwrap_err().contains("clf, combined or json"));
        let mut out = Vec::new();
        let e = Entry {
            peer: None,
            status: 404,
            bytes: 7,
            wall: UNIX_EPOCH + Duration::from_secs(784_111_777),
            head_only: false,
            took: Some(Duration::from_micros(1500)),
            cache: Some("HIT"),
        };
        write_json(
            &mut out,
            &mut ClfClock::new(),
            IpAddr::from([10, 0, 0, 1]),
            &e,
            b"GET /\"\x01 HTTP/1.1",
            7,
            [None, Some(b"ua")],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"remote_addr\":\"10.0.0.1\",\"time\":\"06/Nov/1994:08:49:37 +0000\",\"request\":\"GET /\\u0022\\u0001 HTTP/1.1\",\"status\":404,\"bytes\":7,\"referer\":\"-\",\"user_agent\":\"ua\",\"request_time\":0.001500,\"cache\":\"HIT\"}\n"
        );
    }
}
