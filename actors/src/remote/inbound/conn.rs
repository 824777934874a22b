//! The connection as every job of the dispatcher sees it: the registry
//! (lookups, dead letters), the peer it reports to, what the connection is
//! trusted with, the way back to the peer (answers, credit), and its count
//! of malformed input, which closes it past the limit.

use std::{borrow::Cow, sync::Arc, time::Instant};

use transport::Sender;

use super::{
    Peer,
    bad_input::{MALFORMED_WINDOW, MalformedLimit},
};
use crate::{
    dead_letter::{DeadLetterReason, MalformedKind},
    registry::Registry,
    remote::{
        envelope::EnvelopeError,
        flow::Windowed,
        link::{Outbox, Sampler},
        system_msg::SysWire,
    },
};

/// The sender and outbox a connection answers with, for a task that
/// outlives a read (see [`send_answer`]).
pub(super) type Answerer = Option<(Sender, Arc<Outbox>)>;

/// What the jobs of one connection's dispatcher share.
pub(super) struct Conn {
    pub(super) registry: Arc<Registry>,
    pub(super) peer: Arc<dyn Peer>,
    /// The connection is proven to be the node it names: this node dialed
    /// it, or its certificate names the node (see
    /// `Association::receive_only`). An unproven one delivers user
    /// messages and the peer's own reliable stream, and its questions are
    /// answered on it, but nothing on it changes what this node believes of
    /// the node it names: no shutdown notice, no ack of our stream, no
    /// answer to our questions, no heartbeat or large-message ack, and it
    /// cannot take over a reliable stream another incarnation started.
    pub(super) proven: bool,
    pub(super) generation: u32,
    /// The incarnation at the other end of this connection.
    pub(super) peer_uid: u64,
    sender: Option<Sender>,
    /// Answers that found the connection's queue full.
    outbox: Arc<Outbox>,
    malformed: MalformedLimit,
    /// Set once the connection was aborted (malformed input, or over its
    /// share of the memory budget).
    pub(super) misbehaving: bool,
    /// The answers sent, as `Debug` text, for tests (which have no
    /// connection to send them on).
    #[cfg(test)]
    pub(super) answered: std::sync::Mutex<Vec<String>>,
}

impl Conn {
    pub(super) fn new(
        registry: Arc<Registry>,
        peer: Arc<dyn Peer>,
        generation: u32,
        peer_uid: u64,
        proven: bool,
        max_malformed: usize,
    ) -> Self {
        Self {
            registry,
            peer,
            proven,
            generation,
            peer_uid,
            sender: None,
            outbox: Arc::default(),
            malformed: MalformedLimit::new(max_malformed),
            misbehaving: false,
            #[cfg(test)]
            answered: std::sync::Mutex::default(),
        }
    }

    /// The connection started: answers go out on `sender`.
    pub(super) fn start(&mut self, sender: &Sender) {
        self.sender = Some(sender.clone());
    }

    pub(super) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(super) fn dead(&self, what: &str, to: &dyn std::fmt::Display, why: &DeadLetterReason) {
        self.registry().dead_letter(what, to, why);
    }

    /// Sends a system message back on this connection, where the peer
    /// asked: an answer never takes another path, so only the connection
    /// that asked receives it. Through the connection's bounded outbox
    /// when its queue is full (see `link::Outbox`).
    pub(super) fn answer(&self, msg: &SysWire) {
        #[cfg(test)]
        self.answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("{msg:?}"));
        if let Some(sender) = &self.sender {
            self.outbox.send(sender, msg.frame());
        }
    }

    /// The sender and outbox this connection answers with, for a task.
    pub(super) fn answerer(&self) -> Answerer {
        self.sender.clone().map(|s| (s, self.outbox.clone()))
    }

    /// `bytes` of recipient `id`'s messages left this node's custody:
    /// credited back to the sender once half a window is owed.
    pub(super) fn release(&self, id: u32, win: Option<&Windowed>, bytes: u64) {
        if let Some(total) = win.and_then(|w| w.flow.release(bytes)) {
            self.answer(&SysWire::Credit { id, total });
        }
    }

    /// Counts a malformed envelope or system message (a dead letter), and
    /// aborts the connection once the peer sends more than the configured
    /// number within a second (see `bad_input`).
    #[cold]
    pub(super) fn malformed(&mut self, kind: MalformedKind, why: impl Into<Cow<'static, str>>) {
        self.registry.meters().malformed(kind);
        let why = DeadLetterReason::malformed(kind, why);
        self.dead("(malformed envelope)", &self.peer.node().clone(), &why);
        if let Some(count) = self.malformed.hit(Instant::now())
            && !self.misbehaving
        {
            let reason = format!(
                "peer sent {count} malformed envelopes within {MALFORMED_WINDOW:?} (limit {}); last: {why}",
                self.malformed.max()
            );
            static CLOSED: Sampler = Sampler::new();
            if let Some(n) = CLOSED.hit() {
                tracing::warn!(node = %transport::PeerText(self.peer.node()), %reason, closed = n, "closing connection to misbehaving peer");
            }
            self.abort(&reason);
        }
    }

    /// An envelope that does not parse: counted by its kind, logged (at
    /// debug: the dead letter's log line is the sampled warning) by its
    /// fault's label.
    #[cold]
    pub(super) fn malformed_envelope(&mut self, why: EnvelopeError) {
        tracing::debug!(node = %transport::PeerText(self.peer.node()), fault = why.label(), "malformed envelope");
        self.malformed(why.kind(), why.as_str());
    }

    /// Ends the connection at once for `reason`; the rest of what it sent
    /// is not worth reading.
    #[cold]
    pub(super) fn abort(&mut self, reason: &str) {
        self.misbehaving = true;
        if let Some(sender) = &self.sender {
            sender.abort(reason);
        }
    }
}

/// Sends `msg` on the connection `answer` names, through its outbox.
pub(super) fn send_answer(answer: Option<&(Sender, Arc<Outbox>)>, msg: &SysWire) {
    if let Some((sender, outbox)) = answer {
        outbox.send(sender, msg.frame());
    }
}
