//! Telling a suspected member that it is suspected, so that it refutes.
//!
//! SWIM clears a false suspicion only through the suspected member: it
//! learns of the suspicion from gossip, bumps its incarnation, and every
//! packet it sends from then on carries the new incarnation, which beats
//! the suspicion everywhere. foca gossips a suspicion a bounded number of
//! times ([`foca::Config::max_transmissions`]), to whichever members it
//! picks. During a partition those transmissions are spent on members
//! that cannot reach the suspected one (or on packets the partition
//! drops), and afterwards nothing carries the suspicion to it: its packets
//! keep their old incarnation, an `Alive` at the suspected incarnation
//! does not beat `Suspect`, and the suspicion stands until the suspect
//! timeout declares a live member down. foca's other mechanisms do not
//! reach it either: an announce's feed lists every member but the one
//! asking, periodic gossip only repeats updates that still have
//! transmissions left, and re-applying the same suspicion
//! ([`foca::Foca::apply_many`]) is not a change, so it is not gossiped.
//!
//! The remedy: a member that receives a SWIM packet from a member it
//! holds suspect, at an incarnation that does not refute the suspicion,
//! answers with a [`KIND_SUSPECTED`](super::wire::KIND_SUSPECTED) notice
//! naming the suspected incarnation. The addressee hands it to foca as a
//! suspicion of itself, which bumps its incarnation and gossips the
//! refutation. Every suspected member that is alive is probed (suspects
//! stay in the probe rotation) and answers, so a suspicion that outlived
//! its gossip is refuted within one probe round of the heal. At most one
//! notice per packet from a suspect, and only until it refutes.
//!
//! ```text
//!  A (holds B suspect @ i)            B (incarnation i, unaware)
//!     | ---- Ping ----------------------> |
//!     | <--- Ack (src_incarnation i) ---- |   i does not beat Suspect @ i
//!     | ---- Suspected(B @ i) ----------> |   foca: suspicion of me: i+1
//!     | <--- any packet (i+1) ----------- |   Alive @ i+1 beats Suspect @ i
//! ```
//!
//! Pure: no IO, no clock (foca's runtime collects what to send).

use std::{collections::HashMap, net::SocketAddr};

use bytes::BytesMut;
use foca::{AccumulatingRuntime, Foca, Incarnation, Member, State};
use rand::rngs::SmallRng;

use super::{
    groups,
    wire::{self, Codec, Id, KIND_SUSPECTED, KIND_SWIM, WireError},
};

/// foca as the cluster module runs it.
pub(crate) type Swim = Foca<Id, Codec, SmallRng, groups::Handler>;

/// The members this node holds suspect, by membership address, and at
/// which incarnation; rebuilt from foca's table after every change.
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    by_addr: HashMap<SocketAddr, (Id, Incarnation)>,
}

impl Suspects {
    /// Replaces the set with the suspects among `members`.
    pub(crate) fn resync<'a>(&mut self, members: impl Iterator<Item = &'a Member<Id>>) {
        self.by_addr.clear();
        self.by_addr.extend(
            members
                .filter(|m| m.state() == State::Suspect)
                .map(|m| (m.id().udp, (m.id().clone(), m.incarnation()))),
        );
    }

    /// The notice that the sender of `header` needs: it is suspect here,
    /// at an incarnation its packet does not beat.
    fn unaware(&self, header: &foca::Header<Id>) -> Option<Member<Id>> {
        let (id, incarnation) = self.by_addr.get(&header.src.udp)?;
        (*id == header.src && header.src_incarnation <= *incarnation)
            .then(|| Member::new(id.clone(), *incarnation, State::Suspect))
    }
}

/// A packet this node owes another: its address, kind and payload.
pub(crate) type Reply = (SocketAddr, u8, BytesMut);

/// Handles one authenticated packet of kind [`KIND_SWIM`] or
/// [`KIND_SUSPECTED`] for `me`. foca's own output stays in `rt`; a
/// suspicion notice owed to the sender is returned.
///
/// # Errors
/// What foca or the notice's decoder refused, and a notice about another
/// member.
pub(crate) fn handle(
    swim: &mut Swim,
    rt: &mut AccumulatingRuntime<Id>,
    suspects: &Suspects,
    me: &Id,
    kind: u8,
    payload: &[u8],
) -> Result<Option<Reply>, WireError> {
    match kind {
        KIND_SWIM => {
            let notice = wire::peek_header(payload).and_then(|h| suspects.unaware(&h));
            swim.handle_data(payload, &mut *rt).map_err(|e| match e {
                // Our codec's own verdict, such as a full table.
                foca::Error::Decode(inner) => match inner.downcast::<WireError>() {
                    Ok(w) => *w,
                    Err(other) => WireError::Decode(other.to_string()),
                },
                other => WireError::Decode(other.to_string()),
            })?;
            Ok(notice.map(|m| (m.id().udp, KIND_SUSPECTED, wire::encode_suspected(&m))))
        }
        KIND_SUSPECTED => {
            let m = wire::decode_suspected(payload)?;
            if m.id() != me {
                return Err(WireError::Decode(format!(
                    "a suspicion notice for {:?} reached {me:?}",
                    m.id()
                )));
            }
            // foca refutes a suspicion of its current incarnation (and
            // ignores one of an older incarnation).
            swim.apply_many(std::iter::once(m), true, &mut *rt)
                .map_err(|e| WireError::Decode(e.to_string()))?;
            Ok(None)
        }
        other => Err(WireError::UnknownKind(other)),
    }
}

#[cfg(test)]
mod tests {
    //! Three members in memory, a clock in the test's hands and a network
    //! that drops what the test says: the partition that spends a
    //! suspicion's gossip where it cannot arrive, then the heal.

    use std::{
        collections::{BinaryHeap, VecDeque},
        num::NonZeroU32,
        sync::{Arc, Mutex},
        time::Duration,
    };

    use foca::Timer;
    use rand::SeedableRng;

    use super::*;

    struct Node {
        swim: Swim,
        rt: AccumulatingRuntime<Id>,
        suspects: Suspects,
    }

    struct Net {
        nodes: Vec<Node>,
        /// (delivery order, from, to, kind, payload)
        wire: VecDeque<(usize, usize, u8, Vec<u8>)>,
        timers: BinaryHeap<std::cmp::Reverse<(Duration, u64, usize, TimerBox)>>,
        now: Duration,
        seq: u64,
        /// Whether a packet from `a` to `b` is dropped.
        cut: fn(usize, usize) -> bool,
        /// Whether members send suspicion notices (the remedy).
        notices: bool,
    }

    /// A timer ordered by nothing (the heap orders by time and sequence).
    struct TimerBox(Timer<Id>);
    impl PartialEq for TimerBox {
        fn eq(&self, _: &Self) -> bool {
            true
        }
    }
    impl Eq for TimerBox {}
    impl PartialOrd for TimerBox {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for TimerBox {
        fn cmp(&self, _: &Self) -> std::cmp::Ordering {
            std::cmp::Ordering::Equal
        }
    }

    fn id(i: usize) -> Id {
        Id {
            node: format!("n{i}@127.0.0.1:{}", 7000 + i),
            uid: 100 + i as u64,
            udp: format!("127.0.0.1:{}", 7000 + i).parse().unwrap(),
            started_ms: 1,
        }
    }

    fn config() -> foca::Config {
        let mut c = foca::Config::new_lan(NonZeroU32::new(32).unwrap());
        c.probe_period = Duration::from_millis(200);
        c.probe_rtt = Duration::from_millis(100);
        // Longer than the test: a suspicion stands unless refuted.
        c.suspect_to_down_after = Duration::from_secs(600);
        if let Some(p) = c.periodic_gossip.as_mut() {
            p.frequency = Duration::from_millis(30);
        }
        if let Some(p) = c.periodic_announce.as_mut() {
            p.frequency = Duration::from_secs(1);
        }
        c
    }

    impl Net {
        fn new(n: usize, notices: bool) -> Self {
            let nodes = (0..n)
                .map(|i| Node {
                    swim: Foca::with_custom_broadcast(
                        id(i),
                        config(),
                        SmallRng::seed_from_u64(i as u64),
                        wire::Codec::default(),
                        groups::Handler(Arc::new(Mutex::new(groups::Table::default()))),
                    ),
                    rt: AccumulatingRuntime::new(),
                    suspects: Suspects::default(),
                })
                .collect();
            let mut net = Self {
                nodes,
                wire: VecDeque::new(),
                timers: BinaryHeap::new(),
                now: Duration::ZERO,
                seq: 0,
                cut: |_, _| false,
                notices,
            };
            for i in 0..n {
                let others = (0..n).filter(|j| *j != i).map(|j| Member::alive(id(j)));
                let node = &mut net.nodes[i];
                node.swim
                    .apply_many(others, false, &mut node.rt)
                    .expect("applies");
                net.flush(i);
            }
            net
        }

        /// Moves what node `i`'s runtime collected onto the wire and the
        /// timer heap, and resyncs its suspects (as `Task::drain` does).
        fn flush(&mut self, i: usize) {
            let node = &mut self.nodes[i];
            while let Some((to, data)) = node.rt.to_send() {
                let j = (to.udp.port() - 7000) as usize;
                self.wire.push_back((i, j, KIND_SWIM, data.to_vec()));
            }
            while let Some((delay, timer)) = node.rt.to_schedule() {
                self.seq += 1;
                self.timers.push(std::cmp::Reverse((
                    self.now + delay,
                    self.seq,
                    i,
                    TimerBox(timer),
                )));
            }
            while node.rt.to_notify().is_some() {}
            node.suspects.resync(node.swim.iter_membership_state());
        }

        /// Runs until `until`: packets arrive at once, timers in order.
        fn run(&mut self, until: Duration) {
            loop {
                if let Some((from, to, kind, data)) = self.wire.pop_front() {
                    if (self.cut)(from, to) {
                        continue;
                    }
                    let node = &mut self.nodes[to];
                    let me = id(to);
                    let reply = handle(
                        &mut node.swim,
                        &mut node.rt,
                        &node.suspects,
                        &me,
                        kind,
                        &data,
                    );
                    if let Ok(Some((addr, kind, payload))) = reply
                        && self.notices
                    {
                        let j = (addr.port() - 7000) as usize;
                        self.wire.push_back((to, j, kind, payload.to_vec()));
                    }
                    self.flush(to);
                    continue;
                }
                let Some(std::cmp::Reverse((at, _, i, _))) = self.timers.peek() else {
                    break;
                };
                if *at > until {
                    break;
                }
                let (at, i) = (*at, *i);
                let Some(std::cmp::Reverse((_, _, _, TimerBox(timer)))) = self.timers.pop() else {
                    break;
                };
                self.now = at;
                let node = &mut self.nodes[i];
                let _ = node.swim.handle_timer(timer, &mut node.rt);
                self.flush(i);
            }
            self.now = until;
        }

        /// What node `i` holds about node `j`.
        fn state(&self, i: usize, j: usize) -> State {
            self.nodes[i]
                .swim
                .iter_membership_state()
                .find(|m| *m.id() == id(j))
                .map(Member::state)
                .expect("a member")
        }
    }

    /// Node 2 is cut off until its peers suspect it and have spent that
    /// suspicion's gossip; after the heal it must learn of the suspicion
    /// and refute it, which needs the notice.
    fn partition_then_heal(notices: bool) -> Net {
        let mut net = Net::new(3, notices);
        net.run(Duration::from_secs(1));
        assert!((0..3).all(|i| (0..3).all(|j| i == j || net.state(i, j) == State::Alive)));
        net.cut = |a, b| (a == 2) != (b == 2);
        net.run(Duration::from_secs(4));
        assert_eq!(net.state(0, 2), State::Suspect);
        assert_eq!(net.state(1, 2), State::Suspect);
        assert_eq!(net.state(2, 0), State::Suspect);
        // The suspicions' gossip is spent: none reaches anyone again.
        assert!(net.nodes.iter().all(|n| n.swim.updates_backlog() == 0));
        net.cut = |_, _| false;
        net.run(Duration::from_secs(10));
        net
    }

    #[test]
    fn a_suspect_that_talks_to_us_is_told_and_refutes() {
        let net = partition_then_heal(true);
        for i in 0..3 {
            for j in 0..3 {
                if i != j {
                    assert_eq!(net.state(i, j), State::Alive, "{i} about {j}");
                }
            }
        }
    }

    #[test]
    fn without_notices_a_spent_suspicion_is_never_refuted() {
        // The defect the notices mend, shown on foca alone: six seconds
        // of probes and answers after the heal change nothing.
        let net = partition_then_heal(false);
        assert_eq!(net.state(0, 2), State::Suspect);
    }

    #[test]
    fn a_notice_about_another_member_or_in_another_state_is_refused() {
        let mut net = Net::new(2, true);
        let node = &mut net.nodes[0];
        let other = wire::encode_suspected(&Member::new(id(1), 0, State::Suspect));
        let down = wire::encode_suspected(&Member::new(id(0), 0, State::Down));
        for notice in [other, down] {
            let r = handle(
                &mut node.swim,
                &mut node.rt,
                &node.suspects,
                &id(0),
                KIND_SUSPECTED,
                &notice,
            );
            assert!(matches!(r, Err(WireError::Decode(_))), "{r:?}");
        }
    }
}
