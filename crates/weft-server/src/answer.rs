//! Answering a GET or HEAD: the request target resolved to a file of the
//! document root (or the built-in demo site), a directory's index or listing,
//! a redirect, or an error; a file answered by its validators and the Range
//! header, its body queued from memory (small files) or as a file range of
//! the connection's output chain (sendfile or pread + writev).

use crate::config::{Precompressed, SendMode};
use crate::conn::Conn;
use crate::files::{http_mtime, CachedFile, Lookup};
use crate::respond::{self, Persist};
use crate::worker::{Shared, Wait};
use std::rc::Rc;
use weft_http::encode;
use weft_http::represent::{self, Answer, Conditions, Representation, Role};
use weft_io::sys::{self, Fd};
use weft_io::FileSend;

/// Copy path buffer (per worker).
const COPY_CHUNK: usize = 256 * 1024;
/// Object-cache bodies from this size on are sent with sendfile from the
/// file rather than written from their mappings (`--send copy` keeps the
/// writev). Below it one writev of head and body is one call where
/// sendfile needs two, and the copy it saves is small: side by side at
/// 32 KiB the two measured within noise of each other (22.6 and 24.6 µs
/// per request), at 100 KiB sendfile cost 44 µs against writev's 66
/// (docs/results.md, "Interleaved slices").
const OBJECT_SENDFILE_FROM: u64 = 32 * 1024;

/// GET/HEAD of a path: file, directory, demo page, or an error. Returns
/// (status, body bytes) for the log.
pub(crate) fn serve_target(
    c: &mut Conn,
    s: &mut Shared<'_>,
    head_len: usize,
    persist: Persist,
    head_only: bool,
) -> (u16, u64) {
    let data = &c.input.pending()[..head_len];
    let cfg = s.cfg;
    let mut target = booster_target(cfg, c.peer, &s.head, data).unwrap_or_else(|| s.head.target(data));
    let site = crate::vhost::site_of(cfg.site_table.as_deref(), &s.head, data, target);
    if s.head.is_absolute_form() {
        // http://authority/path → /path (RFC 9112 §3.2.2: servers accept absolute-form).
        let after_scheme = target.windows(3).position(|w| w == b"://").map(|i| i + 3).unwrap_or(0);
        target = match target[after_scheme..].iter().position(|&b| b == b'/') {
            Some(i) => &target[after_scheme + i..],
            None => b"/",
        };
    }
    s.rel.clear();
    let info = match crate::path::resolve(target, &mut s.rel) {
        Ok(i) => i,
        Err(e) => {
            // A malformed target (400: %00, a broken escape) closes the
            // connection like any malformed request.
            let persist = if e.status() == 400 {
                c.close_after = true;
                c.linger_on_close = true;
                Persist::Close
            } else {
                persist
            };
            let n = respond::simple(
                c.out.own_mut(),
                e.status(),
                s.date.get(),
                b"",
                e.reason(),
                head_only,
                persist,
            );
            return (e.status(), n);
        }
    };
    let (root_len, index, autoindex, cache_control) = crate::vhost::enter(site, &mut s.rel, cfg.autoindex);
    let date = s.date.get();
    let Some(files) = s.files.as_mut() else {
        // The built-in demo site.
        return match crate::demo::lookup(&s.rel) {
            Some(f) if !info.trailing_slash || s.rel.is_empty() => {
                respond::start_head(c.out.own_mut(), 200, date);
                c.out.own_mut().extend_from_slice(b"Content-Type: ");
                c.out.own_mut().extend_from_slice(f.content_type.as_bytes());
                c.out.own_mut().extend_from_slice(b"\r\n");
                respond::end_head(c.out.own_mut(), Some(f.body.len() as u64), persist);
                if !head_only {
                    c.out.own_mut().extend_from_slice(f.body);
                    s.stats.bytes_memory += f.body.len() as u64;
                }
                (200, f.body.len() as u64)
            }
            _ => (
                404,
                respond::simple(c.out.own_mut(), 404, date, b"", "", head_only, persist),
            ),
        };
    };
    let now = c.last_activity;
    let inline = !s.amped;
    match files.lookup(&s.rel, now, inline) {
        Lookup::Miss => wait_open(c, s, persist, head_only),
        Lookup::File(f) => {
            if info.trailing_slash {
                let n = respond::simple(c.out.own_mut(), 404, date, b"", "", head_only, persist);
                return (404, n);
            }
            serve_found(c, s, head_len, f, (persist, head_only), cache_control)
        }
        Lookup::Dir(dirfd) => {
            if !info.trailing_slash {
                // Redirect to the slash form so relative links resolve inside it.
                let path_end = target.iter().position(|&b| b == b'?').unwrap_or(target.len());
                let mut loc = Vec::with_capacity(target.len() + 16);
                loc.extend_from_slice(b"Location: ");
                loc.extend_from_slice(&target[..path_end]);
                loc.push(b'/');
                loc.extend_from_slice(&target[path_end..]);
                loc.extend_from_slice(b"\r\n");
                let n = respond::simple(c.out.own_mut(), 301, date, &loc, "", head_only, persist);
                return (301, n);
            }
            let dir_len = s.rel.len();
            if dir_len > root_len {
                s.rel.push(b'/');
            }
            s.rel.extend_from_slice(index);
            let found = files.lookup(&s.rel, now, inline);
            if matches!(found, Lookup::Miss) {
                return wait_open(c, s, persist, head_only);
            }
            if let Lookup::File(f) = found {
                return serve_found(c, s, head_len, f, (persist, head_only), cache_control);
            }
            s.rel.truncate(dir_len);
            match found {
                _ if autoindex => {
                    let dirfd = match dirfd {
                        Some(fd) => Ok(fd),
                        None => files.open_dir(&s.rel),
                    };
                    match dirfd {
                        Ok(fd) => listing(c, s, fd, root_len, (persist, head_only)),
                        Err(_) => (
                            403,
                            respond::simple(c.out.own_mut(), 403, date, b"", "", head_only, persist),
                        ),
                    }
                }
                _ => {
                    let n = respond::simple(
                        c.out.own_mut(),
                        403,
                        date,
                        b"",
                        "directory listing is off",
                        head_only,
                        persist,
                    );
                    (403, n)
                }
            }
        }
        Lookup::NotFound => (
            404,
            respond::simple(c.out.own_mut(), 404, date, b"", "", head_only, persist),
        ),
        Lookup::Unavailable => unavailable(c, s, persist, head_only, "out of file descriptors"),
        Lookup::Forbidden => (
            403,
            respond::simple(c.out.own_mut(), 403, date, b"", "", head_only, persist),
        ),
    }
}

/// AMPED: the path needs the disk. Park the request for a helper's open
/// (the worker submits it), or answer 503 when the helpers' queue is full.
/// The target a web booster parsed (`X-Weft-Target`), for a connection
/// from one of `--booster-from`; None otherwise (the header is ignored) or
/// when the booster sent none or an origin-form one is not there.
fn booster_target<'a>(
    cfg: &crate::ServeConfig,
    peer: Option<std::net::SocketAddr>,
    head: &weft_http::RequestHead,
    data: &'a [u8],
) -> Option<&'a [u8]> {
    if cfg.booster_from.is_empty() || !peer.is_some_and(|p| cfg.booster_from.contains(&p.ip())) {
        return None;
    }
    head.header(data, weft_http::TARGET_HEADER)
        .filter(|t| t.first() == Some(&b'/'))
}

fn wait_open(c: &mut Conn, s: &mut Shared<'_>, persist: Persist, head_only: bool) -> (u16, u64) {
    if s.overloaded {
        return busy(c, s, persist, head_only);
    }
    s.wait = Some(Wait::Open(s.rel.as_slice().into()));
    (0, 0)
}

fn busy(c: &mut Conn, s: &mut Shared<'_>, persist: Persist, head_only: bool) -> (u16, u64) {
    unavailable(c, s, persist, head_only, "the disk helpers are busy")
}

/// 503 with `Retry-After: 1`: a passing shortage (helpers, descriptors).
fn unavailable(c: &mut Conn, s: &mut Shared<'_>, persist: Persist, head_only: bool, why: &str) -> (u16, u64) {
    let n = respond::simple(
        c.out.own_mut(),
        503,
        s.date.get(),
        b"Retry-After: 1\r\n",
        why,
        head_only,
        persist,
    );
    (503, n)
}

/// A directory listing; `root_len`: the site prefix of `s.rel`, not shown.
fn listing(c: &mut Conn, s: &mut Shared<'_>, dirfd: Fd, root_len: usize, how: (Persist, bool)) -> (u16, u64) {
    let (persist, head_only) = how;
    let date = s.date.get();
    let entries = match sys::read_dir(&dirfd, 10_000) {
        Ok(e) => e,
        Err(_) => {
            return (
                403,
                respond::simple(c.out.own_mut(), 403, date, b"", "", head_only, persist),
            )
        }
    };
    let mut items: Vec<crate::autoindex::Entry> = entries
        .into_iter()
        .filter_map(|e| {
            let st = e.stat?;
            Some(crate::autoindex::Entry {
                name: e.name,
                is_dir: st.is_dir,
                size: st.size,
                mtime: st.mtime,
            })
        })
        .collect();
    let rel = &s.rel[root_len.min(s.rel.len())..];
    let shown = format!("/{}/", String::from_utf8_lossy(rel));
    let shown = if rel.is_empty() { "/".to_string() } else { shown };
    let mut page = Vec::with_capacity(4096);
    crate::autoindex::render(&shown, &mut items, &mut page);
    respond::start_head(c.out.own_mut(), 200, date);
    c.out
        .own_mut()
        .extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\n");
    respond::end_head(c.out.own_mut(), Some(page.len() as u64), persist);
    if !head_only {
        c.out.own_mut().extend_from_slice(&page);
        s.stats.bytes_memory += page.len() as u64;
    }
    (200, page.len() as u64)
}

/// Which representation of the file at `s.rel` goes out (`--precompressed`).
enum Pick {
    /// The file itself.
    Plain,
    /// A sidecar in a coding the client accepts; `s.rel` is its path now.
    Sidecar(Rc<CachedFile>, Precompressed),
    /// Finding the sidecar needs the disk (AMPED); `s.rel` is its path, for
    /// the helper's open.
    Wait,
}

/// The first sidecar (`X.br`, `X.gz`, in `--precompressed` order) of the
/// file `plain` at `s.rel` that the request's Accept-Encoding accepts, that
/// exists and that is not older than the file. A file without one costs a
/// hash lookup per coding accepted.
///
/// An older sidecar was made from an earlier version of the file (a build
/// writes the file, then compresses it; `gzip -k` gives the sidecar the
/// file's own mtime, which counts as in step): sending it would serve stale
/// content under the new file's name. It is passed over, counted, and the
/// next coding or the file itself goes out: at worst uncompressed, never
/// stale. Both stats come from the file cache, so the comparison costs no
/// system call.
fn pick(c: &Conn, s: &mut Shared<'_>, head_len: usize, plain: &CachedFile) -> Pick {
    let cfg = s.cfg;
    let Some(files) = s.files.as_mut() else {
        return Pick::Plain;
    };
    let data = &c.input.pending()[..head_len];
    let file_len = s.rel.len();
    for &coding in &cfg.precompressed {
        let accepted = weft_http::coding::accepts(s.head.header_all(data, "accept-encoding"), coding.name().as_bytes());
        if !accepted {
            continue;
        }
        s.rel.extend_from_slice(coding.suffix());
        match files.lookup_sidecar(&s.rel, c.last_activity, !s.amped) {
            Lookup::File(f) if f.stat.mtime_ns >= plain.stat.mtime_ns => return Pick::Sidecar(f, coding),
            Lookup::File(_) => {
                s.stats.precompressed_stale += 1;
                s.rel.truncate(file_len);
            }
            Lookup::Miss => return Pick::Wait,
            _ => s.rel.truncate(file_len),
        }
    }
    Pick::Plain
}

/// Answer with the file `f` found at `s.rel`, or with the sidecar of it the
/// client accepts.
fn serve_found(
    c: &mut Conn,
    s: &mut Shared<'_>,
    head_len: usize,
    f: Rc<CachedFile>,
    how: (Persist, bool),
    cache_control: Option<&[u8]>,
) -> (u16, u64) {
    let file_len = s.rel.len();
    let answered = match pick(c, s, head_len, &f) {
        Pick::Plain => serve_file(c, s, head_len, f, how, (cache_control, None)),
        Pick::Sidecar(sidecar, coding) => {
            s.stats.precompressed += 1;
            let coded = Some((coding, f.content_type));
            serve_file(c, s, head_len, sidecar, how, (cache_control, coded))
        }
        // The helpers are full: the file itself, rather than a 503 for
        // want of a sidecar.
        Pick::Wait if s.overloaded => {
            s.rel.truncate(file_len);
            serve_file(c, s, head_len, f, how, (cache_control, None))
        }
        Pick::Wait => wait_open(c, s, how.0, how.1),
    };
    s.rel.truncate(file_len);
    answered
}

/// Answer with the file `f` (at `s.rel`). `coded`: `f` is a sidecar in this
/// coding of a file of that Content-Type.
/// Content-Type and the validators of a file's answer: a sidecar's
/// (`coded`: the file's type, the sidecar's validators, a representation of
/// its own, RFC 9110 §8.8.3, and its coding), the object cache's
/// ready-to-send fields (`object_head`), the head cache's, or made now.
fn write_file_fields(
    out: &mut Vec<u8>,
    f: &CachedFile,
    coded: Option<(Precompressed, &'static str)>,
    object_head: Option<&[u8]>,
    head_cache: bool,
) {
    if let Some((coding, content_type)) = coded {
        crate::files::write_fields(out, content_type, &f.stat, &f.etag);
        out.extend_from_slice(b"Content-Encoding: ");
        out.extend_from_slice(coding.name().as_bytes());
        out.extend_from_slice(b"\r\n");
    } else if let Some(h) = object_head {
        out.extend_from_slice(h);
    } else if head_cache {
        out.extend_from_slice(&f.fields);
    } else {
        let etag = weft_http::make_etag(f.stat.ino, f.stat.size, f.stat.mtime_ns);
        crate::files::write_fields(out, f.content_type, &f.stat, &etag);
    }
}

/// The answers to a file request that carry no part of the file: 412, 416
/// and 304, written whole into `out`; None for 200 and 206.
fn answer_without_body(
    out: &mut Vec<u8>,
    answer: &Answer,
    date: &[u8],
    f: &CachedFile,
    (persist, head_only): (Persist, bool),
    cache_control: Option<&[u8]>,
    vary: &[u8],
) -> Option<(u16, u64)> {
    let status = answer.status();
    match answer {
        Answer::PreconditionFailed => {
            let why = "a precondition of the request does not hold";
            Some((status, respond::simple(out, status, date, b"", why, head_only, persist)))
        }
        Answer::RangeNotSatisfiable { .. } => {
            let range = answer.content_range();
            let extra = |o: &mut Vec<u8>| range.into_iter().for_each(|r| encode::content_range(o, r));
            Some((
                status,
                respond::simple_with(
                    out,
                    status,
                    date,
                    extra,
                    "no requested range is in the file",
                    head_only,
                    persist,
                ),
            ))
        }
        Answer::NotModified => {
            // Only what RFC 9110 §15.4.5 lists: here the ETag (no Content-Type).
            respond::not_modified(out, date, &f.fields);
            if let Some(cc) = cache_control {
                out.extend_from_slice(cc); // RFC 9110 §15.4.5 lists it too
            }
            out.extend_from_slice(vary); // and this
            respond::end_head(out, None, persist);
            Some((status, 0))
        }
        Answer::Full { .. } | Answer::Partial { .. } => None,
    }
}

fn serve_file(
    c: &mut Conn,
    s: &mut Shared<'_>,
    head_len: usize,
    f: Rc<CachedFile>,
    (persist, head_only): (Persist, bool),
    (cache_control, coded): (Option<&[u8]>, Option<(Precompressed, &'static str)>),
) -> (u16, u64) {
    // With sidecars on, every file response says that it depends on
    // Accept-Encoding (RFC 9110 §12.5.5), so a cache never gives a coded
    // body to a client that did not ask, nor the plain one for good.
    let vary: &[u8] = if s.cfg.precompressed.is_empty() {
        b""
    } else {
        b"Vary: Accept-Encoding\r\n"
    };
    let data = &c.input.pending()[..head_len];
    let date = s.date.get();
    let rep = Representation {
        etag: Some(&f.etag),
        last_modified: Some(http_mtime(&f.stat)),
        len: f.stat.size,
    };
    let answer = represent::answer(
        s.head.method(),
        &Conditions::from_head(&s.head, data),
        &rep,
        Role::Origin,
    );
    let status = answer.status();
    if let Some(done) = answer_without_body(
        c.out.own_mut(),
        &answer,
        date,
        &f,
        (persist, head_only),
        cache_control,
        vary,
    ) {
        return done;
    }
    let body = answer.body().filter(|r| !r.is_empty() && !head_only);
    // stream: a body fed by chunks is tested chunk by chunk instead.
    let streamed = body
        .as_ref()
        .is_some_and(|r| crate::stream::streams(s, &f, r.start, r.end));
    if let Some(r) = body.as_ref().filter(|_| f.body.is_none() && !streamed) {
        match crate::worker::amped::before_file_read(s, &f, r.start, r.end, c.last_activity) {
            Ok(()) => {}
            Err(crate::worker::amped::NotYet::Wait) => return (0, 0),
            Err(crate::worker::amped::NotYet::Busy) => return busy(c, s, persist, head_only),
            Err(crate::worker::amped::NotYet::Changed) => {
                // The file changed since it was cached: this answer would be
                // torn; nothing of it is written, the connection closes.
                s.stats.snapshot_aborts += 1;
                c.close_after = true;
                return (0, 0);
            }
        }
    }
    // The object cache's ready-to-send response (fields and mapped body).
    let object = match (&body, s.objects.as_mut()) {
        (Some(_), Some(o)) => o.response(&s.rel, &f),
        _ => None,
    };
    let date = s.date.get();
    let out = c.out.own_mut();
    respond::start_head(out, status, date);
    write_file_fields(out, &f, coded, object.as_ref().map(|o| &o.head()[..]), s.cfg.head_cache);
    if let Some(cc) = cache_control {
        out.extend_from_slice(cc);
    }
    out.extend_from_slice(vary);
    if let Some(r) = answer.content_range() {
        encode::content_range(out, r);
    }
    respond::end_head(out, answer.content_length(), persist);
    let Some(range) = body else {
        return (status, answer.content_length().unwrap_or(0));
    };
    let (start, end) = (range.start, range.end);
    s.cache_status = Some(if object.is_some() || f.body.is_some() {
        "HIT"
    } else {
        "MISS"
    });
    if let Some(o) = object {
        s.stats.bytes_object += end - start;
        if end - start >= OBJECT_SENDFILE_FROM && s.cfg.send != SendMode::Copy {
            // The same page-cache pages the entry maps, passed to the socket
            // by reference instead of copied out of the mapping: writev's
            // copy was 42 % of weft's time at 100 KiB in a profile on a
            // loaded host (docs/results.md, "interleaved"), sendfile never
            // cost more. The mapping stays the entry's (its accounting,
            // replacement and `--send copy`); weft never touches its pages.
            c.out.push_file(f.clone(), start, end, FileSend::Sendfile);
        } else {
            c.out.push_range(o.body(), start as usize, end as usize);
        }
        crate::worker::amped::sending_from(s, f);
        return (status, end - start);
    }
    if let Some(body) = &f.body {
        // Small file held in memory: one copy into the output buffer buys a
        // single write per response and lets pipelined responses share it.
        c.out.own_mut().extend_from_slice(&body[start as usize..end as usize]);
        s.stats.bytes_memory += end - start;
        return (status, end - start);
    }
    if let Some(a) = s.admit.as_mut() {
        // The clock read is once per body from a file, beside its send.
        a.sent(&f, &s.rel, std::time::Instant::now());
    }
    if streamed {
        crate::stream::start(c, s, f, start, end);
        return (status, end - start);
    }
    let how = match s.cfg.send {
        SendMode::Sendfile => FileSend::Sendfile,
        SendMode::Copy => FileSend::Copy,
        // Past the in-memory size, sendfile: on loopback too it costs no more
        // CPU than pread + writev at 16 KiB and half as much from 512 KiB up
        // (lab `send-path`, docs/results.md), and over a NIC it saves the copy.
        SendMode::Auto => FileSend::Sendfile,
    };
    if how == FileSend::Copy && s.scratch.is_empty() {
        s.scratch = vec![0u8; COPY_CHUNK];
    }
    c.out.push_file(f.clone(), start, end, how);
    crate::worker::amped::sending_from(s, f);
    (status, end - start)
}
