//! Message serialization: the [`Serializer`] trait, the default
//! [`Bincode`] implementation with a byte limit, [`RemoteMessage`], which
//! gives a type a stable manifest and its wire codec, and [`SerializerId`],
//! which says in each envelope which serializer encoded the message.
//!
//! bincode 2 is unmaintained upstream, so nothing outside this module names
//! it. A message type picks [`MsgPack`] (named fields, for
//! types that evolve) with `const SERIALIZER`, or its own format by
//! overriding [`RemoteMessage::encode`] and [`RemoteMessage::decode`]
//! (with an id of 128 or more). A receiver decodes by the id the sender
//! put in the envelope, so a type can switch serializer one node at a
//! time.
//!
//! # The extension block
//! A message whose envelope has the extension flag begins with a block
//! that says how to read it ([`Ext`]):
//!
//! ```text
//! +--------+--------------------------+-----------------------------+---------+
//! | ext u8 | serializer u8 (ext & 1)  | trace context 25 B (ext & 2) | message |
//! +--------+--------------------------+-----------------------------+---------+
//! ```
//!
//! Messages in bincode without a trace context carry no block (and no
//! byte for it).

use std::{any::Any, cell::RefCell, fmt, ops::Deref, sync::Arc};

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};

use crate::{bincode_format, error::SerializationError, msgpack, trace::TraceContext};

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

/// What decoding a remote message can see besides its bytes: the frame
/// that [`SharedBytes`] fields slice instead of copying, and the node that
/// `ActorRef` fields are resolved against.
///
/// serde's `Deserialize` takes no context, so this one value is what the
/// two places that decode user messages (an actor's task decoding a batch,
/// an ask's reply slot) install around their decode with
/// [`with_decode_scope`], and what those two `Deserialize` impls read. It
/// is set for exactly the duration of that call and restored after, even
/// on a panic; outside it both fields are empty (a `SharedBytes` then
/// copies, an `ActorRef` fails to decode). The node is type-erased here
/// because serialization sits below the runtime; `ActorRef` downcasts it.
struct DecodeScope {
    frame: Option<Bytes>,
    node: Option<Arc<dyn Any + Send + Sync>>,
}

thread_local! {
    static DECODE_SCOPE: RefCell<DecodeScope> = const {
        RefCell::new(DecodeScope { frame: None, node: None })
    };
}

/// Runs `f` (which decodes records of `frame`, with no await in between)
/// with `frame` and `node` as the decode scope, then restores the previous
/// scope. Costs two reference-count updates per call, so callers install it
/// once per batch, not once per message.
pub(crate) fn with_decode_scope<T>(
    node: &Arc<dyn Any + Send + Sync>,
    frame: &Bytes,
    f: impl FnOnce() -> T,
) -> T {
    struct Restore(Option<DecodeScope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(prev) = self.0.take() {
                DECODE_SCOPE.with(|s| *s.borrow_mut() = prev);
            }
        }
    }
    let prev = DECODE_SCOPE.with(|s| {
        std::mem::replace(
            &mut *s.borrow_mut(),
            DecodeScope {
                frame: Some(frame.clone()),
                node: Some(node.clone()),
            },
        )
    });
    let _restore = Restore(Some(prev));
    f()
}

/// The node of the decode scope, if a decode is under way.
pub(crate) fn decoding_node() -> Option<Arc<dyn Any + Send + Sync>> {
    DECODE_SCOPE.with(|s| s.borrow().node.clone())
}

/// A byte string that, when decoded from a remote message, shares the
/// received frame's memory instead of copying it (like Netty's retained
/// slices). Serializes exactly like `Vec<u8>` / `serde_bytes`.
///
/// The frame's buffer stays allocated while any `SharedBytes` of it lives,
/// so copy out (`to_vec`) what you keep for long.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedBytes(pub Bytes);

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.0.len())
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Bytes> for SharedBytes {
    fn from(b: Bytes) -> Self {
        Self(b)
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(v: Vec<u8>) -> Self {
        Self(Bytes::from(v))
    }
}

impl Serialize for SharedBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SharedBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(
                self,
                v: &'de [u8],
            ) -> Result<SharedBytes, E> {
                let shared = DECODE_SCOPE.with(|s| {
                    let s = s.borrow();
                    let frame = s.frame.as_ref()?;
                    let (start, end) = (
                        frame.as_ptr() as usize,
                        frame.as_ptr() as usize + frame.len(),
                    );
                    let p = v.as_ptr() as usize;
                    // Only a slice inside the frame can be shared.
                    (p >= start && p + v.len() <= end).then(|| frame.slice_ref(v))
                });
                Ok(SharedBytes(
                    shared.unwrap_or_else(|| Bytes::copy_from_slice(v)),
                ))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<SharedBytes, E> {
                Ok(SharedBytes(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<SharedBytes, E> {
                Ok(SharedBytes(Bytes::from(v)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SharedBytes, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element()? {
                    v.push(b);
                }
                Ok(SharedBytes(Bytes::from(v)))
            }
        }
        d.deserialize_bytes(V)
    }
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

/// Ext flag: a serializer id byte follows.
pub(crate) const EXT_SERIALIZER: u8 = 1;
/// Ext flag: a trace context follows.
pub(crate) const EXT_TRACE: u8 = 2;

/// The extension block at the start of a message (see the module docs):
/// how to read the message, and the trace context it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ext {
    pub(crate) serializer: SerializerId,
    pub(crate) trace: Option<TraceContext>,
}

impl Ext {
    /// The block for a message written by `serializer`, carrying the
    /// current trace context if `trace` (propagation is on).
    #[inline(always)]
    pub(crate) fn for_send(serializer: SerializerId, trace: bool) -> Self {
        Self {
            serializer,
            trace: if trace { TraceContext::current() } else { None },
        }
    }

    /// Whether the message needs no block (bincode, no trace context).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.serializer == SerializerId::BINCODE && self.trace.is_none()
    }

    /// Bytes the block takes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        1 + usize::from(self.serializer != SerializerId::BINCODE)
            + if self.trace.is_some() {
                TraceContext::WIRE_LEN
            } else {
                0
            }
    }

    /// Appends the block (nothing if it is empty).
    pub(crate) fn put(&self, b: &mut BytesMut) {
        if self.is_empty() {
            return;
        }
        let mut flags = 0;
        if self.serializer != SerializerId::BINCODE {
            flags |= EXT_SERIALIZER;
        }
        if self.trace.is_some() {
            flags |= EXT_TRACE;
        }
        b.extend_from_slice(&[flags]);
        if flags & EXT_SERIALIZER != 0 {
            b.extend_from_slice(&[self.serializer.0]);
        }
        if let Some(t) = self.trace {
            b.extend_from_slice(&t.to_bytes());
        }
    }

    /// Reads the block at the start of `b`: it, and the message after it.
    /// Never panics.
    ///
    /// # Errors
    /// Unknown ext bits, a truncated block, an invalid trace context.
    pub(crate) fn parse(b: &[u8]) -> Result<(Self, &[u8]), &'static str> {
        let (&flags, mut rest) = b.split_first().ok_or("truncated extension block")?;
        if flags & !(EXT_SERIALIZER | EXT_TRACE) != 0 {
            return Err("unknown bits in the extension block");
        }
        let mut ext = Self {
            serializer: SerializerId::BINCODE,
            trace: None,
        };
        if flags & EXT_SERIALIZER != 0 {
            let (&id, r) = rest.split_first().ok_or("truncated extension block")?;
            ext.serializer = SerializerId(id);
            rest = r;
        }
        if flags & EXT_TRACE != 0 {
            if rest.len() < TraceContext::WIRE_LEN {
                return Err("truncated extension block");
            }
            ext.trace = Some(
                TraceContext::from_bytes(rest)
                    .map_err(|_| "invalid trace context (an all-zero id)")?,
            );
            rest = &rest[TraceContext::WIRE_LEN..];
        }
        Ok((ext, rest))
    }
}

/// Appends `ext`'s block, then the message (`encode`, given what is left
/// of `limit`): the payload of a remote message.
///
/// # Errors
/// As `encode`.
#[inline(always)]
pub(crate) fn encode_with_ext(
    ext: &Ext,
    out: &mut BytesMut,
    limit: usize,
    encode: impl FnOnce(&mut BytesMut, usize) -> Result<(), SerializationError>,
) -> Result<(), SerializationError> {
    if ext.is_empty() {
        return encode(out, limit);
    }
    encode_ext_slow(ext, out, limit, encode)
}

#[inline(never)]
fn encode_ext_slow(
    ext: &Ext,
    out: &mut BytesMut,
    limit: usize,
    encode: impl FnOnce(&mut BytesMut, usize) -> Result<(), SerializationError>,
) -> Result<(), SerializationError> {
    let start = out.len();
    let len = ext.len();
    ext.put(out);
    encode(out, limit.saturating_sub(len)).map_err(|e| {
        out.truncate(start);
        match e {
            SerializationError::TooLarge { size, limit } => SerializationError::TooLarge {
                size: size + len,
                limit: limit + len,
            },
            other => other,
        }
    })
}

/// Decodes one record of a remote batch for `M`: `ext` says it begins
/// with an extension block. The message, and the trace context it
/// carried. The error names the serializer and the type, for the dead
/// letter.
///
/// # Errors
/// A malformed block, an unknown serializer, or a message that does not
/// decode.
pub(crate) fn decode_record<M: RemoteMessage>(
    record: &[u8],
    ext: bool,
) -> Result<(M, Option<TraceContext>), SerializationError> {
    if !ext {
        return match M::decode_from(SerializerId::BINCODE, record) {
            Ok(m) => Ok((m, None)),
            Err(e) => Err(cannot_decode::<M>(SerializerId::BINCODE, &e)),
        };
    }
    decode_ext_record(record)
}

/// A message and the trace context it carried.
pub(crate) type Traced<M> = (M, Option<TraceContext>);

/// How an actor of `M` decodes its remote records: a plain record
/// (bincode, no extension block), and one that begins with a block. Two
/// functions, so that a plain record's decode returns the message alone,
/// as before blocks existed.
pub(crate) struct Decoders<M> {
    /// A record without an extension block: bincode.
    pub(crate) plain: fn(&[u8]) -> Result<M, SerializationError>,
    /// A record that begins with an extension block: the message and the
    /// trace context it carried.
    pub(crate) ext: fn(&[u8]) -> Result<Traced<M>, SerializationError>,
    /// Says why a `plain` record did not decode (out of line).
    pub(crate) why: fn(SerializationError) -> SerializationError,
}

/// The [`Decoders`] of `M`.
pub(crate) fn decoders<M: RemoteMessage>() -> Decoders<M> {
    Decoders {
        // A bincode type's plain records go straight to its own `decode`,
        // as before blocks existed (callgrind: any layer between cost
        // the message's `Deserialize` its inlining).
        plain: if M::SERIALIZER == SerializerId::BINCODE {
            M::decode
        } else {
            decode_plain::<M>
        },
        ext: decode_ext_record::<M>,
        why: cannot_decode_plain::<M>,
    }
}

/// Why a plain record of `M` did not decode, for its dead letter: the
/// serializer, the type, and for bincode the hint that it is positional.
#[cold]
#[inline(never)]
fn cannot_decode_plain<M: RemoteMessage>(e: SerializationError) -> SerializationError {
    match e {
        // Already said by `decode_plain`.
        SerializationError::Decode(why) if why.starts_with("cannot decode ") => {
            SerializationError::Decode(why)
        }
        e => cannot_decode::<M>(SerializerId::BINCODE, &e),
    }
}

/// `decode_record` of a record without an extension block: bincode.
fn decode_plain<M: RemoteMessage>(record: &[u8]) -> Result<M, SerializationError> {
    match M::decode_from(SerializerId::BINCODE, record) {
        Ok(m) => Ok(m),
        Err(e) => Err(cannot_decode::<M>(SerializerId::BINCODE, &e)),
    }
}

/// `decode_record` of a record with an extension block: out of line, so
/// that a plain record's path stays as small as before blocks existed.
#[inline(never)]
fn decode_ext_record<M: RemoteMessage>(
    record: &[u8],
) -> Result<(M, Option<TraceContext>), SerializationError> {
    let (ext, body) = Ext::parse(record).map_err(|why| SerializationError::Decode(why.into()))?;
    match M::decode_from(ext.serializer, body) {
        Ok(m) => Ok((m, ext.trace)),
        Err(e) => Err(cannot_decode::<M>(ext.serializer, &e)),
    }
}

#[cold]
#[inline(never)]
fn cannot_decode<M: RemoteMessage>(
    serializer: SerializerId,
    e: &SerializationError,
) -> SerializationError {
    let e = match e {
        SerializationError::Decode(why) => why.clone(),
        other => other.to_string(),
    };
    let hint = if serializer == SerializerId::BINCODE && M::SERIALIZER == SerializerId::BINCODE {
        " (bincode is positional: both nodes need the same definition of the type; see \"Rolling upgrades\")"
    } else {
        ""
    };
    SerializationError::Decode(format!(
        "cannot decode {serializer} as {}: {e}{hint}",
        M::MANIFEST
    ))
}

/// The manifests this process has seen a type use (by spawning an actor
/// that takes it, resolving or decoding a ref to one), by id: so that a
/// dead letter names its type, and so that two types whose names hash to
/// the same 32-bit id are caught when the second is registered instead of
/// decoding as each other.
pub(crate) mod manifests {
    use std::{
        any::TypeId,
        collections::HashMap,
        sync::{LazyLock, PoisonError, RwLock},
    };

    use super::{RemoteMessage, manifest_id};

    /// A manifest this process has seen, and the first type seen with it.
    #[derive(Clone, Copy)]
    struct Known {
        name: &'static str,
        ty: TypeId,
        type_name: &'static str,
        /// The derive's default name.
        derived: bool,
    }

    static KNOWN: LazyLock<RwLock<HashMap<u32, Known>>> = LazyLock::new(Default::default);

    /// Why a manifest was refused.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Conflict {
        /// Two manifest names with one id (`registered` has it).
        Id { id: u32, registered: &'static str },
        /// Two types with one manifest that the derive gave at least one
        /// of them by default: two types of one name in one package.
        SameName {
            registered_type: &'static str,
            this_type: &'static str,
        },
    }

    /// Registers `M`'s manifest; its id, or why it conflicts with a
    /// manifest registered before.
    pub(crate) fn register<M: RemoteMessage>() -> Result<u32, Conflict> {
        register_as(Known {
            name: M::MANIFEST,
            ty: TypeId::of::<M>(),
            type_name: std::any::type_name::<M>(),
            derived: M::DERIVED_MANIFEST,
        })
    }

    fn check(known: &Known, new: &Known) -> Result<u32, Conflict> {
        let id = manifest_id(new.name);
        if known.name != new.name {
            return Err(Conflict::Id {
                id,
                registered: known.name,
            });
        }
        if known.ty != new.ty && (known.derived || new.derived) {
            return Err(Conflict::SameName {
                registered_type: known.type_name,
                this_type: new.type_name,
            });
        }
        Ok(id)
    }

    /// Registers `name` for a type of no interest (tests of the id check).
    #[cfg(test)]
    pub(crate) fn register_name(name: &'static str) -> Result<u32, Conflict> {
        register_as(Known {
            name,
            ty: TypeId::of::<()>(),
            type_name: "()",
            derived: false,
        })
    }

    fn register_as(new: Known) -> Result<u32, Conflict> {
        let id = manifest_id(new.name);
        if let Some(known) = KNOWN
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return check(known, &new);
        }
        let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
        check(known.entry(id).or_insert(new), &new)
    }

    /// How a dead letter names a manifest id: its type's name if this
    /// process knows it, else the id.
    pub(crate) fn label(id: u32) -> String {
        match KNOWN
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            Some(known) => known.name.to_owned(),
            None => format!("unknown type (manifest {id:#010x})"),
        }
    }
}

/// The 32-bit id of a manifest on the wire: FNV-1a of its name, so both
/// nodes derive the same id with no coordination.
pub const fn manifest_id(name: &str) -> u32 {
    let b = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
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
    fn shared_bytes_slice_the_frame() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct M(u8, SharedBytes);
        let mut b = BytesMut::new();
        Bincode
            .serialize(&M(1, SharedBytes::from(vec![9u8; 100])), &mut b)
            .unwrap();
        let frame = b.freeze();
        let node: Arc<dyn Any + Send + Sync> = Arc::new(());
        let m: M = with_decode_scope(&node, &frame, || Bincode.deserialize(&frame)).unwrap();
        assert_eq!(&m.1[..], &[9u8; 100][..]);
        let inside = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(
            inside.contains(&(m.1.as_ptr() as usize)),
            "shares the frame"
        );
        // Without a frame it copies.
        let m: M = Bincode.deserialize(&frame).unwrap();
        assert!(!inside.contains(&(m.1.as_ptr() as usize)));
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
    fn manifest_collisions_are_caught_and_ids_named() {
        // Two distinct names with one FNV-1a id (found by search).
        let (a, b) = collision_pair();
        assert_eq!(manifest_id(a), manifest_id(b));
        assert_eq!(manifests::register_name(a), Ok(manifest_id(a)));
        assert_eq!(
            manifests::register_name(a),
            Ok(manifest_id(a)),
            "again is fine"
        );
        assert_eq!(
            manifests::register_name(b),
            Err(manifests::Conflict::Id {
                id: manifest_id(a),
                registered: a
            })
        );
        assert_eq!(manifests::label(manifest_id(a)), a);
        assert!(manifests::label(0x0bad_f00d).contains("0x0badf00d"));
    }

    mod one {
        /// A type named like `two::Twin`, with the derive's default manifest.
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        pub(super) struct Twin;
    }

    mod two {
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        pub(super) struct Twin(u8);

        /// Names its manifest itself, like `one::Twin`'s default.
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "remoting-actors.Twin")]
        pub(super) struct Chosen;
    }

    /// Written by hand with the same manifest as another hand-written
    /// type: allowed (versions of one message, say).
    #[derive(serde::Serialize, serde::Deserialize)]
    struct VersionOne;
    impl RemoteMessage for VersionOne {
        const MANIFEST: &'static str = "test.Versioned";
    }
    #[derive(serde::Serialize, serde::Deserialize)]
    struct VersionTwo(u8);
    impl RemoteMessage for VersionTwo {
        const MANIFEST: &'static str = "test.Versioned";
    }

    #[test]
    fn two_types_with_one_derived_manifest_are_refused_naming_both() {
        assert_eq!(one::Twin::MANIFEST, two::Twin::MANIFEST);
        let id = manifest_id(one::Twin::MANIFEST);
        assert_eq!(manifests::register::<one::Twin>(), Ok(id));
        assert_eq!(manifests::register::<one::Twin>(), Ok(id), "again is fine");
        let refused = manifests::Conflict::SameName {
            registered_type: std::any::type_name::<one::Twin>(),
            this_type: std::any::type_name::<two::Twin>(),
        };
        assert_eq!(manifests::register::<two::Twin>(), Err(refused));
        // A manifest written out that equals a derived default: refused
        // too, since the derived one did not choose it.
        assert!(matches!(
            manifests::register::<two::Chosen>(),
            Err(manifests::Conflict::SameName { .. })
        ));
        // Two written out: the author's choice.
        assert!(manifests::register::<VersionOne>().is_ok());
        assert!(manifests::register::<VersionTwo>().is_ok());
    }

    /// Two names `t<i>` with the same manifest id.
    fn collision_pair() -> (&'static str, &'static str) {
        let mut seen = std::collections::HashMap::new();
        for i in 0u64.. {
            let name = format!("collide.{i}");
            let id = manifest_id(&name);
            if let Some(other) = seen.insert(id, name.clone()) {
                return (
                    Box::leak(other.into_boxed_str()),
                    Box::leak(name.into_boxed_str()),
                );
            }
        }
        unreachable!()
    }

    #[test]
    fn composite_manifests_follow_their_parts() {
        use std::collections::{BTreeMap, HashMap};
        assert_eq!(<Vec<String>>::MANIFEST, "std.Vec<std.String>");
        assert_eq!(<Vec<u8>>::MANIFEST, "std.bytes", "bytes stay bytes");
        assert_eq!(<u8>::MANIFEST, "std.u8");
        assert_eq!(<Option<u8>>::MANIFEST, "std.Option<std.u8>");
        assert_eq!(<Vec<Vec<u8>>>::MANIFEST, "std.Vec<std.bytes>");
        assert_eq!(<Option<String>>::MANIFEST, "std.Option<std.String>");
        assert_eq!(
            <Result<Vec<u64>, String>>::MANIFEST,
            "std.Result<std.Vec<std.u64>,std.String>"
        );
        assert_eq!(<(u32, bool)>::MANIFEST, "(std.u32,std.bool)");
        assert_eq!(
            <(u32, bool, (), char)>::MANIFEST,
            "(std.u32,std.bool,std.unit,std.char)"
        );
        assert_eq!(
            <HashMap<String, i32>>::MANIFEST,
            "std.HashMap<std.String,std.i32>"
        );
        assert_eq!(
            <BTreeMap<u16, Box<f32>>>::MANIFEST,
            "std.BTreeMap<std.u16,std.Box<std.f32>>"
        );
        assert_ne!(
            manifest_id(<Vec<u32>>::MANIFEST),
            manifest_id(<Vec<u64>>::MANIFEST)
        );
        // The id is a compile-time constant whatever the nesting: a ref
        // computes it once, as for any other type.
        const ID: u32 = manifest_id(<Option<Vec<String>>>::MANIFEST);
        assert_eq!(ID, manifest_id("std.Option<std.Vec<std.String>>"));
    }

    #[test]
    fn manifest_buf_concatenates_up_to_its_limit() {
        let long = "x".repeat(MAX_MANIFEST_LEN - 2);
        assert_eq!(
            ManifestBuf::concat(&["<", &long, ">"]).as_str().len(),
            MAX_MANIFEST_LEN
        );
        let over = std::panic::catch_unwind(|| ManifestBuf::concat(&["<", &long, ">>"]));
        assert!(over.is_err(), "one byte over the limit is refused");
    }

    #[test]
    fn derived_manifests() {
        use crate::RemoteMessage as _;
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        struct Plain(u8);
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "svc.Named")]
        enum Named {
            A,
        }
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        struct Pair<K, V> {
            k: K,
            v: Vec<V>,
        }
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "svc.Wrap")]
        struct Wrap<T>(T);
        assert_eq!(Plain::MANIFEST, "remoting-actors.Plain");
        assert_eq!(Named::MANIFEST, "svc.Named");
        assert_eq!(
            <Pair<String, Named>>::MANIFEST,
            "remoting-actors.Pair<std.String,svc.Named>"
        );
        assert_eq!(
            <Wrap<Option<Plain>>>::MANIFEST,
            "svc.Wrap<std.Option<remoting-actors.Plain>>"
        );
        let _ = (Plain(0), Named::A, Wrap(()), Pair { k: (), v: vec![()] });
    }

    #[test]
    fn records_decode_by_the_serializer_they_name() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Own(u32);
        impl RemoteMessage for Own {
            const MANIFEST: &'static str = "t.Own";
            const SERIALIZER: SerializerId = SerializerId::custom(200);
            fn encode(&self, out: &mut BytesMut, _: usize) -> Result<(), SerializationError> {
                out.extend_from_slice(&self.0.to_be_bytes());
                Ok(())
            }
            fn decode(b: &[u8]) -> Result<Self, SerializationError> {
                let b: [u8; 4] = b
                    .try_into()
                    .map_err(|_| SerializationError::Decode("4 bytes".into()))?;
                Ok(Self(u32::from_be_bytes(b)))
            }
        }
        let trace = TraceContext::new([1; 16], [2; 8], 1).unwrap();
        let record = |serializer, trace, m: &Own| {
            let ext = Ext { serializer, trace };
            let mut b = BytesMut::new();
            ext.put(&mut b);
            match serializer {
                SerializerId::BINCODE => Bincode.serialize(m, &mut b).unwrap(),
                SerializerId::MSGPACK => MsgPack.serialize(m, &mut b).unwrap(),
                _ => m.encode(&mut b, usize::MAX).unwrap(),
            }
            (b, !ext.is_empty())
        };
        // The type's own format, MessagePack and bincode are all read, by
        // the id in the block, with the trace context beside.
        for (serializer, t) in [
            (SerializerId::custom(200), Some(trace)),
            (SerializerId::MSGPACK, None),
            (SerializerId::BINCODE, Some(trace)),
            (SerializerId::BINCODE, None),
        ] {
            let (b, ext) = record(serializer, t, &Own(77));
            assert_eq!(
                decode_record::<Own>(&b, ext),
                Ok((Own(77), t)),
                "{serializer}"
            );
        }
        let err = decode_record::<Own>(&[1, 130, 0], true).unwrap_err();
        assert!(
            err.to_string().contains("serializer 130 is unknown"),
            "{err}"
        );
        let err = decode_record::<u64>(&[7, 7], false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot decode bincode as std.u64") && err.contains("positional"),
            "{err}"
        );
    }

    #[test]
    fn manifest_ids_are_stable() {
        assert_eq!(manifest_id(""), 0x811c_9dc5);
        assert_eq!(manifest_id("a"), 0xe40c_292c);
        assert_ne!(manifest_id("bench.Payload"), manifest_id("bench.Marker"));
    }
}

/// The longest manifest a composite type ([`Vec<T>`], a derived generic
/// type, ...) can have: its name is built at compile time in a buffer of
/// this size, and a longer one is a compile error naming this limit.
/// Generous for any real nesting ("std.Result<std.Vec<svc.Item>,svc.Error>"
/// is 38 bytes).
pub const MAX_MANIFEST_LEN: usize = 256;

/// A manifest built at compile time from the manifests of its parts:
/// `const MANIFEST: &'static str` cannot be a `format!` of a generic
/// parameter's name, but it can be a slice of a constant buffer filled by
/// a `const fn`. Not an API: what the derive and this module's impls
/// expand to.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ManifestBuf {
    buf: [u8; MAX_MANIFEST_LEN],
    len: usize,
}

impl ManifestBuf {
    /// `parts`, concatenated.
    ///
    /// # Panics
    /// At compile time (it runs in a `const`): the result is longer than
    /// [`MAX_MANIFEST_LEN`].
    pub const fn concat(parts: &[&str]) -> Self {
        let mut buf = [0u8; MAX_MANIFEST_LEN];
        let mut len = 0;
        let mut i = 0;
        while i < parts.len() {
            let part = parts[i].as_bytes();
            let mut j = 0;
            while j < part.len() {
                assert!(
                    len < MAX_MANIFEST_LEN,
                    "a composite manifest is longer than actors::MAX_MANIFEST_LEN (256 bytes): \
                     give an inner type a shorter manifest"
                );
                buf[len] = part[j];
                len += 1;
                j += 1;
            }
            i += 1;
        }
        Self { buf, len }
    }

    /// The name built.
    pub const fn as_str(&self) -> &str {
        // Whole `&str`s were copied in, so the bytes are UTF-8.
        match std::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(s) => s,
            Err(_) => panic!("manifest parts are whole strings"),
        }
    }
}

macro_rules! builtin {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl RemoteMessage for $t {
            const MANIFEST: &'static str = $name;
        })*
    };
}

// Common reply types, so `ask` can answer with them across nodes.
// `Vec<u8>` is a byte string ("std.bytes"): see the `Vec` impl below.
builtin! {
    () => "std.unit",
    bool => "std.bool",
    u8 => "std.u8",
    u16 => "std.u16",
    u32 => "std.u32",
    u64 => "std.u64",
    u128 => "std.u128",
    usize => "std.usize",
    i8 => "std.i8",
    i16 => "std.i16",
    i32 => "std.i32",
    i64 => "std.i64",
    i128 => "std.i128",
    isize => "std.isize",
    f32 => "std.f32",
    f64 => "std.f64",
    char => "std.char",
    String => "std.String",
}

/// Whether two strings are equal, in a `const` context.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A `Vec` of remote messages, named after them (`std.Vec<svc.Item>`),
/// except `Vec<u8>`: a byte string, "std.bytes" (one impl for both, as
/// `u8` is a remote message too).
impl<T: RemoteMessage> RemoteMessage for Vec<T> {
    const MANIFEST: &'static str = ManifestBuf::concat(&vec_parts(T::MANIFEST)).as_str();
}

/// The parts of the name of a `Vec` of messages named `inner`.
const fn vec_parts(inner: &'static str) -> [&'static str; 3] {
    if same_str(inner, <u8 as RemoteMessage>::MANIFEST) {
        ["std.bytes", "", ""]
    } else {
        ["std.Vec<", inner, ">"]
    }
}

/// Composite messages: `$t` with parameters `$p`, named
/// `$open P1,P2,.. $close` after the parameters' manifests.
macro_rules! composite {
    ($open:literal $close:literal, $t:ty, $($p:ident),+ $(; $($bound:tt)+)?) => {
        impl<$($p: RemoteMessage),+> RemoteMessage for $t $(where $($bound)+)? {
            const MANIFEST: &'static str =
                ManifestBuf::concat(&composite!(@parts $open $close; $($p),+)).as_str();
        }
    };
    (@parts $open:literal $close:literal; $first:ident $(, $rest:ident)*) => {
        [$open, $first::MANIFEST, $(",", $rest::MANIFEST,)* $close]
    };
}

// Replies (and messages) of any shape built from remote messages, without
// newtypes; their manifests follow the inner ones, so an
// `ActorRef<Vec<A>>` never takes a `Vec<B>`.
composite!("std.Option<" ">", Option<T>, T);
composite!("std.Result<" ">", Result<T, E>, T, E);
composite!("std.Box<" ">", Box<T>, T);
composite!("std.HashMap<" ">", std::collections::HashMap<K, V>, K, V; K: Eq + std::hash::Hash);
composite!("std.BTreeMap<" ">", std::collections::BTreeMap<K, V>, K, V; K: Ord);
composite!("(" ")", (A, B), A, B);
composite!("(" ")", (A, B, C), A, B, C);
composite!("(" ")", (A, B, C, D), A, B, C, D);
