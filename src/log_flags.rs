//! The access-log flags shared by the roles that write one (`weft serve`
//! today): the line format beside `--access-log FILE`.

use clap::Args;

/// Access-log options (flattened into a role's arguments).
#[derive(Args, Clone, Debug, Default)]
pub struct LogArgs {
    /// Access log line format: `combined` (Combined Log Format), `clf` (Common Log Format) or
    /// `json` (one object a line, with request_time and cache) [default: combined].
    /// The file is reopened on SIGUSR1 (rename it, then send the signal).
    #[arg(long, value_name = "clf|combined|json")]
    pub access_log_format: Option<weft_server::accesslog::Format>,
}
