//! Liveness: a sans-IO phi-accrual failure detector and the heartbeat
//! schedule that feeds it.
//!
//! ```text
//!            poll_timeout() ──► caller sleeps until then
//!                 │
//!   poll_transmit(now) ── Some(seq) ──► caller sends Heartbeat(seq) on the control lane
//!                 │
//!   handle_ack(now, seq) ◄── HeartbeatAck(seq) arrives ──► detector.heartbeat(now)
//!                 │
//!   is_available(now) ── false (phi ≥ threshold) ──► caller declares the node unreachable
//! ```
//!
//! Nothing here reads a clock: every method takes `now`, so tests drive a
//! fake clock (STYLE habit 3, as quinn-proto does).
//!
//! The detector is the phi-accrual detector of Hayashibara et al., "The φ
//! Accrual Failure Detector" (2004), with the changes Akka made: the
//! inter-arrival times are modelled as a normal distribution whose mean is
//! raised by an *acceptable pause* and whose standard deviation has a floor,
//! and phi is computed with the logistic approximation of the normal CDF.
//! `phi = -log10(P(next heartbeat arrives later than now))`: phi 1 means a
//! 10% chance that the node is alive and merely late, phi 10 one in 10^10.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use crate::error::ConfigError;

/// Default heartbeat interval: 1 s (Akka's `heartbeat-interval`).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Default phi threshold: 10 (Akka's). A node whose phi reaches it is
/// unreachable; with the default pause this takes about 11 s of silence.
pub const DEFAULT_PHI_THRESHOLD: f64 = 10.0;
/// Default acceptable pause: 10 s (Akka's `watch-failure-detector`). Covers
/// GC pauses and network hiccups; lower it for faster detection at the price
/// of false positives under load.
pub const DEFAULT_ACCEPTABLE_PAUSE: Duration = Duration::from_secs(10);
/// Default floor of the standard deviation: 100 ms (Akka's), so a perfectly
/// regular history does not make phi jump on the first late heartbeat.
pub const DEFAULT_MIN_STD_DEVIATION: Duration = Duration::from_millis(100);
/// Default number of inter-arrival samples kept: 200 (Akka's).
pub const DEFAULT_MAX_SAMPLES: usize = 200;

/// Settings of a [`Heartbeater`] and its [`PhiAccrualDetector`].
///
/// Setters that take any value return `&mut Self`; those with a range
/// return `Result<&mut Self, ConfigError>` and leave the setting unchanged
/// on an error (the style of the actors' `SystemConfig`):
///
/// ```
/// use std::time::Duration;
/// let mut c = transport::HeartbeatConfig::default();
/// c.set_interval(Duration::from_millis(100))?
///     .set_acceptable_pause(Duration::from_millis(500));
/// assert_eq!(c.interval(), Duration::from_millis(100));
/// let e = c.set_threshold(0.0).unwrap_err();
/// assert_eq!(e.to_string(), "phi threshold must be a positive number, found 0");
/// assert_eq!(c.threshold(), 10.0);
/// # Ok::<(), transport::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatConfig {
    interval: Duration,
    threshold: f64,
    acceptable_pause: Duration,
    min_std_deviation: Duration,
    max_samples: usize,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_HEARTBEAT_INTERVAL,
            threshold: DEFAULT_PHI_THRESHOLD,
            acceptable_pause: DEFAULT_ACCEPTABLE_PAUSE,
            min_std_deviation: DEFAULT_MIN_STD_DEVIATION,
            max_samples: DEFAULT_MAX_SAMPLES,
        }
    }
}

/// The shortest heartbeat interval and standard deviation floor: 1 ms.
/// A shorter interval would flood the control lane; a zero floor lets a
/// perfectly regular history make phi infinite on the first late
/// heartbeat.
const MIN_HEARTBEAT_DURATION: Duration = Duration::from_millis(1);

/// The fewest inter-arrival samples: 2, the least a standard deviation
/// is computed from.
const MIN_SAMPLES: usize = 2;

fn at_least(name: &'static str, value: Duration, min: Duration) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::DurationTooShort { name, value, min });
    }
    Ok(())
}

impl HeartbeatConfig {
    /// Time between heartbeats. Default 1 s. Cost: one 13-byte frame each
    /// way per interval per peer.
    ///
    /// # Errors
    /// [`ConfigError::DurationTooShort`] below 1 ms. The setting is left
    /// unchanged.
    pub fn set_interval(&mut self, interval: Duration) -> Result<&mut Self, ConfigError> {
        at_least("heartbeat interval", interval, MIN_HEARTBEAT_DURATION)?;
        self.interval = interval;
        Ok(self)
    }

    /// Phi at which a node is judged unreachable. Default 10. Lower detects
    /// sooner and errs more often.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] unless positive and finite. The setting
    /// is left unchanged.
    pub fn set_threshold(&mut self, phi: f64) -> Result<&mut Self, ConfigError> {
        if !(phi > 0.0 && phi.is_finite()) {
            return Err(ConfigError::OutOfRange {
                name: "phi threshold",
                value: phi,
                range: "a positive number",
            });
        }
        self.threshold = phi;
        Ok(self)
    }

    /// Silence tolerated on top of the usual heartbeat interval before phi
    /// climbs. Default 10 s; any duration, zero included.
    pub fn set_acceptable_pause(&mut self, pause: Duration) -> &mut Self {
        self.acceptable_pause = pause;
        self
    }

    /// Floor of the standard deviation of inter-arrival times. Default
    /// 100 ms.
    ///
    /// # Errors
    /// [`ConfigError::DurationTooShort`] below 1 ms. The setting is left
    /// unchanged.
    pub fn set_min_std_deviation(&mut self, d: Duration) -> Result<&mut Self, ConfigError> {
        at_least("heartbeat min std deviation", d, MIN_HEARTBEAT_DURATION)?;
        self.min_std_deviation = d;
        Ok(self)
    }

    /// Inter-arrival samples kept. Default 200. Cost: 8 bytes each per
    /// monitored peer.
    ///
    /// # Errors
    /// [`ConfigError::TooSmall`] below 2, the least a deviation is
    /// computed from. The setting is left unchanged.
    pub fn set_max_samples(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        if n < MIN_SAMPLES {
            return Err(ConfigError::TooSmall {
                name: "heartbeat max samples",
                value: n as u64,
                min: MIN_SAMPLES as u64,
            });
        }
        self.max_samples = n;
        Ok(self)
    }

    /// The heartbeat interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The phi threshold.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The acceptable pause.
    pub fn acceptable_pause(&self) -> Duration {
        self.acceptable_pause
    }

    /// The floor of the standard deviation.
    pub fn min_std_deviation(&self) -> Duration {
        self.min_std_deviation
    }

    /// The inter-arrival samples kept.
    pub fn max_samples(&self) -> usize {
        self.max_samples
    }
}

/// The phi-accrual detector: feed it heartbeat arrival times, ask it how
/// suspicious the current silence is.
#[derive(Debug, Clone)]
pub struct PhiAccrualDetector {
    threshold: f64,
    acceptable_pause_ms: f64,
    min_std_ms: f64,
    max_samples: usize,
    /// Inter-arrival times in milliseconds, oldest first.
    intervals: VecDeque<f64>,
    sum: f64,
    sum_sq: f64,
    last: Option<Instant>,
}

impl PhiAccrualDetector {
    /// A detector that has seen no heartbeat; its history is seeded with
    /// `first_estimate` (the expected interval) as Akka does, so that the
    /// second heartbeat already has a distribution to be judged against.
    pub fn new(config: &HeartbeatConfig, first_estimate: Duration) -> Self {
        let mut d = Self {
            threshold: config.threshold,
            acceptable_pause_ms: ms(config.acceptable_pause),
            min_std_ms: ms(config.min_std_deviation),
            // At least MIN_SAMPLES: the setter refuses fewer.
            max_samples: config.max_samples,
            intervals: VecDeque::with_capacity(config.max_samples),
            sum: 0.0,
            sum_sq: 0.0,
            last: None,
        };
        let mean = ms(first_estimate);
        let std = mean / 4.0;
        d.push(mean - std);
        d.push(mean + std);
        d
    }

    fn push(&mut self, interval_ms: f64) {
        if self.intervals.len() >= self.max_samples
            && let Some(old) = self.intervals.pop_front()
        {
            self.sum -= old;
            self.sum_sq -= old * old;
        }
        self.intervals.push_back(interval_ms);
        self.sum += interval_ms;
        self.sum_sq += interval_ms * interval_ms;
    }

    /// Records a heartbeat that arrived at `now`.
    pub fn heartbeat(&mut self, now: Instant) {
        if let Some(last) = self.last {
            // An arrival "before" the last one (a clock that went backwards
            // in a test) counts as zero.
            self.push(ms(now.saturating_duration_since(last)));
        }
        self.last = Some(now);
    }

    /// True once a heartbeat has been recorded.
    pub fn is_monitoring(&self) -> bool {
        self.last.is_some()
    }

    /// Suspicion at `now`; 0 before the first heartbeat.
    pub fn phi(&self, now: Instant) -> f64 {
        let Some(last) = self.last else { return 0.0 };
        let n = self.intervals.len() as f64;
        let mean = self.sum / n;
        let variance = (self.sum_sq / n - mean * mean).max(0.0);
        let std = variance.sqrt().max(self.min_std_ms);
        phi(
            ms(now.saturating_duration_since(last)),
            mean + self.acceptable_pause_ms,
            std,
        )
    }

    /// False once phi at `now` has reached the threshold.
    pub fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.threshold
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Akka's `PhiAccrualFailureDetector.phi`: the logistic approximation of
/// the normal CDF (error below 0.00014), computed on the side of the mean
/// that keeps it numerically stable.
fn phi(elapsed: f64, mean: f64, std: f64) -> f64 {
    let y = (elapsed - mean) / std;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if elapsed > mean {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

/// The heartbeat schedule of one peer plus its detector.
///
/// Method groups:
/// - schedule: [`poll_timeout`](Self::poll_timeout),
///   [`poll_transmit`](Self::poll_transmit);
/// - input: [`handle_ack`](Self::handle_ack);
/// - verdict: [`phi`](Self::phi), [`is_available`](Self::is_available);
/// - [`reset`](Self::reset) for a new session after a verdict.
#[derive(Debug, Clone)]
pub struct Heartbeater {
    config: HeartbeatConfig,
    detector: PhiAccrualDetector,
    next_send: Instant,
    seq: u64,
    acks: u64,
}

impl Heartbeater {
    /// Starts monitoring at `now`: the first heartbeat is due at once, and
    /// the detector records a heartbeat one interval from now, as if the
    /// first answer had arrived on time (Akka's "expected response after").
    /// A peer that never answers is therefore judged like one that went
    /// silent after its first answer.
    pub fn new(config: HeartbeatConfig, now: Instant) -> Self {
        let mut detector = PhiAccrualDetector::new(&config, config.interval);
        detector.heartbeat(now + config.interval);
        Self {
            detector,
            next_send: now,
            seq: 0,
            acks: 0,
            config,
        }
    }

    /// Forgets the history and starts again at `now`, as [`new`](Self::new).
    pub fn reset(&mut self, now: Instant) {
        let seq = self.seq;
        *self = Self::new(self.config.clone(), now);
        self.seq = seq;
    }

    /// When the next heartbeat is due.
    pub fn poll_timeout(&self) -> Instant {
        self.next_send
    }

    /// The sequence number of the heartbeat to send now, if one is due.
    /// After a long stall (the caller was not scheduled) the schedule skips
    /// ahead instead of sending a burst.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<u64> {
        if now < self.next_send {
            return None;
        }
        self.next_send += self.config.interval;
        if self.next_send <= now {
            self.next_send = now + self.config.interval;
        }
        self.seq += 1;
        Some(self.seq)
    }

    /// An ack for heartbeat `seq` arrived at `now`. Acks for heartbeats
    /// never sent are ignored.
    pub fn handle_ack(&mut self, now: Instant, seq: u64) {
        if seq == 0 || seq > self.seq {
            return;
        }
        self.acks += 1;
        self.detector.heartbeat(now);
    }

    /// Acks received since [`new`](Self::new).
    pub fn acks(&self) -> u64 {
        self.acks
    }

    /// Suspicion at `now`.
    pub fn phi(&self, now: Instant) -> f64 {
        self.detector.phi(now)
    }

    /// False once the peer is judged unreachable.
    pub fn is_available(&self, now: Instant) -> bool {
        self.detector.is_available(now)
    }

    /// The settings.
    pub fn config(&self) -> &HeartbeatConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(interval_ms: u64, pause_ms: u64) -> HeartbeatConfig {
        let mut c = HeartbeatConfig::default();
        c.set_interval(Duration::from_millis(interval_ms))
            .unwrap()
            .set_acceptable_pause(Duration::from_millis(pause_ms));
        c
    }

    #[test]
    fn out_of_range_settings_are_refused_and_leave_the_config_unchanged() {
        let mut c = HeartbeatConfig::default();
        let ms = Duration::from_millis;
        assert_eq!(
            c.set_interval(ms(0)).unwrap_err(),
            ConfigError::DurationTooShort {
                name: "heartbeat interval",
                value: Duration::ZERO,
                min: ms(1),
            }
        );
        assert_eq!(
            c.set_interval(Duration::from_micros(999))
                .unwrap_err()
                .to_string(),
            "heartbeat interval must be at least 1ms, found 999µs"
        );
        for phi in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(c.set_threshold(phi), Err(ConfigError::OutOfRange { .. })),
                "{phi}"
            );
        }
        assert_eq!(
            c.set_min_std_deviation(Duration::ZERO)
                .unwrap_err()
                .to_string(),
            "heartbeat min std deviation must be at least 1ms, found 0ns"
        );
        assert_eq!(
            c.set_max_samples(1).unwrap_err().to_string(),
            "heartbeat max samples must be at least 2, found 1"
        );
        assert_eq!(c, HeartbeatConfig::default());
        // The boundaries themselves are taken.
        c.set_interval(ms(1))
            .unwrap()
            .set_min_std_deviation(ms(1))
            .unwrap()
            .set_max_samples(2)
            .unwrap()
            .set_threshold(f64::MIN_POSITIVE)
            .unwrap()
            .set_acceptable_pause(Duration::ZERO);
        assert_eq!(
            (c.interval(), c.min_std_deviation(), c.max_samples()),
            (ms(1), ms(1), 2)
        );
    }

    #[test]
    fn phi_is_zero_before_any_heartbeat() {
        let d = PhiAccrualDetector::new(&HeartbeatConfig::default(), Duration::from_secs(1));
        assert_eq!(d.phi(Instant::now()), 0.0);
        assert!(!d.is_monitoring());
    }

    #[test]
    fn phi_grows_with_silence_and_matches_akka_values() {
        // Akka's PhiAccrualFailureDetectorSpec: mean 1000, std 100 →
        // phi(1000) ≈ 0.3, phi(1100) ≈ 0.8 (no acceptable pause).
        assert!((phi(1000.0, 1000.0, 100.0) - std::f64::consts::LOG10_2).abs() < 0.01);
        assert!((phi(1100.0, 1000.0, 100.0) - 0.83).abs() < 0.05);
        assert!(phi(2000.0, 1000.0, 100.0) > 10.0);
        let mut last = 0.0;
        for t in (0..3000).step_by(100) {
            let p = phi(f64::from(t), 1000.0, 100.0);
            assert!(p >= last, "phi is monotone: {p} < {last} at {t}");
            last = p;
        }
    }

    #[test]
    fn regular_heartbeats_keep_the_node_available() {
        let t0 = Instant::now();
        let mut d = PhiAccrualDetector::new(&config(1000, 3000), Duration::from_secs(1));
        for i in 0..100 {
            d.heartbeat(t0 + Duration::from_millis(1000 * i));
        }
        let last = t0 + Duration::from_millis(99_000);
        assert!(d.is_available(last + Duration::from_millis(1000)));
        // Within the acceptable pause: still available.
        assert!(d.is_available(last + Duration::from_millis(3500)));
        // Well past interval + pause: unreachable.
        assert!(!d.is_available(last + Duration::from_millis(6000)));
    }

    #[test]
    fn jittery_history_tolerates_more_than_a_regular_one() {
        let t0 = Instant::now();
        let c = config(1000, 0);
        let mut regular = PhiAccrualDetector::new(&c, Duration::from_secs(1));
        let mut jittery = PhiAccrualDetector::new(&c, Duration::from_secs(1));
        let mut t_r = t0;
        let mut t_j = t0;
        for i in 0..50u64 {
            t_r += Duration::from_millis(1000);
            t_j += Duration::from_millis(if i % 2 == 0 { 500 } else { 1500 });
            regular.heartbeat(t_r);
            jittery.heartbeat(t_j);
        }
        let silence = Duration::from_millis(1800);
        assert!(jittery.phi(t_j + silence) < regular.phi(t_r + silence));
    }

    #[test]
    fn history_is_bounded() {
        let mut c = config(10, 0);
        c.set_max_samples(5).unwrap();
        let t0 = Instant::now();
        let mut d = PhiAccrualDetector::new(&c, Duration::from_millis(10));
        for i in 0..1000 {
            d.heartbeat(t0 + Duration::from_millis(10 * i));
        }
        assert_eq!(d.intervals.len(), 5);
    }

    #[test]
    fn heartbeater_sends_on_schedule_and_skips_ahead_after_a_stall() {
        let t0 = Instant::now();
        let mut hb = Heartbeater::new(config(100, 500), t0);
        assert_eq!(hb.poll_timeout(), t0);
        assert_eq!(hb.poll_transmit(t0), Some(1));
        assert_eq!(hb.poll_transmit(t0), None);
        assert_eq!(hb.poll_timeout(), t0 + Duration::from_millis(100));
        assert_eq!(hb.poll_transmit(t0 + Duration::from_millis(100)), Some(2));
        // The caller was away for a second: one heartbeat, not ten.
        let late = t0 + Duration::from_millis(1100);
        assert_eq!(hb.poll_transmit(late), Some(3));
        assert_eq!(hb.poll_transmit(late), None);
        assert_eq!(hb.poll_timeout(), late + Duration::from_millis(100));
    }

    #[test]
    fn answered_heartbeats_keep_a_peer_available_and_silence_fires() {
        let t0 = Instant::now();
        let mut hb = Heartbeater::new(config(100, 500), t0);
        let mut now = t0;
        for _ in 0..50 {
            let seq = hb.poll_transmit(now).expect("due");
            hb.handle_ack(now + Duration::from_millis(2), seq);
            assert!(hb.is_available(now + Duration::from_millis(2)));
            now = hb.poll_timeout();
        }
        assert_eq!(hb.acks(), 50);
        // The peer goes silent: heartbeats keep going out, no acks.
        let silent_since = now;
        let mut fired = None;
        while now < silent_since + Duration::from_secs(5) {
            hb.poll_transmit(now);
            if !hb.is_available(now) {
                fired = Some(now - silent_since);
                break;
            }
            now += Duration::from_millis(10);
        }
        let after = fired.expect("the detector fires within 5 s of silence");
        // Interval + acceptable pause is 600 ms; with a floor std of 100 ms
        // phi 10 is reached a few hundred ms later.
        assert!(after > Duration::from_millis(600), "{after:?}");
        assert!(after < Duration::from_millis(1500), "{after:?}");
    }

    #[test]
    fn a_peer_that_never_answers_is_judged_unreachable() {
        let t0 = Instant::now();
        let hb = Heartbeater::new(config(100, 500), t0);
        assert!(hb.is_available(t0 + Duration::from_millis(500)));
        assert!(!hb.is_available(t0 + Duration::from_secs(3)));
    }

    #[test]
    fn unknown_acks_are_ignored_and_reset_starts_over() {
        let t0 = Instant::now();
        let mut hb = Heartbeater::new(config(100, 500), t0);
        hb.handle_ack(t0, 7);
        hb.handle_ack(t0, 0);
        assert_eq!(hb.acks(), 0);
        let later = t0 + Duration::from_secs(10);
        assert!(!hb.is_available(later));
        hb.reset(later);
        assert!(hb.is_available(later));
        // Sequence numbers keep growing across a reset.
        assert_eq!(hb.poll_transmit(later), Some(1));
    }
}
