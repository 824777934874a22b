//! What a link is made of, shared by the units that send on it: the
//! recipient as a link sees it, the link itself, an association's link
//! state, what waits while it connects, and the one way onto a link's
//! queue.
//!
//! # One push path
//! Every frame an association puts on its link (a tell, an ask's request,
//! a graceful stop, a watch or any other system message, a large
//! message's fragments, what waited while the link connected) goes
//! through [`LinkPush`], the link's sender: the transport `Sender` is a
//! private field of it, so no other module can queue on a link by
//! another way. Its methods that queue from a caller's thread take a
//! [`Turn`], and a turn is made only by [`Turn::begin`] (or
//! [`Turn::begin_tell`]), which
//! - refuses inside a message encoder (the encoder guard: an encoder runs
//!   under the association's state lock and the link's queue lock, so a
//!   remote send from inside it would take them again), and
//! - hands this thread's stage (`stage`: what an actor's poll gathered)
//!   to its link first, so nothing overtakes what was staged.
//!
//! A turn is a zero-sized value and not `Send`: it holds on the thread
//! that made it and costs nothing to pass around. The async methods (a
//! task's sends: what waited while connecting, a large message's
//! fragments) hand the stage over themselves; an encoder cannot await, so
//! they need no guard. The heartbeat goes on the control lane, which
//! overtakes everything by design, and needs neither.

mod stage;

use std::{
    cell::Cell,
    collections::VecDeque,
    marker::PhantomData,
    num::NonZeroU64,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use bytes::{BufMut, Bytes, BytesMut};
use transport::{
    Frame, FrameKind, PushFramesError, Pushed, PushedFrames, SendFrameError, Sender,
    TrySendFrameError,
};

pub(super) use self::stage::StageOwner;

use super::{
    compression::{CompressedId, OutboundIds},
    envelope::{self, ENV_HEADER, Tag},
    flow::{LinkCredits, SendFlow},
};
use crate::{error::SerializationError, path::ActorPath};

/// Locks a mutex of remoting. No user code runs under these locks except a
/// message's encoder (see `RemoteMessage::encode`), which cannot leave the
/// state half-changed, so a poisoned lock is consistent.
#[inline]
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A remote actor as the sending side knows it, shared by every ref to it
/// so that its compressed id is assigned once per link.
#[derive(Debug)]
pub(crate) struct Recipient {
    pub(crate) path: ActorPath,
    /// The incarnation of its node this ref was made for; 0 if unknown.
    pub(super) uid: u64,
    /// Its id on the link that last defined it.
    pub(super) id: CompressedId,
    /// Never compressed: an ask's reply slot, used about once.
    pub(super) inline: bool,
    /// Its credit on the link that last defined it (`flow`).
    pub(super) flow: Arc<SendFlow>,
}

impl Recipient {
    /// The incarnation of its node this ref was made for; 0 if unknown.
    pub(crate) fn uid(&self) -> u64 {
        self.uid
    }

    pub(super) fn new(path: ActorPath, uid: u64) -> Self {
        let inline = path.elements().starts_with("/temp/");
        Self {
            path,
            uid,
            id: CompressedId::default(),
            inline,
            flow: Arc::default(),
        }
    }

    /// How an envelope on `link` names this recipient, defining an id if
    /// it needs one. Under the link's queue lock (see `OutboundIds`).
    #[inline]
    pub(super) fn to_on<'a>(&'a self, link: &Link) -> envelope::To<'a> {
        if self.inline {
            return envelope::To::Inline(self.path.elements());
        }
        match link.ids.lookup_or_define(&self.id) {
            Some((id, false)) => envelope::To::Id(id),
            Some((id, true)) => {
                link.credits.define(id, &self.flow);
                envelope::To::Define(id, self.path.elements())
            }
            None => envelope::To::Inline(self.path.elements()),
        }
    }

    /// Envelope bytes around a payload to this recipient, at most.
    pub(super) fn overhead(&self) -> usize {
        envelope::overhead(self.path.elements().len())
    }
}

/// Why a remote tell failed.
pub(crate) enum TellError {
    /// The link's queue (or the connect buffer) is full.
    Full,
    /// The recipient has used its window: its mailbox on the other node
    /// is full, or its credit is on the way (see `flow`).
    NoCredit,
    /// The recipient's incarnation is quarantined (its node restarted or
    /// shut down): the message is a dead letter.
    Gone,
    /// The recipient's node is judged unreachable (`liveness`, "Fail
    /// fast while unreachable"): nothing was sent or dialed.
    Unreachable,
    Serialization(SerializationError),
}

/// The connection messages go out on.
#[derive(Clone)]
pub(super) struct Link {
    /// The only way onto the connection's queue (see the module docs).
    pub(super) sender: LinkPush,
    /// This link's recipient ids (and its generation).
    pub(super) ids: Arc<OutboundIds>,
    /// Its recipients' credit (see `flow`).
    pub(super) credits: Arc<LinkCredits>,
    /// The peer incarnation at the other end.
    pub(super) uid: u64,
    /// This node dialed the connection.
    pub(super) dialed: bool,
    /// Run envelopes (`envelope::ENV_RUN`) are extended while their body
    /// is below this; 0: the peer did not announce runs, or this node
    /// sends none (`SystemConfig::set_message_runs`).
    pub(super) run_limit: usize,
}

impl Link {
    /// Whether a ref made for incarnation `uid` (0: unknown) may use this
    /// link: not if its incarnation was replaced.
    #[inline]
    pub(super) fn serves(&self, uid: u64) -> bool {
        uid == self.uid || uid == 0
    }
}

/// A link's sender: the only holder of the connection's transport
/// `Sender` (a private field), so the only way onto the link's queue
/// (see the module docs). Its methods that queue from a caller's thread
/// take a [`Turn`]; the rest say why they need none.
#[derive(Clone)]
pub(super) struct LinkPush {
    sender: Sender,
}

impl LinkPush {
    /// The sender of a connection that becomes a link.
    pub(super) fn new(sender: Sender) -> Self {
        Self { sender }
    }

    /// `Sender::try_push_with`, in this thread's turn. Inlined into the
    /// caller's encode loop, as the transport's is (the hot path).
    #[inline(always)]
    pub(super) fn try_push_with<F: FnOnce(&mut BytesMut) -> bool>(
        &self,
        _turn: &Turn,
        kind: FrameKind,
        encode: F,
    ) -> Result<Pushed, TrySendFrameError<F>> {
        self.sender.try_push_with(kind, encode)
    }

    /// `Sender::try_push_run_with`, in this thread's turn (the hot path).
    #[inline(always)]
    pub(super) fn try_push_run_with<F: FnOnce(&mut BytesMut, bool) -> bool>(
        &self,
        _turn: &Turn,
        kind: FrameKind,
        key: NonZeroU64,
        max_run: usize,
        encode: F,
    ) -> Result<Pushed, TrySendFrameError<F>> {
        self.sender.try_push_run_with(kind, key, max_run, encode)
    }

    /// `Sender::try_send` of a system frame, in this thread's turn.
    pub(super) fn try_send(&self, _turn: &Turn, frame: Frame) -> Result<(), TrySendFrameError> {
        self.sender.try_send(frame)
    }

    /// A system frame the queue had no room for, through `outbox` (sent
    /// by its task in order as room frees up), in this thread's turn.
    /// False if it was dropped (see [`Outbox::send`]).
    pub(super) fn park(&self, _turn: &Turn, outbox: &Arc<Outbox>, frame: Frame) -> bool {
        outbox.send(&self.sender, frame)
    }

    /// `Sender::send_with`, from a task: waits for room. What this thread
    /// staged goes first (inside an actor's poll; elsewhere the stage is
    /// empty). No encoder guard: an encoder cannot await.
    pub(super) async fn send_with<F: FnOnce(&mut BytesMut)>(
        &self,
        kind: FrameKind,
        encode: F,
    ) -> Result<(), SendFrameError> {
        flush_stage();
        self.sender.send_with(kind, encode).await
    }

    /// `Sender::send`, from a task, as [`send_with`](Self::send_with).
    pub(super) async fn send(&self, frame: Frame) -> Result<(), SendFrameError> {
        flush_stage();
        self.sender.send(frame).await
    }

    /// The stage's hand-over (`stage`), which is the flush itself: private
    /// to this module and the stage.
    fn push_frames(
        &self,
        frames: &mut BytesMut,
        room: usize,
    ) -> Result<PushedFrames, PushFramesError> {
        self.sender.push_frames(frames, room)
    }

    /// A heartbeat on the control lane, which overtakes queued messages by
    /// design: it needs no turn.
    pub(super) fn send_heartbeat(&self, body: &[u8]) -> bool {
        self.sender.send_heartbeat(body)
    }

    /// Bytes queued (for metrics).
    pub(super) fn queued_bytes(&self) -> usize {
        self.sender.queued_bytes()
    }

    /// The queue is at its capacity.
    pub(super) fn is_full(&self) -> bool {
        self.sender.is_full()
    }

    /// The connection is closing or closed.
    pub(super) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Waits until the writer has taken what is queued.
    pub(super) async fn wait_taken(&self) {
        self.sender.wait_taken().await;
    }
}

/// Proof that this thread may queue on a link now: it is not inside a
/// message encoder, and what it staged in this poll has been handed to
/// its link (see the module docs). Made only by [`Turn::begin`] and
/// [`Turn::begin_tell`]; zero-sized, and not `Send`, since the stage it
/// flushed is this thread's.
pub(super) struct Turn {
    _here: PhantomData<*const ()>,
}

impl Turn {
    /// The start of every send from a caller's thread, before any lock is
    /// taken: refused with `Reentrant` inside an encoder (which may hold
    /// this association's locks), else this thread's stage goes to its
    /// link first.
    #[inline(always)]
    pub(super) fn begin() -> Result<Self, SerializationError> {
        if in_encoder() {
            return Err(SerializationError::Reentrant);
        }
        flush_stage();
        Ok(Self { _here: PhantomData })
    }

    /// [`begin`](Self::begin) for a `tell` to `r` on `owner`'s link:
    /// inside an actor's poll a plain message (`!EXT`) may be staged
    /// instead (see `stage`), which ends the send: `Err` then carries its
    /// result, as it carries the refusal inside an encoder. `open` gives
    /// the link a stage may open for; `room`: the most the message may
    /// take.
    #[inline(always)]
    pub(super) fn begin_tell<const EXT: bool, T: StageOwner + 'static>(
        owner: &Arc<T>,
        open: impl FnOnce() -> Option<Link>,
        r: &Recipient,
        manifest: u32,
        room: usize,
        encode: &impl Encode,
    ) -> Result<Self, Result<bool, TellError>> {
        if in_encoder() {
            return Err(Err(TellError::Serialization(SerializationError::Reentrant)));
        }
        if crate::poll_scope::active() {
            if !EXT && let Some(done) = stage::tell(owner, open, r, manifest, room, encode) {
                return Err(done);
            }
            stage::flush();
        }
        Ok(Self { _here: PhantomData })
    }
}

/// Hands this thread's stage to its link. Outside an actor's poll there
/// is nothing to hand over (a stage is handed over when its poll ends),
/// so that case costs one thread-local read.
#[inline(always)]
fn flush_stage() {
    if crate::poll_scope::active() {
        stage::flush();
    }
}

/// An association's link.
///
/// ```text
///          tell / watch / resolve             connect ok / inbound
///   Idle ───────────────────────► Connecting ───────────────────► Up(link)
///    ▲                            (buffers up to   │                │
///    │   connect failed: buffered  pending_capacity)│                │
///    ├────────────────────────────────────────────┘                │
///    │   link closed, unreachable, quarantined, shutdown            │
///    └────────────────────────────────────────────────────────────┘
/// ```
pub(super) enum LinkState {
    Idle,
    Connecting { pending: VecDeque<Pending> },
    Up(Link),
}

/// Something buffered while the link connects.
pub(super) enum Pending {
    User(Arc<Recipient>, Tag, Bytes),
    /// A graceful stop (`envelope::ENV_STOP`) to a recipient taking
    /// manifest `u32`, ordered with the user messages around it.
    Stop(Arc<Recipient>, u32),
    System(Bytes),
}

impl Pending {
    /// Whether it goes to an actor (a message or a graceful stop): a dead
    /// letter if it is never sent.
    pub(super) fn is_user(&self) -> bool {
        !matches!(self, Self::System(_))
    }
}

/// Appends the envelope for `payload` to `b`, defining the recipient's id
/// on this link if needed, and spends the recipient's credit. With
/// `credited`, writes nothing and returns false when the recipient has no
/// credit left (see `flow`); without, always writes (a flush of what
/// waited for the link, which spends the window like any send). Runs under
/// the transport's queue lock, which orders it with every other envelope on
/// the link. `reply`: an ask's reply slot (see `envelope::ENV_REPLY`).
pub(super) fn write_envelope(
    b: &mut BytesMut,
    r: &Recipient,
    link: &Link,
    tag: Tag,
    payload: &[u8],
    credited: bool,
    reply: Option<&str>,
) -> bool {
    let start = b.len();
    match r.to_on(link) {
        envelope::To::Id(id) => {
            if credited && !r.flow.has_credit() {
                return false;
            }
            if reply.is_some() {
                envelope::put_header_reply(b, envelope::To::Id(id), tag, None, reply);
            } else {
                b.reserve(ENV_HEADER + payload.len());
                envelope::put_compact_tag(b, id, tag);
            }
        }
        to @ envelope::To::Define(..) => envelope::put_header_reply(b, to, tag, None, reply),
        to => {
            envelope::put_header_reply(b, to, tag, None, reply);
            b.extend_from_slice(payload);
            return true;
        }
    }
    b.extend_from_slice(payload);
    r.flow.spend(b.len() - start);
    true
}

/// Appends a graceful stop to `r` (an envelope with `ENV_STOP` and no
/// payload), which takes `manifest`: as an uncredited [`write_envelope`],
/// so a recipient without credit (its mailbox full) still gets it, and it
/// spends its few bytes of the window like a message, since the receiver
/// credits them back like one.
pub(super) fn write_stop(b: &mut BytesMut, r: &Recipient, link: &Link, manifest: u32) -> bool {
    let start = b.len();
    let tag = envelope::Tag {
        manifest,
        ext: false,
    };
    write_envelope(b, r, link, tag, &[], false, None);
    b[start] |= envelope::ENV_STOP;
    true
}

/// A running count of one peer-repeatable event, its log lines sampled by
/// the transport's limiter (at most `transport::LOG_BURST` lines per
/// `transport::LOG_WINDOW`), so a flood costs a bounded number of lines,
/// each carrying the running count.
#[derive(Default)]
pub(super) struct Sampler(transport::LogLimit);

impl Sampler {
    pub(super) const fn new() -> Self {
        Self(transport::LogLimit::new())
    }

    /// Counts one more; `Some(count so far)` when this one is to be logged.
    pub(super) fn hit(&self) -> Option<u64> {
        self.0.sample().map(|s| s.total)
    }
}

/// Frames a connection's outbound queue had no room for, parked here at
/// most [`OUTBOX_FRAMES`] of them, sent in order by one task as room frees
/// up: a peer that does not read costs this many small frames, not a task
/// per reply (a flood of questions from a peer that never read its
/// answers once grew a node past a gigabyte that way).
#[derive(Default)]
pub(super) struct Outbox {
    inner: Mutex<OutboxInner>,
}

#[derive(Default)]
struct OutboxInner {
    frames: VecDeque<(Sender, Frame)>,
    draining: bool,
    dropped: u64,
}

/// Frames one outbox holds: system messages are tens of bytes, so about
/// 64 KiB at most.
pub(super) const OUTBOX_FRAMES: usize = 1024;

impl Outbox {
    /// Sends `frame` on `sender` now if its queue has room and nothing is
    /// parked before it, else parks it. Returns false if it was dropped:
    /// the outbox is full, or the connection closed.
    pub(super) fn send(self: &Arc<Self>, sender: &Sender, frame: Frame) -> bool {
        let mut q = lock(&self.inner);
        if q.frames.is_empty() {
            match sender.try_send(frame) {
                Ok(()) => return true,
                Err(TrySendFrameError::Full(f)) => return self.park(&mut q, sender, f),
                Err(_) => return false,
            }
        }
        self.park(&mut q, sender, frame)
    }

    fn park(self: &Arc<Self>, q: &mut OutboxInner, sender: &Sender, frame: Frame) -> bool {
        if q.frames.len() >= OUTBOX_FRAMES {
            q.dropped += 1;
            static DROPPED: Sampler = Sampler::new();
            if DROPPED.hit().is_some() {
                tracing::warn!(
                    dropped = q.dropped,
                    "a peer reads none of its answers: system frame dropped"
                );
            }
            return false;
        }
        q.frames.push_back((sender.clone(), frame));
        if !std::mem::replace(&mut q.draining, true) {
            tokio::spawn(self.clone().drain());
        }
        true
    }

    async fn drain(self: Arc<Self>) {
        loop {
            let (sender, frame) = {
                let mut q = lock(&self.inner);
                match q.frames.pop_front() {
                    Some(next) => next,
                    None => {
                        q.draining = false;
                        return;
                    }
                }
            };
            // A closed connection drops what it had; the rest still goes.
            let _ = sender.send(frame).await;
        }
    }
}

thread_local! {
    /// A message encoder is running on this thread, possibly under a
    /// link's locks (see `outbound`).
    static IN_ENCODER: Cell<bool> = const { Cell::new(false) };
}

/// Runs a message encoder, marking this thread as inside one until it
/// returns or unwinds. A send from inside gets no [`Turn`].
#[inline(always)]
pub(super) fn run_encoder<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        #[inline(always)]
        fn drop(&mut self) {
            IN_ENCODER.with(|c| c.set(false));
        }
    }
    // `with` and `Cell::set`, not `LocalKey::set`: the latter goes through
    // `LocalKey::initialize_with`, which a release build was seen to leave
    // out of line (two calls per remote tell, 3.9 % of the sending
    // thread's instructions under callgrind).
    IN_ENCODER.with(|c| c.set(true));
    let _reset = Reset;
    f()
}

/// Whether this thread is inside a message encoder: read only by
/// [`Turn`], the one place that enforces the guard.
#[inline(always)]
fn in_encoder() -> bool {
    IN_ENCODER.get()
}

/// An encoder: appends the message to the buffer, at most `limit` bytes.
/// Generic rather than `dyn` so that the whole `tell` inlines into the
/// caller's (callgrind: a `dyn` here cost the sending thread 12 % more
/// instructions).
pub(crate) trait Encode: Fn(&mut BytesMut, usize) -> Result<(), SerializationError> {}
impl<F: Fn(&mut BytesMut, usize) -> Result<(), SerializationError>> Encode for F {}

/// `tell_direct`'s message: appended to `b`, whose envelope bytes for it
/// began at `env`, at most `room` bytes, and spent from the recipient's
/// credit (`flow`); false if it does not go this way (`failed` says why,
/// if the encoder failed).
#[inline(always)]
pub(super) fn encode_direct(
    b: &mut BytesMut,
    env: usize,
    encode: &impl Encode,
    room: usize,
    flow: &SendFlow,
    failed: &mut Option<SerializationError>,
) -> bool {
    let start = b.len();
    let ok = match run_encoder(|| encode(b, room)) {
        // A custom encoder is not bounded while encoding.
        Ok(()) => b.len() - start <= room,
        // Large, or too large: the general path tells which.
        Err(SerializationError::TooLarge { .. }) => false,
        Err(e) => {
            *failed = Some(e);
            false
        }
    };
    if ok {
        flow.spend(b.len() - env);
    }
    ok
}

/// A record of a run envelope (`envelope::ENV_RUN`) to recipient `id`,
/// appended to `b`: the run's header first unless `more` (the record
/// extends the run `b` ends with), then the record's length and the
/// message, as [`encode_direct`] encodes and spends it from where `b` ends
/// now. The length is written once known; each branch appends a constant
/// size (a variable one compiled to a memcpy call per message).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_run_record(
    b: &mut BytesMut,
    more: bool,
    id: u32,
    manifest: u32,
    encode: &impl Encode,
    room: usize,
    flow: &SendFlow,
    failed: &mut Option<SerializationError>,
) -> bool {
    let env = b.len();
    if more {
        b.put_bytes(0, 4);
    } else {
        envelope::put_run_header(b, id, manifest);
    }
    let head = b.len() - 4;
    if !encode_direct(b, env, encode, room, flow, failed) {
        return false;
    }
    // Below `RECORD_EXT`: at most the large threshold.
    let len = (b.len() - head - 4) as u32;
    b[head..head + 4].copy_from_slice(&len.to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stage owner that is never asked: nothing is staged here.
    struct NoOwner;
    impl StageOwner for NoOwner {
        fn staged_lost(&self, _: u64, _: &str) {
            unreachable!("nothing staged")
        }
    }

    fn no_encode(_: &mut BytesMut, _: usize) -> Result<(), SerializationError> {
        Ok(())
    }

    #[test]
    fn no_turn_inside_an_encoder() {
        assert!(Turn::begin().is_ok());
        let r = Recipient::new(
            ActorPath::parse("tcp://b@127.0.0.1:1/user/a").expect("a path"),
            0,
        );
        let owner = Arc::new(NoOwner);
        let inside = run_encoder(|| {
            let plain = Turn::begin();
            let tell = Turn::begin_tell::<false, _>(&owner, || None, &r, 1, 100, &no_encode);
            (plain.is_err(), tell.err())
        });
        assert!(inside.0, "a turn inside an encoder");
        assert!(
            matches!(
                inside.1,
                Some(Err(TellError::Serialization(SerializationError::Reentrant)))
            ),
            "a tell's turn inside an encoder"
        );
        // The guard ends with the encoder, even one that panics.
        assert!(Turn::begin().is_ok());
        let _ = std::panic::catch_unwind(|| run_encoder(|| panic!("encoder failed")));
        assert!(Turn::begin().is_ok());
        assert!(Turn::begin_tell::<false, _>(&owner, || None, &r, 1, 100, &no_encode).is_ok());
    }

    #[test]
    fn a_turn_costs_nothing_to_hold() {
        assert_eq!(std::mem::size_of::<Turn>(), 0);
    }
}
