//! Access control: which source addresses may use the proxy, and which
//! ports a forward proxy may reach for them.
//!
//! A forward proxy open to the world is an abuse magnet, so by default only
//! loopback clients are served (127.0.0.0/8 and ::1); `--allow CIDR` replaces
//! that list. IPv4 clients reaching an IPv6 listener arrive as v4-mapped
//! addresses (`::ffff:a.b.c.d`) and are matched as IPv4.
//!
//! Even an allowed client may not send an HTTP request to any port: one
//! aimed at a mail, SSH or database port smuggles its lines into another
//! protocol, from the proxy's address (the cross-protocol request). Forward
//! requests reach only [`Ports::forward_default`] (`--forward-ports`), and
//! CONNECT only 443 (`--connect-ports`), as Squid's default `Safe_ports`
//! and `SSL_ports` rules do.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix such as `10.0.0.0/8` or `::1/128` (a bare address is /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The prefix `addr/prefix`; host bits are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return None;
        }
        Some(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Does the prefix contain `ip`?
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }

    /// The default list: loopback only.
    pub fn loopback() -> Vec<Cidr> {
        vec![
            Cidr::new(IpAddr::from([127, 0, 0, 0]), 8).expect("valid"),
            Cidr::new(IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 128).expect("valid"),
        ]
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
            IpAddr::V6((bits & m).into())
        }
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = || format!("invalid address prefix `{s}` (expected e.g. 10.0.0.0/8, ::1/128 or 192.0.2.7)");
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse::<u8>().map_err(|_| bad())?,
            None => max,
        };
        Cidr::new(addr, prefix).ok_or_else(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Is `ip` in any of `list`?
pub fn allowed(list: &[Cidr], ip: IpAddr) -> bool {
    list.iter().any(|c| c.contains(ip))
}

/// A set of TCP ports, written `80,443,1025-65535`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports(Vec<(u16, u16)>);

impl Ports {
    /// Where CONNECT may go: 443 (Squid's `SSL_ports`).
    pub fn connect_default() -> Ports {
        Ports(vec![(443, 443)])
    }

    /// Where a forward request may go: Squid's default `Safe_ports` less
    /// ftp (21), gopher (70) and wais (210), which weft does not proxy —
    /// 80, 280, 443, 488, 591, 777 and every port above 1024.
    pub fn forward_default() -> Ports {
        Ports(vec![
            (80, 80),
            (280, 280),
            (443, 443),
            (488, 488),
            (591, 591),
            (777, 777),
            (1025, 65535),
        ])
    }

    /// Is `port` in the set?
    pub fn contains(&self, port: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
    }
}

impl FromStr for Ports {
    type Err = String;

    fn from_str(s: &str) -> Result<Ports, String> {
        let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&n| n > 0);
        let mut v = Vec::new();
        for item in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let range = match item.split_once('-') {
                Some((lo, hi)) => port(lo).zip(port(hi)).filter(|(lo, hi)| lo <= hi),
                None => port(item).map(|p| (p, p)),
            };
            let Some(r) = range else {
                return Err(format!(
                    "invalid port `{item}` in `{s}` (expected e.g. 443,8443 or 1025-65535)"
                ));
            };
            v.push(r);
        }
        if v.is_empty() {
            return Err(format!("empty port list `{s}`"));
        }
        Ok(Ports(v))
    }
}

impl fmt::Display for Ports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            if lo == hi {
                write!(f, "{sep}{lo}")?;
            } else {
                write!(f, "{sep}{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_match() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains(ip("10.1.200.3")));
        assert!(!c.contains(ip("10.2.0.1")));
        let host: Cidr = "192.0.2.7".parse().unwrap();
        assert!(host.contains(ip("192.0.2.7")));
        assert!(!host.contains(ip("192.0.2.8")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!(!all.contains(ip("2001:db8::1")), "families do not mix");
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")));
        assert_eq!("10.1.2.3/8".parse::<Cidr>().unwrap().to_string(), "10.0.0.0/8");
        for bad in ["10.0.0.0/33", "::/129", "nonsense", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn port_sets() {
        let p: Ports = "443, 8000-8999,1025-65535".parse().unwrap();
        assert!(p.contains(443) && p.contains(8000) && p.contains(8999) && p.contains(65535));
        assert!(!p.contains(25) && !p.contains(444) && !p.contains(1024));
        assert_eq!(p.to_string(), "443,8000-8999,1025-65535");
        for bad in ["", ",", "0", "25-24", "1-65536", "x", "80-", "-80", "80,,x"] {
            assert!(bad.parse::<Ports>().is_err(), "{bad:?}");
        }
        let f = Ports::forward_default();
        for ok in [80, 443, 777, 1025, 3128, 8080, 65535] {
            assert!(f.contains(ok), "{ok}");
        }
        for refused in [21, 22, 25, 110, 143, 445, 587, 1024] {
            assert!(!f.contains(refused), "{refused}");
        }
        assert_eq!(f.to_string().parse::<Ports>().unwrap(), f);
        assert!(Ports::connect_default().contains(443) && !Ports::connect_default().contains(80));
    }

    #[test]
    fn default_is_loopback_only_including_mapped_v4() {
        let l = Cidr::loopback();
        assert!(allowed(&l, ip("127.0.0.1")));
        assert!(allowed(&l, ip("127.8.9.10")));
        assert!(allowed(&l, ip("::1")));
        assert!(allowed(&l, ip("::ffff:127.0.0.1")));
        assert!(!allowed(&l, ip("10.0.0.1")));
        assert!(!allowed(&l, ip("::ffff:10.0.0.1")));
        assert!(!allowed(&l, ip("2001:db8::1")));
    }
}
