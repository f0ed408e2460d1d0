//! weft-buf's Aggregate against a plain Vec<u8> model: any sequence of push,
//! prepend, append, slice and advance keeps the same bytes and length, and
//! io_slices covers the front segments.
#![no_main]
use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::io::IoSlice;
use weft_buf::Aggregate;

#[derive(Arbitrary, Debug)]
enum Op {
    Push(Vec<u8>),
    Prepend(Vec<u8>),
    AppendSelf,
    Slice(u16, u16),
    Advance(u16),
    IoSlices(u8),
}

fuzz_target!(|ops: Vec<Op>| {
    let mut agg = Aggregate::new();
    let mut model: Vec<u8> = Vec::new();
    for op in ops.into_iter().take(32) {
        match op {
            Op::Push(v) => {
                model.extend_from_slice(&v);
                agg.push(Bytes::from(v));
            }
            Op::Prepend(v) => {
                model.splice(0..0, v.iter().copied());
                agg.prepend(Bytes::from(v));
            }
            Op::AppendSelf => {
                // Bounded in bytes and in segments: doubling 1-byte segments
                // reached 4096 of them, and every op's whole-content check
                // then walked them all (most of the target's time, for no
                // state that 64 segments do not already reach).
                if model.len() < 1 << 12 && agg.segments().len() <= 64 {
                    let copy = agg.clone();
                    agg.append(&copy);
                    model.extend_from_slice(&model.clone());
                }
            }
            Op::Slice(a, b) => {
                let (a, b) = (a as usize, b as usize);
                let s = agg.slice(a, b);
                let end = b.min(model.len());
                let want: &[u8] = if a >= end { &[] } else { &model[a..end] };
                assert_eq!(s.to_vec(), want);
                assert_eq!(s.len(), want.len());
                assert!(s.segments().iter().all(|x| !x.is_empty()));
            }
            Op::Advance(n) => {
                let n = (n as usize).min(model.len());
                agg.advance(n as usize);
                model.drain(..n);
            }
            Op::IoSlices(k) => {
                let mut iov = vec![IoSlice::new(&[]); k as usize % 8];
                let got = agg.io_slices(&mut iov);
                let front: Vec<u8> = iov[..got].iter().flat_map(|s| s.iter().copied()).collect();
                assert!(model.starts_with(&front));
            }
        }
        assert_eq!(agg.len(), model.len());
        assert_eq!(agg.is_empty(), model.is_empty());
        assert_eq!(agg.to_vec(), model);
    }
});
