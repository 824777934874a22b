//! Queueing frames: a producer sending in a loop yields its thread to the
//! connection's writer once a batch is waiting, so batches go out (and the
//! peer starts on them) while it produces. Checked on a single-threaded
//! runtime, where the writer can only run when the producer yields: right
//! after the loop, with no other await in between, the writer must already
//! have written. And an encoder that gives up leaves nothing behind.

use bytes::Bytes;
use integration_tests::{actor_path, actor_system, connect, endpoint, within};
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
