//! A live connection: its shared state, its two tasks, and the handles the
//! application holds.
//!
//! ```text
//!   Established<T> ──start(handler)──► Connection ──sender()──► Sender (clone freely)
//!        │                               │
//!        │ spawns                        ├─ close(reason): flush, Close frame, wait (bounded)
//!        ▼                               └─ closed(): the reason it ended
//!   reader task: read → decode all → handler.on_frame … on_batch_end
//!   writer task: drain queue → write → flush   (see `writer`)
//!   supervisor:  waits for both, records drops, returns buffers to the pool
//! ```

use std::{
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
};

use bytes::BytesMut;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    config::TransportConfig,
    error::{SendError, TransportError, TrySendError},
    frame::Frame,
    pool::BufferPool,
    reader::{self, ChannelHandler, Handler, Inbound},
    writer::{self, OutQueue, OutState, Sender},
};

/// Who is at the other end, as established by the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's advertised address (what it listens on).
    pub addr: String,
    /// The peer's incarnation id.
    pub uid: u64,
    /// The socket address the connection comes from or goes to.
    pub socket_addr: SocketAddr,
}

/// Why a connection ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CloseReason {
    /// Closed on this side, with the given reason.
    Local(String),
    /// The peer sent a Close frame with this reason.
    Remote(String),
    /// The peer's stream ended without a Close frame (crash, kill, reset).
    Lost,
    /// A protocol or IO error on this connection.
    Error(Arc<TransportError>),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(r) => write!(f, "closed locally: {r}"),
            Self::Remote(r) => write!(f, "closed by peer: {r}"),
            Self::Lost => f.write_str("connection lost: stream ended without a close frame"),
            Self::Error(e) => write!(f, "{e}"),
        }
    }
}

/// Per-connection counters (atomics, updated per write and per read, never
/// per frame).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    writes: AtomicU64,
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    reads: AtomicU64,
    dropped: AtomicU64,
}

impl Stats {
    pub(crate) fn record_write(&self, frames: u64, bytes: u64, writes: u64) {
        self.frames_out.fetch_add(frames, Relaxed);
        self.bytes_out.fetch_add(bytes, Relaxed);
        self.writes.fetch_add(writes, Relaxed);
    }

    pub(crate) fn record_read(&self, frames: u64, bytes: u64) {
        self.frames_in.fetch_add(frames, Relaxed);
        self.bytes_in.fetch_add(bytes, Relaxed);
        self.reads.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> ConnStats {
        ConnStats {
            frames_out: self.frames_out.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            writes: self.writes.load(Relaxed),
            frames_in: self.frames_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            reads: self.reads.load(Relaxed),
            frames_dropped: self.dropped.load(Relaxed),
        }
    }
}

/// A snapshot of a connection's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Frames handed to the socket.
    pub frames_out: u64,
    /// Bytes handed to the socket.
    pub bytes_out: u64,
    /// `write` calls made (syscalls, or TLS record writes).
    pub writes: u64,
    /// Frames decoded from the socket (control frames included).
    pub frames_in: u64,
    /// Bytes read from the socket.
    pub bytes_in: u64,
    /// `read` calls that returned data.
    pub reads: u64,
    /// Frames that were queued but never written because the connection
    /// ended first. Never silent: also logged.
    pub frames_dropped: u64,
}

impl ConnStats {
    /// Average frames per write syscall: the batching factor.
    pub fn frames_per_write(&self) -> f64 {
        if self.writes == 0 {
            0.0
        } else {
            self.frames_out as f64 / self.writes as f64
        }
    }

    /// Adds another snapshot's counts to this one.
    pub fn add(&mut self, o: &ConnStats) {
        self.frames_out += o.frames_out;
        self.bytes_out += o.bytes_out;
        self.writes += o.writes;
        self.frames_in += o.frames_in;
        self.bytes_in += o.bytes_in;
        self.reads += o.reads;
        self.frames_dropped += o.frames_dropped;
    }
}

/// State shared by the handles and the tasks of one connection.
pub(crate) struct Shared {
    pub(crate) out: Mutex<OutQueue>,
    pub(crate) writer_wake: Notify,
    /// Set when the control lane has frames; the writer checks it between
    /// two writes of a large batch.
    pub(crate) control_pending: AtomicBool,
    pub(crate) space: Notify,
    pub(crate) stats: Stats,
    pub(crate) max_frame_size: usize,
    pub(crate) capacity: usize,
    /// Queued bytes at which a sender is asked to yield to a woken writer
    /// (`usize::MAX`: never).
    pub(crate) yield_at: usize,
    /// Stops both tasks at once (abort, error, drop).
    pub(crate) cancel: CancellationToken,
    /// Cancelled when both tasks have ended and the reason is final.
    pub(crate) done: CancellationToken,
    reason: Mutex<Option<CloseReason>>,
    pub(crate) peer: PeerInfo,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").field("peer", &self.peer).finish()
    }
}

impl Shared {
    /// Records why the connection ends; the first reason wins.
    pub(crate) fn set_reason(&self, reason: CloseReason) {
        let mut r = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if r.is_none() {
            *r = Some(reason);
        }
    }

    pub(crate) fn reason(&self) -> Option<CloseReason> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ends the connection now: nothing more is written.
    pub(crate) fn abort(&self, reason: CloseReason) {
        self.set_reason(reason);
        self.cancel.cancel();
    }

    /// Starts a graceful close: queued frames are flushed, then a Close
    /// frame carrying `wire_reason` is sent.
    pub(crate) fn begin_close(&self, wire_reason: String) {
        let mut q = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        if q.state == OutState::Open {
            q.state = OutState::Closing(wire_reason);
            let wake = std::mem::take(&mut q.writer_idle);
            drop(q);
            if wake {
                self.writer_wake.notify_one();
            }
            // Waiting senders must learn that the connection is closing.
            self.space.notify_waiters();
        }
    }
}

/// A connection whose handshake succeeded, not yet started: inspect
/// [`peer`](Self::peer), then [`start`](Self::start) it with a handler or
/// [`start_channel`](Self::start_channel).
pub struct Established<T> {
    pub(crate) stream: T,
    pub(crate) leftover: BytesMut,
    pub(crate) peer: PeerInfo,
    pub(crate) config: Arc<TransportConfig>,
    pub(crate) pool: BufferPool,
    /// An inbound connection's slot under the endpoint's
    /// `max_inbound_connections`; released when the connection ends.
    pub(crate) permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<T> fmt::Debug for Established<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Established")
            .field("peer", &self.peer)
            .finish()
    }
}

impl<T> Established<T>
where
    T: crate::security::Stream,
{
    /// The peer's identity.
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// Starts the reader and writer tasks; inbound application frames go to
    /// `handler` on the reader task.
    ///
    /// Must be called within a tokio runtime.
    #[must_use = "dropping the Connection closes it"]
    pub fn start<H: Handler>(self, handler: H) -> Connection {
        let Self {
            stream,
            leftover,
            peer,
            config,
            pool,
            permit,
        } = self;
        let (rd, wr) = stream.split_io();
        let shared = Arc::new(Shared {
            out: Mutex::new(OutQueue::new(pool.get())),
            writer_wake: Notify::new(),
            control_pending: AtomicBool::new(false),
            space: Notify::new(),
            stats: Stats::default(),
            max_frame_size: config.max_frame_size,
            capacity: config.queue_capacity,
            yield_at: config.producer_yield_bytes.unwrap_or(usize::MAX),
            cancel: CancellationToken::new(),
            done: CancellationToken::new(),
            reason: Mutex::new(None),
            peer,
        });
        let span =
            tracing::debug_span!("conn", peer = %shared.peer.socket_addr, uid = shared.peer.uid);
        let writer =
            tokio::spawn(writer::run(wr, shared.clone(), pool.get()).instrument(span.clone()));
        let reader = tokio::spawn(
            reader::run(rd, leftover, shared.clone(), handler, config.clone())
                .instrument(span.clone()),
        );
        let sup_shared = shared.clone();
        tokio::spawn(
            async move {
                let shared = sup_shared;
                let (w, r) = tokio::join!(writer, reader);
                match w {
                    Ok((Ok(()), buf)) => pool.put(buf),
                    Ok((Err(e), buf)) => {
                        pool.put(buf);
                        tracing::warn!(error = %e, "connection write failed");
                        shared.set_reason(CloseReason::Error(Arc::new(e)));
                    }
                    Err(join) => {
                        tracing::error!(error = %join, "writer task failed");
                        shared.set_reason(CloseReason::Local(format!("writer task failed: {join}")));
                    }
                }
                if let Err(join) = r {
                    tracing::error!(error = %join, "reader task failed");
                    shared.set_reason(CloseReason::Local(format!("reader task failed: {join}")));
                }
                let dropped = {
                    let mut q = shared.out.lock().unwrap_or_else(PoisonError::into_inner);
                    q.state = OutState::Closed;
                    let n = std::mem::take(&mut q.frames);
                    pool.put(std::mem::take(&mut q.buf));
                    n
                };
                shared.space.notify_waiters();
                if dropped > 0 {
                    shared.stats.dropped.fetch_add(dropped, Relaxed);
                    tracing::warn!(dropped, "connection ended with queued frames unsent");
                }
                shared.set_reason(CloseReason::Lost);
                // Free the inbound slot before anyone can see the end.
                drop(permit);
                tracing::debug!(reason = %shared.reason().expect("set just above"), "connection closed");
                shared.cancel.cancel();
                shared.done.cancel();
            }
            .instrument(span),
        );
        Connection {
            sender: Sender { shared },
            close_timeout: config.close_timeout,
        }
    }

    /// Starts the connection with inbound frames delivered through a
    /// bounded channel of `capacity` batches (one batch per socket read).
    /// When the channel is full the reader stops reading, and TCP pushes
    /// back on the peer.
    #[must_use = "dropping the Connection closes it"]
    pub fn start_channel(self, capacity: usize) -> (Connection, Inbound) {
        let (handler, inbound) = ChannelHandler::new(capacity);
        (self.start(handler), inbound)
    }
}

/// A running connection. Dropping it aborts the connection; call
/// [`close`](Self::close) for a graceful end.
///
/// Method groups:
/// - identity: [`peer`](Self::peer);
/// - sending: [`sender`](Self::sender), [`send`](Self::send),
///   [`try_send`](Self::try_send);
/// - observing: [`stats`](Self::stats), [`is_closed`](Self::is_closed),
///   [`closed`](Self::closed), [`close_reason`](Self::close_reason);
/// - ending: [`close`](Self::close), [`abort`](Self::abort).
#[derive(Debug)]
pub struct Connection {
    sender: Sender,
    close_timeout: std::time::Duration,
}

impl Connection {
    fn shared(&self) -> &Shared {
        &self.sender.shared
    }

    /// The peer's identity.
    pub fn peer(&self) -> &PeerInfo {
        &self.shared().peer
    }

    /// A handle that sends on this connection; clone it for every producer.
    pub fn sender(&self) -> Sender {
        self.sender.clone()
    }

    /// See [`Sender::send`].
    ///
    /// # Errors
    /// As [`Sender::send`].
    pub async fn send(&self, frame: Frame) -> Result<(), SendError> {
        self.sender.send(frame).await
    }

    /// See [`Sender::try_send`].
    ///
    /// # Errors
    /// As [`Sender::try_send`].
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendError<Frame>> {
        self.sender.try_send(frame)
    }

    /// The connection's counters now.
    pub fn stats(&self) -> ConnStats {
        self.shared().stats.snapshot()
    }

    /// True once both tasks have ended.
    pub fn is_closed(&self) -> bool {
        self.shared().done.is_cancelled()
    }

    /// Waits until the connection has ended, and says why.
    pub async fn closed(&self) -> CloseReason {
        self.shared().done.cancelled().await;
        self.close_reason()
            .expect("the supervisor records a reason before signalling done")
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        if self.is_closed() {
            self.shared().reason()
        } else {
            None
        }
    }

    /// Graceful close: stop accepting frames, write what is queued, send a
    /// Close frame with `reason`, and wait (at most the configured close
    /// timeout) for the peer to close its side. After the timeout the
    /// connection is aborted and what was left is counted as dropped.
    ///
    /// Returns the final reason, which is `Remote` if the peer closed first.
    pub async fn close(&self, reason: &str) -> CloseReason {
        let shared = self.shared();
        shared.set_reason(CloseReason::Local(reason.to_owned()));
        shared.begin_close(reason.to_owned());
        if tokio::time::timeout(self.close_timeout, shared.done.cancelled())
            .await
            .is_err()
        {
            tracing::warn!(peer = %shared.peer.socket_addr, timeout = ?self.close_timeout, "graceful close timed out; aborting");
            shared.cancel.cancel();
        }
        self.closed().await
    }

    /// Ends the connection at once; queued frames are dropped (and counted).
    pub fn abort(&self, reason: &str) {
        self.shared().abort(CloseReason::Local(reason.to_owned()));
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.shared().done.is_cancelled() {
            self.shared()
                .abort(CloseReason::Local("connection handle dropped".into()));
        }
    }
}
