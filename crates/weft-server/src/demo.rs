//! The built-in demo site served by `weft serve` without a directory, so a
//! newcomer sees something at once. The pages are compiled into the binary.

/// One page of the demo site.
pub struct DemoFile {
    /// Relative path ("" is the index).
    pub path: &'static str,
    /// Content-Type value.
    pub content_type: &'static str,
    /// The bytes.
    pub body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";

/// Every page.
pub const FILES: &[DemoFile] = &[
    DemoFile {
        path: "index.html",
        content_type: HTML,
        body: include_bytes!("../demo/index.html"),
    },
    DemoFile {
        path: "mechanisms.html",
        content_type: HTML,
        body: include_bytes!("../demo/mechanisms.html"),
    },
    DemoFile {
        path: "try.html",
        content_type: HTML,
        body: include_bytes!("../demo/try.html"),
    },
    DemoFile {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../demo/style.css"),
    },
];

/// The page for a normalized relative path (`""` is the index).
pub fn lookup(rel: &[u8]) -> Option<&'static DemoFile> {
    let rel = if rel.is_empty() { b"index.html".as_slice() } else { rel };
    FILES.iter().find(|f| f.path.as_bytes() == rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_pages() {
        assert_eq!(lookup(b"").unwrap().path, "index.html");
        assert!(lookup(b"style.css").is_some());
        assert!(lookup(b"nope").is_none());
        // Every link in the pages points at a page that exists.
        for f in FILES {
            let text = std::str::from_utf8(f.body).unwrap();
            for part in text.split("href=\"/").skip(1) {
                let target = &part[..part.find('"').unwrap()];
                assert!(
                    lookup(target.as_bytes()).is_some(),
                    "{} links to missing /{target}",
                    f.path
                );
            }
        }
    }
}
