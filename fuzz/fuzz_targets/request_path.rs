//! Path resolution: never panic, and a resolved path never contains `..`
//! segments, empty segments, a leading `/` or a NUL — whatever the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rel = Vec::new();
    if weft_server::path::resolve(data, &mut rel).is_ok() {
        assert!(!rel.contains(&0));
        assert!(!rel.starts_with(b"/"));
        if !rel.is_empty() {
            for seg in rel.split(|&b| b == b'/') {
                assert!(
                    !seg.is_empty() && seg != b"." && seg != b"..",
                    "{:?}",
                    String::from_utf8_lossy(&rel)
                );
            }
        }
    }
});
