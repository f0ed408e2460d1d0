//! FastCGI, sans I/O: the responder role as the web server speaks it
//! (FastCGI 1.0 specification), for `--fastcgi` (php-fpm and every other
//! FastCGI application server) and weft's own persistent CGI workers
//! (Flash-Lite's persistent CGI, thesis 004 §2.3, issue 24).
//!
//! Every record is an 8-byte header (version 1, type, request id, content
//! length ≤ 65,535, padding length ≤ 255) followed by content and padding.
//!
//! - Encoding (into a caller's `Vec`, reused across requests):
//!   [`encode_begin_request`], [`encode_params`] (name-value pairs with 1- or
//!   4-byte lengths, split across records as needed) and [`encode_params_end`],
//!   [`encode_stdin`] and [`encode_stdin_end`]; [`record_header`] alone, for a
//!   caller that splices a request body in after it.
//! - Decoding ([`RecordReader`]): incremental over whatever bytes arrived,
//!   split anywhere. Each STDOUT/STDERR record is announced by its header
//!   first ([`Step::Header`], with content and padding lengths) so a caller
//!   may splice the content straight from the socket to the client and then
//!   skip the padding ([`RecordReader::content_consumed`],
//!   [`RecordReader::padding_skipped`]) without the bytes entering its address
//!   space; or it may feed the bytes and get [`Step::Stdout`] /
//!   [`Step::Stderr`] lengths of the input to take. END_REQUEST ends it.
//! - [`head`]: the CGI response head (Status, Content-Type, Location, other
//!   fields) at the start of STDOUT, with limits.
//! - [`env`](mod@env): the CGI/1.1 meta-variables (RFC 3875 §4.1) built from a request
//!   head, written as FastCGI params or as a fork-per-request environment.
//!
//! Malformed input is a [`FcgiError`]; the caller answers 502 and drops the
//! application connection. Lengths are bounded by the format itself (content
//! ≤ 65,535, padding ≤ 255) and by the caller's limits on the head.

pub mod env;
pub mod head;
#[cfg(test)]
mod tests;

/// Protocol version 1.
pub const VERSION: u8 = 1;
/// The responder role.
pub const ROLE_RESPONDER: u16 = 1;
/// BEGIN_REQUEST flag: keep the application connection open after the request.
pub const FLAG_KEEP_CONN: u8 = 1;
/// Largest content of one record.
pub const MAX_CONTENT: usize = 65_535;
/// Length of a record header.
pub const HEADER_LEN: usize = 8;

/// Record types (spec §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    /// FCGI_BEGIN_REQUEST
    BeginRequest = 1,
    /// FCGI_ABORT_REQUEST
    AbortRequest = 2,
    /// FCGI_END_REQUEST
    EndRequest = 3,
    /// FCGI_PARAMS
    Params = 4,
    /// FCGI_STDIN
    Stdin = 5,
    /// FCGI_STDOUT
    Stdout = 6,
    /// FCGI_STDERR
    Stderr = 7,
    /// FCGI_DATA
    Data = 8,
    /// FCGI_GET_VALUES
    GetValues = 9,
    /// FCGI_GET_VALUES_RESULT
    GetValuesResult = 10,
    /// FCGI_UNKNOWN_TYPE
    UnknownType = 11,
}

impl RecordType {
    fn from_u8(b: u8) -> Option<RecordType> {
        use RecordType::*;
        Some(match b {
            1 => BeginRequest,
            2 => AbortRequest,
            3 => EndRequest,
            4 => Params,
            5 => Stdin,
            6 => Stdout,
            7 => Stderr,
            8 => Data,
            9 => GetValues,
            10 => GetValuesResult,
            11 => UnknownType,
            _ => return None,
        })
    }
}

/// Why the application's output is unusable (the caller answers 502).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcgiError {
    /// A record header with a version other than 1.
    Version(u8),
    /// A record type the web server never receives, or an unknown one.
    UnexpectedType(u8),
    /// A record for a request id other than the one in flight.
    RequestId(u16),
    /// An END_REQUEST record whose content is not 8 bytes.
    BadEndRequest,
    /// Bytes after END_REQUEST.
    AfterEnd,
    /// A name-value pair whose lengths run past the record.
    BadParams,
    /// The CGI response head is malformed (see [`head`]).
    BadHead(&'static str),
    /// The CGI response head exceeds the caller's limit.
    HeadTooLarge,
}

impl std::fmt::Display for FcgiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FcgiError::Version(v) => write!(f, "FastCGI record version {v}"),
            FcgiError::UnexpectedType(t) => write!(f, "unexpected FastCGI record type {t}"),
            FcgiError::RequestId(id) => write!(f, "FastCGI record for request {id}"),
            FcgiError::BadEndRequest => f.write_str("malformed FastCGI END_REQUEST"),
            FcgiError::AfterEnd => f.write_str("FastCGI output after END_REQUEST"),
            FcgiError::BadParams => f.write_str("malformed FastCGI name-value pair"),
            FcgiError::BadHead(why) => write!(f, "malformed CGI response head: {why}"),
            FcgiError::HeadTooLarge => f.write_str("CGI response head too large"),
        }
    }
}

impl std::error::Error for FcgiError {}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The record type.
    pub kind: RecordType,
    /// Request id (0: a management record).
    pub request_id: u16,
    /// Content bytes that follow the header.
    pub content_length: u16,
    /// Padding bytes that follow the content.
    pub padding_length: u8,
}

impl RecordHeader {
    /// Parse 8 header bytes.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<RecordHeader, FcgiError> {
        if b[0] != VERSION {
            return Err(FcgiError::Version(b[0]));
        }
        let kind = RecordType::from_u8(b[1]).ok_or(FcgiError::UnexpectedType(b[1]))?;
        Ok(RecordHeader {
            kind,
            request_id: u16::from_be_bytes([b[2], b[3]]),
            content_length: u16::from_be_bytes([b[4], b[5]]),
            padding_length: b[6],
        })
    }
}

/// The 8 header bytes of a record. Padding brings content to a multiple of 8
/// (as the specification recommends); pass `content_len` ≤ [`MAX_CONTENT`].
pub fn record_header(kind: RecordType, request_id: u16, content_len: usize) -> [u8; HEADER_LEN] {
    let len = content_len.min(MAX_CONTENT) as u16;
    let id = request_id.to_be_bytes();
    let l = len.to_be_bytes();
    [
        VERSION,
        kind as u8,
        id[0],
        id[1],
        l[0],
        l[1],
        padding_for(len as usize),
        0,
    ]
}

fn padding_for(len: usize) -> u8 {
    ((8 - len % 8) % 8) as u8
}

fn push_record(out: &mut Vec<u8>, kind: RecordType, id: u16, content: &[u8]) {
    out.extend_from_slice(&record_header(kind, id, content.len()));
    out.extend_from_slice(content);
    out.resize(out.len() + padding_for(content.len()) as usize, 0);
}

/// Append a stream's records for `data` (split at [`MAX_CONTENT`]); nothing for
/// empty data (the empty record is the stream's end).
fn push_stream(out: &mut Vec<u8>, kind: RecordType, id: u16, data: &[u8]) {
    for part in data.chunks(MAX_CONTENT) {
        push_record(out, kind, id, part);
    }
}

/// BEGIN_REQUEST for the responder role.
pub fn encode_begin_request(out: &mut Vec<u8>, request_id: u16, keep_conn: bool) {
    let r = ROLE_RESPONDER.to_be_bytes();
    let flags = if keep_conn { FLAG_KEEP_CONN } else { 0 };
    push_record(
        out,
        RecordType::BeginRequest,
        request_id,
        &[r[0], r[1], flags, 0, 0, 0, 0, 0],
    );
}

/// Append one name-value pair's encoding (lengths < 128 in one byte, else four
/// with the high bit set). Lengths are capped at 2^31 − 1 by truncation.
pub fn encode_pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    for len in [name.len(), value.len()] {
        if len < 128 {
            out.push(len as u8);
        } else {
            out.extend_from_slice(&((len.min(0x7fff_ffff) as u32) | 0x8000_0000).to_be_bytes());
        }
    }
    out.extend_from_slice(&name[..name.len().min(0x7fff_ffff)]);
    out.extend_from_slice(&value[..value.len().min(0x7fff_ffff)]);
}

/// PARAMS records carrying `pairs`. `scratch` is the caller's reused buffer for
/// the encoded stream (cleared here). Call [`encode_params_end`] after the last.
pub fn encode_params<'a>(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    request_id: u16,
    pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    scratch.clear();
    for (n, v) in pairs {
        encode_pair(scratch, n, v);
    }
    push_stream(out, RecordType::Params, request_id, scratch);
}

/// PARAMS records carrying pairs already encoded with [`encode_pair`] (a
/// caller that emits its pairs through a callback, as [`env::cgi_env`] does).
pub fn encode_params_encoded(out: &mut Vec<u8>, request_id: u16, encoded: &[u8]) {
    push_stream(out, RecordType::Params, request_id, encoded);
}

/// The empty PARAMS record that ends the parameters.
pub fn encode_params_end(out: &mut Vec<u8>, request_id: u16) {
    push_record(out, RecordType::Params, request_id, &[]);
}

/// STDIN records carrying `data` (a request body, or a part of it).
pub fn encode_stdin(out: &mut Vec<u8>, request_id: u16, data: &[u8]) {
    push_stream(out, RecordType::Stdin, request_id, data);
}

/// The empty STDIN record that ends the request body.
pub fn encode_stdin_end(out: &mut Vec<u8>, request_id: u16) {
    push_record(out, RecordType::Stdin, request_id, &[]);
}

/// Decode name-value pairs from a PARAMS or GET_VALUES_RESULT stream,
/// calling `each` per pair. Lengths that run past `data` are an error.
pub fn decode_pairs(mut data: &[u8], mut each: impl FnMut(&[u8], &[u8])) -> Result<(), FcgiError> {
    fn len(d: &mut &[u8]) -> Result<usize, FcgiError> {
        let first = *d.first().ok_or(FcgiError::BadParams)?;
        if first < 128 {
            *d = &d[1..];
            return Ok(first as usize);
        }
        let b: [u8; 4] = d.get(..4).ok_or(FcgiError::BadParams)?.try_into().unwrap_or([0; 4]);
        *d = &d[4..];
        Ok((u32::from_be_bytes(b) & 0x7fff_ffff) as usize)
    }
    while !data.is_empty() {
        let n = len(&mut data)?;
        let v = len(&mut data)?;
        if n.checked_add(v).is_none_or(|t| t > data.len()) {
            return Err(FcgiError::BadParams);
        }
        each(&data[..n], &data[n..n + v]);
        data = &data[n + v..];
    }
    Ok(())
}

/// How the application ended the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndRequest {
    /// The application's exit status.
    pub app_status: u32,
    /// 0 complete, 1 cannot multiplex, 2 overloaded, 3 unknown role.
    pub protocol_status: u8,
}

/// One thing [`RecordReader::feed`] found at the start of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Need more input (everything given was consumed).
    NeedMore,
    /// A STDOUT or STDERR record header was read: its content (and then its
    /// padding) follows. A caller that splices takes the content from the
    /// socket itself and reports it with [`RecordReader::content_consumed`].
    Header(RecordHeader),
    /// The next `n` input bytes are STDOUT content.
    Stdout(usize),
    /// The next `n` input bytes are STDERR content.
    Stderr(usize),
    /// The request is over; nothing more may follow.
    End(EndRequest),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Collecting a header (`have` bytes so far).
    Header,
    /// Inside a STDOUT/STDERR record's content.
    Content,
    /// Inside a management record's content (skipped).
    Ignore,
    /// Collecting END_REQUEST's 8 content bytes.
    End,
    /// Skipping padding.
    Padding,
    /// END_REQUEST seen.
    Done,
}

/// The incremental decoder of the records a responder sends back.
#[derive(Clone, Debug)]
pub struct RecordReader {
    request_id: u16,
    state: State,
    buf: [u8; HEADER_LEN],
    have: usize,
    kind: RecordType,
    content_left: usize,
    padding_left: usize,
}

impl RecordReader {
    /// A reader for the records of `request_id`.
    pub fn new(request_id: u16) -> RecordReader {
        RecordReader {
            request_id,
            state: State::Header,
            buf: [0; HEADER_LEN],
            have: 0,
            kind: RecordType::Stdout,
            content_left: 0,
            padding_left: 0,
        }
    }

    /// Content bytes of the current record still to come.
    pub fn content_left(&self) -> usize {
        if self.state == State::Content {
            self.content_left
        } else {
            0
        }
    }

    /// Padding bytes of the current record still to skip.
    pub fn padding_left(&self) -> usize {
        if matches!(self.state, State::Content | State::Padding | State::Done) {
            self.padding_left
        } else {
            0
        }
    }

    /// True once END_REQUEST has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The caller moved `n` (≤ [`Self::content_left`]) content bytes itself
    /// (splice).
    pub fn content_consumed(&mut self, n: usize) {
        if self.state == State::Content {
            self.content_left -= n.min(self.content_left);
            self.after_content();
        }
    }

    /// The caller skipped `n` (≤ [`Self::padding_left`]) padding bytes itself.
    pub fn padding_skipped(&mut self, n: usize) {
        if self.state == State::Padding {
            self.padding_left -= n.min(self.padding_left);
            if self.padding_left == 0 {
                self.state = State::Header;
            }
        }
    }

    fn after_content(&mut self) {
        if self.content_left == 0 {
            self.state = if self.padding_left > 0 {
                State::Padding
            } else {
                State::Header
            };
        }
    }

    /// Decode from the start of `input`: returns how many bytes were consumed
    /// and what was found; for [`Step::Stdout`]`(n)` / [`Step::Stderr`]`(n)`
    /// the content is the *last* `n` consumed bytes (headers and padding
    /// before it are consumed silently). Call again with the rest until
    /// [`Step::NeedMore`], which means every byte given was consumed.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, Step), FcgiError> {
        let mut used = 0;
        loop {
            let (n, step) = self.step(&input[used..])?;
            used += n;
            if step != Step::NeedMore || used == input.len() {
                return Ok((used, step));
            }
        }
    }

    fn step(&mut self, input: &[u8]) -> Result<(usize, Step), FcgiError> {
        match self.state {
            State::Done => {
                // END_REQUEST's own padding may follow; anything else is an error.
                let n = input.len().min(self.padding_left);
                self.padding_left -= n;
                if n < input.len() {
                    return Err(FcgiError::AfterEnd);
                }
                Ok((n, Step::NeedMore))
            }
            State::Header => self.feed_header(input),
            State::Content => {
                let n = input.len().min(self.content_left);
                if n == 0 {
                    return Ok((0, Step::NeedMore));
                }
                let kind = self.kind;
                self.content_consumed(n);
                Ok((
                    n,
                    if kind == RecordType::Stdout {
                        Step::Stdout(n)
                    } else {
                        Step::Stderr(n)
                    },
                ))
            }
            State::Ignore => {
                let n = input.len().min(self.content_left);
                self.content_left -= n;
                if self.content_left == 0 {
                    self.state = State::Padding;
                    self.padding_skipped(0);
                }
                Ok((n, Step::NeedMore))
            }
            State::Padding => {
                let n = input.len().min(self.padding_left);
                self.padding_skipped(n);
                Ok((n, Step::NeedMore))
            }
            State::End => {
                let n = input.len().min(HEADER_LEN - self.have);
                self.buf[self.have..self.have + n].copy_from_slice(&input[..n]);
                self.have += n;
                if self.have < HEADER_LEN {
                    return Ok((n, Step::NeedMore));
                }
                let b = self.buf;
                let end = EndRequest {
                    app_status: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    protocol_status: b[4],
                };
                // END_REQUEST's padding, if any, is accepted but never awaited.
                self.state = State::Done;
                Ok((n, Step::End(end)))
            }
        }
    }

    fn feed_header(&mut self, input: &[u8]) -> Result<(usize, Step), FcgiError> {
        let n = input.len().min(HEADER_LEN - self.have);
        self.buf[self.have..self.have + n].copy_from_slice(&input[..n]);
        self.have += n;
        if self.have < HEADER_LEN {
            return Ok((n, Step::NeedMore));
        }
        self.have = 0;
        let h = RecordHeader::parse(&self.buf)?;
        self.content_left = h.content_length as usize;
        self.padding_left = h.padding_length as usize;
        self.kind = h.kind;
        if h.request_id == 0 && matches!(h.kind, RecordType::GetValuesResult | RecordType::UnknownType) {
            self.state = State::Ignore;
            return Ok((n, Step::NeedMore));
        }
        if h.request_id != self.request_id {
            return Err(FcgiError::RequestId(h.request_id));
        }
        match h.kind {
            RecordType::Stdout | RecordType::Stderr => {
                self.state = State::Content;
                self.after_content();
                Ok((n, Step::Header(h)))
            }
            RecordType::EndRequest if h.content_length == 8 => {
                self.state = State::End;
                Ok((n, Step::NeedMore))
            }
            RecordType::EndRequest => Err(FcgiError::BadEndRequest),
            other => Err(FcgiError::UnexpectedType(other as u8)),
        }
    }
}
