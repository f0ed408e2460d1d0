use super::head::{parse_head, CgiKind};
use super::*;
use proptest::prelude::*;

/// What a decode produced, for comparing runs.
#[derive(Debug, Default, PartialEq)]
struct Decoded {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    end: Option<EndRequest>,
}

/// Encode a responder's output as records (what an application sends).
fn app_output(id: u16, stdout: &[u8], stderr: &[u8], status: u32) -> Vec<u8> {
    let mut out = Vec::new();
    push_stream(&mut out, RecordType::Stderr, id, stderr);
    push_stream(&mut out, RecordType::Stdout, id, stdout);
    push_record(&mut out, RecordType::Stdout, id, &[]);
    let s = status.to_be_bytes();
    push_record(
        &mut out,
        RecordType::EndRequest,
        id,
        &[s[0], s[1], s[2], s[3], 0, 0, 0, 0],
    );
    out
}

/// Decode `input` fed in the given pieces (copy mode).
fn decode(id: u16, input: &[u8], cuts: &[usize]) -> Result<Decoded, FcgiError> {
    let mut r = RecordReader::new(id);
    let mut d = Decoded::default();
    let mut pieces = Vec::new();
    let mut last = 0;
    for &c in cuts {
        let c = c.min(input.len()).max(last);
        pieces.push(&input[last..c]);
        last = c;
    }
    pieces.push(&input[last..]);
    for mut p in pieces {
        loop {
            let (n, step) = r.feed(p)?;
            let taken = &p[..n];
            match step {
                Step::Stdout(k) => d.stdout.extend_from_slice(&taken[n - k..]),
                Step::Stderr(k) => d.stderr.extend_from_slice(&taken[n - k..]),
                Step::End(e) => d.end = Some(e),
                Step::Header(_) | Step::NeedMore => {}
            }
            p = &p[n..];
            if step == Step::NeedMore {
                break;
            }
        }
    }
    Ok(d)
}

#[test]
fn begin_params_stdin_encode_as_the_spec_says() {
    let mut out = Vec::new();
    encode_begin_request(&mut out, 1, true);
    assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
    out.clear();
    let long = vec![b'v'; 200];
    let mut scratch = Vec::new();
    encode_params(
        &mut out,
        &mut scratch,
        1,
        [(&b"A"[..], &b"bc"[..]), (&b"LONG"[..], &long[..])],
    );
    encode_params_end(&mut out, 1);
    // Header, then 1+1+1+2 bytes for A=bc, then 1+4 length bytes + 4 + 200;
    // 214 bytes, padded by 2.
    assert_eq!(&out[..8], &[1, 4, 0, 1, 0, 214, 2, 0]);
    assert_eq!(&out[8..13], &[1, 2, b'A', b'b', b'c']);
    assert_eq!(&out[13..18], &[4, 0x80, 0, 0, 200]);
    let mut pairs = Vec::new();
    decode_pairs(&out[8..8 + 214], |n, v| pairs.push((n.to_vec(), v.to_vec()))).unwrap();
    assert_eq!(pairs, vec![(b"A".to_vec(), b"bc".to_vec()), (b"LONG".to_vec(), long)]);
    assert_eq!(out.len(), 8 + 216 + 8, "padded to 8, then the empty record");
    out.clear();
    encode_stdin(&mut out, 3, &vec![0u8; 70_000]);
    encode_stdin_end(&mut out, 3);
    assert_eq!(out.len(), 8 + 65_535 + 1 + 8 + 4465 + 7 + 8);
}

#[test]
fn splice_mode_sees_lengths_and_skips_padding() {
    let input = app_output(1, b"Content-Type: text/plain\r\n\r\nhello", b"", 0);
    let mut r = RecordReader::new(1);
    let (n, step) = r.feed(&input).unwrap();
    let Step::Header(h) = step else { panic!("{step:?}") };
    assert_eq!(
        (n, h.kind, h.content_length, h.padding_length),
        (8, RecordType::Stdout, 33, 7)
    );
    assert_eq!((r.content_left(), r.padding_left()), (33, 7));
    // The caller splices 33 bytes itself, then skips 7 of padding.
    r.content_consumed(33);
    assert_eq!(r.padding_left(), 7);
    r.padding_skipped(7);
    let rest = &input[8 + 33 + 7..];
    let (_, step) = r.feed(rest).unwrap();
    assert!(matches!(step, Step::Header(h) if h.content_length == 0));
    let (_, step) = r.feed(&rest[8..]).unwrap();
    assert_eq!(
        step,
        Step::End(EndRequest {
            app_status: 0,
            protocol_status: 0
        })
    );
    assert!(r.is_done());
}

#[test]
fn hostile_records_are_errors() {
    let mut r = RecordReader::new(1);
    assert_eq!(r.feed(&[2, 6, 0, 1, 0, 0, 0, 0]), Err(FcgiError::Version(2)));
    let mut r = RecordReader::new(1);
    assert_eq!(r.feed(&[1, 6, 0, 2, 0, 0, 0, 0]), Err(FcgiError::RequestId(2)));
    let mut r = RecordReader::new(1);
    assert_eq!(r.feed(&[1, 99, 0, 1, 0, 0, 0, 0]), Err(FcgiError::UnexpectedType(99)));
    let mut r = RecordReader::new(1);
    assert_eq!(r.feed(&[1, 1, 0, 1, 0, 0, 0, 0]), Err(FcgiError::UnexpectedType(1)));
    let mut r = RecordReader::new(1);
    assert_eq!(r.feed(&[1, 3, 0, 1, 0, 4, 0, 0]), Err(FcgiError::BadEndRequest));
    let mut after = app_output(1, b"x", b"", 0);
    after.push(0);
    assert_eq!(decode(1, &after, &[]), Err(FcgiError::AfterEnd));
    // A management record (id 0) is skipped.
    let mut m = Vec::new();
    push_record(&mut m, RecordType::GetValuesResult, 0, b"\x01\x01ab");
    m.extend(app_output(1, b"ok", b"", 0));
    assert_eq!(decode(1, &m, &[]).unwrap().stdout, b"ok");
    assert_eq!(decode_pairs(&[5, 1, b'a'], |_, _| {}), Err(FcgiError::BadParams));
    assert_eq!(decode_pairs(&[0x80, 0, 0], |_, _| {}), Err(FcgiError::BadParams));
    assert_eq!(
        decode_pairs(&[0xff, 0xff, 0xff, 0xff, 0], |_, _| {}),
        Err(FcgiError::BadParams)
    );
}

#[test]
fn cgi_heads() {
    let mut f = [httparse::EMPTY_HEADER; 16];
    let out = b"Status: 404 Gone away\nContent-Type: text/html\nX-A: 1\nConnection: close\nContent-Length: 5\n\nbody!";
    let h = parse_head(out, &mut f, 1024).unwrap().unwrap();
    assert_eq!(
        (h.status, h.reason, h.kind),
        (404, &b"Gone away"[..], CgiKind::Document)
    );
    assert_eq!(h.content_type, Some(&b"text/html"[..]));
    assert_eq!(&out[h.len..], b"body!");
    assert_eq!(h.fields().collect::<Vec<_>>(), vec![("X-A", &b"1"[..])]);
    assert_eq!(h.content_length(), Some(5));
    assert_eq!(
        status_and_kind(b"Location: http://x/\r\n\r\n"),
        Ok(Some((302, CgiKind::ClientRedirect)))
    );
    assert_eq!(
        status_and_kind(b"Location: /other\r\n\r\n"),
        Ok(Some((200, CgiKind::LocalRedirect)))
    );
    assert_eq!(status_and_kind(b"Content-Type: text/plain\r\n"), Ok(None));
    for bad in [
        &b"no colon here\n\n"[..],
        b"X-Only: 1\n\n",
        b"Status: 99 x\nContent-Type: a\n\n",
        b"Status: 2000\nContent-Type: a\n\n",
        b"Status: 100 Continue\n\n",
        b"Content-Type: a\nContent-Type: b\n\n",
        b"Content-Type: a\x00b\n\n",
    ] {
        assert!(status_and_kind(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    let mut f = [httparse::EMPTY_HEADER; 2];
    assert!(
        parse_head(b"A: 1\nB: 2\nC: 3\n\n", &mut f, 1024).is_err(),
        "field limit"
    );
    assert_eq!(status_and_kind(&[b'X'; 2000]), Err(FcgiError::HeadTooLarge));
}

/// [`parse_head`] with room for 16 fields under a 1 KiB limit: the status
/// and kind of a complete head.
fn status_and_kind(out: &[u8]) -> Result<Option<(u16, CgiKind)>, FcgiError> {
    let mut f = [httparse::EMPTY_HEADER; 16];
    Ok(parse_head(out, &mut f, 1024)?.map(|h| (h.status, h.kind)))
}

#[test]
fn cgi_environment_from_a_request_head() {
    let data = b"POST /app/run/extra?a=1&b=2 HTTP/1.1\r\nHost: example.org\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nCookie: a=1\r\nX-Thing: one\r\nx-thing: two\r\nProxy: evil\r\nX_Thing: spoof\r\nCookie: b=2\r\nConnection: keep-alive\r\n\r\n";
    let mut head = crate::RequestHead::new();
    head.parse(data, &crate::Limits::default()).unwrap().unwrap();
    let req = env::CgiRequest {
        head: &head,
        data,
        script_name: b"/app/run",
        path_info: b"/extra",
        script_filename: Some(b"/srv/app/run"),
        document_root: b"/srv",
        server_name: b"example.org",
        local: "127.0.0.1:8080".parse().unwrap(),
        remote: "[::1]:5555".parse().unwrap(),
        content_length: Some(3),
        https: false,
        server_software: "weft",
    };
    let mut vars = std::collections::BTreeMap::new();
    let mut scratch = Vec::new();
    env::cgi_env(&req, &mut scratch, |n, v| {
        assert!(vars
            .insert(
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap()
            )
            .is_none());
    });
    let get = |k: &str| vars.get(k).map(String::as_str);
    assert_eq!(get("GATEWAY_INTERFACE"), Some("CGI/1.1"));
    assert_eq!(get("REQUEST_METHOD"), Some("POST"));
    assert_eq!(get("QUERY_STRING"), Some("a=1&b=2"));
    assert_eq!(get("REQUEST_URI"), Some("/app/run/extra?a=1&b=2"));
    assert_eq!(get("PATH_INFO"), Some("/extra"));
    assert_eq!(get("PATH_TRANSLATED"), Some("/srv/extra"));
    assert_eq!(get("SERVER_PORT"), Some("8080"));
    assert_eq!(get("REMOTE_ADDR"), Some("::1"));
    assert_eq!(get("REMOTE_PORT"), Some("5555"));
    assert_eq!(get("CONTENT_LENGTH"), Some("3"));
    assert_eq!(get("CONTENT_TYPE"), Some("text/plain"));
    assert_eq!(get("SERVER_PROTOCOL"), Some("HTTP/1.1"));
    assert_eq!(get("HTTP_HOST"), Some("example.org"));
    assert_eq!(get("HTTP_X_THING"), Some("one, two"));
    assert_eq!(get("HTTP_COOKIE"), Some("a=1; b=2"));
    for absent in [
        "HTTP_PROXY",
        "HTTP_CONTENT_TYPE",
        "HTTP_CONTENT_LENGTH",
        "HTTP_CONNECTION",
        "HTTPS",
    ] {
        assert_eq!(get(absent), None, "{absent}");
    }
}

proptest! {
    #[test]
    fn records_round_trip_split_anywhere(
        stdout in proptest::collection::vec(any::<u8>(), 0..3000),
        stderr in proptest::collection::vec(any::<u8>(), 0..300),
        status in any::<u32>(),
        id in 1u16..,
        mut cuts in proptest::collection::vec(0usize..4000, 0..12),
    ) {
        let input = app_output(id, &stdout, &stderr, status);
        cuts.sort_unstable();
        let d = decode(id, &input, &cuts).unwrap();
        prop_assert_eq!(&d.stdout, &stdout);
        prop_assert_eq!(&d.stderr, &stderr);
        prop_assert_eq!(d.end, Some(EndRequest { app_status: status, protocol_status: 0 }));
    }

    #[test]
    fn every_single_cut_gives_the_same_result(stdout in proptest::collection::vec(any::<u8>(), 0..200)) {
        let input = app_output(1, &stdout, b"warn", 7);
        let whole = decode(1, &input, &[]).unwrap();
        for c in 0..=input.len() {
            prop_assert_eq!(&decode(1, &input, &[c]).unwrap(), &whole);
        }
    }

    #[test]
    fn hostile_bytes_never_panic_and_stay_bounded(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut r = RecordReader::new(1);
        let mut p = &input[..];
        while let Ok((n, step)) = r.feed(p) {
            prop_assert!(n <= p.len());
            prop_assert!(r.content_left() <= MAX_CONTENT && r.padding_left() <= 255);
            p = &p[n..];
            if step == Step::NeedMore { break; }
        }
        let _ = decode_pairs(&input, |n, v| assert!(n.len() + v.len() <= input.len()));
        let mut f = [httparse::EMPTY_HEADER; 8];
        if let Ok(Some(h)) = parse_head(&input, &mut f, 256) {
            prop_assert!(h.len <= 256 && (200..=599).contains(&h.status));
        }
    }

    #[test]
    fn pairs_round_trip(pairs in proptest::collection::vec(
        (proptest::collection::vec(any::<u8>(), 0..300), proptest::collection::vec(any::<u8>(), 0..300)), 0..8)) {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        encode_params(&mut out, &mut scratch, 1, pairs.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut back = Vec::new();
        decode_pairs(&scratch, |n, v| back.push((n.to_vec(), v.to_vec()))).unwrap();
        prop_assert_eq!(back, pairs);
    }
}
