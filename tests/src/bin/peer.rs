//! A node in its own process, for fault tests that kill or restart a peer:
//! `peer NAME BIND_ADDR` starts an actor system with a counter at
//! `/user/counter`, prints `ready NODE` on stdout, and runs until killed or
//! until its stdin closes (so a test that dies takes its peers with it).

use std::io::{BufRead, Write};

use actors::{Actor, ActorRef, ActorSystem, Ctx, RemoteMessage};
use serde::{Deserialize, Serialize};

/// The counter's messages; the fault tests declare the same type.
#[derive(Debug, Serialize, Deserialize)]
enum PeerCount {
    Add(u64),
    Get(ActorRef<u64>),
}

impl RemoteMessage for PeerCount {
    const MANIFEST: &'static str = "peer.Count";
}

struct Counter(u64);

impl Actor for Counter {
    type Msg = PeerCount;

    async fn handle(&mut self, msg: PeerCount, _: &mut Ctx<Self>) {
        match msg {
            PeerCount::Add(n) => self.0 += n,
            PeerCount::Get(reply) => {
                let _ = reply.tell(self.0);
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect("usage: peer NAME BIND_ADDR");
    let bind = args
        .next()
        .expect("usage: peer NAME BIND_ADDR")
        .parse()
        .expect("BIND_ADDR is host:port");
    let system = ActorSystem::remote(&name, bind)
        .await
        .expect("the peer binds its address");
    system
        .spawn_named("counter", Counter(0))
        .expect("the name is free");
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", system.node()).expect("stdout is open");
    out.flush().expect("stdout is open");
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
    system.shutdown().await;
}
