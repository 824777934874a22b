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
//!
//! Over TLS the proof is also bound to the TLS session (channel binding):
//! the label becomes `"ACTR auth v2 tls-keys"` and 32 bytes that both ends
//! derive from their TLS session's initial traffic keys
//! ([`CHANNEL_BINDING_LABEL`]) follow the addresses. A relay that
//! terminates TLS towards both nodes sits in two sessions with two
//! different keys, so a proof it forwards from one session does not verify
//! in the other.
//!
//! Pure code: no IO, no clock, no randomness (nonces and exporter values
//! are passed in).

use std::{fmt, sync::Arc};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{ConfigError, SecretSource};

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
/// Domain separation for a proof bound to a TLS session: it can never be
/// taken for an unbound one.
const LABEL_BOUND: &[u8] = b"ACTR auth v2 tls-keys";
/// The label of a TLS session's channel binding: SHA-256 of this label,
/// then the client's initial traffic key and iv, then the server's (the
/// keys rustls hands over after the handshake; docs/PROTOCOL.md).
pub const CHANNEL_BINDING_LABEL: &[u8] = b"ACTR tls channel binding";
/// Bytes of the channel binding a proof is bound to.
pub const EXPORTER_LEN: usize = 32;

/// What a proof is bound to besides the handshake transcript: a digest of
/// the TLS session's traffic keys, when the connection runs TLS.
pub type ChannelBinding = [u8; EXPORTER_LEN];

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
    source: SecretSource,
}

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSecret")
            .field("secrets", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl SharedSecret {
    /// The current secret (at least [`MIN_SECRET_LEN`] bytes; checked by
    /// [`TransportConfig::set_shared_secret`](crate::TransportConfig::set_shared_secret),
    /// and at bind for one from the environment or a cookie file).
    pub fn new(current: impl Into<Vec<u8>>) -> Self {
        Self {
            keys: Arc::from(vec![current.into()]),
            source: SecretSource::Configured,
        }
    }

    /// Also accepts (and proves) `previous`, for a rotation without a
    /// partition. Replaces an earlier previous secret.
    pub fn with_previous(self, previous: impl Into<Vec<u8>>) -> Self {
        let current = self.keys[0].clone();
        Self {
            keys: Arc::from(vec![current, previous.into()]),
            source: self.source,
        }
    }

    /// Where this secret came from: [`SecretSource::Configured`] for one
    /// made with [`new`](Self::new).
    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// A 32-byte key for another protocol, derived from each secret this
    /// one accepts (the current first): HMAC-SHA256 keyed with the secret
    /// over `label`. The secret itself never leaves this type; a key
    /// derived for one label tells nothing of the secret or of another
    /// label's key. Used by the actor runtime's cluster membership to
    /// authenticate its UDP packets with the nodes' shared secret.
    pub fn derive_keys(&self, label: &[u8]) -> Vec<[u8; 32]> {
        self.keys
            .iter()
            .map(|k| {
                let mut m =
                    <Hmac<Sha256> as Mac>::new_from_slice(k).expect("hmac takes any key length");
                m.update(label);
                m.finalize().into_bytes().into()
            })
            .collect()
    }

    /// This secret, recorded as coming from `source`.
    pub(crate) fn with_source(self, source: SecretSource) -> Self {
        Self { source, ..self }
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

    /// The proofs this node sends: one per secret, current first, bound to
    /// `binding` when the connection has one (TLS).
    pub(crate) fn prove(
        &self,
        author: &Party<'_>,
        reader: &Party<'_>,
        binding: Option<&ChannelBinding>,
    ) -> Vec<[u8; MAC_LEN]> {
        self.keys
            .iter()
            .map(|k| {
                mac(k, author, reader, binding)
                    .finalize()
                    .into_bytes()
                    .into()
            })
            .collect()
    }

    /// True if any of `proofs` was made by `author` for `reader`, bound to
    /// `binding`, with any of our secrets. Each comparison is constant-time.
    pub(crate) fn verify(
        &self,
        proofs: &[u8],
        author: &Party<'_>,
        reader: &Party<'_>,
        binding: Option<&ChannelBinding>,
    ) -> bool {
        proofs.chunks_exact(MAC_LEN).any(|tag| {
            self.keys
                .iter()
                .any(|k| mac(k, author, reader, binding).verify_slice(tag).is_ok())
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

fn mac(
    key: &[u8],
    author: &Party<'_>,
    reader: &Party<'_>,
    binding: Option<&ChannelBinding>,
) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; the `expect` cannot fire.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    m.update(if binding.is_some() {
        LABEL_BOUND
    } else {
        LABEL
    });
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
    if let Some(b) = binding {
        m.update(b);
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
        let p = s.prove(&d, &l, None).concat();
        assert!(s.verify(&p, &d, &l, None));
        assert!(!SharedSecret::new(B).verify(&p, &d, &l, None));
    }

    #[test]
    fn rotation_accepts_either_secret_both_ways() {
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let old = SharedSecret::new(B);
        let both = SharedSecret::new(A).with_previous(B);
        let new = SharedSecret::new(A);
        // Old node ↔ rotating node, rotating node ↔ new node.
        assert!(old.verify(&both.prove(&d, &l, None).concat(), &d, &l, None));
        assert!(both.verify(&old.prove(&d, &l, None).concat(), &d, &l, None));
        assert!(new.verify(&both.prove(&d, &l, None).concat(), &d, &l, None));
        assert!(both.verify(&new.prove(&d, &l, None).concat(), &d, &l, None));
        // But old and new alone cannot talk.
        assert!(!new.verify(&old.prove(&d, &l, None).concat(), &d, &l, None));
    }

    #[test]
    fn proof_binds_nonces_roles_uids_and_addrs() {
        let s = SharedSecret::new(A);
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let p = s.prove(&d, &l, None).concat();
        // Another connection's nonce (replay).
        let (d2, l2) = parties(&[1; 32], &[3; 32]);
        assert!(!s.verify(&p, &d2, &l2, None));
        // Reflected: the same transcript read as the other direction.
        assert!(!s.verify(&p, &l, &d, None));
        let mut d3 = d;
        d3.role = Role::Listener;
        assert!(!s.verify(&p, &d3, &l, None));
        let mut d4 = d;
        d4.uid = 9;
        assert!(!s.verify(&p, &d4, &l, None));
        let mut l5 = l;
        l5.addr = "b:3";
        assert!(!s.verify(&p, &d, &l5, None));
    }

    #[test]
    fn proof_bound_to_one_tls_session_does_not_verify_in_another() {
        let s = SharedSecret::new(A);
        let (d, l) = parties(&[1; 32], &[2; 32]);
        let (x, y) = ([7u8; EXPORTER_LEN], [8u8; EXPORTER_LEN]);
        let p = s.prove(&d, &l, Some(&x)).concat();
        assert!(s.verify(&p, &d, &l, Some(&x)));
        // A relay's two sessions export different values.
        assert!(!s.verify(&p, &d, &l, Some(&y)));
        // Nor is a bound proof an unbound one, or the reverse.
        assert!(!s.verify(&p, &d, &l, None));
        let unbound = s.prove(&d, &l, None).concat();
        assert!(!s.verify(&unbound, &d, &l, Some(&x)));
    }

    #[test]
    fn source_is_kept_through_rotation_and_named() {
        let s = SharedSecret::new(A)
            .with_source(SecretSource::CookieFile("/h/.actors.cookie".into()))
            .with_previous(B);
        assert_eq!(
            s.source(),
            &SecretSource::CookieFile("/h/.actors.cookie".into())
        );
        assert_eq!(s.source().to_string(), "cookie file /h/.actors.cookie");
        assert_eq!(
            SharedSecret::new(A).source().to_string(),
            "configured with set_shared_secret"
        );
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
