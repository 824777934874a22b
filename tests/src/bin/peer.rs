//! A node in its own process, for fault tests that kill, stop or restart a
//! peer, or cut the network under it.
//!
//! ```text
//! peer NAME BIND_ADDR [--client NODE] [--heartbeat-ms N] [--pause-ms N]
//!                     [--backoff-max-ms N] [--ask-every-ms N] [--ask-timeout-ms N]
//!                     [--evolve NODE] [--peer-memory-budget BYTES] [--blocked N]
//! ```
//!
//! Starts an actor system with a counter at `/user/counter`, prints
//! `ready NODE` on stdout, and runs until killed or until its stdin closes
//! (so a test that dies takes its peers with it).
//!
//! With `--blocked N` it also spawns `N` actors `/user/blocked-0` ...
//! `/user/blocked-{N-1}` that take the counter's messages but never finish
//! handling the first one: whatever reaches them waits in their mailboxes
//! (memory tests).
//!
//! With `--client NODE` it also talks to the counter of `NODE`: it resolves
//! it, watches it, and every `--ask-every-ms` (default 100) adds one and asks
//! for the total, printing one line per outcome and per remote event:
//!
//! ```text
//! resolved PATH | resolve-failed ERROR
//! ask ok TOTAL ms=ELAPSED | ask err ERROR ms=ELAPSED
//! terminated REASON
//! event connected|disconnected|unreachable|reachable|quarantined DETAILS
//! ```
//!
//! Every line starts with the milliseconds since start: `t=MS ...`.
//!
//! With `--evolve NODE` it plays the old ("v1") node of a rolling upgrade
//! (`tests/tests/it/evolve.rs`, which defines "v2"): it spawns the v1
//! greeters `/user/greeter-bin` (bincode) and `/user/greeter-pack`
//! (MessagePack), which answer every greeting they decode to its `from`
//! with `re: TEXT (dead letters N)`, and greets `NODE`'s `/user/inbox-bin`
//! and `/user/inbox-pack` once with `hello from v1`.

use std::{
    io::{BufRead, Write},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Backoff, Ctx, HeartbeatConfig, RemoteEvent,
    SystemConfig,
};
use integration_tests::PeerCount;

/// "v1" of the evolving messages: `tests/tests/it/evolve.rs` declares
/// "v2", which has one field more.
mod v1 {
    use actors::{Actor, ActorRef, ActorResult, Ctx, RemoteMessage, SerializerId, SharedBytes};
    use serde::{Deserialize, Serialize};

    /// v1 of `evolve.GreetingBin`, in bincode.
    #[derive(Debug, Serialize, Deserialize)]
    pub(crate) struct GreetingBin {
        pub(crate) from: ActorRef<GreetingBin>,
        pub(crate) text: String,
        pub(crate) data: SharedBytes,
    }

    impl RemoteMessage for GreetingBin {
        const MANIFEST: &'static str = "evolve.GreetingBin";
    }

    /// v1 of `evolve.GreetingPack`, in MessagePack.
    #[derive(Debug, Serialize, Deserialize)]
    pub(crate) struct GreetingPack {
        pub(crate) from: ActorRef<GreetingPack>,
        pub(crate) text: String,
        pub(crate) data: SharedBytes,
    }

    impl RemoteMessage for GreetingPack {
        const MANIFEST: &'static str = "evolve.GreetingPack";
        const SERIALIZER: SerializerId = SerializerId::MSGPACK;
    }

    /// Answers each greeting to its sender, with this node's dead-letter
    /// count (so the test sees what this node could not decode).
    pub(crate) struct Greeter;

    impl Actor for Greeter {
        type Msg = GreetingPack;

        async fn handle(&mut self, g: GreetingPack, ctx: &mut Ctx<Self>) -> ActorResult {
            let text = format!(
                "re: {} (dead letters {})",
                g.text,
                ctx.system().dead_letters()
            );
            let _ = g.from.tell(GreetingPack {
                from: ctx.myself().clone(),
                text,
                data: g.data,
            });
            Ok(())
        }
    }

    /// The bincode greeter: the same, for `GreetingBin`.
    pub(crate) struct GreeterBin;

    impl Actor for GreeterBin {
        type Msg = GreetingBin;

        async fn handle(&mut self, g: GreetingBin, ctx: &mut Ctx<Self>) -> ActorResult {
            let text = format!("re: {}", g.text);
            let _ = g.from.tell(GreetingBin {
                from: ctx.myself().clone(),
                text,
                data: g.data,
            });
            Ok(())
        }
    }
}

/// The total, and the reply refs of the asks it holds unanswered.
struct Counter(u64, Vec<ActorRef<u64>>);

impl Actor for Counter {
    type Msg = PeerCount;

    async fn handle(&mut self, msg: PeerCount, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            PeerCount::Add(n) => self.0 += n,
            PeerCount::Get(reply) => {
                let _ = reply.tell(self.0);
            }
            PeerCount::Blob(_) => {}
            PeerCount::Hold(reply) => self.1.push(reply),
        }
        Ok(())
    }
}

/// Never finishes handling its first message (`--blocked`).
struct Blocked;

impl Actor for Blocked {
    type Msg = PeerCount;

    async fn handle(&mut self, _: PeerCount, _: &mut Ctx<Self>) -> ActorResult {
        std::future::pending().await
    }
}

struct Args {
    name: String,
    bind: std::net::SocketAddr,
    client: Option<String>,
    heartbeat: Option<Duration>,
    pause: Option<Duration>,
    backoff_max: Option<Duration>,
    ask_every: Duration,
    ask_timeout: Duration,
    evolve: Option<String>,
    peer_memory_budget: Option<usize>,
    blocked: usize,
}

const USAGE: &str = "usage: peer NAME BIND_ADDR [--client NODE] [--heartbeat-ms N] [--pause-ms N] \
                     [--backoff-max-ms N] [--ask-every-ms N] [--ask-timeout-ms N] \
                     [--evolve NODE] [--peer-memory-budget BYTES] [--blocked N]";

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect(USAGE);
    let bind = args
        .next()
        .expect(USAGE)
        .parse()
        .expect("BIND_ADDR is host:port");
    let mut a = Args {
        name,
        bind,
        client: None,
        heartbeat: None,
        pause: None,
        backoff_max: None,
        ask_every: Duration::from_millis(100),
        ask_timeout: Duration::from_millis(1000),
        evolve: None,
        peer_memory_budget: None,
        blocked: 0,
    };
    while let Some(flag) = args.next() {
        let value = args.next().expect(USAGE);
        let ms = || Duration::from_millis(value.parse().expect("a number of milliseconds"));
        match flag.as_str() {
            "--client" => a.client = Some(value.clone()),
            "--heartbeat-ms" => a.heartbeat = Some(ms()),
            "--pause-ms" => a.pause = Some(ms()),
            "--backoff-max-ms" => a.backoff_max = Some(ms()),
            "--ask-every-ms" => a.ask_every = ms(),
            "--ask-timeout-ms" => a.ask_timeout = ms(),
            "--evolve" => a.evolve = Some(value.clone()),
            "--peer-memory-budget" => {
                a.peer_memory_budget = Some(value.parse().expect("a number of bytes"));
            }
            "--blocked" => a.blocked = value.parse().expect("a number of actors"),
            _ => panic!("unknown flag {flag}; {USAGE}"),
        }
    }
    a
}

/// Prints one line, stamped, and flushes.
fn say(start: Instant, line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "t={} {line}", start.elapsed().as_millis());
    let _ = out.flush();
}

fn event_line(e: &RemoteEvent) -> String {
    match e {
        RemoteEvent::Connected { node, uid } => format!("event connected {node} uid={uid:#x}"),
        RemoteEvent::Disconnected { node, reason } => {
            format!("event disconnected {node} reason={reason}")
        }
        RemoteEvent::Unreachable { node, uid } => format!("event unreachable {node} uid={uid:#x}"),
        RemoteEvent::Reachable { node, uid } => format!("event reachable {node} uid={uid:#x}"),
        RemoteEvent::Quarantined { node, uid, reason } => {
            format!("event quarantined {node} uid={uid:#x} reason={reason}")
        }
        other => format!("event {other:?}"),
    }
}

/// The client loop: resolve, watch, then add-and-ask forever.
async fn client(system: ActorSystem, node: String, args: &Args, start: Instant) {
    let mut events = system.subscribe_remote_events();
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            say(start, &event_line(&e));
        }
    });
    let path = format!("tcp://{node}/user/counter");
    let watching = Arc::new(AtomicBool::new(false));
    let mut counter: Option<ActorRef<PeerCount>> = None;
    let mut tick = tokio::time::interval(args.ask_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = &counter else {
            match system.resolve::<PeerCount>(&path).await {
                Ok(c) => {
                    say(start, &format!("resolved {path}"));
                    counter = Some(c);
                }
                Err(e) => say(start, &format!("resolve-failed {e}")),
            }
            continue;
        };
        if !watching.swap(true, Ordering::AcqRel) {
            let watch = c.watch();
            let watching = watching.clone();
            tokio::spawn(async move {
                let t = watch.await;
                say(start, &format!("terminated {}", t.reason));
                watching.store(false, Ordering::Release);
            });
        }
        let _ = c.tell(PeerCount::Add(1));
        let asked = Instant::now();
        let res = c.ask(PeerCount::Get, args.ask_timeout).await;
        let ms = asked.elapsed().as_millis();
        match res {
            Ok(total) => say(start, &format!("ask ok {total} ms={ms}")),
            Err(e) => say(start, &format!("ask err {e} ms={ms}")),
        }
    }
}

/// `--evolve NODE`: the v1 greeters, and one v1 greeting to each of
/// `NODE`'s inboxes.
async fn evolve_v1(system: &ActorSystem, node: &str) {
    let pack = system
        .spawn_named("greeter-pack", v1::Greeter)
        .expect("the name is free");
    let bin = system
        .spawn_named("greeter-bin", v1::GreeterBin)
        .expect("the name is free");
    let inbox = |name: &str| format!("tcp://{node}/user/{name}");
    let to = system
        .resolve::<v1::GreetingPack>(&inbox("inbox-pack"))
        .await
        .expect("the test's MessagePack inbox resolves");
    let _ = to.tell(v1::GreetingPack {
        from: pack,
        text: "hello from v1".to_owned(),
        data: vec![1, 2, 3].into(),
    });
    let to = system
        .resolve::<v1::GreetingBin>(&inbox("inbox-bin"))
        .await
        .expect("the test's bincode inbox resolves");
    let _ = to.tell(v1::GreetingBin {
        from: bin,
        text: "hello from v1".to_owned(),
        data: vec![1, 2, 3].into(),
    });
}

#[tokio::main]
async fn main() {
    let start = Instant::now();
    let args = parse_args();
    let mut config = SystemConfig::default();
    let mut hb = HeartbeatConfig::default();
    if let Some(i) = args.heartbeat {
        hb.set_interval(i).expect("--heartbeat: at least 1 ms");
    }
    if let Some(p) = args.pause {
        hb.set_acceptable_pause(p);
    }
    config.set_heartbeat(hb);
    if let Some(bytes) = args.peer_memory_budget {
        config
            .set_peer_memory_budget(bytes)
            .expect("--peer-memory-budget: at least MIN_PEER_MEMORY_BUDGET");
    }
    if let Some(max) = args.backoff_max {
        let backoff = Backoff::new(Duration::from_millis(50), max, 0.2)
            .expect("--backoff-max: at least 50 ms");
        config.set_reconnect_backoff(backoff);
    }
    let system = ActorSystem::with_config(&args.name, Some(args.bind), config)
        .await
        .expect("the peer binds its address");
    system
        .spawn_named("counter", Counter(0, Vec::new()))
        .expect("the name is free");
    for i in 0..args.blocked {
        system
            .spawn_named(&format!("blocked-{i}"), Blocked)
            .expect("the name is free");
    }
    if let Some(node) = &args.evolve {
        evolve_v1(&system, node).await;
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", system.node()).expect("stdout is open");
    out.flush().expect("stdout is open");
    let client_task = args.client.clone().map(|node| {
        let system = system.clone();
        tokio::spawn(async move { client(system, node, &args, start).await })
    });
    // Until the parent closes our stdin (or kills us).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let stdin = std::io::stdin();
        while stdin.lock().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
    })
    .await
    .expect("the stdin watcher does not panic");
    if let Some(t) = client_task {
        t.abort();
    }
    system.shutdown().await;
}
