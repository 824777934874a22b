//! MessagePack with named fields: the format of `MsgPack`, the serializer
//! for messages that evolve (`serialization` wraps these functions, as it
//! wraps `bincode_format`).
//!
//! Structs are written as maps from field name to value (rmp-serde's
//! `with_struct_map`), enum variants by name. So a node that added a field
//! (with `#[serde(default)]`) reads messages of a node that lacks it, a
//! node that lacks it skips the field it does not know, and a variant
//! inserted before others is not mistaken for one of them: the changes
//! that break bincode's positional format (see docs/REMOTING.md,
//! "Rolling upgrades").
//!
//! # Bounded decoding
//! rmp-serde reading a slice borrows strings and byte strings from it and
//! refuses ones longer than what is left, but it passes an array's or a
//! map's claimed length to serde as the size hint, and `Deserialize` impls
//! preallocate from the hint (serde's own cap that at 1 MiB per
//! collection; others need not). So before rmp-serde sees the bytes,
//! [`check`] walks them once, without recursion or allocation, and refuses
//! any length that claims more items or bytes than remain, any reserved
//! marker, and any bytes after the one value: every hint is then at most
//! the message's own size, as on the bincode path. Nesting is bounded by
//! [`MAX_DEPTH`], as bincode's is.

use std::io;

use bytes::{BufMut, BytesMut};
use rmp::Marker;
use serde::{Serialize, de::DeserializeOwned};

use crate::error::SerializationError;

/// How deeply a MessagePack message may nest (arrays, maps and ext values
/// within each other) before decoding refuses it: the same bound as the
/// bincode path's, so a recursive type cannot overflow the stack.
pub(crate) const MAX_DEPTH: usize = 256;

/// An `io::Write` into a `BytesMut` that refuses to grow it past `end`, so
/// that a message over the limit is abandoned as soon as it crosses it,
/// not serialized whole.
struct Bounded<'a> {
    out: &'a mut BytesMut,
    end: usize,
    /// Set when a write would have crossed `end`: the size it would have
    /// reached.
    over: Option<usize>,
}

impl io::Write for Bounded<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let after = self.out.len().saturating_add(buf.len());
        if after > self.end {
            self.over = Some(after);
            return Err(io::Error::other("message exceeds the size limit"));
        }
        self.out.put_slice(buf);
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write(buf).map(|_| ())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Appends `value` to `out`, at most `limit` bytes of it (see
/// `Serializer::serialize_limited`): structs as maps of named fields.
///
/// # Errors
/// `TooLarge`, or what rmp-serde refuses.
pub(crate) fn to_buf<T: Serialize + ?Sized>(
    value: &T,
    out: &mut BytesMut,
    limit: usize,
) -> Result<(), SerializationError> {
    {
        let start = out.len();
        let mut w = Bounded {
            end: start.saturating_add(limit),
            out,
            over: None,
        };
        let res = value.serialize(&mut rmp_serde::Serializer::new(&mut w).with_struct_map());
        let over = w.over;
        match res {
            Ok(()) => Ok(()),
            Err(e) => {
                out.truncate(start);
                Err(match over {
                    Some(size) => SerializationError::TooLarge {
                        size: size - start,
                        limit,
                    },
                    None => SerializationError::Encode(format!("msgpack: {e}")),
                })
            }
        }
    }
}

/// Reads the one value `bytes` hold, after [`check`] bounds every length
/// claim by the bytes that arrived.
///
/// # Errors
/// Malformed, truncated or over-long input, trailing bytes, or a value
/// that does not fit `T`.
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SerializationError> {
    check(bytes).map_err(|e| SerializationError::Decode(format!("msgpack: {e}")))?;
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(MAX_DEPTH);
    T::deserialize(&mut de).map_err(|e| SerializationError::Decode(format!("msgpack: {e}")))
}

/// Checks that `bytes` hold exactly one MessagePack value whose every
/// length claim fits in what remains: an array of `n` needs at least `n`
/// bytes after its header, a map `2n`, a string, byte string or ext value
/// its length. One pass, no recursion, no allocation: the values still to
/// read are a count, each needs at least one byte, and the count never
/// exceeds the bytes left. Nesting deeper than [`MAX_DEPTH`] is refused.
///
/// # Errors
/// What is wrong and where, for a dead letter's reason.
pub(crate) fn check(bytes: &[u8]) -> Result<(), String> {
    let mut pos = 0usize;
    // Values still to read, and, per open container, how many of its
    // items are left (a container ends when its count reaches zero).
    let mut pending: u64 = 1;
    let mut open: [u64; MAX_DEPTH] = [0; MAX_DEPTH];
    let mut depth = 0usize;
    let take = |pos: &mut usize, n: usize| -> Result<u64, String> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| format!("truncated at byte {pos}"))?;
        let v = bytes[*pos..end]
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        *pos = end;
        Ok(v)
    };
    while pending > 0 {
        let at = pos;
        let marker = Marker::from_u8(take(&mut pos, 1)? as u8);
        pending -= 1;
        // Close the containers this item finished.
        if depth > 0 {
            open[depth - 1] -= 1;
        }
        // (items it holds, bytes it skips)
        let (items, skip): (u64, u64) = match marker {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
                (0, 0)
            }
            Marker::U8 | Marker::I8 => (0, 1),
            Marker::U16 | Marker::I16 => (0, 2),
            Marker::U32 | Marker::I32 | Marker::F32 => (0, 4),
            Marker::U64 | Marker::I64 | Marker::F64 => (0, 8),
            Marker::FixStr(n) => (0, u64::from(n)),
            Marker::Str8 | Marker::Bin8 => (0, take(&mut pos, 1)?),
            Marker::Str16 | Marker::Bin16 => (0, take(&mut pos, 2)?),
            Marker::Str32 | Marker::Bin32 => (0, take(&mut pos, 4)?),
            Marker::FixExt1 => (0, 2),
            Marker::FixExt2 => (0, 3),
            Marker::FixExt4 => (0, 5),
            Marker::FixExt8 => (0, 9),
            Marker::FixExt16 => (0, 17),
            Marker::Ext8 => (0, take(&mut pos, 1)? + 1),
            Marker::Ext16 => (0, take(&mut pos, 2)? + 1),
            Marker::Ext32 => (0, take(&mut pos, 4)? + 1),
            Marker::FixArray(n) => (u64::from(n), 0),
            Marker::Array16 => (take(&mut pos, 2)?, 0),
            Marker::Array32 => (take(&mut pos, 4)?, 0),
            Marker::FixMap(n) => (2 * u64::from(n), 0),
            Marker::Map16 => (2 * take(&mut pos, 2)?, 0),
            Marker::Map32 => (2 * take(&mut pos, 4)?, 0),
            Marker::Reserved => return Err(format!("reserved marker 0xc1 at byte {at}")),
        };
        let left = (bytes.len() - pos) as u64;
        if skip > left {
            return Err(format!(
                "length {skip} at byte {at} exceeds the {left} bytes left"
            ));
        }
        pos += skip as usize;
        if items > 0 {
            if items > left.saturating_sub(pending) {
                return Err(format!(
                    "{items} items claimed at byte {at}, more than the {left} bytes left"
                ));
            }
            if depth == MAX_DEPTH {
                return Err(format!("nests deeper than {MAX_DEPTH} at byte {at}"));
            }
            open[depth] = items;
            depth += 1;
            pending += items;
        }
        while depth > 0 && open[depth - 1] == 0 {
            depth -= 1;
        }
    }
    if pos != bytes.len() {
        return Err(format!(
            "decoded {pos} of {} bytes; trailing bytes",
            bytes.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{any::Any, collections::HashMap, sync::Arc};

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::serialization::{MsgPack, Serializer, SharedBytes, with_decode_scope};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V1 {
        id: u64,
        name: String,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V2 {
        id: u64,
        name: String,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn enc<T: Serialize>(v: &T) -> BytesMut {
        let mut b = BytesMut::new();
        MsgPack.serialize(v, &mut b).unwrap();
        b
    }

    #[test]
    fn fields_added_and_removed_are_tolerated_both_ways() {
        let v1 = V1 {
            id: 7,
            name: "a".into(),
        };
        let v2: V2 = MsgPack.deserialize(&enc(&v1)).unwrap();
        assert_eq!(
            v2,
            V2 {
                id: 7,
                name: "a".into(),
                tags: vec![]
            }
        );
        let back: V1 = MsgPack
            .deserialize(&enc(&V2 {
                id: 8,
                name: "b".into(),
                tags: vec!["x".into()],
            }))
            .unwrap();
        assert_eq!(
            back,
            V1 {
                id: 8,
                name: "b".into()
            }
        );
    }

    #[test]
    fn enum_variants_travel_by_name() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        enum Old {
            Start,
            Stop(u8),
        }
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        enum New {
            Pause,
            Start,
            Stop(u8),
        }
        assert_eq!(
            MsgPack.deserialize::<New>(&enc(&Old::Start)),
            Ok(New::Start)
        );
        assert_eq!(
            MsgPack.deserialize::<New>(&enc(&Old::Stop(3))),
            Ok(New::Stop(3))
        );
        // A variant the old node does not know is an error, not another
        // variant.
        assert!(MsgPack.deserialize::<Old>(&enc(&New::Pause)).is_err());
    }

    #[test]
    fn hostile_lengths_are_refused_before_decoding() {
        // An array claiming 2^32 - 1 items in 5 bytes.
        let bomb = [0xdd, 0xff, 0xff, 0xff, 0xff];
        let err = MsgPack.deserialize::<Vec<u64>>(&bomb).unwrap_err();
        assert!(err.to_string().contains("items claimed"), "{err}");
        // A map, a string and a byte string claiming more than arrived.
        for bomb in [
            &[0xdf, 0, 0, 0, 2, 1, 1, 1][..],
            &[0xdb, 0, 0, 1, 0, b'a'][..],
            &[0xc6, 0xff, 0, 0, 0, 1][..],
            &[0xc9, 0, 0, 0, 9, 1, 2][..],
        ] {
            assert!(check(bomb).is_err(), "{bomb:?}");
        }
        // Nesting past the bound.
        let mut deep = vec![0x91u8; MAX_DEPTH + 1];
        deep.push(0xc0);
        let err = check(&deep).unwrap_err();
        assert!(err.contains("deeper"), "{err}");
        let mut ok = vec![0x91u8; MAX_DEPTH];
        ok.push(0xc0);
        assert_eq!(check(&ok), Ok(()));
        assert!(check(&[0xc1]).unwrap_err().contains("reserved"));
    }

    #[test]
    fn trailing_and_truncated_input_are_errors() {
        let mut b = enc(&V1 {
            id: 1,
            name: "n".into(),
        });
        let full = b.len();
        for cut in 0..full {
            assert!(MsgPack.deserialize::<V1>(&b[..cut]).is_err(), "cut {cut}");
        }
        b.put_u8(0);
        let err = MsgPack.deserialize::<V1>(&b).unwrap_err().to_string();
        assert!(err.contains("trailing"), "{err}");
    }

    #[test]
    fn encode_limit_stops_early() {
        let big = V2 {
            id: 1,
            name: "x".repeat(1 << 20),
            tags: vec![],
        };
        let mut out = BytesMut::new();
        let err = MsgPack.serialize_limited(&big, &mut out, 1024).unwrap_err();
        assert!(
            matches!(err, SerializationError::TooLarge { limit: 1024, size } if size > 1024),
            "{err}"
        );
        assert!(out.is_empty());
        assert!(out.capacity() < 4096, "the rest was never serialized");
    }

    #[test]
    fn shared_bytes_slice_the_frame_and_maps_work() {
        #[derive(Serialize, Deserialize)]
        struct M {
            data: SharedBytes,
            counts: HashMap<String, u32>,
        }
        let b = enc(&M {
            data: SharedBytes::from(vec![9u8; 100]),
            counts: HashMap::from([("a".to_owned(), 1)]),
        })
        .freeze();
        let node: Arc<dyn Any + Send + Sync> = Arc::new(());
        let m: M = with_decode_scope(&node, &b, || MsgPack.deserialize(&b)).unwrap();
        assert_eq!(&m.data[..], &[9u8; 100][..]);
        let inside = b.as_ptr() as usize..b.as_ptr() as usize + b.len();
        assert!(inside.contains(&(m.data.as_ptr() as usize)), "shares");
        assert_eq!(m.counts["a"], 1);
    }

    #[test]
    fn check_accepts_what_the_encoder_writes() {
        #[derive(Serialize)]
        struct All {
            a: u8,
            b: i64,
            c: f64,
            d: Option<String>,
            e: Vec<(u16, bool)>,
            f: HashMap<u32, Vec<u8>>,
            g: f32,
        }
        let v = All {
            a: 255,
            b: -1 << 40,
            c: 1.5,
            d: Some("s".repeat(300)),
            e: vec![(1, true); 70_000],
            f: HashMap::from([(1, vec![1; 70_000])]),
            g: 0.5,
        };
        assert_eq!(check(&enc(&v)), Ok(()));
    }
}
