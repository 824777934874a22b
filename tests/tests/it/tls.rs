//! TLS and node authentication over real sockets: certificates are made at
//! test time with rcgen into a temporary directory. Every refusal must fail
//! within the handshake timeout with an error that says why on both sides,
//! and the endpoint must keep serving good peers afterwards.

use std::{
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use integration_tests::{endpoint, loopback, raw_connect, secured, secured_system, within};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use transport::{
    AcceptError, CloseReason, Endpoint, Frame, HandshakeError, PeerIdentity, Security,
    SharedSecret, Tls, TlsConfig, TlsError, TransportConfig, TransportError, fingerprint,
};

/// Handshake timeout for these tests: short so a hang shows quickly, far
/// above what a loopback TLS handshake takes in a debug build.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// The test nodes' config: the short handshake timeout and the test
/// suite's shared secret.
pub(super) fn config() -> TransportConfig {
    let mut c = TransportConfig::default();
    c.set_handshake_timeout(HANDSHAKE_TIMEOUT).unwrap();
    secured(c)
}

/// A CA and the certificates it issues, written as PEM files into a
/// temporary directory that lives as long as this value.
pub(super) struct Pki {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
    ca_pem: String,
}

/// What a node certificate should say.
pub(super) struct Spec<'a> {
    cn: &'a str,
    sans: Vec<String>,
    /// Days from now: (not before, not after).
    validity: (i64, i64),
}

impl<'a> Spec<'a> {
    /// Valid now for `127.0.0.1` and `localhost` (host-only: no node URI).
    pub(super) fn node(cn: &'a str) -> Self {
        Self {
            cn,
            sans: vec!["localhost".into(), "127.0.0.1".into()],
            validity: (-1, 30),
        }
    }

    /// As [`node`](Self::node), also naming the nodes `uris`
    /// (`tcp://name@host[:port]` URI SANs).
    pub(super) fn naming(cn: &'a str, uris: &[&str]) -> Self {
        let mut spec = Self::node(cn);
        spec.sans.extend(uris.iter().map(|u| u.to_string()));
        spec
    }
}

impl Pki {
    pub(super) fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("transport-tls-")
            .tempdir()
            .expect("create temp dir");
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&key).unwrap().pem();
        std::fs::write(dir.path().join("ca.pem"), &ca_pem).unwrap();
        Self {
            dir,
            ca: Issuer::new(ca, key),
            ca_pem,
        }
    }

    pub(super) fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// Issues a certificate and writes `FILE.pem` (chain) and `FILE.key`.
    /// Returns the certificate's DER.
    pub(super) fn issue(&self, file: &str, spec: &Spec<'_>) -> Vec<u8> {
        let (uris, names): (Vec<String>, Vec<String>) =
            spec.sans.iter().cloned().partition(|s| s.contains("://"));
        let mut p = CertificateParams::new(names).unwrap();
        for uri in uris {
            p.subject_alt_names
                .push(rcgen::SanType::URI(uri.try_into().unwrap()));
        }
        p.distinguished_name.push(DnType::CommonName, spec.cn);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = rcgen::date_time_ymd(1970, 1, 1)
            + SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let day = Duration::from_secs(24 * 3600);
        let shift = |d: i64| {
            if d < 0 {
                now - day * (-d) as u32
            } else {
                now + day * d as u32
            }
        };
        p.not_before = shift(spec.validity.0);
        p.not_after = shift(spec.validity.1);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca).unwrap();
        std::fs::write(
            self.path(&format!("{file}.pem")),
            format!("{}{}", cert.pem(), self.ca_pem),
        )
        .unwrap();
        std::fs::write(self.path(&format!("{file}.key")), key.serialize_pem()).unwrap();
        cert.der().to_vec()
    }

    /// TLS settings for the node `file`, trusting `trust`'s CA, accepting
    /// host-only certificates (what [`Spec::node`] issues: these tests are
    /// about the host checks).
    pub(super) fn tls(&self, file: &str, trust: &Pki) -> TlsConfig {
        let mut tls = self.tls_strict(file, trust);
        tls.set_allow_host_only_certificates(true);
        tls
    }

    /// As [`tls`](Self::tls), with the default: peer certificates must
    /// name the node.
    pub(super) fn tls_strict(&self, file: &str, trust: &Pki) -> TlsConfig {
        TlsConfig::from_pem_files(
            self.path(&format!("{file}.pem")),
            self.path(&format!("{file}.key")),
            trust.path("ca.pem"),
        )
    }
}

async fn tls_node(tls: TlsConfig) -> Endpoint<Tls> {
    Endpoint::bind_tls(loopback(), config(), tls)
        .await
        .expect("bind a TLS endpoint")
}

/// A good node `name` issued by `pki` and trusting it.
async fn good_node(pki: &Pki, name: &str) -> Endpoint<Tls> {
    pki.issue(name, &Spec::node(name));
    tls_node(pki.tls(name, pki)).await
}

/// Connects `client` to `server`, sends one frame each way, closes
/// gracefully: proves both endpoints work.
pub(super) async fn round_trip<A: Security, B: Security>(
    client: &Endpoint<A>,
    server: &Endpoint<B>,
) {
    let (dialed, accepted) = within("connect and accept", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let dialed = dialed.expect("connect succeeds");
    let accepted = accepted.expect("endpoint open").expect("accept succeeds");
    assert_eq!(dialed.peer().uid, server.uid());
    assert_eq!(accepted.peer().uid, client.uid());
    let (c, mut c_in) = dialed.start_channel(8);
    let (s, mut s_in) = accepted.start_channel(8);
    c.send(Frame::message(&b"ping"[..])).await.unwrap();
    let got = within("ping", s_in.recv()).await.expect("ping arrives");
    assert_eq!(&got.body[..], b"ping");
    s.send(Frame::message(&b"pong"[..])).await.unwrap();
    let got = within("pong", c_in.recv()).await.expect("pong arrives");
    assert_eq!(&got.body[..], b"pong");
    let reason = within("graceful close", c.close("done")).await;
    assert!(
        matches!(reason, CloseReason::Local(_) | CloseReason::Remote(_)),
        "{reason}"
    );
    let reason = within("peer sees close", s.closed()).await;
    assert!(
        matches!(reason, CloseReason::Remote(ref r) if r == "done"),
        "{reason}"
    );
}

/// Dials `server` from `client`, expecting both sides to fail: returns the
/// dialer's error and the listener's accept error, which must come within
/// the handshake timeout (plus slack) and name the dialer's address.
pub(super) async fn both_fail<A: Security, B: Security>(
    client: &Endpoint<A>,
    server: &Endpoint<B>,
) -> (TransportError, AcceptError) {
    let start = Instant::now();
    let (dialed, accepted) = within("both sides fail", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let client_err = match dialed {
        Ok(est) => panic!("connect unexpectedly succeeded: {est:?}"),
        Err(e) => e,
    };
    let server_err = match accepted {
        Some(Err(e)) => e,
        Some(Ok(est)) => panic!("accept unexpectedly succeeded: {est:?}"),
        None => panic!("endpoint closed"),
    };
    assert!(
        start.elapsed() < HANDSHAKE_TIMEOUT + Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(server_err.peer.ip(), client.local_addr().ip());
    assert!(
        server_err
            .to_string()
            .contains(&server_err.peer.to_string()),
        "{server_err}"
    );
    (client_err, server_err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_round_trip_and_graceful_close() {
    let pki = Pki::new("ca");
    let a = good_node(&pki, "a").await;
    let b = good_node(&pki, "b").await;
    round_trip(&a, &b).await;
    round_trip(&b, &a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_from_another_ca_is_refused_on_both_sides() {
    let pki = Pki::new("ca");
    let rogue = Pki::new("rogue ca");
    let server = good_node(&pki, "server").await;
    let good = good_node(&pki, "good").await;
    // The rogue client trusts our CA but its own certificate is the rogue's.
    rogue.issue("mallory", &Spec::node("mallory"));
    let mallory = tls_node(rogue.tls("mallory", &pki)).await;
    let (client_err, server_err) = both_fail(&mallory, &server).await;
    let s = server_err.to_string();
    assert!(
        matches!(
            server_err.error,
            TransportError::Tls(TlsError::Handshake { .. })
        ),
        "{s}"
    );
    assert!(s.contains("UnknownIssuer"), "{s}");
    let c = client_err.to_string();
    assert!(c.contains("alert") && c.contains("UnknownCA"), "{c}");
    // And the other way: a client that does not trust the server's CA.
    let wary = good_node(&rogue, "wary").await;
    let (client_err, server_err) = both_fail(&wary, &server).await;
    assert!(
        client_err.to_string().contains("UnknownIssuer"),
        "{client_err}"
    );
    assert!(server_err.to_string().contains("UnknownCA"), "{server_err}");
    round_trip(&good, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificate_is_refused() {
    let pki = Pki::new("ca");
    pki.issue(
        "old",
        &Spec {
            validity: (-30, -1),
            ..Spec::node("old")
        },
    );
    let expired = tls_node(pki.tls("old", &pki)).await;
    let client = good_node(&pki, "client").await;
    let (client_err, server_err) = both_fail(&client, &expired).await;
    assert!(
        client_err.to_string().contains("certificate expired"),
        "{client_err}"
    );
    assert!(
        server_err.to_string().contains("CertificateExpired"),
        "{server_err}"
    );
    // The expired node cannot dial out either, and the client still works.
    let server = good_node(&pki, "server").await;
    let (client_err, server_err) = both_fail(&expired, &server).await;
    assert!(
        server_err.to_string().contains("certificate expired"),
        "{server_err}"
    );
    assert!(client_err.to_string().contains("alert"), "{client_err}");
    round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_certificate_for_another_name_is_refused() {
    let pki = Pki::new("ca");
    pki.issue(
        "elsewhere",
        &Spec {
            sans: vec!["elsewhere.example".into(), "10.9.9.9".into()],
            ..Spec::node("elsewhere")
        },
    );
    let elsewhere = tls_node(pki.tls("elsewhere", &pki)).await;
    let client = good_node(&pki, "client").await;
    let (client_err, server_err) = both_fail(&client, &elsewhere).await;
    assert!(
        client_err.to_string().contains("not valid for name"),
        "{client_err}"
    );
    assert!(server_err.to_string().contains("alert"), "{server_err}");
    round_trip(&client, &good_node(&pki, "server").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_is_refused_when_required() {
    let pki = Pki::new("ca");
    let server = good_node(&pki, "server").await;
    // A bare rustls client that trusts the CA but has no certificate.
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for c in rustls_pki_types::CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = raw_connect(server.local_addr()).await;
    let raw_addr = tcp.local_addr().unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(server.local_addr().ip().into());
    // TLS 1.3: the client finishes its side before the server has checked it.
    let mut tls = within("tls connect", connector.connect(name, tcp))
        .await
        .expect("client side of the TLS handshake completes");
    let err = match within("accept error", server.accept()).await {
        Some(Err(e)) => e,
        other => panic!("expected an accept error, got {other:?}"),
    };
    assert_eq!(err.peer, raw_addr);
    assert!(
        err.to_string().contains("peer sent no certificates"),
        "{err}"
    );
    let mut buf = [0u8; 64];
    let read = within("client sees the alert", tls.read(&mut buf)).await;
    let e = read.expect_err("the server refuses the client");
    assert!(e.to_string().contains("CertificateRequired"), "{e}");
    round_trip(&good_node(&pki, "client").await, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_client_against_tls_port_and_the_reverse() {
    let pki = Pki::new("ca");
    let tls_server = good_node(&pki, "server").await;
    let plain = endpoint(config()).await;
    let (client_err, server_err) = both_fail(&plain, &tls_server).await;
    assert!(
        server_err.to_string().contains("does not speak TLS"),
        "{server_err}"
    );
    // The plaintext node reads the TLS alert where it wanted our magic.
    assert!(
        matches!(
            client_err,
            TransportError::Handshake(HandshakeError::BadMagic { got, .. }) if got[0] == 0x15
        ) || matches!(
            client_err,
            TransportError::Handshake(HandshakeError::Eof { .. })
        ),
        "{client_err}"
    );

    let tls_client = good_node(&pki, "client").await;
    let (client_err, server_err) = both_fail(&tls_client, &plain).await;
    assert!(
        client_err.to_string().contains("does not speak TLS"),
        "{client_err}"
    );
    assert!(
        matches!(
            server_err.error,
            TransportError::Handshake(HandshakeError::BadMagic { got, .. }) if got[..2] == [0x16, 0x03]
        ),
        "{server_err}"
    );
    round_trip(&tls_client, &tls_server).await;
    round_trip(&endpoint(config()).await, &plain).await;
}

fn secret_config(secret: Option<SharedSecret>) -> TransportConfig {
    let mut c = config();
    c.set_shared_secret(secret).unwrap();
    c
}

const SECRET: &str = "a-shared-secret-of-enough-length";
const OTHER: &str = "another-secret-of-enough-length!";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_shared_secret_is_named_on_both_sides() {
    let server = endpoint(secret_config(Some(SharedSecret::new(SECRET)))).await;
    let wrong = endpoint(secret_config(Some(SharedSecret::new(OTHER)))).await;
    let (client_err, server_err) = both_fail(&wrong, &server).await;
    for e in [client_err.to_string(), server_err.to_string()] {
        assert!(e.contains("shared secret mismatch"), "{e}");
    }
    let mut insecure = TransportConfig::default();
    insecure
        .set_handshake_timeout(HANDSHAKE_TIMEOUT)
        .unwrap()
        .set_insecure_no_authentication(true);
    let none = endpoint(insecure).await;
    let (client_err, server_err) = both_fail(&none, &server).await;
    assert!(
        matches!(
            client_err,
            TransportError::Handshake(HandshakeError::SecretRequired)
        ),
        "{client_err}"
    );
    assert!(
        matches!(
            server_err.error,
            TransportError::Handshake(HandshakeError::PeerUnauthenticated)
        ),
        "{server_err}"
    );
    // Rotation: a node holding the new secret with the old as previous
    // talks to nodes with either.
    let rotating = endpoint(secret_config(Some(
        SharedSecret::new(OTHER).with_previous(SECRET),
    )))
    .await;
    round_trip(&rotating, &server).await;
    round_trip(&server, &rotating).await;
    round_trip(&rotating, &wrong).await;
    let good = endpoint(secret_config(Some(SharedSecret::new(SECRET)))).await;
    round_trip(&good, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_secret_over_mutual_tls() {
    let pki = Pki::new("ca");
    let c = secret_config(Some(SharedSecret::new(SECRET)));
    pki.issue("a", &Spec::node("a"));
    pki.issue("b", &Spec::node("b"));
    let a = Endpoint::bind_tls(loopback(), c.clone(), pki.tls("a", &pki))
        .await
        .unwrap();
    let b = Endpoint::bind_tls(loopback(), c, pki.tls("b", &pki))
        .await
        .unwrap();
    round_trip(&a, &b).await;
}

/// Forwards one connection from a listener to `target`, recording what the
/// dialer sends.
async fn recording_proxy(target: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let rec = recorded.clone();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = TcpStream::connect(target).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let up = async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = cr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                rec.lock().unwrap().extend_from_slice(&buf[..n]);
                if sw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        let down = async move {
            let _ = tokio::io::copy(&mut sr, &mut cw).await;
        };
        tokio::join!(up, down);
    });
    (addr, recorded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_handshake_is_refused() {
    let server = endpoint(secret_config(Some(SharedSecret::new(SECRET)))).await;
    let client = endpoint(secret_config(Some(SharedSecret::new(SECRET)))).await;
    let (proxy, recorded) = recording_proxy(server.local_addr()).await;
    let (dialed, accepted) = within("handshake through the proxy", async {
        tokio::join!(client.connect(proxy), server.accept())
    })
    .await;
    let _dialed = dialed.expect("the recorded handshake succeeds");
    let _accepted = accepted.unwrap().expect("and is accepted");
    let bytes = recorded.lock().unwrap().clone();
    assert!(bytes.starts_with(b"ACTR"), "{bytes:02x?}");
    // Replay the dialer's exact bytes (first flight and proof) on a new
    // connection: the server's nonce is fresh, so the proof cannot match.
    let mut raw = raw_connect(server.local_addr()).await;
    raw.write_all(&bytes).await.unwrap();
    let err = match within("accept error", server.accept()).await {
        Some(Err(e)) => e,
        other => panic!("replay was not refused: {other:?}"),
    };
    assert_eq!(err.peer, raw.local_addr().unwrap());
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::SecretMismatch { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("replayed"), "{err}");
    round_trip(&client, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_must_match_the_advertised_address() {
    let pki = Pki::new("ca");
    let server = good_node(&pki, "server").await;
    // A valid certificate for 127.0.0.1 and localhost, but the node
    // advertises another host.
    pki.issue("liar", &Spec::node("liar"));
    let liar = Endpoint::bind_secure(
        loopback(),
        config(),
        Tls::new(pki.tls("liar", &pki)).unwrap(),
        |a| format!("sys@node9.example:{}", a.port()),
    )
    .await
    .unwrap();
    let (dialed, accepted) = within("connect and refuse", async {
        tokio::join!(liar.connect(server.local_addr()), server.accept())
    })
    .await;
    let err = match accepted {
        Some(Err(e)) => e,
        other => panic!("identity not checked: {other:?}"),
    };
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::Identity { ref addr, .. }) if addr.contains("node9.example")
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("peer certificate does not match its advertised address"),
        "{err}"
    );
    // The liar's own checks passed, so its connect succeeded; the server
    // tells it why it is refused with a Close frame.
    let (conn, _inbound) = dialed.expect("liar's side completes").start_channel(4);
    match within("refusal reaches the liar", conn.closed()).await {
        CloseReason::Remote(r) => assert!(r.contains("does not match"), "{r}"),
        other => panic!("expected the server's reason, got {other}"),
    }
    // An honest "name@127.0.0.1:port" passes the same check.
    pki.issue("honest", &Spec::node("honest"));
    let honest = Endpoint::bind_secure(
        loopback(),
        config(),
        Tls::new(pki.tls("honest", &pki)).unwrap(),
        |a| format!("sys@{a}"),
    )
    .await
    .unwrap();
    round_trip(&honest, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_fingerprint_and_reload() {
    let pki = Pki::new("ca");
    let server_der = pki.issue("server", &Spec::node("server"));
    let server = tls_node(pki.tls("server", &pki)).await;
    let client_tls = |pin: Vec<u8>| {
        let mut t = pki.tls("client", &pki);
        t.set_peer_identity(PeerIdentity::Pinned(vec![(
            server.advertised_addr().to_owned(),
            fingerprint(&pin),
        )]));
        t
    };
    pki.issue("client", &Spec::node("client"));
    // Pinned to the current certificate: accepted.
    let pinned = tls_node(client_tls(server_der.clone())).await;
    // The server renews its certificate on disk and reloads.
    let renewed_der = pki.issue("server", &Spec::node("server-renewed"));
    round_trip(&pinned, &server).await; // still the old one until reload
    server.reload_tls().expect("reload renewed files");
    let (dialed, accepted) = within("pinned to the old cert", async {
        tokio::join!(pinned.connect(server.local_addr()), server.accept())
    })
    .await;
    let err = dialed.expect_err("the renewed certificate is not the pinned one");
    assert!(err.to_string().contains("is not the pinned one"), "{err}");
    drop(accepted);
    let repinned = tls_node(client_tls(renewed_der)).await;
    round_trip(&repinned, &server).await;
}

/// `openssl s_client` completes TLS 1.3 with a node, sees its certificate,
/// and is then disconnected for not speaking the protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_s_client_interop() {
    let openssl = which("openssl").unwrap_or_else(|| {
        panic!("`openssl` is not installed: install it (Debian package `openssl`) to run this test")
    });
    let pki = Pki::new("ca");
    let server = good_node(&pki, "interop-node").await;
    pki.issue("s_client", &Spec::node("s_client"));
    let port = server.local_addr().port();
    let mut child = Command::new(openssl)
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-tls1_3", "-verify_return_error", "-ign_eof", "-CAfile"])
        .arg(pki.path("ca.pem"))
        .arg("-cert")
        .arg(pki.path("s_client.pem"))
        .arg("-key")
        .arg(pki.path("s_client.key"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn openssl s_client");
    // Not our protocol: an HTTP request line. Then stdin is closed.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .unwrap();
    let err = match within("accept error", server.accept()).await {
        Some(Err(e)) => e,
        other => panic!("expected bad magic, got {other:?}"),
    };
    assert!(
        matches!(
            err.error,
            TransportError::Handshake(HandshakeError::BadMagic { got, .. }) if &got == b"GET "
        ),
        "{err}"
    );
    let output = within(
        "openssl s_client exits",
        tokio::task::spawn_blocking(move || wait_bounded(child, Duration::from_secs(15))),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).replace(' ', "");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains("TLSv1.3"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("subject=CN=interop-node"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("Verifyreturncode:0(ok)"),
        "{stdout}\n{stderr}"
    );
    round_trip(&good_node(&pki, "client").await, &server).await;
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| Path::new(p).is_file())
    })
}

/// Waits for `child`, killing it after `limit`.
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("poll child").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "openssl s_client did not exit within {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Actor systems configured with TLS talk over mutually authenticated
/// links: remote tell and ask work, and a system whose certificate comes
/// from another CA cannot reach them.
#[tokio::test]
async fn actor_systems_talk_over_mutual_tls() {
    use super::actors_common::{Count, Counter, total};
    let pki = Pki::new("actors-ca");
    // Certificates that name the nodes (any port): the default check.
    pki.issue("a", &Spec::naming("a", &["tcp://a@127.0.0.1"]));
    pki.issue("b", &Spec::naming("b", &["tcp://b@127.0.0.1"]));
    let system = |tls: TlsConfig, name: &'static str| async move {
        let mut c = actors::SystemConfig::default();
        c.set_tls(tls)
            .set_resolve_timeout(Duration::from_secs(3))
            .unwrap()
            .transport_mut()
            .set_handshake_timeout(HANDSHAKE_TIMEOUT)
            .unwrap();
        actors::ActorSystem::with_config(name, Some(loopback()), secured_system(c))
            .await
            .expect("system binds")
    };
    let a = system(pki.tls_strict("a", &pki), "a").await;
    let b = system(pki.tls_strict("b", &pki), "b").await;
    b.spawn_named("counter", Counter::default()).unwrap();
    let path = format!("tcp://{}/user/counter", b.node());
    let counter = within("resolve over TLS", a.resolve::<Count>(&path))
        .await
        .expect("resolves over TLS");
    counter.tell(Count::Add(5)).unwrap();
    assert_eq!(total(&counter).await, 5);

    let other = Pki::new("other-ca");
    other.issue("c", &Spec::naming("c", &["tcp://c@127.0.0.1"]));
    let c = system(other.tls_strict("c", &other), "c").await;
    let err = within("resolve with a foreign CA", c.resolve::<Count>(&path))
        .await
        .expect_err("a certificate from another CA is refused");
    assert!(
        matches!(err, actors::ResolveError::Unreachable { .. }),
        "{err}"
    );
    for s in [a, b, c] {
        s.shutdown().await;
    }
}

/// With certificates that name the nodes, the connection one node dials
/// is proven at both ends, so both nodes send on it: first contact brings
/// one link up on each node and opens no connection only to close it.
#[tokio::test]
async fn first_contact_over_node_certificates_brings_one_link_up_on_each_node() {
    use super::actors_common::{Count, Counter, total};
    let pki = Pki::new("links-ca");
    pki.issue("a", &Spec::naming("a", &["tcp://a@127.0.0.1"]));
    pki.issue("b", &Spec::naming("b", &["tcp://b@127.0.0.1"]));
    let system = |tls: TlsConfig, name: &'static str| async move {
        let mut c = actors::SystemConfig::default();
        c.set_tls(tls);
        actors::ActorSystem::with_config(name, Some(loopback()), secured_system(c))
            .await
            .expect("system binds")
    };
    let a = system(pki.tls_strict("a", &pki), "a").await;
    let b = system(pki.tls_strict("b", &pki), "b").await;
    let mut a_events = a.subscribe_remote_events();
    let mut b_events = b.subscribe_remote_events();
    a.spawn_named("counter", Counter::default()).unwrap();
    b.spawn_named("counter", Counter::default()).unwrap();
    let on_b = within(
        "resolve",
        a.resolve::<Count>(&format!("tcp://{}/user/counter", b.node())),
    )
    .await
    .expect("resolves");
    on_b.tell(Count::Add(1)).unwrap();
    assert_eq!(total(&on_b).await, 1);
    let on_a = within(
        "resolve",
        b.resolve::<Count>(&format!("tcp://{}/user/counter", a.node())),
    )
    .await
    .expect("resolves");
    on_a.tell(Count::Add(2)).unwrap();
    assert_eq!(total(&on_a).await, 2);
    assert_eq!(total(&on_b).await, 1);
    assert_eq!(
        integration_tests::link_events(&mut a_events),
        (1, 0),
        "a's link events"
    );
    assert_eq!(
        integration_tests::link_events(&mut b_events),
        (1, 0),
        "b's link events"
    );
    for s in [a, b] {
        s.shutdown().await;
    }
}

/// A TLS endpoint charges its admission what a pending TLS handshake
/// holds (rustls's state is ten times the plaintext handshake's), and
/// gives it back when the connection goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_tls_handshake_is_charged_what_rustls_holds() {
    const N: usize = 5;
    let pki = Pki::new("charge-ca");
    pki.issue("node", &Spec::node("node"));
    let held = integration_tests::CountingAdmission::default();
    let count = held.0.clone();
    let mut config = config();
    config.set_admission(Some(Arc::new(held)));
    let node = Endpoint::bind_tls(loopback(), config, pki.tls("node", &pki))
        .await
        .expect("binds");
    let mut streams = Vec::new();
    for _ in 0..N {
        streams.push(raw_connect(node.local_addr()).await);
    }
    let charged = || count.load(std::sync::atomic::Ordering::Acquire);
    integration_tests::eventually("every pending handshake is charged", || {
        charged() == N * transport::PENDING_TLS_HANDSHAKE_COST
    })
    .await;
    drop(streams);
    integration_tests::eventually("the charges are given back", || charged() == 0).await;
}
