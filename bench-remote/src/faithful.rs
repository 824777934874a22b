//! The faithful mode: Akka's benchmark on the public `actors` API. One
//! sender actor, one echoing receiver actor; markers carry the window state
//! and the ref to echo to.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, RemoteMessage, SharedBytes, StopReason,
    SystemConfig,
};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use tokio::{runtime::Handle, sync::oneshot};

use crate::{
    pacer::{self, Lateness, Pacer, RateRun, Timer},
    pattern::{Marker, MarkerKind, Outcome, Pattern, Shape, Step, now_ns},
    report::Report,
};

/// A marker on the wire (serde form of [`Marker`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WireMarker {
    kind: u8,
    remaining: u64,
    window_start: u64,
    burst_start: u64,
    n: u64,
    received: u64,
}

impl From<Marker> for WireMarker {
    fn from(m: Marker) -> Self {
        Self {
            kind: m.kind as u8,
            remaining: m.remaining,
            window_start: m.window_start,
            burst_start: m.burst_start,
            n: m.n,
            received: m.received,
        }
    }
}

impl TryFrom<WireMarker> for Marker {
    type Error = anyhow::Error;
    fn try_from(w: WireMarker) -> Result<Self> {
        let kind = match w.kind {
            0 => MarkerKind::Warmup,
            1 => MarkerKind::Start,
            2 => MarkerKind::Continue,
            3 => MarkerKind::Done,
            k => bail!("unknown marker kind {k}"),
        };
        Ok(Marker {
            kind,
            remaining: w.remaining,
            window_start: w.window_start,
            burst_start: w.burst_start,
            n: w.n,
            received: w.received,
        })
    }
}

/// What the receiver takes. Encoded without serde's visitors
/// (`#[remote(direct)]`), in the same bytes.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "bench.ToReceiver", direct)]
pub enum ToReceiver {
    /// A payload, ignored (counted). Decoded without copying.
    Payload(SharedBytes),
    /// A marker to echo to the enclosed ref, which also becomes where
    /// `Timed` messages are echoed. Boxed, so that the payload variant
    /// (nearly every message) sets the enum's size: 40 bytes instead of 96
    /// to move through decoding, the mailbox and the handler. Serialized
    /// exactly as unboxed.
    Marker(#[remote(serde)] Box<(WireMarker, ActorRef<ToSender>)>),
    /// A payload stamped with its send (or scheduled) time, echoed back
    /// (`--echo-all`, `--rate`).
    Timed(u64, SharedBytes),
    /// A `--rate` payload: its scheduled time and the time the generator
    /// actually sent it, both echoed back.
    Paced(u64, u64, SharedBytes),
}

/// What the sender takes (encoded as [`ToReceiver`] is).
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[remote(manifest = "bench.ToSender", direct)]
pub enum ToSender {
    /// Start the run (sent locally).
    Go,
    /// An echoed marker.
    Echo(#[remote(serde)] WireMarker),
    /// An echoed `Timed` payload's stamp.
    TimedEcho(u64),
    /// An echoed `Paced` payload's scheduled and sent times.
    PacedEcho(u64, u64),
}

/// Counts payloads, echoes markers.
pub struct Receiver {
    /// Payloads received, readable from outside.
    pub received: Arc<AtomicU64>,
    count: u64,
    /// Where `Timed` payloads are echoed: the sender of the latest marker.
    session: Option<ActorRef<ToSender>>,
}

impl Receiver {
    /// A receiver publishing its count into `received`.
    pub fn new(received: Arc<AtomicU64>) -> Self {
        Self {
            received,
            count: 0,
            session: None,
        }
    }
}

impl Actor for Receiver {
    type Msg = ToReceiver;

    async fn handle(&mut self, msg: ToReceiver, _ctx: &mut Ctx<Self>) -> ActorResult {
        match msg {
            ToReceiver::Payload(_) => self.count += 1,
            ToReceiver::Marker(marker) => {
                let (mut m, reply) = *marker;
                self.received.store(self.count, Relaxed);
                m.received = self.count;
                echo(&reply, ToSender::Echo(m));
                self.session = Some(reply);
            }
            ToReceiver::Timed(t, _) => {
                self.count += 1;
                if let Some(reply) = &self.session {
                    echo(reply, ToSender::TimedEcho(t));
                }
            }
            ToReceiver::Paced(due, sent, _) => {
                self.count += 1;
                if let Some(reply) = &self.session {
                    echo(reply, ToSender::PacedEcho(due, sent));
                }
            }
        }
        Ok(())
    }
}

/// Echoes like Akka's `sender() ! msg`: a `tell`, so the handler never
/// waits (and its future stays small). Should the sender's mailbox ever be
/// full, or the link to its node, the echo waits for room on a task of its
/// own instead of being lost.
fn echo(reply: &ActorRef<ToSender>, msg: ToSender) {
    if let Err(actors::SendError::MailboxFull(msg) | actors::SendError::LinkFull(msg)) =
        reply.tell(msg)
    {
        let reply = reply.clone();
        tokio::spawn(async move {
            let _ = reply.send(msg).await;
        });
    }
}

/// Runs the pattern, driven by echoes.
struct SenderActor {
    receiver: ActorRef<ToReceiver>,
    pattern: Pattern,
    payload: SharedBytes,
    done: Option<oneshot::Sender<Result<Outcome>>>,
    /// Per-message round-trips when every payload is echoed.
    per_message: Option<Report>,
}

impl SenderActor {
    async fn perform(&mut self, step: Step, ctx: &mut Ctx<Self>) -> Result<bool> {
        match step {
            Step::Send(bursts) => {
                for (n, m) in bursts {
                    for _ in 0..n {
                        let msg = if self.per_message.is_some() {
                            ToReceiver::Timed(now_ns(), self.payload.clone())
                        } else {
                            ToReceiver::Payload(self.payload.clone())
                        };
                        self.receiver
                            .send(msg)
                            .await
                            .map_err(|e| anyhow!("payload not sent: {e}"))?;
                    }
                    self.receiver
                        .send(ToReceiver::Marker(Box::new((
                            m.into(),
                            ctx.myself().clone(),
                        ))))
                        .await
                        .map_err(|e| anyhow!("marker not sent: {e}"))?;
                }
                Ok(false)
            }
            Step::Wait => Ok(false),
            Step::Finished(mut o) => {
                o.per_message = self.per_message.take();
                if let Some(tx) = self.done.take() {
                    let _ = tx.send(Ok(*o));
                }
                Ok(true)
            }
        }
    }

    fn fail(&mut self, e: anyhow::Error, ctx: &mut Ctx<Self>) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(Err(e));
        }
        ctx.stop();
    }
}

impl Actor for SenderActor {
    type Msg = ToSender;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.receiver);
        Ok(())
    }

    async fn handle(&mut self, msg: ToSender, ctx: &mut Ctx<Self>) -> ActorResult {
        let step = match msg {
            ToSender::Go => Ok(self.pattern.begin()),
            ToSender::Echo(w) => Marker::try_from(w).and_then(|m| self.pattern.on_echo(m)),
            ToSender::TimedEcho(t) => {
                if let Some(r) = &mut self.per_message {
                    r.record_rtt(Duration::from_nanos(now_ns().saturating_sub(t)));
                }
                return Ok(());
            }
            ToSender::PacedEcho(..) => return Ok(()),
        };
        let res = match step {
            Ok(step) => self.perform(step, ctx).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(true) => ctx.stop(),
            Ok(false) => {}
            Err(e) => self.fail(e, ctx),
        }
        Ok(())
    }

    async fn terminated(&mut self, t: actors::Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        let e = match t.reason {
            StopReason::NodeUnreachable(r) => anyhow!("receiver node unreachable: {r}"),
            other => anyhow!("receiver {} terminated: {other}", t.path),
        };
        self.fail(e, ctx);
        Ok(())
    }
}

/// Runs one sender against `receiver`, failing if no echo arrives within
/// `stall` (a dead or stuck receiver).
pub async fn run_sender(
    system: &ActorSystem,
    receiver: ActorRef<ToReceiver>,
    shape: Shape,
    verbose: bool,
    stall: Duration,
    echo_all: bool,
) -> Result<Outcome> {
    let (tx, rx) = oneshot::channel();
    let sender = system.spawn(SenderActor {
        receiver,
        pattern: Pattern::new(shape, verbose),
        payload: SharedBytes::from(vec![7u8; shape.payload]),
        done: Some(tx),
        per_message: echo_all.then(|| Report::new(shape)),
    });
    let watch = sender.watch();
    sender
        .tell(ToSender::Go)
        .map_err(|e| anyhow!("cannot start the sender: {e}"))?;
    // Bounded: a run at 1 msg/s would still show progress; a stalled one
    // is reported instead of hanging.
    let budget = stall + Duration::from_secs(shape.messages / 10_000 + 1) * 2;
    tokio::select! {
        biased;
        r = rx => r.map_err(|_| anyhow!("sender stopped without a result"))?,
        t = watch => Err(anyhow!("sender actor stopped: {}", t.reason)),
        () = tokio::time::sleep(budget) => Err(anyhow!("no result within {budget:?}: receiver stalled")),
    }
}

/// A receiver system's receiver actor path.
pub fn receiver_path(node: &str) -> String {
    format!("tcp://{node}/user/receiver")
}

fn receiver_name(i: usize) -> String {
    if i == 0 {
        "receiver".to_owned()
    } else {
        format!("receiver-{i}")
    }
}

/// The embedded default: two systems in this process over loopback TCP.
pub struct Embedded {
    /// The sending system.
    pub sender_sys: ActorSystem,
    /// The receiving system.
    pub receiver_sys: ActorSystem,
    /// Refs to the receivers, resolved from the sender system.
    pub receivers: Vec<ActorRef<ToReceiver>>,
}

impl Embedded {
    /// Starts both systems and `pairs` receivers; the receiving system and
    /// its actors run on `recv`.
    pub async fn start(
        recv: &Handle,
        pairs: usize,
        tls: bool,
        runs: bool,
        transport: &transport::TransportConfig,
    ) -> Result<Self> {
        let any = "127.0.0.1:0".parse().expect("literal address");
        let mut sc = SystemConfig::default();
        let mut rc = SystemConfig::default();
        *sc.transport_mut() = transport.clone();
        *rc.transport_mut() = transport.clone();
        sc.set_message_runs(runs);
        rc.set_message_runs(runs);
        if tls {
            let (s, r) = crate::tls::generated()?;
            sc.set_tls(s);
            rc.set_tls(r);
        }
        let (send_cfg, recv_cfg) = (sc, rc);
        let receiver_sys = recv
            .spawn(async move {
                let sys = ActorSystem::with_config("bench-receiver", Some(any), recv_cfg).await?;
                for i in 0..pairs {
                    let name = receiver_name(i);
                    sys.spawn_named(&name, Receiver::new(Arc::new(AtomicU64::new(0))))?;
                }
                anyhow::Ok(sys)
            })
            .await??;
        let sender_sys = ActorSystem::with_config("bench-sender", Some(any), send_cfg).await?;
        let mut receivers = Vec::new();
        for i in 0..pairs {
            let name = receiver_name(i);
            let path = format!("tcp://{}/user/{name}", receiver_sys.node());
            let r = sender_sys
                .resolve::<ToReceiver>(&path)
                .await
                .with_context(|| format!("resolving {path}"))?;
            receivers.push(r);
        }
        Ok(Self {
            sender_sys,
            receiver_sys,
            receivers,
        })
    }

    /// Stops both systems.
    pub async fn shutdown(self, recv: &Handle) {
        self.sender_sys.shutdown().await;
        let r = self.receiver_sys;
        let _ = recv.spawn(async move { r.shutdown().await }).await;
    }
}

/// Records the latency of `Paced` echoes from their scheduled times, and
/// from the times they were actually sent.
struct Collector {
    hist: Report,
    from_sent: Report,
    expected: u64,
    seen: u64,
    done: Option<oneshot::Sender<(Report, Report)>>,
}

impl Actor for Collector {
    type Msg = ToSender;

    async fn handle(&mut self, msg: ToSender, ctx: &mut Ctx<Self>) -> ActorResult {
        if let ToSender::PacedEcho(due, sent) = msg {
            let now = now_ns();
            self.hist
                .record_rtt(Duration::from_nanos(now.saturating_sub(due)));
            self.from_sent
                .record_rtt(Duration::from_nanos(now.saturating_sub(sent)));
            self.seen += 1;
            if self.seen == self.expected {
                if let Some(tx) = self.done.take() {
                    let _ = tx.send((self.hist.clone(), self.from_sent.clone()));
                }
                ctx.stop();
            }
        }
        Ok(())
    }
}

/// Sends `shape.messages` payloads at `rate` msg/s on a fixed schedule
/// (wrk2 style) and records each echo's latency from the time it was
/// scheduled, so a stall shows up in the latency of everything that
/// should have been sent during it (no coordinated omission). The
/// generator stops sleeping `spin` before each due time (see
/// [`crate::pacer`]) and records how late it actually sent.
pub async fn run_rate(
    system: &ActorSystem,
    receiver: ActorRef<ToReceiver>,
    shape: Shape,
    rate: f64,
    spin: Duration,
    stall: Duration,
) -> Result<RateRun> {
    let (tx, rx) = oneshot::channel();
    let collector = system.spawn(Collector {
        hist: Report::new(shape),
        from_sent: Report::new(shape),
        expected: shape.messages,
        seen: 0,
        done: Some(tx),
    });
    // Register the collector as the receiver's echo target.
    receiver
        .send(ToReceiver::Marker(Box::new((
            Marker::bare(MarkerKind::Warmup).into(),
            collector.clone(),
        ))))
        .await
        .map_err(|e| anyhow!("cannot reach the receiver: {e}"))?;
    let payload = SharedBytes::from(vec![7u8; shape.payload]);
    // The first message is due a millisecond from now, time to set up.
    let mut pacer = Pacer::new(now_ns() + 1_000_000, rate, shape.messages, spin);
    let started = std::time::Instant::now();
    // The generator runs on the sending node's worker, like an actor of
    // that node: while it waits for a due time it yields, so the node's
    // writer and the collector keep running on the same thread.
    let generator = tokio::spawn(async move {
        let mut lateness = Lateness::new();
        let timer = Timer::new().context("the generator's timer")?;
        while let Some(due) = pacer::next(&mut pacer, &timer).await? {
            for i in due {
                let scheduled = pacer.due(i);
                let sent = now_ns();
                lateness.record(scheduled, sent);
                receiver
                    .send(ToReceiver::Paced(scheduled, sent, payload.clone()))
                    .await
                    .map_err(|e| anyhow!("payload not sent: {e}"))?;
            }
        }
        anyhow::Ok((lateness, started.elapsed()))
    });
    let (lateness, sent_for) = generator.await.context("the generator panicked")??;
    let budget = stall + Duration::from_secs_f64(shape.messages as f64 / rate) * 2;
    let (latency, from_sent) = tokio::time::timeout(budget, rx)
        .await
        .map_err(|_| anyhow!("not every echo arrived within {budget:?}: receiver stalled"))?
        .map_err(|_| anyhow!("collector stopped early"))?;
    Ok(RateRun {
        latency,
        from_sent,
        lateness,
        achieved: shape.messages as f64 / sent_for.as_secs_f64(),
        elapsed: started.elapsed(),
    })
}
