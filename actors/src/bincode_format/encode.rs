//! The serializer of bincode 2's format (`to_buf`): a writer into a
//! `BytesMut` that refuses a write that would take the output past its
//! limit, so an oversized message is never encoded whole.

use bytes::{BufMut, BytesMut};
use serde::ser;

use super::{FormatError, Kind, U16_MARKER, U32_MARKER, U64_MARKER, U128_MARKER};

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

/// Values below this are a varint of one byte, themselves.
pub(crate) const ONE_BYTE_VARINT: u64 = U16_MARKER as u64;

/// Writes `v` (at least [`ONE_BYTE_VARINT`]) as a marker and its
/// little-endian width into `buf`; returns how many bytes it took. Shared
/// with `direct`, which writes the same format without serde.
#[inline]
pub(crate) fn wide_varint(v: u64, buf: &mut [u8; 9]) -> usize {
    if let Ok(v) = u16::try_from(v) {
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
    }
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
        let n = wide_varint(v, &mut buf);
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

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    const STD: bincode::config::Configuration = bincode::config::standard();

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

    fn encoded<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
        let mut out = BytesMut::new();
        to_buf(v, &mut out, usize::MAX).unwrap();
        out.to_vec()
    }

    #[test]
    fn varints_take_the_narrowest_width_and_signed_ones_zigzag() {
        assert_eq!(encoded(&250u64), [250]);
        assert_eq!(encoded(&251u64), [U16_MARKER, 251, 0]);
        assert_eq!(encoded(&65_535u32), [U16_MARKER, 255, 255]);
        assert_eq!(encoded(&65_536u32), [U32_MARKER, 0, 0, 1, 0]);
        let mut wide = vec![U64_MARKER];
        wide.extend_from_slice(&(1u64 << 32).to_le_bytes());
        assert_eq!(encoded(&(1u64 << 32)), wide);
        let mut widest = vec![U128_MARKER];
        widest.extend_from_slice(&(1u128 << 64).to_le_bytes());
        assert_eq!(encoded(&(1u128 << 64)), widest);
        assert_eq!(encoded(&5u128), [5], "a small u128 is a plain varint");
        // Zigzag: 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
        assert_eq!(encoded(&0i32), [0]);
        assert_eq!(encoded(&-1i64), [1]);
        assert_eq!(encoded(&1i16), [2]);
        assert_eq!(encoded(&-2i128), [3]);
        assert_eq!(encoded(&i64::MIN)[0], U64_MARKER);
        // `u8`, `i8` and `bool` are one byte as they are.
        assert_eq!(encoded(&(255u8, -1i8, true)), [255, 255, 1]);
    }

    #[test]
    fn the_limit_is_checked_before_each_write() {
        // 300 takes three bytes: refused under three, written at three.
        let mut out = BytesMut::new();
        let e = to_buf(&300u64, &mut out, 2).unwrap_err();
        assert!(matches!(e.kind(), Kind::TooLarge { size: 3 }), "{e}");
        assert!(out.is_empty(), "a refused write writes nothing");
        to_buf(&300u64, &mut out, 3).unwrap();
        // The limit counts what `out` already held.
        let e = to_buf(&1u8, &mut out, 3).unwrap_err();
        assert!(matches!(e.kind(), Kind::TooLarge { size: 4 }), "{e}");
        assert_eq!(out.len(), 3);
    }
}
