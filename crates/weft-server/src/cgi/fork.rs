//! CGI/1.1 (RFC 3875), `--cgi PREFIX=PROGRAM --cgi-mode cgi1`: a process per
//! request, for programs that do not speak FastCGI.
//!
//! The program starts once the whole request body has arrived (at most
//! `--cgi-max-body`); the body is its standard input through an unlinked
//! temporary file, so a program that never reads it cannot stall the loop.
//! Its environment is exactly the CGI meta-variables (`env_clear`). Its
//! standard output is a pipe registered on the worker's loop: the CGI head
//! is read into weft; after it, the bytes waiting in the pipe (FIONREAD) are
//! queued as a pipe segment of the client's output chain and spliced from
//! the program's own pipe to the socket — no pipe of weft's in between, no
//! copy. The process is reaped when its output ends (or later, if it keeps
//! running), and killed past `--cgi-timeout`.

use super::txn::{Done, Frame, Phase, Txn, SPLICE_MIN};
use super::{Cgi, Handler};
use crate::conn::Conn;
use std::ffi::OsStr;
use std::io::{self, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use weft_io::sys::{self, Fd};

/// A running CGI/1.1 program.
pub(crate) struct Proc {
    child: Child,
}

/// The body as the program's standard input: an unlinked temporary file.
fn body_file(body: &[u8]) -> io::Result<Stdio> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "weft-cgi-body-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    f.write_all(body)?;
    f.rewind()?;
    Ok(Stdio::from(f))
}

/// Start the program with the environment in `t.req` (NAME=value\0...).
fn spawn(g: &mut Cgi, t: &mut Txn, client: weft_io::Token) -> io::Result<()> {
    let Handler::Fork(program) = &g.cfg.routes[t.route].handler else {
        return Err(io::Error::other("not a CGI/1.1 route"));
    };
    let mut cmd = Command::new(program);
    cmd.env_clear();
    for pair in t.req.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        if let Some(eq) = pair.iter().position(|&b| b == b'=') {
            cmd.env(OsStr::from_bytes(&pair[..eq]), OsStr::from_bytes(&pair[eq + 1..]));
        }
    }
    if let Some(dir) = program.parent().filter(|d| !d.as_os_str().is_empty()) {
        cmd.current_dir(dir);
    }
    cmd.stdin(if t.body.is_empty() {
        Stdio::null()
    } else {
        body_file(&t.body)?
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = cmd.spawn()?;
    g.stats.forks += 1;
    let out = child.stdout.take().map(std::os::fd::OwnedFd::from);
    let Some(out) = out else {
        let _ = child.kill();
        g.zombies.push(child);
        return Err(io::Error::other("no output pipe"));
    };
    let fd = Fd::from(out);
    sys::set_nonblocking(&fd)?;
    let up = g.insert_up(fd, t.route, None);
    g.routes[t.route].open += 1;
    if let Some(u) = g.ups.get_mut(up) {
        u.client = Some(client);
        u.broken = true;
        u.want = weft_io::Interest::READ;
    }
    t.up = Some(up);
    t.proc = Some(Proc { child });
    t.req.clear();
    t.body = Vec::new();
    Ok(())
}

/// Move a CGI/1.1 request forward.
pub(super) fn drive(t: &mut Txn, g: &mut Cgi, c: &mut Conn, date: &[u8], now: Instant) -> Done {
    if t.phase == Phase::Drain {
        return t.drained(c);
    }
    if t.phase == Phase::Queued {
        if t.body_left > 0 {
            return Done::No;
        }
        if let Err(e) = spawn(g, t, c.token) {
            weft_core::warn!("cgi: cannot start a CGI program: {e}");
            t.failed = Some(502);
            return Done::Queued;
        }
        t.phase = Phase::Head;
        t.deadline = now + t.timeout;
    }
    if let Some(up) = t.up {
        g.want(up, weft_io::Interest::READ);
    }
    match read(t, g, c, date, now) {
        Ok(d) => d,
        Err(code) => {
            t.failed = Some(code);
            t.replace = true;
            Done::Queued
        }
    }
}

fn read(t: &mut Txn, g: &mut Cgi, c: &mut Conn, date: &[u8], now: Instant) -> Result<Done, u16> {
    let Some(fd) = t.up.and_then(|u| g.ups.get(u)).map(|u| u.fd.raw()) else {
        return Err(502);
    };
    let mut buf = std::mem::take(&mut g.scratch);
    if buf.len() < 64 * 1024 {
        buf.resize(64 * 1024, 0);
    }
    let mut queued = false;
    let r = loop {
        if c.out.len() > c.out.memory_len() as u64 || c.out.len() >= super::txn::QUEUED_MAX {
            // Spliced bytes are still in the program's pipe: reading now
            // would take them out of order. Until the client takes them,
            // the pipe's readiness says nothing new.
            if let (false, Some(up)) = (queued, t.up) {
                g.want(up, weft_io::Interest::NONE);
            }
            break Ok(if queued { Done::Queued } else { Done::No });
        }
        if !t.up.is_some_and(|up| g.may_read(up)) {
            // Nothing came since a read found the pipe empty.
            break Ok(if queued { Done::Queued } else { Done::No });
        }
        let avail = if t.phase == Phase::Body {
            sys::bytes_readable(fd).unwrap_or(0)
        } else {
            0
        };
        if avail >= SPLICE_MIN && t.splice && t.frame != Frame::Discard {
            let mut n = avail;
            if let Frame::Length(l) = t.frame {
                if l == 0 {
                    t.overrun(g, c);
                    break Ok(Done::Queued);
                }
                n = n.min(l as usize);
            }
            t.open_chunk(c, n as u64);
            c.out.push_pipe(fd, n);
            t.close_chunk(c);
            g.stats.bytes_spliced += n as u64;
            if let Frame::Length(l) = &mut t.frame {
                *l -= n as u64;
            }
            t.deadline = now + t.timeout;
            break Ok(Done::Queued);
        }
        let want = if t.phase == Phase::Head {
            (g.cfg.max_head + 1).saturating_sub(t.head.len()).clamp(1, buf.len())
        } else {
            avail.clamp(1, buf.len())
        };
        let n = match sys::read(fd, &mut buf[..want]) {
            Ok(0) => break Ok(t.ended(g, c)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Some(up) = t.up {
                    g.spent(up, true, false);
                }
                break Ok(if queued { Done::Queued } else { Done::No });
            }
            Err(_) => break Err(502),
        };
        t.deadline = now + t.timeout;
        if t.phase == Phase::Body {
            t.open_chunk(c, n as u64);
        }
        match t.stdout_bytes(g, c, &buf[..n], date) {
            Ok(q) => queued |= q,
            Err(code) => break Err(code),
        }
        if t.phase == Phase::Drain {
            break Ok(Done::Queued);
        }
    };
    g.scratch = buf;
    r
}

/// The request is over: reap the process (kill it first when it must go).
pub(super) fn reap(g: &mut Cgi, mut p: Proc, kill: bool) {
    if kill {
        let _ = p.child.kill();
    }
    if !matches!(p.child.try_wait(), Ok(Some(_))) {
        g.zombies.push(p.child);
    }
}
