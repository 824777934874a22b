//! The message pattern of Akka's remote benchmark, independent of what
//! carries it: warm-up burst, `Start`, bursts of payloads each followed by a
//! `Continue` marker that carries the window state, stop-and-wait on the
//! marker's echo, `Done`.

use std::{
    future::Future,
    sync::OnceLock,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use bytes::{Buf, BufMut};

use crate::report::Report;

/// Body tag of a payload message.
pub const TAG_PAYLOAD: u8 = 0;
/// Body tag of a marker message.
pub const TAG_MARKER: u8 = 1;
/// Encoded marker body length: tag, kind, five u64 fields.
pub const MARKER_LEN: usize = 2 + 5 * 8;

/// Which marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MarkerKind {
    /// Follows the untimed warm-up burst.
    Warmup = 0,
    /// Starts the timed run.
    Start = 1,
    /// Follows each timed burst.
    Continue = 2,
    /// Ends the run.
    Done = 3,
}

/// A control marker; `Continue` carries the window state so the sender
/// keeps none between bursts (as in Akka's sample).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Which marker.
    pub kind: MarkerKind,
    /// Messages not yet sent.
    pub remaining: u64,
    /// When the current progress window started (ns since [`epoch`]).
    pub window_start: u64,
    /// When this burst started (ns since [`epoch`]).
    pub burst_start: u64,
    /// Messages delivered in the current window, this burst included.
    pub n: u64,
    /// Filled in by the receiver when it echoes: payloads it has counted.
    pub received: u64,
}

impl Marker {
    /// A marker with no state.
    pub fn bare(kind: MarkerKind) -> Self {
        Self {
            kind,
            remaining: 0,
            window_start: 0,
            burst_start: 0,
            n: 0,
            received: 0,
        }
    }

    /// Appends the marker body (tag included).
    pub fn encode(&self, dst: &mut impl BufMut) {
        dst.put_u8(TAG_MARKER);
        dst.put_u8(self.kind as u8);
        dst.put_u64(self.remaining);
        dst.put_u64(self.window_start);
        dst.put_u64(self.burst_start);
        dst.put_u64(self.n);
        dst.put_u64(self.received);
    }

    /// Parses a marker body (tag included).
    pub fn decode(mut b: &[u8]) -> Result<Self> {
        if b.len() != MARKER_LEN || b[0] != TAG_MARKER {
            bail!("malformed marker of {} bytes", b.len());
        }
        b.advance(1);
        let kind = match b.get_u8() {
            0 => MarkerKind::Warmup,
            1 => MarkerKind::Start,
            2 => MarkerKind::Continue,
            3 => MarkerKind::Done,
            k => bail!("unknown marker kind {k}"),
        };
        Ok(Self {
            kind,
            remaining: b.get_u64(),
            window_start: b.get_u64(),
            burst_start: b.get_u64(),
            n: b.get_u64(),
            received: b.get_u64(),
        })
    }
}

/// The process-wide time origin for marker timestamps.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`].
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The run's shape.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Timed messages.
    pub messages: u64,
    /// Payload messages per burst.
    pub burst: u64,
    /// Payload bytes per message.
    pub payload: usize,
    /// Bursts outstanding at once (1 = Akka's stop-and-wait).
    pub in_flight: u64,
}

/// What the sender does next.
#[derive(Debug)]
pub enum Step {
    /// Send each `(n, marker)`: `n` payloads, then the marker.
    Send(Vec<(u64, Marker)>),
    /// Nothing to send until the next echo.
    Wait,
    /// The run is over.
    Finished(Box<Outcome>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Starting,
    Running,
    Ending,
}

/// The sender's side of the pattern as a state machine, so that an actor,
/// a raw-transport task and the hand-written ceiling all drive the same
/// logic: feed it each echoed marker, do what it returns.
///
/// With one burst in flight the window state travels inside the marker, as
/// in Akka's sample; with more, each marker carries the messages sent in
/// the window up to and including its burst, which ordering guarantees
/// were delivered when it returns.
#[derive(Debug)]
pub struct Pattern {
    shape: Shape,
    verbose: bool,
    phase: Phase,
    report: Report,
    start: Instant,
    remaining: u64,
    window_start: u64,
    window_sent: u64,
    outstanding: u64,
    received_at_start: u64,
}

impl Pattern {
    /// A pattern of `shape`, printing the reference lines if `verbose`.
    pub fn new(shape: Shape, verbose: bool) -> Self {
        epoch();
        Self {
            shape,
            verbose,
            phase: Phase::Warmup,
            report: Report::new(shape),
            start: Instant::now(),
            remaining: shape.messages,
            window_start: 0,
            window_sent: 0,
            outstanding: 0,
            received_at_start: 0,
        }
    }

    /// The first step: the untimed warm-up burst.
    pub fn begin(&mut self) -> Step {
        Step::Send(vec![(self.shape.burst, Marker::bare(MarkerKind::Warmup))])
    }

    fn next_burst(&mut self) -> (u64, Marker) {
        let n = self.shape.burst.min(self.remaining);
        self.remaining -= n;
        self.window_sent += n;
        self.outstanding += 1;
        (
            n,
            Marker {
                kind: MarkerKind::Continue,
                remaining: self.remaining,
                window_start: self.window_start,
                burst_start: now_ns(),
                n: self.window_sent,
                received: 0,
            },
        )
    }

    /// Handles one echoed marker.
    ///
    /// # Errors
    /// An echo that does not fit the phase (a protocol bug or a confused
    /// peer).
    pub fn on_echo(&mut self, echo: Marker) -> Result<Step> {
        match (self.phase, echo.kind) {
            (Phase::Warmup, MarkerKind::Warmup) => {
                self.received_at_start = echo.received;
                self.phase = Phase::Starting;
                Ok(Step::Send(vec![(0, Marker::bare(MarkerKind::Start))]))
            }
            (Phase::Starting, MarkerKind::Start) => {
                if self.verbose {
                    println!(
                        "Starting benchmark of {} messages with burst size {} and payload size {}",
                        self.shape.messages, self.shape.burst, self.shape.payload
                    );
                }
                self.phase = Phase::Running;
                self.start = Instant::now();
                self.window_start = now_ns();
                let k = self.shape.in_flight.max(1);
                let mut bursts = Vec::new();
                while self.remaining > 0 && (bursts.len() as u64) < k {
                    bursts.push(self.next_burst());
                }
                Ok(Step::Send(bursts))
            }
            (Phase::Running, MarkerKind::Continue) => {
                self.outstanding -= 1;
                let now = now_ns();
                self.report
                    .record_rtt(Duration::from_nanos(now.saturating_sub(echo.burst_start)));
                let window = Duration::from_nanos(now.saturating_sub(echo.window_start));
                if echo.window_start == self.window_start && window >= Duration::from_millis(500) {
                    if self.verbose {
                        self.report.print_progress(window, echo.n, echo.remaining);
                    }
                    self.report.record_window(window, echo.n);
                    self.window_start = now_ns();
                    self.window_sent = 0;
                }
                if self.remaining > 0 {
                    Ok(Step::Send(vec![self.next_burst()]))
                } else if self.outstanding == 0 {
                    self.phase = Phase::Ending;
                    Ok(Step::Send(vec![(0, Marker::bare(MarkerKind::Done))]))
                } else {
                    Ok(Step::Wait)
                }
            }
            (Phase::Ending, MarkerKind::Done) => {
                let elapsed = self.start.elapsed();
                if self.verbose {
                    self.report.print_summary(elapsed);
                }
                Ok(Step::Finished(Box::new(Outcome {
                    elapsed,
                    msgs_per_sec: self.shape.messages as f64 / elapsed.as_secs_f64(),
                    report: self.report.clone(),
                    received: echo.received.saturating_sub(self.received_at_start),
                    per_message: None,
                })))
            }
            (phase, kind) => bail!("unexpected {kind:?} echo in phase {phase:?}"),
        }
    }
}

/// What carries the pattern: a way to send a burst followed by a marker,
/// and a way to wait for the next echoed marker.
pub trait Link: Send {
    /// Sends `n` payload messages, then `marker`.
    fn send_burst(&mut self, n: u64, marker: Marker) -> impl Future<Output = Result<()>> + Send;
    /// Waits for the next echoed marker.
    fn recv_marker(&mut self) -> impl Future<Output = Result<Marker>> + Send;
}

/// What a timed run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Wall time of the timed part.
    pub elapsed: Duration,
    /// Messages per second over the timed part.
    pub msgs_per_sec: f64,
    /// Marker round-trips.
    pub report: Report,
    /// Timed payloads the receiver reported (from its echoes; 0 where the
    /// receiver does not report).
    pub received: u64,
    /// Per-message round-trips, in `--echo-all` mode.
    pub per_message: Option<Report>,
}

/// Runs warm-up and the timed pattern over `link`.
pub async fn drive<L: Link>(link: &mut L, shape: Shape, verbose: bool) -> Result<Outcome> {
    let mut p = Pattern::new(shape, verbose);
    let mut step = p.begin();
    loop {
        match step {
            Step::Send(bursts) => {
                for (n, m) in bursts {
                    link.send_burst(n, m).await?;
                }
            }
            Step::Wait => {}
            Step::Finished(o) => return Ok(*o),
        }
        step = p.on_echo(link.recv_marker().await?)?;
    }
}

/// Parses a marker or explains which body was not one.
pub fn marker_from(body: &[u8]) -> Result<Marker> {
    Marker::decode(body).context("echo was not a marker")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_roundtrip() {
        let m = Marker {
            kind: MarkerKind::Continue,
            remaining: 5,
            window_start: 6,
            burst_start: 7,
            n: 8,
            received: 9,
        };
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(b.len(), MARKER_LEN);
        assert_eq!(Marker::decode(&b).unwrap(), m);
        assert!(Marker::decode(&b[1..]).is_err());
    }
}
