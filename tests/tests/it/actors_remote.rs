//! Actors across systems in one process, over real sockets on 127.0.0.1:
//! resolve, tell, ask, refs inside messages, order, and three nodes.

use std::time::Duration;

use actors::{Actor, ActorRef, ActorResult, AskError, Ctx, ResolveError, SystemConfig};
use integration_tests::{actor_path, actor_system, actor_system_with, within};
use tokio::sync::mpsc;

use super::actors_common::{ASK, Collector, Count, Counter, Seq, SeqCheck, total};

#[tokio::test]
async fn remote_tell_and_ask() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let local = b.spawn_named("counter", Counter::default()).expect("free");
    let path = actor_path(&b, "counter");
    let remote = within("resolve", a.resolve::<Count>(&path))
        .await
        .expect("resolves");
    assert!(!remote.is_local());
    assert_eq!(remote.path().to_string(), path);
    for n in 1..=10 {
        remote.tell(Count::Add(n)).expect("link has room");
    }
    // The ask travels behind the tells on the same link.
    assert_eq!(total(&remote).await, 55);
    // The actor really lives on b.
    assert_eq!(total(&local).await, 55);
}

#[tokio::test]
async fn reply_through_a_ref_inside_a_message() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let counter = a.spawn_named("counter", Counter::default()).expect("free");
    counter.tell(Count::Add(41)).expect("alive");
    // An anonymous actor on b, reachable from a only because its ref is
    // inside the message.
    let (out, mut replies) = mpsc::unbounded_channel();
    let collector = b.spawn(Collector::<u64> { out });
    let remote = within("resolve", b.resolve::<Count>(&actor_path(&a, "counter")))
        .await
        .expect("resolves");
    remote.tell(Count::Add(1)).expect("room");
    remote.tell(Count::Get(collector.clone())).expect("room");
    assert_eq!(within("reply", replies.recv()).await, Some(42));
    // Again, now that the collector's path is known on a's side.
    remote.tell(Count::Get(collector)).expect("room");
    assert_eq!(within("reply", replies.recv()).await, Some(42));
}

#[tokio::test]
async fn hundred_thousand_messages_arrive_in_order() {
    const N: u64 = 100_000;
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("seq", SeqCheck::default()).expect("free");
    let seq = within("resolve", a.resolve::<Seq>(&actor_path(&b, "seq")))
        .await
        .expect("resolves");
    within("send all", async {
        for n in 0..N {
            seq.send(Seq::Next(n)).await.expect("link is up");
        }
    })
    .await;
    let report = within("report", seq.ask(Seq::Report, ASK))
        .await
        .expect("report");
    assert_eq!(report.first_fault, None);
    assert_eq!(report.received, N);
}

#[tokio::test]
async fn ask_without_reply_times_out_across_nodes() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let limit = Duration::from_millis(100);
    let r = within("ask", remote.ask(Count::Ignore, limit)).await;
    assert_eq!(r, Err(AskError::Timeout(limit)));
    assert_eq!(total(&remote).await, 0);
}

/// Forwards every message to another actor.
struct Forwarder {
    to: ActorRef<Count>,
}

impl Actor for Forwarder {
    type Msg = Count;

    async fn handle(&mut self, msg: Count, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.to.tell(msg);
        Ok(())
    }
}

#[tokio::test]
async fn three_nodes_reply_goes_straight_to_the_asker() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let c = actor_system("c").await;
    let on_c = c.spawn_named("counter", Counter::default()).expect("free");
    on_c.tell(Count::Add(42)).expect("alive");
    let to_c = within(
        "b resolves c",
        b.resolve::<Count>(&actor_path(&c, "counter")),
    )
    .await
    .expect("resolves");
    b.spawn_named("fwd", Forwarder { to: to_c }).expect("free");
    let fwd = within("a resolves b", a.resolve::<Count>(&actor_path(&b, "fwd")))
        .await
        .expect("resolves");
    // a -> b -> c, and c answers a's reply ref itself.
    assert_eq!(total(&fwd).await, 42);
    let asked_by = within("who asks", fwd.ask(Count::WhoAsks, ASK))
        .await
        .expect("c answers");
    let prefix = format!("tcp://{}/temp/", a.node());
    assert!(
        asked_by.starts_with(&prefix),
        "c saw reply ref {asked_by}, not one of a's ({prefix}...)"
    );
}

#[tokio::test]
async fn resolve_reports_missing_and_mistyped_actors() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let missing = actor_path(&b, "nobody");
    match within("resolve missing", a.resolve::<Count>(&missing)).await {
        Err(ResolveError::NotFound(p)) => assert_eq!(p, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match within(
        "resolve mistyped",
        a.resolve::<Seq>(&actor_path(&b, "counter")),
    )
    .await
    {
        Err(ResolveError::WrongType {
            expected, actual, ..
        }) => {
            assert_eq!(expected, "it.Seq");
            assert_eq!(actual, "it.Count");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(matches!(
        a.resolve::<Count>("tcp://b@nohostport/user/x").await,
        Err(ResolveError::InvalidPath { .. })
    ));
}

/// A port on 127.0.0.1 with nothing listening on it.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("bound").port()
}

#[tokio::test]
async fn resolving_an_unreachable_node_fails_fast() {
    let a = actor_system("a").await;
    let path = format!("tcp://ghost@127.0.0.1:{}/user/x", dead_port());
    // Connection refused: far sooner than the resolve timeout.
    match within("resolve", a.resolve::<Count>(&path)).await {
        Err(ResolveError::Unreachable { addr, .. }) => {
            assert!(addr.starts_with("ghost@127.0.0.1:"), "{addr}")
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // The failed association does not wedge: trying again fails the same way.
    assert!(matches!(
        within("resolve again", a.resolve::<Count>(&path)).await,
        Err(ResolveError::Unreachable { .. })
    ));
}

#[tokio::test]
async fn resolving_a_silent_node_times_out() {
    // Accepts TCP (in the kernel backlog) but never says hello.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = silent.local_addr().expect("bound").port();
    let limit = Duration::from_millis(300);
    let mut config = SystemConfig::default();
    config.set_resolve_timeout(limit).unwrap();
    let a = actor_system_with("a", config).await;
    let path = format!("tcp://ghost@127.0.0.1:{port}/user/x");
    match within("resolve", a.resolve::<Count>(&path)).await {
        Err(ResolveError::Timeout { timeout, .. }) => assert_eq!(timeout, limit),
        other => panic!("expected Timeout, got {other:?}"),
    }
    drop(silent);
}

/// A message whose `Serialize` impl sends a remote message itself: what a
/// serializer must not do (it runs under the link's locks).
struct Sneaky(u64);

/// The remote ref `Sneaky`'s serializer sends to, and what each of its
/// sends returned (true: refused as re-entrant).
static SNEAKY_SIDE: std::sync::Mutex<Option<ActorRef<Count>>> = std::sync::Mutex::new(None);
static SNEAKY_OUTCOMES: std::sync::Mutex<Vec<bool>> = std::sync::Mutex::new(Vec::new());

impl serde::Serialize for Sneaky {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let side = SNEAKY_SIDE.lock().expect("not poisoned").clone();
        if let Some(side) = side {
            let refused = matches!(
                side.tell(Count::Add(1)),
                Err(actors::SendError::Serialization(
                    actors::SerializationError::Reentrant
                ))
            );
            SNEAKY_OUTCOMES.lock().expect("not poisoned").push(refused);
        }
        s.serialize_u64(self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Sneaky {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <u64 as serde::Deserialize>::deserialize(d).map(Sneaky)
    }
}

impl actors::RemoteMessage for Sneaky {
    const MANIFEST: &'static str = "it.Sneaky";
}

#[tokio::test]
async fn a_serializer_that_sends_remotely_gets_an_error_not_a_deadlock() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let (out, mut got) = mpsc::unbounded_channel();
    b.spawn_named("sink", Collector::<Sneaky> { out })
        .expect("free");
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let sink = within("resolve", a.resolve::<Sneaky>(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    *SNEAKY_SIDE.lock().expect("not poisoned") = Some(counter.clone());
    // The first tell defines the sink's id on the link (encoded outside
    // the locks, into a scratch buffer); the second is encoded straight
    // into the link's queue, under both locks. Each is run on a blocking
    // thread so that a deadlock fails the test instead of hanging it.
    for n in 1..=2u64 {
        let sink = sink.clone();
        let sent = within(
            "a tell whose serializer sends",
            tokio::task::spawn_blocking(move || sink.tell(Sneaky(n)).is_ok()),
        )
        .await
        .expect("does not panic");
        assert!(sent, "the outer message goes out");
        assert_eq!(within("delivery", got.recv()).await.map(|s| s.0), Some(n));
    }
    assert_eq!(
        *SNEAKY_OUTCOMES.lock().expect("not poisoned"),
        [true, true],
        "both inner sends were refused as re-entrant"
    );
    // The link and the thread are fine afterwards.
    *SNEAKY_SIDE.lock().expect("not poisoned") = None;
    counter.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&counter).await, 5);
}
