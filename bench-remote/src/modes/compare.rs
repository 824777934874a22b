//! `--compare N`: the measured mode (actors, `--raw` or `--tls`) and the
//! hand-written ceiling alternated N times in one process, each pass
//! printed, then the medians: marker round-trips at p50 and p99 beside the
//! ceiling's, then msg/s and the ratio. `--tls` is also judged against plaintext
//! actors measured in the same pass. `scripts/ab.sh` reads the last line.

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{
    RunOpts, ceiling,
    modes::{burst, output::latency_ratios},
    progress::Progress,
};

/// Alternates the mode and the ceiling `--compare N` times, quietly, and
/// prints each pass and the medians.
pub async fn run(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let n = opts
        .compare
        .expect("main dispatches here on --compare N, validated >= 1");
    let shape = opts.shape();
    let mut ratios = Vec::with_capacity(n);
    let mut modes = Vec::with_capacity(n);
    let mut ceils = Vec::with_capacity(n);
    let mode = if opts.raw {
        "raw transport"
    } else if opts.tls {
        "actors over TLS"
    } else {
        "actors"
    };
    let mut tls_ratios = Vec::with_capacity(n);
    // Marker round-trips (p50, p99) of the mode and the ceiling, and their
    // ratios: with `--burst 1`, the latency of a lone round trip.
    let mut lat: [Vec<f64>; 6] = Default::default();
    let progress = Progress::new(n as u64);
    for i in 0..n {
        progress.step(format!("pass {}", i + 1));
        let (rate, per_write, report) = if opts.raw {
            let r = crate::raw::run(recv, shape, opts.transport()?, false).await?;
            (
                r.outcome.msgs_per_sec,
                r.stats.frames_per_write(),
                r.outcome.report,
            )
        } else {
            let r = burst::measure(recv, opts, false).await?;
            (
                r.outcome.msgs_per_sec,
                r.messages_per_write(),
                r.outcome.report,
            )
        };
        if opts.tls {
            // TLS is judged against plaintext measured in the same pass.
            let plain_opts = RunOpts {
                tls: false,
                ..opts.clone()
            };
            let p = burst::measure(recv, &plain_opts, false).await?;
            let r = rate / p.outcome.msgs_per_sec;
            progress.println(&format!(
                "pass {}: tls {rate:.0} msg/s, plaintext {:.0} msg/s, tls/plaintext {r:.3}",
                i + 1,
                p.outcome.msgs_per_sec
            ));
            tls_ratios.push(r);
        }
        let (c, _) = ceiling::run(recv, shape, false, opts.echo_all).await?;
        let ratio = rate / c.msgs_per_sec;
        progress.println(&format!(
            "pass {}: {mode} {rate:.0} msg/s ({per_write:.1} msgs/write), ceiling {:.0} msg/s, ratio {ratio:.3}",
            i + 1,
            c.msgs_per_sec
        ));
        progress.done_one();
        ratios.push(ratio);
        let (p50, p99) = latency_ratios(&report, &c.report);
        for (col, v) in lat.iter_mut().zip([
            report.percentile_us(0.5) as f64,
            report.percentile_us(0.99) as f64,
            c.report.percentile_us(0.5) as f64,
            c.report.percentile_us(0.99) as f64,
            p50,
            p99,
        ]) {
            col.push(v);
        }
        modes.push(rate);
        ceils.push(c.msgs_per_sec);
    }
    progress.finish();
    if opts.tls {
        println!(
            "median of {n}: tls/plaintext {:.3}",
            median(&mut tls_ratios)
        );
    }
    let [m50, m99, c50, c99, r50, r99] = lat.each_mut().map(|c| median(c));
    // Before the msg/s line: `scripts/ab.sh` reads the last one.
    println!(
        "median of {n}: marker round-trip {mode} p50 {m50:.0} us, p99 {m99:.0} us; \
         ceiling p50 {c50:.0} us, p99 {c99:.0} us; ratio p50 {r50:.2}, p99 {r99:.2}"
    );
    println!(
        "median of {n}: {mode} {:.0} msg/s, ceiling {:.0} msg/s, ratio {:.3}",
        median(&mut modes),
        median(&mut ceils),
        median(&mut ratios)
    );
    Ok(())
}

/// The median of `v` (sorted in place); the mean of the middle two for
/// an even count.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
