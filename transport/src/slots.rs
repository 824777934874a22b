//! Inbound connection slots: the endpoint's bound on inbound connections,
//! the bounds per remote IP address, and eviction when they are reached.
//!
//! ```text
//!  accept loop ──admit(ip)──► ip at its unproven bound, or at its
//!                             connection bound with one unproven?
//!                                  │ yes: evict ip's oldest unproven (below)
//!                             ip at its connection bound? ──yes──► refuse (TooManyConnectionsFromIp)
//!                                  │ no
//!                             a global permit free? ──yes──► Now(slot): handshake
//!                                  │ no
//!                             an unproven connection holding a permit?
//!                                  │ yes: the oldest from the address with the most
//!                                  │      unproven is evicted (its handshake task is
//!                                  │      cancelled), and its permit passes to the
//!                                  │      newcomer at once: EvictedUnproven(slot)
//!                                  │ no
//!                             an established inbound connection idle ≥ idle_after?
//!                                  │ no ──► refuse (TooManyConnections)
//!                                  │ yes: the one idle longest, marked
//!                             AfterEviction(slot, victim): Close(reason) to the victim,
//!                             abort after EVICT_GRACE; the newcomer waits for the freed
//!                             permit (at most the handshake timeout), then its handshake
//! ```
//!
//! A [`Slot`] is taken before any byte of the connection is read and held
//! until the connection ends (its supervisor drops it); dropping it gives
//! back the per-IP counts and the permit. A slot is *unproven* from then
//! until its handshake completes ([`Slot::proven`]): the peer has shown
//! nothing yet, so it is the first to go when room is short, and each
//! address may hold only a few such slots. A peer that knows the secret
//! proves it within a round trip, so evicting the oldest unproven
//! connection never costs a good peer its turn unless a flood from its own
//! address opens more than the per-address bound within that round trip.
//!
//! Idle means no application frame (`Message`, `System`) since the last
//! one, or since the start: the reader stores the time once per read that
//! delivers any (see `Shared::touch_app`). The table lock is a leaf, and
//! held only for map updates; finding a victim scans the unproven or the
//! established inbound connections, which happens only when an address or
//! the endpoint is full.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{
    error::TransportError,
    shared::{CloseReason, Shared},
};

/// How long an evicted connection has to close after its Close frame
/// before it is aborted: it is idle, so its writer has nothing queued, and
/// only a peer that does not answer the Close makes this matter.
pub(crate) const EVICT_GRACE: Duration = Duration::from_millis(500);

/// An endpoint's inbound slots.
#[derive(Debug)]
pub(crate) struct Slots {
    global: Arc<Semaphore>,
    limit: usize,
    per_ip_limit: usize,
    unproven_per_ip: usize,
    idle_after: Option<Duration>,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// Slots per remote address; an address with none has no entry.
    per_ip: HashMap<IpAddr, PerIp>,
    /// Started inbound connections, the candidates for idle eviction.
    live: HashMap<u64, Live>,
    /// Connections in their handshake, the first candidates for eviction.
    unproven: HashMap<u64, Unproven>,
    next_id: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct PerIp {
    /// Slots held (handshaking, established, or evicted and not yet gone).
    held: usize,
    /// Slots in their handshake and not chosen for eviction.
    unproven: usize,
}

#[derive(Debug)]
struct Live {
    shared: Weak<Shared>,
    /// Chosen as a victim already: not chosen twice.
    evicting: bool,
}

#[derive(Debug)]
struct Unproven {
    ip: IpAddr,
    since: Instant,
    /// Its global permit, kept here until the handshake completes, so
    /// that an eviction hands it to the newcomer under the lock (a permit
    /// released to the semaphore could be taken by anyone meanwhile).
    permit: Option<OwnedSemaphorePermit>,
    /// Chosen for eviction: `Some(the unproven count of its address then)`.
    evicted_with: Option<usize>,
    /// Cancelled to evict: ends the handshake task, which drops the slot.
    evict: CancellationToken,
}

/// One inbound connection's hold on the endpoint's slots.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
    ip: IpAddr,
    /// The global permit once proven (before, the table holds it); `None`
    /// before.
    permit: Option<OwnedSemaphorePermit>,
    /// Cancelled when this connection is evicted before it proved itself.
    evict: CancellationToken,
    proven: bool,
}

/// What [`Slots::admit`] decided.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A slot is free: go ahead.
    Now(Slot),
    /// An unproven connection from `ip` (which had `unproven` of them) was
    /// evicted to make room; the slot has its permit (the victim's, if
    /// the endpoint was full), or waits for one (see
    /// [`Slot::wait_permit`]) in the rare case that no permit was free.
    EvictedUnproven {
        slot: Slot,
        ip: IpAddr,
        unproven: usize,
    },
    /// The endpoint is full; `victim` has been idle for `idle` and is to
    /// be evicted, and the slot gets its permit once it has gone (see
    /// [`Slot::wait_permit`]).
    AfterEviction {
        slot: Slot,
        victim: Arc<Shared>,
        idle: Duration,
    },
}

impl Slots {
    pub(crate) fn new(
        limit: usize,
        per_ip_limit: usize,
        unproven_per_ip: usize,
        idle_after: Option<Duration>,
    ) -> Self {
        Self {
            global: Arc::new(Semaphore::new(limit)),
            limit,
            per_ip_limit,
            unproven_per_ip,
            idle_after,
            table: Mutex::new(Table::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every update leaves the maps consistent before the next one:
        // usable even if a holder panicked.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits an inbound connection from `ip` at `now`, before anything is
    /// read from it; evicts an unproven connection if that makes room.
    ///
    /// # Errors
    /// [`TransportError::TooManyConnectionsFromIp`] when `ip` holds its
    /// limit, none of it unproven; [`TransportError::TooManyConnections`]
    /// when the endpoint is full, nothing is in its handshake, and no
    /// connection has been idle long enough to evict.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        now: Instant,
    ) -> Result<Admitted, TransportError> {
        let mut t = self.lock();
        let here = t.per_ip.get(&ip).copied().unwrap_or_default();
        // The address's own oldest unproven connection makes room for
        // this one, whether the address is at its unproven or its
        // connection bound.
        let mut evicted = None;
        if here.unproven >= self.unproven_per_ip
            || (here.held >= self.per_ip_limit && here.unproven > 0)
        {
            evicted = t.evict_unproven(Some(ip));
        } else if here.held >= self.per_ip_limit {
            return Err(TransportError::TooManyConnectionsFromIp {
                ip,
                limit: self.per_ip_limit,
            });
        }
        let mut permit = self.global.clone().try_acquire_owned().ok();
        if permit.is_none()
            && let Some((_, _, p)) = &mut evicted
        {
            permit = p.take();
        }
        let mut idle_victim = None;
        if permit.is_none() {
            match t.evict_unproven(None) {
                Some(mut v) => {
                    permit = v.2.take();
                    evicted = Some(v);
                }
                None => {
                    let Some(idle_after) = self.idle_after else {
                        return Err(TransportError::TooManyConnections { limit: self.limit });
                    };
                    match t.pick_idle(now, idle_after) {
                        Some(v) => idle_victim = Some(v),
                        None => {
                            return Err(TransportError::TooManyConnections { limit: self.limit });
                        }
                    }
                }
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let entry = t.per_ip.entry(ip).or_default();
        entry.held += 1;
        entry.unproven += 1;
        let evict = CancellationToken::new();
        t.unproven.insert(
            id,
            Unproven {
                ip,
                since: now,
                permit,
                evicted_with: None,
                evict: evict.clone(),
            },
        );
        drop(t);
        let slot = Slot {
            slots: self.clone(),
            id,
            ip,
            permit: None,
            evict,
            proven: false,
        };
        Ok(match (idle_victim, evicted) {
            (Some((victim, idle)), _) => Admitted::AfterEviction { slot, victim, idle },
            (None, Some((ip, unproven, _))) => Admitted::EvictedUnproven { slot, ip, unproven },
            (None, None) => Admitted::Now(slot),
        })
    }

    /// The limit on inbound connections.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

impl Table {
    /// Evicts an unproven connection: the oldest from `ip` if given (any
    /// will do: the point is the address's count), else the oldest
    /// holding a permit from the address with the most unproven. Returns
    /// its address, that address's unproven count, and its permit.
    fn evict_unproven(
        &mut self,
        ip: Option<IpAddr>,
    ) -> Option<(IpAddr, usize, Option<OwnedSemaphorePermit>)> {
        let mut best: Option<(u64, usize, Instant)> = None;
        for (&id, u) in &self.unproven {
            if u.evicted_with.is_some() || ip.is_some_and(|ip| u.ip != ip) {
                continue;
            }
            if ip.is_none() && u.permit.is_none() {
                continue;
            }
            let count = self.per_ip.get(&u.ip).map_or(0, |p| p.unproven);
            let better =
                best.is_none_or(|(_, c, since)| count > c || (count == c && u.since < since));
            if better {
                best = Some((id, count, u.since));
            }
        }
        let (id, count, _) = best?;
        let u = self.unproven.get_mut(&id)?;
        u.evicted_with = Some(count);
        u.evict.cancel();
        let (ip, permit) = (u.ip, u.permit.take());
        if let Some(p) = self.per_ip.get_mut(&ip) {
            p.unproven -= 1;
        }
        Some((ip, count, permit))
    }

    /// The started connection idle longest, if that is at least
    /// `idle_after`; marked so that it is not chosen again.
    fn pick_idle(&mut self, now: Instant, idle_after: Duration) -> Option<(Arc<Shared>, Duration)> {
        let mut best: Option<(u64, Arc<Shared>, Instant)> = None;
        for (&id, live) in &self.live {
            if live.evicting {
                continue;
            }
            let Some(shared) = live.shared.upgrade() else {
                continue;
            };
            let since = shared.idle_since();
            if now.saturating_duration_since(since) < idle_after {
                continue;
            }
            if best.as_ref().is_none_or(|(_, _, b)| since < *b) {
                best = Some((id, shared, since));
            }
        }
        let (id, shared, since) = best?;
        if let Some(live) = self.live.get_mut(&id) {
            live.evicting = true;
        }
        Some((shared, now.saturating_duration_since(since)))
    }

    /// Forgets `id` as unproven (it proved itself, or it ended); returns
    /// its permit.
    fn unprove(&mut self, id: u64) -> Option<OwnedSemaphorePermit> {
        let u = self.unproven.remove(&id)?;
        if u.evicted_with.is_none()
            && let Some(p) = self.per_ip.get_mut(&u.ip)
        {
            p.unproven -= 1;
        }
        u.permit
    }
}

impl Slot {
    /// The peer completed its handshake: no longer evicted as unproven.
    pub(crate) fn proven(&mut self) {
        if !self.proven {
            self.proven = true;
            if let Some(permit) = self.slots.lock().unprove(self.id) {
                self.permit = Some(permit);
            }
        }
    }

    /// Resolves when this connection is evicted before it proved itself;
    /// returns its address's unproven count when it was chosen.
    pub(crate) async fn evicted(&self) -> usize {
        self.evict.cancelled().await;
        self.evicted_with()
    }

    /// Cancelled when this connection is evicted before it proved itself.
    pub(crate) fn eviction(&self) -> CancellationToken {
        self.evict.clone()
    }

    /// Its address's unproven count when this connection was chosen for
    /// eviction; 0 if it was not.
    pub(crate) fn evicted_with(&self) -> usize {
        self.slots
            .lock()
            .unproven
            .get(&self.id)
            .and_then(|u| u.evicted_with)
            .unwrap_or(0)
    }

    /// The connection using this slot has started: it may be evicted
    /// when idle.
    pub(crate) fn attach(&self, shared: &Arc<Shared>) {
        self.slots.lock().live.insert(
            self.id,
            Live {
                shared: Arc::downgrade(shared),
                evicting: false,
            },
        );
    }

    /// Whether this connection holds a global permit.
    fn has_permit(&self) -> bool {
        self.permit.is_some()
            || self
                .slots
                .lock()
                .unproven
                .get(&self.id)
                .is_some_and(|u| u.permit.is_some())
    }

    /// Waits at most `timeout` for the global permit (freed by the evicted
    /// connection); true once held.
    pub(crate) async fn wait_permit(&mut self, timeout: Duration) -> bool {
        if self.has_permit() {
            return true;
        }
        let acquire = self.slots.global.clone().acquire_owned();
        match tokio::time::timeout(timeout, acquire).await {
            Ok(Ok(p)) => {
                let mut t = self.slots.lock();
                match t.unproven.get_mut(&self.id) {
                    Some(u) => u.permit = Some(p),
                    None => self.permit = Some(p),
                }
                true
            }
            // The semaphore is never closed; a timeout leaves us without.
            _ => false,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.slots.lock();
        t.live.remove(&self.id);
        // An unproven connection's permit goes back here, under the lock.
        drop(t.unprove(self.id));
        if let Some(n) = t.per_ip.get_mut(&self.ip) {
            n.held -= 1;
            if n.held == 0 {
                t.per_ip.remove(&self.ip);
            }
        }
        // The permit (a field) is released after this, once the table no
        // longer counts the connection.
    }
}

/// Evicts `victim`: a Close frame with `reason`, then, if the connection
/// has not ended within [`EVICT_GRACE`], an abort. Returns when it has
/// ended.
pub(crate) async fn evict(victim: Arc<Shared>, reason: String) {
    victim.set_reason(CloseReason::Local(reason.clone()));
    victim.out.begin_close(reason);
    if tokio::time::timeout(EVICT_GRACE, victim.done.cancelled())
        .await
        .is_err()
    {
        victim.cancel.cancel();
        victim.done.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use bytes::BytesMut;

    use super::*;
    use crate::{
        out_queue::OutQueue,
        shared::{PeerInfo, PeerVerified},
    };

    fn shared() -> Arc<Shared> {
        let out = OutQueue::new(
            BytesMut::new(),
            1024,
            1024,
            usize::MAX,
            Duration::from_secs(1),
        );
        Arc::new(Shared::new(
            out,
            PeerInfo {
                addr: "p".into(),
                uid: 1,
                socket_addr: "127.0.0.1:1".parse().expect("literal"),
                verified: PeerVerified::Secret,
                app_flags: 0,
            },
        ))
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    fn now_slot(a: Admitted) -> Slot {
        match a {
            Admitted::Now(s) => s,
            other => panic!("expected a free slot, got {other:?}"),
        }
    }

    #[test]
    fn the_per_ip_bound_refuses_one_address_and_not_others() {
        let slots = Arc::new(Slots::new(10, 2, 10, None));
        let now = Instant::now();
        // Proven connections: an unproven one would be evicted instead.
        let mut a1 = now_slot(slots.admit(A, now).unwrap());
        let mut a2 = now_slot(slots.admit(A, now).unwrap());
        a1.proven();
        a2.proven();
        let err = slots.admit(A, now).unwrap_err();
        assert_eq!(
            err.to_string(),
            "too many inbound connections from 10.0.0.1 (limit 2 per address); connection closed"
        );
        let _b1 = now_slot(slots.admit(B, now).unwrap());
        drop(a1);
        let _a3 = now_slot(slots.admit(A, now).unwrap());
        assert_eq!(slots.lock().per_ip[&A].held, 2);
    }

    #[test]
    fn a_full_endpoint_evicts_the_connection_idle_longest_once() {
        let slots = Arc::new(Slots::new(2, 10, 10, Some(Duration::from_secs(30))));
        let t0 = Instant::now();
        let (s1, s2) = (shared(), shared());
        let mut c1 = now_slot(slots.admit(A, t0).unwrap());
        c1.proven();
        c1.attach(&s1);
        let mut c2 = now_slot(slots.admit(B, t0).unwrap());
        c2.proven();
        c2.attach(&s2);
        // Nobody idle for 30 s yet.
        assert!(matches!(
            slots.admit(A, t0 + Duration::from_secs(1)),
            Err(TransportError::TooManyConnections { limit: 2 })
        ));
        // s1 carried an application frame later than s2: s2 goes.
        std::thread::sleep(Duration::from_millis(5));
        s1.touch_app();
        let later = t0 + Duration::from_secs(60);
        match slots.admit(A, later).unwrap() {
            Admitted::AfterEviction { victim, idle, .. } => {
                assert!(Arc::ptr_eq(&victim, &s2));
                assert!(idle >= Duration::from_secs(59), "{idle:?}");
            }
            other => panic!("expected an eviction, got {other:?}"),
        }
        // s2 is marked: the next newcomer takes s1, then nobody is left.
        match slots.admit(B, later).unwrap() {
            Admitted::AfterEviction { victim, .. } => assert!(Arc::ptr_eq(&victim, &s1)),
            other => panic!("expected an eviction, got {other:?}"),
        }
        assert!(slots.admit(B, later).is_err());
    }

    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

    fn evicted_unproven(a: Admitted) -> (Slot, IpAddr, usize) {
        match a {
            Admitted::EvictedUnproven { slot, ip, unproven } => (slot, ip, unproven),
            other => panic!("expected an unproven eviction, got {other:?}"),
        }
    }

    #[test]
    fn an_address_at_its_unproven_bound_gives_up_its_oldest_handshake() {
        let slots = Arc::new(Slots::new(100, 50, 3, None));
        let t0 = Instant::now();
        let held: Vec<Slot> = (0..3u64)
            .map(|i| now_slot(slots.admit(A, t0 + Duration::from_millis(i)).unwrap()))
            .collect();
        let (fourth, ip, unproven) =
            evicted_unproven(slots.admit(A, t0 + Duration::from_secs(1)).unwrap());
        assert_eq!((ip, unproven), (A, 3));
        // The oldest was told; the others were not.
        assert!(held[0].evict.is_cancelled());
        assert!(!held[1].evict.is_cancelled() && !held[2].evict.is_cancelled());
        assert!(fourth.has_permit(), "the endpoint had room");
        // A proven connection no longer counts: the next one evicts
        // nobody once two have proved.
        drop(held);
        let mut p1 = now_slot(slots.admit(A, t0).unwrap());
        let mut p2 = now_slot(slots.admit(A, t0).unwrap());
        p1.proven();
        p2.proven();
        let _p3 = now_slot(slots.admit(A, t0).unwrap());
        assert_eq!(slots.lock().per_ip[&A].unproven, 2);
        assert_eq!(slots.lock().per_ip[&A].held, 4);
        // Another address is not affected by A's bound.
        let _b = now_slot(slots.admit(B, t0).unwrap());
    }

    #[test]
    fn a_full_endpoint_evicts_the_oldest_unproven_of_the_busiest_address_first() {
        let slots = Arc::new(Slots::new(5, 10, 10, Some(Duration::from_secs(30))));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // An established, idle connection: not chosen while anything is
        // in its handshake.
        let s1 = shared();
        let mut est = now_slot(slots.admit(C, at(0)).unwrap());
        est.proven();
        est.attach(&s1);
        let b1 = now_slot(slots.admit(B, at(1)).unwrap());
        let a1 = now_slot(slots.admit(A, at(2)).unwrap());
        let a2 = now_slot(slots.admit(A, at(3)).unwrap());
        let _a3 = now_slot(slots.admit(A, at(4)).unwrap());
        // Full. A has the most unproven: its oldest goes, though B's is
        // older.
        let later = t0 + Duration::from_secs(60);
        let (mut newcomer, ip, n) = evicted_unproven(slots.admit(B, later).unwrap());
        assert_eq!((ip, n), (A, 3));
        assert!(a1.evict.is_cancelled() && !b1.evict.is_cancelled());
        // The victim's permit passed to the newcomer at once: no wait,
        // and no other newcomer can take it first.
        assert!(newcomer.has_permit());
        assert_eq!(slots.global.available_permits(), 0);
        newcomer.proven();
        assert!(newcomer.permit.is_some());
        drop(a1);
        assert_eq!(slots.global.available_permits(), 0);
        // A still has the most unproven (two to B's one): its oldest goes
        // next, though B's is older.
        let (_n2, ip, _) = evicted_unproven(slots.admit(C, later).unwrap());
        assert_eq!(ip, A);
        assert!(a2.evict.is_cancelled());
        assert!(!b1.evict.is_cancelled());
    }
}
