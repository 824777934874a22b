//! Metrics through the [`metrics`] facade: the application installs a
//! recorder (an exporter) before it builds its systems, or none, and then
//! nothing here costs anything on the hot path.
//!
//! How each kind of value gets out, cheapest first:
//! - **Per peer node** (bytes, frames, writes, queue depth, phi, reconnects,
//!   quarantines, fragments): never touched per message. The transport and
//!   the association count in atomics they keep anyway (`ConnStats`,
//!   `PeerCounters`); the node's keeper task publishes them once per
//!   heartbeat interval through handles registered once per association
//!   ([`PeerMeters`]), and zeroes its gauges when the association is
//!   dropped. Counters go out as increments from the last published
//!   value, so they never go back, even when the association is dropped
//!   and made again.
//! - **Rare events** (dead letters, malformed input): a counter handle per
//!   bounded reason, registered once per system ([`SystemMeters`]), bumped
//!   where the event is counted anyway.
//! - **Per actor type** (alive, mailbox depth, handling time): handles
//!   registered once per type and system, looked up at spawn
//!   ([`ActorMeter`]). Handling time reads the clock twice per message,
//!   so it is measured only when a recorder was installed when the actor
//!   was spawned (checked once, at spawn); without one an actor pays one
//!   branch per message.
//!
//! - **Cluster membership** (packets, bytes, refused packets, members by
//!   state, group entries): the membership task counts in atomics it
//!   keeps anyway (`Cluster::stats`) and publishes them once per probe
//!   period through handles registered once, at join ([`ClusterMeters`]).
//!
//! Every metric name, kind, unit and label is in [`METRICS`], which the
//! table in `docs/OPERATIONS.md` mirrors (a test compares them).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use metrics::{Counter, Gauge, Histogram, SharedString, Unit};
use transport::ConnStats;

use crate::dead_letter::{DeadLetterReason, MalformedKind};

/// What a metric is, for [`METRICS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One row of the metrics table: name, kind, unit, labels, meaning.
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) unit: Option<Unit>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) labels: &'static str,
    pub(crate) help: &'static str,
}

pub(crate) const BYTES_OUT: &str = "remoting_bytes_out_total";
pub(crate) const BYTES_IN: &str = "remoting_bytes_in_total";
pub(crate) const FRAMES_OUT: &str = "remoting_frames_out_total";
pub(crate) const FRAMES_IN: &str = "remoting_frames_in_total";
pub(crate) const WRITES: &str = "remoting_writes_total";
pub(crate) const FRAMES_PER_WRITE: &str = "remoting_frames_per_write";
pub(crate) const QUEUE_BYTES: &str = "remoting_queue_bytes";
pub(crate) const FRAMES_DROPPED: &str = "remoting_frames_dropped_total";
pub(crate) const RECONNECTS: &str = "remoting_reconnects_total";
pub(crate) const QUARANTINES: &str = "remoting_quarantines_total";
pub(crate) const PHI: &str = "remoting_phi";
pub(crate) const FRAGMENTS_OUT: &str = "remoting_large_fragments_out_total";
pub(crate) const FRAGMENTS_IN: &str = "remoting_large_fragments_in_total";
pub(crate) const ASSOCIATIONS: &str = "remoting_associations";
pub(crate) const PEER_MEMORY_REFUSED: &str = "remoting_peer_memory_refused_total";
pub(crate) const PEER_MEMORY_DISCONNECTS: &str = "remoting_peer_memory_disconnects_total";
pub(crate) const PEER_MEMORY_HELD: &str = "remoting_peer_memory_held_bytes";
pub(crate) const MALFORMED: &str = "remoting_malformed_total";
pub(crate) const DEAD_LETTERS: &str = "actors_dead_letters_total";
pub(crate) const ALIVE: &str = "actors_alive";
pub(crate) const MAILBOX_DEPTH: &str = "actors_mailbox_depth";
pub(crate) const HANDLING: &str = "actors_handling_seconds";
pub(crate) const CLUSTER_PACKETS_OUT: &str = "actors_cluster_packets_out_total";
pub(crate) const CLUSTER_BYTES_OUT: &str = "actors_cluster_bytes_out_total";
pub(crate) const CLUSTER_PACKETS_IN: &str = "actors_cluster_packets_in_total";
pub(crate) const CLUSTER_BYTES_IN: &str = "actors_cluster_bytes_in_total";
pub(crate) const CLUSTER_REFUSED: &str = "actors_cluster_refused_total";
pub(crate) const CLUSTER_MEMBERS: &str = "actors_cluster_members";
pub(crate) const CLUSTER_GROUP_ENTRIES: &str = "actors_cluster_group_entries";
pub(crate) const SINGLETON_RUNNING: &str = "actors_singleton_running";
pub(crate) const SINGLETON_STARTS: &str = "actors_singleton_starts_total";
pub(crate) const SINGLETON_BUFFERED: &str = "actors_singleton_buffered_bytes";
pub(crate) const SHARDING_ACTIVATIONS: &str = "actors_sharding_activations_total";
pub(crate) const SHARDING_HANDOFFS: &str = "actors_sharding_handoffs_total";
pub(crate) const SHARDING_DROPPED: &str = "actors_sharding_dropped_total";
pub(crate) const SHARDING_SHARDS: &str = "actors_sharding_shards";
pub(crate) const SHARDING_ENTITIES: &str = "actors_sharding_entities";
pub(crate) const SHARDING_BUFFERED: &str = "actors_sharding_buffered";
pub(crate) const SHARDING_OUTBOX_BYTES: &str = "actors_sharding_outbox_bytes";

const SHARDING: &str = "node, type";

const PEER: &str = "node, peer";

/// Every metric this crate emits.
pub(crate) const METRICS: &[Spec] = &[
    Spec {
        name: BYTES_OUT,
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        labels: PEER,
        help: "Bytes written to the peer's connections.",
    },
    Spec {
        name: BYTES_IN,
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        labels: PEER,
        help: "Bytes read from the peer's connections.",
    },
    Spec {
        name: FRAMES_OUT,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Frames written to the peer: one per user message (a large message: one per fragment), plus system and control frames (a heartbeat per interval).",
    },
    Spec {
        name: FRAMES_IN,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Frames read from the peer, counted as frames out.",
    },
    Spec {
        name: WRITES,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Write calls (syscalls; with TLS, calls that seal up to 256 KiB into records and write them) on the peer's connections.",
    },
    Spec {
        name: FRAMES_PER_WRITE,
        kind: Kind::Gauge,
        unit: None,
        labels: PEER,
        help: "Frames out per write since the association was made: the batching factor.",
    },
    Spec {
        name: QUEUE_BYTES,
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        labels: PEER,
        help: "Bytes queued on the peer's link for its writer (0 while no link is up).",
    },
    Spec {
        name: FRAMES_DROPPED,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "User message frames queued for the peer but never written because their connection ended (also dead letters).",
    },
    Spec {
        name: RECONNECTS,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Connect attempts after the association's first: after a lost link or a failed attempt.",
    },
    Spec {
        name: QUARANTINES,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Incarnations of the peer quarantined (restarted, shut down, or overflowed the system-message buffer).",
    },
    Spec {
        name: PHI,
        kind: Kind::Gauge,
        unit: None,
        labels: PEER,
        help: "The failure detector's phi for the peer (0 before any heartbeat ack).",
    },
    Spec {
        name: FRAGMENTS_OUT,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Fragments of large messages sent to the peer.",
    },
    Spec {
        name: FRAGMENTS_IN,
        kind: Kind::Counter,
        unit: None,
        labels: PEER,
        help: "Fragments of large messages received from the peer.",
    },
    Spec {
        name: ASSOCIATIONS,
        kind: Kind::Gauge,
        unit: None,
        labels: "node",
        help: "Associations (peer nodes) this node keeps, at most max_associations.",
    },
    // The peer memory budget's counters are emitted where it refuses or
    // cuts (handles the budget registers once per node); the gauge with
    // the associations'.
    Spec {
        name: PEER_MEMORY_REFUSED,
        kind: Kind::Counter,
        unit: None,
        labels: "node, kind",
        help: "What a peer asked the node to hold past its share of `set_peer_memory_budget`, refused, by kind: ids, parked, large, queued, handshake.",
    },
    Spec {
        name: PEER_MEMORY_DISCONNECTS,
        kind: Kind::Counter,
        unit: None,
        labels: "node",
        help: "Connections disconnected for staying over their share of `set_peer_memory_budget`.",
    },
    Spec {
        name: PEER_MEMORY_HELD,
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        labels: "node",
        help: "Bytes the node holds for its peers now (ids, batches waiting in mailboxes or parked, large messages, pending handshakes), at most `set_peer_memory_budget`.",
    },
    Spec {
        name: MALFORMED,
        kind: Kind::Counter,
        unit: None,
        labels: "node, kind",
        help: "Malformed input from peers by kind: envelope, extension_block, recipient, fragment, system_message.",
    },
    Spec {
        name: DEAD_LETTERS,
        kind: Kind::Counter,
        unit: None,
        labels: "node, reason",
        help: "Dead letters by reason (see the reasons below the table).",
    },
    Spec {
        name: ALIVE,
        kind: Kind::Gauge,
        unit: None,
        labels: "node, actor",
        help: "Actors running, by actor type.",
    },
    Spec {
        name: MAILBOX_DEPTH,
        kind: Kind::Histogram,
        unit: None,
        labels: "node, actor",
        help: "Messages an actor found waiting each time it took its mailbox's contents (one sample per batch), by actor type.",
    },
    Spec {
        name: HANDLING,
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        labels: "node, actor",
        help: "Time an actor's handle took per message, by actor type; measured only for actors spawned while a recorder was installed.",
    },
    Spec {
        name: CLUSTER_PACKETS_OUT,
        kind: Kind::Counter,
        unit: None,
        labels: "node",
        help: "Membership (UDP) packets sent.",
    },
    Spec {
        name: CLUSTER_BYTES_OUT,
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        labels: "node",
        help: "Bytes of membership packets sent, headers included.",
    },
    Spec {
        name: CLUSTER_PACKETS_IN,
        kind: Kind::Counter,
        unit: None,
        labels: "node",
        help: "Membership packets received that were authenticated and handled.",
    },
    Spec {
        name: CLUSTER_BYTES_IN,
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        labels: "node",
        help: "Bytes of membership packets received, refused ones included.",
    },
    Spec {
        name: CLUSTER_REFUSED,
        kind: Kind::Counter,
        unit: None,
        labels: "node, kind",
        help: "Membership packets refused by kind: malformed, unauthenticated, full (past max_members).",
    },
    Spec {
        name: CLUSTER_MEMBERS,
        kind: Kind::Gauge,
        unit: None,
        labels: "node, state",
        help: "Other members this node knows, by state: up, suspect, down, left.",
    },
    Spec {
        name: CLUSTER_GROUP_ENTRIES,
        kind: Kind::Gauge,
        unit: None,
        labels: "node",
        help: "Group registry entries (actor refs) this node holds, over every member and group.",
    },
    Spec {
        name: SINGLETON_RUNNING,
        kind: Kind::Gauge,
        unit: None,
        labels: "node, singleton",
        help: "1 while the cluster singleton's instance runs on this node, else 0.",
    },
    Spec {
        name: SINGLETON_STARTS,
        kind: Kind::Counter,
        unit: None,
        labels: "node, singleton",
        help: "Instances of the cluster singleton started on this node.",
    },
    Spec {
        name: SINGLETON_BUFFERED,
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        labels: "node, singleton",
        help: "Bytes of messages this node's singleton refs hold while the singleton moves or is not yet known.",
    },
    Spec {
        name: SHARDING_ACTIVATIONS,
        kind: Kind::Counter,
        unit: None,
        labels: SHARDING,
        help: "Shards of the entity type activated on this node.",
    },
    Spec {
        name: SHARDING_HANDOFFS,
        kind: Kind::Counter,
        unit: None,
        labels: SHARDING,
        help: "Shards of the entity type this node handed off (its entities there stopped).",
    },
    Spec {
        name: SHARDING_DROPPED,
        kind: Kind::Counter,
        unit: None,
        labels: SHARDING,
        help: "Messages for entities this node dropped: a shard's buffer or an outbox full, an entity's mailbox full, a region gone.",
    },
    Spec {
        name: SHARDING_SHARDS,
        kind: Kind::Gauge,
        unit: None,
        labels: SHARDING,
        help: "Shards held (active or handing off) on this node.",
    },
    Spec {
        name: SHARDING_ENTITIES,
        kind: Kind::Gauge,
        unit: None,
        labels: SHARDING,
        help: "Live entities on this node.",
    },
    Spec {
        name: SHARDING_BUFFERED,
        kind: Kind::Gauge,
        unit: None,
        labels: SHARDING,
        help: "Messages buffered on this node for shards that move and entities that stop.",
    },
    Spec {
        name: SHARDING_OUTBOX_BYTES,
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        labels: SHARDING,
        help: "Bytes this node queues for other regions of the entity type (each outbox bounded by outbox_bytes).",
    },
];

/// `actors_cluster_refused_total`'s kinds, in `ClusterMeters::publish`'s
/// order.
pub(crate) const CLUSTER_REFUSED_KINDS: [&str; 3] = ["malformed", "unauthenticated", "full"];
/// `actors_cluster_members`'s states, in `ClusterMeters::publish`'s order.
pub(crate) const CLUSTER_MEMBER_STATES: [&str; 4] = ["up", "suspect", "down", "left"];

/// Whether a recorder (global, or local to this thread) is installed now.
///
/// The facade says so nowhere; its no-op recorder is the only zero-sized
/// one there is (every exporter holds state), which is what this asks.
/// A zero-sized recorder of one's own is taken for none: it gets every
/// metric but handling time.
pub(crate) fn recorder_installed() -> bool {
    metrics::with_recorder(|r| size_of_val(r) != 0)
}

fn describe() {
    for m in METRICS {
        let help = SharedString::const_str(m.help);
        let name = metrics::KeyName::from_const_str(m.name);
        metrics::with_recorder(|r| match m.kind {
            Kind::Counter => r.describe_counter(name, m.unit, help),
            Kind::Gauge => r.describe_gauge(name, m.unit, help),
            Kind::Histogram => r.describe_histogram(name, m.unit, help),
        });
    }
}

/// One system's handles: dead letters and malformed input by their
/// bounded labels, the association count, and per actor type.
pub(crate) struct SystemMeters {
    node: SharedString,
    enabled: bool,
    dead: Vec<Counter>,
    malformed: Vec<Counter>,
    associations: Gauge,
    peer_memory: Gauge,
    actors: Mutex<HashMap<&'static str, Arc<ActorHandles>>>,
}

impl SystemMeters {
    /// Registers this system's handles with the recorder installed now
    /// (all no-ops without one). `node`: the system's node address.
    pub(crate) fn new(node: &str) -> Self {
        let enabled = recorder_installed();
        let node = SharedString::from(node.to_owned());
        if !enabled {
            return Self {
                node,
                enabled,
                dead: Vec::new(),
                malformed: Vec::new(),
                associations: Gauge::noop(),
                peer_memory: Gauge::noop(),
                actors: Mutex::default(),
            };
        }
        describe();
        let by = |name: &'static str, key: &'static str, labels: &[&'static str]| {
            labels
                .iter()
                .map(|&l| metrics::counter!(name, "node" => node.clone(), key => l))
                .collect()
        };
        Self {
            dead: by(DEAD_LETTERS, "reason", &DeadLetterReason::LABELS),
            malformed: by(MALFORMED, "kind", &MalformedKind::LABELS),
            associations: metrics::gauge!(ASSOCIATIONS, "node" => node.clone()),
            peer_memory: metrics::gauge!(PEER_MEMORY_HELD, "node" => node.clone()),
            node,
            enabled,
            actors: Mutex::default(),
        }
    }

    /// Whether a recorder was installed when the system was built.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// `n` dead letters for reason `why`.
    pub(crate) fn dead_letters(&self, n: u64, why: &DeadLetterReason) {
        if self.enabled {
            self.dead[why.slot()].increment(n);
        }
    }

    /// One malformed input of `kind` from a peer.
    pub(crate) fn malformed(&self, kind: MalformedKind) {
        if self.enabled {
            self.malformed[kind.slot()].increment(1);
        }
    }

    /// How many associations the node keeps.
    pub(crate) fn associations(&self, n: usize) {
        self.associations.set(n as f64);
    }

    /// Sets the bytes held for peers (`ActorSystem::peer_memory`).
    pub(crate) fn peer_memory(&self, held: usize) {
        self.peer_memory.set(held as f64);
    }

    /// The peer memory budget's counters for this node: refusals by kind
    /// (in the order of `labels`) and disconnections.
    pub(crate) fn budget_counters(&self, labels: &[&'static str]) -> (Vec<Counter>, Counter) {
        if !self.enabled {
            return (
                labels.iter().map(|_| Counter::noop()).collect(),
                Counter::noop(),
            );
        }
        let node = &self.node;
        let refused = labels
            .iter()
            .map(|&l| metrics::counter!(PEER_MEMORY_REFUSED, "node" => node.clone(), "kind" => l))
            .collect();
        let cut = metrics::counter!(PEER_MEMORY_DISCONNECTS, "node" => node.clone());
        (refused, cut)
    }

    /// The handles for peer `peer` (a node address; their number is
    /// bounded by `SystemConfig::set_max_associations`).
    pub(crate) fn peer(&self, peer: &str) -> PeerMeters {
        let peer = SharedString::from(peer.to_owned());
        let node = &self.node;
        let c = |name: &'static str| metrics::counter!(name, "node" => node.clone(), "peer" => peer.clone());
        let g = |name: &'static str| metrics::gauge!(name, "node" => node.clone(), "peer" => peer.clone());
        PeerMeters {
            bytes_out: c(BYTES_OUT),
            bytes_in: c(BYTES_IN),
            frames_out: c(FRAMES_OUT),
            frames_in: c(FRAMES_IN),
            writes: c(WRITES),
            frames_dropped: c(FRAMES_DROPPED),
            reconnects: c(RECONNECTS),
            quarantines: c(QUARANTINES),
            fragments_out: c(FRAGMENTS_OUT),
            fragments_in: c(FRAGMENTS_IN),
            frames_per_write: g(FRAMES_PER_WRITE),
            queue: g(QUEUE_BYTES),
            phi: g(PHI),
            last: PeerSample::default(),
        }
    }

    /// The meter of one actor of type `type_name` (`std::any::type_name`),
    /// counted alive until dropped.
    pub(crate) fn actor(&self, type_name: &'static str) -> ActorMeter {
        if !self.enabled {
            return ActorMeter(None);
        }
        let handles = self
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(type_name)
            .or_insert_with(|| {
                let actor = SharedString::from(short_type_name(type_name));
                let node = self.node.clone();
                Arc::new(ActorHandles {
                    alive: metrics::gauge!(ALIVE, "node" => node.clone(), "actor" => actor.clone()),
                    depth: metrics::histogram!(MAILBOX_DEPTH, "node" => node.clone(), "actor" => actor.clone()),
                    handling: metrics::histogram!(HANDLING, "node" => node, "actor" => actor),
                })
            })
            .clone();
        handles.alive.increment(1.0);
        ActorMeter(Some(handles))
    }
}

/// `a::b::Actor<c::Msg>` → `Actor<Msg>`: the label of an actor type.
pub(crate) fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    let mut chars = full.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else if ch.is_alphanumeric() || ch == '_' {
            segment.push(ch);
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(ch);
        }
    }
    out.push_str(&segment);
    out
}

struct ActorHandles {
    alive: Gauge,
    depth: Histogram,
    handling: Histogram,
}

/// One running actor's metrics; counts it alive until dropped.
pub(crate) struct ActorMeter(Option<Arc<ActorHandles>>);

impl ActorMeter {
    /// Whether this actor is measured (a recorder was installed at spawn).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The actor took `n` messages from its mailbox at once.
    pub(crate) fn taken(&self, n: usize) {
        if let Some(h) = &self.0 {
            h.depth.record(n as f64);
        }
    }

    /// When handling a message starts, if it is measured.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.0.as_ref().map(|_| Instant::now())
    }

    /// Handling a message that started at `started` is done.
    #[inline]
    pub(crate) fn handled(&self, started: Option<Instant>) {
        if let (Some(h), Some(t)) = (&self.0, started) {
            h.handling.record(t.elapsed().as_secs_f64());
        }
    }
}

impl Drop for ActorMeter {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.alive.decrement(1.0);
        }
    }
}

/// One reading of a node's membership counters, for
/// [`ClusterMeters::publish`]: totals since join.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterSample {
    pub(crate) packets_out: u64,
    pub(crate) bytes_out: u64,
    pub(crate) packets_in: u64,
    pub(crate) bytes_in: u64,
    /// By [`CLUSTER_REFUSED_KINDS`].
    pub(crate) refused: [u64; 3],
    /// By [`CLUSTER_MEMBER_STATES`].
    pub(crate) members: [usize; 4],
    pub(crate) group_entries: usize,
}

/// One cluster singleton's handles on one node, registered once when its
/// manager or ref is made.
#[derive(Debug, Clone)]
pub(crate) struct SingletonMeters {
    pub(crate) running: Gauge,
    pub(crate) starts: Counter,
    pub(crate) buffered: Gauge,
}

impl SingletonMeters {
    /// Node `node`'s handles for singleton `name`; `None` without a
    /// recorder installed.
    pub(crate) fn new(node: &str, name: &str) -> Option<Self> {
        if !recorder_installed() {
            return None;
        }
        describe();
        let labels = [
            ("node", SharedString::from(node.to_owned())),
            ("singleton", SharedString::from(name.to_owned())),
        ];
        let labels = labels.map(|(k, v)| metrics::Label::new(k, v));
        Some(Self {
            running: metrics::gauge!(SINGLETON_RUNNING, labels.to_vec()),
            starts: metrics::counter!(SINGLETON_STARTS, labels.to_vec()),
            buffered: metrics::gauge!(SINGLETON_BUFFERED, labels.to_vec()),
        })
    }
}

/// A cluster node's handles, registered once at join, and what was last
/// published through them.
pub(crate) struct ClusterMeters {
    packets_out: Counter,
    bytes_out: Counter,
    packets_in: Counter,
    bytes_in: Counter,
    refused: [Counter; 3],
    members: [Gauge; 4],
    group_entries: Gauge,
    last: ClusterSample,
}

impl ClusterMeters {
    /// Registers node `node`'s handles with the recorder installed now;
    /// `None` without one (then membership publishes nothing).
    pub(crate) fn new(node: &str) -> Option<Self> {
        if !recorder_installed() {
            return None;
        }
        describe();
        let node = SharedString::from(node.to_owned());
        let c = |name: &'static str| metrics::counter!(name, "node" => node.clone());
        Some(Self {
            packets_out: c(CLUSTER_PACKETS_OUT),
            bytes_out: c(CLUSTER_BYTES_OUT),
            packets_in: c(CLUSTER_PACKETS_IN),
            bytes_in: c(CLUSTER_BYTES_IN),
            refused: CLUSTER_REFUSED_KINDS
                .map(|k| metrics::counter!(CLUSTER_REFUSED, "node" => node.clone(), "kind" => k)),
            members: CLUSTER_MEMBER_STATES
                .map(|s| metrics::gauge!(CLUSTER_MEMBERS, "node" => node.clone(), "state" => s)),
            group_entries: metrics::gauge!(CLUSTER_GROUP_ENTRIES, "node" => node.clone()),
            last: ClusterSample::default(),
        })
    }

    /// Publishes `now`: counters grow by what they gained since the last
    /// call, gauges take its values.
    pub(crate) fn publish(&mut self, now: &ClusterSample) {
        let l = &mut self.last;
        let pairs = [
            (&self.packets_out, now.packets_out, &mut l.packets_out),
            (&self.bytes_out, now.bytes_out, &mut l.bytes_out),
            (&self.packets_in, now.packets_in, &mut l.packets_in),
            (&self.bytes_in, now.bytes_in, &mut l.bytes_in),
        ];
        for (c, new, last) in pairs {
            if new > *last {
                c.increment(new - *last);
                *last = new;
            }
        }
        for ((c, new), last) in self.refused.iter().zip(now.refused).zip(&mut l.refused) {
            if new > *last {
                c.increment(new - *last);
                *last = new;
            }
        }
        for (g, n) in self.members.iter().zip(now.members) {
            g.set(n as f64);
        }
        self.group_entries.set(now.group_entries as f64);
    }
}

/// A sharding region's handles (per node and entity type), registered
/// once when the region starts. Counters are bumped where the region
/// counts anyway; gauges are set at each of its ticks.
#[derive(Clone)]
pub(crate) struct ShardingMeters {
    pub(crate) activations: Counter,
    pub(crate) handoffs: Counter,
    pub(crate) dropped: Counter,
    pub(crate) shards: Gauge,
    pub(crate) entities: Gauge,
    pub(crate) buffered: Gauge,
    pub(crate) outbox_bytes: Gauge,
}

impl ShardingMeters {
    /// `None` without a recorder (then the region publishes nothing).
    pub(crate) fn new(node: &str, type_name: &str) -> Option<Self> {
        if !recorder_installed() {
            return None;
        }
        describe();
        let node = SharedString::from(node.to_owned());
        let ty = SharedString::from(type_name.to_owned());
        let c = |name: &'static str| metrics::counter!(name, "node" => node.clone(), "type" => ty.clone());
        let g = |name: &'static str| metrics::gauge!(name, "node" => node.clone(), "type" => ty.clone());
        Some(Self {
            activations: c(SHARDING_ACTIVATIONS),
            handoffs: c(SHARDING_HANDOFFS),
            dropped: c(SHARDING_DROPPED),
            shards: g(SHARDING_SHARDS),
            entities: g(SHARDING_ENTITIES),
            buffered: g(SHARDING_BUFFERED),
            outbox_bytes: g(SHARDING_OUTBOX_BYTES),
        })
    }
}

/// Counts an association keeps of events on its link that the transport
/// does not: bumped where they happen (rare), read by the keeper.
#[derive(Debug, Default)]
pub(crate) struct PeerCounters {
    /// Connect attempts started (the first is not a reconnect).
    pub(crate) attempts: AtomicU64,
    /// Incarnations quarantined.
    pub(crate) quarantines: AtomicU64,
    /// Large-message fragments received (the lane counts those sent).
    pub(crate) fragments_in: AtomicU64,
    /// The final counts of connections that have ended and left the
    /// association: its totals are these plus its live connections'.
    retired: Mutex<ConnStats>,
}

impl PeerCounters {
    /// One more of `counter`.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection ended and left the association: its counts stay.
    pub(crate) fn retire(&self, final_stats: &ConnStats) {
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(final_stats);
    }

    /// What ended connections counted.
    pub(crate) fn retired(&self) -> ConnStats {
        *self.retired.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One reading of a peer's values, for [`PeerMeters::publish`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PeerSample {
    pub(crate) stats: ConnStats,
    pub(crate) queue_bytes: usize,
    pub(crate) phi: f64,
    pub(crate) reconnects: u64,
    pub(crate) quarantines: u64,
    pub(crate) fragments_out: u64,
    pub(crate) fragments_in: u64,
}

/// The handles of one peer, registered once per association, and what
/// was last published through them.
pub(crate) struct PeerMeters {
    bytes_out: Counter,
    bytes_in: Counter,
    frames_out: Counter,
    frames_in: Counter,
    writes: Counter,
    frames_dropped: Counter,
    reconnects: Counter,
    quarantines: Counter,
    fragments_out: Counter,
    fragments_in: Counter,
    frames_per_write: Gauge,
    queue: Gauge,
    phi: Gauge,
    last: PeerSample,
}

impl PeerMeters {
    /// Publishes `now`: counters grow by what they gained since the last
    /// call (a value that went back, as a connection's counts do between
    /// leaving the association and being retired, waits until it is
    /// above the last published one again).
    pub(crate) fn publish(&mut self, now: &PeerSample) {
        let (s, l) = (&now.stats, &mut self.last.stats);
        let grow = |c: &Counter, new: u64, last: &mut u64| {
            if new > *last {
                c.increment(new - *last);
                *last = new;
            }
        };
        grow(&self.bytes_out, s.bytes_out, &mut l.bytes_out);
        grow(&self.bytes_in, s.bytes_in, &mut l.bytes_in);
        grow(&self.frames_out, s.frames_out, &mut l.frames_out);
        grow(&self.frames_in, s.frames_in, &mut l.frames_in);
        grow(&self.writes, s.writes, &mut l.writes);
        grow(
            &self.frames_dropped,
            s.frames_dropped,
            &mut l.frames_dropped,
        );
        let l = &mut self.last;
        grow(&self.reconnects, now.reconnects, &mut l.reconnects);
        grow(&self.quarantines, now.quarantines, &mut l.quarantines);
        grow(&self.fragments_out, now.fragments_out, &mut l.fragments_out);
        grow(&self.fragments_in, now.fragments_in, &mut l.fragments_in);
        self.frames_per_write.set(l.stats.frames_per_write());
        self.queue.set(now.queue_bytes as f64);
        // Never -0 (the detector can say so) nor negative.
        self.phi.set(if now.phi > 0.0 { now.phi } else { 0.0 });
    }

    /// The association is gone: its gauges read 0 (its counters keep
    /// their totals; a new association for the peer adds to them).
    pub(crate) fn zero(&self) {
        self.frames_per_write.set(0.0);
        self.queue.set(0.0);
        self.phi.set(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operations_guide_lists_every_metric_as_the_code_emits_it() {
        let readme = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/OPERATIONS.md"
        ))
        .expect("the operations guide");
        let rows: Vec<Vec<String>> = readme
            .lines()
            .filter(|l| l.starts_with("| `remoting_") || l.starts_with("| `actors_"))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().trim_matches('`').to_owned())
                    .collect()
            })
            .collect();
        let expected: Vec<Vec<String>> = METRICS
            .iter()
            .map(|m| {
                let kind = match m.kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                    Kind::Histogram => "histogram",
                };
                let unit = m.unit.map_or("", |u| u.as_str());
                [m.name, kind, unit, m.labels, m.help]
                    .map(str::to_owned)
                    .to_vec()
            })
            .collect();
        assert_eq!(rows, expected);
        for label in DeadLetterReason::LABELS
            .iter()
            .chain(&MalformedKind::LABELS)
        {
            assert!(
                readme.contains(&format!("`{label}`")),
                "{label} is documented"
            );
        }
        for label in CLUSTER_REFUSED_KINDS.iter().chain(&CLUSTER_MEMBER_STATES) {
            assert!(
                readme.contains(&format!("`{label}`")),
                "{label} is documented"
            );
        }
    }

    #[test]
    fn type_names_lose_their_paths() {
        assert_eq!(short_type_name("bench::faithful::Receiver"), "Receiver");
        assert_eq!(
            short_type_name("a::Wrap<b::c::Msg, alloc::vec::Vec<u8>>"),
            "Wrap<Msg, Vec<u8>>"
        );
        assert_eq!(short_type_name("Plain"), "Plain");
    }

    #[test]
    fn a_recorder_is_seen_only_when_installed() {
        assert!(!recorder_installed());
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || assert!(recorder_installed()));
        assert!(!recorder_installed());
    }

    #[test]
    fn counters_publish_growth_only_and_never_go_back() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let value = || {
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .find(|(k, ..)| k.key().name() == BYTES_OUT)
                .map(|(.., v)| v)
        };
        let mut meters =
            metrics::with_local_recorder(&recorder, || SystemMeters::new("n@h:1").peer("p@h:2"));
        let mut sample = PeerSample::default();
        sample.stats.bytes_out = 100;
        meters.publish(&sample);
        // A connection left before it was retired: the total dips.
        sample.stats.bytes_out = 40;
        meters.publish(&sample);
        sample.stats.bytes_out = 130;
        meters.publish(&sample);
        use metrics_util::debugging::DebugValue;
        assert_eq!(value(), Some(DebugValue::Counter(130)));
    }
}
