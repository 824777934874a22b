//! Order and completeness: one sender, many senders, both directions.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use bytes::{Buf, BufMut};
use integration_tests::{connect, endpoint, establish, pair, within};
use tokio::sync::oneshot;
use transport::{CloseReason, Frame, FrameKind, Handler, Inbound, TransportConfig};

/// Checks that frame bodies are consecutive `u64` sequence numbers from 0,
/// and reports once `target` have arrived (or the first fault).
struct SeqCheck {
    next: u64,
    target: u64,
    seen: Arc<AtomicU64>,
    done: Option<oneshot::Sender<Result<u64, String>>>,
}

impl SeqCheck {
    fn new(target: u64) -> (Self, Arc<AtomicU64>, oneshot::Receiver<Result<u64, String>>) {
        let (tx, rx) = oneshot::channel();
        let seen = Arc::new(AtomicU64::new(0));
        let handler = Self {
            next: 0,
            target,
            seen: seen.clone(),
            done: Some(tx),
        };
        (handler, seen, rx)
    }

    fn report(&mut self, result: Result<u64, String>) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(result);
        }
    }
}

impl Handler for SeqCheck {
    fn on_frame(&mut self, frame: Frame) {
        self.seen.fetch_add(1, Relaxed);
        if self.done.is_none() && self.next >= self.target {
            // Already reported; anything more is counted by `seen`.
            return;
        }
        let mut body = &frame.body[..];
        if frame.kind != FrameKind::Message || body.len() != 8 {
            return self.report(Err(format!("bad frame {frame:?} at {}", self.next)));
        }
        let seq = body.get_u64();
        if seq != self.next {
            return self.report(Err(format!("expected sequence {}, got {seq}", self.next)));
        }
        self.next += 1;
        if self.next == self.target {
            self.report(Ok(self.next));
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        let next = self.next;
        self.report(Err(format!("closed after {next} frames: {reason}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_million_frames_arrive_in_order() {
    const N: u64 = 1_000_000;
    let (a, b) = pair().await;
    let (dialed, accepted) = establish(&a, &b).await;
    let (check, seen, done) = SeqCheck::new(N);
    let receiver = accepted.start(check);
    let (conn, _inbound) = dialed.start_channel(1);
    let sender = conn.sender();
    within("sending 1,000,000 frames", async {
        for i in 0..N {
            sender
                .send_with(FrameKind::Message, |b| b.put_u64(i))
                .await
                .expect("send");
        }
    })
    .await;
    let got = within("1,000,000 frames to arrive", done)
        .await
        .expect("handler reports");
    assert_eq!(got, Ok(N));
    // Close gracefully so every frame the peer will ever see has been read,
    // then check nothing beyond N arrived.
    conn.close("done").await;
    let reason = within("receiver to close", receiver.closed()).await;
    assert!(
        matches!(&reason, CloseReason::Remote(r) if r == "done"),
        "{reason}"
    );
    assert_eq!(seen.load(Relaxed), N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_senders_keep_per_sender_order() {
    const SENDERS: u8 = 8;
    const PER_SENDER: u64 = 20_000;
    let (a, b) = pair().await;
    let (conn, _c_in, _s, mut inbound) = connect(&a, &b).await;
    let tasks: Vec<_> = (0..SENDERS)
        .map(|id| {
            let sender = conn.sender();
            tokio::spawn(async move {
                for seq in 0..PER_SENDER {
                    sender
                        .send_with(FrameKind::Message, |b| {
                            b.put_u8(id);
                            b.put_u64(seq);
                        })
                        .await
                        .expect("send");
                }
            })
        })
        .collect();
    let mut next = [0u64; SENDERS as usize];
    let total = u64::from(SENDERS) * PER_SENDER;
    within("frames from 8 senders", async {
        for _ in 0..total {
            let frame = inbound.recv().await.expect("connection stays open");
            let mut body = &frame.body[..];
            assert_eq!(body.len(), 9, "body is sender id and sequence");
            let id = usize::from(body.get_u8());
            let seq = body.get_u64();
            assert_eq!(seq, next[id], "sender {id} out of order");
            next[id] += 1;
        }
    })
    .await;
    assert_eq!(next, [PER_SENDER; SENDERS as usize]);
    for t in tasks {
        within("sender task", t).await.expect("sender task ok");
    }
}

/// Receives `n` frames numbered from 0, in order.
async fn expect_sequence(inbound: &mut Inbound, n: u64) {
    for expected in 0..n {
        let frame = inbound.recv().await.expect("connection stays open");
        let seq = (&frame.body[..]).get_u64();
        assert_eq!(seq, expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_directions_at_once() {
    const N: u64 = 100_000;
    let (a, b) = pair().await;
    let (c, mut c_in, s, mut s_in) = connect(&a, &b).await;
    let send_c = c.sender();
    let send_s = s.sender();
    let send = |sender: transport::Sender| async move {
        for i in 0..N {
            sender
                .send_with(FrameKind::Message, |b| b.put_u64(i))
                .await
                .expect("send");
        }
    };
    let (sent_c, sent_s, (), ()) = within("both sides to send and receive", async {
        tokio::join!(
            tokio::spawn(send(send_c)),
            tokio::spawn(send(send_s)),
            expect_sequence(&mut c_in, N),
            expect_sequence(&mut s_in, N),
        )
    })
    .await;
    sent_c.expect("client sender task");
    sent_s.expect("server sender task");
    assert!(c.stats().frames_in >= N && s.stats().frames_in >= N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_sent_in_one_call_arrives_whole_and_in_order_through_a_small_queue() {
    // 200,000 frames of 13 bytes through a 4 KiB queue: the call fills the
    // queue hundreds of times and waits for room each time.
    const N: u64 = 200_000;
    let mut small = TransportConfig::default();
    small.set_queue_capacity(4096).unwrap();
    let a = endpoint(small).await;
    let b = endpoint(TransportConfig::default()).await;
    let (dialed, accepted) = establish(&a, &b).await;
    let (check, seen, done) = SeqCheck::new(N);
    let receiver = accepted.start(check);
    let (conn, _inbound) = dialed.start_channel(1);
    let sender = conn.sender();
    let mut seq = 0u64;
    within(
        "queueing 200,000 frames in one call",
        sender.send_many_with(FrameKind::Message, N as usize, |b| {
            b.put_u64(seq);
            seq += 1;
        }),
    )
    .await
    .expect("send_many_with");
    assert_eq!(seq, N, "the encoder ran once per frame");
    let got = within("200,000 frames to arrive", done)
        .await
        .expect("handler reports");
    assert_eq!(got, Ok(N));
    conn.close("done").await;
    within("receiver to close", receiver.closed()).await;
    assert_eq!(seen.load(Relaxed), N, "nothing beyond the burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_closed_connection_says_how_many_were_queued() {
    let (a, b) = pair().await;
    let (conn, _c_in, _s, _inbound) = connect(&a, &b).await;
    let sender = conn.sender();
    conn.close("done").await;
    let err = within(
        "send_many_with on a closed connection",
        sender.send_many_with(FrameKind::Message, 10, |b| b.put_u8(1)),
    )
    .await
    .expect_err("closed");
    assert_eq!(err.queued, 0);
    assert!(
        matches!(err.error, transport::SendFrameError::Closed),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_pushed_on_a_closed_connection_say_how_many_messages_they_carry() {
    let (a, b) = pair().await;
    let (conn, _c_in, _s, _inbound) = connect(&a, &b).await;
    let sender = conn.sender();
    conn.close("done").await;
    // Three frames after 4 bytes of room; the default count is a message
    // per Message frame, none per System frame.
    let mut frames = bytes::BytesMut::from(&[0u8; 4][..]);
    for (kind, body) in [
        (FrameKind::Message, &b"a"[..]),
        (FrameKind::System, b"s"),
        (FrameKind::Message, b"bc"),
    ] {
        transport::frame::encode_header(kind, body.len(), &mut frames);
        frames.put_slice(body);
    }
    let err = sender.push_frames(&mut frames, 4).expect_err("closed");
    assert!(
        matches!(err, transport::PushFramesError::Closed { lost: 2 }),
        "{err}"
    );
    assert_eq!(err.lost(), 2);
    // A cut batch is refused as malformed; the cut frame counts too.
    let mut cut = frames.clone();
    cut.truncate(cut.len() - 1);
    let err = sender.push_frames(&mut cut, 4).expect_err("malformed");
    assert!(
        matches!(err, transport::PushFramesError::Malformed { lost: 2, .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_in_a_burst_stops_it_after_the_frames_before_it() {
    let (a, b) = pair().await;
    let (conn, _c_in, _s, mut inbound) = connect(&a, &b).await;
    let max = TransportConfig::default().max_frame_size();
    let mut i = 0u8;
    let err = within(
        "send_many_with with an oversized third frame",
        conn.sender().send_many_with(FrameKind::Message, 5, |b| {
            let len = if i == 2 { max + 1 } else { 1 };
            b.put_bytes(i, len);
            i += 1;
        }),
    )
    .await
    .expect_err("the third frame is too large");
    assert_eq!(err.queued, 2, "{err}");
    assert!(
        matches!(err.error, transport::SendFrameError::TooLarge(_)),
        "{err}"
    );
    for expected in [0u8, 1] {
        let f = within("a frame queued before the oversized one", inbound.recv())
            .await
            .expect("open");
        assert_eq!(&f.body[..], [expected]);
    }
    // The connection is still usable, and nothing of frames 3..5 came.
    conn.sender()
        .send_with(FrameKind::Message, |b| b.put_u8(9))
        .await
        .expect("send after the refusal");
    let f = within("the next frame", inbound.recv())
        .await
        .expect("open");
    assert_eq!(&f.body[..], [9]);
}
