//! The system-message bookkeeping of one association: the reliable stream
//! each way (`reliable`), the watches this node placed on the peer's
//! actors, and the identify requests waiting for an answer. No IO and no
//! link: the association puts the frames this hands out on its link.

use std::{
    collections::HashMap,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use tokio::sync::oneshot;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
