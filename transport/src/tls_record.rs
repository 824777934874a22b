//! TLS 1.3 records after the handshake, sans-IO: sealing into and opening
//! in place in the caller's buffer, and the key schedule's `traffic upd`
//! step for key updates.
//!
//! rustls runs the handshake (and the protocol handshake, which is short).
//! Then `tls_read` takes the session's traffic keys out of rustls
//! (`dangerous_extract_secrets`) and carries on with these records: rustls
//! 0.23 copies every received record's plaintext into a fresh `Vec`
//! (its unbuffered API too: `ReadTraffic::next_record` pops that `Vec`),
//! reads at most 4 KiB per syscall, and encrypts each sent record into a
//! fresh `Vec`. Here a read fills our own buffer, each record is decrypted
//! where it lies and its frames are parsed there, and the writer's batch is
//! sealed into one buffer and written with one syscall.
//!
//! ```text
//!  record    ┌──────┬────────┬────────┬──────────────────────────────┬─────┐
//!  (wire)    │ 0x17 │ 0x0303 │ len u16│ ciphertext of: data ‖ type ‖ 0…│ tag │
//!            └──────┴────────┴────────┴──────────────────────────────┴─────┘
//!             header (5 bytes) = additional data       inner type: 23 data,
//!             len ≤ 2^14 + 256                         21 alert, 22 handshake
//!  nonce = iv XOR (0^4 ‖ seq as u64 big-endian), seq counting records from
//!  0 in each direction, and from 0 again after each key update.
//! ```
//!
//! A key update (RFC 8446 §4.6.3) replaces a direction's secret with
//! `HKDF-Expand-Label(secret, "traffic upd", "", Hash.length)` and derives
//! the key and iv from it (§7.3). rustls does not hand out traffic secrets
//! of a buffered connection, so [`SecretCapture`] takes them from its
//! key-log hook, for this connection only, and [`Keys::matches`] checks
//! them against the keys rustls extracts.

use std::{
    fmt,
    ops::Range,
    sync::{Mutex, PoisonError},
};

use bytes::{BufMut, BytesMut};
use ring::{aead, hkdf};
use rustls::{CipherSuite, ConnectionTrafficSecrets};

/// The bytes before a record's ciphertext.
pub(crate) const HEADER_LEN: usize = 5;
/// The AEAD tag after it (all TLS 1.3 suites).
pub(crate) const TAG_LEN: usize = 16;
/// The most plaintext one record carries (RFC 8446 §5.1).
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// The longest ciphertext a record may declare (RFC 8446 §5.2).
pub(crate) const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// The longest whole record.
pub(crate) const MAX_RECORD: usize = HEADER_LEN + MAX_CIPHERTEXT;

/// Content types (RFC 8446 §5.1).
pub(crate) const ALERT: u8 = 21;
/// A post-handshake message (a key update or a session ticket).
pub(crate) const HANDSHAKE: u8 = 22;
/// Application data: our frames.
pub(crate) const APPLICATION_DATA: u8 = 23;

/// Handshake message types met after the handshake (RFC 8446 §4).
pub(crate) const NEW_SESSION_TICKET: u8 = 4;
/// A key update.
pub(crate) const KEY_UPDATE: u8 = 24;

/// What is wrong with a record a peer sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordError {
    /// The outer type of a protected record is always application data.
    #[error(
        "TLS record of type {0} where only encrypted records (type 23) may follow the handshake"
    )]
    Type(u8),
    /// Longer than TLS allows: refused before it is buffered.
    #[error("TLS record length {len} exceeds limit {MAX_CIPHERTEXT}")]
    TooLong {
        /// The length the header declared.
        len: usize,
    },
    /// Shorter than its tag and inner type.
    #[error("TLS record length {len} is too short for a tag and content type")]
    TooShort {
        /// The length the header declared.
        len: usize,
    },
    /// The AEAD refused it: damaged, forged, or out of order.
    #[error("TLS record failed to decrypt (bad_record_mac)")]
    Decrypt,
    /// All padding, no content type.
    #[error("TLS record has no content type (all padding)")]
    NoContentType,
    /// More plaintext than a record may carry.
    #[error("TLS record plaintext of {len} bytes exceeds limit {MAX_PLAINTEXT}")]
    PlaintextTooLong {
        /// The plaintext length.
        len: usize,
    },
}

/// The whole length of the record at the start of `buf`, checked; `None`
/// if not even its header is there yet.
pub(crate) fn record_len(buf: &[u8]) -> Result<Option<usize>, RecordError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    if header[0] != APPLICATION_DATA {
        return Err(RecordError::Type(header[0]));
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len > MAX_CIPHERTEXT {
        return Err(RecordError::TooLong { len });
    }
    if len <= TAG_LEN {
        return Err(RecordError::TooShort { len });
    }
    Ok(Some(HEADER_LEN + len))
}

/// A TLS 1.3 cipher suite's AEAD and hash.
#[derive(Clone, Copy)]
pub(crate) struct Suite {
    aead: &'static aead::Algorithm,
    hkdf: hkdf::Algorithm,
    /// Records one key may seal before it must be updated: 2^24 for
    /// AES-GCM (RFC 8446 §5.5, rustls's own limit), none for ChaCha20.
    limit: u64,
}

impl Suite {
    /// The suite rustls negotiated; `None` for one this layer does not know
    /// (rustls's ring provider offers only these three for TLS 1.3).
    pub(crate) fn of(suite: CipherSuite) -> Option<Self> {
        const AES_GCM_LIMIT: u64 = 1 << 24;
        let (aead, hkdf, limit) = match suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => {
                (&aead::AES_128_GCM, hkdf::HKDF_SHA256, AES_GCM_LIMIT)
            }
            CipherSuite::TLS13_AES_256_GCM_SHA384 => {
                (&aead::AES_256_GCM, hkdf::HKDF_SHA384, AES_GCM_LIMIT)
            }
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => {
                (&aead::CHACHA20_POLY1305, hkdf::HKDF_SHA256, u64::MAX)
            }
            _ => return None,
        };
        Some(Self { aead, hkdf, limit })
    }

    /// How many records one key may seal.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    fn hash_len(&self) -> usize {
        self.hkdf.hmac_algorithm().digest_algorithm().output_len()
    }
}

impl fmt::Debug for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Suite").field("aead", self.aead).finish()
    }
}

/// `HKDF-Expand-Label(secret, label, "", out.len())` (RFC 8446 §7.1).
fn expand_label(alg: hkdf::Algorithm, secret: &[u8], label: &[u8], out: &mut [u8]) {
    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let len = u16::try_from(out.len())
        .expect("labels expand to at most a hash length")
        .to_be_bytes();
    let label_len = [u8::try_from(6 + label.len()).expect("labels are short")];
    let info: [&[u8]; 5] = [&len, &label_len, b"tls13 ", label, &[0]];
    hkdf::Prk::new_less_safe(alg, secret)
        .expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("a hash length or less is within HKDF's 255 blocks");
}

/// A traffic secret, wiped when dropped.
struct Secret(Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

/// One direction's record protection: the traffic secret, the key and iv
/// derived from it, and the sequence number of the next record.
pub(crate) struct Keys {
    suite: Suite,
    secret: Secret,
    key: aead::LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("suite", &self.suite)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Keys from a traffic secret, the next record numbered `seq`.
    pub(crate) fn new(suite: Suite, secret: Vec<u8>, seq: u64) -> Self {
        let (key, iv) = Self::derive(suite, &secret);
        Self {
            suite,
            secret: Secret(secret),
            key,
            iv,
            seq,
        }
    }

    fn derive(suite: Suite, secret: &[u8]) -> (aead::LessSafeKey, [u8; aead::NONCE_LEN]) {
        let mut key = [0u8; 32];
        let key = &mut key[..suite.aead.key_len()];
        expand_label(suite.hkdf, secret, b"key", key);
        let mut iv = [0u8; aead::NONCE_LEN];
        expand_label(suite.hkdf, secret, b"iv", &mut iv);
        let unbound = aead::UnboundKey::new(suite.aead, key)
            .expect("the key is as long as the algorithm's key");
        key.fill(0);
        (aead::LessSafeKey::new(unbound), iv)
    }

    /// Whether these keys are the ones rustls extracted for this direction
    /// (they are unless rustls updated them before we took over).
    pub(crate) fn matches(&self, extracted: &ConnectionTrafficSecrets) -> bool {
        let (key, iv) = match extracted {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
            _ => return false,
        };
        let mut derived = [0u8; 32];
        let derived = &mut derived[..self.suite.aead.key_len()];
        expand_label(self.suite.hkdf, &self.secret.0, b"key", derived);
        let same = key.as_ref() == &derived[..] && iv.as_ref() == self.iv;
        derived.fill(0);
        same
    }

    /// The suite.
    pub(crate) fn suite(&self) -> Suite {
        self.suite
    }

    /// The sequence number of the next record.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// The next secret, key and iv (RFC 8446 §7.2); numbering restarts.
    pub(crate) fn update(&mut self) {
        let mut next = vec![0u8; self.suite.hash_len()];
        expand_label(self.suite.hkdf, &self.secret.0, b"traffic upd", &mut next);
        *self = Self::new(self.suite, next, 0);
    }

    fn nonce(&self) -> aead::Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        aead::Nonce::assume_unique_for_key(nonce)
    }

    /// Appends one record of content type `typ` carrying `data` (at most
    /// [`MAX_PLAINTEXT`] bytes) to `out`, sealed in place there.
    pub(crate) fn seal(&mut self, typ: u8, data: &[u8], out: &mut BytesMut) {
        debug_assert!(data.len() <= MAX_PLAINTEXT);
        let len = data.len() + 1 + TAG_LEN;
        let len16 = u16::try_from(len).expect("a record's plaintext is at most 2^14 bytes");
        let [hi, lo] = len16.to_be_bytes();
        let header = [APPLICATION_DATA, 3, 3, hi, lo];
        out.reserve(HEADER_LEN + len);
        out.put_slice(&header);
        let start = out.len();
        out.put_slice(data);
        out.put_u8(typ);
        let tag = self
            .key
            .seal_in_place_separate_tag(self.nonce(), aead::Aad::from(header), &mut out[start..])
            .expect("a record is far below the AEAD's length limit");
        out.put_slice(tag.as_ref());
        self.seq += 1;
    }

    /// Opens the whole record `record` (as long as [`record_len`] said) in
    /// place: its inner content type, and where its plaintext lies in
    /// `record`.
    pub(crate) fn open(&mut self, record: &mut [u8]) -> Result<(u8, Range<usize>), RecordError> {
        let (header, body) = record.split_at_mut(HEADER_LEN);
        let header: [u8; HEADER_LEN] = (*header).try_into().expect("split at HEADER_LEN");
        let plain = self
            .key
            .open_in_place(self.nonce(), aead::Aad::from(header), body)
            .map_err(|_| RecordError::Decrypt)?;
        self.seq += 1;
        let end = plain
            .iter()
            .rposition(|&b| b != 0)
            .ok_or(RecordError::NoContentType)?;
        if end > MAX_PLAINTEXT {
            return Err(RecordError::PlaintextTooLong { len: end });
        }
        Ok((plain[end], HEADER_LEN..HEADER_LEN + end))
    }
}

/// Which of a connection's two traffic secrets is which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// We dialled: we send with the client's secret.
    Client,
    /// We accepted: we send with the server's secret.
    Server,
}

/// The key-log hook of one connection's rustls configuration, keeping its
/// two application traffic secrets (and logging nothing anywhere).
#[derive(Default)]
pub(crate) struct SecretCapture {
    secrets: Mutex<[Option<Secret>; 2]>,
}

const CLIENT_SECRET: &str = "CLIENT_TRAFFIC_SECRET_0";
const SERVER_SECRET: &str = "SERVER_TRAFFIC_SECRET_0";

impl fmt::Debug for SecretCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretCapture")
    }
}

impl rustls::KeyLog for SecretCapture {
    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        let slot = match label {
            CLIENT_SECRET => 0,
            SERVER_SECRET => 1,
            _ => return,
        };
        self.secrets.lock().unwrap_or_else(PoisonError::into_inner)[slot] =
            Some(Secret(secret.to_vec()));
    }

    fn will_log(&self, label: &str) -> bool {
        matches!(label, CLIENT_SECRET | SERVER_SECRET)
    }
}

impl SecretCapture {
    /// The `(send, receive)` traffic secrets for `role`, taken out; `None`
    /// if rustls did not log them.
    pub(crate) fn take(&self, role: Role) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut s = self.secrets.lock().unwrap_or_else(PoisonError::into_inner);
        let client = mem_take(s[0].take()?);
        let server = mem_take(s[1].take()?);
        Some(match role {
            Role::Client => (client, server),
            Role::Server => (server, client),
        })
    }
}

fn mem_take(mut s: Secret) -> Vec<u8> {
    std::mem::take(&mut s.0)
}

/// Fuzzing entry (`fuzz/fuzz_targets/tls_records.rs`; not an API): seals
/// pieces of `data` into records, damages or cuts the wire as the rest of
/// `data` says, and opens what arrives as the reader does. Panics only if
/// the layer is wrong: a record that was not damaged must open to what was
/// sealed, in order, and nothing may panic on the damaged ones.
#[doc(hidden)]
pub fn fuzz_records(data: &[u8]) {
    let [mode, pieces, rest @ ..] = data else {
        return;
    };
    let suite = [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ][usize::from(mode % 3)];
    let suite = Suite::of(suite).expect("a ring suite");
    let secret = vec![0x5a; suite.hash_len()];
    let (mut tx, mut rx) = (
        Keys::new(suite, secret.clone(), 0),
        Keys::new(suite, secret, 0),
    );
    // The first half is sealed, in up to 8 pieces with inner types from
    // the mode; the second half says which wire bytes to damage.
    let (plain, damage) = rest.split_at(rest.len() / 2);
    let n = usize::from(pieces % 8) + 1;
    let size = plain.len().div_ceil(n).max(1);
    let types = [APPLICATION_DATA, ALERT, HANDSHAKE];
    let mut wire = BytesMut::new();
    let mut sent = Vec::new();
    for (i, piece) in plain.chunks(size).enumerate() {
        let typ = types[(usize::from(*mode) + i) % 3];
        let start = wire.len();
        tx.seal(typ, piece, &mut wire);
        sent.push((start..wire.len(), typ, piece));
    }
    let mut damaged = Vec::new();
    for pair in damage.chunks(3) {
        if let ([hi, lo, x], false) = (pair, wire.is_empty()) {
            let at = usize::from(u16::from_be_bytes([*hi, *lo])) % wire.len();
            if *x != 0 {
                wire[at] ^= x;
                damaged.push(at);
            }
        }
    }
    if mode & 0x80 != 0 && !wire.is_empty() {
        // Cut the stream short somewhere.
        let cut = usize::from(damage.first().copied().unwrap_or(0)) % wire.len();
        wire.truncate(cut);
    }
    let mut pos = 0;
    for (range, typ, piece) in sent {
        let Ok(Some(len)) = record_len(&wire[pos..]) else {
            return;
        };
        if pos + len > wire.len() {
            return;
        }
        let opened = rx.open(&mut wire[pos..pos + len]);
        let intact = range == (pos..pos + len) && !damaged.iter().any(|d| range.contains(d));
        match opened {
            Ok((t, plain)) if intact => {
                assert_eq!(t, typ, "an intact record keeps its type");
                assert_eq!(
                    &wire[pos..][plain],
                    piece,
                    "an intact record opens to what was sealed"
                );
            }
            Ok(_) => {}
            Err(e) => {
                assert!(!intact, "an intact record was refused: {e}");
                return;
            }
        }
        pos += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(seq: u64) -> Keys {
        let suite = Suite::of(CipherSuite::TLS13_AES_256_GCM_SHA384).unwrap();
        Keys::new(suite, vec![7; 48], seq)
    }

    #[test]
    fn the_fuzz_entry_holds_on_seeded_inputs() {
        // What `fuzz/run.sh tls_records` runs for long, briefly on stable:
        // intact, damaged and cut streams of every suite and piece count.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..600usize {
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fuzz_records(&input);
            // The same input with nothing damaged: the second half zeroed.
            let mut clean = input.clone();
            let half = 2 + (len.saturating_sub(2)) / 2;
            clean.iter_mut().skip(half.min(len)).for_each(|b| *b = 0);
            fuzz_records(&clean);
        }
    }

    #[test]
    fn sealed_records_open_in_place_in_order() {
        let (mut tx, mut rx) = (keys(3), keys(3));
        let mut wire = BytesMut::new();
        tx.seal(APPLICATION_DATA, b"hello", &mut wire);
        tx.seal(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], &mut wire);
        let n = record_len(&wire).unwrap().unwrap();
        assert_eq!(n, HEADER_LEN + 5 + 1 + TAG_LEN);
        let (typ, range) = rx.open(&mut wire[..n]).unwrap();
        assert_eq!((typ, &wire[range]), (APPLICATION_DATA, &b"hello"[..]));
        let rest = &mut wire[n..];
        let (typ, range) = rx.open(rest).unwrap();
        assert_eq!(typ, HANDSHAKE);
        assert_eq!(&rest[range], &[KEY_UPDATE, 0, 0, 1, 0]);
        assert_eq!((tx.seq(), rx.seq()), (5, 5));
    }

    #[test]
    fn damaged_replayed_or_misnumbered_records_are_refused() {
        let mut tx = keys(0);
        let mut wire = BytesMut::new();
        tx.seal(APPLICATION_DATA, b"hello", &mut wire);
        for i in 0..wire.len() {
            let mut bad = wire.clone();
            bad[i] ^= 1;
            assert_eq!(
                keys(0).open(&mut bad).unwrap_err(),
                RecordError::Decrypt,
                "{i}"
            );
        }
        assert_eq!(
            keys(1).open(&mut wire.clone()).unwrap_err(),
            RecordError::Decrypt
        );
        let mut rx = keys(0);
        rx.open(&mut wire.clone()).unwrap();
        assert_eq!(
            rx.open(&mut wire.clone()).unwrap_err(),
            RecordError::Decrypt
        );
    }

    #[test]
    fn headers_are_checked_before_anything_is_buffered() {
        assert_eq!(record_len(&[23, 3, 3, 0]), Ok(None));
        assert_eq!(record_len(&[22, 3, 3, 0, 40]), Err(RecordError::Type(22)));
        assert_eq!(
            record_len(&[23, 3, 3, 0xff, 0xff]),
            Err(RecordError::TooLong { len: 65535 })
        );
        assert_eq!(
            record_len(&[23, 3, 3, 0, 16]),
            Err(RecordError::TooShort { len: 16 })
        );
        assert_eq!(
            record_len(&[23, 3, 3, 0x41, 0x00]),
            Ok(Some(HEADER_LEN + MAX_CIPHERTEXT))
        );
        assert_eq!(
            RecordError::TooLong { len: 65535 }.to_string(),
            "TLS record length 65535 exceeds limit 16640"
        );
    }

    #[test]
    fn padding_is_stripped_and_all_padding_refused() {
        let mut tx = keys(0);
        let mut rx = keys(0);
        let mut wire = BytesMut::new();
        // Sealed as data "ab" of type 0 followed by the real type 21 and
        // two bytes of padding: plaintext "ab\0" ‖ 21 ‖ 0 0.
        tx.seal(0, b"ab\0\x15\0", &mut wire);
        let (typ, range) = rx.open(&mut wire).unwrap();
        assert_eq!((typ, &wire[range]), (ALERT, &b"ab\0"[..]));
        let mut wire = BytesMut::new();
        tx.seal(0, b"\0\0", &mut wire);
        assert_eq!(rx.open(&mut wire), Err(RecordError::NoContentType));
    }

    #[test]
    fn keys_are_checked_against_those_rustls_extracted() {
        use rustls::crypto::cipher::Iv;
        let k = keys(0);
        let mut key = [0u8; 32];
        expand_label(k.suite.hkdf, &k.secret.0, b"key", &mut key);
        let extracted = |key: [u8; 32], iv: [u8; 12]| ConnectionTrafficSecrets::Aes256Gcm {
            key: key.into(),
            iv: Iv::from(iv),
        };
        assert!(k.matches(&extracted(key, k.iv)));
        let mut other = key;
        other[31] ^= 1;
        assert!(!k.matches(&extracted(other, k.iv)));
        let mut iv = k.iv;
        iv[0] ^= 1;
        assert!(!k.matches(&extracted(key, iv)));
    }

    #[test]
    fn a_key_update_changes_the_keys_on_both_sides_alike() {
        let (mut tx, mut rx) = (keys(9), keys(2));
        tx.update();
        rx.update();
        assert_eq!((tx.seq(), rx.seq()), (0, 0));
        let mut wire = BytesMut::new();
        tx.seal(APPLICATION_DATA, b"after", &mut wire);
        assert!(keys(0).open(&mut wire.clone()).is_err(), "old keys");
        let (_, range) = rx.open(&mut wire).unwrap();
        assert_eq!(&wire[range], b"after");
    }
}
