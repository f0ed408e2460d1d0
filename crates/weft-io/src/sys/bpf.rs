//! Socket facts the sockmap forwarder (`weft proxy --splice sockmap`, crate
//! weft-sockmap) needs: a socket's cookie (the key its BPF program looks up)
//! and whether its peer's FIN has arrived.

use super::{bump, cvt, FdArg, SysKind};
use std::io;
use std::mem::size_of;

/// getsockopt(SO_COOKIE): the kernel's 64-bit identity of a socket, the same
/// value `bpf_get_socket_cookie` returns inside a BPF program.
pub fn socket_cookie(fd: impl FdArg) -> io::Result<u64> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut value: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: value and len are valid locals of the sizes passed.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// getsockopt(TCP_INFO): whether the peer's FIN has arrived
/// ([`super::TcpInfo::fin_received`]), seen without reading, which a socket
/// in a sockmap does not do. Taking the socket's lock, it also waits out a
/// softirq still processing the segments before the FIN.
pub fn fin_received(fd: impl FdArg) -> io::Result<bool> {
    Ok(super::tcp_info(fd)?.fin_received())
}

/// The batch part of `union bpf_attr` (BPF_MAP_*_BATCH).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// The number of whole `size`-byte items in `bytes`; an error unless it
/// holds exactly `count` of them.
fn items(bytes: &[u8], size: usize, count: usize) -> io::Result<u32> {
    if size == 0 || bytes.len() != size * count {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    u32::try_from(count).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn batch(cmd: libc::c_long, attr: &mut BatchAttr) -> io::Result<()> {
    bump(SysKind::Other);
    // SAFETY: attr is a live, writable BatchAttr of the size passed (the
    // kernel writes back only its `count`); the keys and values it points
    // to are borrowed slices that outlive the call, holding `count` items
    // of the sizes the callers checked with `items`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut BatchAttr,
            size_of::<BatchAttr>() as u32,
        )
    };
    cvt(i32::try_from(r).unwrap_or(-1)).map(drop)
}

/// bpf(BPF_MAP_UPDATE_BATCH), flags BPF_ANY: insert or replace several
/// entries of a hash map in one call. `keys` and `values` hold them back to
/// back, `key_size` and `value_size` bytes each: the map's own sizes (the
/// kernel reads that many per entry). Entries before a failing one stay.
pub fn map_update_batch(
    map: impl FdArg,
    key_size: usize,
    keys: &[u8],
    value_size: usize,
    values: &[u8],
) -> io::Result<()> {
    let n = keys.len() / key_size.max(1);
    let count = items(keys, key_size, n)?;
    items(values, value_size, n)?;
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count,
        map_fd: map.raw_for_call() as u32,
        ..BatchAttr::default()
    };
    batch(BPF_MAP_UPDATE_BATCH, &mut attr)
}

/// bpf(BPF_MAP_DELETE_BATCH): remove several entries of a hash map in one
/// call; `keys` holds them back to back, `key_size` bytes each (the map's
/// key size). The kernel stops at the first key that is missing (ENOENT).
pub fn map_delete_batch(map: impl FdArg, key_size: usize, keys: &[u8]) -> io::Result<()> {
    let n = keys.len() / key_size.max(1);
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        count: items(keys, key_size, n)?,
        map_fd: map.raw_for_call() as u32,
        ..BatchAttr::default()
    };
    batch(BPF_MAP_DELETE_BATCH, &mut attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_are_checked_before_the_call() {
        // A descriptor that is no map: only the size checks are reached.
        let bad = items(&[0u8; 16], 8, 3);
        assert!(bad.is_err());
        assert_eq!(items(&[0u8; 16], 8, 2).unwrap(), 2);
        assert!(items(&[0u8; 16], 0, 0).is_err());
    }

    #[test]
    fn batch_on_a_descriptor_that_is_no_map_fails() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let keys = 1u64.to_ne_bytes();
        let e = map_delete_batch(&a, 8, &keys).unwrap_err();
        // EINVAL (not a map) or EPERM (no CAP_BPF).
        assert!(
            matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)),
            "{e:?}"
        );
    }
}
