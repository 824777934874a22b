//! Rate limits for log lines a peer can trigger (refused connections,
//! failed handshakes, protocol errors): at most [`LOG_BURST`] lines of one
//! kind per [`LOG_WINDOW`], and the first line after a quiet spell says how
//! many were left out. A flood of hostile connections thus costs a bounded
//! number of log lines, while a lone event is always logged, at once.
//!
//! Time is passed in ([`LogLimit::sample_at`]); [`LogLimit::sample`] reads
//! the clock, which only the events themselves pay for.

use std::{
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Lines of one kind logged per window: 10.
pub const LOG_BURST: u32 = 10;
/// The window: 10 s.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// One kind of peer-triggered log line. `const`-constructible, for a
/// `static` per kind; the one limiter for every log line a peer can
/// cause, in this crate and in the layers above it.
///
/// ```
/// static REFUSED: transport::LogLimit = transport::LogLimit::new();
/// let logged = (0..100).filter(|_| REFUSED.sample().is_some()).count();
/// assert_eq!(logged, transport::LOG_BURST as usize);
/// ```
#[derive(Debug, Default)]
pub struct LogLimit {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    window_start: Option<Instant>,
    logged: u32,
    /// Occurrences not logged since the last line.
    suppressed: u64,
    /// Occurrences ever.
    total: u64,
}

/// Log this occurrence: the counts to put in the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampled {
    /// Occurrences of this kind so far, this one included.
    pub total: u64,
    /// Occurrences left out of the log since the previous line.
    pub suppressed: u64,
}

impl LogLimit {
    /// A limiter that has logged nothing yet.
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                window_start: None,
                logged: 0,
                suppressed: 0,
                total: 0,
            }),
        }
    }

    /// As [`sample_at`](Self::sample_at), now.
    pub fn sample(&self) -> Option<Sampled> {
        self.sample_at(Instant::now())
    }

    /// Counts one occurrence at `now`; `Some` if it should be logged.
    pub fn sample_at(&self, now: Instant) -> Option<Sampled> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.total += 1;
        let fresh = s
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= LOG_WINDOW);
        if fresh {
            s.window_start = Some(now);
            s.logged = 0;
        }
        if s.logged >= LOG_BURST {
            s.suppressed += 1;
            return None;
        }
        s.logged += 1;
        Some(Sampled {
            total: s.total,
            suppressed: std::mem::take(&mut s.suppressed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_count_of_what_was_left_out() {
        let limit = LogLimit::new();
        let t0 = Instant::now();
        let logged: Vec<_> = (0..1000).filter_map(|_| limit.sample_at(t0)).collect();
        assert_eq!(logged.len(), LOG_BURST as usize);
        assert_eq!(
            logged[0],
            Sampled {
                total: 1,
                suppressed: 0
            }
        );
        // Still the same window: nothing.
        assert_eq!(limit.sample_at(t0 + LOG_WINDOW / 2), None);
        // The next window's first line reports the 991 left out.
        assert_eq!(
            limit.sample_at(t0 + LOG_WINDOW),
            Some(Sampled {
                total: 1002,
                suppressed: 991
            })
        );
    }
}
