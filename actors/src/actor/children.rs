//! How an actor is supervised ([`Supervision`]: what makes a new
//! instance, its supervisor's strategy, its parent) and what a parent does
//! when it hears from a child ([`on_child`]): under all-for-one a restart
//! restarts the siblings and a failure that stopped the child stops them;
//! an escalated failure fails the parent.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::outcome::{Outcome, failure};
use crate::supervision::{
    ChildControl, ChildEvent, Parent, Restarts, SupervisorStrategy, is_failure,
};

/// Makes fresh instances of a supervised actor.
pub(crate) type Factory<A> = Arc<dyn Fn() -> A + Send + Sync>;

/// How an actor is supervised: what makes a new instance (none for an
/// actor spawned as a value: it cannot be restarted), its supervisor's
/// strategy, and its parent (none at the top level) with its id there.
pub(crate) struct Supervision<A> {
    pub(crate) factory: Option<Factory<A>>,
    pub(crate) strategy: SupervisorStrategy,
    pub(crate) parent: Option<Arc<dyn Parent>>,
    /// Under an all-for-one parent: the restart window it shares with its
    /// siblings (see `Ctx::group_restarts`); otherwise its own counts.
    pub(crate) group: Option<Arc<Mutex<Restarts>>>,
}

impl<A> Supervision<A> {
    /// An actor spawned as a value at the top level: a failure stops it.
    pub(super) fn unsupervised() -> Self {
        Self {
            factory: None,
            strategy: SupervisorStrategy::stop(),
            parent: None,
            group: None,
        }
    }
}

/// A child of an actor, as its parent's `Ctx` holds it.
pub(crate) struct Child {
    pub(super) name: Arc<str>,
    pub(super) control: Arc<dyn ChildControl>,
}

/// A parent hears from a child: under all-for-one, a restart restarts
/// the siblings and a failure that stopped the child stops them; an
/// escalated failure fails the parent.
///
/// `children` are the parent's live children by spawn id, and
/// `all_for_one` says whether its strategy is all-for-one.
pub(super) fn on_child(
    children: &mut HashMap<u64, Child>,
    all_for_one: bool,
    event: ChildEvent,
) -> Option<Outcome> {
    match event {
        ChildEvent::Restarted { id } => {
            if all_for_one {
                for (_, c) in children.iter().filter(|(c, _)| **c != id) {
                    c.control.restart();
                }
            }
            None
        }
        ChildEvent::Terminated {
            id,
            reason,
            escalate,
        } => {
            // Unknown: a child of an instance that was restarted since.
            let child = children.remove(&id)?;
            if escalate {
                let why = format!("child {} escalated: {reason}", child.name);
                return Some(failure(Ok(why.into())));
            }
            if all_for_one && is_failure(&reason) {
                for c in children.values() {
                    c.control.stop();
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{
            Arc,
            atomic::{AtomicU32, Ordering},
        },
    };

    use super::{Child, on_child};
    use crate::{
        actor::outcome::Outcome,
        lifecycle::StopReason,
        supervision::{ChildControl, ChildEvent},
    };

    /// A child that counts what its parent tells it.
    #[derive(Default)]
    struct Fake {
        stops: AtomicU32,
        restarts: AtomicU32,
    }

    impl ChildControl for Fake {
        fn stop(&self) {
            self.stops.fetch_add(1, Ordering::Relaxed);
        }
        fn restart(&self) {
            self.restarts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `n` children with ids `0..n`, and their fakes.
    fn family(n: u64) -> (HashMap<u64, Child>, Vec<Arc<Fake>>) {
        let fakes: Vec<Arc<Fake>> = (0..n).map(|_| Arc::default()).collect();
        let children = (0..n)
            .zip(&fakes)
            .map(|(id, f)| {
                let control: Arc<dyn ChildControl> = f.clone();
                let name = format!("c{id}").into();
                (id, Child { name, control })
            })
            .collect();
        (children, fakes)
    }

    fn stops(fakes: &[Arc<Fake>]) -> Vec<u32> {
        fakes
            .iter()
            .map(|f| f.stops.load(Ordering::Relaxed))
            .collect()
    }

    fn restarts(fakes: &[Arc<Fake>]) -> Vec<u32> {
        fakes
            .iter()
            .map(|f| f.restarts.load(Ordering::Relaxed))
            .collect()
    }

    fn ended(id: u64, reason: StopReason, escalate: bool) -> ChildEvent {
        ChildEvent::Terminated {
            id,
            reason,
            escalate,
        }
    }

    #[test]
    fn all_for_one_restarts_the_siblings_of_a_restarted_child() {
        let (mut children, fakes) = family(3);
        let event = ChildEvent::Restarted { id: 1 };
        assert!(on_child(&mut children, true, event).is_none());
        assert_eq!(restarts(&fakes), [1, 0, 1]);
        assert_eq!(children.len(), 3);
        // One-for-one: the others are left alone.
        let (mut children, fakes) = family(3);
        let event = ChildEvent::Restarted { id: 1 };
        assert!(on_child(&mut children, false, event).is_none());
        assert_eq!(restarts(&fakes), [0, 0, 0]);
    }

    #[test]
    fn all_for_one_stops_the_siblings_of_a_child_that_failed_only() {
        let failed = || StopReason::Failed("boom".into());
        let (mut children, fakes) = family(3);
        assert!(on_child(&mut children, true, ended(0, failed(), false)).is_none());
        assert!(!children.contains_key(&0));
        assert_eq!(stops(&fakes), [0, 1, 1]);
        // A stop that was asked for is no failure: the siblings go on.
        let (mut children, fakes) = family(3);
        let event = ended(0, StopReason::Stopped, false);
        assert!(on_child(&mut children, true, event).is_none());
        assert_eq!(children.len(), 2);
        assert_eq!(stops(&fakes), [0, 0, 0]);
        // One-for-one: a failure stops nobody else.
        let (mut children, fakes) = family(3);
        assert!(on_child(&mut children, false, ended(0, failed(), false)).is_none());
        assert_eq!(stops(&fakes), [0, 0, 0]);
    }

    #[test]
    fn an_escalated_failure_fails_the_parent_and_an_unknown_child_is_ignored() {
        let (mut children, fakes) = family(2);
        let event = ended(1, StopReason::Failed("boom".into()), true);
        let Some(Outcome::Fail {
            reason: StopReason::Failed(why),
            panicked: false,
            ..
        }) = on_child(&mut children, false, event)
        else {
            panic!("an escalated failure fails the parent");
        };
        assert!(why.starts_with("child c1 escalated: "), "{why}");
        assert!(!children.contains_key(&1));
        // A child of an instance restarted since: nothing to do.
        let event = ended(7, StopReason::Failed("late".into()), true);
        assert!(on_child(&mut children, true, event).is_none());
        assert_eq!(children.len(), 1);
        assert_eq!(stops(&fakes), [0, 0]);
    }
}
