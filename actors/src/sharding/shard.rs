//! Shard allocation and the shard state machine, sans-IO: which shard an
//! entity lives in, which region owns a shard, and what a region does
//! with each message, request and view change. Time is passed in; the
//! region actor (`region.rs`) carries out the [`Action`]s.
//!
//! # Allocation
//! - shard = FNV-1a (64-bit, fixed) of the entity id, modulo the number
//!   of shards: the same on every node and every run.
//! - owner = rendezvous (highest random weight) hashing of the shard over
//!   the owner candidates of this region's [`View`]: every hosting member
//!   that is up or suspect, each weighed by its node address and uid. A
//!   member that joins takes about `1/n` of the shards, one that goes
//!   away gives up only its own.
//!
//! # Activation, the safety rule
//! A region activates a shard (starts its entities) only after every
//! other region that must agree ([`View::must_ack`]: the hosting members
//! up or suspect, and members down or left for less than the
//! down-removal margin) has released it: each stops the shard's entities
//! if it holds them, forwards what it buffered, and answers with a
//! [`Marker`]. A region releases a shard only to the owner of its own
//! view, so a request wins only once every view agrees. Two regions can
//! therefore hold a shard at once only if one of them is cut off for
//! longer than the down-removal margin and did not stop itself (the
//! downing strategy stops the losing side).
//!
//! # Order per sender
//! A region that releases a shard sends its marker through the region it
//! last sent that shard's messages to other than the asker (it relays the
//! marker after them: a region whose view named the new owner before the
//! request came already sends to it straight, while older messages may
//! still be on their way to the previous owner), and the new owner delivers, when it activates (once every marker is
//! in), what was forwarded to it before what came straight from each
//! sender (a request asked again is answered along the path of its first
//! answer, so the repeat cannot overtake it). So the messages of one sender,
//! through one region, reach the entity in the order sent across a move,
//! as long as the views agree during the move (a message forwarded twice
//! through regions whose views disagree can arrive late; none is lost).
//!
//! ```text
//!              owner(s) = me, a message arrives
//!   Inactive ───────────────────────────────────► Awaiting{buffer, held}
//!      ▲  ▲                                          │ every must_ack marker in
//!      │  │ owner(s) ≠ me: forward the buffer        ▼
//!      │  └────────────────────────────────────── (abandon)   Active
//!      │                                                        │ owner(s) ≠ me,
//!      │  entities stopped: buffer → owner, marker               │ or a Begin from it
//!      └──────────────────────────────────── HandingOff{buffer} ◄┘
//! ```

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// How many region-to-region hops a message may take before it is parked
/// until the next view change: views that disagree can bounce a message
/// between two regions, and each hop of that loop costs a send; eight is
/// more than any settled view needs (at most two: origin, old owner, new
/// owner).
pub(crate) const MAX_HOPS: u8 = 8;

/// The longest a region waits before it asks again for a release that
/// did not come (when the handoff timeout is longer): a request to a
/// region that was not running yet is lost, and one second is short
/// next to a shard move yet costs one message per awaited region.
const RETRY_BEGIN_AFTER: Duration = Duration::from_secs(1);

/// What a marker counts for in a buffer's byte bound: markers are never
/// dropped (one per region and move), but they take room.
const MARKER_BYTES: usize = 64;

/// FNV-1a, 64-bit: fixed constants, so that every node and every run
/// agrees (std's `RandomState` is seeded per process).
fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The shard of `entity` among `shards` (at least one).
pub(crate) fn shard_of(entity: &str, shards: u32) -> u32 {
    let h = fnv1a(entity.as_bytes(), FNV_OFFSET);
    // The remainder is below `shards`, a u32.
    u32::try_from(h % u64::from(shards.max(1))).unwrap_or(0)
}

/// A region: a member's node address and the uid of its incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct RegionId {
    pub(crate) node: String,
    pub(crate) uid: u64,
}

/// The rendezvous weight of `shard` on `region`: a mix of the node's
/// hash, its uid and the shard (splitmix64's finalizer, so close inputs
/// spread).
fn weight(shard: u32, region: &RegionId) -> u64 {
    let mut h = fnv1a(region.node.as_bytes(), FNV_OFFSET);
    h = fnv1a(&region.uid.to_le_bytes(), h);
    h = fnv1a(&shard.to_le_bytes(), h);
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The owner of `shard` among `candidates`: the highest weight, ties
/// broken by the region itself (so every node picks the same).
pub(crate) fn owner(shard: u32, candidates: &[RegionId]) -> Option<&RegionId> {
    candidates
        .iter()
        .max_by(|a, b| weight(shard, a).cmp(&weight(shard, b)).then(a.cmp(b)))
}

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

/// A user message on its way to an entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Envelope<T> {
    /// The entity's id.
    pub(crate) entity: String,
    /// The message.
    pub(crate) msg: T,
    /// The node whose region took it from the sender.
    pub(crate) origin: String,
    /// Region-to-region hops before the last one: 0 when it came straight
    /// from its origin.
    pub(crate) hops: u8,
    /// Its encoded size, for buffer bounds (not sent; recomputed).
    #[serde(skip)]
    pub(crate) bytes: usize,
}

/// A region's release of a shard, on its way to the region that asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub(crate) shard: u32,
    /// The request it answers.
    pub(crate) req: u64,
    /// The node of the releasing region.
    pub(crate) by: String,
    /// The region that asked.
    pub(crate) dest: RegionId,
}

/// What a buffer holds, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item<T> {
    Msg(Envelope<T>),
    Marker(Marker),
}

/// A shard's buffered items, bounded by bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Buffer<T> {
    items: VecDeque<Item<T>>,
    bytes: usize,
}

impl<T> Default for Buffer<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<T> Buffer<T> {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn push(&mut self, item: Item<T>) {
        self.bytes += item_bytes(&item);
        self.items.push_back(item);
    }

    fn drain(&mut self) -> impl Iterator<Item = Item<T>> + '_ {
        self.bytes = 0;
        self.items.drain(..)
    }
}

fn item_bytes<T>(item: &Item<T>) -> usize {
    match item {
        Item::Msg(e) => e.bytes.max(1),
        Item::Marker(_) => MARKER_BYTES,
    }
}

/// A shard's state in one region.
#[derive(Debug)]
pub(crate) enum State<T> {
    /// Not held here; messages go to the owner (parked while none is
    /// known, or after too many hops).
    Inactive { parked: Buffer<T> },
    /// This region owns it in its view and waits for the others' markers.
    Awaiting {
        req: u64,
        /// Regions asked, and whose marker arrived.
        asked: BTreeSet<String>,
        acked: BTreeSet<String>,
        /// The region this region's own marker is relayed through, while
        /// it is still out.
        own_marker_out: Option<RegionId>,
        asked_at: Instant,
        buffer: Buffer<T>,
        /// Messages that came straight from their origin, by origin: they
        /// go behind what was forwarded (older messages of the same
        /// origin, sent while another region owned the shard).
        held: BTreeMap<String, Buffer<T>>,
    },
    /// Held here: its entities run here.
    Active,
    /// Its entities are stopping; then the buffer goes to the owner.
    HandingOff {
        since: Instant,
        /// A request to answer once released: its number and asker.
        answer: Option<(u64, RegionId)>,
        buffer: Buffer<T>,
        killed: bool,
    },
}

/// Which state, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    Inactive,
    Awaiting,
    Active,
    HandingOff,
}

impl<T> State<T> {
    pub(crate) fn phase(&self) -> Phase {
        match self {
            Self::Inactive { .. } => Phase::Inactive,
            Self::Awaiting { .. } => Phase::Awaiting,
            Self::Active => Phase::Active,
            Self::HandingOff { .. } => Phase::HandingOff,
        }
    }

    /// Messages buffered (or parked, or held) here.
    pub(crate) fn buffered(&self) -> usize {
        match self {
            Self::Inactive { parked } => parked.len(),
            Self::Awaiting { buffer, held, .. } => {
                buffer.len() + held.values().map(Buffer::len).sum::<usize>()
            }
            Self::Active => 0,
            Self::HandingOff { buffer, .. } => buffer.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Self::Inactive { parked } => parked.bytes(),
            Self::Awaiting { buffer, held, .. } => {
                buffer.bytes() + held.values().map(Buffer::bytes).sum::<usize>()
            }
            Self::Active => 0,
            Self::HandingOff { buffer, .. } => buffer.bytes(),
        }
    }
}

/// A message between regions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Wire<T> {
    /// A user message for an entity of `shard`.
    Deliver { shard: u32, env: Envelope<T> },
    /// `requester` owns `shard` in its view: release it and answer with a
    /// marker.
    Begin {
        shard: u32,
        req: u64,
        requester: RegionId,
    },
    /// A release, relayed or final.
    Marker(Marker),
}

/// Why a message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The shard's buffer was at its byte bound.
    BufferFull,
}

impl DropReason {
    /// The reason as a dead letter (its label is the metric's).
    pub(crate) fn dead_letter(self) -> crate::dead_letter::DeadLetterReason {
        match self {
            Self::BufferFull => crate::dead_letter::DeadLetterReason::BufferFull(
                "a sharding shard that moves".into(),
            ),
        }
    }
}

/// What the region does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action<T> {
    /// Hand the message to the local entity (start it if needed).
    Deliver { shard: u32, env: Envelope<T> },
    /// Send to another region.
    Send { to: RegionId, msg: Wire<T> },
    /// Stop the shard's local entities (normally: each ends what is
    /// queued); then call [`Shards::entities_stopped`].
    StopEntities { shard: u32 },
    /// Handoff is taking longer than the timeout: stop them now.
    KillEntities { shard: u32 },
    /// The shard is held here from now on.
    Activated { shard: u32 },
    /// The shard was released to `to` (its entities have stopped).
    Released { shard: u32, to: Option<RegionId> },
    /// The message could not be kept.
    Dropped {
        env: Envelope<T>,
        reason: DropReason,
    },
}

/// Every shard of one region, and the rules above.
#[derive(Debug)]
pub(crate) struct Shards<T> {
    me: RegionId,
    buffer_bytes: usize,
    handoff_timeout: Duration,
    view: View,
    states: HashMap<u32, State<T>>,
    /// The region each shard's messages last went to from here.
    last_target: HashMap<u32, RegionId>,
    /// The region each shard's messages went to before `last_target`,
    /// until a release from here has followed them: when this region's
    /// view names a new owner before that owner asks, its messages go
    /// straight to it, while older ones may still be on their way to the
    /// previous owner (behind a slow link). The release must go through
    /// that one, behind them (see [`relay_via`](Self::relay_via)).
    earlier_target: HashMap<u32, RegionId>,
    /// Requests this region cannot answer yet (its view names another
    /// owner), by shard.
    pending: HashMap<u32, (u64, RegionId)>,
    /// The last request answered per shard, and the region its marker
    /// went through: a repeated request (the asker asks again while the
    /// marker is still on its way, behind messages on a slow link) is
    /// answered along the same path, so that the repeat cannot overtake
    /// those messages.
    /// Keyed by shard: (request, asker, via).
    answered: HashMap<u32, (u64, RegionId, RegionId)>,
    next_req: u64,
}

impl<T> Shards<T> {
    pub(crate) fn new(me: RegionId, buffer_bytes: usize, handoff_timeout: Duration) -> Self {
        Self {
            me,
            buffer_bytes,
            handoff_timeout,
            view: View::default(),
            states: HashMap::new(),
            last_target: HashMap::new(),
            earlier_target: HashMap::new(),
            pending: HashMap::new(),
            answered: HashMap::new(),
            next_req: 1,
        }
    }

    /// The owner of `shard` in this region's view.
    pub(crate) fn owner(&self, shard: u32) -> Option<&RegionId> {
        owner(shard, &self.view.candidates)
    }

    pub(crate) fn view(&self) -> &View {
        &self.view
    }

    /// Each shard's state here (shards never touched are inactive).
    pub(crate) fn states(&self) -> impl Iterator<Item = (u32, &State<T>)> {
        self.states.iter().map(|(s, st)| (*s, st))
    }

    pub(crate) fn phase(&self, shard: u32) -> Phase {
        self.states
            .get(&shard)
            .map_or(Phase::Inactive, State::phase)
    }

    fn state(&mut self, shard: u32) -> &mut State<T> {
        self.states.entry(shard).or_insert(State::Inactive {
            parked: Buffer::default(),
        })
    }

    /// Buffers `item` in `buf` unless the shard's bound is reached.
    fn keep(
        bound: usize,
        used: usize,
        buf: &mut Buffer<T>,
        item: Item<T>,
        out: &mut Vec<Action<T>>,
    ) {
        match item {
            Item::Msg(env) if used + env.bytes.max(1) > bound => out.push(Action::Dropped {
                env,
                reason: DropReason::BufferFull,
            }),
            item => buf.push(item),
        }
    }

    /// A message for `shard`, from the local sender or another region.
    pub(crate) fn on_message(
        &mut self,
        now: Instant,
        shard: u32,
        env: Envelope<T>,
    ) -> Vec<Action<T>> {
        let mut out = Vec::new();
        self.route(now, shard, Item::Msg(env), &mut out);
        out
    }

    fn route(&mut self, now: Instant, shard: u32, item: Item<T>, out: &mut Vec<Action<T>>) {
        let bound = self.buffer_bytes;
        let used = self.states.get(&shard).map_or(0, State::bytes);
        let state = self.states.entry(shard).or_insert(State::Inactive {
            parked: Buffer::default(),
        });
        match state {
            State::Active => match item {
                Item::Msg(env) => out.push(Action::Deliver { shard, env }),
                Item::Marker(m) => self.relay(m, out),
            },
            State::HandingOff { buffer, .. } => Self::keep(bound, used, buffer, item, out),
            State::Awaiting { buffer, held, .. } => {
                // A message straight from its origin is newer than any of
                // that origin's messages forwarded through other regions:
                // it waits behind them until the shard activates.
                if let Item::Msg(env) = &item
                    && env.hops == 0
                {
                    let h = held.entry(env.origin.clone()).or_default();
                    Self::keep(bound, used, h, item, out);
                    return;
                }
                Self::keep(bound, used, buffer, item, out);
            }
            State::Inactive { .. } => {
                let owner = self.owner(shard).cloned();
                match (item, owner) {
                    (Item::Marker(m), _) => self.relay(m, out),
                    (Item::Msg(env), Some(o)) if o == self.me => {
                        self.begin(now, shard, out);
                        self.route(now, shard, Item::Msg(env), out);
                    }
                    (Item::Msg(env), Some(o)) if env.hops < MAX_HOPS => {
                        self.forward(shard, o, env, out);
                    }
                    (item, _) => {
                        if let State::Inactive { parked } = self.state(shard) {
                            Self::keep(bound, used, parked, item, out);
                        }
                    }
                }
            }
        }
    }

    /// Sends a marker on towards its destination.
    fn relay(&mut self, m: Marker, out: &mut Vec<Action<T>>) {
        if m.dest == self.me {
            return;
        }
        out.push(Action::Send {
            to: m.dest.clone(),
            msg: Wire::Marker(m),
        });
    }

    fn forward(
        &mut self,
        shard: u32,
        to: RegionId,
        mut env: Envelope<T>,
        out: &mut Vec<Action<T>>,
    ) {
        // Straight from its origin only on its first hop.
        if !(env.origin == self.me.node && env.hops == 0) {
            env.hops = env.hops.saturating_add(1);
        }
        if let Some(before) = self.last_target.insert(shard, to.clone())
            && before != to
        {
            self.earlier_target.insert(shard, before);
        }
        out.push(Action::Send {
            to,
            msg: Wire::Deliver { shard, env },
        });
    }

    /// The region a release of `shard` from here, going `toward` a
    /// region, is relayed through: the one this region last sent its
    /// messages to other than `toward` (the previous target when the
    /// messages already go straight to `toward`), while that one still
    /// hosts (an owner candidate) and is awaited.
    ///
    /// Going straight to `toward` because the last messages went there
    /// would let the release overtake the older ones still on the link to
    /// the previous target: that one forwards them only when they reach
    /// it, after `toward` has activated and delivered the newer ones.
    ///
    /// A region that stopped hosting (it retires, or went away) is not
    /// relied on to relay: a retiring one may finish and stop before the
    /// marker reaches it, and the marker is then lost (its asker waits
    /// until it asks again). Going straight keeps the order all the same:
    /// the retiring region had this region's messages before it learnt
    /// that this region stopped routing to it, forwards them on the same
    /// link as its own release (marker or `Retired`), and the new owner
    /// waits for that release. One that went away without retiring lost
    /// what it got; the new owner waits out the margin for it anyway.
    fn relay_via(&self, shard: u32, toward: &RegionId) -> Option<RegionId> {
        [
            self.last_target.get(&shard),
            self.earlier_target.get(&shard),
        ]
        .into_iter()
        .flatten()
        .find(|p| {
            *p != toward
                && **p != self.me
                && self.view.must_ack.contains(p)
                && self.view.candidates.contains(p)
        })
        .cloned()
    }

    /// A release of `shard` from here went to `asker`, behind what this
    /// region sent on the path it took: from now on only the path to
    /// `asker` counts. (One release follows one path: messages sent to
    /// two earlier owners, when this view named two new owners in turn
    /// before either asked, can still arrive late, as when views
    /// disagree; none is lost.)
    fn seal(&mut self, shard: u32, asker: RegionId) {
        self.earlier_target.remove(&shard);
        self.last_target.insert(shard, asker);
    }

    /// Activates `shard` without a message, if this region owns it and
    /// it is inactive (to restart remembered entities).
    pub(crate) fn claim(&mut self, now: Instant, shard: u32) -> Vec<Action<T>> {
        let mut out = Vec::new();
        if self.phase(shard) == Phase::Inactive && self.owner(shard) == Some(&self.me) {
            self.begin(now, shard, &mut out);
        }
        out
    }

    /// This region owns `shard` in its view: ask the others to release it.
    fn begin(&mut self, now: Instant, shard: u32, out: &mut Vec<Action<T>>) {
        let req = self.next_req;
        self.next_req += 1;
        let parked = match self.states.remove(&shard) {
            Some(State::Inactive { parked }) => parked,
            _ => Buffer::default(),
        };
        let me = self.me.clone();
        let own_marker_out = match self.relay_via(shard, &me) {
            Some(p) => {
                out.push(Action::Send {
                    to: p.clone(),
                    msg: Wire::Marker(Marker {
                        shard,
                        req,
                        by: self.me.node.clone(),
                        dest: self.me.clone(),
                    }),
                });
                Some(p)
            }
            None => None,
        };
        let mut asked = BTreeSet::new();
        for r in &self.view.must_ack {
            asked.insert(r.node.clone());
            out.push(Action::Send {
                to: r.clone(),
                msg: Wire::Begin {
                    shard,
                    req,
                    requester: self.me.clone(),
                },
            });
        }
        self.states.insert(
            shard,
            State::Awaiting {
                req,
                asked,
                acked: BTreeSet::new(),
                own_marker_out,
                asked_at: now,
                buffer: parked,
                held: BTreeMap::new(),
            },
        );
        self.try_activate(shard, out);
    }

    /// Activates `shard` if every marker it waits for is in.
    fn try_activate(&mut self, shard: u32, out: &mut Vec<Action<T>>) {
        let must: BTreeSet<&String> = self.view.must_ack.iter().map(|r| &r.node).collect();
        let ready = match self.states.get(&shard) {
            Some(State::Awaiting {
                acked,
                own_marker_out,
                ..
            }) => own_marker_out.is_none() && must.iter().all(|n| acked.contains(*n)),
            _ => false,
        };
        if !ready {
            return;
        }
        let Some(State::Awaiting {
            mut buffer, held, ..
        }) = self.states.insert(shard, State::Active)
        else {
            return;
        };
        self.last_target.remove(&shard);
        self.earlier_target.remove(&shard);
        out.push(Action::Activated { shard });
        let items: Vec<Item<T>> = buffer
            .drain()
            .chain(
                held.into_values()
                    .flat_map(|mut b| b.drain().collect::<Vec<_>>()),
            )
            .collect();
        for item in items {
            match item {
                Item::Msg(env) => out.push(Action::Deliver { shard, env }),
                Item::Marker(m) => self.relay(m, out),
            }
        }
    }

    /// Another region asks for `shard`.
    pub(crate) fn on_begin(
        &mut self,
        now: Instant,
        shard: u32,
        req: u64,
        requester: RegionId,
    ) -> Vec<Action<T>> {
        let mut out = Vec::new();
        if self.owner(shard) != Some(&requester) {
            // Not in this view: answered when the view agrees (the
            // requester also asks again after the handoff timeout).
            self.pending.insert(shard, (req, requester));
            return out;
        }
        self.pending.remove(&shard);
        self.release(now, shard, Some((req, requester)), &mut out);
        out
    }

    /// Releases `shard` towards the owner; answers `answer` once released.
    fn release(
        &mut self,
        now: Instant,
        shard: u32,
        answer: Option<(u64, RegionId)>,
        out: &mut Vec<Action<T>>,
    ) {
        match self.state(shard) {
            State::Active => {
                self.states.insert(
                    shard,
                    State::HandingOff {
                        since: now,
                        answer,
                        buffer: Buffer::default(),
                        killed: false,
                    },
                );
                out.push(Action::StopEntities { shard });
            }
            State::HandingOff { answer: a, .. } => {
                if answer.is_some() {
                    *a = answer;
                }
            }
            State::Awaiting { .. } | State::Inactive { .. } => {
                let items = self.take_buffered(shard);
                self.states.insert(
                    shard,
                    State::Inactive {
                        parked: Buffer::default(),
                    },
                );
                self.flush(now, shard, items, answer, out);
            }
        }
    }

    fn take_buffered(&mut self, shard: u32) -> Vec<Item<T>> {
        match self.states.get_mut(&shard) {
            Some(State::Inactive { parked }) => parked.drain().collect(),
            Some(State::Awaiting { buffer, held, .. }) => {
                let mut items: Vec<_> = buffer.drain().collect();
                for b in held.values_mut() {
                    items.extend(b.drain());
                }
                items
            }
            Some(State::HandingOff { buffer, .. }) => buffer.drain().collect(),
            _ => Vec::new(),
        }
    }

    /// Re-routes released items (in order), then answers the request.
    fn flush(
        &mut self,
        now: Instant,
        shard: u32,
        items: Vec<Item<T>>,
        answer: Option<(u64, RegionId)>,
        out: &mut Vec<Action<T>>,
    ) {
        for item in items {
            let item = match item {
                // Parked after too many hops: one more round.
                Item::Msg(mut env) if env.hops >= MAX_HOPS => {
                    env.hops = 1;
                    Item::Msg(env)
                }
                item => item,
            };
            self.route(now, shard, item, out);
        }
        if let Some((req, asker)) = answer {
            let marker = Marker {
                shard,
                req,
                by: self.me.node.clone(),
                dest: asker.clone(),
            };
            // A repeat goes the first answer's way only while that region
            // still hosts: a retiring one may stop before it relays (see
            // `relay_via`), and it forwarded what it had before its own
            // release, which the asker waits for, so straight keeps the order.
            let via = match (self.answered.get(&shard), self.relay_via(shard, &asker)) {
                (Some((r, a, p)), _)
                    if *r == req
                        && *a == asker
                        && self.view.must_ack.contains(p)
                        && self.view.candidates.contains(p) =>
                {
                    p.clone()
                }
                (_, Some(p)) => p,
                _ => asker.clone(),
            };
            self.answered
                .insert(shard, (req, asker.clone(), via.clone()));
            self.seal(shard, asker);
            out.push(Action::Send {
                to: via,
                msg: Wire::Marker(marker),
            });
        }
    }

    /// A marker arrived (for this region, or to relay).
    pub(crate) fn on_marker(&mut self, now: Instant, m: Marker) -> Vec<Action<T>> {
        let mut out = Vec::new();
        if m.dest != self.me {
            // Relayed in order with what this region buffers for the shard.
            self.route(now, m.shard, Item::Marker(m), &mut out);
            return out;
        }
        let shard = m.shard;
        if let Some(State::Awaiting {
            req,
            acked,
            own_marker_out,
            ..
        }) = self.states.get_mut(&shard)
            && *req == m.req
        {
            if m.by == self.me.node {
                *own_marker_out = None;
            } else {
                acked.insert(m.by.clone());
            }
            self.try_activate(shard, &mut out);
        }
        out
    }

    /// The shard's local entities have all stopped (after
    /// [`Action::StopEntities`]).
    pub(crate) fn entities_stopped(&mut self, now: Instant, shard: u32) -> Vec<Action<T>> {
        let mut out = Vec::new();
        if let Some(State::HandingOff { answer, .. }) = self.states.get(&shard) {
            let answer = answer.clone();
            let items = self.take_buffered(shard);
            let to = answer
                .as_ref()
                .map(|(_, r)| r.clone())
                .or_else(|| self.owner(shard).cloned());
            self.states.insert(
                shard,
                State::Inactive {
                    parked: Buffer::default(),
                },
            );
            out.push(Action::Released {
                shard,
                to: to.clone(),
            });
            // Forward the buffer to the asker when there is one (its view
            // and this one agreed), else to this view's owner.
            if let Some(to) = to.filter(|t| *t != self.me) {
                for item in items {
                    match item {
                        Item::Msg(env) => self.forward(shard, to.clone(), env, &mut out),
                        Item::Marker(m) => self.relay(m, &mut out),
                    }
                }
            } else {
                self.flush(now, shard, items, None, &mut out);
            }
            if let Some((req, asker)) = answer {
                self.seal(shard, asker.clone());
                out.push(Action::Send {
                    to: asker.clone(),
                    msg: Wire::Marker(Marker {
                        shard,
                        req,
                        by: self.me.node.clone(),
                        dest: asker,
                    }),
                });
            }
        }
        out
    }

    /// The view changed: hand off what is no longer ours, give up
    /// requests, answer requests that now agree, re-route parked items.
    pub(crate) fn on_view(&mut self, now: Instant, view: View) -> Vec<Action<T>> {
        let mut out = Vec::new();
        self.view = view;
        let mut shards: Vec<u32> = self.states.keys().copied().collect();
        shards.extend(self.pending.keys().copied());
        shards.sort_unstable();
        shards.dedup();
        for shard in shards {
            let owner = self.owner(shard).cloned();
            let mine = owner.as_ref() == Some(&self.me);
            if let Some((req, asker)) = self.pending.get(&shard).cloned()
                && owner.as_ref() == Some(&asker)
            {
                self.pending.remove(&shard);
                self.release(now, shard, Some((req, asker)), &mut out);
                continue;
            }
            match self.phase(shard) {
                Phase::Active if !mine => self.release(now, shard, None, &mut out),
                Phase::Awaiting if !mine => self.release(now, shard, None, &mut out),
                Phase::Awaiting => self.refresh_request(now, shard, &mut out),
                Phase::Inactive if owner.is_some() => {
                    let items = self.take_buffered(shard);
                    self.flush(now, shard, items, None, &mut out);
                }
                _ => {}
            }
        }
        out
    }

    /// Asks regions new to the view, releases held messages of regions
    /// that left it, and activates if nothing else is awaited.
    fn refresh_request(&mut self, now: Instant, shard: u32, out: &mut Vec<Action<T>>) {
        let must = self.view.must_ack.clone();
        if let Some(State::Awaiting {
            req,
            asked,
            own_marker_out,
            ..
        }) = self.states.get_mut(&shard)
        {
            // The relay of this region's own marker left the view: what
            // it got is lost with it; nothing more to wait for.
            if own_marker_out.as_ref().is_some_and(|p| !must.contains(p)) {
                *own_marker_out = None;
            }
            for r in &must {
                if asked.insert(r.node.clone()) {
                    out.push(Action::Send {
                        to: r.clone(),
                        msg: Wire::Begin {
                            shard,
                            req: *req,
                            requester: self.me.clone(),
                        },
                    });
                }
            }
        }
        let _ = now;
        self.try_activate(shard, out);
    }

    /// Timers: asks again for markers still missing after the handoff
    /// timeout, and stops entities that take longer than it to stop.
    pub(crate) fn poll(&mut self, now: Instant) -> Vec<Action<T>> {
        let mut out = Vec::new();
        let timeout = self.handoff_timeout;
        let retry = timeout.min(RETRY_BEGIN_AFTER);
        let must = self.view.must_ack.clone();
        for (shard, state) in &mut self.states {
            match state {
                State::Awaiting {
                    req,
                    acked,
                    asked_at,
                    ..
                } if now.saturating_duration_since(*asked_at) >= retry => {
                    *asked_at = now;
                    for r in must.iter().filter(|r| !acked.contains(&r.node)) {
                        out.push(Action::Send {
                            to: r.clone(),
                            msg: Wire::Begin {
                                shard: *shard,
                                req: *req,
                                requester: self.me.clone(),
                            },
                        });
                    }
                }
                State::HandingOff { since, killed, .. }
                    if !*killed && now.saturating_duration_since(*since) >= timeout =>
                {
                    *killed = true;
                    out.push(Action::KillEntities { shard: *shard });
                }
                _ => {}
            }
        }
        out
    }

    /// Hands every held shard off (this region stops hosting): the same
    /// as a view without it, which the caller passes.
    pub(crate) fn held(&self) -> usize {
        self.states
            .values()
            .filter(|s| matches!(s, State::Active | State::HandingOff { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(node: &str) -> RegionId {
        RegionId {
            node: node.into(),
            uid: 7,
        }
    }

    fn env(entity: &str, origin: &str, n: u32) -> Envelope<u32> {
        Envelope {
            entity: entity.into(),
            msg: n,
            origin: origin.into(),
            hops: 0,
            bytes: 10,
        }
    }

    fn view(candidates: &[&str], must: &[&str]) -> View {
        View {
            candidates: candidates.iter().map(|n| r(n)).collect(),
            must_ack: must.iter().map(|n| r(n)).collect(),
        }
    }

    /// A shard that `a` owns when `a`, `b` and `c` are candidates.
    fn shard_owned_by(node: &str, all: &[&str]) -> u32 {
        let c: Vec<RegionId> = all.iter().map(|n| r(n)).collect();
        (0..1000)
            .find(|s| owner(*s, &c).is_some_and(|o| o.node == node))
            .expect("some shard")
    }

    #[test]
    fn shards_are_stable_and_spread() {
        // Fixed, so every node and run agrees.
        assert_eq!(shard_of("cart-42", 100), shard_of("cart-42", 100));
        assert_eq!(shard_of("", 100), (FNV_OFFSET % 100) as u32);
        let mut counts = [0u32; 10];
        for i in 0..10_000 {
            counts[shard_of(&format!("e{i}"), 10) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
        assert_eq!(shard_of("x", 0), 0);
    }

    #[test]
    fn rendezvous_moves_only_the_shards_of_the_member_that_changed() {
        let three = [r("a"), r("b"), r("c")];
        let four = [r("a"), r("b"), r("c"), r("d")];
        let mut moved = 0;
        for s in 0..1000 {
            let before = owner(s, &three).cloned();
            let after = owner(s, &four).cloned();
            if before != after {
                // A joiner only takes shards; it never moves them between others.
                assert_eq!(after, Some(r("d")));
                moved += 1;
            }
            // The order of the candidates does not matter.
            let mut rev = four.clone();
            rev.reverse();
            assert_eq!(owner(s, &rev), owner(s, &four));
        }
        assert!((150..350).contains(&moved), "{moved}");
        // A new incarnation weighs differently.
        let restarted = RegionId {
            node: "a".into(),
            uid: 8,
        };
        assert!((0..100).any(|s| weight(s, &restarted) != weight(s, &r("a"))));
        assert_eq!(owner(1, &[]), None);
    }

    #[test]
    fn a_lone_owner_activates_at_once_and_delivers_in_order() {
        let now = Instant::now();
        let mut s = Shards::new(r("a"), 1000, Duration::from_secs(1));
        s.on_view(now, view(&["a"], &[]));
        let out = s.on_message(now, 3, env("e", "a", 1));
        assert_eq!(
            out,
            vec![
                Action::Activated { shard: 3 },
                Action::Deliver {
                    shard: 3,
                    env: env("e", "a", 1)
                }
            ]
        );
        assert_eq!(s.phase(3), Phase::Active);
    }

    #[test]
    fn activation_waits_for_every_other_region_and_buffers_meanwhile() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut s = Shards::new(r("a"), 1000, Duration::from_secs(1));
        s.on_view(now, view(&["a", "b"], &["b"]));
        let out = s.on_message(now, shard, env("e", "a", 1));
        assert_eq!(
            out,
            vec![Action::Send {
                to: r("b"),
                msg: Wire::Begin {
                    shard,
                    req: 1,
                    requester: r("a")
                }
            }]
        );
        assert_eq!(s.phase(shard), Phase::Awaiting);
        // A stale marker does nothing.
        let stale = Marker {
            shard,
            req: 9,
            by: "b".into(),
            dest: r("a"),
        };
        assert!(s.on_marker(now, stale).is_empty());
        let out = s.on_marker(
            now,
            Marker {
                shard,
                req: 1,
                by: "b".into(),
                dest: r("a"),
            },
        );
        assert_eq!(
            out,
            vec![
                Action::Activated { shard },
                Action::Deliver {
                    shard,
                    env: env("e", "a", 1)
                }
            ]
        );
    }

    #[test]
    fn a_holder_stops_its_entities_then_forwards_its_buffer_then_answers() {
        let now = Instant::now();
        // `b` holds a shard that `a` owns once `a` is in the view.
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut b = Shards::new(r("b"), 1000, Duration::from_secs(1));
        b.on_view(now, view(&["b"], &[]));
        b.on_message(now, shard, env("e", "b", 1));
        assert_eq!(b.phase(shard), Phase::Active);
        // `a` asks before `b`'s view has it: not answered yet.
        assert!(b.on_begin(now, shard, 5, r("a")).is_empty());
        let out = b.on_view(now, view(&["a", "b"], &["a"]));
        assert_eq!(out, vec![Action::StopEntities { shard }]);
        // Messages meanwhile are buffered, in order.
        assert!(b.on_message(now, shard, env("e", "b", 2)).is_empty());
        assert!(b.on_message(now, shard, env("e", "c", 3)).is_empty());
        assert_eq!(b.phase(shard), Phase::HandingOff);
        let out = b.entities_stopped(now, shard);
        let mut fwd3 = env("e", "c", 3);
        fwd3.hops = 1;
        assert_eq!(
            out,
            vec![
                Action::Released {
                    shard,
                    to: Some(r("a"))
                },
                Action::Send {
                    to: r("a"),
                    msg: Wire::Deliver {
                        shard,
                        env: env("e", "b", 2)
                    }
                },
                Action::Send {
                    to: r("a"),
                    msg: Wire::Deliver { shard, env: fwd3 }
                },
                Action::Send {
                    to: r("a"),
                    msg: Wire::Marker(Marker {
                        shard,
                        req: 5,
                        by: "b".into(),
                        dest: r("a")
                    })
                },
            ]
        );
        // From now on `b` forwards to `a`.
        assert_eq!(
            b.on_message(now, shard, env("e", "b", 4)),
            vec![Action::Send {
                to: r("a"),
                msg: Wire::Deliver {
                    shard,
                    env: env("e", "b", 4)
                }
            }]
        );
    }

    /// `c`, having sent a message for a shard to `b` while `b` owned it,
    /// after `a` joined and became its owner: the shard and `c`.
    fn c_sent_to_b_then_a_joined(now: Instant) -> (u32, Shards<u32>) {
        // A shard `b` owns among `b` and `c`, and `a` once it joins.
        let (bc, abc) = ([r("b"), r("c")], [r("a"), r("b"), r("c")]);
        let shard = (0..1000)
            .find(|s| owner(*s, &bc) == Some(&r("b")) && owner(*s, &abc) == Some(&r("a")))
            .expect("some shard");
        // `c` sends to `b` while `b` is the owner in its view.
        let mut c = Shards::new(r("c"), 1000, Duration::from_secs(1));
        c.on_view(now, view(&["b", "c"], &["b"]));
        c.on_message(now, shard, env("e", "c", 1));
        c.on_view(now, view(&["a", "b", "c"], &["a", "b"]));
        (shard, c)
    }

    #[test]
    fn a_region_that_sent_elsewhere_relays_its_marker_behind_its_messages() {
        let now = Instant::now();
        let (shard, mut c) = c_sent_to_b_then_a_joined(now);
        let out = c.on_begin(now, shard, 2, r("a"));
        // The marker goes through `b`, which relays it after `c`'s message.
        assert_eq!(
            out,
            vec![Action::Send {
                to: r("b"),
                msg: Wire::Marker(Marker {
                    shard,
                    req: 2,
                    by: "c".into(),
                    dest: r("a")
                })
            }]
        );
    }

    #[test]
    fn a_repeated_request_is_answered_along_the_first_answers_path() {
        let now = Instant::now();
        let (shard, mut c) = c_sent_to_b_then_a_joined(now);
        let through_b = |req| {
            vec![Action::Send {
                to: r("b"),
                msg: Wire::Marker(Marker {
                    shard,
                    req,
                    by: "c".into(),
                    dest: r("a"),
                }),
            }]
        };
        assert_eq!(c.on_begin(now, shard, 2, r("a")), through_b(2));
        // `a` asks again (its retry) while the first marker is still
        // behind `c`'s message on the way through `b`: the answer takes
        // the same path, never the shortcut that would overtake it.
        assert_eq!(c.on_begin(now, shard, 2, r("a")), through_b(2));
        // A new request (a new move) goes straight: nothing of `c`'s is
        // on the way any more but what went to `a`.
        assert_eq!(
            c.on_begin(now, shard, 3, r("a")),
            vec![Action::Send {
                to: r("a"),
                msg: Wire::Marker(Marker {
                    shard,
                    req: 3,
                    by: "c".into(),
                    dest: r("a"),
                }),
            }]
        );
    }

    #[test]
    fn a_release_goes_behind_what_was_sent_to_the_previous_owner() {
        let now = Instant::now();
        let (shard, mut c) = c_sent_to_b_then_a_joined(now);
        // `c`'s view names `a` before `a` asks: its next message goes
        // straight to `a`, while the one it sent `b` may still be on the
        // way there.
        let mut two = env("e", "c", 2);
        assert_eq!(
            c.on_message(now, shard, two.clone()),
            vec![Action::Send {
                to: r("a"),
                msg: Wire::Deliver { shard, env: two }
            }]
        );
        let marker = |req| {
            Wire::Marker(Marker {
                shard,
                req,
                by: "c".into(),
                dest: r("a"),
            })
        };
        // The release follows message 1 through `b`, not the shortcut.
        assert_eq!(
            c.on_begin(now, shard, 2, r("a")),
            vec![Action::Send {
                to: r("b"),
                msg: marker(2)
            }]
        );
        // That release covered the path through `b`: a later move goes
        // straight.
        two = env("e", "c", 3);
        c.on_message(now, shard, two);
        assert_eq!(
            c.on_begin(now, shard, 3, r("a")),
            vec![Action::Send {
                to: r("a"),
                msg: marker(3)
            }]
        );
    }

    /// Regions joined by ordered in-memory links, one per direction. A
    /// stalled link keeps what is sent on it until it heals; entities stop
    /// at once. `delivered` is what the entities got, in order.
    struct Net {
        now: Instant,
        regions: BTreeMap<String, Shards<u32>>,
        links: BTreeMap<(String, String), VecDeque<Wire<u32>>>,
        stalled: BTreeSet<(String, String)>,
        delivered: Vec<u32>,
    }

    impl Net {
        fn new(nodes: &[&str]) -> Self {
            let regions = nodes
                .iter()
                .map(|n| {
                    let shards = Shards::new(r(n), 1 << 20, Duration::from_secs(1));
                    ((*n).to_owned(), shards)
                })
                .collect();
            Self {
                now: Instant::now(),
                regions,
                links: BTreeMap::new(),
                stalled: BTreeSet::new(),
                delivered: Vec::new(),
            }
        }

        fn region(&mut self, node: &str) -> &mut Shards<u32> {
            self.regions.get_mut(node).expect("a region of the net")
        }

        /// Carries out what the region of `at` decided.
        fn apply(&mut self, at: &str, acts: Vec<Action<u32>>) {
            for act in acts {
                match act {
                    Action::Deliver { env, .. } => self.delivered.push(env.msg),
                    Action::Send { to, msg } => self
                        .links
                        .entry((at.to_owned(), to.node))
                        .or_default()
                        .push_back(msg),
                    Action::StopEntities { shard } | Action::KillEntities { shard } => {
                        let now = self.now;
                        let acts = self.region(at).entities_stopped(now, shard);
                        self.apply(at, acts);
                    }
                    Action::Activated { .. } | Action::Released { .. } => {}
                    Action::Dropped { env, .. } => panic!("dropped {env:?}"),
                }
            }
        }

        fn view(&mut self, at: &str, v: View) {
            let now = self.now;
            let acts = self.region(at).on_view(now, v);
            self.apply(at, acts);
        }

        /// A message for `shard` from a sender on the node of `at`.
        fn send(&mut self, at: &str, shard: u32, n: u32) {
            let now = self.now;
            let acts = self.region(at).on_message(now, shard, env("e", at, n));
            self.apply(at, acts);
        }

        /// Hands over what the flowing links carry until they are empty.
        fn settle(&mut self) {
            loop {
                let Some(link) = self
                    .links
                    .iter()
                    .find(|(l, q)| !q.is_empty() && !self.stalled.contains(*l))
                    .map(|(l, _)| l.clone())
                else {
                    return;
                };
                let msg = self
                    .links
                    .get_mut(&link)
                    .and_then(VecDeque::pop_front)
                    .expect("the link carries a message");
                let (now, at) = (self.now, link.1);
                let acts = match msg {
                    Wire::Deliver { shard, env } => self.region(&at).on_message(now, shard, env),
                    Wire::Begin {
                        shard,
                        req,
                        requester,
                    } => self.region(&at).on_begin(now, shard, req, requester),
                    Wire::Marker(m) => self.region(&at).on_marker(now, m),
                };
                self.apply(&at, acts);
            }
        }
    }

    #[test]
    fn messages_stalled_towards_the_old_owner_arrive_before_newer_ones_sent_straight() {
        // `b` hosts and `c` only routes; then `a` joins and owns the shard.
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut net = Net::new(&["a", "b", "c"]);
        net.view("b", view(&["b"], &["c"]));
        net.view("c", view(&["b"], &["b"]));
        net.send("c", shard, 1);
        net.settle();
        assert_eq!(net.delivered, [1]);
        // The link from `c` to `b` stalls with 2 and 3 on it.
        net.stalled.insert(("c".into(), "b".into()));
        net.send("c", shard, 2);
        net.send("c", shard, 3);
        // `c`'s view names `a` first: 4 goes straight to `a` (and makes it
        // ask for the shard) while 2 and 3 still wait for `b`.
        let joined = |must: &[&str]| view(&["a", "b"], must);
        net.view("c", joined(&["a", "b"]));
        net.send("c", shard, 4);
        net.view("a", joined(&["b", "c"]));
        net.view("b", joined(&["a", "c"]));
        net.settle();
        assert_eq!(net.delivered, [1], "`a` waits for `c`'s release");
        net.stalled.clear();
        net.settle();
        assert_eq!(net.delivered, [1, 2, 3, 4]);
    }

    #[test]
    fn a_marker_goes_straight_when_the_region_it_would_pass_through_retires() {
        let now = Instant::now();
        // A shard `l` owns among `a`, `b` and `l`, and `a` without `l`.
        let (abl, ab) = ([r("a"), r("b"), r("l")], [r("a"), r("b")]);
        let shard = (0..1000)
            .find(|s| owner(*s, &abl) == Some(&r("l")) && owner(*s, &ab) == Some(&r("a")))
            .expect("some shard");
        // `b` sends to `l` while `l` owns the shard; then `l` retires: no
        // longer a candidate, still awaited until it says it retired.
        let mut b = Shards::new(r("b"), 1000, Duration::from_secs(1));
        b.on_view(now, view(&["a", "b", "l"], &["a", "l"]));
        b.on_message(now, shard, env("e", "b", 1));
        b.on_view(now, view(&["a", "b"], &["a", "l"]));
        // `l` may stop before a marker through it arrives: `b` answers
        // `a` straight (`l` forwarded `b`'s message before its own
        // release, which `a` waits for).
        let out = b.on_begin(now, shard, 2, r("a"));
        assert_eq!(
            out,
            vec![Action::Send {
                to: r("a"),
                msg: Wire::Marker(Marker {
                    shard,
                    req: 2,
                    by: "b".into(),
                    dest: r("a")
                })
            }]
        );
        // So does `a` with its own marker, and it waits for `l` and `b`.
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        a.on_view(now, view(&["a", "b", "l"], &["b", "l"]));
        a.on_message(now, shard, env("e", "a", 1));
        a.on_view(now, view(&["a", "b"], &["b", "l"]));
        let out = a.on_message(now, shard, env("e", "a", 2));
        assert!(
            out.iter().all(|act| !matches!(
                act,
                Action::Send {
                    msg: Wire::Marker(_),
                    ..
                }
            )),
            "{out:?}"
        );
        let marker = |by: &str| Marker {
            shard,
            req: 1,
            by: by.into(),
            dest: r("a"),
        };
        a.on_marker(now, marker("b"));
        assert_eq!(a.phase(shard), Phase::Awaiting);
        let out = a.on_marker(now, marker("l"));
        assert_eq!(a.phase(shard), Phase::Active);
        assert!(out.contains(&Action::Activated { shard }), "{out:?}");
    }

    #[test]
    fn direct_messages_wait_behind_the_senders_marker() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "c"]);
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        a.on_view(now, view(&["a", "c"], &["c"]));
        // Forwarded (older) message from `c` through someone: buffered.
        let mut old = env("e", "c", 1);
        old.hops = 1;
        a.on_message(now, shard, old.clone());
        // A direct (newer) one from `c`, before its marker: held.
        assert!(a.on_message(now, shard, env("e", "c", 2)).is_empty());
        let out = a.on_marker(
            now,
            Marker {
                shard,
                req: 1,
                by: "c".into(),
                dest: r("a"),
            },
        );
        assert_eq!(
            out,
            vec![
                Action::Activated { shard },
                Action::Deliver { shard, env: old },
                Action::Deliver {
                    shard,
                    env: env("e", "c", 2)
                }
            ]
        );
    }

    #[test]
    fn forwarded_messages_come_before_direct_ones_even_after_the_senders_marker() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "b", "c"]);
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        a.on_view(now, view(&["a", "b", "c"], &["b", "c"]));
        // `c`'s newer message comes straight, and its marker too; its
        // older one was bounced through `b` and comes last, before `b`'s
        // marker.
        a.on_message(now, shard, env("e", "c", 2));
        let marker = |by: &str| Marker {
            shard,
            req: 1,
            by: by.into(),
            dest: r("a"),
        };
        assert!(a.on_marker(now, marker("c")).is_empty());
        let mut old = env("e", "c", 1);
        old.hops = 2;
        a.on_message(now, shard, old.clone());
        let out = a.on_marker(now, marker("b"));
        assert_eq!(
            out,
            vec![
                Action::Activated { shard },
                Action::Deliver { shard, env: old },
                Action::Deliver {
                    shard,
                    env: env("e", "c", 2)
                }
            ]
        );
    }

    #[test]
    fn the_requesters_own_earlier_messages_come_first() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        // `a` first sends to `b`.
        a.on_view(now, view(&["b"], &["b"]));
        a.on_message(now, shard, env("e", "a", 1));
        // Then `a` owns the shard: its own marker goes through `b`.
        a.on_view(now, view(&["a", "b"], &["b"]));
        let out = a.on_message(now, shard, env("e", "a", 2));
        assert!(out.contains(&Action::Send {
            to: r("b"),
            msg: Wire::Marker(Marker {
                shard,
                req: 1,
                by: "a".into(),
                dest: r("a")
            })
        }));
        // `b` releases: forwards message 1, then its marker; then `a`'s own
        // marker comes back through `b`.
        let mut one = env("e", "a", 1);
        one.hops = 1;
        a.on_message(now, shard, one.clone());
        assert!(
            a.on_marker(
                now,
                Marker {
                    shard,
                    req: 1,
                    by: "b".into(),
                    dest: r("a")
                }
            )
            .is_empty(),
            "still waits for its own marker"
        );
        let out = a.on_marker(
            now,
            Marker {
                shard,
                req: 1,
                by: "a".into(),
                dest: r("a"),
            },
        );
        assert_eq!(
            out,
            vec![
                Action::Activated { shard },
                Action::Deliver { shard, env: one },
                Action::Deliver {
                    shard,
                    env: env("e", "a", 2)
                }
            ]
        );
    }

    #[test]
    fn the_buffer_is_bounded_by_bytes_and_drops_past_it() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut a = Shards::new(r("a"), 25, Duration::from_secs(1));
        a.on_view(now, view(&["a", "b"], &["b"]));
        a.on_message(now, shard, env("e", "x", 1));
        assert!(a.on_message(now, shard, env("e", "x", 2)).is_empty());
        assert_eq!(
            a.on_message(now, shard, env("e", "x", 3)),
            vec![Action::Dropped {
                env: env("e", "x", 3),
                reason: DropReason::BufferFull
            }]
        );
        assert_eq!(a.states.get(&shard).map(State::buffered), Some(2));
    }

    #[test]
    fn a_view_that_names_another_owner_gives_up_the_request_and_forwards() {
        let now = Instant::now();
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        a.on_view(now, view(&["a", "b"], &["b"]));
        a.on_message(now, shard, env("e", "a", 1));
        let out = a.on_view(now, view(&["b"], &["b"]));
        assert_eq!(
            out,
            vec![Action::Send {
                to: r("b"),
                msg: Wire::Deliver {
                    shard,
                    env: env("e", "a", 1)
                }
            }]
        );
        assert_eq!(a.phase(shard), Phase::Inactive);
    }

    #[test]
    fn missing_markers_are_asked_again_and_slow_stops_are_forced() {
        let t0 = Instant::now();
        let shard = shard_owned_by("a", &["a", "b"]);
        let mut a = Shards::new(r("a"), 1000, Duration::from_secs(1));
        a.on_view(t0, view(&["a", "b"], &["b"]));
        a.on_message(t0, shard, env("e", "a", 1));
        assert!(a.poll(t0 + Duration::from_millis(999)).is_empty());
        assert_eq!(
            a.poll(t0 + Duration::from_secs(1)),
            vec![Action::Send {
                to: r("b"),
                msg: Wire::Begin {
                    shard,
                    req: 1,
                    requester: r("a")
                }
            }]
        );
        // A region that leaves the view (down past the margin) is no
        // longer awaited.
        let out = a.on_view(t0, view(&["a"], &[]));
        assert_eq!(out[0], Action::Activated { shard });
        // Handing off for longer than the timeout forces the stop.
        let mut b = Shards::new(r("b"), 1000, Duration::from_secs(1));
        b.on_view(t0, view(&["b"], &[]));
        b.on_message(t0, 1, env("e", "b", 1));
        assert_eq!(
            b.on_view(t0, view(&[], &[])),
            vec![Action::StopEntities { shard: 1 }]
        );
        assert!(b.poll(t0).is_empty());
        assert_eq!(
            b.poll(t0 + Duration::from_secs(1)),
            vec![Action::KillEntities { shard: 1 }]
        );
        assert!(b.poll(t0 + Duration::from_secs(5)).is_empty(), "once");
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
