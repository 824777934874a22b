//! An ask whose request is a dead letter on the recipient's node fails at
//! once with the node's reason, as `gen_server:call` does when its callee
//! is gone, instead of waiting out its timeout.

use std::time::{Duration, Instant};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx, ResolveError, SystemConfig,
};
use integration_tests::{actor_path, actor_system_with, eventually, within};

use super::actors_common::{Count, Counter, total};

/// The ask timeout: far above how fast the failure must come.
const LONG: Duration = Duration::from_secs(10);
/// How fast it must come (a round trip, on a loaded machine).
const FAST: Duration = Duration::from_secs(2);

/// An actor of another type, to take a stopped counter's name.
struct Strings;

impl Actor for Strings {
    type Msg = String;

    async fn handle(&mut self, _: String, _: &mut Ctx<Self>) -> ActorResult {
        Ok(())
    }
}

async fn gone_locally(b: &actors::ActorSystem, name: &str) {
    let path = actor_path(b, name);
    within("the actor is gone", async {
        while !matches!(
            b.resolve::<Count>(&path).await,
            Err(ResolveError::NotFound(_))
        ) {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Node a with a ref to b's counter, which has just been told to stop.
async fn counter_that_stops() -> (ActorSystem, ActorSystem, ActorRef<Count>) {
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    assert_eq!(total(&counter).await, 0);
    counter.tell(Count::Stop).expect("room");
    (a, b, counter)
}

#[tokio::test]
async fn an_ask_to_a_stopped_remote_actor_fails_at_once_with_the_reason() {
    let (_a, b, counter) = counter_that_stops().await;
    gone_locally(&b, "counter").await;
    let started = Instant::now();
    let err = counter
        .ask(Count::Get, LONG)
        .await
        .expect_err("no actor answers");
    let took = started.elapsed();
    assert!(
        matches!(&err, AskError::Undeliverable(why) if why.contains("no such actor")),
        "{err}"
    );
    assert!(took < FAST, "failed after {took:?}");
    assert_eq!(b.dead_letters(), 1);
}

#[tokio::test]
async fn an_ask_to_an_actor_of_another_type_fails_at_once_naming_both() {
    let (_a, b, counter) = counter_that_stops().await;
    eventually("another actor takes the name", || {
        b.spawn_named("counter", Strings).is_ok()
    })
    .await;
    let started = Instant::now();
    let err = counter
        .ask(Count::Get, LONG)
        .await
        .expect_err("the actor there takes strings");
    assert!(
        matches!(&err, AskError::Undeliverable(why) if why.contains("actor takes std.String")),
        "{err}"
    );
    assert!(
        started.elapsed() < FAST,
        "failed after {:?}",
        started.elapsed()
    );
}

/// Handles nothing until its gate opens; stops when the gate is dropped.
struct Gated(tokio::sync::watch::Receiver<bool>);

impl Actor for Gated {
    type Msg = Count;

    async fn handle(&mut self, _: Count, ctx: &mut Ctx<Self>) -> ActorResult {
        if self.0.wait_for(|open| *open).await.is_err() {
            ctx.stop();
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_ask_that_waited_for_credit_still_hears_why_it_is_undeliverable() {
    let mut config = SystemConfig::default();
    config
        .set_recipient_window(2048)
        .unwrap()
        .set_mailbox_capacity(4)
        .unwrap();
    let a = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    b.spawn_named("gated", Gated(gate)).expect("free");
    let gated = within("resolve", a.resolve::<Count>(&actor_path(&b, "gated")))
        .await
        .expect("resolves");
    // Its window used up: an ask must wait for credit.
    within("the window fills", async {
        while gated.tell(Count::Add(1)).is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let started = Instant::now();
    let asking = tokio::spawn({
        let gated = gated.clone();
        async move { gated.ask(Count::Get, LONG).await }
    });
    // The actor stops: what was parked for it is given up on (credit comes
    // back), the waiting request goes, and finds no actor.
    drop(open);
    gone_locally_as::<Count>(&b, "gated").await;
    let err = within("the ask ends", asking)
        .await
        .expect("no panic")
        .expect_err("no actor answers");
    assert!(
        matches!(&err, AskError::Undeliverable(why) if why.contains("no such actor")),
        "{err}"
    );
    assert!(
        started.elapsed() < FAST,
        "failed after {:?}",
        started.elapsed()
    );
}

async fn gone_locally_as<M: actors::RemoteMessage>(b: &ActorSystem, name: &str) {
    let path = actor_path(b, name);
    within("the actor is gone", async {
        while !matches!(b.resolve::<M>(&path).await, Err(ResolveError::NotFound(_))) {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Says when it is handling its first message, waits there until its
/// gate opens, then stops.
struct StopsOnFirst {
    entered: Option<tokio::sync::oneshot::Sender<()>>,
    gate: tokio::sync::watch::Receiver<bool>,
}

impl Actor for StopsOnFirst {
    type Msg = Count;

    async fn handle(&mut self, _: Count, ctx: &mut Ctx<Self>) -> ActorResult {
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
        }
        let _ = self.gate.wait_for(|open| *open).await;
        ctx.stop();
        Ok(())
    }
}

/// Polls `f` once: a remote ask hands its request to the link then.
async fn poll_once<F: std::future::Future + Unpin>(f: &mut F) {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut *f).poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

#[tokio::test]
async fn asks_queued_undecoded_for_an_actor_that_stops_fail_at_once() {
    const ASKS: usize = 20;
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let stopper = StopsOnFirst {
        entered: Some(entered_tx),
        gate,
    };
    b.spawn_named("stopper", stopper).expect("free");
    b.spawn_named("probe", Counter::default()).expect("free");
    let stopper = within("resolve", a.resolve::<Count>(&actor_path(&b, "stopper")))
        .await
        .expect("resolves");
    let probe = within("resolve", a.resolve::<Count>(&actor_path(&b, "probe")))
        .await
        .expect("resolves");
    // The first message holds the actor in its handler; the asks come
    // after it was taken from the mailbox, so they wait there undecoded.
    stopper.tell(Count::Add(1)).expect("room");
    within("the stopper handles its first message", entered)
        .await
        .expect("entered");
    let mut asks: Vec<_> = (0..ASKS)
        .map(|_| Box::pin(stopper.ask(Count::Get, LONG)))
        .collect();
    for ask in &mut asks {
        poll_once(ask).await;
    }
    // Behind the asks on the one link: once the probe answers, b has
    // queued them in the stopper's mailbox, where they wait undecoded.
    assert_eq!(total(&probe).await, 0);
    let started = Instant::now();
    open.send(true).expect("the stopper waits");
    for ask in asks {
        let err = within("the ask ends", ask)
            .await
            .expect_err("the actor stopped without answering");
        assert_eq!(err, AskError::ActorGone, "{err}");
    }
    let took = started.elapsed();
    assert!(took < FAST, "failed after {took:?}");
    // Each counted once on b, as left in the mailbox at stop.
    eventually("b counts the asks", || b.dead_letters() >= ASKS as u64).await;
    assert_eq!(b.dead_letters(), ASKS as u64);
    assert_eq!(a.dead_letters(), 0);
}
