//! The FastCGI test application (`weft-fcgi-app`) as the CGI tests start it
//! (`tests/cgi.rs`, `tests/arch.rs`).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// The application's binary.
pub fn app_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weft-fcgi-app")
}

/// A running application, killed and reaped when dropped.
pub struct App(pub Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the application on a free TCP port: it and its `IP:PORT`.
pub fn on_tcp() -> (App, String) {
    let mut child = Command::new(app_bin())
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let app = App(child);
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap().to_string();
    (app, addr)
}
