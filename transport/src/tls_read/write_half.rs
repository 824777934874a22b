//! The writer's half of a TLS connection: seals the writer task's batch
//! into one buffer of records (16 KiB of plaintext each) and writes it
//! with one call; updates its key before the suite's confidentiality
//! limit or when the peer asks (through the flag the reader sets), and
//! sends close_notify on shutdown.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
};

use bytes::BytesMut;
use tokio::{io::AsyncWrite, net::tcp::OwnedWriteHalf};

use super::{SharedKernel, invalid, lock, rustls_io};
use crate::tls_record::{ALERT, APPLICATION_DATA, HANDSHAKE, KEY_UPDATE, Keys, MAX_PLAINTEXT};

/// The most plaintext one `poll_write` seals before it writes: bounds the
/// sealed buffer (the writer's batches are mostly smaller).
const MAX_WRITE: usize = 256 * 1024;

/// The writer's half of a TLS connection: seals what it is given into one
/// buffer of records and writes that with one call.
#[derive(Debug)]
pub struct TlsWriteHalf<W = OwnedWriteHalf> {
    pub(super) io: W,
    /// Sealed records; the front `written` bytes are written.
    pub(super) out: BytesMut,
    pub(super) written: usize,
    pub(super) tx: Keys,
    /// Set by the reader when the peer asks for our key update.
    pub(super) update: Arc<AtomicBool>,
    /// The record number at which our key is updated.
    pub(super) update_at: u64,
    pub(super) close_sent: bool,
    /// rustls's key schedule.
    pub(super) kernel: SharedKernel,
}

impl<W: AsyncWrite + Unpin> TlsWriteHalf<W> {
    /// Writes what is sealed and not yet written.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Seals one record, preceded by a key update when the key has sealed
    /// its share or the peer asked for one.
    fn seal(&mut self, typ: u8, data: &[u8]) -> io::Result<()> {
        if self.tx.seq() >= self.update_at || self.update.swap(false, Ordering::Relaxed) {
            // update_not_requested: we update on our own.
            self.key_update(false)?;
        }
        self.tx.seal(typ, data, &mut self.out);
        Ok(())
    }

    /// Seals a key update (asking the peer for theirs if `request`), then
    /// takes the next keys from rustls.
    pub(super) fn key_update(&mut self, request: bool) -> io::Result<()> {
        let msg = [KEY_UPDATE, 0, 0, 1, u8::from(request)];
        self.tx.seal(HANDSHAKE, &msg, &mut self.out);
        let (seq, secrets) = lock(&self.kernel).update_tx().map_err(rustls_io)?;
        self.tx.update(&secrets, seq).map_err(invalid)
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TlsWriteHalf<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        let n = buf.len().min(MAX_WRITE);
        for chunk in buf[..n].chunks(MAX_PLAINTEXT) {
            this.seal(APPLICATION_DATA, chunk)?;
        }
        // One write now; what the socket does not take goes with the next
        // write or the flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_sent {
            // close_notify: a warning alert.
            self.seal(ALERT, &[1, 0])?;
            self.close_sent = true;
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
