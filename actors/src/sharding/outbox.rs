//! The byte bound of a region's outbox to another region, sans-IO.
//!
//! A region forwards messages for shards it does not hold to their
//! owner's region through one ordered queue per region, drained by a task
//! that waits for room at the other end (the recipient's window). A
//! region that is slow, or whose link stalls, would let that queue grow
//! without limit while peers keep sending here; [`Budget`] bounds it by
//! the bytes it holds.
//!
//! # The rule
//! - A user message ([`Kind::User`]) is taken only while the queue holds
//!   at most `limit` bytes with it; past that it is refused (the region
//!   drops it, counts it, and logs a dead letter `buffer_full`).
//! - A protocol message ([`Kind::Protocol`]: a shard request, a release
//!   marker, a retirement) is always taken: dropping one would hold a
//!   shard move up until a retry, or for ever for a marker that orders a
//!   sender's messages. They are few (a handful per shard move) and
//!   small, and they count towards the bytes held, so user messages make
//!   room for them.
//! - The drain task gives the bytes back once the message is handed to
//!   the link (whose own queue is bounded), sent or not.
//!
//! ```text
//!  region ── take(kind, bytes) ──► queue ── send().await ──► release(bytes)
//!              │ user, over limit
//!              ▼
//!           refused: dropped, counted
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};

/// What a queued message is, for [`Budget::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A user message for an entity: may be refused.
    User,
    /// The shard protocol: never refused.
    Protocol,
}

/// The bytes one outbox holds, and its bound. Shared by the region (which
/// takes) and the outbox's drain task (which releases).
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    /// A budget of `limit` bytes (at least 1; the settings check it).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes` for a message of `kind`; false, and nothing taken,
    /// for a user message that would bring the bytes held past the bound.
    pub(crate) fn take(&self, kind: Kind, bytes: usize) -> bool {
        let limit = self.limit;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let after = used.saturating_add(bytes);
                (kind == Kind::Protocol || after <= limit).then_some(after)
            })
            .is_ok()
    }

    /// Gives back `bytes` taken before (the message left the queue).
    pub(crate) fn release(&self, bytes: usize) {
        // Never below zero: only what was taken is released.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// The bytes held now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_messages_are_refused_past_the_bound_and_nothing_is_taken_for_them() {
        let b = Budget::new(100);
        assert!(b.take(Kind::User, 60));
        assert!(b.take(Kind::User, 40), "exactly at the bound is taken");
        assert!(!b.take(Kind::User, 1));
        assert_eq!(b.used(), 100, "a refusal takes nothing");
        // A message larger than the whole bound never fits.
        let empty = Budget::new(100);
        assert!(!empty.take(Kind::User, 101));
        assert_eq!(empty.used(), 0);
    }

    #[test]
    fn protocol_messages_are_always_taken_and_count_towards_the_bound() {
        let b = Budget::new(100);
        assert!(b.take(Kind::User, 100));
        assert!(b.take(Kind::Protocol, 64), "past the bound, still taken");
        assert_eq!(b.used(), 164);
        b.release(100);
        // The protocol message's bytes are still held: a user message must
        // fit next to them.
        assert!(!b.take(Kind::User, 50));
        assert!(b.take(Kind::User, 36));
        assert_eq!(b.used(), 100);
    }

    #[test]
    fn released_bytes_make_room_again() {
        let b = Budget::new(10);
        for _ in 0..10 {
            assert!(b.take(Kind::User, 1));
        }
        assert!(!b.take(Kind::User, 1));
        b.release(3);
        assert_eq!(b.used(), 7);
        assert!(b.take(Kind::User, 3));
        assert!(!b.take(Kind::User, 1));
        // Releasing more than is held stops at zero.
        b.release(1000);
        assert_eq!(b.used(), 0);
    }
}
