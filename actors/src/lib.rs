//! An actor runtime on tokio whose refs work the same whether the actor is
//! in this process or on another node.
//!
//! ```
//! use std::time::Duration;
//! use actors::{Actor, ActorRef, ActorSystem, Ctx, RemoteMessage};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Greeter { Greet(String, ActorRef<String>) }
//! impl RemoteMessage for Greeter { const MANIFEST: &'static str = "doc.Greeter"; }
//! struct G;
//! impl Actor for G {
//!     type Msg = Greeter;
//!     async fn handle(&mut self, Greeter::Greet(who, reply): Greeter, _: &mut Ctx<Self>) {
//!         let _ = reply.tell(format!("hello, {who}"));
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
//! - Messages that cross nodes implement [`RemoteMessage`]: serde plus a
//!   stable manifest name. Refs inside messages serialize as their path.
//!   Messages from one actor to another are delivered in order, except
//!   large ones (over 256 KiB encoded): these travel in fragments on a
//!   separate lane so they never hold up small messages and heartbeats,
//!   and are ordered only among themselves (see
//!   [`SystemConfig::set_max_message_size`]).
//! - Dead letters (messages to stopped or unknown actors, undecodable or
//!   mistyped remote messages) are counted ([`ActorSystem::dead_letters`])
//!   and logged.
//!
//! Paths look like `tcp://system@host:port/user/name` (see [`ActorPath`]).
//!
//! # Layout
//! Bottom-up: a module imports only modules listed above it, never one
//! that imports it back (`docs/ARCHITECTURE.md` draws the layers, says
//! where the hot path runs and gives the lock order; a test checks the
//! order).
//! - `error`: the error types. `path`: [`ActorPath`]. `lifecycle`:
//!   [`StopReason`], [`Terminated`].
//! - `bincode_format`: bincode 2's message format, our serializer and
//!   deserializer (bounded). `serialization`: [`Serializer`], [`Bincode`],
//!   [`RemoteMessage`], [`SerializerId`], [`MsgPack`], [`SharedBytes`],
//!   the decode scope, the extension block of a message. `msgpack`:
//!   MessagePack's format, bounded (the serializer for messages that
//!   evolve). `trace`: [`TraceContext`], W3C trace context propagation.
//! - `config`: [`SystemConfig`] and its defaults.
//! - `config_file`: [`SystemConfig::load`] and friends, from TOML and
//!   `ACTORS_*` variables; every key is in `actors/reference.toml`
//!   ([`REFERENCE_CONFIG`]).
//! - `mailbox`: bounded batch-swapping mailbox with a system queue.
//! - `watch`: death-watch plumbing, [`Watch`].
//! - `registry`: local targets by path, the `Target` trait the remote
//!   reader delivers into, dead letters.
//! - `remote`: associations and everything on the wire, in units:
//!   `envelope`, `compression`, `system_msg`, `reliable`, `liveness`,
//!   `events` ([`RemoteEvent`]) (pure); `link`, `large`, `inbound`, `net`,
//!   `context`, `requests`, `association`, `outbound`.
//! - `node`: this node's registry and remoting, what decoded refs resolve
//!   against.
//! - `cell`: a local actor's runtime side and an ask's reply slot.
//! - `actor_ref`: [`ActorRef`] (local, remote, ask slot), [`SendFuture`].
//! - `system`: [`ActorSystem`]: building, resolve, shutdown.
//! - `actor`: [`Actor`], [`Ctx`], spawning and the actor's task.
//!
//! # Crate feature flags
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

// Layers, bottom up; a module imports only modules above it in this list
// (docs/ARCHITECTURE.md draws it).
mod actor;
mod actor_ref;
mod bincode_format;
mod cell;
mod config;
mod config_file;
#[cfg(test)]
mod differential;
mod error;
mod lifecycle;
mod mailbox;
mod msgpack;
mod node;
mod path;
mod registry;
mod remote;
mod serialization;
mod system;
mod timer;
mod trace;
mod watch;

// Lets `actors::` paths in `differential.rs` (shared with the fuzz target)
// name this crate from its own unit tests.
#[cfg(test)]
extern crate self as actors;

pub use actor::{Actor, Ctx};
pub use actor_ref::{ActorRef, SendFuture};
pub use config::{
    DEFAULT_ASSOCIATION_IDLE_TIMEOUT, DEFAULT_MAILBOX_BYTES, DEFAULT_MAILBOX_CAPACITY,
    DEFAULT_MAX_ASSOCIATIONS, DEFAULT_MAX_CONCURRENT_DIALS, DEFAULT_MAX_MALFORMED_PER_SECOND,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_PARKED_BYTES, DEFAULT_MAX_RECIPIENT_IDS,
    DEFAULT_PENDING_CAPACITY, DEFAULT_RECIPIENT_WINDOW, DEFAULT_REFUSED_CONNECT_GRACE,
    DEFAULT_RESOLVE_TIMEOUT, DEFAULT_SYSTEM_MESSAGE_BUFFER, SystemConfig,
};
pub use config_file::{ConfigError, ConfigOrigin, ENV_PREFIX, REFERENCE_CONFIG};
pub use error::{
    AskError, ResolveError, SendError, SerializationError, SpawnError, StopError, SystemError,
};
pub use ipnet::IpNet;
pub use lifecycle::{StopReason, Terminated};
pub use path::{ActorPath, MAX_NAME_LEN, MAX_PATH_ELEMENTS, MAX_PATH_LEN};
#[doc(hidden)]
pub use remote::fuzz_decode_envelope;
pub use remote::{LARGE_MESSAGE_THRESHOLD, RemoteEvent};
pub use serialization::{
    Bincode, MsgPack, RemoteMessage, Serializer, SerializerId, SharedBytes, manifest_id,
};
pub use system::ActorSystem;
pub use timer::TimerKey;
pub use trace::{TraceContext, TraceParentError};
pub use transport::{Backoff, HeartbeatConfig};
pub use watch::Watch;

/// Internals exposed for this crate's fuzz targets only; not an API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bincode_format::{FormatError, decode_bincode_format, encode_bincode_format};
}
