//! `weft serve`'s CGI and FastCGI flags (issue 24), flattened into
//! [`crate::serve::ServeArgs`] and turned into a `weft_server::cgi::CgiConfig`.

use crate::args::{duration as parse_duration, size as parse_size};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weft_server::cgi::{Address, CgiConfig, Handler, Route};

/// How `--cgi` programs are run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum CgiMode {
    /// A supervised pool of persistent FastCGI processes.
    #[default]
    Fastcgi,
    /// CGI/1.1: a process per request.
    Cgi1,
}

/// How FastCGI record payloads reach the client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum CgiSend {
    /// Splice every payload of at least 4 KiB, from TCP and Unix sockets and CGI/1.1 pipes
    /// alike (the same as `splice` today; smaller records are read and written).
    #[default]
    Auto,
    /// splice(2) socket → pipe → socket: no byte of the body enters weft.
    Splice,
    /// Read into weft and write (for comparison).
    Copy,
}

/// `PREFIX=VALUE`.
fn split_route(s: &str) -> Result<(String, String), String> {
    let (p, v) = s.split_once('=').ok_or_else(|| format!("`{s}` is not PREFIX=VALUE"))?;
    if !p.starts_with('/') || p.contains(['?', '#', ' ']) {
        return Err(format!("prefix `{p}` must be a URL path starting with /"));
    }
    if v.is_empty() {
        return Err(format!("nothing after `{p}=`"));
    }
    Ok((p.to_string(), v.to_string()))
}

/// `--fastcgi PREFIX=ADDR|unix:PATH`.
fn parse_fastcgi(s: &str) -> Result<(String, Address), String> {
    let (p, v) = split_route(s)?;
    let a = match v.strip_prefix("unix:") {
        Some(path) if !path.is_empty() && path.len() < 108 => Address::Unix(path.to_string()),
        Some(_) => return Err(format!("`{v}`: a Unix socket path is 1-107 bytes")),
        None => Address::Tcp(v.parse().map_err(|_| format!("`{v}` is not IP:PORT or unix:PATH"))?),
    };
    Ok((p, a))
}

/// `--cgi PREFIX=PROGRAM`: the program must exist.
fn parse_cgi(s: &str) -> Result<(String, PathBuf), String> {
    let (p, v) = split_route(s)?;
    let path = PathBuf::from(&v);
    if !path.is_file() {
        return Err(format!("CGI program `{v}` is not a file"));
    }
    let path = path.canonicalize().map_err(|e| format!("CGI program `{v}`: {e}"))?;
    Ok((p, path))
}

fn parse_workers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("invalid process count `{s}` (expected 1..1024)")),
    }
}

/// CGI and FastCGI.
#[derive(Args, Debug, Default)]
pub struct CgiArgs {
    /// Pass requests under PREFIX to a FastCGI application (php-fpm, ...) at ADDR (IP:PORT) or
    /// unix:PATH, over persistent connections; repeatable.
    #[arg(long = "fastcgi", value_name = "PREFIX=ADDR|unix:PATH", value_parser = parse_fastcgi)]
    pub fastcgi: Vec<(String, Address)>,

    /// Answer requests under PREFIX with PROGRAM: a pool of FastCGI processes weft starts and
    /// supervises, or a process per request with --cgi-mode cgi1; repeatable.
    #[arg(long = "cgi", value_name = "PREFIX=PROGRAM", value_parser = parse_cgi)]
    pub cgi: Vec<(String, PathBuf)>,

    /// How --cgi programs run: fastcgi (persistent, supervised) or cgi1 (CGI/1.1, a process per
    /// request) [default: fastcgi].
    #[arg(long, value_name = "fastcgi|cgi1")]
    pub cgi_mode: Option<CgiMode>,

    /// Processes in each --cgi pool (rounded up to a multiple of the workers) [default: 4].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub cgi_workers: Option<usize>,

    /// Largest request body passed to a CGI program; larger ones get 413 [default: 1MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cgi_max_body: Option<u64>,

    /// A CGI program that makes no progress this long gets its request answered 504 and is
    /// replaced [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cgi_timeout: Option<Duration>,

    /// How response bodies reach the client: splice (socket → pipe → socket, no byte through weft),
    /// copy, or auto (splice from TCP and Unix sockets and CGI/1.1 pipes alike: since Linux 6.5 a
    /// Unix socket's pages move too) [default: auto].
    #[arg(long, value_name = "auto|splice|copy")]
    pub cgi_send: Option<CgiSend>,
}

impl CgiArgs {
    /// The CGI settings, or None without --cgi / --fastcgi.
    pub fn to_config(&self) -> Option<Arc<CgiConfig>> {
        if self.fastcgi.is_empty() && self.cgi.is_empty() {
            return None;
        }
        let fork = self.cgi_mode == Some(CgiMode::Cgi1);
        let mut routes: Vec<Route> = self
            .fastcgi
            .iter()
            .map(|(p, a)| Route {
                prefix: p.clone(),
                handler: Handler::FastCgi(a.clone()),
            })
            .collect();
        routes.extend(self.cgi.iter().map(|(p, prog)| Route {
            prefix: p.clone(),
            handler: if fork {
                Handler::Fork(prog.clone())
            } else {
                Handler::Pool(prog.clone())
            },
        }));
        let mut c = CgiConfig::new(routes);
        if let Some(n) = self.cgi_workers {
            c.workers = n;
        }
        if let Some(n) = self.cgi_max_body {
            c.max_body = n;
        }
        if let Some(d) = self.cgi_timeout {
            c.timeout = d.max(Duration::from_millis(10));
        }
        c.send = match self.cgi_send.unwrap_or_default() {
            CgiSend::Auto => weft_server::cgi::Send::Auto,
            CgiSend::Splice => weft_server::cgi::Send::Splice,
            CgiSend::Copy => weft_server::cgi::Send::Copy,
        };
        Some(Arc::new(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse() {
        assert_eq!(
            parse_fastcgi("/php=127.0.0.1:9000").unwrap(),
            ("/php".into(), Address::Tcp("127.0.0.1:9000".parse().unwrap()))
        );
        assert_eq!(
            parse_fastcgi("/x=unix:/run/php.sock").unwrap().1,
            Address::Unix("/run/php.sock".into())
        );
        assert!(parse_fastcgi("php=127.0.0.1:9000").is_err());
        assert!(parse_fastcgi("/php=").is_err());
        assert!(parse_fastcgi("/php=localhost").is_err());
        assert!(parse_cgi("/x=/nonexistent/program").is_err());
        assert!(parse_workers("0").is_err());
    }
}
