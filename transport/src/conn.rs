//! A live connection: the top of the connection layers. [`Established`]
//! wires the shared state, the two tasks and the supervisor together;
//! [`Connection`] is the handle the application holds.
//!
//! ```text
//!   Established<T> ──start(handler)──► Connection ──sender()──► Sender (clone freely)
//!        │                               │
//!        │ spawns                        ├─ close(reason): flush, Close frame, wait (bounded)
//!        ▼                               └─ closed(): the reason it ended
//!   reader task: read → decode all → handler.on_frame … on_batch_end   (see `reader`)
//!   writer task: drain queue → write → flush                           (see `writer`)
//!   supervisor:  waits for both, records drops, returns buffers to the pool
//! ```
//!
//! The tasks never call each other: they meet in [`Shared`] (see `shared`
//! and `out_queue`).

use std::{fmt, sync::Arc};

use bytes::BytesMut;
use tracing::Instrument;

use crate::{
    config::TransportConfig,
    frame::Frame,
    inbound::{ChannelHandler, Inbound},
    log_limit::LogLimit,
    out_queue::OutQueue,
    pool::BufferPool,
    reader::{self, Handler},
    security::Stream,
    sender::{SendFrameError, Sender, TrySendFrameError},
    shared::{CloseReason, ConnStats, PeerInfo, Shared},
    slots::Slot,
    writer,
};

/// Write failures (a peer's reset causes them) are logged sampled.
static WRITE_FAILED: LogLimit = LogLimit::new();

/// A connection whose handshake succeeded, not yet started: inspect
/// [`peer`](Self::peer), then [`start`](Self::start) it with a handler or
/// [`start_channel`](Self::start_channel).
pub struct Established<T> {
    pub(crate) stream: T,
    pub(crate) leftover: BytesMut,
    pub(crate) peer: PeerInfo,
    pub(crate) config: Arc<TransportConfig>,
    pub(crate) pool: BufferPool,
    /// An inbound connection's slot under the endpoint's bounds (global
    /// and per address); released when the connection ends.
    pub(crate) slot: Option<Slot>,
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
    T: Stream,
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
            slot,
        } = self;
        let (rd, wr) = stream.split_io();
        let mut out = OutQueue::new(
            pool.get(),
            config.max_frame_size,
            config.queue_capacity,
            config.producer_yield_bytes.unwrap_or(usize::MAX),
            config.control_stall_timeout,
        );
        out.message_count = config.message_count;
        let shared = Arc::new(Shared::new(out, peer));
        if let Some(slot) = &slot {
            // From now on it may be evicted when idle and slots are short.
            slot.attach(&shared);
        }
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
                        // Peers can cause this (resets): sampled. Once either
                        // side began closing, a reset is the expected end of
                        // a race between the two closes, not worth a warning.
                        if !shared.out.is_open() {
                            tracing::debug!(error = %e, "connection write failed while closing");
                        } else if let Some(s) = WRITE_FAILED.sample() {
                            tracing::warn!(error = %e, total = s.total, suppressed = s.suppressed, "connection write failed");
                        }
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
                // Wakes every waiting sender: nothing more is accepted.
                let (dropped, buf) = shared.out.close();
                pool.put(buf);
                if dropped > 0 {
                    shared.stats.record_dropped(dropped);
                    tracing::warn!(dropped, "connection ended with queued frames unsent");
                }
                shared.set_reason(CloseReason::Lost);
                // Free the inbound slot before anyone can see the end.
                drop(slot);
                tracing::debug!(reason = %shared.reason().expect("set just above"), "connection closed");
                shared.cancel.cancel();
                shared.done.cancel();
            }
            .instrument(span),
        );
        Connection {
            sender: Sender::new(shared),
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
///   [`closed`](Self::closed), [`close_reason`](Self::close_reason),
///   [`last_application_frame`](Self::last_application_frame);
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
    pub async fn send(&self, frame: Frame) -> Result<(), SendFrameError> {
        self.sender.send(frame).await
    }

    /// See [`Sender::try_send`].
    ///
    /// # Errors
    /// As [`Sender::try_send`].
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendFrameError<Frame>> {
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

    /// When the last application frame (`Message` or `System`) arrived,
    /// to the millisecond; `None` if none has. Heartbeats do not count.
    /// Updated once per socket read that delivered any (what the endpoint's
    /// idle eviction looks at, see
    /// [`TransportConfig::set_idle_eviction_after`]).
    pub fn last_application_frame(&self) -> Option<std::time::Instant> {
        self.shared().last_application_frame()
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
        shared.out.begin_close(reason.to_owned());
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

#[cfg(test)]
mod tests {
    use std::sync::Arc as StdArc;

    use bytes::BytesMut;

    use tokio::sync::mpsc;

    use super::{Connection, Established};
    use crate::{
        config::TransportConfig, frame::FrameKind, pool::BufferPool, reader::Handler,
        shared::PeerInfo,
    };

    /// Forwards heartbeat acks to the test.
    struct Acks(mpsc::UnboundedSender<Vec<u8>>);

    impl Handler for Acks {
        fn on_frame(&mut self, _: crate::frame::Frame) {}
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
                verified: crate::shared::PeerVerified::Secret,
                app_flags: 0,
            },
            config: config.clone(),
            slot: None,
            pool: BufferPool::new(64 * 1024, 4),
        }
    }

    /// 50 MB of user frames are queued, the writer is busy with them, and a
    /// heartbeat is queued after: the peer answers it long before it has
    /// read the user data, because the writer lets the control lane overtake
    /// at the next frame boundary.
    ///
    /// The writer's behaviour, tested here because it takes a whole
    /// connection pair (both tasks on both ends).
    #[tokio::test]
    async fn heartbeat_overtakes_fifty_megabytes_of_queued_user_data() {
        const FRAME: usize = 1024;
        const FRAMES: usize = 50 * 1024;
        let mut config = TransportConfig::default();
        config.set_queue_capacity(64 * 1024 * 1024).unwrap();
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
