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
//!   handling it, up to a byte bound for messages to entities (past it
//!   they are dropped and counted, as a moving shard's buffer does).
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

#[cfg(test)]
mod tests {
    use super::*;

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
