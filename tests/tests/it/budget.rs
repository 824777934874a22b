//! The node-wide memory budget for peers
//! (`SystemConfig::set_peer_memory_budget`), attacked from raw sockets
//! that hold the secret: a recipient-table bomb, unfinished large
//! messages and ignored credit, each over many connections from several
//! source addresses; and from raw sockets that never prove the secret,
//! whose pending handshakes are charged too. The node's accounted bytes
//! never pass the budget, the
//! counters name what was refused, the accounting returns to zero once
//! the connections are gone, and a good sender that connects afterwards
//! is served.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, PeerMemory, RemoteMessage, SystemConfig,
    manifest_id,
};
use integration_tests::{
    PeerCount, actor_path, actor_system, actor_system_with, envelope, eventually, frame_bytes,
    raw_client_handshake, raw_connect_from, rss_of, run_raw_handshake, spawn_peer_args,
    wait_closed, within,
};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::watch,
    task::JoinSet,
};
use transport::{FrameKind, PENDING_HANDSHAKE_COST, handshake::Hello};

use super::{
    actors_common::{Count, Counter, total},
    hostile_transport::{never_proving, still_open},
};

/// The budget these tests give the node: 16 MiB.
const BUDGET: usize = 16 << 20;

/// A node with a small budget (`budget`), a counter for the good sender,
/// and a gated actor for the credit test.
async fn node(budget: usize) -> (ActorSystem, watch::Sender<bool>) {
    let mut config = SystemConfig::default();
    config
        .set_peer_memory_budget(budget)
        .unwrap()
        .set_mailbox_capacity(4)
        .unwrap()
        .set_max_malformed_per_second(1_000_000);
    let b = actor_system_with("b", config).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let (open, gate) = watch::channel(false);
    b.spawn_named(
        "gated",
        Gated {
            gate,
            got: Arc::default(),
        },
    )
    .expect("free");
    (b, open)
}

/// A raw peer of `b` from source address `127.0.0.<from>`, naming a node
/// of its own (`n`), past the handshake.
async fn raw_peer(b: &ActorSystem, from: u8, n: usize) -> TcpStream {
    raw_peer_at(b.local_addr().expect("remoting"), from, n).await
}

/// As [`raw_peer`], for the node listening on `addr`.
async fn raw_peer_at(addr: SocketAddr, from: u8, n: usize) -> TcpStream {
    let mut stream = raw_connect_from(IpAddr::from([127, 0, 0, from]), addr, None).await;
    let hs = raw_client_handshake(Hello {
        uid: 0xb0b0_0000 + n as u64,
        addr: format!("raw{n}@127.0.0.{from}:9"),
    });
    run_raw_handshake(&mut stream, hs).await;
    stream
}

/// Opens `n` raw peers spread over five source addresses and writes what
/// `bytes(i)` gives on each, in the background: a writer ends when the
/// node stops reading and closes, or when all is written.
async fn attack(b: &ActorSystem, n: usize, bytes: impl Fn(usize) -> Vec<u8>) -> JoinSet<()> {
    let mut writers = JoinSet::new();
    for i in 0..n {
        let mut raw = raw_peer(b, 10 + (i % 5) as u8, i).await;
        let bytes = bytes(i);
        writers.spawn(async move {
            let _ = raw.write_all(&bytes).await;
            // Held open until the test drops the set (or the node closes
            // it): a peer that keeps its connection.
            std::future::pending::<()>().await;
        });
    }
    writers
}

/// Writes `bytes` (ending in a heartbeat) on each raw connection to the
/// process `pid` and waits until each is read (its heartbeat answered)
/// or cut, sampling the process's resident memory meanwhile. A stream the
/// node keeps is held until every one is done, so that what the node
/// holds for it stays held while sampled. Returns the peak `VmRSS`.
async fn read_or_cut(pid: u32, what: &str, raws: Vec<TcpStream>, bytes: &[u8]) -> u64 {
    let before = rss_of(pid);
    let mut writers = JoinSet::new();
    for mut raw in raws {
        let bytes = bytes.to_vec();
        writers.spawn(async move {
            raw.write_all(&bytes).await.ok()?;
            let mut buf = bytes::BytesMut::new();
            loop {
                while let Ok(Some(f)) = transport::frame::decode(&mut buf, 1 << 24) {
                    if f.kind == FrameKind::HeartbeatAck {
                        return Some(raw);
                    }
                }
                match raw.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return None, // cut
                    Ok(_) => {}
                }
            }
        });
    }
    let mut peak = before;
    let mut kept = Vec::new();
    within(what, async {
        loop {
            peak = peak.max(rss_of(pid));
            tokio::select! {
                done = writers.join_next() => match done {
                    Some(stream) => kept.extend(stream.expect("no panic")),
                    None => break,
                },
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    })
    .await;
    peak.max(rss_of(pid))
}

/// The good sender, connecting now: served.
async fn a_good_sender_is_served(b: &ActorSystem) {
    let a = actor_system("a").await;
    let counter: ActorRef<Count> = within("resolve", a.resolve(&actor_path(b, "counter")))
        .await
        .expect("resolves");
    counter.tell(Count::Add(1)).expect("room");
    assert!(total(&counter).await >= 1);
    a.shutdown().await;
}

/// The accounting never passed the budget (the peak is exact: charges are
/// refused before they would pass it).
fn within_budget(m: &PeerMemory) {
    assert!(
        m.peak <= BUDGET,
        "peak {} bytes over the budget of {BUDGET}: {m:?}",
        m.peak
    );
}

/// With every raw connection gone, nothing is charged any more.
async fn returns_to_zero(b: &ActorSystem) {
    eventually("the accounting returns to zero", || {
        let m = b.peer_memory();
        m.held == 0 && m.connections == 0
    })
    .await;
}

/// One connection's table bomb: `ids` recipient ids with 1,000-byte
/// paths, defined to the counter's message type.
fn table_bomb(ids: u32) -> Vec<u8> {
    let path = format!("/user/{}", "x".repeat(994));
    let count = manifest_id(Count::MANIFEST);
    let mut bytes = Vec::new();
    for id in 1..=ids {
        bytes.extend(frame_bytes(
            FrameKind::Message,
            &envelope(id, Some(&path), count, &[]),
        ));
    }
    bytes
}

/// 50 connections from five addresses each define 2,000 recipient ids
/// with 1,000-byte paths (4 MB accounted each, 200 MB in all). The ids
/// past each connection's share are refused, its reads pause, and it is
/// cut, since ids are never given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_bomb_across_50_connections_stays_within_the_budget() {
    const CONNS: usize = 50;
    const IDS: u32 = 2_000;
    let (b, _open) = node(BUDGET).await;
    let writers = attack(&b, CONNS, |_| table_bomb(IDS)).await;
    eventually("ids are refused and the bombers cut", || {
        let m = b.peer_memory();
        (m.refused_ids > 0 && m.disconnected > 0) || m.peak > BUDGET
    })
    .await;
    within_budget(&b.peer_memory());
    drop(writers);
    returns_to_zero(&b).await;
    a_good_sender_is_served(&b).await;
    let m = b.peer_memory();
    within_budget(&m);
    assert!(m.refused_ids >= 1, "{m:?}");
}

/// 20 connections each start a large message of 8 MiB and send 2 MiB of
/// it in 128 KiB fragments, never finishing (40 MiB of reassembly
/// buffers without a budget). Past a connection's share its message is
/// dropped (a dead letter, its buffer freed) and its further fragments
/// skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_large_messages_across_20_connections_stay_within_the_budget() {
    const CONNS: usize = 20;
    const TOTAL: u32 = 8 << 20;
    const PIECE: usize = 128 << 10;
    const SENT: usize = 2 << 20;
    let (b, _open) = node(BUDGET).await;
    let count = manifest_id(Count::MANIFEST);
    let writers = attack(&b, CONNS, |_| {
        let mut bytes = Vec::new();
        for offset in (0..SENT).step_by(PIECE) {
            let mut payload = Vec::with_capacity(12 + PIECE);
            payload.extend_from_slice(&1u32.to_le_bytes());
            payload.extend_from_slice(&TOTAL.to_le_bytes());
            payload.extend_from_slice(&(offset as u32).to_le_bytes());
            payload.resize(12 + PIECE, 7);
            let path = (offset == 0).then_some("/user/counter");
            let mut env = envelope(1, path, count, &payload);
            env[0] |= 2; // the fragment flag
            bytes.extend(frame_bytes(FrameKind::Message, &env));
        }
        bytes
    })
    .await;
    eventually("reassembly is refused", || {
        let m = b.peer_memory();
        m.refused_large > 0 || m.peak > BUDGET
    })
    .await;
    within_budget(&b.peer_memory());
    let dead = b.dead_letters();
    assert!(dead >= 1, "each dropped message is a dead letter");
    drop(writers);
    returns_to_zero(&b).await;
    a_good_sender_is_served(&b).await;
    within_budget(&b.peer_memory());
}

/// Work for the gated actor.
#[derive(Debug, Serialize, Deserialize)]
struct Work(u64, Vec<u8>);

impl RemoteMessage for Work {
    const MANIFEST: &'static str = "it.budget.Work";
}

/// Handles nothing until its gate opens.
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

/// 20 connections send 4 MB each to an actor that takes nothing, ignoring
/// their 1 MiB windows (80 MB parked without a budget; each connection's
/// own park bound is 64 MiB). Past its share a connection's batches are
/// dead letters, its reads pause, and it is cut while the actor takes
/// nothing; once the actor runs again, what was parked is handed over and
/// given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_credit_across_20_connections_stays_within_the_budget() {
    const CONNS: usize = 20;
    const MESSAGES: usize = 400;
    let (b, open) = node(BUDGET).await;
    let mut payload = bytes::BytesMut::new();
    Work(0, vec![1; 10_000])
        .encode(&mut payload, usize::MAX)
        .expect("encodes");
    let manifest = manifest_id(Work::MANIFEST);
    let first = frame_bytes(
        FrameKind::Message,
        &envelope(1, Some("/user/gated"), manifest, &payload),
    );
    let next = frame_bytes(FrameKind::Message, &envelope(1, None, manifest, &payload));
    let writers = attack(&b, CONNS, |_| {
        let mut bytes = first.clone();
        for _ in 1..MESSAGES {
            bytes.extend_from_slice(&next);
        }
        bytes
    })
    .await;
    eventually("parking is refused and the floods cut", || {
        let m = b.peer_memory();
        (m.refused_parked > 0 && m.disconnected > 0) || m.peak > BUDGET
    })
    .await;
    within_budget(&b.peer_memory());
    drop(writers);
    // What is parked waits for the actor: handed over once it runs.
    open.send(true).expect("the actor runs");
    returns_to_zero(&b).await;
    a_good_sender_is_served(&b).await;
    within_budget(&b.peer_memory());
}

/// The table bomb against a node in its own process (the `peer` binary),
/// this time by its resident memory (`VmRSS`): each of 50 connections
/// sends its bomb and a heartbeat, and waits for the heartbeat's ack (the
/// node read everything before it) or for the node to cut it. Meanwhile
/// the node grows by no more than the budget and `SLACK` (measured: 23 MB
/// with a 16 MiB budget; 195 MB, 1.95 KB an id, without a budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_bomb_grows_a_node_process_by_at_most_its_budget() {
    /// What the node holds beside what is accounted: 50 connections'
    /// tasks and read buffers, the batches of the reads in progress, and
    /// the allocator's slack: 32 MiB.
    const SLACK: u64 = 32 << 20;
    const CONNS: usize = 50;
    let budget = BUDGET.to_string();
    let (mut child, node) = spawn_peer_args(
        env!("CARGO_BIN_EXE_peer"),
        "p",
        "127.0.0.1:0",
        &["--peer-memory-budget", &budget],
    )
    .await;
    let pid = child.id();
    let addr: SocketAddr = node
        .split_once('@')
        .and_then(|(_, a)| a.parse().ok())
        .expect("name@host:port");
    let before = rss_of(pid);
    let mut bytes = table_bomb(2_000);
    bytes.extend(frame_bytes(FrameKind::Heartbeat, &7u64.to_le_bytes()));
    let mut raws = Vec::new();
    for i in 0..CONNS {
        raws.push(raw_peer_at(addr, 10 + (i % 5) as u8, i).await);
    }
    let peak = read_or_cut(pid, "every bomb is read or cut", raws, &bytes).await;
    let _ = child.kill();
    let _ = child.wait();
    let grew = peak.saturating_sub(before);
    assert!(
        grew <= BUDGET as u64 + SLACK,
        "the node grew by {grew} bytes ({before} to {peak}), past its budget of {BUDGET} and {SLACK} of slack"
    );
}

/// Recipients in the "many recipients × window" attack.
const RECIPIENTS: usize = 200;

/// One connection of the "many recipients × window" attack: each of the
/// `RECIPIENTS` gated actors (`/user/gated-{r}`) gets 20 messages of
/// 10 kB, 200 kB, within its 1 MiB window; 40 MB a connection.
fn fill_windows() -> Vec<u8> {
    windows("gated", Work::MANIFEST, &Work(0, vec![1; 10_000]))
}

/// Frames for `RECIPIENTS` actors `/user/{prefix}-{r}`, each defining its
/// recipient id with its first message: 20 copies of `msg` each.
fn windows<M: RemoteMessage>(prefix: &str, manifest: &str, msg: &M) -> Vec<u8> {
    let mut payload = bytes::BytesMut::new();
    msg.encode(&mut payload, usize::MAX).expect("encodes");
    let manifest = manifest_id(manifest);
    let mut bytes = Vec::new();
    for r in 0..RECIPIENTS {
        let id = r as u32 + 1;
        let path = format!("/user/{prefix}-{r}");
        for k in 0..20 {
            let path = (k == 0).then_some(path.as_str());
            bytes.extend(frame_bytes(
                FrameKind::Message,
                &envelope(id, path, manifest, &payload),
            ));
        }
    }
    bytes
}

/// Many recipients × their windows: a good sender is connected when three
/// connections from two addresses define 200 recipients each, all gated
/// actors that take nothing, and send each 200 kB, within its 1 MiB
/// window (120 MB waiting in mailboxes, which no per-recipient bound
/// stops). What waits in mailboxes is charged to the sending connection,
/// so past its share its batches are dead letters (`over_share`), its
/// reads pause and it is cut and counted; the node never holds more than
/// its budget, and the good sender is served throughout. Once the actors
/// run, they take what waited and every charge goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_recipients_filling_their_windows_stay_within_the_budget() {
    let mut config = SystemConfig::default();
    config.set_peer_memory_budget(BUDGET).unwrap();
    let b = actor_system_with("b", config).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let (open, gate) = watch::channel(false);
    let got = Arc::new(AtomicU64::new(0));
    for r in 0..RECIPIENTS {
        let gated = Gated {
            gate: gate.clone(),
            got: got.clone(),
        };
        b.spawn_named(&format!("gated-{r}"), gated).expect("free");
    }
    // The good sender is a node already connected.
    let a = actor_system("a").await;
    let counter: ActorRef<Count> = within("resolve", a.resolve(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    counter.tell(Count::Add(1)).expect("room");
    assert!(total(&counter).await >= 1);

    let bytes = fill_windows();
    let mut attackers = JoinSet::new();
    for i in 0..3 {
        let mut raw = raw_peer(&b, 20 + (i % 2) as u8, 100 + i).await;
        let bytes = bytes.clone();
        attackers.spawn(async move {
            // The node stops reading, then cuts it: the write may fail.
            let _ = raw.write_all(&bytes).await;
            wait_closed(&mut raw).await;
        });
    }
    // Served while the attack goes on (and after).
    for n in 2..=4 {
        counter.tell(Count::Add(1)).expect("room");
        assert!(total(&counter).await >= n);
    }
    within("every attacker is cut", attackers.join_all()).await;
    let m = b.peer_memory();
    within_budget(&m);
    assert!(m.refused_queued >= 3, "{m:?}");
    assert!(m.disconnected >= 3, "{m:?}");
    assert!(b.dead_letters() >= 3, "refused batches are dead letters");
    counter.tell(Count::Add(1)).expect("room");
    assert!(total(&counter).await >= 5);
    a.shutdown().await;
    // What waited is taken once the actors run, and given back.
    open.send(true).expect("the actors run");
    returns_to_zero(&b).await;
    assert!(got.load(Ordering::Relaxed) > 0);
}

/// The same attack against a node in its own process (the `peer` binary,
/// whose `--blocked` actors never take their second message), by its
/// resident memory: each of three connections sends its 40 MB and a
/// heartbeat, and waits for the heartbeat's ack or for the node to cut
/// it. The node grows by no more than the budget and `SLACK` (without
/// charging what waits in mailboxes: by 120 MB and more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_recipients_filling_their_windows_grow_a_node_process_by_at_most_its_budget() {
    /// What the node holds beside what is accounted: the connections'
    /// read buffers (up to 1 MiB each) and batches of the reads in
    /// progress, what the refused batches were decoded from, and the
    /// allocator's slack: 32 MiB.
    const SLACK: u64 = 32 << 20;
    let budget = BUDGET.to_string();
    let recipients = RECIPIENTS.to_string();
    let (mut child, node) = spawn_peer_args(
        env!("CARGO_BIN_EXE_peer"),
        "p",
        "127.0.0.1:0",
        &["--peer-memory-budget", &budget, "--blocked", &recipients],
    )
    .await;
    let pid = child.id();
    let addr: SocketAddr = node
        .split_once('@')
        .and_then(|(_, a)| a.parse().ok())
        .expect("name@host:port");
    let before = rss_of(pid);
    let mut bytes = blocked_windows();
    bytes.extend(frame_bytes(FrameKind::Heartbeat, &7u64.to_le_bytes()));
    let mut raws = Vec::new();
    for i in 0..3 {
        raws.push(raw_peer_at(addr, 20 + (i % 2) as u8, 100 + i).await);
    }
    let peak = read_or_cut(pid, "every flood is read or cut", raws, &bytes).await;
    let _ = child.kill();
    let _ = child.wait();
    let grew = peak.saturating_sub(before);
    println!(
        "many recipients × window: the node grew by {} KiB",
        grew / 1024
    );
    assert!(
        grew <= BUDGET as u64 + SLACK,
        "the node grew by {grew} bytes ({before} to {peak}), past its budget of {BUDGET} and {SLACK} of slack"
    );
}

/// [`fill_windows`] for the `peer` binary's blocked actors
/// (`/user/blocked-{r}`, the counter's message type): 20 blobs of 10 kB
/// each.
fn blocked_windows() -> Vec<u8> {
    windows(
        "blocked",
        PeerCount::MANIFEST,
        &PeerCount::Blob(vec![1u8; 10_000].into()),
    )
}

/// What batches waiting for blocked actors cost a node process, printed
/// (the figures behind the budget's `BATCH_COST` and the README's limits
/// table): `M_ACTORS` blocked actors each get `M_PER` messages, in runs
/// of tiny records (the default), one message a read (`M_PER_READ`), or
/// 10 kB blobs (`M_BLOB=10000`). Run by hand:
/// `cargo test -p integration-tests --test it budget::measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_what_waiting_batches_cost() {
    let var = |k: &str, d: usize| std::env::var(k).map_or(d, |v| v.parse().expect("a number"));
    let actors_n = var("M_ACTORS", 64);
    let per = var("M_PER", 60_000);
    let blob = var("M_BLOB", 0);
    let per_read = std::env::var("M_PER_READ").is_ok();
    let n = actors_n.to_string();
    let (mut child, node) = spawn_peer_args(
        env!("CARGO_BIN_EXE_peer"),
        "p",
        "127.0.0.1:0",
        &["--peer-memory-budget", "4294967296", "--blocked", &n],
    )
    .await;
    let pid = child.id();
    let addr: SocketAddr = node
        .split_once('@')
        .and_then(|(_, a)| a.parse().ok())
        .expect("name@host:port");
    let mut raw = raw_peer_at(addr, 1, 1).await;
    let m = manifest_id(PeerCount::MANIFEST);
    let mut payload = bytes::BytesMut::new();
    let msg = if blob > 0 {
        PeerCount::Blob(vec![3u8; blob].into())
    } else {
        PeerCount::Add(1)
    };
    msg.encode(&mut payload, usize::MAX).expect("encodes");
    let mut hb = 0u64;
    let mut buf = bytes::BytesMut::new();
    // Writes `bytes` and a heartbeat, and waits for its ack: the node
    // has read (and queued) everything before it.
    let mut sync = async |raw: &mut TcpStream, mut bytes: Vec<u8>| {
        hb += 1;
        bytes.extend(frame_bytes(FrameKind::Heartbeat, &hb.to_le_bytes()));
        raw.write_all(&bytes).await.expect("written");
        loop {
            while let Ok(Some(f)) = transport::frame::decode(&mut buf, 1 << 24) {
                if f.kind == FrameKind::HeartbeatAck && f.body[..] == hb.to_le_bytes() {
                    return;
                }
            }
            assert!(raw.read_buf(&mut buf).await.expect("read") > 0, "closed");
        }
    };
    // Each actor takes its first message and blocks on it.
    let mut first = Vec::new();
    for i in 0..actors_n {
        let path = format!("/user/blocked-{i}");
        first.extend(frame_bytes(
            FrameKind::Message,
            &envelope(i as u32 + 1, Some(&path), m, &payload),
        ));
    }
    sync(&mut raw, first).await;
    let before = rss_of(pid);
    if per_read {
        for _ in 0..per {
            for i in 0..actors_n {
                let env = envelope(i as u32 + 1, None, m, &payload);
                sync(&mut raw, frame_bytes(FrameKind::Message, &env)).await;
            }
        }
    } else {
        let mut records = Vec::new();
        let mut run = Vec::new();
        let per_run = (64 << 10) / (4 + payload.len());
        for i in 0..actors_n {
            let id = i as u32 + 1;
            let mut left = per;
            while left > 0 {
                if blob == 0 {
                    let k = left.min(per_run);
                    run.clear();
                    for _ in 0..k {
                        run.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                        run.extend_from_slice(&payload);
                    }
                    let env = actors::wire::run(id, m, &run);
                    records.extend(frame_bytes(FrameKind::Message, &env));
                    left -= k;
                } else {
                    let env = envelope(id, None, m, &payload);
                    records.extend(frame_bytes(FrameKind::Message, &env));
                    left -= 1;
                }
            }
            if records.len() > (8 << 20) {
                sync(&mut raw, std::mem::take(&mut records)).await;
            }
        }
        sync(&mut raw, records).await;
    }
    let grew = rss_of(pid).saturating_sub(before);
    let total = actors_n * per;
    println!(
        "{actors_n} blocked actors × {per} messages of {} bytes (one a read: {per_read}): the node grew by {} KiB, {:.1} bytes a message",
        payload.len(),
        grew / 1024,
        grew as f64 / total as f64,
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A node paused reading a connection it dialed, since the peer at the
/// other end went over its share (it filled the windows of 200 gated
/// actors): the heartbeat acks behind the peer's messages wait unread, and
/// the node must not take that silence (its own doing) for the peer's and
/// judge it unreachable, with an acceptable pause (2 s) below the budget's
/// grace (5 s). The peer is a raw socket that `b` dials (a connection `b`
/// dialed is proven, and carries its heartbeats), answering every
/// heartbeat it reads in order with the rest it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_connection_is_not_judged_unreachable_for_its_silence() {
    let mut hb = actors::HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(100))
        .unwrap()
        .set_acceptable_pause(Duration::from_secs(2));
    let mut config = SystemConfig::default();
    config.set_heartbeat(hb);
    config.set_peer_memory_budget(BUDGET).unwrap();
    let b = actor_system_with("b", config).await;
    let (_open, gate) = watch::channel(false);
    for r in 0..RECIPIENTS {
        let gated = Gated {
            gate: gate.clone(),
            got: Arc::default(),
        };
        b.spawn_named(&format!("gated-{r}"), gated).expect("free");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let node = format!("raw@{}", listener.local_addr().expect("bound"));
    let mut events = b.subscribe_remote_events();
    // Makes `b` dial the raw node (the resolve is never answered).
    let _resolving = tokio::spawn({
        let (b, path) = (b.clone(), format!("tcp://{node}/user/x"));
        async move { b.resolve::<Count>(&path).await }
    });
    let (mut stream, _) = within("b dials the raw node", listener.accept())
        .await
        .expect("accepted");
    let hs = integration_tests::raw_side_handshake(
        Hello {
            uid: 0x5eed_0002,
            addr: node.clone(),
        },
        transport::auth::Role::Listener,
    );
    let (_, mut buf) = run_raw_handshake(&mut stream, hs).await;
    let (mut rd, mut wr) = stream.into_split();
    let (out, mut queue) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    // One writer: the flood and the acks go out in the order they are
    // queued, and wait together while `b` does not read.
    tokio::spawn(async move {
        while let Some(bytes) = queue.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let acks = out.clone();
    let answered = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        loop {
            while let Ok(Some(f)) = transport::frame::decode(&mut buf, 1 << 24) {
                if f.kind == FrameKind::Heartbeat {
                    let _ = acks.send(frame_bytes(FrameKind::HeartbeatAck, &f.body));
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    // Ten answered heartbeats first: the detector has a history.
    eventually("b's heartbeats are answered", || {
        answered.load(Ordering::Relaxed) >= 10
    })
    .await;
    out.send(fill_windows()).expect("the writer runs");
    eventually("b pauses, then cuts, the raw node's connection", || {
        b.peer_memory().disconnected >= 1
    })
    .await;
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, actors::RemoteEvent::Unreachable { .. }),
            "judged unreachable while its reads were paused: {e:?}"
        );
    }
}

/// A node with a `budget` and a counter, whose handshakes may wait 60 s
/// (longer than these tests: every pending handshake that ends, ends for
/// what the test does).
async fn patient_node(budget: usize) -> ActorSystem {
    patient_node_with(budget, SystemConfig::default()).await
}

/// As [`patient_node`], from `config`.
async fn patient_node_with(budget: usize, mut config: SystemConfig) -> ActorSystem {
    config.set_peer_memory_budget(budget).unwrap();
    config
        .transport_mut()
        .set_handshake_timeout(Duration::from_secs(60))
        .expect("a valid timeout");
    let b = actor_system_with("b", config).await;
    b.spawn_named("counter", Counter::default()).expect("free");
    b
}

/// 100 connections from five addresses that send the first flight of a
/// handshake and never prove the secret: each is charged what a pending
/// handshake holds while it waits, and given back when it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_handshakes_are_charged_while_they_wait() {
    const N: usize = 100;
    let b = patient_node(BUDGET).await;
    let flood = never_proving(b.local_addr().expect("remoting"), N, 5).await;
    eventually("every pending handshake is charged", || {
        let m = b.peer_memory();
        m.handshakes == N && m.held == N * PENDING_HANDSHAKE_COST
    })
    .await;
    let m = b.peer_memory();
    assert_eq!((m.connections, m.refused_handshakes), (0, 0), "{m:?}");
    drop(flood);
    eventually("the charges are given back", || {
        let m = b.peer_memory();
        m.held == 0 && m.handshakes == 0
    })
    .await;
    b.shutdown().await;
}

/// With the smallest budget (1 MiB), pending handshakes may hold 64 KiB:
/// 20 of them. 60 never-proving connections from three addresses: past 20
/// the charge is refused, and each newcomer evicts the oldest pending
/// handshake instead, so the flood holds at most 20 and a good sender
/// that connects meanwhile is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_budget_refuses_pending_handshakes_and_a_good_peer_still_connects() {
    const FLOOD: usize = 60;
    const FIT: usize = (1 << 20) / 16 / PENDING_HANDSHAKE_COST;
    let b = patient_node(1 << 20).await;
    let mut flood = never_proving(b.local_addr().expect("remoting"), FLOOD, 3).await;
    eventually("the flood is cut to what the budget holds", || {
        let m = b.peer_memory();
        m.refused_handshakes > 0 && m.handshakes == FIT && still_open(&mut flood) <= FIT
    })
    .await;
    a_good_sender_is_served(&b).await;
    let m = b.peer_memory();
    assert!(m.handshakes <= FIT, "{m:?}");
    assert!(m.peak <= 1 << 20, "{m:?}");
    assert!(still_open(&mut flood) <= FIT);
    drop(flood);
    eventually("the charges are given back", || {
        b.peer_memory().handshakes == 0
    })
    .await;
    b.shutdown().await;
}

/// An admission the application set on its transport configuration is
/// kept beside the node's budget, not replaced by it: pending handshakes
/// are charged to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_own_admission_is_charged_beside_the_budget() {
    const N: usize = 10;
    let theirs = integration_tests::CountingAdmission::default();
    let held = theirs.0.clone();
    let mut config = SystemConfig::default();
    config.transport_mut().set_admission(Some(Arc::new(theirs)));
    let b = patient_node_with(BUDGET, config).await;
    let flood = never_proving(b.local_addr().expect("remoting"), N, 1).await;
    let theirs = || held.load(std::sync::atomic::Ordering::Acquire);
    eventually("both accounts are charged", || {
        theirs() == N * PENDING_HANDSHAKE_COST && b.peer_memory().handshakes == N
    })
    .await;
    drop(flood);
    eventually("both are given back", || {
        theirs() == 0 && b.peer_memory().handshakes == 0
    })
    .await;
    b.shutdown().await;
}
