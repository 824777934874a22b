//! The catalog of every metric this crate emits: each name as a constant,
//! and [`METRICS`], one [`Spec`] per metric (kind, unit, labels, meaning),
//! which [`describe`] hands to the recorder and the "Metrics" table of
//! `docs/OPERATIONS.md` mirrors (a test compares them). Pure data: the
//! handles that emit these live in the sibling units.

use metrics::{SharedString, Unit};

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

/// Describes every metric of [`METRICS`] (kind, unit, help) to the
/// recorder installed now, for exporters that print them.
pub(super) fn describe() {
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::dead_letter::{DeadLetterReason, MalformedKind};

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
    fn every_name_is_unique_prefixed_and_named_as_prometheus_expects() {
        let mut seen = HashSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "{} is listed once", m.name);
            assert!(
                m.name.starts_with("remoting_") || m.name.starts_with("actors_"),
                "{} names its crate",
                m.name
            );
            // Exporters add `_total` to counters that lack it and read it
            // as a counter's; a gauge named so would be taken for one.
            assert_eq!(
                m.name.ends_with("_total"),
                m.kind == Kind::Counter,
                "{}: only counters end in _total",
                m.name
            );
            // The unit is in the name too, so it survives exporters that
            // drop descriptions.
            if let Some(unit) = m.unit {
                let suffix = match unit {
                    Unit::Bytes => "bytes",
                    Unit::Seconds => "seconds",
                    other => panic!("{}: unit {other:?} has no suffix here", m.name),
                };
                assert!(
                    m.name.contains(suffix),
                    "{} names its unit, {suffix}",
                    m.name
                );
            }
            assert!(
                m.labels.split(", ").next() == Some("node"),
                "{} is labelled by node first",
                m.name
            );
        }
    }
}
