//! The cluster-wide group registry (Erlang's `pg`): which actors of which
//! member are in which named group. Each member disseminates its own
//! entries as foca custom broadcasts (one per group, versioned), again
//! whenever a member comes up, so late joiners learn them; entries of a
//! member that goes down, leaves or is removed are dropped. This node's
//! own entries, and the items that disseminate them, are [`OwnEntries`].
//! Pure: no IO.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use serde::{Deserialize, Serialize};

use super::ClusterError;
use crate::bincode_format;

/// Most entries (refs, over all members and groups) a node keeps; items
/// that would pass it are not stored nor passed on.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// One member's entries of one group, at a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    pub(crate) node: String,
    pub(crate) uid: u64,
    pub(crate) group: String,
    pub(crate) version: u64,
    /// Serialized refs: `path#manifest` (as refs inside messages).
    pub(crate) refs: Vec<String>,
}

impl Item {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        // Strings and integers always encode.
        let _ = bincode_format::to_buf(self, &mut out, usize::MAX);
        out.to_vec()
    }

    fn decode(data: &[u8]) -> Result<Self, GroupError> {
        match bincode_format::from_slice::<Self>(data) {
            Ok((item, used)) if used == data.len() => Ok(item),
            Ok(_) => Err(GroupError("trailing bytes".into())),
            Err(e) => Err(GroupError(e.to_string())),
        }
    }
}

/// A broadcast's key: newer versions of one member's group replace older
/// ones still being disseminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    node: String,
    uid: u64,
    group: String,
    version: u64,
}

impl foca::Invalidates for Key {
    fn invalidates(&self, other: &Self) -> bool {
        self.node == other.node
            && self.uid == other.uid
            && self.group == other.group
            && self.version >= other.version
    }
}

/// A group item that does not decode, or is refused.
#[derive(Debug, Clone, thiserror::Error)]
#[error("group registry: {0}")]
pub(crate) struct GroupError(pub(crate) String);

/// Most incarnations whose entries were dropped that a node remembers,
/// to refuse their items when gossip brings them back (about 100 bytes
/// each).
pub(crate) const MAX_RETIRED: usize = 4096;

/// Every member's entries, by (node, uid, group).
#[derive(Debug, Default)]
pub(crate) struct Table {
    items: HashMap<(String, u64, String), (u64, Vec<String>)>,
    entries: usize,
    /// This node's own incarnation: an item that names this node with
    /// another uid is an earlier incarnation's, still gossiped by others.
    me: Option<(String, u64)>,
    /// Incarnations whose entries were dropped (down, left, removed),
    /// oldest first: their items are stale wherever they come from, and
    /// would otherwise come back with gossip that was still under way.
    retired: std::collections::VecDeque<(String, u64)>,
    retired_set: std::collections::HashSet<(String, u64)>,
    /// Items refused for [`MAX_ENTRIES`].
    pub(crate) refused: u64,
    /// Groups changed since the task last looked.
    pub(crate) changed: Vec<String>,
}

impl Table {
    /// A table for the node `node` in incarnation `uid`.
    pub(crate) fn for_node(node: String, uid: u64) -> Self {
        Self {
            me: Some((node, uid)),
            ..Self::default()
        }
    }

    /// Stores `item` if it is newer than what is kept, and not of a
    /// retired incarnation or an earlier one of this node; whether it was.
    pub(crate) fn apply(&mut self, item: Item) -> bool {
        if self
            .me
            .as_ref()
            .is_some_and(|(n, u)| *n == item.node && *u != item.uid)
            || self.retired_set.contains(&(item.node.clone(), item.uid))
        {
            return false;
        }
        let key = (item.node, item.uid, item.group);
        let old_len = match self.items.get(&key) {
            Some((v, _)) if *v >= item.version => return false,
            Some((_, refs)) => refs.len(),
            None => 0,
        };
        let entries = self.entries - old_len + item.refs.len();
        if entries > MAX_ENTRIES {
            self.refused += 1;
            return false;
        }
        self.entries = entries;
        self.changed.push(key.2.clone());
        if item.refs.is_empty() {
            self.items.remove(&key);
        } else {
            self.items.insert(key, (item.version, item.refs));
        }
        true
    }

    /// Marks the groups with entries of incarnation `uid` of `node` as
    /// changed: the member's state changed, and so do the groups' listings
    /// (only members that are up are listed).
    pub(crate) fn touch_member(&mut self, node: &str, uid: u64) {
        let touched: Vec<String> = self
            .items
            .keys()
            .filter(|(n, u, _)| n == node && *u == uid)
            .map(|(_, _, g)| g.clone())
            .collect();
        self.changed.extend(touched);
    }

    /// Drops every entry of incarnation `uid` of `node`, and refuses its
    /// items from now on (it never comes back: a restart is a new uid).
    pub(crate) fn drop_member(&mut self, node: &str, uid: u64) {
        let id = (node.to_owned(), uid);
        if self.retired_set.insert(id.clone()) {
            if self.retired.len() == MAX_RETIRED
                && let Some(old) = self.retired.pop_front()
            {
                self.retired_set.remove(&old);
            }
            self.retired.push_back(id);
        }
        let gone: Vec<_> = self
            .items
            .keys()
            .filter(|(n, u, _)| n == node && *u == uid)
            .cloned()
            .collect();
        for k in gone {
            if let Some((_, refs)) = self.items.remove(&k) {
                self.entries -= refs.len();
                self.changed.push(k.2);
            }
        }
    }

    /// The serialized refs in `group`, over every member, each with the
    /// incarnation (uid) of the member that published it: a ref made from
    /// an entry names that incarnation, so after a restart the new
    /// incarnation's entries reach the new process, not a dial to the old
    /// uid that remoting quarantined.
    pub(crate) fn refs(&self, group: &str) -> Vec<(u64, String)> {
        let mut out: Vec<(u64, String)> = self
            .items
            .iter()
            .filter(|((_, _, g), _)| g == group)
            .flat_map(|((_, uid, _), (_, refs))| refs.iter().map(|r| (*uid, r.clone())))
            .collect();
        out.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        out
    }

    /// How many entries (refs) the table holds, over every member and
    /// group.
    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    /// The groups with entries.
    pub(crate) fn groups(&self) -> Vec<String> {
        let mut g: Vec<String> = self.items.keys().map(|(_, _, g)| g.clone()).collect();
        g.sort();
        g.dedup();
        g
    }
}

/// foca's broadcast handler: stores what is new in the shared table.
pub(crate) struct Handler(pub(crate) Arc<Mutex<Table>>);

impl<T> foca::BroadcastHandler<T> for Handler {
    type Key = Key;
    type Error = GroupError;

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&T>,
    ) -> Result<Option<Key>, GroupError> {
        let item = Item::decode(data)?;
        let key = Key {
            node: item.node.clone(),
            uid: item.uid,
            group: item.group.clone(),
            version: item.version,
        };
        let fresh = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(item);
        Ok(fresh.then_some(key))
    }
}

/// This node's own entries, by group, and the version of its latest
/// item: each change is one item with the next version, so the newest
/// replaces the older ones still being disseminated.
#[derive(Debug, Default)]
pub(crate) struct OwnEntries {
    groups: BTreeMap<String, Vec<String>>,
    version: u64,
}

impl OwnEntries {
    /// Adds (`join`) or removes `entry` in `group` of node `node` in
    /// incarnation `uid`: the item to disseminate, or `None` when that
    /// changes nothing (an entry already in, or not in).
    ///
    /// # Errors
    /// [`ClusterError::GroupTooLarge`] when the group's item would take
    /// more than `limit` bytes; the entries stay as they were.
    pub(crate) fn change(
        &mut self,
        (node, uid): (&str, u64),
        group: &str,
        entry: String,
        join: bool,
        limit: usize,
    ) -> Result<Option<Item>, ClusterError> {
        let mut refs = self.groups.get(group).cloned().unwrap_or_default();
        let had = refs.iter().position(|e| *e == entry);
        match (join, had) {
            (true, None) => refs.push(entry),
            (false, Some(i)) => {
                refs.remove(i);
            }
            _ => return Ok(None),
        }
        let item = Self::item_at(self.version + 1, node, uid, group, &refs);
        let size = item.encode().len();
        if size > limit {
            return Err(ClusterError::GroupTooLarge {
                group: group.to_owned(),
                size,
                limit,
            });
        }
        self.version = item.version;
        if refs.is_empty() {
            self.groups.remove(group);
        } else {
            self.groups.insert(group.to_owned(), refs);
        }
        Ok(Some(item))
    }

    /// Every group's item again, each with a new version (a member came
    /// up: it learns them; gossip that was lost is made good).
    pub(crate) fn items(&mut self, node: &str, uid: u64) -> Vec<Item> {
        let mut items = Vec::with_capacity(self.groups.len());
        for (group, refs) in &self.groups {
            let item = Self::item_at(self.version + 1, node, uid, group, refs);
            self.version = item.version;
            items.push(item);
        }
        items
    }

    fn item_at(version: u64, node: &str, uid: u64, group: &str, refs: &[String]) -> Item {
        Item {
            node: node.to_owned(),
            uid,
            group: group.to_owned(),
            version,
            refs: refs.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Invalidates;

    fn refs(t: &Table, group: &str) -> Vec<String> {
        t.refs(group).into_iter().map(|(_, r)| r).collect()
    }

    fn item(node: &str, group: &str, version: u64, refs: &[&str]) -> Item {
        Item {
            node: node.into(),
            uid: 1,
            group: group.into(),
            version,
            refs: refs.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn newer_versions_replace_older_and_stale_ones_are_ignored() {
        let mut t = Table::default();
        assert!(t.apply(item("a", "g", 2, &["x", "y"])));
        assert!(!t.apply(item("a", "g", 1, &["z"])));
        assert!(!t.apply(item("a", "g", 2, &["z"])));
        assert_eq!(refs(&t, "g"), ["x", "y"]);
        assert!(t.apply(item("a", "g", 3, &["z"])));
        assert!(t.apply(item("b", "g", 1, &["w"])));
        assert_eq!(refs(&t, "g"), ["w", "z"]);
        assert_eq!(t.entries, 2);
        // An empty list leaves the group.
        assert!(t.apply(item("a", "g", 4, &[])));
        assert_eq!(refs(&t, "g"), ["w"]);
        assert_eq!(t.groups(), ["g"]);
    }

    #[test]
    fn a_member_that_goes_drops_its_entries() {
        let mut t = Table::default();
        t.apply(item("a", "g", 1, &["x"]));
        t.apply(item("a", "h", 1, &["y"]));
        t.apply(item("b", "g", 1, &["z"]));
        t.drop_member("a", 1);
        assert_eq!(refs(&t, "g"), ["z"]);
        assert!(refs(&t, "h").is_empty());
        assert_eq!(t.entries, 1);
    }

    #[test]
    fn items_of_a_retired_or_earlier_incarnation_do_not_come_back() {
        let mut t = Table::for_node("me".into(), 9);
        // An earlier incarnation of this node, still gossiped by others.
        let mut mine = item("me", "g", 1, &["old-me"]);
        mine.uid = 8;
        assert!(!t.apply(mine));
        assert!(t.apply(item("a", "g", 1, &["x"])));
        t.drop_member("a", 1);
        // Gossip still under way brings a's item back: refused.
        assert!(!t.apply(item("a", "g", 2, &["x"])));
        assert!(refs(&t, "g").is_empty());
        // A new incarnation of a is welcome.
        let mut again = item("a", "g", 1, &["y"]);
        again.uid = 2;
        assert!(t.apply(again));
        assert_eq!(refs(&t, "g"), ["y"]);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = Table::default();
        let many: Vec<String> = (0..MAX_ENTRIES).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(t.apply(item("a", "g", 1, &refs)));
        assert!(!t.apply(item("b", "g", 1, &["one too many"])));
        assert_eq!(t.refused, 1);
    }

    #[test]
    fn keys_invalidate_older_versions_of_the_same_group_only() {
        let k = |g: &str, v| Key {
            node: "a".into(),
            uid: 1,
            group: g.into(),
            version: v,
        };
        assert!(k("g", 2).invalidates(&k("g", 1)));
        assert!(!k("g", 1).invalidates(&k("g", 2)));
        assert!(!k("h", 2).invalidates(&k("g", 1)));
    }

    #[test]
    fn garbage_does_not_decode() {
        use foca::BroadcastHandler;
        let mut h = Handler(Arc::default());
        assert!(BroadcastHandler::<()>::receive_item(&mut h, &[0xff, 0xff], None).is_err());
        let good = item("a", "g", 1, &["x"]).encode();
        assert!(
            BroadcastHandler::<()>::receive_item(&mut h, &good, None)
                .unwrap()
                .is_some()
        );
        assert!(
            BroadcastHandler::<()>::receive_item(&mut h, &good, None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn own_entries_change_one_item_at_a_time_with_growing_versions() {
        let me = ("a@h:1", 7);
        let mut own = OwnEntries::default();
        let first = own.change(me, "g", "x".into(), true, 1000).expect("fits");
        let first = first.expect("a change");
        assert_eq!(
            (first.version, first.refs.clone()),
            (1, vec!["x".to_owned()])
        );
        assert_eq!((first.node.as_str(), first.uid), me);
        // Joining again, or leaving what is not in, changes nothing.
        assert_eq!(
            own.change(me, "g", "x".into(), true, 1000).expect("fits"),
            None
        );
        assert_eq!(
            own.change(me, "g", "y".into(), false, 1000).expect("fits"),
            None
        );
        let second = own.change(me, "h", "y".into(), true, 1000).expect("fits");
        assert_eq!(second.map(|i| i.version), Some(2));
        // The last entry leaving: an empty item, and the group is gone.
        let gone = own.change(me, "g", "x".into(), false, 1000).expect("fits");
        assert_eq!(gone.map(|i| (i.version, i.refs.len())), Some((3, 0)));
        let again: Vec<(String, u64)> = own
            .items(me.0, me.1)
            .into_iter()
            .map(|i| (i.group, i.version))
            .collect();
        assert_eq!(again, [("h".to_owned(), 4)]);
    }

    #[test]
    fn own_entries_past_the_limit_are_refused_and_left_as_they_were() {
        let me = ("a@h:1", 7);
        let mut own = OwnEntries::default();
        own.change(me, "g", "x".into(), true, 1000).expect("fits");
        let big = "y".repeat(100);
        let err = own.change(me, "g", big, true, 64).expect_err("too large");
        assert!(
            matches!(err, ClusterError::GroupTooLarge { ref group, size, limit: 64 } if group == "g" && size > 64),
            "{err:?}"
        );
        let items = own.items(me.0, me.1);
        assert_eq!(items.len(), 1);
        // The refused change took no version.
        assert_eq!(
            (items[0].version, items[0].refs.clone()),
            (2, vec!["x".to_owned()])
        );
    }
}
