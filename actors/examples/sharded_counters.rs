//! Sharded counters on a three-node cluster, one node of which crashes
//! midway.
//!
//! ```text
//! cargo run -p remoting-actors --example sharded_counters
//! ```
//!
//! runs three nodes, `a`, `b` and `c`, in this process over TCP on
//! loopback, each hosting the `Counter` entity type. Node `a` adds 1 to
//! twenty counters, round after round, each add an ask that answers with
//! the counter's new total and the node it runs on. Midway, node `c`
//! crashes: its system stops without leaving the cluster, as a killed
//! process would. Its counters restart on `a` or `b` once the others have
//! downed `c`, from zero: a counter's state lives in the entity, and what
//! `c` held is lost with it.
//!
//! At the end every counter's total must equal the adds acknowledged since
//! its current instance started; the example prints what was lost with
//! `c` (acknowledged adds, and adds whose ask failed) and exits 0 if every
//! total checks.
//!
//! The nodes share the default cookie (`$HOME/.actors.cookie`, created on
//! first use), as processes of one user on one machine would.

use std::{collections::BTreeMap, net::SocketAddr, process::ExitCode, time::Duration};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, SystemConfig,
    cluster::{Cluster, ClusterConfig},
    sharding::{EntityId, Sharding, ShardingSettings},
};
use serde::{Deserialize, Serialize};

/// What a counter takes.
#[derive(Debug, Serialize, Deserialize)]
enum CounterMsg {
    /// Add `n`; answer with the new total and this node.
    Add(u64, ActorRef<(u64, String)>),
    /// Answer with the total and this node.
    Get(ActorRef<(u64, String)>),
}

impl RemoteMessage for CounterMsg {
    const MANIFEST: &'static str = "example.sharding.CounterMsg";
}

struct Counter {
    total: u64,
    node: String,
}

impl Actor for Counter {
    type Msg = CounterMsg;

    async fn handle(&mut self, msg: CounterMsg, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            CounterMsg::Add(n, reply) => {
                self.total += n;
                let _ = reply.tell((self.total, self.node.clone()));
            }
            CounterMsg::Get(reply) => {
                let _ = reply.tell((self.total, self.node.clone()));
            }
        }
        Ok(())
    }
}

const COUNTERS: usize = 20;
const ROUNDS: usize = 30;
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

async fn node(
    name: &str,
    seed: Option<SocketAddr>,
) -> Result<(ActorSystem, Cluster, Sharding<CounterMsg>), Box<dyn std::error::Error>> {
    let system =
        ActorSystem::with_config(name, Some("127.0.0.1:0".parse()?), SystemConfig::default())
            .await?;
    // Short periods, so that the crash is noticed in a few seconds.
    let mut config = ClusterConfig::new();
    config
        .set_probe(Duration::from_millis(200), Duration::from_millis(100))?
        .set_stable_after(Duration::from_secs(2));
    if let Some(seed) = seed {
        config.set_seeds([seed.to_string()])?;
    }
    let cluster = Cluster::join(&system, config).await?;
    let me = system.node().to_owned();
    let settings = ShardingSettings {
        // The down-removal margin is the cluster's `stable_after` (2 s).
        number_of_shards: 30,
        ..ShardingSettings::default()
    };
    let counters = Sharding::start(
        &system,
        &cluster,
        "Counter",
        move |_: &EntityId| Counter {
            total: 0,
            node: me.clone(),
        },
        settings,
    )
    .await?;
    Ok((system, cluster, counters))
}

/// What node `a` knows of one counter.
#[derive(Default)]
struct Seen {
    /// The node its current instance runs on.
    at: String,
    /// Adds acknowledged by its current instance.
    acked: u64,
    /// Adds acknowledged by instances that were lost.
    lost: u64,
    /// Adds whose ask failed.
    failed: u64,
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (a, a_cluster, a_counters) = node("a", None).await?;
    let seed = a_cluster.myself().udp;
    let (b, _b_cluster, _b_counters) = node("b", Some(seed)).await?;
    let (c, _c_cluster, _c_counters) = node("c", Some(seed)).await?;
    tokio::time::timeout(Duration::from_secs(20), a_cluster.when_members_up(3)).await?;
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            println!("round {round}: node c crashes");
            c.shutdown().await;
        }
        for i in 0..COUNTERS {
            let id = format!("counter-{i}");
            let s = seen.entry(id.clone()).or_default();
            let r = a_counters
                .entity_ref(id)
                .ask(|r| CounterMsg::Add(1, r), ASK_TIMEOUT)
                .await;
            match r {
                Ok((total, at)) => {
                    if total == 1 && s.acked > 0 {
                        // A new instance: what the old one held is lost.
                        s.lost += s.acked;
                        s.acked = 0;
                    }
                    s.acked += 1;
                    s.at = at;
                }
                Err(e) => {
                    println!("round {round}: an add failed: {e}");
                    s.failed += 1;
                }
            }
        }
    }
    let mut ok = true;
    for (id, s) in &seen {
        let (total, at) = a_counters
            .entity_ref(id.clone())
            .ask(CounterMsg::Get, ASK_TIMEOUT)
            .await?;
        let good = total == s.acked;
        ok &= good;
        println!(
            "{id}: total {total} on {at}, acknowledged {}, lost with c {}, failed {} {}",
            s.acked,
            s.lost,
            s.failed,
            if good { "ok" } else { "MISMATCH" }
        );
    }
    let moved = seen.values().filter(|s| s.lost > 0).count();
    println!("{moved} counters restarted after c crashed; totals check: {ok}");
    println!("node a state: {:?}", a_counters.state().await);
    b.shutdown().await;
    a.shutdown().await;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
