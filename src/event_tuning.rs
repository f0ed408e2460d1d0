//! `--max-pass` and `--wake-interval`: the tracked backends' pass bound and
//! uring's wake-up batching, as one flattened group (`weft serve`, `weft
//! proxy`, `weft front`; serve words their help more fully).

use clap::Args;
use std::time::Duration;

/// `--max-pass`: 0..1000000.
fn parse_max_pass(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n <= 1_000_000 => Ok(n),
        _ => Err(format!("invalid pass count `{s}` (expected 0..1000000)")),
    }
}

/// `--wake-interval`: at most 10ms (0 is off).
fn parse_wake_interval(s: &str) -> Result<Duration, String> {
    let d = crate::args::duration(s)?;
    if d > Duration::from_millis(10) {
        return Err(format!("wake interval `{s}` is too long (at most 10ms)"));
    }
    Ok(d)
}

/// The event backend's tuning.
#[derive(Args, Debug, Default, Clone)]
pub struct EventTuningArgs {
    /// tracked backends: consecutive passes served from the user-level readiness table before the
    /// kernel is asked anyway; 0 asks the kernel at every pass [default: 8].
    #[arg(long, value_name = "N", value_parser = parse_max_pass)]
    pub max_pass: Option<u32>,

    /// uring and tracked: batch wake-ups under load (io_uring min-wait, Linux 6.12): fewer
    /// io_uring_enter calls for about one interval of added latency under load; at most 10ms,
    /// 0 turns it off [default: 0].
    #[arg(long, value_name = "DURATION", value_parser = parse_wake_interval)]
    pub wake_interval: Option<Duration>,
}

impl EventTuningArgs {
    /// The backend options, defaults where not given.
    pub fn options(&self) -> weft_io::BackendOptions {
        let d = weft_io::BackendOptions::default();
        weft_io::BackendOptions {
            max_pass: self.max_pass.unwrap_or(d.max_pass),
            wake_interval: self.wake_interval.unwrap_or(d.wake_interval),
        }
    }
}
