//! A small job service on a three-node cluster that keeps serving while
//! one node crashes and comes back.
//!
//! ```text
//! cargo run -p remoting-actors --example cluster_service
//! ```
//!
//! runs three nodes, `a`, `b` and `c`, in this process over TCP on
//! loopback. Each node runs two supervised workers in cluster group
//! `jobs`. A front on node `a` sends jobs through a
//! `Router::cluster_group` router, which follows the group across the
//! cluster: members that go down drop out of it, members that come up
//! join it. A job whose ask fails (its node just died) is retried; the
//! round-robin router hands the retry to the next worker, on another node.
//!
//! Midway, node `c` crashes: its system stops without leaving the cluster,
//! as a killed process would. It is then restarted on the same address as
//! a new incarnation, and the router sends it work again without the
//! front doing anything. At the end the example prints who served what
//! and exits 0 if every job was served and the restarted `c` served some.
//!
//! The nodes share the default cookie (`$HOME/.actors.cookie`, created on
//! first use), as processes of one user on one machine would.

use std::{collections::BTreeMap, net::SocketAddr, process::ExitCode, time::Duration};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, Router, RoutingLogic,
    SupervisorStrategy, SystemConfig,
    cluster::{Cluster, ClusterConfig},
};
use serde::{Deserialize, Serialize};

/// A job: square `n`, answer on `reply`.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    n: u64,
    reply: ActorRef<Done>,
}

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "example.cluster.Job";
}

/// A job's result, with the node that did it.
#[derive(Debug, Serialize, Deserialize)]
struct Done {
    value: u64,
    by: String,
}

impl RemoteMessage for Done {
    const MANIFEST: &'static str = "example.cluster.Done";
}

/// Squares numbers. Supervised: if it panicked, a fresh one would take
/// its place under the same ref, and the group entry would stay valid.
struct Worker {
    node: String,
}

impl Actor for Worker {
    type Msg = Job;

    async fn handle(&mut self, job: Job, _: &mut Ctx<Self>) -> ActorResult {
        let value = job.n.checked_mul(job.n).ok_or("square overflows u64")?;
        let _ = job.reply.tell(Done {
            value,
            by: self.node.clone(),
        });
        Ok(())
    }
}

/// How many jobs the front sends in all; node `c` crashes after a third.
const JOBS: u64 = 300;
/// How long one attempt may take before the front tries another node.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a job is tried before it counts as failed.
const ATTEMPTS: usize = 5;

/// Starts node `name` at `addr` (port 0: any), joins the cluster through
/// `seed` (none: this node is the seed), and puts two supervised workers
/// in group `jobs`.
async fn start_node(
    name: &str,
    addr: SocketAddr,
    seed: Option<SocketAddr>,
) -> Result<(ActorSystem, Cluster), String> {
    let system = ActorSystem::with_config(name, Some(addr), SystemConfig::default())
        .await
        .map_err(|e| format!("node {name}: {e}"))?;
    // Short periods so the demo is quick; the defaults suit real networks.
    let mut config = ClusterConfig::new();
    config
        .set_probe(Duration::from_millis(200), Duration::from_millis(100))
        .map_err(|e| e.to_string())?
        .set_stable_after(Duration::from_secs(5));
    if let Some(seed) = seed {
        config
            .set_seeds([seed.to_string()])
            .map_err(|e| e.to_string())?;
    }
    let cluster = Cluster::join(&system, config)
        .await
        .map_err(|e| format!("node {name}: cannot join: {e}"))?;
    // Fails if no seed answered in time (a wrong cookie, say).
    cluster
        .joined(Duration::from_secs(5))
        .await
        .map_err(|e| format!("node {name}: {e}"))?;
    for i in 0..2 {
        let node = name.to_owned();
        let worker = system
            .spawn_supervised(
                &format!("worker-{i}"),
                move || Worker { node: node.clone() },
                SupervisorStrategy::restart().with_limit(5, Duration::from_secs(10)),
            )
            .map_err(|e| format!("node {name}: {e}"))?;
        cluster
            .join_group("jobs", &worker)
            .await
            .map_err(|e| format!("node {name}: {e}"))?;
    }
    Ok((system, cluster))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cluster_service: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, String> {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let (a, cluster_a) = start_node("a", any, None).await?;
    let seed = a.local_addr().ok_or("node a has no address")?;
    let (b, _cluster_b) = start_node("b", any, Some(seed)).await?;
    let (c, _cluster_c) = start_node("c", any, Some(seed)).await?;
    let c_addr = c.local_addr().ok_or("node c has no address")?;
    // The front's view: wait until all three members are up.
    cluster_a.when_members_up(3).await;
    println!("cluster up: {} members", cluster_a.up_members().len() + 1);

    // The front: a router over group `jobs`, kept in line with the cluster.
    let front: Router<Job> =
        Router::builder(RoutingLogic::round_robin()).cluster_group(&a, &cluster_a, "jobs");
    tokio::time::timeout(Duration::from_secs(5), front.wait_routees(|r| r.len() == 6))
        .await
        .map_err(|_| "the router did not see 6 workers within 5 s")?;

    let mut served: BTreeMap<String, u64> = BTreeMap::new();
    let (mut retries, mut failed, mut after_restart) = (0, 0, 0);
    let mut restarted = None;
    for n in 1..=JOBS {
        if n == JOBS / 3 {
            // The crash: node c stops without leaving the cluster.
            println!("job {n}: node c crashes");
            c.shutdown().await;
        }
        if n == JOBS / 2 {
            // The restart: the same address, a new incarnation.
            println!("job {n}: node c restarts on {c_addr}");
            restarted = Some(start_node("c", c_addr, Some(seed)).await?);
        }
        let mut done = None;
        for _ in 0..ATTEMPTS {
            match front.ask(|reply| Job { n, reply }, ASK_TIMEOUT).await {
                Ok(d) => {
                    done = Some(d);
                    break;
                }
                // The next attempt goes to the next routee: another worker,
                // another node once the dead one's are gone.
                Err(_) => retries += 1,
            }
        }
        match done {
            Some(d) if d.value == n * n => {
                if restarted.is_some() && d.by == "c" {
                    after_restart += 1;
                }
                *served.entry(d.by).or_default() += 1;
            }
            _ => failed += 1,
        }
        // A steady trickle of work, so the crash falls in the middle of it.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    println!("summary: {JOBS} jobs, {failed} failed, {retries} retried asks");
    for (node, count) in &served {
        println!("  node {node}: served {count}");
    }
    println!("  node c after its restart: served {after_restart}");
    if let Some((c2, _)) = restarted {
        c2.shutdown().await;
    }
    b.shutdown().await;
    a.shutdown().await;
    Ok(failed == 0 && after_restart > 0)
}
