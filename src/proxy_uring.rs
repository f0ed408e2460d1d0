//! `--uring-linked` for `weft proxy`: move spliced body chunks with io_uring
//! linked submissions (issue 27; `crates/weft-proxy/src/relay/linked.rs`).

use clap::Args;
use weft_io::BackendKind;

/// The linked data path.
#[derive(Args, Debug, Default, Clone)]
pub struct UringLinkedArgs {
    /// Move each spliced chunk with one io_uring_enter: a chain of splice upstream → pipe,
    /// tee into the cache (KeepCopy) and splice pipe → client, the response head written
    /// into the pipe ahead of the body [default: on with --event uring or tracked, else off].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub uring_linked: Option<bool>,
}

impl UringLinkedArgs {
    /// Set `uring_linked`, by default from the event backend.
    pub fn apply(&self, c: &mut weft_proxy::ProxyConfig) {
        c.uring_linked = self
            .uring_linked
            .unwrap_or(matches!(c.event, BackendKind::Uring | BackendKind::Tracked));
    }
}
