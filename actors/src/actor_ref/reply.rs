//! Reply refs: what makes an ask fail at once when its reply ref is
//! dropped unanswered (see `crate::reply`). A local ask's slot counts its
//! live handles (`ReplyHandle`), and the last one dropped unanswered fails
//! the ask; a decoded ref to another node's slot (a `/temp/` path) notes
//! whether it was answered or forwarded, and otherwise tells that node
//! when it is dropped (`RemoteNoReply`).

use std::sync::{
    Arc, Mutex, PoisonError, Weak,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use tokio::sync::oneshot;

use super::{ActorRef, Inner};
use crate::{
    cell::{Answer, Promise},
    path::ActorPath,
    registry::Registry,
    remote::{Association, Recipient},
    reply::{NoReply, Unanswered},
};

/// What a decoded ref to a remote ask's reply slot knows of its use.
pub(crate) struct RemoteReply {
    /// A reply (or another message) was sent through it.
    pub(super) answered: AtomicBool,
    /// It was serialized again (forwarded): whoever decodes it answers.
    pub(super) forwarded: AtomicBool,
}

/// A remote ask's reply slot, told that no reply will come.
pub(super) struct RemoteNoReply {
    pub(super) assoc: Arc<Association>,
    pub(super) recipient: Arc<Recipient>,
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
pub(super) struct ReplyHandle<M>(pub(super) Arc<Promise<M>>);

impl<M> ReplyHandle<M> {
    pub(super) fn new(p: Arc<Promise<M>>) -> Self {
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

impl<M: Send + 'static> ActorRef<M> {
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

    /// This ref, if it is one to another node's ask reply slot (a
    /// `/temp/` path) just decoded, made to tell that node when it is
    /// dropped unanswered. Such a ref sends through the extension path,
    /// where the reply is noted, so a plain remote `tell` pays nothing.
    pub(super) fn watching_reply(self) -> Self {
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
}
