//! How actors end: [`StopReason`] and the [`Terminated`] notice that
//! watchers receive. Plain data, shared by the runtime and the wire.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::path::ActorPath;

/// Why an actor stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StopReason {
    /// It was stopped (by itself, by a `stop` call, or it finished).
    Stopped,
    /// Its handler panicked, with the panic message.
    Panicked(String),
    /// Its system shut down.
    SystemShutdown,
    /// Its node can no longer be reached (connection lost or failure
    /// detector); the actor may still be running there.
    NodeUnreachable(String),
    /// There was no such actor when it was watched.
    NotFound,
    /// A hook returned an error ([`ActorError`](crate::ActorError)), with
    /// its message.
    Failed(String),
    /// It failed more often than its supervisor's restart limit allows
    /// ([`SupervisorStrategy::with_limit`](crate::SupervisorStrategy::with_limit)),
    /// with the limit and the last failure. Last in the enum: the variant
    /// index travels on the wire to remote watchers.
    RestartLimitExceeded(String),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::Panicked(m) => write!(f, "panicked: {m}"),
            Self::SystemShutdown => f.write_str("system shut down"),
            Self::NodeUnreachable(r) => write!(f, "node unreachable: {r}"),
            Self::NotFound => f.write_str("no such actor"),
            Self::Failed(m) => write!(f, "failed: {m}"),
            Self::RestartLimitExceeded(m) => write!(f, "restart limit exceeded: {m}"),
        }
    }
}

/// A watched actor has terminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// The watched actor's path.
    pub path: ActorPath,
    /// Why it terminated.
    pub reason: StopReason,
}
