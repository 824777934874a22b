//! A node that downs itself stops its sharded entities and its singleton
//! where they stand, before anyone hears that it is down: what they have
//! queued is not handled, and nothing starts there again, so that nothing
//! runs on the losing side while the winning side, after its margin,
//! starts it anew.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use actors::{
    Actor, ActorResult, ActorSystem, Ctx, RemoteMessage, StopReason,
    cluster::{Cluster, MemberState},
    sharding::{EntityId, Sharding, ShardingSettings},
    singleton::{Singleton, SingletonSettings},
};
use integration_tests::{actor_system, eventually, fast_cluster, seeded, within};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Debug, Serialize, Deserialize)]
struct Work(u64);

impl RemoteMessage for Work {
    const MANIFEST: &'static str = "it.fence.Work";
}

/// Counts what it handles, and takes a permit of `gate` for each message,
/// so a test holds it in the middle of its queue.
#[derive(Default)]
struct Counts {
    started: AtomicU64,
    handled: AtomicU64,
    stopped: AtomicU64,
}

struct Gated {
    counts: Arc<Counts>,
    gate: Arc<Semaphore>,
}

impl Actor for Gated {
    type Msg = Work;

    async fn started(&mut self, _: &mut Ctx<Self>) -> ActorResult {
        self.counts.started.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn handle(&mut self, _: Work, _: &mut Ctx<Self>) -> ActorResult {
        self.counts.handled.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("open").forget();
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        self.counts.stopped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Two nodes whose higher address loses an equal split, left running
/// when downed (so only the fence stops what runs there), the loser
/// first.
async fn pair() -> ((ActorSystem, Cluster), (ActorSystem, Cluster)) {
    let mut config = fast_cluster(Duration::from_millis(300));
    config
        .set_suspect_timeout(Duration::from_millis(300))
        .set_shutdown_when_downed(false);
    let a = actor_system("f0").await;
    let ca = Cluster::join(&a, config.clone()).await.expect("joins");
    let seed = ca.myself().udp.to_string();
    let b = actor_system("f1").await;
    let cb = Cluster::join(&b, seeded(&config, seed))
        .await
        .expect("joins");
    within("both up", cb.when_members_up(2)).await;
    within("both up", ca.when_members_up(2)).await;
    let mut nodes = [(a, ca), (b, cb)];
    nodes.sort_by_key(|(_, c)| std::cmp::Reverse(c.myself().node));
    let [loser, winner] = nodes;
    (loser, winner)
}

/// Drops the winner's membership (its system stays), so the loser downs
/// itself; waits for the loser's own `Down`.
async fn split(loser: &Cluster, winner: Cluster) {
    let mut own = loser.subscribe();
    let me = loser.myself().node.clone();
    drop(winner);
    within("the loser downs itself", async {
        loop {
            if let Ok(e) = own.recv().await
                && e.member.node == me
                && e.member.state == MemberState::Down
            {
                return;
            }
        }
    })
    .await;
}

/// Ten messages told with `tell`, the first held by the gate; then the
/// loser downs itself and the gate opens: the actor may finish the
/// message in hand, and handles none of the nine behind it.
async fn held_when_down(
    counts: &Counts,
    gate: &Semaphore,
    loser: &Cluster,
    winner: Cluster,
    tell: impl Fn(Work),
) {
    for n in 0..10 {
        tell(Work(n));
    }
    eventually("the actor holds the first message", || {
        counts.handled.load(Ordering::SeqCst) == 1
    })
    .await;
    split(loser, winner).await;
    gate.add_permits(100);
    eventually("the actor stops", || {
        counts.stopped.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(counts.handled.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downed_node_stops_its_entities_where_they_stand() {
    let ((system, cluster), (other, winner)) = pair().await;
    let counts = Arc::new(Counts::default());
    let gate = Arc::new(Semaphore::new(0));
    let (c, g) = (counts.clone(), gate.clone());
    // Only the loser hosts: every entity runs there.
    let me = cluster.myself().node.clone();
    let sharding = Sharding::start(
        &system,
        &cluster,
        "Gated",
        move |_: &EntityId| Gated {
            counts: c.clone(),
            gate: g.clone(),
        },
        ShardingSettings {
            tick: Duration::from_millis(50),
            hosts: Some(Arc::new(move |node: &str| node == me)),
            ..ShardingSettings::default()
        },
    )
    .await
    .expect("starts");
    let entity = sharding.entity_ref("e");
    held_when_down(&counts, &gate, &cluster, winner, |w| {
        entity.tell(w).expect("the local region takes it");
    })
    .await;
    // Nothing starts here again: the fenced region drops the message, or
    // has stopped already and refuses it; a dead letter either way.
    let before = system.dead_letters();
    let _ = entity.tell(Work(10));
    eventually("the late message is a dead letter", || {
        system.dead_letters() > before
    })
    .await;
    assert_eq!(counts.started.load(Ordering::SeqCst), 1);
    assert_eq!(counts.handled.load(Ordering::SeqCst), 1);
    other.shutdown().await;
    system.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downed_node_stops_its_singleton_where_it_stands() {
    let ((system, cluster), (other, winner)) = pair().await;
    let counts = Arc::new(Counts::default());
    let gate = Arc::new(Semaphore::new(0));
    let (c, g) = (counts.clone(), gate.clone());
    // Only the loser may host it.
    let me = cluster.myself().node.clone();
    let singleton = Singleton::start(
        &system,
        &cluster,
        "gated",
        move || Gated {
            counts: c.clone(),
            gate: g.clone(),
        },
        SingletonSettings::default().hosts_named([me]),
    )
    .expect("starts");
    held_when_down(&counts, &gate, &cluster, winner, |w| {
        singleton.tell(w).expect("buffered or sent");
    })
    .await;
    assert_eq!(counts.started.load(Ordering::SeqCst), 1);
    other.shutdown().await;
    system.shutdown().await;
}
