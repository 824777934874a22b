//! The large-message lane: messages too large for one frame of the link's
//! shared queue travel in fragments, sent one at a time by a task of their
//! own, and are reassembled by the receiver.
//!
//! An envelope over [`LARGE_MESSAGE_THRESHOLD`] (256 KiB) is not queued
//! whole: it goes to the association's lane, which sends its payload in
//! [`FRAGMENT_SIZE`] (64 KiB) pieces, each an envelope with a fragment
//! header (`envelope`). It queues one fragment, then waits until the
//! writer has taken it (`Sender::wait_taken`) and until the receiver has
//! acknowledged all but [`LARGE_WINDOW`] bytes (`SysWire::LargeAck`, sent
//! at the end of each read) before queueing the next, so small messages
//! (queued straight into the link's buffer) and heartbeats (control lane)
//! go out between two fragments: they wait behind a few fragments, in user
//! space and in the sockets' kernel buffers, not behind the whole message.
//!
//! The receiver reassembles one large message per connection
//! ([`Reassembly`]: fragments in order, a buffer grown as they arrive,
//! capped by `SystemConfig::set_max_message_size`) and hands it to the
//! mailbox as one message. Large messages are therefore not ordered with
//! small ones to the same actor (Akka's large-message channel makes the
//! same trade); they are ordered among themselves.

use std::{
    collections::VecDeque,
    fmt,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use transport::FrameKind;

use super::{
    envelope::{self, FRAGMENT_HEADER, Fragment, Tag},
    link::{Link, Recipient, lock},
};
use crate::{dead_letter::DeadLetterReason, mailbox::RECORD_EXT};

/// A remote message whose envelope (its encoded size plus the recipient's
/// path and about a dozen bytes) is larger than this, 256 KiB, travels on
/// its link's large-message lane, in 64 KiB fragments. Large messages are
/// ordered among themselves, but not with the link's small messages,
/// which overtake them (so that small messages never wait behind a large
/// one).
pub const LARGE_MESSAGE_THRESHOLD: usize = 256 * 1024;
/// Payload bytes per fragment.
pub(super) const FRAGMENT_SIZE: usize = 64 * 1024;
/// Payload bytes of a large message sent and not yet acknowledged by the
/// receiver: what a small message may wait behind in the sockets' kernel
/// buffers (which hold megabytes, so pacing by the writer alone is not
/// enough).
const LARGE_WINDOW: usize = 4 * FRAGMENT_SIZE;

/// What the lane needs of the association it belongs to.
pub(super) trait LaneHost: Send + Sync + Sized + 'static {
    fn lane(&self) -> &LargeLane;
    /// The link to send a large message to `r` on, connecting if needed;
    /// the error says why there is none.
    fn link_for(
        host: &Arc<Self>,
        r: &Recipient,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<Link, DeadLetterReason>> + Send;
    /// Counts a large message the lane gave up on.
    fn lane_dead_letter(&self, what: &str, to: &dyn fmt::Display, why: &DeadLetterReason);
    /// Stops the lane's task when the system shuts down.
    fn lane_cancel(&self) -> CancellationToken;
}

/// An association's large-message lane (the sending side).
pub(super) struct LargeLane {
    /// Envelopes larger than this take the lane: the threshold, or the
    /// frame size or the maximum message size if smaller.
    threshold: usize,
    max_frame: usize,
    max_message: usize,
    queue: Mutex<LargeQueue>,
    /// Notified when the lane finished a message.
    room: Notify,
    next_msg: AtomicU32,
    /// The last `LargeAck`: message id and bytes received.
    acked: Mutex<(u32, u32)>,
    /// Notified on every `LargeAck`, and when a link closes.
    ack: Notify,
    /// Fragments sent (for metrics).
    pub(super) fragments_sent: AtomicU64,
}

/// A large message waiting for (or in) the lane.
struct LargeMsg {
    r: Arc<Recipient>,
    tag: Tag,
    payload: Bytes,
}

#[derive(Default)]
struct LargeQueue {
    items: VecDeque<LargeMsg>,
    /// Payload bytes queued, the message being sent included.
    bytes: usize,
    /// The lane's task is running.
    running: bool,
}

impl LargeLane {
    /// The size from which a message takes this lane.
    pub(super) fn threshold_for(max_frame: usize, max_message: usize) -> usize {
        LARGE_MESSAGE_THRESHOLD.min(max_frame).min(max_message)
    }

    pub(super) fn new(max_frame: usize, max_message: usize) -> Self {
        Self {
            threshold: Self::threshold_for(max_frame, max_message),
            max_frame,
            max_message,
            queue: Mutex::new(LargeQueue::default()),
            room: Notify::new(),
            next_msg: AtomicU32::new(1),
            fragments_sent: AtomicU64::new(0),
            acked: Mutex::new((0, 0)),
            ack: Notify::new(),
        }
    }

    #[inline]
    pub(super) fn threshold(&self) -> usize {
        self.threshold
    }

    /// A link closed: a fragment waiting for its ack on it stops waiting.
    pub(super) fn link_closed(&self) {
        self.ack.notify_waiters();
    }

    /// A `LargeAck` from the peer.
    pub(super) fn on_ack(&self, msg: u32, received: u32) {
        {
            let mut a = lock(&self.acked);
            if a.0 != msg || a.1 < received {
                *a = (msg, received);
            }
        }
        self.ack.notify_waiters();
    }

    /// Queues a large message unless the lane holds more than the maximum
    /// message size already (an idle lane takes any; the message comes
    /// back otherwise); starts the lane's task if it is not running.
    pub(super) fn enqueue<H: LaneHost>(
        host: &Arc<H>,
        r: &Arc<Recipient>,
        tag: Tag,
        payload: Bytes,
    ) -> Result<(), Bytes> {
        let lane = host.lane();
        let mut q = lock(&lane.queue);
        if q.bytes > 0 && q.bytes + payload.len() > lane.max_message {
            return Err(payload);
        }
        q.bytes += payload.len();
        q.items.push_back(LargeMsg {
            r: r.clone(),
            tag,
            payload,
        });
        if !std::mem::replace(&mut q.running, true) {
            tokio::spawn(Self::run(host.clone()));
        }
        Ok(())
    }

    /// Queues a large message, waiting while the lane is full.
    pub(super) async fn enqueue_wait<H: LaneHost>(
        host: &Arc<H>,
        r: &Arc<Recipient>,
        tag: Tag,
        mut payload: Bytes,
    ) {
        loop {
            let room = host.lane().room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match Self::enqueue(host, r, tag, payload) {
                Ok(()) => return,
                Err(p) => payload = p,
            }
            room.await;
        }
    }

    /// The lane's task: sends queued large messages one at a time.
    async fn run<H: LaneHost>(host: Arc<H>) {
        let cancel = host.lane_cancel();
        loop {
            let m = {
                let mut q = lock(&host.lane().queue);
                match q.items.pop_front() {
                    Some(m) => m,
                    None => {
                        q.running = false;
                        return;
                    }
                }
            };
            if let Err(why) = Self::send(&host, &m, &cancel).await {
                host.lane_dead_letter(
                    &format!("large message of {} bytes", m.payload.len()),
                    &m.r.path,
                    &why,
                );
            }
            let lane = host.lane();
            lock(&lane.queue).bytes -= m.payload.len();
            lane.room.notify_waiters();
        }
    }

    /// Sends one large message in fragments, letting the link's other
    /// traffic go out between two of them.
    async fn send<H: LaneHost>(
        host: &Arc<H>,
        m: &LargeMsg,
        cancel: &CancellationToken,
    ) -> Result<(), DeadLetterReason> {
        let link = H::link_for(host, &m.r, cancel).await?;
        let lane = host.lane();
        let total = m.payload.len();
        let piece = FRAGMENT_SIZE
            .min(
                lane.max_frame
                    .saturating_sub(m.r.overhead() + FRAGMENT_HEADER),
            )
            .max(1);
        let msg = lane.next_msg.fetch_add(1, Ordering::Relaxed);
        let mut offset = 0;
        while offset < total {
            let end = (offset + piece).min(total);
            let f = Fragment {
                msg,
                total: total as u32,
                offset: offset as u32,
            };
            let bytes = &m.payload[offset..end];
            link.sender
                .send_with(FrameKind::Message, |b| {
                    write_fragment(b, &m.r, &link, m.tag, f, bytes)
                })
                .await
                .map_err(|_| {
                    DeadLetterReason::LinkLost("link closed while sending a large message".into())
                })?;
            lane.fragments_sent.fetch_add(1, Ordering::Relaxed);
            // What other senders queue meanwhile goes out before the next
            // fragment, and at most `LARGE_WINDOW` bytes are unacknowledged
            // (so in the sockets' buffers ahead of a small message).
            link.sender.wait_taken().await;
            lane.wait_ack(&link, msg, end.saturating_sub(LARGE_WINDOW))
                .await;
            offset = end;
        }
        Ok(())
    }

    /// Waits until the receiver has acknowledged `want` bytes of large
    /// message `msg`, or the link is closed.
    async fn wait_ack(&self, link: &Link, msg: u32, want: usize) {
        loop {
            let acked = self.ack.notified();
            tokio::pin!(acked);
            acked.as_mut().enable();
            let (m, got) = *lock(&self.acked);
            if (m == msg && got as usize >= want) || link.sender.is_closed() {
                return;
            }
            acked.await;
        }
    }
}

/// Appends the envelope for one fragment of a large message.
fn write_fragment(
    b: &mut BytesMut,
    r: &Recipient,
    link: &Link,
    tag: Tag,
    f: Fragment,
    piece: &[u8],
) {
    envelope::put_header(b, r.to_on(link), tag, Some(f));
    b.put_slice(piece);
}

/// Reassembles the large messages arriving on one connection, one at a
/// time. Pure: the dispatcher feeds it fragments and acts on each
/// [`Step`]. `T` is what the dispatcher delivers a finished message to.
#[derive(Debug)]
pub(super) struct Reassembly<T> {
    partial: Option<Partial<T>>,
    /// A large message whose further fragments are dropped (too large, or
    /// for no actor that takes it).
    skipping: Option<u32>,
}

/// A large message being reassembled.
#[derive(Debug)]
struct Partial<T> {
    msg: u32,
    id: u32,
    manifest: u32,
    total: usize,
    target: T,
    /// A one-record batch: `[total u32 LE]`, then the payload so far. A
    /// `Vec` for `reserve_exact`.
    buf: Vec<u8>,
}

impl<T> Partial<T> {
    fn received(&self) -> usize {
        self.buf.len() - 4
    }
}

/// What a fragment did.
#[derive(Debug, PartialEq)]
pub(super) enum Step<T> {
    /// Nothing to hand over yet (or a fragment of a skipped message).
    Pending,
    /// The message is complete: a one-record batch for `T`.
    Complete(T, Bytes),
    /// The fragment does not fit what came before; the message it belongs
    /// to (if any) is dropped.
    Malformed(String),
    /// A message larger than the maximum message size starts: dropped, and
    /// its further fragments are skipped without buffering.
    TooLarge { total: usize, max: usize },
}

impl<T> Default for Reassembly<T> {
    fn default() -> Self {
        Self {
            partial: None,
            skipping: None,
        }
    }
}

impl<T> Reassembly<T> {
    /// Called before a first fragment (offset 0): the message in progress,
    /// if any, is abandoned, and this says how far it got.
    pub(super) fn abandon_for(&mut self, next: u32) -> Option<String> {
        self.skipping = None;
        let p = self.partial.take()?;
        Some(format!(
            "large message {} left at {} of {} bytes when message {next} started",
            p.msg,
            p.received(),
            p.total
        ))
    }

    /// The message in progress when the connection closes: its target,
    /// bytes received and total.
    pub(super) fn take_partial(&mut self) -> Option<(T, usize, usize)> {
        self.partial.take().map(|p| {
            let received = p.received();
            (p.target, received, p.total)
        })
    }

    /// Bytes the message in progress holds (its buffer's capacity), to
    /// charge to the connection's share of the node's budget.
    #[inline]
    pub(super) fn held(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.buf.capacity())
    }

    /// Drops the message in progress (its charge was refused) and skips
    /// its further fragments: its target, bytes received and total.
    pub(super) fn drop_current(&mut self) -> Option<(T, usize, usize)> {
        let p = self.partial.take()?;
        self.skipping = Some(p.msg);
        let received = p.received();
        Some((p.target, received, p.total))
    }

    /// One fragment for recipient `id`. Fragments of a message arrive in
    /// order and one message at a time (the sender's lane sends them so);
    /// anything else is malformed and drops the message. For a first
    /// fragment, `target` is asked where the message goes; `None` skips it
    /// (the caller has reported why).
    pub(super) fn push(
        &mut self,
        id: u32,
        tag: Tag,
        f: Fragment,
        piece: &[u8],
        max: usize,
        target: impl FnOnce() -> Option<T>,
    ) -> Step<T> {
        let total = f.total as usize;
        if f.offset == 0 {
            if piece.is_empty() || piece.len() > total {
                return Step::Malformed(format!(
                    "fragment of {} bytes does not fit large message {} of {total} bytes",
                    piece.len(),
                    f.msg
                ));
            }
            if total > max {
                self.skipping = Some(f.msg);
                return Step::TooLarge { total, max };
            }
            let Some(target) = target() else {
                self.skipping = Some(f.msg);
                return Step::Pending;
            };
            // Grown as fragments arrive: a peer's claimed total is never
            // allocated up front.
            let mut buf = Vec::with_capacity(4 + piece.len());
            // `total <= max`, below `RECORD_EXT`; the first fragment's
            // extension flag is the message's.
            let head = f.total | if tag.ext { RECORD_EXT } else { 0 };
            buf.extend_from_slice(&head.to_le_bytes());
            buf.extend_from_slice(piece);
            self.partial = Some(Partial {
                msg: f.msg,
                id,
                manifest: tag.manifest,
                total,
                target,
                buf,
            });
        } else {
            if self.skipping == Some(f.msg) {
                return Step::Pending;
            }
            let Some(p) = &mut self.partial else {
                return Step::Malformed(format!(
                    "fragment at offset {} of large message {}, which never started",
                    f.offset, f.msg
                ));
            };
            if p.msg != f.msg
                || p.id != id
                || p.manifest != tag.manifest
                || p.total != total
                || p.received() != f.offset as usize
                || piece.is_empty()
                || piece.len() > total - p.received()
            {
                let why = format!(
                    "fragment (message {}, {} bytes at offset {} of {total}) does not continue large message {} ({} of {} bytes received)",
                    f.msg,
                    piece.len(),
                    f.offset,
                    p.msg,
                    p.received(),
                    p.total
                );
                self.partial = None;
                return Step::Malformed(why);
            }
            if p.buf.capacity() - p.buf.len() < piece.len() {
                // Double, but never beyond the message's size.
                let want = p.received().max(piece.len()).min(total - p.received());
                p.buf.reserve_exact(want);
            }
            p.buf.extend_from_slice(piece);
        }
        match self.partial.take() {
            Some(p) if p.received() == p.total => Step::Complete(p.target, Bytes::from(p.buf)),
            other => {
                self.partial = other;
                Step::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(msg: u32, total: usize, offset: usize) -> Fragment {
        Fragment {
            msg,
            total: total as u32,
            offset: offset as u32,
        }
    }

    /// Feeds `data` as fragments of `piece` bytes; returns the last step.
    fn feed(
        r: &mut Reassembly<&'static str>,
        msg: u32,
        data: &[u8],
        piece: usize,
    ) -> Step<&'static str> {
        let mut last = Step::Pending;
        for (i, chunk) in data.chunks(piece).enumerate() {
            if i == 0 {
                assert_eq!(r.abandon_for(msg), None);
            }
            last = r.push(
                1,
                Tag::plain(9),
                frag(msg, data.len(), i * piece),
                chunk,
                1 << 20,
                || Some("t"),
            );
        }
        last
    }

    #[test]
    fn fragments_in_order_make_one_batch_record() {
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut r = Reassembly::default();
        let Step::Complete(t, batch) = feed(&mut r, 1, &data, 64) else {
            panic!("complete")
        };
        assert_eq!(t, "t");
        assert_eq!(&batch[..4], &1000u32.to_le_bytes());
        assert_eq!(&batch[4..], &data[..]);
        // And the next message starts clean.
        assert!(matches!(feed(&mut r, 2, b"abc", 2), Step::Complete("t", _)));
    }

    #[test]
    fn the_buffer_never_exceeds_the_message() {
        let mut r = Reassembly::default();
        let total = 10_000;
        let mut last = Step::Pending;
        for off in (0..total).step_by(1000) {
            last = r.push(
                1,
                Tag::plain(9),
                frag(3, total, off),
                &[7; 1000],
                1 << 20,
                || Some("t"),
            );
            if let Some(p) = &r.partial {
                assert!(p.buf.capacity() <= 4 + total, "{}", p.buf.capacity());
            }
        }
        assert!(matches!(last, Step::Complete(..)));
    }

    #[test]
    fn out_of_order_or_foreign_fragments_are_malformed() {
        let mut r = Reassembly::<&str>::default();
        assert!(matches!(
            r.push(1, Tag::plain(9), frag(1, 100, 10), &[0; 10], 1000, || Some("t")),
            Step::Malformed(why) if why.contains("never started")
        ));
        assert_eq!(
            r.push(1, Tag::plain(9), frag(1, 100, 0), &[0; 10], 1000, || Some(
                "t"
            )),
            Step::Pending
        );
        // A gap.
        assert!(matches!(
            r.push(1, Tag::plain(9), frag(1, 100, 20), &[0; 10], 1000, || Some("t")),
            Step::Malformed(why) if why.contains("does not continue")
        ));
        assert!(r.take_partial().is_none(), "the message was dropped");
        // Another recipient's fragment in the middle of a message.
        r.push(1, Tag::plain(9), frag(2, 100, 0), &[0; 10], 1000, || {
            Some("t")
        });
        assert!(matches!(
            r.push(5, Tag::plain(9), frag(2, 100, 10), &[0; 10], 1000, || Some(
                "t"
            )),
            Step::Malformed(_)
        ));
        // A first fragment larger than its message.
        assert!(matches!(
            r.push(1, Tag::plain(9), frag(3, 5, 0), &[0; 10], 1000, || Some("t")),
            Step::Malformed(why) if why.contains("does not fit")
        ));
    }

    #[test]
    fn a_message_over_the_limit_is_skipped_without_buffering() {
        let mut r = Reassembly::<&str>::default();
        let step = r.push(1, Tag::plain(9), frag(1, 5000, 0), &[0; 100], 1000, || {
            panic!("not asked")
        });
        assert_eq!(
            step,
            Step::TooLarge {
                total: 5000,
                max: 1000
            }
        );
        assert_eq!(
            r.push(
                1,
                Tag::plain(9),
                frag(1, 5000, 100),
                &[0; 100],
                1000,
                || None
            ),
            Step::Pending
        );
        assert!(r.partial.is_none());
    }

    #[test]
    fn a_message_without_a_target_is_skipped() {
        let mut r = Reassembly::<&str>::default();
        assert_eq!(
            r.push(1, Tag::plain(9), frag(1, 200, 0), &[0; 100], 1000, || None),
            Step::Pending
        );
        assert_eq!(
            r.push(1, Tag::plain(9), frag(1, 200, 100), &[0; 100], 1000, || {
                None
            }),
            Step::Pending
        );
    }

    #[test]
    fn a_new_message_abandons_the_unfinished_one() {
        let mut r = Reassembly::default();
        r.push(1, Tag::plain(9), frag(1, 200, 0), &[0; 100], 1000, || {
            Some("t")
        });
        let why = r.abandon_for(2).expect("abandoned");
        assert_eq!(
            why,
            "large message 1 left at 100 of 200 bytes when message 2 started"
        );
        r.push(1, Tag::plain(9), frag(2, 200, 0), &[0; 100], 1000, || {
            Some("u")
        });
        assert_eq!(r.take_partial(), Some(("u", 100, 200)));
    }

    #[test]
    fn what_a_message_holds_is_known_and_a_dropped_one_is_skipped() {
        let mut r = Reassembly::default();
        assert_eq!(r.held(), 0);
        r.push(1, Tag::plain(9), frag(1, 300, 0), &[0; 100], 1000, || {
            Some("t")
        });
        assert!(r.held() >= 104, "the length and the first piece");
        assert_eq!(r.drop_current(), Some(("t", 100, 300)));
        assert_eq!(r.held(), 0);
        assert_eq!(
            r.push(1, Tag::plain(9), frag(1, 300, 100), &[0; 100], 1000, || {
                Some("t")
            }),
            Step::Pending,
            "further fragments are skipped, not malformed"
        );
        assert_eq!(r.held(), 0);
    }
}
