//! Buffer recycling.
//!
//! Each connection's writer ping-pongs two `BytesMut`s (one filling under the
//! senders, one being written), so the steady state allocates nothing. The
//! pool hands those buffers out when a connection starts and takes them back
//! when it ends, so reconnects and short-lived connections do not allocate
//! either. Buffers that grew very large are not retained, so one huge burst
//! does not pin memory forever.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::BytesMut;

/// How many idle buffers a pool keeps. Two per connection for 32
/// connections; beyond that buffers are freed.
pub(crate) const MAX_POOLED_BUFFERS: usize = 64;

/// A shared pool of `BytesMut` write buffers; cheap to clone.
#[derive(Debug, Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    buffers: Mutex<Vec<BytesMut>>,
    buffer_size: usize,
    max_retained: usize,
}

impl BufferPool {
    /// A pool of buffers of `buffer_size` initial capacity. Returned buffers
    /// whose capacity grew beyond `max_retained` bytes are dropped.
    pub fn new(buffer_size: usize, max_retained: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                buffers: Mutex::new(Vec::with_capacity(MAX_POOLED_BUFFERS)),
                buffer_size,
                max_retained: max_retained.max(buffer_size),
            }),
        }
    }

    /// An empty buffer with at least the pool's buffer size of capacity.
    pub fn get(&self) -> BytesMut {
        let reused = self
            .inner
            .buffers
            .lock()
            // A panic while holding this lock cannot leave the Vec invalid.
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        reused.unwrap_or_else(|| BytesMut::with_capacity(self.inner.buffer_size))
    }

    /// Returns a buffer; it is cleared and kept if the pool has room and the
    /// buffer is neither shared nor oversized.
    pub fn put(&self, mut buf: BytesMut) {
        buf.clear();
        // `try_reclaim` makes sure the capacity is ours alone (not held by
        // outstanding `Bytes`), otherwise reuse would allocate anyway.
        if buf.capacity() > self.inner.max_retained || !buf.try_reclaim(self.inner.buffer_size) {
            return;
        }
        let mut buffers = self
            .inner
            .buffers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if buffers.len() < MAX_POOLED_BUFFERS {
            buffers.push(buf);
        }
    }

    /// Idle buffers held.
    pub fn idle(&self) -> usize {
        self.inner
            .buffers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The size of the next socket read, adapting to how full reads come back,
/// like hyper's `ReadStrategy::Adaptive`: a read that fills the request
/// doubles the next (up to `max`), two reads under half of it halve it
/// (down to `min`).
#[derive(Debug, Clone)]
pub(crate) struct ReadSize {
    next: usize,
    min: usize,
    max: usize,
    shrink_pending: bool,
}

impl ReadSize {
    /// Starts at `initial`, adapting between `initial` and `max`.
    pub(crate) fn new(initial: usize, max: usize) -> Self {
        Self {
            next: initial,
            min: initial,
            max: max.max(initial),
            shrink_pending: false,
        }
    }

    /// Bytes to ask for in the next read.
    pub(crate) fn next(&self) -> usize {
        self.next
    }

    /// Records that a read returned `n` bytes.
    pub(crate) fn record(&mut self, n: usize) {
        if n >= self.next {
            self.next = (self.next * 2).min(self.max);
            self.shrink_pending = false;
        } else if n < self.next / 2 {
            if self.shrink_pending {
                self.next = (self.next / 2).max(self.min);
                self.shrink_pending = false;
            } else {
                self.shrink_pending = true;
            }
        } else {
            self.shrink_pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn reuses_buffers() {
        let pool = BufferPool::new(1024, 4096);
        let mut b = pool.get();
        b.put_slice(&[1; 100]);
        let ptr = b.as_ptr();
        pool.put(b);
        assert_eq!(pool.idle(), 1);
        let b = pool.get();
        assert!(b.is_empty());
        assert_eq!(b.as_ptr(), ptr);
    }

    #[test]
    fn drops_oversized_and_shared() {
        let pool = BufferPool::new(1024, 4096);
        pool.put(BytesMut::with_capacity(10_000));
        assert_eq!(pool.idle(), 0);
        let mut b = pool.get();
        b.put_slice(&[1; 100]);
        let held = b.split_to(50).freeze();
        pool.put(b);
        assert_eq!(pool.idle(), 0, "memory still referenced by a Bytes");
        drop(held);
    }

    #[test]
    fn read_size_adapts() {
        let mut r = ReadSize::new(1000, 8000);
        r.record(1000);
        assert_eq!(r.next(), 2000);
        r.record(2000);
        r.record(4000);
        r.record(8000);
        assert_eq!(r.next(), 8000);
        r.record(10);
        assert_eq!(r.next(), 8000, "one short read is not enough");
        r.record(10);
        assert_eq!(r.next(), 4000);
        for _ in 0..10 {
            r.record(1);
        }
        assert_eq!(r.next(), 1000);
    }
}
