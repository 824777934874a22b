//! A key-value service actor, with a client on another actor system in the
//! same process: ask for request-reply, watch for the server's end.
//!
//! ```text
//! cargo run -p remoting-actors --example kv
//! ```
//!
//! The server system serves `/user/kv`. The client system resolves it by
//! path, puts, gets and deletes keys with `ask`, watches the server both
//! with an actor ([`Ctx::watch`]) and with a [`Watch`](actors::Watch)
//! future, then stops the server remotely and reports the `Terminated`.

use std::{collections::HashMap, process::ExitCode, time::Duration};

use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, Terminated};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// Requests to the key-value server; each answers the key's previous (or
/// current, for `Get`) value.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "example.Kv")]
enum Kv {
    Put {
        key: String,
        value: String,
        reply: ActorRef<Option<String>>,
    },
    Get {
        key: String,
        reply: ActorRef<Option<String>>,
    },
    Delete {
        key: String,
        reply: ActorRef<Option<String>>,
    },
}

#[derive(Default)]
struct KvServer {
    map: HashMap<String, String>,
}

impl Actor for KvServer {
    type Msg = Kv;

    async fn handle(&mut self, msg: Kv, _: &mut Ctx<Self>) -> ActorResult {
        let (reply, answer) = match msg {
            Kv::Put { key, value, reply } => (reply, self.map.insert(key, value)),
            Kv::Get { key, reply } => (reply, self.map.get(&key).cloned()),
            Kv::Delete { key, reply } => (reply, self.map.remove(&key)),
        };
        let _ = reply.tell(answer);
        Ok(())
    }

    async fn stopped(&mut self, reason: &actors::StopReason) {
        println!("server: stopping ({reason}) with {} keys", self.map.len());
    }
}

/// Watches the server and reports its end.
struct Monitor {
    server: ActorRef<Kv>,
    done: Option<oneshot::Sender<Terminated>>,
}

impl Actor for Monitor {
    type Msg = ();

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.server);
        println!("monitor: watching {}", self.server.path());
        Ok(())
    }

    async fn handle(&mut self, (): (), _: &mut Ctx<Self>) -> ActorResult {
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        println!("monitor: {} terminated: {}", t.path, t.reason);
        if let Some(done) = self.done.take() {
            let _ = done.send(t);
        }
        ctx.stop();
        Ok(())
    }
}

/// Every step's bound: this example never waits longer on anything.
const TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> ExitCode {
    // Logs (dead letters, refused connections, unreachable nodes) at
    // `info` and above unless `RUST_LOG` says otherwise.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kv: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let loopback = "127.0.0.1:0".parse().expect("a valid socket address");
    let server_sys = ActorSystem::remote("server", loopback)
        .await
        .map_err(|e| e.to_string())?;
    let client_sys = ActorSystem::remote("client", loopback)
        .await
        .map_err(|e| e.to_string())?;
    server_sys
        .spawn_named("kv", KvServer::default())
        .map_err(|e| e.to_string())?;

    let path = format!("tcp://{}/user/kv", server_sys.node());
    let kv = client_sys
        .resolve::<Kv>(&path)
        .await
        .map_err(|e| e.to_string())?;
    println!("client: resolved {path}");

    let (done_tx, done) = oneshot::channel();
    client_sys.spawn(Monitor {
        server: kv.clone(),
        done: Some(done_tx),
    });
    let watch = kv.watch();

    let ask = |make: Box<dyn FnOnce(ActorRef<Option<String>>) -> Kv + Send>| {
        let kv = kv.clone();
        async move { kv.ask(make, TIMEOUT).await.map_err(|e| e.to_string()) }
    };
    for (k, v) in [("apple", "red"), ("banana", "yellow"), ("apple", "green")] {
        let previous = ask(Box::new(move |reply| Kv::Put {
            key: k.into(),
            value: v.into(),
            reply,
        }))
        .await?;
        println!("client: put {k}={v} (was {previous:?})");
    }
    for k in ["apple", "cherry"] {
        let value = ask(Box::new(move |reply| Kv::Get {
            key: k.into(),
            reply,
        }))
        .await?;
        println!("client: get {k} -> {value:?}");
    }
    let removed = ask(Box::new(|reply| Kv::Delete {
        key: "banana".into(),
        reply,
    }))
    .await?;
    println!("client: delete banana -> {removed:?}");

    println!("client: stopping the server remotely");
    kv.stop();
    let t = tokio::time::timeout(TIMEOUT, watch)
        .await
        .map_err(|_| "the watch did not fire")?;
    println!("client: watch future: {} terminated: {}", t.path, t.reason);
    tokio::time::timeout(TIMEOUT, done)
        .await
        .map_err(|_| "the monitor was not told")?
        .map_err(|_| "the monitor stopped without reporting")?;

    let after = kv
        .ask(
            |reply| Kv::Get {
                key: "apple".into(),
                reply,
            },
            Duration::from_millis(200),
        )
        .await;
    println!("client: asking the stopped server: {after:?}");

    client_sys.shutdown().await;
    server_sys.shutdown().await;
    println!(
        "both systems shut down; dead letters: client {}, server {}",
        client_sys.dead_letters(),
        server_sys.dead_letters()
    );
    Ok(())
}
