//! The runtime an actor builds on: timers in `Ctx`, the graceful stop,
//! and how full mailboxes and full links are told apart and waited on.

use std::time::Duration;

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Ctx, RemoteMessage, SendError, StopError,
    StopReason, SystemConfig, TimerKey,
};
use integration_tests::{actor_path, actor_system_with, eventually, proxy::Mode, within};

use super::actors_common::Collector;
use serde::{Deserialize, Serialize};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

/// What a [`Probe`] is told.
#[derive(Debug)]
enum P {
    /// Arm a one-shot timer that sends `Tag(n)` after the delay.
    Once(Duration, u32),
    /// Arm a repeated timer that sends `Tag(n)` every interval.
    Every(Duration, u32),
    /// Cancel the last timer armed.
    Cancel,
    /// Say so on the first channel, then wait for the second.
    Hold(oneshot::Sender<()>, oneshot::Receiver<()>),
    /// Logged as `(ms since the probe started, n)`.
    Tag(u32),
    /// Replies with `n`.
    Echo(ActorRef<u32>, u32),
}

/// Arms and cancels timers as told; logs each `Tag` with its time.
struct Probe {
    start: Instant,
    last: Option<TimerKey>,
    log: mpsc::UnboundedSender<(u64, u32)>,
}

impl Actor for Probe {
    type Msg = P;

    async fn handle(&mut self, msg: P, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            P::Once(d, n) => self.last = Some(ctx.schedule_once(d, P::Tag(n))),
            P::Every(d, n) => {
                // The closure owns a clone of the log: it is dropped (and
                // the log can close) only when the timer is.
                let log = self.log.clone();
                self.last = Some(ctx.schedule_repeatedly(d, move || {
                    let _ = &log;
                    P::Tag(n)
                }));
            }
            P::Cancel => {
                let key = self.last.take().expect("a timer was armed");
                assert!(ctx.cancel_timer(key), "the timer was still set");
            }
            P::Hold(entered, gate) => {
                let _ = entered.send(());
                let _ = gate.await;
            }
            P::Echo(reply, n) => {
                let _ = reply.tell(n);
            }
            P::Tag(n) => {
                let ms = self.start.elapsed().as_millis() as u64;
                let _ = self.log.send((ms, n));
            }
        }
        Ok(())
    }
}

fn probe(sys: &ActorSystem) -> (ActorRef<P>, mpsc::UnboundedReceiver<(u64, u32)>) {
    let (log, rx) = mpsc::unbounded_channel();
    let probe = sys.spawn(Probe {
        start: Instant::now(),
        last: None,
        log,
    });
    (probe, rx)
}

/// Holds `actor` inside a message until the returned sender fires.
async fn hold(actor: &ActorRef<P>) -> oneshot::Sender<()> {
    let (entered_tx, entered) = oneshot::channel();
    let (open, gate) = oneshot::channel();
    actor.tell(P::Hold(entered_tx, gate)).expect("room");
    within("the actor holds", entered).await.expect("it runs");
    open
}

const S: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn timers_fire_on_a_paused_clock_once_and_repeatedly() {
    let sys = ActorSystem::local("timers").expect("valid name");
    let (probe, mut log) = probe(&sys);
    probe.tell(P::Once(10 * S, 0)).expect("room");
    probe.tell(P::Every(3 * S, 1)).expect("room");
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(within("a tick", log.recv()).await.expect("the probe runs"));
    }
    // On schedule, to the millisecond (the clock only moves when every
    // task waits), and the one-shot timer fired once among the ticks.
    assert_eq!(
        seen,
        [(3000, 1), (6000, 1), (9000, 1), (10_000, 0), (12_000, 1)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_timer_sends_nothing_even_if_already_queued() {
    let sys = ActorSystem::local("cancel").expect("valid name");
    let (probe, mut log) = probe(&sys);
    probe.tell(P::Once(S, 7)).expect("room");
    let open = hold(&probe).await;
    // Due while the probe is busy: queued when it finishes `Hold`,
    // behind the `Cancel` that arrived meanwhile.
    tokio::time::advance(2 * S).await;
    probe.tell(P::Cancel).expect("room");
    probe.tell(P::Tag(8)).expect("room");
    open.send(()).expect("the probe waits");
    // Once `Tag(8)`, told after, is logged, the timer's message has been
    // taken too (it was queued before `Tag(8)` was handled) and dropped.
    assert_eq!(within("tag", log.recv()).await.map(|(_, n)| n), Some(8));
    probe.tell(P::Tag(9)).expect("room");
    assert_eq!(within("tag", log.recv()).await.map(|(_, n)| n), Some(9));
}

#[tokio::test(start_paused = true)]
async fn a_timer_message_queues_behind_what_arrived_before_it() {
    let sys = ActorSystem::local("order").expect("valid name");
    let (probe, mut log) = probe(&sys);
    // Idle at the deadline: queued then, between what came before and
    // after.
    probe.tell(P::Once(S, 0)).expect("room");
    // Armed at 0 ms: the probe has handled `Once` when it answers.
    let armed = probe.ask(|r| P::Echo(r, 0), integration_tests::TIMEOUT);
    assert_eq!(within("the probe", armed).await, Ok(0));
    tokio::time::advance(S / 2).await;
    probe.tell(P::Tag(1)).expect("room");
    assert_eq!(within("tag", log.recv()).await, Some((500, 1)));
    assert_eq!(within("timer", log.recv()).await, Some((1000, 0)));
    probe.tell(P::Tag(2)).expect("room");
    assert_eq!(within("tag", log.recv()).await, Some((1000, 2)));
    // Busy at the deadline: queued behind `Tag(3)`, which arrived before
    // it was due, not handled ahead of it.
    probe.tell(P::Once(S, 4)).expect("room");
    let open = hold(&probe).await;
    probe.tell(P::Tag(3)).expect("room");
    tokio::time::advance(2 * S).await;
    open.send(()).expect("the probe waits");
    assert_eq!(within("tag", log.recv()).await, Some((3000, 3)));
    assert_eq!(within("timer", log.recv()).await, Some((3000, 4)));
}

#[tokio::test(start_paused = true)]
async fn a_slow_actor_holds_at_most_one_message_of_a_repeated_timer() {
    let sys = ActorSystem::local("slow").expect("valid name");
    let (probe, mut log) = probe(&sys);
    probe.tell(P::Every(S, 1)).expect("room");
    // Two messages that each take 1.5 intervals, back to back.
    let open1 = hold(&probe).await;
    let (entered_tx, entered) = oneshot::channel();
    let (open2, gate) = oneshot::channel();
    probe.tell(P::Hold(entered_tx, gate)).expect("room");
    tokio::time::advance(3 * S / 2).await;
    // The tick due at 1 s is queued behind the second hold.
    open1.send(()).expect("the probe waits");
    within("the second hold", entered).await.expect("it runs");
    tokio::time::advance(3 * S / 2).await;
    // The tick due at 2 s is skipped (the one due at 1 s still waits), and
    // the next is an interval from now.
    open2.send(()).expect("the probe waits");
    assert_eq!(within("tick", log.recv()).await, Some((3000, 1)));
    assert_eq!(within("tick", log.recv()).await, Some((4000, 1)));
}

#[tokio::test(start_paused = true)]
async fn timers_die_with_their_actor() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let sys = ActorSystem::local("die").expect("valid name");
    let before = metrics.num_alive_tasks();
    let (probe, mut log) = probe(&sys);
    probe.tell(P::Every(S, 1)).expect("room");
    probe.tell(P::Once(5 * S, 2)).expect("room");
    assert_eq!(within("a tick", log.recv()).await.map(|(_, n)| n), Some(1));
    probe.stop();
    within("the probe stops", probe.watch()).await;
    // The log closes: the actor and its timers (whose closure holds a
    // clone of the log) are dropped, and nothing more was sent.
    assert_eq!(within("the log closes", log.recv()).await, None);
    // No task per timer, and none left behind.
    eventually("the actor's tasks end", || {
        metrics.num_alive_tasks() == before
    })
    .await;
}

/// Adds what it is told; reports its total when it stops.
struct Summer {
    total: u64,
    done: Option<oneshot::Sender<u64>>,
    entered: Option<oneshot::Sender<()>>,
    gate: Option<oneshot::Receiver<()>>,
}

impl Actor for Summer {
    type Msg = u64;

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) -> ActorResult {
        // The first message holds the actor until the gate opens.
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            let _ = self.gate.take().expect("taken with `entered`").await;
        }
        self.total += n;
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        if let Some(done) = self.done.take() {
            let _ = done.send(self.total);
        }
    }
}

/// A [`Summer`] in a system with mailboxes of `cap`, held inside its first
/// message (`0`).
async fn held_summer(
    cap: usize,
) -> (
    ActorSystem,
    ActorRef<u64>,
    oneshot::Sender<()>,
    oneshot::Receiver<u64>,
) {
    let mut config = SystemConfig::default();
    config.set_mailbox_capacity(cap).unwrap();
    let sys = ActorSystem::with_config("graceful", None, config)
        .await
        .expect("local system");
    let (entered_tx, entered) = oneshot::channel();
    let (open, gate) = oneshot::channel();
    let (done, total) = oneshot::channel();
    let summer = sys.spawn(Summer {
        total: 0,
        done: Some(done),
        entered: Some(entered_tx),
        gate: Some(gate),
    });
    summer.tell(0).expect("room");
    within("the summer holds", entered).await.expect("it runs");
    (sys, summer, open, total)
}

#[tokio::test]
async fn stop_after_queued_handles_the_queued_messages_first() {
    let (sys, summer, open, total) = held_summer(8).await;
    for _ in 0..8 {
        summer.tell(1).expect("under capacity");
    }
    assert!(matches!(summer.tell(1), Err(SendError::MailboxFull(1))));
    // Not refused for a full mailbox.
    summer.stop_after_queued().expect("the actor runs");
    let dead_before = sys.dead_letters();
    open.send(()).expect("the summer waits");
    assert_eq!(within("the total", total).await, Ok(8));
    let t = within("terminated", summer.watch()).await;
    assert_eq!(t.reason, StopReason::Stopped);
    assert_eq!(sys.dead_letters(), dead_before);
    assert_eq!(summer.stop_after_queued(), Err(StopError::ActorGone));
}

#[tokio::test]
async fn messages_behind_a_graceful_stop_are_dead_letters_and_stop_jumps_the_queue() {
    let (sys, summer, open, total) = held_summer(8).await;
    for _ in 0..4 {
        summer.tell(1).expect("under capacity");
    }
    summer.stop_after_queued().expect("the actor runs");
    summer
        .tell(100)
        .expect("the mailbox is open until the actor reaches the stop");
    let dead_before = sys.dead_letters();
    summer.stop();
    open.send(()).expect("the summer waits");
    // The immediate stop came first: none of the queued messages ran, and
    // all five (four before the graceful stop, one after) are dead letters.
    assert_eq!(within("the total", total).await, Ok(0));
    within("terminated", summer.watch()).await;
    assert_eq!(sys.dead_letters(), dead_before + 5);
}

#[tokio::test]
async fn a_message_behind_a_graceful_stop_is_a_dead_letter_and_those_before_it_run() {
    let (sys, summer, open, total) = held_summer(8).await;
    for _ in 0..4 {
        summer.tell(1).expect("under capacity");
    }
    summer.stop_after_queued().expect("the actor runs");
    summer
        .tell(100)
        .expect("the mailbox is open until the actor reaches the stop");
    let dead_before = sys.dead_letters();
    open.send(()).expect("the summer waits");
    // The four before the stop ran (an immediate stop would run none);
    // the one behind it did not (no stop would run it) and is counted.
    assert_eq!(within("the total", total).await, Ok(4));
    within("terminated", summer.watch()).await;
    assert_eq!(sys.dead_letters(), dead_before + 1);
}

/// A local system with mailboxes of `cap` and a [`Probe`] held inside a
/// message, its mailbox filled to `cap`.
async fn full_probe(cap: usize) -> (ActorSystem, ActorRef<P>, oneshot::Sender<()>) {
    let mut config = SystemConfig::default();
    config.set_mailbox_capacity(cap).unwrap();
    let sys = ActorSystem::with_config("full", None, config)
        .await
        .expect("local system");
    let (probe, _log) = probe(&sys);
    let open = hold(&probe).await;
    for n in 0..cap as u32 {
        probe.tell(P::Tag(n)).expect("under capacity");
    }
    assert!(matches!(
        probe.tell(P::Tag(99)),
        Err(SendError::MailboxFull(_))
    ));
    (sys, probe, open)
}

#[tokio::test]
async fn ask_on_a_full_mailbox_waits_for_room() {
    let (_sys, probe, open) = full_probe(2).await;
    let asked = tokio::spawn({
        let probe = probe.clone();
        async move {
            probe
                .ask(|r| P::Echo(r, 5), integration_tests::TIMEOUT)
                .await
        }
    });
    open.send(()).expect("the probe waits");
    assert_eq!(within("the answer", asked).await.expect("no panic"), Ok(5));
}

#[tokio::test(start_paused = true)]
async fn ask_on_a_mailbox_full_for_the_whole_timeout_fails_at_the_timeout() {
    let (_sys, probe, _open) = full_probe(2).await;
    let t0 = Instant::now();
    let r = probe.ask(|r| P::Echo(r, 5), 3 * S).await;
    assert_eq!(r, Err(AskError::MailboxFull));
    assert_eq!(t0.elapsed(), 3 * S);
}

#[tokio::test(start_paused = true)]
async fn ask_fails_at_once_on_a_stopped_actor_even_while_waiting_for_room() {
    let (sys, probe, open) = full_probe(2).await;
    let t0 = Instant::now();
    let asked = tokio::spawn({
        let probe = probe.clone();
        async move { probe.ask(|r| P::Echo(r, 5), 10 * S).await }
    });
    probe.stop();
    open.send(()).expect("the probe waits");
    assert_eq!(
        within("the ask", asked).await.expect("no panic"),
        Err(AskError::ActorGone)
    );
    assert!(t0.elapsed() < 10 * S, "waited {:?}", t0.elapsed());
    // And at once on one already stopped.
    let (stopped, _log) = probe_stopped(&sys).await;
    let t0 = Instant::now();
    let r = stopped.ask(|r| P::Echo(r, 5), 10 * S).await;
    assert_eq!(r, Err(AskError::ActorGone));
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

async fn probe_stopped(sys: &ActorSystem) -> (ActorRef<P>, mpsc::UnboundedReceiver<(u64, u32)>) {
    let (p, log) = probe(sys);
    p.stop();
    within("stopped", p.watch()).await;
    (p, log)
}

/// A remote actor's messages.
#[derive(Debug, Serialize, Deserialize)]
enum Job {
    /// Counted; the first one holds the actor until its gate opens.
    Work(u64),
    /// Replies with the count.
    Count(ActorRef<u64>),
}

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "it.runtime.Job";
}

/// Counts `Work`; held inside the first one until `gate` opens. Reports
/// its count on `report` when it stops.
struct Gate {
    gate: Option<oneshot::Receiver<()>>,
    count: u64,
    report: Option<oneshot::Sender<u64>>,
}

impl Actor for Gate {
    type Msg = Job;

    async fn handle(&mut self, msg: Job, _: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Job::Work(_) => {
                if let Some(gate) = self.gate.take() {
                    let _ = gate.await;
                }
                self.count += 1;
            }
            Job::Count(reply) => {
                let _ = reply.tell(self.count);
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        if let Some(report) = self.report.take() {
            let _ = report.send(self.count);
        }
    }
}

/// Tells `Work` until a tell is refused; returns how many were taken and
/// the refusal.
async fn tell_until_refused(remote: &ActorRef<Job>) -> (u64, SendError<Job>) {
    let mut sent = 0u64;
    within("a tell is refused", async {
        loop {
            match remote.tell(Job::Work(sent)) {
                Ok(()) => sent += 1,
                Err(e) => return (sent, e),
            }
            if sent.is_multiple_of(64) {
                tokio::task::yield_now().await;
            }
        }
    })
    .await
}

/// Nodes `a` and `b` with a small recipient window, `b` holding a [`Gate`]
/// that `a` has a ref to and that is held in its first message.
async fn gated_pair() -> (ActorSystem, ActorSystem, ActorRef<Job>, oneshot::Sender<()>) {
    let mut config = SystemConfig::default();
    config.set_recipient_window(16 * 1024).unwrap();
    let b = actor_system_with("b", config.clone()).await;
    let (open, gate) = oneshot::channel();
    b.spawn_named(
        "gate",
        Gate {
            gate: Some(gate),
            count: 0,
            report: None,
        },
    )
    .expect("free");
    let a = actor_system_with("a", config).await;
    let remote: ActorRef<Job> = within("resolve", a.resolve(&actor_path(&b, "gate")))
        .await
        .expect("resolves");
    (a, b, remote, open)
}

#[tokio::test]
async fn a_remote_recipient_out_of_credit_is_mailbox_full() {
    let (_a, _b, remote, open) = gated_pair().await;
    let (sent, refused) = tell_until_refused(&remote).await;
    assert!(
        matches!(refused, SendError::MailboxFull(_)),
        "after {sent} tells: {refused:?}"
    );
    // And an ask waits for credit instead of failing.
    let asked = tokio::spawn({
        let remote = remote.clone();
        async move { remote.ask(Job::Count, integration_tests::TIMEOUT).await }
    });
    open.send(()).expect("the gate waits");
    assert_eq!(
        within("the count", asked).await.expect("no panic"),
        Ok(sent)
    );
}

/// Nodes `a` and `b` with `config`, `b` holding a [`Gate`] held in its
/// first message until the returned sender opens it, which reports its
/// count when it stops; `a`'s ref to it.
async fn gate_reporting(
    config: SystemConfig,
) -> (
    ActorSystem,
    ActorSystem,
    ActorRef<Job>,
    oneshot::Sender<()>,
    oneshot::Receiver<u64>,
) {
    let b = actor_system_with("b", config.clone()).await;
    let (open, gate) = oneshot::channel();
    let (report, count) = oneshot::channel();
    b.spawn_named(
        "gate",
        Gate {
            gate: Some(gate),
            count: 0,
            report: Some(report),
        },
    )
    .expect("free");
    let a = actor_system_with("a", config).await;
    let remote: ActorRef<Job> = within("resolve", a.resolve(&actor_path(&b, "gate")))
        .await
        .expect("resolves");
    (a, b, remote, open, count)
}

#[tokio::test]
async fn a_remote_graceful_stop_comes_after_the_messages_sent_before_it() {
    let (_a, b, remote, open, count) = gate_reporting(SystemConfig::default()).await;
    let watched = remote.watch();
    for n in 0..100 {
        remote.tell(Job::Work(n)).expect("room");
    }
    remote.stop_after_queued().expect("queued on the link");
    // Held in the first message: the other 99 and the stop wait in b's
    // mailbox (an immediate stop would jump them).
    open.send(()).expect("the gate waits");
    let t = within("a sees the actor stop", watched).await;
    assert_eq!(t.reason, StopReason::Stopped);
    assert_eq!(within("its count", count).await, Ok(100));
    assert_eq!(b.dead_letters(), 0, "nothing was left behind");
    // Gone now: a later one is a dead letter on b, never an error here
    // (only b knows), and the link is fine.
    remote.stop_after_queued().expect("queued on the link");
    eventually("the late stop is a dead letter on b", || {
        b.dead_letters() == 1
    })
    .await;
}

#[tokio::test]
async fn a_remote_graceful_stop_buffered_while_connecting_keeps_its_place() {
    let (open, gate) = oneshot::channel();
    let (report, count) = oneshot::channel();
    let a = actor_system_with("a", SystemConfig::default()).await;
    let b = actor_system_with("b", SystemConfig::default()).await;
    b.spawn_named(
        "gate",
        Gate {
            gate: Some(gate),
            count: 0,
            report: Some(report),
        },
    )
    .expect("free");
    // a learns of b's gate from a third node: a has never spoken to b,
    // and its first send to b connects.
    let c = actor_system_with("c", SystemConfig::default()).await;
    let gate: ActorRef<Job> = within("resolve", c.resolve(&actor_path(&b, "gate")))
        .await
        .expect("resolves");
    let (refs, mut got) = mpsc::unbounded_channel();
    a.spawn_named("inbox", Collector { out: refs })
        .expect("free");
    let inbox: ActorRef<ActorRef<Job>> = within("resolve", c.resolve(&actor_path(&a, "inbox")))
        .await
        .expect("resolves");
    inbox.tell(gate).expect("room");
    let remote: ActorRef<Job> = within("the ref", got.recv()).await.expect("a ref");
    assert!(!remote.is_local());
    // No await from here to the stop: on this thread's runtime the connect
    // cannot finish meanwhile, so all of it waits in the connect buffer.
    let watched = remote.watch();
    for n in 0..100 {
        remote
            .tell(Job::Work(n))
            .expect("room in the connect buffer");
    }
    remote.stop_after_queued().expect("buffered");
    open.send(()).expect("the gate waits");
    assert_eq!(
        within("a sees the actor stop", watched).await.reason,
        StopReason::Stopped
    );
    assert_eq!(within("its count", count).await, Ok(100));
}

#[tokio::test]
async fn a_remote_graceful_stop_is_not_held_back_by_a_full_mailbox() {
    let mut config = SystemConfig::default();
    config.set_recipient_window(16 * 1024).unwrap();
    let (_a, _b, remote, open, count) = gate_reporting(config).await;
    let (sent, refused) = tell_until_refused(&remote).await;
    assert!(matches!(refused, SendError::MailboxFull(_)), "{refused:?}");
    // No credit left for messages, but the stop still goes, behind them.
    let watched = remote.watch();
    remote.stop_after_queued().expect("not refused for credit");
    open.send(()).expect("the gate waits");
    assert_eq!(
        within("a sees the actor stop", watched).await.reason,
        StopReason::Stopped
    );
    assert_eq!(within("its count", count).await, Ok(sent));
}

#[tokio::test]
async fn a_full_link_is_link_full_not_mailbox_full() {
    let mut config = SystemConfig::default();
    // A window far larger than the link's queue, so the queue fills first.
    config.set_recipient_window(1 << 40).unwrap();
    config
        .transport_mut()
        .set_queue_capacity(64 * 1024)
        .unwrap()
        .set_send_buffer_size(Some(16 * 1024))
        .unwrap();
    let p = super::faults_net::Proxied::new(config).await;
    p.b.spawn_named(
        "gate",
        Gate {
            gate: None,
            count: 0,
            report: None,
        },
    )
    .expect("free");
    let remote: ActorRef<Job> = within("resolve", p.a.resolve(&actor_path(&p.b, "gate")))
        .await
        .expect("resolves");
    // b stops reading the link.
    p.to_b.set_mode(Mode::StallToTarget);
    let (mut sent, refused) = tell_until_refused(&remote).await;
    assert!(
        matches!(refused, SendError::LinkFull(_)),
        "after {sent} tells: {refused:?}"
    );
    // An ask waits for the link instead of failing at once, and says why
    // it timed out without sending. Until the kernel's buffers are full
    // too, the writer may take the queue while the ask waits (then the
    // request goes, and times out unanswered): fill again and retry.
    let mut asks = 0u64;
    within("an ask that finds the link full throughout", async {
        loop {
            let r = remote.ask(Job::Count, Duration::from_millis(100)).await;
            match r {
                Err(AskError::LinkFull) => return,
                Err(AskError::Timeout(_)) => asks += 1,
                other => panic!("{other:?}"),
            }
            let (more, refused) = tell_until_refused(&remote).await;
            assert!(matches!(refused, SendError::LinkFull(_)), "{refused:?}");
            sent += more;
        }
    })
    .await;
    p.to_b.heal();
    let n = within(
        "the count",
        remote.ask(Job::Count, integration_tests::TIMEOUT),
    )
    .await
    .expect("the link drains");
    assert_eq!(n, sent);
}
