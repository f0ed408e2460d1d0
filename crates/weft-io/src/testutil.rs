//! What several test modules of this crate share.

/// A path in the temporary directory that no other test or run uses:
/// `weft-{tag}-` followed by the process id and the time in nanoseconds.
pub(crate) fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "weft-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}
