//! Connecting an association: connect attempts (when they start is
//! `liveness`'s decision, one at a time by `dial::Attempts`, each dialed
//! by `dial`), installing the connections that arrive (by `install`'s
//! rules: refuse, receive-only, or the link, displacing an incarnation or
//! breaking a tie), what a failed attempt leaves, and the link the
//! large-message lane sends on. The decisions are those units'; this
//! carries them out.

use std::{collections::VecDeque, sync::Arc, time::Instant};

use tokio_util::sync::CancellationToken;
use transport::{Connection, FrameKind, LogLimit, PeerText};

use super::{
    association::Association,
    compression::OutboundIds,
    dial::{self, ConnectFailed, Dialed},
    envelope,
    events::RemoteEvent,
    flow::LinkCredits,
    install::{self, Admit, Arrival, Cause, DUPLICATE, LinkEnd, Place, REFUSED, Slot},
    large::{LaneHost, LargeLane},
    link::{
        Link, LinkPush, LinkState, Pending, Recipient, Sampler, lock, write_envelope, write_stop,
    },
    system_msg::system_frame,
};
use crate::{dead_letter::DeadLetterReason, telemetry::PeerCounters};

/// `connect failed` lines: a peer's hellos and refs can make a node dial
/// addresses that refuse, so they are sampled.
static CONNECT_FAILED: LogLimit = LogLimit::new();

/// Pending messages moved from the connect buffer to a new link per lock.
const FLUSH_CHUNK: usize = 1024;

impl Association {
    /// Starts connecting if nothing is (and the backoff allows).
    pub(super) fn ensure_connecting(self: &Arc<Self>) {
        {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Idle) {
                *st = LinkState::Connecting {
                    pending: VecDeque::new(),
                };
            }
        }
        self.spawn_connect();
    }

    /// Starts one connect attempt now: someone needs the node (a send, a
    /// resolve, a watch). However long the backoff has grown, it waits
    /// only for the backoff's first delay since the previous attempt; an
    /// attempt already waiting for the backoff is hurried instead (see
    /// `liveness`, "Dialing"). At most one attempt per association is in
    /// flight, waiting included, and at most `max_concurrent_dials` per
    /// node dial at once.
    pub(super) fn spawn_connect(self: &Arc<Self>) {
        self.spawn_attempt(false);
    }

    /// Starts the next reconnect attempt when the backoff allows, if none
    /// is in flight: after a link ended or an attempt failed while work
    /// waits for the node.
    pub(super) fn spawn_reconnect(self: &Arc<Self>) {
        self.spawn_attempt(true);
    }

    fn spawn_attempt(self: &Arc<Self>, paced: bool) {
        // A system that shut down dials nothing: its attempts fail at once,
        // and each failure would start the next.
        if self.shut_down() || !self.attempts.claim(paced) {
            return;
        }
        let assoc = self.clone();
        tokio::spawn(async move {
            let res = assoc.attempt(paced).await;
            assoc.attempts.release();
            if let Err(failed) = res {
                if assoc.shut_down() {
                    // Shut down meanwhile: not worth a warning; what waited
                    // is still counted, and nothing retries.
                    tracing::debug!(node = %PeerText(&assoc.node), reason = %failed.reason, "connect given up: system shut down");
                } else if let Some(s) = CONNECT_FAILED.sample() {
                    // A peer's hellos can name nodes to dial: sampled.
                    tracing::warn!(node = %PeerText(&assoc.node), reason = %failed.reason, total = s.total, suppressed = s.suppressed, "connect failed");
                }
                assoc.link_failed(&failed.reason, failed.refused);
            }
        });
    }

    /// One connect attempt: waits until it may start (`paced`: for the
    /// backoff too, until someone hurries it), dials, and installs what
    /// answers. The dial's permit is held until then.
    async fn attempt(self: &Arc<Self>, paced: bool) -> Result<(), ConnectFailed> {
        let cancel = self.ctx.upgrade().ok_or("system shut down")?.cancel.clone();
        let wait = |paced| lock(&self.life).attempt_wait(Instant::now(), paced);
        self.attempts.when_due(paced, wait, &cancel).await?;
        lock(&self.life).attempt_started(Instant::now());
        PeerCounters::bump(&self.counters.attempts);
        let ctx = self.ctx.upgrade().ok_or("system shut down")?;
        let Dialed {
            conn,
            permit: _permit,
        } = dial::dial(&ctx, &self.node).await?;
        let generation = self.next_generation();
        let dispatch = self.dispatch(&ctx, conn.peer(), generation, true);
        let conn = conn.start(dispatch);
        self.install(conn, generation, true).await;
        Ok(())
    }

    /// `install`'s rules 1 to 3 for a connection of incarnation `uid`
    /// (`proven`: as `admit` said).
    fn admit_arrival(&self, uid: u64, proven: bool) -> Admit {
        // `state` before `incarnations` (the lock order).
        let link_up = self.link().is_some();
        self.incarnations()
            .on_connection(Arrival { uid, proven }, link_up)
    }

    /// An inbound connection from this node. A receive-only one is kept
    /// at once; a proven one is installed by a task, since installing may
    /// wait to flush what was buffered for the node. Either way it has
    /// started (its peer may have had answers on it) before it is kept: if
    /// a shutdown took the connections meanwhile, `keep` hands it back and
    /// it is told and closed as they were.
    pub(super) fn install_inbound(
        self: &Arc<Self>,
        conn: Connection,
        generation: u32,
        proven: bool,
    ) {
        let assoc = self.clone();
        if proven {
            tokio::spawn(async move { assoc.install(conn, generation, false).await });
            return;
        }
        match self.admit_arrival(conn.peer().uid, false) {
            Admit::ReceiveOnly { probe } => self.receive_only(conn, generation, probe),
            admit => {
                tokio::spawn(async move { assoc.carry_out(conn, generation, false, admit).await });
            }
        }
    }

    /// Installs `conn`, whose identity is proven for this node (`dialed`:
    /// by this node).
    async fn install(self: &Arc<Self>, conn: Connection, generation: u32, dialed: bool) {
        let admit = self.admit_arrival(conn.peer().uid, true);
        self.carry_out(conn, generation, dialed, admit).await;
    }

    /// Carries out what `install` said of `conn`.
    async fn carry_out(
        self: &Arc<Self>,
        conn: Connection,
        generation: u32,
        dialed: bool,
        admit: Admit,
    ) {
        match admit {
            Admit::Refuse => {
                static REFUSED_LOG: Sampler = Sampler::new();
                if let Some(n) = REFUSED_LOG.hit() {
                    tracing::warn!(node = %PeerText(&self.node), uid = conn.peer().uid, refused = n, "refusing a connection from a quarantined incarnation");
                }
                conn.close(REFUSED).await;
            }
            Admit::ReceiveOnly { probe } => self.receive_only(conn, generation, probe),
            Admit::Install { displaced } => {
                if let Some(old) = displaced {
                    let new = conn.peer().uid;
                    self.quarantined(old, Cause::Restarted { new });
                }
                self.install_proven(conn, generation, dialed).await;
            }
        }
    }

    /// An inbound connection whose peer proved the shared secret but not
    /// that it is this node: any secret holder can claim any node (address
    /// and uid are in every hello). It carries the peer's messages to this
    /// node, and nothing that changes what this node believes of the node
    /// it names (see `inbound`); this node sends to the node only on
    /// connections it dialed itself, so an impostor receives nothing.
    ///
    /// A claim of an incarnation this node has no proven link to is
    /// evidence worth checking (`probe`): this node dials the address, and
    /// what answers there is the node (a restarted one displaces its old
    /// incarnation then).
    fn receive_only(self: &Arc<Self>, conn: Connection, generation: u32, probe: bool) {
        let uid = conn.peer().uid;
        tracing::debug!(node = %PeerText(&self.node), uid, generation, "inbound connection carries inbound traffic only");
        if let Err(conn) = self.keep(generation, conn) {
            return self.farewell(conn);
        }
        if probe {
            self.ensure_connecting();
        }
    }

    /// Makes `conn`, proven and admitted, this node's sending link (unless
    /// the link that is up wins the tie, in which case `conn` is closed as
    /// a duplicate), flushing what was buffered while connecting, in order
    /// (`install`, rule 4).
    async fn install_proven(self: &Arc<Self>, conn: Connection, generation: u32, dialed: bool) {
        let uid = conn.peer().uid;
        // A reliable stream an unproven connection of another incarnation
        // started is not this node's: this one's may start now.
        self.requests.inbound().forget_other(uid);
        let was_unreachable = lock(&self.life).on_link_up(Instant::now());
        let link = Link {
            sender: LinkPush::new(conn.sender()),
            ids: Arc::new(OutboundIds::new(generation, self.max_recipient_ids)),
            credits: Arc::new(LinkCredits::new(generation, self.window)),
            uid,
            dialed,
            run_limit: if conn.peer().app_flags & envelope::APP_RUNS != 0 {
                self.run_limit
            } else {
                0
            },
        };
        if let Err(conn) = self.keep(generation, conn) {
            return self.farewell(conn);
        }
        self.emit(RemoteEvent::Connected {
            node: self.node.to_string(),
            uid,
        });
        if was_unreachable {
            tracing::info!(node = %PeerText(&self.node), uid, "node reachable again");
            self.emit(RemoteEvent::Reachable {
                node: self.node.to_string(),
                uid,
            });
        }
        let new = LinkEnd { uid, dialed };
        loop {
            let chunk: Vec<Pending> = {
                let mut st = lock(&self.state);
                let place = install::place(slot(&st), new, &self.local_node, &self.node);
                match (place, &mut *st) {
                    (Place::Flush, LinkState::Connecting { pending }) => {
                        let n = pending.len().min(FLUSH_CHUNK);
                        pending.drain(..n).collect()
                    }
                    (Place::Replace, LinkState::Up(cur)) => {
                        let loser = std::mem::replace(cur, link).ids.generation();
                        drop(st);
                        return self.tie_broken(loser);
                    }
                    (Place::Duplicate, _) => {
                        drop(st);
                        return self.tie_broken(generation);
                    }
                    // `Place::Up`: the slot was read under this lock (idle,
                    // or nothing buffered).
                    _ => {
                        *st = LinkState::Up(link);
                        drop(st);
                        return self.link_up();
                    }
                }
            };
            // New messages keep queueing behind these until the link is up,
            // so order is kept.
            for p in chunk {
                let ok = match p {
                    Pending::User(r, ..) | Pending::Stop(r, _) if !link.serves(r.uid) => {
                        self.dead_letter("(remote message)", &r.path, &DeadLetterReason::Restarted);
                        true
                    }
                    Pending::User(r, manifest, payload) => link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_envelope(b, &r, &link, manifest, &payload, false, None);
                        })
                        .await
                        .is_ok(),
                    Pending::Stop(r, manifest) => link
                        .sender
                        .send_with(FrameKind::Message, |b| {
                            write_stop(b, &r, &link, manifest);
                        })
                        .await
                        .is_ok(),
                    Pending::System(body) => link.sender.send(system_frame(body)).await.is_ok(),
                };
                if !ok {
                    // The new link died while flushing; its close handler
                    // reports the rest.
                    self.dead_letter(
                        "(pending)",
                        &self.node,
                        &DeadLetterReason::LinkLost("link closed while flushing".into()),
                    );
                }
            }
        }
    }

    /// A link came up: waiters wake, unacknowledged system messages go out
    /// on it.
    fn link_up(&self) {
        self.up.notify_waiters();
        self.resend_unacked();
    }

    /// Of two links, the one of `loser` lost the tie: it is closed after
    /// what it has queued is written (what a close that times out drops is
    /// counted as dead letters), and what the winner has not had
    /// acknowledged goes out on it.
    fn tie_broken(&self, loser: u32) {
        let conn = lock(&self.conns).remove(&loser);
        if let Some(c) = conn {
            tracing::debug!(node = %PeerText(&self.node), generation = loser, "closing the duplicate connection");
            self.close_counted(c, DUPLICATE.to_owned());
        }
        self.resend_unacked();
    }

    /// Connecting failed (`refused`: with `ECONNREFUSED`): buffered
    /// messages become dead letters, waiting resolves and asks fail (their
    /// requests may have been among them, and the node cannot be reached
    /// now). Watchers wait for the failure detector, or for the evidence
    /// of a lost link and refused reconnects (see `liveness`).
    fn link_failed(self: &Arc<Self>, reason: &str, refused: bool) {
        // One guard: a second `lock` while the scrutinee's guard lives (as it
        // did here once) deadlocks this thread and every later user of the
        // state.
        let pending = {
            let mut st = lock(&self.state);
            if matches!(*st, LinkState::Up(_)) {
                // Raced with an inbound link coming up: keep it.
                return;
            }
            match std::mem::replace(&mut *st, LinkState::Idle) {
                LinkState::Connecting { pending } => pending,
                _ => VecDeque::new(),
            }
        };
        let users = pending.iter().filter(|p| p.is_user()).count() as u64;
        if let Some(r) = self.registry() {
            let why = if self.shut_down() {
                DeadLetterReason::ShutDown
            } else if refused {
                DeadLetterReason::Refused(reason.to_owned().into())
            } else {
                DeadLetterReason::Unreachable(reason.to_owned().into())
            };
            r.dead_letters_n(users, "(remote message)", &self.node, &why);
        }
        let verdict =
            lock(&self.life).on_connect_failed(Instant::now(), refused, transport::random_uid());
        self.up.notify_waiters();
        self.fail_identifies(reason);
        match verdict {
            Some(since) => self.declare_unreachable(&format!(
                "link lost without a close frame, and reconnects refused for {} ms ({reason})",
                since.as_millis()
            )),
            None => {
                // Watchers wait: the node may be back soon.
                self.downs.all(&format!("connect failed: {reason}"));
            }
        }
        if self.needs_link() {
            self.spawn_reconnect();
        }
    }
}

/// Where the link stands, for `install::place`.
fn slot(st: &LinkState) -> Slot {
    match st {
        LinkState::Idle => Slot::Idle,
        LinkState::Connecting { pending } => Slot::Connecting {
            pending: !pending.is_empty(),
        },
        LinkState::Up(cur) => Slot::Up(LinkEnd {
            uid: cur.uid,
            dialed: cur.dialed,
        }),
    }
}

impl LaneHost for Association {
    fn lane(&self) -> &LargeLane {
        &self.large
    }

    /// The link to send a large message on, connecting if needed.
    async fn link_for(
        host: &Arc<Self>,
        r: &Recipient,
        cancel: &CancellationToken,
    ) -> Result<Link, DeadLetterReason> {
        let mut asked = false;
        loop {
            let notified = host.up.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if host.is_quarantined(r.uid) {
                return Err(DeadLetterReason::Quarantined);
            }
            match &*host.state() {
                LinkState::Up(link) if !link.serves(r.uid) => {
                    return Err(DeadLetterReason::Restarted);
                }
                LinkState::Up(link) => return Ok(link.clone()),
                LinkState::Idle if asked => {
                    return Err(DeadLetterReason::Unreachable(
                        "connecting to its node failed".into(),
                    ));
                }
                LinkState::Idle | LinkState::Connecting { .. } => {}
            }
            if !asked {
                asked = true;
                host.ensure_connecting();
                continue;
            }
            tokio::select! {
                () = notified => {}
                () = cancel.cancelled() => return Err(DeadLetterReason::ShutDown),
            }
        }
    }

    fn lane_dead_letter(&self, what: &str, to: &dyn std::fmt::Display, why: &DeadLetterReason) {
        self.dead_letter(what, to, why);
    }

    fn lane_cancel(&self) -> CancellationToken {
        self.ctx
            .upgrade()
            .map(|c| c.cancel.clone())
            .unwrap_or_default()
    }
}
