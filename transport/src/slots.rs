//! Inbound connection slots: the endpoint's bound on inbound connections,
//! the bound per remote IP address, and the eviction of idle connections
//! when every slot is taken.
//!
//! ```text
//!  accept loop ──admit(ip)──► per-IP count < limit? ──no──► refuse (TooManyConnectionsFromIp)
//!                                  │ yes
//!                             a global permit free? ──yes──► Now(slot): handshake
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
//! back the per-IP count and the permit. Idle means no application frame
//! (`Message`, `System`) since the last one, or since the start: the reader
//! stores the time once per read that delivers any (see
//! `Shared::touch_app`). The table lock is a leaf, and held only for map
//! updates; finding a victim scans the established inbound connections,
//! which happens only when the endpoint is full.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
    idle_after: Option<Duration>,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// Slots held per remote address (handshaking or established); an
    /// address with none has no entry.
    per_ip: HashMap<IpAddr, usize>,
    /// Started inbound connections, the candidates for eviction.
    live: HashMap<u64, Live>,
    next_id: u64,
}

#[derive(Debug)]
struct Live {
    shared: Weak<Shared>,
    /// Chosen as a victim already: not chosen twice.
    evicting: bool,
}

/// One inbound connection's hold on the endpoint's slots.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
    ip: IpAddr,
    /// The global permit; `None` while waiting for an evicted
    /// connection's.
    permit: Option<OwnedSemaphorePermit>,
}

/// What [`Slots::admit`] decided.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A slot is free: go ahead.
    Now(Slot),
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
    pub(crate) fn new(limit: usize, per_ip_limit: usize, idle_after: Option<Duration>) -> Self {
        Self {
            global: Arc::new(Semaphore::new(limit)),
            limit,
            per_ip_limit,
            idle_after,
            table: Mutex::new(Table::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every update is a single map operation: consistent even if a
        // holder panicked.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits an inbound connection from `ip` at `now`, before anything is
    /// read from it.
    ///
    /// # Errors
    /// [`TransportError::TooManyConnectionsFromIp`] when `ip` holds its
    /// limit; [`TransportError::TooManyConnections`] when the endpoint is
    /// full and no connection has been idle long enough to evict.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        now: Instant,
    ) -> Result<Admitted, TransportError> {
        let mut t = self.lock();
        let held = t.per_ip.get(&ip).copied().unwrap_or(0);
        if held >= self.per_ip_limit {
            return Err(TransportError::TooManyConnectionsFromIp {
                ip,
                limit: self.per_ip_limit,
            });
        }
        let permit = self.global.clone().try_acquire_owned().ok();
        let victim = match (&permit, self.idle_after) {
            (Some(_), _) => None,
            (None, Some(idle_after)) => match t.pick_victim(now, idle_after) {
                Some(v) => Some(v),
                None => return Err(TransportError::TooManyConnections { limit: self.limit }),
            },
            (None, None) => return Err(TransportError::TooManyConnections { limit: self.limit }),
        };
        *t.per_ip.entry(ip).or_insert(0) += 1;
        let id = t.next_id;
        t.next_id += 1;
        drop(t);
        let slot = Slot {
            slots: self.clone(),
            id,
            ip,
            permit,
        };
        Ok(match victim {
            None => Admitted::Now(slot),
            Some((victim, idle)) => Admitted::AfterEviction { slot, victim, idle },
        })
    }

    /// The limit on inbound connections.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

impl Table {
    /// The started connection idle longest, if that is at least
    /// `idle_after`; marked so that it is not chosen again.
    fn pick_victim(
        &mut self,
        now: Instant,
        idle_after: Duration,
    ) -> Option<(Arc<Shared>, Duration)> {
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
}

impl Slot {
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

    /// Waits at most `timeout` for the global permit (freed by the evicted
    /// connection); true once held.
    pub(crate) async fn wait_permit(&mut self, timeout: Duration) -> bool {
        if self.permit.is_some() {
            return true;
        }
        let acquire = self.slots.global.clone().acquire_owned();
        match tokio::time::timeout(timeout, acquire).await {
            Ok(Ok(p)) => {
                self.permit = Some(p);
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
        if let Some(n) = t.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
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
        let slots = Arc::new(Slots::new(10, 2, None));
        let now = Instant::now();
        let a1 = now_slot(slots.admit(A, now).unwrap());
        let _a2 = now_slot(slots.admit(A, now).unwrap());
        let err = slots.admit(A, now).unwrap_err();
        assert_eq!(
            err.to_string(),
            "too many inbound connections from 10.0.0.1 (limit 2 per address); connection closed"
        );
        let _b1 = now_slot(slots.admit(B, now).unwrap());
        drop(a1);
        let _a3 = now_slot(slots.admit(A, now).unwrap());
        assert_eq!(slots.lock().per_ip.get(&A), Some(&2));
    }

    #[test]
    fn a_full_endpoint_evicts_the_connection_idle_longest_once() {
        let slots = Arc::new(Slots::new(2, 10, Some(Duration::from_secs(30))));
        let t0 = Instant::now();
        let (s1, s2) = (shared(), shared());
        let c1 = now_slot(slots.admit(A, t0).unwrap());
        c1.attach(&s1);
        let c2 = now_slot(slots.admit(B, t0).unwrap());
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
}
