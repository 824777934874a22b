//! `--rate R`: wrk2-style constant rate. One sender sends every payload at
//! its scheduled time and the receiver echoes each; latency counts from the
//! schedule, so a stall is not hidden (coordinated omission).

use std::time::Duration;

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{RunOpts, faithful, faithful::Embedded, plot};

/// Runs one constant-rate pass and prints the latency percentiles.
pub async fn run(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let rate = opts.rate.expect("checked by the caller");
    let shape = opts.shape();
    let emb = Embedded::start(recv, 1, opts.tls, &opts.transport()?).await?;
    let res = faithful::run_rate(
        &emb.sender_sys,
        emb.receivers[0].clone(),
        shape,
        rate,
        Duration::from_secs(opts.stall_timeout),
    )
    .await;
    emb.shutdown(recv).await;
    let r = res?;
    let l = &r.latency;
    println!(
        "Constant rate {rate:.0} msg/s target, {:.0} msg/s achieved, {} messages in {} ms, payload size {}",
        r.achieved,
        shape.messages,
        r.elapsed.as_millis(),
        shape.payload
    );
    println!("Latency from scheduled send (us):");
    for q in [0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0] {
        println!("  {:>8.4}%  {}", q * 100.0, l.percentile_us(q));
    }
    if let Some(path) = &opts.plot {
        plot::write_svg(path, &[], l)?;
        println!("Plot written to {}", path.display());
    }
    if opts.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "rate",
                "rate": rate,
                "achieved_msgs_per_sec": r.achieved,
                "messages": shape.messages,
                "payload": shape.payload,
                "msgs_per_sec": r.achieved,
                "dropped": shape.messages.saturating_sub(l.samples()),
                "p50_us": l.percentile_us(0.5),
                "p90_us": l.percentile_us(0.9),
                "p99_us": l.percentile_us(0.99),
                "p999_us": l.percentile_us(0.999),
                "max_us": l.max_us(),
            })
        );
    }
    Ok(())
}
