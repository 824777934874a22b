//! `--compare N`: the measured mode (actors, `--raw` or `--tls`) and the
//! hand-written ceiling alternated N times in one process, each pass
//! printed, then the median ratio. `--tls` is also judged against plaintext
//! actors measured in the same pass. `scripts/ab.sh` reads the last line.

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{RunOpts, ceiling, modes::burst};

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
    for i in 0..n {
        let (rate, per_write) = if opts.raw {
            let r = crate::raw::run(recv, shape, opts.transport()?, false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        } else {
            let r = burst::measure(recv, opts, false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        };
        if opts.tls {
            // TLS is judged against plaintext measured in the same pass.
            let plain_opts = RunOpts {
                tls: false,
                ..opts.clone()
            };
            let p = burst::measure(recv, &plain_opts, false).await?;
            let r = rate / p.outcome.msgs_per_sec;
            println!(
                "pass {}: tls {rate:.0} msg/s, plaintext {:.0} msg/s, tls/plaintext {r:.3}",
                i + 1,
                p.outcome.msgs_per_sec
            );
            tls_ratios.push(r);
        }
        let (c, _) = ceiling::run(recv, shape, false, opts.echo_all).await?;
        let ratio = rate / c.msgs_per_sec;
        println!(
            "pass {}: {mode} {rate:.0} msg/s ({per_write:.1} msgs/write), ceiling {:.0} msg/s, ratio {ratio:.3}",
            i + 1,
            c.msgs_per_sec
        );
        ratios.push(ratio);
        modes.push(rate);
        ceils.push(c.msgs_per_sec);
    }
    if opts.tls {
        println!(
            "median of {n}: tls/plaintext {:.3}",
            median(&mut tls_ratios)
        );
    }
    println!(
        "median of {n}: {mode} {:.0} msg/s, ceiling {:.0} msg/s, ratio {:.3}",
        median(&mut modes),
        median(&mut ceils),
        median(&mut ratios)
    );
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
