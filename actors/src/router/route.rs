//! Routing on the caller's thread: what the router actor and every
//! handle share (`Shared`), and `tell` and `send` through it, which try
//! the routees in the logic's order so that a refusal moves the message
//! on (see [no silent loss](crate::router#no-silent-loss)).

use std::sync::{
    OnceLock, Weak,
    atomic::{AtomicU64, Ordering},
};

use tokio::sync::watch;

use crate::{
    actor_ref::ActorRef, dead_letter::DeadLetterReason, error::SendError, path::ActorPath,
    registry::Registry,
};

use super::{
    logic::{Logic, RoutingLogic, below, mix, ring_order, ring_owner, smallest_mailbox},
    table::{Routee, Table},
};

/// What the router actor and every handle share.
pub(super) struct Shared<M> {
    /// The routees; the actor writes, callers read.
    pub(super) table: watch::Sender<Table<M>>,
    pub(super) logic: RoutingLogic<M>,
    /// Round robin and smallest mailbox: the next turn. Random: the
    /// generator's state.
    pub(super) counter: AtomicU64,
    /// For dead letters.
    pub(super) registry: Weak<Registry>,
    /// The router actor's path, for dead letters; set once spawned.
    pub(super) path: OnceLock<ActorPath>,
}

impl<M: Send + 'static> Shared<M> {
    /// The first routee to try, of `n` (> 0), for round robin, random and
    /// smallest mailbox.
    fn first(&self, routees: &[Routee<M>]) -> usize {
        let n = routees.len();
        match self.logic.kind {
            Logic::Random(_) => {
                let state = self
                    .counter
                    .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
                // `mix` adds the increment again: this is SplitMix64's
                // next output for the state after the add.
                below(mix(state), n)
            }
            Logic::SmallestMailbox => {
                let turn = self.counter.fetch_add(1, Ordering::Relaxed) as usize % n;
                smallest_mailbox(turn, n, |idx| {
                    let r = &routees[idx].actor;
                    r.is_local().then(|| r.mailbox_len())
                })
            }
            _ => self.counter.fetch_add(1, Ordering::Relaxed) as usize % n,
        }
    }

    /// Routes `msg` now, trying routees in the logic's order.
    pub(super) fn route_now(&self, msg: M) -> Result<(), SendError<M>> {
        let table = self.table.borrow();
        let n = table.routees.len();
        if n == 0 {
            return Err(self.no_routees(msg));
        }
        match &self.logic.kind {
            Logic::Broadcast(clone) => {
                let mut first_err = None;
                let last = n - 1;
                let mut msg = Some(msg);
                for (i, r) in table.routees.iter().enumerate() {
                    let copy = if i == last {
                        msg.take()
                            .expect("the original is kept for the last routee")
                    } else {
                        clone(msg.as_ref().expect("the original is kept until the last"))
                    };
                    if let Err(e) = r.actor.tell(copy) {
                        first_err.get_or_insert(e);
                    }
                }
                first_err.map_or(Ok(()), Err)
            }
            Logic::ConsistentHashing(key) => {
                let hash = mix(key(&msg));
                // The owner first, without the walk's bookkeeping.
                let mut msg = match table.routees[ring_owner(&table.ring, hash)].actor.tell(msg) {
                    Err(SendError::ActorGone(m)) => m,
                    other => return other,
                };
                for idx in ring_order(&table.ring, hash, n).skip(1) {
                    match table.routees[idx].actor.tell(msg) {
                        // Gone but not yet removed: its keys move on the
                        // ring to where they will go anyway.
                        Err(SendError::ActorGone(m)) => msg = m,
                        other => return other,
                    }
                }
                Err(SendError::ActorGone(msg))
            }
            _ => {
                let first = self.first(&table.routees);
                let mut msg = msg;
                let mut refused: Option<fn(M) -> SendError<M>> = None;
                for i in 0..n {
                    match table.routees[(first + i) % n].actor.tell(msg) {
                        Err(SendError::MailboxFull(m)) => {
                            refused.get_or_insert(SendError::MailboxFull);
                            msg = m;
                        }
                        Err(SendError::LinkFull(m)) => {
                            refused.get_or_insert(SendError::LinkFull);
                            msg = m;
                        }
                        Err(SendError::ActorGone(m)) => msg = m,
                        other => return other,
                    }
                }
                let refusal = refused.unwrap_or(SendError::ActorGone);
                Err(refusal(msg))
            }
        }
    }

    /// Routes `msg`, waiting for room at the logic's first choice when
    /// every routee is full.
    pub(super) async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        if let Logic::Broadcast(clone) = self.logic.kind {
            return self.broadcast_send(msg, clone).await;
        }
        let msg = match self.route_now(msg) {
            Err(SendError::MailboxFull(m) | SendError::LinkFull(m)) => m,
            other => return other,
        };
        let target = {
            let table = self.table.borrow();
            let n = table.routees.len();
            if n == 0 {
                return Err(self.no_routees(msg));
            }
            let idx = match &self.logic.kind {
                Logic::ConsistentHashing(key) => ring_owner(&table.ring, mix(key(&msg))),
                _ => self.first(&table.routees),
            };
            table.routees[idx].actor.clone()
        };
        target.send(msg).await
    }

    async fn broadcast_send(&self, msg: M, clone: fn(&M) -> M) -> Result<(), SendError<M>> {
        let targets: Vec<ActorRef<M>> = {
            let table = self.table.borrow();
            table.routees.iter().map(|r| r.actor.clone()).collect()
        };
        let Some((last, rest)) = targets.split_last() else {
            return Err(self.no_routees(msg));
        };
        let mut first_err = None;
        for r in rest {
            if let Err(e) = r.send(clone(&msg)).await {
                first_err.get_or_insert(e);
            }
        }
        if let Err(e) = last.send(msg).await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    #[cold]
    fn no_routees(&self, msg: M) -> SendError<M> {
        if let (Some(registry), Some(path)) = (self.registry.upgrade(), self.path.get()) {
            registry.dead_letter(
                std::any::type_name::<M>(),
                path,
                &DeadLetterReason::NoRoutee,
            );
        }
        SendError::ActorGone(msg)
    }
}
