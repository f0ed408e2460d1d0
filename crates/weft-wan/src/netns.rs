//! Namespaces, devices and addresses, made with `ip` and removed on drop.
//!
//! Every name a run creates starts with `ww<pid>`: namespaces are
//! `ww<pid>-<host>`, TUN devices `ww<pid>t<i>`, veth ends `ww<pid>v<link>a|b`.
//! The run also writes `/run/weft-wan/<pid>` listing its namespaces. A
//! namespace outlives a SIGKILLed run (it is a bind mount under
//! `/run/netns`), so every start first removes the namespaces whose owner
//! pid is no longer a running weft ([`remove_stale`]); TUN devices need no
//! such care: they vanish with the descriptor that made them.

use crate::config::{Mode, Topology};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_io::sys::tun::{open_tun, process_alive};
use weft_io::sys::Fd;

/// Where runs record their namespaces.
pub const RUN_DIR: &str = "/run/weft-wan";

/// Run `ip ARGS`; the error is one line with ip's own message.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

/// Run `prog ARGS`; the error is one line with the program's own message.
pub fn run(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `{prog}`: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    let first = msg.lines().next().unwrap_or("failed").trim().to_string();
    Err(format!("`{prog} {}`: {first}", args.join(" ")))
}

/// Is `pid` a running weft? (A recycled pid of another program is not.)
fn weft_alive(pid: u32) -> bool {
    if !process_alive(pid) {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim().starts_with("weft"))
}

/// The owner pid encoded in a namespace name `ww<pid>-...`.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ww")?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok()
}

/// Remove namespaces (and pid files) left by runs that are gone; returns one
/// line per namespace removed.
pub fn remove_stale() -> Vec<String> {
    let mut said = Vec::new();
    let names: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    for n in names {
        let Some(pid) = owner(&n) else { continue };
        if pid == std::process::id() || weft_alive(pid) {
            continue;
        }
        // Its processes (a command the killed run started) go with it.
        let pids = Command::new("ip")
            .args(["netns", "pids", &n])
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        for pid in String::from_utf8_lossy(&pids)
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            weft_io::sys::signal::terminate(pid);
        }
        match ip(&["netns", "del", &n]) {
            Ok(()) => said.push(format!("removed stale namespace {n} (weft pid {pid} is gone)")),
            // Another run starting at the same moment swept it first.
            Err(_) if !Path::new("/run/netns").join(&n).exists() => {}
            Err(e) => said.push(format!("could not remove stale namespace {n}: {e}")),
        }
    }
    if let Ok(d) = std::fs::read_dir(RUN_DIR) {
        for e in d.flatten() {
            let pid: Option<u32> = e.file_name().to_str().and_then(|s| s.parse().ok());
            if pid.is_some_and(|p| !weft_alive(p)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    said
}

/// The built network; dropping it removes everything.
pub struct Net {
    /// Namespace of each host (None: the caller's own).
    pub ns: Vec<Option<String>>,
    /// Address of each host.
    pub addrs: Vec<Ipv4Addr>,
    /// TUN device of each host (TUN mode), to hand to the router.
    pub tuns: Vec<Fd>,
    /// Notes for the user (e.g. offloads that stay on).
    pub notes: Vec<String>,
    /// GSO, GRO and TSO stayed on (veth mode without ethtool): segments
    /// larger than the MTU cross the links, so packet counts mean little.
    pub offloads_on: bool,
    pidfile: PathBuf,
}

impl Drop for Net {
    fn drop(&mut self) {
        self.tuns.clear();
        for ns in self.ns.iter().flatten() {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// The /24 a run numbers its hosts in: the config's, or one from the pid so
/// that concurrent runs with a host in the caller's namespace do not collide.
pub fn subnet(topo: &Topology) -> Ipv4Addr {
    topo.subnet.unwrap_or_else(|| {
        let pid = std::process::id();
        Ipv4Addr::new(10, 128 + ((pid >> 8) % 64) as u8, (pid & 0xff) as u8, 0)
    })
}

/// Create the namespaces, devices, addresses and sysctls of `topo`.
pub fn build(topo: &Topology) -> Result<Net, String> {
    let pid = std::process::id();
    let base = u32::from(subnet(topo));
    let pidfile = Path::new(RUN_DIR).join(pid.to_string());
    let mut net = Net {
        ns: Vec::new(),
        addrs: (0..topo.hosts.len())
            .map(|i| Ipv4Addr::from(base + i as u32 + 1))
            .collect(),
        tuns: Vec::new(),
        notes: Vec::new(),
        offloads_on: false,
        pidfile: pidfile.clone(),
    };
    std::fs::create_dir_all(RUN_DIR).map_err(|e| format!("cannot create {RUN_DIR}: {e}"))?;
    let list: String = topo
        .hosts
        .iter()
        .filter(|h| !h.root)
        .map(|h| format!("ww{pid}-{}\n", h.name))
        .collect();
    std::fs::write(&pidfile, list).map_err(|e| format!("cannot write {}: {e}", pidfile.display()))?;
    for h in &topo.hosts {
        if h.root {
            net.ns.push(None);
            continue;
        }
        let name = format!("ww{pid}-{}", h.name);
        ip(&["netns", "add", &name])?;
        net.ns.push(Some(name.clone()));
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        let mut sysctls = vec![("net.ipv6.conf.all.disable_ipv6".to_string(), "1".to_string())];
        sysctls.extend(h.sysctls.iter().cloned());
        for (k, v) in &sysctls {
            run(
                "ip",
                &["netns", "exec", &name, "sysctl", "-q", "-w", &format!("{k}={v}")],
            )
            .map_err(|e| format!("host {}: sysctl {k}: {e}", h.name))?;
        }
    }
    match topo.mode {
        Mode::Tun => {
            build_tun(topo, &mut net, pid, base)?;
            if topo.shaper == crate::config::Shaper::Kernel {
                crate::shaper::build(topo, &net, pid)?;
            }
        }
        Mode::Veth => crate::veth::build(topo, &mut net, pid)?,
    }
    Ok(net)
}

/// `ip` with `-n NS` when the host has a namespace.
pub fn ip_in(ns: &Option<String>, args: &[&str]) -> Result<(), String> {
    let mut v: Vec<&str> = Vec::new();
    if let Some(n) = ns {
        v.extend(["-n", n.as_str()]);
    }
    v.extend(args);
    ip(&v)
}

fn build_tun(topo: &Topology, net: &mut Net, pid: u32, base: u32) -> Result<(), String> {
    let prefix = format!("{}/24", Ipv4Addr::from(base));
    for i in 0..topo.hosts.len() {
        let dev = format!("ww{pid}t{i}");
        let fd = open_tun(&dev)
            .map_err(|e| format!("cannot create TUN device {dev}: {e} (is /dev/net/tun there, are we root?)"))?;
        net.tuns.push(fd);
        let ns = net.ns[i].clone();
        if let Some(n) = &ns {
            ip(&["link", "set", "dev", &dev, "netns", n])?;
        }
        ip_in(
            &ns,
            &["link", "set", "dev", &dev, "mtu", "1500", "txqueuelen", "10000", "up"],
        )?;
        let addr = format!("{}/32", net.addrs[i]);
        ip_in(&ns, &["addr", "add", &addr, "dev", &dev])?;
        ip_in(
            &ns,
            &["route", "add", &prefix, "dev", &dev, "src", &net.addrs[i].to_string()],
        )?;
    }
    Ok(())
}
