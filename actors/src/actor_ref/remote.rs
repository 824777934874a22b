//! A ref to an actor on another node ([`RemoteRef`]): the link it sends
//! on, the recipient and the message's manifest and encoder, fixed when
//! the ref is made; its `tell` for messages that may carry an extension
//! block (another serializer, a trace context), kept out of line so that
//! a plain remote `tell` stays the short path; and what a remote send's
//! failure means to the caller.

use std::{
    marker::PhantomData,
    sync::{Arc, atomic::Ordering},
};

use bytes::BytesMut;

use super::{ActorRef, Inner};
use crate::{
    dead_letter::DeadLetterReason,
    error::{SendError, SerializationError},
    remote::{Association, Recipient, Tag, TellError},
    serialization::{Ext, RemoteMessage, SerializerId, encode_with_ext, manifest_id, manifests},
};

use super::reply::{RemoteNoReply, RemoteReply};

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
    pub(super) fn answered(&self) {
        if let Some(reply) = &self.reply {
            reply.answered.store(true, Ordering::Release);
        }
    }
}

impl<M> RemoteRef<M> {
    /// The envelope tag and extension block of a message sent now: the
    /// serializer if not bincode, the current trace context if
    /// propagation is on (not even read when it is off).
    #[inline(always)]
    pub(super) fn ext(&self) -> (Tag, Ext) {
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
    pub(super) fn encode(
        &self,
        ext: &Ext,
        msg: &M,
        b: &mut BytesMut,
        limit: usize,
    ) -> Result<(), SerializationError> {
        encode_with_ext(ext, b, limit, |b, limit| (self.encode)(msg, b, limit))
    }
}

impl<M: Send + 'static> ActorRef<M> {
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

    /// A remote `tell` of a message that may carry an extension block
    /// (another serializer than bincode, or trace propagation on).
    #[inline(never)]
    pub(super) fn tell_ext(&self, r: &RemoteRef<M>, msg: M) -> Result<bool, SendError<M>> {
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

    /// What a remote send's failure means to its caller, with the message
    /// handed back.
    #[cold]
    pub(super) fn remote_error(&self, e: TellError, msg: M) -> SendError<M> {
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
}
