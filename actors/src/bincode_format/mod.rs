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
//!
//! # Layout
//! - this file: the error type ([`FormatError`]), the nesting limit and
//!   the varint markers both directions share;
//! - `decode`: the deserializer (`from_slice`, a bounded reader over the
//!   input);
//! - `encode`: the serializer (`to_buf`, a writer that refuses to cross
//!   its limit).

use std::fmt;

use bytes::BytesMut;
use serde::{de, ser};

mod decode;
mod encode;

pub(crate) use decode::from_slice;
pub(crate) use encode::{ONE_BYTE_VARINT, to_buf, wide_varint};

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

// A varint's first byte: below 251 the value itself, else which
// little-endian width follows.
const U16_MARKER: u8 = 251;
const U32_MARKER: u8 = 252;
const U64_MARKER: u8 = 253;
const U128_MARKER: u8 = 254;

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
}
