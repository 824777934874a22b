//! [`SingletonRef`]: a ref that finds the singleton's instance through
//! its cluster group, follows it as it moves, and buffers (in a
//! [`Buffer`]) while none is known.

use std::{
    fmt,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use bytes::BytesMut;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::{buffer::Buffer, cancel_token, group_name, lock};
use crate::{
    actor_ref::ActorRef,
    cluster::{Cluster, ClusterEvent, GroupEvent},
    error::{AskError, SendError},
    registry::Registry,
    serialization::RemoteMessage,
    system::ActorSystem,
    telemetry::SingletonMeters,
};

/// How long a ref waits before retrying a buffer flush that found the
/// instance's mailbox (or its link) full: short, as the instance is
/// draining it.
const FLUSH_RETRY: Duration = Duration::from_millis(20);

/// A ref to a cluster singleton, wherever it runs: from
/// [`Singleton::start`](super::Singleton::start) or
/// [`Singleton::proxy`](super::Singleton::proxy). Cheap to clone.
///
/// It sends to the instance listed in the cluster group
/// `singleton:<name>` (the youngest member's, when a move briefly lists
/// two: the singleton only moves to younger members). While none is
/// listed, it buffers up to the settings' `buffer_bytes` and delivers the
/// buffer in order once one is; what it sends meanwhile queues behind
/// the buffer.
///
/// Methods: [`tell`](Self::tell), [`send`](Self::send),
/// [`ask`](Self::ask); [`location`](Self::location), [`buffered`](Self::buffered).
pub struct SingletonRef<M> {
    shared: Arc<RefShared<M>>,
}

impl<M> Clone for SingletonRef<M> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<M> fmt::Debug for SingletonRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let location = lock(&self.shared.state)
            .target
            .as_ref()
            .map(|(n, _)| n.clone());
        f.debug_struct("SingletonRef")
            .field("name", &self.shared.name)
            .field("location", &location)
            .finish_non_exhaustive()
    }
}

struct RefShared<M> {
    name: String,
    group: String,
    cluster: Cluster,
    registry: Arc<Registry>,
    state: Mutex<RefState<M>>,
    /// Woken when an instance is known and the buffer is empty.
    ready: Notify,
    meters: Option<SingletonMeters>,
}

struct RefState<M> {
    /// The instance's node and ref.
    target: Option<(String, ActorRef<M>)>,
    /// Messages waiting for an instance.
    buffer: Buffer<M>,
}

impl<M: RemoteMessage> SingletonRef<M> {
    /// Sends `msg` without waiting: to the instance, or into the buffer
    /// while none is known (or the buffer is not yet delivered).
    ///
    /// # Errors
    /// As [`ActorRef::tell`] when it goes to the instance;
    /// [`SendError::BufferFull`] when the buffer holds its bound (the
    /// message comes back and is counted as a dead letter).
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        let mut st = lock(&self.shared.state);
        if st.buffer.is_empty()
            && let Some((_, target)) = &st.target
        {
            return target.tell(msg);
        }
        self.shared.hold(&mut st, msg)
    }

    /// Sends `msg`, waiting for room in the instance's mailbox (as
    /// [`ActorRef::send`]); while no instance is known it buffers as
    /// [`tell`](Self::tell) does, without waiting.
    ///
    /// # Errors
    /// As [`tell`](Self::tell).
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        let target = {
            let mut st = lock(&self.shared.state);
            match &st.target {
                Some((_, t)) if st.buffer.is_empty() => t.clone(),
                _ => return self.shared.hold(&mut st, msg),
            }
        };
        target.send(msg).await
    }

    /// Asks the singleton (as [`ActorRef::ask`]): waits, within
    /// `timeout`, for an instance to be known and the buffer delivered,
    /// then sends the request, so it arrives after what was buffered.
    ///
    /// # Errors
    /// As [`ActorRef::ask`]; [`AskError::Timeout`] also when no instance
    /// was known in time.
    pub async fn ask<R: Send + 'static>(
        &self,
        make: impl FnOnce(ActorRef<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AskError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ready = self.shared.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let target = {
                let st = lock(&self.shared.state);
                match &st.target {
                    Some((_, t)) if st.buffer.is_empty() => Some(t.clone()),
                    _ => None,
                }
            };
            if let Some(t) = target {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                return t.ask(make, left).await;
            }
            if tokio::time::timeout_at(deadline, ready).await.is_err() {
                return Err(AskError::Timeout(timeout));
            }
        }
    }

    /// The node (`name@host:port`) whose instance this ref sends to now;
    /// `None` while the singleton moves or is not known yet.
    pub fn location(&self) -> Option<String> {
        lock(&self.shared.state)
            .target
            .as_ref()
            .map(|(n, _)| n.clone())
    }

    /// Messages held in the buffer now.
    pub fn buffered(&self) -> usize {
        lock(&self.shared.state).buffer.len()
    }
}

impl<M> SingletonRef<M> {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
}

impl<M: RemoteMessage> SingletonRef<M> {
    /// A ref to singleton `name` with a buffer of `buffer_bytes`, and the
    /// task that follows membership and the group for it.
    pub(super) fn new(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        buffer_bytes: usize,
    ) -> Self {
        let shared = Arc::new(RefShared {
            name: name.to_owned(),
            group: group_name(name),
            cluster: cluster.clone(),
            registry: system.registry().clone(),
            state: Mutex::new(RefState {
                target: None,
                buffer: Buffer::new(buffer_bytes),
            }),
            ready: Notify::new(),
            meters: SingletonMeters::new(system.node(), name),
        });
        shared.refresh();
        tokio::spawn(follow(
            Arc::downgrade(&shared),
            cluster.subscribe_groups(),
            cluster.subscribe(),
            cancel_token(system),
        ));
        Self { shared }
    }
}

impl<M: RemoteMessage> RefShared<M> {
    /// Buffers `msg`, or refuses it past the bound.
    fn hold(&self, st: &mut RefState<M>, msg: M) -> Result<(), SendError<M>> {
        let limit = st.buffer.limit();
        let mut scratch = BytesMut::new();
        // A message that does not encode would not reach a remote
        // instance either; it is counted at its size in memory.
        let _ = msg.encode(&mut scratch, limit.saturating_add(1));
        let size = scratch.len() + std::mem::size_of::<M>();
        if let Err(msg) = st.buffer.push(msg, size) {
            self.registry.dead_letter(
                std::any::type_name::<M>(),
                &format_args!("singleton {}", self.name),
                &crate::dead_letter::DeadLetterReason::BufferFull(
                    format!("singleton {} moving or not yet known", self.name).into(),
                ),
            );
            return Err(SendError::BufferFull(msg, limit));
        }
        if let Some(m) = &self.meters {
            m.buffered.set(st.buffer.bytes() as f64);
        }
        Ok(())
    }

    /// Looks up the instance again and delivers the buffer to it;
    /// whether delivery stalled on a full mailbox or link (retry later).
    fn refresh(&self) -> bool {
        let target = self.find();
        let mut st = lock(&self.state);
        st.target = target;
        let stalled = match st.target.as_ref().map(|(_, t)| t.clone()) {
            Some(t) => st.buffer.deliver(|msg| match t.tell(msg) {
                Ok(()) => Ok(()),
                Err(SendError::MailboxFull(m) | SendError::LinkFull(m)) => Err(m),
                // Counted as a dead letter where it failed.
                Err(_) => Ok(()),
            }),
            None => false,
        };
        if let Some(m) = &self.meters {
            m.buffered.set(st.buffer.bytes() as f64);
        }
        if st.target.is_some() && st.buffer.is_empty() {
            self.ready.notify_waiters();
        }
        stalled
    }

    /// The listed instance on the youngest member (a move may list the
    /// old one for a moment; the singleton only moves to younger
    /// members).
    fn find(&self) -> Option<(String, ActorRef<M>)> {
        let refs = self.cluster.group::<M>(&self.group);
        if refs.is_empty() {
            return None;
        }
        let me = self.cluster.myself();
        let members = self.cluster.members();
        let age = |node: &str| {
            if node == me.node {
                me.started_ms
            } else {
                members
                    .iter()
                    .find(|m| m.node == node)
                    .map_or(0, |m| m.started_ms)
            }
        };
        refs.into_iter()
            .map(|r| (r.path().node().to_owned(), r))
            .max_by(|(a, _), (b, _)| (age(a), a).cmp(&(age(b), b)))
    }
}

/// Follows membership and the singleton's group for a ref, until every
/// clone of the ref is dropped, membership stops or the system shuts
/// down.
async fn follow<M: RemoteMessage>(
    shared: Weak<RefShared<M>>,
    mut groups: broadcast::Receiver<GroupEvent>,
    mut members: broadcast::Receiver<ClusterEvent>,
    cancel: CancellationToken,
) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let stalled = s.refresh();
        drop(s);
        tokio::select! {
            r = groups.recv() => if let Err(broadcast::error::RecvError::Closed) = r { return },
            r = members.recv() => if let Err(broadcast::error::RecvError::Closed) = r { return },
            () = tokio::time::sleep(FLUSH_RETRY), if stalled => {}
            () = cancel.cancelled() => return,
        }
    }
}
