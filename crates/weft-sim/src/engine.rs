//! The discrete-event cluster of §3.2.1 (Figure 3.4).
//!
//! Each back-end node has one CPU and one or more disks, each a FIFO queue
//! served one job at a time, and a whole-file cache. A request's steps run in
//! sequence: connection set-up (CPU); then, on a cache hit, transmission
//! (CPU); on a miss, for each 44 KB block, a disk read then the block's
//! transmission; then teardown (CPU). Different requests overlap freely on
//! the CPU and disks. A miss on a file already being read on that node waits
//! for that read instead of starting another, then sends the whole file from
//! memory. A file read completely is offered to the cache.
//!
//! In front sits weft-policy's [`Dispatcher`]: the front-end costs nothing and
//! the network is infinitely fast (§3.2.1), but the admission limit S holds.
//! Arrivals are matched to what the cluster can serve (§3.2.3) by closed-loop
//! clients, as many as S by default: each takes the next request of the trace
//! as soon as its previous one completes, so S requests are always in flight.
//!
//! WRR/GMS (§3.3): WRR distribution, and a node that misses in its own memory
//! but finds the file in another node's fetches it at network cost, charged
//! as a second transmission of the file on its CPU, with no directory or
//! replacement cost (the thesis's "very generous assumptions"). As in GMS
//! (Feeley et al.), the page fetched becomes local: the file enters the
//! fetching node's cache too, so files every node uses are held by every
//! node, which is what keeps GMS below LARD's aggregate cache.
//!
//! A single FIFO server needs no explicit queue: a job enqueued at `now`
//! starts when the server frees (`max(now, free_at)`) and the server is then
//! busy until it ends, so only the completion is an event.

use crate::cache::{CachePolicy, FileCache};
use crate::cost::CostModel;
use crate::report::{NodeReport, SimReport};
use crate::trace::TraceSource;
use crate::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use weft_policy::distribution::lru_map::IdMap;
use weft_policy::{Dispatcher, DispatcherConfig, Placement, Policy, Request};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Back-end nodes.
    pub nodes: usize,
    /// Distribution strategy (and its parameters).
    pub policy: Policy,
    /// WRR with a global memory system (use with `Policy::Wrr`).
    pub gms: bool,
    /// Cache replacement.
    pub cache_policy: CachePolicy,
    /// Cache bytes per node.
    pub cache_bytes: u64,
    /// Disks per node; files are striped over them by target id.
    pub disks: usize,
    /// Costs.
    pub cost: CostModel,
    /// T_low: admission limit and the idle threshold (40 % of it).
    pub t_low: u32,
    /// T_high of the admission limit.
    pub t_high: u32,
    /// Closed-loop clients; `None` = the admission limit S.
    pub clients: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 8,
            policy: Policy::Wrr,
            gms: false,
            cache_policy: CachePolicy::Gds,
            cache_bytes: 32 << 20,
            disks: 1,
            cost: CostModel::default(),
            t_low: 25,
            t_high: 65,
            clients: None,
        }
    }
}

impl SimConfig {
    /// The strategy's display name (`wrr-gms` for WRR with GMS).
    pub fn strategy_name(&self) -> String {
        if self.gms {
            format!("{}-gms", self.policy.name())
        } else {
            self.policy.name().to_string()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Setup,
    Transmit,
    DiskBlock,
    SendBlock,
    WaitRead,
    Teardown,
}

/// The request a client has outstanding.
#[derive(Clone, Copy, Debug)]
struct Outstanding {
    file: u64,
    size: u64,
    issued: Nanos,
    node: usize,
    phase: Phase,
    block: u64,
}

struct Node {
    cpu_free: Nanos,
    cpu_busy: Nanos,
    disk_free: Vec<Nanos>,
    disk_busy: Nanos,
    cache: FileCache,
    /// File being read → clients waiting for that read.
    reading: IdMap<Vec<u32>>,
    load: u32,
    load_since: Nanos,
    idle: Nanos,
    requests: u64,
    misses: u64,
}

impl Node {
    fn set_load(&mut self, load: u32, now: Nanos, idle_below: f64) {
        if f64::from(self.load) < idle_below {
            self.idle += now - self.load_since;
        }
        self.load_since = now;
        self.load = load;
    }
}

/// A simulation in progress.
pub struct Sim<'a> {
    config: SimConfig,
    nodes: Vec<Node>,
    clients: Vec<Outstanding>,
    events: BinaryHeap<Reverse<(Nanos, u64, u32)>>,
    seq: u64,
    dispatcher: Dispatcher<u32>,
    trace: &'a mut dyn TraceSource,
    idle_below: f64,
    completed: u64,
    disk_reads: u64,
    remote_hits: u64,
    misses: u64,
    delay_sum: f64,
    delay_max: Nanos,
    rejected: u64,
    end: Nanos,
}

impl<'a> Sim<'a> {
    /// A cluster ready to run `trace`.
    pub fn new(config: SimConfig, trace: &'a mut dyn TraceSource) -> Result<Sim<'a>, String> {
        if config.nodes == 0 || config.disks == 0 {
            return Err("nodes and disks must be at least 1".into());
        }
        let weights = vec![1; config.nodes];
        let dispatch = DispatcherConfig {
            t_low: config.t_low,
            t_high: config.t_high,
            queue_limit: usize::MAX,
            admission: true,
        };
        let dispatcher = Dispatcher::new(config.policy.build(&weights), &weights, dispatch);
        let clients = config.clients.unwrap_or_else(|| dispatcher.limit()).max(1);
        let nodes = (0..config.nodes)
            .map(|_| Node {
                cpu_free: 0,
                cpu_busy: 0,
                disk_free: vec![0; config.disks],
                disk_busy: 0,
                cache: FileCache::new(config.cache_policy, config.cache_bytes),
                reading: IdMap::default(),
                load: 0,
                load_since: 0,
                idle: 0,
                requests: 0,
                misses: 0,
            })
            .collect();
        let idle = Outstanding {
            file: 0,
            size: 0,
            issued: 0,
            node: 0,
            phase: Phase::Idle,
            block: 0,
        };
        Ok(Sim {
            idle_below: 0.4 * f64::from(config.t_low),
            config,
            nodes,
            clients: vec![idle; clients],
            events: BinaryHeap::new(),
            seq: 0,
            dispatcher,
            trace,
            completed: 0,
            disk_reads: 0,
            remote_hits: 0,
            misses: 0,
            delay_sum: 0.0,
            delay_max: 0,
            rejected: 0,
            end: 0,
        })
    }

    fn at(&mut self, t: Nanos, client: u32) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, client)));
    }

    fn cpu(&mut self, client: u32, work: Nanos, now: Nanos) {
        let node = &mut self.nodes[self.clients[client as usize].node];
        let done = now.max(node.cpu_free) + work;
        node.cpu_free = done;
        node.cpu_busy += work;
        self.at(done, client);
    }

    fn disk(&mut self, client: u32, work: Nanos, now: Nanos) {
        let c = self.clients[client as usize];
        let node = &mut self.nodes[c.node];
        let d = (c.file % node.disk_free.len() as u64) as usize;
        let done = now.max(node.disk_free[d]) + work;
        node.disk_free[d] = done;
        node.disk_busy += work;
        self.at(done, client);
    }

    /// The client takes the trace's next request.
    fn issue(&mut self, client: u32, now: Nanos) {
        let Some(r) = self.trace.next_request() else {
            self.clients[client as usize].phase = Phase::Idle;
            return;
        };
        let c = &mut self.clients[client as usize];
        c.file = r.target;
        c.size = r.size;
        c.issued = now;
        c.phase = Phase::Idle;
        let req = Request {
            target: r.target,
            size: Some(r.size),
        };
        match self.dispatcher.place(client, req, now) {
            Placement::Assigned(s) => self.start(client, s, now),
            Placement::Queued => {}
            Placement::Rejected(_) => self.rejected += 1,
        }
    }

    fn start(&mut self, client: u32, node: usize, now: Nanos) {
        let load = self.dispatcher.backends().load(node);
        self.nodes[node].set_load(load, now, self.idle_below);
        self.nodes[node].requests += 1;
        let c = &mut self.clients[client as usize];
        c.node = node;
        c.phase = Phase::Setup;
        let work = self.config.cost.setup();
        self.cpu(client, work, now);
    }

    fn after_setup(&mut self, client: u32, now: Nanos) {
        let c = self.clients[client as usize];
        let cost = self.config.cost;
        if self.nodes[c.node].cache.contains(c.file) {
            self.nodes[c.node].cache.touch(c.file);
            self.clients[client as usize].phase = Phase::Transmit;
            return self.cpu(client, cost.transmit(c.size), now);
        }
        if self.config.gms {
            let holder = (0..self.nodes.len()).find(|&n| n != c.node && self.nodes[n].cache.contains(c.file));
            if let Some(h) = holder {
                self.nodes[h].cache.touch(c.file);
                let miss_cost = cost.disk_read(c.size) as f64 / 1e9;
                self.nodes[c.node].cache.insert(c.file, c.size, miss_cost);
                self.remote_hits += 1;
                self.clients[client as usize].phase = Phase::Transmit;
                return self.cpu(client, 2 * cost.transmit(c.size), now);
            }
        }
        self.misses += 1;
        self.nodes[c.node].misses += 1;
        if let Some(waiting) = self.nodes[c.node].reading.get_mut(&c.file) {
            waiting.push(client);
            self.clients[client as usize].phase = Phase::WaitRead;
            return;
        }
        self.nodes[c.node].reading.insert(c.file, Vec::new());
        self.disk_reads += 1;
        let cl = &mut self.clients[client as usize];
        cl.phase = Phase::DiskBlock;
        cl.block = 0;
        self.disk(client, cost.disk_block(c.size, 0), now);
    }

    fn after_disk_block(&mut self, client: u32, now: Nanos) {
        let c = self.clients[client as usize];
        let cost = self.config.cost;
        if c.block + 1 == CostModel::blocks(c.size) {
            // The whole file is in memory: cache it and serve the waiters.
            let node = &mut self.nodes[c.node];
            node.cache.insert(c.file, c.size, cost.disk_read(c.size) as f64 / 1e9);
            let waiting = node.reading.remove(&c.file).unwrap_or_default();
            for w in waiting {
                self.clients[w as usize].phase = Phase::Transmit;
                self.cpu(w, cost.transmit(c.size), now);
            }
        }
        self.clients[client as usize].phase = Phase::SendBlock;
        self.cpu(client, cost.transmit(CostModel::block_bytes(c.size, c.block)), now);
    }

    fn after_send_block(&mut self, client: u32, now: Nanos) {
        let c = &mut self.clients[client as usize];
        if c.block + 1 < CostModel::blocks(c.size) {
            c.block += 1;
            c.phase = Phase::DiskBlock;
            let (size, block) = (c.size, c.block);
            let work = self.config.cost.disk_block(size, block);
            self.disk(client, work, now);
        } else {
            self.teardown(client, now);
        }
    }

    fn teardown(&mut self, client: u32, now: Nanos) {
        self.clients[client as usize].phase = Phase::Teardown;
        let work = self.config.cost.teardown();
        self.cpu(client, work, now);
    }

    fn complete(&mut self, client: u32, now: Nanos) {
        let c = self.clients[client as usize];
        let delay = now - c.issued;
        self.completed += 1;
        self.delay_sum += delay as f64;
        self.delay_max = self.delay_max.max(delay);
        self.end = now;
        self.dispatcher.finished(c.node, now);
        let load = self.dispatcher.backends().load(c.node);
        self.nodes[c.node].set_load(load, now, self.idle_below);
        while let Some((waiting, node)) = self.dispatcher.next_queued(now) {
            self.start(waiting, node, now);
        }
        self.issue(client, now);
    }

    /// Run the trace to its end.
    pub fn run(mut self) -> Result<SimReport, String> {
        for client in 0..self.clients.len() as u32 {
            self.issue(client, 0);
        }
        while let Some(Reverse((now, _, client))) = self.events.pop() {
            match self.clients[client as usize].phase {
                Phase::Setup => self.after_setup(client, now),
                Phase::Transmit => self.teardown(client, now),
                Phase::DiskBlock => self.after_disk_block(client, now),
                Phase::SendBlock => self.after_send_block(client, now),
                Phase::Teardown => self.complete(client, now),
                Phase::Idle | Phase::WaitRead => unreachable!("no event is pending for an idle or waiting client"),
            }
        }
        if let Some(e) = self.trace.error() {
            return Err(e);
        }
        Ok(self.report())
    }

    fn report(mut self) -> SimReport {
        let end = self.end.max(1);
        for n in &mut self.nodes {
            let load = n.load;
            n.set_load(load, end, self.idle_below);
        }
        let secs = end as f64 / 1e9;
        let per_node: Vec<NodeReport> = self
            .nodes
            .iter()
            .map(|n| NodeReport {
                requests: n.requests,
                misses: n.misses,
                idle_fraction: n.idle as f64 / end as f64,
                cpu_utilization: n.cpu_busy as f64 / end as f64,
                disk_utilization: n.disk_busy as f64 / (end as f64 * n.disk_free.len() as f64),
                cached_bytes: n.cache.used(),
            })
            .collect();
        let done = self.completed.max(1) as f64;
        SimReport {
            policy: self.config.strategy_name(),
            nodes: self.config.nodes,
            cache_policy: self.config.cache_policy,
            cache_bytes: self.config.cache_bytes,
            disks: self.config.disks,
            cpu_speed: self.config.cost.cpu_speed,
            clients: self.clients.len(),
            admission_limit: self.dispatcher.limit(),
            requests: self.completed,
            rejected: self.rejected,
            simulated_seconds: secs,
            throughput: if self.completed == 0 {
                0.0
            } else {
                self.completed as f64 / secs
            },
            miss_ratio: self.misses as f64 / done,
            disk_reads: self.disk_reads,
            remote_hits: self.remote_hits,
            idle_fraction: per_node.iter().map(|n| n.idle_fraction).sum::<f64>() / per_node.len() as f64,
            delay_mean_ms: self.delay_sum / done / 1e6,
            delay_max_ms: self.delay_max as f64 / 1e6,
            mapped_targets: self.dispatcher.strategy().mapped_targets(),
            trace: self.trace.stats(),
            per_node,
        }
    }
}

/// Simulate `trace` on the cluster `config` describes.
pub fn simulate(config: SimConfig, trace: &mut dyn TraceSource) -> Result<SimReport, String> {
    Sim::new(config, trace)?.run()
}
