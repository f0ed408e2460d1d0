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

/// A fresh directory at [`temp_path`]`(tag)`, created; the test removes it.
pub(crate) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = temp_path(tag);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
