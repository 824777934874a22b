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
//! # Hot path
//! `tell` serializes into a thread-local scratch buffer (outside any lock),
//! then copies header and payload into the link's pooled outbound buffer
//! under the transport's short lock. Inbound, the reader groups the payloads
//! of one socket read by recipient and hands each mailbox its group in one
//! push; the actor's own task decodes them.

use std::{
    any::Any,
    cell::RefCell,
    collections::{HashMap, VecDeque},
    future::Future,
    marker::PhantomData,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, Weak,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use transport::{
    CloseReason, ConnStats, Connection, Endpoint, Frame, FrameKind, Handler, Sender, Tls,
    TlsConfig, TransportConfig, TransportError, TrySendError,
};

use crate::{
    actor::{StopReason, Terminated},
    actor_ref::{ActorRef, RemoteRef},
    error::{ResolveError, SerializationError, SystemError},
    mailbox::Refused,
    net::Net,
    path::ActorPath,
    serialization::{Bincode, RemoteMessage, Serializer, manifest_id, with_encode_limit},
    system::SystemInner,
    watch::WatchSink,
};

/// Flag: the envelope defines its recipient id with a path.
const ENV_DEFINE: u8 = 1;
/// Fixed envelope header: flags, id, manifest.
const ENV_HEADER: usize = 1 + 4 + 4;
/// Most recipient ids one link may define; a peer defining more is
/// misbehaving, and its further definitions are refused as dead letters.
const MAX_COMPRESSION_IDS: usize = 1 << 20;
/// Pending messages moved from the connect buffer to a new link per lock.
const FLUSH_CHUNK: usize = 1024;

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
    Serialization(SerializationError),
}

/// A remote actor as the sending side knows it, shared by every ref to it
/// so that its compressed id is assigned once per link.
pub(crate) struct Recipient {
    pub(crate) path: ActorPath,
    pub(crate) assoc: Arc<Association>,
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
}

enum LinkState {
    Idle,
    Connecting { pending: VecDeque<Pending> },
    Up(Link),
}

type IdentifyReply = Result<Option<(u32, String)>, String>;

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

/// Appends the envelope for `payload` to `b`, defining the recipient's id
/// on this link if needed. Runs under the transport's queue lock, which
/// orders it with every other envelope on the link.
fn write_envelope(b: &mut BytesMut, r: &Recipient, link: &Link, manifest: u32, payload: &[u8]) {
    let key = r.compressed.load(Ordering::Relaxed);
    if key >> 32 == u64::from(link.generation) && key as u32 != 0 {
        b.put_u8(0);
        b.put_u32_le(key as u32);
    } else {
        let id = link.next_id.fetch_add(1, Ordering::Relaxed);
        r.compressed.store(
            (u64::from(link.generation) << 32) | u64::from(id),
            Ordering::Relaxed,
        );
        let path = r.path.elements().as_bytes();
        b.put_u8(ENV_DEFINE);
        b.put_u32_le(id);
        b.put_u16_le(path.len() as u16);
        b.put_slice(path);
    }
    b.put_u32_le(manifest);
    b.put_slice(payload);
}

impl Association {
    fn new(
        node: Arc<str>,
        system: Weak<SystemInner>,
        pending_capacity: usize,
        max_frame: usize,
    ) -> Self {
        Self {
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

    fn check_size(&self, r: &Recipient, payload: usize) -> Result<(), TellError> {
        let size = Self::envelope_overhead(r) + payload;
        if size > self.max_frame {
            return Err(TellError::Serialization(SerializationError::TooLarge {
                size,
                limit: self.max_frame,
            }));
        }
        Ok(())
    }

    /// Serializes with `encode` into `out` (cleared first), refusing a
    /// message that cannot fit in a frame as soon as it crosses the limit
    /// (see [`with_encode_limit`]), so a huge message is never serialized
    /// whole.
    fn encode_bounded(
        &self,
        r: &Recipient,
        out: &mut BytesMut,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<(), TellError> {
        out.clear();
        let overhead = Self::envelope_overhead(r);
        let room = self.max_frame.saturating_sub(overhead);
        match with_encode_limit(room, || encode(out)) {
            Ok(()) => self.check_size(r, out.len()),
            Err(SerializationError::TooLarge { size, .. }) => {
                Err(TellError::Serialization(SerializationError::TooLarge {
                    size: size + overhead,
                    limit: self.max_frame,
                }))
            }
            Err(e) => Err(TellError::Serialization(e)),
        }
    }

    /// Remote `tell`: never waits.
    pub(crate) fn tell(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<(), TellError> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            self.encode_bounded(r, &mut scratch, encode)?;
            let mut st = lock(&self.state);
            if let LinkState::Up(link) = &*st {
                let res = link.sender.try_send_with(FrameKind::Message, |b| {
                    write_envelope(b, r, link, manifest, &scratch)
                });
                match res {
                    Ok(()) => return Ok(()),
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
            match &mut *st {
                LinkState::Up(_) => unreachable!("handled above"),
                LinkState::Connecting { pending } => {
                    if pending.len() >= self.pending_capacity {
                        return Err(TellError::Full);
                    }
                    pending.push_back(Pending::User(
                        r.clone(),
                        manifest,
                        Bytes::copy_from_slice(&scratch),
                    ));
                    Ok(())
                }
                LinkState::Idle => {
                    *st = LinkState::Connecting {
                        pending: VecDeque::from([Pending::User(
                            r.clone(),
                            manifest,
                            Bytes::copy_from_slice(&scratch),
                        )]),
                    };
                    drop(st);
                    self.spawn_connect();
                    Ok(())
                }
            }
        })
    }

    /// Remote `send`: waits while the link's queue is full. The first try
    /// is `tell`'s allocation-free path; only a full link costs a copy.
    pub(crate) async fn send(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: impl Fn(&mut BytesMut) -> Result<(), SerializationError>,
    ) -> Result<(), TellError> {
        let mut payload = BytesMut::new();
        self.encode_bounded(r, &mut payload, encode)?;
        let payload = payload.freeze();
        loop {
            let link = match &*lock(&self.state) {
                LinkState::Up(link) => Some(link.clone()),
                _ => None,
            };
            match link {
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
        self.send_system(&SysWire::Terminated {
            watch_id,
            reason: t.reason.clone(),
        });
    }

    pub(crate) fn send_stop(self: &Arc<Self>, path: &ActorPath) {
        self.send_system(&SysWire::Stop {
            path: path.elements().to_owned(),
        });
    }

    pub(crate) fn watch(self: &Arc<Self>, path: &ActorPath, sink: WatchSink) {
        let watch_id = self.next_req.fetch_add(1, Ordering::Relaxed);
        lock(&self.watches).insert(watch_id, (path.clone(), sink));
        self.send_system(&SysWire::Watch {
            path: path.elements().to_owned(),
            watch_id,
        });
    }

    async fn identify(
        self: &Arc<Self>,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.identifies).insert(id, tx);
        self.send_system(&SysWire::Identify {
            id,
            path: path.elements().to_owned(),
        });
        let res = tokio::time::timeout(timeout, rx).await;
        lock(&self.identifies).remove(&id);
        match res {
            Ok(Ok(Ok(m))) => Ok(m),
            Ok(Ok(Err(reason))) => Err(ResolveError::Unreachable {
                addr: self.node.to_string(),
                reason,
            }),
            Ok(Err(_)) => Err(ResolveError::Unreachable {
                addr: self.node.to_string(),
                reason: "link closed".into(),
            }),
            Err(_) => Err(ResolveError::Timeout {
                addr: self.node.to_string(),
                timeout,
            }),
        }
    }

    fn spawn_connect(self: &Arc<Self>) {
        let assoc = self.clone();
        tokio::spawn(async move {
            if let Err(reason) = assoc.connect().await {
                tracing::warn!(node = %assoc.node, %reason, "connect failed");
                assoc.link_failed(&reason);
            }
        });
    }

    async fn connect(self: &Arc<Self>) -> Result<(), String> {
        let sys = self.system.upgrade().ok_or("system shut down")?;
        let remoting = sys.remoting.get().ok_or("no remoting")?;
        let hostport = self
            .node
            .split_once('@')
            .map(|(_, hp)| hp)
            .ok_or("node has no host:port")?;
        let addr: SocketAddr = tokio::net::lookup_host(hostport)
            .await
            .map_err(|e| format!("cannot resolve {hostport}: {e}"))?
            .next()
            .ok_or_else(|| format!("{hostport} resolves to no address"))?;
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
        let conn = est.start(Inbound::new(sys.clone(), self.clone(), generation));
        self.install(conn, generation).await;
        Ok(())
    }

    /// Makes `conn` this node's sending link (unless one is up already, in
    /// which case it only carries inbound traffic), flushing what was
    /// buffered while connecting, in order.
    async fn install(self: &Arc<Self>, conn: Connection, generation: u32) {
        let link = Link {
            sender: conn.sender(),
            generation,
            next_id: Arc::new(AtomicU32::new(1)),
        };
        lock(&self.conns).insert(generation, conn);
        loop {
            let chunk: Vec<Pending> = {
                let mut st = lock(&self.state);
                match &mut *st {
                    LinkState::Up(_) => return,
                    LinkState::Idle => {
                        *st = LinkState::Up(link);
                        drop(st);
                        self.up.notify_waiters();
                        return;
                    }
                    LinkState::Connecting { pending } => {
                        if pending.is_empty() {
                            *st = LinkState::Up(link);
                            drop(st);
                            self.up.notify_waiters();
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
        tokio::spawn(async move { assoc.install(conn, generation).await });
    }

    /// Connecting failed: buffered messages become dead letters, waiting
    /// resolves fail, watchers hear that the node is unreachable.
    fn link_failed(self: &Arc<Self>, reason: &str) {
        let pending = match std::mem::replace(&mut *lock(&self.state), LinkState::Idle) {
            LinkState::Connecting { pending } => pending,
            LinkState::Up(link) => {
                // Raced with an inbound link coming up: keep it.
                *lock(&self.state) = LinkState::Up(link);
                return;
            }
            LinkState::Idle => VecDeque::new(),
        };
        let users = pending
            .iter()
            .filter(|p| matches!(p, Pending::User(..)))
            .count() as u64;
        if let Some(sys) = self.system.upgrade() {
            sys.dead_letters_n(users, "(remote message)", &self.node, reason);
        }
        self.up.notify_waiters();
        self.fail_waiters(reason);
    }

    fn fail_waiters(self: &Arc<Self>, reason: &str) {
        for (_, tx) in lock(&self.identifies).drain() {
            let _ = tx.send(Err(reason.to_owned()));
        }
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
        // Dropped outside the state lock: dropping aborts a live connection.
        let conn = lock(&self.conns).remove(&generation);
        drop(conn);
        if was_up {
            tracing::info!(node = %self.node, %reason, "link to node closed");
            self.fail_waiters(&reason.to_string());
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
    sender: Option<Sender>,
    table: Vec<Option<Entry>>,
    runs: Vec<Run>,
}

#[derive(Clone)]
struct Entry {
    path: Arc<str>,
    target: Option<Arc<dyn RemoteTarget>>,
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
    fn new(sys: Arc<SystemInner>, assoc: Arc<Association>, generation: u32) -> Self {
        Self {
            sys,
            assoc,
            generation,
            sender: None,
            table: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn dead(&self, what: &str, to: &dyn std::fmt::Display, why: &str) {
        self.sys.dead_letter(what, to, why);
    }

    fn on_envelope(&mut self, body: &[u8]) {
        let mut b = body;
        if b.len() < 5 {
            return self.dead(
                "(malformed envelope)",
                &self.assoc.node.clone(),
                "envelope shorter than its header",
            );
        }
        let flags = b.get_u8();
        let id = b.get_u32_le();
        if flags & ENV_DEFINE != 0 {
            if b.len() < 2 {
                return self.dead(
                    "(malformed envelope)",
                    &self.assoc.node.clone(),
                    "truncated recipient path",
                );
            }
            let len = usize::from(b.get_u16_le());
            if b.len() < len {
                return self.dead(
                    "(malformed envelope)",
                    &self.assoc.node.clone(),
                    "truncated recipient path",
                );
            }
            let Ok(path) = std::str::from_utf8(&b[..len]) else {
                return self.dead(
                    "(malformed envelope)",
                    &self.assoc.node.clone(),
                    "recipient path is not utf-8",
                );
            };
            let idx = id as usize;
            if idx >= MAX_COMPRESSION_IDS {
                return self.dead(
                    "(malformed envelope)",
                    &self.assoc.node.clone(),
                    "recipient id beyond the compression table limit",
                );
            }
            if idx >= self.table.len() {
                self.table.resize(idx + 1, None);
            }
            self.table[idx] = Some(Entry {
                path: path.into(),
                target: self.sys.lookup(path),
            });
            b.advance(len);
        }
        if b.len() < 4 {
            return self.dead(
                "(malformed envelope)",
                &self.assoc.node.clone(),
                "envelope has no manifest",
            );
        }
        let manifest = b.get_u32_le();
        // The actor at a path changes when one stops and another is spawned
        // there (or when one is spawned after the path was defined): when
        // the cached target cannot take this message, look again.
        if let Some(Some(entry)) = self.table.get_mut(id as usize)
            && entry
                .target
                .as_ref()
                .is_none_or(|t| t.manifest() != manifest)
        {
            entry.target = self.sys.lookup(&entry.path);
        }
        let Some(Some(entry)) = self.table.get(id as usize) else {
            return self.dead(
                "(remote message)",
                &self.assoc.node.clone(),
                &format!("unknown recipient id {id}"),
            );
        };
        let Some(target) = &entry.target else {
            let to = self.sys.path(&entry.path);
            return self.dead(&format!("manifest {manifest:#010x}"), &to, "no such actor");
        };
        if target.manifest() != manifest {
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
        let run = match self.runs.iter().position(|r| r.id == id) {
            Some(i) => &mut self.runs[i],
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
        if run.buf.capacity() - run.buf.len() < need {
            run.buf.reserve(need.max(RUN_BUFFER));
        }
        run.buf.put_u32_le(b.len() as u32);
        run.buf.put_slice(b);
        run.n += 1;
    }

    fn on_system(&mut self, body: &[u8]) {
        let msg: SysWire = match Bincode.deserialize(body) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(node = %self.assoc.node, error = %e, "undecodable system message dropped");
                return;
            }
        };
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

    fn on_frame_ref(&mut self, kind: FrameKind, body: &[u8]) {
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
                            e.target = self.sys.lookup(&e.path);
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

    fn on_close(&mut self, reason: &CloseReason) {
        self.assoc.link_closed(self.generation, reason);
    }
}

/// Everything remote of one system.
pub(crate) struct Remoting {
    endpoint: Box<dyn Net>,
    associations: Mutex<HashMap<Arc<str>, Arc<Association>>>,
    refs: Mutex<HashMap<String, Weak<Recipient>>>,
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
            },
            node,
        ))
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.endpoint.local_addr()
    }

    fn association(&self, sys: &Arc<SystemInner>, node: &str) -> Arc<Association> {
        lock(&self.associations)
            .entry(node.into())
            .or_insert_with(|| {
                Arc::new(Association::new(
                    node.into(),
                    Arc::downgrade(sys),
                    sys.config.pending_capacity,
                    sys.config.transport.max_frame_size(),
                ))
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
                        let conn = est.start(Inbound::new(s.clone(), assoc.clone(), generation));
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
        let key = path.to_string();
        let mut refs = lock(&self.refs);
        let recipient = match refs.get(&key).and_then(Weak::upgrade) {
            Some(r) => r,
            None => {
                let assoc = self.association(sys, path.node());
                let r = Arc::new(Recipient {
                    path,
                    assoc,
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
        let assocs: Vec<_> = lock(&self.associations).values().cloned().collect();
        let mut closing = tokio::task::JoinSet::new();
        for a in assocs {
            let conns: Vec<Connection> = lock(&a.conns).drain().map(|(_, c)| c).collect();
            *lock(&a.state) = LinkState::Idle;
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
