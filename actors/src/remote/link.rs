//! What a link is made of, shared by the units that send on it: the
//! recipient as a link sees it, the link itself, an association's link
//! state, what waits while it connects, and the guard for the user code
//! (message encoders) that runs under a link's locks.

use std::{
    cell::Cell,
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use bytes::{BufMut, Bytes, BytesMut};
use transport::{Frame, Sender, TrySendFrameError};

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
    pub(super) sender: Sender,
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
/// returns or unwinds. Remote sends check [`in_encoder`] first.
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

/// Whether this thread is inside a message encoder.
#[inline(always)]
pub(super) fn in_encoder() -> bool {
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
