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

// The handle and its errors are in this file; the rest is split by job:
// - `logic`: `RoutingLogic` and the choices it makes, pure (the hash
//   ring, the random pick, the smallest mailbox);
// - `messages`: `RouterMsg`, what the router actor takes;
// - `table`: the routees and their ring, as the router actor writes them
//   and every handle reads them;
// - `route`: routing on the caller's thread (`tell`, `send`), trying
//   routees in the logic's order;
// - `pool`: how a pool makes its routees and replaces failed ones, within
//   its `RestartLimit`;
// - `manager`: the router actor: routees added, removed, watched and
//   replaced, and messages routed for other nodes;
// - `builder`: `RouterBuilder`, which starts the router actor over a
//   group or a pool.

use std::{fmt, sync::Arc, time::Duration};

use crate::{
    actor::ActorError,
    actor_ref::ActorRef,
    error::{AskError, SendError, SpawnError},
    path::ActorPath,
    // A pool's default restart limit is supervision's: 10 a minute.
    supervision::{DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_WINDOW},
};

mod builder;
mod logic;
mod manager;
mod messages;
mod pool;
mod route;
mod table;

pub use builder::RouterBuilder;
pub use logic::{RoutingLogic, VIRTUAL_NODES};
pub use messages::RouterMsg;
use route::Shared;

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

/// How many pool routee failures a router absorbs: at most
/// `max_restarts` replacements within any `within` window. One more and
/// the router fails ([`StopReason::Failed`]) and stops its routees, as
/// Akka's supervisor escalates.
///
/// [`StopReason::Failed`]: crate::StopReason::Failed
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
