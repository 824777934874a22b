//! The deserializer of bincode 2's format (`from_slice`): a reader over
//! the input that checks every length against the bytes left before it
//! allocates or loops, and limits nesting to [`MAX_DEPTH`].

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{
    FormatError, Kind, MAX_DEPTH, Result, U16_MARKER, U32_MARKER, U64_MARKER, U128_MARKER,
};

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

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

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

    #[test]
    fn input_cut_at_any_offset_is_refused_never_a_panic() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        enum E {
            Unit,
            Pair(u16, String),
        }
        type Sample = (u8, u64, i32, Option<String>, Vec<E>, char, [u8; 3], f64);
        let v: Sample = (
            7,
            1 << 40,
            -70_000,
            Some("héllo".into()),
            vec![E::Unit, E::Pair(300, "x".into())],
            '€',
            [1, 2, 3],
            0.5,
        );
        let mut bytes = bytes::BytesMut::new();
        super::super::to_buf(&v, &mut bytes, usize::MAX).unwrap();
        assert_eq!(from_slice::<Sample>(&bytes).unwrap(), (v, bytes.len()));
        // A value's encoding is self-delimiting: no shorter input holds it.
        for cut in 0..bytes.len() {
            let e = from_slice::<Sample>(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(e.kind(), Kind::Eof { .. } | Kind::Length { .. }),
                "cut at {cut}: {e}"
            );
        }
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
