//! The handles one actor system registers: [`SystemMeters`] (dead letters
//! and malformed input by their bounded labels, the association count,
//! the memory held for peers, the peer memory budget's counters, and the
//! way to a peer's [`PeerMeters`]), and [`ActorMeter`], one running
//! actor's, from handles registered once per actor type and system.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use metrics::{Counter, Gauge, Histogram, SharedString};

use super::{
    catalog::{
        ALIVE, ASSOCIATIONS, DEAD_LETTERS, HANDLING, MAILBOX_DEPTH, MALFORMED,
        PEER_MEMORY_DISCONNECTS, PEER_MEMORY_HELD, PEER_MEMORY_REFUSED, describe,
    },
    peer::PeerMeters,
    recorder_installed,
};
use crate::dead_letter::{DeadLetterReason, MalformedKind};

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
        PeerMeters::new(&self.node, peer)
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

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::telemetry::tests::Readings;

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
    fn without_a_recorder_nothing_is_registered_or_measured() {
        let meters = SystemMeters::new("n@h:1");
        assert!(!meters.enabled());
        // Counted nowhere, and no slot is looked up.
        meters.dead_letters(3, &DeadLetterReason::NoActor);
        meters.malformed(MalformedKind::Envelope);
        let actor = meters.actor("a::Worker");
        assert!(!actor.enabled());
        assert_eq!(actor.start(), None, "no clock read per message");
    }

    #[test]
    fn dead_letters_and_malformed_input_count_under_their_own_labels() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let meters = metrics::with_local_recorder(&recorder, || SystemMeters::new("n@h:1"));
        assert!(meters.enabled());
        let full = DeadLetterReason::NoActor;
        meters.dead_letters(3, &full);
        meters.dead_letters(2, &full);
        meters.malformed(MalformedKind::Fragment);
        let r = Readings::take(&snapshotter);
        let dead = [("node", "n@h:1"), ("reason", full.label())];
        assert_eq!(r.get(DEAD_LETTERS, &dead), Some(&DebugValue::Counter(5)));
        let bad = [("node", "n@h:1"), ("kind", MalformedKind::Fragment.label())];
        assert_eq!(r.get(MALFORMED, &bad), Some(&DebugValue::Counter(1)));
        let other = [("node", "n@h:1"), ("kind", MalformedKind::Envelope.label())];
        assert_eq!(r.get(MALFORMED, &other), Some(&DebugValue::Counter(0)));
    }

    #[test]
    fn an_actor_is_counted_alive_until_its_meter_drops() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let meters = metrics::with_local_recorder(&recorder, || SystemMeters::new("n@h:1"));
        let alive = [("node", "n@h:1"), ("actor", "Worker<Job>")];
        // Handles per type are registered at the first spawn, with the
        // recorder installed then; the second spawn reuses them.
        let one = metrics::with_local_recorder(&recorder, || meters.actor("a::Worker<b::Job>"));
        let two = meters.actor("a::Worker<b::Job>");
        assert!(one.enabled());
        one.taken(4);
        let started = one.start();
        assert!(started.is_some(), "measured: a recorder was installed");
        one.handled(started);
        drop(two);
        let r = Readings::take(&snapshotter);
        assert_eq!(r.get(ALIVE, &alive), Some(&DebugValue::Gauge(1.0.into())));
        assert_eq!(
            r.get(MAILBOX_DEPTH, &alive),
            Some(&DebugValue::Histogram(vec![4.0.into()]))
        );
        assert!(
            matches!(r.get(HANDLING, &alive), Some(DebugValue::Histogram(h)) if h.len() == 1),
            "one handling time"
        );
    }
}
