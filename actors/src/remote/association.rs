//! An association: the link to one remote node, its state and what
//! changes it (close, quarantine, unreachable; the state diagram is at
//! `link::LinkState`), and what the inbound dispatcher reports (the
//! [`Peer`] impl). The decisions are pure units' (`liveness`: heartbeats,
//! verdicts, reconnect timing; `install`: incarnations, which connection
//! wins, what a quarantine ends; `dial`: where and whether to dial); this
//! carries them out. Built on this: `connect` (connect attempts,
//! installing connections), `outbound` (user and system messages).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicU32, Ordering},
    },
    time::Instant,
};

use tokio::sync::Notify;
use transport::{CloseReason, ConnStats, Connection, PeerInfo, PeerText};

use super::{
    context::Context,
    dial::Attempts,
    envelope,
    events::RemoteEvent,
    inbound::{Dispatch, Peer},
    install::{self, Cause, Incarnations},
    large::LargeLane,
    link::{Link, LinkState, Outbox, Recipient, Turn, lock},
    liveness::Liveness,
    reliable::SysIn,
    requests::{AskWatch, Downs, IdentifyFailed, Requests},
    system_msg::{SysWire, reliable_frame},
};
use crate::{
    dead_letter::DeadLetterReason,
    lifecycle::StopReason,
    registry::Registry,
    telemetry::{PeerCounters, PeerSample},
    watch::RemoteWatcher,
};

/// The link to one remote node.
///
/// Method groups: link state and what changes it (here); what the
/// inbound dispatcher reports (the [`Peer`] impl); connecting and
/// installing connections (`connect`: `ensure_connecting`,
/// `install_inbound`, the large-message lane's `link_for`); system
/// messages (`outbound`: `identify`, `watch`, `send_stop`,
/// `send_reliable`) and user messages (`outbound`: `tell`,
/// `send_payload`), built on these.
///
/// # Lock order
/// A thread holding one of these locks takes only locks further right:
///
/// `requests.inbound` → `requests.out` → `state` → `incarnations` → the
/// transport's queue lock → a message's encoder (user code) → the
/// registry's lock.
///
/// `life`, `conns`, `requests.watches`, `requests.identifies`,
/// `large.queue` and `large.acked` are leaves: nothing else is taken while
/// one is held (a heartbeat is queued on the control lane after `life` is
/// released). Delivering a `Terminated` or failing a waiter happens after
/// the lock it was taken from is released.
pub(crate) struct Association {
    pub(crate) node: Arc<str>,
    /// This association, for the callbacks that get only `&self`.
    pub(super) me: Weak<Association>,
    pub(super) local_node: Arc<str>,
    pub(super) ctx: Weak<Context>,
    pub(super) state: Mutex<LinkState>,
    /// Notified whenever the link state changes (up, failed, closed).
    pub(super) up: Notify,
    pub(super) conns: Mutex<HashMap<u32, Connection>>,
    generation: AtomicU32,
    /// The peer's current incarnation, and those that restarted, shut
    /// down or overflowed: never talked to again (`install`'s rules).
    incarnations: Mutex<Incarnations>,
    pub(super) life: Mutex<Liveness>,
    /// At most one connect attempt in flight (`dial`).
    pub(super) attempts: Attempts,
    /// Watches, identifies, the reliable system-message streams.
    pub(super) requests: Requests,
    /// The asks waiting on replies from this node, and what fails them.
    pub(super) downs: Downs,
    /// System messages that found the link's queue full.
    pub(super) outbox: Arc<Outbox>,
    pub(super) large: LargeLane,
    /// `SystemConfig::set_pending_capacity`.
    pub(super) pending_capacity: usize,
    /// `SystemConfig::set_max_message_size`.
    pub(super) max_message: usize,
    /// `SystemConfig::set_max_recipient_ids`.
    pub(super) max_recipient_ids: usize,
    /// `SystemConfig::set_recipient_window`.
    pub(super) window: u64,
    /// Counts of link events for metrics (see `sample`).
    pub(super) counters: PeerCounters,
    /// `SystemConfig::set_trace_propagation`.
    pub(crate) trace: bool,
    /// What a link's run envelopes may grow to, toward a peer that takes
    /// them (`Link::run_limit`); 0 with `SystemConfig::set_message_runs`
    /// off. An extension adds at most the large-message threshold, so a
    /// run stays within the frame limit.
    pub(super) run_limit: usize,
}

impl Association {
    /// Built in its `Arc` (`Arc::new_cyclic`), which `me` points to.
    pub(super) fn new(node: Arc<str>, shared: &Arc<Context>, me: Weak<Association>) -> Self {
        let config = &shared.config;
        let max_frame = config.transport.max_frame_size();
        let max_message = config.max_message_size;
        Self {
            node,
            me,
            local_node: shared.registry.node().clone(),
            ctx: Arc::downgrade(shared),
            state: Mutex::new(LinkState::Idle),
            up: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            generation: AtomicU32::new(1),
            incarnations: Mutex::default(),
            life: Mutex::new(Liveness::new(
                config.heartbeat.clone(),
                config.backoff.clone(),
                config.refused_connect_grace,
                Instant::now(),
            )),
            attempts: Attempts::default(),
            requests: Requests::new(config.system_buffer),
            downs: Downs::default(),
            outbox: Arc::default(),
            run_limit: if config.message_runs {
                envelope::RUN_BYTES
                    .min(max_frame.saturating_sub(LargeLane::threshold_for(max_frame, max_message)))
            } else {
                0
            },
            large: LargeLane::new(max_frame, max_message),
            pending_capacity: config.pending_capacity,
            max_message,
            max_recipient_ids: config.max_recipient_ids,
            window: config.recipient_window as u64,
            counters: PeerCounters::default(),
            trace: config.trace_propagation,
        }
    }

    /// The registry of this node, while it lives.
    pub(crate) fn registry(&self) -> Option<Arc<Registry>> {
        self.ctx.upgrade().map(|c| c.registry.clone())
    }

    /// The peer's current incarnation; 0 until one has answered.
    pub(super) fn peer_uid(&self) -> u64 {
        lock(&self.incarnations).current()
    }

    /// A generation number for a new connection of this association.
    pub(super) fn next_generation(&self) -> u32 {
        self.generation.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn emit(&self, event: RemoteEvent) {
        if let Some(ctx) = self.ctx.upgrade() {
            let _ = ctx.events.send(event);
        }
    }

    pub(super) fn dead_letter(
        &self,
        what: &str,
        to: &dyn std::fmt::Display,
        why: &DeadLetterReason,
    ) {
        if let Some(r) = self.registry() {
            r.dead_letter(what, to, why);
        }
    }

    /// Whether dropping this association loses nothing but cached state:
    /// no link, no connection, no dial in flight, no watch and no
    /// unacknowledged system message. `Some(true)` when it also holds
    /// quarantine tombstones (worth keeping while there is room). A lock
    /// held elsewhere means it is in use: `None`, as for a busy one. The
    /// caller also checks that nothing else holds a reference to it.
    pub(super) fn disposable(&self) -> Option<bool> {
        let idle = matches!(*self.state.try_lock().ok()?, LinkState::Idle)
            && self.conns.try_lock().ok()?.is_empty()
            && !self.attempts.in_flight()
            && !self.requests.try_needs_link()?;
        if !idle {
            return None;
        }
        Some(self.incarnations.try_lock().ok()?.has_tombstones())
    }

    pub(super) fn is_quarantined(&self, uid: u64) -> bool {
        uid != 0 && lock(&self.incarnations).is_quarantined(uid)
    }

    /// The node's incarnations, locked (see the lock order at the type).
    pub(super) fn incarnations(&self) -> MutexGuard<'_, Incarnations> {
        lock(&self.incarnations)
    }

    /// The link, if it is up.
    pub(super) fn link(&self) -> Option<Link> {
        match &*lock(&self.state) {
            LinkState::Up(link) => Some(link.clone()),
            _ => None,
        }
    }

    /// Arms the failure detector (a watch waits on this node).
    pub(super) fn arm_detector(&self) {
        lock(&self.life).arm(Instant::now());
    }

    /// A heartbeat ack for `seq` arrived on one of this node's links.
    fn heartbeat_acked(&self, seq: u64) {
        let back = lock(&self.life).on_heartbeat_ack(Instant::now(), seq);
        if back {
            let uid = self.peer_uid();
            tracing::info!(node = %PeerText(&self.node), uid, "node reachable again");
            self.emit(RemoteEvent::Reachable {
                node: self.node.to_string(),
                uid,
            });
        }
    }

    /// One heartbeat tick: send a heartbeat, consult the detector, reconnect
    /// when due, resend unacknowledged system messages. Returns when to run
    /// again.
    pub(super) fn tick(self: &Arc<Self>, now: Instant) -> Instant {
        let link = self.link().map(|l| l.sender);
        // An attempt in flight (or waiting for the backoff) reconnects
        // already, and schedules the next one if it fails.
        let connecting = self.attempts.in_flight();
        let reconnect = !connecting && self.needs_link();
        let tick = {
            let mut life = lock(&self.life);
            // A node judged unreachable is redialed anyway (`liveness`).
            let reconnect = reconnect || (!connecting && life.redials());
            life.tick(now, link.is_some(), reconnect)
        };
        // After `life` is released, which stays a leaf: the heartbeat was
        // recorded as sent at `now`, and its ack cannot come before it goes.
        if let (Some(seq), Some(sender)) = (tick.heartbeat, &link) {
            sender.send_heartbeat(&seq.to_le_bytes());
        }
        if let Some(phi) = tick.unreachable {
            self.declare_unreachable(&format!(
                "failure detector: phi {phi:.1} reached the threshold"
            ));
        }
        if tick.reconnect {
            self.ensure_connecting();
        }
        if tick.resend {
            self.resend_unacked();
        }
        tick.next
    }

    /// Work waits for a link: watches, unacknowledged system messages,
    /// messages buffered while connecting, or asks waiting on replies (a
    /// reconnect is how a dead node is told from a lost connection).
    ///
    /// Not the asks once the node's incarnation is quarantined (it shut
    /// down, restarted or overflowed): they are failing already, and a
    /// node that said it is gone is not redialed for them (the link that
    /// closes under them, or a tick before they are dropped, would dial
    /// it). Sending to the node again dials it, as in Akka.
    pub(super) fn needs_link(&self) -> bool {
        self.requests.needs_link()
            || (self.downs.waiting() > 0 && !self.is_quarantined(self.peer_uid()))
            || matches!(*lock(&self.state), LinkState::Connecting { .. })
    }

    /// The node is unreachable (the failure detector fired, or its link
    /// was lost and reconnects refused; `why` says which): watchers hear
    /// `Terminated`, waiting resolves and asks fail, the system-message
    /// stream starts over, and the links are dropped, what they held
    /// counted as dead letters (the association keeps reconnecting while
    /// it has work).
    pub(super) fn declare_unreachable(&self, why: &str) {
        let uid = self.peer_uid();
        lock(&self.life).judged(uid);
        tracing::warn!(node = %PeerText(&self.node), uid, reason = why, "node unreachable");
        self.emit(RemoteEvent::Unreachable {
            node: self.node.to_string(),
            uid,
        });
        self.fail_waiters(why);
        self.downs.all(&format!("unreachable: {why}"));
        self.reset_sys_out("node unreachable");
        let conns: Vec<Connection> = lock(&self.conns).drain().map(|(_, c)| c).collect();
        for c in conns {
            self.abort_counted(c, "node unreachable");
        }
    }

    /// Aborts `conn`. What it still had queued (and what its writer had
    /// not wholly written) is counted as dead letters once it has ended:
    /// whoever takes a connection out of `conns` counts its losses, since
    /// `link_closed` no longer finds it.
    pub(super) fn abort_counted(&self, conn: Connection, why: &str) {
        conn.abort(why);
        self.count_lost(conn, why.to_owned());
    }

    /// Counts what `conn` dropped as dead letters once it has ended.
    fn count_lost(&self, conn: Connection, why: String) {
        let Some(registry) = self.registry() else {
            return;
        };
        let node = self.node.clone();
        let me = self.me.clone();
        tokio::spawn(async move {
            conn.closed().await;
            count_dropped(&registry, &node, &conn, &why);
            if let Some(me) = me.upgrade() {
                me.counters.retire(&conn.stats());
            }
        });
    }

    /// The system this association belongs to has shut down (or is gone):
    /// it dials nothing any more.
    pub(super) fn shut_down(&self) -> bool {
        self.ctx.upgrade().is_none_or(|c| c.cancel.is_cancelled())
    }

    /// An ask to a recipient on this node starts waiting: subscribed
    /// before its request is sent, so that nothing that fails it is
    /// missed. See `requests::Downs`.
    pub(crate) fn watch_downs(&self) -> AskWatch {
        self.downs.subscribe()
    }

    /// Whether a request to `r` fails at once because the node is judged
    /// unreachable (see `liveness`). An ask checks it after subscribing to
    /// downs: a verdict before the subscription is seen here, one after it
    /// fires the subscription, so none is missed while the judged link is
    /// still being torn down (and would take the request only to lose it).
    pub(crate) fn judged_unreachable(&self, r: &Recipient) -> bool {
        lock(&self.life).fails_fast(r.uid)
    }

    /// Resolves with the reason when the node goes down for recipient
    /// `r` (unreachable, a failed connect, or `r`'s incarnation
    /// quarantined).
    pub(crate) async fn down(&self, watch: &mut AskWatch, r: &Recipient) -> String {
        watch.down(r.uid, |uid| self.is_quarantined(uid)).await
    }

    fn reset_sys_out(&self, why: &str) {
        let dropped = self.requests.reset_stream();
        if dropped > 0 {
            tracing::warn!(node = %PeerText(&self.node), dropped, reason = why, "unacknowledged system messages dropped");
        }
    }

    /// Quarantines incarnation `uid`: never talked to again; its watchers
    /// get `Terminated`, refs to it become dead ends, waiting resolves
    /// fail.
    pub(super) fn quarantine(&self, uid: u64, reason: &str) {
        self.quarantine_for(uid, Cause::Other(reason));
    }

    /// [`quarantine`](Self::quarantine) for `cause`, if `uid` was not
    /// quarantined before (`install`).
    pub(super) fn quarantine_for(&self, uid: u64, cause: Cause<'_>) {
        if self.incarnations().quarantine(uid) {
            self.quarantined(uid, cause);
        }
    }

    /// Carries out what quarantining incarnation `uid` for `cause` ends
    /// (`install`, rules 3 and 5), once it is quarantined. A restart
    /// (`Cause::restart`) asks a resolve waiting (a question to the node,
    /// not to an incarnation) again of the new incarnation instead of
    /// failing it.
    pub(super) fn quarantined(&self, uid: u64, cause: Cause<'_>) {
        let reason = &*cause.to_string();
        PeerCounters::bump(&self.counters.quarantines);
        if cause.routine() {
            tracing::info!(node = %PeerText(&self.node), uid, reason, "incarnation quarantined");
        } else {
            tracing::warn!(node = %PeerText(&self.node), uid, reason, "incarnation quarantined");
        }
        self.emit(RemoteEvent::Quarantined {
            node: self.node.to_string(),
            uid,
            reason: reason.to_owned(),
        });
        lock(&self.life).on_quarantine();
        let why = format!("quarantined: {reason}");
        if cause.restart() {
            self.requests.fail_watches(&why);
            self.requests.fail_identifies(IdentifyFailed::Replaced);
        } else {
            self.fail_waiters(&why);
        }
        self.downs.quarantined(uid, reason);
        self.reset_sys_out(reason);
        let old: Vec<u32> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| c.peer().uid == uid)
            .map(|(g, _)| *g)
            .collect();
        let why = format!("incarnation quarantined: {reason}");
        for g in old {
            let conn = lock(&self.conns).remove(&g);
            match conn {
                Some(c) if cause.closes_gracefully() => self.close_counted(c, why.clone()),
                Some(c) => self.abort_counted(c, &why),
                None => {}
            }
        }
    }

    /// Closes `conn` gracefully (what it has queued is written, then a
    /// Close frame with `why`; at most the close timeout), by a task.
    /// What a close that times out drops is counted as dead letters, as
    /// `abort_counted` does for an abort.
    pub(super) fn close_counted(&self, conn: Connection, why: String) {
        let registry = self.registry();
        let node = self.node.clone();
        let me = self.me.clone();
        tokio::spawn(async move {
            conn.close(&why).await;
            if let Some(r) = registry {
                count_dropped(&r, &node, &conn, &why);
            }
            if let Some(me) = me.upgrade() {
                me.counters.retire(&conn.stats());
            }
        });
    }

    pub(super) fn fail_identifies(&self, reason: &str) {
        self.requests
            .fail_identifies(IdentifyFailed::Unreachable(reason.to_owned()));
    }

    fn fail_waiters(&self, reason: &str) {
        self.requests.fail_waiters(reason);
    }

    /// A connection of this association ended.
    fn link_closed(&self, generation: u32, reason: &CloseReason) {
        let was_up = {
            let mut st = lock(&self.state);
            match &*st {
                LinkState::Up(l) if l.ids.generation() == generation => {
                    *st = LinkState::Idle;
                    true
                }
                _ => false,
            }
        };
        // The large-message lane may wait for acks on it.
        self.large.link_closed();
        // Outside the state lock: dropping aborts a live connection. What it
        // still had queued is counted as dead letters once it has ended.
        let conn = lock(&self.conns).remove(&generation);
        if let Some(conn) = conn {
            self.count_lost(conn, reason.to_string());
        }
        let ended = install::ended(reason);
        if ended.duplicate {
            // The other of two simultaneous connections is the link.
            self.requests.fail_identifies(IdentifyFailed::Replaced);
        }
        if was_up {
            tracing::info!(node = %PeerText(&self.node), %reason, "link to node closed");
            let now = Instant::now();
            lock(&self.life).on_link_closed(now, ended.abrupt, transport::random_uid());
            self.emit(RemoteEvent::Disconnected {
                node: self.node.to_string(),
                reason: reason.to_string(),
            });
            if !ended.duplicate {
                self.fail_identifies(&reason.to_string());
            }
            if self.needs_link()
                && let Some(me) = self.me.upgrade()
            {
                me.spawn_reconnect();
            }
        }
    }

    /// Takes every connection for a shutdown; the link is down from now on.
    /// The shutdown is marked (`shut_down`) before this runs, so a
    /// connection that arrives later is not kept but told (see `keep`).
    pub(super) fn take_connections(&self) -> Vec<Connection> {
        let conns = lock(&self.conns).drain().map(|(_, c)| c).collect();
        *lock(&self.state) = LinkState::Idle;
        conns
    }

    /// Keeps `conn` as connection `generation`, unless the system has shut
    /// down: then it is handed back, for [`farewell`](Self::farewell).
    ///
    /// A connection starts (its reader answers the peer) before it is kept
    /// here, and a proven one is kept by a task: a shutdown can take the
    /// connections in between. Checked under `conns`, which the shutdown
    /// drains after marking itself, so every connection is either taken
    /// by the shutdown or handed back here; none stays open with its peer
    /// untold, waiting for a failure detector that may take minutes.
    pub(super) fn keep(&self, generation: u32, conn: Connection) -> Result<(), Connection> {
        let mut conns = lock(&self.conns);
        if self.shut_down() {
            return Err(conn);
        }
        conns.insert(generation, conn);
        Ok(())
    }

    /// What the shutdown does with each connection, for one that arrived
    /// after it: tells the peer this incarnation is gone, then closes the
    /// connection gracefully (what it dropped is counted).
    pub(super) fn farewell(&self, conn: Connection) {
        let _ = conn.try_send(SysWire::Shutdown.frame());
        let registry = self.registry();
        let node = self.node.clone();
        tokio::spawn(async move {
            conn.close(SHUT_DOWN).await;
            if let Some(registry) = registry {
                count_dropped(&registry, &node, &conn, SHUT_DOWN);
            }
        });
    }

    pub(super) fn stats(&self) -> ConnStats {
        let mut total = ConnStats::default();
        for c in lock(&self.conns).values() {
            total.add(&c.stats());
        }
        total
    }

    /// This association's values for metrics: its connections' counts
    /// (ended ones included), its link's queue, phi, and its link events.
    /// Takes `conns`, `state` (and the link's queue lock), `life`, one
    /// after another.
    pub(super) fn sample(&self, now: Instant) -> PeerSample {
        let mut stats = self.counters.retired();
        for c in lock(&self.conns).values() {
            stats.add(&c.stats());
        }
        let queue_bytes = self.link().map_or(0, |l| l.sender.queued_bytes());
        let c = &self.counters;
        PeerSample {
            stats,
            queue_bytes,
            phi: lock(&self.life).phi(now),
            reconnects: c.attempts.load(Ordering::Relaxed).saturating_sub(1),
            quarantines: c.quarantines.load(Ordering::Relaxed),
            fragments_out: self.large.fragments_sent.load(Ordering::Relaxed),
            fragments_in: c.fragments_in.load(Ordering::Relaxed),
        }
    }

    /// The state, locked (see the lock order at the type).
    #[inline]
    pub(super) fn state(&self) -> MutexGuard<'_, LinkState> {
        lock(&self.state)
    }

    /// Whether an inbound connection's identity is proven for this node
    /// by the transport alone (`install::proven`).
    pub(super) fn admit(&self, peer: &PeerInfo) -> bool {
        install::proven(peer.verified)
    }

    /// The inbound dispatcher for a new connection of this association;
    /// `proven` as `admit` said.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        ctx: &Context,
        peer: &PeerInfo,
        generation: u32,
        proven: bool,
    ) -> Dispatch {
        let assoc: Arc<dyn Peer> = self.clone();
        Dispatch::new(
            ctx.registry.clone(),
            &ctx.config,
            assoc,
            generation,
            peer.uid,
            proven,
            ctx.budget.connect(peer.socket_addr.ip()),
        )
    }

    /// Resends every unacknowledged system message on the current link.
    pub(super) fn resend_unacked(&self) {
        // Never inside an encoder (a tick, a link coming up); if it were,
        // the next tick resends.
        let Ok(turn) = Turn::begin() else { return };
        let out = self.requests.out();
        if out.len() == 0 {
            return;
        }
        let st = self.state();
        let LinkState::Up(link) = &*st else { return };
        for (seq, body) in out.unacked() {
            if link
                .sender
                .try_send(&turn, reliable_frame(out.epoch(), *seq, body))
                .is_err()
            {
                break;
            }
        }
    }
}

impl Peer for Association {
    fn node(&self) -> &Arc<str> {
        &self.node
    }

    fn on_fragment(&self) {
        PeerCounters::bump(&self.counters.fragments_in);
    }

    fn sys_in(&self) -> MutexGuard<'_, SysIn> {
        self.requests.inbound()
    }

    fn on_ack(&self, epoch: u64, seq: u64) {
        self.requests.out().handle_ack(epoch, seq);
    }

    fn on_shutdown(&self, uid: u64) {
        self.quarantine_for(uid, Cause::ShutDown);
    }

    fn on_large_ack(&self, msg: u32, received: u32) {
        self.large.on_ack(msg, received);
    }

    fn on_heartbeat_ack(&self, seq: u64) {
        self.heartbeat_acked(seq);
    }

    fn on_reads_paused(&self, paused: bool) {
        let mut life = lock(&self.life);
        if paused {
            life.reads_paused();
        } else {
            life.reads_resumed(Instant::now());
        }
    }

    fn on_identity(&self, id: u64, manifest: Option<(u32, String)>) {
        self.requests.answer_identify(id, manifest);
    }

    fn on_terminated(&self, watch_id: u64, reason: StopReason) {
        self.requests.terminated(watch_id, reason);
    }

    fn watcher(self: Arc<Self>) -> Arc<dyn RemoteWatcher> {
        self
    }

    fn on_credit(&self, generation: u32, id: u32, total: u64) {
        if let Some(link) = self.link()
            && link.ids.generation() == generation
        {
            link.credits.grant(id, total);
        }
    }

    fn on_close(&self, generation: u32, reason: &CloseReason) {
        self.link_closed(generation, reason);
    }
}

/// Why a shutdown closes its connections (and counts what they dropped).
pub(super) const SHUT_DOWN: &str = "actor system shut down";

/// Counts the user messages `conn` (ended) dropped as dead letters of
/// `node`, for `why`: a link's losses are never silent.
pub(super) fn count_dropped(registry: &Registry, node: &str, conn: &Connection, why: &str) {
    let lost = conn.stats().frames_dropped;
    if lost > 0 {
        let why = DeadLetterReason::LinkLost(why.to_owned().into());
        registry.dead_letters_n(lost, "(queued on a lost link)", &node, &why);
    }
}
