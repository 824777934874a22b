//! `--metrics-addr ADDR`: the library's metrics in Prometheus' text format
//! over HTTP while the benchmark runs.
//!
//! The recorder is `metrics-exporter-prometheus`'s, installed before any
//! node starts (handles are registered with the recorder in place then).
//! Its HTTP side is this file, not the exporter's hyper listener: a
//! listener bound here can be port 0 and say which port it got, and the
//! build stays free of hyper. It answers every request with the whole
//! text, then closes, on its own thread and runtime so that it takes no
//! worker from the benchmark's runtimes.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// How often the recorder's upkeep runs (it drains histogram samples into
/// their summaries; the exporter's docs ask for it periodically).
const UPKEEP: Duration = Duration::from_secs(5);
/// Time a scraper has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of a request read: only the head matters, and it is ignored.
const MAX_REQUEST: usize = 8 * 1024;

/// Installs the Prometheus recorder and serves it on `addr` until the
/// process ends. Returns the address bound (`addr` may have port 0).
///
/// # Errors
/// The address cannot be bound, or a recorder is installed already.
pub fn serve(addr: SocketAddr) -> Result<SocketAddr> {
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}"))?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the metrics recorder")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => run(l, handle).await,
                    Err(e) => eprintln!("metrics endpoint stopped: {e}"),
                }
            });
        })?;
    Ok(bound)
}

async fn run(listener: TcpListener, handle: PrometheusHandle) {
    let mut upkeep = tokio::time::interval(UPKEEP);
    loop {
        tokio::select! {
            _ = upkeep.tick() => handle.run_upkeep(),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, handle.clone()));
                }
                // EMFILE and friends: the benchmark matters more.
                Err(e) => {
                    eprintln!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// Reads the request head (bounded in size and time), answers with the
/// whole text.
async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut n = 0;
    let head = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while n < buf.len() {
            match stream.read(&mut buf[n..]).await {
                Ok(0) | Err(_) => return false,
                Ok(k) => n += k,
            }
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                return true;
            }
        }
        true
    })
    .await;
    if head != Ok(true) {
        return;
    }
    let body = handle.render();
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
