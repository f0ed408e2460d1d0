//! `weft.toml`: one table per subcommand, keys spelled like the long flags.
//!
//! ```toml
//! [serve]
//! listen = "127.0.0.1:8080"
//! event = "epoll-et"
//! workers = 2
//! autoindex = true
//! ```
//!
//! This module turns a section into `(key, value)` pairs of strings, in file
//! order; the command line then validates each pair with the very parser its
//! flag uses, so a flag and a config key can never disagree about what is valid.
//! Unknown sections and non-scalar values are rejected here, naming the key.

use std::fmt;
use std::path::Path;

/// A config problem, printed as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// `section.key`, when the problem is a key.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            // A quoted TOML key may hold any character, a newline included:
            // escaped, the message stays one line.
            Some(k) => write!(f, "{}: key `{}`: {}", self.file, k.escape_debug(), self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A setting from the file: the key as written and its value as flag text.
/// Booleans become "true"/"false"; arrays become one entry per element (for
/// repeatable flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Key, as in the file (e.g. `access-log`).
    pub key: String,
    /// Value as the flag would be written.
    pub value: String,
}

/// Parse `text` (the contents of `file`) and return the settings of `section`.
/// `known_sections` lists every section weft understands: any other is an error,
/// so a typo in a section name does not silently drop a whole block of settings.
pub fn section_settings(
    file: &str,
    text: &str,
    section: &str,
    known_sections: &[&str],
) -> Result<Vec<Setting>, ConfigError> {
    let err = |key: Option<String>, message: String| ConfigError {
        file: file.to_string(),
        key,
        message,
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        // toml's messages span several lines with a caret diagram; keep the first.
        let first = e.message().lines().next().unwrap_or("invalid TOML").to_string();
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        err(None, format!("{first}{at}"))
    })?;
    for (name, value) in &table {
        if !known_sections.contains(&name.as_str()) {
            return Err(err(
                Some(name.clone()),
                format!("unknown section (expected one of: {})", known_sections.join(", ")),
            ));
        }
        if !value.is_table() {
            return Err(err(
                Some(name.clone()),
                format!(
                    "settings belong in a [{}]-style table, e.g. [serve]",
                    name.escape_debug()
                ),
            ));
        }
    }
    let Some(toml::Value::Table(t)) = table.get(section) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (key, value) in t {
        let full = format!("{section}.{key}");
        if key.is_empty() {
            // TOML allows `'' = 1`; no flag is named by nothing.
            return Err(err(Some(full), "a key with an empty name".to_string()));
        }
        let mut push = |v: &toml::Value| -> Result<(), ConfigError> {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                // An array of tables with `addr` and an optional `weight`
                // (`[[front.backend]]`): the flag's `ADDR=WEIGHT` form.
                toml::Value::Table(t) if t.get("addr").is_some_and(|a| a.is_str()) && t.len() <= 2 => {
                    let addr = t["addr"].as_str().unwrap_or_default();
                    match t.get("weight") {
                        Some(toml::Value::Integer(w)) => format!("{addr}={w}"),
                        None if t.len() == 1 => addr.to_string(),
                        _ => {
                            return Err(err(
                                Some(full.clone()),
                                "expected `addr` and an integer `weight`".into(),
                            ))
                        }
                    }
                }
                // Any other table (`[[serve.site]]`): inline TOML text, which
                // the flag's parser reads back.
                toml::Value::Table(t) if !t.values().any(|v| v.is_table()) => {
                    let fields: Vec<String> = t
                        .iter()
                        .map(|(k, v)| format!("{} = {v}", toml::Value::String(k.clone())))
                        .collect();
                    format!("{{ {} }}", fields.join(", "))
                }
                _ => {
                    return Err(err(
                        Some(full.clone()),
                        "expected a string, number or boolean".to_string(),
                    ))
                }
            };
            out.push(Setting {
                key: key.clone(),
                value: s,
            });
            Ok(())
        };
        match value {
            toml::Value::Array(items) => {
                for v in items {
                    push(v)?;
                }
            }
            toml::Value::Table(_) => return Err(err(Some(full), "nested tables are not allowed here".to_string())),
            v => push(v)?,
        }
    }
    Ok(out)
}

/// Read a config file and return the settings of `section`.
pub fn load_section(path: &Path, section: &str, known_sections: &[&str]) -> Result<Vec<Setting>, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        key: None,
        message: format!("cannot read: {e}"),
    })?;
    section_settings(&file, &text, section, known_sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["serve", "proxy"];

    #[test]
    fn reads_scalars_in_order() {
        let s = section_settings(
            "w.toml",
            "[serve]\nlisten = \"127.0.0.1:0\"\nworkers = 2\nautoindex = true\n",
            "serve",
            KNOWN,
        )
        .unwrap();
        let kv: Vec<_> = s.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
        assert_eq!(
            kv,
            vec![("listen", "127.0.0.1:0"), ("workers", "2"), ("autoindex", "true")]
        );
    }

    #[test]
    fn unknown_section_names_the_key() {
        let e = section_settings("w.toml", "[serv]\nx = 1\n", "serve", KNOWN).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("serv"));
        assert!(e.to_string().starts_with("w.toml: key `serv`: unknown section"));
    }

    /// Found by a long run of the `config_file` fuzz target: TOML allows an
    /// empty quoted key, which named no flag.
    #[test]
    fn an_empty_key_is_an_error_naming_its_section() {
        for text in ["[proxy]\n'' = ''\n", "proxy.\"\" = 1\n"] {
            let e = section_settings("w.toml", text, "proxy", KNOWN).unwrap_err();
            assert_eq!(e.key.as_deref(), Some("proxy."), "{text}");
            assert!(e.to_string().contains("a key with an empty name"), "{e}");
        }
    }

    /// Found by the `config_file` fuzz target: a quoted key with an escaped
    /// newline made a two-line message.
    #[test]
    fn a_key_with_a_newline_is_one_line() {
        for text in [
            "\"}\\n|\".Q.A=9\n",
            "\"a\\nb\" = 1\n",
            "[serve]\n\"a\\nb\" = {x = {y = 1}}\n",
        ] {
            let e = section_settings("w.toml", text, "serve", KNOWN).unwrap_err();
            let s = e.to_string();
            assert!(!s.contains('\n') && s.starts_with("w.toml: key `"), "{s}");
            assert!(s.contains("\\n"), "{s}");
        }
    }

    #[test]
    fn syntax_error_is_one_line_with_line_number() {
        let e = section_settings("w.toml", "[serve]\nlisten = \n", "serve", KNOWN).unwrap_err();
        let s = e.to_string();
        assert!(!s.contains('\n'), "{s}");
        assert!(s.contains("line 2"), "{s}");
    }

    #[test]
    fn arrays_repeat_and_tables_are_refused() {
        let s = section_settings(
            "w.toml",
            "[proxy]\nallow = [\"127.0.0.0/8\", \"::1/128\"]\n",
            "proxy",
            KNOWN,
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        let e = section_settings("w.toml", "[serve.x]\na=1\n", "serve", KNOWN).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("serve.x"));
    }

    #[test]
    fn arrays_of_address_tables_become_addr_weight_values() {
        let text = "[proxy]\n[[proxy.backend]]\naddr = \"127.0.0.1:1\"\nweight = 3\n[[proxy.backend]]\naddr = \"127.0.0.1:2\"\n";
        let s = section_settings("w.toml", text, "proxy", KNOWN).unwrap();
        let values: Vec<&str> = s.iter().map(|x| x.value.as_str()).collect();
        assert_eq!(values, ["127.0.0.1:1=3", "127.0.0.1:2"]);
        let bad = "[proxy]\n[[proxy.backend]]\naddr = \"a\"\nport = 3\n";
        assert!(section_settings("w.toml", bad, "proxy", KNOWN).is_err());
    }

    #[test]
    fn top_level_scalars_are_refused() {
        let e = section_settings("w.toml", "workers = 2\n", "serve", &["workers"]).unwrap_err();
        assert!(e.message.contains("table"));
    }
}
