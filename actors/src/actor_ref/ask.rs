//! [`ActorRef::ask`]: request-reply. The request is built around a
//! fresh reply slot (`/temp/...`), sent as a `tell` (or waiting for room
//! as `send` does), and the answer awaited within the timeout, or until
//! the recipient's node is known to be down. The slot is unregistered
//! when the ask ends, however it ends (`PromiseGuard`).

use std::{
    sync::{Arc, PoisonError, atomic::Ordering},
    time::Duration,
};

use super::{ActorRef, Inner};
use crate::{
    cell::Promise,
    dead_letter::DeadLetterReason,
    error::{AskError, SendError},
    registry::Registry,
    trace::TraceContext,
};

impl<M: Send + 'static> ActorRef<M> {
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
