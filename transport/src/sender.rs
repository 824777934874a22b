//! The producers' side of a connection: [`Sender`], the cheap handle
//! that queues frames, and the errors it returns.
//!
//! A sender never touches the socket: it encodes into the connection's
//! [`OutQueue`](crate::out_queue::OutQueue) under the queue's short lock (see `out_queue`), wakes the
//! writer if it was idle, and returns. Waiting for room is waiting on the
//! queue's `space` notification, which the writer signals when it takes
//! the queue.

use std::sync::Arc;

use bytes::BytesMut;

use crate::{
    error::FrameError,
    frame::{self, Frame, FrameKind},
    log_limit::LogLimit,
    out_queue::{Always, Body, Maybe, Refused},
    peer_text::PeerText,
    shared::{CloseReason, Shared},
};

/// Aborts by handlers (usually over the peer's bytes) are logged sampled.
static ABORTS: LogLimit = LogLimit::new();

/// What [`Sender::try_push_with`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued. `yield_now` asks the caller to yield its thread to the
    /// connection's writer: see [`Sender::try_push_with`].
    Queued {
        /// Yield (once) so the writer can hand the queue to the socket.
        yield_now: bool,
    },
    /// The encoder returned false; nothing was queued.
    Abandoned,
}

/// A cheap, cloneable handle that queues frames on one connection.
///
/// Applications queue frames with these:
/// - [`send`](Self::send): a [`Frame`] whose body is already in `Bytes`,
///   waiting while the queue is full (backpressure). Start here.
/// - [`send_with`](Self::send_with): the body encoded straight into the
///   connection's outbound buffer (no allocation of its own); waits.
/// - [`send_many_with`](Self::send_many_with): a burst of frames, the
///   queue's lock taken once per run of frames that fit; waits.
/// - [`try_send`](Self::try_send), [`try_send_with`](Self::try_send_with):
///   never wait; a full or closed queue hands the frame (or the encoder)
///   back.
/// - [`send_heartbeat`](Self::send_heartbeat): a liveness probe on the
///   control lane, ahead of queued data, for a failure detector such as
///   [`Heartbeater`](crate::Heartbeater).
///
/// The queue's state: [`queued_bytes`](Self::queued_bytes),
/// [`is_full`](Self::is_full), [`is_closed`](Self::is_closed),
/// [`wait_taken`](Self::wait_taken); and [`abort`](Self::abort) ends the
/// connection at once.
///
/// Three more enqueue methods, for `actors`, are hidden from these docs
/// and are not a stable API: they encode an envelope straight into the
/// queue with an encoder that may give up, extend the last queued frame,
/// and hand over frames staged outside the lock.
#[derive(Clone)]
pub struct Sender {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

impl Sender {
    /// A handle on `shared`'s connection.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    #[inline]
    fn push<B: Body>(
        &self,
        kind: FrameKind,
        encode: B,
        wait_on_full: bool,
    ) -> Result<bool, Refused<B>> {
        self.shared.out.push(kind, encode, wait_on_full)
    }

    /// Queues `frame`, waiting while the queue is full (backpressure).
    ///
    /// The body is copied into the pooled outbound buffer; the `Bytes` is
    /// released when this returns.
    ///
    /// # Errors
    /// [`SendFrameError::TooLarge`] for a body above the maximum frame size,
    /// [`SendFrameError::Closed`] once the connection is closing or closed.
    pub async fn send(&self, frame: Frame) -> Result<(), SendFrameError> {
        frame::check_len(frame.body.len(), self.shared.out.max_frame_size)?;
        let body = &frame.body;
        self.send_with(frame.kind, |b| b.extend_from_slice(body))
            .await
    }

    /// Queues a frame whose body `encode` appends to the buffer it is given,
    /// waiting while the queue is full.
    ///
    /// Once the woken writer has a large batch waiting for a thread (the
    /// queue has reached
    /// [`TransportConfig::set_producer_yield_bytes`](crate::TransportConfig::set_producer_yield_bytes)
    /// since the writer was woken), this yields once, so a producer
    /// sending in a loop lets the batch go out while it goes on, instead
    /// of holding the thread until its loop ends. Why: the writer is a
    /// task, and on a single-threaded runtime (or when tokio keeps the
    /// woken writer on the waking worker) it only runs when the producing
    /// task yields. A producer that sends thousands of frames in one go
    /// would otherwise hand them all to the socket in one write after its
    /// loop, and the peer would start on none of them until then.
    ///
    /// `encode` runs under the connection's queue lock: keep it to encoding.
    /// If the body it writes exceeds the maximum frame size, the frame is
    /// removed again and nothing is sent.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_with<F: FnOnce(&mut BytesMut)>(
        &self,
        kind: FrameKind,
        encode: F,
    ) -> Result<(), SendFrameError> {
        let mut encode = match self.push(kind, Always(encode), false) {
            Ok(false) => return Ok(()),
            Ok(true) => {
                tokio::task::yield_now().await;
                return Ok(());
            }
            Err(Refused::Full(f)) => f,
            Err(Refused::Closed(_) | Refused::Abandoned) => return Err(SendFrameError::Closed),
            Err(Refused::TooLarge(e)) => return Err(SendFrameError::TooLarge(e)),
        };
        loop {
            // Register interest before re-checking, so a writer that frees
            // room between the check and the await cannot be missed.
            let notified = self.shared.out.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            encode = match self.push(kind, encode, true) {
                Ok(_) => return Ok(()),
                Err(Refused::Full(f)) => f,
                Err(Refused::Closed(_) | Refused::Abandoned) => return Err(SendFrameError::Closed),
                Err(Refused::TooLarge(e)) => return Err(SendFrameError::TooLarge(e)),
            };
            notified.await;
        }
    }

    /// Queues `n` frames of `kind` in order, each body appended by
    /// `encode` (called once per frame, in order), waiting for room as
    /// [`send_with`](Self::send_with) does.
    ///
    /// For a producer with a burst in hand: the queue's lock, its state
    /// check and the writer's wake-up are paid once per run of frames that
    /// fit, not once per frame. It yields to a woken writer at the same
    /// threshold as `send_with`, so the first frames go out while the rest
    /// are encoded. `encode` runs under the queue lock: keep it to encoding.
    ///
    /// # Errors
    /// [`SendManyError`] says how many frames were queued before the error
    /// (they stay queued, in order): the connection closed, or a body was
    /// over the maximum frame size (that frame is removed and not counted;
    /// the frames after it are not sent).
    pub async fn send_many_with<F: FnMut(&mut BytesMut)>(
        &self,
        kind: FrameKind,
        n: usize,
        mut encode: F,
    ) -> Result<(), SendManyError> {
        let out = &self.shared.out;
        let mut remaining = n;
        let failed = |remaining: usize, error| SendManyError {
            queued: n - remaining,
            error,
        };
        while remaining > 0 {
            match out.push_many(kind, &mut encode, &mut remaining, false) {
                Ok(true) => tokio::task::yield_now().await,
                Ok(false) => {}
                Err(Refused::Full(())) => loop {
                    // Register interest before re-checking, so a writer
                    // that frees room in between cannot be missed.
                    let notified = out.space.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    match out.push_many(kind, &mut encode, &mut remaining, true) {
                        Ok(_) => break,
                        Err(Refused::Full(())) => notified.await,
                        Err(Refused::TooLarge(e)) => {
                            return Err(failed(remaining + 1, SendFrameError::TooLarge(e)));
                        }
                        Err(Refused::Closed(()) | Refused::Abandoned) => {
                            return Err(failed(remaining, SendFrameError::Closed));
                        }
                    }
                },
                Err(Refused::TooLarge(e)) => {
                    return Err(failed(remaining + 1, SendFrameError::TooLarge(e)));
                }
                Err(Refused::Closed(()) | Refused::Abandoned) => {
                    return Err(failed(remaining, SendFrameError::Closed));
                }
            }
        }
        Ok(())
    }

    /// Queues `frame` if there is room now.
    ///
    /// # Errors
    /// [`TrySendFrameError::Full`] and [`TrySendFrameError::Closed`] hand the frame
    /// back; [`TrySendFrameError::TooLarge`] names the size and the limit.
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendFrameError<Frame>> {
        if let Err(e) = frame::check_len(frame.body.len(), self.shared.out.max_frame_size) {
            return Err(TrySendFrameError::TooLarge(e));
        }
        let body = &frame.body;
        match self.push(
            frame.kind,
            Always(|b: &mut BytesMut| b.extend_from_slice(body)),
            false,
        ) {
            Ok(_) => Ok(()),
            Err(Refused::Full(_)) => Err(TrySendFrameError::Full(frame)),
            Err(Refused::Closed(_) | Refused::Abandoned) => Err(TrySendFrameError::Closed(frame)),
            Err(Refused::TooLarge(e)) => Err(TrySendFrameError::TooLarge(e)),
        }
    }

    /// Queues a frame encoded by `encode` if there is room now.
    ///
    /// # Errors
    /// `Full` and `Closed` hand `encode` back uncalled.
    pub fn try_send_with<F: FnOnce(&mut BytesMut)>(
        &self,
        kind: FrameKind,
        encode: F,
    ) -> Result<(), TrySendFrameError<F>> {
        match self.push(kind, Always(encode), false) {
            Ok(_) => Ok(()),
            Err(Refused::Full(f)) => Err(TrySendFrameError::Full(f.0)),
            Err(Refused::Closed(f)) => Err(TrySendFrameError::Closed(f.0)),
            Err(Refused::TooLarge(e)) => Err(TrySendFrameError::TooLarge(e)),
            Err(Refused::Abandoned) => unreachable!("an infallible encoder gave up"),
        }
    }

    /// As [`try_send_with`](Self::try_send_with), for an encoder that may
    /// give up: if `encode` returns false, what it appended is removed and
    /// nothing is sent ([`Pushed::Abandoned`]). For callers that encode
    /// straight into the queue and find out only while encoding that the
    /// frame should not go (too large, say).
    ///
    /// A queued frame also says whether the caller should yield its thread
    /// to the writer: `yield_now` is true when the writer, woken by an
    /// earlier frame, has not run yet and the queue has reached the yield
    /// threshold
    /// ([`TransportConfig::set_producer_yield_bytes`](crate::TransportConfig::set_producer_yield_bytes)),
    /// for the reason [`send_with`](Self::send_with) gives. Once per wake
    /// of the writer; ignoring it is harmless.
    ///
    /// # Errors
    /// As [`try_send_with`](Self::try_send_with).
    // Hidden: `actors`' envelope path, not a stable API (see `Sender`).
    // Inlined into the caller's encode loop: the actors' hot path (callgrind
    // counted 27 M of 161 M sender-thread instructions in this call and
    // its prologue when it was not).
    #[doc(hidden)]
    #[inline]
    pub fn try_push_with<F: FnOnce(&mut BytesMut) -> bool>(
        &self,
        kind: FrameKind,
        encode: F,
    ) -> Result<Pushed, TrySendFrameError<F>> {
        match self.push(kind, Maybe(encode), false) {
            Ok(yield_now) => Ok(Pushed::Queued { yield_now }),
            Err(Refused::Abandoned) => Ok(Pushed::Abandoned),
            Err(Refused::Full(f)) => Err(TrySendFrameError::Full(f.0)),
            Err(Refused::Closed(f)) => Err(TrySendFrameError::Closed(f.0)),
            Err(Refused::TooLarge(e)) => Err(TrySendFrameError::TooLarge(e)),
        }
    }

    /// As [`try_push_with`](Self::try_push_with), for frames that later
    /// frames may extend: a run of records to one destination in one frame,
    /// paying the frame's header once.
    ///
    /// When the last frame queued on this connection was pushed with the
    /// same `key`, the writer has not taken it yet, and its body is
    /// still below `max_run` bytes, `encode(buf, true)` appends to that
    /// frame's body (and its length is rewritten); otherwise
    /// `encode(buf, false)` writes a new frame's body, and a later call
    /// with `key` may extend it. Any other frame queued in between ends
    /// the run, so frames stay in the order they were queued.
    ///
    /// What `key` means and what an extension looks like are the
    /// caller's: the body must stay well formed for the peer when cut after
    /// any extension. The caller keeps each extension within
    /// `max_frame_size - max_run` bytes; one that would take the frame over
    /// the maximum frame size anyway is removed and refused with
    /// [`TrySendFrameError::TooLarge`].
    ///
    /// # Errors
    /// As [`try_push_with`](Self::try_push_with).
    // Hidden: `actors`' runs of records to one recipient (see `Sender`).
    #[doc(hidden)]
    #[inline(always)]
    pub fn try_push_run_with<F: FnOnce(&mut BytesMut, bool) -> bool>(
        &self,
        kind: FrameKind,
        key: std::num::NonZeroU64,
        max_run: usize,
        encode: F,
    ) -> Result<Pushed, TrySendFrameError<F>> {
        match self.shared.out.push_run(kind, key, max_run, encode) {
            Ok(yield_now) => Ok(Pushed::Queued { yield_now }),
            Err(Refused::Abandoned) => Ok(Pushed::Abandoned),
            Err(Refused::Full(f)) => Err(TrySendFrameError::Full(f)),
            Err(Refused::Closed(f)) => Err(TrySendFrameError::Closed(f)),
            Err(Refused::TooLarge(e)) => Err(TrySendFrameError::TooLarge(e)),
        }
    }

    /// Queues `frames[room..]`: whole [`FrameKind::Message`] and
    /// [`FrameKind::System`] frames the caller encoded itself (headers
    /// included), in one append under one lock, and leaves `frames` empty
    /// for the next batch. For a producer that gathers a batch of frames
    /// without the queue's lock and hands it over at once.
    ///
    /// `frames[..room]` is scratch space the caller leaves in front of the
    /// batch: when the queue holds at most `room` bytes (the writer took
    /// the rest), they are copied there and the two buffers are swapped,
    /// so the batch itself is not copied, and `frames` comes back as
    /// another allocation. Otherwise the batch is appended.
    ///
    /// Admitted whatever the queue's capacity (the caller bounds its
    /// batches and reads [`PushedFrames::full`] to stop gathering), and
    /// while the connection is closing but has not sent its Close yet: the
    /// frames then go out before the Close, as frames queued before
    /// [`Connection::close`](crate::Connection::close) do.
    ///
    /// # Errors
    /// [`PushFramesError::Closed`] once the Close is sent (the frames are
    /// not queued; it says how many messages they carry), [`PushFramesError::Malformed`]
    /// (nothing queued, `frames` untouched) if `frames[room..]` is not a
    /// sequence of whole application frames within the maximum frame size.
    // Hidden: `actors`' staged batches (see `Sender`).
    #[doc(hidden)]
    pub fn push_frames(
        &self,
        frames: &mut BytesMut,
        room: usize,
    ) -> Result<PushedFrames, PushFramesError> {
        let out = &self.shared.out;
        let refused = match out.push_frames(frames, room) {
            Ok((yield_now, full)) => return Ok(PushedFrames { yield_now, full }),
            Err(refused) => refused,
        };
        let batch = frames.get(room..).unwrap_or_default();
        let lost = frame::unwritten_messages(batch, 0, out.message_count);
        Err(match refused {
            Refused::TooLarge(error) => PushFramesError::Malformed { error, lost },
            _ => PushFramesError::Closed { lost },
        })
    }

    /// Queues a [`FrameKind::Heartbeat`] with `body` on the control lane:
    /// it never waits for room and overtakes queued user data (it goes out
    /// with the next write, between two frames of a large batch). The peer
    /// answers with a [`FrameKind::HeartbeatAck`] carrying the same body,
    /// which reaches [`Handler::on_heartbeat_ack`](crate::Handler::on_heartbeat_ack).
    ///
    /// The lane holds one heartbeat: one queued while an earlier one has
    /// not been written yet replaces it (an unsent probe is worth nothing
    /// once a newer one exists), so a peer that does not read costs no
    /// memory however long heartbeats go on.
    ///
    /// Returns false if the connection is closed, or if `body` is longer
    /// than [`MAX_HEARTBEAT_BODY`](crate::frame::MAX_HEARTBEAT_BODY) (16
    /// bytes; the peer would close the connection over it), in which case
    /// nothing is queued.
    pub fn send_heartbeat(&self, body: &[u8]) -> bool {
        self.shared.out.push_heartbeat(body)
    }

    /// Bytes queued and not yet handed to the socket.
    pub fn queued_bytes(&self) -> usize {
        self.shared.out.queued_bytes()
    }

    /// True while the queue is at or over its capacity: frames are refused
    /// as full (or wait).
    pub fn is_full(&self) -> bool {
        self.shared.out.is_full()
    }

    /// True once the connection no longer accepts frames.
    pub fn is_closed(&self) -> bool {
        !self.shared.out.is_open()
    }

    /// Waits until the writer has taken everything queued so far (handed it
    /// to the socket), or the connection is closing. For bulk senders that
    /// pace themselves: queue one chunk, wait, queue the next, so that
    /// frames other senders queue meanwhile go out between two chunks
    /// instead of behind all of them.
    ///
    /// The writer takes the whole queue at once, so one take after this
    /// call is enough: frames other senders queue right after it do not
    /// keep this waiting.
    pub async fn wait_taken(&self) {
        self.shared.out.wait_taken().await;
    }

    /// Ends the connection at once: queued frames are dropped (and
    /// counted), the reader stops, and the connection's close reason is
    /// `Local(reason)`. For handlers that find the peer misbehaving.
    pub fn abort(&self, reason: &str) {
        // Usually a reaction to the peer's bytes, and the reason may quote
        // them: sampled, and escaped.
        if let Some(s) = ABORTS.sample() {
            tracing::warn!(peer = %self.shared.peer.socket_addr, reason = %PeerText(reason), total = s.total, suppressed = s.suppressed, "aborting connection");
        }
        self.shared.abort(CloseReason::Local(reason.to_owned()));
    }
}

/// What [`Sender::push_frames`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushedFrames {
    /// Yield (once) so the writer can hand the queue to the socket (as
    /// [`Pushed::Queued`]'s `yield_now`).
    pub yield_now: bool,
    /// The queue is now at or over its capacity: further frames would be
    /// refused as full (or wait) on the other methods.
    pub full: bool,
}

/// A refused [`Sender::push_frames`]; nothing was queued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushFramesError {
    /// The connection has sent its Close, or is gone: `lost` messages
    /// were not queued, counted as
    /// [`TransportConfig::set_message_count`](crate::TransportConfig::set_message_count)
    /// says.
    #[error("connection closed ({lost} messages not queued)")]
    Closed {
        /// The messages in the frames, by the configured count.
        lost: u64,
    },
    /// The bytes are not whole application frames within the maximum size.
    #[error("not a sequence of whole application frames: {error}")]
    Malformed {
        /// What is wrong with them.
        error: FrameError,
        /// The messages in the frames (one cut short included), by the
        /// configured count.
        lost: u64,
    },
}

impl PushFramesError {
    /// The messages that were not queued.
    pub fn lost(&self) -> u64 {
        match self {
            Self::Closed { lost } | Self::Malformed { lost, .. } => *lost,
        }
    }
}

/// A refused [`try_send`](Sender::try_send); the frame comes back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrySendFrameError<T = Frame> {
    /// The outbound queue is at its capacity; retry later or use
    /// [`send`](Sender::send), which waits.
    #[error("outbound queue full")]
    Full(T),
    /// The connection is closed.
    #[error("connection closed")]
    Closed(T),
    /// The frame is larger than the maximum frame size; it can never be sent.
    #[error(transparent)]
    TooLarge(FrameError),
}

impl<T> TrySendFrameError<T> {
    /// The frame handed back, if the error carries it.
    pub fn into_inner(self) -> Option<T> {
        match self {
            Self::Full(t) | Self::Closed(t) => Some(t),
            Self::TooLarge(_) => None,
        }
    }
}

/// A [`send_many_with`](Sender::send_many_with) that stopped before the
/// end: the first `queued` frames are queued, in order; the rest are not.
#[derive(Debug, thiserror::Error)]
#[error("{error} (after {queued} frames were queued)")]
#[non_exhaustive]
pub struct SendManyError {
    /// Frames queued before the error.
    pub queued: usize,
    /// Why the next frame was not.
    pub error: SendFrameError,
}

/// A refused [`send`](Sender::send).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendFrameError {
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// The frame is larger than the maximum frame size; it can never be sent.
    #[error(transparent)]
    TooLarge(#[from] FrameError),
}
