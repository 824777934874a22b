//! Queueing frames: a producer sending in a loop yields its thread to the
//! connection's writer once a batch is waiting, so batches go out (and the
//! peer starts on them) while it produces. Checked on a single-threaded
//! runtime, where the writer can only run when the producer yields: right
//! after the loop, with no other await in between, the writer must already
//! have written. And an encoder that gives up leaves nothing behind.
//!
//! And every kind of remote send an actor makes in one poll of its task
//! (staged tells, a tell with an extension block, an ask, a watch, an
//! immediate and a graceful stop of other actors, large messages) goes
//! out on one push path: each arrives where its guarantee says.

use actors::{
    Actor, ActorRef, ActorResult, Ctx, RemoteMessage, StopReason, SystemConfig, Terminated,
    TraceContext,
};
use bytes::Bytes;
use integration_tests::{
    TIMEOUT, actor_path, actor_system, actor_system_with, connect, endpoint, within,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use transport::{Frame, FrameKind, Pushed, TransportConfig};

use super::actors_common::{Count, Counter, total};

/// 4,000 frames of 105 bytes: about 420 KB, six or seven 64 KiB batches.
const FRAMES: usize = 4_000;

/// Sends `FRAMES` frames with `send().await` and returns the writes the
/// connection had made when the loop ended.
async fn writes_during_loop(config: TransportConfig) -> u64 {
    let a = endpoint(config).await;
    let b = endpoint(TransportConfig::default()).await;
    let (conn, _a_in, _b_conn, mut b_in) = connect(&a, &b).await;
    let sender = conn.sender();
    let body = Bytes::from(vec![1u8; 100]);
    let before = conn.stats().writes;
    for _ in 0..FRAMES {
        sender
            .send(Frame::message(body.clone()))
            .await
            .expect("open");
    }
    let writes = conn.stats().writes - before;
    // Everything arrives, in whatever batches.
    within("all frames arrive", async {
        for _ in 0..FRAMES {
            b_in.recv().await.expect("connection open");
        }
    })
    .await;
    writes
}

#[tokio::test]
async fn send_yields_to_the_writer_once_per_batch() {
    let writes = writes_during_loop(TransportConfig::default()).await;
    // One write per 64 KiB batch; a few more or less is fine, none is not.
    assert!(
        (3..=FRAMES as u64 / 100).contains(&writes),
        "{writes} writes during the loop"
    );
}

#[tokio::test]
async fn without_a_threshold_the_writer_waits_for_the_loop() {
    let mut config = TransportConfig::default();
    config.set_producer_yield_bytes(None);
    let writes = writes_during_loop(config).await;
    assert_eq!(writes, 0, "the writer ran during the loop");
}

#[tokio::test]
async fn actor_send_yields_to_the_link_writer() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    // About 16 bytes per message on the wire: 40,000 are about 640 KB.
    const N: u64 = 40_000;
    let before = a.remote_stats().writes;
    for _ in 0..N {
        remote.send(Count::Add(1)).await.expect("link up");
    }
    let writes = a.remote_stats().writes - before;
    assert!(writes >= 3, "{writes} writes during the loop");
    assert_eq!(total(&remote).await, N);
}

#[tokio::test]
async fn an_abandoned_push_leaves_nothing_behind() {
    let (a, b) = (
        endpoint(TransportConfig::default()).await,
        endpoint(TransportConfig::default()).await,
    );
    let (conn, _a_in, _b_conn, mut b_in) = connect(&a, &b).await;
    let sender = conn.sender();
    let queued = sender.queued_bytes();
    let pushed = sender
        .try_push_with(FrameKind::Message, |buf| {
            buf.extend_from_slice(b"half a message");
            false
        })
        .unwrap_or_else(|_| panic!("open"));
    assert_eq!(pushed, Pushed::Abandoned);
    assert_eq!(
        sender.queued_bytes(),
        queued,
        "the abandoned bytes were removed"
    );
    let pushed = sender
        .try_push_with(FrameKind::Message, |buf| {
            buf.extend_from_slice(b"whole");
            true
        })
        .unwrap_or_else(|_| panic!("open"));
    assert!(matches!(pushed, Pushed::Queued { .. }), "{pushed:?}");
    let f = within("the frame", b_in.recv()).await.expect("open");
    assert_eq!(&f.body[..], b"whole");
    assert_eq!(conn.stats().frames_out, 1);
}

/// Numbered messages, large ones, and a question about what arrived.
#[derive(Debug, Serialize, Deserialize)]
enum Seen {
    N(u64),
    /// A large message (over the 256 KiB threshold): its number, padding.
    Large(u64, Vec<u8>),
    Report(ActorRef<Report>),
}

impl RemoteMessage for Seen {
    const MANIFEST: &'static str = "it.push.Seen";
}

/// What a [`Log`] saw: small messages numbered from 0 (the next expected,
/// and how many came out of order), and the large ones in arrival order.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    next: u64,
    wrong: u64,
    large: Vec<u64>,
}

impl RemoteMessage for Report {
    const MANIFEST: &'static str = "it.push.Report";
}

/// Records what arrives; reports it when asked, and when it stops.
#[derive(Default)]
struct Log {
    seen: Report,
    stopped: Option<UnboundedSender<Report>>,
}

impl Actor for Log {
    type Msg = Seen;

    async fn handle(&mut self, msg: Seen, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Seen::N(n) => {
                self.seen.wrong += u64::from(n != self.seen.next);
                self.seen.next = n + 1;
            }
            Seen::Large(n, _) => self.seen.large.push(n),
            Seen::Report(reply) => {
                let _ = reply.tell(self.seen.clone());
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        if let Some(tx) = &self.stopped {
            let _ = tx.send(self.seen.clone());
        }
    }
}

/// Small messages `EveryKind` sends `x`, and `z` before its stop.
const TO_X: u64 = 200;
const TO_Z: u64 = 20;

/// Above the large-message threshold (256 KiB).
fn large(n: u64) -> Seen {
    Seen::Large(n, vec![7; 300 * 1024])
}

/// Sends every kind of remote message from one call of its handler,
/// before its first await: tells to `x` (staged from the second), a watch
/// of `y`, a tell with an extension block (a trace context), two large
/// messages, tells and a graceful stop to `z`, an immediate stop of `y`,
/// and last an ask of `x`, whose request goes in the same poll. Reports
/// the ask's answer and the `Terminated` of `y`.
struct EveryKind {
    x: ActorRef<Seen>,
    y: ActorRef<Seen>,
    z: ActorRef<Seen>,
    answer: UnboundedSender<Result<Report, String>>,
    ended: UnboundedSender<Terminated>,
}

impl EveryKind {
    fn tell_x(&self, from: u64, to: u64) -> ActorResult {
        for n in from..to {
            self.x.tell(Seen::N(n))?;
        }
        Ok(())
    }
}

impl Actor for EveryKind {
    type Msg = ();

    async fn handle(&mut self, (): (), ctx: &mut Ctx<Self>) -> ActorResult {
        self.tell_x(0, 50)?;
        ctx.watch(&self.y);
        self.tell_x(50, 100)?;
        let trace = TraceContext::new([1; 16], [2; 8], 1).expect("a valid context");
        trace.sync_scope(|| self.x.tell(Seen::N(100)))?;
        self.x.tell(large(1))?;
        self.tell_x(101, 150)?;
        for n in 0..TO_Z {
            self.z.tell(Seen::N(n))?;
        }
        self.z.stop_after_queued()?;
        self.y.stop();
        self.x.tell(large(2))?;
        self.tell_x(150, TO_X)?;
        let answer = self.x.ask(Seen::Report, TIMEOUT).await;
        let _ = self.answer.send(answer.map_err(|e| e.to_string()));
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.ended.send(t);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_sent_in_one_poll_arrives_in_the_order_promised() {
    // Propagation on: a tell inside a trace context carries an extension
    // block, which is never staged.
    let mut config = SystemConfig::default();
    config.set_trace_propagation(true);
    let b = actor_system_with("b", config.clone()).await;
    let (z_tx, mut z_stopped) = unbounded_channel();
    b.spawn_named("x", Log::default()).expect("free");
    b.spawn_named("y", Log::default()).expect("free");
    let z = Log {
        stopped: Some(z_tx),
        ..Log::default()
    };
    b.spawn_named("z", z).expect("free");
    let a = actor_system_with("a", config).await;
    let mut refs = Vec::new();
    for name in ["x", "y", "z"] {
        let path = actor_path(&b, name);
        refs.push(a.resolve::<Seen>(&path).await.expect("resolves"));
    }
    let [x, y, z] = <[_; 3]>::try_from(refs).expect("three");
    let (answer, mut answers) = unbounded_channel();
    let (ended, mut ends) = unbounded_channel();
    let sender = a.spawn(EveryKind {
        x: x.clone(),
        y,
        z,
        answer,
        ended,
    });
    sender.tell(()).expect("room");

    // Per sender and recipient, in order: the ask's request comes after
    // every small message sent before it, staged or not, with a trace
    // context or not; the large messages need not.
    let seen = within("the ask's answer", answers.recv())
        .await
        .expect("answers")
        .expect("the ask succeeds");
    assert_eq!((seen.next, seen.wrong), (TO_X, 0), "{seen:?}");
    // A graceful stop comes after the messages sent before it.
    let last = within("z's last words", z_stopped.recv())
        .await
        .expect("z stops");
    assert_eq!((last.next, last.wrong), (TO_Z, 0));
    // System messages in order: the watch was placed before the stop.
    let t = within("y's end", ends.recv()).await.expect("y ends");
    assert_eq!(t.reason, StopReason::Stopped, "{t:?}");
    // Large messages arrive, in order among themselves.
    let report = within("both large messages", async {
        loop {
            let r = x.ask(Seen::Report, TIMEOUT).await.expect("x answers");
            if r.large.len() == 2 {
                return r;
            }
        }
    })
    .await;
    assert_eq!(report.large, [1, 2]);
    assert_eq!((report.next, report.wrong), (TO_X, 0));
    assert_eq!(b.dead_letters(), 0);
    a.shutdown().await;
    b.shutdown().await;
}
