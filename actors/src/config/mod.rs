//! [`SystemConfig`]: every setting of an actor system, each with its
//! default as a named constant and its cost.

use std::{collections::HashMap, net::SocketAddr, time::Duration};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use transport::{Backoff, HeartbeatConfig, TransportConfig};

pub(crate) mod file;

use file::{ConfigError, Invalid, within};

/// Default mailbox capacity: 65,536 messages, a dozen 5,000-message bursts.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 64 * 1024;
/// Default time `resolve` waits for a remote node's answer.
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default messages buffered per remote node while its link is being
/// established; beyond this `tell` reports `LinkFull` (`send` and `ask`
/// wait).
pub const DEFAULT_PENDING_CAPACITY: usize = 16 * 1024;
/// Default malformed envelopes a connection may carry per second before it
/// is closed: 100. A correct peer sends none; a few can come from a peer
/// with a bug, and a flood is an attack that would otherwise cost a dead
/// letter (and a sampled log line) each.
pub const DEFAULT_MAX_MALFORMED_PER_SECOND: usize = 100;
/// Default system messages (watch, terminated, stop) kept per remote node
/// until acknowledged: 20,000 (Akka's `system-message-buffer-size`). A peer
/// that leaves more unacknowledged is quarantined.
pub const DEFAULT_SYSTEM_MESSAGE_BUFFER: usize = 20_000;
/// Default largest remote message: 64 MiB encoded. Messages larger than a
/// fragment threshold (256 KiB) travel in 64 KiB fragments on the link's
/// large-message lane; see `SystemConfig::set_max_message_size`.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 << 20;

/// Default most remote nodes a system keeps an association with: 1,024.
/// Each costs a few kilobytes and a share of one heartbeat timer; refs that
/// arrive inside messages can name any node, so this bounds what peers'
/// messages can make a node set up.
pub const DEFAULT_MAX_ASSOCIATIONS: usize = 1024;
/// Default most connection attempts in flight at once: 16. Beyond that a
/// connect waits for one to finish, so refs naming many unreachable nodes
/// cannot make the node open sockets without bound.
pub const DEFAULT_MAX_CONCURRENT_DIALS: usize = 16;
/// Default time an association nothing uses is kept before it is dropped:
/// 60 s. See `SystemConfig::set_association_idle_timeout`.
pub const DEFAULT_ASSOCIATION_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default bytes of remote messages a mailbox queues before it is full:
/// 64 MiB. With the message bound alone, 65,536 large messages could
/// queue; a batch may overshoot by one socket read (or one large message).
pub const DEFAULT_MAILBOX_BYTES: usize = 64 << 20;

/// Default most recipient ids one link defines: 16,384. About 100 bytes
/// each on the receiving node (the path and a cached target), so at most
/// about 1.6 MiB per link.
pub const DEFAULT_MAX_RECIPIENT_IDS: usize = 16 * 1024;

/// Default window of envelope bytes a node grants each remote recipient
/// on a link: 1 MiB. See `SystemConfig::set_recipient_window`.
pub const DEFAULT_RECIPIENT_WINDOW: usize = 1 << 20;

/// Default bytes one connection may hold for mailboxes that are full:
/// 64 MiB. See `SystemConfig::set_max_parked_bytes`.
pub const DEFAULT_MAX_PARKED_BYTES: usize = 64 << 20;

/// Default for [`SystemConfig::set_peer_memory_budget`]: 256 MiB.
pub const DEFAULT_PEER_MEMORY_BUDGET: usize = 256 << 20;

/// The smallest value [`SystemConfig::set_peer_memory_budget`] takes:
/// 1 MiB, a few recipient tables and batches.
pub const MIN_PEER_MEMORY_BUDGET: usize = 1 << 20;

/// Default time a node whose link ended without a Close frame may refuse
/// reconnects before it is declared unreachable: 1 s. Long enough for a
/// process restarting on the same address to come back as a new
/// incarnation, far shorter than the failure detector's 10 s acceptable
/// pause. See `SystemConfig::set_refused_connect_grace`.
pub const DEFAULT_REFUSED_CONNECT_GRACE: Duration = Duration::from_secs(1);

/// The largest value `SystemConfig::set_max_message_size` takes: the
/// length of a received message shares a `u32` with a flag in the batches
/// handed to mailboxes (`mailbox::RECORD_EXT`).
pub(crate) const MAX_MESSAGE_SIZE_LIMIT: usize = i32::MAX as usize;

/// Settings of an [`ActorSystem`](crate::ActorSystem).
#[derive(Debug, Clone)]
pub struct SystemConfig {
    pub(crate) mailbox_capacity: usize,
    pub(crate) mailbox_bytes: usize,
    pub(crate) resolve_timeout: Duration,
    pub(crate) pending_capacity: usize,
    pub(crate) max_malformed_per_second: usize,
    pub(crate) transport: TransportConfig,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<transport::TlsConfig>,
    pub(crate) heartbeat: HeartbeatConfig,
    pub(crate) backoff: Backoff,
    /// `[cluster]`: what `Cluster::join_configured` joins with.
    pub(crate) cluster: ClusterSettings,
    pub(crate) system_buffer: usize,
    pub(crate) max_message_size: usize,
    /// Addresses to dial instead of the one in a node's name.
    pub(crate) routes: HashMap<String, SocketAddr>,
    pub(crate) untrusted_mode: bool,
    pub(crate) lookup_paths: Vec<String>,
    pub(crate) max_associations: usize,
    pub(crate) association_idle_timeout: Duration,
    pub(crate) max_concurrent_dials: usize,
    pub(crate) dial_allow_list: Option<Vec<IpNet>>,
    pub(crate) max_recipient_ids: usize,
    pub(crate) recipient_window: usize,
    pub(crate) max_parked_bytes: usize,
    pub(crate) peer_memory_budget: usize,
    pub(crate) advertised: Option<String>,
    pub(crate) refused_connect_grace: Duration,
    pub(crate) trace_propagation: bool,
    pub(crate) message_runs: bool,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            mailbox_capacity: DEFAULT_MAILBOX_CAPACITY,
            mailbox_bytes: DEFAULT_MAILBOX_BYTES,
            resolve_timeout: DEFAULT_RESOLVE_TIMEOUT,
            pending_capacity: DEFAULT_PENDING_CAPACITY,
            max_malformed_per_second: DEFAULT_MAX_MALFORMED_PER_SECOND,
            transport: TransportConfig::default(),
            #[cfg(feature = "tls")]
            tls: None,
            heartbeat: HeartbeatConfig::default(),
            backoff: Backoff::default(),
            cluster: ClusterSettings::default(),
            system_buffer: DEFAULT_SYSTEM_MESSAGE_BUFFER,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            routes: HashMap::new(),
            untrusted_mode: false,
            lookup_paths: Vec::new(),
            max_associations: DEFAULT_MAX_ASSOCIATIONS,
            association_idle_timeout: DEFAULT_ASSOCIATION_IDLE_TIMEOUT,
            max_concurrent_dials: DEFAULT_MAX_CONCURRENT_DIALS,
            dial_allow_list: None,
            max_recipient_ids: DEFAULT_MAX_RECIPIENT_IDS,
            recipient_window: DEFAULT_RECIPIENT_WINDOW,
            max_parked_bytes: DEFAULT_MAX_PARKED_BYTES,
            peer_memory_budget: DEFAULT_PEER_MEMORY_BUDGET,
            advertised: None,
            refused_connect_grace: DEFAULT_REFUSED_CONNECT_GRACE,
            trace_propagation: false,
            message_runs: true,
        }
    }
}

/// The setters: `&mut Self` for those that take any value, `Result<&mut
/// Self, ConfigError>` for those with a range, which they check with
/// [`validate`](Self::validate) (the rules the configuration loader
/// applies) and leave the configuration unchanged on an error:
///
/// ```
/// let mut config = actors::SystemConfig::default();
/// config.set_mailbox_capacity(4096)?.set_trace_propagation(true);
/// let e = config.set_max_associations(0).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "invalid value for \"remote.max_associations\" set in code: must be at least 1, found 0"
/// );
/// # Ok::<(), actors::ConfigError>(())
/// ```
impl SystemConfig {
    /// Applies `change` if the result is valid.
    fn checked(&mut self, change: impl FnOnce(&mut Self)) -> Result<&mut Self, ConfigError> {
        let mut next = self.clone();
        change(&mut next);
        next.validate()?;
        *self = next;
        Ok(self)
    }

    /// User messages a mailbox holds before `tell` reports `MailboxFull`,
    /// `send` waits and remote reading pauses. Default 65,536.
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_mailbox_capacity(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.mailbox_capacity = n)
    }

    /// Bytes of remote messages (as they arrived, encoded) a mailbox queues
    /// before it is full, beside the message count: `tell` reports
    /// `MailboxFull`, `send` waits and the remote reader pauses, as for
    /// the count. Default 64 MiB ([`DEFAULT_MAILBOX_BYTES`]); one socket
    /// read's batch (or one large message) may overshoot it. Local
    /// messages are bounded by their count only. Cost: this much memory
    /// per busy actor at most.
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_mailbox_bytes(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.mailbox_bytes = bytes)
    }

    /// How long `resolve` waits for a remote node. Default 5 s.
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_resolve_timeout(&mut self, t: Duration) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.resolve_timeout = t)
    }

    /// Messages buffered per node while connecting. Default 16,384.
    pub fn set_pending_capacity(&mut self, n: usize) -> &mut Self {
        self.pending_capacity = n;
        self
    }

    /// Secures every link with TLS 1.3 (mutual authentication by default;
    /// see [`transport::TlsConfig`]). Default: plain TCP. Each node's
    /// certificate must name the host it advertises.
    #[cfg(feature = "tls")]
    pub fn set_tls(&mut self, tls: transport::TlsConfig) -> &mut Self {
        self.tls = Some(tls);
        self
    }

    /// Malformed envelopes (ones that do not parse, name a recipient id the
    /// peer never defined, or undecodable system messages) one connection
    /// may carry within a second; one more aborts the connection with a
    /// log line naming the count and the last fault. Default 100
    /// ([`DEFAULT_MAX_MALFORMED_PER_SECOND`]); 0 closes on the first. Each
    /// malformed envelope is also a dead letter. Messages to unknown actors
    /// or of the wrong type are dead letters but not malformed (they
    /// happen legitimately while actors restart). Cost: nothing per
    /// well-formed message.
    pub fn set_max_malformed_per_second(&mut self, n: usize) -> &mut Self {
        self.max_malformed_per_second = n;
        self
    }

    /// Heartbeats and the phi-accrual failure detector that decides when a
    /// remote node is unreachable (its watchers then get `Terminated` with
    /// [`StopReason::NodeUnreachable`](crate::StopReason::NodeUnreachable)). Default: Akka's, a heartbeat per
    /// second, threshold 10, acceptable pause 10 s (see
    /// [`HeartbeatConfig`]). Cost: one small frame each way per interval
    /// per connected node.
    pub fn set_heartbeat(&mut self, config: HeartbeatConfig) -> &mut Self {
        self.heartbeat = config;
        self
    }

    /// Delays between reconnect attempts to a node whose link is down and
    /// that has work waiting (watches, system messages, queued messages).
    /// Default 100 ms doubling to 10 s, 20% jitter ([`Backoff::default`]).
    pub fn set_reconnect_backoff(&mut self, backoff: Backoff) -> &mut Self {
        self.backoff = backoff;
        self
    }

    /// System messages kept per node until acknowledged. Default 20,000
    /// ([`DEFAULT_SYSTEM_MESSAGE_BUFFER`]); overflowing it quarantines the
    /// node. Cost: the encoded messages (tens of bytes each).
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_system_message_buffer(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.system_buffer = n)
    }

    /// The largest remote message, envelope included, this node sends or
    /// accepts. Default 64 MiB ([`DEFAULT_MAX_MESSAGE_SIZE`]); at most
    /// 2 GiB - 1 (`i32::MAX`: a received message's length shares a 32-bit
    /// field with one flag in the batch the actor decodes). A larger message is refused to the sender with
    /// [`SerializationError::TooLarge`](crate::SerializationError) (a
    /// bincode-encoded one as soon as its encoding crosses the limit); a
    /// peer's larger message is dropped as a dead letter while its
    /// fragments arrive, without buffering it.
    ///
    /// Messages over 256 KiB (or over the frame size, if that is smaller)
    /// are split into 64 KiB fragments sent one at a time on the link's
    /// large-message lane, with at most 256 KiB unacknowledged by the
    /// receiver, so that small messages and heartbeats on the same link
    /// wait behind a few fragments, never behind a whole large message
    /// (wire format and checks: `docs/PROTOCOL.md`, "Large messages").
    /// They are not ordered with small messages to the same actor (large
    /// messages between two nodes stay ordered among themselves). The receiver reassembles at most one large message per
    /// connection, in a buffer that grows as fragments arrive. Cost:
    /// nothing per small message beyond one size comparison. Both nodes
    /// should use the same limit.
    ///
    /// # Errors
    /// Zero, or more than `i32::MAX`. The configuration is left unchanged.
    pub fn set_max_message_size(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.max_message_size = n)
    }

    /// Propagates W3C trace contexts ([`TraceContext`](crate::TraceContext))
    /// in remote messages. Default off: a send then reads no context and
    /// its envelope carries no byte for one. On: a remote send made inside
    /// a [`TraceContext::scope`](crate::TraceContext::scope) carries that
    /// context (25 bytes more in its envelope, plus one for the extension
    /// block; a task-local read per send), and the receiving actor handles
    /// the message inside a scope of it ([`Ctx::trace_context`](crate::Ctx::trace_context)),
    /// so its own sends, replies to an ask included, carry it on. Only the
    /// sending node's setting matters: every node reads contexts it
    /// receives.
    pub fn set_trace_propagation(&mut self, on: bool) -> &mut Self {
        self.trace_propagation = on;
        self
    }

    /// Runs of messages on the wire: consecutive messages to one remote
    /// actor, queued before the link's writer takes them, travel as one
    /// envelope (up to 16 KiB), so the frame, the envelope and the
    /// recipient's lookup are paid once per run on both nodes. Announced
    /// in the handshake and used only toward a peer that announced it too,
    /// so nodes with it off (and nodes that predate it) interoperate; a
    /// node with it off refuses run envelopes as malformed. Order, credit
    /// and every limit are the same either way. Default true.
    pub fn set_message_runs(&mut self, on: bool) -> &mut Self {
        self.message_runs = on;
        self
    }

    /// Dials `node` (`name@host:port`) at `addr` instead of the address
    /// in its name: for a node behind NAT, a load balancer or a proxy
    /// (Akka's public versus bind hostname, seen from the dialing side).
    /// The peer must still identify as `node` in the handshake. Inbound
    /// connections are unaffected. Default: none, every node is dialed at
    /// its own address.
    pub fn set_route(&mut self, node: &str, addr: SocketAddr) -> &mut Self {
        self.routes.insert(node.to_owned(), addr);
        self
    }

    /// Untrusted mode (Akka's `untrusted-mode`), for a node that peers it
    /// does not control can reach: a remote `stop` of its actors is refused
    /// (and counted as a dead letter), and `resolve` from other nodes finds
    /// only the paths on [`set_lookup_paths`](Self::set_lookup_paths)
    /// (others look absent). Peers can still message and watch the actors
    /// whose refs they were given. Default off: every peer that
    /// authenticates may stop and look up any actor. Ask reply slots
    /// (`/temp/...`) are never looked up, in either mode. Cost: none per
    /// message.
    pub fn set_untrusted_mode(&mut self, on: bool) -> &mut Self {
        self.untrusted_mode = on;
        self
    }

    /// The paths other nodes may `resolve` in untrusted mode: exact
    /// (`/user/api`), or a subtree when the entry ends with `/`
    /// (`/user/workers/`). Default none. Ignored when untrusted mode is
    /// off.
    pub fn set_lookup_paths<I, S>(&mut self, paths: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.lookup_paths = paths.into_iter().map(Into::into).collect();
        self
    }

    /// The most remote nodes this system keeps an association with
    /// (outbound or inbound). Default 1,024 ([`DEFAULT_MAX_ASSOCIATIONS`]).
    /// At the limit, associations nothing uses (no ref to the node, no
    /// connection, no watch, no unacknowledged system message) are dropped
    /// to make room, those holding quarantine tombstones last. When every
    /// association is in use, a ref to a further node that arrives inside
    /// a message is a dead end (its messages are dead letters), `resolve` of one
    /// fails with `ResolveError::Unreachable`, and an inbound connection
    /// from one is closed; each is logged (sampled). Cost: a few kilobytes
    /// per association.
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_max_associations(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.max_associations = n)
    }

    /// How long an association nothing uses (no ref to the node, no
    /// connection, no dial, no watch, no unacknowledged system message) is
    /// kept before it is dropped, whether or not the table is full.
    /// Default 60 s ([`DEFAULT_ASSOCIATION_IDLE_TIMEOUT`]). Dropped after
    /// between one and one and a quarter times this (the table is swept
    /// every quarter of it, at most once per 10 ms). Associations holding
    /// quarantine tombstones are kept until the table is full (see
    /// [`set_max_associations`](Self::set_max_associations)), so a node
    /// that restarted is still recognised. What is lost is cached state
    /// only: the node's last known incarnation and reconnect backoff.
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_association_idle_timeout(&mut self, t: Duration) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.association_idle_timeout = t)
    }

    /// The most connection attempts in flight at once; further ones wait
    /// for a slot. Default 16 ([`DEFAULT_MAX_CONCURRENT_DIALS`]).
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_max_concurrent_dials(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.max_concurrent_dials = n)
    }

    /// The networks this system may dial at all (`10.0.0.0/8`,
    /// `127.0.0.1/32`, ...); `None`, the default, allows any. Checked on
    /// the address a node's name resolves to (or its route), before the
    /// socket is opened; a refused dial fails like an unreachable node,
    /// with a reason that names the address. Inbound connections are not
    /// affected.
    pub fn set_dial_allow_list(&mut self, networks: Option<Vec<IpNet>>) -> &mut Self {
        self.dial_allow_list = networks;
        self
    }

    /// The most recipients one link compresses to an id (Artery's
    /// actor-ref compression): the first message to a recipient defines an
    /// id with its path, later ones carry the id. Default 16,384
    /// ([`DEFAULT_MAX_RECIPIENT_IDS`]). Each costs the receiving node about
    /// 1,000 bytes plus its path (1.95 KB measured for a 1,000-byte path),
    /// charged so to the peer's share of
    /// [`set_peer_memory_budget`](Self::set_peer_memory_budget). A sender past the limit sends further recipients
    /// with their path in every envelope; a receiver refuses a definition
    /// past it as malformed, so both nodes should use the same value. Ask
    /// reply slots are never compressed (each is used about once), so a
    /// link lives forever under any rate of asks.
    ///
    /// # Errors
    /// Zero, or `u32::MAX` or more. The configuration is left unchanged.
    pub fn set_max_recipient_ids(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.max_recipient_ids = n)
    }

    /// Flow control per recipient: the envelope bytes this node lets a
    /// peer send each of its actors ahead of what the actor's mailbox has
    /// taken. Default 1 MiB ([`DEFAULT_RECIPIENT_WINDOW`]). A sender that
    /// has used a recipient's window waits (`send`) or gets `MailboxFull`
    /// (`tell`) until the receiving node hands some of it to the mailbox
    /// and grants more; every other recipient on the link keeps flowing,
    /// and the link never stops reading, so heartbeats are never stuck
    /// behind a full mailbox. Credit goes back in one small frame per half
    /// window. The sending node uses its own setting for the window it
    /// assumes, so both nodes should use the same value. Cost on the
    /// receiving node: at most one window (plus one message) per recipient
    /// whose mailbox is full, within
    /// [`set_max_parked_bytes`](Self::set_max_parked_bytes). Ask reply
    /// slots, recipients past [`set_max_recipient_ids`](Self::set_max_recipient_ids)
    /// and large messages are not windowed (see `docs/FAILURE_SEMANTICS.md`).
    ///
    /// # Errors
    /// Zero. The configuration is left unchanged.
    pub fn set_recipient_window(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.recipient_window = bytes)
    }

    /// The most bytes one connection holds for mailboxes that are full
    /// (see [`set_recipient_window`](Self::set_recipient_window)). Default
    /// 64 MiB ([`DEFAULT_MAX_PARKED_BYTES`]): 64 recipients with full
    /// mailboxes and full windows. Past it, messages for a full mailbox are
    /// dead letters, counted; only a sender that ignores its windows, or
    /// one saturating more recipients at once than this allows, meets it.
    pub fn set_max_parked_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_parked_bytes = bytes;
        self
    }

    /// The most memory all peers together may make this node hold, in
    /// bytes: their recipient-id tables (about 1,000 bytes plus the path
    /// per id), their messages waiting in actors' mailboxes until handled
    /// (each batch the buffer it keeps alive plus 256 bytes), batches
    /// parked for full mailboxes and large messages held for them, large
    /// messages being reassembled, and inbound connections whose handshake
    /// is pending ([`transport::PENDING_HANDSHAKE_COST`] each, with TLS
    /// [`transport::PENDING_TLS_HANDSHAKE_COST`], until the
    /// peer has proved itself, in a room of their own of 1/16 of the
    /// budget that connections never use; past it the oldest gives way to
    /// a newcomer). Connections hold at most the other 15/16 together.
    /// Default 256 MiB
    /// ([`DEFAULT_PEER_MEMORY_BUDGET`]): connections share 240 MiB of it,
    /// nearly the default per-connection bounds of four busy peers (64 MiB
    /// parked each), while a thousand connections can never take a
    /// machine's memory.
    ///
    /// Each connection may hold at most its share, an equal part of the
    /// budget among open connections but at least 1/16 of it, and so may
    /// all connections from one source address together (an equal part
    /// among addresses, at least 1/16). A connection that asks for more is
    /// refused what it asked (the id, the batch or the large message, as
    /// dead letters) and its reads pause until it is within its share
    /// again; it is disconnected if it stays over for 5 s, or goes over a
    /// third time with less than a minute within its share in between. See `docs/FAILURE_SEMANTICS.md`, "A peer
    /// over its share", and [`ActorSystem::peer_memory`](crate::ActorSystem::peer_memory)
    /// for the accounting.
    ///
    /// # Errors
    /// Less than [`MIN_PEER_MEMORY_BUDGET`] (1 MiB). The configuration is
    /// left unchanged.
    pub fn set_peer_memory_budget(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        self.checked(|c| c.peer_memory_budget = bytes)
    }

    /// The address peers know this node by, when it is not the socket it
    /// binds: `host` or `host:port`, where `host` may be a DNS name (a
    /// node behind NAT, or in a container reached by a service name). The
    /// node's identity (`name@host:port`, in every path of its actors) is
    /// this address: the handshake announces it, peers check it against
    /// the node they dialed, and node certificates must name it. Without a
    /// port, the bound port is used (so binding port 0 still works).
    /// Default: none, the bound socket address is the identity (a node
    /// bound to `0.0.0.0` should set this, or peers cannot name it).
    pub fn set_advertised_address(&mut self, addr: impl Into<String>) -> &mut Self {
        self.advertised = Some(addr.into());
        self
    }

    /// The transport's settings (frame size, queue capacity, timeouts).
    pub fn transport_mut(&mut self) -> &mut TransportConfig {
        &mut self.transport
    }

    /// Cluster membership settings, from the `[cluster]` section of a
    /// configuration file and `ACTORS_CLUSTER__*` variables (default: the
    /// defaults of `ClusterConfig::new`). `Cluster::join_configured` joins
    /// with them; `ClusterConfig::from(config.cluster())` starts a
    /// `ClusterConfig` from them, to change some in code (a lease, say).
    pub fn cluster(&self) -> &ClusterSettings {
        &self.cluster
    }

    /// How long a node may refuse reconnects after its link ended without
    /// a Close frame (EOF or reset: its process died, or its host rebooted)
    /// before it is declared unreachable, without waiting for the failure
    /// detector: watchers get `Terminated` with
    /// [`StopReason::NodeUnreachable`](crate::StopReason::NodeUnreachable),
    /// asks waiting on it fail with
    /// [`AskError::NodeDown`](crate::AskError::NodeDown), and
    /// [`RemoteEvent::Unreachable`](crate::RemoteEvent::Unreachable) is
    /// published. Only a refusal (`ECONNREFUSED`: nothing listens at its
    /// address) counts; a connect that times out is a silent network,
    /// left to the detector. Within the grace a node restarting on the
    /// same address comes back as a new incarnation (and its old one is
    /// quarantined as restarted). Default 1 s
    /// ([`DEFAULT_REFUSED_CONNECT_GRACE`]); the verdict comes within the
    /// grace and one connect. `Duration::ZERO` declares at the first
    /// refusal; a very long grace leaves every verdict to the detector.
    /// Cost: none until a link is lost.
    pub fn set_refused_connect_grace(&mut self, grace: Duration) -> &mut Self {
        self.refused_connect_grace = grace;
        self
    }
}

/// Settings of one actor, overriding the system's
/// ([`SystemConfig`]) for it alone: pass to
/// [`ActorSystem::spawn_with`](crate::ActorSystem::spawn_with) or
/// [`spawn_named_with`](crate::ActorSystem::spawn_named_with). A `Default`
/// plus `&mut Self` setters; what is not set follows the system.
///
/// ```
/// # use actors::{Actor, ActorResult, ActorSystem, Ctx, SpawnOptions};
/// # struct Audit;
/// # impl Actor for Audit {
/// #     type Msg = String;
/// #     async fn handle(&mut self, _: String, _: &mut Ctx<Self>) -> ActorResult { Ok(()) }
/// # }
/// # #[tokio::main] async fn main() -> Result<(), actors::ConfigError> {
/// let system = ActorSystem::local("doc").unwrap();
/// // A slow sink: a short queue, so producers feel its pace at once.
/// let audit = system.spawn_with(Audit, SpawnOptions::default().set_mailbox_capacity(16)?);
/// # let _ = audit;
/// # Ok::<(), actors::ConfigError>(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct SpawnOptions {
    pub(crate) mailbox_capacity: Option<usize>,
    pub(crate) mailbox_bytes: Option<usize>,
}

impl SpawnOptions {
    /// User messages this actor's mailbox holds before `tell` reports
    /// `MailboxFull` (see [`SystemConfig::set_mailbox_capacity`]). Default:
    /// the system's. A small mailbox pushes back on producers sooner; a
    /// large one absorbs bursts at the cost of memory and latency.
    ///
    /// # Errors
    /// Zero, as [`SystemConfig::set_mailbox_capacity`].
    pub fn set_mailbox_capacity(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        within("mailbox.capacity", n as u64, 1, u64::MAX).map_err(Invalid::in_code)?;
        self.mailbox_capacity = Some(n);
        Ok(self)
    }

    /// Bytes of remote messages this actor's mailbox queues before it is
    /// full (see [`SystemConfig::set_mailbox_bytes`]). Default: the
    /// system's.
    ///
    /// # Errors
    /// Zero, as [`SystemConfig::set_mailbox_bytes`].
    pub fn set_mailbox_bytes(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        within("mailbox.bytes", bytes as u64, 1, u64::MAX).map_err(Invalid::in_code)?;
        self.mailbox_bytes = Some(bytes);
        Ok(self)
    }

    /// The mailbox bounds for an actor of a system configured by `system`.
    pub(crate) fn mailbox(&self, system: &SystemConfig) -> (usize, usize) {
        (
            self.mailbox_capacity.unwrap_or(system.mailbox_capacity),
            self.mailbox_bytes.unwrap_or(system.mailbox_bytes),
        )
    }
}

/// `ClusterConfig::set_max_members`'s default: members (other than this
/// node) one node keeps. About 200 bytes each.
pub const DEFAULT_MAX_MEMBERS: usize = 4096;

/// The shortest `probe_period`, `probe_rtt` and `announce_interval` of
/// cluster membership: 1 ms. Timers of zero would spin the membership
/// task. `ClusterConfig`'s setters and the loader refuse shorter ones.
pub(crate) const MIN_CLUSTER_PERIOD: Duration = Duration::from_millis(1);

/// The smallest membership packet: 512 bytes, room for the header, a
/// probe and a few piggybacked updates.
pub(crate) const MIN_CLUSTER_PACKET_SIZE: usize = 512;

/// The largest membership packet: 65,507 bytes, the most one UDP datagram
/// carries over IPv4; a larger packet could not be sent.
pub(crate) const MAX_CLUSTER_PACKET_SIZE: usize = 65_507;

/// The most cluster events a subscriber may fall behind: `usize::MAX / 2`,
/// the largest capacity of tokio's broadcast channel (a larger one
/// panics).
pub(crate) const MAX_CLUSTER_EVENT_CAPACITY: usize = usize::MAX / 2;

/// The downing strategies a configuration file can name (the lease-based
/// one needs a lease, which is code). `ClusterConfig` turns it into a
/// `DowningStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Downing {
    /// `keep-majority`.
    KeepMajority,
    /// `static-quorum`, with `ClusterSettings::quorum_size`.
    StaticQuorum,
    /// `keep-oldest`, with `ClusterSettings::down_if_alone`.
    KeepOldest,
    /// `down-all`.
    DownAll,
}

impl Downing {
    /// The strategy's name in a configuration file (as
    /// `DowningStrategy::name` spells it).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::KeepMajority => "keep-majority",
            Self::StaticQuorum => "static-quorum",
            Self::KeepOldest => "keep-oldest",
            Self::DownAll => "down-all",
        }
    }

    /// Every strategy a file can name.
    pub(crate) const ALL: [Self; 4] = [
        Self::KeepMajority,
        Self::StaticQuorum,
        Self::KeepOldest,
        Self::DownAll,
    ];
}

/// Cluster membership settings as data: what the `[cluster]` section of a
/// configuration file holds (see `actors/reference.toml`), kept in
/// [`SystemConfig::cluster`]. The membership itself is configured with
/// `actors::cluster::ClusterConfig`, which is built from these
/// (`ClusterConfig::from(&settings)`, or `Cluster::join_configured`) and
/// has a setter for each (`set_` and the key's name; `set_probe` for
/// `probe_period` and `probe_rtt` together, `set_downing` for the
/// strategy and its parameters), with the same defaults and the same
/// rules (the `check_*` functions of this type).
///
/// The configuration loader is the only way to change them, and it
/// refuses values out of range, so they
/// are always valid (a static quorum always has its size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    pub(crate) seeds: Vec<String>,
    #[serde(with = "crate::config::file::no_addr")]
    pub(crate) udp_bind: Option<SocketAddr>,
    #[serde(with = "crate::config::file::no_addr")]
    pub(crate) udp_advertise: Option<SocketAddr>,
    #[serde(with = "humantime_serde")]
    pub(crate) probe_period: Duration,
    #[serde(with = "humantime_serde")]
    pub(crate) probe_rtt: Duration,
    #[serde(with = "humantime_serde")]
    pub(crate) stable_after: Duration,
    pub(crate) downing: Downing,
    /// `Some` exactly when `downing` is `StaticQuorum`.
    #[serde(with = "crate::config::file::none_count")]
    pub(crate) quorum_size: Option<usize>,
    /// Used when `downing` is `KeepOldest`; `true` otherwise.
    pub(crate) down_if_alone: bool,
    /// `None`: the default, derived from `stable_after`; `Some(None)`:
    /// off.
    #[serde(with = "crate::config::file::unstable")]
    pub(crate) down_all_when_unstable: Option<Option<Duration>>,
    pub(crate) shutdown_when_downed: bool,
    #[serde(with = "humantime_serde")]
    pub(crate) remove_down_after: Duration,
    #[serde(with = "humantime_serde")]
    pub(crate) announce_interval: Duration,
    #[serde(with = "crate::config::file::bytes")]
    pub(crate) max_packet_size: usize,
    pub(crate) max_members: usize,
    pub(crate) event_capacity: usize,
}

impl Default for ClusterSettings {
    /// No seeds (the first node of a cluster), UDP on the TCP endpoint's
    /// address, foca's LAN periods (probe every 1.5 s, answer within
    /// 0.5 s), keep-majority deciding after 10 s of a stable view, down
    /// members forgotten 15 s after, seeds contacted every second,
    /// packets of at most 1,400 bytes (under a typical MTU).
    fn default() -> Self {
        Self {
            seeds: Vec::new(),
            udp_bind: None,
            udp_advertise: None,
            probe_period: Duration::from_millis(1500),
            probe_rtt: Duration::from_millis(500),
            stable_after: Duration::from_secs(10),
            downing: Downing::KeepMajority,
            quorum_size: None,
            down_if_alone: true,
            down_all_when_unstable: None,
            shutdown_when_downed: true,
            remove_down_after: Duration::from_secs(15),
            announce_interval: Duration::from_secs(1),
            max_packet_size: 1400,
            max_members: DEFAULT_MAX_MEMBERS,
            event_capacity: 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{SpawnOptions, SystemConfig};

    #[test]
    fn spawn_options_override_the_system_only_where_set() {
        let mut system = SystemConfig::default();
        system
            .set_mailbox_capacity(10)
            .unwrap()
            .set_mailbox_bytes(1000)
            .unwrap();
        assert_eq!(SpawnOptions::default().mailbox(&system), (10, 1000));
        let mut one = SpawnOptions::default();
        one.set_mailbox_bytes(5).unwrap();
        assert_eq!(one.mailbox(&system), (10, 5));
        let e = one.set_mailbox_capacity(0).unwrap_err();
        assert!(e.to_string().contains("\"mailbox.capacity\""), "{e}");
        assert_eq!(
            one.mailbox(&system),
            (10, 5),
            "a refused value changes nothing"
        );
    }

    /// The setters refuse what the file refuses, with the same words, and
    /// leave the configuration as it was.
    #[test]
    fn setters_check_the_loader_rules() {
        let mut config = SystemConfig::default();
        let before = format!("{config:?}");
        for (e, key, says) in [
            (
                config.set_mailbox_capacity(0).unwrap_err(),
                "mailbox.capacity",
                "at least 1",
            ),
            (
                config.set_mailbox_bytes(0).unwrap_err(),
                "mailbox.bytes",
                "at least 1",
            ),
            (
                config.set_resolve_timeout(Duration::ZERO).unwrap_err(),
                "remote.resolve_timeout",
                "greater than zero",
            ),
            (
                config.set_system_message_buffer(0).unwrap_err(),
                "remote.system_message_buffer",
                "at least 1",
            ),
            (
                config.set_max_message_size(1 << 31).unwrap_err(),
                "remote.max_message_size",
                "at most 2147483647, found 2147483648",
            ),
            (
                config.set_max_associations(0).unwrap_err(),
                "remote.max_associations",
                "at least 1",
            ),
            (
                config
                    .set_association_idle_timeout(Duration::ZERO)
                    .unwrap_err(),
                "remote.association_idle_timeout",
                "greater than zero",
            ),
            (
                config.set_max_concurrent_dials(0).unwrap_err(),
                "remote.max_concurrent_dials",
                "at least 1",
            ),
            (
                config.set_max_recipient_ids(u32::MAX as usize).unwrap_err(),
                "remote.max_recipient_ids",
                "at most 4294967294",
            ),
            (
                config.set_recipient_window(0).unwrap_err(),
                "remote.recipient_window",
                "at least 1",
            ),
        ] {
            let message = e.to_string();
            assert!(
                message.starts_with(&format!("invalid value for \"{key}\" set in code: ")),
                "{message}"
            );
            assert!(message.contains(says), "{message} lacks {says}");
            let file = format!(
                "[{}]\n{} = 0",
                key.split('.').next().unwrap(),
                key.split('.').nth(1).unwrap()
            );
            if says.contains("at least 1") {
                let from_file = SystemConfig::from_toml_str(&file).unwrap_err().to_string();
                assert!(
                    from_file.ends_with(": must be at least 1, found 0"),
                    "{from_file}"
                );
            }
        }
        assert_eq!(format!("{config:?}"), before);
        config
            .set_max_message_size(i32::MAX as usize)
            .unwrap()
            .set_max_recipient_ids(u32::MAX as usize - 1)
            .unwrap();
        config.validate().unwrap();
    }
}
