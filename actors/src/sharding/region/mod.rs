//! The region actor: one per entity type and node. It carries out what
//! the shard state machine (`shard`) decides: it starts, feeds,
//! passivates and stops entities (its children), talks to the other
//! regions through one ordered outbox per region, and reads membership.

use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

mod turn;

use bytes::BytesMut;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::{
    sync::{broadcast, mpsc, oneshot},
    task::JoinHandle,
};

use super::{
    Counters, EntityId, ShardEvent, ShardInfo, ShardPhase, ShardingSettings, ShardingState,
    outbox::{Budget, Kind},
    pause::{Kept, PauseGuard},
    shard::{Action, Envelope, Liveness, Phase, RegionId, Shards, State, Tracker, Wire},
};
use crate::dead_letter::DeadLetterReason;
use crate::{
    actor::{Actor, Ctx},
    actor_ref::ActorRef,
    cluster::{Cluster, MemberState},
    lifecycle::Terminated,
    path::{ActorPath, valid_name},
    serialization::{ManifestBuf, RemoteMessage},
    system::ActorSystem,
    telemetry::ShardingMeters,
};

/// What a region takes: from other regions (serialized), and from this
/// node (never serialized).
#[derive(Serialize, Deserialize)]
#[serde(bound(serialize = "M: Serialize", deserialize = "M: DeserializeOwned"))]
pub(crate) enum RegionMsg<M> {
    /// The shard protocol.
    Shard(Wire<M>),
    /// That region stops hosting: it owns nothing from now on, but still
    /// hands off; answered with `RetireSeen`.
    Retiring(RegionId),
    /// A region (by node) no longer routes to the retiring one.
    RetireSeen(String),
    /// That region holds nothing and is no longer awaited.
    Retired(RegionId),
    /// From this node only. Last, so the wire variants keep their
    /// indexes.
    #[serde(skip)]
    Local(Local<M>),
}

impl<M: RemoteMessage> RemoteMessage for RegionMsg<M> {
    const MANIFEST: &'static str =
        ManifestBuf::concat(&["actors.sharding.Region<", M::MANIFEST, ">"]).as_str();
}

/// Messages from this node.
pub(crate) enum Local<M> {
    /// A user message from an [`EntityRef`](super::EntityRef).
    Send {
        entity: EntityId,
        msg: M,
    },
    /// An entity asks to stop (by its path's elements).
    Passivate(String),
    /// Read membership, run timers.
    Tick,
    State(oneshot::Sender<ShardingState>),
    Retire(oneshot::Sender<bool>),
}

pub(crate) type Factory<E> = Arc<dyn Fn(&EntityId) -> E + Send + Sync>;

/// What [`Region::new`] needs.
pub(crate) struct RegionParts<E> {
    pub(crate) me: RegionId,
    pub(crate) factory: Factory<E>,
    pub(crate) cluster: Cluster,
    pub(crate) settings: ShardingSettings,
    /// The down-removal margin (the settings', else the cluster's).
    pub(crate) margin: std::time::Duration,
    pub(crate) events: broadcast::Sender<ShardEvent>,
    pub(crate) counters: Arc<Counters>,
    /// Set the moment this node downs itself (`Cluster::on_self_down`):
    /// no entity starts or gets a message here any more.
    pub(crate) fenced: Arc<AtomicBool>,
}

struct Entity<M> {
    shard: u32,
    actor: ActorRef<M>,
    /// Stopping (passivation or handoff): messages for it meanwhile, for
    /// its next instance.
    stopping: Option<Vec<Envelope<M>>>,
    last: Instant,
}

/// The ordered queue to one other region, and the bytes it holds
/// (bounded by [`ShardingSettings::outbox_bytes`], see `outbox.rs`).
struct Outbox<M> {
    tx: mpsc::UnboundedSender<(RegionMsg<M>, usize)>,
    budget: Arc<Budget>,
}

/// What a message queued for another region holds in memory: its size
/// in the queue plus, for a user message, its encoded size and its
/// envelope's strings; and whether it may be refused.
fn held<M>(msg: &RegionMsg<M>) -> (Kind, usize) {
    let base = std::mem::size_of::<(RegionMsg<M>, usize)>();
    match msg {
        RegionMsg::Shard(Wire::Deliver { env, .. }) => (
            Kind::User,
            base + env.bytes.max(1) + env.entity.len() + env.origin.len(),
        ),
        _ => (Kind::Protocol, base),
    }
}

/// A retirement in progress ([`Sharding::leave`](super::Sharding::leave)).
struct Retire {
    reply: Option<oneshot::Sender<bool>>,
    seen: BTreeSet<String>,
}

pub(crate) struct Region<E: Actor> {
    type_name: String,
    group: String,
    me: RegionId,
    factory: Factory<E>,
    cluster: Cluster,
    settings: ShardingSettings,
    events: broadcast::Sender<ShardEvent>,
    counters: Arc<Counters>,
    shards: Shards<E::Msg>,
    tracker: Tracker,
    entities: HashMap<EntityId, Entity<E::Msg>>,
    /// Child path elements → entity id.
    by_path: HashMap<String, EntityId>,
    live: HashMap<u32, usize>,
    outboxes: HashMap<RegionId, Outbox<E::Msg>>,
    /// The outboxes' tasks: a retirement waits for them to hand what it
    /// sent to remoting before it reports done (see `check_retire`).
    outbox_tasks: HashMap<RegionId, JoinHandle<()>>,
    /// Regions seen in the hosting group (kept while their member lives,
    /// so a suspect member keeps its shards).
    hosting: BTreeSet<RegionId>,
    leaving: BTreeSet<RegionId>,
    retired: BTreeSet<RegionId>,
    retire: Option<Retire>,
    retiring: bool,
    spawned: u64,
    scratch: BytesMut,
    /// Set when the region starts: where dead letters are counted.
    system: Option<ActorSystem>,
    meters: Option<ShardingMeters>,
    fenced: Arc<AtomicBool>,
    /// Holds deliveries after this process stood still (see `pause.rs`).
    pause: PauseGuard,
    /// What a hold keeps, in arrival order: messages for entities bounded
    /// by [`ShardingSettings::buffer_bytes`], the protocol's by
    /// [`Kept::for_region`].
    kept: Kept<RegionMsg<E::Msg>>,
}

impl<E: Actor> Region<E>
where
    E::Msg: RemoteMessage,
{
    pub(crate) fn new(type_name: &str, p: RegionParts<E>) -> Self {
        // A region turns at least every tick: a tick longer than
        // stable-after must not make every idle gap look like a pause.
        let pause = p.cluster.stable_after().max(p.settings.tick * 3);
        let kept = Kept::for_region(p.settings.buffer_bytes, p.settings.number_of_shards);
        Self {
            type_name: type_name.to_owned(),
            group: format!("sharding-{type_name}"),
            shards: Shards::new(
                p.me.clone(),
                p.settings.buffer_bytes,
                p.settings.handoff_timeout,
            ),
            tracker: Tracker::new(p.margin),
            me: p.me,
            factory: p.factory,
            cluster: p.cluster,
            settings: p.settings,
            events: p.events,
            counters: p.counters,
            entities: HashMap::new(),
            by_path: HashMap::new(),
            live: HashMap::new(),
            outboxes: HashMap::new(),
            outbox_tasks: HashMap::new(),
            hosting: BTreeSet::new(),
            leaving: BTreeSet::new(),
            retired: BTreeSet::new(),
            retire: None,
            retiring: false,
            spawned: 0,
            scratch: BytesMut::new(),
            system: None,
            meters: None,
            fenced: p.fenced,
            pause: PauseGuard::new(Instant::now(), pause, pause),
            kept,
        }
    }

    fn admits(&self, node: &str) -> bool {
        self.settings.hosts.as_ref().is_none_or(|f| f(node))
    }

    /// Reads membership and the hosting group into a view; applies it if
    /// it changed.
    fn recompute(&mut self, ctx: &mut Ctx<Self>, now: Instant) {
        let my_state = self.cluster.myself().state;
        let me_hosts = !self.settings.proxy
            && !self.retiring
            && matches!(
                my_state,
                MemberState::Up | MemberState::Joining | MemberState::Suspect
            )
            && self.admits(&self.me.node);
        for r in self.cluster.group::<RegionMsg<E::Msg>>(&self.group) {
            if let Some(uid) = r.incarnation() {
                self.hosting.insert(RegionId {
                    node: r.path().node().to_owned(),
                    uid,
                });
            }
        }
        let members: Vec<(RegionId, Liveness)> = self
            .cluster
            .members()
            .into_iter()
            .filter(|m| self.admits(&m.node))
            .filter_map(|m| {
                let liveness = match m.state {
                    MemberState::Down | MemberState::Left => Liveness::Gone,
                    MemberState::Removed => return None,
                    _ => Liveness::Live,
                };
                Some((
                    RegionId {
                        node: m.node,
                        uid: m.uid,
                    },
                    liveness,
                ))
            })
            .collect();
        self.hosting
            .retain(|h| members.iter().any(|(r, l)| r == h && *l == Liveness::Live));
        let hosting: BTreeSet<RegionId> = self.hosting.difference(&self.leaving).cloned().collect();
        let view = self
            .tracker
            .view(now, &self.me, me_hosts, &members, &hosting, &self.retired);
        if view != *self.shards.view() {
            tracing::debug!(
                type_name = %self.type_name,
                candidates = view.candidates.len(),
                must_ack = view.must_ack.len(),
                "sharding view changed"
            );
            let mut acts = self.shards.on_view(now, view);
            if self.settings.remember_entities.is_some() {
                // Remembered entities run without a message: take every
                // shard this region owns now.
                for shard in 0..self.settings.number_of_shards {
                    acts.extend(self.shards.claim(now, shard));
                }
            }
            self.apply(ctx, acts);
        }
    }

    /// The encoded size of a message, for buffer bounds; only for shards
    /// that may buffer (an active shard delivers at once).
    fn size(&mut self, shard: u32, msg: &E::Msg) -> usize {
        if self.shards.phase(shard) == Phase::Active {
            return 0;
        }
        self.scratch.clear();
        match msg.encode(&mut self.scratch, usize::MAX) {
            Ok(()) => self.scratch.len(),
            Err(_) => 1,
        }
    }

    fn apply(&mut self, ctx: &mut Ctx<Self>, acts: Vec<Action<E::Msg>>) {
        let mut queue: VecDeque<Action<E::Msg>> = acts.into();
        while let Some(action) = queue.pop_front() {
            let now = Instant::now();
            let follow = match action {
                Action::Deliver { shard, env } => {
                    self.deliver(ctx, shard, env);
                    Vec::new()
                }
                Action::Send { to, msg } => {
                    self.send_to(ctx, &to, RegionMsg::Shard(msg));
                    Vec::new()
                }
                Action::StopEntities { shard } => self.stop_entities(now, shard),
                Action::KillEntities { shard } => {
                    tracing::warn!(type_name = %self.type_name, shard, "sharding: entities did not stop within the handoff timeout; stopping them now");
                    for e in self.entities.values().filter(|e| e.shard == shard) {
                        e.actor.stop();
                    }
                    Vec::new()
                }
                Action::Activated { shard } => {
                    self.counters.activations.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = &self.meters {
                        m.activations.increment(1);
                    }
                    let _ = self.events.send(ShardEvent::Activated { shard });
                    tracing::debug!(type_name = %self.type_name, shard, "shard activated");
                    self.restart_remembered(ctx, shard);
                    Vec::new()
                }
                Action::Released { shard, to } => {
                    self.counters.handoffs.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = &self.meters {
                        m.handoffs.increment(1);
                    }
                    let to = to.map(|r| r.node);
                    tracing::debug!(type_name = %self.type_name, shard, to = ?to, "shard handed off");
                    let _ = self.events.send(ShardEvent::HandedOff { shard, to });
                    Vec::new()
                }
                Action::Dropped { env, reason } => {
                    self.drop_msg(&env.entity, &reason.dead_letter());
                    Vec::new()
                }
            };
            for a in follow.into_iter().rev() {
                queue.push_front(a);
            }
        }
    }

    fn drop_msg(&self, entity: &str, why: &DeadLetterReason) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.meters {
            m.dropped.increment(1);
        }
        self.cluster_system_dead_letter(entity, why);
    }

    fn cluster_system_dead_letter(&self, entity: &str, why: &DeadLetterReason) {
        if let Some(sys) = self.system.as_ref() {
            sys.registry().dead_letter(
                E::Msg::MANIFEST,
                &format_args!("{}/{}", self.type_name, entity),
                why,
            );
        }
    }

    fn send_to(&mut self, ctx: &mut Ctx<Self>, to: &RegionId, mut msg: RegionMsg<E::Msg>) {
        if *to == self.me {
            let _ = ctx.myself().tell(msg);
            return;
        }
        // A message that came while its shard was active here was not
        // measured; the outbox's bound needs its size.
        if let RegionMsg::Shard(Wire::Deliver { env, .. }) = &mut msg
            && env.bytes == 0
        {
            self.scratch.clear();
            env.bytes = match env.msg.encode(&mut self.scratch, usize::MAX) {
                Ok(()) => self.scratch.len(),
                Err(_) => 1,
            };
        }
        if self.outboxes.get(to).is_none_or(|o| o.tx.is_closed()) {
            let (outbox, task) = self.outbox(ctx, to);
            self.outboxes.insert(to.clone(), outbox);
            self.outbox_tasks.insert(to.clone(), task);
        }
        let outbox = &self.outboxes[to];
        let (kind, bytes) = held(&msg);
        if !outbox.budget.take(kind, bytes) {
            // Only user messages are refused.
            if let RegionMsg::Shard(Wire::Deliver { env, .. }) = msg {
                let why = DeadLetterReason::BufferFull(
                    format!("a sharding region's outbox to {}", to.node).into(),
                );
                self.drop_msg(&env.entity, &why);
            }
            return;
        }
        if let Err(mpsc::error::SendError((msg, bytes))) = outbox.tx.send((msg, bytes)) {
            // The outbox task ended (its target did not resolve).
            outbox.budget.release(bytes);
            if let RegionMsg::Shard(Wire::Deliver { env, .. }) = msg {
                let why = DeadLetterReason::Unreachable("a sharding region".into());
                self.drop_msg(&env.entity, &why);
            }
        }
    }

    /// The bytes every outbox holds now.
    fn outbox_bytes(&self) -> usize {
        self.outboxes.values().map(|o| o.budget.used()).sum()
    }

    /// An ordered queue to the region of `to`, with a task that waits for
    /// room at the other end (a remote mailbox's window) message by
    /// message, so that the region never blocks and no message is refused
    /// for a full link; the queue itself is bounded by
    /// [`ShardingSettings::outbox_bytes`] (user messages past it are
    /// dropped in [`send_to`](Self::send_to)). Also returns the task, which
    /// ends once the queue is closed and empty.
    fn outbox(&self, ctx: &mut Ctx<Self>, to: &RegionId) -> (Outbox<E::Msg>, JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<(RegionMsg<E::Msg>, usize)>();
        let budget = Arc::new(Budget::new(self.settings.outbox_bytes));
        let system = ctx.system().clone();
        let path = ActorPath::new(
            Arc::from(to.node.as_str()),
            true,
            ctx.myself().path().elements(),
        );
        let target =
            ActorRef::<RegionMsg<E::Msg>>::for_path_at(&system.inner.node, path.clone(), to.uid);
        let counters = self.counters.clone();
        let meters = self.meters.clone();
        let drained = budget.clone();
        let task = tokio::spawn(async move {
            let Ok(target) = target else { return };
            while let Some((msg, bytes)) = rx.recv().await {
                let lost = matches!(msg, RegionMsg::Shard(Wire::Deliver { .. }));
                let failed = target.send(msg).await.is_err();
                // Handed to the link (bounded on its own), or lost.
                drained.release(bytes);
                if failed && lost {
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = &meters {
                        m.dropped.increment(1);
                    }
                    system.registry().dead_letter(
                        <RegionMsg<E::Msg>>::MANIFEST,
                        &path,
                        &DeadLetterReason::Unreachable("a sharding region".into()),
                    );
                }
            }
        });
        (Outbox { tx, budget }, task)
    }

    fn deliver(&mut self, ctx: &mut Ctx<Self>, shard: u32, env: Envelope<E::Msg>) {
        if self.fenced.load(Ordering::Acquire) {
            // This node is down: its entities were stopped where they
            // stood, and another node runs this shard after its margin.
            self.drop_msg(&env.entity, &DeadLetterReason::ActorStopped);
            return;
        }
        let now = Instant::now();
        if let Some(e) = self.entities.get_mut(&env.entity) {
            if let Some(buf) = &mut e.stopping {
                buf.push(env);
                return;
            }
            e.last = now;
            if let Err(err) = e.actor.tell(env.msg) {
                let why = match err {
                    crate::error::SendError::MailboxFull(_) => {
                        DeadLetterReason::MailboxFull("a sharded entity's".into())
                    }
                    _ => DeadLetterReason::ActorStopped,
                };
                self.drop_msg(&env.entity, &why);
            }
            return;
        }
        let id = env.entity.clone();
        if self.spawn_entity(ctx, shard, &id)
            && let Some(e) = self.entities.get_mut(&id)
            && e.actor.tell(env.msg).is_err()
        {
            self.drop_msg(&id, &DeadLetterReason::ActorStopped);
        }
    }

    /// Starts entity `id` of `shard` here; false if it could not start.
    fn spawn_entity(&mut self, ctx: &mut Ctx<Self>, shard: u32, id: &EntityId) -> bool {
        if self.fenced.load(Ordering::Acquire) {
            return false;
        }
        let name = child_name(id, self.spawned);
        self.spawned += 1;
        let factory = self.factory.clone();
        let for_child = id.clone();
        match ctx.spawn_child(&name, move || factory(&for_child)) {
            Ok(actor) => {
                ctx.watch(&actor);
                self.by_path
                    .insert(actor.path().elements().to_owned(), id.clone());
                *self.live.entry(shard).or_default() += 1;
                self.entities.insert(
                    id.clone(),
                    Entity {
                        shard,
                        actor,
                        stopping: None,
                        last: Instant::now(),
                    },
                );
                if let Some(store) = &self.settings.remember_entities
                    && let Err(e) = store.add(&self.type_name, shard, id)
                {
                    tracing::warn!(type_name = %self.type_name, entity = %id, error = %e, "sharding: could not remember an entity");
                }
                true
            }
            Err(e) => {
                tracing::warn!(type_name = %self.type_name, entity = %id, error = %e, "sharding: could not start an entity");
                false
            }
        }
    }

    fn restart_remembered(&mut self, ctx: &mut Ctx<Self>, shard: u32) {
        let Some(store) = self.settings.remember_entities.clone() else {
            return;
        };
        match store.list(&self.type_name, shard) {
            Ok(ids) => {
                for id in ids {
                    if !self.entities.contains_key(&id) {
                        self.spawn_entity(ctx, shard, &id);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(type_name = %self.type_name, shard, error = %e, "sharding: could not list remembered entities");
            }
        }
    }

    /// Stops every entity of `shard` (each after what is queued); their
    /// passivation buffers go to the shard's buffer first, in order.
    fn stop_entities(&mut self, now: Instant, shard: u32) -> Vec<Action<E::Msg>> {
        let mut follow = Vec::new();
        let mut moved = Vec::new();
        for e in self.entities.values_mut().filter(|e| e.shard == shard) {
            match &mut e.stopping {
                Some(buf) => moved.append(buf),
                None => {
                    e.stopping = Some(Vec::new());
                    let _ = e.actor.stop_after_queued();
                }
            }
        }
        for env in moved {
            follow.extend(self.shards.on_message(now, shard, env));
        }
        if self.live.get(&shard).copied().unwrap_or(0) == 0 {
            follow.extend(self.shards.entities_stopped(now, shard));
        }
        follow
    }

    fn passivate(&mut self, elements: &str, forget: bool) {
        let Some(id) = self.by_path.get(elements) else {
            return;
        };
        let Some(e) = self.entities.get_mut(id) else {
            return;
        };
        if e.stopping.is_none() {
            e.stopping = Some(Vec::new());
            let _ = e.actor.stop_after_queued();
            if forget
                && let Some(store) = &self.settings.remember_entities
                && let Err(err) = store.remove(&self.type_name, e.shard, id)
            {
                tracing::warn!(type_name = %self.type_name, entity = %id, error = %err, "sharding: could not forget an entity");
            }
        }
    }

    fn on_terminated(&mut self, ctx: &mut Ctx<Self>, t: &Terminated) {
        let now = Instant::now();
        let Some(id) = self.by_path.remove(t.path.elements()) else {
            return;
        };
        let Some(e) = self.entities.remove(&id) else {
            return;
        };
        let shard = e.shard;
        if let Some(n) = self.live.get_mut(&shard) {
            *n = n.saturating_sub(1);
        }
        let buffered = e.stopping.unwrap_or_default();
        match self.shards.phase(shard) {
            Phase::Active => {
                // Passivated with messages waiting: the next instance
                // takes them, in order.
                for env in buffered {
                    self.deliver(ctx, shard, env);
                }
            }
            _ => {
                let mut acts = Vec::new();
                for env in buffered {
                    acts.extend(self.shards.on_message(now, shard, env));
                }
                self.apply(ctx, acts);
            }
        }
        if self.live.get(&shard).copied().unwrap_or(0) == 0
            && self.shards.phase(shard) == Phase::HandingOff
        {
            let acts = self.shards.entities_stopped(now, shard);
            self.apply(ctx, acts);
        }
        self.check_retire(ctx);
    }

    fn state(&self) -> ShardingState {
        let mut s = ShardingState::default();
        for (shard, st) in self.shards.states() {
            let entities = self.live.get(&shard).copied().unwrap_or(0);
            let phase = match st {
                State::Active => ShardPhase::Active,
                State::Awaiting { .. } => ShardPhase::Awaiting,
                State::HandingOff { .. } => ShardPhase::HandingOff,
                State::Inactive { .. } => ShardPhase::Inactive,
            };
            let buffered = st.buffered()
                + self
                    .entities
                    .values()
                    .filter(|e| e.shard == shard)
                    .filter_map(|e| e.stopping.as_ref().map(Vec::len))
                    .sum::<usize>();
            if phase == ShardPhase::Inactive && buffered == 0 && entities == 0 {
                continue;
            }
            s.entities += entities;
            s.buffered += buffered;
            s.shards.push(ShardInfo {
                shard,
                phase,
                entities,
                buffered,
            });
        }
        s.shards.sort_by_key(|i| i.shard);
        s.outbox_bytes = self.outbox_bytes();
        s.hosts = self
            .shards
            .view()
            .candidates
            .iter()
            .map(|r| r.node.clone())
            .collect();
        s
    }

    /// Finishes a retirement once nothing is held or buffered here and
    /// every region has stopped routing here.
    fn check_retire(&mut self, ctx: &mut Ctx<Self>) {
        let Some(retire) = &self.retire else { return };
        if retire.reply.is_none() {
            return;
        }
        let idle = self.shards.held() == 0
            && self.shards.states().all(|(_, s)| s.buffered() == 0)
            && self.entities.is_empty();
        // A member that is down or left (awaited only until the margin
        // runs out) cannot say it saw this: waiting for it would hold the
        // leave for the margin, e.g. a member that left before this one
        // joined.
        let seen_all = self
            .shards
            .view()
            .must_ack
            .iter()
            .filter(|r| !self.tracker.is_gone(r))
            .all(|r| retire.seen.contains(&r.node));
        if !seen_all {
            return;
        }
        if !self.retiring {
            // Every region has stopped routing here: only now give the
            // shards up, so that no region with an older view sends them
            // back here while they move.
            self.retiring = true;
            self.recompute(ctx, Instant::now());
            return self.check_retire(ctx);
        }
        if !idle {
            return;
        }
        let others = self.shards.view().must_ack.clone();
        let me = self.me.clone();
        for r in &others {
            self.send_to(ctx, r, RegionMsg::Retired(me.clone()));
        }
        if let Some(retire) = &mut self.retire
            && let Some(reply) = retire.reply.take()
        {
            tracing::debug!(type_name = %self.type_name, "sharding: this node hosts no more");
            // A graceful shutdown stops remoting once this is answered:
            // what the outboxes still queue (`Retired`, releases, relayed
            // messages) would be lost, and the others would wait out the
            // down-removal margin. Close them (later sends, as a proxy,
            // open new ones) and answer once those to live members handed
            // everything on (one to a member that is gone may wait for a
            // link that never frees up).
            let live: Vec<(String, u64)> = self
                .cluster
                .members()
                .into_iter()
                .filter(|m| {
                    !matches!(
                        m.state,
                        MemberState::Down | MemberState::Left | MemberState::Removed
                    )
                })
                .map(|m| (m.node, m.uid))
                .collect();
            self.outboxes.clear();
            let drained: Vec<JoinHandle<()>> = self
                .outbox_tasks
                .drain()
                .filter(|(r, _)| live.iter().any(|(n, u)| *n == r.node && *u == r.uid))
                .map(|(_, t)| t)
                .collect();
            tokio::spawn(async move {
                for task in drained {
                    let _ = task.await;
                }
                let _ = reply.send(true);
            });
        }
    }
}

/// A child name for entity `id`: its id where that is a valid name (made
/// one where not), and a number, so that a new instance never meets the
/// name of one still stopping.
fn child_name(id: &str, n: u64) -> String {
    let mut base: String = id
        .chars()
        .map(|c| {
            if matches!(c, '/' | '#' | '@' | ':' | '$') || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .take(64)
        .collect();
    if base.is_empty() {
        base.push('_');
    }
    let name = format!("{base}~{n}");
    if valid_name(&name) {
        name
    } else {
        format!("e~{n}")
    }
}

/// [`super::passivate`]: tells the entity's region (its parent).
pub(crate) fn passivate<E: Actor>(ctx: &Ctx<E>)
where
    E::Msg: RemoteMessage,
{
    let elements = ctx.myself().path().elements();
    let Some((parent, _)) = elements.rsplit_once('/') else {
        return;
    };
    let Some(target) = ctx.system().registry().lookup(parent) else {
        return;
    };
    if let Some(region) = ActorRef::<RegionMsg<E::Msg>>::from_any(target.as_any()) {
        let _ = region.tell(RegionMsg::Local(Local::Passivate(elements.to_owned())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_names_are_valid_and_unique() {
        assert_eq!(child_name("cart-42", 3), "cart-42~3");
        assert_eq!(child_name("a/b c", 1), "a_b_c~1");
        assert_eq!(child_name("", 0), "_~0");
        assert!(valid_name(&child_name(&"x".repeat(500), 9)));
    }
}
