//! Directory listings (`--autoindex`): a plain HTML table, names escaped for
//! HTML and percent-encoded in links. A cold path: it allocates freely.

use std::time::SystemTime;

/// One listed entry.
pub struct Entry {
    /// File name bytes.
    pub name: Vec<u8>,
    /// Is it a directory?
    pub is_dir: bool,
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: SystemTime,
}

fn escape_html(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            _ => out.push(b),
        }
    }
}

fn escape_href(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

/// Render the listing of directory `shown` (the decoded path, for the title).
/// Directories come first, then files, each sorted by name.
pub fn render(shown: &str, items: &mut [Entry], out: &mut Vec<u8>) {
    items.sort_by(|a, b| b.is_dir.cmp(&a.is_dir).then_with(|| a.name.cmp(&b.name)));
    out.extend_from_slice(b"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    escape_html(shown.as_bytes(), out);
    out.extend_from_slice(b"</title></head>\n<body>\n<h1>Index of ");
    escape_html(shown.as_bytes(), out);
    out.extend_from_slice(b"</h1>\n<table>\n<tr><th>name</th><th>size</th><th>modified</th></tr>\n");
    if shown != "/" {
        out.extend_from_slice(b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for e in items.iter() {
        out.extend_from_slice(b"<tr><td><a href=\"");
        escape_href(&e.name, out);
        if e.is_dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"\">");
        escape_html(&e.name, out);
        if e.is_dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"</a></td><td>");
        if e.is_dir {
            out.push(b'-');
        } else {
            weft_http::push_decimal(out, e.size);
        }
        out.extend_from_slice(b"</td><td>");
        out.extend_from_slice(&weft_http::fmt_http_date(e.mtime));
        out.extend_from_slice(b"</td></tr>\n");
    }
    out.extend_from_slice(b"</table>\n</body></html>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_orders() {
        let mut items = vec![
            Entry {
                name: b"b <odd>.txt".to_vec(),
                is_dir: false,
                size: 2,
                mtime: SystemTime::UNIX_EPOCH,
            },
            Entry {
                name: b"zdir".to_vec(),
                is_dir: true,
                size: 0,
                mtime: SystemTime::UNIX_EPOCH,
            },
        ];
        let mut out = Vec::new();
        render("/noindex/", &mut items, &mut out);
        let html = String::from_utf8(out).unwrap();
        assert!(
            html.contains("href=\"b%20%3Codd%3E.txt\">b &lt;odd&gt;.txt</a>"),
            "{html}"
        );
        assert!(
            html.find("zdir/").unwrap() < html.find("b &lt;odd").unwrap(),
            "directories first"
        );
        assert!(html.contains("href=\"../\""));
    }
}
