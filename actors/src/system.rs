//! The actor system: spawning, the registry of reachable actors, dead
//! letters, and shutdown.

use std::{
    collections::{HashMap, VecDeque},
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, OnceLock, PoisonError, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio_util::task::TaskTracker;
use transport::{Backoff, ConnStats, HeartbeatConfig, TransportConfig};

use crate::{
    actor::{Actor, Ctx, StopReason},
    actor_ref::{ActorRef, Cell},
    error::{ResolveError, SpawnError, SystemError},
    failure::RemoteEvent,
    mailbox::{Envelope, Mailbox, SystemMsg, next_record},
    path::{ActorPath, valid_name},
    remote::{RemoteTarget, Remoting},
    serialization::{DECODE, RemoteMessage, decode_batch, manifest_id},
    watch::{WatchSink, Watchers},
};

/// Default mailbox capacity: 65,536 messages, a dozen 5,000-message bursts.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 64 * 1024;
/// Default time `resolve` waits for a remote node's answer.
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default messages buffered per remote node while its link is being
/// established; beyond this `tell` reports `MailboxFull`.
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
/// Remote events buffered per subscriber; a slower subscriber loses the
/// oldest (and is told how many, by `broadcast`'s `Lagged`).
const REMOTE_EVENT_BUFFER: usize = 1024;
/// Dead letters logged individually before the log is sampled (every
/// 10,000th). All of them are counted.
const DEAD_LETTER_LOG_LIMIT: u64 = 100;

/// Settings of an [`ActorSystem`].
#[derive(Debug, Clone)]
pub struct SystemConfig {
    pub(crate) mailbox_capacity: usize,
    pub(crate) resolve_timeout: Duration,
    pub(crate) pending_capacity: usize,
    pub(crate) max_malformed_per_second: usize,
    pub(crate) transport: TransportConfig,
    pub(crate) tls: Option<transport::TlsConfig>,
    pub(crate) heartbeat: HeartbeatConfig,
    pub(crate) backoff: Backoff,
    pub(crate) system_buffer: usize,
    pub(crate) max_message_size: usize,
    /// Addresses to dial instead of the one in a node's name.
    pub(crate) routes: HashMap<String, SocketAddr>,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            mailbox_capacity: DEFAULT_MAILBOX_CAPACITY,
            resolve_timeout: DEFAULT_RESOLVE_TIMEOUT,
            pending_capacity: DEFAULT_PENDING_CAPACITY,
            max_malformed_per_second: DEFAULT_MAX_MALFORMED_PER_SECOND,
            transport: TransportConfig::default(),
            tls: None,
            heartbeat: HeartbeatConfig::default(),
            backoff: Backoff::default(),
            system_buffer: DEFAULT_SYSTEM_MESSAGE_BUFFER,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            routes: HashMap::new(),
        }
    }
}

impl SystemConfig {
    /// User messages a mailbox holds before `tell` reports `MailboxFull`,
    /// `send` waits and remote reading pauses. Default 65,536.
    pub fn set_mailbox_capacity(&mut self, n: usize) -> &mut Self {
        self.mailbox_capacity = n.max(1);
        self
    }

    /// How long `resolve` waits for a remote node. Default 5 s.
    pub fn set_resolve_timeout(&mut self, t: Duration) -> &mut Self {
        self.resolve_timeout = t;
        self
    }

    /// Messages buffered per node while connecting. Default 16,384.
    pub fn set_pending_capacity(&mut self, n: usize) -> &mut Self {
        self.pending_capacity = n;
        self
    }

    /// Secures every link with TLS 1.3 (mutual authentication by default;
    /// see [`transport::TlsConfig`]). Default: plain TCP. Each node's
    /// certificate must name the host it advertises.
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
    /// [`StopReason::NodeUnreachable`]). Default: Akka's, a heartbeat per
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
    pub fn set_system_message_buffer(&mut self, n: usize) -> &mut Self {
        self.system_buffer = n.max(1);
        self
    }

    /// The largest remote message, envelope included, this node sends or
    /// accepts. Default 64 MiB ([`DEFAULT_MAX_MESSAGE_SIZE`]); at most
    /// `u32::MAX`. A larger message is refused to the sender with
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
    pub fn set_max_message_size(&mut self, n: usize) -> &mut Self {
        self.max_message_size = n.min(u32::MAX as usize);
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

    /// The transport's settings (frame size, queue capacity, timeouts).
    pub fn transport_mut(&mut self) -> &mut TransportConfig {
        &mut self.transport
    }
}

/// Something the shutdown can stop.
trait Stoppable: Send + Sync {
    fn stop(&self);
}

impl<M: Send + 'static> Stoppable for Cell<M> {
    fn stop(&self) {
        self.mailbox.push_system(SystemMsg::Stop);
    }
}

pub(crate) struct SystemInner {
    name: String,
    pub(crate) node: Arc<str>,
    pub(crate) events: tokio::sync::broadcast::Sender<RemoteEvent>,
    pub(crate) config: SystemConfig,
    registry: Mutex<HashMap<Arc<str>, Arc<dyn RemoteTarget>>>,
    live: Mutex<HashMap<u64, Arc<dyn Stoppable>>>,
    next_id: AtomicU64,
    dead_letters: AtomicU64,
    tasks: TaskTracker,
    shutting_down: AtomicBool,
    pub(crate) remoting: OnceLock<Remoting>,
    myself: Weak<SystemInner>,
}

/// The system decoding on this thread, for `ActorRef` deserialization.
pub(crate) fn current_system() -> Option<Arc<SystemInner>> {
    DECODE.with(|c| c.system.borrow().upgrade())
}

impl SystemInner {
    pub(crate) fn path(&self, elements: &str) -> ActorPath {
        ActorPath::new(self.node.clone(), self.remoting.get().is_some(), elements)
    }

    pub(crate) fn temp_path(&self) -> ActorPath {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.path(&format!("/temp/${id}"))
    }

    pub(crate) fn register_target(&self, elements: &str, target: Arc<dyn RemoteTarget>) {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(elements.into(), target);
    }

    pub(crate) fn unregister_target(&self, elements: &str) {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(elements);
    }

    pub(crate) fn lookup(&self, elements: &str) -> Option<Arc<dyn RemoteTarget>> {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(elements)
            .cloned()
    }

    /// Counts a dead letter and logs it (sampled past the first hundred).
    pub(crate) fn dead_letter(&self, msg_type: &str, recipient: &dyn fmt::Display, why: &str) {
        let n = self.dead_letters.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= DEAD_LETTER_LOG_LIMIT || n.is_multiple_of(10_000) {
            tracing::warn!(
                system = %self.name,
                msg_type,
                %recipient,
                reason = why,
                total = n,
                "dead letter"
            );
        }
    }

    /// Adds `n` dead letters of one kind with one log line.
    pub(crate) fn dead_letters_n(
        &self,
        n: u64,
        msg_type: &str,
        recipient: &dyn fmt::Display,
        why: &str,
    ) {
        if n == 0 {
            return;
        }
        let total = self.dead_letters.fetch_add(n, Ordering::Relaxed) + n;
        tracing::warn!(system = %self.name, msg_type, %recipient, reason = why, count = n, total, "dead letters");
    }

    /// A typed ref for a path that arrived inside a message.
    pub(crate) fn ref_for_path<M: RemoteMessage>(
        self: &Arc<Self>,
        path: ActorPath,
    ) -> Result<ActorRef<M>, ResolveError> {
        if path.node() == &*self.node {
            return Ok(self
                .lookup(path.elements())
                .and_then(|t| ActorRef::from_any(t.as_any()))
                .unwrap_or_else(|| ActorRef::dead(path, self.myself.clone())));
        }
        let remoting = self.remoting.get().ok_or(ResolveError::NoRemoting)?;
        Ok(remoting.remote_ref::<M>(self, path))
    }
}

/// An actor system: a named set of actors, optionally reachable from other
/// nodes over TCP. Cheap to clone.
///
/// Method groups:
/// - creating: [`local`](Self::local), [`remote`](Self::remote),
///   [`with_config`](Self::with_config);
/// - actors: [`spawn`](Self::spawn), [`spawn_named`](Self::spawn_named),
///   [`resolve`](Self::resolve);
/// - observing: [`name`](Self::name), [`local_addr`](Self::local_addr),
///   [`dead_letters`](Self::dead_letters), [`remote_stats`](Self::remote_stats);
/// - ending: [`shutdown`](Self::shutdown).
#[derive(Clone)]
pub struct ActorSystem {
    pub(crate) inner: Arc<SystemInner>,
}

impl fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorSystem")
            .field("node", &self.inner.node)
            .finish()
    }
}

impl ActorSystem {
    fn build(name: &str, node: String, config: SystemConfig) -> Result<Self, SystemError> {
        if !valid_name(name) {
            return Err(SystemError::InvalidName(name.to_owned()));
        }
        let inner = Arc::new_cyclic(|me| SystemInner {
            name: name.to_owned(),
            node: node.into(),
            events: tokio::sync::broadcast::channel(REMOTE_EVENT_BUFFER).0,
            config,
            registry: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            dead_letters: AtomicU64::new(0),
            tasks: TaskTracker::new(),
            shutting_down: AtomicBool::new(false),
            remoting: OnceLock::new(),
            myself: me.clone(),
        });
        Ok(Self { inner })
    }

    /// A system without remoting: its actors are reachable in this process
    /// only (paths `local://name/...`).
    ///
    /// # Errors
    /// An invalid name.
    pub fn local(name: &str) -> Result<Self, SystemError> {
        Self::build(name, name.to_owned(), SystemConfig::default())
    }

    /// A system reachable from other nodes, listening on `bind` (port 0
    /// picks a free one; see [`local_addr`](Self::local_addr)). Its paths
    /// are `tcp://name@host:port/...`.
    ///
    /// # Errors
    /// An invalid name or a bind failure.
    pub async fn remote(name: &str, bind: SocketAddr) -> Result<Self, SystemError> {
        Self::with_config(name, Some(bind), SystemConfig::default()).await
    }

    /// A system with explicit settings; `bind` `None` means no remoting.
    ///
    /// # Errors
    /// An invalid name or config, or a bind failure.
    pub async fn with_config(
        name: &str,
        bind: Option<SocketAddr>,
        config: SystemConfig,
    ) -> Result<Self, SystemError> {
        let Some(bind) = bind else {
            return Self::build(name, name.to_owned(), config);
        };
        if !valid_name(name) {
            return Err(SystemError::InvalidName(name.to_owned()));
        }
        let (remoting, node) =
            Remoting::bind(name, bind, config.transport.clone(), config.tls.clone()).await?;
        let sys = Self::build(name, node, config)?;
        let _ = sys.inner.remoting.set(remoting);
        let remoting = sys.inner.remoting.get().expect("set just above");
        remoting.start_accepting(&sys.inner);
        Ok(sys)
    }

    /// The system's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The node part of this system's paths (`name@host:port` with
    /// remoting, `name` without).
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// The bound socket address, with remoting.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.remoting.get().map(Remoting::local_addr)
    }

    /// Dead letters so far: messages to stopped or unknown actors, messages
    /// left in mailboxes at stop, undecodable or mistyped remote messages,
    /// and messages lost with a broken link.
    pub fn dead_letters(&self) -> u64 {
        self.inner.dead_letters.load(Ordering::Relaxed)
    }

    /// A stream of what happens to remote nodes: links up and down, nodes
    /// judged unreachable (or reachable again), incarnations quarantined.
    /// Each subscriber sees the events after it subscribed.
    pub fn subscribe_remote_events(&self) -> tokio::sync::broadcast::Receiver<RemoteEvent> {
        self.inner.events.subscribe()
    }

    /// Transport counters summed over this system's connections.
    pub fn remote_stats(&self) -> ConnStats {
        self.inner
            .remoting
            .get()
            .map(Remoting::stats)
            .unwrap_or_default()
    }

    /// Spawns an anonymous actor (`/user/$N`). It becomes reachable from
    /// other nodes once a ref to it is sent to one.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn spawn<A: Actor>(&self, actor: A) -> ActorRef<A::Msg> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        ActorRef::local(self.spawn_at(id, &format!("/user/${id}"), actor))
    }

    /// Spawns an actor at `/user/{name}`, reachable from other nodes by
    /// that path (see [`resolve`](Self::resolve)).
    ///
    /// # Errors
    /// An invalid or taken name, or a system shutting down.
    pub fn spawn_named<A>(&self, name: &str, actor: A) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
    {
        if !valid_name(name) {
            return Err(SpawnError::InvalidName(name.to_owned()));
        }
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(SpawnError::ShuttingDown);
        }
        let elements = format!("/user/{name}");
        let mut reg = self
            .inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if reg.contains_key(elements.as_str()) {
            return Err(SpawnError::NameTaken(name.to_owned()));
        }
        // Reserve the name under the lock, then spawn.
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let cell = self.make_cell::<A::Msg>(&elements);
        cell.registered.store(true, Ordering::Release);
        let _ = cell.decode.set(<A::Msg as RemoteMessage>::decode);
        let target: Arc<dyn RemoteTarget> = cell.clone();
        reg.insert(elements.as_str().into(), target);
        drop(reg);
        self.start(id, cell.clone(), actor);
        Ok(ActorRef::local(cell))
    }

    fn make_cell<M: Send + 'static>(&self, elements: &str) -> Arc<Cell<M>> {
        Arc::new(Cell {
            mailbox: Mailbox::new(self.inner.config.mailbox_capacity),
            path: self.inner.path(elements),
            watchers: Watchers::default(),
            system: Arc::downgrade(&self.inner),
            decode: OnceLock::new(),
            registered: AtomicBool::new(false),
        })
    }

    fn spawn_at<A: Actor>(&self, id: u64, elements: &str, actor: A) -> Arc<Cell<A::Msg>> {
        let cell = self.make_cell::<A::Msg>(elements);
        self.start(id, cell.clone(), actor);
        cell
    }

    fn start<A: Actor>(&self, id: u64, cell: Arc<Cell<A::Msg>>, actor: A) {
        let stoppable: Arc<dyn Stoppable> = cell.clone();
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, stoppable);
        if self.inner.shutting_down.load(Ordering::Acquire) {
            cell.mailbox.push_system(SystemMsg::Stop);
        }
        let sys = self.clone();
        let run_cell = cell.clone();
        let handle = tokio::spawn(run_actor(actor, run_cell, sys));
        let sys = self.inner.clone();
        self.inner.tasks.spawn(async move {
            let reason = match handle.await {
                Ok(reason) => reason,
                Err(e) if e.is_panic() => {
                    let p = e.into_panic();
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".to_owned());
                    tracing::error!(actor = %cell.path, panic = %msg, "actor panicked; stopped");
                    StopReason::Panicked(msg)
                }
                Err(_) => StopReason::SystemShutdown,
            };
            let left = cell.mailbox.close() as u64;
            sys.dead_letters_n(
                left,
                std::any::type_name::<A::Msg>(),
                &cell.path,
                "left in mailbox at stop",
            );
            if cell.registered.load(Ordering::Acquire) {
                sys.unregister_target(cell.path.elements());
            }
            sys.live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            cell.watchers.terminate(&cell.path, reason);
        });
    }

    /// Resolves a path to a typed ref, like Akka's `Identify`: a local path
    /// is looked up here, a remote one is asked of its node (connecting if
    /// needed) within the configured resolve timeout.
    ///
    /// # Errors
    /// [`ResolveError::NotFound`], [`ResolveError::WrongType`],
    /// [`ResolveError::Unreachable`], [`ResolveError::Timeout`],
    /// [`ResolveError::InvalidPath`], [`ResolveError::NoRemoting`].
    pub async fn resolve<M: RemoteMessage>(&self, path: &str) -> Result<ActorRef<M>, ResolveError> {
        let path = ActorPath::parse(path)?;
        if path.node() == self.node() {
            let target = self
                .inner
                .lookup(path.elements())
                .ok_or_else(|| ResolveError::NotFound(path.to_string()))?;
            let actual = target.manifest_name();
            return ActorRef::from_any(target.as_any()).ok_or_else(|| ResolveError::WrongType {
                path: path.to_string(),
                expected: M::MANIFEST.to_owned(),
                actual: actual.to_owned(),
            });
        }
        let remoting = self.inner.remoting.get().ok_or(ResolveError::NoRemoting)?;
        let manifest = remoting
            .identify(&self.inner, &path, self.inner.config.resolve_timeout)
            .await?;
        match manifest {
            None => Err(ResolveError::NotFound(path.to_string())),
            Some((id, _)) if id == manifest_id(M::MANIFEST) => {
                Ok(remoting.remote_ref::<M>(&self.inner, path))
            }
            Some((_, name)) => Err(ResolveError::WrongType {
                path: path.to_string(),
                expected: M::MANIFEST.to_owned(),
                actual: name,
            }),
        }
    }

    /// Stops every actor (messages left in mailboxes become dead letters,
    /// counted), waits for them to finish, then closes remote links
    /// gracefully (queued frames are flushed, peers are told) and stops
    /// listening. Bounded by the transport's close timeout.
    pub async fn shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        let live: Vec<_> = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for a in live {
            a.stop();
        }
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        if let Some(r) = self.inner.remoting.get() {
            r.shutdown().await;
        }
    }
}

/// An actor's task: hooks, then batches of messages until stopped.
async fn run_actor<A: Actor>(
    mut actor: A,
    cell: Arc<Cell<A::Msg>>,
    system: ActorSystem,
) -> StopReason {
    let sys_inner = system.inner.clone();
    let mut ctx = Ctx {
        myself: ActorRef::local(cell.clone()),
        system,
        stop: false,
        sink: WatchSink::Actor(cell.clone()),
    };
    actor.started(&mut ctx).await;
    let mut user: VecDeque<Envelope<A::Msg>> = VecDeque::new();
    let mut sys: VecDeque<SystemMsg> = VecDeque::new();
    // The remote batch being worked through, and the read position in it.
    // The messages of the remote batch being worked through, decoded
    // together (one decode context per batch, no await in between).
    let mut decoded: VecDeque<A::Msg> = VecDeque::new();
    let reason = 'run: loop {
        if ctx.stop {
            break StopReason::Stopped;
        }
        if !cell.mailbox.recv_all(&mut user, &mut sys).await {
            break StopReason::Stopped;
        }
        loop {
            while let Some(s) = sys.pop_front() {
                match s {
                    SystemMsg::Stop => break 'run StopReason::Stopped,
                    SystemMsg::Terminated(t) => actor.terminated(t, &mut ctx).await,
                }
                if ctx.stop {
                    break 'run StopReason::Stopped;
                }
            }
            let msg = if let Some(m) = decoded.pop_front() {
                m
            } else {
                match user.pop_front() {
                    None => break,
                    Some(Envelope::Local(m)) => m,
                    Some(Envelope::Batch(bytes, _)) => {
                        let decode = cell.decode.get().expect(
                            "remote messages reach only registered actors, which have a decoder",
                        );
                        decode_batch(&sys_inner, &bytes, || {
                            let mut pos = 0;
                            while let Some(range) = next_record(&bytes, &mut pos) {
                                match decode(&bytes[range]) {
                                    Ok(m) => decoded.push_back(m),
                                    Err(e) => sys_inner.dead_letter(
                                        std::any::type_name::<A::Msg>(),
                                        &cell.path,
                                        &format!("remote message does not decode: {e}"),
                                    ),
                                }
                            }
                        });
                        continue;
                    }
                }
            };
            actor.handle(msg, &mut ctx).await;
            if ctx.stop {
                break 'run StopReason::Stopped;
            }
            if cell.mailbox.system_pending() {
                cell.mailbox.take_system(&mut sys);
            }
        }
    };
    let mut left = decoded.len() as u64;
    decoded.clear();
    for env in user.drain(..) {
        left += match env {
            Envelope::Local(_) => 1,
            Envelope::Batch(_, n) => n as u64,
        };
    }
    sys_inner.dead_letters_n(
        left,
        std::any::type_name::<A::Msg>(),
        &cell.path,
        "left in mailbox at stop",
    );
    let reason = if sys_inner.shutting_down.load(Ordering::Acquire) {
        StopReason::SystemShutdown
    } else {
        reason
    };
    actor.stopped(&reason).await;
    reason
}
