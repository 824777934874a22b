//! The [`Actor`] trait, the context handed to its hooks, and how an actor
//! runs: spawning onto the system and the task that handles its mailbox.

use std::{
    any::Any,
    collections::{HashMap, VecDeque},
    fmt,
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
    time::Duration,
};

use crate::{
    actor_ref::ActorRef,
    budget::Charge,
    cell::Cell,
    config::SpawnOptions,
    dead_letter::DeadLetterReason,
    error::{AskError, SpawnError},
    lifecycle::{StopReason, Terminated},
    mailbox::{
        Mailbox, Queued, STOP_RECORD, SystemMsg, next_record, next_record_ext, stop_in_batch,
    },
    path::{MAX_PATH_ELEMENTS, MAX_PATH_LEN, valid_name},
    registry::Target,
    reply::{self, NoReply},
    serialization::{RemoteMessage, decoders, manifests, with_decode_scope},
    supervision::{
        ChildControl, ChildEvent, Panicked, Parent, Restarts, SupervisorStrategy, Verdict,
        is_failure,
    },
    system::{ActorSystem, Stoppable},
    timer::{TimerKey, Timers},
    trace::TraceContext,
    watch::{WatchSink, Watchers},
};

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
    /// [`MAX_PATH_ELEMENTS`] or longer than [`MAX_PATH_LEN`]), a name
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

/// Queues the message of every timer due now into the actor's own
/// mailbox, behind what already arrived.
fn fire_due<M: Send + 'static>(timers: &mut Timers<M>, cell: &Cell<M>) {
    let now = tokio::time::Instant::now();
    while let Some((key, msg)) = timers.poll_due(now) {
        // The mailbox closes only after the actor's task ends, so this
        // push, from that task, is never refused; if it were, dropping the
        // message is right: the actor is gone.
        let _ = cell
            .mailbox
            .push_unbounded(Queued::Timer(Box::new((key, msg))));
    }
}

impl<M: Send + 'static> Stoppable for Cell<M> {
    fn stop(&self) {
        self.mailbox.push_system(SystemMsg::Stop);
    }

    fn stop_after_queued(&self) {
        // Refused only by a closed mailbox: the actor has stopped already.
        let _ = self.mailbox.push_unbounded(Queued::Stop);
    }
}

/// Makes fresh instances of a supervised actor.
pub(crate) type Factory<A> = Arc<dyn Fn() -> A + Send + Sync>;

/// How an actor is supervised: what makes a new instance (none for an
/// actor spawned as a value: it cannot be restarted), its supervisor's
/// strategy, and its parent (none at the top level) with its id there.
pub(crate) struct Supervision<A> {
    pub(crate) factory: Option<Factory<A>>,
    pub(crate) strategy: SupervisorStrategy,
    pub(crate) parent: Option<Arc<dyn Parent>>,
    /// Under an all-for-one parent: the restart window it shares with its
    /// siblings (see `Ctx::group_restarts`); otherwise its own counts.
    pub(crate) group: Option<Arc<Mutex<Restarts>>>,
}

impl<A> Supervision<A> {
    /// An actor spawned as a value at the top level: a failure stops it.
    fn unsupervised() -> Self {
        Self {
            factory: None,
            strategy: SupervisorStrategy::stop(),
            parent: None,
            group: None,
        }
    }
}

/// A registered actor just spawned: its spawn id and cell.
type Spawned<M> = (u64, Arc<Cell<M>>);

/// Spawning (the actor's task is `run_actor`).
impl ActorSystem {
    /// Spawns an anonymous actor (`/user/$N`). It becomes reachable from
    /// other nodes once a ref to it is sent to one. It cannot be restarted
    /// (there is nothing to make a new one from): a failure stops it. See
    /// [`spawn_supervised`](Self::spawn_supervised) for one that can.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn spawn<A: Actor>(&self, actor: A) -> ActorRef<A::Msg> {
        self.spawn_with(actor, &SpawnOptions::default())
    }

    /// [`spawn`](Self::spawn) with settings of its own (its mailbox's
    /// bounds); what `options` leaves unset follows the system's config.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn spawn_with<A: Actor>(&self, actor: A, options: &SpawnOptions) -> ActorRef<A::Msg> {
        let id = self.registry().next_id();
        ActorRef::local(self.spawn_at(id, &format!("/user/${id}"), actor, options))
    }

    /// Spawns an actor at `/user/{name}`, reachable from other nodes by
    /// that path (see [`resolve`](Self::resolve)). A failure stops it.
    ///
    /// # Errors
    /// An invalid or taken name, or a system shutting down.
    pub fn spawn_named<A>(&self, name: &str, actor: A) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        self.spawn_named_with(name, actor, &SpawnOptions::default())
    }

    /// [`spawn_named`](Self::spawn_named) with settings of its own (its
    /// mailbox's bounds); what `options` leaves unset follows the system's
    /// config.
    ///
    /// # Errors
    /// As `spawn_named`.
    pub fn spawn_named_with<A>(
        &self,
        name: &str,
        actor: A,
        options: &SpawnOptions,
    ) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        let elements = format!("/user/{name}");
        let (_, cell) = self.spawn_registered(
            name,
            &elements,
            || actor,
            Supervision::unsupervised(),
            options,
        )?;
        Ok(ActorRef::local(cell))
    }

    /// Spawns a supervised actor at `/user/{name}`: `factory` makes its
    /// first instance, and a new one each time `strategy` restarts it
    /// after a failure (Erlang's child spec, Akka typed's
    /// `Behaviors.supervise(..).onFailure(..)`). A restart happens in
    /// place: the path, the mailbox and every ref to the actor, local or
    /// on other nodes, stay valid; the message whose handling failed is
    /// not handled again (it is counted as a dead letter, "handler
    /// failed"), and the messages behind it go to the new instance.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use actors::{Actor, ActorResult, ActorSystem, Ctx, SupervisorStrategy};
    /// #[derive(Default)]
    /// struct Parser { parsed: u64 }
    /// impl Actor for Parser {
    ///     type Msg = String;
    ///     async fn handle(&mut self, line: String, _: &mut Ctx<Self>) -> ActorResult {
    ///         let _n: u64 = line.parse()?; // a bad line fails the actor: it restarts
    ///         self.parsed += 1;
    ///         Ok(())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::local("doc").unwrap();
    /// let parser = system
    ///     .spawn_supervised(
    ///         "parser",
    ///         Parser::default,
    ///         SupervisorStrategy::restart().with_limit(5, Duration::from_secs(10)),
    ///     )
    ///     .unwrap();
    /// parser.tell("x".to_owned()).unwrap(); // fails; the actor restarts
    /// parser.tell("7".to_owned()).unwrap(); // handled by the new instance
    /// # system.shutdown().await;
    /// # }
    /// ```
    ///
    /// # Errors
    /// An invalid or taken name, or a system shutting down.
    pub fn spawn_supervised<A, F>(
        &self,
        name: &str,
        factory: F,
        strategy: SupervisorStrategy,
    ) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
        F: Fn() -> A + Send + Sync + 'static,
    {
        let factory: Factory<A> = Arc::new(factory);
        let sup = Supervision {
            factory: Some(factory.clone()),
            strategy,
            parent: None,
            group: None,
        };
        let elements = format!("/user/{name}");
        let (_, cell) =
            self.spawn_registered(name, &elements, || factory(), sup, &SpawnOptions::default())?;
        Ok(ActorRef::local(cell))
    }

    /// Spawns a registered actor at `elements` (whose last element is
    /// `name`), its first instance from `make`.
    fn spawn_registered<A>(
        &self,
        name: &str,
        elements: &str,
        make: impl FnOnce() -> A,
        sup: Supervision<A>,
        options: &SpawnOptions,
    ) -> Result<Spawned<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        if !valid_name(name)
            || elements.matches('/').count() > MAX_PATH_ELEMENTS
            || self.registry().path(elements).to_string().len() > MAX_PATH_LEN
        {
            return Err(SpawnError::InvalidName(name.to_owned()));
        }
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(SpawnError::ShuttingDown);
        }
        let manifest = <A::Msg as RemoteMessage>::MANIFEST;
        manifests::register::<A::Msg>().map_err(|c| match c {
            manifests::Conflict::Id { id, registered } => SpawnError::ManifestCollision {
                manifest,
                id,
                registered,
            },
            manifests::Conflict::SameName {
                registered_type,
                this_type,
            } => SpawnError::ManifestShared {
                manifest,
                registered_type,
                this_type,
            },
        })?;
        // User code (a factory) runs before the registry lock is taken.
        let actor = make();
        let mut targets = self.registry().targets();
        if targets.contains_key(elements) {
            return Err(SpawnError::NameTaken(name.to_owned()));
        }
        // Reserve the name under the lock, then spawn.
        let id = self.registry().next_id();
        let cell = self.make_cell::<A::Msg>(elements, options);
        cell.registered.store(true, Ordering::Release);
        let _ = cell.decode.set(decoders::<A::Msg>());
        let target: Arc<dyn Target> = cell.clone();
        targets.insert(elements.into(), target);
        drop(targets);
        self.start(id, cell.clone(), actor, sup);
        Ok((id, cell))
    }

    fn make_cell<M: Send + 'static>(&self, elements: &str, options: &SpawnOptions) -> Arc<Cell<M>> {
        let (capacity, bytes) = options.mailbox(&self.inner.config);
        Arc::new(Cell {
            mailbox: Mailbox::new(capacity, bytes),
            path: self.registry().path(elements),
            watchers: Watchers::default(),
            registry: Arc::downgrade(self.registry()),
            decode: OnceLock::new(),
            registered: AtomicBool::new(false),
        })
    }

    /// Spawns an anonymous actor (`/user/$N`) that `strategy` restarts in
    /// place from `factory` after a failure, its restarts counted in the
    /// window `group` shares with others (a pool's routees).
    pub(crate) fn spawn_restarting<A: Actor>(
        &self,
        factory: Factory<A>,
        strategy: SupervisorStrategy,
        group: Arc<Mutex<Restarts>>,
    ) -> ActorRef<A::Msg> {
        let id = self.registry().next_id();
        let cell = self.make_cell::<A::Msg>(&format!("/user/${id}"), &SpawnOptions::default());
        let first = factory();
        let sup = Supervision {
            factory: Some(factory),
            strategy,
            parent: None,
            group: Some(group),
        };
        self.start(id, cell.clone(), first, sup);
        ActorRef::local(cell)
    }

    fn spawn_at<A: Actor>(
        &self,
        id: u64,
        elements: &str,
        actor: A,
        options: &SpawnOptions,
    ) -> Arc<Cell<A::Msg>> {
        let cell = self.make_cell::<A::Msg>(elements, options);
        self.start(id, cell.clone(), actor, Supervision::unsupervised());
        cell
    }

    fn start<A: Actor>(&self, id: u64, cell: Arc<Cell<A::Msg>>, actor: A, sup: Supervision<A>) {
        let stoppable: Arc<dyn Stoppable> = cell.clone();
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, stoppable);
        if self.inner.shutting_down.load(Ordering::Acquire) {
            cell.mailbox.push_system(SystemMsg::Stop);
        }
        let parent = sup.parent.clone();
        let sys = self.clone();
        let run_cell = cell.clone();
        let handle = tokio::spawn(run_actor(actor, sup, id, run_cell, sys));
        let sys = self.inner.clone();
        let registry = self.registry().clone();
        self.inner.tasks.spawn(async move {
            let (reason, escalate) = match handle.await {
                Ok(ended) => ended,
                // A panic outside the hooks (a message's `Deserialize`).
                Err(e) if e.is_panic() => {
                    let msg = panic_message(&*e.into_panic());
                    tracing::error!(actor = %cell.path, panic = %msg, "actor panicked; stopped");
                    (StopReason::Panicked(msg), false)
                }
                Err(_) => (StopReason::SystemShutdown, false),
            };
            // Asks still queued fail at once: the actor is gone.
            let mut held = reply::Deferred::new();
            let left = reply::collect(&mut held, || cell.mailbox.close()) as u64;
            reply::resolve(&mut held, &NoReply::stopped(&reason));
            registry.dead_letters_n(
                left,
                std::any::type_name::<A::Msg>(),
                &cell.path,
                &DeadLetterReason::LeftInMailbox,
            );
            if cell.registered.load(Ordering::Acquire) {
                registry.unregister(cell.path.elements());
            }
            sys.live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            cell.watchers.terminate(&cell.path, reason.clone());
            // Last: when the parent hears of it, the name is free again.
            if let Some(parent) = parent {
                parent.child_event(ChildEvent::Terminated {
                    id,
                    reason,
                    escalate,
                });
            }
        });
    }
}

/// The text of a panic's payload.
#[cold]
fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Runs a hook's future, catching a panic in any of its polls, so that a
/// panic is a failure supervision sees rather than the end of the task.
/// A panic leaves the actor's state unknown: the instance is dropped
/// without `stopped` (see `run_actor`).
///
/// Reply refs dropped unanswered in its polls are held in `held` (see
/// `reply`): the actor's task fails those asks with why, once it knows.
async fn guarded<F: Future>(fut: F, held: &mut reply::Deferred) -> Result<F::Output, String> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        // A poll is a scope in which remote sends may be gathered
        // (`poll_scope`); the catch keeps a panic inside it.
        let polled = crate::poll_scope::poll(|| {
            reply::collect(held, || {
                std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)))
            })
        });
        match polled {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(panic_message(&*p))),
        }
    })
    .await
}

/// How one instance's run ended.
enum Outcome {
    /// A stop was asked for (or the mailbox closed).
    Stop(StopReason),
    /// A hook failed (`Failed`) or panicked (`Panicked`); `error` is what
    /// the supervisor's decider sees.
    Fail {
        reason: StopReason,
        panicked: bool,
        error: ActorError,
    },
    /// All-for-one: its supervisor restarts it because a sibling failed.
    SiblingFailed,
}

/// A hook's result as an outcome, if it failed.
#[cold]
#[inline(never)]
fn failure(r: Result<ActorError, String>) -> Outcome {
    match r {
        Ok(e) => Outcome::Fail {
            reason: StopReason::Failed(e.to_string()),
            panicked: false,
            error: e,
        },
        Err(p) => Outcome::Fail {
            reason: StopReason::Panicked(p.clone()),
            panicked: true,
            error: Box::new(Panicked { message: p }),
        },
    }
}

/// Counts the message whose handling failed as a dead letter (it is not
/// retried).
#[cold]
#[inline(never)]
fn handler_failed(
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    type_name: &str,
) {
    registry.dead_letter(type_name, path, &DeadLetterReason::HandlerFailed);
}

/// A remote message that did not decode: a dead letter that says why.
#[cold]
#[inline(never)]
fn undecodable<M>(
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    e: &crate::error::SerializationError,
) {
    registry.dead_letter(
        std::any::type_name::<M>(),
        path,
        &DeadLetterReason::Undecodable(e.to_string().into()),
    );
}

/// Drops the messages an actor that stopped never handled, and says how
/// many there were, for one dead-letter count.
///
/// A remote batch is decoded first, message by message, each dropped at
/// once: a remote ask's reply ref travels inside its request, so
/// decoding is the only way to find it, and dropping it (inside the
/// caller's `reply::collect`) sends the asker's node the failure at once
/// (`SysWire::NoReply`) instead of leaving the asker to its timeout.
/// What does not decode is not a second dead letter; a panicking
/// `Deserialize` ends the decoding (the asks after it wait for their
/// timeout) but not the count.
#[cold]
#[inline(never)]
fn drop_unhandled<M: Send + 'static>(
    user: &mut VecDeque<Queued<M>>,
    decoders: Option<&crate::serialization::Decoders<M>>,
    scope: Option<&Arc<dyn Any + Send + Sync>>,
) -> u64 {
    let mut left = 0;
    for queued in user.drain(..) {
        left += queued.count() as u64;
        let (Queued::Batch(bytes, _, _charge), Some(decoders)) = (queued, decoders) else {
            continue;
        };
        let decode_all = || {
            let mut pos = 0;
            loop {
                while let Some((range, ext)) = next_record_ext(&bytes, &mut pos) {
                    if ext {
                        drop((decoders.ext)(&bytes[range]));
                    } else {
                        drop((decoders.plain)(&bytes[range]));
                    }
                }
                // A graceful stop's marker: the records after it too.
                if bytes.get(pos..pos + 4) != Some(&STOP_RECORD.to_le_bytes()[..]) {
                    return;
                }
                pos += 4;
            }
        };
        let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| match scope {
            Some(scope) => with_decode_scope(scope, &bytes, decode_all),
            None => decode_all(),
        }));
        if let Err(p) = decoded {
            tracing::warn!(panic = %panic_message(&*p), "a message's Deserialize panicked while the asks queued for a stopped actor were failed");
        }
    }
    left
}

/// Decodes the rest of a remote batch from `pos`, where a record with an
/// extension block (another serializer, a trace context) stopped the
/// plain loop: out of line, so that a batch of plain records costs one
/// comparison more than before blocks existed.
#[cold]
#[inline(never)]
fn decode_ext_records<M: Send + 'static>(
    bytes: &[u8],
    mut pos: usize,
    decoders: &crate::serialization::Decoders<M>,
    traced: &mut VecDeque<(M, Option<TraceContext>)>,
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    mut spent: usize,
) -> Slice {
    let mut records = 0;
    while let Some((range, ext)) = next_record_ext(bytes, &mut pos) {
        spent += decoded_cost::<M>(range.len());
        records += 1;
        let one = if ext {
            (decoders.ext)(&bytes[range])
        } else {
            (decoders.plain)(&bytes[range])
                .map(|m| (m, None))
                .map_err(decoders.why)
        };
        match one {
            Ok(m) => traced.push_back(m),
            Err(e) => undecodable::<M>(registry, path, &e),
        }
        if spent >= DECODE_SLICE_BYTES {
            return Slice {
                end: pos,
                records,
                cut: true,
            };
        }
    }
    Slice {
        end: pos,
        records,
        cut: false,
    }
}

/// The most the decoded messages of one slice of a batch may hold at
/// once, estimated by [`decoded_cost`]: 256 KiB. A batch is one read's
/// records for an actor (up to megabytes), and a record can be tiny (a
/// 6-byte run record decodes to a 40-byte value and its queue slot), so
/// decoding a batch whole once held several times its size; decoded in
/// slices, it holds at most this much more than its wire bytes.
pub(crate) const DECODE_SLICE_BYTES: usize = 256 * 1024;

/// What decoding a record of `len` bytes into an `M` is charged against
/// [`DECODE_SLICE_BYTES`]: the value's size (at least a pointer's, for
/// its queue slot) and its bytes again, for what it may own on the heap.
#[inline(always)]
fn decoded_cost<M>(len: usize) -> usize {
    std::mem::size_of::<M>().max(8) + len
}

/// How far one slice of a batch was decoded.
struct Slice {
    /// Where decoding stopped.
    end: usize,
    /// Records decoded (or found undecodable).
    records: usize,
    /// Stopped at [`DECODE_SLICE_BYTES`], not at the end or a stop.
    cut: bool,
}

/// After a message from `Runner::traced` was handled in its trace
/// context: what the plain path does after `handle`, out of line.
#[cold]
#[inline(never)]
fn after_traced<A: Actor>(
    result: ActorResult,
    registry: &crate::registry::Registry,
    cell: &Cell<A::Msg>,
    ctx: &mut Ctx<A>,
    sys: &mut VecDeque<SystemMsg>,
    handling: &mut bool,
) -> Option<Outcome> {
    if let Err(e) = result {
        handler_failed(registry, &cell.path, std::any::type_name::<A::Msg>());
        return Some(failure(Ok(e)));
    }
    reply::resolve_open(&NoReply::Dropped);
    if ctx.stop {
        return Some(Outcome::Stop(StopReason::Stopped));
    }
    if !ctx.timers.is_empty() {
        // A repeated timer's closure is user code.
        *handling = false;
        fire_due(&mut ctx.timers, cell);
        *handling = true;
    }
    if cell.mailbox.system_pending() {
        cell.mailbox.take_system(sys);
    }
    None
}

/// A child of an actor, as its parent's `Ctx` holds it.
pub(crate) struct Child {
    name: Arc<str>,
    control: Arc<dyn ChildControl>,
}

/// An actor's task state that outlives an instance: its cell, its
/// context and what it took from its mailbox but has not handled yet
/// (handled by the next instance after a restart).
struct Runner<A: Actor> {
    cell: Arc<Cell<A::Msg>>,
    registry: Arc<crate::registry::Registry>,
    /// What decodes of this actor's remote messages resolve refs against
    /// (the scope is per batch; this is its one lookup).
    scope: Option<Arc<dyn Any + Send + Sync>>,
    ctx: Ctx<A>,
    user: VecDeque<Queued<A::Msg>>,
    sys: VecDeque<SystemMsg>,
    /// The messages of the remote batch being worked through, decoded
    /// together (one decode context per batch, no await in between).
    decoded: VecDeque<A::Msg>,
    /// The rest of a remote batch from its first record with an extension
    /// block on, each message with the trace context it carried: handled
    /// after `decoded` (the batch's plain records before it), so a batch
    /// of plain records never looks here but once, when `decoded` is
    /// empty.
    traced: VecDeque<(A::Msg, Option<TraceContext>)>,
    /// The charge of the last remote batch taken whole (`budget::Charge`):
    /// held while its decoded messages wait in `decoded` and `traced`, and
    /// given back when the next batch is taken or nothing is left, so that
    /// what a peer's bytes became stays charged to its connection until
    /// the actor has handled it.
    held: Charge,
    /// Counts this actor alive until the task ends (or is dropped), and
    /// its mailbox depth and handling time when a recorder is installed.
    meter: crate::telemetry::ActorMeter,
    /// A message's `handle` is running (a panic then makes it a dead
    /// letter, as an error does).
    handling: bool,
}

impl<A: Actor> Runner<A> {
    /// Runs one instance: `started`, then batches of messages until it
    /// stops or fails.
    async fn instance(&mut self, actor: &mut A) -> Outcome {
        let Self {
            cell,
            registry,
            scope,
            ctx,
            user,
            sys,
            decoded,
            traced,
            held,
            meter,
            handling,
        } = self;
        // Hooks are awaited directly: a panic in one unwinds out of this
        // instance, and `run_actor` catches it once per instance (a
        // wrapper per message cost ~60 instructions per message).
        //
        // `handling` is kept true through a run of messages and cleared
        // only around the other user code of the loop (`terminated`,
        // decoding, timers' closures) and between batches, so that a
        // message costs no store of it (two per message cost 0.6 % of
        // the receiving thread under callgrind).
        *handling = false;
        if let Err(e) = actor.started(ctx).await {
            return failure(Ok(e));
        }
        loop {
            if ctx.stop {
                return Outcome::Stop(StopReason::Stopped);
            }
            if !ctx.timers.is_empty() {
                fire_due(&mut ctx.timers, cell);
            }
            // What a failed instance left unhandled goes first (and
            // `recv_all` swaps into an empty `user` only).
            if user.is_empty() && decoded.is_empty() && traced.is_empty() && sys.is_empty() {
                // Before waiting: reply refs dropped outside a handler
                // (a hook, a timer) fail now, not at the next message.
                reply::resolve_open(&NoReply::Dropped);
                // Without timers waiting, the actor waits on its mailbox alone.
                let received = match ctx.timers.next_deadline() {
                    None => cell.mailbox.recv_all(user, sys).await,
                    Some(deadline) => {
                        tokio::select! {
                            biased;
                            received = cell.mailbox.recv_all(user, sys) => received,
                            // Queued at the top of the next round.
                            () = tokio::time::sleep_until(deadline) => continue,
                        }
                    }
                };
                if !received {
                    return Outcome::Stop(StopReason::Stopped);
                }
                if meter.enabled() {
                    meter.taken(user.iter().map(Queued::count).sum());
                }
            }
            *handling = true;
            loop {
                while let Some(s) = sys.pop_front() {
                    match s {
                        SystemMsg::Stop => return Outcome::Stop(StopReason::Stopped),
                        SystemMsg::Terminated(t) => {
                            *handling = false;
                            if let Err(e) = actor.terminated(t, ctx).await {
                                return failure(Ok(e));
                            }
                            *handling = true;
                        }
                        SystemMsg::Child(event) => {
                            if let Some(outcome) = on_child(ctx, event) {
                                return outcome;
                            }
                        }
                        SystemMsg::Restart => return Outcome::SiblingFailed,
                    }
                    if ctx.stop {
                        return Outcome::Stop(StopReason::Stopped);
                    }
                }
                let msg = if let Some(m) = decoded.pop_front() {
                    m
                } else if let Some((m, trace)) = traced.pop_front() {
                    match trace {
                        None => m,
                        // Handled in its context, so that what the handler
                        // sends carries it on.
                        Some(t) => {
                            // `handling` is already set for this run.
                            let started = meter.start();
                            let result = t.scope(actor.handle(m, ctx)).await;
                            meter.handled(started);
                            if let Some(outcome) =
                                after_traced(result, registry, cell, ctx, sys, handling)
                            {
                                return outcome;
                            }
                            continue;
                        }
                    }
                } else {
                    match user.pop_front() {
                        None => {
                            *handling = false;
                            // Every message of the last batch is handled.
                            *held = Charge::default();
                            break;
                        }
                        Some(Queued::Local(m)) => m,
                        Some(Queued::Timer(timer)) => {
                            let (key, m) = *timer;
                            if !ctx.timers.take_delivered(key) {
                                // Cancelled after it was queued.
                                continue;
                            }
                            m
                        }
                        Some(Queued::Stop) => return Outcome::Stop(StopReason::Stopped),
                        Some(Queued::Batch(bytes, n, charge)) => {
                            let decoders = cell.decode.get().expect(
                                "remote messages reach only registered actors, which have a decoder",
                            );
                            let mut decode_slice = || {
                                let mut pos = 0;
                                let mut spent = 0;
                                let mut records = 0;
                                // Stops at the end, or at the first record
                                // with an extension block (`next_record`),
                                // or once the slice is spent.
                                while let Some(range) = next_record(&bytes, &mut pos) {
                                    spent += decoded_cost::<A::Msg>(range.len());
                                    records += 1;
                                    match (decoders.plain)(&bytes[range]) {
                                        Ok(m) => decoded.push_back(m),
                                        Err(e) => undecodable::<A::Msg>(
                                            registry,
                                            &cell.path,
                                            &(decoders.why)(e),
                                        ),
                                    }
                                    if spent >= DECODE_SLICE_BYTES {
                                        return Slice {
                                            end: pos,
                                            records,
                                            cut: true,
                                        };
                                    }
                                }
                                if pos < bytes.len() {
                                    // Records with extension blocks from
                                    // here on, up to a graceful stop if
                                    // one follows (`next_record_ext`).
                                    let mut s = decode_ext_records(
                                        &bytes, pos, decoders, traced, registry, &cell.path, spent,
                                    );
                                    s.records += records;
                                    return s;
                                }
                                Slice {
                                    end: pos,
                                    records,
                                    cut: false,
                                }
                            };
                            // A message's `Deserialize` is user code too.
                            *handling = false;
                            let slice = match &*scope {
                                Some(scope) => with_decode_scope(scope, &bytes, decode_slice),
                                None => decode_slice(),
                            };
                            *handling = true;
                            if slice.cut && slice.end < bytes.len() {
                                // The rest waits, undecoded, until this
                                // slice is handled, and keeps the charge.
                                user.push_front(Queued::Batch(
                                    bytes.slice(slice.end..),
                                    n.saturating_sub(slice.records as u32),
                                    charge,
                                ));
                            } else {
                                // Held until this slice is handled (the
                                // last batch's goes now).
                                *held = charge;
                                if !slice.cut && slice.end < bytes.len() {
                                    // A graceful stop from another node:
                                    // after the messages decoded before it.
                                    stop_in_batch(user, &bytes, slice.end);
                                }
                            }
                            continue;
                        }
                    }
                };
                let started = meter.start();
                let result = actor.handle(msg, ctx).await;
                meter.handled(started);
                if let Err(e) = result {
                    // Not retried: counted and logged once.
                    handler_failed(registry, &cell.path, std::any::type_name::<A::Msg>());
                    return failure(Ok(e));
                }
                // Reply refs the handler dropped unanswered.
                reply::resolve_open(&NoReply::Dropped);
                if ctx.stop {
                    return Outcome::Stop(StopReason::Stopped);
                }
                if !ctx.timers.is_empty() {
                    // A repeated timer's closure is user code.
                    *handling = false;
                    fire_due(&mut ctx.timers, cell);
                    *handling = true;
                }
                if cell.mailbox.system_pending() {
                    cell.mailbox.take_system(sys);
                }
            }
        }
    }

    /// Stops every child and waits until each has ended (its `stopped`
    /// ran and its name is free). Returns whether a stop of this actor
    /// arrived meanwhile; watch notices that arrived are kept for later.
    async fn stop_children(&mut self) -> bool {
        if self.ctx.children.is_empty() {
            return false;
        }
        for child in self.ctx.children.values() {
            child.control.stop();
        }
        let mut stop = false;
        let mut keep = VecDeque::new();
        let mut got = std::mem::take(&mut self.sys);
        loop {
            for s in got.drain(..) {
                match s {
                    SystemMsg::Child(ChildEvent::Terminated { id, .. }) => {
                        self.ctx.children.remove(&id);
                    }
                    SystemMsg::Child(ChildEvent::Restarted { .. }) | SystemMsg::Restart => {}
                    SystemMsg::Stop => stop = true,
                    t @ SystemMsg::Terminated(_) => keep.push_back(t),
                }
            }
            if self.ctx.children.is_empty() || !self.cell.mailbox.recv_system(&mut got).await {
                break;
            }
        }
        self.sys = keep;
        stop
    }

    /// Waits `delay` before a restart, or until a stop (then true).
    /// Messages stay in the mailbox, counted against its capacity.
    async fn backoff(&mut self, delay: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + delay;
        let mut got = VecDeque::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return false,
                open = self.cell.mailbox.recv_system(&mut got) => {
                    if !open {
                        return true;
                    }
                    for s in got.drain(..) {
                        match s {
                            SystemMsg::Stop => return true,
                            SystemMsg::Restart => {}
                            other => self.sys.push_back(other),
                        }
                    }
                }
            }
        }
    }
}

/// A parent hears from a child: under all-for-one, a restart restarts
/// the siblings and a failure that stopped the child stops them; an
/// escalated failure fails the parent.
fn on_child<A: Actor>(ctx: &mut Ctx<A>, event: ChildEvent) -> Option<Outcome> {
    match event {
        ChildEvent::Restarted { id } => {
            if ctx.strategy.is_all_for_one() {
                for (_, c) in ctx.children.iter().filter(|(c, _)| **c != id) {
                    c.control.restart();
                }
            }
            None
        }
        ChildEvent::Terminated {
            id,
            reason,
            escalate,
        } => {
            // Unknown: a child of an instance that was restarted since.
            let child = ctx.children.remove(&id)?;
            if escalate {
                let why = format!("child {} escalated: {reason}", child.name);
                return Some(failure(Ok(why.into())));
            }
            if ctx.strategy.is_all_for_one() && is_failure(&reason) {
                for c in ctx.children.values() {
                    c.control.stop();
                }
            }
            None
        }
    }
}

/// An actor's task: instances of the actor, each `started` and then fed
/// batches of messages, until one stops or its supervision stops it.
/// Returns why it stopped and whether its failure goes to its parent.
async fn run_actor<A: Actor>(
    first: A,
    sup: Supervision<A>,
    id: u64,
    cell: Arc<Cell<A::Msg>>,
    system: ActorSystem,
) -> (StopReason, bool) {
    let sys_inner = system.inner.clone();
    let registry = system.registry().clone();
    let scope = registry.decode_scope();
    let meter = registry.meters().actor(std::any::type_name::<A>());
    let parent_link: Arc<dyn Parent> = cell.clone();
    let mut run = Runner {
        ctx: Ctx {
            myself: ActorRef::local(cell.clone()),
            system,
            stop: false,
            sink: WatchSink::Actor(cell.clone()),
            timers: Timers::default(),
            strategy: SupervisorStrategy::default(),
            children: HashMap::new(),
            parent_link,
            keep_timers: false,
            group_restarts: Arc::default(),
        },
        cell,
        registry,
        scope,
        user: VecDeque::new(),
        sys: VecDeque::new(),
        decoded: VecDeque::new(),
        traced: VecDeque::new(),
        held: Charge::default(),
        meter,
        handling: false,
    };
    let path = run.cell.path.clone();
    let mut restarts = Restarts::default();
    let mut held = reply::Deferred::new();
    let mut actor = first;
    let (reason, escalate, last) = loop {
        run.ctx.strategy = actor.supervisor_strategy();
        // A new instance is a new supervisor: its children's window
        // starts empty (the old instance's children stopped with it).
        run.ctx.group_restarts = Arc::default();
        let outcome = match guarded(run.instance(&mut actor), &mut held).await {
            Ok(outcome) => outcome,
            Err(p) => {
                if std::mem::take(&mut run.handling) {
                    handler_failed(
                        &run.registry,
                        &run.cell.path,
                        std::any::type_name::<A::Msg>(),
                    );
                }
                failure(Err(p))
            }
        };
        // Asks whose reply refs the instance dropped on its way out: the
        // message it failed on, or what a stop dropped.
        if !held.is_empty() {
            let why = match &outcome {
                Outcome::Fail { reason, .. } => NoReply::HandlerFailed(reason.to_string()),
                Outcome::Stop(reason) if sys_inner.shutting_down.load(Ordering::Acquire) => {
                    NoReply::stopped(&StopReason::SystemShutdown)
                }
                Outcome::Stop(reason) => NoReply::stopped(reason),
                Outcome::SiblingFailed => NoReply::Dropped,
            };
            reply::resolve(&mut held, &why);
        }
        let (failed, panicked, own) = match outcome {
            Outcome::Stop(reason) => break (reason, false, Some(actor)),
            Outcome::Fail {
                reason,
                panicked,
                error,
            } => (reason, panicked, Some(error)),
            Outcome::SiblingFailed => (
                StopReason::Failed("a sibling failed (all-for-one)".to_owned()),
                false,
                None,
            ),
        };
        // A panicked instance's state is unknown: dropped, no `stopped`.
        // Reply refs it kept fail their asks, as the handler failed.
        let old = if panicked {
            reply::dropping(actor, &NoReply::HandlerFailed(failed.to_string()));
            None
        } else {
            Some(actor)
        };
        let verdict = match (&sup.factory, &own) {
            (None, _) => Verdict::Stop,
            (Some(_), None) => Verdict::Restart(Duration::ZERO),
            (Some(_), Some(error)) => {
                let directive = sup.strategy.directive_for(error);
                let now = tokio::time::Instant::now();
                match &sup.group {
                    // All-for-one: counted once against the window the
                    // siblings share; their own restarts (`SiblingFailed`
                    // above) are part of this one and not counted again.
                    Some(group) => group.lock().unwrap_or_else(PoisonError::into_inner).decide(
                        &sup.strategy,
                        directive,
                        now,
                    ),
                    None => restarts.decide(&sup.strategy, directive, now),
                }
            }
        };
        let delay = match verdict {
            Verdict::Restart(delay) => delay,
            Verdict::Stop | Verdict::Escalate => {
                tracing::error!(actor = %path, reason = %failed, "actor failed; stopped");
                break (
                    failed,
                    verdict == Verdict::Escalate && sup.parent.is_some(),
                    old,
                );
            }
            Verdict::LimitExceeded(n) => {
                let why = format!(
                    "{n} restarts within {:?}, then {failed}",
                    sup.strategy.within()
                );
                tracing::error!(actor = %path, reason = %why, "actor failed past its restart limit; stopped");
                break (StopReason::RestartLimitExceeded(why), false, old);
            }
        };
        tracing::warn!(actor = %path, reason = %failed, ?delay, "actor failed; restarting");
        let mut stop = run.stop_children().await;
        if let Some(mut old) = old {
            if let Err(p) = guarded(old.stopped(&failed), &mut held).await {
                tracing::error!(actor = %path, panic = %p, "`stopped` panicked");
            }
            // Reply refs the failed instance kept fail their asks.
            reply::collect(&mut held, || drop(old));
        }
        reply::resolve(&mut held, &NoReply::HandlerFailed(failed.to_string()));
        if !run.ctx.keep_timers {
            run.ctx.timers.clear();
        }
        run.ctx.stop = false;
        if !stop && !delay.is_zero() {
            stop = run.backoff(delay).await;
        }
        if stop {
            break (StopReason::Stopped, false, None);
        }
        let factory = sup
            .factory
            .as_ref()
            .expect("only an actor with a factory gets a restart verdict");
        actor = match std::panic::catch_unwind(AssertUnwindSafe(|| factory())) {
            Ok(a) => a,
            Err(p) => {
                let msg = panic_message(&*p);
                tracing::error!(actor = %path, panic = %msg, "actor factory panicked; stopped");
                break (StopReason::Panicked(msg), false, None);
            }
        };
        if own.is_some()
            && let Some(parent) = &sup.parent
        {
            parent.child_event(ChildEvent::Restarted { id });
        }
    };
    // Children stop (and their `stopped` runs) before this actor's own.
    run.stop_children().await;
    let shutting_down = sys_inner.shutting_down.load(Ordering::Acquire);
    let mut left = run.decoded.len() as u64;
    left += run.traced.len() as u64;
    // What is still in the mailbox joins what was taken from it: once
    // closed, senders are refused (a remote ask then hears why at once),
    // and what it held is failed and counted here, once.
    let queued = run.cell.mailbox.close_taking();
    run.user.extend(queued);
    // The asks among them fail now, as the actor is gone.
    reply::collect(&mut held, || {
        run.decoded.clear();
        run.traced.clear();
        run.held = Charge::default();
        left += drop_unhandled(&mut run.user, run.cell.decode.get(), run.scope.as_ref());
    });
    run.registry.dead_letters_n(
        left,
        std::any::type_name::<A::Msg>(),
        &path,
        &DeadLetterReason::LeftInMailbox,
    );
    let reason = if shutting_down {
        StopReason::SystemShutdown
    } else {
        reason
    };
    if let Some(mut last) = last {
        if let Err(p) = guarded(last.stopped(&reason), &mut held).await {
            tracing::error!(actor = %path, panic = %p, "`stopped` panicked");
        }
        // Reply refs the last instance kept fail their asks.
        reply::collect(&mut held, || drop(last));
    }
    reply::resolve(&mut held, &NoReply::stopped(&reason));
    (reason, escalate)
}
