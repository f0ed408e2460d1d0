//! `weft proxy` flags for HTTP rules beyond RFC 9111's fixed ones: the
//! targeted cache-control field a surrogate honours (RFC 9213), what
//! happens to methods weft does not know, protocol upgrades, stale
//! answers (when the origin fails, and while a response is revalidated),
//! and how Range misses fill the cache.

use clap::Args;

/// `--targeted-cache-control NAME`: a `*-Cache-Control` field name.
fn targeted_name(s: &str) -> Result<String, String> {
    weft_http::caching::Targeted::surrogate(Some(s))
        .map(|_| s.to_string())
        .map_err(|e| e.trim_start_matches("targeted-cache-control: ").to_string())
}

/// HTTP rule flags of `weft proxy` (also keys of the config file's table).
#[derive(Args, Debug, Clone, Default)]
pub struct HttpRuleArgs {
    /// Reverse mode: a targeted field (RFC 9213, e.g. Weft-Cache-Control)
    /// whose directives are used ahead of CDN-Cache-Control, which is used
    /// ahead of Cache-Control and Expires; forward mode ignores both
    /// [default: CDN-Cache-Control only].
    #[arg(long, value_name = "FIELD", value_parser = targeted_name)]
    pub targeted_cache_control: Option<String>,

    /// Forward requests with methods weft does not know (they invalidate the
    /// cached target as unsafe methods do); false answers them 501 [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub forward_unknown_methods: Option<bool>,

    /// Forward a client's protocol upgrade (Upgrade named in Connection, as
    /// WebSocket asks) to the upstream; its 101 turns the connection into a
    /// tunnel both ways. false drops Upgrade like the other hop-by-hop fields
    /// [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub upgrade: Option<bool>,

    /// How stale a stored response may be and still answer when the origin
    /// fails (no connection, a timeout, 500/502/503/504) where the response
    /// does not say (`stale-if-error`, RFC 5861, is honoured either way; a
    /// request's own overrides both); 0s: only where they ask [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub stale_if_error: Option<std::time::Duration>,

    /// How stale a stored response may be and still answer at once while
    /// one background request revalidates it, where the response does not
    /// say (`stale-while-revalidate`, RFC 5861, is honoured either way);
    /// 0s: only where responses ask [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub stale_while_revalidate: Option<std::time::Duration>,

    /// Add `Cache-Status` (RFC 9211) to every response that went through the
    /// cache: a hit and its remaining freshness, or forwarded and why, with
    /// the upstream's status and whether it was stored [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cache_status: Option<bool>,

    /// Collapsed forwarding: while one request fetches a cacheable object
    /// the cache lacks, other misses for it wait for that fill and are
    /// answered from the cache, so the origin sees one request (keys whose
    /// responses are not storable pass straight through for a minute; a
    /// waiter may pay a slow leader's response time before its own)
    /// [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub collapse: Option<bool>,

    /// With --collapse: how long a miss waits for another's fill that it
    /// cannot follow yet (no head in) or at all, before it asks the origin
    /// itself (nginx's proxy_cache_lock_timeout) [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub collapse_timeout: Option<std::time::Duration>,

    /// Range misses fill the cache: the client gets the origin's 206 at
    /// once; a 206 with the whole representation is stored as its 200, and
    /// one with a part starts one background GET of the whole (if it may be
    /// stored and fits), so later ranges are hits. false: Range misses are
    /// only forwarded [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub range_fill: Option<bool>,
}

impl HttpRuleArgs {
    /// Apply the flags given.
    pub fn apply(&self, c: &mut weft_proxy::ProxyConfig) {
        if let Some(t) = &self.targeted_cache_control {
            c.targeted_cache_control = Some(t.clone());
        }
        if let Some(f) = self.forward_unknown_methods {
            c.extension_methods = f;
        }
        if let Some(u) = self.upgrade {
            c.upgrade = u;
        }
        if let Some(d) = self.stale_if_error {
            c.stale_if_error = d.as_secs();
        }
        if let Some(d) = self.stale_while_revalidate {
            c.stale_while_revalidate = d.as_secs();
        }
        if let Some(on) = self.cache_status {
            c.cache_status = on;
        }
        if let Some(on) = self.collapse {
            c.collapse = on;
        }
        if let Some(d) = self.collapse_timeout {
            c.collapse_timeout = d;
        }
        if let Some(on) = self.range_fill {
            c.range_fill = on;
        }
    }
}
