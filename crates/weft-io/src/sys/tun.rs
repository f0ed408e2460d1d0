//! TUN devices and a nanosecond timer for `weft wan`'s user-space router.
//!
//! [`open_tun`] creates a non-persistent layer-3 TUN device (`IFF_TUN |
//! IFF_NO_PI`): each read(2) returns one IP packet, each write(2) injects one.
//! The device lives exactly as long as its descriptor, so a crashed router
//! leaves no device behind (a device moved into another namespace goes too).
//! [`Timer`] is a timerfd on CLOCK_MONOTONIC: unlike a poll timeout (whole
//! milliseconds, plus the thread's timer slack) it wakes within microseconds,
//! which is what a delay line needs.

use super::{bump, cvt, Fd, FdArg, SysKind};
use std::io;
use std::time::Duration;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// struct ifreq as TUNSETIFF reads it: a 16-byte name and the flags.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Open `/dev/net/tun` and create the TUN device `name` (at most 15 bytes),
/// non-blocking. Returns the descriptor that owns the device.
pub fn open_tun(name: &str) -> io::Result<Fd> {
    if name.is_empty() || name.len() > 15 || name.bytes().any(|b| b == 0 || b == b'/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"));
    }
    bump(SysKind::Open);
    // SAFETY: the path is a NUL-terminated literal.
    let fd = Fd(cvt(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })?);
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    bump(SysKind::Other);
    // SAFETY: req is a valid, writable ifreq-sized struct (40 bytes) for the call.
    cvt(unsafe { libc::ioctl(fd.raw(), TUNSETIFF as _, &mut req as *mut IfReq) })?;
    Ok(fd)
}

/// A one-shot monotonic timer descriptor (readable when it fires).
#[derive(Debug)]
pub struct Timer(Fd);

impl Timer {
    /// timerfd_create(CLOCK_MONOTONIC, non-blocking).
    pub fn new() -> io::Result<Timer> {
        bump(SysKind::Other);
        // SAFETY: plain integer arguments.
        let fd = cvt(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) })?;
        Ok(Timer(Fd(fd)))
    }

    /// Fire once after `after` (None disarms). A zero wait fires at once.
    pub fn set(&self, after: Option<Duration>) -> io::Result<()> {
        let after = after.map(|d| d.max(Duration::from_nanos(1)));
        let value = match after {
            Some(d) => libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
            None => libc::timespec { tv_sec: 0, tv_nsec: 0 },
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: value,
        };
        bump(SysKind::Other);
        // SAFETY: spec is a valid itimerspec; the old value is not requested.
        cvt(unsafe { libc::timerfd_settime(self.0.raw(), 0, &spec, std::ptr::null_mut()) }).map(drop)
    }

    /// Read (and reset) the expiry count; 0 if it has not fired.
    pub fn drain(&self) -> u64 {
        let mut b = [0u8; 8];
        match super::read(&self.0, &mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    /// The descriptor, for poll(2).
    pub fn fd(&self) -> &Fd {
        &self.0
    }
}

/// Is the process `pid` alive (kill(pid, 0) succeeds or fails with EPERM)?
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence; nothing is delivered.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `fd` as a pollfd waiting for input.
pub fn poll_in(fd: impl FdArg) -> libc::pollfd {
    libc::pollfd {
        fd: fd.raw_for_call(),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// poll(2)'s descriptor entry, for crates that do not use libc.
pub type PollFd = libc::pollfd;

/// Give the calling thread real-time priority (SCHED_FIFO at `prio`), so a
/// delay line's wake-ups are not queued behind other work on a busy machine.
/// Needs CAP_SYS_NICE; the kernel's RT throttling still leaves 5 % to others.
pub fn set_realtime(prio: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: prio };
    bump(SysKind::Other);
    // SAFETY: param is a valid sched_param; pid 0 is the calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }).map(drop)
}

/// ppoll(2) over `fds` with a nanosecond timeout (None: wait for ever,
/// zero: only look). Unlike poll's whole milliseconds, a real-time thread
/// sleeps exactly this long (its timer slack is zero), and a call that finds
/// a descriptor ready arms no timer at all: no timerfd_settime per wake-up.
pub fn ppoll(fds: &mut [PollFd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    bump(SysKind::Poll);
    // SAFETY: fds is a valid writable array of fds.len() pollfds; tp is null
    // or points at a timespec that outlives the call; no signal mask.
    cvt(unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tp, std::ptr::null()) }).map(|n| n as usize)
}

/// Pin the calling thread to CPU `cpu` (sched_setaffinity).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cpu number out of range"));
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE was checked, so CPU_SET stays inside the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    bump(SysKind::Other);
    // SAFETY: set is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) }).map(drop)
}

/// Lock the process's pages in memory, present and future (mlockall), so a
/// page fault never stalls the router. Needs CAP_IPC_LOCK or a high enough
/// RLIMIT_MEMLOCK.
pub fn lock_memory() -> io::Result<()> {
    bump(SysKind::Other);
    // SAFETY: plain flag arguments.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) }).map(drop)
}
