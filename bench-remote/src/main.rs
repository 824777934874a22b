//! `bench-remote`: Akka's 500,000-message remote burst benchmark on this
//! project's actors and transport, measured against a hand-written tokio
//! ceiling of the same pattern in the same run.
//!
//! # Layout
//! - `main.rs`: the options, their validation and the dispatch to a mode.
//! - `modes/`: one file per mode (`burst` the default, `raw`, `compare`,
//!   `rate`, `sweep`, `two_process`), plus `output`, the lines a single run
//!   prints after the reference lines.
//! - `pattern`: the message pattern (warm-up, markers, windows) as a state
//!   machine, driven by an actor, a raw-transport task or the ceiling.
//! - `faithful`: the pattern on sender and receiver actors.
//! - `raw`: the pattern over `transport` frames, no actors.
//! - `ceiling`: the pattern over plain tokio sockets.
//! - `report`: Akka-format lines and latency percentiles.
//! - `plot`: `--plot`'s SVG; `tls`: certificates for `--tls`.
#![forbid(unsafe_code)]
// A binary: `pub` inside its modules means "used across modules".
#![allow(unreachable_pub)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod ceiling;
mod faithful;
mod modes;
mod pattern;
mod plot;
mod raw;
mod report;
mod tls;

use std::net::SocketAddr;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};
use transport::TransportConfig;

use crate::pattern::Shape;

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
            Some(Cmd::Receiver { bind }) => {
                modes::two_process::serve_receiver(*bind, &cli.run).await
            }
            Some(Cmd::Sender { connect }) => {
                modes::two_process::run_sender(&recv, *connect, &cli.run).await
            }
            None if cli.run.sweep => modes::sweep::run(&recv, &cli.run).await,
            None if cli.run.rate.is_some() => modes::rate::run(&recv, &cli.run).await,
            None if cli.run.compare.is_some() => modes::compare::run(&recv, &cli.run).await,
            None if cli.run.raw => modes::raw::run(&recv, &cli.run, config).await,
            None => modes::burst::run(&recv, &cli.run).await,
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
