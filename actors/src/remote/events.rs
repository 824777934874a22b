//! What users can observe of remote nodes: [`RemoteEvent`].

/// Something that happened to a remote node, from
/// [`ActorSystem::subscribe_remote_events`](crate::ActorSystem::subscribe_remote_events).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteEvent {
    /// A link to `node` (incarnation `uid`) is up.
    Connected {
        /// The node (`name@host:port`).
        node: String,
        /// Its incarnation.
        uid: u64,
    },
    /// A link to `node` ended; the association reconnects with backoff while
    /// it has work (watches, system messages, queued messages).
    Disconnected {
        /// The node.
        node: String,
        /// Why the link ended.
        reason: String,
    },
    /// The failure detector judged `node` unreachable (phi reached the
    /// threshold). Every watcher of its actors got `Terminated` with
    /// [`StopReason::NodeUnreachable`](crate::StopReason::NodeUnreachable).
    Unreachable {
        /// The node.
        node: String,
        /// The incarnation last seen (0 if none ever answered).
        uid: u64,
    },
    /// A node judged unreachable is back, same incarnation: it answered a
    /// heartbeat, or a new link to it came up (after a healed partition).
    /// Watches ended by the unreachability stay ended; new ones work.
    Reachable {
        /// The node.
        node: String,
        /// Its incarnation.
        uid: u64,
    },
    /// An incarnation of `node` is quarantined: it restarted (a new uid
    /// answered), it shut down, or its system-message buffer overflowed.
    /// Its watchers got `Terminated`; messages to refs of it are dead
    /// letters from now on.
    Quarantined {
        /// The node.
        node: String,
        /// The quarantined incarnation.
        uid: u64,
        /// Why.
        reason: String,
    },
}
