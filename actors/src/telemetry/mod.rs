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
//! - **Cluster membership** (packets, bytes, refused packets, members by
//!   state, group entries): the membership task counts in atomics it
//!   keeps anyway (`Cluster::stats`) and publishes them once per probe
//!   period through handles registered once, at join ([`ClusterMeters`]).
//!   A cluster singleton's and a sharding region's handles are registered
//!   once where each starts ([`SingletonMeters`], [`ShardingMeters`]).
//!
//! Every metric name, kind, unit and label is in
//! [`METRICS`](catalog::METRICS), which the table in `docs/OPERATIONS.md`
//! mirrors (a test compares them).
//!
//! # Units
//! - `catalog`: every metric this crate emits, as data: the names, and
//!   [`METRICS`](catalog::METRICS) (kind, unit, labels, help), described
//!   to the recorder once per registration.
//! - `system`: [`SystemMeters`] (one per system) and [`ActorMeter`] (one
//!   per running actor).
//! - `peer`: [`PeerCounters`], [`PeerSample`] and [`PeerMeters`], one set
//!   per association.
//! - `cluster`: [`ClusterMeters`] and [`ClusterSample`] (membership),
//!   [`SingletonMeters`], [`ShardingMeters`].

mod catalog;
mod cluster;
mod peer;
mod system;

pub(crate) use cluster::{ClusterMeters, ClusterSample, ShardingMeters, SingletonMeters};
pub(crate) use peer::{PeerCounters, PeerMeters, PeerSample};
pub(crate) use system::{ActorMeter, SystemMeters};

/// Whether a recorder (global, or local to this thread) is installed now.
///
/// The facade says so nowhere; its no-op recorder is the only zero-sized
/// one there is (every exporter holds state), which is what this asks.
/// A zero-sized recorder of one's own is taken for none: it gets every
/// metric but handling time.
pub(crate) fn recorder_installed() -> bool {
    metrics::with_recorder(|r| size_of_val(r) != 0)
}

#[cfg(test)]
mod tests {
    use metrics::{Key, SharedString, Unit};
    use metrics_util::{
        CompositeKey,
        debugging::{DebugValue, Snapshotter},
    };

    use super::*;

    /// What a debugging recorder took in since its last snapshot, for the
    /// units' tests: counters as increments, gauges as their values (0
    /// once read), histograms as their samples.
    pub(super) struct Readings(Vec<(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)>);

    impl Readings {
        /// Takes a snapshot of `snapshotter`'s recorder.
        pub(super) fn take(snapshotter: &Snapshotter) -> Self {
            Self(snapshotter.snapshot().into_vec())
        }

        /// The reading of metric `name` with exactly `labels`, in order.
        pub(super) fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
            let matches = |key: &Key| {
                key.name() == name
                    && key
                        .labels()
                        .map(|l| (l.key(), l.value()))
                        .eq(labels.iter().copied())
            };
            self.0
                .iter()
                .find(|(k, ..)| matches(k.key()))
                .map(|(.., v)| v)
        }
    }

    #[test]
    fn a_recorder_is_seen_only_when_installed() {
        assert!(!recorder_installed());
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || assert!(recorder_installed()));
        assert!(!recorder_installed());
    }
}
