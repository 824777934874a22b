//! `Handshake::handle_input` on arbitrary peer bytes, delivered in
//! arbitrary chunks, with and without a shared secret: never panics, and
//! once it fails or completes it stays that way.
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use transport::{
    SharedSecret,
    auth::Role,
    handshake::{Handshake, Hello},
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let hello = Hello {
        uid: 42,
        addr: "fuzz@127.0.0.1:1".into(),
    };
    let now = Instant::now();
    let timeout = Duration::from_secs(5);
    let mut hs = if mode & 1 == 0 {
        Handshake::new(hello, now, timeout)
    } else {
        let role = if mode & 2 == 0 {
            Role::Dialer
        } else {
            Role::Listener
        };
        Handshake::with_secret(
            hello,
            now,
            timeout,
            role,
            SharedSecret::new(&b"a fuzzing secret, 32 bytes long!"[..]),
            [7; 32],
        )
    };
    let mut out = BytesMut::new();
    let _ = hs.poll_transmit(&mut out);
    // Chunk sizes from the mode byte: 1..=16 bytes per delivery.
    let chunk = usize::from(mode >> 4) + 1;
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        match hs.handle_input(&mut buf) {
            Ok(Some(peer)) => {
                assert!(peer.addr.len() <= transport::handshake::MAX_ADDR_LEN);
                assert!(hs.is_done());
                return;
            }
            Ok(None) => {
                out.clear();
                let _ = hs.poll_transmit(&mut out);
            }
            Err(_) => return,
        }
    }
    let _ = hs.handle_eof();
    let _ = hs.handle_timeout(now + timeout);
});
