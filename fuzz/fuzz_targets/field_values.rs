//! Field-value parsers fed from requests: Range, conditionals, dates.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};
use weft_http::{evaluate_preconditions, evaluate_range, if_range_allows, parse_http_date, Method, RangeOutcome};

fuzz_target!(|input: (u32, &[u8])| {
    let (len, v) = input;
    let len = len as u64;
    if let RangeOutcome::Partial { start, end_inclusive } = evaluate_range(v, len) {
        assert!(start <= end_inclusive && end_inclusive < len);
    }
    let mtime = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let _ = evaluate_preconditions(Method::Get, Some(v), Some(v), Some(v), Some(v), b"\"a\"", mtime);
    let _ = if_range_allows(v, b"\"a\"", mtime);
    let _ = parse_http_date(v);
});
