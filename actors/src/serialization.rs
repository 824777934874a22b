//! Message serialization: the [`Serializer`] trait, the default
//! [`Bincode`] implementation with a byte limit, and [`RemoteMessage`], which
//! gives a type a stable manifest and its wire codec.
//!
//! bincode 2 is unmaintained upstream, so nothing outside this module names
//! it: a message type can switch format by overriding
//! [`RemoteMessage::encode`] and [`RemoteMessage::decode`] with another
//! [`Serializer`].

use bytes::BytesMut;
use serde::{Serialize, de::DeserializeOwned};

use crate::error::SerializationError;

/// The most bytes a decode may claim. bincode's own default is unlimited
/// ("The purpose of byte-limiting is to prevent Denial-Of-Service
/// attacks"): with this limit a length field claiming gigabytes is refused
/// before anything is allocated. Equal to the transport's default maximum
/// frame size, since no message can be larger than its frame.
pub const DECODE_LIMIT: usize = transport::DEFAULT_MAX_FRAME_SIZE;

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

/// bincode 2 (serde), standard config (varint integers, little endian),
/// decoding limited to [`DECODE_LIMIT`] bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

const CONFIG: bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<DECODE_LIMIT>,
> = bincode::config::standard().with_limit::<DECODE_LIMIT>();

struct BufWriter<'a>(&'a mut BytesMut);

impl bincode::enc::write::Writer for BufWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

impl Serializer for Bincode {
    fn serialize<T: Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut BytesMut,
    ) -> Result<(), SerializationError> {
        bincode::serde::encode_into_writer(value, BufWriter(out), CONFIG)
            .map_err(|e| SerializationError::Encode(e.to_string()))
    }

    fn deserialize<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, SerializationError> {
        let (value, used) = bincode::serde::decode_from_slice(bytes, CONFIG)
            .map_err(|e| SerializationError::Decode(e.to_string()))?;
        if used != bytes.len() {
            return Err(SerializationError::TrailingBytes {
                used,
                len: bytes.len(),
            });
        }
        Ok(value)
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
        // A claim just over the limit is refused too.
        let mut bomb = vec![7u8, 252];
        bomb.extend_from_slice(&((DECODE_LIMIT as u32) + 1).to_le_bytes());
        assert!(Bincode.deserialize::<Msg>(&bomb).is_err());
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
