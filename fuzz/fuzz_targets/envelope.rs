//! Envelope and system-message decoding (`actors::fuzz_decode_envelope`):
//! the envelope header parser, then the message decoder (`actors::wire`)
//! on the payload. Never panics, and never allocates what a length field claims
//! (libFuzzer's -rss_limit_mb catches that).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = actors::fuzz_decode_envelope(data);
});
