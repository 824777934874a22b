//! [`RouterBuilder`]: the logic and a pool's restart limit, then a group
//! or a pool, anonymous or at a name; `start` spawns the router actor
//! over the first routees.

use std::{
    fmt,
    future::Future,
    sync::{Arc, OnceLock, atomic::AtomicU64},
    time::Duration,
};

use tokio::sync::watch;

use crate::{
    actor::{Actor, ActorError},
    actor_ref::ActorRef,
    error::SpawnError,
    serialization::RemoteMessage,
    system::ActorSystem,
};

use super::{
    RestartLimit, Router, RouterError,
    logic::{Logic, RoutingLogic},
    manager::RouterActor,
    messages::RouterMsg,
    pool::{DeployFn, PoolSupervisor, deploy_all, local_pool},
    route::Shared,
    table::{Routee, Table},
};

/// Builds a [`Router`]: the logic, the restart limit of a pool, then a
/// group or a pool.
pub struct RouterBuilder<M> {
    pub(super) logic: RoutingLogic<M>,
    pub(super) limit: RestartLimit,
}

impl<M> fmt::Debug for RouterBuilder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterBuilder")
            .field("logic", &self.logic)
            .field("limit", &self.limit)
            .finish()
    }
}

impl<M: Send + 'static> RouterBuilder<M> {
    /// Sets how many pool routee failures are absorbed (default
    /// [`DEFAULT_MAX_RESTARTS`] within [`DEFAULT_RESTART_WINDOW`]).
    ///
    /// [`DEFAULT_MAX_RESTARTS`]: crate::DEFAULT_MAX_RESTARTS
    /// [`DEFAULT_RESTART_WINDOW`]: crate::DEFAULT_RESTART_WINDOW
    #[must_use]
    pub fn restart_limit(mut self, max_restarts: u32, within: Duration) -> Self {
        self.limit = RestartLimit {
            max_restarts,
            within,
        };
        self
    }

    /// A group over `routees` (local or remote refs), which it watches and
    /// drops as they terminate.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn group(
        self,
        system: &ActorSystem,
        routees: impl IntoIterator<Item = ActorRef<M>>,
    ) -> Router<M> {
        let mut entries: Vec<Routee<M>> = Vec::new();
        for actor in routees {
            if !entries.iter().any(|e| e.actor == actor) {
                entries.push(Routee::member(actor));
            }
        }
        start(system, self.logic, entries, None, spawn_anonymous)
            .expect("an anonymous spawn does not fail")
    }

    /// A pool of `n` local routees made by `factory`; one that fails is
    /// restarted in place with a new `factory()`, keeping its queue
    /// (within the restart limit, counted over all routees).
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn pool<A>(
        self,
        system: &ActorSystem,
        n: usize,
        factory: impl Fn() -> A + Send + Sync + 'static,
    ) -> Router<M>
    where
        A: Actor<Msg = M>,
    {
        let (entries, supervisor) = local_pool(system, n, factory, self.limit);
        start(
            system,
            self.logic,
            entries,
            Some(supervisor),
            spawn_anonymous,
        )
        .expect("an anonymous spawn does not fail")
    }

    /// A pool of `n` routees, each made by `deploy(system, slot)`: any
    /// actor, local or on another node (ask a spawner actor there and
    /// return the ref it answers with). A routee that fails is replaced by
    /// `deploy` for the same slot (within the restart limit); if that
    /// deploy fails, the slot is dropped.
    ///
    /// # Errors
    /// [`RouterError::Deploy`] if a first deploy fails (the routees
    /// already made are stopped).
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub async fn pool_with<F, Fut>(
        self,
        system: &ActorSystem,
        n: usize,
        deploy: F,
    ) -> Result<Router<M>, RouterError>
    where
        F: Fn(ActorSystem, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ActorRef<M>, ActorError>> + Send + 'static,
    {
        let deploy: DeployFn<M> = Arc::new(move |system, slot| Box::pin(deploy(system, slot)));
        let entries = deploy_all(system, n, &deploy).await?;
        let supervisor = PoolSupervisor::new(deploy, self.limit);
        Ok(start(
            system,
            self.logic,
            entries,
            Some(supervisor),
            spawn_anonymous,
        )
        .expect("an anonymous spawn does not fail"))
    }
}

/// Routers reachable from other nodes by path.
impl<M: RemoteMessage> RouterBuilder<M> {
    /// As [`group`](Self::group), with the router actor at `/user/{name}`:
    /// other nodes resolve it (as an `ActorRef<RouterMsg<M>>`) and send it
    /// [`RouterMsg::Route`] messages, which it routes to its routees; an
    /// ask's request carries its reply ref, so the routee answers the
    /// asker directly.
    ///
    /// # Errors
    /// [`RouterError::Spawn`]: the name is invalid or taken, or the system
    /// is shutting down.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn group_named(
        self,
        system: &ActorSystem,
        name: &str,
        routees: impl IntoIterator<Item = ActorRef<M>>,
    ) -> Result<Router<M>, RouterError> {
        let mut entries: Vec<Routee<M>> = Vec::new();
        for actor in routees {
            if !entries.iter().any(|e| e.actor == actor) {
                entries.push(Routee::member(actor));
            }
        }
        start(system, self.logic, entries, None, |s, a| {
            s.spawn_named(name, a)
        })
    }

    /// As [`pool`](Self::pool), with the router actor at `/user/{name}`,
    /// reachable from other nodes as [`group_named`](Self::group_named)
    /// describes.
    ///
    /// # Errors
    /// [`RouterError::Spawn`], after the routees already made are stopped.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn pool_named<A>(
        self,
        system: &ActorSystem,
        name: &str,
        n: usize,
        factory: impl Fn() -> A + Send + Sync + 'static,
    ) -> Result<Router<M>, RouterError>
    where
        A: Actor<Msg = M>,
    {
        let (entries, supervisor) = local_pool(system, n, factory, self.limit);
        start(system, self.logic, entries, Some(supervisor), |s, a| {
            s.spawn_named(name, a)
        })
    }
}

/// Remote pools reachable by path.
impl<M: RemoteMessage> RouterBuilder<M> {
    /// As [`pool_with`](Self::pool_with), with the router actor at
    /// `/user/{name}`, reachable from other nodes as
    /// [`group_named`](Self::group_named) describes.
    ///
    /// # Errors
    /// [`RouterError::Deploy`] if a first deploy fails, or
    /// [`RouterError::Spawn`]; either way the routees already made are
    /// stopped.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub async fn pool_with_named<F, Fut>(
        self,
        system: &ActorSystem,
        name: &str,
        n: usize,
        deploy: F,
    ) -> Result<Router<M>, RouterError>
    where
        F: Fn(ActorSystem, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ActorRef<M>, ActorError>> + Send + 'static,
    {
        let deploy: DeployFn<M> = Arc::new(move |system, slot| Box::pin(deploy(system, slot)));
        let entries = deploy_all(system, n, &deploy).await?;
        let supervisor = PoolSupervisor::new(deploy, self.limit);
        start(system, self.logic, entries, Some(supervisor), |s, a| {
            s.spawn_named(name, a)
        })
    }
}

/// Spawns a router actor with no name (`/user/$N`).
fn spawn_anonymous<M: Send + 'static>(
    system: &ActorSystem,
    actor: RouterActor<M>,
) -> Result<ActorRef<RouterMsg<M>>, SpawnError> {
    Ok(system.spawn(actor))
}

/// Spawns the router actor over `entries` with `spawn` and returns its
/// handle; if `spawn` fails, the pool routees among `entries` are stopped.
fn start<M: Send + 'static>(
    system: &ActorSystem,
    logic: RoutingLogic<M>,
    entries: Vec<Routee<M>>,
    supervisor: Option<PoolSupervisor<M>>,
    spawn: impl FnOnce(&ActorSystem, RouterActor<M>) -> Result<ActorRef<RouterMsg<M>>, SpawnError>,
) -> Result<Router<M>, RouterError> {
    let seed = match logic.kind {
        Logic::Random(seed) => seed,
        _ => 0,
    };
    let hashing = matches!(logic.kind, Logic::ConsistentHashing(_));
    let shared = Arc::new(Shared {
        table: watch::Sender::new(Table::new(entries, hashing)),
        logic,
        counter: AtomicU64::new(seed),
        registry: Arc::downgrade(system.registry()),
        path: OnceLock::new(),
    });
    let actor = spawn(
        system,
        RouterActor {
            shared: shared.clone(),
            supervisor,
        },
    );
    let actor = match actor {
        Ok(actor) => actor,
        Err(e) => {
            let table = shared.table.borrow();
            for r in table.routees.iter().filter(|r| r.slot.is_some()) {
                r.actor.stop();
            }
            return Err(RouterError::Spawn(e));
        }
    };
    let _ = shared.path.set(actor.path().clone());
    Ok(Router { actor, shared })
}
