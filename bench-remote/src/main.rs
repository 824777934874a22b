//! `bench-remote`: Akka's 500,000-message remote burst benchmark on this
//! project's actors and transport, measured against a hand-written tokio
//! ceiling of the same pattern in the same run.
//!
//! # Layout
//! - `pattern`: the message pattern (warm-up, markers, windows) as a state
//!   machine, driven by an actor, a raw-transport task or the ceiling.
//! - `report`: Akka-format lines and latency percentiles.
//! - `faithful`: the default mode, sender and receiver actors.
//! - `raw`: the pattern over `transport` frames, no actors.
//! - `ceiling`: the pattern over plain tokio sockets.
#![forbid(unsafe_code)]
// A binary: `pub` inside its modules means "used across modules".
#![allow(unreachable_pub)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod ceiling;
mod faithful;
mod pattern;
mod raw;
mod report;

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tokio::runtime::Handle;
use transport::{ConnStats, TransportConfig};

use crate::{
    faithful::{Embedded, ToReceiver},
    pattern::{Outcome, Shape},
    report::Report,
};

/// Akka's remote burst benchmark: a sender actor sends bursts of payload
/// messages to a receiver actor on another node, each burst followed by a
/// marker that the receiver echoes; the next burst goes when the echo
/// returns. By default both nodes run in this process over loopback TCP.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve a receiver actor at `tcp://bench@ADDR/user/receiver` until
    /// stopped (Ctrl-C); any number of senders, one after another or at once.
    Receiver {
        /// Address to listen on.
        #[arg(long)]
        bind: SocketAddr,
    },
    /// Run the benchmark against a receiver started with `receiver`.
    Sender {
        /// The receiver's address.
        #[arg(long)]
        connect: SocketAddr,
    },
}

#[derive(Debug, Args)]
struct RunOpts {
    /// Timed messages to send.
    #[arg(long, default_value_t = 500_000, global = true)]
    messages: u64,
    /// Payload messages per burst (one marker follows each burst).
    #[arg(long, default_value_t = 5000, global = true)]
    burst: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 100, global = true)]
    payload: usize,
    /// Bursts outstanding at once (Artery's MaxThroughputSpec keeps 3).
    #[arg(long, default_value_t = 1, global = true)]
    in_flight: u64,
    /// Sender/receiver pairs in parallel, each its own pair of actors; all
    /// pairs share the one connection between the two nodes.
    #[arg(long, default_value_t = 1, global = true)]
    pairs: usize,
    /// Also run the hand-written tokio ceiling of the same pattern in this
    /// process and print the ratio.
    #[arg(long, global = true)]
    raw_ceiling: bool,
    /// Print one JSON object with every figure as the last line.
    #[arg(long, global = true)]
    json: bool,
    /// Measure the raw transport (frames, no actors) instead of actors.
    #[arg(long, global = true)]
    raw: bool,
    /// Run the mode and the ceiling alternately N times each (quietly) and
    /// report the median ratio.
    #[arg(long, value_name = "N", global = true)]
    compare: Option<usize>,
    /// How the two embedded nodes share the cores: `split` gives each node
    /// its own single-worker tokio runtime (like two processes, the
    /// default); `shared` runs both in one 2-worker runtime.
    #[arg(long, value_enum, default_value_t = Layout::Split, global = true)]
    layout: Layout,
    /// Seconds without an echo after which a sender gives up.
    #[arg(long, default_value_t = 10, global = true)]
    stall_timeout: u64,
}

impl RunOpts {
    fn shape(&self) -> Shape {
        Shape {
            messages: self.messages,
            burst: self.burst,
            payload: self.payload,
            in_flight: self.in_flight,
        }
    }

    fn validate(&self, config: &TransportConfig) -> Result<()> {
        if self.burst == 0 {
            bail!("--burst must be at least 1");
        }
        if self.messages == 0 {
            bail!("--messages must be at least 1");
        }
        if self.in_flight == 0 {
            bail!("--in-flight must be at least 1");
        }
        if self.pairs == 0 {
            bail!("--pairs must be at least 1");
        }
        // Envelope and bincode overhead stay well under 64 bytes.
        if self.payload + 64 > config.max_frame_size() {
            bail!(
                "--payload {} does not fit the maximum frame size {} (with 64 bytes of envelope)",
                self.payload,
                config.max_frame_size()
            );
        }
        Ok(())
    }
}

/// Where the two embedded nodes run.
///
/// With one shared multi-worker runtime, tokio keeps a task woken by
/// another task on the waker's worker (its LIFO slot, which other workers
/// cannot steal from), so the whole sender → writer → reader → actor chain
/// ends up on one core: measured, 99.5 % of samples on one worker thread.
/// Giving each node its own runtime makes the two nodes use two cores, as
/// two processes would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Layout {
    /// Each node on its own single-worker runtime.
    Split,
    /// Both nodes on one 2-worker runtime.
    Shared,
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
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    let config = TransportConfig::default();
    cli.run.validate(&config)?;
    let (rt, recv_rt) = match (cli.run.layout, &cli.cmd) {
        (Layout::Split, None) => (one_worker("bench-send")?, Some(one_worker("bench-recv")?)),
        _ => (
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?,
            None,
        ),
    };
    let recv = recv_rt
        .as_ref()
        .map_or_else(|| rt.handle().clone(), |r| r.handle().clone());
    rt.block_on(async move {
        match &cli.cmd {
            Some(Cmd::Receiver { bind }) => serve_receiver(*bind).await,
            Some(Cmd::Sender { connect }) => run_remote_sender(&recv, *connect, &cli.run).await,
            None if cli.run.compare.is_some() => compare(&recv, &cli.run).await,
            None if cli.run.raw => run_raw(&recv, &cli.run, config).await,
            None => run_embedded(&recv, &cli.run).await,
        }
    })
}

fn one_worker(name: &str) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()?)
}

/// The run's result in one shape for printing.
struct Run {
    mode: &'static str,
    outcome: Outcome,
    sent: u64,
    received: u64,
    stats: ConnStats,
}

async fn measure_embedded(recv: &Handle, opts: &RunOpts, verbose: bool) -> Result<Run> {
    let shape = opts.shape();
    let stall = Duration::from_secs(opts.stall_timeout);
    let emb = Embedded::start(recv, opts.pairs).await?;
    let result = if opts.pairs == 1 {
        faithful::run_sender(
            &emb.sender_sys,
            emb.receivers[0].clone(),
            shape,
            verbose,
            stall,
        )
        .await
    } else {
        run_pairs(&emb, shape, stall, verbose).await
    };
    let stats = emb.sender_sys.remote_stats();
    emb.shutdown(recv).await;
    let outcome = result?;
    Ok(Run {
        mode: "actors",
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
) -> Result<Outcome> {
    let start = std::time::Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for r in &emb.receivers {
        let sys = emb.sender_sys.clone();
        let r = r.clone();
        set.spawn(async move { faithful::run_sender(&sys, r, shape, false, stall).await });
    }
    let mut total = Shape {
        messages: shape.messages * emb.receivers.len() as u64,
        ..shape
    };
    total.in_flight = shape.in_flight;
    let mut merged = Report::new(total);
    let mut received = 0;
    while let Some(r) = set.join_next().await {
        let o = r??;
        merged.merge(&o.report);
        received += o.received;
    }
    let elapsed = start.elapsed();
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
    })
}

async fn run_embedded(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let run = measure_embedded(recv, opts, true).await?;
    finish(recv, opts, run).await
}

async fn run_raw(recv: &Handle, opts: &RunOpts, config: TransportConfig) -> Result<()> {
    let shape = opts.shape();
    let r = raw::run(recv, shape, config, true).await?;
    let run = Run {
        mode: "raw-transport",
        sent: shape.messages + shape.burst,
        received: r.received,
        outcome: r.outcome,
        stats: r.stats,
    };
    finish(recv, opts, run).await
}

/// Prints the details after the reference lines, the ceiling if asked, and
/// the JSON line.
async fn finish(recv: &Handle, opts: &RunOpts, run: Run) -> Result<()> {
    let what = if opts.in_flight > 1 || run.mode != "actors" {
        "Marker"
    } else {
        "Marker (burst)"
    };
    println!("{}", run.outcome.report.percentiles_line(what));
    let dropped = run.sent.saturating_sub(run.received);
    println!(
        "Payloads received {} of {} sent, dropped {}",
        run.received, run.sent, dropped
    );
    println!(
        "Transport: {} bytes out in {} writes, {:.1} messages per write",
        run.stats.bytes_out,
        run.stats.writes,
        run.stats.frames_per_write()
    );
    let mut ceiling = None;
    if opts.raw_ceiling {
        let (c, _) = ceiling::run(recv, opts.shape(), false).await?;
        println!(
            "Ceiling (hand-written tokio, same pattern, same process): {:.0} msg/s; {} / ceiling = {:.3}",
            c.msgs_per_sec,
            run.mode,
            run.outcome.msgs_per_sec / c.msgs_per_sec
        );
        ceiling = Some(c.msgs_per_sec);
    }
    if opts.json {
        let r = &run.outcome.report;
        let f = Figures {
            mode: run.mode,
            messages: opts.messages,
            burst: opts.burst,
            payload: opts.payload,
            in_flight: opts.in_flight,
            pairs: opts.pairs,
            elapsed_ms: run.outcome.elapsed.as_millis(),
            msgs_per_sec: run.outcome.msgs_per_sec,
            max_rtt_ms: r.max_rtt().as_millis(),
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
            msgs_per_write: run.stats.frames_per_write(),
            ceiling_msgs_per_sec: ceiling,
            ratio: ceiling.map(|c| run.outcome.msgs_per_sec / c),
        };
        println!("{}", serde_json::to_string(&f)?);
    }
    Ok(())
}

async fn compare(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let n = opts.compare.unwrap_or(5).max(1);
    let shape = opts.shape();
    let mut ratios = Vec::with_capacity(n);
    let mut modes = Vec::with_capacity(n);
    let mut ceils = Vec::with_capacity(n);
    let mode = if opts.raw { "raw transport" } else { "actors" };
    for i in 0..n {
        let (rate, per_write) = if opts.raw {
            let r = raw::run(recv, shape, TransportConfig::default(), false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        } else {
            let r = measure_embedded(recv, opts, false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        };
        let (c, _) = ceiling::run(recv, shape, false).await?;
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
    if v.len() % 2 == 0 {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}

async fn serve_receiver(bind: SocketAddr) -> Result<()> {
    let sys = actors::ActorSystem::remote("bench", bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    sys.spawn_named("receiver", faithful::Receiver::new(count))?;
    println!("Receiver ready at {}", faithful::receiver_path(sys.node()));
    tokio::signal::ctrl_c().await?;
    sys.shutdown().await;
    Ok(())
}

async fn run_remote_sender(recv: &Handle, connect: SocketAddr, opts: &RunOpts) -> Result<()> {
    let bind: SocketAddr = if connect.ip().is_loopback() {
        "127.0.0.1:0".parse()?
    } else if connect.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let mut config = actors::SystemConfig::default();
    config.set_resolve_timeout(Duration::from_secs(opts.stall_timeout.min(10)));
    let sys = actors::ActorSystem::with_config("bench-sender", Some(bind), config).await?;
    let path = faithful::receiver_path(&format!("bench@{connect}"));
    let receiver = sys
        .resolve::<ToReceiver>(&path)
        .await
        .with_context(|| format!("cannot reach the receiver at {path}"))?;
    let shape = opts.shape();
    let result = faithful::run_sender(
        &sys,
        receiver,
        shape,
        true,
        Duration::from_secs(opts.stall_timeout),
    )
    .await;
    let stats = sys.remote_stats();
    sys.shutdown().await;
    let outcome = result?;
    let run = Run {
        mode: "actors-two-process",
        sent: shape.messages,
        received: outcome.received,
        outcome,
        stats,
    };
    finish(recv, opts, run).await
}
