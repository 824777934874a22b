//! Inbound dispatch: what a connection's reader delivers into. It parses
//! envelopes, resolves recipient ids, groups the payloads of one socket
//! read by recipient, and hands each mailbox its group in one push; the
//! actor's own task decodes them. System messages are answered here.

use std::{
    borrow::Cow,
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::{BufMut, Bytes, BytesMut};
use transport::{CloseReason, Frame, FrameKind, Handler, Sender};

use super::{
    access::Access,
    compression::InboundIds,
    envelope::{self, EnvelopeError, Fragment, Kind},
    flow::{ParkBudget, ParkRefused, ParkedBatch, Windowed},
    large::{Reassembly, Step},
    link::{Outbox, Sampler, lock},
    reliable::{Receive, SysIn},
    system_msg::SysWire,
};
use crate::{
    budget::{Charge, ConnBudget, Held, Pressure, Verdict, id_cost, queued_cost},
    config::SystemConfig,
    dead_letter::{DeadLetterReason, MalformedKind},
    lifecycle::{StopReason, Terminated},
    mailbox::{RECORD_EXT, Refused, STOP_RECORD},
    path::MAX_PATH_LEN,
    registry::{Registry, Target},
    reply::NoReply,
    serialization::manifests,
    watch::{RemoteWatcher, WatchSink},
};

/// What the dispatcher reports to, and asks of, the association of the
/// node at the other end (implemented by `Association`; a test can fake
/// it). Nothing here is called per user message.
pub(super) trait Peer: Send + Sync + 'static {
    /// The node (`name@host:port`).
    fn node(&self) -> &Arc<str>;
    /// The receiving half of the reliable system-message stream, held
    /// while a message is delivered so that two links of one node cannot
    /// deliver out of order.
    fn sys_in(&self) -> MutexGuard<'_, SysIn>;
    /// The peer acknowledged reliable system messages up to `seq`.
    fn on_ack(&self, epoch: u64, seq: u64);
    /// The peer's incarnation `uid` is shutting down.
    fn on_shutdown(&self, uid: u64);
    /// The peer read large message `msg` up to `received` bytes.
    fn on_large_ack(&self, msg: u32, received: u32);
    fn on_heartbeat_ack(&self, seq: u64);
    /// The answer to identify request `id`.
    fn on_identity(&self, id: u64, manifest: Option<(u32, String)>);
    /// An actor watched under `watch_id` terminated.
    fn on_terminated(&self, watch_id: u64, reason: StopReason);
    /// Where `Terminated` notices for the peer's watches go.
    fn watcher(self: Arc<Self>) -> Arc<dyn RemoteWatcher>;
    /// The connection of this generation ended.
    fn on_close(&self, generation: u32, reason: &CloseReason);
    /// The peer grants recipient `id` of the connection of `generation`
    /// up to `total` envelope bytes (see `flow`).
    fn on_credit(&self, generation: u32, id: u32, total: u64);
    /// A fragment of a large message arrived (counted for metrics).
    fn on_fragment(&self) {}
    /// This node paused reading a proven connection from the peer (it is
    /// over its share of the memory budget; `paused`), or reads it again
    /// or cut it (`!paused`): its heartbeat acks wait unread meanwhile,
    /// so the failure detector must not take the silence for the node's.
    fn on_reads_paused(&self, paused: bool) {
        let _ = paused;
    }
}

/// The window over which malformed envelopes are counted against
/// [`SystemConfig::set_max_malformed_per_second`](crate::SystemConfig::set_max_malformed_per_second).
const MALFORMED_WINDOW: Duration = Duration::from_secs(1);
/// Initial size of a run buffer: a read's worth of small messages.
const RUN_BUFFER: usize = 64 * 1024;
/// Runs (recipients) whose buffers are kept between reads.
const MAX_RUNS: usize = 64;
/// A batch this small whose buffer has more room left than it fills is
/// copied into an allocation of its own (`Dispatch::deliver_runs`): 4 KiB,
/// a page. A copy of that much costs less than the batch's charge would
/// for the spare room it otherwise keeps alive, and a batch of a full
/// read (the throughput case) fills its buffer and is never copied.
const COPY_BATCH_BELOW: usize = 4096;
/// The id an inline recipient (`envelope::To::Inline`) is known by while
/// its envelope is handled; a peer may not define it.
const INLINE_ID: u32 = u32::MAX;

/// The records of a run envelope (`envelope::ENV_RUN`): how many there
/// are, or why they are malformed. They must be in the form a run buffer
/// keeps (`[len u32 LE][payload]`), at least one, each length below
/// [`RECORD_EXT`] (so neither an extension block's mark nor a stop marker)
/// and the last ending where the envelope does: then they are appended as
/// they are.
#[inline]
pub(super) fn run_records(mut b: &[u8]) -> Result<usize, &'static str> {
    if b.is_empty() {
        return Err("a run envelope without records");
    }
    let mut n = 0;
    while let Some((head, rest)) = b.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*head);
        if len >= RECORD_EXT {
            return Err("a run record of 2^31 bytes or more");
        }
        let Some(next) = rest.get(len as usize..) else {
            return Err("a run record longer than its envelope");
        };
        b = next;
        n += 1;
    }
    if b.is_empty() {
        Ok(n)
    } else {
        Err("a truncated run record length")
    }
}

/// A large message's recipient path and target.
type LargeTarget = (Arc<str>, Arc<dyn Target>);

/// A large message held for a full mailbox: its recipient's path and
/// target, the one-record batch, and its charge.
type HeldLarge = (Arc<str>, Arc<dyn Target>, Bytes, Charge);

/// A connection's inbound side (the transport's [`Handler`]).
pub(crate) struct Dispatch {
    registry: Arc<Registry>,
    peer: Arc<dyn Peer>,
    /// `SystemConfig::set_max_malformed_per_second`.
    max_malformed: usize,
    /// `SystemConfig::set_max_message_size`.
    max_message: usize,
    /// `SystemConfig::set_message_runs`: this node announced that it takes
    /// run envelopes (`envelope::ENV_RUN`); if not, one is malformed, as it
    /// is for a node that does not know them.
    takes_runs: bool,
    /// Which system requests of the peer are honoured.
    access: Access,
    /// The connection is proven to be the node it names: this node dialed
    /// it, or its certificate names the node (see
    /// `Association::receive_only`). An unproven one delivers user
    /// messages and the peer's own reliable stream, and its questions are
    /// answered on it, but nothing on it changes what this node believes of
    /// the node it names: no shutdown notice, no ack of our stream, no
    /// answer to our questions, no heartbeat or large-message ack, and it
    /// cannot take over a reliable stream another incarnation started.
    proven: bool,
    generation: u32,
    /// The incarnation at the other end of this connection.
    peer_uid: u64,
    sender: Option<Sender>,
    /// Answers that found the connection's queue full.
    outbox: Arc<Outbox>,
    ids: InboundIds<Entry>,
    /// The recipient of the inline envelope being handled (`INLINE_ID`).
    inline: Option<Entry>,
    runs: Runs,
    /// Bytes of the current read not yet handed to a handler method: how
    /// much a run buffer may still need this read.
    left_in_read: usize,
    /// Malformed envelopes in the current window, and when it started.
    malformed_count: usize,
    malformed_since: Option<Instant>,
    /// Set once the connection was aborted for malformed input.
    misbehaving: bool,
    /// The large message being reassembled on this connection.
    large: Reassembly<LargeTarget>,
    /// Reassembled large messages, handed over at the end of the read:
    /// recipient path, target, a one-record batch.
    ready: Vec<(Arc<str>, Arc<dyn Target>, Bytes)>,
    /// The last fragment of this read (message id, end offset), to be
    /// acknowledged at the end of the read.
    large_ack: Option<(u32, u32)>,
    /// `SystemConfig::set_recipient_window`.
    window: u64,
    /// What this connection may hold for full mailboxes; its account
    /// (`budget().account()`) is the connection's share of the node-wide
    /// budget, charged for ids and reassembly here as well.
    budget: Arc<ParkBudget>,
    /// Large messages that found their mailbox full (see `LargeHold`).
    large_hold: Arc<Mutex<LargeHold>>,
    /// Bytes charged for this connection's recipient ids.
    ids_charged: usize,
    /// Bytes charged for the large message being reassembled.
    large_charged: usize,
    /// A charge was refused during this read (set where only `&self` is
    /// at hand; taken at the end of the read).
    refused: AtomicBool,
    /// Over its share: reading pauses, then the connection is cut.
    pressure: Pressure,
}

/// While alive, the peer's liveness knows that this node paused reading one
/// of its connections (`Peer::on_reads_paused`).
struct ReadsPaused(Arc<dyn Peer>);

impl ReadsPaused {
    fn new(peer: Arc<dyn Peer>) -> Self {
        peer.on_reads_paused(true);
        Self(peer)
    }
}

impl Drop for ReadsPaused {
    fn drop(&mut self) {
        self.0.on_reads_paused(false);
    }
}

/// Why something a peer sent was refused: the connection (or its address)
/// holds its share of the node's budget for peers already, or the node
/// holds the whole budget.
const OVER_SHARE: &str = "the peer holds its share of SystemConfig::set_peer_memory_budget";

/// Large messages waiting for room in their mailboxes, in order, and the
/// large-message ack held back meanwhile: the sender's lane pauses after
/// its window, so a connection holds at most these and one window of the
/// next (the large lane is paced by acks, not by credit).
#[derive(Default)]
struct LargeHold {
    queue: VecDeque<HeldLarge>,
    /// The ack not sent because something is held.
    ack: Option<(u32, u32)>,
    active: bool,
}

/// What a recipient id stands for on this connection.
#[derive(Clone)]
struct Entry {
    path: Arc<str>,
    target: Option<Arc<dyn Target>>,
    /// `target`'s manifest (0 without one), so that checking each message
    /// is not a virtual call. Set only by `set_target`.
    manifest: u32,
    /// Its window and parked batches; `None` for an inline recipient.
    win: Option<Arc<Windowed>>,
}

impl Entry {
    fn new(path: Arc<str>, target: Option<Arc<dyn Target>>, win: Option<Arc<Windowed>>) -> Self {
        let mut e = Self {
            path,
            target: None,
            manifest: 0,
            win,
        };
        e.set_target(target);
        e
    }

    fn set_target(&mut self, target: Option<Arc<dyn Target>>) {
        self.manifest = target.as_ref().map_or(0, |t| t.manifest());
        self.target = target;
    }

    /// Whether `target` is set and takes `manifest`.
    #[inline]
    fn takes(&self, manifest: u32) -> bool {
        self.target.is_some() && self.manifest == manifest
    }
}

/// The payloads of one read for one recipient, copied into one buffer of
/// `[len u32 LE][payload]` records that the mailbox takes whole.
struct Run {
    /// The recipient's path, to look it up again if it stopped.
    path: Arc<str>,
    target: Arc<dyn Target>,
    /// The recipient id it came by (`INLINE_ID` inline), and its window.
    id: u32,
    win: Option<Arc<Windowed>>,
    buf: BytesMut,
    n: usize,
    /// Envelope bytes of this read's messages, credited when handed over.
    credit: u64,
    /// Took a message this read.
    used: bool,
}

/// The runs of one read, found by recipient in constant time: the last
/// one used (consecutive messages mostly go to one recipient), else a map
/// from the target's address. A peer can make a read touch many
/// recipients; the cost per message stays the same, and what is reserved
/// ahead of need is bounded by what arrived (`budget`).
#[derive(Default)]
struct Runs {
    list: Vec<Run>,
    index: HashMap<(u32, usize), usize>,
    last: usize,
    /// Bytes reservations may still take ahead of need this read: the
    /// read's size (and one run buffer) at its start. Past it, buffers
    /// grow as messages arrive (doubling), so many recipients in one read
    /// cost about what the read carried, not a buffer each.
    budget: usize,
}

/// A target's identity as a map key.
#[inline]
fn target_key(t: &Arc<dyn Target>) -> usize {
    Arc::as_ptr(t).cast::<()>() as usize
}

impl Runs {
    /// A read of `bytes` begins.
    fn new_read(&mut self, bytes: usize) {
        self.budget = bytes + RUN_BUFFER;
    }

    /// Appends one payload for `id`'s `target` (known by `path`), whose
    /// envelope was `credit` bytes; `left` is what this read still holds.
    /// `EXT`: the payload begins with an extension block. Always inlined:
    /// with two instances (`EXT` or not) it was left out of line, a call
    /// per message more (callgrind).
    #[inline(always)]
    fn push<const EXT: bool>(
        &mut self,
        id: u32,
        entry: &Entry,
        payload: &[u8],
        credit: usize,
        left: usize,
    ) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        Self::reserve(run, &mut self.budget, 4 + payload.len(), left);
        // Small messages are far below `RECORD_EXT` (at most a frame).
        let head = payload.len() as u32 | if EXT { RECORD_EXT } else { 0 };
        run.buf.put_u32_le(head);
        run.buf.put_slice(payload);
        run.n += 1;
        run.used = true;
    }

    /// Appends `n` records for `id`'s `target` at once: the records of a
    /// run envelope (`envelope::ENV_RUN`) of `credit` bytes, checked by
    /// [`run_records`], which are in the form the run keeps.
    #[inline]
    fn push_records(
        &mut self,
        id: u32,
        entry: &Entry,
        records: &[u8],
        n: usize,
        credit: usize,
        left: usize,
    ) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        Self::reserve(run, &mut self.budget, records.len(), left);
        run.buf.put_slice(records);
        run.n += n;
        run.used = true;
    }

    /// Makes room for `need` more bytes in `run`'s buffer, `left` being
    /// what the read still holds.
    #[inline(always)]
    fn reserve(run: &mut Run, budget: &mut usize, need: usize, left: usize) {
        let room = run.buf.capacity() - run.buf.len();
        // A run's first message of a read reserves for the rest of the read
        // while the buffer is still empty: what the last read's batch left
        // of its allocation would otherwise fill mid-read and then be
        // copied to a new one (callgrind: 7.4 M of the receiving thread's
        // 200 M instructions in that copy at 300,000 messages).
        if room < need || (run.buf.is_empty() && room < left.min(*budget)) {
            // Room for the rest of this read at once, while the read's
            // budget lasts: growing frame by frame copied every batch
            // again (perf: 12% of the receiving thread in memmove with
            // reads of 1 MiB). Past the budget, only what is needed.
            let ahead = need.max(RUN_BUFFER).max(left);
            let want = if ahead <= *budget {
                *budget -= ahead;
                ahead
            } else {
                need
            };
            run.buf.reserve(want);
        }
    }

    /// Appends a graceful stop for `id`'s target (a [`STOP_RECORD`], one
    /// record of the run), whose envelope was `credit` bytes: its mailbox
    /// gets it in order with the messages around it, parked behind them if
    /// it is full.
    #[cold]
    fn push_stop(&mut self, id: u32, entry: &Entry, credit: usize) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        run.buf.put_u32_le(STOP_RECORD);
        run.n += 1;
        run.used = true;
    }

    /// The run of `id`'s target (which the caller checked is set).
    #[inline(always)]
    fn run_of(&mut self, id: u32, entry: &Entry) -> usize {
        let target = entry.target.as_ref().expect("checked by the caller");
        let key = (id, target_key(target));
        let i = if self
            .list
            .get(self.last)
            .is_some_and(|r| r.id == id && target_key(&r.target) == key.1)
        {
            self.last
        } else {
            self.find_or_add(key, entry)
        };
        self.last = i;
        i
    }

    #[cold]
    fn find_or_add(&mut self, key: (u32, usize), entry: &Entry) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.list.push(Run {
            path: entry.path.clone(),
            target: entry.target.clone().expect("checked by the caller"),
            id: key.0,
            win: entry.win.clone(),
            buf: BytesMut::new(),
            n: 0,
            credit: 0,
            used: false,
        });
        let i = self.list.len() - 1;
        self.index.insert(key, i);
        i
    }

    /// After a read is delivered: the buffers of at most `MAX_RUNS`
    /// recipients of this read are kept for the next.
    fn end_read(&mut self) {
        let mut kept = 0;
        self.list.retain_mut(|r| {
            let keep = r.used && kept < MAX_RUNS;
            kept += usize::from(keep);
            r.used = false;
            keep
        });
        self.index.clear();
        for (i, r) in self.list.iter().enumerate() {
            self.index.insert((r.id, target_key(&r.target)), i);
        }
        self.last = 0;
    }
}

impl Dispatch {
    pub(super) fn new(
        registry: Arc<Registry>,
        config: &SystemConfig,
        peer: Arc<dyn Peer>,
        generation: u32,
        peer_uid: u64,
        proven: bool,
        account: Arc<ConnBudget>,
    ) -> Self {
        Self {
            proven,
            registry,
            peer,
            max_malformed: config.max_malformed_per_second,
            max_message: config.max_message_size,
            takes_runs: config.message_runs,
            access: Access::new(config),
            generation,
            peer_uid,
            sender: None,
            outbox: Arc::default(),
            ids: InboundIds::new(config.max_recipient_ids),
            inline: None,
            runs: Runs::default(),
            left_in_read: 0,
            malformed_count: 0,
            malformed_since: None,
            misbehaving: false,
            large: Reassembly::default(),
            ready: Vec::new(),
            large_ack: None,
            window: config.recipient_window as u64,
            budget: Arc::new(ParkBudget::new(config.max_parked_bytes, account)),
            large_hold: Arc::default(),
            ids_charged: 0,
            large_charged: 0,
            refused: AtomicBool::new(false),
            pressure: Pressure::default(),
        }
    }

    /// The connection's share of the node's budget for peers.
    fn account(&self) -> &ConnBudget {
        self.budget.account()
    }

    /// A charge was refused: the connection is over its share (see
    /// `budget::Pressure`), acted on at the end of the read.
    #[cold]
    fn over_share(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Defines recipient `id` as `path`, charging its cost (and giving
    /// back what a definition it replaces cost).
    #[cold]
    fn define_id(&mut self, id: u32, path: &str, manifest: u32) -> Result<(), ()> {
        let cost = id_cost(path.len());
        if !self.budget.account().take(Held::Ids, cost) {
            // The id stays as it was: the peer's later messages to it are
            // malformed (or go to the old path), and its reads pause.
            self.over_share();
            let to = self.registry.path(path);
            self.dead(
                &manifests::label(manifest),
                &to,
                &DeadLetterReason::OverShare(OVER_SHARE.into()),
            );
            return Err(());
        }
        let old = self.ids.get(id).map_or(0, |e| id_cost(e.path.len()));
        let target = self.registry().lookup(path);
        let win = Arc::new(Windowed::new(self.window));
        if let Err(why) = self
            .ids
            .define(id, Entry::new(path.into(), target, Some(win)))
        {
            self.budget.account().give_back(cost);
            self.malformed(MalformedKind::Recipient, why);
            return Err(());
        }
        self.budget.account().give_back(old);
        self.ids_charged = self.ids_charged + cost - old;
        Ok(())
    }

    /// Keeps the charge for the large message in reassembly equal to what
    /// its buffer holds; drops the message (dead letter) when the share
    /// refuses more.
    #[cold]
    fn charge_large(&mut self) {
        let held = self.large.held();
        if held <= self.large_charged {
            self.budget.account().give_back(self.large_charged - held);
            self.large_charged = held;
            return;
        }
        if self
            .budget
            .account()
            .take(Held::Large, held - self.large_charged)
        {
            self.large_charged = held;
            return;
        }
        self.over_share();
        if let Some(((path, _), received, total)) = self.large.drop_current() {
            let to = self.registry().path(&path);
            let why = DeadLetterReason::OverShare(
                format!("{OVER_SHARE} (after {received} of {total} bytes)").into(),
            );
            self.dead(&format!("large message of {total} bytes"), &to, &why);
        }
        self.budget.account().give_back(self.large_charged);
        self.large_charged = 0;
    }

    /// At the end of a read over its share: reading pauses until the
    /// connection is back within it, or it is disconnected (counted, and
    /// a sampled warning).
    #[cold]
    #[inline(never)]
    async fn hold_back(&mut self) {
        // The runtime's clock, so that paused-time tests step through it.
        let now = || tokio::time::Instant::now().into_std();
        if self.refused.swap(false, Ordering::Relaxed) {
            self.pressure.refused(now());
        }
        // Told to the peer's liveness while paused, and reads on (or the
        // cut, or the connection's end dropping this future) untold.
        let mut paused: Option<ReadsPaused> = None;
        loop {
            let within = self.account().within_share();
            match self.pressure.poll(now(), within) {
                Verdict::Go => return,
                Verdict::Wait { until } => {
                    // Heartbeat acks come on proven connections only.
                    if paused.is_none() && self.proven {
                        paused = Some(ReadsPaused::new(self.peer.clone()));
                    }
                    let account = self.budget.account().clone();
                    account.wait_release(until).await;
                }
                Verdict::Disconnect => return self.cut_over_share(),
            }
        }
    }

    #[cold]
    fn cut_over_share(&mut self) {
        let account = self.account();
        let n = account.node().count_disconnect();
        let reason = format!(
            "peer stayed over its share of the memory budget for peers (holds {} bytes)",
            account.used()
        );
        static CUT: transport::LogLimit = transport::LogLimit::new();
        if let Some(s) = CUT.sample() {
            tracing::warn!(node = %transport::PeerText(self.peer.node()), %reason, total = n, suppressed = s.suppressed, "disconnecting a peer over its memory share");
        }
        self.misbehaving = true;
        if let Some(sender) = &self.sender {
            sender.abort(&reason);
        }
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn dead(&self, what: &str, to: &dyn std::fmt::Display, why: &DeadLetterReason) {
        self.registry().dead_letter(what, to, why);
    }

    /// Counts a malformed envelope or system message (a dead letter), and
    /// aborts the connection once the peer sends more than the configured
    /// number within a second: a peer that keeps sending garbage is broken
    /// or hostile, and every malformed envelope costs a log line.
    #[cold]
    fn malformed(&mut self, kind: MalformedKind, why: impl Into<Cow<'static, str>>) {
        self.registry.meters().malformed(kind);
        let why = DeadLetterReason::malformed(kind, why);
        self.dead("(malformed envelope)", &self.peer.node().clone(), &why);
        let now = Instant::now();
        match self.malformed_since {
            Some(t) if now.duration_since(t) < MALFORMED_WINDOW => self.malformed_count += 1,
            _ => {
                self.malformed_since = Some(now);
                self.malformed_count = 1;
            }
        }
        let limit = self.max_malformed;
        if self.malformed_count > limit && !self.misbehaving {
            self.misbehaving = true;
            let reason = format!(
                "peer sent {} malformed envelopes within {MALFORMED_WINDOW:?} (limit {limit}); last: {why}",
                self.malformed_count
            );
            static CLOSED: Sampler = Sampler::new();
            if let Some(n) = CLOSED.hit() {
                tracing::warn!(node = %transport::PeerText(self.peer.node()), %reason, closed = n, "closing connection to misbehaving peer");
            }
            if let Some(sender) = &self.sender {
                sender.abort(&reason);
            }
        }
    }

    /// An envelope that does not parse: counted by its kind, logged (at
    /// debug: the dead letter's log line is the sampled warning) by its
    /// fault's label.
    #[cold]
    fn malformed_envelope(&mut self, why: EnvelopeError) {
        tracing::debug!(node = %transport::PeerText(self.peer.node()), fault = why.label(), "malformed envelope");
        self.malformed(why.kind(), why.as_str());
    }

    fn on_envelope(&mut self, body: &[u8]) {
        if self.misbehaving {
            // Aborted: the rest of this read is not worth parsing.
            return;
        }
        match envelope::parse_plain(body) {
            Ok(env) => self.on_parsed::<false>(env, body),
            Err(EnvelopeError::Unusual) => self.on_unusual(body),
            Err(why) => self.malformed_envelope(why),
        }
    }

    /// An envelope with a flag beyond the plain ones: an extension block
    /// (another serializer, a trace context), or an unknown flag.
    #[cold]
    #[inline(never)]
    fn on_unusual(&mut self, body: &[u8]) {
        match envelope::parse_unusual(body) {
            Ok(env) if env.ext => self.on_parsed::<true>(env, body),
            Ok(env) => self.on_parsed::<false>(env, body),
            Err(why) => self.malformed_envelope(why),
        }
    }

    /// A parsed envelope; `EXT`: its message begins with an extension
    /// block (a constant, so that plain envelopes pay nothing for it).
    #[inline(always)]
    fn on_parsed<const EXT: bool>(&mut self, env: envelope::Envelope<'_>, body: &[u8]) {
        let (mut id, manifest, b, reply) = (env.id, env.manifest, env.payload, env.reply);
        if let Some(path) = env.define {
            if path.len() > MAX_PATH_LEN {
                return self.malformed(
                    MalformedKind::Recipient,
                    "recipient path longer than MAX_PATH_LEN",
                );
            }
            if env.inline {
                id = INLINE_ID;
                let target = self.registry().lookup(path);
                self.inline = Some(Entry::new(path.into(), target, None));
            } else if id == INLINE_ID {
                return self.malformed(MalformedKind::Recipient, "recipient id reserved");
            } else if self.define_id(id, path, manifest).is_err() {
                return;
            }
        } else if id == INLINE_ID {
            return self.malformed(MalformedKind::Recipient, "recipient id reserved");
        }
        let run = match env.kind {
            Kind::Message => None,
            Kind::Run => match run_records(b) {
                Ok(_) if !self.takes_runs => {
                    return self.malformed(
                        MalformedKind::Envelope,
                        "a run envelope, which this node did not announce",
                    );
                }
                Ok(n) => Some(n),
                Err(why) => return self.malformed(MalformedKind::Envelope, why),
            },
            Kind::Fragment(f) => return self.on_fragment(id, manifest, EXT, f, b),
            Kind::Stop => return self.on_stop(id, manifest, body.len()),
        };
        // One lookup: the entry, its target refreshed in place if it cannot
        // take this type (see `refresh_target`).
        let entry = if id == INLINE_ID {
            self.inline.as_mut()
        } else {
            self.ids.get_mut(id)
        };
        let Some(entry) = entry else {
            // Ids are defined in-stream before use: this is a broken peer.
            return self.malformed(
                MalformedKind::Recipient,
                format!("unknown recipient id {id}"),
            );
        };
        // An ask's request to an actor that stopped is looked up again
        // now, so that the asker hears at once why it is a dead letter
        // (one lock, for asks only).
        let stale = reply.is_some() && entry.target.as_ref().is_some_and(|t| !t.is_open());
        if stale || !entry.takes(manifest) {
            entry.set_target(self.registry.lookup(&entry.path));
            if !entry.takes(manifest) {
                let why = match &entry.target {
                    // An ask's reply slot is unregistered when the ask
                    // ends: a reply after that is late, not misaddressed.
                    None if entry.path.starts_with("/temp/") => DeadLetterReason::AskDone,
                    None => DeadLetterReason::NoActor,
                    Some(t) => DeadLetterReason::WrongType {
                        takes: t.manifest_name(),
                    },
                };
                let to = self.registry.path(&entry.path);
                // One per message of a run; the log is sampled there.
                let label = manifests::label(manifest);
                for _ in 0..run.unwrap_or(1) {
                    self.registry.dead_letter(&label, &to, &why);
                }
                // Given up on: its credit goes back, and an asker hears why.
                let win = entry.win.clone();
                self.release(id, win.as_deref(), body.len() as u64);
                if let Some(reply) = reply {
                    self.answer(&SysWire::Undeliverable {
                        reply: reply.to_owned(),
                        reason: format!("{to}: {why}"),
                    });
                }
                return;
            }
        }
        match run {
            None => self
                .runs
                .push::<EXT>(id, entry, b, body.len(), self.left_in_read),
            Some(n) => self
                .runs
                .push_records(id, entry, b, n, body.len(), self.left_in_read),
        }
    }

    /// A graceful stop (`envelope::ENV_STOP`) for recipient `id`, of an
    /// actor taking `manifest`, whose envelope was `credit` bytes: queued
    /// in its run, behind the messages before it. Refused in untrusted
    /// mode as a remote `stop` is; a dead letter, like a message, when no
    /// actor taking `manifest` is there. Either way its credit goes back.
    #[cold]
    #[inline(never)]
    fn on_stop(&mut self, id: u32, manifest: u32, credit: usize) {
        self.refresh_target(id, manifest);
        let Some(entry) = self.entry(id) else {
            // Ids are defined in-stream before use: this is a broken peer.
            return self.malformed(
                MalformedKind::Recipient,
                format!("unknown recipient id {id}"),
            );
        };
        let why = match &entry.target {
            _ if !self.access.may_stop() => DeadLetterReason::Refused(UNTRUSTED.into()),
            None => DeadLetterReason::NoActor,
            Some(t) if t.manifest() != manifest => DeadLetterReason::WrongType {
                takes: t.manifest_name(),
            },
            Some(_) => {
                let entry = entry.clone();
                return self.runs.push_stop(id, &entry, credit);
            }
        };
        let to = self.registry.path(&entry.path);
        let win = entry.win.clone();
        self.dead("(remote graceful stop)", &to, &why);
        self.release(id, win.as_deref(), credit as u64);
    }

    /// `bytes` of recipient `id`'s messages left this node's custody:
    /// credited back to the sender once half a window is owed.
    fn release(&self, id: u32, win: Option<&Windowed>, bytes: u64) {
        if let Some(total) = win.and_then(|w| w.flow.release(bytes)) {
            self.answer(&SysWire::Credit { id, total });
        }
    }

    /// The entry recipient `id` stands for on this connection.
    fn entry(&self, id: u32) -> Option<&Entry> {
        if id == INLINE_ID {
            self.inline.as_ref()
        } else {
            self.ids.get(id)
        }
    }

    /// The actor at a path changes when one stops and another is spawned
    /// there (or when one is spawned after the path was defined): when the
    /// cached target of `id` cannot take `manifest`, look the path up again.
    #[inline(always)]
    fn refresh_target(&mut self, id: u32, manifest: u32) {
        let entry = if id == INLINE_ID {
            self.inline.as_mut()
        } else {
            self.ids.get_mut(id)
        };
        if let Some(entry) = entry
            && !entry.takes(manifest)
        {
            entry.set_target(self.registry.lookup(&entry.path));
        }
    }

    /// The target for a large message to recipient `id`, or why there is
    /// none (reported here, as for a small message).
    fn large_target(&mut self, id: u32, manifest: u32) -> Option<LargeTarget> {
        self.refresh_target(id, manifest);
        let Some(entry) = self.entry(id) else {
            self.malformed(
                MalformedKind::Recipient,
                format!("unknown recipient id {id}"),
            );
            return None;
        };
        let what = format!("large message, {}", manifests::label(manifest));
        match &entry.target {
            None => {
                let to = self.registry().path(&entry.path);
                self.dead(&what, &to, &DeadLetterReason::NoActor);
                None
            }
            Some(t) if t.manifest() != manifest => {
                let to = self.registry().path(&entry.path);
                let why = DeadLetterReason::WrongType {
                    takes: t.manifest_name(),
                };
                self.dead(&what, &to, &why);
                None
            }
            Some(t) => Some((entry.path.clone(), t.clone())),
        }
    }

    /// One fragment of a large message (see `large::Reassembly`).
    #[cold]
    #[inline(never)]
    fn on_fragment(&mut self, id: u32, manifest: u32, ext: bool, f: Fragment, piece: &[u8]) {
        // Acknowledged whatever becomes of it: the sender only paces on it.
        self.large_ack = Some((f.msg, f.offset.saturating_add(piece.len() as u32)));
        self.peer.on_fragment();
        if f.offset == 0
            && let Some(why) = self.large.abandon_for(f.msg)
        {
            self.malformed(MalformedKind::Fragment, why);
        }
        let max = self.max_message;
        let mut large = std::mem::take(&mut self.large);
        let tag = envelope::Tag { manifest, ext };
        let step = large.push(id, tag, f, piece, max, || self.large_target(id, manifest));
        self.large = large;
        if self.large.held() != self.large_charged {
            self.charge_large();
        }
        match step {
            Step::Pending => {}
            Step::Complete((path, target), batch) => self.ready.push((path, target, batch)),
            Step::Malformed(why) => self.malformed(MalformedKind::Fragment, why),
            Step::TooLarge { total, max } => {
                let to = self
                    .entry(id)
                    .map(|e| self.registry().path(&e.path).to_string())
                    .unwrap_or_else(|| self.peer.node().to_string());
                self.dead(
                    &format!("large message of {total} bytes"),
                    &to,
                    &DeadLetterReason::TooLarge {
                        size: total as u64,
                        max: max as u64,
                    },
                );
            }
        }
    }

    fn on_system(&mut self, body: &[u8]) {
        match SysWire::decode(body) {
            Ok(msg) => self.on_system_decoded(msg),
            Err(e) => {
                // Counted as malformed: the peer is closed past the limit,
                // and that is logged.
                tracing::debug!(node = %transport::PeerText(self.peer.node()), error = %e, "undecodable system message dropped");
                self.malformed(MalformedKind::SystemMessage, "undecodable system message");
            }
        }
    }

    fn on_system_decoded(&mut self, msg: SysWire) {
        let about_the_node = matches!(
            msg,
            SysWire::Shutdown
                | SysWire::Ack { .. }
                | SysWire::Identity { .. }
                | SysWire::LargeAck { .. }
        );
        if about_the_node && !self.proven {
            tracing::debug!(node = %transport::PeerText(self.peer.node()), generation = self.generation, "a connection whose claim is not proven sent a message only the node may send; dropped");
            return;
        }
        match msg {
            SysWire::Reliable { epoch, seq, body } => {
                // Held while delivering, so two links of one node cannot
                // deliver out of order.
                let peer = self.peer.clone();
                let mut sys_in = peer.sys_in();
                let ack = match sys_in.handle(self.peer_uid, epoch, seq, self.proven) {
                    Receive::Deliver => {
                        match SysWire::decode(&body) {
                            Ok(inner) if inner.is_reliable_kind() => self.on_system_msg(inner),
                            Ok(_) => {
                                tracing::debug!(node = %transport::PeerText(self.peer.node()), "unexpected message in the reliable stream dropped");
                                self.malformed(
                                    MalformedKind::SystemMessage,
                                    "unexpected message in the reliable stream",
                                );
                            }
                            Err(e) => {
                                tracing::debug!(node = %transport::PeerText(self.peer.node()), error = %e, "undecodable system message dropped");
                                self.malformed(
                                    MalformedKind::SystemMessage,
                                    "undecodable system message",
                                );
                            }
                        }
                        Some(seq)
                    }
                    Receive::Duplicate(acked) => Some(acked),
                    Receive::Ignore => None,
                };
                drop(sys_in);
                if let Some(seq) = ack {
                    // Lost acks are harmless: the message is resent and
                    // acknowledged again.
                    self.answer(&SysWire::Ack { epoch, seq });
                }
            }
            SysWire::Ack { epoch, seq } => self.peer.on_ack(epoch, seq),
            SysWire::Shutdown => self.peer.on_shutdown(self.peer_uid),
            SysWire::LargeAck { msg, received } => self.peer.on_large_ack(msg, received),
            SysWire::Credit { id, total } => self.peer.on_credit(self.generation, id, total),
            SysWire::Undeliverable { reply, reason } => self.on_undeliverable(&reply, &reason),
            SysWire::NoReply { reply, why } => self.on_no_reply(&reply, why),
            other => self.on_system_msg(other),
        }
    }

    /// The peer turned the request of one of this node's asks into a dead
    /// letter: the ask fails at once with the peer's reason (shown
    /// truncated and escaped). Only ask reply slots are failed this way;
    /// their paths are random, so only the node the request went to knows
    /// one.
    fn on_undeliverable(&mut self, reply: &str, reason: &str) {
        if !reply.starts_with("/temp/") {
            return self.malformed(
                MalformedKind::SystemMessage,
                "Undeliverable for a path that is no ask's",
            );
        }
        if let Some(t) = self.registry().lookup(reply) {
            t.fail(&transport::PeerText(reason).to_string());
        }
    }

    /// The peer will send no reply to one of this node's asks (the
    /// handler failed, or dropped the reply ref): the ask fails at once
    /// with why (a peer's text shown truncated and escaped).
    fn on_no_reply(&mut self, reply: &str, why: NoReply) {
        if !reply.starts_with("/temp/") {
            return self.malformed(
                MalformedKind::SystemMessage,
                "NoReply for a path that is no ask's",
            );
        }
        let why = match why {
            NoReply::HandlerFailed(t) => {
                NoReply::HandlerFailed(transport::PeerText(&t).to_string())
            }
            NoReply::Stopped(t) => NoReply::Stopped(transport::PeerText(&t).to_string()),
            other => other,
        };
        if let Some(t) = self.registry().lookup(reply) {
            t.no_reply(why);
        }
    }

    /// Sends a system message back on this connection, where the peer
    /// asked: an answer never takes another path, so only the connection
    /// that asked receives it. Through the connection's bounded outbox
    /// when its queue is full (see `link::Outbox`).
    fn answer(&self, msg: &SysWire) {
        if let Some(sender) = &self.sender {
            self.outbox.send(sender, msg.frame());
        }
    }

    fn on_system_msg(&mut self, msg: SysWire) {
        match msg {
            SysWire::Identify { id, path } => {
                // A path the peer may not look up is absent to it.
                let manifest = self
                    .access
                    .may_identify(&path)
                    .then(|| self.registry().lookup(&path))
                    .flatten()
                    .map(|t| (t.manifest(), t.manifest_name().to_owned()));
                self.answer(&SysWire::Identity { id, manifest });
            }
            SysWire::Identity { id, manifest } => self.peer.on_identity(id, manifest),
            SysWire::Watch { path, watch_id } => {
                let sink = WatchSink::Remote {
                    link: self.peer.clone().watcher(),
                    watch_id,
                    uid: self.peer_uid,
                };
                match self.registry().lookup(&path) {
                    Some(t) => {
                        if t.add_watcher(sink).is_err() {
                            let to = self.registry().path(&path);
                            self.dead(
                                "(remote watch)",
                                &to,
                                &DeadLetterReason::Refused(
                                    "this node holds too many watches on the actor".into(),
                                ),
                            );
                        }
                    }
                    None => sink.deliver(Terminated {
                        path: self.registry().path(&path),
                        reason: StopReason::NotFound,
                    }),
                }
            }
            SysWire::Unwatch { path, watch_id } => {
                let sink = WatchSink::Remote {
                    link: self.peer.clone().watcher(),
                    watch_id,
                    uid: self.peer_uid,
                };
                if let Some(t) = self.registry().lookup(&path) {
                    t.remove_watcher(&sink);
                }
            }
            SysWire::Terminated { watch_id, reason } => self.peer.on_terminated(watch_id, reason),
            SysWire::Stop { path } => {
                if !self.access.may_stop() {
                    let to = self.registry().path(&path);
                    return self.dead(
                        "(remote stop)",
                        &to,
                        &DeadLetterReason::Refused(UNTRUSTED.into()),
                    );
                }
                if let Some(t) = self.registry().lookup(&path) {
                    t.stop();
                }
            }
            SysWire::Reliable { .. }
            | SysWire::Ack { .. }
            | SysWire::Shutdown
            | SysWire::LargeAck { .. }
            | SysWire::Credit { .. }
            | SysWire::Undeliverable { .. }
            | SysWire::NoReply { .. } => {}
        }
    }

    /// Tells the sender how far large message `msg` has been read, so
    /// that it sends more. Never dropped: a lost ack would stall its lane.
    #[cold]
    fn ack_large(&self, msg: u32, received: u32) {
        self.answer(&SysWire::LargeAck { msg, received });
    }

    /// Hands each reassembled large message to its mailbox. One that finds
    /// it full is held, with every later one, and handed over in order by
    /// a task as room frees up; meanwhile large-message acks are held back,
    /// so the sender's lane pauses (see `LargeHold`).
    fn deliver_large(&mut self) {
        let ready = std::mem::take(&mut self.ready);
        let mut hold = lock(&self.large_hold);
        for (path, mut target, batch) in ready {
            let kind = if hold.active {
                Held::Parked
            } else {
                Held::Queued
            };
            let Some(mut charge) = self.charge(kind, queued_cost(batch.len())) else {
                self.dead(
                    target.manifest_name(),
                    &self.registry().path(&path),
                    &DeadLetterReason::OverShare(OVER_SHARE.into()),
                );
                continue;
            };
            if hold.active {
                self.hold_large(&mut hold, path, target, batch, charge);
                continue;
            }
            loop {
                match target.push_batch(&batch, 1, &mut charge) {
                    Ok(()) => break,
                    Err(Refused::Full) => {
                        if self.hold_large(&mut hold, path, target, batch, charge) {
                            hold.active = true;
                            tokio::spawn(
                                LargeUnpark {
                                    hold: self.large_hold.clone(),
                                    registry: self.registry.clone(),
                                    budget: self.budget.clone(),
                                    answer: self.answerer(),
                                }
                                .run(),
                            );
                        }
                        break;
                    }
                    Err(Refused::Closed) => match replacement(&self.registry, &path, &target) {
                        Some(t) => target = t,
                        None => {
                            self.dead(
                                target.manifest_name(),
                                &self.registry().path(&path),
                                &DeadLetterReason::ActorStopped,
                            );
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Holds a large message within the connection's park bound; a dead
    /// letter past it. True if held.
    fn hold_large(
        &self,
        hold: &mut LargeHold,
        path: Arc<str>,
        target: Arc<dyn Target>,
        batch: Bytes,
        charge: Charge,
    ) -> bool {
        if let Err(why) = self.park_take(batch.len()) {
            self.dead(target.manifest_name(), &self.registry().path(&path), &why);
            return false;
        }
        hold.queue.push_back((path, target, batch, charge));
        true
    }

    /// Charges `cost` for a batch about to wait for an actor (`kind`: in
    /// its mailbox, or parked for it) to the connection's share; `None`,
    /// and the connection's reads pause, if it is over its share.
    #[inline]
    fn charge(&self, kind: Held, cost: usize) -> Option<Charge> {
        let charge = self.budget.account().charge(kind, cost);
        if charge.is_none() {
            self.over_share();
        }
        charge
    }

    /// The sender and outbox this connection answers with, for a task.
    fn answerer(&self) -> Option<(Sender, Arc<Outbox>)> {
        self.sender.clone().map(|s| (s, self.outbox.clone()))
    }

    /// Hands every run of this read to its mailbox. The reader never waits
    /// here: a run whose mailbox is full is parked (see `flow`), and later
    /// runs for that recipient queue behind it until it is handed over.
    fn deliver_runs(&mut self) {
        for i in 0..self.runs.list.len() {
            let run = &mut self.runs.list[i];
            if run.n == 0 {
                continue;
            }
            // What the batch keeps alive while it waits: its buffer's whole
            // allocation. A small batch in a buffer reserved for more is
            // copied out, so that it does not hold the rest (measured: a
            // 6-byte message alone in a read held a 4 KiB page of a 64 KiB
            // reservation, for as long as its actor did not take it).
            let len = run.buf.len();
            let spare = run.buf.capacity() - len;
            let (batch, held) = if spare > len && len <= COPY_BATCH_BELOW {
                let batch = Bytes::copy_from_slice(&run.buf);
                run.buf.clear();
                (batch, len)
            } else {
                (run.buf.split().freeze(), len + spare)
            };
            let cost = queued_cost(held);
            let b = ParkedBatch {
                n: std::mem::take(&mut run.n),
                credit: std::mem::take(&mut run.credit),
                batch,
                charge: Charge::default(),
            };
            let (id, win, path, target) = (
                run.id,
                run.win.clone(),
                run.path.clone(),
                run.target.clone(),
            );
            if let Some(t) = self.deliver_run(id, win, &path, target, b, cost) {
                self.runs.list[i].target = t;
            }
        }
    }

    /// Hands one run to its mailbox, or parks it, charging `cost` for it
    /// while it waits. Returns the actor that took it if it was not
    /// `target` (a new one at the same path).
    fn deliver_run(
        &self,
        id: u32,
        win: Option<Arc<Windowed>>,
        path: &Arc<str>,
        mut target: Arc<dyn Target>,
        mut b: ParkedBatch,
        cost: usize,
    ) -> Option<Arc<dyn Target>> {
        let mut replaced = None;
        // Charged before it waits anywhere: its charge goes with it into
        // the park or the mailbox, and back when its actor is done.
        let parked = win.as_ref().is_some_and(|w| w.park.is_active());
        let kind = if parked { Held::Parked } else { Held::Queued };
        match self.charge(kind, cost) {
            Some(charge) => b.charge = charge,
            None => {
                let why = DeadLetterReason::OverShare(OVER_SHARE.into());
                self.lose(id, win.as_deref(), path, &target, &b, &why);
                return None;
            }
        }
        if let Some(w) = &win
            && parked
        {
            // Behind what is parked already.
            let len = b.batch.len();
            if let Err(why) = self.park_take(len) {
                self.lose(id, Some(w), path, &target, &b, &why);
                return None;
            }
            match w.park.append_if_active(b) {
                Ok(()) => return None,
                Err(back) => {
                    self.budget.give_back(len);
                    b = back;
                }
            }
        }
        loop {
            match target.push_batch(&b.batch, b.n, &mut b.charge) {
                Ok(()) => {
                    self.release(id, win.as_deref(), b.credit);
                    return replaced;
                }
                Err(Refused::Full) => {
                    self.park(id, win, path, target, b);
                    return replaced;
                }
                Err(Refused::Closed) => match replacement(&self.registry, path, &target) {
                    // A new actor may live at that path now: if it takes
                    // this type, the batch is its.
                    Some(t) => {
                        target = t.clone();
                        replaced = Some(t);
                    }
                    None => {
                        self.lose(
                            id,
                            win.as_deref(),
                            path,
                            &target,
                            &b,
                            &DeadLetterReason::ActorStopped,
                        );
                        return replaced;
                    }
                },
            }
        }
    }

    /// Takes `bytes` to park for a full mailbox within the connection's
    /// bound, or says why not (the reason of the dead letters). The node's
    /// budget was charged for the batch before (`charge`).
    fn park_take(&self, bytes: usize) -> Result<(), DeadLetterReason> {
        self.budget
            .take(bytes)
            .map_err(|ParkRefused| mailbox_full(PARK_FULL))
    }

    /// A batch given up on: dead letters, and its credit goes back.
    fn lose(
        &self,
        id: u32,
        win: Option<&Windowed>,
        path: &Arc<str>,
        target: &Arc<dyn Target>,
        b: &ParkedBatch,
        why: &DeadLetterReason,
    ) {
        self.registry.dead_letters_n(
            b.n as u64,
            target.manifest_name(),
            &self.registry.path(path),
            why,
        );
        self.release(id, win, b.credit);
    }

    /// Parks a batch whose mailbox is full, and starts the task that hands
    /// it over if none runs. An inline recipient has no window, so nothing
    /// would bound what waits for it: its batch is a dead letter.
    fn park(
        &self,
        id: u32,
        win: Option<Arc<Windowed>>,
        path: &Arc<str>,
        target: Arc<dyn Target>,
        b: ParkedBatch,
    ) {
        let Some(win) = win else {
            return self.lose(id, None, path, &target, &b, &mailbox_full(INLINE_FULL));
        };
        if let Err(why) = self.park_take(b.batch.len()) {
            return self.lose(id, Some(&win), path, &target, &b, &why);
        }
        if win.park.start(b) {
            tokio::spawn(
                Unpark {
                    id,
                    win,
                    target,
                    path: path.clone(),
                    registry: self.registry.clone(),
                    budget: self.budget.clone(),
                    answer: self.answerer(),
                }
                .run(),
            );
        }
    }
}

/// Why a batch for a full mailbox was dropped: the connection's bound.
const PARK_FULL: &str =
    "and this connection holds SystemConfig::set_max_parked_bytes for full mailboxes already";
/// Why a batch for a full mailbox was dropped: no window.
const INLINE_FULL: &str =
    "and the recipient came inline (past the link's recipient ids): no window to wait in";

/// Why a batch for a full mailbox was dropped, as a dead letter's reason.
fn mailbox_full(why: &'static str) -> DeadLetterReason {
    DeadLetterReason::MailboxFull(why.into())
}

/// Why a remote stop was refused.
const UNTRUSTED: &str = "untrusted mode";

/// The actor that lives at `path` now in place of `old`, if it takes the
/// same type.
fn replacement(registry: &Registry, path: &str, old: &Arc<dyn Target>) -> Option<Arc<dyn Target>> {
    registry
        .lookup(path)
        .filter(|t| !Arc::ptr_eq(t, old) && t.manifest() == old.manifest())
}

/// Sends `msg` on the connection `answer` names, through its outbox.
fn send_answer(answer: Option<&(Sender, Arc<Outbox>)>, msg: &SysWire) {
    if let Some((sender, outbox)) = answer {
        outbox.send(sender, msg.frame());
    }
}

/// The task that hands one recipient's parked batches to its mailbox as
/// it frees room, in order, crediting them back as they go.
struct Unpark {
    id: u32,
    win: Arc<Windowed>,
    target: Arc<dyn Target>,
    path: Arc<str>,
    registry: Arc<Registry>,
    budget: Arc<ParkBudget>,
    answer: Option<(Sender, Arc<Outbox>)>,
}

impl Unpark {
    async fn run(mut self) {
        loop {
            self.target.wait_space().await;
            let mut released = 0;
            let done = {
                let mut q = self.win.park.lock();
                while let Some(b) = q.batches.front_mut() {
                    match self.target.push_batch(&b.batch, b.n, &mut b.charge) {
                        Ok(()) => {}
                        Err(Refused::Full) => break,
                        Err(Refused::Closed) => {
                            if let Some(t) = replacement(&self.registry, &self.path, &self.target) {
                                self.target = t;
                                continue;
                            }
                            self.registry.dead_letters_n(
                                b.n as u64,
                                self.target.manifest_name(),
                                &self.registry.path(&self.path),
                                &DeadLetterReason::ActorStopped,
                            );
                        }
                    }
                    let b = q.batches.pop_front().expect("a front batch");
                    self.budget.give_back(b.batch.len());
                    released += b.credit;
                }
                self.win.park.finish_if_empty(&mut q)
            };
            if released > 0
                && let Some(total) = self.win.flow.release(released)
            {
                send_answer(
                    self.answer.as_ref(),
                    &SysWire::Credit { id: self.id, total },
                );
            }
            if done {
                return;
            }
        }
    }
}

/// The task that hands a connection's held large messages to their
/// mailboxes, in order, then sends the large-message ack held back.
struct LargeUnpark {
    hold: Arc<Mutex<LargeHold>>,
    registry: Arc<Registry>,
    budget: Arc<ParkBudget>,
    answer: Option<(Sender, Arc<Outbox>)>,
}

impl LargeUnpark {
    async fn run(self) {
        loop {
            let Some(target) = lock(&self.hold).queue.front().map(|h| h.1.clone()) else {
                return;
            };
            target.wait_space().await;
            let mut hold = lock(&self.hold);
            while let Some((path, target, batch, charge)) = hold.queue.front_mut() {
                match target.push_batch(batch, 1, charge) {
                    Ok(()) => {}
                    Err(Refused::Full) => break,
                    Err(Refused::Closed) => {
                        if let Some(t) = replacement(&self.registry, path, target) {
                            *target = t;
                            continue;
                        }
                        self.registry.dead_letter(
                            target.manifest_name(),
                            &self.registry.path(path),
                            &DeadLetterReason::ActorStopped,
                        );
                    }
                }
                let (_, _, batch, _) = hold.queue.pop_front().expect("a front message");
                self.budget.give_back(batch.len());
            }
            if hold.queue.is_empty() {
                hold.active = false;
                if let Some((msg, received)) = hold.ack.take() {
                    send_answer(self.answer.as_ref(), &SysWire::LargeAck { msg, received });
                }
                return;
            }
        }
    }
}

impl Handler for Dispatch {
    fn on_start(&mut self, sender: &Sender) {
        self.sender = Some(sender.clone());
    }

    /// Envelopes are copied into per-recipient batch buffers at once, so
    /// the reader needs no reference-counted `Bytes` per frame.
    const BORROW: bool = true;

    fn on_read(&mut self, buffered: usize) {
        self.left_in_read = buffered;
        self.runs.new_read(buffered);
    }

    fn on_frame_ref(&mut self, kind: FrameKind, body: &[u8]) {
        self.left_in_read = self
            .left_in_read
            .saturating_sub(transport::frame::HEADER_LEN + body.len());
        match kind {
            FrameKind::Message => self.on_envelope(body),
            FrameKind::System => self.on_system(body),
            _ => {}
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        self.on_frame_ref(frame.kind, &frame.body);
    }

    async fn on_batch_end(&mut self) {
        self.deliver_runs();
        if !self.ready.is_empty() {
            self.deliver_large();
        }
        if let Some(ack) = self.large_ack.take() {
            let mut hold = lock(&self.large_hold);
            if hold.active {
                // Sent when the held messages are handed over.
                hold.ack = Some(ack);
            } else {
                drop(hold);
                self.ack_large(ack.0, ack.1);
            }
        }
        self.runs.end_read();
        self.inline = None;
        if self.refused.load(Ordering::Relaxed) || self.pressure.is_over() {
            self.hold_back().await;
        }
    }

    fn on_heartbeat_ack(&mut self, body: &[u8]) {
        // Acks answer our heartbeats, which go out on proven links only.
        if !self.proven {
            return;
        }
        if let Ok(seq) = <[u8; 8]>::try_from(body) {
            self.peer.on_heartbeat_ack(u64::from_le_bytes(seq));
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        if let Some(((path, _), received, total)) = self.large.take_partial() {
            let why = DeadLetterReason::LinkLost(
                format!("connection closed after {received} of {total} bytes").into(),
            );
            self.dead(
                &format!("large message of {total} bytes"),
                &self.registry().path(&path),
                &why,
            );
        }
        self.peer.on_close(self.generation, reason);
    }
}

impl Drop for Dispatch {
    /// The id table and the reassembly go with the dispatcher; what is
    /// parked goes with the tasks that hand it over (each gives back its
    /// own, and the account gives back the rest when the last one ends).
    fn drop(&mut self) {
        self.budget
            .account()
            .give_back(self.ids_charged + self.large_charged);
    }
}

#[cfg(test)]
mod tests {
    use std::{
        any::Any,
        future::Future,
        pin::Pin,
        sync::{Mutex, PoisonError},
    };

    use super::*;
    use crate::{
        budget::NodeBudget,
        remote::envelope::{put_compact_header, put_header},
    };

    /// The association side, recording what the dispatcher reports.
    #[derive(Default)]
    struct FakePeer {
        sys_in: Mutex<SysIn>,
        events: Mutex<Vec<String>>,
    }

    impl FakePeer {
        fn record(&self, e: String) {
            self.events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(e);
        }

        fn events(&self) -> Vec<String> {
            self.events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    impl RemoteWatcher for FakePeer {
        fn send_terminated(self: Arc<Self>, watch_id: u64, _: u64, t: &Terminated) {
            self.record(format!("terminated {watch_id} {}", t.reason));
        }
    }

    impl Peer for FakePeer {
        fn on_reads_paused(&self, paused: bool) {
            self.record(format!("reads paused {paused}"));
        }

        fn node(&self) -> &Arc<str> {
            static NODE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
            NODE.get_or_init(|| "peer@127.0.0.1:1".into())
        }
        fn sys_in(&self) -> MutexGuard<'_, SysIn> {
            self.sys_in.lock().unwrap_or_else(PoisonError::into_inner)
        }
        fn on_ack(&self, epoch: u64, seq: u64) {
            self.record(format!("ack {epoch} {seq}"));
        }

        fn on_shutdown(&self, uid: u64) {
            self.record(format!("shutdown {uid}"));
        }
        fn on_large_ack(&self, msg: u32, received: u32) {
            self.record(format!("large ack {msg} {received}"));
        }
        fn on_heartbeat_ack(&self, seq: u64) {
            self.record(format!("heartbeat ack {seq}"));
        }
        fn on_identity(&self, id: u64, manifest: Option<(u32, String)>) {
            self.record(format!("identity {id} {manifest:?}"));
        }
        fn on_terminated(&self, watch_id: u64, reason: StopReason) {
            self.record(format!("their actor {watch_id} {reason}"));
        }
        fn watcher(self: Arc<Self>) -> Arc<dyn RemoteWatcher> {
            self
        }
        fn on_close(&self, generation: u32, reason: &CloseReason) {
            self.record(format!("closed {generation} {reason}"));
        }
        fn on_credit(&self, generation: u32, id: u32, total: u64) {
            self.record(format!("credit {generation} {id} {total}"));
        }
    }

    /// A local actor taking manifest 7, recording the batches it gets.
    #[derive(Default)]
    struct FakeTarget {
        batches: Mutex<Vec<(usize, Bytes)>>,
        /// The charges of the batches it holds, as a mailbox keeps them.
        charges: Mutex<Vec<Charge>>,
    }

    impl Target for FakeTarget {
        fn manifest(&self) -> u32 {
            7
        }
        fn manifest_name(&self) -> &'static str {
            "test.Seven"
        }
        fn push_batch(&self, batch: &Bytes, n: usize, charge: &mut Charge) -> Result<(), Refused> {
            self.batches
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((n, batch.clone()));
            self.charges
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(std::mem::take(charge));
            Ok(())
        }
        fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(std::future::ready(()))
        }
        fn add_watcher(&self, sink: WatchSink) -> Result<(), crate::watch::TooManyWatches> {
            sink.deliver(Terminated {
                path: seven_path(),
                reason: StopReason::Stopped,
            });
            Ok(())
        }
        fn stop(&self) {}
        fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    /// What only the node itself may tell this node (see `proven`).
    fn about_the_node() -> [SysWire; 4] {
        [
            SysWire::Shutdown,
            SysWire::Ack { epoch: 1, seq: 4 },
            SysWire::LargeAck {
                msg: 2,
                received: 10,
            },
            SysWire::Identity {
                id: 6,
                manifest: None,
            },
        ]
    }

    /// Message 1 of a reliable stream: a watch of `/user/seven`.
    fn reliable_watch(watch_id: u64) -> bytes::Bytes {
        let watch = SysWire::Watch {
            path: "/user/seven".into(),
            watch_id,
        };
        SysWire::Reliable {
            epoch: 1,
            seq: 1,
            body: watch.encode().to_vec(),
        }
        .encode()
    }

    fn seven_path() -> crate::path::ActorPath {
        crate::path::ActorPath::parse("tcp://me@127.0.0.1:2/user/seven").expect("valid")
    }

    /// A connection's account of a node budget as `config` sets it.
    fn account(config: &SystemConfig) -> Arc<ConnBudget> {
        crate::budget::NodeBudget::new(config.peer_memory_budget).connect([127, 0, 0, 1].into())
    }

    fn setup() -> (Dispatch, Arc<FakePeer>, Arc<FakeTarget>, Arc<Registry>) {
        setup_with(FakePeer::default(), true)
    }

    fn setup_with(
        peer: FakePeer,
        proven: bool,
    ) -> (Dispatch, Arc<FakePeer>, Arc<FakeTarget>, Arc<Registry>) {
        let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
        let target = Arc::new(FakeTarget::default());
        registry.register("/user/seven", target.clone());
        let peer = Arc::new(peer);
        let mut config = SystemConfig::default();
        config
            .set_max_malformed_per_second(1_000)
            .set_max_recipient_ids(1_000)
            .unwrap();
        let d = Dispatch::new(
            registry.clone(),
            &config,
            peer.clone(),
            3,
            42,
            proven,
            account(&config),
        );
        (d, peer, target, registry)
    }

    fn envelope(id: u32, define: Option<&str>, manifest: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        match define {
            Some(p) => put_header(
                &mut b,
                envelope::To::Define(id, p),
                envelope::Tag::plain(manifest),
                None,
            ),
            None => put_compact_header(&mut b, id, manifest),
        }
        b.extend_from_slice(payload);
        b.to_vec()
    }

    #[tokio::test]
    async fn one_batch_per_recipient_per_read() {
        let (mut d, _, target, registry) = setup();
        d.on_read(1 << 16);
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(1, Some("/user/seven"), 7, b"a"),
        );
        d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"bc"));
        d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b""));
        assert!(
            target.batches.lock().unwrap().is_empty(),
            "held until the read ends"
        );
        d.on_batch_end().await;
        let batches = target.batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 1);
        let (n, batch) = &batches[0];
        assert_eq!(*n, 3);
        assert_eq!(&batch[..], b"\x01\0\0\0a\x02\0\0\0bc\0\0\0\0");
        assert_eq!(registry.dead_letter_count(), 0);
    }

    #[tokio::test]
    async fn unknown_ids_wrong_types_and_garbage_are_dead_letters() {
        let (mut d, _, target, registry) = setup();
        // Used before it was defined: malformed.
        d.on_frame_ref(FrameKind::Message, &envelope(9, None, 7, b"x"));
        // Defined for an actor that takes another manifest.
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(2, Some("/user/seven"), 8, b"x"),
        );
        // No actor at that path.
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(3, Some("/user/none"), 7, b"x"),
        );
        // Not an envelope at all, and an id beyond the table's bound.
        d.on_frame_ref(FrameKind::Message, &[1, 2]);
        // Ids past the per-link limit (1,000 in these tests) are refused:
        // 997 more fit (3 are defined above).
        for id in 100..1_100 {
            d.on_frame_ref(
                FrameKind::Message,
                &envelope(id, Some("/user/none"), 7, b""),
            );
        }
        d.on_batch_end().await;
        assert!(target.batches.lock().unwrap().is_empty());
        // 1 unknown id, 1 wrong type, 1 no actor, 1 not an envelope, 997
        // more to no actor, 3 past the limit.
        assert_eq!(registry.dead_letter_count(), 1_004);
    }

    /// A dispatcher alone on a node budget of `budget` bytes.
    fn setup_budget(budget: usize) -> (Dispatch, Arc<NodeBudget>, Arc<Registry>) {
        let (d, node, registry, _) = setup_budget_peer(budget);
        (d, node, registry)
    }

    /// As [`setup_budget`], with the fake peer.
    fn setup_budget_peer(
        budget: usize,
    ) -> (Dispatch, Arc<NodeBudget>, Arc<Registry>, Arc<FakePeer>) {
        let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
        registry.register("/user/seven", Arc::new(FakeTarget::default()));
        let mut config = SystemConfig::default();
        config.set_max_malformed_per_second(1_000);
        let node = NodeBudget::new(budget);
        let account = node.connect([127, 0, 0, 1].into());
        let peer = Arc::new(FakePeer::default());
        let d = Dispatch::new(
            registry.clone(),
            &config,
            peer.clone(),
            3,
            42,
            true,
            account,
        );
        (d, node, registry, peer)
    }

    /// A path of `len` bytes.
    fn long_path(len: usize) -> String {
        format!("/user/{}", "p".repeat(len - 6))
    }

    #[tokio::test]
    async fn recipient_ids_are_charged_and_given_back_when_the_connection_goes() {
        let (mut d, node, _) = setup_budget(1 << 20);
        let path = long_path(1_000);
        d.on_read(1 << 16);
        for id in 1..=10 {
            d.on_frame_ref(FrameKind::Message, &envelope(id, Some(&path), 7, b""));
        }
        assert_eq!(node.snapshot().held, 10 * id_cost(1_000));
        // A redefinition costs the difference.
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(1, Some("/user/seven"), 7, b""),
        );
        assert_eq!(
            node.snapshot().held,
            9 * id_cost(1_000) + id_cost("/user/seven".len())
        );
        d.on_batch_end().await;
        drop(d);
        let s = node.snapshot();
        assert_eq!((s.held, s.connections, s.refused_ids), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_table_bomb_is_refused_past_the_budget_then_the_connection_is_cut() {
        let budget = 100 * id_cost(1_000);
        let (mut d, node, registry, peer) = setup_budget_peer(budget);
        let path = long_path(1_000);
        d.on_read(1 << 20);
        for id in 1..=150 {
            d.on_frame_ref(FrameKind::Message, &envelope(id, Some(&path), 7, b""));
        }
        let s = node.snapshot();
        assert_eq!((s.held, s.peak, s.refused_ids), (budget, budget, 50));
        // No actor lives there: 100 dead letters for that, 50 refused.
        assert_eq!(registry.dead_letter_count(), 150);
        // The read's end pauses reading; nothing is given back, so the
        // connection is cut after the grace.
        let start = tokio::time::Instant::now();
        d.on_batch_end().await;
        assert!(start.elapsed() >= crate::budget::PAUSE_GRACE);
        assert!(d.misbehaving);
        assert_eq!(node.snapshot().disconnected, 1);
        // The peer's liveness knew of the pause, while it lasted.
        assert_eq!(peer.events(), ["reads paused true", "reads paused false"]);
        drop(d);
        assert_eq!(node.snapshot().held, 0);
    }

    /// A dispatcher on a node budget of `budget` bytes whose `/user/seven`
    /// keeps what it is handed, charges included.
    fn setup_queued(budget: usize) -> (Dispatch, Arc<NodeBudget>, Arc<FakeTarget>, Arc<Registry>) {
        let (d, node, registry, _) = setup_budget_peer(budget);
        let target = Arc::new(FakeTarget::default());
        registry.register("/user/seven", target.clone());
        (d, node, target, registry)
    }

    #[tokio::test]
    async fn a_batch_waiting_in_a_mailbox_is_charged_until_its_actor_is_done_with_it() {
        let (mut d, node, target, _) = setup_queued(1 << 20);
        d.on_read(1 << 16);
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(1, Some("/user/seven"), 7, b"abc"),
        );
        d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"de"));
        d.on_batch_end().await;
        // Two records of `[len u32][payload]`.
        let ids = id_cost("/user/seven".len());
        assert_eq!(node.snapshot().held, ids + queued_cost(4 + 3 + 4 + 2));
        assert_eq!(
            target.charges.lock().unwrap().len(),
            1,
            "one charge a batch"
        );
        // The actor is done with it: its charge goes back, and the
        // connection holds its ids only.
        target.charges.lock().unwrap().clear();
        assert_eq!(node.snapshot().held, ids);
        // The connection goes while a batch still waits: the batch's
        // charge keeps its account (and the node's count) until it goes.
        d.on_read(1 << 16);
        d.on_frame_ref(FrameKind::Message, &envelope(1, None, 7, b"f"));
        d.on_batch_end().await;
        drop(d);
        assert_eq!(node.snapshot().held, queued_cost(5));
        target.charges.lock().unwrap().clear();
        let s = node.snapshot();
        assert_eq!((s.held, s.connections, s.refused_queued), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn batches_past_the_share_are_dead_letters_and_the_connection_pauses_then_is_cut() {
        // Room for the id and three batches of one 1 kB message (each
        // copied out of its read's buffer, so charged its own size).
        let budget = id_cost("/user/seven".len()) + 3 * queued_cost(1_004) + 100;
        let (mut d, node, target, registry) = setup_queued(budget);
        let payload = vec![9u8; 1_000];
        for i in 0..4 {
            d.on_read(1 << 16);
            let path = (i == 0).then_some("/user/seven");
            d.on_frame_ref(FrameKind::Message, &envelope(1, path, 7, &payload));
            if i < 3 {
                d.on_batch_end().await;
            }
        }
        // The fourth batch was refused (a dead letter) and the read's end
        // pauses reading: nothing is given back, so it is cut.
        let start = tokio::time::Instant::now();
        d.on_batch_end().await;
        assert!(start.elapsed() >= crate::budget::PAUSE_GRACE);
        assert!(d.misbehaving);
        let s = node.snapshot();
        assert_eq!((s.refused_queued, s.disconnected), (1, 1), "{s:?}");
        assert!(s.peak <= budget);
        assert_eq!(registry.dead_letter_count(), 1);
        assert_eq!(target.batches.lock().unwrap().len(), 3);
    }

    fn fragment(msg: u32, total: u32, offset: u32, piece: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        let to = if offset == 0 {
            envelope::To::Define(1, "/user/seven")
        } else {
            envelope::To::Id(1)
        };
        let f = Fragment { msg, total, offset };
        put_header(&mut b, to, envelope::Tag::plain(7), Some(f));
        b.extend_from_slice(piece);
        b.to_vec()
    }

    #[tokio::test]
    async fn reassembly_is_charged_and_a_message_past_the_share_is_dropped() {
        let budget = id_cost(11) + 300_000;
        let (mut d, node, registry) = setup_budget(budget);
        let piece = vec![1u8; 100_000];
        d.on_read(1 << 20);
        d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 0, &piece));
        let held = node.snapshot().held;
        assert!(held >= id_cost(11) + 100_000, "{held}");
        d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 100_000, &piece));
        // Doubling to 200 kB fits; to 400 kB does not.
        d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 200_000, &piece));
        let s = node.snapshot();
        assert_eq!(s.refused_large, 1);
        assert_eq!(s.held, id_cost(11), "the message's buffer went back");
        assert_eq!(registry.dead_letter_count(), 1);
        // Its further fragments are skipped, not malformed.
        d.on_frame_ref(FrameKind::Message, &fragment(1, 1_000_000, 300_000, &piece));
        assert_eq!(registry.dead_letter_count(), 1);
        // A message that fits is delivered, and gives its reassembly's
        // charge back; it is charged as one record while its actor holds it.
        d.on_frame_ref(FrameKind::Message, &fragment(2, 100, 0, &[2; 100]));
        // Back within its share at once (the dropped message's buffer went
        // back): a strike, no pause, no disconnection.
        d.on_batch_end().await;
        assert!(!d.misbehaving);
        assert_eq!(node.snapshot().disconnected, 0);
        assert_eq!(node.snapshot().held, id_cost(11) + queued_cost(4 + 100));
        drop(d);
        assert_eq!(
            node.snapshot().held,
            queued_cost(4 + 100),
            "the delivered message waits for its actor"
        );
    }

    #[tokio::test]
    async fn system_messages_reach_the_peer() {
        let (mut d, peer, _, _) = setup();
        for msg in about_the_node() {
            d.on_frame_ref(FrameKind::System, &msg.encode());
        }
        // A watch arrives in the reliable stream; the fake target has
        // terminated, so the watcher hears it at once.
        d.on_frame_ref(FrameKind::System, &reliable_watch(11));
        d.on_heartbeat_ack(&7u64.to_le_bytes());
        d.on_close(&CloseReason::Local("done".into()));
        let events = peer.events();
        assert_eq!(
            events,
            [
                "shutdown 42",
                "ack 1 4",
                "large ack 2 10",
                "identity 6 None",
                "terminated 11 stopped",
                "heartbeat ack 7",
                "closed 3 closed locally: done",
            ],
        );
    }

    #[tokio::test]
    async fn an_unproven_connection_delivers_but_changes_no_belief() {
        let (mut d, peer, target, _) = setup_with(FakePeer::default(), false);
        for msg in about_the_node() {
            d.on_frame_ref(FrameKind::System, &msg.encode());
        }
        d.on_heartbeat_ack(&7u64.to_le_bytes());
        assert!(peer.events().is_empty(), "{:?}", peer.events());
        // Its own reliable stream and user messages are delivered.
        d.on_frame_ref(FrameKind::System, &reliable_watch(11));
        d.on_frame_ref(
            FrameKind::Message,
            &envelope(1, Some("/user/seven"), 7, b"a"),
        );
        d.on_batch_end().await;
        assert_eq!(peer.events(), ["terminated 11 stopped"]);
        assert_eq!(target.batches.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_unproven_connection_cannot_take_over_another_incarnations_stream() {
        let (mut d, peer, _, _) = setup_with(FakePeer::default(), false);
        // Another incarnation (uid 41) is delivering its stream.
        assert_eq!(
            peer.sys_in().handle(41, 1, 1, true),
            crate::remote::reliable::Receive::Deliver
        );
        // This connection claims uid 42: it may not restart the stream.
        d.on_frame_ref(FrameKind::System, &reliable_watch(12));
        assert!(peer.events().is_empty(), "{:?}", peer.events());
        assert_eq!(
            peer.sys_in().handle(41, 1, 2, true),
            crate::remote::reliable::Receive::Deliver,
            "the stream goes on"
        );
    }

    /// Dispatches one read of `n` envelopes of `size` payload bytes, to
    /// `k` recipients round robin (ids 1..=k, defined beforehand); returns
    /// the time it took and the bytes the run buffers reserved.
    fn dispatch_read(d: &mut Dispatch, n: usize, k: u32, size: usize) -> (Duration, usize) {
        let payload = vec![7u8; size];
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| envelope(1 + (i as u32 % k), None, 7, &payload))
            .collect();
        let bytes: usize = frames.iter().map(|f| f.len() + 5).sum();
        let start = Instant::now();
        d.on_read(bytes);
        for f in &frames {
            d.on_frame_ref(FrameKind::Message, f);
        }
        let took = start.elapsed();
        let reserved = d.runs.list.iter().map(|r| r.buf.capacity()).sum();
        (took, reserved)
    }

    #[tokio::test]
    async fn dispatch_costs_the_same_per_message_for_one_or_sixty_thousand_recipients() {
        const K: u32 = 60_000;
        const N: usize = 60_000;
        let registry = Arc::new(Registry::new("me", "me@127.0.0.1:2".into(), true));
        let target = Arc::new(FakeTarget::default());
        let mut config = SystemConfig::default();
        config.set_max_recipient_ids(K as usize + 1).unwrap();
        let mut d = Dispatch::new(
            registry.clone(),
            &config,
            Arc::new(FakePeer::default()),
            3,
            42,
            true,
            account(&config),
        );
        // K distinct actors, their ids defined in an earlier read.
        let mut targets = Vec::new();
        for i in 1..=K {
            let t: Arc<dyn Target> = Arc::new(FakeTarget::default());
            let path = format!("/user/t{i}");
            registry.register(&path, t.clone());
            targets.push(t);
            d.on_frame_ref(FrameKind::Message, &envelope(i, Some(&path), 7, b""));
        }
        d.on_batch_end().await;
        registry.register("/user/one", target);
        // Best of three of each, alternated.
        let (mut one, mut many) = (Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            one = one.min(dispatch_read(&mut d, N, 1, 100).0);
            d.on_batch_end().await;
            let (took, reserved) = dispatch_read(&mut d, N, K, 100);
            many = many.min(took);
            // What the runs reserved is bounded by what arrived (N
            // envelopes of about 109 bytes), not a buffer per recipient.
            assert!(reserved < 3 * N * 120, "{reserved} bytes reserved");
            d.on_batch_end().await;
        }
        // A scan over runs made this about 300 times slower; a map keeps
        // it within a small factor (cache misses over 60,000 targets).
        assert!(
            many < one * 20,
            "{N} messages: {one:?} to one recipient, {many:?} to {K}"
        );
    }
}
