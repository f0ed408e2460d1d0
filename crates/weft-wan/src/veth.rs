//! `mode = "veth"`: a veth pair per link, MTU 1500, with GSO, GRO and TSO
//! off so that every packet on the wire is a real 1500-byte (or smaller)
//! packet, and a TBF qdisc on each end that has a rate. No delay or loss:
//! this kernel has no netem (use the TUN router for those).

use crate::config::Topology;
use crate::netns::{ip_in, run, Net};
use std::process::Command;

/// Is ethtool installed?
pub fn have_ethtool() -> bool {
    Command::new("ethtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Build one veth pair per link of `topo` into `net`'s namespaces.
pub fn build(topo: &Topology, net: &mut Net, pid: u32) -> Result<(), String> {
    let ethtool = have_ethtool();
    if !ethtool {
        net.offloads_on = true;
        net.notes.push(
            "ethtool is not installed (apt-get install -y ethtool): GSO, GRO and TSO stay ON on the veth pairs, so segments larger than the MTU cross them"
                .into(),
        );
    }
    for (li, l) in topo.links.iter().enumerate() {
        let (na, nb) = (net.ns[l.a].clone(), net.ns[l.b].clone());
        let (Some(nsa), Some(nsb)) = (na.clone(), nb.clone()) else {
            return Err("veth mode joins namespaces only".into());
        };
        let (va, vb) = (format!("ww{pid}v{li}a"), format!("ww{pid}v{li}b"));
        crate::netns::ip(&[
            "link", "add", &va, "netns", &nsa, "type", "veth", "peer", "name", &vb, "netns", &nsb,
        ])?;
        for (ns, dev, me, peer, spec) in [(&na, &va, l.a, l.b, &l.up), (&nb, &vb, l.b, l.a, &l.down)] {
            ip_in(ns, &["link", "set", "dev", dev, "mtu", "1500", "up"])?;
            let addr = format!("{}/32", net.addrs[me]);
            // The same /32 may sit on several of a host's veths: one per link.
            let _ = ip_in(ns, &["addr", "add", &addr, "dev", dev]);
            let to = format!("{}/32", net.addrs[peer]);
            ip_in(
                ns,
                &["route", "add", &to, "dev", dev, "src", &net.addrs[me].to_string()],
            )?;
            let n = ns.as_deref().unwrap_or_default();
            if ethtool {
                let off = ["gso", "off", "gro", "off", "tso", "off"];
                let mut args = vec!["netns", "exec", n, "ethtool", "-K", dev.as_str()];
                args.extend(off);
                run("ip", &args)?;
            }
            if let Some(rate) = spec.rate {
                // TBF, like HTB, would charge whole GSO super-packets (shaper.rs).
                crate::shaper::real_packets(ns, dev, rate)?;
                let r = format!("{rate}bit");
                let burst = (rate / 8 / 100).max(3000).to_string();
                let lim = spec.queue_limit().to_string();
                let mut args = vec!["netns", "exec", n, "tc", "qdisc", "add", "dev", dev.as_str()];
                args.extend(["root", "tbf", "rate", &r, "burst", &burst, "limit", &lim]);
                run("ip", &args)?;
            }
        }
    }
    Ok(())
}
