//! Encoding without serde's visitors, for message types that opt in with
//! `#[derive(RemoteMessage)]` and `#[remote(direct)]`.
//!
//! A message's [`RemoteMessage::encode`](crate::RemoteMessage::encode)
//! normally goes through serde: the type's `Serialize` calls the
//! serializer once per variant and field, through serde's generic
//! interface. For a small message around a byte payload that is most of
//! what encoding costs. A type with `#[remote(direct)]` gets a
//! [`DirectEncode`] impl instead, generated from its definition, that
//! writes the same bytes (bincode's format, as [`Bincode`]
//! writes them) with plain calls on a [`Writer`]. Decoding is unchanged:
//! it still goes through serde, and a peer sees no difference on the wire
//! (the unit tests compare both encoders' output byte for byte).
//!
//! ```
//! use actors::{RemoteMessage, SharedBytes};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, RemoteMessage)]
//! #[remote(manifest = "svc.Chunk", direct)]
//! enum Chunk {
//!     Data { seq: u64, bytes: SharedBytes },
//!     End(u64),
//! }
//! ```
//!
//! # What a direct type may hold
//! Every field's type implements [`DirectEncode`]: the integers, `bool`,
//! `char`, the floats, `()`, `String` and `str`, [`SharedBytes`],
//! [`ActorRef`], `Option`, `Box`, `Vec` and slices, tuples of up to four,
//! and other types that derive `RemoteMessage` with `direct`. A field of
//! any other serde type is marked `#[remote(serde)]` and is written
//! through serde (into the same buffer, in the same format).
//!
//! The derive refuses `#[serde(..)]` attributes on the type's fields and
//! variants, and the container attributes that change what serde writes
//! (`transparent`, `into`, `tag`, `untagged`, `content`, `remote`): the
//! direct encoder could not follow them, and the peer would decode
//! something else than was sent.

use bytes::{BufMut, BytesMut};
use serde::Serialize;

use crate::{
    ActorRef, Bincode, SerializationError, Serializer, SharedBytes,
    bincode_format::{ONE_BYTE_VARINT, wide_varint},
};

/// Writes a value in bincode's format (standard configuration: varint
/// integers, little endian), as [`Bincode`] does, without
/// going through serde. Derived by `#[remote(direct)]`; implement it by
/// hand only for a type whose bytes you write exactly as its `Serialize`
/// would (the peer decodes them through serde).
pub trait DirectEncode {
    /// Appends `self` to `w`.
    ///
    /// # Errors
    /// [`SerializationError::TooLarge`] when the message would outgrow its
    /// limit; whatever a field written through serde fails with.
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError>;
}

/// Where a [`DirectEncode`] writes: the message's buffer, and the size the
/// message may not outgrow.
pub struct Writer<'a> {
    out: &'a mut BytesMut,
    /// Where the message starts in `out`.
    start: usize,
    /// The length `out` may not pass.
    end: usize,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("written", &(self.out.len() - self.start))
            .field("limit", &(self.end - self.start))
            .finish()
    }
}

impl Writer<'_> {
    /// Appends `bytes` as they are.
    ///
    /// # Errors
    /// `TooLarge` past the limit (nothing is written then).
    #[inline(always)]
    pub fn put(&mut self, bytes: &[u8]) -> Result<(), SerializationError> {
        let size = self.out.len() + bytes.len();
        if size > self.end {
            return Err(self.too_large(size));
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// Appends one byte.
    ///
    /// # Errors
    /// `TooLarge` past the limit.
    #[inline(always)]
    pub fn byte(&mut self, b: u8) -> Result<(), SerializationError> {
        if self.out.len() >= self.end {
            return Err(self.too_large(self.out.len() + 1));
        }
        self.out.put_u8(b);
        Ok(())
    }

    /// Appends an unsigned integer as bincode's varint.
    ///
    /// # Errors
    /// `TooLarge` past the limit.
    #[inline(always)]
    pub fn varint(&mut self, v: u64) -> Result<(), SerializationError> {
        if v < ONE_BYTE_VARINT {
            self.byte(v as u8)
        } else {
            self.varint_wide(v)
        }
    }

    #[inline(never)]
    fn varint_wide(&mut self, v: u64) -> Result<(), SerializationError> {
        let mut buf = [0u8; 9];
        let n = wide_varint(v, &mut buf);
        self.put(&buf[..n])
    }

    /// Appends a signed integer as bincode does: zigzag, then varint.
    ///
    /// # Errors
    /// `TooLarge` past the limit.
    #[inline(always)]
    pub fn signed(&mut self, v: i64) -> Result<(), SerializationError> {
        self.varint(((v << 1) ^ (v >> 63)) as u64)
    }

    /// Appends an enum variant's index (its position in the declaration).
    ///
    /// # Errors
    /// `TooLarge` past the limit.
    #[inline(always)]
    pub fn variant(&mut self, index: u32) -> Result<(), SerializationError> {
        self.varint(u64::from(index))
    }

    /// Appends a length-prefixed byte string (`str`, bytes).
    ///
    /// # Errors
    /// `TooLarge` past the limit.
    #[inline(always)]
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), SerializationError> {
        self.varint(bytes.len() as u64)?;
        self.put(bytes)
    }

    /// Appends `value` through its `Serialize`, in the same format: for a
    /// field the direct encoder does not know (`#[remote(serde)]`).
    ///
    /// # Errors
    /// `TooLarge` past the limit, and whatever `Serialize` fails with.
    #[inline(never)]
    pub fn serde<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerializationError> {
        let at = self.out.len();
        Bincode
            .serialize_limited(value, self.out, self.end.saturating_sub(at))
            .map_err(|e| match e {
                SerializationError::TooLarge { size, .. } => self.too_large(at + size),
                e => e,
            })
    }

    #[cold]
    #[inline(never)]
    fn too_large(&self, size: usize) -> SerializationError {
        SerializationError::TooLarge {
            size: size - self.start,
            limit: self.end - self.start,
        }
    }
}

/// Encodes `value` into `out`, at most `limit` bytes of it: what
/// `#[remote(direct)]` makes a message's `RemoteMessage::encode`. On an
/// error `out` is as it was.
///
/// # Errors
/// As [`DirectEncode::encode_direct`].
#[inline]
pub fn encode<T: DirectEncode + ?Sized>(
    value: &T,
    out: &mut BytesMut,
    limit: usize,
) -> Result<(), SerializationError> {
    let start = out.len();
    let mut w = Writer {
        out,
        start,
        end: start.saturating_add(limit),
    };
    match value.encode_direct(&mut w) {
        Ok(()) => Ok(()),
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl DirectEncode for $t {
            #[inline(always)]
            fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
                w.varint(*self as u64)
            }
        }
    )*};
}
unsigned!(u16, u32, u64, usize);

macro_rules! signed {
    ($($t:ty),*) => {$(
        impl DirectEncode for $t {
            #[inline(always)]
            fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
                w.signed(*self as i64)
            }
        }
    )*};
}
signed!(i16, i32, i64, isize);

impl DirectEncode for u8 {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.byte(*self)
    }
}

impl DirectEncode for i8 {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.byte(*self as u8)
    }
}

impl DirectEncode for bool {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.byte(u8::from(*self))
    }
}

impl DirectEncode for f32 {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.put(&self.to_le_bytes())
    }
}

impl DirectEncode for f64 {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.put(&self.to_le_bytes())
    }
}

impl DirectEncode for char {
    #[inline]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.put(self.encode_utf8(&mut [0; 4]).as_bytes())
    }
}

impl DirectEncode for () {
    #[inline(always)]
    fn encode_direct(&self, _: &mut Writer<'_>) -> Result<(), SerializationError> {
        Ok(())
    }
}

impl DirectEncode for str {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.bytes(self.as_bytes())
    }
}

impl DirectEncode for String {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.bytes(self.as_bytes())
    }
}

impl DirectEncode for SharedBytes {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.bytes(self)
    }
}

/// A ref carries its node's address, which serde's impl resolves: written
/// through it.
impl<M: crate::RemoteMessage> DirectEncode for ActorRef<M> {
    #[inline]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.serde(self)
    }
}

impl<T: DirectEncode + ?Sized> DirectEncode for &T {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        (**self).encode_direct(w)
    }
}

impl<T: DirectEncode + ?Sized> DirectEncode for Box<T> {
    #[inline(always)]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        (**self).encode_direct(w)
    }
}

impl<T: DirectEncode> DirectEncode for Option<T> {
    #[inline]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        match self {
            None => w.byte(0),
            Some(v) => {
                w.byte(1)?;
                v.encode_direct(w)
            }
        }
    }
}

/// A sequence: its length, then each element (serde writes a `Vec<u8>`
/// as a sequence too, one byte an element).
impl<T: DirectEncode> DirectEncode for [T] {
    #[inline]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        w.varint(self.len() as u64)?;
        self.iter().try_for_each(|v| v.encode_direct(w))
    }
}

impl<T: DirectEncode> DirectEncode for Vec<T> {
    #[inline]
    fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
        self.as_slice().encode_direct(w)
    }
}

macro_rules! tuple {
    ($($name:ident $i:tt),+) => {
        impl<$($name: DirectEncode),+> DirectEncode for ($($name,)+) {
            #[inline(always)]
            fn encode_direct(&self, w: &mut Writer<'_>) -> Result<(), SerializationError> {
                $(self.$i.encode_direct(w)?;)+
                Ok(())
            }
        }
    };
}
tuple!(A 0);
tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
tuple!(A 0, B 1, C 2, D 3);

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use proptest::prelude::*;
    use serde::Deserialize;

    use super::*;
    use crate::RemoteMessage;

    /// `v`'s direct bytes are its serde bytes, and a limit refuses both at
    /// the same size.
    fn same<T: DirectEncode + Serialize + ?Sized + Debug>(v: &T) {
        let mut serde = BytesMut::new();
        Bincode
            .serialize_limited(v, &mut serde, usize::MAX)
            .expect("serde encodes");
        let mut direct = BytesMut::from(&b"head"[..]);
        encode(v, &mut direct, usize::MAX).expect("direct encodes");
        assert_eq!(&direct[4..], &serde[..], "{v:?}");
        if !serde.is_empty() {
            let limit = serde.len() - 1;
            let mut out = BytesMut::from(&b"head"[..]);
            let e = encode(v, &mut out, limit).expect_err("over the limit");
            assert!(
                matches!(e, SerializationError::TooLarge { limit: l, size } if l == limit && size > limit),
                "{v:?}: {e:?}"
            );
            assert_eq!(&out[..], b"head", "nothing is left behind");
        }
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, crate::RemoteMessage)]
    #[remote(crate = "crate", manifest = "test.Direct", direct)]
    enum Msg {
        Unit,
        Payload(SharedBytes),
        Stamped(u64, SharedBytes),
        Named {
            id: u32,
            name: String,
            flag: bool,
            delta: i64,
            parts: Vec<u16>,
            maybe: Option<Box<Inner>>,
        },
        Other(#[remote(serde)] Plain),
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, crate::RemoteMessage)]
    #[remote(crate = "crate", manifest = "test.Inner", direct)]
    struct Inner {
        x: f64,
        c: char,
        pair: (u8, i8),
    }

    /// The shapes with nothing to write must compile too.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, crate::RemoteMessage)]
    #[remote(crate = "crate", manifest = "test.Unit", direct)]
    struct Unit;

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, crate::RemoteMessage)]
    #[remote(crate = "crate", manifest = "test.Never", direct)]
    enum Never {}

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, crate::RemoteMessage)]
    #[remote(crate = "crate", manifest = "test.Wrapped", direct)]
    struct Wrapped<T>(T, Unit);

    /// A field type with no `DirectEncode`: written through serde.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    struct Plain {
        v: Vec<String>,
    }

    fn msg() -> impl Strategy<Value = Msg> {
        let bytes = proptest::collection::vec(any::<u8>(), 0..400).prop_map(SharedBytes::from);
        prop_oneof![
            Just(Msg::Unit),
            bytes.clone().prop_map(Msg::Payload),
            (any::<u64>(), bytes).prop_map(|(t, b)| Msg::Stamped(t, b)),
            (
                any::<u32>(),
                ".{0,300}",
                any::<bool>(),
                any::<i64>(),
                proptest::collection::vec(any::<u16>(), 0..300),
                proptest::option::of((any::<f64>(), any::<char>(), any::<(u8, i8)>())),
            )
                .prop_map(|(id, name, flag, delta, parts, maybe)| Msg::Named {
                    id,
                    name,
                    flag,
                    delta,
                    parts,
                    maybe: maybe.map(|(x, c, pair)| Box::new(Inner { x, c, pair })),
                }),
            proptest::collection::vec(".{0,5}", 0..4).prop_map(|v| Msg::Other(Plain { v })),
        ]
    }

    proptest! {
        #[test]
        fn a_direct_message_is_written_as_serde_writes_it(m in msg()) {
            same(&m);
            // And `encode` is the direct one: decoding gives it back.
            let mut out = BytesMut::new();
            m.encode(&mut out, usize::MAX).expect("encodes");
            let back = Msg::decode(&out).expect("decodes");
            prop_assert_eq!(back.encode_direct_bytes(), m.encode_direct_bytes());
        }

        #[test]
        fn integers_at_every_width(v in any::<u64>(), s in any::<i64>()) {
            for v in [v, v >> 16, v >> 32, v >> 48, v >> 56, 250, 251, 65_535, 65_536] {
                same(&v);
                same(&(v as u32));
                same(&(v as u16));
                same(&(v as usize));
            }
            for s in [s, s >> 16, s >> 32, s >> 56, -126, -125, 125, 126, i64::MIN] {
                same(&s);
                same(&(s as i32));
                same(&(s as i16));
                same(&(s as i8));
                same(&(s as isize));
            }
        }
    }

    #[test]
    fn the_rest_of_the_types() {
        same(&true);
        same(&3.5f32);
        same(&'é');
        same(&());
        same("text");
        same(&[1u8, 2, 3][..]);
        same(&vec![vec![1u32, 300], vec![]]);
        same(&Some(Some(7u8)));
        same(&None::<u8>);
        same(&(1u8, 2u16, 3u32, 4u64));
        same(&Msg::Unit);
        same(&Unit);
        same(&Wrapped(Msg::Payload(SharedBytes::from(vec![1, 2])), Unit));
        same(&Wrapped(7u64, Unit));
        // `Never` has no value; that it derives is the test.
        let _: Option<Never> = None;
    }

    impl Msg {
        fn encode_direct_bytes(&self) -> Vec<u8> {
            let mut out = BytesMut::new();
            encode(self, &mut out, usize::MAX).expect("encodes");
            out.to_vec()
        }
    }
}
