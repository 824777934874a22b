//! bincode 2's message format (the `standard()` configuration: varint
//! integers, little endian), with our own serde serializer (`to_buf`, into
//! a `BytesMut`, bounded) and deserializer (`from_slice`). This is the
//! format of message payloads, not the wire protocol (frames and
//! envelopes, `transport::frame` and `remote::envelope`).
//!
//! The bincode crate is only a test and fuzz dependency: the differential
//! check (`actors/src/differential.rs`) holds both to the same bytes. The
//! codec is ours because it is the receiving node's hot path and its
//! security boundary:
//! - **Speed.** bincode's serde path moves a 32-byte `DecodeError` through
//!   every `Result` and calls out of line for each integer; here errors are
//!   one pointer, built only on the cold path, and everything inlines into
//!   the message type's `Deserialize`. Side by side in `bench-remote`, the
//!   receiving node spent about half its time in bincode's decode.
//! - **Bounds.** Every length is checked against the bytes that actually
//!   arrived before anything is allocated or looped over, so no claim can
//!   make a decode allocate or spin beyond its input (bincode's byte limit
//!   does not stop `Vec<()>` claiming 2^64 elements); nesting is limited to
//!   [`MAX_DEPTH`], so a recursive type cannot overflow the stack.
//!
//! The format, as bincode 2.0.1 writes it: `u8`/`i8` one byte; other
//! integers as varints (below 251 one byte, else a marker 251/252/253/254
//! followed by a little-endian u16/u32/u64/u128), signed ones zigzagged
//! first; floats little endian; `bool` one byte 0 or 1; `char` as UTF-8;
//! strings, byte strings, sequences and maps prefixed by a varint length;
//! `Option` a tag byte 0 or 1; enums a varint `u32` variant index; structs
//! and tuples their fields in order. `deserialize_any` is not supported
//! (as in bincode: the format is not self-describing). Property tests and
//! the `wire` fuzz target check that this and the bincode crate agree.

use std::fmt;

use bytes::{BufMut, BytesMut};
use serde::{
    de::{self, DeserializeSeed, IntoDeserializer, Visitor},
    ser,
};

/// How deeply options, enums, sequences and maps may nest.
pub(crate) const MAX_DEPTH: u32 = 256;

/// Why a decode or an encode failed.
pub struct FormatError(Box<Kind>);

#[derive(Debug)]
pub(crate) enum Kind {
    /// Encoding: the output would have grown to `size` bytes, past the
    /// limit.
    TooLarge {
        size: usize,
    },
    /// Encoding: a sequence or map that does not know its length.
    SeqLength,
    Eof {
        needed: usize,
        left: usize,
    },
    Bool(u8),
    Varint {
        marker: u8,
        ty: &'static str,
    },
    OptionTag(u8),
    Utf8,
    Char,
    Length {
        claimed: u64,
        left: usize,
    },
    Depth,
    NotSupported(&'static str),
    Custom(String),
}

impl FormatError {
    #[cold]
    #[inline(never)]
    fn new(kind: Kind) -> Self {
        Self(Box::new(kind))
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.0
    }

    /// The input nests deeper than [`MAX_DEPTH`] (which the bincode crate
    /// does not limit).
    pub fn is_depth_limit(&self) -> bool {
        matches!(*self.0, Kind::Depth)
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Kind::TooLarge { size } => write!(f, "message exceeds the limit ({size} bytes)"),
            Kind::SeqLength => {
                f.write_str("sequences and maps must know their length to be encoded")
            }
            Kind::Eof { needed, left } => write!(
                f,
                "unexpected end of input: needed {needed} more bytes, {left} left"
            ),
            Kind::Bool(b) => write!(f, "invalid bool byte {b}"),
            Kind::Varint { marker, ty } => write!(f, "invalid varint marker {marker} for {ty}"),
            Kind::OptionTag(b) => write!(f, "invalid Option tag {b}"),
            Kind::Utf8 => f.write_str("string is not valid UTF-8"),
            Kind::Char => f.write_str("invalid char encoding"),
            Kind::Length { claimed, left } => write!(
                f,
                "length {claimed} exceeds the {left} bytes left in the message"
            ),
            Kind::Depth => write!(f, "nesting deeper than {MAX_DEPTH}"),
            Kind::NotSupported(what) => write!(f, "{what} is not supported by this format"),
            Kind::Custom(m) => f.write_str(m),
        }
    }
}

impl fmt::Debug for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for FormatError {}

impl de::Error for FormatError {
    #[cold]
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(Kind::Custom(msg.to_string()))
    }
}

impl ser::Error for FormatError {
    #[cold]
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(Kind::Custom(msg.to_string()))
    }
}

type Result<T> = std::result::Result<T, FormatError>;

/// Decodes a `T` from the start of `input`; returns it and the bytes used.
///
/// # Errors
/// Malformed or truncated input, or a `T` whose `Deserialize` refuses it.
#[inline]
pub(crate) fn from_slice<'de, T: de::Deserialize<'de>>(input: &'de [u8]) -> Result<(T, usize)> {
    let mut r = Reader {
        input,
        depth: MAX_DEPTH,
    };
    let value = T::deserialize(&mut r)?;
    Ok((value, input.len() - r.input.len()))
}

/// The deserializer: what is left of the input, and how much deeper it
/// may nest.
struct Reader<'de> {
    input: &'de [u8],
    depth: u32,
}

const U16_MARKER: u8 = 251;
const U32_MARKER: u8 = 252;
const U64_MARKER: u8 = 253;
const U128_MARKER: u8 = 254;

impl<'de> Reader<'de> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'de [u8]> {
        if n > self.input.len() {
            return Err(FormatError::new(Kind::Eof {
                needed: n,
                left: self.input.len(),
            }));
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        match self.input.split_first_chunk::<N>() {
            Some((head, rest)) => {
                self.input = rest;
                Ok(*head)
            }
            None => Err(FormatError::new(Kind::Eof {
                needed: N,
                left: self.input.len(),
            })),
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8> {
        match self.input.split_first() {
            Some((&b, rest)) => {
                self.input = rest;
                Ok(b)
            }
            None => Err(FormatError::new(Kind::Eof { needed: 1, left: 0 })),
        }
    }

    /// An unsigned varint whose marker may be at most `max` (the marker of
    /// the type's own width).
    #[inline]
    fn varint(&mut self, max: u8, ty: &'static str) -> Result<u64> {
        let marker = self.byte()?;
        if marker < U16_MARKER {
            return Ok(u64::from(marker));
        }
        self.varint_wide(marker, max, ty)
    }

    fn varint_wide(&mut self, marker: u8, max: u8, ty: &'static str) -> Result<u64> {
        if marker > max {
            return Err(FormatError::new(Kind::Varint { marker, ty }));
        }
        Ok(match marker {
            U16_MARKER => u64::from(u16::from_le_bytes(self.array()?)),
            U32_MARKER => u64::from(u32::from_le_bytes(self.array()?)),
            _ => u64::from_le_bytes(self.array()?),
        })
    }

    fn varint128(&mut self) -> Result<u128> {
        let marker = self.byte()?;
        if marker == U128_MARKER {
            Ok(u128::from_le_bytes(self.array()?))
        } else if marker < U16_MARKER {
            Ok(u128::from(marker))
        } else {
            Ok(u128::from(self.varint_wide(marker, U64_MARKER, "u128")?))
        }
    }

    #[inline]
    fn len(&mut self) -> Result<usize> {
        let n = self.varint(U64_MARKER, "usize")?;
        usize::try_from(n).map_err(|_| {
            FormatError::new(Kind::Length {
                claimed: n,
                left: self.input.len(),
            })
        })
    }

    /// A length prefix, refused if it claims more than what is left: every
    /// byte string byte, and every element of any sequence a message can
    /// usefully hold, takes at least one byte.
    #[inline]
    fn bounded_len(&mut self) -> Result<usize> {
        let n = self.len()?;
        if n > self.input.len() {
            return Err(FormatError::new(Kind::Length {
                claimed: n as u64,
                left: self.input.len(),
            }));
        }
        Ok(n)
    }

    #[inline]
    fn str(&mut self) -> Result<&'de str> {
        let n = self.bounded_len()?;
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| FormatError::new(Kind::Utf8))
    }

    #[inline]
    fn enter(&mut self) -> Result<()> {
        if self.depth == 0 {
            return Err(FormatError::new(Kind::Depth));
        }
        self.depth -= 1;
        Ok(())
    }

    #[inline]
    fn leave(&mut self) {
        self.depth += 1;
    }
}

#[inline]
fn unzigzag(n: u64) -> i64 {
    if n & 1 == 0 {
        (n / 2) as i64
    } else {
        !(n / 2) as i64
    }
}

macro_rules! unsigned {
    ($name:ident, $visit:ident, $t:ty, $marker:expr) => {
        #[inline]
        fn $name<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
            // The marker check bounds the value to the type's width.
            v.$visit(self.varint($marker, stringify!($t))? as $t)
        }
    };
}

macro_rules! signed {
    ($name:ident, $visit:ident, $t:ty, $marker:expr) => {
        #[inline]
        fn $name<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
            v.$visit(unzigzag(self.varint($marker, stringify!($t))?) as $t)
        }
    };
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = FormatError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(FormatError::new(Kind::NotSupported("deserialize_any")))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(FormatError::new(Kind::NotSupported(
            "deserialize_ignored_any",
        )))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(FormatError::new(Kind::NotSupported(
            "deserialize_identifier",
        )))
    }

    #[inline]
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        match self.byte()? {
            0 => v.visit_bool(false),
            1 => v.visit_bool(true),
            b => Err(FormatError::new(Kind::Bool(b))),
        }
    }

    #[inline]
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_u8(self.byte()?)
    }

    #[inline]
    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_i8(self.byte()? as i8)
    }

    unsigned!(deserialize_u16, visit_u16, u16, U16_MARKER);
    unsigned!(deserialize_u32, visit_u32, u32, U32_MARKER);
    unsigned!(deserialize_u64, visit_u64, u64, U64_MARKER);
    signed!(deserialize_i16, visit_i16, i16, U16_MARKER);
    signed!(deserialize_i32, visit_i32, i32, U32_MARKER);
    signed!(deserialize_i64, visit_i64, i64, U64_MARKER);

    fn deserialize_u128<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_u128(self.varint128()?)
    }

    fn deserialize_i128<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        let n = self.varint128()?;
        v.visit_i128(if n & 1 == 0 {
            (n / 2) as i128
        } else {
            !(n / 2) as i128
        })
    }

    #[inline]
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_f32(f32::from_le_bytes(self.array()?))
    }

    #[inline]
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_f64(f64::from_le_bytes(self.array()?))
    }

    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        let first = *self
            .input
            .first()
            .ok_or_else(|| FormatError::new(Kind::Eof { needed: 1, left: 0 }))?;
        let width = match first {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return Err(FormatError::new(Kind::Char)),
        };
        let bytes = self.take(width)?;
        let c = std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .ok_or_else(|| FormatError::new(Kind::Char))?;
        v.visit_char(c)
    }

    #[inline]
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_borrowed_str(self.str()?)
    }

    #[inline]
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_borrowed_str(self.str()?)
    }

    #[inline]
    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        let n = self.bounded_len()?;
        v.visit_borrowed_bytes(self.take(n)?)
    }

    #[inline]
    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        self.deserialize_bytes(v)
    }

    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        match self.byte()? {
            0 => v.visit_none(),
            1 => {
                self.enter()?;
                let out = v.visit_some(&mut *self);
                self.leave();
                out
            }
            b => Err(FormatError::new(Kind::OptionTag(b))),
        }
    }

    #[inline]
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        v.visit_unit()
    }

    #[inline]
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value> {
        v.visit_unit()
    }

    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value> {
        v.visit_newtype_struct(self)
    }

    #[inline]
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        let len = self.bounded_len()?;
        self.enter()?;
        let out = v.visit_seq(Seq {
            r: &mut *self,
            left: len,
        });
        self.leave();
        out
    }

    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value> {
        v.visit_seq(Seq { r: self, left: len })
    }

    #[inline]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value> {
        v.visit_seq(Seq { r: self, left: len })
    }

    #[inline]
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        let len = self.bounded_len()?;
        self.enter()?;
        let out = v.visit_map(Seq {
            r: &mut *self,
            left: len,
        });
        self.leave();
        out
    }

    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        v.visit_seq(Seq {
            r: self,
            left: fields.len(),
        })
    }

    #[inline]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        self.enter()?;
        let out = v.visit_enum(&mut *self);
        self.leave();
        out
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// Elements of a sequence, tuple or struct, or entries of a map.
struct Seq<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Seq<'_, 'de> {
    type Error = FormatError;

    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Seq<'_, 'de> {
    type Error = FormatError;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }

    #[inline]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.r)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Reader<'de> {
    type Error = FormatError;
    type Variant = Self;

    #[inline]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let idx = self.varint(U32_MARKER, "variant index")? as u32;
        let value = seed.deserialize(idx.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Reader<'de> {
    type Error = FormatError;

    #[inline]
    fn unit_variant(self) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(self)
    }

    #[inline]
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value> {
        v.visit_seq(Seq { r: self, left: len })
    }

    #[inline]
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        v.visit_seq(Seq {
            r: self,
            left: fields.len(),
        })
    }
}

/// Appends `value` to `out` in bincode 2's format, refusing to let `out`
/// grow past `limit` bytes (refused as soon as a write would cross it, so
/// the rest is never encoded).
///
/// # Errors
/// The limit, a sequence without a known length, or the value's own
/// `Serialize` failing.
#[inline]
pub(crate) fn to_buf<T: ser::Serialize + ?Sized>(
    value: &T,
    out: &mut BytesMut,
    limit: usize,
) -> std::result::Result<(), FormatError> {
    value.serialize(&mut Writer { out, limit })
}

/// The serializer: the output and the size it may not exceed.
struct Writer<'a> {
    out: &'a mut BytesMut,
    limit: usize,
}

type EResult = std::result::Result<(), FormatError>;

impl Writer<'_> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> EResult {
        let size = self.out.len() + bytes.len();
        if size > self.limit {
            return Err(FormatError::new(Kind::TooLarge { size }));
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    #[inline]
    fn varint(&mut self, v: u64) -> EResult {
        if v < u64::from(U16_MARKER) {
            self.put(&[v as u8])
        } else {
            self.varint_wide(v)
        }
    }

    fn varint_wide(&mut self, v: u64) -> EResult {
        let mut buf = [0u8; 9];
        let n = if let Ok(v) = u16::try_from(v) {
            buf[0] = U16_MARKER;
            buf[1..3].copy_from_slice(&v.to_le_bytes());
            3
        } else if let Ok(v) = u32::try_from(v) {
            buf[0] = U32_MARKER;
            buf[1..5].copy_from_slice(&v.to_le_bytes());
            5
        } else {
            buf[0] = U64_MARKER;
            buf[1..9].copy_from_slice(&v.to_le_bytes());
            9
        };
        self.put(&buf[..n])
    }

    fn varint128(&mut self, v: u128) -> EResult {
        match u64::try_from(v) {
            Ok(v) => self.varint(v),
            Err(_) => {
                self.put(&[U128_MARKER])?;
                self.put(&v.to_le_bytes())
            }
        }
    }

    #[inline]
    fn len(&mut self, len: Option<usize>) -> EResult {
        match len {
            Some(n) => self.varint(n as u64),
            None => Err(FormatError::new(Kind::SeqLength)),
        }
    }
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

impl ser::Serializer for &mut Writer<'_> {
    type Ok = ();
    type Error = FormatError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    #[inline]
    fn serialize_bool(self, v: bool) -> EResult {
        self.put(&[u8::from(v)])
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> EResult {
        self.put(&[v as u8])
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> EResult {
        self.varint(zigzag(i64::from(v)))
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> EResult {
        self.varint(zigzag(i64::from(v)))
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> EResult {
        self.varint(zigzag(v))
    }
    fn serialize_i128(self, v: i128) -> EResult {
        self.varint128(((v << 1) ^ (v >> 127)) as u128)
    }
    #[inline(always)]
    fn serialize_u8(self, v: u8) -> EResult {
        // A `Vec<u8>` is a sequence of these: one check and one store each.
        if self.out.len() >= self.limit {
            return Err(FormatError::new(Kind::TooLarge {
                size: self.out.len() + 1,
            }));
        }
        self.out.put_u8(v);
        Ok(())
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> EResult {
        self.varint(u64::from(v))
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> EResult {
        self.varint(u64::from(v))
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> EResult {
        self.varint(v)
    }
    fn serialize_u128(self, v: u128) -> EResult {
        self.varint128(v)
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> EResult {
        self.put(&v.to_le_bytes())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> EResult {
        self.put(&v.to_le_bytes())
    }
    fn serialize_char(self, v: char) -> EResult {
        self.put(v.encode_utf8(&mut [0; 4]).as_bytes())
    }
    #[inline]
    fn serialize_str(self, v: &str) -> EResult {
        self.varint(v.len() as u64)?;
        self.put(v.as_bytes())
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> EResult {
        self.varint(v.len() as u64)?;
        self.put(v)
    }
    #[inline]
    fn serialize_none(self) -> EResult {
        self.put(&[0])
    }
    #[inline]
    fn serialize_some<T: ser::Serialize + ?Sized>(self, value: &T) -> EResult {
        self.put(&[1])?;
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> EResult {
        Ok(())
    }
    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> EResult {
        Ok(())
    }
    #[inline]
    fn serialize_unit_variant(self, _name: &'static str, index: u32, _v: &'static str) -> EResult {
        self.varint(u64::from(index))
    }
    #[inline]
    fn serialize_newtype_struct<T: ser::Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> EResult {
        value.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: ser::Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> EResult {
        self.varint(u64::from(index))?;
        value.serialize(self)
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> std::result::Result<Self, FormatError> {
        self.len(len)?;
        Ok(self)
    }
    #[inline]
    fn serialize_tuple(self, _len: usize) -> std::result::Result<Self, FormatError> {
        Ok(self)
    }
    #[inline]
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> std::result::Result<Self, FormatError> {
        Ok(self)
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> std::result::Result<Self, FormatError> {
        self.varint(u64::from(index))?;
        Ok(self)
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> std::result::Result<Self, FormatError> {
        self.len(len)?;
        Ok(self)
    }
    #[inline]
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> std::result::Result<Self, FormatError> {
        Ok(self)
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> std::result::Result<Self, FormatError> {
        self.varint(u64::from(index))?;
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound {
    ($($tr:ident :: $method:ident),* $(,)?) => {
        $(impl ser::$tr for &mut Writer<'_> {
            type Ok = ();
            type Error = FormatError;
            #[inline]
            fn $method<T: ser::Serialize + ?Sized>(&mut self, value: &T) -> EResult {
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> EResult {
                Ok(())
            }
        })*
    };
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for &mut Writer<'_> {
    type Ok = ();
    type Error = FormatError;
    #[inline]
    fn serialize_key<T: ser::Serialize + ?Sized>(&mut self, key: &T) -> EResult {
        key.serialize(&mut **self)
    }
    #[inline]
    fn serialize_value<T: ser::Serialize + ?Sized>(&mut self, value: &T) -> EResult {
        value.serialize(&mut **self)
    }
    #[inline]
    fn end(self) -> EResult {
        Ok(())
    }
}

macro_rules! keyed {
    ($($tr:ident),* $(,)?) => {
        $(impl ser::$tr for &mut Writer<'_> {
            type Ok = ();
            type Error = FormatError;
            // Field names are not written: fields go in declaration order.
            #[inline]
            fn serialize_field<T: ser::Serialize + ?Sized>(
                &mut self,
                _key: &'static str,
                value: &T,
            ) -> EResult {
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> EResult {
                Ok(())
            }
        })*
    };
}

keyed!(SerializeStruct, SerializeStructVariant);

/// Encodes `v` with our writer of the format, for the differential check
/// (`actors/src/differential.rs`).
///
/// # Errors
/// As `to_buf`.
pub fn encode_bincode_format<T: ser::Serialize + ?Sized>(
    v: &T,
) -> std::result::Result<Vec<u8>, FormatError> {
    let mut out = BytesMut::new();
    to_buf(v, &mut out, usize::MAX)?;
    Ok(out.to_vec())
}

/// Decodes a `T` from the start of `input` with our reader of the format,
/// for the differential check; returns it and the bytes used.
///
/// # Errors
/// As `from_slice`.
pub fn decode_bincode_format<T: de::DeserializeOwned>(
    input: &[u8],
) -> std::result::Result<(T, usize), FormatError> {
    from_slice(input)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::differential::{agree, check as fuzz_differential};

    /// Every shape serde has, in one type.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct All {
        a: u8,
        b: u16,
        c: u32,
        d: u64,
        e: u128,
        f: i8,
        g: i16,
        h: i32,
        i: i64,
        j: i128,
        k: f32,
        l: f64,
        m: bool,
        n: char,
        o: String,
        p: Vec<u8>,
        q: Option<u32>,
        r: (u16, i64),
        s: Vec<E>,
        t: BTreeMap<u32, String>,
        u: Option<Box<All>>,
        v: usize,
        w: Unit,
        x: Newtype,
        y: Tuple,
        z: crate::SharedBytes,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum E {
        Unit,
        New(i32),
        Tuple(u8, String),
        Struct { x: u64, y: Option<bool> },
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Unit;
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Newtype(u32);
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Tuple(i16, u64);

    fn e() -> impl Strategy<Value = E> {
        prop_oneof![
            Just(E::Unit),
            any::<i32>().prop_map(E::New),
            (any::<u8>(), ".{0,8}").prop_map(|(a, b)| E::Tuple(a, b)),
            (any::<u64>(), any::<Option<bool>>()).prop_map(|(x, y)| E::Struct { x, y }),
        ]
    }

    fn all() -> impl Strategy<Value = All> {
        let ints = (
            any::<u8>(),
            any::<u16>(),
            any::<u32>(),
            any::<u64>(),
            any::<u128>(),
            any::<i8>(),
            any::<i16>(),
            any::<i32>(),
            any::<i64>(),
            any::<i128>(),
            any::<usize>(),
        );
        let rest = (
            any::<f32>(),
            any::<f64>(),
            any::<bool>(),
            any::<char>(),
            ".{0,16}",
            prop::collection::vec(any::<u8>(), 0..300),
            any::<Option<u32>>(),
            any::<(u16, i64)>(),
        );
        let more = (
            prop::collection::vec(e(), 0..4),
            prop::collection::btree_map(any::<u32>(), ".{0,4}", 0..4),
            any::<u32>(),
            any::<(i16, u64)>(),
            prop::collection::vec(any::<u8>(), 0..40),
            any::<bool>(),
        );
        (ints, rest, more).prop_map(
            |(
                (a, b, c, d, e, f, g, h, i, j, v),
                (k, l, m, n, o, p, q, r),
                (s, t, x, y, z, nest),
            )| {
                let mut out = All {
                    a,
                    b,
                    c,
                    d,
                    e,
                    f,
                    g,
                    h,
                    i,
                    j,
                    k,
                    l,
                    m,
                    n,
                    o,
                    p,
                    q,
                    r,
                    s,
                    t,
                    u: None,
                    v,
                    w: Unit,
                    x: Newtype(x),
                    y: Tuple(y.0, y.1),
                    z: crate::SharedBytes::from(z),
                };
                if nest {
                    out.u = Some(Box::new(out.clone()));
                }
                out
            },
        )
    }

    const STD: bincode::config::Configuration = bincode::config::standard();

    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(v, STD).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decodes_what_bincode_encodes(v in all()) {
            let bytes = encode(&v);
            let mut ours = BytesMut::new();
            to_buf(&v, &mut ours, usize::MAX).unwrap();
            prop_assert_eq!(&ours[..], &bytes[..], "encodes as bincode does");
            let (back, used) = from_slice::<All>(&bytes).unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(&encode(&back), &bytes);
            prop_assert!(agree::<All>(&bytes));
        }

        #[test]
        fn agrees_with_bincode_on_damaged_input(
            v in all(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = encode(&v);
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            agree::<All>(&bytes);
            let cut = cut.index(bytes.len());
            agree::<All>(&bytes[..cut]);
        }

        #[test]
        fn agrees_with_bincode_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            agree::<E>(&bytes);
            agree::<(u16, i32, char, Option<u64>, u128, i128)>(&bytes);
            agree::<(String, Vec<u32>, bool)>(&bytes);
            fuzz_differential(&bytes);
        }
    }

    #[test]
    fn varint_edges_agree() {
        for v in [
            0u64,
            250,
            251,
            255,
            256,
            65535,
            65536,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            u64::MAX,
        ] {
            assert!(agree::<u64>(&encode(&v)));
            assert!(agree::<i64>(&encode(&(v as i64))));
            // Narrower types refuse wider markers, like bincode.
            agree::<u16>(&encode(&v));
            agree::<u32>(&encode(&v));
            agree::<i16>(&encode(&(v as i64)));
        }
    }

    #[test]
    fn encoding_errors_are_named() {
        let mut out = BytesMut::new();
        // A Vec<u8> is a sequence of bytes: refused at the byte that
        // crosses the limit (its length prefix, then 50 elements).
        let e = to_buf(&vec![0u8; 100], &mut out, 50).unwrap_err();
        assert!(matches!(e.kind(), Kind::TooLarge { size: 51 }), "{e}");
        // A sequence of unknown length cannot be written in this format.
        struct Unsized;
        impl Serialize for Unsized {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                s.serialize_seq(None)?.end()
            }
        }
        let e = to_buf(&Unsized, &mut out, usize::MAX).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sequences and maps must know their length to be encoded"
        );
        assert!(bincode::serde::encode_to_vec(Unsized, STD).is_err());
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        #[derive(Debug, Serialize, Deserialize)]
        enum Tree {
            Leaf,
            Node(Box<Tree>),
        }
        // 100,000 levels: variant 1 repeated, then a leaf.
        let mut bytes = vec![1u8; 100_000];
        bytes.push(0);
        let err = from_slice::<Tree>(&bytes).unwrap_err().to_string();
        assert!(err.contains("nesting deeper than 256"), "{err}");
        // Within the limit it decodes.
        let mut ok = vec![1u8; 200];
        ok.push(0);
        assert_eq!(from_slice::<Tree>(&ok).unwrap().1, 201);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let e = from_slice::<bool>(&[2]).unwrap_err().to_string();
        assert_eq!(e, "invalid bool byte 2");
        let e = from_slice::<u16>(&[252, 0, 0, 0, 0])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "invalid varint marker 252 for u16");
        let e = from_slice::<u64>(&[253, 1]).unwrap_err().to_string();
        assert!(e.contains("needed 8 more bytes, 1 left"), "{e}");
        let e = from_slice::<Option<u8>>(&[7]).unwrap_err().to_string();
        assert_eq!(e, "invalid Option tag 7");
        let e = from_slice::<String>(&[2, 0xff, 0xfe])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "string is not valid UTF-8");
        let e = from_slice::<serde_json_like::Any>(&[0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("deserialize_any is not supported"), "{e}");
    }

    mod serde_json_like {
        /// A type that asks for `deserialize_any`, like `serde_json::Value`.
        #[derive(Debug)]
        pub(super) struct Any;
        impl<'de> serde::Deserialize<'de> for Any {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = Any;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("anything")
                    }
                }
                d.deserialize_any(V)
            }
        }
    }
}
