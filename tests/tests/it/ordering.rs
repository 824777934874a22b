//! Order and completeness: one sender, many senders, both directions.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use bytes::{Buf, BufMut};
use integration_tests::{connect, establish, pair, within};
use tokio::sync::oneshot;
use transport::{CloseReason, Frame, FrameKind, Handler, Inbound};

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
