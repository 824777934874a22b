//! Differential fuzzing of the message codec (`actors`' own reader and
//! writer of bincode 2's format) against the bincode crate itself: both
//! decode the input as types covering every serde shape, and any
//! disagreement on success, bytes used or value panics. Also: never panics
//! otherwise, never allocates what a length claims (-rss_limit_mb), never
//! overflows the stack on deep nesting. The check is the one the `actors`
//! unit tests run, compiled in from its one file.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../actors/src/differential.rs"]
mod differential;

fuzz_target!(|data: &[u8]| {
    let _ = differential::check(data);
});
