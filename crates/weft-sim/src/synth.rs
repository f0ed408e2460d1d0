//! Synthetic traces with the statistics the thesis gives for its two traces
//! (§3.2.2, §3.3.2), since the traces themselves are not public:
//!
//! | trace | targets | data set | memory covering 97 / 98 / 99 % of requests | hottest target |
//! | --- | --- | --- | --- | --- |
//! | Rice-like | 37,703 | 1,418 MB | 560 / 705 / 927 MB | 2 % of requests |
//! | IBM-like | 38,527 | 1,029 MB | 51 / 80 / 182 MB | 5 % of requests |
//!
//! (MB here is MiB, the unit of the 32 MB node caches.)
//!
//! The fit, in two steps:
//! 1. Popularity is Zipf-like, P(rank r) ∝ r^−α, with α solved (bisection) so
//!    that the hottest target draws the share the thesis reports (§3.3.2):
//!    α ≈ 0.76 for Rice, ≈ 0.89 for IBM.
//! 2. Sizes are fitted to the coverage points. The ranks that bring the
//!    cumulative request share to 97, 98 and 99 % cut the targets into four
//!    bands; each band gets exactly the bytes the thesis implies (for Rice:
//!    560, 145, 222 and 491 MB), spread over its targets by lognormal weights
//!    (σ = 1) in random order. Coverage at 97/98/99 % and the data-set size
//!    then match by construction, up to one target's size (checked by a test).
//!
//! Requests are drawn independently from the popularity (the independent
//! reference model), which has no temporal locality: a real two-month log's
//! working set at any moment is smaller than its whole-trace coverage says.
//! `locality` p adds some without changing the popularity: with probability
//! p a request repeats one drawn uniformly from the last [`WINDOW`] requests,
//! whose targets are themselves distributed by popularity, so the marginal
//! popularity (and so the coverage fit) is unchanged in expectation while
//! re-references come sooner. p = 0 (the default) is the plain model.
//! `hot` adds §3.3.2's artificial high-frequency targets: a few extra targets
//! of one size that together draw a given share of the requests, the one
//! workload where LARD/R's replication pays in the thesis (+0–15 % over LARD,
//! most when the hot targets exceed 20 KB and draw 10–60 % of requests).
//! Target ids are popularity ranks, so
//! striping files over several disks by id is the thesis's round-robin in
//! order of falling popularity (§3.3.3).

use crate::trace::{TraceRequest, TraceSource, TraceStats};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

const MIB: f64 = 1024.0 * 1024.0;

/// The published statistics a synthetic trace is fitted to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceShape {
    /// Name (`rice`, `ibm`, `merged`, `ece`, `cs`, `owlnet`).
    pub name: &'static str,
    /// Distinct targets.
    pub targets: usize,
    /// Data-set size in MiB.
    pub data_set_mib: f64,
    /// Coverage points, in rising order: (share of requests, MiB of the most
    /// popular targets that draw it).
    pub coverage: &'static [(f64, f64)],
    /// The popularity anchor: the `anchor.0` most popular targets draw
    /// `anchor.1` of the requests (the hottest target's share when `anchor.0` is 1).
    pub anchor: (usize, f64),
    /// Mean bytes per request the thesis gives, fitted when present (see
    /// [`Population::fit`]); `None` leaves sizes independent of popularity
    /// within a coverage band.
    pub mean_request_kib: Option<f64>,
    /// Where the figures come from.
    pub source: &'static str,
}

/// The request shares of Rice's and IBM's coverage points.
pub const COVERAGE: [f64; 3] = [0.97, 0.98, 0.99];

/// The Rice University trace (§3.2.2, Figure 3.5).
pub const RICE: TraceShape = TraceShape {
    name: "rice",
    targets: 37_703,
    data_set_mib: 1418.0,
    coverage: &[(0.97, 560.0), (0.98, 705.0), (0.99, 927.0)],
    anchor: (1, 0.02),
    mean_request_kib: None,
    source: "§3.2.2, Fig. 3.5; hottest target §3.3.2",
};

/// The www.ibm.com trace (§3.2.2, Figure 3.6).
pub const IBM: TraceShape = TraceShape {
    name: "ibm",
    targets: 38_527,
    data_set_mib: 1029.0,
    coverage: &[(0.97, 51.0), (0.98, 80.0), (0.99, 182.0)],
    anchor: (1, 0.05),
    mean_request_kib: None,
    source: "§3.2.2, Fig. 3.6; hottest target §3.3.2",
};

/// MERGED (§2.4.4): the Rice trace of chapter 3 ("also described as the
/// MERGED trace", Fig. 3.5) with its mean request size, 17 KB, fitted too.
pub const MERGED: TraceShape = TraceShape {
    name: "merged",
    mean_request_kib: Some(17.0),
    source: "§2.4.4 (17 KB per request) and §3.2.2, Fig. 3.5",
    ..RICE
};

/// ECE (§2.4.4, Fig. 2.7): 523 MB of static data; the 5,000 most requested
/// files are 39 % of it and draw 95 % of requests; 23 KB per request. The
/// thesis does not give the file count: 10,000 is assumed.
pub const ECE: TraceShape = TraceShape {
    name: "ece",
    targets: 10_000,
    data_set_mib: 523.0,
    coverage: &[(0.95, 0.39 * 523.0)],
    anchor: (5_000, 0.95),
    mean_request_kib: Some(23.0),
    source: "§2.4.4, Fig. 2.7 (file count assumed)",
};

/// CS (§2.4.4, §4.6): only the mean request size, 20 KB, is in the text
/// (Fig. 2.7's curves are not); the rest is assumed, between ECE and MERGED:
/// 20,000 files, 600 MB, the 5,000 most requested drawing 90 % of requests
/// in 30 % of the bytes, the hottest 2 %. The Flash chapter calls it the
/// more disk-intensive of CS and Owlnet.
pub const CS: TraceShape = TraceShape {
    name: "cs",
    targets: 20_000,
    data_set_mib: 600.0,
    coverage: &[(0.90, 180.0)],
    anchor: (1, 0.02),
    mean_request_kib: Some(20.0),
    source: "§2.4.4 (20 KB per request); the rest assumed",
};

/// Owlnet (§4.6): students' and staff's personal pages; the thesis says only
/// that its data set is smaller than CS's, its locality higher and its mean
/// transfer smaller. Assumed: 12,000 files, 150 MB, 95 % of requests drawn
/// by 25 % of the bytes, the hottest file 5 % (as IBM's), 12 KB per request.
pub const OWLNET: TraceShape = TraceShape {
    name: "owlnet",
    targets: 12_000,
    data_set_mib: 150.0,
    coverage: &[(0.95, 37.5)],
    anchor: (1, 0.05),
    mean_request_kib: Some(12.0),
    source: "§4.6 (smaller, more local, smaller transfers than CS); figures assumed",
};

/// Every shape, by name.
pub const SHAPES: [TraceShape; 6] = [RICE, IBM, MERGED, ECE, CS, OWLNET];

impl TraceShape {
    /// `rice`, `ibm`, `merged`, `ece`, `cs` or `owlnet`.
    pub fn by_name(name: &str) -> Option<TraceShape> {
        SHAPES.into_iter().find(|s| s.name == name)
    }
}

/// Zipf exponent whose top rank draws `share` of requests among `n` targets.
pub fn fit_alpha(n: usize, share: f64) -> f64 {
    fit_alpha_at(n, 1, share)
}

/// Zipf exponent whose `k` most popular of `n` targets draw `share` of requests.
pub fn fit_alpha_at(n: usize, k: usize, share: f64) -> f64 {
    let k = k.clamp(1, n);
    let part = |a: f64| {
        let w = |r: usize| (r as f64).powf(-a);
        let head: f64 = (1..=k).map(w).sum();
        head / (head + (k + 1..=n).map(w).sum::<f64>())
    };
    let (mut lo, mut hi) = (0.0f64, 3.0f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if part(mid) < share {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// The fitted population: popularity and sizes by rank.
#[derive(Clone, Debug)]
pub struct Population {
    /// Zipf exponent.
    pub alpha: f64,
    /// Cumulative request share through rank i (last = 1).
    pub cumulative: Vec<f64>,
    /// Size in bytes of rank i.
    pub sizes: Vec<u64>,
    /// Mean bytes per request (popularity-weighted size).
    pub mean_request: f64,
}

impl Population {
    /// Fit `shape` (deterministic for a seed).
    pub fn fit(shape: &TraceShape, seed: u64) -> Population {
        let n = shape.targets;
        let alpha = fit_alpha_at(n, shape.anchor.0, shape.anchor.1);
        let weights: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-alpha)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        *cumulative.last_mut().expect("targets > 0") = 1.0;
        // Band edges: first rank whose cumulative share reaches each point;
        // each band gets the bytes between two coverage points.
        let mut edges = vec![0usize];
        let mut budgets = Vec::new();
        let mut below = 0.0;
        for &(share, mib) in shape.coverage {
            edges.push((cumulative.partition_point(|&x| x < share) + 1).min(n));
            budgets.push(mib - below);
            below = mib;
        }
        edges.push(n);
        budgets.push(shape.data_set_mib - below);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_5175);
        let lognormal = LogNormal::new(0.0, 1.0).expect("valid lognormal");
        let draws: Vec<f64> = (0..n).map(|_| lognormal.sample(&mut rng)).collect();
        let spread = |beta: f64| {
            let mut sizes = vec![0u64; n];
            for (band, budget) in budgets.iter().enumerate() {
                let (a, b) = (edges[band], edges[band + 1].max(edges[band]));
                if a >= b {
                    continue;
                }
                let w: Vec<f64> = (a..b).map(|i| draws[i] * ((i + 1) as f64).powf(beta)).collect();
                let sum: f64 = w.iter().sum();
                for (i, wi) in (a..b).zip(w) {
                    sizes[i] = ((budget.max(0.0) * MIB * wi / sum).round() as u64).max(1);
                }
            }
            sizes
        };
        let mean = |sizes: &[u64]| {
            let mut prev = 0.0;
            cumulative
                .iter()
                .zip(sizes)
                .map(|(&c, &s)| {
                    let p = c - prev;
                    prev = c;
                    p * s as f64
                })
                .sum::<f64>()
        };
        // Sizes tilted by rank^beta inside each band keep every band's bytes
        // (so the coverage points) and move the mean request size: beta > 0
        // makes the popular files of a band the small ones. Bisection on beta.
        let sizes = match shape.mean_request_kib {
            None => spread(0.0),
            Some(kib) => {
                let (mut lo, mut hi) = (-3.0f64, 3.0f64);
                for _ in 0..40 {
                    let mid = (lo + hi) / 2.0;
                    if mean(&spread(mid)) > kib * 1024.0 {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                spread((lo + hi) / 2.0)
            }
        };
        let mean_request = mean(&sizes);
        Population {
            alpha,
            cumulative,
            sizes,
            mean_request,
        }
    }

    /// Bytes of the most popular targets that cover `share` of requests.
    pub fn coverage_bytes(&self, share: f64) -> u64 {
        let r = self.cumulative.partition_point(|&x| x < share) + 1;
        self.sizes[..r.min(self.sizes.len())].iter().sum()
    }

    /// Rank drawn by a uniform `u` in [0, 1).
    pub fn rank(&self, u: f64) -> usize {
        self.cumulative.partition_point(|&x| x <= u).min(self.sizes.len() - 1)
    }
}

/// Artificial hot targets (§3.3.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HotTargets {
    /// Share of all requests that go to the hot targets (0 < share < 1).
    pub share: f64,
    /// How many hot targets share it equally.
    pub count: u32,
    /// Bytes of each.
    pub size: u64,
}

/// Requests remembered for `locality` re-references.
pub const WINDOW: usize = 10_000;

/// A synthetic trace of `requests` draws.
pub struct SynthTrace {
    population: std::sync::Arc<Population>,
    rng: SmallRng,
    remaining: u64,
    locality: f64,
    hot: Option<HotTargets>,
    recent: Vec<u32>,
    drawn: u64,
    seen: Vec<bool>,
    stats: TraceStats,
}

impl SynthTrace {
    /// `requests` draws from a fitted population; the draw sequence depends on `seed`.
    pub fn new(population: std::sync::Arc<Population>, requests: u64, seed: u64) -> SynthTrace {
        let n = population.sizes.len();
        SynthTrace {
            population,
            rng: SmallRng::seed_from_u64(seed),
            remaining: requests,
            locality: 0.0,
            hot: None,
            recent: Vec::with_capacity(WINDOW),
            drawn: 0,
            seen: vec![false; n],
            stats: TraceStats::default(),
        }
    }

    /// Repeat a recent request with probability `p` (0 ≤ p < 1).
    pub fn with_locality(mut self, p: f64) -> SynthTrace {
        self.locality = p.clamp(0.0, 0.999);
        self
    }

    fn count(&mut self, r: usize, size: u64) -> TraceRequest {
        if !self.seen[r] {
            self.seen[r] = true;
            self.stats.targets += 1;
            self.stats.data_set_bytes += size;
        }
        self.stats.lines += 1;
        self.stats.requests += 1;
        TraceRequest { target: r as u64, size }
    }

    /// Send `hot.share` of the requests to `hot.count` extra targets (ids
    /// after the population's) of `hot.size` bytes.
    pub fn with_hot(mut self, hot: Option<HotTargets>) -> SynthTrace {
        self.hot = hot.filter(|h| h.count > 0 && h.share > 0.0);
        if let Some(h) = self.hot {
            self.seen.resize(self.population.sizes.len() + h.count as usize, false);
        }
        self
    }
}

impl TraceSource for SynthTrace {
    fn next_request(&mut self) -> Option<TraceRequest> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        if let Some(h) = self.hot {
            if self.rng.gen::<f64>() < h.share {
                let r = self.population.sizes.len() + self.rng.gen_range(0..h.count as usize);
                return Some(self.count(r, h.size));
            }
        }
        let repeat = self.locality > 0.0 && !self.recent.is_empty() && self.rng.gen::<f64>() < self.locality;
        let r = if repeat {
            self.recent[self.rng.gen_range(0..self.recent.len())] as usize
        } else {
            self.population.rank(self.rng.gen::<f64>())
        };
        if self.locality > 0.0 {
            let slot = (self.drawn % WINDOW as u64) as usize;
            if slot < self.recent.len() {
                self.recent[slot] = r as u32;
            } else {
                self.recent.push(r as u32);
            }
        }
        self.drawn += 1;
        Some(self.count(r, self.population.sizes[r]))
    }
    fn stats(&self) -> TraceStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_match_their_published_statistics() {
        for shape in SHAPES {
            let p = Population::fit(&shape, 1);
            let (k, share) = shape.anchor;
            let head = p.cumulative[k - 1];
            assert!((head - share).abs() < 1e-6, "{}: top {k} draw {head}", shape.name);
            if let Some(kib) = shape.mean_request_kib {
                let got = p.mean_request / 1024.0;
                assert!((got - kib).abs() / kib < 0.02, "{}: {got} KiB per request", shape.name);
            }
            let total: u64 = p.sizes.iter().sum();
            assert!(
                (total as f64 / MIB - shape.data_set_mib).abs() < 1.0,
                "{}: total",
                shape.name
            );
            for &(c, want) in shape.coverage {
                let got = p.coverage_bytes(c) as f64 / MIB;
                // Within one band-edge target of the published figure.
                assert!(
                    (got - want).abs() / want < 0.02,
                    "{}: {c} covered by {got} MiB, want {want}",
                    shape.name
                );
            }
        }
    }

    #[test]
    fn draws_follow_the_popularity() {
        let p = std::sync::Arc::new(Population::fit(&IBM, 1));
        let mut t = SynthTrace::new(p.clone(), 100_000, 7);
        let mut top = 0;
        while let Some(r) = t.next_request() {
            top += u32::from(r.target == 0);
        }
        assert!((4_500..5_500).contains(&top), "top target drawn {top} times");
        assert_eq!(t.stats().requests, 100_000);
        // With locality the hottest target keeps its share.
        let mut t = SynthTrace::new(p.clone(), 100_000, 7).with_locality(0.8);
        let mut top = 0;
        while let Some(r) = t.next_request() {
            top += u32::from(r.target == 0);
        }
        assert!(
            (4_000..6_000).contains(&top),
            "top target drawn {top} times with locality"
        );
        let hot = HotTargets {
            share: 0.3,
            count: 3,
            size: 30_000,
        };
        let mut t = SynthTrace::new(p.clone(), 10_000, 7).with_hot(Some(hot));
        let n = p.sizes.len() as u64;
        let mut hits = 0;
        while let Some(r) = t.next_request() {
            if r.target >= n {
                assert!(r.target < n + 3 && r.size == 30_000);
                hits += 1;
            }
        }
        assert!((2_700..3_300).contains(&hits), "{hits} hot requests");
    }
}
