//! End-to-end backpressure with bounded memory: 1 GiB offered in 64 KiB
//! messages to a remote actor that consumes only as fast as the test lets
//! it. The sender's `send().await` must wait (mailbox full → reader paused
//! → TCP window closed → link queue full), so the messages in flight stay
//! bounded, and the process's peak resident memory (both nodes live in it)
//! stays within a fixed bound over the baseline.
//!
//! Its own test binary, so no other test's memory is counted.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use actors::{Actor, ActorResult, Ctx, RemoteMessage, SharedBytes, SystemConfig};
use integration_tests::{actor_path, actor_system, actor_system_with, within};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};

/// Size of each message.
const CHUNK: usize = 64 * 1024;
/// Total offered: 1 GiB.
const MESSAGES: u64 = (1 << 30) / CHUNK as u64;
/// Messages the consumer is allowed to take per step.
const STEP: u64 = 512;
/// The consumer's mailbox capacity, in messages (4 MiB of payload).
const MAILBOX: usize = 64;
/// Most messages that may be sent and not yet consumed: the mailbox, the
/// reader's batch, the link queue (4 MiB = 64), both kernel socket buffers
/// and the step's slack, with room to spare. Without backpressure all
/// 16,384 would be in flight.
const MAX_IN_FLIGHT: u64 = 1024;
/// Peak resident memory allowed over the baseline.
const MAX_RSS_GROWTH_KIB: u64 = 300 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Chunk(SharedBytes);

impl RemoteMessage for Chunk {
    const MANIFEST: &'static str = "memory.Chunk";
}

struct Slow {
    permits: Arc<Semaphore>,
    consumed: Arc<AtomicU64>,
    progress: Arc<Notify>,
}

impl Actor for Slow {
    type Msg = Chunk;

    async fn handle(&mut self, Chunk(bytes): Chunk, _: &mut Ctx<Self>) -> ActorResult {
        assert_eq!(bytes.len(), CHUNK);
        self.permits
            .acquire()
            .await
            .expect("the semaphore is never closed")
            .forget();
        self.consumed.fetch_add(1, Ordering::Relaxed);
        self.progress.notify_one();
        Ok(())
    }
}

/// A line of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number in {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_to_a_slow_consumer_keeps_memory_bounded() {
    let mut config = SystemConfig::default();
    config.set_mailbox_capacity(MAILBOX).unwrap();
    let b = actor_system_with("b", config).await;
    let a = actor_system("a").await;
    let permits = Arc::new(Semaphore::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    b.spawn_named(
        "slow",
        Slow {
            permits: permits.clone(),
            consumed: consumed.clone(),
            progress: progress.clone(),
        },
    )
    .expect("free");
    let slow = within("resolve", a.resolve::<Chunk>(&actor_path(&b, "slow")))
        .await
        .expect("resolves");

    let baseline = status_kib("VmRSS:");
    let sent = Arc::new(AtomicU64::new(0));
    let producer = {
        let sent = sent.clone();
        let chunk = SharedBytes::from(vec![0x5a; CHUNK]);
        tokio::spawn(async move {
            for _ in 0..MESSAGES {
                slow.send(Chunk(chunk.clone())).await.expect("link is up");
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut released = 0;
    let mut max_in_flight = 0;
    while released < MESSAGES {
        // Before each release the consumer is stalled: whatever the
        // producer got out is all that is in flight.
        let before = consumed.load(Ordering::Relaxed);
        // `sent` counts after `send().await` returns, and a send may yield
        // to the link's writer after queueing: the consumer can be a
        // message or so ahead of the count.
        max_in_flight = max_in_flight.max(sent.load(Ordering::Relaxed).saturating_sub(before));
        let step = STEP.min(MESSAGES - released);
        permits.add_permits(step as usize);
        released += step;
        within("the consumer to take a step", async {
            while consumed.load(Ordering::Relaxed) < released {
                progress.notified().await;
            }
        })
        .await;
    }
    within("the producer to finish", producer)
        .await
        .expect("the producer does not panic");
    let peak = status_kib("VmHWM:");
    let growth = peak.saturating_sub(baseline);
    eprintln!(
        "1 GiB in {MESSAGES} messages: max in flight {max_in_flight} messages, \
         peak RSS {peak} KiB ({growth} KiB over the baseline {baseline} KiB)"
    );
    assert!(
        max_in_flight <= MAX_IN_FLIGHT,
        "{max_in_flight} messages in flight: the sender was not held back"
    );
    assert!(
        max_in_flight > 0,
        "the producer made progress while the consumer was stalled"
    );
    assert!(
        growth <= MAX_RSS_GROWTH_KIB,
        "peak RSS grew by {growth} KiB, over the bound of {MAX_RSS_GROWTH_KIB} KiB"
    );
}
