//! The config file: any text gives settings or one error line naming the
//! file; never a panic, never a multi-line message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_core::config::section_settings;

const KNOWN: &[&str] = &["serve", "proxy", "front", "origin", "load"];

fuzz_target!(|text: &str| {
    for section in ["serve", "proxy", "front"] {
        match section_settings("f.toml", text, section, KNOWN) {
            Ok(settings) => {
                for s in settings {
                    assert!(!s.key.is_empty());
                }
            }
            Err(e) => {
                let m = e.to_string();
                assert!(m.starts_with("f.toml"), "{m}");
                assert!(!m.contains('\n'), "{m}");
            }
        }
    }
});
