//! The inbound path: one task reads into a large buffer, decodes every
//! complete frame in it, and hands each body on as a zero-copy `Bytes`
//! slice of that buffer.
//!
//! The handler is called on the reader task, once per frame, and once per
//! read at the end of the batch ([`Handler::on_batch_end`]); awaiting there
//! pauses reading, which is how a full mailbox pushes back through TCP onto
//! the peer. Reading resumes into the same allocation once every slice
//! handed out of it has been dropped.
//!
//! A frame is read one of three ways: split off the read buffer as `Bytes`
//! (`frame::decode`), borrowed in place from it (a [`Handler::BORROW`]
//! handler), or borrowed in place from the stream's own buffer (a
//! [`ReadIo::CHUNKED`] stream, TLS, with a `BORROW` handler; see
//! `parse_chunk`). All three hand the frame to `FrameRoute::frame`, the one
//! place that decides where it goes.

use std::{future::Future, io, mem, sync::Arc, task::Context, task::Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{
    config::TransportConfig,
    error::{FrameError, TransportError},
    frame::{self, Frame, FrameKind},
    log_limit::LogLimit,
    peer_text::peer_text_from_bytes,
    pool::ReadSize,
    sender::Sender,
    shared::{CloseReason, Shared},
};

/// Connections closed for a protocol or IO error: a peer can cause any
/// number of these, so they are logged sampled, with counts.
static CLOSED_ON_ERROR: LogLimit = LogLimit::new();
/// Connections whose stream ended without a Close frame, likewise.
static LOST: LogLimit = LogLimit::new();

/// The most a single read asks for, however full reads come back.
pub(crate) const MAX_READ_SIZE: usize = 1024 * 1024;

/// What the reader task reads from: a stream it reads with `poll_read`
/// into its own buffer (`TcpStream`'s half), or one that lends out its own
/// buffer ([`CHUNKED`](Self::CHUNKED); TLS, see `tls_read`).
pub trait ReadIo: AsyncRead + Unpin + Send + 'static {
    /// Reads come as chunks of the stream's own buffer
    /// ([`poll_chunk`](Self::poll_chunk)) instead of `poll_read`.
    const CHUNKED: bool = false;

    /// Waits for buffered data, hands it to `f` (the pieces of the stream
    /// that are here, in order: one read's worth, one batch for the
    /// handler) and consumes all of it; `Ok(None)` at end of stream. Only
    /// for `CHUNKED` streams; others answer with an error.
    fn poll_chunk<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Chunks<'_>) -> R,
    ) -> Poll<io::Result<Option<R>>> {
        let _ = (cx, f);
        Poll::Ready(Err(io::Error::other("this stream reads with poll_read")))
    }
}

/// Consecutive pieces of a stream, lent by a [`ReadIo::CHUNKED`] stream:
/// `ranges` of `buf`, in stream order (TLS: one record's plaintext each).
#[derive(Debug, Clone, Copy)]
pub struct Chunks<'a> {
    buf: &'a [u8],
    ranges: &'a [std::ops::Range<usize>],
}

impl<'a> Chunks<'a> {
    /// The pieces `ranges` of `buf`.
    pub(crate) fn new(buf: &'a [u8], ranges: &'a [std::ops::Range<usize>]) -> Self {
        Self { buf, ranges }
    }

    /// How many bytes in all.
    pub(crate) fn len(&self) -> usize {
        self.ranges.iter().map(|r| r.len()).sum()
    }

    /// The pieces, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let buf = self.buf;
        self.ranges.iter().map(move |r| &buf[r.clone()])
    }
}

/// Plain streams are read with `poll_read`.
impl<T: AsyncRead + Send + 'static> ReadIo for tokio::io::ReadHalf<T> {}

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

/// The stream ended cleanly between frames: after the peer's Close, or
/// while closing ourselves, that is the end; otherwise the connection was
/// lost.
fn end_of_stream(shared: &Shared, peer_closed: bool) {
    let closing = !shared.out.is_open();
    if !peer_closed && !closing {
        shared.abort(CloseReason::Lost);
        if let Some(s) = LOST.sample() {
            tracing::warn!(peer = %shared.peer.socket_addr, total = s.total, suppressed = s.suppressed, "connection lost: stream ended without a close frame");
        }
    }
}

/// Hands out the frames of `chunk` (a piece of the stream from the
/// stream's own buffer, see [`ReadIo::poll_chunk`]) to `deliver`, in
/// place. `partial` holds the start of a frame that the previous chunk's
/// end cut in two; it is completed first, and the start of a frame that
/// this chunk's end cuts is left in it. Lengths are checked against `max`
/// before anything is buffered. Returns the frames handed out.
fn parse_chunk(
    chunk: &[u8],
    partial: &mut BytesMut,
    max: usize,
    mut deliver: impl FnMut(FrameKind, &[u8]) -> Result<(), TransportError>,
) -> Result<u64, TransportError> {
    let mut frames = 0;
    let mut pos = 0;
    if !partial.is_empty() {
        if partial.len() < frame::HEADER_LEN {
            let take = (frame::HEADER_LEN - partial.len()).min(chunk.len());
            partial.extend_from_slice(&chunk[..take]);
            pos = take;
        }
        let Some((kind, len)) = frame::decode_header(partial, max)? else {
            // Still not a whole header: the chunk was shorter than that.
            return Ok(0);
        };
        let total = frame::HEADER_LEN + len;
        let take = (total - partial.len()).min(chunk.len() - pos);
        partial.reserve(total - partial.len());
        partial.extend_from_slice(&chunk[pos..pos + take]);
        pos += take;
        if partial.len() < total {
            return Ok(0);
        }
        deliver(kind, &partial[frame::HEADER_LEN..total])?;
        frames += 1;
        partial.clear();
    }
    while let Some((kind, len)) = frame::decode_header(&chunk[pos..], max)? {
        let total = frame::HEADER_LEN + len;
        if chunk.len() - pos < total {
            break;
        }
        deliver(kind, &chunk[pos + frame::HEADER_LEN..pos + total])?;
        frames += 1;
        pos += total;
    }
    partial.extend_from_slice(&chunk[pos..]);
    Ok(frames)
}

/// The reader task.
pub(crate) async fn run<R: ReadIo, H: Handler>(
    mut io: R,
    mut buf: BytesMut,
    shared: Arc<Shared>,
    mut handler: H,
    config: Arc<TransportConfig>,
) {
    handler.on_start(&Sender::new(shared.clone()));
    let result = drive(&mut io, &mut buf, &shared, &mut handler, &config).await;
    match result {
        Ok(()) => {}
        Err(e) => {
            if !shared.out.is_open() {
                // Either side had begun closing: the expected end of a
                // race between two closes (a reset), not worth a warning.
                tracing::debug!(peer = %shared.peer.socket_addr, error = %e, "connection ended while closing");
            } else if let Some(s) = CLOSED_ON_ERROR.sample() {
                tracing::warn!(peer = %shared.peer.socket_addr, error = %e, total = s.total, suppressed = s.suppressed, "closing connection");
            }
            shared.abort(CloseReason::Error(Arc::new(e)));
        }
    }
    let reason = shared
        .reason()
        .unwrap_or_else(|| CloseReason::Local("connection aborted".into()));
    handler.on_close(&reason);
}

/// A frame body as the reader holds it: borrowed from a read buffer (the
/// in-place paths, for [`Handler::BORROW`]) or split off it as `Bytes`.
trait InBody: std::ops::Deref<Target = [u8]> {
    /// Hands an application frame with this body to `handler`.
    fn deliver<H: Handler>(self, handler: &mut H, kind: FrameKind);
}

impl InBody for &[u8] {
    #[inline]
    fn deliver<H: Handler>(self, handler: &mut H, kind: FrameKind) {
        handler.on_frame_ref(kind, self);
    }
}

impl InBody for Bytes {
    #[inline]
    fn deliver<H: Handler>(self, handler: &mut H, kind: FrameKind) {
        handler.on_frame(Frame { kind, body: self });
    }
}

/// Where each inbound frame goes, and what the reader remembers across
/// frames: whether the peer has closed, and whether this read delivered
/// anything (then the handler's batch ends).
struct FrameRoute<'a> {
    shared: &'a Shared,
    /// The peer's Close arrived: later application frames are refused.
    peer_closed: bool,
    /// An application frame reached the handler since the last batch end.
    delivered: bool,
}

impl FrameRoute<'_> {
    /// The one place an inbound frame is routed, whichever way it was read:
    /// application frames to the handler (until the peer's Close),
    /// heartbeat acks to the handler, the rest to [`control`](Self::control).
    #[inline]
    fn frame<H: Handler, B: InBody>(
        &mut self,
        handler: &mut H,
        kind: FrameKind,
        body: B,
    ) -> Result<(), TransportError> {
        match kind {
            FrameKind::Message | FrameKind::System if !self.peer_closed => {
                self.delivered = true;
                body.deliver(handler, kind);
            }
            FrameKind::HeartbeatAck => handler.on_heartbeat_ack(&body),
            kind => self.control(kind, &body)?,
        }
        Ok(())
    }

    /// Handles a frame the application does not see: close, heartbeats, and
    /// frames that have no business after the handshake (or after Close).
    fn control(&mut self, kind: FrameKind, body: &[u8]) -> Result<(), TransportError> {
        let shared = self.shared;
        match kind {
            FrameKind::Close => {
                // The peer's text: kept and shown truncated and escaped.
                let reason = peer_text_from_bytes(body);
                tracing::debug!(peer = %shared.peer.socket_addr, %reason, "peer closed");
                shared.set_reason(CloseReason::Remote(reason));
                shared.out.begin_close("peer closed".into());
                self.peer_closed = true;
                Ok(())
            }
            FrameKind::Heartbeat => {
                // At most `MAX_HEARTBEAT_BODY` bytes (refused from the
                // header otherwise); replaces an echo not yet written.
                let now = std::time::Instant::now();
                shared
                    .out
                    .push_ack(body, now)
                    .map_err(|stalled| TransportError::PeerNotReading {
                        waited: stalled.waited,
                        heartbeats: stalled.heartbeats,
                        limit: shared.out.stall_timeout(),
                    })
            }
            kind => Err(FrameError::Unexpected { kind: kind as u8 }.into()),
        }
    }
}

async fn drive<R: ReadIo, H: Handler>(
    io: &mut R,
    buf: &mut BytesMut,
    shared: &Arc<Shared>,
    handler: &mut H,
    config: &TransportConfig,
) -> Result<(), TransportError> {
    let max = config.max_frame_size;
    let mut read_size = ReadSize::new(config.read_buffer_size, MAX_READ_SIZE);
    let mut dispatch = FrameRoute {
        shared,
        peer_closed: false,
        delivered: false,
    };
    let mut bytes_read = buf.len() as u64;
    let mut frames = 0u64;
    // Set once the peer's Close has arrived.
    let mut peer_gone_by: Option<tokio::time::Instant> = None;
    let after_close = |by: Option<tokio::time::Instant>| async move {
        match by {
            Some(by) => tokio::time::sleep_until(by).await,
            None => std::future::pending().await,
        }
    };
    loop {
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
                frames += 1;
                dispatch.frame(handler, kind, &buf[pos + frame::HEADER_LEN..pos + total])?;
                pos += total;
            }
            buf.advance(pos);
        } else {
            while let Some(f) = frame::decode(buf, max)? {
                frames += 1;
                dispatch.frame(handler, f.kind, f.body)?;
            }
        }
        shared.stats.record_read(frames, bytes_read);
        if dispatch.peer_closed && peer_gone_by.is_none() {
            // The peer said Close: it owes us only its end of stream, for
            // at most the close timeout (a peer that never sends it holds
            // nothing forever).
            peer_gone_by = Some(tokio::time::Instant::now() + config.close_timeout);
        }
        if mem::take(&mut dispatch.delivered) {
            shared.touch_app();
            handler.on_batch_end().await;
        }
        frames = 0;
        if R::CHUNKED && H::BORROW {
            // Frames are parsed in place in the stream's own buffer; `buf`
            // keeps only a frame that a chunk's end cuts in two, so the
            // parse above finds nothing more in it.
            let chunk = tokio::select! {
                biased;
                () = shared.cancel.cancelled() => return Ok(()),
                () = after_close(peer_gone_by) => return Ok(()),
                r = std::future::poll_fn(|cx| {
                    io.poll_chunk(cx, |chunks| {
                        handler.on_read(buf.len() + chunks.len());
                        let n = chunks.len() as u64;
                        let mut frames = 0;
                        for chunk in chunks.iter() {
                            frames += parse_chunk(chunk, buf, max, |kind, body| {
                                dispatch.frame(handler, kind, body)
                            })?;
                        }
                        Ok::<_, TransportError>((n, frames))
                    })
                }) => r?,
            };
            match chunk {
                Some(parsed) => {
                    let (n, f) = parsed?;
                    bytes_read = n;
                    frames = f;
                }
                None => {
                    frame::decode_eof(buf)?;
                    end_of_stream(shared, dispatch.peer_closed);
                    return Ok(());
                }
            }
            continue;
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
            () = after_close(peer_gone_by) => return Ok(()),
            r = io.read_buf(buf) => r?,
        };
        if n == 0 {
            frame::decode_eof(buf)?;
            end_of_stream(shared, dispatch.peer_closed);
            return Ok(());
        }
        read_size.record(n);
        bytes_read = n as u64;
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use proptest::prelude::*;

    use super::parse_chunk;
    use crate::{
        error::{FrameError, TransportError},
        frame::{self, FrameKind},
    };

    fn wire(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for b in bodies {
            frame::encode_header(FrameKind::Message, b.len(), &mut out);
            out.put_slice(b);
        }
        out.to_vec()
    }

    /// Feeds `wire` to `parse_chunk` cut at `cuts`; returns the bodies it
    /// handed out and what is left partial.
    fn feed(
        wire: &[u8],
        cuts: &[usize],
        max: usize,
    ) -> Result<(Vec<Vec<u8>>, usize), TransportError> {
        let mut partial = BytesMut::new();
        let mut got = Vec::new();
        let mut start = 0;
        let mut frames = 0;
        for &end in cuts.iter().chain(std::iter::once(&wire.len())) {
            frames += parse_chunk(&wire[start..end], &mut partial, max, |kind, body| {
                assert_eq!(kind, FrameKind::Message);
                got.push(body.to_vec());
                Ok(())
            })?;
            start = end;
        }
        assert_eq!(frames as usize, got.len());
        Ok((got, partial.len()))
    }

    proptest! {
        #[test]
        fn frames_come_out_whole_wherever_chunks_end(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let wire = wire(&bodies);
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
            cuts.sort_unstable();
            let (got, left) = feed(&wire, &cuts, 1 << 20).unwrap();
            prop_assert_eq!(got, bodies);
            prop_assert_eq!(left, 0);
        }
    }

    #[test]
    fn every_single_cut_and_byte_by_byte() {
        let bodies: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; i * 7]).collect();
        let wire = wire(&bodies);
        for cut in 0..=wire.len() {
            assert_eq!(
                feed(&wire, &[cut], 1 << 20).unwrap(),
                (bodies.clone(), 0),
                "cut at {cut}"
            );
        }
        let every: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(feed(&wire, &every, 1 << 20).unwrap(), (bodies, 0));
    }

    #[test]
    fn a_trailing_partial_frame_stays_partial() {
        let wire = wire(&[vec![1; 10], vec![2; 10]]);
        let (got, left) = feed(&wire[..wire.len() - 3], &[7], 1 << 20).unwrap();
        assert_eq!(got, vec![vec![1; 10]]);
        assert_eq!(left, 12);
    }

    #[test]
    fn an_oversized_length_is_refused_even_split_across_chunks() {
        let mut wire = BytesMut::new();
        frame::encode_header(FrameKind::Message, 5000, &mut wire);
        for cut in 0..5 {
            let err = feed(&wire, &[cut], 4096).unwrap_err();
            assert!(
                matches!(err, TransportError::Frame(FrameError::TooLarge { .. })),
                "cut at {cut}: {err}"
            );
        }
    }
}
