//! [`ActorRef::send`]: a `tell` that waits for room (in the mailbox, or
//! on the link to a remote node) instead of handing the message back, and
//! its future, [`SendFuture`], two words whatever the message.

use std::{fmt, future::Future, pin::Pin};

use super::{ActorRef, Inner};
use crate::{dead_letter::DeadLetterReason, error::SendError, mailbox::Queued};

impl<M: Send + 'static> ActorRef<M> {
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
    pub(super) async fn send_slow_with(
        &self,
        msg: M,
        reply: Option<&str>,
    ) -> Result<(), SendError<M>> {
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
