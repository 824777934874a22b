//! Fault tests with a peer in its own process (`src/bin/peer.rs`): killed
//! mid-burst, restarted on the same address. Every wait is bounded.

use std::time::Duration;

use actors::{
    ActorRef, Backoff, HeartbeatConfig, RemoteEvent, SendError, StopReason, SystemConfig,
};
use integration_tests::{
    PeerCount, PeerProcess, actor_system_with, eventually, next_event, within,
};

/// Heartbeats every 50 ms; reconnects between 20 and 200 ms.
fn fast_config(pause: Duration) -> SystemConfig {
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(50))
        .set_acceptable_pause(pause);
    let mut c = SystemConfig::default();
    c.set_heartbeat(hb).set_reconnect_backoff(Backoff::new(
        Duration::from_millis(20),
        Duration::from_millis(200),
        0.2,
    ));
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
