//! The outbound path: senders encode into a shared buffer, one writer task
//! owns the socket's write half.
//!
//! ```text
//!  Sender::send ─┐  lock, append frame,        ┌──────────── writer task ─────────────┐
//!  Sender::send ─┼─► unlock (wake writer if  ──►│ lock, swap `buf` with the empty spare │
//!  Sender::send ─┘   it was idle)               │ unlock, write it all, flush, repeat;  │
//!                                               │ queue empty: mark idle and wait       │
//!                                               └───────────────────────────────────────┘
//! ```
//!
//! This is smart batching: a lone frame goes out at once (the writer is idle
//! and is woken), while under load every frame appended during one write
//! shares the next. Nothing waits on a timer. Senders never allocate: they
//! copy or encode into a buffer that the writer recycles.

use std::{
    mem,
    sync::{Arc, MutexGuard, PoisonError, atomic::Ordering::Relaxed},
};

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::{
    conn::Shared,
    error::{FrameError, SendError, TransportError, TrySendError},
    frame::{self, Frame, FrameKind, HEADER_LEN},
};

/// What the senders share with the writer, under one short lock.
#[derive(Debug)]
pub(crate) struct OutQueue {
    /// Encoded frames waiting for the writer.
    pub(crate) buf: BytesMut,
    /// Frames in `buf`.
    pub(crate) frames: u64,
    /// The control lane: heartbeats and acks, written before `buf` and,
    /// when `buf` is large, between two of its frames (see `drive`).
    pub(crate) control: BytesMut,
    /// Frames in `control`.
    pub(crate) control_frames: u64,
    /// The writer found the queue empty and waits to be notified.
    pub(crate) writer_idle: bool,
    /// A sender woke the idle writer, which has not taken the queue yet:
    /// it waits for a thread. Cleared when it takes the queue, or when a
    /// sender is told to yield to it (see `Sender::try_push_with`).
    pub(crate) wake_pending: bool,
    /// Some sender waits for room.
    pub(crate) space_waiters: bool,
    /// How many times the writer has taken `buf` (for `wait_taken`).
    pub(crate) takes: u64,
    pub(crate) state: OutState,
}

/// The life of the outbound side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutState {
    Open,
    /// Flush what is queued, then send Close with this reason.
    Closing(String),
    /// Nothing more is accepted.
    Closed,
}

impl OutQueue {
    pub(crate) fn new(buf: BytesMut) -> Self {
        Self {
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
        }
    }
}

/// Why a push did not happen; the caller turns it into its own error type.
/// `Full` and `Closed` hand the uncalled encoder back.
enum Refused<F> {
    Full(F),
    Closed(F),
    TooLarge(FrameError),
    /// The encoder gave up (`try_push_with`); its bytes were removed.
    Abandoned,
}

/// A frame body encoder: infallible (`send_with`, `try_send_with`) or one
/// that may give up (`try_push_with`).
trait Body {
    /// Appends the body; false abandons the frame.
    fn encode(self, out: &mut BytesMut) -> bool;
}

struct Always<F>(F);

impl<F: FnOnce(&mut BytesMut)> Body for Always<F> {
    #[inline]
    fn encode(self, out: &mut BytesMut) -> bool {
        (self.0)(out);
        true
    }
}

struct Maybe<F>(F);

impl<F: FnOnce(&mut BytesMut) -> bool> Body for Maybe<F> {
    #[inline]
    fn encode(self, out: &mut BytesMut) -> bool {
        (self.0)(out)
    }
}

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
/// Method groups:
/// - waiting for room: [`send`](Self::send), [`send_with`](Self::send_with);
/// - never waiting: [`try_send`](Self::try_send),
///   [`try_send_with`](Self::try_send_with).
///
/// `*_with` variants encode the body straight into the connection's
/// outbound buffer, with no intermediate allocation.
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

impl Sender {
    #[inline]
    fn lock(&self) -> MutexGuard<'_, OutQueue> {
        // Encoders that panic are rolled back (see `Rollback`), so the queue
        // is consistent even if the lock was poisoned.
        self.shared
            .out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one frame whose body `encode` writes, if there is room.
    /// `Ok(true)` asks the caller to yield to the writer (see
    /// [`try_push_with`](Self::try_push_with)).
    #[inline]
    fn push<B: Body>(
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
        if q.buf.len() >= self.shared.capacity {
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
        if let Err(e) = frame::check_len(body_len, self.shared.max_frame_size) {
            // Dropping the guard truncates.
            return Err(Refused::TooLarge(e));
        }
        guard.buf[start..start + 4].copy_from_slice(&(body_len as u32).to_be_bytes());
        guard.start = usize::MAX;
        q.frames += 1;
        let wake = mem::take(&mut q.writer_idle);
        drop(guard);
        q.wake_pending |= wake;
        let yield_now = q.wake_pending && q.buf.len() >= self.shared.yield_at;
        if yield_now {
            // Once per wake: the writer takes everything when it runs.
            q.wake_pending = false;
        }
        if wake {
            self.shared.writer_wake.notify_one();
        }
        Ok(yield_now)
    }

    /// Queues `frame`, waiting while the queue is full (backpressure).
    ///
    /// The body is copied into the pooled outbound buffer; the `Bytes` is
    /// released when this returns.
    ///
    /// # Errors
    /// [`SendError::TooLarge`] for a body above the maximum frame size,
    /// [`SendError::Closed`] once the connection is closing or closed.
    pub async fn send(&self, frame: Frame) -> Result<(), SendError> {
        frame::check_len(frame.body.len(), self.shared.max_frame_size)?;
        let body = &frame.body;
        self.send_with(frame.kind, |b| b.extend_from_slice(body))
            .await
    }

    /// Queues a frame whose body `encode` appends to the buffer it is given,
    /// waiting while the queue is full.
    ///
    /// Once the woken writer has a large batch waiting for a thread (see
    /// [`try_push_with`](Self::try_push_with)), this yields once,
    /// so a producer sending in a loop lets the batch go out while it goes
    /// on, instead of holding the thread until its loop ends.
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
    ) -> Result<(), SendError> {
        let mut encode = match self.push(kind, Always(encode), false) {
            Ok(false) => return Ok(()),
            Ok(true) => {
                tokio::task::yield_now().await;
                return Ok(());
            }
            Err(Refused::Full(f)) => f,
            Err(Refused::Closed(_) | Refused::Abandoned) => return Err(SendError::Closed),
            Err(Refused::TooLarge(e)) => return Err(SendError::TooLarge(e)),
        };
        loop {
            // Register interest before re-checking, so a writer that frees
            // room between the check and the await cannot be missed.
            let notified = self.shared.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            encode = match self.push(kind, encode, true) {
                Ok(_) => return Ok(()),
                Err(Refused::Full(f)) => f,
                Err(Refused::Closed(_) | Refused::Abandoned) => return Err(SendError::Closed),
                Err(Refused::TooLarge(e)) => return Err(SendError::TooLarge(e)),
            };
            notified.await;
        }
    }

    /// Queues `frame` if there is room now.
    ///
    /// # Errors
    /// [`TrySendError::Full`] and [`TrySendError::Closed`] hand the frame
    /// back; [`TrySendError::TooLarge`] names the size and the limit.
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendError<Frame>> {
        if let Err(e) = frame::check_len(frame.body.len(), self.shared.max_frame_size) {
            return Err(TrySendError::TooLarge(e));
        }
        let body = &frame.body;
        match self.push(
            frame.kind,
            Always(|b: &mut BytesMut| b.extend_from_slice(body)),
            false,
        ) {
            Ok(_) => Ok(()),
            Err(Refused::Full(_)) => Err(TrySendError::Full(frame)),
            Err(Refused::Closed(_) | Refused::Abandoned) => Err(TrySendError::Closed(frame)),
            Err(Refused::TooLarge(e)) => Err(TrySendError::TooLarge(e)),
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
    ) -> Result<(), TrySendError<F>> {
        match self.push(kind, Always(encode), false) {
            Ok(_) => Ok(()),
            Err(Refused::Full(f)) => Err(TrySendError::Full(f.0)),
            Err(Refused::Closed(f)) => Err(TrySendError::Closed(f.0)),
            Err(Refused::TooLarge(e)) => Err(TrySendError::TooLarge(e)),
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
    /// ([`TransportConfig::set_producer_yield_bytes`](crate::TransportConfig::set_producer_yield_bytes)).
    ///
    /// Why: the writer is a task, and on a single-threaded runtime (or
    /// when tokio keeps the woken writer on the waking worker) it only runs
    /// when the producing task yields. A producer that sends thousands of
    /// frames in one go would otherwise hand them all to the socket in one
    /// write after its loop, and the peer would start on none of them
    /// until then. Yielding once per threshold lets the first batch go out
    /// while the producer encodes the next, so both nodes work at once.
    /// Once per wake of the writer; ignoring it is harmless.
    ///
    /// # Errors
    /// As [`try_send_with`](Self::try_send_with).
    pub fn try_push_with<F: FnOnce(&mut BytesMut) -> bool>(
        &self,
        kind: FrameKind,
        encode: F,
    ) -> Result<Pushed, TrySendError<F>> {
        match self.push(kind, Maybe(encode), false) {
            Ok(yield_now) => Ok(Pushed::Queued { yield_now }),
            Err(Refused::Abandoned) => Ok(Pushed::Abandoned),
            Err(Refused::Full(f)) => Err(TrySendError::Full(f.0)),
            Err(Refused::Closed(f)) => Err(TrySendError::Closed(f.0)),
            Err(Refused::TooLarge(e)) => Err(TrySendError::TooLarge(e)),
        }
    }

    /// Queues a control frame on the control lane, regardless of capacity:
    /// it is tiny, and it is written before any queued user data.
    pub(crate) fn push_control(&self, kind: FrameKind, body: &[u8]) -> bool {
        let mut q = self.lock();
        if q.state == OutState::Closed {
            return false;
        }
        frame::encode_header(kind, body.len(), &mut q.control);
        q.control.put_slice(body);
        q.control_frames += 1;
        self.shared.control_pending.store(true, Relaxed);
        let wake = mem::take(&mut q.writer_idle);
        drop(q);
        if wake {
            self.shared.writer_wake.notify_one();
        }
        true
    }

    /// Queues a [`FrameKind::Heartbeat`] with `body` on the control lane:
    /// it never waits for room and overtakes queued user data (it goes out
    /// with the next write, between two frames of a large batch). The peer
    /// answers with a [`FrameKind::HeartbeatAck`] carrying the same body,
    /// which reaches [`Handler::on_heartbeat_ack`](crate::Handler::on_heartbeat_ack).
    ///
    /// Returns false if the connection is closed.
    pub fn send_heartbeat(&self, body: &[u8]) -> bool {
        self.push_control(FrameKind::Heartbeat, body)
    }

    /// Bytes queued and not yet handed to the socket.
    pub fn queued_bytes(&self) -> usize {
        self.lock().buf.len()
    }

    /// True once the connection no longer accepts frames.
    pub fn is_closed(&self) -> bool {
        self.lock().state != OutState::Open
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
        let start = self.lock().takes;
        loop {
            // Register before checking, so a swap in between is not missed.
            let notified = self.shared.space.notified();
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

    /// Ends the connection at once: queued frames are dropped (and
    /// counted), the reader stops, and the connection's close reason is
    /// `Local(reason)`. For handlers that find the peer misbehaving.
    pub fn abort(&self, reason: &str) {
        tracing::warn!(peer = %self.shared.peer.socket_addr, reason, "aborting connection");
        self.shared
            .abort(crate::conn::CloseReason::Local(reason.to_owned()));
    }
}

enum Step {
    Wait,
    Write {
        frames: u64,
        close: bool,
        wake_senders: bool,
    },
}

/// The writer task: drain → one write → flush, until closed.
pub(crate) async fn run<W: AsyncWrite + Unpin>(
    mut io: W,
    shared: Arc<Shared>,
    mut spare: BytesMut,
) -> (Result<(), TransportError>, BytesMut) {
    // The control lane's spare: heartbeats are tiny, so this stays small.
    let mut control = BytesMut::new();
    let res = drive(&mut io, &shared, &mut spare, &mut control).await;
    spare.clear();
    (res, spare)
}

async fn drive<W: AsyncWrite + Unpin>(
    io: &mut W,
    shared: &Shared,
    spare: &mut BytesMut,
    control: &mut BytesMut,
) -> Result<(), TransportError> {
    loop {
        let step = {
            let mut q = shared.out.lock().unwrap_or_else(PoisonError::into_inner);
            q.wake_pending = false;
            if !q.buf.is_empty() || !q.control.is_empty() {
                q.takes = q.takes.wrapping_add(1);
                mem::swap(&mut q.buf, spare);
                mem::swap(&mut q.control, control);
                shared.control_pending.store(false, Relaxed);
                Step::Write {
                    frames: mem::take(&mut q.frames) + mem::take(&mut q.control_frames),
                    close: false,
                    wake_senders: mem::take(&mut q.space_waiters),
                }
            } else {
                match &q.state {
                    OutState::Open => {
                        q.writer_idle = true;
                        Step::Wait
                    }
                    OutState::Closing(reason) => {
                        frame::encode_header(FrameKind::Close, reason.len(), spare);
                        spare.put_slice(reason.as_bytes());
                        q.state = OutState::Closed;
                        Step::Write {
                            frames: 1,
                            close: true,
                            wake_senders: mem::take(&mut q.space_waiters),
                        }
                    }
                    OutState::Closed => return Ok(()),
                }
            }
        };
        let (mut frames, close, wake_senders) = match step {
            Step::Wait => {
                tokio::select! {
                    biased;
                    () = shared.cancel.cancelled() => return Ok(()),
                    () = shared.writer_wake.notified() => continue,
                }
            }
            Step::Write {
                frames,
                close,
                wake_senders,
            } => (frames, close, wake_senders),
        };
        if wake_senders {
            shared.space.notify_waiters();
        }
        let mut writes = 0u64;
        let mut bytes = control.len() as u64 + spare.len() as u64;
        // The control lane first.
        if !write_all(io, shared, control, &mut writes).await? {
            return Ok(());
        }
        control.clear();
        let mut pos = 0;
        // The start of the first frame of `spare` at or after `pos`, found
        // by walking headers only when a control frame is waiting.
        let mut boundary = 0;
        while pos < spare.len() {
            if shared.control_pending.load(Relaxed) {
                while boundary < pos {
                    let len = u32::from_be_bytes(
                        spare[boundary..boundary + 4]
                            .try_into()
                            .expect("a frame header has a 4-byte length"),
                    );
                    boundary += HEADER_LEN + len as usize;
                }
                if boundary == pos {
                    // Between two frames: let the control lane overtake.
                    {
                        let mut q = shared.out.lock().unwrap_or_else(PoisonError::into_inner);
                        mem::swap(&mut q.control, control);
                        frames += mem::take(&mut q.control_frames);
                        shared.control_pending.store(false, Relaxed);
                    }
                    bytes += control.len() as u64;
                    if !write_all(io, shared, control, &mut writes).await? {
                        return Ok(());
                    }
                    control.clear();
                }
            }
            // Up to the end of the current frame when a control frame waits,
            // so that it can go next.
            let end = if shared.control_pending.load(Relaxed) && boundary > pos {
                boundary
            } else {
                spare.len()
            };
            let n = tokio::select! {
                biased;
                () = shared.cancel.cancelled() => return Ok(()),
                r = io.write(&spare[pos..end]) => r?,
            };
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
            }
            pos += n;
            writes += 1;
        }
        tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return Ok(()),
            r = io.flush() => r?,
        }
        shared.stats.record_write(frames, bytes, writes);
        spare.clear();
        if close {
            // Half-close: the peer reads our Close, then EOF.
            let _ = io.shutdown().await;
            return Ok(());
        }
    }
}

/// Writes all of `buf`; false if the connection was cancelled meanwhile.
async fn write_all<W: AsyncWrite + Unpin>(
    io: &mut W,
    shared: &Shared,
    buf: &[u8],
    writes: &mut u64,
) -> Result<bool, TransportError> {
    let mut pos = 0;
    while pos < buf.len() {
        let n = tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return Ok(false),
            r = io.write(&buf[pos..]) => r?,
        };
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
        }
        pos += n;
        *writes += 1;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc as StdArc;

    use bytes::BytesMut;

    use tokio::sync::mpsc;

    use crate::{
        Established, PeerInfo, TransportConfig, conn::Connection, frame::FrameKind,
        pool::BufferPool, reader::Handler,
    };

    /// Forwards heartbeat acks to the test.
    struct Acks(mpsc::UnboundedSender<Vec<u8>>);

    impl Handler for Acks {
        fn on_frame(&mut self, _: crate::Frame) {}
        fn on_heartbeat_ack(&mut self, body: &[u8]) {
            let _ = self.0.send(body.to_vec());
        }
    }

    fn established(
        stream: tokio::io::DuplexStream,
        config: &StdArc<TransportConfig>,
    ) -> Established<tokio::io::DuplexStream> {
        Established {
            stream,
            leftover: BytesMut::new(),
            peer: PeerInfo {
                addr: "peer".into(),
                uid: 1,
                socket_addr: "127.0.0.1:1".parse().expect("literal"),
            },
            config: config.clone(),
            permit: None,
            pool: BufferPool::new(64 * 1024, 4),
        }
    }

    /// 50 MB of user frames are queued, the writer is busy with them, and a
    /// heartbeat is queued after: the peer answers it long before it has
    /// read the user data, because the writer lets the control lane overtake
    /// at the next frame boundary.
    #[tokio::test]
    async fn heartbeat_overtakes_fifty_megabytes_of_queued_user_data() {
        const FRAME: usize = 1024;
        const FRAMES: usize = 50 * 1024;
        let mut config = TransportConfig::default();
        config.set_queue_capacity(64 * 1024 * 1024);
        let config = StdArc::new(config);
        let (a_io, b_io) = tokio::io::duplex(64 * 1024);
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel();
        let a: Connection = established(a_io, &config).start(Acks(ack_tx));
        let (_b, mut b_in) = established(b_io, &config).start_channel(1);
        let sender = a.sender();
        for _ in 0..FRAMES {
            sender
                .try_send_with(FrameKind::Message, |b| b.extend_from_slice(&[7u8; FRAME]))
                .map_err(|_| "room for 50 MB")
                .expect("capacity is 64 MB");
        }
        // Let the writer take the whole batch and start writing it.
        while sender.queued_bytes() > 0 {
            tokio::task::yield_now().await;
        }
        assert!(sender.send_heartbeat(b"hb-1"));
        let mut received = 0usize;
        let ack = loop {
            tokio::select! {
                biased;
                ack = ack_rx.recv() => break ack.expect("a's handler lives"),
                f = b_in.recv() => {
                    f.expect("b receives");
                    received += 1;
                }
            }
        };
        assert_eq!(ack, b"hb-1");
        assert!(
            received < FRAMES / 10,
            "the ack came after {received} of {FRAMES} user frames"
        );
    }
}
