//! Routers: one handle in front of many actors (Akka's routers). A
//! [`Router`] sends each message to one of its routees, chosen by a
//! [`RoutingLogic`] (round robin, random, smallest mailbox, consistent
//! hashing), or to all of them (broadcast).
//!
//! ```
//! use actors::{Actor, ActorResult, ActorSystem, Ctx, Router, RoutingLogic};
//! struct Worker;
//! impl Actor for Worker {
//!     type Msg = u64;
//!     async fn handle(&mut self, job: u64, _: &mut Ctx<Self>) -> ActorResult {
//!         println!("job {job}");
//!         Ok(())
//!     }
//! }
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::local("doc").unwrap();
//! let workers = Router::builder(RoutingLogic::round_robin()).pool(&system, 4, || Worker);
//! for job in 0..8 {
//!     workers.tell(job).unwrap(); // two jobs each
//! }
//! # }
//! ```
//!
//! # Two kinds
//! - A **group** routes to refs it is given, local or remote
//!   ([`RouterBuilder::group`]). It does not own them: it watches each, and
//!   one that terminates, or whose node becomes unreachable, leaves the
//!   group. [`RouterBuilder::cluster_group`] builds one whose routees
//!   follow a cluster group as actors join and leave it.
//! - A **pool** creates its routees ([`RouterBuilder::pool`] from a local
//!   factory, [`RouterBuilder::pool_with`] from any async deploy function,
//!   such as one that asks a spawner on another node). It owns them, within
//!   a [`RestartLimit`]; past the limit the router fails and stops its
//!   routees. Callers keep their [`Router`] throughout.
//!   - A local pool's routee that fails (a hook's error or a panic) is
//!     restarted in place, as a supervised actor is: a new instance from
//!     the factory behind the same mailbox, so the messages queued behind
//!     the failed one are kept and handled by it, and the routee keeps its
//!     ref. The message it failed on is a dead letter ("handler failed"),
//!     and an ask in it fails at once with [`AskError::HandlerFailed`].
//!     The restarts of all routees count against the pool's limit.
//!   - A deployed pool's routee (`pool_with`, possibly on another node)
//!     cannot be restarted in place: a failed one is replaced by a new
//!     deploy for its slot. What was queued in the failed routee's mailbox
//!     is not handed over: each such message is a counted dead letter on
//!     its node ("left in mailbox at stop"), never silent.
//!
//! Routees can be added and removed at run time by message
//! ([`RouterMsg::Add`], [`RouterMsg::Remove`], or
//! [`Router::add_routee`] and [`Router::remove_routee`]).
//!
//! # Where routing runs: in the caller, with no extra hop
//! A router is an actor (its ref is [`Router::actor_ref`]) plus a routee
//! table it shares with every [`Router`] handle. The actor does the
//! management: it watches the routees, adds and removes them, and replaces
//! failed pool routees. [`Router::tell`] and [`Router::send`] pick the
//! routee on the caller's thread, from the shared table, and send straight
//! to it: a message costs what a `tell` to the routee costs, plus a read
//! lock and one atomic add, and no second mailbox or task wake-up.
//! Backpressure from a routee reaches the caller directly.
//!
//! A message sent to the router actor ([`RouterMsg::Route`]) is routed by
//! the actor with the same logic: one more hop (a mailbox push and a task
//! wake-up), and the router's task becomes a point every message goes
//! through. [`Router::ask`] goes that way, so that the logic can see the
//! whole request (a consistent-hashing key, say) with its reply ref in it;
//! the reply goes from the routee straight to the asker.
//!
//! Measured (`cargo bench -p remoting-actors --bench router`, 4 local
//! routees, one producer, 2 cores, medians of 3 noisy runs): telling the
//! routees directly 5.3 M msg/s, routed by `Router::tell` 1.6 M msg/s,
//! through the router actor 1.9 M msg/s. The routed tell's read lock and
//! turn counter are atomic read-modify-writes that come right after a
//! push into another core's mailbox, and stall on it; with one producer
//! the hop costs no more. The caller-side pick is kept because the router
//! actor is one task that every message of every caller goes through, and
//! because a routee's backpressure reaches the caller directly.
//!
//! # No silent loss
//! A routee that refuses a `tell` (full mailbox, full link, stopped and
//! not yet removed) makes the router try the next routee, in the order of
//! the logic; only when every routee refuses does the caller get the
//! message back ([`SendError::MailboxFull`] or [`SendError::LinkFull`];
//! [`Router::send`] waits for room instead). Consistent hashing never
//! moves a key to another routee because its owner is full, only because
//! it is gone. A router with no routees refuses with
//! [`SendError::ActorGone`] and counts a dead letter.
//!
//! # Ordering
//! As with any set of actors: messages from one sender to one routee stay
//! in order; a round-robin router spreads a sender's messages over
//! routees, so they are handled in parallel and in no global order.
//! Consistent hashing keeps each key's messages on one routee, in order,
//! until the routee set changes.

use std::{
    collections::VecDeque,
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, OnceLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::sync::watch;

use crate::{
    actor::{Actor, ActorError, ActorResult, Ctx},
    actor_ref::ActorRef,
    dead_letter::DeadLetterReason,
    error::{AskError, SendError, SpawnError},
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    registry::Registry,
    reply::{self, NoReply},
    serialization::RemoteMessage,
    system::ActorSystem,
};

/// Points each routee gets on a consistent-hashing ring. More points
/// spread keys more evenly (with 128 the largest share of 4 routees is
/// typically within 15% of a quarter) at the cost of 16 bytes per point
/// and a ring rebuild of `routees × 128` points when the routee set
/// changes. Removing a routee moves only the keys its points owned.
pub const VIRTUAL_NODES: usize = 128;
// A pool's default restart limit is supervision's: 10 a minute.
use crate::supervision::{
    DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_WINDOW, Restarts, SupervisorStrategy,
};

/// Why a router could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// A pool's deploy function failed for a slot; the routees deployed
    /// before it were stopped. Check what the deploy function needs (a
    /// reachable spawner node, say) and build the pool again.
    #[error("deploying pool routee {slot} failed: {source}")]
    Deploy {
        /// The slot (0-based) whose routee could not be deployed.
        slot: usize,
        /// The deploy function's error.
        source: ActorError,
    },
    /// The router actor could not be spawned at its name (taken, invalid,
    /// or the system is shutting down); a pool's routees were stopped.
    #[error("spawning the router actor failed: {0}")]
    Spawn(#[from] SpawnError),
}

/// How a router picks the routee for a message. Build one with its
/// constructors.
pub struct RoutingLogic<M> {
    kind: Logic<M>,
}

/// A consistent-hashing key function.
type KeyFn<M> = Arc<dyn Fn(&M) -> u64 + Send + Sync>;

enum Logic<M> {
    RoundRobin,
    Random(u64),
    SmallestMailbox,
    ConsistentHashing(KeyFn<M>),
    Broadcast(fn(&M) -> M),
}

impl<M> fmt::Debug for RoutingLogic<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Logic::RoundRobin => "RoundRobin",
            Logic::Random(_) => "Random",
            Logic::SmallestMailbox => "SmallestMailbox",
            Logic::ConsistentHashing(_) => "ConsistentHashing",
            Logic::Broadcast(_) => "Broadcast",
        })
    }
}

impl<M> RoutingLogic<M> {
    /// Each routee in turn: with `n` routees and one sender, message `i`
    /// goes to routee `i % n` (while none refuses).
    pub fn round_robin() -> Self {
        Self {
            kind: Logic::RoundRobin,
        }
    }

    /// A routee chosen uniformly at random, from a generator seeded with
    /// `seed` (the same seed and the same sends choose the same routees;
    /// the generator is SplitMix64, shared by the router's callers).
    pub fn random(seed: u64) -> Self {
        Self {
            kind: Logic::Random(seed),
        }
    }

    /// The routee with the fewest messages waiting, as Akka's
    /// `SmallestMailboxPool` does: a local routee's
    /// [`ActorRef::mailbox_len`] (messages queued and not yet taken by
    /// it); an idle local routee is taken at once. A remote routee's queue
    /// is unknown here, so remote routees rank after every local one, and
    /// take turns among themselves. Ties go to the routees in turn.
    pub fn smallest_mailbox() -> Self {
        Self {
            kind: Logic::SmallestMailbox,
        }
    }

    /// Messages with equal keys go to the same routee, by a hash ring with
    /// [`VIRTUAL_NODES`] points per routee: when a routee leaves, only the
    /// keys it owned move (to the routees next on the ring); when one
    /// joins, it takes about `1/n` of the keys. A pool routee that is
    /// replaced keeps its slot's points, so its keys stay with the
    /// replacement. `key` is mixed before use, so any integer will do (an
    /// id, or a hash of a string).
    pub fn consistent_hashing(key: impl Fn(&M) -> u64 + Send + Sync + 'static) -> Self {
        Self {
            kind: Logic::ConsistentHashing(Arc::new(key)),
        }
    }

    /// Every message to every routee (a clone each; the last gets the
    /// original).
    pub fn broadcast() -> Self
    where
        M: Clone,
    {
        Self {
            kind: Logic::Broadcast(M::clone),
        }
    }
}

/// How many pool routee failures a router absorbs: at most
/// `max_restarts` replacements within any `within` window. One more and
/// the router fails ([`StopReason::Failed`]) and stops its routees, as
/// Akka's supervisor escalates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartLimit {
    /// Replacements allowed in the window.
    pub max_restarts: u32,
    /// The window.
    pub within: Duration,
}

impl Default for RestartLimit {
    fn default() -> Self {
        Self {
            max_restarts: DEFAULT_MAX_RESTARTS,
            within: DEFAULT_RESTART_WINDOW,
        }
    }
}

/// What the router actor takes. Management messages carry an optional
/// reply ref that is told `true` if they changed the routee set.
///
/// For a message type `M` that is a [`RemoteMessage`], so is
/// `RouterMsg<M>` (manifest `actors.RouterMsg<` + `M`'s + `>`): a router
/// spawned at a name ([`RouterBuilder::group_named`],
/// [`RouterBuilder::pool_named`]) is resolved from another node as an
/// `ActorRef<RouterMsg<M>>`, and routes the [`Route`](Self::Route)
/// messages it gets from there. Only `Route` crosses nodes: `Add` and
/// `Remove` are local (a remote send of one fails to encode), so peers
/// cannot change, or stop, the routees.
#[derive(Serialize, Deserialize)]
#[serde(bound(serialize = "M: Serialize", deserialize = "M: DeserializeOwned"))]
#[non_exhaustive]
pub enum RouterMsg<M> {
    /// Route this message (one more hop than [`Router::tell`]; see
    /// [where routing runs](crate::router#where-routing-runs-in-the-caller-with-no-extra-hop)).
    Route(M),
    /// Add a routee (a group member: watched, never replaced or stopped by
    /// the router). Adding one that is already a routee changes nothing.
    /// Local only.
    #[serde(skip)]
    Add(ActorRef<M>, Option<ActorRef<bool>>),
    /// Remove the routee at this path; a pool routee is also stopped.
    /// Local only.
    #[serde(skip)]
    Remove(ActorPath, Option<ActorRef<bool>>),
}

/// Only [`RouterMsg::Route`] is encoded; its payload is `M`'s encoding
/// behind bincode's variant index.
impl<M: RemoteMessage> RemoteMessage for RouterMsg<M> {
    const MANIFEST: &'static str =
        crate::serialization::ManifestBuf::concat(&["actors.RouterMsg<", M::MANIFEST, ">"])
            .as_str();
}

impl<M> fmt::Debug for RouterMsg<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Route(_) => f.write_str("Route(..)"),
            Self::Add(r, _) => write!(f, "Add({})", r.path()),
            Self::Remove(p, _) => write!(f, "Remove({p})"),
        }
    }
}

/// A handle on a router: routes messages to its routees and manages them.
/// Cheap to clone; every clone routes through the same table. The router
/// runs until [`stop`](Self::stop)ped (dropping handles does not stop it)
/// or its system shuts down.
///
/// Method groups:
/// - sending: [`tell`](Self::tell), [`send`](Self::send), [`ask`](Self::ask);
/// - routees: [`routees`](Self::routees),
///   [`wait_routees`](Self::wait_routees),
///   [`add_routee`](Self::add_routee),
///   [`remove_routee`](Self::remove_routee);
/// - the actor: [`actor_ref`](Self::actor_ref), [`stop`](Self::stop).
pub struct Router<M> {
    actor: ActorRef<RouterMsg<M>>,
    shared: Arc<Shared<M>>,
}

impl<M> Clone for Router<M> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<M> fmt::Debug for Router<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("actor", &self.actor)
            .field("logic", &self.shared.logic)
            .field("routees", &self.shared.table.borrow().routees.len())
            .finish()
    }
}

/// Builds a [`Router`]: the logic, the restart limit of a pool, then a
/// group or a pool.
pub struct RouterBuilder<M> {
    logic: RoutingLogic<M>,
    limit: RestartLimit,
}

impl<M> fmt::Debug for RouterBuilder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterBuilder")
            .field("logic", &self.logic)
            .field("limit", &self.limit)
            .finish()
    }
}

impl<M: Send + 'static> Router<M> {
    /// A builder for a router with `logic`.
    pub fn builder(logic: RoutingLogic<M>) -> RouterBuilder<M> {
        RouterBuilder {
            logic,
            limit: RestartLimit::default(),
        }
    }

    /// Sends `msg` to the routee the logic picks, on this thread (no hop
    /// through the router actor, see
    /// [where routing runs](crate::router#where-routing-runs-in-the-caller-with-no-extra-hop)).
    /// A routee that refuses makes the router try the next one (see
    /// [no silent loss](crate::router#no-silent-loss)); broadcast tells
    /// every routee.
    ///
    /// # Errors
    /// - [`SendError::MailboxFull`] / [`SendError::LinkFull`]: every
    ///   routee refused for lack of room (consistent hashing: the key's
    ///   routee did); the message comes back.
    /// - [`SendError::ActorGone`]: no routee took it (none left, or all
    ///   stopped); counted as a dead letter.
    /// - [`SendError::Serialization`]: a remote routee could not encode it.
    /// - Broadcast: the first routee that refused, with its copy; the
    ///   other routees got theirs.
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.shared.route_now(msg)
    }

    /// As [`tell`](Self::tell), but when every candidate routee is full,
    /// waits for room at the logic's first choice instead of failing
    /// (broadcast waits for each routee in turn).
    ///
    /// # Errors
    /// As [`tell`](Self::tell), without `MailboxFull` and `LinkFull`.
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        self.shared.send(msg).await
    }

    /// Asks the routee the logic picks: the request goes through the
    /// router actor (one more hop, so the logic sees the whole request),
    /// and the reply comes from the routee straight to this ask. A
    /// broadcast ask is answered by the first reply.
    ///
    /// # Errors
    /// As [`ActorRef::ask`]; [`AskError::ActorGone`] also when the router
    /// has no routee to take the request, at once (not at the timeout).
    pub async fn ask<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        self.actor
            .ask(|reply| RouterMsg::Route(make(reply)), timeout)
            .await
    }

    /// The current routees, in routing order.
    pub fn routees(&self) -> Vec<ActorRef<M>> {
        let table = self.shared.table.borrow();
        table.routees.iter().map(|r| r.actor.clone()).collect()
    }

    /// Waits until `ready` holds for the routees (checked now and on
    /// every change) and returns them: an event to wait on, such as a
    /// routee's removal or replacement.
    pub async fn wait_routees(
        &self,
        mut ready: impl FnMut(&[ActorRef<M>]) -> bool,
    ) -> Vec<ActorRef<M>> {
        let mut rx = self.shared.table.subscribe();
        let mut current = Vec::new();
        // The sender lives in `shared`, which `self` holds: never closed.
        let _ = rx
            .wait_for(|t| {
                current = t.routees.iter().map(|r| r.actor.clone()).collect();
                ready(&current)
            })
            .await;
        current
    }

    /// Adds a group member (see [`RouterMsg::Add`]); true if it was not a
    /// routee. The table has it when this returns.
    ///
    /// # Errors
    /// As [`ActorRef::ask`] to the router actor (it has stopped, say).
    pub async fn add_routee(&self, routee: ActorRef<M>) -> Result<bool, AskError> {
        self.actor
            .ask(|ack| RouterMsg::Add(routee, Some(ack)), MANAGE_TIMEOUT)
            .await
    }

    /// Removes the routee at `path` (see [`RouterMsg::Remove`]); true if
    /// there was one. The table no longer has it when this returns.
    ///
    /// # Errors
    /// As [`ActorRef::ask`] to the router actor (it has stopped, say).
    pub async fn remove_routee(&self, path: &ActorPath) -> Result<bool, AskError> {
        self.actor
            .ask(
                |ack| RouterMsg::Remove(path.clone(), Some(ack)),
                MANAGE_TIMEOUT,
            )
            .await
    }

    /// The router actor: takes [`RouterMsg`], and its watchers learn when
    /// the router stops (after a pool's restart limit, say).
    pub fn actor_ref(&self) -> &ActorRef<RouterMsg<M>> {
        &self.actor
    }

    /// Stops the router; a pool's routees are stopped with it, a group's
    /// are left running. Sends through any handle fail from then on.
    pub fn stop(&self) {
        self.actor.stop();
    }
}

/// How long [`Router::add_routee`] and [`Router::remove_routee`] wait for
/// the router actor; it answers as soon as it gets to the message.
const MANAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A pool's way of creating a routee for a slot.
type DeployFn<M> = Arc<
    dyn Fn(
            ActorSystem,
            usize,
        ) -> Pin<Box<dyn Future<Output = Result<ActorRef<M>, ActorError>> + Send>>
        + Send
        + Sync,
>;

impl<M: Send + 'static> RouterBuilder<M> {
    /// Sets how many pool routee failures are absorbed (default
    /// [`DEFAULT_MAX_RESTARTS`] within [`DEFAULT_RESTART_WINDOW`]).
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

/// A pool's first routees, one per slot from `deploy`.
///
/// # Errors
/// [`RouterError::Deploy`] if one fails (the routees already made are
/// stopped).
async fn deploy_all<M: Send + 'static>(
    system: &ActorSystem,
    n: usize,
    deploy: &DeployFn<M>,
) -> Result<Vec<Routee<M>>, RouterError> {
    let mut entries: Vec<Routee<M>> = Vec::with_capacity(n);
    for slot in 0..n {
        match deploy(system.clone(), slot).await {
            Ok(actor) => entries.push(Routee::owned(actor, slot)),
            Err(source) => {
                for e in &entries {
                    e.actor.stop();
                }
                return Err(RouterError::Deploy { slot, source });
            }
        }
    }
    Ok(entries)
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
/// A local pool's `n` routees made by `factory`, each restarted in place
/// (a new `factory()` behind the same mailbox, so its queue is kept) when
/// it fails, the restarts of all of them counted in one window of
/// `limit`. A routee past the limit stops, and the router fails with it
/// (see `RouterActor::terminated`). No replacement deploy is needed.
fn local_pool<M, A>(
    system: &ActorSystem,
    n: usize,
    factory: impl Fn() -> A + Send + Sync + 'static,
    limit: RestartLimit,
) -> (Vec<Routee<M>>, PoolSupervisor<M>)
where
    M: Send + 'static,
    A: Actor<Msg = M>,
{
    let factory: crate::actor::Factory<A> = Arc::new(factory);
    let strategy = SupervisorStrategy::restart().with_limit(limit.max_restarts, limit.within);
    let window = Arc::new(std::sync::Mutex::new(Restarts::default()));
    let entries = (0..n)
        .map(|slot| {
            let routee = system.spawn_restarting(factory.clone(), strategy.clone(), window.clone());
            Routee::owned(routee, slot)
        })
        .collect();
    let deploy: DeployFn<M> = Arc::new(move |system: ActorSystem, _slot| {
        let routee = system.spawn_restarting(factory.clone(), strategy.clone(), window.clone());
        Box::pin(async move { Ok(routee) })
    });
    (entries, PoolSupervisor::new(deploy, limit))
}

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

/// One routee: its ref, its point on the hash ring, and its pool slot.
struct Routee<M> {
    actor: ActorRef<M>,
    /// Where its virtual nodes go on the ring: a pool slot's, so that a
    /// replacement inherits the keys; a group member's path's.
    ring_key: u64,
    /// The pool slot it fills: the router owns it, replaces it when it
    /// fails and stops it with the router. `None` for a group member.
    slot: Option<usize>,
}

impl<M> Routee<M> {
    fn member(actor: ActorRef<M>) -> Self {
        let ring_key = fnv1a(actor.path().to_string().as_bytes());
        Self {
            actor,
            ring_key,
            slot: None,
        }
    }

    fn owned(actor: ActorRef<M>, slot: usize) -> Self {
        Self {
            actor,
            ring_key: mix(slot as u64 ^ POOL_RING_SALT),
            slot: Some(slot),
        }
    }
}

/// Keeps pool slots' ring keys apart from any path hash.
const POOL_RING_SALT: u64 = 0x706f_6f6c_5f72_696e;

/// The routees and, for consistent hashing, their ring: rebuilt whole on
/// every change (changes are rare; routing reads it).
struct Table<M> {
    routees: Vec<Routee<M>>,
    /// `(point, routee index)`, sorted by point; empty unless hashing.
    ring: Vec<(u64, u32)>,
    hashing: bool,
}

impl<M> Table<M> {
    fn new(routees: Vec<Routee<M>>, hashing: bool) -> Self {
        let mut t = Self {
            routees,
            ring: Vec::new(),
            hashing,
        };
        t.rebuild();
        t
    }

    fn rebuild(&mut self) {
        self.ring.clear();
        if !self.hashing {
            return;
        }
        self.ring = ring_points(self.routees.iter().map(|r| r.ring_key));
    }
}

/// The ring for routees with `keys` (in order): [`VIRTUAL_NODES`] points
/// each, sorted.
fn ring_points(keys: impl Iterator<Item = u64>) -> Vec<(u64, u32)> {
    let mut ring = Vec::new();
    for (i, key) in keys.enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        for v in 0..VIRTUAL_NODES as u64 {
            ring.push((mix(key ^ mix(v)), i));
        }
    }
    ring.sort_unstable();
    ring
}

/// The routee that owns `hash` on a non-empty ring.
fn ring_owner(ring: &[(u64, u32)], hash: u64) -> usize {
    let at = ring.partition_point(|&(p, _)| p < hash);
    ring[at % ring.len()].1 as usize
}

/// The routee indices the ring visits from `hash`, each once: the key's
/// owner first, then the routees its keys would move to in turn.
fn ring_order(ring: &[(u64, u32)], hash: u64, n: usize) -> impl Iterator<Item = usize> + '_ {
    let start = ring.partition_point(|&(p, _)| p < hash);
    let mut seen = Vec::new();
    (0..ring.len()).filter_map(move |i| {
        if seen.len() == n {
            return None;
        }
        let idx = ring[(start + i) % ring.len()].1 as usize;
        if seen.contains(&idx) {
            return None;
        }
        seen.push(idx);
        Some(idx)
    })
}

/// SplitMix64's output function: spreads any integer over 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a: a stable hash of a path (the same in every process and build).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `r` scaled into `0..n` (Lemire's multiply-shift).
fn below(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

/// What the router actor and every handle share.
struct Shared<M> {
    /// The routees; the actor writes, callers read.
    table: watch::Sender<Table<M>>,
    logic: RoutingLogic<M>,
    /// Round robin and smallest mailbox: the next turn. Random: the
    /// generator's state.
    counter: AtomicU64,
    /// For dead letters.
    registry: Weak<Registry>,
    /// The router actor's path, for dead letters; set once spawned.
    path: OnceLock<ActorPath>,
}

impl<M: Send + 'static> Shared<M> {
    /// The first routee to try, of `n` (> 0), for round robin, random and
    /// smallest mailbox.
    fn first(&self, routees: &[Routee<M>]) -> usize {
        let n = routees.len();
        match self.logic.kind {
            Logic::Random(_) => {
                let state = self
                    .counter
                    .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
                // `mix` adds the increment again: this is SplitMix64's
                // next output for the state after the add.
                below(mix(state), n)
            }
            Logic::SmallestMailbox => {
                let turn = self.counter.fetch_add(1, Ordering::Relaxed) as usize % n;
                let mut best = (usize::MAX, turn);
                for i in 0..n {
                    let idx = (turn + i) % n;
                    let r = &routees[idx].actor;
                    if !r.is_local() {
                        continue;
                    }
                    let len = r.mailbox_len();
                    if len == 0 {
                        return idx;
                    }
                    if len < best.0 {
                        best = (len, idx);
                    }
                }
                best.1
            }
            _ => self.counter.fetch_add(1, Ordering::Relaxed) as usize % n,
        }
    }

    /// Routes `msg` now, trying routees in the logic's order.
    fn route_now(&self, msg: M) -> Result<(), SendError<M>> {
        let table = self.table.borrow();
        let n = table.routees.len();
        if n == 0 {
            return Err(self.no_routees(msg));
        }
        match &self.logic.kind {
            Logic::Broadcast(clone) => {
                let mut first_err = None;
                let last = n - 1;
                let mut msg = Some(msg);
                for (i, r) in table.routees.iter().enumerate() {
                    let copy = if i == last {
                        msg.take()
                            .expect("the original is kept for the last routee")
                    } else {
                        clone(msg.as_ref().expect("the original is kept until the last"))
                    };
                    if let Err(e) = r.actor.tell(copy) {
                        first_err.get_or_insert(e);
                    }
                }
                first_err.map_or(Ok(()), Err)
            }
            Logic::ConsistentHashing(key) => {
                let hash = mix(key(&msg));
                // The owner first, without the walk's bookkeeping.
                let mut msg = match table.routees[ring_owner(&table.ring, hash)].actor.tell(msg) {
                    Err(SendError::ActorGone(m)) => m,
                    other => return other,
                };
                for idx in ring_order(&table.ring, hash, n).skip(1) {
                    match table.routees[idx].actor.tell(msg) {
                        // Gone but not yet removed: its keys move on the
                        // ring to where they will go anyway.
                        Err(SendError::ActorGone(m)) => msg = m,
                        other => return other,
                    }
                }
                Err(SendError::ActorGone(msg))
            }
            _ => {
                let first = self.first(&table.routees);
                let mut msg = msg;
                let mut refused: Option<fn(M) -> SendError<M>> = None;
                for i in 0..n {
                    match table.routees[(first + i) % n].actor.tell(msg) {
                        Err(SendError::MailboxFull(m)) => {
                            refused.get_or_insert(SendError::MailboxFull);
                            msg = m;
                        }
                        Err(SendError::LinkFull(m)) => {
                            refused.get_or_insert(SendError::LinkFull);
                            msg = m;
                        }
                        Err(SendError::ActorGone(m)) => msg = m,
                        other => return other,
                    }
                }
                let refusal = refused.unwrap_or(SendError::ActorGone);
                Err(refusal(msg))
            }
        }
    }

    /// Routes `msg`, waiting for room at the logic's first choice when
    /// every routee is full.
    async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        if let Logic::Broadcast(clone) = self.logic.kind {
            return self.broadcast_send(msg, clone).await;
        }
        let msg = match self.route_now(msg) {
            Err(SendError::MailboxFull(m) | SendError::LinkFull(m)) => m,
            other => return other,
        };
        let target = {
            let table = self.table.borrow();
            let n = table.routees.len();
            if n == 0 {
                return Err(self.no_routees(msg));
            }
            let idx = match &self.logic.kind {
                Logic::ConsistentHashing(key) => ring_owner(&table.ring, mix(key(&msg))),
                _ => self.first(&table.routees),
            };
            table.routees[idx].actor.clone()
        };
        target.send(msg).await
    }

    async fn broadcast_send(&self, msg: M, clone: fn(&M) -> M) -> Result<(), SendError<M>> {
        let targets: Vec<ActorRef<M>> = {
            let table = self.table.borrow();
            table.routees.iter().map(|r| r.actor.clone()).collect()
        };
        let Some((last, rest)) = targets.split_last() else {
            return Err(self.no_routees(msg));
        };
        let mut first_err = None;
        for r in rest {
            if let Err(e) = r.send(clone(&msg)).await {
                first_err.get_or_insert(e);
            }
        }
        if let Err(e) = last.send(msg).await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    #[cold]
    fn no_routees(&self, msg: M) -> SendError<M> {
        if let (Some(registry), Some(path)) = (self.registry.upgrade(), self.path.get()) {
            registry.dead_letter(
                std::any::type_name::<M>(),
                path,
                &DeadLetterReason::NoRoutee,
            );
        }
        SendError::ActorGone(msg)
    }
}

/// Replaces failed pool routees within a [`RestartLimit`]. Kept apart
/// from routing so that pools can move onto the runtime's own
/// supervision (restart strategies for `ctx.spawn`ed children) in one
/// place: this struct and [`RouterActor::terminated`]'s call of
/// [`replace`](Self::replace).
struct PoolSupervisor<M> {
    deploy: DeployFn<M>,
    limit: RestartLimit,
    /// When the replacements in the current window happened.
    recent: VecDeque<tokio::time::Instant>,
}

impl<M: Send + 'static> PoolSupervisor<M> {
    fn new(deploy: DeployFn<M>, limit: RestartLimit) -> Self {
        Self {
            deploy,
            limit,
            recent: VecDeque::new(),
        }
    }

    /// Whether one more restart fits the limit now; counts it if so.
    fn allow(&mut self, now: tokio::time::Instant) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|&t| now.duration_since(t) >= self.limit.within)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.limit.max_restarts as usize {
            return false;
        }
        self.recent.push_back(now);
        true
    }

    /// A fresh routee for `slot`, whose last one failed.
    ///
    /// # Errors
    /// The restart limit is used up (the router must fail), or `Ok(Err)`:
    /// the deploy failed (the slot is dropped).
    async fn replace(
        &mut self,
        system: &ActorSystem,
        slot: usize,
    ) -> Result<Result<ActorRef<M>, ActorError>, ActorError> {
        if !self.allow(tokio::time::Instant::now()) {
            return Err(format!(
                "pool routee restart limit reached ({} within {:?})",
                self.limit.max_restarts, self.limit.within
            )
            .into());
        }
        Ok((self.deploy)(system.clone(), slot).await)
    }
}

/// The router actor: management, and routing of [`RouterMsg::Route`].
struct RouterActor<M> {
    shared: Arc<Shared<M>>,
    supervisor: Option<PoolSupervisor<M>>,
}

impl<M: Send + 'static> RouterActor<M> {
    fn change(&self, f: impl FnOnce(&mut Vec<Routee<M>>) -> bool) -> bool {
        self.shared.table.send_if_modified(|t| {
            let changed = f(&mut t.routees);
            if changed {
                t.rebuild();
            }
            changed
        })
    }

    /// Takes the routee at `path` out of the table.
    fn take(&self, path: &ActorPath) -> Option<(ActorRef<M>, Option<usize>)> {
        let mut out = None;
        self.change(|routees| {
            let Some(i) = routees.iter().position(|r| r.actor.path() == path) else {
                return false;
            };
            let r = routees.remove(i);
            out = Some((r.actor, r.slot));
            true
        });
        out
    }
}

impl<M: Send + 'static> Actor for RouterActor<M> {
    type Msg = RouterMsg<M>;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        // Watched outside the table's lock (see the lock order).
        let routees: Vec<ActorRef<M>> = {
            let table = self.shared.table.borrow();
            table.routees.iter().map(|r| r.actor.clone()).collect()
        };
        for r in &routees {
            ctx.watch(r);
        }
        Ok(())
    }

    async fn handle(&mut self, msg: RouterMsg<M>, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            RouterMsg::Route(m) => {
                // `send` waits for room, so the hop loses nothing; what
                // no routee takes is a dead letter (counted there, or by
                // the routee that stopped), and so is one that does not
                // encode for a remote routee.
                match self.shared.send(m).await {
                    Err(SendError::Serialization(e)) => {
                        if let Some(registry) = self.shared.registry.upgrade() {
                            registry.dead_letter(
                                std::any::type_name::<M>(),
                                ctx.myself().path(),
                                &DeadLetterReason::Unencodable(e.to_string().into()),
                            );
                        }
                    }
                    // An ask in it fails at once with `ActorGone`: no
                    // routee is there to answer.
                    Err(SendError::ActorGone(m)) => {
                        reply::dropping(m, &NoReply::Stopped("router has no routee".to_owned()));
                    }
                    _ => {}
                }
            }
            RouterMsg::Add(actor, ack) => {
                // Only this actor writes the table: what it reads here
                // still holds when it writes below.
                let known = {
                    let table = self.shared.table.borrow();
                    table.routees.iter().any(|r| r.actor == actor)
                };
                if !known {
                    ctx.watch(&actor);
                    self.change(|routees| {
                        routees.push(Routee::member(actor));
                        true
                    });
                }
                let added = !known;
                if let Some(ack) = ack {
                    let _ = ack.tell(added);
                }
            }
            RouterMsg::Remove(path, ack) => {
                let removed = self.take(&path);
                if let Some((actor, slot)) = &removed {
                    ctx.unwatch(actor);
                    if slot.is_some() {
                        actor.stop();
                    }
                }
                if let Some(ack) = ack {
                    let _ = ack.tell(removed.is_some());
                }
            }
        }
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        // Not ours any more (removed by message): nothing to do.
        let Some((_, slot)) = self.take(&t.path) else {
            return Ok(());
        };
        if let (Some(_), StopReason::RestartLimitExceeded(why)) = (slot, &t.reason) {
            // A local pool's routee restarts in place; past the pool's
            // limit the pool fails, as a supervisor does.
            return Err(format!("pool routee restart limit reached: {why}").into());
        }
        let failed = matches!(t.reason, StopReason::Panicked(_) | StopReason::Failed(_));
        let (Some(slot), true, Some(supervisor)) = (slot, failed, self.supervisor.as_mut()) else {
            tracing::info!(router = %ctx.myself().path(), routee = %t.path, reason = %t.reason, "routee left the router");
            return Ok(());
        };
        match supervisor.replace(ctx.system(), slot).await? {
            Ok(actor) => {
                tracing::info!(router = %ctx.myself().path(), routee = %t.path, reason = %t.reason, new = %actor.path(), slot, "pool routee failed; replaced");
                ctx.watch(&actor);
                self.change(|routees| {
                    routees.push(Routee::owned(actor, slot));
                    true
                });
            }
            Err(e) => {
                tracing::warn!(router = %ctx.myself().path(), routee = %t.path, slot, error = %e, "pool routee failed and could not be replaced; slot dropped");
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _reason: &StopReason) {
        let mut owned = Vec::new();
        self.shared.table.send_modify(|t| {
            for r in t.routees.drain(..) {
                if r.slot.is_some() {
                    owned.push(r.actor);
                }
            }
            t.rebuild();
        });
        for actor in owned {
            actor.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{VIRTUAL_NODES, below, mix, ring_order, ring_owner, ring_points};

    #[test]
    fn removing_a_ring_member_moves_only_its_keys() {
        let keys = [11u64, 22, 33, 44, 55];
        let before = ring_points(keys.iter().copied());
        // Without the third member (index 2); the others shift down.
        let kept: Vec<u64> = keys.iter().copied().filter(|&k| k != 33).collect();
        let after = ring_points(kept.iter().copied());
        let mut moved = 0;
        for key in 0..10_000u64 {
            let h = mix(key);
            let was = keys[ring_order(&before, h, keys.len()).next().unwrap()];
            let now = kept[ring_order(&after, h, kept.len()).next().unwrap()];
            if was == 33 {
                moved += 1;
                // It goes where the old ring's second choice was.
                let second = keys[ring_order(&before, h, keys.len()).nth(1).unwrap()];
                assert_eq!(now, second);
            } else {
                assert_eq!(was, now, "key {key} moved without its owner leaving");
            }
        }
        // About a fifth of the keys were the removed member's.
        assert!((1_200..2_800).contains(&moved), "{moved} keys moved");
    }

    #[test]
    fn ring_order_visits_each_member_once() {
        let ring = ring_points([1u64, 2, 3].into_iter());
        assert_eq!(ring.len(), 3 * VIRTUAL_NODES);
        let mut order: Vec<usize> = ring_order(&ring, 12345, 3).collect();
        order.sort_unstable();
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!(
            ring_owner(&ring, 12345),
            ring_order(&ring, 12345, 3).next().unwrap()
        );
    }

    #[test]
    fn below_stays_in_range() {
        for r in [0, 1, u64::MAX / 2, u64::MAX] {
            assert!(below(r, 7) < 7);
        }
        assert_eq!(below(u64::MAX, 1), 0);
    }
}
