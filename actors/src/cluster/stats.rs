//! Membership counters: the atomics the task counts packets in, the
//! [`ClusterStats`] snapshot users read, and the sample the metric
//! handles publish.

use std::sync::atomic::{AtomicU64, Ordering};

use super::MemberState;
use crate::telemetry::ClusterSample;

/// Membership counters of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Packets sent, and their bytes (with headers).
    pub packets_out: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Packets received that were authenticated and handled.
    pub packets_in: u64,
    /// Bytes received (every packet, refused or not).
    pub bytes_in: u64,
    /// Packets refused: not a membership packet, undecodable, or a
    /// notice about an identity this node does not hold (a replayed leave,
    /// say).
    pub malformed: u64,
    /// Packets refused: the tag did not verify (no secret, wrong secret,
    /// or altered).
    pub unauthenticated: u64,
    /// Packets refused because they named a member past
    /// [`ClusterConfig::set_max_members`](super::ClusterConfig::set_max_members).
    pub full: u64,
}

/// The counters, shared by the task (which counts) and the handle (which
/// reads them).
#[derive(Default)]
pub(super) struct Stats {
    pub(super) packets_out: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) packets_in: AtomicU64,
    pub(super) bytes_in: AtomicU64,
    pub(super) malformed: AtomicU64,
    pub(super) full: AtomicU64,
    pub(super) unauthenticated: AtomicU64,
}

impl Stats {
    /// The counters now.
    pub(super) fn snapshot(&self) -> ClusterStats {
        ClusterStats {
            packets_out: self.packets_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            packets_in: self.packets_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
            unauthenticated: self.unauthenticated.load(Ordering::Relaxed),
        }
    }

    /// What the metric handles publish: the counters, the members by the
    /// state subscribers were last told (`states`; members joining or
    /// removed are not counted), and the group entries held.
    pub(super) fn sample(
        &self,
        states: impl IntoIterator<Item = MemberState>,
        group_entries: usize,
    ) -> ClusterSample {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut members = [0usize; 4];
        for state in states {
            let i = match state {
                MemberState::Up => 0,
                MemberState::Suspect => 1,
                MemberState::Down => 2,
                MemberState::Left => 3,
                _ => continue,
            };
            members[i] += 1;
        }
        ClusterSample {
            packets_out: load(&self.packets_out),
            bytes_out: load(&self.bytes_out),
            packets_in: load(&self.packets_in),
            bytes_in: load(&self.bytes_in),
            refused: [
                load(&self.malformed),
                load(&self.unauthenticated),
                load(&self.full),
            ],
            members,
            group_entries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_counts_members_by_state_and_names_each_refusal() {
        let stats = Stats::default();
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        stats.unauthenticated.fetch_add(2, Ordering::Relaxed);
        stats.full.fetch_add(3, Ordering::Relaxed);
        stats.packets_in.fetch_add(4, Ordering::Relaxed);
        let states = [
            MemberState::Up,
            MemberState::Up,
            MemberState::Suspect,
            MemberState::Down,
            MemberState::Left,
            MemberState::Joining,
            MemberState::Removed,
        ];
        let sample = stats.sample(states, 9);
        assert_eq!(sample.members, [2, 1, 1, 1]);
        assert_eq!(sample.refused, [1, 2, 3]);
        assert_eq!(sample.packets_in, 4);
        assert_eq!(sample.group_entries, 9);
        assert_eq!(stats.snapshot().full, 3);
    }
}
