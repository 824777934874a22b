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
//! A slot may also hold a [`PendingCharge`]: what its pending handshake
//! costs, charged to the endpoint's [`Admission`] (see
//! [`Slots::charge_pending`]). It is given back when the peer proves
//! itself, when the connection ends, and at once when it is evicted. A
//! refused charge evicts the oldest pending handshake holding one, from
//! the address with the most, as a full endpoint does, so that never-
//! proving connections cannot keep a peer that proves out of the budget
//! either.
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
    admission::{Admission, PendingCharge},
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
    /// What its handshake is charged to the endpoint's `Admission`, if
    /// anything; given back when it proves itself, ends or is evicted.
    charge: Option<PendingCharge>,
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

impl Admitted {
    /// The newcomer's slot.
    pub(crate) fn slot(&self) -> &Slot {
        match self {
            Self::Now(slot)
            | Self::EvictedUnproven { slot, .. }
            | Self::AfterEviction { slot, .. } => slot,
        }
    }
}

/// Which unproven connection [`Table::evict_unproven`] may choose.
#[derive(Debug, Clone, Copy)]
enum Victim {
    /// The oldest from this address.
    From(IpAddr),
    /// The oldest holding a global permit, from the address with the most
    /// unproven.
    HoldingPermit,
    /// The oldest holding a charge, from the address with the most
    /// unproven.
    HoldingCharge,
}

/// An unproven connection chosen for eviction, with what it gives up.
#[derive(Debug)]
struct Evicted {
    ip: IpAddr,
    /// Its address's unproven count when it was chosen.
    unproven: usize,
    permit: Option<OwnedSemaphorePermit>,
    /// Dropped by whoever holds this, giving the bytes back.
    charge: Option<PendingCharge>,
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
            evicted = t.evict_unproven(Victim::From(ip));
        } else if here.held >= self.per_ip_limit {
            return Err(TransportError::TooManyConnectionsFromIp {
                ip,
                limit: self.per_ip_limit,
            });
        }
        let mut permit = self.global.clone().try_acquire_owned().ok();
        if permit.is_none()
            && let Some(e) = &mut evicted
        {
            permit = e.permit.take();
        }
        let mut idle_victim = None;
        // Evictions' charges are given back once the lock is released.
        let mut also_evicted = None;
        if permit.is_none() {
            match t.evict_unproven(Victim::HoldingPermit) {
                Some(mut v) => {
                    permit = v.permit.take();
                    also_evicted = evicted.replace(v);
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
                charge: None,
                evicted_with: None,
                evict: evict.clone(),
            },
        );
        drop(t);
        drop(also_evicted);
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
            (None, Some(e)) => Admitted::EvictedUnproven {
                slot,
                ip: e.ip,
                unproven: e.unproven,
            },
            (None, None) => Admitted::Now(slot),
        })
    }

    /// Charges a pending handshake from `ip` of `bytes` to `admission`,
    /// before its slot is taken. If refused, the oldest pending handshake
    /// holding a charge, from the address with the most, is evicted and
    /// gives its charge back (the bytes of every pending handshake are the
    /// same), and the charge is asked once more. Returns the charge for
    /// [`Slot::hold`], and the evicted connection's address and its
    /// unproven count if one was evicted.
    ///
    /// # Errors
    /// [`TransportError::HandshakeMemoryRefused`] when refused twice (or
    /// refused with no pending handshake holding a charge): what the
    /// account holds is not pending handshakes, or not enough of them.
    pub(crate) fn charge_pending(
        &self,
        ip: IpAddr,
        admission: &dyn Admission,
        bytes: usize,
    ) -> Result<(PendingCharge, Option<(IpAddr, usize)>), TransportError> {
        if let Some(charge) = admission.charge_pending(ip, bytes) {
            return Ok((charge, None));
        }
        let refused = TransportError::HandshakeMemoryRefused { ip, bytes };
        let Some(victim) = self.lock().evict_unproven(Victim::HoldingCharge) else {
            return Err(refused);
        };
        let Evicted {
            ip: victim_ip,
            unproven,
            permit,
            charge,
        } = victim;
        // Given back before asking again, outside the lock; the victim's
        // task ends on its own (its eviction was signalled), and its permit
        // goes back to the semaphore.
        drop((charge, permit));
        match admission.charge_pending(ip, bytes) {
            Some(charge) => Ok((charge, Some((victim_ip, unproven)))),
            None => Err(refused),
        }
    }

    /// The limit on inbound connections.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

impl Table {
    /// Evicts an unproven connection that `pick` allows: the oldest from
    /// one address (any will do: the point is the address's count), or
    /// the oldest of the address with the most unproven among those
    /// holding a permit, or a charge. Returns it with what it gives up.
    fn evict_unproven(&mut self, pick: Victim) -> Option<Evicted> {
        let mut best: Option<(u64, usize, Instant)> = None;
        for (&id, u) in &self.unproven {
            let eligible = match pick {
                Victim::From(ip) => u.ip == ip,
                Victim::HoldingPermit => u.permit.is_some(),
                Victim::HoldingCharge => u.charge.is_some(),
            };
            if u.evicted_with.is_some() || !eligible {
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
        let (ip, permit, charge) = (u.ip, u.permit.take(), u.charge.take());
        if let Some(p) = self.per_ip.get_mut(&ip) {
            p.unproven -= 1;
        }
        Some(Evicted {
            ip,
            unproven: count,
            permit,
            charge,
        })
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
    /// its entry, with its permit and charge.
    fn unprove(&mut self, id: u64) -> Option<Unproven> {
        let u = self.unproven.remove(&id)?;
        if u.evicted_with.is_none()
            && let Some(p) = self.per_ip.get_mut(&u.ip)
        {
            p.unproven -= 1;
        }
        Some(u)
    }
}

impl Slot {
    /// The peer completed its handshake: no longer evicted as unproven,
    /// and its charge is given back (the application charges the
    /// connection from here on).
    pub(crate) fn proven(&mut self) {
        if !self.proven {
            self.proven = true;
            let unproven = self.slots.lock().unprove(self.id);
            if let Some(u) = unproven {
                self.permit = u.permit;
                // `u.charge` is dropped here, outside the lock.
            }
        }
    }

    /// Holds `charge` (from [`Slots::charge_pending`]) while this
    /// connection is unproven; it is given back when the connection proves
    /// itself, ends, or is evicted.
    pub(crate) fn hold(&self, charge: PendingCharge) {
        let mut t = self.slots.lock();
        match t.unproven.get_mut(&self.id) {
            Some(u) if u.evicted_with.is_none() => u.charge = Some(charge),
            // Proven or evicted already: nothing pending to charge.
            _ => {
                drop(t);
                drop(charge);
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
        // An unproven connection's permit goes back here, under the lock;
        // its charge once the lock is released.
        let charge = t.unprove(self.id).and_then(|u| {
            drop(u.permit);
            u.charge
        });
        if let Some(n) = t.per_ip.get_mut(&self.ip) {
            n.held -= 1;
            if n.held == 0 {
                t.per_ip.remove(&self.ip);
            }
        }
        drop(t);
        drop(charge);
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
        admission::tests::Account,
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

    /// A pending handshake's slot from `ip` at `at`, charged `bytes`.
    fn charged(
        slots: &Arc<Slots>,
        account: &Account,
        ip: IpAddr,
        at: Instant,
        bytes: usize,
    ) -> Slot {
        let (charge, evicted) = slots.charge_pending(ip, account, bytes).unwrap();
        assert!(evicted.is_none(), "room without evicting");
        let slot = now_slot(slots.admit(ip, at).unwrap());
        slot.hold(charge);
        slot
    }

    fn held(account: &Account) -> usize {
        account.held.load(std::sync::atomic::Ordering::Acquire)
    }

    #[test]
    fn a_pending_handshake_holds_its_charge_until_it_proves_or_ends() {
        let slots = Arc::new(Slots::new(10, 10, 10, None));
        let account = Account {
            limit: 100,
            ..Account::default()
        };
        let t0 = Instant::now();
        let mut a = charged(&slots, &account, A, t0, 30);
        let b = charged(&slots, &account, B, t0, 30);
        assert_eq!(held(&account), 60);
        // Proven: the application charges it from here on.
        a.proven();
        assert_eq!(held(&account), 30);
        drop(a);
        assert_eq!(held(&account), 30);
        // Ended in its handshake (failed, timed out).
        drop(b);
        assert_eq!(held(&account), 0);
    }

    #[test]
    fn a_refused_charge_evicts_the_oldest_pending_handshake_of_the_busiest_address() {
        let slots = Arc::new(Slots::new(10, 10, 10, None));
        let account = Account {
            limit: 90,
            ..Account::default()
        };
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let b1 = charged(&slots, &account, B, at(0), 30);
        let a1 = charged(&slots, &account, A, at(1), 30);
        let a2 = charged(&slots, &account, A, at(2), 30);
        // Full. A has the most pending: its oldest gives its charge back
        // at once, though B's is older.
        let (charge, evicted) = slots.charge_pending(C, &account, 30).unwrap();
        assert_eq!(evicted, Some((A, 2)));
        assert!(a1.evict.is_cancelled() && !b1.evict.is_cancelled());
        assert_eq!(held(&account), 90, "the newcomer holds what a1 gave back");
        let c1 = now_slot(slots.admit(C, at(3)).unwrap());
        c1.hold(charge);
        drop(a1);
        assert_eq!(held(&account), 90, "a1's charge went back once only");
        assert_eq!(
            account.refused.load(std::sync::atomic::Ordering::Acquire),
            1
        );
        // One pending each now: the oldest goes, b1.
        let (again, evicted) = slots.charge_pending(B, &account, 30).unwrap();
        assert_eq!(evicted, Some((B, 1)));
        assert!(b1.evict.is_cancelled() && !a2.evict.is_cancelled());
        // An evicted connection is never charged again: what it is handed
        // goes back at once.
        b1.hold(again);
        assert_eq!(held(&account), 60);
    }

    #[test]
    fn a_charge_is_refused_when_no_pending_handshake_can_give_enough_back() {
        let slots = Arc::new(Slots::new(10, 10, 10, None));
        let account = Account {
            limit: 100,
            ..Account::default()
        };
        // What established connections hold: not pending handshakes.
        let rest = account.charge_pending(B, 90).unwrap();
        let t0 = Instant::now();
        let a = charged(&slots, &account, A, t0, 10);
        let err = slots.charge_pending(C, &account, 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no room in the memory budget for a handshake from 10.0.0.3 (20 bytes refused); connection closed"
        );
        assert!(a.evict.is_cancelled(), "the oldest was asked to give way");
        // A proven connection holds no pending charge to give up: refused
        // without an eviction.
        let mut proven = charged(&slots, &account, A, t0, 10);
        proven.proven();
        assert!(slots.charge_pending(C, &account, 20).is_err());
        assert!(!proven.evict.is_cancelled());
        drop((rest, a));
        assert_eq!(held(&account), 0);
    }

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
