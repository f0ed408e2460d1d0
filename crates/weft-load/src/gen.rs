//! `weft load gen WORKLOAD --out DIR`: write what a workload needs on disk.
//!
//! File sets carry the same deterministic content as `weft origin` serves for
//! the same paths (see [`crate::content`]), at the paths the workload
//! requests, so `weft serve DIR` can stand in for the origin and `--verify`
//! still checks every byte:
//!
//! - `one-byte`, `file:SIZE`: `DIR/size/N/file`;
//! - `specweb99`: `DIR[/prefix]/dirNNNNN/classC_F` (`--param dirs=N`, `prefix=`);
//! - `surge`: `DIR/size/N/surge/fID` for the set drawn from `--seed`;
//! - `trace`: `DIR/access.log`, a synthetic Common Log Format trace whose URIs
//!   name `weft origin` sizes (`--param requests=, objects=, hosts=,
//!   duration=, diurnal=`), and the files those URIs name (`DIR/size/N/t/...`;
//!   `--param files=0` writes the log only).

use crate::content;
use crate::workload::{specweb99::SpecWeb99, surge::SurgeSet, trace, Params, Spec};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Trace lines written.
    pub lines: u64,
    /// The main output path.
    pub path: PathBuf,
    /// SURGE: the mean response body over the reference sequence (what a
    /// run that walks the whole sequence averages), bytes.
    pub mean_request: Option<f64>,
}

fn write_file(root: &Path, rel: &str, size: u64) -> Result<(), String> {
    let rel = rel.trim_start_matches('/');
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let f = std::fs::File::create(&p).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    content::write_body(&mut w, format!("/{rel}").as_bytes(), size)
        .and_then(|_| w.flush())
        .map_err(|e| format!("cannot write {}: {e}", p.display()))
}

/// N of a `/size/N/...` URI (plain decimal, as the synthesizer writes it).
fn size_in_uri(uri: &str) -> Option<u64> {
    let rest = uri.strip_prefix("/size/")?;
    let (n, tail) = rest.split_once('/')?;
    if tail.is_empty() || tail.split('/').any(|seg| seg == ".." || seg.is_empty()) {
        return None;
    }
    n.parse().ok()
}

struct Progress {
    on: bool,
    last: Instant,
}

impl Progress {
    fn tick(&mut self, done: u64, total: u64) {
        if self.on && self.last.elapsed().as_secs_f64() >= 1.0 {
            self.last = Instant::now();
            eprint!("\r\x1b[Kwriting {done}/{total} files");
        }
    }
    fn end(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

/// The objects the log at `w.path` names, so `weft serve DIR` can stand in
/// for the origin: every `/size/N/...` URI logged with 200 or 304 (the 404
/// lines name files that must stay missing).
fn write_logged_files(out: &Path, w: &mut Written, prog: &mut Progress) -> Result<(), String> {
    let text = std::fs::read_to_string(&w.path).map_err(|e| format!("cannot read {}: {e}", w.path.display()))?;
    let mut objects: Vec<(&str, u64)> = text
        .lines()
        .filter_map(|l| trace::parse_line(l).ok())
        .filter(|l| l.status == 200 || l.status == 304)
        .filter_map(|l| Some((l.uri, size_in_uri(l.uri)?)))
        .collect();
    objects.sort_unstable();
    objects.dedup();
    for (uri, size) in &objects {
        write_file(out, uri, *size)?;
        w.files += 1;
        w.bytes += size;
        prog.tick(w.files, objects.len() as u64);
    }
    Ok(())
}

/// Write the files or trace of `spec` under `out`.
pub fn generate(spec: &Spec, params: &[String], out: &Path, seed: u64) -> Result<Written, String> {
    let mut p = Params::parse(params)?;
    let mut w = Written {
        path: out.to_path_buf(),
        ..Default::default()
    };
    let mut prog = Progress {
        on: std::io::stderr().is_terminal(),
        last: Instant::now(),
    };
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    // `--param like=SHAPE`: a trace shaped like one of the thesis's.
    let like = matches!(spec, Spec::Trace(_)).then(|| p.take("like")).flatten();
    match spec {
        Spec::OneByte | Spec::File(_) => {
            p.finish(&spec.name(), &[])?;
            let n = if let Spec::File(n) = spec { *n } else { 1 };
            let rel = format!("size/{n}/file");
            write_file(out, &rel, n)?;
            w.files = 1;
            w.bytes = n;
            w.path = out.join(rel);
        }
        Spec::SpecWeb99 => {
            let s = SpecWeb99::from_params(&mut p)?;
            let total = s.dirs as u64 * 36;
            for (path, size) in s.files() {
                write_file(out, &path, size)?;
                w.files += 1;
                w.bytes += size;
                prog.tick(w.files, total);
            }
        }
        Spec::Surge => {
            let s = SurgeSet::from_params(&mut p, seed)?;
            let mut path = Vec::new();
            for f in 0..s.sizes.len() as u32 {
                s.path(f, &mut path);
                write_file(out, &String::from_utf8_lossy(&path), s.sizes[f as usize])?;
                w.files += 1;
                w.bytes += s.sizes[f as usize];
                prog.tick(w.files, s.sizes.len() as u64);
            }
            let total: u64 = s.sequence.iter().map(|&f| s.sizes[f as usize]).sum();
            w.mean_request = Some(total as f64 / s.sequence.len().max(1) as f64);
        }
        Spec::Trace(_) if like.is_some() => {
            // Shaped like one of the thesis's traces (crate::trace_like).
            let lp = crate::trace_like::LikeParams::from_params(like.as_deref().unwrap_or_default(), &mut p)?;
            let path = out.join("access.log");
            let f = std::fs::File::create(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let mut bw = BufWriter::with_capacity(1 << 16, f);
            w.lines = crate::trace_like::synthesize(&lp, seed, &mut bw)
                .and_then(|n| bw.flush().map(|_| n))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            w.path = path;
            if lp.files {
                write_logged_files(out, &mut w, &mut prog)?;
            }
        }
        Spec::Trace(_) => {
            let sp = trace::SynthParams::from_params(&mut p)?;
            let path = out.join("access.log");
            let f = std::fs::File::create(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let mut bw = BufWriter::new(f);
            let n = trace::synthesize(&sp, seed, &mut bw)
                .and_then(|n| bw.flush().map(|_| n))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            w.lines = n as u64;
            w.path = path;
            if sp.files {
                write_logged_files(out, &mut w, &mut prog)?;
            }
        }
        Spec::Polymix | Spec::Ssl | Spec::Url => {
            return Err(format!(
                "workload {} needs no files: weft origin answers it directly",
                spec.name()
            ))
        }
    }
    prog.end();
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specweb99_files_hold_the_origin_content() {
        let dir = std::env::temp_dir().join(format!("weft-gen-{}", std::process::id()));
        let w = generate(&Spec::SpecWeb99, &["dirs=1".into()], &dir, 1).unwrap();
        assert_eq!(w.files, 36);
        assert_eq!(w.bytes, crate::workload::specweb99::BYTES_PER_DIR);
        let body = std::fs::read(dir.join("dir00000/class2_3")).unwrap();
        assert_eq!(body.len(), 40_960);
        assert!(content::matches(content::offset(b"/dir00000/class2_3"), 0, &body));
        let w = generate(&Spec::File(5000), &[], &dir, 1).unwrap();
        let body = std::fs::read(&w.path).unwrap();
        assert!(content::matches(content::offset(b"/size/5000/file"), 0, &body));
        let e = generate(&Spec::Polymix, &[], &dir, 1).unwrap_err();
        assert!(e.contains("weft origin"));
        let e = generate(&Spec::SpecWeb99, &["dirz=1".into()], &dir, 1).unwrap_err();
        assert!(e.contains("dirz"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn sizes_of_trace_uris() {
        assert_eq!(size_in_uri("/size/1234/t/obj7.gif"), Some(1234));
        for bad in [
            "/missing/3.html",
            "/size/12",
            "/size/x/t/a",
            "/size/5/../etc",
            "/size/5//a",
            "/size/5/",
        ] {
            assert_eq!(size_in_uri(bad), None, "{bad}");
        }
    }
}
