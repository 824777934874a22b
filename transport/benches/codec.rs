//! Frame codec throughput: encode and decode of 100-byte message frames,
//! 1,000 per iteration, reported per frame.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{BatchSize, Criterion, Throughput, criterion_main};
use transport::{
    DEFAULT_MAX_FRAME_SIZE, Frame,
    frame::{self, HEADER_LEN},
};

/// Frames per iteration: enough to amortise the loop, few enough to stay
/// in L2 (about 100 KiB encoded).
const FRAMES: usize = 1_000;
/// Body size: a typical small actor message.
const BODY: usize = 100;

fn codec(c: &mut Criterion) {
    let frame = Frame::message(Bytes::from(vec![0x5a; BODY]));
    let mut wire = BytesMut::with_capacity(FRAMES * (HEADER_LEN + BODY));
    for _ in 0..FRAMES {
        frame::encode(&frame, &mut wire, DEFAULT_MAX_FRAME_SIZE).expect("legal size");
    }

    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(FRAMES as u64));

    let mut dst = BytesMut::with_capacity(wire.len());
    group.bench_function("encode_100B", |b| {
        b.iter(|| {
            dst.clear();
            for _ in 0..FRAMES {
                frame::encode(black_box(&frame), &mut dst, DEFAULT_MAX_FRAME_SIZE)
                    .expect("legal size");
            }
            black_box(dst.len())
        });
    });

    group.bench_function("decode_100B", |b| {
        b.iter_batched_ref(
            || BytesMut::from(&wire[..]),
            |src| {
                let mut n = 0;
                while let Some(f) = frame::decode(src, DEFAULT_MAX_FRAME_SIZE).expect("valid") {
                    black_box(&f);
                    n += 1;
                }
                assert_eq!(n, FRAMES);
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// What `criterion_group!` would generate, minus the undocumented `pub`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    codec(&mut c);
}

criterion_main!(benches);
