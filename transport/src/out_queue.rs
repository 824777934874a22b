//! The outbound queue: the encoded frames that producers have queued and
//! the writer has not taken yet, under one short lock, and the wake-ups
//! between the two sides.
//!
//! ```text
//!  producers (Sender)                 OutQueue                    writer task
//!  push ──────────► lock, append to `buf`, unlock ──────────► take: swap `buf` and
//!  push_heartbeat ► lock, set the one pending     (wake it    `control` with its empty
//!  push_ack ──────► heartbeat / ack (a newer one   if idle)   spares, or mark itself idle
//!                   replaces it; never refused for room)
//!  begin_close ───► Open → Closing(reason) ────────────────► take: encode Close, → Closed
//!  ◄── space ─────  notified when the writer takes what a full queue held
//! ```
//!
//! The control lane is bounded by construction: it holds at most one
//! heartbeat of ours and one ack of the peer's (each at most
//! [`MAX_HEARTBEAT_BODY`] bytes); a newer one replaces the one the writer
//! has not taken yet (coalescing: only the newest matters to a failure
//! detector). An ack that cannot be written for longer than the stall
//! timeout, or while more than [`MAX_COALESCED_HEARTBEATS`] heartbeats
//! arrive, means the peer does not read: [`OutQueue::push_ack`] reports it and the reader closes the
//! connection, instead of buffering echoes.
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
    num::NonZeroU64,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use bytes::{Buf, BufMut, BytesMut};
use tokio::sync::Notify;

use crate::{
    error::FrameError,
    frame::{self, FrameKind, HEADER_LEN, MAX_HEARTBEAT_BODY},
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
    /// How long an ack may wait for the writer before a further heartbeat
    /// from the peer closes the connection.
    stall_timeout: Duration,
    /// Messages in a `Message` frame's body, for counting what is lost
    /// (`TransportConfig::set_message_count`).
    pub(crate) message_count: fn(&[u8]) -> u64,
}

/// One control frame's body, held inline: the control lane never
/// allocates.
#[derive(Debug, Clone, Copy)]
struct ControlBody {
    len: u8,
    bytes: [u8; MAX_HEARTBEAT_BODY],
}

impl ControlBody {
    /// `body` if it fits ([`MAX_HEARTBEAT_BODY`]).
    fn new(body: &[u8]) -> Option<Self> {
        let mut bytes = [0; MAX_HEARTBEAT_BODY];
        bytes.get_mut(..body.len())?.copy_from_slice(body);
        Some(Self {
            len: body.len() as u8,
            bytes,
        })
    }

    fn encode(&self, kind: FrameKind, dst: &mut BytesMut) {
        let body = &self.bytes[..usize::from(self.len)];
        frame::encode_header(kind, body.len(), dst);
        dst.put_slice(body);
    }
}

/// Heartbeats folded into one pending echo before the peer counts as not
/// reading: 1024. A peer that heartbeats once a second reaches it only
/// if its echo cannot be written for 17 minutes; one that sends thousands
/// a second while its echoes trickle out (a zero window opens a few bytes
/// per probe) reaches it at once.
pub(crate) const MAX_COALESCED_HEARTBEATS: u32 = 1024;

/// The peer keeps sending heartbeats while the echo of an earlier one
/// waits to be written, for longer than the stall timeout or for more
/// than [`MAX_COALESCED_HEARTBEATS`] heartbeats: it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stalled {
    /// How long the pending echo has waited.
    pub(crate) waited: Duration,
    /// Heartbeats that arrived while it waited.
    pub(crate) heartbeats: u32,
}

/// What the senders share with the writer, under one short lock.
#[derive(Debug)]
struct Inner {
    /// Encoded frames waiting for the writer.
    buf: BytesMut,
    /// Frames in `buf`.
    frames: u64,
    /// The control lane: our newest heartbeat not yet taken, and the ack
    /// of the peer's newest heartbeat not yet taken (with when the first
    /// ack that has been waiting since was queued). Written before `buf`
    /// and, when `buf` is large, between two of its frames (see `writer`).
    heartbeat: Option<ControlBody>,
    ack: Option<PendingAck>,
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
    /// The last frame in `buf` may be extended by a push with this key
    /// (0: by none; see [`OutQueue::push_run`]); its header is at
    /// `run_start`. Cleared by every other push and by `take`.
    run_key: u64,
    run_start: usize,
}

/// The echo of the peer's newest heartbeat, waiting for the writer.
#[derive(Debug, Clone, Copy)]
struct PendingAck {
    body: ControlBody,
    /// When the first echo that has been waiting since was queued.
    since: Instant,
    /// Heartbeats folded into it.
    coalesced: u32,
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
        stall_timeout: Duration,
    ) -> Self {
        Self {
            inner: Mutex::new(Inner {
                buf,
                frames: 0,
                heartbeat: None,
                ack: None,
                writer_idle: false,
                // A new writer task has not run yet either.
                wake_pending: true,
                space_waiters: false,
                takes: 0,
                state: OutState::Open,
                run_key: 0,
                run_start: 0,
            }),
            writer_wake: Notify::new(),
            control_pending: AtomicBool::new(false),
            space: Notify::new(),
            max_frame_size,
            capacity,
            yield_at,
            stall_timeout,
            message_count: |_| 1,
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
        drop(guard);
        q.run_key = 0;
        q.frames += 1;
        Ok(self.queued(q))
    }

    /// After frames were appended: wakes an idle writer, and says whether
    /// the caller should yield to it (see `Sender::try_push_with`).
    #[inline(always)]
    fn queued(&self, q: &mut Inner) -> bool {
        let wake = mem::take(&mut q.writer_idle);
        q.wake_pending |= wake;
        let yield_now = q.wake_pending && q.buf.len() >= self.yield_at;
        if yield_now {
            // Once per wake: the writer takes everything when it runs.
            q.wake_pending = false;
        }
        if wake {
            self.writer_wake.notify_one();
        }
        yield_now
    }

    /// As [`push`](Self::push), for frames that may be extended: when the
    /// last frame in the queue was pushed with the same `key` and
    /// its body is still below `max_run` bytes, `encode(buf, true)`
    /// appends to that frame's body (its length is rewritten) instead of
    /// starting a new frame; otherwise `encode(buf, false)` writes a new
    /// frame's body, which a later push with `key` may extend. What the
    /// key means, and what an extension must look like for the frame to
    /// stay well formed, is the caller's: the queue only promises that no
    /// other frame was queued after the one extended, and that the writer
    /// has not taken it. The caller keeps an extension within
    /// `max_frame_size - max_run` bytes; one that would take the frame over
    /// the maximum frame size anyway is removed and refused (`TooLarge`),
    /// as an oversized frame is.
    #[inline(always)]
    pub(crate) fn push_run<F: FnOnce(&mut BytesMut, bool) -> bool>(
        &self,
        kind: FrameKind,
        key: NonZeroU64,
        max_run: usize,
        encode: F,
    ) -> Result<bool, Refused<F>> {
        let mut q = self.lock();
        if q.state != OutState::Open {
            return Err(Refused::Closed(encode));
        }
        if q.buf.len() >= self.capacity {
            return Err(Refused::Full(encode));
        }
        let q = &mut *q;
        let start = q.buf.len();
        // One call of `encode`, so that it inlines here.
        let more = q.run_key == key.get();
        let frame = if more { q.run_start } else { start };
        let mut guard = Rollback {
            buf: &mut q.buf,
            start,
        };
        if !more {
            frame::encode_header(kind, 0, guard.buf);
        }
        if !encode(guard.buf, more) {
            // Dropping the guard truncates.
            return Err(Refused::Abandoned);
        }
        let body_len = guard.buf.len() - frame - HEADER_LEN;
        if let Err(e) = frame::check_len(body_len, self.max_frame_size) {
            return Err(Refused::TooLarge(e));
        }
        frame::set_body_len(&mut guard.buf[frame..], body_len);
        guard.start = usize::MAX;
        drop(guard);
        if !more {
            q.frames += 1;
            (q.run_key, q.run_start) = (key.get(), frame);
        }
        if body_len >= max_run {
            q.run_key = 0;
        }
        Ok(self.queued(q))
    }

    /// Appends up to `*remaining` frames of `kind` under one lock, each
    /// body written by `encode`, counting `*remaining` down. Stops early
    /// when the queue reaches its capacity, or when the woken writer has
    /// the yield threshold's worth waiting (then `Ok(true)`: the caller
    /// yields, as for [`push`](Self::push)). `Err(Refused::Full(()))` only
    /// when not one frame fitted (with `wait_on_full`, the writer will
    /// notify [`space`](Self::space)). A frame over the maximum size is
    /// removed again and ends the call with `TooLarge`; it is counted in
    /// `*remaining` as not queued.
    ///
    /// One lock, one state check and one wake-up decision per call instead
    /// of per frame: the cost a producer with a burst in hand need not pay
    /// per message.
    pub(crate) fn push_many<F: FnMut(&mut BytesMut)>(
        &self,
        kind: FrameKind,
        encode: &mut F,
        remaining: &mut usize,
        wait_on_full: bool,
    ) -> Result<bool, Refused<()>> {
        let mut q = self.lock();
        if q.state != OutState::Open {
            return Err(Refused::Closed(()));
        }
        if q.buf.len() >= self.capacity {
            q.space_waiters |= wait_on_full;
            return Err(Refused::Full(()));
        }
        let q = &mut *q;
        let mut pushed = 0u64;
        let mut result = Ok(());
        // Only a writer marked idle needs a wake; once woken (by this call
        // or an earlier push), the threshold below asks the caller to yield.
        let woken = q.wake_pending || q.writer_idle;
        let stop_at = if woken {
            self.capacity.min(self.yield_at)
        } else {
            self.capacity
        };
        while *remaining > 0 && q.buf.len() < stop_at {
            let start = q.buf.len();
            let mut guard = Rollback {
                buf: &mut q.buf,
                start,
            };
            frame::encode_header(kind, 0, guard.buf);
            encode(guard.buf);
            let body_len = guard.buf.len() - start - HEADER_LEN;
            if let Err(e) = frame::check_len(body_len, self.max_frame_size) {
                // Dropping the guard truncates.
                drop(guard);
                *remaining -= 1;
                result = Err(Refused::TooLarge(e));
                break;
            }
            frame::set_body_len(&mut guard.buf[start..], body_len);
            guard.start = usize::MAX;
            pushed += 1;
            *remaining -= 1;
        }
        if pushed == 0 {
            return result.map(|()| false);
        }
        q.run_key = 0;
        q.frames += pushed;
        let yield_now = self.queued(q);
        result.map(|()| yield_now)
    }

    /// Appends `frames[room..]`, whole `Message` and `System` frames a
    /// producer encoded on its own (see `Sender::push_frames`), under one
    /// lock, and leaves `frames` empty. When the queue holds at most
    /// `room` bytes, they are copied into `frames[..room]` just before the
    /// batch and the buffers are swapped, so the batch is not copied.
    /// Admitted while the queue is open or closing (the writer has not
    /// sent our Close yet, so they go out before it), whatever the
    /// capacity: the caller bounds its batches. Returns whether the caller
    /// should yield to the writer, and whether the queue is now at its
    /// capacity.
    ///
    /// # Errors
    /// `Closed` once our Close is taken; `TooLarge` (nothing queued) if
    /// `frames` is not a sequence of whole application frames within the
    /// maximum frame size.
    pub(crate) fn push_frames(
        &self,
        frames: &mut BytesMut,
        room: usize,
    ) -> Result<(bool, bool), Refused<()>> {
        let Some(batch) = frames.get(room..) else {
            return Err(Refused::TooLarge(FrameError::Truncated {
                have: frames.len(),
                need: room as u64,
            }));
        };
        let n = frame::count_app_frames(batch, self.max_frame_size).map_err(Refused::TooLarge)?;
        let mut q = self.lock();
        if q.state == OutState::Closed {
            return Err(Refused::Closed(()));
        }
        let held = q.buf.len();
        if held <= room {
            // What the queue holds fits the room before the batch: it moves
            // there, and the batch becomes the queue, the caller getting
            // the queue's buffer. Only those few bytes are copied.
            frames[room - held..room].copy_from_slice(&q.buf);
            frames.advance(room - held);
            mem::swap(&mut q.buf, frames);
        } else {
            q.buf.extend_from_slice(batch);
        }
        frames.clear();
        q.frames += n;
        q.run_key = 0;
        let yield_now = self.queued(&mut q);
        Ok((yield_now, q.buf.len() >= self.capacity))
    }

    /// Queues our heartbeat on the control lane, regardless of capacity;
    /// it replaces our heartbeat that the writer has not taken yet (an
    /// unsent probe is worth nothing once a newer one exists). False if
    /// the queue is closed or `body` is over [`MAX_HEARTBEAT_BODY`].
    pub(crate) fn push_heartbeat(&self, body: &[u8]) -> bool {
        let Some(body) = ControlBody::new(body) else {
            return false;
        };
        let mut q = self.lock();
        if q.state == OutState::Closed {
            return false;
        }
        q.heartbeat = Some(body);
        self.control_queued(q);
        true
    }

    /// Queues the ack of the peer's heartbeat with `body` (at most
    /// [`MAX_HEARTBEAT_BODY`] bytes: the reader refused a longer one from
    /// its header). It replaces an ack the writer has not taken yet, so the
    /// lane holds one whatever the peer sends.
    ///
    /// # Errors
    /// [`Stalled`] if the replaced ack had waited longer than the stall
    /// timeout at `now`, or more than [`MAX_COALESCED_HEARTBEATS`]
    /// heartbeats were folded into it: the peer does not read, and the
    /// caller closes the connection.
    pub(crate) fn push_ack(&self, body: &[u8], now: Instant) -> Result<(), Stalled> {
        let Some(body) = ControlBody::new(body) else {
            debug_assert!(false, "the reader refuses heartbeats over the limit");
            return Ok(());
        };
        let mut q = self.lock();
        if q.state == OutState::Closed {
            return Ok(());
        }
        let (since, coalesced) = match q.ack {
            Some(p) => {
                let waited = now.saturating_duration_since(p.since);
                let coalesced = p.coalesced + 1;
                if waited > self.stall_timeout || coalesced > MAX_COALESCED_HEARTBEATS {
                    return Err(Stalled {
                        waited,
                        heartbeats: coalesced,
                    });
                }
                (p.since, coalesced)
            }
            None => (now, 0),
        };
        q.ack = Some(PendingAck {
            body,
            since,
            coalesced,
        });
        self.control_queued(q);
        Ok(())
    }

    /// Tells the writer that the control lane has a frame, and wakes it if
    /// idle.
    fn control_queued(&self, mut q: MutexGuard<'_, Inner>) {
        self.control_pending.store(true, Relaxed);
        let wake = mem::take(&mut q.writer_idle);
        drop(q);
        if wake {
            self.writer_wake.notify_one();
        }
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

    /// How long an ack may wait for the writer (see [`push_ack`](Self::push_ack)).
    pub(crate) fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// True until the queue starts closing.
    pub(crate) fn is_open(&self) -> bool {
        self.lock().state == OutState::Open
    }

    /// Whether the queue is at or over its capacity.
    pub(crate) fn is_full(&self) -> bool {
        self.lock().buf.len() >= self.capacity
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
        if !q.buf.is_empty() || q.heartbeat.is_some() || q.ack.is_some() {
            q.takes = q.takes.wrapping_add(1);
            q.run_key = 0;
            mem::swap(&mut q.buf, spare);
            let control_frames = self.take_control_locked(&mut q, control);
            Taken::Write {
                frames: mem::take(&mut q.frames) + control_frames,
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

    /// Takes the control lane alone (encoded into `control`), for the
    /// writer to send between two frames of a large batch. Returns the
    /// frames taken.
    pub(crate) fn take_control(&self, control: &mut BytesMut) -> u64 {
        let mut q = self.lock();
        self.take_control_locked(&mut q, control)
    }

    /// Encodes the pending heartbeat and ack into `control` and clears
    /// them; returns how many there were.
    fn take_control_locked(&self, q: &mut Inner, control: &mut BytesMut) -> u64 {
        let mut frames = 0;
        if let Some(hb) = q.heartbeat.take() {
            hb.encode(FrameKind::Heartbeat, control);
            frames += 1;
        }
        if let Some(ack) = q.ack.take() {
            ack.body.encode(FrameKind::HeartbeatAck, control);
            frames += 1;
        }
        self.control_pending.store(false, Relaxed);
        frames
    }

    // ---- the end ----

    /// Closes the queue for good once both tasks have ended: returns the
    /// user frames that were never taken, and the user lane's buffer (for
    /// the pool). Wakes every waiting sender.
    pub(crate) fn close(&self) -> (u64, BytesMut) {
        let buf = {
            let mut q = self.lock();
            q.state = OutState::Closed;
            q.frames = 0;
            mem::take(&mut q.buf)
        };
        self.space.notify_waiters();
        // The queue holds whole frames; only application data counts as
        // lost (see `frame::unwritten_messages`).
        (frame::unwritten_messages(&buf, 0, self.message_count), buf)
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use std::time::{Duration, Instant};

    use super::{Always, MAX_COALESCED_HEARTBEATS, Maybe, OutQueue, Refused, Stalled, Taken};
    use crate::frame::{self, FrameKind, MAX_HEARTBEAT_BODY};

    const MAX: usize = 1024;

    const STALL: Duration = Duration::from_secs(10);

    fn queue(capacity: usize) -> OutQueue {
        OutQueue::new(BytesMut::new(), MAX, capacity, usize::MAX, STALL)
    }

    fn decode_all(mut buf: BytesMut) -> Vec<(FrameKind, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(f) = frame::decode(&mut buf, MAX).expect("whole frames") {
            out.push((f.kind, f.body.to_vec()));
        }
        assert!(buf.is_empty());
        out
    }

    /// `push_many` with a counter in each body, so order is visible.
    fn push_counted(q: &OutQueue, remaining: &mut usize, next: &mut u8) -> Result<bool, ()> {
        q.push_many(
            FrameKind::Message,
            &mut |b: &mut BytesMut| {
                b.put_u8(*next);
                *next += 1;
            },
            remaining,
            false,
        )
        .map_err(|e| assert!(matches!(e, Refused::Full(())), "only Full expected"))
    }

    /// `push_run` of one byte: a frame's first is `first`, an extension's
    /// is `more`.
    fn key(k: u64) -> std::num::NonZeroU64 {
        std::num::NonZeroU64::new(k).expect("nonzero")
    }

    fn push_byte(q: &OutQueue, k: u64, max_run: usize, first: u8, more: u8) -> Result<bool, ()> {
        q.push_run(
            FrameKind::Message,
            key(k),
            max_run,
            |b: &mut BytesMut, ext| {
                b.put_u8(if ext { more } else { first });
                true
            },
        )
        .map_err(|_| ())
    }

    fn take_all(q: &OutQueue) -> Vec<Vec<u8>> {
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { .. }
        ));
        decode_all(spare).into_iter().map(|(_, b)| b).collect()
    }

    #[test]
    fn a_run_extends_the_last_frame_until_another_frame_a_take_or_its_limit() {
        let q = queue(1 << 20);
        for _ in 0..3 {
            push_byte(&q, 7, 100, b'a', b'+').unwrap();
        }
        // Another key ends the run; so does any other frame.
        push_byte(&q, 8, 100, b'b', b'+').unwrap();
        push_byte(&q, 8, 100, b'b', b'+').unwrap();
        q.push(
            FrameKind::Message,
            Always(|b: &mut BytesMut| b.put_u8(b'x')),
            false,
        )
        .map_err(|_| ())
        .unwrap();
        push_byte(&q, 8, 100, b'b', b'+').unwrap();
        assert_eq!(
            take_all(&q),
            [&b"a++"[..], b"b+", b"x", b"b"].map(<[u8]>::to_vec)
        );
        // The writer took the frame: the next push starts a new one.
        push_byte(&q, 8, 100, b'c', b'+').unwrap();
        push_byte(&q, 8, 100, b'c', b'+').unwrap();
        assert_eq!(take_all(&q), [b"c+".to_vec()]);
        // A frame reaching `max_run` bytes is not extended further.
        for _ in 0..5 {
            push_byte(&q, 9, 2, b'd', b'+').unwrap();
        }
        assert_eq!(take_all(&q), [&b"d+"[..], b"d+", b"d"].map(<[u8]>::to_vec));
    }

    #[test]
    fn an_extension_past_the_frame_limit_or_given_up_is_removed_whole() {
        let q = queue(1 << 20);
        push_byte(&q, 7, MAX, b'a', b'+').unwrap();
        let too_much = q.push_run(FrameKind::Message, key(7), MAX, |b: &mut BytesMut, ext| {
            assert!(ext);
            b.put_slice(&[0; MAX]);
            true
        });
        assert!(matches!(too_much, Err(Refused::TooLarge(_))));
        let given_up = q.push_run(FrameKind::Message, key(7), MAX, |b: &mut BytesMut, _| {
            b.put_slice(b"half");
            false
        });
        assert!(matches!(given_up, Err(Refused::Abandoned)));
        // The run goes on where it was.
        push_byte(&q, 7, MAX, b'a', b'+').unwrap();
        assert_eq!(take_all(&q), [b"a+".to_vec()]);
    }

    fn frames_of(bodies: &[&[u8]]) -> BytesMut {
        let mut b = BytesMut::new();
        for body in bodies {
            frame::encode_header(FrameKind::Message, body.len(), &mut b);
            b.put_slice(body);
        }
        b
    }

    #[test]
    fn frames_pushed_whole_go_out_in_place_until_the_close_is_taken() {
        // Over the capacity: admitted, and said to be full.
        let small = queue(8);
        let pushed = small.push_frames(&mut frames_of(&[b"bb", b"cc"]), 0);
        assert_eq!(pushed.map_err(|_| ()), Ok((false, true)));
        let q = queue(1 << 20);
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        let pushed = q.push_frames(&mut frames_of(&[b"bb", b"cc"]), 0);
        assert_eq!(pushed.map_err(|_| ()), Ok((false, false)));
        // They ended the run: the next push starts a frame.
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        q.begin_close("bye".into());
        // Closing, but the Close is not taken yet: they still go before it.
        assert!(q.push_frames(&mut frames_of(&[b"dd"]), 0).is_ok());
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { frames: 5, .. }
        ));
        let bodies: Vec<Vec<u8>> = decode_all(spare).into_iter().map(|(_, b)| b).collect();
        assert_eq!(
            bodies,
            [&b"a"[..], b"bb", b"cc", b"a", b"dd"].map(<[u8]>::to_vec)
        );
        let mut close = BytesMut::new();
        assert!(matches!(
            q.take(&mut close, &mut control),
            Taken::Write { close: true, .. }
        ));
        assert!(matches!(
            q.push_frames(&mut frames_of(&[b"ee"]), 0),
            Err(Refused::Closed(()))
        ));
    }

    #[test]
    fn frames_pushed_whole_take_what_the_queue_holds_into_their_room() {
        let q = queue(1 << 20);
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        // Room for 6 bytes (the queued frame) before the batch: the queue
        // takes the batch's buffer, with the frame moved in front.
        let mut batch = BytesMut::from(&[0xee; 6][..]);
        batch.extend_from_slice(&frames_of(&[b"bb"]));
        let ptr = batch[6..].as_ptr();
        assert!(q.push_frames(&mut batch, 6).is_ok());
        assert!(batch.is_empty());
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { frames: 2, .. }
        ));
        assert_eq!(spare[6..].as_ptr(), ptr, "the batch was not copied");
        let bodies: Vec<Vec<u8>> = decode_all(spare).into_iter().map(|(_, b)| b).collect();
        assert_eq!(bodies, [&b"a"[..], b"bb"].map(<[u8]>::to_vec));
        // More than the room: the batch is appended after it.
        push_byte(&q, 7, 100, b'c', b'+').unwrap();
        push_byte(&q, 8, 100, b'd', b'+').unwrap();
        let mut batch = BytesMut::from(&[0xee; 6][..]);
        batch.extend_from_slice(&frames_of(&[b"ee"]));
        assert!(q.push_frames(&mut batch, 6).is_ok());
        assert_eq!(take_all(&q), [&b"c"[..], b"d", b"ee"].map(<[u8]>::to_vec));
        // A room longer than the buffer is refused.
        assert!(matches!(
            q.push_frames(&mut BytesMut::new(), 1),
            Err(Refused::TooLarge(_))
        ));
    }

    #[test]
    fn frames_pushed_whole_must_be_whole_application_frames() {
        let q = queue(1 << 20);
        let good = frames_of(&[b"abc"]);
        let mut heartbeat = BytesMut::new();
        frame::encode_header(FrameKind::Heartbeat, 1, &mut heartbeat);
        heartbeat.put_u8(1);
        let mut big = BytesMut::new();
        frame::encode_header(FrameKind::Message, MAX + 1, &mut big);
        big.put_slice(&[0; MAX + 1]);
        for bad in [
            &good[..good.len() - 1],
            &good[..3],
            &heartbeat[..],
            &big[..],
        ] {
            let mut bad = BytesMut::from(bad);
            assert!(
                matches!(q.push_frames(&mut bad, 0), Err(Refused::TooLarge(_))),
                "{bad:?}"
            );
        }
        assert_eq!(q.queued_bytes(), 0, "nothing of them queued");
    }

    #[test]
    fn a_run_respects_capacity_and_a_closed_queue() {
        let q = queue(8);
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        push_byte(&q, 7, 100, b'a', b'+').unwrap();
        // 5 + 3 bytes reach the capacity: an extension is refused for room.
        assert!(matches!(
            q.push_run(FrameKind::Message, key(7), 100, |_: &mut BytesMut, _| true),
            Err(Refused::Full(_))
        ));
        q.begin_close("bye".into());
        assert!(matches!(
            q.push_run(FrameKind::Message, key(7), 100, |_: &mut BytesMut, _| true),
            Err(Refused::Closed(_))
        ));
    }

    #[test]
    fn push_many_queues_in_order_until_capacity_then_refuses_for_room() {
        // Each frame is 6 bytes: 4 fit under a capacity of 20.
        let q = queue(20);
        let (mut remaining, mut next) = (10, 0);
        assert_eq!(push_counted(&q, &mut remaining, &mut next), Ok(false));
        assert_eq!(remaining, 6, "stops once the queue reaches its capacity");
        assert_eq!(push_counted(&q, &mut remaining, &mut next), Err(()));
        assert_eq!(remaining, 6, "a full queue takes nothing");
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { frames: 4, .. }
        ));
        assert_eq!(push_counted(&q, &mut remaining, &mut next), Ok(false));
        assert_eq!(remaining, 2);
        let mut all = decode_all(spare);
        let mut rest = BytesMut::new();
        assert!(matches!(
            q.take(&mut rest, &mut control),
            Taken::Write { frames: 4, .. }
        ));
        all.extend(decode_all(rest));
        let bodies: Vec<u8> = all.iter().map(|(_, b)| b[0]).collect();
        assert_eq!(
            bodies,
            [0, 1, 2, 3, 4, 5, 6, 7],
            "whole frames, in the order encoded"
        );
    }

    #[test]
    fn push_many_hands_a_woken_writer_its_batch_at_the_yield_threshold() {
        let q = OutQueue::new(BytesMut::new(), MAX, 1 << 20, 12, STALL);
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        // The writer finds nothing and goes idle: the next push wakes it.
        assert_eq!(q.take(&mut spare, &mut control), Taken::Wait);
        let (mut remaining, mut next) = (100, 0);
        assert_eq!(push_counted(&q, &mut remaining, &mut next), Ok(true));
        assert_eq!(
            remaining, 98,
            "two 6-byte frames reach the 12-byte threshold"
        );
        // Not woken again (the writer has not taken yet): room up to capacity.
        assert_eq!(push_counted(&q, &mut remaining, &mut next), Ok(false));
        assert_eq!(remaining, 0);
    }

    #[test]
    fn push_many_removes_an_oversized_frame_and_keeps_those_before_it() {
        let q = queue(1 << 20);
        let mut i = 0;
        let mut remaining = 5;
        let r = q.push_many(
            FrameKind::Message,
            &mut |b: &mut BytesMut| {
                let len = if i == 2 { MAX + 1 } else { 1 };
                b.put_bytes(i, len);
                i += 1;
            },
            &mut remaining,
            false,
        );
        assert!(matches!(r, Err(Refused::TooLarge(_))));
        assert_eq!(
            remaining, 2,
            "two queued, the third refused, two never encoded"
        );
        let (mut spare, mut control) = (BytesMut::new(), BytesMut::new());
        assert!(matches!(
            q.take(&mut spare, &mut control),
            Taken::Write { frames: 2, .. }
        ));
        assert_eq!(
            decode_all(spare),
            [(FrameKind::Message, vec![0]), (FrameKind::Message, vec![1])]
        );
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
        assert!(q.push_heartbeat(b"hb"));
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

    /// However many heartbeats and acks are queued before the writer
    /// runs, it takes one of each: the newest.
    #[test]
    fn the_control_lane_coalesces_to_one_heartbeat_and_one_ack() {
        let q = queue(1 << 20);
        let t0 = Instant::now();
        for i in 0..1_000u64 {
            assert!(q.push_heartbeat(&i.to_le_bytes()));
            assert_eq!(q.push_ack(&(i + 1).to_be_bytes(), t0), Ok(()));
        }
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
            vec![
                (FrameKind::Heartbeat, 999u64.to_le_bytes().to_vec()),
                (FrameKind::HeartbeatAck, 1_000u64.to_be_bytes().to_vec()),
            ]
        );
        // A body over the limit is not queued.
        assert!(!q.push_heartbeat(&[0; MAX_HEARTBEAT_BODY + 1]));
        let mut control = BytesMut::new();
        assert_eq!(q.take_control(&mut control), 0);
    }

    /// An ack the writer has not taken for longer than the stall timeout is
    /// reported when the next heartbeat's ack arrives; taking it resets the
    /// clock.
    #[test]
    fn an_ack_waiting_longer_than_the_stall_timeout_is_reported() {
        let q = queue(1 << 20);
        let t0 = Instant::now();
        assert_eq!(q.push_ack(b"1", t0), Ok(()));
        assert_eq!(q.push_ack(b"2", t0 + STALL), Ok(()));
        let late = t0 + STALL + Duration::from_millis(1);
        assert_eq!(
            q.push_ack(b"3", late),
            Err(Stalled {
                waited: STALL + Duration::from_millis(1),
                heartbeats: 2
            })
        );
        // Taken: a fresh ack starts a fresh wait.
        assert_eq!(q.take_control(&mut BytesMut::new()), 1);
        assert_eq!(q.push_ack(b"4", late), Ok(()));
        assert_eq!(q.push_ack(b"5", late + STALL), Ok(()));
        // However fast: more than MAX_COALESCED_HEARTBEATS folded into one
        // pending echo is a peer that does not read.
        q.take_control(&mut BytesMut::new());
        for _ in 0..=MAX_COALESCED_HEARTBEATS {
            assert_eq!(q.push_ack(b"6", late), Ok(()));
        }
        assert_eq!(
            q.push_ack(b"7", late),
            Err(Stalled {
                waited: Duration::ZERO,
                heartbeats: MAX_COALESCED_HEARTBEATS + 1
            })
        );
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
        assert!(!q.push_heartbeat(b""));
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
