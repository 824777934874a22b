//! The writer task: the one owner of a connection's write half. It drains
//! the [`OutQueue`](crate::out_queue::OutQueue) and hands what it took to
//! the socket.
//!
//! ```text
//!  Sender::send ─┐  lock, append frame,        ┌──────────── writer task ─────────────┐
//!  Sender::send ─┼─► unlock (wake writer if  ──►│ lock, swap `buf` with the empty spare │
//!  Sender::send ─┘   it was idle)   (out_queue) │ unlock, write it all, flush, repeat;  │
//!                                               │ queue empty: mark idle and wait       │
//!                                               └───────────────────────────────────────┘
//! ```
//!
//! This is smart batching: a lone frame goes out at once (the writer is idle
//! and is woken), while under load every frame appended during one write
//! shares the next. Nothing waits on a timer. Senders never allocate: they
//! copy or encode into a buffer that the writer recycles.
//!
//! The control lane (heartbeats and acks) is written before the user lane
//! and, when a control frame arrives while a large batch is being written,
//! between two of its frames: the writer walks the batch's headers with
//! [`frame::peek_header`] to find the next frame boundary.

use std::sync::{Arc, atomic::Ordering::Relaxed};

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::{
    error::TransportError,
    frame::{self, HEADER_LEN},
    out_queue::Taken,
    shared::Shared,
};

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
        let (mut frames, close, wake_senders) = match shared.out.take(spare, control) {
            Taken::Done => return Ok(()),
            Taken::Wait => {
                tokio::select! {
                    biased;
                    () = shared.cancel.cancelled() => return Ok(()),
                    () = shared.out.writer_wake.notified() => continue,
                }
            }
            Taken::Write {
                frames,
                close,
                wake_senders,
            } => (frames, close, wake_senders),
        };
        if wake_senders {
            shared.out.space.notify_waiters();
        }
        let mut writes = 0u64;
        let mut bytes = control.len() as u64 + spare.len() as u64;
        let mut pos = 0;
        let done = write_batch(
            io,
            shared,
            spare,
            control,
            &mut pos,
            &mut frames,
            &mut bytes,
            &mut writes,
        )
        .await;
        if !matches!(done, Ok(true)) {
            // Cancelled (an abort) or failed mid-batch: the frames not
            // wholly written are lost, and counted with the queue's.
            shared.stats.record_dropped(frame::unwritten_messages(
                spare,
                pos,
                shared.out.message_count,
            ));
            return done.map(|_| ());
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

/// Writes the control lane, then the batch `spare` from `*pos`, letting
/// control frames that arrive meanwhile overtake at frame boundaries.
/// False if the connection was cancelled meanwhile; `*pos` is how much of
/// `spare` was written either way.
#[allow(clippy::too_many_arguments)]
async fn write_batch<W: AsyncWrite + Unpin>(
    io: &mut W,
    shared: &Shared,
    spare: &BytesMut,
    control: &mut BytesMut,
    pos: &mut usize,
    frames: &mut u64,
    bytes: &mut u64,
    writes: &mut u64,
) -> Result<bool, TransportError> {
    // The control lane first.
    if !write_all(io, shared, control, writes).await? {
        return Ok(false);
    }
    control.clear();
    // The start of the first frame of `spare` at or after `pos`, found
    // by walking headers only when a control frame is waiting.
    let mut boundary = 0;
    while *pos < spare.len() {
        if shared.out.control_pending.load(Relaxed) {
            while boundary < *pos {
                let (_, len) = frame::peek_header(&spare[boundary..])
                    .expect("the queue holds whole frames: a header starts at every boundary");
                boundary += HEADER_LEN + len;
            }
            if boundary == *pos {
                // Between two frames: let the control lane overtake.
                *frames += shared.out.take_control(control);
                *bytes += control.len() as u64;
                if !write_all(io, shared, control, writes).await? {
                    return Ok(false);
                }
                control.clear();
            }
        }
        // Up to the end of the current frame when a control frame waits,
        // so that it can go next.
        let end = if shared.out.control_pending.load(Relaxed) && boundary > *pos {
            boundary
        } else {
            spare.len()
        };
        let n = tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return Ok(false),
            r = io.write(&spare[*pos..end]) => r?,
        };
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
        }
        *pos += n;
        *writes += 1;
    }
    Ok(true)
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
    use bytes::BytesMut;

    use crate::frame::unwritten_messages as unwritten_frames;
    use crate::frame::{self, FrameKind, HEADER_LEN};

    #[test]
    fn frames_cut_short_or_never_started_count_as_unwritten() {
        let mut batch = BytesMut::new();
        for body in [&b"abc"[..], b"", b"defgh"] {
            frame::encode_header(FrameKind::Message, body.len(), &mut batch);
            batch.extend_from_slice(body);
        }
        let ends = [HEADER_LEN + 3, 2 * HEADER_LEN + 3, 3 * HEADER_LEN + 8];
        assert_eq!(batch.len(), ends[2]);
        for written in 0..=batch.len() {
            let whole = ends.iter().filter(|&&e| e <= written).count() as u64;
            assert_eq!(
                unwritten_frames(&batch, written, |_| 1),
                3 - whole,
                "{written}"
            );
        }
    }
}
