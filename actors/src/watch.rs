//! Death watch: who is told when an actor terminates.

use std::{
    collections::HashMap,
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
    /// Tells watch `watch_id`, placed by the node's incarnation `uid`,
    /// that its actor terminated. An incarnation that is gone (shut down,
    /// restarted) is told nothing, and its node is not dialed for it.
    fn send_terminated(self: Arc<Self>, watch_id: u64, uid: u64, t: &Terminated);
}

/// Where a `Terminated` goes.
#[derive(Clone)]
pub(crate) enum WatchSink {
    /// A local actor's system queue.
    Actor(Arc<dyn SystemSink>),
    /// A [`Watch`] future.
    Once(Arc<Mutex<Option<oneshot::Sender<Terminated>>>>),
    /// A watcher on another node, reached over `link` (its association);
    /// `uid` is the incarnation that placed the watch.
    Remote {
        link: Arc<dyn RemoteWatcher>,
        watch_id: u64,
        uid: u64,
    },
}

impl WatchSink {
    /// Whether `self` and `other` are the same watcher (the same actor,
    /// future, or remote watch).
    pub(crate) fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Actor(a), Self::Actor(b)) => {
                Arc::as_ptr(a).cast::<()>() == Arc::as_ptr(b).cast::<()>()
            }
            (Self::Once(a), Self::Once(b)) => Arc::ptr_eq(a, b),
            (
                Self::Remote {
                    link,
                    watch_id,
                    uid,
                },
                Self::Remote {
                    link: l2,
                    watch_id: w2,
                    uid: u2,
                },
            ) => {
                watch_id == w2
                    && uid == u2
                    && Arc::as_ptr(link).cast::<()>() == Arc::as_ptr(l2).cast::<()>()
            }
            _ => false,
        }
    }

    pub(crate) fn deliver(&self, t: Terminated) {
        match self {
            Self::Actor(a) => a.push_terminated(t),
            Self::Once(slot) => {
                if let Some(tx) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    let _ = tx.send(t);
                }
            }
            Self::Remote {
                link,
                watch_id,
                uid,
            } => link.clone().send_terminated(*watch_id, *uid, &t),
        }
    }
}

/// Most watches one remote node may hold on one actor: 1,024. Each is a
/// few dozen bytes here and a `Terminated` to send when the actor stops;
/// a peer's `Watch` messages cannot grow one actor's list without bound.
pub(crate) const MAX_REMOTE_WATCHES_PER_NODE: usize = 1024;

/// The watchers of one actor, and whether it has already terminated.
#[derive(Default)]
pub(crate) struct WatchList {
    done: Option<StopReason>,
    watchers: Vec<WatchSink>,
    /// Remote watchers per node (by the address of its association).
    remote: HashMap<usize, usize>,
}

/// Why a watch was not added.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooManyWatches;

/// Shared, lockable [`WatchList`].
#[derive(Default)]
pub(crate) struct Watchers(Mutex<WatchList>);

impl Watchers {
    /// Adds a watcher, or tells it at once if the actor is gone.
    ///
    /// # Errors
    /// A remote watcher whose node holds [`MAX_REMOTE_WATCHES_PER_NODE`]
    /// watches on this actor already: not added.
    pub(crate) fn add(&self, path: &ActorPath, sink: WatchSink) -> Result<(), TooManyWatches> {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(reason) = &w.done {
            let t = Terminated {
                path: path.clone(),
                reason: reason.clone(),
            };
            drop(w);
            sink.deliver(t);
            return Ok(());
        }
        if let WatchSink::Remote { link, .. } = &sink {
            let node = Arc::as_ptr(link).cast::<()>() as usize;
            let held = w.remote.entry(node).or_default();
            if *held >= MAX_REMOTE_WATCHES_PER_NODE {
                return Err(TooManyWatches);
            }
            *held += 1;
        }
        w.watchers.push(sink);
        Ok(())
    }

    /// Removes every watch of `sink` (see [`WatchSink::same`]); it hears
    /// nothing more of this actor.
    pub(crate) fn remove(&self, sink: &WatchSink) {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let WatchList {
            watchers, remote, ..
        } = &mut *w;
        watchers.retain(|s| {
            if !s.same(sink) {
                return true;
            }
            if let WatchSink::Remote { link, .. } = s {
                let node = Arc::as_ptr(link).cast::<()>() as usize;
                if let Some(n) = remote.get_mut(&node) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        remote.remove(&node);
                    }
                }
            }
            false
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Node;
    impl RemoteWatcher for Node {
        fn send_terminated(self: Arc<Self>, _: u64, _: u64, _: &Terminated) {}
    }

    #[test]
    fn each_node_holds_a_bounded_number_of_watches_on_an_actor() {
        let path = ActorPath::parse("tcp://s@h:1/user/a").expect("valid");
        let w = Watchers::default();
        let (one, two): (Arc<dyn RemoteWatcher>, Arc<dyn RemoteWatcher>) =
            (Arc::new(Node), Arc::new(Node));
        let remote = |link: &Arc<dyn RemoteWatcher>, watch_id| WatchSink::Remote {
            link: link.clone(),
            watch_id,
            uid: 1,
        };
        for i in 0..MAX_REMOTE_WATCHES_PER_NODE as u64 {
            w.add(&path, remote(&one, i)).expect("within the bound");
        }
        assert_eq!(w.add(&path, remote(&one, 0)), Err(TooManyWatches));
        // Another node has its own allowance; local watchers none.
        w.add(&path, remote(&two, 0)).expect("another node");
        for _ in 0..10 {
            let (tx, _rx) = oneshot::channel();
            w.add(&path, WatchSink::Once(Arc::new(Mutex::new(Some(tx)))))
                .expect("local");
        }
    }
}
