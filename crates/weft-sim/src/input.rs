//! Where a run's requests come from: a log file or a synthetic trace, opened
//! anew for each run so every run sees the same requests.

use crate::synth::{HotTargets, Population, SynthTrace, TraceShape};
use crate::trace::{ClfTrace, TraceSource};
use std::path::PathBuf;
use std::sync::Arc;

/// Requests of a synthetic trace unless told otherwise.
pub const DEFAULT_SYNTHETIC_REQUESTS: u64 = 1_000_000;

/// How a synthetic trace departs from the plain fit (see [`crate::synth`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SynthOptions {
    /// Probability of repeating one of the last requests.
    pub locality: f64,
    /// Artificial hot targets.
    pub hot: Option<HotTargets>,
}

/// A trace to run.
pub enum Input {
    /// A synthetic shape (`rice`, `ibm`, `merged`, `ece`, `cs`, `owlnet`), fitted once.
    Synthetic(TraceShape, Arc<Population>),
    /// An access log.
    Log(PathBuf),
}

impl Input {
    /// A synthetic shape's name, or else the path of a log.
    pub fn from_arg(arg: &str, seed: u64) -> Input {
        match TraceShape::by_name(arg) {
            Some(shape) => Input::Synthetic(shape, Arc::new(Population::fit(&shape, seed))),
            None => Input::Log(PathBuf::from(arg)),
        }
    }

    /// A fresh stream of at most `requests` requests (a synthetic trace has
    /// exactly that many, [`DEFAULT_SYNTHETIC_REQUESTS`] if `None`).
    /// `synth` applies to synthetic traces only.
    pub fn open(&self, requests: Option<u64>, seed: u64, synth: SynthOptions) -> Result<Box<dyn TraceSource>, String> {
        Ok(match self {
            Input::Synthetic(_, pop) => Box::new(
                SynthTrace::new(pop.clone(), requests.unwrap_or(DEFAULT_SYNTHETIC_REQUESTS), seed)
                    .with_locality(synth.locality)
                    .with_hot(synth.hot),
            ),
            Input::Log(path) => Box::new(ClfTrace::open(path, requests)?),
        })
    }

    /// The trace as the JSON output describes it.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Input::Synthetic(shape, pop) => serde_json::json!({
                "kind": "synthetic",
                "name": shape.name,
                "targets": shape.targets,
                "data_set_mib": shape.data_set_mib,
                "coverage_share_mib": shape.coverage,
                "anchor_top_targets_share": shape.anchor,
                "mean_request_bytes": pop.mean_request,
                "zipf_alpha": pop.alpha,
            }),
            Input::Log(path) => serde_json::json!({ "kind": "log", "path": path.display().to_string() }),
        }
    }
}

/// The JSON document of a set of runs: the trace, then each run's report
/// with the wall-clock seconds it took.
pub fn json_document(input: &Input, runs: &[(crate::SimReport, f64)]) -> String {
    let runs: Vec<serde_json::Value> = runs
        .iter()
        .map(|(r, wall)| {
            let mut v = serde_json::to_value(r).expect("a report serializes");
            v["wall_seconds"] = serde_json::json!(wall);
            v
        })
        .collect();
    let doc = serde_json::json!({ "trace": input.describe(), "runs": runs });
    serde_json::to_string_pretty(&doc).expect("JSON serializes") + "\n"
}
