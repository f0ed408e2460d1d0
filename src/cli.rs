//! Command-line definitions and the `weft.toml` merge.
//!
//! Every long flag of a subcommand is also a key of that subcommand's table in
//! the config file. A file setting is validated by running it through the same
//! clap parser as the flag (`--key value`), so both accept exactly the same
//! values and report errors the same way; then the file's settings are placed
//! before the command line's, and the command line wins (`args_override_self`).

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// weft: a web server, caching proxy and cluster front-end built from twenty
/// years of web-server research, and the instruments that measure it.
#[derive(Parser, Debug)]
#[command(name = "weft", version, about, long_about = None, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve static files (or the built-in demo site when no DIR is given).
    Serve(Box<crate::serve::ServeArgs>),
    /// Caching forward and reverse HTTP proxy with kernel splicing (KeepCopy, CONNECT tunnels).
    Proxy(Box<crate::proxy::ProxyArgs>),
    /// Cluster front-end: places each request on a back-end by WRR, LB, LARD, LARD/R or
    /// bounded-load consistent hashing, and relays it over pooled connections.
    Front(Box<crate::front::FrontArgs>),
    /// Show which event backends and kernel features work on this machine.
    Backends,
    /// Validate a config file and exit (like `nginx -t`).
    Check(CheckArgs),
    /// Generate load: open or closed loop, idle connections, classic workloads (httperf-style).
    Load(Box<crate::load::LoadArgs>),
    /// The workload origin server: sizes, cacheability and think times per URL or header.
    Origin(Box<crate::origin::OriginArgs>),
    /// Trace-driven cluster simulator: WRR, LB, LARD, LARD/R... on a log or a synthetic trace.
    Sim(Box<crate::sim::SimArgs>),
    /// Trace tools: a log's coverage curve; a log cut to a data-set size and looped.
    Trace(crate::trace::TraceArgs),
    /// WAN emulator: run a command behind delay, loss and rate limits in network namespaces.
    Wan(Box<crate::wan::WanArgs>),
    /// Reload a running serve, proxy or front gracefully: SIGHUP to the pid in its --pid-file.
    Reload(crate::reload::ReloadArgs),
    /// Write the manual pages into DIR (for packaging).
    #[command(hide = true)]
    Man(crate::man::ManArgs),
}

/// `weft check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The config file to validate.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
}

/// Sections a config file may have.
pub const SECTIONS: &[&str] = &["serve", "proxy", "front", "load", "origin"];

/// Find `-c FILE` / `--config FILE` / `--config=FILE` after the subcommand name.
fn find_config(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(2);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            break;
        }
        if s == "-c" || s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    None
}

/// A one-line error with exit code 2.
pub struct UsageError(pub String);

/// Expand `argv` with the settings of `--config FILE` for the subcommand `sub`.
/// Returns the argv clap should parse.
pub fn merge_config(args: Vec<OsString>) -> Result<Vec<OsString>, UsageError> {
    let Some(sub) = args.get(1).and_then(|s| s.to_str()).map(str::to_string) else {
        return Ok(args);
    };
    if !SECTIONS.contains(&sub.as_str()) {
        return Ok(args);
    }
    let Some(path) = find_config(&args) else {
        return Ok(args);
    };
    let settings = weft_core::config::load_section(&path, &sub, SECTIONS).map_err(|e| UsageError(e.to_string()))?;
    let file = path.display().to_string();
    let cmd = Cli::command();
    let subcmd = cmd.find_subcommand(&sub).expect("listed sections are subcommands");
    let mut from_file: Vec<OsString> = Vec::new();
    let mut positional: Option<String> = None;
    for s in settings {
        let arg = subcmd
            .get_arguments()
            .find(|a| a.get_long() == Some(s.key.as_str()) || (a.is_positional() && a.get_id() == s.key.as_str()));
        let Some(arg) = arg else {
            let mut keys: Vec<String> = subcmd
                .get_arguments()
                .filter_map(|a| {
                    if a.is_positional() {
                        Some(a.get_id().to_string())
                    } else {
                        a.get_long()
                            .filter(|l| *l != "config" && *l != "help")
                            .map(str::to_string)
                    }
                })
                .collect();
            keys.sort();
            return Err(UsageError(format!(
                "{file}: key `{sub}.{}`: unknown key (known: {})",
                s.key,
                keys.join(", ")
            )));
        };
        if arg.get_long() == Some("config") {
            return Err(UsageError(format!(
                "{file}: key `{sub}.config`: a config file cannot include another"
            )));
        }
        // Validate with the flag's own parser.
        let probe: Vec<OsString> = if arg.is_positional() {
            vec!["weft".into(), sub.clone().into(), s.value.clone().into()]
        } else {
            vec![
                "weft".into(),
                sub.clone().into(),
                format!("--{}={}", s.key, s.value).into(),
            ]
        };
        if let Err(e) = Cli::try_parse_from(&probe) {
            let msg = e.to_string();
            let first = msg
                .lines()
                .next()
                .unwrap_or("invalid value")
                .trim_start_matches("error: ")
                .to_string();
            return Err(UsageError(format!("{file}: key `{sub}.{}`: {first}", s.key)));
        }
        if arg.is_positional() {
            positional = Some(s.value);
        } else {
            from_file.push(format!("--{}={}", s.key, s.value).into());
        }
    }
    // argv: weft SUB [<positional from file>] <file settings> <command line>.
    // The file's positional goes first: after a flag with an optional value
    // (`--autoindex`, `--quiet`) it would be taken for that value.
    let mut out: Vec<OsString> = args[..2].to_vec();
    if let Some(p) = positional {
        let cli_has_positional = Cli::try_parse_from(&args)
            .ok()
            .map(|c| match c.command {
                Command::Serve(ref s) => s.root.is_some(),
                Command::Load(ref l) => l.url.is_some(),
                _ => false,
            })
            .unwrap_or(false);
        if !cli_has_positional {
            out.push(p.into());
        }
    }
    out.extend(from_file);
    out.extend(args[2..].iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The configuration `weft ARGS...` would run with, as Debug text.
    fn config_of(args: &[&str]) -> String {
        let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.command {
            Command::Proxy(p) => format!("{:?}", p.to_config()),
            Command::Serve(s) => format!("{:?}", s.to_config()),
            Command::Origin(o) => format!("{:?}", o.to_config()),
            _ => unreachable!(),
        }
    }

    /// Check every plain default of a flag table (`| \`--flag ...\` |
    /// default | ...`) in `doc` against `weft CMD`: `weft CMD --flag DEFAULT`
    /// must configure exactly what `weft CMD` does. Descriptive defaults
    /// ("(none)", "CPUs", "off"...) are skipped. Returns the flags checked.
    fn check_documented_defaults(doc: &str, cmd: &str) -> Vec<String> {
        let base = config_of(&["weft", cmd]);
        let mut checked = Vec::new();
        for line in doc.lines().filter(|l| l.starts_with("| `--")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let flag = cells[0].trim_start_matches("| `").split(['`', ' ']).next().unwrap();
            let default = cells[1].trim().trim_matches('`');
            let descriptive = default.is_empty()
                || default.contains(' ')
                || default.starts_with('(')
                || ["off", "none", "unlimited", "CPUs", "hostname:port"].contains(&default);
            if descriptive {
                continue;
            }
            let cfg = config_of(&["weft", cmd, flag, default]);
            assert_eq!(cfg, base, "the docs say `weft {cmd} {flag}` defaults to {default}");
            checked.push(flag.to_string());
        }
        checked
    }

    /// The defaults the user guides state are the ones the code uses.
    #[test]
    fn documented_defaults_are_the_real_ones() {
        let proxy = check_documented_defaults(include_str!("../docs/proxy.md"), "proxy");
        let serve = check_documented_defaults(include_str!("../docs/serve.md"), "serve");
        let load_md = include_str!("../docs/load.md");
        let origin_section = &load_md[load_md.find("## `weft origin`").unwrap()..];
        let origin = check_documented_defaults(origin_section, "origin");
        assert!(serve.len() >= 10 && origin.len() >= 5, "{serve:?} {origin:?}");
        let checked = proxy;
        for f in [
            "--rcv-lowat",
            "--notsent-lowat",
            "--first-read",
            "--cache-dir-size",
            "--pipe-size",
        ] {
            assert!(checked.iter().any(|c| c == f), "{f} not checked: {checked:?}");
        }
    }

    mod tempdir {
        pub struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "weft-cli-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    fn argv(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// `merge_config` of `weft serve CONFIG_FLAG FILE FLAGS...`, where FILE
    /// (removed after) holds `toml`.
    fn merge_serve(toml: &str, config_flag: &str, flags: &[&str]) -> Result<Vec<OsString>, UsageError> {
        let d = tempdir::Dir::new();
        let p = d.path.join("weft.toml");
        std::fs::write(&p, toml).unwrap();
        let mut args = argv(&["weft", "serve", config_flag, p.to_str().unwrap()]);
        args.extend(argv(flags));
        merge_config(args)
    }

    /// The `weft serve` arguments of a config file holding `toml`, then `flags`.
    fn serve_args(toml: &str, flags: &[&str]) -> crate::serve::ServeArgs {
        let args = merge_serve(toml, "-c", flags).ok().unwrap();
        let Command::Serve(s) = Cli::try_parse_from(args).unwrap().command else {
            panic!()
        };
        *s
    }

    /// The error of a config file holding `toml` for `weft serve`, checked to be one line.
    fn serve_file_error(toml: &str, config_flag: &str) -> String {
        let e = merge_serve(toml, config_flag, &[]).err().unwrap().0;
        assert!(!e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn file_settings_apply_and_flags_win() {
        let toml = "[serve]\nevent = \"poll\"\nworkers = 3\nautoindex = true\nroot = \"/tmp\"\n";
        let c = serve_args(toml, &["--workers", "1"]).to_config();
        assert_eq!(c.event, weft_io::BackendKind::Poll);
        assert_eq!(c.workers, 1, "the command line overrides the file");
        assert!(c.autoindex);
        assert_eq!(c.root.as_deref(), Some(std::path::Path::new("/tmp")));
    }

    #[test]
    fn booster_addresses_come_from_the_file_too() {
        let s = serve_args("[serve]\nbooster-from = \"127.0.0.1,10.0.0.2\"\n", &[]);
        assert_eq!(s.to_config().booster_from.len(), 2);
        let e = serve_file_error("[serve]\nbooster-from = \"nowhere\"\n", "-c");
        assert!(e.contains("key `serve.booster-from`"), "{e}");
    }

    #[test]
    fn unknown_key_and_bad_value_name_the_key() {
        let cases: [(&str, &[&str]); 2] = [
            ("[serve]\nwrokers = 3\n", &["key `serve.wrokers`: unknown key"]),
            ("[serve]\nevent = \"kqueue\"\n", &["key `serve.event`", "kqueue"]),
        ];
        for (toml, wants) in cases {
            let e = serve_file_error(toml, "--config");
            for want in wants {
                assert!(e.contains(want), "{e}");
            }
        }
    }
}
