//! `weft serve`'s Flash and IO-Lite flags (issue 24): the architecture, the
//! residency test and helpers, Flash's three caches and the object cache.
//! Flattened into [`crate::serve::ServeArgs`].

use crate::args::{duration as parse_duration, set_given, size as parse_size};
use clap::Args;
use std::time::Duration;
use weft_io::sys::residency::LoadMethod;
use weft_policy::{GdsCost, PolicyKind};

fn parse_helpers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("invalid count `{s}` (expected 1..1024)")),
    }
}

fn parse_helper_load(s: &str) -> Result<LoadMethod, String> {
    match s {
        "readahead" => Ok(LoadMethod::Readahead),
        "read" => Ok(LoadMethod::Read),
        _ => Err(format!("invalid helper load `{s}` (readahead or read)")),
    }
}

fn parse_entries(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= 10_000_000 => Ok(n),
        _ => Err(format!("invalid entry count `{s}` (expected 0..10000000)")),
    }
}

/// Flash (thesis 004 ch. 4) and IO-Lite (ch. 2) settings of `weft serve`.
#[derive(Args, Debug, Default)]
pub struct FlashArgs {
    /// Architecture: amped (the loop never waits on the disk: residency test first, helpers for
    /// misses and uncached opens), sped (the loop reads itself and may block), mt (a thread per
    /// connection, blocking I/O) or mp (a pool of processes, one connection at a time each)
    /// [default: amped].
    #[arg(long, value_name = "amped|sped|mt|mp")]
    pub arch: Option<weft_server::Arch>,

    /// AMPED: how the loop asks whether a file range is in the page cache: cachestat (no copy,
    /// no I/O; nowait before Linux 6.5), nowait (preadv2 RWF_NOWAIT probes), mincore, or none
    /// [default: cachestat].
    #[arg(long, value_name = "cachestat|nowait|mincore|none")]
    pub residency: Option<weft_server::ResidencyTest>,

    /// AMPED: helper threads at most, started on demand and kept in reserve [default: 8].
    #[arg(long, value_name = "N", value_parser = parse_helpers)]
    pub helpers: Option<usize>,

    /// AMPED: how a helper brings a file range into the page cache: readahead (start read-ahead
    /// and wait until the pages are in without reading them, so the send is their only use) or
    /// read (read them through a buffer: the kernel then counts two uses and protects those
    /// pages) [default: readahead].
    #[arg(long, value_name = "readahead|read", value_parser = parse_helper_load)]
    pub helper_load: Option<LoadMethod>,

    /// AMPED: which files' pages stay in the page cache after their response: all (the kernel
    /// decides) or reuse (a file of 64 KiB or more whose previous request was more than the
    /// --file-cache budget of disk inflow ago has its pages dropped once sent; requested again
    /// sooner, it stays) [default: all].
    #[arg(long, value_name = "all|reuse")]
    pub page_cache_admit: Option<weft_server::admit::PageCacheAdmit>,

    /// Pathname translations cached per worker; 0 translates (opens and stats) every request
    /// [default: 1000].
    #[arg(long, value_name = "N", value_parser = parse_entries)]
    pub path_cache: Option<usize>,

    /// Keep response header fields ready to send; off builds them per request [default: on].
    #[arg(long, value_name = "on|off", value_parser = parse_on_off, num_args = 0..=1, default_missing_value = "on")]
    pub head_cache: Option<bool>,

    /// Bytes of file contents a worker keeps in its file cache (small files' bytes); 0 reads or
    /// sends every body from the file [default: 64MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub file_cache: Option<u64>,

    /// IO-Lite object cache per worker: ready-to-send responses, bodies held as page-cache
    /// mappings; 0 is off [default: 0].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub object_cache: Option<u64>,

    /// Object cache replacement: gds (Greedy-Dual-Size), lru, or lru-500k (LRU that never keeps
    /// files over 500 KB) [default: gds].
    #[arg(long, value_name = "gds|lru|lru-500k")]
    pub cache_policy: Option<PolicyKind>,

    /// Greedy-Dual-Size's cost: 1, packets (2 + size/536) or bytes [default: 1].
    #[arg(long, value_name = "1|packets|bytes")]
    pub gds_cost: Option<GdsCost>,

    /// Check a file sent from disk again before its last bytes and abort the connection if it
    /// changed, so a rewritten file never arrives as a complete response; notify: as on, but the
    /// check before a response's head is an inotify change notice instead of an fstat (event loop
    /// architectures; see docs/serve.md) [default: on].
    #[arg(long, value_name = "on|off|notify", value_parser = parse_snapshot, num_args = 0..=1, default_missing_value = "on")]
    pub snapshot_check: Option<Snapshot>,

    /// MT: threads [default: 64]; MP: processes [default: 32], each serving one connection at a
    /// time with blocking I/O.
    #[arg(long, value_name = "N", value_parser = parse_helpers)]
    pub pool: Option<usize>,

    /// Also shrink the caches (entries no response uses) on memory pressure: off, cgroup (the v1
    /// memory cgroup's pressure level; cgroup:low|medium|critical, cgroup is medium) or psi
    /// (memory stalls of 100 ms in 2 s, system-wide) [default: off].
    #[arg(long, value_name = "off|cgroup[:LEVEL]|psi")]
    pub memory_pressure: Option<weft_server::memory::MemoryPressure>,

    /// Send large files' chunks with MSG_ZEROCOPY (the kernel pins the pages instead of copying;
    /// each slice held until the kernel releases it); a connection whose sends are copied anyway
    /// (loopback) goes back to plain writes [default: off].
    #[arg(long, value_name = "on|off", value_parser = parse_on_off, num_args = 0..=1, default_missing_value = "on")]
    pub zero_copy_send: Option<bool>,

    /// Test only: every residency test misses, so every file read goes through a helper.
    #[arg(long, hide = true)]
    pub test_miss: bool,

    /// Test only: each helper job sleeps this long first (a slow disk).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_duration)]
    pub test_disk_delay: Option<Duration>,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("invalid switch `{s}` (on or off)")),
    }
}

/// `--snapshot-check`: off, on (fstat), or notify (change notices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Snapshot {
    Off,
    On,
    Notify,
}

fn parse_snapshot(s: &str) -> Result<Snapshot, String> {
    match s {
        "notify" => Ok(Snapshot::Notify),
        _ => match parse_on_off(s) {
            Ok(true) => Ok(Snapshot::On),
            Ok(false) => Ok(Snapshot::Off),
            Err(_) => Err(format!("invalid value `{s}` (on, off or notify)")),
        },
    }
}

impl FlashArgs {
    /// Apply the given flags to `c`.
    pub fn apply(&self, c: &mut weft_server::ServeConfig) {
        set_given!(
            self,
            c;
            arch,
            residency,
            helpers,
            helper_load,
            page_cache_admit,
            path_cache,
            head_cache,
            file_cache,
            object_cache,
            memory_pressure,
            zero_copy_send,
            test_disk_delay
        );
        if let Some(m) = self.snapshot_check {
            c.snapshot_check = m != Snapshot::Off;
            c.snapshot_notify = m == Snapshot::Notify;
        }
        c.test_miss |= self.test_miss;
        c.pool = self.pool.or(c.pool);
        // One of an MP server's processes (started by it, told where to bind).
        if let Some((addr, parent)) = weft_server::blocking::mp_child_env() {
            weft_server::blocking::as_mp_child(c, addr, parent);
        }
        match (self.cache_policy, self.gds_cost) {
            (Some(PolicyKind::Gds(_)) | None, Some(cost)) => c.cache_policy = PolicyKind::Gds(cost),
            (Some(p), _) => c.cache_policy = p,
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse_on_off("off"), Ok(false));
        assert!(parse_on_off("maybe").is_err());
        assert!(parse_helpers("0").is_err());
        assert_eq!(parse_helper_load("read"), Ok(LoadMethod::Read));
        assert!(parse_helper_load("mmap").is_err());
        assert_eq!(parse_helpers("4"), Ok(4));
        let mut c = weft_server::ServeConfig::default();
        let a = FlashArgs {
            gds_cost: Some(GdsCost::Packets),
            ..Default::default()
        };
        a.apply(&mut c);
        assert_eq!(c.cache_policy, PolicyKind::Gds(GdsCost::Packets));
    }
}
