//! Message serialization: the [`Serializer`] trait, the default
//! [`Bincode`] implementation with a byte limit, [`MsgPack`],
//! [`RemoteMessage`], which gives a type a stable manifest and its wire
//! codec, and [`SerializerId`], which says in each envelope which
//! serializer encoded the message.
//!
//! bincode 2 is unmaintained upstream, so nothing outside this module names
//! it. A message type picks [`MsgPack`] (named fields, for
//! types that evolve) with `const SERIALIZER`, or its own format by
//! overriding [`RemoteMessage::encode`] and [`RemoteMessage::decode`]
//! (with an id of 128 or more). A receiver decodes by the id the sender
//! put in the envelope, so a type can switch serializer one node at a
//! time.
//!
//! # Layout
//! - this file: the serializers, [`RemoteMessage`] and [`SerializerId`].
//!   They stay in one file because a message's `encode` and `decode` call
//!   the serializers on every message, and code of one file shares a
//!   codegen unit, where the compiler can inline across it.
//! - `manifest`: a type's name on the wire: [`manifest_id`], names of
//!   composite types built at compile time ([`ManifestBuf`]), the
//!   built-in impls of [`RemoteMessage`], and `manifests`, the registry of
//!   the manifests this process has seen.
//! - `scope`: the decode scope (`with_decode_scope`) and [`SharedBytes`],
//!   which reads it.
//! - `record`: a message's payload as it travels: the extension block
//!   (`Ext`), and encoding and decoding a record by the serializer it
//!   names (`decode_record`, `Decoders`).

use std::fmt;

use bytes::BytesMut;
use serde::{Serialize, de::DeserializeOwned};

use crate::{bincode_format, error::SerializationError, msgpack};

mod manifest;
mod record;
mod scope;

pub(crate) use manifest::manifests;
pub use manifest::{MAX_MANIFEST_LEN, ManifestBuf, manifest_id};
pub(crate) use record::{Decoders, Ext, decode_record, decoders, encode_with_ext};
pub use scope::SharedBytes;
pub(crate) use scope::{decoding_node, with_decode_scope};

/// Turns values into bytes and back. Implementations must never panic on
/// hostile input and must bound what decoding allocates.
pub trait Serializer: Send + Sync + 'static {
    /// Appends `value` to `out`.
    ///
    /// # Errors
    /// The value cannot be represented (e.g. a map with non-string keys in a
    /// format that needs them).
    fn serialize<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
    ) -> Result<(), SerializationError>;

    /// Appends `value` to `out`, appending at most `limit` bytes: a value
    /// that needs more is refused with [`SerializationError::TooLarge`]
    /// (`size` at least what it needed) and `out` is left as it was. The
    /// default serializes, then checks; override it to stop as soon as the
    /// limit is crossed, as [`Bincode`] does, so a huge value is never
    /// serialized whole.
    ///
    /// # Errors
    /// As [`serialize`](Self::serialize), and `TooLarge`.
    fn serialize_limited<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
        limit: usize,
    ) -> Result<(), SerializationError> {
        let start = out.len();
        self.serialize(value, out)?;
        let size = out.len() - start;
        if size > limit {
            out.truncate(start);
            return Err(SerializationError::TooLarge { size, limit });
        }
        Ok(())
    }

    /// Reads a value that fills `bytes` exactly.
    ///
    /// # Errors
    /// Malformed, truncated or over-long input, or trailing bytes.
    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError>;
}

/// bincode 2's format (serde, standard config: varint integers, little
/// endian), written and read by this crate's own serde serializer and
/// deserializer (`bincode_format`, private; property tests and a fuzz target
/// check they agree byte for byte with the bincode crate). Decoding bounds
/// every length by the bytes that actually arrived, so a hostile length
/// claim is refused before anything is allocated, whatever the message's
/// size.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

impl Serializer for Bincode {
    #[inline]
    fn serialize<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
    ) -> Result<(), SerializationError> {
        self.serialize_limited(value, out, usize::MAX)
    }

    #[inline]
    fn serialize_limited<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
        limit: usize,
    ) -> Result<(), SerializationError> {
        let start = out.len();
        bincode_format::to_buf(value, out, start.saturating_add(limit)).map_err(|e| {
            out.truncate(start);
            encode_error(&e, start, limit)
        })
    }

    #[inline]
    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError> {
        match bincode_format::from_slice::<T>(bytes) {
            Ok((value, used)) if used == bytes.len() => Ok(value),
            Ok((_, used)) => Err(SerializationError::TrailingBytes {
                used,
                len: bytes.len(),
            }),
            Err(e) => Err(decode_error(e)),
        }
    }
}

/// MessagePack through rmp-serde, structs as maps of named fields and enum
/// variants by name: tolerates fields added (with `#[serde(default)]`) and
/// removed between node versions, at some cost in bytes and time over
/// [`Bincode`] (the criterion benches `serialize/*` measure it). Pick it
/// for a message type with
/// `const SERIALIZER: SerializerId = SerializerId::MSGPACK;` in its
/// [`RemoteMessage`] impl.
///
/// Decoding is bounded (a length claim larger than the bytes that arrived
/// is refused before anything is allocated; nesting is limited as under
/// bincode) and never panics on hostile input. [`SharedBytes`] fields
/// share the received frame as they do under bincode, and `ActorRef`
/// fields resolve against the receiving node.
#[derive(Debug, Clone, Copy, Default)]
pub struct MsgPack;

impl Serializer for MsgPack {
    fn serialize<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
    ) -> Result<(), SerializationError> {
        msgpack::to_buf(value, out, usize::MAX)
    }

    /// Stops as soon as the limit is crossed, as [`Bincode`] does.
    fn serialize_limited<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
        limit: usize,
    ) -> Result<(), SerializationError> {
        msgpack::to_buf(value, out, limit)
    }

    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError> {
        msgpack::from_slice(bytes)
    }
}

#[cold]
#[inline(never)]
fn encode_error(e: &bincode_format::FormatError, start: usize, limit: usize) -> SerializationError {
    match e.kind() {
        bincode_format::Kind::TooLarge { size } => SerializationError::TooLarge {
            size: size - start,
            limit,
        },
        _ => SerializationError::Encode(e.to_string()),
    }
}

#[cold]
#[inline(never)]
fn decode_error(e: bincode_format::FormatError) -> SerializationError {
    SerializationError::Decode(e.to_string())
}

/// A message type that can cross nodes: serde, plus a manifest (its stable
/// name on the wire).
///
/// Derive it (default feature `derive`):
///
/// ```
/// use actors::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// // Manifest "<package>.<Type>": here "remoting-actors.Ping".
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// struct Ping(u64);
///
/// // An explicit manifest, which survives renaming the type or package.
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[remote(manifest = "svc.Order")]
/// struct Order { id: u64 }
///
/// // Generic: the parameters' manifests are part of the name.
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[remote(manifest = "svc.Page")]
/// struct Page<T> { items: Vec<T>, next: Option<u64> }
///
/// assert_eq!(Ping::MANIFEST, concat!(env!("CARGO_PKG_NAME"), ".Ping"));
/// assert_eq!(Order::MANIFEST, "svc.Order");
/// assert_eq!(<Page<Order>>::MANIFEST, "svc.Page<svc.Order>");
/// assert_eq!(<Result<Vec<Order>, String>>::MANIFEST, "std.Result<std.Vec<svc.Order>,std.String>");
/// ```
///
/// or implement it by hand:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ping(u64);
/// impl actors::RemoteMessage for Ping {
///     const MANIFEST: &'static str = "example.Ping";
/// }
/// ```
///
/// # The default manifest
/// The derive names a type `<package>.<Type>` (the Cargo package of the
/// crate that derives, and the type's name), not after its module path:
/// moving a type between modules is a refactor that must not change the
/// wire. The trade-off: renaming the package or the type does change it,
/// and two types of one name in two modules of a package share it (and
/// would decode as each other): the runtime refuses the second of them it
/// registers in a process (spawning an actor that takes it, resolving a
/// ref to it: `SpawnError::ManifestShared`, naming both types). Give such
/// types, and any whose name must outlive renames,
/// `#[remote(manifest = "...")]`. Type parameters must be
/// remote messages and are part of the name; lifetimes and const
/// parameters are refused at compile time.
///
/// # Built in
/// - `()`, `bool`, the integers (`u8` included), `f32`, `f64`, `char`,
///   `String`, and `Vec<u8>` (a byte string, "std.bytes"), named
///   `std.<type>`;
/// - built from remote messages, named after them, at compile time:
///   `Vec<T>` (`std.Vec<T>`), `Option<T>`, `Result<T, E>`, `Box<T>`,
///   `HashMap<K, V>`, `BTreeMap<K, V>`, tuples of two to four (`(A,B)`),
///   and [`ActorRef<M>`](crate::ActorRef) (`actors.ActorRef<M>`), so a
///   reply can be any of these without a newtype. A composite name is at
///   most [`MAX_MANIFEST_LEN`] bytes (a longer one is a compile error).
///
/// # Local-only messages
/// An actor can take messages that peers cannot send: mark those variants
/// of its message enum `#[serde(skip)]` and put them **last**. Sending one
/// to a remote ref fails with
/// [`SendError::Serialization`](crate::SendError::Serialization) before
/// anything is sent, and bytes that claim to be one (a forged or newer
/// peer) fail to decode on the receiving node, which makes them a dead
/// letter; locally they are delivered like any message. Last, because
/// serde encodes a variant's position among all variants but decodes
/// positions counted without the skipped ones: a variant after a skipped
/// one would not decode as sent (the derive refuses that order).
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, actors::RemoteMessage)]
/// #[remote(manifest = "svc.Cache")]
/// enum CacheMsg {
///     Get(String, actors::ActorRef<Option<String>>),
///     /// Only this process can send it.
///     #[serde(skip)]
///     Flush(std::sync::Arc<tokio::sync::Notify>),
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a remote message: it cannot cross nodes",
    label = "needs `RemoteMessage`",
    note = "derive it: `#[derive(Serialize, Deserialize, actors::RemoteMessage)]` (serde's derives too), or implement `RemoteMessage` with a `MANIFEST`",
    note = "a type from another crate needs a newtype around it that derives these"
)]
pub trait RemoteMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The type's stable name on the wire. Never change it once nodes
    /// exchange the type; two types must not share one.
    const MANIFEST: &'static str;

    /// The serializer [`encode`](Self::encode) writes with, named in every
    /// envelope of the type: [`SerializerId::BINCODE`] (the default: the
    /// fastest and smallest, but positional, so both nodes need the same
    /// definition) or [`SerializerId::MSGPACK`] (named fields: tolerates
    /// fields added with `#[serde(default)]` and fields removed, for
    /// rolling upgrades). A type that overrides `encode` and `decode` with
    /// a format of its own says so with an id of 128 or more
    /// ([`SerializerId::custom`]).
    ///
    /// A receiver decodes by the id in the envelope, whatever this says
    /// on its side (see [`decode_from`](Self::decode_from)), so changing it
    /// is safe one node at a time.
    const SERIALIZER: SerializerId = SerializerId::BINCODE;

    /// Appends the encoded message, at most `limit` bytes of it (see
    /// [`Serializer::serialize_limited`]; the sender checks the size again
    /// after encoding, so an encoder may ignore the limit at the cost of
    /// encoding a message that is then refused). Override to use another
    /// [`Serializer`] for this type.
    ///
    /// # Where it runs
    /// A remote `tell` encodes straight into the link's outbound buffer,
    /// under two short locks: the association's link state and the link's
    /// queue. So an encoder (this method, and the `Serialize` impls it
    /// calls) must not send remote messages, must not block, and should
    /// not take long: other senders to the same node wait meanwhile. A
    /// remote `tell`, `send` or `ask` made from inside an encoder is
    /// refused with [`SerializationError::Reentrant`] instead of
    /// deadlocking.
    ///
    /// # Errors
    /// As [`Serializer::serialize_limited`].
    fn encode(&self, out: &mut BytesMut, limit: usize) -> Result<(), SerializationError> {
        // A `const` condition and an out-of-line call, so that a bincode
        // type's encoder is what it was before MessagePack existed:
        // with MessagePack's code beside it, or an inline hint, the
        // message's `Serialize` stopped being inlined into it
        // (callgrind: 4 % more instructions on the sending thread).
        if const { Self::SERIALIZER.0 == SerializerId::MSGPACK.0 } {
            return msgpack_encode(self, out, limit);
        }
        Bincode.serialize_limited(self, out, limit)
    }

    /// Decodes a message written by [`encode`](Self::encode). Override
    /// together with it.
    ///
    /// # Errors
    /// As [`Serializer::deserialize`].
    #[inline(never)]
    fn decode(bytes: &[u8]) -> Result<Self, SerializationError> {
        // As in `encode`: a bincode type's decoder is what it was. Never
        // inlined: its callers are the actor's (through a pointer) and
        // `decode_from`, and with a copy in both the message's
        // `Deserialize` was inlined in neither (callgrind).
        if const { Self::SERIALIZER.0 == SerializerId::MSGPACK.0 } {
            return msgpack_decode(bytes);
        }
        Bincode.deserialize(bytes)
    }

    /// Whether [`MANIFEST`](Self::MANIFEST) is `#[derive(RemoteMessage)]`'s
    /// default (`<package>.<Type>`), which two types of one name in one
    /// package share by accident: the second of them to be registered in
    /// a process is refused (see `SpawnError::ManifestShared`). Set by the
    /// derive; a manifest written out is the author's choice and may be
    /// shared on purpose (two versions of one message, say).
    #[doc(hidden)]
    const DERIVED_MANIFEST: bool = false;

    /// Decodes a message that the sender's envelope says `serializer`
    /// wrote: [`decode`](Self::decode) if that is this type's own,
    /// otherwise the built-in serializer of that id (so a node reads the
    /// type from nodes that already switched serializer, or have not yet).
    ///
    /// # Errors
    /// As [`Serializer::deserialize`], and an id this node does not know.
    #[inline(always)]
    fn decode_from(serializer: SerializerId, bytes: &[u8]) -> Result<Self, SerializationError> {
        if serializer == Self::SERIALIZER {
            Self::decode(bytes)
        } else {
            decode_builtin::<Self>(serializer, bytes)
        }
    }
}

/// Which serializer encoded a message: one byte in its envelope (absent
/// for bincode).
///
/// `0` is [`BINCODE`](Self::BINCODE), `1` [`MSGPACK`](Self::MSGPACK);
/// 2 to 127 are reserved for this crate; 128 to 255 are for formats of a
/// type's own ([`custom`](Self::custom)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SerializerId(u8);

impl SerializerId {
    /// [`Bincode`]: the default; written as no byte at all.
    pub const BINCODE: Self = Self(0);
    /// [`MsgPack`]: named fields.
    pub const MSGPACK: Self = Self(1);

    /// An id for a format of a type's own (its overridden `encode` and
    /// `decode`).
    ///
    /// # Panics
    /// `id` under 128 (those belong to this crate); in a `const`, at
    /// compile time.
    pub const fn custom(id: u8) -> Self {
        assert!(id >= 128, "custom serializer ids are 128 to 255");
        Self(id)
    }

    /// The byte on the wire.
    pub const fn id(self) -> u8 {
        self.0
    }
}

impl fmt::Debug for SerializerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `bincode`, `msgpack`, or `serializer N`.
impl fmt::Display for SerializerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BINCODE => f.write_str("bincode"),
            Self::MSGPACK => f.write_str("msgpack"),
            Self { 0: n } => write!(f, "serializer {n}"),
        }
    }
}

/// `RemoteMessage::encode` of a MessagePack type (out of line: see there).
#[inline(never)]
fn msgpack_encode<T: Serialize + ?Sized>(
    value: &T,
    out: &mut BytesMut,
    limit: usize,
) -> Result<(), SerializationError> {
    MsgPack.serialize_limited(value, out, limit)
}

/// `RemoteMessage::decode` of a MessagePack type (out of line).
#[inline(never)]
fn msgpack_decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SerializationError> {
    MsgPack.deserialize(bytes)
}

/// Decodes with the built-in serializer `id` (a node reading another
/// node's choice: out of line).
///
/// The id of `M`'s own serializer goes to `M::decode` under a `const`
/// condition, so that no second instance of `M`'s `Deserialize` for that
/// format exists: with one, a bincode type's `Deserialize` was no longer
/// inlined into its `decode` (callgrind: 3 % of the receiving thread).
#[inline(never)]
fn decode_builtin<M: RemoteMessage>(
    id: SerializerId,
    bytes: &[u8],
) -> Result<M, SerializationError> {
    match id {
        SerializerId::BINCODE => {
            if const { M::SERIALIZER.0 == SerializerId::BINCODE.0 } {
                M::decode(bytes)
            } else {
                Bincode.deserialize(bytes)
            }
        }
        SerializerId::MSGPACK => {
            if const { M::SERIALIZER.0 == SerializerId::MSGPACK.0 } {
                M::decode(bytes)
            } else {
                MsgPack.deserialize(bytes)
            }
        }
        other => Err(unknown_serializer(other)),
    }
}

#[cold]
fn unknown_serializer(id: SerializerId) -> SerializationError {
    SerializationError::Decode(format!(
        "{id} is unknown to this node (it knows bincode 0, msgpack 1, and the type's own)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Msg {
        id: u64,
        data: Vec<u8>,
    }

    #[test]
    fn roundtrip() {
        let m = Msg {
            id: 7,
            data: vec![1; 100],
        };
        let mut b = BytesMut::new();
        Bincode.serialize(&m, &mut b).unwrap();
        assert_eq!(Bincode.deserialize::<Msg>(&b).unwrap(), m);
    }

    #[test]
    fn hostile_length_is_refused_without_allocating() {
        // id 7, then a Vec<u8> length of u64::MAX (varint marker 253 + 8 bytes).
        let mut bomb = vec![7u8, 253];
        bomb.extend_from_slice(&u64::MAX.to_le_bytes());
        let err = Bincode.deserialize::<Msg>(&bomb).unwrap_err();
        assert!(matches!(err, SerializationError::Decode(_)), "{err}");
        // A claim one byte longer than what arrived is refused too, and
        // names both figures.
        let mut bomb = vec![7u8, 5];
        bomb.extend_from_slice(&[1, 2, 3, 4]);
        let err = Bincode.deserialize::<Msg>(&bomb).unwrap_err().to_string();
        assert!(err.contains("length 5 exceeds the 4 bytes left"), "{err}");
        // Zero-sized elements cannot make the decoder spin: a claim of
        // 2^63 `()`s is refused at once.
        let mut bomb = vec![253u8];
        bomb.extend_from_slice(&(1u64 << 63).to_le_bytes());
        assert!(Bincode.deserialize::<Vec<()>>(&bomb).is_err());
    }

    #[test]
    fn encode_limit_refuses_without_serializing_the_rest() {
        // 64 MiB of zeroes, encoded field by field: refused at the first
        // write past 1 KiB, so the buffer never grows beyond the limit.
        let big = Msg {
            id: 1,
            data: vec![0; 64 << 20],
        };
        let mut out = BytesMut::new();
        let err = Bincode.serialize_limited(&big, &mut out, 1024).unwrap_err();
        assert!(
            matches!(err, SerializationError::TooLarge { size, limit: 1024 } if size > 1024 && size < 2048),
            "{err}"
        );
        assert!(out.is_empty(), "nothing is left behind");
        assert!(out.capacity() < 4096, "the rest was never serialized");
        // The limit is this call's only.
        Bincode
            .serialize(
                &Msg {
                    id: 2,
                    data: vec![0; 2000],
                },
                &mut out,
            )
            .unwrap();
    }

    #[test]
    fn large_payloads_decode() {
        // Larger than the default frame: a large message, reassembled.
        let m = Msg {
            id: 3,
            data: vec![5; (9 << 20) + 10],
        };
        let mut b = BytesMut::new();
        Bincode.serialize(&m, &mut b).unwrap();
        assert_eq!(Bincode.deserialize::<Msg>(&b).unwrap(), m);
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut b = BytesMut::new();
        Bincode.serialize(&5u32, &mut b).unwrap();
        b.extend_from_slice(&[0, 0]);
        assert!(matches!(
            Bincode.deserialize::<u32>(&b),
            Err(SerializationError::TrailingBytes { used: 1, len: 3 })
        ));
    }

    #[test]
    fn serializer_ids_name_themselves() {
        assert_eq!(SerializerId::BINCODE.id(), 0);
        assert_eq!(SerializerId::MSGPACK.id(), 1);
        assert_eq!(SerializerId::custom(200).id(), 200);
        assert_eq!(SerializerId::BINCODE.to_string(), "bincode");
        assert_eq!(SerializerId::MSGPACK.to_string(), "msgpack");
        assert_eq!(format!("{:?}", SerializerId::custom(128)), "serializer 128");
        let reserved = std::panic::catch_unwind(|| SerializerId::custom(127));
        assert!(reserved.is_err(), "ids under 128 belong to this crate");
    }
}
