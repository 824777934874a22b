//! Cluster membership (`actors::cluster`) on loopback: nodes join through
//! a seed, converge, see a silent node go down, a leaving node leave
//! without a detector timeout, a restarted node rejoin as a new
//! incarnation, and refuse packets from strangers.

use std::{net::SocketAddr, time::Duration};

use actors::{
    ActorSystem, RemoteEvent, SystemConfig,
    cluster::{Cluster, ClusterConfig, ClusterEvent, MemberState},
};
use integration_tests::{actor_system, actor_system_with, eventually, seeded, within};
use tokio::net::UdpSocket;
use transport::SharedSecret;

/// Short periods, so that tests finish quickly; the suspect timeout is a
/// parameter because some tests must tell a detector verdict from a leave.
fn fast(suspect: Duration) -> ClusterConfig {
    let mut config = ClusterConfig::new();
    config
        .set_probe(Duration::from_millis(200), Duration::from_millis(100))
        .expect("valid probe periods")
        .set_suspect_timeout(suspect)
        .set_remove_down_after(Duration::from_secs(30))
        .set_announce_interval(Duration::from_millis(50))
        .expect("a valid interval");
    config
}

/// `n` nodes, the first one the seed of the others.
async fn cluster_of(n: usize, config: &ClusterConfig) -> Vec<(ActorSystem, Cluster)> {
    let mut nodes = Vec::with_capacity(n);
    let first = actor_system("n0").await;
    let seed_cluster = Cluster::join(&first, config.clone()).await.expect("joins");
    let seed = seed_cluster.myself().udp.to_string();
    nodes.push((first, seed_cluster));
    for i in 1..n {
        let s = actor_system(&format!("n{i}")).await;
        let c = Cluster::join(&s, seeded(config, seed.clone()))
            .await
            .expect("joins");
        nodes.push((s, c));
    }
    nodes
}

/// Waits until every node sees `up` other members up. It re-checks on
/// each membership event of any node instead of spinning: with twenty
/// nodes on two workers, a spinning waiter took a worker and the view
/// locks from the very tasks that have to answer probes in time.
async fn converged(nodes: &[(ActorSystem, Cluster)], up: usize) {
    let changed = std::sync::Arc::new(tokio::sync::Notify::new());
    // Subscribed before the first check, so no change goes unseen; a
    // lagging subscriber still wakes the waiter.
    let forwarders: Vec<tokio::task::JoinHandle<()>> = nodes
        .iter()
        .map(|(_, c)| {
            let mut events = c.subscribe();
            let changed = changed.clone();
            tokio::spawn(async move {
                while !matches!(
                    events.recv().await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed)
                ) {
                    changed.notify_one();
                }
            })
        })
        .collect();
    let counts = || -> Vec<usize> { nodes.iter().map(|(_, c)| c.up_members().len()).collect() };
    let done = tokio::time::timeout(integration_tests::TIMEOUT, async {
        while counts().iter().any(|&n| n != up) {
            changed.notified().await;
        }
    })
    .await;
    for f in forwarders {
        f.abort();
    }
    // Who holds whom as what, to tell a slow convergence from nodes
    // that downed themselves or each other.
    let views: Vec<String> = nodes
        .iter()
        .map(|(_, c)| {
            let mut others: Vec<String> = c
                .members()
                .iter()
                .filter(|m| m.state != MemberState::Up)
                .map(|m| format!("{}={:?}", m.node, m.state))
                .collect();
            others.sort();
            format!(
                "{} ({:?}): {}",
                c.myself().node,
                c.myself().state,
                others.join(" ")
            )
        })
        .collect();
    assert!(
        done.is_ok(),
        "not every node sees {up} members up: {:?}; members not up, per node:\n{}",
        counts(),
        views.join("\n")
    );
}

#[tokio::test]
async fn five_nodes_join_through_a_seed_and_converge() {
    let nodes = cluster_of(5, &fast(Duration::from_secs(5))).await;
    converged(&nodes, 4).await;
    for (s, c) in &nodes {
        assert_eq!(c.myself().state, MemberState::Up);
        assert_eq!(c.myself().node, s.node());
        // Each member maps to its node address and uid.
        for m in c.up_members() {
            let (other, oc) = nodes
                .iter()
                .find(|(o, _)| o.node() == m.node)
                .expect("a real node");
            assert_eq!(m.uid, oc.myself().uid, "{} has another uid", other.node());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_nodes_converge() {
    // The default failure detector (probe every 1.5 s, answer within
    // 0.5 s, suspects down after 10 s), only the joins hurried: twenty
    // nodes share two workers here and the CPU with whatever else CI
    // runs, and a probe is answered only when the probed node's task is
    // polled. With `fast`'s 100 ms a loaded machine answered too late
    // often enough that some node was always suspect somewhere: the
    // view never settled, and once it had been unstable for 17.5 s
    // nodes downed themselves. The defaults are what a real cluster
    // runs, so this is the convergence users get.
    let mut config = ClusterConfig::new();
    config
        .set_announce_interval(Duration::from_millis(50))
        .expect("a valid interval");
    let nodes = cluster_of(20, &config).await;
    converged(&nodes, 19).await;
}

#[tokio::test]
async fn a_silent_node_is_seen_down_by_all_and_quarantined() {
    let mut nodes = cluster_of(5, &fast(Duration::from_millis(300))).await;
    converged(&nodes, 4).await;
    let mut quarantines = nodes[0].0.subscribe_remote_events();
    let (dead_system, dead) = nodes.pop().expect("five");
    let dead_node = dead.myself().node.clone();
    let dead_uid = dead.myself().uid;
    // Membership stops without a word, as if the process died (its
    // TCP endpoint stays up, so only membership can tell).
    drop(dead);
    eventually("every node sees the silent one down", || {
        nodes.iter().all(|(_, c)| {
            c.members()
                .iter()
                .any(|m| m.node == dead_node && m.state == MemberState::Down)
        })
    })
    .await;
    // Remoting agrees: the incarnation is quarantined, "member down",
    // though its TCP link was never lost.
    within("quarantine", async {
        loop {
            if let Ok(RemoteEvent::Quarantined { node, uid, reason }) = quarantines.recv().await
                && node == dead_node
            {
                assert_eq!(uid, dead_uid);
                assert!(reason.contains("member down"), "{reason}");
                return;
            }
        }
    })
    .await;
    dead_system.shutdown().await;
}

#[tokio::test]
async fn a_leaving_node_is_removed_without_a_detector_timeout() {
    // A detector would take a minute: only the leave can be seen in time.
    let nodes = cluster_of(4, &fast(Duration::from_secs(60))).await;
    converged(&nodes, 3).await;
    let mut events = nodes[0].1.subscribe();
    let mut own = nodes[3].1.subscribe();
    let leaving = nodes[3].1.myself().node.clone();
    within("leave", nodes[3].1.leave()).await.expect("leaves");
    assert_eq!(nodes[3].1.myself().state, MemberState::Left);
    // The leaving node's own subscribers hear of it too.
    let mine: Vec<(Option<MemberState>, MemberState)> = std::iter::from_fn(|| own.try_recv().ok())
        .filter(|e| e.member.node == leaving)
        .map(|e| (e.from, e.member.state))
        .collect();
    assert_eq!(
        mine,
        [
            (Some(MemberState::Up), MemberState::Leaving),
            (Some(MemberState::Leaving), MemberState::Left)
        ]
    );
    eventually("the others see it left", || {
        nodes[..3].iter().all(|(_, c)| {
            c.members()
                .iter()
                .any(|m| m.node == leaving && m.state == MemberState::Left)
        })
    })
    .await;
    let e: ClusterEvent = within("event", async {
        loop {
            let e = events.recv().await.expect("events");
            if e.member.node == leaving {
                return e;
            }
        }
    })
    .await;
    assert_eq!(e.member.state, MemberState::Left);
    assert_eq!(e.from, Some(MemberState::Up));
    // Leaving twice is an error, not a hang.
    assert!(nodes[3].1.leave().await.is_err());
}

#[tokio::test]
async fn a_restarted_node_rejoins_as_a_new_incarnation() {
    let config = fast(Duration::from_millis(300));
    let mut nodes = cluster_of(3, &config).await;
    converged(&nodes, 2).await;
    let seed = nodes[0].1.myself().udp.to_string();
    let (old_system, old) = nodes.pop().expect("three");
    let addr = old_system.local_addr().expect("remote");
    let old_uid = old.myself().uid;
    within("leave", old.leave()).await.expect("leaves");
    old_system.shutdown().await;
    // The same TCP and UDP port, a new incarnation.
    let mut restarted = None;
    for _ in 0..200 {
        match ActorSystem::with_config(
            "n2",
            Some(addr),
            integration_tests::secured_system(SystemConfig::default()),
        )
        .await
        {
            Ok(s) => {
                restarted = Some(s);
                break;
            }
            Err(_) => tokio::task::yield_now().await,
        }
    }
    let system = restarted.expect("the port is free again");
    let again = within("join", async {
        loop {
            if let Ok(c) = Cluster::join(&system, seeded(&config, seed.clone())).await {
                return c;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let new_uid = again.myself().uid;
    assert_ne!(new_uid, old_uid);
    let node = again.myself().node.clone();
    eventually("the others see the new incarnation up", || {
        nodes.iter().all(|(_, c)| {
            c.members()
                .iter()
                .any(|m| m.node == node && m.uid == new_uid && m.state == MemberState::Up)
        })
    })
    .await;
    eventually("and the restarted node sees them", || {
        again.up_members().len() == 2
    })
    .await;
}

#[tokio::test]
async fn forged_and_malformed_packets_are_refused_and_counted() {
    let nodes = cluster_of(2, &fast(Duration::from_secs(5))).await;
    converged(&nodes, 1).await;
    let target: SocketAddr = nodes[0].1.myself().udp;
    let raw = UdpSocket::bind("127.0.0.1:0").await.expect("binds");
    // Not a membership packet.
    raw.send_to(b"hello", target).await.expect("sent");
    // The right shape, a forged tag.
    let mut forged = b"RC\x01\x00".to_vec();
    forged.extend_from_slice(&[0u8; 16]);
    forged.extend_from_slice(b"payload");
    raw.send_to(&forged, target).await.expect("sent");
    eventually("both refused", || {
        let s = nodes[0].1.stats();
        s.malformed >= 1 && s.unauthenticated >= 1
    })
    .await;
    // Membership goes on.
    assert_eq!(nodes[0].1.up_members().len(), 1);
}

#[tokio::test]
async fn a_node_without_the_secret_cannot_join() {
    let nodes = cluster_of(2, &fast(Duration::from_secs(5))).await;
    converged(&nodes, 1).await;
    let mut config = SystemConfig::default();
    config
        .transport_mut()
        .set_shared_secret(Some(SharedSecret::new(
            "another-secret-another-secret-0123",
        )))
        .unwrap();
    let intruder = actor_system_with("intruder", config).await;
    let seed = nodes[0].1.myself().udp.to_string();
    let c = Cluster::join(&intruder, seeded(&fast(Duration::from_secs(5)), seed))
        .await
        .expect("starts");
    eventually("the seed refuses its announces", || {
        nodes[0].1.stats().unauthenticated >= 3
    })
    .await;
    assert!(c.members().is_empty());
    assert_eq!(c.myself().state, MemberState::Joining);
    for (_, n) in &nodes {
        assert!(n.members().iter().all(|m| m.node != intruder.node()));
    }
    // The joining side is told, not left waiting in silence.
    let err = c
        .joined(Duration::from_millis(300))
        .await
        .expect_err("no seed answers a wrong secret");
    assert!(
        matches!(err, actors::cluster::ClusterError::NoSeedAnswered { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("secret"), "{err}");
    // A node with the secret has joined.
    within("joined", nodes[1].1.joined(Duration::from_secs(5)))
        .await
        .expect("joined");
}

#[tokio::test]
async fn a_local_system_or_a_wildcard_address_cannot_join() {
    let local = ActorSystem::local("l").expect("local");
    assert!(Cluster::join(&local, ClusterConfig::new()).await.is_err());
    let s = actor_system("w").await;
    let err = Cluster::join(
        &s,
        ClusterConfig::new()
            .set_udp_bind("0.0.0.0:0".parse().unwrap())
            .set_udp_advertise("0.0.0.0:0".parse().unwrap())
            .clone(),
    )
    .await
    .expect_err("a wildcard cannot be a member's address");
    assert!(err.to_string().contains("wildcard"), "{err}");
    assert!(err.to_string().contains("udp_advertise"), "{err}");
}

/// Bound to every interface, membership advertises remoting's host with
/// the bound port (peers need an address to send to); an explicit
/// advertised address wins, as behind NAT or port mapping.
#[tokio::test]
async fn a_wildcard_bind_advertises_the_remoting_host_or_the_configured_address() {
    let s = actor_system("w").await;
    let c = Cluster::join(
        &s,
        ClusterConfig::new()
            .set_udp_bind("0.0.0.0:0".parse().unwrap())
            .clone(),
    )
    .await
    .expect("joins");
    let udp = c.myself().udp;
    assert_eq!(udp.ip().to_string(), "127.0.0.1");
    assert_ne!(udp.port(), 0);
    let s2 = actor_system("w2").await;
    let mapped: SocketAddr = "127.0.0.1:40999".parse().unwrap();
    let c2 = Cluster::join(
        &s2,
        ClusterConfig::new()
            .set_udp_bind("127.0.0.1:0".parse().unwrap())
            .set_udp_advertise(mapped)
            .clone(),
    )
    .await
    .expect("joins");
    assert_eq!(c2.myself().udp, mapped);
}

/// A group member's message.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Work(u64);

impl actors::RemoteMessage for Work {
    const MANIFEST: &'static str = "it.cluster.Work";
}

/// Another type, to show that a group lists only refs of the asked type.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Other(u64);

impl actors::RemoteMessage for Other {
    const MANIFEST: &'static str = "it.cluster.Other";
}

/// Reports each `Work` it handles, with its own name.
struct Worker {
    name: &'static str,
    done: tokio::sync::mpsc::UnboundedSender<(&'static str, u64)>,
}

impl actors::Actor for Worker {
    type Msg = Work;
    async fn handle(&mut self, Work(n): Work, _: &mut actors::Ctx<Self>) -> actors::ActorResult {
        let _ = self.done.send((self.name, n));
        Ok(())
    }
}

#[tokio::test]
async fn groups_list_typed_refs_cluster_wide_and_drop_members_that_go() {
    let mut nodes = cluster_of(3, &fast(Duration::from_millis(300))).await;
    converged(&nodes, 2).await;
    let (tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let mut groups = nodes[0].1.subscribe_groups();
    let w1 = nodes[1].0.spawn(Worker {
        name: "w1",
        done: tx.clone(),
    });
    let w2 = nodes[1].0.spawn(Worker {
        name: "w2",
        done: tx.clone(),
    });
    let w3 = nodes[2].0.spawn(Worker {
        name: "w3",
        done: tx.clone(),
    });
    for (i, w) in [(1, &w1), (1, &w2), (2, &w3)] {
        nodes[i].1.join_group("workers", w).await.expect("joins");
    }
    // Only a node's own actors can join its groups.
    assert!(matches!(
        nodes[1].1.join_group("workers", &w3).await,
        Err(actors::cluster::ClusterError::NotLocal(_))
    ));
    eventually("node 0 sees three workers", || {
        nodes[0].1.group::<Work>("workers").len() == 3
    })
    .await;
    let e = within("group event", groups.recv()).await.expect("event");
    assert_eq!(e.group, "workers");
    assert!(nodes[0].1.group::<Other>("workers").is_empty());
    assert_eq!(nodes[0].1.groups(), ["workers"]);
    // The refs work: each worker gets its message.
    for (i, r) in nodes[0].1.group::<Work>("workers").iter().enumerate() {
        r.tell(Work(i as u64)).expect("room");
    }
    let mut names = Vec::new();
    for _ in 0..3 {
        names.push(within("work", done.recv()).await.expect("done").0);
    }
    names.sort_unstable();
    assert_eq!(names, ["w1", "w2", "w3"]);
    // A late joiner learns the groups.
    let late = actor_system("late").await;
    let seed = nodes[0].1.myself().udp.to_string();
    let late_c = Cluster::join(&late, seeded(&fast(Duration::from_millis(300)), seed))
        .await
        .expect("joins");
    eventually("the late joiner sees three workers", || {
        late_c.group::<Work>("workers").len() == 3
    })
    .await;
    // A stopped actor leaves its groups.
    w2.stop();
    eventually("w2 left", || nodes[0].1.group::<Work>("workers").len() == 2).await;
    // A member that goes down takes its entries with it.
    let (_s2, c2) = nodes.pop().expect("three");
    drop(c2);
    eventually("node 2's worker is gone", || {
        let g = nodes[0].1.group::<Work>("workers");
        g.len() == 1 && g[0].path() == w1.path()
    })
    .await;
}

#[tokio::test]
async fn a_member_judged_down_terminates_watches_on_its_actors() {
    let mut nodes = cluster_of(3, &fast(Duration::from_millis(300))).await;
    converged(&nodes, 2).await;
    let (tx, _done) = tokio::sync::mpsc::unbounded_channel();
    let (doomed_system, doomed) = nodes.pop().expect("three");
    doomed_system
        .spawn_named(
            "w",
            Worker {
                name: "w",
                done: tx,
            },
        )
        .expect("free");
    let path = integration_tests::actor_path(&doomed_system, "w");
    let remote = within("resolve", nodes[0].0.resolve::<Work>(&path))
        .await
        .expect("resolves");
    // A live TCP link with heartbeats: only membership can end the watch.
    let watch = remote.watch();
    drop(doomed);
    let t = within("the watch ends", watch).await;
    match &t.reason {
        actors::StopReason::NodeUnreachable(why) => assert!(why.contains("member down"), "{why}"),
        other => panic!("unexpected reason {other}"),
    }
    doomed_system.shutdown().await;
}

/// Takes a millisecond per `Work`, so that 100 queued messages are still
/// queued when its node starts to leave.
struct SlowWorker {
    done: tokio::sync::mpsc::UnboundedSender<(&'static str, u64)>,
}

impl actors::Actor for SlowWorker {
    type Msg = Work;
    async fn handle(&mut self, Work(n): Work, _: &mut actors::Ctx<Self>) -> actors::ActorResult {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = self.done.send(("slow", n));
        Ok(())
    }
}

#[tokio::test]
async fn leave_and_drain_handles_queued_work_and_others_see_the_node_left() {
    let nodes = cluster_of(2, &fast(Duration::from_secs(60))).await;
    converged(&nodes, 1).await;
    let (tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let w = nodes[1].0.spawn(SlowWorker { done: tx });
    for i in 0..100 {
        w.tell(Work(i)).expect("room");
    }
    let leaving = nodes[1].1.myself().node.clone();
    let drained = within(
        "leave and drain",
        nodes[1]
            .1
            .leave_and_drain(&nodes[1].0, Duration::from_secs(10)),
    )
    .await
    .expect("leaves");
    assert!(drained, "every queue drained within the deadline");
    // All 100 queued messages were handled before the node stopped.
    let mut handled = 0;
    while done.try_recv().is_ok() {
        handled += 1;
    }
    assert_eq!(handled, 100);
    eventually("the other node sees it left", || {
        nodes[0]
            .1
            .members()
            .iter()
            .any(|m| m.node == leaving && m.state == MemberState::Left)
    })
    .await;
}

#[tokio::test]
async fn a_node_keeps_at_most_max_members_and_counts_the_rest() {
    let first = actor_system("n0").await;
    let mut config = fast(Duration::from_secs(10));
    config.set_max_members(2).expect("at least 1");
    let bounded = Cluster::join(&first, config).await.expect("joins");
    let seed = bounded.myself().udp.to_string();
    let mut others = Vec::new();
    for i in 1..=5 {
        let s = actor_system(&format!("n{i}")).await;
        let c = Cluster::join(&s, seeded(&fast(Duration::from_secs(10)), seed.clone()))
            .await
            .expect("joins");
        others.push((s, c));
    }
    eventually(
        "packets naming a third member are refused and counted",
        || bounded.stats().full >= 3,
    )
    .await;
    eventually("the bounded node keeps two members", || {
        bounded.members().len() == 2
    })
    .await;
    assert!(bounded.members().len() <= 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_bad_packets_logs_a_few_lines() {
    let logs = integration_tests::LogCapture::install(tracing::Level::WARN);
    let s = actor_system("n0").await;
    let c = Cluster::join(&s, fast(Duration::from_secs(5)))
        .await
        .expect("joins");
    let raw = UdpSocket::bind("127.0.0.1:0").await.expect("binds");
    for _ in 0..500 {
        raw.send_to(b"not a membership packet", c.myself().udp)
            .await
            .expect("sent");
    }
    eventually("most refused", || c.stats().malformed >= 256).await;
    let lines = logs.lines_with("membership packet refused");
    assert!(
        (1..=10).contains(&lines),
        "{} refusals logged {lines} lines",
        c.stats().malformed
    );
}

/// `n` `Work` results from `done`, by worker name.
async fn names_of(
    done: &mut tokio::sync::mpsc::UnboundedReceiver<(&'static str, u64)>,
    n: usize,
) -> Vec<&'static str> {
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(within("work", done.recv()).await.expect("done").0);
    }
    names.sort_unstable();
    names
}

#[tokio::test]
async fn a_router_on_a_cluster_group_follows_the_group() {
    use actors::{Router, RoutingLogic};

    let mut nodes = cluster_of(3, &fast(Duration::from_millis(300))).await;
    converged(&nodes, 2).await;
    let (tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let worker = |name| Worker {
        name,
        done: tx.clone(),
    };
    // One worker on node 0 is in the group from the start.
    let a = nodes[0].0.spawn(worker("a"));
    nodes[0].1.join_group("g", &a).await.expect("joins");
    let router =
        Router::builder(RoutingLogic::round_robin()).cluster_group(&nodes[0].0, &nodes[0].1, "g");
    assert_eq!(router.routees().len(), 1);

    // A worker on node 1 joins later: the router routes to it too.
    let b = nodes[1].0.spawn(worker("b"));
    nodes[1].1.join_group("g", &b).await.expect("joins");
    within("b is a routee", router.wait_routees(|r| r.len() == 2)).await;
    for i in 0..4 {
        router.tell(Work(i)).expect("room");
    }
    assert_eq!(names_of(&mut done, 4).await, ["a", "a", "b", "b"]);

    // It leaves the group but keeps running (its watch never fires):
    // only the group says the router should stop sending to it.
    nodes[1].1.leave_group("g", &b).await.expect("leaves");
    within("b is no routee", router.wait_routees(|r| r.len() == 1)).await;
    for i in 0..4 {
        router.tell(Work(i)).expect("room");
    }
    assert_eq!(names_of(&mut done, 4).await, ["a"; 4]);

    // A worker on node 2 joins, then its node falls silent and is judged
    // down: its entry goes, and so does the routee.
    let c = nodes[2].0.spawn(worker("c"));
    nodes[2].1.join_group("g", &c).await.expect("joins");
    within("c is a routee", router.wait_routees(|r| r.len() == 2)).await;
    let (silent_system, silent) = nodes.pop().expect("three");
    drop(silent);
    let left = within("c is no routee", router.wait_routees(|r| r.len() == 1)).await;
    assert_eq!(left[0].path(), a.path());
    for i in 0..4 {
        router.tell(Work(i)).expect("room");
    }
    assert_eq!(names_of(&mut done, 4).await, ["a"; 4]);
    router.stop();
    silent_system.shutdown().await;
}

/// A system that left can join again: the same node and uid, a new
/// membership (a later start stamp), up for everyone.
#[tokio::test]
async fn a_system_that_left_joins_again_as_a_new_membership() {
    let config = fast(Duration::from_millis(300));
    let nodes = cluster_of(3, &config).await;
    converged(&nodes, 2).await;
    let seed = nodes[0].1.myself().udp.to_string();
    let node = nodes[2].1.myself().node.clone();
    let uid = nodes[2].1.myself().uid;
    within("leave", nodes[2].1.leave()).await.expect("leaves");
    eventually("the others see it left", || {
        nodes[..2].iter().all(|(_, c)| {
            c.members()
                .iter()
                .any(|m| m.node == node && m.state == MemberState::Left)
        })
    })
    .await;
    // Its socket is closed when `leave` returns: the port is free.
    let again = within("join", Cluster::join(&nodes[2].0, seeded(&config, seed)))
        .await
        .expect("joins again");
    assert_eq!(again.myself().uid, uid);
    eventually("up again for everyone", || {
        again.up_members().len() == 2
            && nodes[..2].iter().all(|(_, c)| {
                c.members()
                    .iter()
                    .any(|m| m.node == node && m.uid == uid && m.state == MemberState::Up)
            })
    })
    .await;
}

/// A member that restarts on the same address (here: its system shuts
/// down without leaving, so the others quarantine the old incarnation,
/// as after a kill) gets traffic again through the refs `group` hands out
/// and through a cluster-group router, with nothing resolved by hand: a
/// group entry names the incarnation that published it.
#[tokio::test]
async fn a_restarted_member_gets_traffic_through_groups_and_routers() {
    use actors::{Router, RoutingLogic};

    let config = fast(Duration::from_secs(5));
    let mut nodes = cluster_of(3, &config).await;
    converged(&nodes, 2).await;
    let seed = nodes[0].1.myself().udp.to_string();
    let (tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let w = nodes[2].0.spawn(Worker {
        name: "old",
        done: tx.clone(),
    });
    nodes[2].1.join_group("g", &w).await.expect("joins");
    let router =
        Router::builder(RoutingLogic::round_robin()).cluster_group(&nodes[0].0, &nodes[0].1, "g");
    within(
        "the worker is a routee",
        router.wait_routees(|r| r.len() == 1),
    )
    .await;
    router.tell(Work(1)).expect("room");
    assert_eq!(names_of(&mut done, 1).await, ["old"]);

    let (old_system, old) = nodes.pop().expect("three");
    let addr = old_system.local_addr().expect("remote");
    let old_uid = old.myself().uid;
    drop(old);
    old_system.shutdown().await;
    let (system, again) = restart_on("n2", addr, &seeded(&config, seed.clone())).await;
    assert_ne!(again.myself().uid, old_uid);
    let w = system.spawn(Worker {
        name: "new",
        done: tx.clone(),
    });
    again.join_group("g", &w).await.expect("joins");
    // The group's ref reaches the new incarnation.
    let start = std::time::Instant::now();
    within("the group lists the new worker and it is reached", async {
        loop {
            if let [r] = nodes[0].1.group::<Work>("g").as_slice()
                && r.tell(Work(2)).is_ok()
                && let Ok(Some(got)) =
                    tokio::time::timeout(Duration::from_millis(200), done.recv()).await
            {
                assert_eq!(got.0, "new");
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    // So does the router: its routee was replaced, not kept at the old
    // incarnation or dropped for good.
    within("the router routes to the new worker", async {
        loop {
            if router.tell(Work(3)).is_ok()
                && let Ok(Some(got)) =
                    tokio::time::timeout(Duration::from_millis(200), done.recv()).await
            {
                assert_eq!(got.0, "new");
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "traffic resumed {:?} after the new worker joined its group",
        start.elapsed()
    );
    router.stop();
}

/// Restarts `system` (whose address was `addr`) as node `name` on the
/// same TCP and UDP port, retrying while the port is still taken, and
/// joins it through `seeds`.
async fn restart_on(
    name: &str,
    addr: SocketAddr,
    config: &ClusterConfig,
) -> (ActorSystem, Cluster) {
    within("restart on the same address", async {
        loop {
            if let Ok(s) = ActorSystem::with_config(
                name,
                Some(addr),
                integration_tests::secured_system(SystemConfig::default()),
            )
            .await
            {
                if let Ok(c) = Cluster::join(&s, config.clone()).await {
                    return (s, c);
                }
                s.shutdown().await;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// The only seed restarts (a new incarnation on the same address, which
/// knows nobody): the others keep contacting their seed while it is not a
/// live member, so the cluster is whole again without an operator.
#[tokio::test]
async fn a_restarted_seed_finds_its_cluster_again() {
    let config = fast(Duration::from_secs(5));
    let mut nodes = cluster_of(4, &config).await;
    converged(&nodes, 3).await;
    let (seed_system, seed) = nodes.remove(0);
    let addr = seed_system.local_addr().expect("remote");
    let old_uid = seed.myself().uid;
    // As after a crash: no leave.
    drop(seed);
    seed_system.shutdown().await;
    // Its seed list names only itself.
    let (system, again) = restart_on("n0", addr, &seeded(&config, addr.to_string())).await;
    assert_ne!(again.myself().uid, old_uid);
    nodes.insert(0, (system, again));
    converged(&nodes, 3).await;
}

/// A node cut off from the others is on the minority side: once the view
/// has been stable for `stable_after`, it downs itself and, by default,
/// shuts its system down (the majority downing a silent member is
/// `a_silent_node_is_seen_down_by_all_and_quarantined`).
#[tokio::test]
async fn a_node_cut_off_from_the_majority_downs_itself() {
    let mut nodes = cluster_of(3, &fast(Duration::from_millis(300))).await;
    converged(&nodes, 2).await;
    let (system, lonely) = nodes.pop().expect("three");
    let mut own = lonely.subscribe();
    let me = lonely.myself().node.clone();
    let addr = system.local_addr().expect("remote");
    // Nodes 0 and 1 stop answering node 2 (their membership stops without
    // a word, their systems stay): to node 2 it is a partition, 1 of 3.
    let mut others = Vec::new();
    for (s, c) in nodes {
        drop(c);
        others.push(s);
    }
    let e = within("node 2 downs itself", async {
        loop {
            if let Ok(e) = own.recv().await
                && e.member.node == me
            {
                return e;
            }
        }
    })
    .await;
    assert_eq!(e.member.state, MemberState::Down);
    assert_eq!(lonely.myself().state, MemberState::Down);
    // And its system shut down: nothing listens on its address.
    eventually("node 2's system is shut down", || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err()
    })
    .await;
}

/// With `set_shutdown_when_downed(false)` only membership stops: the
/// application decides, on its own event.
#[tokio::test]
async fn a_downed_node_can_be_left_running_for_the_application_to_decide() {
    let mut config = fast(Duration::from_millis(300));
    config.set_shutdown_when_downed(false);
    let mut nodes = cluster_of(2, &config).await;
    converged(&nodes, 1).await;
    // Two nodes: an equal split; the side holding the lowest address
    // stays. Silence the node with the lower address, so that the other
    // one is on the losing side.
    nodes.sort_by_key(|(_, c)| c.myself().node);
    let (low_system, low) = nodes.remove(0);
    let (system, high) = nodes.remove(0);
    let mut own = high.subscribe();
    let me = high.myself().node.clone();
    drop(low);
    within("the higher address downs itself", async {
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
    // Its system still runs.
    let addr = system.local_addr().expect("remote");
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok());
    assert!(
        matches!(
            high.rejoin(["127.0.0.1:1"]),
            Err(actors::cluster::ClusterError::Stopped)
        ) || high.myself().state == MemberState::Down
    );
    low_system.shutdown().await;
}

/// `when_members_up` completes once the cluster has the size asked for,
/// and a graceful shutdown leaves the cluster first: the others see the
/// node `Left`, not suspect or down.
#[tokio::test]
async fn members_up_hook_and_a_graceful_shutdown_leaves() {
    let config = fast(Duration::from_secs(30));
    let nodes = cluster_of(3, &config).await;
    within("three up", nodes[0].1.when_members_up(3)).await;
    // Node 2 tells the members it knows: wait until it knows them all.
    converged(&nodes, 2).await;
    let node = nodes[2].1.myself().node.clone();
    let mut events = nodes[0].1.subscribe();
    nodes[2].0.shutdown_gracefully(Duration::from_secs(5)).await;
    // On a loaded machine a probe may time out and a member be suspected
    // for a moment; what must not happen is a down before the leave.
    within("node 2 left", async {
        loop {
            if let Ok(e) = events.recv().await
                && e.member.node == node
            {
                assert_ne!(e.member.state, MemberState::Down, "{e:?}");
                if e.member.state == MemberState::Left {
                    return;
                }
            }
        }
    })
    .await;
}

/// A node configured by its `[cluster]` section (a file, then `ACTORS_*`
/// variables) joins with those settings: its seed list alone brings it
/// into the cluster, whose seed knows nothing of it.
#[tokio::test]
async fn a_node_joins_with_the_cluster_section_of_its_configuration() {
    let seed_system = actor_system("seed").await;
    let seed = Cluster::join(&seed_system, fast(Duration::from_secs(5)))
        .await
        .expect("joins");
    use actors::figment::{
        Figment,
        providers::{Format, Toml},
    };
    let file = Toml::string(&format!(
        r#"
        [cluster]
        seeds = ["{}"]
        probe_period = "200ms"
        probe_rtt = "100ms"
        announce_interval = "50ms"
        "#,
        seed.myself().udp
    ));
    let env = actors::ActorsEnv::from_vars(
        [("ACTORS_CLUSTER__EVENT_CAPACITY".to_owned(), "8".to_owned())],
        true,
    )
    .expect("a known variable");
    let config = SystemConfig::from_figment(&Figment::from(file).merge(env))
        .expect("a valid [cluster] section and variable");
    let system = actor_system_with("configured", config).await;
    let cluster = Cluster::join_configured(&system).await.expect("joins");
    let nodes = [(seed_system, seed), (system, cluster)];
    converged(&nodes, 1).await;
}

/// `rejoin` holds its seeds to `set_seeds`'s rule: a seed that is not
/// `host:port` is refused by key, and a good list is taken.
#[tokio::test]
async fn rejoin_refuses_a_seed_that_is_not_host_and_port() {
    let config = fast(Duration::from_secs(30));
    let mut nodes = cluster_of(1, &config).await;
    let (system, cluster) = nodes.remove(0);
    for bad in ["seed.example", ":2552", "10.0.0.1:port"] {
        match cluster.rejoin(["127.0.0.1:1", bad]) {
            Err(actors::cluster::ClusterError::Config(actors::ConfigError::InvalidValue {
                key,
                ..
            })) => assert_eq!(key, "cluster.seeds", "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    cluster.rejoin(["127.0.0.1:1"]).expect("a good seed");
    system.shutdown().await;
}
