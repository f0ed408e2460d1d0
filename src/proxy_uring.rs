//! `--uring-linked` for `weft proxy`: move spliced body chunks with io_uring
//! linked submissions (issue 27; `crates/weft-proxy/src/relay/linked.rs`).

use clap::Args;

/// The linked data path.
#[derive(Args, Debug, Default, Clone)]
pub struct UringLinkedArgs {
    /// Move each spliced chunk with one io_uring_enter: a chain of splice upstream → pipe,
    /// tee into the cache (KeepCopy) and splice pipe → client. Fewer system calls, but io_uring
    /// runs splices in kernel worker threads: more CPU per chunk here (docs/proxy.md)
    /// [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub uring_linked: Option<bool>,

    /// With --uring-linked: write the response head into the pipe so that the first chain sends
    /// it with the first body bytes (one send fewer per miss) [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub uring_linked_head: Option<bool>,
}

impl UringLinkedArgs {
    /// Set `uring_linked` and `uring_linked_head`.
    pub fn apply(&self, c: &mut weft_proxy::ProxyConfig) {
        c.uring_linked = self.uring_linked.unwrap_or(false);
        c.uring_linked_head = self.uring_linked_head.unwrap_or(false);
    }
}
