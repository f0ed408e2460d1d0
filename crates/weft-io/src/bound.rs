//! What a started role (serve, proxy, front, origin) shows the process that
//! runs it: where it listens and the switch that stops it.

use crate::group::WorkerGroup;
use crate::workers::Shutdown;
use std::net::SocketAddr;

/// A started role's addresses and stop switch.
#[derive(Clone)]
pub struct Bound {
    /// The bound listening address (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// The admin endpoint's address, when `--admin` was given.
    pub admin: Option<SocketAddr>,
    /// The switch that stops the role gracefully.
    pub shutdown: Shutdown,
}

impl Bound {
    /// A role listening on `addr` (and `admin`) with these workers.
    pub fn of<S: crate::group::GroupStats>(
        addr: SocketAddr,
        admin: Option<SocketAddr>,
        workers: &WorkerGroup<S>,
    ) -> Bound {
        Bound {
            addr,
            admin,
            shutdown: workers.shutdown().clone(),
        }
    }
}
