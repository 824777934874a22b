//! `BufferPool` get/put: the cost a connection pays per buffer it borrows.

use std::hint::black_box;

use bytes::BufMut;
use criterion::{Criterion, criterion_main};
use transport::{BufferPool, DEFAULT_WRITE_BUFFER_SIZE};

/// Largest buffer the pool keeps, as the endpoint configures it.
const MAX_RETAINED: usize = 8 * 1024 * 1024;

fn pool(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool");
    let pool = BufferPool::new(DEFAULT_WRITE_BUFFER_SIZE, MAX_RETAINED);
    pool.put(pool.get());

    group.bench_function("get_put", |b| {
        b.iter(|| {
            let buf = pool.get();
            pool.put(black_box(buf));
        });
    });

    group.bench_function("get_write_put", |b| {
        b.iter(|| {
            let mut buf = pool.get();
            buf.put_slice(black_box(&[1u8; 100]));
            pool.put(buf);
        });
    });

    // What the pool saves: a fresh 64 KiB buffer every time.
    group.bench_function("allocate_64KiB_baseline", |b| {
        b.iter(|| {
            let mut buf = bytes::BytesMut::with_capacity(DEFAULT_WRITE_BUFFER_SIZE);
            buf.put_slice(black_box(&[1u8; 100]));
            black_box(buf)
        });
    });
    group.finish();
}

/// What `criterion_group!` would generate, minus the undocumented `pub`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    pool(&mut c);
}

criterion_main!(benches);
