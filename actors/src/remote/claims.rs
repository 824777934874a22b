//! Who proved what: the inbound connections of one association whose
//! claimed identity is not proven yet, and the handshake nonces of this
//! node's own dials, with which it answers the peer's questions about them.
//! Pure bookkeeping; the association acts on it.
//!
//! An inbound connection that proved only the shared secret proves that
//! its peer holds the secret, not that it is the node it names: any secret
//! holder can claim any address and uid (both are in every hello). So it
//! carries inbound traffic only, and displaces nothing, until this node
//! asks the node at the claimed address, over a connection it dialed
//! itself, whether it dialed a connection with that handshake nonce:
//!
//! ```text
//!   A ──dial (nonce n)──► B        inbound at B: claims A, unverified
//!   B ──dial──► A                  B's own link to A (proven: B dialed A's address)
//!   B ── ConfirmDial{n} ──► A      on B's link
//!   A ── DialConfirmed{n, yes} ──► B   on the same connection, so only A can answer
//!   B: yes → the inbound is A's, usable as a link; no → closed
//! ```
//!
//! A connection this node dialed is proven (it reached the claimed
//! address), and so is one whose TLS certificate names the node.

use std::collections::{HashMap, HashSet};

/// A handshake nonce (32 random bytes, one per side of a connection).
pub(super) type Nonce = [u8; 32];

/// An inbound connection's claim, not yet confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Claim {
    /// The incarnation it claims.
    pub(super) uid: u64,
    /// The peer's nonce in its handshake: what the claimed node is asked
    /// about.
    pub(super) nonce: Nonce,
}

/// The claims and dial nonces of one association.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Unverified inbound connections, by generation.
    unverified: HashMap<u32, Claim>,
    /// Generations whose confirmation was asked on the current link.
    asked: HashSet<u32>,
    /// Our nonce on each connection we dialed, by generation.
    dialed: HashMap<u32, Nonce>,
}

impl Claims {
    /// Holds inbound connection `generation` until its claim is confirmed.
    pub(super) fn hold(&mut self, generation: u32, claim: Claim) {
        self.unverified.insert(generation, claim);
    }

    /// Remembers our nonce on a connection we dialed.
    pub(super) fn dialed(&mut self, generation: u32, nonce: Nonce) {
        self.dialed.insert(generation, nonce);
    }

    /// Connection `generation` ended.
    pub(super) fn closed(&mut self, generation: u32) {
        self.unverified.remove(&generation);
        self.asked.remove(&generation);
        self.dialed.remove(&generation);
    }

    /// Whether connection `generation` waits for its claim to be confirmed.
    pub(super) fn is_unverified(&self, generation: u32) -> bool {
        self.unverified.contains_key(&generation)
    }

    /// Whether any connection waits.
    pub(super) fn any_unverified(&self) -> bool {
        !self.unverified.is_empty()
    }

    /// Whether a live connection this node dialed used `nonce`: the
    /// answer to the peer's `ConfirmDial`.
    pub(super) fn did_we_dial(&self, nonce: &Nonce) -> bool {
        self.dialed.values().any(|n| n == nonce)
    }

    /// The nonces to ask about on the current link (each once per link).
    pub(super) fn take_questions(&mut self) -> Vec<Nonce> {
        let mut out = Vec::new();
        for (g, claim) in &self.unverified {
            if self.asked.insert(*g) {
                out.push(claim.nonce);
            }
        }
        out
    }

    /// A new link: questions asked on the old one may be lost.
    pub(super) fn relink(&mut self) {
        self.asked.clear();
    }

    /// The claimed node answered about `nonce`: the generation and claim
    /// it concerns, no longer held.
    pub(super) fn answered(&mut self, nonce: &Nonce) -> Option<(u32, Claim)> {
        let g = *self.unverified.iter().find(|(_, c)| c.nonce == *nonce)?.0;
        self.asked.remove(&g);
        self.unverified.remove(&g).map(|c| (g, c))
    }

    /// Every held claim, no longer held (the claimed node cannot be asked).
    pub(super) fn drain_unverified(&mut self) -> Vec<(u32, Claim)> {
        self.asked.clear();
        self.unverified.drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: u64, n: u8) -> Claim {
        Claim {
            uid,
            nonce: [n; 32],
        }
    }

    #[test]
    fn claims_are_asked_once_per_link_and_settled_by_their_answer() {
        let mut c = Claims::default();
        c.hold(3, claim(7, 1));
        c.hold(4, claim(8, 2));
        assert!(c.is_unverified(3) && c.any_unverified());
        let mut asked = c.take_questions();
        asked.sort();
        assert_eq!(asked, [[1; 32], [2; 32]]);
        assert!(c.take_questions().is_empty(), "asked once");
        c.relink();
        assert_eq!(c.take_questions().len(), 2, "asked again on a new link");
        assert_eq!(c.answered(&[2; 32]), Some((4, claim(8, 2))));
        assert_eq!(c.answered(&[2; 32]), None, "settled");
        assert_eq!(c.answered(&[9; 32]), None, "a nonce nobody claimed");
        c.closed(3);
        assert!(!c.any_unverified());
    }

    #[test]
    fn our_dials_answer_for_themselves_while_they_live() {
        let mut c = Claims::default();
        assert!(!c.did_we_dial(&[5; 32]));
        c.dialed(9, [5; 32]);
        assert!(c.did_we_dial(&[5; 32]));
        assert!(!c.did_we_dial(&[6; 32]));
        c.closed(9);
        assert!(!c.did_we_dial(&[5; 32]));
    }

    #[test]
    fn draining_releases_every_claim() {
        let mut c = Claims::default();
        c.hold(1, claim(1, 1));
        c.hold(2, claim(2, 2));
        c.take_questions();
        let mut all = c.drain_unverified();
        all.sort_by_key(|(g, _)| *g);
        assert_eq!(all, [(1, claim(1, 1)), (2, claim(2, 2))]);
        assert!(!c.any_unverified());
    }
}
