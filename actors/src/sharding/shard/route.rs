//! Routing, the half of the state machine that places one message or
//! marker: deliver it (active here), buffer it (moving), forward it to
//! the owner (inactive here), or park it (no owner, or too many hops);
//! and the path a release from here takes so that it goes behind this
//! region's earlier messages (`relay_via`).

use std::time::Instant;

use super::{
    Action, DropReason, MAX_HOPS, Shards, Wire,
    alloc::RegionId,
    buffer::{Buffer, Envelope, Item, Marker},
    state::State,
};

impl<T> Shards<T> {
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

    pub(super) fn route(
        &mut self,
        now: Instant,
        shard: u32,
        item: Item<T>,
        out: &mut Vec<Action<T>>,
    ) {
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
    pub(super) fn relay(&mut self, m: Marker, out: &mut Vec<Action<T>>) {
        if m.dest == self.me {
            return;
        }
        out.push(Action::Send {
            to: m.dest.clone(),
            msg: Wire::Marker(m),
        });
    }

    pub(super) fn forward(
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
    pub(super) fn relay_via(&self, shard: u32, toward: &RegionId) -> Option<RegionId> {
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
    pub(super) fn seal(&mut self, shard: u32, asker: RegionId) {
        self.earlier_target.remove(&shard);
        self.last_target.insert(shard, asker);
    }
}
