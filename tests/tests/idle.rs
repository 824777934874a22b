//! A node that is idle, or shut down, uses no CPU: nothing polls, retries
//! or spins in the background. Its own test binary, so that the process's
//! CPU time is this test's alone.

use std::time::{Duration, Instant};

use actors::{ActorResult, SystemConfig};
use integration_tests::{actor_path, actor_system_with, within};
use serde::{Deserialize, Serialize};

/// CPU time (user + system) this process has used.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .expect("a stat line")
        .split_whitespace()
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // The kernel's clock tick is 100 Hz on Linux.
    Duration::from_millis(ticks * 10)
}

#[derive(Debug, Serialize, Deserialize)]
struct Ping(u64);

impl actors::RemoteMessage for Ping {
    const MANIFEST: &'static str = "idle.Ping";
}

struct Sink;

impl actors::Actor for Sink {
    type Msg = Ping;

    async fn handle(&mut self, _: Ping, _: &mut actors::Ctx<Self>) -> ActorResult {
        Ok(())
    }
}

/// CPU used over `d` of wall time.
async fn cpu_over(d: Duration) -> Duration {
    let (c0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(d).await;
    assert!(t0.elapsed() >= d);
    cpu() - c0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shut_down_systems_with_watches_do_not_spin() {
    const QUIET: Duration = Duration::from_millis(100);
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("sink", Sink).expect("free");
    let sink: actors::ActorRef<Ping> = within("resolve", a.resolve(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    // A watch in place: a's association needs its link, and b's will need
    // one to deliver the Terminated.
    let _watch = sink.watch();
    for i in 0..1_000 {
        sink.send(Ping(i)).await.expect("sent");
    }
    let idle = cpu_over(Duration::from_secs(1)).await;
    assert!(idle < QUIET, "idle nodes used {idle:?} of CPU in a second");
    // The watcher's node goes first: b's actor then stops with a watch of
    // a gone node on it, and b holds a Terminated no one will acknowledge.
    within("a shuts down", a.shutdown()).await;
    within("b shuts down", b.shutdown()).await;
    let after = cpu_over(Duration::from_secs(1)).await;
    assert!(
        after < QUIET,
        "shut-down nodes used {after:?} of CPU in a second"
    );
}
