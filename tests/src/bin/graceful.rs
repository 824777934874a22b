//! A process that shuts down gracefully on Ctrl-C, for the test that
//! sends it SIGINT (`tests/tests/it/ergonomics.rs`).
//!
//! ```text
//! graceful N
//! ```
//!
//! Queues `N` messages to an actor that takes 2 ms over each, installs
//! `ActorSystem::shutdown_on_ctrl_c`, prints `ready`, and on the signal
//! prints `handled COUNT` (from the actor's `stopped` hook) and
//! `drained BOOL`, then exits 0.

use std::time::Duration;

use actors::{Actor, ActorResult, ActorSystem, Ctx, StopReason};

/// Counts what it handles, slowly, and prints the count when it stops.
struct Slow(u64);

impl Actor for Slow {
    type Msg = ();

    async fn handle(&mut self, (): (), _: &mut Ctx<Self>) -> ActorResult {
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.0 += 1;
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        println!("handled {}", self.0);
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .ok_or("usage: graceful N")?
        .parse()?;
    let system = ActorSystem::local("graceful")?;
    let slow = system.spawn(Slow(0));
    for _ in 0..n {
        slow.tell(()).map_err(|e| e.to_string())?;
    }
    let shutdown = system.shutdown_on_ctrl_c(Duration::from_secs(20))?;
    println!("ready");
    let drained = shutdown.await;
    println!("drained {drained}");
    Ok(())
}
