//! One CGI request in flight: the FastCGI exchange on the worker's loop (and
//! the parts CGI/1.1 shares with it: the body, the head, the framing).
//!
//! Reading the reply: record headers and padding are read into user space
//! (exactly the padding and the next header, so no payload byte comes with
//! them); the CGI head is found by peeking into the first STDOUT payload
//! and only its own bytes are taken; every later payload byte is spliced
//! from the application's socket into a pipe and queued on the client's
//! output chain as a pipe segment (`OutChain::flush` splices it on), unless
//! the record is small (≤ [`SPLICE_MIN`]) or `--cgi-send copy`.
//!
//! Framing towards the client: the program's Content-Length when it gave
//! one (bytes past it are cut and the process replaced; fewer, and the
//! client connection is closed so the truncation shows); otherwise chunked
//! for HTTP/1.1 (each record's payload one chunk) or close-delimited.

use super::{Cgi, Handler};
use crate::conn::Conn;
use crate::respond::{self, Persist};
use std::io::{self, Write};
use std::time::{Duration, Instant};
use weft_http::fastcgi::head::{parse_head, CgiKind};
use weft_http::fastcgi::{self, env, FcgiError, RecordReader, RecordType, Step, HEADER_LEN};
use weft_http::{RequestHead, Version};
use weft_io::sys;
use weft_io::{Interest, Pipe, Token};

/// Payloads up to this size are read, not spliced (a splice pair costs more
/// than copying a few pages).
pub(super) const SPLICE_MIN: usize = 4096;
/// The request id weft uses (one request per connection at a time).
const ID: u16 = 1;
/// Bytes read past a record header when payloads are spliced.
const HEADER_SLACK: usize = 504;
/// User-space reads of the reply at most this large.
pub(super) const READ_MAX: usize = 64 * 1024;
/// Stop reading from the application while this much is queued for a
/// client that has not taken it (copied bytes, or a full pipe).
pub(super) const QUEUED_MAX: u64 = 1 << 20;

/// Where the reply is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for a connection (or, CGI/1.1, for the whole body).
    Queued,
    /// Reading the CGI head.
    Head,
    /// The head is sent; the body follows.
    Body,
    /// The reply is over; the last spliced bytes are still queued.
    Drain,
}

/// How the body is framed towards the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Frame {
    /// Content-Length: bytes still to send.
    Length(u64),
    /// Chunked (HTTP/1.1 without Content-Length).
    Chunked,
    /// Until the connection closes (HTTP/1.0 without Content-Length).
    Close,
    /// No body is sent (HEAD, 204, 304).
    Discard,
}

/// What [`Txn::drive`] did.
pub(super) enum Done {
    /// Nothing new.
    No,
    /// Output was queued.
    Queued,
    /// The request is over.
    Yes,
}

/// One request in flight.
pub(crate) struct Txn {
    pub(super) route: usize,
    pub(super) up: Option<Token>,
    pub(super) proc: Option<super::fork::Proc>,
    pub(super) phase: Phase,
    /// Bytes for the application (records; CGI/1.1: the raw body).
    pub(super) req: Vec<u8>,
    req_at: usize,
    /// CGI/1.1: the request body, given to the program when it starts.
    pub(super) body: Vec<u8>,
    /// Request body bytes still to take from the client's input.
    pub(super) body_left: u64,
    reader: RecordReader,
    /// The CGI head as read so far.
    pub(super) head: Vec<u8>,
    pub(super) frame: Frame,
    /// A chunk is open: its CRLF follows the record's last payload byte.
    chunk_open: bool,
    /// The current record is STDOUT.
    stdout: bool,
    pub(super) persist: Persist,
    pub(super) head_only: bool,
    pub(super) http10: bool,
    pub(super) deadline: Instant,
    pub(super) timeout: Duration,
    /// An error to answer (502, 504) at the next drive.
    pub(super) failed: Option<u16>,
    /// The application misbehaved: replace its process.
    pub(super) replace: bool,
    pub(super) waiting: bool,
    /// Payloads are spliced (`--cgi-send`).
    pub(super) splice: bool,
    /// The pipe is full: the client has not taken what was spliced.
    pub(super) stalled: bool,
    pipe: Option<Pipe>,
    /// The status answered (for the access log and the status counters).
    pub(super) status: u16,
    /// Body bytes queued for the client, chunk framing included and the
    /// head not: the access log's `bytes`, as a static file's (the body
    /// length) and nginx's `$body_bytes_sent`.
    pub(super) sent: u64,
    /// A local redirect (RFC 3875 §6.2.2): the path to serve instead.
    pub(super) redirect: Option<Vec<u8>>,
    /// The request's Host field (for a local redirect's request).
    pub(super) host: Vec<u8>,
    /// The request head, kept for the access log (only when there is one).
    pub(super) log_head: Option<Vec<u8>>,
    /// When the request head began to arrive.
    pub(super) started: Instant,
    /// Local redirects that led to this request.
    pub(super) depth: u8,
}

/// Build the request for `route` and the state to answer it.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    g: &mut Cgi,
    c: &Conn,
    head: &RequestHead,
    head_len: usize,
    route: usize,
    body: u64,
    (persist, head_only, now): (Persist, bool, Instant),
    root: &[u8],
) -> Txn {
    let local = g.local_addr(c);
    let data = &c.input.pending()[..head_len];
    let r = &g.cfg.routes[route];
    let target = head.target(data);
    let path = &target[..super::memchr_q(target)];
    let prefix = r.prefix.trim_end_matches('/').as_bytes();
    let (script, info) = path.split_at(prefix.len().min(path.len()));
    let mut filename = Vec::new();
    match &r.handler {
        Handler::FastCgi(_) => {
            filename.extend_from_slice(root);
            filename.extend_from_slice(script);
        }
        Handler::Pool(p) | Handler::Fork(p) => filename.extend_from_slice(p.as_os_str().as_encoded_bytes()),
    }
    let host = head.header(data, "host").unwrap_or(b"localhost");
    let server_name = match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host.ends_with(b"]") => &host[..i],
        _ => host,
    };
    let req = env::CgiRequest {
        head,
        data,
        script_name: script,
        path_info: info,
        script_filename: Some(&filename),
        document_root: root,
        server_name,
        local,
        remote: c.peer.unwrap_or(local),
        content_length: (body > 0).then_some(body),
        https: false,
        server_software: "weft",
    };
    let fork = matches!(r.handler, Handler::Fork(_));
    let mut out = Vec::with_capacity(1024);
    g.params.clear();
    if fork {
        // CGI/1.1: the environment as NAME=value\0 strings.
        env::cgi_env(&req, &mut g.scratch, |n, v| {
            g.params.extend_from_slice(n);
            g.params.push(b'=');
            g.params.extend_from_slice(v);
            g.params.push(0);
        });
        std::mem::swap(&mut out, &mut g.params);
    } else {
        fastcgi::encode_begin_request(&mut out, ID, true);
        env::cgi_env(&req, &mut g.scratch, |n, v| fastcgi::encode_pair(&mut g.params, n, v));
        fastcgi::encode_params_encoded(&mut out, ID, &g.params);
        fastcgi::encode_params_end(&mut out, ID);
        if body == 0 {
            fastcgi::encode_stdin_end(&mut out, ID);
        }
    }
    Txn {
        route,
        up: None,
        proc: None,
        phase: Phase::Queued,
        req: out,
        req_at: 0,
        body: Vec::new(),
        body_left: body,
        reader: RecordReader::new(ID),
        head: Vec::new(),
        frame: Frame::Close,
        chunk_open: false,
        stdout: false,
        persist,
        head_only,
        http10: head.version() == Version::Http10,
        deadline: now + g.cfg.timeout,
        timeout: g.cfg.timeout,
        failed: None,
        replace: false,
        waiting: false,
        splice: r.handler.splices(g.cfg.send),
        stalled: false,
        pipe: None,
        status: 0,
        sent: 0,
        redirect: None,
        host: host.to_vec(),
        log_head: None,
        started: now,
        depth: 0,
    }
}

impl Txn {
    /// Past the deadline: mark it (answered 504 at the next drive). Not
    /// while the client takes what is queued (`Drain`): the application is
    /// done, and a slow client is `--send-timeout`'s to judge.
    pub(super) fn timed_out(&mut self, now: Instant) -> bool {
        if self.failed.is_none() && self.phase != Phase::Drain && now >= self.deadline {
            self.failed = Some(504);
            self.replace = true;
            return true;
        }
        false
    }

    /// Take request body bytes from the client's input.
    pub(super) fn take_body(&mut self, g: &mut Cgi, c: &mut Conn) {
        if self.body_left == 0 || c.input.is_empty() {
            return;
        }
        let n = (c.input.len() as u64).min(self.body_left) as usize;
        let bytes = &c.input.pending()[..n];
        if matches!(g.cfg.routes[self.route].handler, Handler::Fork(_)) {
            self.body.extend_from_slice(bytes);
        } else {
            fastcgi::encode_stdin(&mut self.req, ID, bytes);
        }
        g.stats.bytes_in += n as u64;
        c.input.consume(n);
        self.body_left -= n as u64;
        if self.body_left == 0 && !matches!(g.cfg.routes[self.route].handler, Handler::Fork(_)) {
            fastcgi::encode_stdin_end(&mut self.req, ID);
        }
    }

    /// Move the request forward.
    pub(super) fn drive(&mut self, g: &mut Cgi, c: &mut Conn, date: &[u8], now: Instant) -> Done {
        if let Some(code) = self.failed {
            return self.fail(g, c, date, code);
        }
        self.take_body(g, c);
        if matches!(g.cfg.routes[self.route].handler, Handler::Fork(_)) {
            return super::fork::drive(self, g, c, date, now);
        }
        if self.phase == Phase::Drain {
            return self.drained(c);
        }
        let Some(up) = self.up.or_else(|| self.connect(g, c.token, now)) else {
            return match self.failed {
                Some(code) => self.fail(g, c, date, code),
                None => Done::No,
            };
        };
        // The whole request goes out in this call's one send.
        let whole = self.req_at == 0 && self.body_left == 0 && !self.req.is_empty();
        if self.req_at < self.req.len() {
            let Some(u) = g.ups.get(up) else {
                return self.fail(g, c, date, 502);
            };
            let want = self.req.len() - self.req_at;
            match sys::send(&u.fd, &self.req[self.req_at..], false) {
                Ok(n) => {
                    self.req_at += n;
                    if n < want {
                        g.spent(up, false, true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => g.spent(up, false, true),
                Err(_) => {
                    self.replace = true;
                    return self.fail(g, c, date, 502);
                }
            }
        }
        if self.req_at == self.req.len() {
            self.req.clear();
            self.req_at = 0;
            g.want(up, Interest::READ);
            if whole && self.phase == Phase::Head {
                // The application has not seen the request yet: its answer
                // comes with a readiness event (a read now is an EAGAIN).
                return Done::No;
            }
        } else {
            g.want(up, Interest::BOTH);
        }
        match self.read_reply(g, c, up, date, now) {
            Ok(d) => d,
            Err(code) => self.fail(g, c, date, code),
        }
    }

    /// Take a connection; None: wait (queued) or failed (see `failed`).
    fn connect(&mut self, g: &mut Cgi, client: Token, now: Instant) -> Option<Token> {
        match g.acquire(self.route, client) {
            Ok(Some(t)) => {
                self.waiting = false;
                self.up = Some(t);
                self.phase = Phase::Head;
                self.deadline = now + self.timeout;
                Some(t)
            }
            Ok(None) => {
                self.waiting = true;
                let w = &mut g.routes[self.route].waiting;
                if !w.contains(&client) {
                    w.push_back(client);
                }
                None
            }
            Err(()) => {
                self.failed = Some(502);
                None
            }
        }
    }

    /// Read what the application sent: Err(status) when it is unusable.
    fn read_reply(&mut self, g: &mut Cgi, c: &mut Conn, up: Token, date: &[u8], now: Instant) -> Result<Done, u16> {
        let fd = g.ups.get(up).ok_or(502u16)?.fd.raw();
        let mut queued = false;
        let mut buf = std::mem::take(&mut g.scratch);
        if buf.len() < READ_MAX {
            buf.resize(READ_MAX, 0);
        }
        let r = loop {
            if self.reader.is_done() {
                break Ok(self.ended(g, c));
            }
            if c.out.len() >= QUEUED_MAX {
                // The client is behind: stop hearing from the application
                // until it has taken some.
                g.want(up, Interest::NONE);
                break Ok(if queued { Done::Queued } else { Done::No });
            }
            if !g.may_read(up) {
                // Nothing came since a read found the socket empty.
                break Ok(if queued { Done::Queued } else { Done::No });
            }
            let left = self.reader.content_left();
            if left > 0 && self.stdout && self.phase == Phase::Body && self.splices(g, left) {
                match self.splice_payload(g, c, fd, left) {
                    Ok(true) => {
                        queued = true;
                        self.deadline = now + self.timeout;
                        continue;
                    }
                    Ok(false) => {
                        if self.stalled {
                            // The client is behind: stop hearing from the
                            // application until its pipe drains.
                            g.want(up, Interest::NONE);
                        } else {
                            // The socket was empty.
                            g.spent(up, true, false);
                        }
                        break Ok(if queued { Done::Queued } else { Done::No });
                    }
                    Err(code) => break Err(code),
                }
            }
            let want = if left > 0 {
                if self.stdout && self.phase == Phase::Head && self.splice {
                    match self.peek_head(g, c, fd, left, &mut buf, date) {
                        Ok(Some(n)) => n,
                        Ok(None) => {
                            g.spent(up, true, false);
                            break Ok(if queued { Done::Queued } else { Done::No });
                        }
                        Err(code) => break Err(code),
                    }
                } else if self.splice {
                    left.min(READ_MAX)
                } else {
                    READ_MAX
                }
            } else if self.splice {
                // The padding and the next header, and a little more: the
                // end of a reply (a short record, END_REQUEST) in one read,
                // at the price of copying up to HEADER_SLACK payload bytes.
                self.reader.padding_left() + HEADER_LEN + HEADER_SLACK
            } else {
                READ_MAX
            };
            let n = match sys::recv_now(fd, &mut buf[..want]) {
                Ok(0) => break Err(502),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    g.spent(up, true, false);
                    break Ok(if queued { Done::Queued } else { Done::No });
                }
                Err(_) => break Err(502),
            };
            self.deadline = now + self.timeout;
            match self.feed(g, c, &buf[..n], date) {
                Ok(q) => queued |= q,
                Err(code) => break Err(code),
            }
            if self.phase == Phase::Drain || self.failed.is_some() {
                break Ok(Done::Queued);
            }
        };
        g.scratch = buf;
        if r.is_err() {
            self.replace = true;
        }
        r
    }

    /// Splice this payload? (Not for small records, copy mode or HEAD.)
    fn splices(&mut self, g: &mut Cgi, left: usize) -> bool {
        if !self.splice || self.frame == Frame::Discard || left < SPLICE_MIN {
            return false;
        }
        if self.pipe.is_none() {
            self.pipe = g.pipes.get().ok();
        }
        self.pipe.is_some()
    }

    /// Splice up to `left` payload bytes into the pipe and queue them.
    /// Ok(false): nothing moved (the pipe is full or the socket empty).
    fn splice_payload(&mut self, g: &mut Cgi, c: &mut Conn, fd: i32, left: usize) -> Result<bool, u16> {
        let pipe = self.pipe.as_ref().ok_or(502u16)?;
        let in_pipe = (c.out.len() - c.out.memory_len() as u64) as usize;
        let room = pipe.capacity().saturating_sub(in_pipe);
        let mut n = left.min(room);
        if let Frame::Length(l) = self.frame {
            if l == 0 {
                self.overrun(g, c);
                return Ok(true);
            }
            n = n.min(l as usize);
        }
        self.stalled = n == 0;
        if n == 0 {
            return Ok(false);
        }
        match sys::splice(fd, pipe.write_fd(), n, false) {
            Ok(0) => Err(502),
            Ok(k) => {
                c.out.push_pipe(pipe.read_fd(), k);
                g.stats.bytes_spliced += k as u64;
                self.sent += k as u64;
                self.reader.content_consumed(k);
                if let Frame::Length(l) = &mut self.frame {
                    *l -= k as u64;
                }
                self.close_chunk(c);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // From a full pipe or an empty socket. A pipe can be full
                // before its bytes are (a TCP socket's segments take a slot
                // each; 256 slots make a 1 MiB pipe), and then the
                // application must not be heard from until the client takes
                // some: a readable event left unanswered spun the loop (a
                // whole CPU for a client that did not read a 3 MB reply over
                // TCP). Only a pipe that holds bytes can be full, so only
                // then is the socket asked (one ioctl) which it was.
                self.stalled = in_pipe > 0 && sys::bytes_readable(fd).is_ok_and(|n| n > 0);
                Ok(false)
            }
            Err(_) => Err(502),
        }
    }

    /// Head phase: peek into the payload; if the head ends in it, return how
    /// many bytes to take (exactly the head's), else all that was peeked.
    fn peek_head(
        &mut self,
        g: &mut Cgi,
        c: &mut Conn,
        fd: i32,
        left: usize,
        buf: &mut [u8],
        date: &[u8],
    ) -> Result<Option<usize>, u16> {
        let max = (g.cfg.max_head + 1).saturating_sub(self.head.len()).clamp(1, READ_MAX);
        let n = match sys::peek(fd, &mut buf[..left.min(max)]) {
            Ok(0) => return Err(502),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(_) => return Err(502),
        };
        let old = self.head.len();
        self.head.extend_from_slice(&buf[..n]);
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let found = match parse_head(&self.head, &mut fields, g.cfg.max_head) {
            Ok(Some(h)) => Some(h.len),
            Ok(None) => None,
            Err(_) => return Err(502),
        };
        self.head.truncate(old);
        let _ = (c, date);
        Ok(Some(match found {
            // The rest of a small record comes along (copied); a large one
            // is spliced after exactly the head's bytes.
            Some(len) if left - (len - old) >= SPLICE_MIN => len - old,
            _ => n,
        }))
    }

    /// Feed bytes read from the application. Ok(true): output queued.
    fn feed(&mut self, g: &mut Cgi, c: &mut Conn, mut bytes: &[u8], date: &[u8]) -> Result<bool, u16> {
        let mut queued = false;
        while !bytes.is_empty() {
            let (k, step) = self.reader.feed(bytes).map_err(|e: FcgiError| {
                weft_core::debug!("cgi: {e}");
                502u16
            })?;
            let taken = &bytes[..k];
            bytes = &bytes[k..];
            match step {
                Step::Header(h) => {
                    self.stdout = h.kind == RecordType::Stdout;
                    if self.stdout && self.phase == Phase::Body && h.content_length > 0 {
                        self.open_chunk(c, h.content_length as u64);
                    }
                }
                Step::Stdout(n) => {
                    queued |= self.stdout_bytes(g, c, &taken[k - n..], date)?;
                    if self.phase == Phase::Drain || self.failed.is_some() {
                        return Ok(true);
                    }
                }
                Step::Stderr(n) => {
                    let line = String::from_utf8_lossy(&taken[k - n..]);
                    weft_core::debug!("cgi stderr: {}", line.trim_end());
                }
                Step::End(_) | Step::NeedMore => {}
            }
        }
        Ok(queued)
    }

    /// STDOUT payload bytes read into user space.
    pub(super) fn stdout_bytes(&mut self, g: &mut Cgi, c: &mut Conn, bytes: &[u8], date: &[u8]) -> Result<bool, u16> {
        if self.phase != Phase::Head {
            self.body_copy(g, c, bytes);
            return Ok(true);
        }
        let old = self.head.len();
        self.head.extend_from_slice(bytes);
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let head = std::mem::take(&mut self.head);
        let parsed = parse_head(&head, &mut fields, g.cfg.max_head);
        let len = match parsed {
            Ok(None) => {
                self.head = head;
                return Ok(false);
            }
            Err(e) => {
                weft_core::debug!("cgi: {e}");
                return Err(502);
            }
            Ok(Some(h)) if h.kind == CgiKind::LocalRedirect && h.status == 200 => {
                // RFC 3875 §6.2.2: no Status, a local path: the server serves
                // that path instead (GET), once this reply is over.
                let loc = h.location.unwrap_or(b"/");
                if loc.len() > 8192 || !loc.iter().all(|b| (0x21..0x7f).contains(b)) {
                    return Err(502);
                }
                self.redirect = Some(loc.to_vec());
                self.frame = Frame::Discard;
                h.len
            }
            Ok(Some(h)) => {
                self.write_head(c, &h, date);
                h.len
            }
        };
        self.phase = Phase::Body;
        let rest = &head[len.max(old)..];
        // The rest of this record (what came with the head, and what is
        // still to come of its payload) is one chunk.
        let more = self.reader.content_left() as u64;
        if rest.len() as u64 + more > 0 {
            self.open_chunk(c, rest.len() as u64 + more);
        }
        self.body_copy(g, c, rest);
        self.head = head;
        self.head.clear();
        Ok(true)
    }

    /// Write the client's response head for the program's CGI head.
    fn write_head(&mut self, c: &mut Conn, h: &weft_http::fastcgi::head::CgiHead<'_, '_>, date: &[u8]) {
        let out = c.out.own_mut();
        let status = h.status;
        self.status = status;
        respond::start_head(out, status, date);
        if let Some(ct) = h.content_type {
            weft_http::encode::field(out, b"Content-Type", ct);
        }
        if let Some(l) = h.location {
            weft_http::encode::field(out, b"Location", l);
        }
        for (n, v) in h.fields() {
            if !(n.eq_ignore_ascii_case("server") || n.eq_ignore_ascii_case("date")) {
                weft_http::encode::field(out, n.as_bytes(), v);
            }
        }
        let no_body = status == 204 || status == 304 || (100..200).contains(&status);
        let mut persist = self.persist;
        self.frame = match h.content_length() {
            _ if no_body => Frame::Discard,
            Some(n) => Frame::Length(n),
            None if self.http10 => {
                persist = Persist::Close;
                self.persist = Persist::Close;
                Frame::Close
            }
            None => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                Frame::Chunked
            }
        };
        let len = match self.frame {
            Frame::Length(n) => Some(n),
            _ => None,
        };
        respond::end_head(out, len, persist);
        if self.head_only {
            self.frame = Frame::Discard;
        }
    }

    pub(super) fn open_chunk(&mut self, c: &mut Conn, len: u64) {
        if self.frame == Frame::Chunked && len > 0 {
            let out = c.out.own_mut();
            let before = out.len();
            let _ = write!(out, "{len:x}\r\n");
            self.sent += (out.len() - before + 2) as u64;
            self.chunk_open = true;
        }
    }

    pub(super) fn close_chunk(&mut self, c: &mut Conn) {
        if self.chunk_open && self.reader.content_left() == 0 {
            c.out.own_mut().extend_from_slice(b"\r\n");
            self.chunk_open = false;
        }
    }

    /// Body bytes in user space: queue them (within the declared length).
    pub(super) fn body_copy(&mut self, g: &mut Cgi, c: &mut Conn, bytes: &[u8]) {
        let take = match self.frame {
            Frame::Discard => 0,
            Frame::Length(l) => (l as usize).min(bytes.len()),
            Frame::Chunked | Frame::Close => bytes.len(),
        };
        c.out.push_copy(&bytes[..take]);
        g.stats.bytes_copied += take as u64;
        self.sent += take as u64;
        if let Frame::Length(l) = &mut self.frame {
            *l -= take as u64;
            if take < bytes.len() {
                self.overrun(g, c);
                return;
            }
        }
        self.close_chunk(c);
    }

    /// The program wrote past its Content-Length: the response is complete
    /// as declared; the rest is dropped and the process replaced.
    pub(super) fn overrun(&mut self, g: &mut Cgi, c: &mut Conn) {
        if self.phase == Phase::Drain {
            return;
        }
        g.stats.cut += 1;
        self.replace = true;
        self.phase = Phase::Drain;
        let _ = c;
    }

    /// END_REQUEST (or a CGI/1.1 program's EOF) read.
    pub(super) fn ended(&mut self, g: &mut Cgi, c: &mut Conn) -> Done {
        if self.phase == Phase::Head {
            self.failed = Some(502);
            self.replace = true;
            return Done::Queued;
        }
        match self.frame {
            Frame::Length(l) if l > 0 => {
                g.stats.aborted += 1;
                c.close_after = true;
            }
            Frame::Chunked => {
                if self.chunk_open {
                    c.out.own_mut().extend_from_slice(b"\r\n");
                    self.chunk_open = false;
                }
                c.out.own_mut().extend_from_slice(b"0\r\n\r\n");
                self.sent += 5;
            }
            _ => {}
        }
        if self.reader.padding_left() > 0 {
            // END_REQUEST's padding is not read: the connection is not reused.
            if let Some(u) = self.up.and_then(|t| g.ups.get_mut(t)) {
                u.broken = true;
            }
        }
        // The reply is whole (its last bytes are in the pipe or the output
        // chain): the application's connection can take the next request
        // while this client takes its bytes. Held until the client drained
        // the pipe, it made a slow client hold the application: with a
        // `--cgi` pool of one process every other client waited for it, and
        // past `--cgi-timeout` the process was replaced (tests/cgi.rs,
        // a_slow_client_does_not_hold_the_pool_process_*).
        if let Some(up) = self.up.take() {
            g.release(up, self.replace);
        }
        self.phase = Phase::Drain;
        Done::Queued
    }

    /// Over once the spliced bytes have left the pipe.
    pub(super) fn drained(&mut self, c: &Conn) -> Done {
        if c.out.len() > c.out.memory_len() as u64 {
            Done::No
        } else {
            Done::Yes
        }
    }

    /// Answer `code` (nothing was sent yet), or cut the response (its head
    /// was sent: the client must see it incomplete).
    fn fail(&mut self, g: &mut Cgi, c: &mut Conn, date: &[u8], code: u16) -> Done {
        self.failed = None;
        self.replace |= self.up.is_some() || self.proc.is_some();
        // Nothing was sent for a local redirect's reply either.
        let unsent = matches!(self.phase, Phase::Queued | Phase::Head) || self.redirect.take().is_some();
        match self.phase {
            _ if unsent => {
                if code == 504 {
                    g.stats.status_504 += 1;
                } else {
                    g.stats.status_502 += 1;
                }
                let why = if code == 504 {
                    "the CGI program did not answer in time"
                } else {
                    "the CGI program's answer was unusable"
                };
                if self.body_left > 0 {
                    // The rest of the body will not be read.
                    self.persist = Persist::Close;
                    c.linger_on_close = true;
                }
                self.status = code;
                self.sent += respond::simple(c.out.own_mut(), code, date, b"", why, self.head_only, self.persist);
            }
            _ => {
                g.stats.aborted += 1;
                c.close_after = true;
            }
        }
        // Whatever the pipe holds is still queued: it leaves before the close.
        self.phase = Phase::Drain;
        self.drained(c)
    }

    /// The request is over: give the connection and the pipe back.
    pub(super) fn finish(&mut self, g: &mut Cgi, c: &mut Conn) {
        if self.persist == Persist::Close && self.redirect.is_none() {
            c.close_after = true;
        }
        if c.input.is_empty() {
            c.head_started = None;
        }
        let in_pipe = (c.out.len() - c.out.memory_len() as u64) as usize;
        if let Some(p) = self.pipe.take() {
            g.pipes.put(p, in_pipe);
        }
        if let Some(up) = self.up.take() {
            g.release(up, self.replace);
        }
        if let Some(p) = self.proc.take() {
            super::fork::reap(g, p, self.replace);
        }
        if self.waiting {
            g.routes[self.route].waiting.retain(|t| *t != c.token);
        }
    }

    /// The client went away mid-request.
    pub(super) fn abandon(mut self, g: &mut Cgi) {
        if let Some(p) = self.pipe.take() {
            g.pipes.put(p, 1);
        }
        if let Some(up) = self.up.take() {
            if let Some(u) = g.ups.get_mut(up) {
                u.broken = true;
            }
            g.release(up, false);
        }
        if let Some(p) = self.proc.take() {
            super::fork::reap(g, p, true);
        }
    }
}
