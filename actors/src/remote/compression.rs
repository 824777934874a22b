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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Most recipient ids one link may define; a peer defining more is
/// misbehaving, and its further definitions are refused as malformed.
pub(crate) const MAX_COMPRESSION_IDS: usize = 1 << 20;

/// The ids one link (one connection, `generation`) has handed out.
#[derive(Debug)]
pub(crate) struct OutboundIds {
    generation: u32,
    next: AtomicU32,
}

impl OutboundIds {
    /// A fresh table for the link of this generation (ids start at 1; 0
    /// means "none" in a [`CompressedId`]).
    pub(crate) fn new(generation: u32) -> Self {
        Self {
            generation,
            next: AtomicU32::new(1),
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

    /// The recipient's id on this link: `(id, false)` if it has one, or a
    /// new one, `(id, true)`, which the caller must define in the envelope
    /// it writes now. Called under the link's queue lock, which orders the
    /// definition before every use.
    #[inline]
    pub(crate) fn lookup_or_define(&self, slot: &CompressedId) -> (u32, bool) {
        if let Some(id) = self.lookup(slot) {
            return (id, false);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        slot.0.store(
            (u64::from(self.generation) << 32) | u64::from(id),
            Ordering::Relaxed,
        );
        (id, true)
    }
}

/// A recipient's id on the link that last defined it:
/// `(generation << 32) | id`, 0 while it has none.
#[derive(Debug, Default)]
pub(crate) struct CompressedId(AtomicU64);

/// The ids a peer defined on one connection, mapped to what the receiver
/// keeps for each. Grows to the largest id defined.
#[derive(Debug)]
pub(crate) struct InboundIds<T> {
    entries: Vec<Option<T>>,
}

impl<T> Default for InboundIds<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<T: Clone> InboundIds<T> {
    /// Defines (or redefines) `id`.
    ///
    /// # Errors
    /// `id` is at or beyond [`MAX_COMPRESSION_IDS`]: the peer is broken
    /// or hostile, and nothing is stored.
    pub(crate) fn define(&mut self, id: u32, entry: T) -> Result<(), &'static str> {
        let idx = id as usize;
        if idx >= MAX_COMPRESSION_IDS {
            return Err("recipient id beyond the compression table limit");
        }
        if idx >= self.entries.len() {
            self.entries.resize(idx + 1, None);
        }
        self.entries[idx] = Some(entry);
        Ok(())
    }
}

impl<T> InboundIds<T> {
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.entries.get(id as usize).and_then(Option::as_ref)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.entries.get_mut(id as usize).and_then(Option::as_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_defined_once_per_link() {
        let link = OutboundIds::new(3);
        let (a, b) = (CompressedId::default(), CompressedId::default());
        assert_eq!(link.lookup(&a), None);
        assert_eq!(link.lookup_or_define(&a), (1, true));
        assert_eq!(link.lookup_or_define(&a), (1, false));
        assert_eq!(link.lookup_or_define(&b), (2, true));
        assert_eq!(link.lookup(&a), Some(1));
        assert_eq!(link.generation(), 3);
    }

    #[test]
    fn a_new_link_does_not_use_the_old_links_ids() {
        let old = OutboundIds::new(1);
        let slot = CompressedId::default();
        old.lookup_or_define(&slot);
        let new = OutboundIds::new(2);
        assert_eq!(new.lookup(&slot), None, "defined on another link");
        assert_eq!(new.lookup_or_define(&slot), (1, true));
        // And the old link no longer claims it.
        assert_eq!(old.lookup(&slot), None);
    }

    #[test]
    fn inbound_ids_are_bounded_and_redefinable() {
        let mut t = InboundIds::default();
        assert_eq!(t.get(0), None);
        t.define(5, "a").unwrap();
        assert_eq!(t.get(5), Some(&"a"));
        assert_eq!(t.get(4), None);
        t.define(5, "b").unwrap();
        assert_eq!(t.get(5), Some(&"b"));
        *t.get_mut(5).unwrap() = "c";
        assert_eq!(t.get(5), Some(&"c"));
        let at_limit = MAX_COMPRESSION_IDS as u32;
        assert_eq!(
            t.define(at_limit, "x"),
            Err("recipient id beyond the compression table limit")
        );
        assert_eq!(t.get(at_limit), None);
        t.define(at_limit - 1, "last").unwrap();
    }
}
