//! Access-log (CLF / Combined) and trace lines, as `weft load` replays them
//! and `weft sim` reads them: never panic, and what parses lies in the line.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    let _ = weft_sim::trace::parse_log_line(line);
    if let Ok(s) = std::str::from_utf8(line) {
        if let Ok(l) = weft_load::workload::trace::parse_line(s) {
            assert!(s.contains(l.host));
        }
        let _ = weft_load::workload::trace::parse_clf_time(s);
        let _ = weft_load::workload::trace::Trace::parse(s);
    }
});
