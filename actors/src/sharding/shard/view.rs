//! What a region knows of the other regions: the [`View`] it routes and
//! activates by, built from membership snapshots by the [`Tracker`], which
//! keeps a member that went away awaited until the down-removal margin
//! has run out. Time is passed in.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    time::{Duration, Instant},
};

use super::alloc::RegionId;

/// What a region must know of the others to route and to activate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct View {
    /// Regions that may own shards (this one included when it hosts).
    pub(crate) candidates: Vec<RegionId>,
    /// Other regions whose release an activation waits for.
    pub(crate) must_ack: Vec<RegionId>,
}

/// A member as the view builder needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Up or suspect: it may hold shards, and answers.
    Live,
    /// Down or left: it may still run until it noticed (the downing
    /// strategy stops it); released after the margin.
    Gone,
}

/// Builds [`View`]s from membership snapshots, and remembers when members
/// went away, so that they count as released only after the margin.
#[derive(Debug)]
pub(crate) struct Tracker {
    margin: Duration,
    /// Members seen live, and since when those no longer live were gone.
    known: HashMap<RegionId, Option<Instant>>,
    /// Members gone for longer than the margin that membership still
    /// lists (down or left, until removed): released for good. Without
    /// this, the next view would take such a member for newly gone and
    /// await it for another margin, again and again.
    released: HashSet<RegionId>,
}

impl Tracker {
    pub(crate) fn new(margin: Duration) -> Self {
        Self {
            margin,
            known: HashMap::new(),
            released: HashSet::new(),
        }
    }

    /// Whether `r` is awaited only because it went away less than the
    /// margin ago (down, left, or vanished, as of the last
    /// [`view`](Self::view)): it cannot answer; its release is the
    /// margin running out.
    pub(crate) fn is_gone(&self, r: &RegionId) -> bool {
        self.known.get(r).is_some_and(Option::is_some)
    }

    /// The view at `now`: `me` is a candidate when `me_hosts`; `members`
    /// are the other members the hosts filter admits; `hosting` those
    /// known to run a hosting region; `retired` those that handed
    /// everything off and said so.
    pub(crate) fn view(
        &mut self,
        now: Instant,
        me: &RegionId,
        me_hosts: bool,
        members: &[(RegionId, Liveness)],
        hosting: &BTreeSet<RegionId>,
        retired: &BTreeSet<RegionId>,
    ) -> View {
        let mut view = View::default();
        if me_hosts {
            view.candidates.push(me.clone());
        }
        let listed: BTreeSet<&RegionId> = members.iter().map(|(r, _)| r).collect();
        for (r, liveness) in members {
            match liveness {
                Liveness::Live => {
                    self.released.remove(r);
                    self.known.insert(r.clone(), None);
                }
                Liveness::Gone if self.released.contains(r) => {}
                Liveness::Gone => {
                    let since = self.known.entry(r.clone()).or_insert(Some(now));
                    since.get_or_insert(now);
                }
            }
        }
        // A member that vanished (removed) without being seen gone is gone
        // from now.
        for (r, since) in &mut self.known {
            if !listed.contains(r) && since.is_none() {
                *since = Some(now);
            }
        }
        let margin = self.margin;
        let expired: Vec<RegionId> = self
            .known
            .iter()
            .filter(|(_, since)| since.is_some_and(|t| now.saturating_duration_since(t) >= margin))
            .map(|(r, _)| r.clone())
            .collect();
        for r in expired {
            self.known.remove(&r);
            self.released.insert(r);
        }
        self.released.retain(|r| listed.contains(r));
        for (r, since) in &self.known {
            if r == me || retired.contains(r) {
                continue;
            }
            view.must_ack.push(r.clone());
            if since.is_none()
                && hosting.contains(r)
                && members.iter().any(|(m, l)| m == r && *l == Liveness::Live)
            {
                view.candidates.push(r.clone());
            }
        }
        view.candidates.sort();
        view.must_ack.sort();
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::shard::alloc::test_region as r;

    fn view(candidates: &[&str], must: &[&str]) -> View {
        View {
            candidates: candidates.iter().map(|n| r(n)).collect(),
            must_ack: must.iter().map(|n| r(n)).collect(),
        }
    }

    #[test]
    fn gone_members_are_awaited_until_the_margin_runs_out() {
        let t0 = Instant::now();
        let margin = Duration::from_secs(10);
        let mut t = Tracker::new(margin);
        let hosting: BTreeSet<RegionId> = [r("b"), r("c")].into();
        let none = BTreeSet::new();
        let live = [(r("b"), Liveness::Live), (r("c"), Liveness::Live)];
        let v = t.view(t0, &r("a"), true, &live, &hosting, &none);
        assert_eq!(v, view(&["a", "b", "c"], &["b", "c"]));
        // `c` is down: no longer a candidate, still awaited.
        let down = [(r("b"), Liveness::Live), (r("c"), Liveness::Gone)];
        let v = t.view(
            t0 + Duration::from_secs(1),
            &r("a"),
            true,
            &down,
            &hosting,
            &none,
        );
        assert_eq!(v, view(&["a", "b"], &["b", "c"]));
        // Removed from membership meanwhile: still awaited until the margin.
        let v = t.view(
            t0 + Duration::from_secs(10),
            &r("a"),
            true,
            &live[..1],
            &hosting,
            &none,
        );
        assert_eq!(v, view(&["a", "b"], &["b", "c"]));
        let v = t.view(
            t0 + Duration::from_secs(11),
            &r("a"),
            true,
            &live[..1],
            &hosting,
            &none,
        );
        assert_eq!(v, view(&["a", "b"], &["b"]));
        // A member that vanished without being seen gone waits the margin
        // too; a retired one does not; a non-hosting one (a proxy) is
        // awaited but owns nothing.
        let proxy = [(r("b"), Liveness::Live), (r("p"), Liveness::Live)];
        let v = t.view(t0, &r("a"), false, &proxy, &hosting, &[r("b")].into());
        assert_eq!(v, view(&[], &["p"]));
    }

    #[test]
    fn a_member_gone_past_the_margin_stays_released_while_still_listed() {
        let t0 = Instant::now();
        let margin = Duration::from_secs(10);
        let mut t = Tracker::new(margin);
        let hosting: BTreeSet<RegionId> = [r("b"), r("c")].into();
        let none = BTreeSet::new();
        // `a` joins when `c` is already down (membership still lists it):
        // awaited for the margin, but it cannot answer.
        let down = [(r("b"), Liveness::Live), (r("c"), Liveness::Gone)];
        let v = t.view(t0, &r("a"), true, &down, &hosting, &none);
        assert_eq!(v, view(&["a", "b"], &["b", "c"]));
        assert!(t.is_gone(&r("c")) && !t.is_gone(&r("b")));
        // Past the margin it is released, and stays so while it is listed.
        for s in [10, 11, 25] {
            let now = t0 + Duration::from_secs(s);
            let v = t.view(now, &r("a"), true, &down, &hosting, &none);
            assert_eq!(v, view(&["a", "b"], &["b"]), "at {s} s");
            assert!(!t.is_gone(&r("c")));
        }
    }

    /// How long `c`, seen down at `t0`, is still awaited by a tracker
    /// with `margin`, to the millisecond.
    fn awaited_for(margin: Duration) -> Duration {
        let t0 = Instant::now();
        let mut t = Tracker::new(margin);
        let hosting: BTreeSet<RegionId> = [r("c")].into();
        let none = BTreeSet::new();
        t.view(
            t0,
            &r("a"),
            true,
            &[(r("c"), Liveness::Live)],
            &hosting,
            &none,
        );
        let down = [(r("c"), Liveness::Gone)];
        let mut ms = 0;
        while t
            .view(
                t0 + Duration::from_millis(ms),
                &r("a"),
                true,
                &down,
                &hosting,
                &none,
            )
            .must_ack
            .contains(&r("c"))
        {
            ms += 1;
        }
        Duration::from_millis(ms)
    }

    #[test]
    fn the_margin_is_the_clusters_stable_after_unless_set() {
        let stable_after = Duration::from_millis(2500);
        let defaults = crate::sharding::ShardingSettings::default();
        assert_eq!(
            awaited_for(defaults.margin(stable_after)),
            stable_after,
            "the cluster's setting"
        );
        let set = crate::sharding::ShardingSettings {
            down_removal_margin: Some(Duration::from_millis(700)),
            ..defaults
        };
        assert_eq!(
            awaited_for(set.margin(stable_after)),
            Duration::from_millis(700),
            "the sharding setting wins"
        );
    }
}
