//! What the [`Cluster`](super::Cluster) handles and the membership task
//! share: the node's identity and view, the event channels, the
//! counters, and the commands the handles send the task.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{broadcast, oneshot};

use super::{ClusterError, ClusterEvent, GroupEvent, groups, stats::Stats, view::View, wire::Id};
use crate::node::Node;

pub(super) struct Shared {
    pub(super) me: Id,
    pub(super) node: Arc<Node>,
    pub(super) groups: Arc<Mutex<groups::Table>>,
    pub(super) group_events: broadcast::Sender<GroupEvent>,
    pub(super) view: Mutex<View>,
    pub(super) events: broadcast::Sender<ClusterEvent>,
    pub(super) stats: Stats,
    /// The seed names in force (`ClusterConfig::set_seeds`, `Cluster::rejoin`).
    pub(super) seed_names: Arc<Mutex<Vec<String>>>,
    /// Whether any seed but this node is known: a node without one is the
    /// first of its cluster, joined at once.
    pub(super) seeds_configured: bool,
    /// `ClusterConfig::set_stable_after`, for what waits on the downing
    /// strategy (a singleton's handover margin).
    pub(super) stable_after: Duration,
    /// How long a new member takes to hear of the members: a probe
    /// period (gossip rides on probes) plus an announce interval (the
    /// seeds' answers), at most `stable_after`.
    pub(super) settle: Duration,
    /// Called, in order, the moment this node downs itself, before anyone
    /// hears of it (`Cluster::on_self_down`).
    pub(super) fences: Mutex<Vec<Fence>>,
}

/// What must stop the moment this node is down (a sharding region's
/// entities, a singleton's instance): it runs on the cluster's task, so
/// it only flags and queues stops, and never waits.
pub(super) type Fence = Box<dyn Fn() + Send + Sync>;

/// What a handle asks the membership task to do.
pub(super) enum Cmd {
    Leave(oneshot::Sender<()>),
    /// A new seed list (`Cluster::rejoin`).
    Rejoin(Vec<String>),
    /// `entry` (a serialized ref) joins (`true`) or leaves `group`.
    Group {
        group: String,
        entry: String,
        join: bool,
        done: Option<oneshot::Sender<Result<(), ClusterError>>>,
    },
}
