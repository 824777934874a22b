//! Cluster membership: which nodes are up, from seed nodes, on
//! [foca](https://docs.rs/foca) (SWIM with the Inf. and Susp.
//! extensions).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use actors::{ActorSystem, cluster::{Cluster, ClusterConfig, MemberState}};
//! let system = ActorSystem::remote("orders", "10.0.0.5:2552".parse()?).await?;
//! let mut config = ClusterConfig::new();
//! config.set_seeds(["10.0.0.1:2552"])?;
//! let cluster = Cluster::join(&system, config).await?;
//! let mut events = cluster.subscribe();
//! while let Ok(e) = events.recv().await {
//!     if e.member.state == MemberState::Down {
//!         println!("{} is down", e.member.node);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Model
//! - Each node runs one membership task and one UDP socket, by default on
//!   the same IP address and port number as its TCP endpoint. Membership
//!   packets never use the TCP links, so a member keeps no TCP connection
//!   for membership: SWIM probes one random member per probe period (and
//!   a few others indirectly when that fails), whatever the cluster size.
//! - Every packet is authenticated: HMAC-SHA256 with a key derived from
//!   the nodes' shared secret (the same secret the TCP handshake proves).
//!   A node without the secret cannot join, and forged, altered or
//!   malformed packets are refused and counted ([`ClusterStats`]).
//! - A member is identified by its node address (`name@host:port`, as in
//!   actor paths) and the uid of its incarnation. States: [`MemberState`].
//!   Members judged down stay down: their incarnation is quarantined in
//!   remoting (watchers of their actors get `Terminated` with reason
//!   "quarantined: member down"), and only a restart (a new uid) rejoins.
//!   A node that the others downed while its process stood still (for
//!   `stable_after` or more) hears so from the first member it reaches
//!   when it runs again, and is down in its own view too, as when its own
//!   downing strategy downs it.
//!   The other way round, when remoting quarantines an incarnation (its
//!   link's failure detector, or the node restarting), membership
//!   declares it down: one view of who is alive.
//! - [`Cluster::leave`] tells every member directly and gossips the
//!   leave, so the others remove it at once ([`MemberState::Left`])
//!   instead of after a failure detector's timeout.
//! - A suspicion is cleared only by the suspect itself (it bumps its
//!   incarnation), so it must learn of it. Gossip of a suspicion is
//!   bounded and may be spent during a partition; so a member that hears
//!   from a member it holds suspect, at an incarnation that does not
//!   refute it, tells it directly (a suspicion notice), and it refutes.
//! - [`RouterBuilder::cluster_group`](crate::RouterBuilder::cluster_group): a router whose routees follow a
//!   group.
//!
//! # Costs and bounds
//! - One task, one socket and a member table per node; the table holds
//!   every member and, for [`ClusterConfig::set_remove_down_after`], the
//!   members that went down. Only authenticated packets reach foca, so
//!   only nodes that know the secret can add members.
//! - Traffic per node: about one probe and its answer per probe period
//!   plus gossip, each packet at most
//!   [`ClusterConfig::set_max_packet_size`] bytes; independent of cluster
//!   size except for the piggybacked updates.

//!
//! # Layout
//! - `member`: [`Member`], [`MemberState`] and the events subscribers
//!   hear; `stats`: [`ClusterStats`] and the counters behind them;
//!   `error`: [`ClusterError`].
//! - `wire` (packet format, identities, foca's codec), `groups` (the
//!   group table and this node's own entries), `suspicion` (notices that
//!   make a suspect refute), `downing` (the downing strategies), `view`
//!   (foca's table turned into the changes subscribers hear) and
//!   `contact` (whom a node announces itself to, and when it warns it is
//!   alone): the decisions, pure.
//! - `config`: [`ClusterConfig`].
//! - `shared`: what the handles and the membership task share, and the
//!   commands the handles send it.
//! - `task`: the membership task and its event loop; `resolution`: the
//!   downing strategy's decisions carried out by it.
//! - `handle`: [`Cluster`], joining and the view; `routing`: its group
//!   calls and routers that follow a group.

mod config;
mod contact;
mod downing;
mod error;
mod groups;
mod handle;
mod member;
mod resolution;
mod routing;
mod shared;
mod stats;
mod suspicion;
mod task;
mod view;
mod wire;

use std::sync::{Mutex, PoisonError};

pub use config::ClusterConfig;
pub use downing::{DEFAULT_ACQUIRE_DELAY_FOR_MINORITY, DowningStrategy, FileLease, Lease};
pub use error::ClusterError;
pub use handle::Cluster;
pub use member::{ClusterEvent, GroupEvent, Member, MemberState};
pub use stats::ClusterStats;

pub use crate::config::DEFAULT_MAX_MEMBERS;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
