//! The rule that closes a connection whose peer keeps sending malformed
//! input; pure, time passed in.
//!
//! Every malformed envelope or system message is a dead letter and costs a
//! (sampled) log line, so a peer that keeps sending garbage is broken or
//! hostile. Malformed input is counted in windows of [`MALFORMED_WINDOW`]:
//! a window starts with the first malformed input after the last one ended,
//! and once a window holds more than the limit
//! ([`SystemConfig::set_max_malformed_per_second`](crate::SystemConfig::set_max_malformed_per_second))
//! the connection is aborted.
//!
//! ```text
//!   malformed at t ──► t within the window? ──no──► window starts at t, count 1
//!                             │ yes
//!                             ▼
//!                          count + 1
//!                             │
//!                  count > max? ──yes──► over the limit: abort
//! ```

use std::time::{Duration, Instant};

/// The window over which malformed envelopes are counted against
/// [`SystemConfig::set_max_malformed_per_second`](crate::SystemConfig::set_max_malformed_per_second).
pub(super) const MALFORMED_WINDOW: Duration = Duration::from_secs(1);

/// Malformed input of one connection in the current window.
#[derive(Debug)]
pub(super) struct MalformedLimit {
    /// `SystemConfig::set_max_malformed_per_second`.
    max: usize,
    count: usize,
    /// When the current window started; `None` before the first.
    since: Option<Instant>,
}

impl MalformedLimit {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            count: 0,
            since: None,
        }
    }

    /// The most malformed inputs a window may hold.
    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Counts one malformed input at `now`: the count within its window if
    /// that is over the limit (every later one in the window is too).
    pub(super) fn hit(&mut self, now: Instant) -> Option<usize> {
        match self.since {
            Some(t) if now.duration_since(t) < MALFORMED_WINDOW => self.count += 1,
            _ => {
                self.since = Some(now);
                self.count = 1;
            }
        }
        (self.count > self.max).then_some(self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn more_than_the_limit_within_a_window_is_over_it() {
        let t0 = Instant::now();
        let mut limit = MalformedLimit::new(2);
        assert_eq!(limit.hit(t0), None);
        assert_eq!(limit.hit(t0 + 500 * MS), None);
        assert_eq!(limit.hit(t0 + 999 * MS), Some(3));
        assert_eq!(limit.hit(t0 + 999 * MS), Some(4), "and stays over");
    }

    #[test]
    fn a_window_starts_with_the_first_input_after_the_last_one_ended() {
        let t0 = Instant::now();
        let mut limit = MalformedLimit::new(2);
        assert_eq!(limit.hit(t0), None);
        assert_eq!(limit.hit(t0 + 900 * MS), None);
        // Exactly one window after its start: a new window, counting 1,
        // although the last input was 100 ms ago (windows do not slide).
        assert_eq!(limit.hit(t0 + 1_000 * MS), None);
        assert_eq!(limit.hit(t0 + 1_100 * MS), None);
        assert_eq!(limit.hit(t0 + 1_999 * MS), Some(3));
        // A quiet spell: counting starts over.
        assert_eq!(limit.hit(t0 + 5_000 * MS), None);
    }

    #[test]
    fn a_limit_of_zero_closes_at_the_first() {
        let mut limit = MalformedLimit::new(0);
        assert_eq!(limit.hit(Instant::now()), Some(1));
    }
}
