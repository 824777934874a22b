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

use crate::error::ConfigError;

/// Default first reconnect delay: 100 ms.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Default longest reconnect delay: 10 s, so a healed peer is found again
/// within seconds without hammering a dead one.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Default jitter: up to 20% of the delay is randomised.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.2;

/// Exponential backoff with jitter between reconnect attempts.
///
/// Its three settings are checked together, by [`new`](Self::new), which
/// refuses values out of range rather than adjusting them:
///
/// ```
/// use std::time::Duration;
/// use transport::Backoff;
/// let ms = Duration::from_millis;
/// let mut b = Backoff::new(ms(100), Duration::from_secs(1), 0.0)?;
/// assert_eq!(b.next_delay(0), ms(100));
/// assert_eq!(b.next_delay(0), ms(200));
/// b.reset();
/// assert_eq!(b.next_delay(0), ms(100));
/// let e = Backoff::new(ms(100), ms(50), 0.2).unwrap_err();
/// assert_eq!(e.to_string(), "backoff max 50ms is below min 100ms");
/// # Ok::<(), transport::ConfigError>(())
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
        Self {
            min: DEFAULT_BACKOFF_MIN,
            max: DEFAULT_BACKOFF_MAX,
            jitter: DEFAULT_BACKOFF_JITTER,
            attempt: 0,
        }
    }
}

impl Backoff {
    /// Delays start at `min`, double per attempt up to `max`, and lose up
    /// to `jitter` (a share, 0 to 1) of their length at random.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for a zero `min` (the node would redial
    /// without pause), [`ConfigError::BackoffMaxBelowMin`] for `max` below
    /// `min`, [`ConfigError::OutOfRange`] for `jitter` outside 0..=1 (or
    /// NaN).
    pub fn new(min: Duration, max: Duration, jitter: f64) -> Result<Self, ConfigError> {
        if min.is_zero() {
            return Err(ConfigError::Zero {
                name: "backoff min",
            });
        }
        if max < min {
            return Err(ConfigError::BackoffMaxBelowMin { min, max });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ConfigError::OutOfRange {
                name: "backoff jitter",
                value: jitter,
                range: "between 0 and 1",
            });
        }
        Ok(Self {
            min,
            max,
            jitter,
            attempt: 0,
        })
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
        let mut b =
            Backoff::new(Duration::from_millis(10), Duration::from_millis(100), 0.0).unwrap();
        let got: Vec<_> = (0..40)
            .map(|_| b.next_delay(u64::MAX).as_millis())
            .collect();
        assert_eq!(&got[..6], &[10, 20, 40, 80, 100, 100]);
        assert!(got.iter().all(|&d| d <= 100));
        assert_eq!(b.attempts(), 40);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 0.5).unwrap();
        assert_eq!(b.next_delay(0), Duration::from_millis(50));
        assert_eq!(b.next_delay(u64::MAX), Duration::from_millis(200));
        let mid = b.next_delay(u64::MAX / 2);
        assert!(mid > Duration::from_millis(290) && mid < Duration::from_millis(310));
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 1.0).unwrap();
        assert_eq!(b.next_delay(u64::MAX), Duration::from_millis(100));
        assert_eq!(b.next_delay(0), Duration::ZERO);
        assert_eq!(b.attempts(), 2);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.next_delay(u64::MAX), Duration::from_millis(100));
    }

    #[test]
    fn bad_settings_are_refused_not_adjusted() {
        let ms = Duration::from_millis;
        assert_eq!(
            Backoff::new(ms(100), ms(1), 0.2).unwrap_err(),
            ConfigError::BackoffMaxBelowMin {
                min: ms(100),
                max: ms(1)
            }
        );
        assert_eq!(
            Backoff::new(Duration::ZERO, ms(1), 0.2).unwrap_err(),
            ConfigError::Zero {
                name: "backoff min"
            }
        );
        for jitter in [-0.1, 1.5, f64::NAN] {
            let e = Backoff::new(ms(100), ms(200), jitter).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("backoff jitter must be between 0 and 1, found"),
                "{e}"
            );
        }
        // The edges are taken: min == max, jitter 0 and 1.
        for jitter in [0.0, 1.0] {
            let b = Backoff::new(ms(100), ms(100), jitter).unwrap();
            assert_eq!((b.min(), b.max(), b.jitter()), (ms(100), ms(100), jitter));
        }
        assert_eq!(
            Backoff::default(),
            Backoff::new(
                DEFAULT_BACKOFF_MIN,
                DEFAULT_BACKOFF_MAX,
                DEFAULT_BACKOFF_JITTER
            )
            .unwrap()
        );
    }
}
