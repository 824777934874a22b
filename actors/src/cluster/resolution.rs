//! The downing strategy wired to the membership task: the task shows the
//! split-brain resolver ([`downing::Resolver`], pure) its view when it
//! changes, and carries out what it decides: downing the unreachable
//! members, asking a lease, or downing this node (its fences first, then
//! the event, then, by default, the system's shutdown).

use super::{ClusterEvent, Member, MemberState, downing, lock, task::Task, wire::Id};
use crate::system::ActorSystem;

impl Task {
    /// Shows the resolver the view if it changed, and carries out its
    /// decision if one is due; whether it acted.
    pub(super) fn resolve(&mut self) -> bool {
        let now = std::time::Instant::now();
        if std::mem::take(&mut self.view_changed) {
            let me = &self.shared.me;
            let mut view = vec![downing::MemberInfo {
                node: me.node.clone(),
                started_ms: me.started_ms,
                reachable: true,
            }];
            view.extend(self.foca.iter_membership_state().filter_map(|m| {
                let id = m.id();
                let reachable = match m.state() {
                    _ if id.is_seed() => return None,
                    foca::State::Alive => true,
                    foca::State::Suspect => false,
                    foca::State::Down => return None,
                };
                Some(downing::MemberInfo {
                    node: id.node.clone(),
                    started_ms: id.started_ms,
                    reachable,
                })
            }));
            self.resolver.on_view(now, &view);
        }
        match self.resolver.poll(now) {
            Some(d) => {
                self.act(d);
                true
            }
            None => false,
        }
    }

    /// Carries out a downing decision.
    pub(super) fn act(&mut self, decision: downing::Decision) {
        use downing::Decision;
        let strategy = self.resolver.strategy_name();
        match decision {
            Decision::DownUnreachable(nodes) => {
                tracing::info!(
                    strategy,
                    ?nodes,
                    "downing strategy: this side stays; downing the unreachable members"
                );
                let ids: Vec<Id> = self
                    .foca
                    .iter_membership_state()
                    .filter(|m| m.state() != foca::State::Down && nodes.contains(&m.id().node))
                    .map(|m| m.id().clone())
                    .collect();
                let _ = self.foca.apply_many(
                    ids.into_iter()
                        .map(|id| foca::Member::new(id, 0, foca::State::Down)),
                    true,
                    &mut self.rt,
                );
            }
            Decision::DownSelf => self.down_self(strategy, "this side lost"),
            Decision::DownAll(cause) => self.down_self(strategy, cause.label()),
            Decision::TryLease => {
                let Some(lease) = self.resolver.lease().cloned() else {
                    return;
                };
                let me = self.resolver.me().to_owned();
                let answer = self.lease.0.clone();
                tokio::task::spawn_blocking(move || {
                    let held = lease.try_acquire(&me);
                    let _ = answer.try_send(held);
                });
            }
        }
    }

    /// The downing strategy put this node on the losing side: it is down,
    /// its membership stops, and (by default) its system shuts down.
    pub(super) fn down_self(&mut self, strategy: &str, why: &str) {
        for fence in lock(&self.shared.fences).iter() {
            fence();
        }
        let unreachable: Vec<String> = self
            .foca
            .iter_membership_state()
            .filter(|m| m.state() == foca::State::Suspect)
            .map(|m| m.id().node.clone())
            .collect();
        tracing::warn!(
            strategy,
            reason = why,
            ?unreachable,
            shutdown = self.shutdown_when_downed,
            "downing strategy: this node downs itself"
        );
        let me = &self.shared.me;
        let from = {
            let mut view = lock(&self.shared.view);
            std::mem::replace(&mut view.me, MemberState::Down)
        };
        let _ = self.shared.events.send(ClusterEvent {
            member: Member {
                node: me.node.clone(),
                uid: me.uid,
                udp: me.udp,
                state: MemberState::Down,
                started_ms: me.started_ms,
            },
            from: Some(from),
        });
        self.downed = true;
        if self.shutdown_when_downed
            && let Some(inner) = self.system.upgrade()
        {
            let system = ActorSystem { inner };
            tokio::spawn(async move { system.shutdown().await });
        }
    }
}
