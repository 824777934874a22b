//! The install and incarnation rules as a sans-IO unit: what a connection
//! to a remote node becomes once its handshake is done, which incarnation
//! of the node it displaces, which of two links both nodes keep (each
//! seen as a [`LinkEnd`]), what a quarantine ends and how, and what a
//! closed link tells. Nothing here touches a socket, a lock or a clock;
//! the association asks, then carries out the answer (`connect`,
//! `association`).
//!
//! # The rules
//! 1. A connection from a quarantined incarnation is refused: closed with
//!    "your incarnation is quarantined". A quarantined incarnation (it
//!    restarted, shut down, overflowed, or the cluster judged it down) is
//!    never talked to again.
//! 2. A connection whose peer is not proven to be the node (see
//!    [`proven`]) is kept receive-only: it carries the peer's messages and
//!    changes no belief about the node. When it claims an incarnation other
//!    than the current one and no link is up, the node's address is dialed
//!    to check the claim (a restart there displaces the old incarnation).
//! 3. A proven connection makes its incarnation the current one. A new uid
//!    for the node is a restart: the incarnation it displaces is
//!    quarantined (once), its watches fail, identifies are asked again of
//!    the new incarnation, and its connections are aborted.
//! 4. The new connection then takes the link's place: if none is up it
//!    becomes the link (after flushing what was buffered while connecting,
//!    in order); if one is up, the connection dialed by the node with the
//!    lower address wins on both sides ([`new_link_wins`]) and the
//!    other is closed as a [`DUPLICATE`].
//! 5. A quarantine because the peer announced its shutdown is the ordinary
//!    end of a node: logged at `info`, and its connections are closed with
//!    a Close frame, since the peer is closing its side. Any other cause
//!    aborts them.
//! 6. A link that ended without a Close frame (EOF, reset, an IO error) is
//!    the first half of the evidence that the node is gone (`liveness`); a
//!    duplicate's close makes identifies asked on it be asked again.
//!
//! ```text
//!                      handshake done
//!                            │
//!        uid quarantined ────┼──── not proven ──► receive-only
//!               │            │                     (probe: dial the node if
//!               ▼            │ proven               no link is up and the
//!            refused         ▼                      uid is not the current)
//!                   current uid := uid ── new uid ──► quarantine the old
//!                            │                        (restarted)
//!                            ▼
//!        Idle / nothing pending ──► Up        Connecting, pending ──► Flush,
//!        Up(other) ──► the lower node's dial wins:   then look again
//!                      Replace (new) or Duplicate (close the new)
//! ```

use std::collections::HashSet;
use std::fmt;

use transport::{CloseReason, PeerVerified, TransportError};

/// The reason a connection that lost a simultaneous connect is closed with
/// (it travels in the Close frame, so both nodes recognise it).
pub(crate) const DUPLICATE: &str = "duplicate connection";

/// The reason a connection from a quarantined incarnation is closed with.
pub(crate) const REFUSED: &str = "your incarnation is quarantined";

/// A connection to the node whose handshake is done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// The peer's incarnation, from its handshake.
    pub(crate) uid: u64,
    /// Whether the transport proved the peer is the node it names
    /// ([`proven`]).
    pub(crate) proven: bool,
}

/// What becomes of an [`Arrival`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Rule 1: close it with [`REFUSED`].
    Refuse,
    /// Rule 2: keep it for inbound traffic only; `probe`: start connecting
    /// to the node to check the claim.
    ReceiveOnly {
        /// Dial the node's address: the claim is news and no link is up.
        probe: bool,
    },
    /// Rule 3: install it as the node's link; `displaced`: the incarnation
    /// it replaced, just quarantined (carry out the quarantine as a
    /// [`Cause::Restarted`]).
    Install {
        /// The incarnation it displaced, quarantined now.
        displaced: Option<u64>,
    },
}

/// The incarnations of one node: the current one, and those quarantined
/// (tombstones, kept for the association's life).
#[derive(Debug, Default)]
pub(crate) struct Incarnations {
    /// The incarnation the last proven connection came from; 0 until one
    /// has answered.
    current: u64,
    /// Never talked to again.
    quarantined: HashSet<u64>,
}

impl Incarnations {
    /// The node's current incarnation; 0 until one has answered.
    pub(crate) fn current(&self) -> u64 {
        self.current
    }

    /// Whether `uid` is quarantined (0, no incarnation named, never is).
    pub(crate) fn is_quarantined(&self, uid: u64) -> bool {
        uid != 0 && self.quarantined.contains(&uid)
    }

    /// Whether any incarnation is quarantined (tombstones worth keeping).
    pub(crate) fn has_tombstones(&self) -> bool {
        !self.quarantined.is_empty()
    }

    /// Rules 1 to 3 for a connection that arrived. `link_up`: a link to
    /// the node is up.
    pub(crate) fn on_connection(&mut self, arrival: Arrival, link_up: bool) -> Admit {
        let uid = arrival.uid;
        if self.is_quarantined(uid) {
            return Admit::Refuse;
        }
        if !arrival.proven {
            return Admit::ReceiveOnly {
                probe: uid != self.current && !link_up,
            };
        }
        let previous = std::mem::replace(&mut self.current, uid);
        Admit::Install {
            // Quarantined once: an incarnation quarantined already (it
            // announced its shutdown, say) has nothing left to end.
            displaced: displaced(previous, uid).filter(|old| self.quarantined.insert(*old)),
        }
    }

    /// Quarantines `uid`. True if it was not before (0 never is): the
    /// caller carries out what the quarantine ends, once.
    pub(crate) fn quarantine(&mut self, uid: u64) -> bool {
        uid != 0 && self.quarantined.insert(uid)
    }
}

/// The incarnation a connection from incarnation `uid` displaces, if any:
/// the one known before (`previous`, 0 if none) when it differs. The
/// displaced incarnation restarted and is quarantined.
fn displaced(previous: u64, uid: u64) -> Option<u64> {
    (previous != 0 && previous != uid).then_some(previous)
}

/// Why an incarnation is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause<'a> {
    /// The peer announced its shutdown.
    ShutDown,
    /// A proven connection came from incarnation `new` of the node.
    Restarted {
        /// The incarnation that displaced it.
        new: u64,
    },
    /// Anything else (the system-message buffer overflowed, the cluster
    /// judged it down), in words.
    Other(&'a str),
}

impl Cause<'_> {
    /// Rule 5: the ordinary end of a node, logged at `info` (a warning
    /// otherwise).
    pub(crate) fn routine(&self) -> bool {
        matches!(self, Self::ShutDown)
    }

    /// Rule 5: its connections are closed with a Close frame rather than
    /// aborted. The peer is closing its side; an abort would end the
    /// stream under a peer that may not have begun its close yet, which
    /// it would log as a lost connection.
    pub(crate) fn closes_gracefully(&self) -> bool {
        matches!(self, Self::ShutDown)
    }

    /// Rule 3: the node is still there as a new incarnation, so questions
    /// to the node (identifies) are asked again of it, and only what
    /// belongs to the old incarnation (its watches) fails. Otherwise
    /// everything waiting on the node fails.
    pub(crate) fn restart(&self) -> bool {
        matches!(self, Self::Restarted { .. })
    }
}

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShutDown => f.write_str("peer shut down"),
            Self::Restarted { new } => write!(f, "restarted as incarnation {new:#x}"),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// One of two connections to the same node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkEnd {
    /// The peer incarnation at the other end.
    pub(crate) uid: u64,
    /// This node dialed it.
    pub(crate) dialed: bool,
}

/// Whether a new connection replaces the link that is up. A new
/// incarnation, or the same direction again (a reconnect the old link has
/// not noticed yet), makes the new connection the live one. Otherwise both
/// nodes dialed at once, and the connection dialed by the node with the
/// lower address wins on both sides, so they keep the same one.
fn new_link_wins(current: LinkEnd, new: LinkEnd, local: &str, remote: &str) -> bool {
    let winner_dialed = local < remote;
    current.uid != new.uid || current.dialed == new.dialed || new.dialed == winner_dialed
}

/// Where the association's link stands when an installed connection
/// arrives at it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    /// No link, nothing connecting.
    Idle,
    /// Connecting; `pending`: messages wait in the connect buffer.
    Connecting {
        /// The connect buffer holds messages.
        pending: bool,
    },
    /// A link is up, to this end.
    Up(LinkEnd),
}

/// What an installed connection does at the link's [`Slot`] (rule 4).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// It becomes the link.
    Up,
    /// Flush a chunk of the connect buffer on it, then look again: new
    /// messages keep queueing behind the buffered ones until it is up,
    /// so order is kept.
    Flush,
    /// It replaces the link that is up; close that one as a duplicate.
    Replace,
    /// The link that is up stays; close the new one as a duplicate.
    Duplicate,
}

/// Rule 4: where `new`, installed, goes. `local` and `remote` are the two
/// nodes' addresses, for the tie-break both sides agree on.
pub(crate) fn place(slot: Slot, new: LinkEnd, local: &str, remote: &str) -> Place {
    match slot {
        Slot::Idle | Slot::Connecting { pending: false } => Place::Up,
        Slot::Connecting { pending: true } => Place::Flush,
        Slot::Up(current) if new_link_wins(current, new, local, remote) => Place::Replace,
        Slot::Up(_) => Place::Duplicate,
    }
}

/// Whether the transport alone proves `verified` is the node it names: a
/// TLS certificate naming the node (or pinned for it). When authentication
/// is explicitly off every claim is believed, as the operator chose. A
/// peer that proved only the shared secret, or holds a certificate for its
/// host only, may be any holder of those: not proven (rule 2).
pub(crate) fn proven(verified: PeerVerified) -> bool {
    matches!(verified, PeerVerified::Node | PeerVerified::Unauthenticated)
}

/// What a connection's end tells (rule 6).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    /// Without a Close frame: the first half of the evidence that the node
    /// is gone (`liveness`).
    pub(crate) abrupt: bool,
    /// It lost a simultaneous connect (either side closed it so): an
    /// identify asked or answered on it may have been dropped with it
    /// (answers go back on the connection that asked), so it is asked
    /// again, on the link that stays.
    pub(crate) duplicate: bool,
}

/// Rule 6 for a connection that ended with `reason`.
pub(crate) fn ended(reason: &CloseReason) -> Ended {
    Ended {
        abrupt: match reason {
            CloseReason::Lost => true,
            CloseReason::Error(e) => matches!(**e, TransportError::Io(_)),
            _ => false,
        },
        duplicate: matches!(
            reason,
            CloseReason::Remote(r) | CloseReason::Local(r) if r == DUPLICATE
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn proven_from(uid: u64) -> Arrival {
        Arrival { uid, proven: true }
    }

    fn claim_from(uid: u64) -> Arrival {
        Arrival { uid, proven: false }
    }

    #[test]
    fn the_first_proven_connection_makes_its_incarnation_current() {
        let mut inc = Incarnations::default();
        assert_eq!(inc.current(), 0);
        assert_eq!(
            inc.on_connection(proven_from(5), false),
            Admit::Install { displaced: None }
        );
        assert_eq!(inc.current(), 5);
        // Again from the same incarnation (a reconnect): nothing displaced.
        assert_eq!(
            inc.on_connection(proven_from(5), true),
            Admit::Install { displaced: None }
        );
        assert!(!inc.has_tombstones());
    }

    #[test]
    fn a_new_uid_for_the_node_is_a_restart_that_quarantines_the_old_once() {
        let mut inc = Incarnations::default();
        inc.on_connection(proven_from(5), false);
        assert_eq!(
            inc.on_connection(proven_from(6), true),
            Admit::Install { displaced: Some(5) }
        );
        assert_eq!(inc.current(), 6);
        assert!(inc.is_quarantined(5) && !inc.is_quarantined(6));
        assert!(inc.has_tombstones());
        // Quarantined already (it said goodbye, then came back restarted):
        // the restart has nothing left to end.
        inc.quarantine(6);
        assert_eq!(
            inc.on_connection(proven_from(7), false),
            Admit::Install { displaced: None }
        );
    }

    #[test]
    fn a_quarantined_incarnation_coming_back_is_refused() {
        let mut inc = Incarnations::default();
        inc.on_connection(proven_from(5), false);
        inc.on_connection(proven_from(6), true);
        assert_eq!(inc.on_connection(proven_from(5), false), Admit::Refuse);
        assert_eq!(inc.on_connection(claim_from(5), false), Admit::Refuse);
        assert_eq!(inc.current(), 6, "a refused connection changes nothing");
    }

    #[test]
    fn an_unproven_claim_is_receive_only_and_probed_only_when_news_and_no_link() {
        let mut inc = Incarnations::default();
        // First contact, claimed: dial the address to see who is there.
        assert_eq!(
            inc.on_connection(claim_from(5), false),
            Admit::ReceiveOnly { probe: true }
        );
        assert_eq!(inc.current(), 0, "a claim changes no belief");
        inc.on_connection(proven_from(5), false);
        // The current incarnation: nothing to check.
        assert_eq!(
            inc.on_connection(claim_from(5), false),
            Admit::ReceiveOnly { probe: false }
        );
        // A new incarnation claimed while a link is up: the link says
        // who the node is, no dial.
        assert_eq!(
            inc.on_connection(claim_from(6), true),
            Admit::ReceiveOnly { probe: false }
        );
        assert_eq!(
            inc.on_connection(claim_from(6), false),
            Admit::ReceiveOnly { probe: true }
        );
        assert!(!inc.is_quarantined(5), "a claim quarantines nothing");
    }

    #[test]
    fn a_quarantine_is_carried_out_once_and_never_of_uid_zero() {
        let mut inc = Incarnations::default();
        assert!(!inc.quarantine(0));
        assert!(!inc.is_quarantined(0));
        assert!(inc.quarantine(9));
        assert!(!inc.quarantine(9));
        assert!(inc.is_quarantined(9));
    }

    #[test]
    fn an_installed_connection_goes_up_flushes_or_breaks_the_tie() {
        let (lo, hi) = ("a@h:1", "b@h:2");
        let end = |uid, dialed| LinkEnd { uid, dialed };
        assert_eq!(place(Slot::Idle, end(5, true), lo, hi), Place::Up);
        let empty = Slot::Connecting { pending: false };
        assert_eq!(place(empty, end(5, false), lo, hi), Place::Up);
        let buffered = Slot::Connecting { pending: true };
        assert_eq!(place(buffered, end(5, true), lo, hi), Place::Flush);
        // Both dialed at once: the lower node's dial stays, on both sides.
        let mine = Slot::Up(end(5, true));
        assert_eq!(place(mine, end(5, false), lo, hi), Place::Duplicate);
        let theirs = Slot::Up(end(5, false));
        assert_eq!(place(theirs, end(5, true), lo, hi), Place::Replace);
        assert_eq!(place(mine, end(5, false), hi, lo), Place::Replace);
        // A restart replaces whatever is up.
        assert_eq!(place(mine, end(6, false), lo, hi), Place::Replace);
    }

    #[test]
    fn both_nodes_keep_the_lower_nodes_dial() {
        let (lo, hi) = ("a@h:1", "b@h:2");
        let dial = |dialed| LinkEnd { uid: 7, dialed };
        // On the lower node: its own dial wins, the other's loses.
        assert!(new_link_wins(dial(false), dial(true), lo, hi));
        assert!(!new_link_wins(dial(true), dial(false), lo, hi));
        // On the higher node: the lower node's dial (inbound here) wins.
        assert!(new_link_wins(dial(true), dial(false), hi, lo));
        assert!(!new_link_wins(dial(false), dial(true), hi, lo));
        // The same direction again is a reconnect: the new one is live.
        assert!(new_link_wins(dial(true), dial(true), hi, lo));
        assert!(new_link_wins(dial(false), dial(false), lo, hi));
        // A new incarnation always replaces the old.
        let newer = LinkEnd {
            uid: 8,
            dialed: true,
        };
        assert!(new_link_wins(dial(false), newer, hi, lo));
    }

    #[test]
    fn a_new_incarnation_displaces_the_old() {
        assert_eq!(displaced(0, 5), None, "first contact");
        assert_eq!(displaced(5, 5), None, "same incarnation");
        assert_eq!(displaced(5, 6), Some(5));
    }

    #[test]
    fn only_a_peer_proven_to_be_the_node_is_believed() {
        assert!(proven(PeerVerified::Node));
        assert!(proven(PeerVerified::Unauthenticated), "the operator chose");
        assert!(!proven(PeerVerified::Secret));
        assert!(!proven(PeerVerified::Host));
    }

    #[test]
    fn only_a_shutdown_is_routine_and_closed_gracefully() {
        let shut = Cause::ShutDown;
        assert!(shut.routine() && shut.closes_gracefully() && !shut.restart());
        let restarted = Cause::Restarted { new: 0x2a };
        assert!(!restarted.routine() && !restarted.closes_gracefully());
        assert!(restarted.restart());
        // Words are not a cause: a reason that reads like one is another.
        let other = Cause::Other("peer shut down");
        assert!(!other.routine() && !other.closes_gracefully() && !other.restart());
        assert_eq!(shut.to_string(), "peer shut down");
        assert_eq!(restarted.to_string(), "restarted as incarnation 0x2a");
        assert_eq!(other.to_string(), "peer shut down");
    }

    #[test]
    fn a_link_lost_without_a_close_frame_is_abrupt_and_a_duplicate_is_known() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(ended(&CloseReason::Lost).abrupt);
        assert!(ended(&CloseReason::Error(Arc::new(TransportError::Io(io)))).abrupt);
        let graceful = ended(&CloseReason::Remote("bye".into()));
        assert_eq!(
            graceful,
            Ended {
                abrupt: false,
                duplicate: false
            }
        );
        assert!(ended(&CloseReason::Remote(DUPLICATE.into())).duplicate);
        assert!(ended(&CloseReason::Local(DUPLICATE.into())).duplicate);
        assert!(!ended(&CloseReason::Lost).duplicate);
    }
}
