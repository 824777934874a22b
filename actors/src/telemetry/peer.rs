//! One peer node's metrics: [`PeerCounters`], the counts an association
//! keeps of events on its link that the transport does not, and
//! [`PeerMeters`], the handles the keeper publishes a [`PeerSample`]
//! through once per heartbeat interval (never per message).

use std::sync::{
    Mutex, PoisonError,
    atomic::{AtomicU64, Ordering},
};

use metrics::{Counter, Gauge, SharedString};
use transport::ConnStats;

use super::catalog::{
    BYTES_IN, BYTES_OUT, FRAGMENTS_IN, FRAGMENTS_OUT, FRAMES_DROPPED, FRAMES_IN, FRAMES_OUT,
    FRAMES_PER_WRITE, PHI, QUARANTINES, QUEUE_BYTES, RECONNECTS, WRITES,
};

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
    /// Registers peer `peer`'s handles for node `node` with the recorder
    /// installed now (no-ops without one).
    pub(super) fn new(node: &SharedString, peer: &str) -> Self {
        let peer = SharedString::from(peer.to_owned());
        let c = |name: &'static str| metrics::counter!(name, "node" => node.clone(), "peer" => peer.clone());
        let g = |name: &'static str| metrics::gauge!(name, "node" => node.clone(), "peer" => peer.clone());
        Self {
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
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::telemetry::tests::Readings;

    const PEER: [(&str, &str); 2] = [("node", "n@h:1"), ("peer", "p@h:2")];

    fn meters(recorder: &DebuggingRecorder) -> PeerMeters {
        let node = SharedString::from("n@h:1");
        metrics::with_local_recorder(recorder, || PeerMeters::new(&node, "p@h:2"))
    }

    #[test]
    fn counters_publish_growth_only_and_never_go_back() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut meters = meters(&recorder);
        let mut sample = PeerSample::default();
        sample.stats.bytes_out = 100;
        meters.publish(&sample);
        // A connection left before it was retired: the total dips.
        sample.stats.bytes_out = 40;
        meters.publish(&sample);
        sample.stats.bytes_out = 130;
        meters.publish(&sample);
        let r = Readings::take(&snapshotter);
        assert_eq!(r.get(BYTES_OUT, &PEER), Some(&DebugValue::Counter(130)));
    }

    #[test]
    fn gauges_take_the_sample_and_read_zero_when_the_association_goes() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut meters = meters(&recorder);
        let mut sample = PeerSample {
            queue_bytes: 512,
            phi: 1.5,
            ..PeerSample::default()
        };
        sample.stats.frames_out = 10;
        sample.stats.writes = 4;
        meters.publish(&sample);
        let r = Readings::take(&snapshotter);
        let gauge = |v: f64| DebugValue::Gauge(v.into());
        assert_eq!(r.get(QUEUE_BYTES, &PEER), Some(&gauge(512.0)));
        assert_eq!(r.get(PHI, &PEER), Some(&gauge(1.5)));
        assert_eq!(r.get(FRAMES_PER_WRITE, &PEER), Some(&gauge(2.5)));
        // A detector that says -0 (or less) reads 0.
        sample.phi = -0.0;
        meters.publish(&sample);
        let r = Readings::take(&snapshotter);
        let phi = r.get(PHI, &PEER);
        assert!(
            matches!(phi, Some(DebugValue::Gauge(v)) if v.0.to_bits() == 0),
            "+0, not {phi:?}"
        );
        meters.publish(&sample);
        meters.zero();
        let r = Readings::take(&snapshotter);
        for name in [QUEUE_BYTES, PHI, FRAMES_PER_WRITE] {
            assert_eq!(r.get(name, &PEER), Some(&gauge(0.0)), "{name}");
        }
    }

    #[test]
    fn retired_connections_keep_their_counts() {
        let counters = PeerCounters::default();
        assert_eq!(counters.retired(), ConnStats::default());
        let ended = ConnStats {
            bytes_out: 10,
            frames_out: 2,
            ..ConnStats::default()
        };
        counters.retire(&ended);
        counters.retire(&ended);
        let total = counters.retired();
        assert_eq!((total.bytes_out, total.frames_out), (20, 4));
        PeerCounters::bump(&counters.attempts);
        PeerCounters::bump(&counters.attempts);
        assert_eq!(counters.attempts.load(Ordering::Relaxed), 2);
    }
}
