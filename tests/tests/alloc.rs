//! Counts heap allocations while 100,000 frames cross a connection, to back
//! the claim that the steady state allocates nothing per frame.
//!
//! Its own test binary, because the counting allocator is process-wide and
//! any other test running alongside would be counted too.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
};

use integration_tests::{establish, pair, within};
use tokio::sync::Notify;
use transport::{Frame, FrameKind, Handler};

/// Counts every allocation and reallocation, then defers to `System`.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counter is a relaxed atomic
// and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds the contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: `ptr` and `layout` come from this allocator, which got
        // them from `System`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WARMUP: u64 = 10_000;
const MEASURED: u64 = 100_000;
const BODY: usize = 100;
/// Allowed allocations in the window: 1% of frames. Buffers may still grow
/// a few times; anything per frame would be 100,000 or more.
const LIMIT: u64 = MEASURED / 100;

/// Counts frames and drops them; wakes `done` when the count reaches
/// `target`. Allocates nothing per frame.
struct Count {
    seen: u64,
    target: Arc<AtomicU64>,
    done: Arc<Notify>,
}

impl Handler for Count {
    fn on_frame(&mut self, frame: Frame) {
        debug_assert_eq!(frame.body.len(), BODY);
        drop(frame);
        self.seen += 1;
        if self.seen == self.target.load(Relaxed) {
            // Stores a permit if the test is not waiting yet.
            self.done.notify_one();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_allocates_nothing_per_frame() {
    let (a, b) = pair().await;
    let (dialed, accepted) = establish(&a, &b).await;
    let target = Arc::new(AtomicU64::new(WARMUP));
    let done = Arc::new(Notify::new());
    let _receiver = accepted.start(Count {
        seen: 0,
        target: target.clone(),
        done: done.clone(),
    });
    let (conn, _inbound) = dialed.start_channel(1);
    let sender = conn.sender();
    let body = [0xabu8; BODY];
    let send = |n: u64| {
        let sender = &sender;
        async move {
            for _ in 0..n {
                sender
                    .send_with(FrameKind::Message, |b| b.extend_from_slice(&body))
                    .await
                    .expect("send");
            }
        }
    };

    send(WARMUP).await;
    within("warm-up frames", done.notified()).await;
    // Set the next target before the window opens; the handler sees it
    // before the first new frame, which is sent after this store.
    target.store(WARMUP + MEASURED, Relaxed);

    let before = ALLOCATIONS.load(Relaxed);
    send(MEASURED).await;
    within("measured frames", done.notified()).await;
    let allocations = ALLOCATIONS.load(Relaxed) - before;

    println!("{allocations} allocations for {MEASURED} frames of {BODY} bytes");
    assert!(
        allocations < LIMIT,
        "{allocations} allocations for {MEASURED} frames (limit {LIMIT}): something allocates per frame"
    );
}
