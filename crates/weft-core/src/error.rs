//! An error that knows where it came from.
//!
//! A proxy must answer differently when the client sent garbage (4xx, close),
//! the upstream failed (502/504, maybe retry elsewhere) or weft itself failed
//! (500). Like Pingora's error type, [`Error`] records that origin and whether
//! retrying the request is safe, so the code that finally answers does not have
//! to guess from an `io::Error`.

use std::fmt;

/// Which side a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The downstream client (bad request, reset, timeout).
    Client,
    /// An upstream server or the network towards it.
    Upstream,
    /// weft itself (resource exhaustion, a bug).
    Internal,
}

/// An error with its origin, an HTTP status to answer with, and retry safety.
#[derive(Debug)]
pub struct Error {
    /// Who failed.
    pub origin: Origin,
    /// Status a server would answer with (400, 502, 504, 500...).
    pub status: u16,
    /// Short human description naming the cause.
    pub reason: String,
    /// True when the request may be retried (nothing reached the upstream).
    pub retry_safe: bool,
}

impl Error {
    /// A client error.
    pub fn client(status: u16, reason: impl Into<String>) -> Error {
        Error {
            origin: Origin::Client,
            status,
            reason: reason.into(),
            retry_safe: false,
        }
    }
    /// An upstream error.
    pub fn upstream(status: u16, reason: impl Into<String>, retry_safe: bool) -> Error {
        Error {
            origin: Origin::Upstream,
            status,
            reason: reason.into(),
            retry_safe,
        }
    }
    /// An internal error.
    pub fn internal(reason: impl Into<String>) -> Error {
        Error {
            origin: Origin::Internal,
            status: 500,
            reason: reason.into(),
            retry_safe: false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match self.origin {
            Origin::Client => "client",
            Origin::Upstream => "upstream",
            Origin::Internal => "internal",
        };
        write!(f, "{who} error {}: {}", self.status, self.reason)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_origin_and_status() {
        let e = Error::upstream(502, "connection refused", true);
        assert_eq!(e.to_string(), "upstream error 502: connection refused");
        assert!(e.retry_safe);
        assert_eq!(Error::client(400, "x").origin, Origin::Client);
        assert_eq!(Error::internal("x").status, 500);
    }
}
