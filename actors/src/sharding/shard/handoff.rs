//! Moving a shard, the half of the state machine that follows the
//! safety rule: ask the other regions for a shard this region owns and
//! activate it once every release is in (`begin`, `on_marker`), release
//! one that another region owns (`on_begin`, `release`,
//! `entities_stopped`), follow view changes (`on_view`), and the timers
//! (`poll`).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use super::{
    Action, MAX_HOPS, Shards, Wire,
    alloc::RegionId,
    buffer::{Buffer, Item, Marker},
    state::{Phase, State},
    view::View,
};

/// The longest a region waits before it asks again for a release that
/// did not come (when the handoff timeout is longer): a request to a
/// region that was not running yet is lost, and one second is short
/// next to a shard move yet costs one message per awaited region.
const RETRY_BEGIN_AFTER: Duration = Duration::from_secs(1);

impl<T> Shards<T> {
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
    pub(super) fn begin(&mut self, now: Instant, shard: u32, out: &mut Vec<Action<T>>) {
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
}
