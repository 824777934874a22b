//! `bench-remote cluster --nodes 5,20,50`: cluster membership in one
//! process, each node an actor system on its own single-worker runtime,
//! over loopback. For each cluster size: how long until every node sees
//! every other up (nodes join through one seed), the membership traffic
//! per node in the steady state, how long after a member stops abruptly
//! (its runtime dropped: no leave, no goodbye, as a killed process) every
//! other member holds it suspect, how long after that member starts again
//! on the same address an ask through group `bench` from another node
//! reaches its new incarnation, and how long until a node whose
//! membership goes silent is seen down by all the others.

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, SystemConfig,
    cluster::{Cluster, ClusterConfig, MemberState},
};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;
use transport::SharedSecret;

/// The secret the benchmark's nodes share (they run in this process).
const SECRET: &[u8] = b"bench-remote cluster membership secret, loopback only";
/// How long the steady-state traffic is measured.
const STEADY: Duration = Duration::from_secs(2);
/// The most a phase may take before the run fails.
const LIMIT: Duration = Duration::from_secs(120);

/// One cluster size's figures.
#[derive(Debug, serde::Serialize)]
struct Row {
    nodes: usize,
    converge_ms: f64,
    suspect_after_kill_ms: f64,
    traffic_after_restart_ms: f64,
    down_seen_ms: f64,
    bytes_per_sec_per_node: f64,
    packets_per_sec_per_node: f64,
    probe_period_ms: u64,
    suspect_timeout_ms: u64,
}

/// Runs each size in `sizes` and prints a table (or JSON lines).
pub async fn run(sizes: &[usize], probe: Duration, json: bool) -> Result<()> {
    let suspect = probe * 5;
    if !json {
        println!(
            "membership: probe period {} ms, suspect timeout {} ms, nodes join through one seed",
            probe.as_millis(),
            suspect.as_millis()
        );
        println!(
            "{:>6} {:>14} {:>14} {:>14} {:>14} {:>16} {:>14}",
            "nodes",
            "converge ms",
            "suspect ms",
            "traffic ms",
            "down seen ms",
            "bytes/s/node",
            "packets/s/node"
        );
    }
    for &n in sizes {
        if n < 2 {
            bail!("--nodes: a cluster needs at least 2 nodes, got {n}");
        }
        let row = one(n, probe, suspect).await?;
        if json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>6} {:>14.1} {:>14.1} {:>14.1} {:>14.1} {:>16.0} {:>14.1}",
                row.nodes,
                row.converge_ms,
                row.suspect_after_kill_ms,
                row.traffic_after_restart_ms,
                row.down_seen_ms,
                row.bytes_per_sec_per_node,
                row.packets_per_sec_per_node
            );
        }
    }
    Ok(())
}

struct Node {
    rt: Runtime,
    system: ActorSystem,
    cluster: Option<Cluster>,
}

/// An ask to a group member: answer with your node address.
#[derive(Debug, Serialize, Deserialize)]
struct Ping(ActorRef<String>);

impl RemoteMessage for Ping {
    const MANIFEST: &'static str = "bench-remote.cluster.Ping";
}

/// Answers [`Ping`] with its node's address.
struct Pong(String);

impl Actor for Pong {
    type Msg = Ping;

    async fn handle(&mut self, Ping(reply): Ping, _: &mut Ctx<Self>) -> ActorResult {
        let _ = reply.tell(self.0.clone());
        Ok(())
    }
}

/// Starts a node on `bind` with a [`Pong`] in group `bench`.
async fn start(config: ClusterConfig, bind: SocketAddr) -> Result<Node> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-node")
        .enable_all()
        .build()?;
    let (system, cluster) = rt
        .spawn(async move {
            let mut sc = SystemConfig::default();
            sc.transport_mut()
                .set_shared_secret(Some(SharedSecret::new(SECRET)))?;
            let system = ActorSystem::with_config("node", Some(bind), sc).await?;
            let cluster = Cluster::join(&system, config).await?;
            let pong = system.spawn(Pong(system.node().to_owned()));
            cluster.join_group("bench", &pong).await?;
            anyhow::Ok((system, cluster))
        })
        .await??;
    Ok(Node {
        rt,
        system,
        cluster: Some(cluster),
    })
}

/// Polls `cond` until it holds, failing after [`LIMIT`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) -> Result<Duration> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > LIMIT {
            bail!("{what}: not after {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(start.elapsed())
}

async fn one(n: usize, probe: Duration, suspect: Duration) -> Result<Row> {
    let mut config = ClusterConfig::new();
    config
        .set_probe(probe, probe / 2)?
        .set_suspect_timeout(suspect)
        .set_announce_interval(Duration::from_millis(50))?;
    let t0 = Instant::now();
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let mut nodes = vec![start(config.clone(), any).await.context("seed node")?];
    let seed = nodes[0]
        .cluster
        .as_ref()
        .map(|c| c.myself().udp.to_string())
        .context("seed")?;
    for _ in 1..n {
        let mut joining = config.clone();
        joining.set_seeds([seed.clone()])?;
        nodes.push(start(joining, any).await?);
    }
    let all_up = |nodes: &[Node], up: usize| {
        nodes
            .iter()
            .filter_map(|x| x.cluster.as_ref())
            .all(|c| c.up_members().len() == up)
    };
    until("every node sees every other up", || all_up(&nodes, n - 1)).await?;
    let converge = t0.elapsed();
    // Steady state: traffic per node.
    let sum = |nodes: &[Node]| {
        nodes
            .iter()
            .filter_map(|x| x.cluster.as_ref())
            .map(|c| {
                let s = c.stats();
                (s.bytes_out, s.packets_out)
            })
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let before = sum(&nodes);
    tokio::time::sleep(STEADY).await;
    let after = sum(&nodes);
    let per = |a: u64, b: u64| (b - a) as f64 / STEADY.as_secs_f64() / n as f64;
    let (suspect_after_kill, traffic_after_restart) = kill_and_restart(&mut nodes, {
        let mut config = config;
        config.set_seeds([seed.clone()])?;
        config
    })
    .await?;
    // A node goes silent, as if its process died.
    let dead = nodes.last_mut().context("nodes")?;
    let dead_node = dead.system.node().to_owned();
    drop(dead.cluster.take());
    let t1 = Instant::now();
    until("every node sees the silent one down", || {
        nodes.iter().filter_map(|x| x.cluster.as_ref()).all(|c| {
            c.members()
                .iter()
                .any(|m| m.node == dead_node && m.state == MemberState::Down)
        })
    })
    .await?;
    let down_seen = t1.elapsed();
    for node in nodes {
        drop(node.cluster);
        node.system.shutdown().await;
        node.rt.shutdown_background();
    }
    Ok(Row {
        nodes: n,
        converge_ms: converge.as_secs_f64() * 1e3,
        suspect_after_kill_ms: suspect_after_kill.as_secs_f64() * 1e3,
        traffic_after_restart_ms: traffic_after_restart.as_secs_f64() * 1e3,
        down_seen_ms: down_seen.as_secs_f64() * 1e3,
        bytes_per_sec_per_node: per(before.0, after.0),
        packets_per_sec_per_node: per(before.1, after.1),
        probe_period_ms: u64::try_from(probe.as_millis()).unwrap_or(u64::MAX),
        suspect_timeout_ms: u64::try_from(suspect.as_millis()).unwrap_or(u64::MAX),
    })
}

/// Stops node 1 abruptly (its runtime dropped with every task and socket,
/// no leave), waits until every other node holds it suspect, then starts
/// it again on the same address. Returns the time from the stop until
/// all others suspect it, and the time from the restart's start until an
/// ask from node 0 through group `bench` reaches the new incarnation.
async fn kill_and_restart(
    nodes: &mut Vec<Node>,
    config: ClusterConfig,
) -> Result<(Duration, Duration)> {
    if nodes.len() < 2 {
        bail!("a restart needs a second node");
    }
    let Node {
        rt,
        system,
        cluster,
    } = nodes.remove(1);
    let node = system.node().to_owned();
    let addr = system.local_addr().context("the node's address")?;
    let t0 = Instant::now();
    // Forgotten, not dropped: a killed process runs no clean-up code.
    std::mem::forget(cluster);
    std::mem::forget(system);
    rt.shutdown_background();
    until("every other node holds the stopped one suspect", || {
        nodes.iter().filter_map(|x| x.cluster.as_ref()).all(|c| {
            c.members()
                .iter()
                .any(|m| m.node == node && m.state != MemberState::Up)
        })
    })
    .await?;
    let suspect = t0.elapsed();
    let t1 = Instant::now();
    // The port is free once the old runtime's sockets are closed.
    let restarted = loop {
        match start(config.clone(), addr).await {
            Ok(n) => break n,
            Err(e) if t1.elapsed() < LIMIT => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e.context("restarting the stopped node")),
        }
    };
    nodes.insert(1, restarted);
    let observer = nodes[0].cluster.as_ref().context("node 0 runs")?;
    loop {
        let refs: Vec<ActorRef<Ping>> = observer
            .group::<Ping>("bench")
            .into_iter()
            .filter(|r| r.path().node() == node)
            .collect();
        for r in refs {
            if let Ok(by) = r.ask(Ping, Duration::from_millis(200)).await
                && by == node
            {
                return Ok((suspect, t1.elapsed()));
            }
        }
        if t1.elapsed() > LIMIT {
            bail!("no answer from the restarted node through group bench after {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
