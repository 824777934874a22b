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
//! - [`frame`]: sans-IO codec (`encode`, `decode`, `Ok(None)` = need more).
//! - [`handshake`]: sans-IO hello exchange with magic, version, uid.
//! - [`heartbeat`]: sans-IO phi-accrual failure detector and heartbeat
//!   schedule ([`Heartbeater`]); heartbeats travel on the writer's control
//!   lane ([`Sender::send_heartbeat`]), ahead of queued user data.
//! - `backoff`: [`Backoff`], exponential reconnect delays with jitter.
//! - `config`: [`TransportConfig`] with documented defaults.
//! - `endpoint`: [`Endpoint`] binds, accepts, dials, runs handshakes.
//! - `shared`: the per-connection state the handles and tasks share;
//!   [`CloseReason`], [`PeerInfo`], [`ConnStats`].
//! - `out_queue`: the outbound queue that senders fill and the writer
//!   drains.
//! - `sender`: [`Sender`], the producers' handle, and its errors.
//! - `conn`: [`Established`] → [`Connection`], the supervisor.
//! - `writer`: the batching writer task.
//! - `reader`: the reader task, [`Handler`], `ReadIo` (what it reads from).
//! - `inbound`: [`Inbound`], inbound frames through a channel.
//! - `pool`: [`BufferPool`] and adaptive read sizing.
//! - `security`: [`Security`], what secures a TCP stream before the
//!   handshake; [`Plain`] does nothing.
//! - `tls`: [`Tls`], [`TlsConfig`]: TLS 1.3 (rustls, ring), mutual
//!   authentication, certificates bound to advertised identities.
//! - `tls_read`: the halves of a TLS stream; reads lend rustls's
//!   plaintext buffer so the reader parses frames in place.
//! - [`auth`]: [`SharedSecret`] and the HMAC proof of the handshake.
//! - `error`: one error enum per concern.
//!
//! # Security
//! An [`Endpoint`] is generic over its [`Security`]: `Endpoint` (=
//! `Endpoint<Plain>`) runs connections on `TcpStream`, `Endpoint<Tls>`
//! (from [`Endpoint::bind_tls`]) on rustls streams, through the same
//! reader, writer and codec. Independently, [`TransportConfig::set_shared_secret`]
//! makes every handshake prove a shared secret.
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

pub mod auth;
mod backoff;
mod config;
mod conn;
mod endpoint;
mod error;
pub mod frame;
pub mod handshake;
pub mod heartbeat;
mod inbound;
mod out_queue;
mod pool;
mod reader;
mod security;
mod sender;
mod shared;
#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tls")]
mod tls_read;
mod writer;

pub use auth::{MIN_SECRET_LEN, SharedSecret};
pub use backoff::{Backoff, DEFAULT_BACKOFF_JITTER, DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN};
pub use config::{
    DEFAULT_CLOSE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_INBOUND_CONNECTIONS, DEFAULT_PRODUCER_YIELD_BYTES,
    DEFAULT_QUEUE_CAPACITY, DEFAULT_READ_BUFFER_SIZE, DEFAULT_WRITE_BUFFER_SIZE, TransportConfig,
};
pub use conn::{Connection, Established};
pub use endpoint::{ACCEPT_QUEUE, Endpoint, random_uid};
pub use error::{AcceptError, ConfigError, FrameError, HandshakeError, TlsError, TransportError};
pub use frame::{Frame, FrameKind};
pub use heartbeat::{HeartbeatConfig, Heartbeater, PhiAccrualDetector};
pub use inbound::Inbound;
pub use pool::{BufferPool, MAX_POOLED_BUFFERS, ReadSize};
pub use reader::{Handler, MAX_READ_SIZE};
pub use security::{Plain, Security, Stream};
pub use sender::{Pushed, SendError, Sender, TrySendError};
pub use shared::{CloseReason, ConnStats, PeerInfo};
#[cfg(feature = "tls")]
pub use tls::{PeerIdentity, Tls, TlsConfig, fingerprint};
