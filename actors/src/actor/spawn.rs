//! Spawning onto the system: [`ActorSystem::spawn`] and its named and
//! supervised kinds, each a cell (mailbox, path, watchers) and a task
//! running `run_actor`; and the task's end, once it has returned or
//! panicked: the mailbox closed (the asks left in it failed), the name
//! freed, watchers told, and last the parent.

use std::sync::{
    Arc, Mutex, OnceLock, PoisonError,
    atomic::{AtomicBool, Ordering},
};

use super::{
    Actor,
    children::{Factory, Supervision},
    outcome::panic_message,
    supervise::run_actor,
};
use crate::{
    actor_ref::ActorRef,
    cell::Cell,
    config::SpawnOptions,
    dead_letter::DeadLetterReason,
    error::SpawnError,
    lifecycle::StopReason,
    mailbox::{Mailbox, Queued, SystemMsg},
    path::{MAX_PATH_ELEMENTS, MAX_PATH_LEN, valid_name},
    registry::Target,
    reply::{self, NoReply},
    serialization::{RemoteMessage, decoders, manifests},
    supervision::{ChildEvent, Restarts, SupervisorStrategy},
    system::{ActorSystem, Stoppable},
    watch::Watchers,
};

impl<M: Send + 'static> Stoppable for Cell<M> {
    fn stop(&self) {
        self.mailbox.push_system(SystemMsg::Stop);
    }

    fn stop_after_queued(&self) {
        // Refused only by a closed mailbox: the actor has stopped already.
        let _ = self.mailbox.push_unbounded(Queued::Stop);
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
    pub(super) fn spawn_registered<A>(
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
