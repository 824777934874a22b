//! The TLS record layer that takes over from rustls after the handshake
//! (`transport/src/tls_record.rs`): records sealed from the input, then
//! damaged or cut as the input says, opened as the reader does. Never
//! panics; an intact record opens to what was sealed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    transport::fuzz_tls_records(data);
});
