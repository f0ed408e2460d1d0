//! PolyMix-4-like proxy workload (Web Polygraph; workloads.md §3), the steady
//! "top" phase.
//!
//! Robots (`rate / 0.4` of them) each issue requests as a Poisson process at
//! 0.4/s (together: Poisson at `--rate`), keep at most 4 connections open and
//! close a connection after zipf(64) requests. A request re-references an
//! already seen URL with probability 55 % / 80 % = 68.75 % (1 % of the working
//! set, the hot set, draws 10 % of those), else it names a new object on a
//! random origin: HTML 15 %, download 0.5 %, other 19.5 % (images are fetched
//! only as the zipf(13) embedded objects of HTML pages). Sizes: image
//! exp(4.5KB), HTML exp(8.5KB), download logn(300KB,300KB), other
//! logn(25KB,10KB); cacheable 80/90/95/72 %. Request types: basic 80 %,
//! IMS→200 5 %, IMS→304 10 %, reload 5 %; methods: POST 1.5 % (body
//! unif(0,8KB)), HEAD 0.1 %, GET the rest.
//!
//! Objects are `weft origin` URLs (`/size/N/c|nc/pm/ID.EXT`), so the origin
//! answers with the right size and cacheability; IMS dates are derived from
//! the same hash the origin uses for Last-Modified, so IMS→304 requests really
//! get 304 from an origin (or a cache that kept the object).
//!
//! `--param phases=polymix4` runs PolyMix-4's phase schedule instead of the
//! top phase alone ([`Schedule`]): framp, fill, fexit, inc1, top1, dec1, idle,
//! inc2, top2, dec2, with `plat` (4 h) for the tops and `plat/12` for ramps;
//! the request rate is `--rate` (the peak) times the phase's populus factor
//! and the recurrence is scaled by 5/55 during framp and fill. Not modelled:
//! WAN delay and loss (`weft wan`), DNS names.
//!
//! Robots abort 0.1 % of transactions (`abort=`): once the reply head is in,
//! the robot resets the connection (a browser's stop button; the proxy sees
//! ECONNRESET mid-reply). Aborts are counted apart from errors.

use super::{Arrival, Out, Params, ReqMeta};
use crate::content;
use crate::dist::{Dist, Table};
use crate::urls::{self, CacheFlag};
use rand::rngs::SmallRng;
use rand::Rng;
use std::time::Duration;
use weft_http::Method;

/// Kinds of content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Embedded images.
    Image = 0,
    /// HTML pages (with embedded images).
    Html = 1,
    /// Downloads.
    Download = 2,
    /// Everything else.
    Other = 3,
}

/// Parameters (defaults from the PGL files).
#[derive(Clone, Debug)]
pub struct PolymixConfig {
    /// Requests per second of one robot.
    pub robot_rate: f64,
    /// Connections a robot keeps open at most.
    pub conns_per_robot: usize,
    /// Requests per client-side persistent connection.
    pub pconn: Dist,
    /// Share of requests that re-reference a seen URL.
    pub recurrence: f64,
    /// Share of the working set that is hot.
    pub hot_frac: f64,
    /// Share of re-references that go to the hot set.
    pub hot_prob: f64,
    /// Origin authorities to spread objects over.
    pub servers: usize,
    /// The phase schedule, or None for the steady top phase only.
    pub phases: Option<PhaseParams>,
    /// Share of transactions a robot aborts once the reply head is in.
    pub abort: f64,
}

/// Settings of PolyMix-4's phase schedule (`--param phases=polymix4`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhaseParams {
    /// Length of each top phase (`plat`, 4 h); ramps last plat/12.
    pub plat: f64,
    /// Request rate of the fill phase as a share of the peak (`fill_rate`, 0.1..1).
    pub fill_rate: f64,
    /// The fill phase ends once this many bytes of new objects were
    /// requested (`cache`: 2 × the proxy's cache size); 0 skips it.
    pub fill_bytes: f64,
}

impl PolymixConfig {
    /// From `--param robot_rate=, conns=, pconn=, recurrence=, hot_frac=, hot_prob=`.
    pub fn from_params(p: &mut Params, servers: usize) -> Result<PolymixConfig, String> {
        let c = PolymixConfig {
            robot_rate: p.f64("robot_rate", 0.4)?,
            conns_per_robot: p.u64("conns", 4, 1..=64)? as usize,
            pconn: p.dist("pconn", Dist::Zipf(64.0), crate::dist::Unit::Count)?,
            recurrence: p.f64("recurrence", 0.55 / 0.80)?,
            hot_frac: p.f64("hot_frac", 0.01)?,
            hot_prob: p.f64("hot_prob", 0.10)?,
            abort: p.f64("abort", 0.001)?,
            servers: servers.max(1),
            phases: match p.take("phases").as_deref() {
                None | Some("top") => None,
                Some("polymix4") => Some(PhaseParams {
                    plat: match p.take("plat") {
                        Some(v) => weft_core::units::parse_duration(&v)
                            .map_err(|e| format!("--param plat: {e}"))?
                            .as_secs_f64(),
                        None => 4.0 * 3600.0,
                    },
                    fill_rate: p.f64("fill_rate", 0.5)?,
                    fill_bytes: match p.take("cache") {
                        Some(v) => {
                            2.0 * weft_core::units::parse_size(&v).map_err(|e| format!("--param cache: {e}"))? as f64
                        }
                        None => 0.0,
                    },
                }),
                Some(other) => return Err(format!("invalid --param phases={other} (expected top or polymix4)")),
            },
        };
        if let Some(ph) = &c.phases {
            if !(0.1..=1.0).contains(&ph.fill_rate) {
                return Err(format!("invalid --param fill_rate={} (expected 0.1..1)", ph.fill_rate));
            }
            if ph.plat <= 0.0 {
                return Err("--param plat must be positive".into());
            }
        }
        if c.robot_rate <= 0.0 {
            return Err("--param robot_rate must be positive".into());
        }
        for (k, v) in [
            ("recurrence", c.recurrence),
            ("hot_frac", c.hot_frac),
            ("hot_prob", c.hot_prob),
            ("abort", c.abort),
        ] {
            if v > 1.0 {
                return Err(format!("invalid --param {k}={v} (expected 0..1)"));
            }
        }
        p.finish(
            "polymix",
            &[
                "robot_rate",
                "conns",
                "pconn",
                "recurrence",
                "hot_frac",
                "hot_prob",
                "servers",
                "phases",
                "plat",
                "fill_rate",
                "cache",
                "abort",
            ],
        )?;
        Ok(c)
    }
}

#[derive(Clone, Copy, Debug)]
struct Obj {
    size: u32,
    kind: Kind,
    cacheable: bool,
    server: u16,
    /// First embedded image (index into objects) and count, for HTML.
    emb_start: u32,
    emb_count: u16,
}

/// Populus at the start of framp (Polygraph's minimum, 0.04 %).
const MIN_POPULUS: f64 = 0.0004;
/// Recurrence factor of framp and fill (5 % / 55 %).
const FILL_RECURRENCE: f64 = 5.0 / 55.0;

/// One phase: length in seconds (None: until the fill target is met), and
/// populus (share of the peak rate) and recurrence factor, each going
/// linearly from the first value to the second.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    /// Polygraph's name of the phase.
    pub name: &'static str,
    len: Option<f64>,
    populus: (f64, f64),
    recurrence: (f64, f64),
}

/// PolyMix-4's phase schedule as a non-homogeneous Poisson arrival process
/// (candidates at the peak rate, each kept with probability populus(t)).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The phases in order.
    pub phases: Vec<Phase>,
    idx: usize,
    start: f64,
    t: f64,
    peak: f64,
    fill_bytes: f64,
    filled: f64,
    /// Arrivals per phase.
    pub arrivals: Vec<u64>,
}

impl Schedule {
    /// The schedule at `peak` requests/s (this thread's share).
    pub fn new(p: &PhaseParams, peak: f64) -> Schedule {
        let ramp = p.plat / 12.0;
        let f = p.fill_rate;
        let r = FILL_RECURRENCE;
        let ph = |name, len, populus, recurrence| Phase {
            name,
            len,
            populus,
            recurrence,
        };
        let mut phases = vec![ph("framp", Some(ramp), (MIN_POPULUS, f), (r, r))];
        if p.fill_bytes > 0.0 {
            phases.push(ph("fill", None, (f, f), (r, r)));
        }
        phases.extend([
            ph("fexit", Some(ramp), (f, f), (r, 1.0)),
            ph("inc1", Some(ramp), (f, 1.0), (1.0, 1.0)),
            ph("top1", Some(p.plat), (1.0, 1.0), (1.0, 1.0)),
            ph("dec1", Some(ramp), (1.0, 0.1), (1.0, 1.0)),
            ph("idle", Some(ramp), (0.1, 0.1), (1.0, 1.0)),
            ph("inc2", Some(ramp), (0.1, 1.0), (1.0, 1.0)),
            ph("top2", Some(p.plat), (1.0, 1.0), (1.0, 1.0)),
            ph("dec2", Some(ramp), (1.0, 0.0), (1.0, 1.0)),
        ]);
        let n = phases.len();
        Schedule {
            phases,
            idx: 0,
            start: 0.0,
            t: 0.0,
            peak: peak.max(1e-9),
            fill_bytes: p.fill_bytes,
            filled: 0.0,
            arrivals: vec![0; n],
        }
    }

    /// Bytes of new objects requested (the fill phase ends at its target).
    pub fn fetched(&mut self, bytes: u64) {
        self.filled += bytes as f64;
    }

    /// The phase running now, if any.
    pub fn phase(&self) -> Option<&Phase> {
        self.phases.get(self.idx)
    }

    /// The next arrival: its offset from the start, seconds, and the
    /// recurrence factor then; None once the schedule is over.
    pub fn next(&mut self, rng: &mut SmallRng) -> Option<(f64, f64)> {
        loop {
            self.t += Dist::Exp(1.0 / self.peak).sample(rng);
            while let Some(p) = self.phases.get(self.idx) {
                let over = match p.len {
                    Some(len) if self.t >= self.start + len => {
                        self.start += len;
                        true
                    }
                    Some(_) => false,
                    None if self.filled >= self.fill_bytes => {
                        self.start = self.t;
                        true
                    }
                    None => false,
                };
                if !over {
                    break;
                }
                self.idx += 1;
            }
            let p = self.phases.get(self.idx)?;
            let x = p.len.map_or(0.0, |len| ((self.t - self.start) / len).clamp(0.0, 1.0));
            let lerp = |(a, b): (f64, f64)| a + (b - a) * x;
            if rng.gen::<f64>() < lerp(p.populus) {
                self.arrivals[self.idx] += 1;
                return Some((self.t, lerp(p.recurrence)));
            }
        }
    }
}

/// Request types.
const TYPES: [f64; 4] = [0.80, 0.05, 0.10, 0.05];
/// Directly requested kinds: HTML, download, other (15 / 0.5 / 19.5).
const DIRECT: [f64; 3] = [0.15, 0.005, 0.195];

/// One thread's robots and working set.
pub struct Polymix {
    cfg: PolymixConfig,
    robots: usize,
    thread: u64,
    threads: u64,
    objects: Vec<Obj>,
    /// Directly requestable objects seen so far (the working set).
    ws: Vec<u32>,
    types: Table,
    direct: Table,
    sizes: [Dist; 4],
    cacheable: [f64; 4],
    embedded: Dist,
    post_body: Dist,
    path: Vec<u8>,
    extra: Vec<u8>,
    /// Requests by type (basic, ims200, ims304, reload) and method (post, head).
    pub counts: [u64; 6],
    /// The phase schedule (`phases=polymix4`).
    pub schedule: Option<Schedule>,
}

impl Polymix {
    /// Robots for this thread's share of the rate.
    pub fn new(cfg: PolymixConfig, thread: usize, threads: usize, rate: f64) -> Polymix {
        let robots = ((rate / cfg.robot_rate).round() as usize).max(1);
        Polymix {
            robots,
            thread: thread as u64,
            threads: threads.max(1) as u64,
            objects: Vec::new(),
            ws: Vec::new(),
            types: Table::new(&TYPES),
            direct: Table::new(&DIRECT),
            sizes: [
                Dist::Exp(4.5 * 1024.0),
                Dist::Exp(8.5 * 1024.0),
                Dist::LognMean(300.0 * 1024.0, 300.0 * 1024.0),
                Dist::LognMean(25.0 * 1024.0, 10.0 * 1024.0),
            ],
            cacheable: [0.80, 0.90, 0.95, 0.72],
            embedded: Dist::Zipf(13.0),
            post_body: Dist::Unif(0.0, 8192.0),
            path: Vec::with_capacity(96),
            extra: Vec::with_capacity(128),
            counts: [0; 6],
            schedule: cfg.phases.map(|p| Schedule::new(&p, rate)),
            cfg,
        }
    }

    /// Robots on this thread.
    pub fn robots(&self) -> usize {
        self.robots
    }

    /// Connections per robot.
    pub fn conns_per_robot(&self) -> usize {
        self.cfg.conns_per_robot
    }

    /// Requests a new robot connection carries before the robot closes it.
    pub fn conn_use_limit(&mut self, rng: &mut SmallRng) -> u32 {
        (self.cfg.pconn.sample(rng) as u32).max(1)
    }

    fn mint(&mut self, kind: Kind, rng: &mut SmallRng) -> u32 {
        let k = kind as usize;
        let size = (self.sizes[k].sample(rng) as u64).clamp(0, u32::MAX as u64) as u32;
        let cacheable = rng.gen::<f64>() < self.cacheable[k];
        let server = rng.gen_range(0..self.cfg.servers) as u16;
        let idx = self.objects.len() as u32;
        self.objects.push(Obj {
            size,
            kind,
            cacheable,
            server,
            emb_start: 0,
            emb_count: 0,
        });
        if kind == Kind::Html {
            let n = self.embedded.sample(rng) as u16;
            let start = self.objects.len() as u32;
            for _ in 0..n {
                self.mint(Kind::Image, rng);
            }
            self.objects[idx as usize].emb_start = start;
            self.objects[idx as usize].emb_count = n;
        }
        idx
    }

    /// A request arrives at a random robot: a re-reference or a new object.
    /// With a phase schedule the arrival carries its time, and None ends the run.
    pub fn next_arrival(&mut self, rng: &mut SmallRng) -> Option<Arrival> {
        let (at, recurrence) = match &mut self.schedule {
            Some(s) => {
                let (t, f) = s.next(rng)?;
                (Some(t), self.cfg.recurrence * f)
            }
            None => (None, self.cfg.recurrence),
        };
        let agent = rng.gen_range(0..self.robots) as u32;
        let obj = if !self.ws.is_empty() && rng.gen::<f64>() < recurrence {
            let hot = ((self.ws.len() as f64 * self.cfg.hot_frac).ceil() as usize).max(1);
            let i = if rng.gen::<f64>() < self.cfg.hot_prob {
                rng.gen_range(0..hot)
            } else {
                rng.gen_range(0..self.ws.len())
            };
            self.ws[i]
        } else {
            let kind = match self.direct.sample(rng) {
                0 => Kind::Html,
                1 => Kind::Download,
                _ => Kind::Other,
            };
            let o = self.mint(kind, rng);
            self.ws.push(o);
            if let Some(s) = &mut self.schedule {
                let ob = self.objects[o as usize];
                let embedded = (ob.emb_start..ob.emb_start + ob.emb_count as u32)
                    .map(|i| self.objects[i as usize].size as u64)
                    .sum::<u64>();
                s.fetched(ob.size as u64 + embedded);
            }
            o
        };
        Some(Arrival {
            at,
            agent,
            item: obj as u64,
        })
    }

    /// `/size/N/c|nc/pm/ID.EXT`; IDs are unique across threads.
    fn write_path(&mut self, obj: u32) {
        let o = self.objects[obj as usize];
        self.path.clear();
        urls::push_size_path(
            &mut self.path,
            o.size as u64,
            if o.cacheable {
                CacheFlag::Cacheable
            } else {
                CacheFlag::NoStore
            },
        );
        self.path.extend_from_slice(b"/pm/");
        let id = obj as u64 * self.threads + self.thread;
        weft_http::push_decimal(&mut self.path, id);
        let ext: &[u8] = match o.kind {
            Kind::Image => [&b".gif"[..], b".jpeg", b".png"][(id % 3) as usize],
            Kind::Html => {
                if id % 10 < 6 {
                    b".html"
                } else {
                    b".htm"
                }
            }
            Kind::Download => [&b".exe"[..], b".exe", b".zip", b".zip", b".gz"][(id % 5) as usize],
            Kind::Other => b"",
        };
        self.path.extend_from_slice(ext);
    }

    /// Write the request for object `item`.
    pub fn render(&mut self, item: u64, rng: &mut SmallRng, out: &mut Out<'_>) -> ReqMeta {
        let obj = item as u32;
        self.write_path(obj);
        let server = self.objects[obj as usize].server as usize;
        self.extra.clear();
        let ty = self.types.sample(rng);
        self.counts[ty] += 1;
        match ty {
            1 | 2 => {
                // IMS→200 asks with a date a day before Last-Modified; IMS→304
                // with Last-Modified itself.
                let lm = content::last_modified(content::path_hash(&self.path));
                let when = if ty == 1 { lm - Duration::from_secs(86_400) } else { lm };
                self.extra.extend_from_slice(b"If-Modified-Since: ");
                self.extra.extend_from_slice(&weft_http::fmt_http_date(when));
                self.extra.extend_from_slice(b"\r\n");
            }
            3 => self
                .extra
                .extend_from_slice(b"Cache-Control: no-cache\r\nPragma: no-cache\r\n"),
            _ => {}
        }
        let u: f64 = rng.gen();
        let (method, body): (Method, &[u8]) = if u < 0.015 {
            self.counts[4] += 1;
            let n = self.post_body.sample(rng) as usize;
            (Method::Post, content::slice(item as usize % content::PERIOD, 0, n))
        } else if u < 0.016 {
            self.counts[5] += 1;
            (Method::Head, b"")
        } else {
            (Method::Get, b"")
        };
        out.request(method, server, &self.path, &self.extra, body, item)
    }

    /// An HTML page arrived: its embedded images follow on the robot's connections.
    pub fn on_reply(&mut self, meta: &ReqMeta, status: u16, queue: &mut Vec<u64>) {
        let Some(o) = self.objects.get(meta.tag as usize) else {
            return;
        };
        if o.kind == Kind::Html && status == 200 && meta.method != Method::Head {
            for i in 0..o.emb_count as u32 {
                queue.push((o.emb_start + i) as u64);
            }
        }
    }

    /// Share of transactions aborted by the robot.
    pub fn abort_prob(&self) -> f64 {
        self.cfg.abort
    }

    /// Objects minted so far.
    pub fn objects(&self) -> usize {
        self.objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Writer;
    use rand::SeedableRng;

    fn cfg() -> PolymixConfig {
        PolymixConfig::from_params(&mut Params::default(), 2).unwrap()
    }

    #[test]
    fn recurrence_mix_and_embedded_objects() {
        let mut p = Polymix::new(cfg(), 0, 1, 40.0);
        assert_eq!(p.robots(), 100);
        let mut rng = SmallRng::seed_from_u64(11);
        let w = Writer::new(
            &["a:1".into(), "b:2".into()],
            None,
            weft_http::Version::Http10,
            &[],
            false,
            true,
        );
        let n = 50_000;
        let mut seen = std::collections::HashSet::new();
        let mut repeats = 0;
        let mut buf = Vec::new();
        let mut follow = Vec::new();
        let mut cacheable_replies = 0;
        let mut total = 0;
        for _ in 0..n {
            let a = p.next_arrival(&mut rng).unwrap();
            assert!((a.agent as usize) < 100);
            if !seen.insert(a.item) {
                repeats += 1;
            }
            buf.clear();
            let mut out = Out::for_test(&mut buf, &w);
            let meta = p.render(a.item, &mut rng, &mut out);
            assert!(buf.starts_with(b"GET http://") || buf.starts_with(b"POST ") || buf.starts_with(b"HEAD "));
            follow.clear();
            p.on_reply(&meta, 200, &mut follow);
            for &img in &follow {
                let o = p.objects[img as usize];
                assert_eq!(o.kind, Kind::Image);
                total += 1;
                cacheable_replies += o.cacheable as usize;
            }
            let o = p.objects[a.item as usize];
            assert_ne!(o.kind, Kind::Image, "images are only embedded");
            total += 1;
            cacheable_replies += o.cacheable as usize;
        }
        let r = repeats as f64 / n as f64;
        assert!((r - 0.6875).abs() < 0.01, "recurrence {r}");
        // About 80 % of replies are cacheable (images dominate via embedding).
        let c = cacheable_replies as f64 / total as f64;
        assert!((c - 0.80).abs() < 0.03, "cacheable share {c}");
        let ims304 = p.counts[2] as f64 / n as f64;
        assert!((ims304 - 0.10).abs() < 0.01, "IMS304 share {ims304}");
        let post = p.counts[4] as f64 / n as f64;
        assert!((post - 0.015).abs() < 0.003, "POST share {post}");
    }

    #[test]
    fn phase_schedule_follows_polymix4() {
        // plat 120 s (ramps of 10 s) at a peak of 1000/s, no fill phase.
        let ph = PhaseParams {
            plat: 120.0,
            fill_rate: 0.5,
            fill_bytes: 0.0,
        };
        let mut s = Schedule::new(&ph, 1000.0);
        let names: Vec<&str> = s.phases.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["framp", "fexit", "inc1", "top1", "dec1", "idle", "inc2", "top2", "dec2"]
        );
        let mut rng = SmallRng::seed_from_u64(4);
        let mut last = 0.0;
        let mut framp_rec = Vec::new();
        while let Some((t, rec)) = s.next(&mut rng) {
            assert!(t >= last, "arrivals in order");
            last = t;
            if t < 10.0 {
                framp_rec.push(rec);
            }
        }
        // 7 ramps of 10 s and two tops of 120 s: the schedule ends by 310 s.
        assert!((305.0..=310.0).contains(&last), "last arrival at {last}");
        // Expected arrivals per phase: peak × length × mean populus.
        for (i, want) in [
            (0, 2502.0),
            (1, 5000.0),
            (2, 7500.0),
            (3, 120_000.0),
            (4, 5500.0),
            (5, 1000.0),
            (6, 5500.0),
            (7, 120_000.0),
            (8, 5000.0),
        ] {
            let got = s.arrivals[i] as f64;
            assert!(
                (got - want).abs() < 4.0 * want.sqrt() + 2.0,
                "{}: {got} arrivals, want {want}",
                s.phases[i].name
            );
        }
        // framp re-references at 5/55 of the base recurrence.
        assert!(framp_rec.iter().all(|&r| (r - 5.0 / 55.0).abs() < 1e-12));
    }

    #[test]
    fn fill_phase_lasts_until_its_bytes_are_requested() {
        let mut c = cfg();
        c.phases = Some(PhaseParams {
            plat: 12.0,
            fill_rate: 0.5,
            fill_bytes: 2.0 * 4.0 * 1024.0 * 1024.0,
        });
        let mut p = Polymix::new(c, 0, 1, 100.0);
        let mut rng = SmallRng::seed_from_u64(5);
        let mut seen = std::collections::HashSet::new();
        let (mut in_fill, mut repeats) = (0, 0);
        while let Some(a) = p.next_arrival(&mut rng) {
            let fill = p.schedule.as_ref().unwrap().phase().is_some_and(|ph| ph.name == "fill");
            let new = seen.insert(a.item);
            if fill {
                in_fill += 1;
                repeats += !new as usize;
            }
        }
        let s = p.schedule.as_ref().unwrap();
        assert_eq!(s.phases[1].name, "fill");
        assert!(s.filled >= s.fill_bytes);
        assert_eq!(s.arrivals[1], in_fill as u64);
        // 8 MiB of new objects at ~20 KB each and recurrence 68.75 % × 5/55.
        assert!(in_fill > 200, "fill arrivals {in_fill}");
        let r = repeats as f64 / in_fill as f64;
        assert!(r < 0.15, "recurrence during fill {r}");
    }

    #[test]
    fn ims_dates_match_the_origin() {
        let mut p = Polymix::new(cfg(), 0, 1, 4.0);
        let mut rng = SmallRng::seed_from_u64(2);
        let a = p.next_arrival(&mut rng).unwrap();
        p.write_path(a.item as u32);
        let lm = content::last_modified(content::path_hash(&p.path));
        assert!(urls::parse(&p.path).is_some());
        let text = weft_http::fmt_http_date(lm);
        assert_eq!(weft_http::parse_http_date(&text), Some(lm));
    }
}
