//! Sans-IO frame codec.
//!
//! Every frame on the wire is a 4-byte big-endian body length, a 1-byte
//! kind, then the body:
//!
//! ```text
//! +----------------+--------+-----------------------------+
//! | body len: u32  | kind:u8|  body (body len bytes)      |
//! +----------------+--------+-----------------------------+
//!   0            3     4      5 ...
//! ```
//!
//! This module imports nothing from tokio: [`encode`] appends to a
//! `BytesMut`, [`decode`] takes complete frames off the front of one and
//! returns `Ok(None)` when more bytes are needed. The length is checked
//! against the configured maximum before anything is reserved, so a hostile
//! 4 GiB prefix costs nothing.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::FrameError;

/// Bytes before the body: the 4-byte length and the 1-byte kind.
pub const HEADER_LEN: usize = 5;

/// Largest body of a [`FrameKind::Heartbeat`] or [`FrameKind::HeartbeatAck`]:
/// 16 bytes. The actors send an 8-byte sequence number; 16 leaves room for
/// a timestamp beside it. A fixed small bound is what makes an echo cheap:
/// a peer cannot make this node hold (and send back) a body it chose the
/// size of. [`decode_header`] refuses a larger one from its header, before
/// any byte of the body is buffered.
pub const MAX_HEARTBEAT_BODY: usize = 16;

/// The kind byte of a frame.
///
/// Kinds below `0x10` are the transport's own control frames and are never
/// handed to the application; `Message` and `System` are the application's.
/// Any other value is rejected by [`decode`] with [`FrameError::UnknownKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum FrameKind {
    /// Handshake greeting: node identity (see `docs/PROTOCOL.md`).
    Hello = 0x01,
    /// Orderly close; the body is a UTF-8 reason.
    Close = 0x02,
    /// Liveness probe; the body is opaque and echoed in the ack.
    Heartbeat = 0x03,
    /// Answer to a heartbeat, carrying the probe's body.
    HeartbeatAck = 0x04,
    /// Shared-secret handshake: the sender's 32-byte nonce (only legal in
    /// the handshake, after the hello).
    Challenge = 0x05,
    /// Shared-secret handshake: one or two HMAC-SHA256 proofs (only legal in
    /// the handshake, after the challenge).
    Proof = 0x06,
    /// An application message (user data lane).
    Message = 0x10,
    /// An application control message (watch, terminated, ...).
    System = 0x11,
}

impl FrameKind {
    /// Maps a wire byte to a kind; `None` for unassigned values.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            0x01 => Self::Hello,
            0x02 => Self::Close,
            0x03 => Self::Heartbeat,
            0x04 => Self::HeartbeatAck,
            0x05 => Self::Challenge,
            0x06 => Self::Proof,
            0x10 => Self::Message,
            0x11 => Self::System,
            _ => return None,
        })
    }

    /// True for the transport's own frames, which the application never sees.
    pub fn is_control(self) -> bool {
        (self as u8) < 0x10
    }
}

/// One decoded frame: a kind and a body that is a zero-copy slice of the
/// buffer it was read into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What the body means.
    pub kind: FrameKind,
    /// The body, without header.
    pub body: Bytes,
}

impl Frame {
    /// An application message frame.
    pub fn message(body: impl Into<Bytes>) -> Self {
        Self {
            kind: FrameKind::Message,
            body: body.into(),
        }
    }

    /// Bytes this frame takes on the wire, header included.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body.len()
    }
}

/// Checks the body length of a frame of `kind` against the kind's own
/// limit: [`MAX_HEARTBEAT_BODY`] for heartbeats and their acks, nothing for
/// the other kinds (their limits are the maximum frame size, or the
/// handshake's own).
///
/// # Errors
/// [`FrameError::ControlTooLarge`] naming the kind and both sizes.
#[inline]
pub(crate) fn check_kind_len(kind: FrameKind, body_len: usize) -> Result<(), FrameError> {
    // The length test first: it is false for the common small frames only
    // when they are tiny, and then the kind test is one compare.
    if body_len > MAX_HEARTBEAT_BODY
        && matches!(kind, FrameKind::Heartbeat | FrameKind::HeartbeatAck)
    {
        return Err(FrameError::ControlTooLarge {
            kind: kind as u8,
            len: body_len as u64,
            max: MAX_HEARTBEAT_BODY,
        });
    }
    Ok(())
}

/// Checks `body_len` against `max_frame_size`.
///
/// # Errors
/// [`FrameError::TooLarge`] naming both sizes.
#[inline]
pub(crate) fn check_len(body_len: usize, max_frame_size: usize) -> Result<(), FrameError> {
    if body_len > max_frame_size {
        return Err(FrameError::TooLarge {
            len: body_len as u64,
            max: max_frame_size,
        });
    }
    Ok(())
}

/// Appends the 5-byte header of a frame with a body of `body_len` bytes.
///
/// The caller has checked the length against the maximum frame size;
/// lengths above `u32::MAX` cannot be represented and are a caller bug.
// Hidden: for `actors`, which encodes envelopes straight into the
// connection's queue (`Sender::try_push_with`) and stages whole frames.
#[doc(hidden)]
#[inline]
pub fn encode_header(kind: FrameKind, body_len: usize, dst: &mut BytesMut) {
    debug_assert!(body_len <= u32::MAX as usize);
    let [a, b, c, d] = (body_len as u32).to_be_bytes();
    // One append: this runs once per frame sent.
    dst.extend_from_slice(&[a, b, c, d, kind as u8]);
}

/// Writes `body_len` into the header at the front of `frame`, for a frame
/// whose body was appended after a header with a placeholder length (the
/// body's size is known only once it is encoded).
///
/// The caller has checked the length against the maximum frame size.
///
/// # Panics
/// If `frame` is shorter than [`HEADER_LEN`]: the caller wrote no header.
// Hidden, as `encode_header`.
#[doc(hidden)]
#[inline]
pub fn set_body_len(frame: &mut [u8], body_len: usize) {
    debug_assert!(body_len <= u32::MAX as usize);
    frame[..4].copy_from_slice(&(body_len as u32).to_be_bytes());
}

/// Appends `frame` to `dst`.
///
/// # Errors
/// [`FrameError::TooLarge`] if the body exceeds `max_frame_size`,
/// [`FrameError::ControlTooLarge`] if it exceeds its kind's own limit
/// ([`MAX_HEARTBEAT_BODY`] for heartbeats and their acks); `dst` is then
/// unchanged.
pub fn encode(frame: &Frame, dst: &mut BytesMut, max_frame_size: usize) -> Result<(), FrameError> {
    check_len(frame.body.len(), max_frame_size)?;
    check_kind_len(frame.kind, frame.body.len())?;
    dst.reserve(frame.encoded_len());
    encode_header(frame.kind, frame.body.len(), dst);
    dst.extend_from_slice(&frame.body);
    Ok(())
}

/// Removes one complete frame from the front of `src`.
///
/// Returns `Ok(None)` when `src` holds less than a whole frame; in that case
/// nothing is consumed, and room for the rest of the frame is reserved once
/// its length is known and accepted. The body is split off `src` without
/// copying.
///
/// # Errors
/// - [`FrameError::TooLarge`] when the length prefix exceeds
///   `max_frame_size` (checked before any allocation);
/// - [`FrameError::UnknownKind`] for an unassigned kind byte;
/// - [`FrameError::ControlTooLarge`] for a heartbeat or heartbeat ack
///   longer than [`MAX_HEARTBEAT_BODY`] (also before any allocation).
///
/// After an error the stream is out of sync and must be closed.
#[inline]
pub fn decode(src: &mut BytesMut, max_frame_size: usize) -> Result<Option<Frame>, FrameError> {
    let Some((kind, len)) = decode_header(src, max_frame_size)? else {
        return Ok(None);
    };
    let total = HEADER_LEN + len;
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    src.advance(HEADER_LEN);
    let body = src.split_to(len).freeze();
    Ok(Some(Frame { kind, body }))
}

/// Reads and checks the header at the front of `src`: the kind and the
/// body length, or `Ok(None)` if fewer than [`HEADER_LEN`] bytes are there.
/// Nothing is consumed; the body may still be incomplete.
///
/// # Errors
/// As [`decode`].
#[inline]
pub fn decode_header(
    src: &[u8],
    max_frame_size: usize,
) -> Result<Option<(FrameKind, usize)>, FrameError> {
    let Some((kind, len)) = peek_header(src) else {
        return Ok(None);
    };
    check_len(len, max_frame_size)?;
    let kind = FrameKind::from_u8(kind).ok_or(FrameError::UnknownKind { kind })?;
    check_kind_len(kind, len)?;
    Ok(Some((kind, len)))
}

/// The raw header at the front of `src`: the kind byte and the body length,
/// or `None` if fewer than [`HEADER_LEN`] bytes are there. Nothing is
/// checked: for bytes this node encoded itself (the writer walks its queue
/// with it). Bytes from a peer go through [`decode_header`], which checks
/// both fields.
// Hidden, as `encode_header`: `actors` walks the frames it staged.
#[doc(hidden)]
#[inline]
pub fn peek_header(src: &[u8]) -> Option<(u8, usize)> {
    let [a, b, c, d, kind] = *src.first_chunk::<HEADER_LEN>()?;
    Some((kind, u32::from_be_bytes([a, b, c, d]) as usize))
}

/// How many frames `buf` holds, if it is a sequence of whole `Message` and
/// `System` frames, each within `max` bytes of body.
///
/// # Errors
/// The first frame that is cut short, of another kind, or too large.
pub(crate) fn count_app_frames(mut buf: &[u8], max: usize) -> Result<u64, FrameError> {
    let mut n = 0;
    while !buf.is_empty() {
        let Some((kind, len)) = peek_header(buf) else {
            return Err(FrameError::Truncated {
                have: buf.len(),
                need: HEADER_LEN as u64,
            });
        };
        check_len(len, max)?;
        if kind != FrameKind::Message as u8 && kind != FrameKind::System as u8 {
            return Err(FrameError::Unexpected { kind });
        }
        buf = buf.get(HEADER_LEN + len..).ok_or(FrameError::Truncated {
            have: buf.len(),
            need: (HEADER_LEN + len) as u64,
        })?;
        n += 1;
    }
    Ok(n)
}

/// How many messages the `Message` frames (application data) of the
/// whole frames in `buf` that end after byte `written` carry, as `count`
/// says of each body: what a connection that ended there lost. System
/// and control frames are not counted: their own protocols resend or
/// replace them.
pub(crate) fn unwritten_messages(buf: &[u8], written: usize, count: fn(&[u8]) -> u64) -> u64 {
    let mut start = 0;
    let mut lost = 0;
    while let Some((kind, len)) = buf.get(start..).and_then(peek_header) {
        let body = start + HEADER_LEN;
        start = body + len;
        if start > written && kind == FrameKind::Message as u8 {
            lost += buf.get(body..start).map_or(1, count);
        }
    }
    lost
}

/// Checks what is left when the stream ends: nothing is fine, anything else
/// is a truncated frame.
///
/// # Errors
/// [`FrameError::Truncated`] naming how many bytes were there and how many
/// the frame needed (the header size when even that was incomplete).
pub fn decode_eof(src: &BytesMut) -> Result<(), FrameError> {
    if src.is_empty() {
        return Ok(());
    }
    let need = match src.get(..4) {
        Some(h) => HEADER_LEN as u64 + u64::from(u32::from_be_bytes([h[0], h[1], h[2], h[3]])),
        None => HEADER_LEN as u64,
    };
    Err(FrameError::Truncated {
        have: src.len(),
        need,
    })
}

#[cfg(test)]
mod tests {

    fn one(_: &[u8]) -> u64 {
        1
    }

    #[test]
    fn a_frame_counts_the_messages_its_body_says_it_carries() {
        let mut buf = BytesMut::new();
        for body in [&b"ab"[..], b"abcde", b"a"] {
            encode_header(FrameKind::Message, body.len(), &mut buf);
            buf.extend_from_slice(body);
        }
        let by_length = |body: &[u8]| body.len() as u64;
        assert_eq!(unwritten_messages(&buf, 0, by_length), 8);
        assert_eq!(unwritten_messages(&buf, HEADER_LEN + 2, by_length), 6);
    }

    #[test]
    fn only_unwritten_application_messages_count_as_lost() {
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        for kind in [FrameKind::Message, FrameKind::System, FrameKind::Message] {
            encode_header(kind, 3, &mut buf);
            buf.extend_from_slice(b"abc");
            ends.push(buf.len());
        }
        assert_eq!(unwritten_messages(&buf, 0, one), 2);
        assert_eq!(
            unwritten_messages(&buf, ends[0], one),
            1,
            "the system frame is not counted"
        );
        assert_eq!(
            unwritten_messages(&buf, ends[2] - 1, one),
            1,
            "cut short is lost"
        );
        assert_eq!(unwritten_messages(&buf, ends[2], one), 0);
    }

    use super::*;
    use bytes::BufMut;
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn sample() -> Vec<Frame> {
        vec![
            Frame::message(Bytes::from_static(b"hello")),
            Frame {
                kind: FrameKind::System,
                body: Bytes::new(),
            },
            Frame {
                kind: FrameKind::Heartbeat,
                body: Bytes::from(vec![7u8; MAX_HEARTBEAT_BODY]),
            },
            Frame {
                kind: FrameKind::System,
                body: Bytes::from(vec![8u8; 300]),
            },
            Frame {
                kind: FrameKind::Close,
                body: Bytes::from_static(b"bye"),
            },
        ]
    }

    #[test]
    fn header_layout_is_length_then_kind() {
        let mut buf = BytesMut::new();
        encode(&Frame::message(Bytes::from_static(b"abc")), &mut buf, MAX).unwrap();
        assert_eq!(&buf[..], &[0, 0, 0, 3, 0x10, b'a', b'b', b'c']);
    }

    #[test]
    fn roundtrip_many() {
        let mut buf = BytesMut::new();
        for f in sample() {
            encode(&f, &mut buf, MAX).unwrap();
        }
        let mut out = Vec::new();
        while let Some(f) = decode(&mut buf, MAX).unwrap() {
            out.push(f);
        }
        assert_eq!(out, sample());
        assert!(buf.is_empty());
        decode_eof(&buf).unwrap();
    }

    /// Feeds the encoded stream split at every byte offset, as a socket may.
    #[test]
    fn decode_split_at_every_offset() {
        let mut wire = BytesMut::new();
        for f in sample() {
            encode(&f, &mut wire, MAX).unwrap();
        }
        for cut in 0..=wire.len() {
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut out = Vec::new();
            while let Some(f) = decode(&mut buf, MAX).unwrap() {
                out.push(f);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(f) = decode(&mut buf, MAX).unwrap() {
                out.push(f);
            }
            assert_eq!(out, sample(), "split at {cut}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn byte_by_byte() {
        let mut wire = BytesMut::new();
        for f in sample() {
            encode(&f, &mut wire, MAX).unwrap();
        }
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(f) = decode(&mut buf, MAX).unwrap() {
                out.push(f);
            }
        }
        assert_eq!(out, sample());
    }

    #[test]
    fn peek_header_reads_what_encode_header_wrote() {
        for (kind, len) in [
            (FrameKind::Message, 0),
            (FrameKind::System, 3),
            (FrameKind::Close, 0x0102_0304),
            (FrameKind::Heartbeat, u32::MAX as usize),
        ] {
            let mut buf = BytesMut::new();
            encode_header(kind, len, &mut buf);
            assert_eq!(peek_header(&buf), Some((kind as u8, len)));
            // Trailing bytes (the body, the next frame) are not looked at.
            buf.put_slice(b"body");
            assert_eq!(peek_header(&buf), Some((kind as u8, len)));
        }
    }

    #[test]
    fn peek_header_checks_nothing() {
        // An unassigned kind and a huge length: `decode_header` refuses
        // both, `peek_header` reports them as they are.
        let raw = [0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(peek_header(&raw), Some((0x7f, u32::MAX as usize)));
        assert!(decode_header(&raw, MAX).is_err());
    }

    /// Cut at every offset: a header is there only once all of it is.
    #[test]
    fn peek_header_cut_at_every_offset() {
        let mut wire = BytesMut::new();
        for f in sample() {
            encode(&f, &mut wire, MAX).unwrap();
        }
        for cut in 0..=wire.len() {
            let got = peek_header(&wire[..cut]);
            if cut < HEADER_LEN {
                assert_eq!(got, None, "cut at {cut}");
            } else {
                assert_eq!(got, Some((FrameKind::Message as u8, 5)), "cut at {cut}");
            }
        }
    }

    /// Walks a buffer of whole frames by their headers, as the writer does
    /// to find frame boundaries.
    #[test]
    fn peek_header_walks_frame_boundaries() {
        let mut wire = BytesMut::new();
        let mut starts = Vec::new();
        for f in sample() {
            starts.push(wire.len());
            encode(&f, &mut wire, MAX).unwrap();
        }
        let mut walked = Vec::new();
        let mut pos = 0;
        while let Some((kind, len)) = peek_header(&wire[pos..]) {
            walked.push(pos);
            assert_eq!(
                FrameKind::from_u8(kind),
                Some(sample()[walked.len() - 1].kind)
            );
            pos += HEADER_LEN + len;
        }
        assert_eq!(pos, wire.len());
        assert_eq!(walked, starts);
    }

    #[test]
    fn set_body_len_patches_a_placeholder_header() {
        let mut buf = BytesMut::new();
        encode_header(FrameKind::System, 0, &mut buf);
        buf.put_slice(b"abcdef");
        set_body_len(&mut buf, 6);
        assert_eq!(peek_header(&buf), Some((FrameKind::System as u8, 6)));
        let f = decode(&mut buf, MAX).unwrap().expect("one whole frame");
        assert_eq!(f.kind, FrameKind::System);
        assert_eq!(&f.body[..], b"abcdef");
    }

    #[test]
    fn length_checked_before_allocation() {
        // A 4 GiB - 1 length: must fail at once, without reserving.
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0x10][..]);
        let cap_before = buf.capacity();
        let err = decode(&mut buf, MAX).unwrap_err();
        assert_eq!(
            err,
            FrameError::TooLarge {
                len: 0xffff_ffff,
                max: MAX
            }
        );
        assert_eq!(
            err.to_string(),
            "frame length 4294967295 exceeds limit 1048576"
        );
        assert_eq!(buf.capacity(), cap_before);
    }

    #[test]
    fn an_oversized_heartbeat_is_refused_from_its_header() {
        for kind in [FrameKind::Heartbeat, FrameKind::HeartbeatAck] {
            // 8 MiB claimed, under the maximum frame size: refused after the
            // 5 header bytes, nothing reserved.
            let mut buf = BytesMut::new();
            encode_header(kind, 8 << 20, &mut buf);
            let cap_before = buf.capacity();
            let err = decode(&mut buf, 16 << 20).unwrap_err();
            assert_eq!(
                err,
                FrameError::ControlTooLarge {
                    kind: kind as u8,
                    len: 8 << 20,
                    max: MAX_HEARTBEAT_BODY
                }
            );
            assert_eq!(buf.capacity(), cap_before);
            // At the limit: a frame like any other.
            let mut buf = BytesMut::new();
            encode_header(kind, MAX_HEARTBEAT_BODY, &mut buf);
            buf.put_slice(&[1; MAX_HEARTBEAT_BODY]);
            assert_eq!(
                decode(&mut buf, MAX).unwrap().unwrap().body.len(),
                MAX_HEARTBEAT_BODY
            );
        }
        assert_eq!(
            decode(&mut BytesMut::from(&[0, 0x80, 0, 0, 0x03][..]), 16 << 20)
                .unwrap_err()
                .to_string(),
            "control frame 0x03 body length 8388608 exceeds its limit 16"
        );
        // Other kinds are bounded by the maximum frame size only.
        assert!(check_kind_len(FrameKind::Close, 1 << 20).is_ok());
        assert!(
            encode(
                &Frame {
                    kind: FrameKind::Heartbeat,
                    body: Bytes::from(vec![0; 17])
                },
                &mut BytesMut::new(),
                MAX
            )
            .is_err()
        );
    }

    #[test]
    fn unknown_kind_is_an_error() {
        let mut buf = BytesMut::from(&[0, 0, 0, 1, 0x7f, 0][..]);
        let err = decode(&mut buf, MAX).unwrap_err();
        assert_eq!(err, FrameError::UnknownKind { kind: 0x7f });
        assert_eq!(err.to_string(), "unknown frame kind 0x7f");
    }

    #[test]
    fn encode_refuses_oversized() {
        let mut buf = BytesMut::new();
        let err = encode(&Frame::message(vec![0u8; 11]), &mut buf, 10).unwrap_err();
        assert_eq!(err.to_string(), "frame length 11 exceeds limit 10");
        assert!(buf.is_empty());
    }

    #[test]
    fn truncated_at_eof() {
        let mut buf = BytesMut::from(&[0, 0, 0, 9, 0x10, 1, 2][..]);
        assert_eq!(decode(&mut buf, MAX).unwrap(), None);
        let err = decode_eof(&buf).unwrap_err();
        assert_eq!(err, FrameError::Truncated { have: 7, need: 14 });
        assert_eq!(
            decode_eof(&BytesMut::from(&[0, 0][..])).unwrap_err(),
            FrameError::Truncated { have: 2, need: 5 }
        );
    }

    #[test]
    fn control_kinds() {
        assert!(FrameKind::Hello.is_control());
        assert!(FrameKind::HeartbeatAck.is_control());
        assert!(!FrameKind::Message.is_control());
        assert!(!FrameKind::System.is_control());
        for b in 0..=255u8 {
            if let Some(k) = FrameKind::from_u8(b) {
                assert_eq!(k as u8, b);
            }
        }
    }

    fn kind_strategy() -> impl Strategy<Value = FrameKind> {
        prop_oneof![
            Just(FrameKind::Hello),
            Just(FrameKind::Close),
            Just(FrameKind::Heartbeat),
            Just(FrameKind::HeartbeatAck),
            Just(FrameKind::Message),
            Just(FrameKind::System),
        ]
    }

    proptest! {
        #[test]
        fn encode_decode_is_identity(
            frames in proptest::collection::vec(
                (kind_strategy(), proptest::collection::vec(any::<u8>(), 0..600)), 0..20),
            cut in any::<prop::sample::Index>(),
        ) {
            let frames: Vec<Frame> = frames
                .into_iter()
                .map(|(kind, mut body)| {
                    if matches!(kind, FrameKind::Heartbeat | FrameKind::HeartbeatAck) {
                        body.truncate(MAX_HEARTBEAT_BODY);
                    }
                    Frame { kind, body: Bytes::from(body) }
                })
                .collect();
            let mut wire = BytesMut::new();
            for f in &frames {
                encode(f, &mut wire, MAX).unwrap();
            }
            let cut = cut.index(wire.len() + 1);
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut out = Vec::new();
            while let Some(f) = decode(&mut buf, MAX).unwrap() {
                out.push(f);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(f) = decode(&mut buf, MAX).unwrap() {
                out.push(f);
            }
            prop_assert_eq!(out, frames);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096), max in 0usize..2048) {
            let mut buf = BytesMut::from(&bytes[..]);
            // Whatever happens, decoding terminates with frames, None or an error.
            while let Ok(Some(f)) = decode(&mut buf, max) {
                prop_assert!(f.body.len() <= max);
            }
            let _ = decode_eof(&buf);
        }
    }
}
