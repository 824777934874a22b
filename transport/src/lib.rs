//! A framed TCP transport for remote actor messaging: length-prefixed
//! frames, a handshake that identifies each node, batching writers and
//! pooled buffers.
//!
//! The transport knows nothing about actors. It moves opaque typed
//! [`Frame`]s between [`Endpoint`]s over [`Connection`]s:
//!
//! - **Batching writer**: one task per connection owns the socket's write
//!   half. [`Sender`]s append encoded frames to a shared buffer under a short
//!   lock; the writer swaps that buffer for an empty one, writes it with as
//!   few syscalls as the kernel allows, and repeats. A lone frame goes out at
//!   once; under load thousands share one write. No timer is involved.
//! - **Pooled buffers**: the writer ping-pongs two recycled buffers, the
//!   reader reads into one large buffer and hands bodies on as `Bytes`
//!   slices of it; the steady state allocates nothing per frame (a test
//!   counts).
//! - **Backpressure**: each connection queues at most
//!   [`TransportConfig::set_queue_capacity`] bytes; [`Sender::send`] waits for
//!   room, [`Sender::try_send`] hands the frame back with `Full`. Inbound,
//!   a [`Handler`] that awaits in [`Handler::on_batch_end`] stops the reader,
//!   and TCP pushes back on the peer.
//!
//! ```no_run
//! # async fn f() -> Result<(), transport::TransportError> {
//! use transport::{Endpoint, Frame, TransportConfig};
//! let server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), TransportConfig::default()).await?;
//! let client = Endpoint::bind("127.0.0.1:0".parse().unwrap(), TransportConfig::default()).await?;
//! let (conn, _inbound) = client.connect(server.local_addr()).await?.start_channel(64);
//! let (_conn, mut inbound) = server.accept().await.unwrap().unwrap().start_channel(64);
//! conn.send(Frame::message(&b"ping"[..])).await.unwrap();
//! let frame = inbound.recv().await.unwrap();
//! assert_eq!(&frame.body[..], b"ping");
//! conn.close("done").await;
//! # Ok(()) }
//! ```
//!
//! The wire format is specified byte by byte in `docs/PROTOCOL.md`.
//!
//! # Layout
//! Bottom-up: a module calls only modules listed above it (`→` names
//! them), never one that calls it back. Private and hidden modules are named in
//! `code`; their public types are re-exported at the root.
//!
//! Pure, no IO and no tasks:
//! - `error`: the error enums of the lower layers ([`TransportError`],
//!   [`FrameError`], [`HandshakeError`], ...). → nothing.
//! - [`frame`]: sans-IO codec (`encode`, `decode`, `Ok(None)` = need
//!   more); `peek_header` reads our own queued headers. → `error`.
//! - `backoff`: [`Backoff`], exponential reconnect delays with jitter.
//!   → nothing.
//! - [`heartbeat`]: sans-IO phi-accrual failure detector and heartbeat
//!   schedule ([`Heartbeater`]). → nothing.
//! - `admission`: [`Admission`], the hook that charges pending
//!   handshakes to an account outside the transport, and
//!   [`PENDING_HANDSHAKE_COST`]. → nothing.
//! - `pool`: `BufferPool` and adaptive read sizing. → nothing.
//! - `auth`: [`SharedSecret`] and the HMAC proof of the handshake.
//!   → `error`.
//! - `cookie`: where the shared secret comes from when none is set
//!   (`ACTORS_COOKIE`, the cookie file, created atomically);
//!   [`load_cookie_file`]. → `auth`, `error`.
//! - `config`: [`TransportConfig`] with documented defaults.
//!   → `admission`, `auth`, `cookie`, `error`.
//! - `handshake`: sans-IO hello exchange with magic, version, uid.
//!   → `auth`, `error`, `frame`.
//! - `peer_text`: `PeerText`, a peer's text (close reasons, addresses)
//!   truncated and escaped for logs and errors. → nothing.
//! - `log_limit`: rate limits for log lines a peer can trigger (a burst
//!   per window, then counts). → nothing.
//!
//! One connection's state, shared by its handles and tasks (no IO):
//! - `out_queue`: the outbound queue: user and control lanes under one
//!   short lock, what producers append and the writer takes, and the
//!   Open → Closing → Closed state. → `error`, `frame`.
//! - `shared`: the per-connection state (out queue, counters, close
//!   reason, cancel tokens, peer); [`CloseReason`], [`PeerInfo`],
//!   [`PeerVerified`], [`ConnStats`]. → `error`, `out_queue`.
//! - `slots`: an endpoint's inbound connection slots: the global bound,
//!   the bound per address, eviction of idle connections when full, the
//!   charges of pending handshakes. → `admission`, `error`, `shared`.
//! - `sender`: [`Sender`], the producers' handle (encodes into the out
//!   queue, never touches the socket), [`SendFrameError`],
//!   [`SendManyError`], [`TrySendFrameError`]. → `error`, `frame`, `out_queue`, `shared`.
//!
//! The two tasks of a connection (the only code on a socket):
//! - `writer`: the writer task: take the queue, write it (the control
//!   lane first, and between two frames of a large batch), flush.
//!   Heartbeats travel on that control lane ([`Sender::send_heartbeat`]).
//!   → `error`, `frame`, `out_queue`, `shared`.
//! - `reader`: the reader task, the [`Handler`] it calls, `ReadIo` (what
//!   it reads from) and the one function that routes each inbound frame.
//!   → `config`, `error`, `frame`, `pool`, `sender`, `shared`.
//! - `inbound`: [`Inbound`], inbound frames as a channel (a [`Handler`]
//!   that forwards batches). → `frame`, `reader`, `shared`.
//!
//! Streams:
//! - `tls_record` (feature `tls`): TLS 1.3 records, sans-IO: sealed into
//!   our buffer, opened in place, key updates. → nothing.
//! - `security`: [`Security`], what secures a TCP stream before the
//!   handshake, and how each stream splits into the tasks' halves;
//!   [`Plain`] does nothing. → `auth`, `error`, `handshake`, `reader`, `shared`.
//! - `tls_read` (feature `tls`): a TLS connection's stream: rustls's
//!   unbuffered API for the TLS handshake, then its kernel API hands the
//!   keys to our record layer, whose halves read into our own buffer,
//!   decrypt in place and lend the plaintext so the reader parses frames
//!   where they were decrypted. In units: `handover` (the TLS handshake,
//!   the hand-over, the channel binding), `read_half`, `write_half`.
//!   → `auth`, `reader`, `security`, `tls_record`.
//!
//! Connections and endpoints:
//! - `conn`: [`Established`] → [`Connection`]: wires the shared state, the
//!   two tasks and the supervisor that records how it ended. → `config`,
//!   `frame`, `inbound`, `out_queue`, `pool`, `reader`, `security`,
//!   `sender`, `shared`, `writer`.
//! - `endpoint`: [`Endpoint`] binds, accepts, dials, runs handshakes.
//!   → `auth`, `config`, `conn`, `error`, `frame`, `handshake`, `pool`,
//!   `security`, `shared`.
//! - `tls` (feature `tls`): [`Tls`], [`TlsConfig`]: TLS 1.3 (rustls,
//!   ring), mutual authentication, certificates bound to advertised
//!   identities. → `auth`, `config`, `endpoint`, `error`, `handshake`,
//!   `security`, `shared`.
//!
//! # Security
//! An [`Endpoint`] is generic over its [`Security`]: `Endpoint` (=
//! `Endpoint<Plain>`) runs connections on `TcpStream`, `Endpoint<Tls>`
//! (from [`Endpoint::bind_tls`]) on rustls for the TLS handshake, then on its
//! own TLS 1.3 record layer (keys handed over by rustls), through the same
//! reader, writer and codec. Independently, every handshake proves a shared
//! secret (bound to the TLS session under TLS): the configured one
//! ([`TransportConfig::set_shared_secret`]), else `ACTORS_COOKIE`, else a
//! per-user cookie file created on first start
//! ([`TransportConfig::set_cookie_file`]), resolved once at bind. Only
//! [`TransportConfig::set_insecure_no_authentication`] turns it off.
//! [`PeerInfo::verified`] says how each peer proved its identity
//! ([`PeerVerified`]).
//!
//! # Crate feature flags
//! - `tls` (default): [`Tls`], [`TlsConfig`], [`Endpoint::bind_tls`];
//!   pulls in rustls with the ring provider. Without it only plaintext
//!   (optionally with a shared secret) is available.
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![deny(unsafe_code)]

// The shared-secret proof's wire constants and `Role`: `SharedSecret`
// and `MIN_SECRET_LEN` are re-exported below; the rest is public only for
// `actors` (the cluster's UDP packets are authenticated with keys derived
// from the same secret), the integration tests and the fuzz targets.
mod admission;
#[doc(hidden)]
pub mod auth;
mod backoff;
mod config;
mod conn;
mod cookie;
mod endpoint;
mod error;
pub mod frame;
// Wire internals (the magic, the version, the flags, the hello and its
// state machine), specified in docs/PROTOCOL.md: public for `actors`,
// which checks the magic and version of a stream it is handed, for the
// integration tests that speak the handshake by hand, and for the fuzz
// target; not an API.
#[doc(hidden)]
pub mod handshake;
pub mod heartbeat;
mod inbound;
mod log_limit;
mod out_queue;
mod peer_text;
mod pool;
mod reader;
mod security;
mod sender;
mod shared;
mod slots;
#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tls")]
mod tls_read;
#[cfg(feature = "tls")]
mod tls_record;
/// The fuzz target's entry (`fuzz/fuzz_targets/tls_records.rs`), built
/// only under `cargo fuzz` (which sets `--cfg fuzzing`).
#[cfg(all(feature = "tls", fuzzing))]
#[doc(hidden)]
pub use tls_record::fuzz_records as fuzz_tls_records;
mod writer;

pub use admission::{Admission, PENDING_HANDSHAKE_COST, PENDING_TLS_HANDSHAKE_COST, PendingCharge};
pub use auth::{MIN_SECRET_LEN, SharedSecret};
pub use backoff::{Backoff, DEFAULT_BACKOFF_JITTER, DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN};
pub use config::{
    DEFAULT_CLOSE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONTROL_STALL_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_EVICTION_AFTER, DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_INBOUND_CONNECTIONS, DEFAULT_MAX_INBOUND_CONNECTIONS_PER_IP,
    DEFAULT_MAX_UNPROVEN_PER_IP, DEFAULT_PRODUCER_YIELD_BYTES, DEFAULT_QUEUE_CAPACITY,
    DEFAULT_READ_BUFFER_SIZE, DEFAULT_WRITE_BUFFER_SIZE, TransportConfig,
};
pub use conn::{Connection, Established};
pub use cookie::{COOKIE_ENV, DEFAULT_COOKIE_FILE_NAME, load_cookie_file};
pub use endpoint::{ACCEPT_QUEUE, Endpoint};
// The uid generator the endpoint uses, for `actors`' cluster incarnations.
#[doc(hidden)]
pub use endpoint::random_uid;
pub use error::{
    AcceptError, ConfigError, FrameError, HandshakeError, SecretSource, TlsError, TransportError,
};
pub use frame::{Frame, FrameKind, MAX_HEARTBEAT_BODY};
pub use heartbeat::{HeartbeatConfig, Heartbeater, PhiAccrualDetector};
pub use inbound::Inbound;
// The log limiter and the escaping of a peer's text: shared with `actors`
// so that every log line a peer can trigger goes through one limiter and
// one escaping; not part of the transport's API.
#[doc(hidden)]
pub use log_limit::{LOG_BURST, LOG_WINDOW, LogLimit, Sampled};
#[doc(hidden)]
pub use peer_text::{MAX_PEER_TEXT, PeerText, peer_text_from_bytes};
// The buffer pool: public for the crate's benchmarks (`benches/pool.rs`),
// which are built as a separate crate.
#[doc(hidden)]
pub use pool::BufferPool;
pub use reader::Handler;
pub use security::{Plain, Security, Stream};
pub use sender::{SendFrameError, SendManyError, Sender, TrySendFrameError};
// What `Sender`'s internal enqueue paths return (see `Sender`'s docs):
// `actors` encodes envelopes straight into the queue and stages batches.
#[doc(hidden)]
pub use sender::{PushFramesError, Pushed, PushedFrames};
pub use shared::{CloseReason, ConnStats, PeerInfo, PeerVerified};
#[cfg(feature = "tls")]
pub use tls::{PeerIdentity, Tls, TlsConfig, fingerprint};
