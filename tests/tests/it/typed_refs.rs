//! Types across nodes: a ref inside a message is checked against the type
//! its receiver declares (as `resolve` checks), and dead letters name the
//! message type rather than its manifest id.

use actors::{Actor, ActorRef, ActorResult, Ctx, RemoteMessage, SystemConfig};
use integration_tests::{LogCapture, actor_path, actor_system_with, eventually, within};
use serde::{Deserialize, Serialize};

use super::actors_common::{Count, Counter, total};

/// What the sending node thinks the message is: it carries a ref to a
/// counter.
#[derive(Debug, Serialize, Deserialize)]
struct HolderV1 {
    r: ActorRef<Count>,
}

impl RemoteMessage for HolderV1 {
    const MANIFEST: &'static str = "it.typed.Holder";
}

/// What the receiving node declares under the same manifest: a ref that
/// takes strings.
#[derive(Debug, Serialize, Deserialize)]
struct HolderV2 {
    r: ActorRef<String>,
}

impl RemoteMessage for HolderV2 {
    const MANIFEST: &'static str = "it.typed.Holder";
}

/// Uses the ref it is given: would send to it.
struct Keeper;

impl Actor for Keeper {
    type Msg = HolderV2;

    async fn handle(&mut self, m: HolderV2, _: &mut Ctx<Self>) -> ActorResult {
        let _ = m.r.tell("hello".to_owned());
        Ok(())
    }
}

#[tokio::test]
async fn a_ref_decoded_as_another_type_is_refused_with_both_names() {
    let logs = LogCapture::install(tracing::Level::WARN);
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    let counter = a.spawn_named("counter", Counter::default()).expect("free");
    b.spawn_named("keeper", Keeper).expect("free");
    let keeper: ActorRef<HolderV1> = within("resolve", a.resolve(&actor_path(&b, "keeper")))
        .await
        .expect("same manifest");
    keeper.tell(HolderV1 { r: counter.clone() }).expect("room");
    eventually("the message is a dead letter on b", || {
        b.dead_letters() == 1
    })
    .await;
    let text = logs.text();
    assert!(
        text.contains("a ref to an actor that takes it.Count, decoded as a ref taking std.String"),
        "{text}"
    );
    // Nothing reached the counter as a string, and it still works.
    assert_eq!(a.dead_letters(), 0);
    counter.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&counter).await, 1);
}

#[tokio::test]
async fn a_dead_letter_names_the_message_type() {
    use integration_tests::{envelope, frame_bytes, raw_actor_peer};
    use tokio::io::AsyncWriteExt;
    let logs = LogCapture::install(tracing::Level::WARN);
    let b = actor_system_with("b", SystemConfig::default()).await;
    // b knows `it.Count` (it runs a counter), and runs an actor of another
    // type at /user/keeper.
    b.spawn_named("counter", Counter::default()).expect("free");
    b.spawn_named("keeper", Keeper).expect("free");
    // A peer sends the keeper a Count.
    let (mut raw, _) = raw_actor_peer(&b).await;
    let body = envelope(
        1,
        Some("/user/keeper"),
        actors::manifest_id(Count::MANIFEST),
        &[0, 1],
    );
    raw.write_all(&frame_bytes(transport::FrameKind::Message, &body))
        .await
        .expect("written");
    eventually("a dead letter on b", || b.dead_letters() == 1).await;
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("dead letter") && l.contains("/user/keeper"))
        .unwrap_or_else(|| panic!("no dead letter line:\n{text}"));
    assert!(line.contains("msg_type=\"it.Count\""), "{line}");
    assert!(line.contains("actor takes it.typed.Holder"), "{line}");
}
