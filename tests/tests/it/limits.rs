//! Size limits seen through the actor API: oversized messages are refused
//! to the sender with a typed error, and the link keeps working.

use actors::{Actor, Ctx, RemoteMessage, SendError, SerializationError, SharedBytes};
use integration_tests::{actor_path, actor_system, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

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

    async fn handle(&mut self, Blob(b): Blob, _: &mut Ctx<Self>) {
        let _ = self.out.send(b.len());
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
