//! The admin endpoint's listener (`--admin ADDR` of `weft serve` and
//! `weft proxy`): `GET /stats` answers a JSON document built by the caller.
//!
//! It runs on its own thread with blocking std sockets: a cold diagnostic
//! path, kept off the workers so their system-call counts stay exactly the
//! server's. Workers publish their counters into atomics; `render` reads them.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

/// Builds the JSON document served at `/stats`.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Start the admin listener on `addr`; returns the bound address.
pub fn start(addr: SocketAddr, render: Render) -> io::Result<SocketAddr> {
    let l = TcpListener::bind(addr)?;
    let bound = l.local_addr()?;
    std::thread::Builder::new().name("weft-admin".into()).spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 2048];
            let n = c.read(&mut buf).unwrap_or(0);
            let req = &buf[..n];
            let (status, body) = if req.starts_with(b"GET / ") || req.starts_with(b"GET /stats ") {
                ("200 OK", render())
            } else {
                ("404 Not Found", "{\"error\":\"try GET /stats\"}\n".to_string())
            };
            let _ = write!(
                c,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })?;
    Ok(bound)
}
