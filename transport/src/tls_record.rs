//! TLS 1.3 records after the handshake, sans-IO: sealing into and opening
//! in place in the caller's buffer, with the keys rustls hands over.
//!
//! rustls runs the TLS handshake; then `tls_read` takes the connection out
//! of rustls through its kernel API (`dangerous_into_kernel_connection`),
//! which hands over each direction's AEAD key, iv and sequence number, and
//! keeps the key schedule: on a key update rustls derives the next keys
//! (`KernelConnection::update_tx_secret` / `update_rx_secret`) and this
//! layer only seals and opens with them, on ring. Why not rustls's own
//! records: rustls 0.23 copies every received record's plaintext into a
//! fresh `Vec` (its unbuffered API too: `ReadTraffic::next_record` pops
//! that `Vec`), and encrypts each sent record into a fresh `Vec`. Here a
//! read fills our own buffer, each record is decrypted where it lies and
//! its frames are parsed there, and the writer's batch is sealed into one
//! buffer and written with one syscall.
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

use std::{fmt, ops::Range};

use bytes::{BufMut, BytesMut};
use ring::aead;
use rustls::ConnectionTrafficSecrets;

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
    /// rustls handed over keys of another cipher suite on a key update.
    #[error("TLS key update produced keys of another cipher suite")]
    KeyUpdate,
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

/// One direction's record protection: the AEAD key and iv rustls handed
/// over (at the start, or after a key update), and the sequence number of
/// the next record.
pub(crate) struct Keys {
    aead: &'static aead::Algorithm,
    key: aead::LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("aead", self.aead)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Keys from what rustls hands over for one direction, the next record
    /// numbered `seq`; `None` for a suite this layer does not know
    /// (rustls's ring provider offers only these three for TLS 1.3).
    pub(crate) fn new(secrets: &ConnectionTrafficSecrets, seq: u64) -> Option<Self> {
        let (aead, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return None,
        };
        let key = key.as_ref().get(..aead.key_len())?;
        let key = aead::LessSafeKey::new(aead::UnboundKey::new(aead, key).ok()?);
        Some(Self {
            aead,
            key,
            iv: iv.as_ref().try_into().ok()?,
            seq,
        })
    }

    /// The sequence number of the next record.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Replaces the keys with those of a key update (RFC 8446 §4.6.3), as
    /// rustls derived them; numbering restarts at `seq`.
    ///
    /// # Errors
    /// Keys of another suite than before: rustls never hands out such.
    pub(crate) fn update(
        &mut self,
        secrets: &ConnectionTrafficSecrets,
        seq: u64,
    ) -> Result<(), RecordError> {
        match Self::new(secrets, seq) {
            Some(next) if next.aead == self.aead => {
                *self = next;
                Ok(())
            }
            _ => Err(RecordError::KeyUpdate),
        }
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

/// Which end of the TLS connection a side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// We dialled.
    Client,
    /// We accepted.
    Server,
}

/// Fixed keys of each suite, for the fuzz entry and the tests.
#[cfg(any(test, fuzzing))]
fn test_secrets(mode: u8, byte: u8) -> ConnectionTrafficSecrets {
    let (key, iv) = (
        [byte; 32].into(),
        rustls::crypto::cipher::Iv::from([byte; 12]),
    );
    match mode % 3 {
        0 => ConnectionTrafficSecrets::Aes128Gcm { key, iv },
        1 => ConnectionTrafficSecrets::Aes256Gcm { key, iv },
        _ => ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv },
    }
}

/// Fuzzing entry (`fuzz/fuzz_targets/tls_records.rs`; not an API): seals
/// pieces of `data` into records, damages or cuts the wire as the rest of
/// `data` says, and opens what arrives as the reader does. Panics only if
/// the layer is wrong: a record that was not damaged must open to what was
/// sealed, in order, and nothing may panic on the damaged ones.
///
/// Compiled only for the unit tests and under `cargo fuzz` (`--cfg
/// fuzzing`), so it never ships in the library.
#[cfg(any(test, fuzzing))]
#[allow(unreachable_pub)] // re-exported at the root under cfg(fuzzing) only
#[doc(hidden)]
pub fn fuzz_records(data: &[u8]) {
    let [mode, pieces, rest @ ..] = data else {
        return;
    };
    let secrets = test_secrets(*mode, 0x5a);
    let (mut tx, mut rx) = (
        Keys::new(&secrets, 0).expect("a ring suite"),
        Keys::new(&secrets, 0).expect("a ring suite"),
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
        Keys::new(&test_secrets(1, 7), seq).unwrap()
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
    fn a_key_update_takes_the_keys_rustls_derived() {
        let (mut tx, mut rx) = (keys(9), keys(2));
        tx.update(&test_secrets(1, 8), 0).unwrap();
        rx.update(&test_secrets(1, 8), 0).unwrap();
        assert_eq!((tx.seq(), rx.seq()), (0, 0));
        let mut wire = BytesMut::new();
        tx.seal(APPLICATION_DATA, b"after", &mut wire);
        assert!(keys(0).open(&mut wire.clone()).is_err(), "old keys");
        let (_, range) = rx.open(&mut wire).unwrap();
        assert_eq!(&wire[range], b"after");
        // Another suite's keys are refused, and the old keys kept.
        assert_eq!(
            tx.update(&test_secrets(0, 8), 0),
            Err(RecordError::KeyUpdate)
        );
        assert_eq!(tx.seq(), 1);
    }
}
