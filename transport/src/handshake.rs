//! Sans-IO handshake.
//!
//! Both sides send the same thing at once, so the handshake costs one
//! round trip and neither side waits for the other before sending:
//!
//! ```text
//! preface (8 bytes)                       hello frame (kind 0x01)
//! +---------+-------------+-----------+   +-------+--------+---------+------------+
//! | "ACTR"  | version u16 | flags u16 |   | header| uid u64| len u16 | addr utf-8 |
//! +---------+-------------+-----------+   +-------+--------+---------+------------+
//! ```
//!
//! State machine (time is passed in, never read):
//!
//! ```text
//!   new(now) ──poll_transmit──► AwaitPreface ──8 bytes ok──► AwaitHello ──hello ok──► Done
//!                                   │  bad magic / version        │ bad frame / malformed
//!                                   └──────────┬──────────────────┘
//!                                      handle_timeout(now ≥ deadline) ─► Err(Timeout)
//! ```

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};

use crate::{
    error::HandshakeError,
    frame::{self, FrameKind},
};

/// The protocol magic, first on the wire from both sides.
pub const MAGIC: [u8; 4] = *b"ACTR";
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Length of the preface: magic, version, flags.
pub const PREFACE_LEN: usize = 8;
/// Largest hello body: 8-byte uid, 2-byte length, address. Anything larger
/// is refused before it is buffered.
pub const MAX_HELLO_SIZE: usize = 8 + 2 + MAX_ADDR_LEN;
/// Longest advertised address, in bytes.
pub const MAX_ADDR_LEN: usize = 255;

/// A node's identity as it introduces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Random per-incarnation id: a restarted node has a new one.
    pub uid: u64,
    /// The address the node advertises (`host:port`), what peers dial.
    pub addr: String,
}

impl Hello {
    fn encode(&self, dst: &mut BytesMut) {
        let addr = self.addr.as_bytes();
        // Checked when the endpoint is configured.
        debug_assert!(addr.len() <= MAX_ADDR_LEN);
        frame::encode_header(FrameKind::Hello, 10 + addr.len(), dst);
        dst.put_u64(self.uid);
        dst.put_u16(addr.len() as u16);
        dst.extend_from_slice(addr);
    }

    fn decode(mut body: &[u8]) -> Result<Self, HandshakeError> {
        if body.len() < 10 {
            return Err(HandshakeError::Malformed {
                reason: "hello shorter than 10 bytes",
            });
        }
        let uid = body.get_u64();
        let len = usize::from(body.get_u16());
        if body.len() != len {
            return Err(HandshakeError::Malformed {
                reason: "address length does not match hello size",
            });
        }
        let addr = std::str::from_utf8(body)
            .map_err(|_| HandshakeError::Malformed {
                reason: "address is not utf-8",
            })?
            .to_owned();
        Ok(Self { uid, addr })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitPreface,
    AwaitHello,
    Done,
}

/// One side of a handshake. Feed it the bytes read; it leaves in the buffer
/// whatever follows the peer's hello (the peer may send frames at once).
#[derive(Debug)]
pub struct Handshake {
    local: Hello,
    state: State,
    transmitted: bool,
    deadline: Instant,
    timeout: Duration,
    consumed: usize,
    seen: usize,
}

impl Handshake {
    /// Starts a handshake at `now` that must finish within `timeout`.
    pub fn new(local: Hello, now: Instant, timeout: Duration) -> Self {
        Self {
            local,
            state: State::AwaitPreface,
            transmitted: false,
            deadline: now + timeout,
            timeout,
            consumed: 0,
            seen: 0,
        }
    }

    /// Appends our preface and hello to `dst` the first time it is called;
    /// returns whether it wrote anything.
    pub fn poll_transmit(&mut self, dst: &mut BytesMut) -> bool {
        if self.transmitted {
            return false;
        }
        self.transmitted = true;
        dst.extend_from_slice(&MAGIC);
        dst.put_u16(VERSION);
        dst.put_u16(0);
        self.local.encode(dst);
        true
    }

    /// Consumes handshake bytes from the front of `src`.
    ///
    /// Returns the peer's hello once it is complete, `Ok(None)` while more
    /// bytes are needed.
    ///
    /// # Errors
    /// Bad magic, version mismatch, a frame other than hello, or a hello
    /// that is too large or malformed.
    pub fn handle_input(&mut self, src: &mut BytesMut) -> Result<Option<Hello>, HandshakeError> {
        self.seen = self.consumed + src.len();
        if self.state == State::AwaitPreface {
            // Check the magic as soon as it is there, so a wrong protocol is
            // named even if it sends fewer than 8 bytes.
            let have = src.len().min(4);
            if src[..have] != MAGIC[..have] {
                let mut got = [0u8; 4];
                got[..have].copy_from_slice(&src[..have]);
                return Err(HandshakeError::BadMagic {
                    got,
                    expected: MAGIC,
                });
            }
            if src.len() < PREFACE_LEN {
                return Ok(None);
            }
            let peer = u16::from_be_bytes([src[4], src[5]]);
            if peer != VERSION {
                return Err(HandshakeError::VersionMismatch {
                    local: VERSION,
                    peer,
                });
            }
            src.advance(PREFACE_LEN);
            self.consumed += PREFACE_LEN;
            self.state = State::AwaitHello;
        }
        if self.state == State::AwaitHello {
            if let Some(&kind) = src.get(4)
                && kind != FrameKind::Hello as u8
            {
                return Err(HandshakeError::UnexpectedFrame { kind });
            }
            let Some(f) = frame::decode(src, MAX_HELLO_SIZE)? else {
                return Ok(None);
            };
            self.consumed += frame::HEADER_LEN + f.body.len();
            let hello = Hello::decode(&f.body)?;
            self.state = State::Done;
            return Ok(Some(hello));
        }
        Ok(None)
    }

    /// The error to report when the stream ends before the handshake does.
    pub fn handle_eof(&self) -> HandshakeError {
        HandshakeError::Eof {
            received: self.seen,
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Instant {
        self.deadline
    }

    /// Fails the handshake if `now` is past the deadline and it is not done.
    ///
    /// # Errors
    /// [`HandshakeError::Timeout`] with the bytes received so far.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), HandshakeError> {
        if self.state != State::Done && now >= self.deadline {
            return Err(HandshakeError::Timeout {
                timeout: self.timeout,
                received: self.seen,
            });
        }
        Ok(())
    }

    /// True once the peer's hello has been accepted.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    fn hello(uid: u64) -> Hello {
        Hello {
            uid,
            addr: "127.0.0.1:2552".into(),
        }
    }

    fn wire(h: &mut Handshake) -> BytesMut {
        let mut b = BytesMut::new();
        assert!(h.poll_transmit(&mut b));
        assert!(!h.poll_transmit(&mut b), "transmits once");
        b
    }

    #[test]
    fn two_sides_complete_and_leave_trailing_bytes() {
        let now = Instant::now();
        let mut a = Handshake::new(hello(1), now, T);
        let mut b = Handshake::new(hello(2), now, T);
        let mut a_to_b = wire(&mut a);
        let b_to_a = wire(&mut b);
        a_to_b.extend_from_slice(b"trailing");
        assert_eq!(b.handle_input(&mut a_to_b).unwrap(), Some(hello(1)));
        assert_eq!(&a_to_b[..], b"trailing");
        // Fed one byte at a time, the other side completes too.
        let mut buf = BytesMut::new();
        let mut got = None;
        for byte in b_to_a.iter() {
            buf.put_u8(*byte);
            if let Some(h) = a.handle_input(&mut buf).unwrap() {
                got = Some(h);
            }
        }
        assert_eq!(got, Some(hello(2)));
        assert!(a.is_done() && b.is_done());
        a.handle_timeout(now + T * 2).unwrap();
    }

    #[test]
    fn bad_magic_is_named_from_the_first_byte() {
        let mut h = Handshake::new(hello(1), Instant::now(), T);
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]);
        let err = h.handle_input(&mut buf).unwrap_err();
        assert_eq!(
            err,
            HandshakeError::BadMagic {
                got: *b"GET ",
                expected: MAGIC
            }
        );
        let mut h = Handshake::new(hello(1), Instant::now(), T);
        let mut buf = BytesMut::from(&b"X"[..]);
        assert!(matches!(
            h.handle_input(&mut buf),
            Err(HandshakeError::BadMagic { .. })
        ));
    }

    #[test]
    fn version_mismatch_names_both() {
        let mut h = Handshake::new(hello(1), Instant::now(), T);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&MAGIC);
        buf.put_u16(7);
        buf.put_u16(0);
        let err = h.handle_input(&mut buf).unwrap_err();
        assert_eq!(
            err.to_string(),
            "protocol version mismatch: local 1, peer 7"
        );
    }

    #[test]
    fn timeout_reports_progress() {
        let now = Instant::now();
        let mut h = Handshake::new(hello(1), now, T);
        let mut buf = BytesMut::from(&MAGIC[..3]);
        assert_eq!(h.handle_input(&mut buf).unwrap(), None);
        assert_eq!(h.poll_timeout(), now + T);
        h.handle_timeout(now + T - Duration::from_millis(1))
            .unwrap();
        let err = h.handle_timeout(now + T).unwrap_err();
        assert_eq!(
            err,
            HandshakeError::Timeout {
                timeout: T,
                received: 3
            }
        );
    }

    #[test]
    fn other_frame_instead_of_hello() {
        let mut h = Handshake::new(hello(1), Instant::now(), T);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&MAGIC);
        buf.put_u16(VERSION);
        buf.put_u16(0);
        buf.extend_from_slice(&[0, 0, 0, 0, 0x10]);
        assert_eq!(
            h.handle_input(&mut buf).unwrap_err(),
            HandshakeError::UnexpectedFrame { kind: 0x10 }
        );
    }

    #[test]
    fn huge_hello_is_refused_before_buffering() {
        let mut h = Handshake::new(hello(1), Instant::now(), T);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&MAGIC);
        buf.put_u16(VERSION);
        buf.put_u16(0);
        buf.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(matches!(
            h.handle_input(&mut buf).unwrap_err(),
            HandshakeError::Frame(crate::FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn malformed_hello() {
        for body in [&[1u8, 2, 3][..], &[0, 0, 0, 0, 0, 0, 0, 1, 0, 5, b'a'][..]] {
            let mut h = Handshake::new(hello(1), Instant::now(), T);
            let mut buf = BytesMut::new();
            buf.extend_from_slice(&MAGIC);
            buf.put_u16(VERSION);
            buf.put_u16(0);
            frame::encode_header(FrameKind::Hello, body.len(), &mut buf);
            buf.extend_from_slice(body);
            assert!(matches!(
                h.handle_input(&mut buf),
                Err(HandshakeError::Malformed { .. })
            ));
        }
    }
}
