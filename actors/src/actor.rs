//! The [`Actor`] trait, the context handed to its hooks, and how an actor
//! runs: spawning onto the system and the task that handles its mailbox.

use std::{
    collections::VecDeque,
    fmt,
    future::Future,
    sync::{
        Arc, OnceLock, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::{
    actor_ref::ActorRef,
    cell::Cell,
    error::SpawnError,
    lifecycle::{StopReason, Terminated},
    mailbox::{Mailbox, Queued, SystemMsg, next_record},
    path::valid_name,
    registry::Target,
    serialization::{RemoteMessage, decoders, manifests, with_decode_scope},
    system::{ActorSystem, Stoppable},
    timer::{TimerKey, Timers},
    trace::{BatchTraces, TraceContext},
    watch::{WatchSink, Watchers},
};

/// An actor: state plus a handler for its messages, run one message at a
/// time on its own task.
///
/// ```
/// use actors::{Actor, Ctx};
/// struct Counter(u64);
/// impl Actor for Counter {
///     type Msg = u64;
///     async fn handle(&mut self, n: u64, _ctx: &mut Ctx<Self>) {
///         self.0 += n;
///     }
/// }
/// ```
pub trait Actor: Send + Sized + 'static {
    /// The messages this actor takes.
    type Msg: Send + 'static;

    /// Runs once before the first message.
    fn started(&mut self, ctx: &mut Ctx<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Handles one message. A panic here stops the actor with
    /// [`StopReason::Panicked`]; its watchers see that reason and the rest
    /// of the system goes on.
    fn handle(&mut self, msg: Self::Msg, ctx: &mut Ctx<Self>) -> impl Future<Output = ()> + Send;

    /// An actor this one watches (see [`Ctx::watch`]) has terminated.
    fn terminated(
        &mut self,
        t: Terminated,
        ctx: &mut Ctx<Self>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (t, ctx);
        async {}
    }

    /// Runs once after the last message, unless the actor panicked.
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
/// - timers: [`schedule_once`](Self::schedule_once),
///   [`schedule_repeatedly`](Self::schedule_repeatedly),
///   [`cancel_timer`](Self::cancel_timer).
pub struct Ctx<A: Actor> {
    pub(crate) myself: ActorRef<A::Msg>,
    pub(crate) system: ActorSystem,
    pub(crate) stop: bool,
    pub(crate) sink: WatchSink,
    pub(crate) timers: Timers<A::Msg>,
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
    /// use actors::{Actor, Ctx};
    /// struct Session;
    /// enum Msg { Touch, Expire }
    /// impl Actor for Session {
    ///     type Msg = Msg;
    ///     async fn started(&mut self, ctx: &mut Ctx<Self>) {
    ///         ctx.schedule_once(Duration::from_secs(30), Msg::Expire);
    ///     }
    ///     async fn handle(&mut self, msg: Msg, ctx: &mut Ctx<Self>) {
    ///         if let Msg::Expire = msg {
    ///             ctx.stop();
    ///         }
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
}

/// Spawning (the actor's task is `run_actor`).
impl ActorSystem {
    /// Spawns an anonymous actor (`/user/$N`). It becomes reachable from
    /// other nodes once a ref to it is sent to one.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn spawn<A: Actor>(&self, actor: A) -> ActorRef<A::Msg> {
        let id = self.registry().next_id();
        ActorRef::local(self.spawn_at(id, &format!("/user/${id}"), actor))
    }

    /// Spawns an actor at `/user/{name}`, reachable from other nodes by
    /// that path (see [`resolve`](Self::resolve)).
    ///
    /// # Errors
    /// An invalid or taken name, or a system shutting down.
    pub fn spawn_named<A>(&self, name: &str, actor: A) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        if !valid_name(name) {
            return Err(SpawnError::InvalidName(name.to_owned()));
        }
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(SpawnError::ShuttingDown);
        }
        let manifest = <A::Msg as RemoteMessage>::MANIFEST;
        manifests::register(manifest).map_err(|c| SpawnError::ManifestCollision {
            manifest,
            id: c.id,
            registered: c.registered,
        })?;
        let elements = format!("/user/{name}");
        let mut targets = self.registry().targets();
        if targets.contains_key(elements.as_str()) {
            return Err(SpawnError::NameTaken(name.to_owned()));
        }
        // Reserve the name under the lock, then spawn.
        let id = self.registry().next_id();
        let cell = self.make_cell::<A::Msg>(&elements);
        cell.registered.store(true, Ordering::Release);
        let _ = cell.decode.set(decoders::<A::Msg>());
        let target: Arc<dyn Target> = cell.clone();
        targets.insert(elements.as_str().into(), target);
        drop(targets);
        self.start(id, cell.clone(), actor);
        Ok(ActorRef::local(cell))
    }

    fn make_cell<M: Send + 'static>(&self, elements: &str) -> Arc<Cell<M>> {
        Arc::new(Cell {
            mailbox: Mailbox::new(
                self.inner.config.mailbox_capacity,
                self.inner.config.mailbox_bytes,
            ),
            path: self.registry().path(elements),
            watchers: Watchers::default(),
            registry: Arc::downgrade(self.registry()),
            decode: OnceLock::new(),
            registered: AtomicBool::new(false),
        })
    }

    fn spawn_at<A: Actor>(&self, id: u64, elements: &str, actor: A) -> Arc<Cell<A::Msg>> {
        let cell = self.make_cell::<A::Msg>(elements);
        self.start(id, cell.clone(), actor);
        cell
    }

    fn start<A: Actor>(&self, id: u64, cell: Arc<Cell<A::Msg>>, actor: A) {
        let stoppable: Arc<dyn Stoppable> = cell.clone();
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, stoppable);
        if self.inner.shutting_down.load(Ordering::Acquire) {
            cell.mailbox.push_system(SystemMsg::Stop);
        }
        let sys = self.clone();
        let run_cell = cell.clone();
        let handle = tokio::spawn(run_actor(actor, run_cell, sys));
        let sys = self.inner.clone();
        let registry = self.registry().clone();
        self.inner.tasks.spawn(async move {
            let reason = match handle.await {
                Ok(reason) => reason,
                Err(e) if e.is_panic() => {
                    let p = e.into_panic();
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".to_owned());
                    tracing::error!(actor = %cell.path, panic = %msg, "actor panicked; stopped");
                    StopReason::Panicked(msg)
                }
                Err(_) => StopReason::SystemShutdown,
            };
            let left = cell.mailbox.close() as u64;
            registry.dead_letters_n(
                left,
                std::any::type_name::<A::Msg>(),
                &cell.path,
                "left in mailbox at stop",
            );
            if cell.registered.load(Ordering::Acquire) {
                registry.unregister(cell.path.elements());
            }
            sys.live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            cell.watchers.terminate(&cell.path, reason);
        });
    }
}

/// An actor's task: hooks, then batches of messages until stopped.
async fn run_actor<A: Actor>(
    mut actor: A,
    cell: Arc<Cell<A::Msg>>,
    system: ActorSystem,
) -> StopReason {
    let sys_inner = system.inner.clone();
    let registry = system.registry().clone();
    // What decodes of this actor's remote messages resolve refs against
    // (the scope is per batch; this is its one lookup).
    let scope = registry.decode_scope();
    let mut ctx = Ctx {
        myself: ActorRef::local(cell.clone()),
        system,
        stop: false,
        sink: WatchSink::Actor(cell.clone()),
        timers: Timers::default(),
    };
    actor.started(&mut ctx).await;
    let mut user: VecDeque<Queued<A::Msg>> = VecDeque::new();
    let mut sys: VecDeque<SystemMsg> = VecDeque::new();
    // The messages of the remote batch being worked through, decoded
    // together (one decode context per batch, no await in between).
    let mut decoded: VecDeque<A::Msg> = VecDeque::new();
    // Their trace contexts, if they carried any (`trace`).
    let mut traces = BatchTraces::default();
    let reason = 'run: loop {
        if ctx.stop {
            break StopReason::Stopped;
        }
        if !ctx.timers.is_empty() {
            fire_due(&mut ctx.timers, &cell);
        }
        // Without timers waiting, the actor waits on its mailbox alone.
        let received = match ctx.timers.next_deadline() {
            None => cell.mailbox.recv_all(&mut user, &mut sys).await,
            Some(deadline) => {
                tokio::select! {
                    biased;
                    received = cell.mailbox.recv_all(&mut user, &mut sys) => received,
                    // Queued at the top of the next round.
                    () = tokio::time::sleep_until(deadline) => continue 'run,
                }
            }
        };
        if !received {
            break StopReason::Stopped;
        }
        loop {
            while let Some(s) = sys.pop_front() {
                match s {
                    SystemMsg::Stop => break 'run StopReason::Stopped,
                    SystemMsg::Terminated(t) => actor.terminated(t, &mut ctx).await,
                }
                if ctx.stop {
                    break 'run StopReason::Stopped;
                }
            }
            let mut trace = None;
            let msg = if let Some(m) = decoded.pop_front() {
                trace = traces.pop();
                m
            } else {
                match user.pop_front() {
                    None => break,
                    Some(Queued::Local(m)) => m,
                    Some(Queued::Timer(timer)) => {
                        let (key, m) = *timer;
                        if !ctx.timers.take_delivered(key) {
                            // Cancelled after it was queued.
                            continue;
                        }
                        m
                    }
                    Some(Queued::Stop) => break 'run StopReason::Stopped,
                    Some(Queued::Batch(bytes, _)) => {
                        let (decode, decode_ext) = *cell.decode.get().expect(
                            "remote messages reach only registered actors, which have a decoder",
                        );
                        let mut decode_all = || {
                            let mut pos = 0;
                            while let Some((range, ext)) = next_record(&bytes, &mut pos) {
                                let decoded_one = if ext {
                                    decode_ext(&bytes[range])
                                } else {
                                    decode(&bytes[range]).map(|m| (m, None))
                                };
                                match decoded_one {
                                    Ok((m, t)) => {
                                        decoded.push_back(m);
                                        traces.push(t, decoded.len() - 1);
                                    }
                                    Err(e) => registry.dead_letter(
                                        std::any::type_name::<A::Msg>(),
                                        &cell.path,
                                        &format!("remote message does not decode: {e}"),
                                    ),
                                }
                            }
                        };
                        match &scope {
                            Some(scope) => with_decode_scope(scope, &bytes, decode_all),
                            None => decode_all(),
                        }
                        continue;
                    }
                }
            };
            // A remote message's trace context is the handler's current one.
            match trace {
                None => actor.handle(msg, &mut ctx).await,
                Some(t) => t.scope(actor.handle(msg, &mut ctx)).await,
            }
            if ctx.stop {
                break 'run StopReason::Stopped;
            }
            if !ctx.timers.is_empty() {
                fire_due(&mut ctx.timers, &cell);
            }
            if cell.mailbox.system_pending() {
                cell.mailbox.take_system(&mut sys);
            }
        }
    };
    let mut left = decoded.len() as u64;
    decoded.clear();
    for env in user.drain(..) {
        left += env.count() as u64;
    }
    registry.dead_letters_n(
        left,
        std::any::type_name::<A::Msg>(),
        &cell.path,
        "left in mailbox at stop",
    );
    let reason = if sys_inner.shutting_down.load(Ordering::Acquire) {
        StopReason::SystemShutdown
    } else {
        reason
    };
    actor.stopped(&reason).await;
    reason
}
