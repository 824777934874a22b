//! Handing a read's batch to its recipient's mailbox, and parking it when
//! the mailbox is full: the reader never waits for an actor. A parked
//! batch waits in its recipient's [`Park`](crate::remote::flow::Park)
//! (within the connection's park bound), later batches for that recipient
//! queue behind it, and a task hands them over in order as the mailbox
//! frees room; only then is their credit given back, so the sender's
//! window closes behind a slow actor (see `flow`).
//!
//! The rules, for one batch:
//!
//! ```text
//!  charge it to the share ──refused──► dead letters (over the share)
//!         │
//!  recipient's park active? ──yes──► within the park bound? ──no──► dead letters
//!         │ no                               │ yes
//!         ▼                                  ▼
//!  push to the mailbox                 queued behind the parked batches
//!    ├─ taken ─────► credit back
//!    ├─ full ──────► inline recipient (no window)? ──yes──► dead letters
//!    │                    │ no
//!    │               within the park bound? ──no──► dead letters
//!    │                    │ yes
//!    │               parked; the first starts the task that hands over
//!    └─ closed ────► a new actor at the path takes the type? ──yes──► push to it
//!                         │ no
//!                         ▼
//!                    dead letters (actor stopped)
//! ```
//!
//! Dead letters give the batch's credit back, as a delivery does.

use std::sync::Arc;

use super::{
    conn::{Answerer, Conn, send_answer},
    runs::Run,
    share::{OVER_SHARE, Share},
};
use crate::{
    budget::Held,
    dead_letter::DeadLetterReason,
    mailbox::Refused,
    registry::{Registry, Target},
    remote::{
        flow::{ParkBudget, ParkRefused, ParkedBatch, Windowed},
        system_msg::SysWire,
    },
};

/// Why a batch for a full mailbox was dropped: the connection's bound.
const PARK_FULL: &str =
    "and this connection holds SystemConfig::set_max_parked_bytes for full mailboxes already";
/// Why a batch for a full mailbox was dropped: no window.
const INLINE_FULL: &str =
    "and the recipient came inline (past the link's recipient ids): no window to wait in";

/// Why a batch for a full mailbox was dropped, as a dead letter's reason.
fn mailbox_full(why: &'static str) -> DeadLetterReason {
    DeadLetterReason::MailboxFull(why.into())
}

/// What one connection holds parked for full mailboxes, against its bound.
pub(super) struct Parking {
    /// What this connection may hold for full mailboxes
    /// (`SystemConfig::set_max_parked_bytes`).
    budget: Arc<ParkBudget>,
}

impl Parking {
    pub(super) fn new(max_parked: usize) -> Self {
        Self {
            budget: Arc::new(ParkBudget::new(max_parked)),
        }
    }

    /// The bound, for a task that gives back what it handed over.
    pub(super) fn budget(&self) -> &Arc<ParkBudget> {
        &self.budget
    }

    /// Takes `bytes` to park for a full mailbox within the connection's
    /// bound, or says why not (the reason of the dead letters). The node's
    /// budget was charged for the batch before (`Share::charge`).
    pub(super) fn take(&self, bytes: usize) -> Result<(), DeadLetterReason> {
        self.budget
            .take(bytes)
            .map_err(|ParkRefused| mailbox_full(PARK_FULL))
    }

    /// Hands `run`'s batch `b` to its mailbox, or parks it, charging `cost`
    /// to `share` while it waits. Returns the actor that took it if it was
    /// not the run's target (a new one at the same path).
    pub(super) fn deliver(
        &self,
        conn: &Conn,
        share: &Share,
        run: &Run,
        mut b: ParkedBatch,
        cost: usize,
    ) -> Option<Arc<dyn Target>> {
        let (id, win, path) = (run.id, run.win.clone(), &run.path);
        let mut target = run.target.clone();
        let mut replaced = None;
        // Charged before it waits anywhere: its charge goes with it into
        // the park or the mailbox, and back when its actor is done.
        let parked = win.as_ref().is_some_and(|w| w.park.is_active());
        let kind = if parked { Held::Parked } else { Held::Queued };
        match share.charge(kind, cost) {
            Some(charge) => b.charge = charge,
            None => {
                let why = DeadLetterReason::OverShare(OVER_SHARE.into());
                lose(conn, id, win.as_deref(), path, &target, &b, &why);
                return None;
            }
        }
        if let Some(w) = &win
            && parked
        {
            // Behind what is parked already.
            let len = b.batch.len();
            if let Err(why) = self.take(len) {
                lose(conn, id, Some(w), path, &target, &b, &why);
                return None;
            }
            match w.park.append_if_active(b) {
                Ok(()) => return None,
                Err(back) => {
                    self.budget.give_back(len);
                    b = back;
                }
            }
        }
        loop {
            match target.push_batch(&b.batch, b.n, &mut b.charge) {
                Ok(()) => {
                    conn.release(id, win.as_deref(), b.credit);
                    return replaced;
                }
                Err(Refused::Full) => {
                    self.park(conn, id, win, path, target, b);
                    return replaced;
                }
                Err(Refused::Closed) => match replacement(&conn.registry, path, &target) {
                    // A new actor may live at that path now: if it takes
                    // this type, the batch is its.
                    Some(t) => {
                        target = t.clone();
                        replaced = Some(t);
                    }
                    None => {
                        lose(
                            conn,
                            id,
                            win.as_deref(),
                            path,
                            &target,
                            &b,
                            &DeadLetterReason::ActorStopped,
                        );
                        return replaced;
                    }
                },
            }
        }
    }

    /// Parks a batch whose mailbox is full, and starts the task that hands
    /// it over if none runs. An inline recipient has no window, so nothing
    /// would bound what waits for it: its batch is a dead letter.
    fn park(
        &self,
        conn: &Conn,
        id: u32,
        win: Option<Arc<Windowed>>,
        path: &Arc<str>,
        target: Arc<dyn Target>,
        b: ParkedBatch,
    ) {
        let Some(win) = win else {
            return lose(
                conn,
                id,
                None,
                path,
                &target,
                &b,
                &mailbox_full(INLINE_FULL),
            );
        };
        if let Err(why) = self.take(b.batch.len()) {
            return lose(conn, id, Some(&win), path, &target, &b, &why);
        }
        if win.park.start(b) {
            tokio::spawn(
                Unpark {
                    id,
                    win,
                    target,
                    path: path.clone(),
                    registry: conn.registry.clone(),
                    budget: self.budget.clone(),
                    answer: conn.answerer(),
                }
                .run(),
            );
        }
    }
}

/// A batch given up on: dead letters, and its credit goes back.
fn lose(
    conn: &Conn,
    id: u32,
    win: Option<&Windowed>,
    path: &Arc<str>,
    target: &Arc<dyn Target>,
    b: &ParkedBatch,
    why: &DeadLetterReason,
) {
    conn.registry.dead_letters_n(
        b.n as u64,
        target.manifest_name(),
        &conn.registry.path(path),
        why,
    );
    conn.release(id, win, b.credit);
}

/// The actor that lives at `path` now in place of `old`, if it takes the
/// same type.
pub(super) fn replacement(
    registry: &Registry,
    path: &str,
    old: &Arc<dyn Target>,
) -> Option<Arc<dyn Target>> {
    registry
        .lookup(path)
        .filter(|t| !Arc::ptr_eq(t, old) && t.manifest() == old.manifest())
}

/// The task that hands one recipient's parked batches to its mailbox as
/// it frees room, in order, crediting them back as they go.
struct Unpark {
    id: u32,
    win: Arc<Windowed>,
    target: Arc<dyn Target>,
    path: Arc<str>,
    registry: Arc<Registry>,
    budget: Arc<ParkBudget>,
    answer: Answerer,
}

impl Unpark {
    async fn run(mut self) {
        loop {
            self.target.wait_space().await;
            let mut released = 0;
            let done = {
                let mut q = self.win.park.lock();
                while let Some(b) = q.batches.front_mut() {
                    match self.target.push_batch(&b.batch, b.n, &mut b.charge) {
                        Ok(()) => {}
                        Err(Refused::Full) => break,
                        Err(Refused::Closed) => {
                            if let Some(t) = replacement(&self.registry, &self.path, &self.target) {
                                self.target = t;
                                continue;
                            }
                            self.registry.dead_letters_n(
                                b.n as u64,
                                self.target.manifest_name(),
                                &self.registry.path(&self.path),
                                &DeadLetterReason::ActorStopped,
                            );
                        }
                    }
                    let b = q.batches.pop_front().expect("a front batch");
                    self.budget.give_back(b.batch.len());
                    released += b.credit;
                }
                self.win.park.finish_if_empty(&mut q)
            };
            if released > 0
                && let Some(total) = self.win.flow.release(released)
            {
                send_answer(
                    self.answer.as_ref(),
                    &SysWire::Credit { id: self.id, total },
                );
            }
            if done {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::atomic::Ordering, time::Duration};

    use super::*;
    use crate::{
        budget::{NodeBudget, queued_cost},
        remote::inbound::{
            ids::Entry,
            runs::Runs,
            tests::{FakeTarget, answered, conn},
        },
    };

    /// Bounds the wait for a task to hand batches over.
    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Parking within `max` bytes, on a share of a node budget of 1 MiB.
    fn parking(max: usize) -> (Parking, Share, Arc<NodeBudget>) {
        let node = NodeBudget::new(1 << 20);
        let share = Share::new(node.connect([127, 0, 0, 1].into()));
        (Parking::new(max), share, node)
    }

    /// A recipient at `/user/t` on `registry`, with a window of `window`
    /// bytes (none: an inline recipient).
    fn recipient(registry: &Registry, window: Option<u64>) -> (Entry, Arc<FakeTarget>) {
        let target = Arc::new(FakeTarget::default());
        registry.register("/user/t", target.clone());
        let win = window.map(|w| Arc::new(Windowed::new(w)));
        (
            Entry::new("/user/t".into(), Some(target.clone()), win),
            target,
        )
    }

    /// Hands a batch of one 10-byte message (its envelope `credit` bytes)
    /// for `entry` (as id 1) to `parking`; returns the batch's length and
    /// the actor that took it in place of the entry's, if one did.
    fn deliver(
        parking: &Parking,
        conn: &Conn,
        share: &Share,
        entry: &Entry,
        credit: usize,
    ) -> (usize, Option<Arc<dyn Target>>) {
        let mut runs = Runs::default();
        runs.new_read(0);
        runs.push::<false>(1, entry, &[1; 10], credit, 0);
        let run = &mut runs.list[0];
        let (b, held) = run.take().expect("a batch");
        let len = b.batch.len();
        (len, parking.deliver(conn, share, run, b, queued_cost(held)))
    }

    async fn until(what: impl Fn() -> bool) {
        tokio::time::timeout(TIMEOUT, async {
            while !what() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("within the timeout");
    }

    #[tokio::test]
    async fn a_batch_taken_gives_its_credit_back() {
        let (conn, _, registry) = conn(true);
        let (parking, share, node) = parking(1_000);
        let (entry, target) = recipient(&registry, Some(40));
        deliver(&parking, &conn, &share, &entry, 10);
        assert_eq!(
            answered(&conn),
            Vec::<String>::new(),
            "a quarter window owed"
        );
        deliver(&parking, &conn, &share, &entry, 10);
        assert_eq!(answered(&conn), ["Credit { id: 1, total: 60 }"]);
        assert_eq!(target.counts(), [1, 1]);
        assert!(
            node.snapshot().held > 0,
            "charged while the actor holds them"
        );
        target.charges.lock().unwrap().clear();
        assert_eq!(node.snapshot().held, 0);
    }

    #[tokio::test]
    async fn a_full_mailbox_parks_and_later_batches_queue_behind_in_order() {
        let (conn, _, registry) = conn(true);
        let (parking, share, _) = parking(1_000);
        let (entry, target) = recipient(&registry, Some(1_000));
        target.full.store(true, Ordering::SeqCst);
        let (len, _) = deliver(&parking, &conn, &share, &entry, 10);
        let win = entry.win.as_ref().expect("a window");
        assert!(win.park.is_active());
        assert_eq!(parking.budget().used(), len);
        // Room now, but the next batch may not overtake the parked one.
        target.full.store(false, Ordering::SeqCst);
        let mut runs = Runs::default();
        runs.new_read(0);
        runs.push::<false>(1, &entry, &[2; 20], 10, 0);
        let (b, held) = runs.list[0].take().expect("a batch");
        let second = b.batch.len();
        // The task that hands them over runs once this test awaits.
        parking.deliver(&conn, &share, &runs.list[0], b, queued_cost(held));
        assert!(target.counts().is_empty(), "queued behind");
        target.make_room();
        until(|| target.counts().len() == 2).await;
        let batches = target.batches.lock().unwrap().clone();
        assert_eq!(
            (batches[0].1.len(), batches[1].1.len()),
            (len, second),
            "in order"
        );
        until(|| !win.park.is_active()).await;
        assert_eq!(parking.budget().used(), 0);
        assert_eq!(registry.dead_letter_count(), 0);
    }

    #[tokio::test]
    async fn nothing_is_parked_past_the_bound_or_for_an_inline_recipient() {
        let (conn, _, registry) = conn(true);
        let (bounded, share, node) = parking(20);
        let (entry, target) = recipient(&registry, Some(20));
        target.full.store(true, Ordering::SeqCst);
        deliver(&bounded, &conn, &share, &entry, 10);
        assert_eq!(registry.dead_letter_count(), 0, "parked");
        // Past the connection's bound: a dead letter, its credit back.
        deliver(&bounded, &conn, &share, &entry, 10);
        assert_eq!(registry.dead_letter_count(), 1);
        assert_eq!(answered(&conn), ["Credit { id: 1, total: 30 }"]);
        assert_eq!(bounded.budget().used(), 14, "the one parked batch");
        drop(bounded);
        let held = node.snapshot().held;
        assert!(held > 0, "the parked batch keeps its charge: {held}");
        // No window, nothing to bound what would wait: a dead letter,
        // though the connection's bound has room.
        let (roomy, share, _) = parking(1_000);
        let (inline, full) = recipient(&registry, None);
        full.full.store(true, Ordering::SeqCst);
        deliver(&roomy, &conn, &share, &inline, 10);
        assert_eq!(registry.dead_letter_count(), 2);
        assert_eq!(roomy.budget().used(), 0);
    }

    #[tokio::test]
    async fn a_batch_for_a_stopped_actor_goes_to_its_successor_of_the_same_type() {
        let (conn, _, registry) = conn(true);
        let (parking, share, _) = parking(1_000);
        let (entry, old) = recipient(&registry, Some(1_000));
        old.closed.store(true, Ordering::SeqCst);
        // Nobody new at the path yet: dead letters.
        let (_, replaced) = deliver(&parking, &conn, &share, &entry, 10);
        assert!(replaced.is_none());
        assert_eq!(registry.dead_letter_count(), 1);
        let new = Arc::new(FakeTarget::default());
        registry.register("/user/t", new.clone());
        let (_, replaced) = deliver(&parking, &conn, &share, &entry, 10);
        let replaced = replaced.expect("the successor took it");
        assert!(Arc::ptr_eq(&replaced, &(new.clone() as Arc<dyn Target>)));
        assert_eq!(new.counts(), [1]);
        assert_eq!(registry.dead_letter_count(), 1);
    }

    #[tokio::test]
    async fn a_batch_past_the_share_is_dead_letters_and_reads_pause() {
        let (conn, _, registry) = conn(true);
        let node = NodeBudget::new(100);
        let share = Share::new(node.connect([127, 0, 0, 1].into()));
        let parking = Parking::new(1_000);
        let (entry, target) = recipient(&registry, Some(1_000));
        deliver(&parking, &conn, &share, &entry, 10);
        assert!(target.counts().is_empty());
        assert_eq!(registry.dead_letter_count(), 1);
        assert!(share.must_hold_back());
    }
}
