//! A minimal leveled logger to stderr.
//!
//! Servers log rarely (start-up, refusals, errors); a global level in an atomic
//! and one write to stderr per line are all that is needed, with no allocation
//! when a message is filtered out. Use the [`crate::warn!`], [`crate::info!`] and
//! [`crate::debug!`] macros, and [`crate::stderr_line!`] for a message that
//! has its own prefix and no level.
//!
//! A line is formatted first and written with one `write(2)`: `eprintln!` on
//! Rust's unbuffered stderr writes each formatted piece with its own call, so a
//! reader of the log (an operator's `tail -f`, a test waiting for a message)
//! could see half a line, and the processes of `--arch mp`, which share the
//! descriptor, could interleave pieces. One write of a line shorter than
//! `PIPE_BUF` is atomic on a pipe and on an `O_APPEND` file.

use std::sync::atomic::{AtomicU8, Ordering};

/// Log levels, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// Something failed.
    Error = 0,
    /// Something was refused or degraded.
    Warn = 1,
    /// Start-up and shutdown.
    Info = 2,
    /// Per-connection detail.
    Debug = 3,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Set the global level.
pub fn set_level(l: Level) {
    LEVEL.store(l as u8, Ordering::Relaxed);
}

/// Is `l` enabled?
#[inline]
pub fn enabled(l: Level) -> bool {
    l as u8 <= LEVEL.load(Ordering::Relaxed)
}

crate::enum_names!(Level, "log level", {
    Error => "error",
    Warn => "warn",
    Info => "info",
    Debug => "debug",
});

/// Log at `level` with `prefix` after `weft: ` (what the four macros below share).
#[doc(hidden)]
#[macro_export]
macro_rules! log_at {
    ($level:ident, $prefix:literal, $($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::$level) {
            $crate::log::write_line(format_args!(concat!("weft: ", $prefix, "{}"), format_args!($($arg)*)));
        }
    };
}

/// Write a line to stderr whatever the level, in one call (see the module
/// doc): `eprintln!` for a running server's messages.
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => { $crate::log::write_line(format_args!($($arg)*)) };
}

/// Format `line` and write it, with its newline, to stderr in one call.
/// Errors writing the log are ignored, as `eprintln!` would panic on them and
/// a server must not stop because its log is gone.
pub fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut text = std::fmt::format(line);
    text.push('\n');
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Log at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log_at!(Warn, "warning: ", $($arg)*) };
}

/// Log at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log_at!(Info, "", $($arg)*) };
}

/// Log at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log_at!(Debug, "debug: ", $($arg)*) };
}

/// Log at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log_at!(Error, "error: ", $($arg)*) };
}
