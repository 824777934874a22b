//! Error types: one enum per concern, all `#[non_exhaustive]`.
//!
//! The errors of a [`Sender`](crate::Sender) ([`SendFrameError`](crate::SendFrameError),
//! [`TrySendFrameError`](crate::TrySendFrameError)) live with it in `sender`: they name
//! [`Frame`](crate::Frame), and this module stays below the codec that
//! uses it.

use std::{fmt, io, net::SocketAddr, path::PathBuf, time::Duration};

/// Where a node's shared secret came from, named in every error about it
/// so that an operator knows which secret to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretSource {
    /// Set explicitly with
    /// [`TransportConfig::set_shared_secret`](crate::TransportConfig::set_shared_secret).
    Configured,
    /// The [`COOKIE_ENV`](crate::COOKIE_ENV) (`ACTORS_COOKIE`) environment variable.
    Environment,
    /// A cookie file (read, or created on first start).
    CookieFile(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Configured => f.write_str("configured with set_shared_secret"),
            Self::Environment => f.write_str("the ACTORS_COOKIE environment variable"),
            Self::CookieFile(p) => write!(f, "cookie file {}", p.display()),
        }
    }
}

impl SecretSource {
    /// What to do so that two nodes share this secret.
    pub(crate) fn remedy(&self) -> &'static str {
        match self {
            Self::Configured => {
                "give both nodes the same secret (set_shared_secret, with the old one as previous during a rotation)"
            }
            Self::Environment => "give both nodes the same ACTORS_COOKIE value",
            Self::CookieFile(_) => {
                "copy this cookie file to the other node's user (or set the same ACTORS_COOKIE on both)"
            }
        }
    }
}

/// A violation of the framing rules. The stream cannot be resynchronised
/// after one, so the connection that produced it is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix is above the configured maximum. Raise
    /// [`TransportConfig::set_max_frame_size`](crate::TransportConfig::set_max_frame_size)
    /// on both nodes if such frames are legitimate.
    #[error("frame length {len} exceeds limit {max}")]
    TooLarge {
        /// The length the frame claims (or would have).
        len: u64,
        /// The configured maximum.
        max: usize,
    },
    /// The kind byte is not one this protocol version assigns; the peer
    /// speaks another protocol or is corrupt.
    #[error("unknown frame kind {kind:#04x}")]
    UnknownKind {
        /// The byte received.
        kind: u8,
    },
    /// A known frame kind arrived where the protocol does not allow it: a
    /// hello after the handshake, or application frames after the peer's
    /// Close. The peer has a bug.
    #[error("unexpected frame kind {kind:#04x} for the connection state")]
    Unexpected {
        /// The kind byte received.
        kind: u8,
    },
    /// A control frame (a heartbeat or its ack) is longer than the small
    /// fixed bound of its kind
    /// ([`MAX_HEARTBEAT_BODY`](crate::MAX_HEARTBEAT_BODY)); refused
    /// from its header, before its body is buffered. The peer is broken or
    /// hostile: heartbeats carry a sequence number, not data.
    #[error("control frame {kind:#04x} body length {len} exceeds its limit {max}")]
    ControlTooLarge {
        /// The kind byte.
        kind: u8,
        /// The length the frame claims.
        len: u64,
        /// The kind's limit.
        max: usize,
    },
    /// The stream ended inside a frame; the peer crashed or was cut off.
    #[error("stream ended inside a frame: have {have} bytes, frame needs {need}")]
    Truncated {
        /// Bytes received of the last frame.
        have: usize,
        /// Bytes the frame needed (header included).
        need: u64,
    },
}

/// Why a handshake failed. Both sides of a mismatch report it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The first bytes were not this protocol's magic: the peer speaks
    /// something else (HTTP, TLS, a port scanner). Check the address.
    #[error("bad protocol magic {got:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// The four bytes received.
        got: [u8; 4],
        /// This protocol's magic.
        expected: [u8; 4],
    },
    /// The peer runs another protocol version; upgrade one of the nodes.
    #[error("protocol version mismatch: local {local}, peer {peer}")]
    VersionMismatch {
        /// Our version.
        local: u16,
        /// The peer's version.
        peer: u16,
    },
    /// The peer did not finish its handshake in time (it is slow, stuck or
    /// hostile). Raise the handshake timeout if the network is slow.
    #[error("handshake did not complete within {timeout:?} (received {received} bytes)")]
    Timeout {
        /// The configured handshake timeout.
        timeout: Duration,
        /// Bytes of the peer's handshake received before the deadline.
        received: usize,
    },
    /// The peer sent another frame where its hello belonged.
    #[error("expected a hello frame, got {kind:#04x}")]
    UnexpectedFrame {
        /// The kind byte received.
        kind: u8,
    },
    /// The hello frame's body does not parse.
    #[error("malformed hello: {reason}")]
    Malformed {
        /// What was wrong.
        reason: &'static str,
    },
    /// The peer's hello frame is larger than a hello can be.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the connection before completing the handshake.
    #[error("peer closed the connection during the handshake (received {received} bytes)")]
    Eof {
        /// Bytes of the peer's handshake received.
        received: usize,
    },
    /// This node requires a shared secret and the peer's preface did not
    /// offer to prove one: the peer runs with authentication explicitly
    /// turned off
    /// ([`TransportConfig::set_insecure_no_authentication`](crate::TransportConfig::set_insecure_no_authentication)),
    /// or is an older build. Turn authentication on there (the default:
    /// same cookie file, `ACTORS_COOKIE` or `set_shared_secret`).
    #[error(
        "shared secret required: the peer did not offer shared-secret authentication (it runs with set_insecure_no_authentication?); give it our secret"
    )]
    PeerUnauthenticated,
    /// The peer requires a shared secret and this node runs without
    /// authentication (explicitly turned off). Remove
    /// `set_insecure_no_authentication(true)` and give this node the
    /// peer's secret.
    #[error(
        "the peer requires a shared secret and this node runs with set_insecure_no_authentication; give this node the peer's secret"
    )]
    SecretRequired,
    /// None of the peer's proofs matches any of our secrets: the nodes hold
    /// different secrets (most often: different cookie files, or
    /// `ACTORS_COOKIE` set on one node only), or the handshake was recorded
    /// from another connection and replayed, or relayed between two TLS
    /// sessions. The message names where our secret came from; give both
    /// nodes the same one. During a rotation give every node the new
    /// secret with the old one as previous before removing the old one
    /// anywhere.
    #[error(
        "shared secret mismatch: the peer holds a different secret than ours (ours is from {ours}; none of the peer's {proofs} proof(s) matches, or the handshake was replayed or relayed); {remedy}",
        remedy = ours.remedy()
    )]
    SecretMismatch {
        /// Proofs the peer sent (one per secret it holds).
        proofs: usize,
        /// Where our secret came from.
        ours: SecretSource,
    },
    /// The peer introduced itself with this node's own uid: our handshake is
    /// being reflected back at us, or the node dialled itself.
    #[error("peer claims this node's own uid {uid:#018x} (reflected handshake)")]
    Reflected {
        /// The uid, ours.
        uid: u64,
    },
    /// The peer's TLS certificate does not prove the identity it advertises
    /// in its hello: its `tcp://name@host:port` URI SANs name other nodes,
    /// or it names no node and host-only certificates are not allowed, or
    /// it is not valid for the advertised host, or its fingerprint is not
    /// pinned. Issue the node a certificate with a URI SAN for the node it
    /// advertises (`transport/examples/gen_certs.rs`), allow host-only
    /// certificates
    /// ([`TlsConfig::set_allow_host_only_certificates`](crate::TlsConfig::set_allow_host_only_certificates)),
    /// or update the pinned fingerprint.
    #[error("peer certificate does not match its advertised address {addr:?}: {reason}")]
    Identity {
        /// The address the peer advertised.
        addr: String,
        /// Why the certificate does not match.
        reason: String,
    },
}

/// An invalid setting, refused by a setter of
/// [`TransportConfig`](crate::TransportConfig) or
/// [`HeartbeatConfig`](crate::HeartbeatConfig) or by
/// [`Backoff::new`](crate::Backoff::new) (the value is then not applied);
/// or, at bind, a shared secret that cannot be resolved or an advertised
/// address too long for the handshake.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A size or duration that must be positive is zero.
    #[error("{name} must be greater than zero")]
    Zero {
        /// The setting's name.
        name: &'static str,
    },
    /// The maximum frame size does not fit the 32-bit length prefix.
    #[error("max frame size {value} exceeds the protocol limit {limit}")]
    FrameSizeTooLarge {
        /// The configured value.
        value: usize,
        /// `u32::MAX`.
        limit: u64,
    },
    /// A shared secret is shorter than
    /// [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN); generate a random one
    /// (`openssl rand -hex 32`).
    #[error("shared secret is {len} bytes, at least {min} required")]
    SecretTooShort {
        /// Its length.
        len: usize,
        /// The minimum.
        min: usize,
    },
    /// No shared secret is configured, authentication is not turned off,
    /// `ACTORS_COOKIE` is unset and there is no home directory for the
    /// default cookie file. Set one of them.
    #[error(
        "no shared secret: set ACTORS_COOKIE, TransportConfig::set_cookie_file or set_shared_secret (HOME is not set, so there is no default cookie file)"
    )]
    NoSecret,
    /// The cookie file could not be read or created, is not a regular
    /// file, or is empty. Fix the path or its directory's permissions, or
    /// delete an empty file to have a new cookie generated.
    #[error("cookie file {}: {reason}", path.display())]
    CookieFile {
        /// The cookie file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The cookie file can be read or written by group or others: anyone
    /// who can read it can join this user's nodes. Restrict it with
    /// `chmod 600 PATH`.
    #[error(
        "cookie file {} is accessible by group or others (mode {mode:03o}); anyone who can read it can join your nodes: run chmod 600 {}",
        path.display(),
        path.display()
    )]
    CookiePermissions {
        /// The cookie file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The advertised address is longer than the hello frame allows.
    #[error("advertised address is {len} bytes, limit {limit}")]
    AddressTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A duration below the least its setting takes (a heartbeat interval
    /// or deviation floor under 1 ms); use at least `min`.
    #[error("{name} must be at least {min:?}, found {value:?}")]
    DurationTooShort {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: Duration,
        /// The least it takes.
        min: Duration,
    },
    /// A count below the least its setting takes; use at least `min`.
    #[error("{name} must be at least {min}, found {value}")]
    TooSmall {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The least it takes.
        min: u64,
    },
    /// A number outside its setting's range, or not a number (NaN); the
    /// message names the range.
    #[error("{name} must be {range}, found {value}")]
    OutOfRange {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The values it takes, in words.
        range: &'static str,
    },
    /// A reconnect backoff whose longest delay is below its first; raise
    /// `max` or lower `min`.
    #[error("backoff max {max:?} is below min {min:?}")]
    BackoffMaxBelowMin {
        /// The first delay given.
        min: Duration,
        /// The longest delay given.
        max: Duration,
    },
}

/// Everything that can go wrong on a connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A socket operation failed.
    #[error("io error: {0}")]
    Io(#[from] io::Error),
    /// The peer broke the framing rules; the connection was closed.
    #[error("framing error: {0}")]
    Frame(#[from] FrameError),
    /// The handshake failed; the connection was closed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The configuration is invalid.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    /// The connection is closed (locally or by the peer); open a new one.
    #[error("connection closed")]
    Closed,
    /// TLS setup or a TLS handshake failed; the message says why (unknown
    /// issuer, expired certificate, wrong name, missing client certificate,
    /// a peer that does not speak TLS).
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    /// An inbound connection arrived while the endpoint already held its
    /// maximum of inbound connections (handshaking or established); it was
    /// closed at once, before any byte was read. Raise
    /// [`TransportConfig::set_max_inbound_connections`](crate::TransportConfig::set_max_inbound_connections)
    /// if that many peers are legitimate.
    #[error("too many inbound connections (limit {limit}); connection closed")]
    TooManyConnections {
        /// The configured maximum.
        limit: usize,
    },
    /// An inbound connection arrived from an address that already held its
    /// maximum of inbound connections (handshaking or established); it was
    /// closed at once, before any byte was read. Raise
    /// [`TransportConfig::set_max_inbound_connections_per_ip`](crate::TransportConfig::set_max_inbound_connections_per_ip)
    /// if that many peers legitimately share one address (a NAT).
    #[error(
        "too many inbound connections from {ip} (limit {limit} per address); connection closed"
    )]
    TooManyConnectionsFromIp {
        /// The address.
        ip: std::net::IpAddr,
        /// The configured maximum per address.
        limit: usize,
    },
    /// An inbound connection still in its handshake (the peer had not yet
    /// proved the shared secret) was closed to make room for a newer one:
    /// its address held its maximum of connections in their handshake
    /// ([`TransportConfig::set_max_unproven_per_ip`](crate::TransportConfig::set_max_unproven_per_ip)),
    /// or every slot was taken and its address had the most such
    /// connections. A peer that proves promptly is not affected; raise the
    /// bound if many legitimate peers share one address and connect at
    /// the same moment.
    #[error(
        "handshake from {ip} evicted for a newer connection ({unproven} connections from that address in their handshake)"
    )]
    HandshakeEvicted {
        /// The evicted connection's address.
        ip: std::net::IpAddr,
        /// Connections from that address in their handshake when it was
        /// chosen, itself included.
        unproven: usize,
    },
    /// An inbound connection was closed before any byte was read because
    /// the account pending handshakes are charged to
    /// ([`TransportConfig::set_admission`](crate::TransportConfig::set_admission),
    /// the actors' peer memory budget) refused its
    /// [`PENDING_HANDSHAKE_COST`](crate::PENDING_HANDSHAKE_COST), even
    /// after the oldest pending handshake gave its charge up: the node
    /// holds its limit for peers, or this address its share. It passes
    /// when what peers hold is given back; raise the budget if legitimate
    /// peers are refused.
    #[error(
        "no room in the memory budget for a handshake from {ip} ({bytes} bytes refused); connection closed"
    )]
    HandshakeMemoryRefused {
        /// The connection's address.
        ip: std::net::IpAddr,
        /// The bytes refused.
        bytes: usize,
    },
    /// The peer keeps sending heartbeats but does not read: the echo of
    /// one has waited longer than the stall timeout to be written, or more
    /// than 1024 further heartbeats arrived meanwhile. The connection is
    /// closed rather than buffer echoes. See
    /// [`TransportConfig::set_control_stall_timeout`](crate::TransportConfig::set_control_stall_timeout).
    #[error(
        "peer does not read: {heartbeats} heartbeats arrived while the echo of an earlier one waited {waited:?} to be written (limits: 1024 heartbeats, {limit:?})"
    )]
    PeerNotReading {
        /// How long the echo waited.
        waited: Duration,
        /// Heartbeats that arrived while it waited.
        heartbeats: u32,
        /// The configured stall timeout.
        limit: Duration,
    },
    /// A connect attempt did not finish within the connect timeout.
    #[error("connect to {addr} timed out after {after:?}")]
    ConnectTimeout {
        /// The address dialled.
        addr: SocketAddr,
        /// The timeout.
        after: Duration,
    },
}

/// A TLS failure: loading certificates and keys, or a TLS handshake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM source could not be read or holds nothing usable. Check the
    /// path and that the file holds the named item (`CERTIFICATE`, `PRIVATE
    /// KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`).
    #[error("{what} from {source_name}: {reason}")]
    Pem {
        /// What was being loaded: "certificate chain", "private key", "trust store".
        what: &'static str,
        /// The file path, or "in-memory PEM".
        source_name: String,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the configuration (for example a key that does not
    /// match the certificate, or an empty trust store).
    #[error("invalid tls configuration: {0}")]
    Config(String),
    /// The TLS handshake failed: the message is rustls's (for example
    /// `invalid peer certificate: UnknownIssuer`, `... Expired`,
    /// `... NotValidForName`, `peer sent no certificates`, or a received
    /// alert), or names a peer that does not speak TLS.
    #[error("tls handshake with {peer} failed: {reason}")]
    Handshake {
        /// The socket address of the peer.
        peer: SocketAddr,
        /// Why.
        reason: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The TLS handshake did not finish within the handshake timeout.
    #[error("tls handshake with {peer} did not complete within {timeout:?}")]
    Timeout {
        /// The socket address of the peer.
        peer: SocketAddr,
        /// The configured handshake timeout.
        timeout: Duration,
    },
}

/// A failed inbound connection: the listener keeps accepting others.
#[derive(Debug, thiserror::Error)]
#[error("inbound connection from {peer}: {error}")]
pub struct AcceptError {
    /// The remote socket address.
    pub peer: SocketAddr,
    /// What went wrong.
    pub error: TransportError,
}
