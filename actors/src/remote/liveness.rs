//! Link liveness as a sans-IO state machine: the heartbeat schedule and
//! failure detector's verdict, the evidence that a node is gone, and when
//! to reconnect. Time is passed in; nothing here reads a clock, sleeps or
//! touches a socket, so the tests drive it with a fake clock. What a
//! connection becomes when it arrives (which incarnation it displaces,
//! which of two simultaneous connections both nodes keep) is `install`'s.
//!
//! ```text
//!            arm (a watch waits) / link up
//!  idle ──────────────────────────────────► monitoring
//!   ▲                                         │  detector: phi ≥ threshold
//!   │ quarantine                              ▼
//!   └──────────────────────────────────── unreachable
//!                     heartbeat ack / link up: reachable again → monitoring
//! ```
//!
//! The association calls [`Liveness::tick`] once per heartbeat interval
//! (or when a reconnect is due) and carries out the [`Tick`] it returns.
//!
//! # Evidence: a lost link, then refused reconnects
//! The detector is the judge of a silent network. A node whose link ended
//! without a Close frame (EOF or reset) and whose address then refuses
//! connections (`ECONNREFUSED`: nothing listens there) has told us more:
//! its process is gone. Once a connect is refused at least the grace
//! (`SystemConfig::set_refused_connect_grace`) after the loss, with no link
//! up since, the node is unreachable without waiting for the detector.
//! The grace lets a node that restarts on the same address come back as a
//! new incarnation (and be quarantined as a restart) instead. Refused
//! attempts before the grace ends pull the next attempt forward to its end,
//! whatever the backoff, so the verdict comes within the grace and one
//! connect.
//!
//! ```text
//!  link lost (no Close) ──► connect refused, before grace: retry at loss + grace
//!                        └► connect refused, at/after grace: unreachable
//!  link up / Close from the peer / detector verdict: the evidence is forgotten
//! ```
//!
//! # Fail fast while unreachable
//! Once the node is judged unreachable (either way above), sends and asks
//! to the judged incarnation fail at once with "node unreachable" rather
//! than each paying a dial (a refused connect, or a handshake timeout on a
//! silent host). One background redial, paced by the backoff (at most one
//! attempt in flight, at most one per the backoff's largest delay), looks
//! for the node meanwhile. The verdict lasts until a link comes up (that
//! redial, or the node dialing in), a heartbeat is answered, or the
//! incarnation is quarantined. A send to another incarnation of the node
//! (a restart learned from elsewhere) is not held by it and dials at once.
//!
//! ```text
//!  unreachable(uid) ── send to uid / to no uid ──► fails at once
//!        │          └─ send to another uid ──────► dials now
//!        │  tick: redial at the backoff's pace
//!        └─ link up / heartbeat ack / quarantine ──► verdict over
//! ```
//!
//! # Dialing
//! The backoff paces the reconnects nobody waits for (the tick's). A
//! connect someone needs now (a send, a resolve) starts at once, only
//! spaced from the previous attempt by the backoff's first delay, so a
//! node that was down long is found as soon as it is back, and a sender
//! hammering a dead node costs at most one attempt per that delay (the
//! association never has two in flight).

use std::time::{Duration, Instant};

use transport::{Backoff, HeartbeatConfig, Heartbeater};

/// Liveness of one remote node.
#[derive(Debug)]
pub(crate) struct Liveness {
    hb: Heartbeater,
    /// The detector is armed (a link came up, or a watch waits).
    monitoring: bool,
    /// The detector fired and no heartbeat has been answered since.
    unreachable: bool,
    backoff: Backoff,
    /// No connect attempt before this.
    next_connect: Instant,
    last_resend: Instant,
    /// When the last connect attempt started (or will, if it waits).
    last_attempt: Option<Instant>,
    /// `SystemConfig::set_refused_connect_grace`.
    grace: Duration,
    /// When the link ended without a Close frame, if nothing since has
    /// settled it (a link up, the peer's Close, a verdict).
    lost_at: Option<Instant>,
    /// The incarnation the verdict is about, once the association named
    /// it (`judged`): sends to it fail at once while the verdict holds.
    judged: Option<u64>,
    /// Connections to the node whose reads this node paused (the peer is
    /// over its share of the memory budget for peers): heartbeat acks
    /// wait unread behind what it sent, so silence is no evidence, and
    /// the detector gives no verdict meanwhile.
    paused: u32,
}

/// What one tick asks the association to do.
#[derive(Debug, PartialEq)]
pub(crate) struct Tick {
    /// Send a heartbeat with this sequence number.
    pub(crate) heartbeat: Option<u64>,
    /// The detector fired now, at this phi: declare the node unreachable.
    pub(crate) unreachable: Option<f64>,
    /// Start connecting (the link is down, work waits, the backoff allows).
    pub(crate) reconnect: bool,
    /// Resend unacknowledged system messages on the link.
    pub(crate) resend: bool,
    /// When to tick again.
    pub(crate) next: Instant,
}

/// A reconnect that is due waits at least this long after a tick, so a
/// backoff of zero does not spin.
const MIN_RECONNECT_WAIT: Duration = Duration::from_millis(1);

impl Liveness {
    /// `grace`: `SystemConfig::set_refused_connect_grace`.
    pub(crate) fn new(
        heartbeat: HeartbeatConfig,
        backoff: Backoff,
        grace: Duration,
        now: Instant,
    ) -> Self {
        Self {
            hb: Heartbeater::new(heartbeat, now),
            monitoring: false,
            unreachable: false,
            backoff,
            next_connect: now,
            last_resend: now,
            last_attempt: None,
            grace,
            lost_at: None,
            judged: None,
            paused: 0,
        }
    }

    /// One heartbeat tick. `link_up`: a link to the node is up;
    /// `needs_link`: work waits for one (watches, unacknowledged system
    /// messages, messages buffered while connecting).
    pub(crate) fn tick(&mut self, now: Instant, link_up: bool, needs_link: bool) -> Tick {
        // The schedule advances whether or not a link can carry it.
        let heartbeat = self.hb.poll_transmit(now).filter(|_| link_up);
        let fire =
            self.monitoring && !self.unreachable && self.paused == 0 && !self.hb.is_available(now);
        let unreachable = fire.then(|| self.hb.phi(now));
        if fire {
            self.set_unreachable();
        }
        let resend = link_up && now >= self.last_resend + self.hb.config().interval();
        if resend {
            self.last_resend = now;
        }
        let reconnect = !link_up && needs_link && now >= self.next_connect;
        let mut next = self.hb.poll_timeout();
        if !link_up && needs_link {
            next = next.min(self.next_connect.max(now + MIN_RECONNECT_WAIT));
        }
        Tick {
            heartbeat,
            unreachable,
            reconnect,
            resend,
            next,
        }
    }

    /// Arms the detector: a watch waits on this node.
    pub(crate) fn arm(&mut self, now: Instant) {
        if !self.monitoring && !self.unreachable {
            self.monitoring = true;
            self.hb.reset(now);
        }
    }

    /// A heartbeat ack arrived. True if the node was judged unreachable
    /// and is reachable again.
    pub(crate) fn on_heartbeat_ack(&mut self, now: Instant, seq: u64) -> bool {
        self.hb.handle_ack(now, seq);
        if !self.unreachable {
            return false;
        }
        self.unreachable = false;
        self.judged = None;
        self.monitoring = true;
        self.hb.reset(now);
        true
    }

    /// This node paused reading a connection to the node (`budget::Pressure`):
    /// until it reads on, the detector holds its verdict.
    pub(crate) fn reads_paused(&mut self) {
        self.paused += 1;
    }

    /// This node reads a paused connection again (or cut it): the detector
    /// starts over from `now`, as on a link coming up, since the acks it
    /// missed were unread, not unanswered.
    pub(crate) fn reads_resumed(&mut self, now: Instant) {
        self.paused = self.paused.saturating_sub(1);
        if self.paused == 0 && self.monitoring {
            self.hb.reset(now);
        }
    }

    /// The verdict: unreachable until an answer or a link says otherwise.
    fn set_unreachable(&mut self) {
        self.unreachable = true;
        self.monitoring = false;
        self.lost_at = None;
    }

    /// The verdict just given is about incarnation `uid` (the one the
    /// association knew when it declared the node unreachable).
    pub(crate) fn judged(&mut self, uid: u64) {
        if self.unreachable {
            self.judged = Some(uid);
        }
    }

    /// Whether a send to incarnation `uid` fails at once with "node
    /// unreachable" instead of dialing (see "Fail fast while
    /// unreachable"): the node is judged unreachable, and `uid` is the
    /// judged incarnation or names none (0). A ref to another
    /// incarnation (a restart learned from elsewhere) dials at once.
    pub(crate) fn fails_fast(&self, uid: u64) -> bool {
        self.unreachable && self.judged.is_none_or(|j| uid == 0 || uid == j)
    }

    /// Whether the node wants a link even with no work waiting for one:
    /// a node judged unreachable is redialed in the background, at the
    /// backoff's pace, so that it is found when it is back ("Fail fast
    /// while unreachable"). The caller passes it to [`tick`](Self::tick)
    /// as `needs_link` when no attempt is in flight.
    pub(crate) fn redials(&self) -> bool {
        self.unreachable
    }

    /// A link came up: the backoff starts over and the detector watches
    /// it. True if the node was judged unreachable (a healed partition:
    /// the unreachable links were aborted, so this is how it comes back).
    pub(crate) fn on_link_up(&mut self, now: Instant) -> bool {
        self.backoff.reset();
        self.monitoring = true;
        self.lost_at = None;
        self.hb.reset(now);
        self.judged = None;
        std::mem::replace(&mut self.unreachable, false)
    }

    /// The failure detector's phi now (0 before any heartbeat ack), for
    /// metrics.
    pub(crate) fn phi(&self, now: Instant) -> f64 {
        self.hb.phi(now)
    }

    /// The node's incarnation was quarantined: nothing to watch any more.
    pub(crate) fn on_quarantine(&mut self) {
        self.monitoring = false;
        self.unreachable = false;
        self.judged = None;
        self.lost_at = None;
    }

    /// A link failed or closed: the next connect attempt waits for the
    /// backoff. `abrupt`: it ended without a Close frame from the peer
    /// (EOF or reset), the first half of the evidence (module docs);
    /// otherwise the peer said goodbye, and what was gathered is void.
    pub(crate) fn on_link_closed(&mut self, now: Instant, abrupt: bool, random: u64) {
        self.schedule_reconnect(now, random);
        if !abrupt {
            self.lost_at = None;
        } else if !self.unreachable {
            self.lost_at.get_or_insert(now);
        }
    }

    /// A connect attempt failed; `refused`: with `ECONNREFUSED`. The next
    /// attempt waits for the backoff, or until the grace ends if the link
    /// was lost. `Some(since the loss)` when this refusal completes the
    /// evidence: the node is unreachable now (the caller declares it).
    pub(crate) fn on_connect_failed(
        &mut self,
        now: Instant,
        refused: bool,
        random: u64,
    ) -> Option<Duration> {
        self.schedule_reconnect(now, random);
        let lost = self.lost_at.filter(|_| refused && !self.unreachable)?;
        let since = now.saturating_duration_since(lost);
        if since >= self.grace {
            self.set_unreachable();
            return Some(since);
        }
        self.next_connect = self.next_connect.min(lost + self.grace);
        None
    }

    /// How long a connect attempt waits before it starts: at least the
    /// backoff's first delay after the previous one, and if `paced` (a
    /// reconnect nobody waits for), until the backoff allows. See the
    /// module docs, "Dialing"; the caller has at most one in flight.
    pub(crate) fn attempt_wait(&self, now: Instant, paced: bool) -> Duration {
        let mut at = self.last_attempt.map_or(now, |t| t + self.backoff.min());
        if paced {
            at = at.max(self.next_connect);
        }
        at.saturating_duration_since(now)
    }

    /// A connect attempt starts now.
    pub(crate) fn attempt_started(&mut self, now: Instant) {
        self.last_attempt = Some(now);
    }

    fn schedule_reconnect(&mut self, now: Instant, random: u64) {
        self.next_connect = now + self.backoff.next_delay(random);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn config() -> (HeartbeatConfig, Backoff) {
        let mut hb = HeartbeatConfig::default();
        hb.set_interval(SEC)
            .unwrap()
            .set_acceptable_pause(Duration::from_secs(3))
            .set_threshold(8.0)
            .unwrap();
        let backoff =
            Backoff::new(Duration::from_millis(100), Duration::from_secs(10), 0.0).unwrap();
        (hb, backoff)
    }

    const GRACE: Duration = Duration::from_secs(1);

    fn live(t0: Instant) -> Liveness {
        let (hb, backoff) = config();
        Liveness::new(hb, backoff, GRACE, t0)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn heartbeats_go_out_only_on_a_link() {
        let t0 = Instant::now();
        let mut l = live(t0);
        let first = l.tick(t0, true, false);
        assert!(first.heartbeat.is_some(), "{first:?}");
        assert!(first.next > t0);
        // Down: the schedule advances, nothing is sent.
        let t = first.next;
        assert_eq!(l.tick(t, false, false).heartbeat, None);
        assert!(l.tick(t + SEC, true, false).heartbeat.is_some());
    }

    #[test]
    fn a_silent_node_is_declared_unreachable_once_and_back_on_an_ack() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert!(!l.on_link_up(t0));
        let mut seq = 0;
        // Answered heartbeats: never unreachable.
        let mut t = t0;
        for _ in 0..5 {
            let tick = l.tick(t, true, false);
            assert_eq!(tick.unreachable, None);
            if let Some(s) = tick.heartbeat {
                seq = s;
                assert!(!l.on_heartbeat_ack(t, s));
            }
            t += SEC;
        }
        // Silence: fires once, well within a minute.
        let mut fired = None;
        for i in 0..60 {
            let tick = l.tick(t, true, false);
            if let Some(phi) = tick.unreachable {
                assert!(fired.is_none(), "fires once");
                assert!(phi >= 8.0, "phi {phi}");
                fired = Some(i);
            }
            t += SEC;
        }
        let fired = fired.expect("the detector fires");
        assert!(fired >= 2, "not before the acceptable pause: {fired}");
        // An answer: reachable again, and watched again.
        assert!(l.on_heartbeat_ack(t, seq + 1));
        assert!(!l.on_heartbeat_ack(t, seq + 2));
    }

    #[test]
    fn an_unarmed_detector_never_fires() {
        let t0 = Instant::now();
        let mut l = live(t0);
        for i in 0..100 {
            assert_eq!(l.tick(t0 + SEC * i, true, false).unreachable, None);
        }
        // A watch arms it.
        let t = t0 + SEC * 100;
        l.arm(t);
        let fired = (1..60).any(|i| l.tick(t + SEC * i, true, false).unreachable.is_some());
        assert!(fired);
        // Quarantine disarms it for good.
        l.on_quarantine();
        let t = t + SEC * 60;
        assert!((1..60).all(|i| l.tick(t + SEC * i, true, false).unreachable.is_none()));
    }

    #[test]
    fn reconnects_wait_for_the_backoff_and_only_when_work_waits() {
        let t0 = Instant::now();
        let mut l = live(t0);
        // Nothing waits: no reconnect.
        assert!(!l.tick(t0, false, false).reconnect);
        assert_eq!(l.on_connect_failed(t0, false, 0), None);
        let tick = l.tick(t0, false, true);
        assert!(!tick.reconnect, "backoff not elapsed");
        assert_eq!(tick.next, t0 + ms(100), "woken when due");
        let t = t0 + ms(100);
        assert!(l.tick(t, false, true).reconnect);
        // Doubling.
        l.on_connect_failed(t, false, 0);
        assert!(!l.tick(t + ms(199), false, true).reconnect);
        assert!(l.tick(t + ms(200), false, true).reconnect);
        // A link resets it.
        l.on_link_up(t);
        l.on_link_closed(t, false, 0);
        assert!(l.tick(t + ms(100), false, true).reconnect);
    }

    #[test]
    fn a_connect_someone_waits_for_starts_at_once_however_long_the_backoff() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert_eq!(
            l.attempt_wait(t0, true),
            Duration::ZERO,
            "the first at once"
        );
        l.attempt_started(t0);
        // A long outage: the backoff grows to its cap.
        let mut t = t0;
        for _ in 0..20 {
            t += Duration::from_secs(10);
            assert_eq!(l.attempt_wait(t, true), Duration::ZERO);
            l.attempt_started(t);
            l.on_connect_failed(t, true, 0);
        }
        // A reconnect nobody waits for waits for the backoff...
        assert_eq!(
            l.attempt_wait(t + ms(100), true),
            Duration::from_secs(10) - ms(100)
        );
        assert!(!l.tick(t + ms(100), false, true).reconnect);
        // ...one someone waits for starts at once...
        assert_eq!(l.attempt_wait(t + ms(100), false), Duration::ZERO);
        l.attempt_started(t + ms(100));
        // ...and one hammering a dead node waits out the first delay.
        assert_eq!(l.attempt_wait(t + ms(130), false), ms(70));
    }

    #[test]
    fn a_lost_link_then_a_refusal_after_the_grace_is_unreachable() {
        let t0 = Instant::now();
        let mut l = live(t0);
        l.on_link_up(t0);
        // Lost without a Close frame: refusals inside the grace only
        // bring the next attempt to its end.
        l.on_link_closed(t0, true, 0);
        assert_eq!(l.on_connect_failed(t0 + ms(100), true, 0), None);
        l.on_connect_failed(t0 + ms(300), true, 0);
        l.on_connect_failed(t0 + ms(700), true, 0);
        let tick = l.tick(t0 + ms(700), false, true);
        assert!(tick.next <= t0 + GRACE, "checked again when the grace ends");
        assert!(!l.tick(t0 + ms(999), false, true).reconnect);
        assert!(l.tick(t0 + GRACE, false, true).reconnect);
        // A timeout is not a refusal: a silent network is the detector's.
        assert_eq!(l.on_connect_failed(t0 + GRACE, false, 0), None);
        assert_eq!(l.on_connect_failed(t0 + GRACE, true, 0), Some(GRACE));
        // Once: then the node is unreachable until it answers.
        assert_eq!(l.on_connect_failed(t0 + GRACE * 2, true, 0), None);
        let t = t0 + GRACE * 2;
        assert!((1..60).all(|i| l.tick(t + SEC * i, false, false).unreachable.is_none()));
        assert!(l.on_link_up(t), "reachable again on a link");
    }

    #[test]
    fn while_unreachable_sends_to_the_judged_incarnation_fail_fast_and_one_redial_looks() {
        let t0 = Instant::now();
        let mut l = live(t0);
        l.on_link_up(t0);
        assert!(!l.fails_fast(7), "reachable: dial");
        l.on_link_closed(t0, true, 0);
        assert_eq!(l.on_connect_failed(t0 + GRACE, true, 0), Some(GRACE));
        l.judged(7);
        assert!(l.fails_fast(7), "the judged incarnation");
        assert!(l.fails_fast(0), "a ref that names no incarnation");
        assert!(
            !l.fails_fast(8),
            "a restart learned elsewhere dials at once"
        );
        // Nothing waits for a link, yet the node is redialed in the
        // background at the backoff's pace, and the verdict holds
        // through failed redials.
        let mut t = t0 + GRACE;
        let mut redials = 0;
        for _ in 0..200 {
            t += ms(100);
            if l.tick(t, false, l.redials()).reconnect {
                redials += 1;
                l.attempt_started(t);
                l.on_connect_failed(t, true, 0);
            }
        }
        assert!((3..=20).contains(&redials), "{redials} redials in 20 s");
        assert!(l.fails_fast(7));
        // Over as soon as a link comes up.
        assert!(l.on_link_up(t));
        assert!(!l.fails_fast(7) && !l.fails_fast(0));
        assert!(!l.redials());
    }

    #[test]
    fn a_verdict_ends_on_an_answer_or_a_quarantine() {
        let t0 = Instant::now();
        let mut l = live(t0);
        l.on_link_up(t0);
        let t = (1..60)
            .map(|i| t0 + SEC * i)
            .find(|t| l.tick(*t, true, false).unreachable.is_some())
            .expect("fires");
        // Not named yet: every send to the node fails fast.
        assert!(l.fails_fast(3) && l.redials());
        l.judged(3);
        assert!(!l.fails_fast(4));
        l.on_heartbeat_ack(t + SEC, 1);
        assert!(!l.fails_fast(3), "answered");
        l.on_link_closed(t + SEC, true, 0);
        l.on_connect_failed(t + SEC + GRACE, true, 0);
        l.judged(3);
        assert!(l.fails_fast(3));
        l.on_quarantine();
        assert!(!l.fails_fast(3), "quarantined: `Gone` says the rest");
        // Naming an incarnation when no verdict holds does nothing.
        l.judged(9);
        assert!(!l.fails_fast(9));
    }

    #[test]
    fn refusals_without_an_abrupt_loss_are_no_evidence() {
        let t0 = Instant::now();
        let mut l = live(t0);
        // First contact: a node not started yet.
        assert_eq!(l.on_connect_failed(t0 + GRACE * 5, true, 0), None);
        // A Close from the peer (a graceful end, a duplicate) voids it.
        l.on_link_up(t0);
        l.on_link_closed(t0, true, 0);
        l.on_link_closed(t0 + ms(1), false, 0);
        assert_eq!(l.on_connect_failed(t0 + GRACE * 5, true, 0), None);
        // A link up in between voids it too.
        l.on_link_closed(t0, true, 0);
        l.on_link_up(t0 + ms(500));
        assert_eq!(l.on_connect_failed(t0 + GRACE * 5, true, 0), None);
    }

    #[test]
    fn system_messages_are_resent_once_per_interval_on_a_link() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert!(!l.tick(t0, true, true).resend, "nothing is due at once");
        assert!(l.tick(t0 + SEC, true, true).resend);
        assert!(!l.tick(t0 + SEC + SEC / 2, true, true).resend);
        assert!(!l.tick(t0 + SEC * 3, false, true).resend, "no link");
        assert!(l.tick(t0 + SEC * 3, true, true).resend);
    }

    #[test]
    fn a_healed_partition_is_reported_by_the_link_coming_up() {
        let t0 = Instant::now();
        let mut l = live(t0);
        l.on_link_up(t0);
        let t = (1..60)
            .map(|i| t0 + SEC * i)
            .find(|t| l.tick(*t, true, false).unreachable.is_some())
            .expect("fires");
        assert!(l.on_link_up(t), "was unreachable");
        assert!(!l.on_link_up(t));
    }

    #[test]
    fn a_connection_whose_reads_are_paused_is_not_judged_by_its_silence() {
        let t0 = Instant::now();
        let mut hb = HeartbeatConfig::default();
        hb.set_interval(SEC / 10)
            .unwrap()
            .set_acceptable_pause(SEC / 2);
        let mut l = Liveness::new(hb, Backoff::default(), SEC, t0);
        assert!(!l.on_link_up(t0));
        let mut now = t0;
        for seq in 1..=10 {
            now = t0 + SEC / 10 * seq;
            l.tick(now, true, false);
            l.on_heartbeat_ack(now, u64::from(seq));
        }
        // Reads paused for 5 s (the budget's grace): no ack is read.
        l.reads_paused();
        for step in 1..=50 {
            let t = now + SEC / 10 * step;
            assert_eq!(l.tick(t, true, false).unreachable, None, "at {step}");
        }
        now += SEC * 5;
        // Read again: the detector starts over, and judges silence after.
        l.reads_resumed(now);
        assert_eq!(l.tick(now + SEC / 10, true, false).unreachable, None);
        let fired = (2..=50).any(|step| {
            l.tick(now + SEC / 10 * step, true, false)
                .unreachable
                .is_some()
        });
        assert!(fired, "silence after reading on is judged");
    }
}
