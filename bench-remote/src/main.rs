//! `bench-remote`: Akka's 500,000-message remote burst benchmark, on this
//! project's transport, measured against a hand-written tokio ceiling of the
//! same pattern in the same run.
//!
//! # Layout
//! - `pattern`: the message pattern (warm-up, markers, windows), generic
//!   over what carries it.
//! - `report`: Akka-format lines and latency percentiles.
//! - `raw`: the pattern over `transport` frames.
//! - `ceiling`: the pattern over plain tokio sockets.
#![forbid(unsafe_code)]
// A binary: `pub` inside its modules means "used across modules".
#![allow(unreachable_pub)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod ceiling;
mod pattern;
mod raw;
mod report;

use anyhow::{Result, bail};
use clap::Parser;
use transport::TransportConfig;

use crate::pattern::Shape;

/// Akka's remote burst benchmark: a sender sends bursts of payload
/// messages, each followed by a marker that the receiver echoes; the next
/// burst goes when the echo returns. Both nodes run in this process over
/// loopback TCP.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Opt {
    /// Timed messages to send.
    #[arg(long, default_value_t = 500_000)]
    messages: u64,
    /// Payload messages per burst (one marker follows each burst).
    #[arg(long, default_value_t = 5000)]
    burst: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Also run the hand-written tokio ceiling of the same pattern and
    /// print the ratio.
    #[arg(long)]
    raw_ceiling: bool,
    /// Run the transport and the ceiling alternately this many times each
    /// (quietly) and report the median ratio.
    #[arg(long, value_name = "N")]
    compare: Option<usize>,
}

fn main() -> Result<()> {
    let opt = Opt::parse();
    if opt.burst == 0 {
        bail!("--burst must be at least 1");
    }
    if opt.messages == 0 {
        bail!("--messages must be at least 1");
    }
    let config = TransportConfig::default();
    if opt.payload + 1 > config.max_frame_size() {
        bail!(
            "--payload {} does not fit the maximum frame size {}",
            opt.payload,
            config.max_frame_size()
        );
    }
    let shape = Shape {
        messages: opt.messages,
        burst: opt.burst,
        payload: opt.payload,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        if let Some(n) = opt.compare {
            return compare(shape, config, n.max(1)).await;
        }
        let run = raw::run(shape, config, true).await?;
        print_raw_details(shape, &run);
        if opt.raw_ceiling {
            let (c, _) = ceiling::run(shape, false).await?;
            println!(
                "ceiling (hand-written tokio, same pattern, same process): {:.0} msg/s; transport/ceiling = {:.3}",
                c.msgs_per_sec,
                run.outcome.msgs_per_sec / c.msgs_per_sec
            );
        }
        Ok(())
    })
}

fn print_raw_details(shape: Shape, run: &raw::RawRun) {
    println!("{}", run.outcome.report.percentiles_line("Marker"));
    let sent = shape.messages + shape.burst;
    println!(
        "Payloads received {} of {} sent (warm-up included), dropped {}",
        run.received,
        sent,
        sent.saturating_sub(run.received)
    );
    println!(
        "Transport: {} bytes out in {} writes, {:.1} frames per write",
        run.stats.bytes_out,
        run.stats.writes,
        run.stats.frames_per_write()
    );
}

async fn compare(shape: Shape, config: TransportConfig, n: usize) -> Result<()> {
    let mut ratios = Vec::with_capacity(n);
    let mut raws = Vec::with_capacity(n);
    let mut ceils = Vec::with_capacity(n);
    for i in 0..n {
        let r = raw::run(shape, config.clone(), false).await?;
        let (c, _) = ceiling::run(shape, false).await?;
        let ratio = r.outcome.msgs_per_sec / c.msgs_per_sec;
        println!(
            "pass {}: transport {:.0} msg/s ({:.1} frames/write), ceiling {:.0} msg/s, ratio {:.3}",
            i + 1,
            r.outcome.msgs_per_sec,
            r.stats.frames_per_write(),
            c.msgs_per_sec,
            ratio
        );
        ratios.push(ratio);
        raws.push(r.outcome.msgs_per_sec);
        ceils.push(c.msgs_per_sec);
    }
    println!(
        "median of {n}: transport {:.0} msg/s, ceiling {:.0} msg/s, ratio {:.3}",
        median(&mut raws),
        median(&mut ceils),
        median(&mut ratios)
    );
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
