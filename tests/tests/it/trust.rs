//! What a peer may do beyond messaging the actors it was given refs to:
//! authorization (untrusted mode, reply slots that cannot be looked up or
//! guessed) and the bounds on what refs inside its messages can make a
//! node dial.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx, RemoteEvent, RemoteMessage,
    ResolveError, SystemConfig,
};
use integration_tests::{
    actor_path, actor_system, actor_system_with, eventually, frame_bytes, raw_client_handshake,
    raw_connect, run_raw_handshake, within,
};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    sync::mpsc,
};
use transport::{FrameKind, handshake::Hello};

use super::actors_common::{ASK, Count, Counter, total};

/// Node `a` in untrusted mode with only `/user/counter` listed, a counter
/// there, and node `b`'s ref to it.
async fn untrusted_counter() -> (ActorSystem, ActorSystem, ActorRef<Count>, ActorRef<Count>) {
    let mut config = SystemConfig::default();
    config
        .set_untrusted_mode(true)
        .set_lookup_paths(["/user/counter"]);
    let a = actor_system_with("a", config).await;
    let b = actor_system("b").await;
    let local = a.spawn_named("counter", Counter::default()).expect("free");
    let remote = within("resolve", b.resolve::<Count>(&actor_path(&a, "counter")))
        .await
        .expect("a listed path resolves");
    (a, b, local, remote)
}

#[tokio::test]
async fn remote_stop_is_refused_in_untrusted_mode() {
    let (a, _b, local, remote) = untrusted_counter().await;
    remote.tell(Count::Add(2)).expect("room");
    assert_eq!(total(&remote).await, 2);
    let before = a.dead_letters();
    remote.stop();
    // The stop travels the reliable stream, ahead of later messages: once
    // a has counted it, the counter must still be there.
    eventually("the refused stop is counted", || a.dead_letters() > before).await;
    remote.tell(Count::Add(3)).expect("room");
    assert_eq!(total(&remote).await, 5, "still running");
    assert_eq!(total(&local).await, 5);
}

#[tokio::test]
async fn a_remote_graceful_stop_is_refused_in_untrusted_mode() {
    let (a, _b, _local, remote) = untrusted_counter().await;
    remote.tell(Count::Add(2)).expect("room");
    let before = a.dead_letters();
    remote.stop_after_queued().expect("queued on the link");
    remote.tell(Count::Add(3)).expect("room");
    // Behind the refused stop on the link: handled, so the actor runs.
    assert_eq!(total(&remote).await, 5, "still running");
    assert_eq!(a.dead_letters(), before + 1, "the refused stop is counted");
}

#[tokio::test]
async fn untrusted_mode_resolves_only_listed_paths() {
    let mut config = SystemConfig::default();
    config
        .set_untrusted_mode(true)
        .set_lookup_paths(["/user/api", "/user/workers/"]);
    let a = actor_system_with("a", config).await;
    let b = actor_system("b").await;
    a.spawn_named("api", Counter::default()).expect("free");
    a.spawn_named("admin", Counter::default()).expect("free");
    let api = within("resolve", b.resolve::<Count>(&actor_path(&a, "api"))).await;
    assert!(api.is_ok(), "{api:?}");
    let admin = within("resolve", b.resolve::<Count>(&actor_path(&a, "admin"))).await;
    assert!(
        matches!(admin, Err(ResolveError::NotFound(_))),
        "an unlisted actor looks absent: {admin:?}"
    );
    // Trusted (the default): it resolves.
    let c = actor_system("c").await;
    c.spawn_named("admin", Counter::default()).expect("free");
    let open = within("resolve", b.resolve::<Count>(&actor_path(&c, "admin"))).await;
    assert!(open.is_ok(), "{open:?}");
}

/// Holds the reply refs of asks instead of answering, and reports their
/// paths.
struct Holder {
    paths: mpsc::UnboundedSender<String>,
    held: Vec<ActorRef<u64>>,
}

impl Actor for Holder {
    type Msg = Count;

    async fn handle(&mut self, msg: Count, _: &mut Ctx<Self>) -> ActorResult {
        if let Count::Get(reply) | Count::Ignore(reply) = msg {
            let _ = self.paths.send(reply.path().to_string());
            self.held.push(reply);
        }
        Ok(())
    }
}

/// A [`Holder`] spawned on `at` as `/user/holder`, resolved from `from`,
/// and the paths of the reply refs it gets.
async fn holder(
    at: &actors::ActorSystem,
    from: &actors::ActorSystem,
) -> (ActorRef<Count>, mpsc::UnboundedReceiver<String>) {
    let (paths, seen) = mpsc::unbounded_channel();
    let h = Holder {
        paths,
        held: Vec::new(),
    };
    at.spawn_named("holder", h).expect("free");
    let holder = within("resolve", from.resolve::<Count>(&actor_path(at, "holder")))
        .await
        .expect("resolves");
    (holder, seen)
}

#[tokio::test]
async fn reply_slots_are_never_looked_up() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let c = actor_system("c").await;
    let (holder, mut seen) = holder(&b, &a).await;
    let pending = tokio::spawn(async move { holder.ask(Count::Get, ASK).await });
    let reply_path = within("the reply path", seen.recv()).await.expect("sent");
    assert!(reply_path.contains("/temp/$"), "{reply_path}");
    let found = within("resolve a reply slot", c.resolve::<u64>(&reply_path)).await;
    assert!(
        matches!(found, Err(ResolveError::NotFound(_))),
        "a third party must not find an ask's reply slot: {found:?}"
    );
    pending.abort();
}

/// What `Forger` is told: refs to reply slots it guesses. The same
/// manifest as [`ForgeWire`], whose field is the path as a plain string:
/// an `ActorRef` travels as its path, so a hostile node can name any path.
#[derive(Serialize, Deserialize)]
struct Forge(Vec<ActorRef<u64>>);

impl RemoteMessage for Forge {
    const MANIFEST: &'static str = "it.Forge";
}

#[derive(Debug, Serialize, Deserialize)]
struct ForgeWire(Vec<String>);

impl RemoteMessage for ForgeWire {
    const MANIFEST: &'static str = "it.Forge";
}

/// Answers every ref it is handed with 666.
struct Forger {
    sent: mpsc::UnboundedSender<usize>,
}

impl Actor for Forger {
    type Msg = Forge;

    async fn handle(&mut self, Forge(refs): Forge, _: &mut Ctx<Self>) -> ActorResult {
        for r in &refs {
            let _ = r.tell(666);
        }
        let _ = self.sent.send(refs.len());
        Ok(())
    }
}

#[tokio::test]
async fn a_third_party_cannot_answer_another_nodes_ask() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let c = actor_system("c").await;
    let (paths, mut seen) = mpsc::unbounded_channel();
    let holder = Holder {
        paths: paths.clone(),
        held: Vec::new(),
    };
    c.spawn_named("holder", holder).expect("free");
    let holder = Holder {
        paths,
        held: Vec::new(),
    };
    b.spawn_named("holder", holder).expect("free");
    let (sent, mut forged) = mpsc::unbounded_channel();
    c.spawn_named("forger", Forger { sent }).expect("free");
    // c sees one of a's reply paths, as any node a asks does.
    let on_c = within("resolve", a.resolve::<Count>(&actor_path(&c, "holder")))
        .await
        .expect("resolves");
    let seen_by_c = tokio::spawn(async move { on_c.ask(Count::Ignore, ASK).await });
    let known = within("a reply path c saw", seen.recv())
        .await
        .expect("sent");
    // Then a asks b, which holds the reply ref and never answers.
    let on_b = within("resolve", a.resolve::<Count>(&actor_path(&b, "holder")))
        .await
        .expect("resolves");
    let ask = tokio::spawn(async move { on_b.ask(Count::Get, Duration::from_secs(2)).await });
    let asked = within("b holds the ask", seen.recv()).await.expect("sent");
    assert_ne!(asked, known);
    // c guesses the reply paths around the one it saw, as sequential ids
    // allowed, and answers them all while the ask waits.
    let (prefix, id) = known.rsplit_once('$').expect("a temp path");
    let guesses: Vec<String> = if id.len() == 16 {
        let n = u64::from_str_radix(id, 16).expect("hex");
        (n.saturating_sub(64)..n.saturating_add(64))
            .map(|i| format!("{prefix}${i:016x}"))
            .collect()
    } else {
        let n: u64 = id.parse().expect("decimal");
        (n.saturating_sub(64)..n + 64)
            .map(|i| format!("{prefix}${i}"))
            .collect()
    };
    let forger = within("resolve", b.resolve::<ForgeWire>(&actor_path(&c, "forger")))
        .await
        .expect("resolves");
    forger.tell(ForgeWire(guesses)).expect("room");
    assert_eq!(within("forged", forged.recv()).await, Some(128));
    let answer = within("the ask", ask).await.expect("no panic");
    assert!(
        matches!(answer, Err(AskError::Timeout(_))),
        "nobody but b may answer a's ask: {answer:?}"
    );
    seen_by_c.abort();
}

/// Tells every ref it is handed, so each names a node to dial.
struct Replier;

/// Refs to actors on nodes that do not answer.
#[derive(Serialize, Deserialize)]
struct Refs(Vec<ActorRef<u64>>);

impl RemoteMessage for Refs {
    const MANIFEST: &'static str = "it.Refs";
}

#[derive(Debug, Serialize, Deserialize)]
struct RefsWire(Vec<String>);

impl RemoteMessage for RefsWire {
    const MANIFEST: &'static str = "it.Refs";
}

impl Actor for Replier {
    type Msg = Refs;

    async fn handle(&mut self, Refs(refs): Refs, _: &mut Ctx<Self>) -> ActorResult {
        for r in refs {
            let _ = r.tell(1);
        }
        Ok(())
    }
}

/// A listener that accepts connections and never answers: how many are
/// open now, and the most that were open at once.
async fn tarpit() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let port = listener.local_addr().expect("bound").port();
    let (open, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (o, p) = (open.clone(), peak.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let now = o.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            let o = o.clone();
            // Held until the dialer gives up; it is open until then.
            tokio::spawn(async move {
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (port, open, peak)
}

#[tokio::test]
async fn refs_naming_many_nodes_open_at_most_the_configured_dials() {
    const DIALS: usize = 4;
    let (port, open, peak) = tarpit().await;
    let mut config = SystemConfig::default();
    config
        .set_max_concurrent_dials(DIALS)
        .unwrap()
        .set_resolve_timeout(Duration::from_secs(2))
        .unwrap();
    config
        .transport_mut()
        .set_handshake_timeout(Duration::from_secs(30))
        .unwrap();
    let a = actor_system_with("a", config).await;
    a.spawn_named("replier", Replier).expect("free");
    let b = actor_system("b").await;
    let replier = within("resolve", b.resolve::<RefsWire>(&actor_path(&a, "replier")))
        .await
        .expect("resolves");
    // 200 distinct node names, all at the tarpit.
    let refs = (0..200)
        .map(|i| format!("tcp://n{i}@127.0.0.1:{port}/user/x"))
        .collect();
    replier.tell(RefsWire(refs)).expect("room");
    eventually("the dials reach the tarpit", || {
        open.load(Ordering::SeqCst) >= DIALS
    })
    .await;
    // They hang in the handshake; no further dial may start meanwhile.
    let later = within("a later ask still works", async {
        b.resolve::<RefsWire>(&actor_path(&a, "replier")).await
    })
    .await;
    assert!(later.is_ok(), "{later:?}");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        DIALS,
        "at most the configured number of connection attempts at once"
    );
}

#[tokio::test]
async fn refs_beyond_the_association_limit_are_dead_ends() {
    let (port, open, _) = tarpit().await;
    let mut config = SystemConfig::default();
    // b and 3 more.
    config.set_max_associations(4).unwrap();
    let a = actor_system_with("a", config).await;
    a.spawn_named("replier", Replier).expect("free");
    let b = actor_system("b").await;
    let replier = within("resolve", b.resolve::<RefsWire>(&actor_path(&a, "replier")))
        .await
        .expect("resolves");
    let before = a.dead_letters();
    let refs = (0..50)
        .map(|i| format!("tcp://n{i}@127.0.0.1:{port}/user/x"))
        .collect();
    replier.tell(RefsWire(refs)).expect("room");
    // 3 associations more, 47 refs that are dead ends: their messages are
    // counted as dead letters.
    eventually("dead ends counted", || a.dead_letters() >= before + 47).await;
    eventually("the allowed dials reach the tarpit", || {
        open.load(Ordering::SeqCst) >= 3
    })
    .await;
    assert_eq!(open.load(Ordering::SeqCst), 3);
    // resolve says why.
    let c = actor_system("c").await;
    let err = within(
        "resolve past the limit",
        a.resolve::<Count>(&actor_path(&c, "x")),
    )
    .await;
    assert!(
        matches!(&err, Err(ResolveError::Unreachable { reason, .. }) if reason.contains("association")),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_dial_allow_list_refuses_other_addresses() {
    let mut config = SystemConfig::default();
    config.set_dial_allow_list(Some(vec!["10.0.0.0/8".parse().expect("a network")]));
    let a = actor_system_with("a", config).await;
    let b = actor_system("b").await;
    b.spawn_named("counter", Counter::default()).expect("free");
    let err = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter"))).await;
    assert!(
        matches!(&err, Err(ResolveError::Unreachable { reason, .. }) if reason.contains("allow-list")),
        "{err:?}"
    );
    // Allowed: loopback.
    let mut config = SystemConfig::default();
    config.set_dial_allow_list(Some(vec!["127.0.0.0/8".parse().expect("a network")]));
    let c = actor_system_with("c", config).await;
    let ok = within("resolve", c.resolve::<Count>(&actor_path(&b, "counter"))).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[tokio::test]
async fn ask_reply_paths_are_random() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (holder, mut seen) = holder(&b, &a).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let h = holder.clone();
        tokio::spawn(async move {
            let r: Result<u64, AskError> = h.ask(Count::Ignore, ASK).await;
            r
        });
        let path = within("a reply path", seen.recv()).await.expect("sent");
        let id = path.rsplit_once('$').expect("temp").1.to_owned();
        assert_eq!(id.len(), 16, "64 bits in hex: {path}");
        ids.push(u64::from_str_radix(&id, 16).expect("hex"));
    }
    // Consecutive asks are far apart (not a counter).
    assert!(
        ids.windows(2).all(|w| w[0].abs_diff(w[1]) > 1 << 20),
        "{ids:x?}"
    );
}

/// A raw client that completes the handshake with `system`, proving the
/// shared secret, and claims to be node `node`, incarnation `uid`.
async fn impostor(system: &actors::ActorSystem, node: &str, uid: u64) -> tokio::net::TcpStream {
    let addr = system.local_addr().expect("remoting");
    let mut stream = raw_connect(addr).await;
    let hs = raw_client_handshake(Hello {
        uid,
        addr: node.into(),
    });
    run_raw_handshake(&mut stream, hs).await;
    stream
}

/// The incarnation `system` introduces itself with: what any client reads
/// from its hello.
async fn uid_of(system: &actors::ActorSystem) -> u64 {
    let mut stream = raw_connect(system.local_addr().expect("remoting")).await;
    let hs = raw_client_handshake(Hello {
        uid: 77,
        addr: "peek@127.0.0.1:9".into(),
    });
    run_raw_handshake(&mut stream, hs).await.0.uid
}

/// `SysWire::Shutdown` in bincode's format: variant 7.
pub(super) const SHUTDOWN_NOTICE: [u8; 1] = [7];

#[tokio::test]
async fn a_secret_holder_cannot_quarantine_another_node_or_receive_its_traffic() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    a.spawn_named("counter", Counter::default()).expect("free");
    b.spawn_named("counter", Counter::default()).expect("free");
    let on_a = within("resolve", b.resolve::<Count>(&actor_path(&a, "counter")))
        .await
        .expect("resolves");
    let on_b = within("resolve", a.resolve::<Count>(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    let mut events = a.subscribe_remote_events();
    let real_uid = uid_of(&b).await;
    let mut expected = (0, 0);
    // Claiming b's real incarnation (read from its hello), then a new one.
    for uid in [real_uid, 0x1234_5678] {
        let mut fake = impostor(&a, b.node(), uid).await;
        // A shutdown notice, then a malformed envelope a counts: once it
        // is counted, a has read the notice.
        let before = a.dead_letters();
        let mut bytes = frame_bytes(FrameKind::System, &SHUTDOWN_NOTICE);
        bytes.extend(frame_bytes(FrameKind::Message, &[0xff]));
        fake.write_all(&bytes).await.expect("written");
        eventually("a read the impostor's frames", || a.dead_letters() > before).await;
        // Both nodes still talk, each way.
        on_b.tell(Count::Add(1)).expect("room");
        on_a.tell(Count::Add(2)).expect("room");
        expected = (expected.0 + 1, expected.1 + 2);
        assert_eq!(total(&on_b).await, expected.0, "a's messages reach b");
        assert_eq!(total(&on_a).await, expected.1);
        // And none of a's traffic for b went to the impostor.
        let mut buf = [0u8; 4096];
        match fake.try_read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the impostor received something: {other:?}"),
        }
    }
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(
                e,
                RemoteEvent::Quarantined { .. } | RemoteEvent::Disconnected { .. }
            ),
            "{e:?}"
        );
    }
}

#[tokio::test]
async fn with_a_secret_each_node_sends_on_its_own_dial() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (mut a_events, mut b_events) = (a.subscribe_remote_events(), b.subscribe_remote_events());
    a.spawn_named("counter", Counter::default()).expect("free");
    b.spawn_named("counter", Counter::default()).expect("free");
    let (path_b, path_a) = (actor_path(&b, "counter"), actor_path(&a, "counter"));
    let (on_b, on_a) = within("both resolve", async {
        tokio::join!(a.resolve::<Count>(&path_b), b.resolve::<Count>(&path_a))
    })
    .await;
    let (on_b, on_a) = (on_b.expect("resolves"), on_a.expect("resolves"));
    for i in 1..=50 {
        on_b.tell(Count::Add(1)).expect("room");
        on_a.tell(Count::Add(1)).expect("room");
        if i % 25 == 0 {
            assert_eq!(total(&on_b).await, i);
            assert_eq!(total(&on_a).await, i);
        }
    }
    // One link each way, each node's own dial: one Connected, nothing
    // closed as a duplicate.
    for events in [&mut a_events, &mut b_events] {
        let mut connected = 0;
        while let Ok(e) = events.try_recv() {
            match e {
                RemoteEvent::Connected { .. } => connected += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(connected, 1);
    }
}
