//! TCP_INFO: one connection's own TCP counters (segments, retransmissions,
//! RTT, congestion window), where `nstat`'s per-namespace totals are not
//! per-connection enough (issue 25: a WAN run's retransmissions on one
//! connection, the RTT TCP itself measured through an emulated path).

use super::{bump, cvt, FdArg, SysKind};
use std::io;
use std::mem::size_of;

/// The fields of `struct tcp_info` weft reports. Fields the running kernel
/// does not fill (an older, shorter struct) read as zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// TCP state (1 = ESTABLISHED, as in the kernel's enum).
    pub state: u8,
    /// Retransmission timeouts in a row now (backoff).
    pub retransmits: u8,
    /// Current retransmission timeout, µs.
    pub rto_us: u32,
    /// Smoothed RTT and its variation, µs.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// Smallest RTT seen, µs.
    pub min_rtt_us: u32,
    /// Congestion window, segments; slow-start threshold.
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    /// Maximum segment size sent.
    pub snd_mss: u32,
    /// Segments believed lost now; retransmitted and not yet acknowledged.
    pub lost: u32,
    pub retrans: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Segments sent and received (all, and those carrying data).
    pub segs_out: u32,
    pub segs_in: u32,
    pub data_segs_out: u32,
    pub data_segs_in: u32,
    /// Bytes acknowledged by the peer; bytes received.
    pub bytes_acked: u64,
    pub bytes_received: u64,
}

/// getsockopt(TCP_INFO) on a TCP socket.
pub fn tcp_info(fd: impl FdArg) -> io::Result<TcpInfo> {
    let fd = fd.raw_for_call();
    // SAFETY: tcp_info is plain data; all-zero is a valid value.
    let mut t: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    bump(SysKind::Other);
    // SAFETY: t and len are valid locals; the kernel writes at most len bytes
    // (a shorter struct from an older kernel leaves the rest zero).
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut t as *mut libc::tcp_info).cast(),
            &mut len,
        )
    })?;
    Ok(TcpInfo {
        state: t.tcpi_state,
        retransmits: t.tcpi_retransmits,
        rto_us: t.tcpi_rto,
        rtt_us: t.tcpi_rtt,
        rttvar_us: t.tcpi_rttvar,
        min_rtt_us: t.tcpi_min_rtt,
        snd_cwnd: t.tcpi_snd_cwnd,
        snd_ssthresh: t.tcpi_snd_ssthresh,
        snd_mss: t.tcpi_snd_mss,
        lost: t.tcpi_lost,
        retrans: t.tcpi_retrans,
        total_retrans: t.tcpi_total_retrans,
        segs_out: t.tcpi_segs_out,
        segs_in: t.tcpi_segs_in,
        data_segs_out: t.tcpi_data_segs_out,
        data_segs_in: t.tcpi_data_segs_in,
        bytes_acked: t.tcpi_bytes_acked,
        bytes_received: t.tcpi_bytes_received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn counts_a_loopback_exchange() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 10_000]).unwrap();
        let mut buf = vec![0u8; 10_000];
        s.read_exact(&mut buf).unwrap();
        let ci = tcp_info(&c).unwrap();
        let si = tcp_info(&s).unwrap();
        assert_eq!(ci.state, 1, "{ci:?}");
        assert!(ci.segs_out >= 2 && ci.data_segs_out >= 1, "{ci:?}");
        assert_eq!(si.bytes_received, 10_000, "{si:?}");
        assert!(ci.snd_mss > 0 && ci.snd_cwnd > 0 && ci.rto_us > 0, "{ci:?}");
        assert_eq!(ci.total_retrans, 0);
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(&u).is_err(), "not a TCP socket");
    }
}
