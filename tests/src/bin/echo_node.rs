//! A transport-only node in its own process, for hostile-peer tests that
//! measure the node's memory (its resident set) apart from the test's.
//!
//! ```text
//! echo_node [--stall-ms N] [--max-inbound N] [--per-ip N] [--unproven-per-ip N] [--idle-evict-ms N] [--sndbuf N]
//! ```
//!
//! Binds `127.0.0.1:0` with the tests' shared secret, prints `ready ADDR`
//! on stdout, and accepts every connection: each `Message` frame is sent
//! back on the connection it came on (an echo). Runs until its stdin
//! closes (so a test that dies takes it along) or it is killed.

use std::{io::BufRead, time::Duration};

use integration_tests::Echo;
use transport::{Endpoint, TransportConfig};

const USAGE: &str = "usage: echo_node [--stall-ms N] [--max-inbound N] [--per-ip N] [--unproven-per-ip N] [--idle-evict-ms N] [--sndbuf N]";

fn config() -> TransportConfig {
    let mut config = integration_tests::secured(TransportConfig::default());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let n: u64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{USAGE}"));
        match flag.as_str() {
            "--stall-ms" => {
                config
                    .set_control_stall_timeout(Duration::from_millis(n))
                    .expect("a value the transport takes");
            }
            "--max-inbound" => {
                config
                    .set_max_inbound_connections(n as usize)
                    .expect("a value the transport takes");
            }
            "--per-ip" => {
                config
                    .set_max_inbound_connections_per_ip(n as usize)
                    .expect("a value the transport takes");
            }
            "--unproven-per-ip" => {
                config
                    .set_max_unproven_per_ip(n as usize)
                    .expect("a value the transport takes");
            }
            "--sndbuf" => {
                config
                    .set_send_buffer_size(Some(n as u32))
                    .expect("--sndbuf: not zero");
            }
            "--idle-evict-ms" => {
                config.set_idle_eviction_after(Some(Duration::from_millis(n)));
            }
            _ => panic!("{USAGE}"),
        }
    }
    config
}

#[tokio::main]
async fn main() {
    let endpoint = Endpoint::bind(integration_tests::loopback(), config())
        .await
        .expect("bind 127.0.0.1:0");
    println!("ready {}", endpoint.local_addr());
    let accept = async {
        let mut conns = Vec::new();
        while let Some(accepted) = endpoint.accept().await {
            if let Ok(est) = accepted {
                conns.retain(|c: &transport::Connection| !c.is_closed());
                conns.push(est.start(Echo::default()));
            }
        }
    };
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let stdin = std::io::stdin();
        while stdin.lock().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
    });
    tokio::select! {
        () = accept => {}
        _ = stdin_closed => {}
    }
}
