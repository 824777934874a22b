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
mod plot;
mod raw;
mod report;
mod tls;

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

#[derive(Debug, Clone, Args)]
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
    /// Echo every payload back and measure each message's round trip (the
    /// request-response pattern gRPC-style systems are measured with).
    #[arg(long, global = true)]
    echo_all: bool,
    /// Constant-rate mode (wrk2 style): send at R msg/s on a fixed schedule
    /// and report latency from each message's scheduled time.
    #[arg(long, value_name = "R", global = true)]
    rate: Option<f64>,
    /// Print a table of msg/s and p99 for payloads 100 B .. 50 KB × pairs
    /// 1, 10, 100 (messages per cell capped at 128 MiB of payload).
    #[arg(long, global = true)]
    sweep: bool,
    /// Write throughput over time and the latency percentile curve as SVG.
    #[arg(long, value_name = "FILE.svg", global = true)]
    plot: Option<std::path::PathBuf>,
    /// Secure the link with TLS 1.3 and mutual authentication. Embedded:
    /// certificates generated at start. Two-process mode: with
    /// `--tls-dir DIR`, each side reads `DIR/<node>.pem`, `.key` and
    /// `DIR/ca.pem` (node `receiver` or `sender`; see `cargo run -p
    /// transport --example gen_certs -- DIR receiver sender`).
    #[arg(long, global = true)]
    tls: bool,
    /// Folder of PEM files for `--tls` in two-process mode.
    #[arg(long, value_name = "DIR", global = true)]
    tls_dir: Option<std::path::PathBuf>,
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
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            bail!("--rate must be a positive number of messages per second");
        }
        if self.tls_dir.is_some() && !self.tls {
            bail!("--tls-dir needs --tls");
        }
        if self.raw && (self.echo_all || self.rate.is_some() || self.sweep || self.tls) {
            bail!(
                "--raw measures the transport's burst pattern only; drop --echo-all/--rate/--sweep"
            );
        }
        // Envelope and bincode overhead stay well under 64 bytes.
        if !self.raw && self.payload + 64 > actors::LARGE_MESSAGE_THRESHOLD {
            bail!(
                "--payload {} is over the large-message threshold ({} bytes with the envelope): \
                 such messages travel on the large-message lane, which the small markers \
                 overtake, so a burst's echo would not mean its payloads arrived; \
                 use --raw for larger frames",
                self.payload,
                actors::LARGE_MESSAGE_THRESHOLD
            );
        }
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
            Some(Cmd::Receiver { bind }) => serve_receiver(*bind, &cli.run).await,
            Some(Cmd::Sender { connect }) => run_remote_sender(&recv, *connect, &cli.run).await,
            None if cli.run.sweep => sweep(&recv, &cli.run).await,
            None if cli.run.rate.is_some() => run_rate(&recv, &cli.run).await,
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
    let emb = Embedded::start(recv, opts.pairs, opts.tls).await?;
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
        run.stats.frames_per_write()
    );
    if opts.tls {
        // Each write hands rustls a whole batch, which it cuts into records
        // of at most 16 KiB: batching survives encryption.
        println!(
            "TLS: {} batches of {:.0} bytes on average, at least {} records of <= 16 KiB ({:.0} messages per record)",
            run.stats.writes,
            run.stats.bytes_out as f64 / run.stats.writes.max(1) as f64,
            run.stats.bytes_out.div_ceil(16 * 1024),
            run.stats.frames_out as f64 / run.stats.bytes_out.div_ceil(16 * 1024).max(1) as f64
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
        ceiling = Some(c.msgs_per_sec);
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
            let r = raw::run(recv, shape, TransportConfig::default(), false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        } else {
            let r = measure_embedded(recv, opts, false).await?;
            (r.outcome.msgs_per_sec, r.stats.frames_per_write())
        };
        if opts.tls {
            // TLS is judged against plaintext measured in the same pass.
            let plain_opts = RunOpts {
                tls: false,
                ..opts.clone()
            };
            let p = measure_embedded(recv, &plain_opts, false).await?;
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

/// The system config of a two-process node.
fn process_config(opts: &RunOpts, node: &str) -> Result<actors::SystemConfig> {
    let mut config = actors::SystemConfig::default();
    config.set_resolve_timeout(Duration::from_secs(opts.stall_timeout.min(10)));
    if opts.tls {
        let dir = opts
            .tls_dir
            .as_deref()
            .context("--tls in two-process mode needs --tls-dir DIR with the certificates")?;
        config.set_tls(tls::from_dir(dir, node));
    }
    Ok(config)
}

async fn serve_receiver(bind: SocketAddr, opts: &RunOpts) -> Result<()> {
    let config = process_config(opts, "receiver")?;
    let sys = actors::ActorSystem::with_config("bench", Some(bind), config)
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
    let config = process_config(opts, "sender")?;
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
        opts.echo_all,
    )
    .await;
    let stats = sys.remote_stats();
    sys.shutdown().await;
    let outcome = result?;
    let run = Run {
        mode: if opts.tls {
            "actors-two-process-tls"
        } else {
            "actors-two-process"
        },
        sent: shape.messages,
        received: outcome.received,
        outcome,
        stats,
    };
    finish(recv, opts, run).await
}

async fn run_rate(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let rate = opts.rate.expect("checked by the caller");
    let shape = opts.shape();
    let emb = Embedded::start(recv, 1, opts.tls).await?;
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

/// Payload sizes and pair counts of `--sweep`.
const SWEEP_PAYLOADS: [usize; 6] = [100, 1000, 5000, 10_000, 25_000, 50_000];
const SWEEP_PAIRS: [usize; 3] = [1, 10, 100];
/// Payload bytes per sweep cell, so large payloads finish in seconds.
const SWEEP_BYTES: u64 = 128 * 1024 * 1024;
/// Most payload bytes in one burst.
const SWEEP_BURST_BYTES: u64 = 8 * 1024 * 1024;

async fn sweep(recv: &Handle, opts: &RunOpts) -> Result<()> {
    let mut rows = Vec::new();
    println!(
        "{:>8} {:>6} {:>10} {:>14} {:>10} {:>10}",
        "payload", "pairs", "messages", "msg/s", "MB/s", "p99 us"
    );
    for &payload in &SWEEP_PAYLOADS {
        for &pairs in &SWEEP_PAIRS {
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
            let run = measure_embedded(recv, &cell, false).await?;
            let r = run
                .outcome
                .per_message
                .as_ref()
                .unwrap_or(&run.outcome.report);
            let mbps = run.outcome.msgs_per_sec * payload as f64 / 1e6;
            println!(
                "{payload:>8} {pairs:>6} {:>10} {:>14.0} {mbps:>10.1} {:>10}",
                per_pair * pairs as u64,
                run.outcome.msgs_per_sec,
                r.percentile_us(0.99)
            );
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
    if opts.json {
        println!("{}", serde_json::json!({ "mode": "sweep", "rows": rows }));
    }
    Ok(())
}
