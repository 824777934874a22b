//! A node that serves until Ctrl-C (or SIGTERM), then shuts down
//! gracefully: every actor handles what is already in its mailbox, within
//! a deadline, before the system stops and closes its links.
//!
//! ```text
//! cargo run -p remoting-actors --example graceful -- 127.0.0.1:25520
//! ```
//!
//! It serves `/user/clock`, which answers the seconds since it started;
//! press Ctrl-C to stop it.

use std::{process::ExitCode, time::Duration};

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage};
use serde::{Deserialize, Serialize};

/// Asks for the node's uptime in seconds.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "example.Uptime")]
struct Uptime(ActorRef<u64>);

struct Clock(std::time::Instant);

impl Actor for Clock {
    type Msg = Uptime;

    async fn handle(&mut self, Uptime(reply): Uptime, _: &mut Ctx<Self>) -> ActorResult {
        let _ = reply.tell(self.0.elapsed().as_secs());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let bind = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let Ok(bind) = bind.parse() else {
        eprintln!("usage: graceful [BIND_ADDR]");
        return ExitCode::FAILURE;
    };
    let system = match ActorSystem::remote("graceful", bind).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = system.spawn_named("clock", Clock(std::time::Instant::now())) {
        eprintln!("cannot spawn: {e}");
        return ExitCode::FAILURE;
    }
    // Installed before we say we are up, so no Ctrl-C is missed.
    let shutdown = match system.shutdown_on_ctrl_c(Duration::from_secs(10)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("serving tcp://{}/user/clock; Ctrl-C to stop", system.node());
    let drained = shutdown.await;
    println!("stopped (every mailbox drained: {drained})");
    ExitCode::SUCCESS
}
