//! `--sweep`: msg/s, MB/s and p99 of the burst pattern for payloads
//! 100 B .. 50 KB × pairs 1, 10, 100, like the tables published for web
//! servers.

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{RunOpts, modes::burst, progress::Progress};

/// Payload sizes and pair counts of `--sweep`.
const SWEEP_PAYLOADS: [usize; 6] = [100, 1000, 5000, 10_000, 25_000, 50_000];
const SWEEP_PAIRS: [usize; 3] = [1, 10, 100];
/// Payload bytes per sweep cell, so large payloads finish in seconds.
const SWEEP_BYTES: u64 = 128 * 1024 * 1024;
/// Most payload bytes in one burst.
const SWEEP_BURST_BYTES: u64 = 8 * 1024 * 1024;

/// Measures every cell once, quietly, and prints one table row per cell.
pub async fn run(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let mut rows = Vec::new();
    let progress = Progress::new((SWEEP_PAYLOADS.len() * SWEEP_PAIRS.len()) as u64);
    progress.println(&format!(
        "{:>8} {:>6} {:>10} {:>14} {:>10} {:>10}",
        "payload", "pairs", "messages", "msg/s", "MB/s", "p99 us"
    ));
    for &payload in &SWEEP_PAYLOADS {
        for &pairs in &SWEEP_PAIRS {
            progress.step(format!("payload {payload} B, {pairs} pairs"));
            let total = opts
                .messages
                .min(SWEEP_BYTES / payload as u64)
                .max(pairs as u64);
            let burst = opts.burst.min(SWEEP_BURST_BYTES / payload as u64).max(1);
            let per_pair = (total / pairs as u64).max(1);
            let cell = RunOpts {
                messages: per_pair,
                burst: burst.min(per_pair),
                payload,
                pairs,
                json: false,
                raw_ceiling: false,
                sweep: false,
                plot: None,
                compare: None,
                rate: None,
                ..opts.clone()
            };
            let run = burst::measure(recv, &cell, false).await?;
            let r = run
                .outcome
                .per_message
                .as_ref()
                .unwrap_or(&run.outcome.report);
            let mbps = run.outcome.msgs_per_sec * payload as f64 / 1e6;
            progress.println(&format!(
                "{payload:>8} {pairs:>6} {:>10} {:>14.0} {mbps:>10.1} {:>10}",
                per_pair * pairs as u64,
                run.outcome.msgs_per_sec,
                r.percentile_us(0.99)
            ));
            progress.done_one();
            rows.push(serde_json::json!({
                "payload": payload,
                "pairs": pairs,
                "messages": per_pair * pairs as u64,
                "msgs_per_sec": run.outcome.msgs_per_sec,
                "mb_per_sec": mbps,
                "p99_us": r.percentile_us(0.99),
                "dropped": run.sent.saturating_sub(run.received),
            }));
        }
    }
    progress.finish();
    if opts.json {
        println!("{}", serde_json::json!({ "mode": "sweep", "rows": rows }));
    }
    Ok(())
}
