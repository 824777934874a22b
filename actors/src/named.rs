//! [`NamedRef`]: a ref by name that follows the named actor across its
//! node's restarts (Erlang's `{Name, Node}`, Akka's actor selection).
//!
//! An [`ActorRef`] names one incarnation of a node: once that node
//! restarts, the ref is quarantined with it and every send fails. A
//! `NamedRef` keeps the path instead, resolves it on first use, caches the
//! ref, and when a send shows the ref stale (its incarnation quarantined,
//! its node gone down under an ask) drops it and resolves again, retrying
//! with backoff for as long as the call's time allows:
//!
//! ```text
//!  call ─► cached? ──no──► resolve ──ok──► cache ─► send ─► done
//!            │yes            │ unreachable / timeout        │ stale (quarantined,
//!            └──────► send   └─► wait (20 ms, doubling to   │ node down)
//!                              500 ms) if time is left, ◄───┘ drop the cache
//!                              else fail
//! ```

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    actor_ref::ActorRef,
    error::{AskError, ResolveError, SendError},
    path::ActorPath,
    serialization::RemoteMessage,
    system::ActorSystem,
};

/// The first wait before resolving again: 20 ms, about a loopback
/// reconnect; a restarting node is usually back within a few of these.
const FIRST_RETRY: Duration = Duration::from_millis(20);
/// The longest wait between two resolves: 500 ms, so a node that comes
/// back is found within half a second.
const MAX_RETRY: Duration = Duration::from_millis(500);
/// How many times one call resolves a ref that turned out stale at once
/// before it gives up: a node that keeps restarting under it.
const MAX_STALE: u32 = 8;

/// A ref to whatever actor answers at a path, across restarts of its
/// node (made by [`ActorSystem::named`]). It resolves the path on first
/// use and caches the ref; when a send shows the ref stale (its
/// incarnation quarantined, its node gone down under an ask) it drops it
/// and resolves again, retrying an unreachable node with backoff (20 ms,
/// doubling to 500 ms) for as long as the call's time allows. A missing
/// actor or a wrong type fails at once.
///
/// Method groups:
/// - sending: [`tell`](Self::tell), [`send`](Self::send), [`ask`](Self::ask),
///   each resolving first when needed (so each is `async`);
/// - the ref: [`get`](Self::get) (resolving), [`current`](Self::current)
///   (cached only), [`path`](Self::path).
///
/// Cheap to clone; clones share the cached ref.
///
/// # Delivery across a restart
/// A `tell` or `send` is sent again only when it certainly was not sent
/// (the cached ref's incarnation was already quarantined). An `ask` is
/// sent again also when its node went down while it waited
/// ([`AskError::NodeDown`]): the incarnation that died may or may not
/// have handled it, so across a restart an ask is delivered at least
/// once. For requests that must not repeat, ask the ref from
/// [`get`](Self::get) instead.
pub struct NamedRef<M> {
    inner: Arc<Named<M>>,
}

struct Named<M> {
    system: ActorSystem,
    path: ActorPath,
    /// The last ref resolved, and its generation, so that a caller that
    /// found it stale drops that one and not a fresher one another caller
    /// resolved meanwhile.
    cached: Mutex<(u64, Option<ActorRef<M>>)>,
    /// One resolve at a time: callers that find no ref wait for it.
    resolving: tokio::sync::Mutex<()>,
}

impl<M> Clone for NamedRef<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<M> fmt::Debug for NamedRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NamedRef({})", self.inner.path)
    }
}

impl ActorSystem {
    /// A [`NamedRef`] to the actor at `target`: a full path
    /// (`tcp://sys@host:port/user/name`) or `name@node` (`name` at
    /// `/user/name` on the node `sys@host:port`, as Erlang's
    /// `{Name, Node}`). Nothing is resolved until it is used.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use actors::{Actor, ActorResult, ActorSystem, Ctx};
    /// # struct Doubler;
    /// # impl Actor for Doubler {
    /// #     type Msg = (u64, actors::ActorRef<u64>);
    /// #     async fn handle(&mut self, (n, r): Self::Msg, _: &mut Ctx<Self>) -> ActorResult {
    /// #         let _ = r.tell(2 * n);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// # let server = ActorSystem::remote("server", "127.0.0.1:0".parse().unwrap()).await.unwrap();
    /// # server.spawn_named("doubler", Doubler).unwrap();
    /// # let node = server.node().to_owned();
    /// let client = ActorSystem::remote("client", "127.0.0.1:0".parse().unwrap()).await.unwrap();
    /// // `node` is the server's `server@127.0.0.1:PORT`.
    /// let doubler = client.named::<(u64, actors::ActorRef<u64>)>(&format!("doubler@{node}")).unwrap();
    /// // Resolves on first use; after a restart of the server, resolves again.
    /// let four = doubler.ask(|r| (2, r), Duration::from_secs(5)).await;
    /// assert_eq!(four, Ok(4));
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ResolveError::InvalidPath`]: `target` is neither form.
    pub fn named<M: RemoteMessage>(&self, target: &str) -> Result<NamedRef<M>, ResolveError> {
        let path = if target.contains("://") {
            ActorPath::parse(target)?
        } else {
            let (name, node) = target.split_once('@').ok_or(ResolveError::InvalidPath {
                path: target.to_owned(),
                reason: "expected a path (tcp://sys@host:port/user/name) or name@sys@host:port",
            })?;
            ActorPath::parse(&format!("tcp://{node}/user/{name}"))?
        };
        Ok(NamedRef {
            inner: Arc::new(Named {
                system: self.clone(),
                path,
                cached: Mutex::new((0, None)),
                resolving: tokio::sync::Mutex::new(()),
            }),
        })
    }
}

/// Whether a resolve that failed this way may succeed soon: the node is
/// restarting, or the link to it is coming back.
fn transient(e: &ResolveError) -> bool {
    matches!(
        e,
        ResolveError::Unreachable { .. } | ResolveError::Timeout { .. }
    )
}

impl<M: RemoteMessage> NamedRef<M> {
    /// The path this ref names.
    pub fn path(&self) -> &ActorPath {
        &self.inner.path
    }

    /// The ref resolved last, if one is cached (none before the first use,
    /// or after one turned out stale).
    pub fn current(&self) -> Option<ActorRef<M>> {
        self.lock().1.clone()
    }

    /// The current ref, resolving the path if none is cached, with retries
    /// while the node is unreachable, within the system's resolve timeout
    /// ([`SystemConfig::set_resolve_timeout`](crate::SystemConfig::set_resolve_timeout)).
    ///
    /// # Errors
    /// As [`ActorSystem::resolve`], the last error seen: a missing actor or
    /// a wrong type at once, an unreachable node once the time is up.
    pub async fn get(&self) -> Result<ActorRef<M>, ResolveError> {
        let deadline = Instant::now() + self.inner.system.inner.config.resolve_timeout;
        self.resolved(deadline).await.map(|(_, r)| r)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<ActorRef<M>>)> {
        // Nothing panics while holding it: a clone or an assignment.
        self.inner
            .cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the ref of generation `generation`, found stale.
    fn forget(&self, generation: u64) {
        let mut cached = self.lock();
        if cached.0 == generation {
            cached.1 = None;
        }
    }

    /// The cached ref and its generation, or a fresh one resolved by
    /// `deadline`.
    async fn resolved(&self, deadline: Instant) -> Result<(u64, ActorRef<M>), ResolveError> {
        if let (g, Some(r)) = &*self.lock() {
            return Ok((*g, r.clone()));
        }
        let timed_out = || ResolveError::Timeout {
            addr: self.inner.path.node().to_owned(),
            timeout: self.inner.system.inner.config.resolve_timeout,
        };
        let _one = tokio::time::timeout_at(deadline, self.inner.resolving.lock())
            .await
            .map_err(|_| timed_out())?;
        // Another caller may have resolved it while this one waited.
        if let (g, Some(r)) = &*self.lock() {
            return Ok((*g, r.clone()));
        }
        let path = self.inner.path.to_string();
        let mut wait = FIRST_RETRY;
        loop {
            let error =
                match tokio::time::timeout_at(deadline, self.inner.system.resolve(&path)).await {
                    Ok(Ok(r)) => {
                        let mut cached = self.lock();
                        cached.0 += 1;
                        cached.1 = Some(r.clone());
                        return Ok((cached.0, r));
                    }
                    Ok(Err(e)) => e,
                    Err(_) => return Err(timed_out()),
                };
            if !transient(&error) || Instant::now() + wait >= deadline {
                return Err(error);
            }
            tracing::debug!(path = %self.inner.path, error = %error, retry_in = ?wait, "resolving again");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_RETRY);
        }
    }

    /// Sends `msg` without waiting for room, resolving first if needed
    /// (within the system's resolve timeout). A ref found stale at once
    /// (its node restarted) is resolved again and the message sent to the
    /// new incarnation.
    ///
    /// # Errors
    /// As [`ActorRef::tell`], and [`SendError::Unresolved`] with the
    /// message when no ref could be resolved.
    pub async fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        let deadline = Instant::now() + self.inner.system.inner.config.resolve_timeout;
        let mut msg = msg;
        for _ in 0..MAX_STALE {
            let (generation, r) = match self.resolved(deadline).await {
                Ok(found) => found,
                Err(e) => return Err(SendError::Unresolved(msg, Box::new(e))),
            };
            match r.tell(msg) {
                Err(SendError::ActorGone(m)) if !r.is_local() => {
                    self.forget(generation);
                    msg = m;
                }
                other => return other,
            }
        }
        Err(SendError::ActorGone(msg))
    }

    /// Sends `msg`, waiting while the mailbox or link is full, resolving
    /// first if needed, as [`tell`](Self::tell) does.
    ///
    /// # Errors
    /// As [`ActorRef::send`], and [`SendError::Unresolved`].
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        let deadline = Instant::now() + self.inner.system.inner.config.resolve_timeout;
        let mut msg = msg;
        for _ in 0..MAX_STALE {
            let (generation, r) = match self.resolved(deadline).await {
                Ok(found) => found,
                Err(e) => return Err(SendError::Unresolved(msg, Box::new(e))),
            };
            match r.send(msg).await {
                Err(SendError::ActorGone(m)) if !r.is_local() => {
                    self.forget(generation);
                    msg = m;
                }
                other => return other,
            }
        }
        Err(SendError::ActorGone(msg))
    }

    /// Request-reply, as [`ActorRef::ask`], within `timeout` in all:
    /// resolving, retrying and waiting for the reply. `make` builds the
    /// request around a fresh reply ref each time it is sent, so it is
    /// `FnMut`. A ref found stale, before sending ([`AskError::NodeUnreachable`])
    /// or while waiting ([`AskError::NodeDown`]), is dropped, the path
    /// resolved again and the request sent to the new incarnation (see
    /// "Delivery across a restart" on [`NamedRef`]).
    ///
    /// # Errors
    /// As [`ActorRef::ask`]; [`AskError::Unresolved`] when the path did not
    /// resolve (a missing actor, a wrong type, or a node unreachable for
    /// the whole time); [`AskError::Timeout`] when the time ran out.
    pub async fn ask<R: Send + 'static>(
        &self,
        mut make: impl FnMut(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        let deadline = Instant::now() + timeout;
        let mut wait = FIRST_RETRY;
        let mut stale = 0;
        loop {
            let (generation, r) = match self.resolved(deadline).await {
                Ok(found) => found,
                Err(ResolveError::Timeout { .. }) if Instant::now() >= deadline => {
                    return Err(AskError::Timeout(timeout));
                }
                Err(e) => return Err(AskError::Unresolved(e)),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match r.ask(&mut make, left).await {
                Err(AskError::NodeUnreachable(_) | AskError::NodeDown { .. })
                    if stale + 1 < MAX_STALE && Instant::now() + wait < deadline =>
                {
                    stale += 1;
                    self.forget(generation);
                    tracing::debug!(path = %self.inner.path, retry_in = ?wait, "the ref is stale: resolving again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_RETRY);
                }
                Err(AskError::Timeout(_)) => return Err(AskError::Timeout(timeout)),
                other => return other,
            }
        }
    }
}
