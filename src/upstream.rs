//! The flags of a role that forwards to upstream servers over pooled
//! connections: the proxy's origins, the front-end's back-ends. One flag
//! group, flattened into `weft proxy` and `weft front`, copied onto the
//! proxy's configuration (the front-end relays with the proxy's engine).

use crate::args::{duration, set_given};
use clap::Args;
use std::time::Duration;

/// `--connect-timeout`, `--upstream-timeout`, `--pool-size`, `--pool-idle-timeout`,
/// `--tunnel-timeout`.
///
/// `--pool-size` takes 0 (keep no idle connection) here; a role that needs
/// at least one narrows it with `mut_arg` (`weft front`).
#[derive(Args, Debug, Default)]
pub struct UpstreamArgs {
    /// Give up connecting to an upstream (origin or back-end) after this long: 504 [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub connect_timeout: Option<Duration>,

    /// Give up on an upstream (origin or back-end) silent this long: 504 before the response head,
    /// the client connection is closed after it [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub upstream_timeout: Option<Duration>,

    /// Idle connections kept per upstream (origin or back-end) address and worker (unused ones expire
    /// after --pool-idle-timeout) [default: 1024].
    #[arg(long, value_name = "N")]
    pub pool_size: Option<usize>,

    /// Close pooled idle upstream connections after this long [default: 15s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub pool_idle_timeout: Option<Duration>,

    /// Close a tunnel (CONNECT, or an upgraded connection such as a WebSocket) that moved no byte
    /// either way this long; WebSockets that ping less often than the idle timeout want more
    /// [default: the idle timeout].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub tunnel_timeout: Option<Duration>,
}

impl UpstreamArgs {
    /// Copy the flags given onto the proxy's configuration.
    pub fn apply(&self, c: &mut weft_proxy::ProxyConfig) {
        set_given!(self, c; connect_timeout, upstream_timeout, pool_size, pool_idle_timeout);
        if self.tunnel_timeout.is_some() {
            c.tunnel_timeout = self.tunnel_timeout;
        }
    }
}
