//! The outbound queue: the encoded frames that producers have queued and
//! the writer has not taken yet, under one short lock, and the wake-ups
//! between the two sides.
//!
//! ```text
//!  producers (Sender)                 OutQueue                    writer task
//!  push ──────────► lock, append to `buf`, unlock ──────────► take: swap `buf` and
//!  push_control ──► lock, append to `control`     (wake it    `control` with its empty
//!                   (never refused for room)       if idle)   spares, or mark itself idle
//!  begin_close ───► Open → Closing(reason) ────────────────► take: encode Close, → Closed
//!  ◄── space ─────  notified when the writer takes what a full queue held
//! ```
//!
//! Every method holds the lock only for what it says; none does IO or
//! awaits under it. The state machine of the outbound side:
//!
//! ```text
//!   Open ──begin_close──► Closing(reason) ──writer sends Close──► Closed
//!     └───────────────────── supervisor: close() ───────────────────┘
//! ```

use std::{
    mem,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
};

use bytes::{BufMut, BytesMut};
use tokio::sync::Notify;

use crate::{
    error::FrameError,
    frame::{self, FrameKind, HEADER_LEN},
};

/// The queue one connection's producers share with its writer.
#[derive(Debug)]
pub(crate) struct OutQueue {
    inner: Mutex<Inner>,
    /// Wakes the writer after it marked itself idle.
    pub(crate) writer_wake: Notify,
    /// Set when the control lane has frames; the writer checks it between
    /// two writes of a large batch.
    pub(crate) control_pending: AtomicBool,
    /// Wakes senders waiting for room (and `wait_taken`) when the writer
    /// takes the queue, and everyone when the queue closes.
    pub(crate) space: Notify,
    /// The largest body a frame may have.
    pub(crate) max_frame_size: usize,
    /// Queued bytes at which further user frames are refused.
    capacity: usize,
    /// Queued bytes at which a sender is asked to yield to a woken writer
    /// (`usize::MAX`: never).
    yield_at: usize,
}

/// What the senders share with the writer, under one short lock.
#[derive(Debug)]
struct Inner {
    /// Encoded frames waiting for the writer.
    buf: BytesMut,
    /// Frames in `buf`.
    frames: u64,
    /// The control lane: heartbeats and acks, written before `buf` and,
    /// when `buf` is large, between two of its frames (see `writer`).
    control: BytesMut,
    /// Frames in `control`.
    control_frames: u64,
    /// The writer found the queue empty and waits to be notified.
    writer_idle: bool,
    /// A sender woke the idle writer, which has not taken the queue yet:
    /// it waits for a thread. Cleared when it takes the queue, or when a
    /// sender is told to yield to it (see `Sender::try_push_with`).
    wake_pending: bool,
    /// Some sender waits for room.
    space_waiters: bool,
    /// How many times the writer has taken `buf` (for `wait_taken`).
    takes: u64,
    state: OutState,
}

/// The life of the outbound side.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OutState {
    Open,
    /// Flush what is queued, then send Close with this reason.
    Closing(String),
    /// Nothing more is accepted.
    Closed,
}

/// Why a push did not happen; the caller turns it into its own error type.
/// `Full` and `Closed` hand the uncalled encoder back.
pub(crate) enum Refused<F> {
    Full(F),
    Closed(F),
    TooLarge(FrameError),
    /// The encoder gave up (`try_push_with`); its bytes were removed.
    Abandoned,
}

/// A frame body encoder: infallible ([`Always`]) or one that may give up
/// ([`Maybe`]).
pub(crate) trait Body {
    /// Appends the body; false abandons the frame.
    fn encode(self, out: &mut BytesMut) -> bool;
}

/// An encoder that always produces its frame.
pub(crate) struct Always<F>(pub(crate) F);

impl<F: FnOnce(&mut BytesMut)> Body for Always<F> {
    #[inline]
    fn encode(self, out: &mut BytesMut) -> bool {
        (self.0)(out);
        true
    }
}

/// An encoder that may abandon its frame by returning false.
pub(crate) struct Maybe<F>(pub(crate) F);

impl<F: FnOnce(&mut BytesMut) -> bool> Body for Maybe<F> {
    #[inline]
    fn encode(self, out: &mut BytesMut) -> bool {
        (self.0)(out)
    }
}

/// Truncates a half-written frame if the encoder panics, so the stream
/// never carries a frame with a wrong length.
struct Rollback<'a> {
    buf: &'a mut BytesMut,
    start: usize,
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if self.start != usize::MAX {
            self.buf.truncate(self.start);
        }
    }
}

/// What the writer got from [`OutQueue::take`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Nothing queued: the writer is marked idle and waits on
    /// [`OutQueue::writer_wake`].
    Wait,
    /// Write the taken control lane, then the taken queue.
    Write {
        /// Frames taken (both lanes).
        frames: u64,
        /// The taken queue ends with our Close frame: shut down after it.
        close: bool,
        /// Some sender waits for room: notify [`OutQueue::space`].
        wake_senders: bool,
    },
    /// Closed and nothing left: the writer is done.
    Done,
}

impl OutQueue {
    /// An open, empty queue whose user lane starts in `buf`.
    pub(crate) fn new(
        buf: BytesMut,
        max_frame_size: usize,
        capacity: usize,
        yield_at: usize,
    ) -> Self {
        Self {
            inner: Mutex::new(Inner {
                buf,
                frames: 0,
                control: BytesMut::new(),
                control_frames: 0,
                writer_idle: false,
                // A new writer task has not run yet either.
                wake_pending: true,
                space_waiters: false,
                takes: 0,
                state: OutState::Open,
            }),
            writer_wake: Notify::new(),
            control_pending: AtomicBool::new(false),
            space: Notify::new(),
            max_frame_size,
            capacity,
            yield_at,
        }
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Encoders that panic are rolled back (see `Rollback`), so the queue
        // is consistent even if the lock was poisoned.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ---- producers ----

    /// Appends one frame whose body `encode` writes, if there is room.
    /// `Ok(true)` asks the caller to yield to the writer (see
    /// `Sender::try_push_with`). With `wait_on_full`, a refusal for room
    /// asks the writer to notify [`space`](Self::space) when it takes the
    /// queue.
    #[inline]
    pub(crate) fn push<B: Body>(
        &self,
        kind: FrameKind,
        encode: B,
        wait_on_full: bool,
    ) -> Result<bool, Refused<B>> {
        let mut q = self.lock();
        if q.state != OutState::Open {
            return Err(Refused::Closed(encode));
        }
        // Admit while under capacity; an empty queue admits any legal frame
        // so a frame larger than the capacity cannot wait forever.
        if q.buf.len() >= self.capacity {
            q.space_waiters |= wait_on_full;
            return Err(Refused::Full(encode));
        }
        let q = &mut *q;
        let start = q.buf.len();
        let mut guard = Rollback {
            buf: &mut q.buf,
            start,
        };
        frame::encode_header(kind, 0, guard.buf);
        if !encode.encode(guard.buf) {
            // Dropping the guard truncates.
            return Err(Refused::Abandoned);
        }
        let body_len = guard.buf.len() - start - HEADER_LEN;
        if let Err(e) = frame::check_len(body_len, self.max_frame_size) {
            // Dropping the guard truncates.
            return Err(Refused::TooLarge(e));
        }
        frame::set_body_len(&mut guard.buf[start..], body_len);
        guard.start = usize::MAX;
        q.frames += 1;
        let wake = mem::take(&mut q.writer_idle);
        drop(guard);
        q.wake_pending |= wake;
        let yield_now = q.wake_pending && q.buf.len() >= self.yield_at;
        if yield_now {
            // Once per wake: the writer takes everything when it runs.
            q.wake_pending = false;
        }
        if wake {
            self.writer_wake.notify_one();
        }
        Ok(yield_now)
    }

    /// Queues a control frame on the control lane, regardless of capacity:
    /// it is tiny, and it is written before any queued user data. False if
    /// the queue is closed.
    pub(crate) fn push_control(&self, kind: FrameKind, body: &[u8]) -> bool {
        let mut q = self.lock();
        if q.state == OutState::Closed {
            return false;
        }
        frame::encode_header(kind, body.len(), &mut q.control);
        q.control.put_slice(body);
        q.control_frames += 1;
        self.control_pending.store(true, Relaxed);
        let wake = mem::take(&mut q.writer_idle);
        drop(q);
        if wake {
            self.writer_wake.notify_one();
        }
        true
    }

    /// Starts a graceful close: queued frames are flushed, then a Close
    /// frame carrying `wire_reason` is sent. Nothing more is accepted.
    pub(crate) fn begin_close(&self, wire_reason: String) {
        let mut q = self.lock();
        if q.state == OutState::Open {
            q.state = OutState::Closing(wire_reason);
            let wake = mem::take(&mut q.writer_idle);
            drop(q);
            if wake {
                self.writer_wake.notify_one();
            }
            // Waiting senders must learn that the connection is closing.
            self.space.notify_waiters();
        }
    }

    /// True until the queue starts closing.
    pub(crate) fn is_open(&self) -> bool {
        self.lock().state == OutState::Open
    }

    /// Bytes queued and not yet taken by the writer.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.lock().buf.len()
    }

    /// Waits until the writer has taken everything queued when this was
    /// called, or the queue is closing.
    pub(crate) async fn wait_taken(&self) {
        let start = self.lock().takes;
        loop {
            // Register before checking, so a swap in between is not missed.
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut q = self.lock();
                if q.buf.is_empty() || q.takes != start || q.state != OutState::Open {
                    return;
                }
                // The writer notifies `space` when it takes the queue.
                q.space_waiters = true;
            }
            notified.await;
        }
    }

    // ---- the writer ----

    /// Takes everything queued: swaps the user lane with `spare` and the
    /// control lane with `control` (both empty). With nothing queued, marks
    /// the writer idle ([`Taken::Wait`]), or, when closing, puts our Close
    /// frame in `spare` and closes the queue.
    pub(crate) fn take(&self, spare: &mut BytesMut, control: &mut BytesMut) -> Taken {
        let mut q = self.lock();
        q.wake_pending = false;
        if !q.buf.is_empty() || !q.control.is_empty() {
            q.takes = q.takes.wrapping_add(1);
            mem::swap(&mut q.buf, spare);
            mem::swap(&mut q.control, control);
            self.control_pending.store(false, Relaxed);
            Taken::Write {
                frames: mem::take(&mut q.frames) + mem::take(&mut q.control_frames),
                close: false,
                wake_senders: mem::take(&mut q.space_waiters),
            }
        } else {
            match &q.state {
                OutState::Open => {
                    q.writer_idle = true;
                    Taken::Wait
                }
                OutState::Closing(reason) => {
                    frame::encode_header(FrameKind::Close, reason.len(), spare);
                    spare.put_slice(reason.as_bytes());
                    q.state = OutState::Closed;
                    Taken::Write {
                        frames: 1,
                        close: true,
                        wake_senders: mem::take(&mut q.space_waiters),
                    }
                }
                OutState::Closed => Taken::Done,
            }
        }
    }

    /// Takes the control lane alone (swapped with the empty `control`), for
    /// the writer to send between two frames of a large batch. Returns the
    /// frames taken.
    pub(crate) fn take_control(&self, control: &mut BytesMut) -> u64 {
        let mut q = self.lock();
        mem::swap(&mut q.control, control);
        let frames = mem::take(&mut q.control_frames);
        self.control_pending.store(false, Relaxed);
        frames
    }

    // ---- the end ----

    /// Closes the queue for good once both tasks have ended: returns the
    /// user frames that were never taken, and the user lane's buffer (for
    /// the pool). Wakes every waiting sender.
    pub(crate) fn close(&self) -> (u64, BytesMut) {
        let taken = {
            let mut q = self.lock();
            q.state = OutState::Closed;
            (mem::take(&mut q.frames), mem::take(&mut q.buf))
        };
        self.space.notify_waiters();
        taken
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::{Always, Maybe, OutQueue, Refused, Taken};
    use crate::frame::{self, FrameKind};

    const MAX: usize = 1024;

    fn queue(capacity: usize) -> OutQueue {
        OutQueue::new(BytesMut::new(), MAX, capacity, usize::MAX)
    }

    fn decode_all(mut buf: BytesMut) -> Vec<(FrameKind, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(f) = frame::decode(&mut buf, MAX).expect("whole frames") {
            out.push((f.kind, f.body.to_vec()));
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn take_hands_over_both_lanes_control_first_in_count() {
        let q = queue(1 << 20);
        assert!(matches!(
            q.push(
                FrameKind::Message,
                Always(|b: &mut BytesMut| b.put_slice(b"a")),
                false
            ),
            Ok(false)
        ));
        assert!(q.push_control(FrameKind::Heartbeat, b"hb"));
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert_eq!(
            q.take(&mut spare, &mut control),
            Taken::Write {
                frames: 2,
                close: false,
                wake_senders: false
            }
        );
        assert_eq!(
            decode_all(control),
            vec![(FrameKind::Heartbeat, b"hb".to_vec())]
        );
        assert_eq!(decode_all(spare), vec![(FrameKind::Message, b"a".to_vec())]);
        assert_eq!(q.queued_bytes(), 0);
        // Nothing left: the writer goes idle.
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert_eq!(q.take(&mut spare, &mut control), Taken::Wait);
    }

    #[test]
    fn a_full_queue_refuses_and_asks_the_writer_to_wake_waiters() {
        let q = queue(4);
        // An empty queue admits a frame larger than the capacity.
        assert!(
            q.push(
                FrameKind::Message,
                Always(|b: &mut BytesMut| b.put_slice(&[0; 10])),
                false
            )
            .is_ok()
        );
        assert!(matches!(
            q.push(FrameKind::Message, Always(|_: &mut BytesMut| {}), true),
            Err(Refused::Full(_))
        ));
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write {
                wake_senders: true,
                ..
            }
        ));
    }

    #[test]
    fn abandoned_and_oversized_frames_leave_no_bytes() {
        let q = queue(1 << 20);
        assert!(matches!(
            q.push(
                FrameKind::Message,
                Maybe(|b: &mut BytesMut| {
                    b.put_slice(b"half");
                    false
                }),
                false
            ),
            Err(Refused::Abandoned)
        ));
        assert!(matches!(
            q.push(
                FrameKind::Message,
                Always(|b: &mut BytesMut| b.put_slice(&[0; MAX + 1])),
                false
            ),
            Err(Refused::TooLarge(_))
        ));
        assert_eq!(q.queued_bytes(), 0);
    }

    #[test]
    fn closing_flushes_then_sends_close_then_is_done() {
        let q = queue(1 << 20);
        assert!(
            q.push(
                FrameKind::Message,
                Always(|b: &mut BytesMut| b.put_slice(b"x")),
                false
            )
            .is_ok()
        );
        q.begin_close("bye".into());
        assert!(!q.is_open());
        assert!(matches!(
            q.push(FrameKind::Message, Always(|_: &mut BytesMut| {}), false),
            Err(Refused::Closed(_))
        ));
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { close: false, .. }
        ));
        assert_eq!(decode_all(spare), vec![(FrameKind::Message, b"x".to_vec())]);
        let mut spare = BytesMut::new();
        assert_eq!(
            q.take(&mut spare, &mut control),
            Taken::Write {
                frames: 1,
                close: true,
                wake_senders: false
            }
        );
        assert_eq!(decode_all(spare), vec![(FrameKind::Close, b"bye".to_vec())]);
        assert_eq!(q.take(&mut BytesMut::new(), &mut control), Taken::Done);
        // Closed: even the control lane refuses.
        assert!(!q.push_control(FrameKind::Heartbeat, b""));
    }

    #[test]
    fn close_counts_what_was_never_taken() {
        let q = queue(1 << 20);
        for _ in 0..3 {
            assert!(
                q.push(
                    FrameKind::Message,
                    Always(|b: &mut BytesMut| b.put_slice(b"x")),
                    false
                )
                .is_ok()
            );
        }
        let (dropped, buf) = q.close();
        assert_eq!(dropped, 3);
        assert_eq!(buf.len(), 3 * (frame::HEADER_LEN + 1));
        assert_eq!(q.queued_bytes(), 0);
        assert!(!q.is_open());
    }
}
