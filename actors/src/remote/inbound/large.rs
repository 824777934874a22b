//! The inbound side of the large-message lane: fragments reassembled
//! (`remote::large::Reassembly`), what that holds charged to the
//! connection's share, the message handed to its mailbox at the end of the
//! read, and the ack that paces the sender.
//!
//! The large lane is paced by acks, not by credit: the sender's lane
//! pauses after its window until the ack of what this node read. A message
//! that finds its mailbox full is held, with every later one, and handed
//! over in order by a task as room frees up; the ack waits meanwhile, so
//! a connection holds at most what is held and one window of the next.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use bytes::Bytes;

use super::{
    conn::{Answerer, Conn, send_answer},
    ids::Ids,
    park::{Parking, replacement},
    share::{OVER_SHARE, Share},
};
use crate::{
    budget::{Charge, Held, queued_cost},
    dead_letter::{DeadLetterReason, MalformedKind},
    mailbox::Refused,
    registry::{Registry, Target},
    remote::{
        envelope::{self, Fragment},
        flow::ParkBudget,
        large::{Reassembly, Step},
        link::lock,
        system_msg::SysWire,
    },
    serialization::manifests,
};

/// A large message's recipient path and target.
type LargeTarget = (Arc<str>, Arc<dyn Target>);

/// A large message held for a full mailbox: its recipient's path and
/// target, the one-record batch, and its charge.
type HeldLarge = (Arc<str>, Arc<dyn Target>, Bytes, Charge);

/// Large messages of one connection on their way in.
pub(super) struct LargeIn {
    /// `SystemConfig::set_max_message_size`.
    max_message: usize,
    /// The large message being reassembled on this connection.
    reassembly: Reassembly<LargeTarget>,
    /// Bytes charged for the large message being reassembled.
    charged: usize,
    /// Reassembled large messages, handed over at the end of the read:
    /// recipient path, target, a one-record batch.
    ready: Vec<(Arc<str>, Arc<dyn Target>, Bytes)>,
    /// The last fragment of this read (message id, end offset), to be
    /// acknowledged at the end of the read.
    ack: Option<(u32, u32)>,
    /// Large messages that found their mailbox full (see `LargeHold`).
    hold: Arc<Mutex<LargeHold>>,
}

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

impl LargeIn {
    pub(super) fn new(max_message: usize) -> Self {
        Self {
            max_message,
            reassembly: Reassembly::default(),
            charged: 0,
            ready: Vec::new(),
            ack: None,
            hold: Arc::default(),
        }
    }

    /// Bytes charged for the message in reassembly now.
    pub(super) fn charged(&self) -> usize {
        self.charged
    }

    /// One fragment of a large message to recipient `id` (see
    /// `large::Reassembly`).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_fragment(
        &mut self,
        conn: &mut Conn,
        ids: &mut Ids,
        share: &Share,
        id: u32,
        tag: envelope::Tag,
        f: Fragment,
        piece: &[u8],
    ) {
        // Acknowledged whatever becomes of it: the sender only paces on it.
        self.ack = Some((f.msg, f.offset.saturating_add(piece.len() as u32)));
        conn.peer.on_fragment();
        if f.offset == 0
            && let Some(why) = self.reassembly.abandon_for(f.msg)
        {
            conn.malformed(MalformedKind::Fragment, why);
        }
        let max = self.max_message;
        let step = self.reassembly.push(id, tag, f, piece, max, || {
            target(conn, ids, id, tag.manifest)
        });
        if self.reassembly.held() != self.charged {
            self.charge(conn, share);
        }
        match step {
            Step::Pending => {}
            Step::Complete((path, target), batch) => self.ready.push((path, target, batch)),
            Step::Malformed(why) => conn.malformed(MalformedKind::Fragment, why),
            Step::TooLarge { total, max } => {
                let to = ids
                    .get(id)
                    .map(|e| conn.registry().path(&e.path).to_string())
                    .unwrap_or_else(|| conn.peer.node().to_string());
                conn.dead(
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

    /// Keeps the charge for the large message in reassembly equal to what
    /// its buffer holds; drops the message (dead letter) when the share
    /// refuses more.
    #[cold]
    fn charge(&mut self, conn: &Conn, share: &Share) {
        let held = self.reassembly.held();
        if held <= self.charged {
            share.account().give_back(self.charged - held);
            self.charged = held;
            return;
        }
        if share.account().take(Held::Large, held - self.charged) {
            self.charged = held;
            return;
        }
        share.over();
        if let Some(((path, _), received, total)) = self.reassembly.drop_current() {
            let to = conn.registry().path(&path);
            let why = DeadLetterReason::OverShare(
                format!("{OVER_SHARE} (after {received} of {total} bytes)").into(),
            );
            conn.dead(&format!("large message of {total} bytes"), &to, &why);
        }
        share.account().give_back(self.charged);
        self.charged = 0;
    }

    /// The end of a read: hands each reassembled message to its mailbox
    /// (or holds it), then acknowledges what was read, unless something is
    /// held (then the ack goes when it is handed over).
    pub(super) fn end_read(&mut self, conn: &Conn, share: &Share, parking: &Parking) {
        if !self.ready.is_empty() {
            self.deliver(conn, share, parking);
        }
        if let Some(ack) = self.ack.take() {
            let mut hold = lock(&self.hold);
            if hold.active {
                // Sent when the held messages are handed over.
                hold.ack = Some(ack);
            } else {
                drop(hold);
                ack_large(conn, ack.0, ack.1);
            }
        }
    }

    /// Hands each reassembled large message to its mailbox. One that finds
    /// it full is held, with every later one, and handed over in order by
    /// a task as room frees up; meanwhile large-message acks are held back,
    /// so the sender's lane pauses (see `LargeHold`).
    fn deliver(&mut self, conn: &Conn, share: &Share, parking: &Parking) {
        let ready = std::mem::take(&mut self.ready);
        let mut hold = lock(&self.hold);
        for (path, mut target, batch) in ready {
            let kind = if hold.active {
                Held::Parked
            } else {
                Held::Queued
            };
            let Some(mut charge) = share.charge(kind, queued_cost(batch.len())) else {
                conn.dead(
                    target.manifest_name(),
                    &conn.registry().path(&path),
                    &DeadLetterReason::OverShare(OVER_SHARE.into()),
                );
                continue;
            };
            if hold.active {
                hold_large(conn, parking, &mut hold, path, target, batch, charge);
                continue;
            }
            loop {
                match target.push_batch(&batch, 1, &mut charge) {
                    Ok(()) => break,
                    Err(Refused::Full) => {
                        if hold_large(conn, parking, &mut hold, path, target, batch, charge) {
                            hold.active = true;
                            tokio::spawn(
                                LargeUnpark {
                                    hold: self.hold.clone(),
                                    registry: conn.registry.clone(),
                                    budget: parking.budget().clone(),
                                    answer: conn.answerer(),
                                }
                                .run(),
                            );
                        }
                        break;
                    }
                    Err(Refused::Closed) => match replacement(&conn.registry, &path, &target) {
                        Some(t) => target = t,
                        None => {
                            conn.dead(
                                target.manifest_name(),
                                &conn.registry().path(&path),
                                &DeadLetterReason::ActorStopped,
                            );
                            break;
                        }
                    },
                }
            }
        }
    }

    /// The connection closed: a message cut short is a dead letter.
    pub(super) fn on_close(&mut self, conn: &Conn) {
        if let Some(((path, _), received, total)) = self.reassembly.take_partial() {
            let why = DeadLetterReason::LinkLost(
                format!("connection closed after {received} of {total} bytes").into(),
            );
            conn.dead(
                &format!("large message of {total} bytes"),
                &conn.registry().path(&path),
                &why,
            );
        }
    }
}

/// The target for a large message to recipient `id`, or why there is
/// none (reported here, as for a small message).
fn target(conn: &mut Conn, ids: &mut Ids, id: u32, manifest: u32) -> Option<LargeTarget> {
    ids.refresh(id, manifest, &conn.registry);
    let Some(entry) = ids.get(id) else {
        conn.malformed(
            MalformedKind::Recipient,
            format!("unknown recipient id {id}"),
        );
        return None;
    };
    let what = format!("large message, {}", manifests::label(manifest));
    match &entry.target {
        None => {
            let to = conn.registry().path(&entry.path);
            conn.dead(&what, &to, &DeadLetterReason::NoActor);
            None
        }
        Some(t) if t.manifest() != manifest => {
            let to = conn.registry().path(&entry.path);
            let why = DeadLetterReason::WrongType {
                takes: t.manifest_name(),
            };
            conn.dead(&what, &to, &why);
            None
        }
        Some(t) => Some((entry.path.clone(), t.clone())),
    }
}

/// Tells the sender how far large message `msg` has been read, so
/// that it sends more. Never dropped: a lost ack would stall its lane.
#[cold]
fn ack_large(conn: &Conn, msg: u32, received: u32) {
    conn.answer(&SysWire::LargeAck { msg, received });
}

/// Holds a large message within the connection's park bound; a dead
/// letter past it. True if held.
fn hold_large(
    conn: &Conn,
    parking: &Parking,
    hold: &mut LargeHold,
    path: Arc<str>,
    target: Arc<dyn Target>,
    batch: Bytes,
    charge: Charge,
) -> bool {
    if let Err(why) = parking.take(batch.len()) {
        conn.dead(target.manifest_name(), &conn.registry().path(&path), &why);
        return false;
    }
    hold.queue.push_back((path, target, batch, charge));
    true
}

/// The task that hands a connection's held large messages to their
/// mailboxes, in order, then sends the large-message ack held back.
struct LargeUnpark {
    hold: Arc<Mutex<LargeHold>>,
    registry: Arc<Registry>,
    budget: Arc<ParkBudget>,
    answer: Answerer,
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
