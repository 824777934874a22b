//! Cluster singletons: one actor in the whole cluster, on its oldest
//! hosting member, and refs that reach it wherever it runs (Akka's
//! cluster singleton).
//!
//! ```no_run
//! # use std::time::Duration;
//! # use actors::{Actor, ActorResult, ActorSystem, Ctx, cluster::{Cluster, ClusterConfig}};
//! # use actors::singleton::{Singleton, SingletonSettings};
//! # struct Scheduler;
//! # impl Actor for Scheduler {
//! #     type Msg = String;
//! #     async fn handle(&mut self, _: String, _: &mut Ctx<Self>) -> ActorResult { Ok(()) }
//! # }
//! # async fn f(system: ActorSystem, cluster: Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! // On every node that may host it (the same settings everywhere):
//! let scheduler = Singleton::start(&system, &cluster, "scheduler", || Scheduler,
//!     SingletonSettings::new())?;
//! // On nodes that only talk to it:
//! // let scheduler = Singleton::proxy::<String>(&system, &cluster, "scheduler");
//! scheduler.tell("tick".to_owned())?;
//! println!("it runs on {:?}", scheduler.location());
//! # Ok(()) }
//! ```
//!
//! # Model
//! - Every hosting node runs a manager ([`Singleton::start`]). The
//!   singleton runs on the oldest hosting member that is `Up` or
//!   `Suspect` (the lowest [`Member::started_ms`], then the node
//!   address: the same age as [`DowningStrategy::KeepOldest`]). A member
//!   that joins is younger than all, so a join never moves it; it moves
//!   when its host leaves or is downed, to the next oldest.
//! - Handover: the old instance stops (after its queued messages, its
//!   `stopped` hook included) before the next one starts. The new host
//!   waits for the old one's `HandOverDone`; or, for a host that went
//!   down, until it has been down (or removed) for
//!   [`SingletonSettings::down_removal_margin`] (by default the
//!   cluster's `stable_after`), the time the losing side of a partition
//!   takes to down itself and stop its instance; or, for a host that
//!   left but does not answer (its manager is gone),
//!   [`SingletonSettings::handover_timeout`].
//! - A [`SingletonRef`] finds the instance through the cluster group
//!   `singleton:<name>`, which the running instance joins. While none is
//!   listed (the singleton moves, or is not known yet) it buffers, up to
//!   [`SingletonSettings::buffer_bytes`], and delivers the buffer in order
//!   once one is.
//! - With a [`Lease`] ([`SingletonSettings::lease`]), a node starts the
//!   instance only once it holds the lease, and releases it once the
//!   instance has stopped, before the next host is told: one instance at
//!   a time even where the downing strategy's assumptions fail, as long
//!   as the lease's store is consistent. [`MemoryLease`] serves tests.
//! - At most one instance runs at a time as long as the downing strategy
//!   holds (one side of a partition survives) and the members' views
//!   agree on who is older; `docs/FAILURE_SEMANTICS.md` lists the
//!   limits and what is lost.
//!
//! # Observability
//! [`SingletonRef::location`]; logs at info when the instance starts and
//! stops on a node (target `actors::singleton`); metrics
//! `actors_singleton_running`, `actors_singleton_starts_total` and
//! `actors_singleton_buffered_bytes`; messages dropped past the buffer
//! are dead letters with reason `buffer_full`.
//!
//! [`Member::started_ms`]: crate::cluster::Member::started_ms
//! [`DowningStrategy::KeepOldest`]: crate::cluster::DowningStrategy::KeepOldest

mod lease;
mod placement;

use std::{
    collections::{BTreeSet, VecDeque},
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    actor::{Actor, ActorResult, Ctx},
    actor_ref::ActorRef,
    cluster::{Cluster, Member, MemberState},
    error::{AskError, SendError, SpawnError},
    path::{ActorPath, MAX_NAME_LEN, valid_name},
    registry::Registry,
    serialization::RemoteMessage,
    system::ActorSystem,
    telemetry::SingletonMeters,
    watch::Watch,
};
pub use lease::{Lease, LeaseError, LeaseFuture, MemoryLease};
use placement::{Action, Host, Phase, Placement, Timing};

/// [`SingletonSettings::handover_timeout`]'s default.
pub const DEFAULT_HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// [`SingletonSettings::buffer_bytes`]'s default: 1 MiB, about ten
/// thousand small commands, enough to ride out a handover of a few
/// seconds without letting a stalled singleton eat a node's memory.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// How long a ref waits before retrying a buffer flush that found the
/// instance's mailbox (or its link) full: short, as the instance is
/// draining it.
const FLUSH_RETRY: Duration = Duration::from_millis(20);

/// The manager's actor name on every hosting node is the singleton's name
/// with this suffix.
const MANAGER_SUFFIX: &str = "-singleton";

/// Why a singleton could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SingletonError {
    /// The name is not an actor name with room for the manager's suffix:
    /// no `/`, `#`, `@`, `:` or whitespace, not starting with `$`, at most
    /// 118 bytes. Pick another name.
    #[error("singleton name {0:?} is not an actor name of at most 118 bytes")]
    InvalidName(String),
    /// This node already runs a manager for this singleton (or an actor
    /// holds its manager's name, `<name>-singleton`): start it once per
    /// node and clone the ref.
    #[error("singleton {0:?} is already started on this node: {1}")]
    AlreadyStarted(String, SpawnError),
}

/// Which members may host a singleton. The cluster has no roles, so
/// hosts are picked by node, on every node alike.
#[derive(Clone, Default)]
enum Hosts {
    #[default]
    All,
    Named(BTreeSet<String>),
    Where(Arc<dyn Fn(&Member) -> bool + Send + Sync>),
}

impl Hosts {
    fn admits(&self, m: &Member) -> bool {
        match self {
            Self::All => true,
            Self::Named(names) => {
                let system = m.node.split_once('@').map_or(m.node.as_str(), |(s, _)| s);
                names.contains(&m.node) || names.contains(system)
            }
            Self::Where(f) => f(m),
        }
    }
}

impl fmt::Debug for Hosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("All"),
            Self::Named(n) => f.debug_tuple("Named").field(n).finish(),
            Self::Where(_) => f.write_str("Where(..)"),
        }
    }
}

/// How a singleton is placed and handed over. Every hosting node must
/// use the same settings.
#[derive(Debug, Clone)]
pub struct SingletonSettings {
    hosts: Hosts,
    handover_timeout: Duration,
    down_removal_margin: Option<Duration>,
    buffer_bytes: usize,
    lease: Option<Arc<dyn Lease>>,
}

impl Default for SingletonSettings {
    fn default() -> Self {
        Self::new()
    }
}

impl SingletonSettings {
    /// Every member may host; [`DEFAULT_HANDOVER_TIMEOUT`]; the margin is
    /// the cluster's `stable_after`; [`DEFAULT_BUFFER_BYTES`].
    pub fn new() -> Self {
        Self {
            hosts: Hosts::All,
            handover_timeout: DEFAULT_HANDOVER_TIMEOUT,
            down_removal_margin: None,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            lease: None,
        }
    }

    /// Only these nodes may host: each name is a node address
    /// (`name@host:port`) or a system name. Every node the filter admits
    /// must call [`Singleton::start`]; one that does not would be chosen
    /// and never run it. Default: every member.
    pub fn hosts_named<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.hosts = Hosts::Named(names.into_iter().map(Into::into).collect());
        self
    }

    /// Only the members `admits` says yes to may host (it must give every
    /// node the same answer for a member). As
    /// [`hosts_named`](Self::hosts_named) otherwise.
    pub fn hosts_where(mut self, admits: impl Fn(&Member) -> bool + Send + Sync + 'static) -> Self {
        self.hosts = Hosts::Where(Arc::new(admits));
        self
    }

    /// How long the next host waits for a host that left gracefully
    /// (still reachable, or gone without a word) to confirm that its
    /// instance stopped, before it starts its own. A leaving host stops
    /// its instance and confirms at once, so this only matters when its
    /// manager is gone (its node shut down before it could answer); too
    /// short, and a slow `stopped` hook may still run when the new
    /// instance starts. Default [`DEFAULT_HANDOVER_TIMEOUT`] (10 s).
    pub fn handover_timeout(mut self, d: Duration) -> Self {
        self.handover_timeout = d;
        self
    }

    /// How long a host that was downed (or vanished: removed) must have
    /// been so before the next host starts: the time the losing side of
    /// a partition needs to down itself and stop its instance. Default:
    /// the cluster's `stable_after` (the downing strategy decides both
    /// sides within about that). Shorter risks two instances during a
    /// partition.
    pub fn down_removal_margin(mut self, d: Duration) -> Self {
        self.down_removal_margin = Some(d);
        self
    }

    /// Bytes of messages a [`SingletonRef`] holds while the singleton
    /// moves or is not known yet (each message counted at its encoded
    /// size plus its size in memory); past it, a message comes back as
    /// [`SendError::BufferFull`] and is counted as a dead letter. Default
    /// [`DEFAULT_BUFFER_BYTES`] (1 MiB).
    pub fn buffer_bytes(mut self, bytes: usize) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// Starts the instance on a node only once the node holds `lease`
    /// (as owner `name@host:port#uid`), asking again every retry interval
    /// (a quarter of the handover timeout, between 50 ms and 1 s) while
    /// another owner holds it; the node releases it once its instance has
    /// stopped, before it tells the next host. Every hosting node must
    /// pass the same lease. Default: none (the downing strategy alone
    /// keeps one instance).
    pub fn lease(mut self, lease: Arc<dyn Lease>) -> Self {
        self.lease = Some(lease);
        self
    }
}

/// Starts cluster singletons and refs to them. See the [module
/// docs](self).
#[derive(Debug)]
pub struct Singleton(());

impl Singleton {
    /// Starts this node's manager of singleton `name`: the singleton runs
    /// here (built by `factory`, at `/user/<name>`) whenever this node is
    /// the oldest hosting member, and nowhere else meanwhile. Call it on
    /// every node `settings` admits as a host, with the same settings;
    /// call it after [`Cluster::join`]. Returns a ref to the singleton,
    /// wherever it runs.
    ///
    /// # Errors
    /// [`SingletonError::InvalidName`], [`SingletonError::AlreadyStarted`].
    pub fn start<A, F>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        factory: F,
        settings: SingletonSettings,
    ) -> Result<SingletonRef<A::Msg>, SingletonError>
    where
        A: Actor,
        A::Msg: RemoteMessage,
        F: Fn() -> A + Send + Sync + 'static,
    {
        let manager_name = format!("{name}{MANAGER_SUFFIX}");
        if !valid_name(name) || !valid_name(&manager_name) || manager_name.len() > MAX_NAME_LEN {
            return Err(SingletonError::InvalidName(name.to_owned()));
        }
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        system
            .spawn_named(&manager_name, Inbox(inbox_tx))
            .map_err(|e| SingletonError::AlreadyStarted(name.to_owned(), e))?;
        let (drain_tx, drain_rx) = mpsc::unbounded_channel();
        let me = cluster.myself();
        let retry = (settings.handover_timeout / 4).clamp(Duration::from_millis(50), SECOND);
        let timing = Timing {
            handover_timeout: settings.handover_timeout,
            margin: settings
                .down_removal_margin
                .unwrap_or_else(|| cluster.stable_after()),
            retry,
            settle: cluster.settle(),
        };
        let owner = format!("{}#{}", me.node, me.uid);
        let fenced = Arc::new(AtomicBool::new(false));
        // Down: the instance stops where it stands, before anyone hears
        // of it, while the others wait out their margin.
        let registry = Arc::downgrade(system.registry());
        let (flag, path) = (fenced.clone(), format!("/user/{name}"));
        cluster.on_self_down(move || {
            flag.store(true, Ordering::Release);
            if let Some(registry) = registry.upgrade() {
                registry.stop_subtree(&path);
            }
        });
        let manager = Manager {
            fenced,
            lease: settings.lease.clone(),
            owner,
            retry,
            lease_held: false,
            name: name.to_owned(),
            manager_name,
            system: system.clone(),
            cluster: cluster.clone(),
            factory,
            hosts: settings.hosts.clone(),
            placement: Placement::new(me.node.clone(), timing),
            me,
            instance: None,
            meters: SingletonMeters::new(system.node(), name),
            drains: Vec::new(),
        };
        // A graceful shutdown hands over before the node drains: the
        // cluster's own step (registered at join, so run first) has left,
        // and this one waits for the instance to stop and the successor
        // to be told, at most the handover timeout.
        let drains = drain_tx.downgrade();
        let bound = settings.handover_timeout;
        system.inner.before_graceful(false, move || async move {
            if let Some(tx) = drains.upgrade() {
                let (done, wait) = oneshot::channel();
                if tx.send(done).is_ok() {
                    let _ = tokio::time::timeout(bound, wait).await;
                }
            }
        });
        let cancel = cancel_token(system);
        tokio::spawn(manager.run(inbox_rx, drain_rx, drain_tx, cancel));
        Ok(Self::proxy_with(
            system,
            cluster,
            name,
            settings.buffer_bytes,
        ))
    }

    /// A ref to singleton `name`, for a node that does not host it (or
    /// one that does: [`start`](Self::start) returns one too). Its buffer
    /// holds [`DEFAULT_BUFFER_BYTES`].
    pub fn proxy<M: RemoteMessage>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
    ) -> SingletonRef<M> {
        Self::proxy_with(system, cluster, name, DEFAULT_BUFFER_BYTES)
    }

    /// [`proxy`](Self::proxy) with a buffer of `buffer_bytes`.
    pub fn proxy_with<M: RemoteMessage>(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        buffer_bytes: usize,
    ) -> SingletonRef<M> {
        let shared = Arc::new(RefShared {
            name: name.to_owned(),
            group: group_name(name),
            cluster: cluster.clone(),
            registry: system.registry().clone(),
            limit: buffer_bytes,
            state: Mutex::new(RefState {
                target: None,
                buffer: VecDeque::new(),
                bytes: 0,
            }),
            ready: Notify::new(),
            meters: SingletonMeters::new(system.node(), name),
        });
        shared.refresh();
        tokio::spawn(follow(
            Arc::downgrade(&shared),
            cluster.subscribe_groups(),
            cluster.subscribe(),
            cancel_token(system),
        ));
        SingletonRef { shared }
    }
}

const SECOND: Duration = Duration::from_secs(1);

/// The cluster group the running instance joins.
fn group_name(name: &str) -> String {
    format!("singleton:{name}")
}

/// Cancelled when the system shuts down (never for a local system, which
/// has no cluster anyway).
fn cancel_token(system: &ActorSystem) -> CancellationToken {
    system
        .remoting()
        .map_or_else(CancellationToken::new, |r| r.cancel_token())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What managers tell each other.
#[derive(Debug, Serialize, Deserialize)]
enum Handover {
    /// The sender (node, incarnation) is the oldest and asks for the
    /// singleton.
    ToMe { node: String, uid: u64 },
    /// The sender (node, incarnation) has no instance and will not start
    /// one.
    Done { node: String, uid: u64 },
}

impl RemoteMessage for Handover {
    const MANIFEST: &'static str = "actors.singleton.Handover";
}

/// The manager's mailbox: hands what it gets to the manager's task.
struct Inbox(mpsc::UnboundedSender<Handover>);

impl Actor for Inbox {
    type Msg = Handover;

    async fn handle(&mut self, msg: Handover, _: &mut Ctx<Self>) -> ActorResult {
        // The task ends with the system; then nothing needs this.
        let _ = self.0.send(msg);
        Ok(())
    }
}

/// A hosting node's manager task: feeds [`Placement`] and carries out
/// its actions.
struct Manager<A: Actor, F> {
    name: String,
    manager_name: String,
    system: ActorSystem,
    cluster: Cluster,
    factory: F,
    hosts: Hosts,
    placement: Placement,
    me: Member,
    instance: Option<ActorRef<A::Msg>>,
    meters: Option<SingletonMeters>,
    /// Graceful shutdowns waiting for the handover.
    drains: Vec<oneshot::Sender<()>>,
    /// The lease the instance needs, and this node's name as its owner.
    lease: Option<Arc<dyn Lease>>,
    owner: String,
    /// How long to wait before asking for the lease again.
    retry: Duration,
    /// Whether this node acquired the lease and has not released it.
    lease_held: bool,
    /// Set the moment this node downs itself: no instance starts here
    /// again (the one running was stopped where it stood).
    fenced: Arc<AtomicBool>,
}

/// An acquisition of the lease in flight.
type Acquiring = Option<Pin<Box<dyn Future<Output = Result<bool, LeaseError>> + Send>>>;

/// How long a release of the lease may take before the handover goes on
/// without it (the lease's own expiry covers a release that never came).
const RELEASE_WITHIN: Duration = Duration::from_secs(5);

impl<A, F> Manager<A, F>
where
    A: Actor,
    A::Msg: RemoteMessage,
    F: Fn() -> A + Send + Sync + 'static,
{
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<Handover>,
        mut drain_rx: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
        // Kept so the channel stays open while the task runs.
        _drain_tx: mpsc::UnboundedSender<oneshot::Sender<()>>,
        cancel: CancellationToken,
    ) {
        let mut events = self.cluster.subscribe();
        let mut membership = true;
        let mut watch: Option<Watch> = None;
        let mut acquiring: Acquiring = None;
        let mut acquire_at: Option<std::time::Instant> = None;
        loop {
            let now = std::time::Instant::now();
            self.placement.handle_view(now, self.view());
            self.act(&mut watch, &mut acquiring, &mut acquire_at);
            if !matches!(self.placement.phase(), Phase::Running | Phase::Stopping) {
                for d in self.drains.drain(..) {
                    let _ = d.send(());
                }
            }
            let due = self.placement.poll_timeout();
            tokio::select! {
                ev = events.recv(), if membership => {
                    if let Err(broadcast::error::RecvError::Closed) = ev {
                        // Membership stopped (this node left): the view
                        // stays as it last was.
                        membership = false;
                    }
                }
                Some(msg) = inbox.recv() => {
                    let now = std::time::Instant::now();
                    match msg {
                        Handover::ToMe { node, uid } => {
                            self.placement.handle_handover_request(now, node, uid);
                        }
                        Handover::Done { node, uid } => {
                            self.placement.handle_handover_done(now, node, uid);
                        }
                    }
                }
                Some(done) = drain_rx.recv() => self.drains.push(done),
                t = async { watch.as_mut().expect("guarded: a watch is held").await }, if watch.is_some() => {
                    watch = None;
                    self.instance = None;
                    tracing::info!(singleton = %self.name, reason = %t.reason, "cluster singleton stopped on this node");
                    if let Some(m) = &self.meters {
                        m.running.set(0.0);
                    }
                    // Released before the next host is told, so that it
                    // finds the lease free.
                    self.release_lease().await;
                    self.placement.handle_stopped(std::time::Instant::now());
                }
                got = async { acquiring.as_mut().expect("guarded: an acquisition is in flight").await }, if acquiring.is_some() => {
                    acquiring = None;
                    match got {
                        Ok(true) => {
                            self.lease_held = true;
                            self.start_instance(&mut watch);
                        }
                        Ok(false) => {
                            tracing::debug!(singleton = %self.name, "the singleton's lease is held by another owner; asking again");
                            acquire_at = Some(std::time::Instant::now() + self.retry);
                        }
                        Err(e) => {
                            tracing::warn!(singleton = %self.name, error = %e, "the singleton's lease could not be asked; asking again");
                            acquire_at = Some(std::time::Instant::now() + self.retry);
                        }
                    }
                }
                () = sleep_until(acquire_at), if acquire_at.is_some() => {
                    acquire_at = None;
                    acquiring = self.acquire();
                }
                () = sleep_until(due), if due.is_some() => {
                    self.placement.handle_timeout(std::time::Instant::now());
                }
                () = cancel.cancelled() => {
                    self.release_lease().await;
                    return;
                }
            }
        }
    }

    /// The hosting members as membership sees them, this node included
    /// (`Up` once it has joined, even as the first node of its cluster).
    fn view(&self) -> Vec<Host> {
        let mut me = self.cluster.myself();
        if me.state == MemberState::Joining && self.cluster.is_joined() {
            me.state = MemberState::Up;
        }
        self.cluster
            .members()
            .into_iter()
            .chain(std::iter::once(me))
            .filter(|m| self.hosts.admits(m))
            .map(|m| Host {
                node: m.node,
                uid: m.uid,
                started_ms: m.started_ms,
                state: m.state,
            })
            .collect()
    }

    fn act(
        &mut self,
        watch: &mut Option<Watch>,
        acquiring: &mut Acquiring,
        acquire_at: &mut Option<std::time::Instant>,
    ) {
        while let Some(action) = self.placement.poll_action() {
            match action {
                Action::Start if self.lease.is_some() => {
                    *acquire_at = None;
                    *acquiring = self.acquire();
                }
                Action::Start => self.start_instance(watch),
                Action::Stop => {
                    tracing::info!(singleton = %self.name, "cluster singleton stopping on this node: handing over");
                    // An instance already gone is seen by its watch.
                    if let Some(i) = &self.instance {
                        let _ = i.stop_after_queued();
                    } else if acquiring.is_some() || acquire_at.is_some() {
                        // Still waiting for the lease: nothing started.
                        // An acquisition in flight may still land: give
                        // the lease back in any case.
                        *acquiring = None;
                        *acquire_at = None;
                        self.release_in_background(true);
                        self.placement.handle_stopped(std::time::Instant::now());
                    }
                }
                Action::HandOverDone { node, uid } => {
                    tracing::debug!(singleton = %self.name, to = %node, "handover done");
                    let msg = Handover::Done {
                        node: self.me.node.clone(),
                        uid: self.me.uid,
                    };
                    self.tell_manager(&node, uid, msg);
                }
                Action::HandOverToMe { node, uid } => {
                    tracing::debug!(singleton = %self.name, to = %node, "asking for the handover");
                    let msg = Handover::ToMe {
                        node: self.me.node.clone(),
                        uid: self.me.uid,
                    };
                    self.tell_manager(&node, uid, msg);
                }
            }
        }
    }

    fn start_instance(&mut self, watch: &mut Option<Watch>) {
        if self.fenced.load(Ordering::Acquire) {
            return;
        }
        match self.system.spawn_named(&self.name, (self.factory)()) {
            Ok(instance) => {
                tracing::info!(singleton = %self.name, node = %self.me.node, "cluster singleton started on this node");
                if let Some(m) = &self.meters {
                    m.starts.increment(1);
                    m.running.set(1.0);
                }
                *watch = Some(instance.watch());
                let cluster = self.cluster.clone();
                let group = group_name(&self.name);
                let listed = instance.clone();
                let name = self.name.clone();
                tokio::spawn(async move {
                    if let Err(e) = cluster.join_group(&group, &listed).await {
                        tracing::warn!(singleton = %name, error = %e, "the singleton could not be listed: refs do not find it");
                    }
                });
                self.instance = Some(instance);
            }
            Err(e) => {
                tracing::warn!(singleton = %self.name, error = %e, "cluster singleton could not start on this node");
                self.release_in_background(false);
                self.placement.handle_stopped(std::time::Instant::now());
            }
        }
    }

    /// Asks for the lease (there is one), as a future that owns what it
    /// needs.
    fn acquire(&self) -> Acquiring {
        let lease = self.lease.clone()?;
        let owner = self.owner.clone();
        Some(Box::pin(async move { lease.acquire(&owner).await }))
    }

    /// Releases the lease if this node holds it, waiting at most
    /// [`RELEASE_WITHIN`].
    async fn release_lease(&mut self) {
        if !std::mem::take(&mut self.lease_held) {
            return;
        }
        let Some(lease) = &self.lease else { return };
        match tokio::time::timeout(RELEASE_WITHIN, lease.release(&self.owner)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(singleton = %self.name, error = %e, "the singleton's lease could not be released; it stays held until it expires");
            }
            Err(_) => {
                tracing::warn!(singleton = %self.name, "the singleton's lease was not released in time; it stays held until it expires");
            }
        }
    }

    /// As [`release_lease`](Self::release_lease), without waiting (from
    /// code that cannot); also when this node may hold it (`maybe`: an
    /// acquisition was given up in flight).
    fn release_in_background(&mut self, maybe: bool) {
        if !(std::mem::take(&mut self.lease_held) || maybe) {
            return;
        }
        if let Some(lease) = self.lease.clone() {
            let owner = self.owner.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(RELEASE_WITHIN, lease.release(&owner)).await;
            });
        }
    }

    /// Tells the manager on incarnation `uid` of `node`.
    fn tell_manager(&self, node: &str, uid: u64, msg: Handover) {
        let path = format!("tcp://{node}/user/{}", self.manager_name);
        let Ok(path) = ActorPath::parse(&path) else {
            return;
        };
        if let Ok(r) = ActorRef::<Handover>::for_path_at(&self.system.inner.node, path, uid) {
            // Lost if the link is: the requester asks again, and a
            // handover that never comes is waited out.
            let _ = r.tell(msg);
        }
    }
}

async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// A ref to a cluster singleton, wherever it runs: from
/// [`Singleton::start`] or [`Singleton::proxy`]. Cheap to clone.
///
/// It sends to the instance listed in the cluster group
/// `singleton:<name>` (the youngest member's, when a move briefly lists
/// two: the singleton only moves to younger members). While none is
/// listed, it buffers up to the settings' `buffer_bytes` and delivers the
/// buffer in order once one is; what it sends meanwhile queues behind
/// the buffer.
///
/// Methods: [`tell`](Self::tell), [`send`](Self::send),
/// [`ask`](Self::ask); [`location`](Self::location), [`buffered`](Self::buffered).
pub struct SingletonRef<M> {
    shared: Arc<RefShared<M>>,
}

impl<M> Clone for SingletonRef<M> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<M> fmt::Debug for SingletonRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let location = lock(&self.shared.state)
            .target
            .as_ref()
            .map(|(n, _)| n.clone());
        f.debug_struct("SingletonRef")
            .field("name", &self.shared.name)
            .field("location", &location)
            .finish_non_exhaustive()
    }
}

struct RefShared<M> {
    name: String,
    group: String,
    cluster: Cluster,
    registry: Arc<Registry>,
    limit: usize,
    state: Mutex<RefState<M>>,
    /// Woken when an instance is known and the buffer is empty.
    ready: Notify,
    meters: Option<SingletonMeters>,
}

struct RefState<M> {
    /// The instance's node and ref.
    target: Option<(String, ActorRef<M>)>,
    /// Messages waiting for an instance, with their counted size.
    buffer: VecDeque<(M, usize)>,
    bytes: usize,
}

impl<M: RemoteMessage> SingletonRef<M> {
    /// Sends `msg` without waiting: to the instance, or into the buffer
    /// while none is known (or the buffer is not yet delivered).
    ///
    /// # Errors
    /// As [`ActorRef::tell`] when it goes to the instance;
    /// [`SendError::BufferFull`] when the buffer holds its bound (the
    /// message comes back and is counted as a dead letter).
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        let mut st = lock(&self.shared.state);
        if st.buffer.is_empty()
            && let Some((_, target)) = &st.target
        {
            return target.tell(msg);
        }
        self.shared.hold(&mut st, msg)
    }

    /// Sends `msg`, waiting for room in the instance's mailbox (as
    /// [`ActorRef::send`]); while no instance is known it buffers as
    /// [`tell`](Self::tell) does, without waiting.
    ///
    /// # Errors
    /// As [`tell`](Self::tell).
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        let target = {
            let mut st = lock(&self.shared.state);
            match &st.target {
                Some((_, t)) if st.buffer.is_empty() => t.clone(),
                _ => return self.shared.hold(&mut st, msg),
            }
        };
        target.send(msg).await
    }

    /// Asks the singleton (as [`ActorRef::ask`]): waits, within
    /// `timeout`, for an instance to be known and the buffer delivered,
    /// then sends the request, so it arrives after what was buffered.
    ///
    /// # Errors
    /// As [`ActorRef::ask`]; [`AskError::Timeout`] also when no instance
    /// was known in time.
    pub async fn ask<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ready = self.shared.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let target = {
                let st = lock(&self.shared.state);
                match &st.target {
                    Some((_, t)) if st.buffer.is_empty() => Some(t.clone()),
                    _ => None,
                }
            };
            if let Some(t) = target {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                return t.ask(make, left).await;
            }
            if tokio::time::timeout_at(deadline, ready).await.is_err() {
                return Err(AskError::Timeout(timeout));
            }
        }
    }

    /// The node (`name@host:port`) whose instance this ref sends to now;
    /// `None` while the singleton moves or is not known yet.
    pub fn location(&self) -> Option<String> {
        lock(&self.shared.state)
            .target
            .as_ref()
            .map(|(n, _)| n.clone())
    }

    /// Messages held in the buffer now.
    pub fn buffered(&self) -> usize {
        lock(&self.shared.state).buffer.len()
    }
}

impl<M> SingletonRef<M> {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
}

impl<M: RemoteMessage> RefShared<M> {
    /// Buffers `msg`, or refuses it past the bound.
    fn hold(&self, st: &mut RefState<M>, msg: M) -> Result<(), SendError<M>> {
        let mut scratch = BytesMut::new();
        // A message that does not encode would not reach a remote
        // instance either; it is counted at its size in memory.
        let _ = msg.encode(&mut scratch, self.limit.saturating_add(1));
        let size = scratch.len() + std::mem::size_of::<M>();
        if st.bytes.saturating_add(size) > self.limit {
            self.registry.dead_letter(
                std::any::type_name::<M>(),
                &format_args!("singleton {}", self.name),
                &crate::dead_letter::DeadLetterReason::BufferFull(
                    format!("singleton {} moving or not yet known", self.name).into(),
                ),
            );
            return Err(SendError::BufferFull(msg, self.limit));
        }
        st.bytes += size;
        st.buffer.push_back((msg, size));
        if let Some(m) = &self.meters {
            m.buffered.set(st.bytes as f64);
        }
        Ok(())
    }

    /// Looks up the instance again and delivers the buffer to it;
    /// whether delivery stalled on a full mailbox or link (retry later).
    fn refresh(&self) -> bool {
        let target = self.find();
        let mut st = lock(&self.state);
        st.target = target;
        let mut stalled = false;
        let target = st.target.as_ref().map(|(_, t)| t.clone());
        while let Some(t) = &target {
            let Some((msg, size)) = st.buffer.pop_front() else {
                break;
            };
            match t.tell(msg) {
                Ok(()) => st.bytes -= size,
                Err(SendError::MailboxFull(m) | SendError::LinkFull(m)) => {
                    st.buffer.push_front((m, size));
                    stalled = true;
                    break;
                }
                // Counted as a dead letter where it failed.
                Err(_) => st.bytes -= size,
            }
        }
        if let Some(m) = &self.meters {
            m.buffered.set(st.bytes as f64);
        }
        if st.target.is_some() && st.buffer.is_empty() {
            self.ready.notify_waiters();
        }
        stalled
    }

    /// The listed instance on the youngest member (a move may list the
    /// old one for a moment; the singleton only moves to younger
    /// members).
    fn find(&self) -> Option<(String, ActorRef<M>)> {
        let refs = self.cluster.group::<M>(&self.group);
        if refs.is_empty() {
            return None;
        }
        let me = self.cluster.myself();
        let members = self.cluster.members();
        let age = |node: &str| {
            if node == me.node {
                me.started_ms
            } else {
                members
                    .iter()
                    .find(|m| m.node == node)
                    .map_or(0, |m| m.started_ms)
            }
        };
        refs.into_iter()
            .map(|r| (r.path().node().to_owned(), r))
            .max_by(|(a, _), (b, _)| (age(a), a).cmp(&(age(b), b)))
    }
}

/// Follows membership and the singleton's group for a ref, until every
/// clone of the ref is dropped, membership stops or the system shuts
/// down.
async fn follow<M: RemoteMessage>(
    shared: Weak<RefShared<M>>,
    mut groups: broadcast::Receiver<crate::cluster::GroupEvent>,
    mut members: broadcast::Receiver<crate::cluster::ClusterEvent>,
    cancel: CancellationToken,
) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let stalled = s.refresh();
        drop(s);
        tokio::select! {
            r = groups.recv() => if let Err(broadcast::error::RecvError::Closed) = r { return },
            r = members.recv() => if let Err(broadcast::error::RecvError::Closed) = r { return },
            () = tokio::time::sleep(FLUSH_RETRY), if stalled => {}
            () = cancel.cancelled() => return,
        }
    }
}
