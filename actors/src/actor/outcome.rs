//! How one instance's run ends ([`Outcome`]): a stop, a failure (a
//! hook's error, or a panic caught by [`guarded`]), or a sibling's failure
//! under an all-for-one supervisor. Kept out of line (`#[cold]`) where the
//! run loop would otherwise carry it.

use std::{any::Any, future::Future, panic::AssertUnwindSafe, task::Poll};

use super::ActorError;
use crate::{dead_letter::DeadLetterReason, lifecycle::StopReason, reply, supervision::Panicked};

/// The text of a panic's payload.
#[cold]
pub(super) fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Runs a hook's future, catching a panic in any of its polls, so that a
/// panic is a failure supervision sees rather than the end of the task.
/// A panic leaves the actor's state unknown: the instance is dropped
/// without `stopped` (see `run_actor`).
///
/// Reply refs dropped unanswered in its polls are held in `held` (see
/// `reply`): the actor's task fails those asks with why, once it knows.
pub(super) async fn guarded<F: Future>(
    fut: F,
    held: &mut reply::Deferred,
) -> Result<F::Output, String> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        // A poll is a scope in which remote sends may be gathered
        // (`poll_scope`); the catch keeps a panic inside it.
        let polled = crate::poll_scope::poll(|| {
            reply::collect(held, || {
                std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)))
            })
        });
        match polled {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(panic_message(&*p))),
        }
    })
    .await
}

/// How one instance's run ended.
pub(super) enum Outcome {
    /// A stop was asked for (or the mailbox closed).
    Stop(StopReason),
    /// A hook failed (`Failed`) or panicked (`Panicked`); `error` is what
    /// the supervisor's decider sees.
    Fail {
        reason: StopReason,
        panicked: bool,
        error: ActorError,
    },
    /// All-for-one: its supervisor restarts it because a sibling failed.
    SiblingFailed,
}

/// A hook's result as an outcome, if it failed.
#[cold]
#[inline(never)]
pub(super) fn failure(r: Result<ActorError, String>) -> Outcome {
    match r {
        Ok(e) => Outcome::Fail {
            reason: StopReason::Failed(e.to_string()),
            panicked: false,
            error: e,
        },
        Err(p) => Outcome::Fail {
            reason: StopReason::Panicked(p.clone()),
            panicked: true,
            error: Box::new(Panicked { message: p }),
        },
    }
}

/// Counts the message whose handling failed as a dead letter (it is not
/// retried).
#[cold]
#[inline(never)]
pub(super) fn handler_failed(
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    type_name: &str,
) {
    registry.dead_letter(type_name, path, &DeadLetterReason::HandlerFailed);
}
