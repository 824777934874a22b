//! The region's turns: the actor's callbacks, the hold after a pause
//! (`pause.rs`) around them, and what each message does.

use std::{collections::BTreeSet, time::Instant};

use tokio::sync::broadcast;

use super::{Local, Region, RegionMsg, Retire};
use crate::{
    actor::{Actor, ActorResult, Ctx},
    dead_letter::DeadLetterReason,
    lifecycle::Terminated,
    serialization::RemoteMessage,
    sharding::{
        outbox::Kind,
        pause::Turn,
        shard::{Envelope, Wire, shard_of},
    },
    telemetry::ShardingMeters,
};

impl<E: Actor> Actor for Region<E>
where
    E::Msg: RemoteMessage,
{
    type Msg = RegionMsg<E::Msg>;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        self.system = Some(ctx.system().clone());
        self.meters = ShardingMeters::new(&self.me.node, &self.type_name);
        if !self.settings.proxy && self.admits(&self.me.node) {
            self.cluster
                .join_group(&self.group, ctx.myself())
                .await
                .map_err(|e| format!("sharding: cannot join the hosting group: {e}"))?;
        }
        ctx.schedule_repeatedly(self.settings.tick, || RegionMsg::Local(Local::Tick));
        // Membership and group changes read at once, not at the next tick.
        let mut members = self.cluster.subscribe();
        let mut groups = self.cluster.subscribe_groups();
        let me = ctx.myself().clone();
        tokio::spawn(async move {
            loop {
                let closed = tokio::select! {
                    r = members.recv() => matches!(r, Err(broadcast::error::RecvError::Closed)),
                    r = groups.recv() => matches!(r, Err(broadcast::error::RecvError::Closed)),
                };
                // A full mailbox skips a tick; a stopped region ends this.
                let gone = matches!(
                    me.tell(RegionMsg::Local(Local::Tick)),
                    Err(crate::error::SendError::ActorGone(_))
                );
                if closed || gone {
                    return;
                }
            }
        });
        let now = Instant::now();
        self.recompute(ctx, now);
        Ok(())
    }

    async fn handle(&mut self, msg: Self::Msg, ctx: &mut Ctx<Self>) -> ActorResult {
        let (turn, gap) = self.pause.turn(Instant::now());
        if let Some(gap) = gap {
            tracing::warn!(type_name = %self.type_name, ?gap, "sharding: this node did not run for longer than stable-after; its deliveries wait as long again to hear whether it is still a member");
        }
        match turn {
            Turn::Handle => self.on_msg(msg, ctx).await,
            Turn::Keep => {
                self.keep(msg);
                Ok(())
            }
            Turn::Release => {
                for kept in self.kept.take() {
                    self.on_msg(kept, ctx).await?;
                }
                self.on_msg(msg, ctx).await
            }
        }
    }

    async fn terminated(&mut self, t: Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        self.on_terminated(ctx, &t);
        Ok(())
    }
}

impl<E: Actor> Region<E>
where
    E::Msg: RemoteMessage,
{
    /// A message while a hold is on (see `pause.rs`): ticks wait for the
    /// hold's end, state is answered, the rest kept in order; what the
    /// hold's bounds refuse is dropped and counted.
    fn keep(&mut self, msg: RegionMsg<E::Msg>) {
        let (kind, bytes) = match &msg {
            RegionMsg::Local(Local::Tick) => return,
            RegionMsg::Local(Local::State(_)) => {
                if let RegionMsg::Local(Local::State(tx)) = msg {
                    let _ = tx.send(self.state());
                }
                return;
            }
            RegionMsg::Local(Local::Send { entity, msg }) => {
                let shard = shard_of(entity, self.settings.number_of_shards);
                (Kind::User, self.size(shard, msg))
            }
            RegionMsg::Shard(Wire::Deliver { shard, env }) => {
                let shard = shard % self.settings.number_of_shards.max(1);
                (Kind::User, self.size(shard, &env.msg))
            }
            _ => (Kind::Protocol, 0),
        };
        if let Err(refused) = self.kept.keep(msg, kind, bytes) {
            let entity = match &refused {
                RegionMsg::Local(Local::Send { entity, .. }) => entity.as_str(),
                RegionMsg::Shard(Wire::Deliver { env, .. }) => env.entity.as_str(),
                _ => "(the shard protocol)",
            };
            let why = DeadLetterReason::BufferFull(
                "a sharding region holding deliveries after a pause".into(),
            );
            self.drop_msg(entity, &why);
        }
    }

    async fn on_msg(&mut self, msg: RegionMsg<E::Msg>, ctx: &mut Ctx<Self>) -> ActorResult {
        let now = Instant::now();
        let n = self.settings.number_of_shards;
        match msg {
            RegionMsg::Local(Local::Send { entity, msg }) => {
                let shard = shard_of(&entity, n);
                let bytes = self.size(shard, &msg);
                let env = Envelope {
                    entity,
                    msg,
                    origin: self.me.node.clone(),
                    hops: 0,
                    bytes,
                };
                let acts = self.shards.on_message(now, shard, env);
                self.apply(ctx, acts);
            }
            RegionMsg::Shard(Wire::Deliver { shard, mut env }) => {
                let shard = shard % n.max(1);
                env.bytes = self.size(shard, &env.msg);
                let acts = self.shards.on_message(now, shard, env);
                self.apply(ctx, acts);
            }
            RegionMsg::Shard(Wire::Begin {
                shard,
                req,
                requester,
            }) => {
                // A request may come before this node's view has the
                // requester: read membership first.
                self.recompute(ctx, now);
                let acts = self.shards.on_begin(now, shard, req, requester);
                self.apply(ctx, acts);
            }
            RegionMsg::Shard(Wire::Marker(m)) => {
                let acts = self.shards.on_marker(now, m);
                self.apply(ctx, acts);
            }
            RegionMsg::Retiring(r) => {
                self.leaving.insert(r.clone());
                self.recompute(ctx, now);
                let me = self.me.node.clone();
                self.send_to(ctx, &r, RegionMsg::RetireSeen(me));
            }
            RegionMsg::RetireSeen(node) => {
                if let Some(r) = &mut self.retire {
                    r.seen.insert(node);
                }
                self.check_retire(ctx);
            }
            RegionMsg::Retired(r) => {
                self.retired.insert(r);
                self.recompute(ctx, now);
            }
            RegionMsg::Local(Local::Passivate(elements)) => self.passivate(&elements, true),
            RegionMsg::Local(Local::Tick) => {
                self.recompute(ctx, now);
                let acts = self.shards.poll(now);
                self.apply(ctx, acts);
                if let Some(idle) = self.settings.passivate_after {
                    let stale: Vec<String> = self
                        .entities
                        .values()
                        .filter(|e| {
                            e.stopping.is_none() && now.saturating_duration_since(e.last) >= idle
                        })
                        .map(|e| e.actor.path().elements().to_owned())
                        .collect();
                    for elements in stale {
                        self.passivate(&elements, false);
                    }
                }
                self.check_retire(ctx);
                if let Some(m) = &self.meters {
                    let s = self.state();
                    m.shards.set(self.shards.held() as f64);
                    m.entities.set(s.entities as f64);
                    m.buffered.set(s.buffered as f64);
                    m.outbox_bytes.set(s.outbox_bytes as f64);
                }
            }
            RegionMsg::Local(Local::State(tx)) => {
                let _ = tx.send(self.state());
            }
            RegionMsg::Local(Local::Retire(tx)) => {
                self.retire = Some(Retire {
                    reply: Some(tx),
                    seen: BTreeSet::new(),
                });
                if !self.settings.proxy {
                    let _ = self.cluster.leave_group(&self.group, ctx.myself()).await;
                }
                let me = self.me.clone();
                for r in self.shards.view().must_ack.clone() {
                    self.send_to(ctx, &r, RegionMsg::Retiring(me.clone()));
                }
                self.recompute(ctx, now);
                self.check_retire(ctx);
            }
        }
        Ok(())
    }
}
