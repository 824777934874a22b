//! The run loop of one instance of an actor ([`Runner::instance`]):
//! `started`, then rounds of system messages, due timers and batches
//! taken from the mailbox whole, each message handled in turn, until a
//! stop or a failure. This is the receiving hot path: the loop keeps a
//! message's cost to the handler's call and a few tests (see the comments
//! on `handling` and on traced messages).

use std::{any::Any, collections::VecDeque, sync::Arc};

use super::{
    Actor, ActorResult, Ctx,
    children::on_child,
    decode::{DECODE_SLICE_BYTES, Slice, decode_ext_records, decoded_cost, undecodable},
    outcome::{Outcome, failure, handler_failed},
};
use crate::{
    budget::Charge,
    cell::Cell,
    lifecycle::StopReason,
    mailbox::{Queued, SystemMsg, next_record, stop_in_batch},
    reply::{self, NoReply},
    serialization::with_decode_scope,
    timer::Timers,
    trace::TraceContext,
};

/// Queues the message of every timer due now into the actor's own
/// mailbox, behind what already arrived.
fn fire_due<M: Send + 'static>(timers: &mut Timers<M>, cell: &Cell<M>) {
    let now = tokio::time::Instant::now();
    while let Some((key, msg)) = timers.poll_due(now) {
        // The mailbox closes only after the actor's task ends, so this
        // push, from that task, is never refused; if it were, dropping the
        // message is right: the actor is gone.
        let _ = cell
            .mailbox
            .push_unbounded(Queued::Timer(Box::new((key, msg))));
    }
}

/// After a message from `Runner::traced` was handled in its trace
/// context: what the plain path does after `handle`, out of line.
#[cold]
#[inline(never)]
fn after_traced<A: Actor>(
    result: ActorResult,
    registry: &crate::registry::Registry,
    cell: &Cell<A::Msg>,
    ctx: &mut Ctx<A>,
    sys: &mut VecDeque<SystemMsg>,
    handling: &mut bool,
) -> Option<Outcome> {
    if let Err(e) = result {
        handler_failed(registry, &cell.path, std::any::type_name::<A::Msg>());
        return Some(failure(Ok(e)));
    }
    reply::resolve_open(&NoReply::Dropped);
    if ctx.stop {
        return Some(Outcome::Stop(StopReason::Stopped));
    }
    if !ctx.timers.is_empty() {
        // A repeated timer's closure is user code.
        *handling = false;
        fire_due(&mut ctx.timers, cell);
        *handling = true;
    }
    if cell.mailbox.system_pending() {
        cell.mailbox.take_system(sys);
    }
    None
}

/// An actor's task state that outlives an instance: its cell, its
/// context and what it took from its mailbox but has not handled yet
/// (handled by the next instance after a restart).
pub(super) struct Runner<A: Actor> {
    pub(super) cell: Arc<Cell<A::Msg>>,
    pub(super) registry: Arc<crate::registry::Registry>,
    /// What decodes of this actor's remote messages resolve refs against
    /// (the scope is per batch; this is its one lookup).
    pub(super) scope: Option<Arc<dyn Any + Send + Sync>>,
    pub(super) ctx: Ctx<A>,
    pub(super) user: VecDeque<Queued<A::Msg>>,
    pub(super) sys: VecDeque<SystemMsg>,
    /// The messages of the remote batch being worked through, decoded
    /// together (one decode context per batch, no await in between).
    pub(super) decoded: VecDeque<A::Msg>,
    /// The rest of a remote batch from its first record with an extension
    /// block on, each message with the trace context it carried: handled
    /// after `decoded` (the batch's plain records before it), so a batch
    /// of plain records never looks here but once, when `decoded` is
    /// empty.
    pub(super) traced: VecDeque<(A::Msg, Option<TraceContext>)>,
    /// The charge of the last remote batch taken whole (`budget::Charge`):
    /// held while its decoded messages wait in `decoded` and `traced`, and
    /// given back when the next batch is taken or nothing is left, so that
    /// what a peer's bytes became stays charged to its connection until
    /// the actor has handled it.
    pub(super) held: Charge,
    /// Counts this actor alive until the task ends (or is dropped), and
    /// its mailbox depth and handling time when a recorder is installed.
    pub(super) meter: crate::telemetry::ActorMeter,
    /// A message's `handle` is running (a panic then makes it a dead
    /// letter, as an error does).
    pub(super) handling: bool,
}

impl<A: Actor> Runner<A> {
    /// Runs one instance: `started`, then batches of messages until it
    /// stops or fails.
    pub(super) async fn instance(&mut self, actor: &mut A) -> Outcome {
        let Self {
            cell,
            registry,
            scope,
            ctx,
            user,
            sys,
            decoded,
            traced,
            held,
            meter,
            handling,
        } = self;
        // Hooks are awaited directly: a panic in one unwinds out of this
        // instance, and `run_actor` catches it once per instance (a
        // wrapper per message cost ~60 instructions per message).
        //
        // `handling` is kept true through a run of messages and cleared
        // only around the other user code of the loop (`terminated`,
        // decoding, timers' closures) and between batches, so that a
        // message costs no store of it (two per message cost 0.6 % of
        // the receiving thread under callgrind).
        *handling = false;
        if let Err(e) = actor.started(ctx).await {
            return failure(Ok(e));
        }
        loop {
            if ctx.stop {
                return Outcome::Stop(StopReason::Stopped);
            }
            if !ctx.timers.is_empty() {
                fire_due(&mut ctx.timers, cell);
            }
            // What a failed instance left unhandled goes first (and
            // `recv_all` swaps into an empty `user` only).
            if user.is_empty() && decoded.is_empty() && traced.is_empty() && sys.is_empty() {
                // Before waiting: reply refs dropped outside a handler
                // (a hook, a timer) fail now, not at the next message.
                reply::resolve_open(&NoReply::Dropped);
                // Without timers waiting, the actor waits on its mailbox alone.
                let received = match ctx.timers.next_deadline() {
                    None => cell.mailbox.recv_all(user, sys).await,
                    Some(deadline) => {
                        tokio::select! {
                            biased;
                            received = cell.mailbox.recv_all(user, sys) => received,
                            // Queued at the top of the next round.
                            () = tokio::time::sleep_until(deadline) => continue,
                        }
                    }
                };
                if !received {
                    return Outcome::Stop(StopReason::Stopped);
                }
                if meter.enabled() {
                    meter.taken(user.iter().map(Queued::count).sum());
                }
            }
            *handling = true;
            loop {
                while let Some(s) = sys.pop_front() {
                    match s {
                        SystemMsg::Stop => return Outcome::Stop(StopReason::Stopped),
                        SystemMsg::Terminated(t) => {
                            *handling = false;
                            if let Err(e) = actor.terminated(t, ctx).await {
                                return failure(Ok(e));
                            }
                            *handling = true;
                        }
                        SystemMsg::Child(event) => {
                            if let Some(outcome) =
                                on_child(&mut ctx.children, ctx.strategy.is_all_for_one(), event)
                            {
                                return outcome;
                            }
                        }
                        SystemMsg::Restart => return Outcome::SiblingFailed,
                    }
                    if ctx.stop {
                        return Outcome::Stop(StopReason::Stopped);
                    }
                }
                let msg = if let Some(m) = decoded.pop_front() {
                    m
                } else if let Some((m, trace)) = traced.pop_front() {
                    match trace {
                        None => m,
                        // Handled in its context, so that what the handler
                        // sends carries it on.
                        Some(t) => {
                            // `handling` is already set for this run.
                            let started = meter.start();
                            let result = t.scope(actor.handle(m, ctx)).await;
                            meter.handled(started);
                            if let Some(outcome) =
                                after_traced(result, registry, cell, ctx, sys, handling)
                            {
                                return outcome;
                            }
                            continue;
                        }
                    }
                } else {
                    match user.pop_front() {
                        None => {
                            *handling = false;
                            // Every message of the last batch is handled.
                            *held = Charge::default();
                            break;
                        }
                        Some(Queued::Local(m)) => m,
                        Some(Queued::Timer(timer)) => {
                            let (key, m) = *timer;
                            if !ctx.timers.take_delivered(key) {
                                // Cancelled after it was queued.
                                continue;
                            }
                            m
                        }
                        Some(Queued::Stop) => return Outcome::Stop(StopReason::Stopped),
                        Some(Queued::Batch(bytes, n, charge)) => {
                            let decoders = cell.decode.get().expect(
                                "remote messages reach only registered actors, which have a decoder",
                            );
                            let mut decode_slice = || {
                                let mut pos = 0;
                                let mut spent = 0;
                                let mut records = 0;
                                // Stops at the end, or at the first record
                                // with an extension block (`next_record`),
                                // or once the slice is spent.
                                while let Some(range) = next_record(&bytes, &mut pos) {
                                    spent += decoded_cost::<A::Msg>(range.len());
                                    records += 1;
                                    match (decoders.plain)(&bytes[range]) {
                                        Ok(m) => decoded.push_back(m),
                                        Err(e) => undecodable::<A::Msg>(
                                            registry,
                                            &cell.path,
                                            &(decoders.why)(e),
                                        ),
                                    }
                                    if spent >= DECODE_SLICE_BYTES {
                                        return Slice {
                                            end: pos,
                                            records,
                                            cut: true,
                                        };
                                    }
                                }
                                if pos < bytes.len() {
                                    // Records with extension blocks from
                                    // here on, up to a graceful stop if
                                    // one follows (`next_record_ext`).
                                    let mut s = decode_ext_records(
                                        &bytes, pos, decoders, traced, registry, &cell.path, spent,
                                    );
                                    s.records += records;
                                    return s;
                                }
                                Slice {
                                    end: pos,
                                    records,
                                    cut: false,
                                }
                            };
                            // A message's `Deserialize` is user code too.
                            *handling = false;
                            let slice = match &*scope {
                                Some(scope) => with_decode_scope(scope, &bytes, decode_slice),
                                None => decode_slice(),
                            };
                            *handling = true;
                            if slice.cut && slice.end < bytes.len() {
                                // The rest waits, undecoded, until this
                                // slice is handled, and keeps the charge.
                                user.push_front(Queued::Batch(
                                    bytes.slice(slice.end..),
                                    n.saturating_sub(slice.records as u32),
                                    charge,
                                ));
                            } else {
                                // Held until this slice is handled (the
                                // last batch's goes now).
                                *held = charge;
                                if !slice.cut && slice.end < bytes.len() {
                                    // A graceful stop from another node:
                                    // after the messages decoded before it.
                                    stop_in_batch(user, &bytes, slice.end);
                                }
                            }
                            continue;
                        }
                    }
                };
                let started = meter.start();
                let result = actor.handle(msg, ctx).await;
                meter.handled(started);
                if let Err(e) = result {
                    // Not retried: counted and logged once.
                    handler_failed(registry, &cell.path, std::any::type_name::<A::Msg>());
                    return failure(Ok(e));
                }
                // Reply refs the handler dropped unanswered.
                reply::resolve_open(&NoReply::Dropped);
                if ctx.stop {
                    return Outcome::Stop(StopReason::Stopped);
                }
                if !ctx.timers.is_empty() {
                    // A repeated timer's closure is user code.
                    *handling = false;
                    fire_due(&mut ctx.timers, cell);
                    *handling = true;
                }
                if cell.mailbox.system_pending() {
                    cell.mailbox.take_system(sys);
                }
            }
        }
    }
}
