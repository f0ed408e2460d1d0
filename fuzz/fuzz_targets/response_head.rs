//! Response heads: never panic; framing is always decidable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_http::{Limits, Method, ResponseHead};

fuzz_target!(|data: &[u8]| {
    let mut h = ResponseHead::new();
    if let Ok(Some(n)) = h.parse(data, &Limits::default()) {
        assert!(n <= data.len());
        for m in [Method::Get, Method::Head, Method::Connect] {
            let _ = h.framing(m);
            let _ = h.keep_alive(m);
        }
    }
});
