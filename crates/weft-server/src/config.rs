//! Settings of `weft serve`, already validated (the CLI and `weft.toml` build it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use weft_io::BackendKind;

/// How file bodies reach the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SendMode {
    /// sendfile(2): page cache to socket, no byte through user space; the
    /// head goes first with send(MSG_MORE) so small files leave in one segment.
    Sendfile,
    /// pread(2) into a per-worker buffer, then writev(2) of head and data.
    Copy,
    /// Small files from an in-memory copy (one write per response, pipelined
    /// responses coalesced); larger files by sendfile, which on this kernel
    /// costs no more CPU than a copy even to loopback peers (lab `send-path`).
    #[default]
    Auto,
}

weft_core::enum_names!(SendMode, "send mode", {
    Sendfile => "sendfile",
    Copy => "copy",
    Auto => "auto",
});

/// A content coding served from a precompressed sidecar file (`X.br`,
/// `X.gz` beside `X`; `--precompressed`). Its `name()` is the coding's name
/// in Accept-Encoding and Content-Encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precompressed {
    /// Brotli, from `X.br`.
    Br,
    /// gzip, from `X.gz`.
    Gzip,
}

weft_core::enum_names!(Precompressed, "precompressed coding", {
    Br => "br",
    Gzip => "gzip",
});

impl Precompressed {
    /// The sidecar's suffix.
    pub fn suffix(self) -> &'static [u8] {
        match self {
            Precompressed::Br => b".br",
            Precompressed::Gzip => b".gz",
        }
    }

    /// `br,gzip`: the codings in the server's order of preference; `off`:
    /// none.
    pub fn parse_list(s: &str) -> Result<Vec<Precompressed>, String> {
        let mut v: Vec<Precompressed> = Vec::new();
        if s.trim() == "off" {
            return Ok(v);
        }
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let c: Precompressed = item.parse()?;
            if !v.contains(&c) {
                v.push(c);
            }
        }
        Ok(v)
    }
}

/// How a worker waits on the disk (thesis 004 ch. 4; `docs/serve.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Arch {
    /// Asymmetric multi-process event-driven: the loop tests residency before
    /// reading; misses and opens of uncached paths go to helper threads.
    #[default]
    Amped,
    /// Single-process event-driven: the loop reads (and may block) itself.
    Sped,
    /// A thread per connection, blocking I/O.
    Mt,
    /// A pool of processes, each serving one connection at a time.
    Mp,
}

weft_core::enum_names!(Arch, "architecture", {
    Amped => "amped",
    Sped => "sped",
    Mt => "mt",
    Mp => "mp",
});

/// How AMPED asks whether a file range is in the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ResidencyTest {
    /// `cachestat(2)`: pages of the range in the page cache, no copy and no
    /// I/O started (falls back to `nowait` on kernels before 6.5).
    #[default]
    Cachestat,
    /// `preadv2(RWF_NOWAIT)` probes of the range (copied into a scratch
    /// buffer); a miss starts read-ahead from the loop's thread.
    Nowait,
    /// `mincore` over a temporary mapping.
    Mincore,
    /// No test: every read is tried in the loop (SPED's behaviour for bodies).
    None,
}

weft_core::enum_names!(ResidencyTest, "residency test", {
    Cachestat => "cachestat",
    Nowait => "nowait",
    Mincore => "mincore",
    None => "none",
});

/// Everything `weft serve` needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Document root; `None` serves the built-in demo site.
    pub root: Option<PathBuf>,
    /// Address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// Event backend.
    pub event: BackendKind,
    /// `tracked` backends: passes served from the readiness table before the
    /// kernel is asked anyway.
    pub max_pass: u32,
    /// `uring` and `tracked` (over uring): wake-up batching interval (zero:
    /// off); see `weft_io::BackendOptions::wake_interval`.
    pub wake_interval: Duration,
    /// Worker threads, each with its own SO_REUSEPORT listener and loop.
    pub workers: usize,
    /// Connections accepted per listener readiness event (`None` = until
    /// EAGAIN). The default, 10, is the µserver study's finding, measured
    /// again here (docs/results.md, "accept limits"): accepting until EAGAIN
    /// loses a quarter or more of the replies past the knee, a limit costs
    /// nothing below it.
    pub accept_limit: Option<usize>,
    /// Listen backlog.
    pub backlog: i32,
    /// Share the listening port with other processes (`--reuse-port`);
    /// otherwise a port another process holds is an error.
    pub reuse_port: bool,
    /// Connections a worker holds at most; more are closed at accept (0 = unlimited).
    pub max_connections: usize,
    /// Close a keep-alive connection idle this long.
    pub idle_timeout: Duration,
    /// Close a connection whose request head is not complete this long after it began.
    pub header_timeout: Duration,
    /// Close a connection that makes no write progress this long.
    pub send_timeout: Duration,
    /// Requests per connection before it is closed (0 = unlimited).
    pub max_requests: u64,
    /// Body transfer path.
    pub send: SendMode,
    /// Files up to this size are kept in memory in `auto` mode.
    pub small_file_max: u64,
    /// Open files cached per worker (pathname → descriptor, metadata, header fields).
    pub file_cache_entries: usize,
    /// Revalidate cached file metadata after this long.
    pub file_cache_valid: Duration,
    /// Serve directory listings when there is no index.html.
    pub autoindex: bool,
    /// Sidecar codings sent instead of a file to clients that accept them,
    /// in order of preference (`--precompressed br,gzip`); empty: off.
    pub precompressed: Vec<Precompressed>,
    /// Let symlinks lead outside the root.
    pub follow_symlinks: bool,
    /// Combined Log Format access log.
    pub access_log: Option<PathBuf>,
    /// The access log's line format (`--access-log-format`).
    pub access_log_format: crate::accesslog::Format,
    /// How long in-flight responses may take to finish after SIGTERM/SIGINT.
    pub grace: Duration,
    /// Request limits.
    pub limits: weft_http::Limits,
    /// Print counters (requests, bytes per path, syscalls by kind) at exit.
    pub stats_on_exit: bool,
    /// Serve live counters as JSON on this address.
    pub admin: Option<SocketAddr>,
    /// Also take client connections handed over by `weft front --mode
    /// handoff` on this Unix SEQPACKET socket (a path, or `@name`).
    pub handoff_socket: Option<String>,
    /// `--cgi` / `--fastcgi` prefixes and their settings.
    pub cgi: Option<std::sync::Arc<crate::cgi::CgiConfig>>,
    /// Architecture (`--arch`).
    pub arch: Arch,
    /// Residency test before reading (`--residency`, AMPED only).
    pub residency: ResidencyTest,
    /// Helper threads at most (AMPED), started on demand.
    pub helpers: usize,
    /// How helpers bring a range into the page cache (`--helper-load`).
    pub helper_load: weft_io::sys::residency::LoadMethod,
    /// Which files' pages stay in the page cache after their response
    /// (`--page-cache-admit`, AMPED only; `crate::admit`).
    pub page_cache_admit: crate::admit::PageCacheAdmit,
    /// Pathname translations cached per worker (0: translate every request).
    pub path_cache: usize,
    /// Keep response header fields ready to send (off: built per request).
    pub head_cache: bool,
    /// Bytes of file contents (small bodies, mapped chunks) a worker keeps
    /// (0: none; bodies are read or sent from the file every time).
    pub file_cache: u64,
    /// IO-Lite object cache budget per worker in bytes (0: off).
    pub object_cache: u64,
    /// Object cache replacement (`--cache-policy`, `--gds-cost`).
    pub cache_policy: weft_policy::PolicyKind,
    /// `--booster-from`: peers whose `X-Weft-Target` (the target a web
    /// booster parsed and validated) is used instead of the request line's;
    /// from anyone else the header is ignored.
    pub booster_from: Vec<std::net::IpAddr>,
    /// Re-check a file sent with sendfile before its last bytes (a response
    /// is a snapshot: a file changed mid-send aborts the connection).
    pub snapshot_check: bool,
    /// `--snapshot-check notify`: the check before a response's head is an
    /// inotify change notice, not an `fstat` (event-loop architectures).
    pub snapshot_notify: bool,
    /// MT: threads; MP: processes (each serving one connection at a time).
    /// `None`: the thesis's settings scaled (MT 64, MP 32; `docs/serve.md`).
    pub pool: Option<usize>,
    /// This process is one of an MP server's processes: the pid of the
    /// server that started it (it exits when that is no longer its parent).
    pub mp_parent: Option<u32>,
    /// SO_SNDBUF of every accepted connection (set on the listeners, which
    /// accepted sockets inherit); `None`: the kernel's autotuning (`--send-buffer`).
    pub send_buffer: Option<usize>,
    /// Send large mapped chunks with MSG_ZEROCOPY (`crate::stream`).
    pub zero_copy_send: bool,
    /// Caches also shrink on this kernel notification (`crate::memory`).
    pub memory_pressure: crate::memory::MemoryPressure,
    /// Test only: every residency test misses (forces the helper path).
    pub test_miss: bool,
    /// Test only: each helper job first sleeps this long (a slow disk).
    pub test_disk_delay: Duration,
    /// Virtual hosts (`[[serve.site]]`, `--site`).
    pub sites: Vec<crate::vhost::SiteSpec>,
    /// The sites' name tables, built by `Server::start` (None: no sites).
    pub site_table: Option<std::sync::Arc<crate::vhost::Sites>>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            root: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            event: BackendKind::Epoll,
            max_pass: weft_io::backend::DEFAULT_MAX_PASS,
            wake_interval: Duration::ZERO,
            workers: weft_io::sys::available_cpus(),
            accept_limit: Some(10),
            backlog: 4096,
            reuse_port: false,
            max_connections: 0,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            max_requests: 0,
            send: SendMode::Auto,
            small_file_max: 16 * 1024,
            file_cache_entries: 1000,
            file_cache_valid: Duration::from_secs(1),
            autoindex: false,
            precompressed: Vec::new(),
            follow_symlinks: false,
            access_log: None,
            access_log_format: crate::accesslog::Format::Combined,
            grace: Duration::from_secs(10),
            limits: weft_http::Limits::default(),
            stats_on_exit: false,
            admin: None,
            handoff_socket: None,
            cgi: None,
            arch: Arch::Amped,
            residency: ResidencyTest::Cachestat,
            helpers: 8,
            helper_load: weft_io::sys::residency::LoadMethod::Readahead,
            page_cache_admit: crate::admit::PageCacheAdmit::All,
            path_cache: 1000,
            head_cache: true,
            file_cache: 64 << 20,
            object_cache: 0,
            cache_policy: weft_policy::PolicyKind::Gds(weft_policy::GdsCost::One),
            booster_from: Vec::new(),
            snapshot_check: true,
            snapshot_notify: false,
            pool: None,
            mp_parent: None,
            send_buffer: None,
            memory_pressure: Default::default(),
            zero_copy_send: false,
            test_miss: false,
            test_disk_delay: Duration::ZERO,
            sites: Vec::new(),
            site_table: None,
        }
    }
}
