//! Cluster singletons (`actors::singleton`) on loopback: the singleton runs
//! once, on the oldest hosting member; a proxy on another node reaches it;
//! a graceful leave of its host moves it with never two instances at once
//! and the messages sent meanwhile delivered in order; an abrupt shutdown
//! of its host moves it once the host is down.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx, RemoteMessage, SendError, StopReason,
    cluster::{Cluster, ClusterConfig},
    singleton::{Lease, MemoryLease, Singleton, SingletonRef, SingletonSettings},
};
use integration_tests::{actor_system, eventually, fast_cluster, seeded, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.singleton.Cmd")]
enum Cmd {
    /// Recorded, with the node that handled it.
    Add(u64),
    /// Answered with the node that handled it.
    Where(ActorRef<String>),
}

/// Every instance of the singleton, on every node of a test, registers
/// here: a second live instance is a failure.
#[derive(Default)]
struct Checker {
    live: AtomicUsize,
    failures: AtomicUsize,
    starts: Mutex<Vec<String>>,
}

struct Instance {
    node: String,
    checker: Arc<Checker>,
    handled: mpsc::UnboundedSender<(String, u64)>,
}

impl Actor for Instance {
    type Msg = Cmd;

    async fn started(&mut self, _: &mut Ctx<Self>) -> ActorResult {
        if self.checker.live.fetch_add(1, Ordering::SeqCst) > 0 {
            self.checker.failures.fetch_add(1, Ordering::SeqCst);
        }
        self.checker
            .starts
            .lock()
            .expect("not poisoned")
            .push(self.node.clone());
        Ok(())
    }

    async fn handle(&mut self, msg: Cmd, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Cmd::Add(n) => {
                let _ = self.handled.send((self.node.clone(), n));
            }
            Cmd::Where(reply) => {
                let _ = reply.tell(self.node.clone());
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        // A slow hook: the next instance must not start before it ends.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.checker.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `n` nodes, the first the seed of the others (and so the oldest, then
/// in order), all up.
async fn cluster_of(n: usize, config: &ClusterConfig) -> Vec<(ActorSystem, Cluster)> {
    let mut nodes: Vec<(ActorSystem, Cluster)> = Vec::with_capacity(n);
    for i in 0..n {
        let s = actor_system(&format!("n{i}")).await;
        let config = match nodes.first() {
            Some((_, seed)) => seeded(config, seed.myself().udp.to_string()),
            None => config.clone(),
        };
        let c = Cluster::join(&s, config).await.expect("joins");
        nodes.push((s, c));
    }
    let up = n - 1;
    eventually("every node sees every other up", || {
        nodes.iter().all(|(_, c)| c.up_members().len() == up)
    })
    .await;
    nodes
}

/// Starts the singleton on each of `nodes`.
fn start_on(
    nodes: &[(ActorSystem, Cluster)],
    checker: &Arc<Checker>,
    handled: &mpsc::UnboundedSender<(String, u64)>,
    settings: &SingletonSettings,
) -> Vec<SingletonRef<Cmd>> {
    nodes
        .iter()
        .map(|(s, c)| {
            let node = s.node().to_owned();
            let checker = checker.clone();
            let handled = handled.clone();
            Singleton::start(
                s,
                c,
                "scheduler",
                move || Instance {
                    node: node.clone(),
                    checker: checker.clone(),
                    handled: handled.clone(),
                },
                settings.clone(),
            )
            .expect("starts")
        })
        .collect()
}

async fn located(r: &SingletonRef<Cmd>, node: &str) {
    eventually(&format!("the singleton located on {node}"), || {
        r.location().as_deref() == Some(node)
    })
    .await;
}

/// The next `n` messages handled, in the order they were.
async fn handled_n(
    rx: &mut mpsc::UnboundedReceiver<(String, u64)>,
    n: usize,
) -> Vec<(String, u64)> {
    within("messages handled", async {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            got.push(rx.recv().await.expect("instances hold the sender"));
        }
        got
    })
    .await
}

fn on(node: &str, range: std::ops::RangeInclusive<u64>) -> Vec<(String, u64)> {
    range.map(|i| (node.to_owned(), i)).collect()
}

#[tokio::test]
async fn it_runs_once_on_the_oldest_host_and_a_proxy_on_another_node_reaches_it() {
    let nodes = cluster_of(3, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // n0 and n1 may host (by system name); n2 only talks to it.
    let settings = SingletonSettings::new().hosts_named(["n0", "n1"]);
    let _refs = start_on(&nodes[..2], &checker, &tx, &settings);
    let proxy = Singleton::proxy::<Cmd>(&nodes[2].0, &nodes[2].1, "scheduler");
    let oldest = nodes[0].0.node().to_owned();
    located(&proxy, &oldest).await;
    proxy.tell(Cmd::Add(1)).expect("sent");
    assert_eq!(handled_n(&mut rx, 1).await, on(&oldest, 1..=1));
    let at = proxy
        .ask(Cmd::Where, Duration::from_secs(5))
        .await
        .expect("answered");
    assert_eq!(at, oldest);
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [oldest]);
    assert_eq!(checker.failures.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_graceful_leave_moves_it_to_the_next_oldest_with_one_instance_at_a_time() {
    let mut nodes = cluster_of(3, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // A long handover timeout: the move must come from the handover.
    let settings = SingletonSettings::new().handover_timeout(Duration::from_secs(60));
    let refs = start_on(&nodes, &checker, &tx, &settings);
    let (n0, n1) = (nodes[0].0.node().to_owned(), nodes[1].0.node().to_owned());
    let proxy = &refs[2];
    located(proxy, &n0).await;
    for i in 1..=3 {
        proxy.tell(Cmd::Add(i)).expect("sent");
    }
    assert_eq!(handled_n(&mut rx, 3).await, on(&n0, 1..=3));

    let (old_system, old) = nodes.remove(0);
    let leaving = tokio::spawn(async move {
        old.leave_and_drain(&old_system, Duration::from_secs(10))
            .await
            .expect("leaves")
    });
    // The move takes at least the old instance's slow `stopped` hook.
    eventually("the proxy sees the singleton move", || {
        proxy.location().is_none()
    })
    .await;
    for i in 4..=10 {
        proxy.tell(Cmd::Add(i)).expect("buffered");
    }
    assert_eq!(proxy.buffered(), 7, "held while the singleton moves");
    // An ask waits for the new instance and goes after the buffer.
    let at = proxy
        .ask(Cmd::Where, Duration::from_secs(15))
        .await
        .expect("answered by the new instance");
    assert_eq!(at, n1);
    assert_eq!(proxy.buffered(), 0);
    assert_eq!(handled_n(&mut rx, 7).await, on(&n1, 4..=10));
    located(proxy, &n1).await;
    assert!(
        within("the old node drains", leaving)
            .await
            .expect("no panic")
    );
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [n0, n1]);
    assert_eq!(
        checker.failures.load(Ordering::SeqCst),
        0,
        "two instances at once"
    );
}

#[tokio::test]
async fn a_host_that_leaves_but_keeps_running_hands_over_when_asked() {
    let nodes = cluster_of(3, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let settings = SingletonSettings::new().handover_timeout(Duration::from_secs(60));
    let refs = start_on(&nodes, &checker, &tx, &settings);
    let (n0, n1) = (nodes[0].0.node().to_owned(), nodes[1].0.node().to_owned());
    located(&refs[2], &n0).await;
    // Only membership ends; the system, the old manager and its instance
    // run on until the handover stops the instance.
    within("leave", nodes[0].1.leave()).await.expect("leaves");
    located(&refs[2], &n1).await;
    refs[2].tell(Cmd::Add(1)).expect("sent");
    assert_eq!(handled_n(&mut rx, 1).await, on(&n1, 1..=1));
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [n0, n1]);
    assert_eq!(checker.live.load(Ordering::SeqCst), 1);
    assert_eq!(
        checker.failures.load(Ordering::SeqCst),
        0,
        "two instances at once"
    );
}

#[tokio::test]
async fn an_abrupt_shutdown_of_the_host_moves_it_once_the_host_is_down() {
    let mut nodes = cluster_of(3, &fast_cluster(Duration::from_secs(1))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let refs = start_on(&nodes, &checker, &tx, &SingletonSettings::new());
    let (n0, n1) = (nodes[0].0.node().to_owned(), nodes[1].0.node().to_owned());
    let proxy = &refs[2];
    located(proxy, &n0).await;
    proxy.tell(Cmd::Add(1)).expect("sent");
    assert_eq!(handled_n(&mut rx, 1).await, on(&n0, 1..=1));

    // No leave: the system stops; the others see the member down.
    let (old_system, _old) = nodes.remove(0);
    old_system.shutdown().await;
    eventually("the proxy sees the singleton gone", || {
        proxy.location().is_none()
    })
    .await;
    for i in 2..=6 {
        proxy.tell(Cmd::Add(i)).expect("buffered");
    }
    assert_eq!(proxy.buffered(), 5);
    assert_eq!(handled_n(&mut rx, 5).await, on(&n1, 2..=6));
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [n0, n1]);
    assert_eq!(
        checker.failures.load(Ordering::SeqCst),
        0,
        "two instances at once"
    );
}

#[tokio::test]
async fn past_its_buffer_a_ref_refuses_and_counts_a_dead_letter() {
    let nodes = cluster_of(2, &fast_cluster(Duration::from_secs(10))).await;
    // Nobody hosts it: the ref buffers.
    let proxy = Singleton::proxy_with::<Cmd>(&nodes[1].0, &nodes[1].1, "nowhere", 64);
    let before = nodes[1].0.dead_letters();
    let mut held = 0;
    let refused = loop {
        match proxy.tell(Cmd::Add(held)) {
            Ok(()) => held += 1,
            Err(e) => break e,
        }
        assert!(held < 64, "the bound holds");
    };
    assert!(held > 0);
    assert!(
        matches!(refused, SendError::BufferFull(Cmd::Add(_), 64)),
        "{refused:?}"
    );
    assert_eq!(nodes[1].0.dead_letters(), before + 1);
    assert_eq!(proxy.location(), None);
}

#[tokio::test]
async fn a_node_the_hosts_exclude_runs_no_instance_and_its_ref_reaches_the_host() {
    let nodes = cluster_of(2, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Both nodes start the singleton; only n0 may host it, so n1 only
    // routes (proxy-only mode).
    let settings = SingletonSettings::new().hosts_named(["n0"]);
    let refs = start_on(&nodes, &checker, &tx, &settings);
    let n0 = nodes[0].0.node().to_owned();
    let from_n1 = &refs[1];
    located(from_n1, &n0).await;
    for i in 1..=5 {
        from_n1.tell(Cmd::Add(i)).expect("sent");
    }
    assert_eq!(handled_n(&mut rx, 5).await, on(&n0, 1..=5));
    let at = from_n1
        .ask(Cmd::Where, Duration::from_secs(5))
        .await
        .expect("answered across the link");
    assert_eq!(at, n0);
    // The only host leaves: n1 may not take over, so nothing runs and
    // n1's ref holds what it is sent.
    within("leave", nodes[0].1.leave()).await.expect("leaves");
    eventually("the old instance stopped", || {
        checker.live.load(Ordering::SeqCst) == 0
    })
    .await;
    eventually("n1's ref sees the singleton gone", || {
        from_n1.location().is_none()
    })
    .await;
    from_n1.tell(Cmd::Add(6)).expect("buffered");
    assert_eq!(from_n1.buffered(), 1);
    // A host would have taken over within a handover (the old instance's
    // 300 ms hook and a message); no instance answers in ten times that.
    let asked = from_n1.ask(Cmd::Where, Duration::from_secs(3)).await;
    assert!(matches!(asked, Err(AskError::Timeout(_))), "{asked:?}");
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [n0]);
    assert!(rx.try_recv().is_err(), "nothing handled after the leave");
}

#[tokio::test]
async fn a_ref_holds_its_bound_while_no_instance_runs_then_delivers_in_order() {
    /// A few small commands' worth.
    const BOUND: usize = 256;
    let nodes = cluster_of(2, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // n1 refers to a singleton nobody hosts yet.
    let proxy = Singleton::proxy_with::<Cmd>(&nodes[1].0, &nodes[1].1, "scheduler", BOUND);
    let dead_before = nodes[1].0.dead_letters();
    let mut held = 0;
    while proxy.tell(Cmd::Add(held + 1)).is_ok() {
        held += 1;
        assert!(held < 100, "the bound holds");
    }
    assert!(held > 1, "{held} held");
    assert_eq!(proxy.buffered(), usize::try_from(held).expect("small"));
    // Every refusal gives the message back and is one dead letter.
    for i in 1..=3 {
        let refused = proxy.tell(Cmd::Add(1000 + i)).expect_err("full");
        assert!(
            matches!(refused, SendError::BufferFull(Cmd::Add(n), BOUND) if n == 1000 + i),
            "{refused:?}"
        );
    }
    assert_eq!(nodes[1].0.dead_letters(), dead_before + 4);
    // The singleton starts on n0: the buffer goes there, in order, and
    // nothing refused comes after it.
    let n0 = nodes[0].0.node().to_owned();
    let _refs = start_on(
        &nodes[..1],
        &checker,
        &tx,
        &SingletonSettings::new().hosts_named(["n0"]),
    );
    assert_eq!(
        handled_n(&mut rx, usize::try_from(held).expect("small")).await,
        on(&n0, 1..=held)
    );
    located(&proxy, &n0).await;
    assert_eq!(proxy.buffered(), 0);
    // From now on messages go straight to the instance, past the bound.
    for i in 1..=20 {
        proxy
            .tell(Cmd::Add(held + i))
            .expect("sent to the instance");
    }
    assert_eq!(handled_n(&mut rx, 20).await, on(&n0, held + 1..=held + 20));
}

#[tokio::test]
async fn with_a_lease_a_host_starts_only_while_it_holds_it_and_releases_it_on_handover() {
    let nodes = cluster_of(2, &fast_cluster(Duration::from_secs(10))).await;
    let checker = Arc::new(Checker::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let lease = Arc::new(MemoryLease::new());
    // Another owner holds the lease: a host the downing strategy should
    // have stopped, say, on the far side of a partition.
    assert!(lease.acquire("elsewhere#1").await.expect("in memory"));
    let settings = SingletonSettings::new()
        .handover_timeout(Duration::from_secs(60))
        .lease(lease.clone());
    let refs = start_on(&nodes, &checker, &tx, &settings);
    let (n0, n1) = (nodes[0].0.node().to_owned(), nodes[1].0.node().to_owned());
    let from_n1 = &refs[1];
    // n0 is the oldest, yet starts nothing while the lease is held (it
    // asks again every second).
    let asked = from_n1.ask(Cmd::Where, Duration::from_secs(3)).await;
    assert!(matches!(asked, Err(AskError::Timeout(_))), "{asked:?}");
    assert!(checker.starts.lock().expect("not poisoned").is_empty());
    // Released: n0 takes it and starts.
    assert!(lease.release("elsewhere#1").await.expect("in memory"));
    located(from_n1, &n0).await;
    let holder = lease.holder().expect("held");
    assert!(holder.starts_with(&format!("{n0}#")), "{holder}");
    from_n1.tell(Cmd::Add(1)).expect("sent");
    assert_eq!(handled_n(&mut rx, 1).await, on(&n0, 1..=1));
    // n0 leaves the cluster (its system runs on): its instance stops, the
    // handover releases the lease, and only then can n1 acquire it and
    // start.
    within("leave", nodes[0].1.leave()).await.expect("leaves");
    located(from_n1, &n1).await;
    let holder = lease.holder().expect("held");
    assert!(holder.starts_with(&format!("{n1}#")), "{holder}");
    assert_eq!(*checker.starts.lock().expect("not poisoned"), [n0, n1]);
    assert_eq!(
        checker.failures.load(Ordering::SeqCst),
        0,
        "two instances at once"
    );
}
