//! Allocation: which shard an entity id falls in ([`shard_of`], a fixed
//! FNV-1a hash) and which region owns a shard ([`owner`], rendezvous
//! hashing over the candidates), the same on every node and every run.
//! Pure functions of their arguments.

use serde::{Deserialize, Serialize};

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

/// A region of node `node` (uid 7), for the shard module's tests.
#[cfg(test)]
pub(super) fn test_region(node: &str) -> RegionId {
    RegionId {
        node: node.into(),
        uid: 7,
    }
}

#[cfg(test)]
mod tests {
    use super::{test_region as r, *};

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
}
