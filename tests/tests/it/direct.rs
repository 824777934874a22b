//! Messages that encode without serde (`#[remote(direct)]`) across real
//! nodes: a burst (the staged path) with refs, options and byte payloads
//! arrives whole and in order, decoded on the other side through serde,
//! and the ref inside each message answers back.

use actors::{Actor, ActorRef, ActorResult, Ctx, RemoteMessage, SharedBytes};
use integration_tests::{actor_path, actor_system, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// What the echo takes.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.direct.Ping", direct)]
enum Ping {
    /// Answer `seq` and what was received to `from`.
    Data {
        from: ActorRef<Pong>,
        seq: u64,
        data: SharedBytes,
        note: Option<String>,
        delta: i32,
    },
    /// A variant after one with fields: its index must be the declared one.
    Burst(ActorRef<Pong>, u32),
}

/// What comes back.
#[derive(Debug, PartialEq, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "it.direct.Pong", direct)]
enum Pong {
    Got {
        seq: u64,
        len: usize,
        first: Option<u8>,
        note: Option<String>,
        delta: i32,
    },
    Counted(u32),
}

struct Echo;

impl Actor for Echo {
    type Msg = Ping;

    async fn handle(&mut self, msg: Ping, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Ping::Data {
                from,
                seq,
                data,
                note,
                delta,
            } => {
                let _ = from.tell(Pong::Got {
                    seq,
                    len: data.len(),
                    first: data.first().copied(),
                    note,
                    delta,
                });
            }
            Ping::Burst(from, n) => {
                // A burst from inside a handler: staged, one hand-over.
                for i in 0..n {
                    let _ = from.tell(Pong::Counted(i));
                }
            }
        }
        Ok(())
    }
}

/// Hands what it gets to the test.
struct Inbox(UnboundedSender<Pong>);

impl Actor for Inbox {
    type Msg = Pong;

    async fn handle(&mut self, msg: Pong, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(msg);
        Ok(())
    }
}

#[tokio::test]
async fn direct_messages_cross_nodes_whole_and_in_order() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    b.spawn_named("echo", Echo).expect("free");
    let (tx, mut got) = unbounded_channel();
    let inbox = a.spawn(Inbox(tx));
    let echo: ActorRef<Ping> = within("resolve", a.resolve(&actor_path(&b, "echo")))
        .await
        .expect("resolves");
    const N: u64 = 300;
    for seq in 0..N {
        // Sizes across the one-byte varint boundary (251), notes present
        // and absent, negative numbers.
        let len = (seq as usize * 7) % 600;
        echo.send(Ping::Data {
            from: inbox.clone(),
            seq,
            data: SharedBytes::from(vec![seq as u8; len]),
            note: (seq % 3 == 0).then(|| format!("note {seq}")),
            delta: -(seq as i32),
        })
        .await
        .expect("sent");
    }
    for seq in 0..N {
        let len = (seq as usize * 7) % 600;
        let pong = within("a pong", got.recv()).await.expect("inbox lives");
        assert_eq!(
            pong,
            Pong::Got {
                seq,
                len,
                first: (len > 0).then_some(seq as u8),
                note: (seq % 3 == 0).then(|| format!("note {seq}")),
                delta: -(seq as i32),
            }
        );
    }
    echo.send(Ping::Burst(inbox.clone(), 1000))
        .await
        .expect("sent");
    for i in 0..1000 {
        let pong = within("a counted pong", got.recv())
            .await
            .expect("inbox lives");
        assert_eq!(pong, Pong::Counted(i));
    }
    assert_eq!(a.dead_letters(), 0);
    assert_eq!(b.dead_letters(), 0);
}
