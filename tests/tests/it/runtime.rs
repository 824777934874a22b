//! The runtime an actor builds on: timers in `Ctx`, the graceful stop,
//! and how full mailboxes and full links are told apart and waited on.

use std::time::Duration;

use actors::{
    Actor, ActorRef, ActorSystem, Ctx, SendError, StopError, StopReason, SystemConfig, TimerKey,
};
use integration_tests::{eventually, within};
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
}

/// Arms and cancels timers as told; logs each `Tag` with its time.
struct Probe {
    start: Instant,
    last: Option<TimerKey>,
    log: mpsc::UnboundedSender<(u64, u32)>,
}

impl Actor for Probe {
    type Msg = P;

    async fn handle(&mut self, msg: P, ctx: &mut Ctx<Self>) {
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
            P::Tag(n) => {
                let ms = self.start.elapsed().as_millis() as u64;
                let _ = self.log.send((ms, n));
            }
        }
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

    async fn handle(&mut self, n: u64, _: &mut Ctx<Self>) {
        // The first message holds the actor until the gate opens.
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            let _ = self.gate.take().expect("taken with `entered`").await;
        }
        self.total += n;
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
    config.set_mailbox_capacity(cap);
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
