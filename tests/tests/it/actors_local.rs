//! The actor runtime inside one process: tell, ask, bounded mailboxes,
//! stop, watch, names, panics and shutdown.

use std::{future::Future, pin::pin, task::Poll, time::Duration};

use actors::{
    Actor, ActorResult, ActorSystem, AskError, Ctx, ResolveError, SendError, SpawnError,
    StopReason, SystemConfig,
};
use integration_tests::within;
use tokio::sync::{mpsc, oneshot};

use super::actors_common::{ASK, Count, Counter, SeqCheck, spawn_watcher, total};

fn local(name: &str) -> ActorSystem {
    ActorSystem::local(name).expect("valid system name")
}

#[tokio::test]
async fn tell_then_ask_sees_every_tell() {
    let sys = local("tell");
    let counter = sys.spawn(Counter::default());
    for n in 1..=100 {
        counter.tell(Count::Add(n)).expect("room in the mailbox");
    }
    // The ask queues behind the tells, so it sees all of them.
    assert_eq!(total(&counter).await, 5050);
    assert!(counter.is_local());
}

#[tokio::test]
async fn local_order_is_kept() {
    let sys = local("order");
    let seq = sys.spawn(SeqCheck::default());
    for n in 0..10_000 {
        seq.send(super::actors_common::Seq::Next(n))
            .await
            .expect("the checker runs");
    }
    let report = within("report", seq.ask(super::actors_common::Seq::Report, ASK))
        .await
        .expect("report");
    assert_eq!(report.received, 10_000);
    assert_eq!(report.first_fault, None);
}

#[tokio::test]
async fn ask_without_reply_times_out() {
    let sys = local("timeout");
    let counter = sys.spawn(Counter::default());
    let limit = Duration::from_millis(50);
    let r = within("ask timeout", counter.ask(Count::Ignore, limit)).await;
    assert_eq!(r, Err(AskError::Timeout(limit)));
    // The actor is fine; only that ask went unanswered.
    assert_eq!(total(&counter).await, 0);
}

/// Handles `u64`s; the first one holds the actor until `gate` opens, so a
/// test can fill the mailbox behind it.
struct Gated {
    entered: Option<oneshot::Sender<()>>,
    gate: Option<oneshot::Receiver<()>>,
    log: mpsc::UnboundedSender<u64>,
}

impl Actor for Gated {
    type Msg = u64;

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) -> ActorResult {
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            let gate = self.gate.take().expect("taken with `entered`");
            let _ = gate.await;
        }
        let _ = self.log.send(n);
        Ok(())
    }
}

/// A system with mailboxes of `cap`, and a [`Gated`] actor already held
/// inside its first message (so its mailbox is empty and `cap` more fit).
async fn held_actor(
    cap: usize,
) -> (
    ActorSystem,
    actors::ActorRef<u64>,
    oneshot::Sender<()>,
    mpsc::UnboundedReceiver<u64>,
) {
    let mut config = SystemConfig::default();
    config.set_mailbox_capacity(cap).unwrap();
    let sys = ActorSystem::with_config("held", None, config)
        .await
        .expect("local system");
    let (entered_tx, entered) = oneshot::channel();
    let (open, gate) = oneshot::channel();
    let (log, log_rx) = mpsc::unbounded_channel();
    let actor = sys.spawn(Gated {
        entered: Some(entered_tx),
        gate: Some(gate),
        log,
    });
    actor.tell(0).expect("empty mailbox");
    within("actor holds message 0", entered)
        .await
        .expect("the actor runs");
    (sys, actor, open, log_rx)
}

#[tokio::test]
async fn full_mailbox_hands_the_message_back() {
    let (_sys, actor, open, mut log) = held_actor(4).await;
    for n in 1..=4 {
        actor.tell(n).expect("under capacity");
    }
    assert_eq!(actor.mailbox_len(), 4);
    match actor.tell(5) {
        Err(SendError::MailboxFull(m)) => assert_eq!(m, 5),
        other => panic!("expected MailboxFull(5), got {other:?}"),
    }
    open.send(()).expect("the actor waits on the gate");
    for want in 0..=4 {
        assert_eq!(within("handled", log.recv()).await, Some(want));
    }
    // Room again once the actor drained its mailbox.
    actor.tell(6).expect("room after draining");
    assert_eq!(within("handled", log.recv()).await, Some(6));
}

#[tokio::test]
async fn send_waits_for_room() {
    let (_sys, actor, open, mut log) = held_actor(2).await;
    actor.tell(1).expect("under capacity");
    actor.tell(2).expect("under capacity");
    let mut send = pin!(actor.send(3));
    // Full: the send must wait, not fail and not overfill.
    let first = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "send completed into a full mailbox");
    assert_eq!(actor.mailbox_len(), 2);
    open.send(()).expect("the actor waits on the gate");
    within("send gets room", send)
        .await
        .expect("the actor is alive");
    for want in 0..=3 {
        assert_eq!(within("handled", log.recv()).await, Some(want));
    }
}

#[tokio::test]
async fn stop_notifies_watchers_then_tells_are_dead_letters() {
    let sys = local("stop");
    let counter = sys.spawn(Counter::default());
    let mut by_actor = spawn_watcher(&sys, &counter).await;
    let watch = counter.watch();
    counter.stop();
    let t = within("watch", watch).await;
    assert_eq!(t.reason, StopReason::Stopped);
    assert_eq!(&t.path, counter.path());
    let t = within("watcher actor", by_actor.recv())
        .await
        .expect("one notice");
    assert_eq!(t.reason, StopReason::Stopped);

    let before = sys.dead_letters();
    match counter.tell(Count::Add(7)) {
        Err(SendError::ActorGone(m)) => assert_eq!(m, Count::Add(7)),
        other => panic!("expected ActorGone, got {other:?}"),
    }
    assert_eq!(sys.dead_letters(), before + 1);
    assert_eq!(
        within("ask", counter.ask(Count::Get, ASK)).await,
        Err(AskError::ActorGone)
    );
    // Watching a dead actor answers at once.
    assert_eq!(
        within("late watch", counter.watch()).await.reason,
        StopReason::Stopped
    );
}

#[tokio::test]
async fn self_stop_is_stopped() {
    let sys = local("selfstop");
    let counter = sys.spawn(Counter::default());
    let watch = counter.watch();
    counter.tell(Count::Stop).expect("alive");
    assert_eq!(within("watch", watch).await.reason, StopReason::Stopped);
}

#[tokio::test]
async fn names_are_unique_while_the_actor_lives() {
    let sys = local("names");
    let first = sys.spawn_named("svc", Counter::default()).expect("free");
    match sys.spawn_named("svc", Counter::default()) {
        Err(SpawnError::NameTaken(n)) => assert_eq!(n, "svc"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert!(matches!(
        sys.spawn_named("a/b", Counter::default()),
        Err(SpawnError::InvalidName(_))
    ));
    let watch = first.watch();
    first.stop();
    within("stop", watch).await;
    // Termination frees the name.
    let second = sys
        .spawn_named("svc", Counter::default())
        .expect("free again");
    second.tell(Count::Add(3)).expect("alive");
    assert_eq!(total(&second).await, 3);
}

#[tokio::test]
async fn local_resolve_checks_existence_and_type() {
    let sys = local("resolve");
    sys.spawn_named("c", Counter::default()).expect("free");
    let path = format!("local://{}/user/c", sys.node());
    let c = sys.resolve::<Count>(&path).await.expect("it exists");
    c.tell(Count::Add(2)).expect("alive");
    assert_eq!(total(&c).await, 2);
    assert!(matches!(
        sys.resolve::<super::actors_common::Seq>(&path).await,
        Err(ResolveError::WrongType { .. })
    ));
    assert!(matches!(
        sys.resolve::<Count>(&format!("local://{}/user/nobody", sys.node()))
            .await,
        Err(ResolveError::NotFound(_))
    ));
    assert!(matches!(
        sys.resolve::<Count>("tcp://x@127.0.0.1:1/user/c").await,
        Err(ResolveError::NoRemoting)
    ));
}

#[tokio::test]
async fn panic_stops_only_that_actor() {
    let sys = local("panic");
    let bad = sys.spawn(Counter::default());
    let good = sys.spawn(Counter::default());
    let mut watcher = spawn_watcher(&sys, &bad).await;
    let watch = bad.watch();
    bad.tell(Count::Panic("boom".into())).expect("alive");
    let t = within("watch", watch).await;
    assert_eq!(t.reason, StopReason::Panicked("boom".into()));
    let t = within("watcher", watcher.recv()).await.expect("notice");
    assert_eq!(t.reason, StopReason::Panicked("boom".into()));
    assert!(matches!(
        bad.tell(Count::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    good.tell(Count::Add(9)).expect("unaffected");
    assert_eq!(total(&good).await, 9);
}

#[tokio::test]
async fn shutdown_stops_every_actor() {
    let sys = local("shutdown");
    let a = sys.spawn(Counter::default());
    let b = sys.spawn_named("b", Counter::default()).expect("free");
    let wa = a.watch();
    let wb = b.watch();
    within("shutdown", sys.shutdown()).await;
    assert_eq!(within("a", wa).await.reason, StopReason::SystemShutdown);
    assert_eq!(within("b", wb).await.reason, StopReason::SystemShutdown);
    assert!(matches!(
        a.tell(Count::Add(1)),
        Err(SendError::ActorGone(_))
    ));
    assert!(matches!(
        sys.spawn_named("c", Counter::default()),
        Err(SpawnError::ShuttingDown)
    ));
}
