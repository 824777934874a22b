//! The router actor: it watches the routees, adds and removes them by
//! message, replaces a pool's failed routees, stops a pool's routees with
//! itself, and routes the [`RouterMsg::Route`] messages it gets (from
//! `Router::ask`, or from other nodes). It is the table's only writer.

use std::sync::Arc;

use crate::{
    actor::{Actor, ActorResult, Ctx},
    actor_ref::ActorRef,
    dead_letter::DeadLetterReason,
    error::SendError,
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    reply::{self, NoReply},
};

use super::{messages::RouterMsg, pool::PoolSupervisor, route::Shared, table::Routee};

/// The router actor: management, and routing of [`RouterMsg::Route`].
pub(super) struct RouterActor<M> {
    pub(super) shared: Arc<Shared<M>>,
    pub(super) supervisor: Option<PoolSupervisor<M>>,
}

impl<M: Send + 'static> RouterActor<M> {
    fn change(&self, f: impl FnOnce(&mut Vec<Routee<M>>) -> bool) -> bool {
        self.shared.table.send_if_modified(|t| {
            let changed = f(&mut t.routees);
            if changed {
                t.rebuild();
            }
            changed
        })
    }

    /// Takes the routee at `path` out of the table.
    fn take(&self, path: &ActorPath) -> Option<(ActorRef<M>, Option<usize>)> {
        let mut out = None;
        self.change(|routees| {
            let Some(i) = routees.iter().position(|r| r.actor.path() == path) else {
                return false;
            };
            let r = routees.remove(i);
            out = Some((r.actor, r.slot));
            true
        });
        out
    }
}

impl<M: Send + 'static> Actor for RouterActor<M> {
    type Msg = RouterMsg<M>;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        // Watched outside the table's lock (see the lock order).
        let routees: Vec<ActorRef<M>> = {
            let table = self.shared.table.borrow();
            table.routees.iter().map(|r| r.actor.clone()).collect()
        };
        for r in &routees {
            ctx.watch(r);
        }
        Ok(())
    }

    async fn handle(&mut self, msg: RouterMsg<M>, ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            RouterMsg::Route(m) => {
                // `send` waits for room, so the hop loses nothing; what
                // no routee takes is a dead letter (counted there, or by
                // the routee that stopped), and so is one that does not
                // encode for a remote routee.
                match self.shared.send(m).await {
                    Err(SendError::Serialization(e)) => {
                        if let Some(registry) = self.shared.registry.upgrade() {
                            registry.dead_letter(
                                std::any::type_name::<M>(),
                                ctx.myself().path(),
                                &DeadLetterReason::Unencodable(e.to_string().into()),
                            );
                        }
                    }
                    // An ask in it fails at once with `ActorGone`: no
                    // routee is there to answer.
                    Err(SendError::ActorGone(m)) => {
                        reply::dropping(m, &NoReply::Stopped("router has no routee".to_owned()));
                    }
                    _ => {}
                }
            }
            RouterMsg::Add(actor, ack) => {
                // Only this actor writes the table: what it reads here
                // still holds when it writes below.
                let known = {
                    let table = self.shared.table.borrow();
                    table.routees.iter().any(|r| r.actor == actor)
                };
                if !known {
                    ctx.watch(&actor);
                    self.change(|routees| {
                        routees.push(Routee::member(actor));
                        true
                    });
                }
                let added = !known;
                if let Some(ack) = ack {
                    let _ = ack.tell(added);
                }
            }
            RouterMsg::Remove(path, ack) => {
                let removed = self.take(&path);
                if let Some((actor, slot)) = &removed {
                    ctx.unwatch(actor);
                    if slot.is_some() {
                        actor.stop();
                    }
                }
                if let Some(ack) = ack {
                    let _ = ack.tell(removed.is_some());
                }
            }
        }
        Ok(())
    }

    async fn terminated(&mut self, t: Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        // Not ours any more (removed by message): nothing to do.
        let Some((_, slot)) = self.take(&t.path) else {
            return Ok(());
        };
        if let (Some(_), StopReason::RestartLimitExceeded(why)) = (slot, &t.reason) {
            // A local pool's routee restarts in place; past the pool's
            // limit the pool fails, as a supervisor does.
            return Err(format!("pool routee restart limit reached: {why}").into());
        }
        let failed = matches!(t.reason, StopReason::Panicked(_) | StopReason::Failed(_));
        let (Some(slot), true, Some(supervisor)) = (slot, failed, self.supervisor.as_mut()) else {
            tracing::info!(router = %ctx.myself().path(), routee = %t.path, reason = %t.reason, "routee left the router");
            return Ok(());
        };
        match supervisor.replace(ctx.system(), slot).await? {
            Ok(actor) => {
                tracing::info!(router = %ctx.myself().path(), routee = %t.path, reason = %t.reason, new = %actor.path(), slot, "pool routee failed; replaced");
                ctx.watch(&actor);
                self.change(|routees| {
                    routees.push(Routee::owned(actor, slot));
                    true
                });
            }
            Err(e) => {
                tracing::warn!(router = %ctx.myself().path(), routee = %t.path, slot, error = %e, "pool routee failed and could not be replaced; slot dropped");
            }
        }
        Ok(())
    }

    async fn stopped(&mut self, _reason: &StopReason) {
        let mut owned = Vec::new();
        self.shared.table.send_modify(|t| {
            for r in t.routees.drain(..) {
                if r.slot.is_some() {
                    owned.push(r.actor);
                }
            }
            t.rebuild();
        });
        for actor in owned {
            actor.stop();
        }
    }
}
