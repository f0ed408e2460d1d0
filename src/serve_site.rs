//! `weft serve --site`: virtual hosts on the command line; the config file's
//! `[[serve.site]]` tables arrive here too (one `--site` each).

use clap::Args;

/// Virtual hosts.
#[derive(Args, Debug, Default)]
pub struct SiteArgs {
    /// A virtual host: `NAME[,NAME...]=ROOT` (`*.example.com` matches every name below it), or in
    /// the config file a `[[serve.site]]` table with `names`, `root`, and optionally `index`,
    /// `autoindex`, `cache-control` and `default`. Chosen by an absolute-form target's authority,
    /// else by Host; other names go to the `default = true` site, else the top-level DIR, else the
    /// first site. Repeatable.
    #[arg(long = "site", value_name = "SPEC", value_parser = weft_server::vhost::parse_site)]
    pub sites: Vec<weft_server::vhost::SiteSpec>,
}
