//! [`Cluster`], the handle users hold: joining (which starts the
//! membership task), waiting to be joined, the view and its
//! subscription, the counters, and leaving. Its group calls are in
//! `routing`.

use std::{
    collections::{BTreeMap, BinaryHeap, HashSet},
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::BytesMut;
use foca::{AccumulatingRuntime, Foca};
use rand::{SeedableRng, rngs::SmallRng};
use tokio::{
    net::UdpSocket,
    sync::{broadcast, mpsc, oneshot},
    time::Instant,
};

use super::{
    ClusterConfig, ClusterError, ClusterEvent, ClusterStats, Member, MemberState,
    contact::{AloneWarning, LastKnown, advertise, resolve_seeds},
    downing,
    groups::{self, OwnEntries},
    lock,
    shared::{Cmd, Shared},
    stats::Stats,
    suspicion,
    task::Task,
    view::View,
    wire::{self, Codec, Id},
};
use crate::system::ActorSystem;

/// A node's membership: its view of the cluster and its subscription.
/// Cheap to clone; membership runs until [`leave`](Self::leave), the
/// system's shutdown, or the last clone is dropped.
#[derive(Clone)]
pub struct Cluster {
    pub(super) shared: Arc<Shared>,
    pub(super) cmds: mpsc::UnboundedSender<Cmd>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.shared.me.node)
            .field("udp", &self.shared.me.udp)
            .finish_non_exhaustive()
    }
}

/// The last start stamp a membership of this process took.
static LAST_START: AtomicU64 = AtomicU64::new(0);

/// A membership's start time in ms: the wall clock's `now_ms`, but always
/// above every earlier stamp of this process (`last`). A system that
/// leaves and joins again keeps its uid, so this is what makes the new
/// membership another identity: a leave notice of the old one (a replay,
/// or a late copy) names an identity no live member has, and is refused;
/// and the new one wins the address from the old one
/// (`Id::win_addr_conflict`), even within one millisecond or after the
/// clock stepped back.
fn start_stamp(last: &AtomicU64, now_ms: u64) -> u64 {
    let mut stamp = 1;
    // The closure always returns `Some`: the update cannot fail.
    let _ = last.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |prev| {
        stamp = now_ms.max(prev.saturating_add(1)).max(1);
        Some(stamp)
    });
    stamp
}

impl Cluster {
    /// Starts membership for `system` and announces it to the seeds (until
    /// one answers). Returns once the socket is bound; joining goes on in
    /// the background (watch [`members`](Self::members) or
    /// [`subscribe`](Self::subscribe)).
    ///
    /// # Errors
    /// See [`ClusterError`].
    pub async fn join(system: &ActorSystem, config: ClusterConfig) -> Result<Self, ClusterError> {
        let remoting = system.remoting().ok_or(ClusterError::NoRemoting)?.clone();
        let keys = remoting
            .derived_keys(wire::KEY_LABEL)
            .ok_or(ClusterError::NoSecret)?;
        let bind = config.udp_bind.unwrap_or_else(|| remoting.local_addr());
        let mut seeds = Vec::new();
        for s in &config.seeds {
            let addrs = tokio::net::lookup_host(s.as_str())
                .await
                .map_err(|e| ClusterError::Seed(s.clone(), e))?;
            seeds.extend(addrs);
        }
        let socket = UdpSocket::bind(bind)
            .await
            .map_err(|e| ClusterError::Bind(bind, e))?;
        let bound = socket
            .local_addr()
            .map_err(|e| ClusterError::Bind(bind, e))?;
        let udp = advertise(config.udp_advertise, bound, remoting.node_addr()).await?;
        seeds.retain(|s| *s != udp && *s != bound);
        let started_ms = start_stamp(
            &LAST_START,
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        );
        let me = Id {
            node: remoting.node_addr().to_owned(),
            uid: remoting.uid(),
            udp,
            started_ms,
        };
        let (events, _) = broadcast::channel(config.event_capacity);
        let (group_events, _) = broadcast::channel(config.event_capacity);
        let table = Arc::new(Mutex::new(groups::Table::for_node(me.node.clone(), me.uid)));
        let shared = Arc::new(Shared {
            me: me.clone(),
            node: system.inner.node.clone(),
            groups: table.clone(),
            group_events,
            view: Mutex::new(View {
                members: BTreeMap::new(),
                me: MemberState::Joining,
            }),
            events,
            stats: Stats::default(),
            seed_names: Arc::new(Mutex::new(config.seeds.clone())),
            seeds_configured: !seeds.is_empty(),
            stable_after: config.stable_after,
            settle: (config.probe_period + config.announce_interval).min(config.stable_after),
            fences: Mutex::new(Vec::new()),
        });
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| ClusterError::Bind(bind, std::io::Error::other(e.to_string())))?;
        let admission = Arc::new(wire::Admission::new(config.max_members, udp));
        let foca = Foca::with_custom_broadcast(
            me,
            config.foca(),
            SmallRng::from_seed(seed),
            Codec::bounded(admission.clone()),
            groups::Handler(table),
        );
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let seed_names = shared.seed_names.clone();
        let (resolve_tx, resolve_rx) = mpsc::channel(1);
        let (resolved_tx, resolved_rx) = mpsc::channel(1);
        tokio::spawn(resolve_seeds(
            seed_names.clone(),
            resolve_rx,
            resolved_tx,
            config.announce_interval,
        ));
        let task = Task {
            foca,
            rt: AccumulatingRuntime::new(),
            socket,
            keys,
            seeds,
            seed_names,
            resolve: resolve_tx,
            last_known: LastKnown::default(),
            alone_warning: AloneWarning::new(Instant::now()),
            bound,
            timers: BinaryHeap::new(),
            seq: 0,
            shared: shared.clone(),
            remoting: Arc::downgrade(&remoting),
            left: HashSet::new(),
            known: BTreeMap::new(),
            packet: BytesMut::new(),
            max_packet: config.max_packet_size,
            own: OwnEntries::default(),
            admission,
            suspects: suspicion::Suspects::default(),
            meters: crate::telemetry::ClusterMeters::new(remoting.node_addr()),
            resolver: downing::Resolver::new(
                config.downing.clone(),
                config.stable_after,
                config.down_all_when_unstable.unwrap_or_else(|| {
                    Some(downing::default_down_all_when_unstable(config.stable_after))
                }),
                remoting.node_addr().to_owned(),
            ),
            view_changed: true,
            lease: mpsc::channel(1),
            downed: false,
            last_beat: Instant::now(),
            woke_at: None,
            shutdown_when_downed: config.shutdown_when_downed,
            system: Arc::downgrade(&system.inner),
        };
        // A graceful shutdown of the system leaves the cluster first.
        let leaver = cmds.downgrade();
        system.inner.before_graceful(false, move || async move {
            if let Some(cmds) = leaver.upgrade() {
                let (tx, rx) = oneshot::channel();
                if cmds.send(Cmd::Leave(tx)).is_ok() {
                    let _ = rx.await;
                }
            }
        });
        tokio::spawn(task.run(
            config.announce_interval,
            config.probe_period,
            resolved_rx,
            cmd_rx,
            system.subscribe_remote_events(),
            remoting.cancel_token(),
        ));
        Ok(Self { shared, cmds })
    }

    /// [`join`](Self::join) with the cluster settings of the system's own
    /// configuration (the `[cluster]` section of its file and
    /// `ACTORS_CLUSTER__*` variables, see [`SystemConfig::load`](crate::SystemConfig::load)).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use actors::{ActorSystem, SystemConfig, cluster::Cluster};
    /// let config = SystemConfig::load(Some("node.toml".as_ref()))?;
    /// let system = ActorSystem::with_config("orders", Some("10.0.0.5:2552".parse()?), config).await?;
    /// let cluster = Cluster::join_configured(&system).await?;
    /// # let _ = cluster; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// See [`ClusterError`].
    pub async fn join_configured(system: &ActorSystem) -> Result<Self, ClusterError> {
        let config = ClusterConfig::from(&system.inner.config);
        Self::join(system, config).await
    }

    /// Contacts `seeds` (replacing the configured list) at once and from
    /// then on, as [`ClusterConfig::set_seeds`]: for an application that
    /// discovers its seeds elsewhere (a service registry, say), or that
    /// wants a node that has been alone to find its cluster again. Names
    /// are resolved in the background; names that do not resolve are
    /// retried at each contact.
    ///
    /// # Errors
    /// [`ClusterError::Config`] for a seed that is not `host:port` (the
    /// seeds in force are then left as they were);
    /// [`ClusterError::Stopped`] if membership has stopped.
    pub fn rejoin<S: Into<String>>(
        &self,
        seeds: impl IntoIterator<Item = S>,
    ) -> Result<(), ClusterError> {
        let mut checked = ClusterConfig::new();
        checked.set_seeds(seeds)?;
        self.cmds
            .send(Cmd::Rejoin(std::mem::take(&mut checked.seeds)))
            .map_err(|_| ClusterError::Stopped)
    }

    /// Waits until this node has joined (some member answered it), for at
    /// most `within`. A node that is the first of its cluster (no seed
    /// but itself) has joined at once.
    ///
    /// # Errors
    /// [`ClusterError::NoSeedAnswered`] when no seed answered in time
    /// (they are down, or do not share this node's secret: a wrong secret
    /// is refused silently on the wire, and logged by the seed with this
    /// node's address); [`ClusterError::Stopped`] if membership stopped.
    pub async fn joined(&self, within: Duration) -> Result<(), ClusterError> {
        let mut events = self.subscribe();
        let deadline = Instant::now() + within;
        loop {
            match lock(&self.shared.view).me {
                MemberState::Joining if !self.shared.seeds_configured => return Ok(()),
                MemberState::Joining => {}
                MemberState::Up | MemberState::Suspect => return Ok(()),
                _ => return Err(ClusterError::Stopped),
            }
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => {
                    return Err(ClusterError::NoSeedAnswered {
                        seeds: lock(&self.shared.seed_names).clone(),
                        waited: within,
                    });
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => return Err(ClusterError::Stopped),
                Ok(_) => {}
            }
        }
    }

    /// Waits until at least `n` members are [`Up`](MemberState::Up),
    /// this node included (Akka's `registerOnMemberUp` with
    /// `min-nr-of-members`): run a service's start once its cluster has
    /// the size it needs. Never returns if that many never come up; put a
    /// timeout around it.
    pub async fn when_members_up(&self, n: usize) {
        let mut events = self.subscribe();
        loop {
            let up = {
                let view = lock(&self.shared.view);
                let me = usize::from(matches!(view.me, MemberState::Up | MemberState::Joining));
                me + view
                    .members
                    .values()
                    .filter(|m| m.state == MemberState::Up)
                    .count()
            };
            if up >= n {
                return;
            }
            if let Err(broadcast::error::RecvError::Closed) = events.recv().await {
                return std::future::pending().await;
            }
        }
    }

    /// Whether this node has joined, as [`joined`](Self::joined) waits
    /// for: some member answered, or it is the first of its cluster.
    pub(crate) fn is_joined(&self) -> bool {
        match lock(&self.shared.view).me {
            MemberState::Joining => !self.shared.seeds_configured,
            MemberState::Up | MemberState::Suspect => true,
            _ => false,
        }
    }

    /// [`ClusterConfig::set_stable_after`] of this node.
    pub(crate) fn stable_after(&self) -> Duration {
        self.shared.stable_after
    }

    /// Runs `fence` the moment this node downs itself, before the event
    /// is published and before the system starts to shut down: what runs
    /// only while this node is a member (sharded entities, a singleton)
    /// stops there, and does not go on handling what it has queued while
    /// the other side, after its margin, starts it again.
    pub(crate) fn on_self_down(&self, fence: impl Fn() + Send + Sync + 'static) {
        lock(&self.shared.fences).push(Box::new(fence));
    }

    /// How long a new member waits before it takes itself for the oldest
    /// (a singleton's first start): time to hear of the others.
    pub(crate) fn settle(&self) -> Duration {
        self.shared.settle
    }

    /// This node as a member.
    pub fn myself(&self) -> Member {
        let me = &self.shared.me;
        Member {
            node: me.node.clone(),
            uid: me.uid,
            udp: me.udp,
            state: lock(&self.shared.view).me,
            started_ms: me.started_ms,
        }
    }

    /// The other members this node knows, by node address, in every state
    /// but [`Removed`](MemberState::Removed).
    pub fn members(&self) -> Vec<Member> {
        lock(&self.shared.view).members.values().cloned().collect()
    }

    /// The other members that are [`Up`](MemberState::Up).
    pub fn up_members(&self) -> Vec<Member> {
        lock(&self.shared.view)
            .members
            .values()
            .filter(|m| m.state == MemberState::Up)
            .cloned()
            .collect()
    }

    /// Membership changes from now on, in order: other members', and this
    /// node's own when it leaves ([`Leaving`](MemberState::Leaving), then
    /// [`Left`](MemberState::Left)) or downs itself. A subscriber more than
    /// [`ClusterConfig::set_event_capacity`] events behind misses the oldest
    /// (`RecvError::Lagged` says how many); [`members`](Self::members)
    /// is the current view.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.shared.events.subscribe()
    }

    /// Membership counters.
    pub fn stats(&self) -> ClusterStats {
        self.shared.stats.snapshot()
    }

    /// Leaves the cluster and shuts the node down after its queued work:
    /// [`leave`](Self::leave) (every member sees this node
    /// [`Left`](MemberState::Left) at once, so no new work is routed here
    /// through groups or membership), then
    /// [`ActorSystem::shutdown_gracefully`]: every actor handles what is
    /// already in its mailbox, for at most `deadline`, and links close
    /// after flushing. Returns whether every queue drained in time.
    ///
    /// # Errors
    /// [`ClusterError::Stopped`] if membership had stopped already (the
    /// system is shut down all the same).
    pub async fn leave_and_drain(
        &self,
        system: &ActorSystem,
        deadline: Duration,
    ) -> Result<bool, ClusterError> {
        let left = self.leave().await;
        let drained = system.shutdown_gracefully(deadline).await;
        left.map(|()| drained)
    }

    /// Leaves the cluster gracefully: tells every member at once (they
    /// see this node [`Left`](MemberState::Left) without waiting for a
    /// failure detector), gossips the leave, and stops membership. Then
    /// drain and stop the node's actors (`ActorRef::stop_after_queued`)
    /// and shut the system down.
    ///
    /// # Errors
    /// [`ClusterError::Stopped`] if membership had stopped already.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Leave(tx))
            .map_err(|_| ClusterError::Stopped)?;
        rx.await.map_err(|_| ClusterError::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_stamps_grow_though_the_clock_stands_still_or_goes_back() {
        let last = AtomicU64::new(0);
        assert_eq!(start_stamp(&last, 0), 1);
        assert_eq!(start_stamp(&last, 1000), 1000);
        assert_eq!(start_stamp(&last, 1000), 1001);
        assert_eq!(start_stamp(&last, 900), 1002);
        assert_eq!(start_stamp(&last, 5000), 5000);
    }
}
