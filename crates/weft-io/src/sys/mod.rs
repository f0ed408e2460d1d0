//! Every system call weft makes, behind a thin safe wrapper that counts it.
//!
//! This module is the only place in the workspace allowed to use `unsafe`. Each
//! wrapper converts the C return convention into `io::Result`, bumps the
//! per-thread counter for its kind ([`counters`]) and nothing else: policy
//! (whether to retry on EINTR, what EAGAIN means) stays with the caller, which
//! knows; the caller retries through [`retry`], the one EINTR loop.
//!
//! Other crates use these wrappers instead of `libc` (they are all
//! `#![forbid(unsafe_code)]`): descriptors are owned by [`Fd`] and closed only
//! when it drops, socket options are typed ([`sockopt`]), and error numbers are
//! named and classified by [`Errno`]. A wrapper's descriptor argument is an
//! [`FdArg`]: a borrow (`&fd`, `fd.as_fd()`, `&file`), or, until every caller
//! has moved to borrows, a bare `RawFd`.

pub mod boxes;
pub mod bpf;
pub mod counters;
mod errno;
mod fd;
pub mod mmap;
pub mod notify;
pub mod pressure;
pub mod privilege;
pub mod residency;
mod shared_words;
pub mod signal;
pub mod sockmem;
pub mod sockopt;
pub mod splice;
mod stream;
mod tcp_info;
pub mod tun;
mod unix;
pub mod uring;
mod wait;
pub mod zerocopy;

use std::ffi::CStr;
use std::io::{self, IoSlice};
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use counters::{bump, SysCounts, SysKind};
pub use errno::{is, is_fd_exhaustion, is_peer_gone, is_splice_unsupported, retry, Errno};
pub use fd::{Fd, FdArg};
pub use shared_words::SharedWords;
pub use sockopt::{
    nodelay, notsent_lowat, quickack, rcvlowat, set_bind_address_no_port, set_cork, set_nodelay, set_notsent_lowat,
    set_quickack, set_rcvbuf, set_rcvlowat, set_reuseaddr, set_reuseport, set_window_clamp, window_clamp,
};
pub use splice::{bytes_readable, pipe_capacity, read_to_bytes};
pub use stream::{empty_now, peek, recv_now, set_nonblocking, unix_stream_connect};
pub use tcp_info::{bytes_taken, tcp_info, TcpInfo};
pub use unix::{recv_fd_with, send_fd_with, seqpacket_connect, seqpacket_listener, seqpacket_pair};
pub use wait::{wait_any, wait_ready, wait_ready2, wait_ready_or, AcceptWait, StopNotice, Woken};

#[inline]
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

#[inline]
fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// read(2) into `buf`.
#[inline]
pub fn read(fd: impl FdArg, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Read);
    // SAFETY: buf is a valid writable region of buf.len() bytes for the call.
    cvt_size(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// write(2) from `buf`.
#[inline]
pub fn write(fd: impl FdArg, buf: &[u8]) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Write);
    // SAFETY: buf is a valid readable region of buf.len() bytes for the call.
    cvt_size(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
}

/// send(2) on a socket; `more` sets MSG_MORE so a following sendfile joins the
/// same segment (Flash/µserver: header and small file in one packet).
/// MSG_NOSIGNAL: a peer that went away is an EPIPE error, never a signal.
#[inline]
pub fn send(fd: impl FdArg, buf: &[u8], more: bool) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Write);
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // SAFETY: buf is a valid readable region of buf.len() bytes for the call.
    cvt_size(unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) })
}

/// writev(2) of up to IOV_MAX slices, via sendmsg so that a closed peer gives
/// EPIPE instead of SIGPIPE.
#[inline]
pub fn writev(fd: impl FdArg, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Writev);
    // SAFETY: IoSlice is ABI-compatible with iovec (std guarantees it on Unix);
    // msghdr is zero-initialised and only iov fields are set; the slices outlive
    // the call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len().min(1024) as _;
        cvt_size(libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL))
    }
}

/// recv(2) with flags (e.g. MSG_PEEK).
pub fn recv(fd: impl FdArg, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Read);
    // SAFETY: buf is valid for writes of buf.len() bytes.
    cvt_size(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// pread(2) at `offset`.
#[inline]
pub fn pread(fd: impl FdArg, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Pread);
    // SAFETY: buf is valid for writes of buf.len() bytes.
    cvt_size(unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) })
}

/// sendfile(2) from file `in_fd` at `*offset` to socket `out_fd`; advances `offset`.
#[inline]
pub fn sendfile(out_fd: impl FdArg, in_fd: impl FdArg, offset: &mut u64, count: usize) -> io::Result<usize> {
    let out_fd = out_fd.raw_for_call();
    let in_fd = in_fd.raw_for_call();
    bump(SysKind::Sendfile);
    let mut off = *offset as libc::off_t;
    // SAFETY: off is a valid local the kernel updates; descriptors are plain ints.
    let n = cvt_size(unsafe { libc::sendfile(out_fd, in_fd, &mut off, count) })?;
    *offset = off as u64;
    Ok(n)
}

/// splice(2) between a pipe and another descriptor, non-blocking.
pub fn splice(fd_in: impl FdArg, fd_out: impl FdArg, len: usize, more: bool) -> io::Result<usize> {
    let fd_in = fd_in.raw_for_call();
    let fd_out = fd_out.raw_for_call();
    bump(SysKind::Splice);
    let mut flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    if more {
        flags |= libc::SPLICE_F_MORE;
    }
    // SAFETY: null offsets mean "use the file position"; no memory is passed.
    cvt_size(unsafe { libc::splice(fd_in, std::ptr::null_mut(), fd_out, std::ptr::null_mut(), len, flags) })
}

/// tee(2): duplicate up to `len` bytes from pipe `fd_in` to pipe `fd_out`.
pub fn tee(fd_in: impl FdArg, fd_out: impl FdArg, len: usize) -> io::Result<usize> {
    let fd_in = fd_in.raw_for_call();
    let fd_out = fd_out.raw_for_call();
    bump(SysKind::Tee);
    // SAFETY: no memory is passed to the kernel.
    cvt_size(unsafe { libc::tee(fd_in, fd_out, len, libc::SPLICE_F_NONBLOCK) })
}

/// pipe2(O_NONBLOCK | O_CLOEXEC): (read end, write end).
pub fn pipe() -> io::Result<(Fd, Fd)> {
    bump(SysKind::Other);
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    Ok((Fd(fds[0]), Fd(fds[1])))
}

/// fcntl(F_SETPIPE_SZ); returns the size the kernel chose.
pub fn set_pipe_size(fd: impl FdArg, size: usize) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: F_SETPIPE_SZ takes an int argument; no memory is passed.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size as libc::c_int) }).map(|n| n as usize)
}

// ---------------------------------------------------------------------------
// Socket addresses

fn sockaddr_from(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn sockaddr_to(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: &libc::sockaddr_in = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn family(addr: &SocketAddr) -> libc::c_int {
    match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    }
}

/// A non-blocking, close-on-exec TCP socket of the address's family.
pub fn tcp_socket(addr: &SocketAddr) -> io::Result<Fd> {
    bump(SysKind::Socket);
    // SAFETY: plain integer arguments.
    let fd = cvt(unsafe {
        libc::socket(
            family(addr),
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    Ok(Fd(fd))
}

/// setsockopt(2) with an int value. Outside weft-io prefer the typed
/// [`sockopt`] functions, which need no libc constants.
pub fn setsockopt_int(fd: impl FdArg, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Setsockopt);
    // SAFETY: value is a valid int for the duration of the call; its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// getsockopt(2) of an int value (see [`setsockopt_int`]).
pub fn getsockopt_int(fd: impl FdArg, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid locals of the sizes passed.
    cvt(unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut libc::c_int).cast(), &mut len) })?;
    Ok(value)
}

/// SO_LINGER with a zero timeout: close sends RST (used to drop a refused
/// descriptor without leaving TIME_WAIT, and by tests to reset connections).
pub fn set_linger_zero(fd: impl FdArg) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Setsockopt);
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: l is a valid linger struct; its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// bind(2).
pub fn bind(fd: impl FdArg, addr: &SocketAddr) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let (storage, len) = sockaddr_from(addr);
    // SAFETY: storage holds a valid sockaddr of `len` bytes.
    cvt(unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) }).map(drop)
}

/// listen(2).
pub fn listen(fd: impl FdArg, backlog: i32) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::listen(fd, backlog) }).map(drop)
}

/// connect(2) on a non-blocking socket: Ok(true) connected, Ok(false) in progress.
pub fn connect(fd: impl FdArg, addr: &SocketAddr) -> io::Result<bool> {
    let fd = fd.raw_for_call();
    bump(SysKind::Connect);
    let (storage, len) = sockaddr_from(addr);
    // SAFETY: storage holds a valid sockaddr of `len` bytes.
    match cvt(unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) }) {
        Ok(_) => Ok(true),
        Err(e) if is(&e, Errno::InProgress) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pending error of a socket (SO_ERROR), e.g. after a non-blocking connect.
pub fn take_socket_error(fd: impl FdArg) -> io::Result<Option<io::Error>> {
    let fd = fd.raw_for_call();
    let e = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok(if e == 0 {
        None
    } else {
        Some(io::Error::from_raw_os_error(e))
    })
}

/// A listening TCP socket: SO_REUSEADDR, optionally SO_REUSEPORT (one listener
/// per worker thread, the kernel spreads connections), non-blocking.
pub fn tcp_listener(addr: &SocketAddr, reuseport: bool, backlog: i32) -> io::Result<Fd> {
    let fd = tcp_socket(addr)?;
    set_reuseaddr(&fd, true)?;
    if reuseport {
        set_reuseport(&fd, true)?;
    }
    bind(&fd, addr)?;
    listen(&fd, backlog)?;
    Ok(fd)
}

/// getsockname(2).
pub fn local_addr(fd: impl FdArg) -> io::Result<SocketAddr> {
    socket_name(fd.raw_for_call(), libc::getsockname)
}

/// getpeername(2).
pub fn peer_addr(fd: impl FdArg) -> io::Result<SocketAddr> {
    socket_name(fd.raw_for_call(), libc::getpeername)
}

/// The signature getsockname(2) and getpeername(2) share.
type NameCall = unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// One of the calls that fill in a socket's address (`NameCall`).
fn socket_name(fd: RawFd, call: NameCall) -> io::Result<SocketAddr> {
    bump(SysKind::Other);
    // SAFETY: all-zero sockaddr_storage is valid; len is its size.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage/len are valid for the kernel to fill; `call` is
    // getsockname or getpeername, which write at most `len` bytes there.
    cvt(unsafe { call(fd, (&mut storage as *mut libc::sockaddr_storage).cast(), &mut len) })?;
    sockaddr_to(&storage).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown address family"))
}

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC (accepted sockets do not
/// inherit O_NONBLOCK on Linux).
#[inline]
pub fn accept(fd: impl FdArg) -> io::Result<(Fd, Option<SocketAddr>)> {
    let fd = fd.raw_for_call();
    bump(SysKind::Accept);
    // SAFETY: all-zero sockaddr_storage is valid; len is its size.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage/len are valid for the kernel to fill.
    let new = cvt(unsafe {
        libc::accept4(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    Ok((Fd(new), sockaddr_to(&storage)))
}

/// shutdown(2) of the write side (used for a lingering close).
pub fn shutdown_write(fd: impl FdArg) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::shutdown(fd, libc::SHUT_WR) }).map(drop)
}

// ---------------------------------------------------------------------------
// epoll

/// epoll_create1(EPOLL_CLOEXEC).
pub fn epoll_create() -> io::Result<Fd> {
    bump(SysKind::Other);
    // SAFETY: plain integer argument.
    cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map(Fd)
}

/// epoll_ctl(2).
#[inline]
pub fn epoll_ctl(epfd: impl FdArg, op: libc::c_int, fd: impl FdArg, events: u32, data: u64) -> io::Result<()> {
    let epfd = epfd.raw_for_call();
    let fd = fd.raw_for_call();
    bump(SysKind::EpollCtl);
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: ev is a valid epoll_event for the call.
    cvt(unsafe { libc::epoll_ctl(epfd, op, fd, &mut ev) }).map(drop)
}

/// epoll_wait(2) into `events`; returns how many were filled.
#[inline]
pub fn epoll_wait(epfd: impl FdArg, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
    let epfd = epfd.raw_for_call();
    bump(SysKind::EpollWait);
    // SAFETY: events is a valid writable array of events.len() entries.
    cvt(unsafe {
        libc::epoll_wait(
            epfd,
            events.as_mut_ptr(),
            events.len().min(i32::MAX as usize) as i32,
            timeout_ms,
        )
    })
    .map(|n| n as usize)
}

// ---------------------------------------------------------------------------
// poll and select

/// poll(2) over `fds`.
#[inline]
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    bump(SysKind::Poll);
    // SAFETY: fds is a valid writable array of fds.len() pollfd entries.
    cvt(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }).map(|n| n as usize)
}

/// The kernel's select(2) descriptor limit.
pub const FD_SETSIZE: RawFd = libc::FD_SETSIZE as RawFd;

/// A select(2) descriptor set that refuses descriptors at or above FD_SETSIZE
/// instead of writing past its end (glibc's FD_SET would corrupt memory or,
/// with _FORTIFY_SOURCE, abort).
#[derive(Clone)]
pub struct FdSet(libc::fd_set);

impl Default for FdSet {
    fn default() -> Self {
        Self::new()
    }
}

impl FdSet {
    /// An empty set.
    pub fn new() -> FdSet {
        // SAFETY: fd_set is plain bits; all-zero is the empty set.
        FdSet(unsafe { std::mem::zeroed() })
    }
    /// Add `fd`; false if it cannot be represented.
    pub fn insert(&mut self, fd: RawFd) -> bool {
        if !(0..FD_SETSIZE).contains(&fd) {
            return false;
        }
        // SAFETY: fd is within [0, FD_SETSIZE), so FD_SET stays inside the set.
        unsafe { libc::FD_SET(fd, &mut self.0) };
        true
    }
    /// Remove `fd` (no-op if out of range).
    pub fn remove(&mut self, fd: RawFd) {
        if (0..FD_SETSIZE).contains(&fd) {
            // SAFETY: fd is within range.
            unsafe { libc::FD_CLR(fd, &mut self.0) };
        }
    }
    /// Is `fd` in the set?
    #[inline]
    pub fn contains(&self, fd: RawFd) -> bool {
        // SAFETY: fd is checked to be within range first.
        (0..FD_SETSIZE).contains(&fd) && unsafe { libc::FD_ISSET(fd, &self.0) }
    }
}

/// select(2) on read and write sets (modified in place).
pub fn select(nfds: RawFd, read: &mut FdSet, write: &mut FdSet, timeout: Option<Duration>) -> io::Result<usize> {
    bump(SysKind::Select);
    let mut tv = timeout.map(|d| libc::timeval {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: d.subsec_micros() as libc::suseconds_t,
    });
    let tvp = tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut libc::timeval);
    // SAFETY: the sets are valid fd_set values; nfds <= FD_SETSIZE is the caller's
    // invariant (FdSet never holds a larger descriptor); tvp is null or valid.
    cvt(unsafe {
        libc::select(
            nfds.min(FD_SETSIZE),
            &mut read.0,
            &mut write.0,
            std::ptr::null_mut(),
            tvp,
        )
    })
    .map(|n| n as usize)
}

// ---------------------------------------------------------------------------
// eventfd: cross-thread wake-ups (shutdown, helper completions)

/// eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC).
pub fn eventfd() -> io::Result<Fd> {
    bump(SysKind::Other);
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }).map(Fd)
}

/// Add one to an eventfd's counter (retried on EINTR: a lost wake-up would
/// leave the other thread asleep).
pub fn eventfd_signal(fd: impl FdArg) -> io::Result<()> {
    let fd = fd.raw_for_call();
    retry(|| write(fd, &1u64.to_ne_bytes())).map(drop)
}

/// Read and reset an eventfd's counter (0 if it was not signalled).
pub fn eventfd_drain(fd: impl FdArg) -> u64 {
    let fd = fd.raw_for_call();
    let mut b = [0u8; 8];
    match read(fd, &mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}

// ---------------------------------------------------------------------------
// Files

/// What the server needs to know about an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// Size in bytes.
    pub size: u64,
    /// Inode number (for the ETag).
    pub ino: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Modification time in nanoseconds since the epoch (for the ETag).
    pub mtime_ns: i128,
    /// Is it a regular file?
    pub is_file: bool,
    /// Is it a directory?
    pub is_dir: bool,
    /// Readable by others (world-readable bit).
    pub mode: u32,
    /// Owner's uid.
    pub uid: u32,
}

fn to_filestat(st: &libc::stat) -> FileStat {
    let secs = st.st_mtime;
    let nsecs = st.st_mtime_nsec;
    let mtime = if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH
    };
    let fmt = st.st_mode & libc::S_IFMT;
    FileStat {
        size: st.st_size as u64,
        ino: st.st_ino,
        mtime,
        mtime_ns: secs as i128 * 1_000_000_000 + nsecs as i128,
        is_file: fmt == libc::S_IFREG,
        is_dir: fmt == libc::S_IFDIR,
        mode: st.st_mode,
        uid: st.st_uid,
    }
}

/// fstat(2).
pub fn fstat(fd: impl FdArg) -> io::Result<FileStat> {
    let fd = fd.raw_for_call();
    bump(SysKind::Stat);
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is valid for the kernel to fill; on success it is initialised.
    cvt(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so st is initialised.
    Ok(to_filestat(unsafe { &st.assume_init() }))
}

/// open(2) of a directory, read-only (the document root).
pub fn open_dir(path: &CStr) -> io::Result<Fd> {
    bump(SysKind::Open);
    // SAFETY: path is a valid NUL-terminated string.
    cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) }).map(Fd)
}

/// mkfifo(3) with mode 0600. Tests make their stuck-reader FIFOs with it
/// rather than by running `mkfifo`: a process started from a multi-threaded
/// test binary holds every descriptor of every other test between its fork
/// and its exec, so a pipe another test just closed would not report end of
/// file in that window.
pub fn mkfifo(path: &CStr) -> io::Result<()> {
    bump(SysKind::Other);
    // SAFETY: path is a valid NUL-terminated string.
    cvt(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }).map(drop)
}

/// How [`open_beneath`] treats the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// openat2(RESOLVE_BENEATH): the kernel refuses (EXDEV) any resolution that
    /// leaves the directory, through `..` or a symlink, and magic links.
    Beneath,
    /// Plain openat: symlinks may lead anywhere (`--follow-symlinks`).
    FollowSymlinks,
}

/// Open `path` (relative, NUL-terminated) under directory `dirfd`, read-only,
/// non-blocking (a FIFO must never block the event loop).
pub fn open_beneath(dirfd: impl FdArg, path: &CStr, resolve: Resolve) -> io::Result<Fd> {
    let dirfd = dirfd.raw_for_call();
    bump(SysKind::Open);
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    match resolve {
        Resolve::Beneath => {
            // struct open_how { u64 flags; u64 mode; u64 resolve; } (libc marks it
            // non-exhaustive, so build the kernel's layout directly).
            let how: [u64; 3] = [flags as u64, 0, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS];
            // SAFETY: path is NUL-terminated; how is a valid open_how whose size is passed.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    dirfd,
                    path.as_ptr(),
                    how.as_ptr(),
                    size_of::<[u64; 3]>(),
                )
            };
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(Fd(fd as RawFd))
            }
        }
        Resolve::FollowSymlinks => {
            // SAFETY: path is NUL-terminated.
            cvt(unsafe { libc::openat(dirfd, path.as_ptr(), flags) }).map(Fd)
        }
    }
}

/// One directory entry from [`read_dir`].
#[derive(Clone, Debug)]
pub struct DirEntry {
    /// File name bytes.
    pub name: Vec<u8>,
    /// Metadata (followed through symlinks; None if that failed).
    pub stat: Option<FileStat>,
}

/// List a directory opened with [`open_dir`]-like flags (used for autoindex, a
/// cold path). Consumes a duplicate of `dirfd`, so the caller's descriptor stays
/// valid. Hidden entries (starting with '.') are skipped.
pub fn read_dir(dirfd: impl FdArg, max_entries: usize) -> io::Result<Vec<DirEntry>> {
    let dirfd = dirfd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: dup of a plain descriptor.
    let dup = Fd(cvt(unsafe { libc::fcntl(dirfd, libc::F_DUPFD_CLOEXEC, 0) })?);
    // SAFETY: dup is a fresh descriptor we own.
    let dir = unsafe { libc::fdopendir(dup.raw()) };
    if dir.is_null() {
        // `dup` drops (and closes) after the error is read.
        return Err(io::Error::last_os_error());
    }
    // The DIR stream owns the descriptor now: closedir closes it.
    let _ = dup.into_raw();
    // SAFETY: rewind in case the descriptor position was advanced earlier.
    unsafe { libc::rewinddir(dir) };
    let mut out = Vec::new();
    loop {
        // SAFETY: dir is a valid DIR*; readdir returns null at the end.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() || out.len() >= max_entries {
            break;
        }
        // SAFETY: d_name is a NUL-terminated array inside the dirent.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes.is_empty() || bytes[0] == b'.' {
            continue;
        }
        let mut st = MaybeUninit::<libc::stat>::uninit();
        bump(SysKind::Stat);
        // SAFETY: name is NUL-terminated, st valid for writing, dirfd a directory.
        let ok = unsafe { libc::fstatat(dirfd, name.as_ptr(), st.as_mut_ptr(), 0) } == 0;
        out.push(DirEntry {
            name: bytes.to_vec(),
            // SAFETY: only read when fstatat succeeded.
            stat: ok.then(|| to_filestat(unsafe { &st.assume_init() })),
        });
    }
    // SAFETY: dir is valid; closedir also closes `dup`.
    unsafe { libc::closedir(dir) };
    Ok(out)
}

// ---------------------------------------------------------------------------
// Process-wide

/// The soft RLIMIT_NOFILE, raised to the hard limit first (descriptors are the
/// server's connection budget).
pub fn raise_nofile_limit() -> io::Result<u64> {
    bump(SysKind::Other);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid rlimit to fill.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) })?;
    if rl.rlim_cur < rl.rlim_max {
        rl.rlim_cur = rl.rlim_max;
        // SAFETY: rl is a valid rlimit.
        let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) };
        // SAFETY: as above.
        cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) })?;
    }
    Ok(rl.rlim_cur)
}

/// Block SIGTERM, SIGINT, SIGPIPE and SIGUSR1 in the calling thread (and the
/// threads it spawns afterwards), so that shutdown signals are taken only by
/// [`wait_shutdown_signal`] in a dedicated thread, and SIGUSR1 (reopen the
/// logs) only by [`wait_reopen_signal`] (never the default action, which
/// would end the process).
pub fn block_shutdown_signals() -> io::Result<()> {
    signal::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGPIPE, libc::SIGUSR1])
}

/// Wait for SIGTERM or SIGINT (which must be blocked); returns the signal number.
pub fn wait_shutdown_signal() -> io::Result<i32> {
    signal::wait_for(&[libc::SIGTERM, libc::SIGINT])
}

/// Wait for SIGUSR1 (which must be blocked: [`block_shutdown_signals`]).
pub fn wait_reopen_signal() -> io::Result<()> {
    signal::wait_for(&[libc::SIGUSR1]).map(drop)
}

/// CPU time (user, system) used by the calling process so far.
pub fn process_cpu_time() -> (Duration, Duration) {
    // SAFETY: ru is filled by getrusage.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        (tv(ru.ru_utime), tv(ru.ru_stime))
    }
}

/// Is a syscall number implemented by this kernel? (ENOSYS check with invalid
/// arguments; used by `weft backends`.)
pub fn syscall_exists(nr: libc::c_long) -> bool {
    // SAFETY: every probed call is passed invalid descriptors (-1) and null
    // pointers, so it fails with EBADF/EFAULT/EINVAL without side effects.
    let rc = unsafe { libc::syscall(nr, -1, 0, 0, 0, 0, 0) };
    !(rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

/// Probe preadv2(RWF_NOWAIT) on `fd`: true unless the kernel says it is unsupported.
pub fn probe_rwf_nowait(fd: impl FdArg) -> bool {
    let fd = fd.raw_for_call();
    let mut b = [0u8; 1];
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: iov points at a valid one-byte buffer.
    let rc = unsafe { libc::preadv2(fd, &iov, 1, 0, libc::RWF_NOWAIT) };
    !(rc < 0
        && matches!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
        ))
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Try to create a one-entry io_uring: Ok(()) if it works, else the error
/// (ENOSYS: not built in or blocked by seccomp; EPERM: disabled by sysctl
/// `kernel.io_uring_disabled`).
pub fn probe_io_uring() -> io::Result<()> {
    bump(SysKind::Other);
    // io_uring_params is 120 bytes; zeroed means "defaults".
    let mut params = [0u8; 120];
    // SAFETY: params is a valid, writable, zeroed io_uring_params-sized buffer.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1 as libc::c_long, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(Fd(fd as RawFd));
    Ok(())
}

/// sendfile from a regular file into a pipe (any output works since 2.6.33).
pub fn probe_sendfile(file: impl FdArg) -> io::Result<()> {
    let file = file.raw_for_call();
    let (_r, w) = pipe()?;
    let mut off = 0u64;
    sendfile(&w, file, &mut off, 1).map(drop)
}

/// Does `TCP_REPAIR` work on a fresh socket (needs CAP_NET_ADMIN)?
pub fn probe_tcp_repair() -> io::Result<()> {
    let s = tcp_socket(&SocketAddr::from(([127, 0, 0, 1], 0)))?;
    setsockopt_int(&s, libc::IPPROTO_TCP, libc::TCP_REPAIR, 1)
}

/// Does SO_REUSEPORT work?
pub fn probe_reuseport() -> io::Result<()> {
    let s = tcp_socket(&SocketAddr::from(([127, 0, 0, 1], 0)))?;
    set_reuseport(&s, true)
}
