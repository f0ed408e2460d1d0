//! `weft serve`'s socket flags (issue 25): the send buffer of accepted
//! connections. Flattened into [`crate::serve::ServeArgs`].

use clap::Args;

/// The send buffer: 4 KiB to 64 MiB.
fn parse_send_buffer(s: &str) -> Result<usize, String> {
    let n = crate::args::size_usize(s)?;
    if !(4096..=64 << 20).contains(&n) {
        return Err(format!("send buffer `{s}` out of range (4KiB to 64MiB)"));
    }
    Ok(n)
}

/// Socket settings of `weft serve`'s connections.
#[derive(Args, Debug, Default)]
pub struct NetArgs {
    /// SO_SNDBUF of every accepted connection (the thesis's servers used 64KiB); the kernel
    /// doubles it for its bookkeeping and stops autotuning it [default: autotuned].
    #[arg(long, value_name = "BYTES", value_parser = parse_send_buffer)]
    pub send_buffer: Option<usize>,
}

impl NetArgs {
    /// Put the flags into `c`.
    pub fn apply(&self, c: &mut weft_server::ServeConfig) {
        c.send_buffer = self.send_buffer;
    }
}
