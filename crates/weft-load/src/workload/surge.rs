//! SURGE-like user equivalents (Barford & Crovella; parameters in
//! workloads.md §2).
//!
//! Offline, from `--seed`: `files` file sizes (lognormal(9.357, 1.318) body
//! below 133 KB, Pareto(133000, 1.1) tail with probability `tail`), Zipf(1)
//! popularity giving each rank an exact reference count, sizes matched to
//! ranks so that request sizes follow Pareto(1000, 1.0), a reference sequence
//! drawn with a lognormal(1.5, 0.80) LRU stack distance (temporal locality),
//! and pages of Pareto(1, 2.43) objects (a base file and its embedded files).
//!
//! Online, each user equivalent (a closed-loop client, `--clients`) takes the
//! next page, fetches its base file, then each embedded file after a
//! Weibull(1.46, 0.382) active OFF time, and waits a Pareto(1, 1.5) inactive
//! OFF time before the next page. `think_scale` multiplies both OFF times (to
//! compress a test). Sizes are matched to popularity ranks so that request
//! sizes follow Pareto(1000, 1.0) ([`match_sizes_to_popularity`]), as SURGE's
//! matching step does.

use super::{Cursor, Next, Out, Params, Prepared};
use crate::dist::Dist;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use weft_http::Method;

/// Body of the size distribution.
pub const BODY: Dist = Dist::Lognormal(9.357, 1.318);
/// Cut between body and tail, bytes.
pub const CUT: f64 = 133_000.0;
/// Tail of the size distribution.
pub const TAIL: Dist = Dist::Pareto(133_000.0, 1.1);
/// Objects per page (base + embedded).
pub const PAGE_OBJECTS: Dist = Dist::Pareto(1.0, 2.43);
/// Active OFF: between the objects of one page, seconds.
pub const ACTIVE_OFF: Dist = Dist::Weibull(1.46, 0.382);
/// Inactive OFF: between pages, seconds.
pub const INACTIVE_OFF: Dist = Dist::Pareto(1.0, 1.5);
/// LRU stack distance of re-references.
pub const STACK_DISTANCE: Dist = Dist::Lognormal(1.5, 0.80);
/// Sizes of requests (bytes transferred per request): Pareto(1000, 1.0).
pub const REQUEST_SIZE: Dist = Dist::Pareto(REQUEST_SIZE_K, REQUEST_SIZE_ALPHA);
const REQUEST_SIZE_K: f64 = 1000.0;
const REQUEST_SIZE_ALPHA: f64 = 1.0;

/// The file set, reference sequence and pages.
#[derive(Debug)]
pub struct SurgeSet {
    /// Size of each file.
    pub sizes: Vec<u64>,
    /// File ids in reference order.
    pub sequence: Vec<u32>,
    /// Start of each page in `sequence`.
    pub pages: Vec<u32>,
    /// Multiplier of OFF times.
    pub think_scale: f64,
    /// Longest OFF time after scaling (bounds a user's silence), seconds.
    pub max_off: f64,
}

impl SurgeSet {
    /// From `--param files=, requests=, tail=, max_size=, think_scale=, max_off=`.
    pub fn from_params(p: &mut Params, seed: u64) -> Result<SurgeSet, String> {
        let files = p.u64("files", 2000, 1..=1_000_000)? as usize;
        let requests = p.u64("requests", 50_000, 1..=50_000_000)? as usize;
        let tail = p.f64("tail", 0.07)?;
        if tail > 1.0 {
            return Err(format!("invalid --param tail={tail} (expected 0..1)"));
        }
        let max_size = match p.take("max_size") {
            Some(v) => weft_core::units::parse_size(&v).map_err(|e| format!("--param max_size: {e}"))?,
            None => 64 << 20,
        };
        let think_scale = p.f64("think_scale", 1.0)?;
        let max_off = p.f64("max_off", 3600.0)?;
        p.finish(
            "surge",
            &["files", "requests", "tail", "max_size", "think_scale", "max_off"],
        )?;
        Ok(SurgeSet::generate(
            files,
            requests,
            tail,
            max_size,
            think_scale,
            max_off,
            seed,
        ))
    }

    /// Build the set deterministically from `seed`.
    pub fn generate(
        files: usize,
        requests: usize,
        tail: f64,
        max_size: u64,
        think_scale: f64,
        max_off: f64,
        seed: u64,
    ) -> SurgeSet {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x0053_7572_6765);
        let sizes: Vec<u64> = (0..files)
            .map(|_| {
                let s = if rng.gen::<f64>() < tail {
                    TAIL.sample(&mut rng)
                } else {
                    loop {
                        let s = BODY.sample(&mut rng);
                        if s < CUT {
                            break s;
                        }
                    }
                };
                (s as u64).clamp(1, max_size.max(1))
            })
            .collect();
        // Zipf(1) reference counts over popularity ranks, at least one each.
        let h: f64 = (1..=files).map(|r| 1.0 / r as f64).sum();
        let counts: Vec<u32> = (0..files)
            .map(|r| (requests as f64 / ((r + 1) as f64 * h)).round().max(1.0) as u32)
            .collect();
        let by_rank = match_sizes_to_popularity(&sizes, &counts, &mut rng);
        let mut remaining = vec![0u32; files];
        for (r, &f) in by_rank.iter().enumerate() {
            remaining[f as usize] = counts[r];
        }
        // The LRU stack starts in a popularity-weighted random order (popular
        // files near the top: Efraimidis–Spirakis keys u^(1/w)).
        let mut keyed: Vec<(f64, u32)> = (0..files as u32)
            .map(|f| {
                let w = remaining[f as usize] as f64;
                (rng.gen::<f64>().powf(1.0 / w), f)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
        // Top of the stack = end of the vector.
        let mut stack: Vec<u32> = keyed.into_iter().map(|(_, f)| f).collect();
        let total: usize = remaining.iter().map(|&c| c as usize).sum();
        let mut sequence = Vec::with_capacity(total);
        while !stack.is_empty() {
            let d = (STACK_DISTANCE.sample(&mut rng).floor() as usize).min(stack.len() - 1);
            let i = stack.len() - 1 - d;
            let f = stack.remove(i);
            sequence.push(f);
            remaining[f as usize] -= 1;
            if remaining[f as usize] > 0 {
                stack.push(f);
            }
        }
        let mut pages = Vec::new();
        let mut i = 0usize;
        while i < sequence.len() {
            pages.push(i as u32);
            let k = (PAGE_OBJECTS.sample(&mut rng).floor() as usize).max(1);
            i += k;
        }
        SurgeSet {
            sizes,
            sequence,
            pages,
            think_scale,
            max_off,
        }
    }

    /// Range of `sequence` for page `p`.
    pub fn page(&self, p: usize) -> (usize, usize) {
        let start = self.pages[p] as usize;
        let end = self
            .pages
            .get(p + 1)
            .map(|&e| e as usize)
            .unwrap_or(self.sequence.len());
        (start, end)
    }

    /// The path of file `f`: `/size/N/surge/fID`.
    pub fn path(&self, f: u32, buf: &mut Vec<u8>) {
        buf.clear();
        crate::urls::push_size_path(buf, self.sizes[f as usize], crate::urls::CacheFlag::Default);
        buf.extend_from_slice(b"/surge/f");
        weft_http::push_decimal(buf, f as u64);
    }
}

/// SURGE's matching step: give each popularity rank a file so that the sizes
/// of *requests* (file sizes weighted by reference counts) follow
/// [`REQUEST_SIZE`] while the file sizes themselves stay as drawn. Returns the
/// file of each rank (`counts` is by rank, most popular first).
///
/// Sizes are grouped in bins (eight per decade); the model gives each bin its
/// share of requests. Going down the ranks from the most popular, each rank
/// takes a random unassigned file from the bin whose share is the most short
/// of requests so far (among bins with files left), so the popular files fill
/// the request-size distribution and the one-reference files get what is left
/// — mostly large files, as in the traces SURGE models. The request-size
/// distribution is met as closely as the drawn file sizes allow.
pub fn match_sizes_to_popularity(sizes: &[u64], counts: &[u32], rng: &mut SmallRng) -> Vec<u32> {
    const PER_DECADE: f64 = 8.0;
    let (k, a) = (REQUEST_SIZE_K, REQUEST_SIZE_ALPHA);
    let cdf = |x: f64| if x <= k { 0.0 } else { 1.0 - (k / x).powf(a) };
    let bin_of = |s: u64| ((s.max(1) as f64).log10() * PER_DECADE).floor() as usize;
    let bins = sizes.iter().map(|&s| bin_of(s)).max().unwrap_or(0) + 1;
    let total: f64 = counts.iter().map(|&c| c as f64).sum();
    // Requests each bin is still owed; the last bin takes the model's whole tail.
    let mut owed: Vec<f64> = (0..bins)
        .map(|b| {
            let lo = 10f64.powf(b as f64 / PER_DECADE);
            let hi = if b + 1 == bins {
                f64::INFINITY
            } else {
                10f64.powf((b + 1) as f64 / PER_DECADE)
            };
            (cdf(hi) - cdf(lo)) * total
        })
        .collect();
    let mut free: Vec<Vec<u32>> = vec![Vec::new(); bins];
    for (f, &s) in sizes.iter().enumerate() {
        free[bin_of(s)].push(f as u32);
    }
    for b in &mut free {
        b.shuffle(rng);
    }
    let mut by_rank = Vec::with_capacity(counts.len());
    for &c in counts {
        let mut best = None;
        for (b, files) in free.iter().enumerate() {
            if !files.is_empty() && best.is_none_or(|x: usize| owed[b] > owed[x]) {
                best = Some(b);
            }
        }
        let b = best.expect("as many files as ranks");
        by_rank.push(free[b].pop().expect("a file left in the bin"));
        owed[b] -= c as f64;
    }
    by_rank
}

/// One thread's walk through the pages.
pub struct SurgeThread {
    set: Arc<Prepared>,
    next_page: usize,
    path: Vec<u8>,
}

impl SurgeThread {
    /// Threads start at different pages.
    pub fn new(set: Arc<Prepared>, thread: usize, threads: usize) -> SurgeThread {
        let pages = match &*set {
            Prepared::Surge(s) => s.pages.len(),
            _ => 1,
        };
        SurgeThread {
            set,
            next_page: thread * pages / threads.max(1),
            path: Vec::with_capacity(64),
        }
    }

    /// Cursor: `a` = page, `b` = position in the page, `c` = 1 once a page is held.
    pub fn next_request(&mut self, cur: &mut Cursor, rng: &mut SmallRng, out: &mut Out<'_>) -> Next {
        let Prepared::Surge(s) = &*self.set else { unreachable!() };
        let first = cur.c == 0;
        let mut think = 0.0;
        let (_, end) = if first { (0, 0) } else { s.page(cur.a as usize) };
        if first || cur.b as usize >= end {
            if !first {
                think = INACTIVE_OFF.sample(rng);
            }
            cur.a = (self.next_page % s.pages.len()) as u64;
            self.next_page += 1;
            cur.b = s.page(cur.a as usize).0 as u64;
            cur.c = 1;
        } else {
            think = ACTIVE_OFF.sample(rng);
        }
        let f = s.sequence[cur.b as usize];
        cur.b += 1;
        s.path(f, &mut self.path);
        let think = (think * s.think_scale).min(s.max_off);
        let meta = out.request(Method::Get, 0, &self.path, b"", b"", f as u64);
        Next::Request(meta, Duration::from_secs_f64(think))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_popularity_and_locality() {
        let s = SurgeSet::generate(2000, 40_000, 0.07, 1 << 30, 1.0, 3600.0, 9);
        let mut sizes = s.sizes.clone();
        sizes.sort_unstable();
        let above = sizes.iter().filter(|&&x| x as f64 >= CUT).count() as f64 / 2000.0;
        assert!((above - 0.07).abs() < 0.02, "tail share {above}");
        // The body median is near e^9.357 ≈ 11.6 KB (a little lower: the tail
        // takes 7 % of files and the body is cut at 133 KB).
        let median = sizes[1000] as f64;
        assert!((8_000.0..14_000.0).contains(&median), "median {median}");
        // Zipf counts: the most referenced file gets about requests/H_N.
        let mut counts = vec![0usize; 2000];
        for &f in &s.sequence {
            counts[f as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c >= 1));
        let top = *counts.iter().max().unwrap() as f64;
        let h: f64 = (1..=2000).map(|r| 1.0 / r as f64).sum();
        assert!((top - 40_000.0 / h).abs() < 2.0, "top count {top}");
        // Temporal locality: the median LRU stack distance of re-references is
        // small (lognormal(1.5, 0.8) has median e^1.5 ≈ 4.5).
        let mut last = vec![usize::MAX; 2000];
        let mut dists = Vec::new();
        for (i, &f) in s.sequence.iter().enumerate().take(20_000) {
            if last[f as usize] != usize::MAX {
                let mut seen = std::collections::HashSet::new();
                for &g in &s.sequence[last[f as usize] + 1..i] {
                    seen.insert(g);
                }
                dists.push(seen.len());
            }
            last[f as usize] = i;
        }
        dists.sort_unstable();
        let med = dists[dists.len() / 2];
        assert!((2..=8).contains(&med), "median stack distance {med}");
        // Pages: mean objects per page of Pareto(1, 2.43) floored is about 1.3–1.8.
        let mean_page = s.sequence.len() as f64 / s.pages.len() as f64;
        assert!((1.2..2.0).contains(&mean_page), "objects per page {mean_page}");
    }

    /// Share of requests (file sizes weighted by reference counts) at or below `x`.
    fn request_cdf(s: &SurgeSet, x: u64) -> f64 {
        let below = s.sequence.iter().filter(|&&f| s.sizes[f as usize] <= x).count();
        below as f64 / s.sequence.len() as f64
    }

    #[test]
    fn request_sizes_follow_the_pareto_model() {
        let s = SurgeSet::generate(2000, 50_000, 0.07, 1 << 30, 1.0, 3600.0, 5);
        // Pareto(1000, 1): P(X <= x) = 1 - 1000/x.
        for (x, want, tol) in [(2_000u64, 0.50, 0.06), (10_000, 0.90, 0.04), (100_000, 0.99, 0.015)] {
            let got = request_cdf(&s, x);
            assert!((got - want).abs() < tol, "P(request <= {x}) = {got}, model {want}");
        }
        // Drawn at random instead, requests would look like the file sizes:
        // about 9 % of them at or below 2000 bytes.
        let files_below = s.sizes.iter().filter(|&&x| x <= 2000).count() as f64 / 2000.0;
        assert!(
            files_below < 0.2,
            "file sizes keep their own distribution: {files_below}"
        );
        // The matching only reorders: the multiset of file sizes is the one drawn.
        let mut rng = SmallRng::seed_from_u64(1);
        let sizes = [5u64, 900, 3000, 40_000, 2_000_000];
        let by_rank = match_sizes_to_popularity(&sizes, &[40, 30, 20, 5, 1], &mut rng);
        let mut seen = by_rank.clone();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        // Popular files are small, the one-reference files take the large ones.
        let mut counts = vec![0u32; 2000];
        for &f in &s.sequence {
            counts[f as usize] += 1;
        }
        let mut files: Vec<usize> = (0..2000).collect();
        files.sort_by_key(|&f| std::cmp::Reverse(counts[f]));
        let mean = |fs: &[usize]| fs.iter().map(|&f| s.sizes[f] as f64).sum::<f64>() / fs.len() as f64;
        assert!(mean(&files[..100]) * 5.0 < mean(&files[1000..]));
    }

    #[test]
    fn a_user_walks_pages_with_active_and_inactive_off_times() {
        let set = SurgeSet::generate(500, 20_000, 0.07, 1 << 30, 1.0, 3600.0, 2);
        let (pages, sequence, sizes) = (set.pages.clone(), set.sequence.clone(), set.sizes.clone());
        let shared = Arc::new(Prepared::Surge(set));
        let mut user = SurgeThread::new(shared, 0, 1);
        let w = crate::request::Writer::new(&["h:1".into()], None, weft_http::Version::Http11, &[], false, true);
        let mut rng = SmallRng::seed_from_u64(8);
        let mut cur = Cursor::default();
        let mut buf = Vec::new();
        let (mut active, mut inactive) = (Vec::new(), Vec::new());
        let mut prev_page = None;
        for _ in 0..8000 {
            buf.clear();
            let mut out = Out::for_test(&mut buf, &w);
            let Next::Request(meta, think) = user.next_request(&mut cur, &mut rng, &mut out) else {
                panic!("a SURGE user never runs out");
            };
            // The requests follow the reference sequence, page by page, and
            // name the file's size.
            let pos = cur.b as usize - 1;
            assert_eq!(meta.tag, sequence[pos] as u64);
            let f = sequence[pos];
            let path = format!("/size/{}/surge/f{f}", sizes[f as usize]);
            assert!(buf.windows(path.len()).any(|x| x == path.as_bytes()), "{path}");
            let page = cur.a as usize;
            let t = think.as_secs_f64();
            match prev_page {
                None => assert_eq!(t, 0.0, "the first request waits for nothing"),
                Some(p) if p == page => active.push(t),
                Some(_) => {
                    assert_eq!(pos, pages[page] as usize, "a new page starts with its base file");
                    inactive.push(t);
                }
            }
            prev_page = Some(page);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        // Embedded objects follow after Weibull(1.46, 0.382) active OFF times,
        // pages after Pareto(1, 1.5) inactive OFF times (medians a·ln2^(1/b) and 2^(1/1.5)).
        assert!(
            active.len() > 1000 && inactive.len() > 3000,
            "{} {}",
            active.len(),
            inactive.len()
        );
        let ma = median(&mut active);
        let want = 1.46 * 2f64.ln().powf(1.0 / 0.382);
        assert!((ma - want).abs() < 0.1 * want, "active OFF median {ma}, model {want}");
        let mi = median(&mut inactive);
        let want = 2f64.powf(1.0 / 1.5);
        assert!((mi - want).abs() < 0.1 * want, "inactive OFF median {mi}, model {want}");
    }

    #[test]
    fn same_seed_same_set() {
        let a = SurgeSet::generate(100, 1000, 0.07, 1 << 20, 1.0, 10.0, 3);
        let b = SurgeSet::generate(100, 1000, 0.07, 1 << 20, 1.0, 10.0, 3);
        assert_eq!(a.sizes, b.sizes);
        assert_eq!(a.sequence, b.sequence);
        let c = SurgeSet::generate(100, 1000, 0.07, 1 << 20, 1.0, 10.0, 4);
        assert_ne!(a.sizes, c.sizes);
        let mut p = Vec::new();
        a.path(7, &mut p);
        assert!(p.starts_with(b"/size/") && p.ends_with(b"/surge/f7"));
        assert_eq!(crate::urls::parse(&p).unwrap().size, a.sizes[7]);
    }
}
