//! Cluster sharding: entities addressed by id, each running on one node
//! of the cluster at a time, started on their first message and moved
//! when members join, leave or go down (Akka's cluster sharding, without
//! a coordinator).
//!
//! ```no_run
//! # use std::time::Duration;
//! # use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage};
//! # use actors::cluster::{Cluster, ClusterConfig};
//! use actors::sharding::{EntityId, Sharding, ShardingSettings};
//! # use serde::{Deserialize, Serialize};
//! #[derive(Debug, Serialize, Deserialize, RemoteMessage)]
//! enum CartMsg { Add(u32), Total(ActorRef<u32>) }
//! struct Cart { total: u32 }
//! impl Actor for Cart {
//!     type Msg = CartMsg;
//!     async fn handle(&mut self, msg: CartMsg, _: &mut Ctx<Self>) -> ActorResult {
//!         match msg {
//!             CartMsg::Add(n) => self.total += n,
//!             CartMsg::Total(r) => { let _ = r.tell(self.total); }
//!         }
//!         Ok(())
//!     }
//! }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let system = ActorSystem::remote("shop", "10.0.0.5:2552".parse()?).await?;
//! let mut config = ClusterConfig::new();
//! config.set_seeds(["10.0.0.1:2552"])?;
//! let cluster = Cluster::join(&system, config).await?;
//! let carts = Sharding::start(&system, &cluster, "Cart", |_: &EntityId| Cart { total: 0 },
//!     ShardingSettings::default()).await?;
//! let cart = carts.entity_ref("cart-42");
//! cart.tell(CartMsg::Add(3))?;
//! let total = cart.ask(CartMsg::Total, Duration::from_secs(5)).await?;
//! # let _ = total; Ok(()) }
//! ```
//!
//! # Model
//! - An entity id maps to one of [`ShardingSettings::number_of_shards`]
//!   shards by a fixed hash; a shard's owner is chosen by rendezvous
//!   hashing over the hosting members that are up (or suspect), by node
//!   address and incarnation. Every node computes it from its own view of
//!   the membership: there is no coordinator to wait for or to lose.
//! - One region actor per type and node (`/user/sharding-{type}`) routes
//!   messages: it delivers to entities of the shards it holds, forwards
//!   the others to their owner, and buffers messages of shards that are
//!   moving (bounded by [`ShardingSettings::buffer_bytes`] per shard;
//!   past it messages are dropped, counted, and logged as dead letters
//!   with reason `buffer_full`). What it forwards to another region
//!   waits in an outbox bounded by [`ShardingSettings::outbox_bytes`]
//!   while that region or its link is slow; past it, messages for
//!   entities are dropped and counted the same way, and the shard
//!   protocol's messages are kept.
//! - A region activates a shard only after every other region that may
//!   hold it has released it: stopped the shard's entities (each gets a
//!   normal stop after what is queued, its `stopped` hook runs), forwarded
//!   what it buffered, and answered. A member that is down or left counts
//!   as released only after [`ShardingSettings::down_removal_margin`],
//!   so that a downed node (which shuts itself down under the downing
//!   strategy) has stopped its entities first. So at most one instance of
//!   an entity is alive at a time, under the limits in
//!   `docs/FAILURE_SEMANTICS.md`.
//! - Messages from one sender through one node's region reach the entity
//!   in the order sent, across moves too, while the members' views agree
//!   during the move (`docs/SHARDING.md` states it exactly).
//! - Every member the [`ShardingSettings::hosts`] filter admits must
//!   start sharding for the type (hosting, or
//!   [`proxy_only`](ShardingSettings::proxy_only)): a shard moves only
//!   once each of them answered.

mod outbox;
mod pause;
mod region;
mod shard;
mod store;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::{broadcast, oneshot};

use crate::{
    actor::{Actor, Ctx},
    actor_ref::ActorRef,
    cluster::{Cluster, ClusterError},
    error::{AskError, SendError, SpawnError},
    serialization::RemoteMessage,
    system::ActorSystem,
};
use region::{Local, Region, RegionMsg};
pub use store::{EntityStore, FileEntityStore, MemoryEntityStore, StoreError};

/// An entity's id: any string (the shard is a hash of it).
pub type EntityId = String;

/// Default number of shards: 100 (Akka's advice: ten times the largest
/// number of nodes you plan to run; each costs a map entry per region).
pub const DEFAULT_NUMBER_OF_SHARDS: u32 = 100;

/// Default bound of a shard's buffer while it moves: 1 MiB of encoded
/// messages.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// Default time a region waits for a shard's entities to stop (and
/// before asking again for a release that did not come): 10 s.
pub const DEFAULT_HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// Default bound of a region's outbox to another region: 4 MiB of
/// messages. An outbox carries the messages of every shard this node
/// forwards to that region, so it gets a few shard buffers' worth
/// ([`DEFAULT_BUFFER_BYTES`]); it only fills when that region, or the
/// link to it, is slower than the senders for long.
pub const DEFAULT_OUTBOX_BYTES: usize = 4 << 20;

/// Which members host a type's entities: a predicate on node addresses
/// (`name@host:port`).
pub type HostFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How a type is sharded. Every node must use the same
/// `number_of_shards` and hosts filter for a type.
#[derive(Clone)]
pub struct ShardingSettings {
    /// Shards per type (default [`DEFAULT_NUMBER_OF_SHARDS`]). More
    /// shards spread entities more evenly; each costs a little memory per
    /// region.
    pub number_of_shards: u32,
    /// Stop an entity that had no message for this long (default: never);
    /// its next message starts it again.
    pub passivate_after: Option<Duration>,
    /// How long a handing-off shard's entities may take to stop before
    /// they are stopped at once (their queued messages dropped), and how
    /// often a release is asked for again (default
    /// [`DEFAULT_HANDOFF_TIMEOUT`]).
    pub handoff_timeout: Duration,
    /// Bytes of encoded messages a shard buffers while it moves (default
    /// [`DEFAULT_BUFFER_BYTES`]); messages past it are dropped and
    /// counted.
    pub buffer_bytes: usize,
    /// Bytes a region's outbox to another region may hold (default
    /// [`DEFAULT_OUTBOX_BYTES`]; at least 1, see
    /// [`outbox_bytes`](Self::outbox_bytes)): messages this node forwards
    /// to that region wait there for room on the link. Each message counts
    /// at its encoded size plus its envelope in memory. Past the bound,
    /// messages for entities are dropped, counted in
    /// [`ShardingState::dropped`] and logged as dead letters
    /// (`buffer_full`); the shard protocol's own messages are never
    /// dropped. The node holds at most this much per other hosting
    /// region, plus the protocol's few messages.
    pub outbox_bytes: usize,
    /// How long a member that went down or left still counts as holding
    /// its shards (Akka's down-removal-margin). Default `None`: the
    /// cluster's `stable_after` ([`ClusterConfig::set_stable_after`]), the
    /// time the downing strategy gives the losing side of a partition to
    /// down itself; the singleton uses the same default, so one cluster
    /// setting serves both. Shorter risks two live instances of an entity
    /// when the downed side is slow to stop; longer keeps its shards'
    /// messages buffered longer.
    ///
    /// [`ClusterConfig::set_stable_after`]: crate::cluster::ClusterConfig::set_stable_after
    pub down_removal_margin: Option<Duration>,
    /// Which members host entities (default: every member). Members it
    /// admits must start sharding for the type, hosting or proxy.
    pub hosts: Option<HostFilter>,
    /// Start no entity here: only route (default false).
    pub proxy: bool,
    /// Where entity ids are remembered, so that they restart when their
    /// shard starts elsewhere (default: none; entities start on their
    /// first message).
    pub remember_entities: Option<Arc<dyn EntityStore>>,
    /// How often the region reads membership and checks its timers
    /// (default 100 ms).
    pub tick: Duration,
}

impl fmt::Debug for ShardingSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardingSettings")
            .field("number_of_shards", &self.number_of_shards)
            .field("passivate_after", &self.passivate_after)
            .field("handoff_timeout", &self.handoff_timeout)
            .field("buffer_bytes", &self.buffer_bytes)
            .field("outbox_bytes", &self.outbox_bytes)
            .field("down_removal_margin", &self.down_removal_margin)
            .field("hosts", &self.hosts.as_ref().map(|_| "filter"))
            .field("proxy", &self.proxy)
            .field("remember_entities", &self.remember_entities.is_some())
            .field("tick", &self.tick)
            .finish()
    }
}

impl Default for ShardingSettings {
    fn default() -> Self {
        Self {
            number_of_shards: DEFAULT_NUMBER_OF_SHARDS,
            passivate_after: None,
            handoff_timeout: DEFAULT_HANDOFF_TIMEOUT,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            outbox_bytes: DEFAULT_OUTBOX_BYTES,
            down_removal_margin: None,
            hosts: None,
            proxy: false,
            remember_entities: None,
            tick: Duration::from_millis(100),
        }
    }
}

impl ShardingSettings {
    /// The defaults, for a node that only sends: it starts no entity.
    pub fn proxy_only() -> Self {
        Self {
            proxy: true,
            ..Self::default()
        }
    }

    /// Hosts entities only on members whose node address `filter`
    /// admits.
    pub fn hosts(mut self, filter: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.hosts = Some(Arc::new(filter));
        self
    }

    /// Bounds each region-to-region outbox at `bytes`
    /// ([`outbox_bytes`](Self::outbox_bytes)).
    ///
    /// # Errors
    /// [`ShardingError::NoOutboxBytes`] for 0: no message could ever be
    /// forwarded.
    pub fn outbox_bytes(mut self, bytes: usize) -> Result<Self, ShardingError> {
        self.outbox_bytes = bytes;
        self.validate()?;
        Ok(self)
    }

    /// Checks the settings as [`Sharding::start`] does.
    ///
    /// # Errors
    /// [`ShardingError::NoShards`], [`ShardingError::NoOutboxBytes`].
    pub fn validate(&self) -> Result<(), ShardingError> {
        if self.number_of_shards == 0 {
            return Err(ShardingError::NoShards);
        }
        if self.outbox_bytes == 0 {
            return Err(ShardingError::NoOutboxBytes);
        }
        Ok(())
    }

    /// The down-removal margin in force: the one set, else the cluster's
    /// `stable_after`.
    pub(crate) fn margin(&self, stable_after: Duration) -> Duration {
        self.down_removal_margin.unwrap_or(stable_after)
    }
}

/// Why sharding could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// The type name is not a valid actor name, or sharding already runs
    /// for it on this node (one region per type and node).
    #[error("cannot start the region of {type_name}: {source}")]
    Spawn {
        /// The type name.
        type_name: String,
        /// Why.
        source: SpawnError,
    },
    /// The region could not register with the cluster (membership
    /// stopped).
    #[error("cluster: {0}")]
    Cluster(#[from] ClusterError),
    /// `number_of_shards` is zero: set at least 1.
    #[error("number_of_shards must be at least 1")]
    NoShards,
    /// `outbox_bytes` is zero: no message could be forwarded to another
    /// region. Set at least the size of the largest message, or leave
    /// the default.
    #[error("outbox_bytes must be at least 1")]
    NoOutboxBytes,
}

/// A shard's state on this node, in [`ShardingState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardPhase {
    /// Held here: its entities run here.
    Active,
    /// Owned here in this node's view; waiting for the other regions to
    /// release it (its messages are buffered).
    Awaiting,
    /// Moving away: its entities are stopping (its messages are
    /// buffered).
    HandingOff,
    /// Not held here (listed when it buffers messages).
    Inactive,
}

/// One shard in [`ShardingState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard number.
    pub shard: u32,
    /// Its state here.
    pub phase: ShardPhase,
    /// Its live entities here.
    pub entities: usize,
    /// Messages buffered for it here.
    pub buffered: usize,
}

/// What a node's region holds, from [`Sharding::state`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardingState {
    /// Shards active, moving or buffering here, by shard number.
    pub shards: Vec<ShardInfo>,
    /// The hosting members (node addresses) shards are spread over, in
    /// this node's view.
    pub hosts: Vec<String>,
    /// Live entities here.
    pub entities: usize,
    /// Messages buffered here.
    pub buffered: usize,
    /// Bytes queued here for other regions (every outbox; each is
    /// bounded by [`ShardingSettings::outbox_bytes`]).
    pub outbox_bytes: usize,
    /// Shards this node has handed off so far.
    pub handoffs: u64,
    /// Shards activated here so far.
    pub activations: u64,
    /// Messages dropped here so far (a shard's buffer or an outbox full,
    /// an entity's mailbox full, or a region gone).
    pub dropped: u64,
}

/// A shard moved, seen from this node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardEvent {
    /// The shard is held here from now on.
    Activated {
        /// The shard number.
        shard: u32,
    },
    /// The shard's entities here have stopped; it was released to
    /// `to` (a node address), if an owner was known.
    HandedOff {
        /// The shard number.
        shard: u32,
        /// The new owner's node.
        to: Option<String>,
    },
}

/// Counters the region keeps and the handle reads.
#[derive(Debug, Default)]
struct Counters {
    handoffs: AtomicU64,
    activations: AtomicU64,
    dropped: AtomicU64,
}

/// Sharding of one entity type on this node: a handle on its region.
/// Cheap to clone.
pub struct Sharding<M> {
    region: ActorRef<RegionMsg<M>>,
    type_name: Arc<str>,
    events: broadcast::Sender<ShardEvent>,
    counters: Arc<Counters>,
}

impl<M> Clone for Sharding<M> {
    fn clone(&self) -> Self {
        Self {
            region: self.region.clone(),
            type_name: self.type_name.clone(),
            events: self.events.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<M> fmt::Debug for Sharding<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("type_name", &self.type_name)
            .field("region", &self.region)
            .finish()
    }
}

/// Events a slow subscriber may fall behind before it misses some.
const EVENT_CAPACITY: usize = 1024;

impl<M: RemoteMessage> Sharding<M> {
    /// Starts sharding of `type_name` on this node: its region actor
    /// (`/user/sharding-{type_name}`) and, unless `settings.proxy`, its
    /// entities, each made by `factory` from its id on its first message.
    /// Call it on every node the hosts filter admits, with the same
    /// settings.
    ///
    /// A graceful shutdown of the system
    /// ([`ActorSystem::shutdown_gracefully`]) hands this node's shards off
    /// first, before the node leaves the cluster.
    ///
    /// # Errors
    /// See [`ShardingError`].
    pub async fn start<E, F>(
        system: &ActorSystem,
        cluster: &Cluster,
        type_name: &str,
        factory: F,
        settings: ShardingSettings,
    ) -> Result<Self, ShardingError>
    where
        E: Actor<Msg = M>,
        F: Fn(&EntityId) -> E + Send + Sync + 'static,
    {
        settings.validate()?;
        let margin = settings.margin(cluster.stable_after());
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let counters = Arc::new(Counters::default());
        let name = format!("sharding-{type_name}");
        let me = cluster.myself();
        let fenced = Arc::new(AtomicBool::new(false));
        let region = Region::new(
            type_name,
            region::RegionParts {
                me: shard::RegionId {
                    node: me.node.clone(),
                    uid: me.uid,
                },
                factory: Arc::new(factory),
                cluster: cluster.clone(),
                margin,
                settings,
                events: events.clone(),
                counters: counters.clone(),
                fenced: fenced.clone(),
            },
        );
        let region = system
            .spawn_named(&name, region)
            .map_err(|source| ShardingError::Spawn {
                type_name: type_name.to_owned(),
                source,
            })?;
        let this = Self {
            region,
            type_name: type_name.into(),
            events,
            counters,
        };
        // Down: the entities stop where they stand, before anyone hears
        // of it, and nothing starts here again (docs/SHARDING.md).
        let registry = Arc::downgrade(system.registry());
        let under = this.region.path().elements().to_owned();
        cluster.on_self_down(move || {
            fenced.store(true, Ordering::Release);
            if let Some(registry) = registry.upgrade() {
                let n = registry.stop_subtree(&under);
                tracing::debug!(region = %under, stopped = n, "sharding: this node is down, its entities stop");
            }
        });
        // A graceful shutdown hands the shards off before the cluster
        // leave (registered before it, so it runs first).
        let leaver = this.clone();
        system.inner.before_graceful(true, move || async move {
            leaver.leave(DEFAULT_HANDOFF_TIMEOUT).await;
        });
        // Join the hosting group only once the region runs.
        this.region
            .tell(RegionMsg::Local(Local::Tick))
            .map_err(|_| ShardingError::Cluster(ClusterError::Stopped))?;
        Ok(this)
    }

    /// A ref to the entity `id`, from this node: it starts on its first
    /// message, on the node that owns its shard.
    pub fn entity_ref(&self, id: impl Into<EntityId>) -> EntityRef<M> {
        EntityRef {
            region: self.region.clone(),
            id: id.into(),
        }
    }

    /// What this node holds: shards, entities, buffered messages and
    /// counters.
    pub async fn state(&self) -> ShardingState {
        let (tx, rx) = oneshot::channel();
        if self
            .region
            .tell(RegionMsg::Local(Local::State(tx)))
            .is_err()
        {
            return self.counted(ShardingState::default());
        }
        let state = rx.await.unwrap_or_default();
        self.counted(state)
    }

    fn counted(&self, mut s: ShardingState) -> ShardingState {
        s.handoffs = self.counters.handoffs.load(Ordering::Relaxed);
        s.activations = self.counters.activations.load(Ordering::Relaxed);
        s.dropped = self.counters.dropped.load(Ordering::Relaxed);
        s
    }

    /// Shard moves seen from this node, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ShardEvent> {
        self.events.subscribe()
    }

    /// Stops hosting on this node: every shard held here is handed off
    /// (its entities stop, what is buffered moves on), the other regions
    /// stop routing here, and then this region stops. Waits at most
    /// `within`; returns whether everything was handed off in time. Run
    /// by [`ActorSystem::shutdown_gracefully`] before the node leaves the
    /// cluster.
    pub async fn leave(&self, within: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        if self
            .region
            .tell(RegionMsg::Local(Local::Retire(tx)))
            .is_err()
        {
            return true;
        }
        tokio::time::timeout(within, rx)
            .await
            .is_ok_and(|r| r.unwrap_or(true))
    }

    /// The entity type's name.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }
}

/// A ref to one entity, by id, through this node's region: the same
/// calls as an [`ActorRef`]. Cheap to clone.
pub struct EntityRef<M> {
    region: ActorRef<RegionMsg<M>>,
    id: EntityId,
}

impl<M> Clone for EntityRef<M> {
    fn clone(&self) -> Self {
        Self {
            region: self.region.clone(),
            id: self.id.clone(),
        }
    }
}

impl<M> fmt::Debug for EntityRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityRef").field("id", &self.id).finish()
    }
}

/// The user message back from a refused local send to the region.
fn unwrap_send<M>(e: SendError<RegionMsg<M>>) -> SendError<M> {
    let back = |m: RegionMsg<M>| match m {
        RegionMsg::Local(Local::Send { msg, .. }) => msg,
        // An EntityRef only ever sends `Local::Send`.
        _ => unreachable!("an entity ref sends only user messages"),
    };
    match e {
        SendError::MailboxFull(m) => SendError::MailboxFull(back(m)),
        SendError::LinkFull(m) => SendError::LinkFull(back(m)),
        SendError::ActorGone(m) => SendError::ActorGone(back(m)),
        SendError::Unresolved(m, why) => SendError::Unresolved(back(m), why),
        SendError::Serialization(s) => SendError::Serialization(s),
        SendError::BufferFull(m, bound) => SendError::BufferFull(back(m), bound),
    }
}

impl<M: RemoteMessage> EntityRef<M> {
    /// The entity's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn wrap(&self, msg: M) -> RegionMsg<M> {
        RegionMsg::Local(Local::Send {
            entity: self.id.clone(),
            msg,
        })
    }

    /// Sends without waiting, as [`ActorRef::tell`]: refused when this
    /// node's region's mailbox is full.
    ///
    /// # Errors
    /// As [`ActorRef::tell`], for this node's region; the message comes
    /// back.
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.region.tell(self.wrap(msg)).map_err(unwrap_send)
    }

    /// Sends, waiting for room in this node's region's mailbox, as
    /// [`ActorRef::send`].
    ///
    /// # Errors
    /// As [`ActorRef::send`].
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        self.region.send(self.wrap(msg)).await.map_err(unwrap_send)
    }

    /// Asks the entity, as [`ActorRef::ask`]: `make` builds the message
    /// around a reply ref; waits at most `timeout`.
    ///
    /// # Errors
    /// As [`ActorRef::ask`]: [`AskError::Timeout`] also when the message
    /// was lost with a node that died.
    pub async fn ask<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        let id = self.id.clone();
        self.region
            .ask(
                |r| {
                    RegionMsg::Local(Local::Send {
                        entity: id,
                        msg: make(r),
                    })
                },
                timeout,
            )
            .await
    }
}

/// Asks the region to stop this entity (Akka's `Passivate`): it handles
/// what is already in its mailbox, then stops; messages that arrive
/// meanwhile are kept and start it again. For an actor that is not a
/// sharded entity this does nothing.
pub fn passivate<E: Actor>(ctx: &Ctx<E>)
where
    E::Msg: RemoteMessage,
{
    region::passivate(ctx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_outbox_bound_is_refused_by_the_setter_and_by_validate() {
        assert!(matches!(
            ShardingSettings::default().outbox_bytes(0),
            Err(ShardingError::NoOutboxBytes)
        ));
        let s = ShardingSettings::default()
            .outbox_bytes(64 << 10)
            .expect("a bound of 64 KiB");
        assert_eq!(s.outbox_bytes, 64 << 10);
        let zero = ShardingSettings {
            outbox_bytes: 0,
            ..ShardingSettings::default()
        };
        assert!(matches!(zero.validate(), Err(ShardingError::NoOutboxBytes)));
        assert_eq!(
            ShardingSettings::default().outbox_bytes,
            DEFAULT_OUTBOX_BYTES
        );
    }
}
