//! Shard allocation and the shard state machine, sans-IO: which shard an
//! entity lives in, which region owns a shard, and what a region does
//! with each message, request and view change. Time is passed in; the
//! region actor (`sharding::region`) carries out the [`Action`]s.
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
//!
//! # Parts
//! - `alloc`: [`shard_of`] and the rendezvous [`owner`] of a shard.
//! - `view`: the [`View`] of the other regions, and the [`Tracker`] that
//!   builds it with the down-removal margin.
//! - `buffer`: [`Envelope`], [`Marker`] and the byte-counted [`Buffer`].
//! - `state`: a shard's [`State`] and [`Phase`].
//! - This module: the state machine, [`Shards`], what it takes
//!   ([`Wire`]) and what it asks the region to do ([`Action`]); its
//!   methods are split in `route` (where a message goes) and `handoff`
//!   (moving a shard: requests, releases, view changes, timers).

mod alloc;
mod buffer;
mod handoff;
mod route;
mod state;
mod view;

use std::{collections::HashMap, time::Duration};

use serde::{Deserialize, Serialize};

use alloc::owner;
pub(crate) use alloc::{RegionId, shard_of};
pub(crate) use buffer::Envelope;
use buffer::{Buffer, Marker};
pub(crate) use state::{Phase, State};
use view::View;
pub(crate) use view::{Liveness, Tracker};

/// How many region-to-region hops a message may take before it is parked
/// until the next view change: views that disagree can bounce a message
/// between two regions, and each hop of that loop costs a send; eight is
/// more than any settled view needs (at most two: origin, old owner, new
/// owner).
pub(crate) const MAX_HOPS: u8 = 8;

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

    /// How many shards this region holds: active, or handing off (their
    /// entities may still run). The region reports it as its shard count,
    /// and a retiring region waits for it to reach zero.
    pub(crate) fn held(&self) -> usize {
        self.states
            .values()
            .filter(|s| matches!(s, State::Active | State::HandingOff { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests;
