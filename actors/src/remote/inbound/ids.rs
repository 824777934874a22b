//! Recipient ids: what each id the peer defined on this connection stands
//! for (a path, the actor there, its window), charged to the connection's
//! share, and the recipient of an inline envelope while it is handled.

use std::sync::Arc;

use super::{
    conn::Conn,
    share::{OVER_SHARE, Share},
};
use crate::{
    budget::{Held, id_cost},
    dead_letter::{DeadLetterReason, MalformedKind},
    registry::{Registry, Target},
    remote::{compression::InboundIds, flow::Windowed},
    serialization::manifests,
};

/// The id an inline recipient (`envelope::To::Inline`) is known by while
/// its envelope is handled; a peer may not define it.
pub(super) const INLINE_ID: u32 = u32::MAX;

/// What a recipient id stands for on this connection.
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) path: Arc<str>,
    pub(super) target: Option<Arc<dyn Target>>,
    /// `target`'s manifest (0 without one), so that checking each message
    /// is not a virtual call. Set only by `set_target`.
    manifest: u32,
    /// Its window and parked batches; `None` for an inline recipient.
    pub(super) win: Option<Arc<Windowed>>,
}

impl Entry {
    pub(super) fn new(
        path: Arc<str>,
        target: Option<Arc<dyn Target>>,
        win: Option<Arc<Windowed>>,
    ) -> Self {
        let mut e = Self {
            path,
            target: None,
            manifest: 0,
            win,
        };
        e.set_target(target);
        e
    }

    pub(super) fn set_target(&mut self, target: Option<Arc<dyn Target>>) {
        self.manifest = target.as_ref().map_or(0, |t| t.manifest());
        self.target = target;
    }

    /// Whether `target` is set and takes `manifest`.
    #[inline]
    pub(super) fn takes(&self, manifest: u32) -> bool {
        self.target.is_some() && self.manifest == manifest
    }
}

/// The recipients of one connection, by id.
pub(super) struct Ids {
    table: InboundIds<Entry>,
    /// The recipient of the inline envelope being handled (`INLINE_ID`).
    inline: Option<Entry>,
    /// `SystemConfig::set_recipient_window`.
    window: u64,
    /// Bytes charged for the ids, given back when the connection goes.
    charged: usize,
}

impl Ids {
    pub(super) fn new(max_ids: usize, window: u64) -> Self {
        Self {
            table: InboundIds::new(max_ids),
            inline: None,
            window,
            charged: 0,
        }
    }

    /// Bytes charged for the ids now.
    pub(super) fn charged(&self) -> usize {
        self.charged
    }

    /// The entry recipient `id` stands for on this connection.
    #[inline]
    pub(super) fn get(&self, id: u32) -> Option<&Entry> {
        if id == INLINE_ID {
            self.inline.as_ref()
        } else {
            self.table.get(id)
        }
    }

    /// As [`get`](Self::get), to refresh its target.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut Entry> {
        if id == INLINE_ID {
            self.inline.as_mut()
        } else {
            self.table.get_mut(id)
        }
    }

    /// The recipient of the inline envelope being handled is `path`.
    pub(super) fn set_inline(&mut self, path: &str, registry: &Registry) {
        let target = registry.lookup(path);
        self.inline = Some(Entry::new(path.into(), target, None));
    }

    /// The read ended: an inline recipient is known for its envelope only.
    pub(super) fn end_read(&mut self) {
        self.inline = None;
    }

    /// Defines recipient `id` as `path`, charging its cost to `share` (and
    /// giving back what a definition it replaces cost). An error was
    /// reported (a dead letter, or malformed input) when it fails.
    #[cold]
    pub(super) fn define(
        &mut self,
        id: u32,
        path: &str,
        manifest: u32,
        conn: &mut Conn,
        share: &Share,
    ) -> Result<(), ()> {
        let cost = id_cost(path.len());
        if !share.account().take(Held::Ids, cost) {
            // The id stays as it was: the peer's later messages to it are
            // malformed (or go to the old path), and its reads pause.
            share.over();
            let to = conn.registry().path(path);
            conn.dead(
                &manifests::label(manifest),
                &to,
                &DeadLetterReason::OverShare(OVER_SHARE.into()),
            );
            return Err(());
        }
        let old = self.table.get(id).map_or(0, |e| id_cost(e.path.len()));
        let target = conn.registry().lookup(path);
        let win = Arc::new(Windowed::new(self.window));
        if let Err(why) = self
            .table
            .define(id, Entry::new(path.into(), target, Some(win)))
        {
            share.account().give_back(cost);
            conn.malformed(MalformedKind::Recipient, why);
            return Err(());
        }
        share.account().give_back(old);
        self.charged = self.charged + cost - old;
        Ok(())
    }

    /// The actor at a path changes when one stops and another is spawned
    /// there (or when one is spawned after the path was defined): when the
    /// cached target of `id` cannot take `manifest`, look the path up again.
    #[inline(always)]
    pub(super) fn refresh(&mut self, id: u32, manifest: u32, registry: &Registry) {
        if let Some(entry) = self.get_mut(id)
            && !entry.takes(manifest)
        {
            entry.set_target(registry.lookup(&entry.path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        budget::NodeBudget,
        remote::inbound::tests::{FakeTarget, conn},
    };

    /// A share of a node budget of `budget` bytes.
    fn share(budget: usize) -> (Share, Arc<NodeBudget>) {
        let node = NodeBudget::new(budget);
        let account = node.connect([127, 0, 0, 1].into());
        (Share::new(account), node)
    }

    #[test]
    fn a_definition_is_charged_and_a_redefinition_costs_the_difference() {
        let (mut conn, _, registry) = conn(true);
        let (share, node) = share(1 << 20);
        let mut ids = Ids::new(10, 1_000);
        ids.define(1, "/user/seven", 7, &mut conn, &share).unwrap();
        assert_eq!(ids.charged(), id_cost(11));
        assert!(ids.get(1).is_some_and(|e| e.takes(7)));
        ids.define(1, "/user/somebody", 7, &mut conn, &share)
            .unwrap();
        assert_eq!(ids.charged(), id_cost(14));
        assert_eq!(node.snapshot().held, id_cost(14));
        assert!(ids.get(1).is_some_and(|e| !e.takes(7)), "no actor there");
        assert_eq!(registry.dead_letter_count(), 0);
    }

    #[test]
    fn a_definition_past_the_share_is_refused_and_the_id_stays_as_it_was() {
        let (mut conn, _, registry) = conn(true);
        let (share, node) = share(id_cost(11) + 10);
        let mut ids = Ids::new(10, 1_000);
        ids.define(1, "/user/seven", 7, &mut conn, &share).unwrap();
        assert!(!share.must_hold_back());
        assert_eq!(
            ids.define(1, "/user/somebody/else", 7, &mut conn, &share),
            Err(())
        );
        assert_eq!(&*ids.get(1).expect("defined").path, "/user/seven");
        assert_eq!(registry.dead_letter_count(), 1);
        assert!(share.must_hold_back(), "reads pause at the read's end");
        assert_eq!(node.snapshot().held, id_cost(11));
    }

    #[test]
    fn ids_past_the_table_are_malformed_and_not_charged() {
        let (mut conn, _, registry) = conn(true);
        let (share, node) = share(1 << 20);
        let mut ids = Ids::new(1, 1_000);
        ids.define(1, "/user/seven", 7, &mut conn, &share).unwrap();
        assert_eq!(ids.define(2, "/user/seven", 7, &mut conn, &share), Err(()));
        assert_eq!(registry.dead_letter_count(), 1);
        assert_eq!(node.snapshot().held, id_cost(11));
        assert_eq!(ids.charged(), id_cost(11));
    }

    #[test]
    fn a_target_that_cannot_take_a_type_is_looked_up_again() {
        let (mut conn, _, registry) = conn(true);
        let (share, _node) = share(1 << 20);
        let mut ids = Ids::new(10, 1_000);
        ids.define(1, "/user/later", 7, &mut conn, &share).unwrap();
        assert!(!ids.get(1).expect("defined").takes(7), "nobody there yet");
        registry.register("/user/later", Arc::new(FakeTarget::default()));
        ids.refresh(1, 7, &registry);
        assert!(ids.get(1).expect("defined").takes(7));
    }

    #[test]
    fn an_inline_recipient_lasts_one_read_and_has_no_window() {
        let (_, _, registry) = conn(true);
        let mut ids = Ids::new(10, 1_000);
        ids.set_inline("/user/seven", &registry);
        let e = ids.get(INLINE_ID).expect("inline");
        assert!(e.takes(7) && e.win.is_none());
        ids.end_read();
        assert!(ids.get(INLINE_ID).is_none());
    }
}
