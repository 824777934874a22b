//! Ping-pong between two processes, each an actor system with remoting.
//!
//! ```text
//! cargo run -p remoting-actors --example ping_pong -- pong 127.0.0.1:25520
//! cargo run -p remoting-actors --example ping_pong -- ping 127.0.0.1:25520 [count]
//! ```
//!
//! The pong side serves `/user/pong` on the given address until killed.
//! The ping side binds an ephemeral port, resolves
//! `tcp://pong@ADDR/user/pong` by path, asks it `count` times (default
//! 1,000), one ask at a time, and prints round-trip statistics. It exits
//! with status 1 and a message when the pong side cannot be reached.
//!
//! A node's address is part of its actors' paths and is checked on
//! connect, so bind pong to the address ping will dial, or bind it to
//! every interface and set `ADVERTISE` to the name ping dials:
//!
//! ```text
//! ADVERTISE=localhost cargo run -p remoting-actors --example ping_pong -- pong 0.0.0.0:25520
//! cargo run -p remoting-actors --example ping_pong -- ping localhost:25520
//! ```

use std::{net::SocketAddr, process::ExitCode, time::Duration, time::Instant};

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage};
use serde::{Deserialize, Serialize};

/// The pong actor's message: echo `seq` to `reply`.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "example.Ping")]
struct Ping {
    seq: u64,
    reply: ActorRef<u64>,
}

/// Answers every ping with its sequence number.
struct Pong;

impl Actor for Pong {
    type Msg = Ping;

    async fn handle(&mut self, Ping { seq, reply }: Ping, _: &mut Ctx<Self>) -> ActorResult {
        let _ = reply.tell(seq);
        Ok(())
    }
}

/// How long one ask may take before ping gives up.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// Pings sent when no count is given.
const DEFAULT_COUNT: u64 = 1_000;

const USAGE: &str = "usage: ping_pong pong HOST:PORT | ping HOST:PORT [COUNT]";

#[tokio::main]
async fn main() -> ExitCode {
    // Logs (dead letters, refused connections, unreachable nodes) at
    // `info` and above unless `RUST_LOG` says otherwise.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [role, addr, rest @ ..] if rest.len() <= 1 => match rest.first() {
            Some(c) => c
                .parse()
                .map_err(|e| format!("bad count {c:?}: {e}"))
                .map(|count| (role.as_str(), addr.as_str(), count)),
            None => Ok((role.as_str(), addr.as_str(), DEFAULT_COUNT)),
        },
        _ => Err(USAGE.to_owned()),
    };
    let result = match parsed {
        Ok(("pong", addr, _)) => match addr.parse() {
            Ok(addr) => pong(addr).await,
            Err(e) => Err(format!("bad address {addr:?}: {e}")),
        },
        Ok(("ping", addr, count)) => ping(addr, count).await,
        Ok(_) => Err(USAGE.to_owned()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ping_pong: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn pong(addr: SocketAddr) -> Result<(), String> {
    let mut config = actors::SystemConfig::default();
    if let Ok(name) = std::env::var("ADVERTISE") {
        config.set_advertised_address(name);
    }
    let system = ActorSystem::with_config("pong", Some(addr), config)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    system
        .spawn_named("pong", Pong)
        .map_err(|e| format!("cannot spawn pong: {e}"))?;
    println!(
        "pong: serving tcp://{}/user/pong (kill to stop)",
        system.node()
    );
    std::future::pending::<()>().await;
    Ok(())
}

/// Pings pong at `addr` (`host:port`, a name or an address).
async fn ping(addr: &str, count: u64) -> Result<(), String> {
    let ip = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("cannot resolve {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr:?} resolves to no address"))?
        .ip();
    let system = ActorSystem::remote("ping", SocketAddr::new(ip, 0))
        .await
        .map_err(|e| format!("cannot bind: {e}"))?;
    let path = format!("tcp://pong@{addr}/user/pong");
    let pong = system
        .resolve::<Ping>(&path)
        .await
        .map_err(|e| format!("cannot reach the pong side at {path}: {e}"))?;
    println!("ping: resolved {path}; sending {count} pings");
    let mut rtts = Vec::with_capacity(count as usize);
    let started = Instant::now();
    for seq in 0..count {
        let t = Instant::now();
        let got = pong
            .ask(|reply| Ping { seq, reply }, ASK_TIMEOUT)
            .await
            .map_err(|e| format!("ping {seq}: {e}"))?;
        if got != seq {
            return Err(format!("ping {seq} answered with {got}"));
        }
        rtts.push(t.elapsed());
    }
    let total = started.elapsed();
    rtts.sort();
    let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize];
    if !rtts.is_empty() {
        println!(
            "ping: {count} round trips in {total:.2?} ({:.0}/s); rtt min {:?} p50 {:?} p99 {:?} max {:?}",
            count as f64 / total.as_secs_f64(),
            rtts[0],
            pct(0.50),
            pct(0.99),
            rtts[rtts.len() - 1],
        );
    }
    system.shutdown().await;
    Ok(())
}
