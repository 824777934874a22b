//! Transport configuration: a plain struct with `Default` and `&mut Self`
//! setters; those that can be given a bad value refuse it, so a
//! `TransportConfig` is always valid and binding has nothing to check.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use crate::{
    admission::Admission,
    auth::SharedSecret,
    cookie::{self, COOKIE_ENV},
    error::ConfigError,
};

/// Default largest frame body: 8 MiB. Large enough for big actor messages,
/// small enough that a hostile prefix cannot make a node reserve much.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 8 * 1024 * 1024;
/// Default outbound queue capacity: 4 MiB of encoded frames per connection,
/// about 40,000 100-byte messages, eight 5,000-message bursts.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4 * 1024 * 1024;
/// Default write buffer: 64 KiB, the size at which loopback writes stop
/// getting cheaper per byte (see `../shared/BENCH.md`).
pub const DEFAULT_WRITE_BUFFER_SIZE: usize = 64 * 1024;
/// Default read buffer: 64 KiB, matching the write size so one read takes in
/// a whole batch.
pub const DEFAULT_READ_BUFFER_SIZE: usize = 64 * 1024;
/// Default producer yield threshold: 64 KiB, one default write buffer.
/// See [`TransportConfig::set_producer_yield_bytes`].
pub const DEFAULT_PRODUCER_YIELD_BYTES: usize = 64 * 1024;
/// Default handshake timeout.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time a graceful close waits for the queue to drain.
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default most inbound connections an endpoint holds at once, handshaking
/// or established: 1024. A cluster node talks to one connection per peer
/// node, so this is far above a legitimate load, and it bounds what a
/// connection flood can make the node hold (one task and about two
/// read/write buffers per connection).
pub const DEFAULT_MAX_INBOUND_CONNECTIONS: usize = 1024;
/// Default most inbound connections from one IP address, handshaking or
/// established: 64. Several nodes may share a host (or a NAT), but one
/// address holding more than a sixteenth of the endpoint's slots is a
/// flood, not a cluster; the bound keeps one host from taking them all.
pub const DEFAULT_MAX_INBOUND_CONNECTIONS_PER_IP: usize = 64;
/// Default most inbound connections from one IP address that are still in
/// their handshake (unproven: no shared secret or certificate checked
/// yet): 1024, so by default only the per-address connection bound
/// applies, and an address at it gives up its oldest handshake rather
/// than refusing a newcomer. Lower it where few nodes share an address
/// (8 holds a flood from 17 addresses to 136 slots); a cluster of 20
/// nodes starting at once on one host did not converge with it at 32.
pub const DEFAULT_MAX_UNPROVEN_PER_IP: usize = 1024;
/// Default idle time after which an inbound connection may be evicted
/// when every inbound slot is taken: 30 s without an application frame
/// (`Message` or `System`; heartbeats do not count). Three times the
/// actors' default acceptable heartbeat pause, so a link that is merely
/// quiet between bursts is rarely the one chosen, while idle connections
/// cannot keep a new peer out for longer than this.
pub const DEFAULT_IDLE_EVICTION_AFTER: Duration = Duration::from_secs(30);
/// Default time the echo of a peer's heartbeat may wait to be written
/// while the peer keeps sending heartbeats: 10 s, the actors' default
/// acceptable heartbeat pause. A peer that sends but does not read is
/// closed after it, instead of having its echoes buffered; by then its own
/// failure detector has judged this node unreachable anyway, since the
/// echoes it needed could not reach it.
pub const DEFAULT_CONTROL_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for an [`Endpoint`](crate::Endpoint) and its connections.
///
/// Setters that take any value return `&mut Self`; those with a range
/// return `Result<&mut Self, ConfigError>` and leave the setting
/// unchanged on an error (as [`HeartbeatConfig`](crate::HeartbeatConfig)'s):
///
/// ```
/// use std::time::Duration;
/// let mut config = transport::TransportConfig::default();
/// config
///     .set_max_frame_size(1 << 20)?
///     .set_handshake_timeout(Duration::from_secs(2))?
///     .set_nodelay(true);
/// assert_eq!(config.max_frame_size(), 1 << 20);
/// let e = config.set_queue_capacity(0).unwrap_err();
/// assert_eq!(e.to_string(), "queue_capacity must be greater than zero");
/// # Ok::<(), transport::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TransportConfig {
    pub(crate) max_frame_size: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) write_buffer_size: usize,
    pub(crate) read_buffer_size: usize,
    pub(crate) producer_yield_bytes: Option<usize>,
    pub(crate) send_buffer_size: Option<u32>,
    pub(crate) recv_buffer_size: Option<u32>,
    pub(crate) nodelay: bool,
    pub(crate) handshake_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) close_timeout: Duration,
    pub(crate) accept_backlog: u32,
    pub(crate) max_inbound_connections: usize,
    pub(crate) max_inbound_connections_per_ip: usize,
    pub(crate) max_unproven_per_ip: usize,
    pub(crate) idle_eviction_after: Option<Duration>,
    pub(crate) control_stall_timeout: Duration,
    pub(crate) shared_secret: Option<SharedSecret>,
    pub(crate) cookie_file: Option<PathBuf>,
    pub(crate) insecure_no_authentication: bool,
    pub(crate) app_flags: u8,
    pub(crate) message_count: fn(&[u8]) -> u64,
    pub(crate) admission: Option<Arc<dyn Admission>>,
}

/// Each `Message` frame is one message (the default message count).
fn one_message(_: &[u8]) -> u64 {
    1
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            write_buffer_size: DEFAULT_WRITE_BUFFER_SIZE,
            read_buffer_size: DEFAULT_READ_BUFFER_SIZE,
            producer_yield_bytes: Some(DEFAULT_PRODUCER_YIELD_BYTES),
            send_buffer_size: None,
            recv_buffer_size: None,
            nodelay: true,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            accept_backlog: 1024,
            max_inbound_connections: DEFAULT_MAX_INBOUND_CONNECTIONS,
            max_inbound_connections_per_ip: DEFAULT_MAX_INBOUND_CONNECTIONS_PER_IP,
            max_unproven_per_ip: DEFAULT_MAX_UNPROVEN_PER_IP,
            idle_eviction_after: Some(DEFAULT_IDLE_EVICTION_AFTER),
            control_stall_timeout: DEFAULT_CONTROL_STALL_TIMEOUT,
            shared_secret: None,
            cookie_file: None,
            insecure_no_authentication: false,
            app_flags: 0,
            message_count: one_message,
            admission: None,
        }
    }
}

/// A size or count that must not be zero.
fn nonzero(name: &'static str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        return Err(ConfigError::Zero { name });
    }
    Ok(())
}

/// A timeout that must not be zero: a zero one would fail every
/// handshake, connect or stalled echo at once.
fn nonzero_duration(name: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(ConfigError::Zero { name });
    }
    Ok(())
}

impl TransportConfig {
    /// Largest frame body accepted or sent, in bytes. Default 8 MiB
    /// ([`DEFAULT_MAX_FRAME_SIZE`]). Checked before anything is allocated;
    /// a larger inbound frame closes the connection, a larger outbound one
    /// is refused to the caller. Both nodes should agree.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero, [`ConfigError::FrameSizeTooLarge`]
    /// over `u32::MAX` (the length prefix is 32 bits). The setting is left
    /// unchanged.
    pub fn set_max_frame_size(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        nonzero("max_frame_size", bytes)?;
        if bytes as u64 > u64::from(u32::MAX) {
            return Err(ConfigError::FrameSizeTooLarge {
                value: bytes,
                limit: u64::from(u32::MAX),
            });
        }
        self.max_frame_size = bytes;
        Ok(self)
    }

    /// Bytes of encoded frames a connection queues before `send().await`
    /// waits and `try_send` returns `Full`. Default 4 MiB
    /// ([`DEFAULT_QUEUE_CAPACITY`]). Memory per connection is bounded by
    /// about twice this plus one maximum frame (one buffer filling while the
    /// other is written). Larger values let bursts run further ahead.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_queue_capacity(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        nonzero("queue_capacity", bytes)?;
        self.queue_capacity = bytes;
        Ok(self)
    }

    /// Initial capacity of each pooled write buffer. Default 64 KiB
    /// ([`DEFAULT_WRITE_BUFFER_SIZE`]). Buffers grow as needed up to the
    /// queue capacity and are reused.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_write_buffer_size(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        nonzero("write_buffer_size", bytes)?;
        self.write_buffer_size = bytes;
        Ok(self)
    }

    /// Bytes requested from the socket per read. Default 64 KiB
    /// ([`DEFAULT_READ_BUFFER_SIZE`]). Larger reads take in more frames per
    /// syscall at the cost of memory per connection.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_read_buffer_size(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        nonzero("read_buffer_size", bytes)?;
        self.read_buffer_size = bytes;
        Ok(self)
    }

    /// Queued bytes at which a producer is asked to yield its thread to the
    /// connection's writer, if the writer has been woken and has not run
    /// yet. Default 64 KiB ([`DEFAULT_PRODUCER_YIELD_BYTES`]); `None`
    /// never asks. `Sender::send_with().await` (and the actors' `send`)
    /// yield once when asked, so a batch goes to the socket while the
    /// producer encodes the next, and the peer starts on it; `try_send*`
    /// never yield (see [`Sender::send_with`](crate::Sender::send_with)). Smaller values mean
    /// more, smaller writes and earlier starts at the peer; larger values
    /// fewer writes and less overlap.
    pub fn set_producer_yield_bytes(&mut self, bytes: Option<usize>) -> &mut Self {
        self.producer_yield_bytes = bytes;
        self
    }

    /// Feature bits of the application's own protocol, announced to every
    /// peer in the handshake's preface and reported as the peer's
    /// [`PeerInfo::app_flags`](crate::PeerInfo::app_flags). The transport
    /// gives them no meaning; a peer that knows none sends 0 and ignores
    /// ours. Default 0.
    pub fn set_app_flags(&mut self, flags: u8) -> &mut Self {
        self.app_flags = flags;
        self
    }

    /// How many application messages a `Message` frame's body carries, for
    /// [`ConnStats::frames_dropped`](crate::ConnStats::frames_dropped):
    /// for an application that packs several messages into one frame, so
    /// that what a lost connection drops is counted in messages. Called
    /// only for frames that were never written. Default: one per frame.
    pub fn set_message_count(&mut self, count: fn(&[u8]) -> u64) -> &mut Self {
        self.message_count = count;
        self
    }

    /// `SO_SNDBUF` for every socket; `None` (the default) keeps the kernel's
    /// auto-tuning.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for `Some(0)` (say `None` for the kernel's
    /// choice). The setting is left unchanged.
    pub fn set_send_buffer_size(&mut self, bytes: Option<u32>) -> Result<&mut Self, ConfigError> {
        nonzero("send_buffer_size", bytes.map_or(1, |b| b as usize))?;
        self.send_buffer_size = bytes;
        Ok(self)
    }

    /// `SO_RCVBUF` for every socket; `None` (the default) keeps the kernel's
    /// auto-tuning.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for `Some(0)` (say `None` for the kernel's
    /// choice). The setting is left unchanged.
    pub fn set_recv_buffer_size(&mut self, bytes: Option<u32>) -> Result<&mut Self, ConfigError> {
        nonzero("recv_buffer_size", bytes.map_or(1, |b| b as usize))?;
        self.recv_buffer_size = bytes;
        Ok(self)
    }

    /// `TCP_NODELAY`. Default on: the writer already batches, so Nagle's
    /// algorithm would only add delay to a lone message.
    pub fn set_nodelay(&mut self, on: bool) -> &mut Self {
        self.nodelay = on;
        self
    }

    /// Time the peer has to complete its handshake. Default 5 s
    /// ([`DEFAULT_HANDSHAKE_TIMEOUT`]). Bounds what a half-open connection
    /// can hold.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_handshake_timeout(&mut self, timeout: Duration) -> Result<&mut Self, ConfigError> {
        nonzero_duration("handshake_timeout", timeout)?;
        self.handshake_timeout = timeout;
        Ok(self)
    }

    /// Time a TCP connect may take. Default 5 s. When a name resolves to
    /// several addresses ([`Endpoint::connect_any`](crate::Endpoint::connect_any)),
    /// this bounds trying all of them.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_connect_timeout(&mut self, timeout: Duration) -> Result<&mut Self, ConfigError> {
        nonzero_duration("connect_timeout", timeout)?;
        self.connect_timeout = timeout;
        Ok(self)
    }

    /// Time a graceful close waits for queued frames to be written. Default
    /// 5 s; after it the connection is dropped with what is left unsent.
    /// Also how long, after the peer's Close frame, this side waits for
    /// the peer's end of stream before it drops the connection (a peer
    /// that closes and never hangs up holds it no longer).
    pub fn set_close_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.close_timeout = timeout;
        self
    }

    /// Listen backlog. Default 1024.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_accept_backlog(&mut self, backlog: u32) -> Result<&mut Self, ConfigError> {
        nonzero("accept_backlog", backlog as usize)?;
        self.accept_backlog = backlog;
        Ok(self)
    }

    /// Most inbound connections held at once, counting those still in their
    /// handshake. Default 1024 ([`DEFAULT_MAX_INBOUND_CONNECTIONS`]). A
    /// connection over the limit is closed as soon as it is accepted,
    /// logged, and reported by [`Endpoint::accept`](crate::Endpoint::accept)
    /// as [`TransportError::TooManyConnections`](crate::TransportError::TooManyConnections);
    /// its slot frees when a connection ends (or its handshake fails or
    /// times out, see [`set_handshake_timeout`](Self::set_handshake_timeout)).
    /// Outbound connections are not counted.
    ///
    /// Memory: an idle established connection holds about 200 KiB (a
    /// 64 KiB read buffer, two 64 KiB write buffers, two tasks; see
    /// [`set_read_buffer_size`](Self::set_read_buffer_size) and
    /// [`set_write_buffer_size`](Self::set_write_buffer_size)), a busy one
    /// up to its queue capacity more
    /// ([`set_queue_capacity`](Self::set_queue_capacity)); a handshaking
    /// one about 3 KiB (measured: 3.0 KiB of resident memory per pending
    /// handshake). So the default bounds idle inbound connections at
    /// about 200 MiB. When every slot is taken, an idle connection may be
    /// evicted for a new one (see
    /// [`set_idle_eviction_after`](Self::set_idle_eviction_after)).
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_max_inbound_connections(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        nonzero("max_inbound_connections", n)?;
        self.max_inbound_connections = n;
        Ok(self)
    }

    /// Most inbound connections held at once from one IP address, counting
    /// those still in their handshake. Default 64
    /// ([`DEFAULT_MAX_INBOUND_CONNECTIONS_PER_IP`]). Enforced in the accept
    /// loop before any byte is read, like
    /// [`set_max_inbound_connections`](Self::set_max_inbound_connections):
    /// a connection over it is closed at once, logged (sampled) and
    /// reported by [`Endpoint::accept`](crate::Endpoint::accept) as
    /// [`TransportError::TooManyConnectionsFromIp`](crate::TransportError::TooManyConnectionsFromIp).
    /// Memory: one map entry (about 40 bytes) per address with a
    /// connection, at most one per inbound connection; each connection
    /// costs what [`set_max_inbound_connections`](Self::set_max_inbound_connections)
    /// says. Set it to the global limit to turn it off.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_max_inbound_connections_per_ip(
        &mut self,
        n: usize,
    ) -> Result<&mut Self, ConfigError> {
        nonzero("max_inbound_connections_per_ip", n)?;
        self.max_inbound_connections_per_ip = n;
        Ok(self)
    }

    /// Most inbound connections from one IP address that are still in
    /// their handshake (before the peer proved the shared secret, or its
    /// certificate). Default 1024 ([`DEFAULT_MAX_UNPROVEN_PER_IP`]). A new
    /// connection from an address at this bound evicts the oldest of that
    /// address's unproven connections (it is closed at once and reported
    /// by [`Endpoint::accept`](crate::Endpoint::accept) as
    /// [`TransportError::HandshakeEvicted`](crate::TransportError::HandshakeEvicted)),
    /// so a peer that shares an address with a flood still gets its turn,
    /// while the flood holds at most this many slots per address.
    ///
    /// When every inbound slot is taken, a new connection first evicts an
    /// unproven one: the oldest from the address with the most unproven
    /// connections; only when none is in its handshake does it fall back
    /// to an idle established one (see
    /// [`set_idle_eviction_after`](Self::set_idle_eviction_after)). So
    /// connections that never prove anything cannot keep a peer that does
    /// out, whatever their number and addresses.
    ///
    /// Memory: a connection in its handshake holds about 3 KiB in the
    /// process (measured: 3.0 KiB of resident memory each, for its task,
    /// a 512-byte read buffer, the handshake state and a table entry),
    /// 30 KB with TLS (rustls's handshake state), plus the kernel's socket
    /// buffers; so the default holds at most this many times that per
    /// address. With an
    /// [`set_admission`](Self::set_admission) hook, each is also charged
    /// to it.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_max_unproven_per_ip(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        nonzero("max_unproven_per_ip", n)?;
        self.max_unproven_per_ip = n;
        Ok(self)
    }

    /// The account that inbound connections are charged to while their
    /// handshake is pending: [`PENDING_HANDSHAKE_COST`](crate::PENDING_HANDSHAKE_COST)
    /// each, from when the connection is accepted until its peer proved
    /// itself or it ended (see [`Admission`]). A refused charge makes
    /// the oldest pending handshake of the address with the most of them
    /// give its charge up (it is evicted, and reported as
    /// [`TransportError::HandshakeEvicted`](crate::TransportError::HandshakeEvicted)),
    /// and if the charge is refused again the new connection is closed
    /// (reported as
    /// [`TransportError::HandshakeMemoryRefused`](crate::TransportError::HandshakeMemoryRefused)).
    /// Default `None`: pending handshakes are bounded by the slots alone.
    /// `actors` sets its node-wide peer memory budget here, and keeps an
    /// account the application set: a pending handshake is then charged
    /// to both, and admitted when both take it.
    pub fn set_admission(&mut self, admission: Option<Arc<dyn Admission>>) -> &mut Self {
        self.admission = admission;
        self
    }

    /// The account set with [`set_admission`](Self::set_admission).
    pub fn admission(&self) -> Option<&Arc<dyn Admission>> {
        self.admission.as_ref()
    }

    /// When every inbound slot is taken, a new inbound connection evicts
    /// the established inbound connection that has gone longest without an
    /// application frame (`Message` or `System`; heartbeats do not count),
    /// provided that is at least this long, instead of being refused.
    /// Default 30 s ([`DEFAULT_IDLE_EVICTION_AFTER`]); `None` never evicts
    /// (a full endpoint refuses, as before). The evicted connection is
    /// sent a `Close` frame with reason `evicted: no application frame for
    /// 41s and the endpoint is at its limit of 1024 inbound connections`,
    /// and aborted if it has not closed within 500 ms; the new connection
    /// waits for that slot (at most the handshake timeout) before its
    /// handshake starts. A connection still in its handshake is evicted
    /// first when there is one (see
    /// [`set_max_unproven_per_ip`](Self::set_max_unproven_per_ip)). Cost: one clock read
    /// and one relaxed store per socket read that delivers application
    /// frames, on every connection; a scan of the inbound connections only
    /// when the endpoint is full.
    pub fn set_idle_eviction_after(&mut self, idle: Option<Duration>) -> &mut Self {
        self.idle_eviction_after = idle;
        self
    }

    /// How long the echo of a peer's heartbeat may wait to be written
    /// (the peer does not read, so the writer cannot hand anything to the
    /// socket) before a further heartbeat from that peer closes the
    /// connection with `peer does not read: ...`; 1024 heartbeats arriving
    /// while one echo waits close it too, however soon (a peer that does
    /// not read can still let an echo trickle out every 200 ms, through
    /// TCP's zero-window probes). Default 10 s
    /// ([`DEFAULT_CONTROL_STALL_TIMEOUT`]). Meanwhile the echoes coalesce:
    /// a connection holds at most one pending echo and one heartbeat of
    /// its own, each at most
    /// [`MAX_HEARTBEAT_BODY`](crate::MAX_HEARTBEAT_BODY) bytes,
    /// whatever the peer sends. Cost: one clock read per heartbeat
    /// received.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero. The setting is left unchanged.
    pub fn set_control_stall_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<&mut Self, ConfigError> {
        nonzero_duration("control_stall_timeout", timeout)?;
        self.control_stall_timeout = timeout;
        Ok(self)
    }

    /// Requires every peer to prove it knows `secret` during the handshake
    /// (HMAC-SHA256 over both sides' fresh nonces, bound to the TLS session
    /// over TLS; the secret is never sent). Default `None`: the secret
    /// comes from `ACTORS_COOKIE` or the cookie file (see
    /// [`set_cookie_file`](Self::set_cookie_file)), so a shared secret is
    /// always in force unless
    /// [`set_insecure_no_authentication`](Self::set_insecure_no_authentication)
    /// turns it off. An explicit secret wins over all of those. Both nodes
    /// must agree: a node with a secret refuses one without, and the
    /// reverse. Cost: one more flight (32-byte challenge, 32- or 64-byte
    /// proof) per handshake, nothing per frame. It keeps out nodes that
    /// lack the secret; without TLS it does not encrypt or protect against
    /// an on-path attacker. See [`SharedSecret`] for rotation.
    ///
    /// # Errors
    /// [`ConfigError::SecretTooShort`] for a secret (current or previous)
    /// shorter than [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN). The setting
    /// is left unchanged.
    pub fn set_shared_secret(
        &mut self,
        secret: Option<SharedSecret>,
    ) -> Result<&mut Self, ConfigError> {
        if let Some(secret) = &secret {
            secret.validate()?;
        }
        self.shared_secret = secret;
        Ok(self)
    }

    /// The cookie file the shared secret is read from when none is set
    /// explicitly and `ACTORS_COOKIE` is unset or empty. Default `None`:
    /// `$HOME/.actors.cookie`. A missing file is created at bind with 32
    /// random bytes in hex and mode 0600 (atomically: nodes starting at
    /// once agree on one cookie); an existing one is reused, and refused
    /// if group or others may read or write it. Cost: a few file system
    /// calls at bind, nothing per connection.
    pub fn set_cookie_file(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.cookie_file = Some(path.into());
        self
    }

    /// Turns shared-secret authentication off: no secret is resolved and
    /// no proof asked or given. Default off. Unless TLS with client
    /// certificates authenticates peers, **any client that can reach the
    /// port can join the node** (and send it anything the application
    /// accepts); a warning says so when the endpoint is bound. An explicit
    /// [`set_shared_secret`](Self::set_shared_secret) wins over this
    /// (authentication stays on). For tests of unauthenticated behaviour
    /// and networks where something else authenticates peers.
    pub fn set_insecure_no_authentication(&mut self, insecure: bool) -> &mut Self {
        self.insecure_no_authentication = insecure;
        self
    }

    /// The explicitly configured shared secret, if any (not one resolved
    /// from the environment or a cookie file: see
    /// [`Endpoint::shared_secret`](crate::Endpoint::shared_secret)).
    pub fn shared_secret(&self) -> Option<&SharedSecret> {
        self.shared_secret.as_ref()
    }

    /// The configured cookie file, if any.
    pub fn cookie_file(&self) -> Option<&Path> {
        self.cookie_file.as_deref()
    }

    /// Whether authentication is explicitly turned off.
    pub fn insecure_no_authentication(&self) -> bool {
        self.insecure_no_authentication
    }

    /// The shared secret in force for this configuration, resolved from
    /// (in this order) [`set_shared_secret`](Self::set_shared_secret),
    /// [`set_insecure_no_authentication`](Self::set_insecure_no_authentication)
    /// (→ `None`), the `ACTORS_COOKIE` environment variable, and the cookie
    /// file (created if missing). Endpoints call this once, when bound.
    ///
    /// # Errors
    /// A secret shorter than [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN), a
    /// cookie file that cannot be read or created or that others may
    /// access, or no source at all (no `HOME`).
    pub fn resolve_shared_secret(&self) -> Result<Option<SharedSecret>, ConfigError> {
        let env = std::env::var_os(COOKIE_ENV);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        cookie::resolve(cookie::plan(
            self.shared_secret.as_ref(),
            self.insecure_no_authentication,
            env.as_deref(),
            self.cookie_file.as_deref(),
            home.as_deref(),
        )?)
    }

    /// The maximum frame body size.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// The outbound queue capacity in bytes.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }

    /// The handshake timeout.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// The most inbound connections held at once.
    pub fn max_inbound_connections(&self) -> usize {
        self.max_inbound_connections
    }

    /// The most inbound connections held at once from one IP address.
    pub fn max_inbound_connections_per_ip(&self) -> usize {
        self.max_inbound_connections_per_ip
    }

    /// The most inbound connections from one IP address still in their
    /// handshake.
    pub fn max_unproven_per_ip(&self) -> usize {
        self.max_unproven_per_ip
    }

    /// The idle time after which an inbound connection may be evicted
    /// when the endpoint is full; `None`: never.
    pub fn idle_eviction_after(&self) -> Option<Duration> {
        self.idle_eviction_after
    }

    /// How long a heartbeat echo may wait to be written.
    pub fn control_stall_timeout(&self) -> Duration {
        self.control_stall_timeout
    }

    /// Checks every setting against the setters' rules: always `Ok`,
    /// since the setters refuse what it would. An internal assertion of
    /// that, at bind.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("max_frame_size", self.max_frame_size),
            ("queue_capacity", self.queue_capacity),
            ("write_buffer_size", self.write_buffer_size),
            ("read_buffer_size", self.read_buffer_size),
            ("max_inbound_connections", self.max_inbound_connections),
            (
                "max_inbound_connections_per_ip",
                self.max_inbound_connections_per_ip,
            ),
            ("max_unproven_per_ip", self.max_unproven_per_ip),
            ("accept_backlog", self.accept_backlog as usize),
            (
                "send_buffer_size",
                self.send_buffer_size.map_or(1, |b| b as usize),
            ),
            (
                "recv_buffer_size",
                self.recv_buffer_size.map_or(1, |b| b as usize),
            ),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        for (name, d) in [
            ("handshake_timeout", self.handshake_timeout),
            ("connect_timeout", self.connect_timeout),
            ("control_stall_timeout", self.control_stall_timeout),
        ] {
            if d.is_zero() {
                return Err(ConfigError::Zero { name });
            }
        }
        if let Some(secret) = &self.shared_secret {
            secret.validate()?;
        }
        if self.max_frame_size as u64 > u64::from(u32::MAX) {
            return Err(ConfigError::FrameSizeTooLarge {
                value: self.max_frame_size,
                limit: u64::from(u32::MAX),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        TransportConfig::default().validate().unwrap();
    }

    /// Every setter with a range refuses what is out of it, naming the
    /// setting, and leaves the configuration as it was.
    #[test]
    fn setters_refuse_bad_values_by_name_and_change_nothing() {
        let mut c = TransportConfig::default();
        let before = format!("{c:?}");
        let too_large = u32::MAX as usize + 1;
        for (refused, message) in [
            (
                c.set_max_frame_size(0).map(drop),
                "max_frame_size must be greater than zero",
            ),
            (
                c.set_max_frame_size(too_large).map(drop),
                "max frame size 4294967296 exceeds the protocol limit 4294967295",
            ),
            (
                c.set_queue_capacity(0).map(drop),
                "queue_capacity must be greater than zero",
            ),
            (
                c.set_write_buffer_size(0).map(drop),
                "write_buffer_size must be greater than zero",
            ),
            (
                c.set_read_buffer_size(0).map(drop),
                "read_buffer_size must be greater than zero",
            ),
            (
                c.set_max_inbound_connections(0).map(drop),
                "max_inbound_connections must be greater than zero",
            ),
            (
                c.set_max_inbound_connections_per_ip(0).map(drop),
                "max_inbound_connections_per_ip must be greater than zero",
            ),
            (
                c.set_max_unproven_per_ip(0).map(drop),
                "max_unproven_per_ip must be greater than zero",
            ),
            (
                c.set_send_buffer_size(Some(0)).map(drop),
                "send_buffer_size must be greater than zero",
            ),
            (
                c.set_recv_buffer_size(Some(0)).map(drop),
                "recv_buffer_size must be greater than zero",
            ),
            (
                c.set_accept_backlog(0).map(drop),
                "accept_backlog must be greater than zero",
            ),
            (
                c.set_handshake_timeout(Duration::ZERO).map(drop),
                "handshake_timeout must be greater than zero",
            ),
            (
                c.set_connect_timeout(Duration::ZERO).map(drop),
                "connect_timeout must be greater than zero",
            ),
            (
                c.set_control_stall_timeout(Duration::ZERO).map(drop),
                "control_stall_timeout must be greater than zero",
            ),
            (
                c.set_shared_secret(Some(SharedSecret::new("short")))
                    .map(drop),
                "shared secret is 5 bytes, at least 16 required",
            ),
            (
                c.set_shared_secret(Some(
                    SharedSecret::new("a secret of enough bytes").with_previous("old"),
                ))
                .map(drop),
                "shared secret is 3 bytes, at least 16 required",
            ),
        ] {
            assert_eq!(refused.unwrap_err().to_string(), message);
        }
        assert_eq!(format!("{c:?}"), before, "a refused value changes nothing");
    }

    /// The largest frame the 32-bit prefix can carry is taken.
    #[test]
    fn values_at_the_bounds_are_taken() {
        let mut c = TransportConfig::default();
        c.set_max_frame_size(u32::MAX as usize)
            .unwrap()
            .set_handshake_timeout(Duration::from_nanos(1))
            .unwrap()
            .set_shared_secret(Some(SharedSecret::new([7u8; 16])))
            .unwrap();
        assert_eq!(c.max_frame_size(), u32::MAX as usize);
        c.validate().unwrap();
    }
}
