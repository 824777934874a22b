//! What a single run (the default burst run, `--raw`, `sender`) prints after
//! the reference lines: percentiles, drops, transport counters, the TLS
//! line, the ceiling with `--raw-ceiling` (its rate and its marker
//! round-trips beside the run's), the plot and the `--json` object.

use anyhow::Result;
use tokio::runtime::Handle;
use transport::ConnStats;

use crate::{RunOpts, ceiling, pattern::Outcome, plot, report::Report};

/// The run's result in one shape for printing.
pub struct Run {
    /// The `mode` of the JSON object and of the ceiling line.
    pub mode: &'static str,
    /// Timing and round-trips.
    pub outcome: Outcome,
    /// Payloads sent (over all pairs).
    pub sent: u64,
    /// Payloads the receivers counted.
    pub received: u64,
    /// Counters of the sending side.
    pub stats: ConnStats,
}

impl Run {
    /// Payload messages the sending side handed to the socket per write:
    /// the batching factor. Counted from payloads, not frames, since a
    /// frame may carry a run of messages (`SystemConfig::set_message_runs`).
    pub fn messages_per_write(&self) -> f64 {
        self.sent as f64 / self.stats.writes.max(1) as f64
    }
}

/// Every figure of a run, for `--json`.
#[derive(Debug, serde::Serialize)]
struct Figures {
    mode: &'static str,
    messages: u64,
    burst: u64,
    payload: usize,
    in_flight: u64,
    pairs: usize,
    elapsed_ms: u128,
    msgs_per_sec: f64,
    max_rtt_ms: u128,
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    sent: u64,
    received: u64,
    dropped: u64,
    bytes: u64,
    writes: u64,
    msgs_per_write: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_msgs_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    /// The ceiling's marker round-trip p50 (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_p50_us: Option<u64>,
    /// The ceiling's marker round-trip p99 (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_p99_us: Option<u64>,
}

/// Marker round-trips of a run over those of its ceiling, at p50 and p99.
pub fn latency_ratios(run: &Report, ceiling: &Report) -> (f64, f64) {
    let r = |q| run.percentile_us(q) as f64 / ceiling.percentile_us(q).max(1) as f64;
    (r(0.5), r(0.99))
}

/// Prints the details after the reference lines, the ceiling if asked, and
/// the JSON line.
pub async fn finish(recv: &Handle, opts: &RunOpts, run: Run) -> Result<()> {
    println!("{}", run.outcome.report.percentiles_line("Marker"));
    if let Some(pm) = &run.outcome.per_message {
        println!("{}", pm.percentiles_line("Per-message"));
    }
    let dropped = run.sent.saturating_sub(run.received);
    println!(
        "Payloads received {} of {} sent, dropped {}",
        run.received, run.sent, dropped
    );
    println!(
        "Transport: {} bytes out in {} writes, {:.1} messages per write",
        run.stats.bytes_out,
        run.stats.writes,
        run.messages_per_write()
    );
    if opts.tls {
        // Each write hands rustls a whole batch, which it cuts into records
        // of at most 16 KiB: batching survives encryption.
        println!(
            "TLS: {} batches of {:.0} bytes on average, at least {} records of <= 16 KiB ({:.0} messages per record)",
            run.stats.writes,
            run.stats.bytes_out as f64 / run.stats.writes.max(1) as f64,
            run.stats.bytes_out.div_ceil(16 * 1024),
            run.sent as f64 / run.stats.bytes_out.div_ceil(16 * 1024).max(1) as f64
        );
    }
    let mut ceiling = None;
    if opts.raw_ceiling {
        let (c, _) = ceiling::run(recv, opts.shape(), false, opts.echo_all).await?;
        println!(
            "Ceiling (hand-written tokio, same pattern, same process): {:.0} msg/s; {} / ceiling = {:.3}",
            c.msgs_per_sec,
            run.mode,
            run.outcome.msgs_per_sec / c.msgs_per_sec
        );
        // The same marker round-trips, hand-written: with `--burst 1` this
        // is a lone ping-pong, the latency floor of this layout.
        println!("{}", c.report.percentiles_line("Ceiling marker"));
        if let Some(pm) = &c.per_message {
            println!("{}", pm.percentiles_line("Ceiling per-message"));
        }
        let (p50, p99) = latency_ratios(&run.outcome.report, &c.report);
        println!(
            "Marker round-trip {} / ceiling: p50 {p50:.2}, p99 {p99:.2}",
            run.mode
        );
        ceiling = Some(c);
    }
    if let Some(path) = &opts.plot {
        let latency = run
            .outcome
            .per_message
            .as_ref()
            .unwrap_or(&run.outcome.report);
        plot::write_svg(path, &run.outcome.report.windows, latency)?;
        println!("Plot written to {}", path.display());
    }
    if opts.json {
        // Per-message percentiles when every message was echoed.
        let r = run
            .outcome
            .per_message
            .as_ref()
            .unwrap_or(&run.outcome.report);
        let f = Figures {
            mode: run.mode,
            messages: opts.messages,
            burst: opts.burst,
            payload: opts.payload,
            in_flight: opts.in_flight,
            pairs: opts.pairs,
            elapsed_ms: run.outcome.elapsed.as_millis(),
            msgs_per_sec: run.outcome.msgs_per_sec,
            max_rtt_ms: run.outcome.report.max_rtt().as_millis(),
            p50_us: r.percentile_us(0.5),
            p90_us: r.percentile_us(0.9),
            p99_us: r.percentile_us(0.99),
            p999_us: r.percentile_us(0.999),
            max_us: r.max_us(),
            sent: run.sent,
            received: run.received,
            dropped,
            bytes: run.stats.bytes_out,
            writes: run.stats.writes,
            msgs_per_write: run.messages_per_write(),
            ceiling_msgs_per_sec: ceiling.as_ref().map(|c| c.msgs_per_sec),
            ratio: ceiling
                .as_ref()
                .map(|c| run.outcome.msgs_per_sec / c.msgs_per_sec),
            ceiling_p50_us: ceiling.as_ref().map(|c| c.report.percentile_us(0.5)),
            ceiling_p99_us: ceiling.as_ref().map(|c| c.report.percentile_us(0.99)),
        };
        println!("{}", serde_json::to_string(&f)?);
    }
    Ok(())
}
