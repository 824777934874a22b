//! The differential check of our bincode-format reader and writer
//! against the bincode crate itself. One file, compiled twice: into the
//! `actors` unit tests (bincode is a dev-dependency) and into the `wire`
//! fuzz target (`fuzz/fuzz_targets/wire.rs` includes it by path), so that
//! bincode is never a runtime dependency of `actors`. It reaches our codec
//! through `actors::__private`, which works from both places.

/// Differential check for the fuzz targets: decodes `input` with this
/// reader and with the bincode crate (byte limit on) as a few types
/// covering every serde shape, and panics if they disagree on success, on
/// the bytes used or on the value. Returns how many types decoded.
pub(crate) fn check(input: &[u8]) -> usize {
    use serde::{Deserialize, Serialize};

    // Within bincode's byte limit below, so that only the formats differ.
    if input.len() > 1 << 15 {
        return 0;
    }

    #[derive(Serialize, Deserialize)]
    enum Probe {
        Unit,
        Ints(u8, u16, u32, u64, i8, i16, i32, i64),
        Wide(u128, i128, usize),
        Floats(f32, f64),
        Text { b: bool, c: char, s: String },
        Bytes(#[serde(with = "serde_bytes_like")] Vec<u8>),
        Seq(Vec<u16>, Option<Box<Probe>>),
        Map(std::collections::BTreeMap<u8, Probe>),
        Tuple((u8, Option<u32>), ()),
    }

    mod serde_bytes_like {
        pub(super) fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }
        pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<u8>, D::Error> {
            actors::SharedBytes::deserialize(d).map(|b| b.to_vec())
        }
        use serde::Deserialize;
    }

    agree::<Probe>(input) as usize
        + agree::<(String, Vec<u64>, bool)>(input) as usize
        + agree::<Option<(char, i128)>>(input) as usize
}

/// Decodes `input` with both decoders; they must agree on success, on the
/// bytes used, and on the value (compared re-encoded, so NaNs compare
/// equal). True if both decoded it.
pub(crate) fn agree<T: serde::Serialize + serde::de::DeserializeOwned>(input: &[u8]) -> bool {
    const STD: bincode::config::Configuration = bincode::config::standard();
    let encode = |v: &T| {
        let theirs = bincode::serde::encode_to_vec(v, STD).expect("a decoded value encodes");
        let ours = actors::__private::encode_bincode_format(v).expect("a decoded value encodes");
        assert_eq!(&ours[..], &theirs[..], "encodings");
        theirs
    };
    let ours = actors::__private::decode_bincode_format::<T>(input);
    // bincode needs a limit, or a long length claim makes it allocate.
    let theirs = bincode::serde::decode_from_slice::<T, _>(input, STD.with_limit::<{ 1 << 16 }>());
    match (ours, theirs) {
        (Ok((a, n)), Ok((b, m))) => {
            assert_eq!(n, m, "bytes used");
            assert_eq!(encode(&a), encode(&b), "values");
            true
        }
        (Err(_), Err(_)) => false,
        // bincode has no nesting limit (and no stack guard).
        (Err(e), Ok(_)) if e.is_depth_limit() => false,
        (Ok(_), Err(e)) => panic!("bincode refused what we accepted: {e}"),
        (Err(e), Ok(_)) => panic!("we refused what bincode accepted: {e}"),
    }
}
