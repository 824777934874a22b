//! Serves the library's metrics for Prometheus while two nodes talk.
//!
//! ```text
//! cargo run -p remoting-actors --example metrics_prometheus -- 127.0.0.1:0   # print once, exit
//! cargo run -p remoting-actors --example metrics_prometheus -- 127.0.0.1:9000 --serve
//! curl -s 127.0.0.1:9000/metrics | grep -E '^(remoting|actors)_'
//! ```
//!
//! The library only calls the `metrics` facade; the application picks the
//! exporter. Here it is `metrics-exporter-prometheus`'s recorder,
//! installed before the systems are built (handles are registered with
//! the recorder in place when a system, an association or an actor
//! starts), and a few lines of tokio that answer every HTTP request with
//! its text (the exporter's own listener, its `http-listener` feature,
//! would do too, at the cost of building hyper). Without
//! `--serve` the example scrapes its own endpoint once, prints the
//! library's lines and exits (non-zero if a per-peer metric is missing);
//! with it, the nodes keep talking until Ctrl-C. The metric names are in
//! the "Metrics" table of docs/OPERATIONS.md.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, HeartbeatConfig, RemoteMessage, SystemConfig,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Adds `n`; answers the total when asked.
#[derive(Serialize, Deserialize)]
struct Add {
    n: u64,
    reply: Option<ActorRef<u64>>,
}

impl RemoteMessage for Add {
    const MANIFEST: &'static str = "example.Add";
}

struct Adder(u64);

impl Actor for Adder {
    type Msg = Add;

    async fn handle(&mut self, Add { n, reply }: Add, _: &mut Ctx<Self>) -> ActorResult {
        self.0 += n;
        if let Some(r) = reply {
            let _ = r.tell(self.0);
        }
        Ok(())
    }
}

/// One plain HTTP/1.0 GET of `/metrics`: the body.
async fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, body)| body.to_owned()))
}

/// Answers every connection with the metrics text: reads the request
/// head (at most 8 KiB, 5 s), writes the text, closes. Runs upkeep (the
/// exporter drains histogram samples there) every 5 s.
async fn serve_text(listener: TcpListener, handle: PrometheusHandle) {
    let mut upkeep = tokio::time::interval(Duration::from_secs(5));
    loop {
        let mut stream = tokio::select! {
            _ = upkeep.tick() => {
                handle.run_upkeep();
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while head.len() < 8 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            });
            if read.await != Ok(true) {
                return;
            }
            let body = handle.render();
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = match args.next().as_deref().unwrap_or("127.0.0.1:9000").parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("usage: metrics_prometheus [ADDR] [--serve]: {e}");
            return ExitCode::FAILURE;
        }
    };
    let serve = args.any(|a| a == "--serve");
    // First, before any system: handles bind to the recorder in place.
    let handle = match PrometheusBuilder::new().install_recorder() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cannot install the metrics recorder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot serve metrics on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Port 0 picks one: the address actually bound.
    let addr = listener.local_addr().unwrap_or(addr);
    tokio::spawn(serve_text(listener, handle));
    // Per-peer values are published once per heartbeat interval.
    let mut config = SystemConfig::default();
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(200))
        .expect("at least 1 ms");
    config.set_heartbeat(hb);
    let bind: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let (a, b) = match tokio::try_join!(
        ActorSystem::with_config("a", Some(bind), config.clone()),
        ActorSystem::with_config("b", Some(bind), config),
    ) {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("cannot start the nodes: {e}");
            return ExitCode::FAILURE;
        }
    };
    b.spawn_named("adder", Adder(0)).expect("a free name");
    let adder: ActorRef<Add> = match a.resolve(&format!("tcp://{}/user/adder", b.node())).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot resolve the adder: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "serving http://{addr}/metrics (nodes {} and {})",
        a.node(),
        b.node()
    );
    let mut round = 0u64;
    loop {
        round += 1;
        for _ in 0..1000 {
            let _ = adder.tell(Add { n: 1, reply: None });
        }
        let total = adder
            .ask(
                |r| Add {
                    n: 0,
                    reply: Some(r),
                },
                Duration::from_secs(5),
            )
            .await;
        if !serve && round == 3 {
            println!("total after {round} rounds: {total:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = match scrape(addr).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot scrape {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("remoting_") || l.starts_with("actors_"))
        .collect();
    for l in &ours {
        println!("{l}");
    }
    a.shutdown().await;
    b.shutdown().await;
    if ours
        .iter()
        .any(|l| l.starts_with("remoting_bytes_out_total{"))
    {
        ExitCode::SUCCESS
    } else {
        eprintln!("no remoting_bytes_out_total in the scrape");
        ExitCode::FAILURE
    }
}
