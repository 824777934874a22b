//! `Ctx::unwatch`: an actor that stops watching another hears nothing of
//! its end, and a remote node forgets the watch (it holds nothing for it).

use actors::{Actor, ActorRef, ActorResult, Ctx, SystemConfig, Terminated};
use integration_tests::{actor_path, actor_system, actor_system_with, within};
use tokio::sync::mpsc;

use super::actors_common::{Count, Counter, total};

/// Watches and unwatches on command, reporting every `Terminated`.
struct Watcher {
    seen: mpsc::UnboundedSender<Terminated>,
}

enum Cmd {
    Watch(ActorRef<Count>),
    Unwatch(ActorRef<Count>),
    Ping(tokio::sync::oneshot::Sender<()>),
}

impl Actor for Watcher {
    type Msg = Cmd;

    async fn handle(&mut self, cmd: Cmd, ctx: &mut Ctx<Self>) -> ActorResult {
        match cmd {
            Cmd::Watch(r) => ctx.watch(&r),
            Cmd::Unwatch(r) => ctx.unwatch(&r),
            Cmd::Ping(tx) => {
                let _ = tx.send(());
            }
        }
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.seen.send(t);
        Ok(())
    }
}

/// A round trip through the watcher's mailbox: system messages (a
/// `Terminated`) queued before it are handled first.
async fn ping(w: &ActorRef<Cmd>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    w.tell(Cmd::Ping(tx)).map_err(|_| ()).expect("room");
    within("the watcher answers", rx).await.expect("answers");
}

/// Stops `target` and waits until every watcher has been told.
async fn stop_and_wait(target: &ActorRef<Count>) {
    let end = target.watch();
    target.tell(Count::Stop).expect("room");
    within("the target stops", end).await;
}

#[tokio::test]
async fn an_unwatched_local_actor_ends_unnoticed() {
    let sys = actor_system("s").await;
    let (seen, mut got) = mpsc::unbounded_channel();
    let w = sys.spawn(Watcher { seen });
    let kept = sys.spawn(Counter::default());
    let dropped = sys.spawn(Counter::default());
    for t in [&kept, &dropped] {
        w.tell(Cmd::Watch(t.clone())).map_err(|_| ()).expect("room");
    }
    w.tell(Cmd::Unwatch(dropped.clone()))
        .map_err(|_| ())
        .expect("room");
    ping(&w).await;
    stop_and_wait(&dropped).await;
    stop_and_wait(&kept).await;
    ping(&w).await;
    let t = got.try_recv().expect("the watched one is reported");
    assert_eq!(&t.path, kept.path());
    assert!(got.try_recv().is_err(), "the unwatched one is not");
}

#[tokio::test]
async fn a_remote_unwatch_is_forgotten_by_the_watched_node() {
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let (seen, mut got) = mpsc::unbounded_channel();
    let w = a.spawn(Watcher { seen });
    // b keeps at most 1,024 watches from one node on one actor: without
    // the unwatch reaching it, these would fill that and be refused.
    for _ in 0..2_000 {
        w.tell(Cmd::Watch(counter.clone()))
            .map_err(|_| ())
            .expect("room");
        w.tell(Cmd::Unwatch(counter.clone()))
            .map_err(|_| ())
            .expect("room");
    }
    ping(&w).await;
    // Every watch and unwatch went out before this ask, on the same link.
    assert_eq!(total(&counter).await, 0);
    assert_eq!(b.dead_letters(), 0, "no watch was refused");
    // And the watcher hears nothing when the counter ends.
    stop_and_wait(&counter).await;
    ping(&w).await;
    assert!(got.try_recv().is_err(), "nothing reported after unwatch");
}
