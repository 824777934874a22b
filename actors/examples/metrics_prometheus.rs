//! Serves the library's metrics for Prometheus while two nodes talk.
//!
//! ```text
//! cargo run -p remoting-actors --example metrics_prometheus               # print once, exit
//! cargo run -p remoting-actors --example metrics_prometheus -- 127.0.0.1:9000 --serve
//! curl -s 127.0.0.1:9000/metrics | grep -E '^(remoting|actors)_'
//! ```
//!
//! The library only calls the `metrics` facade; the application picks the
//! exporter. Here it is `metrics-exporter-prometheus`, installed before
//! the systems are built (handles are registered with the recorder in
//! place when a system, an association or an actor starts). Without
//! `--serve` the example scrapes its own endpoint once, prints the
//! library's lines and exits (non-zero if a per-peer metric is missing);
//! with it, the nodes keep talking until Ctrl-C. The metric names are in
//! the README's "Metrics" table.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use actors::{Actor, ActorRef, ActorSystem, Ctx, HeartbeatConfig, RemoteMessage, SystemConfig};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
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

    async fn handle(&mut self, Add { n, reply }: Add, _: &mut Ctx<Self>) {
        self.0 += n;
        if let Some(r) = reply {
            let _ = r.tell(self.0);
        }
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
    if let Err(e) = PrometheusBuilder::new().with_http_listener(addr).install() {
        eprintln!("cannot serve metrics on {addr}: {e}");
        return ExitCode::FAILURE;
    }
    // Per-peer values are published once per heartbeat interval.
    let mut config = SystemConfig::default();
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(200));
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
