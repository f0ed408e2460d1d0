//! inotify(7): change notices for open files.
//!
//! `weft serve --snapshot-check notify` watches every file it caches so that
//! a file that did not change costs no `fstat` before its response: the
//! kernel tells the worker (through a descriptor its event loop watches)
//! when a watched file is written or its metadata changes, and only then is
//! the file checked again.

use super::{bump, cvt, Fd, FdArg, SysKind};
use std::ffi::CString;
use std::io;

/// A watched file was written (write, truncate).
pub const MODIFIED: u32 = libc::IN_MODIFY;
/// A watched file's metadata changed (mtime set, link count, mode).
pub const ATTRIB: u32 = libc::IN_ATTRIB;
/// The watch is gone (the file was deleted, or the watch removed).
pub const IGNORED: u32 = libc::IN_IGNORED;
/// The kernel's queue of events overflowed: some were lost (wd is -1).
pub const OVERFLOW: u32 = libc::IN_Q_OVERFLOW;

/// A new inotify instance, non-blocking.
pub fn init() -> io::Result<Fd> {
    bump(SysKind::Other);
    // SAFETY: plain integer flags.
    cvt(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) }).map(Fd)
}

/// Watch the file open on `file` for writes and metadata changes; returns
/// the watch descriptor (the same one for every descriptor of one inode).
/// The file is named by its `/proc/self/fd` link, so no path is resolved
/// again.
pub fn watch_open_file(inotify: impl FdArg, file: impl FdArg) -> io::Result<i32> {
    let (ino, fd) = (inotify.raw_for_call(), file.raw_for_call());
    let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(io::Error::other)?;
    bump(SysKind::Other);
    // SAFETY: `path` is a valid NUL-terminated string for the call's duration.
    cvt(unsafe { libc::inotify_add_watch(ino, path.as_ptr(), libc::IN_MODIFY | libc::IN_ATTRIB) })
}

/// Stop watching `wd`.
pub fn unwatch(inotify: impl FdArg, wd: i32) -> io::Result<()> {
    let ino = inotify.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::inotify_rm_watch(ino, wd) }).map(drop)
}

/// Read every queued event (until EAGAIN), calling `each(wd, mask)` for
/// each; returns how many there were. `buf` is the read buffer (4 KiB is
/// plenty: the watches name no directory entries).
pub fn read_events(inotify: impl FdArg, buf: &mut [u8], mut each: impl FnMut(i32, u32)) -> io::Result<usize> {
    let ino = inotify.raw_for_call();
    let mut n = 0;
    loop {
        let got = match super::read(ino, buf) {
            Ok(0) => return Ok(n),
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        n += parse_events(&buf[..got], &mut each);
    }
}

/// The events in `b` (struct inotify_event: wd, mask, cookie, len, name).
fn parse_events(mut b: &[u8], each: &mut impl FnMut(i32, u32)) -> usize {
    let mut n = 0;
    while b.len() >= 16 {
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
        each(wd, mask);
        n += 1;
        b = b.get(16 + len..).unwrap_or(&[]);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_write_to_a_watched_open_file_is_noticed() {
        let dir = std::env::temp_dir().join(format!("weft-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"one").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let ino = init().unwrap();
        let wd = watch_open_file(&ino, &file).unwrap();
        let mut buf = [0u8; 4096];
        assert_eq!(read_events(&ino, &mut buf, |_, _| panic!("no event yet")).unwrap(), 0);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all(b"two")
            .unwrap();
        let mut seen = Vec::new();
        read_events(&ino, &mut buf, |w, m| seen.push((w, m))).unwrap();
        assert!(seen.iter().any(|&(w, m)| w == wd && m & MODIFIED != 0), "{seen:?}");
        unwatch(&ino, wd).unwrap();
        let mut ignored = false;
        read_events(&ino, &mut buf, |w, m| ignored |= w == wd && m & IGNORED != 0).unwrap();
        assert!(ignored);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
