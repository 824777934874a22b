//! Reconnect backoff: exponential, capped, with jitter, sans-IO.
//!
//! ```text
//!  attempt:    0      1      2      3    …   n
//!  ceiling:   min   2·min  4·min  8·min  …  max      (factor 2, capped)
//!  delay:     ceiling · (1 − jitter + jitter · r),   r uniform in [0, 1]
//! ```
//!
//! The caller supplies the randomness (a `u64`) and does the sleeping, so
//! tests are exact. Jitter spreads the reconnects of many nodes that lost a
//! common peer at the same moment.

use std::time::Duration;

/// Default first reconnect delay: 100 ms.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Default longest reconnect delay: 10 s, so a healed peer is found again
/// within seconds without hammering a dead one.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Default jitter: up to 20% of the delay is randomised.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.2;

/// Exponential backoff with jitter between reconnect attempts.
///
/// ```
/// use std::time::Duration;
/// use transport::Backoff;
/// let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 0.0);
/// assert_eq!(b.next_delay(0), Duration::from_millis(100));
/// assert_eq!(b.next_delay(0), Duration::from_millis(200));
/// b.reset();
/// assert_eq!(b.next_delay(0), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    jitter: f64,
    attempt: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            DEFAULT_BACKOFF_MIN,
            DEFAULT_BACKOFF_MAX,
            DEFAULT_BACKOFF_JITTER,
        )
    }
}

impl Backoff {
    /// Delays start at `min`, double per attempt up to `max`, and lose up
    /// to `jitter` (clamped to 0..=1) of their length at random.
    pub fn new(min: Duration, max: Duration, jitter: f64) -> Self {
        Self {
            min,
            max: max.max(min),
            jitter: jitter.clamp(0.0, 1.0),
            attempt: 0,
        }
    }

    /// The delay before the next attempt; `random` is any random `u64`.
    pub fn next_delay(&mut self, random: u64) -> Duration {
        let ceiling = self
            .min
            .checked_mul(1u32 << self.attempt.min(31))
            .unwrap_or(self.max)
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let r = random as f64 / u64::MAX as f64;
        ceiling.mul_f64(1.0 - self.jitter + self.jitter * r)
    }

    /// The first delay: the shortest gap between two attempts.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The longest delay (at least [`min`](Self::min)).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The share of each delay that is randomised, in `0..=1`.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// Attempts made since the last [`reset`](Self::reset).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Starts over at `min` (call it once a connection succeeded).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(100), 0.0);
        let got: Vec<_> = (0..40)
            .map(|_| b.next_delay(u64::MAX).as_millis())
            .collect();
        assert_eq!(&got[..6], &[10, 20, 40, 80, 100, 100]);
        assert!(got.iter().all(|&d| d <= 100));
        assert_eq!(b.attempts(), 40);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 0.5);
        assert_eq!(b.next_delay(0), Duration::from_millis(50));
        assert_eq!(b.next_delay(u64::MAX), Duration::from_millis(200));
        let mid = b.next_delay(u64::MAX / 2);
        assert!(mid > Duration::from_millis(290) && mid < Duration::from_millis(310));
    }

    #[test]
    fn reset_starts_over_and_bad_settings_are_clamped() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1), 7.0);
        // max below min is raised to min; jitter above 1 is 1.
        assert_eq!(b.next_delay(u64::MAX), Duration::from_millis(100));
        assert_eq!(b.next_delay(0), Duration::ZERO);
        b.reset();
        assert_eq!(b.attempts(), 0);
    }
}
