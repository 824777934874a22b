//! Network faults between two nodes on loopback, through the harness's TCP
//! proxy ([`integration_tests::proxy`]): each node dials the other through
//! its own proxy (`SystemConfig::set_route`), so every connection between
//! them, in either direction, crosses a proxy the test controls. Delay,
//! partition (blackhole), reset and refused reconnects; every wait is
//! bounded and waits on an event, never on time passing.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Backoff, Ctx, HeartbeatConfig, RemoteEvent,
    StopReason, SystemConfig, Terminated,
};
use integration_tests::{
    TIMEOUT, actor_path, actor_system_with, proxy::Mode, proxy::Proxy, secured_system, within,
};
use tokio::sync::broadcast;

use super::actors_common::{Count, Counter, Seq, SeqCheck, SeqReport, total};

/// Heartbeats every 50 ms with `pause` acceptable; reconnects between 20
/// and 200 ms.
pub(crate) fn fast_config(pause: Duration) -> SystemConfig {
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(50))
        .unwrap()
        .set_acceptable_pause(pause);
    let mut c = SystemConfig::default();
    c.set_heartbeat(hb).set_reconnect_backoff(
        Backoff::new(Duration::from_millis(20), Duration::from_millis(200), 0.2).unwrap(),
    );
    c
}

/// A port free a moment ago, so that a node's name is known before it
/// binds (the other node's route must name it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Nodes `a` and `b`; `a` dials `b` through `to_b`, `b` dials `a` through
/// `to_a`.
pub(crate) struct Proxied {
    pub(crate) a: ActorSystem,
    pub(crate) b: ActorSystem,
    pub(crate) to_a: Proxy,
    pub(crate) to_b: Proxy,
}

impl Proxied {
    pub(crate) async fn new(config: SystemConfig) -> Proxied {
        // b's node name holds its port, and a's route to b names that node,
        // so b's port is reserved before either starts. Another socket can
        // take it before b binds it: then everything starts again on
        // another port.
        for _ in 0..5 {
            let port = free_port();
            let b_addr = SocketAddr::from(([127, 0, 0, 1], port));
            let b_node = format!("b@{b_addr}");
            let to_b = Proxy::start(b_addr).await;
            let mut ca = config.clone();
            ca.set_route(&b_node, to_b.addr());
            let a = actor_system_with("a", ca).await;
            let to_a = Proxy::start(a.local_addr().expect("remoting")).await;
            let mut cb = config.clone();
            cb.set_route(a.node(), to_a.addr());
            match ActorSystem::with_config("b", Some(b_addr), secured_system(cb)).await {
                Ok(b) => {
                    assert_eq!(b.node(), b_node);
                    return Proxied { a, b, to_a, to_b };
                }
                Err(e) => {
                    eprintln!("port {port} was taken before b bound it ({e}); again");
                    a.shutdown().await;
                }
            }
        }
        panic!("b could not bind a reserved port in 5 tries");
    }

    fn set_mode(&self, mode: Mode) {
        self.to_a.set_mode(mode);
        self.to_b.set_mode(mode);
    }

    async fn shutdown(self) {
        within("a shuts down", self.a.shutdown()).await;
        within("b shuts down", self.b.shutdown()).await;
    }
}

/// The next event on `events` that `pick` accepts; panics on
/// [`RemoteEvent::Quarantined`] unless `pick` accepts it.
async fn next_event(
    events: &mut broadcast::Receiver<RemoteEvent>,
    what: &str,
    mut pick: impl FnMut(&RemoteEvent) -> bool,
) -> RemoteEvent {
    within(what, async {
        loop {
            match events.recv().await {
                Ok(e) if pick(&e) => return e,
                Ok(e @ RemoteEvent::Quarantined { .. }) => {
                    panic!("unexpected quarantine while waiting for {what}: {e:?}")
                }
                Ok(_) => {}
                Err(e) => panic!("event stream: {e}"),
            }
        }
    })
    .await
}

/// The counter's total once an ask succeeds again after a heal. Asks are
/// retried with a short timeout: user messages are at most once, and the
/// first ones after a heal can be lost on a connection that is dead but not
/// yet known to be (b may still answer on its old link, until it sees that
/// link end).
async fn recovered(counter: &ActorRef<Count>) -> u64 {
    within("an ask to succeed after the heal", async {
        loop {
            if let Ok(n) = counter.ask(Count::Get, Duration::from_millis(500)).await {
                return n;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_delay_keeps_order_and_asks_answer_in_bounded_time() {
    const DELAY: Duration = Duration::from_millis(20);
    const N: u64 = 5_000;
    let p = Proxied::new(fast_config(Duration::from_secs(3))).await;
    p.to_a.set_delay(DELAY);
    p.to_b.set_delay(DELAY);
    let _seq = p.b.spawn_named("seq", SeqCheck::default()).expect("free");
    let _counter =
        p.b.spawn_named("counter", Counter::default())
            .expect("free");
    let seq: ActorRef<Seq> = within("resolve seq", p.a.resolve(&actor_path(&p.b, "seq")))
        .await
        .expect("resolves through the delaying proxy");
    let counter: ActorRef<Count> = within("resolve", p.a.resolve(&actor_path(&p.b, "counter")))
        .await
        .expect("resolves");
    for i in 0..N {
        within("send", seq.send(Seq::Next(i)))
            .await
            .expect("room comes");
    }
    let report: SeqReport = within("the report", seq.ask(Seq::Report, TIMEOUT))
        .await
        .expect("answers");
    assert_eq!(
        report,
        SeqReport {
            received: N,
            first_fault: None
        }
    );
    // Each round trip crosses the proxy twice: at least two delays, and far
    // below the ask timeout.
    for i in 0..10 {
        counter.tell(Count::Add(1)).expect("room");
        let start = Instant::now();
        assert_eq!(total(&counter).await, i + 1);
        let rtt = start.elapsed();
        assert!(
            rtt >= 2 * DELAY,
            "round trip {rtt:?} is below the added delay"
        );
        assert!(rtt < Duration::from_secs(2), "round trip {rtt:?}");
    }
    // a's one link crosses the proxy (b may have dialed a duplicate, which
    // is closed).
    assert_eq!(p.to_b.accepted(), 1, "a dialed once, through the proxy");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_partition_fires_the_detector_and_the_link_recovers_after_heal() {
    let p = Proxied::new(fast_config(Duration::from_millis(300))).await;
    let mut events = p.a.subscribe_remote_events();
    let local_counter =
        p.b.spawn_named("counter", Counter::default())
            .expect("free");
    let counter: ActorRef<Count> = within("resolve", p.a.resolve(&actor_path(&p.b, "counter")))
        .await
        .expect("resolves");
    let uid = match next_event(&mut events, "connected", |e| {
        matches!(e, RemoteEvent::Connected { .. })
    })
    .await
    {
        RemoteEvent::Connected { uid, .. } => uid,
        _ => unreachable!(),
    };
    let watch = counter.watch();
    counter.tell(Count::Add(7)).expect("room");
    assert_eq!(total(&counter).await, 7, "the watch is registered");

    // Partition: sockets stay open, nothing crosses.
    p.set_mode(Mode::Blackhole);
    let t = within("Terminated from the failure detector", watch).await;
    match &t.reason {
        StopReason::NodeUnreachable(why) => assert!(why.contains("failure detector"), "{why}"),
        other => panic!("expected NodeUnreachable, got {other:?}"),
    }
    let node = p.b.node().to_owned();
    next_event(
        &mut events,
        "the unreachable event",
        |e| matches!(e, RemoteEvent::Unreachable { node: n, uid: u } if *n == node && *u == uid),
    )
    .await;

    // Heal: the next message reconnects; the same incarnation is back,
    // with its state, and nothing is quarantined.
    p.set_mode(Mode::Forward);
    assert_eq!(
        recovered(&counter).await,
        7,
        "the old ref works after the heal"
    );
    next_event(
        &mut events,
        "reachable again",
        |e| matches!(e, RemoteEvent::Reachable { node: n, uid: u } if *n == node && *u == uid),
    )
    .await;
    assert!(
        p.to_b.accepted() >= 2,
        "the link came back through the proxy"
    );
    // A watch made after the heal works: it sees the real stop.
    let watch = counter.watch();
    assert_eq!(total(&counter).await, 7, "the new watch is registered");
    local_counter.stop();
    let t = within("Terminated after the heal", watch).await;
    assert_eq!(t.reason, StopReason::Stopped);
    p.shutdown().await;
}

/// Counts the `Terminated` it receives for its target; answers the count.
struct CountingWatcher {
    target: ActorRef<Count>,
    seen: Vec<StopReason>,
}

impl Actor for CountingWatcher {
    type Msg = ActorRef<Vec<StopReason>>;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.target);
        Ok(())
    }

    async fn handle(&mut self, reply: ActorRef<Vec<StopReason>>, _: &mut Ctx<Self>) -> ActorResult {
        let _ = reply.tell(self.seen.clone());
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, _: &mut Ctx<Self>) -> ActorResult {
        self.seen.push(t.reason);
        Ok(())
    }
}

async fn seen(watcher: &ActorRef<ActorRef<Vec<StopReason>>>) -> Vec<StopReason> {
    within("the watcher's count", watcher.ask(|r| r, TIMEOUT))
        .await
        .expect("the watcher answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_messages_are_delivered_exactly_once_across_a_reset_and_reconnect() {
    const WATCHED: usize = 10;
    // The detector must not end the watches: only the real stops may.
    // This choreographs one link carrying both directions, which an
    // inbound connection can be only when its claim needs no proof:
    // authentication off (with a shared secret each node sends on its own
    // dial; see `trust`).
    let mut config = fast_config(Duration::from_secs(30));
    config.transport_mut().set_insecure_no_authentication(true);
    let p = Proxied::new(config).await;
    let mut a_events = p.a.subscribe_remote_events();
    let mut b_events = p.b.subscribe_remote_events();
    let mut locals = Vec::new();
    let mut watchers = Vec::new();
    for i in 0..=WATCHED {
        let name = format!("c{i}");
        locals.push(p.b.spawn_named(&name, Counter::default()).expect("free"));
        let remote: ActorRef<Count> = within("resolve", p.a.resolve(&actor_path(&p.b, &name)))
            .await
            .expect("resolves");
        watchers.push((
            remote.clone(),
            p.a.spawn(CountingWatcher {
                target: remote,
                seen: Vec::new(),
            }),
        ));
    }
    let _barrier =
        p.b.spawn_named("barrier", Counter::default())
            .expect("free");
    let barrier: ActorRef<Count> = within("resolve", p.a.resolve(&actor_path(&p.b, "barrier")))
        .await
        .expect("resolves");
    // Every watch has reached b: a watcher registers in `started`, before
    // it answers, and the watch travels ahead of the ask on the one link.
    for (_, w) in &watchers {
        assert!(seen(w).await.is_empty());
    }
    assert_eq!(total(&barrier).await, 0);
    // b may have dialed a too, when a's first message reached it before the
    // connection was installed: that duplicate is closed (see
    // `simultaneous_connects_resolve_to_one_link`).
    p.to_a
        .wait_live("a duplicate dialed by b to close", |n| n == 0)
        .await;
    assert_eq!(p.to_b.live(), 1, "one link, dialed by a");

    // 1. b's Terminated reach a, a's acknowledgements are held.
    p.to_b.set_mode(Mode::StallToTarget);
    for l in &locals[..WATCHED] {
        l.stop();
    }
    for (_, w) in &watchers[..WATCHED] {
        within("the first delivery", async {
            while seen(w).await.is_empty() {}
        })
        .await;
    }
    // 2. The link is reset (the held acknowledgements are lost) and stays
    //    down: reconnects are refused both ways.
    p.set_mode(Mode::Refuse);
    p.to_b.reset_all().await;
    let b_node = p.b.node().to_owned();
    let a_node = p.a.node().to_owned();
    next_event(
        &mut a_events,
        "a sees the link drop",
        |e| matches!(e, RemoteEvent::Disconnected { node, .. } if *node == b_node),
    )
    .await;
    next_event(
        &mut b_events,
        "b sees the link drop",
        |e| matches!(e, RemoteEvent::Disconnected { node, .. } if *node == a_node),
    )
    .await;
    // 3. A system message from a while the link is down: stop the last
    //    actor. a keeps trying to connect, and is refused.
    let (victim, _) = &watchers[WATCHED];
    victim.stop();
    p.to_b.wait_accepted(2).await;
    // 4. Heal a's direction only, so that exactly one link comes up: b
    //    resends its unacknowledged Terminated (duplicates for a), a
    //    sends the stop.
    p.to_b.set_mode(Mode::Forward);
    let (_, victim_watcher) = &watchers[WATCHED];
    within(
        "the stop sent while the link was down takes effect",
        async { while seen(victim_watcher).await.is_empty() {} },
    )
    .await;
    // Everything b resent on the new link came before this answer.
    assert_eq!(total(&barrier).await, 0);
    for (i, (_, w)) in watchers.iter().enumerate() {
        assert_eq!(
            seen(w).await,
            vec![StopReason::Stopped],
            "watcher {i} sees its actor stop exactly once"
        );
    }
    assert_eq!(
        (p.to_b.live(), p.to_a.live()),
        (1, 0),
        "one link, dialed by a, carried it all"
    );
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_connects_resolve_to_one_link() {
    // An inbound connection may become the link only when its claim needs
    // no proof (here: authentication off; or a certificate naming the
    // node). With a shared secret alone each node sends on its own dial,
    // and nothing is closed: `trust::with_a_secret_each_node_sends_on_its_own_dial`.
    let mut config = fast_config(Duration::from_secs(30));
    config.transport_mut().set_insecure_no_authentication(true);
    let p = Proxied::new(config).await;
    let _ca =
        p.a.spawn_named("counter", Counter::default())
            .expect("free");
    let _cb =
        p.b.spawn_named("counter", Counter::default())
            .expect("free");
    // Both connections are held at the proxies until both exist, then
    // released together: each node dials before it sees the other's dial.
    p.set_mode(Mode::Blackhole);
    let (a, b) = (p.a.clone(), p.b.clone());
    let (path_a, path_b) = (actor_path(&p.a, "counter"), actor_path(&p.b, "counter"));
    let a_resolves = tokio::spawn(async move { a.resolve::<Count>(&path_b).await });
    let b_resolves = tokio::spawn(async move { b.resolve::<Count>(&path_a).await });
    p.to_a.wait_accepted(1).await;
    p.to_b.wait_accepted(1).await;
    p.set_mode(Mode::Forward);
    let at_b = within("a resolves b", a_resolves)
        .await
        .expect("no panic")
        .expect("resolves");
    let at_a = within("b resolves a", b_resolves)
        .await
        .expect("no panic")
        .expect("resolves");
    // Both nodes keep the connection dialed by the lower address (a) and
    // close the other.
    assert!(p.a.node() < p.b.node());
    p.to_a
        .wait_live("b's dial to be closed as the duplicate", |n| n == 0)
        .await;
    assert_eq!(p.to_b.live(), 1, "a's dial is the link");
    // Both directions work over it, and nothing reconnects.
    for i in 1..=100 {
        at_b.tell(Count::Add(1)).expect("room");
        at_a.tell(Count::Add(2)).expect("room");
        if i % 25 == 0 {
            assert_eq!(total(&at_b).await, i);
            assert_eq!(total(&at_a).await, 2 * i);
        }
    }
    assert_eq!((p.to_a.accepted(), p.to_b.accepted()), (1, 1));
    assert_eq!((p.to_a.live(), p.to_b.live()), (0, 1));
    p.shutdown().await;
}
