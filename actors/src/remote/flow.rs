//! Flow control per recipient, so that a saturated actor slows only its
//! own senders: the receiving node grants each recipient on a link a
//! window of bytes, and a sender spends it as it sends. Like HTTP/2's
//! stream windows, every recipient has its own, so one full mailbox never
//! stops the link (and the heartbeats, acks and other recipients' messages
//! it carries).
//!
//! - Sending side: each `Recipient` (in `link`) keeps a
//!   [`SendFlow`]: bytes granted and sent on its current link, reset when
//!   a new link defines its id. A message goes only while `sent <
//!   granted` (checked and spent under the link's queue lock, so two plain
//!   loads and a store per message, no atomic read-modify-write); then
//!   `tell` returns `MailboxFull` and `send` waits on the link's
//!   [`LinkCredits::notify`]. Grants arrive as `SysWire::Credit` and are
//!   found by id in [`LinkCredits`].
//! - Receiving side: each compressed recipient of a connection has a
//!   [`RecvFlow`]. Bytes handed to the mailbox (or given up on, as dead
//!   letters) are credited back: once the window is half used, one
//!   `Credit` with the new total, so a credit costs one small frame per
//!   half window, not per message. A mailbox that is full does not stop
//!   the reader: its run is parked ([`Park`]) and handed over in order as
//!   the mailbox frees room, and only then credited.
//!
//! Credits count envelope bytes (the whole `Message` frame body), on both
//! sides. Recipients sent inline (ask reply slots, recipients past the
//! link's id limit) and large messages are not credited: reply slots never
//! fill, and the large-message lane is paced by its own acks.
//!
//! What a receiver holds is bounded by the windows it granted: per
//! recipient at most one window plus one message beyond what its mailbox
//! took. A sender that ignores its windows (or floods many recipients
//! whose mailboxes are full) meets the per-connection park bound
//! (`SystemConfig::set_max_parked_bytes`) and the connection's share of the
//! node-wide budget (`budget`): past either, messages for full mailboxes
//! are dead letters, counted, and past its share the connection's reads
//! pause (see `budget::Pressure`).

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::budget::Charge;

/// As the `lock` of `link` (this unit sits below it): nothing here leaves a
/// lock's state half-changed, so a poisoned lock is consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A recipient's credit on its current link (sending side).
#[derive(Debug, Default)]
pub(crate) struct SendFlow {
    /// Serializes a reset (a new link defined the id) with grants, so a
    /// grant meant for an older link is never applied to a newer one.
    guard: Mutex<()>,
    /// `(generation << 32) | id`: the link and id the counters are for.
    key: AtomicU64,
    granted: AtomicU64,
    sent: AtomicU64,
}

/// The key of recipient id `id` on the link of `generation`.
pub(crate) fn flow_key(generation: u32, id: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(id)
}

impl SendFlow {
    /// Whether a message may go now. Under the link's queue lock.
    #[inline(always)]
    pub(crate) fn has_credit(&self) -> bool {
        self.sent.load(Ordering::Relaxed) < self.granted.load(Ordering::Acquire)
    }

    /// Spends `bytes` of the window. Under the link's queue lock (the only
    /// writer of `sent`), so a load and a store suffice.
    #[inline(always)]
    pub(crate) fn spend(&self, bytes: usize) {
        let sent = self.sent.load(Ordering::Relaxed);
        self.sent.store(sent + bytes as u64, Ordering::Relaxed);
    }

    /// A new link defined the recipient as `key`: a fresh `window`.
    pub(crate) fn reset(&self, key: u64, window: u64) {
        let _g = lock(&self.guard);
        self.sent.store(0, Ordering::Relaxed);
        self.granted.store(window, Ordering::Release);
        self.key.store(key, Ordering::Release);
    }

    /// The receiver granted up to `total` bytes on the link and id `key`;
    /// false if the counters are for another link now.
    pub(crate) fn grant(&self, key: u64, total: u64) -> bool {
        let _g = lock(&self.guard);
        if self.key.load(Ordering::Acquire) != key {
            return false;
        }
        self.granted.fetch_max(total, Ordering::AcqRel);
        true
    }
}

/// The credits of one link (sending side): its recipients by id, and
/// where senders waiting for credit wait.
#[derive(Debug)]
pub(crate) struct LinkCredits {
    generation: u32,
    /// Each recipient's initial window on this link.
    pub(crate) window: u64,
    /// `by_id[id - 1]`: the flow of the recipient defined as `id`. Ids are
    /// handed out in order, so this grows by one per definition (at most
    /// `SystemConfig::set_max_recipient_ids`).
    by_id: Mutex<Vec<Arc<SendFlow>>>,
    /// Notified whenever a recipient on this link gets credit.
    pub(crate) notify: Notify,
}

impl LinkCredits {
    pub(crate) fn new(generation: u32, window: u64) -> Self {
        Self {
            generation,
            window,
            by_id: Mutex::new(Vec::new()),
            notify: Notify::new(),
        }
    }

    /// `flow` was just defined as `id` on this link: a fresh window. Under
    /// the link's queue lock, right after the id was handed out.
    pub(crate) fn define(&self, id: u32, flow: &Arc<SendFlow>) {
        flow.reset(flow_key(self.generation, id), self.window);
        let mut by_id = lock(&self.by_id);
        let i = id as usize - 1;
        if i >= by_id.len() {
            by_id.resize_with(i + 1, Arc::default);
        }
        by_id[i] = flow.clone();
    }

    /// The receiver granted recipient `id` up to `total` bytes. Returns
    /// false for an id this link never defined.
    pub(crate) fn grant(&self, id: u32, total: u64) -> bool {
        let flow = {
            let by_id = lock(&self.by_id);
            match (id as usize).checked_sub(1).and_then(|i| by_id.get(i)) {
                Some(f) => f.clone(),
                None => return false,
            }
        };
        if flow.grant(flow_key(self.generation, id), total) {
            self.notify.notify_waiters();
        }
        true
    }
}

/// A recipient's window on one connection (receiving side).
#[derive(Debug)]
pub(crate) struct RecvFlow {
    window: u64,
    /// Total bytes granted so far (the initial window included).
    granted: AtomicU64,
    /// Total bytes handed to the mailbox or given up on.
    done: AtomicU64,
}

impl RecvFlow {
    pub(crate) fn new(window: u64) -> Self {
        Self {
            window,
            granted: AtomicU64::new(window),
            done: AtomicU64::new(0),
        }
    }

    /// `bytes` left this node's custody (delivered, or dead letters).
    /// Returns the new total to grant when half a window or more is owed.
    pub(crate) fn release(&self, bytes: u64) -> Option<u64> {
        let done = self.done.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let want = done + self.window;
        let granted = self.granted.load(Ordering::Acquire);
        if want.saturating_sub(granted) >= self.window / 2 {
            let before = self.granted.fetch_max(want, Ordering::AcqRel);
            return (before < want).then_some(want);
        }
        None
    }
}

/// What the receiving side keeps per credited recipient of a connection.
#[derive(Debug)]
pub(crate) struct Windowed {
    pub(crate) flow: RecvFlow,
    pub(crate) park: Park,
}

impl Windowed {
    pub(crate) fn new(window: u64) -> Self {
        Self {
            flow: RecvFlow::new(window),
            park: Park::default(),
        }
    }
}

/// Batches that found their mailbox full, in arrival order, waiting for
/// room (receiving side, one per recipient of a connection). While
/// something is parked, the recipient's later batches queue behind it.
#[derive(Debug, Default)]
pub(crate) struct Park {
    /// Mirrors `queue.active`, so the reader checks it without the lock.
    active: AtomicBool,
    queue: Mutex<Parked>,
}

#[derive(Debug, Default)]
pub(crate) struct Parked {
    /// Set while a task hands the batches over.
    active: bool,
    pub(crate) batches: VecDeque<ParkedBatch>,
}

#[derive(Debug)]
/// One read's messages for one recipient: `n` records, `credit` envelope
/// bytes to credit back when handed over, and its charge on the
/// connection's share of the node's budget, which goes into the mailbox
/// with it.
pub(crate) struct ParkedBatch {
    pub(crate) batch: Bytes,
    pub(crate) n: usize,
    pub(crate) credit: u64,
    pub(crate) charge: Charge,
}

impl Park {
    /// Whether something is parked (a hint; `append_if_active` decides).
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Appends `b` behind what is parked, if anything is; gives it back
    /// when nothing is (the caller hands it over itself).
    pub(crate) fn append_if_active(&self, b: ParkedBatch) -> Result<(), ParkedBatch> {
        if !self.active.load(Ordering::Acquire) {
            return Err(b);
        }
        let mut q = lock(&self.queue);
        if !q.active {
            return Err(b);
        }
        q.batches.push_back(b);
        Ok(())
    }

    /// Parks `b` and marks the park active; true if it was not, so the
    /// caller starts the task that hands the batches over.
    pub(crate) fn start(&self, b: ParkedBatch) -> bool {
        let mut q = lock(&self.queue);
        q.batches.push_back(b);
        let started = !q.active;
        q.active = true;
        self.active.store(true, Ordering::Release);
        started
    }

    /// The parked batches, locked, for the task that hands them over.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Parked> {
        lock(&self.queue)
    }

    /// Ends the handing over if nothing is left (under the lock `q` of this
    /// park); true if it ended.
    pub(crate) fn finish_if_empty(&self, q: &mut Parked) -> bool {
        if q.batches.is_empty() {
            q.active = false;
            self.active.store(false, Ordering::Release);
            return true;
        }
        false
    }
}

/// Why [`ParkBudget::take`] refused: the connection's own bound
/// (`SystemConfig::set_max_parked_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParkRefused;

/// Bytes parked on one connection, against its own bound
/// (`SystemConfig::set_max_parked_bytes`). What a parked batch costs the
/// node-wide budget (`budget`) is its [`Charge`], taken before it was
/// parked or queued and carried with it.
#[derive(Debug)]
pub(crate) struct ParkBudget {
    used: AtomicUsize,
    max: usize,
}

impl ParkBudget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes `bytes` if they fit the connection's bound.
    pub(crate) fn take(&self, bytes: usize) -> Result<(), ParkRefused> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + bytes <= self.max).then_some(u + bytes)
            })
            .map(|_| ())
            .map_err(|_| ParkRefused)
    }

    pub(crate) fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_spends_its_window_and_waits_for_grants() {
        let credits = LinkCredits::new(7, 100);
        let flow = Arc::new(SendFlow::default());
        credits.define(1, &flow);
        assert!(flow.has_credit());
        flow.spend(60);
        assert!(flow.has_credit());
        flow.spend(60);
        assert!(!flow.has_credit(), "120 of 100 spent");
        assert!(credits.grant(1, 150));
        assert!(flow.has_credit());
        // Grants are totals: an old one does not take credit back.
        assert!(credits.grant(1, 110));
        assert!(flow.has_credit());
        assert!(!credits.grant(9, 1000), "never defined");
    }

    #[test]
    fn a_grant_for_an_older_link_is_ignored() {
        let old = LinkCredits::new(1, 100);
        let new = LinkCredits::new(2, 100);
        let flow = Arc::new(SendFlow::default());
        old.define(1, &flow);
        new.define(3, &flow);
        flow.spend(100);
        old.grant(1, 1_000_000);
        assert!(
            !flow.has_credit(),
            "the old link's grant is not this link's"
        );
        new.grant(3, 200);
        assert!(flow.has_credit());
    }

    #[test]
    fn credit_goes_back_once_half_a_window_is_released() {
        let flow = RecvFlow::new(100);
        assert_eq!(flow.release(30), None);
        assert_eq!(flow.release(20), Some(150), "half a window owed");
        assert_eq!(flow.release(10), None);
        assert_eq!(flow.release(40), Some(200));
    }

    #[test]
    fn a_park_queues_while_active_and_ends_when_empty() {
        let park = Park::default();
        let b = |n| ParkedBatch {
            batch: Bytes::new(),
            n,
            credit: 0,
            charge: Charge::default(),
        };
        assert!(park.append_if_active(b(1)).is_err(), "nothing parked");
        assert!(park.start(b(1)));
        assert!(!park.start(b(2)), "already active");
        assert!(park.append_if_active(b(3)).is_ok());
        let mut q = park.lock();
        assert_eq!(q.batches.iter().map(|b| b.n).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(!park.finish_if_empty(&mut q));
        q.batches.clear();
        assert!(park.finish_if_empty(&mut q));
        drop(q);
        assert!(park.append_if_active(b(4)).is_err());
    }

    #[test]
    fn the_park_budget_is_a_hard_bound() {
        let budget = ParkBudget::new(100);
        assert_eq!(budget.take(60), Ok(()));
        assert_eq!(budget.take(41), Err(ParkRefused));
        assert_eq!(budget.take(40), Ok(()));
        budget.give_back(100);
        assert_eq!(budget.used(), 0);
    }
}
