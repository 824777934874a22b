//! The inbound path: one task reads into a large buffer, decodes every
//! complete frame in it, and hands each body on as a zero-copy `Bytes`
//! slice of that buffer.
//!
//! The handler is called on the reader task, once per frame, and once per
//! read at the end of the batch ([`Handler::on_batch_end`]); awaiting there
//! pauses reading, which is how a full mailbox pushes back through TCP onto
//! the peer. Reading resumes into the same allocation once every slice
//! handed out of it has been dropped.

use std::{
    collections::VecDeque,
    future::Future,
    sync::{Arc, Mutex, PoisonError},
};

use bytes::{Buf, BytesMut};
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    sync::mpsc,
};

use crate::{
    config::TransportConfig,
    conn::{CloseReason, Shared},
    error::{FrameError, TransportError},
    frame::{self, Frame, FrameKind},
    pool::ReadSize,
    writer::{OutState, Sender},
};

/// The most a single read asks for, however full reads come back.
pub const MAX_READ_SIZE: usize = 1024 * 1024;

/// Receives a connection's inbound application frames.
///
/// All methods run on the connection's reader task, in order. Keep
/// `on_frame` short (dispatch, count, or collect); do slow work elsewhere.
pub trait Handler: Send + 'static {
    /// Called once before the first frame, with a sender for this same
    /// connection (keep it to reply).
    fn on_start(&mut self, sender: &Sender) {
        let _ = sender;
    }

    /// One application frame ([`FrameKind::Message`] or
    /// [`FrameKind::System`]). The body is a slice of the read buffer; the
    /// buffer is reused once every such slice is dropped.
    fn on_frame(&mut self, frame: Frame);

    /// When true, the reader calls [`on_frame_ref`](Self::on_frame_ref)
    /// with the body borrowed from the read buffer instead of
    /// [`on_frame`](Self::on_frame) with an owned `Bytes`: no reference
    /// count per frame, and the read buffer is always reused. For handlers
    /// that decode or copy each body at once.
    const BORROW: bool = false;

    /// One application frame, body borrowed (see [`BORROW`](Self::BORROW)).
    fn on_frame_ref(&mut self, kind: FrameKind, body: &[u8]) {
        self.on_frame(Frame {
            kind,
            body: bytes::Bytes::copy_from_slice(body),
        });
    }

    /// Called before the frames of one read are delivered, with the number
    /// of bytes buffered: lets a handler that copies bodies size its
    /// buffers once per read instead of growing them frame by frame.
    fn on_read(&mut self, buffered: usize) {
        let _ = buffered;
    }

    /// Called after the frames of one read have been delivered. Awaiting
    /// here pauses reading from the socket (backpressure); use it to hand a
    /// batch on or wait for room.
    fn on_batch_end(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// A [`FrameKind::HeartbeatAck`] arrived, answering a heartbeat sent
    /// with [`Sender::send_heartbeat`]; `body` is that heartbeat's body.
    fn on_heartbeat_ack(&mut self, body: &[u8]) {
        let _ = body;
    }

    /// Called once when the connection has ended, with the reason.
    fn on_close(&mut self, reason: &CloseReason) {
        let _ = reason;
    }
}

/// Batches delivered through a channel: one `Vec` per read, recycled.
#[derive(Debug)]
pub(crate) struct ChannelHandler {
    batch: Vec<Frame>,
    tx: Option<mpsc::Sender<Vec<Frame>>>,
    spare: Arc<Mutex<Vec<Vec<Frame>>>>,
    reason: Arc<Mutex<Option<CloseReason>>>,
}

impl ChannelHandler {
    pub(crate) fn new(capacity: usize) -> (Self, Inbound) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let spare = Arc::new(Mutex::new(Vec::new()));
        let reason = Arc::new(Mutex::new(None));
        (
            Self {
                batch: Vec::new(),
                tx: Some(tx),
                spare: spare.clone(),
                reason: reason.clone(),
            },
            Inbound {
                rx,
                current: VecDeque::new(),
                spare,
                reason,
            },
        )
    }
}

impl Handler for ChannelHandler {
    fn on_frame(&mut self, frame: Frame) {
        self.batch.push(frame);
    }

    fn on_batch_end(&mut self) -> impl Future<Output = ()> + Send {
        let next = self
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        let tx = self.tx.clone();
        async move {
            if batch.is_empty() {
                return;
            }
            if let Some(tx) = tx {
                // An error means the Inbound was dropped: frames are discarded.
                let _ = tx.send(batch).await;
            }
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        self.tx = None;
    }
}

/// The receiving end of [`Established::start_channel`](crate::Established::start_channel).
#[derive(Debug)]
pub struct Inbound {
    rx: mpsc::Receiver<Vec<Frame>>,
    current: VecDeque<Frame>,
    spare: Arc<Mutex<Vec<Vec<Frame>>>>,
    reason: Arc<Mutex<Option<CloseReason>>>,
}

impl Inbound {
    /// The next inbound frame, or `None` once the connection has ended and
    /// every frame received before has been returned.
    pub async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.current.pop_front() {
                return Some(f);
            }
            let mut batch = self.rx.recv().await?;
            self.current.extend(batch.drain(..));
            let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
            // Keep a few empty vectors for the reader; the rest are freed.
            if spare.len() < 8 {
                spare.push(batch);
            }
        }
    }

    /// Why the connection ended, once [`recv`](Self::recv) has returned
    /// `None`.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The reader task.
pub(crate) async fn run<R: AsyncRead + Unpin, H: Handler>(
    mut io: R,
    mut buf: BytesMut,
    shared: Arc<Shared>,
    mut handler: H,
    config: Arc<TransportConfig>,
) {
    handler.on_start(&Sender {
        shared: shared.clone(),
    });
    let result = drive(&mut io, &mut buf, &shared, &mut handler, &config).await;
    match result {
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(peer = %shared.peer.socket_addr, error = %e, "closing connection");
            shared.abort(CloseReason::Error(Arc::new(e)));
        }
    }
    let reason = shared
        .reason()
        .unwrap_or_else(|| CloseReason::Local("connection aborted".into()));
    handler.on_close(&reason);
}

/// Handles a frame the application does not see: close, heartbeats, and
/// frames that have no business after the handshake (or after Close).
fn control_frame(
    kind: FrameKind,
    body: &[u8],
    shared: &Shared,
    control: &Sender,
    peer_closed: &mut bool,
) -> Result<(), TransportError> {
    match kind {
        FrameKind::Close => {
            let reason = String::from_utf8_lossy(body).into_owned();
            tracing::debug!(peer = %shared.peer.socket_addr, %reason, "peer closed");
            shared.set_reason(CloseReason::Remote(reason));
            shared.begin_close("peer closed".into());
            *peer_closed = true;
            Ok(())
        }
        FrameKind::Heartbeat => {
            control.push_control(FrameKind::HeartbeatAck, body);
            Ok(())
        }
        kind => Err(FrameError::Unexpected { kind: kind as u8 }.into()),
    }
}

async fn drive<R: AsyncRead + Unpin, H: Handler>(
    io: &mut R,
    buf: &mut BytesMut,
    shared: &Arc<Shared>,
    handler: &mut H,
    config: &TransportConfig,
) -> Result<(), TransportError> {
    let control = Sender {
        shared: shared.clone(),
    };
    let max = config.max_frame_size;
    let mut read_size = ReadSize::new(config.read_buffer_size, MAX_READ_SIZE);
    let mut peer_closed = false;
    let mut bytes_read = buf.len() as u64;
    loop {
        let mut frames = 0u64;
        let mut delivered = false;
        handler.on_read(buf.len());
        if H::BORROW {
            // Parse in place; one advance per read.
            let mut pos = 0;
            while let Some((kind, len)) = frame::decode_header(&buf[pos..], max)? {
                let total = frame::HEADER_LEN + len;
                if buf.len() - pos < total {
                    // Make room for the rest of a large frame.
                    let missing = total - (buf.len() - pos);
                    buf.reserve(missing);
                    break;
                }
                let body = &buf[pos + frame::HEADER_LEN..pos + total];
                frames += 1;
                match kind {
                    FrameKind::Message | FrameKind::System if !peer_closed => {
                        delivered = true;
                        handler.on_frame_ref(kind, body);
                    }
                    FrameKind::HeartbeatAck => handler.on_heartbeat_ack(body),
                    kind => control_frame(kind, body, shared, &control, &mut peer_closed)?,
                }
                pos += total;
            }
            buf.advance(pos);
        } else {
            while let Some(f) = frame::decode(buf, max)? {
                frames += 1;
                match f.kind {
                    FrameKind::Message | FrameKind::System if !peer_closed => {
                        delivered = true;
                        handler.on_frame(f);
                    }
                    FrameKind::HeartbeatAck => handler.on_heartbeat_ack(&f.body),
                    kind => control_frame(kind, &f.body, shared, &control, &mut peer_closed)?,
                }
            }
        }
        shared.stats.record_read(frames, bytes_read);
        if delivered {
            handler.on_batch_end().await;
        }
        // Reclaims the buffer in place when every slice handed out of it has
        // been dropped; allocates a fresh one only if some are still held.
        let want = read_size.next();
        if buf.capacity() - buf.len() < want / 2 {
            buf.reserve(want);
        }
        let n = tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return Ok(()),
            r = io.read_buf(buf) => r?,
        };
        if n == 0 {
            frame::decode_eof(buf)?;
            let closing = shared
                .out
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .state
                != OutState::Open;
            if !peer_closed && !closing {
                shared.abort(CloseReason::Lost);
                tracing::warn!(peer = %shared.peer.socket_addr, "connection lost: stream ended without a close frame");
            }
            return Ok(());
        }
        read_size.record(n);
        bytes_read = n as u64;
    }
}
