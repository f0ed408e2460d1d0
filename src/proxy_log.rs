//! `--access-log` and `--access-log-format` of `weft proxy` and `weft front`:
//! weft serve's formats, with the cache status and request time.

use crate::serve::OffPath;
use clap::Args;

/// Access-log flags of the proxy roles.
#[derive(Args, Debug, Default)]
pub struct ProxyLogArgs {
    /// Access log (one line a response: client, request, status, body bytes, and in the json format
    /// request_time and the cache status HIT, STALE, REVALIDATED, EXPIRED, MISS, BYPASS or -), or
    /// `off` [default: off]. Reopened on SIGUSR1.
    #[arg(long, value_name = "FILE|off", value_parser = crate::serve::parse_off_path)]
    pub access_log: Option<OffPath>,

    // The line format.
    #[command(flatten)]
    pub log: crate::log_flags::LogArgs,
}

impl ProxyLogArgs {
    /// Copy what was given onto the proxy's configuration.
    pub fn apply(&self, c: &mut weft_proxy::ProxyConfig) {
        if let Some(v) = &self.access_log {
            c.access_log = v.0.clone();
        }
        if let Some(f) = self.log.access_log_format {
            c.access_log_format = f;
        }
    }
}
