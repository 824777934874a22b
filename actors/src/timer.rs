//! An actor's timers: one schedule per actor, owned by its [`Ctx`], driven
//! by the actor's own task. No task and no tokio timer per timer.
//!
//! Pure: time is passed in (`now`), so the schedule is tested without a
//! runtime. The actor's task (`actor::run_actor`) asks for the next
//! deadline, sleeps until it or a message (one `Sleep` while it waits,
//! only when timers are set), and on waking queues every due timer's
//! message into its own mailbox, behind what already arrived.
//!
//! ```text
//!  schedule_once ──► Once{msg} ──due──► queued ──handled──► gone
//!                        │                 │
//!  schedule_repeatedly ──► Repeat{make} ──due──► queued (entry stays, next deadline set)
//!                        │                 │
//!                    cancel ─────────► gone: a message already queued is dropped
//! ```
//!
//! A queued timer message carries its key; when the actor takes it, it is
//! handled only if the timer is still set (once: not cancelled; repeated:
//! not cancelled). So after `cancel_timer` no message of that timer is
//! handled, even one already in the mailbox (Akka's guarantee).
//!
//! [`Ctx`]: crate::Ctx

use std::{
    collections::{BTreeSet, HashMap},
    fmt,
    time::Duration,
};

use tokio::time::Instant;

/// Names a timer of one actor, to cancel it. Keys are never reused within
/// an actor's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey(u64);

type MakeMsg<M> = Box<dyn FnMut() -> M + Send>;

enum Kind<M> {
    /// The message, until it is queued.
    Once(Option<M>),
    Repeat {
        interval: Duration,
        make: MakeMsg<M>,
    },
}

struct Entry<M> {
    /// `None` once a one-shot timer's message is queued (the entry stays
    /// until it is handled, so that a cancel can still drop it).
    deadline: Option<Instant>,
    /// A message of this timer is in the mailbox, not yet handled. A
    /// repeated timer skips its ticks meanwhile, so an actor slower than
    /// its own timer holds at most one of its messages, not a growing
    /// backlog.
    queued: bool,
    kind: Kind<M>,
}

/// The timers of one actor.
pub(crate) struct Timers<M> {
    entries: HashMap<TimerKey, Entry<M>>,
    /// Deadlines in order, for the next one and the due ones.
    schedule: BTreeSet<(Instant, TimerKey)>,
    next_key: u64,
}

impl<M> fmt::Debug for Timers<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timers")
            .field("set", &self.entries.len())
            .field("next", &self.next_deadline())
            .finish()
    }
}

impl<M> Default for Timers<M> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            schedule: BTreeSet::new(),
            next_key: 0,
        }
    }
}

impl<M> Timers<M> {
    fn key(&mut self) -> TimerKey {
        self.next_key += 1;
        TimerKey(self.next_key)
    }

    fn insert(&mut self, deadline: Instant, kind: Kind<M>) -> TimerKey {
        let key = self.key();
        self.schedule.insert((deadline, key));
        self.entries.insert(
            key,
            Entry {
                deadline: Some(deadline),
                queued: false,
                kind,
            },
        );
        key
    }

    /// A timer that queues `msg` once, at `now + delay`.
    pub(crate) fn once(&mut self, now: Instant, delay: Duration, msg: M) -> TimerKey {
        self.insert(now + delay, Kind::Once(Some(msg)))
    }

    /// A timer that queues `make()` every `interval`, first at
    /// `now + interval`. A zero interval is taken as 1 ms, so a repeated
    /// timer cannot starve the actor's mailbox.
    pub(crate) fn repeat(
        &mut self,
        now: Instant,
        interval: Duration,
        make: MakeMsg<M>,
    ) -> TimerKey {
        let interval = interval.max(Duration::from_millis(1));
        self.insert(now + interval, Kind::Repeat { interval, make })
    }

    /// Cancels `key`; true if it was set. A message of it already queued
    /// will not be handled.
    pub(crate) fn cancel(&mut self, key: TimerKey) -> bool {
        match self.entries.remove(&key) {
            Some(e) => {
                if let Some(d) = e.deadline {
                    self.schedule.remove(&(d, key));
                }
                true
            }
            None => false,
        }
    }

    /// Cancels every timer (an actor restarting): messages of them already
    /// queued are dropped when taken. Keys stay unique: a key of the old
    /// instance never names a timer of the new one.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.schedule.clear();
    }

    /// True if no timer is set (the actor's task then waits on its
    /// mailbox alone, as without timers).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The earliest deadline, if any timer is waiting for one.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.schedule.first().map(|&(d, _)| d)
    }

    /// The next timer due at `now` and its message, rescheduling a
    /// repeated one. A repeated timer that fell behind (the actor was busy
    /// for more than an interval) fires once and resumes an interval after
    /// `now`: no burst of catch-up messages. A repeated timer whose last
    /// message is still queued skips the tick.
    pub(crate) fn poll_due(&mut self, now: Instant) -> Option<(TimerKey, M)> {
        loop {
            let &(deadline, key) = self.schedule.first().filter(|(d, _)| *d <= now)?;
            self.schedule.remove(&(deadline, key));
            let entry = self
                .entries
                .get_mut(&key)
                .expect("every scheduled key has an entry (cancel removes both)");
            match &mut entry.kind {
                Kind::Once(msg) => {
                    entry.deadline = None;
                    entry.queued = true;
                    let msg = msg.take().expect("a one-shot timer is scheduled once");
                    return Some((key, msg));
                }
                Kind::Repeat { interval, make } => {
                    let mut next = deadline + *interval;
                    if next <= now {
                        next = now + *interval;
                    }
                    entry.deadline = Some(next);
                    self.schedule.insert((next, key));
                    if !entry.queued {
                        entry.queued = true;
                        return Some((key, make()));
                    }
                }
            }
        }
    }

    /// A timer message of `key` was taken from the mailbox: whether it is
    /// still wanted (its timer was not cancelled). A one-shot timer ends
    /// here.
    pub(crate) fn take_delivered(&mut self, key: TimerKey) -> bool {
        match self.entries.get(&key) {
            None => false,
            Some(Entry {
                kind: Kind::Once(_),
                ..
            }) => {
                self.entries.remove(&key);
                true
            }
            Some(_) => {
                if let Some(e) = self.entries.get_mut(&key) {
                    e.queued = false;
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn once_fires_at_its_deadline_and_only_once() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let k = t.once(t0, 10 * MS, "a");
        assert_eq!(t.poll_due(t0 + 9 * MS), None);
        assert_eq!(t.poll_due(t0 + 10 * MS), Some((k, "a")));
        assert_eq!(t.poll_due(t0 + 100 * MS), None);
        assert!(t.take_delivered(k));
        assert!(t.is_empty());
    }

    #[test]
    fn due_timers_come_in_deadline_order() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let late = t.once(t0, 20 * MS, 2);
        let early = t.once(t0, 10 * MS, 1);
        assert_eq!(t.next_deadline(), Some(t0 + 10 * MS));
        assert_eq!(t.poll_due(t0 + 30 * MS), Some((early, 1)));
        assert_eq!(t.poll_due(t0 + 30 * MS), Some((late, 2)));
    }

    #[test]
    fn repeat_reschedules_without_catch_up_bursts() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let mut n = 0;
        let k = t.repeat(
            t0,
            10 * MS,
            Box::new(move || {
                n += 1;
                n
            }),
        );
        assert_eq!(t.poll_due(t0 + 10 * MS), Some((k, 1)));
        assert!(t.take_delivered(k));
        assert_eq!(t.next_deadline(), Some(t0 + 20 * MS));
        // 5 intervals late: one message, next one an interval later.
        assert_eq!(t.poll_due(t0 + 70 * MS), Some((k, 2)));
        assert_eq!(t.poll_due(t0 + 70 * MS), None);
        assert_eq!(t.next_deadline(), Some(t0 + 80 * MS));
        assert!(t.take_delivered(k));
        assert!(!t.is_empty());
    }

    #[test]
    fn repeat_skips_ticks_while_its_last_message_waits() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let k = t.repeat(t0, 10 * MS, Box::new(|| ()));
        assert_eq!(t.poll_due(t0 + 10 * MS), Some((k, ())));
        // Not handled yet: the next ticks are skipped, not queued.
        assert_eq!(t.poll_due(t0 + 20 * MS), None);
        assert_eq!(t.poll_due(t0 + 30 * MS), None);
        assert_eq!(t.next_deadline(), Some(t0 + 40 * MS));
        assert!(t.take_delivered(k));
        assert_eq!(t.poll_due(t0 + 40 * MS), Some((k, ())));
    }

    #[test]
    fn cancel_drops_a_message_already_queued() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let k = t.once(t0, MS, ());
        assert!(t.poll_due(t0 + MS).is_some());
        assert!(t.cancel(k));
        assert!(!t.take_delivered(k));
        assert!(!t.cancel(k));
        let r = t.repeat(t0, MS, Box::new(|| ()));
        assert!(t.poll_due(t0 + MS).is_some());
        assert!(t.cancel(r));
        assert!(!t.take_delivered(r));
        assert_eq!(t.next_deadline(), None);
        assert!(t.is_empty());
    }

    #[test]
    fn clear_drops_queued_messages_and_never_reuses_a_key() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        let old = t.once(t0, MS, 1);
        assert!(t.poll_due(t0 + MS).is_some());
        t.repeat(t0, MS, Box::new(|| 2));
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
        let new = t.once(t0, MS, 3);
        assert_ne!(new, old);
        assert!(!t.take_delivered(old), "the old instance's queued message");
        assert_eq!(t.poll_due(t0 + MS), Some((new, 3)));
    }
}
