//! Why a message became a dead letter, and what was malformed in a peer's
//! input: typed reasons, so that logs and metric labels come from one
//! classification instead of from the wording of a message.
//!
//! [`DeadLetterReason::label`] is the `reason` label of
//! `actors_dead_letters_total` and [`MalformedKind::label`] the `kind`
//! label of `remoting_malformed_total`: few values, fixed strings (listed
//! in `docs/OPERATIONS.md`). `Display` is the human text a log line or an
//! asker's `Undeliverable` error shows, with the detail the variant
//! carries (numbers, a peer's close reason, a decode error).

use std::{borrow::Cow, fmt};

/// What part of a peer's input was malformed: the `kind` label of
/// `remoting_malformed_total`.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MalformedKind {
    /// An envelope that does not parse, or has a flag this node does not
    /// know (a newer peer's feature, or garbage).
    Envelope,
    /// A message's extension block does not parse: unknown bits,
    /// truncated, an all-zero trace context.
    ExtensionBlock,
    /// An unknown or reserved recipient id, or a recipient path too long.
    Recipient,
    /// A large message's fragments do not fit together.
    Fragment,
    /// A system message that does not decode, or is not expected where it
    /// came.
    SystemMessage,
}

impl MalformedKind {
    /// Every kind, in the order of [`MalformedKind::LABELS`].
    #[cfg(test)]
    pub(crate) const ALL: [Self; 5] = [
        Self::Envelope,
        Self::ExtensionBlock,
        Self::Recipient,
        Self::Fragment,
        Self::SystemMessage,
    ];

    /// Every label, indexed by [`MalformedKind::slot`].
    pub(crate) const LABELS: [&'static str; 5] = [
        "envelope",
        "extension_block",
        "recipient",
        "fragment",
        "system_message",
    ];

    /// The index of this kind in [`MalformedKind::LABELS`].
    pub(crate) const fn slot(self) -> usize {
        match self {
            Self::Envelope => 0,
            Self::ExtensionBlock => 1,
            Self::Recipient => 2,
            Self::Fragment => 3,
            Self::SystemMessage => 4,
        }
    }

    /// The metric label: `envelope`, `extension_block`, `recipient`,
    /// `fragment` or `system_message`.
    pub const fn label(self) -> &'static str {
        Self::LABELS[self.slot()]
    }
}

impl fmt::Display for MalformedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Why a message became a dead letter: the `reason` of its log line and,
/// by [`label`](DeadLetterReason::label), of `actors_dead_letters_total`.
///
/// Several variants share a label where operators need not tell them
/// apart (a message to a stopped actor and one left in its mailbox when
/// it stopped are both `actor_stopped`); `Display` tells them apart.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterReason {
    /// A peer's malformed input (`malformed`).
    Malformed {
        /// What was malformed.
        kind: MalformedKind,
        /// What the parser says of it.
        detail: Cow<'static, str>,
    },
    /// Queued on a link (or for a connection) that ended before it was
    /// written; the detail is the link's close reason (`link_lost`).
    LinkLost(Cow<'static, str>),
    /// The message whose handler returned an error or panicked
    /// (`handler_failed`).
    HandlerFailed,
    /// A reply to an ask already answered, failed or timed out, whether
    /// it came from this node or another (`ask_done`).
    AskDone,
    /// No actor at the recipient's path (`no_actor`).
    NoActor,
    /// The actor had stopped (`actor_stopped`).
    ActorStopped,
    /// Still in the actor's mailbox when it stopped (`actor_stopped`).
    LeftInMailbox,
    /// The actor takes another message type (`wrong_type`).
    WrongType {
        /// The type the actor at the path takes.
        takes: &'static str,
    },
    /// A remote message or reply that does not decode; the detail is the
    /// decode error (`undecodable`).
    Undecodable(Cow<'static, str>),
    /// A message that does not encode for a remote recipient; the detail
    /// is the encode error (`unencodable`).
    Unencodable(Cow<'static, str>),
    /// The recipient's mailbox was full and nothing could wait for room;
    /// the detail says why not (`mailbox_full`).
    MailboxFull(Cow<'static, str>),
    /// A message larger than the receiver's maximum (`too_large`).
    TooLarge {
        /// The message's size in bytes.
        size: u64,
        /// The receiver's maximum message size in bytes.
        max: u64,
    },
    /// The recipient's incarnation restarted (`restarted`).
    Restarted,
    /// The recipient's node incarnation is quarantined (`quarantined`).
    Quarantined,
    /// Refused by policy: untrusted mode, too many watches, a refused
    /// connect; the detail says which (`refused`).
    Refused(Cow<'static, str>),
    /// The system shut down (`shut_down`).
    ShutDown,
    /// The recipient's node could not be reached (connect or resolve
    /// failed) or is judged unreachable; the detail says which
    /// (`unreachable`).
    Unreachable(Cow<'static, str>),
    /// Sent through a router that had no routee (`no_routee`).
    NoRoutee,
    /// Held for a recipient that is moving or not yet known (a cluster
    /// singleton's ref, a shard in handoff) past the holder's byte bound;
    /// the detail names the holder (`buffer_full`).
    BufferFull(Cow<'static, str>),
    /// Refused because the sending peer holds its share of the node's
    /// peer memory budget (`SystemConfig::set_peer_memory_budget`); the
    /// detail says what it asked the node to hold (`over_share`).
    OverShare(Cow<'static, str>),
}

impl DeadLetterReason {
    /// Every label, indexed by [`DeadLetterReason::slot`].
    pub(crate) const LABELS: [&'static str; 19] = [
        "malformed",
        "link_lost",
        "handler_failed",
        "ask_done",
        "no_actor",
        "actor_stopped",
        "wrong_type",
        "undecodable",
        "unencodable",
        "mailbox_full",
        "too_large",
        "restarted",
        "quarantined",
        "refused",
        "shut_down",
        "unreachable",
        "no_routee",
        "buffer_full",
        "over_share",
    ];

    /// The index of this reason's label in [`DeadLetterReason::LABELS`].
    pub(crate) const fn slot(&self) -> usize {
        match self {
            Self::Malformed { .. } => 0,
            Self::LinkLost(_) => 1,
            Self::HandlerFailed => 2,
            Self::AskDone => 3,
            Self::NoActor => 4,
            Self::ActorStopped | Self::LeftInMailbox => 5,
            Self::WrongType { .. } => 6,
            Self::Undecodable(_) => 7,
            Self::Unencodable(_) => 8,
            Self::MailboxFull(_) => 9,
            Self::TooLarge { .. } => 10,
            Self::Restarted => 11,
            Self::Quarantined => 12,
            Self::Refused(_) => 13,
            Self::ShutDown => 14,
            Self::Unreachable(_) => 15,
            Self::NoRoutee => 16,
            Self::BufferFull(_) => 17,
            Self::OverShare(_) => 18,
        }
    }

    /// The metric label (and the log's `label` field): one of the few
    /// values `docs/OPERATIONS.md` lists, such as `no_actor` or
    /// `link_lost`.
    pub const fn label(&self) -> &'static str {
        Self::LABELS[self.slot()]
    }

    /// A peer's malformed input of `kind`, as its parser says it.
    pub(crate) fn malformed(kind: MalformedKind, detail: impl Into<Cow<'static, str>>) -> Self {
        Self::Malformed {
            kind,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { detail, .. } => f.write_str(detail),
            Self::LinkLost(why) => write!(f, "link lost: {why}"),
            Self::HandlerFailed => f.write_str("handler failed"),
            Self::AskDone => f.write_str("ask already answered or timed out (late reply)"),
            Self::NoActor => f.write_str("no such actor"),
            Self::ActorStopped => f.write_str("actor stopped"),
            Self::LeftInMailbox => f.write_str("left in mailbox at stop"),
            Self::WrongType { takes } => write!(
                f,
                "actor takes {takes}, message is another or unregistered type"
            ),
            Self::Undecodable(e) => write!(f, "does not decode: {e}"),
            Self::Unencodable(e) => write!(f, "does not encode: {e}"),
            Self::MailboxFull(why) => write!(f, "mailbox full, {why}"),
            Self::TooLarge { size, max } => write!(
                f,
                "{size} bytes exceeds the maximum message size of {max} bytes"
            ),
            Self::Restarted => f.write_str("the recipient's incarnation restarted"),
            Self::Quarantined => f.write_str("its node's incarnation is quarantined"),
            Self::Refused(why) => write!(f, "refused: {why}"),
            Self::ShutDown => f.write_str("actor system shut down"),
            Self::Unreachable(why) => write!(f, "unreachable: {why}"),
            Self::NoRoutee => f.write_str("router has no routee"),
            Self::BufferFull(who) => write!(f, "buffer full: {who}"),
            Self::OverShare(what) => write!(f, "peer over its memory share: {what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_slot_label() {
        let reasons = [
            DeadLetterReason::malformed(MalformedKind::Envelope, "x"),
            DeadLetterReason::LinkLost("closed".into()),
            DeadLetterReason::HandlerFailed,
            DeadLetterReason::AskDone,
            DeadLetterReason::NoActor,
            DeadLetterReason::ActorStopped,
            DeadLetterReason::WrongType { takes: "a::B" },
            DeadLetterReason::Undecodable("eof".into()),
            DeadLetterReason::Unencodable("too big".into()),
            DeadLetterReason::MailboxFull("no window".into()),
            DeadLetterReason::TooLarge { size: 9, max: 8 },
            DeadLetterReason::Restarted,
            DeadLetterReason::Quarantined,
            DeadLetterReason::Refused("untrusted mode".into()),
            DeadLetterReason::ShutDown,
            DeadLetterReason::Unreachable("connect to h:1: timed out".into()),
            DeadLetterReason::NoRoutee,
            DeadLetterReason::BufferFull("singleton s".into()),
            DeadLetterReason::OverShare("ids".into()),
        ];
        let labels: Vec<&str> = reasons.iter().map(DeadLetterReason::label).collect();
        assert_eq!(labels, DeadLetterReason::LABELS);
        assert_eq!(DeadLetterReason::LeftInMailbox.label(), "actor_stopped");
        for (k, label) in MalformedKind::ALL.iter().zip(MalformedKind::LABELS) {
            assert_eq!(k.label(), label);
        }
    }

    #[test]
    fn the_text_keeps_the_detail_and_the_label_does_not() {
        // The label is what a connect error's wording no longer decides: a
        // timed-out connect whose text says "refused" nowhere is still
        // unreachable, and one whose text says "connect" is not.
        let r = DeadLetterReason::Refused("connect to 127.0.0.1:1: connection refused".into());
        assert_eq!(r.label(), "refused");
        assert_eq!(
            r.to_string(),
            "refused: connect to 127.0.0.1:1: connection refused"
        );
        let r = DeadLetterReason::LinkLost("connect to a node that was unreachable".into());
        assert_eq!(r.label(), "link_lost");
        let r = DeadLetterReason::TooLarge { size: 9, max: 8 };
        assert_eq!(
            r.to_string(),
            "9 bytes exceeds the maximum message size of 8 bytes"
        );
    }
}
