//! `weft load gen trace --param like=SHAPE`: a Common Log Format trace with
//! the statistics the thesis gives for one of its traces (issue 23), from the
//! same fit `weft sim` uses ([`weft_sim::synth`]): `rice` and `ibm` (§3.2.2),
//! `merged` (Rice with MERGED's 17 KB per request, §2.4.4), `ece`, `cs` and
//! `owlnet` (§2.4.4, §4.6; the figures the thesis does not give are assumed,
//! as `weft_sim::synth` says for each).
//!
//! Each line requests `/size/N/t/SHAPE-RANK` (N its size, RANK its popularity
//! rank), so `weft origin` answers it and `weft load gen` can write the files
//! for `weft serve`; `weft sim` and `weft trace coverage` read it back as a
//! log. Lines are one second apart from 1998-06-01, from `hosts` clients
//! drawn uniformly.

use crate::workload::Params;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::sync::Arc;
use weft_sim::synth::{Population, SynthTrace, TraceShape, SHAPES};
use weft_sim::TraceSource;

/// Settings of a trace shaped like one of the thesis's.
#[derive(Clone, Debug)]
pub struct LikeParams {
    /// The shape.
    pub shape: TraceShape,
    /// Lines to write.
    pub requests: u64,
    /// Probability of repeating one of the last 10,000 requests (temporal locality).
    pub locality: f64,
    /// Distinct client hosts.
    pub hosts: u64,
    /// Also write the file set the log names.
    pub files: bool,
}

impl LikeParams {
    /// From `--param like=, requests=, locality=, hosts=, files=` (`like` already taken).
    pub fn from_params(like: &str, p: &mut Params) -> Result<LikeParams, String> {
        let Some(shape) = TraceShape::by_name(like) else {
            let names: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
            return Err(format!(
                "invalid --param like=`{like}` (expected one of {})",
                names.join(", ")
            ));
        };
        let lp = LikeParams {
            shape,
            requests: p.u64("requests", 100_000, 1..=1_000_000_000)?,
            locality: p.f64("locality", 0.0)?,
            hosts: p.u64("hosts", 1000, 1..=10_000_000)?,
            files: p.u64("files", 0, 0..=1)? == 1,
        };
        if !(0.0..1.0).contains(&lp.locality) {
            return Err("--param locality must be at least 0 and below 1".into());
        }
        p.finish("trace", &["like", "requests", "locality", "hosts", "files"])?;
        Ok(lp)
    }
}

/// Write the trace; returns the lines written.
pub fn synthesize(p: &LikeParams, seed: u64, w: &mut impl Write) -> std::io::Result<u64> {
    let population = Arc::new(Population::fit(&p.shape, seed));
    let mut draws = SynthTrace::new(population, p.requests, seed).with_locality(p.locality);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x686f_7374);
    let base = 896_659_200u64; // 1998-06-01 00:00:00 UTC
    let mut n = 0u64;
    while let Some(r) = draws.next_request() {
        // "Mon, 01 Jun 1998 00:00:00 GMT" → "01/Jun/1998:00:00:00".
        let date = weft_http::date::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(base + n));
        let part = |a: usize, b: usize| std::str::from_utf8(&date[a..b]).unwrap_or("?");
        writeln!(
            w,
            "c{}.example - - [{}/{}/{}:{} +0000] \"GET /size/{}/t/{}-{} HTTP/1.0\" 200 {}",
            rng.gen_range(0..p.hosts),
            part(5, 7),
            part(8, 11),
            part(12, 16),
            part(17, 25),
            r.size,
            p.shape.name,
            r.target,
            r.size
        )?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_with_the_shape_sizes() {
        let mut p = Params::parse(&["requests=2000".into(), "locality=0.3".into()]).unwrap();
        let lp = LikeParams::from_params("ece", &mut p).unwrap();
        let mut out = Vec::new();
        assert_eq!(synthesize(&lp, 1, &mut out).unwrap(), 2000);
        let text = String::from_utf8(out).unwrap();
        let mut t = weft_sim::ClfTrace::from_text(&text);
        let mut bytes = 0u64;
        while let Some(r) = t.next_request() {
            bytes += r.size;
        }
        let s = t.stats();
        assert_eq!((s.requests, s.malformed), (2000, 0));
        // ECE: 23 KB per request on average (a 2,000-request sample: loose).
        let mean = bytes as f64 / 2000.0 / 1024.0;
        assert!((10.0..40.0).contains(&mean), "{mean} KiB per request");
        assert!(text.lines().next().unwrap().contains("[01/Jun/1998:00:00:00 +0000]"));
        let mut p = Params::parse(&[]).unwrap();
        assert!(LikeParams::from_params("nasa", &mut p).unwrap_err().contains("owlnet"));
        let mut p = Params::parse(&["objects=3".into()]).unwrap();
        assert!(LikeParams::from_params("rice", &mut p).is_err());
    }
}
