//! Sends gathered over one poll of an actor's task (`poll_scope`): from
//! the second plain message a poll sends to a node, messages are encoded
//! into this thread's stage instead of the link's queue, and handed to the
//! link in one append when the poll ends, when the stage reaches
//! [`STAGE_BYTES`], or before anything else this thread sends to a node
//! (so nothing overtakes them). A handler sending a burst then pays the
//! association's state lock and the queue's lock once per batch rather
//! than once per message (perf: lock and unlock were about a fifth of the
//! sending thread's time on the faithful benchmark).
//!
//! What stays as it was:
//! - order: the stage is handed over before this thread queues anything
//!   else on any link, and at the latest when the poll ends, before the
//!   task can wait for anything;
//! - credit: a staged message spends its recipient's credit when staged,
//!   as a queued one does when queued;
//! - backpressure: the stage opens only on a link whose queue is below its
//!   capacity, and closes when a hand-over fills it, so the queue exceeds
//!   its capacity by at most one stage; then `tell` reports a full link
//!   again;
//! - loss: a stage whose link closed before the hand-over is counted as
//!   dead letters, as frames left in a lost link's queue are (a link that
//!   is closing still takes it, before its Close);
//! - memory: one buffer per thread that ever staged, at most
//!   [`STAGE_BYTES`] plus one message (below the large-message threshold)
//!   and [`ROOM`]; it is handed to the queue whole when the queue holds
//!   little (a buffer swap, not a copy), and the thread takes the queue's
//!   empty one in exchange.
//!
//! A lone message in a poll (request-response) takes the direct path
//! unchanged: the stage opens at the second message to the same node.
//!
//! Private to `link`: a send reaches the stage only through
//! `Turn::begin_tell`, and every other send hands it over first through
//! `Turn::begin` (or the async sends of `LinkPush`).

use std::{cell::RefCell, sync::Arc};

use bytes::{BufMut, BytesMut};
use transport::{FrameKind, frame};

use super::{Encode, Link, Recipient, TellError, encode_run_record};

/// Whom a stage belongs to (an association): told of what a stage lost
/// because its link closed before the hand-over.
pub(in crate::remote) trait StageOwner: Send + Sync {
    /// `n` staged messages were lost: `why`.
    fn staged_lost(&self, n: u64, why: &str);
}

/// Staged bytes at which the stage is handed to the link mid-poll: the
/// default producer-yield threshold, so the writer gets its first batch
/// as early as it did from the direct path.
pub(super) const STAGE_BYTES: usize = 64 * 1024;

thread_local! {
    static STAGE: RefCell<Stage> = RefCell::new(Stage::default());
}

#[derive(Default)]
struct Stage {
    /// The association the staged frames are for, and its link when the
    /// stage opened.
    to: Option<(Arc<dyn StageOwner>, Link)>,
    /// The association this poll sent one message to by the direct path
    /// (by address, for identity only): a second one opens the stage.
    seen: usize,
    /// [`ROOM`] bytes of scratch, then whole frames, ready for
    /// `Sender::push_frames` (empty until the stage first opens).
    buf: BytesMut,
    /// The last frame is a run envelope that a message with this key
    /// (recipient id and manifest) extends (0: none); its header starts at
    /// `run_start`.
    run_key: u64,
    run_start: usize,
}

/// Scratch in front of the staged frames: what the link's queue holds when
/// the stage is handed over (usually the poll's first message, sent
/// directly) moves there if it fits, and the stage's buffer becomes the
/// queue's without being copied (`Sender::push_frames`).
const ROOM: usize = 1024;

impl Stage {
    /// Whether frames are staged.
    #[inline(always)]
    fn holds_frames(&self) -> bool {
        self.buf.len() > ROOM
    }

    /// Empties the stage, leaving its scratch room.
    #[inline]
    fn reset(&mut self) {
        self.buf.clear();
        self.buf.put_bytes(0, ROOM);
        self.run_key = 0;
    }

    /// Hands the staged frames to their link. Returns whether the caller
    /// should yield to the link's writer.
    fn hand_over(&mut self) -> bool {
        if !self.holds_frames() {
            return false;
        }
        let mut yield_now = false;
        if let Some((assoc, link)) = &self.to {
            let buf = &mut self.buf;
            match link.sender.push_frames(buf, ROOM) {
                Ok(p) => {
                    yield_now = p.yield_now;
                    if p.full {
                        // Past the queue's capacity: `tell` reports a full
                        // link again until the writer takes it.
                        self.to = None;
                    }
                }
                Err(e) => {
                    let why = format!("link closed before a batch was queued: {e}");
                    assoc.staged_lost(e.lost(), &why);
                    self.to = None;
                }
            }
        }
        self.reset();
        yield_now
    }

    /// The poll ended: everything goes, and nothing is kept for the next
    /// poll (its link may have changed by then).
    fn end(&mut self) {
        self.hand_over();
        self.to = None;
        self.seen = 0;
    }
}

/// Hands this thread's stage to its link now: before anything else this
/// thread sends to a node, so that nothing overtakes what was staged.
#[inline]
pub(super) fn flush() {
    STAGE.with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.holds_frames()
        {
            s.hand_over();
        }
    });
}

/// The end of a poll (`poll_scope::at_end`).
fn end_of_poll() {
    STAGE.with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            s.end();
        }
    });
}

/// Removes a half-written frame from the stage if its encoder panics.
struct Truncate<'a> {
    buf: &'a mut BytesMut,
    to: usize,
}

impl Drop for Truncate<'_> {
    fn drop(&mut self) {
        if self.to != usize::MAX {
            self.buf.truncate(self.to);
        }
    }
}

/// The address of what `owner` points to, for identity.
fn addr<T: ?Sized>(owner: &Arc<T>) -> usize {
    Arc::as_ptr(owner).cast::<()>() as usize
}

/// `tell` of a plain message inside an actor's poll, to the association
/// `owner`: staged from the second message this poll sends to it (see the
/// module docs); `open` gives the link to stage for, if it may (up, takes
/// runs, its queue below capacity). `room`: the most the message may
/// take. `None`: not staged, take the direct path (the first message, a
/// link that may not be staged for, a recipient without an id on the
/// link yet, a message too large for it).
#[inline]
pub(super) fn tell<T: StageOwner + 'static>(
    owner: &Arc<T>,
    open: impl FnOnce() -> Option<Link>,
    r: &Recipient,
    manifest: u32,
    room: usize,
    encode: &impl Encode,
) -> Option<Result<bool, TellError>> {
    STAGE.with(
        #[inline(always)]
        |cell| {
            let mut st = cell.try_borrow_mut().ok()?;
            let st = &mut *st;
            let me = addr(owner);
            if st.to.as_ref().is_none_or(|(a, _)| addr(a) != me) {
                if st.seen != me {
                    // The first message to this node in this poll.
                    st.seen = me;
                    crate::poll_scope::at_end(end_of_poll);
                    return None;
                }
                open_for(st, owner.clone(), open)?;
            }
            let (_, link) = st.to.as_ref().expect("opened above");
            if !link.serves(r.uid) {
                return Some(Err(TellError::Gone));
            }
            let id = link.ids.lookup(&r.id)?;
            let flow = &*r.flow;
            if !flow.has_credit() {
                return Some(Err(TellError::NoCredit));
            }
            let run_limit = link.run_limit;
            // Ids are never 0 (`compression`).
            let key = u64::from(id) << 32 | u64::from(manifest);
            let Stage {
                buf,
                run_key,
                run_start,
                ..
            } = st;
            let more = *run_key == key;
            let start = buf.len();
            let frame_at = if more { *run_start } else { start };
            let mut guard = Truncate { buf, to: start };
            // Credit counts envelope bytes, as the receiver returns them: a
            // new frame's header comes before them.
            if !more {
                frame::encode_header(FrameKind::Message, 0, guard.buf);
            }
            let mut failed = None;
            if !encode_run_record(
                guard.buf,
                more,
                id,
                manifest,
                encode,
                room,
                flow,
                &mut failed,
            ) {
                // Dropping the guard removes what was written.
                return failed.map(|e| Err(TellError::Serialization(e)));
            }
            let body = guard.buf.len() - frame_at - frame::HEADER_LEN;
            frame::set_body_len(&mut guard.buf[frame_at..], body);
            guard.to = usize::MAX;
            let staged = guard.buf.len();
            drop(guard);
            if !more {
                (*run_key, *run_start) = (key, frame_at);
            }
            if body >= run_limit {
                *run_key = 0;
            }
            if staged >= STAGE_BYTES {
                return Some(Ok(st.hand_over()));
            }
            Some(Ok(false))
        },
    )
}

/// Opens the stage for `owner`, handing over what it held for another.
#[cold]
#[inline(never)]
fn open_for(
    st: &mut Stage,
    owner: Arc<dyn StageOwner>,
    open: impl FnOnce() -> Option<Link>,
) -> Option<()> {
    st.end();
    st.seen = addr(&owner);
    let link = open()?;
    if st.buf.len() < ROOM {
        st.reset();
    }
    st.to = Some((owner, link));
    crate::poll_scope::at_end(end_of_poll);
    Some(())
}
