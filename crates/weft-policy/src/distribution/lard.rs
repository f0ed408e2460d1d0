//! LARD and LARD/R, exactly as Figures 3.2 and 3.3 of the thesis give them.
//!
//! Load is the number of requests in flight on a back-end (§3.1.4), read from
//! [`Backends`] before the request is sent. Ties for "least loaded" go to the
//! first back-end at or after a rotating start, so that at light load (every
//! load 0) new targets are spread instead of all landing on back-end 0; ties
//! for "most loaded" go to the last one, never to the node being chosen.
//!
//! Both target maps are bounded LRU caches (§3.1.6).

use super::lru_map::LruMap;
use super::{Backends, Nanos, Request, ServerId, Strategy};

/// T_low, T_high and K (§3.1.4, §3.1.5) and the bound on the target map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LardParams {
    /// Load below which a back-end likely has idle resources.
    pub t_low: u32,
    /// Load above which a back-end likely delays requests.
    pub t_high: u32,
    /// LARD/R: a server set unchanged this long loses its most loaded node.
    pub k: Nanos,
    /// Most targets remembered; the least recently requested are forgotten.
    pub map_capacity: usize,
}

impl Default for LardParams {
    /// The thesis's settings: T_low 25, T_high 65, K 20 s; one million targets.
    fn default() -> Self {
        LardParams {
            t_low: 25,
            t_high: 65,
            k: 20_000_000_000,
            map_capacity: 1 << 20,
        }
    }
}

impl LardParams {
    /// Figure 3.2's test for moving a target away from (or, in LARD/R, adding
    /// a node beside) a back-end of load `load`.
    pub fn imbalanced(&self, load: u32, b: &Backends) -> bool {
        (load > self.t_high && b.any_below(self.t_low)) || load >= 2 * self.t_high
    }
}

/// Basic LARD (Figure 3.2): one back-end per target.
pub struct Lard {
    params: LardParams,
    server: LruMap<ServerId>,
    next: usize,
    reassignments: u64,
}

impl Lard {
    /// A strategy with these parameters.
    pub fn new(params: LardParams) -> Lard {
        Lard {
            params,
            server: LruMap::new(params.map_capacity),
            next: 0,
            reassignments: 0,
        }
    }

    /// The back-end `target` is assigned to, if any.
    pub fn assigned(&self, target: u64) -> Option<ServerId> {
        self.server.peek(target).copied()
    }

    /// Targets moved to another back-end so far.
    pub fn reassignments(&self) -> u64 {
        self.reassignments
    }
}

impl Strategy for Lard {
    fn name(&self) -> &'static str {
        "lard"
    }
    fn choose(&mut self, req: &Request, b: &Backends, _now: Nanos) -> Option<ServerId> {
        let least = b.least_loaded(self.next)?;
        let params = self.params;
        let chosen = match self.server.get_mut(req.target) {
            Some(n) if b.is_up(*n) => {
                if *n != least && params.imbalanced(b.load(*n), b) {
                    *n = least;
                    self.reassignments += 1;
                }
                *n
            }
            _ => {
                self.server.insert(req.target, least);
                least
            }
        };
        if chosen == least {
            self.next = least + 1;
        }
        Some(chosen)
    }
    fn backend_down(&mut self, server: ServerId) {
        self.server.retain(|_, s| *s != server);
    }
    fn mapped_targets(&self) -> usize {
        self.server.len()
    }
}

/// A target's server set in LARD/R.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSet {
    /// The back-ends serving the target.
    pub nodes: Vec<ServerId>,
    /// When the set last changed.
    pub last_mod: Nanos,
}

/// LARD with replication (Figure 3.3): a set of back-ends per target.
pub struct LardR {
    params: LardParams,
    sets: LruMap<ServerSet>,
    next: usize,
}

impl LardR {
    /// A strategy with these parameters.
    pub fn new(params: LardParams) -> LardR {
        LardR {
            params,
            sets: LruMap::new(params.map_capacity),
            next: 0,
        }
    }

    /// The server set of `target`, if any.
    pub fn server_set(&self, target: u64) -> Option<&ServerSet> {
        self.sets.peek(target)
    }
}

impl Strategy for LardR {
    fn name(&self) -> &'static str {
        "lard-r"
    }
    fn choose(&mut self, req: &Request, b: &Backends, now: Nanos) -> Option<ServerId> {
        let least = b.least_loaded(self.next)?;
        let params = self.params;
        let set = match self.sets.get_mut(req.target) {
            Some(set) if set.nodes.iter().all(|&s| b.is_up(s)) && !set.nodes.is_empty() => set,
            _ => {
                self.sets.insert(
                    req.target,
                    ServerSet {
                        nodes: vec![least],
                        last_mod: now,
                    },
                );
                self.next = least + 1;
                return Some(least);
            }
        };
        // n: least loaded in the set (first on ties).
        let mut n = set.nodes[0];
        for &s in &set.nodes[1..] {
            if b.load(s) < b.load(n) {
                n = s;
            }
        }
        let mut changed = false;
        let mut chosen = n;
        let old_len = set.nodes.len();
        if params.imbalanced(b.load(n), b) {
            if !set.nodes.contains(&least) {
                set.nodes.push(least);
                changed = true;
            }
            chosen = least;
            self.next = least + 1;
        }
        if old_len > 1 && now.saturating_sub(set.last_mod) > params.k {
            // m: most loaded of the set as it was (last on ties), not the one chosen.
            let m = set.nodes[..old_len].iter().copied().filter(|&s| s != chosen).fold(
                None,
                |best: Option<ServerId>, s| match best {
                    Some(x) if b.load(x) > b.load(s) => Some(x),
                    _ => Some(s),
                },
            );
            if let Some(m) = m {
                set.nodes.retain(|&s| s != m);
                changed = true;
            }
        }
        if changed {
            set.last_mod = now;
        }
        Some(chosen)
    }
    fn backend_down(&mut self, server: ServerId) {
        self.sets.retain(|_, set| {
            set.nodes.retain(|&s| s != server);
            !set.nodes.is_empty()
        });
    }
    fn mapped_targets(&self) -> usize {
        self.sets.len()
    }
}
