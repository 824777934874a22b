//! Cluster singletons: one actor in the whole cluster, on its oldest
//! hosting member, and refs that reach it wherever it runs (Akka's
//! cluster singleton).
//!
//! ```no_run
//! # use std::time::Duration;
//! # use actors::{Actor, ActorResult, ActorSystem, Ctx, cluster::{Cluster, ClusterConfig}};
//! # use actors::singleton::{Singleton, SingletonSettings};
//! # struct Scheduler;
//! # impl Actor for Scheduler {
//! #     type Msg = String;
//! #     async fn handle(&mut self, _: String, _: &mut Ctx<Self>) -> ActorResult { Ok(()) }
//! # }
//! # async fn f(system: ActorSystem, cluster: Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! // On every node that may host it (the same settings everywhere):
//! let scheduler = Singleton::start(&system, &cluster, "scheduler", || Scheduler,
//!     SingletonSettings::new())?;
//! // On nodes that only talk to it:
//! // let scheduler = Singleton::proxy::<String>(&system, &cluster, "scheduler");
//! scheduler.tell("tick".to_owned())?;
//! println!("it runs on {:?}", scheduler.location());
//! # Ok(()) }
//! ```
//!
//! # Model
//! - Every hosting node runs a manager ([`Singleton::start`]). The
//!   singleton runs on the oldest hosting member that is `Up` or
//!   `Suspect` (the lowest [`Member::started_ms`], then the node
//!   address: the same age as [`DowningStrategy::KeepOldest`]). A member
//!   that joins is younger than all, so a join never moves it; it moves
//!   when its host leaves or is downed, to the next oldest.
//! - Handover: the old instance stops (after its queued messages, its
//!   `stopped` hook included) before the next one starts. The new host
//!   waits for the old one's `HandOverDone`; or, for a host that went
//!   down, until it has been down (or removed) for
//!   [`SingletonSettings::down_removal_margin`] (by default the
//!   cluster's `stable_after`), the time the losing side of a partition
//!   takes to down itself and stop its instance; or, for a host that
//!   left but does not answer (its manager is gone),
//!   [`SingletonSettings::handover_timeout`].
//! - A [`SingletonRef`] finds the instance through the cluster group
//!   `singleton:<name>`, which the running instance joins. While none is
//!   listed (the singleton moves, or is not known yet) it buffers, up to
//!   [`SingletonSettings::buffer_bytes`], and delivers the buffer in order
//!   once one is.
//! - With a [`Lease`] ([`SingletonSettings::lease`]), a node starts the
//!   instance only once it holds the lease, and releases it once the
//!   instance has stopped, before the next host is told: one instance at
//!   a time even where the downing strategy's assumptions fail, as long
//!   as the lease's store is consistent. [`MemoryLease`] serves tests.
//! - At most one instance runs at a time as long as the downing strategy
//!   holds (one side of a partition survives) and the members' views
//!   agree on who is older; `docs/FAILURE_SEMANTICS.md` lists the
//!   limits and what is lost.
//!
//! # Observability
//! [`SingletonRef::location`]; logs at info when the instance starts and
//! stops on a node (target `actors::singleton`); metrics
//! `actors_singleton_running`, `actors_singleton_starts_total` and
//! `actors_singleton_buffered_bytes`; messages dropped past the buffer
//! are dead letters with reason `buffer_full`.
//!
//! # Layout
//! `settings` ([`SingletonSettings`]); `placement` (who runs the
//! instance and when the next may start; pure); `lease` ([`Lease`]);
//! `manager` (a hosting node's manager task, which carries out
//! placement's actions); `buffer` (the bounded buffer of a ref; pure);
//! `proxy` ([`SingletonRef`]).
//!
//! [`Member::started_ms`]: crate::cluster::Member::started_ms
//! [`DowningStrategy::KeepOldest`]: crate::cluster::DowningStrategy::KeepOldest

mod buffer;
mod lease;
mod manager;
mod placement;
mod proxy;
mod settings;

use std::sync::{Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::{
    actor::Actor,
    cluster::Cluster,
    error::SpawnError,
    path::{MAX_NAME_LEN, valid_name},
    serialization::RemoteMessage,
    system::ActorSystem,
};
pub use lease::{Lease, LeaseError, LeaseFuture, MemoryLease};
pub use proxy::SingletonRef;
pub use settings::{DEFAULT_BUFFER_BYTES, DEFAULT_HANDOVER_TIMEOUT, SingletonSettings};

/// The manager's actor name on every hosting node is the singleton's name
/// with this suffix.
const MANAGER_SUFFIX: &str = "-singleton";

/// Why a singleton could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SingletonError {
    /// The name is not an actor name with room for the manager's suffix:
    /// no `/`, `#`, `@`, `:` or whitespace, not starting with `$`, at most
    /// 118 bytes. Pick another name.
    #[error("singleton name {0:?} is not an actor name of at most 118 bytes")]
    InvalidName(String),
    /// This node already runs a manager for this singleton (or an actor
    /// holds its manager's name, `<name>-singleton`): start it once per
    /// node and clone the ref.
    #[error("singleton {0:?} is already started on this node: {1}")]
    AlreadyStarted(String, SpawnError),
}

/// Starts cluster singletons and refs to them. See the [module
/// docs](self).
#[derive(Debug)]
pub struct Singleton(());

impl Singleton {
    /// Starts this node's manager of singleton `name`: the singleton runs
    /// here (built by `factory`, at `/user/<name>`) whenever this node is
    /// the oldest hosting member, and nowhere else meanwhile. Call it on
    /// every node `settings` admits as a host, with the same settings;
    /// call it after [`Cluster::join`]. Returns a ref to the singleton,
    /// wherever it runs.
    ///
    /// # Errors
    /// [`SingletonError::InvalidName`], [`SingletonError::AlreadyStarted`].
    pub fn start<A, F>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        factory: F,
        settings: SingletonSettings,
    ) -> Result<SingletonRef<A::Msg>, SingletonError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
        F: Fn() -> A + Send + Sync + 'static,
    {
        let manager_name = format!("{name}{MANAGER_SUFFIX}");
        if !valid_name(name) || !valid_name(&manager_name) || manager_name.len() > MAX_NAME_LEN {
            return Err(SingletonError::InvalidName(name.to_owned()));
        }
        manager::start(system, cluster, name, manager_name, factory, &settings)?;
        Ok(Self::proxy_with(
            system,
            cluster,
            name,
            settings.buffer_bytes,
        ))
    }

    /// A ref to singleton `name`, for a node that does not host it (or
    /// one that does: [`start`](Self::start) returns one too). Its buffer
    /// holds [`DEFAULT_BUFFER_BYTES`].
    pub fn proxy<M: RemoteMessage>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
    ) -> SingletonRef<M> {
        Self::proxy_with(system, cluster, name, DEFAULT_BUFFER_BYTES)
    }

    /// [`proxy`](Self::proxy) with a buffer of `buffer_bytes`.
    pub fn proxy_with<M: RemoteMessage>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        buffer_bytes: usize,
    ) -> SingletonRef<M> {
        SingletonRef::new(system, cluster, name, buffer_bytes)
    }
}

/// The cluster group the running instance joins.
fn group_name(name: &str) -> String {
    format!("singleton:{name}")
}

/// Cancelled when the system shuts down (never for a local system, which
/// has no cluster anyway).
fn cancel_token(system: &ActorSystem) -> CancellationToken {
    system
        .remoting()
        .map_or_else(CancellationToken::new, |r| r.cancel_token())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
