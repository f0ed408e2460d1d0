//! `weft-fcgi-app`: a small FastCGI responder for tests and the lab, so
//! neither needs php-fpm (issue 24). It answers every request with a body of
//! the size the query asks for and can misbehave on request.
//!
//! Listening: `--listen ADDR` (TCP) or `--listen unix:PATH`; without it, the
//! listening socket is descriptor 0 (FCGI_LISTENSOCK_FILENO), as when `weft
//! serve --cgi PREFIX=weft-fcgi-app` starts it. A thread per connection;
//! requests on a connection one after the other (FCGI_KEEP_CONN honoured),
//! each awaited in poll(2), not in a blocking read ([`ReadyReader`] says why).
//!
//! Query keys (`/any/path?size=65536&nolen=1`):
//! - `size=N`: a body of N bytes of the tests' deterministic pattern
//!   (`weft_load::content::sized_pattern`, as in the tests); `Content-Length` is sent unless `nolen=1`;
//! - `record=N`: STDOUT records of at most N content bytes (default 65,528),
//!   the first one the remainder, the others full;
//! - `echo=1`: the body is the request body (FCGI_STDIN);
//! - `env=1`: the body is the CGI parameters, one `NAME=value` a line;
//! - `crash=1`: the process exits without answering;
//! - `hang=1`: the request never gets an answer;
//! - `wait=MS`: the answer comes after MS milliseconds (at most 10 s);
//! - `badhead=1`: a malformed CGI head;
//! - `over=N`: N more body bytes than the Content-Length declared;
//! - `local=PATH`: a local redirect to PATH (`Location` alone, RFC 3875
//!   §6.2.2); `loop=1`: a local redirect to the request's own URI;
//! - `stderr=1`: a line on FCGI_STDERR too;
//! - `seen=1`: the body is the number of requests this process has read,
//!   this one included (a test can show a request never reached it).
//!
//! Every response carries `X-Pid`, so a test can see a worker replaced. The
//! process exits when its parent goes away (a supervisor that was killed).
//!
//! Tuned like a production FastCGI application that serves a prepared
//! document (the thesis's CGI program also returned a document it held): a
//! response that depends only on its query (not `echo`, `env`, `stderr` or a
//! misbehaviour) is built once, records and all, into an unlinked file, and
//! every later request with that query and request id is answered with one
//! sendfile(2) from it: no per-request body copy in the application, and
//! page references (not copies) on the way into the socket.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use weft_http::fastcgi::{decode_pairs, record_header, RecordHeader, RecordType, HEADER_LEN};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = match args.as_slice() {
        [] => None,
        [flag, a] if flag == "--listen" => Some(a.clone()),
        _ => {
            eprintln!("usage: weft-fcgi-app [--listen ADDR|unix:PATH]");
            std::process::exit(2);
        }
    };
    let parent = std::os::unix::process::parent_id();
    if listen.is_none() && parent == 1 {
        // Started by a supervisor that is already gone (reparented to init
        // before this line ran): nobody will ever connect.
        std::process::exit(0);
    }
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(0);
        }
    });
    let r = match listen.as_deref() {
        Some(a) => match a.strip_prefix("unix:") {
            Some(p) => {
                let _ = std::fs::remove_file(p);
                UnixListener::bind(p).and_then(|l| {
                    // A web server's workers may run as another user (nginx).
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666))?;
                    serve_unix(&l)
                })
            }
            None => std::net::TcpListener::bind(a).and_then(|l| {
                println!("listening on {}", l.local_addr()?);
                for s in l.incoming() {
                    let s = s?;
                    let _ = s.set_nodelay(true);
                    std::thread::spawn(move || conn(s));
                }
                Ok(())
            }),
        },
        None => io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| serve_unix(&UnixListener::from(fd))),
    };
    if let Err(e) = r {
        eprintln!("weft-fcgi-app: {e}");
        std::process::exit(1);
    }
}

fn serve_unix(l: &UnixListener) -> io::Result<()> {
    for s in l.incoming() {
        let s = s?;
        std::thread::spawn(move || conn(s));
    }
    Ok(())
}

/// One request as read from the connection.
#[derive(Default)]
struct Req {
    id: u16,
    keep: bool,
    params: Vec<u8>,
    stdin: Vec<u8>,
}

fn read_record<S: Read>(s: &mut S) -> io::Result<Option<(RecordHeader, Vec<u8>)>> {
    let mut h = [0u8; HEADER_LEN];
    match s.read_exact(&mut h) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let h = RecordHeader::parse(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut body = vec![0u8; h.content_length as usize + h.padding_length as usize];
    s.read_exact(&mut body)?;
    body.truncate(h.content_length as usize);
    Ok(Some((h, body)))
}

fn read_request<S: Read>(s: &mut S) -> io::Result<Option<Req>> {
    let mut r = Req::default();
    let (mut params_done, mut stdin_done) = (false, false);
    while !(params_done && stdin_done) {
        let Some((h, body)) = read_record(s)? else {
            return Ok(None);
        };
        match h.kind {
            RecordType::BeginRequest => {
                r.id = h.request_id;
                r.keep = body.get(2).is_some_and(|f| f & 1 != 0);
            }
            RecordType::Params if body.is_empty() => params_done = true,
            RecordType::Params => r.params.extend_from_slice(&body),
            RecordType::Stdin if body.is_empty() => stdin_done = true,
            RecordType::Stdin => r.stdin.extend_from_slice(&body),
            _ => {}
        }
    }
    Ok(Some(r))
}

fn conn<S: AsFd>(s: S)
where
    for<'a> &'a S: Read + Write,
{
    // Buffered reads: a request's records usually arrive in one segment.
    let mut r = io::BufReader::with_capacity(64 * 1024, ReadyReader(&s));
    while let Ok(Some(req)) = read_request(&mut r) {
        SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if answer(&s, &req).is_err() || !req.keep {
            return;
        }
    }
}

/// Reads a connection after waiting in poll(2) for input, not in a blocking
/// read. A thread blocked in a Unix socket's read sits on the socket's one
/// wait queue, and the kernel wakes that queue each time the server consumes
/// a piece of the reply (`unix_write_space`): 1.5 needless context switches
/// per 64 KiB response, measured. poll(2) waits for POLLIN alone, and the
/// kernel passes those write-space wake-ups by.
struct ReadyReader<'a, S>(&'a S);

impl<S: AsFd> Read for ReadyReader<'_, S>
where
    for<'a> &'a S: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut fds = [weft_io::sys::tun::poll_in(self.0.as_fd())];
        loop {
            match weft_io::sys::poll(&mut fds, -1) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
                Ok(_) => break,
            }
        }
        let mut s = self.0;
        s.read(buf)
    }
}

/// Requests this process has read (`seen=1`).
static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

/// The pattern of `len` bytes, made once per size (the lab measures weft,
/// not the application's body generation).
fn body_of(len: usize) -> Arc<Vec<u8>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<Vec<u8>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(b) = cache.lock().ok().and_then(|c| c.get(&len).cloned()) {
        return b;
    }
    let b = Arc::new(weft_load::content::sized_pattern(len.min(1 << 28)));
    if let Ok(mut c) = cache.lock() {
        if c.len() < 64 {
            c.insert(len, b.clone());
        }
    }
    b
}

fn write_stream<S: Write>(s: &mut S, kind: RecordType, id: u16, data: &[u8], record: usize) -> io::Result<()> {
    let pad = [0u8; 8];
    // Tail-aligned: the first record takes the remainder, every later one
    // is full. The server then reads the CGI head and the small first part
    // in one go and every later record is a whole splice.
    let record = record.clamp(1, 65_535);
    let first = match data.len() % record {
        0 => record.min(data.len()),
        r => r,
    };
    let (head, rest) = data.split_at(first);
    for part in std::iter::once(head).chain(rest.chunks(record)) {
        if part.is_empty() {
            continue;
        }
        let h = record_header(kind, id, part.len());
        // One writev per record: header, content, padding.
        let mut bufs = [&h[..], part, &pad[..h[6] as usize]];
        let mut at = 0;
        while at < bufs.len() {
            let iov: Vec<io::IoSlice<'_>> = bufs[at..].iter().map(|b| io::IoSlice::new(b)).collect();
            let mut n = s.write_vectored(&iov)?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            while at < bufs.len() && n >= bufs[at].len() {
                n -= bufs[at].len();
                at += 1;
            }
            if at < bufs.len() {
                bufs[at] = &bufs[at][n..];
            }
        }
    }
    Ok(())
}

/// Responses prepared once: (query, request id) → the whole record stream.
type Prepared = Mutex<HashMap<(String, u16), Arc<(File, u64)>>>;

fn prepared() -> &'static Prepared {
    static P: OnceLock<Prepared> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn query_of(req: &Req) -> String {
    let mut query = String::new();
    let _ = decode_pairs(&req.params, |n, v| {
        if n == b"QUERY_STRING" {
            query = String::from_utf8_lossy(v).into_owned();
        }
    });
    query
}

/// Does the response depend on the query alone?
fn preparable(query: &str) -> bool {
    ["echo", "env", "stderr", "crash", "hang", "seen", "wait"]
        .iter()
        .all(|k| query_value(query, k).is_none())
}

/// The whole record stream in an unlinked file, for sendfile.
fn prepare(req: &Req) -> io::Result<(File, u64)> {
    let mut out = Vec::new();
    build(&mut out, req)?;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("weft-fcgi-app-{}-{n}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    f.write_all(&out)?;
    Ok((f, out.len() as u64))
}

fn answer<S: AsFd>(s: &S, req: &Req) -> io::Result<()>
where
    for<'a> &'a S: Write,
{
    let query = query_of(req);
    if !preparable(&query) {
        return build(&mut &*s, req);
    }
    let key = (query, req.id);
    let hit = prepared().lock().ok().and_then(|m| m.get(&key).cloned());
    let file = match hit {
        Some(f) => f,
        None => {
            let f = Arc::new(prepare(req)?);
            if let Ok(mut m) = prepared().lock() {
                if m.len() < 64 {
                    m.insert(key, f.clone());
                }
            }
            f
        }
    };
    let (file, len) = (&file.0, file.1);
    let mut off = 0u64;
    while off < len {
        let want = (len - off).min(1 << 30) as usize;
        match weft_io::sys::sendfile(s, file, &mut off, want) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write the response to `req` (FastCGI records) to `s`.
fn build<S: Write>(s: &mut S, req: &Req) -> io::Result<()> {
    let mut query = String::new();
    let mut uri = String::new();
    let mut env = Vec::new();
    let _ = decode_pairs(&req.params, |n, v| {
        if n == b"QUERY_STRING" {
            query = String::from_utf8_lossy(v).into_owned();
        }
        if n == b"REQUEST_URI" {
            uri = String::from_utf8_lossy(v).into_owned();
        }
        env.extend_from_slice(n);
        env.push(b'=');
        env.extend_from_slice(v);
        env.push(b'\n');
    });
    let q = |k: &str| query_value(&query, k);
    if q("crash").is_some() {
        std::process::exit(3);
    }
    if q("hang").is_some() {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if let Some(ms) = q("wait").and_then(|v| v.parse::<u64>().ok()) {
        std::thread::sleep(Duration::from_millis(ms.min(10_000)));
    }
    let record = q("record").and_then(|v| v.parse().ok()).unwrap_or(65_528);
    let body = if q("echo").is_some() {
        Arc::new(req.stdin.clone())
    } else if q("env").is_some() {
        Arc::new(env)
    } else if q("seen").is_some() {
        Arc::new(SEEN.load(std::sync::atomic::Ordering::Relaxed).to_string().into_bytes())
    } else {
        body_of(q("size").and_then(|v| v.parse().ok()).unwrap_or(0))
    };
    let mut out = Vec::with_capacity(body.len() + 256);
    let local = q("local")
        .map(str::to_string)
        .or_else(|| q("loop").map(|_| uri.clone()));
    if q("badhead").is_some() {
        out.extend_from_slice(b"this is not a header line\r\n\r\n");
    } else if let Some(path) = local {
        // A local redirect (RFC 3875 §6.2.2): only Location, no body.
        let _ = write!(out, "Location: {path}\r\n\r\n");
    } else {
        out.extend_from_slice(b"Status: 200 OK\r\nContent-Type: application/octet-stream\r\n");
        let _ = write!(out, "X-Pid: {}\r\n", std::process::id());
        if q("nolen").is_none() {
            let _ = write!(out, "Content-Length: {}\r\n", body.len());
        }
        out.extend_from_slice(b"\r\n");
    }
    if !out.starts_with(b"Location:") {
        out.extend_from_slice(&body);
    }
    if let Some(n) = q("over").and_then(|v| v.parse::<usize>().ok()) {
        out.extend(std::iter::repeat_n(b'X', n.min(1 << 24)));
    }
    if q("stderr").is_some() {
        write_stream(
            s,
            RecordType::Stderr,
            req.id,
            b"weft-fcgi-app: a line on stderr\n",
            record,
        )?;
    }
    write_stream(s, RecordType::Stdout, req.id, &out, record)?;
    let h = record_header(RecordType::Stdout, req.id, 0);
    s.write_all(&h)?;
    let mut end = record_header(RecordType::EndRequest, req.id, 8).to_vec();
    end.extend_from_slice(&[0; 8]);
    s.write_all(&end)?;
    s.flush()
}
