//! `bench-remote`: Akka's 500,000-message remote burst benchmark on this
//! project's actors and transport, measured against a hand-written tokio
//! ceiling of the same pattern in the same run.
//!
//! # Layout
//! - `main.rs`: the options, their validation and the dispatch to a mode.
//! - `modes/`: one file per mode (`burst` the default, `raw`, `compare`,
//!   `rate`, `sweep`, `two_process`, and the `cluster` and `sharding`
//!   subcommands), plus `output`, the lines a single run prints after the
//!   reference lines.
//! - `pacer`: the `--rate` generator's schedule and its lateness.
//! - `pattern`: the message pattern (warm-up, markers, windows) as a state
//!   machine, driven by an actor, a raw-transport task or the ceiling.
//! - `faithful`: the pattern on sender and receiver actors.
//! - `raw`: the pattern over `transport` frames, no actors.
//! - `ceiling`: the pattern over plain tokio sockets.
//! - `report`: Akka-format lines and latency percentiles.
//! - `plot`: `--plot`'s SVG; `tls`: certificates for `--tls`.
//! - `exporter`: `--metrics-addr`, the metrics over HTTP.
//! - `progress`: progress bars of long runs, on a terminal only.
#![forbid(unsafe_code)]
// A binary: `pub` inside its modules means "used across modules".
#![allow(unreachable_pub)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod ceiling;
mod exporter;
mod faithful;
mod modes;
mod pacer;
mod pattern;
mod plot;
mod progress;
mod raw;
mod report;
mod tls;

use std::net::SocketAddr;

use anyhow::{Context, Result, bail};
use clap::{
    ArgMatches, Args, Command, CommandFactory, FromArgMatches, Parser, Subcommand,
    builder::StyledStr,
    error::{ContextKind, ContextValue, ErrorKind},
    parser::ValueSource,
};
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
    /// Serve a receiver actor at `tcp://receiver@ADDR/user/receiver` until
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
    /// Cluster membership in this process, each node on its own runtime:
    /// time until every node sees N members up, membership bytes per
    /// second per node, time until an abruptly stopped member is suspect
    /// on all others, time from its restart until a group ask reaches it,
    /// time until a silent node is seen down by all. With
    /// `--json`, one JSON line per size.
    Cluster {
        /// Cluster sizes to measure, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "5,20,50")]
        nodes: Vec<usize>,
        /// Membership probe period in milliseconds (the suspect timeout
        /// is five periods).
        #[arg(long, default_value_t = 200)]
        probe_ms: u64,
    },
    /// Cluster sharding in this process: what `entity_ref`'s routing
    /// costs, and how shards move when a node leaves, joins or is killed.
    ///
    /// Each node runs on its own runtime over loopback, and every node
    /// hosts one entity type. From node 0: tells
    /// (`--messages`) and asks (`--asks`) to the entities through
    /// `entity_ref` against the same traffic to the entities' own refs
    /// looked up once, and the ratio; then, while a tell to every entity
    /// goes out each `--round-ms`, a graceful leave of the last node, a
    /// join of a new one, and a kill of node 1 (its runtime dropped: no
    /// leave, no goodbye). For each: the time until the node's shards are
    /// active elsewhere (join: until the shards it takes are active on
    /// it), `sent = delivered + dropped + uncounted` for the tells sent
    /// meanwhile (dropped: counted by the regions; uncounted: lost with
    /// the killed node), and the most messages buffered at once. With
    /// `--json`, one JSON line.
    Sharding {
        /// Nodes at the start (at least 3).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Entities, spread over 100 shards.
        #[arg(long, default_value_t = 1000)]
        entities: usize,
        /// Asks timed each way, one at a time.
        #[arg(long, default_value_t = 20_000)]
        asks: u64,
        /// The cluster's stable-after (how long a killed node is suspect
        /// before it is downed) and sharding's down-removal margin, in
        /// milliseconds.
        #[arg(long, default_value_t = 2000)]
        stable_ms: u64,
        /// Milliseconds between rounds of tells to every entity while
        /// members change.
        #[arg(long, default_value_t = 50)]
        round_ms: u64,
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
    /// and report latency from each message's scheduled time, and how late
    /// the generator itself sent. With `--raw-ceiling` or `--compare N`,
    /// a hand-written tokio ping-pong runs the same schedule.
    #[arg(long, value_name = "R", global = true)]
    rate: Option<f64>,
    /// With `--rate`: microseconds before each due time at which the
    /// generator stops sleeping (tokio's timer ticks every millisecond)
    /// and yields to the runtime until the time comes [default: 2000].
    /// 0 sleeps all the way, which sends up to a tick late.
    #[arg(long, value_name = "US", requires = "rate", global = true)]
    spin_us: Option<u64>,
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
    /// Read the nodes' shared secret from FILE (created with a random
    /// secret if missing; must not be readable by group or others), instead
    /// of `ACTORS_COOKIE` or `~/.actors.cookie`. Two processes with
    /// different secrets refuse each other.
    #[arg(long, value_name = "FILE", global = true)]
    secret_file: Option<std::path::PathBuf>,
    /// How the two embedded nodes share the cores: `split` gives each node
    /// its own single-worker tokio runtime (like two processes, the
    /// default); `shared` runs both in one 2-worker runtime.
    #[arg(long, value_enum, default_value_t = Layout::Split, global = true)]
    layout: Layout,
    /// Send every message in its own envelope, as nodes before message
    /// runs did (`SystemConfig::set_message_runs(false)` on both nodes),
    /// to compare the two in one binary.
    #[arg(long, global = true)]
    no_message_runs: bool,
    /// Seconds without an echo after which a sender gives up.
    #[arg(long, default_value_t = 10, global = true)]
    stall_timeout: u64,
    /// Serve the nodes' metrics (Prometheus text format, any path) on
    /// ADDR while the benchmark runs; port 0 picks a free port, and the
    /// address is printed on stderr. Actors then also time each message
    /// they handle (the handling-time histogram), which costs a little.
    #[arg(long, value_name = "ADDR", global = true)]
    metrics_addr: Option<SocketAddr>,
}

impl RunOpts {
    /// The transport settings of every node: the defaults, with the shared
    /// secret from `--secret-file` if given.
    fn transport(&self) -> Result<TransportConfig> {
        let mut config = TransportConfig::default();
        if let Some(path) = &self.secret_file {
            let secret = transport::load_cookie_file(path)
                .with_context(|| format!("--secret-file {}", path.display()))?;
            config.set_shared_secret(Some(secret))?;
        }
        Ok(config)
    }

    /// The `--rate` generator's spin stretch.
    fn spin(&self) -> std::time::Duration {
        self.spin_us
            .map_or(pacer::DEFAULT_SPIN, std::time::Duration::from_micros)
    }

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
        if self.compare == Some(0) {
            bail!("--compare must be at least 1");
        }
        if self.tls_dir.is_some() && !self.tls {
            bail!("--tls-dir needs --tls");
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

/// Options that cannot be used together, and what to do instead. One of
/// each pair would be ignored, or the pair's figure would mean nothing.
/// They become clap `conflicts_with`, so clap refuses them before anything
/// runs (an option left at its default conflicts with nothing); the third
/// column is the error's tip.
const EXCLUSIVE: &[(&str, &str, &str)] = &[
    (
        "sweep",
        "rate",
        "--sweep measures bursts and --rate a fixed schedule; run them one at a time",
    ),
    (
        "sweep",
        "compare",
        "--sweep measures each cell once; to compare one cell with the ceiling, \
         run --compare N with its --payload and --pairs",
    ),
    (
        "sweep",
        "raw",
        "--sweep measures actors; to measure the transport alone, run --raw --payload N per size",
    ),
    (
        "sweep",
        "raw_ceiling",
        "--sweep runs no ceiling; run --raw-ceiling with one cell's --payload and --pairs",
    ),
    (
        "sweep",
        "plot",
        "--sweep prints a table, not one run to plot; run --plot with one cell's --payload and --pairs",
    ),
    (
        "sweep",
        "payload",
        "--sweep sets each cell's payload (100 B to 50 KB); drop --payload, or drop --sweep to measure one size",
    ),
    (
        "sweep",
        "pairs",
        "--sweep sets each cell's pairs (1, 10, 100); drop --pairs, or drop --sweep to measure one count",
    ),
    ("rate", "raw", "--rate runs on actors; drop --raw"),
    (
        "rate",
        "pairs",
        "--rate runs one sender on one schedule; drop --pairs",
    ),
    (
        "rate",
        "burst",
        "--rate sends each message at its scheduled time, not in bursts; drop --burst",
    ),
    (
        "rate",
        "in_flight",
        "--rate sends each message at its scheduled time, not in bursts; drop --in-flight",
    ),
    (
        "rate",
        "echo_all",
        "--rate already echoes every message; drop --echo-all",
    ),
    (
        "compare",
        "raw_ceiling",
        "--compare runs the ceiling in every pass already; drop --raw-ceiling",
    ),
    (
        "compare",
        "json",
        "--compare prints text lines only; for JSON run once with --json --raw-ceiling",
    ),
    (
        "compare",
        "plot",
        "--compare runs quietly and plots nothing; run once with --plot",
    ),
    (
        "raw",
        "echo_all",
        "the raw transport run echoes markers only; drop --echo-all, or drop --raw for actors",
    ),
    (
        "raw",
        "tls",
        "the raw transport run is plaintext; drop --tls, or drop --raw for actors over TLS",
    ),
    (
        "raw",
        "pairs",
        "the raw transport run has one sender on one connection; drop --pairs, or drop --raw for actor pairs",
    ),
    (
        "raw",
        "stall_timeout",
        "the raw transport run has no stall timeout; drop --stall-timeout",
    ),
];

/// Options of the embedded modes that two-process mode would ignore: the
/// `sender` runs the default burst pattern, one pair, and each process has
/// its own runtime.
const EMBEDDED_ONLY: &[&str] = &["pairs", "raw", "compare", "rate", "sweep", "layout"];

/// Options of the sending side that `receiver` would ignore: it echoes
/// whatever its senders send.
const SENDER_ONLY: &[&str] = &[
    "messages",
    "burst",
    "payload",
    "in_flight",
    "echo_all",
    "raw_ceiling",
    "json",
    "plot",
];

/// Options of the burst pattern that `sharding` would ignore: it sends
/// its own messages between nodes it starts with their own secret.
const SHARDING_IGNORES: &[&str] = &[
    "burst",
    "payload",
    "in_flight",
    "echo_all",
    "raw_ceiling",
    "plot",
    "tls",
    "secret_file",
    "no_message_runs",
    "stall_timeout",
];

/// The clap command with [`EXCLUSIVE`] applied and listed under `--help`.
fn command() -> Command {
    let long = |id: &str| format!("--{}", id.replace('_', "-"));
    let mut refused = String::from("Refused together (the error says what to do instead):");
    for (i, &(a, b, _)) in EXCLUSIVE.iter().enumerate() {
        if i == 0 || EXCLUSIVE[i - 1].0 != a {
            refused.push_str(&format!("\n  {} with {}", long(a), long(b)));
        } else {
            refused.push_str(&format!(", {}", long(b)));
        }
    }
    let list = |ids: &[&str]| ids.iter().map(|id| long(id)).collect::<Vec<_>>().join(", ");
    refused.push_str(&format!(
        "\n  receiver, sender, cluster, sharding with {}\n  receiver with {}\n  sharding with {}\n  \
         --tls-dir without receiver or sender",
        list(EMBEDDED_ONLY),
        list(SENDER_ONLY),
        list(SHARDING_IGNORES)
    ));
    EXCLUSIVE
        .iter()
        .fold(Cli::command(), |cmd, &(a, b, _)| {
            cmd.mut_arg(a, |arg| arg.conflicts_with(b))
        })
        .after_long_help(refused)
}

/// Parses the command line; refused combinations exit with clap's usage
/// error and a tip saying what to do instead.
fn parse() -> Cli {
    let mut cmd = command();
    let parsed = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .map_err(with_tips)
        .and_then(|m| refuse_ignored(&mut cmd, &m).map(|()| m))
        .and_then(|m| Cli::from_arg_matches(&m).map_err(|e| e.format(&mut cmd)));
    parsed.unwrap_or_else(|e| e.exit())
}

/// Adds the [`EXCLUSIVE`] tips of the options a clap conflict names.
fn with_tips(mut err: clap::Error) -> clap::Error {
    if err.kind() != ErrorKind::ArgumentConflict {
        return err;
    }
    // clap shows an option as `--long-name <VALUE>`; its id is the field.
    let id = |shown: &str| {
        let long = shown.split(' ').next().unwrap_or_default();
        long.trim_start_matches("--").replace('-', "_")
    };
    let named: Vec<String> = [ContextKind::InvalidArg, ContextKind::PriorArg]
        .into_iter()
        .flat_map(|kind| match err.get(kind) {
            Some(ContextValue::String(s)) => vec![id(s)],
            Some(ContextValue::Strings(v)) => v.iter().map(|s| id(s)).collect(),
            _ => Vec::new(),
        })
        .collect();
    let tips: Vec<StyledStr> = EXCLUSIVE
        .iter()
        .filter(|(a, b, _)| named.iter().any(|n| n == a) && named.iter().any(|n| n == b))
        .map(|&(_, _, tip)| tip.into())
        .collect();
    if !tips.is_empty() {
        err.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    }
    err
}

/// Refuses run options that the chosen subcommand (or the embedded default)
/// would ignore. clap has no "conflicts with a subcommand" for an option
/// that every subcommand inherits, so this looks at what the command line
/// set.
fn refuse_ignored(cmd: &mut Command, m: &ArgMatches) -> Result<(), clap::Error> {
    let Some((name, sub)) = m.subcommand() else {
        if given(m, "tls_dir") {
            return Err(cmd.error(
                ErrorKind::ArgumentConflict,
                "--tls-dir is read by `receiver` and `sender` only; \
                 embedded --tls generates its certificates, so drop --tls-dir",
            ));
        }
        return Ok(());
    };
    let sender_only = if name == "receiver" { SENDER_ONLY } else { &[] };
    let sharding_ignores = if name == "sharding" {
        SHARDING_IGNORES
    } else {
        &[]
    };
    for &id in EMBEDDED_ONLY
        .iter()
        .chain(sender_only)
        .chain(sharding_ignores)
    {
        if !given(sub, id) {
            continue;
        }
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == id)
            .expect("the tables name RunOpts fields");
        let long = format!("--{}", arg.get_long().expect("every run option is long"));
        let tip = if sender_only.contains(&id) {
            format!("a receiver echoes whatever its senders send; pass {long} to `sender`")
        } else if matches!(name, "cluster" | "sharding") {
            format!("`{name}` starts its own nodes and sends its own messages; drop {long}")
        } else if id == "layout" {
            "each process has its own runtime; --layout places the two embedded nodes".to_owned()
        } else {
            format!(
                "two-process mode runs the default burst pattern with one pair; \
                 run {long} without a subcommand (both nodes in this process)"
            )
        };
        let mut err = clap::Error::new(ErrorKind::ArgumentConflict).with_cmd(cmd);
        err.insert(
            ContextKind::InvalidSubcommand,
            ContextValue::String(name.to_owned()),
        );
        err.insert(ContextKind::PriorArg, ContextValue::String(arg.to_string()));
        err.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
        err.insert(
            ContextKind::Usage,
            ContextValue::StyledStr(cmd.render_usage()),
        );
        return Err(err);
    }
    Ok(())
}

/// Whether the command line (not a default) set `id`.
fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

fn main() {
    // What the nodes log (refused connections, dead letters, unreachable
    // peers) goes to stderr at `warn` and above unless `RUST_LOG` says
    // otherwise; stdout keeps the report.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = parse();
    let config = cli.run.transport()?;
    cli.run.validate(&config)?;
    // Before any node starts: metric handles bind to the recorder in
    // place when a node, a link or an actor starts.
    if let Some(addr) = cli.run.metrics_addr {
        let bound = exporter::serve(addr)?;
        eprintln!("metrics: http://{bound}/metrics");
    }
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
        // EXCLUSIVE leaves at most one of --sweep, --rate, --raw, and
        // --compare only with --rate or --raw; `rate` handles its own.
        match &cli.cmd {
            Some(Cmd::Receiver { bind }) => {
                modes::two_process::serve_receiver(*bind, &cli.run).await
            }
            Some(Cmd::Sender { connect }) => {
                modes::two_process::run_sender(&recv, *connect, &cli.run).await
            }
            Some(Cmd::Cluster { nodes, probe_ms }) => {
                modes::cluster::run(
                    nodes,
                    std::time::Duration::from_millis(*probe_ms),
                    cli.run.json,
                )
                .await
            }
            Some(Cmd::Sharding {
                nodes,
                entities,
                asks,
                stable_ms,
                round_ms,
            }) => {
                modes::sharding::run(&modes::sharding::Opts {
                    nodes: *nodes,
                    entities: *entities,
                    tells: cli.run.messages,
                    asks: *asks,
                    stable: std::time::Duration::from_millis(*stable_ms),
                    round: std::time::Duration::from_millis(*round_ms),
                    json: cli.run.json,
                })
                .await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_and_its_tables_agree() {
        command().debug_assert();
        let cmd = command();
        let ids = EXCLUSIVE
            .iter()
            .flat_map(|&(a, b, _)| [a, b])
            .chain(EMBEDDED_ONLY.iter().copied())
            .chain(SENDER_ONLY.iter().copied())
            .chain(SHARDING_IGNORES.iter().copied());
        for id in ids {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("{id} is an option"));
            // `with_tips` maps what clap shows back to the id this way.
            assert_eq!(arg.get_long(), Some(id.replace('_', "-").as_str()));
            assert!(arg.is_global_set(), "{id} reaches the subcommands");
        }
    }
}
