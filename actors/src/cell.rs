//! The local targets that remote messages are delivered to: a local
//! actor's runtime side ([`Cell`]: mailbox, path, watchers, decoder) and
//! an ask's reply slot ([`Promise`]).

use std::{
    any::Any,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, OnceLock, PoisonError, Weak,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::{
    budget::Charge,
    dead_letter::DeadLetterReason,
    error::AskError,
    lifecycle::{StopReason, Terminated},
    mailbox::{Mailbox, Refused, SystemMsg, next_record_ext},
    path::ActorPath,
    registry::{Registry, Target},
    reply::{NoReply, Unanswered},
    serialization::{
        Decoders, RemoteMessage, decode_record, decoders, manifest_id, with_decode_scope,
    },
    supervision::{ChildControl, ChildEvent, Parent},
    trace::TraceContext,
    watch::{SystemSink, TooManyWatches, WatchSink, Watchers},
};

/// Decodes a remote message on the actor's own task.
pub(crate) type DecodeFn<M> = Decoders<M>;

/// The runtime side of a local actor: its mailbox, path and watchers.
pub(crate) struct Cell<M> {
    pub(crate) mailbox: Mailbox<M>,
    pub(crate) path: ActorPath,
    pub(crate) watchers: Watchers,
    pub(crate) registry: Weak<Registry>,
    /// Set when the actor becomes reachable from other nodes.
    pub(crate) decode: OnceLock<DecodeFn<M>>,
    pub(crate) registered: AtomicBool,
}

impl<M: Send + 'static> SystemSink for Cell<M> {
    fn push_terminated(&self, t: Terminated) {
        self.mailbox.push_system(SystemMsg::Terminated(t));
    }
}

impl<M: Send + 'static> Parent for Cell<M> {
    fn child_event(&self, event: ChildEvent) {
        // Refused only once this actor has ended: nothing left to tell.
        self.mailbox.push_system(SystemMsg::Child(event));
    }
}

impl<M: Send + 'static> ChildControl for Cell<M> {
    fn stop(&self) {
        self.mailbox.push_system(SystemMsg::Stop);
    }

    fn restart(&self) {
        self.mailbox.push_system(SystemMsg::Restart);
    }
}

impl<M: RemoteMessage> Cell<M> {
    /// Makes this actor reachable from other nodes under its path.
    pub(crate) fn register_remote(self: &Arc<Self>) {
        if self.registered.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.decode.set(decoders::<M>());
        if let Some(registry) = self.registry.upgrade() {
            let target: Arc<dyn Target> = self.clone();
            registry.register(self.path.elements(), target);
        }
    }
}

impl<M: RemoteMessage> Target for Cell<M> {
    fn manifest(&self) -> u32 {
        manifest_id(M::MANIFEST)
    }

    fn is_open(&self) -> bool {
        !self.mailbox.is_closed()
    }

    fn manifest_name(&self) -> &'static str {
        M::MANIFEST
    }

    fn push_batch(&self, batch: &Bytes, n: usize, charge: &mut Charge) -> Result<(), Refused> {
        self.mailbox.push_batch(batch, n, charge)
    }

    fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.mailbox.wait_space())
    }

    fn add_watcher(&self, sink: WatchSink) -> Result<(), TooManyWatches> {
        self.watchers.add(&self.path, sink)
    }

    fn remove_watcher(&self, sink: &WatchSink) {
        self.watchers.remove(sink);
    }

    fn stop(&self) {
        self.mailbox.push_system(SystemMsg::Stop);
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// What an ask's reply slot completes with: the reply and the trace
/// context it carried, or why none will come.
pub(crate) type Answer<M> = Result<(M, Option<TraceContext>), AskError>;

/// The reply slot of an `ask`: completes a oneshot with the reply (and
/// the trace context it came with), or with why none will come (the
/// request was a dead letter on its node, the handler failed, every
/// reply ref was dropped; see `reply`).
pub(crate) struct Promise<M> {
    pub(crate) tx: Mutex<Option<oneshot::Sender<Answer<M>>>>,
    pub(crate) path: ActorPath,
    pub(crate) registry: Weak<Registry>,
    pub(crate) registered: AtomicBool,
    /// Live reply refs to this slot in this process (`ReplyHandle`).
    pub(crate) handles: AtomicUsize,
    /// This slot, as what `reply::unanswered` fails: set once at creation
    /// (a `Weak`, so that the slot does not keep itself alive).
    pub(crate) me: Weak<dyn Unanswered>,
}

impl<M: Send + 'static> Promise<M> {
    /// Fails the ask with `e`, if it still waits.
    pub(crate) fn fail_with(&self, e: AskError) {
        if let Some(tx) = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(Err(e));
        }
    }

    /// Completes the ask with `m`, which came in trace context `trace`.
    pub(crate) fn complete(&self, m: M, trace: Option<TraceContext>) -> Result<(), M> {
        match self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(tx) => tx.send(Ok((m, trace))).map_err(|r| match r {
                Ok((m, _)) => m,
                Err(_) => unreachable!("sent a reply"),
            }),
            None => Err(m),
        }
    }
}

impl<M: Send + 'static> Unanswered for Promise<M> {
    fn no_reply(&self, why: NoReply) {
        self.fail_with(why.into_ask_error());
    }
}

impl<M: RemoteMessage> Target for Promise<M> {
    fn manifest(&self) -> u32 {
        manifest_id(M::MANIFEST)
    }

    fn manifest_name(&self) -> &'static str {
        M::MANIFEST
    }

    fn push_batch(&self, batch: &Bytes, _n: usize, _: &mut Charge) -> Result<(), Refused> {
        let Some(registry) = self.registry.upgrade() else {
            // The asking system is gone; so is the ask.
            return Ok(());
        };
        let deliver = || {
            let mut pos = 0;
            while let Some((range, ext)) = next_record_ext(batch, &mut pos) {
                // The reply's trace context goes to the asker with it
                // (`ActorRef::ask_traced`).
                let why = match decode_record::<M>(&batch[range], ext) {
                    Ok((m, trace)) => match self.complete(m, trace) {
                        Ok(()) => continue,
                        Err(_) => DeadLetterReason::AskDone,
                    },
                    Err(e) => DeadLetterReason::Undecodable(format!("reply: {e}").into()),
                };
                registry.dead_letter(std::any::type_name::<M>(), &self.path, &why);
            }
            if pos < batch.len() {
                // A graceful stop (`mailbox::STOP_RECORD`): for a reply
                // slot, as `stop`.
                Target::stop(self);
            }
        };
        match registry.decode_scope() {
            Some(scope) => with_decode_scope(&scope, batch, deliver),
            None => deliver(),
        }
        Ok(())
    }

    fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }

    fn fail(&self, reason: &str) {
        self.fail_with(AskError::Undeliverable(reason.to_owned()));
    }

    fn no_reply(&self, why: NoReply) {
        self.fail_with(why.into_ask_error());
    }

    fn add_watcher(&self, sink: WatchSink) -> Result<(), TooManyWatches> {
        sink.deliver(Terminated {
            path: self.path.clone(),
            reason: StopReason::NotFound,
        });
        Ok(())
    }

    fn stop(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}
