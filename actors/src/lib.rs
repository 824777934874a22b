//! An actor runtime on tokio whose refs work the same whether the actor is
//! in this process or on another node.
//!
//! ```
//! use std::time::Duration;
//! use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, RemoteMessage)]
//! #[remote(manifest = "doc.Greeter")]
//! enum Greeter { Greet(String, ActorRef<String>) }
//! struct G;
//! impl Actor for G {
//!     type Msg = Greeter;
//!     async fn handle(&mut self, Greeter::Greet(who, reply): Greeter, _: &mut Ctx<Self>) -> ActorResult {
//!         let _ = reply.tell(format!("hello, {who}"));
//!         Ok(())
//!     }
//! }
//! # #[tokio::main] async fn main() {
//! let a = ActorSystem::remote("a", "127.0.0.1:0".parse().unwrap()).await.unwrap();
//! let b = ActorSystem::remote("b", "127.0.0.1:0".parse().unwrap()).await.unwrap();
//! a.spawn_named("greeter", G).unwrap();
//! let path = format!("tcp://{}/user/greeter", a.node());
//! let greeter = b.resolve::<Greeter>(&path).await.unwrap();
//! let reply = greeter.ask(|r| Greeter::Greet("b".into(), r), Duration::from_secs(5)).await;
//! assert_eq!(reply.unwrap(), "hello, b");
//! # }
//! ```
//!
//! # Model
//! - An [`Actor`] handles one message at a time on its own task; its
//!   [`ActorRef`] is typed by its message type. `tell` never waits, `send`
//!   waits for mailbox room, `ask` builds a request around a reply ref and
//!   waits at most a timeout.
//! - Mailboxes are bounded (see [`SystemConfig::set_mailbox_capacity`]);
//!   system messages (stop, termination notices) go before user messages.
//! - [`ActorRef::watch`] and [`Ctx::watch`] deliver [`Terminated`] with a
//!   [`StopReason`] when an actor stops, panics, or its node becomes
//!   unreachable.
//! - Supervision: a hook that fails (returns an error or panics) is
//!   handled by its supervisor's [`SupervisorStrategy`]: restart in place
//!   (the path and every ref stay valid), stop, or escalate to the parent;
//!   one-for-one or all-for-one, with a restart limit and optional backoff.
//!   Actors spawned from a factory ([`ActorSystem::spawn_supervised`],
//!   [`Ctx::spawn_child`]) can be restarted; children nest under their
//!   parent's path and stop before it.
//! - Messages that cross nodes implement [`RemoteMessage`] (derive it):
//!   serde plus a stable manifest name; `Vec`, `Option`, `Result`, maps
//!   and tuples of them are remote messages too, named after their parts. Refs inside messages serialize as their path.
//!   Messages from one actor to another are delivered in order, except
//!   large ones (over 256 KiB encoded): these travel in fragments on a
//!   separate lane so they never hold up small messages and heartbeats,
//!   and are ordered only among themselves (see
//!   [`SystemConfig::set_max_message_size`]).
//! - Dead letters (messages to stopped or unknown actors, undecodable or
//!   mistyped remote messages) are counted ([`ActorSystem::dead_letters`])
//!   and logged.
//! - Metrics go through the [`metrics`](https://docs.rs/metrics) facade:
//!   install a recorder before building a system, or none (then nothing is
//!   measured). Names, units and labels are in the "Metrics" table of
//!   `docs/OPERATIONS.md`; `examples/metrics_prometheus.rs` serves them
//!   for Prometheus.
//!
//! Paths look like `tcp://system@host:port/user/name` (see [`ActorPath`]).
//!
//! # Guides
//! The repository's `docs/` folder has a guide per topic: `ACTORS.md`
//! (actors, supervision, routers), `REMOTING.md` (remote messages,
//! serializers, rolling upgrades), `FAILURE_SEMANTICS.md`, `CLUSTER.md`,
//! `SHARDING.md`,
//! `CONFIGURATION.md`, `SECURITY.md`, `OPERATIONS.md` (logs, metrics,
//! shutdown, limits), `PERFORMANCE.md`, and the wire format in
//! `PROTOCOL.md`.
//!
//! # Public modules
//! - [`cluster`]: membership over authenticated UDP, cluster-wide groups.
//! - [`router`]: routers in front of groups and pools of routees. Its
//!   types are also at the crate root.
//! - [`sharding`]: entities by id spread over the cluster's members,
//!   moved when members come and go.
//! - [`singleton`]: cluster singletons, one actor in the cluster on its
//!   oldest hosting member, and refs that buffer while it moves.
//!
//! # Layout
//! Bottom-up: a module imports only modules listed above it, never one
//! that imports it back (`docs/ARCHITECTURE.md` draws the layers, says
//! where the hot path runs and gives the lock order; a test checks this
//! order against the imports).
//! - `error`: the error types. `path`: [`ActorPath`]. `lifecycle`:
//!   [`StopReason`], [`Terminated`]. `dead_letter`: [`DeadLetterReason`]
//!   and [`MalformedKind`], the typed reasons logs and metrics label by.
//! - `reply`: what fails an ask at once when its reply ref is dropped
//!   unanswered (the handler failed, the actor stopped).
//! - `bincode_format`: bincode 2's message format, our serializer and
//!   deserializer (bounded), in units: `decode`, `encode`. `msgpack`:
//!   MessagePack's format, bounded (the serializer for messages that
//!   evolve). `trace`: [`TraceContext`], W3C trace context propagation.
//!   `serialization`: [`Serializer`], [`Bincode`], [`MsgPack`],
//!   [`RemoteMessage`], [`SerializerId`]; in units: `manifest`
//!   ([`manifest_id`], the built-in impls, the registry of manifests
//!   seen), `scope` (the decode scope, [`SharedBytes`]), `record` (the
//!   extension block of a message, decoding a record by its serializer).
//! - `telemetry`: the metrics this crate emits through the `metrics`
//!   facade (names in the "Metrics" table of `docs/OPERATIONS.md`), and
//!   their handles, in units: `catalog` (every metric as data, pure),
//!   `system` (per system and actor type), `peer` (per peer node),
//!   `cluster` (membership, singletons, sharding).
//! - `config`: [`SystemConfig`] and its defaults; [`ClusterSettings`],
//!   the cluster's settings as data.
//! - `config::file`: [`SystemConfig::load`] and friends: serde section
//!   structs loaded through [`figment`] from TOML, `ACTORS_*` variables
//!   ([`ActorsEnv`]) or an application's own figment
//!   ([`SystemConfig::from_section`]); every key is in
//!   `actors/reference.toml` ([`REFERENCE_CONFIG`]).
//! - `supervision`: [`SupervisorStrategy`], [`Directive`], the restart
//!   window and backoff (pure), what children tell their parent.
//! - `timer`: an actor's timers ([`TimerKey`]), one schedule per actor.
//! - `budget`: what peers' bytes make the node hold, one account with a
//!   node-wide limit and a share per connection and per address
//!   ([`PeerMemory`]); the `Charge` a queued batch carries.
//! - `mailbox`: bounded batch-swapping mailbox with a system queue.
//! - `watch`: death-watch plumbing, [`Watch`].
//! - `registry`: local targets by path, the `Target` trait the remote
//!   reader delivers into, dead letters.
//! - `poll_scope`: one poll of an actor's task as a scope, so that what
//!   it sends to a node can be handed to the link once (staged sends).
//! - `remote`: associations and everything on the wire, in units:
//!   `envelope`, `compression`, `system_msg`, `reliable`, `liveness`,
//!   `events` ([`RemoteEvent`]) (pure); `link`, `large`, `inbound` (the
//!   dispatcher a connection's reader delivers into, split by job:
//!   `bad_input` (pure), `conn`, `share`, `ids`, `runs`, `park`, `large`,
//!   `system`), `net`, `context`, `install` (which connection wins,
//!   which incarnation is quarantined; pure), `dial` (where and whether
//!   to dial), `requests`, `association`, `connect`, `outbound`.
//! - `node`: this node's registry and remoting, what decoded refs resolve
//!   against.
//! - `cell`: a local actor's runtime side and an ask's reply slot.
//! - `actor_ref`: [`ActorRef`] (local, remote, ask slot), [`SendFuture`];
//!   in units: `remote`, `reply` (reply refs), `send`, `ask`, `codec` (a
//!   ref inside a message).
//! - [`direct`]: [`DirectEncode`](direct::DirectEncode), the encoder
//!   `#[remote(direct)]` derives: bincode's bytes without serde's
//!   visitors.
//! - `system`: [`ActorSystem`]: building, resolve, shutdown.
//! - `actor`: [`Actor`], [`Ctx`], spawning and the actor's task, in
//!   units: `outcome` (how an instance's run ends), `children` (a child's
//!   supervision, a parent's reaction), `decode` (remote batches), `turn`
//!   (the run loop), `supervise` (instances and restarts), `spawn`.
//! - [`router`]: [`Router`] (groups and pools of routees behind one
//!   handle) and its [`RoutingLogic`]s; a library layer over the public
//!   actor API, in units: `logic` (the choices, pure), `messages`,
//!   `table`, `route` (routing on the caller's thread), `pool`, `manager`
//!   (the router actor), `builder`.
//! - `adapter`: message adapters ([`ActorSystem::adapter`],
//!   [`Ctx::adapter`]): a ref of another message type in front of an
//!   actor.
//! - `named`: [`NamedRef`], a ref by name that follows restarts
//!   ([`ActorSystem::named`]).
//! - [`cluster`]: [`Cluster`](cluster::Cluster) membership and groups,
//!   and routers that follow a group; `cluster::config`:
//!   [`ClusterConfig`](cluster::ClusterConfig), whose setters run the
//!   `[cluster]` rules of [`ClusterSettings`]. Pure: `cluster::wire`,
//!   `cluster::groups`, `cluster::suspicion`, `cluster::downing`,
//!   `cluster::view` (foca's table to subscribers' changes),
//!   `cluster::contact` (announce targets, the alone warning); the
//!   public types in `cluster::member`, `cluster::stats`,
//!   `cluster::error`; the handle in `cluster::handle` (its group calls
//!   in `cluster::routing`), the membership task in `cluster::task` (its
//!   downing wiring in `cluster::resolution`), what they share in
//!   `cluster::shared`.
//! - [`sharding`]: cluster sharding ([`Sharding`](sharding::Sharding),
//!   [`EntityRef`](sharding::EntityRef)); a pure allocation and shard
//!   state machine (`sharding::shard`, in units: `shard::alloc`, the shard
//!   of an id and its owner; `shard::view`, the view of the other regions;
//!   `shard::buffer`, what a moving shard buffers; `shard::state`, a
//!   shard's state; `shard::route` and `shard::handoff`, the machine's
//!   routing and its moves), the region actor, the hold after a pause
//!   (`sharding::pause`), entity stores.
//! - [`singleton`]: [`Singleton`](singleton::Singleton): placement and
//!   handover of a cluster singleton (the decisions pure, in
//!   `singleton::placement`; carried out by the manager task in
//!   `singleton::manager`), its settings (`singleton::settings`), leases
//!   (`singleton::lease`), and [`SingletonRef`](singleton::SingletonRef)
//!   (`singleton::proxy`) with its bounded buffer (`singleton::buffer`,
//!   pure).
//!
//! # Crate feature flags
//! - `derive` (default): `#[derive(RemoteMessage)]`, from the
//!   `remoting-actors-derive` proc-macro crate (syn, quote).
//! - `tls` (default): TLS 1.3 between nodes ([`SystemConfig::set_tls`]),
//!   through `transport`'s `tls` feature (rustls, ring). Without it nodes
//!   talk plain TCP, optionally with a shared secret.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

// In alphabetical order. The layers are the `# Layout` list above (bottom
// up), and the module edges each may import are the `edges actors` block of
// docs/ARCHITECTURE.md; tests/tests/it/layers.rs holds both to the code.
mod actor;
mod actor_ref;
mod adapter;
mod bincode_format;
mod budget;
mod cell;
pub mod cluster;
mod config;
mod dead_letter;
#[cfg(test)]
mod differential;
pub mod direct;
mod error;
mod lifecycle;
mod mailbox;
mod msgpack;
mod named;
mod node;
mod path;
mod poll_scope;
mod registry;
mod remote;
mod reply;
pub mod router;
mod serialization;
pub mod sharding;
pub mod singleton;
mod supervision;
mod system;
mod telemetry;
mod timer;
mod trace;
mod watch;

// Lets `actors::` paths in `differential.rs` (shared with the fuzz target)
// and in `#[derive(RemoteMessage)]`'s output name this crate from its own
// unit tests.
#[cfg(test)]
extern crate self as actors;

pub use actor::{Actor, ActorError, ActorResult, Ctx};
pub use actor_ref::{ActorRef, SendFuture};
/// Derives [`RemoteMessage`](trait@RemoteMessage) for a serde type (default
/// feature `derive`): the manifest is `<package>.<Type>` unless
/// `#[remote(manifest = "...")]` names it. See the trait for the rules.
#[cfg(feature = "derive")]
pub use actors_derive::RemoteMessage;
pub use config::ClusterSettings;
pub use config::file::{
    ActorsEnv, ConfigError, ConfigOrigin, ENV_PREFIX, REFERENCE_CONFIG, STRICT_ENV,
};
pub use config::{
    DEFAULT_ASSOCIATION_IDLE_TIMEOUT, DEFAULT_MAILBOX_BYTES, DEFAULT_MAILBOX_CAPACITY,
    DEFAULT_MAX_ASSOCIATIONS, DEFAULT_MAX_CONCURRENT_DIALS, DEFAULT_MAX_MALFORMED_PER_SECOND,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_PARKED_BYTES, DEFAULT_MAX_RECIPIENT_IDS,
    DEFAULT_PEER_MEMORY_BUDGET, DEFAULT_PENDING_CAPACITY, DEFAULT_RECIPIENT_WINDOW,
    DEFAULT_REFUSED_CONNECT_GRACE, DEFAULT_RESOLVE_TIMEOUT, DEFAULT_SYSTEM_MESSAGE_BUFFER,
    MIN_PEER_MEMORY_BUDGET, SpawnOptions, SystemConfig,
};
pub use dead_letter::{DeadLetterReason, MalformedKind};
pub use error::{
    AskError, ResolveError, SendError, SerializationError, SpawnError, StopError, SystemError,
};
/// The layered configuration library [`SystemConfig::from_figment`] and
/// [`SystemConfig::from_section`] take, re-exported so that an
/// application builds its figment with the same version.
pub use figment;
pub use ipnet::IpNet;
pub use lifecycle::{StopReason, Terminated};
pub use named::NamedRef;
pub use path::{ActorPath, MAX_NAME_LEN, MAX_PATH_ELEMENTS, MAX_PATH_LEN};
#[doc(hidden)]
pub use remote::fuzz_decode_envelope;
/// The envelope writer the links use, for test harnesses that play a
/// remote node by hand; not an API.
#[doc(hidden)]
pub use remote::wire;
pub use remote::{LARGE_MESSAGE_THRESHOLD, PeerMemory, RemoteEvent};
pub use router::{
    RestartLimit, Router, RouterBuilder, RouterError, RouterMsg, RoutingLogic, VIRTUAL_NODES,
};
pub use serialization::{
    Bincode, MAX_MANIFEST_LEN, MsgPack, RemoteMessage, Serializer, SerializerId, SharedBytes,
    manifest_id,
};
pub use supervision::{
    DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_WINDOW, Decider, Directive, Panicked, SupervisorStrategy,
};
pub use system::ActorSystem;
pub use timer::TimerKey;
pub use trace::{TraceContext, TraceParentError};
pub use transport::{Backoff, HeartbeatConfig};
pub use watch::Watch;

// The README's code blocks are doc tests: its first example must compile
// and run as written. Only under `cfg(doctest)`, so a packaged crate (whose
// README is copied elsewhere) never needs the file to build.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}

// The guides' Rust blocks are doc tests too (most are `ignore`d
// fragments; the whole ones must compile and run).
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../docs/ACTORS.md")]
    mod actors_guide {}
    #[doc = include_str!("../../docs/REMOTING.md")]
    mod remoting {}
    #[doc = include_str!("../../docs/CLUSTER.md")]
    mod cluster {}
    #[doc = include_str!("../../docs/SHARDING.md")]
    mod sharding_guide {}
    #[doc = include_str!("../../docs/CONFIGURATION.md")]
    mod configuration {}
    #[doc = include_str!("../../docs/SECURITY.md")]
    mod security {}
    #[doc = include_str!("../../docs/OPERATIONS.md")]
    mod operations {}
}

/// Internals exposed for this crate's fuzz targets only; not an API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bincode_format::{FormatError, decode_bincode_format, encode_bincode_format};
    pub use crate::serialization::ManifestBuf;
    pub use bytes::BytesMut;
}
