//! Secure by default: the cookie file a node creates on first start, a
//! node with another cookie refused on both sides, clients without the
//! secret held to the handshake, and the explicit insecure opt-in.
//!
//! Every endpoint here names its cookie file in a temporary directory
//! (`set_cookie_file`), so no test reads or creates `~/.actors.cookie`,
//! and no test touches the environment.

use std::{os::unix::fs::PermissionsExt, path::Path};

use bytes::BytesMut;
use integration_tests::{
    TIMEOUT, assert_round_trip, endpoint, loopback, raw_connect, raw_side_handshake, test_secret,
    wait_closed, within,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::{
    COOKIE_ENV, ConfigError, Endpoint, FrameError, FrameKind, HandshakeError, PeerVerified,
    SecretSource, SharedSecret, TransportConfig, TransportError,
    auth::{NONCE_LEN, Role},
    handshake::{Handshake, Hello},
};

/// The environment must not override the cookie files these tests set.
fn assert_no_cookie_env() {
    assert!(
        std::env::var_os(COOKIE_ENV).is_none(),
        "{COOKIE_ENV} is set: it takes precedence over the cookie files these tests check; unset it"
    );
}

fn with_cookie(path: &Path) -> TransportConfig {
    let mut c = TransportConfig::default();
    c.set_cookie_file(path);
    c
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_file_is_created_once_private_and_shared() {
    assert_no_cookie_env();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cookie");
    // Two nodes starting at once: one creates the file, both use it.
    let (a, b) = tokio::join!(
        Endpoint::bind(loopback(), with_cookie(&path)),
        Endpoint::bind(loopback(), with_cookie(&path)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    for e in [&a, &b] {
        let secret = e.shared_secret().expect("a secret is in force");
        assert_eq!(secret.source(), &SecretSource::CookieFile(path.clone()));
    }
    assert_eq!(mode(&path), 0o600);
    let cookie = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        cookie.trim().len(),
        64,
        "32 random bytes in hex: {cookie:?}"
    );
    // They prove the same secret to each other.
    assert_round_trip(&a, &b).await;
    let (dialed, accepted) = tokio::join!(a.connect(b.local_addr()), b.accept());
    assert_eq!(dialed.unwrap().peer().verified, PeerVerified::Secret);
    assert_eq!(
        accepted.unwrap().unwrap().peer().verified,
        PeerVerified::Secret
    );
    // A later node reuses it, unchanged.
    let c = Endpoint::bind(loopback(), with_cookie(&path))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), cookie);
    assert_round_trip(&c, &a).await;
    // Nothing else was left in the directory (no temp files).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[tokio::test]
async fn group_readable_cookie_file_is_refused_at_bind() {
    assert_no_cookie_env();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cookie");
    std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = Endpoint::bind(loopback(), with_cookie(&path))
        .await
        .expect_err("a cookie others can read is refused");
    assert!(
        matches!(
            &err,
            TransportError::Config(ConfigError::CookiePermissions { path: p, mode: 0o640 }) if *p == path
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("accessible by group or others"), "{msg}");
    assert!(
        msg.contains(&format!("chmod 600 {}", path.display())),
        "{msg}"
    );
    // Fixed as the message says, the same file works.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Endpoint::bind(loopback(), with_cookie(&path))
        .await
        .expect("an owner-only cookie file is accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_another_cookie_is_refused_on_both_sides() {
    assert_no_cookie_env();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (p1, p2) = (d1.path().join("cookie"), d2.path().join("cookie"));
    let server = Endpoint::bind(loopback(), with_cookie(&p1)).await.unwrap();
    let client = Endpoint::bind(loopback(), with_cookie(&p2)).await.unwrap();
    let (dialed, accepted) = within("both sides refuse", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let client_err = dialed.expect_err("the dialer is refused");
    let server_err = accepted.expect("open").expect_err("the listener refuses");
    for (err, ours) in [(client_err.to_string(), &p2), (server_err.to_string(), &p1)] {
        assert!(err.contains("shared secret mismatch"), "{err}");
        assert!(err.contains("holds a different secret"), "{err}");
        // Where our secret came from, and what to do.
        assert!(
            err.contains(&format!("cookie file {}", ours.display())),
            "{err}"
        );
        assert!(err.contains("copy this cookie file"), "{err}");
    }
    assert!(matches!(
        server_err.error,
        TransportError::Handshake(HandshakeError::SecretMismatch { .. })
    ));
    // An explicit secret wins over the cookie file, and shows as configured.
    let mut c = with_cookie(&p2);
    c.set_shared_secret(Some(SharedSecret::new(
        std::fs::read_to_string(&p1).unwrap().trim(),
    )))
    .unwrap();
    let explicit = Endpoint::bind(loopback(), c).await.unwrap();
    assert_eq!(
        explicit.shared_secret().unwrap().source(),
        &SecretSource::Configured
    );
    assert_round_trip(&explicit, &server).await;
}

/// What the raw intruders below say they are.
fn intruder() -> Hello {
    Hello {
        uid: 0xbad,
        addr: "intruder:1".into(),
    }
}

/// A raw dialer speaking the real handshake with `secret`.
fn raw_dialer(secret: SharedSecret) -> Handshake {
    Handshake::with_secret(
        intruder(),
        std::time::Instant::now(),
        TIMEOUT,
        Role::Dialer,
        secret,
        [9; NONCE_LEN],
    )
}

/// Writes `bytes` one at a time, as a hostile client may.
async fn trickle(stream: &mut tokio::net::TcpStream, bytes: &[u8]) {
    for b in bytes {
        if stream.write_all(&[*b]).await.is_err() {
            return; // the node already hung up
        }
    }
}

/// The next inbound result on `node`: the handshake error it reports.
async fn refusal(node: &Endpoint) -> HandshakeError {
    match within("the node reports the refusal", node.accept()).await {
        Some(Err(e)) => match e.error {
            TransportError::Handshake(h) => h,
            other => panic!("expected a handshake error, got {other}"),
        },
        Some(Ok(est)) => panic!("a client without the secret was admitted: {est:?}"),
        None => panic!("endpoint closed"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_the_secret_cannot_get_past_the_handshake() {
    let node = endpoint(TransportConfig::default()).await; // the test secret
    let addr = node.local_addr();

    // 1. The wrong secret, written byte by byte: the node refuses it and
    //    still sends its own proof, so the client learns why too.
    let mut raw = raw_connect(addr).await;
    let mut hs = raw_dialer(SharedSecret::new("not-the-secret-0123456789"));
    let mut out = BytesMut::new();
    hs.poll_transmit(&mut out);
    trickle(&mut raw, &out).await;
    let mut buf = BytesMut::new();
    let client_side = within("the client's handshake ends", async {
        loop {
            let step = hs.handle_input(&mut buf);
            out.clear();
            if hs.poll_transmit(&mut out) {
                trickle(&mut raw, &out).await;
            }
            match step {
                Err(e) => return e,
                Ok(Some(h)) => panic!("the node proved a secret we do not hold: {h:?}"),
                Ok(None) => {}
            }
            let n = raw.read_buf(&mut buf).await.unwrap_or(0);
            assert_ne!(n, 0, "closed before its proof");
        }
    })
    .await;
    assert!(
        matches!(client_side, HandshakeError::SecretMismatch { .. }),
        "{client_side}"
    );
    // Frames after a failed proof go nowhere: the node has hung up.
    let msg = integration_tests::frame_bytes(FrameKind::Message, b"let me in");
    let _ = raw.write_all(&msg).await;
    wait_closed(&mut raw).await;
    assert!(matches!(
        refusal(&node).await,
        HandshakeError::SecretMismatch { proofs: 1, .. }
    ));

    // 2. No secret at all (the unauthenticated preface).
    let mut raw = raw_connect(addr).await;
    let mut insecure = Handshake::new(intruder(), std::time::Instant::now(), TIMEOUT);
    out.clear();
    insecure.poll_transmit(&mut out);
    trickle(&mut raw, &out).await;
    assert_eq!(refusal(&node).await, HandshakeError::PeerUnauthenticated);
    wait_closed(&mut raw).await;

    // 3. A message frame where the proof belongs: not parsed, not
    //    delivered, the handshake fails on its kind byte.
    let mut raw = raw_connect(addr).await;
    let mut hs = raw_side_handshake(intruder(), Role::Dialer);
    out.clear();
    hs.poll_transmit(&mut out);
    out.extend_from_slice(&msg);
    trickle(&mut raw, &out).await;
    assert_eq!(
        refusal(&node).await,
        HandshakeError::UnexpectedFrame {
            kind: FrameKind::Message as u8
        }
    );
    wait_closed(&mut raw).await;

    // 4. A proof that claims 4 GiB: refused from its header, before
    //    anything is buffered.
    let mut raw = raw_connect(addr).await;
    let mut hs = raw_side_handshake(intruder(), Role::Dialer);
    out.clear();
    hs.poll_transmit(&mut out);
    out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, FrameKind::Proof as u8]);
    trickle(&mut raw, &out).await;
    assert!(
        matches!(
            refusal(&node).await,
            HandshakeError::Frame(FrameError::TooLarge {
                len: 0xffff_ffff,
                max: 64
            })
        ),
        "the proof's size limit is the handshake's"
    );
    wait_closed(&mut raw).await;

    // The node still serves clients that hold the secret.
    let good = endpoint(TransportConfig::default()).await;
    assert_eq!(
        good.shared_secret().unwrap().source(),
        test_secret().source()
    );
    assert_round_trip(&good, &node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_opt_in_is_explicit_and_reported_unauthenticated() {
    let mut insecure = TransportConfig::default();
    insecure.set_insecure_no_authentication(true);
    let a = Endpoint::bind(loopback(), insecure.clone()).await.unwrap();
    let b = Endpoint::bind(loopback(), insecure.clone()).await.unwrap();
    assert!(a.shared_secret().is_none());
    let (dialed, accepted) = within("insecure nodes connect", async {
        tokio::join!(a.connect(b.local_addr()), b.accept())
    })
    .await;
    assert_eq!(
        dialed.unwrap().peer().verified,
        PeerVerified::Unauthenticated
    );
    assert_eq!(
        accepted.unwrap().unwrap().peer().verified,
        PeerVerified::Unauthenticated
    );
    // An explicit secret beats the opt-in: authentication stays on.
    insecure.set_shared_secret(Some(test_secret())).unwrap();
    let c = Endpoint::bind(loopback(), insecure).await.unwrap();
    assert_eq!(
        c.shared_secret().map(|s| s.source().clone()),
        Some(SecretSource::Configured)
    );
    let secured = endpoint(TransportConfig::default()).await;
    assert_round_trip(&c, &secured).await;
}
