//! Purging stored responses through the admin endpoint (`--admin`), for an
//! operator who has changed content behind the cache (Varnish's `PURGE`
//! and `ban`, Squid's `PURGE`, nginx's `proxy_cache_purge`). On the admin
//! listener, not the proxy's: whoever can reach the admin address may purge,
//! as whoever can reach it may read the counters, so it belongs on loopback
//! or a management network.
//!
//! - `POST /purge/URL`: every variant stored under URL, in memory and on
//!   disk (`{"purged": N}`: the objects removed from memory).
//! - `POST /purge-prefix/URL`: every URL that starts with it, e.g.
//!   `POST /purge-prefix/http://example.com/static/` (`{"purged": N,
//!   "keys": K}`, and `"disk_scanning": true` while the disk store's
//!   start-up scan has not indexed every file yet: those it reaches later
//!   are not purged).
//!
//! URL is absolute, `http://host[:port]/path[?query]`, as the cache keys it:
//! the host the clients name (in reverse mode, their Host), lowercased, the
//! default port left out. A URL that does not read so is answered
//! `{"error": ...}`. Requests in flight keep the object they hold.

use crate::cache;
use crate::disk::DiskStore;
use crate::store::Store;
use std::sync::{Arc, Mutex};
use weft_io::admin::Control;

/// The admin endpoint's `POST` handler for purges.
pub(crate) fn control(store: Arc<Mutex<Store>>, disk: Option<Arc<DiskStore>>) -> Control {
    Arc::new(move |line: &[u8]| answer(line, &store, disk.as_deref()))
}

/// The JSON answer to a `POST` request line; None: not a purge (404).
fn answer(line: &[u8], store: &Mutex<Store>, disk: Option<&DiskStore>) -> Option<String> {
    let target = line.strip_prefix(b"POST ")?.split(|&b| b == b' ').next()?;
    let (prefix, url) = if let Some(u) = target.strip_prefix(b"/purge-prefix/") {
        (true, u)
    } else {
        (false, target.strip_prefix(b"/purge/")?)
    };
    let mut key = Vec::with_capacity(url.len() + 8);
    if crate::headers::url_key(url, &mut key).is_none() {
        return Some("{\"error\":\"expected an absolute http:// URL after /purge/ or /purge-prefix/\"}\n".into());
    }
    if !prefix {
        let purged = cache::purge(store, disk, std::iter::once(&key[..]));
        return Some(format!("{{\"purged\":{purged}}}\n"));
    }
    let (keys, scanning) = cache::keys_with_prefix(store, disk, &key);
    let purged = cache::purge(store, disk, keys.iter().map(|k| &k[..]));
    let scan = if scanning { ",\"disk_scanning\":true" } else { "" };
    Some(format!("{{\"purged\":{purged},\"keys\":{}{scan}}}\n", keys.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CachePolicy;
    use bytes::Bytes;
    use weft_http::caching::CacheRules;

    fn store_with(keys: &[&str]) -> Mutex<Store> {
        let mut s = Store::new(1 << 20, 1 << 20, CachePolicy::Lru);
        for k in keys {
            let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n");
            let obj = crate::store::Object::build(head, weft_buf::Aggregate::new(), b"", 1, 1, &CacheRules::default());
            assert!(s.insert(k.as_bytes(), obj.expect("storable")));
        }
        Mutex::new(s)
    }

    #[test]
    fn purges_one_url_or_a_prefix() {
        let s = store_with(&[
            "http://a/x",
            "http://a/static/1",
            "http://a/static/2",
            "http://b:8080/static/1",
        ]);
        let purge = |line: &str| answer(line.as_bytes(), &s, None);
        assert_eq!(purge("POST /purge/http://A:80/x HTTP/1.1").unwrap(), "{\"purged\":1}\n");
        assert_eq!(
            purge("POST /purge/http://a/x HTTP/1.1").unwrap(),
            "{\"purged\":0}\n",
            "gone"
        );
        assert_eq!(
            purge("POST /purge-prefix/http://a/static/ HTTP/1.1").unwrap(),
            "{\"purged\":2,\"keys\":2}\n"
        );
        assert_eq!(
            purge("POST /purge/http://b:8080/static/1 HTTP/1.1").unwrap(),
            "{\"purged\":1}\n"
        );
        assert!(purge("POST /purge/https://a/x HTTP/1.1").unwrap().contains("error"));
        assert!(purge("POST /boost/a/on HTTP/1.1").is_none(), "not ours: 404");
    }
}
