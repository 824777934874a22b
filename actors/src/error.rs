//! Error types of the actor runtime.

use std::time::Duration;

/// A message could not be serialized or deserialized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SerializationError {
    /// Encoding failed; the message type cannot be represented.
    #[error("encode failed: {0}")]
    Encode(String),
    /// Decoding failed: malformed, truncated, or a length above the limit.
    #[error("decode failed: {0}")]
    Decode(String),
    /// The value decoded but did not use all the bytes.
    #[error("decoded {used} of {len} bytes; trailing bytes")]
    TrailingBytes {
        /// Bytes consumed.
        used: usize,
        /// Bytes given.
        len: usize,
    },
    /// The encoded message exceeds the size limit; it was not sent and the
    /// link is unaffected. Bincode-encoded messages are refused as soon as
    /// they cross the limit, without being serialized whole. Send less per
    /// message, or raise the limit on both nodes.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Encoded size, envelope included. For a message refused while it
        /// was being encoded, the size it had reached when it crossed the
        /// limit (a lower bound).
        size: usize,
        /// The limit: the maximum frame size, or the maximum message size
        /// for messages sent on the large-message lane.
        limit: usize,
    },
    /// A remote message was sent from inside a message's encoder (its
    /// `Serialize` impl or `RemoteMessage::encode`), which runs under the
    /// link's locks; nothing was sent. Send it before or after encoding.
    #[error(
        "a remote message was sent from inside a message's encoder; send it outside `Serialize`"
    )]
    Reentrant,
}

/// Why a `tell` or `send` failed. The message comes back where it can.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError<M> {
    /// The recipient's mailbox is full (for a remote recipient: it has used
    /// its window on the link, so its mailbox on the other node is full or
    /// its credit is on the way). Retry, or use `send().await`, which
    /// waits for room.
    #[error("mailbox full")]
    MailboxFull(M),
    /// The link to the recipient's node is full: its outbound queue, or
    /// the buffer of messages waiting for the connection
    /// (`SystemConfig::set_pending_capacity`). The node or the network is
    /// behind, not necessarily this actor; other recipients on that node
    /// are refused too. Retry, or use `send().await`, which waits for room.
    #[error("link to the recipient's node full")]
    LinkFull(M),
    /// The recipient has stopped (or its node's link is gone).
    #[error("actor is gone")]
    ActorGone(M),
    /// The message could not be serialized for a remote recipient.
    #[error("serialization failed: {0}")]
    Serialization(#[from] SerializationError),
    /// A [`NamedRef`](crate::NamedRef) found no actor to send to: its
    /// path did not resolve (after its retries); the message comes back.
    /// Boxed, so this rare case does not make every `tell`'s result larger.
    #[error("unresolved: {1}")]
    Unresolved(M, Box<ResolveError>),
    /// A cluster singleton's ref (`actors::singleton::SingletonRef`) holds its
    /// `buffer_bytes` of messages while the singleton moves or is not yet
    /// known: the message comes back and is also counted as a dead letter
    /// (reason `buffer_full`). Retry once the singleton runs
    /// (`SingletonRef::location`), or raise
    /// `SingletonSettings::buffer_bytes`.
    #[error("singleton buffer full (at most {1} bytes)")]
    BufferFull(M, usize),
}

impl<M> SendError<M> {
    /// The undelivered message, if the error carries it.
    pub fn into_message(self) -> Option<M> {
        match self {
            Self::MailboxFull(m)
            | Self::LinkFull(m)
            | Self::ActorGone(m)
            | Self::Unresolved(m, _)
            | Self::BufferFull(m, _) => Some(m),
            Self::Serialization(_) => None,
        }
    }
}

/// Why an `ask` got no reply. Every variant but `Timeout` (and
/// `MailboxFull`/`LinkFull`, which wait for room) is returned as soon as
/// the failure is known, not at the timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// No reply within the timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The recipient had stopped when the request was sent, or stopped
    /// with the request still queued: failed at once, not at the
    /// timeout. The request was not handled.
    #[error("actor is gone")]
    ActorGone,
    /// The handler that had the request failed (returned an error) or
    /// panicked before it replied: failed at once, with the handler's
    /// error or panic message, whether the actor then stops or restarts,
    /// and whether it is local or on another node. The request was
    /// handled in part; retry only what is safe to repeat.
    #[error("the handler failed on the request: {0}")]
    HandlerFailed(String),
    /// Every handle to the reply ref was dropped without a reply (the
    /// handler returned `Ok` without answering, or a task it gave the ref
    /// to ended), locally or on the recipient's node: failed at once, as
    /// no reply can come any more.
    #[error("the reply ref was dropped without a reply")]
    ReplyDropped,
    /// The recipient's mailbox was full (for a remote recipient: it had no
    /// credit on the link) for the whole timeout; the request was not sent.
    #[error("mailbox full")]
    MailboxFull,
    /// The link to the recipient's node was full (its queue, or the buffer
    /// of messages waiting for the connection) for the whole timeout; the
    /// request was not sent.
    #[error("link to the recipient's node full")]
    LinkFull,
    /// The recipient's node cannot be reached: its incarnation was
    /// quarantined, or the node is judged unreachable (until a link to it
    /// comes back; see `docs/FAILURE_SEMANTICS.md`), before the request
    /// was sent; nothing was sent or dialed.
    #[error("node unreachable: {0}")]
    NodeUnreachable(String),
    /// The recipient's node went down while the ask waited, so no reply
    /// can come: it was declared unreachable (failure detector, or its
    /// link was lost and reconnects were refused), the recipient's
    /// incarnation was quarantined (restarted, shut down), or connecting
    /// to it failed (the request may never have left). Failed at once
    /// rather than at the timeout, as Erlang's `gen_server:call` does on
    /// `noconnection`. The request may or may not have been handled: retry
    /// only what is safe to repeat, after a new `resolve` if the node
    /// restarted.
    #[error("node {node} down while the ask waited: {reason}")]
    NodeDown {
        /// The node (`name@host:port`).
        node: String,
        /// Why it is considered down.
        reason: String,
    },
    /// The request or the reply could not be (de)serialized.
    #[error("serialization failed: {0}")]
    Serialization(#[from] SerializationError),
    /// The recipient's node turned the request into a dead letter and said
    /// why (no actor at that path, an actor taking another type, ...):
    /// failed at once rather than at the timeout. The request was not
    /// handled.
    #[error("request undeliverable: {0}")]
    Undeliverable(String),
    /// A [`NamedRef`](crate::NamedRef) found no actor to ask: its path did
    /// not resolve (after its retries); nothing was sent.
    #[error("unresolved: {0}")]
    Unresolved(ResolveError),
}

/// Why [`ActorRef::stop_after_queued`](crate::ActorRef::stop_after_queued)
/// did not queue a stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StopError {
    /// The actor had already stopped; nothing to do.
    #[error("actor is gone")]
    ActorGone,
    /// The link to a remote actor's node is full (its queue, or the
    /// buffer of what waits for the connection): the stop was not sent.
    /// Retry later, or use `stop` (a reliable system message, which does
    /// not wait for the queued messages).
    #[error("link to the actor's node full: the stop was not sent")]
    LinkFull,
    /// The remote actor's node cannot be reached: its incarnation is
    /// quarantined (it restarted or shut down), so the actor is gone.
    #[error("node unreachable: {0}")]
    NodeUnreachable(String),
    /// The stop was asked for from inside a message's encoder (its
    /// `Serialize` impl), which runs under the link's locks; nothing was
    /// sent.
    #[error("a remote stop was asked for from inside a message's encoder")]
    Reentrant,
}

/// Why a path could not be resolved to a ref.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The path does not parse; see [`ActorPath`](crate::ActorPath) for the form.
    #[error("invalid actor path {path:?}: {reason}")]
    InvalidPath {
        /// The input.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// No actor lives at that path.
    #[error("no actor at {0}")]
    NotFound(String),
    /// `M`'s manifest has the 32-bit id of another type's manifest in
    /// this process: rename one of them.
    #[error("manifest {manifest:?} has id {id:#010x}, which {registered:?} has already")]
    ManifestCollision {
        /// The manifest of the type asked for.
        manifest: &'static str,
        /// The id both hash to.
        id: u32,
        /// The manifest registered first.
        registered: &'static str,
    },
    /// `M`'s manifest is the one another type has in this process, and
    /// `#[derive(RemoteMessage)]` gave it to at least one of them by
    /// default (`<package>.<Type>`): two types of one name in one
    /// package. Give one a name of its own with
    /// `#[remote(manifest = "...")]`.
    #[error(
        "manifest {manifest:?} is both {registered_type}'s and {this_type}'s (two types of one name in one package?): give one its own with #[remote(manifest = \"...\")]"
    )]
    ManifestShared {
        /// The manifest.
        manifest: &'static str,
        /// The type registered with it first.
        registered_type: &'static str,
        /// The type asked for.
        this_type: &'static str,
    },
    /// An actor lives there but takes another message type.
    #[error("actor at {path} takes {actual}, not {expected}")]
    WrongType {
        /// The path.
        path: String,
        /// The manifest asked for.
        expected: String,
        /// The actor's manifest.
        actual: String,
    },
    /// The node cannot be reached.
    #[error("node {addr} unreachable: {reason}")]
    Unreachable {
        /// The node's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// No answer within the timeout.
    #[error("no answer from {addr} within {timeout:?}")]
    Timeout {
        /// The node's address.
        addr: String,
        /// The timeout.
        timeout: Duration,
    },
    /// This system has no remoting, so it cannot reach other nodes.
    #[error("remoting is not enabled on this actor system")]
    NoRemoting,
}

/// Why an actor could not be spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The name is taken by a live actor.
    #[error("an actor named {0:?} already exists")]
    NameTaken(String),
    /// Names may not be empty, start with `$`, or contain `/`, `#`, `@` or whitespace.
    #[error("invalid actor name {0:?}")]
    InvalidName(String),
    /// The system is shutting down.
    #[error("the actor system is shutting down")]
    ShuttingDown,
    /// The actor's message type has a manifest whose 32-bit id another
    /// type's manifest already has in this process: rename one of them.
    #[error("manifest {manifest:?} has id {id:#010x}, which {registered:?} has already")]
    ManifestCollision {
        /// The actor's message type's manifest.
        manifest: &'static str,
        /// The id both hash to.
        id: u32,
        /// The manifest registered first.
        registered: &'static str,
    },
    /// The actor's message type has the manifest another type has in this
    /// process, and `#[derive(RemoteMessage)]` gave it to at least one of
    /// them by default (`<package>.<Type>`): two types of one name in one
    /// package. Give one a name of its own with
    /// `#[remote(manifest = "...")]`.
    #[error(
        "manifest {manifest:?} is both {registered_type}'s and {this_type}'s (two types of one name in one package?): give one its own with #[remote(manifest = \"...\")]"
    )]
    ManifestShared {
        /// The manifest.
        manifest: &'static str,
        /// The type registered with it first.
        registered_type: &'static str,
        /// The actor's message type.
        this_type: &'static str,
    },
}

/// Why a system could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemError {
    /// The system name is empty or contains characters a path cannot hold.
    #[error("invalid system name {0:?}")]
    InvalidName(String),
    /// The transport failed to bind.
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
    /// `SystemConfig::set_advertised_address` is not `host` or
    /// `host:port` with a host a path can hold.
    #[error("invalid advertised address {0:?}: expected host or host:port")]
    InvalidAdvertised(String),
}
