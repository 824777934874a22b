//! An actor's task ([`run_actor`]): instances of the actor one after
//! another. After a failure the supervisor's strategy decides
//! (`Verdict`): stop, escalate to the parent, or restart in place, which
//! stops the children, runs the old instance's `stopped` (not after a
//! panic), waits out the backoff and makes a new instance from the
//! factory. At the end, what is left in the mailbox becomes dead letters
//! (its asks fail at once) and the last instance's `stopped` runs.

use std::{
    collections::{HashMap, VecDeque},
    panic::AssertUnwindSafe,
    sync::{Arc, PoisonError, atomic::Ordering},
    time::Duration,
};

use super::{
    Actor, Ctx,
    children::Supervision,
    decode::drop_unhandled,
    outcome::{Outcome, failure, guarded, handler_failed, panic_message},
    turn::Runner,
};
use crate::{
    actor_ref::ActorRef,
    budget::Charge,
    cell::Cell,
    dead_letter::DeadLetterReason,
    lifecycle::StopReason,
    mailbox::SystemMsg,
    reply::{self, NoReply},
    supervision::{ChildEvent, Parent, Restarts, SupervisorStrategy, Verdict},
    system::ActorSystem,
    timer::Timers,
    watch::WatchSink,
};

impl<A: Actor> Runner<A> {
    /// Stops every child and waits until each has ended (its `stopped`
    /// ran and its name is free). Returns whether a stop of this actor
    /// arrived meanwhile; watch notices that arrived are kept for later.
    async fn stop_children(&mut self) -> bool {
        if self.ctx.children.is_empty() {
            return false;
        }
        for child in self.ctx.children.values() {
            child.control.stop();
        }
        let mut stop = false;
        let mut keep = VecDeque::new();
        let mut got = std::mem::take(&mut self.sys);
        loop {
            for s in got.drain(..) {
                match s {
                    SystemMsg::Child(ChildEvent::Terminated { id, .. }) => {
                        self.ctx.children.remove(&id);
                    }
                    SystemMsg::Child(ChildEvent::Restarted { .. }) | SystemMsg::Restart => {}
                    SystemMsg::Stop => stop = true,
                    t @ SystemMsg::Terminated(_) => keep.push_back(t),
                }
            }
            if self.ctx.children.is_empty() || !self.cell.mailbox.recv_system(&mut got).await {
                break;
            }
        }
        self.sys = keep;
        stop
    }

    /// Waits `delay` before a restart, or until a stop (then true).
    /// Messages stay in the mailbox, counted against its capacity.
    async fn backoff(&mut self, delay: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + delay;
        let mut got = VecDeque::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return false,
                open = self.cell.mailbox.recv_system(&mut got) => {
                    if !open {
                        return true;
                    }
                    for s in got.drain(..) {
                        match s {
                            SystemMsg::Stop => return true,
                            SystemMsg::Restart => {}
                            other => self.sys.push_back(other),
                        }
                    }
                }
            }
        }
    }
}

/// An actor's task: instances of the actor, each `started` and then fed
/// batches of messages, until one stops or its supervision stops it.
/// Returns why it stopped and whether its failure goes to its parent.
pub(super) async fn run_actor<A: Actor>(
    first: A,
    sup: Supervision<A>,
    id: u64,
    cell: Arc<Cell<A::Msg>>,
    system: ActorSystem,
) -> (StopReason, bool) {
    let sys_inner = system.inner.clone();
    let registry = system.registry().clone();
    let scope = registry.decode_scope();
    let meter = registry.meters().actor(std::any::type_name::<A>());
    let parent_link: Arc<dyn Parent> = cell.clone();
    let mut run = Runner {
        ctx: Ctx {
            myself: ActorRef::local(cell.clone()),
            system,
            stop: false,
            sink: WatchSink::Actor(cell.clone()),
            timers: Timers::default(),
            strategy: SupervisorStrategy::default(),
            children: HashMap::new(),
            parent_link,
            keep_timers: false,
            group_restarts: Arc::default(),
        },
        cell,
        registry,
        scope,
        user: VecDeque::new(),
        sys: VecDeque::new(),
        decoded: VecDeque::new(),
        traced: VecDeque::new(),
        held: Charge::default(),
        meter,
        handling: false,
    };
    let path = run.cell.path.clone();
    let mut restarts = Restarts::default();
    let mut held = reply::Deferred::new();
    let mut actor = first;
    let (reason, escalate, last) = loop {
        run.ctx.strategy = actor.supervisor_strategy();
        // A new instance is a new supervisor: its children's window
        // starts empty (the old instance's children stopped with it).
        run.ctx.group_restarts = Arc::default();
        let outcome = match guarded(run.instance(&mut actor), &mut held).await {
            Ok(outcome) => outcome,
            Err(p) => {
                if std::mem::take(&mut run.handling) {
                    handler_failed(
                        &run.registry,
                        &run.cell.path,
                        std::any::type_name::<A::Msg>(),
                    );
                }
                failure(Err(p))
            }
        };
        // Asks whose reply refs the instance dropped on its way out: the
        // message it failed on, or what a stop dropped.
        if !held.is_empty() {
            let why = match &outcome {
                Outcome::Fail { reason, .. } => NoReply::HandlerFailed(reason.to_string()),
                Outcome::Stop(reason) if sys_inner.shutting_down.load(Ordering::Acquire) => {
                    NoReply::stopped(&StopReason::SystemShutdown)
                }
                Outcome::Stop(reason) => NoReply::stopped(reason),
                Outcome::SiblingFailed => NoReply::Dropped,
            };
            reply::resolve(&mut held, &why);
        }
        let (failed, panicked, own) = match outcome {
            Outcome::Stop(reason) => break (reason, false, Some(actor)),
            Outcome::Fail {
                reason,
                panicked,
                error,
            } => (reason, panicked, Some(error)),
            Outcome::SiblingFailed => (
                StopReason::Failed("a sibling failed (all-for-one)".to_owned()),
                false,
                None,
            ),
        };
        // A panicked instance's state is unknown: dropped, no `stopped`.
        // Reply refs it kept fail their asks, as the handler failed.
        let old = if panicked {
            reply::dropping(actor, &NoReply::HandlerFailed(failed.to_string()));
            None
        } else {
            Some(actor)
        };
        let verdict = match (&sup.factory, &own) {
            (None, _) => Verdict::Stop,
            (Some(_), None) => Verdict::Restart(Duration::ZERO),
            (Some(_), Some(error)) => {
                let directive = sup.strategy.directive_for(error);
                let now = tokio::time::Instant::now();
                match &sup.group {
                    // All-for-one: counted once against the window the
                    // siblings share; their own restarts (`SiblingFailed`
                    // above) are part of this one and not counted again.
                    Some(group) => group.lock().unwrap_or_else(PoisonError::into_inner).decide(
                        &sup.strategy,
                        directive,
                        now,
                    ),
                    None => restarts.decide(&sup.strategy, directive, now),
                }
            }
        };
        let delay = match verdict {
            Verdict::Restart(delay) => delay,
            Verdict::Stop | Verdict::Escalate => {
                tracing::error!(actor = %path, reason = %failed, "actor failed; stopped");
                break (
                    failed,
                    verdict == Verdict::Escalate && sup.parent.is_some(),
                    old,
                );
            }
            Verdict::LimitExceeded(n) => {
                let why = format!(
                    "{n} restarts within {:?}, then {failed}",
                    sup.strategy.within()
                );
                tracing::error!(actor = %path, reason = %why, "actor failed past its restart limit; stopped");
                break (StopReason::RestartLimitExceeded(why), false, old);
            }
        };
        tracing::warn!(actor = %path, reason = %failed, ?delay, "actor failed; restarting");
        let mut stop = run.stop_children().await;
        if let Some(mut old) = old {
            if let Err(p) = guarded(old.stopped(&failed), &mut held).await {
                tracing::error!(actor = %path, panic = %p, "`stopped` panicked");
            }
            // Reply refs the failed instance kept fail their asks.
            reply::collect(&mut held, || drop(old));
        }
        reply::resolve(&mut held, &NoReply::HandlerFailed(failed.to_string()));
        if !run.ctx.keep_timers {
            run.ctx.timers.clear();
        }
        run.ctx.stop = false;
        if !stop && !delay.is_zero() {
            stop = run.backoff(delay).await;
        }
        if stop {
            break (StopReason::Stopped, false, None);
        }
        let factory = sup
            .factory
            .as_ref()
            .expect("only an actor with a factory gets a restart verdict");
        actor = match std::panic::catch_unwind(AssertUnwindSafe(|| factory())) {
            Ok(a) => a,
            Err(p) => {
                let msg = panic_message(&*p);
                tracing::error!(actor = %path, panic = %msg, "actor factory panicked; stopped");
                break (StopReason::Panicked(msg), false, None);
            }
        };
        if own.is_some()
            && let Some(parent) = &sup.parent
        {
            parent.child_event(ChildEvent::Restarted { id });
        }
    };
    // Children stop (and their `stopped` runs) before this actor's own.
    run.stop_children().await;
    let shutting_down = sys_inner.shutting_down.load(Ordering::Acquire);
    let mut left = run.decoded.len() as u64;
    left += run.traced.len() as u64;
    // What is still in the mailbox joins what was taken from it: once
    // closed, senders are refused (a remote ask then hears why at once),
    // and what it held is failed and counted here, once.
    let queued = run.cell.mailbox.close_taking();
    run.user.extend(queued);
    // The asks among them fail now, as the actor is gone.
    reply::collect(&mut held, || {
        run.decoded.clear();
        run.traced.clear();
        run.held = Charge::default();
        left += drop_unhandled(&mut run.user, run.cell.decode.get(), run.scope.as_ref());
    });
    run.registry.dead_letters_n(
        left,
        std::any::type_name::<A::Msg>(),
        &path,
        &DeadLetterReason::LeftInMailbox,
    );
    let reason = if shutting_down {
        StopReason::SystemShutdown
    } else {
        reason
    };
    if let Some(mut last) = last {
        if let Err(p) = guarded(last.stopped(&reason), &mut held).await {
            tracing::error!(actor = %path, panic = %p, "`stopped` panicked");
        }
        // Reply refs the last instance kept fail their asks.
        reply::collect(&mut held, || drop(last));
    }
    reply::resolve(&mut held, &NoReply::stopped(&reason));
    (reason, escalate)
}
