//! Actor runtime costs: local tell throughput, local ask round trip,
//! message encode/decode (bincode, and bincode against MessagePack on a
//! representative message), and remote tell throughput over loopback.
//!
//! Each async bench runs on a two-worker tokio runtime built here and
//! measures with `iter_custom`, so only the awaited work is timed.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Bincode, Ctx, MsgPack, RemoteMessage, Serializer,
    SharedBytes,
};
use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_main};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

/// Tells per iteration of the throughput benches: enough to amortise the
/// final ask, fewer than the default mailbox capacity so `tell` never
/// finds it full.
const TELLS: u64 = 10_000;
/// Payload of the serialization bench: a typical small actor message.
const PAYLOAD: usize = 100;
/// Bound on the completion ask; a bench run never gets near it.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
enum Count {
    Add(u64),
    Get(ActorRef<u64>),
}

impl RemoteMessage for Count {
    const MANIFEST: &'static str = "bench.Count";
}

struct Counter(u64);

impl Actor for Counter {
    type Msg = Count;

    async fn handle(&mut self, msg: Count, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Count::Add(n) => self.0 += n,
            Count::Get(reply) => {
                let _ = reply.tell(self.0);
            }
        }
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    seq: u64,
    data: Vec<u8>,
}

impl RemoteMessage for Payload {
    const MANIFEST: &'static str = "bench.Payload";
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime builds")
}

/// `iters` rounds of [`TELLS`] sends to `to`, each round completed by an
/// ask that queues behind them.
async fn tell_rounds(to: &ActorRef<Count>, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        for n in 0..TELLS {
            to.send(Count::Add(n)).await.expect("the counter runs");
        }
        let total = to.ask(Count::Get, ASK_TIMEOUT).await.expect("answers");
        black_box(total);
    }
    start.elapsed()
}

fn local(c: &mut Criterion) {
    let rt = runtime();
    let sys = ActorSystem::local("bench").expect("valid name");
    let counter = rt.block_on(async { sys.spawn(Counter(0)) });

    let mut group = c.benchmark_group("local");
    group.throughput(Throughput::Elements(TELLS));
    group.bench_function("tell", |b| {
        b.iter_custom(|iters| rt.block_on(tell_rounds(&counter, iters)));
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("ask", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(counter.ask(Count::Get, ASK_TIMEOUT).await.expect("answers"));
                }
                start.elapsed()
            })
        });
    });
    group.finish();
    rt.block_on(sys.shutdown());
}

fn serialization(c: &mut Criterion) {
    let msg = Payload {
        seq: 7,
        data: vec![0x5a; PAYLOAD],
    };
    let mut buf = BytesMut::with_capacity(256);
    msg.encode(&mut buf, usize::MAX).expect("encodes");
    let wire = buf.clone().freeze();

    let mut group = c.benchmark_group("serialization");
    group.throughput(Throughput::Elements(1));
    group.bench_function("encode_100B", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&msg)
                .encode(&mut buf, usize::MAX)
                .expect("encodes");
            black_box(buf.len())
        });
    });
    group.bench_function("decode_100B", |b| {
        b.iter(|| black_box(Payload::decode(black_box(&wire)).expect("decodes")));
    });
    group.finish();
}

/// A representative application message: an id, a short name, a few
/// tags, an optional field and 100 bytes of payload.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "bench.Order", direct)]
struct Order {
    id: u64,
    customer: String,
    tags: Vec<String>,
    discount: Option<u32>,
    payload: SharedBytes,
}

/// The same message under each serializer: encode into a reused buffer,
/// decode from the bytes (outside a decode scope, so `SharedBytes` copies
/// under both).
fn serializers(c: &mut Criterion) {
    let order = Order {
        id: 1_234_567,
        customer: "customer-42".to_owned(),
        tags: vec!["express".to_owned(), "gift".to_owned()],
        discount: Some(15),
        payload: vec![0x5a; PAYLOAD].into(),
    };
    let mut group = c.benchmark_group("serializers");
    group.throughput(Throughput::Elements(1));
    fn both<S: Serializer>(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        s: S,
        order: &Order,
    ) {
        let mut buf = BytesMut::with_capacity(512);
        s.serialize(order, &mut buf).expect("encodes");
        let wire = buf.clone().freeze();
        eprintln!("serializers/{name}: {} bytes", wire.len());
        group.bench_function(format!("{name}/encode"), |b| {
            b.iter(|| {
                buf.clear();
                s.serialize(black_box(order), &mut buf).expect("encodes");
                black_box(buf.len())
            });
        });
        group.bench_function(format!("{name}/decode"), |b| {
            b.iter(|| black_box(s.deserialize::<Order>(black_box(&wire)).expect("decodes")));
        });
    }
    both(&mut group, "bincode", Bincode, &order);
    both(&mut group, "msgpack", MsgPack, &order);
    // The same bytes as bincode's, written without serde's visitors
    // (`#[remote(direct)]`); decoding is bincode's.
    let mut buf = BytesMut::with_capacity(512);
    group.bench_function("bincode-direct/encode", |b| {
        b.iter(|| {
            buf.clear();
            black_box(order.encode(&mut buf, usize::MAX)).expect("encodes");
            black_box(buf.len())
        });
    });
    group.finish();
}

fn remote(c: &mut Criterion) {
    let rt = runtime();
    let loopback = "127.0.0.1:0".parse().expect("a valid address");
    let (a, b, counter) = rt.block_on(async {
        let a = ActorSystem::remote("a", loopback).await.expect("binds");
        let b = ActorSystem::remote("b", loopback).await.expect("binds");
        b.spawn_named("counter", Counter(0)).expect("free name");
        let counter = a
            .resolve::<Count>(&format!("tcp://{}/user/counter", b.node()))
            .await
            .expect("resolves");
        (a, b, counter)
    });

    let mut group = c.benchmark_group("remote");
    group.throughput(Throughput::Elements(TELLS));
    group.bench_function("tell", |bench| {
        bench.iter_custom(|iters| rt.block_on(tell_rounds(&counter, iters)));
    });
    group.finish();
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// What `criterion_group!` would generate, minus the undocumented `pub`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    local(&mut c);
    serialization(&mut c);
    serializers(&mut c);
    remote(&mut c);
}

criterion_main!(benches);
