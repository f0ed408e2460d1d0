//! The disk store's record reader: a file of any bytes is either refused as
//! damaged or gives an object whose head and body fill the file exactly.
//! Half the inputs are well-formed records (right lengths and CRC) built from
//! the fuzzer's key, head and body, so the reader's later checks are reached.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_proxy::disk::decode_record;

fn record(key: &[u8], vary: &[u8], head: &[u8], body: &[u8], times: (u64, u64)) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(b"WEFTOBJ2");
    r.extend_from_slice(&(key.len() as u32).to_le_bytes());
    r.extend_from_slice(&(vary.len() as u32).to_le_bytes());
    r.extend_from_slice(&(head.len() as u32).to_le_bytes());
    r.extend_from_slice(&(body.len() as u64).to_le_bytes());
    r.extend_from_slice(&times.0.to_le_bytes());
    r.extend_from_slice(&times.1.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(body);
    r.extend_from_slice(&h.finalize().to_le_bytes());
    r.extend_from_slice(key);
    r.extend_from_slice(vary);
    r.extend_from_slice(head);
    r.extend_from_slice(body);
    r
}

fuzz_target!(|input: (bool, &[u8], &[u8], &[u8], &[u8], (u64, u64))| {
    let (build, key, vary, head, body, times) = input;
    let file = if build {
        record(key, vary, head, body, times)
    } else {
        [key, vary, head, body].concat()
    };
    if let Some((h, b)) = decode_record(&file, 1 << 20) {
        assert!(h + b <= file.len());
        if build {
            assert_eq!((h, b), (head.len(), body.len()));
        }
    }
});
