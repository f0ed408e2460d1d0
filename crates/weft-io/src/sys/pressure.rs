//! Memory-pressure notifications (thesis 004 §2.2.7: a cache that follows
//! memory pressure as well as a byte budget), in the two forms this kernel
//! offers (`docs/serve.md`, "Memory pressure"):
//!
//! - **cgroup v1** `memory.pressure_level` (the memory controller here is
//!   v1): an eventfd registered through the cgroup's `cgroup.event_control`
//!   at a level (`low`: any reclaim; `medium`: reclaim is working hard;
//!   `critical`: about to OOM). It reports pressure on *this* process's
//!   cgroup, which is what a limited server cares about.
//! - **PSI** `/proc/pressure/memory` triggers: `some STALL WINDOW` (µs), polled
//!   for POLLPRI. System-wide here (the v2 memory controller, which has a
//!   per-cgroup `memory.pressure`, is not mounted). Without
//!   CAP_SYS_RESOURCE the window must be a multiple of 2 s, or the write
//!   fails with EINVAL; [`psi_trigger`] uses 2 s.
//!
//! Both are watched by blocking [`Watch::wait`] calls on a thread of their own.

use super::{bump, poll, Fd, SysKind};
use std::io::{self, Write};
use std::time::Duration;

/// A registered notification.
pub struct Watch {
    fd: Fd,
    /// PSI: POLLPRI on the trigger; cgroup: POLLIN on the eventfd.
    psi: bool,
    /// cgroup: the `memory.pressure_level` file, open while registered.
    _level: Option<std::fs::File>,
}

/// The directory of this process's v1 memory cgroup.
pub fn own_memory_cgroup() -> io::Result<std::path::PathBuf> {
    let s = std::fs::read_to_string("/proc/self/cgroup")?;
    let path = s
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':').skip(1);
            f.next().zip(f.next())
        })
        .find(|(ctl, _)| ctl.split(',').any(|c| c == "memory"))
        .map(|(_, p)| p.to_string())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no v1 memory cgroup"))?;
    Ok(std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
}

/// Notify at `level` (low, medium or critical) of this process's v1 memory cgroup.
pub fn cgroup_level(level: &str) -> io::Result<Watch> {
    let dir = own_memory_cgroup()?;
    let efd = super::eventfd()?;
    let pl = std::fs::File::open(dir.join("memory.pressure_level"))?;
    let line = format!("{} {} {level}", efd.raw(), std::os::fd::AsRawFd::as_raw_fd(&pl));
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.event_control"))?
        .write_all(line.as_bytes())?;
    Ok(Watch {
        fd: efd,
        psi: false,
        _level: Some(pl),
    })
}

/// Notify when tasks stall on memory for `stall` within a 2 s window (PSI
/// "some"), system-wide.
pub fn psi_trigger(stall: Duration) -> io::Result<Watch> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/pressure/memory")?;
    let stall = stall.as_micros().clamp(1, 2_000_000);
    // The kernel overwrites the last byte written with NUL: end with one.
    f.write_all(format!("some {stall} 2000000\0").as_bytes())?;
    Ok(Watch {
        fd: Fd::from(std::os::fd::OwnedFd::from(f)),
        psi: true,
        _level: None,
    })
}

impl Watch {
    /// Wait up to `timeout` for a notification; true when one came.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        bump(SysKind::Other);
        let events = if self.psi { libc::POLLPRI } else { libc::POLLIN };
        let mut fds = [libc::pollfd {
            fd: self.fd.raw(),
            events,
            revents: 0,
        }];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        match poll(&mut fds, ms) {
            Ok(0) => Ok(false),
            Ok(_) if fds[0].revents & libc::POLLERR != 0 => Err(io::Error::other("pressure watch gone")),
            Ok(_) => {
                if !self.psi {
                    super::eventfd_drain(&self.fd);
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_where_the_kernel_allows() {
        // Either works here or fails with a plain error; neither panics nor
        // reports an event out of nothing within a millisecond... usually:
        // a busy machine may really be under pressure, so only the
        // registration is checked.
        if let Ok(w) = psi_trigger(Duration::from_millis(100)) {
            let _ = w.wait(Duration::from_millis(1)).unwrap();
        }
        if let Ok(w) = cgroup_level("critical") {
            let _ = w.wait(Duration::from_millis(1)).unwrap();
        }
    }
}
