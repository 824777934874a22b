//! Remoting: associations (one per remote node), the envelope format with
//! recipient compression, inbound dispatch, and the system messages behind
//! resolve, watch and stop.
//!
//! # Envelope (body of a transport `Message` frame)
//!
//! ```text
//! +-------+-----------+------------------------------+-------------+---------+
//! | flags | id u32 LE | if flags&1: len u16 LE, path | manifest u32| payload |
//! +-------+-----------+------------------------------+-------------+---------+
//! ```
//!
//! The first message to a recipient on a link carries its path with a fresh
//! id (flags bit 0); later ones carry only the id, like Artery's actor-ref
//! compression. Ids are per link, so a new connection starts a new table.
//! The definition and every use travel through the same ordered stream, so
//! the receiver always knows an id before it is used.
//!
//! # Large messages
//!
//! An envelope over [`LARGE_THRESHOLD`] (256 KiB) is not queued whole:
//! it goes to the association's large-message lane, a task that sends its
//! payload in [`FRAGMENT_SIZE`] (64 KiB) pieces, each an envelope with
//! flags bit 1 and a fragment header after the manifest:
//!
//! ```text
//! ... | manifest u32 | msg id u32 LE | total u32 LE | offset u32 LE | piece |
//! ```
//!
//! It queues one fragment, then waits until the writer has taken it
//! ([`Sender::wait_taken`]) and until the receiver has acknowledged all
//! but [`LARGE_WINDOW`] bytes (`SysWire::LargeAck`, sent at the end of
//! each read) before queueing the next, so small messages (queued straight
//! into the link's buffer) and heartbeats (control lane) go out between
//! two fragments: they wait behind a few fragments, in user space and in
//! the sockets' kernel buffers, not behind the whole message. The receiver reassembles one large message
//! per connection (fragments in order, a buffer grown as they arrive,
//! capped by `SystemConfig::set_max_message_size`) and hands it to the
//! mailbox as one message. Large messages are therefore not ordered with
//! small ones to the same actor (Akka's large-message channel makes the
//! same trade); they are ordered among themselves.
//!
//! # Hot path
//! `tell` serializes into a thread-local scratch buffer (outside any lock),
//! then copies header and payload into the link's pooled outbound buffer
//! under the transport's short lock. Inbound, the reader groups the payloads
//! of one socket read by recipient and hands each mailbox its group in one
//! push; the actor's own task decodes them.

use std::{
    any::Any,
    cell::RefCell,
    collections::{HashMap, HashSet, VecDeque},
    future::Future,
    marker::PhantomData,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, Weak,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use transport::{
    Backoff, CloseReason, ConnStats, Connection, Endpoint, Frame, FrameKind, Handler, Heartbeater,
    Pushed, Sender, Tls, TlsConfig, TransportConfig, TransportError, TrySendError,
};

use crate::{
    actor::{StopReason, Terminated},
    actor_ref::{ActorRef, RemoteRef},
    error::{ResolveError, SerializationError, SystemError},
    failure::{Receive, RemoteEvent, SysIn, SysOut},
    mailbox::Refused,
    net::Net,
    path::ActorPath,
    serialization::{Bincode, RemoteMessage, Serializer, manifest_id, with_encode_limit},
    system::{SystemConfig, SystemInner},
    watch::WatchSink,
};

/// Flag: the envelope defines its recipient id with a path.
const ENV_DEFINE: u8 = 1;
/// Flag: the envelope carries one fragment of a large message; a fragment
/// header follows the manifest.
const ENV_FRAGMENT: u8 = 2;
/// Fragment header: message id, total payload length, offset (u32 LE each).
const FRAGMENT_HEADER: usize = 12;
/// Envelopes larger than this (or than the frame size or the maximum
/// message size, if smaller) go on the large-message lane, in fragments.
const LARGE_THRESHOLD: usize = LARGE_MESSAGE_THRESHOLD;

/// A remote message whose envelope (its encoded size plus the recipient's
/// path and about a dozen bytes) is larger than this, 256 KiB, travels on
/// its link's large-message lane, in 64 KiB fragments. Large messages are
/// ordered among themselves, but not with the link's small messages,
/// which overtake them (so that small messages never wait behind a large
/// one).
pub const LARGE_MESSAGE_THRESHOLD: usize = 256 * 1024;
/// Payload bytes per fragment.
const FRAGMENT_SIZE: usize = 64 * 1024;
/// Payload bytes of a large message sent and not yet acknowledged by the
/// receiver: what a small message may wait behind in the sockets' kernel
/// buffers (which hold megabytes, so pacing by the writer alone is not
/// enough).
const LARGE_WINDOW: usize = 4 * FRAGMENT_SIZE;
/// Fixed envelope header: flags, id, manifest.
const ENV_HEADER: usize = 1 + 4 + 4;
/// Most recipient ids one link may define; a peer defining more is
/// misbehaving, and its further definitions are refused as dead letters.
const MAX_COMPRESSION_IDS: usize = 1 << 20;
/// Pending messages moved from the connect buffer to a new link per lock.
const FLUSH_CHUNK: usize = 1024;

/// The window over which malformed envelopes are counted against
/// [`SystemConfig::set_max_malformed_per_second`](crate::SystemConfig::set_max_malformed_per_second).
const MALFORMED_WINDOW: Duration = Duration::from_secs(1);

/// An envelope's fields (see the module docs for the layout).
#[derive(Debug)]
struct RawEnvelope<'a> {
    id: u32,
    /// The recipient path this envelope defines `id` as, if any.
    define: Option<&'a str>,
    manifest: u32,
    /// Set when the payload is one fragment of a large message.
    fragment: Option<Fragment>,
    payload: &'a [u8],
}

/// Where a fragment's payload belongs (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Fragment {
    /// The large message's id, per sending association.
    msg: u32,
    /// The whole message's payload length.
    total: u32,
    /// Where this fragment's payload starts in it.
    offset: u32,
}

/// Parses an envelope; the error says what is malformed. Never panics,
/// never allocates.
#[inline]
fn parse_envelope(body: &[u8]) -> Result<RawEnvelope<'_>, &'static str> {
    let mut b = body;
    if b.len() < 5 {
        return Err("envelope shorter than its header");
    }
    let flags = b.get_u8();
    let id = b.get_u32_le();
    let mut define = None;
    if flags & ENV_DEFINE != 0 {
        if b.len() < 2 {
            return Err("truncated recipient path");
        }
        let len = usize::from(b.get_u16_le());
        if b.len() < len {
            return Err("truncated recipient path");
        }
        let path = std::str::from_utf8(&b[..len]).map_err(|_| "recipient path is not utf-8")?;
        if id as usize >= MAX_COMPRESSION_IDS {
            return Err("recipient id beyond the compression table limit");
        }
        define = Some(path);
        b.advance(len);
    }
    if b.len() < 4 {
        return Err("envelope has no manifest");
    }
    let manifest = b.get_u32_le();
    let mut fragment = None;
    if flags & ENV_FRAGMENT != 0 {
        if b.len() < FRAGMENT_HEADER {
            return Err("truncated fragment header");
        }
        fragment = Some(Fragment {
            msg: b.get_u32_le(),
            total: b.get_u32_le(),
            offset: b.get_u32_le(),
        });
    }
    Ok(RawEnvelope {
        id,
        define,
        manifest,
        fragment,
        payload: b,
    })
}

/// Decodes `bytes` the way a received frame is decoded, for fuzzing: as an
/// envelope (then its payload as a few message types) and as a system
/// message. Returns how many of these decodes succeeded. Never panics.
#[doc(hidden)]
pub fn fuzz_decode_envelope(bytes: &[u8]) -> usize {
    let mut ok = 0;
    if let Ok(env) = parse_envelope(bytes) {
        ok += 1;
        ok += usize::from(Bincode.deserialize::<String>(env.payload).is_ok());
        ok += usize::from(Bincode.deserialize::<Vec<u64>>(env.payload).is_ok());
        ok += usize::from(
            Bincode
                .deserialize::<crate::SharedBytes>(env.payload)
                .is_ok(),
        );
    }
    ok += usize::from(Bincode.deserialize::<SysWire>(bytes).is_ok());
    ok
}

/// A local actor (or ask slot) reachable from other nodes.
pub(crate) trait RemoteTarget: Send + Sync + 'static {
    fn manifest(&self) -> u32;
    fn manifest_name(&self) -> &'static str;
    /// Appends a batch of `n` records (`[len u32 LE][payload]`, one read's
    /// worth for this target); refuses when full or closed.
    fn push_batch(&self, batch: &Bytes, n: usize) -> Result<(), Refused>;
    fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    fn add_watcher(&self, sink: WatchSink);
    fn stop(&self);
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Why a remote tell failed.
pub(crate) enum TellError {
    Full,
    /// The recipient's incarnation is quarantined (its node restarted or
    /// shut down): the message is a dead letter.
    Gone,
    Serialization(SerializationError),
}

/// A remote actor as the sending side knows it, shared by every ref to it
/// so that its compressed id is assigned once per link.
pub(crate) struct Recipient {
    pub(crate) path: ActorPath,
    pub(crate) assoc: Arc<Association>,
    /// The incarnation of its node this ref was made for; 0 if unknown.
    uid: u64,
    /// `(link generation << 32) | id`; 0 when not yet defined on any link.
    compressed: AtomicU64,
}

/// System messages between nodes (transport `System` frames, bincode).
#[derive(Debug, Serialize, Deserialize)]
enum SysWire {
    /// Does an actor live at `path`?
    Identify { id: u64, path: String },
    /// The answer: its manifest id and name, or none.
    Identity {
        id: u64,
        manifest: Option<(u32, String)>,
    },
    /// Tell me (`watch_id`) when the actor at `path` terminates.
    Watch { path: String, watch_id: u64 },
    /// The actor watched under `watch_id` terminated.
    Terminated { watch_id: u64, reason: StopReason },
    /// Stop the actor at `path`.
    Stop { path: String },
    /// A system message (`Watch`, `Terminated`, `Stop`, encoded) delivered
    /// exactly once, in order: number `seq` of the sender's stream `epoch`.
    Reliable { epoch: u64, seq: u64, body: Vec<u8> },
    /// Everything up to `seq` of stream `epoch` has been delivered.
    Ack { epoch: u64, seq: u64 },
    /// The sender's system is shutting down: do not wait for the failure
    /// detector.
    Shutdown,
    /// The receiver has processed large message `msg` up to `received`
    /// bytes (flow control of the large-message lane).
    LargeAck { msg: u32, received: u32 },
}

enum Pending {
    User(Arc<Recipient>, u32, Bytes),
    System(Bytes),
}

#[derive(Clone)]
struct Link {
    sender: Sender,
    generation: u32,
    next_id: Arc<AtomicU32>,
    /// The peer incarnation at the other end.
    uid: u64,
    /// This node dialed the connection.
    dialed: bool,
}

enum LinkState {
    Idle,
    Connecting { pending: VecDeque<Pending> },
    Up(Link),
}

type IdentifyReply = Result<Option<(u32, String)>, IdentifyFailed>;

/// Why an identify got no answer.
enum IdentifyFailed {
    /// The node is unreachable (connecting failed, or the link closed).
    Unreachable(String),
    /// The link it went on lost a simultaneous connect and was closed by
    /// the peer; the link that won is coming: ask again.
    Replaced,
}

/// The reason a connection that lost a simultaneous connect is closed with.
const DUPLICATE: &str = "duplicate connection";

/// The link to one remote node.
pub(crate) struct Association {
    pub(crate) node: Arc<str>,
    pub(crate) system: Weak<SystemInner>,
    state: Mutex<LinkState>,
    /// Notified whenever the link state changes (up, failed, closed).
    up: tokio::sync::Notify,
    conns: Mutex<HashMap<u32, Connection>>,
    generation: AtomicU32,
    watches: Mutex<HashMap<u64, (ActorPath, WatchSink)>>,
    identifies: Mutex<HashMap<u64, oneshot::Sender<IdentifyReply>>>,
    next_req: AtomicU64,
    pending_capacity: usize,
    max_frame: usize,
    /// `SystemConfig::set_max_message_size`.
    max_message: usize,
    /// Envelopes larger than this take the large-message lane.
    large_threshold: usize,
    /// The large-message lane's queue.
    large: Mutex<LargeQueue>,
    /// Notified when the large-message lane finished a message.
    large_room: tokio::sync::Notify,
    next_large: AtomicU32,
    /// The last `LargeAck`: message id and bytes received.
    large_acked: Mutex<(u32, u32)>,
    /// Notified on every `LargeAck`, and when a link closes.
    large_ack: tokio::sync::Notify,
    /// The peer's current incarnation; 0 until one has answered.
    peer_uid: AtomicU64,
    /// Incarnations that restarted, shut down or overflowed: never talked
    /// to again.
    quarantined: Mutex<HashSet<u64>>,
    sys_out: Mutex<SysOut>,
    sys_in: Mutex<SysIn>,
    life: Mutex<Life>,
    /// A connect attempt is in flight.
    connecting: AtomicBool,
    local_node: Arc<str>,
}

/// A large message waiting for (or in) the large-message lane.
struct LargeMsg {
    r: Arc<Recipient>,
    manifest: u32,
    payload: Bytes,
}

#[derive(Default)]
struct LargeQueue {
    items: VecDeque<LargeMsg>,
    /// Payload bytes queued, the message being sent included.
    bytes: usize,
    /// The lane's task is running.
    running: bool,
}

/// Liveness of the peer: heartbeat schedule, failure detector, reconnect
/// backoff. Driven by [`keep`], once per heartbeat interval.
struct Life {
    hb: Heartbeater,
    /// The detector is armed (a link came up, or a watch waits).
    monitoring: bool,
    /// The detector fired and no heartbeat has been answered since.
    unreachable: bool,
    backoff: Backoff,
    /// No connect attempt before this.
    next_connect: Instant,
    last_resend: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No user code runs under these locks; a poisoned one is consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// Where `tell` serializes before taking any lock; reused, so the hot
    /// path does not allocate.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(4096));
}

/// A `Reliable` system frame carrying `body` as number `seq` of `epoch`.
fn reliable_frame(epoch: u64, seq: u64, body: &[u8]) -> Frame {
    let mut out = BytesMut::new();
    let msg = SysWire::Reliable {
        epoch,
        seq,
        body: body.to_vec(),
    };
    if let Err(e) = Bincode.serialize(&msg, &mut out) {
        tracing::error!(error = %e, "system message does not encode");
    }
    Frame {
        kind: FrameKind::System,
        body: out.freeze(),
    }
}

/// Appends the envelope for `payload` to `b`, defining the recipient's id
/// on this link if needed. Runs under the transport's queue lock, which
/// orders it with every other envelope on the link.
fn write_envelope(b: &mut BytesMut, r: &Recipient, link: &Link, manifest: u32, payload: &[u8]) {
    let key = r.compressed.load(Ordering::Relaxed);
    if key >> 32 == u64::from(link.generation) && key as u32 != 0 {
        // The common case, in one append: flags, id, manifest.
        let mut head = [0u8; 9];
        head[1..5].copy_from_slice(&(key as u32).to_le_bytes());
        head[5..9].copy_from_slice(&manifest.to_le_bytes());
        b.reserve(head.len() + payload.len());
        b.extend_from_slice(&head);
    } else {
        write_recipient(b, r, link, 0);
        b.put_u32_le(manifest);
    }
    b.extend_from_slice(payload);
}

/// Appends flags (`flags` plus `ENV_DEFINE` if needed) and the recipient
/// id, with its path if this link has not defined it yet.
#[inline(always)]
fn write_recipient(b: &mut BytesMut, r: &Recipient, link: &Link, flags: u8) {
    let key = r.compressed.load(Ordering::Relaxed);
    if key >> 32 == u64::from(link.generation) && key as u32 != 0 {
        b.put_u8(flags);
        b.put_u32_le(key as u32);
    } else {
        let id = link.next_id.fetch_add(1, Ordering::Relaxed);
        r.compressed.store(
            (u64::from(link.generation) << 32) | u64::from(id),
            Ordering::Relaxed,
        );
        let path = r.path.elements().as_bytes();
        b.put_u8(flags | ENV_DEFINE);
        b.put_u32_le(id);
        b.put_u16_le(path.len() as u16);
        b.put_slice(path);
    }
}

/// Appends the envelope for one fragment of a large message.
fn write_fragment(
    b: &mut BytesMut,
    r: &Recipient,
    link: &Link,
    manifest: u32,
    f: Fragment,
    piece: &[u8],
) {
    write_recipient(b, r, link, ENV_FRAGMENT);
    b.put_u32_le(manifest);
    b.put_u32_le(f.msg);
    b.put_u32_le(f.total);
    b.put_u32_le(f.offset);
    b.put_slice(piece);
}

impl Association {
    fn new(
        node: Arc<str>,
        system: Weak<SystemInner>,
        config: &SystemConfig,
        local_node: Arc<str>,
    ) -> Self {
        let now = Instant::now();
        let pending_capacity = config.pending_capacity;
        let max_frame = config.transport.max_frame_size();
        let max_message = config.max_message_size;
        Self {
            max_message,
            large_threshold: LARGE_THRESHOLD.min(max_frame).min(max_message),
            large: Mutex::new(LargeQueue::default()),
            large_room: tokio::sync::Notify::new(),
            next_large: AtomicU32::new(1),
            large_acked: Mutex::new((0, 0)),
            large_ack: tokio::sync::Notify::new(),
            peer_uid: AtomicU64::new(0),
            quarantined: Mutex::new(HashSet::new()),
            sys_out: Mutex::new(SysOut::new(config.system_buffer)),
            sys_in: Mutex::new(SysIn::default()),
            life: Mutex::new(Life {
                hb: Heartbeater::new(config.heartbeat.clone(), now),
                monitoring: false,
                unreachable: false,
                backoff: config.backoff.clone(),
                next_connect: now,
                last_resend: now,
            }),
            connecting: AtomicBool::new(false),
            local_node,
            node,
            system,
            state: Mutex::new(LinkState::Idle),
            up: tokio::sync::Notify::new(),
            conns: Mutex::new(HashMap::new()),
            generation: AtomicU32::new(1),
            watches: Mutex::new(HashMap::new()),
            identifies: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            pending_capacity,
            max_frame,
        }
    }

    /// Envelope bytes around a payload to `r`, at most (when the envelope
    /// defines the recipient's id).
    fn envelope_overhead(r: &Recipient) -> usize {
        ENV_HEADER + 2 + r.path.elements().len()
    }

    /// The message is too large for one frame on the link's shared queue:
    /// it goes on the large-message lane (or is refused). The only check a
    /// small message pays for large messages.
    #[inline]
    fn is_large(&self, r: &Recipient, payload: usize) -> bool {
        Self::envelope_overhead(r) + payload > self.large_threshold
    }

    /// Refuses a message over the maximum message size (custom encoders
    /// are not bounded while encoding).
    fn check_size(&self, r: &Recipient, payload: usize) -> Result<(), TellError> {
        let size = Self::envelope_overhead(r) + payload;
        if size > self.max_message {
            return Err(TellError::Serialization(SerializationError::TooLarge {
                size,
                limit: self.max_message,
            }));
        }
        Ok(())
    }

    /// Serializes with `encode` into `out` (cleared first), refusing a
    /// message over the maximum message size as soon as it crosses the
    /// limit (see [`with_encode_limit`]), so a huge message is never
    /// serialized whole.
    fn encode_bounded(
        &self,
        r: &Recipient,
        out: &mut BytesMut,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<(), TellError> {
        out.clear();
        let overhead = Self::envelope_overhead(r);
        let room = self.max_message.saturating_sub(overhead);
        match with_encode_limit(room, || encode(out)) {
            Ok(()) => Ok(()),
            Err(SerializationError::TooLarge { size, .. }) => {
                Err(TellError::Serialization(SerializationError::TooLarge {
                    size: size + overhead,
                    limit: self.max_message,
                }))
            }
            Err(e) => Err(TellError::Serialization(e)),
        }
    }

    /// A large message from `tell`: checked, then queued on the
    /// large-message lane if it has room.
    #[cold]
    #[inline(never)]
    fn tell_large(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: Bytes,
    ) -> Result<(), TellError> {
        self.check_large(r, payload.len())?;
        self.enqueue_large(r, manifest, payload)
            .map_err(|_| TellError::Full)
    }

    fn check_large(&self, r: &Recipient, payload: usize) -> Result<(), TellError> {
        self.check_size(r, payload)?;
        if self.is_quarantined(r.uid) {
            return Err(TellError::Gone);
        }
        if let LinkState::Up(link) = &*lock(&self.state)
            && r.uid != link.uid
            && r.uid != 0
        {
            return Err(TellError::Gone);
        }
        Ok(())
    }

    /// Queues a large message unless the lane holds more than the maximum
    /// message size already (an idle lane takes any); starts the lane's
    /// task if it is not running.
    fn enqueue_large(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: Bytes,
    ) -> Result<(), Bytes> {
        let mut q = lock(&self.large);
        if q.bytes > 0 && q.bytes + payload.len() > self.max_message {
            return Err(payload);
        }
        q.bytes += payload.len();
        q.items.push_back(LargeMsg {
            r: r.clone(),
            manifest,
            payload,
        });
        if !std::mem::replace(&mut q.running, true) {
            tokio::spawn(self.clone().run_large());
        }
        Ok(())
    }

    /// The large-message lane: sends queued large messages one at a time.
    async fn run_large(self: Arc<Self>) {
        let cancel = match self.system.upgrade() {
            Some(sys) => sys.remoting.get().map(|r| r.cancel.clone()),
            None => None,
        }
        .unwrap_or_default();
        loop {
            let m = {
                let mut q = lock(&self.large);
                match q.items.pop_front() {
                    Some(m) => m,
                    None => {
                        q.running = false;
                        return;
                    }
                }
            };
            if let Err(why) = self.send_large(&m, &cancel).await
                && let Some(sys) = self.system.upgrade()
            {
                sys.dead_letter(
                    &format!("large message of {} bytes", m.payload.len()),
                    &m.r.path,
                    why,
                );
            }
            lock(&self.large).bytes -= m.payload.len();
            self.large_room.notify_waiters();
        }
    }

    /// Sends one large message in fragments, letting the link's other
    /// traffic go out between two of them.
    async fn send_large(
        self: &Arc<Self>,
        m: &LargeMsg,
        cancel: &CancellationToken,
    ) -> Result<(), &'static str> {
        let link = self.large_link(&m.r, cancel).await?;
        let total = m.payload.len();
        let piece = FRAGMENT_SIZE
            .min(
                self.max_frame
                    .saturating_sub(Self::envelope_overhead(&m.r) + FRAGMENT_HEADER),
            )
            .max(1);
        let msg = self.next_large.fetch_add(1, Ordering::Relaxed);
        let mut offset = 0;
        while offset < total {
            let end = (offset + piece).min(total);
            let f = Fragment {
                msg,
                total: total as u32,
                offset: offset as u32,
            };
            let bytes = &m.payload[offset..end];
            link.sender
                .send_with(FrameKind::Message, |b| {
                    write_fragment(b, &m.r, &link, m.manifest, f, bytes)
                })
                .await
                .map_err(|_| "link closed while sending a large message")?;
            // What other senders queue meanwhile goes out before the next
            // fragment, and at most `LARGE_WINDOW` bytes are unacknowledged
            // (so in the sockets' buffers ahead of a small message).
            link.sender.wait_taken().await;
            self.wait_large_ack(&link, msg, end.saturating_sub(LARGE_WINDOW))
                .await;
            offset = end;
        }
        Ok(())
    }

    /// Waits until the receiver has acknowledged `want` bytes of large
    /// message `msg`, or the link is closed.
    async fn wait_large_ack(&self, link: &Link, msg: u32, want: usize) {
        loop {
            let acked = self.large_ack.notified();
            tokio::pin!(acked);
            acked.as_mut().enable();
            let (m, got) = *lock(&self.large_acked);
            if (m == msg && got as usize >= want) || link.sender.is_closed() {
                return;
            }
            acked.await;
        }
    }

    /// A `LargeAck` from the peer.
    fn on_large_ack(&self, msg: u32, received: u32) {
        {
            let mut a = lock(&self.large_acked);
            if a.0 != msg || a.1 < received {
                *a = (msg, received);
            }
        }
        self.large_ack.notify_waiters();
    }

    /// The link to send a large message on, connecting if needed.
    async fn large_link(
        self: &Arc<Self>,
        r: &Recipient,
        cancel: &CancellationToken,
    ) -> Result<Link, &'static str> {
        let mut asked = false;
        loop {
            let notified = self.up.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_quarantined(r.uid) {
                return Err("its node's incarnation is quarantined");
            }
            match &*lock(&self.state) {
                LinkState::Up(link) if r.uid != 0 && r.uid != link.uid => {
                    return Err("the recipient's incarnation restarted");
                }
                LinkState::Up(link) => return Ok(link.clone()),
                LinkState::Idle if asked => return Err("connecting to its node failed"),
                LinkState::Idle | LinkState::Connecting { .. } => {}
            }
            if !asked {
                asked = true;
                self.ensure_connecting();
                continue;
            }
            tokio::select! {
                () = notified => {}
                () = cancel.cancelled() => return Err("actor system shut down"),
            }
        }
    }

    /// Remote `tell`: never waits.
    pub(crate) fn tell(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: impl Fn(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<(), TellError> {
        self.tell_hint(r, manifest, encode).map(|_| ())
    }

    /// Remote `tell` that also says whether the caller should yield its
    /// thread to the link's writer (`Ok(true)`, see
    /// `transport::Sender::try_push_with`). `encode` may run twice: once
    /// straight into the link's queue, and again into a scratch buffer if
    /// the message turns out not to fit there (large, or too large).
    #[inline]
    pub(crate) fn tell_hint(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: impl Fn(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<bool, TellError> {
        if let Some(done) = self.tell_direct(r, manifest, &encode) {
            return done;
        }
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            self.encode_bounded(r, &mut scratch, encode)?;
            if self.is_large(r, scratch.len()) {
                // Handed over whole; the scratch buffer starts small again.
                let payload = std::mem::replace(&mut *scratch, BytesMut::with_capacity(4096));
                return self
                    .tell_large(r, manifest, payload.freeze())
                    .map(|()| false);
            }
            let mut st = lock(&self.state);
            if let LinkState::Up(link) = &*st {
                if r.uid != link.uid && r.uid != 0 {
                    return Err(TellError::Gone);
                }
                let res = link.sender.try_send_with(FrameKind::Message, |b| {
                    write_envelope(b, r, link, manifest, &scratch)
                });
                match res {
                    Ok(()) => return Ok(false),
                    Err(TrySendError::Full(_)) => return Err(TellError::Full),
                    Err(TrySendError::TooLarge(e)) => {
                        return Err(TellError::Serialization(SerializationError::Encode(
                            e.to_string(),
                        )));
                    }
                    // The link just died: reconnect below, keeping this message.
                    Err(_) => *st = LinkState::Idle,
                }
            }
            self.tell_slow(st, r, manifest, &scratch).map(|()| false)
        })
    }

    /// The common case of `tell`: the link is up and already knows the
    /// recipient's id, so the message is encoded straight into the link's
    /// queue, behind a compact envelope, with no scratch copy. Only a
    /// message that fits one frame of the queue goes this way (up to the
    /// large-message threshold and the maximum message size): one that
    /// does not is abandoned as soon as it crosses that size, and `None`
    /// sends it down the general path. `None` too when the link is not up
    /// or the recipient not yet defined on it.
    #[inline]
    fn tell_direct(
        &self,
        r: &Recipient,
        manifest: u32,
        encode: &impl Fn(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Option<Result<bool, TellError>> {
        let st = lock(&self.state);
        let LinkState::Up(link) = &*st else {
            return None;
        };
        if r.uid != link.uid && r.uid != 0 {
            return Some(Err(TellError::Gone));
        }
        let key = r.compressed.load(Ordering::Relaxed);
        if key >> 32 != u64::from(link.generation) || key as u32 == 0 {
            return None;
        }
        let room = self
            .large_threshold
            .min(self.max_message)
            .saturating_sub(Self::envelope_overhead(r));
        let mut failed = None;
        let res = link.sender.try_push_with(FrameKind::Message, |b| {
            let mut head = [0u8; ENV_HEADER];
            head[1..5].copy_from_slice(&(key as u32).to_le_bytes());
            head[5..9].copy_from_slice(&manifest.to_le_bytes());
            b.extend_from_slice(&head);
            let start = b.len();
            match with_encode_limit(start + room, || encode(b)) {
                // A custom encoder is not bounded while encoding.
                Ok(()) => b.len() - start <= room,
                // Large, or too large: the general path tells which.
                Err(SerializationError::TooLarge { .. }) => false,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        match res {
            Ok(Pushed::Queued { yield_now }) => Some(Ok(yield_now)),
            Ok(Pushed::Abandoned) => failed.map(|e| Err(TellError::Serialization(e))),
            Err(TrySendError::Full(_)) => Some(Err(TellError::Full)),
            Err(TrySendError::TooLarge(e)) => Some(Err(TellError::Serialization(
                SerializationError::Encode(e.to_string()),
            ))),
            // The link just died: the general path reconnects.
            Err(_) => None,
        }
    }

    /// `tell` when the link is not up: buffer while connecting, start a
    /// connect, or refuse a ref of a quarantined incarnation. Kept out of
    /// line so that the hot path stays small.
    #[cold]
    #[inline(never)]
    fn tell_slow(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, LinkState>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: &[u8],
    ) -> Result<(), TellError> {
        if self.is_quarantined(r.uid) {
            return Err(TellError::Gone);
        }
        match &mut *st {
            LinkState::Up(_) => unreachable!("tell handles an up link"),
            LinkState::Connecting { pending } => {
                if pending.len() >= self.pending_capacity {
                    return Err(TellError::Full);
                }
                pending.push_back(Pending::User(
                    r.clone(),
                    manifest,
                    Bytes::copy_from_slice(payload),
                ));
                Ok(())
            }
            LinkState::Idle => {
                *st = LinkState::Connecting {
                    pending: VecDeque::from([Pending::User(
                        r.clone(),
                        manifest,
                        Bytes::copy_from_slice(payload),
                    )]),
                };
                drop(st);
                self.spawn_connect();
                Ok(())
            }
        }
    }

    /// Remote `send`: waits while the link's queue is full. The first try
    /// is `tell`'s allocation-free path; only a full link costs a copy.
    /// Encodes a message for [`send_payload`](Self::send_payload), before
    /// any await, so the waiting future holds bytes rather than a borrow of
    /// the message.
    pub(crate) fn encode_payload(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        encode: impl Fn(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<Bytes, TellError> {
        let mut payload = BytesMut::new();
        self.encode_bounded(r, &mut payload, encode)?;
        Ok(payload.freeze())
    }

    /// Remote `send` of an encoded message: waits while the link's queue is
    /// full.
    pub(crate) async fn send_payload(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: Bytes,
    ) -> Result<(), TellError> {
        if self.is_large(r, payload.len()) {
            return self.send_large_wait(r, manifest, payload).await;
        }
        loop {
            let link = match &*lock(&self.state) {
                LinkState::Up(link) => Some(link.clone()),
                _ => None,
            };
            match link {
                Some(link) if r.uid != link.uid && r.uid != 0 => return Err(TellError::Gone),
                Some(link) => {
                    let l2 = link.clone();
                    if link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_envelope(b, r, &l2, manifest, &payload)
                        })
                        .await
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
                // The connect buffer is full: wait for the link to come up.
                None => self.up.notified().await,
            }
            match self.tell(r, manifest, |b| {
                b.extend_from_slice(&payload);
                Ok(())
            }) {
                Err(TellError::Full) => {}
                other => return other,
            }
        }
    }

    /// `send` of a large message: waits while the large-message lane is
    /// full.
    async fn send_large_wait(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        mut payload: Bytes,
    ) -> Result<(), TellError> {
        self.check_large(r, payload.len())?;
        loop {
            let room = self.large_room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.enqueue_large(r, manifest, payload) {
                Ok(()) => return Ok(()),
                Err(p) => payload = p,
            }
            room.await;
        }
    }

    /// Queues a system message, connecting if needed.
    fn send_system(self: &Arc<Self>, msg: &SysWire) {
        let mut body = BytesMut::new();
        if let Err(e) = Bincode.serialize(msg, &mut body) {
            tracing::error!(error = %e, "system message does not encode");
            return;
        }
        let body = body.freeze();
        let mut st = lock(&self.state);
        match &mut *st {
            LinkState::Up(link) => match link.sender.try_send(Frame {
                kind: FrameKind::System,
                body,
            }) {
                Ok(()) => {}
                Err(TrySendError::Full(f)) => {
                    // Never dropped: wait for room off this thread.
                    let sender = link.sender.clone();
                    tokio::spawn(async move {
                        let _ = sender.send(f).await;
                    });
                }
                Err(e) => {
                    let body = e.into_inner().map(|f| f.body).unwrap_or_default();
                    *st = LinkState::Connecting {
                        pending: VecDeque::from([Pending::System(body)]),
                    };
                    drop(st);
                    self.spawn_connect();
                }
            },
            LinkState::Connecting { pending } => pending.push_back(Pending::System(body)),
            LinkState::Idle => {
                *st = LinkState::Connecting {
                    pending: VecDeque::from([Pending::System(body)]),
                };
                drop(st);
                self.spawn_connect();
            }
        }
    }

    pub(crate) fn send_terminated(self: &Arc<Self>, watch_id: u64, t: &Terminated) {
        self.send_reliable(&SysWire::Terminated {
            watch_id,
            reason: t.reason.clone(),
        });
    }

    pub(crate) fn send_stop(self: &Arc<Self>, r: &Recipient) {
        if self.is_quarantined(r.uid) {
            return;
        }
        self.send_reliable(&SysWire::Stop {
            path: r.path.elements().to_owned(),
        });
    }

    pub(crate) fn watch(self: &Arc<Self>, r: &Recipient, sink: WatchSink) {
        if self.is_quarantined(r.uid) {
            return sink.deliver(Terminated {
                path: r.path.clone(),
                reason: StopReason::NodeUnreachable(format!(
                    "incarnation {:#x} of {} is quarantined",
                    r.uid, self.node
                )),
            });
        }
        let watch_id = self.next_req.fetch_add(1, Ordering::Relaxed);
        lock(&self.watches).insert(watch_id, (r.path.clone(), sink));
        self.arm_detector();
        self.send_reliable(&SysWire::Watch {
            path: r.path.elements().to_owned(),
            watch_id,
        });
    }

    fn is_quarantined(&self, uid: u64) -> bool {
        uid != 0 && lock(&self.quarantined).contains(&uid)
    }

    fn emit(&self, event: RemoteEvent) {
        if let Some(sys) = self.system.upgrade() {
            let _ = sys.events.send(event);
        }
    }

    /// Queues a system message for exactly-once delivery: numbered, kept
    /// until acknowledged, resent after a reconnect or when unacknowledged
    /// for a heartbeat interval. A full buffer quarantines the peer.
    fn send_reliable(self: &Arc<Self>, msg: &SysWire) {
        let mut body = BytesMut::new();
        if let Err(e) = Bincode.serialize(msg, &mut body) {
            tracing::error!(error = %e, "system message does not encode");
            return;
        }
        let body = body.freeze();
        let mut out = lock(&self.sys_out);
        let seq = match out.push(body.clone()) {
            Ok(seq) => seq,
            Err(overflow) => {
                drop(out);
                let uid = self.peer_uid.load(Ordering::Relaxed);
                tracing::error!(node = %self.node, uid, capacity = overflow.capacity, "system message buffer overflowed: the peer acknowledged none of the last {} system messages; quarantining it", overflow.capacity);
                self.quarantine(
                    uid,
                    &format!(
                        "system message buffer overflowed ({} unacknowledged)",
                        overflow.capacity
                    ),
                );
                return;
            }
        };
        let frame = reliable_frame(out.epoch(), seq, &body);
        let up = match &*lock(&self.state) {
            LinkState::Up(link) => {
                // Full: the resend timer sends it later, in order.
                let _ = link.sender.try_send(frame);
                true
            }
            _ => false,
        };
        drop(out);
        if !up {
            self.ensure_connecting();
        }
    }

    /// Resends every unacknowledged system message on the current link.
    fn resend_unacked(&self) {
        let out = lock(&self.sys_out);
        if out.len() == 0 {
            return;
        }
        let st = lock(&self.state);
        let LinkState::Up(link) = &*st else { return };
        for (seq, body) in out.unacked() {
            if link
                .sender
                .try_send(reliable_frame(out.epoch(), *seq, body))
                .is_err()
            {
                break;
            }
        }
    }

    /// Starts connecting if nothing is (and the backoff allows).
    fn ensure_connecting(self: &Arc<Self>) {
        {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Idle) {
                *st = LinkState::Connecting {
                    pending: VecDeque::new(),
                };
            }
        }
        self.spawn_connect();
    }

    /// Arms the failure detector (a watch waits on this node).
    fn arm_detector(&self) {
        let mut life = lock(&self.life);
        if !life.monitoring && !life.unreachable {
            life.monitoring = true;
            life.hb.reset(Instant::now());
        }
    }

    /// A heartbeat ack for `seq` arrived on one of this node's links.
    fn on_heartbeat_ack(&self, seq: u64) {
        let now = Instant::now();
        let mut life = lock(&self.life);
        life.hb.handle_ack(now, seq);
        if life.unreachable {
            life.unreachable = false;
            life.monitoring = true;
            life.hb.reset(now);
            drop(life);
            let uid = self.peer_uid.load(Ordering::Relaxed);
            tracing::info!(node = %self.node, uid, "node reachable again");
            self.emit(RemoteEvent::Reachable {
                node: self.node.to_string(),
                uid,
            });
        }
    }

    /// One heartbeat tick: send a heartbeat, consult the detector, reconnect
    /// when due, resend unacknowledged system messages. Returns when to run
    /// again.
    fn tick(self: &Arc<Self>, now: Instant) -> Instant {
        let link = match &*lock(&self.state) {
            LinkState::Up(l) => Some(l.sender.clone()),
            _ => None,
        };
        let needs_link = !lock(&self.watches).is_empty()
            || lock(&self.sys_out).len() > 0
            || matches!(*lock(&self.state), LinkState::Connecting { .. });
        let mut life = lock(&self.life);
        if let Some(seq) = life.hb.poll_transmit(now)
            && let Some(sender) = &link
        {
            sender.send_heartbeat(&seq.to_le_bytes());
        }
        let fire = life.monitoring && !life.unreachable && !life.hb.is_available(now);
        let phi = life.hb.phi(now);
        if fire {
            life.unreachable = true;
            life.monitoring = false;
        }
        let interval = life.hb.config().interval();
        let resend = link.is_some() && now >= life.last_resend + interval;
        if resend {
            life.last_resend = now;
        }
        let reconnect = link.is_none() && needs_link && now >= life.next_connect;
        let mut next = life.hb.poll_timeout();
        if link.is_none() && needs_link {
            next = next.min(life.next_connect.max(now + Duration::from_millis(1)));
        }
        drop(life);
        if fire {
            self.declare_unreachable(phi);
        }
        if reconnect {
            self.ensure_connecting();
        }
        if resend {
            self.resend_unacked();
        }
        next
    }

    /// The failure detector fired: watchers hear `Terminated`, waiting
    /// resolves fail, the system-message stream starts over, and the links
    /// are dropped (the association keeps reconnecting while it has work).
    fn declare_unreachable(self: &Arc<Self>, phi: f64) {
        let uid = self.peer_uid.load(Ordering::Relaxed);
        tracing::warn!(node = %self.node, uid, phi, "node unreachable: failure detector fired");
        self.emit(RemoteEvent::Unreachable {
            node: self.node.to_string(),
            uid,
        });
        self.fail_waiters(&format!(
            "failure detector: phi {phi:.1} reached the threshold"
        ));
        self.reset_sys_out("node unreachable");
        let conns: Vec<Connection> = lock(&self.conns).drain().map(|(_, c)| c).collect();
        for c in conns {
            c.abort("node unreachable");
        }
    }

    fn reset_sys_out(&self, why: &str) {
        let dropped = lock(&self.sys_out).reset();
        if dropped > 0 {
            tracing::warn!(node = %self.node, dropped, reason = why, "unacknowledged system messages dropped");
        }
    }

    /// Quarantines incarnation `uid`: never talked to again; its watchers
    /// get `Terminated`, refs to it become dead ends.
    fn quarantine(self: &Arc<Self>, uid: u64, reason: &str) {
        if uid == 0 || !lock(&self.quarantined).insert(uid) {
            return;
        }
        tracing::warn!(node = %self.node, uid, reason, "incarnation quarantined");
        self.emit(RemoteEvent::Quarantined {
            node: self.node.to_string(),
            uid,
            reason: reason.to_owned(),
        });
        {
            let mut life = lock(&self.life);
            life.monitoring = false;
            life.unreachable = false;
        }
        self.fail_waiters(&format!("quarantined: {reason}"));
        self.reset_sys_out(reason);
        let old: Vec<u32> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| c.peer().uid == uid)
            .map(|(g, _)| *g)
            .collect();
        for g in old {
            let conn = lock(&self.conns).remove(&g);
            if let Some(c) = conn {
                c.abort(&format!("incarnation quarantined: {reason}"));
            }
        }
    }

    async fn identify(
        self: &Arc<Self>,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let id = self.next_req.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            lock(&self.identifies).insert(id, tx);
            self.send_system(&SysWire::Identify {
                id,
                path: path.elements().to_owned(),
            });
            let res = tokio::time::timeout_at(deadline, rx).await;
            lock(&self.identifies).remove(&id);
            return match res {
                Ok(Ok(Ok(m))) => Ok(m),
                // Asked again on the link that replaces it.
                Ok(Ok(Err(IdentifyFailed::Replaced))) => continue,
                Ok(Ok(Err(IdentifyFailed::Unreachable(reason)))) => {
                    Err(ResolveError::Unreachable {
                        addr: self.node.to_string(),
                        reason,
                    })
                }
                Ok(Err(_)) => Err(ResolveError::Unreachable {
                    addr: self.node.to_string(),
                    reason: "link closed".into(),
                }),
                Err(_) => Err(ResolveError::Timeout {
                    addr: self.node.to_string(),
                    timeout,
                }),
            };
        }
    }

    /// Starts one connect attempt, unless one is in flight or the backoff
    /// says to wait (the heartbeat tick tries again when it is due).
    fn spawn_connect(self: &Arc<Self>) {
        if Instant::now() < lock(&self.life).next_connect {
            return;
        }
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let assoc = self.clone();
        tokio::spawn(async move {
            let res = assoc.connect().await;
            assoc.connecting.store(false, Ordering::Release);
            if let Err(reason) = res {
                tracing::warn!(node = %assoc.node, %reason, "connect failed");
                assoc.link_failed(&reason);
            }
        });
    }

    async fn connect(self: &Arc<Self>) -> Result<(), String> {
        let sys = self.system.upgrade().ok_or("system shut down")?;
        let remoting = sys.remoting.get().ok_or("no remoting")?;
        let addr = match sys.config.routes.get(&*self.node) {
            // SystemConfig::set_route: dialed elsewhere, identity unchanged.
            Some(addr) => *addr,
            None => {
                let hostport = self
                    .node
                    .split_once('@')
                    .map(|(_, hp)| hp)
                    .ok_or("node has no host:port")?;
                tokio::net::lookup_host(hostport)
                    .await
                    .map_err(|e| format!("cannot resolve {hostport}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("{hostport} resolves to no address"))?
            }
        };
        let est = remoting
            .endpoint
            .connect(addr)
            .await
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        if est.peer().addr != *self.node {
            return Err(format!(
                "peer at {addr} identifies as {:?}, expected {:?}",
                est.peer().addr,
                self.node
            ));
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let uid = est.peer().uid;
        let conn = est.start(Inbound::new(sys.clone(), self.clone(), generation, uid));
        self.install(conn, generation, true).await;
        Ok(())
    }

    /// Makes `conn` this node's sending link (unless one is up already, in
    /// which case it only carries inbound traffic), flushing what was
    /// buffered while connecting, in order.
    ///
    /// A connection from a quarantined incarnation is refused; one from a
    /// new incarnation quarantines the old. When both nodes dialed at once,
    /// the connection dialed by the node with the lower address wins on
    /// both sides, and the other is closed.
    async fn install(self: &Arc<Self>, conn: Connection, generation: u32, dialed: bool) {
        let uid = conn.peer().uid;
        if self.is_quarantined(uid) {
            tracing::warn!(node = %self.node, uid, "refusing a connection from a quarantined incarnation");
            conn.close("your incarnation is quarantined").await;
            return;
        }
        let old = self.peer_uid.swap(uid, Ordering::AcqRel);
        if old != 0 && old != uid {
            self.quarantine(old, &format!("restarted as incarnation {uid:#x}"));
        }
        // The same incarnation back after the detector fired: a healed
        // partition (the unreachable links were aborted, so this is how it
        // comes back).
        let was_unreachable = {
            let mut life = lock(&self.life);
            life.backoff.reset();
            life.monitoring = true;
            life.hb.reset(Instant::now());
            std::mem::replace(&mut life.unreachable, false)
        };
        let link = Link {
            sender: conn.sender(),
            generation,
            next_id: Arc::new(AtomicU32::new(1)),
            uid,
            dialed,
        };
        lock(&self.conns).insert(generation, conn);
        self.emit(RemoteEvent::Connected {
            node: self.node.to_string(),
            uid,
        });
        if was_unreachable {
            tracing::info!(node = %self.node, uid, "node reachable again");
            self.emit(RemoteEvent::Reachable {
                node: self.node.to_string(),
                uid,
            });
        }
        // The lower node's dialed connection is the one both sides keep.
        let winner_dialed = *self.local_node < *self.node;
        loop {
            let chunk: Vec<Pending> = {
                let mut st = lock(&self.state);
                match &mut *st {
                    LinkState::Up(cur) => {
                        // A new incarnation, or the same direction again (a
                        // reconnect the old link has not noticed yet): the
                        // new connection is the live one. Otherwise both
                        // nodes dialed: the lower node's dial wins.
                        let new_wins =
                            cur.uid != uid || cur.dialed == dialed || dialed == winner_dialed;
                        let loser = if new_wins {
                            std::mem::replace(cur, link).generation
                        } else {
                            generation
                        };
                        drop(st);
                        self.close_duplicate(loser);
                        self.resend_unacked();
                        return;
                    }
                    LinkState::Idle => {
                        *st = LinkState::Up(link);
                        drop(st);
                        self.up.notify_waiters();
                        self.resend_unacked();
                        return;
                    }
                    LinkState::Connecting { pending } => {
                        if pending.is_empty() {
                            *st = LinkState::Up(link);
                            drop(st);
                            self.up.notify_waiters();
                            self.resend_unacked();
                            return;
                        }
                        let n = pending.len().min(FLUSH_CHUNK);
                        pending.drain(..n).collect()
                    }
                }
            };
            // New messages keep queueing behind these until the link is up,
            // so order is kept.
            for p in chunk {
                let ok = match p {
                    Pending::User(r, ..) if r.uid != 0 && r.uid != uid => {
                        if let Some(sys) = self.system.upgrade() {
                            sys.dead_letter(
                                "(remote message)",
                                &r.path,
                                "the recipient's incarnation restarted",
                            );
                        }
                        true
                    }
                    Pending::User(r, manifest, payload) => link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_envelope(b, &r, &link, manifest, &payload)
                        })
                        .await
                        .is_ok(),
                    Pending::System(body) => link
                        .sender
                        .send(Frame {
                            kind: FrameKind::System,
                            body,
                        })
                        .await
                        .is_ok(),
                };
                if !ok {
                    // The new link died while flushing; its close handler
                    // reports the rest.
                    if let Some(sys) = self.system.upgrade() {
                        sys.dead_letter("(pending)", &self.node, "link closed while flushing");
                    }
                }
            }
        }
    }

    /// An inbound connection from this node.
    fn install_inbound(self: &Arc<Self>, conn: Connection, generation: u32) {
        let assoc = self.clone();
        tokio::spawn(async move { assoc.install(conn, generation, false).await });
    }

    /// Closes the connection that lost a simultaneous connect, after what
    /// it has queued is written.
    fn close_duplicate(&self, generation: u32) {
        let conn = lock(&self.conns).remove(&generation);
        if let Some(c) = conn {
            tracing::debug!(node = %self.node, generation, "closing the duplicate connection");
            tokio::spawn(async move {
                c.close(DUPLICATE).await;
            });
        }
    }

    /// The peer told us it is shutting down.
    fn peer_shut_down(self: &Arc<Self>, uid: u64) {
        self.quarantine(uid, "peer shut down");
    }

    /// Connecting failed: buffered messages become dead letters, waiting
    /// resolves fail, watchers hear that the node is unreachable.
    fn link_failed(self: &Arc<Self>, reason: &str) {
        // One guard: a second `lock` while the scrutinee's guard lives (as it
        // did here) deadlocks this thread and every later user of the state.
        let pending = {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Up(_)) {
                // Raced with an inbound link coming up: keep it.
                return;
            }
            match std::mem::replace(&mut *st, LinkState::Idle) {
                LinkState::Connecting { pending } => pending,
                _ => VecDeque::new(),
            }
        };
        let users = pending
            .iter()
            .filter(|p| matches!(p, Pending::User(..)))
            .count() as u64;
        if let Some(sys) = self.system.upgrade() {
            sys.dead_letters_n(users, "(remote message)", &self.node, reason);
        }
        self.schedule_reconnect();
        self.up.notify_waiters();
        // Watchers wait for the failure detector: the node may be back soon.
        self.fail_identifies(reason);
    }

    /// The next connect attempt waits for the backoff.
    fn schedule_reconnect(&self) {
        let mut life = lock(&self.life);
        let delay = life.backoff.next_delay(transport::random_uid());
        life.next_connect = Instant::now() + delay;
    }

    fn fail_identifies(&self, reason: &str) {
        for (_, tx) in lock(&self.identifies).drain() {
            let _ = tx.send(Err(IdentifyFailed::Unreachable(reason.to_owned())));
        }
    }

    fn fail_waiters(self: &Arc<Self>, reason: &str) {
        self.fail_identifies(reason);
        let watches: Vec<_> = lock(&self.watches).drain().collect();
        for (_, (path, sink)) in watches {
            sink.deliver(Terminated {
                path,
                reason: StopReason::NodeUnreachable(reason.to_owned()),
            });
        }
    }

    /// A connection of this association ended.
    fn link_closed(self: &Arc<Self>, generation: u32, reason: &CloseReason) {
        let was_up = {
            let mut st = lock(&self.state);
            match &*st {
                LinkState::Up(l) if l.generation == generation => {
                    *st = LinkState::Idle;
                    true
                }
                _ => false,
            }
        };
        // The large-message lane may wait for acks on it.
        self.large_ack.notify_waiters();
        // Outside the state lock: dropping aborts a live connection. What it
        // still had queued is counted as dead letters once it has ended.
        let conn = lock(&self.conns).remove(&generation);
        if let Some(conn) = conn
            && let Some(sys) = self.system.upgrade()
        {
            let node = self.node.clone();
            let why = reason.to_string();
            tokio::spawn(async move {
                conn.closed().await;
                let lost = conn.stats().frames_dropped;
                sys.dead_letters_n(lost, "(queued on a lost link)", &node, &why);
            });
        }
        if was_up {
            tracing::info!(node = %self.node, %reason, "link to node closed");
            self.schedule_reconnect();
            self.emit(RemoteEvent::Disconnected {
                node: self.node.to_string(),
                reason: reason.to_string(),
            });
            if matches!(reason, CloseReason::Remote(r) if r == DUPLICATE) {
                // The peer kept the link it dialed, which is coming (or
                // here already): an identify that went on this one may
                // have been dropped with it, so it is asked again.
                for (_, tx) in lock(&self.identifies).drain() {
                    let _ = tx.send(Err(IdentifyFailed::Replaced));
                }
            } else {
                self.fail_identifies(&reason.to_string());
            }
        }
    }

    fn stats(&self) -> ConnStats {
        let mut total = ConnStats::default();
        for c in lock(&self.conns).values() {
            total.add(&c.stats());
        }
        total
    }
}

/// A connection's inbound side: decodes envelopes, groups them by
/// recipient, and hands each mailbox its group once per read.
pub(crate) struct Inbound {
    sys: Arc<SystemInner>,
    assoc: Arc<Association>,
    generation: u32,
    /// The incarnation at the other end of this connection.
    peer_uid: u64,
    sender: Option<Sender>,
    table: Vec<Option<Entry>>,
    runs: Vec<Run>,
    /// Index in `runs` of the run the last message went to (a hint).
    last_run: usize,
    /// Bytes of the current read not yet handed to a handler method: how
    /// much a run buffer may still need this read.
    left_in_read: usize,
    /// Malformed envelopes in the current window, and when it started.
    malformed_count: usize,
    malformed_since: Option<Instant>,
    /// Set once the connection was aborted for malformed input.
    misbehaving: bool,
    /// The large message being reassembled on this connection.
    partial: Option<Partial>,
    /// A large message whose further fragments are dropped (too large, or
    /// for no actor that takes it).
    skipping: Option<u32>,
    /// Reassembled large messages, handed over at the end of the read:
    /// recipient path, target, a one-record batch.
    ready: Vec<(Arc<str>, Arc<dyn RemoteTarget>, Bytes)>,
    /// The last fragment of this read (message id, end offset), to be
    /// acknowledged at the end of the read.
    large_ack: Option<(u32, u32)>,
}

/// A large message being reassembled.
struct Partial {
    msg: u32,
    id: u32,
    manifest: u32,
    total: usize,
    path: Arc<str>,
    target: Arc<dyn RemoteTarget>,
    /// A one-record batch: `[total u32 LE]`, then the payload so far. A
    /// `Vec` for `reserve_exact`.
    buf: Vec<u8>,
}

impl Partial {
    fn received(&self) -> usize {
        self.buf.len() - 4
    }
}

#[derive(Clone)]
struct Entry {
    path: Arc<str>,
    target: Option<Arc<dyn RemoteTarget>>,
    /// `target`'s manifest (0 without one), so that checking each message
    /// is not a virtual call. Set only by `set_target`.
    manifest: u32,
}

impl Entry {
    fn new(path: Arc<str>, target: Option<Arc<dyn RemoteTarget>>) -> Self {
        let mut e = Self {
            path,
            target: None,
            manifest: 0,
        };
        e.set_target(target);
        e
    }

    fn set_target(&mut self, target: Option<Arc<dyn RemoteTarget>>) {
        self.manifest = target.as_ref().map_or(0, |t| t.manifest());
        self.target = target;
    }

    /// Whether `target` is set and takes `manifest`.
    #[inline]
    fn takes(&self, manifest: u32) -> bool {
        self.target.is_some() && self.manifest == manifest
    }
}

/// The payloads of one read for one recipient, copied into one buffer of
/// `[len u32 LE][payload]` records that the mailbox takes whole.
struct Run {
    id: u32,
    target: Arc<dyn RemoteTarget>,
    buf: BytesMut,
    n: usize,
}

/// Initial size of a run buffer: a read's worth of small messages.
const RUN_BUFFER: usize = 64 * 1024;
/// Runs (recipients) remembered between reads.
const MAX_RUNS: usize = 64;

impl Inbound {
    fn new(sys: Arc<SystemInner>, assoc: Arc<Association>, generation: u32, peer_uid: u64) -> Self {
        Self {
            sys,
            assoc,
            generation,
            peer_uid,
            sender: None,
            table: Vec::new(),
            runs: Vec::new(),
            last_run: 0,
            left_in_read: 0,
            malformed_count: 0,
            malformed_since: None,
            misbehaving: false,
            partial: None,
            skipping: None,
            ready: Vec::new(),
            large_ack: None,
        }
    }

    fn dead(&self, what: &str, to: &dyn std::fmt::Display, why: &str) {
        self.sys.dead_letter(what, to, why);
    }

    /// Counts a malformed envelope or system message (a dead letter), and
    /// aborts the connection once the peer sends more than the configured
    /// number within a second: a peer that keeps sending garbage is broken
    /// or hostile, and every malformed envelope costs a log line.
    #[cold]
    fn malformed(&mut self, why: &str) {
        self.dead("(malformed envelope)", &self.assoc.node.clone(), why);
        let now = Instant::now();
        match self.malformed_since {
            Some(t) if now.duration_since(t) < MALFORMED_WINDOW => self.malformed_count += 1,
            _ => {
                self.malformed_since = Some(now);
                self.malformed_count = 1;
            }
        }
        let limit = self.sys.config.max_malformed_per_second;
        if self.malformed_count > limit && !self.misbehaving {
            self.misbehaving = true;
            let reason = format!(
                "peer sent {} malformed envelopes within {MALFORMED_WINDOW:?} (limit {limit}); last: {why}",
                self.malformed_count
            );
            tracing::warn!(node = %self.assoc.node, %reason, "closing connection to misbehaving peer");
            if let Some(sender) = &self.sender {
                sender.abort(&reason);
            }
        }
    }

    fn on_envelope(&mut self, body: &[u8]) {
        if self.misbehaving {
            // Aborted: the rest of this read is not worth parsing.
            return;
        }
        let env = match parse_envelope(body) {
            Ok(env) => env,
            Err(why) => return self.malformed(why),
        };
        let (id, manifest, b) = (env.id, env.manifest, env.payload);
        if let Some(path) = env.define {
            let idx = id as usize;
            if idx >= self.table.len() {
                self.table.resize(idx + 1, None);
            }
            self.table[idx] = Some(Entry::new(path.into(), self.sys.lookup(path)));
        }
        if let Some(f) = env.fragment {
            return self.on_fragment(id, manifest, f, b);
        }
        self.refresh_target(id, manifest);
        let Some(Some(entry)) = self.table.get(id as usize) else {
            // Ids are defined in-stream before use: this is a broken peer.
            return self.malformed(&format!("unknown recipient id {id}"));
        };
        let Some(target) = &entry.target else {
            let to = self.sys.path(&entry.path);
            return self.dead(&format!("manifest {manifest:#010x}"), &to, "no such actor");
        };
        if !entry.takes(manifest) {
            let to = self.sys.path(&entry.path);
            return self.dead(
                &format!("manifest {manifest:#010x}"),
                &to,
                &format!(
                    "actor takes {}, message is another or unregistered type",
                    target.manifest_name()
                ),
            );
        }
        // Consecutive messages mostly go to the same recipient.
        let last = self.last_run;
        let found = if self.runs.get(last).is_some_and(|r| r.id == id) {
            Some(last)
        } else {
            self.runs.iter().position(|r| r.id == id)
        };
        let run = match found {
            Some(i) => {
                self.last_run = i;
                &mut self.runs[i]
            }
            None => {
                if self.runs.len() >= MAX_RUNS {
                    self.runs.retain(|r| r.n > 0);
                }
                let target = target.clone();
                self.runs.push(Run {
                    id,
                    target,
                    buf: BytesMut::new(),
                    n: 0,
                });
                self.runs.last_mut().expect("just pushed")
            }
        };
        if !Arc::ptr_eq(&run.target, target) {
            // The id was redefined for another actor; deliver what the old
            // one had first.
            run.target = target.clone();
        }
        let need = 4 + b.len();
        let left = self.left_in_read;
        if run.buf.capacity() - run.buf.len() < need {
            // Room for the rest of this read at once: growing frame by
            // frame copied every batch again (perf: 12% of the receiving
            // thread in memmove with reads of 1 MiB).
            run.buf.reserve(need.max(RUN_BUFFER).max(left));
        }
        run.buf.put_u32_le(b.len() as u32);
        run.buf.put_slice(b);
        run.n += 1;
    }

    /// The actor at a path changes when one stops and another is spawned
    /// there (or when one is spawned after the path was defined): when the
    /// cached target of `id` cannot take `manifest`, look the path up again.
    #[inline(always)]
    fn refresh_target(&mut self, id: u32, manifest: u32) {
        if let Some(Some(entry)) = self.table.get_mut(id as usize)
            && !entry.takes(manifest)
        {
            entry.set_target(self.sys.lookup(&entry.path));
        }
    }

    /// The target for a large message to recipient `id`, or why there is
    /// none (reported here, as for a small message).
    fn large_target(
        &mut self,
        id: u32,
        manifest: u32,
    ) -> Option<(Arc<str>, Arc<dyn RemoteTarget>)> {
        self.refresh_target(id, manifest);
        let Some(Some(entry)) = self.table.get(id as usize) else {
            self.malformed(&format!("unknown recipient id {id}"));
            return None;
        };
        let what = format!("large message, manifest {manifest:#010x}");
        match &entry.target {
            None => {
                let to = self.sys.path(&entry.path);
                self.dead(&what, &to, "no such actor");
                None
            }
            Some(t) if t.manifest() != manifest => {
                let to = self.sys.path(&entry.path);
                let why = format!(
                    "actor takes {}, message is another or unregistered type",
                    t.manifest_name()
                );
                self.dead(&what, &to, &why);
                None
            }
            Some(t) => Some((entry.path.clone(), t.clone())),
        }
    }

    /// One fragment of a large message. Fragments of a message arrive in
    /// order and one message at a time (the sender's lane sends them so);
    /// anything else is a malformed envelope that drops the message.
    #[cold]
    #[inline(never)]
    fn on_fragment(&mut self, id: u32, manifest: u32, f: Fragment, piece: &[u8]) {
        // Acknowledged whatever becomes of it: the sender only paces on it.
        self.large_ack = Some((f.msg, f.offset.saturating_add(piece.len() as u32)));
        let total = f.total as usize;
        if f.offset == 0 {
            self.skipping = None;
            if let Some(p) = self.partial.take() {
                self.malformed(&format!(
                    "large message {} left at {} of {} bytes when message {} started",
                    p.msg,
                    p.received(),
                    p.total,
                    f.msg
                ));
            }
            if piece.is_empty() || piece.len() > total {
                return self.malformed(&format!(
                    "fragment of {} bytes does not fit large message {} of {total} bytes",
                    piece.len(),
                    f.msg
                ));
            }
            let max = self.sys.config.max_message_size;
            if total > max {
                self.skipping = Some(f.msg);
                let to = self
                    .table
                    .get(id as usize)
                    .and_then(|e| e.as_ref())
                    .map(|e| self.sys.path(&e.path).to_string())
                    .unwrap_or_else(|| self.assoc.node.to_string());
                return self.dead(
                    &format!("large message of {total} bytes"),
                    &to,
                    &format!("exceeds the maximum message size of {max} bytes"),
                );
            }
            let Some((path, target)) = self.large_target(id, manifest) else {
                self.skipping = Some(f.msg);
                return;
            };
            // Grown as fragments arrive: a peer's claimed total is never
            // allocated up front.
            let mut buf = Vec::with_capacity(4 + piece.len());
            buf.extend_from_slice(&f.total.to_le_bytes());
            buf.extend_from_slice(piece);
            self.partial = Some(Partial {
                msg: f.msg,
                id,
                manifest,
                total,
                path,
                target,
                buf,
            });
        } else {
            if self.skipping == Some(f.msg) {
                return;
            }
            let Some(p) = &mut self.partial else {
                return self.malformed(&format!(
                    "fragment at offset {} of large message {}, which never started",
                    f.offset, f.msg
                ));
            };
            if p.msg != f.msg
                || p.id != id
                || p.manifest != manifest
                || p.total != total
                || p.received() != f.offset as usize
                || piece.is_empty()
                || piece.len() > total - p.received()
            {
                let why = format!(
                    "fragment (message {}, {} bytes at offset {} of {total}) does not continue large message {} ({} of {} bytes received)",
                    f.msg,
                    piece.len(),
                    f.offset,
                    p.msg,
                    p.received(),
                    p.total
                );
                self.partial = None;
                return self.malformed(&why);
            }
            if p.buf.capacity() - p.buf.len() < piece.len() {
                // Double, but never beyond the message's size.
                let want = p.received().max(piece.len()).min(total - p.received());
                p.buf.reserve_exact(want);
            }
            p.buf.extend_from_slice(piece);
        }
        if let Some(p) = &self.partial
            && p.received() == p.total
        {
            let p = self.partial.take().expect("checked");
            self.ready.push((p.path, p.target, Bytes::from(p.buf)));
        }
    }

    fn on_system(&mut self, body: &[u8]) {
        let msg: SysWire = match Bincode.deserialize(body) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(node = %self.assoc.node, error = %e, "undecodable system message dropped");
                return self.malformed("undecodable system message");
            }
        };
        match msg {
            SysWire::Reliable { epoch, seq, body } => {
                // Held while delivering, so two links of one node cannot
                // deliver out of order.
                let assoc = self.assoc.clone();
                let mut sys_in = lock(&assoc.sys_in);
                let ack = match sys_in.handle(self.peer_uid, epoch, seq) {
                    Receive::Deliver => {
                        match Bincode.deserialize::<SysWire>(&body) {
                            Ok(
                                inner @ (SysWire::Watch { .. }
                                | SysWire::Terminated { .. }
                                | SysWire::Stop { .. }),
                            ) => self.on_system_msg(inner),
                            Ok(_) => {
                                tracing::warn!(node = %self.assoc.node, "unexpected message in the reliable stream dropped")
                            }
                            Err(e) => {
                                tracing::warn!(node = %self.assoc.node, error = %e, "undecodable system message dropped")
                            }
                        }
                        Some(seq)
                    }
                    Receive::Duplicate(acked) => Some(acked),
                    Receive::Ignore => None,
                };
                drop(sys_in);
                if let (Some(seq), Some(sender)) = (ack, &self.sender) {
                    let mut out = BytesMut::new();
                    if Bincode
                        .serialize(&SysWire::Ack { epoch, seq }, &mut out)
                        .is_ok()
                    {
                        // Lost acks are harmless: the message is resent and
                        // acknowledged again.
                        let _ = sender.try_send(Frame {
                            kind: FrameKind::System,
                            body: out.freeze(),
                        });
                    }
                }
            }
            SysWire::Ack { epoch, seq } => lock(&self.assoc.sys_out).handle_ack(epoch, seq),
            SysWire::Shutdown => self.assoc.peer_shut_down(self.peer_uid),
            SysWire::LargeAck { msg, received } => self.assoc.on_large_ack(msg, received),
            other => self.on_system_msg(other),
        }
    }

    fn on_system_msg(&mut self, msg: SysWire) {
        match msg {
            SysWire::Identify { id, path } => {
                let manifest = self
                    .sys
                    .lookup(&path)
                    .map(|t| (t.manifest(), t.manifest_name().to_owned()));
                self.assoc.send_system(&SysWire::Identity { id, manifest });
            }
            SysWire::Identity { id, manifest } => {
                if let Some(tx) = lock(&self.assoc.identifies).remove(&id) {
                    let _ = tx.send(Ok(manifest));
                }
            }
            SysWire::Watch { path, watch_id } => {
                let sink = WatchSink::Remote {
                    assoc: self.assoc.clone(),
                    watch_id,
                };
                match self.sys.lookup(&path) {
                    Some(t) => t.add_watcher(sink),
                    None => sink.deliver(Terminated {
                        path: self.sys.path(&path),
                        reason: StopReason::NotFound,
                    }),
                }
            }
            SysWire::Terminated { watch_id, reason } => {
                if let Some((path, sink)) = lock(&self.assoc.watches).remove(&watch_id) {
                    sink.deliver(Terminated { path, reason });
                }
            }
            SysWire::Stop { path } => {
                if let Some(t) = self.sys.lookup(&path) {
                    t.stop();
                }
            }
            SysWire::Reliable { .. }
            | SysWire::Ack { .. }
            | SysWire::Shutdown
            | SysWire::LargeAck { .. } => {}
        }
    }
}

impl Handler for Inbound {
    fn on_start(&mut self, sender: &Sender) {
        self.sender = Some(sender.clone());
    }

    /// Envelopes are copied into per-recipient batch buffers at once, so
    /// the reader needs no reference-counted `Bytes` per frame.
    const BORROW: bool = true;

    fn on_read(&mut self, buffered: usize) {
        self.left_in_read = buffered;
    }

    fn on_frame_ref(&mut self, kind: FrameKind, body: &[u8]) {
        self.left_in_read = self
            .left_in_read
            .saturating_sub(transport::frame::HEADER_LEN + body.len());
        match kind {
            FrameKind::Message => self.on_envelope(body),
            FrameKind::System => self.on_system(body),
            _ => {}
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        self.on_frame_ref(frame.kind, &frame.body);
    }

    async fn on_batch_end(&mut self) {
        for run in &mut self.runs {
            if run.n == 0 {
                continue;
            }
            let n = std::mem::take(&mut run.n);
            let batch = run.buf.split().freeze();
            loop {
                match run.target.push_batch(&batch, n) {
                    Ok(()) => break,
                    // The mailbox is full: stop reading until it has room,
                    // so TCP pushes back on the sender.
                    Err(Refused::Full) => run.target.wait_space().await,
                    Err(Refused::Closed) => {
                        // A new actor may live at that path now: if it takes
                        // this type, the batch is its.
                        let entry = self.table.get_mut(run.id as usize).and_then(|e| e.as_mut());
                        if let Some(e) = entry {
                            e.set_target(self.sys.lookup(&e.path));
                            if let Some(t) = &e.target
                                && !Arc::ptr_eq(t, &run.target)
                                && t.manifest() == run.target.manifest()
                            {
                                run.target = t.clone();
                                continue;
                            }
                        }
                        let path = self
                            .table
                            .get(run.id as usize)
                            .and_then(|e| e.as_ref())
                            .map(|e| e.path.clone())
                            .unwrap_or_default();
                        self.sys.dead_letters_n(
                            n as u64,
                            run.target.manifest_name(),
                            &self.sys.path(&path),
                            "actor stopped",
                        );
                        break;
                    }
                }
            }
        }
        if let Some((msg, received)) = self.large_ack.take() {
            self.ack_large(msg, received);
        }
        if !self.ready.is_empty() {
            self.deliver_large().await;
        }
        // Runs whose recipient changed are re-created on the next message.
        let table = &self.table;
        self.runs.retain(|r| {
            table
                .get(r.id as usize)
                .and_then(|e| e.as_ref())
                .and_then(|e| e.target.as_ref())
                .is_some_and(|t| Arc::ptr_eq(t, &r.target))
        });
    }

    fn on_heartbeat_ack(&mut self, body: &[u8]) {
        if let Ok(seq) = <[u8; 8]>::try_from(body) {
            self.assoc.on_heartbeat_ack(u64::from_le_bytes(seq));
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        if let Some(p) = self.partial.take() {
            let why = format!(
                "connection closed after {} of {} bytes",
                p.received(),
                p.total
            );
            self.dead(
                &format!("large message of {} bytes", p.total),
                &self.sys.path(&p.path),
                &why,
            );
        }
        self.assoc.link_closed(self.generation, reason);
    }
}

impl Inbound {
    /// Tells the sender how far large message `msg` has been read, so
    /// that it sends more. Never dropped: a lost ack would stall its lane.
    #[cold]
    fn ack_large(&self, msg: u32, received: u32) {
        let Some(sender) = &self.sender else { return };
        let mut body = BytesMut::new();
        if Bincode
            .serialize(&SysWire::LargeAck { msg, received }, &mut body)
            .is_err()
        {
            return;
        }
        let frame = Frame {
            kind: FrameKind::System,
            body: body.freeze(),
        };
        if let Err(TrySendError::Full(f)) = sender.try_send(frame) {
            let sender = sender.clone();
            tokio::spawn(async move {
                let _ = sender.send(f).await;
            });
        }
    }

    /// Hands each reassembled large message to its mailbox, waiting for
    /// room like a run of small ones.
    async fn deliver_large(&mut self) {
        for (path, mut target, batch) in std::mem::take(&mut self.ready) {
            loop {
                match target.push_batch(&batch, 1) {
                    Ok(()) => break,
                    Err(Refused::Full) => target.wait_space().await,
                    Err(Refused::Closed) => {
                        if let Some(t) = self.sys.lookup(&path)
                            && !Arc::ptr_eq(&t, &target)
                            && t.manifest() == target.manifest()
                        {
                            target = t;
                            continue;
                        }
                        self.sys.dead_letter(
                            target.manifest_name(),
                            &self.sys.path(&path),
                            "actor stopped",
                        );
                        break;
                    }
                }
            }
        }
    }
}

/// An association's heartbeat task: one [`Association::tick`] per
/// interval (or when a reconnect is due), until the system shuts down or
/// the association is gone.
async fn keep(assoc: Weak<Association>, cancel: CancellationToken) {
    loop {
        let Some(a) = assoc.upgrade() else { return };
        let next = a.tick(Instant::now());
        drop(a);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(next.into()) => {}
        }
    }
}

/// Everything remote of one system.
pub(crate) struct Remoting {
    endpoint: Box<dyn Net>,
    associations: Mutex<HashMap<Arc<str>, Arc<Association>>>,
    refs: Mutex<HashMap<String, Weak<Recipient>>>,
    /// Stops the associations' heartbeat tasks.
    cancel: CancellationToken,
}

impl Remoting {
    pub(crate) async fn bind(
        name: &str,
        bind: SocketAddr,
        config: TransportConfig,
        tls: Option<TlsConfig>,
    ) -> Result<(Self, String), SystemError> {
        let advertise = |a| format!("{name}@{a}");
        let endpoint: Box<dyn Net> = match tls {
            None => Box::new(Endpoint::bind_with(bind, config, advertise).await?),
            Some(tls) => {
                let tls = Tls::new(tls).map_err(TransportError::from)?;
                Box::new(Endpoint::bind_secure(bind, config, tls, advertise).await?)
            }
        };
        let node = endpoint.advertised_addr().to_owned();
        Ok((
            Self {
                endpoint,
                associations: Mutex::new(HashMap::new()),
                refs: Mutex::new(HashMap::new()),
                cancel: CancellationToken::new(),
            },
            node,
        ))
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.endpoint.local_addr()
    }

    fn association(&self, sys: &Arc<SystemInner>, node: &str) -> Arc<Association> {
        let mut assocs = lock(&self.associations);
        if let Some(a) = assocs.get(node) {
            return a.clone();
        }
        assocs
            .entry(node.into())
            .or_insert_with(|| {
                let assoc = Arc::new(Association::new(
                    node.into(),
                    Arc::downgrade(sys),
                    &sys.config,
                    sys.node.clone(),
                ));
                tokio::spawn(keep(Arc::downgrade(&assoc), self.cancel.clone()));
                assoc
            })
            .clone()
    }

    pub(crate) fn start_accepting(&self, sys: &Arc<SystemInner>) {
        // Runs until `shutdown` closes the endpoint (accept returns None).
        let s = sys.clone();
        tokio::spawn(async move {
            let remoting = s.remoting.get().expect("set before accepting starts");
            loop {
                let next = remoting.endpoint.accept().await;
                match next {
                    None => return,
                    Some(Err(e)) => tracing::warn!(error = %e, "inbound connection refused"),
                    Some(Ok(est)) => {
                        let node = est.peer().addr.clone();
                        if ActorPath::parse(&format!("tcp://{node}/user/x")).is_err() {
                            tracing::warn!(peer = %est.peer().socket_addr, advertised = %node, "inbound node advertises an invalid address; closing");
                            continue;
                        }
                        let assoc = remoting.association(&s, &node);
                        let generation = assoc.generation.fetch_add(1, Ordering::Relaxed);
                        let uid = est.peer().uid;
                        let conn =
                            est.start(Inbound::new(s.clone(), assoc.clone(), generation, uid));
                        assoc.install_inbound(conn, generation);
                    }
                }
            }
        });
    }

    pub(crate) fn remote_ref<M: RemoteMessage>(
        &self,
        sys: &Arc<SystemInner>,
        path: ActorPath,
    ) -> ActorRef<M> {
        let assoc = self.association(sys, path.node());
        // A ref belongs to the incarnation of its node known when it was
        // made: after a restart, old refs are dead ends, new ones work.
        let uid = assoc.peer_uid.load(Ordering::Acquire);
        let key = format!("{path}#{uid:x}");
        let mut refs = lock(&self.refs);
        let recipient = match refs.get(&key).and_then(Weak::upgrade) {
            Some(r) => r,
            None => {
                let r = Arc::new(Recipient {
                    path,
                    assoc,
                    uid,
                    compressed: AtomicU64::new(0),
                });
                refs.retain(|_, w| w.strong_count() > 0);
                refs.insert(key, Arc::downgrade(&r));
                r
            }
        };
        drop(refs);
        ActorRef::remote(RemoteRef {
            recipient,
            manifest: manifest_id(M::MANIFEST),
            _msg: PhantomData,
            encode: M::encode,
        })
    }

    pub(crate) async fn identify(
        &self,
        sys: &Arc<SystemInner>,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        self.association(sys, path.node())
            .identify(path, timeout)
            .await
    }

    pub(crate) fn stats(&self) -> ConnStats {
        let mut total = ConnStats::default();
        for a in lock(&self.associations).values() {
            total.add(&a.stats());
        }
        total
    }

    pub(crate) async fn shutdown(&self) {
        self.cancel.cancel();
        let assocs: Vec<_> = lock(&self.associations).values().cloned().collect();
        let mut closing = tokio::task::JoinSet::new();
        let mut notice = BytesMut::new();
        if let Err(e) = Bincode.serialize(&SysWire::Shutdown, &mut notice) {
            tracing::error!(error = %e, "shutdown notice does not encode");
        }
        let notice = notice.freeze();
        for a in assocs {
            let conns: Vec<Connection> = lock(&a.conns).drain().map(|(_, c)| c).collect();
            *lock(&a.state) = LinkState::Idle;
            // Peers learn at once that this incarnation is gone, instead of
            // waiting for their failure detectors. It follows everything
            // queued before (the Terminated of this node's actors).
            for c in &conns {
                let _ = c.try_send(Frame {
                    kind: FrameKind::System,
                    body: notice.clone(),
                });
            }
            for c in conns {
                closing.spawn(async move {
                    c.close("actor system shut down").await;
                });
            }
        }
        while closing.join_next().await.is_some() {}
        self.endpoint.close();
    }
}
