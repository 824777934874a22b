//! `bench-remote sharding --nodes N --entities E`: cluster sharding
//! (`actors::sharding`) in one process, each node an actor system on its
//! own single-worker runtime, over loopback, every node hosting the one
//! entity type. A driver on node 0 (never stopped) measures:
//!
//! - **Indirection.** Tells (`--messages`, one after another) and asks
//!   (`--asks`, one at a time) to the entities through
//!   [`Sharding::entity_ref`], then the same traffic to the same entities'
//!   own actor refs, each looked up once (every entity answers an ask with
//!   its `ctx.myself()`). Both land on the same actors on the same nodes;
//!   the ratio is what the routing through this node's region (and the
//!   owner's region, for a remote entity) costs. The two ways alternate
//!   in four passes each, so that a change of load weighs on both.
//! - **Moves.** Three changes of membership, each while the driver sends a
//!   round of tells to every entity every `--round-ms`: a graceful leave
//!   of the last node (`ActorSystem::shutdown_gracefully`), a join of a
//!   new node, and a kill of node 1 (its runtime dropped with every task
//!   and socket: no leave, no goodbye, no clean-up code, the closest to a
//!   killed process one process can do). For each: how long until every
//!   shard the node held is active on another node (for the join: until
//!   the last shard it takes over is active on it), and what happened to
//!   the messages sent meanwhile: `sent = delivered + dropped + uncounted`,
//!   where `dropped` is what the regions counted (`ShardingState::dropped`,
//!   plus sends the local region refused) and `uncounted` what vanished
//!   without a count (with a killed node: what sat in its mailboxes, or
//!   on the wire to it). Also the most messages buffered at once, summed
//!   over the nodes (`ShardingState::buffered`).
//!
//! A change is over when every remaining node's view lists the same
//! hosting members, no shard is awaiting a release or handing off, and
//! every entity has handled a round that started after the views agreed
//! (a sender's messages arrive in order, so each entity then sits on its
//! final owner). The move time comes from the `ShardEvent::Activated`
//! events of the nodes, not from that check.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx, RemoteMessage, SystemConfig,
    cluster::{Cluster, ClusterConfig, MemberState},
    sharding::{
        EntityId, EntityRef, ShardEvent, ShardPhase, Sharding, ShardingSettings, ShardingState,
    },
};
use anyhow::{Context, Result, bail, ensure};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::{runtime::Runtime, task::JoinHandle};
use transport::SharedSecret;

/// The secret the benchmark's nodes share (they run in this process).
const SECRET: &[u8] = b"bench-remote sharding secret, loopback only";
/// Membership probe period: short, so that a killed node is noticed in
/// well under a second.
const PROBE: Duration = Duration::from_millis(200);
/// How long a probe waits for its answer.
const PROBE_RTT: Duration = Duration::from_millis(100);
/// How often a node announces itself to seeds it has not met.
const ANNOUNCE: Duration = Duration::from_millis(50);
/// The most any phase may take before the run fails.
const LIMIT: Duration = Duration::from_secs(120);
/// How often a change's progress (views, buffers, rounds) is read.
const POLL: Duration = Duration::from_millis(5);
/// How long one read of a region's state may take (a region that is
/// gone answers at once; this only guards against a stuck one).
const STATE_TIMEOUT: Duration = Duration::from_secs(2);
/// Timeout of each ask the driver makes.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the leaving node may take to hand its shards off and drain.
const LEAVE_WITHIN: Duration = Duration::from_secs(10);

/// What `sharding` runs, from the command line.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Nodes in the cluster at the start (at least 3, so that two remain
    /// a majority after the kill).
    pub nodes: usize,
    /// Entities, `e0` .. `e{E-1}`.
    pub entities: usize,
    /// Tells timed each way.
    pub tells: u64,
    /// Asks timed each way.
    pub asks: u64,
    /// The cluster's `stable_after` and sharding's `down_removal_margin`.
    pub stable: Duration,
    /// How often a round of tells to every entity goes out during a
    /// change.
    pub round: Duration,
    /// One JSON line instead of the text lines.
    pub json: bool,
}

/// An entity's messages.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Counted in [`Book::counted`] (the tell rates).
    Count,
    /// The `n`th round of the traffic during a change.
    Round(u64),
    /// Answer with the number (the ask rates).
    Ping(u64, ActorRef<u64>),
    /// Answer with your own ref.
    Myself(ActorRef<ActorRef<Msg>>),
}

impl RemoteMessage for Msg {
    const MANIFEST: &'static str = "bench-remote.sharding.Msg";
}

/// What every entity records, across the nodes (they share the process).
#[derive(Debug)]
struct Book {
    /// [`Msg::Count`]s handled.
    counted: AtomicU64,
    /// [`Msg::Round`]s handled.
    delivered: AtomicU64,
    /// Per entity, by index: the last round it handled.
    last_round: Vec<AtomicU64>,
}

impl Book {
    fn new(entities: usize) -> Self {
        Self {
            counted: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            last_round: (0..entities).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The first entity that has not handled round `round` yet.
    fn behind(&self, round: u64) -> Option<(usize, u64)> {
        self.last_round
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .enumerate()
            .find(|&(_, r)| r < round)
    }
}

/// The entity id of index `i`.
fn entity_id(i: usize) -> String {
    format!("e{i}")
}

/// One entity.
struct Ent {
    /// Its index in [`Book::last_round`]; `None` for an id not of this
    /// benchmark.
    index: Option<usize>,
    book: Arc<Book>,
}

impl Actor for Ent {
    type Msg = Msg;

    async fn handle(&mut self, msg: Msg, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Msg::Count => {
                self.book.counted.fetch_add(1, Ordering::Relaxed);
            }
            Msg::Round(n) => {
                self.book.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(i) = self.index {
                    self.book.last_round[i].fetch_max(n, Ordering::Relaxed);
                }
            }
            Msg::Ping(n, reply) => {
                let _ = reply.tell(n);
            }
            Msg::Myself(reply) => {
                let _ = reply.tell(ctx.myself().clone());
            }
        }
        Ok(())
    }
}

/// One node: its runtime, system, membership and sharding handle.
struct Node {
    rt: Runtime,
    system: ActorSystem,
    cluster: Cluster,
    sharding: Sharding<Msg>,
}

impl Node {
    fn name(&self) -> String {
        self.system.node().to_owned()
    }

    /// Stops the node gracefully and its runtime.
    async fn stop(self) {
        let system = self.system.clone();
        let _ = self.rt.spawn(async move { system.shutdown().await }).await;
        self.rt.shutdown_background();
    }
}

/// Starts node `name` on its own runtime, joining through `seed`.
async fn start(name: &str, seed: Option<&str>, opts: &Opts, book: &Arc<Book>) -> Result<Node> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(format!("shard-{name}"))
        .enable_all()
        .build()?;
    let mut config = ClusterConfig::new();
    config
        .set_probe(PROBE, PROBE_RTT)?
        .set_stable_after(opts.stable)
        .set_announce_interval(ANNOUNCE)?;
    if let Some(seed) = seed {
        config.set_seeds([seed.to_owned()])?;
    }
    let settings = ShardingSettings {
        down_removal_margin: Some(opts.stable),
        ..ShardingSettings::default()
    };
    let name = name.to_owned();
    let book = book.clone();
    let entities = opts.entities;
    let (system, cluster, sharding) = rt
        .spawn(async move {
            let mut sc = SystemConfig::default();
            sc.transport_mut()
                .set_shared_secret(Some(SharedSecret::new(SECRET)))?;
            let any: SocketAddr = "127.0.0.1:0".parse()?;
            let system = ActorSystem::with_config(&name, Some(any), sc).await?;
            let cluster = Cluster::join(&system, config).await?;
            let sharding = Sharding::start(
                &system,
                &cluster,
                "Bench",
                move |id: &EntityId| Ent {
                    index: id
                        .strip_prefix('e')
                        .and_then(|i| i.parse().ok())
                        .filter(|&i| i < entities),
                    book: book.clone(),
                },
                settings,
            )
            .await?;
            anyhow::Ok((system, cluster, sharding))
        })
        .await??;
    Ok(Node {
        rt,
        system,
        cluster,
        sharding,
    })
}

/// A region's state, or `None` if it did not answer in time.
async fn state(s: &Sharding<Msg>) -> Option<ShardingState> {
    tokio::time::timeout(STATE_TIMEOUT, s.state()).await.ok()
}

/// Polls `cond` every millisecond until it holds, failing after [`LIMIT`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > LIMIT {
            bail!("{what}: not after {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Refs to every entity, one way or the other.
#[derive(Clone)]
enum Refs {
    /// Through the sharding region: [`Sharding::entity_ref`].
    Entity(Arc<Vec<EntityRef<Msg>>>),
    /// The entities' own refs, looked up once.
    Direct(Arc<Vec<ActorRef<Msg>>>),
}

impl Refs {
    fn len(&self) -> usize {
        match self {
            Self::Entity(v) => v.len(),
            Self::Direct(v) => v.len(),
        }
    }

    /// Sends to entity `i`, waiting for room; false if refused.
    async fn send(&self, i: usize, msg: Msg) -> bool {
        match self {
            Self::Entity(v) => v[i].send(msg).await.is_ok(),
            Self::Direct(v) => v[i].send(msg).await.is_ok(),
        }
    }

    /// Asks entity `i` to echo `n`.
    async fn ask(&self, i: usize, n: u64) -> Result<u64, AskError> {
        match self {
            Self::Entity(v) => v[i].ask(|r| Msg::Ping(n, r), ASK_TIMEOUT).await,
            Self::Direct(v) => v[i].ask(|r| Msg::Ping(n, r), ASK_TIMEOUT).await,
        }
    }
}

/// Sends `n` tells round-robin over the entities, one after another, and
/// returns the time until the last is handled.
async fn tells(refs: Refs, n: u64, book: Arc<Book>) -> Result<Duration> {
    let base = book.counted.load(Ordering::Relaxed);
    let len = refs.len() as u64;
    let t = Instant::now();
    for k in 0..n {
        // The index is below `len`, a usize.
        if !refs.send((k % len) as usize, Msg::Count).await {
            bail!("tell {k} was refused");
        }
    }
    until("every tell handled", || {
        book.counted.load(Ordering::Relaxed) >= base + n
    })
    .await?;
    Ok(t.elapsed())
}

/// Makes `n` asks round-robin over the entities, one at a time, recording
/// each round trip (µs) in `hist`; returns the total time.
async fn asks(refs: Refs, n: u64, hist: &mut Histogram<u64>) -> Result<Duration> {
    let len = refs.len() as u64;
    let t = Instant::now();
    for k in 0..n {
        let one = Instant::now();
        let got = refs
            .ask((k % len) as usize, k)
            .await
            .with_context(|| format!("ask {k}"))?;
        ensure!(got == k, "ask {k} answered {got}");
        hist.saturating_record((one.elapsed().as_micros() as u64).max(1));
    }
    Ok(t.elapsed())
}

/// The two ways alternate this many times, each pass with a share of the
/// messages, so that a change of load on a shared machine weighs on both.
const PASSES: u64 = 4;

/// Pass `pass`'s share of `n`.
fn share(n: u64, pass: u64) -> u64 {
    n / PASSES + u64::from(pass < n % PASSES)
}

/// The indirection figures: rates through `entity_ref` and through refs
/// resolved once.
#[derive(Debug, Serialize)]
struct Indirection {
    tells: u64,
    tell_entity_ref_per_sec: f64,
    tell_resolved_per_sec: f64,
    /// Resolved / entity_ref.
    tell_ratio: f64,
    asks: u64,
    ask_entity_ref_per_sec: f64,
    ask_resolved_per_sec: f64,
    ask_ratio: f64,
    ask_entity_ref_p50_us: u64,
    ask_resolved_p50_us: u64,
    ask_entity_ref_p99_us: u64,
    ask_resolved_p99_us: u64,
}

/// Runs on node 0's runtime: resolves every entity's ref (which starts
/// every entity), then times tells and asks both ways.
async fn indirection(
    sharding: Sharding<Msg>,
    entities: usize,
    n_tells: u64,
    n_asks: u64,
    book: Arc<Book>,
) -> Result<Indirection> {
    let by_entity: Vec<EntityRef<Msg>> = (0..entities)
        .map(|i| sharding.entity_ref(entity_id(i)))
        .collect();
    let mut direct = Vec::with_capacity(entities);
    for (i, r) in by_entity.iter().enumerate() {
        let me = r
            .ask(Msg::Myself, ASK_TIMEOUT)
            .await
            .with_context(|| format!("looking up entity {i}"))?;
        direct.push(me);
    }
    let by_entity = Refs::Entity(Arc::new(by_entity));
    let direct = Refs::Direct(Arc::new(direct));
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let (mut t_entity, mut t_direct) = (Duration::ZERO, Duration::ZERO);
    for pass in 0..PASSES {
        let n = share(n_tells, pass);
        t_entity += tells(by_entity.clone(), n, book.clone()).await?;
        t_direct += tells(direct.clone(), n, book.clone()).await?;
    }
    // 1 µs .. 100 s at 3 significant digits.
    let mut h_entity = Histogram::new_with_bounds(1, 100_000_000, 3)?;
    let mut h_direct = h_entity.clone();
    let (mut a_entity, mut a_direct) = (Duration::ZERO, Duration::ZERO);
    for pass in 0..PASSES {
        let n = share(n_asks, pass);
        a_entity += asks(by_entity.clone(), n, &mut h_entity).await?;
        a_direct += asks(direct.clone(), n, &mut h_direct).await?;
    }
    let (te, td) = (rate(n_tells, t_entity), rate(n_tells, t_direct));
    let (ae, ad) = (rate(n_asks, a_entity), rate(n_asks, a_direct));
    Ok(Indirection {
        tells: n_tells,
        tell_entity_ref_per_sec: te,
        tell_resolved_per_sec: td,
        tell_ratio: td / te,
        asks: n_asks,
        ask_entity_ref_per_sec: ae,
        ask_resolved_per_sec: ad,
        ask_ratio: ad / ae,
        ask_entity_ref_p50_us: h_entity.value_at_quantile(0.5),
        ask_resolved_p50_us: h_direct.value_at_quantile(0.5),
        ask_entity_ref_p99_us: h_entity.value_at_quantile(0.99),
        ask_resolved_p99_us: h_direct.value_at_quantile(0.99),
    })
}

/// The tells that run during a change: a round to every entity each
/// `period`, from node 0, until stopped.
#[derive(Debug, Default)]
struct Traffic {
    stop: AtomicBool,
    /// The last round sent whole.
    rounds: AtomicU64,
    /// Tells the local region took.
    sent: AtomicU64,
    /// Tells the local region refused (counted as dropped).
    refused: AtomicU64,
}

/// Sends rounds numbered on from `t.rounds` (every change's rounds are
/// above those of the changes before it, which entities have handled).
async fn traffic(refs: Vec<EntityRef<Msg>>, period: Duration, t: Arc<Traffic>) {
    let mut next = tokio::time::Instant::now();
    let mut round = t.rounds.load(Ordering::Relaxed);
    while !t.stop.load(Ordering::Relaxed) {
        round += 1;
        for r in &refs {
            match r.send(Msg::Round(round)).await {
                Ok(()) => t.sent.fetch_add(1, Ordering::Relaxed),
                Err(_) => t.refused.fetch_add(1, Ordering::Relaxed),
            };
        }
        t.rounds.store(round, Ordering::Relaxed);
        // A round that took longer than the period starts the next at
        // once, without a burst to catch up.
        next = (next + period).max(tokio::time::Instant::now());
        tokio::time::sleep_until(next).await;
    }
}

/// The membership change measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Change {
    /// The last node leaves gracefully.
    Leave,
    /// A new node joins.
    Join,
    /// Node 1's runtime is dropped.
    Kill,
}

impl Change {
    fn label(self) -> &'static str {
        match self {
            Self::Leave => "leave",
            Self::Join => "join",
            Self::Kill => "kill",
        }
    }
}

/// What one change measured.
#[derive(Debug, Serialize)]
struct Moved {
    change: Change,
    node: String,
    /// Shards the node held (leave, kill) or took over (join).
    shards: usize,
    /// Until the last of those shards was active on its new node.
    moved_ms: f64,
    /// Leave: until `shutdown_gracefully` returned. Kill: until node 0
    /// saw the node down.
    aside_ms: Option<f64>,
    sent: u64,
    delivered: u64,
    dropped: u64,
    /// `sent - delivered - dropped`.
    uncounted: i64,
    peak_buffered: usize,
    /// Dead letters the nodes that stayed counted meanwhile (all kinds:
    /// with a kill, the messages their remoting could not deliver to it).
    dead_letters: u64,
}

/// Shard activations seen on the nodes: (node, shard, when).
type Activations = Arc<Mutex<Vec<(String, u32, Instant)>>>;

/// Records the activations of `s` (on node `node`) into `log` until
/// aborted.
fn collect(node: String, s: &Sharding<Msg>, log: Activations) -> JoinHandle<()> {
    let mut rx = s.subscribe();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ShardEvent::Activated { shard }) => log
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((node.clone(), shard, Instant::now())),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("warning: missed {n} shard events; a move time may be missing");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

/// The time from `t0` until every shard of `held` was first activated
/// after `t0` on a node other than `gone`; an error names a shard never
/// activated elsewhere.
fn moved_after(
    events: &[(String, u32, Instant)],
    held: &BTreeSet<u32>,
    gone: &str,
    t0: Instant,
) -> Result<Duration> {
    let mut first: BTreeMap<u32, Instant> = BTreeMap::new();
    for (node, shard, at) in events {
        if node != gone && *at >= t0 && held.contains(shard) {
            first
                .entry(*shard)
                .and_modify(|t| *t = (*t).min(*at))
                .or_insert(*at);
        }
    }
    if let Some(missing) = held.iter().find(|s| !first.contains_key(s)) {
        bail!("shard {missing} of {gone} was not activated on another node");
    }
    Ok(first
        .values()
        .max()
        .map_or(Duration::ZERO, |t| t.duration_since(t0)))
}

/// The shards a region holds active.
fn active(s: &ShardingState) -> BTreeSet<u32> {
    s.shards
        .iter()
        .filter(|i| i.phase == ShardPhase::Active)
        .map(|i| i.shard)
        .collect()
}

/// Sum of the dropped counters of `handles`.
async fn dropped(handles: &[&Sharding<Msg>]) -> u64 {
    let mut n = 0;
    for h in handles {
        n += state(h).await.map_or(0, |s| s.dropped);
    }
    n
}

/// Runs one change on `nodes` while traffic flows, and measures it.
async fn change(
    what: Change,
    nodes: &mut Vec<Node>,
    opts: &Opts,
    book: &Arc<Book>,
    seed: &str,
) -> Result<Moved> {
    let before_handles: Vec<Sharding<Msg>> = nodes.iter().map(|n| n.sharding.clone()).collect();
    let dropped_before = dropped(&before_handles.iter().collect::<Vec<_>>()).await;
    let delivered_before = book.delivered.load(Ordering::Relaxed);
    let dead_before: BTreeMap<String, u64> = nodes
        .iter()
        .map(|n| (n.name(), n.system.dead_letters()))
        .collect();
    let log: Activations = Arc::default();
    let mut collectors: Vec<JoinHandle<()>> = nodes
        .iter()
        .map(|n| collect(n.name(), &n.sharding, log.clone()))
        .collect();
    let first = book
        .last_round
        .iter()
        .map(|r| r.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let flow = Arc::new(Traffic {
        rounds: AtomicU64::new(first),
        ..Traffic::default()
    });
    let refs: Vec<EntityRef<Msg>> = (0..opts.entities)
        .map(|i| nodes[0].sharding.entity_ref(entity_id(i)))
        .collect();
    let sender = nodes[0].rt.spawn(traffic(refs, opts.round, flow.clone()));
    until("traffic flows", || {
        flow.rounds.load(Ordering::Relaxed) >= first + 2
    })
    .await?;

    // The change itself.
    let mut held = BTreeSet::new();
    let mut gone_dropped = 0;
    let mut leaving: Option<(Node, JoinHandle<bool>)> = None;
    let node;
    let t0;
    match what {
        Change::Leave => {
            let victim = nodes.pop().context("a node to leave")?;
            node = victim.name();
            held = active(
                &state(&victim.sharding)
                    .await
                    .context("the leaver's state")?,
            );
            let system = victim.system.clone();
            t0 = Instant::now();
            let done = victim
                .rt
                .spawn(async move { system.shutdown_gracefully(LEAVE_WITHIN).await });
            leaving = Some((victim, done));
        }
        Change::Kill => {
            let victim = nodes.remove(1);
            node = victim.name();
            let s = state(&victim.sharding)
                .await
                .context("the victim's state")?;
            held = active(&s);
            gone_dropped = s.dropped;
            let Node {
                rt,
                system,
                cluster,
                sharding,
            } = victim;
            t0 = Instant::now();
            // Forgotten, not dropped: a killed process runs no clean-up
            // code. Dropping the runtime ends every task and closes every
            // socket of the node.
            std::mem::forget((system, cluster, sharding));
            rt.shutdown_background();
        }
        Change::Join => {
            let name = format!("s{}", opts.nodes);
            t0 = Instant::now();
            let joined = start(&name, Some(seed), opts, book).await?;
            node = joined.name();
            collectors.push(collect(node.clone(), &joined.sharding, log.clone()));
            nodes.push(joined);
        }
    }

    // Until the change is over: views agree, nothing moves, and every
    // entity handled a round that started after the views agreed.
    let mut peak_buffered = 0;
    let mut aside: Option<Duration> = None;
    let mut settled_round: Option<u64> = None;
    loop {
        if t0.elapsed() > LIMIT {
            bail!(
                "{} of {node}: not settled after {LIMIT:?} (views agree from round {settled_round:?}, \
                 first entity behind: {:?})",
                what.label(),
                settled_round.and_then(|r| book.behind(r))
            );
        }
        let mut buffered = 0;
        let mut agree = true;
        let mut moving = false;
        for n in nodes.iter() {
            let s = state(&n.sharding).await.context("a node's state")?;
            buffered += s.buffered;
            agree &= s.hosts.len() == nodes.len();
            moving |= s
                .shards
                .iter()
                .any(|i| matches!(i.phase, ShardPhase::Awaiting | ShardPhase::HandingOff));
        }
        if let Some((victim, done)) = &leaving
            && aside.is_none()
        {
            if done.is_finished() {
                aside = Some(t0.elapsed());
            } else if let Some(s) = state(&victim.sharding).await {
                buffered += s.buffered;
            }
        }
        if what == Change::Kill && aside.is_none() {
            let down = nodes[0]
                .cluster
                .members()
                .iter()
                .any(|m| m.node == node && m.state == MemberState::Down);
            if down {
                aside = Some(t0.elapsed());
            }
        }
        peak_buffered = peak_buffered.max(buffered);
        if !agree {
            settled_round = None;
        } else if settled_round.is_none() {
            // Read after the views: the round after the one in progress
            // starts after every view was seen to agree.
            settled_round = Some(flow.rounds.load(Ordering::Relaxed) + 2);
        }
        if let Some(r) = settled_round
            && !moving
            && book.behind(r).is_none()
        {
            break;
        }
        tokio::time::sleep(POLL).await;
    }

    // Stop the traffic and wait for what is still on its way.
    flow.stop.store(true, Ordering::Relaxed);
    sender.await.context("the traffic task")?;
    let last = flow.rounds.load(Ordering::Relaxed);
    until("every entity handled the last round", || {
        book.behind(last).is_none()
    })
    .await
    .with_context(|| format!("first entity behind: {:?}", book.behind(last)))?;
    for c in &collectors {
        c.abort();
    }
    // A joiner started with no counts, and counts only this change's.
    let after_handles: Vec<&Sharding<Msg>> = nodes.iter().map(|n| &n.sharding).collect();
    if let Some((victim, done)) = leaving {
        let drained = done.await.context("the leave")?;
        if !drained {
            eprintln!("warning: the leaving node did not drain within {LEAVE_WITHIN:?}");
        }
        aside.get_or_insert(t0.elapsed());
        let d = dropped(&[&victim.sharding]).await;
        gone_dropped = d;
        victim.rt.shutdown_background();
    }
    let dropped_after = dropped(&after_handles).await + gone_dropped;
    let events = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let (shards, moved) = match what {
        Change::Leave | Change::Kill => (held.len(), moved_after(&events, &held, &node, t0)?),
        Change::Join => {
            let taken: BTreeSet<u32> = events
                .iter()
                .filter(|(n, _, at)| *n == node && *at >= t0)
                .map(|&(_, s, _)| s)
                .collect();
            let moved = events
                .iter()
                .filter(|(n, _, at)| *n == node && *at >= t0)
                .map(|(_, _, at)| at.duration_since(t0))
                .max()
                .unwrap_or_default();
            (taken.len(), moved)
        }
    };
    let refused = flow.refused.load(Ordering::Relaxed);
    let sent = flow.sent.load(Ordering::Relaxed) + refused;
    let delivered = book.delivered.load(Ordering::Relaxed) - delivered_before;
    let dropped = dropped_after.saturating_sub(dropped_before) + refused;
    let dead_letters = nodes
        .iter()
        .map(|n| {
            n.system
                .dead_letters()
                .saturating_sub(dead_before.get(&n.name()).copied().unwrap_or(0))
        })
        .sum();
    Ok(Moved {
        change: what,
        node,
        shards,
        moved_ms: ms(moved),
        aside_ms: aside.map(ms),
        sent,
        delivered,
        dropped,
        uncounted: sent as i64 - delivered as i64 - dropped as i64,
        peak_buffered,
        dead_letters,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Every figure, for `--json`.
#[derive(Debug, Serialize)]
struct Report {
    nodes: usize,
    entities: usize,
    shards: u32,
    probe_ms: f64,
    stable_after_ms: f64,
    round_ms: f64,
    indirection: Indirection,
    moves: Vec<Moved>,
}

/// Runs the benchmark and prints its lines (or one JSON line).
pub async fn run(opts: &Opts) -> Result<()> {
    if opts.nodes < 3 {
        bail!(
            "--nodes must be at least 3 (two must remain a majority after the kill), got {}",
            opts.nodes
        );
    }
    if opts.entities == 0 {
        bail!("--entities must be at least 1");
    }
    if opts.asks == 0 {
        bail!("--asks must be at least 1");
    }
    if opts.round.is_zero() {
        bail!("--round-ms must be at least 1");
    }
    let shards = ShardingSettings::default().number_of_shards;
    if !opts.json {
        println!(
            "sharding: {} nodes in this process over loopback (each on its own runtime), \
             {} entities in {shards} shards; probe {} ms, stable-after and down-removal \
             margin {} ms; during moves a tell to every entity each {} ms",
            opts.nodes,
            opts.entities,
            PROBE.as_millis(),
            opts.stable.as_millis(),
            opts.round.as_millis()
        );
    }
    let book = Arc::new(Book::new(opts.entities));
    let first = start("s0", None, opts, &book).await.context("node s0")?;
    let seed = first.cluster.myself().udp.to_string();
    let mut nodes = vec![first];
    for i in 1..opts.nodes {
        nodes.push(
            start(&format!("s{i}"), Some(&seed), opts, &book)
                .await
                .with_context(|| format!("node s{i}"))?,
        );
    }
    let n = nodes.len();
    until("every node sees every other up", || {
        nodes.iter().all(|x| x.cluster.up_members().len() == n - 1)
    })
    .await?;
    let t = Instant::now();
    loop {
        let mut all = true;
        for x in &nodes {
            all &= state(&x.sharding).await.is_some_and(|s| s.hosts.len() == n);
        }
        if all {
            break;
        }
        if t.elapsed() > LIMIT {
            bail!("the regions do not all see {n} hosting members after {LIMIT:?}");
        }
        tokio::time::sleep(POLL).await;
    }

    let ind = nodes[0]
        .rt
        .spawn(indirection(
            nodes[0].sharding.clone(),
            opts.entities,
            opts.tells,
            opts.asks,
            book.clone(),
        ))
        .await??;
    if !opts.json {
        println!(
            "tell, {} one after another: through entity_ref {:.0} msg/s, to refs resolved once \
             {:.0} msg/s, indirection {:.2}x",
            ind.tells, ind.tell_entity_ref_per_sec, ind.tell_resolved_per_sec, ind.tell_ratio
        );
        println!(
            "ask, {} one at a time: through entity_ref {:.0}/s (p50 {} us, p99 {} us), to refs \
             resolved once {:.0}/s (p50 {} us, p99 {} us), indirection {:.2}x",
            ind.asks,
            ind.ask_entity_ref_per_sec,
            ind.ask_entity_ref_p50_us,
            ind.ask_entity_ref_p99_us,
            ind.ask_resolved_per_sec,
            ind.ask_resolved_p50_us,
            ind.ask_resolved_p99_us,
            ind.ask_ratio
        );
    }
    let mut moves = Vec::new();
    for what in [Change::Leave, Change::Join, Change::Kill] {
        let m = change(what, &mut nodes, opts, &book, &seed)
            .await
            .with_context(|| what.label())?;
        if !opts.json {
            println!("{}", move_line(&m));
        }
        moves.push(m);
    }
    for x in nodes {
        x.stop().await;
    }
    if opts.json {
        let report = Report {
            nodes: opts.nodes,
            entities: opts.entities,
            shards,
            probe_ms: ms(PROBE),
            stable_after_ms: ms(opts.stable),
            round_ms: ms(opts.round),
            indirection: ind,
            moves,
        };
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

/// A change's line.
fn move_line(m: &Moved) -> String {
    let head = match m.change {
        Change::Leave => format!(
            "leave (graceful: shutdown_gracefully) of {} holding {} shards: active elsewhere after {:.0} ms",
            m.node, m.shards, m.moved_ms
        ),
        Change::Join => format!(
            "join of {}: {} shards rebalanced onto it after {:.0} ms",
            m.node, m.shards, m.moved_ms
        ),
        Change::Kill => format!(
            "kill (runtime dropped: no leave, no goodbye) of {} holding {} shards: \
             active elsewhere after {:.0} ms",
            m.node, m.shards, m.moved_ms
        ),
    };
    let aside = match (m.change, m.aside_ms) {
        (Change::Leave, Some(a)) => format!(" (leave returned after {a:.0} ms)"),
        (Change::Kill, Some(a)) => format!(" (seen down after {a:.0} ms)"),
        _ => String::new(),
    };
    format!(
        "{head}{aside}; sent {} = delivered {} + dropped {} + uncounted {}; peak buffered {}; \
         dead letters on the other nodes {}",
        m.sent, m.delivered, m.dropped, m.uncounted, m.peak_buffered, m.dead_letters
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_time_is_the_last_first_activation_elsewhere() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let events = vec![
            ("b".to_owned(), 1, at(30)),
            // Before the change: not a move.
            ("c".to_owned(), 2, t0 - Duration::from_millis(5)),
            ("c".to_owned(), 2, at(50)),
            // A later activation of a shard already moved does not count.
            ("b".to_owned(), 1, at(90)),
            // On the node that went: not elsewhere.
            ("a".to_owned(), 3, at(10)),
            ("c".to_owned(), 3, at(70)),
            // Not one of its shards.
            ("b".to_owned(), 9, at(200)),
        ];
        let held: BTreeSet<u32> = [1, 2, 3].into();
        let d = moved_after(&events, &held, "a", t0).expect("every shard moved");
        assert_eq!(d, Duration::from_millis(70));
        let held: BTreeSet<u32> = [1, 4].into();
        let err = moved_after(&events, &held, "a", t0).expect_err("shard 4 never moved");
        assert!(err.to_string().contains("shard 4 of a"), "{err}");
        assert_eq!(
            moved_after(&events, &BTreeSet::new(), "a", t0).expect("nothing to move"),
            Duration::ZERO
        );
    }

    #[test]
    fn the_passes_share_every_message() {
        for n in [0, 1, 3, 4, 5, 500_000, 20_001] {
            let shares: Vec<u64> = (0..PASSES).map(|p| share(n, p)).collect();
            assert_eq!(shares.iter().sum::<u64>(), n, "{n}: {shares:?}");
            let (lo, hi) = (shares.iter().min(), shares.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{shares:?}");
        }
    }

    #[test]
    fn behind_names_the_first_entity_short_of_a_round() {
        let book = Book::new(3);
        book.last_round[0].store(5, Ordering::Relaxed);
        book.last_round[1].store(3, Ordering::Relaxed);
        book.last_round[2].store(4, Ordering::Relaxed);
        assert_eq!(book.behind(3), None);
        assert_eq!(book.behind(4), Some((1, 3)));
        assert_eq!(book.behind(6), Some((0, 5)));
    }

    #[test]
    fn a_move_line_shows_the_sum() {
        let m = Moved {
            change: Change::Kill,
            node: "s1@127.0.0.1:1".into(),
            shards: 33,
            moved_ms: 4500.4,
            aside_ms: Some(3900.0),
            sent: 100,
            delivered: 90,
            dropped: 4,
            uncounted: 6,
            peak_buffered: 12,
            dead_letters: 7,
        };
        assert_eq!(
            move_line(&m),
            "kill (runtime dropped: no leave, no goodbye) of s1@127.0.0.1:1 holding 33 shards: \
             active elsewhere after 4500 ms (seen down after 3900 ms); \
             sent 100 = delivered 90 + dropped 4 + uncounted 6; peak buffered 12; \
             dead letters on the other nodes 7"
        );
    }
}
