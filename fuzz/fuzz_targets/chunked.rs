//! The chunked decoder: never panic; the data it reports lies inside the input;
//! decoding in two pieces gives the same data as decoding at once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weft_http::ChunkedDecoder;

fuzz_target!(|input: (u16, &[u8])| {
    let (cut, data) = input;
    let mut whole = Vec::new();
    let mut d = ChunkedDecoder::new();
    let r1 = d.decode_all(data, |b| whole.extend_from_slice(b));
    let cut = (cut as usize) % (data.len() + 1);
    let mut split = Vec::new();
    let mut e = ChunkedDecoder::new();
    let r2 = e
        .decode_all(&data[..cut], |b| split.extend_from_slice(b))
        .and_then(|a| {
            if e.is_done() {
                Ok(a)
            } else {
                e.decode_all(&data[cut..], |b| split.extend_from_slice(b))
                    .map(|b| a + b)
            }
        });
    match (r1, r2) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            assert_eq!(whole, split);
            assert_eq!(d.is_done(), e.is_done());
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("whole {a:?} vs split {b:?}"),
    }
});
