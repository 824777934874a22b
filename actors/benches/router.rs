//! Routing costs: messages/s to 4 local routees sent directly (the caller
//! cycles over their refs by hand: `direct_4` with `send`, `direct_4_tell`
//! with `tell`, `pooled_by_hand_tell` to the pool's own routees), through
//! [`Router::send`] / [`Router::tell`] (the routee picked on the caller's
//! thread: `round_robin_4`, `round_robin_4_tell`), and through the router
//! actor (`RouterMsg::Route`: one more mailbox hop,
//! `round_robin_4_via_actor`).
//!
//! Runs on a two-worker tokio runtime built here and measures with
//! `iter_custom`, so only the awaited work is timed: each round sends
//! [`MESSAGES`] and waits until the routees have handled them all.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, Router, RouterMsg, RoutingLogic};
use criterion::{Criterion, Throughput, criterion_main};
use tokio::{runtime::Runtime, sync::Notify};

/// Messages per round: enough to amortise the wait for completion.
const MESSAGES: u64 = 10_000;
/// Routees in every variant.
const ROUTEES: usize = 4;

/// How many messages the routees have handled, and a wake-up for the
/// bench when they reach the round's target.
#[derive(Default)]
struct Done {
    handled: AtomicU64,
    target: AtomicU64,
    reached: Notify,
}

/// Counts what it handles.
struct Sink(Arc<Done>);

impl Actor for Sink {
    type Msg = u64;

    async fn handle(&mut self, _: u64, _: &mut Ctx<Self>) -> ActorResult {
        let d = &self.0;
        if d.handled.fetch_add(1, Ordering::AcqRel) + 1 == d.target.load(Ordering::Acquire) {
            d.reached.notify_one();
        }
        Ok(())
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime builds")
}

/// `iters` rounds of [`MESSAGES`] sent by `send`, each waited for.
async fn rounds<F, Fut>(done: &Done, iters: u64, mut send: F) -> Duration
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    for _ in 0..iters {
        let target = done.handled.load(Ordering::Acquire) + MESSAGES;
        done.target.store(target, Ordering::Release);
        for n in 0..MESSAGES {
            send(n).await;
        }
        // A permit left by an earlier round only costs one more check.
        while done.handled.load(Ordering::Acquire) < target {
            done.reached.notified().await;
        }
    }
    start.elapsed()
}

fn routing(c: &mut Criterion) {
    let rt = runtime();
    let sys = ActorSystem::local("bench").expect("valid name");
    let done = Arc::new(Done::default());
    let (direct, router) = rt.block_on(async {
        let direct: Vec<ActorRef<u64>> = (0..ROUTEES)
            .map(|_| sys.spawn(Sink(done.clone())))
            .collect();
        let d = done.clone();
        let router = Router::builder(RoutingLogic::round_robin())
            .pool(&sys, ROUTEES, move || Sink(d.clone()));
        (direct, router)
    });
    let hop = router.actor_ref().clone();

    let mut group = c.benchmark_group("router");
    group.throughput(Throughput::Elements(MESSAGES));
    group.bench_function("direct_4", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                let to = &direct[n as usize % ROUTEES];
                async move { to.send(n).await.expect("the routee runs") }
            }))
        });
    });
    group.bench_function("round_robin_4", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                let router = &router;
                async move { router.send(n).await.expect("a routee runs") }
            }))
        });
    });
    group.bench_function("direct_4_tell", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                direct[n as usize % ROUTEES].tell(n).expect("room");
                std::future::ready(())
            }))
        });
    });
    let pooled = router.routees();
    group.bench_function("pooled_by_hand_tell", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                pooled[n as usize % ROUTEES].tell(n).expect("room");
                std::future::ready(())
            }))
        });
    });
    group.bench_function("round_robin_4_tell", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                router.tell(n).expect("room");
                std::future::ready(())
            }))
        });
    });
    group.bench_function("round_robin_4_via_actor", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rounds(&done, iters, |n| {
                let hop = &hop;
                async move {
                    hop.send(RouterMsg::Route(n))
                        .await
                        .expect("the router runs");
                }
            }))
        });
    });
    group.finish();
    rt.block_on(sys.shutdown());
}

/// What `criterion_group!` would generate, minus the undocumented `pub`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    routing(&mut c);
}

criterion_main!(benches);
