//! The [`Actor`] trait, the context handed to its hooks, and the
//! termination types that watchers receive.

use std::{fmt, future::Future};

use serde::{Deserialize, Serialize};

use crate::{ActorPath, ActorRef, ActorSystem, watch::WatchSink};

/// An actor: state plus a handler for its messages, run one message at a
/// time on its own task.
///
/// ```
/// use actors::{Actor, Ctx};
/// struct Counter(u64);
/// impl Actor for Counter {
///     type Msg = u64;
///     async fn handle(&mut self, n: u64, _ctx: &mut Ctx<Self>) {
///         self.0 += n;
///     }
/// }
/// ```
pub trait Actor: Send + Sized + 'static {
    /// The messages this actor takes.
    type Msg: Send + 'static;

    /// Runs once before the first message.
    fn started(&mut self, ctx: &mut Ctx<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Handles one message. A panic here stops the actor with
    /// [`StopReason::Panicked`]; its watchers see that reason and the rest
    /// of the system goes on.
    fn handle(&mut self, msg: Self::Msg, ctx: &mut Ctx<Self>) -> impl Future<Output = ()> + Send;

    /// An actor this one watches (see [`Ctx::watch`]) has terminated.
    fn terminated(
        &mut self,
        t: Terminated,
        ctx: &mut Ctx<Self>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (t, ctx);
        async {}
    }

    /// Runs once after the last message, unless the actor panicked.
    fn stopped(&mut self, reason: &StopReason) -> impl Future<Output = ()> + Send {
        let _ = reason;
        async {}
    }
}

/// What an actor's hooks can reach: itself, its system, and control of its
/// own life.
pub struct Ctx<A: Actor> {
    pub(crate) myself: ActorRef<A::Msg>,
    pub(crate) system: ActorSystem,
    pub(crate) stop: bool,
    pub(crate) sink: WatchSink,
}

impl<A: Actor> fmt::Debug for Ctx<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").field("myself", &self.myself).finish()
    }
}

impl<A: Actor> Ctx<A> {
    /// A ref to this actor.
    pub fn myself(&self) -> &ActorRef<A::Msg> {
        &self.myself
    }

    /// The system this actor runs in.
    pub fn system(&self) -> &ActorSystem {
        &self.system
    }

    /// Stops this actor after the current message; messages still in its
    /// mailbox become dead letters.
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Watches `other`: when it stops (or its node becomes unreachable),
    /// this actor's [`Actor::terminated`] runs with the reason. Watching an
    /// actor that is already gone delivers `Terminated` at once.
    pub fn watch<N: Send + 'static>(&self, other: &ActorRef<N>) {
        other.add_watcher(self.sink.clone());
    }
}

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
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::Panicked(m) => write!(f, "panicked: {m}"),
            Self::SystemShutdown => f.write_str("system shut down"),
            Self::NodeUnreachable(r) => write!(f, "node unreachable: {r}"),
            Self::NotFound => f.write_str("no such actor"),
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
