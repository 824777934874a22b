//! Shared-secret node authentication: the keys, and the HMAC-SHA256 proof
//! each side of a handshake computes over both sides' nonces and identities.
//!
//! The secret itself never goes on the wire. Each side sends a fresh random
//! nonce with its hello, then proves knowledge of the secret with
//!
//! ```text
//! HMAC-SHA256(secret, "ACTR auth v1" | author role | author nonce | reader nonce
//!                     | author uid | reader uid | author addr | reader addr)
//! ```
//!
//! so a proof is only good for the one connection whose two nonces it
//! names (no replay), only in the direction it was made (the role byte stops
//! reflection), and only for the two identities that were introduced.
//! Pure code: no IO, no clock, no randomness (nonces are passed in).

use std::{fmt, sync::Arc};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ConfigError;

/// Bytes of a handshake nonce: 256 bits, so two connections never share one.
pub const NONCE_LEN: usize = 32;
/// Bytes of one proof: an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Proofs a node sends at most: one per configured secret (current and
/// previous, for rotation).
pub const MAX_PROOFS: usize = 2;
/// Shortest accepted secret. A proof is visible to whoever the node talks
/// to, so a short secret could be guessed offline; 16 random bytes make that
/// hopeless. Generate secrets with `openssl rand -hex 32`.
pub const MIN_SECRET_LEN: usize = 16;

/// Domain separation: a proof for this protocol can be nothing else.
const LABEL: &[u8] = b"ACTR auth v1";

/// Which end of the TCP connection a side is. Bound into every proof so a
/// proof made as dialer cannot be reflected back as a listener's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that called `connect`.
    Dialer,
    /// The side that accepted the connection.
    Listener,
}

impl Role {
    /// The other end.
    pub fn peer(self) -> Self {
        match self {
            Self::Dialer => Self::Listener,
            Self::Listener => Self::Dialer,
        }
    }
}

/// The secret(s) a node proves it knows: the current one, and optionally the
/// previous one while a rotation is rolled out.
///
/// A node sends one proof per secret and accepts a peer whose proof matches
/// any of its secrets, so rotating is: give every node `new` with previous
/// `old` (one by one, nodes keep talking), then drop `old` everywhere.
///
/// `Debug` never prints the secret.
///
/// ```
/// let s = transport::SharedSecret::new("0123456789abcdef0123456789abcdef")
///     .with_previous("fedcba9876543210fedcba9876543210");
/// assert_eq!(format!("{s:?}"), "SharedSecret { secrets: 2, .. }");
/// ```
#[derive(Clone)]
pub struct SharedSecret {
    keys: Arc<[Vec<u8>]>,
}

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSecret")
            .field("secrets", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl SharedSecret {
    /// The current secret (at least [`MIN_SECRET_LEN`] bytes; checked when
    /// the endpoint is bound).
    pub fn new(current: impl Into<Vec<u8>>) -> Self {
        Self {
            keys: Arc::from(vec![current.into()]),
        }
    }

    /// Also accepts (and proves) `previous`, for a rotation without a
    /// partition. Replaces an earlier previous secret.
    pub fn with_previous(self, previous: impl Into<Vec<u8>>) -> Self {
        let current = self.keys[0].clone();
        Self {
            keys: Arc::from(vec![current, previous.into()]),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for k in self.keys.iter() {
            if k.len() < MIN_SECRET_LEN {
                return Err(ConfigError::SecretTooShort {
                    len: k.len(),
                    min: MIN_SECRET_LEN,
                });
            }
        }
        Ok(())
    }

    /// The proofs this node sends: one per secret, current first.
    pub(crate) fn prove(&self, author: &Party<'_>, reader: &Party<'_>) -> Vec<[u8; MAC_LEN]> {
        self.keys
            .iter()
            .map(|k| mac(k, author, reader).finalize().into_bytes().into())
            .collect()
    }

    /// True if any of `proofs` was made by `author` for `reader` with any of
    /// our secrets. Each comparison is constant-time.
    pub(crate) fn verify(&self, proofs: &[u8], author: &Party<'_>, reader: &Party<'_>) -> bool {
        proofs.chunks_exact(MAC_LEN).any(|tag| {
            self.keys
                .iter()
                .any(|k| mac(k, author, reader).verify_slice(tag).is_ok())
        })
    }
}

/// One side's contribution to the transcript a proof covers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Party<'a> {
    pub(crate) role: Role,
    pub(crate) nonce: &'a [u8; NONCE_LEN],
    pub(crate) uid: u64,
    pub(crate) addr: &'a str,
}

fn mac(key: &[u8], author: &Party<'_>, reader: &Party<'_>) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; the `expect` cannot fire.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    m.update(LABEL);
    m.update(&[author.role as u8]);
    m.update(author.nonce);
    m.update(reader.nonce);
    m.update(&author.uid.to_be_bytes());
    m.update(&reader.uid.to_be_bytes());
    for addr in [author.addr, reader.addr] {
        // Length-prefixed so the two addresses cannot be re-split.
        m.update(&(addr.len() as u16).to_be_bytes());
        m.update(addr.as_bytes());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"0123456789abcdef-current";
    const B: &[u8] = b"0123456789abcdef-previous";

    fn parties<'a>(na: &'a [u8; 32], nb: &'a [u8; 32]) -> (Party<'a>, Party<'a>) {
        (
            Party {
                role: Role::Dialer,
                nonce: na,
                uid: 1,
                addr: "a:1",
            },
            Party {
                role: Role::Listener,
                nonce: nb,
                uid: 2,
                addr: "b:2",
            },
        )
    }

    #[test]
    fn proof_verifies_with_the_same_secret_only() {
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let s = SharedSecret::new(A);
        let p = s.prove(&d, &l).concat();
        assert!(s.verify(&p, &d, &l));
        assert!(!SharedSecret::new(B).verify(&p, &d, &l));
    }

    #[test]
    fn rotation_accepts_either_secret_both_ways() {
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let old = SharedSecret::new(B);
        let both = SharedSecret::new(A).with_previous(B);
        let new = SharedSecret::new(A);
        // Old node ↔ rotating node, rotating node ↔ new node.
        assert!(old.verify(&both.prove(&d, &l).concat(), &d, &l));
        assert!(both.verify(&old.prove(&d, &l).concat(), &d, &l));
        assert!(new.verify(&both.prove(&d, &l).concat(), &d, &l));
        assert!(both.verify(&new.prove(&d, &l).concat(), &d, &l));
        // But old and new alone cannot talk.
        assert!(!new.verify(&old.prove(&d, &l).concat(), &d, &l));
    }

    #[test]
    fn proof_binds_nonces_roles_uids_and_addrs() {
        let s = SharedSecret::new(A);
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let p = s.prove(&d, &l).concat();
        // Another connection's nonce (replay).
        let (d2, l2) = parties(&[1; 32], &[3; 32]);
        assert!(!s.verify(&p, &d2, &l2));
        // Reflected: the same transcript read as the other direction.
        assert!(!s.verify(&p, &l, &d));
        let mut d3 = d;
        d3.role = Role::Listener;
        assert!(!s.verify(&p, &d3, &l));
        let mut d4 = d;
        d4.uid = 9;
        assert!(!s.verify(&p, &d4, &l));
        let mut l5 = l;
        l5.addr = "b:3";
        assert!(!s.verify(&p, &d, &l5));
    }

    #[test]
    fn short_secrets_are_refused_and_debug_is_redacted() {
        assert_eq!(
            SharedSecret::new("short").validate(),
            Err(ConfigError::SecretTooShort { len: 5, min: 16 })
        );
        let s = SharedSecret::new(A);
        assert!(!format!("{s:?}").contains("0123"));
    }
}
