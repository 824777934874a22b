//! Where a cluster singleton runs, as a sans-IO state machine: the
//! manager on each hosting node feeds it the member view, the handover
//! messages it receives and the instance's end, with the time passed in,
//! and carries out the [`Action`]s it returns. Nothing here reads a clock,
//! spawns an actor or touches a socket, so the tests drive it with a fake
//! clock.
//!
//! # The rule
//! The singleton runs on the oldest hosting member (lowest start time,
//! then node address, as [`DowningStrategy::KeepOldest`] counts age) that
//! is `Up` or `Suspect`: a suspect keeps it until the downing strategy
//! decides, so a member that refutes a suspicion never loses it. This
//! node runs it when it is that member and every older hosting member
//! that went away is *cleared*:
//! - it answered `HandOverDone` (its instance had stopped, `stopped` hook
//!   included), or
//! - it has been `Down` (or forgotten, `Removed`) for `margin`: time for
//!   the side that lost to down itself and stop its instance, or
//! - it `Left` gracefully `handover_timeout` ago and never answered (its
//!   manager was gone; a node that leaves stops its instance anyway).
//!
//! Newcomers are younger than every member, so a join never moves the
//! singleton; it moves only when its host leaves or is downed, always to
//! a younger member.
//!
//! ```text
//!        oldest, every older one cleared: Start
//!  idle ───────────────────────────────────────► running
//!   ▲  ▲                                            │ not the oldest (this node
//!   │  │ HandOverDone to the successor              │ leaves, is downed, or an
//!   │  └──────────────── stopping ◄─── Stop ────────┘ older member shows up)
//!   │                                               │ the instance stopped by itself
//!   └──── not the oldest: HandOverDone ─── ended ◄──┘ (not restarted)
//! ```
//!
//! While this node is the oldest but waits, it asks each older member
//! that left for a handover (`HandOverToMe`) every `retry`; a member
//! answers `HandOverDone` once it has no instance and cannot start one
//! (it left or was downed).
//!
//! [`DowningStrategy::KeepOldest`]: crate::cluster::DowningStrategy::KeepOldest

use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use crate::cluster::MemberState;

/// A hosting member, as this node sees it (this node included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    pub(crate) node: String,
    pub(crate) uid: u64,
    pub(crate) started_ms: u64,
    pub(crate) state: MemberState,
}

impl Host {
    fn eligible(&self) -> bool {
        matches!(self.state, MemberState::Up | MemberState::Suspect)
    }
}

/// What the manager carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Start the instance on this node.
    Start,
    /// Stop the instance after its queued messages; report
    /// [`Placement::handle_stopped`] when it has stopped.
    Stop,
    /// Tell the manager of `node` (incarnation `uid`) that this node has
    /// no instance and will not start one.
    HandOverDone { node: String, uid: u64 },
    /// Ask the manager of `node` (incarnation `uid`) to hand over.
    HandOverToMe { node: String, uid: u64 },
}

/// Whether this node has an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No instance here.
    Idle,
    /// The instance runs here.
    Running,
    /// The instance is stopping (handing over).
    Stopping,
    /// The instance stopped by itself while this node was the oldest;
    /// it is not restarted (its supervisor strategy decides restarts).
    Ended,
}

/// The timings of a handover.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How long to wait for an older member that left to answer.
    pub(crate) handover_timeout: Duration,
    /// How long an older member must have been down (or removed).
    pub(crate) margin: Duration,
    /// How often to ask an older member that left for a handover.
    pub(crate) retry: Duration,
    /// How long this node must have been a member before it starts a
    /// first instance: time to hear of the older members from every
    /// member it reached, so that a newcomer whose first answer came from
    /// another newcomer does not take itself for the oldest.
    pub(crate) settle: Duration,
}

/// An older hosting member's incarnation that went away, until cleared.
#[derive(Debug, Default)]
struct Gone {
    /// Its start time, for its age (0 until the view shows it).
    started_ms: u64,
    /// When this node saw it `Left`.
    left_at: Option<Instant>,
    /// When this node saw it `Down` or forgotten.
    down_at: Option<Instant>,
    /// It answered `HandOverDone`.
    handed_over: bool,
    /// It is still in the view (not yet removed).
    listed: bool,
}

impl Gone {
    fn cleared(&self, now: Instant, t: &Timing) -> bool {
        self.handed_over
            || self.down_at.is_some_and(|d| now >= d + t.margin)
            || self.left_at.is_some_and(|l| now >= l + t.handover_timeout)
    }

    /// When it clears by time alone.
    fn clears_at(&self, t: &Timing) -> Option<Instant> {
        let down = self.down_at.map(|d| d + t.margin);
        let left = self.left_at.map(|l| l + t.handover_timeout);
        match (down, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The placement decisions of one singleton on one hosting node.
///
/// Methods: inputs [`handle_view`](Self::handle_view),
/// [`handle_handover_request`](Self::handle_handover_request),
/// [`handle_handover_done`](Self::handle_handover_done),
/// [`handle_stopped`](Self::handle_stopped),
/// [`handle_timeout`](Self::handle_timeout); outputs
/// [`poll_action`](Self::poll_action), [`poll_timeout`](Self::poll_timeout),
/// [`phase`](Self::phase).
#[derive(Debug)]
pub(crate) struct Placement {
    me: String,
    timing: Timing,
    phase: Phase,
    /// The hosting members in the last view (this node included).
    hosts: Vec<Host>,
    /// Incarnations that went away, by node and uid, until cleared and
    /// forgotten by membership (bounded by the members that went away
    /// within `remove_down_after`).
    gone: BTreeMap<(String, u64), Gone>,
    /// Who asked for a handover while the instance still ran.
    requesters: Vec<(String, u64)>,
    /// When to ask older members that left again.
    next_retry: Option<Instant>,
    /// Until when this node, new as a member, does not start a first
    /// instance (see [`Timing::settle`]); `None` before it is a member
    /// and once settled.
    settles_at: Option<Instant>,
    settled: bool,
    actions: VecDeque<Action>,
}

impl Placement {
    /// The placement on node `me`.
    pub(crate) fn new(me: String, timing: Timing) -> Self {
        Self {
            me,
            timing,
            phase: Phase::Idle,
            hosts: Vec::new(),
            gone: BTreeMap::new(),
            requesters: Vec::new(),
            next_retry: None,
            settles_at: None,
            settled: false,
            actions: VecDeque::new(),
        }
    }

    /// Whether this node has an instance.
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// The next action to carry out.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.phase != Phase::Idle || !self.i_am_oldest() {
            return None;
        }
        let clears = self
            .blocking()
            .filter_map(|(_, g)| g.clears_at(&self.timing))
            .min();
        [clears, self.next_retry, self.settles_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The hosting members now (this node included, `Up` once it joined).
    /// Members missing from the view that were in the last one were
    /// removed.
    pub(crate) fn handle_view(&mut self, now: Instant, hosts: Vec<Host>) {
        for old in &self.hosts {
            let still = hosts.iter().any(|h| h.node == old.node && h.uid == old.uid);
            if !still && old.node != self.me {
                let g = self.gone.entry((old.node.clone(), old.uid)).or_default();
                g.started_ms = old.started_ms;
                g.listed = false;
                g.down_at.get_or_insert(now);
            }
        }
        for h in &hosts {
            if h.node == self.me {
                continue;
            }
            let at = match h.state {
                MemberState::Left | MemberState::Leaving => false,
                MemberState::Down | MemberState::Removed => true,
                _ => {
                    if let Some(g) = self.gone.get_mut(&(h.node.clone(), h.uid)) {
                        g.started_ms = h.started_ms;
                        g.listed = true;
                    }
                    continue;
                }
            };
            let g = self.gone.entry((h.node.clone(), h.uid)).or_default();
            g.started_ms = h.started_ms;
            g.listed = true;
            if at {
                g.down_at.get_or_insert(now);
            } else {
                g.left_at.get_or_insert(now);
            }
        }
        self.hosts = hosts;
        if !self.settled && self.settles_at.is_none() && self.me_eligible() {
            self.settles_at = Some(now + self.timing.settle);
        }
        self.decide(now);
    }

    /// The manager of `node` (incarnation `uid`) asks this node to hand
    /// over: answered once this node has no instance and cannot start one.
    pub(crate) fn handle_handover_request(&mut self, now: Instant, node: String, uid: u64) {
        if self.me_eligible() {
            // This node has not left: the requester's view is behind (or
            // ahead of a partition); the downing strategy settles it.
            return;
        }
        match self.phase {
            Phase::Idle | Phase::Ended => {
                self.actions.push_back(Action::HandOverDone { node, uid })
            }
            Phase::Running | Phase::Stopping => {
                if !self.requesters.iter().any(|(n, u)| *n == node && *u == uid) {
                    self.requesters.push((node, uid));
                }
            }
        }
        self.decide(now);
    }

    /// The manager of `node` (incarnation `uid`) has no instance and will
    /// not start one.
    pub(crate) fn handle_handover_done(&mut self, now: Instant, node: String, uid: u64) {
        if node == self.me {
            return;
        }
        let listed = self.hosts.iter().any(|h| h.node == node && h.uid == uid);
        let started_ms = self
            .hosts
            .iter()
            .find(|h| h.node == node && h.uid == uid)
            .map_or(0, |h| h.started_ms);
        let g = self.gone.entry((node, uid)).or_default();
        g.handed_over = true;
        g.listed = listed;
        if started_ms != 0 {
            g.started_ms = started_ms;
        }
        self.decide(now);
    }

    /// The instance on this node stopped (after a [`Action::Stop`], by
    /// itself, or it could not start).
    pub(crate) fn handle_stopped(&mut self, now: Instant) {
        match self.phase {
            Phase::Stopping => {
                self.phase = Phase::Idle;
                self.hand_over();
            }
            Phase::Running if !self.i_am_oldest() => {
                self.phase = Phase::Idle;
                self.hand_over();
            }
            Phase::Running => self.phase = Phase::Ended,
            Phase::Idle | Phase::Ended => {}
        }
        self.decide(now);
    }

    /// Time passed: older members may have cleared, or a retry is due.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.decide(now);
    }

    fn me_eligible(&self) -> bool {
        self.hosts.iter().any(|h| h.node == self.me && h.eligible())
    }

    /// The oldest eligible hosting member.
    fn oldest(&self) -> Option<&Host> {
        self.hosts
            .iter()
            .filter(|h| h.eligible())
            .min_by(|a, b| (a.started_ms, &a.node).cmp(&(b.started_ms, &b.node)))
    }

    fn i_am_oldest(&self) -> bool {
        self.oldest().is_some_and(|h| h.node == self.me)
    }

    /// Older incarnations that went away and are not cleared yet (by
    /// handover; time is checked by the caller).
    fn blocking(&self) -> impl Iterator<Item = (&(String, u64), &Gone)> {
        let mine = self
            .hosts
            .iter()
            .find(|h| h.node == self.me)
            .map(|h| (h.started_ms, h.node.as_str()));
        self.gone.iter().filter(move |((node, _), g)| {
            !g.handed_over && mine.is_some_and(|m| (g.started_ms, node.as_str()) < m)
        })
    }

    /// Tells the successor, and whoever asked, that this node has no
    /// instance.
    fn hand_over(&mut self) {
        let mut to: Vec<(String, u64)> = std::mem::take(&mut self.requesters);
        if let Some(next) = self
            .hosts
            .iter()
            .filter(|h| h.eligible() && h.node != self.me)
            .min_by(|a, b| (a.started_ms, &a.node).cmp(&(b.started_ms, &b.node)))
            && !to.iter().any(|(n, u)| *n == next.node && *u == next.uid)
        {
            to.push((next.node.clone(), next.uid));
        }
        for (node, uid) in to {
            self.actions.push_back(Action::HandOverDone { node, uid });
        }
    }

    fn decide(&mut self, now: Instant) {
        if self.settles_at.is_some_and(|t| now >= t) {
            self.settles_at = None;
            self.settled = true;
        }
        let oldest = self.i_am_oldest();
        match self.phase {
            Phase::Running if !oldest => {
                self.phase = Phase::Stopping;
                self.actions.push_back(Action::Stop);
            }
            Phase::Ended if !oldest => {
                self.phase = Phase::Idle;
                self.hand_over();
            }
            Phase::Idle if oldest && !self.settled => {
                // Too new to know it is the oldest: wait (poll_timeout).
            }
            Phase::Idle if oldest => {
                let t = self.timing;
                let waiting: Vec<(String, u64, bool)> = self
                    .blocking()
                    .filter(|(_, g)| !g.cleared(now, &t))
                    .map(|((n, u), g)| (n.clone(), *u, g.listed && g.down_at.is_none()))
                    .collect();
                // Only members that left can answer; a downed one is
                // quarantined, and waited out.
                let ask: Vec<(String, u64)> = waiting
                    .iter()
                    .filter(|w| w.2)
                    .map(|(n, u, _)| (n.clone(), *u))
                    .collect();
                if waiting.is_empty() {
                    self.next_retry = None;
                    self.phase = Phase::Running;
                    self.actions.push_back(Action::Start);
                } else if ask.is_empty() {
                    self.next_retry = None;
                } else if self.next_retry.is_none_or(|r| now >= r) {
                    self.next_retry = Some(now + t.retry);
                    for (node, uid) in ask {
                        self.actions.push_back(Action::HandOverToMe { node, uid });
                    }
                }
            }
            _ => {}
        }
        // Forget what no longer matters: cleared and removed, or younger
        // than this node and removed.
        let t = self.timing;
        let mine = self
            .hosts
            .iter()
            .find(|h| h.node == self.me)
            .map(|h| (h.started_ms, h.node.clone()));
        self.gone.retain(|(node, _), g| {
            let older = mine
                .as_ref()
                .is_none_or(|(s, n)| (g.started_ms, node) < (*s, n));
            g.listed || (older && !g.cleared(now, &t))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn timing() -> Timing {
        Timing {
            handover_timeout: 5 * SEC,
            margin: 10 * SEC,
            retry: SEC,
            settle: Duration::ZERO,
        }
    }

    fn host(node: &str, started_ms: u64, state: MemberState) -> Host {
        Host {
            node: node.into(),
            uid: started_ms,
            started_ms,
            state,
        }
    }

    fn actions(p: &mut Placement) -> Vec<Action> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    fn done(node: &str, uid: u64) -> Action {
        Action::HandOverDone {
            node: node.into(),
            uid,
        }
    }

    /// A view of a (oldest), b, c, all up, as node `me` sees it.
    fn three(me: &str, now: Instant) -> Placement {
        let mut p = Placement::new(me.into(), timing());
        p.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Up),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Up),
            ],
        );
        p
    }

    #[test]
    fn the_oldest_starts_at_once_and_the_others_do_not() {
        let now = Instant::now();
        let mut a = three("a", now);
        assert_eq!(actions(&mut a), [Action::Start]);
        assert_eq!(a.phase(), Phase::Running);
        for me in ["b", "c"] {
            let mut p = three(me, now);
            assert_eq!(actions(&mut p), []);
            assert_eq!(p.phase(), Phase::Idle);
            assert_eq!(p.poll_timeout(), None);
        }
    }

    #[test]
    fn a_new_member_waits_to_hear_of_older_ones_before_a_first_start() {
        let now = Instant::now();
        let settle = Timing {
            settle: SEC,
            ..timing()
        };
        // Restarted beside another newcomer, whose answer came first: in
        // this view it is the oldest, though `a` runs the singleton.
        let newcomers = vec![
            host("n", 10, MemberState::Up),
            host("m", 11, MemberState::Up),
        ];
        let mut n = Placement::new("n".into(), settle);
        n.handle_view(now, newcomers.clone());
        assert_eq!(actions(&mut n), []);
        assert_eq!(n.poll_timeout(), Some(now + SEC));
        // The older members' gossip arrives within the window.
        let mut all = newcomers.clone();
        all.push(host("a", 1, MemberState::Up));
        n.handle_view(now + SEC / 2, all.clone());
        n.handle_timeout(now + SEC);
        assert_eq!(actions(&mut n), []);
        assert_eq!(n.phase(), Phase::Idle);
        // Truly the oldest (nobody older shows up): it starts once settled,
        // and later views do not make it wait again.
        let mut alone = Placement::new("n".into(), settle);
        alone.handle_view(now, newcomers.clone());
        alone.handle_timeout(now + SEC / 2);
        assert_eq!(actions(&mut alone), []);
        alone.handle_timeout(now + SEC);
        assert_eq!(actions(&mut alone), [Action::Start]);
        alone.handle_view(now + 2 * SEC, newcomers);
        assert_eq!(alone.phase(), Phase::Running);
        assert_eq!(alone.poll_timeout(), None);
    }

    #[test]
    fn age_ties_are_broken_by_node_address() {
        let now = Instant::now();
        let view = vec![host("b", 1, MemberState::Up), host("a", 1, MemberState::Up)];
        let mut a = Placement::new("a".into(), timing());
        a.handle_view(now, view.clone());
        assert_eq!(actions(&mut a), [Action::Start]);
        let mut b = Placement::new("b".into(), timing());
        b.handle_view(now, view);
        assert_eq!(actions(&mut b), []);
    }

    #[test]
    fn a_newcomer_never_moves_the_singleton() {
        let now = Instant::now();
        let mut a = three("a", now);
        actions(&mut a);
        a.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Up),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Up),
                host("d", 4, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut a), []);
        assert_eq!(a.phase(), Phase::Running);
    }

    #[test]
    fn a_suspect_oldest_keeps_it_and_the_next_does_not_start() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Suspect),
                host("b", 2, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut b), []);
        b.handle_timeout(now + 60 * SEC);
        assert_eq!(actions(&mut b), []);
    }

    #[test]
    fn the_leaving_host_stops_before_handing_over_to_the_next_oldest() {
        let now = Instant::now();
        let mut a = three("a", now);
        actions(&mut a);
        a.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Leaving),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut a), [Action::Stop]);
        assert_eq!(a.phase(), Phase::Stopping);
        // Nothing is handed over while the instance still runs.
        a.handle_handover_request(now, "b".into(), 2);
        assert_eq!(actions(&mut a), []);
        a.handle_stopped(now + SEC);
        assert_eq!(actions(&mut a), [done("b", 2)]);
        assert_eq!(a.phase(), Phase::Idle);
        // Asked again later (the answer was lost): answered at once.
        a.handle_handover_request(now + 2 * SEC, "b".into(), 2);
        assert_eq!(actions(&mut a), [done("b", 2)]);
    }

    #[test]
    fn the_next_oldest_waits_for_the_handover_of_one_that_left() {
        let now = Instant::now();
        let mut b = three("b", now);
        let left = vec![
            host("a", 1, MemberState::Left),
            host("b", 2, MemberState::Up),
            host("c", 3, MemberState::Up),
        ];
        b.handle_view(now, left.clone());
        assert_eq!(
            actions(&mut b),
            [Action::HandOverToMe {
                node: "a".into(),
                uid: 1
            }]
        );
        assert_eq!(b.phase(), Phase::Idle);
        // The request is repeated every retry until the answer comes.
        assert_eq!(b.poll_timeout(), Some(now + SEC));
        b.handle_timeout(now + SEC);
        assert_eq!(actions(&mut b).len(), 1);
        b.handle_handover_done(now + SEC + SEC / 2, "a".into(), 1);
        assert_eq!(actions(&mut b), [Action::Start]);
        assert_eq!(b.phase(), Phase::Running);
        // Removed later: it stays cleared, the instance keeps running.
        b.handle_view(now + 20 * SEC, left[1..].to_vec());
        assert_eq!(actions(&mut b), []);
        assert_eq!(b.phase(), Phase::Running);
        // And it is forgotten.
        assert!(b.gone.is_empty());
    }

    #[test]
    fn a_handover_that_arrives_before_the_leave_counts() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_handover_done(now, "a".into(), 1);
        assert_eq!(actions(&mut b), []);
        b.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Left),
                host("b", 2, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut b), [Action::Start]);
    }

    #[test]
    fn a_handover_from_another_incarnation_does_not_count() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Left),
                host("b", 2, MemberState::Up),
            ],
        );
        actions(&mut b);
        b.handle_handover_done(now, "a".into(), 99);
        assert_eq!(actions(&mut b), []);
    }

    #[test]
    fn a_silent_member_that_left_is_passed_after_the_handover_timeout() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Left),
                host("b", 2, MemberState::Up),
            ],
        );
        actions(&mut b);
        b.handle_timeout(now + 5 * SEC - Duration::from_millis(1));
        assert!(!actions(&mut b).contains(&Action::Start));
        assert_eq!(b.poll_timeout(), Some(now + 5 * SEC));
        b.handle_timeout(now + 5 * SEC);
        assert_eq!(actions(&mut b), [Action::Start]);
    }

    #[test]
    fn a_downed_host_is_passed_after_the_margin_and_never_asked() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Down),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut b), []);
        assert_eq!(b.poll_timeout(), Some(now + 10 * SEC));
        b.handle_timeout(now + 9 * SEC);
        assert_eq!(actions(&mut b), []);
        assert_eq!(b.poll_timeout(), Some(now + 10 * SEC));
        b.handle_timeout(now + 10 * SEC);
        assert_eq!(actions(&mut b), [Action::Start]);
        // The third member never starts one.
        let mut c = three("c", now);
        c.handle_view(
            now + 10 * SEC,
            vec![
                host("a", 1, MemberState::Down),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut c), []);
    }

    #[test]
    fn a_host_removed_without_a_down_seen_waits_the_margin_too() {
        let now = Instant::now();
        let mut b = three("b", now);
        b.handle_view(now, vec![host("b", 2, MemberState::Up)]);
        assert_eq!(actions(&mut b), []);
        b.handle_timeout(now + 10 * SEC);
        assert_eq!(actions(&mut b), [Action::Start]);
    }

    #[test]
    fn a_node_that_joins_after_the_host_was_removed_starts_at_once() {
        let now = Instant::now();
        let mut b = Placement::new("b".into(), timing());
        b.handle_view(now, vec![host("b", 2, MemberState::Up)]);
        assert_eq!(actions(&mut b), [Action::Start]);
    }

    #[test]
    fn a_downed_host_stops_its_instance() {
        let now = Instant::now();
        let mut a = three("a", now);
        actions(&mut a);
        a.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Down),
                host("b", 2, MemberState::Suspect),
            ],
        );
        assert_eq!(actions(&mut a), [Action::Stop]);
        a.handle_stopped(now);
        // The successor is asked nothing of; it may be unreachable, and
        // waits out the margin anyway.
        assert_eq!(actions(&mut a), [done("b", 2)]);
    }

    #[test]
    fn an_instance_that_stops_by_itself_is_not_restarted() {
        let now = Instant::now();
        let mut a = three("a", now);
        actions(&mut a);
        a.handle_stopped(now);
        assert_eq!(a.phase(), Phase::Ended);
        assert_eq!(actions(&mut a), []);
        a.handle_timeout(now + 60 * SEC);
        assert_eq!(actions(&mut a), []);
        // When a leaves, it hands over at once: it has no instance.
        a.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Left),
                host("b", 2, MemberState::Up),
            ],
        );
        assert_eq!(actions(&mut a), [done("b", 2)]);
    }

    #[test]
    fn a_member_that_has_not_left_does_not_answer_a_handover_request() {
        let now = Instant::now();
        let mut c = three("c", now);
        c.handle_handover_request(now, "b".into(), 2);
        assert_eq!(actions(&mut c), []);
    }

    #[test]
    fn an_idle_member_that_left_answers_at_once() {
        let now = Instant::now();
        let mut c = three("c", now);
        c.handle_view(
            now,
            vec![
                host("a", 1, MemberState::Up),
                host("b", 2, MemberState::Up),
                host("c", 3, MemberState::Left),
            ],
        );
        c.handle_handover_request(now, "b".into(), 2);
        assert_eq!(actions(&mut c), [done("b", 2)]);
    }
}
