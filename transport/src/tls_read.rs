//! A TLS connection's stream: rustls for the handshakes, then our own
//! record layer ([`tls_record`](crate::tls_record)) on the two halves of
//! the TCP stream.
//!
//! ```text
//!  TcpStream ─► RecordIo (hands rustls whole records only)
//!     └─ tokio_rustls TlsStream ── TLS handshake, then the protocol
//!                                  handshake (hellos, proofs) on it
//!  split_io: rustls hands over ─► traffic secrets (SecretCapture, checked
//!            against dangerous_extract_secrets), sequence numbers, any
//!            plaintext it decrypted and not yet read; RecordIo its bytes
//!            not yet given to rustls
//!     ├─ TlsReadHalf:  read ≥ 64 KiB into our buffer, open each record in
//!     │                place, lend its plaintext to the reader (poll_chunk)
//!     └─ TlsWriteHalf: seal the writer's batch into one buffer (records of
//!                      16 KiB), one write; close_notify on shutdown
//! ```
//!
//! Why not rustls all along: rustls 0.23 copies each received record's
//! plaintext into a fresh `Vec` (its unbuffered API too), reads at most
//! 4 KiB per syscall, and encrypts each sent record into a fresh `Vec`.
//! Why not hand over right after the TLS handshake: the protocol handshake
//! is not the hot path, and running it on rustls keeps its error reporting
//! (alerts, `TlsError`) as it was.
//!
//! After the handover the halves handle what TLS 1.3 can still send: key
//! updates (RFC 8446 §4.6.3; ours too, before a key's record limit, and
//! when the peer asks), session tickets (ignored: resumption uses those
//! received during the protocol handshake), alerts (close_notify is the
//! end of the stream, any other ends the connection with its name). The
//! halves share no lock: only a flag by which the reader asks the writer
//! for a key update.

use std::{
    io,
    ops::Range,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
};

use bytes::{Buf, BytesMut};
use rustls::pki_types::CertificateDer;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{
        TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
};
use tokio_util::io::poll_read_buf;

use crate::{
    reader::{Chunks, ReadIo},
    tls_record::{
        self, ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, KEY_UPDATE, Keys, MAX_PLAINTEXT,
        NEW_SESSION_TICKET, Role, SecretCapture, Suite,
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

/// A TCP stream as rustls reads it during the handshakes: never part of
/// a record while the whole record is not here, so that when rustls hands
/// over, it holds no piece of a record (bytes not handed to rustls stay
/// in `buf`, and go to the record reader).
///
/// Bytes that do not start like a TLS record (a plaintext peer) are handed
/// over as they come, so that rustls names them as it always has.
#[derive(Debug)]
pub(crate) struct RecordIo<T> {
    io: T,
    buf: BytesMut,
    /// Bytes of the record being handed out that are not yet.
    left: usize,
    eof: bool,
}

impl<T> RecordIo<T> {
    /// Wraps `io`.
    pub(crate) fn new(io: T) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            left: 0,
            eof: false,
        }
    }

    /// The stream.
    pub(crate) fn into_inner(self) -> T {
        self.io
    }

    /// How many bytes at the front of `buf` may go to rustls now; `None`
    /// to read more first.
    fn deliverable(&mut self) -> Option<usize> {
        if self.left > 0 {
            return Some(self.left);
        }
        if self.buf.len() < HEADER_LEN {
            return None;
        }
        let h = &self.buf[..HEADER_LEN];
        // What rustls accepts as a record header (content types 20–24,
        // version 3.x, at most a record and a bit).
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        if !(20..=24).contains(&h[0]) || h[1] != 3 || len > tls_record::MAX_PLAINTEXT + 2048 {
            // Not TLS: rustls will say so.
            self.left = self.buf.len();
            return Some(self.left);
        }
        if self.buf.len() < HEADER_LEN + len {
            return None;
        }
        self.left = HEADER_LEN + len;
        Some(self.left)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for RecordIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            let n = match this.deliverable() {
                Some(n) => n,
                // At the end, whatever is left: rustls names the truncation.
                None if this.eof => this.buf.len(),
                None => {
                    this.buf.reserve(tls_record::MAX_RECORD);
                    if ready!(poll_read_buf(Pin::new(&mut this.io), cx, &mut this.buf))? == 0 {
                        this.eof = true;
                    }
                    continue;
                }
            };
            let k = n.min(dst.remaining());
            dst.put_slice(&this.buf[..k]);
            this.buf.advance(k);
            this.left = this.left.saturating_sub(k);
            return Poll::Ready(Ok(()));
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for RecordIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

type Server<T> = tokio_rustls::server::TlsStream<RecordIo<T>>;
type Client<T> = tokio_rustls::client::TlsStream<RecordIo<T>>;

#[derive(Debug)]
enum Side<T> {
    Server(Server<T>),
    Client(Client<T>),
}

/// A TLS connection's stream: rustls's until the connection starts, then
/// split into [`TlsReadHalf`] and [`TlsWriteHalf`] (see the module docs).
#[derive(Debug)]
pub struct TlsStream<T = TcpStream> {
    side: Side<T>,
    capture: Arc<SecretCapture>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> TlsStream<T> {
    /// An accepted stream whose rustls configuration logs its secrets to
    /// `capture`.
    pub(crate) fn server(s: Server<T>, capture: Arc<SecretCapture>) -> Self {
        Self {
            side: Side::Server(s),
            capture,
        }
    }

    /// A dialled stream whose rustls configuration logs its secrets to
    /// `capture`.
    pub(crate) fn client(s: Client<T>, capture: Arc<SecretCapture>) -> Self {
        Self {
            side: Side::Client(s),
            capture,
        }
    }

    /// The peer's certificate chain, if it sent one.
    pub(crate) fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        match &self.side {
            Side::Server(s) => s.get_ref().1.peer_certificates(),
            Side::Client(s) => s.get_ref().1.peer_certificates(),
        }
    }

    /// Keying material exported from the session (RFC 5705 / 8446 §7.5).
    pub(crate) fn export_keying_material<O: AsMut<[u8]>>(
        &self,
        out: O,
        label: &[u8],
    ) -> Result<O, rustls::Error> {
        match &self.side {
            Side::Server(s) => s.get_ref().1.export_keying_material(out, label, None),
            Side::Client(s) => s.get_ref().1.export_keying_material(out, label, None),
        }
    }

    /// Takes the connection out of rustls: our halves over `io`'s halves.
    pub(crate) fn into_halves<R, W>(
        self,
        split: impl FnOnce(T) -> (R, W),
    ) -> (TlsReadHalf<R>, TlsWriteHalf<W>) {
        let (io, conn, role): (_, rustls::Connection, _) = match self.side {
            Side::Server(s) => {
                let (io, c) = s.into_inner();
                (io, c.into(), Role::Server)
            }
            Side::Client(s) => {
                let (io, c) = s.into_inner();
                (io, c.into(), Role::Client)
            }
        };
        let RecordIo { io, buf, left, .. } = io;
        let (rd, wr) = split(io);
        let handover = if left == 0 {
            take_over(conn, &self.capture, role)
        } else {
            Err("rustls stopped inside a TLS record".to_owned())
        };
        match handover {
            Ok(h) => {
                let update = Arc::new(AtomicBool::new(false));
                let limit = h.tx.suite().limit();
                (
                    TlsReadHalf {
                        io: rd,
                        buf,
                        consumed: 0,
                        ranges: Vec::new(),
                        failed: None,
                        pending: 0..0,
                        carry: h.plaintext,
                        rx: Some(h.rx),
                        closed: h.peer_closed,
                        broken: None,
                        role,
                        update: update.clone(),
                    },
                    TlsWriteHalf {
                        io: wr,
                        out: BytesMut::new(),
                        written: 0,
                        tx: Some(h.tx),
                        broken: None,
                        update,
                        update_at: limit,
                        close_sent: false,
                    },
                )
            }
            Err(reason) => {
                let reason = format!("TLS handover from rustls failed: {reason}");
                (
                    TlsReadHalf::broken(rd, reason.clone()),
                    TlsWriteHalf::broken(wr, reason),
                )
            }
        }
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match &mut $self.side {
            Side::Server($s) => $e,
            Side::Client($s) => $e,
        }
    };
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// What rustls hands over.
struct Handover {
    rx: Keys,
    tx: Keys,
    /// Plaintext rustls decrypted and nobody read yet.
    plaintext: BytesMut,
    peer_closed: bool,
}

fn take_over(
    mut conn: rustls::Connection,
    capture: &SecretCapture,
    role: Role,
) -> Result<Handover, String> {
    use std::io::Read;
    // Records rustls has read and not processed (none, by RecordIo's
    // design, but processing costs nothing).
    let state = conn.process_new_packets().map_err(|e| e.to_string())?;
    let mut plaintext = BytesMut::zeroed(state.plaintext_bytes_to_read());
    conn.reader()
        .read_exact(&mut plaintext)
        .map_err(|e| e.to_string())?;
    let suite = conn
        .negotiated_cipher_suite()
        .ok_or("no cipher suite was negotiated")?;
    let suite = Suite::of(suite.suite())
        .ok_or_else(|| format!("cipher suite {:?} is not supported", suite.suite()))?;
    let (tx_secret, rx_secret) = capture
        .take(role)
        .ok_or("rustls did not log the traffic secrets")?;
    let secrets = conn
        .dangerous_extract_secrets()
        .map_err(|e| e.to_string())?;
    let tx = Keys::new(suite, tx_secret, secrets.tx.0);
    let rx = Keys::new(suite, rx_secret, secrets.rx.0);
    if !tx.matches(&secrets.tx.1) || !rx.matches(&secrets.rx.1) {
        return Err("the traffic keys changed during the handshake".into());
    }
    Ok(Handover {
        rx,
        tx,
        plaintext,
        peer_closed: state.peer_has_closed(),
    })
}

impl crate::security::sealed::SplitIo for TlsStream<TcpStream> {
    type Read = TlsReadHalf;
    type Write = TlsWriteHalf;
    fn split_io(self) -> (Self::Read, Self::Write) {
        self.into_halves(TcpStream::into_split)
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
    /// Plaintext rustls had decrypted before the handover.
    carry: BytesMut,
    rx: Option<Keys>,
    /// The peer sent close_notify.
    closed: bool,
    /// Why the handover failed.
    broken: Option<String>,
    role: Role,
    /// Set when the peer asks for our key update.
    update: Arc<AtomicBool>,
}

impl<R> TlsReadHalf<R> {
    fn broken(io: R, reason: String) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            consumed: 0,
            ranges: Vec::new(),
            failed: None,
            pending: 0..0,
            carry: BytesMut::new(),
            rx: None,
            closed: false,
            broken: Some(reason),
            role: Role::Client,
            update: Arc::default(),
        }
    }
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
            let rx = self.rx.as_mut().expect("set unless broken");
            let (typ, range) = rx.open(&mut self.buf[at..at + n]).map_err(invalid)?;
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
        if let Some(reason) = &self.broken {
            return Poll::Ready(Err(invalid(reason.clone())));
        }
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
                // Resumption uses the tickets rustls took before the
                // handover; later ones are dropped.
                (NEW_SESSION_TICKET, _) if self.role == Role::Client => {}
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
            self.rx.as_mut().expect("set unless broken").update();
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
                return Err(invalid(format!(
                    "received fatal alert: {:?}",
                    rustls::AlertDescription::from(d)
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
    tx: Option<Keys>,
    broken: Option<String>,
    /// Set by the reader when the peer asks for our key update.
    update: Arc<AtomicBool>,
    /// The record number at which our key is updated.
    update_at: u64,
    close_sent: bool,
}

impl<W> TlsWriteHalf<W> {
    fn broken(io: W, reason: String) -> Self {
        Self {
            io,
            out: BytesMut::new(),
            written: 0,
            tx: None,
            broken: Some(reason),
            update: Arc::default(),
            update_at: u64::MAX,
            close_sent: true,
        }
    }
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
        let Some(tx) = self.tx.as_mut() else {
            return Err(invalid(self.broken.clone().unwrap_or_default()));
        };
        if tx.seq() >= self.update_at || self.update.swap(false, Ordering::Relaxed) {
            // update_not_requested: we update on our own.
            tx.seal(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], &mut self.out);
            tx.update();
        }
        tx.seal(typ, data, &mut self.out);
        Ok(())
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TlsWriteHalf<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(reason) = &this.broken {
            return Poll::Ready(Err(invalid(reason.clone())));
        }
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
        ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite, crypto::ring as provider,
        pki_types::PrivateKeyDer, version::TLS13,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    /// A TLS 1.3 handshake over an in-memory pipe with `suite`:
    /// (server, client), both still rustls's.
    async fn pair(
        suite: SupportedCipherSuite,
    ) -> (TlsStream<DuplexStream>, TlsStream<DuplexStream>) {
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
        let (sc, cc) = (
            Arc::new(SecretCapture::default()),
            Arc::new(SecretCapture::default()),
        );
        server.enable_secret_extraction = true;
        client.enable_secret_extraction = true;
        server.key_log = sc.clone();
        client.key_log = cc.clone();
        let (a, b) = tokio::io::duplex(1 << 20);
        let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
        let (s, c) = tokio::join!(
            TlsAcceptor::from(Arc::new(server)).accept(RecordIo::new(a)),
            TlsConnector::from(Arc::new(client)).connect(name, RecordIo::new(b)),
        );
        (
            TlsStream::server(s.unwrap(), sc),
            TlsStream::client(c.unwrap(), cc),
        )
    }

    type Halves = (
        TlsReadHalf<ReadHalf<DuplexStream>>,
        TlsWriteHalf<WriteHalf<DuplexStream>>,
    );

    fn halves(s: TlsStream<DuplexStream>) -> Halves {
        s.into_halves(tokio::io::split)
    }

    /// rustls sends a key update (update_not_requested).
    fn refresh_keys(s: &mut TlsStream<DuplexStream>) {
        match &mut s.side {
            Side::Server(s) => s.get_mut().1.refresh_traffic_keys(),
            Side::Client(s) => s.get_mut().1.refresh_traffic_keys(),
        }
        .unwrap();
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
            let (server, mut client) = pair(suite).await;
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
            assert_eq!(rd.rx.as_ref().unwrap().seq(), 1, "rx keys were updated");
            assert!(wr.update.load(Ordering::Relaxed), "rustls asked for ours");
            wr.write_all(b"one").await.unwrap();
            wr.flush().await.unwrap();
            assert_eq!(read_n(&mut client, 3).await, b"one");
            assert_eq!(wr.tx.as_ref().unwrap().seq(), 1, "tx keys were updated");
            // Our key reaches its record limit: rustls follows our update.
            wr.update_at = 2;
            wr.write_all(b"two").await.unwrap();
            wr.write_all(b"three").await.unwrap();
            wr.flush().await.unwrap();
            assert_eq!(read_n(&mut client, 8).await, b"twothree");
            assert_eq!(wr.tx.as_ref().unwrap().seq(), 1, "tx keys were updated");
        }
    }

    #[tokio::test]
    async fn the_records_of_one_read_are_one_chunk() {
        let (server, mut client) = pair(SUITES[0]).await;
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
        // update_requested, sealed by hand.
        cwr.seal(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 1]).unwrap();
        cwr.tx.as_mut().unwrap().update();
        cwr.write_all(b"ping").await.unwrap();
        cwr.flush().await.unwrap();
        assert_eq!(read_n(&mut srd, 4).await, b"ping");
        swr.write_all(b"pong").await.unwrap();
        swr.flush().await.unwrap();
        assert_eq!(read_n(&mut crd, 4).await, b"pong");
        assert_eq!(
            swr.tx.as_ref().unwrap().seq(),
            1,
            "the server updated its keys"
        );
        assert!(!swr.update.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn close_notify_ends_the_stream_both_ways_and_a_bare_eof_is_an_error() {
        let (server, mut client) = pair(SUITES[0]).await;
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
        let (server, client) = pair(SUITES[0]).await;
        let (mut rd, _wr) = halves(server);
        let Side::Client(c) = client.side else {
            unreachable!()
        };
        let (mut raw, _) = c.into_inner();
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
    async fn plaintext_rustls_read_before_the_handover_is_handed_on() {
        let (mut server, mut client) = pair(SUITES[0]).await;
        let first = payload(40_000, 3);
        client.write_all(&first).await.unwrap();
        client.flush().await.unwrap();
        // The handshake reads a little through rustls, as the protocol
        // handshake does; the rest is rustls's or still on the wire.
        assert_eq!(read_n(&mut server, 10).await, first[..10]);
        let (mut rd, _wr) = halves(server);
        assert!(!rd.carry.is_empty(), "rustls had decrypted a record's rest");
        assert_eq!(chunks_n(&mut rd, first.len() - 10).await, first[10..]);
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
            let bytes = make(cwr.tx.as_mut().unwrap());
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
        let tx = cwr.tx.as_mut().unwrap();
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

    #[tokio::test]
    async fn rustls_is_handed_whole_records_only() {
        let (mut tx, mut rest) = tokio::io::duplex(1 << 16);
        let mut io = RecordIo::new(&mut rest);
        // Two records (lengths 3 and 2) and the start of a third.
        tx.write_all(&[
            23, 3, 3, 0, 3, 1, 2, 3, 23, 3, 3, 0, 2, 4, 5, 23, 3, 3, 0, 4, 9,
        ])
        .await
        .unwrap();
        let mut buf = [0u8; 6];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &[23, 3, 3, 0, 3, 1]);
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &[2, 3], "not past the record's end");
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &[23, 3, 3, 0, 2, 4]);
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &[5]);
        let read = tokio::time::timeout(Duration::from_millis(50), io.read(&mut buf)).await;
        assert!(read.is_err(), "a record's start waits for the whole record");
        assert_eq!(io.buf.len(), 6, "and stays ours");
        // Bytes that are not TLS go through at once: rustls names them.
        let (mut tx, mut rest) = tokio::io::duplex(1 << 16);
        let mut io = RecordIo::new(&mut rest);
        tx.write_all(b"\0\0\0\x10hello").await.unwrap();
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"\0\0\0\x10he");
    }
}
