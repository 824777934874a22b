//! How many connections first contact makes, and that none is opened only
//! to be closed at once.

use actors::SystemConfig;
use integration_tests::{actor_path, actor_system_with, link_events, within};

use super::actors_common::{Count, Counter, total};

#[tokio::test]
async fn first_contact_brings_one_link_up_on_each_node_and_closes_none() {
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    let mut a_events = a.subscribe_remote_events();
    let mut b_events = b.subscribe_remote_events();
    b.spawn_named("counter", Counter::default()).expect("free");
    a.spawn_named("counter", Counter::default()).expect("free");
    let on_b = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    // b answers a's ask, and sends to a's own actor: b needs a link too.
    on_b.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&on_b).await, 1);
    let on_a = within("resolve", b.resolve::<Count>(&actor_path(&a, "counter")))
        .await
        .expect("resolves");
    on_a.tell(Count::Add(2)).expect("room");
    assert_eq!(total(&on_a).await, 2);
    // Let any duplicate that was going to be closed be closed: a round trip
    // each way more.
    assert_eq!(total(&on_b).await, 1);
    assert_eq!(total(&on_a).await, 2);
    let (a_up, a_down) = link_events(&mut a_events);
    let (b_up, b_down) = link_events(&mut b_events);
    assert_eq!((a_up, a_down), (1, 0), "a's link events");
    assert_eq!((b_up, b_down), (1, 0), "b's link events");
}

/// Two nodes that talk and then shut down, one after the other: the
/// ordinary end of a node is not a warning, and nothing counts as lost
/// (the frames that cross a closing link are system frames, which their
/// own protocols resend or replace).
// One thread: the log capture is the thread's, and every task runs on it.
#[tokio::test]
async fn a_graceful_shutdown_logs_no_warnings_and_loses_nothing() {
    use integration_tests::LogCapture;
    let logs = LogCapture::install(tracing::Level::WARN);
    for _ in 0..5 {
        let a = actor_system_with("a", SystemConfig::default()).await;
        let b = actor_system_with("b", SystemConfig::default()).await;
        b.spawn_named("counter", Counter::default()).expect("free");
        let on_b = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
            .await
            .expect("resolves");
        for _ in 0..1_000 {
            on_b.tell(Count::Add(1)).expect("room");
        }
        assert_eq!(total(&on_b).await, 1_000);
        within("b shuts down", b.shutdown()).await;
        within("a shuts down", a.shutdown()).await;
        assert_eq!((a.dead_letters(), b.dead_letters()), (0, 0));
    }
    let text = logs.text();
    assert!(!text.contains(" WARN "), "{text}");
}
