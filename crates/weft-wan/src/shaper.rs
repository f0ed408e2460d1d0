//! `shaper = "kernel"`: TUN mode's rate limits enforced by the kernel
//! instead of the router. Each direction A→B with a rate becomes an HTB
//! class on A's TUN device (where A's packets leave its stack, before the
//! router reads them), matched by B's address with a u32 filter, with a
//! byte-limited FIFO of `queue` bytes; other traffic is not classified and
//! leaves unshaped (HTB `default 0`). HTB counts IP bytes on a TUN device
//! (no link-layer header), as the router's limiter does. Per host only: a
//! class per flow would need a filter per connection (use the router).
//!
//! Each shaped device gets a `gso_max_segs` of about 2 ms at its lowest
//! rate ([`gso_segments`]). Linux's TCP always hands the qdisc GSO
//! super-packets (segmented only after it, whatever the device's offload
//! settings), sized to about a millisecond at its pacing rate; HTB charges
//! one whole: at 56 kbit/s a 10–20 KB super-packet is 1.5–3 s of debt, so
//! the segments left in bursts with gaps of seconds between them (the bulk
//! test stalled past its 5 s read timeout; BBR, the namespaces' inherited
//! default, overestimated the bandwidth from the bursts and made the
//! super-packets larger still). At 56 kbit/s one segment per packet: HTB
//! paces every 1500-byte packet (214 ms apart). At 1 Gbit/s one segment
//! per packet would cost the sender's stack a pass per 1500 bytes (bulk TCP
//! fell from 916 to 204 Mbit/s here), so fast links keep super-packets of
//! up to 2 ms.

use crate::config::Topology;
use crate::netns::{run, Net};

/// Segments per GSO packet that a qdisc limiting to `rate` bit/s may
/// charge at once: about 2 ms of the rate, at least one (pure).
pub fn gso_segments(rate: u64) -> u64 {
    (rate / 6_000_000).clamp(1, 64)
}

/// The slowest rate of the directions leaving host `src`.
fn slowest_from(topo: &Topology, src: usize) -> Option<u64> {
    topo.links
        .iter()
        .flat_map(|l| [(l.a, &l.up), (l.b, &l.down)])
        .filter(|(h, _)| *h == src)
        .filter_map(|(_, d)| d.rate)
        .min()
}

/// Cap `dev`'s GSO packets to about 2 ms at `rate` ([`gso_segments`]): a
/// qdisc's rate limit charges a GSO packet whole.
pub fn real_packets(ns: &Option<String>, dev: &str, rate: u64) -> Result<(), String> {
    let segs = gso_segments(rate).to_string();
    crate::netns::ip_in(ns, &["link", "set", "dev", dev, "gso_max_segs", &segs])
        .map_err(|e| format!("{e} (a rate limit in a qdisc needs GSO packets of a few ms at most)"))
}

/// Add the HTB classes of `topo`'s rates to the TUN devices of `net`.
pub fn build(topo: &Topology, net: &Net, pid: u32) -> Result<(), String> {
    let mut rooted = vec![false; topo.hosts.len()];
    let mut class = 0u32;
    for l in &topo.links {
        for (src, dst, spec) in [(l.a, l.b, &l.up), (l.b, l.a, &l.down)] {
            let Some(rate) = spec.rate else { continue };
            class += 1;
            let dev = format!("ww{pid}t{src}");
            let tc = |args: &[&str]| -> Result<(), String> {
                let mut v: Vec<&str> = match &net.ns[src] {
                    Some(ns) => vec!["ip", "netns", "exec", ns.as_str(), "tc"],
                    None => vec!["tc"],
                };
                v.extend(args);
                run(v[0], &v[1..]).map_err(|e| format!("shaper kernel: host {}: {e}", topo.hosts[src].name))
            };
            if !rooted[src] {
                let slowest = slowest_from(topo, src).unwrap_or(rate);
                real_packets(&net.ns[src], &dev, slowest)?;
                tc(&[
                    "qdisc", "add", "dev", &dev, "root", "handle", "1:", "htb", "default", "0",
                ])?;
                rooted[src] = true;
            }
            let id = format!("1:{class:x}");
            let r = format!("{rate}bit");
            // A burst of at least one full packet, and about 1 ms at the rate.
            let burst = (rate / 8 / 1000).max(1600).to_string();
            tc(&[
                "class", "add", "dev", &dev, "parent", "1:", "classid", &id, "htb", "rate", &r, "ceil", &r, "burst",
                &burst, "cburst", &burst,
            ])?;
            let lim = spec.queue_limit().to_string();
            tc(&["qdisc", "add", "dev", &dev, "parent", &id, "bfifo", "limit", &lim])?;
            let to = format!("{}/32", net.addrs[dst]);
            tc(&[
                "filter", "add", "dev", &dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
                "dst", &to, "flowid", &id,
            ])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::gso_segments;

    #[test]
    fn gso_packets_stay_near_two_milliseconds() {
        assert_eq!(gso_segments(56_000), 1);
        assert_eq!(gso_segments(10_000_000), 1);
        assert_eq!(gso_segments(100_000_000), 16); // 24 KB: 1.9 ms
        assert_eq!(gso_segments(1_000_000_000), 64); // the kernel's 64 KiB at most
    }
}
