//! Misbehaving peers speaking raw bytes: each is refused with the specific
//! error, and the endpoint keeps serving well-behaved peers.

use std::time::Duration;

use bytes::BufMut;
use integration_tests::{
    assert_round_trip, client_preface, endpoint, raw_connect, raw_handshake, within,
};
use tokio::{io::AsyncWriteExt, net::TcpStream};
use transport::{
    AcceptError, CloseReason, DEFAULT_MAX_FRAME_SIZE, Endpoint, FrameError, HandshakeError,
    TransportConfig, TransportError,
    handshake::{FLAG_AUTH, MAGIC, VERSION},
};

/// Handshake timeout for these tests: short, so the timeout test is quick;
/// still far above what a loopback handshake takes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(200);

async fn nodes() -> (Endpoint, Endpoint) {
    let mut config = TransportConfig::default();
    config.set_handshake_timeout(HANDSHAKE_TIMEOUT).unwrap();
    (endpoint(config.clone()).await, endpoint(config).await)
}

/// Connects raw, sends `bytes` (then half-closes if `eof`), and returns the
/// endpoint's accept error, checking it names the raw peer's address.
async fn refused(server: &Endpoint, bytes: &[u8], eof: bool) -> (AcceptError, TcpStream) {
    let mut raw = raw_connect(server.local_addr()).await;
    raw.write_all(bytes).await.unwrap();
    if eof {
        raw.shutdown().await.unwrap();
    }
    let err = match within("accept error", server.accept()).await {
        Some(Err(e)) => e,
        Some(Ok(est)) => panic!("handshake unexpectedly succeeded: {est:?}"),
        None => panic!("endpoint closed"),
    };
    let raw_addr = raw.local_addr().unwrap();
    assert_eq!(err.peer, raw_addr);
    let shown = err.to_string();
    assert!(shown.contains(&raw_addr.to_string()), "{shown}");
    // The raw stream is kept open until now so the failure is the one the
    // bytes caused, not a reset.
    (err, raw)
}

/// A preface offering shared-secret authentication, as the nodes under
/// test (which prove the test secret) require.
fn preface(version: u16) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.put_u16(version);
    b.put_u16(FLAG_AUTH);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_refused_as_bad_magic() {
    let (client, server) = nodes().await;
    let (err, _raw) = refused(&server, b"GET / HTTP/1.1\r\n\r\n", false).await;
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::BadMagic { got, .. }) if &got == b"GET "
        ),
        "{err}"
    );
    assert!(err.to_string().contains("bad protocol magic"), "{err}");
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_version_is_refused_naming_both_versions() {
    let (client, server) = nodes().await;
    let (err, _raw) = refused(&server, &preface(VERSION + 1), false).await;
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::VersionMismatch { local: VERSION, peer })
                if peer == VERSION + 1
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "protocol version mismatch: local {VERSION}, peer {}",
            VERSION + 1
        )),
        "{err}"
    );
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_handshake_then_silence_times_out() {
    let (client, server) = nodes().await;
    let (err, _raw) = refused(&server, &preface(VERSION), false).await;
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::Timeout { timeout, received: 8 })
                if timeout == HANDSHAKE_TIMEOUT
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("handshake did not complete within 200ms"),
        "{err}"
    );
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eof_mid_handshake_is_reported() {
    let (client, server) = nodes().await;
    let hello = client_preface(7, "half:1");
    // The preface and three bytes of the hello frame, then EOF.
    let (err, _raw) = refused(&server, &hello[..11], true).await;
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::Eof { received: 11 })
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("peer closed the connection during the handshake"),
        "{err}"
    );
    assert_round_trip(&client, &server).await;
}

/// Completes the handshake by hand, starts the accepted connection, sends
/// `bytes` (then EOF if `eof`) and returns the reason the endpoint closed it.
async fn closed_after(server: &Endpoint, bytes: &[u8], eof: bool) -> CloseReason {
    let mut raw = raw_connect(server.local_addr()).await;
    let (_, accepted) = within("handshake", async {
        tokio::join!(raw_handshake(&mut raw, server.uid()), server.accept())
    })
    .await;
    let (conn, mut inbound) = accepted
        .expect("endpoint open")
        .expect("hand-made handshake is valid")
        .start_channel(4);
    raw.write_all(bytes).await.unwrap();
    if eof {
        raw.shutdown().await.unwrap();
    }
    let reason = within("connection to close", conn.closed()).await;
    assert!(
        within("inbound to end", inbound.recv()).await.is_none(),
        "no frame is delivered"
    );
    assert!(matches!(
        inbound.close_reason(),
        Some(CloseReason::Error(_))
    ));
    reason
}

fn frame_error(reason: &CloseReason) -> &FrameError {
    match reason {
        CloseReason::Error(e) => match &**e {
            TransportError::Frame(f) => f,
            other => panic!("expected a frame error, got {other}"),
        },
        other => panic!("expected an error close, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_gib_length_prefix_closes_with_too_large() {
    let (client, server) = nodes().await;
    let reason = closed_after(&server, &[0xff, 0xff, 0xff, 0xff, 0x10], false).await;
    assert_eq!(
        frame_error(&reason),
        &FrameError::TooLarge {
            len: u64::from(u32::MAX),
            max: DEFAULT_MAX_FRAME_SIZE
        }
    );
    assert!(
        reason.to_string().contains(&format!(
            "frame length 4294967295 exceeds limit {DEFAULT_MAX_FRAME_SIZE}"
        )),
        "{reason}"
    );
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frame_kind_closes_the_connection() {
    let (client, server) = nodes().await;
    let reason = closed_after(&server, &[0, 0, 0, 1, 0x7f, 0], false).await;
    assert_eq!(
        frame_error(&reason),
        &FrameError::UnknownKind { kind: 0x7f }
    );
    assert!(
        reason.to_string().contains("unknown frame kind 0x7f"),
        "{reason}"
    );
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_then_eof_is_reported() {
    let (client, server) = nodes().await;
    // A message frame announcing 10 body bytes, of which 3 arrive.
    let reason = closed_after(&server, &[0, 0, 0, 10, 0x10, 1, 2, 3], true).await;
    assert_eq!(
        frame_error(&reason),
        &FrameError::Truncated { have: 8, need: 15 }
    );
    assert!(
        reason
            .to_string()
            .contains("stream ended inside a frame: have 8 bytes, frame needs 15"),
        "{reason}"
    );
    assert_round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_after_the_handshake_is_a_framing_error() {
    let (client, server) = nodes().await;
    // A second, well-formed hello once the connection is established.
    let hello = client_preface(9, "again:1");
    let reason = closed_after(&server, &hello[8..], false).await;
    assert_eq!(frame_error(&reason), &FrameError::Unexpected { kind: 0x01 });
    let shown = reason.to_string();
    assert!(!shown.contains("handshake failed"), "{shown}");
    assert!(shown.contains("unexpected frame kind 0x01"), "{shown}");
    assert_round_trip(&client, &server).await;
}
