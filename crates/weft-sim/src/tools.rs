//! Trace tools beside the simulator (issue 23; the thesis's §2.4.4, §4.6 and
//! §3.2.2 method): a trace's request-frequency and size curve and the memory
//! that covers 97/98/99 % of its requests ([`coverage`]), and a log cut to a
//! chosen data-set size and looped ([`cut`]), as the thesis truncated the ECE
//! log "as appropriate to achieve a given dataset size" and replayed it "as a
//! loop".

use crate::trace::{open_log, parse_log_line, TraceSource, TraceStats};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// Request shares whose covering memory [`coverage`] reports.
pub const SHARES: [f64; 3] = [0.97, 0.98, 0.99];

/// Most distinct targets [`coverage`] counts (4 bytes + 8 bytes each).
pub const MAX_TARGETS: usize = 50_000_000;

/// One point of the curve: the `rank` most requested targets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CurvePoint {
    /// Targets, most requested first.
    pub rank: u64,
    /// Share of requests they draw.
    pub request_share: f64,
    /// Their bytes.
    pub bytes: u64,
    /// Share of the data set's bytes.
    pub bytes_share: f64,
}

/// What [`coverage`] found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Coverage {
    /// What reading the trace found.
    pub trace: TraceStats,
    /// Mean bytes per request.
    pub mean_request_bytes: f64,
    /// Share of requests to the most requested target.
    pub top_share: f64,
    /// (share, bytes of the most requested targets that draw it), for [`SHARES`].
    pub covering: Vec<(f64, u64)>,
    /// The curve at ranks 1, 2, 5, 10, 20, 50... and the last.
    pub curve: Vec<CurvePoint>,
}

/// Count every target's requests and largest size, then sort by requests.
pub fn coverage(source: &mut dyn TraceSource) -> Result<Coverage, String> {
    let mut counts: Vec<(u32, u64)> = Vec::new();
    while let Some(r) = source.next_request() {
        let i = r.target as usize;
        if i >= counts.len() {
            if i >= MAX_TARGETS {
                return Err(format!("more than {MAX_TARGETS} distinct targets"));
            }
            counts.resize(i + 1, (0, 0));
        }
        let c = &mut counts[i];
        c.0 = c.0.saturating_add(1);
        c.1 = c.1.max(r.size);
    }
    if let Some(e) = source.error() {
        return Err(e);
    }
    counts.retain(|c| c.0 > 0);
    counts.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let requests: u64 = counts.iter().map(|c| u64::from(c.0)).sum();
    let bytes: u64 = counts.iter().map(|c| c.1).sum();
    let weighted: f64 = counts.iter().map(|c| f64::from(c.0) * c.1 as f64).sum();
    let (mut seen, mut held) = (0u64, 0u64);
    let mut covering = Vec::new();
    let mut curve = Vec::new();
    let mut next_mark = 1u64;
    let mut wanted = SHARES.iter().peekable();
    for (i, c) in counts.iter().enumerate() {
        seen += u64::from(c.0);
        held += c.1;
        let share = seen as f64 / requests as f64;
        while let Some(&&s) = wanted.peek() {
            if share + 1e-12 < s {
                break;
            }
            covering.push((s, held));
            wanted.next();
        }
        let rank = i as u64 + 1;
        if rank == next_mark || i + 1 == counts.len() {
            curve.push(CurvePoint {
                rank,
                request_share: share,
                bytes: held,
                bytes_share: held as f64 / bytes.max(1) as f64,
            });
            next_mark = match next_mark.to_string().as_bytes()[0] {
                b'1' | b'5' => next_mark * 2,
                _ => next_mark / 2 * 5,
            };
        }
    }
    Ok(Coverage {
        trace: source.stats(),
        mean_request_bytes: if requests > 0 { weighted / requests as f64 } else { 0.0 },
        top_share: counts.first().map_or(0.0, |c| f64::from(c.0) / requests.max(1) as f64),
        covering,
        curve,
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The coverage as text: totals, the covering memory, then the curve.
pub fn coverage_text(c: &Coverage) -> String {
    let mut s = format!(
        "requests {}  targets {}  data set {:.1} MiB  mean request {:.1} KiB  hottest target {:.2} % of requests\n",
        c.trace.requests,
        c.trace.targets,
        mib(c.trace.data_set_bytes),
        c.mean_request_bytes / 1024.0,
        c.top_share * 100.0
    );
    for (share, bytes) in &c.covering {
        s += &format!("{:.0} % of requests: {:.1} MiB\n", share * 100.0, mib(*bytes));
    }
    s += "targets  requests %  MiB  data set %\n";
    for p in &c.curve {
        s += &format!(
            "{:>7}  {:>10.2}  {:>8.1}  {:>10.2}\n",
            p.rank,
            p.request_share * 100.0,
            mib(p.bytes),
            p.bytes_share * 100.0
        );
    }
    s
}

/// The coverage as a JSON document, with the trace as `weft sim --json` describes it.
pub fn coverage_json(input: &crate::Input, c: &Coverage) -> String {
    let doc = serde_json::json!({ "trace": input.describe(), "coverage": c });
    serde_json::to_string_pretty(&doc).expect("JSON serializes") + "\n"
}

/// What [`cut`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Lines of the log kept (the prefix).
    pub lines: u64,
    /// Distinct simulated targets in the prefix.
    pub targets: u64,
    /// Their bytes (largest logged size of each).
    pub data_set_bytes: u64,
    /// Lines written (the prefix, looped).
    pub written: u64,
    /// The log ended before the data set reached the size asked.
    pub whole_log: bool,
}

/// Read the next line of `log` into `line`; false at the end.
fn next_line(reader: &mut dyn BufRead, line: &mut Vec<u8>, log: &Path) -> Result<bool, String> {
    line.clear();
    let n = reader
        .read_until(b'\n', line)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(n > 0)
}

/// Lines of the longest prefix of `log` whose simulated targets (GET, 2xx
/// or 304, as `weft sim` reads them) hold at most `data_set` bytes.
/// Malformed lines are kept, as they are in the log.
fn prefix(log: &Path, data_set: u64) -> Result<Cut, String> {
    let mut reader = open_log(log)?;
    let mut sizes: HashMap<Box<[u8]>, u64> = HashMap::new();
    let mut cut = Cut {
        whole_log: true,
        ..Cut::default()
    };
    let mut line = Vec::with_capacity(512);
    loop {
        if !next_line(reader.as_mut(), &mut line, log)? {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if let Ok(l) = parse_log_line(text) {
            if l.method == b"GET" && (l.status / 100 == 2 || l.status == 304) {
                let old = sizes.get(l.uri).copied();
                let grow = l.bytes.saturating_sub(old.unwrap_or(0));
                if cut.data_set_bytes + grow > data_set {
                    cut.whole_log = false;
                    break;
                }
                cut.data_set_bytes += grow;
                if old.is_none() {
                    cut.targets += 1;
                }
                if grow > 0 || old.is_none() {
                    sizes.insert(l.uri.into(), old.unwrap_or(0) + grow);
                }
            }
        }
        cut.lines += 1;
    }
    Ok(cut)
}

/// Write the prefix of `log` whose data set is at most `data_set` bytes to
/// `out`, `loops` times over, and stop after `requests` lines in all if set
/// (`loops` = `u64::MAX` with `requests` loops until that many are written).
pub fn cut(log: &Path, data_set: u64, loops: u64, requests: Option<u64>, out: &mut dyn Write) -> Result<Cut, String> {
    let mut cut = prefix(log, data_set)?;
    if cut.lines == 0 {
        return Err(format!(
            "{}: no prefix of the log fits {data_set} bytes (its first target is larger)",
            log.display()
        ));
    }
    let limit = requests.unwrap_or(u64::MAX);
    let mut line = Vec::with_capacity(512);
    'outer: for _ in 0..loops.max(1) {
        let mut reader = open_log(log)?;
        let before = cut.written;
        for _ in 0..cut.lines {
            if cut.written >= limit {
                break 'outer;
            }
            if !next_line(reader.as_mut(), &mut line, log)? {
                break;
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            out.write_all(&line).map_err(|e| format!("writing: {e}"))?;
            cut.written += 1;
        }
        if cut.written == before {
            break;
        }
    }
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::ClfTrace;

    const LOG: &str = "\
h - - [01/Jun/1998:00:00:00 +0000] \"GET /a HTTP/1.0\" 200 1000
h - - [01/Jun/1998:00:00:01 +0000] \"GET /a HTTP/1.0\" 200 1000
h - - [01/Jun/1998:00:00:02 +0000] \"GET /b HTTP/1.0\" 200 3000
h - - [01/Jun/1998:00:00:03 +0000] \"POST /form HTTP/1.0\" 200 10
h - - [01/Jun/1998:00:00:04 +0000] \"GET /a HTTP/1.0\" 304 -
h - - [01/Jun/1998:00:00:05 +0000] \"GET /c HTTP/1.0\" 200 6000
";

    #[test]
    fn coverage_of_a_tiny_log_by_hand() {
        let mut t = ClfTrace::from_text(LOG);
        let c = coverage(&mut t).unwrap();
        // /a: 3 requests of 1000, /b: 1 of 3000, /c: 1 of 6000.
        assert_eq!(c.trace.requests, 5);
        assert_eq!(c.trace.data_set_bytes, 10_000);
        assert!((c.top_share - 0.6).abs() < 1e-9);
        assert!((c.mean_request_bytes - 12_000.0 / 5.0).abs() < 1e-9);
        // 97-99 % need every target: all 10,000 bytes.
        assert_eq!(c.covering, vec![(0.97, 10_000), (0.98, 10_000), (0.99, 10_000)]);
        assert_eq!(c.curve[0].rank, 1);
        assert_eq!(c.curve[0].bytes, 1000);
        assert_eq!(c.curve.last().unwrap().rank, 3);
        assert!(coverage_text(&c).contains("97 % of requests: 0.0 MiB"));
    }

    #[test]
    fn cut_keeps_the_prefix_that_fits_and_loops_it() {
        let path = std::env::temp_dir().join(format!("weft-sim-cut-{}.log", std::process::id()));
        std::fs::write(&path, LOG).unwrap();
        let mut out = Vec::new();
        // 4,000 bytes: /a and /b fit, /c (6,000) does not: five lines kept.
        let c = cut(&path, 4_000, 2, None, &mut out).unwrap();
        assert_eq!((c.lines, c.targets, c.data_set_bytes, c.written), (5, 2, 4_000, 10));
        assert!(!c.whole_log);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 10);
        assert!(!text.contains("/c "));
        // A request cap stops mid-loop; a size above the data set keeps it all.
        let mut out = Vec::new();
        let c = cut(&path, 1 << 30, 3, Some(7), &mut out).unwrap();
        assert_eq!((c.lines, c.written), (6, 7));
        assert!(c.whole_log);
        let e = cut(&path, 10, 1, None, &mut Vec::new()).unwrap_err();
        assert!(e.contains("no prefix"), "{e}");
        std::fs::remove_file(&path).ok();
    }
}
