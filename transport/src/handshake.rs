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
//!
//! With a shared secret ([`Handshake::with_secret`]) the preface carries
//! [`FLAG_AUTH`], a Challenge frame (our nonce) follows the hello, and one
//! more flight proves the secret (see [`crate::auth`] for the MAC):
//!
//! ```text
//!   flight 1 (both at once): preface(FLAG_AUTH) hello challenge(nonce, 32 bytes)
//!   flight 2 (both at once): proof(HMAC-SHA256 per secret, 32 or 64 bytes)
//!
//!   … AwaitHello ──hello ok──► AwaitChallenge ──nonce──► AwaitProof ──a proof verifies──► Done
//!                                                 │ queue our proof      │ no proof verifies
//!                                                 ▼                      └─► Err(SecretMismatch)
//!                                          poll_transmit writes it
//! ```
//!
//! Our proof is queued as soon as the peer's nonce is known, before the
//! peer's proof is checked, so a mismatch is reported on both sides rather
//! than as an EOF on one of them. Over TLS the endpoint passes the
//! session's exported keying material ([`Handshake::set_channel_binding`])
//! and both proofs cover it, so a proof cannot be relayed into another TLS
//! session.
//!
//! Until the peer's proof verifies, only the handshake's own frames are
//! parsed (preface, hello, challenge, proof, each with its own small size
//! limit checked before buffering); any other frame fails the handshake,
//! and the peer's hello is not returned, so the application never sees
//! the connection.

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};

use crate::{
    auth::{ChannelBinding, MAC_LEN, MAX_PROOFS, NONCE_LEN, Party, Role, SharedSecret},
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
/// Preface flag: this node requires shared-secret authentication, and a
/// Challenge frame follows its hello. Both sides must agree.
pub const FLAG_AUTH: u16 = 0x0001;
/// Preface flags `0xff00` are the application's (see
/// [`Handshake::set_app_flags`]): sent as given and reported as received;
/// the transport gives them no meaning. A node that knows no such bits
/// sends zero and ignores the peer's, so they name optional features both
/// ends must announce before either uses them.
pub const APP_FLAGS_SHIFT: u32 = 8;

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
    AwaitChallenge,
    AwaitProof,
    Done,
}

/// The shared-secret part of a handshake.
#[derive(Debug)]
struct Auth {
    role: Role,
    secret: SharedSecret,
    nonce: [u8; NONCE_LEN],
    peer_nonce: [u8; NONCE_LEN],
    /// The peer's hello, held until its proof verifies.
    peer: Option<Hello>,
    /// Our proof, once the peer's nonce is known and until it is sent.
    proof: Option<Vec<[u8; MAC_LEN]>>,
    /// The TLS session's exported keying material both proofs cover.
    binding: Option<ChannelBinding>,
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
    auth: Option<Auth>,
    /// Our application flags, sent in the preface.
    app_flags: u8,
    /// The peer's, once its preface arrived.
    peer_app_flags: u8,
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
            auth: None,
            app_flags: 0,
            peer_app_flags: 0,
        }
    }

    /// Sets the application flags this side announces in its preface (see
    /// [`APP_FLAGS_SHIFT`]). Call before the first
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn set_app_flags(&mut self, flags: u8) {
        self.app_flags = flags;
    }

    /// The application flags the peer announced in its preface; 0 until it
    /// arrived, and from a peer that announces none.
    pub fn peer_app_flags(&self) -> u8 {
        self.peer_app_flags
    }

    /// As [`new`](Self::new), and requires the peer to prove knowledge of
    /// `secret` (and proves ours). `role` says which end of the connection
    /// we are; `nonce` must be fresh random bytes for every handshake.
    pub fn with_secret(
        local: Hello,
        now: Instant,
        timeout: Duration,
        role: Role,
        secret: SharedSecret,
        nonce: [u8; NONCE_LEN],
    ) -> Self {
        let mut hs = Self::new(local, now, timeout);
        hs.auth = Some(Auth {
            role,
            secret,
            nonce,
            peer_nonce: [0; NONCE_LEN],
            peer: None,
            proof: None,
            binding: None,
        });
        hs
    }

    /// Binds the shared-secret proofs to the secure channel the handshake
    /// runs on: `binding` is what both ends derive from their TLS
    /// session ([`CHANNEL_BINDING_LABEL`](crate::auth::CHANNEL_BINDING_LABEL)). Both
    /// ends must bind, to the same session. Does nothing without a secret.
    /// Call before the first [`handle_input`](Self::handle_input).
    pub fn set_channel_binding(&mut self, binding: ChannelBinding) {
        if let Some(auth) = &mut self.auth {
            auth.binding = Some(binding);
        }
    }

    /// Appends what we have to send and have not sent yet: the preface and
    /// hello (and challenge) the first time, our proof once the peer's
    /// nonce is known. Returns whether it wrote anything.
    pub fn poll_transmit(&mut self, dst: &mut BytesMut) -> bool {
        let mut wrote = false;
        if !self.transmitted {
            self.transmitted = true;
            wrote = true;
            dst.extend_from_slice(&MAGIC);
            dst.put_u16(VERSION);
            let auth = if self.auth.is_some() { FLAG_AUTH } else { 0 };
            dst.put_u16(auth | u16::from(self.app_flags) << APP_FLAGS_SHIFT);
            self.local.encode(dst);
            if let Some(auth) = &self.auth {
                frame::encode_header(FrameKind::Challenge, NONCE_LEN, dst);
                dst.extend_from_slice(&auth.nonce);
            }
        }
        if let Some(proofs) = self.auth.as_mut().and_then(|a| a.proof.take()) {
            wrote = true;
            frame::encode_header(FrameKind::Proof, proofs.len() * MAC_LEN, dst);
            for p in &proofs {
                dst.extend_from_slice(p);
            }
        }
        wrote
    }

    /// Checks the next frame's kind as soon as its header byte is there,
    /// then takes it off `src` if it is complete.
    fn next_frame(
        &mut self,
        src: &mut BytesMut,
        kind: FrameKind,
        max: usize,
    ) -> Result<Option<bytes::Bytes>, HandshakeError> {
        if let Some(&got) = src.get(4)
            && got != kind as u8
        {
            return Err(HandshakeError::UnexpectedFrame { kind: got });
        }
        let Some(f) = frame::decode(src, max)? else {
            return Ok(None);
        };
        self.consumed += frame::HEADER_LEN + f.body.len();
        Ok(Some(f.body))
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
            // The application's bits are kept for it; the others between
            // are reserved and ignored.
            let flags = u16::from_be_bytes([src[6], src[7]]);
            self.peer_app_flags = (flags >> APP_FLAGS_SHIFT) as u8;
            let peer_auth = flags & FLAG_AUTH != 0;
            match (self.auth.is_some(), peer_auth) {
                (true, false) => return Err(HandshakeError::PeerUnauthenticated),
                (false, true) => return Err(HandshakeError::SecretRequired),
                _ => {}
            }
            src.advance(PREFACE_LEN);
            self.consumed += PREFACE_LEN;
            self.state = State::AwaitHello;
        }
        if self.state == State::AwaitHello {
            let Some(body) = self.next_frame(src, FrameKind::Hello, MAX_HELLO_SIZE)? else {
                return Ok(None);
            };
            let hello = Hello::decode(&body)?;
            let Some(auth) = &mut self.auth else {
                self.state = State::Done;
                return Ok(Some(hello));
            };
            if hello.uid == self.local.uid {
                // A node never talks to itself; a peer that claims our uid
                // is replaying our own handshake back at us.
                return Err(HandshakeError::Reflected { uid: hello.uid });
            }
            auth.peer = Some(hello);
            self.state = State::AwaitChallenge;
        }
        if self.state == State::AwaitChallenge {
            let Some(body) = self.next_frame(src, FrameKind::Challenge, NONCE_LEN)? else {
                return Ok(None);
            };
            let auth = self.auth.as_mut().expect("AwaitChallenge only with auth");
            auth.peer_nonce = body[..].try_into().map_err(|_| HandshakeError::Malformed {
                reason: "challenge is not 32 bytes",
            })?;
            let peer = auth.peer.as_ref().expect("hello precedes the challenge");
            let proof = {
                let (me, them) = parties(auth, &self.local, peer);
                auth.secret.prove(&me, &them, auth.binding.as_ref())
            };
            auth.proof = Some(proof);
            self.state = State::AwaitProof;
        }
        if self.state == State::AwaitProof {
            let Some(body) = self.next_frame(src, FrameKind::Proof, MAX_PROOFS * MAC_LEN)? else {
                return Ok(None);
            };
            if body.is_empty() || body.len() % MAC_LEN != 0 {
                return Err(HandshakeError::Malformed {
                    reason: "proof is not one or two 32-byte tags",
                });
            }
            let auth = self.auth.as_mut().expect("AwaitProof only with auth");
            let peer = auth.peer.as_ref().expect("hello precedes the proof");
            let (me, them) = parties(auth, &self.local, peer);
            if !auth.secret.verify(&body, &them, &me, auth.binding.as_ref()) {
                return Err(HandshakeError::SecretMismatch {
                    proofs: body.len() / MAC_LEN,
                    ours: auth.secret.source().clone(),
                });
            }
            self.state = State::Done;
            return Ok(auth.peer.take());
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

/// Both transcript parties, ours first.
fn parties<'a>(auth: &'a Auth, local: &'a Hello, peer: &'a Hello) -> (Party<'a>, Party<'a>) {
    (
        Party {
            role: auth.role,
            nonce: &auth.nonce,
            uid: local.uid,
            addr: &local.addr,
        },
        Party {
            role: auth.role.peer(),
            nonce: &auth.peer_nonce,
            uid: peer.uid,
            addr: &peer.addr,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SecretSource;

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
    fn application_flags_cross_as_given_beside_the_auth_flag() {
        let now = Instant::now();
        let secret = || SharedSecret::new("0123456789abcdef0123456789abcdef");
        let mut a = Handshake::with_secret(hello(1), now, T, Role::Dialer, secret(), [1; 32]);
        let mut b = Handshake::new(hello(2), now, T);
        a.set_app_flags(0xa5);
        let mut a_out = wire(&mut a);
        let mut b_out = wire(&mut b);
        assert_eq!(&a_out[6..8], &(FLAG_AUTH | 0xa500).to_be_bytes());
        assert_eq!(&b_out[6..8], &[0, 0]);
        // b refuses a's secret, but has read a's flags by then.
        assert!(b.handle_input(&mut a_out).is_err());
        assert_eq!(b.peer_app_flags(), 0xa5);
        assert!(a.handle_input(&mut b_out).is_err());
        assert_eq!(a.peer_app_flags(), 0);
        // Without secrets on either side, the flags change nothing else.
        let (mut c, mut d) = (
            Handshake::new(hello(3), now, T),
            Handshake::new(hello(4), now, T),
        );
        c.set_app_flags(1);
        let (mut c_out, mut d_out) = (wire(&mut c), wire(&mut d));
        assert_eq!(d.handle_input(&mut c_out).unwrap(), Some(hello(3)));
        assert_eq!(c.handle_input(&mut d_out).unwrap(), Some(hello(4)));
        assert_eq!((c.peer_app_flags(), d.peer_app_flags()), (0, 1));
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

    fn with_secret(uid: u64, role: Role, secret: &SharedSecret, nonce: u8) -> Handshake {
        Handshake::with_secret(
            hello(uid),
            Instant::now(),
            T,
            role,
            secret.clone(),
            [nonce; NONCE_LEN],
        )
    }

    /// Runs two sans-IO sides against each other, delivering everything
    /// each has to send, until both finish or one fails.
    fn run(
        a: &mut Handshake,
        b: &mut Handshake,
    ) -> (
        Result<Option<Hello>, HandshakeError>,
        Result<Option<Hello>, HandshakeError>,
    ) {
        let (mut to_a, mut to_b) = (BytesMut::new(), BytesMut::new());
        let (mut ra, mut rb) = (Ok(None), Ok(None));
        for _ in 0..4 {
            a.poll_transmit(&mut to_b);
            b.poll_transmit(&mut to_a);
            if matches!(ra, Ok(None)) {
                ra = a.handle_input(&mut to_a);
            }
            if matches!(rb, Ok(None)) {
                rb = b.handle_input(&mut to_b);
            }
        }
        (ra, rb)
    }

    const S1: &[u8] = b"0123456789abcdef-one";
    const S2: &[u8] = b"0123456789abcdef-two";

    #[test]
    fn shared_secret_handshake_completes_in_two_flights() {
        let s = SharedSecret::new(S1);
        let mut a = with_secret(1, Role::Dialer, &s, 1);
        let mut b = with_secret(2, Role::Listener, &s, 2);
        let mut first = BytesMut::new();
        assert!(with_secret(1, Role::Dialer, &s, 1).poll_transmit(&mut first));
        assert_eq!(&first[6..8], &FLAG_AUTH.to_be_bytes());
        let (ra, rb) = run(&mut a, &mut b);
        assert_eq!(ra.unwrap(), Some(hello(2)));
        assert_eq!(rb.unwrap(), Some(hello(1)));
    }

    #[test]
    fn wrong_secret_fails_on_both_sides() {
        let mut a = with_secret(1, Role::Dialer, &SharedSecret::new(S1), 1);
        let mut b = with_secret(2, Role::Listener, &SharedSecret::new(S2), 2);
        let (ra, rb) = run(&mut a, &mut b);
        assert_eq!(
            ra,
            Err(HandshakeError::SecretMismatch {
                proofs: 1,
                ours: SecretSource::Configured
            })
        );
        assert_eq!(
            rb,
            Err(HandshakeError::SecretMismatch {
                proofs: 1,
                ours: SecretSource::Configured
            })
        );
    }

    #[test]
    fn rotation_overlap_keeps_nodes_talking() {
        let old = SharedSecret::new(S1);
        let rotating = SharedSecret::new(S2).with_previous(S1);
        let mut a = with_secret(1, Role::Dialer, &old, 1);
        let mut b = with_secret(2, Role::Listener, &rotating, 2);
        let (ra, rb) = run(&mut a, &mut b);
        assert!(ra.unwrap().is_some() && rb.unwrap().is_some());
    }

    #[test]
    fn missing_secret_is_named_on_both_sides() {
        let mut a = with_secret(1, Role::Dialer, &SharedSecret::new(S1), 1);
        let mut b = Handshake::new(hello(2), Instant::now(), T);
        let (ra, rb) = run(&mut a, &mut b);
        assert_eq!(ra, Err(HandshakeError::PeerUnauthenticated));
        assert_eq!(rb, Err(HandshakeError::SecretRequired));
    }

    #[test]
    fn replayed_first_flight_and_proof_are_refused() {
        let s = SharedSecret::new(S1);
        // Record a dialer's whole transmission to one listener…
        let mut a = with_secret(1, Role::Dialer, &s, 1);
        let mut b = with_secret(2, Role::Listener, &s, 2);
        let mut recorded = BytesMut::new();
        let mut to_a = BytesMut::new();
        a.poll_transmit(&mut recorded);
        b.poll_transmit(&mut to_a);
        a.handle_input(&mut to_a).unwrap();
        a.poll_transmit(&mut recorded);
        // …and replay it to a listener with a fresh nonce.
        let mut c = with_secret(2, Role::Listener, &s, 3);
        assert_eq!(
            c.handle_input(&mut recorded),
            Err(HandshakeError::SecretMismatch {
                proofs: 1,
                ours: SecretSource::Configured
            })
        );
    }

    #[test]
    fn proofs_bound_to_different_tls_sessions_fail_on_both_sides() {
        let s = SharedSecret::new(S1);
        // Same session on both ends: completes.
        let mut a = with_secret(1, Role::Dialer, &s, 1);
        let mut b = with_secret(2, Role::Listener, &s, 2);
        a.set_channel_binding([7; 32]);
        b.set_channel_binding([7; 32]);
        let (ra, rb) = run(&mut a, &mut b);
        assert!(ra.unwrap().is_some() && rb.unwrap().is_some());
        // A relay's two sessions: each end exports a different value.
        let mut a = with_secret(1, Role::Dialer, &s, 1);
        let mut b = with_secret(2, Role::Listener, &s, 2);
        a.set_channel_binding([7; 32]);
        b.set_channel_binding([8; 32]);
        let (ra, rb) = run(&mut a, &mut b);
        let mismatch = HandshakeError::SecretMismatch {
            proofs: 1,
            ours: SecretSource::Configured,
        };
        assert_eq!(ra, Err(mismatch.clone()));
        assert_eq!(rb, Err(mismatch));
    }

    #[test]
    fn no_other_frame_is_parsed_before_the_proof() {
        let s = SharedSecret::new(S1);
        let mut a = with_secret(1, Role::Dialer, &s, 1);
        let mut b = with_secret(2, Role::Listener, &s, 2);
        let mut to_b = BytesMut::new();
        a.poll_transmit(&mut to_b);
        // A message frame where the proof belongs, and a huge one.
        for (kind, len) in [(FrameKind::Message, 4usize), (FrameKind::Proof, 1 << 30)] {
            let mut b2 = with_secret(2, Role::Listener, &s, 2);
            let mut buf = to_b.clone();
            frame::encode_header(kind, len, &mut buf);
            let err = b2.handle_input(&mut buf).unwrap_err();
            assert!(
                matches!(
                    err,
                    HandshakeError::UnexpectedFrame { .. }
                        | HandshakeError::Frame(crate::FrameError::TooLarge { .. })
                ),
                "{err:?}"
            );
            assert!(!b2.is_done());
        }
        // Without a proof the hello is never handed out.
        assert_eq!(b.handle_input(&mut to_b), Ok(None));
        assert!(!b.is_done());
    }

    #[test]
    fn mismatch_names_where_our_secret_came_from() {
        let err = HandshakeError::SecretMismatch {
            proofs: 1,
            ours: SecretSource::CookieFile("/home/u/.actors.cookie".into()),
        }
        .to_string();
        assert!(err.contains("different secret"), "{err}");
        assert!(err.contains("cookie file /home/u/.actors.cookie"), "{err}");
        assert!(err.contains("copy this cookie file"), "{err}");
    }

    #[test]
    fn reflected_hello_is_refused() {
        let s = SharedSecret::new(S1);
        let mut a = with_secret(1, Role::Listener, &s, 1);
        let mut own = BytesMut::new();
        a.poll_transmit(&mut own);
        assert_eq!(
            a.handle_input(&mut own),
            Err(HandshakeError::Reflected { uid: 1 })
        );
    }
}
