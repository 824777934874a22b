//! TLS certificates bound to whole nodes (`tcp://name@host:port` URI SANs),
//! host-only certificates as an explicit opt-in, what
//! [`PeerVerified`] reports in each case, and channel binding: a relay that
//! terminates TLS towards both nodes cannot forward the secret's proof.

use std::{net::SocketAddr, sync::Arc};

use integration_tests::{loopback, within};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::net::{TcpListener, TcpStream};
use transport::{
    CloseReason, Endpoint, HandshakeError, PeerIdentity, PeerVerified, Tls, TlsConfig,
    TransportConfig, TransportError, fingerprint,
};

use super::tls::{Pki, Spec, config, round_trip};

/// Dials `server` from `client` where only the dialer's identity check
/// fails: returns the dialer's error, and checks that the listener (whose
/// own checks passed) is told why by the dialer's Close frame.
async fn dialer_refuses(client: &Endpoint<Tls>, server: &Endpoint<Tls>) -> TransportError {
    let (dialed, accepted) = within("connect and refuse", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let err = dialed.expect_err("the dialer refuses");
    let (conn, _inbound) = accepted
        .expect("open")
        .expect("the listener's checks pass")
        .start_channel(4);
    match within("refusal reaches the listener", conn.closed()).await {
        CloseReason::Remote(r) => assert!(r.contains("does not match"), "{r}"),
        other => panic!("expected the dialer's reason, got {other}"),
    }
    err
}

/// As [`dialer_refuses`], the other way round: the listener refuses, the
/// dialer is told by its Close frame.
async fn listener_refuses(client: &Endpoint<Tls>, server: &Endpoint<Tls>) -> TransportError {
    let (dialed, accepted) = within("connect and refuse", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let err = accepted.expect("open").expect_err("the listener refuses");
    let (conn, _inbound) = dialed.expect("the dialer's checks pass").start_channel(4);
    match within("refusal reaches the dialer", conn.closed()).await {
        CloseReason::Remote(r) => assert!(r.contains("does not match"), "{r}"),
        other => panic!("expected the listener's reason, got {other}"),
    }
    err.error
}

/// An endpoint with `tls`, advertising what `advertise` makes of its
/// bound address.
async fn node(
    tls: TlsConfig,
    config: TransportConfig,
    advertise: impl FnOnce(SocketAddr) -> String,
) -> Endpoint<Tls> {
    Endpoint::bind_secure(loopback(), config, Tls::new(tls).unwrap(), advertise)
        .await
        .expect("bind a TLS endpoint")
}

/// Connects `client` to `server` and returns what each side reports about
/// the other: `(dialer's view of the listener, listener's view of the
/// dialer)`.
async fn verified(client: &Endpoint<Tls>, server: &Endpoint<Tls>) -> (PeerVerified, PeerVerified) {
    let (dialed, accepted) = within("connect and accept", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let dialed = dialed.expect("connect succeeds");
    let accepted = accepted.expect("open").expect("accept succeeds");
    (dialed.peer().verified, accepted.peer().verified)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_naming_the_node_is_accepted_for_that_node_only() {
    let pki = Pki::new("ca");
    pki.issue("a", &Spec::naming("a", &["tcp://a@127.0.0.1:4242"]));
    pki.issue("c", &Spec::naming("c", &["tcp://c@127.0.0.1"]));
    let client = node(pki.tls_strict("c", &pki), config(), |a| format!("c@{a}")).await;
    // The node the certificate names: accepted, both ways as `Node`.
    let a = node(pki.tls_strict("a", &pki), config(), |_| {
        "a@127.0.0.1:4242".into()
    })
    .await;
    assert_eq!(
        verified(&client, &a).await,
        (PeerVerified::Node, PeerVerified::Node)
    );
    round_trip(&client, &a).await;
    // The same certificate claiming another port, or another node name.
    for claim in ["a@127.0.0.1:4243", "b@127.0.0.1:4242"] {
        let liar = node(pki.tls_strict("a", &pki), config(), |_| claim.into()).await;
        let client_err = dialer_refuses(&client, &liar).await;
        let msg = client_err.to_string();
        assert!(
            matches!(
                &client_err,
                TransportError::Handshake(HandshakeError::Identity { addr, .. }) if addr == claim
            ),
            "{msg}"
        );
        // The error names both: what the certificate says and the claim.
        assert!(msg.contains("tcp://a@127.0.0.1:4242"), "{msg}");
        assert!(msg.contains(claim), "{msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_only_certificate_is_refused_by_default_and_host_when_allowed() {
    let pki = Pki::new("ca");
    pki.issue(
        "server",
        &Spec::naming("server", &["tcp://server@127.0.0.1"]),
    );
    pki.issue("h", &Spec::node("h")); // 127.0.0.1 and localhost, no node
    let strict = node(pki.tls_strict("server", &pki), config(), |a| {
        format!("server@{a}")
    })
    .await;
    let host_only = node(pki.tls_strict("h", &pki), config(), |a| format!("h@{a}")).await;
    // The server refuses the host-only dialer; the dialer (whose own check
    // of the server passed) learns why from the server's Close frame.
    let err = listener_refuses(&host_only, &strict).await;
    let msg = err.to_string();
    assert!(msg.contains("names no node"), "{msg}");
    assert!(msg.contains("set_allow_host_only_certificates"), "{msg}");
    // Allowed: accepted, and reported as `Host` (its certificate cannot
    // tell this node from any other on 127.0.0.1).
    let mut allow = pki.tls_strict("server", &pki);
    allow.set_allow_host_only_certificates(true);
    let lenient = node(allow, config(), |a| format!("server@{a}")).await;
    assert_eq!(
        verified(&host_only, &lenient).await,
        (PeerVerified::Node, PeerVerified::Host)
    );
    // Still valid for the host only: a host-only certificate claiming a
    // node on another host is refused even when host-only is allowed.
    let mut allow = pki.tls_strict("h", &pki);
    allow.set_allow_host_only_certificates(true);
    let elsewhere = node(allow, config(), |a| format!("h@10.9.8.7:{}", a.port())).await;
    let server_err = listener_refuses(&elsewhere, &lenient).await;
    assert!(
        server_err.to_string().contains("not valid for 10.9.8.7"),
        "{server_err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_verified_is_the_strongest_proof_in_force() {
    let pki = Pki::new("ca");
    let der_a = pki.issue("a", &Spec::naming("a", &["tcp://a@127.0.0.1"]));
    pki.issue("b", &Spec::naming("b", &["tcp://b@127.0.0.1"]));
    let named = |f: &'static str| move |a: SocketAddr| format!("{f}@{a}");
    // Mutual TLS naming both nodes, plus the secret: `Node` both ways.
    let a = node(pki.tls_strict("a", &pki), config(), named("a")).await;
    let b = node(pki.tls_strict("b", &pki), config(), named("b")).await;
    assert_eq!(
        verified(&a, &b).await,
        (PeerVerified::Node, PeerVerified::Node)
    );
    // A listener without client auth cannot verify its dialers: the
    // secret is all it has.
    let mut no_client_auth = pki.tls_strict("b", &pki);
    no_client_auth.set_client_auth(false);
    let open = node(no_client_auth.clone(), config(), named("b")).await;
    assert_eq!(
        verified(&a, &open).await,
        (PeerVerified::Node, PeerVerified::Secret)
    );
    // …or nothing, with authentication turned off too.
    let mut insecure = config();
    insecure
        .set_shared_secret(None)
        .unwrap()
        .set_insecure_no_authentication(true);
    let open_insecure = node(no_client_auth, insecure.clone(), named("b")).await;
    let a_insecure = node(pki.tls_strict("a", &pki), insecure, named("a")).await;
    assert_eq!(
        verified(&a_insecure, &open_insecure).await,
        (PeerVerified::Node, PeerVerified::Unauthenticated)
    );
    // A pinned fingerprint names the exact address: `Node`.
    let a_addr = format!("a@{}", a.local_addr());
    let mut pinned = pki.tls_strict("b", &pki);
    pinned.set_peer_identity(PeerIdentity::Pinned(vec![(a_addr, fingerprint(&der_a))]));
    let pinning = node(pinned, config(), named("b")).await;
    assert_eq!(verified(&a, &pinning).await.1, PeerVerified::Node);
    // `Unchecked` certificates prove no identity: the secret's level.
    let mut unchecked = pki.tls_strict("b", &pki);
    unchecked.set_peer_identity(PeerIdentity::Unchecked);
    let trusting = node(unchecked, config(), named("b")).await;
    assert_eq!(verified(&a, &trusting).await.1, PeerVerified::Secret);
}

/// Loads a rustls certificate chain and key from `pki`'s files for `file`.
fn chain_and_key(pki: &Pki, file: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let chain = CertificateDer::pem_file_iter(pki.path(&format!("{file}.pem")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{file}.key"))).unwrap();
    (chain, key)
}

/// A relay that terminates TLS on both sides: it accepts one TLS
/// connection (as a server with `file`'s certificate), dials `target` over
/// TLS (as a client with the same certificate, trusting `pki`'s CA), and
/// copies the plaintext both ways: the protocol handshake passes through
/// it byte for byte.
async fn tls_relay(pki: &Pki, file: &str, target: SocketAddr) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (chain, key) = chain_and_key(pki, file);
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key.clone_key())
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut inbound = tokio_rustls::TlsAcceptor::from(Arc::new(server))
            .accept(tcp)
            .await
            .expect("the dialer accepts the relay's certificate");
        let tcp = TcpStream::connect(target).await.unwrap();
        let name = ServerName::IpAddress(target.ip().into());
        let mut outbound = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(name, tcp)
            .await
            .expect("the listener accepts the relay's certificate");
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_proof_cannot_be_relayed_between_two_tls_sessions() {
    let pki = Pki::new("ca");
    // Host-only certificates, allowed: the relay's certificate is as good
    // as the nodes' for every TLS check, so only channel binding stops it.
    pki.issue("a", &Spec::node("a"));
    pki.issue("b", &Spec::node("b"));
    pki.issue("relay", &Spec::node("relay"));
    let a = node(pki.tls("a", &pki), config(), |x| x.to_string()).await;
    let b = node(pki.tls("b", &pki), config(), |x| x.to_string()).await;
    // Directly, the two nodes (same secret, same CA) talk.
    round_trip(&a, &b).await;
    let relay = tls_relay(&pki, "relay", b.local_addr()).await;
    let (dialed, accepted) = within("both nodes refuse the relay", async {
        tokio::join!(a.connect(relay), b.accept())
    })
    .await;
    let a_err = dialed.expect_err("the dialer refuses a relayed proof");
    let b_err = accepted
        .expect("open")
        .expect_err("the listener refuses it");
    for err in [&a_err, &b_err.error] {
        assert!(
            matches!(
                err,
                TransportError::Handshake(HandshakeError::SecretMismatch { .. })
            ),
            "{err}"
        );
    }
    assert!(b_err.to_string().contains("relayed"), "{b_err}");
}
