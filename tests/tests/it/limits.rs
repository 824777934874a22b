//! Size limits seen through the actor API: oversized messages are refused
//! to the sender with a typed error, and the link keeps working.

use actors::{Actor, ActorResult, Ctx, RemoteMessage, SendError, SerializationError, SharedBytes};
use integration_tests::{
    actor_path, actor_system, assert_round_trip, connect, endpoint, raw_connect, within,
};
use serde::{Deserialize, Serialize};
use tokio::{io::AsyncReadExt, sync::mpsc};
use transport::{Frame, TransportConfig, TransportError};

/// A byte blob; `SharedBytes` encodes as one length and one write.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Blob(pub(crate) SharedBytes);

impl RemoteMessage for Blob {
    const MANIFEST: &'static str = "it.Blob";
}

/// Reports the size of every blob it receives.
pub(crate) struct BlobSink {
    pub(crate) out: mpsc::UnboundedSender<usize>,
}

impl Actor for BlobSink {
    type Msg = Blob;

    async fn handle(&mut self, Blob(b): Blob, _: &mut Ctx<Self>) -> ActorResult {
        let _ = self.out.send(b.len());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_tell_is_refused_with_sizes_and_the_link_stays_up() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (out, mut sizes) = mpsc::unbounded_channel();
    b.spawn_named("sink", BlobSink { out }).expect("free");
    let sink = within("resolve", a.resolve::<Blob>(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    sink.tell(Blob(vec![1; 1000].into())).expect("room");
    assert_eq!(within("small blob", sizes.recv()).await, Some(1000));

    // Far above any limit: refused while encoding, before the whole
    // message is serialized.
    let huge = Blob(vec![0; 64 << 20].into());
    let err = sink.tell(huge).expect_err("too large to send");
    let SendError::Serialization(SerializationError::TooLarge { size, limit }) = &err else {
        panic!("expected TooLarge, got {err}");
    };
    assert!(size > limit, "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("exceeds the limit of {limit} bytes")),
        "{shown}"
    );
    // `send` refuses the same way instead of waiting.
    let err = within("send refusal", sink.send(Blob(vec![0; 64 << 20].into())))
        .await
        .expect_err("too large to send");
    assert!(
        matches!(
            err,
            SendError::Serialization(SerializationError::TooLarge { .. })
        ),
        "{err}"
    );

    // The link is still up and carries the next message.
    sink.tell(Blob(vec![2; 10].into())).expect("room");
    assert_eq!(within("blob after refusal", sizes.recv()).await, Some(10));
    assert_eq!(b.dead_letters(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_connections_over_the_limit_are_closed_at_once() {
    let mut config = TransportConfig::default();
    config.set_max_inbound_connections(2).unwrap();
    let server = endpoint(config).await;
    let client = endpoint(TransportConfig::default()).await;
    let (c1, _c1_in, _s1, mut s1_in) = connect(&client, &server).await;
    let (_c2, _c2_in, s2, _s2_in) = connect(&client, &server).await;

    // A third connection is accepted by the kernel, then closed by the
    // endpoint before it reads or writes a byte.
    let mut raw = raw_connect(server.local_addr()).await;
    let err = match within("accept error", server.accept()).await {
        Some(Err(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(err.peer, raw.local_addr().unwrap());
    assert!(
        matches!(err.error, TransportError::TooManyConnections { limit: 2 }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("too many inbound connections (limit 2)"),
        "{err}"
    );
    let mut b = [0u8; 16];
    let n = within("refused stream ends", raw.read(&mut b))
        .await
        .expect("a clean close");
    assert_eq!(n, 0, "nothing is sent to a refused connection");

    // Established connections are unaffected.
    c1.send(Frame::message(&b"still here"[..])).await.unwrap();
    let got = within("frame on an established link", s1_in.recv())
        .await
        .expect("arrives");
    assert_eq!(&got.body[..], b"still here");

    // Ending one frees its slot for a new peer.
    s2.abort("free a slot");
    within("closed", s2.closed()).await;
    assert_round_trip(&client, &server).await;
}
