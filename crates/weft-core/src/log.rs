//! A minimal leveled logger to stderr.
//!
//! Servers log rarely (start-up, refusals, errors); a global level in an atomic
//! and `eprintln!` are all that is needed, with no allocation when a message is
//! filtered out. Use the [`crate::warn!`], [`crate::info!`] and [`crate::debug!`] macros.

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
            eprintln!(concat!("weft: ", $prefix, "{}"), format_args!($($arg)*));
        }
    };
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
