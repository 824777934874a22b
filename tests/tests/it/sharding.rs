//! Cluster sharding (`actors::sharding`) on loopback: entities start on
//! their first message on the owner of their shard, messages of one
//! sender arrive in order, shards move when a node joins or leaves with
//! messages in flight (all delivered, in order, never two live instances
//! of one entity), entities of a killed node restart elsewhere after it
//! is downed, and passivation loses nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, StopReason,
    cluster::{Cluster, ClusterConfig},
    sharding::{
        EntityId, MemoryEntityStore, ShardEvent, ShardPhase, Sharding, ShardingSettings, passivate,
    },
};
use integration_tests::{actor_system, eventually, fast_cluster, proxy::Mode, seeded, within};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.sharding.Msg")]
enum Msg {
    /// The `seq`th message of sender `from`.
    Add { from: String, seq: u64 },
    /// Asks the entity to passivate itself.
    Passivate,
    /// Replies with the node the entity runs on.
    Where(ActorRef<String>),
    /// The `seq`th message of a load with a payload, recorded under the
    /// sender `"load"`.
    Load { seq: u64, pad: Vec<u8> },
}

/// What every entity instance of a test records, across nodes (they run
/// in one process).
#[derive(Default)]
struct Book {
    /// Live instances per entity id.
    live: BTreeMap<String, usize>,
    /// Entities that had two live instances at once.
    doubles: Vec<String>,
    /// Nodes each entity started on, in order.
    started: BTreeMap<String, Vec<String>>,
    /// (entity, sender) → the seqs received, in order.
    got: BTreeMap<(String, String), Vec<u64>>,
    /// `stopped` hooks entered.
    stopping: usize,
}

type Shared = Arc<Mutex<Book>>;

fn book(b: &Shared) -> std::sync::MutexGuard<'_, Book> {
    b.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The entities whose latest start was on `node`.
fn started_last_on(b: &Shared, node: &str) -> Vec<String> {
    book(b)
        .started
        .iter()
        .filter(|(_, v)| v.last().is_some_and(|n| n == node))
        .map(|(id, _)| id.clone())
        .collect()
}

struct Ent {
    id: String,
    node: String,
    book: Shared,
}

impl Actor for Ent {
    type Msg = Msg;

    async fn started(&mut self, _: &mut Ctx<Self>) -> ActorResult {
        let mut b = book(&self.book);
        let n = b.live.entry(self.id.clone()).or_default();
        *n += 1;
        if *n > 1 {
            b.doubles.push(self.id.clone());
        }
        b.started
            .entry(self.id.clone())
            .or_default()
            .push(self.node.clone());
        Ok(())
    }

    async fn handle(&mut self, msg: Msg, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Msg::Add { from, seq } => book(&self.book)
                .got
                .entry((self.id.clone(), from))
                .or_default()
                .push(seq),
            Msg::Passivate => passivate(ctx),
            Msg::Where(r) => {
                let _ = r.tell(self.node.clone());
            }
            Msg::Load { seq, .. } => book(&self.book)
                .got
                .entry((self.id.clone(), LOAD.to_owned()))
                .or_default()
                .push(seq),
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        book(&self.book).stopping += 1;
        // A slow cleanup: messages keep arriving while it stops.
        tokio::time::sleep(Duration::from_millis(30)).await;
        if let Some(n) = book(&self.book).live.get_mut(&self.id) {
            *n -= 1;
        }
    }
}

fn settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 20,
        handoff_timeout: Duration::from_secs(3),
        tick: Duration::from_millis(50),
        ..ShardingSettings::default()
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    carts: Sharding<Msg>,
}

async fn start_node(
    name: &str,
    seed: Option<&str>,
    config: &ClusterConfig,
    settings: ShardingSettings,
    b: &Shared,
) -> Node {
    start_on(actor_system(name).await, seed, config, settings, b).await
}

/// Joins `system` to the cluster (through `seed`) and starts sharding of
/// `Cart` on it.
async fn start_on(
    system: ActorSystem,
    seed: Option<&str>,
    config: &ClusterConfig,
    settings: ShardingSettings,
    b: &Shared,
) -> Node {
    let config = match seed {
        Some(seed) => seeded(config, seed),
        None => config.clone(),
    };
    let cluster = Cluster::join(&system, config).await.expect("joins");
    let node = system.node().to_owned();
    let b = b.clone();
    let carts = Sharding::start(
        &system,
        &cluster,
        "Cart",
        move |id: &EntityId| Ent {
            id: id.clone(),
            node: node.clone(),
            book: b.clone(),
        },
        settings,
    )
    .await
    .expect("sharding starts");
    Node {
        system,
        cluster,
        carts,
    }
}

async fn cluster_of(n: usize, config: &ClusterConfig, b: &Shared) -> Vec<Node> {
    let first = start_node("s0", None, config, settings(), b).await;
    let seed = first.cluster.myself().udp.to_string();
    let mut nodes = vec![first];
    for i in 1..n {
        nodes.push(start_node(&format!("s{i}"), Some(&seed), config, settings(), b).await);
    }
    nodes
}

/// Waits until every node's region spreads shards over `hosts` members.
async fn hosts_agree(nodes: &[&Node], hosts: usize) {
    within("every region sees the hosting members", async {
        loop {
            let mut all = true;
            for n in nodes {
                all &= n.carts.state().await.hosts.len() == hosts;
            }
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Sends `Add` 1..=count from `node` to every id, in order per id.
async fn send_all(node: &Node, ids: &[String], count: u64) {
    let from = node.system.node().to_owned();
    for seq in 1..=count {
        for id in ids {
            node.carts
                .entity_ref(id.clone())
                .send(Msg::Add {
                    from: from.clone(),
                    seq,
                })
                .await
                .expect("the local region takes it");
        }
    }
}

/// Sends `msg()` from `node` to every id; returns how many.
async fn send_loads(node: &Node, ids: &[String], msg: impl Fn() -> Msg) -> u64 {
    for id in ids {
        node.carts
            .entity_ref(id.clone())
            .send(msg())
            .await
            .expect("the local region takes it");
    }
    ids.len() as u64
}

/// Waits until every (id, sender) got 1..=count, then checks the order.
async fn all_in_order(b: &Shared, ids: &[String], senders: &[String], count: u64) {
    let complete = || {
        let b = book(b);
        ids.iter().all(|id| {
            senders.iter().all(|s| {
                b.got
                    .get(&(id.clone(), s.clone()))
                    .is_some_and(|v| v.len() as u64 >= count)
            })
        })
    };
    let waited = tokio::time::timeout(integration_tests::TIMEOUT, async {
        while !complete() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let b = book(b);
    let want: Vec<u64> = (1..=count).collect();
    for id in ids {
        for s in senders {
            let got = b
                .got
                .get(&(id.clone(), s.clone()))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                got,
                want,
                "{id} from {s} (waited in time: {})",
                waited.is_ok()
            );
        }
    }
    assert!(b.doubles.is_empty(), "two live instances: {:?}", b.doubles);
}

/// The sender key under which entities record [`Msg::Load`].
const LOAD: &str = "load";

/// Messages of the load the entities recorded, over `ids`.
fn loads_delivered(b: &Shared, ids: &[String]) -> u64 {
    let bk = book(b);
    ids.iter()
        .filter_map(|id| bk.got.get(&(id.clone(), LOAD.to_owned())))
        .map(|v| v.len() as u64)
        .sum()
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("cart-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_start_on_their_owner_and_messages_keep_their_order() {
    let b = Shared::default();
    let nodes = cluster_of(3, &fast_cluster(Duration::from_secs(5)), &b).await;
    hosts_agree(&nodes.iter().collect::<Vec<_>>(), 3).await;
    let ids = ids(60);
    let senders: Vec<String> = nodes.iter().map(|n| n.system.node().to_owned()).collect();
    tokio::join!(
        send_all(&nodes[0], &ids, 30),
        send_all(&nodes[1], &ids, 30),
        send_all(&nodes[2], &ids, 30)
    );
    all_in_order(&b, &ids, &senders, 30).await;
    // Each entity started once, and the entities spread over the nodes:
    // over at least two, since the 60 ids fall in 18 shards placed by
    // rendezvous hashing over random uids, and all 18 miss one of three
    // nodes about once in 500 runs (simulated), but miss two of them
    // about once in 10^8.
    {
        let bk = book(&b);
        assert!(
            bk.started.values().all(|v| v.len() == 1),
            "{:?}",
            bk.started
        );
        let used: BTreeSet<&String> = bk.started.values().flatten().collect();
        assert!(used.len() >= 2, "{used:?}");
    }
    // Asks work from any node, and agree on where an entity is.
    for id in &ids[..5] {
        let mut at = BTreeSet::new();
        for n in &nodes {
            let w = n
                .carts
                .entity_ref(id.clone())
                .ask(Msg::Where, Duration::from_secs(5))
                .await
                .expect("the entity answers");
            at.insert(w);
        }
        assert_eq!(at.len(), 1, "{id} answered from {at:?}");
    }
    // State: the entities counted once over the nodes, shards active.
    let mut entities = 0;
    for n in &nodes {
        let s = n.carts.state().await;
        assert!(
            s.shards.iter().all(|i| i.phase == ShardPhase::Active),
            "{s:?}"
        );
        entities += s.entities;
    }
    assert_eq!(entities, ids.len());
    for n in &nodes {
        n.system.shutdown().await;
    }
}

/// Sends `Add` rounds from `node` to every id (a round every 2 ms, so
/// that they are in flight while the cluster changes) until `stop` is set
/// and at least `min` rounds went out; returns the rounds sent.
async fn send_until(
    node: &Node,
    ids: &[String],
    stop: &std::sync::atomic::AtomicBool,
    min: u64,
) -> u64 {
    let from = node.system.node().to_owned();
    let mut seq = 0;
    while seq < min || !stop.load(std::sync::atomic::Ordering::Relaxed) {
        seq += 1;
        for id in ids {
            node.carts
                .entity_ref(id.clone())
                .send(Msg::Add {
                    from: from.clone(),
                    seq,
                })
                .await
                .expect("the local region takes it");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_takes_shards_over_with_messages_in_flight() {
    let b = Shared::default();
    let config = fast_cluster(Duration::from_secs(5));
    let nodes = cluster_of(2, &config, &b).await;
    hosts_agree(&[&nodes[0], &nodes[1]], 2).await;
    let ids = ids(40);
    let seed = nodes[0].cluster.myself().udp.to_string();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let joiner = async {
        // Let every entity start on the first two first.
        eventually("entities started", || book(&b).started.len() == ids.len()).await;
        let n = start_node("s2", Some(&seed), &config, settings(), &b).await;
        let mut events = n.carts.subscribe();
        hosts_agree(&[&nodes[0], &nodes[1], &n], 3).await;
        // The new node activates shards it took over.
        within("a shard activated on the new node", async {
            while !matches!(events.recv().await, Ok(ShardEvent::Activated { .. })) {}
        })
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        n
    };
    let (joined, r0, r1) = tokio::join!(
        joiner,
        send_until(&nodes[0], &ids, &stop, 20),
        send_until(&nodes[1], &ids, &stop, 20)
    );
    let senders = [
        nodes[0].system.node().to_owned(),
        nodes[1].system.node().to_owned(),
    ];
    for (s, rounds) in senders.iter().zip([r0, r1]) {
        all_in_order(&b, &ids, std::slice::from_ref(s), rounds).await;
    }
    // Some entities moved to the new node: stopped on the old one, then
    // started there.
    {
        let bk = book(&b);
        let moved = bk
            .started
            .values()
            .filter(|v| v.len() > 1 && v.last() == Some(&joined.system.node().to_owned()))
            .count();
        assert!(moved > 0, "{:?}", bk.started);
    }
    let handoffs = nodes[0].carts.state().await.handoffs + nodes[1].carts.state().await.handoffs;
    assert!(handoffs > 0);
    for n in nodes.iter().chain([&joined]) {
        n.system.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_node_hands_its_shards_off_with_messages_in_flight() {
    let b = Shared::default();
    let mut nodes = cluster_of(3, &fast_cluster(Duration::from_secs(5)), &b).await;
    hosts_agree(&nodes.iter().collect::<Vec<_>>(), 3).await;
    let ids = ids(40);
    let leaving = nodes.pop().expect("three");
    let leaver = leaving.system.node().to_owned();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let leave = async {
        // Let every entity start somewhere first.
        eventually("entities started", || book(&b).started.len() == ids.len()).await;
        let drained = leaving
            .system
            .shutdown_gracefully(Duration::from_secs(10))
            .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drained
    };
    let (drained, r0, r1) = tokio::join!(
        leave,
        send_until(&nodes[0], &ids, &stop, 20),
        send_until(&nodes[1], &ids, &stop, 20)
    );
    assert!(drained);
    let senders = [
        nodes[0].system.node().to_owned(),
        nodes[1].system.node().to_owned(),
    ];
    for (s, rounds) in senders.iter().zip([r0, r1]) {
        all_in_order(&b, &ids, std::slice::from_ref(s), rounds).await;
    }
    {
        let bk = book(&b);
        let moved = bk
            .started
            .values()
            .filter(|v| v.first() == Some(&leaver) && v.len() > 1)
            .count();
        assert!(moved > 0, "{:?}", bk.started);
        assert!(
            bk.started.values().all(|v| v.last() != Some(&leaver)),
            "nothing is left on the node that left: {:?}",
            bk.started
        );
    }
    for n in &nodes {
        n.system.shutdown().await;
    }
}

/// Members leave one after the other, each replaced by a new one: every
/// leave hands off as fast as the first, well within the down-removal
/// margin (a leaver waits for no member that is already gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaves_in_a_row_each_hand_off_without_waiting_out_the_margin() {
    const MARGIN: Duration = Duration::from_secs(5);
    let b = Shared::default();
    let config = fast_cluster(MARGIN);
    let mut nodes = cluster_of(3, &config, &b).await;
    let seed = nodes[0].cluster.myself().udp.to_string();
    hosts_agree(&nodes.iter().collect::<Vec<_>>(), 3).await;
    let ids = ids(20);
    for round in 0..3 {
        send_all(&nodes[0], &ids, 1).await;
        let leaving = nodes.pop().expect("three");
        let t0 = std::time::Instant::now();
        assert!(leaving.system.shutdown_gracefully(MARGIN * 2).await);
        let took = t0.elapsed();
        assert!(
            took < MARGIN / 2,
            "leave {round} took {took:?}, about the margin"
        );
        nodes.push(start_node(&format!("n{round}"), Some(&seed), &config, settings(), &b).await);
        hosts_agree(&nodes.iter().collect::<Vec<_>>(), 3).await;
    }
    for n in &nodes {
        n.system.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_of_a_killed_node_restart_elsewhere_once_it_is_down() {
    let b = Shared::default();
    let mut nodes = cluster_of(3, &fast_cluster(Duration::from_secs(1)), &b).await;
    hosts_agree(&nodes.iter().collect::<Vec<_>>(), 3).await;
    let ids = ids(30);
    send_all(&nodes[0], &ids, 1).await;
    all_in_order(&b, &ids, &[nodes[0].system.node().to_owned()], 1).await;
    let killed = nodes.pop().expect("three");
    let dead = killed.system.node().to_owned();
    let on_dead = started_last_on(&b, &dead);
    assert!(!on_dead.is_empty());
    // No leave: the node stops as if its process died.
    killed.system.shutdown().await;
    drop(killed);
    // Each of its entities answers again, from a live node, once the
    // others have downed it (and waited the margin).
    for id in &on_dead {
        let at = within("the entity answers again", async {
            loop {
                match nodes[0]
                    .carts
                    .entity_ref(id.clone())
                    .ask(Msg::Where, Duration::from_secs(5))
                    .await
                {
                    Ok(at) => return at,
                    Err(_) => continue,
                }
            }
        })
        .await;
        assert_ne!(at, dead, "{id}");
    }
    assert!(book(&b).doubles.is_empty());
    for n in &nodes {
        n.system.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_pass_through_a_node_that_no_longer_hosts() {
    // A short margin: the shards of the killed node may start elsewhere
    // soon after it is down; what takes longer is a lost release, asked
    // again only a second later.
    let margin = Duration::from_millis(300);
    let short = || ShardingSettings {
        down_removal_margin: Some(margin),
        ..settings()
    };
    let b = Shared::default();
    let config = fast_cluster(Duration::from_secs(1));
    let a = start_node("s0", None, &config, short(), &b).await;
    let seed = a.cluster.myself().udp.to_string();
    let c = start_node("s1", Some(&seed), &config, short(), &b).await;
    let gone = start_node("s2", Some(&seed), &config, short(), &b).await;
    hosts_agree(&[&a, &c, &gone], 3).await;
    // Only `c` sends: it last sent the shards of `gone` to `gone`.
    let ids = ids(30);
    send_all(&c, &ids, 1).await;
    all_in_order(&b, &ids, &[c.system.node().to_owned()], 1).await;
    let dead = gone.system.node().to_owned();
    let on_dead = started_last_on(&b, &dead);
    assert!(!on_dead.is_empty());
    gone.system.shutdown().await;
    drop(gone);
    hosts_agree(&[&a, &c], 2).await;
    // `a` now owns some of those shards and asks `c` to release them; `c`
    // answers straight, not through the dead node (where the answer
    // would be lost).
    let from = a.system.node().to_owned();
    let asked = std::time::Instant::now();
    for id in &on_dead {
        a.carts
            .entity_ref(id.clone())
            .send(Msg::Add {
                from: from.clone(),
                seq: 1,
            })
            .await
            .expect("the local region takes it");
    }
    all_in_order(&b, &on_dead, std::slice::from_ref(&from), 1).await;
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(800),
        "the shards of the dead node started elsewhere after {took:?} (margin {margin:?})"
    );
    a.system.shutdown().await;
    c.system.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivation_loses_no_message() {
    let b = Shared::default();
    let config = fast_cluster(Duration::from_secs(5));
    let mut s = settings();
    s.passivate_after = Some(Duration::from_millis(300));
    let node = start_node("p0", None, &config, s, &b).await;
    let cart = node.carts.entity_ref("cart-p");
    let me = node.system.node().to_owned();
    // The entity asks to stop every fifth message; what arrives while it
    // stops (its `stopped` hook takes a while) is kept for its next
    // instance.
    for seq in 1..=50u64 {
        cart.send(Msg::Add {
            from: me.clone(),
            seq,
        })
        .await
        .expect("sent");
        if seq % 5 == 0 {
            let stops = book(&b).stopping;
            cart.send(Msg::Passivate).await.expect("sent");
            eventually("the entity stops", || book(&b).stopping > stops).await;
        }
    }
    all_in_order(&b, &["cart-p".to_owned()], std::slice::from_ref(&me), 50).await;
    assert!(book(&b).started["cart-p"].len() > 1, "it was restarted");
    // Idle for `passivate_after`: stopped; the next message starts it.
    eventually("the idle entity passivated", || {
        book(&b).live.get("cart-p").copied() == Some(0)
    })
    .await;
    let before = book(&b).started["cart-p"].len();
    cart.send(Msg::Add {
        from: me.clone(),
        seq: 51,
    })
    .await
    .expect("sent");
    all_in_order(&b, &["cart-p".to_owned()], &[me], 51).await;
    assert_eq!(book(&b).started["cart-p"].len(), before + 1);
    node.system.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_restart_when_their_shard_moves() {
    let b = Shared::default();
    let store = Arc::new(MemoryEntityStore::new());
    let config = fast_cluster(Duration::from_secs(5));
    let mut s = settings();
    s.remember_entities = Some(store.clone());
    let first = start_node("r0", None, &config, s.clone(), &b).await;
    let seed = first.cluster.myself().udp.to_string();
    let second = start_node("r1", Some(&seed), &config, s, &b).await;
    hosts_agree(&[&first, &second], 2).await;
    let ids = ids(20);
    send_all(&first, &ids, 1).await;
    all_in_order(&b, &ids, &[first.system.node().to_owned()], 1).await;
    let gone = second.system.node().to_owned();
    let on_second = started_last_on(&b, &gone);
    assert!(!on_second.is_empty());
    assert!(
        second
            .system
            .shutdown_gracefully(Duration::from_secs(10))
            .await
    );
    // Without a message, each restarts on the first node.
    let stays = first.system.node().to_owned();
    eventually("remembered entities restarted", || {
        let bk = book(&b);
        on_second
            .iter()
            .all(|id| bk.started[id].last() == Some(&stays) && bk.live[id] == 1)
    })
    .await;
    first.system.shutdown().await;
}

/// A forwarding node whose link to the host stalls (the host stops
/// reading it): the forwarder's outbox to the host fills up to its
/// `outbox_bytes` and no further, what does not fit is dropped and
/// counted (a dead letter each), a shard move that needs the stalled
/// outbox for its protocol still completes, and once the link flows
/// again every message is either delivered, in order, or counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_to_a_stalled_region_holds_its_bound_and_counts_what_it_drops() {
    const BOUND: usize = 64 * 1024;
    /// A payload that makes the load outgrow the recipient window (1 MiB
    /// by default) and the outbox quickly.
    const PAD: usize = 1024;
    let b = Shared::default();
    let config = fast_cluster(Duration::from_secs(5));
    // Each node dials the other through a proxy; the failure detector
    // tolerates the stall (it is a slow region, not a dead one).
    let p =
        super::faults_net::Proxied::new(super::faults_net::fast_config(Duration::from_secs(60)))
            .await;
    let host = start_on(p.b.clone(), None, &config, settings(), &b).await;
    let seed = host.cluster.myself().udp.to_string();
    let forwarding = ShardingSettings {
        proxy: true,
        ..settings()
    }
    .outbox_bytes(BOUND)
    .expect("a bound above zero");
    let fwd = start_on(p.a.clone(), Some(&seed), &config, forwarding, &b).await;
    hosts_agree(&[&host, &fwd], 1).await;
    let ids = ids(16);
    send_all(&fwd, &ids, 1).await;
    all_in_order(&b, &ids, &[fwd.system.node().to_owned()], 1).await;

    // The host stops reading what the forwarder sends, on whichever of
    // the two connections carries it; the other way still flows.
    p.to_b.set_mode(Mode::StallToTarget);
    p.to_a.set_mode(Mode::StallToClient);
    let load = |seq| Msg::Load {
        seq,
        pad: vec![7; PAD],
    };
    let dead_before = fwd.system.dead_letters();
    let mut sent = 0u64;
    let mut most = 0;
    for seq in 1..=150 {
        sent += send_loads(&fwd, &ids, || load(seq)).await;
        most = most.max(fwd.carts.state().await.outbox_bytes);
    }
    assert!(most <= BOUND, "the outbox held {most} bytes, past {BOUND}");
    assert!(most > BOUND / 2, "the outbox filled: {most} bytes at most");
    let dropped = fwd.carts.state().await.dropped;
    assert!(dropped > 0, "past the bound messages are dropped");
    assert_eq!(
        fwd.system.dead_letters() - dead_before,
        dropped,
        "each drop is a dead letter"
    );

    // A node joins while the outbox is full: the forwarder's releases of
    // the shards that move to it travel through the stalled outbox
    // (behind what it forwarded there), and are never dropped.
    let joined = start_node("s2", Some(&seed), &config, settings(), &b).await;
    hosts_agree(&[&host, &fwd, &joined], 2).await;
    for seq in 151..=200 {
        sent += send_loads(&fwd, &ids, || load(seq)).await;
    }
    p.to_b.heal();
    p.to_a.heal();

    // Every message is delivered or counted as dropped, somewhere.
    let nodes = [&fwd, &host, &joined];
    within("every message delivered or counted", async {
        loop {
            let mut dropped = 0;
            for n in nodes {
                dropped += n.carts.state().await.dropped;
            }
            let delivered = loads_delivered(&b, &ids);
            assert!(
                delivered + dropped <= sent,
                "{delivered} + {dropped} > {sent}"
            );
            if delivered + dropped == sent {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // What arrived came in the order sent, and never twice.
    {
        let bk = book(&b);
        for id in &ids {
            let got = bk
                .got
                .get(&(id.clone(), LOAD.to_owned()))
                .cloned()
                .unwrap_or_default();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{id}: {got:?}");
        }
        assert!(
            bk.doubles.is_empty(),
            "two live instances: {:?}",
            bk.doubles
        );
    }
    // The shards moved, and everything is reachable again: one more
    // round reaches every entity, and the outbox is empty.
    assert!(joined.carts.state().await.activations > 0);
    let before = loads_delivered(&b, &ids);
    for id in &ids {
        fwd.carts
            .entity_ref(id.clone())
            .send(load(201))
            .await
            .expect("the local region takes it");
    }
    within("the last round delivered", async {
        while loads_delivered(&b, &ids) < before + ids.len() as u64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(fwd.carts.state().await.outbox_bytes, 0);
    for n in nodes {
        n.system.shutdown().await;
    }
}
