//! The cost of one placement decision (place + finished) per strategy, the
//! figure issue 23 asks of the front-end's single decision state (the thesis
//! found the dispatcher 10-20 % of the handoff cost, §3.5.2).
//!
//! `cargo run --release -p weft-policy --example decision_cost [BACKENDS]`
//!
//! Requests cycle over 40,000 targets with a skewed popularity; the oldest
//! request in flight finishes whenever the admission limit S is reached, so
//! every strategy runs with S requests in flight, as under saturation.

use std::collections::VecDeque;
use std::time::Instant;
use weft_policy::distribution::mix64;
use weft_policy::{Dispatcher, DispatcherConfig, Placement, Policy, Request};

const REQUESTS: u64 = 2_000_000;

fn main() {
    let backends: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let weights = vec![1u32; backends];
    println!("{backends} back-ends, {REQUESTS} requests, S requests in flight");
    for name in Policy::NAMES {
        let policy: Policy = name.parse().expect("known policy");
        let mut d: Dispatcher<u64> = Dispatcher::new(policy.build(&weights), &weights, DispatcherConfig::default());
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let started = Instant::now();
        for i in 0..REQUESTS {
            // Skewed popularity: squaring a uniform value favours low ids.
            let u = (mix64(i) >> 11) as f64 / (1u64 << 53) as f64;
            let target = (u * u * 40_000.0) as u64;
            let now = i * 1_000;
            if in_flight.len() >= d.limit() {
                let s = in_flight.pop_front().expect("in flight");
                d.finished(s, now);
            }
            match d.place(
                i,
                Request {
                    target,
                    size: Some(8192),
                },
                now,
            ) {
                Placement::Assigned(s) => in_flight.push_back(s),
                other => panic!("unexpected {other:?}"),
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / REQUESTS as f64;
        println!(
            "{name:<7} {ns:>7.0} ns per request (place + finished), {} targets mapped",
            d.strategy().mapped_targets()
        );
    }
}
