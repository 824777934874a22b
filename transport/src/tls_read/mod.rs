//! A TLS connection's stream: rustls's unbuffered API for the TLS
//! handshake, then our own record layer ([`tls_record`](crate::tls_record))
//! on the two halves of the TCP stream, with keys rustls hands over
//! through its kernel API.
//!
//! ```text
//!  TcpStream ─► handshake(): rustls's unbuffered connection, fed from our
//!     │         buffer; stops as soon as the TLS handshake is complete
//!     │         (and rustls has nothing left to send)
//!     │  dangerous_into_kernel_connection ─► each direction's key, iv and
//!     │         sequence number; a KernelConnection for key updates and
//!     │         session tickets; bytes rustls did not take stay ours
//!     ├─ TlsReadHalf:  read ≥ 64 KiB into our buffer, open each record in
//!     │                place, lend its plaintext to the reader (poll_chunk)
//!     └─ TlsWriteHalf: seal the writer's batch into one buffer (records of
//!                      16 KiB), one write; close_notify on shutdown
//! ```
//!
//! The protocol handshake (hellos, proofs) already runs on our records,
//! through [`TlsStream`]'s `AsyncRead`/`AsyncWrite`.
//!
//! After the TLS handshake the halves handle what TLS 1.3 can still send:
//! key updates (RFC 8446 §4.6.3; ours too, before a key's confidentiality
//! limit, and when the peer asks; rustls derives the keys), session
//! tickets (handed to rustls, which stores them for resumption), alerts
//! (close_notify is the end of the stream, any other ends the connection
//! with its name). The halves share the kernel connection behind a lock
//! taken only for key updates and tickets, and a flag by which the reader
//! asks the writer for a key update.
//!
//! # Layout
//! - `handover`: the TLS handshake on rustls's unbuffered API, the
//!   hand-over of the keys ([`Established`]) and the channel binding.
//! - `read_half`: [`TlsReadHalf`], records read into our buffer, opened
//!   in place and lent to the reader task; key updates, tickets, alerts.
//! - `write_half`: [`TlsWriteHalf`], the writer's batch sealed into one
//!   buffer and written at once; our key updates, close_notify.
//! - here: [`TlsStream`] (both halves, before they are split) and what
//!   the halves share (rustls's [`Kernel`] behind a lock).

mod handover;
mod read_half;
mod write_half;

use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, atomic::AtomicBool},
    task::{Context, Poll},
};

use bytes::BytesMut;
use rustls::{
    ConnectionTrafficSecrets, Error as RustlsError, client::ClientConnectionData,
    kernel::KernelConnection, pki_types::CertificateDer, server::ServerConnectionData,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::tcp::{OwnedReadHalf, OwnedWriteHalf},
};

pub(crate) use self::handover::handshake;
use self::{read_half::TlsReadHalf, write_half::TlsWriteHalf};
use crate::{
    auth::ChannelBinding,
    tls_record::{Keys, Role},
};

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A rustls error as an IO error, the way tokio-rustls reports them (so
/// that `tls::handshake_error` finds it again).
fn rustls_io(e: RustlsError) -> io::Error {
    invalid(e)
}

/// What rustls keeps of a connection after the handshake: the key
/// schedule (key updates) and, on a client, the session ticket store.
pub(crate) enum Kernel {
    Client(KernelConnection<ClientConnectionData>),
    Server(KernelConnection<ServerConnectionData>),
}

impl Kernel {
    fn update_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RustlsError> {
        match self {
            Self::Client(k) => k.update_tx_secret(),
            Self::Server(k) => k.update_tx_secret(),
        }
    }

    fn update_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RustlsError> {
        match self {
            Self::Client(k) => k.update_rx_secret(),
            Self::Server(k) => k.update_rx_secret(),
        }
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Client(_) => "Kernel::Client",
            Self::Server(_) => "Kernel::Server",
        })
    }
}

/// The kernel connection both halves use.
type SharedKernel = Arc<Mutex<Kernel>>;

fn lock(k: &SharedKernel) -> std::sync::MutexGuard<'_, Kernel> {
    k.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A TLS connection whose handshake is complete, taken out of rustls.
pub(crate) struct Established<T> {
    io: T,
    /// Bytes read and not given to rustls: records for our layer.
    incoming: BytesMut,
    carry: BytesMut,
    peer_closed: bool,
    tx: Keys,
    rx: Keys,
    /// Records one key may seal (the suite's confidentiality limit).
    limit: u64,
    kernel: Kernel,
    role: Role,
    peer_certificates: Option<Vec<CertificateDer<'static>>>,
    binding: ChannelBinding,
}

impl<T> Established<T> {
    /// The stream, on `io`'s halves as `split` makes them.
    pub(crate) fn into_stream<R, W>(self, split: impl FnOnce(T) -> (R, W)) -> TlsStream<R, W> {
        let (rd, wr) = split(self.io);
        let update = Arc::new(AtomicBool::new(false));
        let kernel = Arc::new(Mutex::new(self.kernel));
        TlsStream {
            rd: TlsReadHalf {
                io: rd,
                buf: self.incoming,
                consumed: 0,
                ranges: Vec::new(),
                failed: None,
                pending: 0..0,
                carry: self.carry,
                rx: self.rx,
                closed: self.peer_closed,
                role: self.role,
                update: update.clone(),
                kernel: kernel.clone(),
            },
            wr: TlsWriteHalf {
                io: wr,
                out: BytesMut::new(),
                written: 0,
                tx: self.tx,
                update,
                update_at: self.limit,
                close_sent: false,
                kernel,
            },
            peer_certificates: self.peer_certificates,
            binding: self.binding,
        }
    }
}

/// A TLS connection's stream after the TLS handshake: our record layer,
/// read and written whole during the protocol handshake, then split into
/// [`TlsReadHalf`] and [`TlsWriteHalf`] (see the module docs).
#[derive(Debug)]
pub struct TlsStream<R = OwnedReadHalf, W = OwnedWriteHalf> {
    rd: TlsReadHalf<R>,
    wr: TlsWriteHalf<W>,
    peer_certificates: Option<Vec<CertificateDer<'static>>>,
    binding: ChannelBinding,
}

impl<R, W> TlsStream<R, W> {
    /// The peer's certificate chain, if it sent one.
    pub(crate) fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer_certificates.as_deref()
    }

    /// What the shared-secret proofs are bound to.
    pub(crate) fn channel_binding(&self) -> ChannelBinding {
        self.binding
    }
}

impl<R: AsyncRead + Unpin, W: Unpin> AsyncRead for TlsStream<R, W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.rd).poll_read(cx, buf)
    }
}

impl<R: Unpin, W: AsyncWrite + Unpin> AsyncWrite for TlsStream<R, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.wr).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_shutdown(cx)
    }
}

impl crate::security::sealed::SplitIo for TlsStream {
    type Read = TlsReadHalf;
    type Write = TlsWriteHalf;
    fn split_io(self) -> (Self::Read, Self::Write) {
        (self.rd, self.wr)
    }
}

#[cfg(test)]
mod tests;
