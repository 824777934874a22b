//! Death watch: who is told when an actor terminates.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use tokio::sync::oneshot;

use crate::{
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
};

/// Receives an actor's system notifications.
pub(crate) trait SystemSink: Send + Sync {
    fn push_terminated(&self, t: Terminated);
}

/// Carries a `Terminated` to a watcher on another node (implemented by
/// the association to that node), so that death watch needs nothing of
/// remoting but this.
pub(crate) trait RemoteWatcher: Send + Sync {
    fn send_terminated(self: Arc<Self>, watch_id: u64, t: &Terminated);
}

/// Where a `Terminated` goes.
#[derive(Clone)]
pub(crate) enum WatchSink {
    /// A local actor's system queue.
    Actor(Arc<dyn SystemSink>),
    /// A [`Watch`] future.
    Once(Arc<Mutex<Option<oneshot::Sender<Terminated>>>>),
    /// A watcher on another node, reached over `link` (its association).
    Remote {
        link: Arc<dyn RemoteWatcher>,
        watch_id: u64,
    },
}

impl WatchSink {
    pub(crate) fn deliver(&self, t: Terminated) {
        match self {
            Self::Actor(a) => a.push_terminated(t),
            Self::Once(slot) => {
                if let Some(tx) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    let _ = tx.send(t);
                }
            }
            Self::Remote { link, watch_id } => link.clone().send_terminated(*watch_id, &t),
        }
    }
}

/// The watchers of one actor, and whether it has already terminated.
#[derive(Default)]
pub(crate) struct WatchList {
    done: Option<StopReason>,
    watchers: Vec<WatchSink>,
}

/// Shared, lockable [`WatchList`].
#[derive(Default)]
pub(crate) struct Watchers(Mutex<WatchList>);

impl Watchers {
    /// Adds a watcher, or tells it at once if the actor is gone.
    pub(crate) fn add(&self, path: &ActorPath, sink: WatchSink) {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(reason) = &w.done {
            let t = Terminated {
                path: path.clone(),
                reason: reason.clone(),
            };
            drop(w);
            sink.deliver(t);
        } else {
            w.watchers.push(sink);
        }
    }

    /// Marks the actor terminated and tells every watcher.
    pub(crate) fn terminate(&self, path: &ActorPath, reason: StopReason) {
        let list = {
            let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if w.done.is_some() {
                return;
            }
            w.done = Some(reason.clone());
            std::mem::take(&mut w.watchers)
        };
        for sink in list {
            sink.deliver(Terminated {
                path: path.clone(),
                reason: reason.clone(),
            });
        }
    }
}

/// Resolves to the watched actor's [`Terminated`]; from
/// [`ActorRef::watch`](crate::ActorRef::watch).
#[derive(Debug)]
pub struct Watch {
    pub(crate) rx: oneshot::Receiver<Terminated>,
    pub(crate) path: ActorPath,
}

impl Future for Watch {
    type Output = Terminated;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Terminated> {
        let path = self.path.clone();
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or(Terminated {
                path,
                // The watch registration itself went away: the system that
                // held it shut down.
                reason: StopReason::SystemShutdown,
            })
        })
    }
}
