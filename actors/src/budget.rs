//! The node-wide memory budget for what peers' bytes make this node hold:
//! recipient-id tables, batches waiting in actors' mailboxes (see
//! [`Charge`]), batches parked for full mailboxes (and large messages held
//! for them), large messages being reassembled, and inbound connections
//! whose handshake is pending ([`Handshakes`], charged through the
//! transport's `Admission` hook before the peer proved anything). One
//! accounting in bytes, with three bounds checked on every charge:
//!
//! - the node: at most `limit` bytes, the budget
//!   ([`SystemConfig::set_peer_memory_budget`](crate::SystemConfig::set_peer_memory_budget))
//!   less the room of pending handshakes (below);
//! - each connection: at most its [`share`] of it;
//! - each source address (IP): at most its [`share`] of it, counting
//!   addresses instead of connections, so that many connections from one
//!   address share one address's part.
//!
//! ```text
//!  Dispatch (per connection) ──take/give_back──▶ ConnBudget ─┬─▶ AddrAccount (per IP)
//!  a batch's Charge (park → mailbox → actor) ─drop─▶ │       └─▶ NodeBudget (per node)
//!                                                    └─ Drop: everything still held goes back
//! ```
//!
//! A charge is three atomic read-modify-writes, made where memory is
//! taken for a batch, an id definition or a fragment, never per delivered
//! message, and never under a lock. A refused charge refuses the thing
//! (the id, the batch, the large message: counted, and dead letters where
//! there are messages) and puts the connection under [`Pressure`]: its
//! reads pause until it is back within its share, and it is disconnected
//! if it stays over for [`PAUSE_GRACE`] or goes over [`MAX_STRIKES`] times
//! in a row. The node is never stopped, and other connections go on.
//!
//! Pending handshakes have a room of their own: 1/[`SHARE_FLOOR_DIVISOR`]
//! of the node's budget, which connections never use (the `limit` they
//! share, and the node-wide bound above, is the rest; see
//! [`NodeBudget::for_peers`]). So
//! connections that never prove anything cannot take the room proven
//! peers need, and proven peers holding all they may cannot keep a new
//! peer from connecting. A pending handshake has no connection, and its
//! address has proven nothing: it is charged to that room only (the
//! transport's slots bound each address's pending handshakes). A refused
//! one is refused by the transport, which first evicts its oldest pending
//! handshake to make room, so that a flood cannot keep a good peer out.
//!
//! ```text
//!  budget: ├─────── connections (shares, per IP): limit ───────┤─ handshakes ─┤
//!                            budget − budget/16                   budget/16
//! ```
//!
//! Release is exact: each holder gives back what it took, and whatever a
//! connection still holds when its [`ConnBudget`] drops (the last task
//! holding it ended) goes back then, so the node's account returns to zero
//! when every connection is gone.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use transport::{Admission, PendingCharge};

/// The smallest share one connection (or address) gets, as a fraction of
/// the budget: 1/16. Without a floor, a thousand idle connections would
/// leave each a 1/1000th share, too little for a peer with a few thousand
/// recipients; with it, the node-wide limit is what binds once more than
/// 16 connections hold their floor, and they then compete for what is
/// left (first come), each still at most its share.
pub(crate) const SHARE_FLOOR_DIVISOR: usize = 16;

/// What one recipient id costs on the receiving node beside its path: the
/// entry in the id table (48 bytes, and up to as much again in the table's
/// spare capacity), its window and park (about 100 bytes), the path's
/// allocation header, and the allocator's rounding and fragmentation.
/// Measured on a receiving node's resident memory (`VmRSS`): 16,384 ids
/// with 1,000-byte paths grew it by 31 MiB, about 1,950 bytes an id, so
/// this is charged as 1,000 bytes plus the path (see [`id_cost`]).
pub(crate) const ID_BASE_COST: usize = 1_000;

/// How long a connection past its share may stay over it, reading paused,
/// before it is disconnected: 5 s. Long enough for a slow actor to take a
/// parked batch or two (and the peer to stop sending), short enough that a
/// peer holding memory it never gives back (recipient ids) is cut soon.
pub(crate) const PAUSE_GRACE: Duration = Duration::from_secs(5);

/// Times in a row a connection may go over its share, each time pausing
/// until it is back within it, before it is disconnected: 3. A peer that
/// keeps its windows never goes over once; one that ignores them goes
/// over again as soon as it is read again.
pub(crate) const MAX_STRIKES: u32 = 3;

/// A connection that stayed within its share this long starts counting
/// strikes from zero again: 60 s.
pub(crate) const STRIKE_MEMORY: Duration = Duration::from_secs(60);

/// The cost charged for one recipient id with a path of `path_len` bytes
/// (see [`ID_BASE_COST`]).
#[inline]
pub(crate) fn id_cost(path_len: usize) -> usize {
    ID_BASE_COST + path_len
}

/// The fair share of `limit` for one of `active` holders (connections, or
/// source addresses): an equal part, but at least `limit /`
/// [`SHARE_FLOOR_DIVISOR`], and never more than `limit`. Pure.
#[inline]
pub(crate) fn share(limit: usize, active: usize) -> usize {
    (limit / active.max(1))
        .max(limit / SHARE_FLOOR_DIVISOR)
        .min(limit)
}

/// What one batch of remote messages costs while it waits for its actor
/// beside the buffer it keeps alive: its mailbox entry (56 bytes), the
/// buffer's shared header and the allocator's rounding, and the growth of
/// an idle mailbox's queue. Measured on a node process's `VmRSS` with
/// batches for blocked actors (`budget::measure_what_waiting_batches_cost`
/// in the integration tests): 141 bytes a batch of one 6-byte message,
/// 283 for the first batch of an idle mailbox; see [`queued_cost`].
pub(crate) const BATCH_COST: usize = 256;

/// The cost charged for a batch waiting for an actor whose buffer keeps
/// `held` bytes alive (its records' bytes, and the room left
/// in its allocation: measured, a 6-byte record in a batch of many holds
/// about 10 bytes, a 10 kB message 12.6 kB), from the moment it is queued
/// (or parked) until the actor has handled its messages (see [`Charge`]).
/// A record's own cost is in its bytes: its length prefix is among them.
#[inline]
pub(crate) fn queued_cost(held: usize) -> usize {
    held + BATCH_COST
}

/// What a charge is for: the counters of refusals name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// A recipient-id definition.
    Ids = 0,
    /// A batch (or a large message) waiting for room in a full mailbox.
    Parked = 1,
    /// A large message being reassembled.
    Large = 2,
    /// A batch (or a large message) for a mailbox with room, waiting there
    /// until its actor handles it.
    Queued = 3,
    /// An inbound connection whose handshake is pending (see
    /// [`Handshakes`]).
    Handshake = 4,
}

impl Held {
    /// Every kind, in the order of their values.
    pub(crate) const ALL: [Self; 5] = [
        Self::Ids,
        Self::Parked,
        Self::Large,
        Self::Queued,
        Self::Handshake,
    ];

    /// The label of refusals of this kind (metrics, logs).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Ids => "ids",
            Self::Parked => "parked",
            Self::Large => "large",
            Self::Queued => "queued",
            Self::Handshake => "handshake",
        }
    }
}

/// Bytes charged to a connection's account for one batch of its messages,
/// given back when the charge is dropped: it travels with the batch (park,
/// mailbox entry, the actor that decodes it) and goes when the actor is
/// done with the batch or the batch is dropped (a dead letter, a closed
/// mailbox, a stopped actor). The default charges nothing.
///
/// 16 bytes, so that a mailbox entry holding a batch grows by 8 bytes
/// only (`mailbox::Queued`). Making and dropping one costs four atomic
/// read-modify-writes each (the account's three counters and the
/// account's reference count), once per batch, never per message.
#[derive(Debug, Default)]
pub(crate) struct Charge {
    account: Option<Arc<ConnBudget>>,
    bytes: u32,
}

impl Drop for Charge {
    #[inline]
    fn drop(&mut self) {
        if let Some(account) = &self.account {
            account.give_back(self.bytes as usize);
        }
    }
}

/// What the node's peers make it hold, and what was refused: a snapshot
/// of the accounting behind
/// [`SystemConfig::set_peer_memory_budget`](crate::SystemConfig::set_peer_memory_budget),
/// from [`ActorSystem::peer_memory`](crate::ActorSystem::peer_memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerMemory {
    /// Bytes held now for all peers together.
    pub held: usize,
    /// The most ever held at once (never more than `limit`).
    pub peak: usize,
    /// The node-wide limit.
    pub limit: usize,
    /// Connections open now, each with its own share.
    pub connections: usize,
    /// Recipient-id definitions refused (the connection was over its
    /// share, or the node full).
    pub refused_ids: u64,
    /// Batches and large messages for full mailboxes refused (dead
    /// letters).
    pub refused_parked: u64,
    /// Large messages whose reassembly was refused (dead letters).
    pub refused_large: u64,
    /// Batches and large messages for mailboxes with room refused, since
    /// what waits in mailboxes counts too (dead letters).
    pub refused_queued: u64,
    /// Inbound connections whose handshake is pending now, each charged
    /// [`transport::PENDING_HANDSHAKE_COST`] (with TLS
    /// [`transport::PENDING_TLS_HANDSHAKE_COST`]) within `held` until its
    /// peer has proved itself.
    pub handshakes: usize,
    /// Pending handshakes refused: pending handshakes together held their
    /// room, 1/16 of the limit (connections share the rest). The oldest
    /// pending handshake then gave way, or, if none could, the new
    /// connection was closed.
    pub refused_handshakes: u64,
    /// Connections disconnected for staying over their share.
    pub disconnected: u64,
}

/// The node-wide account (one per node).
#[derive(Debug)]
pub(crate) struct NodeBudget {
    /// What connections may hold together.
    limit: usize,
    /// The room kept for pending handshakes, beside `limit`.
    handshake_room: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    /// Open connections (accounts alive).
    conns: AtomicUsize,
    /// Source addresses with an open connection: `addrs.len()`, readable
    /// without the lock.
    active_addrs: AtomicUsize,
    /// Per source address; locked only when a connection opens or closes.
    addrs: Mutex<HashMap<IpAddr, Arc<AddrAccount>>>,
    /// Bytes charged for pending handshakes (not in `used`, which is the
    /// connections'), and their number.
    handshake_used: AtomicUsize,
    handshakes: AtomicUsize,
    refused: [AtomicU64; 5],
    disconnected: AtomicU64,
    /// The node-labelled counters of refusals (by `Held`) and
    /// disconnections (`telemetry`), set once the node's name is known
    /// (after the endpoint is bound; a refusal before that is counted in
    /// the snapshot only).
    meters: OnceLock<(Vec<metrics::Counter>, metrics::Counter)>,
}

/// One source address's account.
#[derive(Debug, Default)]
struct AddrAccount {
    used: AtomicUsize,
    /// Connections from it; changed under `NodeBudget::addrs`.
    conns: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing here leaves the map half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Adds `bytes` to `counter` if the sum stays within `max`.
#[inline]
fn reserve(counter: &AtomicUsize, bytes: usize, max: usize) -> Option<usize> {
    let after = counter.fetch_add(bytes, Ordering::AcqRel) + bytes;
    if after > max {
        counter.fetch_sub(bytes, Ordering::AcqRel);
        return None;
    }
    Some(after)
}

impl NodeBudget {
    /// The account of a node whose peers may make it hold `budget` bytes
    /// in all: 1/[`SHARE_FLOOR_DIVISOR`] of it is the room of pending
    /// handshakes, the rest is what connections share. Counts into no
    /// metrics until [`meter`](Self::meter).
    pub(crate) fn for_peers(budget: usize) -> Arc<Self> {
        let room = budget / SHARE_FLOOR_DIVISOR;
        Self::with_room(budget - room, room)
    }

    /// An account of `limit` bytes for connections and no room for pending
    /// handshakes.
    #[cfg(test)]
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Self::with_room(limit, 0)
    }

    fn with_room(limit: usize, handshake_room: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            handshake_room,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            conns: AtomicUsize::new(0),
            active_addrs: AtomicUsize::new(0),
            addrs: Mutex::default(),
            handshake_used: AtomicUsize::new(0),
            handshakes: AtomicUsize::new(0),
            refused: Default::default(),
            disconnected: AtomicU64::new(0),
            meters: OnceLock::new(),
        })
    }

    /// Counts refusals and disconnections into `meters` from now on (from
    /// `SystemMeters::budget_counters` with the labels of [`Held::ALL`]);
    /// only the first call counts.
    pub(crate) fn meter(&self, meters: (Vec<metrics::Counter>, metrics::Counter)) {
        let _ = self.meters.set(meters);
    }

    /// The account of a new connection from `ip`.
    pub(crate) fn connect(self: &Arc<Self>, ip: IpAddr) -> Arc<ConnBudget> {
        let addr = {
            let mut addrs = lock(&self.addrs);
            let a = addrs.entry(ip).or_default().clone();
            a.conns.fetch_add(1, Ordering::AcqRel);
            self.active_addrs.store(addrs.len(), Ordering::Release);
            a
        };
        self.conns.fetch_add(1, Ordering::AcqRel);
        Arc::new(ConnBudget {
            node: self.clone(),
            ip,
            addr,
            used: AtomicUsize::new(0),
            wake: Notify::new(),
            waiting: AtomicBool::new(false),
        })
    }

    /// The accounting now.
    pub(crate) fn snapshot(&self) -> PeerMemory {
        let r = |k: Held| self.refused[k as usize].load(Ordering::Relaxed);
        PeerMemory {
            held: self.used.load(Ordering::Acquire) + self.handshake_used.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Acquire),
            limit: self.limit + self.handshake_room,
            connections: self.conns.load(Ordering::Acquire),
            refused_ids: r(Held::Ids),
            refused_parked: r(Held::Parked),
            refused_large: r(Held::Large),
            refused_queued: r(Held::Queued),
            handshakes: self.handshakes.load(Ordering::Acquire),
            refused_handshakes: r(Held::Handshake),
            disconnected: self.disconnected.load(Ordering::Relaxed),
        }
    }

    /// One connection disconnected for staying over its share.
    pub(crate) fn count_disconnect(&self) -> u64 {
        if let Some(m) = self.meters.get() {
            m.1.increment(1);
        }
        self.disconnected.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts a refused charge of `kind`; false.
    #[cold]
    fn refuse(&self, kind: Held) -> bool {
        self.refused[kind as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(m) = self.meters.get() {
            m.0[kind as usize].increment(1);
        }
        false
    }

    /// Moves the peak up to `held` if it is higher.
    #[inline]
    fn peak_at(&self, held: usize) {
        // A read first: the peak moves rarely, and the read-modify-write
        // would take the line from every other core each time.
        if held > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(held, Ordering::AcqRel);
        }
    }

    /// Charges `bytes` for a pending handshake if pending handshakes
    /// together stay within their room; counts a refusal if not.
    pub(crate) fn charge_handshake(self: &Arc<Self>, bytes: usize) -> Option<HandshakeCharge> {
        let Some(after) = reserve(&self.handshake_used, bytes, self.handshake_room) else {
            self.refuse(Held::Handshake);
            return None;
        };
        self.handshakes.fetch_add(1, Ordering::AcqRel);
        self.peak_at(after + self.used.load(Ordering::Acquire));
        Some(HandshakeCharge {
            node: self.clone(),
            bytes,
        })
    }
}

/// What a pending handshake holds, charged to the node's room for them
/// ([`NodeBudget::charge_handshake`]); given back when dropped (the
/// transport drops it when the peer has proved itself, or the connection
/// ended or was evicted).
#[derive(Debug)]
pub(crate) struct HandshakeCharge {
    node: Arc<NodeBudget>,
    bytes: usize,
}

impl Drop for HandshakeCharge {
    fn drop(&mut self) {
        self.node
            .handshake_used
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.node.handshakes.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The transport's hook ([`transport::TransportConfig::set_admission`])
/// charging pending handshakes to the node's budget, at
/// [`transport::PENDING_HANDSHAKE_COST`] each (with TLS,
/// [`transport::PENDING_TLS_HANDSHAKE_COST`]). An admission the
/// application set on its `TransportConfig` is kept and asked first: a
/// handshake is admitted when both accounts take it, and neither holds a
/// charge for one the other refused.
#[derive(Debug)]
pub(crate) struct Handshakes {
    pub(crate) node: Arc<NodeBudget>,
    pub(crate) also: Option<Arc<dyn Admission>>,
}

impl Admission for Handshakes {
    fn charge_pending(&self, ip: IpAddr, bytes: usize) -> Option<PendingCharge> {
        let Some(also) = &self.also else {
            return self.node.charge_handshake(bytes).map(PendingCharge::new);
        };
        let theirs = also.charge_pending(ip, bytes)?;
        // Refused here: `theirs` is dropped, and gives its bytes back.
        let ours = self.node.charge_handshake(bytes)?;
        Some(PendingCharge::new((theirs, ours)))
    }
}

/// One connection's account: what it holds, charged to its address and
/// the node as well. Shared by the connection's dispatcher and the tasks
/// that hand its parked batches over; dropping the last holder gives back
/// whatever is still charged.
#[derive(Debug)]
pub(crate) struct ConnBudget {
    node: Arc<NodeBudget>,
    ip: IpAddr,
    addr: Arc<AddrAccount>,
    used: AtomicUsize,
    /// Woken when something is given back while the connection waits.
    wake: Notify,
    waiting: AtomicBool,
}

impl ConnBudget {
    /// This connection's share now.
    fn share(&self) -> usize {
        share(self.node.limit, self.node.conns.load(Ordering::Acquire))
    }

    /// Charges `bytes` of `kind` if this connection stays within its share,
    /// its address within its own, and the node within its limit; counts a
    /// refusal if not.
    pub(crate) fn take(&self, kind: Held, bytes: usize) -> bool {
        let node = &*self.node;
        let addr_share = share(node.limit, node.active_addrs.load(Ordering::Acquire));
        let Some(_) = reserve(&self.used, bytes, self.share()) else {
            return self.refuse(kind);
        };
        let Some(_) = reserve(&self.addr.used, bytes, addr_share) else {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            return self.refuse(kind);
        };
        let Some(after) = reserve(&node.used, bytes, node.limit) else {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.addr.used.fetch_sub(bytes, Ordering::AcqRel);
            return self.refuse(kind);
        };
        node.peak_at(after + node.handshake_used.load(Ordering::Relaxed));
        true
    }

    /// Charges `bytes` of `kind` as [`take`](Self::take) does, as a
    /// [`Charge`] that gives them back when dropped; `None` if refused.
    #[inline]
    pub(crate) fn charge(self: &Arc<Self>, kind: Held, bytes: usize) -> Option<Charge> {
        let Ok(small) = u32::try_from(bytes) else {
            // No batch is this large (messages are below 2 GiB).
            self.refuse(kind);
            return None;
        };
        self.take(kind, bytes).then(|| Charge {
            account: Some(self.clone()),
            bytes: small,
        })
    }

    #[cold]
    fn refuse(&self, kind: Held) -> bool {
        self.node.refuse(kind)
    }

    /// Gives back `bytes` taken before.
    pub(crate) fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.addr.used.fetch_sub(bytes, Ordering::AcqRel);
        self.node.used.fetch_sub(bytes, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) {
            self.wake.notify_waiters();
        }
    }

    /// Whether this connection holds little enough of its share now to
    /// read on: no more than [`RESUME_AT`] of it.
    pub(crate) fn within_share(&self) -> bool {
        let share = self.share();
        self.used.load(Ordering::Acquire) <= share - share / RESUME_AT
    }

    /// Bytes this connection holds now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The node this connection charges.
    pub(crate) fn node(&self) -> &NodeBudget {
        &self.node
    }

    /// Waits until something is given back, or `until`.
    pub(crate) async fn wait_release(&self, until: Instant) {
        self.waiting.store(true, Ordering::Release);
        let notified = self.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.within_share() {
            let until = tokio::time::Instant::from_std(until);
            let _ = tokio::time::timeout_at(until, notified).await;
        }
        self.waiting.store(false, Ordering::Release);
    }
}

impl Drop for ConnBudget {
    fn drop(&mut self) {
        let held = *self.used.get_mut();
        self.addr.used.fetch_sub(held, Ordering::AcqRel);
        self.node.used.fetch_sub(held, Ordering::AcqRel);
        self.node.conns.fetch_sub(1, Ordering::AcqRel);
        let mut addrs = lock(&self.node.addrs);
        if self.addr.conns.fetch_sub(1, Ordering::AcqRel) == 1 {
            addrs.remove(&self.ip);
        }
        self.node.active_addrs.store(addrs.len(), Ordering::Release);
    }
}

/// A connection over its share reads on once it holds no more than its
/// share less 1/`RESUME_AT` (three quarters of it): room for a few reads'
/// worth, so that it does not pause again at once. A connection that never
/// gives back what it holds (recipient ids) stays paused, and is cut.
pub(crate) const RESUME_AT: usize = 4;

/// What a connection under pressure does next (see [`Pressure::poll`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Read on.
    Go,
    /// Pause reading until something is given back, or `until`, then
    /// poll again.
    Wait { until: Instant },
    /// Disconnect: over its share too long, or too often.
    Disconnect,
}

/// Whether a connection over its share reads on, waits or is cut. Pure:
/// time is passed in.
///
/// ```text
///            refused charge (strike += 1)
///   Within ───────────────────────────────▶ Over(since)
///     ▲                                        │ within share again: Go
///     └────────────────────────────────────────┘
///   Over for PAUSE_GRACE, or strikes reach MAX_STRIKES: Disconnect
///   (strikes start from zero after STRIKE_MEMORY within the share)
/// ```
#[derive(Debug, Default)]
pub(crate) struct Pressure {
    over_since: Option<Instant>,
    strikes: u32,
    last_over: Option<Instant>,
}

impl Pressure {
    /// A charge of this connection was refused at `now`.
    pub(crate) fn refused(&mut self, now: Instant) {
        if self.over_since.is_none() {
            if self
                .last_over
                .is_some_and(|t| now.saturating_duration_since(t) >= STRIKE_MEMORY)
            {
                self.strikes = 0;
            }
            self.strikes += 1;
            self.over_since = Some(now);
        }
        self.last_over = Some(now);
    }

    /// Whether anything was refused since the connection was last within
    /// its share (a hint for the reader: `poll` only then).
    #[inline]
    pub(crate) fn is_over(&self) -> bool {
        self.over_since.is_some()
    }

    /// After a read, at `now`: `within` says whether the connection holds
    /// no more than its share now.
    pub(crate) fn poll(&mut self, now: Instant, within: bool) -> Verdict {
        let Some(since) = self.over_since else {
            return Verdict::Go;
        };
        if self.strikes >= MAX_STRIKES {
            return Verdict::Disconnect;
        }
        if within {
            self.over_since = None;
            self.last_over = Some(now);
            return Verdict::Go;
        }
        let until = since + PAUSE_GRACE;
        if now >= until {
            return Verdict::Disconnect;
        }
        Verdict::Wait { until }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn a_share_is_an_equal_part_with_a_floor() {
        assert_eq!(share(256 * MIB, 0), 256 * MIB, "alone: everything");
        assert_eq!(share(256 * MIB, 1), 256 * MIB);
        assert_eq!(share(256 * MIB, 4), 64 * MIB);
        assert_eq!(share(256 * MIB, 16), 16 * MIB);
        assert_eq!(share(256 * MIB, 1000), 16 * MIB, "the floor, 1/16");
        assert_eq!(share(0, 5), 0);
    }

    #[test]
    fn ids_cost_what_they_were_measured_at() {
        // 1,950 bytes measured for a 1,000-byte path.
        assert!((1_900..=2_100).contains(&id_cost(1_000)));
        assert_eq!(id_cost(0), ID_BASE_COST);
    }

    #[test]
    fn one_connection_may_take_the_whole_budget_when_alone() {
        let node = NodeBudget::new(100 * MIB);
        let c = node.connect(ip(1));
        assert!(c.take(Held::Parked, 100 * MIB));
        assert!(!c.take(Held::Parked, 1), "the node is full");
        assert_eq!(node.snapshot().refused_parked, 1);
        c.give_back(100 * MIB);
        assert_eq!(node.snapshot().held, 0);
        assert_eq!(node.snapshot().peak, 100 * MIB);
    }

    #[test]
    fn a_connection_gets_its_share_and_the_node_never_more_than_its_limit() {
        let node = NodeBudget::new(64 * MIB);
        let conns: Vec<_> = (0..4).map(|i| node.connect(ip(i))).collect();
        // Four connections from four addresses: 16 MiB each.
        assert!(conns[0].take(Held::Ids, 16 * MIB));
        assert!(!conns[0].take(Held::Ids, 1), "past its share");
        assert!(conns[1].take(Held::Parked, 10 * MIB));
        assert!(conns[1].within_share(), "10 of 16 MiB");
        assert!(conns[1].take(Held::Parked, 3 * MIB));
        assert!(
            !conns[1].within_share(),
            "13 of 16 MiB: past three quarters"
        );
        conns[1].give_back(3 * MIB);
        let s = node.snapshot();
        assert_eq!((s.held, s.refused_ids, s.connections), (26 * MIB, 1, 4));
        // Twenty more connections: each share is now the floor, 4 MiB,
        // and the node's limit binds first.
        let more: Vec<_> = (0..20).map(|i| node.connect(ip(10 + i))).collect();
        assert!(
            !conns[0].within_share(),
            "its share shrank below what it holds"
        );
        let taken = more.iter().filter(|c| c.take(Held::Large, 4 * MIB)).count();
        assert_eq!(taken, 9, "38 MiB were left: nine shares of 4 MiB");
        assert!(node.snapshot().peak <= 64 * MIB);
        assert_eq!(node.snapshot().refused_large, 11);
    }

    #[test]
    fn many_connections_from_one_address_share_its_part() {
        let node = NodeBudget::new(64 * MIB);
        let other = node.connect(ip(9));
        let same: Vec<_> = (0..8).map(|_| node.connect(ip(1))).collect();
        // Two addresses: 32 MiB each; nine connections: floor 4 MiB each
        // (an equal part, 7.1 MiB, is more).
        assert_eq!(
            same.iter().filter(|c| c.take(Held::Ids, 7 * MIB)).count(),
            4
        );
        assert!(
            !same[7].take(Held::Ids, 5 * MIB),
            "the address's part is used"
        );
        assert!(other.take(Held::Ids, 7 * MIB), "another address is not");
    }

    #[test]
    fn dropping_connections_gives_back_everything_they_held() {
        let node = NodeBudget::new(64 * MIB);
        let a = node.connect(ip(1));
        let b = node.connect(ip(1));
        let c = node.connect(ip(2));
        assert!(a.take(Held::Ids, 3 * MIB));
        assert!(b.take(Held::Parked, 2 * MIB));
        assert!(c.take(Held::Large, MIB));
        b.give_back(MIB);
        assert_eq!(node.snapshot().held, 5 * MIB);
        drop(a);
        assert_eq!(node.snapshot().held, 2 * MIB);
        assert_eq!(lock(&node.addrs).len(), 2, "b still comes from .1");
        drop(b);
        drop(c);
        let s = node.snapshot();
        assert_eq!((s.held, s.connections), (0, 0));
        assert!(lock(&node.addrs).is_empty());
        assert_eq!(node.active_addrs.load(Ordering::Acquire), 0);
    }

    #[test]
    fn pending_handshakes_are_charged_up_to_a_sixteenth_of_the_limit() {
        let node = NodeBudget::for_peers(16 * MIB);
        let hook = Handshakes {
            node: node.clone(),
            also: None,
        };
        // Through the transport's hook, as an endpoint charges them.
        let pending: Vec<_> = (0..4)
            .map(|_| hook.charge_pending(ip(1), MIB / 4).expect("within"))
            .collect();
        let s = node.snapshot();
        assert_eq!((s.held, s.handshakes, s.connections), (MIB, 4, 0));
        assert!(
            hook.charge_pending(ip(2), 1).is_none(),
            "pending handshakes together: at most 1 MiB of 16"
        );
        assert_eq!(node.snapshot().refused_handshakes, 1);
        assert_eq!(
            node.active_addrs.load(Ordering::Acquire),
            0,
            "pending handshakes make no address active, so no share shrinks"
        );
        drop(pending);
        let s = node.snapshot();
        assert_eq!((s.held, s.handshakes, s.peak), (0, 0, MIB));
        assert!(lock(&node.addrs).is_empty(), "the refused one too");
    }

    /// An application's own account, kept beside the node's: charged
    /// first, given back when the node's budget refuses, and a refusal of
    /// its own leaves the node's budget untouched.
    #[test]
    fn an_applications_admission_is_charged_beside_the_budget() {
        #[derive(Debug)]
        struct Theirs(Arc<AtomicUsize>, usize);
        struct Back(Arc<AtomicUsize>, usize);
        impl Drop for Back {
            fn drop(&mut self) {
                self.0.fetch_sub(self.1, Ordering::AcqRel);
            }
        }
        impl Admission for Theirs {
            fn charge_pending(&self, _: IpAddr, bytes: usize) -> Option<PendingCharge> {
                let held = self.0.fetch_add(bytes, Ordering::AcqRel) + bytes;
                let back = Back(self.0.clone(), bytes);
                (held <= self.1).then(|| PendingCharge::new(back))
            }
        }
        let node = NodeBudget::for_peers(16 * MIB);
        let theirs = Arc::new(AtomicUsize::new(0));
        let hook = Handshakes {
            node: node.clone(),
            also: Some(Arc::new(Theirs(theirs.clone(), 3 * MIB / 4))),
        };
        let a = hook.charge_pending(ip(1), MIB / 2).expect("both take it");
        assert_eq!(
            (theirs.load(Ordering::Acquire), node.snapshot().held),
            (MIB / 2, MIB / 2)
        );
        assert!(
            hook.charge_pending(ip(1), MIB / 2).is_none(),
            "theirs is full"
        );
        assert_eq!(
            (theirs.load(Ordering::Acquire), node.snapshot().held),
            (MIB / 2, MIB / 2)
        );
        let generous = Arc::new(AtomicUsize::new(0));
        let other = Handshakes {
            node: node.clone(),
            also: Some(Arc::new(Theirs(generous.clone(), 16 * MIB))),
        };
        assert!(
            other.charge_pending(ip(2), 3 * MIB / 4).is_none(),
            "the node's room (1 MiB of 16) would be past full"
        );
        assert_eq!(
            generous.load(Ordering::Acquire),
            0,
            "their charge for the one the node refused is given back"
        );
        drop(a);
        assert_eq!(
            (theirs.load(Ordering::Acquire), node.snapshot().held),
            (0, 0)
        );
    }

    #[test]
    fn proven_peers_holding_all_they_may_leave_room_for_handshakes() {
        let node = NodeBudget::for_peers(64 * MIB);
        assert_eq!(node.snapshot().limit, 64 * MIB);
        let c = node.connect(ip(1));
        assert!(
            c.take(Held::Ids, 60 * MIB),
            "alone: all that connections may hold"
        );
        assert!(!c.take(Held::Ids, 1));
        let h = node
            .charge_handshake(4 * MIB)
            .expect("the handshakes' room");
        let s = node.snapshot();
        assert_eq!((s.held, s.peak, s.handshakes), (64 * MIB, 64 * MIB, 1));
        assert!(node.charge_handshake(1).is_none(), "the room is full");
        assert!(!c.take(Held::Ids, 1), "and connections never use it");
        drop(h);
        drop(c);
        let s = node.snapshot();
        assert_eq!((s.held, s.handshakes, s.refused_handshakes), (0, 0, 1));
    }

    #[tokio::test]
    async fn a_waiting_connection_wakes_when_something_is_given_back() {
        let node = NodeBudget::new(10 * MIB);
        let c = node.connect(ip(1));
        assert!(c.take(Held::Parked, 8 * MIB), "alone: all of it");
        let _other = node.connect(ip(2));
        assert!(!c.within_share(), "two connections: 5 MiB each");
        // Woken once it holds no more than 3.75 MiB.
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                c.wait_release(Instant::now() + Duration::from_secs(30))
                    .await;
            })
        };
        // Given back until the waiter is woken (it may not wait yet).
        tokio::time::timeout(Duration::from_secs(10), async {
            while !waiter.is_finished() {
                if c.used() > 0 {
                    c.give_back(MIB);
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("woken before its deadline");
    }

    #[test]
    fn over_its_share_a_connection_waits_then_is_cut() {
        let t0 = Instant::now();
        let mut p = Pressure::default();
        assert_eq!(p.poll(t0, false), Verdict::Go, "nothing refused");
        p.refused(t0);
        let until = t0 + PAUSE_GRACE;
        assert_eq!(p.poll(t0, false), Verdict::Wait { until });
        assert_eq!(
            p.poll(t0 + Duration::from_secs(1), false),
            Verdict::Wait { until }
        );
        assert_eq!(p.poll(until, false), Verdict::Disconnect);
    }

    #[test]
    fn back_within_its_share_it_reads_on_until_its_third_time_over() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Pressure::default();
        for i in 0..2 {
            p.refused(t0 + s * i);
            p.refused(t0 + s * i); // twice in one read: one strike
            assert!(matches!(p.poll(t0 + s * i, false), Verdict::Wait { .. }));
            assert_eq!(p.poll(t0 + s * i, true), Verdict::Go);
            assert!(!p.is_over());
        }
        p.refused(t0 + s * 3);
        assert_eq!(
            p.poll(t0 + s * 3, true),
            Verdict::Disconnect,
            "third strike"
        );
    }

    #[test]
    fn strikes_are_forgotten_after_a_calm_minute() {
        let t0 = Instant::now();
        let mut p = Pressure::default();
        for i in 0..2 {
            p.refused(t0 + Duration::from_secs(i));
            assert_eq!(p.poll(t0 + Duration::from_secs(i), true), Verdict::Go);
        }
        let later = t0 + Duration::from_secs(2) + STRIKE_MEMORY;
        p.refused(later);
        assert!(matches!(p.poll(later, false), Verdict::Wait { .. }));
        assert_eq!(p.poll(later, true), Verdict::Go, "a first strike again");
    }
}
