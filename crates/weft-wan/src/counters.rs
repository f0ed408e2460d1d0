//! TCP counters per namespace for a run: `nstat -asz --json` inside each
//! host's namespace (a fresh namespace starts at zero, so the absolute
//! values at the end are the run's). Hosts in the caller's namespace are
//! skipped: their counters include everything else on the machine.
//!
//! Besides the kernel's own counters, three derived ones separate data
//! segments from ACKs (001 Fig. 6's ratio: data packets a server sends per
//! ACK it receives):
//! - `data_segs_out` = TCPOrigDataSent + RetransSegs: every segment sent
//!   with data (Linux's OutSegs leaves retransmissions out);
//! - `acks_out` = OutSegs − TCPOrigDataSent: segments sent without data
//!   (pure ACKs, and the SYN-ACKs, FINs and resets that carry none);
//! - `acks_in` = TCPPureAcks + TCPHPAcks + TCPBacklogCoalesce: ACKs
//!   received, on the slow path without data, on the fast path (which also
//!   counts a data segment whose ACK moves the window: at most the requests
//!   on a server), and those merged into the one before them while the
//!   socket was busy in a system call (the merge takes contiguous data
//!   segments too: on a data receiver this count is not all ACKs).

use std::process::Command;

/// The kernel counters read, with short names.
pub const TCP: &[(&str, &str)] = &[
    ("TcpOutSegs", "segs out"),
    ("TcpInSegs", "segs in"),
    ("TcpRetransSegs", "retrans"),
    ("TcpExtTCPTimeouts", "RTOs"),
    ("TcpExtDelayedACKs", "delayed ACKs"),
    ("TcpExtTCPSackRecovery", "SACK recoveries"),
    ("TcpExtTCPRenoRecovery", "Reno recoveries"),
    ("TcpExtTCPOrigDataSent", "new data segs out"),
    ("TcpExtTCPPureAcks", "slow-path ACKs in"),
    ("TcpExtTCPHPAcks", "fast-path ACKs in"),
    ("TcpExtTCPBacklogCoalesce", "merged in backlog"),
];

/// The derived counters (see the module's notes), with short names.
pub const DERIVED: &[(&str, &str)] = &[
    ("data_segs_out", "data segs out"),
    ("acks_out", "ACKs out"),
    ("acks_in", "ACKs in"),
];

/// The derived counters of a reading of [`TCP`] (missing counters count 0).
pub fn derived(c: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    let get = |name: &str| c.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v);
    let orig = get("TcpExtTCPOrigDataSent");
    vec![
        ("data_segs_out", orig + get("TcpRetransSegs")),
        ("acks_out", get("TcpOutSegs").saturating_sub(orig)),
        (
            "acks_in",
            get("TcpExtTCPPureAcks") + get("TcpExtTCPHPAcks") + get("TcpExtTCPBacklogCoalesce"),
        ),
    ]
}

/// The TCP counters of namespace `ns`, then the derived ones (None if nstat
/// is missing or fails).
pub fn tcp(ns: &str) -> Option<Vec<(&'static str, u64)>> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nstat", "-asz", "--json"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let k = v.get("kernel").unwrap_or(&v);
    let mut c: Vec<(&'static str, u64)> = TCP
        .iter()
        .map(|(name, _)| (*name, k.get(*name).and_then(|x| x.as_u64()).unwrap_or(0)))
        .collect();
    c.extend(derived(&c));
    Some(c)
}

/// The short name of a counter of [`TCP`] or [`DERIVED`].
pub fn short(name: &str) -> &'static str {
    TCP.iter()
        .chain(DERIVED)
        .find(|(k, _)| *k == name)
        .map_or("?", |(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_counts_separate_data_from_acks() {
        let c = [
            ("TcpOutSegs", 130),
            ("TcpRetransSegs", 4),
            ("TcpExtTCPOrigDataSent", 100),
            ("TcpExtTCPPureAcks", 20),
            ("TcpExtTCPHPAcks", 31),
            ("TcpExtTCPBacklogCoalesce", 9),
        ];
        let d = derived(&c);
        assert_eq!(d, vec![("data_segs_out", 104), ("acks_out", 30), ("acks_in", 60)]);
        assert_eq!(
            derived(&[]),
            vec![("data_segs_out", 0), ("acks_out", 0), ("acks_in", 0)]
        );
        assert_eq!(short("acks_in"), "ACKs in");
    }
}
