//! Differential fuzzing of the message decoder (`actors::wire`, our reader
//! of bincode 2's format) against the bincode crate itself: both decode
//! the input as types covering every serde shape, and any disagreement on
//! success, bytes used or value panics. Also: never panics otherwise,
//! never allocates what a length claims (-rss_limit_mb), never overflows
//! the stack on deep nesting.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = actors::fuzz_wire_differential(data);
});
