//! TLS 1.3 through rustls (ring provider): configuration from PEM, the
//! [`Tls`] security layer, and the check that binds a peer's certificate to
//! the identity it advertises.
//!
//! This module only builds the stream: rustls runs the TLS handshake
//! (its unbuffered API, on the configuration all connections share), then
//! hands the connection over through its kernel API: the traffic keys, and
//! a `KernelConnection` that derives key updates and stores session
//! tickets. From there the connection runs the same handshake, reader,
//! writer and codec as a plaintext one, on a [`TlsStream`]: our own record
//! layer with the keys rustls negotiated (`tls_read`).
//!
//! What is checked, in order:
//!
//! ```text
//! dialer                                             listener
//!  TLS: server cert chains to the trust store,        TLS: client cert chains to the
//!       is in date, has an IP SAN = the IP dialled         trust store, is in date
//!       (or the DNS name) ─────────────────────────────── (unless client auth is off)
//!  protocol handshake (hello, shared secret proof  ◄──► protocol handshake
//!       bound to this TLS session's exporter)
//!  identity: listener's cert ⊨ node it advertises       identity: dialer's cert ⊨ node it advertises
//! ```
//!
//! How a certificate proves the node a peer advertises (`name@host:port`):
//!
//! ```text
//! URI SANs tcp://name@host:port ─ one equals the advertised node ──► PeerVerified::Node
//!           tcp://name@host      ─ name and host equal, any port  ──► PeerVerified::Node
//!           (any tcp:// URI SAN, none matching)                   ──► refused, naming both
//! no tcp:// URI SAN (host-only) ─ allowed and valid for the host  ──► PeerVerified::Host
//!                               ─ not allowed (the default)       ──► refused
//! PeerIdentity::Pinned: fingerprint pinned for the exact address  ──► PeerVerified::Node
//! ```
//!
//! A host-only certificate lets any holder of a certificate for that host
//! claim every node on it (any name, any port): accept them only where
//! one host runs one node, or all of a host's nodes trust each other.
//!
//! Certificates are loaded when [`Tls::new`] runs, and again on
//! [`Tls::reload`] (or [`Endpoint::reload_tls`]): new connections use the new
//! files, established ones keep theirs.

use std::{
    fmt, io,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use rustls::{
    ClientConfig, RootCertStore, ServerConfig, server::WebPkiClientVerifier, version::TLS13,
};
use rustls::{client::UnbufferedClientConnection, server::UnbufferedServerConnection};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use sha2::{Digest, Sha256};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    Endpoint,
    auth::ChannelBinding,
    config::TransportConfig,
    error::{HandshakeError, TlsError, TransportError},
    handshake::Hello,
    security::{Security, sealed::Sealed},
    shared::PeerVerified,
    tls_read::{TlsStream, handshake},
};

/// How long a failed TLS handshake keeps the socket open to let our alert
/// reach the peer: closing with unread input makes the kernel send a reset,
/// which can overtake the alert and leave the peer with "connection reset"
/// instead of the reason.
const ALERT_LINGER: Duration = Duration::from_millis(500);

/// Where a PEM item comes from.
#[derive(Clone)]
enum Source {
    File(PathBuf),
    Memory(Vec<u8>),
}

impl Source {
    fn name(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Memory(_) => "in-memory PEM".to_owned(),
        }
    }

    fn read(&self, what: &'static str) -> Result<Vec<u8>, TlsError> {
        match self {
            Self::File(p) => std::fs::read(p).map_err(|e| pem_error(what, self, e.to_string())),
            Self::Memory(b) => Ok(b.clone()),
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn pem_error(what: &'static str, source: &Source, reason: String) -> TlsError {
    TlsError::Pem {
        what,
        source_name: source.name(),
        reason,
    }
}

/// How the certificate a peer presented is tied to the identity it
/// advertises in its hello.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerIdentity {
    /// The certificate must name the advertised node: one of its
    /// `tcp://name@host:port` (or `tcp://name@host`, any port) URI SANs
    /// must equal the advertised `name@host:port`
    /// ([`PeerVerified::Node`]). A certificate without such URI SANs
    /// names only a host, and is accepted only with
    /// [`TlsConfig::set_allow_host_only_certificates`] if it is valid for
    /// the host of the advertised address (`sys@10.0.0.5:2552` → IP SAN
    /// `10.0.0.5`; `node1.example:2552` → DNS SAN `node1.example`;
    /// [`PeerVerified::Host`]). The default.
    #[default]
    AdvertisedHost,
    /// The certificate's SHA-256 ([`fingerprint`]) must be the one pinned
    /// for the exact advertised address; an address without a pin is
    /// refused.
    Pinned(Vec<(String, [u8; 32])>),
    /// Trust any certificate the trust store accepts, whatever the peer
    /// advertises. Only for tests or a trust store of one node. The
    /// certificate proves nothing about the node: connections report
    /// [`PeerVerified::Secret`] (or `Unauthenticated` without a secret).
    Unchecked,
}

/// TLS settings: this node's certificate chain and key, the trust store its
/// peers' certificates must chain to, and how identities are checked.
///
/// Every node uses one certificate both as server (when dialled) and as
/// client (when dialling), so it needs both the `serverAuth` and
/// `clientAuth` extended key usages, or none. `transport/examples/gen_certs.rs`
/// makes a development CA and such certificates.
///
/// ```no_run
/// # async fn f() -> Result<(), transport::TransportError> {
/// use transport::{Endpoint, TlsConfig, TransportConfig};
/// let tls = TlsConfig::from_pem_files("certs/node1.pem", "certs/node1.key", "certs/ca.pem");
/// let node = Endpoint::bind_tls("127.0.0.1:2552".parse().unwrap(), TransportConfig::default(), tls).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TlsConfig {
    cert_chain: Source,
    key: Source,
    trust: Source,
    client_auth: bool,
    identity: PeerIdentity,
    allow_host_only: bool,
}

impl TlsConfig {
    /// Reads PEM files: `cert_chain` (this node's certificate first, then
    /// intermediates), `key` (PKCS#8, PKCS#1 RSA or SEC1 EC), `trust` (CA
    /// certificates). The files are read by [`Tls::new`] and by every
    /// reload, not here.
    pub fn from_pem_files(
        cert_chain: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        trust: impl Into<PathBuf>,
    ) -> Self {
        Self::new(
            Source::File(cert_chain.into()),
            Source::File(key.into()),
            Source::File(trust.into()),
        )
    }

    /// As [`from_pem_files`](Self::from_pem_files), from PEM text in memory.
    pub fn from_pem(
        cert_chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
        trust: impl Into<Vec<u8>>,
    ) -> Self {
        Self::new(
            Source::Memory(cert_chain.into()),
            Source::Memory(key.into()),
            Source::Memory(trust.into()),
        )
    }

    fn new(cert_chain: Source, key: Source, trust: Source) -> Self {
        Self {
            cert_chain,
            key,
            trust,
            client_auth: true,
            identity: PeerIdentity::default(),
            allow_host_only: false,
        }
    }

    /// Whether a peer certificate that names no node (no `tcp://` URI SAN)
    /// but is valid for the host the peer advertises is accepted. Default
    /// off. On, **any holder of a certificate for a host can claim every
    /// node on that host** (any name, any port); such connections report
    /// [`PeerVerified::Host`]. For certificates issued before node URIs,
    /// or one node per host.
    pub fn set_allow_host_only_certificates(&mut self, allow: bool) -> &mut Self {
        self.allow_host_only = allow;
        self
    }

    /// Whether a listener requires dialers to present a certificate that
    /// chains to the trust store (mutual TLS). Default on. Off, the
    /// listener cannot check who dialled it (its identity check is skipped
    /// for dialers without a certificate); the dialer still checks the
    /// listener.
    pub fn set_client_auth(&mut self, required: bool) -> &mut Self {
        self.client_auth = required;
        self
    }

    /// How a peer's certificate is tied to its advertised address. Default
    /// [`PeerIdentity::AdvertisedHost`].
    pub fn set_peer_identity(&mut self, identity: PeerIdentity) -> &mut Self {
        self.identity = identity;
        self
    }

    /// Reads the PEM sources and builds the rustls configurations.
    fn load(&self) -> Result<Loaded, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certs(&self.cert_chain, "certificate chain")?;
        let key_pem = self.key.read("private key")?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| pem_error("private key", &self.key, pem_reason(&e, "PRIVATE KEY")))?;
        let mut roots = RootCertStore::empty();
        for c in certs(&self.trust, "trust store")? {
            roots.add(c).map_err(config_error)?;
        }
        let roots = Arc::new(roots);
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&TLS13])
            .map_err(config_error)?;
        let server = if self.client_auth {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
            server.with_client_cert_verifier(verifier)
        } else {
            server.with_no_client_auth()
        }
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(config_error)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&TLS13])
            .map_err(config_error)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(config_error)?;
        // Each connection's record layer takes its keys out of rustls
        // after the TLS handshake (`tls_read`): the kernel API requires it.
        let (mut server, mut client) = (server, client);
        server.enable_secret_extraction = true;
        client.enable_secret_extraction = true;
        Ok(Loaded {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

fn config_error(e: rustls::Error) -> TlsError {
    TlsError::Config(e.to_string())
}

fn pem_reason(e: &rustls_pki_types::pem::Error, item: &str) -> String {
    match e {
        rustls_pki_types::pem::Error::NoItemsFound => format!("no {item} section found"),
        e => format!("{e:?}"),
    }
}

fn certs(source: &Source, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = source.read(what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, source, pem_reason(&e, "CERTIFICATE")))?;
    if certs.is_empty() {
        return Err(pem_error(
            what,
            source,
            "no CERTIFICATE section found".into(),
        ));
    }
    Ok(certs)
}

/// The SHA-256 of a DER certificate, as pinned by [`PeerIdentity::Pinned`]
/// (the same as `openssl x509 -noout -fingerprint -sha256`).
pub fn fingerprint(cert_der: &[u8]) -> [u8; 32] {
    Sha256::digest(cert_der).into()
}

/// The rustls configurations built from one load of the PEM sources.
struct Loaded {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// The TLS security layer of an [`Endpoint<Tls>`](crate::Endpoint): TLS 1.3
/// on every connection, mutual authentication by default, the peer's
/// certificate bound to its advertised identity.
pub struct Tls {
    config: TlsConfig,
    current: RwLock<Arc<Loaded>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("config", &self.config).finish()
    }
}

impl Tls {
    /// Loads the certificates and keys `config` names.
    ///
    /// # Errors
    /// A PEM source that cannot be read or parsed, or a configuration
    /// rustls refuses (a key that does not match the certificate).
    pub fn new(config: TlsConfig) -> Result<Self, TlsError> {
        let loaded = config.load()?;
        Ok(Self {
            config,
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    /// Reads the PEM sources again (files may have been replaced, e.g.
    /// renewed certificates). New connections use what was read;
    /// established connections are not affected. On error the previous
    /// certificates stay in use.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = Arc::new(self.config.load()?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = loaded;
        tracing::info!(cert = %self.config.cert_chain.name(), "tls certificates reloaded");
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &TlsConfig {
        &self.config
    }

    fn loaded(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Checks that the end-entity certificate in `certs` proves the identity
    /// `peer` advertises, and says how strongly.
    fn check(
        &self,
        certs: Option<&[CertificateDer<'static>]>,
        peer: &Hello,
    ) -> Result<PeerVerified, HandshakeError> {
        let refuse = |reason: String| HandshakeError::Identity {
            addr: peer.addr.clone(),
            reason,
        };
        if self.config.identity == PeerIdentity::Unchecked {
            return Ok(PeerVerified::Unauthenticated);
        }
        let Some(cert) = certs.and_then(|c| c.first()) else {
            return Err(refuse("the peer presented no certificate".into()));
        };
        match &self.config.identity {
            PeerIdentity::AdvertisedHost => {
                let uris = node_uris(cert)
                    .ok_or_else(|| refuse("certificate extensions do not parse".into()))?;
                if !uris.is_empty() {
                    let advertised = NodeName::parse(&peer.addr)
                        .ok_or_else(|| refuse("the address is not name@host:port".into()))?;
                    return if uris
                        .iter()
                        .filter_map(|u| NodeName::parse(u.strip_prefix(NODE_URI_SCHEME)?))
                        .any(|n| n.proves(&advertised))
                    {
                        Ok(PeerVerified::Node)
                    } else {
                        Err(refuse(format!(
                            "the certificate names node(s) {} (URI SANs), not {}",
                            uris.join(", "),
                            peer.addr
                        )))
                    };
                }
                if !self.config.allow_host_only {
                    return Err(refuse(
                        "the certificate names no node (no tcp://name@host:port URI SAN), only hosts, and host-only certificates are not allowed (issue one naming the node, or TlsConfig::set_allow_host_only_certificates)".into(),
                    ));
                }
                let host = advertised_host(&peer.addr)
                    .ok_or_else(|| refuse("the address has no host part".into()))?;
                let name = ServerName::try_from(host).map_err(|_| {
                    refuse(format!("{host:?} is neither a DNS name nor an IP address"))
                })?;
                let ee = webpki::EndEntityCert::try_from(cert)
                    .map_err(|e| refuse(format!("certificate does not parse: {e}")))?;
                ee.verify_is_valid_for_subject_name(&name)
                    .map_err(|e| refuse(format!("certificate is not valid for {host} ({e})")))?;
                Ok(PeerVerified::Host)
            }
            PeerIdentity::Pinned(pins) => {
                let got = fingerprint(cert);
                let mut pinned = pins.iter().filter(|(a, _)| *a == peer.addr).peekable();
                if pinned.peek().is_none() {
                    return Err(refuse("no certificate fingerprint is pinned for it".into()));
                }
                if pinned.any(|(_, fp)| *fp == got) {
                    Ok(PeerVerified::Node)
                } else {
                    Err(refuse(format!(
                        "certificate SHA-256 {} is not the pinned one",
                        hex(&got)
                    )))
                }
            }
            PeerIdentity::Unchecked => Ok(PeerVerified::Unauthenticated),
        }
    }
}

/// The scheme of a URI SAN that names a node.
const NODE_URI_SCHEME: &str = "tcp://";

/// A node as named by a certificate URI (`name@host:port`, `name@host`)
/// or advertised in a hello (`name@host:port`, `host:port`).
#[derive(Debug, PartialEq, Eq)]
struct NodeName<'a> {
    name: Option<&'a str>,
    host: &'a str,
    port: Option<u16>,
}

impl<'a> NodeName<'a> {
    /// `[name@]host[:port]`, the host possibly a bracketed IPv6 address.
    fn parse(s: &'a str) -> Option<Self> {
        let (name, host_port) = match s.rsplit_once('@') {
            Some((n, h)) => (Some(n), h),
            None => (None, s),
        };
        let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
            let (host, rest) = v6.split_once(']')?;
            let port = match rest {
                "" => None,
                p => Some(p.strip_prefix(':')?.parse().ok()?),
            };
            (host, port)
        } else {
            match host_port.rsplit_once(':') {
                Some((h, p)) => (h, Some(p.parse().ok()?)),
                None => (host_port, None),
            }
        };
        (!host.is_empty() && name.is_none_or(|n| !n.is_empty())).then_some(Self {
            name,
            host,
            port,
        })
    }

    /// Whether this certificate-named node covers `advertised`: same name
    /// and host, and the same port unless this one names none.
    fn proves(&self, advertised: &NodeName<'_>) -> bool {
        self.name == advertised.name
            && self.host.eq_ignore_ascii_case(advertised.host)
            && (self.port.is_none() || self.port == advertised.port)
    }
}

/// The `tcp://` URI SANs of a DER certificate; `None` if its extensions
/// cannot be parsed. A minimal DER walk over what webpki has already
/// validated: tbsCertificate → `[3]` extensions → subjectAltName (2.5.29.17)
/// → `uniformResourceIdentifier` (`[6]` IA5String) names.
fn node_uris(cert_der: &[u8]) -> Option<Vec<String>> {
    /// The DER encoding of OID 2.5.29.17, subjectAltName.
    const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];
    let (_, cert, _) = der_tlv(cert_der, 0x30)?;
    let (_, mut tbs, _) = der_tlv(cert, 0x30)?;
    let mut uris = Vec::new();
    while !tbs.is_empty() {
        let (tag, value, rest) = der_any(tbs)?;
        tbs = rest;
        if tag != 0xa3 {
            continue;
        }
        let (_, mut exts, _) = der_tlv(value, 0x30)?;
        while !exts.is_empty() {
            let (_, ext, rest) = der_tlv(exts, 0x30)?;
            exts = rest;
            let (_, oid, mut ext) = der_tlv(ext, 0x06)?;
            if oid != SAN_OID {
                continue;
            }
            if ext.first() == Some(&0x01) {
                ext = der_any(ext)?.2; // the `critical` flag
            }
            let (_, octets, _) = der_tlv(ext, 0x04)?;
            let (_, mut names, _) = der_tlv(octets, 0x30)?;
            while !names.is_empty() {
                let (tag, name, rest) = der_any(names)?;
                names = rest;
                if tag == 0x86 {
                    let uri = std::str::from_utf8(name).ok()?;
                    if uri.starts_with(NODE_URI_SCHEME) {
                        uris.push(uri.to_owned());
                    }
                }
            }
        }
    }
    Some(uris)
}

/// One DER element with tag `tag`: `(tag, contents, rest)`.
fn der_tlv(input: &[u8], tag: u8) -> Option<(u8, &[u8], &[u8])> {
    der_any(input).filter(|(t, _, _)| *t == tag)
}

/// One DER element (single-byte tags, definite lengths up to 4 bytes):
/// `(tag, contents, rest)`; `None` if truncated.
fn der_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// What the shared-secret proofs are bound to.
fn export(stream: &TlsStream) -> Option<ChannelBinding> {
    Some(stream.channel_binding())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host of an advertised address: `name@host:port`, `host:port` or
/// `[v6]:port` → `host` / `v6`.
fn advertised_host(addr: &str) -> Option<&str> {
    let host_port = addr.rsplit_once('@').map_or(addr, |(_, h)| h);
    let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// Turns a failed TLS handshake into an error that says why, naming the
/// likely cause when the peer does not speak TLS at all.
fn handshake_error(peer: SocketAddr, source: io::Error) -> TlsError {
    let inner = source
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    let reason = match inner {
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)) => format!(
            "the peer does not speak TLS (its first bytes are not a TLS record: a plaintext node?): {source}"
        ),
        Some(e) => e.to_string(),
        None if source.kind() == io::ErrorKind::UnexpectedEof => {
            "the peer closed the connection during the TLS handshake (it may have refused our certificate, or not speak TLS)".to_owned()
        }
        None => source.to_string(),
    };
    TlsError::Handshake {
        peer,
        reason,
        source,
    }
}

/// Lets our alert reach the peer before the socket closes (see
/// [`ALERT_LINGER`]), in the background.
fn linger(mut tcp: TcpStream) {
    tokio::spawn(async move {
        let _ = tcp.shutdown().await;
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(ALERT_LINGER, async {
            while let Ok(n) = tcp.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    });
}

// The seal lives here, not in `security`, so that `security` does not
// import this module back.
impl Sealed for Tls {}

impl Security for Tls {
    type Accepted = TlsStream;
    type Dialed = TlsStream;

    const PENDING_HANDSHAKE_COST: usize = crate::PENDING_TLS_HANDSHAKE_COST;

    async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> Result<Self::Accepted, TransportError> {
        // The shared configuration: rustls hands the keys over itself.
        let conn = UnbufferedServerConnection::new(self.loaded().server.clone())
            .map_err(|e| handshake_error(peer, io::Error::new(io::ErrorKind::InvalidData, e)))?;
        match handshake(conn, tcp).await {
            Ok(s) => Ok(s.into_stream(TcpStream::into_split)),
            Err((e, tcp)) => {
                linger(tcp);
                Err(handshake_error(peer, e).into())
            }
        }
    }

    async fn connect(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
    ) -> Result<Self::Dialed, TransportError> {
        // The server's certificate must name the IP address we dialled.
        let name = ServerName::IpAddress(addr.ip().into());
        let conn = UnbufferedClientConnection::new(self.loaded().client.clone(), name)
            .map_err(|e| handshake_error(addr, io::Error::new(io::ErrorKind::InvalidData, e)))?;
        match handshake(conn, tcp).await {
            Ok(s) => Ok(s.into_stream(TcpStream::into_split)),
            Err((e, tcp)) => {
                linger(tcp);
                Err(handshake_error(addr, e).into())
            }
        }
    }

    fn verify_accepted(
        &self,
        stream: &Self::Accepted,
        peer: &Hello,
    ) -> Result<PeerVerified, HandshakeError> {
        let certs = stream.peer_certificates();
        if certs.is_none() && !self.config.client_auth {
            // Nothing to check: this listener does not ask dialers for one,
            // so TLS proves nothing about them.
            return Ok(PeerVerified::Unauthenticated);
        }
        self.check(certs, peer)
    }

    fn verify_dialed(
        &self,
        stream: &Self::Dialed,
        peer: &Hello,
    ) -> Result<PeerVerified, HandshakeError> {
        self.check(stream.peer_certificates(), peer)
    }

    fn channel_binding_accepted(&self, stream: &Self::Accepted) -> Option<ChannelBinding> {
        export(stream)
    }

    fn channel_binding_dialed(&self, stream: &Self::Dialed) -> Option<ChannelBinding> {
        export(stream)
    }

    fn authenticates_dialers(&self) -> bool {
        self.config.client_auth && self.config.identity != PeerIdentity::Unchecked
    }

    fn handshake_io_error(&self, peer: SocketAddr, error: io::Error) -> TransportError {
        handshake_error(peer, error).into()
    }
}

impl Endpoint<Tls> {
    /// Binds a TLS listener on `addr`, advertising the bound address; all
    /// its connections, inbound and outbound, run TLS 1.3 with `tls`.
    ///
    /// For another advertised form (`name@host:port`) use
    /// [`Endpoint::bind_secure`] with [`Tls::new`].
    ///
    /// # Errors
    /// Certificates or keys that cannot be loaded, invalid config, or the
    /// address cannot be bound.
    pub async fn bind_tls(
        addr: SocketAddr,
        config: TransportConfig,
        tls: TlsConfig,
    ) -> Result<Self, TransportError> {
        let tls = Tls::new(tls)?;
        Self::bind_secure(addr, config, tls, |a| a.to_string()).await
    }

    /// Re-reads the certificate, key and trust store files; see
    /// [`Tls::reload`].
    ///
    /// # Errors
    /// As [`Tls::reload`]; the previous certificates stay in use.
    pub fn reload_tls(&self) -> Result<(), TlsError> {
        self.security().reload()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_host_forms() {
        assert_eq!(advertised_host("127.0.0.1:2552"), Some("127.0.0.1"));
        assert_eq!(advertised_host("sys@10.0.0.5:2552"), Some("10.0.0.5"));
        assert_eq!(advertised_host("node1.example:1"), Some("node1.example"));
        assert_eq!(advertised_host("[::1]:2552"), Some("::1"));
        assert_eq!(advertised_host("sys@:2552"), None);
    }

    #[test]
    fn missing_pem_names_the_file_and_item() {
        let cfg = TlsConfig::from_pem("not pem", "", "");
        let err = Tls::new(cfg).unwrap_err().to_string();
        assert_eq!(
            err,
            "certificate chain from in-memory PEM: no CERTIFICATE section found"
        );
        let cfg = TlsConfig::from_pem_files("/nonexistent/x.pem", "/k", "/t");
        let err = Tls::new(cfg).unwrap_err().to_string();
        assert!(
            err.starts_with("certificate chain from /nonexistent/x.pem: "),
            "{err}"
        );
    }

    #[test]
    fn node_names_match_name_host_and_port() {
        let n = |s| NodeName::parse(s).unwrap();
        let adv = n("a@127.0.0.1:4242");
        assert!(n("a@127.0.0.1:4242").proves(&adv));
        assert!(n("a@127.0.0.1").proves(&adv), "no port: any port");
        assert!(!n("a@127.0.0.1:4243").proves(&adv));
        assert!(!n("b@127.0.0.1:4242").proves(&adv));
        assert!(!n("a@127.0.0.2").proves(&adv));
        assert!(!n("127.0.0.1:4242").proves(&adv), "a name is required");
        assert!(n("127.0.0.1:4242").proves(&n("127.0.0.1:4242")));
        assert!(n("a@LOCALHOST").proves(&n("a@localhost:1")));
        assert_eq!(
            NodeName::parse("s@[::1]:2552"),
            Some(NodeName {
                name: Some("s"),
                host: "::1",
                port: Some(2552)
            })
        );
        for bad in ["a@", "@h:1", "a@h:port", "a@[::1", ""] {
            assert_eq!(NodeName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn uri_sans_are_read_from_the_certificate() {
        let mut p = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        p.subject_alt_names.push(rcgen::SanType::URI(
            "tcp://a@127.0.0.1:1".try_into().unwrap(),
        ));
        p.subject_alt_names
            .push(rcgen::SanType::URI("https://x".try_into().unwrap()));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(
            node_uris(cert.der()),
            Some(vec!["tcp://a@127.0.0.1:1".to_owned()])
        );
        let plain = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(node_uris(plain.der()), Some(vec![]));
        // Truncated input never panics.
        let der = cert.der().to_vec();
        for cut in 0..der.len() {
            let _ = node_uris(&der[..cut]);
        }
    }

    #[test]
    fn fingerprint_is_sha256() {
        assert_eq!(
            hex(&fingerprint(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
