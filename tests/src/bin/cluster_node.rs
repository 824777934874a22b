//! A cluster member for the network-namespace tests
//! (`tests/netns/cluster.sh`): binds `ADDR` (TCP and membership UDP),
//! joins through `--seed`, and prints one line per membership change:
//! `member <node> <state>`. The shared secret comes from `ACTORS_COOKIE`.
//! Stops when its standard input closes. With `RUST_LOG` set (an
//! `EnvFilter`, e.g. `actors=debug`) it logs to standard error as well.
//!
//! Each node runs a worker in cluster group `work` that answers with the
//! node's name. With `--traffic` the node asks the group every 20 ms in
//! two ways, round robin over `Cluster::group` and through a
//! `Router::cluster_group` router, and prints `reply <via> <name> <ms>`
//! per answer or `fail <via> <error> <ms>` (`via` is `group` or `router`,
//! `ms` the wall clock in milliseconds since the epoch, as in the line
//! `ready <node> <ms>`, so the script can measure across processes).
//!
//! When the downing strategy downs this node it prints `self down`, waits
//! for its system to shut down, and exits 0.
//!
//! Usage: `cluster_node NAME ADDR [--seed HOST:PORT] [--probe-ms N]
//! [--stable-ms N] [--downing keep-majority|keep-oldest|static-quorum:N|down-all]
//! [--traffic]` (`--suspect-ms` is an alias of `--stable-ms`).

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, Router, RoutingLogic,
    SystemConfig,
    cluster::{Cluster, ClusterConfig, DowningStrategy, MemberState},
};
use serde::{Deserialize, Serialize};

const USAGE: &str = "usage: cluster_node NAME ADDR [--seed HOST:PORT] [--probe-ms N] \
                     [--stable-ms N] [--downing keep-majority|keep-oldest|static-quorum:N|down-all] \
                     [--traffic]";

/// A request to the group's workers: answer with your node's name.
#[derive(Debug, Serialize, Deserialize)]
struct Req(ActorRef<String>);

impl RemoteMessage for Req {
    const MANIFEST: &'static str = "cluster_node.Req";
}

/// Answers every request with this node's name.
struct Worker(String);

impl Actor for Worker {
    type Msg = Req;

    async fn handle(&mut self, Req(reply): Req, _: &mut Ctx<Self>) -> ActorResult {
        let _ = reply.tell(self.0.clone());
        Ok(())
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn millis(args: &[String], names: &[&str], default: u64) -> Duration {
    let value = names.iter().find_map(|n| arg(args, n));
    Duration::from_millis(
        value
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{names:?}: not a number: {v}"))
            })
            .unwrap_or(default),
    )
}

fn downing(spec: &str) -> DowningStrategy {
    match spec.split_once(':') {
        _ if spec == "keep-majority" => DowningStrategy::KeepMajority,
        _ if spec == "keep-oldest" => DowningStrategy::KeepOldest {
            down_if_alone: false,
        },
        _ if spec == "down-all" => DowningStrategy::DownAll,
        Some(("static-quorum", n)) => DowningStrategy::StaticQuorum {
            quorum_size: n.parse().expect("static-quorum:N, N a number"),
        },
        _ => {
            eprintln!("--downing: unknown strategy {spec}\n{USAGE}");
            std::process::exit(2);
        }
    }
}

/// Milliseconds since the epoch: comparable between the test's processes.
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Asks the group every 20 ms, both ways, each ask in its own task so a
/// slow or lost answer does not hold back the next request.
async fn traffic(system: ActorSystem, cluster: Cluster) {
    let router =
        Router::builder(RoutingLogic::round_robin()).cluster_group(&system, &cluster, "work");
    let next = AtomicUsize::new(0);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let refs = cluster.group::<Req>("work");
        if !refs.is_empty() {
            let r = refs[next.fetch_add(1, Ordering::Relaxed) % refs.len()].clone();
            tokio::spawn(async move {
                report("group", r.ask(Req, Duration::from_secs(1)).await);
            });
        }
        let router = router.clone();
        tokio::spawn(async move {
            report("router", router.ask(Req, Duration::from_secs(1)).await);
        });
    }
}

fn report(via: &str, answer: Result<String, actors::AskError>) {
    match answer {
        Ok(name) => println!("reply {via} {name} {}", now_ms()),
        Err(e) => println!("fail {via} {e} {}", now_ms()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Ok(filter) = std::env::var("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init();
    }
    let [name, addr, ..] = args.as_slice() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let addr: SocketAddr = addr.parse().expect("ADDR is host:port");
    let system = ActorSystem::with_config(name, Some(addr), SystemConfig::default())
        .await
        .expect("binds");
    let probe = millis(&args, &["--probe-ms"], 200);
    let mut config = ClusterConfig::new();
    config
        .set_probe(probe, probe / 2)
        .expect("--probe-ms: at least 2")
        .set_stable_after(millis(&args, &["--stable-ms", "--suspect-ms"], 30_000))
        .set_announce_interval(Duration::from_millis(100))
        .expect("a valid interval");
    if let Some(spec) = arg(&args, "--downing") {
        config
            .set_downing(downing(&spec))
            .expect("--downing: a valid strategy");
    }
    if let Some(seed) = arg(&args, "--seed") {
        config.set_seeds([seed]).expect("--seed: host:port");
    }
    let cluster = Cluster::join(&system, config).await.expect("joins");
    let mut events = cluster.subscribe();
    println!("ready {} {}", system.node(), now_ms());
    let worker = system.spawn(Worker(name.clone()));
    cluster
        .join_group("work", &worker)
        .await
        .expect("joins group work");
    if args.iter().any(|a| a == "--traffic") {
        tokio::spawn(traffic(system.clone(), cluster.clone()));
    }
    let mut closed = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let stdin = std::io::stdin();
        while std::io::BufRead::read_line(&mut stdin.lock(), &mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
    });
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) if e.member.node == system.node() && e.member.state == MemberState::Down => {
                    println!("self down");
                    // The cluster shuts the system down; the worker stops
                    // with it.
                    let stopped = worker.watch();
                    if tokio::time::timeout(Duration::from_secs(10), stopped).await.is_err() {
                        println!("system still running 10 s after self down");
                        std::process::exit(1);
                    }
                    std::process::exit(0);
                }
                Ok(e) => println!("member {} {}", e.member.node, e.member.state),
                Err(e) => println!("lagged {e}"),
            },
            _ = &mut closed => break,
        }
    }
    let _ = cluster.leave().await;
    system.shutdown().await;
}
