//! A hosting node's manager: the task that feeds [`Placement`] the view
//! and the other managers' handover messages, and carries out its
//! actions (starting and stopping the instance, the lease, telling the
//! other managers).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    Lease, LeaseError, SingletonError, SingletonSettings, cancel_token, group_name,
    placement::{Action, Host, Phase, Placement, Timing},
    settings::Hosts,
};
use crate::{
    actor::{Actor, ActorResult, Ctx},
    actor_ref::ActorRef,
    cluster::{Cluster, Member, MemberState},
    path::ActorPath,
    serialization::RemoteMessage,
    system::ActorSystem,
    telemetry::SingletonMeters,
    watch::Watch,
};

const SECOND: Duration = Duration::from_secs(1);

/// Starts this node's manager of singleton `name` (its actor named
/// `manager_name`): the instance, built by `factory`, runs here whenever
/// placement says so.
///
/// # Errors
/// [`SingletonError::AlreadyStarted`] when the manager's name is taken.
pub(super) fn start<A, F>(
    system: &ActorSystem,
    cluster: &Cluster,
    name: &str,
    manager_name: String,
    factory: F,
    settings: &SingletonSettings,
) -> Result<(), SingletonError>
where
    A: Actor,
    A::Msg: RemoteMessage,
    F: Fn() -> A + Send + Sync + 'static,
{
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
    Ok(())
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
