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

use std::{
    io,
    ops::Range,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
};

use bytes::{Buf, BytesMut};
use rustls::{
    ConnectionTrafficSecrets, Error as RustlsError, SupportedCipherSuite,
    client::{ClientConnectionData, UnbufferedClientConnection},
    kernel::KernelConnection,
    pki_types::CertificateDer,
    server::{ServerConnectionData, UnbufferedServerConnection},
    unbuffered::{ConnectionState, EncodeError, UnbufferedStatus},
};
use sha2::{Digest, Sha256};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::tcp::{OwnedReadHalf, OwnedWriteHalf},
};
use tokio_util::io::poll_read_buf;

use crate::{
    auth::{CHANNEL_BINDING_LABEL, ChannelBinding},
    reader::{Chunks, ReadIo},
    tls_record::{
        self, ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, KEY_UPDATE, Keys, MAX_PLAINTEXT,
        NEW_SESSION_TICKET, Role,
    },
};

/// How much a read asks the socket for: about four full records.
const READ_SIZE: usize = 64 * 1024;

/// The most plaintext one `poll_write` seals before it writes: bounds the
/// sealed buffer (the writer's batches are mostly smaller).
const MAX_WRITE: usize = 256 * 1024;

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A rustls error as an IO error, the way tokio-rustls reports them (so
/// that `tls::handshake_error` finds it again).
fn rustls_io(e: RustlsError) -> io::Error {
    invalid(e)
}

/// rustls's unbuffered connection of either side, as the handshake drives
/// it.
pub(crate) trait Unbuffered: Send {
    /// `ClientConnectionData` or `ServerConnectionData`.
    type Data;
    /// Which side this is.
    const ROLE: Role;
    /// `process_tls_records`.
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// The state every connection shares.
    fn common(&self) -> &rustls::CommonState;
    /// `dangerous_into_kernel_connection`.
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError>;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    const ROLE: Role = Role::Client;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError> {
        let (secrets, k) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Client(k)))
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    const ROLE: Role = Role::Server;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError> {
        let (secrets, k) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Server(k)))
    }
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

/// What the handshake loop does next, decided while rustls borrows the
/// buffers and done after.
enum Step {
    /// Process again.
    Again,
    /// Write what is encoded.
    Write,
    /// Read more from the peer.
    Read,
    /// The TLS handshake is complete.
    Done,
}

/// Runs the TLS handshake of `conn` over `io`, then takes the connection
/// out of rustls. On failure, the error (a rustls error inside an
/// `InvalidData` IO error, as tokio-rustls reports them) and the stream,
/// after our alert, if any, was sent.
pub(crate) async fn handshake<C: Unbuffered, T: AsyncRead + AsyncWrite + Unpin>(
    mut conn: C,
    mut io: T,
) -> Result<Established<T>, (io::Error, T)> {
    let mut incoming = BytesMut::with_capacity(tls_record::MAX_RECORD);
    let mut outgoing = Vec::new();
    // Application data rustls decrypted with the handshake's last records.
    let mut carry = BytesMut::new();
    let mut peer_closed = false;
    loop {
        // Once the handshake is complete rustls is given no more input:
        // what follows is for our record layer.
        let handshaking = conn.common().is_handshaking();
        let mut none = [0u8; 0];
        let input: &mut [u8] = if handshaking {
            &mut incoming
        } else {
            &mut none
        };
        let status = conn.process(input);
        let discard = status.discard;
        let step = match status.state {
            Err(e) => {
                incoming.advance(discard);
                return Err((rustls_io(e.clone()), fail(conn, io).await));
            }
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let at = outgoing.len();
                let need = match enc.encode(&mut []) {
                    Err(EncodeError::InsufficientSize(s)) => s.required_size,
                    _ => 0,
                };
                outgoing.resize(at + need, 0);
                let n = enc.encode(&mut outgoing[at..]).unwrap_or(0);
                outgoing.truncate(at + n);
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // Written right below, before rustls is called again.
                t.done();
                Step::Write
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                while let Some(record) = r.next_record() {
                    match record {
                        Ok(record) => carry.extend_from_slice(record.payload),
                        Err(e) => {
                            drop(r);
                            incoming.advance(discard);
                            return Err((rustls_io(e.clone()), fail(conn, io).await));
                        }
                    }
                }
                Step::Again
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                peer_closed = true;
                if handshaking { Step::Read } else { Step::Done }
            }
            // A server is complete when it has the client's Finished, not
            // when it may send (0.5-RTT).
            Ok(ConnectionState::WriteTraffic(_)) if handshaking => Step::Read,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Done,
            Ok(other) => {
                let e = RustlsError::General(format!("unexpected TLS state {other:?}"));
                incoming.advance(discard);
                return Err((rustls_io(e.clone()), fail(conn, io).await));
            }
        };
        incoming.advance(discard);
        match step {
            Step::Again => {}
            Step::Write => {
                if let Err(e) = write_out(&mut io, &mut outgoing).await {
                    return Err((e, io));
                }
            }
            Step::Read if peer_closed => {
                return Err((
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed TLS during the handshake",
                    ),
                    io,
                ));
            }
            Step::Read => {
                incoming.reserve(tls_record::MAX_RECORD);
                match io.read_buf(&mut incoming).await {
                    Ok(0) => {
                        return Err((
                            io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof"),
                            io,
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => return Err((e, io)),
                }
            }
            Step::Done => break,
        }
    }
    if let Err(e) = write_out(&mut io, &mut outgoing).await {
        return Err((e, io));
    }
    let common = conn.common();
    let peer_certificates = common.peer_certificates().map(<[_]>::to_vec);
    let limit = match common.negotiated_cipher_suite() {
        Some(SupportedCipherSuite::Tls13(s)) => s.common.confidentiality_limit,
        _ => 0,
    };
    let taken = conn.into_kernel().and_then(|(secrets, kernel)| {
        let unknown = || RustlsError::General("cipher suite not supported".into());
        let tx = Keys::new(&secrets.tx.1, secrets.tx.0).ok_or_else(unknown)?;
        let rx = Keys::new(&secrets.rx.1, secrets.rx.0).ok_or_else(unknown)?;
        let binding = match C::ROLE {
            Role::Client => channel_binding(&secrets.tx.1, &secrets.rx.1),
            Role::Server => channel_binding(&secrets.rx.1, &secrets.tx.1),
        };
        Ok((tx, rx, kernel, binding))
    });
    match taken {
        Ok((tx, rx, kernel, binding)) => Ok(Established {
            io,
            incoming,
            carry,
            peer_closed,
            tx,
            rx,
            limit,
            kernel,
            role: C::ROLE,
            peer_certificates,
            binding,
        }),
        Err(e) => Err((invalid(format!("TLS handover from rustls failed: {e}")), io)),
    }
}

/// Writes what rustls encoded.
async fn write_out<T: AsyncWrite + Unpin>(io: &mut T, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        io.flush().await?;
        out.clear();
    }
    Ok(())
}

/// After a handshake error: sends the alert rustls queued, if any.
///
/// rustls is called only while it has records queued: those are handed
/// out before it looks at any input. Past them it would deframe again,
/// and a handshake message it was joining from several records is kept as
/// ranges of the earlier input buffer (an empty one makes rustls panic;
/// the real one would be parsed again, after the error).
async fn fail<C: Unbuffered, T: AsyncWrite + Unpin>(mut conn: C, mut io: T) -> T {
    let mut out = Vec::new();
    // An alert is one record; a few rounds are plenty.
    for _ in 0..4 {
        if !conn.common().wants_write() {
            break;
        }
        match conn.process(&mut []).state {
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let mut buf = [0u8; 64];
                if let Ok(n) = enc.encode(&mut buf) {
                    out.extend_from_slice(&buf[..n]);
                }
            }
            _ => break,
        }
    }
    let _ = write_out(&mut io, &mut out).await;
    io
}

/// The channel binding of a TLS session: a hash of both directions'
/// initial traffic keys, which only the two ends of this session hold
/// (docs/PROTOCOL.md, "Shared secret").
fn channel_binding(
    client: &ConnectionTrafficSecrets,
    server: &ConnectionTrafficSecrets,
) -> ChannelBinding {
    let mut h = Sha256::new();
    h.update(CHANNEL_BINDING_LABEL);
    for s in [client, server] {
        if let ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } = s
        {
            h.update(key.as_ref());
            h.update(iv.as_ref());
        }
    }
    h.finalize().into()
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

/// What the records already read hold next.
enum Next {
    /// Application data: its plaintext's place in the buffer.
    Data(Range<usize>),
    /// The rest of a record (or a header) must be read first.
    More,
    /// The peer sent close_notify.
    Closed,
}

/// The reader's half of a TLS connection: reads into its own buffer and
/// lends out each record's plaintext where it was decrypted.
#[derive(Debug)]
pub struct TlsReadHalf<R = OwnedReadHalf> {
    io: R,
    /// Records as read; the front `consumed` bytes are records already
    /// opened (their plaintext may still be lent until the next read).
    buf: BytesMut,
    consumed: usize,
    /// The plaintext ranges of one chunk (kept for their allocation).
    ranges: Vec<Range<usize>>,
    /// An error met after a chunk's first record, for the next poll.
    failed: Option<io::Error>,
    /// Plaintext in `buf` not yet read (by `poll_read`).
    pending: Range<usize>,
    /// Plaintext rustls decrypted with the handshake's last records.
    carry: BytesMut,
    rx: Keys,
    /// The peer sent close_notify.
    closed: bool,
    role: Role,
    /// Set when the peer asks for our key update.
    update: Arc<AtomicBool>,
    /// rustls's key schedule and ticket store.
    kernel: SharedKernel,
}

impl<R: AsyncRead + Unpin> TlsReadHalf<R> {
    /// Opens the records already in `buf` after `consumed` up to the next
    /// one with application data.
    fn next_record(&mut self) -> io::Result<Next> {
        loop {
            if self.closed {
                return Ok(Next::Closed);
            }
            let at = self.consumed;
            let rest = &self.buf[at..];
            let n = match tls_record::record_len(rest).map_err(invalid)? {
                Some(n) if rest.len() >= n => n,
                _ => return Ok(Next::More),
            };
            let (typ, range) = self.rx.open(&mut self.buf[at..at + n]).map_err(invalid)?;
            self.consumed += n;
            let range = at + range.start..at + range.end;
            match typ {
                APPLICATION_DATA if range.is_empty() => {}
                APPLICATION_DATA => return Ok(Next::Data(range)),
                HANDSHAKE => self.post_handshake(range)?,
                ALERT => self.alert(range)?,
                t => {
                    return Err(invalid(format!(
                        "TLS record of unexpected content type {t}"
                    )));
                }
            }
        }
    }

    /// The next application data record's plaintext (its place in `buf`),
    /// reading as needed; `None` after close_notify. Only with nothing
    /// pending or lent: a read moves what `buf` holds.
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Range<usize>>>> {
        debug_assert!(self.pending.is_empty());
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        loop {
            match self.next_record()? {
                Next::Data(range) => return Poll::Ready(Ok(Some(range))),
                Next::Closed => return Poll::Ready(Ok(None)),
                Next::More => {}
            }
            // Drop the opened records, keep the partial one.
            self.buf.advance(std::mem::take(&mut self.consumed));
            let want = tls_record::record_len(&self.buf).map_err(invalid)?;
            // Room for the whole record (checked: at most MAX_RECORD) and a
            // read's worth.
            let need = want
                .unwrap_or(HEADER_LEN)
                .max(self.buf.len() + READ_SIZE / 2);
            if self.buf.capacity() < need {
                self.buf.reserve(READ_SIZE.max(need - self.buf.len()));
            }
            let n = ready!(poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf))?;
            if n == 0 {
                let why = if self.buf.is_empty() {
                    "peer closed connection without sending TLS close_notify"
                } else {
                    "peer closed connection in the middle of a TLS record"
                };
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::UnexpectedEof, why)));
            }
        }
    }

    /// Handshake messages after the handshake: key updates and tickets.
    fn post_handshake(&mut self, range: Range<usize>) -> io::Result<()> {
        let mut msg = &self.buf[range];
        let mut update = false;
        while !msg.is_empty() {
            let &[typ, a, b, c, ref rest @ ..] = msg else {
                return Err(invalid("a post-handshake TLS message split across records"));
            };
            let len = u32::from_be_bytes([0, a, b, c]) as usize;
            if rest.len() < len {
                return Err(invalid("a post-handshake TLS message split across records"));
            }
            let (body, after) = rest.split_at(len);
            msg = after;
            match (typ, body) {
                // rustls keeps the ticket for resumption.
                (NEW_SESSION_TICKET, _) if self.role == Role::Client => {
                    if let Kernel::Client(k) = &mut *lock(&self.kernel) {
                        k.handle_new_session_ticket(body).map_err(rustls_io)?;
                    }
                }
                // The last message of its record: keys change after it.
                (KEY_UPDATE, &[asked @ (0 | 1)]) if after.is_empty() => {
                    update = true;
                    if asked == 1 {
                        self.update.store(true, Ordering::Relaxed);
                    }
                }
                (KEY_UPDATE, _) => return Err(invalid("malformed TLS key update")),
                (t, _) => {
                    return Err(invalid(format!(
                        "unexpected post-handshake TLS message of type {t}"
                    )));
                }
            }
        }
        if update {
            let (seq, secrets) = lock(&self.kernel).update_rx().map_err(rustls_io)?;
            self.rx.update(&secrets, seq).map_err(invalid)?;
        }
        Ok(())
    }

    fn alert(&mut self, range: Range<usize>) -> io::Result<()> {
        match self.buf[range] {
            // close_notify: the end of the stream.
            [_, 0] => self.closed = true,
            // user_canceled: a warning, close_notify follows.
            [_, 90] => {}
            [_, d] => {
                return Err(rustls_io(RustlsError::AlertReceived(
                    rustls::AlertDescription::from(d),
                )));
            }
            _ => return Err(invalid("malformed TLS alert")),
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TlsReadHalf<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.carry.is_empty() {
            let k = this.carry.len().min(dst.remaining());
            dst.put_slice(&this.carry[..k]);
            this.carry.advance(k);
            return Poll::Ready(Ok(()));
        }
        if this.pending.is_empty() {
            match ready!(this.poll_record(cx))? {
                Some(range) => this.pending = range,
                None => return Poll::Ready(Ok(())),
            }
        }
        let k = this.pending.len().min(dst.remaining());
        dst.put_slice(&this.buf[this.pending.start..this.pending.start + k]);
        this.pending.start += k;
        Poll::Ready(Ok(()))
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> ReadIo for TlsReadHalf<R> {
    const CHUNKED: bool = true;

    fn poll_chunk<T>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Chunks<'_>) -> T,
    ) -> Poll<io::Result<Option<T>>> {
        if !self.carry.is_empty() {
            let all = 0..self.carry.len();
            let out = f(Chunks::new(&self.carry, std::slice::from_ref(&all)));
            self.carry.clear();
            return Poll::Ready(Ok(Some(out)));
        }
        if !self.pending.is_empty() {
            let out = f(Chunks::new(&self.buf, std::slice::from_ref(&self.pending)));
            self.pending = 0..0;
            return Poll::Ready(Ok(Some(out)));
        }
        let Some(first) = ready!(self.poll_record(cx))? else {
            return Poll::Ready(Ok(None));
        };
        // Every whole record already read goes in the same chunk: one
        // batch for the handler per read, as on a plaintext connection.
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        ranges.push(first);
        loop {
            match self.next_record() {
                Ok(Next::Data(range)) => ranges.push(range),
                Ok(Next::More | Next::Closed) => break,
                Err(e) => {
                    // After the records before it.
                    self.failed = Some(e);
                    break;
                }
            }
        }
        let out = f(Chunks::new(&self.buf, &ranges));
        self.ranges = ranges;
        Poll::Ready(Ok(Some(out)))
    }
}

/// The writer's half of a TLS connection: seals what it is given into one
/// buffer of records and writes that with one call.
#[derive(Debug)]
pub struct TlsWriteHalf<W = OwnedWriteHalf> {
    io: W,
    /// Sealed records; the front `written` bytes are written.
    out: BytesMut,
    written: usize,
    tx: Keys,
    /// Set by the reader when the peer asks for our key update.
    update: Arc<AtomicBool>,
    /// The record number at which our key is updated.
    update_at: u64,
    close_sent: bool,
    /// rustls's key schedule.
    kernel: SharedKernel,
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
    fn key_update(&mut self, request: bool) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use std::{net::Ipv4Addr, time::Duration};

    use rustls::{
        ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite,
        client::{ClientSessionMemoryCache, ClientSessionStore, Resumption},
        crypto::ring as provider,
        pki_types::{PrivateKeyDer, ServerName},
        version::TLS13,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
    use tokio_rustls::TlsConnector;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    type Ours = TlsStream<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

    /// Configurations for one self-signed certificate with `suite`; the
    /// client keeps its tickets in `store`.
    fn configs(
        suite: SupportedCipherSuite,
        store: Arc<dyn ClientSessionStore>,
    ) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let mut provider = provider::default_provider();
        provider.cipher_suites = vec![suite];
        let provider = Arc::new(provider);
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.resumption = Resumption::store(store);
        server.enable_secret_extraction = true;
        client.enable_secret_extraction = true;
        (Arc::new(server), Arc::new(client))
    }

    fn name() -> ServerName<'static> {
        ServerName::IpAddress(Ipv4Addr::LOCALHOST.into())
    }

    fn memory() -> Arc<dyn ClientSessionStore> {
        Arc::new(ClientSessionMemoryCache::new(8))
    }

    /// A TLS 1.3 handshake over an in-memory pipe with `suite`: our
    /// server, a (buffered) rustls client.
    async fn with_rustls(
        suite: SupportedCipherSuite,
    ) -> (Ours, tokio_rustls::client::TlsStream<DuplexStream>) {
        let (server, client) = configs(suite, memory());
        let (a, b) = tokio::io::duplex(1 << 20);
        let (s, c) = tokio::join!(
            handshake(UnbufferedServerConnection::new(server).unwrap(), a),
            TlsConnector::from(client).connect(name(), b),
        );
        let s = s.map_err(|(e, _)| e).unwrap();
        (s.into_stream(tokio::io::split), c.unwrap())
    }

    /// A TLS 1.3 handshake over an in-memory pipe, ours on both ends:
    /// (server, client).
    async fn ours(server: Arc<ServerConfig>, client: Arc<ClientConfig>) -> (Ours, Ours) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (s, c) = tokio::join!(
            handshake(UnbufferedServerConnection::new(server).unwrap(), a),
            handshake(UnbufferedClientConnection::new(client, name()).unwrap(), b),
        );
        let s = s.map_err(|(e, _)| e).unwrap();
        let c = c.map_err(|(e, _)| e).unwrap();
        (
            s.into_stream(tokio::io::split),
            c.into_stream(tokio::io::split),
        )
    }

    async fn pair(suite: SupportedCipherSuite) -> (Ours, Ours) {
        let (server, client) = configs(suite, memory());
        ours(server, client).await
    }

    type Halves = (
        TlsReadHalf<ReadHalf<DuplexStream>>,
        TlsWriteHalf<WriteHalf<DuplexStream>>,
    );

    fn halves(s: Ours) -> Halves {
        (s.rd, s.wr)
    }

    /// rustls sends a key update (update_requested).
    fn refresh_keys(s: &mut tokio_rustls::client::TlsStream<DuplexStream>) {
        s.get_mut().1.refresh_traffic_keys().unwrap();
    }

    fn payload(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    async fn read_n(r: &mut (impl AsyncRead + Unpin), n: usize) -> Vec<u8> {
        let mut got = vec![0; n];
        tokio::time::timeout(LIMIT, r.read_exact(&mut got))
            .await
            .expect("read in time")
            .unwrap();
        got
    }

    /// Reads by lending chunks, as the reader task does.
    async fn chunks_n(r: &mut TlsReadHalf<ReadHalf<DuplexStream>>, n: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < n {
            let chunk = tokio::time::timeout(
                LIMIT,
                std::future::poll_fn(|cx| {
                    r.poll_chunk(cx, |c| {
                        c.iter()
                            .inspect(|p| assert!(p.len() <= MAX_PLAINTEXT))
                            .fold(Vec::new(), |mut v, p| {
                                v.extend_from_slice(p);
                                v
                            })
                    })
                }),
            )
            .await
            .expect("chunk in time")
            .unwrap()
            .expect("not the end");
            got.extend(chunk);
        }
        got
    }

    const SUITES: [SupportedCipherSuite; 3] = [
        provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
        provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
        provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];

    #[tokio::test]
    async fn records_interoperate_with_rustls_both_ways_through_key_updates() {
        for suite in SUITES {
            let (server, mut client) = with_rustls(suite).await;
            let (mut rd, mut wr) = halves(server);
            // rustls → our reader, several records' worth.
            let big = payload(100_000, 1);
            client.write_all(&big).await.unwrap();
            client.flush().await.unwrap();
            assert_eq!(chunks_n(&mut rd, big.len()).await, big, "{suite:?}");
            // Our writer → rustls, in one write of several records.
            let big = payload(70_000, 2);
            assert_eq!(wr.write(&big).await.unwrap(), big.len());
            wr.flush().await.unwrap();
            assert_eq!(read_n(&mut client, big.len()).await, big);
            // rustls updates its keys and asks for ours: our reader
            // follows, our writer answers before its next record.
            refresh_keys(&mut client);
            client
                .write_all(b"after rustls's key update")
                .await
                .unwrap();
            client.flush().await.unwrap();
            assert_eq!(read_n(&mut rd, 25).await, b"after rustls's key update");
            assert_eq!(rd.rx.seq(), 1, "rx keys were updated");
            assert!(wr.update.load(Ordering::Relaxed), "rustls asked for ours");
            wr.write_all(b"one").await.unwrap();
            wr.flush().await.unwrap();
            assert_eq!(read_n(&mut client, 3).await, b"one");
            assert_eq!(wr.tx.seq(), 1, "tx keys were updated");
            // Our key reaches its record limit: rustls follows our update.
            wr.update_at = 2;
            wr.write_all(b"two").await.unwrap();
            wr.write_all(b"three").await.unwrap();
            wr.flush().await.unwrap();
            assert_eq!(read_n(&mut client, 8).await, b"twothree");
            assert_eq!(wr.tx.seq(), 1, "tx keys were updated");
        }
    }

    #[tokio::test]
    async fn the_records_of_one_read_are_one_chunk() {
        let (server, mut client) = with_rustls(SUITES[0]).await;
        let (mut rd, _wr) = halves(server);
        // Three records (16 KiB, 16 KiB, 8 KiB), all on the pipe before
        // the first read.
        let data = payload(40_960, 4);
        client.write_all(&data).await.unwrap();
        client.flush().await.unwrap();
        let (pieces, bytes) = std::future::poll_fn(|cx| {
            rd.poll_chunk(cx, |c| {
                (
                    c.iter().count(),
                    c.iter().flatten().copied().collect::<Vec<_>>(),
                )
            })
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(pieces, 3);
        assert_eq!(bytes, data);
    }

    #[tokio::test]
    async fn a_peer_asking_for_a_key_update_gets_one_before_our_next_record() {
        let (server, client) = pair(SUITES[0]).await;
        let (mut srd, mut swr) = halves(server);
        let (mut crd, mut cwr) = halves(client);
        // update_requested.
        cwr.key_update(true).unwrap();
        cwr.write_all(b"ping").await.unwrap();
        cwr.flush().await.unwrap();
        assert_eq!(read_n(&mut srd, 4).await, b"ping");
        swr.write_all(b"pong").await.unwrap();
        swr.flush().await.unwrap();
        assert_eq!(read_n(&mut crd, 4).await, b"pong");
        assert_eq!(swr.tx.seq(), 1, "the server updated its keys");
        assert!(!swr.update.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn close_notify_ends_the_stream_both_ways_and_a_bare_eof_is_an_error() {
        let (server, mut client) = with_rustls(SUITES[0]).await;
        let (mut rd, mut wr) = halves(server);
        wr.write_all(b"last").await.unwrap();
        wr.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(LIMIT, client.read_to_end(&mut got))
            .await
            .unwrap()
            .expect("rustls saw close_notify, not a truncation");
        assert_eq!(got, b"last");
        client.shutdown().await.unwrap();
        let end = std::future::poll_fn(|cx| rd.poll_chunk(cx, |c| c.len())).await;
        assert!(matches!(end, Ok(None)), "{end:?}");

        // The peer's TCP ends without close_notify: a truncation.
        let (server, client) = with_rustls(SUITES[0]).await;
        let (mut rd, _wr) = halves(server);
        let (mut raw, _) = client.into_inner();
        raw.shutdown().await.unwrap();
        let err = std::future::poll_fn(|cx| rd.poll_chunk(cx, |c| c.len()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(
            err.to_string().contains("without sending TLS close_notify"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_client_hands_the_servers_session_tickets_to_rustls() {
        let store = Arc::new(ClientSessionMemoryCache::new(8));
        let (server, client) = configs(SUITES[0], store.clone());
        let (server, client) = ours(server, client).await;
        let (_srd, mut swr) = halves(server);
        let (mut crd, _cwr) = halves(client);
        // The server's tickets precede its first record.
        swr.write_all(b"hi").await.unwrap();
        swr.flush().await.unwrap();
        assert_eq!(chunks_n(&mut crd, 2).await, b"hi");
        assert!(
            store.take_tls13_ticket(&name()).is_some(),
            "the ticket is in the client configuration's store"
        );
    }

    #[tokio::test]
    async fn the_client_configuration_is_shared_not_copied() {
        let (server, client) = configs(SUITES[0], memory());
        let (s, c) = ours(server, client.clone()).await;
        // The client's kernel connection holds the configuration itself.
        assert_eq!(Arc::strong_count(&client), 2);
        drop((s, c));
        assert_eq!(Arc::strong_count(&client), 1);
    }

    #[tokio::test]
    async fn bad_records_are_named_errors() {
        // Each case: raw bytes the peer sends after the handshake.
        let fatal = |tx: &mut Keys| {
            let mut b = BytesMut::new();
            tx.seal(ALERT, &[2, 40], &mut b); // handshake_failure
            b
        };
        let tampered = |tx: &mut Keys| {
            let mut b = BytesMut::new();
            tx.seal(APPLICATION_DATA, b"hi", &mut b);
            b[7] ^= 1;
            b
        };
        let oversize = |_: &mut Keys| BytesMut::from(&[23u8, 3, 3, 0x50, 0][..]);
        let ticket_to_server = |tx: &mut Keys| {
            let mut b = BytesMut::new();
            tx.seal(HANDSHAKE, &[NEW_SESSION_TICKET, 0, 0, 0], &mut b);
            b
        };
        type Make<'a> = &'a dyn Fn(&mut Keys) -> BytesMut;
        let cases: [(Make<'_>, &str); 4] = [
            (&fatal, "received fatal alert: HandshakeFailure"),
            (&tampered, "bad_record_mac"),
            (&oversize, "TLS record length 20480 exceeds limit 16640"),
            (
                &ticket_to_server,
                "unexpected post-handshake TLS message of type 4",
            ),
        ];
        for (make, want) in cases {
            let (server, client) = pair(SUITES[0]).await;
            let (mut rd, _swr) = halves(server);
            let (_crd, mut cwr) = halves(client);
            let bytes = make(&mut cwr.tx);
            cwr.io.write_all(&bytes).await.unwrap();
            let err = tokio::time::timeout(
                LIMIT,
                std::future::poll_fn(|cx| rd.poll_chunk(cx, |c| c.len())),
            )
            .await
            .unwrap()
            .unwrap_err();
            assert!(err.to_string().contains(want), "{err} / {want}");
        }
    }

    #[tokio::test]
    async fn records_before_a_bad_one_are_delivered_first() {
        let (server, client) = pair(SUITES[0]).await;
        let (mut rd, _swr) = halves(server);
        let (_crd, mut cwr) = halves(client);
        let tx = &mut cwr.tx;
        let mut bytes = BytesMut::new();
        tx.seal(APPLICATION_DATA, b"good", &mut bytes);
        tx.seal(ALERT, &[2, 50], &mut bytes); // decode_error
        cwr.io.write_all(&bytes).await.unwrap();
        async fn next(rd: &mut TlsReadHalf<ReadHalf<DuplexStream>>) -> io::Result<Vec<u8>> {
            let chunk = std::future::poll_fn(|cx| {
                rd.poll_chunk(cx, |c| c.iter().flatten().copied().collect::<Vec<_>>())
            });
            tokio::time::timeout(LIMIT, chunk)
                .await
                .expect("in time")
                .map(|c| c.expect("not the end"))
        }
        assert_eq!(next(&mut rd).await.unwrap(), b"good");
        let err = next(&mut rd).await.unwrap_err();
        assert!(err.to_string().contains("DecodeError"), "{err}");
    }
}
