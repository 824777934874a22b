//! A supervised worker pool spread over two nodes: a worker that panics is
//! replaced, and callers keep using the router they hold.
//!
//! ```text
//! cargo run -p remoting-actors --example worker_pool
//! ```
//!
//! runs both nodes in this process over TCP on loopback. Node `b` serves a
//! spawner actor at `/user/spawner` that starts a worker on `b` for
//! whoever asks. Node `a` builds a round-robin pool of four workers: even
//! slots on `a`, odd slots asked of `b`'s spawner. A caller task asks the
//! pool to square numbers through its router handle; then one of the
//! workers on `b` panics. The router on `a` learns of it by death watch
//! over the wire, asks the spawner for a fresh worker in the same slot,
//! and the caller goes on with the same handle.
//!
//! Or in two processes:
//!
//! ```text
//! cargo run -p remoting-actors --example worker_pool -- spawner 127.0.0.1:25521
//! cargo run -p remoting-actors --example worker_pool -- pool 127.0.0.1:25521
//! ```

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, Router, RoutingLogic};
use serde::{Deserialize, Serialize};

/// What a worker takes.
#[derive(Debug, Serialize, Deserialize)]
enum Work {
    /// Square `n` and reply.
    Square(u64, ActorRef<Squared>),
    /// Panic (a bug in a worker, as far as the pool can tell).
    Crash,
}

impl RemoteMessage for Work {
    const MANIFEST: &'static str = "example.pool.Work";
}

/// A worker's answer, with its name so the output shows who did the work.
#[derive(Debug, Serialize, Deserialize)]
struct Squared {
    value: u64,
    by: String,
}

impl RemoteMessage for Squared {
    const MANIFEST: &'static str = "example.pool.Squared";
}

/// A worker: squares numbers.
struct Worker {
    name: String,
}

impl Actor for Worker {
    type Msg = Work;

    async fn handle(&mut self, work: Work, _: &mut Ctx<Self>) -> ActorResult {
        match work {
            Work::Square(n, reply) => {
                let value = n.checked_mul(n).ok_or("square overflows u64")?;
                let _ = reply.tell(Squared {
                    value,
                    by: self.name.clone(),
                });
            }
            Work::Crash => panic!("{} asked to crash", self.name),
        }
        Ok(())
    }
}

/// Numbers workers get: `worker-a1`, `worker-b2`, ... per process.
static NEXT_WORKER: AtomicU32 = AtomicU32::new(1);

fn worker(node: &str) -> Worker {
    Worker {
        name: format!(
            "worker-{node}{}",
            NEXT_WORKER.fetch_add(1, Ordering::Relaxed)
        ),
    }
}

/// Asks a [`Spawner`] for a new worker on its node.
#[derive(Debug, Serialize, Deserialize)]
struct SpawnWorker(ActorRef<WorkerRef>);

impl RemoteMessage for SpawnWorker {
    const MANIFEST: &'static str = "example.pool.SpawnWorker";
}

/// The spawner's answer: the new worker.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerRef(ActorRef<Work>);

impl RemoteMessage for WorkerRef {
    const MANIFEST: &'static str = "example.pool.WorkerRef";
}

/// Starts workers on its node for a pool elsewhere.
struct Spawner;

impl Actor for Spawner {
    type Msg = SpawnWorker;

    async fn handle(
        &mut self,
        SpawnWorker(reply): SpawnWorker,
        ctx: &mut Ctx<Self>,
    ) -> ActorResult {
        let w = ctx.system().spawn(worker("b"));
        let _ = reply.tell(WorkerRef(w));
        Ok(())
    }
}

/// Bound on every ask.
const ASK: Duration = Duration::from_secs(5);
/// Workers in the pool, half on each node.
const WORKERS: usize = 4;
/// Squares the caller asks for before and after the crash.
const ROUND: u64 = 8;

const USAGE: &str = "usage: worker_pool [spawner HOST:PORT | pool SPAWNER_HOST:PORT]";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => both_in_one_process().await,
        [role, addr] if role == "spawner" => match addr.parse() {
            Ok(addr) => serve_spawner(addr).await,
            Err(e) => Err(format!("bad address {addr:?}: {e}")),
        },
        [role, addr] if role == "pool" => match addr.parse::<SocketAddr>() {
            Ok(addr) => {
                let bind = SocketAddr::new(addr.ip(), 0);
                match ActorSystem::remote("a", bind).await {
                    Ok(a) => {
                        let r = run_pool(&a, &format!("tcp://b@{addr}/user/spawner")).await;
                        a.shutdown().await;
                        r
                    }
                    Err(e) => Err(format!("cannot bind: {e}")),
                }
            }
            Err(e) => Err(format!("bad address {addr:?}: {e}")),
        },
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker_pool: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn both_in_one_process() -> Result<(), String> {
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let b = ActorSystem::remote("b", loopback)
        .await
        .map_err(|e| format!("cannot bind b: {e}"))?;
    b.spawn_named("spawner", Spawner)
        .map_err(|e| format!("cannot spawn the spawner: {e}"))?;
    let a = ActorSystem::remote("a", loopback)
        .await
        .map_err(|e| format!("cannot bind a: {e}"))?;
    let result = run_pool(&a, &format!("tcp://{}/user/spawner", b.node())).await;
    a.shutdown().await;
    b.shutdown().await;
    result
}

async fn serve_spawner(addr: SocketAddr) -> Result<(), String> {
    let b = ActorSystem::remote("b", addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    b.spawn_named("spawner", Spawner)
        .map_err(|e| format!("cannot spawn the spawner: {e}"))?;
    println!(
        "spawner: serving tcp://{}/user/spawner (kill to stop)",
        b.node()
    );
    std::future::pending::<()>().await;
    Ok(())
}

/// Builds the pool on `a` (odd slots from the spawner at `spawner_path`),
/// runs a caller, crashes a remote worker, and runs the caller again.
async fn run_pool(a: &ActorSystem, spawner_path: &str) -> Result<(), String> {
    let spawner: ActorRef<SpawnWorker> = a
        .resolve(spawner_path)
        .await
        .map_err(|e| format!("cannot reach the spawner at {spawner_path}: {e}"))?;
    let pool = Router::builder(RoutingLogic::round_robin())
        .restart_limit(3, Duration::from_secs(60))
        .pool_with(a, WORKERS, move |system, slot| {
            let spawner = spawner.clone();
            let here = (slot % 2 == 0).then(|| system.spawn(worker("a")));
            async move {
                match here {
                    Some(w) => Ok(w),
                    None => Ok(spawner.ask(SpawnWorker, ASK).await?.0),
                }
            }
        })
        .await
        .map_err(|e| format!("cannot build the pool: {e}"))?;
    for (slot, w) in pool.routees().iter().enumerate() {
        println!("slot {slot}: {}", w.path());
    }

    // The caller holds a clone of the router and nothing else.
    let caller = pool.clone();
    let first = tokio::spawn(async move { squares(&caller, 1).await });
    first.await.map_err(|e| format!("caller: {e}"))??;

    let victim = pool.routees()[1].clone();
    println!("crashing the worker at {}", victim.path());
    victim
        .tell(Work::Crash)
        .map_err(|e| format!("cannot reach the victim: {e}"))?;
    let replaced = tokio::time::timeout(
        ASK,
        pool.wait_routees(|r| r.len() == WORKERS && !r.contains(&victim)),
    )
    .await
    .map_err(|_| "the crashed worker was not replaced in time".to_owned())?;
    let fresh = replaced.last().expect("a full pool");
    println!("replaced by {}", fresh.path());

    let caller = pool.clone();
    let second = tokio::spawn(async move { squares(&caller, ROUND + 1).await });
    second.await.map_err(|e| format!("caller: {e}"))??;
    pool.stop();
    Ok(())
}

/// Asks the pool for the squares of `ROUND` numbers from `from`.
async fn squares(pool: &Router<Work>, from: u64) -> Result<(), String> {
    for n in from..from + ROUND {
        let got = pool
            .ask(|reply| Work::Square(n, reply), ASK)
            .await
            .map_err(|e| format!("square of {n}: {e}"))?;
        println!("{n}² = {} by {}", got.value, got.by);
    }
    Ok(())
}
