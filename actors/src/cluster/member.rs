//! The view's entries and its events: [`Member`] and its [`MemberState`],
//! and what subscribers hear ([`ClusterEvent`], [`GroupEvent`]).

use std::{fmt, net::SocketAddr};

/// A member's state, as this node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemberState {
    /// This node, before any other member answered it.
    Joining,
    /// Alive: it answers probes.
    Up,
    /// Unreachable: it missed probes, or remoting lost its link and its address
    /// refuses connections. It is up again when it refutes the suspicion; the
    /// [`DowningStrategy`](super::DowningStrategy) decides, once the view has
    /// been stable for
    /// [`ClusterConfig::set_stable_after`](super::ClusterConfig::set_stable_after),
    /// whether it is down (or this node is). Akka calls this unreachable.
    Suspect,
    /// Judged dead: by the downing strategy (for this node itself: its
    /// side lost), or by remoting quarantining its incarnation (it
    /// restarted or shut down). Its incarnation never comes back.
    Down,
    /// This node, after [`Cluster::leave`](super::Cluster::leave).
    Leaving,
    /// It left gracefully ([`Cluster::leave`](super::Cluster::leave)).
    Left,
    /// Forgotten: down or left for longer than
    /// [`ClusterConfig::set_remove_down_after`](super::ClusterConfig::set_remove_down_after).
    /// The last event about it.
    Removed,
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Joining => "joining",
            Self::Up => "up",
            Self::Suspect => "suspect",
            Self::Down => "down",
            Self::Leaving => "leaving",
            Self::Left => "left",
            Self::Removed => "removed",
        })
    }
}

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its node address, as in actor paths (`name@host:port`).
    pub node: String,
    /// The uid of its incarnation (a restarted node has a new one).
    pub uid: u64,
    /// Where its membership packets go.
    pub udp: SocketAddr,
    /// Its state.
    pub state: MemberState,
    /// When its membership started, in milliseconds since the Unix epoch on its
    /// own clock (unique per node and growing even when a system leaves and
    /// joins again within a millisecond). The lower, the older: the age
    /// [`DowningStrategy::KeepOldest`](super::DowningStrategy::KeepOldest) and
    /// a cluster singleton's placement compare, ties broken by `node`.
    pub started_ms: u64,
}

/// A change of one member's state, in the order this node saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// The member, in its new state.
    pub member: Member,
    /// Its state before; `None` for a member this node did not know.
    pub from: Option<MemberState>,
}

/// A group's entries changed (an actor joined or left it, or a member with
/// entries in it went away); [`Cluster::group`](super::Cluster::group) lists it
/// now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    /// The group's name.
    pub group: String,
}
