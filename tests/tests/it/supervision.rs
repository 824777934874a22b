//! Supervision and hierarchy: restart in place (path and refs survive,
//! locally and from another node), the restart limit, backoff, escalate,
//! all-for-one, children stopping before parents, nested paths resolved
//! remotely, and timers across restarts.

use std::time::Duration;

use actors::{
    Actor, ActorError, ActorRef, ActorResult, ActorSystem, Ctx, Directive, Panicked, RemoteMessage,
    StopReason, SupervisorStrategy,
};
use integration_tests::{actor_path, actor_system, eventually, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::actors_common::{Count, spawn_watcher, total};

/// What probes report: `"started a"`, `"stopped a"`.
type Log = mpsc::UnboundedSender<String>;

/// A counter (as `actors_common::Counter`) that reports its life, spawns
/// the children it is given (leaf probes) in `started`, and supervises
/// them with `strategy`.
struct Probe {
    name: String,
    log: Log,
    total: u64,
    children: Vec<&'static str>,
    strategy: SupervisorStrategy,
}

impl Probe {
    fn leaf(name: &str, log: &Log) -> Self {
        Self {
            name: name.to_owned(),
            log: log.clone(),
            total: 0,
            children: Vec::new(),
            strategy: SupervisorStrategy::stop(),
        }
    }

    /// A factory of probes named `name`, with these children and strategy.
    fn factory(
        name: &str,
        log: &Log,
        children: Vec<&'static str>,
        strategy: SupervisorStrategy,
    ) -> impl Fn() -> Self + Send + Sync + 'static {
        let (name, log) = (name.to_owned(), log.clone());
        move || Self {
            children: children.clone(),
            strategy: strategy.clone(),
            ..Self::leaf(&name, &log)
        }
    }
}

impl Actor for Probe {
    type Msg = Count;

    fn supervisor_strategy(&self) -> SupervisorStrategy {
        self.strategy.clone()
    }

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        let _ = self.log.send(format!("started {}", self.name));
        for child in &self.children {
            let (name, log) = (child.to_string(), self.log.clone());
            ctx.spawn_child(child, move || Probe::leaf(&name, &log))?;
        }
        Ok(())
    }

    async fn handle(&mut self, msg: Count, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            Count::Add(n) => self.total += n,
            Count::Get(reply) => {
                let _ = reply.tell(self.total);
            }
            Count::Panic(m) => panic!("{m}"),
            Count::Stop => ctx.stop(),
            Count::Fail(e) => return Err(e.into()),
            Count::WhoAsks(_) | Count::Ignore(_) => {}
        }
        Ok(())
    }

    async fn stopped(&mut self, _: &StopReason) {
        let _ = self.log.send(format!("stopped {}", self.name));
    }
}

/// The next line a probe reported.
async fn next(log: &mut mpsc::UnboundedReceiver<String>) -> String {
    within("a probe's report", log.recv())
        .await
        .expect("a probe holds the sender")
}

fn restart() -> SupervisorStrategy {
    SupervisorStrategy::restart()
}

#[tokio::test]
async fn a_restart_keeps_the_path_and_local_and_remote_refs() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (tx, mut log) = mpsc::unbounded_channel();
    let local = b
        .spawn_supervised(
            "worker",
            Probe::factory("w", &tx, vec![], restart()),
            restart(),
        )
        .expect("free");
    assert_eq!(next(&mut log).await, "started w");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "worker")))
        .await
        .expect("resolves");
    let mut watcher = spawn_watcher(&a, &remote).await;
    remote.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&remote).await, 5);
    // An error, then a panic: each replaces the instance in place (a
    // panicked instance is dropped without its `stopped`).
    for (failure, stopped_runs) in [
        (Count::Fail("bad input".into()), true),
        (Count::Panic("boom".into()), false),
    ] {
        let dead = b.dead_letters();
        remote.tell(failure).expect("room");
        if stopped_runs {
            assert_eq!(next(&mut log).await, "stopped w");
        }
        assert_eq!(next(&mut log).await, "started w");
        // The failing message was not retried: it is a dead letter.
        eventually("the failing message counted", || b.dead_letters() > dead).await;
        // The same refs reach the new instance (its total starts over).
        remote.tell(Count::Add(2)).expect("room");
        assert_eq!(total(&remote).await, 2);
        local.tell(Count::Add(1)).expect("room");
        assert_eq!(total(&local).await, 3);
    }
    // Restarts are not terminations: the watcher's first notice is the stop.
    remote.stop();
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    assert_eq!(t.reason, StopReason::Stopped);
}

#[tokio::test]
async fn the_restart_limit_stops_the_actor_and_remote_watchers_hear_why() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (tx, mut log) = mpsc::unbounded_channel();
    let strategy = restart().with_limit(2, Duration::from_secs(3600));
    b.spawn_supervised(
        "flaky",
        Probe::factory("f", &tx, vec![], restart()),
        strategy,
    )
    .expect("free");
    let remote = within("resolve", a.resolve::<Count>(&actor_path(&b, "flaky")))
        .await
        .expect("resolves");
    let watch = remote.watch();
    let mut watcher = spawn_watcher(&a, &remote).await;
    for i in 0..3 {
        remote
            .tell(Count::Fail(format!("fault {i}")))
            .expect("room");
    }
    let t = within("terminated()", watcher.recv())
        .await
        .expect("a notice");
    let StopReason::RestartLimitExceeded(why) = &t.reason else {
        panic!("stopped for {:?}", t.reason)
    };
    assert!(
        why.contains("2 restarts") && why.contains("fault 2"),
        "{why}"
    );
    assert_eq!(within("watch future", watch).await.reason, t.reason);
    // Three instances started; the last one stopped for good.
    let lines: Vec<_> = std::iter::from_fn(|| log.try_recv().ok()).collect();
    assert_eq!(
        lines.iter().filter(|l| *l == "started f").count(),
        3,
        "{lines:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_waits_between_restarts_and_messages_wait_for_the_new_instance() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let strategy = restart()
        .with_limit(10, Duration::from_secs(3600))
        .with_backoff(Duration::from_secs(1), Duration::from_secs(60));
    let r = sys
        .spawn_supervised(
            "slow",
            Probe::factory("s", &tx, vec![], restart()),
            strategy,
        )
        .expect("free");
    assert_eq!(next(&mut log).await, "started s");
    let mut gaps = Vec::new();
    for _ in 0..3 {
        let t0 = tokio::time::Instant::now();
        r.tell(Count::Fail("x".into())).expect("room");
        // Queued during the backoff; handled by the new instance.
        r.tell(Count::Add(7)).expect("room");
        assert_eq!(next(&mut log).await, "stopped s");
        assert_eq!(next(&mut log).await, "started s");
        gaps.push(t0.elapsed());
        assert_eq!(total(&r).await, 7);
    }
    // 1 s, then twice as long each time (the paused clock moves only
    // when everything waits, so these are exact up to the ask's delivery).
    let secs: Vec<u64> = gaps.iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [1, 2, 4], "{gaps:?}");
}

#[tokio::test]
async fn a_decider_chooses_the_directive_by_the_failure() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    // `stop()` as the base: the decider's answer replaces it.
    let strategy = SupervisorStrategy::stop().with_decider(move |err: &ActorError| {
        let _ = seen_tx.send(err.to_string());
        if let Some(p) = err.downcast_ref::<Panicked>() {
            assert_eq!(p.message, "boom");
            Directive::Restart
        } else if err.to_string().contains("fatal") {
            Directive::Stop
        } else {
            Directive::Restart
        }
    });
    let r = sys
        .spawn_supervised("w", Probe::factory("w", &tx, vec![], restart()), strategy)
        .expect("free");
    assert_eq!(next(&mut log).await, "started w");
    // A panic is recognisable: restarted (no `stopped` after a panic).
    r.tell(Count::Panic("boom".into())).expect("room");
    assert_eq!(next(&mut log).await, "started w");
    // A transient error: restarted.
    r.tell(Count::Fail("transient".into())).expect("room");
    assert_eq!(next(&mut log).await, "stopped w");
    assert_eq!(next(&mut log).await, "started w");
    r.tell(Count::Add(2)).expect("room");
    assert_eq!(total(&r).await, 2, "the new instance runs");
    // A fatal one: stopped, whatever the base directive.
    let watch = r.watch();
    r.tell(Count::Fail("fatal: disk gone".into()))
        .expect("room");
    assert_eq!(
        within("watch", watch).await.reason,
        StopReason::Failed("fatal: disk gone".into())
    );
    let asked: Vec<_> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert_eq!(
        asked,
        ["panicked: boom", "transient", "fatal: disk gone"],
        "the decider saw each failure once"
    );
}

#[tokio::test]
async fn a_stop_during_the_backoff_stops_the_actor() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let strategy = restart().with_backoff(Duration::from_secs(3600), Duration::from_secs(3600));
    let r = sys
        .spawn_supervised(
            "slow",
            Probe::factory("s", &tx, vec![], restart()),
            strategy,
        )
        .expect("free");
    assert_eq!(next(&mut log).await, "started s");
    r.tell(Count::Fail("x".into())).expect("room");
    assert_eq!(next(&mut log).await, "stopped s");
    r.stop();
    let t = within("watch", r.watch()).await;
    assert_eq!(t.reason, StopReason::Stopped);
}

#[tokio::test]
async fn children_stop_before_their_parent_and_nest_under_its_path() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let parent = sys
        .spawn_named("p", Probe::factory("p", &tx, vec!["c1", "c2"], restart())())
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    let mut started = [next(&mut log).await, next(&mut log).await];
    started.sort();
    assert_eq!(started, ["started c1", "started c2"]);
    let child = within("resolve", sys.resolve::<Count>("local://s/user/p/c1"))
        .await
        .expect("a nested path resolves");
    assert_eq!(child.path().elements(), "/user/p/c1");
    child.tell(Count::Add(3)).expect("room");
    assert_eq!(total(&child).await, 3);
    let child_watch = child.watch();
    parent.stop();
    let mut stopped = [next(&mut log).await, next(&mut log).await];
    stopped.sort();
    assert_eq!(stopped, ["stopped c1", "stopped c2"]);
    assert_eq!(next(&mut log).await, "stopped p");
    assert_eq!(
        within("child watch", child_watch).await.reason,
        StopReason::Stopped
    );
    // Every name is free again.
    let (tx2, mut log2) = mpsc::unbounded_channel();
    sys.spawn_named("p", Probe::factory("p", &tx2, vec!["c1"], restart())())
        .expect("free again");
    assert_eq!(next(&mut log2).await, "started p");
    assert_eq!(next(&mut log2).await, "started c1");
}

#[tokio::test]
async fn shutdown_stops_children_before_parents() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    sys.spawn_named("p", Probe::factory("p", &tx, vec!["c"], restart())())
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    assert_eq!(next(&mut log).await, "started c");
    within("shutdown", sys.shutdown()).await;
    assert_eq!(next(&mut log).await, "stopped c");
    assert_eq!(next(&mut log).await, "stopped p");
}

#[tokio::test]
async fn a_nested_path_resolves_from_another_node_and_its_restart_keeps_the_ref() {
    let a = actor_system("a").await;
    let b = actor_system("b").await;
    let (tx, mut log) = mpsc::unbounded_channel();
    b.spawn_named("parent", Probe::factory("p", &tx, vec!["kid"], restart())())
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    assert_eq!(next(&mut log).await, "started kid");
    let kid = within("resolve", a.resolve::<Count>(&actor_path(&b, "parent/kid")))
        .await
        .expect("the nested path resolves");
    assert!(
        kid.path().to_string().ends_with("/user/parent/kid"),
        "{}",
        kid.path()
    );
    kid.tell(Count::Add(4)).expect("room");
    assert_eq!(total(&kid).await, 4);
    // The parent's strategy restarts it; the remote ref stays good.
    kid.tell(Count::Fail("oops".into())).expect("room");
    assert_eq!(next(&mut log).await, "stopped kid");
    assert_eq!(next(&mut log).await, "started kid");
    kid.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&kid).await, 1);
    let missing = a
        .resolve::<Count>(&actor_path(&b, "parent/nobody"))
        .await
        .expect_err("no such child");
    assert!(
        matches!(missing, actors::ResolveError::NotFound(_)),
        "{missing}"
    );
}

#[tokio::test]
async fn a_child_stopped_by_its_parents_strategy_is_not_restarted() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let parent = sys
        .spawn_named(
            "p",
            Probe::factory("p", &tx, vec!["c"], SupervisorStrategy::stop())(),
        )
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    assert_eq!(next(&mut log).await, "started c");
    let child = within("resolve", sys.resolve::<Count>("local://s/user/p/c"))
        .await
        .expect("resolves");
    child.tell(Count::Fail("bad".into())).expect("room");
    let t = within("child watch", child.watch()).await;
    assert_eq!(t.reason, StopReason::Failed("bad".into()));
    assert_eq!(next(&mut log).await, "stopped c");
    // The parent goes on.
    parent.tell(Count::Add(1)).expect("room");
    assert_eq!(total(&parent).await, 1);
}

#[tokio::test]
async fn escalate_fails_the_parent_whose_own_supervisor_restarts_it() {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let parent = sys
        .spawn_supervised(
            "p",
            Probe::factory("p", &tx, vec!["c"], SupervisorStrategy::escalate()),
            restart(),
        )
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    assert_eq!(next(&mut log).await, "started c");
    parent.tell(Count::Add(9)).expect("room");
    assert_eq!(total(&parent).await, 9);
    let child = within("resolve", sys.resolve::<Count>("local://s/user/p/c"))
        .await
        .expect("resolves");
    let child_watch = child.watch();
    child.tell(Count::Fail("deep".into())).expect("room");
    // The child stops with its failure, then the parent restarts, which
    // spawns the child again.
    assert_eq!(
        within("child watch", child_watch).await.reason,
        StopReason::Failed("deep".into())
    );
    assert_eq!(next(&mut log).await, "stopped c");
    assert_eq!(next(&mut log).await, "stopped p");
    assert_eq!(next(&mut log).await, "started p");
    assert_eq!(next(&mut log).await, "started c");
    assert_eq!(total(&parent).await, 0, "a new parent instance");
    let again = within("resolve", sys.resolve::<Count>("local://s/user/p/c"))
        .await
        .expect("the new child");
    assert_eq!(total(&again).await, 0);
}

/// A parent `p` restarting children `a` and `b` all-for-one, at most
/// `limit` times an hour, both started: the system, the probes' log and
/// the two children.
async fn all_for_one_pair(
    limit: u32,
) -> (
    ActorSystem,
    mpsc::UnboundedReceiver<String>,
    ActorRef<Count>,
    ActorRef<Count>,
) {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut log) = mpsc::unbounded_channel();
    let strategy = restart()
        .all_for_one()
        .with_limit(limit, Duration::from_secs(3600));
    sys.spawn_named("p", Probe::factory("p", &tx, vec!["a", "b"], strategy)())
        .expect("free");
    assert_eq!(next(&mut log).await, "started p");
    let _ = (next(&mut log).await, next(&mut log).await);
    let (a, b) = (
        within("resolve", sys.resolve::<Count>("local://s/user/p/a"))
            .await
            .expect("a"),
        within("resolve", sys.resolve::<Count>("local://s/user/p/b"))
            .await
            .expect("b"),
    );
    (sys, log, a, b)
}

#[tokio::test]
async fn all_for_one_restarts_and_stops_every_sibling() {
    let (_sys, mut log, a, b) = all_for_one_pair(1).await;
    b.tell(Count::Add(5)).expect("room");
    assert_eq!(total(&b).await, 5);
    a.tell(Count::Fail("one".into())).expect("room");
    // a restarts itself; the parent then restarts b.
    let mut lines = Vec::new();
    for _ in 0..4 {
        lines.push(next(&mut log).await);
    }
    lines.sort();
    assert_eq!(lines, ["started a", "started b", "stopped a", "stopped b"]);
    assert_eq!(total(&b).await, 0, "b was restarted with a");
    // Past the limit a stops, and b with it.
    let (wa, wb) = (a.watch(), b.watch());
    a.tell(Count::Fail("two".into())).expect("room");
    assert!(matches!(
        within("a stops", wa).await.reason,
        StopReason::RestartLimitExceeded(_)
    ));
    assert_eq!(within("b stops", wb).await.reason, StopReason::Stopped);
}

#[tokio::test]
async fn all_for_one_counts_each_group_restart_once_against_the_parents_limit() {
    let (_sys, mut log, a, b) = all_for_one_pair(2).await;
    // Two group restarts, one caused by each child: each child failed
    // once, but the group restarted twice, which is the limit.
    for failing in [&a, &b] {
        failing.tell(Count::Fail("x".into())).expect("room");
        let mut lines = Vec::new();
        for _ in 0..4 {
            lines.push(next(&mut log).await);
        }
        lines.sort();
        assert_eq!(lines, ["started a", "started b", "stopped a", "stopped b"]);
    }
    // A third failure is past the parent's limit (a counted alone would
    // have one restart left): a stops, and b with it.
    let (wa, wb) = (a.watch(), b.watch());
    a.tell(Count::Fail("third".into())).expect("room");
    let reason = within("a stops", wa).await.reason;
    let StopReason::RestartLimitExceeded(why) = &reason else {
        panic!("a stopped for {reason:?}")
    };
    assert!(why.contains("2 restarts"), "{why}");
    assert_eq!(within("b stops", wb).await.reason, StopReason::Stopped);
}

/// Watches a counter; on `Stop` stops it and waits for it to end inside
/// the handler, so the notice is queued when the handler returns; panics
/// in `terminated`.
struct PanicsOnNotice(ActorRef<Count>);

impl Actor for PanicsOnNotice {
    type Msg = Count;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.0);
        Ok(())
    }

    async fn handle(&mut self, msg: Count, _: &mut Ctx<Self>) -> ActorResult {
        if let Count::Stop = msg {
            let ended = self.0.watch();
            self.0.stop();
            ended.await;
        }
        Ok(())
    }

    async fn terminated(&mut self, _: actors::Terminated, _: &mut Ctx<Self>) -> ActorResult {
        panic!("terminated panics");
    }
}

#[tokio::test]
async fn a_panic_outside_handle_is_no_failed_message() {
    let sys = ActorSystem::local("s").expect("valid");
    let target = sys.spawn(super::actors_common::Counter::default());
    let w = sys.spawn(PanicsOnNotice(target));
    let watch = w.watch();
    w.tell(Count::Stop).expect("room");
    let reason = within("the watcher stops", watch).await.reason;
    assert_eq!(reason, StopReason::Panicked("terminated panics".into()));
    // The handled message succeeded; the panic was in `terminated`.
    assert_eq!(sys.dead_letters(), 0, "no message counted as failed");
}

/// An actor whose timers report into a channel.
struct Ticker {
    ticks: mpsc::UnboundedSender<&'static str>,
    keep: bool,
}

#[derive(Debug, Serialize, Deserialize)]
enum TickMsg {
    /// Sets a one-shot and a repeated timer, in 1 s.
    Arm,
    Tick(String),
    Fail,
    Ping(ActorRef<()>),
}

impl RemoteMessage for TickMsg {
    const MANIFEST: &'static str = "it.TickMsg";
}

impl Actor for Ticker {
    type Msg = TickMsg;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.keep_timers_on_restart(self.keep);
        let _ = self.ticks.send("started");
        Ok(())
    }

    async fn handle(&mut self, msg: TickMsg, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            TickMsg::Arm => {
                ctx.schedule_once(Duration::from_secs(1), TickMsg::Tick("once".into()));
                ctx.schedule_repeatedly(Duration::from_secs(1), || TickMsg::Tick("repeat".into()));
            }
            TickMsg::Tick(kind) => {
                let _ = self
                    .ticks
                    .send(if kind == "once" { "once" } else { "repeat" });
            }
            TickMsg::Fail => return Err("fail".into()),
            TickMsg::Ping(reply) => {
                let _ = reply.tell(());
            }
        }
        Ok(())
    }
}

async fn ticker(
    keep: bool,
) -> (
    ActorSystem,
    ActorRef<TickMsg>,
    mpsc::UnboundedReceiver<&'static str>,
) {
    let sys = ActorSystem::local("s").expect("valid");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let r = sys
        .spawn_supervised(
            "t",
            move || Ticker {
                ticks: tx.clone(),
                keep,
            },
            restart(),
        )
        .expect("free");
    assert_eq!(within("started", rx.recv()).await, Some("started"));
    (sys, r, rx)
}

#[tokio::test(start_paused = true)]
async fn timers_do_not_fire_into_a_restarted_instance() {
    let (_sys, r, mut rx) = ticker(false).await;
    r.tell(TickMsg::Arm).expect("room");
    // The timers work before the restart.
    let mut first = [
        within("tick", rx.recv()).await.expect("open"),
        within("tick", rx.recv()).await.expect("open"),
    ];
    first.sort();
    assert_eq!(first, ["once", "repeat"]);
    r.tell(TickMsg::Arm).expect("room");
    r.tell(TickMsg::Fail).expect("room");
    assert_eq!(within("restart", rx.recv()).await, Some("started"));
    // Well past every deadline: nothing reaches the new instance.
    tokio::time::sleep(Duration::from_secs(10)).await;
    within("ping", r.ask(TickMsg::Ping, Duration::from_secs(60)))
        .await
        .expect("answers");
    assert!(rx.try_recv().is_err(), "no timer fired after the restart");
}

#[tokio::test(start_paused = true)]
async fn timers_kept_on_restart_fire_into_the_new_instance() {
    let (_sys, r, mut rx) = ticker(true).await;
    r.tell(TickMsg::Arm).expect("room");
    r.tell(TickMsg::Fail).expect("room");
    assert_eq!(within("restart", rx.recv()).await, Some("started"));
    let mut ticks = [
        within("tick", rx.recv()).await.expect("open"),
        within("tick", rx.recv()).await.expect("open"),
    ];
    ticks.sort();
    assert_eq!(ticks, ["once", "repeat"]);
}
