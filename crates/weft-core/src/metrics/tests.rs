//! Tests of the registry: declaration, sums, slots, both renderings, histograms.

use super::*;
use std::collections::HashMap;

/// A hand-written group, as weft-io's system-call counts: one labelled
/// family, only non-zero kinds in JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Calls([u64; 3]);

const CALL_NAMES: [&str; 3] = ["read", "write", "close"];

impl Group for Calls {
    const WORDS: usize = 3;
    fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
    fn publish(&self, out: &mut Publish<'_>) {
        self.0.iter().for_each(|v| out.put(*v));
    }
    fn read(input: &mut Read<'_>) -> Self {
        Calls(std::array::from_fn(|_| input.take()))
    }
    fn write_json(&self, out: &mut String) {
        let mut o = JsonObject::begin(out);
        for (n, v) in CALL_NAMES.iter().zip(self.0) {
            if v > 0 {
                o.u64(n, v);
            }
        }
        o.end();
    }
    fn samples(&self, name: &str, out: &mut Samples) {
        for (n, v) in CALL_NAMES.iter().zip(self.0) {
            out.push(name, "System calls by kind.", Kind::Counter, Some(("kind", n)), v);
        }
    }
}

crate::metrics! {
    /// A role's counters for the tests.
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    struct TestStats {
        /// Connections accepted.
        counter accepted,
        /// Requests answered
        /// (any status).
        counter requests,
        /// Connections open now.
        gauge open,
    }
    groups {
        /// System calls by kind.
        syscalls: Calls,
        /// Present for one backend only.
        extra: Option<Calls>,
    }
}

fn sample(k: u64) -> TestStats {
    TestStats {
        accepted: k,
        requests: 10 * k,
        open: k + 1,
        syscalls: Calls([k, 0, 2 * k]),
        extra: None,
    }
}

#[test]
fn names_docs_and_kinds_follow_the_declaration() {
    assert_eq!(TestStats::NAMES, ["accepted", "requests", "open"]);
    let s = sample(3);
    assert_eq!(s.values(), [s.accepted, s.requests, s.open]);
    let d = TestStats::DESCS;
    assert_eq!(d.len(), 3);
    assert_eq!(d[1].help, " Requests answered (any status).");
    assert_eq!((d[0].kind, d[2].kind), (Kind::Counter, Kind::Gauge));
    assert_eq!(<TestStats as Group>::WORDS, 3 + 3 + 4);
}

#[test]
fn add_sums_fields_and_groups() {
    let mut a = sample(1);
    a.add(&sample(2));
    assert_eq!((a.accepted, a.requests, a.open), (3, 30, 5));
    assert_eq!(a.syscalls, Calls([3, 0, 6]));
    assert_eq!(a.extra, None);
    let mut b = sample(1);
    b.extra = Some(Calls([1, 1, 1]));
    a.add(&b);
    a.add(&b);
    assert_eq!(a.extra, Some(Calls([2, 2, 2])));
    assert_eq!(total(&[sample(1), sample(2)]).requests, 30);
}

#[test]
fn publish_and_read_round_trip() {
    let slot: Slot<TestStats> = Slot::default();
    assert_eq!(slot.read(), TestStats::default());
    // 10 words: two lines of their own.
    assert_eq!((slot.lines.len(), slot.lines.as_ptr() as usize % 64), (2, 0));
    let mut s = sample(7);
    slot.publish(&s);
    assert_eq!(slot.read(), s);
    s.extra = Some(Calls([4, 5, 6]));
    slot.publish(&s);
    assert_eq!(slot.read(), s);
    s.extra = None;
    s.requests += 1;
    slot.publish(&s);
    assert_eq!(slot.read(), s);
    let slots: Vec<Slot<TestStats>> = (0..2).map(|_| Slot::default()).collect();
    slots[1].publish(&sample(2));
    assert_eq!(read_all(&slots), vec![TestStats::default(), sample(2)]);
}

#[test]
fn json_keeps_the_hand_written_shape() {
    // What ServeStats::to_json wrote before the registry.
    let mut s = sample(2);
    assert_eq!(
        s.to_json(),
        r#"{"accepted":2,"requests":20,"open":3,"syscalls":{"read":2,"close":4}}"#
    );
    s.extra = Some(Calls([0, 1, 0]));
    assert_eq!(
        s.to_json(),
        r#"{"accepted":2,"requests":20,"open":3,"syscalls":{"read":2,"close":4},"extra":{"write":1}}"#
    );
    assert_eq!(
        TestStats::default().to_json(),
        r#"{"accepted":0,"requests":0,"open":0,"syscalls":{}}"#
    );
    let doc = stats_document("epoll", &[sample(1), sample(2)], &[("store", "null")]);
    assert_eq!(
        doc,
        concat!(
            r#"{"backend":"epoll","workers":["#,
            r#"{"worker":0,"stats":{"accepted":1,"requests":10,"open":2,"syscalls":{"read":1,"close":2}}},"#,
            r#"{"worker":1,"stats":{"accepted":2,"requests":20,"open":3,"syscalls":{"read":2,"close":4}}}],"#,
            r#""total":{"accepted":3,"requests":30,"open":5,"syscalls":{"read":3,"close":6}},"store":null}"#,
            "\n"
        )
    );
}

/// One parsed sample line: name, labels, value.
type Line = (String, Vec<(String, String)>, f64);

/// A strict reader of the text exposition format: HELP and TYPE once per
/// family, before its samples; each family's samples contiguous; names
/// and labels well-formed. Returns the samples and each family's type.
fn parse_prometheus(text: &str) -> (Vec<Line>, HashMap<String, String>) {
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashMap<String, String> = HashMap::new();
    let mut done: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    let mut lines = Vec::new();
    assert!(text.ends_with('\n'), "text ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has text");
            assert!(valid_name(name) && !help.is_empty(), "{line}");
            assert!(helps.insert(name.into(), help.into()).is_none(), "HELP twice: {line}");
            if let Some(c) = current.replace(name.to_string()) {
                done.push(c);
            }
            assert!(!done.contains(&name.to_string()), "family split: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE has a type");
            assert_eq!(Some(name), current.as_deref(), "TYPE follows its HELP: {line}");
            assert!(["counter", "gauge", "histogram"].contains(&ty), "{line}");
            assert!(types.insert(name.into(), ty.into()).is_none(), "TYPE twice: {line}");
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series, Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels closed");
                let labels = body
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("label k=v");
                        assert!(valid_name(k), "{line}");
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).expect("quoted");
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                (name, labels)
            }
        };
        assert!(valid_name(name), "{line}");
        let family = current.as_deref().expect("sample after its HELP");
        let ty = &types[family];
        let suffix_ok = name == family
            || (ty == "histogram"
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(family)));
        assert!(suffix_ok, "sample {name} outside its family {family}");
        lines.push((name.to_string(), labels, value));
    }
    (lines, types)
}

fn value(lines: &[Line], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let hits: Vec<f64> = lines
        .iter()
        .filter(|(n, l, _)| n == name && *l == want)
        .map(|l| l.2)
        .collect();
    assert_eq!(hits.len(), 1, "{name} {labels:?}");
    hits[0]
}

#[test]
fn prometheus_text_is_well_formed_and_sums_workers() {
    let mut b = sample(2);
    b.extra = Some(Calls([1, 0, 0]));
    let mut lat = [Latency::new(), Latency::new()];
    for us in [30, 80, 120, 900, 3_000] {
        lat[0].record_us(us);
    }
    lat[1].record(Duration::from_millis(20));
    lat[1].record(Duration::from_secs(7200)); // beyond the range: counted at its top
    let text = Prometheus::new()
        .group("test", &[sample(1), b])
        .histogram("test", "request", "Time to answer a request.", &lat)
        .finish();
    let (lines, types) = parse_prometheus(&text);
    assert_eq!(types["weft_test_accepted_total"], "counter");
    assert_eq!(types["weft_test_open"], "gauge");
    assert_eq!(types["weft_test_syscalls_total"], "counter");
    assert_eq!(types["weft_test_request_seconds"], "histogram");
    assert!(
        text.contains("# HELP weft_test_requests_total Requests answered (any status).\n"),
        "{text}"
    );
    assert_eq!(value(&lines, "weft_test_requests_total", &[("worker", "0")]), 10.0);
    assert_eq!(value(&lines, "weft_test_requests_total", &[("worker", "1")]), 20.0);
    assert_eq!(value(&lines, "weft_test_requests_total", &[]), 30.0);
    assert_eq!(value(&lines, "weft_test_open", &[]), 5.0);
    // Zero kinds are samples too: a series should not come and go.
    assert_eq!(
        value(
            &lines,
            "weft_test_syscalls_total",
            &[("kind", "write"), ("worker", "1")]
        ),
        0.0
    );
    assert_eq!(value(&lines, "weft_test_syscalls_total", &[("kind", "close")]), 6.0);
    // An absent group has no samples; the total has it when a worker has.
    assert_eq!(
        value(&lines, "weft_test_extra_total", &[("kind", "read"), ("worker", "1")]),
        1.0
    );
    assert_eq!(value(&lines, "weft_test_extra_total", &[("kind", "read")]), 1.0);
    assert!(!lines
        .iter()
        .any(|(n, l, _)| n == "weft_test_extra_total" && l.contains(&("worker".to_string(), "0".to_string()))));
    // Histograms: cumulative buckets ending at +Inf == _count, per worker and merged.
    for worker in [Some("0"), Some("1"), None] {
        let with = |extra: Option<(&str, &str)>| -> Vec<(String, String)> {
            let mut l: Vec<(String, String)> = Vec::new();
            if let Some(w) = worker {
                l.push(("worker".into(), w.into()));
            }
            if let Some((k, v)) = extra {
                l.push((k.into(), v.into()));
            }
            l
        };
        let buckets: Vec<&Line> = lines
            .iter()
            .filter(|(n, l, _)| {
                n == "weft_test_request_seconds_bucket"
                    && l.iter().any(|(k, _)| k == "le")
                    && l.iter().filter(|(k, _)| k == "worker").map(|(_, v)| v.as_str()).next() == worker
            })
            .collect();
        assert_eq!(buckets.len(), BUCKETS.len() + 1);
        assert!(buckets.windows(2).all(|w| w[0].2 <= w[1].2), "cumulative: {buckets:?}");
        let inf = buckets.last().unwrap();
        assert_eq!(inf.1, with(Some(("le", "+Inf"))));
        let count = lines
            .iter()
            .find(|(n, l, _)| n == "weft_test_request_seconds_count" && *l == with(None))
            .unwrap();
        assert_eq!(inf.2, count.2);
    }
    assert_eq!(value(&lines, "weft_test_request_seconds_count", &[]), 7.0);
    assert_eq!(
        value(
            &lines,
            "weft_test_request_seconds_bucket",
            &[("worker", "0"), ("le", "0.0001")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &lines,
            "weft_test_request_seconds_bucket",
            &[("worker", "0"), ("le", "0.001")]
        ),
        4.0
    );
    let sum = value(&lines, "weft_test_request_seconds_sum", &[("worker", "0")]);
    assert!((sum - 0.00413).abs() < 1e-9, "{sum}");
    // Label values are escaped.
    let mut s = Samples::default();
    s.push("x", "a \\ b\nc", Kind::Gauge, Some(("k", "q\"\\")), 1);
    let mut t = String::new();
    s.write(&mut t);
    assert_eq!(t, "# HELP x a \\\\ b\\nc\n# TYPE x gauge\nx{k=\"q\\\"\\\\\"} 1\n");
}

#[test]
fn latency_publishes_at_most_once_a_second_and_never_waits() {
    let slot = LatencySlot::default();
    let mut local = Latency::new();
    let t0 = Instant::now();
    assert!(!slot.publish(&mut local, t0), "nothing to publish");
    local.record_us(100);
    assert!(slot.publish(&mut local, t0));
    assert_eq!((local.count(), slot.read().count()), (0, 1));
    local.record_us(200);
    assert!(!slot.publish(&mut local, t0 + Duration::from_millis(500)), "too soon");
    assert_eq!(local.count(), 1);
    {
        // A reader holds the slot: the worker goes on without waiting.
        let _held = slot.shared.lock().unwrap();
        assert!(!slot.publish(&mut local, t0 + PUBLISH_EVERY));
    }
    assert_eq!(local.count(), 1, "kept for the next try");
    assert!(slot.publish(&mut local, t0 + PUBLISH_EVERY));
    local.record_us(5_000);
    slot.flush(&mut local);
    let read = slot.read();
    assert_eq!((read.count(), read.sum_us()), (3, 5_300));
    assert_eq!(read.quantile_us(0.0), 100);
    assert!(read.quantile_us(1.0) >= 5_000 && read.quantile_us(1.0) <= 5_050);
    let mut merged = Latency::new();
    merged.add(&read);
    merged.add(&read);
    assert_eq!(merged.count(), 6);
    assert_eq!(read_latencies(&[slot, LatencySlot::default()])[0].count(), 3);
    // The size the module doc gives for the merge's walk.
    assert_eq!(Latency::new().hist.distinct_values(), 3_328);
}
