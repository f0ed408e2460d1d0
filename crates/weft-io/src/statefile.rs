//! Files another program polls for (`weft wan --ready`, a role's
//! `--pid-file`): written whole or not at all.
//!
//! `std::fs::write` creates the file before it writes, so a reader that waits
//! for the path to exist can read it empty. Writing a temporary file beside it
//! and renaming it into place makes the path appear with its whole contents
//! (rename within one directory is atomic).

use std::io;
use std::path::{Path, PathBuf};

/// Write `contents` to `path` so that a reader sees either no file (or the old
/// one) or all of `contents`.
pub fn write_whole(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = temp_beside(path);
    if let Err(e) = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// `DIR/.NAME.PID.tmp`: in the same directory (rename cannot cross file
/// systems), hidden, and unique per process.
fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("weft-statefile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("ready.json");
        write_whole(&p, b"{\"a\":1}\n").unwrap();
        write_whole(&p, b"{\"b\":2}\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"b\":2}\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ready.json")]);
        // A directory that does not exist: an error, and nothing left behind.
        assert!(write_whole(&dir.join("no/such.json"), b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
