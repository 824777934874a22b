//! A node in its own process, for fault tests that kill, stop or restart a
//! peer, or cut the network under it.
//!
//! ```text
//! peer NAME BIND_ADDR [--client NODE] [--heartbeat-ms N] [--pause-ms N]
//!                     [--backoff-max-ms N] [--ask-every-ms N] [--ask-timeout-ms N]
//! ```
//!
//! Starts an actor system with a counter at `/user/counter`, prints
//! `ready NODE` on stdout, and runs until killed or until its stdin closes
//! (so a test that dies takes its peers with it).
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

struct Args {
    name: String,
    bind: std::net::SocketAddr,
    client: Option<String>,
    heartbeat: Option<Duration>,
    pause: Option<Duration>,
    backoff_max: Option<Duration>,
    ask_every: Duration,
    ask_timeout: Duration,
}

const USAGE: &str = "usage: peer NAME BIND_ADDR [--client NODE] [--heartbeat-ms N] [--pause-ms N] \
                     [--backoff-max-ms N] [--ask-every-ms N] [--ask-timeout-ms N]";

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

#[tokio::main]
async fn main() {
    let start = Instant::now();
    let args = parse_args();
    let mut config = SystemConfig::default();
    let mut hb = HeartbeatConfig::default();
    if let Some(i) = args.heartbeat {
        hb.set_interval(i);
    }
    if let Some(p) = args.pause {
        hb.set_acceptable_pause(p);
    }
    config.set_heartbeat(hb);
    if let Some(max) = args.backoff_max {
        config.set_reconnect_backoff(Backoff::new(Duration::from_millis(50), max, 0.2));
    }
    let system = ActorSystem::with_config(&args.name, Some(args.bind), config)
        .await
        .expect("the peer binds its address");
    system
        .spawn_named("counter", Counter(0, Vec::new()))
        .expect("the name is free");
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
