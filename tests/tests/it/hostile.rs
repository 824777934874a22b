//! Hostile and broken peers against an actor system: each kind of bad
//! input is contained to its own connection, and a well-behaved node's
//! traffic continues.

use actors::{ActorRef, ActorSystem, Bincode, Serializer, SystemConfig, manifest_id};
use bytes::BytesMut;
use integration_tests::{
    actor_path, actor_system, actor_system_with, envelope, eventually, frame_bytes, raw_actor_peer,
    raw_connect, wait_closed, within,
};
use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, TestRunner},
};
use tokio::io::AsyncWriteExt;
use transport::{FrameKind, handshake::MAGIC};

use super::actors_common::{Count, Counter, total};

/// A node `b` with a counter, and a well-behaved node `a` linked to it.
async fn nodes(config: SystemConfig) -> (ActorSystem, ActorSystem, ActorRef<Count>) {
    let b = actor_system_with("b", config).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let a = actor_system("a").await;
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&counter).await, 1);
    (a, b, counter)
}

/// The well-behaved link still carries a message and its reply.
async fn still_works(counter: &ActorRef<Count>) {
    let before = total(counter).await;
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(total(counter).await, before + 1);
}

fn encoded(msg: &Count) -> Vec<u8> {
    let mut b = BytesMut::new();
    Bincode.serialize(msg, &mut b).expect("encodes");
    b.to_vec()
}

const COUNTER: &str = "/user/counter";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_input_is_contained() {
    let (_a, b, counter) = nodes(SystemConfig::default()).await;
    let addr = b.local_addr().expect("remoting");
    let mut preface = MAGIC.to_vec();
    preface.extend_from_slice(&[0, 99, 0, 0]);
    let mut half_hello = preface.clone();
    half_hello.truncate(4);
    let before_handshake: [(&str, Vec<u8>); 3] = [
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("wrong version", preface),
        (
            "a frame instead of the preface",
            frame_bytes(FrameKind::Message, b"hi"),
        ),
    ];
    for (what, bytes) in before_handshake {
        let mut raw = raw_connect(addr).await;
        raw.write_all(&bytes).await.expect(what);
        wait_closed(&mut raw).await;
        still_works(&counter).await;
    }
    let mut truncated = frame_bytes(FrameKind::Message, &[7; 100]);
    truncated.truncate(50);
    let after_handshake: [(&str, Vec<u8>, bool); 5] = [
        (
            "garbage",
            b"\x00\x00\x00\x05\x7fhello garbage".to_vec(),
            false,
        ),
        ("huge length", vec![0xff, 0xff, 0xff, 0xf0, 0x10], false),
        ("truncated frame, then end of stream", truncated, true),
        ("a second hello", half_hello, true),
        (
            "an undecodable system message",
            frame_bytes(FrameKind::System, &[0xff; 40]),
            true,
        ),
    ];
    for (what, bytes, eof) in after_handshake {
        let (mut raw, _) = raw_actor_peer(&b).await;
        raw.write_all(&bytes).await.expect(what);
        if eof {
            raw.shutdown().await.expect(what);
        }
        wait_closed(&mut raw).await;
        still_works(&counter).await;
    }

    // Well-framed envelopes that cannot be delivered are dead letters; the
    // connection that carried them stays up.
    let (mut raw, _) = raw_actor_peer(&b).await;
    let count = manifest_id("it.Count");
    let undeliverable = [
        envelope(1, Some("/user/nobody"), count, &encoded(&Count::Add(5))),
        envelope(2, Some(COUNTER), manifest_id("it.NoSuchType"), &[0]),
        envelope(9, None, count, &encoded(&Count::Add(5))),
        envelope(3, Some(COUNTER), count, &[0xff, 0xff, 0xff]),
        vec![1, 2],
    ];
    let dead_before = b.dead_letters();
    for env in &undeliverable {
        raw.write_all(&frame_bytes(FrameKind::Message, env))
            .await
            .expect("write");
    }
    // A valid envelope on the same raw link is still delivered.
    raw.write_all(&frame_bytes(
        FrameKind::Message,
        &envelope(4, Some(COUNTER), count, &encoded(&Count::Add(1000))),
    ))
    .await
    .expect("write");
    eventually("five dead letters", || {
        b.dead_letters() >= dead_before + undeliverable.len() as u64
    })
    .await;
    let t = total(&counter).await;
    assert!(t >= 1000, "the valid envelope arrived: total {t}");
    still_works(&counter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_malformed_envelopes_closes_only_that_connection() {
    const LIMIT: usize = 10;
    let mut config = SystemConfig::default();
    config.set_max_malformed_per_second(LIMIT);
    let (_a, b, counter) = nodes(config).await;
    // At the limit: tolerated, the connection stays up and delivers.
    let (mut raw, _) = raw_actor_peer(&b).await;
    let count = manifest_id("it.Count");
    let mut bytes = Vec::new();
    for _ in 0..LIMIT {
        bytes.extend(frame_bytes(FrameKind::Message, &[1, 2, 3]));
    }
    bytes.extend(frame_bytes(
        FrameKind::Message,
        &envelope(1, Some(COUNTER), count, &encoded(&Count::Add(100))),
    ));
    raw.write_all(&bytes).await.expect("write");
    let c = counter.clone();
    within("the valid envelope after ten malformed ones", async move {
        while total(&c).await < 100 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // One more within the second: the node closes this connection.
    let flood: Vec<u8> = (0..1000)
        .flat_map(|_| frame_bytes(FrameKind::Message, &[9]))
        .collect();
    let _ = raw.write_all(&flood).await;
    wait_closed(&mut raw).await;
    still_works(&counter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_claiming_gigabytes_is_a_dead_letter() {
    let (_a, b, counter) = nodes(SystemConfig::default()).await;
    let (mut raw, _) = raw_actor_peer(&b).await;
    let vecs = manifest_id("std.bytes");
    b.spawn_named(
        "vec",
        super::actors_common::Collector::<Vec<u8>> {
            out: tokio::sync::mpsc::unbounded_channel().0,
        },
    )
    .expect("free");
    let mut bombs = Vec::new();
    // A Vec<u8> whose varint length claims u64::MAX, then 2^40 bytes.
    let mut bomb = vec![253];
    bomb.extend_from_slice(&u64::MAX.to_le_bytes());
    bombs.push(bomb);
    let mut bomb = vec![253];
    bomb.extend_from_slice(&(1u64 << 40).to_le_bytes());
    bomb.extend_from_slice(&[0; 64]);
    bombs.push(bomb);
    // A Count::Add whose u64 varint is cut short.
    let dead_before = b.dead_letters();
    for (i, bomb) in bombs.iter().enumerate() {
        let env = envelope(i as u32 + 1, Some("/user/vec"), vecs, bomb);
        raw.write_all(&frame_bytes(FrameKind::Message, &env))
            .await
            .expect("write");
    }
    eventually("both bombs are dead letters", || {
        b.dead_letters() >= dead_before + bombs.len() as u64
    })
    .await;
    still_works(&counter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_do_not_stop_established_or_new_links() {
    // All of this test's connections come from 127.0.0.1: allow them all
    // from one address (the per-address bound is tested in
    // `hostile_transport`).
    let mut config = SystemConfig::default();
    config
        .transport_mut()
        .set_max_inbound_connections_per_ip(transport::DEFAULT_MAX_INBOUND_CONNECTIONS)
        .unwrap();
    let (_a, b, counter) = nodes(config).await;
    let addr = b.local_addr().expect("remoting");
    // 200 connections that never send a byte; the handshake timeout (5 s)
    // is far longer than the rest of this test, so all stay half-open.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(raw_connect(addr).await);
    }
    still_works(&counter).await;
    // A new node still completes its handshake and is served.
    let c = actor_system("c").await;
    let from_c = within(
        "resolve from c",
        c.resolve::<Count>(&actor_path(&b, "counter")),
    )
    .await
    .expect("resolves while 200 connections are half-open");
    from_c.tell(Count::Add(1)).expect("room");
    assert!(total(&from_c).await >= 2);
    drop(silent);
}

/// Random and mutated byte streams, after the handshake or instead of it,
/// against a live node: each ends with the node closing that connection
/// (at the latest when we end our stream), and the well-behaved link keeps
/// working throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_mutated_frames_never_hurt_the_node() {
    const CASES: u32 = 64;
    let (_a, b, counter) = nodes(SystemConfig::default()).await;
    let addr = b.local_addr().expect("remoting");
    let count = manifest_id("it.Count");
    // Valid frames to mutate: envelopes, system messages, heartbeats.
    let valid: Vec<Vec<u8>> = vec![
        frame_bytes(
            FrameKind::Message,
            &envelope(1, Some(COUNTER), count, &encoded(&Count::Add(1))),
        ),
        frame_bytes(
            FrameKind::Message,
            &envelope(1, None, count, &encoded(&Count::Add(2))),
        ),
        frame_bytes(FrameKind::System, &[0, 1, 2, 3]),
        frame_bytes(FrameKind::Heartbeat, b"beat"),
        frame_bytes(FrameKind::Close, b"bye"),
    ];
    let case = (
        any::<bool>(),
        proptest::collection::vec((0..valid.len(), any::<bool>()), 0..8),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
    );
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    for i in 0..CASES {
        let (handshake, frames, flips, tail) = case
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        let mut bytes: Vec<u8> = Vec::new();
        for (f, _) in &frames {
            bytes.extend_from_slice(&valid[*f]);
        }
        for (at, to) in &flips {
            if !bytes.is_empty() {
                let at = at.index(bytes.len());
                bytes[at] = *to;
            }
        }
        bytes.extend_from_slice(&tail);
        let mut raw = if handshake {
            raw_actor_peer(&b).await.0
        } else {
            raw_connect(addr).await
        };
        // The node may close first; a write error is fine.
        let _ = raw.write_all(&bytes).await;
        let _ = raw.shutdown().await;
        wait_closed(&mut raw).await;
        if i % 8 == 7 {
            still_works(&counter).await;
        }
    }
    still_works(&counter).await;
}

/// Recipient paths carrying a newline and a forged log line: each message
/// is a dead letter ("no such actor"), and its warning shows the path
/// escaped, so no forged line starts a line of the log; the warnings are
/// sampled (at most `LOG_BURST` per window), where 30 of 30 forged lines
/// once appeared.
#[tokio::test]
async fn a_forged_newline_in_a_recipient_path_forges_no_log_line() {
    use integration_tests::LogCapture;
    const FORGED: u32 = 30;
    let logs = LogCapture::install(tracing::Level::WARN);
    let (_a, b, counter) = nodes(SystemConfig::default()).await;
    let (mut raw, _) = raw_actor_peer(&b).await;
    let manifest = manifest_id(<Count as actors::RemoteMessage>::MANIFEST);
    for i in 0..FORGED {
        let path = format!("/user/nobody\n2026-12-02T00:00:00Z ERROR forged line {i}");
        let env = envelope(i + 1, Some(&path), manifest, &encoded(&Count::Add(1)));
        raw.write_all(&frame_bytes(FrameKind::Message, &env))
            .await
            .expect("the node reads");
    }
    eventually("every forged message is a dead letter", || {
        b.dead_letters() >= u64::from(FORGED)
    })
    .await;
    still_works(&counter).await;
    let text = logs.text();
    assert!(
        !text.lines().any(|l| l.starts_with("2026-12-02T00:00:00Z")),
        "a peer's newline starts no line:\n{text}"
    );
    assert!(
        text.contains(r"nobody\n2026-12-02"),
        "shown escaped:\n{text}"
    );
    let lines = logs.lines_with("dead letter");
    assert!(
        lines <= 2 * transport::LOG_BURST as usize,
        "{FORGED} dead letters logged {lines} lines"
    );
}

/// A reply ref whose actor name is 129 bytes, one over `MAX_NAME_LEN`: the
/// message carrying it does not decode (a dead letter that says why),
/// where it used to be decoded and answered.
#[tokio::test]
async fn a_reply_ref_with_a_129_byte_name_does_not_decode() {
    use integration_tests::LogCapture;
    use serde::Serialize;
    /// `Count` as it travels, its ref as the path string it is on the wire.
    #[derive(Serialize)]
    enum CountWire {
        #[allow(dead_code)]
        Add(u64),
        Get(String),
    }
    let logs = LogCapture::install(tracing::Level::WARN);
    let (_a, b, counter) = nodes(SystemConfig::default()).await;
    let (mut raw, _) = raw_actor_peer(&b).await;
    let name = "n".repeat(actors::MAX_NAME_LEN + 1);
    let mut payload = BytesMut::new();
    Bincode
        .serialize(
            &CountWire::Get(format!("tcp://{}/temp/{name}", integration_tests::RAW_NODE)),
            &mut payload,
        )
        .expect("encodes");
    let manifest = manifest_id(<Count as actors::RemoteMessage>::MANIFEST);
    let env = envelope(1, Some(COUNTER), manifest, &payload);
    raw.write_all(&frame_bytes(FrameKind::Message, &env))
        .await
        .expect("the node reads");
    eventually("the ref is refused", || {
        logs.lines_with("longer than MAX_NAME_LEN") >= 1
    })
    .await;
    assert_eq!(b.dead_letters(), 1);
    still_works(&counter).await;
}
