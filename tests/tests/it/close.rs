//! Graceful close and reconnect.

use bytes::{Buf, BufMut};
use integration_tests::{assert_round_trip, connect, pair, within};
use transport::{CloseReason, FrameKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_delivers_queued_frames_then_reconnect_works() {
    const N: u64 = 10_000;
    let (a, b) = pair().await;
    let (c, _c_in, s, mut s_in) = connect(&a, &b).await;
    // Queue everything without waiting for the writer, so most frames are
    // still queued when close starts.
    let sender = c.sender();
    for i in 0..N {
        if let Err(e) = sender.try_send_with(FrameKind::Message, |b| b.put_u64(i)) {
            panic!("queue takes {N} small frames: {e}");
        }
    }
    let (local, ()) = within("close and drain", async {
        tokio::join!(c.close("bye"), async {
            for expected in 0..N {
                let frame = s_in.recv().await.expect("queued frame before close");
                assert_eq!((&frame.body[..]).get_u64(), expected);
            }
            assert!(s_in.recv().await.is_none(), "inbound ends after close");
        })
    })
    .await;
    assert!(
        matches!(&local, CloseReason::Local(r) if r == "bye"),
        "{local}"
    );
    let remote = within("peer side closed", s.closed()).await;
    assert!(
        matches!(&remote, CloseReason::Remote(r) if r == "bye"),
        "{remote}"
    );
    assert!(matches!(s_in.close_reason(), Some(CloseReason::Remote(r)) if r == "bye"));
    assert_eq!(c.stats().frames_dropped, 0);
    assert!(c.is_closed() && s.is_closed());
    assert!(sender.is_closed());
    assert!(
        sender
            .send(transport::Frame::message(&b"late"[..]))
            .await
            .is_err()
    );
    // The same two endpoints connect again.
    assert_round_trip(&a, &b).await;
}
