//! The batching writer end to end: 10,000 100-byte frames per iteration
//! from one sender, through a real `Connection` over loopback TCP, to a
//! handler that counts them. Reports frames per second including the
//! reader, so it measures what a user gets, not the writer alone (which is
//! crate-private).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_main};
use tokio::{runtime::Runtime, sync::Notify};
use transport::{Connection, Endpoint, Frame, FrameKind, Handler, Sender, TransportConfig};

/// Frames per iteration: two bursts' worth of the Akka burst pattern.
const FRAMES: u64 = 10_000;
/// Body size: a typical small actor message.
const BODY: usize = 100;

/// Counts frames; wakes the bench when the count reaches the target.
struct Count {
    seen: u64,
    target: Arc<AtomicU64>,
    done: Arc<Notify>,
}

impl Handler for Count {
    fn on_frame(&mut self, _frame: Frame) {
        self.seen += 1;
        if self.seen == self.target.load(Relaxed) {
            self.done.notify_one();
        }
    }
}

struct Link {
    // Kept alive: dropping either side closes the connection.
    _endpoints: (Endpoint, Endpoint),
    _receiver: Connection,
    conn: Connection,
    target: Arc<AtomicU64>,
    done: Arc<Notify>,
}

async fn link() -> Link {
    let addr = "127.0.0.1:0".parse().expect("valid address");
    let a = Endpoint::bind(addr, TransportConfig::default())
        .await
        .expect("bind");
    let b = Endpoint::bind(addr, TransportConfig::default())
        .await
        .expect("bind");
    let (dialed, accepted) = tokio::join!(a.connect(b.local_addr()), b.accept());
    let target = Arc::new(AtomicU64::new(0));
    let done = Arc::new(Notify::new());
    let receiver = accepted
        .expect("endpoint open")
        .expect("handshake")
        .start(Count {
            seen: 0,
            target: target.clone(),
            done: done.clone(),
        });
    let (conn, _) = dialed.expect("connect").start_channel(1);
    Link {
        _endpoints: (a, b),
        _receiver: receiver,
        conn,
        target,
        done,
    }
}

impl Link {
    /// Sends `FRAMES` frames with `send` and waits until all have arrived.
    async fn round<F, Fut>(&self, send: F)
    where
        F: Fn(Sender) -> Fut,
        Fut: Future<Output = ()>,
    {
        self.target.fetch_add(FRAMES, Relaxed);
        send(self.conn.sender()).await;
        self.done.notified().await;
    }
}

fn writer(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let link = rt.block_on(link());
    let body = [0x5au8; BODY];
    let frame = Frame::message(Bytes::copy_from_slice(&body));

    let mut group = c.benchmark_group("writer_loopback");
    group.throughput(Throughput::Elements(FRAMES));
    group.bench_function("send_with_10k_100B", |b| {
        b.iter(|| {
            run(&rt, &link, |s| async move {
                for _ in 0..FRAMES {
                    s.send_with(FrameKind::Message, |b| b.extend_from_slice(&body))
                        .await
                        .expect("send");
                }
            });
        });
    });
    group.bench_function("send_many_with_10k_100B", |b| {
        b.iter(|| {
            run(&rt, &link, |s| async move {
                s.send_many_with(FrameKind::Message, FRAMES as usize, |b| {
                    b.extend_from_slice(&body)
                })
                .await
                .expect("send");
            });
        });
    });
    group.bench_function("send_frame_10k_100B", |b| {
        b.iter(|| {
            run(&rt, &link, |s| {
                let frame = frame.clone();
                async move {
                    for _ in 0..FRAMES {
                        s.send(frame.clone()).await.expect("send");
                    }
                }
            });
        });
    });
    group.finish();
    rt.block_on(link.conn.close("bench done"));
}

fn run<F, Fut>(rt: &Runtime, link: &Link, send: F)
where
    F: Fn(Sender) -> Fut,
    Fut: Future<Output = ()>,
{
    rt.block_on(link.round(send));
}

/// What `criterion_group!` would generate, minus the undocumented `pub`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    writer(&mut c);
}

criterion_main!(benches);
