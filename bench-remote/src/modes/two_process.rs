//! The `receiver` and `sender` subcommands: the faithful pattern between
//! two processes over real TCP, optionally with TLS from `--tls-dir`.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use tokio::runtime::Handle;

use crate::{
    RunOpts, faithful,
    faithful::ToReceiver,
    modes::output::{Run, finish},
    tls,
};

/// The system config of a two-process node.
fn process_config(opts: &RunOpts, node: &str) -> Result<actors::SystemConfig> {
    let mut config = actors::SystemConfig::default();
    *config.transport_mut() = opts.transport()?;
    config.set_resolve_timeout(Duration::from_secs(opts.stall_timeout.min(10)))?;
    config.set_message_runs(!opts.no_message_runs);
    if opts.tls {
        let dir = opts
            .tls_dir
            .as_deref()
            .context("--tls in two-process mode needs --tls-dir DIR with the certificates")?;
        config.set_tls(tls::from_dir(dir, node));
    }
    Ok(config)
}

/// `receiver`: serves a receiver actor until Ctrl-C.
pub async fn serve_receiver(bind: SocketAddr, opts: &RunOpts) -> Result<()> {
    let config = process_config(opts, "receiver")?;
    // Named as its certificate file, which names the node (gen_certs).
    let sys = actors::ActorSystem::with_config("receiver", Some(bind), config)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    sys.spawn_named("receiver", faithful::Receiver::new(count))?;
    println!("Receiver ready at {}", faithful::receiver_path(sys.node()));
    tokio::signal::ctrl_c().await?;
    sys.shutdown().await;
    Ok(())
}

/// `sender`: runs the pattern against a `receiver` process and prints
/// what the default mode prints.
pub async fn run_sender(recv: &Handle, connect: SocketAddr, opts: &RunOpts) -> Result<()> {
    let bind: SocketAddr = if connect.ip().is_loopback() {
        "127.0.0.1:0".parse()?
    } else if connect.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let config = process_config(opts, "sender")?;
    let sys = actors::ActorSystem::with_config("sender", Some(bind), config).await?;
    let path = faithful::receiver_path(&format!("receiver@{connect}"));
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
