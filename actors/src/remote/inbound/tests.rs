//! Tests of the dispatcher as a whole, and the fakes the units' own tests
//! share: a fake `Peer` that records what it is told, and a fake actor.

use std::{
    any::Any,
    future::Future,
    pin::Pin,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};

use super::*;
use crate::{
    budget::{Charge, NodeBudget, id_cost},
    lifecycle::Terminated,
    mailbox::Refused,
    registry::Target,
    remote::envelope::{Fragment, put_compact_header, put_header},
    reply::NoReply,
    watch::WatchSink,
};

/// The association side, recording what the dispatcher reports.
#[derive(Default)]
pub(super) struct FakePeer {
    sys_in: Mutex<SysIn>,
    events: Mutex<Vec<String>>,
}

impl FakePeer {
    fn record(&self, e: String) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }

    pub(super) fn events(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl RemoteWatcher for FakePeer {
    fn send_terminated(self: Arc<Self>, watch_id: u64, _: u64, t: &Terminated) {
        self.record(format!("terminated {watch_id} {}", t.reason));
    }
}

impl Peer for FakePeer {
    fn on_reads_paused(&self, paused: bool) {
        self.record(format!("reads paused {paused}"));
    }

    fn node(&self) -> &Arc<str> {
        static NODE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
        NODE.get_or_init(|| "peer@127.0.0.1:1".into())
    }
    fn sys_in(&self) -> MutexGuard<'_, SysIn> {
        self.sys_in.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn on_ack(&self, epoch: u64, seq: u64) {
        self.record(format!("ack {epoch} {seq}"));
    }

    fn on_shutdown(&self, uid: u64) {
        self.record(format!("shutdown {uid}"));
    }
    fn on_large_ack(&self, msg: u32, received: u32) {
        self.record(format!("large ack {msg} {received}"));
    }
    fn on_heartbeat_ack(&self, seq: u64) {
        self.record(format!("heartbeat ack {seq}"));
    }
    fn on_identity(&self, id: u64, manifest: Option<(u32, String)>) {
        self.record(format!("identity {id} {manifest:?}"));
    }
    fn on_terminated(&self, watch_id: u64, reason: StopReason) {
        self.record(format!("their actor {watch_id} {reason}"));
    }
    fn watcher(self: Arc<Self>) -> Arc<dyn RemoteWatcher> {
        self
    }
    fn on_close(&self, generation: u32, reason: &CloseReason) {
        self.record(format!("closed {generation} {reason}"));
    }
    fn on_credit(&self, generation: u32, id: u32, total: u64) {
        self.record(format!("credit {generation} {id} {total}"));
    }
}

/// A local actor taking manifest 7, recording the batches it gets; its
/// mailbox can be made full or closed.
#[derive(Default)]
pub(super) struct FakeTarget {
    pub(super) batches: Mutex<Vec<(usize, Bytes)>>,
    /// The charges of the batches it holds, as a mailbox keeps them.
    pub(super) charges: Mutex<Vec<Charge>>,
    /// Its mailbox refuses as full while set.
    pub(super) full: AtomicBool,
    /// Its mailbox refuses as closed (the actor stopped) while set.
    pub(super) closed: AtomicBool,
    /// Notified when `full` is cleared.
    pub(super) space: tokio::sync::Notify,
    /// Why the asks it stands for failed.
    pub(super) failed: Mutex<Vec<String>>,
    pub(super) stopped: AtomicBool,
}

impl FakeTarget {
    /// The batches it took: their record counts.
    pub(super) fn counts(&self) -> Vec<usize> {
        self.batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(n, _)| *n)
            .collect()
    }

    /// Its mailbox has room again.
    pub(super) fn make_room(&self) {
        self.full.store(false, Ordering::SeqCst);
        self.space.notify_one();
    }
}

impl Target for FakeTarget {
    fn manifest(&self) -> u32 {
        7
    }
    fn manifest_name(&self) -> &'static str {
        "test.Seven"
    }
    fn push_batch(&self, batch: &Bytes, n: usize, charge: &mut Charge) -> Result<(), Refused> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::Closed);
        }
        if self.full.load(Ordering::SeqCst) {
            return Err(Refused::Full);
        }
        self.batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((n, batch.clone()));
        self.charges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(std::mem::take(charge));
        Ok(())
    }
    fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            while self.full.load(Ordering::SeqCst) {
                self.space.notified().await;
            }
        })
    }
    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }
    fn fail(&self, reason: &str) {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(reason.to_owned());
    }
    fn no_reply(&self, why: NoReply) {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{why:?}"));
    }
    fn add_watcher(&self, sink: WatchSink) -> Result<(), crate::watch::TooManyWatches> {
        sink.deliver(Terminated {
            path: seven_path(),
            reason: StopReason::Stopped,
        });
        Ok(())
    }
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The shared part of a dispatcher alone, for the units' own tests: on a
/// registry where `/user/seven` is a [`FakeTarget`], with the fake peer.
pub(super) fn conn(proven: bool) -> (Conn, Arc<FakePeer>, Arc<Registry>) {
    let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
    registry.register("/user/seven", Arc::new(FakeTarget::default()));
    let peer = Arc::new(FakePeer::default());
    let conn = Conn::new(registry.clone(), peer.clone(), 3, 42, proven, 1_000);
    (conn, peer, registry)
}

/// The answers `conn` sent, as `Debug` text.
pub(super) fn answered(conn: &Conn) -> Vec<String> {
    conn.answered
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// What only the node itself may tell this node (see `Conn::proven`).
pub(super) fn about_the_node() -> [SysWire; 4] {
    [
        SysWire::Shutdown,
        SysWire::Ack { epoch: 1, seq: 4 },
        SysWire::LargeAck {
            msg: 2,
            received: 10,
        },
        SysWire::Identity {
            id: 6,
            manifest: None,
        },
    ]
}

/// Message 1 of a reliable stream: a watch of `/user/seven`.
pub(super) fn reliable_watch(watch_id: u64) -> bytes::Bytes {
    let watch = SysWire::Watch {
        path: "/user/seven".into(),
        watch_id,
    };
    SysWire::Reliable {
        epoch: 1,
        seq: 1,
        body: watch.encode().to_vec(),
    }
    .encode()
}

fn seven_path() -> crate::path::ActorPath {
    crate::path::ActorPath::parse("tcp://me@127.0.0.1:2/user/seven").expect("valid")
}

/// A connection's account of a node budget as `config` sets it.
fn account(config: &SystemConfig) -> Arc<ConnBudget> {
    crate::budget::NodeBudget::new(config.peer_memory_budget).connect([127, 0, 0, 1].into())
}

fn setup() -> (Dispatch, Arc<FakePeer>, Arc<FakeTarget>, Arc<Registry>) {
    setup_with(FakePeer::default(), true)
}

fn setup_with(
    peer: FakePeer,
    proven: bool,
) -> (Dispatch, Arc<FakePeer>, Arc<FakeTarget>, Arc<Registry>) {
    let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
    let target = Arc::new(FakeTarget::default());
    registry.register("/user/seven", target.clone());
    let peer = Arc::new(peer);
    let mut config = SystemConfig::default();
    config
        .set_max_malformed_per_second(1_000)
        .set_max_recipient_ids(1_000)
        .unwrap();
    let d = Dispatch::new(
        registry.clone(),
        &config,
        peer.clone(),
        3,
        42,
        proven,
        account(&config),
    );
    (d, peer, target, registry)
}

fn envelope(id: u32, define: Option<&str>, manifest: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    match define {
        Some(p) => put_header(
            &mut b,
            envelope::To::Define(id, p),
            envelope::Tag::plain(manifest),
            None,
        ),
        None => put_compact_header(&mut b, id, manifest),
    }
    b.extend_from_slice(payload);
    b.to_vec()
}

#[tokio::test]
async fn one_batch_per_recipient_per_read() {
    let (mut d, _, target, registry) = setup();
    d.on_read(1 << 16);
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(1, Some("/user/seven"), 7, b"a"),
    );
    d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"bc"));
    d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b""));
    assert!(
        target.batches.lock().unwrap().is_empty(),
        "held until the read ends"
    );
    d.on_batch_end().await;
    let batches = target.batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 1);
    let (n, batch) = &batches[0];
    assert_eq!(*n, 3);
    assert_eq!(&batch[..], b"\x01\0\0\0a\x02\0\0\0bc\0\0\0\0");
    assert_eq!(registry.dead_letter_count(), 0);
}

#[tokio::test]
async fn unknown_ids_wrong_types_and_garbage_are_dead_letters() {
    let (mut d, _, target, registry) = setup();
    // Used before it was defined: malformed.
    d.on_frame_ref(FrameKind::Message, &envelope(9, None, 7, b"x"));
    // Defined for an actor that takes another manifest.
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(2, Some("/user/seven"), 8, b"x"),
    );
    // No actor at that path.
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(3, Some("/user/none"), 7, b"x"),
    );
    // Not an envelope at all, and an id beyond the table's bound.
    d.on_frame_ref(FrameKind::Message, &[1, 2]);
    // Ids past the per-link limit (1,000 in these tests) are refused:
    // 997 more fit (3 are defined above).
    for id in 100..1_100 {
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(id, Some("/user/none"), 7, b""),
        );
    }
    d.on_batch_end().await;
    assert!(target.batches.lock().unwrap().is_empty());
    // 1 unknown id, 1 wrong type, 1 no actor, 1 not an envelope, 997
    // more to no actor, 3 past the limit.
    assert_eq!(registry.dead_letter_count(), 1_004);
}

/// A dispatcher alone on a node budget of `budget` bytes.
fn setup_budget(budget: usize) -> (Dispatch, Arc<NodeBudget>, Arc<Registry>) {
    let (d, node, registry, _) = setup_budget_peer(budget);
    (d, node, registry)
}

/// As [`setup_budget`], with the fake peer.
fn setup_budget_peer(budget: usize) -> (Dispatch, Arc<NodeBudget>, Arc<Registry>, Arc<FakePeer>) {
    let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
    registry.register("/user/seven", Arc::new(FakeTarget::default()));
    let mut config = SystemConfig::default();
    config.set_max_malformed_per_second(1_000);
    let node = NodeBudget::new(budget);
    let account = node.connect([127, 0, 0, 1].into());
    let peer = Arc::new(FakePeer::default());
    let d = Dispatch::new(
        registry.clone(),
        &config,
        peer.clone(),
        3,
        42,
        true,
        account,
    );
    (d, node, registry, peer)
}

/// A path of `len` bytes.
fn long_path(len: usize) -> String {
    format!("/user/{}", "p".repeat(len - 6))
}

#[tokio::test]
async fn recipient_ids_are_charged_and_given_back_when_the_connection_goes() {
    let (mut d, node, _) = setup_budget(1 << 20);
    let path = long_path(1_000);
    d.on_read(1 << 16);
    for id in 1..=10 {
        d.on_frame_ref(FrameKind::Message, &envelope(id, Some(&path), 7, b""));
    }
    assert_eq!(node.snapshot().held, 10 * id_cost(1_000));
    // A redefinition costs the difference.
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(1, Some("/user/seven"), 7, b""),
    );
    assert_eq!(
        node.snapshot().held,
        9 * id_cost(1_000) + id_cost("/user/seven".len())
    );
    d.on_batch_end().await;
    drop(d);
    let s = node.snapshot();
    assert_eq!((s.held, s.connections, s.refused_ids), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_table_bomb_is_refused_past_the_budget_then_the_connection_is_cut() {
    let budget = 100 * id_cost(1_000);
    let (mut d, node, registry, peer) = setup_budget_peer(budget);
    let path = long_path(1_000);
    d.on_read(1 << 20);
    for id in 1..=150 {
        d.on_frame_ref(FrameKind::Message, &envelope(id, Some(&path), 7, b""));
    }
    let s = node.snapshot();
    assert_eq!((s.held, s.peak, s.refused_ids), (budget, budget, 50));
    // No actor lives there: 100 dead letters for that, 50 refused.
    assert_eq!(registry.dead_letter_count(), 150);
    // The read's end pauses reading; nothing is given back, so the
    // connection is cut after the grace.
    let start = tokio::time::Instant::now();
    d.on_batch_end().await;
    assert!(start.elapsed() >= crate::budget::PAUSE_GRACE);
    assert!(d.conn.misbehaving);
    assert_eq!(node.snapshot().disconnected, 1);
    // The peer's liveness knew of the pause, while it lasted.
    assert_eq!(peer.events(), ["reads paused true", "reads paused false"]);
    drop(d);
    assert_eq!(node.snapshot().held, 0);
}

/// A dispatcher on a node budget of `budget` bytes whose `/user/seven`
/// keeps what it is handed, charges included.
fn setup_queued(budget: usize) -> (Dispatch, Arc<NodeBudget>, Arc<FakeTarget>, Arc<Registry>) {
    let (d, node, registry, _) = setup_budget_peer(budget);
    let target = Arc::new(FakeTarget::default());
    registry.register("/user/seven", target.clone());
    (d, node, target, registry)
}

#[tokio::test]
async fn a_batch_waiting_in_a_mailbox_is_charged_until_its_actor_is_done_with_it() {
    let (mut d, node, target, _) = setup_queued(1 << 20);
    d.on_read(1 << 16);
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(1, Some("/user/seven"), 7, b"abc"),
    );
    d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"de"));
    d.on_batch_end().await;
    // Two records of `[len u32][payload]`.
    let ids = id_cost("/user/seven".len());
    assert_eq!(node.snapshot().held, ids + queued_cost(4 + 3 + 4 + 2));
    assert_eq!(
        target.charges.lock().unwrap().len(),
        1,
        "one charge a batch"
    );
    // The actor is done with it: its charge goes back, and the
    // connection holds its ids only.
    target.charges.lock().unwrap().clear();
    assert_eq!(node.snapshot().held, ids);
    // The connection goes while a batch still waits: the batch's
    // charge keeps its account (and the node's count) until it goes.
    d.on_read(1 << 16);
    d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"f"));
    d.on_batch_end().await;
    drop(d);
    assert_eq!(node.snapshot().held, queued_cost(5));
    target.charges.lock().unwrap().clear();
    let s = node.snapshot();
    assert_eq!((s.held, s.connections, s.refused_queued), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn batches_past_the_share_are_dead_letters_and_the_connection_pauses_then_is_cut() {
    // Room for the id and three batches of one 1 kB message (each
    // copied out of its read's buffer, so charged its own size).
    let budget = id_cost("/user/seven".len()) + 3 * queued_cost(1_004) + 100;
    let (mut d, node, target, registry) = setup_queued(budget);
    let payload = vec![9u8; 1_000];
    for i in 0..4 {
        d.on_read(1 << 16);
        let path = (i == 0).then_some("/user/seven");
        d.on_frame_ref(FrameKind::Message, &envelope(1, path, 7, &payload));
        if i < 3 {
            d.on_batch_end().await;
        }
    }
    // The fourth batch was refused (a dead letter) and the read's end
    // pauses reading: nothing is given back, so it is cut.
    let start = tokio::time::Instant::now();
    d.on_batch_end().await;
    assert!(start.elapsed() >= crate::budget::PAUSE_GRACE);
    assert!(d.conn.misbehaving);
    let s = node.snapshot();
    assert_eq!((s.refused_queued, s.disconnected), (1, 1), "{s:?}");
    assert!(s.peak <= budget);
    assert_eq!(registry.dead_letter_count(), 1);
    assert_eq!(target.batches.lock().unwrap().len(), 3);
}

fn fragment(msg: u32, total: u32, offset: u32, piece: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let to = if offset == 0 {
        envelope::To::Define(1, "/user/seven")
    } else {
        envelope::To::Id(1)
    };
    let f = Fragment { msg, total, offset };
    put_header(&mut b, to, envelope::Tag::plain(7), Some(f));
    b.extend_from_slice(piece);
    b.to_vec()
}

#[tokio::test]
async fn reassembly_is_charged_and_a_message_past_the_share_is_dropped() {
    let budget = id_cost(11) + 300_000;
    let (mut d, node, registry) = setup_budget(budget);
    let piece = vec![1u8; 100_000];
    d.on_read(1 << 20);
    d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 0, &piece));
    let held = node.snapshot().held;
    assert!(held >= id_cost(11) + 100_000, "{held}");
    d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 100_000, &piece));
    // Doubling to 200 kB fits; to 400 kB does not.
    d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 200_000, &piece));
    let s = node.snapshot();
    assert_eq!(s.refused_large, 1);
    assert_eq!(s.held, id_cost(11), "the message's buffer went back");
    assert_eq!(registry.dead_letter_count(), 1);
    // Its further fragments are skipped, not malformed.
    d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 300_000, &piece));
    assert_eq!(registry.dead_letter_count(), 1);
    // A message that fits is delivered, and gives its reassembly's
    // charge back; it is charged as one record while its actor holds it.
    d.on_frame_ref(FrameKind::Message, &fragment(2, 100, 0, &[2; 100]));
    // Back within its share at once (the dropped message's buffer went
    // back): a strike, no pause, no disconnection.
    d.on_batch_end().await;
    assert!(!d.conn.misbehaving);
    assert_eq!(node.snapshot().disconnected, 0);
    assert_eq!(node.snapshot().held, id_cost(11) + queued_cost(4 + 100));
    drop(d);
    assert_eq!(
        node.snapshot().held,
        queued_cost(4 + 100),
        "the delivered message waits for its actor"
    );
}

#[tokio::test]
async fn system_messages_reach_the_peer() {
    let (mut d, peer, _, _) = setup();
    for msg in about_the_node() {
        d.on_frame_ref(FrameKind::System, &msg.encode());
    }
    // A watch arrives in the reliable stream; the fake target has
    // terminated, so the watcher hears it at once.
    d.on_frame_ref(FrameKind::System, &reliable_watch(11));
    d.on_heartbeat_ack(&7u64.to_le_bytes());
    d.on_close(&CloseReason::Local("done".into()));
    let events = peer.events();
    assert_eq!(
        events,
        [
            "shutdown 42",
            "ack 1 4",
            "large ack 2 10",
            "identity 6 None",
            "terminated 11 stopped",
            "heartbeat ack 7",
            "closed 3 closed locally: done",
        ],
    );
}

#[tokio::test]
async fn an_unproven_connection_delivers_but_changes_no_belief() {
    let (mut d, peer, target, _) = setup_with(FakePeer::default(), false);
    for msg in about_the_node() {
        d.on_frame_ref(FrameKind::System, &msg.encode());
    }
    d.on_heartbeat_ack(&7u64.to_le_bytes());
    assert!(peer.events().is_empty(), "{:?}", peer.events());
    // Its own reliable stream and user messages are delivered.
    d.on_frame_ref(FrameKind::System, &reliable_watch(11));
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(1, Some("/user/seven"), 7, b"a"),
    );
    d.on_batch_end().await;
    assert_eq!(peer.events(), ["terminated 11 stopped"]);
    assert_eq!(target.batches.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_unproven_connection_cannot_take_over_another_incarnations_stream() {
    let (mut d, peer, _, _) = setup_with(FakePeer::default(), false);
    // Another incarnation (uid 41) is delivering its stream.
    assert_eq!(
        peer.sys_in().handle(41, 1, 1, true),
        crate::remote::reliable::Receive::Deliver
    );
    // This connection claims uid 42: it may not restart the stream.
    d.on_frame_ref(FrameKind::System, &reliable_watch(12));
    assert!(peer.events().is_empty(), "{:?}", peer.events());
    assert_eq!(
        peer.sys_in().handle(41, 1, 2, true),
        crate::remote::reliable::Receive::Deliver,
        "the stream goes on"
    );
}

/// Dispatches one read of `n` envelopes of `size` payload bytes, to
/// `k` recipients round robin (ids 1..=k, defined beforehand); returns
/// the time it took and the bytes the run buffers reserved.
fn dispatch_read(d: &mut Dispatch, n: usize, k: u32, size: usize) -> (Duration, usize) {
    let payload = vec![7u8; size];
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| envelope(1 + (i as u32 % k), None, 7, &payload))
        .collect();
    let bytes: usize = frames.iter().map(|f| f.len() + 5).sum();
    let start = Instant::now();
    d.on_read(bytes);
    for f in &frames {
        d.on_frame_ref(FrameKind::Message, f);
    }
    let took = start.elapsed();
    let reserved = d.runs.list.iter().map(|r| r.buf.capacity()).sum();
    (took, reserved)
}

#[tokio::test]
async fn dispatch_costs_the_same_per_message_for_one_or_sixty_thousand_recipients() {
    const K: u32 = 60_000;
    const N: usize = 60_000;
    let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
    let target = Arc::new(FakeTarget::default());
    let mut config = SystemConfig::default();
    config.set_max_recipient_ids(K as usize + 1).unwrap();
    let mut d = Dispatch::new(
        registry.clone(),
        &config,
        Arc::new(FakePeer::default()),
        3,
        42,
        true,
        account(&config),
    );
    // K distinct actors, their ids defined in an earlier read.
    let mut targets = Vec::new();
    for i in 1..=K {
        let t: Arc<dyn Target> = Arc::new(FakeTarget::default());
        let path = format!("/user/t{i}");
        registry.register(&path, t.clone());
        targets.push(t);
        d.on_frame_ref(FrameKind::Message, &envelope(i, Some(&path), 7, b""));
    }
    d.on_batch_end().await;
    registry.register("/user/one", target);
    // Best of three of each, alternated.
    let (mut one, mut many) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        one = one.min(dispatch_read(&mut d, N, 1, 100).0);
        d.on_batch_end().await;
        let (took, reserved) = dispatch_read(&mut d, N, K, 100);
        many = many.min(took);
        // What the runs reserved is bounded by what arrived (N
        // envelopes of about 109 bytes), not a buffer per recipient.
        assert!(reserved < 3 * N * 120, "{reserved} bytes reserved");
        d.on_batch_end().await;
    }
    // A scan over runs made this about 300 times slower; a map keeps
    // it within a small factor (cache misses over 60,000 targets).
    assert!(
        many < one * 20,
        "{N} messages: {one:?} to one recipient, {many:?} to {K}"
    );
}

#[tokio::test]
async fn a_large_message_for_a_full_mailbox_is_held_and_so_is_its_ack() {
    let (mut d, _, target, _) = setup_queued(1 << 20);
    // A message in one fragment to a mailbox with room: delivered, and
    // acknowledged at the read's end.
    d.on_read(1 << 16);
    d.on_frame_ref(FrameKind::Message, &fragment(1, 100, 0, &[1; 100]));
    d.on_batch_end().await;
    assert_eq!(target.counts(), [1]);
    assert_eq!(answered(&d.conn), ["LargeAck { msg: 1, received: 100 }"]);
    // The mailbox is full: the next is held, and its ack waits with it,
    // so the sender's lane pauses.
    target.full.store(true, Ordering::SeqCst);
    d.on_read(1 << 16);
    d.on_frame_ref(FrameKind::Message, &fragment(2, 100, 0, &[2; 100]));
    d.on_batch_end().await;
    assert_eq!(target.counts(), [1]);
    assert_eq!(answered(&d.conn).len(), 1, "{:?}", answered(&d.conn));
    // Room again: the task hands it over.
    target.make_room();
    tokio::time::timeout(Duration::from_secs(5), async {
        while target.counts().len() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("handed over");
}

#[tokio::test]
async fn a_graceful_stop_queues_behind_the_messages_before_it() {
    let (mut d, _, target, registry) = setup();
    d.on_read(1 << 16);
    d.on_frame_ref(
        FrameKind::Message,
        &envelope(1, Some("/user/seven"), 7, b"a"),
    );
    let mut stop = BytesMut::new();
    put_header(
        &mut stop,
        envelope::To::Id(1),
        envelope::Tag::plain(7),
        None,
    );
    stop[0] |= envelope::ENV_STOP;
    d.on_frame_ref(FrameKind::Message, &stop);
    d.on_batch_end().await;
    let batches = target.batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].0, 2);
    assert!(
        batches[0]
            .1
            .ends_with(&crate::mailbox::STOP_RECORD.to_le_bytes())
    );
    assert_eq!(registry.dead_letter_count(), 0);
}
