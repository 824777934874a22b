//! Supervision: what happens when an actor fails (a hook returns an error
//! or panics). The supervisor's [`SupervisorStrategy`] decides: restart
//! the actor in place, stop it, or escalate the failure to the
//! supervisor itself. Pure: the restart window takes time as an argument.
//!
//! ```text
//!  failure ──► strategy of the supervisor (the parent's, or the one given
//!              to `spawn_supervised` for a top-level actor)
//!                │
//!   Stop ────────┼──► the actor stops: StopReason::Failed / Panicked
//!   Escalate ────┼──► the actor stops, and its parent fails with
//!                │    "child … escalated" (a top-level actor just stops)
//!   Restart ─────┴──► within the limit? ── no ──► stops: RestartLimitExceeded
//!                          │ yes
//!                          ▼
//!       children stopped, old instance's `stopped`, timers cleared,
//!       backoff wait (messages stay queued), factory(), `started`
//!       (all-for-one: the parent then restarts every sibling too)
//! ```
//!
//! Who decides runs where it is cheapest: each supervised actor carries a
//! copy of its supervisor's strategy and applies it on its own task, so a
//! restart needs no round trip to the parent; the parent hears of it
//! (`ChildEvent`) only for what concerns it: an escalation, and, under
//! all-for-one, a sibling's restart or stop.

use std::{collections::VecDeque, fmt, sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::lifecycle::StopReason;

/// Restarts allowed within [`DEFAULT_RESTART_WINDOW`] by
/// [`SupervisorStrategy::restart`] before the actor is stopped: 10, so a
/// transient fault (a reconnect, a bad message or two) is ridden out,
/// while an actor that fails on every start stops within a second instead
/// of spinning forever (Akka's default is unlimited, Erlang's 1 in 5 s).
pub const DEFAULT_MAX_RESTARTS: u32 = 10;

/// The window [`DEFAULT_MAX_RESTARTS`] counts within: one minute.
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_secs(60);

/// What a supervisor does with a failed actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Directive {
    /// Replace the actor with a fresh instance from its factory, in place:
    /// same path, same mailbox, every ref stays valid.
    Restart,
    /// Stop the actor; watchers see the failure as its reason.
    Stop,
    /// Stop the actor and fail its parent with the failure, as if the
    /// parent's own handler had failed; the parent's supervisor decides
    /// about the parent. A top-level actor has no parent: it stops.
    Escalate,
}

/// A failure as a [`Decider`] sees it: what the hook returned
/// ([`ActorError`](crate::ActorError), the same type), or a
/// [`Panicked`] for a panic.
type Failure = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Chooses the [`Directive`] for one failure (Akka's `Decider`, Erlang's
/// per-child restart type); see [`SupervisorStrategy::with_decider`].
pub type Decider = Arc<dyn Fn(&Failure) -> Directive + Send + Sync + 'static>;

/// The failure a [`Decider`] sees when a hook panicked, so a panic is
/// recognisable (`err.is::<Panicked>()`) and its message readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    /// The panic's message (`"non-string panic payload"` when it was
    /// neither a `&str` nor a `String`).
    pub message: String,
}

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "panicked: {}", self.message)
    }
}

impl std::error::Error for Panicked {}

/// How a supervisor treats its children's failures: a [`Directive`], to
/// whom it applies (the failed child, or all-for-one: every child), a
/// restart limit (Erlang's intensity and period) and an optional
/// exponential backoff between restarts.
///
/// ```
/// use std::time::Duration;
/// use actors::SupervisorStrategy;
/// // Restart at most 3 times in 10 s, waiting 100 ms, 200 ms, 400 ms ...
/// // (at most 5 s) before each restart; the 4th failure stops the actor.
/// let s = SupervisorStrategy::restart()
///     .with_limit(3, Duration::from_secs(10))
///     .with_backoff(Duration::from_millis(100), Duration::from_secs(5));
/// # let _ = s;
/// ```
///
/// The default is [`stop`](Self::stop), as in Akka typed: a failure ends
/// the actor unless restarting was asked for.
#[derive(Clone)]
pub struct SupervisorStrategy {
    directive: Directive,
    all_for_one: bool,
    max_restarts: u32,
    within: Duration,
    backoff: Option<(Duration, Duration)>,
    decider: Option<Decider>,
}

/// Equal when every setting is, and the decider is the same one (or
/// neither has one): closures do not compare.
impl PartialEq for SupervisorStrategy {
    fn eq(&self, other: &Self) -> bool {
        self.directive == other.directive
            && self.all_for_one == other.all_for_one
            && self.max_restarts == other.max_restarts
            && self.within == other.within
            && self.backoff == other.backoff
            && match (&self.decider, &other.decider) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for SupervisorStrategy {}

impl fmt::Debug for SupervisorStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupervisorStrategy")
            .field("directive", &self.directive)
            .field("all_for_one", &self.all_for_one)
            .field("max_restarts", &self.max_restarts)
            .field("within", &self.within)
            .field("backoff", &self.backoff)
            .field("decider", &self.decider.is_some())
            .finish()
    }
}

impl Default for SupervisorStrategy {
    fn default() -> Self {
        Self::stop()
    }
}

impl SupervisorStrategy {
    fn with_directive(directive: Directive) -> Self {
        Self {
            directive,
            all_for_one: false,
            max_restarts: DEFAULT_MAX_RESTARTS,
            within: DEFAULT_RESTART_WINDOW,
            backoff: None,
            decider: None,
        }
    }

    /// Restart a failed actor (one-for-one), at most
    /// [`DEFAULT_MAX_RESTARTS`] times within [`DEFAULT_RESTART_WINDOW`],
    /// without backoff.
    pub fn restart() -> Self {
        Self::with_directive(Directive::Restart)
    }

    /// Stop a failed actor (the default).
    pub fn stop() -> Self {
        Self::with_directive(Directive::Stop)
    }

    /// Stop a failed actor and fail its parent with the failure.
    pub fn escalate() -> Self {
        Self::with_directive(Directive::Escalate)
    }

    /// Apply the directive to every child of the supervisor, not only the
    /// failed one (Erlang's `one_for_all`, Akka's `AllForOneStrategy`): a
    /// restart of one restarts its siblings, a stop (or exceeding the
    /// restart limit) stops them. The restart limit is then the
    /// supervisor's, as Erlang's intensity is: the children share one
    /// window, and each restart of the group counts once in it, whichever
    /// child failed (so `with_limit(3, ..)` allows three group restarts,
    /// not three per child; the siblings' restarts are part of that one).
    /// Per supervisor instance: a restarted supervisor starts a new
    /// window. Meaningless for a top-level actor (its supervisor is the
    /// system): it is then one-for-one.
    pub fn all_for_one(mut self) -> Self {
        self.all_for_one = true;
        self
    }

    /// At most `max_restarts` restarts within any `within`; the failure
    /// after them stops the actor with
    /// [`StopReason::RestartLimitExceeded`]. `0` never restarts.
    pub fn with_limit(mut self, max_restarts: u32, within: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.within = within;
        self
    }

    /// Wait before each restart: `min` the first time in the window, then
    /// twice as long each time, at most `max`. Messages wait in the
    /// mailbox meanwhile (it still takes new ones up to its capacity);
    /// a stop ends the wait.
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = Some((min, max.max(min)));
        self
    }

    /// Chooses the directive per failure (Akka's `Decider`, Erlang's
    /// per-child restart type): `decider` is asked for every failure of a
    /// supervised actor, with what the hook returned, and its answer
    /// replaces the strategy's own directive (which then only names the
    /// strategy). The restart limit, backoff and all-for-one still apply
    /// to the restarts it chooses. A panic reaches it as a [`Panicked`];
    /// other errors are what the hook returned, to downcast. A decider
    /// that panics stops the actor.
    ///
    /// ```
    /// use std::time::Duration;
    /// use actors::{ActorError, Directive, Panicked, SupervisorStrategy};
    /// #[derive(Debug)]
    /// struct Corrupt;
    /// impl std::fmt::Display for Corrupt {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("corrupt state")
    ///     }
    /// }
    /// impl std::error::Error for Corrupt {}
    ///
    /// let s = SupervisorStrategy::restart()
    ///     .with_limit(5, Duration::from_secs(10))
    ///     .with_decider(|err: &ActorError| {
    ///         if err.is::<Corrupt>() {
    ///             Directive::Escalate // the parent knows what to do
    ///         } else if err.is::<Panicked>() {
    ///             Directive::Stop // a bug: do not loop on it
    ///         } else {
    ///             Directive::Restart // I/O and the like: try again
    ///         }
    ///     });
    /// let corrupt: ActorError = Box::new(Corrupt);
    /// assert_eq!(s.directive_for(&corrupt), Directive::Escalate);
    /// ```
    pub fn with_decider<F>(mut self, decider: F) -> Self
    where
        F: Fn(&Failure) -> Directive + Send + Sync + 'static,
    {
        self.decider = Some(Arc::new(decider));
        self
    }

    /// What this strategy does with a failure, without a decider (see
    /// [`directive_for`](Self::directive_for)).
    pub fn directive(&self) -> Directive {
        self.directive
    }

    /// What this strategy does with `failure`: its decider's answer, or
    /// its directive when it has no decider (or the decider panicked:
    /// then [`Directive::Stop`]).
    pub fn directive_for(&self, failure: &Failure) -> Directive {
        let Some(decider) = &self.decider else {
            return self.directive;
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decider(failure)))
            .unwrap_or_else(|_| {
                tracing::error!(failure = %failure, "a supervisor's decider panicked; the actor stops");
                Directive::Stop
            })
    }

    /// The window the restart limit counts within.
    pub(crate) fn within(&self) -> Duration {
        self.within
    }

    /// Whether it applies to every child (see
    /// [`all_for_one`](Self::all_for_one)).
    pub fn is_all_for_one(&self) -> bool {
        self.all_for_one
    }
}

/// What a supervised actor decides after a failure.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Restart after this delay (zero without backoff).
    Restart(Duration),
    Stop,
    Escalate,
    /// The restart limit was reached: this many restarts in the window.
    LimitExceeded(u32),
}

/// The restarts of one actor within its strategy's window. Holds at most
/// `max_restarts` instants.
#[derive(Debug, Default)]
pub(crate) struct Restarts {
    times: VecDeque<Instant>,
}

impl Restarts {
    /// Decides about a failure at `now` for which `strategy` chose
    /// `directive`, recording the restart if it is one.
    pub(crate) fn decide(
        &mut self,
        strategy: &SupervisorStrategy,
        directive: Directive,
        now: Instant,
    ) -> Verdict {
        match directive {
            Directive::Stop => return Verdict::Stop,
            Directive::Escalate => return Verdict::Escalate,
            Directive::Restart => {}
        }
        while let Some(&t) = self.times.front() {
            if now.duration_since(t) >= strategy.within {
                self.times.pop_front();
            } else {
                break;
            }
        }
        let n = self.times.len() as u32;
        if n >= strategy.max_restarts {
            return Verdict::LimitExceeded(n);
        }
        self.times.push_back(now);
        let delay = strategy.backoff.map_or(Duration::ZERO, |(min, max)| {
            // min * 2^n, saturating, at most max.
            let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
            min.saturating_mul(factor).min(max)
        });
        Verdict::Restart(delay)
    }
}

/// What a child tells its parent.
#[derive(Debug)]
pub(crate) enum ChildEvent {
    /// It restarted after a failure of its own.
    Restarted { id: u64 },
    /// It ended (after `stopped` ran and its name was freed); `escalate`:
    /// its failure is the parent's now.
    Terminated {
        id: u64,
        reason: StopReason,
        escalate: bool,
    },
}

/// A parent, as its children reach it (its system queue).
pub(crate) trait Parent: Send + Sync {
    fn child_event(&self, event: ChildEvent);
}

/// A child, as its parent controls it.
pub(crate) trait ChildControl: Send + Sync {
    fn stop(&self);
    /// Restart in place (all-for-one: a sibling failed).
    fn restart(&self);
}

/// Whether `reason` is a failure (as opposed to a stop that was asked
/// for), for all-for-one.
pub(crate) fn is_failure(reason: &StopReason) -> bool {
    matches!(
        reason,
        StopReason::Failed(_) | StopReason::Panicked(_) | StopReason::RestartLimitExceeded(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn stop_and_escalate_never_count() {
        let t0 = Instant::now();
        let mut r = Restarts::default();
        assert_eq!(
            r.decide(&SupervisorStrategy::stop(), Directive::Stop, t0),
            Verdict::Stop
        );
        assert_eq!(
            r.decide(&SupervisorStrategy::escalate(), Directive::Escalate, t0),
            Verdict::Escalate
        );
        assert!(r.times.is_empty());
        assert_eq!(SupervisorStrategy::default(), SupervisorStrategy::stop());
    }

    #[test]
    fn the_limit_counts_restarts_within_the_window_only() {
        let t0 = Instant::now();
        let s = SupervisorStrategy::restart().with_limit(2, 10 * S);
        let mut r = Restarts::default();
        assert_eq!(
            r.decide(&s, Directive::Restart, t0),
            Verdict::Restart(Duration::ZERO)
        );
        assert_eq!(
            r.decide(&s, Directive::Restart, t0 + S),
            Verdict::Restart(Duration::ZERO)
        );
        assert_eq!(
            r.decide(&s, Directive::Restart, t0 + 2 * S),
            Verdict::LimitExceeded(2)
        );
        // The first restart leaves the window: one more is allowed.
        assert_eq!(
            r.decide(&s, Directive::Restart, t0 + 10 * S),
            Verdict::Restart(Duration::ZERO)
        );
        assert_eq!(
            r.decide(&s, Directive::Restart, t0 + 10 * S),
            Verdict::LimitExceeded(2)
        );
        assert!(r.times.len() <= 2, "bounded by the limit");
        let never = SupervisorStrategy::restart().with_limit(0, S);
        assert_eq!(
            Restarts::default().decide(&never, Directive::Restart, t0),
            Verdict::LimitExceeded(0)
        );
    }

    #[test]
    fn a_decider_chooses_by_the_failure_and_a_panic_is_recognisable() {
        #[derive(Debug)]
        struct Fatal;
        impl fmt::Display for Fatal {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("fatal")
            }
        }
        impl std::error::Error for Fatal {}
        let s = SupervisorStrategy::restart().with_decider(|e: &Failure| {
            if e.is::<Fatal>() {
                Directive::Stop
            } else if let Some(p) = e.downcast_ref::<Panicked>() {
                assert_eq!(p.message, "boom");
                Directive::Escalate
            } else {
                Directive::Restart
            }
        });
        let fatal: Failure = Box::new(Fatal);
        let panic: Failure = Box::new(Panicked {
            message: "boom".into(),
        });
        let other: Failure = "io".into();
        assert_eq!(s.directive_for(&fatal), Directive::Stop);
        assert_eq!(s.directive_for(&panic), Directive::Escalate);
        assert_eq!(s.directive_for(&other), Directive::Restart);
        // Without a decider, the directive; a decider that panics stops.
        assert_eq!(
            SupervisorStrategy::restart().directive_for(&fatal),
            Directive::Restart
        );
        let broken = SupervisorStrategy::restart().with_decider(|_: &Failure| panic!("bug"));
        assert_eq!(broken.directive_for(&other), Directive::Stop);
        // Strategies compare their decider by identity.
        assert_eq!(s, s.clone());
        assert_ne!(s, SupervisorStrategy::restart());
        // A stop directive from the decider is not a restart: not counted.
        let mut r = Restarts::default();
        let t0 = Instant::now();
        assert_eq!(r.decide(&s, s.directive_for(&fatal), t0), Verdict::Stop);
        assert!(r.times.is_empty());
    }

    #[test]
    fn backoff_doubles_from_min_to_max() {
        let t0 = Instant::now();
        let s = SupervisorStrategy::restart()
            .with_limit(u32::MAX, 1000 * S)
            .with_backoff(10 * MS, 70 * MS);
        let mut r = Restarts::default();
        let delays: Vec<_> = (0..6)
            .map(|i| match r.decide(&s, Directive::Restart, t0 + i * MS) {
                Verdict::Restart(d) => d.as_millis(),
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(delays, [10, 20, 40, 70, 70, 70]);
        // A huge count saturates rather than overflowing.
        let mut long = Restarts {
            times: (0..40).map(|_| t0).collect(),
        };
        assert_eq!(
            long.decide(&s, Directive::Restart, t0),
            Verdict::Restart(70 * MS)
        );
    }
}
