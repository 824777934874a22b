//! Message serialization: the [`Serializer`] trait, the default
//! [`Bincode`] implementation with a byte limit, and [`RemoteMessage`], which
//! gives a type a stable manifest and its wire codec.
//!
//! bincode 2 is unmaintained upstream, so nothing outside this module names
//! it: a message type can switch format by overriding
//! [`RemoteMessage::encode`] and [`RemoteMessage::decode`] with another
//! [`Serializer`].

use std::{
    cell::{Cell, RefCell},
    fmt,
    ops::Deref,
};

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};

use crate::error::SerializationError;

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

    /// Reads a value that fills `bytes` exactly.
    ///
    /// # Errors
    /// Malformed, truncated or over-long input, or trailing bytes.
    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError>;
}

/// bincode 2's format (serde, standard config: varint integers, little
/// endian), written and read by this crate's own serde serializer and
/// deserializer (`actors::wire`, private; property tests and a fuzz target
/// check they agree byte for byte with the bincode crate). Decoding bounds
/// every length by the bytes that actually arrived, so a hostile length
/// claim is refused before anything is allocated, whatever the message's
/// size.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

thread_local! {
    /// The most bytes [`Bincode::serialize`] may leave in its output buffer
    /// on this thread; `usize::MAX` (no limit) except inside
    /// [`with_encode_limit`].
    static ENCODE_LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Runs `f` with [`Bincode::serialize`] on this thread refusing to grow its
/// output buffer past `limit` bytes: a message too large to send is
/// refused with [`SerializationError::TooLarge`] as soon as it crosses the
/// limit, without serializing (and allocating) the rest of it. Custom
/// [`RemoteMessage::encode`] implementations that do not use [`Bincode`]
/// are not bounded this way; their size is checked after encoding.
pub(crate) fn with_encode_limit<T>(limit: usize, f: impl FnOnce() -> T) -> T {
    let prev = ENCODE_LIMIT.with(|l| l.replace(limit));
    // Restore even if `f` panics (a user `Serialize` impl may).
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENCODE_LIMIT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(prev);
    f()
}

impl Serializer for Bincode {
    #[inline]
    fn serialize<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
    ) -> Result<(), SerializationError> {
        let limit = ENCODE_LIMIT.with(Cell::get);
        let start = out.len();
        crate::wire::to_buf(value, out, limit).map_err(|e| {
            out.truncate(start);
            encode_error(&e, limit)
        })
    }

    #[inline]
    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError> {
        match crate::wire::from_slice::<T>(bytes) {
            Ok((value, used)) if used == bytes.len() => Ok(value),
            Ok((_, used)) => Err(SerializationError::TrailingBytes {
                used,
                len: bytes.len(),
            }),
            Err(e) => Err(decode_error(e)),
        }
    }
}

#[cold]
#[inline(never)]
fn encode_error(e: &crate::wire::WireError, limit: usize) -> SerializationError {
    match e.kind() {
        crate::wire::Kind::TooLarge { size } => SerializationError::TooLarge { size: *size, limit },
        _ => SerializationError::Encode(e.to_string()),
    }
}

#[cold]
#[inline(never)]
fn decode_error(e: crate::wire::WireError) -> SerializationError {
    SerializationError::Decode(e.to_string())
}

/// What a decode on this thread can see: the system that resolves
/// `ActorRef`s, and the frame that `SharedBytes` fields slice.
pub(crate) struct DecodeCtx {
    pub(crate) system: RefCell<std::sync::Weak<crate::system::SystemInner>>,
    frame: RefCell<Option<Bytes>>,
}

thread_local! {
    pub(crate) static DECODE: DecodeCtx = const {
        DecodeCtx {
            system: RefCell::new(std::sync::Weak::new()),
            frame: RefCell::new(None),
        }
    };
}

/// Decodes `frame[range]` with `f`, with `frame` available to
/// [`SharedBytes`] fields and `system` to `ActorRef` fields. The system is
/// only replaced when it differs, and the frame is cloned once, so the
/// context costs one reference-count update on a counter this thread owns.
pub(crate) fn decode_frame<T>(
    system: &std::sync::Arc<crate::system::SystemInner>,
    frame: &Bytes,
    range: std::ops::Range<usize>,
    f: impl FnOnce(&[u8]) -> T,
) -> T {
    DECODE.with(|ctx| {
        if !std::ptr::eq(ctx.system.borrow().as_ptr(), std::sync::Arc::as_ptr(system)) {
            *ctx.system.borrow_mut() = std::sync::Arc::downgrade(system);
        }
        let same = ctx
            .frame
            .borrow()
            .as_ref()
            .is_some_and(|f| f.as_ptr() == frame.as_ptr() && f.len() == frame.len());
        if !same {
            *ctx.frame.borrow_mut() = Some(frame.clone());
        }
        f(&frame[range])
    })
}

/// Runs `f` (which decodes records of `frame` with no await in between)
/// with `frame` and `system` as the decode context, set once for the whole
/// batch, then releases the frame.
pub(crate) fn decode_batch<T>(
    system: &std::sync::Arc<crate::system::SystemInner>,
    frame: &Bytes,
    f: impl FnOnce() -> T,
) -> T {
    DECODE.with(|ctx| {
        if !std::ptr::eq(ctx.system.borrow().as_ptr(), std::sync::Arc::as_ptr(system)) {
            *ctx.system.borrow_mut() = std::sync::Arc::downgrade(system);
        }
        *ctx.frame.borrow_mut() = Some(frame.clone());
    });
    let out = f();
    release_frame();
    out
}

/// Releases this thread's hold on the last decoded frame, so its buffer
/// can be reused.
pub(crate) fn release_frame() {
    DECODE.with(|ctx| ctx.frame.borrow_mut().take());
}

#[cfg(test)]
fn with_frame<T>(frame: &Bytes, f: impl FnOnce() -> T) -> T {
    DECODE.with(|ctx| {
        let prev = ctx.frame.replace(Some(frame.clone()));
        let out = f();
        ctx.frame.replace(prev);
        out
    })
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
                let shared = DECODE.with(|ctx| {
                    let frame = ctx.frame.borrow();
                    let frame = frame.as_ref()?;
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

/// A message type that can cross nodes.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ping(u64);
/// impl actors::RemoteMessage for Ping {
///     const MANIFEST: &'static str = "example.Ping";
/// }
/// ```
pub trait RemoteMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The type's stable name on the wire. Never change it once nodes
    /// exchange the type; two types must not share one.
    const MANIFEST: &'static str;

    /// Appends the encoded message. Override to use another
    /// [`Serializer`] for this type.
    ///
    /// # Errors
    /// As [`Serializer::serialize`].
    fn encode(&self, out: &mut BytesMut) -> Result<(), SerializationError> {
        Bincode.serialize(self, out)
    }

    /// Decodes a message. Override together with [`encode`](Self::encode).
    ///
    /// # Errors
    /// As [`Serializer::deserialize`].
    fn decode(bytes: &[u8]) -> Result<Self, SerializationError> {
        Bincode.deserialize(bytes)
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
        let m: M = with_frame(&frame, || Bincode.deserialize(&frame)).unwrap();
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
        let err = with_encode_limit(1024, || Bincode.serialize(&big, &mut out)).unwrap_err();
        assert!(
            matches!(err, SerializationError::TooLarge { size, limit: 1024 } if size > 1024 && size < 2048),
            "{err}"
        );
        assert!(out.is_empty(), "nothing is left behind");
        assert!(out.capacity() < 4096, "the rest was never serialized");
        // Outside the scope the limit is gone again.
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
    fn manifest_ids_are_stable() {
        assert_eq!(manifest_id(""), 0x811c_9dc5);
        assert_eq!(manifest_id("a"), 0xe40c_292c);
        assert_ne!(manifest_id("bench.Payload"), manifest_id("bench.Marker"));
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
builtin! {
    () => "std.unit",
    bool => "std.bool",
    u32 => "std.u32",
    u64 => "std.u64",
    i64 => "std.i64",
    f64 => "std.f64",
    String => "std.String",
    Vec<u8> => "std.bytes",
    Option<String> => "std.Option<String>",
}
