//! The [`Actor`] trait and the context handed to its hooks ([`Ctx`]).
//! How an actor runs is split by job:
//! - `outcome`: how one instance's run ends (a stop, a failure, a
//!   sibling's failure), and the guard that turns a panic in a hook into a
//!   failure;
//! - `children`: how an actor is supervised (its factory, its
//!   supervisor's strategy, its parent) and what a parent does when a
//!   child restarts or ends;
//! - `decode`: a remote batch decoded in slices on the actor's task, and
//!   the messages a stopped actor never handled;
//! - `turn`: the run loop of one instance: `started`, then system
//!   messages, timers and batches of messages until it stops or fails;
//! - `supervise`: the actor's task: instances one after another, the
//!   supervisor's verdict after a failure, a restart, and the end;
//! - `spawn`: [`ActorSystem::spawn`] and friends, and the task's end
//!   (the mailbox closed, watchers and the parent told).

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::{
    actor_ref::ActorRef,
    config::SpawnOptions,
    error::{AskError, SpawnError},
    lifecycle::{StopReason, Terminated},
    serialization::RemoteMessage,
    supervision::{Parent, Restarts, SupervisorStrategy},
    system::ActorSystem,
    timer::{TimerKey, Timers},
    trace::TraceContext,
    watch::WatchSink,
};

mod children;
mod decode;
mod outcome;
mod spawn;
mod supervise;
mod turn;

pub(crate) use children::Factory;
use children::{Child, Supervision};

/// What a hook returns when it fails: any error, boxed (`?` converts
/// every `std::error::Error + Send + Sync` into it, and a `&str` or
/// `String` converts with `.into()`).
pub type ActorError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What [`Actor::started`], [`Actor::handle`] and [`Actor::terminated`]
/// return: `Ok(())`, or the failure that stops the actor (see
/// [`StopReason::Failed`]).
pub type ActorResult = Result<(), ActorError>;

/// An actor: state plus a handler for its messages, run one message at a
/// time on its own task.
///
/// ```
/// use actors::{Actor, ActorResult, Ctx};
/// struct Counter(u64);
/// impl Actor for Counter {
///     type Msg = u64;
///     async fn handle(&mut self, n: u64, _ctx: &mut Ctx<Self>) -> ActorResult {
///         self.0 = self.0.checked_add(n).ok_or("counter overflow")?;
///         Ok(())
///     }
/// }
/// ```
///
/// # Failures
/// A hook that returns an error, or panics, fails the actor. Its
/// supervisor's [`SupervisorStrategy`] decides what follows: an actor
/// spawned as a value ([`ActorSystem::spawn`], [`ActorSystem::spawn_named`])
/// stops with [`StopReason::Failed`] (or [`StopReason::Panicked`]); one
/// spawned from a factory ([`ActorSystem::spawn_supervised`],
/// [`Ctx::spawn_child`]) may be restarted in place, keeping its path and
/// refs, stopped, or its failure escalated to its parent. Watchers see the
/// reason it finally stopped for, and the rest of the system goes on. The
/// message being handled is not handled again: it is counted as a dead
/// letter ("handler failed").
///
/// # Restarts
/// A restart stops the actor's children (their `stopped` runs first),
/// calls `stopped` on the old instance (not after a panic: its state is
/// unknown), cancels its timers (unless
/// [`Ctx::keep_timers_on_restart`]), waits for the backoff if the
/// strategy has one, makes a new instance from the factory and calls its
/// `started`, which typically spawns the children again. Watches the
/// actor placed ([`Ctx::watch`]) and watches on it stay in force: a
/// restart is not a termination.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an actor",
    label = "needs `impl Actor for {Self}`",
    note = "implement `actors::Actor` for it: `type Msg = ...;` and `async fn handle(&mut self, msg: Self::Msg, ctx: &mut Ctx<Self>) -> ActorResult`",
    note = "an actor must be `Send + 'static`: it runs on its own task"
)]
pub trait Actor: Send + Sized + 'static {
    /// The messages this actor takes.
    type Msg: Send + 'static;

    /// Runs once before the first message. An error fails the actor
    /// before it handles anything.
    fn started(&mut self, ctx: &mut Ctx<Self>) -> impl Future<Output = ActorResult> + Send {
        let _ = ctx;
        async { Ok(()) }
    }

    /// Handles one message. An error or a panic here fails the actor (see
    /// the trait's docs).
    fn handle(
        &mut self,
        msg: Self::Msg,
        ctx: &mut Ctx<Self>,
    ) -> impl Future<Output = ActorResult> + Send;

    /// An actor this one watches (see [`Ctx::watch`]) has terminated. An
    /// error fails this actor.
    fn terminated(
        &mut self,
        t: Terminated,
        ctx: &mut Ctx<Self>,
    ) -> impl Future<Output = ActorResult> + Send {
        let _ = (t, ctx);
        async { Ok(()) }
    }

    /// How this actor supervises the children it spawns with
    /// [`Ctx::spawn_child`]. Asked once per instance, before its
    /// `started`. Default: [`SupervisorStrategy::stop`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// use actors::{Actor, ActorResult, Ctx, SupervisorStrategy};
    /// struct Pool;
    /// struct Worker;
    /// impl Actor for Worker {
    ///     type Msg = u64;
    ///     async fn handle(&mut self, _: u64, _: &mut Ctx<Self>) -> ActorResult { Ok(()) }
    /// }
    /// impl Actor for Pool {
    ///     type Msg = u64;
    ///     fn supervisor_strategy(&self) -> SupervisorStrategy {
    ///         SupervisorStrategy::restart()
    ///             .with_limit(3, Duration::from_secs(5))
    ///             .with_backoff(Duration::from_millis(10), Duration::from_secs(1))
    ///     }
    ///     async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
    ///         // At /user/pool/w1 (if the pool is /user/pool).
    ///         ctx.spawn_child("w1", || Worker)?;
    ///         Ok(())
    ///     }
    ///     async fn handle(&mut self, _: u64, _: &mut Ctx<Self>) -> ActorResult { Ok(()) }
    /// }
    /// ```
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::default()
    }

    /// Runs once after the last message, after the actor's children have
    /// stopped; on a restart, on the old instance. Not after a panic.
    fn stopped(&mut self, reason: &StopReason) -> impl Future<Output = ()> + Send {
        let _ = reason;
        async {}
    }
}

/// What an actor's hooks can reach: itself, its system, control of its
/// own life, and its timers.
///
/// Method groups:
/// - identity: [`myself`](Self::myself), [`system`](Self::system);
/// - life: [`stop`](Self::stop), [`watch`](Self::watch);
/// - children: [`spawn_child`](Self::spawn_child);
/// - timers: [`schedule_once`](Self::schedule_once),
///   [`schedule_repeatedly`](Self::schedule_repeatedly),
///   [`cancel_timer`](Self::cancel_timer),
///   [`keep_timers_on_restart`](Self::keep_timers_on_restart).
pub struct Ctx<A: Actor> {
    pub(crate) myself: ActorRef<A::Msg>,
    pub(crate) system: ActorSystem,
    pub(crate) stop: bool,
    pub(crate) sink: WatchSink,
    pub(crate) timers: Timers<A::Msg>,
    /// This instance's strategy for its children.
    pub(crate) strategy: SupervisorStrategy,
    /// Live children by spawn id.
    pub(crate) children: HashMap<u64, Child>,
    /// This actor as its children's parent (its cell).
    pub(crate) parent_link: Arc<dyn Parent>,
    pub(crate) keep_timers: bool,
    /// The restart window this instance's children share when its
    /// strategy is all-for-one (Erlang's supervisor intensity): a restart
    /// of the group counts once, whichever child failed.
    pub(crate) group_restarts: Arc<Mutex<Restarts>>,
}

impl<A: Actor> fmt::Debug for Ctx<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").field("myself", &self.myself).finish()
    }
}

impl<A: Actor> Ctx<A> {
    /// A ref to this actor.
    pub fn myself(&self) -> &ActorRef<A::Msg> {
        &self.myself
    }

    /// The system this actor runs in.
    pub fn system(&self) -> &ActorSystem {
        &self.system
    }

    /// The trace context of the message being handled, when it came from
    /// a node that propagates them (`SystemConfig::set_trace_propagation`)
    /// and was sent inside a [`TraceContext::scope`]. The handler runs in
    /// it, so its remote sends carry it on; to start a child span, send
    /// inside `ctx.trace_context().map(|t| t.with_parent_id(span_id))`'s
    /// scope. [`TraceContext::current`] says the same.
    pub fn trace_context(&self) -> Option<TraceContext> {
        TraceContext::current()
    }

    /// Stops this actor after the current message; messages still in its
    /// mailbox become dead letters.
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Watches `other`: when it stops (or its node becomes unreachable),
    /// this actor's [`Actor::terminated`] runs with the reason. Watching an
    /// actor that is already gone delivers `Terminated` at once.
    pub fn watch<N: Send + 'static>(&self, other: &ActorRef<N>) {
        other.add_watcher(self.sink.clone());
    }

    /// Stops watching `other` (every watch this actor placed on it): its
    /// end is no longer reported. A remote node is told, reliably, to
    /// forget the watch. A `Terminated` already queued for this actor is
    /// still delivered.
    pub fn unwatch<N: Send + 'static>(&self, other: &ActorRef<N>) {
        other.remove_watcher(&self.sink);
    }

    /// Asks `target` (as [`ActorRef::ask`]) and delivers the outcome to
    /// this actor as a message of its own, made by `then` (Akka's
    /// `pipeTo`, Akka typed's `ctx.ask`): the handler returns at once, and
    /// the actor goes on with other messages while the ask waits. The
    /// outcome arrives once, whether a reply, a failure or the timeout;
    /// it waits for room in this actor's mailbox, and is a dead letter if
    /// the actor has stopped by then.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use actors::{Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx};
    /// struct Doubler;
    /// impl Actor for Doubler {
    ///     type Msg = (u64, ActorRef<u64>);
    ///     async fn handle(&mut self, (n, reply): (u64, ActorRef<u64>), _: &mut Ctx<Self>) -> ActorResult {
    ///         let _ = reply.tell(n * 2);
    ///         Ok(())
    ///     }
    /// }
    /// #[derive(Debug)]
    /// enum Msg { Start(ActorRef<(u64, ActorRef<u64>)>), Doubled(Result<u64, AskError>) }
    /// struct Client(tokio::sync::mpsc::UnboundedSender<u64>);
    /// impl Actor for Client {
    ///     type Msg = Msg;
    ///     async fn handle(&mut self, msg: Msg, ctx: &mut Ctx<Self>) -> ActorResult {
    ///         match msg {
    ///             Msg::Start(doubler) => {
    ///                 ctx.ask_then(&doubler, |r| (21, r), Duration::from_secs(1), Msg::Doubled)
    ///             }
    ///             Msg::Doubled(n) => { let _ = self.0.send(n?); }
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::local("doc").unwrap();
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// let client = system.spawn(Client(tx));
    /// client.tell(Msg::Start(system.spawn(Doubler))).unwrap();
    /// assert_eq!(rx.recv().await, Some(42));
    /// # }
    /// ```
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn ask_then<N, R>(
        &self,
        target: &ActorRef<N>,
        make: impl FnOnce(ActorRef<R>) -> N + Send + 'static,
        timeout: Duration,
        then: impl FnOnce(Result<R, AskError>) -> A::Msg + Send + 'static,
    ) where
        N: Send + 'static,
        R: Send + 'static,
    {
        let target = target.clone();
        let me = self.myself.clone();
        // A task of the runtime's own, so the handler need not hold the
        // ask; it ends with the ask.
        tokio::spawn(async move {
            let outcome = target.ask(make, timeout).await;
            let _ = me.send(then(outcome)).await;
        });
    }

    /// Spawns a child at `{this actor's path}/{name}`, supervised by this
    /// actor's [`Actor::supervisor_strategy`]: `factory` makes its first
    /// instance and each one after a restart. The child is reachable from
    /// other nodes by its path (`tcp://sys@host:port/user/parent/child`).
    /// When this actor stops or restarts, its children stop first (their
    /// `stopped` runs before this actor's); a restarted parent's new
    /// instance spawns them again in its `started` (Akka's default).
    ///
    /// # Errors
    /// An invalid name (or one that makes the path deeper than
    /// [`MAX_PATH_ELEMENTS`](crate::MAX_PATH_ELEMENTS) or longer than
    /// [`MAX_PATH_LEN`](crate::MAX_PATH_LEN)), a name
    /// taken by a live child, or a system shutting down.
    pub fn spawn_child<B, F>(
        &mut self,
        name: &str,
        factory: F,
    ) -> Result<ActorRef<B::Msg>, SpawnError>
    where
        B: Actor,
        B::Msg: RemoteMessage,
        F: Fn() -> B + Send + Sync + 'static,
    {
        let factory: Factory<B> = Arc::new(factory);
        let sup = Supervision {
            factory: Some(factory.clone()),
            strategy: self.strategy.clone(),
            parent: Some(self.parent_link.clone()),
            group: self
                .strategy
                .is_all_for_one()
                .then(|| self.group_restarts.clone()),
        };
        let elements = format!("{}/{name}", self.myself.path().elements());
        let (id, cell) = self.system.spawn_registered(
            name,
            &elements,
            || factory(),
            sup,
            &SpawnOptions::default(),
        )?;
        self.children.insert(
            id,
            Child {
                name: name.into(),
                control: cell.clone(),
            },
        );
        Ok(ActorRef::local(cell))
    }

    /// Whether this actor's timers survive its restarts (default: no,
    /// a restart cancels them, and no message of a cancelled timer reaches
    /// the new instance, not even one already queued). With `true`, the
    /// timers set go on firing into the new instance.
    pub fn keep_timers_on_restart(&mut self, keep: bool) {
        self.keep_timers = keep;
    }

    /// Sends `msg` to this actor once, after `delay` (Akka's
    /// `timers.startSingleTimer`, ractor's `send_after`). The message goes
    /// through the mailbox like any other, queued behind what arrived
    /// before it: when the delay is up if the actor is idle then, or else
    /// as soon as the message it is handling is done (its own task queues
    /// it). It is never refused for a full mailbox. Returns the key to
    /// [`cancel_timer`](Self::cancel_timer) it with.
    ///
    /// Timers die with the actor: none fires after it stops, and nothing is
    /// left running. There is no task or tokio timer per timer: the
    /// actor's own task keeps one ordered schedule and sleeps until its
    /// first deadline or a message. Costs: a map entry and a boxed closure
    /// (repeated) per timer; while any timer is set, one clock read per
    /// handled message and one `Sleep` per idle wait.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use actors::{Actor, ActorResult, Ctx};
    /// struct Session;
    /// enum Msg { Touch, Expire }
    /// impl Actor for Session {
    ///     type Msg = Msg;
    ///     async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
    ///         ctx.schedule_once(Duration::from_secs(30), Msg::Expire);
    ///         Ok(())
    ///     }
    ///     async fn handle(&mut self, msg: Msg, ctx: &mut Ctx<Self>) -> ActorResult {
    ///         if let Msg::Expire = msg {
    ///             ctx.stop();
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn schedule_once(&mut self, delay: Duration, msg: A::Msg) -> TimerKey {
        self.timers.once(tokio::time::Instant::now(), delay, msg)
    }

    /// Sends `make()` to this actor every `interval`, the first time one
    /// interval from now, until cancelled or the actor stops (Akka's
    /// `startTimerAtFixedRate`, ractor's `send_interval`).
    ///
    /// The message is made by a closure rather than cloned, so that any
    /// message type works, including ones that are not `Clone` (holding a
    /// one-shot sender, say); for a `Clone` message write
    /// `move || msg.clone()`.
    ///
    /// Ticks keep to the schedule (`start + n * interval`) while the actor
    /// keeps up; an actor busy for longer than an interval gets one message
    /// for the missed ticks, and the next one an interval later (no
    /// catch-up burst). While a tick's message waits in the mailbox, later
    /// ticks are skipped, so an actor slower than its timer holds at most
    /// one of its messages. A zero interval is taken as 1 ms. Costs: as
    /// [`schedule_once`](Self::schedule_once).
    pub fn schedule_repeatedly(
        &mut self,
        interval: Duration,
        make: impl FnMut() -> A::Msg + Send + 'static,
    ) -> TimerKey {
        self.timers
            .repeat(tokio::time::Instant::now(), interval, Box::new(make))
    }

    /// Cancels a timer of this actor; false if it was not set (a one-shot
    /// timer whose message was handled, or one cancelled already). No
    /// message of a cancelled timer is handled afterwards, not even one
    /// already in the mailbox.
    pub fn cancel_timer(&mut self, key: TimerKey) -> bool {
        self.timers.cancel(key)
    }
}
