//! The buffer a [`SingletonRef`](super::SingletonRef) holds messages in
//! while no instance is known: bounded by bytes, delivered in order,
//! and kept in order when delivery stalls. Pure: the ref measures each
//! message and does the sending.

use std::collections::VecDeque;

/// Messages waiting for an instance, each with its counted size, at
/// most `limit` bytes in all.
#[derive(Debug)]
pub(super) struct Buffer<M> {
    items: VecDeque<(M, usize)>,
    bytes: usize,
    limit: usize,
}

impl<M> Buffer<M> {
    /// An empty buffer of at most `limit` bytes.
    pub(super) fn new(limit: usize) -> Self {
        Self {
            items: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    /// Holds `msg`, counted as `size` bytes, behind the others; gives it
    /// back if it would take the buffer past its limit.
    pub(super) fn push(&mut self, msg: M, size: usize) -> Result<(), M> {
        if self.bytes.saturating_add(size) > self.limit {
            return Err(msg);
        }
        self.bytes += size;
        self.items.push_back((msg, size));
        Ok(())
    }

    /// Hands the messages to `send` in order until it gives one back (a
    /// full mailbox or link: the message goes back to the front, to be
    /// delivered first next time) or the buffer is empty; whether it
    /// stalled. A message `send` takes is gone from the buffer, whether
    /// it was delivered or dropped.
    pub(super) fn deliver(&mut self, mut send: impl FnMut(M) -> Result<(), M>) -> bool {
        while let Some((msg, size)) = self.items.pop_front() {
            match send(msg) {
                Ok(()) => self.bytes -= size,
                Err(msg) => {
                    self.items.push_front((msg, size));
                    return true;
                }
            }
        }
        false
    }

    /// The bytes held, as counted.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most bytes it holds.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// How many messages it holds.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none.
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_past_the_limit_comes_back_and_the_rest_still_fit() {
        let mut b = Buffer::new(10);
        assert_eq!(b.push("a", 6), Ok(()));
        assert_eq!(b.push("b", 5), Err("b"));
        assert_eq!(b.push("c", 4), Ok(()));
        assert_eq!((b.len(), b.bytes()), (2, 10));
        // A message larger than the whole buffer never fits.
        let mut empty = Buffer::new(3);
        assert_eq!(empty.push("d", 4), Err("d"));
        assert!(empty.is_empty());
    }

    #[test]
    fn delivery_is_in_order_and_a_stall_keeps_the_message_first() {
        let mut b = Buffer::new(100);
        for (m, size) in [(1, 10), (2, 20), (3, 30)] {
            b.push(m, size).expect("fits");
        }
        let mut got = Vec::new();
        // The second is refused (a full mailbox): it stays first.
        let stalled = b.deliver(|m| {
            if m == 2 {
                Err(m)
            } else {
                got.push(m);
                Ok(())
            }
        });
        assert!(stalled);
        assert_eq!(got, [1]);
        assert_eq!((b.len(), b.bytes()), (2, 50));
        let stalled = b.deliver(|m| {
            got.push(m);
            Ok(())
        });
        assert!(!stalled);
        assert_eq!(got, [1, 2, 3]);
        assert_eq!((b.len(), b.bytes()), (0, 0));
        assert!(!b.deliver(Err), "nothing to deliver: no stall");
    }
}
