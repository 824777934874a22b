//! Plaintext vs TLS throughput over loopback, both endpoints in one process.
//!
//! ```text
//! cargo run --release -p remoting-transport --example tls_throughput [-- RUNS [plain|tls]]
//! ```
//!
//! A mode argument runs only that mode (for `strace -c` of one of them).
//!
//! Each run sends 500,000 × 100-byte message frames in bursts of 5,000; after
//! every burst the client sends a marker (a System frame) and waits for the
//! server to echo it, so a burst is measured end to end. Prints every run,
//! the median of `RUNS` (default 5) per mode, the TLS/plaintext ratio, and
//! the writer's batching (writes per message; with TLS each write is one
//! `poll_write` into the TLS record layer, which seals it into ≤16 KiB
//! records and writes them with one call).
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use transport::{ConnStats, Endpoint, Frame, FrameKind, Security, TlsConfig, TransportConfig};

const MESSAGES: usize = 500_000;
const BURST: usize = 5_000;
const PAYLOAD: [u8; 100] = [0x5a; 100];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5);
    let only = std::env::args().nth(2);
    let (do_plain, do_tls) = match only.as_deref() {
        None => (true, true),
        Some("plain") => (true, false),
        Some("tls") => (false, true),
        Some(other) => return Err(format!("unknown mode {other:?}: plain or tls").into()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = "127.0.0.1:0".parse().unwrap();
        let (cert, key, ca) = dev_pki()?;
        // One host-only development certificate for both endpoints (bound
        // to port 0, so no certificate could name them).
        let tls = || {
            let mut t = TlsConfig::from_pem(cert.clone(), key.clone(), ca.clone());
            t.set_allow_host_only_certificates(true);
            t
        };
        let mut plain = Vec::new();
        let mut tls_runs = Vec::new();
        for run in 0..runs {
            // Alternate so drift on a shared machine hits both modes alike.
            if do_plain {
                let a = Endpoint::bind(addr, TransportConfig::default()).await?;
                let b = Endpoint::bind(addr, TransportConfig::default()).await?;
                let (t, s) = burst_run(&a, &b).await?;
                println!("run {run} plain: {}", line(t, &s));
                plain.push(t);
            }
            if do_tls {
                let a = Endpoint::bind_tls(addr, TransportConfig::default(), tls()).await?;
                let b = Endpoint::bind_tls(addr, TransportConfig::default(), tls()).await?;
                let (t, s) = burst_run(&a, &b).await?;
                println!("run {run} tls:   {}", line(t, &s));
                tls_runs.push(t);
            }
        }
        if !(do_plain && do_tls) {
            return Ok(());
        }
        let (p, t) = (median(&mut plain), median(&mut tls_runs));
        println!(
            "median of {runs}: plain {:.0} msg/s, tls {:.0} msg/s, tls/plain {:.2}",
            rate(p),
            rate(t),
            rate(t) / rate(p)
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

fn rate(t: Duration) -> f64 {
    MESSAGES as f64 / t.as_secs_f64()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn line(t: Duration, s: &ConnStats) -> String {
    format!(
        "{:>9.0} msg/s in {t:.2?}; client {} writes, {:.0} frames/write, {:.0} bytes/write",
        rate(t),
        s.writes,
        s.frames_per_write(),
        s.bytes_out as f64 / s.writes.max(1) as f64
    )
}

/// One measured run: returns the elapsed time and the client's counters.
async fn burst_run<A: Security, B: Security>(
    client: &Endpoint<A>,
    server: &Endpoint<B>,
) -> Result<(Duration, ConnStats), Box<dyn std::error::Error>> {
    let (dialed, accepted) = tokio::join!(client.connect(server.local_addr()), server.accept());
    let (conn, mut from_server) = dialed?.start_channel(64);
    let (echo, mut from_client) = accepted.ok_or("server endpoint closed")??.start_channel(64);
    // Server: count messages, echo every marker.
    let server_task = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(f) = from_client.recv().await {
            if f.kind == FrameKind::System {
                echo.send(f).await.expect("echo marker");
            } else {
                n += 1;
            }
        }
        n
    });
    let payload = Bytes::from_static(&PAYLOAD);
    let start = Instant::now();
    for burst in 0..MESSAGES / BURST {
        for _ in 0..BURST {
            conn.send(Frame::message(payload.clone())).await?;
        }
        let marker = Bytes::from((burst as u64).to_be_bytes().to_vec());
        conn.send(Frame {
            kind: FrameKind::System,
            body: marker.clone(),
        })
        .await?;
        let back = from_server.recv().await.ok_or("connection lost")?;
        assert_eq!(back.body, marker);
    }
    let elapsed = start.elapsed();
    let stats = conn.stats();
    conn.close("done").await;
    let received = server_task.await?;
    assert_eq!(received, MESSAGES);
    Ok((elapsed, stats))
}

/// A CA and one node certificate (127.0.0.1, localhost), both ends use it.
fn dev_pki() -> Result<(String, String, String), rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut node = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate()?;
    let cert = node.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), ca_pem))
}
