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
    /// Data bytes sent, retransmissions included; of those, retransmitted.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// Bytes written and not yet sent.
    pub notsent_bytes: u32,
}

impl TcpInfo {
    /// Data bytes written into the socket over its life: sent once (not
    /// counting retransmissions) plus not yet sent. One snapshot, taken
    /// under the socket's lock, where `bytes_acked` and SIOCOUTQ would be
    /// two reads with ACKs arriving between them. The in-kernel forwarding
    /// checks with it that the kernel wrote exactly the bytes it was given
    /// (weft-proxy's sockmap paths).
    pub fn written(&self) -> u64 {
        self.bytes_sent.saturating_sub(self.bytes_retrans) + u64::from(self.notsent_bytes)
    }

    /// Whether the peer's FIN has arrived (CLOSE_WAIT, LAST_ACK, CLOSING,
    /// TIME_WAIT or CLOSE), as [`super::bpf::fin_received`] tells.
    pub fn fin_received(&self) -> bool {
        matches!(self.state, 6..=9 | 11)
    }

    /// Data bytes received: `bytes_received` counts sequence space, where
    /// the FIN takes one.
    pub fn data_received(&self) -> u64 {
        self.bytes_received - u64::from(self.fin_received() && self.bytes_received > 0)
    }
}

/// Data bytes taken from the socket's receive queue over its life (read by
/// the application, or handed to a sockmap verdict): `bytes_received` less
/// what waits unread (SIOCINQ). The two come from two calls; the unread
/// count is asked before and after, and the answer stands only when it did
/// not change between (nothing arrived and nothing was taken meanwhile):
/// up to four tries, then `WouldBlock`. For a socket nobody reads while
/// this runs (weft asks just before a sockmap join).
pub fn bytes_taken(fd: impl FdArg + Copy) -> io::Result<u64> {
    for _ in 0..4 {
        let before = super::bytes_readable(fd)? as u64;
        let received = tcp_info(fd)?.data_received();
        let after = super::bytes_readable(fd)? as u64;
        if before == after {
            return Ok(received.saturating_sub(before));
        }
    }
    Err(io::ErrorKind::WouldBlock.into())
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
        bytes_sent: t.tcpi_bytes_sent,
        bytes_retrans: t.tcpi_bytes_retrans,
        notsent_bytes: t.tcpi_notsent_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A connected loopback pair: (client, server).
    fn connected() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    }

    #[test]
    fn counts_a_loopback_exchange() {
        let (mut c, mut s) = connected();
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

    #[test]
    fn written_counts_every_byte_once_sent_or_not() {
        let (mut c, mut s) = connected();
        assert_eq!(tcp_info(&c).unwrap().written(), 0, "the handshake carries no data");
        // More than the peer's window takes at once: some stays unsent.
        c.set_nonblocking(true).unwrap();
        let chunk = vec![9u8; 1 << 20];
        let mut wrote = 0u64;
        for _ in 0..64 {
            match c.write(&chunk) {
                Ok(n) => wrote += n as u64,
                Err(_) => break,
            }
        }
        let i = tcp_info(&c).unwrap();
        assert_eq!(i.written(), wrote, "{i:?}");
        // Read it all: the count stays what was written.
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        while got < wrote {
            got += s.read(&mut buf).unwrap() as u64;
        }
        assert_eq!(tcp_info(&c).unwrap().written(), wrote);
    }

    #[test]
    fn bytes_taken_leaves_out_what_waits_unread() {
        let (mut c, mut s) = connected();
        c.write_all(&[1u8; 5000]).unwrap();
        let mut buf = [0u8; 1200];
        s.read_exact(&mut buf).unwrap();
        // All 5000 arrive; 1200 were read.
        let mut taken = 0;
        for _ in 0..100 {
            if tcp_info(&s).unwrap().bytes_received == 5000 {
                taken = bytes_taken(&s).unwrap();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(taken, 1200);
        assert!(!tcp_info(&s).unwrap().fin_received());
        drop(c);
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), 3800);
        assert!(tcp_info(&s).unwrap().fin_received());
        assert_eq!(bytes_taken(&s).unwrap(), 5000);
    }
}
