//! How a router picks a routee ([`RoutingLogic`]), and the choices
//! themselves as pure functions: the consistent-hashing ring (its points,
//! a key's owner, the order its keys move in), the random pick, and the
//! smallest mailbox. `route` applies them to the routee table.

use std::{fmt, sync::Arc};

/// Points each routee gets on a consistent-hashing ring. More points
/// spread keys more evenly (with 128 the largest share of 4 routees is
/// typically within 15% of a quarter) at the cost of 16 bytes per point
/// and a ring rebuild of `routees × 128` points when the routee set
/// changes. Removing a routee moves only the keys its points owned.
pub const VIRTUAL_NODES: usize = 128;

/// How a router picks the routee for a message. Build one with its
/// constructors.
pub struct RoutingLogic<M> {
    pub(super) kind: Logic<M>,
}

/// A consistent-hashing key function.
pub(super) type KeyFn<M> = Arc<dyn Fn(&M) -> u64 + Send + Sync>;

pub(super) enum Logic<M> {
    RoundRobin,
    Random(u64),
    SmallestMailbox,
    ConsistentHashing(KeyFn<M>),
    Broadcast(fn(&M) -> M),
}

impl<M> fmt::Debug for RoutingLogic<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Logic::RoundRobin => "RoundRobin",
            Logic::Random(_) => "Random",
            Logic::SmallestMailbox => "SmallestMailbox",
            Logic::ConsistentHashing(_) => "ConsistentHashing",
            Logic::Broadcast(_) => "Broadcast",
        })
    }
}

impl<M> RoutingLogic<M> {
    /// Each routee in turn: with `n` routees and one sender, message `i`
    /// goes to routee `i % n` (while none refuses).
    pub fn round_robin() -> Self {
        Self {
            kind: Logic::RoundRobin,
        }
    }

    /// A routee chosen uniformly at random, from a generator seeded with
    /// `seed` (the same seed and the same sends choose the same routees;
    /// the generator is SplitMix64, shared by the router's callers).
    pub fn random(seed: u64) -> Self {
        Self {
            kind: Logic::Random(seed),
        }
    }

    /// The routee with the fewest messages waiting, as Akka's
    /// `SmallestMailboxPool` does: a local routee's
    /// [`ActorRef::mailbox_len`] (messages queued and not yet taken by
    /// it); an idle local routee is taken at once. A remote routee's queue
    /// is unknown here, so remote routees rank after every local one, and
    /// take turns among themselves. Ties go to the routees in turn.
    ///
    /// [`ActorRef::mailbox_len`]: crate::ActorRef::mailbox_len
    pub fn smallest_mailbox() -> Self {
        Self {
            kind: Logic::SmallestMailbox,
        }
    }

    /// Messages with equal keys go to the same routee, by a hash ring with
    /// [`VIRTUAL_NODES`] points per routee: when a routee leaves, only the
    /// keys it owned move (to the routees next on the ring); when one
    /// joins, it takes about `1/n` of the keys. A pool routee that is
    /// replaced keeps its slot's points, so its keys stay with the
    /// replacement. `key` is mixed before use, so any integer will do (an
    /// id, or a hash of a string).
    pub fn consistent_hashing(key: impl Fn(&M) -> u64 + Send + Sync + 'static) -> Self {
        Self {
            kind: Logic::ConsistentHashing(Arc::new(key)),
        }
    }

    /// Every message to every routee (a clone each; the last gets the
    /// original).
    pub fn broadcast() -> Self
    where
        M: Clone,
    {
        Self {
            kind: Logic::Broadcast(M::clone),
        }
    }
}

/// The ring for routees with `keys` (in order): [`VIRTUAL_NODES`] points
/// each, sorted.
pub(super) fn ring_points(keys: impl Iterator<Item = u64>) -> Vec<(u64, u32)> {
    let mut ring = Vec::new();
    for (i, key) in keys.enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        for v in 0..VIRTUAL_NODES as u64 {
            ring.push((mix(key ^ mix(v)), i));
        }
    }
    ring.sort_unstable();
    ring
}

/// The routee that owns `hash` on a non-empty ring.
pub(super) fn ring_owner(ring: &[(u64, u32)], hash: u64) -> usize {
    let at = ring.partition_point(|&(p, _)| p < hash);
    ring[at % ring.len()].1 as usize
}

/// The routee indices the ring visits from `hash`, each once: the key's
/// owner first, then the routees its keys would move to in turn.
pub(super) fn ring_order(
    ring: &[(u64, u32)],
    hash: u64,
    n: usize,
) -> impl Iterator<Item = usize> + '_ {
    let start = ring.partition_point(|&(p, _)| p < hash);
    let mut seen = Vec::new();
    (0..ring.len()).filter_map(move |i| {
        if seen.len() == n {
            return None;
        }
        let idx = ring[(start + i) % ring.len()].1 as usize;
        if seen.contains(&idx) {
            return None;
        }
        seen.push(idx);
        Some(idx)
    })
}

/// SplitMix64's output function: spreads any integer over 64 bits.
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a: a stable hash of a path (the same in every process and build).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `r` scaled into `0..n` (Lemire's multiply-shift).
pub(super) fn below(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

/// Smallest mailbox's choice of `n` routees, looked at in turn from
/// `turn`: the first idle one, or else the one with the fewest messages
/// waiting (a tie goes to the first in turn). `len(i)` is routee `i`'s
/// mailbox length, `None` if unknown (a remote routee), which ranks after
/// every known one; with no length known, the choice is `turn`.
#[inline]
pub(super) fn smallest_mailbox(
    turn: usize,
    n: usize,
    len: impl Fn(usize) -> Option<usize>,
) -> usize {
    let mut best = (usize::MAX, turn);
    for i in 0..n {
        let idx = (turn + i) % n;
        let Some(len) = len(idx) else {
            continue;
        };
        if len == 0 {
            return idx;
        }
        if len < best.0 {
            best = (len, idx);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::{VIRTUAL_NODES, below, mix, ring_order, ring_owner, ring_points, smallest_mailbox};

    /// `smallest_mailbox` over these lengths (`None`: remote).
    fn smallest(turn: usize, lens: &[Option<usize>]) -> usize {
        smallest_mailbox(turn, lens.len(), |i| lens[i])
    }

    #[test]
    fn smallest_mailbox_takes_the_first_idle_routee_in_turn() {
        assert_eq!(smallest(0, &[Some(3), Some(0), Some(0)]), 1);
        assert_eq!(smallest(2, &[Some(0), Some(3), Some(0)]), 2);
        // Wrapping around from the turn.
        assert_eq!(smallest(2, &[Some(0), Some(3), Some(4)]), 0);
    }

    #[test]
    fn smallest_mailbox_takes_the_fewest_waiting_ties_in_turn() {
        assert_eq!(smallest(0, &[Some(5), Some(2), Some(7)]), 1);
        assert_eq!(smallest(1, &[Some(2), Some(2), Some(2)]), 1);
        assert_eq!(smallest(2, &[Some(2), Some(4), Some(2)]), 2);
    }

    #[test]
    fn smallest_mailbox_ranks_remote_routees_after_local_ones() {
        // A busy local routee wins over remote ones of unknown length.
        assert_eq!(smallest(0, &[None, Some(9), None]), 1);
        // Remote only: they take turns.
        assert_eq!(smallest(0, &[None, None, None]), 0);
        assert_eq!(smallest(2, &[None, None, None]), 2);
    }

    #[test]
    fn random_picks_spread_evenly() {
        // As `Shared::first` draws: SplitMix64 from a seed.
        let mut counts = [0u32; 4];
        for k in 0..40_000u64 {
            let state = 7u64.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            counts[below(mix(state), 4)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn removing_a_ring_member_moves_only_its_keys() {
        let keys = [11u64, 22, 33, 44, 55];
        let before = ring_points(keys.iter().copied());
        // Without the third member (index 2); the others shift down.
        let kept: Vec<u64> = keys.iter().copied().filter(|&k| k != 33).collect();
        let after = ring_points(kept.iter().copied());
        let mut moved = 0;
        for key in 0..10_000u64 {
            let h = mix(key);
            let was = keys[ring_order(&before, h, keys.len()).next().unwrap()];
            let now = kept[ring_order(&after, h, kept.len()).next().unwrap()];
            if was == 33 {
                moved += 1;
                // It goes where the old ring's second choice was.
                let second = keys[ring_order(&before, h, keys.len()).nth(1).unwrap()];
                assert_eq!(now, second);
            } else {
                assert_eq!(was, now, "key {key} moved without its owner leaving");
            }
        }
        // About a fifth of the keys were the removed member's.
        assert!((1_200..2_800).contains(&moved), "{moved} keys moved");
    }

    #[test]
    fn ring_order_visits_each_member_once() {
        let ring = ring_points([1u64, 2, 3].into_iter());
        assert_eq!(ring.len(), 3 * VIRTUAL_NODES);
        let mut order: Vec<usize> = ring_order(&ring, 12345, 3).collect();
        order.sort_unstable();
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!(
            ring_owner(&ring, 12345),
            ring_order(&ring, 12345, 3).next().unwrap()
        );
    }

    #[test]
    fn below_stays_in_range() {
        for r in [0, 1, u64::MAX / 2, u64::MAX] {
            assert!(below(r, 7) < 7);
        }
        assert_eq!(below(u64::MAX, 1), 0);
    }
}
