//! Per-link state that a peer's traffic creates is bounded: recipient ids
//! (compression), the paths that name recipients, watches, mailboxes, and
//! the association table (idle entries make room for new nodes).

use actors::{ActorRef, ActorResult, SystemConfig};
use integration_tests::{actor_path, actor_system_with, within};
use tokio::sync::mpsc;

use super::actors_common::{ASK, Collector, Count, Counter};

/// Bytes `system` handed to sockets so far.
fn bytes_out(system: &actors::ActorSystem) -> u64 {
    system.remote_stats().bytes_out
}

#[tokio::test]
async fn ask_reply_slots_take_no_recipient_ids() {
    const LIMIT: usize = 100;
    let mut config = SystemConfig::default();
    config.set_max_recipient_ids(LIMIT).unwrap();
    let a = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    // Ten times as many asks as the link has ids: each reply slot is new.
    for _ in 0..10 * LIMIT {
        within("an ask", counter.ask(Count::Get, ASK))
            .await
            .expect("answers");
    }
    // b still compresses a recipient it has not sent to before: a's fresh
    // actor. Its messages carry a 9-byte header, not the path.
    let (out, mut got) = mpsc::unbounded_channel();
    let fresh = a
        .spawn_named("a-fresh-actor-with-a-long-name", Collector::<u64> { out })
        .expect("free");
    let on_b: ActorRef<u64> = within("resolve", b.resolve(fresh.path().to_string().as_str()))
        .await
        .expect("resolves");
    on_b.tell(0).expect("room");
    within("the first", got.recv()).await;
    const N: u64 = 1_000;
    let before = bytes_out(&b);
    for i in 0..N {
        on_b.tell(i).expect("room");
    }
    for _ in 0..N {
        within("delivery", got.recv()).await;
    }
    let per_message = (bytes_out(&b) - before) as f64 / N as f64;
    // Frame header 5 + envelope 9 + a u64 up to 9: at most 23 bytes; with
    // the 30-byte path in every envelope it would be over 50.
    assert!(per_message < 30.0, "{per_message:.1} bytes per message");
}

#[tokio::test]
async fn recipients_past_the_id_limit_still_receive() {
    const LIMIT: usize = 50;
    let mut config = SystemConfig::default();
    config.set_max_recipient_ids(LIMIT).unwrap();
    let a = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config).await;
    let (out, mut got) = mpsc::unbounded_channel();
    let mut refs = Vec::new();
    for i in 0..2 * LIMIT {
        let name = format!("c{i}");
        b.spawn_named(&name, Collector::<u64> { out: out.clone() })
            .expect("free");
        refs.push(
            within("resolve", a.resolve::<u64>(&actor_path(&b, &name)))
                .await
                .expect("resolves"),
        );
    }
    // Twice around: the first 50 get ids, the rest travel with their path.
    for round in 0..2 {
        for (i, r) in refs.iter().enumerate() {
            r.tell((round * refs.len() + i) as u64).expect("room");
        }
    }
    let mut seen = 0;
    while seen < 4 * LIMIT {
        within("every message", got.recv()).await.expect("open");
        seen += 1;
    }
    assert_eq!((a.dead_letters(), b.dead_letters()), (0, 0));
}

/// bincode 2's varint for a `u64` below 2^16.
fn varint(v: u64, out: &mut Vec<u8>) {
    if v < 251 {
        out.push(v as u8);
    } else {
        out.push(251);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    }
}

#[tokio::test]
async fn a_node_cannot_pile_up_watches_on_one_actor() {
    use integration_tests::{frame_bytes, raw_client_handshake, raw_connect, run_raw_handshake};
    use tokio::io::AsyncWriteExt;
    use transport::{FrameKind, handshake::Hello};

    const WATCHES: u64 = 3_000;
    const LIMIT: u64 = 1_024;
    let a = actor_system_with("a", SystemConfig::default()).await;
    a.spawn_named("counter", Counter::default()).expect("free");
    let mut stream = raw_connect(a.local_addr().expect("remoting")).await;
    let hs = raw_client_handshake(Hello {
        uid: 9,
        addr: "watcher@127.0.0.1:9".into(),
    });
    run_raw_handshake(&mut stream, hs).await;
    let before = a.dead_letters();
    let mut bytes = Vec::new();
    for seq in 1..=WATCHES {
        // SysWire::Watch { path, watch_id } inside SysWire::Reliable.
        let mut watch = vec![2u8, 13];
        watch.extend_from_slice(b"/user/counter");
        varint(seq, &mut watch);
        let mut reliable = vec![5u8, 1];
        varint(seq, &mut reliable);
        varint(watch.len() as u64, &mut reliable);
        reliable.extend_from_slice(&watch);
        bytes.extend(frame_bytes(FrameKind::System, &reliable));
    }
    stream.write_all(&bytes).await.expect("written");
    integration_tests::eventually("the watches past the limit are refused", || {
        a.dead_letters() >= before + WATCHES - LIMIT
    })
    .await;
    assert_eq!(a.dead_letters(), before + WATCHES - LIMIT);
}

/// A blob of bytes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Blob(actors::SharedBytes);

impl actors::RemoteMessage for Blob {
    const MANIFEST: &'static str = "it.bounds.Blob";
}

/// Takes messages only once the gate opens.
struct Gated {
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl actors::Actor for Gated {
    type Msg = Blob;

    async fn handle(&mut self, _: Blob, _: &mut actors::Ctx<Self>) -> ActorResult {
        if let Some(gate) = self.gate.take() {
            let _ = gate.await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_mailbox_is_bounded_in_bytes_as_well_as_messages() {
    const BYTES: usize = 1 << 20;
    const PAYLOAD: usize = 10_000;
    let mut config = SystemConfig::default();
    config
        .set_mailbox_capacity(1_000_000)
        .unwrap()
        .set_mailbox_bytes(BYTES)
        .unwrap();
    let b = actor_system_with("b", config.clone()).await;
    let (open, gate) = tokio::sync::oneshot::channel();
    let slow = b
        .spawn_named("slow", Gated { gate: Some(gate) })
        .expect("free");
    let a = actor_system_with("a", config).await;
    let remote: ActorRef<Blob> = within("resolve", a.resolve(&actor_path(&b, "slow")))
        .await
        .expect("resolves");
    // The first message blocks the actor; then tell until the link is
    // full: backpressure reached the sender.
    let payload = actors::SharedBytes::from(vec![1u8; PAYLOAD]);
    let mut sent = 0u64;
    within("the link fills", async {
        loop {
            match remote.tell(Blob(payload.clone())) {
                Ok(()) => sent += 1,
                Err(actors::SendError::MailboxFull(_)) => return,
                Err(e) => panic!("{e}"),
            }
            if sent.is_multiple_of(64) {
                tokio::task::yield_now().await;
            }
        }
    })
    .await;
    // The mailbox holds about a megabyte (and one read's batch more), not
    // everything that was sent.
    let queued = slow.mailbox_len();
    assert!(
        queued * PAYLOAD < 4 * BYTES,
        "{queued} messages of {PAYLOAD} bytes queued ({sent} sent)"
    );
    let _ = open.send(());
}

/// Resolves `path` from `from`, again while it fails, within the test's
/// time bound: the room a closed link leaves is made as its tasks end.
async fn resolve_eventually(from: &actors::ActorSystem, path: &str) -> ActorRef<Count> {
    within("resolve succeeds", async {
        loop {
            if let Ok(r) = from.resolve::<Count>(path).await {
                return r;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

#[tokio::test]
async fn peers_that_come_and_go_do_not_fill_the_association_table() {
    let mut config = SystemConfig::default();
    // One for b, which stays, and one for the peers that come and go.
    config.set_max_associations(2).unwrap();
    let a = actor_system_with("a", config).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let on_b = resolve_eventually(&a, &actor_path(&b, "counter")).await;
    for i in 0..4 {
        let p = actor_system_with(&format!("p{i}"), SystemConfig::default()).await;
        p.spawn_named("counter", Counter::default()).expect("free");
        // Past the first, this needs the previous peer's association, which
        // shut down (and is quarantined), to make room.
        let on_p = resolve_eventually(&a, &actor_path(&p, "counter")).await;
        on_p.tell(Count::Add(1)).expect("room");
        within("p answers", on_p.ask(Count::Get, ASK))
            .await
            .expect("answers");
        drop(on_p);
        within("p shuts down", p.shutdown()).await;
    }
    // b's association, in use all along, was never dropped.
    on_b.tell(Count::Add(2)).expect("room");
    let total = within("b answers", on_b.ask(Count::Get, ASK))
        .await
        .expect("answers");
    assert_eq!(total, 2);
}

#[tokio::test]
async fn strangers_that_connect_and_leave_do_not_fill_the_association_table() {
    use integration_tests::{loopback, secured};
    use transport::{Endpoint, TransportConfig};
    let mut config = SystemConfig::default();
    config.set_max_associations(3).unwrap();
    let a = actor_system_with("a", config).await;
    let a_addr = a.local_addr().expect("remoting");
    // Twenty nodes nobody refers to, each holding the shared secret and
    // naming itself differently, connect and leave.
    for i in 0..20 {
        let e = Endpoint::bind_with(loopback(), secured(TransportConfig::default()), |s| {
            format!("stranger{i}@{s}")
        })
        .await
        .expect("binds");
        let est = within("connect", e.connect(a_addr))
            .await
            .expect("handshake");
        let (conn, _inbound) = est.start_channel(16);
        conn.close("leaving").await;
        e.close();
    }
    // a can still reach a real node: the strangers' associations, with no
    // connection left, made room.
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let on_b = resolve_eventually(&a, &actor_path(&b, "counter")).await;
    on_b.tell(Count::Add(3)).expect("room");
    let total = within("b answers", on_b.ask(Count::Get, ASK))
        .await
        .expect("answers");
    assert_eq!(total, 3);
}

/// An address nothing listens on (a listener bound and closed).
async fn dead_address() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind(integration_tests::loopback())
        .await
        .expect("binds");
    l.local_addr().expect("bound")
}

#[tokio::test]
async fn unused_associations_are_dropped_after_the_idle_timeout() {
    use std::time::Duration;
    let mut config = SystemConfig::default();
    config
        .set_association_idle_timeout(Duration::from_millis(200))
        .unwrap();
    config
        .set_resolve_timeout(Duration::from_millis(500))
        .unwrap();
    let a = actor_system_with("a", config).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let on_b = resolve_eventually(&a, &actor_path(&b, "counter")).await;
    // Nodes that are gone: resolving each fails, and leaves an association
    // behind that nothing uses.
    for i in 0..3 {
        let ghost = format!("tcp://ghost{i}@{}/user/counter", dead_address().await);
        let res = within("resolve a ghost", a.resolve::<Count>(&ghost)).await;
        assert!(res.is_err(), "nothing listens there");
    }
    let ghosts = |a: &actors::ActorSystem| {
        a.remote_nodes()
            .iter()
            .filter(|n| n.starts_with("ghost"))
            .count()
    };
    assert_eq!(ghosts(&a), 3, "each left an association");
    integration_tests::eventually("the ghosts' associations are dropped", || ghosts(&a) == 0).await;
    // b's, in use all along, stays and works.
    assert!(a.remote_nodes().contains(&b.node().to_string()));
    on_b.tell(Count::Add(4)).expect("room");
    let total = within("b answers", on_b.ask(Count::Get, ASK))
        .await
        .expect("answers");
    assert_eq!(total, 4);
}

#[tokio::test]
async fn associations_share_one_timer_task() {
    let mut config = SystemConfig::default();
    config
        .set_resolve_timeout(std::time::Duration::from_secs(2))
        .unwrap();
    let a = actor_system_with("a", config).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    // 200 distinct nodes, each resolved once (the dial is refused): each
    // leaves an association behind, kept for the idle timeout.
    let dead = dead_address().await;
    for i in 0..200 {
        let res = within(
            "resolve",
            a.resolve::<Count>(&format!("tcp://n{i}@{dead}/user/counter")),
        )
        .await;
        assert!(res.is_err(), "nothing listens there");
    }
    assert_eq!(a.remote_nodes().len(), 200);
    let after = metrics.num_alive_tasks();
    assert!(
        after < before + 10,
        "200 associations keep {} tasks alive",
        after.saturating_sub(before)
    );
}

#[tokio::test]
async fn a_flood_of_refused_connections_logs_a_few_escaped_lines() {
    use integration_tests::{LogCapture, raw_client_handshake, raw_connect, run_raw_handshake};
    use transport::handshake::Hello;
    let logs = LogCapture::install(tracing::Level::WARN);
    let a = actor_system_with("a", SystemConfig::default()).await;
    let addr = a.local_addr().expect("remoting");
    // Each names itself with an address that is not one, carrying a
    // forged log line.
    const CONNECTIONS: usize = 200;
    for i in 0..CONNECTIONS {
        let mut stream = raw_connect(addr).await;
        let hs = raw_client_handshake(Hello {
            uid: 100 + i as u64,
            addr: format!("x@\nFORGED ERROR line {i}"),
        });
        run_raw_handshake(&mut stream, hs).await;
        integration_tests::wait_closed(&mut stream).await;
    }
    let text = logs.text();
    let refused = logs.lines_with("invalid address");
    assert!(
        (1..=20).contains(&refused),
        "{CONNECTIONS} refusals logged {refused} lines"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("FORGED")),
        "a peer's text starts no line of its own:\n{text}"
    );
}

/// 200 peers that prove the secret and name 200 distinct nodes at an
/// address that refuses: the node dials each to check the claim, and each
/// dial fails. The `connect failed` warnings are sampled by the one
/// limiter (at most `LOG_BURST` per `LOG_WINDOW`), where each used to print
/// a line (206 to 209 in 10 s).
#[tokio::test]
async fn dial_provoking_hellos_log_a_sampled_few_connect_failures() {
    use integration_tests::{
        LogCapture, raw_client_handshake, raw_connect_from, run_raw_handshake,
    };
    use transport::{LOG_BURST, handshake::Hello};
    const HELLOS: usize = 200;
    let logs = LogCapture::install(tracing::Level::WARN);
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let addr = b.local_addr().expect("remoting");
    let dead = dead_address().await;
    let mut held = Vec::new();
    for i in 0..HELLOS {
        // Four source addresses: within the per-address connection bound.
        let from = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 3, 1 + (i % 4) as u8));
        let mut stream = raw_connect_from(from, addr, None).await;
        let hs = raw_client_handshake(Hello {
            uid: 1000 + i as u64,
            addr: format!("n{i}@{dead}"),
        });
        run_raw_handshake(&mut stream, hs).await;
        held.push(stream);
    }
    // A good node is served meanwhile.
    let a = actor_system_with("a", SystemConfig::default()).await;
    let counter = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(
        within("ask", counter.ask(Count::Get, ASK))
            .await
            .expect("answers"),
        1
    );
    assert!(
        b.remote_nodes().len() > HELLOS,
        "every hello made an association"
    );
    // The limiter is process-wide: tests running meanwhile may have spent
    // this window's burst, so this test may see fewer, never more.
    let lines = logs.lines_with("connect failed");
    assert!(
        lines <= 2 * LOG_BURST as usize,
        "{HELLOS} refused dials logged {lines} lines"
    );
    drop(held);
}
