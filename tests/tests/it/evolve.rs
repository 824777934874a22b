//! Messages that evolve: a rolling upgrade between a "v1" node (the `peer`
//! binary in `--evolve` mode, another process) and this "v2" node, whose
//! message types have one field more. Under MessagePack both directions
//! work; under bincode each direction is a dead letter that says why. And
//! what a peer's envelope may not say: unknown flags, unknown serializers.

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, SerializerId, SharedBytes,
    manifest_id,
};
use integration_tests::{
    LogCapture, PeerProcess, actor_system, eventually, frame_bytes, raw_actor_peer, within,
};
use serde::{Deserialize, Serialize};
use tokio::{
    io::AsyncWriteExt,
    sync::mpsc::{UnboundedSender, unbounded_channel},
};
use tracing::Level;

/// v2 of `evolve.GreetingPack` (the peer's v1 lacks `lang`).
#[derive(Debug, Serialize, Deserialize)]
struct GreetingPack {
    from: ActorRef<GreetingPack>,
    text: String,
    data: SharedBytes,
    #[serde(default)]
    lang: String,
}

impl RemoteMessage for GreetingPack {
    const MANIFEST: &'static str = "evolve.GreetingPack";
    const SERIALIZER: SerializerId = SerializerId::MSGPACK;
}

/// v2 of `evolve.GreetingBin`: the same change, in bincode.
#[derive(Debug, Serialize, Deserialize)]
struct GreetingBin {
    from: ActorRef<GreetingBin>,
    text: String,
    data: SharedBytes,
    #[serde(default)]
    lang: String,
}

impl RemoteMessage for GreetingBin {
    const MANIFEST: &'static str = "evolve.GreetingBin";
}

/// Hands every greeting it gets to the test.
struct Inbox(UnboundedSender<GreetingPack>);

impl Actor for Inbox {
    type Msg = GreetingPack;

    async fn handle(&mut self, g: GreetingPack, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(g);
        Ok(())
    }
}

/// The bincode inbox: nothing should ever decode here.
struct InboxBin(UnboundedSender<GreetingBin>);

impl Actor for InboxBin {
    type Msg = GreetingBin;

    async fn handle(&mut self, g: GreetingBin, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(g);
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_field_added_on_one_node_works_both_ways_in_msgpack_and_is_a_dead_letter_in_bincode() {
    let logs = LogCapture::install(Level::WARN);
    let system = actor_system("v2").await;
    let (tx, mut greetings) = unbounded_channel();
    let inbox = system.spawn_named("inbox-pack", Inbox(tx)).unwrap();
    let (tx, mut bin_greetings) = unbounded_channel();
    system.spawn_named("inbox-bin", InboxBin(tx)).unwrap();

    // The v1 node greets both inboxes as it starts.
    let peer = PeerProcess::spawn_args(
        env!("CARGO_BIN_EXE_peer"),
        "v1",
        "127.0.0.1:0",
        &["--evolve", system.node()],
    )
    .await;

    // v1 -> v2, MessagePack: the missing field takes its default; refs and
    // shared bytes decode as under bincode.
    let g = within("v1's MessagePack greeting", greetings.recv())
        .await
        .expect("the inbox lives");
    assert_eq!(g.text, "hello from v1");
    assert_eq!(g.lang, "", "the field v1 lacks takes its default");
    assert_eq!(&g.data[..], &[1, 2, 3]);
    assert!(!g.from.is_local());
    assert_eq!(
        g.from.path().to_string(),
        format!("tcp://{}/user/greeter-pack", peer.node)
    );

    // v1 -> v2, bincode: a dead letter that names the serializer, the
    // type and why.
    eventually("v1's bincode greeting is a dead letter", || {
        system.dead_letters() >= 1
    })
    .await;
    assert_eq!(
        logs.lines_with("cannot decode bincode as evolve.GreetingBin"),
        1,
        "{}",
        logs.text()
    );
    assert_eq!(logs.lines_with("bincode is positional"), 1);
    assert!(bin_greetings.try_recv().is_err(), "nothing decoded");

    // v2 -> v1, MessagePack: v1 skips the field it does not know and
    // answers (with its own dead-letter count: none yet).
    g.from
        .tell(GreetingPack {
            from: inbox.clone(),
            text: "hi from v2".to_owned(),
            data: vec![4; 10].into(),
            lang: "en".to_owned(),
        })
        .unwrap();
    let re = within("v1's answer", greetings.recv()).await.unwrap();
    assert_eq!(re.text, "re: hi from v2 (dead letters 0)");
    assert_eq!(&re.data[..], &[4; 10]);

    // v2 -> v1, bincode: a dead letter on v1, which its next MessagePack
    // answer reports (the two greeters are different actors, so ask until
    // the count shows).
    let bin = system
        .resolve::<GreetingBin>(&format!("tcp://{}/user/greeter-bin", peer.node))
        .await
        .unwrap();
    bin.tell(GreetingBin {
        from: system.spawn(InboxBin(unbounded_channel().0)),
        text: "hi in bincode".to_owned(),
        data: SharedBytes::default(),
        lang: "en".to_owned(),
    })
    .unwrap();
    within("v1 to count the bincode greeting as a dead letter", async {
        loop {
            g.from
                .tell(GreetingPack {
                    from: inbox.clone(),
                    text: "probe".to_owned(),
                    data: SharedBytes::default(),
                    lang: String::new(),
                })
                .unwrap();
            let re = greetings.recv().await.unwrap();
            if re.text == "re: probe (dead letters 1)" {
                return;
            }
            assert_eq!(re.text, "re: probe (dead letters 0)");
        }
    })
    .await;
    system.shutdown().await;
}

/// The same type, encoded by one serializer here and decoded as another
/// node's declaration that names another: decoded by the id in the
/// envelope. This is what lets a type switch serializer one node at a time.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SwitchOld {
    n: u64,
}

impl RemoteMessage for SwitchOld {
    const MANIFEST: &'static str = "evolve.Switch";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SwitchNew {
    n: u64,
}

impl RemoteMessage for SwitchNew {
    const MANIFEST: &'static str = "evolve.Switch";
    const SERIALIZER: SerializerId = SerializerId::MSGPACK;
}

struct Forward<M>(UnboundedSender<M>);

impl Actor for Forward<SwitchOld> {
    type Msg = SwitchOld;

    async fn handle(&mut self, m: SwitchOld, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(m);
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_type_switches_serializer_one_node_at_a_time() {
    // The "old" node still declares bincode; the "new" one sends
    // MessagePack under the same manifest (one process: the new type is
    // only ever resolved, which checks the manifest id, not the type).
    let old = actor_system("old").await;
    let new = actor_system("new").await;
    let (tx, mut got) = unbounded_channel();
    old.spawn_named("switch", Forward::<SwitchOld>(tx)).unwrap();
    let to = new
        .resolve::<SwitchNew>(&format!("tcp://{}/user/switch", old.node()))
        .await
        .unwrap();
    to.tell(SwitchNew { n: 41 }).unwrap();
    let m = within("the MessagePack message, decoded by its id", got.recv())
        .await
        .unwrap();
    assert_eq!(m, SwitchOld { n: 41 });
    assert_eq!(old.dead_letters(), 0);
    new.shutdown().await;
    old.shutdown().await;
}

/// Sends one envelope body to `system` as a raw peer; the connection is
/// returned, to be held open while the caller waits.
async fn send_raw(system: &ActorSystem, body: Vec<u8>) -> tokio::net::TcpStream {
    let (mut stream, _) = raw_actor_peer(system).await;
    stream
        .write_all(&frame_bytes(transport::FrameKind::Message, &body))
        .await
        .unwrap();
    stream
}

/// An envelope for `/user/{name}` with the extension flag and `block`.
fn ext_envelope(name: &str, manifest: &str, block: &[u8], payload: &[u8]) -> Vec<u8> {
    let path = format!("/user/{name}");
    let to = actors::wire::To::Define(1, &path);
    actors::wire::envelope(to, manifest_id(manifest), true, &[block, payload].concat())
}

#[tokio::test(flavor = "current_thread")]
async fn an_unknown_serializer_is_a_dead_letter_that_says_so() {
    let logs = LogCapture::install(Level::WARN);
    let system = actor_system("strict").await;
    let (tx, _rx) = unbounded_channel();
    system
        .spawn_named("switch", Forward::<SwitchOld>(tx))
        .unwrap();
    // Serializer 9: no node knows it.
    let conn = send_raw(
        &system,
        ext_envelope("switch", "evolve.Switch", &[1, 9], &[41]),
    )
    .await;
    eventually("the dead letter", || system.dead_letters() == 1).await;
    assert_eq!(
        logs.lines_with("serializer 9 is unknown to this node"),
        1,
        "{}",
        logs.text()
    );
    drop(conn);
    system.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn unknown_envelope_flags_and_bad_blocks_are_malformed() {
    let logs = LogCapture::install(Level::WARN);
    let system = actor_system("strict2").await;
    let (tx, _rx) = unbounded_channel();
    system
        .spawn_named("switch", Forward::<SwitchOld>(tx))
        .unwrap();
    // Flag 128 is no flag of this protocol version (64 is the graceful
    // stop's).
    let mut unknown = ext_envelope("switch", "evolve.Switch", &[1, 1], &[0x81, 0xa1, b'n', 1]);
    unknown[0] |= 128;
    let conn = send_raw(&system, unknown).await;
    eventually("the unknown flag's dead letter", || {
        system.dead_letters() == 1
    })
    .await;
    assert_eq!(
        logs.lines_with("unknown envelope flags"),
        1,
        "{}",
        logs.text()
    );
    // A block with an unknown bit.
    let conn2 = send_raw(
        &system,
        ext_envelope("switch", "evolve.Switch", &[4], &[41]),
    )
    .await;
    eventually("the bad block's dead letter", || system.dead_letters() == 2).await;
    assert_eq!(logs.lines_with("unknown bits in the extension block"), 1);
    drop((conn, conn2));
    system.shutdown().await;
}
