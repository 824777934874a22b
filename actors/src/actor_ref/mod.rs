//! Typed actor refs: the same API whether the actor is local, on another
//! node, or the reply slot of an `ask`.
//!
//! [`ActorRef`] holds what it points at (`Inner`): a local actor's cell,
//! an ask's reply slot, a remote actor (two variants, so that a plain
//! remote `tell` pays no test for extension blocks), or nothing (a path
//! that resolved to no actor). This file has the type, its constructors,
//! `tell` and the life methods (`stop`, `watch`); the rest is split by job:
//! - `remote`: [`RemoteRef`], a ref to an actor on another node, its
//!   `tell` when the message may carry an extension block, and what a
//!   remote send's failure means to the caller;
//! - `reply`: reply refs: the handles of a local ask's slot
//!   (`ReplyHandle`), and a decoded ref to another node's slot, which tells
//!   that node when it is dropped unanswered;
//! - `send`: [`send`](ActorRef::send), which waits for room, and its
//!   future, [`SendFuture`];
//! - `ask`: [`ask`](ActorRef::ask), request-reply within a timeout;
//! - `codec`: a ref inside a message, serialized as its path and the
//!   manifest id of the type it takes.

use std::{
    any::Any,
    fmt,
    sync::{Arc, Mutex, PoisonError, Weak},
};

use tokio::sync::oneshot;

use crate::{
    cell::{Cell, Promise},
    dead_letter::DeadLetterReason,
    error::{ResolveError, SendError, StopError},
    lifecycle::{StopReason, Terminated},
    mailbox::{Queued, Refused, SystemMsg},
    node::Node,
    path::ActorPath,
    registry::Registry,
    remote::TellError,
    serialization::RemoteMessage,
    trace::TraceContext,
    watch::{Watch, WatchSink},
};

mod ask;
mod codec;
mod remote;
mod reply;
mod send;

pub(crate) use remote::RemoteRef;
use reply::ReplyHandle;
pub use send::SendFuture;

enum Inner<M> {
    Local(Arc<Cell<M>>),
    Promise(ReplyHandle<M>),
    /// A remote actor whose messages never carry an extension block.
    Remote(Arc<RemoteRef<M>>),
    /// A remote actor whose messages may (another serializer than
    /// bincode, or trace propagation on).
    RemoteExt(Arc<RemoteRef<M>>),
    /// A path that resolved to nothing: every message is a dead letter.
    Dead(ActorPath, Weak<Registry>),
}

/// A typed handle to an actor, local or remote. Cheap to clone, and
/// serializable inside messages (as its path) when `M` is a
/// [`RemoteMessage`], so a receiver can reply through it.
///
/// Method groups:
/// - sending: [`tell`](Self::tell) (never waits), [`send`](Self::send)
///   (waits for room), [`ask`](Self::ask) (request-reply with timeout);
/// - life: [`stop`](Self::stop), [`stop_after_queued`](Self::stop_after_queued),
///   [`watch`](Self::watch);
/// - identity: [`path`](Self::path), [`is_local`](Self::is_local).
pub struct ActorRef<M> {
    inner: Inner<M>,
}

impl<M> Clone for ActorRef<M> {
    fn clone(&self) -> Self {
        Self {
            inner: match &self.inner {
                Inner::Local(c) => Inner::Local(c.clone()),
                Inner::Promise(p) => Inner::Promise(p.clone()),
                Inner::Remote(r) => Inner::Remote(r.clone()),
                Inner::RemoteExt(r) => Inner::RemoteExt(r.clone()),
                Inner::Dead(p, s) => Inner::Dead(p.clone(), s.clone()),
            },
        }
    }
}

impl<M> fmt::Debug for ActorRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorRef({})", self.path())
    }
}

impl<M> PartialEq for ActorRef<M> {
    fn eq(&self, other: &Self) -> bool {
        self.path() == other.path()
    }
}

impl<M> Eq for ActorRef<M> {}

impl<M> std::hash::Hash for ActorRef<M> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.path().hash(state);
    }
}

impl<M> ActorRef<M> {
    /// The actor's path.
    pub fn path(&self) -> &ActorPath {
        match &self.inner {
            Inner::Local(c) => &c.path,
            Inner::Promise(p) => &p.path,
            Inner::Remote(r) | Inner::RemoteExt(r) => &r.recipient.path,
            Inner::Dead(p, _) => p,
        }
    }

    /// True if the actor runs in this process.
    pub fn is_local(&self) -> bool {
        !matches!(self.inner, Inner::Remote(_) | Inner::RemoteExt(_))
    }
}

impl<M: Send + 'static> ActorRef<M> {
    pub(crate) fn local(cell: Arc<Cell<M>>) -> Self {
        Self {
            inner: Inner::Local(cell),
        }
    }

    pub(crate) fn dead(path: ActorPath, registry: Weak<Registry>) -> Self {
        Self {
            inner: Inner::Dead(path, registry),
        }
    }

    /// A typed ref for `path` on behalf of `node`: the local actor there
    /// (or a dead ref if there is none or it takes another type), or a
    /// remote ref.
    ///
    /// # Errors
    /// [`ResolveError::NoRemoting`] for a remote path on a local system.
    pub(crate) fn for_path(node: &Node, path: ActorPath) -> Result<Self, ResolveError>
    where
        M: RemoteMessage,
    {
        if path.node() == &**node.registry.node() {
            return Ok(node
                .registry
                .lookup(path.elements())
                .and_then(|t| Self::from_any(t.as_any()))
                .unwrap_or_else(|| Self::dead(path, Arc::downgrade(&node.registry))));
        }
        let remoting = node.remoting.as_ref().ok_or(ResolveError::NoRemoting)?;
        Ok(match remoting.recipient(path.clone()) {
            Some((assoc, recipient)) => Self::remote_unchecked(assoc, recipient),
            // At the association limit: a dead end, logged by remoting.
            None => Self::dead(path, Arc::downgrade(&node.registry)),
        })
    }

    /// [`for_path`](Self::for_path) for incarnation `uid` of a remote
    /// node (a cluster member's, from membership): the ref dials that
    /// incarnation even while the node's association still knows an
    /// older one.
    pub(crate) fn for_path_at(node: &Node, path: ActorPath, uid: u64) -> Result<Self, ResolveError>
    where
        M: RemoteMessage,
    {
        if path.node() == &**node.registry.node() {
            return Self::for_path(node, path);
        }
        let remoting = node.remoting.as_ref().ok_or(ResolveError::NoRemoting)?;
        Ok(match remoting.recipient_at(path.clone(), uid) {
            Some((assoc, recipient)) => Self::remote_unchecked(assoc, recipient),
            None => Self::dead(path, Arc::downgrade(&node.registry)),
        })
    }

    pub(crate) fn from_any(target: Arc<dyn Any + Send + Sync>) -> Option<Self> {
        let target = match target.downcast::<Cell<M>>() {
            Ok(c) => return Some(Self::local(c)),
            Err(t) => t,
        };
        target.downcast::<Promise<M>>().ok().map(|p| Self {
            inner: Inner::Promise(ReplyHandle::new(p)),
        })
    }

    /// The registry of the system this ref belongs to, while it lives.
    fn registry(&self) -> Option<Arc<Registry>> {
        match &self.inner {
            Inner::Local(c) => c.registry.upgrade(),
            Inner::Promise(p) => p.registry.upgrade(),
            Inner::Remote(r) | Inner::RemoteExt(r) => r.assoc.registry(),
            Inner::Dead(_, s) => s.upgrade(),
        }
    }

    fn gone(&self, msg: M, why: &DeadLetterReason) -> SendError<M> {
        if let Some(registry) = self.registry() {
            registry.dead_letter(std::any::type_name::<M>(), self.path(), why);
        }
        SendError::ActorGone(msg)
    }

    /// Sends `msg` without waiting.
    ///
    /// # Errors
    /// - [`SendError::MailboxFull`]: the mailbox is at capacity (a remote
    ///   recipient has used its window on the link); the message comes back.
    /// - [`SendError::LinkFull`]: the link to a remote recipient's node is
    ///   full (its queue, or the buffer of messages waiting for the
    ///   connection); the message comes back.
    /// - [`SendError::ActorGone`]: the actor has stopped; the message comes
    ///   back and is also counted as a dead letter.
    /// - [`SendError::Serialization`]: a remote message did not encode (or
    ///   is larger than the frame limit); nothing was sent.
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.tell_hint(msg).map(|_| ())
    }

    /// `tell`, also saying whether the caller should yield its thread to a
    /// remote link's writer (`Ok(true)`; see
    /// `transport::Sender::try_push_with`).
    #[inline]
    fn tell_hint(&self, msg: M) -> Result<bool, SendError<M>> {
        match &self.inner {
            Inner::Local(c) => match c.mailbox.push(Queued::Local(msg)) {
                Ok(()) => Ok(false),
                Err((Refused::Full, Queued::Local(m))) => Err(SendError::MailboxFull(m)),
                Err((Refused::Closed, Queued::Local(m))) => {
                    Err(self.gone(m, &DeadLetterReason::ActorStopped))
                }
                Err((_, _)) => unreachable!("pushed a local envelope"),
            },
            // A local reply comes in the context its sender runs in, as a
            // remote one does when its node propagates contexts.
            Inner::Promise(p) => p
                .complete(msg, TraceContext::current())
                .map(|()| false)
                .map_err(|m| self.gone(m, &DeadLetterReason::AskDone)),
            // Its own variant, so a plain ref pays no test for it.
            Inner::RemoteExt(r) => self.tell_ext(r, msg),
            Inner::Remote(r) => {
                match r
                    .assoc
                    .tell_hint::<false>(&r.recipient, r.manifest, &|b, limit| {
                        (r.encode)(&msg, b, limit)
                    }) {
                    Ok(yield_now) => Ok(yield_now),
                    Err(e) => Err(self.remote_error(e, msg)),
                }
            }
            Inner::Dead(..) => Err(self.gone(msg, &DeadLetterReason::NoActor)),
        }
    }

    /// Stops the actor after the message it is handling; messages still
    /// queued become dead letters (to handle them first, use
    /// [`stop_after_queued`](Self::stop_after_queued)). Remote actors are
    /// stopped through their node.
    pub fn stop(&self) {
        match &self.inner {
            Inner::Local(c) => {
                c.mailbox.push_system(SystemMsg::Stop);
            }
            Inner::Promise(p) => {
                p.tx.lock().unwrap_or_else(PoisonError::into_inner).take();
            }
            Inner::Remote(r) | Inner::RemoteExt(r) => r.assoc.send_stop(&r.recipient),
            Inner::Dead(..) => {}
        }
    }

    /// Stops the actor once it has handled the messages already in its
    /// mailbox (Akka's `PoisonPill`), where [`stop`](Self::stop) jumps the
    /// queue. A marker goes into the mailbox behind them: it is never
    /// refused for a full mailbox, and messages that arrive after it
    /// become dead letters when the actor stops. System messages (and an
    /// immediate `stop`) still come first. For an ask's reply slot this is
    /// `stop`.
    ///
    /// To a remote actor, the stop travels on the link like a message (an
    /// envelope flagged as a stop, `docs/PROTOCOL.md`), so it arrives after
    /// every message this node sent the actor before it (large messages,
    /// which take their own lane, excepted) and its node queues the marker
    /// behind them. Unlike a message it is not held back by the actor's
    /// credit: a full mailbox is stopped gracefully too. Like a message it
    /// is delivered at most once: if the connection is lost with the stop
    /// on it, the actor is not stopped (watch it to know). A node in
    /// untrusted mode refuses it, as it refuses `stop` (a dead letter
    /// there).
    ///
    /// Returns once the stop is queued, not when the actor has stopped:
    /// [`watch`](Self::watch) it for that.
    ///
    /// ```
    /// # use actors::{Actor, ActorResult, ActorSystem, Ctx};
    /// # struct Printer;
    /// # impl Actor for Printer {
    /// #     type Msg = String;
    /// #     async fn handle(&mut self, line: String, _: &mut Ctx<Self>) -> ActorResult {
    /// #         println!("{line}");
    /// #         Ok(())
    /// #     }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::local("doc").unwrap();
    /// let printer = system.spawn(Printer);
    /// printer.tell("last words".to_owned()).unwrap();
    /// printer.stop_after_queued().unwrap();
    /// printer.watch().await; // "last words" was printed
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`StopError::ActorGone`]: the actor had already stopped (for a
    ///   remote actor this is known only on its node, which counts the
    ///   stop as a dead letter).
    /// - [`StopError::LinkFull`]: the link to a remote actor's node is
    ///   full; nothing was sent.
    /// - [`StopError::NodeUnreachable`]: a remote actor's incarnation is
    ///   quarantined; nothing was sent.
    /// - [`StopError::Reentrant`]: called from inside a message's
    ///   encoder; nothing was sent.
    pub fn stop_after_queued(&self) -> Result<(), StopError> {
        match &self.inner {
            Inner::Local(c) => c
                .mailbox
                .push_unbounded(Queued::Stop)
                .map_err(|_| StopError::ActorGone),
            Inner::Promise(_) => {
                self.stop();
                Ok(())
            }
            Inner::Remote(r) | Inner::RemoteExt(r) => r
                .assoc
                .stop_after_queued(&r.recipient, r.manifest)
                .map_err(|e| match e {
                    TellError::Full | TellError::NoCredit => StopError::LinkFull,
                    TellError::Gone | TellError::Unreachable => {
                        StopError::NodeUnreachable(r.recipient.path.node().to_owned())
                    }
                    TellError::Serialization(_) => StopError::Reentrant,
                }),
            Inner::Dead(..) => Err(StopError::ActorGone),
        }
    }

    /// A future that resolves to [`Terminated`] when this
    /// actor stops, or when its node becomes unreachable.
    pub fn watch(&self) -> Watch {
        let (tx, rx) = oneshot::channel();
        self.add_watcher(WatchSink::Once(Arc::new(Mutex::new(Some(tx)))));
        Watch {
            rx,
            path: self.path().clone(),
        }
    }

    pub(crate) fn add_watcher(&self, sink: WatchSink) {
        match &self.inner {
            // Local watchers are not limited.
            Inner::Local(c) => {
                let _ = c.watchers.add(&c.path, sink);
            }
            Inner::Promise(p) => sink.deliver(Terminated {
                path: p.path.clone(),
                reason: StopReason::NotFound,
            }),
            Inner::Remote(r) | Inner::RemoteExt(r) => r.assoc.watch(&r.recipient, sink),
            Inner::Dead(p, _) => sink.deliver(Terminated {
                path: p.clone(),
                reason: StopReason::NotFound,
            }),
        }
    }

    pub(crate) fn remove_watcher(&self, sink: &WatchSink) {
        match &self.inner {
            Inner::Local(c) => c.watchers.remove(sink),
            Inner::Remote(r) | Inner::RemoteExt(r) => r.assoc.unwatch(&r.recipient, sink),
            Inner::Promise(_) | Inner::Dead(..) => {}
        }
    }

    /// Messages waiting in a local actor's mailbox (0 for remote refs).
    pub fn mailbox_len(&self) -> usize {
        match &self.inner {
            Inner::Local(c) => c.mailbox.len(),
            _ => 0,
        }
    }
}
