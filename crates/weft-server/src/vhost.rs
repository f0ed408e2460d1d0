//! Virtual hosts: `[[serve.site]]` tables (or `--site`), each with its names,
//! its document root and its own options, and the choice of a site for a
//! request by the authority of an absolute-form target, else by `Host`
//! (RFC 9112 §3.2.2 and §3.2).
//!
//! ```toml
//! [[serve.site]]
//! names = ["example.com", "www.example.com"]
//! root = "/srv/example"
//! cache-control = "max-age=300"
//!
//! [[serve.site]]
//! names = ["*.example.org"]
//! root = "/srv/org"
//! autoindex = true
//! index = "index.htm"
//! ```
//!
//! A site's pathnames reach the per-worker file cache with a three-byte
//! prefix (NUL and the site number, which no request path can contain), so
//! one cache, one helper pool and one object cache serve every site and each
//! site opens below its own root. Site 0, with no prefix, is the top-level
//! root (`weft serve DIR`); a request for no known name goes to the site
//! marked `default = true`, else to the top-level root, else to the first site.
//!
//! Choosing costs one hash lookup of the lower-cased host for exact names
//! (no allocation: the host is folded into a stack buffer), then one lookup
//! per dot for wildcards, and nothing at all without sites.

use std::collections::HashMap;
use std::path::PathBuf;

/// The most sites (the prefix holds the number in two bytes).
pub const MAX_SITES: usize = 4096;
/// The longest host name (RFC 1035's 253, with room for a trailing dot).
const MAX_NAME: usize = 255;

/// One `[[serve.site]]` table, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteSpec {
    /// Exact names (`example.com`) and wildcards (`*.example.com`), lower case.
    pub names: Vec<String>,
    /// Document root.
    pub root: PathBuf,
    /// The file a directory is answered with [default: index.html].
    pub index: String,
    /// List directories without an index (`None`: the server's `--autoindex`).
    pub autoindex: Option<bool>,
    /// A `Cache-Control` value added to this site's file responses.
    pub cache_control: Option<String>,
    /// Answer requests for names no site has.
    pub default: bool,
}

impl SiteSpec {
    /// No name, no root, the defaults.
    fn empty() -> SiteSpec {
        SiteSpec {
            names: Vec::new(),
            root: PathBuf::new(),
            index: "index.html".into(),
            autoindex: None,
            cache_control: None,
            default: false,
        }
    }
}

const KEYS: &str = "names, root, index, autoindex, cache-control, default";

/// Parse a site as the config file hands it over: an inline TOML table
/// (`{ names = ["a.example"], root = "/srv/a" }`), or the short command-line
/// form `NAME[,NAME...]=ROOT`. Errors name the key.
pub fn parse_site(s: &str) -> Result<SiteSpec, String> {
    let s = s.trim();
    if !s.starts_with('{') {
        let (names, root) = s
            .split_once('=')
            .ok_or_else(|| format!("expected NAME[,NAME...]=ROOT or a table, not `{s}`"))?;
        let mut spec = SiteSpec::empty();
        for n in names.split(',') {
            spec.names.push(site_name(n)?);
        }
        set_root(&mut spec, root)?;
        return Ok(spec);
    }
    let doc: toml::Table = format!("site = {s}")
        .parse()
        .map_err(|e: toml::de::Error| e.message().lines().next().unwrap_or("invalid table").to_string())?;
    let Some(toml::Value::Table(t)) = doc.get("site") else {
        return Err("expected a table".into());
    };
    site_from_table(t)
}

/// A site from its TOML table.
pub fn site_from_table(t: &toml::Table) -> Result<SiteSpec, String> {
    let mut spec = SiteSpec::empty();
    let text = |k: &str, v: &toml::Value| -> Result<String, String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("key `{k}`: expected a string"))
    };
    let flag = |k: &str, v: &toml::Value| -> Result<bool, String> {
        v.as_bool().ok_or_else(|| format!("key `{k}`: expected true or false"))
    };
    for (k, v) in t {
        match k.as_str() {
            "names" | "name" => {
                let items: Vec<&toml::Value> = match v {
                    toml::Value::Array(a) => a.iter().collect(),
                    v => vec![v],
                };
                for n in items {
                    spec.names
                        .push(site_name(&text(k, n)?).map_err(|e| format!("key `{k}`: {e}"))?);
                }
            }
            "root" => set_root(&mut spec, &text(k, v)?).map_err(|e| format!("key `root`: {e}"))?,
            "index" => {
                let i = text(k, v)?;
                if i.is_empty() || i.contains('/') || i.contains('\0') || i == "." || i == ".." || i.len() > 255 {
                    return Err(format!("key `index`: `{i}` is not a file name"));
                }
                spec.index = i;
            }
            "autoindex" => spec.autoindex = Some(flag(k, v)?),
            "default" => spec.default = flag(k, v)?,
            "cache-control" => {
                let c = text(k, v)?;
                if c.is_empty() || c.len() > 1024 || c.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
                    return Err(format!(
                        "key `cache-control`: `{}` is not a field value",
                        c.escape_debug()
                    ));
                }
                spec.cache_control = Some(c);
            }
            other => return Err(format!("key `{other}`: unknown key (known: {KEYS})")),
        }
    }
    if spec.names.is_empty() && !spec.default {
        return Err("key `names`: a site needs at least one name (or `default = true`)".into());
    }
    if spec.root.as_os_str().is_empty() {
        return Err("key `root`: a site needs a root".into());
    }
    Ok(spec)
}

fn set_root(spec: &mut SiteSpec, root: &str) -> Result<(), String> {
    if root.is_empty() || root.contains('\0') {
        return Err(format!("`{}` is not a directory path", root.escape_debug()));
    }
    spec.root = PathBuf::from(root);
    Ok(())
}

/// A site name, checked and lower-cased: a host name, or `*.` and one.
fn site_name(n: &str) -> Result<String, String> {
    let n = n.trim().to_ascii_lowercase();
    let host = n.strip_prefix("*.").unwrap_or(&n);
    let ok = !host.is_empty()
        && host.len() <= MAX_NAME
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if !ok {
        return Err(format!("`{}` is not a host name or `*.` wildcard", n.escape_debug()));
    }
    Ok(n)
}

/// A site as the workers use it.
#[derive(Debug)]
pub struct Site {
    /// Prepended to the site's pathnames in the file cache (empty: site 0).
    pub prefix: [u8; 3],
    /// Whether `prefix` is used.
    pub prefixed: bool,
    /// The directory index file name.
    pub index: Box<[u8]>,
    /// List directories without an index.
    pub autoindex: bool,
    /// `Cache-Control: VALUE\r\n`, ready to append to a response head.
    pub cache_control: Option<Box<[u8]>>,
}

/// Every site and the name tables that choose one.
#[derive(Debug)]
pub struct Sites {
    /// Site 0 is the top-level root; site `i` is `specs[i - 1]`.
    sites: Vec<Site>,
    roots: Vec<PathBuf>,
    exact: HashMap<Box<[u8]>, u16>,
    /// Wildcards by the suffix after `*.` (`example.com` for `*.example.com`).
    wild: HashMap<Box<[u8]>, u16>,
    default: u16,
}

impl Sites {
    /// The sites of `specs` beside the top-level root (`has_root`) with the
    /// server's `autoindex`. A name given twice, or two defaults, is an error.
    pub fn new(specs: &[SiteSpec], has_root: bool, autoindex: bool) -> Result<Sites, String> {
        if specs.len() >= MAX_SITES {
            return Err(format!("at most {} sites", MAX_SITES - 1));
        }
        let mut sites = vec![Site {
            prefix: [0; 3],
            prefixed: false,
            index: (*b"index.html").into(),
            autoindex,
            cache_control: None,
        }];
        let mut roots = Vec::new();
        let (mut exact, mut wild) = (HashMap::new(), HashMap::new());
        let mut default = None;
        for (i, spec) in specs.iter().enumerate() {
            let n = (i + 1) as u16;
            for name in &spec.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(suffix) => (&mut wild, suffix),
                    None => (&mut exact, name.as_str()),
                };
                if map.insert(key.as_bytes().into(), n).is_some() {
                    return Err(format!("site name `{name}` is given twice"));
                }
            }
            if spec.default {
                if default.is_some() {
                    return Err("two sites have `default = true`".into());
                }
                default = Some(n);
            }
            let [hi, lo] = n.to_be_bytes();
            sites.push(Site {
                prefix: [0, hi, lo],
                prefixed: true,
                index: spec.index.as_bytes().into(),
                autoindex: spec.autoindex.unwrap_or(autoindex),
                cache_control: spec
                    .cache_control
                    .as_ref()
                    .map(|c| format!("Cache-Control: {c}\r\n").into_bytes().into()),
            });
            roots.push(spec.root.clone());
        }
        let default = default.unwrap_or(if has_root || specs.is_empty() { 0 } else { 1 });
        Ok(Sites {
            sites,
            roots,
            exact,
            wild,
            default,
        })
    }

    /// The roots of sites 1.., in order.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Site 0 (the top-level root, no prefix).
    pub fn top(&self) -> &Site {
        &self.sites[0]
    }

    /// The site for a request: `authority` (an absolute-form target's, else
    /// the Host field; `host[:port]`) by exact name, then by wildcard (the
    /// longest suffix first), else the default site.
    pub fn choose(&self, authority: Option<&[u8]>) -> &Site {
        let n = authority.and_then(|a| self.find(a)).unwrap_or(self.default);
        &self.sites[n as usize]
    }

    fn find(&self, authority: &[u8]) -> Option<u16> {
        let host = host_part(authority);
        let host = host.strip_suffix(b".").unwrap_or(host);
        if host.is_empty() || host.len() > MAX_NAME {
            return None;
        }
        let mut buf = [0u8; MAX_NAME];
        let low = &mut buf[..host.len()];
        low.copy_from_slice(host);
        low.make_ascii_lowercase();
        if let Some(&n) = self.exact.get(&*low) {
            return Some(n);
        }
        if self.wild.is_empty() {
            return None;
        }
        let mut rest: &[u8] = low;
        while let Some(dot) = rest.iter().position(|&b| b == b'.') {
            rest = &rest[dot + 1..];
            if let Some(&n) = self.wild.get(rest) {
                return Some(n);
            }
        }
        None
    }
}

/// `host` of `host[:port]` (an IPv6 literal keeps its brackets).
fn host_part(a: &[u8]) -> &[u8] {
    if a.first() == Some(&b'[') {
        return match a.iter().position(|&b| b == b']') {
            Some(i) => &a[..=i],
            None => a,
        };
    }
    match a.iter().rposition(|&b| b == b':') {
        Some(i) => &a[..i],
        None => a,
    }
}

/// The site of a request (None without sites): an absolute-form target's
/// authority wins over Host.
pub(crate) fn site_of<'s>(
    sites: Option<&'s Sites>,
    head: &weft_http::RequestHead,
    data: &[u8],
    target: &[u8],
) -> Option<&'s Site> {
    let sites = sites?;
    let authority = match head.is_absolute_form() {
        true => target_authority(target),
        false => head.host(data),
    };
    Some(sites.choose(authority))
}

/// Put the site's prefix before the resolved path `rel`; returns the prefix
/// length, the index file name, whether directories are listed, and the
/// Cache-Control field to add.
pub(crate) fn enter<'s>(
    site: Option<&'s Site>,
    rel: &mut Vec<u8>,
    autoindex: bool,
) -> (usize, &'s [u8], bool, Option<&'s [u8]>) {
    match site {
        Some(site) if site.prefixed => {
            rel.splice(0..0, site.prefix);
            (3, &site.index, site.autoindex, site.cache_control.as_deref())
        }
        Some(site) => (0, &site.index, site.autoindex, site.cache_control.as_deref()),
        None => (0, b"index.html", autoindex, None),
    }
}

/// The authority of an absolute-form target (`http://host:port/path`).
pub fn target_authority(target: &[u8]) -> Option<&[u8]> {
    let start = target.windows(3).position(|w| w == b"://")? + 3;
    let rest = &target[start..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    let auth = &rest[..end];
    // userinfo is not part of the host (and RFC 9110 forbids it in http URIs).
    Some(match auth.iter().rposition(|&b| b == b'@') {
        Some(i) => &auth[i + 1..],
        None => auth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(names: &[&str], root: &str) -> SiteSpec {
        let mut s = parse_site(&format!("{}={root}", names.join(","))).unwrap();
        s.default = false;
        s
    }

    #[test]
    fn exact_then_wildcard_then_default() {
        let sites = Sites::new(
            &[
                spec(&["a.example", "www.a.example"], "/a"),
                spec(&["*.b.example"], "/b"),
                spec(&["*.x.b.example"], "/xb"),
            ],
            true,
            false,
        )
        .unwrap();
        let pick = |h: &str| sites.choose(Some(h.as_bytes())).prefix[2];
        assert_eq!(pick("a.example"), 1);
        assert_eq!(pick("WWW.A.Example:8080"), 1);
        assert_eq!(pick("a.example."), 1);
        assert_eq!(pick("c.b.example"), 2);
        assert_eq!(pick("d.c.b.example"), 2);
        assert_eq!(pick("y.x.b.example"), 3, "the longest wildcard wins");
        assert_eq!(pick("b.example"), 0, "a wildcard does not match its bare suffix");
        assert_eq!(pick("other"), 0);
        assert_eq!(sites.choose(None).prefix[2], 0);
        assert!(!sites.choose(Some(b"other")).prefixed);
    }

    #[test]
    fn default_site_without_top_root() {
        let sites = Sites::new(&[spec(&["a.example"], "/a"), spec(&["b.example"], "/b")], false, false).unwrap();
        assert_eq!(sites.choose(Some(b"zzz")).prefix[2], 1, "the first site");
        let mut b = spec(&["b.example"], "/b");
        b.default = true;
        let sites = Sites::new(&[spec(&["a.example"], "/a"), b], true, false).unwrap();
        assert_eq!(sites.choose(Some(b"zzz")).prefix[2], 2, "the marked one");
    }

    #[test]
    fn tables_and_errors_name_the_key() {
        let s = parse_site(r#"{ names = ["A.example", "*.b.example"], root = "/srv/a", autoindex = true, index = "i.htm", cache-control = "max-age=60" }"#).unwrap();
        assert_eq!(s.names, ["a.example", "*.b.example"]);
        assert_eq!(s.index, "i.htm");
        assert_eq!(s.autoindex, Some(true));
        let e = parse_site(r#"{ names = ["a"], root = "/x", autoindx = true }"#).unwrap_err();
        assert!(e.starts_with("key `autoindx`: unknown key"), "{e}");
        let e = parse_site(r#"{ names = ["a b"], root = "/x" }"#).unwrap_err();
        assert!(e.starts_with("key `names`"), "{e}");
        let e = parse_site(r#"{ names = ["a"] }"#).unwrap_err();
        assert!(e.starts_with("key `root`"), "{e}");
        let e = parse_site(r#"{ names = ["a"], root = "/x", index = "../i" }"#).unwrap_err();
        assert!(e.starts_with("key `index`"), "{e}");
        assert!(parse_site("*.*.a=/x").is_err());
        assert!(parse_site("a=").is_err());
        let dup = Sites::new(&[spec(&["a"], "/a"), spec(&["A"], "/b")], true, false).unwrap_err();
        assert!(dup.contains("`a`"), "{dup}");
    }

    #[test]
    fn absolute_form_authority() {
        assert_eq!(
            target_authority(b"http://u@h.example:81/p?q"),
            Some(&b"h.example:81"[..])
        );
        assert_eq!(target_authority(b"http://h.example"), Some(&b"h.example"[..]));
        assert_eq!(host_part(b"[::1]:80"), b"[::1]");
    }
}
