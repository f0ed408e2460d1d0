//! Request heads: never panic; a parsed head's spans stay inside the buffer;
//! feeding the same bytes in two pieces gives the same verdict once complete.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_http::{Limits, RequestHead};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let mut h = RequestHead::new();
    let whole = h.parse(data, &limits);
    if let Ok(Some(n)) = whole {
        assert!(n <= data.len());
        let _ = h.target(data);
        for f in h.fields() {
            let _ = (f.name(data), f.value(data), f.line(data));
        }
        // Every prefix is either incomplete or the same error class as a
        // request that cannot become valid; never a different complete head.
        for cut in [n / 2, n.saturating_sub(1)] {
            if let Ok(Some(m)) = RequestHead::new().parse(&data[..cut], &limits) {
                panic!("prefix of {cut} bytes parsed as a complete head of {m}");
            }
        }
    }
});
