//! What a shard holds while it is not active here: user messages on
//! their way to an entity ([`Envelope`]), releases on their way to the
//! region that asked ([`Marker`]), both in arrival order in a [`Buffer`]
//! that counts their bytes so the state machine can bound it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::alloc::RegionId;

/// What a marker counts for in a buffer's byte bound: markers are never
/// dropped (one per region and move), but they take room.
const MARKER_BYTES: usize = 64;

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

    pub(super) fn push(&mut self, item: Item<T>) {
        self.bytes += item_bytes(&item);
        self.items.push_back(item);
    }

    pub(super) fn drain(&mut self) -> impl Iterator<Item = Item<T>> + '_ {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: u32, bytes: usize) -> Item<u32> {
        Item::Msg(Envelope {
            entity: "e".into(),
            msg: n,
            origin: "a".into(),
            hops: 0,
            bytes,
        })
    }

    fn marker(req: u64) -> Item<u32> {
        Item::Marker(Marker {
            shard: 3,
            req,
            by: "b".into(),
            dest: crate::sharding::shard::alloc::test_region("a"),
        })
    }

    #[test]
    fn a_buffer_counts_bytes_and_drains_in_arrival_order() {
        let mut b = Buffer::default();
        assert_eq!((b.len(), b.bytes()), (0, 0));
        b.push(msg(1, 10));
        b.push(marker(1));
        // A message whose size is unknown (0) still takes room, so that a
        // bound cannot be passed with empty messages.
        b.push(msg(2, 0));
        assert_eq!(b.len(), 3);
        assert_eq!(b.bytes(), 10 + MARKER_BYTES + 1);
        let items: Vec<Item<u32>> = b.drain().collect();
        assert_eq!(items, vec![msg(1, 10), marker(1), msg(2, 0)]);
        assert_eq!((b.len(), b.bytes()), (0, 0));
        // Reused after a drain, it counts from zero.
        b.push(msg(3, 5));
        assert_eq!((b.len(), b.bytes()), (1, 5));
    }
}
