//! Reliable delivery of system messages: the sans-IO bookkeeping that
//! delivers them exactly once, in order, across reconnects.
//!
//! ```text
//!  sender (SysOut)                                 receiver (SysIn)
//!  push(body) → seq n, kept until acked ── Reliable{epoch, n, body} ──► n == expected: deliver, ack n
//!                                                                     n <  expected: duplicate, ack again
//!  handle_ack(epoch, n): drop ≤ n  ◄──────────── Ack{epoch, n} ─────── n >  expected: gap, ignore
//!  on reconnect / timer: resend all unacked                           new (uid, epoch) starting at 1: reset
//!  reset(): epoch + 1, seq from 1 (after quarantine or unreachable)
//! ```
//!
//! The buffer is bounded: a push beyond its capacity is refused, and the
//! association quarantines the peer (a peer that acknowledges nothing for
//! that long is not coming back in a state we can trust).

use std::collections::VecDeque;

use bytes::Bytes;

/// Outbound half of reliable system-message delivery to one peer.
#[derive(Debug)]
pub(crate) struct SysOut {
    epoch: u64,
    next_seq: u64,
    unacked: VecDeque<(u64, Bytes)>,
    capacity: usize,
}

/// The system-message buffer is full: the peer must be quarantined.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Overflow {
    pub(crate) capacity: usize,
}

impl SysOut {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            epoch: 1,
            next_seq: 1,
            unacked: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Buffers `body` and returns its sequence number.
    pub(crate) fn push(&mut self, body: Bytes) -> Result<u64, Overflow> {
        if self.unacked.len() >= self.capacity {
            return Err(Overflow {
                capacity: self.capacity,
            });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.unacked.push_back((seq, body));
        Ok(seq)
    }

    /// The receiver has everything up to `seq` of `epoch`.
    pub(crate) fn handle_ack(&mut self, epoch: u64, seq: u64) {
        if epoch != self.epoch {
            return;
        }
        while self.unacked.front().is_some_and(|(s, _)| *s <= seq) {
            self.unacked.pop_front();
        }
    }

    /// Everything not yet acknowledged, oldest first (to resend).
    pub(crate) fn unacked(&self) -> impl Iterator<Item = &(u64, Bytes)> {
        self.unacked.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.unacked.len()
    }

    /// Drops what is buffered and starts a new epoch; returns how many
    /// messages were dropped.
    pub(crate) fn reset(&mut self) -> usize {
        let dropped = self.unacked.len();
        self.unacked.clear();
        self.epoch += 1;
        self.next_seq = 1;
        dropped
    }
}

/// What the receiver does with one reliable message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Receive {
    /// Deliver it, then acknowledge `seq`.
    Deliver,
    /// Already delivered: acknowledge `seq` again, do not deliver.
    Duplicate(u64),
    /// Out of order (a gap) or from a stale stream: drop, do not ack.
    Ignore,
}

/// Inbound half: what has been delivered from one peer.
#[derive(Debug, Default)]
pub(crate) struct SysIn {
    /// `(peer uid, epoch)` of the stream being received.
    stream: Option<(u64, u64)>,
    /// The next sequence number to deliver.
    expected: u64,
}

impl SysIn {
    /// Forgets the stream under way unless it is incarnation `uid`'s (the
    /// node, proven to be `uid` now).
    pub(crate) fn forget_other(&mut self, uid: u64) {
        if matches!(self.stream, Some((u, _)) if u != uid) {
            self.stream = None;
        }
    }

    /// One reliable message, number `seq` of stream `epoch` of incarnation
    /// `uid`. A message that would start a new stream is refused from a
    /// connection whose claim is not `proven` when another incarnation's
    /// stream is under way: only a proven connection may end it.
    pub(crate) fn handle(&mut self, uid: u64, epoch: u64, seq: u64, proven: bool) -> Receive {
        if self.stream != Some((uid, epoch)) {
            let other = matches!(self.stream, Some((u, _)) if u != uid);
            if seq != 1 || (other && !proven) {
                return Receive::Ignore;
            }
            self.stream = Some((uid, epoch));
            self.expected = 1;
        }
        if seq == self.expected {
            self.expected += 1;
            Receive::Deliver
        } else if seq < self.expected {
            Receive::Duplicate(self.expected - 1)
        } else {
            Receive::Ignore
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn messages_resent_after_a_reconnect_are_delivered_once_in_order() {
        let mut out = SysOut::new(16);
        let mut inn = SysIn::default();
        let (s1, s2, s3) = (
            out.push(b("w1")).unwrap(),
            out.push(b("w2")).unwrap(),
            out.push(b("t1")).unwrap(),
        );
        // First link: 1 and 2 arrive, the ack of 2 is lost, then it drops.
        assert_eq!(inn.handle(7, out.epoch(), s1, true), Receive::Deliver);
        assert_eq!(inn.handle(7, out.epoch(), s2, true), Receive::Deliver);
        out.handle_ack(out.epoch(), s1);
        // Second link: everything unacked is resent.
        let resent: Vec<u64> = out.unacked().map(|(s, _)| *s).collect();
        assert_eq!(resent, vec![s2, s3]);
        let mut delivered = Vec::new();
        for s in resent {
            match inn.handle(7, out.epoch(), s, true) {
                Receive::Deliver => delivered.push(s),
                Receive::Duplicate(acked) => out.handle_ack(out.epoch(), acked),
                Receive::Ignore => panic!("no gap"),
            }
        }
        assert_eq!(delivered, vec![s3]);
        out.handle_ack(out.epoch(), s3);
        assert_eq!(out.len(), 0);
    }

    #[test]
    fn a_gap_is_ignored_until_filled() {
        let mut inn = SysIn::default();
        assert_eq!(inn.handle(1, 1, 1, true), Receive::Deliver);
        assert_eq!(inn.handle(1, 1, 3, true), Receive::Ignore);
        assert_eq!(inn.handle(1, 1, 2, true), Receive::Deliver);
        assert_eq!(inn.handle(1, 1, 3, true), Receive::Deliver);
    }

    #[test]
    fn a_new_epoch_or_incarnation_restarts_the_stream() {
        let mut inn = SysIn::default();
        assert_eq!(inn.handle(1, 1, 1, true), Receive::Deliver);
        assert_eq!(inn.handle(1, 1, 2, true), Receive::Deliver);
        // The sender reset (new epoch): only seq 1 may start it.
        assert_eq!(inn.handle(1, 2, 2, true), Receive::Ignore);
        assert_eq!(inn.handle(1, 2, 1, true), Receive::Deliver);
        // A restarted sender (new uid) starts at 1 again.
        assert_eq!(inn.handle(9, 1, 1, true), Receive::Deliver);
        // The old stream is over.
        assert_eq!(inn.handle(1, 2, 2, true), Receive::Ignore);
        // An unproven claim of another incarnation cannot restart it...
        assert_eq!(inn.handle(5, 1, 1, false), Receive::Ignore);
        // ...until the node is proven to be that incarnation.
        inn.forget_other(9);
        assert_eq!(inn.handle(5, 1, 1, false), Receive::Ignore, "9 is the node");
        assert_eq!(
            inn.handle(9, 1, 2, false),
            Receive::Deliver,
            "its own stream"
        );
        assert_eq!(
            inn.handle(9, 2, 1, false),
            Receive::Deliver,
            "its own new epoch"
        );
        inn.forget_other(5);
        assert_eq!(inn.handle(5, 1, 1, false), Receive::Deliver);
    }

    #[test]
    fn the_buffer_is_bounded_and_stale_acks_are_ignored() {
        let mut out = SysOut::new(2);
        out.push(b("a")).unwrap();
        out.push(b("b")).unwrap();
        assert_eq!(out.push(b("c")), Err(Overflow { capacity: 2 }));
        let old = out.epoch();
        assert_eq!(out.reset(), 2);
        out.push(b("d")).unwrap();
        out.handle_ack(old, 5);
        assert_eq!(out.len(), 1);
    }
}
