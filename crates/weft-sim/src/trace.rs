//! Simulator input: a stream of (target, size) requests (§3.2.2), from a
//! Common or Combined Log Format access log (plain or gzip, read line by
//! line) or from a synthetic generator ([`crate::synth`]).
//!
//! From a log, only GET requests answered 2xx or 304 are simulated; other
//! methods and statuses are counted as skipped. A target is the request URI
//! with its query (the thesis's "URL and any applicable arguments"); its size
//! is the largest body logged for it so far, so a 304 (no body) costs what
//! the target costs. Malformed lines are counted, the first one is kept for
//! the report, and the trace is refused only when most lines are malformed.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One request of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRequest {
    /// Dense target id (first-seen order for logs, popularity rank for synthetic traces).
    pub target: u64,
    /// Bytes to send.
    pub size: u64,
}

/// What reading the trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceStats {
    /// Lines (or synthetic draws) read.
    pub lines: u64,
    /// Requests handed to the simulator.
    pub requests: u64,
    /// Malformed lines.
    pub malformed: u64,
    /// Well-formed lines not simulated (not GET, or not 2xx/304).
    pub skipped: u64,
    /// The first malformed line: number and reason.
    pub first_malformed: Option<(u64, String)>,
    /// Distinct targets seen.
    pub targets: u64,
    /// Bytes of all distinct targets (their largest logged sizes).
    pub data_set_bytes: u64,
}

/// A source of requests, pulled one at a time.
pub trait TraceSource {
    /// The next request, or `None` at the end (or on a fatal error).
    fn next_request(&mut self) -> Option<TraceRequest>;
    /// Counts so far.
    fn stats(&self) -> TraceStats;
    /// A fatal problem (unreadable input, mostly malformed lines).
    fn error(&self) -> Option<String> {
        None
    }
}

/// Lines examined before a mostly malformed trace is refused early.
const EARLY_VERDICT: u64 = 1000;

/// A parsed log line: the parts the simulator uses.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// Request method.
    pub method: &'a [u8],
    /// Request URI.
    pub uri: &'a [u8],
    /// Final status.
    pub status: u16,
    /// Body bytes (`-` = 0).
    pub bytes: u64,
}

fn find(hay: &[u8], b: u8) -> Option<usize> {
    hay.iter().position(|&c| c == b)
}

/// Parse one CLF or Combined line; `Err` says what is wrong.
/// `host ident user [time] "METHOD URI PROTO" status bytes ["referer" "agent"]`
pub fn parse_log_line(line: &[u8]) -> Result<LogLine<'_>, &'static str> {
    let open = find(line, b'[').ok_or("no [time]")?;
    if open == 0 || line[..open].split(|&c| c == b' ').filter(|f| !f.is_empty()).count() != 3 {
        return Err("expected host, ident and user before [time]");
    }
    let close = open + find(&line[open..], b']').ok_or("unterminated [time]")?;
    let rest = line[close + 1..].strip_prefix(b" \"").ok_or("no quoted request")?;
    // The request ends at the quote followed by ` STATUS`.
    let mut end = None;
    let mut i = 0;
    while let Some(q) = find(&rest[i..], b'"') {
        let at = i + q;
        if rest.get(at + 1) == Some(&b' ') && rest.get(at + 2).is_some_and(u8::is_ascii_digit) {
            end = Some(at);
            break;
        }
        i = at + 1;
    }
    let end = end.ok_or("unterminated request")?;
    let mut request = rest[..end].split(|&c| c == b' ').filter(|f| !f.is_empty());
    let method = request.next().ok_or("empty request")?;
    let uri = request.next().ok_or("no URI")?;
    let mut tail = rest[end + 2..].split(|&c| c == b' ');
    let status = tail
        .next()
        .filter(|s| s.len() == 3)
        .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok())
        .filter(|s| (100..=599).contains(s))
        .ok_or("bad status")?;
    let bytes = match tail.next().map(|b| b.strip_suffix(b"\r").unwrap_or(b)) {
        Some(b"-") => 0,
        Some(b) if !b.is_empty() && b.len() <= 19 && b.iter().all(u8::is_ascii_digit) => {
            b.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'))
        }
        _ => return Err("bad byte count"),
    };
    Ok(LogLine {
        method,
        uri,
        status,
        bytes,
    })
}

/// A log file as lines, plain or gzip (recognised by its magic bytes).
pub fn open_log(path: &Path) -> Result<Box<dyn BufRead>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buffered = BufReader::with_capacity(1 << 16, file);
    let gz = buffered
        .fill_buf()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> = if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(buffered),
        ))
    } else {
        Box::new(buffered)
    };
    Ok(reader)
}

/// An access log read line by line.
pub struct ClfTrace {
    reader: Box<dyn BufRead>,
    line: Vec<u8>,
    ids: HashMap<Box<[u8]>, u32>,
    sizes: Vec<u64>,
    stats: TraceStats,
    limit: u64,
    error: Option<String>,
}

impl ClfTrace {
    /// Open `path`; gzip is recognised by its magic bytes. At most `limit` requests.
    pub fn open(path: &Path, limit: Option<u64>) -> Result<ClfTrace, String> {
        Ok(ClfTrace::from_reader(open_log(path)?, limit))
    }

    /// Read from any buffered reader (tests, stdin).
    pub fn from_reader(reader: Box<dyn BufRead>, limit: Option<u64>) -> ClfTrace {
        ClfTrace {
            reader,
            line: Vec::with_capacity(512),
            ids: HashMap::new(),
            sizes: Vec::new(),
            stats: TraceStats::default(),
            limit: limit.unwrap_or(u64::MAX),
            error: None,
        }
    }

    /// From text in memory.
    pub fn from_text(text: &str) -> ClfTrace {
        let owned: Box<dyn Read> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        ClfTrace::from_reader(Box::new(BufReader::new(owned)), None)
    }

    fn mostly_malformed(&self) -> bool {
        self.stats.malformed * 2 > self.stats.lines
    }

    fn refuse(&mut self) {
        let first = match &self.stats.first_malformed {
            Some((n, why)) => format!(" (line {n}: {why})"),
            None => String::new(),
        };
        self.error = Some(format!(
            "{} of {} lines are not Common/Combined Log Format{first}",
            self.stats.malformed, self.stats.lines
        ));
    }

    fn intern(&mut self, uri: &[u8], bytes: u64) -> TraceRequest {
        let id = match self.ids.get(uri) {
            Some(&id) => id,
            None => {
                let id = self.sizes.len() as u32;
                self.ids.insert(uri.into(), id);
                self.sizes.push(0);
                self.stats.targets += 1;
                id
            }
        };
        let size = &mut self.sizes[id as usize];
        if bytes > *size {
            self.stats.data_set_bytes += bytes - *size;
            *size = bytes;
        }
        TraceRequest {
            target: u64::from(id),
            size: *size,
        }
    }
}

impl TraceSource for ClfTrace {
    fn next_request(&mut self) -> Option<TraceRequest> {
        if self.error.is_some() || self.stats.requests >= self.limit {
            return None;
        }
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Ok(0) => {
                    if self.mostly_malformed() {
                        self.refuse();
                    }
                    return None;
                }
                Ok(_) => {}
                Err(e) => {
                    self.error = Some(format!("reading the trace: {e}"));
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                self.line = line;
                continue;
            }
            self.stats.lines += 1;
            let parsed = parse_log_line(text).map(|l| {
                (
                    l.method == b"GET" && (l.status / 100 == 2 || l.status == 304),
                    l.uri,
                    l.bytes,
                )
            });
            let out = match parsed {
                Ok((true, uri, bytes)) => Some(self.intern(uri, bytes)),
                Ok((false, _, _)) => {
                    self.stats.skipped += 1;
                    None
                }
                Err(why) => {
                    self.stats.malformed += 1;
                    if self.stats.first_malformed.is_none() {
                        self.stats.first_malformed = Some((self.stats.lines, why.to_string()));
                    }
                    None
                }
            };
            self.line = line;
            if self.stats.lines == EARLY_VERDICT && self.mostly_malformed() {
                self.refuse();
                return None;
            }
            if let Some(r) = out {
                self.stats.requests += 1;
                return Some(r);
            }
        }
    }
    fn stats(&self) -> TraceStats {
        self.stats.clone()
    }
    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_and_combined_lines() {
        let l = parse_log_line(br#"h - - [10/Oct/2000:13:55:36 -0700] "GET /a.gif?x=1 HTTP/1.0" 200 2326"#).unwrap();
        assert_eq!(
            (l.method, l.uri, l.status, l.bytes),
            (&b"GET"[..], &b"/a.gif?x=1"[..], 200, 2326)
        );
        let l = parse_log_line(
            br#"1.2.3.4 - bob [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 304 - "http://r/" "UA "x" 1""#,
        )
        .unwrap();
        assert_eq!((l.uri, l.status, l.bytes), (&b"/"[..], 304, 0));
        assert!(parse_log_line(b"garbage").is_err());
        assert!(parse_log_line(br#"h - - [t] "GET / HTTP/1.0" 2000 1"#).is_err());
    }

    #[test]
    fn streams_counts_and_sizes() {
        let text = "h - - [t] \"GET /a HTTP/1.0\" 200 100\n\
                    h - - [t] \"POST /a HTTP/1.0\" 200 5\n\
                    oops\n\
                    \n\
                    h - - [t] \"GET /b HTTP/1.0\" 404 10\n\
                    h - - [t] \"GET /a HTTP/1.0\" 304 -\n\
                    h - - [t] \"GET /c HTTP/1.0\" 200 7\n";
        let mut t = ClfTrace::from_text(text);
        let got: Vec<_> = std::iter::from_fn(|| t.next_request()).collect();
        assert_eq!(
            got,
            vec![
                TraceRequest { target: 0, size: 100 },
                TraceRequest { target: 0, size: 100 },
                TraceRequest { target: 1, size: 7 },
            ]
        );
        let s = t.stats();
        assert_eq!(
            (s.lines, s.requests, s.malformed, s.skipped, s.targets, s.data_set_bytes),
            (6, 3, 1, 2, 2, 107)
        );
        assert_eq!(s.first_malformed, Some((3, "no [time]".to_string())));
        assert!(t.error().is_none());
    }

    #[test]
    fn a_mostly_malformed_trace_is_refused() {
        let mut t = ClfTrace::from_text("x\ny\nh - - [t] \"GET /a HTTP/1.0\" 200 1\n");
        while t.next_request().is_some() {}
        assert!(t.error().unwrap().contains("2 of 3 lines"));
    }
}
