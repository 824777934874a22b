//! `--rate R`: wrk2-style constant rate. One sender sends every payload at
//! its scheduled time and the receiver echoes each; latency counts from the
//! schedule, so a stall is not hidden (coordinated omission). The
//! generator's own lateness (sent minus scheduled) is printed beside it, so
//! a late generator shows instead of passing for transport latency, and so
//! is the latency from the actual send (the transport alone).
//!
//! With `--raw-ceiling` the hand-written ping-pong runs the same schedule
//! afterwards; with `--compare N` the two alternate N times and the median
//! ratios at p50 and p99 close the output.

use std::time::Duration;

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{
    RunOpts, ceiling, faithful, faithful::Embedded, modes::compare::median, pacer::RateRun, plot,
};

/// Runs `--rate` once (with its ceiling if asked) or `--compare N` times.
pub async fn run(recv: &Handle, opts: &RunOpts) -> Result<()> {
    if let Some(n) = opts.compare {
        return compare(recv, opts, n).await;
    }
    let rate = opts.rate.expect("main dispatches here on --rate");
    let shape = opts.shape();
    let r = measure(recv, opts).await?;
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
    println!("{}", r.lateness.line());
    println!("{}", r.from_sent.percentiles_line("From actual send"));
    let ceiling = if opts.raw_ceiling {
        let c = measure_ceiling(recv, opts).await?;
        println!(
            "Ceiling (hand-written tokio ping-pong, same schedule, same process): {}",
            c.latency.percentiles_line("Per-message")
        );
        println!("Ceiling {}", c.lateness.line());
        println!(
            "Ceiling {}",
            c.from_sent.percentiles_line("From actual send")
        );
        println!("{}", ratio_line(&r, &c));
        Some(c)
    } else {
        None
    };
    if let Some(path) = &opts.plot {
        plot::write_svg(path, &[], l)?;
        println!("Plot written to {}", path.display());
    }
    if opts.json {
        let mut v = serde_json::json!({
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
            "late_p50_us": r.lateness.percentile_us(0.5),
            "late_p99_us": r.lateness.percentile_us(0.99),
            "late_max_us": r.lateness.max_us(),
            "from_sent_p50_us": r.from_sent.percentile_us(0.5),
            "from_sent_p99_us": r.from_sent.percentile_us(0.99),
        });
        if let Some(c) = &ceiling {
            let (p50, p99) = ratios(&r, c);
            v["ceiling_p50_us"] = c.latency.percentile_us(0.5).into();
            v["ceiling_p99_us"] = c.latency.percentile_us(0.99).into();
            v["ceiling_late_p99_us"] = c.lateness.percentile_us(0.99).into();
            v["p50_ratio"] = p50.into();
            v["p99_ratio"] = p99.into();
        }
        println!("{v}");
    }
    Ok(())
}

/// One constant-rate run on two embedded actor systems.
async fn measure(recv: &Handle, opts: &RunOpts) -> Result<RateRun> {
    let emb = Embedded::start(recv, 1, opts.tls, !opts.no_message_runs, &opts.transport()?).await?;
    let res = faithful::run_rate(
        &emb.sender_sys,
        emb.receivers[0].clone(),
        opts.shape(),
        opts.rate.expect("main dispatches here on --rate"),
        opts.spin(),
        Duration::from_secs(opts.stall_timeout),
    )
    .await;
    emb.shutdown(recv).await;
    res
}

/// The hand-written ping-pong on the same schedule.
async fn measure_ceiling(recv: &Handle, opts: &RunOpts) -> Result<RateRun> {
    ceiling::run_rate(
        recv,
        opts.shape(),
        opts.rate.expect("main dispatches here on --rate"),
        opts.spin(),
        Duration::from_secs(opts.stall_timeout),
    )
    .await
}

/// Actors over ceiling at p50 and p99.
fn ratios(actors: &RateRun, ceiling: &RateRun) -> (f64, f64) {
    let r =
        |q| actors.latency.percentile_us(q) as f64 / ceiling.latency.percentile_us(q).max(1) as f64;
    (r(0.5), r(0.99))
}

fn ratio_line(actors: &RateRun, ceiling: &RateRun) -> String {
    let (p50, p99) = ratios(actors, ceiling);
    format!("Latency actors / ceiling: p50 {p50:.2}, p99 {p99:.2}")
}

/// Alternates the actors' run and the ceiling `n` times, quietly, and
/// prints each pass and the medians.
async fn compare(recv: &Handle, opts: &RunOpts, n: usize) -> Result<()> {
    let mut cols: [Vec<f64>; 8] = Default::default();
    for i in 0..n {
        let a = measure(recv, opts).await?;
        let c = measure_ceiling(recv, opts).await?;
        let (p50, p99) = ratios(&a, &c);
        println!(
            "pass {}: actors p50 {} us, p99 {} us (generator late p50 {:.1} us, p99 {:.1} us); \
             ceiling p50 {} us, p99 {} us (generator late p50 {:.1} us, p99 {:.1} us); \
             ratio p50 {p50:.2}, p99 {p99:.2}",
            i + 1,
            a.latency.percentile_us(0.5),
            a.latency.percentile_us(0.99),
            a.lateness.percentile_us(0.5),
            a.lateness.percentile_us(0.99),
            c.latency.percentile_us(0.5),
            c.latency.percentile_us(0.99),
            c.lateness.percentile_us(0.5),
            c.lateness.percentile_us(0.99),
        );
        for (col, v) in cols.iter_mut().zip([
            a.latency.percentile_us(0.5) as f64,
            a.latency.percentile_us(0.99) as f64,
            c.latency.percentile_us(0.5) as f64,
            c.latency.percentile_us(0.99) as f64,
            p50,
            p99,
            a.lateness.percentile_us(0.99),
            c.lateness.percentile_us(0.99),
        ]) {
            col.push(v);
        }
    }
    let [a50, a99, c50, c99, r50, r99, al, cl] = cols.each_mut().map(|c| median(c));
    println!(
        "median of {n}: actors p50 {a50:.0} us, p99 {a99:.0} us; ceiling p50 {c50:.0} us, p99 {c99:.0} us; \
         generator late p99 {al:.1} us / {cl:.1} us; ratio p50 {r50:.2}, p99 {r99:.2}"
    );
    Ok(())
}
