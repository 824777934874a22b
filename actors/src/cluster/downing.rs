//! Who is down when members are unreachable: the split-brain resolver's
//! decisions, after Akka's Split Brain Resolver.
//!
//! A failure detector cannot tell a crashed member from one behind a
//! network partition. Once the view has been stable for `stable_after`,
//! every node applies one [`DowningStrategy`] to its own view
//! ([`Resolver`]); the strategies and their trade-offs are documented on
//! [`DowningStrategy`], which users see.
//!
//! # The stability clock
//! Decisions wait until the view has stopped changing, so that members
//! that flap or a partition still forming do not cause a hasty verdict.
//! The clock restarts whenever the member set or the set of unreachable
//! members changes; a view whose unreachable set stays unchanged for
//! `stable_after` gets one decision, and no more until the view changes.
//! A view without unreachable members needs no decision.
//!
//! One exception bounds how late a losing side downs itself: a change
//! from a view in which this node loses (the strategy would down it) to
//! another in which it loses does not restart the clock. The side that
//! wins decides `stable_after` after its own last change, which comes
//! after the split; singletons and sharding there take over what the
//! losing side ran `down_removal_margin` later. If every change restarted
//! the losing side's clock, it would decide only once its view held
//! still, and on a minority it may not: indirect probes cannot get
//! through, so a member of its own side that misses one direct probe (a
//! busy host) is suspected and refutes, again and again. Each of those
//! changes would push the decision out, up to the instability limit
//! below, past the winner's margin. With the exception, the losing side
//! downs itself `stable_after` after it first saw itself losing: at most
//! its failure detection's delay (the time it takes to suspect the other
//! side) after the winner's decision. The winning side keeps the strict
//! rule: it downs others, so it waits for a view that holds still, and
//! deciding later only widens the margin.
//!
//! If reachability keeps changing, the view never becomes stable, and a
//! partition could last for ever without a decision. So, with
//! `down_all_when_unstable` set, when reachability has kept changing for
//! `stable_after + down_all_when_unstable` since it first changed (since
//! the last decision, or since every member was last reachable), every
//! node downs itself ([`Decision::DownAll`]). Akka's default for it is on,
//! at `max(3/4 of stable_after, 4 s)`: [`default_down_all_when_unstable`].
//!
//! ```text
//!               view: some member unreachable, clock = now
//!   idle ─────────────────────────────────────────► waiting ◄─┐ view changed:
//!    ▲ ◄─────────── view: all reachable ──────────── │  ▲    └─┘ clock = now (kept
//!    │                                               │  │         if this node loses
//!    │          clock + stable_after passed: the     │  │         before and after)
//!    │          strategy's decision (lease-majority: │  │ view changed:
//!    │          TryLease, then lease_result decides) ▼  │ clock = now
//!    └──────────── view: all reachable ──────────── decided
//!
//!  waiting, reachability first changed at t (since all were reachable or
//!  since the last decision), view not stable yet:
//!      t + stable_after + down_all_when_unstable passed → DownAll, decided
//! ```
//!
//! # What each node does with a decision
//! There is no leader: every node decides for itself from its own view, as
//! it would on the leader of its side in Akka. [`Decision::DownUnreachable`]
//! lists the members this node declares down; [`Decision::DownSelf`] means
//! this node leaves the cluster as down (the other side downs it);
//! [`Decision::DownAll`] means this node downs itself and every other
//! member. Nodes that are connected only through a third one (A reaches B,
//! B reaches C, A does not reach C) are not singled out as Akka does;
//! SWIM's indirect probes keep most of them from being suspected at all.
//!
//! Pure: no IO and no clock; time is passed in. [`FileLease`] (a lock
//! file) is the one piece that touches the file system.

use std::{
    collections::BTreeMap,
    fmt,
    fs::{self, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

/// How a node decides who is down when members are unreachable.
///
/// A failure detector cannot tell a crashed member from one behind a
/// network partition, and in a partition both sides see the other as
/// unreachable. If each side simply downed what it cannot reach after a
/// timeout, a partition longer than that timeout would leave two clusters,
/// each running its own singletons and owning the same shards. Instead,
/// once the view has been stable for `stable_after` (no member and no
/// reachability change), every node applies the strategy to its own
/// view. The strategies are built so that the two sides of a clean
/// partition reach opposite conclusions: one side downs the unreachable
/// members and carries on, the other downs itself. A node whose view
/// changes but in which it loses all along (the strategy would down it
/// in each) downs itself `stable_after` after it first saw itself
/// losing: the losing side is not held back by changes that cannot save
/// it, so it is down soon after the other side decided.
///
/// If reachability keeps changing, the view never becomes stable; so, with
/// `down_all_when_unstable` set, reachability that has kept changing for
/// `stable_after + down_all_when_unstable` downs every node, whatever the
/// strategy. Downing itself, a node leaves the cluster for good: its
/// incarnation never comes back, and a restart rejoins as a new one.
///
/// | Strategy | This side survives (downs the unreachable) when | Otherwise | Trade-off |
/// |---|---|---|---|
/// | [`KeepMajority`](DowningStrategy::KeepMajority) (default) | its reachable members are more than half of all members; at exactly half, when it holds the lowest node address | downs itself | no settings, the cluster may grow and shrink; with three or more parts and none a majority, every node downs itself; in a 2-node cluster the node with the higher address cannot outlive the other's crash |
/// | [`StaticQuorum`](DowningStrategy::StaticQuorum) | at least `quorum_size` members are reachable | downs itself; with more than `2 * quorum_size - 1` members, every node downs itself | for clusters of a fixed size: never two clusters, but the cluster stops once fewer than `quorum_size` members remain, and must not grow beyond `2 * quorum_size - 1` |
/// | [`KeepOldest`](DowningStrategy::KeepOldest) | it holds the oldest member (lowest start time); with `down_if_alone`, not when the oldest is alone on its side and at least two members are on the other | downs itself | the oldest member (where singletons run) stays put; a small side can outlive a large one; without `down_if_alone`, the oldest member's crash stops the whole cluster |
/// | [`DownAll`](DowningStrategy::DownAll) | never | every node downs itself | simplest and safe; any crash or partition stops the whole cluster, to be restarted from outside |
/// | [`LeaseMajority`](DowningStrategy::LeaseMajority) | it acquires the [`Lease`]; the majority tries at once, the minority after `acquire_delay_for_minority` | downs itself | survives equal splits and the loss of a majority, decided by an arbiter outside the cluster; needs one, and a side that cannot reach it downs itself |
///
/// "Lowest node address" is the lowest `name@host:port` string in byte
/// order (so `n@10.0.0.10:1` sorts before `n@10.0.0.9:1`): any total order
/// serves, as long as every node uses the same one. Akka's warning applies
/// to it: in a cluster of two, an equal split is 1 + 1, and a node cannot
/// tell a partition from a crash, so when the node with the lowest address
/// crashes the other downs itself too. Run three or more nodes, or use
/// [`LeaseMajority`](DowningStrategy::LeaseMajority).
///
/// Every node of a cluster must use the same strategy with the same
/// settings: the strategies only give one surviving side when both sides
/// apply the same rule.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum DowningStrategy {
    /// The side with more than half of the members survives and the other
    /// downs itself; at exactly half, the side holding the member with the
    /// lowest node address (`name@host:port`, byte order) survives. With
    /// three or more parts and none a majority, every node downs itself.
    /// The default: it needs no settings and suits clusters that grow and
    /// shrink.
    #[default]
    KeepMajority,
    /// The side with at least `quorum_size` reachable members survives;
    /// a side with fewer downs itself. For clusters of a fixed size.
    StaticQuorum {
        /// Members a side needs to survive; at least 1. The cluster must
        /// not have more than `2 * quorum_size - 1` members, or both sides
        /// of a split could reach the quorum: with more, a decision downs
        /// every node instead (as in Akka).
        quorum_size: usize,
    },
    /// The side holding the oldest member (the lowest start time; equal
    /// start times are ordered by node address) survives. Singletons run
    /// on the oldest member, so they never move in a partition.
    KeepOldest {
        /// When the oldest member is alone on its side and at least two
        /// members are on the other, the oldest downs itself and the others
        /// survive. Then the others also survive the oldest member's crash,
        /// which otherwise stops the whole cluster. A 2-node cluster keeps
        /// the oldest either way.
        down_if_alone: bool,
    },
    /// Every node downs itself as soon as any member is unreachable (and
    /// the view is stable). Never two clusters, and no cluster either: to
    /// be restarted from outside.
    DownAll,
    /// The side that acquires the lease survives, the other downs itself.
    /// The majority side (by [`KeepMajority`](Self::KeepMajority)'s rule)
    /// tries at once, the minority only after `acquire_delay_for_minority`,
    /// so the majority wins when both can reach the lease.
    LeaseMajority {
        /// The arbiter, outside the cluster, that both sides can reach.
        lease: Arc<dyn Lease>,
        /// How long the minority waits before it tries the lease. Akka's
        /// default: [`DEFAULT_ACQUIRE_DELAY_FOR_MINORITY`].
        acquire_delay_for_minority: Duration,
    },
}

impl DowningStrategy {
    /// The strategy's name, as Akka's `active-strategy` setting spells it:
    /// `keep-majority`, `static-quorum`, `keep-oldest`, `down-all` or
    /// `lease-majority`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::KeepMajority => "keep-majority",
            Self::StaticQuorum { .. } => "static-quorum",
            Self::KeepOldest { .. } => "keep-oldest",
            Self::DownAll => "down-all",
            Self::LeaseMajority { .. } => "lease-majority",
        }
    }
}

/// [`DowningStrategy::LeaseMajority`]'s `acquire_delay_for_minority` in
/// Akka: long enough for the majority, which tries at once, to have taken
/// the lease before the minority asks.
pub const DEFAULT_ACQUIRE_DELAY_FOR_MINORITY: Duration = Duration::from_secs(2);

/// The least `down_all_when_unstable` that [`default_down_all_when_unstable`]
/// gives (Akka's floor): with a short `stable_after`, three quarters of it
/// would down the cluster over a few seconds of flapping.
const MIN_DOWN_ALL_WHEN_UNSTABLE: Duration = Duration::from_secs(4);

/// Akka's default for `down_all_when_unstable` ("on"): three quarters of
/// `stable_after`, and at least 4 s.
pub(crate) fn default_down_all_when_unstable(stable_after: Duration) -> Duration {
    (stable_after * 3 / 4).max(MIN_DOWN_ALL_WHEN_UNSTABLE)
}

/// An arbiter outside the cluster that at most one owner holds at a time
/// (a Kubernetes lease, a database row lock, a lock file on shared
/// storage), for [`DowningStrategy::LeaseMajority`].
///
/// The membership task calls it, so its calls should return quickly: an
/// arbiter that cannot be reached is an answer (`false`), not a reason to
/// wait.
pub trait Lease: Send + Sync + fmt::Debug {
    /// Tries to take the lease for `owner` (a node address). True if
    /// `owner` holds it now, including when it held it already; false if
    /// another owner holds it or the arbiter cannot be reached.
    fn try_acquire(&self, owner: &str) -> bool;

    /// Gives the lease up, if `owner` holds it; otherwise does nothing.
    fn release(&self, owner: &str);
}

/// A [`Lease`] held as a lock file: the holder creates it (only one
/// creation succeeds) and writes its name into it; releasing removes it.
///
/// Every node must reach the same file, so this suits nodes on one host
/// (tests, a development cluster) or a shared file system whose exclusive
/// creation is reliable. A holder that crashes keeps the lease until the
/// file is removed by hand, so it is no arbiter for production.
#[derive(Debug, Clone)]
pub struct FileLease {
    path: PathBuf,
}

impl FileLease {
    /// A lease on the lock file at `path`. Nothing is created yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who holds the lease: the name in the lock file, if there is one.
    pub fn holder(&self) -> Option<String> {
        fs::read_to_string(&self.path).ok()
    }
}

impl Lease for FileLease {
    fn try_acquire(&self, owner: &str) -> bool {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.path)
        {
            Ok(mut file) => {
                if let Err(error) = file.write_all(owner.as_bytes()) {
                    // A lock file that names nobody would be held by nobody
                    // for ever: take it back and report no lease.
                    let _ = fs::remove_file(&self.path);
                    tracing::warn!(path = %self.path.display(), %error, "lease file not written");
                    return false;
                }
                true
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                self.holder().as_deref() == Some(owner)
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "lease file not created");
                false
            }
        }
    }

    fn release(&self, owner: &str) {
        // Only the holder's file exists while it holds the lease, so no one
        // else can have created a new one between the read and the removal.
        if self.holder().as_deref() == Some(owner)
            && let Err(error) = fs::remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), %error, "lease file not removed");
        }
    }
}

/// A member as the resolver sees it: the membership task's view of every
/// member that is up or unreachable (not down, leaving or left), this node
/// included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberInfo {
    /// Its node address, `name@host:port`.
    pub(crate) node: String,
    /// When its incarnation started (ms since the Unix epoch): the lowest
    /// is the oldest member.
    pub(crate) started_ms: u64,
    /// Reachable from this node. This node itself always counts as
    /// reachable.
    pub(crate) reachable: bool,
}

/// What the resolver decided for a stable view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// This side survives: declare these members (the unreachable ones, by
    /// node address, sorted) down.
    DownUnreachable(Vec<String>),
    /// This side loses: this node declares itself down and leaves.
    DownSelf,
    /// Every member is down: this node declares itself and every other
    /// member down.
    DownAll(DownAllCause),
    /// [`DowningStrategy::LeaseMajority`]: call
    /// [`Lease::try_acquire`] with this node's address as the owner
    /// ([`Resolver::lease`]), then [`Resolver::lease_result`], which gives
    /// the decision.
    TryLease,
}

/// Why a decision downs every member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DownAllCause {
    /// The strategy is [`DowningStrategy::DownAll`].
    Strategy,
    /// [`DowningStrategy::StaticQuorum`] with more than
    /// `2 * quorum_size - 1` members: both sides might reach the quorum.
    TooManyMembers,
    /// Reachability kept changing for `stable_after +
    /// down_all_when_unstable`.
    Unstable,
}

impl DownAllCause {
    /// A short name, for logs and metric labels.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Strategy => "down-all",
            Self::TooManyMembers => "too-many-members",
            Self::Unstable => "unstable",
        }
    }
}

/// Where the resolver stands with the current view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No decision yet for this view.
    Open,
    /// [`Decision::TryLease`] was given; [`Resolver::lease_result`] is due.
    AwaitingLease,
    /// This view has had its decision.
    Decided,
}

/// One member in the resolver's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    started_ms: u64,
    reachable: bool,
}

/// The split-brain resolver of one node: the view, the stability clock,
/// and the strategy's decision (module docs).
///
/// Method groups:
/// - input: [`on_view`](Self::on_view) with every view the membership
///   task computes, [`lease_result`](Self::lease_result) after a
///   [`Decision::TryLease`];
/// - output: [`poll`](Self::poll) at [`next_deadline`](Self::next_deadline)
///   (and after `on_view`) for the decision;
/// - the lease to try: [`lease`](Self::lease) and [`me`](Self::me).
#[derive(Debug)]
pub(crate) struct Resolver {
    strategy: DowningStrategy,
    stable_after: Duration,
    down_all_when_unstable: Option<Duration>,
    me: String,
    /// The current view by node address (so in address order).
    view: BTreeMap<String, Seen>,
    /// When the stability clock last started: the last change of the
    /// view, except changes from a view this node loses to another it
    /// loses; `None` before the first view.
    stable_since: Option<Instant>,
    /// When reachability first changed since every member was reachable
    /// or since the last decision.
    unstable_since: Option<Instant>,
    phase: Phase,
}

impl Resolver {
    /// A resolver for the node `me` (its node address, which must be in
    /// every view). `down_all_when_unstable`: `None` is off; Akka's
    /// default is [`default_down_all_when_unstable`].
    pub(crate) fn new(
        strategy: DowningStrategy,
        stable_after: Duration,
        down_all_when_unstable: Option<Duration>,
        me: String,
    ) -> Self {
        Self {
            strategy,
            stable_after,
            down_all_when_unstable,
            me,
            view: BTreeMap::new(),
            stable_since: None,
            unstable_since: None,
            phase: Phase::Open,
        }
    }

    /// The membership view now: every member that is up or unreachable,
    /// this node included (in any order). A view that differs from the
    /// last one in its members or in which are unreachable restarts the
    /// stability clock and voids a decision in progress (a pending
    /// [`Decision::TryLease`]), unless this node loses in both views (the
    /// clock then runs on); the same view again changes nothing.
    pub(crate) fn on_view(&mut self, now: Instant, members: &[MemberInfo]) {
        let view: BTreeMap<String, Seen> = members
            .iter()
            .map(|m| {
                let seen = Seen {
                    started_ms: m.started_ms,
                    // This node reaches itself, whatever a caller's table
                    // says about it.
                    reachable: m.reachable || m.node == self.me,
                };
                (m.node.clone(), seen)
            })
            .collect();
        debug_assert!(
            view.contains_key(&self.me),
            "the view must include this node ({})",
            self.me
        );
        if self.stable_since.is_some() && view == self.view {
            return;
        }
        let reachability_changed = !unreachable_of(&view).eq(unreachable_of(&self.view));
        // A side that loses and keeps losing through the change keeps its
        // clock: waiting longer cannot save it, and the other side takes
        // over what it runs one margin after its own decision, which does
        // not wait for this side's view to settle.
        let was_losing = self.phase == Phase::Open && self.stable_since.is_some() && self.loses();
        self.view = view;
        if !(was_losing && self.loses()) {
            self.stable_since = Some(now);
        }
        self.phase = Phase::Open;
        if reachability_changed {
            if unreachable_of(&self.view).next().is_none() {
                // Healed (or the unreachable were removed): instability
                // starts over with the next reachability change.
                self.unstable_since = None;
            } else {
                self.unstable_since.get_or_insert(now);
            }
        }
    }

    /// The decision, if one is due at `now`: the view has unreachable
    /// members and has been stable for `stable_after` (or has been
    /// unstable for too long), and had no decision yet. Each view gets
    /// at most one.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Decision> {
        if self.phase != Phase::Open || unreachable_of(&self.view).next().is_none() {
            return None;
        }
        let stable_at = self.stable_since? + self.stable_after;
        if now < stable_at {
            if self.unstable_deadline().is_some_and(|at| now >= at) {
                return Some(self.decided(Decision::DownAll(DownAllCause::Unstable)));
            }
            return None;
        }
        // A view that is stable now gets the strategy's decision, even if
        // the instability deadline passed too (a late poll): it is the
        // better informed one.
        let decision = self.decide(stable_at, now)?;
        if decision == Decision::TryLease {
            self.phase = Phase::AwaitingLease;
            return Some(decision);
        }
        Some(self.decided(decision))
    }

    /// When [`poll`](Self::poll) should next be called, if a decision can
    /// come without a new view: `None` when the view has no unreachable
    /// members, had its decision, or waits for
    /// [`lease_result`](Self::lease_result).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.phase != Phase::Open || unreachable_of(&self.view).next().is_none() {
            return None;
        }
        let stable_at = self.stable_since? + self.stable_after;
        let decide_at = match &self.strategy {
            DowningStrategy::LeaseMajority {
                acquire_delay_for_minority,
                ..
            } if self.in_minority() => stable_at + *acquire_delay_for_minority,
            _ => stable_at,
        };
        Some(match self.unstable_deadline() {
            Some(at) if at < stable_at => at,
            _ => decide_at,
        })
    }

    /// The lease's answer after [`Decision::TryLease`]: `held` if
    /// [`Lease::try_acquire`] returned true. The decision for the view the
    /// lease was tried for: this side survives if it holds the lease, and
    /// downs itself otherwise. `None` if no lease was asked for, or the
    /// view has changed since (then the next stable view asks again; a
    /// lease taken meanwhile stays with this node, which gets it again).
    pub(crate) fn lease_result(&mut self, held: bool) -> Option<Decision> {
        if self.phase != Phase::AwaitingLease {
            return None;
        }
        Some(self.decided(if held {
            Decision::DownUnreachable(self.unreachable())
        } else {
            Decision::DownSelf
        }))
    }

    /// The lease of [`DowningStrategy::LeaseMajority`], to try when
    /// [`Decision::TryLease`] says so, and to release when this node
    /// leaves or the downed members are gone.
    pub(crate) fn lease(&self) -> Option<&Arc<dyn Lease>> {
        match &self.strategy {
            DowningStrategy::LeaseMajority { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// The strategy's name ([`DowningStrategy::name`]), for logs.
    pub(crate) fn strategy_name(&self) -> &'static str {
        self.strategy.name()
    }

    /// This node's address: the owner to acquire the lease as.
    pub(crate) fn me(&self) -> &str {
        &self.me
    }

    /// Records a final decision: this view is done, and instability is
    /// counted afresh from the next reachability change.
    fn decided(&mut self, decision: Decision) -> Decision {
        self.phase = Phase::Decided;
        self.unstable_since = None;
        decision
    }

    /// When instability downs every member, if it is on and reachability
    /// has changed.
    fn unstable_deadline(&self) -> Option<Instant> {
        Some(self.unstable_since? + self.stable_after + self.down_all_when_unstable?)
    }

    /// The strategy's decision for the current (stable, with unreachable
    /// members) view; `None` while a lease-majority minority waits for its
    /// turn (`stable_at + acquire_delay_for_minority`).
    fn decide(&self, stable_at: Instant, now: Instant) -> Option<Decision> {
        if let DowningStrategy::LeaseMajority {
            acquire_delay_for_minority,
            ..
        } = &self.strategy
            && self.in_minority()
            && now < stable_at + *acquire_delay_for_minority
        {
            return None;
        }
        Some(self.verdict())
    }

    /// The current view has unreachable members and the strategy's
    /// verdict for it downs this node (itself alone, or every member).
    /// A lease-majority side never knows it loses before it tried the
    /// lease.
    fn loses(&self) -> bool {
        unreachable_of(&self.view).next().is_some()
            && matches!(self.verdict(), Decision::DownSelf | Decision::DownAll(_))
    }

    /// The strategy's verdict for the current view, whenever it is due
    /// ([`decide`](Self::decide) says when).
    fn verdict(&self) -> Decision {
        let total = self.view.len();
        let reachable = self.view.values().filter(|s| s.reachable).count();
        let survive = |keep: bool| {
            if keep {
                Decision::DownUnreachable(self.unreachable())
            } else {
                Decision::DownSelf
            }
        };
        match &self.strategy {
            DowningStrategy::KeepMajority => survive(!self.in_minority()),
            DowningStrategy::StaticQuorum { quorum_size } => {
                // Above 2q - 1 members both sides of a split may reach q;
                // downing everything is the only safe answer left.
                if total > (quorum_size.saturating_mul(2)).saturating_sub(1) {
                    Decision::DownAll(DownAllCause::TooManyMembers)
                } else {
                    survive(reachable >= *quorum_size)
                }
            }
            DowningStrategy::KeepOldest { down_if_alone } => {
                let oldest_here = self
                    .view
                    .iter()
                    .min_by_key(|(node, s)| (s.started_ms, *node))
                    .is_some_and(|(_, s)| s.reachable);
                let unreachable = total - reachable;
                survive(match (oldest_here, *down_if_alone) {
                    // The oldest alone here against two or more: it steps
                    // aside. 1 + 1 keeps the oldest: the other is no better.
                    (true, true) => !(reachable == 1 && unreachable >= 2),
                    (false, true) => unreachable == 1 && reachable >= 2,
                    (here, false) => here,
                })
            }
            DowningStrategy::DownAll => Decision::DownAll(DownAllCause::Strategy),
            DowningStrategy::LeaseMajority { .. } => Decision::TryLease,
        }
    }

    /// This side is in the minority: fewer than half of the members are
    /// reachable, or exactly half and the member with the lowest address
    /// is on the other side.
    fn in_minority(&self) -> bool {
        let total = self.view.len();
        let reachable = self.view.values().filter(|s| s.reachable).count();
        match (2 * reachable).cmp(&total) {
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Less => true,
            // The BTreeMap is in address order: the first is the lowest.
            std::cmp::Ordering::Equal => !self.view.values().next().is_some_and(|s| s.reachable),
        }
    }

    /// The unreachable members' addresses, sorted.
    fn unreachable(&self) -> Vec<String> {
        unreachable_of(&self.view).cloned().collect()
    }
}

/// The unreachable members of a view, in address order.
fn unreachable_of(view: &BTreeMap<String, Seen>) -> impl Iterator<Item = &String> {
    view.iter()
        .filter(|(_, s)| !s.reachable)
        .map(|(node, _)| node)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STABLE: Duration = Duration::from_secs(10);

    fn addr(i: usize) -> String {
        format!("n{i}@127.0.0.1:{}", 2550 + i)
    }

    /// `n` members `n0..`, `n0` the oldest; those in `unreachable` are
    /// unreachable.
    fn view(n: usize, unreachable: &[usize]) -> Vec<MemberInfo> {
        (0..n)
            .map(|i| MemberInfo {
                node: addr(i),
                started_ms: 1_000 + i as u64,
                reachable: !unreachable.contains(&i),
            })
            .collect()
    }

    /// What `me` decides for `members` once they have been stable.
    fn decide(strategy: DowningStrategy, me: usize, members: &[MemberInfo]) -> Option<Decision> {
        let t0 = Instant::now();
        let mut r = Resolver::new(strategy, STABLE, None, addr(me));
        r.on_view(t0, members);
        r.poll(t0 + STABLE)
    }

    /// The view of node `me` in a clean split of `n` members: the others
    /// on its side are reachable, the rest not.
    fn split_view(n: usize, side: &[usize], me: usize) -> Vec<MemberInfo> {
        let mine = side.contains(&me);
        let other: Vec<usize> = (0..n).filter(|i| side.contains(i) != mine).collect();
        view(n, &other)
    }

    /// A decision table's row: (setting, members, unreachable from me, me,
    /// decision).
    type Row<S> = (S, usize, &'static [usize], usize, Option<Decision>);

    fn down(nodes: &[usize]) -> Decision {
        Decision::DownUnreachable(nodes.iter().map(|&i| addr(i)).collect())
    }

    #[test]
    fn keep_majority_table() {
        use DowningStrategy::KeepMajority as K;
        // (members, unreachable from me, me, decision)
        let table: &[(usize, &[usize], usize, Option<Decision>)] = &[
            (3, &[], 0, None),
            (3, &[2], 0, Some(down(&[2]))),
            (3, &[0, 1], 2, Some(Decision::DownSelf)),
            // 2 + 2: the side with n0 (lowest address) survives.
            (4, &[2, 3], 0, Some(down(&[2, 3]))),
            (4, &[0, 1], 3, Some(Decision::DownSelf)),
            (4, &[1, 2], 3, Some(down(&[1, 2]))),
            (4, &[0, 3], 1, Some(Decision::DownSelf)),
            // 4 members, one crashed: 3 of 4 is a majority.
            (4, &[3], 1, Some(down(&[3]))),
            (5, &[3, 4], 0, Some(down(&[3, 4]))),
            (5, &[0, 1, 2], 4, Some(Decision::DownSelf)),
            (5, &[0, 1], 4, Some(down(&[0, 1]))),
            // 1 + 1: the lowest address survives, the other downs itself.
            (2, &[1], 0, Some(down(&[1]))),
            (2, &[0], 1, Some(Decision::DownSelf)),
        ];
        for (n, unreachable, me, expected) in table {
            assert_eq!(
                decide(K, *me, &view(*n, unreachable)),
                *expected,
                "{n} members, n{me} cannot reach {unreachable:?}"
            );
        }
    }

    #[test]
    fn keep_majority_three_parts_without_a_majority_all_down_themselves() {
        // 5 members split 2 + 2 + 1: every part sees 3 unreachable.
        for (me, unreachable) in [(0, &[2, 3, 4]), (2, &[0, 1, 4]), (4, &[0, 1, 2])] {
            let d = decide(
                DowningStrategy::KeepMajority,
                me,
                &view(5, &unreachable[..]),
            );
            assert_eq!(d, Some(Decision::DownSelf), "n{me}");
        }
    }

    #[test]
    fn lowest_address_is_string_order() {
        // "n@10.0.0.10:1" sorts before "n@10.0.0.9:1" as a string.
        let members = |ten_reachable: bool| {
            vec![
                MemberInfo {
                    node: "n@10.0.0.9:1".into(),
                    started_ms: 1,
                    reachable: !ten_reachable,
                },
                MemberInfo {
                    node: "n@10.0.0.10:1".into(),
                    started_ms: 2,
                    reachable: ten_reachable,
                },
            ]
        };
        let t0 = Instant::now();
        let mut ten = Resolver::new(
            DowningStrategy::KeepMajority,
            STABLE,
            None,
            "n@10.0.0.10:1".into(),
        );
        ten.on_view(t0, &members(true));
        assert_eq!(
            ten.poll(t0 + STABLE),
            Some(Decision::DownUnreachable(vec!["n@10.0.0.9:1".into()]))
        );
        let mut nine = Resolver::new(
            DowningStrategy::KeepMajority,
            STABLE,
            None,
            "n@10.0.0.9:1".into(),
        );
        nine.on_view(t0, &members(false));
        assert_eq!(nine.poll(t0 + STABLE), Some(Decision::DownSelf));
    }

    #[test]
    fn static_quorum_table() {
        let q = |quorum_size| DowningStrategy::StaticQuorum { quorum_size };
        let table: &[Row<usize>] = &[
            // (quorum, members, unreachable from me, me, decision)
            (3, 5, &[3, 4], 0, Some(down(&[3, 4]))),
            (3, 5, &[0, 1, 2], 3, Some(Decision::DownSelf)),
            (3, 5, &[4], 1, Some(down(&[4]))),
            // Below the quorum on both sides: both down themselves.
            (3, 4, &[2, 3], 0, Some(Decision::DownSelf)),
            (3, 4, &[0, 1], 2, Some(Decision::DownSelf)),
            (3, 3, &[2], 0, Some(Decision::DownSelf)),
            (2, 3, &[2], 0, Some(down(&[2]))),
            (2, 3, &[0, 1], 2, Some(Decision::DownSelf)),
            // 6 > 2 * 3 - 1 members: a 3 + 3 split would keep both sides.
            (
                3,
                6,
                &[3, 4, 5],
                0,
                Some(Decision::DownAll(DownAllCause::TooManyMembers)),
            ),
            (
                3,
                6,
                &[5],
                0,
                Some(Decision::DownAll(DownAllCause::TooManyMembers)),
            ),
            (3, 5, &[], 0, None),
        ];
        for (quorum, n, unreachable, me, expected) in table {
            assert_eq!(
                decide(q(*quorum), *me, &view(*n, unreachable)),
                *expected,
                "quorum {quorum}, {n} members, n{me} cannot reach {unreachable:?}"
            );
        }
    }

    #[test]
    fn keep_oldest_table() {
        let k = |down_if_alone| DowningStrategy::KeepOldest { down_if_alone };
        // n0 is the oldest.
        let table: &[Row<bool>] = &[
            // (down_if_alone, members, unreachable from me, me, decision)
            (false, 3, &[1, 2], 0, Some(down(&[1, 2]))),
            (false, 3, &[0], 1, Some(Decision::DownSelf)),
            (false, 5, &[2, 3, 4], 0, Some(down(&[2, 3, 4]))),
            (false, 5, &[0, 1], 4, Some(Decision::DownSelf)),
            (false, 4, &[2, 3], 1, Some(down(&[2, 3]))),
            (false, 4, &[0, 1], 2, Some(Decision::DownSelf)),
            // Alone, the oldest steps aside for two or more.
            (true, 3, &[1, 2], 0, Some(Decision::DownSelf)),
            (true, 3, &[0], 1, Some(down(&[0]))),
            (true, 5, &[1, 2, 3, 4], 0, Some(Decision::DownSelf)),
            (true, 5, &[0], 3, Some(down(&[0]))),
            // Not alone: the oldest's side survives as without the flag.
            (true, 5, &[2, 3, 4], 0, Some(down(&[2, 3, 4]))),
            (true, 5, &[0, 1], 3, Some(Decision::DownSelf)),
            // 1 + 1 keeps the oldest either way.
            (true, 2, &[1], 0, Some(down(&[1]))),
            (true, 2, &[0], 1, Some(Decision::DownSelf)),
            (false, 2, &[1], 0, Some(down(&[1]))),
            (false, 2, &[0], 1, Some(Decision::DownSelf)),
        ];
        for (alone, n, unreachable, me, expected) in table {
            assert_eq!(
                decide(k(*alone), *me, &view(*n, unreachable)),
                *expected,
                "down_if_alone {alone}, {n} members, n{me} cannot reach {unreachable:?}"
            );
        }
    }

    #[test]
    fn keep_oldest_goes_by_start_time_then_address() {
        let strategy = DowningStrategy::KeepOldest {
            down_if_alone: false,
        };
        // n2 started first: its side survives, though n0 has the lowest
        // address.
        let mut members = view(4, &[2, 3]);
        members[2].started_ms = 1;
        assert_eq!(
            decide(strategy.clone(), 0, &members),
            Some(Decision::DownSelf)
        );
        // Equal start times: the lowest address is the oldest.
        for m in &mut members {
            m.started_ms = 7;
        }
        assert_eq!(decide(strategy, 0, &members), Some(down(&[2, 3])));
    }

    #[test]
    fn down_all_downs_everyone_on_any_unreachable() {
        for (n, unreachable, me) in [(3, &[2][..], 0), (5, &[0, 1, 2][..], 4), (2, &[1][..], 0)] {
            assert_eq!(
                decide(DowningStrategy::DownAll, me, &view(n, unreachable)),
                Some(Decision::DownAll(DownAllCause::Strategy))
            );
        }
        assert_eq!(decide(DowningStrategy::DownAll, 0, &view(3, &[])), None);
    }

    /// Every clean split of 2..=6 members: no two sides both survive, and
    /// for the strategies that promise it, exactly one does.
    #[test]
    fn the_two_sides_of_any_split_never_both_survive() {
        for n in 2..=6 {
            let quorum = n / 2 + 1;
            let strategies = [
                (DowningStrategy::KeepMajority, true),
                (
                    DowningStrategy::KeepOldest {
                        down_if_alone: false,
                    },
                    true,
                ),
                (
                    DowningStrategy::KeepOldest {
                        down_if_alone: true,
                    },
                    true,
                ),
                (
                    DowningStrategy::StaticQuorum {
                        quorum_size: quorum,
                    },
                    false,
                ),
            ];
            // Side A: the members whose bit is set; both sides non-empty.
            for mask in 1..(1u32 << n) - 1 {
                let side: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
                let a = side[0];
                let b = (0..n)
                    .find(|i| !side.contains(i))
                    .expect("both sides non-empty");
                for (strategy, exactly_one) in &strategies {
                    let survives = |me| {
                        let d = decide(strategy.clone(), me, &split_view(n, &side, me));
                        matches!(d, Some(Decision::DownUnreachable(_)))
                    };
                    let (sa, sb) = (survives(a), survives(b));
                    assert!(
                        !(sa && sb),
                        "{} {n} members, side {side:?}",
                        strategy.name()
                    );
                    if *exactly_one {
                        assert!(sa || sb, "{} {n} members, side {side:?}", strategy.name());
                    }
                }
            }
        }
    }

    #[test]
    fn no_unreachable_no_decision_and_no_deadline() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, Some(STABLE), addr(0));
        assert_eq!(r.next_deadline(), None);
        assert_eq!(r.poll(t0), None);
        r.on_view(t0, &view(3, &[]));
        assert_eq!(r.next_deadline(), None);
        assert_eq!(r.poll(t0 + 10 * STABLE), None);
    }

    #[test]
    fn decides_once_when_stable_and_not_before() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        r.on_view(t0, &view(3, &[2]));
        assert_eq!(r.next_deadline(), Some(t0 + STABLE));
        assert_eq!(r.poll(t0), None);
        assert_eq!(r.poll(t0 + STABLE - Duration::from_millis(1)), None);
        // The same view again (in another order) is no change.
        let mut again = view(3, &[2]);
        again.reverse();
        r.on_view(t0 + STABLE / 2, &again);
        assert_eq!(r.next_deadline(), Some(t0 + STABLE));
        assert_eq!(r.poll(t0 + STABLE), Some(down(&[2])));
        // Once per stable view.
        assert_eq!(r.next_deadline(), None);
        assert_eq!(r.poll(t0 + STABLE), None);
        assert_eq!(r.poll(t0 + 5 * STABLE), None);
        r.on_view(t0 + 2 * STABLE, &view(3, &[2]));
        assert_eq!(r.poll(t0 + 5 * STABLE), None);
    }

    #[test]
    fn a_changed_view_restarts_the_clock() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        r.on_view(t0, &view(5, &[4]));
        // Another member becomes unreachable just before the decision.
        let t1 = t0 + STABLE - Duration::from_millis(1);
        r.on_view(t1, &view(5, &[3, 4]));
        assert_eq!(r.poll(t0 + STABLE), None);
        assert_eq!(r.next_deadline(), Some(t1 + STABLE));
        // A member joining changes the view too.
        let t2 = t1 + STABLE / 2;
        r.on_view(t2, &view(6, &[3, 4]));
        assert_eq!(r.poll(t1 + STABLE), None);
        assert_eq!(r.poll(t2 + STABLE), Some(down(&[3, 4])));
    }

    /// Applies `events` (time from `t0`, unreachable members of a
    /// 5-member view) in order and polls every 10 ms until `until`; the
    /// first decision and when it came.
    fn first_decision(
        r: &mut Resolver,
        t0: Instant,
        events: &[(u64, &[usize])],
        until: Duration,
    ) -> Option<(Duration, Decision)> {
        let mut next = events.iter().peekable();
        let mut at = Duration::ZERO;
        while at <= until {
            while let Some((_, unreachable)) =
                next.next_if(|(ms, _)| Duration::from_millis(*ms) <= at)
            {
                r.on_view(t0 + at, &view(5, unreachable));
            }
            if let Some(d) = r.poll(t0 + at) {
                return Some((at, d));
            }
            at += Duration::from_millis(10);
        }
        None
    }

    #[test]
    fn a_minority_downs_itself_stable_after_it_first_loses_though_its_own_side_flaps() {
        // A 2/3 split at t0 (n0, n1 | n2, n3, n4), stable-after 3 s, as in
        // tests/netns/sharding.sh. The minority suspects the other side
        // one by one within 1.3 s of the split; then, its indirect probes
        // all going to the other side, n0 suspects its partner n1 at each
        // missed direct probe, and n1 refutes: its view keeps changing,
        // though n0 loses in every one of those views.
        let stable = Duration::from_secs(3);
        let unstable = Some(default_down_all_when_unstable(stable));
        let t0 = Instant::now();
        let minority: &[(u64, &[usize])] = &[
            (1_040, &[2]),
            (1_250, &[2, 4]),
            // Loses from here on: 2 of 5 reachable.
            (1_270, &[2, 3, 4]),
            (2_000, &[1, 2, 3, 4]),
            (2_200, &[2, 3, 4]),
            (3_500, &[1, 2, 3, 4]),
            (3_600, &[2, 3, 4]),
            (4_200, &[1, 2, 3, 4]),
            (4_250, &[2, 3, 4]),
            (6_000, &[1, 2, 3, 4]),
            (6_100, &[2, 3, 4]),
            (8_000, &[1, 2, 3, 4]),
            (8_100, &[2, 3, 4]),
        ];
        let mut small = Resolver::new(DowningStrategy::KeepMajority, stable, unstable, addr(0));
        let (at, decision) =
            first_decision(&mut small, t0, minority, Duration::from_secs(20)).expect("a decision");
        assert_eq!(decision, Decision::DownSelf);
        assert_eq!(at, Duration::from_millis(1_270) + stable);

        // The majority suspects n0 and n1 within 1.1 s and decides 3 s
        // later; its singletons and shards start the margin (stable-after
        // by default) after that. The minority is down before: at most its
        // failure detection's lag (here 170 ms) after the majority's
        // decision.
        let majority: &[(u64, &[usize])] = &[(900, &[0]), (1_100, &[0, 1])];
        let mut big = Resolver::new(DowningStrategy::KeepMajority, stable, unstable, addr(2));
        let (decided, decision) =
            first_decision(&mut big, t0, majority, Duration::from_secs(20)).expect("a decision");
        assert_eq!(decision, down(&[0, 1]));
        assert_eq!(decided, Duration::from_millis(1_100) + stable);
        assert!(at - decided <= Duration::from_millis(170));
        assert!(at < decided + stable);
    }

    #[test]
    fn a_view_in_which_this_node_survives_restarts_a_losing_clock() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        // Losing: 2 of 5 reachable, then 1 of 5; the clock runs from t0.
        r.on_view(t0, &view(5, &[2, 3, 4]));
        r.on_view(t0 + STABLE / 2, &view(5, &[1, 2, 3, 4]));
        assert_eq!(r.next_deadline(), Some(t0 + STABLE));
        // n1 and n2 are back: 3 of 5, this side survives after all, and
        // that verdict waits for its own stable view.
        let t1 = t0 + STABLE - Duration::from_millis(1);
        r.on_view(t1, &view(5, &[3, 4]));
        assert_eq!(r.poll(t0 + STABLE), None);
        assert_eq!(r.next_deadline(), Some(t1 + STABLE));
        // Losing again: the clock starts afresh.
        let t2 = t1 + STABLE / 2;
        r.on_view(t2, &view(5, &[2, 3, 4]));
        assert_eq!(r.poll(t1 + STABLE), None);
        assert_eq!(r.poll(t2 + STABLE), Some(Decision::DownSelf));
    }

    #[test]
    fn a_new_view_after_a_decision_gets_its_own_decision() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        r.on_view(t0, &view(5, &[4]));
        assert_eq!(r.poll(t0 + STABLE), Some(down(&[4])));
        // n4 is down and gone; then n3 is unreachable.
        let t1 = t0 + 2 * STABLE;
        r.on_view(t1, &view(4, &[3]));
        assert_eq!(r.next_deadline(), Some(t1 + STABLE));
        assert_eq!(r.poll(t1 + STABLE), Some(down(&[3])));
    }

    #[test]
    fn healed_before_stable_no_decision() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        r.on_view(t0, &view(3, &[2]));
        r.on_view(t0 + STABLE / 2, &view(3, &[]));
        assert_eq!(r.next_deadline(), None);
        assert_eq!(r.poll(t0 + 10 * STABLE), None);
    }

    #[test]
    fn this_node_always_counts_as_reachable() {
        // A table that lists this node as unreachable still counts it
        // here: 2 of 3 reachable, a majority.
        let members = view(3, &[0, 2]);
        assert_eq!(
            decide(DowningStrategy::KeepMajority, 0, &members),
            Some(down(&[2]))
        );
    }

    /// A flap: n2 unreachable, then reachable, then unreachable, … every
    /// `period`, from `t0` for `flaps` changes; returns the time of the
    /// last change.
    fn flap(r: &mut Resolver, t0: Instant, period: Duration, flaps: u32) -> Instant {
        let mut t = t0;
        for i in 0..flaps {
            t = t0 + period * i;
            let unreachable: &[usize] = if i % 2 == 0 { &[2] } else { &[1, 2] };
            r.on_view(t, &view(5, unreachable));
            assert_eq!(r.poll(t), None, "flap {i}");
            // Every poll between changes finds the view unstable.
            assert_eq!(r.poll(t + period / 2), None, "flap {i}");
        }
        t
    }

    #[test]
    fn flapping_never_decides_without_down_all_when_unstable() {
        let t0 = Instant::now();
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        let last = flap(&mut r, t0, STABLE / 2, 100);
        assert_eq!(r.next_deadline(), Some(last + STABLE));
        assert_eq!(r.poll(last + STABLE), Some(down(&[1, 2])));
    }

    #[test]
    fn down_all_when_unstable_fires_after_stable_after_plus_its_margin() {
        let t0 = Instant::now();
        let margin = STABLE * 3 / 4;
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, Some(margin), addr(0));
        // Changes every 1 s: never stable for 10 s.
        let period = Duration::from_secs(1);
        let limit = t0 + STABLE + margin;
        let mut t = t0;
        let mut i = 0;
        while t + period < limit {
            let unreachable: &[usize] = if i % 2 == 0 { &[2] } else { &[1, 2] };
            r.on_view(t, &view(5, unreachable));
            assert_eq!(r.poll(t), None, "at {:?}", t - t0);
            assert_eq!(r.next_deadline(), Some((t + STABLE).min(limit)));
            i += 1;
            t = t0 + period * i;
        }
        assert_eq!(r.poll(limit - Duration::from_millis(1)), None);
        assert_eq!(
            r.poll(limit),
            Some(Decision::DownAll(DownAllCause::Unstable))
        );
        assert_eq!(r.poll(limit), None);
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn a_stable_view_decides_before_the_instability_limit() {
        // Unreachable at t0, one more change at t0 + 1 s, then stable:
        // the strategy decides at t0 + 11 s, before t0 + 17.5 s.
        let t0 = Instant::now();
        let mut r = Resolver::new(
            DowningStrategy::KeepMajority,
            STABLE,
            Some(STABLE * 3 / 4),
            addr(0),
        );
        r.on_view(t0, &view(5, &[4]));
        let t1 = t0 + Duration::from_secs(1);
        r.on_view(t1, &view(5, &[3, 4]));
        assert_eq!(r.next_deadline(), Some(t1 + STABLE));
        assert_eq!(r.poll(t1 + STABLE), Some(down(&[3, 4])));
    }

    #[test]
    fn a_late_poll_of_a_stable_view_gets_the_strategy_decision() {
        // Both deadlines passed (t0 + 12 s for instability, t1 + 10 s for
        // stability): the view is stable now, so the strategy decides.
        let t0 = Instant::now();
        let mut r = Resolver::new(
            DowningStrategy::KeepMajority,
            STABLE,
            Some(Duration::from_secs(2)),
            addr(0),
        );
        r.on_view(t0, &view(5, &[4]));
        let t1 = t0 + Duration::from_secs(9);
        r.on_view(t1, &view(5, &[3, 4]));
        assert_eq!(r.next_deadline(), Some(t0 + Duration::from_secs(12)));
        assert_eq!(r.poll(t1 + STABLE), Some(down(&[3, 4])));
    }

    #[test]
    fn instability_is_counted_from_the_first_change_since_all_were_reachable() {
        let t0 = Instant::now();
        let margin = Duration::from_secs(5);
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, Some(margin), addr(0));
        r.on_view(t0, &view(3, &[2]));
        // Healed, then unreachable again later: the count starts over.
        r.on_view(t0 + Duration::from_secs(8), &view(3, &[]));
        let t1 = t0 + Duration::from_secs(9);
        r.on_view(t1, &view(3, &[2]));
        assert_eq!(r.poll(t0 + STABLE + margin), None);
        // A member joining restarts the stability clock but is not a
        // reachability change: the instability limit stays t1 + 15 s.
        r.on_view(t1 + Duration::from_secs(9), &view(4, &[2]));
        assert_eq!(r.next_deadline(), Some(t1 + STABLE + margin));
        assert_eq!(
            r.poll(t1 + STABLE + margin),
            Some(Decision::DownAll(DownAllCause::Unstable))
        );
    }

    #[test]
    fn instability_is_counted_afresh_after_a_decision() {
        let t0 = Instant::now();
        let margin = Duration::from_secs(5);
        let mut r = Resolver::new(DowningStrategy::KeepMajority, STABLE, Some(margin), addr(0));
        r.on_view(t0, &view(5, &[4]));
        assert_eq!(r.poll(t0 + STABLE), Some(down(&[4])));
        // n4 is gone; n3 is unreachable just before t0's limit would end.
        let t1 = t0 + STABLE + margin - Duration::from_millis(1);
        r.on_view(t1, &view(4, &[3]));
        assert_eq!(r.poll(t0 + STABLE + margin), None);
        assert_eq!(r.next_deadline(), Some(t1 + STABLE));
    }

    #[test]
    fn default_down_all_when_unstable_is_three_quarters_with_a_floor() {
        assert_eq!(
            default_down_all_when_unstable(Duration::from_secs(20)),
            Duration::from_secs(15)
        );
        assert_eq!(
            default_down_all_when_unstable(Duration::from_secs(2)),
            MIN_DOWN_ALL_WHEN_UNSTABLE
        );
    }

    #[test]
    fn strategy_names() {
        assert_eq!(DowningStrategy::default().name(), "keep-majority");
        assert_eq!(
            DowningStrategy::StaticQuorum { quorum_size: 2 }.name(),
            "static-quorum"
        );
        assert_eq!(
            DowningStrategy::KeepOldest {
                down_if_alone: true
            }
            .name(),
            "keep-oldest"
        );
        assert_eq!(DowningStrategy::DownAll.name(), "down-all");
        assert_eq!(DownAllCause::Strategy.label(), "down-all");
        assert_eq!(DownAllCause::TooManyMembers.label(), "too-many-members");
        assert_eq!(DownAllCause::Unstable.label(), "unstable");
    }

    const DELAY: Duration = Duration::from_secs(2);

    fn lease_majority(lease: Arc<dyn Lease>) -> DowningStrategy {
        DowningStrategy::LeaseMajority {
            lease,
            acquire_delay_for_minority: DELAY,
        }
    }

    /// Runs one node's lease protocol: the lease it gets, then the decision.
    fn try_lease(r: &mut Resolver) -> Option<Decision> {
        let lease = r.lease().expect("lease-majority has a lease").clone();
        let held = lease.try_acquire(r.me());
        r.lease_result(held)
    }

    #[test]
    fn lease_majority_the_majority_tries_first_and_one_side_holds_the_lease() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sbr.lease");
        let t0 = Instant::now();
        // 2 + 2: n0, n1 hold the lowest address (the majority by the tie
        // rule); n2, n3 the minority. Each node has its own FileLease on
        // the one file, as separate processes would.
        let mut a = Resolver::new(
            lease_majority(Arc::new(FileLease::new(&path))),
            STABLE,
            None,
            addr(0),
        );
        let mut b = Resolver::new(
            lease_majority(Arc::new(FileLease::new(&path))),
            STABLE,
            None,
            addr(2),
        );
        a.on_view(t0, &split_view(4, &[0, 1], 0));
        b.on_view(t0, &split_view(4, &[0, 1], 2));
        assert_eq!(a.next_deadline(), Some(t0 + STABLE));
        assert_eq!(b.next_deadline(), Some(t0 + STABLE + DELAY));

        assert_eq!(a.poll(t0 + STABLE), Some(Decision::TryLease));
        assert_eq!(b.poll(t0 + STABLE), None);
        assert_eq!(a.next_deadline(), None, "waits for lease_result");
        assert_eq!(try_lease(&mut a), Some(down(&[2, 3])));

        assert_eq!(b.poll(t0 + STABLE + DELAY - Duration::from_millis(1)), None);
        assert_eq!(b.poll(t0 + STABLE + DELAY), Some(Decision::TryLease));
        assert_eq!(try_lease(&mut b), Some(Decision::DownSelf));
        assert_eq!(FileLease::new(&path).holder(), Some(addr(0)));
    }

    #[test]
    fn lease_majority_whoever_gets_the_lease_survives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sbr.lease");
        let t0 = Instant::now();
        // 3 + 2, but the majority is late (it cannot reach the lease in
        // time): the minority takes it and survives; the majority downs
        // itself.
        let majority_view = split_view(5, &[0, 1, 2], 0);
        let minority_view = split_view(5, &[0, 1, 2], 3);
        let mut big = Resolver::new(
            lease_majority(Arc::new(FileLease::new(&path))),
            STABLE,
            None,
            addr(0),
        );
        let mut small = Resolver::new(
            lease_majority(Arc::new(FileLease::new(&path))),
            STABLE,
            None,
            addr(3),
        );
        big.on_view(t0, &majority_view);
        small.on_view(t0, &minority_view);
        assert_eq!(small.poll(t0 + STABLE + DELAY), Some(Decision::TryLease));
        assert_eq!(try_lease(&mut small), Some(down(&[0, 1, 2])));
        assert_eq!(big.poll(t0 + STABLE + DELAY), Some(Decision::TryLease));
        assert_eq!(try_lease(&mut big), Some(Decision::DownSelf));
    }

    #[test]
    fn lease_result_without_a_pending_lease_or_after_a_change_is_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let lease = Arc::new(FileLease::new(dir.path().join("sbr.lease")));
        let t0 = Instant::now();
        let mut r = Resolver::new(lease_majority(lease), STABLE, None, addr(0));
        assert_eq!(r.lease_result(true), None);
        r.on_view(t0, &view(3, &[2]));
        assert_eq!(r.lease_result(true), None);
        assert_eq!(r.poll(t0 + STABLE), Some(Decision::TryLease));
        // The view changes while the lease is tried: that answer is void,
        // and the new view asks again once stable.
        let t1 = t0 + STABLE;
        r.on_view(t1, &view(3, &[1, 2]));
        assert_eq!(r.lease_result(true), None);
        assert_eq!(r.poll(t1 + STABLE + DELAY), Some(Decision::TryLease));
        assert_eq!(try_lease(&mut r), Some(down(&[1, 2])));
        assert_eq!(r.lease_result(true), None, "one decision per view");
    }

    #[test]
    fn other_strategies_have_no_lease() {
        let r = Resolver::new(DowningStrategy::KeepMajority, STABLE, None, addr(0));
        assert!(r.lease().is_none());
    }

    #[test]
    fn file_lease_is_exclusive_reentrant_and_released() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sbr.lease");
        let one = FileLease::new(&path);
        let two = FileLease::new(&path);
        assert_eq!(one.path(), path);
        assert_eq!(one.holder(), None);
        assert!(one.try_acquire("a"));
        assert_eq!(two.holder().as_deref(), Some("a"));
        assert!(one.try_acquire("a"), "the holder gets it again");
        assert!(two.try_acquire("a"), "the holder, whichever value asks");
        assert!(!one.try_acquire("b"));
        assert!(!two.try_acquire("b"));
        two.release("b");
        assert!(!two.try_acquire("b"), "only the holder releases");
        one.release("a");
        assert_eq!(one.holder(), None);
        assert!(two.try_acquire("b"));
        assert!(!one.try_acquire("a"));
    }

    #[test]
    fn file_lease_in_a_missing_directory_is_not_acquired() {
        let dir = tempfile::tempdir().expect("temp dir");
        let lease = FileLease::new(dir.path().join("no-such-dir").join("sbr.lease"));
        assert!(!lease.try_acquire("a"));
    }
}
