//! Memory under faults, with a peer in its own process (`src/bin/peer.rs`):
//! a peer that stops reading (SIGSTOP: its socket stays open, nothing is
//! read) and a peer killed with data queued for it.
//!
//! Its own test binary, because it counts the live heap bytes of the whole
//! process (a counting global allocator): other tests running alongside
//! would be counted too. Its tests take a lock so they run one at a time.
//! `VmRSS` is sampled and printed too; the assertions are on the heap,
//! which the allocator returns to the OS or not as it likes.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Backoff, Ctx, HeartbeatConfig, RemoteMessage,
    SendError, SharedBytes, StopReason, SystemConfig,
};
use bytes::Bytes;
use integration_tests::{
    PeerCount, PeerProcess as Peer, TIMEOUT, actor_path, actor_system_with, within,
};
use serde::{Deserialize, Serialize};

/// Counts live heap bytes, then defers to `System`.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counter is a relaxed atomic
// and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds the contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        // SAFETY: `ptr` and `layout` come from this allocator, which got
        // them from `System`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test at a time: the counter is process-wide.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MIB: i64 = 1024 * 1024;
/// The sender's transport queue for these tests.
const QUEUE: usize = 16 * 1024 * 1024;
/// Messages buffered while connecting.
const PENDING: usize = 64;
const BLOB: usize = 64 * 1024;
/// What may stay allocated after a link ends: the endpoint's buffer pool
/// keeps the connection's two write buffers for reuse when their capacity
/// is at most 8 MiB (`transport` `MAX_RETAINED_BUFFER`), plus small change.
const RETAINED: i64 = 2 * 8 * MIB + 2 * MIB;

fn heap() -> i64 {
    LIVE.load(Relaxed)
}

/// The process's resident set, from `/proc/self/status`, in bytes.
fn rss() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Waits until `cond` holds, checking every 10 ms, for at most [`TIMEOUT`]
/// (memory is freed by other tasks, with no event to await).
async fn poll_until(what: &str, mut cond: impl FnMut() -> bool) {
    within(what, async {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while !cond() {
            tick.tick().await;
        }
    })
    .await;
}

fn config() -> SystemConfig {
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_millis(50))
        .unwrap()
        .set_acceptable_pause(Duration::from_millis(500));
    let mut c = SystemConfig::default();
    c.set_heartbeat(hb)
        .set_reconnect_backoff(
            Backoff::new(Duration::from_millis(20), Duration::from_millis(200), 0.2).unwrap(),
        )
        .set_pending_capacity(PENDING)
        // These tests fill the link itself (a peer that stopped reading):
        // a recipient's window larger than the queue lets them.
        .set_recipient_window(1 << 40)
        .unwrap();
    c.transport_mut().set_queue_capacity(QUEUE).unwrap();
    c
}

/// Node `a` with the peer's counter resolved, watched, and a first round
/// trip done (so the link and its buffers exist before the baseline).
async fn connected(peer: &Peer) -> (ActorSystem, ActorRef<PeerCount>, actors::Watch) {
    let a = actor_system_with("a", config()).await;
    let counter: ActorRef<PeerCount> = within(
        "resolve",
        a.resolve(&format!("tcp://{}/user/counter", peer.node)),
    )
    .await
    .expect("resolves");
    let watch = counter.watch();
    let blob = SharedBytes(Bytes::from(vec![7u8; BLOB]));
    for _ in 0..64 {
        within("send", counter.send(PeerCount::Blob(blob.clone())))
            .await
            .expect("sent");
    }
    let total = within("a round trip", counter.ask(PeerCount::Get, TIMEOUT))
        .await
        .expect("answers");
    assert_eq!(total, 0);
    (a, counter, watch)
}

/// Tells blobs until the link refuses one (its queue and the kernel's
/// buffers are full); returns how many were taken.
fn fill(counter: &ActorRef<PeerCount>) -> usize {
    let blob = SharedBytes(Bytes::from(vec![7u8; BLOB]));
    for i in 0..100_000 {
        match counter.tell(PeerCount::Blob(blob.clone())) {
            Ok(()) => {}
            Err(SendError::LinkFull(_)) => return i,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    panic!("6 GB taken for a stopped peer: the queue is not bounded");
}

/// `n` more tells; returns how many were taken.
fn more(counter: &ActorRef<PeerCount>, n: usize) -> usize {
    let blob = SharedBytes(Bytes::from(vec![7u8; BLOB]));
    (0..n)
        .filter(|_| counter.tell(PeerCount::Blob(blob.clone())).is_ok())
        .count()
}

fn mib(b: i64) -> f64 {
    b as f64 / MIB as f64
}

/// The counter of the third node's test: answers its total.
#[derive(Default)]
struct Echo(u64);

#[derive(Debug, Serialize, Deserialize)]
struct Ping(ActorRef<u64>);

impl RemoteMessage for Ping {
    const MANIFEST: &'static str = "mem.Ping";
}

impl Actor for Echo {
    type Msg = Ping;

    async fn handle(&mut self, Ping(reply): Ping, _: &mut Ctx<Self>) -> ActorResult {
        self.0 += 1;
        let _ = reply.tell(self.0);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_leaves_the_sender_bounded_and_other_peers_unaffected() {
    let _serial = SERIAL.lock().await;
    let peer = Peer::spawn(env!("CARGO_BIN_EXE_peer"), "b", "127.0.0.1:0").await;
    let (a, counter, watch) = connected(&peer).await;
    // A third node talks to a the whole time.
    let _echo = a.spawn_named("echo", Echo::default()).expect("free");
    let c = actor_system_with("c", SystemConfig::default()).await;
    let echo: ActorRef<Ping> = within("resolve echo", c.resolve(&actor_path(&a, "echo")))
        .await
        .expect("resolves");
    let stop = Arc::new(AtomicBool::new(false));
    let worst_ms = Arc::new(AtomicU64::new(0));
    let asker = tokio::spawn({
        let (stop, worst_ms) = (stop.clone(), worst_ms.clone());
        async move {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let t = Instant::now();
                let got = echo
                    .ask(Ping, Duration::from_secs(5))
                    .await
                    .expect("c's asks to a keep succeeding");
                n += 1;
                assert_eq!(got, n);
                worst_ms.fetch_max(t.elapsed().as_millis() as u64, Relaxed);
            }
            n
        }
    });
    let (h0, r0) = (heap(), rss());

    peer.stop();
    let taken = fill(&counter);
    let (h1, r1) = (heap(), rss());
    // Then a tight loop of 2,000 more (128 MB if they were kept).
    let extra = more(&counter, 2_000);
    let (h2, r2) = (heap(), rss());
    eprintln!(
        "stopped peer: baseline heap {:.1} MiB rss {:.1} MiB; full after {taken} blobs: heap +{:.1} rss +{:.1}; \
         2000 more tells ({extra} taken): heap +{:.1} rss +{:.1}",
        mib(h0),
        mib(r0),
        mib(h1 - h0),
        mib(r1 - r0),
        mib(h2 - h0),
        mib(r2 - r0)
    );
    // The queue's capacity counts queued bytes; the heap holds them in the
    // writer's two buffers (one filling, one being written), whose capacity
    // grows by doubling: up to about four times the queue. Bounded, whatever
    // the number of tells: a few more are taken while the kernel's buffers
    // for the stopped peer still have room, then all are refused.
    let bound = 4 * QUEUE as i64 + 8 * MIB;
    for (what, h) in [("full", h1), ("after 2,000 more tells", h2)] {
        assert!(
            h - h0 <= bound,
            "{what}: the link holds {:.1} MiB for a {:.0} MiB queue",
            mib(h - h0),
            mib(QUEUE as i64)
        );
    }
    assert!(
        (taken + extra) * BLOB <= QUEUE + 64 * MIB as usize,
        "{} blobs taken for a peer that reads nothing",
        taken + extra
    );

    // The failure detector fires: the stopped peer answers no heartbeat.
    let t = within("Terminated from the failure detector", watch).await;
    assert!(
        matches!(&t.reason, StopReason::NodeUnreachable(why) if why.contains("failure detector")),
        "{t:?}"
    );
    // Unreachable: the link's queue is dropped; new tells wait for a
    // connection in a buffer of PENDING messages.
    let _ = more(&counter, 2_000);
    let h3 = heap();
    assert!(h3 - h0 <= bound, "bounded while the link is aborted");
    let pending = (PENDING * BLOB) as i64 + RETAINED + 4 * MIB;
    poll_until("the aborted link's queue to be freed", || {
        heap() - h0 <= pending
    })
    .await;
    eprintln!(
        "after the detector fired and 2000 more tells: heap +{:.1} MiB, then +{:.1} MiB",
        mib(h3 - h0),
        mib(heap() - h0)
    );

    stop.store(true, Relaxed);
    let asks = within("the third node's asker", asker)
        .await
        .expect("c's asks all succeeded");
    let worst = Duration::from_millis(worst_ms.load(Relaxed));
    eprintln!("third node: {asks} asks to a, slowest {worst:?}");
    assert!(asks >= 1);
    assert!(worst < Duration::from_secs(2), "slowest ask {worst:?}");
    within("c shuts down", c.shutdown()).await;
    within("a shuts down", a.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_returns_to_baseline_after_a_killed_peer() {
    let _serial = SERIAL.lock().await;
    let mut peer = Peer::spawn(env!("CARGO_BIN_EXE_peer"), "b", "127.0.0.1:0").await;
    let (a, counter, watch) = connected(&peer).await;
    let (h0, r0) = (heap(), rss());
    // Queue as much as the link takes for a peer that stopped reading...
    peer.stop();
    let taken = fill(&counter);
    let (h1, r1) = (heap(), rss());
    assert!(
        h1 - h0 >= 8 * MIB,
        "the link queued {:.1} MiB ({taken} blobs)",
        mib(h1 - h0)
    );
    // ...then kill it.
    peer.kill();
    let t = within("Terminated from the failure detector", watch).await;
    assert!(matches!(t.reason, StopReason::NodeUnreachable(_)), "{t:?}");
    poll_until("the queued bytes to be freed", || heap() - h0 <= RETAINED).await;
    let (h2, r2) = (heap(), rss());
    eprintln!(
        "killed peer: baseline heap {:.1} MiB rss {:.1} MiB; queued: heap +{:.1} rss +{:.1}; \
         after the kill: heap {:+.1} rss {:+.1}",
        mib(h0),
        mib(r0),
        mib(h1 - h0),
        mib(r1 - r0),
        mib(h2 - h0),
        mib(r2 - r0)
    );
    // Generous: the allocator keeps some freed pages (the heap count above
    // is the exact check).
    assert!(
        r2 - r0 <= (r1 - r0) * 3 / 4 + 4 * MIB,
        "resident memory stays high after the kill: +{:.1} MiB (+{:.1} while queued)",
        mib(r2 - r0),
        mib(r1 - r0)
    );
    // And stays there: the association keeps nothing of the dead peer.
    let _ = more(&counter, 100);
    poll_until("the pending buffer to be dropped", || {
        heap() - h0 <= RETAINED
    })
    .await;
    within("a shuts down", a.shutdown()).await;
}

/// Asks `echo` `n` times, `in_flight` at once; every one must succeed.
async fn asks(echo: &ActorRef<Ping>, n: usize, in_flight: usize) {
    let mut tasks: tokio::task::JoinSet<Result<u64, String>> = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= in_flight {
            let r = tasks.join_next().await.expect("a task");
            r.expect("no panic").expect("every ask succeeds");
        }
        let echo = echo.clone();
        tasks.spawn(async move {
            echo.ask(Ping, TIMEOUT)
                .await
                .map_err(|e| format!("ask {i}: {e}"))
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("no panic").expect("every ask succeeds");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_never_use_up_a_link_and_memory_stays_flat() {
    const LIMIT: usize = 1_000;
    let _serial = SERIAL.lock().await;
    // Each ask has a fresh reply slot. Compressing them gave every ask a
    // recipient id on the link for good, until the ids ran out (2^20 then:
    // here the limit is scaled down to 1,000 so that 20 times past it is
    // quick).
    let mut c = config();
    c.set_max_recipient_ids(LIMIT).unwrap();
    let a = actor_system_with("a", c.clone()).await;
    let b = actor_system_with("b", c).await;
    b.spawn_named("echo", Echo::default()).expect("free");
    let echo: ActorRef<Ping> = within("resolve", a.resolve(&actor_path(&b, "echo")))
        .await
        .expect("resolves");
    // One round trip first: until b's link to a is up, b holds only
    // PENDING replies, and refuses the rest (`LinkFull`).
    asks(&echo, 1, 1).await;
    asks(&echo, 2 * LIMIT, 200).await;
    let before = heap();
    // At full speed...
    asks(&echo, 20 * LIMIT, 200).await;
    // ...and then one at a time, as a quiet service would.
    asks(&echo, 50, 1).await;
    let after = heap();
    println!(
        "heap {:.1} MiB before and {:.1} MiB after {} asks",
        mib(before),
        mib(after),
        20 * LIMIT + 50
    );
    assert!(
        after - before < 2 << 20,
        "memory grew by {:.1} MiB over {} asks",
        mib(after - before),
        20 * LIMIT + 50
    );
    assert_eq!(a.dead_letters(), 0);
    assert_eq!(b.dead_letters(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_questions_from_a_peer_that_never_reads_costs_a_bounded_outbox() {
    use integration_tests::{frame_bytes, raw_client_handshake, run_raw_handshake};
    use tokio::io::AsyncWriteExt;
    use transport::{FrameKind, handshake::Hello};

    const QUESTIONS: usize = 800_000;
    const SMALL_QUEUE: usize = 1 << 20;
    let _serial = SERIAL.lock().await;
    let mut small = config();
    small
        .transport_mut()
        .set_queue_capacity(SMALL_QUEUE)
        .unwrap();
    let a = actor_system_with("a", small).await;
    a.spawn_named("echo", Echo::default()).expect("free");
    let b = actor_system_with("b", config()).await;
    let echo: ActorRef<Ping> = within("resolve", b.resolve(&actor_path(&a, "echo")))
        .await
        .expect("resolves");
    within("an ask", echo.ask(Ping, TIMEOUT))
        .await
        .expect("answers");
    let before = heap();
    // A secret holder with a tiny receive buffer that never reads asks
    // `Identify` over and over: every answer finds the queue full.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("sized");
    let mut stream = socket
        .connect(a.local_addr().expect("remoting"))
        .await
        .expect("connects");
    let hs = raw_client_handshake(Hello {
        uid: 5,
        addr: "flood@127.0.0.1:9".into(),
    });
    run_raw_handshake(&mut stream, hs).await;
    // SysWire::Identify { id: 1, path: "/user/none" } in bincode's format.
    let mut identify = vec![0u8, 1, 10];
    identify.extend_from_slice(b"/user/none");
    let frame = frame_bytes(FrameKind::System, &identify);
    let chunk: Vec<u8> = frame
        .iter()
        .copied()
        .cycle()
        .take(frame.len() * 1000)
        .collect();
    for _ in 0..QUESTIONS / 1000 {
        within("the flood is written", stream.write_all(&chunk))
            .await
            .expect("written");
    }
    // Then a frame the node counts: once counted, the node has read
    // every question before it (one connection is read in order).
    let dead = a.dead_letters();
    within(
        "the marker is written",
        stream.write_all(&frame_bytes(FrameKind::Message, &[0xff])),
    )
    .await
    .expect("written");
    poll_until("the node read the whole flood", || a.dead_letters() > dead).await;
    within("an ask after the flood", echo.ask(Ping, TIMEOUT))
        .await
        .expect("the good peer is served");
    let after = heap();
    println!(
        "heap {:.1} MiB before, {:.1} MiB after {QUESTIONS} unanswerable questions",
        mib(before),
        mib(after)
    );
    // The connection's queue (1 MiB), the writer's buffers around it
    // (each grows to what one batch needed and may be kept, up to 8 MiB:
    // `RETAINED`), plus at most 1,024 parked answers; not a task per
    // answer (about 17 MB of answers were refused room; a task each grew
    // the heap by about 80 MiB here). Observed 3 to 15 MiB, the spread
    // being how large the writer's batches happened to grow.
    assert!(
        after - before < RETAINED + (4 << 20),
        "grew by {:.1} MiB",
        mib(after - before)
    );
    drop(stream);
    a.shutdown().await;
    b.shutdown().await;
}

/// Connections that send the first flight of a handshake and never go
/// on: `n` plain TCP streams (no runtime state on the client side), each
/// sends `flight` and reads the server's answer, so that the server has
/// taken in the flight and answered it. Returns the streams, still open.
async fn first_flights(
    addr: std::net::SocketAddr,
    n: usize,
    flight: Vec<u8>,
) -> Vec<std::net::TcpStream> {
    use std::io::{Read, Write};
    let streams = tokio::task::spawn_blocking(move || {
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = std::net::TcpStream::connect(addr).expect("connects");
            s.set_read_timeout(Some(TIMEOUT)).expect("a timeout");
            s.write_all(&flight).expect("the flight is written");
            let mut answer = [0u8; 64];
            let got = s.read(&mut answer).expect("the server answers its flight");
            assert!(got > 0, "the server hung up on a first flight");
            streams.push(s);
        }
        streams
    });
    within("first flights", streams).await.expect("joined")
}

/// A TLS node's certificate chain and key, and the CA that signs it, as
/// PEM; and a ClientHello that trusts the CA.
fn tls_pki() -> (transport::TlsConfig, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "mem-ca");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::new(ca, ca_key);
    let node = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = node.signed_by(&key, &issuer).unwrap();
    let mut tls = transport::TlsConfig::from_pem(
        format!("{}{ca_pem}", cert.pem()),
        key.serialize_pem(),
        ca_pem.clone(),
    );
    tls.set_allow_host_only_certificates(true);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone()).expect("the CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(client), name).expect("a client");
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).expect("a ClientHello");
    (tls, hello)
}

/// What a pending handshake holds, on the heap of the node that accepted
/// it, against what the endpoint charges for it
/// (`transport::PENDING_HANDSHAKE_COST`, and
/// `transport::PENDING_TLS_HANDSHAKE_COST` with TLS): 400 connections
/// that sent their first flight and had it answered, never going on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_handshake_holds_no_more_than_it_is_charged() {
    const N: usize = 1000;
    let _serial = SERIAL.lock().await;
    let mut config = integration_tests::secured(transport::TransportConfig::default());
    config
        .set_handshake_timeout(Duration::from_secs(60))
        .unwrap()
        .set_max_inbound_connections(2 * N)
        .unwrap()
        .set_max_inbound_connections_per_ip(2 * N)
        .unwrap()
        .set_max_unproven_per_ip(2 * N)
        .unwrap();
    let per = |before: (i64, i64), after: (i64, i64)| {
        (
            (after.0 - before.0) / N as i64,
            (after.1 - before.1) / N as i64,
        )
    };

    let plain = transport::Endpoint::bind(integration_tests::loopback(), config.clone())
        .await
        .expect("binds");
    // One connection first, so that what is made once (the runtime's
    // blocking thread, the slot table's first entries) is not counted.
    let warm = first_flights(
        plain.local_addr(),
        1,
        integration_tests::client_preface(7, "m@127.0.0.1:9").to_vec(),
    )
    .await;
    let before = (heap(), rss());
    let flood = first_flights(
        plain.local_addr(),
        N,
        integration_tests::client_preface(7, "m@127.0.0.1:9").to_vec(),
    )
    .await;
    let plain_each = per(before, (heap(), rss()));
    drop((flood, warm));

    let (tls, hello) = tls_pki();
    let secure = transport::Endpoint::bind_tls(integration_tests::loopback(), config, tls)
        .await
        .expect("binds");
    let warm = first_flights(secure.local_addr(), 1, hello.clone()).await;
    let before = (heap(), rss());
    let flood = first_flights(secure.local_addr(), N, hello).await;
    let tls_each = per(before, (heap(), rss()));
    drop((flood, warm));
    println!(
        "heap, resident memory per pending handshake: plaintext {plain_each:?} bytes \
         (charged {}), TLS {tls_each:?} bytes (charged {})",
        transport::PENDING_HANDSHAKE_COST,
        transport::PENDING_TLS_HANDSHAKE_COST
    );
    // The heap is what the assertions are on (see the module's docs);
    // resident memory is printed for the figures in the docs.
    assert!(plain_each.0 <= transport::PENDING_HANDSHAKE_COST as i64);
    assert!(tls_each.0 <= transport::PENDING_TLS_HANDSHAKE_COST as i64);
    // And each is most of its charge: a charge far above what is held
    // would refuse peers for memory the node does not use.
    assert!(plain_each.0 >= transport::PENDING_HANDSHAKE_COST as i64 / 2);
    assert!(tls_each.0 >= transport::PENDING_TLS_HANDSHAKE_COST as i64 / 2);
}
