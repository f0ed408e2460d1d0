//! What the examples share: a connected loopback TCP pair.

use std::net::{TcpListener, TcpStream};

/// Two ends of one loopback TCP connection (connector, acceptor).
pub fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}
