//! `weft man DIR` (hidden): write the manual pages, generated from the same
//! clap definitions as `--help` — `weft.1` and one `weft-SUBCOMMAND.1` per
//! subcommand — for packaging (`scripts/package-deb`).

use clap::{Args, CommandFactory};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `weft man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub fn run(args: ManArgs) -> ExitCode {
    match write_pages(&args.dir) {
        Ok(n) => {
            println!("{n} manual pages in {}", args.dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weft: man: {}: {e}", args.dir.display());
            ExitCode::FAILURE
        }
    }
}

fn write_pages(dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let top = crate::cli::Cli::command().version(env!("CARGO_PKG_VERSION"));
    let mut n = 0;
    let mut page = |cmd: clap::Command, name: &str| -> std::io::Result<()> {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        std::fs::write(dir.join(format!("{name}.1")), out)?;
        n += 1;
        Ok(())
    };
    for sub in top
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("weft-{}", sub.get_name());
        let cmd = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("weft {}", sub.get_name()))
            .version(env!("CARGO_PKG_VERSION"));
        page(cmd, &name)?;
    }
    page(top, "weft")?;
    Ok(n)
}
