//! What one connection's handles and tasks share: the outbound queue, the
//! counters, the close reason and the tokens that stop the tasks.
//!
//! ```text
//!   Arc<Shared> ── held by ──► Sender (every clone), Connection, reader task,
//!      │                        writer task, supervisor
//!      ├─ out:    OutQueue      frames waiting for the writer (see `out_queue`)
//!      ├─ stats:  Stats         counters, updated per read and per write
//!      ├─ reason: first CloseReason recorded wins
//!      ├─ cancel: stops both tasks at once (abort, error, drop)
//!      ├─ done:   cancelled when both tasks have ended and the reason is final
//!      ├─ peer:   PeerInfo from the handshake
//!      └─ last_app: when the reader last delivered an application frame
//!                 (what idle eviction looks at; one relaxed store per read)
//! ```
//!
//! This module knows no task: the reader, the writer and the handles reach
//! each other only through this state.

use std::{
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;

use crate::{error::TransportError, out_queue::OutQueue};

/// Who is at the other end, as established by the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's advertised address (what it listens on).
    pub addr: String,
    /// The peer's incarnation id.
    pub uid: u64,
    /// The socket address the connection comes from or goes to.
    pub socket_addr: SocketAddr,
    /// How the peer proved the identity in `addr` and `uid`: the strongest
    /// proof that applies (a TLS certificate naming the node beats the
    /// shared secret).
    pub verified: PeerVerified,
    /// The application feature bits the peer announced in its handshake
    /// ([`TransportConfig::set_app_flags`](crate::TransportConfig::set_app_flags));
    /// 0 from a peer that announces none.
    pub app_flags: u8,
}

/// How a connection's peer proved the identity it advertises.
///
/// Ordered weakest first, so `max` picks the strongest and
/// `verified >= PeerVerified::Node` asks "is this exact node proven?".
///
/// | security in force                                  | reported          |
/// |----------------------------------------------------|-------------------|
/// | `set_insecure_no_authentication`, plaintext        | `Unauthenticated` |
/// | shared secret (cookie), plaintext                  | `Secret`          |
/// | TLS, certificate names the host only (opt-in)      | `Host`            |
/// | TLS, `tcp://name@host:port` URI SAN, or pinned     | `Node`            |
/// | TLS listener without client auth, for its dialers  | `Secret` or `Unauthenticated` |
/// | TLS with `PeerIdentity::Unchecked`                 | `Secret` or `Unauthenticated` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PeerVerified {
    /// Nothing: authentication was explicitly turned off.
    Unauthenticated,
    /// The peer proved the shared secret (cookie). Any holder of the secret can claim any address.
    Secret,
    /// The peer's TLS certificate is valid for the host it advertises only (accepted because configured): any holder of a certificate for that host can claim any node on it.
    Host,
    /// The peer's TLS certificate names this exact node (name, host and port), or its fingerprint is pinned for this exact address.
    Node,
}

/// Why a connection ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CloseReason {
    /// Closed on this side, with the given reason.
    Local(String),
    /// The peer sent a Close frame with this reason.
    Remote(String),
    /// The peer's stream ended without a Close frame (crash, kill, reset).
    Lost,
    /// A protocol or IO error on this connection.
    Error(Arc<TransportError>),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(r) => write!(f, "closed locally: {r}"),
            Self::Remote(r) => write!(f, "closed by peer: {r}"),
            Self::Lost => f.write_str("connection lost: stream ended without a close frame"),
            Self::Error(e) => write!(f, "{e}"),
        }
    }
}

/// Per-connection counters (atomics, updated per write and per read, never
/// per frame).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    writes: AtomicU64,
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    reads: AtomicU64,
    dropped: AtomicU64,
}

impl Stats {
    /// One batch handed to the socket in `writes` write calls.
    pub(crate) fn record_write(&self, frames: u64, bytes: u64, writes: u64) {
        self.frames_out.fetch_add(frames, Relaxed);
        self.bytes_out.fetch_add(bytes, Relaxed);
        self.writes.fetch_add(writes, Relaxed);
    }

    /// One read from the socket and the frames decoded after it.
    pub(crate) fn record_read(&self, frames: u64, bytes: u64) {
        self.frames_in.fetch_add(frames, Relaxed);
        self.bytes_in.fetch_add(bytes, Relaxed);
        self.reads.fetch_add(1, Relaxed);
    }

    /// Frames that were queued but never written.
    pub(crate) fn record_dropped(&self, frames: u64) {
        self.dropped.fetch_add(frames, Relaxed);
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> ConnStats {
        ConnStats {
            frames_out: self.frames_out.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            writes: self.writes.load(Relaxed),
            frames_in: self.frames_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            reads: self.reads.load(Relaxed),
            frames_dropped: self.dropped.load(Relaxed),
        }
    }
}

/// A snapshot of a connection's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Frames handed to the socket.
    pub frames_out: u64,
    /// Bytes handed to the socket.
    pub bytes_out: u64,
    /// `write` calls made (syscalls; with TLS, calls that seal up to
    /// 256 KiB into records and write them).
    pub writes: u64,
    /// Frames decoded from the socket (control frames included).
    pub frames_in: u64,
    /// Bytes read from the socket.
    pub bytes_in: u64,
    /// `read` calls that returned data.
    pub reads: u64,
    /// `Message` frames (application data) that were queued but never
    /// wholly written because the connection ended first. Never silent:
    /// also logged. System and control frames are not counted.
    pub frames_dropped: u64,
}

impl ConnStats {
    /// Average frames per write syscall: the batching factor.
    pub fn frames_per_write(&self) -> f64 {
        if self.writes == 0 {
            0.0
        } else {
            self.frames_out as f64 / self.writes as f64
        }
    }

    /// Adds another snapshot's counts to this one.
    pub fn add(&mut self, o: &ConnStats) {
        self.frames_out += o.frames_out;
        self.bytes_out += o.bytes_out;
        self.writes += o.writes;
        self.frames_in += o.frames_in;
        self.bytes_in += o.bytes_in;
        self.reads += o.reads;
        self.frames_dropped += o.frames_dropped;
    }
}

/// State shared by the handles and the tasks of one connection.
pub(crate) struct Shared {
    /// The outbound queue: producers append, the writer drains.
    pub(crate) out: OutQueue,
    /// The connection's counters.
    pub(crate) stats: Stats,
    /// Stops both tasks at once (abort, error, drop).
    pub(crate) cancel: CancellationToken,
    /// Cancelled when both tasks have ended and the reason is final.
    pub(crate) done: CancellationToken,
    reason: Mutex<Option<CloseReason>>,
    /// Who is at the other end.
    pub(crate) peer: PeerInfo,
    /// When the connection started.
    opened: Instant,
    /// Milliseconds after `opened` at which the reader last delivered an
    /// application frame (0: none yet).
    last_app: AtomicU64,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").field("peer", &self.peer).finish()
    }
}

impl Shared {
    /// The state of a connection to `peer` that has not started yet.
    pub(crate) fn new(out: OutQueue, peer: PeerInfo) -> Self {
        Self {
            out,
            stats: Stats::default(),
            cancel: CancellationToken::new(),
            done: CancellationToken::new(),
            reason: Mutex::new(None),
            peer,
            opened: Instant::now(),
            last_app: AtomicU64::new(0),
        }
    }

    /// The reader delivered application frames just now. Once per read
    /// that carried any: a clock read and a relaxed store.
    #[inline]
    pub(crate) fn touch_app(&self) {
        let ms = self.opened.elapsed().as_millis();
        self.last_app
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Relaxed);
    }

    /// When the reader last delivered an application frame (to the
    /// millisecond), if it ever did.
    pub(crate) fn last_application_frame(&self) -> Option<Instant> {
        match self.last_app.load(Relaxed) {
            0 => None,
            ms => Some(self.opened + Duration::from_millis(ms)),
        }
    }

    /// Since when the connection has carried no application frame: the
    /// last one, or the start.
    pub(crate) fn idle_since(&self) -> Instant {
        self.last_application_frame().unwrap_or(self.opened)
    }

    /// Records why the connection ends; the first reason wins.
    pub(crate) fn set_reason(&self, reason: CloseReason) {
        let mut r = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if r.is_none() {
            *r = Some(reason);
        }
    }

    /// The reason recorded so far, if any.
    pub(crate) fn reason(&self) -> Option<CloseReason> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ends the connection now: nothing more is written.
    pub(crate) fn abort(&self, reason: CloseReason) {
        self.set_reason(reason);
        self.cancel.cancel();
    }
}
