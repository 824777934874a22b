//! Recipient compression, like Artery's actor-ref compression: the first
//! message to a recipient on a link defines a small id with its path, later
//! ones carry only the id. Ids are per link (per connection), so a new
//! connection starts a new table, and the definition and every use travel
//! through the same ordered stream: the receiver always knows an id before
//! it is used.
//!
//! - Sending side: [`OutboundIds`] hands out a link's ids, and each remote
//!   recipient keeps its id in a [`CompressedId`] tagged with the link's
//!   generation, so an id from an older link is never used on a newer one.
//! - Receiving side: [`InboundIds`] maps the ids a peer defined on one
//!   connection to whatever the dispatcher keeps per recipient.
//!
//! Both are bounded by `SystemConfig::set_max_recipient_ids` per link: a
//! sender that has defined that many sends further recipients inline
//! (path in every envelope, nothing kept), and a receiver refuses a
//! definition beyond it as malformed. Ask reply slots (`/temp/...`) are
//! always sent inline: each is used about once, so compressing them would
//! only fill the tables (one id per ask, never reused).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The ids one link (one connection, `generation`) has handed out.
#[derive(Debug)]
pub(crate) struct OutboundIds {
    generation: u32,
    next: AtomicU32,
    /// Ids are 1..=limit.
    limit: u32,
}

impl OutboundIds {
    /// A fresh table for the link of this generation, handing out at most
    /// `limit` ids (they start at 1; 0 means "none" in a [`CompressedId`]).
    pub(crate) fn new(generation: u32, limit: usize) -> Self {
        Self {
            generation,
            next: AtomicU32::new(1),
            limit: u32::try_from(limit).unwrap_or(u32::MAX - 1),
        }
    }

    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// The recipient's id on this link, if this link defined one.
    #[inline(always)]
    pub(crate) fn lookup(&self, slot: &CompressedId) -> Option<u32> {
        let key = slot.0.load(Ordering::Relaxed);
        (key >> 32 == u64::from(self.generation) && key as u32 != 0).then_some(key as u32)
    }

    /// The recipient's id on this link: `Some((id, false))` if it has one,
    /// or a new one, `Some((id, true))`, which the caller must define in the
    /// envelope it writes now; `None` once the link has handed out all its
    /// ids (the recipient then travels inline). Called under the link's
    /// queue lock, which orders the definition before every use.
    #[inline]
    pub(crate) fn lookup_or_define(&self, slot: &CompressedId) -> Option<(u32, bool)> {
        if let Some(id) = self.lookup(slot) {
            return Some((id, false));
        }
        let id = self.next.load(Ordering::Relaxed);
        if id > self.limit {
            return None;
        }
        self.next.store(id + 1, Ordering::Relaxed);
        slot.0.store(
            (u64::from(self.generation) << 32) | u64::from(id),
            Ordering::Relaxed,
        );
        Some((id, true))
    }
}

/// A recipient's id on the link that last defined it:
/// `(generation << 32) | id`, 0 while it has none.
#[derive(Debug, Default)]
pub(crate) struct CompressedId(AtomicU64);

/// The ids a peer defined on one connection, mapped to what the receiver
/// keeps for each, at most `limit` of them. A correct sender hands out ids
/// 1 to `limit` in order, so an id is an index: a lookup is one bounds
/// check and one load, whatever ids a peer picks (a hash map would cost a
/// hash per message, and a peer could aim its ids at collisions). Memory:
/// 4 bytes per id up to the largest defined (at most `limit`), plus one
/// entry per id defined.
#[derive(Debug)]
pub(crate) struct InboundIds<T> {
    /// `slots[id]`: the index of `id`'s entry in `entries`, or `EMPTY`.
    slots: Vec<u32>,
    entries: Vec<T>,
    limit: usize,
}

const EMPTY: u32 = u32::MAX;

impl<T> InboundIds<T> {
    /// An empty table for ids 1 to `limit`.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            slots: Vec::new(),
            entries: Vec::new(),
            limit,
        }
    }

    /// Defines (or redefines) `id`.
    ///
    /// # Errors
    /// An id beyond the limit: the peer is broken or hostile (a correct
    /// one sends further recipients inline), and nothing is stored.
    pub(crate) fn define(&mut self, id: u32, entry: T) -> Result<(), &'static str> {
        let idx = id as usize;
        if idx > self.limit {
            return Err("recipient id beyond the per-link limit");
        }
        if idx >= self.slots.len() {
            self.slots.resize(idx + 1, EMPTY);
        }
        match self.slots[idx] {
            EMPTY => {
                self.slots[idx] = self.entries.len() as u32;
                self.entries.push(entry);
            }
            i => self.entries[i as usize] = entry,
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        match self.slots.get(id as usize) {
            Some(&i) if i != EMPTY => self.entries.get(i as usize),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        match self.slots.get(id as usize) {
            Some(&i) if i != EMPTY => self.entries.get_mut(i as usize),
            _ => None,
        }
    }

    /// Ids defined.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_defined_once_per_link() {
        let link = OutboundIds::new(3, 100);
        let (a, b) = (CompressedId::default(), CompressedId::default());
        assert_eq!(link.lookup(&a), None);
        assert_eq!(link.lookup_or_define(&a), Some((1, true)));
        assert_eq!(link.lookup_or_define(&a), Some((1, false)));
        assert_eq!(link.lookup_or_define(&b), Some((2, true)));
        assert_eq!(link.lookup(&a), Some(1));
        assert_eq!(link.generation(), 3);
    }

    #[test]
    fn a_link_hands_out_at_most_its_limit() {
        let link = OutboundIds::new(1, 2);
        let slots: Vec<CompressedId> = (0..3).map(|_| CompressedId::default()).collect();
        assert!(link.lookup_or_define(&slots[0]).is_some());
        assert!(link.lookup_or_define(&slots[1]).is_some());
        assert_eq!(link.lookup_or_define(&slots[2]), None, "inline from now on");
        assert_eq!(
            link.lookup_or_define(&slots[0]),
            Some((1, false)),
            "known ids stay"
        );
    }

    #[test]
    fn a_new_link_does_not_use_the_old_links_ids() {
        let old = OutboundIds::new(1, 100);
        let slot = CompressedId::default();
        old.lookup_or_define(&slot);
        let new = OutboundIds::new(2, 100);
        assert_eq!(new.lookup(&slot), None, "defined on another link");
        assert_eq!(new.lookup_or_define(&slot), Some((1, true)));
        // And the old link no longer claims it.
        assert_eq!(old.lookup(&slot), None);
    }

    #[test]
    fn inbound_ids_are_bounded_by_the_limit() {
        let mut t = InboundIds::new(100);
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(u32::MAX), None);
        t.define(100, "a").unwrap();
        assert_eq!(t.get(100), Some(&"a"));
        assert_eq!(t.len(), 1);
        assert_eq!(t.slots.len(), 101, "4 bytes per id up to the largest");
        t.define(5, "b").unwrap();
        t.define(5, "c").unwrap();
        assert_eq!(t.get(5), Some(&"c"), "redefined in place");
        assert_eq!(t.len(), 2);
        *t.get_mut(5).unwrap() = "d";
        assert_eq!(t.get(5), Some(&"d"));
        assert_eq!(t.get(6), None);
        assert_eq!(
            t.define(101, "x"),
            Err("recipient id beyond the per-link limit")
        );
        assert_eq!(
            t.define(u32::MAX, "x"),
            Err("recipient id beyond the per-link limit")
        );
        assert_eq!(t.get(101), None);
        assert_eq!(t.len(), 2);
    }
}
