//! The system-message bookkeeping of one association: the reliable stream
//! each way (`reliable`), the watches this node placed on the peer's
//! actors, the identify requests waiting for an answer, and the asks
//! waiting for a reply from the node ([`Downs`]). No IO and no link: the
//! association puts the frames this hands out on its link.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use transport::Frame;

use super::{
    link::lock,
    reliable::{Overflow, SysIn, SysOut},
    system_msg::reliable_frame,
};
use crate::{
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    watch::WatchSink,
};

/// The answer to an identify: the actor's manifest id and name, or none.
pub(super) type IdentifyReply = Result<Option<(u32, String)>, IdentifyFailed>;

/// Why an identify got no answer.
#[derive(Debug)]
pub(super) enum IdentifyFailed {
    /// The node is unreachable (connecting failed, or the link closed).
    Unreachable(String),
    /// The link it went on lost a simultaneous connect and was closed by
    /// the peer; the link that won is coming: ask again.
    Replaced,
}

/// What one association has asked of its peer and not yet heard back.
///
/// Lock order: `inbound` → `out`; `watches` and `identifies` are leaves.
pub(super) struct Requests {
    watches: Mutex<HashMap<u64, (ActorPath, WatchSink)>>,
    identifies: Mutex<HashMap<u64, oneshot::Sender<IdentifyReply>>>,
    next_id: AtomicU64,
    out: Mutex<SysOut>,
    inbound: Mutex<SysIn>,
}

impl Requests {
    /// `capacity`: unacknowledged reliable messages kept
    /// (`SystemConfig::set_system_message_buffer`).
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            watches: Mutex::new(HashMap::new()),
            identifies: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            out: Mutex::new(SysOut::new(capacity)),
            inbound: Mutex::new(SysIn::default()),
        }
    }

    /// Work waits for a link: a watch, or an unacknowledged message.
    pub(super) fn needs_link(&self) -> bool {
        !lock(&self.watches).is_empty() || lock(&self.out).len() > 0
    }

    /// Registers a watch on the peer's actor at `path`; returns its id.
    /// As [`needs_link`](Self::needs_link), without waiting for a lock:
    /// `None` when one is held.
    pub(super) fn try_needs_link(&self) -> Option<bool> {
        let watches = !self.watches.try_lock().ok()?.is_empty();
        Some(watches || self.out.try_lock().ok()?.len() > 0)
    }

    pub(super) fn add_watch(&self, path: ActorPath, sink: WatchSink) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.watches).insert(id, (path, sink));
        id
    }

    /// Forgets the watches `sink` placed on the actor at `path`; their ids
    /// (to tell the peer).
    pub(super) fn remove_watches(&self, path: &ActorPath, sink: &WatchSink) -> Vec<u64> {
        let mut watches = lock(&self.watches);
        let ids: Vec<u64> = watches
            .iter()
            .filter(|(_, (p, s))| p == path && s.same(sink))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            watches.remove(id);
        }
        ids
    }

    /// The watched actor terminated: its watcher is told.
    pub(super) fn terminated(&self, watch_id: u64, reason: StopReason) {
        let watch = lock(&self.watches).remove(&watch_id);
        if let Some((path, sink)) = watch {
            sink.deliver(Terminated { path, reason });
        }
    }

    /// A new identify request: its id and where its answer arrives.
    pub(super) fn new_identify(&self) -> (u64, oneshot::Receiver<IdentifyReply>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.identifies).insert(id, tx);
        (id, rx)
    }

    /// The identify request is over (answered or given up).
    pub(super) fn forget_identify(&self, id: u64) {
        lock(&self.identifies).remove(&id);
    }

    /// The answer to identify request `id`.
    pub(super) fn answer_identify(&self, id: u64, manifest: Option<(u32, String)>) {
        if let Some(tx) = lock(&self.identifies).remove(&id) {
            let _ = tx.send(Ok(manifest));
        }
    }

    /// Every waiting identify fails with `why`.
    pub(super) fn fail_identifies(&self, why: IdentifyFailed) {
        let waiting: Vec<_> = lock(&self.identifies).drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(match &why {
                IdentifyFailed::Unreachable(r) => IdentifyFailed::Unreachable(r.clone()),
                IdentifyFailed::Replaced => IdentifyFailed::Replaced,
            }));
        }
    }

    /// The peer is gone (unreachable or quarantined): identifies fail and
    /// every watcher hears `Terminated` with `NodeUnreachable(reason)`.
    pub(super) fn fail_waiters(&self, reason: &str) {
        self.fail_identifies(IdentifyFailed::Unreachable(reason.to_owned()));
        self.fail_watches(reason);
    }

    /// Every watcher hears `Terminated` with `NodeUnreachable(reason)`.
    pub(super) fn fail_watches(&self, reason: &str) {
        let watches: Vec<_> = lock(&self.watches).drain().collect();
        for (_, (path, sink)) in watches {
            sink.deliver(Terminated {
                path,
                reason: StopReason::NodeUnreachable(reason.to_owned()),
            });
        }
    }

    /// The outbound reliable stream, locked.
    pub(super) fn out(&self) -> MutexGuard<'_, SysOut> {
        lock(&self.out)
    }

    /// The inbound reliable stream, locked (held while a message is
    /// delivered, so that two links of one node cannot deliver out of
    /// order).
    pub(super) fn inbound(&self) -> MutexGuard<'_, SysIn> {
        lock(&self.inbound)
    }

    /// Numbers `body` in the outbound stream and returns its frame, to be
    /// queued while `out` is still held so that frames go out in order.
    ///
    /// # Errors
    /// The buffer is full: the peer must be quarantined.
    pub(super) fn push_reliable(out: &mut SysOut, body: Bytes) -> Result<Frame, Overflow> {
        let seq = out.push(body.clone())?;
        Ok(reliable_frame(out.epoch(), seq, &body))
    }

    /// Drops the unacknowledged messages and starts a new stream epoch;
    /// returns how many were dropped.
    pub(super) fn reset_stream(&self) -> usize {
        lock(&self.out).reset()
    }
}

/// What the asks waiting on replies from one node learn of it going down,
/// as counts since the association was made: an ask notes them when it
/// starts and fails when one it cares about moves.
///
/// The registry of in-flight asks is this channel's receivers: an ask
/// subscribes before its request is sent (an atomic increment, no map, no
/// allocation) and unsubscribes by dropping its receiver, however it ends,
/// so nothing can leak and the count of asks in flight
/// ([`Downs::waiting`]) is exact. Going down wakes every ask of the node
/// once; events are rare, asks frequent.
#[derive(Debug, Clone, Default)]
pub(super) struct DownCounts {
    /// Declared unreachable, or a connect failed: every ask fails.
    all: u64,
    all_reason: Arc<str>,
    /// Incarnations quarantined: asks to refs of that incarnation fail.
    quarantines: u64,
    /// The last one quarantined, and why.
    quarantined_uid: u64,
    quarantine_reason: Arc<str>,
}

/// The sending side of [`DownCounts`], one per association.
pub(super) struct Downs(watch::Sender<DownCounts>);

impl Default for Downs {
    fn default() -> Self {
        Self(watch::Sender::new(DownCounts::default()))
    }
}

impl Downs {
    /// An ask starts waiting on this node.
    pub(super) fn subscribe(&self) -> AskWatch {
        let mut rx = self.0.subscribe();
        let start = rx.borrow_and_update().clone();
        AskWatch { rx, start }
    }

    /// Asks waiting on this node now.
    pub(super) fn waiting(&self) -> usize {
        self.0.receiver_count()
    }

    /// The node is down (unreachable, or unreachable by a connect): every
    /// ask waiting on it fails with `reason`.
    pub(super) fn all(&self, reason: &str) {
        self.0.send_modify(|d| {
            d.all += 1;
            d.all_reason = reason.into();
        });
    }

    /// Incarnation `uid` is quarantined: asks to its refs fail.
    pub(super) fn quarantined(&self, uid: u64, reason: &str) {
        self.0.send_modify(|d| {
            d.quarantines += 1;
            d.quarantined_uid = uid;
            d.quarantine_reason = reason.into();
        });
    }
}

/// One ask's view of its node going down (see [`DownCounts`]).
#[derive(Debug)]
pub(crate) struct AskWatch {
    rx: watch::Receiver<DownCounts>,
    start: DownCounts,
}

impl AskWatch {
    /// Resolves with the reason when the node goes down for a recipient
    /// of incarnation `uid` (0: unknown, any quarantine counts);
    /// `quarantined` says whether an incarnation is (the association's
    /// record, so that no quarantine is missed between two wake-ups).
    pub(super) async fn down(&mut self, uid: u64, quarantined: impl Fn(u64) -> bool) -> String {
        loop {
            if self.rx.changed().await.is_err() {
                // The association is gone, and with it every link: only
                // the timeout is left.
                return std::future::pending().await;
            }
            let now = self.rx.borrow_and_update();
            // The recipient's own incarnation ending is the more precise
            // reason when both happened.
            if now.quarantines != self.start.quarantines && (uid == 0 || quarantined(uid)) {
                return if now.quarantined_uid == uid || uid == 0 {
                    format!("quarantined: {}", now.quarantine_reason)
                } else {
                    format!("incarnation {uid:#x} quarantined")
                };
            }
            if now.all != self.start.all {
                return now.all_reason.to_string();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::*;

    fn path() -> ActorPath {
        ActorPath::parse("tcp://n@127.0.0.1:1/user/a").expect("valid")
    }

    fn once() -> (WatchSink, oneshot::Receiver<Terminated>) {
        let (tx, rx) = oneshot::channel();
        (
            WatchSink::Once(Arc::new(std::sync::Mutex::new(Some(tx)))),
            rx,
        )
    }

    #[test]
    fn watches_hear_their_actor_or_the_node_going() {
        let r = Requests::new(10);
        assert!(!r.needs_link());
        let (sink, mut first) = once();
        let id = r.add_watch(path(), sink);
        assert!(r.needs_link(), "a watch waits on the peer");
        r.terminated(id, StopReason::Stopped);
        assert_eq!(first.try_recv().expect("told").reason, StopReason::Stopped);
        assert!(!r.needs_link());
        let (sink, mut second) = once();
        r.add_watch(path(), sink);
        r.fail_waiters("phi 12");
        assert_eq!(
            second.try_recv().expect("told").reason,
            StopReason::NodeUnreachable("phi 12".into())
        );
    }

    #[test]
    fn identifies_are_answered_replaced_or_failed() {
        let r = Requests::new(10);
        let (a, mut ra) = r.new_identify();
        let (b, mut rb) = r.new_identify();
        assert_ne!(a, b);
        r.answer_identify(a, Some((7, "x".into())));
        assert!(matches!(ra.try_recv(), Ok(Ok(Some((7, _))))));
        r.fail_identifies(IdentifyFailed::Replaced);
        assert!(matches!(rb.try_recv(), Ok(Err(IdentifyFailed::Replaced))));
        let (c, mut rc) = r.new_identify();
        r.forget_identify(c);
        r.answer_identify(c, None);
        assert!(rc.try_recv().is_err(), "a forgotten request gets nothing");
    }

    #[tokio::test]
    async fn asks_fail_when_their_node_goes_down_and_leave_nothing_behind() {
        let downs = Downs::default();
        let none = |_| false;
        let mut a = downs.subscribe();
        let mut b = downs.subscribe();
        assert_eq!(downs.waiting(), 2);
        // Another incarnation quarantined: an ask to incarnation 7 waits on.
        downs.quarantined(8, "restarted");
        let waits = tokio::time::timeout(Duration::from_millis(10), a.down(7, none)).await;
        assert!(waits.is_err(), "not its incarnation");
        // Its own: fails, even if a later quarantine overwrote the last one.
        downs.quarantined(7, "restarted as 9");
        downs.quarantined(9, "shut down");
        assert_eq!(
            a.down(7, |uid| uid == 7).await,
            "incarnation 0x7 quarantined"
        );
        // Unreachable: every ask fails, with the reason.
        downs.all("unreachable: phi 11");
        assert_eq!(b.down(7, none).await, "unreachable: phi 11");
        // Asks that ended are gone from the count, however they ended.
        drop((a, b));
        assert_eq!(downs.waiting(), 0);
        // A later ask does not see what happened before it started.
        let mut c = downs.subscribe();
        let waits = tokio::time::timeout(Duration::from_millis(10), c.down(7, |_| true)).await;
        assert!(waits.is_err());
    }

    #[test]
    fn reliable_messages_are_numbered_kept_and_bounded() {
        let r = Requests::new(2);
        let mut out = r.out();
        Requests::push_reliable(&mut out, Bytes::from_static(b"a")).expect("room");
        Requests::push_reliable(&mut out, Bytes::from_static(b"b")).expect("room");
        assert!(Requests::push_reliable(&mut out, Bytes::from_static(b"c")).is_err());
        drop(out);
        assert!(r.needs_link(), "unacknowledged messages wait");
        assert_eq!(r.reset_stream(), 2);
        assert!(!r.needs_link());
    }
}
