//! Actors failing across nodes: death watch, panics, dead letters for
//! mistyped or undecodable messages, and shutdown.

use actors::{Actor, ActorRef, ActorResult, Ctx, RemoteMessage, ResolveError, StopReason};
use integration_tests::{actor_path, actor_system, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::actors_common::{Count, Counter, spawn_watcher, total};

#[tokio::test]
async fn remote_stop_resolves_watch_and_calls_terminated() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let watch = remote.watch();
    let mut watcher = spawn_watcher(&a, &remote).await;
    // Stopped through its node: the stop travels behind both watches.
    remote.stop();
    let t = within("watch future", watch).await;
    assert_eq!(t.reason, StopReason::Stopped);
    assert_eq!(&t.path, remote.path());
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, StopReason::Stopped);
    assert_eq!(&t.path, remote.path());
    // Watching it now answers from b: nothing lives there.
    let late = within("late watch", remote.watch()).await;
    assert_eq!(late.reason, StopReason::NotFound);
}

#[tokio::test]
async fn remote_actor_stopping_itself_is_seen_by_watchers() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let mut watcher = spawn_watcher(&a, &remote).await;
    remote.tell(Count::Stop).expect("room");
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, StopReason::Stopped);
}

#[tokio::test]
async fn remote_panic_reaches_watchers_and_the_node_keeps_working() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("fragile", Counter::default()).expect("free");
    b.spawn_named("sturdy", Counter::default()).expect("free");
    let fragile = within("resolve", a.resolve::<Count>(&actor_path(&b, "fragile")))
        .await
        .expect("resolves");
    let sturdy = within("resolve", a.resolve::<Count>(&actor_path(&b, "sturdy")))
        .await
        .expect("resolves");
    let watch = fragile.watch();
    let mut watcher = spawn_watcher(&a, &fragile).await;
    fragile
        .tell(Count::Panic("remote boom".into()))
        .expect("room");
    let want = StopReason::Panicked("remote boom".into());
    assert_eq!(within("watch future", watch).await.reason, want);
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, want);
    // The link, the node and its other actors are fine.
    sturdy.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&sturdy).await, 5);
    // The name is free again, and a new actor there is reachable.
    b.spawn_named("fragile", Counter::default())
        .expect("free after the panic");
    let again = within(
        "resolve again",
        a.resolve::<Count>(&actor_path(&b, "fragile")),
    )
    .await
    .expect("resolves");
    assert_eq!(total(&again).await, 0);
}

#[tokio::test]
async fn a_handler_error_stops_the_actor_and_reaches_remote_watchers() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("failing", Counter::default()).expect("free");
    let failing = within("resolve", a.resolve::<Count>(&actor_path(&b, "failing")))
        .await
        .expect("resolves");
    let watch = failing.watch();
    let mut watcher = spawn_watcher(&a, &failing).await;
    failing.tell(Count::Add(1)).expect("room");
    failing.tell(Count::Fail("bad input".into())).expect("room");
    // Queued behind the failure: never handled, a dead letter there.
    failing.tell(Count::Add(2)).expect("room");
    let want = StopReason::Failed("bad input".into());
    assert_eq!(within("watch future", watch).await.reason, want);
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, want);
    // What followed the failure was not handled by anyone.
    integration_tests::eventually("the message behind the failure is a dead letter", || {
        b.dead_letters() >= 1
    })
    .await;
}

/// An actor whose `started` fails.
struct FailsToStart;

impl Actor for FailsToStart {
    type Msg = u64;

    async fn started(&mut self, _: &mut Ctx<Self>) -> ActorResult {
        Err("no config".into())
    }

    async fn handle(&mut self, _: u64, _: &mut Ctx<Self>) -> ActorResult {
        panic!("a failed start handles nothing");
    }
}

#[tokio::test]
async fn a_failed_start_stops_the_actor_before_any_message() {
    let a = actor_system("a").await;
    let r = a.spawn(FailsToStart);
    let _ = r.tell(1);
    let t = within("watch", r.watch()).await;
    assert_eq!(t.reason, StopReason::Failed("no config".into()));
}

/// A message type no actor in these tests takes. `Other(0, 7)` encodes
/// to the same bytes as `Count::Add(7)`: only the manifest tells them apart.
#[derive(Debug, Serialize, Deserialize)]
struct Other(u64, u64);

impl RemoteMessage for Other {
    const MANIFEST: &'static str = "it.Other";
}

/// Carries a ref typed `Other` to [`Holder`].
#[derive(Debug, Serialize, Deserialize)]
struct HoldRef(ActorRef<Other>);

impl RemoteMessage for HoldRef {
    const MANIFEST: &'static str = "it.HoldRef";
}

/// `HoldRef` as a node that knows only the path sees it: the same manifest
/// and the same bytes (a ref serializes as its path string).
#[derive(Debug, Serialize, Deserialize)]
struct HoldPath(String);

impl RemoteMessage for HoldPath {
    const MANIFEST: &'static str = "it.HoldRef";
}

/// Tells `Other(0, 7)` through every ref it is given and reports whether the
/// tell was accepted.
struct Holder {
    told: mpsc::UnboundedSender<bool>,
}

impl Actor for Holder {
    type Msg = HoldRef;

    async fn handle(&mut self, HoldRef(to): HoldRef, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.told.send(to.tell(Other(0, 7)).is_ok());
        Ok(())
    }
}

#[tokio::test]
async fn mistyped_remote_message_is_a_dead_letter_and_the_link_survives() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (told, mut told_rx) = mpsc::unbounded_channel();
    a.spawn_named("holder", Holder { told }).expect("free");
    b.spawn_named("counter", Counter::default()).expect("free");
    let before = b.dead_letters();

    // b hands a a ref typed `Other` to its `Count` actor: refs inside
    // messages are not type-checked, only `resolve` is.
    let holder = within(
        "resolve holder",
        b.resolve::<HoldPath>(&actor_path(&a, "holder")),
    )
    .await
    .expect("resolves");
    holder
        .tell(HoldPath(actor_path(&b, "counter")))
        .expect("room");
    assert_eq!(
        within("holder told", told_rx.recv()).await,
        Some(true),
        "a remote tell is accepted locally whatever the far side does"
    );

    // An ask from a on the same link arrives after the mistyped message,
    // so by its reply b has counted the dead letter.
    let counter = within(
        "resolve counter",
        a.resolve::<Count>(&actor_path(&b, "counter")),
    )
    .await
    .expect("resolves");
    counter.tell(Count::Add(2)).expect("room");
    assert_eq!(
        total(&counter).await,
        2,
        "the mistyped message was not handled"
    );
    assert_eq!(b.dead_letters(), before + 1);
}

/// Claims to be a `Count` but is not one: same manifest, other shape.
#[derive(Debug, Serialize, Deserialize)]
struct FakeCount(u32);

impl RemoteMessage for FakeCount {
    const MANIFEST: &'static str = "it.Count";
}

#[tokio::test]
async fn undecodable_remote_message_is_a_dead_letter_and_the_actor_survives() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let path = actor_path(&b, "counter");
    let counter = within("resolve", a.resolve::<Count>(&path))
        .await
        .expect("resolves");
    let fake = within("resolve as fake", a.resolve::<FakeCount>(&path))
        .await
        .expect("the manifest matches");
    let before = b.dead_letters();
    counter.tell(Count::Add(1)).expect("room");
    // Variant index 99: `Count` has six.
    fake.tell(FakeCount(99)).expect("room");
    counter.tell(Count::Add(2)).expect("room");
    // Decoding runs on the actor's task, in order: the reply comes after.
    assert_eq!(total(&counter).await, 3);
    assert_eq!(b.dead_letters(), before + 1);
}

#[tokio::test]
async fn tell_to_a_stopped_remote_actor_is_a_dead_letter_there() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("gone", Counter::default()).expect("free");
    b.spawn_named("here", Counter::default()).expect("free");
    let gone = within("resolve", a.resolve::<Count>(&actor_path(&b, "gone")))
        .await
        .expect("resolves");
    let here = within("resolve", a.resolve::<Count>(&actor_path(&b, "here")))
        .await
        .expect("resolves");
    gone.tell(Count::Add(1)).expect("room");
    let watch = gone.watch();
    gone.stop();
    within("stopped", watch).await;
    let before = b.dead_letters();
    gone.tell(Count::Add(1))
        .expect("a remote tell cannot know yet");
    // Same link, later message: by its reply the dead letter is counted.
    assert_eq!(total(&here).await, 0);
    assert_eq!(b.dead_letters(), before + 1);
}

#[tokio::test]
async fn respawned_actor_gets_messages_sent_to_its_path() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let first = b.spawn_named("svc", Counter::default()).expect("free");
    let path = actor_path(&b, "svc");
    let remote = within("resolve", a.resolve::<Count>(&path))
        .await
        .expect("resolves");
    remote.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&remote).await, 1);
    let watch = first.watch();
    first.stop();
    within("stopped", watch).await;
    b.spawn_named("svc", Counter::default())
        .expect("free again");
    let again = within("resolve again", a.resolve::<Count>(&path))
        .await
        .expect("resolves");
    again.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&again).await, 5);
}

/// Carries a ref to a counter.
#[derive(Debug, Serialize, Deserialize)]
struct CountRef(ActorRef<Count>);

impl RemoteMessage for CountRef {
    const MANIFEST: &'static str = "it.CountRef";
}

/// `CountRef` as a node that has only the path sees it.
#[derive(Debug, Serialize, Deserialize)]
struct CountPath(String);

impl RemoteMessage for CountPath {
    const MANIFEST: &'static str = "it.CountRef";
}

#[tokio::test]
async fn late_spawned_actor_gets_messages_sent_to_its_path() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("first", Counter::default()).expect("free");
    let first = within("resolve", a.resolve::<Count>(&actor_path(&b, "first")))
        .await
        .expect("resolves");
    // b tells a where its service will live before starting it.
    let (out, mut refs) = mpsc::unbounded_channel();
    a.spawn_named("inbox", super::actors_common::Collector::<CountRef> { out })
        .expect("free");
    let inbox = within(
        "resolve inbox",
        b.resolve::<CountPath>(&actor_path(&a, "inbox")),
    )
    .await
    .expect("resolves");
    inbox.tell(CountPath(actor_path(&b, "late"))).expect("room");
    let CountRef(late) = within("path arrives", refs.recv())
        .await
        .expect("the inbox forwards");

    let before = b.dead_letters();
    late.tell(Count::Add(1)).expect("room");
    // Same link, later message: by its reply b has dropped the first tell.
    assert_eq!(total(&first).await, 0);
    assert_eq!(b.dead_letters(), before + 1, "nothing lived there yet");

    b.spawn_named("late", Counter::default()).expect("free");
    late.tell(Count::Add(2)).expect("room");
    let got = within(
        "ask the late actor",
        late.ask(Count::Get, std::time::Duration::from_secs(5)),
    )
    .await;
    assert_eq!(
        got,
        Ok(2),
        "messages to a path reach the actor living there now"
    );
}

#[tokio::test]
async fn shutdown_tells_watchers_and_closes_links() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let on_a = a.spawn_named("counter", Counter::default()).expect("free");
    let path = actor_path(&a, "counter");
    let remote = within("resolve", b.resolve::<Count>(&path))
        .await
        .expect("resolves");
    assert_eq!(total(&remote).await, 0);
    let local_watch = on_a.watch();
    let remote_watch = remote.watch();
    let mut watcher = spawn_watcher(&b, &remote).await;
    // The watch registrations reach a before the shutdown starts.
    assert_eq!(total(&remote).await, 0);

    within("shutdown", a.shutdown()).await;
    assert_eq!(
        within("local watch", local_watch).await.reason,
        StopReason::SystemShutdown
    );
    assert_eq!(
        within("remote watch", remote_watch).await.reason,
        StopReason::SystemShutdown
    );
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, StopReason::SystemShutdown);

    // a no longer listens: b cannot reach it.
    match within("resolve after shutdown", b.resolve::<Count>(&path)).await {
        Err(ResolveError::Unreachable { .. }) => {}
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // Watching through the old ref now reports the node unreachable.
    let t = within("watch after shutdown", remote.watch()).await;
    assert!(
        matches!(t.reason, StopReason::NodeUnreachable(_)),
        "{:?}",
        t.reason
    );
}
