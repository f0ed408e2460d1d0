//! `weft serve --accelerator` (issue 26): the origin accelerator of the web
//! booster paper — responses cached complete and ready to send (head and
//! body as one aggregate, checked against the file's generation on every hit)
//! and sent with one writev per request. It is the IO-Lite object cache of
//! issue 24 (`--object-cache`), turned on with a budget when not sized
//! explicitly; requests it cannot answer take the normal path.

use clap::Args;

/// The budget per worker when `--accelerator` is given bare.
pub const DEFAULT_BUDGET: &str = "64M";

#[derive(Args, Debug, Default)]
pub struct AcceleratorArgs {
    /// Origin accelerator for a booster in front (docs/booster.md): ready-to-send responses,
    /// one writev per hit, invalidated when the file changes; the object cache with this budget per
    /// worker unless --object-cache sizes it [default when given: 64M].
    #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = DEFAULT_BUDGET,
          value_parser = crate::args::size)]
    pub accelerator: Option<u64>,

    /// The web boosters in front (docs/booster.md): from these addresses the request target is taken
    /// from X-Weft-Target (the booster parsed and validated it); from anyone else that header is
    /// ignored. Comma-separated or repeated.
    #[arg(long, value_name = "IP[,IP]", value_delimiter = ',', value_parser = booster_addr)]
    pub booster_from: Vec<std::net::IpAddr>,
}

/// One booster address: an IP (a port, which varies per connection, is not
/// part of it).
fn booster_addr(s: &str) -> Result<std::net::IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("invalid booster address `{s}` (expected an IP address such as 10.0.0.1)"))
}

impl AcceleratorArgs {
    /// Apply after the cache flags: an explicit `--object-cache` wins.
    pub fn apply(&self, c: &mut weft_server::ServeConfig, object_cache_given: bool) {
        if let (Some(bytes), false) = (self.accelerator, object_cache_given) {
            c.object_cache = bytes;
        }
        c.booster_from.clone_from(&self.booster_from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_flag_turns_the_object_cache_on_unless_sized() {
        let mut c = weft_server::ServeConfig::default();
        let a = AcceleratorArgs {
            accelerator: Some(64 << 20),
            booster_from: vec![],
        };
        a.apply(&mut c, false);
        assert_eq!(c.object_cache, 64 << 20);
        c.object_cache = 5;
        a.apply(&mut c, true);
        assert_eq!(c.object_cache, 5);
        assert!(booster_addr("10.0.0.1").is_ok());
        assert!(booster_addr("10.0.0.1:80")
            .unwrap_err()
            .contains("invalid booster address"));
    }
}
