//! A log file that is reopened on SIGUSR1 (logrotate's convention: rename the
//! file, send SIGUSR1, and the next lines land in a new file at the old path).
//!
//! Writers (the workers' access-log buffers) hold an `Arc<Fd>` of the file
//! they write and compare [`LogFile::generation`] (one relaxed load) before
//! each flush; when it moved, they take the new descriptor with
//! [`LogFile::current`]. The old file closes when its last writer lets it go,
//! so no writer ever writes to a closed (or reused) descriptor number.
//!
//! Every opened `LogFile` is registered in a process-wide list; the first one
//! starts the thread that waits for SIGUSR1 and reopens them all. The signal
//! must be blocked in every thread ([`sys::block_shutdown_signals`], which the
//! roles call before starting workers): otherwise nothing is reopened.

use crate::sys::{self, Fd};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};

/// An O_APPEND log file at a path, reopened on SIGUSR1.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    fd: Mutex<Arc<Fd>>,
    generation: AtomicU64,
}

static OPEN: Mutex<Vec<Weak<LogFile>>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

fn open_append(path: &Path) -> io::Result<Arc<Fd>> {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    Ok(Arc::new(Fd::from(f)))
}

impl LogFile {
    /// Open (create, append) `path` and register it for SIGUSR1.
    pub fn open(path: &Path) -> io::Result<Arc<LogFile>> {
        let file = Arc::new(LogFile {
            path: path.to_path_buf(),
            fd: Mutex::new(open_append(path)?),
            generation: AtomicU64::new(0),
        });
        if let Ok(mut open) = OPEN.lock() {
            open.retain(|w| w.strong_count() > 0);
            open.push(Arc::downgrade(&file));
        }
        WATCH.call_once(|| {
            let _ = std::thread::Builder::new().name("weft-reopen".into()).spawn(|| {
                while sys::wait_reopen_signal().is_ok() {
                    reopen_all();
                }
            });
        });
        Ok(file)
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bumped by every reopen.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The descriptor to write now and its generation.
    pub fn current(&self) -> (u64, Arc<Fd>) {
        let fd = match self.fd.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        (self.generation(), fd)
    }

    /// Open the path again (a new file if the old one was renamed); on
    /// failure the old file stays in use and the error is returned.
    pub fn reopen(&self) -> io::Result<()> {
        let new = open_append(&self.path)?;
        let mut g = match self.fd.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = new;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// Give every registered log file to `uid`:`gid` (root, before it drops
/// to `--user`): the process reopens them later as that user (a reload
/// starts new workers that open the file again; SIGUSR1 after logrotate's
/// `create`), which a root-owned 0644 file would refuse. The directory's
/// owner is not changed (nginx does the same for its workers).
pub fn give_to(uid: u32, gid: u32) -> io::Result<()> {
    let files: Vec<Arc<LogFile>> = match OPEN.lock() {
        Ok(open) => open.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return Ok(()),
    };
    for f in files {
        let (_, fd) = f.current();
        std::os::unix::fs::fchown(&*fd, Some(uid), Some(gid))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", f.path.display())))?;
    }
    Ok(())
}

/// Reopen every registered log file (what SIGUSR1 does); logs failures.
pub fn reopen_all() {
    let files: Vec<Arc<LogFile>> = match OPEN.lock() {
        Ok(open) => open.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return,
    };
    for f in files {
        match f.reopen() {
            Ok(()) => weft_core::info!("reopened log {}", f.path.display()),
            Err(e) => weft_core::warn!("cannot reopen log {}: {e}", f.path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopen_follows_a_rename() {
        let dir = std::env::temp_dir().join(format!("weft-logfile-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("a.log");
        let f = LogFile::open(&p).unwrap();
        let (g0, fd) = f.current();
        sys::write(fd.raw(), b"one\n").unwrap();
        std::fs::rename(&p, dir.join("a.log.1")).unwrap();
        reopen_all();
        let (g1, fd2) = f.current();
        assert!(g1 > g0);
        sys::write(fd2.raw(), b"two\n").unwrap();
        // The old descriptor stays valid while a writer holds it.
        sys::write(fd.raw(), b"late\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        assert_eq!(std::fs::read_to_string(dir.join("a.log.1")).unwrap(), "one\nlate\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
