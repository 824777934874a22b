//! The constant-rate generator's schedule as a pure state machine, the
//! timer it sleeps on, and the generator's own lateness.
//!
//! `tokio::time::sleep` wakes on a millisecond tick: a sleep of 10 µs ends
//! up to a millisecond later. A generator that only sleeps on it therefore
//! sends the messages scheduled inside a tick late and together, and, since
//! latency counts from the schedule, reports its own lateness as the
//! transport's. [`Pacer`] sleeps only until a spin stretch before the next
//! due time and then asks to be polled again as soon as possible: the
//! driver, [`next`], yields to the runtime, so the node's own tasks on the
//! same worker keep running. On Linux the sleep is a timerfd in tokio's
//! reactor, which wakes within tens of microseconds, so the stretch can be
//! short and the worker thread sleeps between messages at low rates instead
//! of spinning (on a 2-core machine a spinning thread competes for a core
//! with the other node and with everything else that runs). Elsewhere it
//! is tokio's timer and a 2 ms stretch. [`Lateness`] records how late each
//! message actually went, so that a late generator shows instead of hiding
//! in the latency figures.
//!
//! Time is passed in (nanoseconds since [`crate::pattern::epoch`]), so the
//! tests drive the pacer with a fake clock.
//!
//! ```text
//!          far from due            within `spin`            due
//!   ──────────────────────────┬─────────────────────────┬────────────▶ now
//!     Wait::Sleep(until       │  Wait::Spin (yield,     │ Wait::Send(range of
//!     due - spin)             │  poll again)            │ every message due)
//! ```

use std::{ops::Range, time::Duration};

use hdrhistogram::Histogram;

use crate::{pattern::now_ns, report::Report};

/// Default stretch before each due time that the generator yields instead
/// of sleeping, with [`Timer`]'s timerfd: it covers the wake-up of a
/// sleeping worker thread. Measured at 10,000 msg/s on the 2-core machine
/// (medians of 3 passes of `--rate 10000 --compare 3 --spin-us N`): the
/// generator's median lateness is 6.7–8.7 µs with no stretch (the timerfd's
/// wake-up) and 0.5–0.7 µs with 20, 50, 100 or 300 µs; 50 leaves a margin
/// and still lets the worker sleep half of each 100 µs interval. Its p99
/// is the machine's: when other processes run, the kernel takes the core
/// for milliseconds whatever the stretch (docs/PERFORMANCE.md, "Latency").
#[cfg(target_os = "linux")]
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Default stretch before each due time that the generator yields instead
/// of sleeping, on tokio's timer: `tokio::time::sleep` rounds its deadline
/// up to the next millisecond tick, so a sleep can end up to about 1 ms
/// late, plus the time the worker takes to notice; 2 ms covers both.
#[cfg(not(target_os = "linux"))]
pub const DEFAULT_SPIN: Duration = Duration::from_millis(2);

/// What the generator does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// Send the messages with these indices: every one due by now.
    Send(Range<u64>),
    /// Nothing is due for a while: sleep this long, then ask again.
    Sleep(Duration),
    /// The next message is due within the spin stretch: yield, ask again.
    Spin,
    /// Every message has been handed out.
    Done,
}

/// A fixed schedule of `messages` sends, one every `1 / rate` seconds from
/// `start_ns`, handed out as it falls due.
#[derive(Debug, Clone)]
pub struct Pacer {
    start_ns: u64,
    interval_ns: f64,
    messages: u64,
    next: u64,
    spin: Duration,
}

impl Pacer {
    /// A schedule of `messages` at `rate` msg/s, the first due at
    /// `start_ns`, sleeping only until `spin` before each due time.
    pub fn new(start_ns: u64, rate: f64, messages: u64, spin: Duration) -> Self {
        Self {
            start_ns,
            interval_ns: 1e9 / rate,
            messages,
            next: 0,
            spin,
        }
    }

    /// When message `i` is due (ns since the epoch).
    pub fn due(&self, i: u64) -> u64 {
        self.start_ns + (i as f64 * self.interval_ns) as u64
    }

    /// What to do at `now_ns`. A `Send` range is handed out once: the next
    /// call starts after it. When the generator is behind, the range holds
    /// every message that is due (they go at once, still timed from their
    /// schedule).
    pub fn poll(&mut self, now_ns: u64) -> Wait {
        if self.next >= self.messages {
            return Wait::Done;
        }
        let due = self.due(self.next);
        if due <= now_ns {
            let first = self.next;
            let mut end = first + 1;
            while end < self.messages && self.due(end) <= now_ns {
                end += 1;
            }
            self.next = end;
            return Wait::Send(first..end);
        }
        let ahead = Duration::from_nanos(due - now_ns);
        if ahead > self.spin {
            Wait::Sleep(ahead - self.spin)
        } else {
            Wait::Spin
        }
    }
}

/// Waits on the runtime for the next messages that fall due and returns
/// their indices, or `None` when every message has been handed out.
/// Sleeps on `timer` while nothing is due for longer than the spin
/// stretch, then yields to the runtime between polls, so the tasks that
/// share the worker (the node's writer, the echo collector) keep running;
/// and yields once on every call, between one batch and the next.
///
/// # Errors
/// The timerfd failed (not expected once created).
pub async fn next(pacer: &mut Pacer, timer: &Timer) -> std::io::Result<Option<Range<u64>>> {
    // One turn for the worker's other tasks after every batch, even when
    // the next is already due: a generator that is behind would otherwise
    // keep the worker until tokio's cooperative budget runs out (128
    // socket writes for the ceiling), and the echoes it is timing would
    // wait that long to be read (measured: ceiling p50 about 400 µs at
    // 1,000,000 msg/s with the generator itself on time).
    tokio::task::yield_now().await;
    loop {
        match pacer.poll(now_ns()) {
            Wait::Send(range) => return Ok(Some(range)),
            Wait::Sleep(d) => timer.sleep(d).await?,
            Wait::Spin => tokio::task::yield_now().await,
            Wait::Done => return Ok(None),
        }
    }
}

/// What the generator sleeps on: on Linux a timerfd registered with
/// tokio's reactor, which wakes the worker within tens of microseconds
/// (tokio's own timer works in whole milliseconds); elsewhere tokio's
/// timer.
#[derive(Debug)]
pub struct Timer {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Timer {
    /// A timer on the current runtime's reactor.
    ///
    /// # Errors
    /// The timerfd cannot be created or registered.
    pub fn new() -> std::io::Result<Self> {
        #[cfg(target_os = "linux")]
        {
            use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
            let fd = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // tokio deprecated the safe constructors because a generic `T`
            // could return another fd from `as_raw_fd` later; `OwnedFd`
            // owns its fd and always returns it, which is the condition
            // the unsafe `register_with_interest` asks of its caller (and
            // this crate forbids `unsafe`).
            #[allow(deprecated)]
            let fd = tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)?;
            Ok(Self { fd })
        }
        #[cfg(not(target_os = "linux"))]
        Ok(Self {})
    }

    /// Sleeps for `d`.
    ///
    /// # Errors
    /// The timerfd failed.
    pub async fn sleep(&self, d: Duration) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // An all-zero value would disarm the timer instead.
            let value = Timespec::try_from(d.max(Duration::from_nanos(1)))
                .map_err(|_| std::io::Error::other("sleep too long for a timespec"))?;
            let spec = Itimerspec {
                it_interval: zero,
                it_value: value,
            };
            timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
            loop {
                let mut ready = self.fd.readable().await?;
                // The expiry count; reading it clears readiness.
                let mut count = [0u8; 8];
                match ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut count)?)) {
                    Ok(res) => return res.map(drop),
                    Err(_would_block) => continue,
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            tokio::time::sleep(d).await;
            Ok(())
        }
    }
}

/// What a constant-rate run measured.
#[derive(Debug)]
pub struct RateRun {
    /// Latency from each message's scheduled send time to its echo.
    pub latency: Report,
    /// Latency from the time each message was actually sent to its echo:
    /// the transport alone, without the generator's lateness (and so with
    /// coordinated omission; `latency` is the figure to judge).
    pub from_sent: Report,
    /// How late the generator sent each message.
    pub lateness: Lateness,
    /// Messages per second actually sent.
    pub achieved: f64,
    /// Wall time from the first scheduled send to the last echo.
    pub elapsed: Duration,
}

/// How late the generator sent each message: actual send time minus
/// scheduled time, in nanoseconds.
#[derive(Debug, Clone)]
pub struct Lateness {
    hist: Histogram<u64>,
}

impl Default for Lateness {
    fn default() -> Self {
        Self::new()
    }
}

impl Lateness {
    /// An empty record.
    pub fn new() -> Self {
        Self {
            // 1 ns .. 100 s at 3 significant digits.
            hist: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("static bounds are valid"),
        }
    }

    /// Records one message sent at `sent_ns` that was due at `due_ns`.
    pub fn record(&mut self, due_ns: u64, sent_ns: u64) {
        self.hist.saturating_record(sent_ns.saturating_sub(due_ns));
    }

    /// Lateness at quantile `q`, in microseconds.
    pub fn percentile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// The largest lateness, in microseconds.
    pub fn max_us(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    /// Messages recorded.
    pub fn samples(&self) -> u64 {
        self.hist.len()
    }

    /// One line: `Generator lateness (us, sent - scheduled): p50 0.4, p99
    /// 2.1, max 35.0 (50000 samples)`.
    pub fn line(&self) -> String {
        format!(
            "Generator lateness (us, sent - scheduled): p50 {:.1}, p99 {:.1}, max {:.1} ({} samples)",
            self.percentile_us(0.5),
            self.percentile_us(0.99),
            self.max_us(),
            self.samples()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    /// A fake clock: a sleep ends at the first `tick` at or after its
    /// deadline (tokio's timer: 1 ms; a timerfd: 1 ns), plus `wake` for the
    /// worker to notice; a spin (one yield) costs `step`; each send costs
    /// `send`.
    struct Fake {
        now: u64,
        tick: u64,
        wake: u64,
        step: u64,
        send: u64,
    }

    impl Fake {
        fn run(&mut self, pacer: &mut Pacer) -> (Lateness, Vec<u64>) {
            let mut late = Lateness::new();
            let mut sent = Vec::new();
            loop {
                match pacer.poll(self.now) {
                    Wait::Send(range) => {
                        for i in range {
                            late.record(pacer.due(i), self.now);
                            sent.push(i);
                            self.now += self.send;
                        }
                    }
                    Wait::Sleep(d) => {
                        let deadline = self.now + d.as_nanos() as u64;
                        self.now = deadline.div_ceil(self.tick) * self.tick + self.wake;
                    }
                    Wait::Spin => self.now += self.step,
                    Wait::Done => return (late, sent),
                }
            }
        }
    }

    /// tokio's millisecond timer.
    fn fake() -> Fake {
        Fake {
            now: 0,
            tick: MS,
            wake: 50 * US,
            step: US,
            send: 200,
        }
    }

    #[test]
    fn the_schedule_is_fixed_from_the_start() {
        let p = Pacer::new(5 * MS, 100_000.0, 10, DEFAULT_SPIN);
        assert_eq!(p.due(0), 5 * MS);
        assert_eq!(p.due(1), 5 * MS + 10 * US);
        assert_eq!(p.due(9), 5 * MS + 90 * US);
    }

    #[test]
    fn sleeps_until_the_spin_stretch_then_spins_then_sends() {
        let mut p = Pacer::new(10 * MS, 1000.0, 2, Duration::from_millis(2));
        assert_eq!(p.poll(0), Wait::Sleep(Duration::from_millis(8)));
        assert_eq!(p.poll(8 * MS + 1), Wait::Spin);
        assert_eq!(p.poll(10 * MS), Wait::Send(0..1));
        assert_eq!(p.poll(10 * MS + 1), Wait::Spin);
        assert_eq!(p.poll(11 * MS), Wait::Send(1..2));
        assert_eq!(p.poll(11 * MS), Wait::Done);
    }

    #[test]
    fn a_late_poll_hands_out_everything_due_once() {
        let mut p = Pacer::new(0, 1_000_000.0, 100, Duration::ZERO);
        assert_eq!(p.poll(2_500), Wait::Send(0..3));
        assert_eq!(p.poll(2_500), Wait::Sleep(Duration::from_nanos(500)));
        assert_eq!(p.poll(1_000_000), Wait::Send(3..100));
        assert_eq!(p.poll(1_000_000), Wait::Done);
    }

    #[test]
    fn sleeping_alone_is_late_by_up_to_a_tick() {
        // The old generator: sleep to the due time, no spin stretch.
        let mut p = Pacer::new(MS / 3, 100_000.0, 2000, Duration::ZERO);
        let (late, sent) = fake().run(&mut p);
        assert_eq!(sent, (0..2000).collect::<Vec<_>>(), "each once, in order");
        assert!(late.percentile_us(0.5) > 200.0, "{}", late.line());
        assert!(late.max_us() > 900.0, "{}", late.line());
    }

    #[test]
    fn the_spin_stretch_keeps_the_schedule_within_a_yield() {
        // tokio's timer needs a stretch over a tick; a timerfd one over its
        // wake-up (here 30 µs).
        let timerfd = Fake {
            tick: 1,
            wake: 30 * US,
            ..fake()
        };
        for (clock, spin) in [(fake(), 2 * MS), (timerfd, 50 * US)] {
            for rate in [1000.0, 10_000.0, 100_000.0, 1_000_000.0] {
                let mut p = Pacer::new(MS / 3, rate, 2000, Duration::from_nanos(spin));
                let (late, sent) = Fake { ..clock }.run(&mut p);
                assert_eq!(sent.len(), 2000);
                // One yield step plus the sends of a catch-up; never a tick.
                assert!(late.max_us() <= 2.0, "{rate}: {}", late.line());
            }
        }
    }

    #[test]
    fn a_stretch_shorter_than_the_wake_up_is_late_by_the_difference() {
        let mut p = Pacer::new(0, 1000.0, 100, Duration::from_micros(10));
        let mut f = Fake {
            tick: 1,
            wake: 30 * US,
            ..fake()
        };
        let (late, _) = f.run(&mut p);
        assert!(
            (19.0..=21.0).contains(&late.percentile_us(0.5)),
            "{}",
            late.line()
        );
    }

    #[test]
    fn a_slow_sender_shows_as_lateness() {
        // Each send takes 2 µs but one is due every 1 µs: the generator
        // falls behind, and the lateness says so.
        let mut p = Pacer::new(0, 1_000_000.0, 1000, Duration::from_millis(2));
        let mut f = Fake {
            send: 2 * US,
            ..fake()
        };
        let (late, sent) = f.run(&mut p);
        assert_eq!(sent.len(), 1000);
        assert!(late.max_us() > 900.0, "{}", late.line());
    }

    #[test]
    fn the_line_parses() {
        let mut l = Lateness::new();
        l.record(1000, 1400);
        l.record(1000, 3100);
        let re = regex::Regex::new(
            r"^Generator lateness \(us, sent - scheduled\): p50 ([\d.]+), p99 ([\d.]+), max ([\d.]+) \((\d+) samples\)$",
        )
        .unwrap();
        let line = l.line();
        let c = re.captures(&line).unwrap_or_else(|| panic!("{line}"));
        assert_eq!(&c[1], "0.4");
        assert_eq!(&c[3], "2.1");
        assert_eq!(&c[4], "2");
    }
}
