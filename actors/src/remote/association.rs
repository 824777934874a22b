//! An association: the link to one remote node, its state and its
//! transitions (connect, install, close, fail, quarantine, unreachable;
//! the state diagram is at `link::LinkState`), and the system messages it
//! carries (identify, watch, stop, terminated, delivered reliably). The
//! decisions about liveness and incarnations are `liveness`'s; user
//! messages are sent by `outbound`, which builds on this.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
/// `connect failed` lines: a peer's hellos and refs can make a node dial
/// addresses that refuse, so they are sampled.
static CONNECT_FAILED: LogLimit = LogLimit::new();

use transport::{
    CloseReason, ConnStats, Connection, FrameKind, LogLimit, PeerInfo, PeerText, PeerVerified,
    TransportError, TrySendFrameError,
};

use super::{
    compression::OutboundIds,
    context::Context,
    envelope,
    events::RemoteEvent,
    flow::LinkCredits,
    inbound::{Dispatch, Peer},
    large::{LaneHost, LargeLane},
    link::{
        Link, LinkPush, LinkState, Outbox, Pending, Recipient, Sampler, Turn, lock, write_envelope,
        write_stop,
    },
    liveness::{LinkEnd, Liveness, displaced, new_link_wins},
    reliable::SysIn,
    requests::{AskWatch, Downs, IdentifyFailed, Requests},
    system_msg::{SysWire, reliable_frame, system_frame},
};
use crate::{
    dead_letter::DeadLetterReason,
    error::ResolveError,
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    registry::Registry,
    reply::NoReply,
    telemetry::{PeerCounters, PeerSample},
    watch::{RemoteWatcher, WatchSink},
};

/// Pending messages moved from the connect buffer to a new link per lock.
const FLUSH_CHUNK: usize = 1024;

/// The quarantine reason of a peer that announced its shutdown: the
/// ordinary end of a node, logged at `info`.
const PEER_SHUT_DOWN: &str = "peer shut down";

/// The reason a connection that lost a simultaneous connect is closed with.
pub(super) const DUPLICATE: &str = "duplicate connection";

/// The link to one remote node.
///
/// Method groups: link state and transitions; system messages
/// (`identify`, `watch`, `send_stop`, `send_reliable`); what the inbound
/// dispatcher reports (the [`Peer`] impl); user messages are sent by
/// `outbound`'s methods (`tell`, `send_payload`), built on these.
///
/// # Lock order
/// A thread holding one of these locks takes only locks further right:
///
/// `requests.inbound` → `requests.out` → `state` → `quarantined` → the
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
    me: Weak<Association>,
    local_node: Arc<str>,
    pub(super) ctx: Weak<Context>,
    pub(super) state: Mutex<LinkState>,
    /// Notified whenever the link state changes (up, failed, closed).
    pub(super) up: Notify,
    /// Notified when someone needs a connect while an attempt waits for
    /// the backoff: it starts at once.
    hurry: Notify,
    pub(super) conns: Mutex<HashMap<u32, Connection>>,
    generation: AtomicU32,
    /// The peer's current incarnation; 0 until one has answered.
    peer_uid: AtomicU64,
    /// Incarnations that restarted, shut down or overflowed: never talked
    /// to again.
    quarantined: Mutex<HashSet<u64>>,
    pub(super) life: Mutex<Liveness>,
    /// A connect attempt is in flight.
    connecting: AtomicBool,
    /// Watches, identifies, the reliable system-message streams.
    requests: Requests,
    /// The asks waiting on replies from this node, and what fails them.
    downs: Downs,
    /// System messages that found the link's queue full.
    outbox: Arc<Outbox>,
    pub(super) large: LargeLane,
    /// `SystemConfig::set_pending_capacity`.
    pub(super) pending_capacity: usize,
    /// `SystemConfig::set_max_message_size`.
    pub(super) max_message: usize,
    /// `SystemConfig::set_max_recipient_ids`.
    max_recipient_ids: usize,
    /// `SystemConfig::set_recipient_window`.
    window: u64,
    /// Counts of link events for metrics (see `sample`).
    counters: PeerCounters,
    /// `SystemConfig::set_trace_propagation`.
    pub(crate) trace: bool,
    /// What a link's run envelopes may grow to, toward a peer that takes
    /// them (`Link::run_limit`); 0 with `SystemConfig::set_message_runs`
    /// off. An extension adds at most the large-message threshold, so a
    /// run stays within the frame limit.
    run_limit: usize,
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
            hurry: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            generation: AtomicU32::new(1),
            peer_uid: AtomicU64::new(0),
            quarantined: Mutex::new(HashSet::new()),
            life: Mutex::new(Liveness::new(
                config.heartbeat.clone(),
                config.backoff.clone(),
                config.refused_connect_grace,
                Instant::now(),
            )),
            connecting: AtomicBool::new(false),
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
        self.peer_uid.load(Ordering::Acquire)
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
            && !self.connecting.load(Ordering::Acquire)
            && !self.requests.try_needs_link()?;
        if !idle {
            return None;
        }
        Some(!self.quarantined.try_lock().ok()?.is_empty())
    }

    pub(super) fn is_quarantined(&self, uid: u64) -> bool {
        uid != 0 && lock(&self.quarantined).contains(&uid)
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
        let connecting = self.connecting.load(Ordering::Acquire);
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
    fn needs_link(&self) -> bool {
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
    fn declare_unreachable(&self, why: &str) {
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
    fn abort_counted(&self, conn: Connection, why: &str) {
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
    fn shut_down(&self) -> bool {
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
        self.quarantine_as(uid, reason, false);
    }

    /// `quarantine`; `restarted`: a new incarnation of the node is
    /// connecting, so a resolve waiting (a question to the node, not to
    /// an incarnation) is asked again of the new one instead of failing.
    fn quarantine_as(&self, uid: u64, reason: &str, restarted: bool) {
        if uid == 0 || !lock(&self.quarantined).insert(uid) {
            return;
        }
        PeerCounters::bump(&self.counters.quarantines);
        if reason == PEER_SHUT_DOWN {
            // The peer said so itself: the ordinary end of a node.
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
        if restarted {
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
                // The peer said goodbye and is closing its side: answer in
                // kind, with a Close frame. An abort here would end the
                // stream under a peer that may not have begun its close
                // yet, which it would log as a lost connection.
                Some(c) if reason == PEER_SHUT_DOWN => self.close_counted(c, why.clone()),
                Some(c) => self.abort_counted(c, &why),
                None => {}
            }
        }
    }

    /// Asks the node whether an actor lives at `path` (Akka's `Identify`).
    pub(super) async fn identify(
        self: &Arc<Self>,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (id, rx) = self.requests.new_identify();
            self.send_system(&SysWire::Identify {
                id,
                path: path.elements().to_owned(),
            });
            let res = tokio::time::timeout_at(deadline, rx).await;
            self.requests.forget_identify(id);
            return match res {
                Ok(Ok(Ok(m))) => Ok(m),
                // Asked again on the link that replaces it.
                Ok(Ok(Err(IdentifyFailed::Replaced))) => continue,
                Ok(Ok(Err(IdentifyFailed::Unreachable(reason)))) => {
                    Err(ResolveError::Unreachable {
                        addr: self.node.to_string(),
                        reason,
                    })
                }
                Ok(Err(_)) => Err(ResolveError::Unreachable {
                    addr: self.node.to_string(),
                    reason: "link closed".into(),
                }),
                Err(_) => Err(ResolveError::Timeout {
                    addr: self.node.to_string(),
                    timeout,
                }),
            };
        }
    }

    /// Starts connecting if nothing is (and the backoff allows).
    pub(super) fn ensure_connecting(self: &Arc<Self>) {
        {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Idle) {
                *st = LinkState::Connecting {
                    pending: VecDeque::new(),
                };
            }
        }
        self.spawn_connect();
    }

    /// Starts one connect attempt now: someone needs the node (a send, a
    /// resolve, a watch). However long the backoff has grown, it waits
    /// only for the backoff's first delay since the previous attempt; an
    /// attempt already waiting for the backoff is hurried instead (see
    /// `liveness`, "Dialing"). At most one attempt per association is in
    /// flight, waiting included, and at most `max_concurrent_dials` per
    /// node dial at once.
    pub(super) fn spawn_connect(self: &Arc<Self>) {
        self.spawn_attempt(false);
    }

    /// Starts the next reconnect attempt when the backoff allows, if none
    /// is in flight: after a link ended or an attempt failed while work
    /// waits for the node.
    fn spawn_reconnect(self: &Arc<Self>) {
        self.spawn_attempt(true);
    }

    fn spawn_attempt(self: &Arc<Self>, paced: bool) {
        // A system that shut down dials nothing: its attempts fail at once,
        // and each failure would start the next.
        if self.shut_down() {
            return;
        }
        if self.connecting.swap(true, Ordering::AcqRel) {
            if !paced {
                self.hurry.notify_waiters();
            }
            return;
        }
        let assoc = self.clone();
        tokio::spawn(async move {
            let res = assoc.connect_when_due(paced).await;
            assoc.connecting.store(false, Ordering::Release);
            if let Err(failed) = res {
                if assoc.shut_down() {
                    // Shut down meanwhile: not worth a warning; what waited
                    // is still counted, and nothing retries.
                    tracing::debug!(node = %PeerText(&assoc.node), reason = %failed.reason, "connect given up: system shut down");
                } else if let Some(s) = CONNECT_FAILED.sample() {
                    // A peer's hellos can name nodes to dial: sampled.
                    tracing::warn!(node = %PeerText(&assoc.node), reason = %failed.reason, total = s.total, suppressed = s.suppressed, "connect failed");
                }
                assoc.link_failed(&failed.reason, failed.refused);
            }
        });
    }

    /// Waits until an attempt may start (`paced`: for the backoff too,
    /// until someone hurries it), then connects.
    async fn connect_when_due(self: &Arc<Self>, mut paced: bool) -> Result<(), ConnectFailed> {
        let cancel = self.ctx.upgrade().ok_or("system shut down")?.cancel.clone();
        loop {
            // Enabled before the wait is read: a hurry after that wakes it.
            let hurried = self.hurry.notified();
            tokio::pin!(hurried);
            hurried.as_mut().enable();
            let wait = lock(&self.life).attempt_wait(Instant::now(), paced);
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = hurried => paced = false,
                () = cancel.cancelled() => return Err("system shut down".into()),
            }
        }
        lock(&self.life).attempt_started(Instant::now());
        PeerCounters::bump(&self.counters.attempts);
        self.connect().await
    }

    async fn connect(self: &Arc<Self>) -> Result<(), ConnectFailed> {
        let ctx = self.ctx.upgrade().ok_or("system shut down")?;
        // At most `max_concurrent_dials` attempts at once, resolving
        // included; the permit is held until the handshake is done.
        let _permit = ctx.dials.acquire().await.map_err(|_| "system shut down")?;
        let addrs: Vec<SocketAddr> = match ctx.config.routes.get(&*self.node) {
            // SystemConfig::set_route: dialed elsewhere, identity unchanged.
            Some(addr) => vec![*addr],
            None => {
                let hostport = self
                    .node
                    .split_once('@')
                    .map(|(_, hp)| hp)
                    .ok_or("node has no host:port")?;
                let resolved: Vec<SocketAddr> = tokio::net::lookup_host(hostport)
                    .await
                    .map_err(|e| format!("cannot resolve {hostport}: {e}"))?
                    .collect();
                if resolved.is_empty() {
                    return Err(format!("{hostport} resolves to no address").into());
                }
                resolved
            }
        };
        // Every address is checked against the allow-list; those off it
        // are not dialed at all.
        let (addrs, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
            addrs.into_iter().partition(|addr| {
                ctx.config
                    .dial_allow_list
                    .as_ref()
                    .is_none_or(|allowed| allowed.iter().any(|net| net.contains(&addr.ip())))
            });
        if addrs.is_empty() {
            return Err(format!(
                "{} is not on the dial allow-list (SystemConfig::set_dial_allow_list)",
                join(&refused)
            )
            .into());
        }
        let est = ctx
            .endpoint
            .connect(addrs.clone())
            .await
            .map_err(|e| ConnectFailed {
                refused: matches!(&e, TransportError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused),
                reason: format!("connect to {}: {e}", join(&addrs)),
            })?;
        let addr = est.peer().socket_addr;
        if est.peer().addr != *self.node {
            return Err(format!(
                "peer at {addr} identifies as {:?}, expected {:?}",
                est.peer().addr,
                self.node
            )
            .into());
        }
        let generation = self.next_generation();
        let dispatch = self.dispatch(&ctx, est.peer(), generation, true);
        let conn = est.start(dispatch);
        self.install(conn, generation, true, true).await;
        Ok(())
    }

    /// Makes `conn` this node's sending link (unless one is up already, in
    /// which case it only carries inbound traffic), flushing what was
    /// buffered while connecting, in order.
    ///
    /// A connection from a quarantined incarnation is refused; one from a
    /// new incarnation quarantines the old. When both nodes dialed at once,
    /// the connection dialed by the node with the lower address wins on
    /// both sides, and the other is closed (see `liveness::new_link_wins`).
    async fn install(
        self: &Arc<Self>,
        conn: Connection,
        generation: u32,
        dialed: bool,
        proven: bool,
    ) {
        let uid = conn.peer().uid;
        if self.is_quarantined(uid) {
            static REFUSED: Sampler = Sampler::new();
            if let Some(n) = REFUSED.hit() {
                tracing::warn!(node = %PeerText(&self.node), uid, refused = n, "refusing a connection from a quarantined incarnation");
            }
            conn.close("your incarnation is quarantined").await;
            return;
        }
        if !proven {
            return self.receive_only(conn, generation);
        }
        self.install_proven(conn, generation, dialed).await;
    }

    /// Whether an inbound connection's identity is proven for this node
    /// by the transport alone (see `transport_proof`).
    pub(super) fn admit(&self, peer: &PeerInfo) -> bool {
        transport_proof(peer)
    }

    /// An inbound connection whose peer proved the shared secret but not
    /// that it is this node: any secret holder can claim any node (address
    /// and uid are in every hello). It carries the peer's messages to this
    /// node, and nothing that changes what this node believes of the node
    /// it names (see `inbound`); this node sends to the node only on
    /// connections it dialed itself, so an impostor receives nothing.
    ///
    /// A claim of an incarnation this node has no proven link to is
    /// evidence worth checking: if no link is up, this node dials the
    /// address, and what answers there is the node (a restarted one
    /// displaces its old incarnation then).
    fn receive_only(self: &Arc<Self>, conn: Connection, generation: u32) {
        let uid = conn.peer().uid;
        tracing::debug!(node = %PeerText(&self.node), uid, generation, "inbound connection carries inbound traffic only");
        lock(&self.conns).insert(generation, conn);
        if uid != self.peer_uid() && self.link().is_none() {
            self.ensure_connecting();
        }
    }

    /// Installs a connection whose identity is proven for this node.
    async fn install_proven(self: &Arc<Self>, conn: Connection, generation: u32, dialed: bool) {
        let uid = conn.peer().uid;
        let previous = self.peer_uid.swap(uid, Ordering::AcqRel);
        if let Some(old) = displaced(previous, uid) {
            self.quarantine_as(old, &format!("restarted as incarnation {uid:#x}"), true);
        }
        // A reliable stream an unproven connection of another incarnation
        // started is not this node's: this one's may start now.
        self.requests.inbound().forget_other(uid);
        let was_unreachable = lock(&self.life).on_link_up(Instant::now());
        let link = Link {
            sender: LinkPush::new(conn.sender()),
            ids: Arc::new(OutboundIds::new(generation, self.max_recipient_ids)),
            credits: Arc::new(LinkCredits::new(generation, self.window)),
            uid,
            dialed,
            run_limit: if conn.peer().app_flags & envelope::APP_RUNS != 0 {
                self.run_limit
            } else {
                0
            },
        };
        lock(&self.conns).insert(generation, conn);
        self.emit(RemoteEvent::Connected {
            node: self.node.to_string(),
            uid,
        });
        if was_unreachable {
            tracing::info!(node = %PeerText(&self.node), uid, "node reachable again");
            self.emit(RemoteEvent::Reachable {
                node: self.node.to_string(),
                uid,
            });
        }
        let new = LinkEnd { uid, dialed };
        loop {
            let chunk: Vec<Pending> = {
                let mut st = lock(&self.state);
                match &mut *st {
                    LinkState::Up(cur) => {
                        let current = LinkEnd {
                            uid: cur.uid,
                            dialed: cur.dialed,
                        };
                        let loser = if new_link_wins(current, new, &self.local_node, &self.node) {
                            std::mem::replace(cur, link).ids.generation()
                        } else {
                            generation
                        };
                        drop(st);
                        self.close_duplicate(loser);
                        self.resend_unacked();
                        return;
                    }
                    LinkState::Idle => {
                        *st = LinkState::Up(link);
                        drop(st);
                        self.link_up();
                        return;
                    }
                    LinkState::Connecting { pending } => {
                        if pending.is_empty() {
                            *st = LinkState::Up(link);
                            drop(st);
                            self.link_up();
                            return;
                        }
                        let n = pending.len().min(FLUSH_CHUNK);
                        pending.drain(..n).collect()
                    }
                }
            };
            // New messages keep queueing behind these until the link is up,
            // so order is kept.
            for p in chunk {
                let ok = match p {
                    Pending::User(r, ..) | Pending::Stop(r, _) if !link.serves(r.uid) => {
                        self.dead_letter("(remote message)", &r.path, &DeadLetterReason::Restarted);
                        true
                    }
                    Pending::User(r, manifest, payload) => link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_envelope(b, &r, &link, manifest, &payload, false, None);
                        })
                        .await
                        .is_ok(),
                    Pending::Stop(r, manifest) => link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_stop(b, &r, &link, manifest);
                        })
                        .await
                        .is_ok(),
                    Pending::System(body) => link.sender.send(system_frame(body)).await.is_ok(),
                };
                if !ok {
                    // The new link died while flushing; its close handler
                    // reports the rest.
                    self.dead_letter(
                        "(pending)",
                        &self.node,
                        &DeadLetterReason::LinkLost("link closed while flushing".into()),
                    );
                }
            }
        }
    }

    /// A link came up: waiters wake, unacknowledged system messages go out
    /// on it.
    fn link_up(&self) {
        self.up.notify_waiters();
        self.resend_unacked();
    }

    /// An inbound connection from this node. A receive-only one is kept
    /// at once, so that a shutdown right after it arrived still closes it
    /// (and tells its peer); a proven one is installed by a task, since
    /// installing may wait to flush what was buffered for the node.
    pub(super) fn install_inbound(
        self: &Arc<Self>,
        conn: Connection,
        generation: u32,
        proven: bool,
    ) {
        if !proven && !self.is_quarantined(conn.peer().uid) {
            return self.receive_only(conn, generation);
        }
        let assoc = self.clone();
        tokio::spawn(async move { assoc.install(conn, generation, false, proven).await });
    }

    /// Closes the connection that lost a simultaneous connect, after what
    /// it has queued is written (what a close that times out drops is
    /// counted as dead letters).
    fn close_duplicate(&self, generation: u32) {
        let conn = lock(&self.conns).remove(&generation);
        if let Some(c) = conn {
            tracing::debug!(node = %PeerText(&self.node), generation, "closing the duplicate connection");
            self.close_counted(c, DUPLICATE.to_owned());
        }
    }

    /// Closes `conn` gracefully (what it has queued is written, then a
    /// Close frame with `why`; at most the close timeout), by a task.
    /// What a close that times out drops is counted as dead letters, as
    /// `abort_counted` does for an abort.
    fn close_counted(&self, conn: Connection, why: String) {
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

    /// Connecting failed (`refused`: with `ECONNREFUSED`): buffered
    /// messages become dead letters, waiting resolves and asks fail (their
    /// requests may have been among them, and the node cannot be reached
    /// now). Watchers wait for the failure detector, or for the evidence
    /// of a lost link and refused reconnects (see `liveness`).
    fn link_failed(self: &Arc<Self>, reason: &str, refused: bool) {
        // One guard: a second `lock` while the scrutinee's guard lives (as it
        // did here once) deadlocks this thread and every later user of the
        // state.
        let pending = {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Up(_)) {
                // Raced with an inbound link coming up: keep it.
                return;
            }
            match std::mem::replace(&mut *st, LinkState::Idle) {
                LinkState::Connecting { pending } => pending,
                _ => VecDeque::new(),
            }
        };
        let users = pending.iter().filter(|p| p.is_user()).count() as u64;
        if let Some(r) = self.registry() {
            let why = if self.shut_down() {
                DeadLetterReason::ShutDown
            } else if refused {
                DeadLetterReason::Refused(reason.to_owned().into())
            } else {
                DeadLetterReason::Unreachable(reason.to_owned().into())
            };
            r.dead_letters_n(users, "(remote message)", &self.node, &why);
        }
        let verdict =
            lock(&self.life).on_connect_failed(Instant::now(), refused, transport::random_uid());
        self.up.notify_waiters();
        self.fail_identifies(reason);
        match verdict {
            Some(since) => self.declare_unreachable(&format!(
                "link lost without a close frame, and reconnects refused for {} ms ({reason})",
                since.as_millis()
            )),
            None => {
                // Watchers wait: the node may be back soon.
                self.downs.all(&format!("connect failed: {reason}"));
            }
        }
        if self.needs_link() {
            self.spawn_reconnect();
        }
    }

    fn fail_identifies(&self, reason: &str) {
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
        let duplicate =
            matches!(reason, CloseReason::Remote(r) | CloseReason::Local(r) if r == DUPLICATE);
        if duplicate {
            // One of two simultaneous connections is gone and the other is
            // the link: an identify asked or answered on this one may have
            // been dropped with it (answers go back on the connection that
            // asked), so it is asked again, on the link.
            self.requests.fail_identifies(IdentifyFailed::Replaced);
        }
        if was_up {
            tracing::info!(node = %PeerText(&self.node), %reason, "link to node closed");
            // Without a Close frame: the first half of the evidence that
            // the node is gone (see `liveness`).
            let abrupt = match reason {
                CloseReason::Lost => true,
                CloseReason::Error(e) => matches!(**e, TransportError::Io(_)),
                _ => false,
            };
            lock(&self.life).on_link_closed(Instant::now(), abrupt, transport::random_uid());
            self.emit(RemoteEvent::Disconnected {
                node: self.node.to_string(),
                reason: reason.to_string(),
            });
            if !duplicate {
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
    pub(super) fn take_connections(&self) -> Vec<Connection> {
        let conns = lock(&self.conns).drain().map(|(_, c)| c).collect();
        *lock(&self.state) = LinkState::Idle;
        conns
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

    /// The inbound dispatcher for a new connection of this association.
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

    /// Queues a system message, connecting if needed.
    pub(super) fn send_system(self: &Arc<Self>, msg: &SysWire) {
        // After what this thread staged; from inside an encoder, by a task.
        let Ok(turn) = Turn::begin() else {
            return self.defer(msg, Self::send_system);
        };
        let body = msg.encode();
        let mut st = self.state();
        match &mut *st {
            LinkState::Up(link) => match link.sender.try_send(&turn, system_frame(body)) {
                Ok(()) => {}
                // Waits for room in the bounded outbox, not a task each.
                Err(TrySendFrameError::Full(f)) => {
                    link.sender.park(&turn, &self.outbox, f);
                }
                Err(e) => {
                    let body = e.into_inner().map(|f| f.body).unwrap_or_default();
                    *st = LinkState::Connecting {
                        pending: VecDeque::from([Pending::System(body)]),
                    };
                    drop(st);
                    self.spawn_connect();
                }
            },
            LinkState::Connecting { pending } => pending.push_back(Pending::System(body)),
            LinkState::Idle => {
                *st = LinkState::Connecting {
                    pending: VecDeque::from([Pending::System(body)]),
                };
                drop(st);
                self.spawn_connect();
            }
        }
    }

    /// A system message sent from inside an encoder, which may hold this
    /// association's locks: sent by a task instead, once they are free.
    #[cold]
    fn defer(self: &Arc<Self>, msg: &SysWire, send: fn(&Arc<Self>, &SysWire)) {
        let Ok(msg) = SysWire::decode(&msg.encode()) else {
            return;
        };
        let assoc = self.clone();
        tokio::spawn(async move { send(&assoc, &msg) });
    }

    /// Tells the asker whose reply slot is `r` that no reply will come
    /// (`reply`); nothing if its incarnation is quarantined (its asks
    /// failed already).
    pub(crate) fn send_no_reply(self: &Arc<Self>, r: &Recipient, why: NoReply) {
        if self.is_quarantined(r.uid) {
            return;
        }
        self.send_system(&SysWire::NoReply {
            reply: r.path.elements().to_owned(),
            why,
        });
    }

    pub(crate) fn send_stop(self: &Arc<Self>, r: &Recipient) {
        if self.is_quarantined(r.uid) {
            return;
        }
        self.send_reliable(&SysWire::Stop {
            path: r.path.elements().to_owned(),
        });
    }

    pub(crate) fn watch(self: &Arc<Self>, r: &Recipient, sink: WatchSink) {
        if self.is_quarantined(r.uid) {
            return sink.deliver(Terminated {
                path: r.path.clone(),
                reason: StopReason::NodeUnreachable(format!(
                    "incarnation {:#x} of {} is quarantined",
                    r.uid, self.node
                )),
            });
        }
        let watch_id = self.requests.add_watch(r.path.clone(), sink);
        self.arm_detector();
        self.send_reliable(&SysWire::Watch {
            path: r.path.elements().to_owned(),
            watch_id,
        });
    }

    /// Undoes `watch`: `sink` hears nothing more of `r`, and the peer is
    /// told (reliably) to forget the watches, so it holds nothing for them.
    pub(crate) fn unwatch(self: &Arc<Self>, r: &Recipient, sink: &WatchSink) {
        for watch_id in self.requests.remove_watches(&r.path, sink) {
            self.send_reliable(&SysWire::Unwatch {
                path: r.path.elements().to_owned(),
                watch_id,
            });
        }
    }

    /// Queues a system message for exactly-once delivery: numbered, kept
    /// until acknowledged, resent after a reconnect or when unacknowledged
    /// for a heartbeat interval. A full buffer quarantines the peer.
    pub(super) fn send_reliable(self: &Arc<Self>, msg: &SysWire) {
        // After what this thread staged; from inside an encoder, by a task.
        let Ok(turn) = Turn::begin() else {
            return self.defer(msg, Self::send_reliable);
        };
        let mut out = self.requests.out();
        let frame = match Requests::push_reliable(&mut out, msg.encode()) {
            Ok(frame) => frame,
            Err(overflow) => {
                drop(out);
                let uid = self.peer_uid();
                tracing::error!(node = %PeerText(&self.node), uid, capacity = overflow.capacity, "system message buffer overflowed: the peer acknowledged none of the last {} system messages; quarantining it", overflow.capacity);
                self.quarantine(
                    uid,
                    &format!(
                        "system message buffer overflowed ({} unacknowledged)",
                        overflow.capacity
                    ),
                );
                return;
            }
        };
        let up = match &*self.state() {
            LinkState::Up(link) => {
                // Full: the resend timer sends it later, in order.
                let _ = link.sender.try_send(&turn, frame);
                true
            }
            _ => false,
        };
        drop(out);
        if !up {
            self.ensure_connecting();
        }
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

impl RemoteWatcher for Association {
    /// A watch placed by an incarnation that is gone (it shut down,
    /// restarted or overflowed: quarantined) has nobody to tell: sending
    /// would only dial a node that said goodbye (and, the message never
    /// acknowledged, keep redialing it with backoff), or hand a new
    /// incarnation a watch id it never issued. Akka drops such watchers
    /// when their address terminates; this drops them when they fire.
    fn send_terminated(self: Arc<Self>, watch_id: u64, uid: u64, t: &Terminated) {
        if self.is_quarantined(uid) {
            tracing::debug!(node = %PeerText(&self.node), uid, watch_id, path = %t.path, "Terminated for a watcher of a gone incarnation dropped");
            return;
        }
        self.send_reliable(&SysWire::Terminated {
            watch_id,
            reason: t.reason.clone(),
        });
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
        self.quarantine(uid, PEER_SHUT_DOWN);
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

impl LaneHost for Association {
    fn lane(&self) -> &LargeLane {
        &self.large
    }

    /// The link to send a large message on, connecting if needed.
    async fn link_for(
        host: &Arc<Self>,
        r: &Recipient,
        cancel: &CancellationToken,
    ) -> Result<Link, DeadLetterReason> {
        let mut asked = false;
        loop {
            let notified = host.up.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if host.is_quarantined(r.uid) {
                return Err(DeadLetterReason::Quarantined);
            }
            match &*host.state() {
                LinkState::Up(link) if !link.serves(r.uid) => {
                    return Err(DeadLetterReason::Restarted);
                }
                LinkState::Up(link) => return Ok(link.clone()),
                LinkState::Idle if asked => {
                    return Err(DeadLetterReason::Unreachable(
                        "connecting to its node failed".into(),
                    ));
                }
                LinkState::Idle | LinkState::Connecting { .. } => {}
            }
            if !asked {
                asked = true;
                host.ensure_connecting();
                continue;
            }
            tokio::select! {
                () = notified => {}
                () = cancel.cancelled() => return Err(DeadLetterReason::ShutDown),
            }
        }
    }

    fn lane_dead_letter(&self, what: &str, to: &dyn std::fmt::Display, why: &DeadLetterReason) {
        self.dead_letter(what, to, why);
    }

    fn lane_cancel(&self) -> CancellationToken {
        self.ctx
            .upgrade()
            .map(|c| c.cancel.clone())
            .unwrap_or_default()
    }
}

/// Counts the user messages `conn` (ended) dropped as dead letters of
/// `node`, for `why`: a link's losses are never silent.
pub(super) fn count_dropped(registry: &Registry, node: &str, conn: &Connection, why: &str) {
    let lost = conn.stats().frames_dropped;
    if lost > 0 {
        let why = DeadLetterReason::LinkLost(why.to_owned().into());
        registry.dead_letters_n(lost, "(queued on a lost link)", &node, &why);
    }
}

/// Why a connect attempt failed, and whether the node's address refused
/// it (`ECONNREFUSED`: nothing listens there), the second half of the
/// evidence that a node is gone (see `liveness`).
struct ConnectFailed {
    reason: String,
    refused: bool,
}

impl From<String> for ConnectFailed {
    fn from(reason: String) -> Self {
        Self {
            reason,
            refused: false,
        }
    }
}

impl From<&str> for ConnectFailed {
    fn from(reason: &str) -> Self {
        reason.to_owned().into()
    }
}

/// Whether the transport alone proves `peer` is the node it names: a TLS
/// certificate naming the node (or pinned for it). When authentication is
/// explicitly off every claim is believed, as the operator chose. A peer
/// that proved only the shared secret, or holds a certificate for its host
/// only, may be any holder of those: not proven (see `receive_only`).
fn transport_proof(peer: &PeerInfo) -> bool {
    matches!(
        peer.verified,
        PeerVerified::Node | PeerVerified::Unauthenticated
    )
}

/// Addresses for a log line or an error: `a, b, c`.
fn join(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    list.join(", ")
}
