//! Dropping root after binding: look a user up in the password database and
//! switch the whole process (every thread: glibc's `setuid`/`setgid` apply
//! to all threads) to its uid, primary gid and supplementary groups.

use super::{bump, cvt, SysKind};
use std::ffi::CString;
use std::io;

/// A user's identity from the password database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The name looked up.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Look `name` up (`getpwnam_r`); `NotFound` when there is no such user.
pub fn lookup_user(name: &str) -> io::Result<User> {
    bump(SysKind::Other);
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a user name"))?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data; getpwnam_r fills it.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives the use of pw's strings (none read).
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if out.is_null() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no user `{name}`")));
    }
    Ok(User {
        name: name.to_string(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

/// The process's real and effective uid.
pub fn current_uid() -> (u32, u32) {
    // SAFETY: getuid and geteuid cannot fail.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// Become `user` for good: supplementary groups (`initgroups`), gid, then uid;
/// afterwards check that root cannot be regained. Already running as that
/// (non-root) user is nothing to do.
pub fn drop_privileges(user: &User) -> io::Result<()> {
    bump(SysKind::Other);
    if user.uid != 0 && current_uid() == (user.uid, user.uid) {
        return Ok(());
    }
    let c = CString::new(user.name.as_str()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid C string; the gid is plain data.
    cvt(unsafe { libc::initgroups(c.as_ptr(), user.gid) })?;
    // SAFETY: plain syscalls on integers.
    cvt(unsafe { libc::setgid(user.gid) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::setuid(user.uid) })?;
    // SAFETY: as above; must fail now unless the user is root itself.
    if user.uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(io::Error::other("setuid(0) still succeeds after dropping privileges"));
    }
    Ok(())
}
