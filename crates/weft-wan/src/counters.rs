//! TCP counters per namespace for a run: `nstat -asz --json` inside each
//! host's namespace (a fresh namespace starts at zero, so the absolute
//! values at the end are the run's). Hosts in the caller's namespace are
//! skipped: their counters include everything else on the machine.

use std::process::Command;

/// The counters reported, with short names.
pub const TCP: &[(&str, &str)] = &[
    ("TcpOutSegs", "segs out"),
    ("TcpInSegs", "segs in"),
    ("TcpRetransSegs", "retrans"),
    ("TcpExtTCPTimeouts", "RTOs"),
    ("TcpExtDelayedACKs", "delayed ACKs"),
    ("TcpExtTCPSackRecovery", "SACK recoveries"),
    ("TcpExtTCPRenoRecovery", "Reno recoveries"),
];

/// The TCP counters of namespace `ns` (None if nstat is missing or fails).
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
    Some(
        TCP.iter()
            .map(|(name, _)| (*name, k.get(*name).and_then(|x| x.as_u64()).unwrap_or(0)))
            .collect(),
    )
}
