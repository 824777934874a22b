//! Actors and messages shared by the actor tests.

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, Terminated};
use integration_tests::within;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// How long an `ask` that is expected to succeed may take.
pub(crate) const ASK: std::time::Duration = integration_tests::TIMEOUT;

/// The counter's messages.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Count {
    /// Adds to the total.
    Add(u64),
    /// Replies with the total.
    Get(ActorRef<u64>),
    /// Replies with the reply ref's own path, so a test sees whose ref
    /// arrived.
    WhoAsks(ActorRef<String>),
    /// Panics with this message.
    Panic(String),
    /// Stops the counter (by itself, from its handler).
    Stop,
    /// Keeps the reply ref without answering: the ask waits for its
    /// timeout (a dropped ref would fail it at once).
    Ignore(ActorRef<u64>),
    /// Fails: the handler returns this error.
    Fail(String),
}

impl RemoteMessage for Count {
    const MANIFEST: &'static str = "it.Count";
}

/// Sums what it is told; answers `Get`.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub(crate) total: u64,
    /// The reply refs of `Ignore`, kept unanswered.
    pub(crate) ignored: Vec<ActorRef<u64>>,
}

impl Actor for Counter {
    type Msg = Count;

    async fn handle(&mut self, msg: Count, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Count::Add(n) => self.total += n,
            Count::Get(reply) => {
                let _ = reply.tell(self.total);
            }
            Count::WhoAsks(reply) => {
                let _ = reply.tell(reply.path().to_string());
            }
            Count::Panic(m) => panic!("{m}"),
            Count::Stop => ctx.stop(),
            Count::Ignore(reply) => self.ignored.push(reply),
            Count::Fail(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// Asks `counter` for its total.
pub(crate) async fn total(counter: &ActorRef<Count>) -> u64 {
    within("counter total", counter.ask(Count::Get, ASK))
        .await
        .expect("the counter answers")
}

/// Watches one actor with [`Ctx::watch`] and reports each
/// [`Actor::terminated`] call.
struct Watcher<N: Send + 'static> {
    target: ActorRef<N>,
    ready: Option<oneshot::Sender<()>>,
    seen: mpsc::UnboundedSender<Terminated>,
}

impl<N: Send + 'static> Actor for Watcher<N> {
    type Msg = ();

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.target);
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(());
        }
        Ok(())
    }

    async fn handle(&mut self, (): (), _: &mut Ctx<Self>) -> ActorResult {
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.seen.send(t);
        Ok(())
    }
}

/// Spawns an actor on `system` that watches `target` through
/// [`Ctx::watch`]; returns once the watch is registered (for a remote
/// target: queued on the link, ahead of anything sent afterwards).
pub(crate) async fn spawn_watcher<N: Send + 'static>(
    system: &ActorSystem,
    target: &ActorRef<N>,
) -> mpsc::UnboundedReceiver<Terminated> {
    let (ready, started) = oneshot::channel();
    let (seen, rx) = mpsc::unbounded_channel();
    system.spawn(Watcher {
        target: target.clone(),
        ready: Some(ready),
        seen,
    });
    within("watcher started", started)
        .await
        .expect("the watcher starts");
    rx
}

/// Receives everything told to it into a channel: a plain actor (not an
/// ask slot) that replies reach through refs carried in messages.
pub(crate) struct Collector<T> {
    pub(crate) out: mpsc::UnboundedSender<T>,
}

impl<T: Send + 'static> Actor for Collector<T> {
    type Msg = T;

    async fn handle(&mut self, msg: T, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.out.send(msg);
        Ok(())
    }
}

/// The sequence checker's messages.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Seq {
    /// The next number; must be exactly one more than the last.
    Next(u64),
    /// Report what arrived so far.
    Report(ActorRef<SeqReport>),
}

impl RemoteMessage for Seq {
    const MANIFEST: &'static str = "it.Seq";
}

/// What a [`SeqCheck`] saw.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeqReport {
    /// Numbers received.
    pub(crate) received: u64,
    /// The first out-of-order number, as `(expected, got)`.
    pub(crate) first_fault: Option<(u64, u64)>,
}

impl RemoteMessage for SeqReport {
    const MANIFEST: &'static str = "it.SeqReport";
}

/// Checks that `Seq::Next` numbers arrive as 0, 1, 2, ...
#[derive(Debug, Default)]
pub(crate) struct SeqCheck {
    next: u64,
    received: u64,
    first_fault: Option<(u64, u64)>,
}

impl Actor for SeqCheck {
    type Msg = Seq;

    async fn handle(&mut self, msg: Seq, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Seq::Next(n) => {
                self.received += 1;
                if n != self.next && self.first_fault.is_none() {
                    self.first_fault = Some((self.next, n));
                }
                self.next = n + 1;
            }
            Seq::Report(reply) => {
                let _ = reply.tell(SeqReport {
                    received: self.received,
                    first_fault: self.first_fault,
                });
            }
        }
        Ok(())
    }
}
