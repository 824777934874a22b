//! The member table as subscribers see it ([`View`]), and the rule that
//! turns foca's table into the changes they are told ([`changes`]). The
//! rule is pure: the membership task feeds it foca's table and applies
//! what it returns.

use std::collections::{BTreeMap, HashSet};

use super::{Member, MemberState, wire::Id};

/// The member table as subscribers see it, and this node's own state.
pub(super) struct View {
    pub(super) members: BTreeMap<String, Member>,
    pub(super) me: MemberState,
}

/// The last state handed to subscribers, per node, with the member's
/// full identity.
pub(super) type Known = BTreeMap<String, (Id, MemberState)>;

/// One change to tell subscribers: the member's identity, its state
/// before (`None` for a member they were not told of), its state now.
pub(super) type Change = (Id, Option<MemberState>, MemberState);

/// The state subscribers see for a member foca holds in `state`: a
/// member down after its own leave notice (`left`) left.
pub(super) fn state_of(state: foca::State, left: bool) -> MemberState {
    match state {
        foca::State::Alive => MemberState::Up,
        foca::State::Suspect => MemberState::Suspect,
        foca::State::Down if left => MemberState::Left,
        foca::State::Down => MemberState::Down,
    }
}

/// The changes from what subscribers were told (`known`) to foca's table
/// now (`table`: each member but the seeds' placeholders, in its state),
/// in the order to tell them. A node that shows up in a new incarnation
/// takes its old one down (unless it was down or left already) and
/// removes it before it is added; a node that is no longer in the table
/// is removed.
pub(super) fn changes<'a>(
    known: &Known,
    table: impl IntoIterator<Item = (&'a Id, MemberState)>,
) -> Vec<Change> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut changes = Vec::new();
    for (id, state) in table {
        seen.insert(&id.node);
        match known.get(&id.node) {
            Some((old, s)) if old == id && *s == state => {}
            Some((old, s)) if old == id => changes.push((id.clone(), Some(*s), state)),
            Some((old, s)) => {
                // A new incarnation of the node: the old one is gone.
                let from = *s;
                if from != MemberState::Down && from != MemberState::Left {
                    changes.push((old.clone(), Some(from), MemberState::Down));
                }
                changes.push((old.clone(), Some(MemberState::Down), MemberState::Removed));
                changes.push((id.clone(), None, state));
            }
            None => changes.push((id.clone(), None, state)),
        }
    }
    for (node, (id, s)) in known {
        if !seen.contains(node.as_str()) {
            changes.push((id.clone(), Some(*s), MemberState::Removed));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn id(name: &str, uid: u64) -> Id {
        Id {
            node: format!("{name}@127.0.0.1:1"),
            uid,
            udp: SocketAddr::from(([127, 0, 0, 1], 1)),
            started_ms: 1,
        }
    }

    fn known(entries: &[(&Id, MemberState)]) -> Known {
        entries
            .iter()
            .map(|(id, s)| (id.node.clone(), ((*id).clone(), *s)))
            .collect()
    }

    #[test]
    fn a_member_leaving_is_left_and_otherwise_down() {
        assert_eq!(state_of(foca::State::Alive, true), MemberState::Up);
        assert_eq!(state_of(foca::State::Suspect, true), MemberState::Suspect);
        assert_eq!(state_of(foca::State::Down, false), MemberState::Down);
        assert_eq!(state_of(foca::State::Down, true), MemberState::Left);
    }

    #[test]
    fn new_and_changed_members_are_told_and_unchanged_ones_are_not() {
        let (a, b) = (id("a", 1), id("b", 2));
        let told = known(&[(&a, MemberState::Up)]);
        let got = changes(&told, [(&a, MemberState::Up), (&b, MemberState::Up)]);
        assert_eq!(got, [(b.clone(), None, MemberState::Up)]);
        let got = changes(&told, [(&a, MemberState::Suspect)]);
        assert_eq!(got, [(a, Some(MemberState::Up), MemberState::Suspect)]);
    }

    #[test]
    fn a_new_incarnation_takes_the_old_one_down_and_removes_it_first() {
        let (old, new) = (id("a", 1), id("a", 2));
        let got = changes(
            &known(&[(&old, MemberState::Up)]),
            [(&new, MemberState::Up)],
        );
        assert_eq!(
            got,
            [
                (old.clone(), Some(MemberState::Up), MemberState::Down),
                (old.clone(), Some(MemberState::Down), MemberState::Removed),
                (new.clone(), None, MemberState::Up),
            ]
        );
        // An old incarnation that left is not downed, only removed.
        let got = changes(
            &known(&[(&old, MemberState::Left)]),
            [(&new, MemberState::Up)],
        );
        assert_eq!(
            got,
            [
                (old, Some(MemberState::Down), MemberState::Removed),
                (new, None, MemberState::Up),
            ]
        );
    }

    #[test]
    fn a_member_gone_from_the_table_is_removed() {
        let (a, b) = (id("a", 1), id("b", 2));
        let told = known(&[(&a, MemberState::Down), (&b, MemberState::Up)]);
        let got = changes(&told, [(&b, MemberState::Up)]);
        assert_eq!(got, [(a, Some(MemberState::Down), MemberState::Removed)]);
    }
}
