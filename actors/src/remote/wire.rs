//! The envelope writer, for code outside this crate that plays a remote
//! node by hand (the integration tests' raw peers): the same functions the
//! links write with (`envelope::put_header`, `put_run_header`), so a test
//! never carries a copy of the header that could drift from the format.
//! Not an API: hidden from the docs, and free to change with the format
//! (`docs/PROTOCOL.md` describes it).

use bytes::BytesMut;

use super::envelope::{self, ENV_HEADER, Fragment, Tag};

/// How an envelope names its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To<'a> {
    /// By an id the link defined before.
    Id(u32),
    /// By a new id, defined with the path (`ENV_DEFINE`).
    Define(u32, &'a str),
    /// By its path, for this envelope only (`ENV_INLINE`).
    Inline(&'a str),
}

impl<'a> From<To<'a>> for envelope::To<'a> {
    fn from(to: To<'a>) -> Self {
        match to {
            To::Id(id) => Self::Id(id),
            To::Define(id, path) => Self::Define(id, path),
            To::Inline(path) => Self::Inline(path),
        }
    }
}

/// An envelope carrying `payload` to `to`: a message of type `manifest`
/// (`ext`: the payload begins with an extension block).
pub fn envelope(to: To<'_>, manifest: u32, ext: bool, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    envelope::put_header(&mut b, to.into(), Tag { manifest, ext }, None);
    b.extend_from_slice(payload);
    b.to_vec()
}

/// An envelope carrying one fragment of a large message: `piece`, at
/// `offset` of message `msg`'s `total` payload bytes.
pub fn fragment(
    to: To<'_>,
    manifest: u32,
    msg: u32,
    total: u32,
    offset: u32,
    piece: &[u8],
) -> Vec<u8> {
    let mut b = BytesMut::new();
    let f = Fragment { msg, total, offset };
    let tag = Tag {
        manifest,
        ext: false,
    };
    envelope::put_header(&mut b, to.into(), tag, Some(f));
    b.extend_from_slice(piece);
    b.to_vec()
}

/// A run envelope to recipient `id` (defined on the link before) of
/// messages of type `manifest`: `records` follow the header as they are
/// (each a `u32` LE length and that many bytes, when well formed).
pub fn run(id: u32, manifest: u32, records: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    envelope::put_run_header(&mut b, id, manifest);
    // `put_run_header` leaves room for the first record's length, which
    // `records` brings itself.
    b.truncate(ENV_HEADER);
    b.extend_from_slice(records);
    b.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::envelope::{Kind, parse};

    #[test]
    fn what_the_harness_writes_the_library_reads() {
        for to in [To::Id(3), To::Define(3, "/user/a"), To::Inline("/temp/$1")] {
            let b = envelope(to, 9, false, b"x");
            let env = parse(&b).expect("an envelope");
            assert_eq!(
                (env.manifest, env.kind, env.payload),
                (9, Kind::Message, &b"x"[..])
            );
            let (id, path) = match to {
                To::Id(id) => (id, None),
                To::Define(id, p) => (id, Some(p)),
                To::Inline(p) => (0, Some(p)),
            };
            assert_eq!((env.id, env.define), (id, path));
            // With `ext`, the payload is read as an extension block first.
            let ext = envelope(to, 9, true, b"x");
            assert_eq!(ext[0] & !b[0], envelope::ENV_EXT);
        }
        let f = fragment(To::Define(4, "/user/b"), 7, 1, 100, 50, b"piece");
        let env = parse(&f).expect("a fragment");
        assert_eq!(
            env.kind,
            Kind::Fragment(Fragment {
                msg: 1,
                total: 100,
                offset: 50
            })
        );
        let r = run(5, 6, &[1, 0, 0, 0, b'y']);
        let env = parse(&r).expect("a run");
        assert_eq!((env.id, env.manifest, env.kind), (5, 6, Kind::Run));
        assert_eq!(env.payload, &[1, 0, 0, 0, b'y']);
    }

    #[test]
    fn the_compact_header_of_the_hot_path_is_the_same_envelope() {
        let mut compact = BytesMut::new();
        envelope::put_compact_header(&mut compact, 9, 0x0102_0304);
        compact.extend_from_slice(b"m");
        assert_eq!(envelope(To::Id(9), 0x0102_0304, false, b"m"), compact);
    }
}
