//! The membership task: one per node, it owns foca, the UDP socket and
//! foca's timers, and runs the event loop ([`Task::run`]). It opens and
//! seals packets, takes the handles' commands and remoting's verdicts,
//! carries out what foca asks for, and tells subscribers what changed
//! (by the rule in `view`). Its downing wiring is in `resolution`.

use std::{
    collections::{BinaryHeap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, atomic::Ordering},
    time::Duration,
};

use bytes::BytesMut;
use foca::{AccumulatingRuntime, Timer};
use tokio::{
    net::UdpSocket,
    sync::{broadcast, mpsc},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::{
    ClusterError, ClusterEvent, GroupEvent, Member, MemberState,
    contact::{AloneWarning, LastKnown, announce_targets},
    downing,
    groups::OwnEntries,
    lock,
    shared::{Cmd, Shared},
    suspicion::{self, Swim},
    view,
    wire::{self, Id, KIND_LEAVE, KIND_SWIM, WireError},
};
use crate::remote::RemoteEvent;

/// A foca timer, due at `at`; the heap pops the earliest first.
pub(super) struct Due {
    at: Instant,
    seq: u64,
    timer: Timer<Id>,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The membership task's state.
pub(super) struct Task {
    pub(super) foca: Swim,
    pub(super) rt: AccumulatingRuntime<Id>,
    pub(super) socket: UdpSocket,
    pub(super) keys: Vec<[u8; 32]>,
    /// The seeds' addresses, as last resolved (without this node's).
    pub(super) seeds: Vec<SocketAddr>,
    /// The seed names, shared with the resolver task.
    pub(super) seed_names: Arc<Mutex<Vec<String>>>,
    /// Asks the resolver task for a fresh resolution (it paces itself).
    pub(super) resolve: mpsc::Sender<()>,
    /// The last members that went away, contacted while this node knows
    /// no live member.
    pub(super) last_known: LastKnown,
    /// When a node still alone warns that no seed answered.
    pub(super) alone_warning: AloneWarning,
    /// The socket's bound address (this node's own, besides `me.udp`).
    pub(super) bound: SocketAddr,
    pub(super) timers: BinaryHeap<Due>,
    pub(super) seq: u64,
    pub(super) shared: Arc<Shared>,
    pub(super) remoting: std::sync::Weak<crate::remote::Remoting>,
    /// Incarnations that told us they leave (bounded by the members that
    /// can authenticate; cleared when they are forgotten).
    pub(super) left: HashSet<(String, u64)>,
    /// The last state handed to subscribers, per node: the view's shadow
    /// with the full identity.
    pub(super) known: view::Known,
    pub(super) packet: BytesMut,
    pub(super) max_packet: usize,
    /// This node's entries, by group.
    pub(super) own: OwnEntries,
    /// The member bound foca's codec checks, resynced with foca's table.
    pub(super) admission: Arc<wire::Admission>,
    /// Members held suspect, to tell them when they talk to us.
    pub(super) suspects: suspicion::Suspects,
    /// Metric handles, if a recorder was installed at join.
    pub(super) meters: Option<crate::telemetry::ClusterMeters>,
    /// The split-brain resolver, fed the view when it changes.
    pub(super) resolver: downing::Resolver,
    /// The membership view changed since the resolver last saw it.
    pub(super) view_changed: bool,
    /// A lease's answer (`DowningStrategy::LeaseMajority`).
    pub(super) lease: (mpsc::Sender<bool>, mpsc::Receiver<bool>),
    /// The downing strategy put this node on the losing side: the task
    /// ends.
    pub(super) downed: bool,
    /// When the task last carried out what foca asked for.
    pub(super) last_beat: Instant,
    /// When it last ran again after standing still for `stable_after` or
    /// more (the process was paused): long enough for the others to have
    /// downed it.
    pub(super) woke_at: Option<Instant>,
    pub(super) shutdown_when_downed: bool,
    /// The system, to shut down when downed.
    pub(super) system: std::sync::Weak<crate::system::SystemInner>,
}

impl Task {
    pub(super) async fn run(
        mut self,
        announce_every: Duration,
        publish_every: Duration,
        mut resolved: mpsc::Receiver<Vec<SocketAddr>>,
        mut cmds: mpsc::UnboundedReceiver<Cmd>,
        mut remote: broadcast::Receiver<RemoteEvent>,
        cancel: CancellationToken,
    ) {
        let mut buf = vec![0u8; 65_536];
        let mut announce = tokio::time::interval(announce_every);
        announce.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Metrics go out once per probe period, not per packet.
        let mut publish = tokio::time::interval(publish_every);
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = self.timers.peek().map(|d| d.at);
            let decide_at = self.resolver.next_deadline().map(Instant::from_std);
            tokio::select! {
                () = sleep_until(decide_at), if decide_at.is_some() => {}
                Some(held) = self.lease.1.recv() => {
                    if let Some(d) = self.resolver.lease_result(held) {
                        self.act(d);
                    }
                }
                r = self.socket.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        self.on_packet(&buf[..n], from);
                    }
                }
                Some(addrs) = resolved.recv() => self.set_seeds(addrs),
                () = sleep_until(next), if next.is_some() => self.on_timers(),
                _ = announce.tick() => self.announce(),
                _ = publish.tick(), if self.meters.is_some() => self.publish_metrics(),
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Leave(done)) => {
                        self.leave();
                        // The socket is closed when `leave` returns.
                        drop(self);
                        let _ = done.send(());
                        return;
                    }
                    Some(Cmd::Rejoin(names)) => {
                        self.rejoin(names);
                    }
                    Some(Cmd::Group { group, entry, join, done }) => {
                        let r = self.group(&group, entry, join);
                        if let Some(done) = done {
                            let _ = done.send(r);
                        }
                    }
                    // Every handle dropped.
                    None => return,
                },
                ev = remote.recv() => match ev {
                    Ok(RemoteEvent::Quarantined { node, uid, .. }) => self.quarantined(&node, uid),
                    Ok(RemoteEvent::Unreachable { node, uid }) => self.unreachable(&node, uid),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = cancel.cancelled() => return,
            }
            self.drain();
            if self.resolve() {
                self.drain();
            }
            if self.downed {
                return;
            }
        }
    }

    pub(super) fn on_packet(&mut self, packet: &[u8], from: SocketAddr) {
        let shared = self.shared.clone();
        let stats = &shared.stats;
        stats
            .bytes_in
            .fetch_add(packet.len() as u64, Ordering::Relaxed);
        let (kind, payload) = match wire::open(&self.keys, packet) {
            Ok(p) => p,
            Err(e) => return self.refused(&e, from),
        };
        let result = match kind {
            KIND_LEAVE => wire::decode_leave(payload).and_then(|id| self.on_leave(id)),
            _ => suspicion::handle(
                &mut self.foca,
                &mut self.rt,
                &mut self.suspects,
                &shared.me,
                kind,
                payload,
            )
            .map(|reply| {
                if let Some((to, kind, notice)) = reply {
                    self.send(to, kind, &notice);
                }
            }),
        };
        match result {
            Ok(()) => {
                stats.packets_in.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.refused(&e, from),
        }
    }

    /// Counts a refused packet and logs it, sampled, with the sender's
    /// address (where a wrong secret is looked for).
    #[cold]
    fn refused(&self, e: &WireError, from: SocketAddr) {
        let stats = &self.shared.stats;
        let n = match e {
            WireError::Unauthenticated => stats.unauthenticated.fetch_add(1, Ordering::Relaxed),
            WireError::Full(_) => stats.full.fetch_add(1, Ordering::Relaxed),
            _ => stats.malformed.fetch_add(1, Ordering::Relaxed),
        } + 1;
        // Sampled: a flood of bad packets logs a few lines.
        static REFUSED: transport::LogLimit = transport::LogLimit::new();
        if let Some(s) = REFUSED.sample() {
            let hint = if matches!(e, WireError::Unauthenticated) {
                "the sender does not share this node's secret (or the packet was altered)"
            } else {
                "not a membership packet of this version"
            };
            tracing::warn!(%from, error = %e, refused = n, suppressed = s.suppressed, hint, "membership packet refused");
        }
    }

    /// A member leaves. Its notice names one membership of it: a notice
    /// of an identity this node does not hold (an earlier membership of a
    /// node that joined again, replayed or late, or a member already
    /// forgotten) is refused.
    fn on_leave(&mut self, id: Id) -> Result<(), WireError> {
        if id == self.shared.me || id.is_seed() {
            return Err(WireError::Decode(format!(
                "a leave notice for {id:?}, which is not a member"
            )));
        }
        let known = self.foca.iter_membership_state().any(|m| m.id() == &id);
        if !known {
            return Err(WireError::Decode(format!(
                "a leave notice for {id:?}, an identity this node does not hold"
            )));
        }
        self.left.insert((id.node.clone(), id.uid));
        let _ = self.foca.apply_many(
            std::iter::once(foca::Member::new(id, 0, foca::State::Down)),
            true,
            &mut self.rt,
        );
        Ok(())
    }

    /// Remoting quarantined an incarnation: it is down here too.
    pub(super) fn quarantined(&mut self, node: &str, uid: u64) {
        let id = self
            .foca
            .iter_membership_state()
            .find(|m| m.id().node == node && m.id().uid == uid && m.state() != foca::State::Down)
            .map(|m| m.id().clone());
        if let Some(id) = id {
            let _ = self.foca.apply_many(
                std::iter::once(foca::Member::new(id, 0, foca::State::Down)),
                true,
                &mut self.rt,
            );
        }
    }

    pub(super) fn on_timers(&mut self) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = self.timers.pop() {
                let _ = suspicion::handle_timer(&mut self.foca, &mut self.rt, d.timer);
            }
        }
    }

    /// Changes this node's entries of `group` and disseminates them.
    fn group(&mut self, group: &str, entry: String, join: bool) -> Result<(), ClusterError> {
        // Fits a packet with room for a header and a few updates.
        let limit = self.max_packet.saturating_sub(wire::HEADER_LEN + 400);
        let me = (self.shared.me.node.as_str(), self.shared.me.uid);
        if let Some(item) = self.own.change(me, group, entry, join, limit)? {
            let _ = self.foca.add_broadcast(&item.encode());
        }
        Ok(())
    }

    /// Disseminates all of this node's groups again (a member came up:
    /// it learns them; gossip that was lost is made good).
    fn rebroadcast(&mut self) {
        for item in self.own.items(&self.shared.me.node, self.shared.me.uid) {
            let _ = self.foca.add_broadcast(&item.encode());
        }
    }

    /// Contacts every seed that is not a live member, and, while this node
    /// knows no live member, the members it knew last
    /// ([`announce_targets`]); warns, paced, while it is alone.
    pub(super) fn announce(&mut self) {
        let live: HashSet<SocketAddr> = self.foca.iter_members().map(|m| m.id().udp).collect();
        let alone = live.is_empty();
        let targets = announce_targets(&self.seeds, &live, &self.last_known);
        let missing_seed = self.seeds.iter().any(|s| !live.contains(s))
            || self.seeds.len() < lock(&self.seed_names).len();
        if missing_seed {
            // Paced by the resolver; a full channel means one is pending.
            let _ = self.resolve.try_send(());
        }
        for t in targets {
            tracing::trace!(to = %t, "announcing to a seed or last-known member");
            let _ = self.foca.announce(Id::seed(t), &mut self.rt);
        }
        let now = Instant::now();
        if let Some(waited) = self
            .alone_warning
            .poll(now, alone && !self.seeds.is_empty())
        {
            tracing::warn!(
                seeds = ?self.seeds,
                ?waited,
                "no seed has answered: are they up and reachable over UDP, and do they share this node's secret?"
            );
        }
    }

    /// The resolver's latest addresses for the seed names.
    pub(super) fn set_seeds(&mut self, mut addrs: Vec<SocketAddr>) {
        addrs.retain(|a| *a != self.shared.me.udp && *a != self.bound);
        addrs.sort();
        addrs.dedup();
        if addrs != self.seeds {
            tracing::debug!(seeds = ?addrs, "seed addresses resolved");
        }
        self.seeds = addrs;
    }

    /// `Cluster::rejoin`: new seed names, contacted at once where they are
    /// addresses, and resolved in the background otherwise.
    pub(super) fn rejoin(&mut self, names: Vec<String>) {
        let literal: Vec<SocketAddr> = names.iter().filter_map(|n| n.parse().ok()).collect();
        *lock(&self.seed_names) = names;
        self.set_seeds(literal);
        let _ = self.resolve.try_send(());
        self.alone_warning.restart(Instant::now());
        self.announce();
    }

    /// Remoting judged incarnation `uid` of `node` unreachable (its link
    /// was lost and its address refuses connections, or its heartbeats
    /// stopped): membership suspects it at once instead of a probe round
    /// later, and gossips the suspicion. A live member refutes it as any
    /// suspicion; only the downing strategy turns it into down.
    pub(super) fn unreachable(&mut self, node: &str, uid: u64) {
        let found = self
            .foca
            .iter_membership_state()
            .find(|m| {
                m.id().node == node
                    && (uid == 0 || m.id().uid == uid)
                    && m.state() == foca::State::Alive
            })
            .map(|m| (m.id().clone(), m.incarnation()));
        if let Some((id, incarnation)) = found {
            tracing::debug!(node = %transport::PeerText(&id.node), uid = id.uid, incarnation, "remoting judged the member unreachable: suspecting it");
            let _ = self.foca.apply_many(
                std::iter::once(foca::Member::new(id, incarnation, foca::State::Suspect)),
                true,
                &mut self.rt,
            );
        }
    }

    pub(super) fn leave(&mut self) {
        // Subscribers on this node hear of its own leave too (a singleton
        // hosted here stops and hands over on it).
        self.set_own_state(MemberState::Leaving);
        let notice = wire::encode_leave(&self.shared.me);
        let targets: Vec<SocketAddr> = self.foca.iter_members().map(|m| m.id().udp).collect();
        for t in targets {
            self.send(t, KIND_LEAVE, &notice);
        }
        let _ = self.foca.leave_cluster(&mut self.rt);
        self.drain();
        self.set_own_state(MemberState::Left);
    }

    /// Sets this node's own state and tells subscribers.
    fn set_own_state(&mut self, state: MemberState) {
        let me = &self.shared.me;
        let from = std::mem::replace(&mut lock(&self.shared.view).me, state);
        if from == state {
            return;
        }
        let _ = self.shared.events.send(ClusterEvent {
            member: Member {
                node: me.node.clone(),
                uid: me.uid,
                udp: me.udp,
                state,
                started_ms: me.started_ms,
            },
            from: Some(from),
        });
    }

    fn send(&mut self, to: SocketAddr, kind: u8, payload: &[u8]) {
        wire::seal(&self.keys[0], kind, payload, &mut self.packet);
        if self.packet.len() > self.max_packet.max(payload.len() + wire::HEADER_LEN) {
            return;
        }
        // UDP: a full socket buffer drops the packet, as the network may.
        if self.socket.try_send_to(&self.packet, to).is_ok() {
            let s = &self.shared.stats;
            s.packets_out.fetch_add(1, Ordering::Relaxed);
            s.bytes_out
                .fetch_add(self.packet.len() as u64, Ordering::Relaxed);
        }
    }

    /// Carries out what foca asked for, then tells subscribers what
    /// changed.
    pub(super) fn drain(&mut self) {
        // The task runs at least once a probe period: a longer gap means
        // the process stood still (SIGSTOP, a VM pause).
        let now = Instant::now();
        if now.saturating_duration_since(self.last_beat) >= self.shared.stable_after {
            self.woke_at = Some(now);
        }
        self.last_beat = now;
        while let Some((to, data)) = self.rt.to_send() {
            self.send(to.udp, KIND_SWIM, &data);
        }
        let now = Instant::now();
        while let Some((delay, timer)) = self.rt.to_schedule() {
            self.seq += 1;
            self.timers.push(Due {
                at: now + delay,
                seq: self.seq,
                timer,
            });
        }
        let mut told_down = false;
        while let Some(n) = self.rt.to_notify() {
            // Defunct but not leaving: its identity cannot be renewed, so
            // it neither probes nor answers probes again; a restart rejoins.
            if matches!(n, foca::OwnedNotification::Defunct)
                && lock(&self.shared.view).me != MemberState::Leaving
            {
                tracing::warn!(node = %transport::PeerText(&self.shared.me.node), "a member declared this node down: membership is defunct until restart");
                told_down = true;
            }
        }
        // Woken from a pause long enough for the others to down it, and
        // told so: they run its shards and singletons once their margin
        // is over, so it is down here too and what it hosts stops at
        // once, instead of running on beside them until its own strategy
        // decides (stable_after later). Only after such a pause: foca
        // also turns a running node undead when two members briefly hold
        // each other down while they converge, and such a node runs on
        // as before.
        let member = matches!(
            lock(&self.shared.view).me,
            MemberState::Joining | MemberState::Up | MemberState::Suspect
        );
        let woke = self
            .woke_at
            .is_some_and(|w| now.saturating_duration_since(w) < self.shared.stable_after);
        if told_down && woke && member && !self.downed {
            self.down_self("a member's", "a member declared this node down");
        }
        self.publish();
    }

    /// Compares foca's member table with what subscribers were told.
    fn publish(&mut self) {
        // Forgotten members free their room.
        self.admission.resync(
            self.shared.me.udp,
            self.foca.iter_membership_state().map(|m| m.id().udp),
        );
        self.suspects.resync(self.foca.iter_membership_state());
        let left = &self.left;
        let table = self
            .foca
            .iter_membership_state()
            .filter(|m| !m.id().is_seed())
            .map(|m| {
                let id = m.id();
                let gone =
                    m.state() == foca::State::Down && left.contains(&(id.node.clone(), id.uid));
                (id, view::state_of(m.state(), gone))
            });
        let changes = view::changes(&self.known, table);
        if changes.is_empty() {
            self.group_events();
            return;
        }
        self.view_changed = true;
        let remoting = self.remoting.upgrade();
        let mut rebroadcast = false;
        let shared = self.shared.clone();
        let mut view = lock(&shared.view);
        if view.me == MemberState::Joining && self.foca.num_members() > 0 {
            view.me = MemberState::Up;
        }
        for (id, from, state) in changes {
            let member = Member {
                node: id.node.clone(),
                uid: id.uid,
                udp: id.udp,
                state,
                started_ms: id.started_ms,
            };
            if state == MemberState::Removed {
                if self.known.get(&id.node).is_some_and(|(k, _)| *k == id) {
                    self.known.remove(&id.node);
                    view.members.remove(&id.node);
                }
                self.left.remove(&(id.node.clone(), id.uid));
            } else {
                self.known.insert(id.node.clone(), (id.clone(), state));
                view.members.insert(id.node.clone(), member.clone());
            }
            // A member that left is not quarantined: it is still
            // delivering what it had queued, and says goodbye on its
            // links when it shuts down.
            if state == MemberState::Down {
                self.last_known.remember(id.udp);
                if let Some(r) = &remoting {
                    r.quarantine_incarnation(&id.node, id.uid, "member down");
                }
            }
            if matches!(
                state,
                MemberState::Down | MemberState::Left | MemberState::Removed
            ) {
                lock(&self.shared.groups).drop_member(&id.node, id.uid);
            } else {
                lock(&self.shared.groups).touch_member(&id.node, id.uid);
            }
            if state == MemberState::Up && from.is_none() {
                rebroadcast = true;
            }
            tracing::info!(node = %transport::PeerText(&id.node), uid = id.uid, %state, "cluster member");
            let _ = self.shared.events.send(ClusterEvent { member, from });
        }
        drop(view);
        if rebroadcast {
            self.rebroadcast();
        }
        self.group_events();
    }

    /// Publishes the membership counters, the members by state and the
    /// group entries through the metric handles.
    fn publish_metrics(&mut self) {
        let Some(meters) = self.meters.as_mut() else {
            return;
        };
        let entries = lock(&self.shared.groups).len();
        let states = self.known.values().map(|(_, state)| *state);
        meters.publish(&self.shared.stats.sample(states, entries));
    }

    /// Tells group subscribers which groups changed.
    fn group_events(&mut self) {
        let mut changed = std::mem::take(&mut lock(&self.shared.groups).changed);
        if changed.is_empty() {
            return;
        }
        changed.sort();
        changed.dedup();
        for group in changed {
            let _ = self.shared.group_events.send(GroupEvent { group });
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::PoisonError};

    use foca::Foca;
    use rand::{SeedableRng, rngs::SmallRng};

    use super::*;
    use crate::{
        cluster::{ClusterConfig, DowningStrategy, groups, stats::Stats, view::View, wire::Codec},
        system::ActorSystem,
    };

    const KEY: [u8; 32] = [3; 32];

    fn id(name: &str, port: u16, uid: u64, started_ms: u64) -> Id {
        Id {
            node: format!("{name}@127.0.0.1:{port}"),
            uid,
            udp: SocketAddr::from(([127, 0, 0, 1], port)),
            started_ms,
        }
    }

    /// A membership task for `me`, driven by hand: nothing runs it.
    async fn task_for(me: Id) -> Task {
        let node = me.node.clone();
        let system = ActorSystem::local("t").expect("a valid name");
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("binds");
        let table = Arc::new(Mutex::new(groups::Table::default()));
        let shared = Arc::new(Shared {
            me: me.clone(),
            node: system.inner.node.clone(),
            groups: table.clone(),
            group_events: broadcast::channel(16).0,
            view: Mutex::new(View {
                members: BTreeMap::new(),
                me: MemberState::Joining,
            }),
            events: broadcast::channel(16).0,
            stats: Stats::default(),
            seed_names: Arc::default(),
            seeds_configured: false,
            stable_after: Duration::from_secs(10),
            settle: Duration::ZERO,
            fences: Mutex::new(Vec::new()),
        });
        let admission = Arc::new(wire::Admission::new(16, me.udp));
        Task {
            foca: Foca::with_custom_broadcast(
                me,
                ClusterConfig::new().foca(),
                SmallRng::seed_from_u64(1),
                Codec::bounded(admission.clone()),
                groups::Handler(table),
            ),
            rt: AccumulatingRuntime::new(),
            socket,
            keys: vec![KEY],
            seeds: Vec::new(),
            seed_names: Arc::default(),
            resolve: mpsc::channel(1).0,
            last_known: LastKnown::default(),
            alone_warning: AloneWarning::new(Instant::now()),
            bound: SocketAddr::from(([127, 0, 0, 1], 0)),
            timers: BinaryHeap::new(),
            seq: 0,
            shared,
            remoting: std::sync::Weak::new(),
            left: HashSet::new(),
            known: BTreeMap::new(),
            packet: BytesMut::new(),
            max_packet: 1400,
            own: OwnEntries::default(),
            admission,
            suspects: suspicion::Suspects::default(),
            meters: None,
            resolver: downing::Resolver::new(
                DowningStrategy::KeepMajority,
                Duration::from_secs(10),
                None,
                node,
            ),
            view_changed: true,
            lease: mpsc::channel(1),
            downed: false,
            last_beat: Instant::now(),
            woke_at: None,
            shutdown_when_downed: false,
            system: std::sync::Weak::new(),
        }
    }

    fn state_of(task: &Task, node: &str) -> Option<(u64, MemberState)> {
        lock(&task.shared.view)
            .members
            .get(node)
            .map(|m| (m.uid, m.state))
    }

    #[tokio::test]
    async fn a_leave_notice_names_one_membership_and_a_replay_is_refused() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let b1 = id("b", 9002, 7, 10);
        // b's system leaves and joins again: the same node and uid, a
        // later start.
        let b2 = Id {
            started_ms: 11,
            ..b1.clone()
        };
        let leave = |id: &Id| {
            let mut p = BytesMut::new();
            wire::seal(&KEY, KIND_LEAVE, &wire::encode_leave(id), &mut p);
            p
        };
        let refused = |task: &Task| task.shared.stats.malformed.load(Ordering::Relaxed);
        alive(&mut task, &b1);
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        task.on_packet(&leave(&b1), b1.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Left)));
        alive(&mut task, &b2);
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        // The first membership's notice again (replayed, or a late copy):
        // refused and counted; b stays up.
        task.on_packet(&leave(&b1), b1.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        assert_eq!(refused(&task), 1);
        // The new membership's own notice is taken.
        task.on_packet(&leave(&b2), b2.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Left)));
        assert_eq!(refused(&task), 1);
    }

    #[tokio::test]
    async fn a_node_told_it_is_down_warns_and_after_a_pause_is_down_but_not_when_it_leaves() {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                lock(&self.0).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let warned = |task: &mut Task, down: bool| {
            let out = Captured::default();
            let writer = out.clone();
            // At debug, like the other test that collects log lines: tests
            // run in parallel, and a scoped subscriber of a lower level
            // beside one of a higher level can hide the higher one's events
            // (tracing's global level hint).
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_max_level(tracing::Level::DEBUG)
                .with_ansi(false)
                .finish();
            let _one_at_a_time = suspicion::LOG_CAPTURE
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            tracing::subscriber::with_default(subscriber, || {
                let b = id("b", 9002, 7, 10);
                let _ = task.foca.apply_many(
                    std::iter::once(foca::Member::alive(b)),
                    false,
                    &mut task.rt,
                );
                if down {
                    // What a member's TurnUndead makes foca do.
                    let me = task.shared.me.clone();
                    let _ = task.foca.apply_many(
                        std::iter::once(foca::Member::new(me, 0, foca::State::Down)),
                        false,
                        &mut task.rt,
                    );
                    task.drain();
                } else {
                    task.leave();
                }
            });
            let text = String::from_utf8(lock(&out.0).clone()).expect("utf-8");
            text.contains("membership is defunct until restart")
        };
        let mut told = task_for(id("a", 9001, 1, 1)).await;
        assert!(warned(&mut told, true));
        assert!(!told.downed, "a node that ran throughout goes on");
        // Told so just after a pause longer than stable_after, it is down
        // in its own view: what it hosts stops, instead of running on
        // beside its successors until its own strategy downs it.
        let mut woken = task_for(id("a", 9001, 1, 1)).await;
        woken.last_beat = Instant::now() - woken.shared.stable_after;
        assert!(warned(&mut woken, true));
        assert!(woken.downed);
        assert_eq!(lock(&woken.shared.view).me, MemberState::Down);
        let mut leaving = task_for(id("a", 9001, 1, 1)).await;
        assert!(!warned(&mut leaving, false));
        assert!(!leaving.downed);
    }

    fn alive(task: &mut Task, id: &Id) {
        task.foca
            .apply_many(
                std::iter::once(foca::Member::alive(id.clone())),
                true,
                &mut task.rt,
            )
            .expect("applies");
        task.drain();
    }

    #[tokio::test]
    async fn remotings_unreachable_verdict_makes_the_member_suspect_at_once() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let b = id("b", 9002, 7, 10);
        alive(&mut task, &b);
        // A verdict about another incarnation changes nothing.
        task.unreachable(&b.node, 8);
        task.drain();
        assert_eq!(state_of(&task, &b.node), Some((7, MemberState::Up)));
        task.unreachable(&b.node, 7);
        task.drain();
        assert_eq!(state_of(&task, &b.node), Some((7, MemberState::Suspect)));
    }

    #[tokio::test]
    async fn seeds_that_are_not_live_members_are_contacted_and_when_alone_the_last_known() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let sent = |task: &mut Task| -> Vec<SocketAddr> {
            let mut to = Vec::new();
            while let Some((id, _)) = task.rt.to_send() {
                to.push(id.udp);
            }
            to.sort();
            to
        };
        let b = id("b", 9002, 7, 10);
        let c = id("c", 9003, 8, 10);
        task.seeds = vec![b.udp, c.udp];
        // Alone: every seed.
        task.announce();
        assert_eq!(sent(&mut task), [b.udp, c.udp]);
        // b is a live member: only c, the seed that is not.
        alive(&mut task, &b);
        let _ = sent(&mut task);
        task.announce();
        assert_eq!(sent(&mut task), [c.udp]);
        // b goes down: it is contacted again (its restart is found), and
        // remembered.
        task.foca
            .apply_many(
                std::iter::once(foca::Member::new(b.clone(), 0, foca::State::Down)),
                true,
                &mut task.rt,
            )
            .expect("applies");
        task.drain();
        let _ = sent(&mut task);
        assert_eq!(task.last_known.iter().collect::<Vec<_>>(), [b.udp]);
        // Without seeds and alone, the last known members are contacted.
        task.seeds.clear();
        task.announce();
        assert_eq!(sent(&mut task), [b.udp]);
    }
}
