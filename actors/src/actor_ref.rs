//! Typed actor refs: the same API whether the actor is local, on another
//! node, or the reply slot of an `ask`.

use std::{
    any::Any,
    fmt,
    future::Future,
    marker::PhantomData,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError, Weak,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::BytesMut;
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};
use tokio::sync::oneshot;

use crate::{
    cell::{Answer, Cell, Promise},
    dead_letter::DeadLetterReason,
    error::{AskError, ResolveError, SendError, SerializationError, StopError},
    lifecycle::{StopReason, Terminated},
    mailbox::{Queued, Refused, SystemMsg},
    node::Node,
    path::ActorPath,
    registry::{Registry, Target},
    remote::{Association, Recipient, Tag, TellError},
    reply::{NoReply, Unanswered},
    serialization::{
        Ext, RemoteMessage, SerializerId, decoding_node, encode_with_ext, manifest_id, manifests,
    },
    trace::TraceContext,
    watch::{Watch, WatchSink},
};

/// A ref to an actor on another node.
pub(crate) struct RemoteRef<M> {
    /// The link to the actor's node.
    pub(crate) assoc: Arc<Association>,
    pub(crate) recipient: Arc<Recipient>,
    pub(crate) manifest: u32,
    /// `M::SERIALIZER`, named in the envelope when it is not bincode.
    pub(crate) serializer: SerializerId,
    pub(crate) _msg: PhantomData<fn(M)>,
    pub(crate) encode: fn(&M, &mut BytesMut, usize) -> Result<(), SerializationError>,
    /// Set on a ref to another node's ask reply slot decoded here: when
    /// its last handle is dropped unanswered, that node hears so at once
    /// (see `reply`).
    pub(crate) reply: Option<RemoteReply>,
}

/// What a decoded ref to a remote ask's reply slot knows of its use.
pub(crate) struct RemoteReply {
    /// A reply (or another message) was sent through it.
    answered: AtomicBool,
    /// It was serialized again (forwarded): whoever decodes it answers.
    forwarded: AtomicBool,
}

impl<M> Drop for RemoteRef<M> {
    fn drop(&mut self) {
        if let Some(r) = &self.reply
            && !r.answered.load(Ordering::Acquire)
            && !r.forwarded.load(Ordering::Acquire)
        {
            crate::reply::unanswered(Arc::new(RemoteNoReply {
                assoc: self.assoc.clone(),
                recipient: self.recipient.clone(),
            }));
        }
    }
}

impl<M> RemoteRef<M> {
    /// A message went out through this ref: if it is a reply ref, the
    /// asker has its answer and dropping the ref tells it nothing more.
    /// Marked only once the send succeeded, so that a reply the link
    /// refused (`LinkFull`) and then dropped fails the ask at once.
    #[inline]
    fn answered(&self) {
        if let Some(reply) = &self.reply {
            reply.answered.store(true, Ordering::Release);
        }
    }
}

/// A remote ask's reply slot, told that no reply will come.
struct RemoteNoReply {
    assoc: Arc<Association>,
    recipient: Arc<Recipient>,
}

impl Unanswered for RemoteNoReply {
    fn no_reply(&self, why: NoReply) {
        // The node's shutdown notice, which follows, tells the asker.
        if why != NoReply::SystemShutdown {
            self.assoc.send_no_reply(&self.recipient, why);
        }
    }
}

/// A live reply ref to a local ask's slot: the slot counts them, and the
/// last one dropped unanswered fails the ask (see `reply`).
struct ReplyHandle<M>(Arc<Promise<M>>);

impl<M> ReplyHandle<M> {
    fn new(p: Arc<Promise<M>>) -> Self {
        p.handles.fetch_add(1, Ordering::AcqRel);
        Self(p)
    }
}

impl<M> Clone for ReplyHandle<M> {
    fn clone(&self) -> Self {
        Self::new(self.0.clone())
    }
}

impl<M> std::ops::Deref for ReplyHandle<M> {
    type Target = Arc<Promise<M>>;
    fn deref(&self) -> &Arc<Promise<M>> {
        &self.0
    }
}

impl<M> Drop for ReplyHandle<M> {
    fn drop(&mut self) {
        // A slot whose ref left the process is answered (or failed) by
        // the node that has it.
        if self.0.handles.fetch_sub(1, Ordering::AcqRel) == 1
            && !self.0.registered.load(Ordering::Acquire)
            && self
                .0
                .tx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
            && let Some(slot) = self.0.me.upgrade()
        {
            crate::reply::unanswered(slot);
        }
    }
}

impl<M> RemoteRef<M> {
    /// The envelope tag and extension block of a message sent now: the
    /// serializer if not bincode, the current trace context if
    /// propagation is on (not even read when it is off).
    #[inline(always)]
    fn ext(&self) -> (Tag, Ext) {
        let ext = Ext::for_send(self.serializer, self.assoc.trace);
        let tag = Tag {
            manifest: self.manifest,
            ext: !ext.is_empty(),
        };
        (tag, ext)
    }

    /// Encodes `msg` as a remote payload: the extension block, then the
    /// message.
    #[inline(always)]
    fn encode(
        &self,
        ext: &Ext,
        msg: &M,
        b: &mut BytesMut,
        limit: usize,
    ) -> Result<(), SerializationError> {
        encode_with_ext(ext, b, limit, |b, limit| (self.encode)(msg, b, limit))
    }
}

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

    pub(crate) fn promise(
        path: ActorPath,
        registry: Weak<Registry>,
    ) -> (Self, Arc<Promise<M>>, oneshot::Receiver<Answer<M>>) {
        let (tx, rx) = oneshot::channel();
        let p = Arc::new_cyclic(|me: &Weak<Promise<M>>| Promise {
            tx: Mutex::new(Some(tx)),
            path,
            registry,
            registered: AtomicBool::new(false),
            handles: AtomicUsize::new(0),
            me: me.clone(),
        });
        (
            Self {
                inner: Inner::Promise(ReplyHandle::new(p.clone())),
            },
            p,
            rx,
        )
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

    /// The incarnation (uid) of its node that a remote ref is bound to
    /// (0 if unknown); `None` for a local or dead ref.
    pub(crate) fn incarnation(&self) -> Option<u64> {
        match &self.inner {
            Inner::Remote(r) | Inner::RemoteExt(r) => Some(r.recipient.uid()),
            _ => None,
        }
    }

    /// A ref to a remote recipient, assumed to take `M`.
    pub(crate) fn remote_unchecked(assoc: Arc<Association>, recipient: Arc<Recipient>) -> Self
    where
        M: RemoteMessage,
    {
        // Names the type in this node's dead letters; a collision was
        // refused at spawn or resolve already, or is logged here.
        if let Err(c) = manifests::register::<M>() {
            tracing::error!(
                manifest = M::MANIFEST,
                conflict = ?c,
                "two message types share a manifest: rename one"
            );
        }
        // Bincode, and the association does not propagate trace contexts:
        // no extension block is ever written, and `tell` is the code from
        // before blocks existed (`Inner::Remote`). callgrind: a test of a
        // flag per tell was 0.6 % of the sending thread.
        let plain = M::SERIALIZER == SerializerId::BINCODE && !assoc.trace;
        let r = Arc::new(RemoteRef {
            assoc,
            recipient,
            manifest: manifest_id(M::MANIFEST),
            serializer: M::SERIALIZER,
            _msg: PhantomData,
            encode: M::encode,
            reply: None,
        });
        Self {
            inner: if plain {
                Inner::Remote(r)
            } else {
                Inner::RemoteExt(r)
            },
        }
    }

    /// This ref, if it is one to another node's ask reply slot (a
    /// `/temp/` path) just decoded, made to tell that node when it is
    /// dropped unanswered. Such a ref sends through the extension path,
    /// where the reply is noted, so a plain remote `tell` pays nothing.
    fn watching_reply(self) -> Self {
        match self.inner {
            Inner::Remote(mut r) | Inner::RemoteExt(mut r)
                if r.recipient.path.elements().starts_with("/temp/") =>
            {
                if let Some(r) = Arc::get_mut(&mut r) {
                    r.reply = Some(RemoteReply {
                        answered: AtomicBool::new(false),
                        forwarded: AtomicBool::new(false),
                    });
                }
                Self {
                    inner: Inner::RemoteExt(r),
                }
            }
            inner => Self { inner },
        }
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

    /// A remote `tell` of a message that may carry an extension block
    /// (another serializer than bincode, or trace propagation on).
    #[inline(never)]
    fn tell_ext(&self, r: &RemoteRef<M>, msg: M) -> Result<bool, SendError<M>> {
        let (tag, ext) = r.ext();
        let encode = |b: &mut BytesMut, limit| r.encode(&ext, &msg, b, limit);
        let told = if tag.ext {
            r.assoc
                .tell_hint::<true>(&r.recipient, tag.manifest, &encode)
        } else {
            // Propagation is on, but this send is outside any context.
            r.assoc
                .tell_hint::<false>(&r.recipient, tag.manifest, &encode)
        };
        match told {
            Ok(yield_now) => {
                r.answered();
                Ok(yield_now)
            }
            // Not answered: if the caller drops the ref now, the asker
            // hears at once instead of waiting out its timeout.
            Err(e) => Err(self.remote_error(e, msg)),
        }
    }

    /// Sends `msg`, waiting while the mailbox (or the link to a remote
    /// node) is full. This is how backpressure reaches a producer.
    ///
    /// The first attempt happens when `send` is called (as `tell`); the
    /// returned future only waits if there was no room. It is small either
    /// way, so handlers that send do not carry a large future state per
    /// message.
    ///
    /// To a remote actor, the send also yields once whenever the link's
    /// writer has a large batch (64 KiB by default) waiting for this
    /// thread, so a handler sending many messages in a loop lets them go
    /// out, and the peer start on them, while it goes on (see
    /// `transport::TransportConfig::set_producer_yield_bytes`).
    ///
    /// # Errors
    /// As [`tell`](Self::tell), except that `MailboxFull` and `LinkFull` are
    /// never returned.
    pub fn send(&self, msg: M) -> SendFuture<'_, M> {
        let state = match self.tell_hint(msg) {
            Ok(false) => SendState::Sent,
            // Once per batch (64 KiB), so the box is not per message.
            Ok(true) => SendState::Waiting(Box::pin(async {
                tokio::task::yield_now().await;
                Ok(())
            })),
            Err(SendError::MailboxFull(msg) | SendError::LinkFull(msg)) => {
                SendState::Waiting(Box::pin(self.send_slow(msg)))
            }
            Err(e) => SendState::Failed(Some(Box::new(e))),
        };
        SendFuture { state }
    }

    #[inline(never)]
    async fn send_slow(&self, msg: M) -> Result<(), SendError<M>> {
        self.send_slow_with(msg, None).await
    }

    /// `send`'s wait for room; `reply`: an ask's reply slot, carried by a
    /// remote request (see `Association::tell_ask`).
    async fn send_slow_with(&self, msg: M, reply: Option<&str>) -> Result<(), SendError<M>> {
        match &self.inner {
            Inner::Local(c) => match c.mailbox.push_wait(Queued::Local(msg)).await {
                Ok(()) => Ok(()),
                Err(Queued::Local(m)) => Err(self.gone(m, &DeadLetterReason::ActorStopped)),
                Err(_) => unreachable!("pushed a local envelope"),
            },
            Inner::Remote(r) | Inner::RemoteExt(r) => {
                let assoc = &r.assoc;
                // Encoded before any await: the future holds bytes, not a
                // borrow of the message (`M` need not be `Sync`).
                let (tag, ext) = r.ext();
                let encoded =
                    assoc.encode_payload(&r.recipient, &|b, limit| r.encode(&ext, &msg, b, limit));
                // Neither reports a full link or mailbox: encoding does not
                // queue, and `send_payload` waits instead.
                let payload = match encoded {
                    Ok(p) => p,
                    Err(e) => return Err(self.remote_error(e, msg)),
                };
                match assoc.send_payload(&r.recipient, tag, payload, reply).await {
                    Ok(()) => {
                        r.answered();
                        Ok(())
                    }
                    Err(e) => Err(self.remote_error(e, msg)),
                }
            }
            _ => self.tell(msg),
        }
    }

    /// What a remote send's failure means to its caller, with the message
    /// handed back.
    #[cold]
    fn remote_error(&self, e: TellError, msg: M) -> SendError<M> {
        match e {
            // The recipient used its window: its mailbox is full.
            TellError::NoCredit => SendError::MailboxFull(msg),
            TellError::Full => SendError::LinkFull(msg),
            TellError::Gone => self.gone(msg, &DeadLetterReason::Quarantined),
            TellError::Unreachable => self.gone(
                msg,
                &DeadLetterReason::Unreachable("its node is judged unreachable".into()),
            ),
            TellError::Serialization(e) => SendError::Serialization(e),
        }
    }

    /// Request-reply: builds a message around a fresh reply ref with `make`,
    /// sends it, and waits at most `timeout` for the reply.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx};
    /// struct Doubler;
    /// struct Double(u64, ActorRef<u64>);
    /// impl Actor for Doubler {
    ///     type Msg = Double;
    ///     async fn handle(&mut self, Double(n, reply): Double, _: &mut Ctx<Self>) -> ActorResult {
    ///         let _ = reply.tell(n * 2);
    ///         Ok(())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::local("doc").unwrap();
    /// let d = system.spawn(Doubler);
    /// let r = d.ask(|reply| Double(21, reply), Duration::from_secs(1)).await;
    /// assert_eq!(r, Ok(42));
    /// # }
    /// ```
    ///
    /// An ask fails as soon as its node knows no reply can come, not at
    /// the timeout (as Erlang's `gen_server:call`, which monitors its
    /// callee): `docs/FAILURE_SEMANTICS.md` has the table of what each
    /// failure returns and when.
    ///
    /// # Errors
    /// - [`AskError::Timeout`]: no reply, and nothing known to prevent one.
    /// - [`AskError::ActorGone`]: the recipient had stopped, or stopped
    ///   with the request still queued (at once).
    /// - [`AskError::HandlerFailed`]: the handler that had the request
    ///   returned an error or panicked, whether the actor then stops or
    ///   restarts, here or on another node (at once, with the error).
    /// - [`AskError::ReplyDropped`]: every handle to the reply ref was
    ///   dropped without a reply, here or on another node (at once).
    /// - [`AskError::MailboxFull`] and [`AskError::LinkFull`]: the request
    ///   waited for room, as [`send`](Self::send) does, for the whole
    ///   timeout and was not sent.
    /// - [`AskError::Undeliverable`]: the recipient's node turned the
    ///   request into a dead letter and said why (a request buffered
    ///   while the link connects does not carry what that needs, and
    ///   shows as a timeout).
    /// - [`AskError::Serialization`]: the request or reply did not encode.
    /// - [`AskError::NodeUnreachable`]: a remote recipient's incarnation is
    ///   quarantined, or its node is judged unreachable
    ///   ([`RemoteEvent::Unreachable`](crate::RemoteEvent::Unreachable))
    ///   and no link has come back since: nothing was sent or dialed.
    /// - [`AskError::NodeDown`]: a remote recipient's node went down while
    ///   the ask waited (declared unreachable, the recipient's incarnation
    ///   quarantined, or connecting to it failed).
    pub async fn ask<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        self.ask_traced(make, timeout).await.map(|(r, _)| r)
    }

    /// [`ask`](Self::ask), and the trace context the reply came in: the
    /// one its sender ran in when it replied (a remote handler runs in
    /// the request's context, so by default this is the context the ask
    /// was made in; a handler that starts a span of its own and replies
    /// inside its scope returns that span as the parent). `None` when the
    /// reply came without one: the replying node does not propagate
    /// contexts (`SystemConfig::set_trace_propagation`), or it replied
    /// outside any scope. This is W3C's `traceresponse` idea: the asker
    /// can link its span to the replier's, or learn the trace a service
    /// started.
    ///
    /// # Errors
    /// As [`ask`](Self::ask).
    pub async fn ask_traced<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<(R, Option<TraceContext>), AskError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let registry = self.registry().ok_or(AskError::ActorGone)?;
        let (reply, promise, rx) =
            ActorRef::<R>::promise(registry.temp_path(), Arc::downgrade(&registry));
        let _cleanup = PromiseGuard {
            registry,
            promise: promise.clone(),
        };
        // Before the request goes, so that the node going down after it is
        // never missed; dropped with this future, however the ask ends.
        let mut down = match &self.inner {
            Inner::Remote(r) | Inner::RemoteExt(r) => Some(r.assoc.watch_downs()),
            _ => None,
        };
        // A verdict that came before the subscription: the judged link may
        // still be up, being torn down, and would lose the request.
        if let Inner::Remote(r) | Inner::RemoteExt(r) = &self.inner
            && r.assoc.judged_unreachable(&r.recipient)
        {
            let node = r.recipient.path.node().to_owned();
            if let Some(registry) = self.registry() {
                registry.dead_letter(
                    std::any::type_name::<M>(),
                    self.path(),
                    &DeadLetterReason::Unreachable("its node is judged unreachable".into()),
                );
            }
            return Err(AskError::NodeUnreachable(node));
        }
        // A remote request carries its reply slot's path, so that the node
        // can say at once why it is a dead letter there.
        let reply_path = matches!(self.inner, Inner::Remote(_) | Inner::RemoteExt(_))
            .then(|| reply.path().elements().to_owned());
        let sent = match &self.inner {
            Inner::Remote(r) | Inner::RemoteExt(r) => {
                let reply_path = reply_path.as_deref().unwrap_or_default();
                let msg = make(reply);
                let (tag, ext) = r.ext();
                match r.assoc.tell_ask(
                    &r.recipient,
                    tag,
                    &|b, limit| r.encode(&ext, &msg, b, limit),
                    reply_path,
                ) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(self.remote_error(e, msg)),
                }
            }
            _ => self.tell(make(reply)),
        };
        // No room: wait for it as `send` does, within the timeout; the
        // request still carries its reply path.
        let reply_path = reply_path.as_deref();
        let sent = match sent {
            Err(SendError::MailboxFull(msg)) => {
                tokio::time::timeout_at(deadline, self.send_slow_with(msg, reply_path))
                    .await
                    .map_err(|_| AskError::MailboxFull)?
            }
            Err(SendError::LinkFull(msg)) => {
                tokio::time::timeout_at(deadline, self.send_slow_with(msg, reply_path))
                    .await
                    .map_err(|_| AskError::LinkFull)?
            }
            other => other,
        };
        match sent {
            Ok(()) => {}
            Err(SendError::MailboxFull(_)) => return Err(AskError::MailboxFull),
            Err(SendError::LinkFull(_)) => return Err(AskError::LinkFull),
            Err(SendError::Serialization(e)) => return Err(AskError::Serialization(e)),
            // Only a `NamedRef` resolves; a ref's own sends never do.
            Err(SendError::Unresolved(_, e)) => return Err(AskError::Unresolved(*e)),
            // Only a singleton's ref buffers; a ref's own sends never do.
            Err(SendError::BufferFull(..)) => return Err(AskError::MailboxFull),
            Err(SendError::ActorGone(_)) => {
                return Err(match &self.inner {
                    Inner::Remote(r) | Inner::RemoteExt(r) => {
                        AskError::NodeUnreachable(r.recipient.path.node().to_owned())
                    }
                    _ => AskError::ActorGone,
                });
            }
        }
        let reply = async {
            match rx.await {
                Ok(answer) => answer,
                Err(_) => Err(AskError::ActorGone),
            }
        };
        let answer = match (&self.inner, &mut down) {
            (Inner::Remote(r) | Inner::RemoteExt(r), Some(down)) => {
                let node_down = async {
                    let reason = r.assoc.down(down, &r.recipient).await;
                    Err(AskError::NodeDown {
                        node: r.recipient.path.node().to_owned(),
                        reason,
                    })
                };
                tokio::time::timeout_at(deadline, async {
                    tokio::select! {
                        biased;
                        answer = reply => answer,
                        failed = node_down => failed,
                    }
                })
                .await
            }
            _ => tokio::time::timeout_at(deadline, reply).await,
        };
        answer.unwrap_or(Err(AskError::Timeout(timeout)))
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

type SlowSend<'a, M> = Pin<Box<dyn Future<Output = Result<(), SendError<M>>> + Send + 'a>>;

/// Small whatever `M` is: handlers that send in a loop keep one of these
/// in their future state per await, so it stays two words.
enum SendState<'a, M> {
    Sent,
    /// Boxed: errors are rare, and `SendError<M>` holds the message.
    Failed(Option<Box<SendError<M>>>),
    Waiting(SlowSend<'a, M>),
}

/// The future of [`ActorRef::send`].
#[must_use = "a send that had to wait is only completed by awaiting it"]
pub struct SendFuture<'a, M> {
    state: SendState<'a, M>,
}

impl<M> fmt::Debug for SendFuture<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let waiting = matches!(self.state, SendState::Waiting(_));
        f.debug_struct("SendFuture")
            .field("waiting", &waiting)
            .finish()
    }
}

// `poll` never pins into the message; it only moves a finished result out.
impl<M> Unpin for SendFuture<'_, M> {}

impl<M> Future for SendFuture<'_, M> {
    type Output = Result<(), SendError<M>>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // Every variant is Unpin (nothing, an Option and a pinned box).
        match &mut self.get_mut().state {
            SendState::Sent => std::task::Poll::Ready(Ok(())),
            SendState::Failed(e) => std::task::Poll::Ready(Err(*e
                .take()
                .expect("SendFuture polled after it completed"))),
            SendState::Waiting(f) => f.as_mut().poll(cx),
        }
    }
}

/// Unregisters an ask's reply slot when the ask ends, however it ends.
struct PromiseGuard<R: Send + 'static> {
    registry: Arc<Registry>,
    promise: Arc<Promise<R>>,
}

impl<R: Send + 'static> Drop for PromiseGuard<R> {
    fn drop(&mut self) {
        self.promise
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if self.promise.registered.load(Ordering::Acquire) {
            self.registry.unregister(self.promise.path.elements());
        }
    }
}

impl<M: RemoteMessage> Serialize for ActorRef<M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A local actor whose ref leaves the process must be reachable by
        // its path from now on.
        match &self.inner {
            Inner::Local(c) => c.register_remote(),
            Inner::Promise(p) => {
                let p = &p.0;
                if !p.registered.swap(true, Ordering::AcqRel)
                    && let Some(registry) = p.registry.upgrade()
                {
                    // So that a reply this node no longer waits for is
                    // named by its type in the dead letters.
                    let _ = manifests::register::<M>();
                    let target: Arc<dyn Target> = p.clone();
                    registry.register(p.path.elements(), target);
                }
            }
            Inner::Remote(r) | Inner::RemoteExt(r) => {
                if let Some(reply) = &r.reply {
                    reply.forwarded.store(true, Ordering::Release);
                }
            }
            Inner::Dead(..) => {}
        }
        // The path, and the type the ref takes, so a receiver that decodes
        // it as a ref to another type finds out here (`#` is in no path).
        s.collect_str(&format_args!(
            "{}#{:08x}",
            self.path(),
            manifest_id(M::MANIFEST)
        ))
    }
}

impl<'de, M: RemoteMessage> Deserialize<'de> for ActorRef<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<M>(PhantomData<fn() -> M>);
        impl<M: RemoteMessage> de::Visitor<'_> for V<M> {
            type Value = ActorRef<M>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an actor path")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ActorRef<M>, E> {
                let (v, takes) = match v.rsplit_once('#') {
                    Some((path, m)) => {
                        let m = u32::from_str_radix(m, 16)
                            .map_err(|_| E::custom("an actor ref's type is not a manifest id"))?;
                        (path, Some(m))
                    }
                    None => (v, None),
                };
                if let Some(m) = takes
                    && m != manifest_id(M::MANIFEST)
                {
                    return Err(E::custom(format_args!(
                        "a ref to an actor that takes {}, decoded as a ref taking {}",
                        manifests::label(m),
                        M::MANIFEST
                    )));
                }
                let path = ActorPath::parse(v).map_err(E::custom)?;
                let node = decoding_node()
                    .and_then(|n| n.downcast::<Node>().ok())
                    .ok_or_else(|| {
                        E::custom("an ActorRef can only be deserialized by an actor system")
                    })?;
                ActorRef::for_path(&node, path)
                    .map(ActorRef::watching_reply)
                    .map_err(E::custom)
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// A ref is itself a remote message (its path and type), so an ask can be
/// answered with one: "which worker handles this key?".
impl<M: RemoteMessage> RemoteMessage for ActorRef<M> {
    const MANIFEST: &'static str =
        crate::serialization::ManifestBuf::concat(&["actors.ActorRef<", M::MANIFEST, ">"]).as_str();
}

#[cfg(test)]
mod tests {
    use super::SendFuture;

    #[test]
    fn send_future_stays_small_whatever_the_message() {
        // Handlers sending in a loop keep one per await in their state.
        assert!(std::mem::size_of::<SendFuture<'static, [u8; 1024]>>() <= 24);
        assert_eq!(
            std::mem::size_of::<SendFuture<'static, u8>>(),
            std::mem::size_of::<SendFuture<'static, [u8; 1024]>>()
        );
    }
}
