//! Cluster membership: which nodes are up, from seed nodes, on
//! [foca](https://docs.rs/foca) (SWIM with the Inf. and Susp.
//! extensions).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use actors::{ActorSystem, cluster::{Cluster, ClusterConfig, MemberState}};
//! let system = ActorSystem::remote("orders", "10.0.0.5:2552".parse()?).await?;
//! let mut config = ClusterConfig::new();
//! config.set_seeds(["10.0.0.1:2552"])?;
//! let cluster = Cluster::join(&system, config).await?;
//! let mut events = cluster.subscribe();
//! while let Ok(e) = events.recv().await {
//!     if e.member.state == MemberState::Down {
//!         println!("{} is down", e.member.node);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Model
//! - Each node runs one membership task and one UDP socket, by default on
//!   the same IP address and port number as its TCP endpoint. Membership
//!   packets never use the TCP links, so a member keeps no TCP connection
//!   for membership: SWIM probes one random member per probe period (and
//!   a few others indirectly when that fails), whatever the cluster size.
//! - Every packet is authenticated: HMAC-SHA256 with a key derived from
//!   the nodes' shared secret (the same secret the TCP handshake proves).
//!   A node without the secret cannot join, and forged, altered or
//!   malformed packets are refused and counted ([`ClusterStats`]).
//! - A member is identified by its node address (`name@host:port`, as in
//!   actor paths) and the uid of its incarnation. States: [`MemberState`].
//!   Members judged down stay down: their incarnation is quarantined in
//!   remoting (watchers of their actors get `Terminated` with reason
//!   "quarantined: member down"), and only a restart (a new uid) rejoins.
//!   A node that the others downed while its process stood still (for
//!   `stable_after` or more) hears so from the first member it reaches
//!   when it runs again, and is down in its own view too, as when its own
//!   downing strategy downs it.
//!   The other way round, when remoting quarantines an incarnation (its
//!   link's failure detector, or the node restarting), membership
//!   declares it down: one view of who is alive.
//! - [`Cluster::leave`] tells every member directly and gossips the
//!   leave, so the others remove it at once ([`MemberState::Left`])
//!   instead of after a failure detector's timeout.
//! - A suspicion is cleared only by the suspect itself (it bumps its
//!   incarnation), so it must learn of it. Gossip of a suspicion is
//!   bounded and may be spent during a partition; so a member that hears
//!   from a member it holds suspect, at an incarnation that does not
//!   refute it, tells it directly (a suspicion notice), and it refutes.
//! - [`RouterBuilder::cluster_group`]: a router whose routees follow a
//!   group.
//!
//! # Costs and bounds
//! - One task, one socket and a member table per node; the table holds
//!   every member and, for [`ClusterConfig::set_remove_down_after`], the
//!   members that went down. Only authenticated packets reach foca, so
//!   only nodes that know the secret can add members.
//! - Traffic per node: about one probe and its answer per probe period
//!   plus gossip, each packet at most
//!   [`ClusterConfig::set_max_packet_size`] bytes; independent of cluster
//!   size except for the piggybacked updates.

mod config;
mod downing;
mod groups;
mod suspicion;
mod wire;

use std::{
    collections::{BTreeMap, BinaryHeap, HashSet},
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::BytesMut;
use foca::{AccumulatingRuntime, Foca, Timer};
use rand::{SeedableRng, rngs::SmallRng};
use tokio::{
    net::UdpSocket,
    sync::{broadcast, mpsc, oneshot},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{
    actor_ref::ActorRef,
    bincode_format,
    node::Node,
    path::ActorPath,
    remote::RemoteEvent,
    router::{Router, RouterBuilder},
    serialization::{RemoteMessage, manifest_id},
    system::ActorSystem,
};
pub use config::ClusterConfig;
pub use downing::{DEFAULT_ACQUIRE_DELAY_FOR_MINORITY, DowningStrategy, FileLease, Lease};
use suspicion::Swim;
use wire::{Codec, Id, KIND_LEAVE, KIND_SWIM, WireError};

pub use crate::config::DEFAULT_MAX_MEMBERS;

/// A member's state, as this node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemberState {
    /// This node, before any other member answered it.
    Joining,
    /// Alive: it answers probes.
    Up,
    /// Unreachable: it missed probes, or remoting lost its link and its
    /// address refuses connections. It is up again when it refutes the
    /// suspicion; the [`DowningStrategy`] decides, once the view has been
    /// stable for [`ClusterConfig::set_stable_after`], whether it is down (or
    /// this node is). Akka calls this unreachable.
    Suspect,
    /// Judged dead: by the downing strategy (for this node itself: its
    /// side lost), or by remoting quarantining its incarnation (it
    /// restarted or shut down). Its incarnation never comes back.
    Down,
    /// This node, after [`Cluster::leave`].
    Leaving,
    /// It left gracefully ([`Cluster::leave`]).
    Left,
    /// Forgotten: down or left for longer than
    /// [`ClusterConfig::set_remove_down_after`]. The last event about it.
    Removed,
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Joining => "joining",
            Self::Up => "up",
            Self::Suspect => "suspect",
            Self::Down => "down",
            Self::Leaving => "leaving",
            Self::Left => "left",
            Self::Removed => "removed",
        })
    }
}

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its node address, as in actor paths (`name@host:port`).
    pub node: String,
    /// The uid of its incarnation (a restarted node has a new one).
    pub uid: u64,
    /// Where its membership packets go.
    pub udp: SocketAddr,
    /// Its state.
    pub state: MemberState,
    /// When its membership started, in milliseconds since the Unix epoch
    /// on its own clock (unique per node and growing even when a system
    /// leaves and joins again within a millisecond). The lower, the
    /// older: the age [`DowningStrategy::KeepOldest`] and a cluster
    /// singleton's placement compare, ties broken by `node`.
    pub started_ms: u64,
}

/// A change of one member's state, in the order this node saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// The member, in its new state.
    pub member: Member,
    /// Its state before; `None` for a member this node did not know.
    pub from: Option<MemberState>,
}

/// A group's entries changed (an actor joined or left it, or a member
/// with entries in it went away); [`Cluster::group`] lists it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    /// The group's name.
    pub group: String,
}

/// Membership counters of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Packets sent, and their bytes (with headers).
    pub packets_out: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Packets received that were authenticated and handled.
    pub packets_in: u64,
    /// Bytes received (every packet, refused or not).
    pub bytes_in: u64,
    /// Packets refused: not a membership packet, undecodable, or a
    /// notice about an identity this node does not hold (a replayed leave,
    /// say).
    pub malformed: u64,
    /// Packets refused: the tag did not verify (no secret, wrong secret,
    /// or altered).
    pub unauthenticated: u64,
    /// Packets refused because they named a member past
    /// [`ClusterConfig::set_max_members`].
    pub full: u64,
}

/// Why a node could not join.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The system has no remoting (`ActorSystem::local`).
    #[error("the actor system has no remoting")]
    NoRemoting,
    /// The node has no shared secret: membership packets could not be
    /// authenticated.
    #[error("membership needs a shared secret (SystemConfig transport shared secret or cookie)")]
    NoSecret,
    /// Membership is bound to a wildcard address and there is no address
    /// to advertise: remoting's advertised host is a wildcard too, or
    /// does not resolve. Set [`ClusterConfig::set_udp_advertise`] (or give
    /// remoting an advertised address).
    #[error(
        "membership is bound to the wildcard address {0} and has no address to advertise to peers: \
         set ClusterConfig::set_udp_advertise (or an advertised address for remoting)"
    )]
    Wildcard(SocketAddr),
    /// No seed answered within the time [`Cluster::joined`] was given:
    /// the seeds are down or unreachable, or they do not share this
    /// node's secret (their refusals are logged on their side with this
    /// node's address).
    #[error(
        "no seed answered within {waited:?} (seeds {seeds:?}): are they up, reachable over UDP, \
         and do they share this node's secret?"
    )]
    NoSeedAnswered {
        /// The seeds this node contacts.
        seeds: Vec<String>,
        /// How long it waited.
        waited: Duration,
    },
    /// An argument a setting's rules refuse (a seed given to
    /// [`Cluster::rejoin`] that is not `host:port`, as
    /// [`ClusterConfig::set_seeds`] refuses it).
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// A seed address does not resolve.
    #[error("seed {0:?} does not resolve: {1}")]
    Seed(String, std::io::Error),
    /// The UDP socket could not be bound.
    #[error("cannot bind membership socket {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// This node already left, or its system shut down.
    #[error("membership has stopped")]
    Stopped,
    /// Only this node's own actors can join its groups.
    #[error("only a local actor can join a group: {0}")]
    NotLocal(String),
    /// This node's entries of one group must fit one membership packet.
    #[error(
        "group {group:?}: this node's entries no longer fit one packet ({size} bytes, at most {limit})"
    )]
    GroupTooLarge {
        /// The group.
        group: String,
        /// Its entries' encoded size.
        size: usize,
        /// The most that fits.
        limit: usize,
    },
}

/// A node's membership: its view of the cluster and its subscription.
/// Cheap to clone; membership runs until [`leave`](Self::leave), the
/// system's shutdown, or the last clone is dropped.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.shared.me.node)
            .field("udp", &self.shared.me.udp)
            .finish_non_exhaustive()
    }
}

struct Shared {
    me: Id,
    node: Arc<Node>,
    groups: Arc<Mutex<groups::Table>>,
    group_events: broadcast::Sender<GroupEvent>,
    view: Mutex<View>,
    events: broadcast::Sender<ClusterEvent>,
    stats: Stats,
    /// The seed names in force (`ClusterConfig::set_seeds`, `Cluster::rejoin`).
    seed_names: Arc<Mutex<Vec<String>>>,
    /// Whether any seed but this node is known: a node without one is the
    /// first of its cluster, joined at once.
    seeds_configured: bool,
    /// `ClusterConfig::set_stable_after`, for what waits on the downing
    /// strategy (a singleton's handover margin).
    stable_after: Duration,
    /// How long a new member takes to hear of the members: a probe
    /// period (gossip rides on probes) plus an announce interval (the
    /// seeds' answers), at most `stable_after`.
    settle: Duration,
    /// Called, in order, the moment this node downs itself, before anyone
    /// hears of it (`Cluster::on_self_down`).
    fences: Mutex<Vec<Fence>>,
}

/// What must stop the moment this node is down (a sharding region's
/// entities, a singleton's instance): it runs on the cluster's task, so
/// it only flags and queues stops, and never waits.
pub(crate) type Fence = Box<dyn Fn() + Send + Sync>;

/// The member table as subscribers see it, and this node's own state.
struct View {
    members: BTreeMap<String, Member>,
    me: MemberState,
}

#[derive(Default)]
struct Stats {
    packets_out: AtomicU64,
    bytes_out: AtomicU64,
    packets_in: AtomicU64,
    bytes_in: AtomicU64,
    malformed: AtomicU64,
    full: AtomicU64,
    unauthenticated: AtomicU64,
}

enum Cmd {
    Leave(oneshot::Sender<()>),
    /// A new seed list (`Cluster::rejoin`).
    Rejoin(Vec<String>),
    /// `entry` (a serialized ref) joins (`true`) or leaves `group`.
    Group {
        group: String,
        entry: String,
        join: bool,
        done: Option<oneshot::Sender<Result<(), ClusterError>>>,
    },
}

impl Shared {
    /// [`Cluster::group`]: the entries of this node and of the members
    /// that are up, each at the incarnation this node holds up.
    fn group<M: RemoteMessage>(&self, group: &str) -> Vec<ActorRef<M>> {
        let suffix = format!("#{:08x}", manifest_id(M::MANIFEST));
        let entries = lock(&self.groups).refs(group);
        let view = lock(&self.view);
        let live = |node: &str, uid: u64| {
            (node == self.me.node && uid == self.me.uid)
                || view
                    .members
                    .get(node)
                    .is_some_and(|m| m.uid == uid && m.state == MemberState::Up)
        };
        let entries: Vec<(u64, String)> = entries
            .into_iter()
            .filter(|(uid, e)| {
                ActorPath::parse(e.rsplit_once('#').map_or(e.as_str(), |(p, _)| p))
                    .is_ok_and(|p| live(p.node(), *uid))
            })
            .collect();
        drop(view);
        entries
            .iter()
            .filter_map(|(uid, e)| Some((*uid, e.strip_suffix(&suffix)?)))
            .filter_map(|(uid, p)| Some((uid, ActorPath::parse(p).ok()?)))
            .filter_map(|(uid, p)| ActorRef::for_path_at(&self.node, p, uid).ok())
            .collect()
    }
}

impl<M: RemoteMessage> RouterBuilder<M> {
    /// A group router whose routees follow cluster group `group` (the
    /// refs that take `M`): it starts with the group's refs, adds those
    /// that join, and removes those that leave, stop, or whose member
    /// goes down or leaves the cluster, as `cluster` learns of it
    /// ([`Cluster::subscribe_groups`] and [`Cluster::subscribe`]). A
    /// routee names its member's incarnation: when a member restarts, the
    /// old incarnation's routees are replaced by the new one's as soon as
    /// the new one's entries arrive. A background task follows the group
    /// until the router stops; it does not keep membership running (when
    /// membership stops, the routees stay as they were). Routees added or
    /// removed by hand are put back in line with the group at its next
    /// change.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn cluster_group(self, system: &ActorSystem, cluster: &Cluster, group: &str) -> Router<M> {
        // Subscribed before the first listing: no change falls between.
        let mut events = cluster.shared.group_events.subscribe();
        let mut members = cluster.shared.events.subscribe();
        let shared = Arc::downgrade(&cluster.shared);
        let router = self.group(system, cluster.shared.group::<M>(group));
        let stopped = router.actor_ref().watch();
        let follower = router.clone();
        let group = group.to_owned();
        tokio::spawn(async move {
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    ev = events.recv() => match ev {
                        Ok(e) if e.group != group => continue,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    // A member's change (a restart, say) re-syncs too.
                    ev = members.recv() => match ev {
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let want = shared.group::<M>(&group);
                drop(shared);
                if follow(&follower, want).await.is_err() {
                    // The router stopped.
                    return;
                }
            }
        });
        router
    }
}

/// Makes `router`'s routees `want`: removes those not wanted, then adds
/// the missing. A routee is the same only at the same path *and*
/// incarnation: a restarted member's ref replaces the old one (removed
/// first, since the router keeps one routee per path).
async fn follow<M: RemoteMessage>(
    router: &Router<M>,
    want: Vec<ActorRef<M>>,
) -> Result<(), crate::error::AskError> {
    let same = |a: &ActorRef<M>, b: &ActorRef<M>| {
        a.path() == b.path() && a.incarnation() == b.incarnation()
    };
    let have = router.routees();
    for h in &have {
        if !want.iter().any(|r| same(r, h)) {
            router.remove_routee(h.path()).await?;
        }
    }
    let have = router.routees();
    for r in &want {
        if !have.iter().any(|h| same(h, r)) {
            router.add_routee(r.clone()).await?;
        }
    }
    Ok(())
}

/// The address peers send this node's membership packets to: the
/// configured one (port 0: the bound port), else the bound address, else,
/// when that is a wildcard, remoting's advertised host (`name@host:port`)
/// with the bound port.
async fn advertise(
    configured: Option<SocketAddr>,
    bound: SocketAddr,
    node: &str,
) -> Result<SocketAddr, ClusterError> {
    let with_port = |mut a: SocketAddr| {
        if a.port() == 0 {
            a.set_port(bound.port());
        }
        a
    };
    if let Some(a) = configured {
        return match with_port(a) {
            a if a.ip().is_unspecified() => Err(ClusterError::Wildcard(a)),
            a => Ok(a),
        };
    }
    if !bound.ip().is_unspecified() {
        return Ok(bound);
    }
    let host = node
        .rsplit_once('@')
        .map_or(node, |(_, hp)| hp)
        .rsplit_once(':')
        .map_or(node, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let found = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => Some(SocketAddr::new(ip, bound.port())),
        Err(_) => tokio::net::lookup_host((host, bound.port()))
            .await
            .ok()
            .and_then(|mut a| a.next()),
    };
    found
        .filter(|a| !a.ip().is_unspecified())
        .ok_or(ClusterError::Wildcard(bound))
}

/// How many departed members' addresses a node remembers to contact when
/// it finds itself alone ([`Task::last_known`]): a few dozen packets a
/// second at most, about 30 bytes each of memory.
const LAST_KNOWN: usize = 32;
/// How long a node with seeds may be alone before it warns.
const ALONE_WARNING_AFTER: Duration = Duration::from_secs(10);
/// How often it warns again while still alone.
const ALONE_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Resolves the seed names whenever the membership task asks, at most once
/// per `every` (a seed that is an IP address costs no lookup), and sends
/// the addresses back. Ends with the task.
async fn resolve_seeds(
    names: Arc<Mutex<Vec<String>>>,
    mut asks: mpsc::Receiver<()>,
    out: mpsc::Sender<Vec<SocketAddr>>,
    every: Duration,
) {
    let mut last: Option<Instant> = None;
    while asks.recv().await.is_some() {
        if let Some(t) = last {
            tokio::time::sleep_until(t + every).await;
        }
        last = Some(Instant::now());
        let names = lock(&names).clone();
        let mut addrs = Vec::new();
        for n in &names {
            if let Ok(a) = n.parse::<SocketAddr>() {
                addrs.push(a);
                continue;
            }
            match tokio::net::lookup_host(n.as_str()).await {
                Ok(found) => addrs.extend(found),
                Err(e) => {
                    tracing::debug!(seed = %transport::PeerText(n), error = %e, "seed does not resolve");
                }
            }
        }
        if out.send(addrs).await.is_err() {
            return;
        }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
            last_known: std::collections::VecDeque::new(),
            started: Instant::now(),
            next_alone_warning: Instant::now() + ALONE_WARNING_AFTER,
            bound,
            timers: BinaryHeap::new(),
            seq: 0,
            shared: shared.clone(),
            remoting: Arc::downgrade(&remoting),
            left: HashSet::new(),
            known: BTreeMap::new(),
            packet: BytesMut::new(),
            max_packet: config.max_packet_size,
            own: BTreeMap::new(),
            version: 0,
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
        let s = &self.shared.stats;
        ClusterStats {
            packets_out: s.packets_out.load(Ordering::Relaxed),
            bytes_out: s.bytes_out.load(Ordering::Relaxed),
            packets_in: s.packets_in.load(Ordering::Relaxed),
            bytes_in: s.bytes_in.load(Ordering::Relaxed),
            malformed: s.malformed.load(Ordering::Relaxed),
            full: s.full.load(Ordering::Relaxed),
            unauthenticated: s.unauthenticated.load(Ordering::Relaxed),
        }
    }

    /// Puts local actor `actor` in group `group`, for every member to
    /// find ([`group`](Self::group)). It leaves the group when it stops,
    /// or with [`leave_group`](Self::leave_group). A member's entries of
    /// one group travel in one membership packet, so a node holds about a
    /// dozen actors per group (more with
    /// [`ClusterConfig::set_max_packet_size`]).
    ///
    /// # Errors
    /// [`ClusterError::NotLocal`], [`ClusterError::GroupTooLarge`],
    /// [`ClusterError::Stopped`].
    pub async fn join_group<M: RemoteMessage>(
        &self,
        group: &str,
        actor: &ActorRef<M>,
    ) -> Result<(), ClusterError> {
        let entry = self.entry(actor)?;
        self.change_group(group, entry.clone(), true).await?;
        // Leaves when the actor stops; does not keep membership running.
        let cmds = self.cmds.downgrade();
        let watch = actor.watch();
        let group = group.to_owned();
        tokio::spawn(async move {
            watch.await;
            if let Some(cmds) = cmds.upgrade() {
                let _ = cmds.send(Cmd::Group {
                    group,
                    entry,
                    join: false,
                    done: None,
                });
            }
        });
        Ok(())
    }

    /// Takes local actor `actor` out of group `group`.
    ///
    /// # Errors
    /// [`ClusterError::NotLocal`], [`ClusterError::Stopped`].
    pub async fn leave_group<M: RemoteMessage>(
        &self,
        group: &str,
        actor: &ActorRef<M>,
    ) -> Result<(), ClusterError> {
        let entry = self.entry(actor)?;
        self.change_group(group, entry, false).await
    }

    /// Asks the membership task to add (`join`) or remove `entry` in
    /// `group`, and waits for its answer.
    async fn change_group(
        &self,
        group: &str,
        entry: String,
        join: bool,
    ) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Group {
                group: group.to_owned(),
                entry,
                join,
                done: Some(tx),
            })
            .map_err(|_| ClusterError::Stopped)?;
        rx.await.map_err(|_| ClusterError::Stopped)?
    }

    /// A ref's group entry: its path and the type it takes, as a ref
    /// inside a message is (serializing it also makes a local actor
    /// reachable by path).
    fn entry<M: RemoteMessage>(&self, actor: &ActorRef<M>) -> Result<String, ClusterError> {
        if !actor.is_local() || actor.path().node() != self.shared.me.node {
            return Err(ClusterError::NotLocal(actor.path().to_string()));
        }
        let mut buf = BytesMut::new();
        bincode_format::to_buf(actor, &mut buf, usize::MAX)
            .and_then(|()| bincode_format::from_slice::<String>(&buf).map(|(s, _)| s))
            .map_err(|e| ClusterError::NotLocal(e.to_string()))
    }

    /// The refs in group `group`, over every member this node sees (and
    /// this one), that take `M`; entries of another type are skipped.
    pub fn group<M: RemoteMessage>(&self, group: &str) -> Vec<ActorRef<M>> {
        self.shared.group(group)
    }

    /// The groups with entries anywhere in the cluster.
    pub fn groups(&self) -> Vec<String> {
        lock(&self.shared.groups).groups()
    }

    /// Group changes from now on (which group; [`group`](Self::group)
    /// lists it). Lags like [`subscribe`](Self::subscribe).
    pub fn subscribe_groups(&self) -> broadcast::Receiver<GroupEvent> {
        self.shared.group_events.subscribe()
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

/// A foca timer, due at `at`; the heap pops the earliest first.
struct Due {
    at: Instant,
    seq: u64,
    timer: Timer<Id>,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The membership task's state.
struct Task {
    foca: Swim,
    rt: AccumulatingRuntime<Id>,
    socket: UdpSocket,
    keys: Vec<[u8; 32]>,
    /// The seeds' addresses, as last resolved (without this node's).
    seeds: Vec<SocketAddr>,
    /// The seed names, shared with the resolver task.
    seed_names: Arc<Mutex<Vec<String>>>,
    /// Asks the resolver task for a fresh resolution (it paces itself).
    resolve: mpsc::Sender<()>,
    /// Membership addresses of the last members that went away, newest
    /// last (at most [`LAST_KNOWN`]): contacted while this node knows no
    /// live member, so a node whose cluster restarted around it, or that
    /// was cut off, finds it again without its seeds.
    last_known: std::collections::VecDeque<SocketAddr>,
    /// When membership started.
    started: Instant,
    /// When a node still alone next warns that no seed answered.
    next_alone_warning: Instant,
    /// The socket's bound address (this node's own, besides `me.udp`).
    bound: SocketAddr,
    timers: BinaryHeap<Due>,
    seq: u64,
    shared: Arc<Shared>,
    remoting: std::sync::Weak<crate::remote::Remoting>,
    /// Incarnations that told us they leave (bounded by the members that
    /// can authenticate; cleared when they are forgotten).
    left: HashSet<(String, u64)>,
    /// The last state handed to subscribers, per node: the view's shadow
    /// with the full identity.
    known: BTreeMap<String, (Id, MemberState)>,
    packet: BytesMut,
    max_packet: usize,
    /// This node's entries, by group.
    own: BTreeMap<String, Vec<String>>,
    /// The version of this node's latest group broadcast.
    version: u64,
    /// The member bound foca's codec checks, resynced with foca's table.
    admission: Arc<wire::Admission>,
    /// Members held suspect, to tell them when they talk to us.
    suspects: suspicion::Suspects,
    /// Metric handles, if a recorder was installed at join.
    meters: Option<crate::telemetry::ClusterMeters>,
    /// The split-brain resolver, fed the view when it changes.
    resolver: downing::Resolver,
    /// The membership view changed since the resolver last saw it.
    view_changed: bool,
    /// A lease's answer (`DowningStrategy::LeaseMajority`).
    lease: (mpsc::Sender<bool>, mpsc::Receiver<bool>),
    /// The downing strategy put this node on the losing side: the task
    /// ends.
    downed: bool,
    /// When the task last carried out what foca asked for.
    last_beat: Instant,
    /// When it last ran again after standing still for `stable_after` or
    /// more (the process was paused): long enough for the others to have
    /// downed it.
    woke_at: Option<Instant>,
    shutdown_when_downed: bool,
    /// The system, to shut down when downed.
    system: std::sync::Weak<crate::system::SystemInner>,
}

impl Task {
    async fn run(
        mut self,
        announce_every: Duration,
        publish_every: Duration,
        mut resolved: mpsc::Receiver<Vec<SocketAddr>>,
        mut cmds: mpsc::UnboundedReceiver<Cmd>,
        mut remote: broadcast::Receiver<RemoteEvent>,
        cancel: CancellationToken,
    ) {
        let mut buf = vec![0u8; 65_536];
        let mut announce = tokio::time::interval(announce_every);
        announce.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Metrics go out once per probe period, not per packet.
        let mut publish = tokio::time::interval(publish_every);
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = self.timers.peek().map(|d| d.at);
            let decide_at = self.resolver.next_deadline().map(Instant::from_std);
            tokio::select! {
                () = sleep_until(decide_at), if decide_at.is_some() => {}
                Some(held) = self.lease.1.recv() => {
                    if let Some(d) = self.resolver.lease_result(held) {
                        self.act(d);
                    }
                }
                r = self.socket.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        self.on_packet(&buf[..n], from);
                    }
                }
                Some(addrs) = resolved.recv() => self.set_seeds(addrs),
                () = sleep_until(next), if next.is_some() => self.on_timers(),
                _ = announce.tick() => self.announce(),
                _ = publish.tick(), if self.meters.is_some() => self.publish_metrics(),
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Leave(done)) => {
                        self.leave();
                        // The socket is closed when `leave` returns.
                        drop(self);
                        let _ = done.send(());
                        return;
                    }
                    Some(Cmd::Rejoin(names)) => {
                        self.rejoin(names);
                    }
                    Some(Cmd::Group { group, entry, join, done }) => {
                        let r = self.group(group, entry, join);
                        if let Some(done) = done {
                            let _ = done.send(r);
                        }
                    }
                    // Every handle dropped.
                    None => return,
                },
                ev = remote.recv() => match ev {
                    Ok(RemoteEvent::Quarantined { node, uid, .. }) => self.quarantined(&node, uid),
                    Ok(RemoteEvent::Unreachable { node, uid }) => self.unreachable(&node, uid),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = cancel.cancelled() => return,
            }
            self.drain();
            if self.resolve() {
                self.drain();
            }
            if self.downed {
                return;
            }
        }
    }

    /// Shows the resolver the view if it changed, and carries out its
    /// decision if one is due; whether it acted.
    fn resolve(&mut self) -> bool {
        let now = std::time::Instant::now();
        if std::mem::take(&mut self.view_changed) {
            let me = &self.shared.me;
            let mut view = vec![downing::MemberInfo {
                node: me.node.clone(),
                started_ms: me.started_ms,
                reachable: true,
            }];
            view.extend(self.foca.iter_membership_state().filter_map(|m| {
                let id = m.id();
                let reachable = match m.state() {
                    _ if id.is_seed() => return None,
                    foca::State::Alive => true,
                    foca::State::Suspect => false,
                    foca::State::Down => return None,
                };
                Some(downing::MemberInfo {
                    node: id.node.clone(),
                    started_ms: id.started_ms,
                    reachable,
                })
            }));
            self.resolver.on_view(now, &view);
        }
        match self.resolver.poll(now) {
            Some(d) => {
                self.act(d);
                true
            }
            None => false,
        }
    }

    /// Carries out a downing decision.
    fn act(&mut self, decision: downing::Decision) {
        use downing::Decision;
        let strategy = self.resolver.strategy_name();
        match decision {
            Decision::DownUnreachable(nodes) => {
                tracing::info!(
                    strategy,
                    ?nodes,
                    "downing strategy: this side stays; downing the unreachable members"
                );
                let ids: Vec<Id> = self
                    .foca
                    .iter_membership_state()
                    .filter(|m| m.state() != foca::State::Down && nodes.contains(&m.id().node))
                    .map(|m| m.id().clone())
                    .collect();
                let _ = self.foca.apply_many(
                    ids.into_iter()
                        .map(|id| foca::Member::new(id, 0, foca::State::Down)),
                    true,
                    &mut self.rt,
                );
            }
            Decision::DownSelf => self.down_self(strategy, "this side lost"),
            Decision::DownAll(cause) => self.down_self(strategy, cause.label()),
            Decision::TryLease => {
                let Some(lease) = self.resolver.lease().cloned() else {
                    return;
                };
                let me = self.resolver.me().to_owned();
                let answer = self.lease.0.clone();
                tokio::task::spawn_blocking(move || {
                    let held = lease.try_acquire(&me);
                    let _ = answer.try_send(held);
                });
            }
        }
    }

    /// The downing strategy put this node on the losing side: it is down,
    /// its membership stops, and (by default) its system shuts down.
    fn down_self(&mut self, strategy: &str, why: &str) {
        for fence in lock(&self.shared.fences).iter() {
            fence();
        }
        let unreachable: Vec<String> = self
            .foca
            .iter_membership_state()
            .filter(|m| m.state() == foca::State::Suspect)
            .map(|m| m.id().node.clone())
            .collect();
        tracing::warn!(
            strategy,
            reason = why,
            ?unreachable,
            shutdown = self.shutdown_when_downed,
            "downing strategy: this node downs itself"
        );
        let me = &self.shared.me;
        let from = {
            let mut view = lock(&self.shared.view);
            std::mem::replace(&mut view.me, MemberState::Down)
        };
        let _ = self.shared.events.send(ClusterEvent {
            member: Member {
                node: me.node.clone(),
                uid: me.uid,
                udp: me.udp,
                state: MemberState::Down,
                started_ms: me.started_ms,
            },
            from: Some(from),
        });
        self.downed = true;
        if self.shutdown_when_downed
            && let Some(inner) = self.system.upgrade()
        {
            let system = ActorSystem { inner };
            tokio::spawn(async move { system.shutdown().await });
        }
    }

    fn on_packet(&mut self, packet: &[u8], from: SocketAddr) {
        let shared = self.shared.clone();
        let stats = &shared.stats;
        stats
            .bytes_in
            .fetch_add(packet.len() as u64, Ordering::Relaxed);
        let (kind, payload) = match wire::open(&self.keys, packet) {
            Ok(p) => p,
            Err(e) => return self.refused(&e, from),
        };
        let result = match kind {
            KIND_LEAVE => wire::decode_leave(payload).and_then(|id| self.on_leave(id)),
            _ => suspicion::handle(
                &mut self.foca,
                &mut self.rt,
                &mut self.suspects,
                &shared.me,
                kind,
                payload,
            )
            .map(|reply| {
                if let Some((to, kind, notice)) = reply {
                    self.send(to, kind, &notice);
                }
            }),
        };
        match result {
            Ok(()) => {
                stats.packets_in.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.refused(&e, from),
        }
    }

    /// Counts a refused packet and logs it, sampled, with the sender's
    /// address (where a wrong secret is looked for).
    #[cold]
    fn refused(&self, e: &WireError, from: SocketAddr) {
        let stats = &self.shared.stats;
        let n = match e {
            WireError::Unauthenticated => stats.unauthenticated.fetch_add(1, Ordering::Relaxed),
            WireError::Full(_) => stats.full.fetch_add(1, Ordering::Relaxed),
            _ => stats.malformed.fetch_add(1, Ordering::Relaxed),
        } + 1;
        // Sampled: a flood of bad packets logs a few lines.
        static REFUSED: transport::LogLimit = transport::LogLimit::new();
        if let Some(s) = REFUSED.sample() {
            let hint = if matches!(e, WireError::Unauthenticated) {
                "the sender does not share this node's secret (or the packet was altered)"
            } else {
                "not a membership packet of this version"
            };
            tracing::warn!(%from, error = %e, refused = n, suppressed = s.suppressed, hint, "membership packet refused");
        }
    }

    /// A member leaves. Its notice names one membership of it: a notice
    /// of an identity this node does not hold (an earlier membership of a
    /// node that joined again, replayed or late, or a member already
    /// forgotten) is refused.
    fn on_leave(&mut self, id: Id) -> Result<(), WireError> {
        if id == self.shared.me || id.is_seed() {
            return Err(WireError::Decode(format!(
                "a leave notice for {id:?}, which is not a member"
            )));
        }
        let known = self.foca.iter_membership_state().any(|m| m.id() == &id);
        if !known {
            return Err(WireError::Decode(format!(
                "a leave notice for {id:?}, an identity this node does not hold"
            )));
        }
        self.left.insert((id.node.clone(), id.uid));
        let _ = self.foca.apply_many(
            std::iter::once(foca::Member::new(id, 0, foca::State::Down)),
            true,
            &mut self.rt,
        );
        Ok(())
    }

    /// Remoting quarantined an incarnation: it is down here too.
    fn quarantined(&mut self, node: &str, uid: u64) {
        let id = self
            .foca
            .iter_membership_state()
            .find(|m| m.id().node == node && m.id().uid == uid && m.state() != foca::State::Down)
            .map(|m| m.id().clone());
        if let Some(id) = id {
            let _ = self.foca.apply_many(
                std::iter::once(foca::Member::new(id, 0, foca::State::Down)),
                true,
                &mut self.rt,
            );
        }
    }

    fn on_timers(&mut self) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = self.timers.pop() {
                let _ = suspicion::handle_timer(&mut self.foca, &mut self.rt, d.timer);
            }
        }
    }

    /// Changes this node's entries of `group` and disseminates them.
    fn group(&mut self, group: String, entry: String, join: bool) -> Result<(), ClusterError> {
        let mut refs = self.own.get(&group).cloned().unwrap_or_default();
        let had = refs.iter().position(|e| *e == entry);
        match (join, had) {
            (true, None) => refs.push(entry),
            (false, Some(i)) => {
                refs.remove(i);
            }
            _ => return Ok(()),
        }
        // Fits a packet with room for a header and a few updates.
        let limit = self.max_packet.saturating_sub(wire::HEADER_LEN + 400);
        let size = self.item(&group, &refs).encode().len();
        if size > limit {
            return Err(ClusterError::GroupTooLarge { group, size, limit });
        }
        if refs.is_empty() {
            self.own.remove(&group);
        } else {
            self.own.insert(group.clone(), refs.clone());
        }
        self.disseminate(&group, &refs);
        Ok(())
    }

    fn item(&self, group: &str, refs: &[String]) -> groups::Item {
        groups::Item {
            node: self.shared.me.node.clone(),
            uid: self.shared.me.uid,
            group: group.to_owned(),
            version: self.version + 1,
            refs: refs.to_vec(),
        }
    }

    fn disseminate(&mut self, group: &str, refs: &[String]) {
        let item = self.item(group, refs);
        self.version += 1;
        let _ = self.foca.add_broadcast(&item.encode());
    }

    /// Disseminates all of this node's groups again (a member came up:
    /// it learns them; gossip that was lost is made good).
    fn rebroadcast(&mut self) {
        let own: Vec<(String, Vec<String>)> = self
            .own
            .iter()
            .map(|(g, r)| (g.clone(), r.clone()))
            .collect();
        for (g, refs) in own {
            self.disseminate(&g, &refs);
        }
    }

    /// Contacts every seed that is not a live member, and, while this node
    /// knows no live member, the members it knew last: a restarted seed
    /// is found by the others (it knows nobody), and two islands that
    /// share a seed merge. An announce to a live member would only cost a
    /// packet; one to an address where nothing runs is lost.
    fn announce(&mut self) {
        let live: HashSet<SocketAddr> = self.foca.iter_members().map(|m| m.id().udp).collect();
        let alone = live.is_empty();
        let mut targets: Vec<SocketAddr> = self
            .seeds
            .iter()
            .copied()
            .filter(|s| !live.contains(s))
            .collect();
        let missing_seed = !targets.is_empty() || self.seeds.len() < lock(&self.seed_names).len();
        if alone {
            for a in &self.last_known {
                if !targets.contains(a) {
                    targets.push(*a);
                }
            }
        }
        if missing_seed {
            // Paced by the resolver; a full channel means one is pending.
            let _ = self.resolve.try_send(());
        }
        for t in targets {
            tracing::trace!(to = %t, "announcing to a seed or last-known member");
            let _ = self.foca.announce(Id::seed(t), &mut self.rt);
        }
        let now = Instant::now();
        if alone && !self.seeds.is_empty() && now >= self.next_alone_warning {
            tracing::warn!(
                seeds = ?self.seeds,
                waited = ?now.duration_since(self.started),
                "no seed has answered: are they up and reachable over UDP, and do they share this node's secret?"
            );
            // Every minute at most once the first warning is out.
            self.next_alone_warning = now + ALONE_WARNING_EVERY;
        }
    }

    /// The resolver's latest addresses for the seed names.
    fn set_seeds(&mut self, mut addrs: Vec<SocketAddr>) {
        addrs.retain(|a| *a != self.shared.me.udp && *a != self.bound);
        addrs.sort();
        addrs.dedup();
        if addrs != self.seeds {
            tracing::debug!(seeds = ?addrs, "seed addresses resolved");
        }
        self.seeds = addrs;
    }

    /// `Cluster::rejoin`: new seed names, contacted at once where they are
    /// addresses, and resolved in the background otherwise.
    fn rejoin(&mut self, names: Vec<String>) {
        let literal: Vec<SocketAddr> = names.iter().filter_map(|n| n.parse().ok()).collect();
        *lock(&self.seed_names) = names;
        self.set_seeds(literal);
        let _ = self.resolve.try_send(());
        self.next_alone_warning = Instant::now() + ALONE_WARNING_AFTER;
        self.announce();
    }

    /// Remembers a member's address that went away (bounded).
    fn remember(&mut self, udp: SocketAddr) {
        self.last_known.retain(|a| *a != udp);
        if self.last_known.len() == LAST_KNOWN {
            self.last_known.pop_front();
        }
        self.last_known.push_back(udp);
    }

    /// Remoting judged incarnation `uid` of `node` unreachable (its link
    /// was lost and its address refuses connections, or its heartbeats
    /// stopped): membership suspects it at once instead of a probe round
    /// later, and gossips the suspicion. A live member refutes it as any
    /// suspicion; only the downing strategy turns it into down.
    fn unreachable(&mut self, node: &str, uid: u64) {
        let found = self
            .foca
            .iter_membership_state()
            .find(|m| {
                m.id().node == node
                    && (uid == 0 || m.id().uid == uid)
                    && m.state() == foca::State::Alive
            })
            .map(|m| (m.id().clone(), m.incarnation()));
        if let Some((id, incarnation)) = found {
            tracing::debug!(node = %transport::PeerText(&id.node), uid = id.uid, incarnation, "remoting judged the member unreachable: suspecting it");
            let _ = self.foca.apply_many(
                std::iter::once(foca::Member::new(id, incarnation, foca::State::Suspect)),
                true,
                &mut self.rt,
            );
        }
    }

    fn leave(&mut self) {
        // Subscribers on this node hear of its own leave too (a singleton
        // hosted here stops and hands over on it).
        self.set_own_state(MemberState::Leaving);
        let notice = wire::encode_leave(&self.shared.me);
        let targets: Vec<SocketAddr> = self.foca.iter_members().map(|m| m.id().udp).collect();
        for t in targets {
            self.send(t, KIND_LEAVE, &notice);
        }
        let _ = self.foca.leave_cluster(&mut self.rt);
        self.drain();
        self.set_own_state(MemberState::Left);
    }

    /// Sets this node's own state and tells subscribers.
    fn set_own_state(&mut self, state: MemberState) {
        let me = &self.shared.me;
        let from = std::mem::replace(&mut lock(&self.shared.view).me, state);
        if from == state {
            return;
        }
        let _ = self.shared.events.send(ClusterEvent {
            member: Member {
                node: me.node.clone(),
                uid: me.uid,
                udp: me.udp,
                state,
                started_ms: me.started_ms,
            },
            from: Some(from),
        });
    }

    fn send(&mut self, to: SocketAddr, kind: u8, payload: &[u8]) {
        wire::seal(&self.keys[0], kind, payload, &mut self.packet);
        if self.packet.len() > self.max_packet.max(payload.len() + wire::HEADER_LEN) {
            return;
        }
        // UDP: a full socket buffer drops the packet, as the network may.
        if self.socket.try_send_to(&self.packet, to).is_ok() {
            let s = &self.shared.stats;
            s.packets_out.fetch_add(1, Ordering::Relaxed);
            s.bytes_out
                .fetch_add(self.packet.len() as u64, Ordering::Relaxed);
        }
    }

    /// Carries out what foca asked for, then tells subscribers what
    /// changed.
    fn drain(&mut self) {
        // The task runs at least once a probe period: a longer gap means
        // the process stood still (SIGSTOP, a VM pause).
        let now = Instant::now();
        if now.saturating_duration_since(self.last_beat) >= self.shared.stable_after {
            self.woke_at = Some(now);
        }
        self.last_beat = now;
        while let Some((to, data)) = self.rt.to_send() {
            self.send(to.udp, KIND_SWIM, &data);
        }
        let now = Instant::now();
        while let Some((delay, timer)) = self.rt.to_schedule() {
            self.seq += 1;
            self.timers.push(Due {
                at: now + delay,
                seq: self.seq,
                timer,
            });
        }
        let mut told_down = false;
        while let Some(n) = self.rt.to_notify() {
            // Defunct but not leaving: its identity cannot be renewed, so
            // it neither probes nor answers probes again; a restart rejoins.
            if matches!(n, foca::OwnedNotification::Defunct)
                && lock(&self.shared.view).me != MemberState::Leaving
            {
                tracing::warn!(node = %transport::PeerText(&self.shared.me.node), "a member declared this node down: membership is defunct until restart");
                told_down = true;
            }
        }
        // Woken from a pause long enough for the others to down it, and
        // told so: they run its shards and singletons once their margin
        // is over, so it is down here too and what it hosts stops at
        // once, instead of running on beside them until its own strategy
        // decides (stable_after later). Only after such a pause: foca
        // also turns a running node undead when two members briefly hold
        // each other down while they converge, and such a node runs on
        // as before.
        let member = matches!(
            lock(&self.shared.view).me,
            MemberState::Joining | MemberState::Up | MemberState::Suspect
        );
        let woke = self
            .woke_at
            .is_some_and(|w| now.saturating_duration_since(w) < self.shared.stable_after);
        if told_down && woke && member && !self.downed {
            self.down_self("a member's", "a member declared this node down");
        }
        self.publish();
    }

    /// Compares foca's member table with what subscribers were told.
    fn publish(&mut self) {
        // Forgotten members free their room.
        self.admission.resync(
            self.shared.me.udp,
            self.foca.iter_membership_state().map(|m| m.id().udp),
        );
        self.suspects.resync(self.foca.iter_membership_state());
        let mut seen: HashSet<String> = HashSet::new();
        let mut changes: Vec<(Id, Option<MemberState>, MemberState)> = Vec::new();
        for m in self.foca.iter_membership_state() {
            let id = m.id();
            if id.is_seed() {
                continue;
            }
            let state = match m.state() {
                foca::State::Alive => MemberState::Up,
                foca::State::Suspect => MemberState::Suspect,
                foca::State::Down if self.left.contains(&(id.node.clone(), id.uid)) => {
                    MemberState::Left
                }
                foca::State::Down => MemberState::Down,
            };
            seen.insert(id.node.clone());
            match self.known.get(&id.node) {
                Some((old, s)) if old == id && *s == state => {}
                Some((old, s)) if old == id => changes.push((id.clone(), Some(*s), state)),
                Some((old, s)) => {
                    // A new incarnation of the node: the old one is gone.
                    let old = old.clone();
                    let from = *s;
                    if from != MemberState::Down && from != MemberState::Left {
                        changes.push((old.clone(), Some(from), MemberState::Down));
                    }
                    changes.push((old, Some(MemberState::Down), MemberState::Removed));
                    changes.push((id.clone(), None, state));
                }
                None => changes.push((id.clone(), None, state)),
            }
        }
        let gone: Vec<String> = self
            .known
            .keys()
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            if let Some((id, s)) = self.known.get(&n) {
                changes.push((id.clone(), Some(*s), MemberState::Removed));
            }
        }
        if changes.is_empty() {
            self.group_events();
            return;
        }
        self.view_changed = true;
        let remoting = self.remoting.upgrade();
        let mut rebroadcast = false;
        let shared = self.shared.clone();
        let mut view = lock(&shared.view);
        if view.me == MemberState::Joining && self.foca.num_members() > 0 {
            view.me = MemberState::Up;
        }
        for (id, from, state) in changes {
            let member = Member {
                node: id.node.clone(),
                uid: id.uid,
                udp: id.udp,
                state,
                started_ms: id.started_ms,
            };
            if state == MemberState::Removed {
                if self.known.get(&id.node).is_some_and(|(k, _)| *k == id) {
                    self.known.remove(&id.node);
                    view.members.remove(&id.node);
                }
                self.left.remove(&(id.node.clone(), id.uid));
            } else {
                self.known.insert(id.node.clone(), (id.clone(), state));
                view.members.insert(id.node.clone(), member.clone());
            }
            // A member that left is not quarantined: it is still
            // delivering what it had queued, and says goodbye on its
            // links when it shuts down.
            if state == MemberState::Down {
                self.remember(id.udp);
                if let Some(r) = &remoting {
                    r.quarantine_incarnation(&id.node, id.uid, "member down");
                }
            }
            if matches!(
                state,
                MemberState::Down | MemberState::Left | MemberState::Removed
            ) {
                lock(&self.shared.groups).drop_member(&id.node, id.uid);
            } else {
                lock(&self.shared.groups).touch_member(&id.node, id.uid);
            }
            if state == MemberState::Up && from.is_none() {
                rebroadcast = true;
            }
            tracing::info!(node = %transport::PeerText(&id.node), uid = id.uid, %state, "cluster member");
            let _ = self.shared.events.send(ClusterEvent { member, from });
        }
        drop(view);
        if rebroadcast {
            self.rebroadcast();
        }
        self.group_events();
    }

    /// Publishes the membership counters, the members by state and the
    /// group entries through the metric handles.
    fn publish_metrics(&mut self) {
        let Some(meters) = self.meters.as_mut() else {
            return;
        };
        let stats = &self.shared.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut members = [0usize; 4];
        for (_, state) in self.known.values() {
            let i = match state {
                MemberState::Up => 0,
                MemberState::Suspect => 1,
                MemberState::Down => 2,
                MemberState::Left => 3,
                _ => continue,
            };
            members[i] += 1;
        }
        meters.publish(&crate::telemetry::ClusterSample {
            packets_out: load(&stats.packets_out),
            bytes_out: load(&stats.bytes_out),
            packets_in: load(&stats.packets_in),
            bytes_in: load(&stats.bytes_in),
            refused: [
                load(&stats.malformed),
                load(&stats.unauthenticated),
                load(&stats.full),
            ],
            members,
            group_entries: lock(&self.shared.groups).len(),
        });
    }

    /// Tells group subscribers which groups changed.
    fn group_events(&mut self) {
        let mut changed = std::mem::take(&mut lock(&self.shared.groups).changed);
        if changed.is_empty() {
            return;
        }
        changed.sort();
        changed.dedup();
        for group in changed {
            let _ = self.shared.group_events.send(GroupEvent { group });
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    const KEY: [u8; 32] = [3; 32];

    fn id(name: &str, port: u16, uid: u64, started_ms: u64) -> Id {
        Id {
            node: format!("{name}@127.0.0.1:{port}"),
            uid,
            udp: SocketAddr::from(([127, 0, 0, 1], port)),
            started_ms,
        }
    }

    /// A membership task for `me`, driven by hand: nothing runs it.
    async fn task_for(me: Id) -> Task {
        let node = me.node.clone();
        let system = ActorSystem::local("t").expect("a valid name");
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("binds");
        let table = Arc::new(Mutex::new(groups::Table::default()));
        let shared = Arc::new(Shared {
            me: me.clone(),
            node: system.inner.node.clone(),
            groups: table.clone(),
            group_events: broadcast::channel(16).0,
            view: Mutex::new(View {
                members: BTreeMap::new(),
                me: MemberState::Joining,
            }),
            events: broadcast::channel(16).0,
            stats: Stats::default(),
            seed_names: Arc::default(),
            seeds_configured: false,
            stable_after: Duration::from_secs(10),
            settle: Duration::ZERO,
            fences: Mutex::new(Vec::new()),
        });
        let admission = Arc::new(wire::Admission::new(16, me.udp));
        Task {
            foca: Foca::with_custom_broadcast(
                me,
                ClusterConfig::new().foca(),
                SmallRng::seed_from_u64(1),
                Codec::bounded(admission.clone()),
                groups::Handler(table),
            ),
            rt: AccumulatingRuntime::new(),
            socket,
            keys: vec![KEY],
            seeds: Vec::new(),
            seed_names: Arc::default(),
            resolve: mpsc::channel(1).0,
            last_known: std::collections::VecDeque::new(),
            started: Instant::now(),
            next_alone_warning: Instant::now() + ALONE_WARNING_AFTER,
            bound: SocketAddr::from(([127, 0, 0, 1], 0)),
            timers: BinaryHeap::new(),
            seq: 0,
            shared,
            remoting: std::sync::Weak::new(),
            left: HashSet::new(),
            known: BTreeMap::new(),
            packet: BytesMut::new(),
            max_packet: 1400,
            own: BTreeMap::new(),
            version: 0,
            admission,
            suspects: suspicion::Suspects::default(),
            meters: None,
            resolver: downing::Resolver::new(
                DowningStrategy::KeepMajority,
                Duration::from_secs(10),
                None,
                node,
            ),
            view_changed: true,
            lease: mpsc::channel(1),
            downed: false,
            last_beat: Instant::now(),
            woke_at: None,
            shutdown_when_downed: false,
            system: std::sync::Weak::new(),
        }
    }

    fn state_of(task: &Task, node: &str) -> Option<(u64, MemberState)> {
        lock(&task.shared.view)
            .members
            .get(node)
            .map(|m| (m.uid, m.state))
    }

    #[tokio::test]
    async fn a_leave_notice_names_one_membership_and_a_replay_is_refused() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let b1 = id("b", 9002, 7, 10);
        // b's system leaves and joins again: the same node and uid, a
        // later start.
        let b2 = Id {
            started_ms: 11,
            ..b1.clone()
        };
        let leave = |id: &Id| {
            let mut p = BytesMut::new();
            wire::seal(&KEY, KIND_LEAVE, &wire::encode_leave(id), &mut p);
            p
        };
        let alive = |task: &mut Task, id: &Id| {
            task.foca
                .apply_many(
                    std::iter::once(foca::Member::alive(id.clone())),
                    true,
                    &mut task.rt,
                )
                .expect("applies");
            task.drain();
        };
        let refused = |task: &Task| task.shared.stats.malformed.load(Ordering::Relaxed);
        alive(&mut task, &b1);
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        task.on_packet(&leave(&b1), b1.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Left)));
        alive(&mut task, &b2);
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        // The first membership's notice again (replayed, or a late copy):
        // refused and counted; b stays up.
        task.on_packet(&leave(&b1), b1.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Up)));
        assert_eq!(refused(&task), 1);
        // The new membership's own notice is taken.
        task.on_packet(&leave(&b2), b2.udp);
        task.drain();
        assert_eq!(state_of(&task, &b1.node), Some((7, MemberState::Left)));
        assert_eq!(refused(&task), 1);
    }

    #[tokio::test]
    async fn a_node_told_it_is_down_warns_and_after_a_pause_is_down_but_not_when_it_leaves() {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                lock(&self.0).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let warned = |task: &mut Task, down: bool| {
            let out = Captured::default();
            let writer = out.clone();
            // At debug, like the other test that collects log lines: tests
            // run in parallel, and a scoped subscriber of a lower level
            // beside one of a higher level can hide the higher one's events
            // (tracing's global level hint).
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_max_level(tracing::Level::DEBUG)
                .with_ansi(false)
                .finish();
            let _one_at_a_time = suspicion::LOG_CAPTURE
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            tracing::subscriber::with_default(subscriber, || {
                let b = id("b", 9002, 7, 10);
                let _ = task.foca.apply_many(
                    std::iter::once(foca::Member::alive(b)),
                    false,
                    &mut task.rt,
                );
                if down {
                    // What a member's TurnUndead makes foca do.
                    let me = task.shared.me.clone();
                    let _ = task.foca.apply_many(
                        std::iter::once(foca::Member::new(me, 0, foca::State::Down)),
                        false,
                        &mut task.rt,
                    );
                    task.drain();
                } else {
                    task.leave();
                }
            });
            let text = String::from_utf8(lock(&out.0).clone()).expect("utf-8");
            text.contains("membership is defunct until restart")
        };
        let mut told = task_for(id("a", 9001, 1, 1)).await;
        assert!(warned(&mut told, true));
        assert!(!told.downed, "a node that ran throughout goes on");
        // Told so just after a pause longer than stable_after, it is down
        // in its own view: what it hosts stops, instead of running on
        // beside its successors until its own strategy downs it.
        let mut woken = task_for(id("a", 9001, 1, 1)).await;
        woken.last_beat = Instant::now() - woken.shared.stable_after;
        assert!(warned(&mut woken, true));
        assert!(woken.downed);
        assert_eq!(lock(&woken.shared.view).me, MemberState::Down);
        let mut leaving = task_for(id("a", 9001, 1, 1)).await;
        assert!(!warned(&mut leaving, false));
        assert!(!leaving.downed);
    }

    fn alive(task: &mut Task, id: &Id) {
        task.foca
            .apply_many(
                std::iter::once(foca::Member::alive(id.clone())),
                true,
                &mut task.rt,
            )
            .expect("applies");
        task.drain();
    }

    #[tokio::test]
    async fn remotings_unreachable_verdict_makes_the_member_suspect_at_once() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let b = id("b", 9002, 7, 10);
        alive(&mut task, &b);
        // A verdict about another incarnation changes nothing.
        task.unreachable(&b.node, 8);
        task.drain();
        assert_eq!(state_of(&task, &b.node), Some((7, MemberState::Up)));
        task.unreachable(&b.node, 7);
        task.drain();
        assert_eq!(state_of(&task, &b.node), Some((7, MemberState::Suspect)));
    }

    #[tokio::test]
    async fn seeds_that_are_not_live_members_are_contacted_and_when_alone_the_last_known() {
        let mut task = task_for(id("a", 9001, 1, 1)).await;
        let sent = |task: &mut Task| -> Vec<SocketAddr> {
            let mut to = Vec::new();
            while let Some((id, _)) = task.rt.to_send() {
                to.push(id.udp);
            }
            to.sort();
            to
        };
        let b = id("b", 9002, 7, 10);
        let c = id("c", 9003, 8, 10);
        task.seeds = vec![b.udp, c.udp];
        // Alone: every seed.
        task.announce();
        assert_eq!(sent(&mut task), [b.udp, c.udp]);
        // b is a live member: only c, the seed that is not.
        alive(&mut task, &b);
        let _ = sent(&mut task);
        task.announce();
        assert_eq!(sent(&mut task), [c.udp]);
        // b goes down: it is contacted again (its restart is found), and
        // remembered.
        task.foca
            .apply_many(
                std::iter::once(foca::Member::new(b.clone(), 0, foca::State::Down)),
                true,
                &mut task.rt,
            )
            .expect("applies");
        task.drain();
        let _ = sent(&mut task);
        assert_eq!(task.last_known.iter().copied().collect::<Vec<_>>(), [b.udp]);
        // Without seeds and alone, the last known members are contacted.
        task.seeds.clear();
        task.announce();
        assert_eq!(sent(&mut task), [b.udp]);
    }

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
