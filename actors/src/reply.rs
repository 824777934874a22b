//! Asks that can no longer be answered fail at once (Erlang's
//! `gen_server:call` monitors its callee for the same reason).
//!
//! An ask's reply ref is the only way its reply can come. When the last
//! handle to it is dropped unanswered, the ask fails at once, with why:
//!
//! ```text
//!   last reply handle dropped, unanswered
//!        │
//!        ├─ inside an actor's poll ──► deferred to that actor's task
//!        │                               │
//!        │        handler returned Ok ───┼──► NoReply::Dropped
//!        │        handler failed/panicked┼──► NoReply::HandlerFailed(why)
//!        │        actor stopped ─────────┴──► NoReply::Stopped(why)
//!        │
//!        └─ anywhere else ──────────────────► NoReply::Dropped (or
//!                                             Stopped, where the caller
//!                                             knows the actor stopped)
//! ```
//!
//! The deferral exists because a handler that fails drops its message
//! (and the reply ref in it) while unwinding, before the actor's task
//! knows why it failed: the drop is held until the handler's result is
//! known, so that the asker hears `handler failed: <reason>` instead of
//! "dropped". A drop on any other task (a spawned task that kept the
//! ref) fails the ask at once.
//!
//! A reply ref that left the process (serialized into a message to
//! another node) is answered, or failed, by that node: the node that
//! decoded it sends [`NoReply`] back on the reply path when its last
//! handle is dropped unanswered (`SysWire::NoReply`).

use std::{
    cell::{Cell, RefCell},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use crate::{error::AskError, lifecycle::StopReason};

/// Why an ask's reply cannot come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum NoReply {
    /// The reply ref was dropped unanswered by a handler that succeeded,
    /// or outside any handler.
    Dropped,
    /// The handler that had the request failed or panicked.
    HandlerFailed(String),
    /// The actor stopped with the request unhandled.
    Stopped(String),
    /// The actor's system shut down with the request unhandled. Not sent
    /// to another node: the shutdown notice that follows tells the asker
    /// there (`AskError::NodeDown`).
    SystemShutdown,
}

impl NoReply {
    /// Why an actor that stopped for `reason` leaves its asks unanswered.
    pub(crate) fn stopped(reason: &StopReason) -> Self {
        match reason {
            StopReason::SystemShutdown => Self::SystemShutdown,
            other => Self::Stopped(other.to_string()),
        }
    }

    /// What the asker gets.
    pub(crate) fn into_ask_error(self) -> AskError {
        match self {
            Self::Dropped => AskError::ReplyDropped,
            Self::HandlerFailed(why) => AskError::HandlerFailed(why),
            Self::Stopped(_) | Self::SystemShutdown => AskError::ActorGone,
        }
    }
}

/// An ask's reply slot, local or on another node, that can be told it
/// will get no reply.
pub(crate) trait Unanswered: Send + Sync {
    /// The ask fails with `why` (nothing if it was answered meanwhile).
    fn no_reply(&self, why: NoReply);
}

/// Reply slots whose last handle was dropped while a sink was open.
pub(crate) type Deferred = Vec<Arc<dyn Unanswered>>;

thread_local! {
    /// Open while an actor's task is polled (or while its mailbox is
    /// emptied at stop): drops are held here until the actor's task
    /// knows why they happened.
    static SINK: RefCell<Option<Deferred>> = const { RefCell::new(None) };
    /// Set whenever the open sink may hold something (a drop was deferred
    /// into it, or a non-empty one was opened or restored); cleared when
    /// [`resolve_open`] empties it. `resolve_open` runs after every
    /// handled message and nearly always finds nothing: this flag, with no
    /// destructor, is one load, where the sink (a `RefCell` around a `Vec`)
    /// cost about 60 instructions a message to borrow, take and drop.
    static MAYBE_HELD: Cell<bool> = const { Cell::new(false) };
}

/// The last handle to `slot` was dropped unanswered: deferred if a sink
/// is open on this thread, else failed now as [`NoReply::Dropped`].
pub(crate) fn unanswered(slot: Arc<dyn Unanswered>) {
    let slot = SINK.with(|s| match &mut *s.borrow_mut() {
        Some(held) => {
            held.push(slot);
            MAYBE_HELD.set(true);
            None
        }
        None => Some(slot),
    });
    if let Some(slot) = slot {
        slot.no_reply(NoReply::Dropped);
    }
}

/// Runs `f` with a sink open, and adds what was dropped in it to `held`
/// (also if `f` unwinds). A sink already open (a runtime driven from
/// inside a handler) is restored afterwards, untouched.
#[inline]
pub(crate) fn collect<R>(held: &mut Deferred, f: impl FnOnce() -> R) -> R {
    struct Scope<'a> {
        held: &'a mut Deferred,
        outer: Option<Deferred>,
    }
    impl Drop for Scope<'_> {
        fn drop(&mut self) {
            let outer = self.outer.take();
            if outer.as_ref().is_some_and(|o| !o.is_empty()) {
                MAYBE_HELD.set(true);
            }
            if let Some(ours) = SINK.with(|s| std::mem::replace(&mut *s.borrow_mut(), outer)) {
                *self.held = ours;
            }
        }
    }
    if !held.is_empty() {
        MAYBE_HELD.set(true);
    }
    let outer = SINK.with(|s| s.borrow_mut().replace(std::mem::take(held)));
    let _scope = Scope { held, outer };
    f()
}

/// Fails every slot held by the sink open on this thread (the actor
/// task being polled) with `why`: after a handler returned `Ok`, what it
/// dropped was dropped unanswered.
#[inline(always)]
pub(crate) fn resolve_open(why: &NoReply) {
    if MAYBE_HELD.get() {
        resolve_held(why);
    }
}

/// [`resolve_open`] when the open sink may hold something.
#[cold]
#[inline(never)]
fn resolve_held(why: &NoReply) {
    // Cleared before the slots are failed: a drop while failing them is
    // deferred again and sets it.
    MAYBE_HELD.set(false);
    let held = SINK.with(|s| match &mut *s.borrow_mut() {
        Some(held) if !held.is_empty() => std::mem::take(held),
        _ => Vec::new(),
    });
    for slot in held {
        slot.no_reply(why.clone());
    }
}

/// Drops `value` (a message that will not be handled), failing the asks
/// whose reply refs it held with `why`.
pub(crate) fn dropping<T>(value: T, why: &NoReply) {
    let mut held = Deferred::new();
    collect(&mut held, || drop(value));
    resolve(&mut held, why);
}

/// Fails every slot in `held` with `why`.
pub(crate) fn resolve(held: &mut Deferred, why: &NoReply) {
    for slot in held.drain(..) {
        slot.no_reply(why.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Slot(Mutex<Option<NoReply>>);

    impl Unanswered for Slot {
        fn no_reply(&self, why: NoReply) {
            *self.0.lock().unwrap() = Some(why);
        }
    }

    fn got(slot: &Slot) -> Option<NoReply> {
        slot.0.lock().unwrap().clone()
    }

    #[test]
    fn a_drop_outside_any_sink_fails_at_once_as_dropped() {
        let slot = Arc::new(Slot::default());
        unanswered(slot.clone());
        assert_eq!(got(&slot), Some(NoReply::Dropped));
    }

    #[test]
    fn a_drop_inside_a_sink_waits_for_the_reason() {
        let slot = Arc::new(Slot::default());
        let mut held = Deferred::new();
        collect(&mut held, || unanswered(slot.clone()));
        assert_eq!(got(&slot), None, "held until the handler's result");
        resolve(&mut held, &NoReply::HandlerFailed("boom".into()));
        assert_eq!(got(&slot), Some(NoReply::HandlerFailed("boom".into())));
        assert!(held.is_empty());
    }

    #[test]
    fn a_sink_spans_several_polls_and_nests() {
        let (a, b) = (Arc::new(Slot::default()), Arc::new(Slot::default()));
        let mut outer = Deferred::new();
        collect(&mut outer, || {
            unanswered(a.clone());
            let mut inner = Deferred::new();
            collect(&mut inner, || unanswered(b.clone()));
            assert_eq!(inner.len(), 1);
            resolve(&mut inner, &NoReply::Dropped);
        });
        // A second poll of the same task adds to what the first held.
        collect(&mut outer, || {});
        assert_eq!(outer.len(), 1);
        assert_eq!(got(&b), Some(NoReply::Dropped));
        assert_eq!(got(&a), None);
        // Outside every sink again.
        let c = Arc::new(Slot::default());
        unanswered(c.clone());
        assert_eq!(got(&c), Some(NoReply::Dropped));
    }

    #[test]
    fn resolve_open_fails_what_earlier_polls_and_outer_sinks_held() {
        let (a, b) = (Arc::new(Slot::default()), Arc::new(Slot::default()));
        let mut held = Deferred::new();
        // A poll defers a drop; outside any sink there is nothing to fail.
        collect(&mut held, || unanswered(a.clone()));
        resolve_open(&NoReply::Dropped);
        assert_eq!((got(&a), held.len()), (None, 1));
        // The task's next poll fails it.
        collect(&mut held, || resolve_open(&NoReply::Dropped));
        assert_eq!(got(&a), Some(NoReply::Dropped));
        assert!(held.is_empty());
        collect(&mut held, || {
            unanswered(b.clone());
            // A runtime driven from inside the handler: its own (empty)
            // sink is resolved, then the outer one is open again.
            let mut inner = Deferred::new();
            collect(&mut inner, || resolve_open(&NoReply::Dropped));
            assert_eq!(got(&b), None, "not in the sink that was open");
            resolve_open(&NoReply::Dropped);
        });
        assert_eq!(got(&b), Some(NoReply::Dropped));
        assert!(held.is_empty());
    }
}
