//! The reader's half of a TLS connection: reads at least 64 KiB at a time
//! into its own buffer, opens each record in place and lends the reader
//! task every whole application-data record of one read as one chunk, so
//! frames are parsed where they were decrypted.
//!
//! ```text
//!  buf: [ opened records (plaintext lent) | whole records | partial ]
//!         0 ........................ consumed
//!  poll_chunk: open whole records → ranges of plaintext → f(Chunks)
//!  more needed: drop the opened records, keep the partial one, read
//! ```
//!
//! Records that are not application data are handled on the way: key
//! updates (our receive key changes after the record; the writer is asked
//! for its own when the peer requests it), session tickets (to rustls, on
//! a client) and alerts (close_notify ends the stream, any other is an
//! error after the records before it).

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
use rustls::Error as RustlsError;
use tokio::{
    io::{AsyncRead, ReadBuf},
    net::tcp::OwnedReadHalf,
};
use tokio_util::io::poll_read_buf;

use super::{Kernel, SharedKernel, invalid, lock, rustls_io};
use crate::{
    reader::{Chunks, ReadIo},
    tls_record::{
        self, ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, KEY_UPDATE, Keys, NEW_SESSION_TICKET,
        Role,
    },
};

/// How much a read asks the socket for: about four full records.
const READ_SIZE: usize = 64 * 1024;

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
    pub(super) io: R,
    /// Records as read; the front `consumed` bytes are records already
    /// opened (their plaintext may still be lent until the next read).
    pub(super) buf: BytesMut,
    pub(super) consumed: usize,
    /// The plaintext ranges of one chunk (kept for their allocation).
    pub(super) ranges: Vec<Range<usize>>,
    /// An error met after a chunk's first record, for the next poll.
    pub(super) failed: Option<io::Error>,
    /// Plaintext in `buf` not yet read (by `poll_read`).
    pub(super) pending: Range<usize>,
    /// Plaintext rustls decrypted with the handshake's last records.
    pub(super) carry: BytesMut,
    pub(super) rx: Keys,
    /// The peer sent close_notify.
    pub(super) closed: bool,
    pub(super) role: Role,
    /// Set when the peer asks for our key update.
    pub(super) update: Arc<AtomicBool>,
    /// rustls's key schedule and ticket store.
    pub(super) kernel: SharedKernel,
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
            if let Some(more) = to_reserve(self.buf.len(), self.buf.capacity(), want) {
                self.buf.reserve(more);
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
            let (message, after) = post_handshake_message(msg, self.role)?;
            msg = after;
            match message {
                // rustls keeps the ticket for resumption.
                PostHandshake::Ticket(body) => {
                    if let Kernel::Client(k) = &mut *lock(&self.kernel) {
                        k.handle_new_session_ticket(body).map_err(rustls_io)?;
                    }
                }
                PostHandshake::KeyUpdate { asked } => {
                    update = true;
                    if asked {
                        self.update.store(true, Ordering::Relaxed);
                    }
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
        if alert_closes(&self.buf[range])? {
            self.closed = true;
        }
        Ok(())
    }
}

/// How much to reserve before the next read, if anything: room for the
/// whole record whose length `want` is (checked by `record_len`: at most
/// `MAX_RECORD`), or at least its header, and for half a read beyond what
/// the buffer holds; when it must grow, by at least a full read, so that
/// a buffer that grows does not grow again on every read.
#[inline]
fn to_reserve(len: usize, capacity: usize, want: Option<usize>) -> Option<usize> {
    let need = want.unwrap_or(HEADER_LEN).max(len + READ_SIZE / 2);
    (capacity < need).then(|| READ_SIZE.max(need - len))
}

/// A handshake message after the handshake, as the reader acts on it.
#[derive(Debug, PartialEq, Eq)]
enum PostHandshake<'a> {
    /// A session ticket's body, for rustls (a client's only).
    Ticket(&'a [u8]),
    /// A key update; `asked`: the peer wants ours too.
    KeyUpdate { asked: bool },
}

/// The first handshake message of a record's plaintext `msg`, and what
/// follows it. A message must be whole in its record (one split across
/// records is refused, not joined), a key update must end its record (the
/// keys change after it), and only a client takes tickets.
fn post_handshake_message(msg: &[u8], role: Role) -> io::Result<(PostHandshake<'_>, &[u8])> {
    let &[typ, a, b, c, ref rest @ ..] = msg else {
        return Err(invalid("a post-handshake TLS message split across records"));
    };
    let len = u32::from_be_bytes([0, a, b, c]) as usize;
    if rest.len() < len {
        return Err(invalid("a post-handshake TLS message split across records"));
    }
    let (body, after) = rest.split_at(len);
    let message = match (typ, body) {
        (NEW_SESSION_TICKET, _) if role == Role::Client => PostHandshake::Ticket(body),
        // The last message of its record: keys change after it.
        (KEY_UPDATE, &[asked @ (0 | 1)]) if after.is_empty() => {
            PostHandshake::KeyUpdate { asked: asked == 1 }
        }
        (KEY_UPDATE, _) => return Err(invalid("malformed TLS key update")),
        (t, _) => {
            return Err(invalid(format!(
                "unexpected post-handshake TLS message of type {t}"
            )));
        }
    };
    Ok((message, after))
}

/// Whether an alert record's plaintext ends the stream (close_notify);
/// a warning the stream goes on after is `false`, any other alert an
/// error that names it.
fn alert_closes(alert: &[u8]) -> io::Result<bool> {
    match *alert {
        // close_notify: the end of the stream.
        [_, 0] => Ok(true),
        // user_canceled: a warning, close_notify follows.
        [_, 90] => Ok(false),
        [_, d] => Err(rustls_io(RustlsError::AlertReceived(
            rustls::AlertDescription::from(d),
        ))),
        _ => Err(invalid("malformed TLS alert")),
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

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use rustls::client::{ClientSessionMemoryCache, ClientSessionStore};
    use tokio::io::{AsyncWriteExt, DuplexStream, ReadHalf};

    use super::*;
    use crate::{
        tls_read::tests::{
            LIMIT, SUITES, chunks_n, configs, halves, name, ours, pair, payload, with_rustls,
        },
        tls_record::MAX_RECORD,
    };

    #[test]
    fn a_read_has_room_for_its_whole_record_and_half_a_read_more() {
        // An empty buffer of no capacity: a full read's worth.
        assert_eq!(to_reserve(0, 0, None), Some(READ_SIZE));
        // Room enough already: nothing.
        assert_eq!(to_reserve(100, READ_SIZE, None), None);
        assert_eq!(to_reserve(0, READ_SIZE / 2, None), None);
        assert_eq!(to_reserve(0, READ_SIZE / 2 - 1, None), Some(READ_SIZE));
        assert_eq!(
            to_reserve(1000, 1000 + READ_SIZE / 2 - 1, None),
            Some(READ_SIZE)
        );
        // A partial header still gets half a read beyond what is held.
        assert_eq!(to_reserve(3, 10, None), Some(READ_SIZE));
        for len in [
            0,
            1,
            HEADER_LEN,
            1000,
            MAX_RECORD - 1,
            READ_SIZE,
            3 * READ_SIZE,
        ] {
            for want in [None, Some(HEADER_LEN + 1), Some(MAX_RECORD)] {
                for capacity in [len, len + 1, len + READ_SIZE / 2, len + MAX_RECORD] {
                    let grown = capacity.max(len + to_reserve(len, capacity, want).unwrap_or(0));
                    let whole = want.unwrap_or(HEADER_LEN);
                    assert!(grown >= whole, "{len} {capacity} {want:?}");
                    assert!(grown >= len + READ_SIZE / 2, "{len} {capacity} {want:?}");
                    if let Some(more) = to_reserve(len, capacity, want) {
                        assert!(more >= READ_SIZE, "grows by at least a read");
                    }
                }
            }
        }
    }

    #[test]
    fn post_handshake_messages_are_whole_and_key_updates_end_their_record() {
        let update = |asked: u8| [KEY_UPDATE, 0, 0, 1, asked];
        assert_eq!(
            post_handshake_message(&update(0), Role::Server).unwrap(),
            (PostHandshake::KeyUpdate { asked: false }, &[][..])
        );
        assert_eq!(
            post_handshake_message(&update(1), Role::Client).unwrap(),
            (PostHandshake::KeyUpdate { asked: true }, &[][..])
        );
        // Two tickets in one record: one at a time, the rest after.
        let two = [
            NEW_SESSION_TICKET,
            0,
            0,
            2,
            7,
            8,
            NEW_SESSION_TICKET,
            0,
            0,
            0,
        ];
        let (first, rest) = post_handshake_message(&two, Role::Client).unwrap();
        assert_eq!(first, PostHandshake::Ticket(&[7, 8]));
        assert_eq!(
            post_handshake_message(rest, Role::Client).unwrap(),
            (PostHandshake::Ticket(&[]), &[][..])
        );
        let err = |msg: &[u8], role| post_handshake_message(msg, role).unwrap_err().to_string();
        // Cut anywhere inside its header or body.
        for cut in 1..two.len() / 2 {
            assert_eq!(
                err(&two[..cut], Role::Client),
                "a post-handshake TLS message split across records"
            );
        }
        // A key update followed by anything, or not one byte of 0 or 1.
        let mut then = update(0).to_vec();
        then.extend_from_slice(&update(0));
        assert_eq!(err(&then, Role::Client), "malformed TLS key update");
        assert_eq!(err(&update(2), Role::Client), "malformed TLS key update");
        assert_eq!(
            err(&[KEY_UPDATE, 0, 0, 2, 0, 0], Role::Client),
            "malformed TLS key update"
        );
        // A server takes no tickets; no other message is expected.
        assert_eq!(
            err(&two[..6], Role::Server),
            "unexpected post-handshake TLS message of type 4"
        );
        assert_eq!(
            err(&[1, 0, 0, 0], Role::Client),
            "unexpected post-handshake TLS message of type 1"
        );
    }

    #[test]
    fn close_notify_ends_the_stream_user_canceled_does_not_and_others_are_errors() {
        assert!(alert_closes(&[1, 0]).unwrap());
        assert!(!alert_closes(&[1, 90]).unwrap());
        let fatal = alert_closes(&[2, 20]).unwrap_err().to_string();
        assert!(fatal.contains("BadRecordMac"), "{fatal}");
        for malformed in [&[][..], &[1], &[1, 0, 0]] {
            let e = alert_closes(malformed).unwrap_err().to_string();
            assert_eq!(e, "malformed TLS alert");
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
