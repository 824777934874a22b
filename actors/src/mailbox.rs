//! A bounded mailbox with a separate system queue.
//!
//! Senders append under a short lock; the actor's task swaps the whole queue
//! out in one lock and processes the batch, so a burst costs one wake-up and
//! one lock on the actor's side, not one per message. The remote reader
//! appends all the messages of one socket read in one call.
//!
//! Overflow policy: a user message to a mailbox holding `capacity` or more
//! is refused: `tell` returns [`SendError::MailboxFull`](crate::SendError)
//! with the message, `send().await` waits for room, and the remote reader
//! stops reading (so TCP pushes back on the sending node). System messages
//! (termination notices) are never refused and are handled before any
//! queued user message. The actor's own timer messages and the marker of
//! a graceful stop (`stop_after_queued`) are not refused either, but queue
//! among user messages, in order of arrival.

use std::{
    collections::VecDeque,
    mem,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::{budget::Charge, lifecycle::Terminated, supervision::ChildEvent, timer::TimerKey};

/// What sits in a mailbox: a message, a batch of remote messages that
/// arrived in one socket read (which the actor's own task decodes), a
/// message of one of the actor's timers, or the marker of a stop after
/// the messages queued before it.
///
/// A batch is one buffer of `[len u32 LE][payload]` records: one
/// reference-counted allocation per read, not one per message, so the
/// reader's and the actor's cores do not trade a counter per message. It
/// holds its count of records and the charge on the sending connection's
/// share of the node's budget for peers (`budget::Charge`), given back
/// when the actor is done with it or it is dropped.
pub(crate) enum Queued<M> {
    Local(M),
    Batch(Bytes, u32, Charge),
    /// Handled only if the timer was not cancelled since (see `timer`).
    /// Boxed: timer messages are rare next to tells, and unboxed the key
    /// would grow every entry of a mailbox whose message is over 32 bytes.
    Timer(Box<(TimerKey, M)>),
    /// `ActorRef::stop_after_queued`: the actor stops when it reaches it.
    Stop,
}

impl<M> Queued<M> {
    /// User messages this entry holds, as counted against the capacity
    /// and in dead letters.
    pub(crate) fn count(&self) -> usize {
        match self {
            Self::Local(_) | Self::Timer(..) => 1,
            Self::Batch(_, n, _) => *n as usize,
            Self::Stop => 0,
        }
    }
}

/// The length field of a record that is a graceful stop from another node
/// (an envelope with `ENV_STOP`), not a message: it has no payload, and
/// no message is this long ([`next_record`] stops at it). It counts as
/// one record of its batch.
pub(crate) const STOP_RECORD: u32 = u32::MAX;

/// Where [`next_record`] stopped short of the end of `batch` (`at`), a
/// graceful stop: queues, at the front of `user`, the stop marker and
/// then the rest of the batch, which becomes dead letters when the actor
/// stops. The messages decoded before the marker are handled first.
/// False if `at` holds no stop marker (a batch this node did not build).
/// The rest carries no charge (`budget::Charge`): the caller holds the
/// batch's until the messages before the marker are handled.
#[cold]
#[inline(never)]
pub(crate) fn stop_in_batch<M>(user: &mut VecDeque<Queued<M>>, batch: &Bytes, at: usize) -> bool {
    if batch.get(at..at + 4) != Some(&STOP_RECORD.to_le_bytes()[..]) {
        return false;
    }
    let rest = batch.slice(at + 4..);
    let n = count_records(&rest);
    if n > 0 {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        user.push_front(Queued::Batch(rest, n, Charge::default()));
    }
    user.push_front(Queued::Stop);
    true
}

/// Records in a batch buffer, stop markers included.
pub(crate) fn count_records(batch: &[u8]) -> usize {
    let mut pos = 0;
    let mut n = 0;
    loop {
        if next_record_ext(batch, &mut pos).is_none() {
            if batch.get(pos..pos + 4) != Some(&STOP_RECORD.to_le_bytes()[..]) {
                return n;
            }
            pos += 4;
        }
        n += 1;
    }
}

/// The top bit of a record's length: the record begins with an extension
/// block (`serialization::Ext`: its serializer, a trace context). Lengths
/// stay below it (`SystemConfig::set_max_message_size` is at most
/// `i32::MAX`). [`STOP_RECORD`] has it set too and is told apart by its
/// whole value first.
pub(crate) const RECORD_EXT: u32 = 1 << 31;

/// Iterates the `(start, end)` ranges of the records of a batch buffer
/// whose records carry no extension block: it stops at the end, or at the
/// first record with [`RECORD_EXT`] set (that length reaches past the end
/// of any batch), leaving `pos` at it. Then [`next_record_ext`] reads on.
/// A batch of plain records costs what it did before blocks existed.
pub(crate) fn next_record(batch: &[u8], pos: &mut usize) -> Option<std::ops::Range<usize>> {
    let head = batch.get(*pos..*pos + 4)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let start = *pos + 4;
    let end = start.checked_add(len).filter(|&e| e <= batch.len())?;
    *pos = end;
    Some(start..end)
}

/// Iterates the records of a batch buffer: each one's range, and whether
/// it begins with an extension block ([`RECORD_EXT`]). Stops at the end,
/// or at a [`STOP_RECORD`], leaving `pos` at it.
pub(crate) fn next_record_ext(
    batch: &[u8],
    pos: &mut usize,
) -> Option<(std::ops::Range<usize>, bool)> {
    let head = batch.get(*pos..*pos + 4)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if len == STOP_RECORD {
        // A graceful stop: the caller finds it where `pos` stays.
        return None;
    }
    let start = *pos + 4;
    let end = start
        .checked_add((len & !RECORD_EXT) as usize)
        .filter(|&e| e <= batch.len())?;
    *pos = end;
    Some((start..end, len & RECORD_EXT != 0))
}

/// System messages: handled before user messages.
pub(crate) enum SystemMsg {
    Stop,
    Terminated(Terminated),
    /// From a child of this actor (see `supervision`).
    Child(ChildEvent),
    /// Restart in place: a sibling failed under an all-for-one strategy.
    Restart,
}

pub(crate) enum Refused {
    Full,
    Closed,
}

struct State<M> {
    user: VecDeque<Queued<M>>,
    /// User messages queued (a batch counts its records).
    queued: usize,
    /// Bytes of remote batches queued.
    queued_bytes: usize,
    system: VecDeque<SystemMsg>,
    idle: bool,
    closed: bool,
    space_waiters: bool,
}

pub(crate) struct Mailbox<M> {
    state: Mutex<State<M>>,
    wake: Notify,
    space: Notify,
    system_pending: AtomicBool,
    capacity: usize,
    /// Bytes of remote batches queued before the mailbox is full
    /// (`SystemConfig::set_mailbox_bytes`).
    capacity_bytes: usize,
}

impl<M> Mailbox<M> {
    /// A mailbox for `capacity` messages and `capacity_bytes` bytes of
    /// remote batches.
    pub(crate) fn new(capacity: usize, capacity_bytes: usize) -> Self {
        Self {
            state: Mutex::new(State {
                user: VecDeque::new(),
                queued: 0,
                queued_bytes: 0,
                system: VecDeque::new(),
                idle: false,
                closed: false,
                space_waiters: false,
            }),
            wake: Notify::new(),
            space: Notify::new(),
            system_pending: AtomicBool::new(false),
            capacity: capacity.max(1),
            capacity_bytes: capacity_bytes.max(1),
        }
    }

    /// Whether another user message may be queued now.
    #[inline]
    fn has_room(&self, st: &State<M>) -> bool {
        st.queued < self.capacity && st.queued_bytes < self.capacity_bytes
    }

    fn lock(&self) -> MutexGuard<'_, State<M>> {
        // Nothing runs user code under this lock, so it cannot be poisoned
        // half-way through an update.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_if_idle(&self, mut st: MutexGuard<'_, State<M>>) {
        let wake = mem::take(&mut st.idle);
        drop(st);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Appends one user message if there is room.
    #[inline]
    pub(crate) fn push(&self, m: Queued<M>) -> Result<(), (Refused, Queued<M>)> {
        let mut st = self.lock();
        if st.closed {
            return Err((Refused::Closed, m));
        }
        if !self.has_room(&st) {
            return Err((Refused::Full, m));
        }
        st.user.push_back(m);
        st.queued += 1;
        self.wake_if_idle(st);
        Ok(())
    }

    /// Appends one user message, waiting for room.
    pub(crate) async fn push_wait(&self, mut m: Queued<M>) -> Result<(), Queued<M>> {
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                if st.closed {
                    return Err(m);
                }
                if self.has_room(&st) {
                    st.user.push_back(m);
                    st.queued += 1;
                    self.wake_if_idle(st);
                    return Ok(());
                }
                st.space_waiters = true;
            }
            notified.await;
            m = match self.push(m) {
                Ok(()) => return Ok(()),
                Err((Refused::Closed, m)) => return Err(m),
                Err((Refused::Full, m)) => m,
            };
        }
    }

    /// Appends an entry the actor queued for itself (a timer message) or a
    /// stop marker, whatever the capacity: it is never refused for a full
    /// mailbox, so a full mailbox can be stopped gracefully, and a timer
    /// cannot lose its message. Each timer has at most one message in the
    /// mailbox (a repeated timer skips ticks while its last one waits), so
    /// the overshoot is bounded by the timers set, plus one stop marker
    /// per `stop_after_queued` call.
    /// Refused only once the mailbox is closed.
    pub(crate) fn push_unbounded(&self, m: Queued<M>) -> Result<(), Queued<M>> {
        let mut st = self.lock();
        if st.closed {
            return Err(m);
        }
        st.queued += m.count();
        st.user.push_back(m);
        self.wake_if_idle(st);
        Ok(())
    }

    /// Appends a batch of `n` remote messages (one socket read's worth) if
    /// the mailbox is under capacity, in messages and in bytes; the batch
    /// may overshoot either. Takes `charge` with it if appended (it stays
    /// with the caller if not).
    pub(crate) fn push_batch(
        &self,
        batch: &Bytes,
        n: usize,
        charge: &mut Charge,
    ) -> Result<(), Refused> {
        let mut st = self.lock();
        if st.closed {
            return Err(Refused::Closed);
        }
        if !self.has_room(&st) {
            st.space_waiters = true;
            return Err(Refused::Full);
        }
        // A batch is one read's records (or one large message): far fewer
        // than 2^32.
        let count = u32::try_from(n).unwrap_or(u32::MAX);
        st.user
            .push_back(Queued::Batch(batch.clone(), count, mem::take(charge)));
        st.queued += n;
        st.queued_bytes += batch.len();
        self.wake_if_idle(st);
        Ok(())
    }

    /// Whether the actor stopped (nothing is accepted any more).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until the mailbox has room or is closed.
    pub(crate) async fn wait_space(&self) {
        let notified = self.space.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut st = self.lock();
            if st.closed || self.has_room(&st) {
                return;
            }
            st.space_waiters = true;
        }
        notified.await;
    }

    /// Appends a system message; false if the mailbox is closed.
    pub(crate) fn push_system(&self, m: SystemMsg) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        st.system.push_back(m);
        self.system_pending.store(true, Ordering::Release);
        self.wake_if_idle(st);
        true
    }

    /// True if a system message arrived since the last take.
    #[inline]
    pub(crate) fn system_pending(&self) -> bool {
        self.system_pending.load(Ordering::Acquire)
    }

    /// Moves pending system messages into `sys`.
    pub(crate) fn take_system(&self, sys: &mut VecDeque<SystemMsg>) {
        let mut st = self.lock();
        self.system_pending.store(false, Ordering::Release);
        sys.append(&mut st.system);
    }

    /// Waits for messages and swaps everything queued into `user` and
    /// `sys` (which must be empty). Returns false once closed and drained.
    pub(crate) async fn recv_all(
        &self,
        user: &mut VecDeque<Queued<M>>,
        sys: &mut VecDeque<SystemMsg>,
    ) -> bool {
        loop {
            {
                let mut st = self.lock();
                if !st.user.is_empty() || !st.system.is_empty() {
                    mem::swap(&mut st.user, user);
                    st.queued = 0;
                    st.queued_bytes = 0;
                    sys.append(&mut st.system);
                    self.system_pending.store(false, Ordering::Release);
                    let wake = mem::take(&mut st.space_waiters);
                    drop(st);
                    if wake {
                        self.space.notify_waiters();
                    }
                    return true;
                }
                if st.closed {
                    return false;
                }
                st.idle = true;
            }
            self.wake.notified().await;
        }
    }

    /// Waits for system messages only and moves them into `sys`, leaving
    /// user messages queued (and counted against the capacity): an actor
    /// waiting for its children to stop, or for a restart's backoff,
    /// still hears a stop. Returns false once closed.
    pub(crate) async fn recv_system(&self, sys: &mut VecDeque<SystemMsg>) -> bool {
        loop {
            {
                let mut st = self.lock();
                if !st.system.is_empty() {
                    sys.append(&mut st.system);
                    self.system_pending.store(false, Ordering::Release);
                    return true;
                }
                if st.closed {
                    return false;
                }
                // A user message wakes this too; it goes round again.
                st.idle = true;
            }
            self.wake.notified().await;
        }
    }

    /// Closes the mailbox; returns the user messages still queued (dead
    /// letters). Waiting senders are released.
    pub(crate) fn close(&self) -> usize {
        let mut st = self.lock();
        st.closed = true;
        let n = st.queued;
        st.queued = 0;
        st.queued_bytes = 0;
        // Dropped after the lock: a dropped ask's reply ref fails its ask
        // (`reply`), which should not run under the mailbox's lock.
        let user = std::mem::take(&mut st.user);
        st.system.clear();
        drop(st);
        self.space.notify_waiters();
        drop(user);
        n
    }

    /// Closes the mailbox as [`close`](Self::close) does, but hands over
    /// the user messages it held instead of dropping them: an actor that
    /// stops fails the asks among them (see `actor::drop_unhandled`).
    pub(crate) fn close_taking(&self) -> VecDeque<Queued<M>> {
        let mut st = self.lock();
        st.closed = true;
        st.queued = 0;
        st.queued_bytes = 0;
        let user = std::mem::take(&mut st.user);
        st.system.clear();
        drop(st);
        self.space.notify_waiters();
        user
    }

    /// User messages queued now.
    pub(crate) fn len(&self) -> usize {
        self.lock().queued
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::{BufMut, Bytes, BytesMut};

    use super::{Queued, RECORD_EXT, STOP_RECORD, next_record, next_record_ext, stop_in_batch};

    #[test]
    fn a_stop_record_ends_the_messages_before_it_and_queues_the_rest() {
        let mut b = BytesMut::new();
        for (i, p) in [&b"one"[..], b"two"].into_iter().enumerate() {
            b.put_u32_le(p.len() as u32);
            b.put_slice(p);
            if i == 0 {
                b.put_u32_le(STOP_RECORD);
            }
        }
        b.put_u32_le(STOP_RECORD);
        let batch = b.freeze();
        let mut pos = 0;
        let range = next_record(&batch, &mut pos).unwrap();
        assert_eq!(&batch[range], b"one");
        assert_eq!(
            next_record(&batch, &mut pos),
            None,
            "the marker is no message"
        );
        let mut user: VecDeque<Queued<u8>> = VecDeque::from([Queued::Local(9)]);
        assert!(stop_in_batch(&mut user, &batch, pos));
        assert!(matches!(user[0], Queued::Stop));
        // "two" and the second marker: left for dead letters at the stop.
        assert!(matches!(user[1], Queued::Batch(_, 2, _)));
        assert!(matches!(user[2], Queued::Local(9)));
        // Where there is no marker, nothing is queued.
        let plain = Bytes::from_static(&[1, 0, 0, 0]);
        let mut user: VecDeque<Queued<u8>> = VecDeque::new();
        assert!(!stop_in_batch(&mut user, &plain, 0));
        assert!(user.is_empty());
    }

    #[test]
    fn a_stop_record_is_no_extension_record_though_it_has_the_top_bit() {
        // An extension record, a graceful stop, then a plain record: the
        // stop's length has RECORD_EXT's bit set too and must not read as
        // an extension record that runs past the batch.
        let mut b = BytesMut::new();
        b.put_u32_le(3 | RECORD_EXT);
        b.put_slice(b"ext");
        b.put_u32_le(STOP_RECORD);
        b.put_u32_le(5);
        b.put_slice(b"plain");
        let batch = b.freeze();
        let mut pos = 0;
        assert_eq!(
            next_record(&batch, &mut pos),
            None,
            "plain decode stops at the block"
        );
        let (range, ext) = next_record_ext(&batch, &mut pos).unwrap();
        assert_eq!((&batch[range], ext), (&b"ext"[..], true));
        assert_eq!(next_record_ext(&batch, &mut pos), None, "stops at the stop");
        let mut user: VecDeque<Queued<u8>> = VecDeque::new();
        assert!(stop_in_batch(&mut user, &batch, pos));
        assert!(matches!(user[0], Queued::Stop));
        assert!(
            matches!(user[1], Queued::Batch(_, 1, _)),
            "the plain record behind it"
        );
    }

    #[test]
    fn a_timer_entry_does_not_grow_the_mailbox_entry() {
        // One word for the variant, then the largest of a message and a
        // batch (`Bytes`, its count beside the variant's tag, and its
        // 16-byte charge): as before timers existed.
        let size = |m: usize| m.max(48) + 8;
        assert!(std::mem::size_of::<Queued<[u8; 64]>>() <= size(64));
        assert!(std::mem::size_of::<Queued<u64>>() <= size(8));
    }
}
