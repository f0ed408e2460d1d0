//! Starting the blocking architectures (`--arch mt|mp`); the per-connection
//! code is `worker/blocking.rs`.
//!
//! The thesis's settings (§4.5), scaled to this machine (`docs/serve.md`):
//! MT runs [`MT_THREADS`] threads, MP [`MP_PROCESSES`] processes, each
//! process with its own small caches ([`MP_PATH_CACHE`] entries,
//! [`MP_FILE_CACHE`] bytes): those private copies are MP's deficit.
//!
//! MP: this process binds the port with SO_REUSEPORT, starts the serving
//! processes (this executable again, told by `WEFT_MP_CHILD` which address
//! to bind beside it, each as a one-thread MT server), waits until each
//! listens, then closes its own listener before announcing the address: so
//! no connection is ever queued on it. The processes are killed when the
//! server stops.

use crate::{ServeConfig, ServeStats, Server};
use std::io::{self, BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_io::sys::Fd;
use weft_io::{WorkerGroup, WorkerSeat};

/// MT threads (the thesis: 64).
pub const MT_THREADS: usize = 64;
/// MP processes (the thesis: 32).
pub const MP_PROCESSES: usize = 32;
/// Path cache entries of each MP process (the thesis: 200).
pub const MP_PATH_CACHE: usize = 200;
/// File cache bytes of each MP process (the thesis: 4 MB).
pub const MP_FILE_CACHE: u64 = 4 << 20;
/// The environment variable that makes `weft serve` one of an MP server's processes.
pub const MP_CHILD_ENV: &str = "WEFT_MP_CHILD";

/// MP's serving processes, killed and reaped when dropped.
#[derive(Default)]
pub struct Children(Arc<Mutex<Vec<Child>>>);

impl Drop for Children {
    fn drop(&mut self) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for c in v.iter_mut() {
            let _ = c.kill();
        }
        for c in v.iter_mut() {
            let _ = c.wait();
        }
        v.clear();
    }
}

/// Start an MP server: the processes, then a supervising thread that holds
/// the shutdown switch.
pub(crate) fn start_mp(
    cfg: ServeConfig,
    listeners: Vec<Fd>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
) -> io::Result<Server> {
    let n = cfg.pool.unwrap_or(MP_PROCESSES).max(1);
    let exe = std::env::current_exe()?;
    let children = Children::default();
    for i in 0..n {
        let mut child = Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(MP_CHILD_ENV, addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start MP process {i}: {e}")))?;
        let out = child.stdout.take();
        children.0.lock().unwrap_or_else(|e| e.into_inner()).push(child);
        let Some(out) = out else {
            return Err(io::Error::other("MP process without stdout"));
        };
        let mut r = BufReader::new(out);
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 || !line.starts_with("listening on") {
            return Err(io::Error::other(format!("MP process {i} did not start")));
        }
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
        });
    }
    // Every process listens now: this listener closes unused, before the
    // address is announced. The supervisor's seat gets a placeholder.
    drop(listeners);
    let workers = WorkerGroup::start("weft-mp", vec![weft_io::sys::eventfd()?], move |seat: WorkerSeat| {
        while !seat.shutdown.requested() {
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(ServeStats::default())
    })?;
    Ok(Server {
        addr,
        admin_addr,
        workers,
        helpers: None,
        children,
    })
}

/// For a process started by [`start_mp`]: bind beside the parent, one
/// connection at a time, with the thesis's small private caches.
pub fn as_mp_child(c: &mut ServeConfig, addr: SocketAddr) {
    c.mp_child = true;
    c.listen = addr;
    c.reuse_port = true;
    c.arch = crate::Arch::Mt;
    c.pool = Some(1);
    c.admin = None;
    c.stats_on_exit = false;
    c.path_cache = c.path_cache.min(MP_PATH_CACHE);
    c.file_cache = c.file_cache.min(MP_FILE_CACHE);
}
