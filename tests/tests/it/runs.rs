//! Runs of messages (`SystemConfig::set_message_runs`): consecutive
//! messages to one remote actor travel as one envelope. Order, credit and
//! every bound hold as they do for single envelopes; a node that does not
//! announce runs never gets one; a run a peer gets wrong is a counted dead
//! letter that costs the connection nothing else. And what an actor's
//! handlers send during one poll of its task is staged and handed to the
//! link at once (`remote::link::stage`): nothing it sends afterwards overtakes
//! what was staged, and a full link is still reported as full.

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Bincode, Ctx, RemoteMessage, SendError, Serializer,
    SystemConfig, manifest_id,
};
use bytes::BytesMut;
use integration_tests::{
    actor_path, actor_system_with, envelope, frame_bytes, raw_actor_peer, within,
};
use serde::{Deserialize, Serialize};
use tokio::{io::AsyncWriteExt, net::TcpStream};
use transport::FrameKind;

use super::actors_common::{Count, Counter, total};

/// A numbered message, or a question about what arrived.
#[derive(Debug, Serialize, Deserialize)]
enum Seq {
    N(u64),
    /// Replies with (messages seen, messages out of order).
    Report(ActorRef<(u64, u64)>),
}

impl RemoteMessage for Seq {
    const MANIFEST: &'static str = "it.runs.Seq";
}

/// Checks that numbers arrive 0, 1, 2, ... with none missing; reports
/// (count, out of order) on `stopped` when it stops, if set.
#[derive(Default)]
struct SeqCheck {
    next: u64,
    wrong: u64,
    stopped: Option<tokio::sync::mpsc::UnboundedSender<(u64, u64)>>,
}

impl Actor for SeqCheck {
    type Msg = Seq;

    async fn handle(&mut self, msg: Seq, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Seq::N(n) => {
                self.wrong += u64::from(n != self.next);
                self.next = n + 1;
            }
            Seq::Report(reply) => {
                let _ = reply.tell((self.next, self.wrong));
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &actors::StopReason) {
        if let Some(tx) = &self.stopped {
            let _ = tx.send((self.next, self.wrong));
        }
    }
}

async fn report(r: &ActorRef<Seq>) -> (u64, u64) {
    within("the report", r.ask(Seq::Report, integration_tests::TIMEOUT))
        .await
        .expect("answers")
}

fn runs(on: bool) -> SystemConfig {
    let mut c = SystemConfig::default();
    c.set_message_runs(on);
    c
}

/// `a` and `b` with two sequence checkers on `b`, resolved from `a`.
async fn pair(a_runs: bool, b_runs: bool) -> (ActorSystem, ActorSystem, [ActorRef<Seq>; 2]) {
    let b = actor_system_with("b", runs(b_runs)).await;
    b.spawn_named("x", SeqCheck::default()).expect("free");
    b.spawn_named("y", SeqCheck::default()).expect("free");
    let a = actor_system_with("a", runs(a_runs)).await;
    let x = a.resolve::<Seq>(&actor_path(&b, "x")).await.expect("x");
    let y = a.resolve::<Seq>(&actor_path(&b, "y")).await.expect("y");
    (a, b, [x, y])
}

/// Bursts of lengths 1 to 300 to one recipient, then the other, then
/// single messages alternating: `n` to each, in order, sent as fast as
/// `tell` takes them (waiting for room when the link is full).
async fn send_interleaved(to: &[ActorRef<Seq>; 2], n: u64) {
    let mut next = [0u64; 2];
    let mut burst = 1;
    while next.iter().any(|&k| k < n) {
        for (i, r) in to.iter().enumerate() {
            let len = if burst % 7 == 0 { 1 } else { burst };
            for _ in 0..len {
                if next[i] == n {
                    break;
                }
                r.send(Seq::N(next[i])).await.expect("sends");
                next[i] += 1;
            }
        }
        burst = burst % 300 + 1;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn bursts_travel_in_runs_and_arrive_whole_and_in_order() {
    let (a, b, to) = pair(true, true).await;
    const N: u64 = 50_000;
    let frames_before = a.remote_stats().frames_out;
    send_interleaved(&to, N).await;
    for r in &to {
        assert_eq!(report(r).await, (N, 0), "all of them, in order");
    }
    let frames = a.remote_stats().frames_out - frames_before;
    // Runs: far fewer frames than messages (each burst shares frames).
    assert!(
        frames * 10 < 2 * N,
        "{frames} frames for {} messages",
        2 * N
    );
    assert_eq!(b.dead_letters(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_without_runs_gets_single_envelopes_and_loses_nothing() {
    // b does not announce runs, as a node before them: a sends it each
    // message in its own envelope (b would count a run as malformed).
    let (a, b, to) = pair(true, false).await;
    const N: u64 = 5_000;
    let frames_before = a.remote_stats().frames_out;
    send_interleaved(&to, N).await;
    for r in &to {
        assert_eq!(report(r).await, (N, 0));
    }
    assert!(a.remote_stats().frames_out - frames_before >= 2 * N);
    assert_eq!(b.dead_letters(), 0, "no run reached b");
    // The other way round too: a node without runs sends none.
    let (c, d, to) = pair(false, true).await;
    let frames_before = c.remote_stats().frames_out;
    send_interleaved(&to, N).await;
    for r in &to {
        assert_eq!(report(r).await, (N, 0));
    }
    assert!(c.remote_stats().frames_out - frames_before >= 2 * N);
    for s in [a, b, c, d] {
        s.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_comes_back_for_runs_under_a_small_window() {
    // A window of 1 KiB: the sender waits for credit every few messages.
    // Credit returned for runs must match what their messages spent, or
    // `send` waits for ever.
    let mut config = runs(true);
    config.set_recipient_window(1024).unwrap();
    let b = actor_system_with("b", config.clone()).await;
    b.spawn_named("x", SeqCheck::default()).expect("free");
    let a = actor_system_with("a", config).await;
    let x = a.resolve::<Seq>(&actor_path(&b, "x")).await.expect("x");
    const N: u64 = 100_000;
    within("all sends", async {
        for i in 0..N {
            x.send(Seq::N(i)).await.expect("sends");
        }
    })
    .await;
    assert_eq!(report(&x).await, (N, 0));
    a.shutdown().await;
    b.shutdown().await;
}

fn encoded(msg: &Count) -> Vec<u8> {
    let mut b = BytesMut::new();
    Bincode.serialize(msg, &mut b).expect("encodes");
    b.to_vec()
}

/// A run envelope's body: flags 0x20, `id`, `manifest`, then `records`
/// as they are (the library's own writer).
fn run_envelope(id: u32, manifest: u32, records: &[u8]) -> Vec<u8> {
    actors::wire::run(id, manifest, records)
}

/// Well-formed records of `msgs`.
fn records(msgs: &[Count]) -> Vec<u8> {
    let mut b = Vec::new();
    for m in msgs {
        let e = encoded(m);
        b.extend_from_slice(&(e.len() as u32).to_le_bytes());
        b.extend_from_slice(&e);
    }
    b
}

/// Node `b` (taking runs if `b_runs`) with a counter, and a raw peer on
/// which an ordinary envelope defined id 1 as the counter (adding 1).
async fn counter_and_raw_peer(b_runs: bool) -> (ActorSystem, ActorRef<Count>, TcpStream) {
    let b = actor_system_with("b", runs(b_runs)).await;
    let counter = b.spawn_named("counter", Counter::default()).expect("free");
    let (mut raw, _) = raw_actor_peer(&b).await;
    let define = envelope(
        1,
        Some("/user/counter"),
        count_manifest(),
        &encoded(&Count::Add(1)),
    );
    send_body(&mut raw, &define).await;
    (b, counter, raw)
}

/// The manifest id of `Count`.
fn count_manifest() -> u32 {
    manifest_id("it.Count")
}

/// `body` as one `Message` frame on `raw`.
async fn send_body(raw: &mut TcpStream, body: &[u8]) {
    raw.write_all(&frame_bytes(FrameKind::Message, body))
        .await
        .expect("write");
}

/// Waits until `counter` has summed `n`.
async fn until_total(counter: &ActorRef<Count>, n: u64) {
    within("the counter's total", async {
        while total(counter).await != n {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_a_peer_gets_wrong_is_a_dead_letter_and_the_connection_goes_on() {
    let (b, counter, mut raw) = counter_and_raw_peer(true).await;
    let count = count_manifest();
    let good = records(&[Count::Add(10), Count::Add(100), Count::Add(1000)]);
    let one = records(&[Count::Add(5)]);
    let mut huge = one.clone();
    huge[..4].copy_from_slice(&0x8000_0001u32.to_le_bytes());
    let mut with_define = run_envelope(1, count, &good);
    with_define[0] |= 1;
    let bad: [(&str, Vec<u8>); 6] = [
        ("no records", run_envelope(1, count, &[])),
        (
            "a cut length",
            run_envelope(1, count, &[&one[..], &[1, 0]].concat()),
        ),
        (
            "a record past the end",
            run_envelope(1, count, &one[..one.len() - 1]),
        ),
        ("a length with the top bit", run_envelope(1, count, &huge)),
        ("another flag beside the run's", with_define),
        ("an undefined id", run_envelope(9, count, &good)),
    ];
    let dead_before = b.dead_letters();
    for (_, body) in &bad {
        send_body(&mut raw, body).await;
    }
    // A good run on the same connection is delivered whole, after them.
    send_body(&mut raw, &run_envelope(1, count, &good)).await;
    until_total(&counter, 1111).await;
    assert_eq!(b.dead_letters() - dead_before, bad.len() as u64);
    // A run of a type the actor does not take: each message a dead letter.
    let other = manifest_id("it.runs.Seq");
    send_body(&mut raw, &run_envelope(1, other, &good)).await;
    integration_tests::eventually("three more dead letters", || {
        b.dead_letters() - dead_before == bad.len() as u64 + 3
    })
    .await;
    assert_eq!(total(&counter).await, 1111);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_did_not_announce_runs_refuses_one_as_malformed() {
    let (b, counter, mut raw) = counter_and_raw_peer(false).await;
    let count = count_manifest();
    let dead_before = b.dead_letters();
    send_body(
        &mut raw,
        &run_envelope(1, count, &records(&[Count::Add(10)])),
    )
    .await;
    send_body(
        &mut raw,
        &envelope(1, None, count, &encoded(&Count::Add(100))),
    )
    .await;
    until_total(&counter, 101).await;
    assert_eq!(b.dead_letters() - dead_before, 1);
    b.shutdown().await;
}

/// Sends from inside its handler: bursts to `x` (with `tell`, never
/// waiting), and every 97 messages to `y` an ask of `y`'s report in the
/// middle of it, whose answer must count every message sent to `y` before
/// the ask. Reports (messages sent to y, asks whose count was short).
struct Blaster {
    x: ActorRef<Seq>,
    y: ActorRef<Seq>,
    done: tokio::sync::mpsc::UnboundedSender<(u64, u64)>,
}

impl Actor for Blaster {
    type Msg = u64;

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) -> ActorResult {
        let (mut to_y, mut short) = (0, 0);
        for i in 0..n {
            self.x.send(Seq::N(i)).await?;
            if i % 97 == 0 {
                self.y.tell(Seq::N(to_y))?;
                to_y += 1;
            }
            if i % 1000 == 999 {
                let (seen, wrong) = self.y.ask(Seq::Report, integration_tests::TIMEOUT).await?;
                short += u64::from(seen != to_y || wrong != 0);
            }
        }
        let _ = self.done.send((to_y, short));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_handler_sent_is_not_overtaken_by_what_it_sends_after() {
    let (a, b, [x, y]) = pair(true, true).await;
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let blaster = a.spawn(Blaster {
        x: x.clone(),
        y: y.clone(),
        done,
    });
    const N: u64 = 30_000;
    blaster.tell(N).expect("room");
    let (to_y, short) = within("the blaster", finished.recv())
        .await
        .expect("reports");
    assert_eq!(short, 0, "an ask overtook messages sent before it");
    assert_eq!(report(&x).await, (N, 0));
    assert_eq!(report(&y).await, (to_y, 0));
    a.shutdown().await;
    b.shutdown().await;
}

/// Tells without ever waiting until the link reports itself full, then
/// says how many it got in.
struct Flooder {
    to: ActorRef<Seq>,
    done: tokio::sync::mpsc::UnboundedSender<Option<u64>>,
}

impl Actor for Flooder {
    type Msg = u64;

    async fn handle(&mut self, most: u64, _: &mut Ctx<Self>) -> ActorResult {
        for i in 0..most {
            match self.to.tell(Seq::N(i)) {
                Ok(()) => {}
                Err(SendError::LinkFull(_)) => {
                    let _ = self.done.send(Some(i));
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let _ = self.done.send(None);
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_handler_that_never_waits_still_finds_the_link_full() {
    // One thread: the link's writer cannot run while the handler loops,
    // so the queue fills. Staged messages must not hide that: the queue
    // may exceed its 64 KiB by one stage (64 KiB), no more.
    let mut config = runs(true);
    config
        .transport_mut()
        .set_queue_capacity(64 * 1024)
        .unwrap();
    config.set_recipient_window(1 << 30).unwrap();
    config.set_mailbox_capacity(1 << 20).unwrap();
    let b = actor_system_with("b", config.clone()).await;
    b.spawn_named("x", SeqCheck::default()).expect("free");
    let a = actor_system_with("a", config).await;
    let x = a.resolve::<Seq>(&actor_path(&b, "x")).await.expect("x");
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let flooder = a.spawn(Flooder {
        to: x.clone(),
        done,
    });
    flooder.tell(1_000_000).expect("room");
    let accepted = within("the flooder", finished.recv())
        .await
        .expect("reports")
        .expect("the link was reported full");
    // 8 to 14 bytes a message in runs: 64 KiB of queue and one 64 KiB
    // stage hold under 17,000 of them (a stage that ignored a full queue
    // would take all 1,000,000).
    assert!(
        accepted < 20_000,
        "{accepted} accepted before the link was full"
    );
    // Every accepted message arrives, in order.
    within("all accepted arrive", async {
        while report(&x).await != (accepted, 0) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Sends `n` messages and then a graceful stop, from one handler call.
struct SendThenStop(ActorRef<Seq>);

impl Actor for SendThenStop {
    type Msg = u64;

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) -> ActorResult {
        for i in 0..n {
            self.0.tell(Seq::N(i))?;
        }
        self.0.stop_after_queued()?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_sent_after_staged_messages_comes_after_them() {
    let (report, mut words) = tokio::sync::mpsc::unbounded_channel();
    let b = actor_system_with("b", runs(true)).await;
    let x = SeqCheck {
        stopped: Some(report),
        ..SeqCheck::default()
    };
    b.spawn_named("x", x).expect("free");
    let a = actor_system_with("a", runs(true)).await;
    let x = a.resolve::<Seq>(&actor_path(&b, "x")).await.expect("x");
    const N: u64 = 2_000;
    a.spawn(SendThenStop(x)).tell(N).expect("room");
    let last = within("x's last words", words.recv()).await.expect("stops");
    assert_eq!(last, (N, 0), "every message before the stop, in order");
    a.shutdown().await;
    b.shutdown().await;
}

/// Sends `n` numbered messages with `send().await` from one handler call,
/// then says so.
struct Sender(ActorRef<Seq>, tokio::sync::mpsc::UnboundedSender<()>);

impl Actor for Sender {
    type Msg = u64;

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) -> ActorResult {
        for i in 0..n {
            self.0.send(Seq::N(i)).await?;
        }
        let _ = self.1.send(());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_waiting_for_credit_hands_over_what_it_staged() {
    // A 1 KiB window: the handler's `send` waits for credit every few
    // dozen messages, and the credit comes back only for messages that
    // left, so the stage must go to the link when the handler waits.
    let mut config = runs(true);
    config.set_recipient_window(1024).unwrap();
    let b = actor_system_with("b", config.clone()).await;
    b.spawn_named("x", SeqCheck::default()).expect("free");
    let a = actor_system_with("a", config).await;
    let x = a.resolve::<Seq>(&actor_path(&b, "x")).await.expect("x");
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    const N: u64 = 50_000;
    a.spawn(Sender(x.clone(), done)).tell(N).expect("room");
    within("all sends", finished.recv()).await.expect("done");
    // The handler signalled before its poll ended, so its last staged
    // messages leave when the poll ends; the report is asked by another
    // sender, which nothing orders after them: ask until they are in.
    within("every message arrives", async {
        loop {
            let (got, gaps) = report(&x).await;
            assert_eq!(gaps, 0);
            if got == N {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Tiny run records (a 4-byte length and a message of a few bytes) decode
/// into values several times their size; an actor's batch used to be
/// decoded whole, so 32 MiB of them in 8 MiB frames grew a node by about
/// 224 MiB. Decoded in slices bounded by bytes, the node holds the wire
/// bytes and one slice. Measured as this test process's resident set
/// (other tests running meanwhile add noise, hence the wide slack: the
/// unsliced decode grew it by several times the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_records_are_decoded_in_slices_bounded_by_bytes() {
    const MIB: u64 = 1024 * 1024;
    const FRAMES: u64 = 4;
    /// What the node may grow by: the wire bytes it holds (read buffers,
    /// run buffers, mailbox) and allocator slack.
    const MAX_GROWTH: u64 = 128 * MIB;
    let (_b, counter, mut raw) = counter_and_raw_peer(true).await;
    let one = records(&[Count::Add(1)]);
    // One frame's worth: just under the 8 MiB frame limit.
    let per_frame = (8 * MIB as usize - 64) / one.len();
    let body = run_envelope(1, count_manifest(), &one.repeat(per_frame));
    let before = integration_tests::rss_of(std::process::id());
    for _ in 0..FRAMES {
        send_body(&mut raw, &body).await;
    }
    until_total(&counter, 1 + FRAMES * per_frame as u64).await;
    let after = integration_tests::rss_of(std::process::id());
    let grew = after.saturating_sub(before);
    println!(
        "{} records of {} bytes: process RSS {} -> {} MiB",
        FRAMES * per_frame as u64,
        one.len(),
        before / MIB,
        after / MIB
    );
    assert!(grew < MAX_GROWTH, "grew by {} MiB", grew / MIB);
}
