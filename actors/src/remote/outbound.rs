//! Sending on an association: user messages (`tell`, `send`), and system
//! messages (plain: identify, no-reply; or reliable: watch, unwatch,
//! terminated, stop, numbered and kept until acknowledged).
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
//! opposite order on another thread): it gets no `link::Turn`, so it is
//! refused with `SerializationError::Reentrant` instead, and remote stop
//! and watch from inside it are deferred to a task. Every entry here
//! begins with its turn, which also hands over what this thread staged
//! (see `link`, "One push path").

use std::{
    cell::RefCell,
    collections::VecDeque,
    sync::{Arc, MutexGuard},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use transport::{FrameKind, PeerText, Pushed, TrySendFrameError};

use super::{
    association::Association,
    envelope::{self, Tag},
    large::LargeLane,
    link::{
        Encode, Link, LinkState, Pending, Recipient, StageOwner, TellError, Turn, encode_direct,
        encode_run_record, lock, run_encoder, write_envelope, write_stop,
    },
    requests::{IdentifyFailed, Requests},
    system_msg::{SysWire, system_frame},
};
use crate::{
    dead_letter::DeadLetterReason,
    error::{ResolveError, SerializationError},
    lifecycle::{StopReason, Terminated},
    path::ActorPath,
    reply::NoReply,
    watch::{RemoteWatcher, WatchSink},
};

thread_local! {
    /// Where `tell` serializes a message that does not go straight into
    /// the link's queue; reused, so that path does not allocate.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(4096));
}

impl StageOwner for Association {
    fn staged_lost(&self, n: u64, why: &str) {
        if let Some(r) = self.registry() {
            let why = DeadLetterReason::LinkLost(why.to_owned().into());
            r.dead_letters_n(n, "(queued on a lost link)", &self.node, &why);
        }
    }
}

/// A push's refusal without the encoder it hands back.
#[inline(always)]
fn unit_err<F>(r: Result<Pushed, TrySendFrameError<F>>) -> Result<Pushed, TrySendFrameError<()>> {
    r.map_err(|e| match e {
        TrySendFrameError::Full(_) => TrySendFrameError::Full(()),
        TrySendFrameError::Closed(_) => TrySendFrameError::Closed(()),
        TrySendFrameError::TooLarge(e) => TrySendFrameError::TooLarge(e),
        // `TrySendFrameError` is non-exhaustive.
        _ => TrySendFrameError::Closed(()),
    })
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
        encode: &impl Encode,
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
        tag: Tag,
        encode: &impl Encode,
    ) -> Result<(), TellError> {
        if tag.ext {
            self.tell_hint::<true>(r, tag.manifest, encode).map(|_| ())
        } else {
            self.tell_hint::<false>(r, tag.manifest, encode).map(|_| ())
        }
    }

    /// Remote `tell` that also says whether the caller should yield its
    /// thread to the link's writer (`Ok(true)`, see
    /// `transport::Sender::try_push_with`). `encode` may run twice: once
    /// straight into the link's queue, and again into a scratch buffer if
    /// the message turns out not to fit there (large, or too large).
    /// `EXT`: the message begins with an extension block (a constant, so
    /// that the plain path is what it was before blocks existed).
    #[inline]
    pub(crate) fn tell_hint<const EXT: bool>(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
        encode: &impl Encode,
    ) -> Result<bool, TellError> {
        let room = self.large.threshold().saturating_sub(r.overhead());
        // Inside an actor's poll a plain message may be staged (see
        // `link`); anything else goes after what was.
        let open = || self.stage_link();
        let turn = match Turn::begin_tell::<EXT, _>(self, open, r, manifest, room, encode) {
            Ok(turn) => turn,
            Err(done) => return done,
        };
        if let Some(done) = self.tell_direct::<EXT>(&turn, r, manifest, room, encode) {
            return done;
        }
        let tag = Tag { manifest, ext: EXT };
        self.tell_general(&turn, r, tag, encode, None)
    }

    /// The link a stage may gather messages for (`link::stage`): up, taking
    /// runs, and with its queue below capacity.
    #[cold]
    fn stage_link(&self) -> Option<Link> {
        match &*self.state() {
            LinkState::Up(link) if link.run_limit != 0 && !link.sender.is_full() => {
                Some(link.clone())
            }
            _ => None,
        }
    }

    /// Remote `tell` of an ask's request, whose envelope carries the path
    /// of its reply slot, so that the receiving node can tell the asker at
    /// once when the request is a dead letter there
    /// (`SysWire::Undeliverable`). A request buffered while the link
    /// connects, or on the large-message lane, goes without it.
    pub(crate) fn tell_ask(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        tag: Tag,
        encode: &impl Encode,
        reply: &str,
    ) -> Result<(), TellError> {
        let turn = Turn::begin().map_err(TellError::Serialization)?;
        self.tell_general(&turn, r, tag, encode, Some(reply))
            .map(|_| ())
    }

    /// `tell` by way of the thread's scratch buffer: the message is
    /// encoded, then queued whole, fragmented on the large-message lane, or
    /// buffered while connecting.
    #[inline(never)]
    fn tell_general(
        self: &Arc<Self>,
        turn: &Turn,
        r: &Arc<Recipient>,
        tag: Tag,
        encode: &impl Encode,
        reply: Option<&str>,
    ) -> Result<bool, TellError> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            self.encode_bounded(r, &mut scratch, encode)?;
            if self.is_large(r, scratch.len()) {
                // Handed over whole; the scratch buffer starts small again.
                let payload = std::mem::replace(&mut *scratch, BytesMut::with_capacity(4096));
                return self.tell_large(r, tag, payload.freeze()).map(|()| false);
            }
            let mut st = self.state();
            if let LinkState::Up(link) = &*st {
                if !link.serves(r.uid) {
                    return Err(TellError::Gone);
                }
                let res = link.sender.try_push_with(turn, FrameKind::Message, |b| {
                    write_envelope(b, r, link, tag, &scratch, true, reply)
                });
                match res {
                    Ok(Pushed::Queued { .. }) => return Ok(false),
                    Ok(Pushed::Abandoned) => return Err(TellError::NoCredit),
                    Err(TrySendFrameError::Full(_)) => return Err(TellError::Full),
                    Err(TrySendFrameError::TooLarge(e)) => {
                        return Err(TellError::Serialization(SerializationError::Encode(
                            e.to_string(),
                        )));
                    }
                    // The link just died: reconnect below, keeping this message.
                    Err(_) => *st = LinkState::Idle,
                }
            }
            let pending = Pending::User(r.clone(), tag, Bytes::copy_from_slice(&scratch));
            self.tell_slow(st, r, pending).map(|()| false)
        })
    }

    /// Remote `stop_after_queued` (Akka's `PoisonPill`): an envelope with
    /// `ENV_STOP` on the user lane, so it reaches the recipient after the
    /// messages this node sent it before, and the receiving node queues a
    /// stop marker behind them. Never waits. Not paced by the recipient's
    /// credit (a full mailbox is stopped gracefully too), but refused when
    /// the link's queue, or the buffer while it connects, is full: it is
    /// never dropped silently. `manifest`: the recipient's message type, so
    /// the receiver checks it as it checks a message.
    pub(crate) fn stop_after_queued(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        manifest: u32,
    ) -> Result<(), TellError> {
        // It comes after what this thread staged.
        let turn = Turn::begin().map_err(TellError::Serialization)?;
        let mut st = self.state();
        if let LinkState::Up(link) = &*st {
            if !link.serves(r.uid) {
                return Err(TellError::Gone);
            }
            match link.sender.try_push_with(&turn, FrameKind::Message, |b| {
                write_stop(b, r, link, manifest)
            }) {
                Ok(_) => return Ok(()),
                Err(TrySendFrameError::Full(_)) => return Err(TellError::Full),
                Err(TrySendFrameError::TooLarge(e)) => {
                    return Err(TellError::Serialization(SerializationError::Encode(
                        e.to_string(),
                    )));
                }
                // The link just died: reconnect below, keeping the stop.
                Err(_) => *st = LinkState::Idle,
            }
        }
        self.tell_slow(st, r, Pending::Stop(r.clone(), manifest))
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
    fn tell_direct<const EXT: bool>(
        &self,
        turn: &Turn,
        r: &Recipient,
        manifest: u32,
        room: usize,
        encode: &impl Encode,
    ) -> Option<Result<bool, TellError>> {
        let st = self.state();
        let LinkState::Up(link) = &*st else {
            return None;
        };
        if !link.serves(r.uid) {
            return Some(Err(TellError::Gone));
        }
        let id = link.ids.lookup(&r.id)?;
        let mut failed = None;
        let no_credit = std::cell::Cell::new(false);
        let flow = &*r.flow;
        let res = if !EXT && link.run_limit != 0 {
            // A record of a run envelope, which the next message to this
            // recipient may extend while the writer has not taken it.
            // Ids are never 0 (`compression`).
            let key = std::num::NonZeroU64::new(u64::from(id) << 32 | u64::from(manifest))?;
            let pushed = link.sender.try_push_run_with(
                turn,
                FrameKind::Message,
                key,
                link.run_limit,
                #[inline(always)]
                |b, more| {
                    if !flow.has_credit() {
                        no_credit.set(true);
                        return false;
                    }
                    encode_run_record(b, more, id, manifest, encode, room, flow, &mut failed)
                },
            );
            unit_err(pushed)
        } else {
            let pushed = link.sender.try_push_with(turn, FrameKind::Message, |b| {
                if !flow.has_credit() {
                    no_credit.set(true);
                    return false;
                }
                let env = b.len();
                if EXT {
                    envelope::put_compact_header_ext(b, id, manifest);
                } else {
                    envelope::put_compact_header(b, id, manifest);
                }
                encode_direct(b, env, encode, room, flow, &mut failed)
            });
            unit_err(pushed)
        };
        match res {
            Ok(Pushed::Queued { yield_now }) => Some(Ok(yield_now)),
            Ok(Pushed::Abandoned) if no_credit.get() => Some(Err(TellError::NoCredit)),
            Ok(Pushed::Abandoned) => failed.map(|e| Err(TellError::Serialization(e))),
            Err(TrySendFrameError::Full(_)) => Some(Err(TellError::Full)),
            Err(TrySendFrameError::TooLarge(e)) => Some(Err(TellError::Serialization(
                SerializationError::Encode(e.to_string()),
            ))),
            // The link just died: the general path reconnects.
            Err(_) => None,
        }
    }

    /// `tell` (or a graceful stop, `pending` to `r`) when the link is not
    /// up: buffer while connecting, start a connect, or refuse a ref of a
    /// quarantined incarnation. Kept out of line so that the hot path
    /// stays small.
    #[cold]
    #[inline(never)]
    fn tell_slow(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, LinkState>,
        r: &Arc<Recipient>,
        pending: Pending,
    ) -> Result<(), TellError> {
        if self.is_quarantined(r.uid) {
            return Err(TellError::Gone);
        }
        // `life` is a leaf lock: taken under `state`.
        if lock(&self.life).fails_fast(r.uid) {
            return Err(TellError::Unreachable);
        }
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
        encode: &impl Encode,
    ) -> Result<Bytes, TellError> {
        // The send begins here (its push follows later, with a turn of
        // its own): refused inside an encoder.
        Turn::begin().map_err(TellError::Serialization)?;
        let mut payload = BytesMut::new();
        self.encode_bounded(r, &mut payload, encode)?;
        Ok(payload.freeze())
    }

    /// Remote `send` of an encoded message: waits while the recipient has no
    /// credit (its mailbox on the other node is full, see `flow`), while
    /// the link's queue is full, or while the connect buffer is.
    /// `reply`: an ask's reply slot, carried as `tell_ask` does.
    pub(crate) async fn send_payload(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        tag: Tag,
        payload: Bytes,
        reply: Option<&str>,
    ) -> Result<(), TellError> {
        if self.is_large(r, payload.len()) {
            return self.send_large_wait(r, tag, payload).await;
        }
        let copy = |b: &mut BytesMut, _: usize| {
            b.extend_from_slice(&payload);
            Ok(())
        };
        loop {
            let link = self.link();
            // Registered before trying, so a grant or a change of link
            // between the try and the wait is not missed.
            let changed = self.up.notified();
            let credits = link.as_ref().map(|l| l.credits.clone());
            let granted = credits.as_ref().map(|c| c.notify.notified());
            tokio::pin!(changed, granted);
            let tried = match reply {
                Some(reply) => self.tell_ask(r, tag, &copy, reply),
                None => self.tell(r, tag, &copy),
            };
            match tried {
                Err(TellError::NoCredit) => {
                    let Some(granted) = granted.as_mut().as_pin_mut() else {
                        continue;
                    };
                    tokio::select! {
                        () = granted => {}
                        () = &mut changed => {}
                    }
                }
                Err(TellError::Full) => match &link {
                    Some(link) => {
                        tokio::select! {
                            () = link.sender.wait_taken() => {}
                            () = &mut changed => {}
                        }
                    }
                    // The connect buffer is full: wait for the link.
                    None => changed.await,
                },
                other => return other,
            }
        }
    }

    /// A large message from `tell`: checked, then queued on the
    /// large-message lane if it has room.
    #[cold]
    #[inline(never)]
    fn tell_large(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        tag: Tag,
        payload: Bytes,
    ) -> Result<(), TellError> {
        self.check_large(r, payload.len())?;
        LargeLane::enqueue(self, r, tag, payload).map_err(|_| TellError::Full)
    }

    /// `send` of a large message: waits while the large-message lane is
    /// full.
    async fn send_large_wait(
        self: &Arc<Self>,
        r: &Arc<Recipient>,
        tag: Tag,
        payload: Bytes,
    ) -> Result<(), TellError> {
        self.check_large(r, payload.len())?;
        LargeLane::enqueue_wait(self, r, tag, payload).await;
        Ok(())
    }

    fn check_large(&self, r: &Recipient, payload: usize) -> Result<(), TellError> {
        self.check_size(r, payload)?;
        if self.is_quarantined(r.uid) {
            return Err(TellError::Gone);
        }
        match &*self.state() {
            LinkState::Up(link) if !link.serves(r.uid) => return Err(TellError::Gone),
            LinkState::Up(_) => {}
            _ if lock(&self.life).fails_fast(r.uid) => return Err(TellError::Unreachable),
            _ => {}
        }
        Ok(())
    }
}

/// System messages: plain (`send_system`: identify, no-reply) or
/// reliable (`send_reliable`: watch, unwatch, stop, terminated).
impl Association {
    /// Asks the node whether an actor lives at `path` (Akka's `Identify`).
    pub(super) async fn identify(
        self: &Arc<Self>,
        path: &ActorPath,
        timeout: Duration,
    ) -> Result<Option<(u32, String)>, ResolveError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (id, rx) = self.requests.new_identify();
            self.send_system(&SysWire::Identify {
                id,
                path: path.elements().to_owned(),
            });
            let res = tokio::time::timeout_at(deadline, rx).await;
            self.requests.forget_identify(id);
            return match res {
                Ok(Ok(Ok(m))) => Ok(m),
                // Asked again on the link that replaces it.
                Ok(Ok(Err(IdentifyFailed::Replaced))) => continue,
                Ok(Ok(Err(IdentifyFailed::Unreachable(reason)))) => {
                    Err(ResolveError::Unreachable {
                        addr: self.node.to_string(),
                        reason,
                    })
                }
                Ok(Err(_)) => Err(ResolveError::Unreachable {
                    addr: self.node.to_string(),
                    reason: "link closed".into(),
                }),
                Err(_) => Err(ResolveError::Timeout {
                    addr: self.node.to_string(),
                    timeout,
                }),
            };
        }
    }

    /// Queues a system message, connecting if needed.
    pub(super) fn send_system(self: &Arc<Self>, msg: &SysWire) {
        // After what this thread staged; from inside an encoder, by a task.
        let Ok(turn) = Turn::begin() else {
            return self.defer(msg, Self::send_system);
        };
        let body = msg.encode();
        let mut st = self.state();
        match &mut *st {
            LinkState::Up(link) => match link.sender.try_send(&turn, system_frame(body)) {
                Ok(()) => {}
                // Waits for room in the bounded outbox, not a task each.
                Err(TrySendFrameError::Full(f)) => {
                    link.sender.park(&turn, &self.outbox, f);
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

    /// Tells the asker whose reply slot is `r` that no reply will come
    /// (`reply`); nothing if its incarnation is quarantined (its asks
    /// failed already).
    pub(crate) fn send_no_reply(self: &Arc<Self>, r: &Recipient, why: NoReply) {
        if self.is_quarantined(r.uid) {
            return;
        }
        self.send_system(&SysWire::NoReply {
            reply: r.path.elements().to_owned(),
            why,
        });
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
        let watch_id = self.requests.add_watch(r.path.clone(), sink);
        self.arm_detector();
        self.send_reliable(&SysWire::Watch {
            path: r.path.elements().to_owned(),
            watch_id,
        });
    }

    /// Undoes `watch`: `sink` hears nothing more of `r`, and the peer is
    /// told (reliably) to forget the watches, so it holds nothing for them.
    pub(crate) fn unwatch(self: &Arc<Self>, r: &Recipient, sink: &WatchSink) {
        for watch_id in self.requests.remove_watches(&r.path, sink) {
            self.send_reliable(&SysWire::Unwatch {
                path: r.path.elements().to_owned(),
                watch_id,
            });
        }
    }

    /// Queues a system message for exactly-once delivery: numbered, kept
    /// until acknowledged, resent after a reconnect or when unacknowledged
    /// for a heartbeat interval. A full buffer quarantines the peer.
    pub(super) fn send_reliable(self: &Arc<Self>, msg: &SysWire) {
        // After what this thread staged; from inside an encoder, by a task.
        let Ok(turn) = Turn::begin() else {
            return self.defer(msg, Self::send_reliable);
        };
        let mut out = self.requests.out();
        let frame = match Requests::push_reliable(&mut out, msg.encode()) {
            Ok(frame) => frame,
            Err(overflow) => {
                drop(out);
                let uid = self.peer_uid();
                tracing::error!(node = %PeerText(&self.node), uid, capacity = overflow.capacity, "system message buffer overflowed: the peer acknowledged none of the last {} system messages; quarantining it", overflow.capacity);
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
        let up = match &*self.state() {
            LinkState::Up(link) => {
                // Full: the resend timer sends it later, in order.
                let _ = link.sender.try_send(&turn, frame);
                true
            }
            _ => false,
        };
        drop(out);
        if !up {
            self.ensure_connecting();
        }
    }
}

impl RemoteWatcher for Association {
    /// A watch placed by an incarnation that is gone (it shut down,
    /// restarted or overflowed: quarantined) has nobody to tell: sending
    /// would only dial a node that said goodbye (and, the message never
    /// acknowledged, keep redialing it with backoff), or hand a new
    /// incarnation a watch id it never issued. Akka drops such watchers
    /// when their address terminates; this drops them when they fire.
    fn send_terminated(self: Arc<Self>, watch_id: u64, uid: u64, t: &Terminated) {
        if self.is_quarantined(uid) {
            tracing::debug!(node = %PeerText(&self.node), uid, watch_id, path = %t.path, "Terminated for a watcher of a gone incarnation dropped");
            return;
        }
        self.send_reliable(&SysWire::Terminated {
            watch_id,
            reason: t.reason.clone(),
        });
    }
}
