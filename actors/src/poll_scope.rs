//! One poll of an actor's task as a scope: what its handlers send to another
//! node during the poll may be gathered and handed to the link once, at the
//! end of the poll or when a batch is full (`remote::link::stage`), instead of
//! taking the link's locks once per message. Nothing here knows what is
//! gathered: whoever gathers registers a function to call when the poll
//! ends.

use std::cell::Cell;

thread_local! {
    /// An actor's task is being polled on this thread.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Called when the outermost poll ends, if something was gathered.
    static AT_END: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// Whether this thread is inside an actor task's poll.
#[inline(always)]
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// Calls `end` when the current poll ends (once, however often this is
/// called in the poll; the last function given wins).
#[inline]
pub(crate) fn at_end(end: fn()) {
    AT_END.with(|c| c.set(Some(end)));
}

/// Runs one poll (`f`, which must not unwind: the caller catches panics
/// inside it) as a scope, then calls what was registered with
/// [`at_end`]. A poll nested in another (a runtime driven from inside a
/// handler) belongs to the outer one.
#[inline]
pub(crate) fn poll<R>(f: impl FnOnce() -> R) -> R {
    let outer = ACTIVE.with(|c| c.replace(true));
    let r = f();
    if !outer {
        ACTIVE.with(|c| c.set(false));
        if let Some(end) = AT_END.with(Cell::take) {
            end();
        }
    }
    r
}
