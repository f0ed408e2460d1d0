//! Content-Type from the file extension: a built-in table of the common web
//! types (text types carry `charset=utf-8`), `application/octet-stream` for
//! anything else.

/// Extension (lower case) → media type, sorted by extension for binary search.
const TYPES: &[(&str, &str)] = &[
    ("7z", "application/x-7z-compressed"),
    ("aac", "audio/aac"),
    ("apng", "image/apng"),
    ("avif", "image/avif"),
    ("bin", "application/octet-stream"),
    ("bmp", "image/bmp"),
    ("bz2", "application/x-bzip2"),
    ("css", "text/css; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("doc", "application/msword"),
    ("epub", "application/epub+zip"),
    ("flac", "audio/flac"),
    ("gif", "image/gif"),
    ("gz", "application/gzip"),
    ("htm", "text/html; charset=utf-8"),
    ("html", "text/html; charset=utf-8"),
    ("ico", "image/x-icon"),
    ("ics", "text/calendar; charset=utf-8"),
    ("jpeg", "image/jpeg"),
    ("jpg", "image/jpeg"),
    ("js", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("jsonld", "application/ld+json"),
    ("m4a", "audio/mp4"),
    ("map", "application/json"),
    ("md", "text/markdown; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("mp3", "audio/mpeg"),
    ("mp4", "video/mp4"),
    ("mpeg", "video/mpeg"),
    ("oga", "audio/ogg"),
    ("ogg", "audio/ogg"),
    ("ogv", "video/ogg"),
    ("opus", "audio/opus"),
    ("otf", "font/otf"),
    ("pdf", "application/pdf"),
    ("png", "image/png"),
    ("rss", "application/rss+xml"),
    ("rtf", "application/rtf"),
    ("svg", "image/svg+xml"),
    ("tar", "application/x-tar"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("toml", "application/toml"),
    ("ttf", "font/ttf"),
    ("txt", "text/plain; charset=utf-8"),
    ("wasm", "application/wasm"),
    ("wav", "audio/wav"),
    ("weba", "audio/webm"),
    ("webm", "video/webm"),
    ("webmanifest", "application/manifest+json"),
    ("webp", "image/webp"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("xhtml", "application/xhtml+xml"),
    ("xml", "application/xml"),
    ("xz", "application/x-xz"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("zip", "application/zip"),
    ("zst", "application/zstd"),
];

/// The media type for a path, by its extension.
pub fn content_type(path: &[u8]) -> &'static str {
    const DEFAULT: &str = "application/octet-stream";
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return DEFAULT;
    };
    let ext = &name[dot + 1..];
    if ext.is_empty() || ext.len() > 12 {
        return DEFAULT;
    }
    let mut lower = [0u8; 12];
    for (o, b) in lower.iter_mut().zip(ext) {
        *o = b.to_ascii_lowercase();
    }
    let ext = &lower[..ext.len()];
    TYPES
        .binary_search_by(|(e, _)| e.as_bytes().cmp(ext))
        .map(|i| TYPES[i].1)
        .unwrap_or(DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted() {
        assert!(TYPES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn lookups() {
        assert_eq!(content_type(b"index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"a/B.PNG"), "image/png");
        assert_eq!(content_type(b"x.tar.gz"), "application/gzip");
        assert_eq!(content_type(b"noext"), "application/octet-stream");
        assert_eq!(content_type(b"dir.d/noext"), "application/octet-stream");
        assert_eq!(content_type(b".hidden"), "application/octet-stream");
        assert_eq!(content_type(b"x.unknownextension"), "application/octet-stream");
    }
}
