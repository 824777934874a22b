//! Control frames and counters.

use bytes::{Bytes, BytesMut};
use integration_tests::{connect, endpoint, eventually, pair, raw_connect, raw_handshake, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::{
    DEFAULT_MAX_FRAME_SIZE, Frame, FrameKind, TransportConfig,
    frame::{decode, encode},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_is_answered_with_an_ack_echoing_its_body() {
    let node = endpoint(TransportConfig::default()).await;
    let mut raw = raw_connect(node.local_addr()).await;
    let (mut buf, accepted) = within("handshake", async {
        tokio::join!(raw_handshake(&mut raw, node.uid()), node.accept())
    })
    .await;
    let (_conn, mut inbound) = accepted.unwrap().unwrap().start_channel(4);

    let probe = Frame {
        kind: FrameKind::Heartbeat,
        body: Bytes::from_static(b"probe-42\x00\xff"),
    };
    let mut out = BytesMut::new();
    encode(&probe, &mut out, DEFAULT_MAX_FRAME_SIZE).unwrap();
    // A message after the probe: the application sees it, not the probe.
    encode(
        &Frame::message(&b"app"[..]),
        &mut out,
        DEFAULT_MAX_FRAME_SIZE,
    )
    .unwrap();
    raw.write_all(&out).await.unwrap();

    let ack = within("heartbeat ack", async {
        loop {
            if let Some(f) = decode(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap() {
                return f;
            }
            assert_ne!(raw.read_buf(&mut buf).await.unwrap(), 0, "endpoint hung up");
        }
    })
    .await;
    assert_eq!(ack.kind, FrameKind::HeartbeatAck);
    assert_eq!(ack.body, probe.body);
    let first = within("application frame", inbound.recv()).await.unwrap();
    assert_eq!(first, Frame::message(&b"app"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_count_frames_writes_and_reads() {
    const N: u64 = 5_000;
    const BODY: usize = 32;
    let (a, b) = pair().await;
    let (c, _c_in, s, mut s_in) = connect(&a, &b).await;
    let sender = c.sender();
    for _ in 0..N {
        sender
            .send_with(FrameKind::Message, |b| b.extend_from_slice(&[9u8; BODY]))
            .await
            .unwrap();
    }
    within("all frames", async {
        for _ in 0..N {
            s_in.recv().await.expect("frame");
        }
    })
    .await;
    // The receiver counts a read before handing its frames on.
    let inbound = s.stats();
    assert!(inbound.frames_in >= N, "{inbound:?}");
    assert!(inbound.bytes_in >= N * (5 + BODY as u64), "{inbound:?}");
    assert!(inbound.reads >= 1, "{inbound:?}");
    // The writer counts after its flush, which may trail the delivery.
    eventually("sender's counters to reach N", || c.stats().frames_out >= N).await;
    let out = c.stats();
    assert_eq!(out.frames_out, N, "{out:?}");
    assert_eq!(out.bytes_out, N * (5 + BODY as u64), "{out:?}");
    assert!(out.writes >= 1, "{out:?}");
    assert!(out.frames_per_write() >= 1.0, "{out:?}");
    assert_eq!(out.frames_dropped, 0);
    println!(
        "{N} frames in {} writes ({:.1} frames/write), {} reads",
        out.writes,
        out.frames_per_write(),
        inbound.reads
    );
}
