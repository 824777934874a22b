//! The state machine's tests: single regions driven by hand, and
//! `Net`, regions joined by ordered in-memory links that can stall.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::{Duration, Instant},
};

use super::{alloc::test_region as r, *};

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
