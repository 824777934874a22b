//! `frame::decode` and `decode_header` on arbitrary bytes, fed whole and
//! split at an arbitrary point: never panics, never returns a body above
//! the limit, and both feedings decode the same frames (the codec must not
//! depend on how TCP segments the stream).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use transport::frame::{self, Frame};

/// Decodes everything `chunks` deliver, in order; the frames and whether
/// the stream ended in an error.
fn decode_all(chunks: &[&[u8]], max: usize) -> (Vec<Frame>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match frame::decode(&mut buf, max) {
                Ok(Some(f)) => {
                    assert!(f.body.len() <= max, "body above the limit");
                    out.push(f);
                }
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    let _ = frame::decode_eof(&buf);
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    // Two bytes pick the maximum frame size, one the split point.
    let max = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let split = usize::from(data[2]);
    let stream = &data[3..];
    let _ = frame::decode_header(stream, max);
    let split = split.min(stream.len());
    let whole = decode_all(&[stream], max);
    let parts = decode_all(&[&stream[..split], &stream[split..]], max);
    assert_eq!(whole, parts, "split at {split} changed the result");
});
