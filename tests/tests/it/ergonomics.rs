//! Less boilerplate: derived messages, replies of any serde shape built from
//! remote messages, and local-only messages, across two nodes.

use std::collections::BTreeMap;

use actors::{Actor, ActorRef, ActorResult, Ctx, RemoteMessage, SendError};
use integration_tests::{actor_path, actor_system, eventually, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::actors_common::ASK;

/// Why a key-value operation failed.
#[derive(Debug, PartialEq, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.kv.KvError")]
enum KvError {
    Missing(String),
}

/// A small key-value service, as a new user writes it: its replies are
/// `Option`, `Vec` of tuples, `Result` and a map, with no newtypes.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.kv.Kv")]
enum Kv {
    Put(String, u64),
    Get(String, ActorRef<Option<u64>>),
    List(ActorRef<Vec<(String, u64)>>),
    Take(String, ActorRef<Result<u64, KvError>>),
    Snapshot(ActorRef<BTreeMap<String, u64>>),
    /// Answers with a ref to itself: a ref is a reply too.
    Me(ActorRef<ActorRef<Kv>>),
}

#[derive(Default)]
struct Store(BTreeMap<String, u64>);

impl Actor for Store {
    type Msg = Kv;

    async fn handle(&mut self, msg: Kv, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Kv::Put(k, v) => {
                self.0.insert(k, v);
            }
            Kv::Get(k, r) => {
                let _ = r.tell(self.0.get(&k).copied());
            }
            Kv::List(r) => {
                let _ = r.tell(self.0.iter().map(|(k, v)| (k.clone(), *v)).collect());
            }
            Kv::Take(k, r) => {
                let _ = r.tell(self.0.remove(&k).ok_or(KvError::Missing(k)));
            }
            Kv::Snapshot(r) => {
                let _ = r.tell(self.0.clone());
            }
            Kv::Me(r) => {
                let _ = r.tell(ctx.myself().clone());
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn replies_of_any_shape_cross_nodes_without_newtypes() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    a.spawn_named("kv", Store::default()).expect("free");
    let kv = within("resolve", b.resolve::<Kv>(&actor_path(&a, "kv")))
        .await
        .expect("resolves");
    assert!(!kv.is_local());
    kv.tell(Kv::Put("x".into(), 1)).expect("room");
    kv.tell(Kv::Put("y".into(), 2)).expect("room");
    let got = kv.ask(|r| Kv::Get("x".into(), r), ASK).await;
    assert_eq!(got, Ok(Some(1)));
    assert_eq!(kv.ask(|r| Kv::Get("z".into(), r), ASK).await, Ok(None));
    let listed = kv.ask(Kv::List, ASK).await.expect("answers");
    assert_eq!(listed, vec![("x".to_owned(), 1), ("y".to_owned(), 2)]);
    let snapshot = kv.ask(Kv::Snapshot, ASK).await.expect("answers");
    assert_eq!(snapshot.get("y"), Some(&2));
    assert_eq!(kv.ask(|r| Kv::Take("y".into(), r), ASK).await, Ok(Ok(2)));
    assert_eq!(
        kv.ask(|r| Kv::Take("y".into(), r), ASK).await,
        Ok(Err(KvError::Missing("y".into())))
    );
    // A ref that came back as a reply works like the resolved one.
    let me = kv.ask(Kv::Me, ASK).await.expect("answers");
    assert_eq!(me.path(), kv.path());
    assert_eq!(me.ask(|r| Kv::Get("x".into(), r), ASK).await, Ok(Some(1)));
    assert_eq!(a.dead_letters(), 0);
}

/// An actor that takes remote messages and, in the same enum, local-only
/// ones: `#[serde(skip)]` variants cannot be encoded nor decoded.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.LocalOnly")]
enum Guarded {
    Add(u64),
    Get(ActorRef<u64>),
    /// Local only: resets the total, and says so on the channel. Last, as
    /// the derive requires.
    #[serde(skip)]
    Reset(mpsc::UnboundedSender<u64>),
}

/// What a forging (or simply different) peer sends under the same
/// manifest: the same variants, the local-only one included.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.LocalOnly")]
enum GuardedForged {
    Add(u64),
    Get(ActorRef<u64>),
    Reset(()),
}

struct Total(u64);

impl Actor for Total {
    type Msg = Guarded;

    async fn handle(&mut self, msg: Guarded, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Guarded::Add(n) => self.0 += n,
            Guarded::Reset(done) => {
                let _ = done.send(self.0);
                self.0 = 0;
            }
            Guarded::Get(r) => {
                let _ = r.tell(self.0);
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn local_only_messages_are_refused_from_peers_and_to_remote_refs() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let local = a.spawn_named("total", Total(0)).expect("free");
    // Locally the local-only message is an ordinary one.
    local.tell(Guarded::Add(5)).expect("room");
    let (done, mut resets) = mpsc::unbounded_channel();
    local.tell(Guarded::Reset(done.clone())).expect("room");
    assert_eq!(within("reset", resets.recv()).await, Some(5));

    // Through a remote ref it is refused before anything is sent.
    let remote = within("resolve", b.resolve::<Guarded>(&actor_path(&a, "total")))
        .await
        .expect("resolves");
    remote.tell(Guarded::Add(7)).expect("room");
    let refused = remote.tell(Guarded::Reset(done));
    let Err(SendError::Serialization(e)) = refused else {
        panic!("a local-only message must not leave the process: {refused:?}");
    };
    assert!(e.to_string().contains("Reset"), "names the variant: {e}");
    assert_eq!(remote.ask(Guarded::Get, ASK).await, Ok(7));

    // A peer that forges it: a dead letter on the receiving node, and the
    // actor goes on with what follows.
    let forged = within(
        "resolve",
        b.resolve::<GuardedForged>(&actor_path(&a, "total")),
    )
    .await
    .expect("resolves");
    let before = a.dead_letters();
    forged.tell(GuardedForged::Reset(())).expect("sent");
    forged.tell(GuardedForged::Add(1)).expect("sent");
    eventually("the forged message is a dead letter", || {
        a.dead_letters() > before
    })
    .await;
    assert_eq!(remote.ask(Guarded::Get, ASK).await, Ok(8), "never reset");
    assert!(resets.try_recv().is_err());
}

/// Holds its first message until the gate opens, telling `entered` when it
/// is inside; the rest it just counts.
struct Gated {
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
    entered: mpsc::UnboundedSender<()>,
}

impl Actor for Gated {
    type Msg = u32;

    async fn handle(&mut self, _: u32, _: &mut Ctx<Self>) -> ActorResult {
        if let Some(gate) = self.gate.take() {
            let _ = self.entered.send(());
            let _ = gate.await;
        }
        Ok(())
    }
}

/// A gated actor spawned with `options`, busy with its first message; the
/// gate's key.
async fn busy(
    system: &actors::ActorSystem,
    options: &actors::SpawnOptions,
) -> (ActorRef<u32>, tokio::sync::oneshot::Sender<()>) {
    let (open, gate) = tokio::sync::oneshot::channel();
    let (entered, mut inside) = mpsc::unbounded_channel();
    let gated = Gated {
        gate: Some(gate),
        entered,
    };
    let r = system.spawn_with(gated, options);
    r.tell(0).expect("room");
    within("the actor holds its first message", inside.recv()).await;
    (r, open)
}

#[tokio::test]
async fn mailbox_capacity_is_per_actor() {
    let mut config = actors::SystemConfig::default();
    config.set_mailbox_capacity(4).unwrap();
    let system = actors::ActorSystem::with_config("cap", None, config)
        .await
        .expect("builds");
    // Its own capacity: 2 queued, the third refused.
    let (small, open_small) = busy(
        &system,
        actors::SpawnOptions::default()
            .set_mailbox_capacity(2)
            .unwrap(),
    )
    .await;
    small.tell(1).expect("room");
    small.tell(2).expect("room");
    assert!(matches!(small.tell(3), Err(SendError::MailboxFull(3))));
    // Larger than the system's.
    let (large, open_large) = busy(
        &system,
        actors::SpawnOptions::default()
            .set_mailbox_capacity(8)
            .unwrap(),
    )
    .await;
    for i in 1..=8 {
        large.tell(i).expect("room");
    }
    assert!(matches!(large.tell(9), Err(SendError::MailboxFull(9))));
    // Unset: the system's 4.
    let (plain, open_plain) = busy(&system, &actors::SpawnOptions::default()).await;
    for i in 1..=4 {
        plain.tell(i).expect("room");
    }
    assert!(matches!(plain.tell(5), Err(SendError::MailboxFull(5))));
    // A named actor takes options too, and a full one drains as usual.
    let named = system
        .spawn_named_with(
            "named",
            Total(0),
            actors::SpawnOptions::default()
                .set_mailbox_capacity(1)
                .unwrap(),
        )
        .expect("free");
    let _ = (
        open_small.send(()),
        open_large.send(()),
        open_plain.send(()),
    );
    within("the small mailbox has room again", small.send(4))
        .await
        .expect("sent");
    assert_eq!(named.ask(Guarded::Get, ASK).await, Ok(0));
}

/// Tells each number to the ref it is handed.
struct Feeder;

/// A ref that takes numbers, and the numbers to tell it.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.Feed")]
struct Feed(ActorRef<u64>, Vec<u64>);

impl Actor for Feeder {
    type Msg = Feed;

    async fn handle(&mut self, Feed(to, numbers): Feed, _: &mut Ctx<Self>) -> ActorResult {
        for n in numbers {
            let _ = to.send(n).await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_adapter_works_on_another_node_and_dies_with_its_actor() {
    use super::actors_common::{Count, Counter, total};
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let counter = a.spawn(Counter::default());
    // b speaks plain numbers; a's counter takes `Count`.
    let adds: ActorRef<u64> = a.adapter(&counter, Count::Add);
    assert!(adds.is_local());
    adds.tell(1).expect("room");
    b.spawn_named("feeder", Feeder).expect("free");
    let feeder = within("resolve", a.resolve::<Feed>(&actor_path(&b, "feeder")))
        .await
        .expect("resolves");
    feeder
        .tell(Feed(adds.clone(), vec![2, 3, 4]))
        .expect("room");
    // Converted at the origin: the feeder's numbers reach the counter.
    within("all four numbers arrive", async {
        while total(&counter).await != 10 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The adapter stops with its actor, and what is sent to it then is a
    // dead letter, here and from b.
    counter.stop();
    within("the adapter stops too", adds.watch()).await;
    let before = a.dead_letters();
    assert!(matches!(adds.tell(5), Err(SendError::ActorGone(5))));
    feeder.tell(Feed(adds, vec![6])).expect("room");
    eventually("b's number is a dead letter on a", || {
        a.dead_letters() >= before + 2
    })
    .await;
}

/// Takes lines, from an adapter it makes for itself.
enum Log {
    Line(String),
    Lines(ActorRef<Vec<String>>),
}

struct Logger {
    lines: Vec<String>,
    adapter: mpsc::UnboundedSender<ActorRef<String>>,
}

impl Actor for Logger {
    type Msg = Log;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        let _ = self.adapter.send(ctx.adapter(Log::Line));
        Ok(())
    }

    async fn handle(&mut self, msg: Log, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Log::Line(l) => self.lines.push(l),
            Log::Lines(r) => {
                let _ = r.tell(self.lines.clone());
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_actor_adapts_its_own_protocol() {
    let system = actors::ActorSystem::local("adapt").expect("builds");
    let (adapter, mut adapters) = mpsc::unbounded_channel();
    let logger = system.spawn(Logger {
        lines: Vec::new(),
        adapter,
    });
    let lines: ActorRef<String> = within("the adapter", adapters.recv())
        .await
        .expect("made in started");
    lines.tell("one".into()).expect("room");
    within("send", lines.send("two".into()))
        .await
        .expect("sent");
    within("both lines", async {
        loop {
            let got = logger.ask(Log::Lines, ASK).await.expect("answers");
            if got.len() == 2 {
                return assert_eq!(got, ["one", "two"]);
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    logger.stop();
    within("the adapter stops with its actor", lines.watch()).await;
}

/// Takes `pace` over each message, counting them.
struct Paced {
    pace: std::time::Duration,
    handled: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Actor for Paced {
    type Msg = ();

    async fn handle(&mut self, (): (), _: &mut Ctx<Self>) -> ActorResult {
        tokio::time::sleep(self.pace).await;
        self.handled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// A paced actor with `n` messages queued, and its count.
fn paced(
    system: &actors::ActorSystem,
    n: u64,
) -> (ActorRef<()>, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let handled = std::sync::Arc::default();
    let r = system.spawn(Paced {
        pace: std::time::Duration::from_millis(50),
        handled: std::sync::Arc::clone(&handled),
    });
    for _ in 0..n {
        r.tell(()).expect("room");
    }
    (r, handled)
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_handles_what_is_queued_within_its_deadline() {
    use std::{sync::atomic::Ordering, time::Duration};
    let system = actors::ActorSystem::local("drain").expect("builds");
    let (_, all) = paced(&system, 20);
    let (_, also) = paced(&system, 3);
    // 20 × 50 ms of work, a deadline of 10 s: everything is handled.
    assert!(system.shutdown_gracefully(Duration::from_secs(10)).await);
    assert_eq!(all.load(Ordering::Relaxed), 20);
    assert_eq!(also.load(Ordering::Relaxed), 3);
    // Spawned after: stopped at once.
    let late = system.spawn(Total(0));
    within("a late spawn stops", late.watch()).await;

    // 20 × 50 ms of work, a deadline of 220 ms: five are handled (the
    // one under way at the deadline finishes), the rest are dead letters.
    let system = actors::ActorSystem::local("deadline").expect("builds");
    let (_, some) = paced(&system, 20);
    assert!(!system.shutdown_gracefully(Duration::from_millis(220)).await);
    assert_eq!(some.load(Ordering::Relaxed), 5);
    assert_eq!(system.dead_letters(), 15);
}

#[tokio::test]
async fn ctrl_c_shuts_a_process_down_after_its_queued_work() {
    use std::{
        io::{BufRead, BufReader},
        process::{Command, Stdio},
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_graceful"))
        .arg("200")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let (ready, rest) = within(
        "the process ends",
        tokio::task::spawn_blocking(move || {
            let ready = lines.next();
            // 200 × 2 ms of work is queued when it says ready.
            let sent = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .expect("kill runs");
            assert!(sent.success());
            let rest: Vec<String> = lines.map_while(Result::ok).collect();
            (ready, (rest, child.wait().expect("exits")))
        }),
    )
    .await
    .expect("no panic");
    assert_eq!(ready.and_then(Result::ok).as_deref(), Some("ready"));
    let (rest, status) = rest;
    assert!(
        status.success(),
        "a clean exit, not killed by SIGINT: {status}"
    );
    assert_eq!(rest, ["handled 200", "drained true"]);
}

/// Two message types of one name in one package: the derive gives both the
/// manifest `integration-tests.Twin`.
mod orders {
    #[derive(Debug, serde::Serialize, serde::Deserialize, actors::RemoteMessage)]
    pub(super) struct Twin(pub(super) u64);
}

mod invoices {
    #[derive(Debug, serde::Serialize, serde::Deserialize, actors::RemoteMessage)]
    pub(super) struct Twin(pub(super) String);
}

/// Takes any message and drops it.
struct Sink<M>(std::marker::PhantomData<fn(M)>);

impl<M: Send + 'static> Actor for Sink<M> {
    type Msg = M;

    async fn handle(&mut self, _: M, _: &mut Ctx<Self>) -> ActorResult {
        Ok(())
    }
}

#[tokio::test]
async fn two_derived_types_of_one_name_are_refused_at_registration_naming_both() {
    assert_eq!(orders::Twin::MANIFEST, "integration-tests.Twin");
    assert_eq!(orders::Twin::MANIFEST, invoices::Twin::MANIFEST);
    let sys = actor_system("twins").await;
    sys.spawn_named("orders", Sink::<orders::Twin>(Default::default()))
        .expect("the first type takes the name");
    let err = sys
        .spawn_named("invoices", Sink::<invoices::Twin>(Default::default()))
        .expect_err("the second type with the same manifest is refused");
    let text = err.to_string();
    assert!(
        matches!(err, actors::SpawnError::ManifestShared { .. })
            && text.contains("orders::Twin")
            && text.contains("invoices::Twin")
            && text.contains("#[remote(manifest"),
        "{text}"
    );
    // Resolving as the second type is refused the same way.
    let resolved = sys
        .resolve::<invoices::Twin>(&actor_path(&sys, "orders"))
        .await
        .expect_err("refused");
    assert!(
        matches!(resolved, actors::ResolveError::ManifestShared { .. }),
        "{resolved}"
    );
}
