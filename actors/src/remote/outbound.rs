//! Sending on an association: user messages (`tell`, `send`), and system
//! messages (plain, or reliable: watch, terminated, stop).
//!
//! # Hot path
//! When the link is up and already knows the recipient's id, `tell`
//! encodes the message straight into the link's pooled outbound buffer,
//! behind a 9-byte envelope header, under the association's state lock
//! and the link's queue lock (`tell_direct`). A message that crosses the
//! large-message threshold while encoding is abandoned there and takes the
//! general path: encoded into a thread-local scratch buffer, then queued
//! whole, fragmented on the large-message lane, or buffered while
//! connecting. No allocation and no channel hop per message.
//!
//! # Encoders run under locks
//! The encoder is user code (`RemoteMessage::encode` and the `Serialize`
//! impls it calls) and runs under those two locks. A remote send from
//! inside it would take them again (or another association's, in the
//! opposite order on another thread): it is refused with
//! `SerializationError::Reentrant` instead, and remote stop and watch
//! from inside it are deferred to a task.

use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    sync::{Arc, MutexGuard},
};

use bytes::{Bytes, BytesMut};
use transport::{FrameKind, Pushed, TrySendError};

use super::{
    association::{Association, Link, LinkState},
    compression::CompressedId,
    envelope::{self, ENV_HEADER},
    lock,
    system_msg::{SysWire, reliable_frame, system_frame},
};
use crate::{
    error::SerializationError,
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    watch::{RemoteWatcher, WatchSink},
};

/// A remote actor as the sending side knows it, shared by every ref to it
/// so that its compressed id is assigned once per link.
pub(crate) struct Recipient {
    pub(crate) path: ActorPath,
    pub(crate) assoc: Arc<Association>,
    /// The incarnation of its node this ref was made for; 0 if unknown.
    pub(super) uid: u64,
    /// Its id on the link that last defined it.
    pub(super) id: CompressedId,
}

impl Recipient {
    pub(super) fn new(path: ActorPath, assoc: Arc<Association>, uid: u64) -> Self {
        Self {
            path,
            assoc,
            uid,
            id: CompressedId::default(),
        }
    }

    /// Envelope bytes around a payload to this recipient, at most.
    pub(super) fn overhead(&self) -> usize {
        envelope::overhead(self.path.elements().len())
    }
}

/// Why a remote tell failed.
pub(crate) enum TellError {
    Full,
    /// The recipient's incarnation is quarantined (its node restarted or
    /// shut down): the message is a dead letter.
    Gone,
    Serialization(SerializationError),
}

/// Something buffered while the link connects.
pub(super) enum Pending {
    User(Arc<Recipient>, u32, Bytes),
    System(Bytes),
}

/// An encoder: appends the message to the buffer, at most `limit` bytes.
pub(crate) type Encode<'a> = dyn Fn(&mut BytesMut, usize) -> Result<(), SerializationError> + 'a;

thread_local! {
    /// Where `tell` serializes a message that does not go straight into
    /// the link's queue; reused, so that path does not allocate.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(4096));
    /// An encoder is running on this thread (see the module docs).
    static IN_ENCODER: Cell<bool> = const { Cell::new(false) };
}

/// Runs an encoder, marking this thread as inside one until it returns or
/// unwinds.
#[inline(always)]
fn run_encoder<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        #[inline(always)]
        fn drop(&mut self) {
            IN_ENCODER.set(false);
        }
    }
    IN_ENCODER.set(true);
    let _reset = Reset;
    f()
}

/// Whether this thread is inside an encoder.
#[inline(always)]
fn in_encoder() -> bool {
    IN_ENCODER.get()
}

/// Appends the envelope for `payload` to `b`, defining the recipient's id
/// on this link if needed. Runs under the transport's queue lock, which
/// orders it with every other envelope on the link.
pub(super) fn write_envelope(
    b: &mut BytesMut,
    r: &Recipient,
    link: &Link,
    manifest: u32,
    payload: &[u8],
) {
    match link.ids.lookup_or_define(&r.id) {
        (id, false) => {
            b.reserve(ENV_HEADER + payload.len());
            envelope::put_compact_header(b, id, manifest);
        }
        (id, true) => envelope::put_header(b, id, Some(r.path.elements()), manifest, None),
    }
    b.extend_from_slice(payload);
}

impl Association {
    /// The message is too large for one frame on the link's shared queue:
    /// it goes on the large-message lane (or is refused). The only check a
    /// small message pays for large messages.
    #[inline]
    pub(super) fn is_large(&self, r: &Recipient, payload: usize) -> bool {
        r.overhead() + payload > self.large.threshold()
    }

    /// Refuses a message over the maximum message size (custom encoders
    /// are not bounded while encoding).
    pub(super) fn check_size(&self, r: &Recipient, payload: usize) -> Result<(), TellError> {
        let size = r.overhead() + payload;
        if size > self.max_message {
            return Err(TellError::Serialization(SerializationError::TooLarge {
                size,
                limit: self.max_message,
            }));
        }
        Ok(())
    }

    /// Serializes with `encode` into `out` (cleared first), refusing a
    /// message over the maximum message size as soon as it crosses the
    /// limit, so a huge message is never serialized whole.
    fn encode_bounded(
        &self,
        r: &Recipient,
        out: &mut BytesMut,
        encode: &Encode<'_>,
    ) -> Result<(), TellError> {
        out.clear();
        let overhead = r.overhead();
        let room = self.max_message.saturating_sub(overhead);
        match run_encoder(|| encode(out, room)) {
            Ok(()) => Ok(()),
            Err(SerializationError::TooLarge { size, .. }) => {
                Err(TellError::Serialization(SerializationError::TooLarge {
                    size: size + overhead,
                    limit: self.max_message,
                }))
            }
            Err(e) => Err(TellError::Serialization(e)),
        }
    }

    /// Remote `tell`: never waits.
    pub(crate) fn tell(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: &Encode<'_>,
    ) -> Result<(), TellError> {
        self.tell_hint(r, manifest, encode).map(|_| ())
    }

    /// Remote `tell` that also says whether the caller should yield its
    /// thread to the link's writer (`Ok(true)`, see
    /// `transport::Sender::try_push_with`). `encode` may run twice: once
    /// straight into the link's queue, and again into a scratch buffer if
    /// the message turns out not to fit there (large, or too large).
    #[inline]
    pub(crate) fn tell_hint(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: &Encode<'_>,
    ) -> Result<bool, TellError> {
        if in_encoder() {
            return Err(TellError::Serialization(SerializationError::Reentrant));
        }
        if let Some(done) = self.tell_direct(r, manifest, encode) {
            return done;
        }
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            self.encode_bounded(r, &mut scratch, encode)?;
            if self.is_large(r, scratch.len()) {
                // Handed over whole; the scratch buffer starts small again.
                let payload = std::mem::replace(&mut *scratch, BytesMut::with_capacity(4096));
                return self
                    .tell_large(r, manifest, payload.freeze())
                    .map(|()| false);
            }
            let mut st = self.state();
            if let LinkState::Up(link) = &*st {
                if !link.serves(r.uid) {
                    return Err(TellError::Gone);
                }
                let res = link.sender.try_send_with(FrameKind::Message, |b| {
                    write_envelope(b, r, link, manifest, &scratch)
                });
                match res {
                    Ok(()) => return Ok(false),
                    Err(TrySendError::Full(_)) => return Err(TellError::Full),
                    Err(TrySendError::TooLarge(e)) => {
                        return Err(TellError::Serialization(SerializationError::Encode(
                            e.to_string(),
                        )));
                    }
                    // The link just died: reconnect below, keeping this message.
                    Err(_) => *st = LinkState::Idle,
                }
            }
            self.tell_slow(st, r, manifest, &scratch).map(|()| false)
        })
    }

    /// The common case of `tell`: the link is up and already knows the
    /// recipient's id, so the message is encoded straight into the link's
    /// queue, behind a compact envelope, with no scratch copy. Only a
    /// message that fits one frame of the queue goes this way (up to the
    /// large-message threshold and the maximum message size): one that
    /// does not is abandoned as soon as it crosses that size, and `None`
    /// sends it down the general path. `None` too when the link is not up
    /// or the recipient not yet defined on it.
    #[inline]
    fn tell_direct(
        &self,
        r: &Recipient,
        manifest: u32,
        encode: &Encode<'_>,
    ) -> Option<Result<bool, TellError>> {
        let st = self.state();
        let LinkState::Up(link) = &*st else {
            return None;
        };
        if !link.serves(r.uid) {
            return Some(Err(TellError::Gone));
        }
        let id = link.ids.lookup(&r.id)?;
        let room = self.large.threshold().saturating_sub(r.overhead());
        let mut failed = None;
        let res = link.sender.try_push_with(FrameKind::Message, |b| {
            envelope::put_compact_header(b, id, manifest);
            let start = b.len();
            match run_encoder(|| encode(b, room)) {
                // A custom encoder is not bounded while encoding.
                Ok(()) => b.len() - start <= room,
                // Large, or too large: the general path tells which.
                Err(SerializationError::TooLarge { .. }) => false,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        match res {
            Ok(Pushed::Queued { yield_now }) => Some(Ok(yield_now)),
            Ok(Pushed::Abandoned) => failed.map(|e| Err(TellError::Serialization(e))),
            Err(TrySendError::Full(_)) => Some(Err(TellError::Full)),
            Err(TrySendError::TooLarge(e)) => Some(Err(TellError::Serialization(
                SerializationError::Encode(e.to_string()),
            ))),
            // The link just died: the general path reconnects.
            Err(_) => None,
        }
    }

    /// `tell` when the link is not up: buffer while connecting, start a
    /// connect, or refuse a ref of a quarantined incarnation. Kept out of
    /// line so that the hot path stays small.
    #[cold]
    #[inline(never)]
    fn tell_slow(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, LinkState>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: &[u8],
    ) -> Result<(), TellError> {
        if self.is_quarantined(r.uid) {
            return Err(TellError::Gone);
        }
        let pending = Pending::User(r.clone(), manifest, Bytes::copy_from_slice(payload));
        match &mut *st {
            LinkState::Up(_) => unreachable!("tell handles an up link"),
            LinkState::Connecting { pending: queue } => {
                if queue.len() >= self.pending_capacity {
                    return Err(TellError::Full);
                }
                queue.push_back(pending);
                Ok(())
            }
            LinkState::Idle => {
                *st = LinkState::Connecting {
                    pending: VecDeque::from([pending]),
                };
                drop(st);
                self.spawn_connect();
                Ok(())
            }
        }
    }

    /// Encodes a message for [`send_payload`](Self::send_payload), before
    /// any await, so the waiting future holds bytes rather than a borrow of
    /// the message. Remote `send` only gets here when its first try (as
    /// `tell`, allocation-free) found the link full, so only then does it
    /// cost a copy.
    pub(crate) fn encode_payload(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        encode: &Encode<'_>,
    ) -> Result<Bytes, TellError> {
        if in_encoder() {
            return Err(TellError::Serialization(SerializationError::Reentrant));
        }
        let mut payload = BytesMut::new();
        self.encode_bounded(r, &mut payload, encode)?;
        Ok(payload.freeze())
    }

    /// Remote `send` of an encoded message: waits while the link's queue is
    /// full.
    pub(crate) async fn send_payload(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        payload: Bytes,
    ) -> Result<(), TellError> {
        if self.is_large(r, payload.len()) {
            return self.send_large_wait(r, manifest, payload).await;
        }
        loop {
            match self.link() {
                Some(link) if !link.serves(r.uid) => return Err(TellError::Gone),
                Some(link) => {
                    if link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_envelope(b, r, &link, manifest, &payload)
                        })
                        .await
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
                // The connect buffer is full: wait for the link to come up.
                None => self.up.notified().await,
            }
            let copy = |b: &mut BytesMut, _: usize| {
                b.extend_from_slice(&payload);
                Ok(())
            };
            match self.tell(r, manifest, &copy) {
                Err(TellError::Full) => {}
                other => return other,
            }
        }
    }

    /// Queues a system message, connecting if needed.
    pub(super) fn send_system(self: &Arc<Self>, msg: &SysWire) {
        if in_encoder() {
            return self.defer(msg, Self::send_system);
        }
        let body = msg.encode();
        let mut st = self.state();
        match &mut *st {
            LinkState::Up(link) => match link.sender.try_send(system_frame(body)) {
                Ok(()) => {}
                Err(TrySendError::Full(f)) => {
                    // Never dropped: wait for room off this thread.
                    let sender = link.sender.clone();
                    tokio::spawn(async move {
                        let _ = sender.send(f).await;
                    });
                }
                Err(e) => {
                    let body = e.into_inner().map(|f| f.body).unwrap_or_default();
                    *st = LinkState::Connecting {
                        pending: VecDeque::from([Pending::System(body)]),
                    };
                    drop(st);
                    self.spawn_connect();
                }
            },
            LinkState::Connecting { pending } => pending.push_back(Pending::System(body)),
            LinkState::Idle => {
                *st = LinkState::Connecting {
                    pending: VecDeque::from([Pending::System(body)]),
                };
                drop(st);
                self.spawn_connect();
            }
        }
    }

    /// A system message sent from inside an encoder, which may hold this
    /// association's locks: sent by a task instead, once they are free.
    #[cold]
    fn defer(self: &Arc<Self>, msg: &SysWire, send: fn(&Arc<Self>, &SysWire)) {
        let Ok(msg) = SysWire::decode(&msg.encode()) else {
            return;
        };
        let assoc = self.clone();
        tokio::spawn(async move { send(&assoc, &msg) });
    }

    pub(crate) fn send_stop(self: &Arc<Self>, r: &Recipient) {
        if self.is_quarantined(r.uid) {
            return;
        }
        self.send_reliable(&SysWire::Stop {
            path: r.path.elements().to_owned(),
        });
    }

    pub(crate) fn watch(self: &Arc<Self>, r: &Recipient, sink: WatchSink) {
        if self.is_quarantined(r.uid) {
            return sink.deliver(Terminated {
                path: r.path.clone(),
                reason: StopReason::NodeUnreachable(format!(
                    "incarnation {:#x} of {} is quarantined",
                    r.uid, self.node
                )),
            });
        }
        let watch_id = self
            .next_req
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.watches).insert(watch_id, (r.path.clone(), sink));
        self.arm_detector();
        self.send_reliable(&SysWire::Watch {
            path: r.path.elements().to_owned(),
            watch_id,
        });
    }

    /// Queues a system message for exactly-once delivery: numbered, kept
    /// until acknowledged, resent after a reconnect or when unacknowledged
    /// for a heartbeat interval. A full buffer quarantines the peer.
    pub(super) fn send_reliable(self: &Arc<Self>, msg: &SysWire) {
        if in_encoder() {
            return self.defer(msg, Self::send_reliable);
        }
        let body = msg.encode();
        let mut out = lock(&self.sys_out);
        let seq = match out.push(body.clone()) {
            Ok(seq) => seq,
            Err(overflow) => {
                drop(out);
                let uid = self.peer_uid();
                tracing::error!(node = %self.node, uid, capacity = overflow.capacity, "system message buffer overflowed: the peer acknowledged none of the last {} system messages; quarantining it", overflow.capacity);
                self.quarantine(
                    uid,
                    &format!(
                        "system message buffer overflowed ({} unacknowledged)",
                        overflow.capacity
                    ),
                );
                return;
            }
        };
        let frame = reliable_frame(out.epoch(), seq, &body);
        let up = match &*self.state() {
            LinkState::Up(link) => {
                // Full: the resend timer sends it later, in order.
                let _ = link.sender.try_send(frame);
                true
            }
            _ => false,
        };
        drop(out);
        if !up {
            self.ensure_connecting();
        }
    }

    /// Resends every unacknowledged system message on the current link.
    pub(super) fn resend_unacked(&self) {
        let out = lock(&self.sys_out);
        if out.len() == 0 {
            return;
        }
        let st = self.state();
        let LinkState::Up(link) = &*st else { return };
        for (seq, body) in out.unacked() {
            if link
                .sender
                .try_send(reliable_frame(out.epoch(), *seq, body))
                .is_err()
            {
                break;
            }
        }
    }
}

impl RemoteWatcher for Association {
    fn send_terminated(self: Arc<Self>, watch_id: u64, t: &Terminated) {
        self.send_reliable(&SysWire::Terminated {
            watch_id,
            reason: t.reason.clone(),
        });
    }
}
