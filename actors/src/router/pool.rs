//! A pool's routees: made by a deploy function per slot (a local
//! factory's routees restart in place instead), and a failed one replaced
//! within the pool's [`RestartLimit`] (`PoolSupervisor`).

use std::{collections::VecDeque, future::Future, pin::Pin, sync::Arc};

use crate::{
    actor::{Actor, ActorError},
    actor_ref::ActorRef,
    supervision::{Restarts, SupervisorStrategy},
    system::ActorSystem,
};

use super::{RestartLimit, RouterError, table::Routee};

/// A pool's way of creating a routee for a slot.
pub(super) type DeployFn<M> = Arc<
    dyn Fn(
            ActorSystem,
            usize,
        ) -> Pin<Box<dyn Future<Output = Result<ActorRef<M>, ActorError>> + Send>>
        + Send
        + Sync,
>;

/// A pool's first routees, one per slot from `deploy`.
///
/// # Errors
/// [`RouterError::Deploy`] if one fails (the routees already made are
/// stopped).
pub(super) async fn deploy_all<M: Send + 'static>(
    system: &ActorSystem,
    n: usize,
    deploy: &DeployFn<M>,
) -> Result<Vec<Routee<M>>, RouterError> {
    let mut entries: Vec<Routee<M>> = Vec::with_capacity(n);
    for slot in 0..n {
        match deploy(system.clone(), slot).await {
            Ok(actor) => entries.push(Routee::owned(actor, slot)),
            Err(source) => {
                for e in &entries {
                    e.actor.stop();
                }
                return Err(RouterError::Deploy { slot, source });
            }
        }
    }
    Ok(entries)
}

/// A local pool's `n` routees made by `factory`, each restarted in place
/// (a new `factory()` behind the same mailbox, so its queue is kept) when
/// it fails, the restarts of all of them counted in one window of
/// `limit`. A routee past the limit stops, and the router fails with it
/// (see `RouterActor::terminated`). No replacement deploy is needed.
pub(super) fn local_pool<M, A>(
    system: &ActorSystem,
    n: usize,
    factory: impl Fn() -> A + Send + Sync + 'static,
    limit: RestartLimit,
) -> (Vec<Routee<M>>, PoolSupervisor<M>)
where
    M: Send + 'static,
    A: Actor<Msg = M>,
{
    let factory: crate::actor::Factory<A> = Arc::new(factory);
    let strategy = SupervisorStrategy::restart().with_limit(limit.max_restarts, limit.within);
    let window = Arc::new(std::sync::Mutex::new(Restarts::default()));
    let entries = (0..n)
        .map(|slot| {
            let routee = system.spawn_restarting(factory.clone(), strategy.clone(), window.clone());
            Routee::owned(routee, slot)
        })
        .collect();
    let deploy: DeployFn<M> = Arc::new(move |system: ActorSystem, _slot| {
        let routee = system.spawn_restarting(factory.clone(), strategy.clone(), window.clone());
        Box::pin(async move { Ok(routee) })
    });
    (entries, PoolSupervisor::new(deploy, limit))
}

/// Replaces failed pool routees within a [`RestartLimit`]. Kept apart
/// from routing so that pools can move onto the runtime's own
/// supervision (restart strategies for `ctx.spawn`ed children) in one
/// place: this struct and `RouterActor::terminated`'s call of
/// [`replace`](Self::replace).
pub(super) struct PoolSupervisor<M> {
    deploy: DeployFn<M>,
    limit: RestartLimit,
    /// When the replacements in the current window happened.
    recent: VecDeque<tokio::time::Instant>,
}

impl<M: Send + 'static> PoolSupervisor<M> {
    pub(super) fn new(deploy: DeployFn<M>, limit: RestartLimit) -> Self {
        Self {
            deploy,
            limit,
            recent: VecDeque::new(),
        }
    }

    /// Whether one more restart fits the limit now; counts it if so.
    fn allow(&mut self, now: tokio::time::Instant) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|&t| now.duration_since(t) >= self.limit.within)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.limit.max_restarts as usize {
            return false;
        }
        self.recent.push_back(now);
        true
    }

    /// A fresh routee for `slot`, whose last one failed.
    ///
    /// # Errors
    /// The restart limit is used up (the router must fail), or `Ok(Err)`:
    /// the deploy failed (the slot is dropped).
    pub(super) async fn replace(
        &mut self,
        system: &ActorSystem,
        slot: usize,
    ) -> Result<Result<ActorRef<M>, ActorError>, ActorError> {
        if !self.allow(tokio::time::Instant::now()) {
            return Err(format!(
                "pool routee restart limit reached ({} within {:?})",
                self.limit.max_restarts, self.limit.within
            )
            .into());
        }
        Ok((self.deploy)(system.clone(), slot).await)
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::{DeployFn, PoolSupervisor};
    use crate::router::RestartLimit;

    fn supervisor(max_restarts: u32, within: Duration) -> PoolSupervisor<u64> {
        let deploy: DeployFn<u64> =
            Arc::new(|_, _| Box::pin(async { Err("no deploys in this test".into()) }));
        PoolSupervisor::new(
            deploy,
            RestartLimit {
                max_restarts,
                within,
            },
        )
    }

    #[test]
    fn the_restart_limit_counts_replacements_within_the_window() {
        let window = Duration::from_secs(10);
        let mut s = supervisor(2, window);
        let t0 = tokio::time::Instant::now();
        assert!(s.allow(t0));
        assert!(s.allow(t0 + Duration::from_secs(1)));
        // A third within the window is refused, and not counted.
        assert!(!s.allow(t0 + Duration::from_secs(9)));
        // The first has left the window: one more fits.
        assert!(s.allow(t0 + window));
        assert!(!s.allow(t0 + window));
        // Both of the window's have left it.
        assert!(s.allow(t0 + window + window));
    }

    #[test]
    fn a_zero_limit_allows_no_replacement() {
        let mut s = supervisor(0, Duration::from_secs(60));
        assert!(!s.allow(tokio::time::Instant::now()));
    }
}
