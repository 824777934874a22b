//! The default mode: Akka's burst benchmark on two actor systems embedded
//! in this process, one sender/receiver pair or `--pairs N` pairs sharing
//! the one connection between the nodes.

use std::time::Duration;

use anyhow::Result;
use tokio::runtime::Handle;

use crate::{
    RunOpts, faithful,
    faithful::Embedded,
    modes::output::{Run, finish},
    pattern::{Outcome, Shape},
    report::Report,
};

/// The default mode: one verbose run, then the details.
pub async fn run(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let run = measure(recv, opts, true).await?;
    finish(recv, opts, run).await
}

/// Runs the faithful pattern once on two embedded actor systems, one pair
/// or `opts.pairs` pairs at once; `verbose` prints the reference lines.
pub async fn measure(recv: &Handle, opts: &RunOpts, verbose: bool) -> Result<Run> {
    let shape = opts.shape();
    let stall = Duration::from_secs(opts.stall_timeout);
    let emb = Embedded::start(
        recv,
        opts.pairs,
        opts.tls,
        !opts.no_message_runs,
        &opts.transport()?,
    )
    .await?;
    let result = if opts.pairs == 1 {
        faithful::run_sender(
            &emb.sender_sys,
            emb.receivers[0].clone(),
            shape,
            verbose,
            stall,
            opts.echo_all,
        )
        .await
    } else {
        run_pairs(&emb, shape, stall, verbose, opts.echo_all).await
    };
    let stats = emb.sender_sys.remote_stats();
    emb.shutdown(recv).await;
    let outcome = result?;
    Ok(Run {
        mode: if opts.tls { "actors-tls" } else { "actors" },
        sent: shape.messages * opts.pairs as u64,
        received: outcome.received,
        outcome,
        stats,
    })
}

/// Runs every pair at once and merges them into one outcome.
async fn run_pairs(
    emb: &Embedded,
    shape: Shape,
    stall: Duration,
    verbose: bool,
    echo_all: bool,
) -> Result<Outcome> {
    let mut set = tokio::task::JoinSet::new();
    for r in &emb.receivers {
        let sys = emb.sender_sys.clone();
        let r = r.clone();
        set.spawn(
            async move { faithful::run_sender(&sys, r, shape, false, stall, echo_all).await },
        );
    }
    let mut total = Shape {
        messages: shape.messages * emb.receivers.len() as u64,
        ..shape
    };
    total.in_flight = shape.in_flight;
    let mut merged = Report::new(total);
    let mut per_message = echo_all.then(|| Report::new(total));
    let mut received = 0;
    // The pairs' timed phases run concurrently; the longest is the wall time
    // of the run (warm-ups and setup excluded, as for one pair).
    let mut elapsed = Duration::ZERO;
    while let Some(r) = set.join_next().await {
        let o = r??;
        elapsed = elapsed.max(o.elapsed);
        merged.merge(&o.report);
        if let (Some(all), Some(one)) = (&mut per_message, &o.per_message) {
            all.merge(one);
        }
        received += o.received;
    }
    if verbose {
        println!(
            "{} pairs sharing one connection, {} messages each:",
            emb.receivers.len(),
            shape.messages
        );
        merged.print_summary(elapsed);
    }
    Ok(Outcome {
        elapsed,
        msgs_per_sec: total.messages as f64 / elapsed.as_secs_f64(),
        report: merged,
        received,
        per_message,
    })
}
