//! Cache-Control (and the targeted fields' same grammar): never panic; every
//! delta stays clamped; a directive's name and argument lie inside the value;
//! parsing the fields one by one equals parsing them together.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_http::cache_control::{parse_delta, CacheControl, DELTA_MAX};

fuzz_target!(|values: Vec<&[u8]>| {
    let all = CacheControl::parse(values.iter().copied());
    let mut one = CacheControl::default();
    for v in &values {
        one.present = true;
        one.parse_value(v);
        CacheControl::directives(v, |name, arg, _| {
            let inside = |s: &[u8]| {
                let (p, q) = (s.as_ptr() as usize, v.as_ptr() as usize);
                p >= q && p + s.len() <= q + v.len()
            };
            assert!(inside(name));
            assert!(arg.is_none_or(|a| inside(a) || a.is_empty()));
        });
        if let Some(d) = parse_delta(v) {
            assert!(d <= DELTA_MAX);
        }
    }
    assert_eq!(all, one);
    for d in [all.max_age, all.s_maxage, all.min_fresh, all.max_stale]
        .into_iter()
        .flatten()
    {
        assert!(d <= DELTA_MAX);
    }
});
