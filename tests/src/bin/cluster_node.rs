//! A cluster member for the network-namespace partition test
//! (`tests/netns/cluster.sh`): binds `ADDR` (TCP and membership UDP),
//! joins through `--seed`, and prints one line per membership change:
//! `member <node> <state>`. The shared secret comes from `ACTORS_COOKIE`.
//! Stops when its standard input closes. With `RUST_LOG` set (an
//! `EnvFilter`, e.g. `actors=debug`) it logs to standard error as well.
//!
//! Usage: `cluster_node NAME ADDR [--seed HOST:PORT] [--probe-ms N]
//! [--suspect-ms N]`

use std::{net::SocketAddr, time::Duration};

use actors::{
    ActorSystem, SystemConfig,
    cluster::{Cluster, ClusterConfig},
};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn millis(args: &[String], name: &str, default: u64) -> Duration {
    Duration::from_millis(
        arg(args, name)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
            })
            .unwrap_or(default),
    )
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
        eprintln!(
            "usage: cluster_node NAME ADDR [--seed HOST:PORT] [--probe-ms N] [--suspect-ms N]"
        );
        std::process::exit(2);
    };
    let addr: SocketAddr = addr.parse().expect("ADDR is host:port");
    let system = ActorSystem::with_config(name, Some(addr), SystemConfig::default())
        .await
        .expect("binds");
    let mut config = ClusterConfig::new()
        .probe_period(millis(&args, "--probe-ms", 200))
        .probe_rtt(millis(&args, "--probe-ms", 200) / 2)
        .suspect_timeout(millis(&args, "--suspect-ms", 30_000))
        .announce_interval(Duration::from_millis(100));
    if let Some(seed) = arg(&args, "--seed") {
        config = config.seeds([seed]);
    }
    let cluster = Cluster::join(&system, config).await.expect("joins");
    let mut events = cluster.subscribe();
    println!("ready {}", system.node());
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
                Ok(e) => println!("member {} {}", e.member.node, e.member.state),
                Err(e) => println!("lagged {e}"),
            },
            _ = &mut closed => break,
        }
    }
    let _ = cluster.leave().await;
    system.shutdown().await;
}
