//! `NamedRef`: a ref by name that follows its actor across restarts of its
//! node, with a peer in its own process killed and started again on the
//! same address. No test here has a retry loop of its own.

use std::time::{Duration, Instant};

use actors::{AskError, ResolveError, SendError};
use integration_tests::{PeerCount, PeerProcess, TIMEOUT, actor_path, actor_system, within};

use super::actors_common::{Count, Counter};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_ref_follows_its_actor_across_a_restart() {
    let bind = format!("127.0.0.1:{}", free_port());
    let mut first = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", &bind).await;
    let a = actor_system("a").await;
    let counter = a
        .named::<PeerCount>(&format!("counter@{}", first.node))
        .expect("a valid name");
    assert_eq!(counter.path().to_string(), first.counter_path());
    assert!(counter.current().is_none(), "nothing resolved before use");
    within("tell", counter.tell(PeerCount::Add(5)))
        .await
        .expect("sent");
    let total = within("ask", counter.ask(PeerCount::Get, TIMEOUT)).await;
    assert_eq!(total, Ok(5));
    let old = counter.current().expect("cached");

    first.kill();
    let second = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", &bind).await;
    assert_eq!(second.node, first.node);
    // The same calls reach the new incarnation, which starts from zero.
    let total = within(
        "ask after the restart",
        counter.ask(PeerCount::Get, TIMEOUT),
    )
    .await;
    assert_eq!(total, Ok(0));
    within("tell after the restart", counter.tell(PeerCount::Add(2)))
        .await
        .expect("sent");
    within("send after the restart", counter.send(PeerCount::Add(1)))
        .await
        .expect("sent");
    let total = within("ask", counter.ask(PeerCount::Get, TIMEOUT)).await;
    assert_eq!(total, Ok(3));
    // The ref of the first incarnation is dead; the named one moved on.
    assert!(matches!(
        old.tell(PeerCount::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    within("shutdown", a.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_ref_waits_for_a_node_that_is_starting() {
    let bind = format!("127.0.0.1:{}", free_port());
    let a = actor_system("a").await;
    // The node is not up yet: its port refuses connections.
    let counter = a
        .named::<PeerCount>(&format!("tcp://b@{bind}/user/counter"))
        .expect("a valid path");
    let ask = tokio::spawn({
        let counter = counter.clone();
        async move { counter.ask(PeerCount::Get, TIMEOUT).await }
    });
    let peer = PeerProcess::spawn(env!("CARGO_BIN_EXE_peer"), "b", &bind).await;
    assert_eq!(
        within("the ask", ask).await.expect("no panic"),
        Ok(0),
        "answered once {} came up",
        peer.node
    );
    within("shutdown", a.shutdown()).await;
}

#[tokio::test]
async fn a_named_ref_fails_at_once_for_what_a_retry_cannot_fix() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    // Local paths work too.
    let local = b.named::<Count>(&actor_path(&b, "counter")).expect("valid");
    local.tell(Count::Add(4)).await.expect("sent");
    assert_eq!(local.ask(Count::Get, TIMEOUT).await, Ok(4));
    // No actor there: at once, not at the timeout.
    let started = Instant::now();
    let missing = a
        .named::<Count>(&format!("nobody@{}", b.node()))
        .expect("valid");
    let err = within("ask", missing.ask(Count::Get, TIMEOUT)).await;
    assert!(
        matches!(err, Err(AskError::Unresolved(ResolveError::NotFound(_)))),
        "{err:?}"
    );
    let err = within("tell", missing.tell(Count::Add(1))).await;
    assert!(
        matches!(&err, Err(SendError::Unresolved(Count::Add(1), e))
            if matches!(**e, ResolveError::NotFound(_))),
        "the message comes back: {err:?}"
    );
    // The wrong type: at once too.
    let wrong = a
        .named::<PeerCount>(&format!("counter@{}", b.node()))
        .expect("valid");
    let err = within("resolve", wrong.get()).await;
    assert!(
        matches!(err, Err(ResolveError::WrongType { .. })),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Not a name.
    assert!(matches!(
        a.named::<Count>("no-node-here"),
        Err(ResolveError::InvalidPath { .. })
    ));
}

#[tokio::test]
async fn a_named_ref_to_a_node_that_never_comes_fails_within_its_time() {
    let a = actor_system("a").await;
    let port = free_port();
    let counter = a
        .named::<PeerCount>(&format!("counter@b@127.0.0.1:{port}"))
        .expect("valid");
    let time = Duration::from_millis(600);
    let started = Instant::now();
    let err = within("ask", counter.ask(PeerCount::Get, time)).await;
    assert!(
        matches!(
            err,
            Err(AskError::Timeout(_) | AskError::Unresolved(ResolveError::Unreachable { .. }))
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < time + Duration::from_millis(500),
        "bounded by its timeout: {:?}",
        started.elapsed()
    );
}
