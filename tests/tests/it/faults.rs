//! Fault tests with a peer in its own process (`src/bin/peer.rs`): killed
//! mid-burst, restarted on the same address. Every wait is bounded.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use actors::{
    ActorRef, Backoff, HeartbeatConfig, RemoteEvent, SendError, StopReason, SystemConfig,
};
use integration_tests::{
    PeerCount, PeerProcess, actor_path, actor_system_with, eventually, next_event, within,
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::actors_common::{Count, Counter};

/// Heartbeats every 50 ms; reconnects between 20 and 200 ms.
fn fast_config(pause: Duration) -> SystemConfig {
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

async fn total(counter: &ActorRef<PeerCount>) -> u64 {
    within(
        "the counter's total",
        counter.ask(PeerCount::Get, integration_tests::TIMEOUT),
    )
    .await
    .expect("the counter answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_peer_is_detected_and_its_watchers_get_terminated() {
    let mut peer = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", "127.0.0.1:0").await;
    let a = actor_system_with("a", fast_config(Duration::from_millis(300))).await;
    let mut events = a.subscribe_remote_events();
    let counter: ActorRef<PeerCount> = within("resolve", a.resolve(&peer.counter_path()))
        .await
        .expect("resolves");
    let watch = counter.watch();
    assert_eq!(total(&counter).await, 0, "the watch is registered");
    // Killed in the middle of a burst.
    for i in 0..20_000u64 {
        let _ = counter.tell(PeerCount::Add(1));
        if i == 10_000 {
            peer.kill();
        }
    }
    // The detector (300 ms pause) or the evidence of the kill (the link
    // lost without a Close frame, reconnects refused for the 1 s grace),
    // whichever is first.
    let t = within("Terminated", watch).await;
    match &t.reason {
        StopReason::NodeUnreachable(why) => assert!(
            why.contains("failure detector") || why.contains("refused"),
            "{why}"
        ),
        other => panic!("expected NodeUnreachable, got {other:?}"),
    }
    let node = peer.node.clone();
    next_event(
        &mut events,
        "the unreachable event",
        |e| matches!(e, RemoteEvent::Unreachable { node: n, .. } if *n == node),
    )
    .await;
    // What is sent to the dead node now is counted, never silent.
    let before = a.dead_letters();
    let _ = counter.tell(PeerCount::Add(1));
    eventually("a dead letter for the message to the dead node", || {
        a.dead_letters() > before
    })
    .await;
    // The survivor is fine.
    within("shutdown", a.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_peer_is_a_new_incarnation_and_the_link_comes_back() {
    // A free port for both incarnations.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let bind = format!("127.0.0.1:{port}");
    let mut first = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", &bind).await;
    // A long acceptable pause and refused-connect grace: the restart, not
    // the detector or the refusals while the peer restarts, must end the
    // watch.
    let mut config = fast_config(Duration::from_secs(10));
    config.set_refused_connect_grace(Duration::from_secs(3600));
    let a = actor_system_with("a", config).await;
    let mut events = a.subscribe_remote_events();
    let old: ActorRef<PeerCount> = within("resolve", a.resolve(&first.counter_path()))
        .await
        .expect("resolves");
    let old_uid = match next_event(&mut events, "connected", |e| {
        matches!(e, RemoteEvent::Connected { .. })
    })
    .await
    {
        RemoteEvent::Connected { uid, .. } => uid,
        _ => unreachable!(),
    };
    old.tell(PeerCount::Add(5)).expect("room");
    let watch = old.watch();
    assert_eq!(total(&old).await, 5);

    first.kill();
    let second = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", &bind).await;
    assert_eq!(second.node, first.node, "same address, same node name");
    // Nothing is sent: the pending watch alone makes the link come back.
    let q = next_event(&mut events, "the old incarnation quarantined", |e| {
        matches!(e, RemoteEvent::Quarantined { .. })
    })
    .await;
    assert!(
        matches!(&q, RemoteEvent::Quarantined { uid, .. } if *uid == old_uid),
        "{q:?}"
    );
    let t = within("Terminated for the old incarnation", watch).await;
    match &t.reason {
        StopReason::NodeUnreachable(why) => assert!(why.contains("restarted"), "{why}"),
        other => panic!("expected NodeUnreachable, got {other:?}"),
    }
    // Refs of the old incarnation fail fast, as dead letters.
    let before = a.dead_letters();
    assert!(matches!(
        old.tell(PeerCount::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    assert_eq!(a.dead_letters(), before + 1);
    // A fresh ref reaches the new incarnation, which starts from zero.
    let new: ActorRef<PeerCount> = within("resolve again", a.resolve(&second.counter_path()))
        .await
        .expect("resolves");
    new.tell(PeerCount::Add(2)).expect("room");
    assert_eq!(total(&new).await, 2);
    within("shutdown", a.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_tells_peers_without_waiting_for_the_detector() {
    // The detector would take minutes: only the shutdown notice can end the
    // watch within the test's timeout.
    let mut slow = fast_config(Duration::from_secs(600));
    slow.set_heartbeat({
        let mut hb = HeartbeatConfig::default();
        hb.set_acceptable_pause(Duration::from_secs(600));
        hb
    });
    let a = actor_system_with("a", slow.clone()).await;
    let b = actor_system_with("b", slow).await;
    let mut events = a.subscribe_remote_events();
    let _keep = b
        .spawn_named("idle", super::actors_common::Counter::default())
        .expect("free");
    let path = integration_tests::actor_path(&b, "idle");
    let remote: ActorRef<super::actors_common::Count> =
        within("resolve", a.resolve(&path)).await.expect("resolves");
    within("shutdown", b.shutdown()).await;
    let node = b.node().to_owned();
    let q = next_event(
        &mut events,
        "quarantine on the shutdown notice",
        |e| matches!(e, RemoteEvent::Quarantined { node: n, .. } if *n == node),
    )
    .await;
    assert!(
        matches!(&q, RemoteEvent::Quarantined { reason, .. } if reason.contains("shut down")),
        "{q:?}"
    );
    // Watching the gone incarnation answers at once.
    let t = within("watch after shutdown", remote.watch()).await;
    assert!(matches!(t.reason, StopReason::NodeUnreachable(_)), "{t:?}");
    within("shutdown", a.shutdown()).await;
}

/// What a node's keeper publishes about one peer, counted: its
/// reconnect counter, and how many times it has published at all (each
/// publication sets the peer's phi gauge once). Installed on the test's
/// thread before the systems are built, as the metrics tests do.
#[derive(Default)]
struct Publications {
    counters: Mutex<Vec<(metrics::Key, Arc<AtomicU64>)>>,
    phi_sets: Mutex<Vec<(metrics::Key, Arc<SetCount>)>>,
}

/// A gauge that counts how often it is set.
#[derive(Default)]
struct SetCount(AtomicU64);

impl metrics::GaugeFn for SetCount {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `key` names `node`'s view of `peer`.
fn of_peer(key: &metrics::Key, node: &str, peer: &str) -> bool {
    let label = |k: &str| {
        key.labels()
            .find(|l| l.key() == k)
            .map(|l| l.value().to_owned())
    };
    label("node").as_deref() == Some(node) && label("peer").as_deref() == Some(peer)
}

impl Publications {
    /// `node`'s dial attempts to `peer` after its first, as published.
    fn reconnects(&self, node: &str, peer: &str) -> u64 {
        self.counters
            .lock()
            .expect("counters")
            .iter()
            .filter(|(k, _)| k.name() == "remoting_reconnects_total" && of_peer(k, node, peer))
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .sum()
    }

    /// How many times `node` has published its metrics of `peer`.
    fn published(&self, node: &str, peer: &str) -> u64 {
        self.phi_sets
            .lock()
            .expect("gauges")
            .iter()
            .filter(|(k, _)| of_peer(k, node, peer))
            .map(|(_, g)| g.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Waits until `node` has published its metrics of `peer` `n` more
    /// times: the keeper's clock, as an event to wait on.
    async fn next(&self, n: u64, node: &str, peer: &str) {
        let target = self.published(node, peer) + n;
        eventually("the keeper's next publications", || {
            self.published(node, peer) >= target
        })
        .await;
    }
}

impl metrics::Recorder for Publications {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let c = Arc::new(AtomicU64::new(0));
        self.counters
            .lock()
            .expect("counters")
            .push((key.clone(), c.clone()));
        metrics::Counter::from_arc(c)
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        if key.name() != "remoting_phi" {
            return metrics::Gauge::noop();
        }
        let g = Arc::new(SetCount::default());
        self.phi_sets
            .lock()
            .expect("gauges")
            .push((key.clone(), g.clone()));
        metrics::Gauge::from_arc(g)
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Node `a` watches an actor on `b` and `b` has a link to `a` (it
/// resolved an actor there, as a reply would); then `a` shuts down. When
/// the watched actor later stops, `b` must not dial `a` to deliver the
/// `Terminated`: the incarnation that asked for it said it is gone (the
/// bench's sweep printed "connect failed ... Connection refused" between
/// cells for this). A ref to the old incarnation still fails fast, and a
/// new incarnation at the same address is reached when `b` asks for it.
#[tokio::test(flavor = "current_thread")]
async fn a_peer_that_shut_down_is_not_redialled_and_its_next_incarnation_is_reached() {
    let seen = Publications::default();
    let _installed = metrics::set_default_local_recorder(&seen);
    let logs = integration_tests::LogCapture::install(tracing::Level::WARN);
    // Heartbeats (and metric publications) every 50 ms; a dial at most
    // 20 ms after the one before; the detector far away.
    let config = fast_config(Duration::from_secs(600));
    let a1 = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config.clone()).await;
    let (an, bn) = (a1.node().to_owned(), b.node().to_owned());
    let mut events = b.subscribe_remote_events();

    let _sink = a1.spawn_named("sink", Counter::default()).expect("free");
    let target = b.spawn_named("target", Counter::default()).expect("free");
    // b's own link to a (its replies would take it): b resolves a's sink.
    let old_sink: ActorRef<Count> =
        within("b resolves a's sink", b.resolve(&actor_path(&a1, "sink")))
            .await
            .expect("resolves");
    old_sink.tell(Count::Add(1)).expect("room");
    assert_eq!(super::actors_common::total(&old_sink).await, 1);
    // a watches b's target, as the bench's sender watches its receiver.
    let remote_target: ActorRef<Count> = within(
        "a resolves b's target",
        a1.resolve(&actor_path(&b, "target")),
    )
    .await
    .expect("resolves");
    let _watch = remote_target.watch();
    assert_eq!(
        super::actors_common::total(&remote_target).await,
        0,
        "the watch is registered"
    );

    within(
        "a shuts down",
        a1.shutdown_gracefully(Duration::from_secs(5)),
    )
    .await;
    next_event(&mut events, "b quarantines a on its shutdown notice", |e| {
        matches!(e, RemoteEvent::Quarantined { node, reason, .. }
            if *node == an && reason.contains("shut down"))
    })
    .await;
    seen.next(3, &bn, &an).await;
    let dials = seen.reconnects(&bn, &an);

    // The actor a watched stops: its Terminated has nobody to go to.
    let stopped = target.watch();
    target.stop();
    within("target stops", stopped).await;
    // A dial for it would start within 20 ms (the backoff's first delay)
    // of the stop and be counted at once; the second publication after it
    // is at least 50 ms later, the third leaves a scheduler turn to spare.
    seen.next(3, &bn, &an).await;
    assert_eq!(
        seen.reconnects(&bn, &an),
        dials,
        "b dialed a after a said it shut down: {}",
        logs.text()
    );
    assert_eq!(logs.lines_with("connect failed"), 0, "{}", logs.text());

    // A ref to the gone incarnation fails fast, as a dead letter, and
    // dials nothing either.
    let before = b.dead_letters();
    assert!(matches!(
        old_sink.tell(Count::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    assert_eq!(b.dead_letters(), before + 1);
    seen.next(3, &bn, &an).await;
    assert_eq!(seen.reconnects(&bn, &an), dials);
    assert_eq!(logs.lines_with("connect failed"), 0, "{}", logs.text());

    // A new incarnation at the same address is reached as soon as b asks.
    let addr = a1.local_addr().expect("remoting");
    let a2 = actors::ActorSystem::with_config(
        "a",
        Some(addr),
        integration_tests::secured_system(config),
    )
    .await
    .expect("the address is free again");
    assert_eq!(a2.node(), an, "same address, same node");
    let _sink2 = a2.spawn_named("sink", Counter::default()).expect("free");
    let new_sink: ActorRef<Count> = within(
        "b resolves the new sink",
        b.resolve(&actor_path(&a2, "sink")),
    )
    .await
    .expect("the new incarnation answers");
    new_sink.tell(Count::Add(2)).expect("room");
    assert_eq!(
        super::actors_common::total(&new_sink).await,
        2,
        "a fresh actor, not the old one"
    );
    assert!(matches!(
        old_sink.tell(Count::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    within("b shuts down", b.shutdown()).await;
    within("a2 shuts down", a2.shutdown()).await;
}

/// An ask from `b` waits on `a` when `a` shuts down: it fails at once
/// with `NodeDown`, and `b` does not dial `a` for it, neither when the
/// link closes under the waiting ask nor on a later heartbeat tick (an
/// ask in flight keeps an association reconnecting, to tell a dead node
/// from a lost connection; an incarnation that said it is gone is
/// neither).
#[tokio::test(flavor = "current_thread")]
async fn an_ask_waiting_on_a_peer_that_shuts_down_fails_without_a_redial() {
    let seen = Publications::default();
    let _installed = metrics::set_default_local_recorder(&seen);
    let logs = integration_tests::LogCapture::install(tracing::Level::WARN);
    let config = fast_config(Duration::from_secs(600));
    let a = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config).await;
    let (an, bn) = (a.node().to_owned(), b.node().to_owned());
    let _sink = a.spawn_named("sink", Counter::default()).expect("free");
    let sink: ActorRef<Count> = within("b resolves a's sink", b.resolve(&actor_path(&a, "sink")))
        .await
        .expect("resolves");
    assert_eq!(super::actors_common::total(&sink).await, 0);
    seen.next(1, &bn, &an).await;
    let dials = seen.reconnects(&bn, &an);

    // The sink drops the reply ref: only a's shutdown can end the ask.
    let ask = sink.ask(Count::Ignore, integration_tests::TIMEOUT);
    let shutdown = async {
        // Once the request is on its way (the ask has subscribed by then).
        tokio::task::yield_now().await;
        a.shutdown().await;
    };
    let (res, ()) = within("the ask fails and a shuts down", async {
        tokio::join!(ask, shutdown)
    })
    .await;
    match res {
        Err(actors::AskError::NodeDown { reason, .. }) => {
            assert!(reason.contains("shut down"), "{reason}");
        }
        other => panic!("expected NodeDown, got {other:?}"),
    }
    // A dial would start within the backoff's first delay (20 ms) of the
    // link's end or of a tick, before the third publication from now.
    seen.next(3, &bn, &an).await;
    assert_eq!(
        seen.reconnects(&bn, &an),
        dials,
        "b dialed a after a said it shut down: {}",
        logs.text()
    );
    assert_eq!(logs.lines_with("connect failed"), 0, "{}", logs.text());
    within("b shuts down", b.shutdown()).await;
}

/// A peer that announces its shutdown is answered with a Close frame, not
/// an abort: the peer may not have begun its own close when the notice
/// is read here, and would log an ended stream without a Close frame as a
/// lost connection (bench-remote printed "connection lost: stream ended
/// without a close frame" between cells for this). The peer here is a
/// raw socket that `b` dials, so that the notice can come before any
/// close of its own.
#[tokio::test]
async fn a_shutdown_notice_is_answered_with_a_close_frame() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let node = format!("raw@{}", listener.local_addr().expect("bound"));
    let b = integration_tests::actor_system("b").await;
    let mut events = b.subscribe_remote_events();
    let resolving = tokio::spawn({
        let (b, path) = (b.clone(), format!("tcp://{node}/user/x"));
        async move { b.resolve::<Count>(&path).await }
    });
    let (mut stream, _) = within("b dials the raw node", listener.accept())
        .await
        .expect("accepted");
    let hs = integration_tests::raw_side_handshake(
        transport::handshake::Hello {
            uid: 0x5eed_0001,
            addr: node.clone(),
        },
        transport::auth::Role::Listener,
    );
    let (_, mut buf) = integration_tests::run_raw_handshake(&mut stream, hs).await;
    next_event(
        &mut events,
        "b's link to the raw node",
        |e| matches!(e, RemoteEvent::Connected { node: n, .. } if *n == node),
    )
    .await;

    stream
        .write_all(&integration_tests::frame_bytes(
            transport::FrameKind::System,
            &super::trust::SHUTDOWN_NOTICE,
        ))
        .await
        .expect("written");
    // What b sends until its side ends: its identify, then a Close.
    let close = within("b answers the notice", async {
        loop {
            match transport::frame::decode(&mut buf, 1 << 20).expect("b's frames decode") {
                Some(f) if f.kind == transport::FrameKind::Close => return Some(f),
                Some(_) => continue,
                None => {}
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await;
    let close = close.expect("b ended the link without a Close frame");
    assert!(
        String::from_utf8_lossy(&close.body).contains("peer shut down"),
        "{close:?}"
    );
    next_event(&mut events, "the incarnation quarantined", |e| {
        matches!(e, RemoteEvent::Quarantined { node: n, reason, .. }
            if *n == node && reason.contains("shut down"))
    })
    .await;
    // The resolve waiting on the node fails, and nothing dials it again.
    let res = within("the resolve ends", resolving).await.expect("joined");
    assert!(res.is_err(), "{res:?}");
    drop(stream);
    within("b shuts down", b.shutdown()).await;
}
