//! The stream's tests and the fixtures the halves' tests share: TLS 1.3
//! handshakes over an in-memory pipe (ours against rustls's buffered
//! client, or ours on both ends) for every suite we offer, and reads that
//! lend chunks as the reader task does.

use std::{io, net::Ipv4Addr, sync::Arc, sync::atomic::Ordering, time::Duration};

use rustls::{
    ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite,
    client::{
        ClientSessionMemoryCache, ClientSessionStore, Resumption, UnbufferedClientConnection,
    },
    crypto::ring as provider,
    pki_types::{PrivateKeyDer, ServerName},
    server::UnbufferedServerConnection,
    version::TLS13,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio_rustls::TlsConnector;

use super::{TlsReadHalf, TlsStream, TlsWriteHalf, handshake};
use crate::{reader::ReadIo, tls_record::MAX_PLAINTEXT};

pub(super) const LIMIT: Duration = Duration::from_secs(5);

pub(super) type Ours = TlsStream<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

/// Configurations for one self-signed certificate with `suite`; the
/// client keeps its tickets in `store`.
pub(super) fn configs(
    suite: SupportedCipherSuite,
    store: Arc<dyn ClientSessionStore>,
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut provider = provider::default_provider();
    provider.cipher_suites = vec![suite];
    let provider = Arc::new(provider);
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.resumption = Resumption::store(store);
    server.enable_secret_extraction = true;
    client.enable_secret_extraction = true;
    (Arc::new(server), Arc::new(client))
}

pub(super) fn name() -> ServerName<'static> {
    ServerName::IpAddress(Ipv4Addr::LOCALHOST.into())
}

pub(super) fn memory() -> Arc<dyn ClientSessionStore> {
    Arc::new(ClientSessionMemoryCache::new(8))
}

/// A TLS 1.3 handshake over an in-memory pipe with `suite`: our
/// server, a (buffered) rustls client.
pub(super) async fn with_rustls(
    suite: SupportedCipherSuite,
) -> (Ours, tokio_rustls::client::TlsStream<DuplexStream>) {
    let (server, client) = configs(suite, memory());
    let (a, b) = tokio::io::duplex(1 << 20);
    let (s, c) = tokio::join!(
        handshake(UnbufferedServerConnection::new(server).unwrap(), a),
        TlsConnector::from(client).connect(name(), b),
    );
    let s = s.map_err(|(e, _)| e).unwrap();
    (s.into_stream(tokio::io::split), c.unwrap())
}

/// A TLS 1.3 handshake over an in-memory pipe, ours on both ends:
/// (server, client).
pub(super) async fn ours(server: Arc<ServerConfig>, client: Arc<ClientConfig>) -> (Ours, Ours) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (s, c) = tokio::join!(
        handshake(UnbufferedServerConnection::new(server).unwrap(), a),
        handshake(UnbufferedClientConnection::new(client, name()).unwrap(), b),
    );
    let s = s.map_err(|(e, _)| e).unwrap();
    let c = c.map_err(|(e, _)| e).unwrap();
    (
        s.into_stream(tokio::io::split),
        c.into_stream(tokio::io::split),
    )
}

pub(super) async fn pair(suite: SupportedCipherSuite) -> (Ours, Ours) {
    let (server, client) = configs(suite, memory());
    ours(server, client).await
}

pub(super) type Halves = (
    TlsReadHalf<ReadHalf<DuplexStream>>,
    TlsWriteHalf<WriteHalf<DuplexStream>>,
);

pub(super) fn halves(s: Ours) -> Halves {
    (s.rd, s.wr)
}

/// rustls sends a key update (update_requested).
pub(super) fn refresh_keys(s: &mut tokio_rustls::client::TlsStream<DuplexStream>) {
    s.get_mut().1.refresh_traffic_keys().unwrap();
}

pub(super) fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

pub(super) async fn read_n(r: &mut (impl AsyncRead + Unpin), n: usize) -> Vec<u8> {
    let mut got = vec![0; n];
    tokio::time::timeout(LIMIT, r.read_exact(&mut got))
        .await
        .expect("read in time")
        .unwrap();
    got
}

/// Reads by lending chunks, as the reader task does.
pub(super) async fn chunks_n(r: &mut TlsReadHalf<ReadHalf<DuplexStream>>, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < n {
        let chunk = tokio::time::timeout(
            LIMIT,
            std::future::poll_fn(|cx| {
                r.poll_chunk(cx, |c| {
                    c.iter()
                        .inspect(|p| assert!(p.len() <= MAX_PLAINTEXT))
                        .fold(Vec::new(), |mut v, p| {
                            v.extend_from_slice(p);
                            v
                        })
                })
            }),
        )
        .await
        .expect("chunk in time")
        .unwrap()
        .expect("not the end");
        got.extend(chunk);
    }
    got
}

pub(super) const SUITES: [SupportedCipherSuite; 3] = [
    provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
    provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
    provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
];

#[tokio::test]
async fn records_interoperate_with_rustls_both_ways_through_key_updates() {
    for suite in SUITES {
        let (server, mut client) = with_rustls(suite).await;
        let (mut rd, mut wr) = halves(server);
        // rustls → our reader, several records' worth.
        let big = payload(100_000, 1);
        client.write_all(&big).await.unwrap();
        client.flush().await.unwrap();
        assert_eq!(chunks_n(&mut rd, big.len()).await, big, "{suite:?}");
        // Our writer → rustls, in one write of several records.
        let big = payload(70_000, 2);
        assert_eq!(wr.write(&big).await.unwrap(), big.len());
        wr.flush().await.unwrap();
        assert_eq!(read_n(&mut client, big.len()).await, big);
        // rustls updates its keys and asks for ours: our reader
        // follows, our writer answers before its next record.
        refresh_keys(&mut client);
        client
            .write_all(b"after rustls's key update")
            .await
            .unwrap();
        client.flush().await.unwrap();
        assert_eq!(read_n(&mut rd, 25).await, b"after rustls's key update");
        assert_eq!(rd.rx.seq(), 1, "rx keys were updated");
        assert!(wr.update.load(Ordering::Relaxed), "rustls asked for ours");
        wr.write_all(b"one").await.unwrap();
        wr.flush().await.unwrap();
        assert_eq!(read_n(&mut client, 3).await, b"one");
        assert_eq!(wr.tx.seq(), 1, "tx keys were updated");
        // Our key reaches its record limit: rustls follows our update.
        wr.update_at = 2;
        wr.write_all(b"two").await.unwrap();
        wr.write_all(b"three").await.unwrap();
        wr.flush().await.unwrap();
        assert_eq!(read_n(&mut client, 8).await, b"twothree");
        assert_eq!(wr.tx.seq(), 1, "tx keys were updated");
    }
}

#[tokio::test]
async fn a_peer_asking_for_a_key_update_gets_one_before_our_next_record() {
    let (server, client) = pair(SUITES[0]).await;
    let (mut srd, mut swr) = halves(server);
    let (mut crd, mut cwr) = halves(client);
    // update_requested.
    cwr.key_update(true).unwrap();
    cwr.write_all(b"ping").await.unwrap();
    cwr.flush().await.unwrap();
    assert_eq!(read_n(&mut srd, 4).await, b"ping");
    swr.write_all(b"pong").await.unwrap();
    swr.flush().await.unwrap();
    assert_eq!(read_n(&mut crd, 4).await, b"pong");
    assert_eq!(swr.tx.seq(), 1, "the server updated its keys");
    assert!(!swr.update.load(Ordering::Relaxed));
}

#[tokio::test]
async fn close_notify_ends_the_stream_both_ways_and_a_bare_eof_is_an_error() {
    let (server, mut client) = with_rustls(SUITES[0]).await;
    let (mut rd, mut wr) = halves(server);
    wr.write_all(b"last").await.unwrap();
    wr.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(LIMIT, client.read_to_end(&mut got))
        .await
        .unwrap()
        .expect("rustls saw close_notify, not a truncation");
    assert_eq!(got, b"last");
    client.shutdown().await.unwrap();
    let end = std::future::poll_fn(|cx| rd.poll_chunk(cx, |c| c.len())).await;
    assert!(matches!(end, Ok(None)), "{end:?}");

    // The peer's TCP ends without close_notify: a truncation.
    let (server, client) = with_rustls(SUITES[0]).await;
    let (mut rd, _wr) = halves(server);
    let (mut raw, _) = client.into_inner();
    raw.shutdown().await.unwrap();
    let err = std::future::poll_fn(|cx| rd.poll_chunk(cx, |c| c.len()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert!(
        err.to_string().contains("without sending TLS close_notify"),
        "{err}"
    );
}
