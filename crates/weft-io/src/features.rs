//! Probes of what this kernel and process may use, for `weft backends` (in the
//! manner of `haproxy -vv`): each probe makes the real call on a scratch
//! descriptor, so "works" means works here, not "is in the headers".

use crate::backend::BackendKind;
use crate::sys;
use std::ffi::CString;
use std::io;

/// One probed capability.
#[derive(Debug)]
pub struct Feature {
    /// Short name.
    pub name: &'static str,
    /// Ok, or why not.
    pub result: io::Result<()>,
    /// What weft uses it for.
    pub used_for: &'static str,
}

fn scratch_file() -> io::Result<sys::Fd> {
    // /proc/self/exe is a regular file every process can read.
    let path = CString::new("/proc/self/exe").expect("no NUL");
    let dir = sys::open_dir(&CString::new("/").expect("no NUL"))?;
    let rel = CString::new(&path.as_bytes()[1..]).expect("no NUL");
    sys::open_beneath(dir.raw(), &rel, sys::Resolve::FollowSymlinks)
}

fn probe_splice() -> io::Result<()> {
    let (r1, w1) = sys::pipe()?;
    let (_r2, w2) = sys::pipe()?;
    sys::write(w1.raw(), b"x")?;
    sys::splice(r1.raw(), w2.raw(), 1, false).map(drop)
}

fn probe_tee() -> io::Result<()> {
    let (r1, w1) = sys::pipe()?;
    let (_r2, w2) = sys::pipe()?;
    sys::write(w1.raw(), b"x")?;
    sys::tee(r1.raw(), w2.raw(), 1).map(drop)
}

/// Probe the kernel features weft's mechanisms rely on.
pub fn kernel_features() -> Vec<Feature> {
    let file = scratch_file();
    let on_file = |f: fn(i32) -> io::Result<()>| match &file {
        Ok(fd) => f(fd.raw()),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    };
    vec![
        Feature {
            name: "sendfile",
            result: on_file(sys::probe_sendfile),
            used_for: "static file bodies without a user-space copy (serve --send sendfile)",
        },
        Feature {
            name: "splice",
            result: probe_splice(),
            used_for: "proxy bodies socket→pipe→socket in the kernel",
        },
        Feature {
            name: "tee",
            result: probe_tee(),
            used_for: "KeepCopy: forward in the kernel and keep a copy for the cache",
        },
        Feature {
            name: "io_uring",
            result: sys::probe_io_uring(),
            used_for: "uring event backend (completions read from the shared ring)",
        },
        Feature {
            name: "SO_REUSEPORT",
            result: sys::probe_reuseport(),
            used_for: "one listener per worker thread (--workers)",
        },
        Feature {
            name: "RWF_NOWAIT",
            result: on_file(|fd| {
                if sys::probe_rwf_nowait(fd) {
                    Ok(())
                } else {
                    Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
                }
            }),
            used_for: "AMPED residency test: read only if the page cache has the bytes",
        },
        Feature {
            name: "TCP_REPAIR",
            result: sys::probe_tcp_repair(),
            used_for: "connection handoff between front-end and back-ends",
        },
    ]
}

/// Probe every event backend.
pub fn backends() -> Vec<(BackendKind, io::Result<()>)> {
    BackendKind::ALL.iter().map(|b| (*b, b.probe())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_and_splice_work_on_linux() {
        assert!(backends().iter().all(|(_, r)| r.is_ok()));
        let f = kernel_features();
        let get = |n: &str| f.iter().find(|x| x.name == n).unwrap().result.is_ok();
        assert!(get("sendfile"));
        assert!(get("splice"));
        assert!(get("tee"));
    }
}
