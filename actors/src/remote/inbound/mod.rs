//! Inbound dispatch: what a connection's reader delivers into. It parses
//! envelopes, resolves recipient ids, groups the payloads of one socket
//! read by recipient, and hands each mailbox its group in one push; the
//! actor's own task decodes them. System messages are answered here.
//!
//! [`Dispatch`] routes; each job lives in a unit with the state it owns:
//!
//! ```text
//!  frame ──► Dispatch ─┬─ Message ─► envelope::parse ─► ids (who is it for)
//!                      │                 ├─ message, run ─► runs (grouped per read)
//!                      │                 ├─ stop ─────────► runs (a stop record)
//!                      │                 └─ fragment ─────► large (reassembly)
//!                      └─ System ──► system (reliable stream, requests, notices)
//!  read ends ──► runs ─► park (mailbox, or parked when full) ─► credit back
//!                large ─► mailbox, or held when full ─► large-message ack
//!                share: over it? reading pauses, then the connection is cut
//! ```
//!
//! - `bad_input`: the rule that closes a connection over malformed input
//!   (pure, time passed in).
//! - `conn`: what every job shares: the registry, the peer, what the
//!   connection is trusted with, answers, the malformed-input count.
//! - `share`: the connection's share of the node's memory budget for
//!   peers, and pausing or cutting reads past it.
//! - `ids`: what each recipient id stands for, charged to the share.
//! - `runs`: a read's payloads grouped by recipient (the hot path).
//! - `park`: a batch handed to its mailbox, or parked while it is full.
//! - `large`: the inbound side of the large-message lane.
//! - `system`: system messages.

mod bad_input;
mod conn;
mod ids;
mod large;
mod park;
mod runs;
mod share;
mod system;

use std::sync::{Arc, MutexGuard};

use transport::{CloseReason, Frame, FrameKind, Handler, Sender};

pub(super) use self::runs::run_records;
use self::{
    conn::Conn,
    ids::{INLINE_ID, Ids},
    large::LargeIn,
    park::Parking,
    runs::Runs,
    share::Share,
    system::{System, UNTRUSTED},
};
use super::{
    access::Access,
    envelope::{self, EnvelopeError, Kind},
    reliable::SysIn,
    system_msg::SysWire,
};
use crate::{
    budget::{ConnBudget, queued_cost},
    config::SystemConfig,
    dead_letter::{DeadLetterReason, MalformedKind},
    lifecycle::StopReason,
    path::MAX_PATH_LEN,
    registry::Registry,
    serialization::manifests,
    watch::RemoteWatcher,
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

/// A connection's inbound side (the transport's [`Handler`]): routes each
/// frame to the job it is for, and ends each read by handing over what
/// the read brought.
pub(crate) struct Dispatch {
    /// What every job reports through.
    conn: Conn,
    ids: Ids,
    runs: Runs,
    /// Bytes of the current read not yet handed to a handler method: how
    /// much a run buffer may still need this read.
    left_in_read: usize,
    /// `SystemConfig::set_message_runs`: this node announced that it takes
    /// run envelopes (`envelope::ENV_RUN`); if not, one is malformed, as it
    /// is for a node that does not know them.
    takes_runs: bool,
    parking: Parking,
    large: LargeIn,
    system: System,
    share: Share,
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
            conn: Conn::new(
                registry,
                peer,
                generation,
                peer_uid,
                proven,
                config.max_malformed_per_second,
            ),
            ids: Ids::new(config.max_recipient_ids, config.recipient_window as u64),
            runs: Runs::default(),
            left_in_read: 0,
            takes_runs: config.message_runs,
            parking: Parking::new(config.max_parked_bytes),
            large: LargeIn::new(config.max_message_size),
            system: System::new(Access::new(config)),
            share: Share::new(account),
        }
    }

    fn on_envelope(&mut self, body: &[u8]) {
        if self.conn.misbehaving {
            // Aborted: the rest of this read is not worth parsing.
            return;
        }
        match envelope::parse_plain(body) {
            Ok(env) => self.on_parsed::<false>(env, body),
            Err(EnvelopeError::Unusual) => self.on_unusual(body),
            Err(why) => self.conn.malformed_envelope(why),
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
            Err(why) => self.conn.malformed_envelope(why),
        }
    }

    /// A parsed envelope; `EXT`: its message begins with an extension
    /// block (a constant, so that plain envelopes pay nothing for it).
    #[inline(always)]
    fn on_parsed<const EXT: bool>(&mut self, env: envelope::Envelope<'_>, body: &[u8]) {
        let (mut id, manifest, b, reply) = (env.id, env.manifest, env.payload, env.reply);
        if let Some(path) = env.define {
            if path.len() > MAX_PATH_LEN {
                return self.conn.malformed(
                    MalformedKind::Recipient,
                    "recipient path longer than MAX_PATH_LEN",
                );
            }
            if env.inline {
                id = INLINE_ID;
                self.ids.set_inline(path, &self.conn.registry);
            } else if id == INLINE_ID {
                return self
                    .conn
                    .malformed(MalformedKind::Recipient, "recipient id reserved");
            } else if self
                .ids
                .define(id, path, manifest, &mut self.conn, &self.share)
                .is_err()
            {
                return;
            }
        } else if id == INLINE_ID {
            return self
                .conn
                .malformed(MalformedKind::Recipient, "recipient id reserved");
        }
        let run = match env.kind {
            Kind::Message => None,
            Kind::Run => match run_records(b) {
                Ok(_) if !self.takes_runs => {
                    return self.conn.malformed(
                        MalformedKind::Envelope,
                        "a run envelope, which this node did not announce",
                    );
                }
                Ok(n) => Some(n),
                Err(why) => return self.conn.malformed(MalformedKind::Envelope, why),
            },
            Kind::Fragment(f) => {
                let tag = envelope::Tag { manifest, ext: EXT };
                return self.large.on_fragment(
                    &mut self.conn,
                    &mut self.ids,
                    &self.share,
                    id,
                    tag,
                    f,
                    b,
                );
            }
            Kind::Stop => return self.on_stop(id, manifest, body.len()),
        };
        // One lookup: the entry, its target refreshed in place if it cannot
        // take this type (see `Ids::refresh`).
        let Some(entry) = self.ids.get_mut(id) else {
            // Ids are defined in-stream before use: this is a broken peer.
            return self.conn.malformed(
                MalformedKind::Recipient,
                format!("unknown recipient id {id}"),
            );
        };
        // An ask's request to an actor that stopped is looked up again
        // now, so that the asker hears at once why it is a dead letter
        // (one lock, for asks only).
        let stale = reply.is_some() && entry.target.as_ref().is_some_and(|t| !t.is_open());
        if stale || !entry.takes(manifest) {
            let registry = &self.conn.registry;
            entry.set_target(registry.lookup(&entry.path));
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
                let to = registry.path(&entry.path);
                // One per message of a run; the log is sampled there.
                let label = manifests::label(manifest);
                for _ in 0..run.unwrap_or(1) {
                    registry.dead_letter(&label, &to, &why);
                }
                // Given up on: its credit goes back, and an asker hears why.
                self.conn
                    .release(id, entry.win.as_deref(), body.len() as u64);
                if let Some(reply) = reply {
                    self.conn.answer(&SysWire::Undeliverable {
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
        self.ids.refresh(id, manifest, &self.conn.registry);
        let Some(entry) = self.ids.get(id) else {
            // Ids are defined in-stream before use: this is a broken peer.
            return self.conn.malformed(
                MalformedKind::Recipient,
                format!("unknown recipient id {id}"),
            );
        };
        let why = match &entry.target {
            _ if !self.system.may_stop() => DeadLetterReason::Refused(UNTRUSTED.into()),
            None => DeadLetterReason::NoActor,
            Some(t) if t.manifest() != manifest => DeadLetterReason::WrongType {
                takes: t.manifest_name(),
            },
            Some(_) => return self.runs.push_stop(id, entry, credit),
        };
        let to = self.conn.registry().path(&entry.path);
        self.conn.dead("(remote graceful stop)", &to, &why);
        self.conn.release(id, entry.win.as_deref(), credit as u64);
    }

    /// Hands every run of this read to its mailbox. The reader never waits
    /// here: a run whose mailbox is full is parked (see `park`), and later
    /// runs for that recipient queue behind it until it is handed over.
    fn deliver_runs(&mut self) {
        for run in &mut self.runs.list {
            let Some((b, held)) = run.take() else {
                continue;
            };
            let cost = queued_cost(held);
            if let Some(t) = self.parking.deliver(&self.conn, &self.share, run, b, cost) {
                run.target = t;
            }
        }
    }
}

impl Handler for Dispatch {
    fn on_start(&mut self, sender: &Sender) {
        self.conn.start(sender);
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
            FrameKind::System => self.system.on_frame(&mut self.conn, body),
            _ => {}
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        self.on_frame_ref(frame.kind, &frame.body);
    }

    async fn on_batch_end(&mut self) {
        self.deliver_runs();
        self.large.end_read(&self.conn, &self.share, &self.parking);
        self.runs.end_read();
        self.ids.end_read();
        if self.share.must_hold_back() {
            self.share.hold_back(&mut self.conn).await;
        }
    }

    fn on_heartbeat_ack(&mut self, body: &[u8]) {
        // Acks answer our heartbeats, which go out on proven links only.
        if !self.conn.proven {
            return;
        }
        if let Ok(seq) = <[u8; 8]>::try_from(body) {
            self.conn.peer.on_heartbeat_ack(u64::from_le_bytes(seq));
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        self.large.on_close(&self.conn);
        self.conn.peer.on_close(self.conn.generation, reason);
    }
}

impl Drop for Dispatch {
    /// The id table and the reassembly go with the dispatcher; what is
    /// parked goes with the tasks that hand it over (each gives back its
    /// own, and the account gives back the rest when the last one ends).
    fn drop(&mut self) {
        self.share
            .account()
            .give_back(self.ids.charged() + self.large.charged());
    }
}

#[cfg(test)]
mod tests;
