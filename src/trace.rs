//! `weft trace`: the trace tools beside `weft sim` (issue 23). `coverage`
//! prints a trace's request-frequency and size curve and the memory that
//! covers 97/98/99 % of its requests; `cut` writes the prefix of a log whose
//! data set fits a size, looped (the thesis's method for its data-set-size
//! experiments, §2.4.5 and §4.6).

use crate::args::size as parse_size;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use weft_sim::{Input, SynthOptions};

/// `weft trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// The tools.
#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Print a trace's request-frequency and size curve and the memory covering 97/98/99 % of
    /// its requests.
    Coverage(CoverageArgs),
    /// Write the prefix of a log whose data set fits SIZE, looped.
    Cut(CutArgs),
}

/// `weft trace coverage`.
#[derive(Args, Debug)]
pub struct CoverageArgs {
    /// An access log (Common or Combined Log Format, plain or gzip), or a synthetic shape:
    /// rice, ibm, merged, ece, cs, owlnet.
    #[arg(value_name = "TRACE")]
    pub trace: String,
    /// Requests: the length of a synthetic trace, or the most read from a log [default:
    /// 1000000 synthetic, the whole log].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Seed of a synthetic trace [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Also write the result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `weft trace cut`.
#[derive(Args, Debug)]
pub struct CutArgs {
    /// The access log (Common or Combined Log Format, plain or gzip).
    #[arg(value_name = "LOG")]
    pub log: PathBuf,
    /// Keep the longest prefix whose distinct targets hold at most SIZE bytes (`90MiB`).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub data_set: u64,
    /// Write the prefix N times [default: 1, or as many as --requests needs].
    #[arg(long = "loop", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub loops: Option<u64>,
    /// Stop after N lines in all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Write to FILE [default: stdout].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Run `weft trace`.
pub fn run(args: TraceArgs) -> ExitCode {
    match args.command {
        TraceCommand::Coverage(a) => coverage(a),
        TraceCommand::Cut(a) => cut(a),
    }
}

fn coverage(a: CoverageArgs) -> ExitCode {
    let seed = a.seed.unwrap_or(1);
    let input = Input::from_arg(&a.trace, seed);
    let mut source = match input.open(a.requests, seed, SynthOptions::default()) {
        Ok(s) => s,
        Err(e) => return crate::args::fatal(e),
    };
    let c = match weft_sim::tools::coverage(source.as_mut()) {
        Ok(c) => c,
        Err(e) => return crate::args::fatal(format_args!("{}: {e}", a.trace)),
    };
    if c.trace.malformed > 0 {
        eprintln!(
            "weft: {}: {} of {} lines malformed and skipped",
            a.trace, c.trace.malformed, c.trace.lines
        );
    }
    print!("{}", weft_sim::tools::coverage_text(&c));
    if let Some(path) = &a.json {
        if let Err(e) = std::fs::write(path, weft_sim::tools::coverage_json(&input, &c)) {
            return crate::args::fatal(format_args!("--json {}: {e}", path.display()));
        }
    }
    ExitCode::SUCCESS
}

fn cut(a: CutArgs) -> ExitCode {
    let loops = a.loops.unwrap_or(if a.requests.is_some() { u64::MAX } else { 1 });
    let mut out: Box<dyn Write> = match &a.out {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Box::new(std::io::BufWriter::with_capacity(1 << 16, f)),
            Err(e) => return crate::args::fatal(format_args!("--out {}: {e}", p.display())),
        },
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let done = weft_sim::tools::cut(&a.log, a.data_set, loops, a.requests, out.as_mut())
        .and_then(|c| out.flush().map(|_| c).map_err(|e| format!("writing: {e}")));
    match done {
        Ok(c) => {
            eprintln!(
                "weft: {}: {} lines ({} targets, {:.1} MiB{}) written {} lines",
                a.log.display(),
                c.lines,
                c.targets,
                c.data_set_bytes as f64 / (1024.0 * 1024.0),
                if c.whole_log { ", the whole log" } else { "" },
                c.written
            );
            ExitCode::SUCCESS
        }
        Err(e) => crate::args::fatal(e),
    }
}
