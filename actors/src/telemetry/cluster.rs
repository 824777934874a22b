//! The meters of the cluster features, each registered once where the
//! feature starts on a node and `None` without a recorder (then the
//! feature publishes nothing): [`ClusterMeters`] (membership, published
//! from a [`ClusterSample`] once per probe period), [`SingletonMeters`]
//! (one cluster singleton) and [`ShardingMeters`] (one entity type's
//! region).

use metrics::{Counter, Gauge, SharedString};

use super::{
    catalog::{
        CLUSTER_BYTES_IN, CLUSTER_BYTES_OUT, CLUSTER_GROUP_ENTRIES, CLUSTER_MEMBER_STATES,
        CLUSTER_MEMBERS, CLUSTER_PACKETS_IN, CLUSTER_PACKETS_OUT, CLUSTER_REFUSED,
        CLUSTER_REFUSED_KINDS, SHARDING_ACTIVATIONS, SHARDING_BUFFERED, SHARDING_DROPPED,
        SHARDING_ENTITIES, SHARDING_HANDOFFS, SHARDING_OUTBOX_BYTES, SHARDING_SHARDS,
        SINGLETON_BUFFERED, SINGLETON_RUNNING, SINGLETON_STARTS, describe,
    },
    recorder_installed,
};

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

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::telemetry::tests::Readings;

    #[test]
    fn without_a_recorder_the_features_publish_nothing() {
        assert!(ClusterMeters::new("n@h:1").is_none());
        assert!(SingletonMeters::new("n@h:1", "leader").is_none());
        assert!(ShardingMeters::new("n@h:1", "Cart").is_none());
    }

    #[test]
    fn membership_counters_grow_by_what_they_gained_and_gauges_take_the_sample() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut meters = metrics::with_local_recorder(&recorder, || ClusterMeters::new("n@h:1"))
            .expect("a recorder is installed");
        let node = [("node", "n@h:1")];
        let mut sample = ClusterSample {
            packets_out: 5,
            bytes_in: 700,
            refused: [0, 2, 0],
            members: [3, 1, 0, 0],
            group_entries: 9,
            ..ClusterSample::default()
        };
        meters.publish(&sample);
        let r = Readings::take(&snapshotter);
        assert_eq!(
            r.get(CLUSTER_PACKETS_OUT, &node),
            Some(&DebugValue::Counter(5))
        );
        assert_eq!(
            r.get(CLUSTER_BYTES_IN, &node),
            Some(&DebugValue::Counter(700))
        );
        let unauthenticated = [("node", "n@h:1"), ("kind", "unauthenticated")];
        assert_eq!(
            r.get(CLUSTER_REFUSED, &unauthenticated),
            Some(&DebugValue::Counter(2))
        );
        let up = [("node", "n@h:1"), ("state", "up")];
        assert_eq!(
            r.get(CLUSTER_MEMBERS, &up),
            Some(&DebugValue::Gauge(3.0.into()))
        );
        assert_eq!(
            r.get(CLUSTER_GROUP_ENTRIES, &node),
            Some(&DebugValue::Gauge(9.0.into()))
        );
        // Totals since join: the next publish adds only the difference.
        sample.packets_out = 8;
        sample.refused[1] = 3;
        sample.members = [2, 0, 1, 0];
        meters.publish(&sample);
        // Nothing new: nothing added.
        meters.publish(&sample);
        let r = Readings::take(&snapshotter);
        assert_eq!(
            r.get(CLUSTER_PACKETS_OUT, &node),
            Some(&DebugValue::Counter(3))
        );
        assert_eq!(
            r.get(CLUSTER_REFUSED, &unauthenticated),
            Some(&DebugValue::Counter(1))
        );
        assert_eq!(
            r.get(CLUSTER_BYTES_IN, &node),
            Some(&DebugValue::Counter(0))
        );
        let down = [("node", "n@h:1"), ("state", "down")];
        assert_eq!(
            r.get(CLUSTER_MEMBERS, &down),
            Some(&DebugValue::Gauge(1.0.into()))
        );
    }

    #[test]
    fn a_singletons_and_a_regions_handles_carry_their_names() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let (singleton, region) = metrics::with_local_recorder(&recorder, || {
            (
                SingletonMeters::new("n@h:1", "leader").expect("a recorder"),
                ShardingMeters::new("n@h:1", "Cart").expect("a recorder"),
            )
        });
        singleton.starts.increment(1);
        region.dropped.increment(2);
        let r = Readings::take(&snapshotter);
        let leader = [("node", "n@h:1"), ("singleton", "leader")];
        assert_eq!(
            r.get(SINGLETON_STARTS, &leader),
            Some(&DebugValue::Counter(1))
        );
        let cart = [("node", "n@h:1"), ("type", "Cart")];
        assert_eq!(
            r.get(SHARDING_DROPPED, &cart),
            Some(&DebugValue::Counter(2))
        );
    }
}
