//! A region that did not run for longer than the downing strategy gives a
//! silent member holds its deliveries until it has heard whether it is
//! still a member, sans-IO.
//!
//! A process that was stopped (SIGSTOP, a VM paused, a long GC-like stall
//! of the whole runtime) resumes with messages that reached its sockets
//! while it stood still. The other members may have downed it meanwhile
//! and, after the down-removal margin, started its shards elsewhere; until
//! this node hears so (its probes go out again and are answered with its
//! verdict: 0.1 to 0.7 s after SIGCONT at a 200 ms probe period in the
//! namespace tests), handling those messages would run an entity on two
//! nodes at once.
//!
//! # The rule
//! - Every turn of the region notes the time. A turn that finds the last
//!   one longer ago than the cluster's `stable_after` (the least time
//!   after which the others may down a silent member; at least three of
//!   the region's ticks) starts a hold of as long: nothing could have
//!   been taken over by a shorter gap, and a node that was downed hears
//!   so within a few probe periods, far less than `stable_after`.
//! - While the hold lasts, the region keeps what it is sent (messages for
//!   entities and the shard protocol alike, in arrival order) instead of
//!   handling it ([`Kept`]): messages to entities up to a byte bound,
//!   protocol messages up to a count; past either they are dropped and
//!   counted, as a moving shard's buffer does.
//! - When the hold ends, what was kept is handled in order: by a node
//!   that learned meanwhile that it is down (its fence is up) as dead
//!   letters, by a member as if it had just arrived.
//!
//! ```text
//!   turn(now) ── now - last > stable_after ──► hold until now + stable_after
//!      │                                            │ turns before it: keep
//!      ▼ otherwise                                  ▼ first turn after it
//!   handle                                       handle what was kept, in order
//! ```
//!
//! What this cannot fence: messages already in an entity's own mailbox
//! when the process stopped, which the entity handles as soon as it runs
//! again. A lease checked per message would.

use std::time::{Duration, Instant};

use super::outbox::{Budget, Kind};

/// What a region does with the message of this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Handle it.
    Handle,
    /// Keep it: a hold is on.
    Keep,
    /// The hold just ended: handle what was kept, then this one.
    Release,
}

/// The pause detector and its hold (see the module docs).
#[derive(Debug)]
pub(crate) struct PauseGuard {
    last: Instant,
    until: Option<Instant>,
    /// Gaps longer than this start a hold: the cluster's `stable_after`.
    pause: Duration,
    /// How long a hold lasts.
    settle: Duration,
}

impl PauseGuard {
    pub(crate) fn new(now: Instant, pause: Duration, settle: Duration) -> Self {
        Self {
            last: now,
            until: None,
            pause,
            settle,
        }
    }

    /// A turn of the region at `now`; returns the gap that started a hold,
    /// if this turn started one, beside what to do.
    pub(crate) fn turn(&mut self, now: Instant) -> (Turn, Option<Duration>) {
        let gap = now.saturating_duration_since(self.last);
        self.last = now;
        if gap > self.pause {
            self.until = Some(now + self.settle);
            return (Turn::Keep, Some(gap));
        }
        match self.until {
            Some(until) if now < until => (Turn::Keep, None),
            Some(_) => {
                self.until = None;
                (Turn::Release, None)
            }
            None => (Turn::Handle, None),
        }
    }

    /// Whether a hold is on.
    #[cfg(test)]
    pub(crate) fn holding(&self) -> bool {
        self.until.is_some()
    }
}

/// What a hold keeps, in arrival order, and its bounds: messages for
/// entities by bytes (an outbox's [`Budget`]: past it they are refused,
/// and the region drops and counts them), the shard protocol's by count
/// (a peer's requests and markers cannot pile up without limit either;
/// one refused is dropped and counted, and its sender asks again after
/// `handoff_timeout`).
#[derive(Debug)]
pub(crate) struct Kept<T> {
    items: Vec<T>,
    bytes: Budget,
    protocol: usize,
    max_protocol: usize,
}

impl<T> Kept<T> {
    pub(crate) fn new(bytes: usize, max_protocol: usize) -> Self {
        Self {
            items: Vec::new(),
            bytes: Budget::new(bytes),
            protocol: 0,
            max_protocol,
        }
    }

    /// A region's: `bytes` for messages to entities, and a few protocol
    /// messages per shard from each of a handful of regions while views
    /// change (a request, its answer, a release marker), with room to
    /// spare.
    pub(crate) fn for_region(bytes: usize, shards: u32) -> Self {
        Self::new(bytes, 64 + 8 * shards as usize)
    }

    /// Keeps `item` of `kind`, `bytes` in size; gives it back if a bound
    /// refuses it.
    pub(crate) fn keep(&mut self, item: T, kind: Kind, bytes: usize) -> Result<(), T> {
        if kind == Kind::Protocol {
            if self.protocol >= self.max_protocol {
                return Err(item);
            }
            self.protocol += 1;
        } else if !self.bytes.take(kind, bytes) {
            return Err(item);
        }
        self.items.push(item);
        Ok(())
    }

    /// Everything kept, in order; the bounds start again.
    pub(crate) fn take(&mut self) -> Vec<T> {
        self.bytes.release(self.bytes.used());
        self.protocol = 0;
        std::mem::take(&mut self.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_refuses_past_its_bounds_and_starts_again_once_taken() {
        let mut k = Kept::new(100, 2);
        assert_eq!(k.keep("a", Kind::User, 60), Ok(()));
        assert_eq!(k.keep("b", Kind::User, 41), Err("b"), "past the bytes");
        assert_eq!(k.keep("p", Kind::Protocol, 1_000), Ok(()), "not by bytes");
        assert_eq!(k.keep("q", Kind::Protocol, 1), Ok(()));
        assert_eq!(k.keep("r", Kind::Protocol, 1), Err("r"), "past the count");
        assert_eq!(k.keep("c", Kind::User, 40), Ok(()), "exactly at the bound");
        assert_eq!(k.take(), vec!["a", "p", "q", "c"], "in arrival order");
        assert_eq!(k.keep("d", Kind::User, 100), Ok(()));
        assert_eq!(k.keep("s", Kind::Protocol, 1), Ok(()));
    }

    const PAUSE: Duration = Duration::from_secs(3);
    const SETTLE: Duration = Duration::from_millis(400);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn turns_closer_than_stable_after_are_handled() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0, PAUSE, SETTLE);
        for i in 1..=100 {
            assert_eq!(g.turn(t0 + ms(100 * i)), (Turn::Handle, None));
        }
        // A gap of exactly stable_after: nobody can have taken over.
        assert_eq!(g.turn(t0 + ms(10_000) + PAUSE), (Turn::Handle, None));
        assert!(!g.holding());
    }

    #[test]
    fn a_gap_past_stable_after_holds_for_settle_then_releases_once() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0, PAUSE, SETTLE);
        let woke = t0 + ms(6_700);
        assert_eq!(g.turn(woke), (Turn::Keep, Some(ms(6_700))));
        assert!(g.holding());
        assert_eq!(g.turn(woke + ms(1)), (Turn::Keep, None));
        assert_eq!(g.turn(woke + ms(399)), (Turn::Keep, None));
        assert_eq!(g.turn(woke + SETTLE), (Turn::Release, None));
        assert!(!g.holding());
        assert_eq!(g.turn(woke + SETTLE + ms(1)), (Turn::Handle, None));
    }

    #[test]
    fn a_second_pause_during_a_hold_starts_it_again() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0, PAUSE, SETTLE);
        assert_eq!(g.turn(t0 + ms(4_000)).0, Turn::Keep);
        let again = t0 + ms(8_000);
        assert_eq!(g.turn(again), (Turn::Keep, Some(ms(4_000))));
        assert_eq!(g.turn(again + ms(399)).0, Turn::Keep);
        assert_eq!(g.turn(again + SETTLE).0, Turn::Release);
    }
}
