//! Remoting: the links to other nodes and what travels on them.
//!
//! Units, bottom up; each imports only units above it in this list (see
//! `docs/ARCHITECTURE.md`):
//! - pure, no IO: `envelope` (the envelope format, parse and encode),
//!   `compression` (recipient ids per link), `system_msg` (system
//!   messages on the wire), `reliable` (their exactly-once delivery),
//!   `liveness` (heartbeat verdicts, reconnect timing, incarnation and
//!   tie-break decisions, time passed in), `events` ([`RemoteEvent`]),
//!   `flow` (credit per recipient: windows, grants, parked batches).
//! - `keeper`: one schedule for every association's heartbeat tick, and
//!   which have gone unused for how long; pure.
//! - `access`: which peer requests are honoured (untrusted mode, reply
//!   slots never looked up); pure.
//! - `install`: the install and incarnation rules (which connection
//!   becomes the link, which incarnation a restart displaces, when one
//!   is quarantined); pure.
//! - `dial`: dialing a node (its target, the allow-list, what a refusal
//!   means, the identity the peer must prove; one attempt in flight).
//! - `link`: what a link is made of (recipient, link, link state, what
//!   waits while connecting, the encoder guard).
//! - `large`: the large-message lane and reassembly.
//! - `inbound`: the dispatcher a connection's reader delivers into; it
//!   reports to its association through the `Peer` trait. Its units, each
//!   with the state it owns: `bad_input` (the malformed-input limit, pure),
//!   `conn` (what every job shares), `share` (the memory budget), `ids`,
//!   `runs` (the hot path), `park` (full mailboxes), `large`, `system`.
//! - `net`: the transport endpoint with its security erased.
//! - `context`: what every association of a node shares.
//! - `requests`: an association's system-message bookkeeping (watches,
//!   identifies, the reliable streams).
//! - `association`: one remote node's link state and what changes it
//!   (close, quarantine, unreachable), carrying out `install`'s and
//!   `liveness`'s decisions.
//! - `connect`: connect attempts and installing what connects.
//! - `outbound`: sending user and system messages on an association.
//! - `wire`: the envelope writer for test harnesses (hidden; `envelope`'s
//!   own writers).
//! - this file: [`Remoting`], the set of associations of one node.

mod access;
mod association;
mod compression;
mod connect;
mod context;
mod dial;
mod envelope;
mod events;
mod flow;
mod inbound;
mod install;
mod keeper;
mod large;
mod link;
mod liveness;
mod net;
mod outbound;
mod reliable;
mod requests;
mod system_msg;
pub mod wire;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use transport::{ConnStats, Connection, Endpoint, TransportConfig};

use crate::budget;
pub use crate::budget::PeerMemory;
pub(crate) use association::Association;
pub(crate) use envelope::Tag;
pub use events::RemoteEvent;
pub use large::LARGE_MESSAGE_THRESHOLD;
pub(crate) use link::{Recipient, TellError};

use crate::{
    config::SystemConfig, error::ResolveError, path::ActorPath, registry::Registry,
    serialization::Bincode,
};
use context::Context;
use keeper::{Idle, Published, Schedule};
use link::lock;
use net::Net;
use system_msg::SysWire;

/// Everything remote of one node.
pub(crate) struct Remoting {
    shared: Arc<Context>,
    associations: Mutex<HashMap<Arc<str>, Arc<Association>>>,
    /// One [`Recipient`] per remote path and incarnation, shared by every
    /// ref to it so that its compressed id is assigned once per link.
    refs: Mutex<HashMap<String, Weak<Recipient>>>,
    /// Associations refused at `SystemConfig::set_max_associations`.
    refused: AtomicU64,
    /// Idle associations dropped (see `evict_idle`, `sweep_idle`).
    evicted: AtomicU64,
    /// Inbound connections refused (handshake failed, invalid address).
    refused_inbound: link::Sampler,
    /// Associations made since the keeper last looked, and its wake-up.
    born: Mutex<Vec<Weak<Association>>>,
    born_wake: Arc<Notify>,
}

/// `addr` (`host` or `host:port`) as `host:port`, the port `port` when
/// it names none; `None` unless the host is a DNS name, an IPv4 address or
/// a bracketed IPv6 one (a path could not hold anything else).
fn advertised_host_port(addr: &str, port: u16) -> Option<String> {
    let (host, port) = match addr.rsplit_once(':') {
        Some((host, p)) if !host.contains(':') || host.ends_with(']') => (host, p.parse().ok()?),
        _ => (addr, port),
    };
    let valid = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
        }
    };
    let hostport = format!("{host}:{port}");
    (valid && ActorPath::parse(&format!("tcp://n@{hostport}/user/x")).is_ok()).then_some(hostport)
}

/// A bound endpoint, before the node it serves exists, and the node's
/// budget for what peers make it hold (which its pending handshakes are
/// charged to from the first accepted connection).
pub(crate) struct Bound(Box<dyn Net>, Arc<budget::NodeBudget>);

impl Bound {
    /// The node's address as peers see it (`name@host:port`).
    pub(crate) fn advertised(&self) -> &str {
        self.0.advertised_addr()
    }
}

impl Remoting {
    /// Binds the endpoint (plain TCP, or TLS when configured). The node's
    /// identity is known after this, so the registry can be made.
    pub(crate) async fn bind(
        name: &str,
        bind: SocketAddr,
        config: &SystemConfig,
    ) -> Result<Bound, crate::error::SystemError> {
        let advertised = config.advertised.clone();
        if let Some(a) = &advertised {
            // Checked before binding, with any port.
            if advertised_host_port(a, 1).is_none() {
                return Err(crate::error::SystemError::InvalidAdvertised(a.clone()));
            }
        } else if bind.ip().is_unspecified() {
            tracing::warn!(%bind, "bound to every interface with no advertised address: peers cannot name this node (SystemConfig::set_advertised_address)");
        }
        let advertise = move |a: SocketAddr| match &advertised {
            Some(adv) => format!(
                "{name}@{}",
                advertised_host_port(adv, a.port()).expect("checked above")
            ),
            None => format!("{name}@{a}"),
        };
        let mut transport: TransportConfig = config.transport.clone();
        if config.message_runs {
            transport.set_app_flags(envelope::APP_RUNS);
        }
        transport.set_message_count(envelope::messages_in);
        let budget = budget::NodeBudget::for_peers(config.peer_memory_budget);
        let also = transport.admission().cloned();
        transport.set_admission(Some(Arc::new(budget::Handshakes {
            node: budget.clone(),
            also,
        })));
        #[cfg(feature = "tls")]
        if let Some(tls) = config.tls.clone() {
            let tls = transport::Tls::new(tls).map_err(transport::TransportError::from)?;
            let endpoint = Endpoint::bind_secure(bind, transport, tls, advertise).await?;
            return Ok(Bound(Box::new(endpoint), budget));
        }
        let endpoint: Box<dyn Net> =
            Box::new(Endpoint::bind_with(bind, transport, advertise).await?);
        Ok(Bound(endpoint, budget))
    }

    /// Remoting over `bound`, delivering into `registry`; starts accepting.
    pub(crate) fn start(
        bound: Bound,
        registry: Arc<Registry>,
        config: SystemConfig,
        events: broadcast::Sender<RemoteEvent>,
    ) -> Arc<Self> {
        let budget = bound.1;
        budget.meter(
            registry
                .meters()
                .budget_counters(&budget::Held::ALL.map(budget::Held::label)),
        );
        let remoting = Arc::new(Self {
            shared: Arc::new(Context {
                registry,
                config: config.clone(),
                events,
                endpoint: bound.0,
                cancel: CancellationToken::new(),
                dials: tokio::sync::Semaphore::new(config.max_concurrent_dials),
                budget,
            }),
            associations: Mutex::new(HashMap::new()),
            refs: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            refused_inbound: link::Sampler::default(),
            born: Mutex::new(Vec::new()),
            born_wake: Arc::new(Notify::new()),
        });
        remoting.clone().start_accepting();
        tokio::spawn(Self::keep_all(
            Arc::downgrade(&remoting),
            remoting.born_wake.clone(),
            remoting.shared.cancel.clone(),
        ));
        remoting
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.shared.endpoint.local_addr()
    }

    /// This node's address as peers see it (`name@host:port`).
    pub(crate) fn node_addr(&self) -> &str {
        self.shared.endpoint.advertised_addr()
    }

    /// Cancelled when the node shuts down.
    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.shared.cancel.clone()
    }

    /// This incarnation's uid.
    pub(crate) fn uid(&self) -> u64 {
        self.shared.endpoint.uid()
    }

    /// Keys derived from the shared secret in force for `label` (see
    /// `SharedSecret::derive_keys`), the current one first; `None`
    /// without a shared secret.
    pub(crate) fn derived_keys(&self, label: &[u8]) -> Option<Vec<[u8; 32]>> {
        self.shared
            .endpoint
            .shared_secret()
            .map(|s| s.derive_keys(label))
    }

    /// Quarantines incarnation `uid` of `node`, as the link's own failure
    /// detector would (the cluster's view judged it down): its watchers
    /// get `Terminated`, and it is never talked to again.
    pub(crate) fn quarantine_incarnation(&self, node: &str, uid: u64, reason: &str) {
        if let Some(a) = self.association(node) {
            a.quarantine(uid, reason);
        }
    }

    /// The association with `node`, made if there is none, unless the
    /// system keeps `SystemConfig::set_max_associations` already.
    fn association(&self, node: &str) -> Option<Arc<Association>> {
        let mut assocs = lock(&self.associations);
        if let Some(a) = assocs.get(node) {
            return Some(a.clone());
        }
        let limit = self.shared.config.max_associations;
        if assocs.len() >= limit {
            self.evict_idle(&mut assocs);
        }
        if assocs.len() >= limit {
            drop(assocs);
            let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
            static REFUSED: link::Sampler = link::Sampler::new();
            if REFUSED.hit().is_some() {
                tracing::warn!(node = %transport::PeerText(node), limit, refused = n, evicted = self.evicted.load(Ordering::Relaxed), "association limit reached and every association is in use; a ref to this node is a dead end");
            }
            return None;
        }
        let assoc = Arc::new_cyclic(|me| Association::new(node.into(), &self.shared, me.clone()));
        assocs.insert(node.into(), assoc.clone());
        drop(assocs);
        lock(&self.born).push(Arc::downgrade(&assoc));
        self.born_wake.notify_one();
        Some(assoc)
    }

    /// The one task that keeps every association: runs each one's
    /// heartbeat tick when it is due (the only place that reads the clock
    /// for liveness) and drops associations unused for
    /// `SystemConfig::set_association_idle_timeout`. One task and one
    /// timer for the node, however many associations it has.
    async fn keep_all(this: Weak<Self>, wake_up: Arc<Notify>, cancel: CancellationToken) {
        let mut schedule: Schedule<Association> = Schedule::default();
        let Some(timeout) = this
            .upgrade()
            .map(|r| r.shared.config.association_idle_timeout)
        else {
            return;
        };
        let mut idle = Idle::new(timeout);
        let mut next_sweep = Instant::now() + idle.period();
        // Metrics, only with a recorder installed when the system was
        // built: once per heartbeat interval, from counters kept anyway.
        let mut published = this.upgrade().and_then(|r| {
            let meters = r.shared.registry.meters();
            meters
                .enabled()
                .then(|| Published::new(r.shared.config.heartbeat.interval(), Instant::now()))
        });
        loop {
            let Some(r) = this.upgrade() else { return };
            let now = Instant::now();
            for a in lock(&r.born).drain(..) {
                if let (Some(p), Some(assoc)) = (&mut published, a.upgrade()) {
                    p.add(a.clone(), r.shared.registry.meters().peer(&assoc.node));
                }
                schedule.push(now, a);
            }
            while let Some(a) = schedule.pop_due(now) {
                let next = a.tick(now);
                schedule.push(next, Arc::downgrade(&a));
            }
            if now >= next_sweep {
                r.sweep_idle(&mut idle, now);
                next_sweep = now + idle.period();
            }
            let mut wake = schedule.next().map_or(next_sweep, |n| n.min(next_sweep));
            if let Some(p) = &mut published {
                if let Some(live) = p.publish_due(now, |a| a.sample(now)) {
                    let meters = r.shared.registry.meters();
                    meters.associations(live);
                    meters.peer_memory(r.shared.budget.snapshot().held);
                }
                wake = wake.min(p.next());
            }
            drop(r);
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep_until(wake.into()) => {}
                () = wake_up.notified() => {}
            }
        }
    }

    /// Drops the associations nothing has used for the idle timeout (ones
    /// holding quarantine tombstones stay; see `evict_idle`).
    fn sweep_idle(&self, idle: &mut Idle<Arc<str>>, now: Instant) {
        let mut assocs = lock(&self.associations);
        let unused: Vec<Arc<str>> = assocs
            .iter()
            .filter(|(_, a)| Arc::strong_count(a) == 1 && a.disposable() == Some(false))
            .map(|(k, _)| k.clone())
            .collect();
        let ripe = idle.sweep(now, &unused);
        for k in &ripe {
            assocs.remove(k);
        }
        drop(assocs);
        if !ripe.is_empty() {
            self.evicted.fetch_add(ripe.len() as u64, Ordering::Relaxed);
            tracing::debug!(dropped = ripe.len(), "unused associations dropped");
        }
    }

    /// The nodes this system keeps an association with.
    pub(crate) fn nodes(&self) -> Vec<String> {
        lock(&self.associations)
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    /// Makes room in a full table: drops every association nothing uses
    /// (no ref, no connection, no dial, no watch, no unacknowledged system
    /// message); if none of those is free of quarantine tombstones, drops
    /// one that holds some. What is lost is cached state only: a ref made
    /// later makes a new association, and an inbound connection from the
    /// node does too. Runs only when the table is full, so it costs one
    /// scan of at most `max_associations` entries per refused attempt.
    ///
    /// Dropping tombstones means a quarantined incarnation of that node is
    /// no longer recognised as one; its links are closed, and a node that
    /// shut down does not come back. Connections from peers that prove no
    /// identity cannot quarantine (see `receive_only`), so a stranger
    /// cannot fill the table with entries that stay.
    fn evict_idle(&self, assocs: &mut HashMap<Arc<str>, Arc<Association>>) {
        // Only this map holds a strong reference to a free association, and
        // it is locked: no one can take a new one while this runs. The
        // keeper task may hold one for an instant: then it is skipped.
        let free = |a: &Arc<Association>| {
            if Arc::strong_count(a) == 1 {
                a.disposable()
            } else {
                None
            }
        };
        let before = assocs.len();
        assocs.retain(|_, a| free(a) != Some(false));
        let mut tombstones = 0;
        if assocs.len() == before {
            let victim = assocs
                .iter()
                .find(|(_, a)| free(a) == Some(true))
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                tracing::info!(node = %transport::PeerText(&k), "association table full: forgetting the quarantined incarnations of an idle node");
                assocs.remove(&k);
                tombstones = 1;
            }
        }
        let n = before - assocs.len();
        if n > 0 {
            self.evicted.fetch_add(n as u64, Ordering::Relaxed);
            tracing::debug!(
                evicted = n,
                tombstones,
                "idle associations dropped to make room"
            );
        }
    }

    /// Accepts inbound connections until `shutdown` closes the endpoint.
    fn start_accepting(self: Arc<Self>) {
        tokio::spawn(async move {
            loop {
                let next = self.shared.endpoint.accept().await;
                match next {
                    None => return,
                    Some(Err(e)) => {
                        if let Some(n) = self.refused_inbound.hit() {
                            tracing::warn!(error = %e, refused = n, "inbound connection refused");
                        }
                    }
                    Some(Ok(est)) => {
                        let node = est.peer().addr.clone();
                        if ActorPath::parse(&format!("tcp://{node}/user/x")).is_err() {
                            if let Some(n) = self.refused_inbound.hit() {
                                tracing::warn!(peer = %est.peer().socket_addr, advertised = %transport::PeerText(&node), refused = n, "inbound node advertises an invalid address; closing");
                            }
                            continue;
                        }
                        let Some(assoc) = self.association(&node) else {
                            // Dropped unstarted: the connection closes.
                            continue;
                        };
                        let generation = assoc.next_generation();
                        let proven = assoc.admit(est.peer());
                        let dispatch = assoc.dispatch(&self.shared, est.peer(), generation, proven);
                        let conn = est.start(dispatch);
                        assoc.install_inbound(conn, generation, proven);
                    }
                }
            }
        });
    }

    /// The sending side's handle on a remote actor: its node's
    /// association, and the recipient; `None` at the association limit. A
    /// recipient belongs to the incarnation of its node known when it was
    /// made: after a restart, old refs are dead ends, new ones work.
    pub(crate) fn recipient(&self, path: ActorPath) -> Option<(Arc<Association>, Arc<Recipient>)> {
        let assoc = self.association(path.node())?;
        let uid = assoc.peer_uid();
        Some(self.recipient_in(assoc, path, uid))
    }

    /// [`recipient`](Self::recipient) of incarnation `uid` of its node,
    /// whatever the association knows of the node now: cluster membership
    /// knows a restarted member's new uid before any link to it is up, and
    /// a ref of that uid dials it (one of the old, quarantined uid would
    /// fail at once).
    pub(crate) fn recipient_at(
        &self,
        path: ActorPath,
        uid: u64,
    ) -> Option<(Arc<Association>, Arc<Recipient>)> {
        let assoc = self.association(path.node())?;
        Some(self.recipient_in(assoc, path, uid))
    }

    fn recipient_in(
        &self,
        assoc: Arc<Association>,
        path: ActorPath,
        uid: u64,
    ) -> (Arc<Association>, Arc<Recipient>) {
        let key = format!("{path}#{uid:x}");
        let mut refs = lock(&self.refs);
        if let Some(r) = refs.get(&key).and_then(Weak::upgrade) {
            return (assoc, r);
        }
        let r = Arc::new(Recipient::new(path, uid));
        refs.retain(|_, w| w.strong_count() > 0);
        refs.insert(key, Arc::downgrade(&r));
        (assoc, r)
    }

    /// Asks `path`'s node whether an actor lives there: its manifest id
    /// and name, or `None`.
    pub(crate) async fn identify(
        &self,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        let assoc = self
            .association(path.node())
            .ok_or_else(|| ResolveError::Unreachable {
                addr: path.node().to_owned(),
                reason: format!(
                    "this system keeps {} associations already (SystemConfig::set_max_associations)",
                    self.shared.config.max_associations
                ),
            })?;
        assoc.identify(path, timeout).await
    }

    /// What peers make this node hold, against its budget.
    pub(crate) fn peer_memory(&self) -> PeerMemory {
        self.shared.budget.snapshot()
    }

    pub(crate) fn stats(&self) -> ConnStats {
        let mut total = ConnStats::default();
        for a in lock(&self.associations).values() {
            total.add(&a.stats());
        }
        total
    }

    /// Tells every peer this node is going, closes every link gracefully
    /// (what is queued is flushed), and stops listening.
    pub(crate) async fn shutdown(&self) {
        // First: from now on `Association::keep` hands back a connection
        // that arrives, for a farewell, so none is kept after the take
        // below without its peer being told.
        self.shared.cancel.cancel();
        let assocs: Vec<_> = lock(&self.associations).values().cloned().collect();
        let mut closing = tokio::task::JoinSet::new();
        let notice = SysWire::Shutdown.frame();
        let registry = self.shared.registry.clone();
        for a in assocs {
            let conns: Vec<Connection> = a.take_connections();
            // Peers learn at once that this incarnation is gone, instead of
            // waiting for their failure detectors. It follows everything
            // queued before (the Terminated of this node's actors).
            for c in &conns {
                let _ = c.try_send(notice.clone());
            }
            for c in conns {
                let registry = registry.clone();
                let node = a.node.clone();
                closing.spawn(async move {
                    c.close(association::SHUT_DOWN).await;
                    // What a close that timed out dropped: never silent.
                    association::count_dropped(&registry, &node, &c, association::SHUT_DOWN);
                });
            }
        }
        while closing.join_next().await.is_some() {}
        // Returns once the listener is closed, so that the address can be
        // bound again as soon as `shutdown().await` returns.
        self.shared.endpoint.closed().await;
    }
}

/// Decodes `bytes` the way a received frame is decoded, for fuzzing: as an
/// envelope (then its payload as a few message types, through the batch
/// record decoder that reads the extension block and picks the serializer
/// it names, and straight through MessagePack) and as a system message.
/// Returns how many of these decodes succeeded. Never panics.
#[doc(hidden)]
pub fn fuzz_decode_envelope(bytes: &[u8]) -> usize {
    use std::collections::HashMap;

    use crate::serialization::{MsgPack, RemoteMessage, Serializer, SerializerId, decode_record};

    /// A message type in MessagePack, with the shapes serde preallocates
    /// for (a sequence, a map, bytes).
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Packed {
        #[serde(default)]
        n: u64,
        #[serde(default)]
        list: Vec<String>,
        #[serde(default)]
        map: HashMap<String, Vec<u32>>,
        #[serde(default)]
        data: crate::SharedBytes,
    }
    impl RemoteMessage for Packed {
        const MANIFEST: &'static str = "fuzz.Packed";
        const SERIALIZER: SerializerId = SerializerId::MSGPACK;
    }

    let mut ok = 0;
    if let Ok(env) = envelope::parse(bytes) {
        ok += 1;
        if env.kind == envelope::Kind::Run
            && let Ok(n) = inbound::run_records(env.payload)
        {
            // What the mailbox then reads, record by record.
            let (mut pos, mut seen) = (0, 0);
            while let Some((_, ext)) = crate::mailbox::next_record_ext(env.payload, &mut pos) {
                assert!(!ext, "no record of a checked run is read as extended");
                seen += 1;
            }
            assert_eq!(seen, n, "a checked run is read as it was counted");
            ok += 1;
        }
        let (p, ext) = (env.payload, env.ext);
        ok += usize::from(Bincode.deserialize::<String>(p).is_ok());
        ok += usize::from(Bincode.deserialize::<Vec<u64>>(p).is_ok());
        ok += usize::from(Bincode.deserialize::<crate::SharedBytes>(p).is_ok());
        ok += usize::from(decode_record::<Vec<u8>>(p, ext).is_ok());
        ok += usize::from(decode_record::<Option<String>>(p, ext).is_ok());
        ok += usize::from(decode_record::<Packed>(p, ext).is_ok());
        ok += usize::from(MsgPack.deserialize::<Packed>(p).is_ok());
        ok += usize::from(MsgPack.deserialize::<Vec<Vec<u64>>>(p).is_ok());
    }
    ok += usize::from(SysWire::decode(bytes).is_ok());
    ok
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use transport::{Endpoint, FrameKind, TransportConfig};

    use super::{SysWire, advertised_host_port as hp};
    use crate::{ActorSystem, SystemConfig};

    /// A bound on each wait for the peer's side of a connection.
    const LIMIT: Duration = Duration::from_secs(10);

    /// A connection that arrives while the system shuts down, but is kept
    /// only after the shutdown took the connections (its reader had
    /// already answered the peer, so the peer had moved on), is told of
    /// the shutdown and closed all the same: its peer must not be left to
    /// its failure detector. Receive-only (kept at once) and proven (kept
    /// by a task) alike.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_kept_after_the_shutdown_is_told_and_closed() {
        let mut insecure = TransportConfig::default();
        insecure.set_insecure_no_authentication(true);
        for proven in [false, true] {
            let mut config = SystemConfig::default();
            *config.transport_mut() = insecure.clone();
            let b = ActorSystem::with_config("b", Some(([127, 0, 0, 1], 0).into()), config)
                .await
                .expect("binds");
            let remoting = b.remoting().expect("remote").clone();
            // A connection to b as its accept loop gets one, from a peer
            // that reads what b sends.
            let peer = Endpoint::bind(([127, 0, 0, 1], 0).into(), insecure.clone())
                .await
                .expect("binds");
            let here = Endpoint::bind(([127, 0, 0, 1], 0).into(), insecure.clone())
                .await
                .expect("binds");
            let (dialed, accepted) = tokio::join!(peer.connect(here.local_addr()), here.accept());
            let est = accepted.expect("open").expect("accepted");
            let (_theirs, mut inbound) = dialed.expect("dialed").start_channel(8);
            let assoc = remoting
                .association(&est.peer().addr)
                .expect("room for one");
            let generation = assoc.next_generation();
            let dispatch = assoc.dispatch(&remoting.shared, est.peer(), generation, proven);
            let conn = est.start(dispatch);
            // The shutdown runs in between.
            b.shutdown().await;
            assoc.install_inbound(conn, generation, proven);
            let notice = tokio::time::timeout(LIMIT, inbound.recv())
                .await
                .unwrap_or_else(|_| panic!("told in time (proven: {proven})"))
                .expect("a frame before the end");
            assert_eq!(notice.kind, FrameKind::System);
            assert!(matches!(
                SysWire::decode(&notice.body),
                Ok(SysWire::Shutdown)
            ));
            let end = tokio::time::timeout(LIMIT, inbound.recv())
                .await
                .expect("closed in time");
            assert!(end.is_none(), "{end:?}");
        }
    }

    #[test]
    fn advertised_addresses_take_the_bound_port_when_they_name_none() {
        assert_eq!(hp("node-1.svc", 80).as_deref(), Some("node-1.svc:80"));
        assert_eq!(
            hp("node-1.svc:7000", 80).as_deref(),
            Some("node-1.svc:7000")
        );
        assert_eq!(hp("10.0.0.1", 80).as_deref(), Some("10.0.0.1:80"));
        assert_eq!(hp("[::1]", 80).as_deref(), Some("[::1]:80"));
        assert_eq!(hp("[::1]:9", 80).as_deref(), Some("[::1]:9"));
        for bad in [
            "",
            ":80",
            "two words",
            "a/b",
            "h:x",
            "h:1:2",
            "::1",
            "[zz]",
            "h:99999",
        ] {
            assert_eq!(hp(bad, 80), None, "{bad:?}");
        }
    }
}
