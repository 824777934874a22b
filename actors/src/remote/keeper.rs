//! One timer for all of a node's associations: when each is due for its
//! next heartbeat tick, which have gone unused for how long, and the
//! metric handles of each (published on the same timer). Pure
//! bookkeeping; the task that drives it is `Remoting::keep_all`.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap},
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use crate::telemetry::{PeerMeters, PeerSample};

/// When each entry is next due, earliest first. Entries are weak: one
/// whose owner is gone is dropped when it comes due.
pub(super) struct Schedule<T> {
    heap: BinaryHeap<Reverse<Due<T>>>,
    seq: u64,
}

struct Due<T> {
    at: Instant,
    seq: u64,
    item: Weak<T>,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Due<T> {}
impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Due<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> Schedule<T> {
    /// Schedules `item` at `at` (entries due at the same instant run in the
    /// order they were scheduled).
    pub(super) fn push(&mut self, at: Instant, item: Weak<T>) {
        self.seq += 1;
        self.heap.push(Reverse(Due {
            at,
            seq: self.seq,
            item,
        }));
    }

    /// The next entry due at or before `now` whose owner still lives.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<std::sync::Arc<T>> {
        while self.heap.peek().is_some_and(|d| d.0.at <= now) {
            let Reverse(d) = self.heap.pop()?;
            if let Some(item) = d.item.upgrade() {
                return Some(item);
            }
        }
        None
    }

    /// When the earliest entry is due.
    pub(super) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|d| d.0.at)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Which entries have been unused since when: an entry is ripe once it was
/// found unused at every sweep for `timeout`.
pub(super) struct Idle<K> {
    since: HashMap<K, Instant>,
    timeout: Duration,
}

impl<K: std::hash::Hash + Eq + Clone> Idle<K> {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            since: HashMap::new(),
            timeout,
        }
    }

    /// How often to sweep: a quarter of the timeout, at least 10 ms.
    pub(super) fn period(&self) -> Duration {
        (self.timeout / 4).max(Duration::from_millis(10))
    }

    /// One sweep at `now`: `unused` holds the entries found unused now.
    /// Returns those unused for the whole timeout; entries in use again
    /// start over.
    pub(super) fn sweep(&mut self, now: Instant, unused: &[K]) -> Vec<K> {
        let mut seen: HashMap<K, Instant> = HashMap::with_capacity(unused.len());
        let mut ripe = Vec::new();
        for k in unused {
            let since = self.since.get(k).copied().unwrap_or(now);
            if now.duration_since(since) >= self.timeout {
                ripe.push(k.clone());
            } else {
                seen.insert(k.clone(), since);
            }
        }
        self.since = seen;
        ripe
    }
}

/// The metric handles of every association, published together once per
/// `period`: registered when an association is first seen, their gauges
/// zeroed and dropped when it is gone.
pub(super) struct Published<T> {
    entries: Vec<(Weak<T>, PeerMeters)>,
    period: Duration,
    next: Instant,
}

impl<T> Published<T> {
    pub(super) fn new(period: Duration, now: Instant) -> Self {
        Self {
            entries: Vec::new(),
            period,
            next: now + period,
        }
    }

    /// A new association and its handles.
    pub(super) fn add(&mut self, item: Weak<T>, meters: PeerMeters) {
        self.entries.push((item, meters));
    }

    /// When the next publication is due.
    pub(super) fn next(&self) -> Instant {
        self.next
    }

    /// Publishes every live entry's `sample` if due at `now`; entries whose
    /// owner is gone read 0 on their gauges and are dropped. Returns how
    /// many live, if it published.
    pub(super) fn publish_due(
        &mut self,
        now: Instant,
        sample: impl Fn(&Arc<T>) -> PeerSample,
    ) -> Option<usize> {
        if now < self.next {
            return None;
        }
        self.next = now + self.period;
        self.entries
            .retain_mut(|(item, meters)| match item.upgrade() {
                Some(item) => {
                    meters.publish(&sample(&item));
                    true
                }
                None => {
                    meters.zero();
                    false
                }
            });
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn entries_come_due_in_time_order_and_dead_ones_are_skipped() {
        let t0 = Instant::now();
        let (a, b, c) = (Arc::new('a'), Arc::new('b'), Arc::new('c'));
        let mut s = Schedule::default();
        s.push(t0 + Duration::from_millis(30), Arc::downgrade(&a));
        s.push(t0 + Duration::from_millis(10), Arc::downgrade(&b));
        s.push(t0 + Duration::from_millis(20), Arc::downgrade(&c));
        drop(c);
        assert_eq!(s.next(), Some(t0 + Duration::from_millis(10)));
        assert!(s.pop_due(t0).is_none(), "nothing due yet");
        let now = t0 + Duration::from_millis(25);
        assert_eq!(s.pop_due(now).as_deref(), Some(&'b'));
        assert!(s.pop_due(now).is_none(), "c is gone, a not due");
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.pop_due(t0 + Duration::from_millis(30)).as_deref(),
            Some(&'a')
        );
    }

    #[test]
    fn only_entries_unused_for_the_whole_timeout_are_ripe() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut idle = Idle::new(ms(100));
        assert_eq!(idle.period(), ms(25));
        assert!(idle.sweep(t0, &["a", "b"]).is_empty());
        // b was used in between: it starts over.
        assert!(idle.sweep(t0 + ms(50), &["a"]).is_empty());
        assert!(idle.sweep(t0 + ms(60), &["a", "b"]).is_empty());
        assert_eq!(idle.sweep(t0 + ms(100), &["a", "b"]), vec!["a"]);
        assert_eq!(idle.sweep(t0 + ms(160), &["b"]), vec!["b"]);
    }
}
