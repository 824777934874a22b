//! Large messages: fragmented on the link's large-message lane, so that
//! small messages on the same link are not stuck behind them; refused over
//! the maximum message size; a peer lying about fragments is contained.

use std::time::{Duration, Instant};

use actors::{
    Actor, ActorRef, ActorResult, Bincode, Ctx, RemoteMessage, SendError, SerializationError,
    Serializer, SharedBytes, SystemConfig, manifest_id,
};
use bytes::BytesMut;
use integration_tests::{
    actor_path, actor_system, actor_system_with, eventually, frame_bytes, raw_actor_peer, within,
};
use serde::{Deserialize, Serialize};
use tokio::{io::AsyncWriteExt, sync::mpsc};
use transport::FrameKind;

use super::actors_common::{Count, Counter, total};

/// A large payload; `SharedBytes` decodes without a copy.
#[derive(Debug, Serialize, Deserialize)]
struct Big(SharedBytes);

impl RemoteMessage for Big {
    const MANIFEST: &'static str = "it.Big";
}

/// What the sink saw: when the message arrived, and the message.
#[derive(Debug)]
struct Seen {
    at: Instant,
    data: SharedBytes,
}

impl Seen {
    /// Length and checksum (computed by the test, not the actor, so that
    /// a debug-build checksum of 20 MiB does not occupy a worker thread
    /// while round trips are measured).
    fn check(&self) -> (usize, u64) {
        (self.data.len(), checksum(&self.data))
    }
}

/// Reports every `Big` it receives.
struct Sink {
    out: mpsc::UnboundedSender<Seen>,
}

impl Actor for Sink {
    type Msg = Big;

    async fn handle(&mut self, Big(b): Big, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.out.send(Seen {
            at: Instant::now(),
            data: b,
        });
        Ok(())
    }
}

/// A position-sensitive checksum: fragments out of order or shifted change
/// it.
fn checksum(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (i, w) in b.chunks(8).enumerate() {
        let mut x = [0u8; 8];
        x[..w.len()].copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(x) ^ i as u64)
            .wrapping_mul(0x0100_0000_01b3)
            .rotate_left(17);
    }
    h
}

/// `len` pseudo-random bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Node `b` with a sink and a counter, node `a` (with `config`) holding
/// refs to both over one link.
async fn nodes(
    config: SystemConfig,
    b_config: SystemConfig,
) -> (
    actors::ActorSystem,
    actors::ActorSystem,
    ActorRef<Big>,
    ActorRef<Count>,
    mpsc::UnboundedReceiver<Seen>,
) {
    let b = actor_system_with("b", b_config).await;
    let (out, seen) = mpsc::unbounded_channel();
    b.spawn_named("sink", Sink { out }).expect("free");
    b.spawn_named("counter", Counter::default()).expect("free");
    let a = actor_system_with("a", config).await;
    let sink = within("resolve sink", a.resolve::<Big>(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    let counter = within(
        "resolve counter",
        a.resolve::<Count>(&actor_path(&b, "counter")),
    )
    .await
    .expect("resolves");
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&counter).await, 1);
    (a, b, sink, counter, seen)
}

/// A 20 MiB message arrives intact, and while it is on the link, round
/// trips to another actor over the same link keep going: each waits
/// behind at most a fragment or two, not behind the whole message.
///
/// Sent unfragmented (as one 20 MiB frame, with a 32 MiB frame limit), the
/// first round trip after the `tell` waits for the whole message, so the
/// longest round trip is about as long as the transfer and only a round
/// trip or two complete during it: both checks below fail. So do they
/// with fragments but no flow control (the sockets' buffers then hold
/// megabytes of fragments ahead of each small message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_messages_overtake_a_twenty_megabyte_message() {
    const SIZE: usize = 20 << 20;
    let (_a, b, sink, counter, mut seen) =
        nodes(SystemConfig::default(), SystemConfig::default()).await;
    let data = noise(SIZE, 7);
    let want = checksum(&data);
    // Warm up the ask path.
    for _ in 0..20 {
        total(&counter).await;
    }

    let start = Instant::now();
    sink.tell(Big(data.into()))
        .expect("queued on the large lane");
    let queued = start.elapsed();
    let mut rtts: Vec<Duration> = Vec::new();
    let arrived = within("the large message", async {
        loop {
            if let Ok(s) = seen.try_recv() {
                return s;
            }
            let t = Instant::now();
            total(&counter).await;
            rtts.push(t.elapsed());
        }
    })
    .await;
    // From the `tell` returning (it encodes 20 MiB first) to the arrival.
    let transfer = arrived.at.duration_since(start + queued);
    let max = rtts.iter().max().copied().unwrap_or_default();
    let mut sorted = rtts.clone();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    println!(
        "20 MiB: tell took {queued:?}, transfer {transfer:?}; {} round trips meanwhile, median {median:?}, max {max:?}",
        rtts.len()
    );
    assert_eq!(arrived.check(), (SIZE, want), "arrives intact");
    assert!(
        rtts.len() >= 10,
        "only {} round trips completed during a {transfer:?} transfer",
        rtts.len()
    );
    assert!(
        max * 2 < transfer,
        "a round trip took {max:?}, half or more of the {transfer:?} transfer: small messages waited behind the large one"
    );
    assert_eq!(b.dead_letters(), 0);
}

/// Over the maximum message size: refused at the sender with `TooLarge`
/// (by `tell` and `send`), nothing is sent, and the link carries small and
/// large messages afterwards. A receiver with a smaller limit drops a
/// larger message as a dead letter without buffering it, and keeps the
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_over_the_maximum_size_are_refused_and_the_link_stays_up() {
    const MAX: usize = 1 << 20;
    let mut small = SystemConfig::default();
    small.set_max_message_size(MAX).unwrap();
    let (_a, b, sink, counter, mut seen) = nodes(small.clone(), small).await;

    let err = sink
        .tell(Big(vec![1; 2 * MAX].into()))
        .expect_err("too large");
    let SendError::Serialization(SerializationError::TooLarge { size, limit }) = &err else {
        panic!("expected TooLarge, got {err}");
    };
    assert_eq!(*limit, MAX, "{err}");
    assert!(*size > MAX, "{err}");
    let err = within("send refusal", sink.send(Big(vec![1; 2 * MAX].into())))
        .await
        .expect_err("too large");
    assert!(
        matches!(
            err,
            SendError::Serialization(SerializationError::TooLarge { limit: MAX, .. })
        ),
        "{err}"
    );

    // Just under the limit still goes, fragmented, and so do small ones.
    let data = noise(MAX - 100, 3);
    let want = checksum(&data);
    within("send under the limit", sink.send(Big(data.into())))
        .await
        .expect("fits");
    let got = within("the message under the limit", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(got.check(), (MAX - 100, want));
    assert_eq!(total(&counter).await, 1);
    assert_eq!(b.dead_letters(), 0);

    // A sender with the default limit: the receiver (1 MiB) drops its
    // 3 MiB message as one dead letter and keeps the connection.
    let c = actor_system("c").await;
    let from_c = within("resolve from c", c.resolve::<Big>(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    let counter_c = within(
        "resolve counter from c",
        c.resolve::<Count>(&actor_path(&b, "counter")),
    )
    .await
    .expect("resolves");
    from_c.tell(Big(vec![5; 3 * MAX].into())).expect("queued");
    eventually("the oversized message is a dead letter", || {
        b.dead_letters() == 1
    })
    .await;
    let data = noise(MAX / 2, 4);
    let want = checksum(&data);
    from_c.tell(Big(data.into())).expect("queued");
    let got = within("the next large message", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(got.check(), (MAX / 2, want));
    counter_c.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&counter_c).await, 2);
    assert_eq!(b.dead_letters(), 1);
}

/// Once a recipient is known on a link, `tell` encodes straight into the
/// link's queue, giving up as soon as a message crosses the large-message
/// threshold. Such a message must still take the large-message lane (in
/// fragments, not one frame), one over the maximum size must still be
/// refused with its real size, and a message whose `Serialize` fails must
/// still report that: each through the general path. The link carries
/// small messages before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_recipient_still_gets_the_large_lane_and_the_size_check() {
    const MAX: usize = 1 << 20;
    let mut small = SystemConfig::default();
    small.set_max_message_size(MAX).unwrap();
    let (a, b, sink, _counter, mut seen) = nodes(small.clone(), small).await;
    // A small message defines the sink on the link.
    sink.tell(Big(vec![1; 10].into())).expect("room");
    let got = within("the small message", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(got.data.len(), 10);

    let frames = a.remote_stats().frames_out;
    let data = noise(MAX - 100, 5);
    let want = checksum(&data);
    sink.tell(Big(data.into()))
        .expect("queued on the large lane");
    let got = within("the large message", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(got.check(), (MAX - 100, want));
    // 64 KiB fragments, each acknowledged: many frames, not one.
    let sent = a.remote_stats().frames_out - frames;
    assert!(sent >= 16, "{sent} frames for a 1 MiB message");

    let err = sink
        .tell(Big(vec![1; 2 * MAX].into()))
        .expect_err("too large");
    let SendError::Serialization(SerializationError::TooLarge { size, limit }) = &err else {
        panic!("expected TooLarge, got {err}");
    };
    assert_eq!(*limit, MAX, "{err}");
    assert!(*size > 2 * MAX, "the whole message's size: {err}");

    sink.tell(Big(vec![2; 10].into())).expect("room");
    let got = within("a small message after", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(&got.data[..], &[2; 10]);
    assert_eq!(b.dead_letters(), 0);
}

/// A message whose `Serialize` fails on request.
#[derive(Debug, Deserialize)]
struct Flaky {
    fail: bool,
    n: u64,
}

impl Serialize for Flaky {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.fail {
            return Err(serde::ser::Error::custom("flaky refuses"));
        }
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Flaky", 2)?;
        st.serialize_field("fail", &self.fail)?;
        st.serialize_field("n", &self.n)?;
        st.end()
    }
}

impl RemoteMessage for Flaky {
    const MANIFEST: &'static str = "it.Flaky";
}

/// Sums `n`.
struct FlakySum(mpsc::UnboundedSender<u64>);

impl Actor for FlakySum {
    type Msg = Flaky;

    async fn handle(&mut self, m: Flaky, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(m.n);
        Ok(())
    }
}

#[tokio::test]
async fn a_failing_serialize_to_a_known_recipient_is_reported_and_nothing_is_sent() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (out, mut got) = mpsc::unbounded_channel();
    b.spawn_named("flaky", FlakySum(out)).expect("free");
    let flaky = within("resolve", a.resolve::<Flaky>(&actor_path(&b, "flaky")))
        .await
        .expect("resolves");
    flaky.tell(Flaky { fail: false, n: 1 }).expect("room");
    assert_eq!(within("first", got.recv()).await, Some(1));
    // Known on the link now: the failure happens inside the link's queue.
    let err = flaky.tell(Flaky { fail: true, n: 2 }).expect_err("fails");
    let SendError::Serialization(SerializationError::Encode(why)) = &err else {
        panic!("expected Encode, got {err}");
    };
    assert!(why.contains("flaky refuses"), "{why}");
    flaky.tell(Flaky { fail: false, n: 3 }).expect("room");
    // Nothing half-written went out: the next message is the next one.
    assert_eq!(within("third", got.recv()).await, Some(3));
    assert_eq!(b.dead_letters(), 0);
}

/// A fragment envelope by hand (message id, total, offset, `piece`),
/// framed, from the library's own writer.
fn fragment(
    id: u32,
    path: Option<&str>,
    msg: u32,
    total: u32,
    offset: u32,
    piece: &[u8],
) -> Vec<u8> {
    let to = match path {
        Some(p) => actors::wire::To::Define(id, p),
        None => actors::wire::To::Id(id),
    };
    let env = actors::wire::fragment(to, manifest_id(Big::MANIFEST), msg, total, offset, piece);
    frame_bytes(FrameKind::Message, &env)
}

/// A peer lying about fragments (gaps, overlaps, pieces past the total,
/// fragments of messages that never started, a total of 4 GiB) gets each
/// lie counted as a malformed envelope (a dead letter, the partial message
/// dropped) or, for a total over the limit, one dead letter and its
/// fragments skipped unbuffered. The connection stays up and delivers a
/// correct fragmented message afterwards, and other links are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_fragments_are_contained() {
    let (_a, b, _sink, counter, mut seen) =
        nodes(SystemConfig::default(), SystemConfig::default()).await;
    let (mut raw, _) = raw_actor_peer(&b).await;
    let path = Some("/user/sink");
    let mut bytes = Vec::new();
    // A gap: offset 500 after 100 bytes.
    bytes.extend(fragment(1, path, 1, 1000, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 1, 1000, 500, &[1; 100]));
    // A fragment of a message that never started.
    bytes.extend(fragment(1, None, 2, 1000, 100, &[1; 100]));
    // A piece past the total, first and later.
    bytes.extend(fragment(1, None, 3, 50, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 4, 150, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 4, 150, 100, &[1; 100]));
    // A total that changes mid-message.
    bytes.extend(fragment(1, None, 5, 300, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 5, 3000, 100, &[1; 100]));
    // Another message starting before the last one finished.
    bytes.extend(fragment(1, None, 6, 300, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 7, 300, 0, &[1; 100]));
    const LIES: u64 = 7;
    // Claims 4 GiB (over the 64 MiB limit): one dead letter, the rest of
    // its fragments are skipped without being buffered or counted.
    bytes.extend(fragment(1, None, 8, u32::MAX, 0, &[1; 100]));
    bytes.extend(fragment(1, None, 8, u32::MAX, 100, &[1; 100]));
    bytes.extend(fragment(1, None, 8, u32::MAX, 200, &[1; 100]));
    let dead_before = b.dead_letters();
    raw.write_all(&bytes).await.expect("write");
    eventually("every lie is a dead letter", || {
        b.dead_letters() > dead_before + LIES
    })
    .await;

    // The same connection then delivers a correct two-fragment message.
    let data = noise(100_000, 9);
    let want = checksum(&data);
    let mut encoded = BytesMut::new();
    Bincode
        .serialize(&Big(data.into()), &mut encoded)
        .expect("encodes");
    let total_len = encoded.len() as u32;
    let (first, second) = encoded.split_at(60_000);
    let mut good = fragment(1, None, 9, total_len, 0, first);
    good.extend(fragment(1, None, 9, total_len, 60_000, second));
    raw.write_all(&good).await.expect("write");
    let got = within("the correct message", seen.recv())
        .await
        .expect("arrives");
    assert_eq!(got.check(), (100_000, want));
    assert_eq!(
        b.dead_letters(),
        dead_before + LIES + 1,
        "nothing else was dropped"
    );
    // The well-behaved link is unaffected.
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&counter).await, 2);
}
