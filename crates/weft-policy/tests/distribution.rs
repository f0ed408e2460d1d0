//! Property tests of request distribution: LARD moves a target only under
//! Figure 3.2's conditions, LARD/R grows and shrinks server sets only as
//! Figure 3.3 says, the dispatcher never exceeds the admission limit S and
//! keeps its queue in order, and no strategy chooses a back-end that is down.

use proptest::prelude::*;
use weft_policy::distribution::{Backends, Lard, LardParams, LardR, Nanos, Request, Strategy as Distribute};
use weft_policy::{Dispatcher, DispatcherConfig, Placement, Policy};

const T_LOW: u32 = 2;
const T_HIGH: u32 = 4;
const K: Nanos = 10;

fn params() -> LardParams {
    LardParams {
        t_low: T_LOW,
        t_high: T_HIGH,
        k: K,
        map_capacity: 64,
    }
}

/// One step: a request for `target` while the back-ends have these loads and health.
#[derive(Clone, Debug)]
struct Step {
    target: u64,
    loads: Vec<u32>,
    up: Vec<bool>,
    dt: Nanos,
}

fn steps(n: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = (
        0u64..6,
        prop::collection::vec(0u32..3 * T_HIGH, n),
        prop::collection::vec(prop::bool::weighted(0.9), n),
        0u64..8,
    )
        .prop_map(|(target, loads, up, dt)| Step { target, loads, up, dt });
    prop::collection::vec(step, 1..120)
}

fn min_up_load(b: &Backends) -> Option<u32> {
    (0..b.len()).filter(|&s| b.is_up(s)).map(|s| b.load(s)).min()
}

/// Tell the strategy about health changes, as the dispatcher does.
fn apply_health(s: &mut dyn Distribute, was: &mut [bool], now: &[bool]) {
    for (i, (w, &u)) in was.iter_mut().zip(now).enumerate() {
        if *w != u {
            if u {
                s.backend_up(i);
            } else {
                s.backend_down(i);
            }
            *w = u;
        }
    }
}

proptest! {
    #[test]
    fn lard_reassigns_only_under_the_thesis_conditions(steps in steps(4)) {
        let p = params();
        let mut lard = Lard::new(p);
        let mut health = vec![true; 4];
        for st in steps {
            apply_health(&mut lard, &mut health, &st.up);
            let b = Backends::from_state(&[1; 4], &st.loads, &st.up);
            let before = lard.assigned(st.target);
            let chosen = lard.choose(&Request::new(st.target), &b, 0);
            let Some(min) = min_up_load(&b) else {
                prop_assert_eq!(chosen, None);
                continue;
            };
            let chosen = chosen.unwrap();
            prop_assert!(b.is_up(chosen));
            prop_assert_eq!(lard.assigned(st.target), Some(chosen));
            match before {
                None => prop_assert_eq!(b.load(chosen), min, "a new target goes to a least loaded node"),
                Some(prev) => {
                    prop_assert!(b.is_up(prev), "a down back-end left the map");
                    let cond = (b.load(prev) > T_HIGH && b.any_below(T_LOW)) || b.load(prev) >= 2 * T_HIGH;
                    if chosen != prev {
                        prop_assert!(cond, "moved from {} (load {}) without an imbalance", prev, b.load(prev));
                        prop_assert_eq!(b.load(chosen), min);
                    } else if cond {
                        prop_assert_eq!(b.load(prev), min, "imbalanced but kept on a node that is not least loaded");
                    }
                }
            }
        }
    }

    #[test]
    fn lard_r_grows_and_shrinks_server_sets_as_specified(steps in steps(4)) {
        let p = params();
        let mut lr = LardR::new(p);
        let mut health = vec![true; 4];
        let mut now: Nanos = 0;
        for st in steps {
            now += st.dt;
            apply_health(&mut lr, &mut health, &st.up);
            let b = Backends::from_state(&[1; 4], &st.loads, &st.up);
            let before = lr.server_set(st.target).cloned();
            let Some(chosen) = lr.choose(&Request::new(st.target), &b, now) else {
                prop_assert_eq!(min_up_load(&b), None);
                continue;
            };
            let min = min_up_load(&b).unwrap();
            let after = lr.server_set(st.target).cloned().unwrap();
            prop_assert!(b.is_up(chosen));
            prop_assert!(after.nodes.contains(&chosen));
            prop_assert!(after.nodes.iter().all(|&s| b.is_up(s)));
            let Some(before) = before else {
                prop_assert_eq!(&after.nodes, &vec![chosen]);
                prop_assert_eq!(b.load(chosen), min);
                continue;
            };
            let set_min = before.nodes.iter().map(|&s| b.load(s)).min().unwrap();
            let cond = (set_min > T_HIGH && b.any_below(T_LOW)) || set_min >= 2 * T_HIGH;
            let added: Vec<_> = after.nodes.iter().filter(|s| !before.nodes.contains(s)).collect();
            let removed: Vec<_> = before.nodes.iter().filter(|s| !after.nodes.contains(s)).collect();
            prop_assert!(added.len() <= 1 && removed.len() <= 1);
            if let Some(&&a) = added.first() {
                prop_assert!(cond, "grew without an imbalance");
                prop_assert_eq!(b.load(a), min, "the node added is a least loaded one");
            }
            if cond {
                prop_assert_eq!(b.load(chosen), min);
            } else {
                prop_assert_eq!(b.load(chosen), set_min, "least loaded in the set");
            }
            let stale = before.nodes.len() > 1 && now - before.last_mod > K;
            prop_assert_eq!(removed.len() == 1, stale, "shrinks exactly when the set is older than K");
            if let Some(&&m) = removed.first() {
                prop_assert!(before.nodes.iter().filter(|&&s| s != chosen).all(|&s| b.load(s) <= b.load(m)),
                    "the node removed is the most loaded");
            }
            let changed = !added.is_empty() || !removed.is_empty();
            prop_assert_eq!(after.last_mod, if changed { now } else { before.last_mod });
        }
    }

    #[test]
    fn the_dispatcher_holds_the_limit_keeps_order_and_avoids_down_backends(
        policy in prop::sample::select(vec!["wrr", "lb", "lb-gc", "lard", "lard-r", "chash"]),
        ops in prop::collection::vec((0u8..10, 0u64..12, 0usize..4), 1..300),
    ) {
        let policy: Policy = match policy.parse().unwrap() {
            Policy::Lard(_) => Policy::Lard(params()),
            Policy::LardR(_) => Policy::LardR(params()),
            Policy::LbGc { .. } => Policy::LbGc {
                cache_bytes: 300,
                max_file: 300,
            },
            p => p,
        };
        let config = DispatcherConfig { t_low: T_LOW, t_high: T_HIGH, queue_limit: 5, admission: true };
        let mut d: Dispatcher<u64> = Dispatcher::new(policy.build(&[1, 2, 1, 1]), &[1, 2, 1, 1], config);
        let mut in_flight: Vec<usize> = Vec::new();
        let mut next_ticket = 0u64;
        let mut last_dispatched: Option<u64> = None;
        let mut queued: Vec<u64> = Vec::new();
        for (i, (op, target, s)) in ops.into_iter().enumerate() {
            let now = i as Nanos;
            match op {
                0..=5 => {
                    let was = d.in_flight();
                    let ticket = next_ticket;
                    next_ticket += 1;
                    match d.place(ticket, Request { target, size: Some(100) }, now) {
                        Placement::Assigned(server) => {
                            prop_assert!(was < d.limit() && queued.is_empty());
                            prop_assert!(d.backends().is_up(server));
                            in_flight.push(server);
                        }
                        Placement::Queued => {
                            prop_assert!(d.queue_len() <= 5);
                            queued.push(ticket);
                        }
                        Placement::Rejected(_) => {
                            prop_assert!(d.queue_len() == 5 || d.backends().up_count() == 0);
                        }
                    }
                }
                6..=7 if !in_flight.is_empty() => {
                    let server = in_flight.swap_remove(s % in_flight.len());
                    d.finished(server, now);
                }
                8 => d.set_up(s, false, now),
                _ => d.set_up(s, true, now),
            }
            loop {
                let was = d.in_flight();
                let Some((ticket, server)) = d.next_queued(now) else { break };
                prop_assert!(was < d.limit());
                prop_assert!(d.backends().is_up(server));
                prop_assert_eq!(Some(&ticket), queued.first(), "queue order");
                queued.remove(0);
                prop_assert!(last_dispatched.is_none_or(|l| l < ticket));
                last_dispatched = Some(ticket);
                in_flight.push(server);
            }
            prop_assert_eq!(d.in_flight(), in_flight.len());
            let total: u32 = (0..4).map(|x| d.backends().load(x)).sum();
            prop_assert_eq!(total as usize, in_flight.len());
        }
    }
}

#[test]
fn lard_r_replicates_a_hot_target_and_drops_the_replica_after_k() {
    let p = params();
    let mut lr = LardR::new(p);
    let idle = Backends::from_state(&[1; 3], &[0, 0, 0], &[true; 3]);
    let s0 = lr.choose(&Request::new(1), &idle, 0).unwrap();
    // Its node is overloaded while another is idle: a second node joins.
    let mut loads = [0u32; 3];
    loads[s0] = T_HIGH + 1;
    let hot = Backends::from_state(&[1; 3], &loads, &[true; 3]);
    let s1 = lr.choose(&Request::new(1), &hot, 1).unwrap();
    assert_ne!(s1, s0);
    assert_eq!(lr.server_set(1).unwrap().nodes.len(), 2);
    // Within K nothing is removed; after K the most loaded goes.
    lr.choose(&Request::new(1), &hot, 1 + K).unwrap();
    assert_eq!(lr.server_set(1).unwrap().nodes.len(), 2);
    let chosen = lr.choose(&Request::new(1), &hot, 2 + K).unwrap();
    assert_eq!(chosen, s1);
    assert_eq!(lr.server_set(1).unwrap().nodes, vec![s1]);
}

#[test]
fn lard_moves_a_target_exactly_at_figure_3_2s_thresholds() {
    let mut lard = Lard::new(params());
    let b = |loads: &[u32]| Backends::from_state(&[1; 3], loads, &[true; 3]);
    assert_eq!(lard.choose(&Request::new(9), &b(&[0, 1, 1]), 0), Some(0));
    // Above T_high, but no node below T_low: stays.
    assert_eq!(
        lard.choose(&Request::new(9), &b(&[T_HIGH + 1, T_LOW, T_LOW + 1]), 0),
        Some(0)
    );
    // At T_high exactly, with an idle node: stays (the test is load > T_high).
    assert_eq!(lard.choose(&Request::new(9), &b(&[T_HIGH, 0, 0]), 0), Some(0));
    // Above T_high with a node below T_low: moves to the least loaded.
    assert_eq!(
        lard.choose(&Request::new(9), &b(&[T_HIGH + 1, T_LOW, T_LOW - 1]), 0),
        Some(2)
    );
    assert_eq!(lard.reassignments(), 1);
    // At 2·T_high: moves even though no node is below T_low.
    assert_eq!(
        lard.choose(&Request::new(9), &b(&[T_LOW, T_LOW + 1, 2 * T_HIGH]), 0),
        Some(0)
    );
    assert_eq!(lard.assigned(9), Some(0));
    // Its node goes down: the target is placed again as if new.
    lard.backend_down(0);
    assert_eq!(lard.assigned(9), None);
}
