//! Whether this kernel carries response bodies in the sockmap (the load-time
//! self-test of `Forwarder::load`), and why not when it does not.
//!
//!   cargo run -p weft-sockmap --example bodies
fn main() {
    match weft_sockmap::Forwarder::load() {
        Ok(f) => match f.bodies() {
            Ok(()) => println!("bodies: yes"),
            Err(why) => println!("bodies: no ({why})"),
        },
        Err(e) => println!("sockmap unavailable: {e}"),
    }
}
