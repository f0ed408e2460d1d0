//! A whole `weft wan` run: remove stale namespaces, build the network, start
//! the router and the command, wait, and take everything down again (also
//! on SIGTERM, SIGINT without a command, or an error).

use crate::config::{Mode, Topology};
use crate::counters;
use crate::model::Direction;
use crate::netns::{self, Net};
use crate::router::{Router, RouterStats};
use crate::tuning::Tuning;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use weft_io::sys;

/// What to run inside the emulated network.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Host whose namespace runs the command (default: the first host).
    pub on: Option<String>,
    /// The command (empty: `$SHELL`, unless `hold`).
    pub command: Vec<String>,
    /// Run no command: keep the network up until SIGINT or SIGTERM.
    pub hold: bool,
    /// Write the hosts' namespaces and addresses here (JSON) once ready.
    pub ready: Option<PathBuf>,
    /// Write the router's counters here (JSON) at the end.
    pub stats: Option<PathBuf>,
    /// No summary on stderr.
    pub quiet: bool,
    /// How the router thread waits and runs.
    pub tuning: Tuning,
}

fn env_name(host: &str) -> String {
    format!("WEFT_WAN_{}", host.to_ascii_uppercase().replace('-', "_"))
}

/// The hosts' namespaces and addresses as JSON.
fn ready_json(topo: &Topology, net: &Net) -> serde_json::Value {
    let hosts: serde_json::Map<String, serde_json::Value> = topo
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let v = serde_json::json!({"ns": net.ns[i], "addr": net.addrs[i].to_string()});
            (h.name.clone(), v)
        })
        .collect();
    // `offloads`: "on" when GSO/GRO/TSO could not be turned off (veth mode
    // without ethtool); a script that counts packets must not go on then.
    serde_json::json!({"pid": std::process::id(), "mode": format!("{:?}", topo.mode).to_lowercase(), "hosts": hosts,
        "offloads": if net.offloads_on { "on" } else { "off" }, "notes": net.notes})
}

fn spawn(topo: &Topology, net: &Net, opts: &RunOptions) -> Result<Option<Child>, String> {
    if opts.hold {
        return Ok(None);
    }
    let on = match &opts.on {
        Some(n) => topo.host(n).ok_or_else(|| format!("--on: no host named `{n}`"))?,
        None => 0,
    };
    let mut argv = opts.command.clone();
    if argv.is_empty() {
        argv.push(std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into()));
    }
    let mut cmd = match &net.ns[on] {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).args(&argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    for (i, h) in topo.hosts.iter().enumerate() {
        cmd.env(env_name(&h.name), net.addrs[i].to_string());
    }
    cmd.spawn()
        .map(Some)
        .map_err(|e| format!("cannot start `{}`: {e}", argv.join(" ")))
}

fn start_router(topo: &Topology, net: &mut Net, tuning: &Tuning) -> Result<Option<RouterThread>, String> {
    if topo.mode != Mode::Tun {
        return Ok(None);
    }
    let seed = topo.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut r = Router::new(std::mem::take(&mut net.tuns), &net.addrs);
    for (i, l) in topo.links.iter().enumerate() {
        let s = seed.wrapping_add(2 * i as u64 * 0x9e37_79b9);
        // With the kernel shaper, HTB on the TUN devices enforces the rates.
        let spec = |d: &crate::config::DirSpec| {
            let mut d = d.clone();
            if topo.shaper == crate::config::Shaper::Kernel {
                d.rate = None;
            }
            d
        };
        r.add(l.a, l.b, Direction::new(spec(&l.up), s));
        r.add(l.b, l.a, Direction::new(spec(&l.down), s.wrapping_add(0x9e37_79b9)));
    }
    let stop = Arc::new(sys::eventfd().map_err(|e| format!("eventfd: {e}"))?);
    let stop2 = Arc::clone(&stop);
    let tuning = tuning.clone();
    let h = std::thread::Builder::new()
        .name("wan-router".into())
        .spawn(move || {
            // Real-time when allowed: a delay line's wake-ups must not wait
            // behind a busy machine's other work (tests and lab share 2 cores).
            for note in tuning.apply() {
                eprintln!("weft wan: note: {note}");
            }
            r.run(&stop2, &tuning)
        })
        .map_err(|e| format!("cannot start the router thread: {e}"))?;
    Ok(Some(RouterThread { stop, h }))
}

struct RouterThread {
    stop: Arc<sys::Fd>,
    h: std::thread::JoinHandle<std::io::Result<RouterStats>>,
}

/// Run `topo` with `opts`; returns the exit status (the command's, or 1/2 on errors).
pub fn run(topo: &Topology, opts: &RunOptions) -> i32 {
    for line in netns::remove_stale() {
        eprintln!("weft wan: {line}");
    }
    let mut net = match netns::build(topo) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("weft wan: {e}");
            return 1;
        }
    };
    for n in &net.notes {
        eprintln!("weft wan: note: {n}");
    }
    let ready = ready_json(topo, &net);
    if !opts.quiet {
        eprintln!("weft wan: ready {ready}");
    }
    let mut child = match spawn(topo, &net, opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft wan: {e}");
            return 2;
        }
    };
    // Signals go to the waiting thread only; the command was started before
    // this, so it keeps the default dispositions.
    let _ = sys::block_shutdown_signals();
    let router = match start_router(topo, &mut net, &opts.tuning) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weft wan: {e}");
            if let Some(c) = child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return 1;
        }
    };
    if let Some(p) = &opts.ready {
        // Written only now that the router runs: a script may use the network
        // at once. Whole or not at all: a script waits for the path to exist.
        if let Err(e) = weft_io::statefile::write_whole(p, format!("{ready}\n").as_bytes()) {
            eprintln!("weft wan: cannot write {}: {e}", p.display());
        }
    }
    let status = wait(child.as_mut());
    let tcp = tcp_counters(topo, &net, opts.quiet);
    if let Some(rt) = router {
        let _ = sys::eventfd_signal(&*rt.stop);
        match rt.h.join() {
            Ok(Ok(st)) => report(topo, &st, &tcp, opts),
            Ok(Err(e)) => eprintln!("weft wan: router failed: {e}"),
            Err(_) => eprintln!("weft wan: router thread panicked"),
        }
    }
    drop(net);
    status
}

/// Wait for the command to end, or for a signal without one. SIGTERM ends
/// the command; SIGINT reached the command too (same terminal), so it is
/// left to it.
fn wait(child: Option<&mut Child>) -> i32 {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(sig) = sys::wait_shutdown_signal() {
            if tx.send(sig).is_err() {
                break;
            }
        }
    });
    let Some(child) = child else {
        let _ = rx.recv();
        return 0;
    };
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st.code().unwrap_or(128 + 15),
            Ok(None) => {}
            Err(_) => return 1,
        }
        if let Ok(sig) = rx.recv_timeout(Duration::from_millis(50)) {
            if sig != 2 {
                sys::signal::terminate(child.id());
            }
        }
    }
}

fn report(topo: &Topology, st: &RouterStats, tcp: &serde_json::Value, opts: &RunOptions) {
    let name = |i: usize| topo.hosts[i].name.as_str();
    if !opts.quiet {
        for (a, b, d) in &st.dirs {
            if d.packets == 0 {
                continue;
            }
            eprintln!(
                "weft wan: {}->{}: {} packets, {} lost ({:.3} %), {} queue drops",
                name(*a),
                name(*b),
                d.packets,
                d.lost,
                100.0 * d.lost as f64 / d.packets as f64,
                d.queue_drops
            );
        }
        eprintln!(
            "weft wan: delivered {}, unroutable {}, overflow {}; own added delay p50 {:.1} us, p99 {:.1} us, max {:.1} us; {:.2} us per write",
            st.delivered,
            st.unroutable,
            st.overflow,
            st.lateness_us(0.5),
            st.lateness_us(0.99),
            st.lateness_us(1.0),
            st.write_ns as f64 / 1e3 / st.delivered.max(1) as f64
        );
    }
    if let Some(p) = &opts.stats {
        let dirs: Vec<serde_json::Value> = st
            .dirs
            .iter()
            .map(|(a, b, d)| {
                serde_json::json!({"from": name(*a), "to": name(*b), "packets": d.packets, "bytes": d.bytes,
                    "lost": d.lost, "queue_drops": d.queue_drops})
            })
            .collect();
        let v = serde_json::json!({"dirs": dirs, "delivered": st.delivered, "unroutable": st.unroutable,
            "overflow": st.overflow, "tcp": tcp, "lateness_us": {"p50": st.lateness_us(0.5), "p99": st.lateness_us(0.99),
            "p999": st.lateness_us(0.999), "max": st.lateness_us(1.0), "samples": st.lateness.len()},
            "reads": st.reads, "write_ns": st.write_ns, "sleeps": st.sleeps, "spins": st.spins});
        if let Err(e) = std::fs::write(p, format!("{v}\n")) {
            eprintln!("weft wan: cannot write {}: {e}", p.display());
        }
    }
}

/// Each namespace's TCP counters for the run, printed and as JSON.
fn tcp_counters(topo: &Topology, net: &Net, quiet: bool) -> serde_json::Value {
    let mut all = serde_json::Map::new();
    for (i, h) in topo.hosts.iter().enumerate() {
        let Some(ns) = &net.ns[i] else { continue };
        let Some(c) = counters::tcp(ns) else {
            if !quiet {
                eprintln!("weft wan: {}: no TCP counters (is nstat installed?)", h.name);
            }
            continue;
        };
        if !quiet {
            let line: Vec<String> = c.iter().map(|(k, v)| format!("{} {v}", counters::short(k))).collect();
            eprintln!("weft wan: {} TCP: {}", h.name, line.join(", "));
        }
        let m: serde_json::Map<String, serde_json::Value> =
            c.into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
        all.insert(h.name.clone(), m.into());
    }
    all.into()
}
