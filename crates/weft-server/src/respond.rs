//! Response heads and short generated responses: the writer lives in
//! `weft-http` (shared with the proxy); re-exported here for the worker.

pub use weft_http::respond::*;
