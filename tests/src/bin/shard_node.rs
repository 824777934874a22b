//! A sharding and singleton node for the network-namespace tests
//! (`tests/netns/sharding.sh`), and the checker of what the nodes print.
//!
//! `shard_node NAME ADDR [--seeds HOST:PORT,...] [--probe-ms N] [--stable-ms N]
//! [--margin-ms N] [--shards N]` binds `ADDR`, joins the cluster through
//! the seeds under keep-majority downing, starts sharding of type
//! `Counter` and the singleton `clock`, and takes commands on its
//! standard input, one per line:
//! - `traffic N RATE`: ask entities `e0`..`e{N-1}` round robin, RATE asks
//!   a second (each in its own task, 2 s timeout), and the singleton
//!   every 50 ms; prints `reply <id> <node> <count> <t>` or
//!   `fail <id> <t> <error>` per entity ask, `sreply <node> <t>` or
//!   `sfail <t> <error>` per singleton ask;
//! - `stats`: prints `stats <t> <sent> <answered> <failed> <ssent>
//!   <sanswered> <sfailed>` (asks in flight are neither);
//! - `quiet`: stops the traffic, waits for the asks in flight and prints
//!   `traffic-done` and the counters, as `stats`;
//! - `sweep N`: asks each of `e0`..`e{N-1}` until it answers (2 s per
//!   try, for at most 30 s), and prints `sweep <answered> <N> <ms>
//!   <retried>`, then `sweep-missing <id>` for each that did not answer.
//!
//! Every entity and singleton instance prints `ACTIVE <key> <inst> <t>`
//! when it starts, `WORK <key> <inst> <t> <sender> <seq>` per message it
//! handles and `STOPPED <key> <inst> <t>` in its `stopped` hook (`key` is
//! `e:<id>` or `s:clock`; `inst` is `<pid>.<n>`, unique per instance).
//! The node prints `ready <node> <pid> <t>`, `member <node> <state> <t>`
//! per membership change, `hosts <n> <t>` when the number of hosting
//! members in its sharding view changes, `activated <shard> <t>` and `handedoff <shard>
//! <t>` per shard move seen here, and, when the downing strategy downs it,
//! `self down <pid> <t>`, then `exit <pid> <t>` once its system has shut down
//! (it exits 0). Every `t` is CLOCK_MONOTONIC in milliseconds: one clock
//! for every process on the host, whatever its network namespace.
//!
//! `shard_node now` prints that clock. `shard_node check FILE...` reads
//! the nodes' output and the script's records (`killed <pid> <t>` after a
//! `kill -9`, `frozen <pid> <from> <to>` around a SIGSTOP/SIGCONT) and
//! fails (exit 1) if two instances of one key were live at once, or a
//! message was handled twice; see [`check`].

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, StopReason, SystemConfig,
    cluster::{Cluster, ClusterConfig, DowningStrategy, MemberState},
    sharding::{EntityId, ShardEvent, Sharding, ShardingSettings},
    singleton::{Singleton, SingletonRef, SingletonSettings},
};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

const USAGE: &str = "usage: shard_node NAME ADDR [--seeds HOST:PORT,...] [--probe-ms N] \
                     [--stable-ms N] [--margin-ms N] [--shards N] | shard_node now | \
                     shard_node check FILE...";

/// How long an ask of the traffic or of a sweep waits.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a sweep keeps asking an entity that did not answer.
const SWEEP_FOR: Duration = Duration::from_secs(30);

/// CLOCK_MONOTONIC in milliseconds: the same clock in every process of
/// the host, so the checker can compare the nodes' stamps.
fn mono_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1000 + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000
}

/// An ask to an entity or to the singleton: `seq` is unique per `from`.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "shard_node.Ask")]
struct Ask {
    from: String,
    seq: u64,
    reply: ActorRef<Answer>,
}

/// What an instance answers: who it is, where, and how many messages it
/// has handled.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "shard_node.Answer")]
struct Answer {
    key: String,
    node: String,
    count: u64,
}

/// Instances started in this process, for their `inst` names.
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// An entity (or the singleton): counts what it handles, answers with
/// its key, node and count, and prints its life for the checker.
struct Counter {
    key: String,
    node: String,
    inst: String,
    count: u64,
}

impl Counter {
    fn new(key: String, node: String) -> Self {
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        Self {
            key,
            node,
            inst: format!("{}.{n}", std::process::id()),
            count: 0,
        }
    }
}

impl Actor for Counter {
    type Msg = Ask;

    async fn started(&mut self, _: &mut Ctx<Self>) -> ActorResult {
        println!("ACTIVE {} {} {}", self.key, self.inst, mono_ms());
        Ok(())
    }

    async fn handle(&mut self, ask: Ask, _: &mut Ctx<Self>) -> ActorResult {
        self.count += 1;
        println!(
            "WORK {} {} {} {} {}",
            self.key,
            self.inst,
            mono_ms(),
            ask.from,
            ask.seq
        );
        let _ = ask.reply.tell(Answer {
            key: self.key.clone(),
            node: self.node.clone(),
            count: self.count,
        });
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        println!("STOPPED {} {} {}", self.key, self.inst, mono_ms());
    }
}

/// Stands for the system: its end tells that the system shut down.
struct Sentinel;

impl Actor for Sentinel {
    type Msg = ();

    async fn handle(&mut self, (): (), _: &mut Ctx<Self>) -> ActorResult {
        Ok(())
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn number(args: &[String], name: &str, default: u64) -> u64 {
    arg(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
    })
}

/// The driver's counters: every ask is sent, then answered or failed.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    ssent: AtomicU64,
    sanswered: AtomicU64,
    sfailed: AtomicU64,
}

impl Counts {
    fn line(&self, what: &str) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{what} {} {} {} {} {} {} {}",
            mono_ms(),
            l(&self.sent),
            l(&self.answered),
            l(&self.failed),
            l(&self.ssent),
            l(&self.sanswered),
            l(&self.sfailed)
        )
    }

    fn in_flight(&self) -> u64 {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (l(&self.sent) - l(&self.answered) - l(&self.failed))
            + (l(&self.ssent) - l(&self.sanswered) - l(&self.sfailed))
    }
}

/// What the traffic and sweeps use.
#[derive(Clone)]
struct Driver {
    counters: Sharding<Ask>,
    clock: SingletonRef<Ask>,
    /// This process's sender name in `Ask::from`.
    from: String,
    seq: Arc<AtomicU64>,
    counts: Arc<Counts>,
}

impl Driver {
    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Asks entity `id` as sender `from`.
    async fn ask_entity(&self, id: &str, from: &str) -> Result<Answer, actors::AskError> {
        let (from, seq) = (from.to_owned(), self.next());
        self.counters
            .entity_ref(id)
            .ask(|reply| Ask { from, seq, reply }, ASK_TIMEOUT)
            .await
    }

    /// Asks entities round robin at `rate` a second, and the singleton
    /// every 50 ms, until `stop` turns true.
    async fn traffic(self, n: u64, rate: u64, mut stop: watch::Receiver<bool>) {
        let mut entities = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
        let mut single = tokio::time::interval(Duration::from_millis(50));
        let mut k = 0u64;
        loop {
            tokio::select! {
                _ = entities.tick() => {
                    let id = format!("e{}", k % n.max(1));
                    k += 1;
                    let d = self.clone();
                    d.counts.sent.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(async move {
                        match d.ask_entity(&id, &d.from).await {
                            Ok(a) => {
                                d.counts.answered.fetch_add(1, Ordering::Relaxed);
                                println!("reply {id} {} {} {}", a.node, a.count, mono_ms());
                            }
                            Err(e) => {
                                d.counts.failed.fetch_add(1, Ordering::Relaxed);
                                println!("fail {id} {} {e}", mono_ms());
                            }
                        }
                    });
                }
                _ = single.tick() => {
                    let d = self.clone();
                    d.counts.ssent.fetch_add(1, Ordering::Relaxed);
                    let (from, seq) = (d.from.clone(), d.next());
                    tokio::spawn(async move {
                        match d.clock.ask(|reply| Ask { from, seq, reply }, ASK_TIMEOUT).await {
                            Ok(a) => {
                                d.counts.sanswered.fetch_add(1, Ordering::Relaxed);
                                println!("sreply {} {}", a.node, mono_ms());
                            }
                            Err(e) => {
                                d.counts.sfailed.fetch_add(1, Ordering::Relaxed);
                                println!("sfail {} {e}", mono_ms());
                            }
                        }
                    });
                }
                _ = stop.changed() => return,
            }
        }
    }

    /// Asks every entity until it answers (as sender `<from>.sweep`, so
    /// that the traffic's figures stay apart); prints the outcome.
    async fn sweep(self, n: u64) {
        let from = format!("{}.sweep", self.from);
        let start = mono_ms();
        let deadline = tokio::time::Instant::now() + SWEEP_FOR;
        let retried = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            let d = self.clone();
            let retried = retried.clone();
            let from = from.clone();
            tasks.spawn(async move {
                let id = format!("e{i}");
                loop {
                    if d.ask_entity(&id, &from).await.is_ok() {
                        return None;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Some(id);
                    }
                    retried.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let mut missing = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Ok(Some(id)) = r {
                missing.push(id);
            }
        }
        println!(
            "sweep {} {n} {} {}",
            n - missing.len() as u64,
            mono_ms() - start,
            retried.load(Ordering::Relaxed)
        );
        for id in missing {
            println!("sweep-missing {id}");
        }
    }
}

/// Runs a node until its standard input closes, or until it is downed.
async fn node(args: &[String]) {
    let [name, addr, ..] = args else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let addr: SocketAddr = addr.parse().expect("ADDR is host:port");
    let system = ActorSystem::with_config(name, Some(addr), SystemConfig::default())
        .await
        .expect("binds");
    let probe = Duration::from_millis(number(args, "--probe-ms", 200));
    let stable = Duration::from_millis(number(args, "--stable-ms", 3000));
    let margin = Duration::from_millis(number(args, "--margin-ms", 3000));
    let mut config = ClusterConfig::new();
    config
        .set_probe(probe, probe / 2)
        .expect("--probe-ms: at least 2")
        .set_stable_after(stable)
        .set_announce_interval(Duration::from_millis(100))
        .expect("a valid interval")
        .set_downing(DowningStrategy::KeepMajority)
        .expect("a valid strategy");
    if let Some(seeds) = arg(args, "--seeds") {
        config
            .set_seeds(seeds.split(','))
            .expect("--seeds: host:port,...");
    }
    let cluster = Cluster::join(&system, config).await.expect("joins");
    let mut events = cluster.subscribe();
    let me = system.node().to_owned();
    let settings = ShardingSettings {
        number_of_shards: u32::try_from(number(args, "--shards", 100)).expect("--shards: a u32"),
        handoff_timeout: Duration::from_secs(3),
        down_removal_margin: Some(margin),
        ..ShardingSettings::default()
    };
    let on = me.clone();
    let counters = Sharding::start(
        &system,
        &cluster,
        "Counter",
        move |id: &EntityId| Counter::new(format!("e:{id}"), on.clone()),
        settings,
    )
    .await
    .expect("starts sharding");
    let on = me.clone();
    let clock = Singleton::start(
        &system,
        &cluster,
        "clock",
        move || Counter::new("s:clock".to_owned(), on.clone()),
        SingletonSettings::new()
            .down_removal_margin(margin)
            .handover_timeout(Duration::from_secs(3)),
    )
    .expect("starts the singleton");
    let mut moves = counters.subscribe();
    // The hosting members of this node's view, printed when their number
    // changes: the script waits on them.
    let view = counters.clone();
    tokio::spawn(async move {
        let mut last = usize::MAX;
        loop {
            let hosts = view.state().await.hosts.len();
            if hosts != last {
                println!("hosts {hosts} {}", mono_ms());
                last = hosts;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let sentinel = system.spawn(Sentinel);
    let pid = std::process::id();
    println!("ready {me} {pid} {}", mono_ms());
    let driver = Driver {
        counters,
        clock,
        from: format!("{name}.{pid}"),
        seq: Arc::new(AtomicU64::new(0)),
        counts: Arc::new(Counts::default()),
    };
    let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
    tokio::task::spawn_blocking(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut stdin.lock(), &mut line).is_ok_and(|n| n > 0) {
            if lines_tx.send(line.trim().to_owned()).is_err() {
                return;
            }
            line.clear();
        }
    });
    let mut stop: Option<watch::Sender<bool>> = None;
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) if e.member.node == me && e.member.state == MemberState::Down => {
                    println!("self down {pid} {}", mono_ms());
                    // The cluster shuts the system down, the entities and
                    // the singleton with it.
                    if tokio::time::timeout(Duration::from_secs(10), sentinel.watch()).await.is_err() {
                        println!("system still running 10 s after self down");
                        std::process::exit(1);
                    }
                    println!("exit {pid} {}", mono_ms());
                    std::process::exit(0);
                }
                Ok(e) => println!("member {} {} {}", e.member.node, e.member.state, mono_ms()),
                Err(e) => println!("lagged {e}"),
            },
            m = moves.recv() => match m {
                Ok(ShardEvent::Activated { shard }) => println!("activated {shard} {}", mono_ms()),
                Ok(ShardEvent::HandedOff { shard, .. }) => println!("handedoff {shard} {}", mono_ms()),
                Ok(_) => {}
                Err(e) => println!("lagged {e}"),
            },
            line = lines.recv() => {
                let Some(line) = line else { break };
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["traffic", n, rate] => {
                        let (tx, rx) = watch::channel(false);
                        stop = Some(tx);
                        let (n, rate) = (n.parse().expect("N"), rate.parse().expect("RATE"));
                        tokio::spawn(driver.clone().traffic(n, rate, rx));
                    }
                    ["stats"] => println!("{}", driver.counts.line("stats")),
                    ["quiet"] => {
                        if let Some(tx) = stop.take() {
                            let _ = tx.send(true);
                        }
                        let counts = driver.counts.clone();
                        tokio::spawn(async move {
                            let end = tokio::time::Instant::now() + ASK_TIMEOUT * 2;
                            while counts.in_flight() > 0 && tokio::time::Instant::now() < end {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            println!("{}", counts.line("traffic-done"));
                        });
                    }
                    ["sweep", n] => {
                        tokio::spawn(driver.clone().sweep(n.parse().expect("N")));
                    }
                    _ => println!("unknown command: {line}"),
                }
            }
        }
    }
    system.shutdown().await;
}

/// One instance's life, from the lines its process printed.
#[derive(Debug, Default, Clone)]
struct Life {
    key: String,
    pid: String,
    start: Option<u64>,
    stop: Option<u64>,
    work: Vec<u64>,
}

/// Where an instance counts as live: throughout each `full` span (start
/// inclusive, end exclusive), and at each of the `points` (messages it
/// handled after a freeze, once its node knew itself down). `late` are
/// the messages it handled after a freeze before its node knew.
#[derive(Debug)]
struct Spans {
    inst: String,
    full: Vec<(u64, u64)>,
    points: Vec<u64>,
    late: Vec<u64>,
}

impl Spans {
    fn covers(&self, t: u64) -> bool {
        self.full.iter().any(|(a, b)| *a <= t && t < *b)
    }

    /// Why `self` and `other` were live at once, if they were.
    fn clash(&self, other: &Self) -> Option<String> {
        let both = self.full.iter().find_map(|(a, b)| {
            other
                .full
                .iter()
                .find(|(c, d)| (*a).max(*c) < (*b).min(*d))
                .map(|(c, d)| {
                    format!(
                        "{} [{a} .. {}] and {} [{c} .. {}]",
                        self.inst,
                        show(*b),
                        other.inst,
                        show(*d)
                    )
                })
        });
        both.or_else(|| {
            let late = |x: &Self, y: &Self| {
                x.points.iter().find(|t| y.covers(**t)).map(|t| {
                    format!(
                        "{} handled a message at {t}, after a freeze, while {} was live",
                        x.inst, y.inst
                    )
                })
            };
            late(self, other).or_else(|| late(other, self))
        })
    }
}

fn show(end: u64) -> String {
    if end == u64::MAX {
        "running".to_owned()
    } else {
        end.to_string()
    }
}

/// What [`check`] found.
#[derive(Debug, Default)]
struct Verdict {
    instances: usize,
    keys: usize,
    handled: u64,
    /// Pairs of instances of one key live at once, described.
    overlaps: Vec<String>,
    /// (sender, seq) handled more than once.
    duplicates: Vec<String>,
    /// Messages a woken instance handled while its successor lived,
    /// before its node knew itself down.
    late: u64,
}

/// Checks the nodes' lines (and the script's `killed`/`frozen` records):
/// no two instances of one key live at once, no message handled twice.
///
/// An instance is live from its `ACTIVE` to its `STOPPED`, or to its
/// process's end (`exit` or `killed`) when it printed none, or for ever
/// when neither is known. A process that was frozen (SIGSTOP) ran
/// nothing meanwhile: an instance whose process was frozen while it lived
/// counts as live until the first freeze, and after it only at the
/// moments it handled a message. So a frozen instance that wakes after
/// its successor started breaks the rule only if it handles something
/// while the successor lives; one that stops without handling anything
/// was never active twice. What it handles before its node learns that
/// it is down (`self down`) is counted apart, in [`Verdict::late`]: the
/// messages that reached the node before the others downed it, and that
/// it handles in the moment between waking and hearing so. Nothing but
/// a lease checked per message fences those (docs/FAILURE_SEMANTICS.md).
fn check(lines: impl Iterator<Item = String>) -> Verdict {
    let mut lives: HashMap<String, Life> = HashMap::new();
    let mut ends: HashMap<String, u64> = HashMap::new();
    let mut freezes: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    let mut downs: HashMap<String, u64> = HashMap::new();
    let mut handled: HashMap<(String, String), u32> = HashMap::new();
    let mut v = Verdict::default();
    for line in lines {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
        match w.as_slice() {
            [kind @ ("ACTIVE" | "WORK" | "STOPPED"), key, inst, ..] => {
                let Some(t) = n(3) else { continue };
                let life = lives.entry((*inst).to_owned()).or_insert_with(|| Life {
                    key: (*key).to_owned(),
                    pid: inst.split('.').next().unwrap_or_default().to_owned(),
                    ..Life::default()
                });
                match *kind {
                    "ACTIVE" => life.start = Some(t),
                    "STOPPED" => life.stop = Some(t),
                    _ => {
                        life.work.push(t);
                        v.handled += 1;
                        if let [.., from, seq] = w.as_slice() {
                            *handled
                                .entry(((*from).to_owned(), (*seq).to_owned()))
                                .or_default() += 1;
                        }
                    }
                }
            }
            ["exit" | "killed", pid, ..] => {
                if let Some(t) = n(2) {
                    ends.insert((*pid).to_owned(), t);
                }
            }
            ["self", "down", pid, t, ..] => {
                if let Ok(t) = t.parse() {
                    downs.insert((*pid).to_owned(), t);
                }
            }
            ["frozen", pid, ..] => {
                if let (Some(a), Some(b)) = (n(2), n(3)) {
                    freezes.entry((*pid).to_owned()).or_default().push((a, b));
                }
            }
            _ => {}
        }
    }
    // Per key: each instance's spans, live throughout or only where it
    // handled a message.
    let mut by_key: BTreeMap<String, Vec<Spans>> = BTreeMap::new();
    for (inst, life) in &lives {
        let start = life
            .start
            .or_else(|| life.work.first().copied())
            .unwrap_or(0);
        let end = life
            .stop
            .or_else(|| ends.get(&life.pid).copied())
            .unwrap_or(u64::MAX);
        let mut frozen: Vec<(u64, u64)> = freezes
            .get(&life.pid)
            .into_iter()
            .flatten()
            .copied()
            .filter(|(a, b)| *b > start && *a < end)
            .collect();
        frozen.sort_unstable();
        let mut spans = Spans {
            inst: inst.clone(),
            full: Vec::new(),
            points: Vec::new(),
            late: Vec::new(),
        };
        // Live throughout until the first freeze; after a freeze, only
        // where it worked.
        let first = frozen.first().map_or(end, |(a, _)| (*a).max(start));
        spans.full.push((start, first));
        if let Some((_, b)) = frozen.first() {
            let after = (*b).max(start);
            let told = downs.get(&life.pid).copied().unwrap_or(0);
            (spans.late, spans.points) = life
                .work
                .iter()
                .copied()
                .filter(|t| *t >= after && !frozen.iter().any(|(a, b)| *a <= *t && *t < *b))
                .partition(|t| *t < told);
        }
        by_key.entry(life.key.clone()).or_default().push(spans);
    }
    v.instances = lives.len();
    v.keys = by_key.len();
    for (key, insts) in &by_key {
        for (i, a) in insts.iter().enumerate() {
            for b in &insts[i + 1..] {
                if let Some(why) = a.clash(b) {
                    v.overlaps.push(format!("{key}: {why}"));
                }
                for (x, y) in [(a, b), (b, a)] {
                    v.late += x.late.iter().filter(|t| y.covers(**t)).count() as u64;
                }
            }
        }
    }
    // The singleton's first: they are few.
    v.overlaps
        .sort_by_key(|o| (!o.starts_with("s:"), o.clone()));
    v.duplicates = handled
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((from, seq), n)| format!("{from} #{seq} handled {n} times"))
        .collect();
    v.duplicates.sort();
    v
}

fn check_files(files: &[String]) -> bool {
    let mut lines = Vec::new();
    for f in files {
        match std::fs::read_to_string(f) {
            Ok(s) => lines.extend(s.lines().map(str::to_owned)),
            Err(e) => {
                println!("check: cannot read {f}: {e}");
                return false;
            }
        }
    }
    let v = check(lines.into_iter());
    println!(
        "check: {} instances of {} keys, {} messages handled, {} overlaps, {} duplicates, \
         {} handled by a woken instance before it knew itself down",
        v.instances,
        v.keys,
        v.handled,
        v.overlaps.len(),
        v.duplicates.len(),
        v.late
    );
    for o in v.overlaps.iter().take(20) {
        println!("OVERLAP {o}");
    }
    for d in v.duplicates.iter().take(20) {
        println!("DUPLICATE {d}");
    }
    v.overlaps.is_empty() && v.duplicates.is_empty()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("now") => println!("{}", mono_ms()),
        Some("check") => {
            if !check_files(&args[1..]) {
                std::process::exit(1);
            }
        }
        _ => {
            if let Ok(filter) = std::env::var("RUST_LOG") {
                tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                    .with_ansi(false)
                    .with_writer(std::io::stderr)
                    .init();
            }
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(node(&args));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Verdict {
        check(lines.iter().map(|l| (*l).to_owned()))
    }

    #[test]
    fn a_handoff_that_stops_before_the_next_start_is_not_an_overlap() {
        let v = run(&[
            "ACTIVE e:a 1.0 100",
            "WORK e:a 1.0 150 d 1",
            "STOPPED e:a 1.0 200",
            "ACTIVE e:a 2.0 200",
            "WORK e:a 2.0 250 d 2",
        ]);
        assert_eq!((v.instances, v.keys, v.handled), (2, 1, 2));
        assert!(v.overlaps.is_empty(), "{:?}", v.overlaps);
        assert!(v.duplicates.is_empty());
    }

    #[test]
    fn two_live_instances_of_one_key_are_an_overlap() {
        let v = run(&[
            "ACTIVE e:a 1.0 100",
            "ACTIVE e:a 2.0 150",
            "ACTIVE e:b 2.1 150",
        ]);
        assert_eq!(v.overlaps.len(), 1, "{:?}", v.overlaps);
        assert!(v.overlaps[0].starts_with("e:a: "));
    }

    #[test]
    fn a_killed_or_exited_process_ends_its_instances() {
        let ok = run(&[
            "ACTIVE e:a 1.0 100",
            "killed 1 300",
            "ACTIVE e:a 2.0 400",
            "ACTIVE s:clock 3.0 100",
            "exit 3 500",
            "ACTIVE s:clock 2.1 600",
        ]);
        assert!(ok.overlaps.is_empty(), "{:?}", ok.overlaps);
        let late = run(&["ACTIVE e:a 1.0 100", "killed 1 500", "ACTIVE e:a 2.0 400"]);
        assert_eq!(late.overlaps.len(), 1);
    }

    #[test]
    fn a_frozen_instance_counts_only_where_it_works_after_the_freeze() {
        // Frozen from 200 to 900; its successor starts at 600.
        let idle = run(&[
            "ACTIVE s:clock 1.0 100",
            "frozen 1 200 900",
            "ACTIVE s:clock 2.0 600",
            "STOPPED s:clock 1.0 950",
        ]);
        assert!(idle.overlaps.is_empty(), "{:?}", idle.overlaps);
        let works = run(&[
            "ACTIVE s:clock 1.0 100",
            "frozen 1 200 900",
            "ACTIVE s:clock 2.0 600",
            "WORK s:clock 1.0 910 d 7",
            "STOPPED s:clock 1.0 950",
        ]);
        assert_eq!(works.overlaps.len(), 1, "{:?}", works.overlaps);
        assert!(works.overlaps[0].contains("after a freeze"));
        // Before its node knew itself down, it is counted apart.
        let before = run(&[
            "ACTIVE s:clock 1.0 100",
            "frozen 1 200 900",
            "ACTIVE s:clock 2.0 600",
            "WORK s:clock 1.0 910 d 7",
            "self down 1 920",
            "WORK s:clock 1.0 930 d 8",
            "STOPPED s:clock 1.0 950",
        ]);
        assert_eq!(before.late, 1);
        assert_eq!(
            before.overlaps.len(),
            1,
            "the one after: {:?}",
            before.overlaps
        );
        assert!(before.overlaps[0].contains("at 930"));
    }

    #[test]
    fn work_between_two_freezes_before_the_successor_is_no_overlap() {
        // A short freeze (200-300), work at 400, a long freeze from 500
        // during which the successor starts (800): only work after 800
        // would clash.
        let v = run(&[
            "ACTIVE e:a 1.0 100",
            "frozen 1 200 300",
            "WORK e:a 1.0 400 d 1",
            "frozen 1 500 1000",
            "ACTIVE e:a 2.0 800",
            "STOPPED e:a 1.0 1200",
        ]);
        assert!(v.overlaps.is_empty(), "{:?}", v.overlaps);
    }

    #[test]
    fn a_message_handled_twice_is_a_duplicate() {
        let v = run(&[
            "ACTIVE e:a 1.0 100",
            "WORK e:a 1.0 150 d 1",
            "STOPPED e:a 1.0 200",
            "ACTIVE e:a 2.0 300",
            "WORK e:a 2.0 350 d 1",
        ]);
        assert_eq!(v.duplicates, vec!["d #1 handled 2 times".to_owned()]);
    }
}
