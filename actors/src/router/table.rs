//! The routee table: the routees in routing order, and for consistent
//! hashing their ring, rebuilt whole on every change. The router actor
//! writes it (through a `watch` channel); every handle reads it.

use crate::actor_ref::ActorRef;

use super::logic::{fnv1a, mix, ring_points};

/// One routee: its ref, its point on the hash ring, and its pool slot.
pub(super) struct Routee<M> {
    pub(super) actor: ActorRef<M>,
    /// Where its virtual nodes go on the ring: a pool slot's, so that a
    /// replacement inherits the keys; a group member's path's.
    pub(super) ring_key: u64,
    /// The pool slot it fills: the router owns it, replaces it when it
    /// fails and stops it with the router. `None` for a group member.
    pub(super) slot: Option<usize>,
}

impl<M> Routee<M> {
    pub(super) fn member(actor: ActorRef<M>) -> Self {
        let ring_key = fnv1a(actor.path().to_string().as_bytes());
        Self {
            actor,
            ring_key,
            slot: None,
        }
    }

    pub(super) fn owned(actor: ActorRef<M>, slot: usize) -> Self {
        Self {
            actor,
            ring_key: mix(slot as u64 ^ POOL_RING_SALT),
            slot: Some(slot),
        }
    }
}

/// Keeps pool slots' ring keys apart from any path hash.
const POOL_RING_SALT: u64 = 0x706f_6f6c_5f72_696e;

/// The routees and, for consistent hashing, their ring: rebuilt whole on
/// every change (changes are rare; routing reads it).
pub(super) struct Table<M> {
    pub(super) routees: Vec<Routee<M>>,
    /// `(point, routee index)`, sorted by point; empty unless hashing.
    pub(super) ring: Vec<(u64, u32)>,
    hashing: bool,
}

impl<M> Table<M> {
    pub(super) fn new(routees: Vec<Routee<M>>, hashing: bool) -> Self {
        let mut t = Self {
            routees,
            ring: Vec::new(),
            hashing,
        };
        t.rebuild();
        t
    }

    pub(super) fn rebuild(&mut self) {
        self.ring.clear();
        if !self.hashing {
            return;
        }
        self.ring = ring_points(self.routees.iter().map(|r| r.ring_key));
    }
}
