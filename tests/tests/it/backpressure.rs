//! Bounded queues: a stalled peer stops the sender, oversized frames are
//! refused without harming the connection.

use std::time::Duration;

use bytes::Bytes;
use integration_tests::{connect, endpoint, raw_handshake_as, within};
use tokio::{io::AsyncReadExt, net::TcpSocket};
use transport::{
    Frame, FrameError, FrameKind, SendFrameError, TransportConfig, TrySendFrameError, auth::Role,
};

/// How long a send must stay pending to count as blocked. A stalled
/// writer never frees room, so any value works; short keeps the test fast.
const BLOCKED: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_peer_fills_the_queue_then_send_blocks() {
    const CAPACITY: usize = 64 * 1024;
    /// Upper bound on bytes pushed before the queue must be full: kernel
    /// buffers on both sides are a few hundred KiB at most here.
    const BUDGET: usize = 256 * 1024 * 1024;
    let mut config = TransportConfig::default();
    config
        .set_queue_capacity(CAPACITY)
        .unwrap()
        .set_send_buffer_size(Some(16 * 1024))
        .unwrap();
    let node = endpoint(config).await;
    // The peer: a raw socket that completes the handshake and never reads.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    socket.bind(integration_tests::loopback()).unwrap();
    let listener = socket.listen(1).unwrap();
    let (dialed, raw) = within("connect to raw peer", async {
        tokio::join!(node.connect(listener.local_addr().unwrap()), async {
            let (mut raw, _) = listener.accept().await.unwrap();
            raw_handshake_as(&mut raw, node.uid(), Role::Listener).await;
            raw
        })
    })
    .await;
    let (conn, _inbound) = dialed.expect("handshake with raw peer").start_channel(4);
    let sender = conn.sender();
    let body = Bytes::from(vec![7u8; 1000]);
    let frame_len = Frame::message(body.clone()).encoded_len();

    // Fill until a send stays pending: kernel buffers, then the queue.
    let mut pushed = 0;
    loop {
        assert!(pushed < BUDGET, "queue never filled after {pushed} bytes");
        match sender.try_send(Frame::message(body.clone())) {
            Ok(()) => pushed += frame_len,
            Err(TrySendFrameError::Full(_)) => {
                match tokio::time::timeout(BLOCKED, sender.send(Frame::message(body.clone()))).await
                {
                    Ok(r) => {
                        r.expect("send");
                        pushed += frame_len;
                    }
                    Err(_) => break,
                }
            }
            Err(e) => panic!("unexpected {e}"),
        }
        assert!(sender.queued_bytes() <= CAPACITY + frame_len);
    }
    // Now stalled: try_send hands the very frame back, send stays pending,
    // and the queue holds at most its capacity plus one frame.
    let frame = Frame {
        kind: FrameKind::System,
        body: Bytes::from_static(b"returned"),
    };
    match sender.try_send(frame.clone()) {
        Err(TrySendFrameError::Full(back)) => assert_eq!(back, frame),
        other => panic!("expected Full, got {other:?}"),
    }
    let queued = sender.queued_bytes();
    assert!(
        queued >= CAPACITY && queued <= CAPACITY + frame_len,
        "queued {queued} bytes, capacity {CAPACITY}"
    );
    let pending = sender.send(Frame::message(body.clone()));
    tokio::pin!(pending);
    assert!(
        tokio::time::timeout(BLOCKED, pending.as_mut())
            .await
            .is_err(),
        "send must wait while the peer does not read"
    );
    assert_eq!(sender.queued_bytes(), queued);

    // The peer starts reading: the waiting send completes.
    let drain = tokio::spawn(async move {
        let mut raw = raw;
        let mut buf = vec![0u8; 64 * 1024];
        while raw.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    });
    within("blocked send to complete once the peer reads", pending)
        .await
        .expect("send");
    conn.abort("test over");
    within("drain task", drain).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_send_is_refused_and_connection_survives() {
    const MAX: usize = 1024;
    let mut config = TransportConfig::default();
    config.set_max_frame_size(MAX).unwrap();
    let a = endpoint(config.clone()).await;
    let b = endpoint(config).await;
    let (c, _c_in, _s, mut s_in) = connect(&a, &b).await;
    let big = Frame::message(vec![1u8; MAX + 1]);

    match c.try_send(big.clone()) {
        Err(TrySendFrameError::TooLarge(e)) => {
            assert_eq!(
                e,
                FrameError::TooLarge {
                    len: 1025,
                    max: 1024
                }
            );
            assert_eq!(e.to_string(), "frame length 1025 exceeds limit 1024");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    match c.send(big).await {
        Err(SendFrameError::TooLarge(e)) => {
            assert_eq!(e.to_string(), "frame length 1025 exceeds limit 1024");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // An encoder that writes too much is rolled back, leaving the queue as
    // it was.
    let sender = c.sender();
    let err = sender
        .send_with(FrameKind::Message, |b| b.extend_from_slice(&[2u8; 4000]))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        SendFrameError::TooLarge(FrameError::TooLarge {
            len: 4000,
            max: MAX
        })
    ));
    // The connection still carries frames, the largest legal one included.
    c.send(Frame::message(vec![3u8; MAX])).await.unwrap();
    c.send(Frame::message(&b"after"[..])).await.unwrap();
    let first = within("max-size frame", s_in.recv()).await.unwrap();
    assert_eq!(first.body.len(), MAX);
    assert!(first.body.iter().all(|&b| b == 3));
    let second = within("small frame", s_in.recv()).await.unwrap();
    assert_eq!(&second.body[..], b"after");
    assert!(!c.is_closed());
}
