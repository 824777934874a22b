//! [`SingletonSettings`]: which members may host a singleton, and how it
//! is handed over and buffered, with their defaults.

use std::{collections::BTreeSet, fmt, sync::Arc, time::Duration};

use super::Lease;
use crate::cluster::Member;

/// [`SingletonSettings::handover_timeout`]'s default.
pub const DEFAULT_HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// [`SingletonSettings::buffer_bytes`]'s default: 1 MiB, about ten
/// thousand small commands, enough to ride out a handover of a few
/// seconds without letting a stalled singleton eat a node's memory.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// Which members may host a singleton. The cluster has no roles, so
/// hosts are picked by node, on every node alike.
#[derive(Clone, Default)]
pub(super) enum Hosts {
    #[default]
    All,
    Named(BTreeSet<String>),
    Where(Arc<dyn Fn(&Member) -> bool + Send + Sync>),
}

impl Hosts {
    pub(super) fn admits(&self, m: &Member) -> bool {
        match self {
            Self::All => true,
            Self::Named(names) => {
                let system = m.node.split_once('@').map_or(m.node.as_str(), |(s, _)| s);
                names.contains(&m.node) || names.contains(system)
            }
            Self::Where(f) => f(m),
        }
    }
}

impl fmt::Debug for Hosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("All"),
            Self::Named(n) => f.debug_tuple("Named").field(n).finish(),
            Self::Where(_) => f.write_str("Where(..)"),
        }
    }
}

/// How a singleton is placed and handed over. Every hosting node must
/// use the same settings.
#[derive(Debug, Clone)]
pub struct SingletonSettings {
    pub(super) hosts: Hosts,
    pub(super) handover_timeout: Duration,
    pub(super) down_removal_margin: Option<Duration>,
    pub(super) buffer_bytes: usize,
    pub(super) lease: Option<Arc<dyn Lease>>,
}

impl Default for SingletonSettings {
    fn default() -> Self {
        Self::new()
    }
}

impl SingletonSettings {
    /// Every member may host; [`DEFAULT_HANDOVER_TIMEOUT`]; the margin is
    /// the cluster's `stable_after`; [`DEFAULT_BUFFER_BYTES`].
    pub fn new() -> Self {
        Self {
            hosts: Hosts::All,
            handover_timeout: DEFAULT_HANDOVER_TIMEOUT,
            down_removal_margin: None,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            lease: None,
        }
    }

    /// Only these nodes may host: each name is a node address
    /// (`name@host:port`) or a system name. Every node the filter admits must
    /// call [`Singleton::start`](super::Singleton::start); one that does not
    /// would be chosen and never run it. Default: every member.
    pub fn hosts_named<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.hosts = Hosts::Named(names.into_iter().map(Into::into).collect());
        self
    }

    /// Only the members `admits` says yes to may host (it must give every
    /// node the same answer for a member). As
    /// [`hosts_named`](Self::hosts_named) otherwise.
    pub fn hosts_where(mut self, admits: impl Fn(&Member) -> bool + Send + Sync + 'static) -> Self {
        self.hosts = Hosts::Where(Arc::new(admits));
        self
    }

    /// How long the next host waits for a host that left gracefully
    /// (still reachable, or gone without a word) to confirm that its
    /// instance stopped, before it starts its own. A leaving host stops
    /// its instance and confirms at once, so this only matters when its
    /// manager is gone (its node shut down before it could answer); too
    /// short, and a slow `stopped` hook may still run when the new
    /// instance starts. Default [`DEFAULT_HANDOVER_TIMEOUT`] (10 s).
    pub fn handover_timeout(mut self, d: Duration) -> Self {
        self.handover_timeout = d;
        self
    }

    /// How long a host that was downed (or vanished: removed) must have
    /// been so before the next host starts: the time the losing side of
    /// a partition needs to down itself and stop its instance. Default:
    /// the cluster's `stable_after` (the downing strategy decides both
    /// sides within about that). Shorter risks two instances during a
    /// partition.
    pub fn down_removal_margin(mut self, d: Duration) -> Self {
        self.down_removal_margin = Some(d);
        self
    }

    /// Bytes of messages a [`SingletonRef`](super::SingletonRef) holds while
    /// the singleton moves or is not known yet (each message counted at its
    /// encoded size plus its size in memory); past it, a message comes back as
    /// [`SendError::BufferFull`](crate::error::SendError::BufferFull) and is
    /// counted as a dead letter. Default [`DEFAULT_BUFFER_BYTES`] (1 MiB).
    pub fn buffer_bytes(mut self, bytes: usize) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// Starts the instance on a node only once the node holds `lease`
    /// (as owner `name@host:port#uid`), asking again every retry interval
    /// (a quarter of the handover timeout, between 50 ms and 1 s) while
    /// another owner holds it; the node releases it once its instance has
    /// stopped, before it tells the next host. Every hosting node must
    /// pass the same lease. Default: none (the downing strategy alone
    /// keeps one instance).
    pub fn lease(mut self, lease: Arc<dyn Lease>) -> Self {
        self.lease = Some(lease);
        self
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::cluster::MemberState;

    fn member(node: &str) -> Member {
        Member {
            node: node.to_owned(),
            uid: 1,
            udp: SocketAddr::from(([127, 0, 0, 1], 1)),
            state: MemberState::Up,
            started_ms: 1,
        }
    }

    #[test]
    fn hosts_are_named_by_node_address_or_system_name_or_picked_by_a_filter() {
        let (a, b) = (
            member("orders@10.0.0.1:2552"),
            member("billing@10.0.0.2:2552"),
        );
        assert!(Hosts::All.admits(&a) && Hosts::All.admits(&b));
        let by_system = SingletonSettings::new().hosts_named(["orders"]).hosts;
        assert!(by_system.admits(&a) && !by_system.admits(&b));
        let by_node = SingletonSettings::new()
            .hosts_named(["billing@10.0.0.2:2552"])
            .hosts;
        assert!(!by_node.admits(&a) && by_node.admits(&b));
        let filtered = SingletonSettings::new()
            .hosts_where(|m| m.node.contains("10.0.0.2"))
            .hosts;
        assert!(!filtered.admits(&a) && filtered.admits(&b));
        assert_eq!(format!("{filtered:?}"), "Where(..)");
    }
}
