//! Flow control per recipient: a saturated actor slows only its own
//! senders. The receiving node never stops reading a link because one
//! mailbox is full, so other actors on the link, heartbeats and system
//! messages keep flowing, and nothing is lost.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, Ctx, HeartbeatConfig, RemoteEvent, RemoteMessage, SendError,
    SystemConfig,
};
use integration_tests::{actor_path, actor_system_with, eventually, within};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::actors_common::{Count, Counter, total};

/// Work for a gated or slow actor: a sequence number and 100 bytes.
#[derive(Debug, Serialize, Deserialize)]
struct Work(u64, Vec<u8>);

impl RemoteMessage for Work {
    const MANIFEST: &'static str = "it.flow.Work";
}

fn work(i: u64) -> Work {
    Work(i, vec![7; 100])
}

/// Handles nothing until its gate opens, then counts what it gets.
struct Gated {
    gate: watch::Receiver<bool>,
    got: Arc<AtomicU64>,
}

impl Actor for Gated {
    type Msg = Work;

    async fn handle(&mut self, _: Work, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.gate.wait_for(|open| *open).await;
        self.got.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Takes `per_message` over each message (an await, not a blocked
/// thread), counting them.
struct Slow {
    per_message: Duration,
    got: Arc<AtomicU64>,
}

impl Actor for Slow {
    type Msg = Work;

    async fn handle(&mut self, _: Work, _: &mut Ctx<Self>) -> ActorResult {
        tokio::time::sleep(self.per_message).await;
        self.got.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A timestamp (nanoseconds since the test's `epoch`) to measure latency.
#[derive(Debug, Serialize, Deserialize)]
struct Stamp(u64);

impl RemoteMessage for Stamp {
    const MANIFEST: &'static str = "it.flow.Stamp";
}

/// Records how late each stamp arrives.
struct Fast {
    epoch: Instant,
    late: tokio::sync::mpsc::UnboundedSender<Duration>,
}

impl Actor for Fast {
    type Msg = Stamp;

    async fn handle(&mut self, Stamp(sent): Stamp, _: &mut Ctx<Self>) -> ActorResult {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let _ = self
            .late
            .send(Duration::from_nanos(now.saturating_sub(sent)));
        Ok(())
    }
}

#[tokio::test]
async fn a_recipient_out_of_credit_is_full_while_others_on_the_link_flow() {
    const WINDOW: usize = 4096;
    const CAPACITY: usize = 8;
    let mut config = SystemConfig::default();
    config
        .set_recipient_window(WINDOW)
        .unwrap()
        .set_mailbox_capacity(CAPACITY)
        .unwrap();
    let r = actor_system_with("r", config.clone()).await;
    let s = actor_system_with("s", config).await;
    let (open, gate) = watch::channel(false);
    let got = Arc::new(AtomicU64::new(0));
    r.spawn_named(
        "gated",
        Gated {
            gate,
            got: got.clone(),
        },
    )
    .expect("free");
    r.spawn_named("counter", Counter::default()).expect("free");
    let gated: ActorRef<Work> = within("resolve", s.resolve(&actor_path(&r, "gated")))
        .await
        .expect("resolves");
    let counter: ActorRef<Count> = within("resolve", s.resolve(&actor_path(&r, "counter")))
        .await
        .expect("resolves");
    // What the gated actor can be sent while it handles nothing: its
    // window (about 37 of these 110-byte envelopes), its mailbox, and what
    // one read overshoots it by. Without flow control every tell goes to
    // the link's queue (megabytes).
    let bound = (WINDOW / 100 + CAPACITY) as u64 * 3;
    let mut sent = 0;
    for round in 0..5 {
        loop {
            match gated.tell(work(sent)) {
                Ok(()) => sent += 1,
                Err(SendError::MailboxFull(_)) => break,
                Err(e) => panic!("unexpected {e}"),
            }
            assert!(sent <= bound, "{sent} tells accepted by a stuck actor");
        }
        // Another actor on the same link is answered meanwhile (the reader
        // did not stop), which also gives any credit in flight time to
        // arrive.
        counter.tell(Count::Add(1)).expect("room");
        assert_eq!(total(&counter).await, round + 1);
    }
    assert!(sent > 0);
    // Opened, it gets every message: none was lost.
    open.send(true).expect("the actor waits");
    eventually("every message handled", || {
        got.load(Ordering::Relaxed) == sent
    })
    .await;
    // And sending goes on as credit returns.
    for i in 0..200 {
        within("send", gated.send(work(sent + i)))
            .await
            .expect("sent");
    }
    eventually("the rest handled", || {
        got.load(Ordering::Relaxed) == sent + 200
    })
    .await;
    assert_eq!(r.dead_letters(), 0);
    assert_eq!(s.dead_letters(), 0);
}

/// The scenario of issue 14, shortened: node S saturates a slow actor on
/// node R with `send().await` while it sends a fast actor on R a message
/// every 20 ms over the same link. Heartbeats are tight (100 ms, 1 s
/// acceptable pause), so a reader paused behind the slow mailbox would
/// make both nodes judge each other unreachable within about two seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_actor_slows_only_its_own_senders() {
    const RUN: Duration = Duration::from_secs(3);
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(100))
        .unwrap()
        .set_acceptable_pause(Duration::from_secs(1));
    let mut config = SystemConfig::default();
    config
        .set_heartbeat(hb)
        .set_mailbox_capacity(100)
        .unwrap()
        .set_recipient_window(16 * 1024)
        .unwrap();
    let r = actor_system_with("r", config.clone()).await;
    let s = actor_system_with("s", config).await;
    let mut r_events = r.subscribe_remote_events();
    let mut s_events = s.subscribe_remote_events();
    let slow_got = Arc::new(AtomicU64::new(0));
    r.spawn_named(
        "slow",
        Slow {
            per_message: Duration::from_millis(2),
            got: slow_got.clone(),
        },
    )
    .expect("free");
    let epoch = Instant::now();
    let (late_tx, mut late_rx) = tokio::sync::mpsc::unbounded_channel();
    r.spawn_named(
        "fast",
        Fast {
            epoch,
            late: late_tx,
        },
    )
    .expect("free");
    let slow: ActorRef<Work> = within("resolve", s.resolve(&actor_path(&r, "slow")))
        .await
        .expect("resolves");
    let fast: ActorRef<Stamp> = within("resolve", s.resolve(&actor_path(&r, "fast")))
        .await
        .expect("resolves");
    // S watches R's fast actor: a false verdict would terminate it.
    let watch = fast.watch();
    let saturate = tokio::spawn(async move {
        let mut sent = 0;
        let until = Instant::now() + RUN;
        while Instant::now() < until {
            slow.send(work(sent)).await.expect("sent");
            sent += 1;
        }
        sent
    });
    let mut fast_sent = 0;
    let until = Instant::now() + RUN;
    while Instant::now() < until {
        let stamp = epoch.elapsed().as_nanos() as u64;
        fast.tell(Stamp(stamp))
            .expect("the fast actor's window has room");
        fast_sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slow_sent = within("the saturating task", saturate)
        .await
        .expect("no panic");
    let mut late = Vec::new();
    for _ in 0..fast_sent {
        late.push(
            within("a fast message", late_rx.recv())
                .await
                .expect("the fast actor runs"),
        );
    }
    late.sort();
    let p99 = late[late.len() * 99 / 100];
    eprintln!(
        "slow: {slow_sent} sent; fast: {fast_sent} sent, p50 {:?}, p99 {p99:?}, max {:?}",
        late[late.len() / 2],
        late[late.len() - 1]
    );
    // The slow actor was saturated: its senders were held to its pace.
    assert!(
        slow_sent < 3 * 500 + 1000,
        "{slow_sent} sent to an actor handling 500/s"
    );
    // The fast actor's messages did not wait behind the slow one's.
    assert!(p99 < Duration::from_millis(250), "fast p99 {p99:?}");
    eventually("the slow actor handles all it was sent", || {
        slow_got.load(Ordering::Relaxed) + r.dead_letters() == slow_sent
    })
    .await;
    assert_eq!(r.dead_letters(), 0, "nothing was dropped");
    assert_eq!(s.dead_letters(), 0);
    // No verdict either way, and the watch still holds.
    for events in [&mut r_events, &mut s_events] {
        while let Ok(e) = events.try_recv() {
            assert!(
                !matches!(
                    e,
                    RemoteEvent::Unreachable { .. }
                        | RemoteEvent::Quarantined { .. }
                        | RemoteEvent::Disconnected { .. }
                ),
                "{e:?}"
            );
        }
    }
    drop(fast);
    assert!(
        tokio::time::timeout(Duration::from_millis(1), watch)
            .await
            .is_err(),
        "the watch of the idle fast actor did not fire"
    );
    assert_eq!(slow_got.load(Ordering::Relaxed), slow_sent);
}

/// A peer that ignores its window and floods an actor whose mailbox is
/// full: what the node holds for it stops at the connection's park bound,
/// the rest are dead letters (counted, not lost silently), and the node
/// goes on serving others.
#[tokio::test]
async fn a_peer_that_ignores_its_window_meets_the_park_bound() {
    use integration_tests::{envelope, frame_bytes, raw_actor_peer};
    use tokio::io::AsyncWriteExt;
    const PARK: usize = 256 * 1024;
    const MESSAGES: u64 = 2_000;
    let mut config = SystemConfig::default();
    config
        .set_recipient_window(4096)
        .unwrap()
        .set_max_parked_bytes(PARK)
        .set_mailbox_capacity(4)
        .unwrap();
    let r = actor_system_with("r", config.clone()).await;
    let (_open, gate) = watch::channel(false);
    let got = Arc::new(AtomicU64::new(0));
    r.spawn_named("gated", Gated { gate, got }).expect("free");
    r.spawn_named("counter", Counter::default()).expect("free");
    let (mut raw, _) = raw_actor_peer(&r).await;
    // 2,000 envelopes of about 10 KB (20 MB) to one recipient, with no
    // regard for credit.
    let mut payload = bytes::BytesMut::new();
    Work(0, vec![1; 10_000])
        .encode(&mut payload, usize::MAX)
        .expect("encodes");
    let manifest = actors::manifest_id(Work::MANIFEST);
    let mut bytes = frame_bytes(
        transport::FrameKind::Message,
        &envelope(1, Some("/user/gated"), manifest, &payload),
    );
    let next = frame_bytes(
        transport::FrameKind::Message,
        &envelope(1, None, manifest, &payload),
    );
    for _ in 1..MESSAGES {
        bytes.extend_from_slice(&next);
    }
    let writing = tokio::spawn(async move {
        raw.write_all(&bytes).await.expect("written");
        raw
    });
    // The node kept at most its park bound, its mailbox and a read's
    // overshoot (about 64 KB): everything else is counted.
    let kept = ((PARK + 64 * 1024) / 10_000 + 4 + 16) as u64;
    eventually("the flood is read and counted", || {
        r.dead_letters() >= MESSAGES - kept
    })
    .await;
    let _raw = within("the flood is written", writing)
        .await
        .expect("no panic");
    // A well-behaved peer is served meanwhile.
    let s = actor_system_with("s", config).await;
    let counter: ActorRef<Count> = within("resolve", s.resolve(&actor_path(&r, "counter")))
        .await
        .expect("resolves");
    counter.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&counter).await, 5);
}
