//! What cluster membership puts on the wire: member identities, foca's
//! codec over this crate's bounded bincode format, and the authenticated
//! UDP packet around it. Pure: no IO, no clock.
//!
//! ```text
//! +----------+---------+------+------------------+---------+
//! | "RC" 2 B | version | kind | tag 16 B         | payload |
//! +----------+---------+------+------------------+---------+
//! ```
//!
//! `tag` is HMAC-SHA256 (truncated to 16 bytes) over version, kind and
//! payload, keyed with a key derived from the nodes' shared secret (label
//! [`KEY_LABEL`]). `kind` [`KIND_SWIM`]: the payload is one foca packet;
//! [`KIND_LEAVE`]: the payload is the [`Id`] of a member leaving the
//! cluster gracefully; [`KIND_SUSPECTED`]: the payload is a foca member
//! update (`Id`, incarnation, state) telling its addressee that the
//! sender holds it suspect at that incarnation (see `suspicion.rs`).

use std::{fmt, net::SocketAddr};

use bytes::{Buf, BufMut, BytesMut};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::bincode_format;

/// The label membership keys are derived for from the shared secret.
pub(crate) const KEY_LABEL: &[u8] = b"remoting cluster membership v1";
/// Packet magic.
const MAGIC: [u8; 2] = *b"RC";
/// Packet format version.
const VERSION: u8 = 1;
/// Packet kind: a foca (SWIM) packet.
pub(crate) const KIND_SWIM: u8 = 0;
/// Packet kind: a member leaves gracefully.
pub(crate) const KIND_LEAVE: u8 = 1;
/// Packet kind: "I hold you suspect at this incarnation": sent to a
/// suspected member that talks to us without having refuted.
pub(crate) const KIND_SUSPECTED: u8 = 2;
/// Tag length (HMAC-SHA256 truncated, as RFC 2104 allows).
const TAG_LEN: usize = 16;
/// Header bytes before the payload.
pub(crate) const HEADER_LEN: usize = 2 + 1 + 1 + TAG_LEN;

/// A member incarnation as membership knows it: its node address (the
/// one remoting paths use), the uid its transport handshake proves, where
/// its membership packets go, and when it started (which of two
/// incarnations of one node address is the newer).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct Id {
    pub(crate) node: String,
    pub(crate) uid: u64,
    pub(crate) udp: SocketAddr,
    pub(crate) started_ms: u64,
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{:x}", transport::PeerText(&self.node), self.uid)
    }
}

impl Id {
    /// A stand-in for a seed whose identity is not known yet: foca sends
    /// the announce to its address, and the answer comes from the real
    /// member (foca accepts an announce addressed to any identity at its
    /// address). A uid of 0 is never a real incarnation's.
    pub(crate) fn seed(udp: SocketAddr) -> Self {
        Self {
            node: format!("seed@{udp}"),
            uid: 0,
            udp,
            started_ms: 0,
        }
    }

    /// Whether this is a [`seed`](Self::seed) stand-in.
    pub(crate) fn is_seed(&self) -> bool {
        self.uid == 0 && self.started_ms == 0
    }
}

impl foca::Identity for Id {
    /// Where it takes packets: what foca tells incarnations apart by, and
    /// what an announce to a seed is accepted by.
    type Addr = SocketAddr;

    /// A member judged down stays down: its incarnation is quarantined by
    /// remoting, so only a restart (a new uid) brings the node back.
    fn renew(&self) -> Option<Self> {
        None
    }

    fn addr(&self) -> SocketAddr {
        self.udp
    }

    /// Of two incarnations at one address, the later started wins.
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        (self.started_ms, self.uid) > (adversary.started_ms, adversary.uid)
    }
}

/// Why membership input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// Shorter than a header, wrong magic or version.
    #[error("not a membership packet")]
    Malformed,
    /// The tag does not verify with any key: not from a member that knows
    /// the secret, or altered on the way.
    #[error("authentication failed")]
    Unauthenticated,
    /// A kind this version does not know.
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
    /// The payload does not decode.
    #[error("undecodable: {0}")]
    Decode(String),
    /// It names a member this node has no room for
    /// (`ClusterConfig::set_max_members`).
    #[error("member table full ({0} members)")]
    Full(usize),
}

/// Which member addresses this node keeps, and how many it may: checked
/// as foca's input is decoded, so a packet naming a member past the bound
/// is refused whole before foca stores anything of it.
#[derive(Debug)]
pub(crate) struct Admission {
    limit: usize,
    known: std::sync::Mutex<std::collections::HashSet<SocketAddr>>,
}

impl Admission {
    /// Room for `limit` addresses; `me` is always known.
    pub(crate) fn new(limit: usize, me: SocketAddr) -> Self {
        Self {
            limit: limit.saturating_add(1),
            known: std::sync::Mutex::new(std::iter::once(me).collect()),
        }
    }

    fn admit(&self, id: &Id) -> Result<(), WireError> {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.contains(&id.udp) {
            return Ok(());
        }
        if known.len() >= self.limit {
            return Err(WireError::Full(self.limit - 1));
        }
        known.insert(id.udp);
        Ok(())
    }

    /// Forgets addresses foca no longer holds: `me` and `held` stay.
    pub(crate) fn resync(&self, me: SocketAddr, held: impl Iterator<Item = SocketAddr>) {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.clear();
        known.insert(me);
        known.extend(held);
    }
}

fn tag(key: &[u8; 32], kind: u8, payload: &[u8]) -> [u8; TAG_LEN] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    m.update(&[VERSION, kind]);
    m.update(payload);
    let full = m.finalize().into_bytes();
    let mut t = [0; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

/// Seals `payload` of `kind` into a packet, tagged with `key`.
pub(crate) fn seal(key: &[u8; 32], kind: u8, payload: &[u8], out: &mut BytesMut) {
    out.clear();
    out.reserve(HEADER_LEN + payload.len());
    out.put_slice(&MAGIC);
    out.put_u8(VERSION);
    out.put_u8(kind);
    out.put_slice(&tag(key, kind, payload));
    out.put_slice(payload);
}

/// Opens a packet: its kind and payload, if its tag verifies with one of
/// `keys` (constant-time comparison).
pub(crate) fn open<'a>(keys: &[[u8; 32]], packet: &'a [u8]) -> Result<(u8, &'a [u8]), WireError> {
    if packet.len() < HEADER_LEN || packet[..2] != MAGIC || packet[2] != VERSION {
        return Err(WireError::Malformed);
    }
    let kind = packet[3];
    let (t, payload) = packet[4..].split_at(TAG_LEN);
    let ok = keys.iter().any(|k| {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(k).expect("hmac takes any key length");
        m.update(&[VERSION, kind]);
        m.update(payload);
        m.verify_truncated_left(t).is_ok()
    });
    if !ok {
        return Err(WireError::Unauthenticated);
    }
    if !matches!(kind, KIND_SWIM | KIND_LEAVE | KIND_SUSPECTED) {
        return Err(WireError::UnknownKind(kind));
    }
    Ok((kind, payload))
}

/// Encodes a leave notice.
pub(crate) fn encode_leave(id: &Id) -> BytesMut {
    let mut out = BytesMut::new();
    // An `Id` always encodes: strings, integers, an address.
    let _ = bincode_format::to_buf(id, &mut out, usize::MAX);
    out
}

/// Decodes a leave notice.
pub(crate) fn decode_leave(payload: &[u8]) -> Result<Id, WireError> {
    match bincode_format::from_slice::<Id>(payload) {
        Ok((id, used)) if used == payload.len() => Ok(id),
        Ok(_) => Err(WireError::Decode("trailing bytes".into())),
        Err(e) => Err(WireError::Decode(e.to_string())),
    }
}

/// Encodes a suspicion notice: `member` (its addressee) is held suspect
/// at `member`'s incarnation.
pub(crate) fn encode_suspected(member: &foca::Member<Id>) -> BytesMut {
    let mut out = BytesMut::new();
    // A member update always encodes: an `Id`, an integer, a state.
    let _ = bincode_format::to_buf(member, &mut out, usize::MAX);
    out
}

/// Decodes a suspicion notice; only a suspicion decodes.
pub(crate) fn decode_suspected(payload: &[u8]) -> Result<foca::Member<Id>, WireError> {
    match bincode_format::from_slice::<foca::Member<Id>>(payload) {
        Ok((m, used)) if used == payload.len() && m.state() == foca::State::Suspect => Ok(m),
        Ok((m, used)) if used == payload.len() => Err(WireError::Decode(format!(
            "a suspicion notice says {:?}",
            m.state()
        ))),
        Ok(_) => Err(WireError::Decode("trailing bytes".into())),
        Err(e) => Err(WireError::Decode(e.to_string())),
    }
}

/// The header of a foca packet, decoded without admitting anyone (the
/// packet itself goes through foca and [`Codec`] afterwards).
pub(crate) fn peek_header(payload: &[u8]) -> Option<foca::Header<Id>> {
    bincode_format::from_slice::<foca::Header<Id>>(payload)
        .ok()
        .map(|(h, _)| h)
}

/// Where a foca packet from `me` carries its sender's incarnation: right
/// after the header's first field, `me` itself.
pub(crate) fn incarnation_offset(me: &Id) -> usize {
    encode_leave(me).len()
}

/// The sender's incarnation in foca packet `payload`, found at `at`
/// ([`incarnation_offset`] of the sender).
pub(crate) fn incarnation_at(payload: &[u8], at: usize) -> Option<foca::Incarnation> {
    let rest = payload.get(at..)?;
    bincode_format::from_slice::<foca::Incarnation>(rest)
        .ok()
        .map(|(i, _)| i)
}

/// foca's codec: its headers and member updates in this crate's bincode
/// format, whose decoder bounds every length by the bytes that arrived.
#[derive(Debug, Default)]
pub(crate) struct Codec {
    scratch: BytesMut,
    /// The member bound, if any.
    admission: Option<std::sync::Arc<Admission>>,
}

impl Codec {
    /// A codec that admits at most `admission`'s members.
    pub(crate) fn bounded(admission: std::sync::Arc<Admission>) -> Self {
        Self {
            scratch: BytesMut::new(),
            admission: Some(admission),
        }
    }

    fn encode<T: Serialize>(&mut self, value: &T, mut buf: impl BufMut) -> Result<(), WireError> {
        self.scratch.clear();
        bincode_format::to_buf(value, &mut self.scratch, usize::MAX)
            .map_err(|e| WireError::Decode(e.to_string()))?;
        if buf.remaining_mut() < self.scratch.len() {
            return Err(WireError::Decode("packet full".into()));
        }
        buf.put_slice(&self.scratch);
        Ok(())
    }

    fn decode<T: for<'de> Deserialize<'de>>(mut buf: impl Buf) -> Result<T, WireError> {
        let (value, used) = bincode_format::from_slice::<T>(buf.chunk())
            .map_err(|e| WireError::Decode(e.to_string()))?;
        buf.advance(used);
        Ok(value)
    }
}

impl foca::Codec<Id> for Codec {
    type Error = WireError;

    fn encode_header(
        &mut self,
        header: &foca::Header<Id>,
        buf: impl BufMut,
    ) -> Result<(), WireError> {
        self.encode(header, buf)
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<foca::Header<Id>, WireError> {
        let header: foca::Header<Id> = Self::decode(buf)?;
        if let Some(a) = &self.admission {
            a.admit(&header.src)?;
        }
        Ok(header)
    }

    fn encode_member(
        &mut self,
        member: &foca::Member<Id>,
        buf: impl BufMut,
    ) -> Result<(), WireError> {
        self.encode(member, buf)
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<foca::Member<Id>, WireError> {
        let member: foca::Member<Id> = Self::decode(buf)?;
        if let Some(a) = &self.admission {
            a.admit(member.id())?;
        }
        Ok(member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn id() -> Id {
        Id {
            node: "a@127.0.0.1:1".into(),
            uid: 9,
            udp: "127.0.0.1:1".parse().unwrap(),
            started_ms: 5,
        }
    }

    #[test]
    fn sealed_packets_open_with_the_key_and_no_other() {
        let mut p = BytesMut::new();
        seal(&KEY, KIND_SWIM, b"hello", &mut p);
        assert_eq!(open(&[KEY], &p), Ok((KIND_SWIM, &b"hello"[..])));
        // The previous key of a rotation also opens it.
        assert_eq!(open(&[[1; 32], KEY], &p), Ok((KIND_SWIM, &b"hello"[..])));
        assert_eq!(open(&[[1; 32]], &p), Err(WireError::Unauthenticated));
    }

    #[test]
    fn any_altered_byte_fails_authentication() {
        let mut p = BytesMut::new();
        seal(&KEY, KIND_LEAVE, &encode_leave(&id()), &mut p);
        for i in 2..p.len() {
            let mut q = p.to_vec();
            q[i] ^= 1;
            assert!(open(&[KEY], &q).is_err(), "byte {i} altered and accepted");
        }
    }

    #[test]
    fn short_or_foreign_packets_are_malformed() {
        assert_eq!(open(&[KEY], b""), Err(WireError::Malformed));
        assert_eq!(open(&[KEY], &[0; 40]), Err(WireError::Malformed));
        let mut p = BytesMut::new();
        seal(&KEY, 9, b"", &mut p);
        assert_eq!(open(&[KEY], &p), Err(WireError::UnknownKind(9)));
    }

    #[test]
    fn leave_notices_round_trip_and_refuse_garbage() {
        assert_eq!(decode_leave(&encode_leave(&id())), Ok(id()));
        assert!(decode_leave(&[0xff; 3]).is_err());
        let mut long = encode_leave(&id()).to_vec();
        long.push(0);
        assert!(decode_leave(&long).is_err());
    }

    #[test]
    fn suspicion_notices_round_trip_and_refuse_other_states() {
        let m = foca::Member::new(id(), 7, foca::State::Suspect);
        assert_eq!(decode_suspected(&encode_suspected(&m)), Ok(m));
        let alive = foca::Member::new(id(), 7, foca::State::Alive);
        assert!(decode_suspected(&encode_suspected(&alive)).is_err());
        assert!(decode_suspected(&[0xff; 3]).is_err());
        let mut p = BytesMut::new();
        seal(&KEY, KIND_SUSPECTED, b"x", &mut p);
        assert_eq!(open(&[KEY], &p), Ok((KIND_SUSPECTED, &b"x"[..])));
    }

    #[test]
    fn the_incarnation_is_read_in_place_from_a_header() {
        use foca::Codec as _;
        for incarnation in [0, 7, 250, 251, 4000, u16::MAX] {
            let header = foca::Header {
                src: id(),
                src_incarnation: incarnation,
                dst: Id {
                    node: "b@127.0.0.1:2".into(),
                    ..id()
                },
                message: foca::Message::Ping(3),
            };
            let mut buf = BytesMut::new();
            Codec::default().encode_header(&header, &mut buf).unwrap();
            let at = incarnation_offset(&id());
            assert_eq!(incarnation_at(&buf, at), Some(incarnation));
        }
        assert_eq!(incarnation_at(&[1, 2], 5), None);
    }

    #[test]
    fn the_later_incarnation_of_a_node_wins() {
        use foca::Identity;
        let old = id();
        let new = Id {
            uid: 1,
            started_ms: 6,
            ..id()
        };
        assert!(new.win_addr_conflict(&old));
        assert!(!old.win_addr_conflict(&new));
    }

    #[test]
    fn codec_round_trips_members_and_bounds_hostile_lengths() {
        use foca::Codec as _;
        let mut c = Codec::default();
        let m = foca::Member::new(id(), 3, foca::State::Suspect);
        let mut buf = BytesMut::new();
        c.encode_member(&m, &mut buf).unwrap();
        let mut rd = &buf[..];
        assert_eq!(c.decode_member(&mut rd).unwrap(), m);
        assert!(rd.is_empty());
        // A node name claiming 2^60 bytes is refused, not allocated.
        let hostile = [0xfe, 0, 0, 0, 0, 0, 0, 0, 0x10];
        assert!(c.decode_member(&hostile[..]).is_err());
    }
}
