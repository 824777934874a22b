//! A remote message's payload as it travels: the extension block at its
//! start ([`Ext`]), and encoding and decoding a record by the serializer
//! it names ([`encode_with_ext`], [`decode_record`], and the
//! [`Decoders`] an actor keeps for its batches).
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

use bytes::BytesMut;

use super::{RemoteMessage, SerializerId};
use crate::{error::SerializationError, trace::TraceContext};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serialization::{Bincode, MsgPack, Serializer};

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
    fn blocks_read_back_as_written_and_cut_ones_are_refused() {
        let trace = TraceContext::new([1; 16], [2; 8], 1).unwrap();
        for (serializer, trace, len) in [
            (SerializerId::BINCODE, None, 0),
            (SerializerId::MSGPACK, None, 2),
            (SerializerId::custom(200), None, 2),
            (
                SerializerId::BINCODE,
                Some(trace),
                1 + TraceContext::WIRE_LEN,
            ),
            (
                SerializerId::MSGPACK,
                Some(trace),
                2 + TraceContext::WIRE_LEN,
            ),
        ] {
            let ext = Ext { serializer, trace };
            let mut b = BytesMut::new();
            ext.put(&mut b);
            assert_eq!((ext.len(), b.len()), (len, len), "{serializer}");
            assert_eq!(ext.is_empty(), len == 0);
            if ext.is_empty() {
                continue;
            }
            b.extend_from_slice(b"msg");
            assert_eq!(Ext::parse(&b), Ok((ext, &b"msg"[..])));
            // Cut anywhere inside the block: refused, never a panic.
            for cut in 0..len {
                assert_eq!(
                    Ext::parse(&b[..cut]),
                    Err("truncated extension block"),
                    "{serializer} cut at {cut}"
                );
            }
        }
        assert_eq!(
            Ext::parse(&[4, 0]),
            Err("unknown bits in the extension block")
        );
        let mut zero = vec![EXT_TRACE];
        zero.extend_from_slice(&[0; TraceContext::WIRE_LEN]);
        assert!(Ext::parse(&zero).unwrap_err().contains("all-zero"));
    }

    #[test]
    fn a_block_counts_in_the_limit_and_is_taken_back_with_a_refused_message() {
        let ext = Ext {
            serializer: SerializerId::MSGPACK,
            trace: None,
        };
        let mut out = BytesMut::from(&b"before"[..]);
        // The encoder gets what the block leaves of the limit, and a
        // refusal names sizes with the block counted.
        let err = encode_with_ext(&ext, &mut out, 10, |_, limit| {
            assert_eq!(limit, 8);
            Err(SerializationError::TooLarge { size: 9, limit })
        })
        .unwrap_err();
        assert_eq!(
            err,
            SerializationError::TooLarge {
                size: 11,
                limit: 10
            }
        );
        assert_eq!(&out[..], b"before", "the block is taken back");
        // No block: the encoder gets the whole limit, and its error as is.
        let plain = Ext {
            serializer: SerializerId::BINCODE,
            trace: None,
        };
        let err = encode_with_ext(&plain, &mut out, 10, |_, limit| {
            assert_eq!(limit, 10);
            Err(SerializationError::TooLarge { size: 11, limit })
        })
        .unwrap_err();
        assert_eq!(
            err,
            SerializationError::TooLarge {
                size: 11,
                limit: 10
            }
        );
        encode_with_ext(&ext, &mut out, 10, |b, _| {
            b.extend_from_slice(b"m");
            Ok(())
        })
        .unwrap();
        assert_eq!(&out[..], b"before\x01\x01m");
    }
}
