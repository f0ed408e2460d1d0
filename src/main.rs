//! The `weft` binary: subcommands over the library crates.

#![forbid(unsafe_code)]
// The clap argument structs' doc comments are the `--help` text, which
// names `[load]` tables and `http://HOST[:PORT][/PATH]` forms that rustdoc
// would read as links; escaping them would put backslashes in the help.
#![allow(rustdoc::broken_intra_doc_links)]

mod args;
mod cli;
mod event_tuning;
mod front;
mod front_booster;
mod load;
mod log_flags;
mod man;
mod origin;
mod proxy;
mod proxy_http;
mod proxy_log;
mod proxy_uring;
mod reload;
mod serve;
mod serve_accelerator;
mod serve_cgi;
mod serve_flash;
mod serve_net;
mod serve_site;
mod service;
mod sim;
mod trace;
mod upstream;
mod wan;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let args = match cli::merge_config(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("weft: {}", e.0);
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors are
            // one line (clap's first) with status 2.
            if e.use_stderr() {
                let msg = e.to_string();
                let first = msg.lines().next().unwrap_or("invalid arguments");
                eprintln!("weft: {}", first.trim_start_matches("error: "));
                eprintln!("(see `weft --help`)");
                return ExitCode::from(2);
            }
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Proxy(args) => proxy::run(*args),
        Command::Front(args) => front::run(*args),
        Command::Backends => backends(),
        Command::Check(args) => check(args),
        Command::Load(args) => load::run(*args),
        Command::Origin(args) => origin::run(*args),
        Command::Sim(args) => sim::run(*args),
        Command::Trace(args) => trace::run(args),
        Command::Wan(args) => wan::run(*args),
        Command::Man(args) => man::run(args),
        Command::Reload(args) => reload::command(args),
    }
}

fn backends() -> ExitCode {
    println!("event backends (--event):");
    for (kind, r) in weft_io::features::backends() {
        match r {
            Ok(()) => println!("  {:<18} works", kind.name()),
            Err(e) => println!("  {:<18} unavailable: {e}", kind.name()),
        }
    }
    println!("kernel features:");
    for f in weft_io::features::kernel_features() {
        match &f.result {
            Ok(()) => println!("  {:<14} works         {}", f.name, f.used_for),
            Err(e) => println!("  {:<14} unavailable   {} ({e})", f.name, f.used_for),
        }
    }
    match weft_io::sys::raise_nofile_limit() {
        Ok(n) => println!("descriptor limit: {n}"),
        Err(e) => println!("descriptor limit: unknown ({e})"),
    }
    ExitCode::SUCCESS
}

fn check(args: cli::CheckArgs) -> ExitCode {
    let path = args.config.display().to_string();
    for section in cli::SECTIONS {
        let argv = vec![
            "weft".into(),
            (*section).into(),
            "--config".into(),
            args.config.clone().into_os_string(),
        ];
        match cli::merge_config(argv) {
            Ok(full) => {
                if let Err(e) = Cli::try_parse_from(full) {
                    let msg = e.to_string();
                    eprintln!(
                        "weft: {path}: [{section}]: {}",
                        msg.lines().next().unwrap_or("invalid").trim_start_matches("error: ")
                    );
                    return ExitCode::from(2);
                }
            }
            Err(e) => {
                eprintln!("weft: {}", e.0);
                return ExitCode::from(2);
            }
        }
    }
    println!("{path}: ok");
    ExitCode::SUCCESS
}
