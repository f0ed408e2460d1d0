//! SURGE-like user equivalents (Barford & Crovella; parameters in
//! workloads.md §2).
//!
//! Offline, from `--seed`: `files` file sizes (lognormal(9.357, 1.318) body
//! below 133 KB, Pareto(133000, 1.1) tail with probability `tail`), Zipf(1)
//! popularity giving each file an exact reference count, a reference sequence
//! drawn with a lognormal(1.5, 0.80) LRU stack distance (temporal locality),
//! and pages of Pareto(1, 2.43) objects (a base file and its embedded files).
//!
//! Online, each user equivalent (a closed-loop client, `--clients`) takes the
//! next page, fetches its base file, then each embedded file after a
//! Weibull(1.46, 0.382) active OFF time, and waits a Pareto(1, 1.5) inactive
//! OFF time before the next page. `think_scale` multiplies both OFF times (to
//! compress a test). SURGE's step matching file sizes to popularities so that
//! request sizes follow Pareto(1000, 1.0) is not reproduced: sizes are assigned
//! to popularity ranks at random.

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
        // Zipf(1) reference counts over popularity ranks, at least one each;
        // ranks are given to files at random.
        let h: f64 = (1..=files).map(|r| 1.0 / r as f64).sum();
        let mut by_rank: Vec<u32> = (0..files as u32).collect();
        by_rank.shuffle(&mut rng);
        let mut remaining = vec![0u32; files];
        for (r, &f) in by_rank.iter().enumerate() {
            let c = (requests as f64 / ((r + 1) as f64 * h)).round().max(1.0);
            remaining[f as usize] = c as u32;
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
