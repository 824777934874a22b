//! The Akka-format progress and summary lines, and an HdrHistogram of
//! marker round-trips.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::pattern::Shape;

/// Round-trip statistics of one run.
#[derive(Debug, Clone)]
pub struct Report {
    shape: Shape,
    hist: Histogram<u64>,
    last_rtt: Duration,
    max_rtt: Duration,
    /// (window length, messages) of each progress window.
    pub windows: Vec<(Duration, u64)>,
}

impl Report {
    /// An empty report for a run of `shape`.
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            // 1 µs .. 100 s at 3 significant digits.
            hist: Histogram::new_with_bounds(1, 100_000_000, 3).expect("static bounds are valid"),
            last_rtt: Duration::ZERO,
            max_rtt: Duration::ZERO,
            windows: Vec::new(),
        }
    }

    /// Records one round-trip.
    pub fn record_rtt(&mut self, rtt: Duration) {
        self.last_rtt = rtt;
        self.max_rtt = self.max_rtt.max(rtt);
        self.hist.saturating_record((rtt.as_micros() as u64).max(1));
    }

    /// Adds another run's round-trips (for parallel pairs).
    pub fn merge(&mut self, o: &Report) {
        self.max_rtt = self.max_rtt.max(o.max_rtt);
        self.last_rtt = o.last_rtt;
        // Both use the same bounds, so adding cannot fail.
        let _ = self.hist.add(&o.hist);
    }

    /// The longest round-trip.
    pub fn max_rtt(&self) -> Duration {
        self.max_rtt
    }

    /// Records a finished progress window (for plots).
    pub fn record_window(&mut self, window: Duration, n: u64) {
        self.windows.push((window, n));
    }

    /// The reference's progress line.
    pub fn progress_line(&self, window: Duration, n: u64, remaining: u64) -> String {
        let ms = window.as_millis().max(1) as u64;
        format!(
            "It took {ms} ms to deliver {n} messages, throughtput {} msg/s, latest round-trip {} ms, remaining {remaining} of {}",
            n * 1000 / ms,
            self.last_rtt.as_millis(),
            self.shape.messages
        )
    }

    /// Prints [`progress_line`](Self::progress_line).
    pub fn print_progress(&self, window: Duration, n: u64, remaining: u64) {
        println!("{}", self.progress_line(window, n, remaining));
    }

    /// The reference's final line.
    pub fn summary_line(&self, elapsed: Duration) -> String {
        let ms = elapsed.as_millis().max(1) as u64;
        format!(
            "== It took {ms} ms to deliver {} messages, throughtput {} msg/s, max round-trip {} ms, burst size {}, payload size {}",
            self.shape.messages,
            self.shape.messages * 1000 / ms,
            self.max_rtt.as_millis(),
            self.shape.burst,
            self.shape.payload
        )
    }

    /// Prints [`summary_line`](Self::summary_line).
    pub fn print_summary(&self, elapsed: Duration) {
        println!("{}", self.summary_line(elapsed));
    }

    /// Percentile in microseconds.
    pub fn percentile_us(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }

    /// Largest round-trip in microseconds.
    pub fn max_us(&self) -> u64 {
        self.hist.max()
    }

    /// Samples recorded.
    pub fn samples(&self) -> u64 {
        self.hist.len()
    }

    /// `(percentile, microseconds)` points of the latency distribution,
    /// from the median to the maximum, for plots.
    pub fn curve(&self) -> Vec<(f64, u64)> {
        let mut pts = Vec::new();
        for q in [
            0.0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0,
        ] {
            pts.push((q * 100.0, self.hist.value_at_quantile(q)));
        }
        pts
    }

    /// One line of percentiles.
    pub fn percentiles_line(&self, what: &str) -> String {
        format!(
            "{what} round-trip latency (us): p50 {}, p90 {}, p99 {}, p99.9 {}, max {} ({} samples)",
            self.percentile_us(0.5),
            self.percentile_us(0.9),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
            self.max_us(),
            self.samples()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_match_the_reference_form() {
        let shape = Shape {
            messages: 500_000,
            burst: 5000,
            payload: 100,
            in_flight: 1,
        };
        let mut r = Report::new(shape);
        r.record_rtt(Duration::from_millis(142));
        assert_eq!(
            r.progress_line(Duration::from_millis(576), 15000, 485_000),
            "It took 576 ms to deliver 15000 messages, throughtput 26041 msg/s, latest round-trip 142 ms, remaining 485000 of 500000"
        );
        r.record_rtt(Duration::from_millis(263));
        assert_eq!(
            r.summary_line(Duration::from_millis(11515)),
            "== It took 11515 ms to deliver 500000 messages, throughtput 43421 msg/s, max round-trip 263 ms, burst size 5000, payload size 100"
        );
    }
}
