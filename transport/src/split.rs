//! The reader's and writer's halves of a TLS stream, and reads that hand
//! out the stream's own plaintext buffer.
//!
//! rustls keeps each record's plaintext in a buffer of its own; reading
//! with `poll_read` copies it into the reader's buffer, one more copy of
//! every byte after rustls's own. With [`ReadIo::poll_chunk`] the reader
//! parses frames in place in rustls's buffer and copies only a frame that
//! a record boundary cuts in two. Like `tokio::io::split`, both halves
//! share the stream under a mutex held for one poll at a time.

use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

/// What the reader task reads from.
pub trait ReadIo: AsyncRead + Unpin + Send + 'static {
    /// Reads come as chunks of the stream's own buffer
    /// ([`poll_chunk`](Self::poll_chunk)) instead of `poll_read`.
    const CHUNKED: bool = false;

    /// Waits for buffered data, hands it to `f` and consumes all of it;
    /// `Ok(None)` at end of stream. Only for `CHUNKED` streams; others
    /// answer with an error.
    fn poll_chunk<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Poll<io::Result<Option<R>>> {
        let _ = (cx, f);
        Poll::Ready(Err(io::Error::other("this stream reads with poll_read")))
    }
}

impl<T: AsyncRead + Send + 'static> ReadIo for tokio::io::ReadHalf<T> {}

/// The reader's half.
#[derive(Debug)]
pub struct ReadHalf<T> {
    inner: Arc<Mutex<T>>,
}

/// The writer's half.
#[derive(Debug)]
pub struct WriteHalf<T> {
    inner: Arc<Mutex<T>>,
}

/// Splits `stream` into halves that lock it for one poll at a time.
pub(crate) fn split<T>(stream: T) -> (ReadHalf<T>, WriteHalf<T>) {
    let inner = Arc::new(Mutex::new(stream));
    (
        ReadHalf {
            inner: inner.clone(),
        },
        WriteHalf { inner },
    )
}

fn with<T: Unpin, R>(inner: &Mutex<T>, f: impl FnOnce(Pin<&mut T>) -> R) -> R {
    // A poll that panicked left the stream as it was between two polls.
    let mut guard = inner.lock().unwrap_or_else(PoisonError::into_inner);
    f(Pin::new(&mut *guard))
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadHalf<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        with(&self.inner, |s| s.poll_read(cx, buf))
    }
}

impl<T: AsyncBufRead + Unpin + Send + 'static> ReadIo for ReadHalf<T> {
    const CHUNKED: bool = true;

    fn poll_chunk<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Poll<io::Result<Option<R>>> {
        with(&self.inner, |mut s| {
            let chunk = match s.as_mut().poll_fill_buf(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(chunk)) => chunk,
            };
            if chunk.is_empty() {
                return Poll::Ready(Ok(None));
            }
            let n = chunk.len();
            let out = f(chunk);
            s.consume(n);
            Poll::Ready(Ok(Some(out)))
        })
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteHalf<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        with(&self.inner, |s| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with(&self.inner, |s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with(&self.inner, |s| s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        with(&self.inner, |s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        with(&self.inner, |s| s.is_write_vectored())
    }
}
