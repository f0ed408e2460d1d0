//! The signals of a long-running role with reload: SIGTERM/SIGINT (stop),
//! SIGHUP (reload), all taken by one thread with `sigwait`; and sending
//! SIGHUP to a running weft (`weft reload`).

use std::io;
use std::mem::MaybeUninit;

/// A control signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// SIGTERM or SIGINT (the number).
    Stop(i32),
    /// SIGHUP.
    Reload,
}

/// The signals [`wait_control`] takes.
const CONTROL: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// A signal set holding `signals`.
fn set_of(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before sigaddset.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        for &s in signals {
            libc::sigaddset(set.as_mut_ptr(), s);
        }
        set.assume_init()
    }
}

/// Block `signals` in the calling thread and the threads it spawns
/// afterwards, so that only a thread waiting for them ([`wait_for`]) takes
/// them.
pub(crate) fn block(signals: &[libc::c_int]) -> io::Result<()> {
    let set = set_of(signals);
    // SAFETY: set is a valid, initialised sigset_t.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Wait for one of `signals` (which must be blocked); the one taken.
pub(crate) fn wait_for(signals: &[libc::c_int]) -> io::Result<libc::c_int> {
    let set = set_of(signals);
    let mut sig: libc::c_int = 0;
    // SAFETY: set is initialised; sig is a valid out-parameter.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Block SIGHUP in the calling thread and those it spawns afterwards (with
/// [`super::block_shutdown_signals`] for the others), so only
/// [`wait_control`] takes it.
pub fn block_reload_signal() -> io::Result<()> {
    block(&CONTROL)
}

/// Wait for SIGTERM, SIGINT or SIGHUP (which must be blocked).
pub fn wait_control() -> io::Result<Control> {
    let sig = wait_for(&CONTROL)?;
    Ok(if sig == libc::SIGHUP {
        Control::Reload
    } else {
        Control::Stop(sig)
    })
}

/// Send SIGTERM to `pid` (ignored if it is gone).
pub fn terminate(pid: u32) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill with a positive pid and a valid signal number.
    let _ = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
}

/// A pidfd of child process `pid` (pidfd_open(2), Linux 5.3): readable
/// once the process has exited, so a supervisor can wait for its children
/// in poll instead of looking at them on a timer. The child must not have
/// been reaped yet (a zombie is fine: its pidfd is readable at once).
pub fn pidfd_open(pid: u32) -> io::Result<super::Fd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: pidfd_open takes a pid and flags, no memory arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns
    // (pidfds are close-on-exec).
    Ok(unsafe { super::Fd::from_raw(fd as std::os::fd::RawFd) })
}

/// Send SIGHUP to process `pid` (`weft reload`).
pub fn send_hangup(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if pid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill has no memory arguments.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
