//! The reader's and writer's halves of a TLS stream, and reads that hand
//! out rustls's own plaintext buffer.
//!
//! Not to be confused with `tokio::io::split`, which plaintext connections
//! use: that one only reads with `poll_read`. rustls keeps each record's
//! plaintext in a buffer of its own; reading with `poll_read` copies it
//! into the reader's buffer, one more copy of every byte after rustls's
//! own. [`TlsReadHalf`] implements [`ReadIo::poll_chunk`] with
//! `AsyncBufRead::poll_fill_buf`, so the reader parses frames in place in
//! rustls's buffer and copies only a frame that a record boundary cuts in
//! two. Like `tokio::io::split`, both halves share the stream under a
//! mutex held for one poll at a time (lock order: this stream lock, then
//! the out-queue lock, which a handler reached from `poll_chunk` may take).
use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

use crate::reader::ReadIo;

/// The reader's half of a TLS stream: reads lend rustls's buffer.
#[derive(Debug)]
pub struct TlsReadHalf<T> {
    inner: Arc<Mutex<T>>,
}

/// The writer's half of a TLS stream.
#[derive(Debug)]
pub struct TlsWriteHalf<T> {
    inner: Arc<Mutex<T>>,
}

/// Splits `stream` into halves that lock it for one poll at a time.
pub(crate) fn split_tls<T>(stream: T) -> (TlsReadHalf<T>, TlsWriteHalf<T>) {
    let inner = Arc::new(Mutex::new(stream));
    (
        TlsReadHalf {
            inner: inner.clone(),
        },
        TlsWriteHalf { inner },
    )
}

fn with<T: Unpin, R>(inner: &Mutex<T>, f: impl FnOnce(Pin<&mut T>) -> R) -> R {
    // A poll that panicked left the stream as it was between two polls.
    let mut guard = inner.lock().unwrap_or_else(PoisonError::into_inner);
    f(Pin::new(&mut *guard))
}

impl<T: AsyncRead + Unpin> AsyncRead for TlsReadHalf<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        with(&self.inner, |s| s.poll_read(cx, buf))
    }
}

impl<T: AsyncBufRead + Unpin + Send + 'static> ReadIo for TlsReadHalf<T> {
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

impl<T: AsyncWrite + Unpin> AsyncWrite for TlsWriteHalf<T> {
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
