//! The actor system: a node's settings, its registry and remoting, the
//! actors it runs, resolve, and shutdown. Spawning and the actor's task
//! are in `actor`, which builds on this.

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio_util::task::TaskTracker;
use transport::ConnStats;

use crate::{
    actor_ref::ActorRef,
    config::SystemConfig,
    error::{ResolveError, SystemError},
    node::Node,
    path::{ActorPath, valid_name},
    registry::Registry,
    remote::{PeerMemory, RemoteEvent, Remoting},
    serialization::{RemoteMessage, manifest_id, manifests},
};

/// Remote events buffered per subscriber; a slower subscriber loses the
/// oldest (and is told how many, by `broadcast`'s `Lagged`).
const REMOTE_EVENT_BUFFER: usize = 1024;

/// Something the shutdown can stop (a running actor).
pub(crate) trait Stoppable: Send + Sync {
    fn stop(&self);
    /// Stops once the messages already queued are handled
    /// (`ActorRef::stop_after_queued`).
    fn stop_after_queued(&self);
}

pub(crate) struct SystemInner {
    pub(crate) node: Arc<Node>,
    pub(crate) events: tokio::sync::broadcast::Sender<RemoteEvent>,
    pub(crate) config: SystemConfig,
    /// Running actors by spawn number.
    pub(crate) live: Mutex<HashMap<u64, Arc<dyn Stoppable>>>,
    pub(crate) tasks: TaskTracker,
    pub(crate) shutting_down: AtomicBool,
    /// What a graceful shutdown does first (leave the cluster, say):
    /// registered by layers above the system, run once.
    pub(crate) before_graceful: Mutex<Vec<BeforeGraceful>>,
}

/// A step of [`ActorSystem::shutdown_gracefully`] run before the actors
/// drain (the cluster's leave).
pub(crate) type BeforeGraceful =
    Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

impl SystemInner {
    /// Registers a step for [`ActorSystem::shutdown_gracefully`] to run
    /// before the actors drain: after the steps registered so far, or
    /// before all of them with `first`.
    pub(crate) fn before_graceful<F>(&self, first: bool, step: impl FnOnce() -> F + Send + 'static)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let step: BeforeGraceful = Box::new(move || Box::pin(step()));
        let mut steps = self
            .before_graceful
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first {
            steps.insert(0, step);
        } else {
            steps.push(step);
        }
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
///   [`dead_letters`](Self::dead_letters), [`remote_stats`](Self::remote_stats),
///   [`peer_memory`](Self::peer_memory),
///   [`remote_nodes`](Self::remote_nodes);
/// - ending: [`shutdown`](Self::shutdown).
#[derive(Clone)]
pub struct ActorSystem {
    pub(crate) inner: Arc<SystemInner>,
}

impl fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorSystem")
            .field("node", self.registry().node())
            .finish()
    }
}

impl ActorSystem {
    fn build(
        registry: Arc<Registry>,
        remoting: Option<Arc<Remoting>>,
        events: tokio::sync::broadcast::Sender<RemoteEvent>,
        config: SystemConfig,
    ) -> Self {
        let inner = Arc::new(SystemInner {
            node: Node::new(registry, remoting),
            events,
            config,
            live: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutting_down: AtomicBool::new(false),
            before_graceful: Mutex::new(Vec::new()),
        });
        Self { inner }
    }

    /// A system without remoting: its actors are reachable in this process
    /// only (paths `local://name/...`).
    ///
    /// # Errors
    /// An invalid name.
    pub fn local(name: &str) -> Result<Self, SystemError> {
        Self::local_with(name, SystemConfig::default())
    }

    fn local_with(name: &str, config: SystemConfig) -> Result<Self, SystemError> {
        if !valid_name(name) {
            return Err(SystemError::InvalidName(name.to_owned()));
        }
        let registry = Arc::new(Registry::new(name, name.into(), false));
        let events = tokio::sync::broadcast::channel(REMOTE_EVENT_BUFFER).0;
        Ok(Self::build(registry, None, events, config))
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
            return Self::local_with(name, config);
        };
        if !valid_name(name) {
            return Err(SystemError::InvalidName(name.to_owned()));
        }
        let bound = Remoting::bind(name, bind, &config).await?;
        let registry = Arc::new(Registry::new(name, bound.advertised().into(), true));
        let events = tokio::sync::broadcast::channel(REMOTE_EVENT_BUFFER).0;
        let remoting = Remoting::start(bound, registry.clone(), config.clone(), events.clone());
        Ok(Self::build(registry, Some(remoting), events, config))
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.node.registry
    }

    pub(crate) fn remoting(&self) -> Option<&Arc<Remoting>> {
        self.inner.node.remoting.as_ref()
    }

    /// The system's name.
    pub fn name(&self) -> &str {
        self.registry().name()
    }

    /// The node part of this system's paths (`name@host:port` with
    /// remoting, `name` without).
    pub fn node(&self) -> &str {
        self.registry().node()
    }

    /// The bound socket address, with remoting.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.remoting().map(|r| r.local_addr())
    }

    /// Dead letters so far: messages to stopped or unknown actors, messages
    /// left in mailboxes at stop, undecodable or mistyped remote messages,
    /// and messages lost with a broken link.
    pub fn dead_letters(&self) -> u64 {
        self.registry().dead_letter_count()
    }

    /// A stream of what happens to remote nodes: links up and down, nodes
    /// judged unreachable (or reachable again), incarnations quarantined.
    /// Each subscriber sees the events after it subscribed.
    pub fn subscribe_remote_events(&self) -> tokio::sync::broadcast::Receiver<RemoteEvent> {
        self.inner.events.subscribe()
    }

    /// The remote nodes this system keeps an association with (a link, or
    /// the state kept to make one): at most
    /// [`SystemConfig::set_max_associations`](crate::SystemConfig::set_max_associations);
    /// ones nothing uses are dropped after
    /// [`SystemConfig::set_association_idle_timeout`](crate::SystemConfig::set_association_idle_timeout).
    pub fn remote_nodes(&self) -> Vec<String> {
        self.remoting().map(|r| r.nodes()).unwrap_or_default()
    }

    /// Transport counters summed over this system's connections.
    pub fn remote_stats(&self) -> ConnStats {
        self.remoting().map(|r| r.stats()).unwrap_or_default()
    }

    /// What this node's peers make it hold now (recipient ids, batches
    /// parked for full mailboxes, large messages being reassembled),
    /// against [`SystemConfig::set_peer_memory_budget`](crate::SystemConfig::set_peer_memory_budget),
    /// and what was refused for going over it. All zero without remoting.
    pub fn peer_memory(&self) -> PeerMemory {
        self.remoting().map(|r| r.peer_memory()).unwrap_or_default()
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
        manifests::register::<M>().map_err(|c| match c {
            manifests::Conflict::Id { id, registered } => ResolveError::ManifestCollision {
                manifest: M::MANIFEST,
                id,
                registered,
            },
            manifests::Conflict::SameName {
                registered_type,
                this_type,
            } => ResolveError::ManifestShared {
                manifest: M::MANIFEST,
                registered_type,
                this_type,
            },
        })?;
        let path = ActorPath::parse(path)?;
        if path.node() == self.node() {
            let target = self
                .registry()
                .lookup(path.elements())
                .ok_or_else(|| ResolveError::NotFound(path.to_string()))?;
            let actual = target.manifest_name();
            return ActorRef::from_any(target.as_any()).ok_or_else(|| ResolveError::WrongType {
                path: path.to_string(),
                expected: M::MANIFEST.to_owned(),
                actual: actual.to_owned(),
            });
        }
        let remoting = self.remoting().ok_or(ResolveError::NoRemoting)?;
        let manifest = remoting
            .identify(&path, self.inner.config.resolve_timeout)
            .await?;
        match manifest {
            None => Err(ResolveError::NotFound(path.to_string())),
            Some((id, _)) if id == manifest_id(M::MANIFEST) => {
                let (assoc, recipient) =
                    remoting
                        .recipient(path.clone())
                        .ok_or_else(|| ResolveError::Unreachable {
                            addr: path.node().to_owned(),
                            reason: "association limit reached".into(),
                        })?;
                Ok(ActorRef::remote_unchecked(assoc, recipient))
            }
            Some((_, name)) => Err(ResolveError::WrongType {
                path: path.to_string(),
                expected: M::MANIFEST.to_owned(),
                actual: name,
            }),
        }
    }

    /// Marks the system shutting down (nothing new is spawned) and returns
    /// the actors alive now, for a shutdown to stop.
    fn begin_shutdown(&self) -> Vec<Arc<dyn Stoppable>> {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Stops every actor (messages left in mailboxes become dead letters,
    /// counted), waits for them to finish, then closes remote links
    /// gracefully (queued frames are flushed, peers are told) and stops
    /// listening. Bounded by the transport's close timeout.
    pub async fn shutdown(&self) {
        let live = self.begin_shutdown();
        for a in live {
            a.stop();
        }
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        if let Some(r) = self.remoting() {
            r.shutdown().await;
        }
    }

    /// Shuts down after the work already queued: every actor stops once it
    /// has handled the messages in its mailbox (as
    /// [`ActorRef::stop_after_queued`]), for at most `deadline`; then
    /// [`shutdown`](Self::shutdown) stops whatever still runs (its queued
    /// messages become dead letters) and closes remote links gracefully.
    /// Returns whether every actor finished its queue in time.
    ///
    /// From the call on, nothing new is spawned (a spawn is stopped at
    /// once), and a message sent to an actor that has drained is a dead
    /// letter: an actor's last messages to another that finished first are
    /// lost, as in any shutdown without phases.
    ///
    /// A node that joined a cluster leaves it first (`Cluster::leave`):
    /// the other members see it `Left` at once and route no new work to it
    /// while it drains.
    pub async fn shutdown_gracefully(&self, deadline: std::time::Duration) -> bool {
        let first = std::mem::take(
            &mut *self
                .inner
                .before_graceful
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for step in first {
            step().await;
        }
        let live = self.begin_shutdown();
        for a in live {
            a.stop_after_queued();
        }
        self.inner.tasks.close();
        let drained = tokio::time::timeout(deadline, self.inner.tasks.wait())
            .await
            .is_ok();
        if !drained {
            tracing::warn!(
                ?deadline,
                "graceful shutdown: actors still busy at the deadline are stopped"
            );
        }
        self.shutdown().await;
        drained
    }

    /// Installs handlers for Ctrl-C (SIGINT) and, on Unix, SIGTERM (what
    /// service managers and containers send), and returns a future that,
    /// once one of them arrives, runs
    /// [`shutdown_gracefully`](Self::shutdown_gracefully) with `deadline`
    /// and yields its result. The handlers are in place when this returns,
    /// so no signal after it is missed; from then on those signals no
    /// longer end the process by themselves: let `main` return after the
    /// future completes.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let system = actors::ActorSystem::remote("svc", "0.0.0.0:2552".parse()?).await?;
    /// // ... spawn actors ...
    /// let drained = system.shutdown_on_ctrl_c(Duration::from_secs(10))?.await;
    /// eprintln!("stopped; every queue drained: {drained}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A signal handler could not be installed.
    pub fn shutdown_on_ctrl_c(
        &self,
        deadline: std::time::Duration,
    ) -> std::io::Result<impl std::future::Future<Output = bool> + Send + 'static> {
        #[cfg(unix)]
        let signalled = {
            use tokio::signal::unix::{SignalKind, signal};
            let mut int = signal(SignalKind::interrupt())?;
            let mut term = signal(SignalKind::terminate())?;
            async move {
                tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                }
            }
        };
        #[cfg(not(unix))]
        let signalled = async {
            // Registered on first poll: a Ctrl-C before then is missed.
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        };
        let system = self.clone();
        Ok(async move {
            let signal = signalled.await;
            tracing::info!(signal, ?deadline, "shutting down gracefully");
            system.shutdown_gracefully(deadline).await
        })
    }
}
