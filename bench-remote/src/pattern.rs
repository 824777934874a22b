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
/// Encoded marker body length: tag, kind, four u64 fields.
pub const MARKER_LEN: usize = 2 + 4 * 8;

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
    /// Messages per second over the timed part.
    pub msgs_per_sec: f64,
    /// Marker round-trips.
    pub report: Report,
}

/// Runs warm-up and the timed pattern over `link`, printing the reference
/// lines when `verbose`.
pub async fn drive<L: Link>(link: &mut L, shape: Shape, verbose: bool) -> Result<Outcome> {
    epoch();
    // Warm-up: one untimed burst.
    link.send_burst(shape.burst, Marker::bare(MarkerKind::Warmup))
        .await?;
    expect(link.recv_marker().await?, MarkerKind::Warmup)?;
    link.send_burst(0, Marker::bare(MarkerKind::Start)).await?;
    expect(link.recv_marker().await?, MarkerKind::Start)?;

    let mut report = Report::new(shape);
    if verbose {
        println!(
            "Starting benchmark of {} messages with burst size {} and payload size {}",
            shape.messages, shape.burst, shape.payload
        );
    }
    let start = Instant::now();
    let mut remaining = shape.messages;
    let mut window_start = now_ns();
    let mut window_n = 0;
    while remaining > 0 {
        let n = shape.burst.min(remaining);
        remaining -= n;
        let marker = Marker {
            kind: MarkerKind::Continue,
            remaining,
            window_start,
            burst_start: now_ns(),
            n: window_n + n,
        };
        link.send_burst(n, marker).await?;
        let echo = expect(link.recv_marker().await?, MarkerKind::Continue)?;
        let now = now_ns();
        report.record_rtt(Duration::from_nanos(now.saturating_sub(echo.burst_start)));
        let window = Duration::from_nanos(now.saturating_sub(echo.window_start));
        if window >= Duration::from_millis(500) {
            if verbose {
                report.print_progress(window, echo.n, echo.remaining);
            }
            window_start = now_ns();
            window_n = 0;
        } else {
            window_n = echo.n;
        }
    }
    link.send_burst(0, Marker::bare(MarkerKind::Done)).await?;
    expect(link.recv_marker().await?, MarkerKind::Done)?;
    let elapsed = start.elapsed();
    if verbose {
        report.print_summary(elapsed);
    }
    Ok(Outcome {
        msgs_per_sec: shape.messages as f64 / elapsed.as_secs_f64(),
        report,
    })
}

fn expect(m: Marker, kind: MarkerKind) -> Result<Marker> {
    if m.kind != kind {
        bail!("expected a {kind:?} marker echo, got {:?}", m.kind);
    }
    Ok(m)
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
        };
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(b.len(), MARKER_LEN);
        assert_eq!(Marker::decode(&b).unwrap(), m);
        assert!(Marker::decode(&b[1..]).is_err());
    }
}
