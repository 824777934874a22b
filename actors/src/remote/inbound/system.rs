//! System messages from the peer: the reliable stream delivered in order
//! and acknowledged, the peer's requests (identify, watch, stop) answered
//! within what [`Access`] allows, and what the node tells this node
//! (acks, shutdown, credit, failed asks) reported to its association
//! through `Peer`.
//!
//! What a message may change depends on the connection:
//!
//! ```text
//!                                 proven connection     unproven connection
//!  about the node (see below)     reported              dropped
//!  the peer's reliable stream     delivered, acked      delivered, acked; may not
//!                                                       take over another
//!                                                       incarnation's stream
//!  requests, credit, failed asks  handled               handled
//! ```

use transport::PeerText;

use super::conn::Conn;
use crate::{
    dead_letter::{DeadLetterReason, MalformedKind},
    lifecycle::{StopReason, Terminated},
    remote::{access::Access, reliable::Receive, system_msg::SysWire},
    reply::NoReply,
    watch::WatchSink,
};

/// Why a remote stop was refused.
pub(super) const UNTRUSTED: &str = "untrusted mode";

/// Whether only the node itself may tell this node `msg`: it changes what
/// this node believes of the node (its incarnation is going, our stream
/// or large message was read, the answer to our question), so an unproven
/// connection, which may be anyone who claims the node, may not send it.
pub(super) fn only_from_the_node(msg: &SysWire) -> bool {
    matches!(
        msg,
        SysWire::Shutdown
            | SysWire::Ack { .. }
            | SysWire::Identity { .. }
            | SysWire::LargeAck { .. }
    )
}

/// The system messages of one connection.
pub(super) struct System {
    /// Which system requests of the peer are honoured.
    access: Access,
}

impl System {
    pub(super) fn new(access: Access) -> Self {
        Self { access }
    }

    /// Whether the peer may stop actors here (remote `stop`, graceful
    /// stop envelopes).
    pub(super) fn may_stop(&self) -> bool {
        self.access.may_stop()
    }

    /// A system frame's body.
    pub(super) fn on_frame(&self, conn: &mut Conn, body: &[u8]) {
        match SysWire::decode(body) {
            Ok(msg) => self.on_decoded(conn, msg),
            Err(e) => {
                // Counted as malformed: the peer is closed past the limit,
                // and that is logged.
                tracing::debug!(node = %PeerText(conn.peer.node()), error = %e, "undecodable system message dropped");
                conn.malformed(MalformedKind::SystemMessage, "undecodable system message");
            }
        }
    }

    fn on_decoded(&self, conn: &mut Conn, msg: SysWire) {
        if only_from_the_node(&msg) && !conn.proven {
            tracing::debug!(node = %PeerText(conn.peer.node()), generation = conn.generation, "a connection whose claim is not proven sent a message only the node may send; dropped");
            return;
        }
        match msg {
            SysWire::Reliable { epoch, seq, body } => {
                // Held while delivering, so two links of one node cannot
                // deliver out of order.
                let peer = conn.peer.clone();
                let mut sys_in = peer.sys_in();
                let ack = match sys_in.handle(conn.peer_uid, epoch, seq, conn.proven) {
                    Receive::Deliver => {
                        match SysWire::decode(&body) {
                            Ok(inner) if inner.is_reliable_kind() => self.on_request(conn, inner),
                            Ok(_) => {
                                tracing::debug!(node = %PeerText(conn.peer.node()), "unexpected message in the reliable stream dropped");
                                conn.malformed(
                                    MalformedKind::SystemMessage,
                                    "unexpected message in the reliable stream",
                                );
                            }
                            Err(e) => {
                                tracing::debug!(node = %PeerText(conn.peer.node()), error = %e, "undecodable system message dropped");
                                conn.malformed(
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
                    conn.answer(&SysWire::Ack { epoch, seq });
                }
            }
            SysWire::Ack { epoch, seq } => conn.peer.on_ack(epoch, seq),
            SysWire::Shutdown => conn.peer.on_shutdown(conn.peer_uid),
            SysWire::LargeAck { msg, received } => conn.peer.on_large_ack(msg, received),
            SysWire::Credit { id, total } => conn.peer.on_credit(conn.generation, id, total),
            SysWire::Undeliverable { reply, reason } => on_undeliverable(conn, &reply, &reason),
            SysWire::NoReply { reply, why } => on_no_reply(conn, &reply, why),
            other => self.on_request(conn, other),
        }
    }

    /// A request of the peer, or a notice about one of this node's.
    fn on_request(&self, conn: &mut Conn, msg: SysWire) {
        match msg {
            SysWire::Identify { id, path } => {
                // A path the peer may not look up is absent to it.
                let manifest = self
                    .access
                    .may_identify(&path)
                    .then(|| conn.registry().lookup(&path))
                    .flatten()
                    .map(|t| (t.manifest(), t.manifest_name().to_owned()));
                conn.answer(&SysWire::Identity { id, manifest });
            }
            SysWire::Identity { id, manifest } => conn.peer.on_identity(id, manifest),
            SysWire::Watch { path, watch_id } => {
                let sink = WatchSink::Remote {
                    link: conn.peer.clone().watcher(),
                    watch_id,
                    uid: conn.peer_uid,
                };
                match conn.registry().lookup(&path) {
                    Some(t) => {
                        if t.add_watcher(sink).is_err() {
                            let to = conn.registry().path(&path);
                            conn.dead(
                                "(remote watch)",
                                &to,
                                &DeadLetterReason::Refused(
                                    "this node holds too many watches on the actor".into(),
                                ),
                            );
                        }
                    }
                    None => sink.deliver(Terminated {
                        path: conn.registry().path(&path),
                        reason: StopReason::NotFound,
                    }),
                }
            }
            SysWire::Unwatch { path, watch_id } => {
                let sink = WatchSink::Remote {
                    link: conn.peer.clone().watcher(),
                    watch_id,
                    uid: conn.peer_uid,
                };
                if let Some(t) = conn.registry().lookup(&path) {
                    t.remove_watcher(&sink);
                }
            }
            SysWire::Terminated { watch_id, reason } => conn.peer.on_terminated(watch_id, reason),
            SysWire::Stop { path } => {
                if !self.access.may_stop() {
                    let to = conn.registry().path(&path);
                    return conn.dead(
                        "(remote stop)",
                        &to,
                        &DeadLetterReason::Refused(UNTRUSTED.into()),
                    );
                }
                if let Some(t) = conn.registry().lookup(&path) {
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
}

/// The peer turned the request of one of this node's asks into a dead
/// letter: the ask fails at once with the peer's reason (shown truncated
/// and escaped). Only ask reply slots are failed this way; their paths are
/// random, so only the node the request went to knows one.
fn on_undeliverable(conn: &mut Conn, reply: &str, reason: &str) {
    if !reply.starts_with("/temp/") {
        return conn.malformed(
            MalformedKind::SystemMessage,
            "Undeliverable for a path that is no ask's",
        );
    }
    if let Some(t) = conn.registry().lookup(reply) {
        t.fail(&PeerText(reason).to_string());
    }
}

/// The peer will send no reply to one of this node's asks (the handler
/// failed, or dropped the reply ref): the ask fails at once with why (a
/// peer's text shown truncated and escaped).
fn on_no_reply(conn: &mut Conn, reply: &str, why: NoReply) {
    if !reply.starts_with("/temp/") {
        return conn.malformed(
            MalformedKind::SystemMessage,
            "NoReply for a path that is no ask's",
        );
    }
    let why = match why {
        NoReply::HandlerFailed(t) => NoReply::HandlerFailed(PeerText(&t).to_string()),
        NoReply::Stopped(t) => NoReply::Stopped(PeerText(&t).to_string()),
        other => other,
    };
    if let Some(t) = conn.registry().lookup(reply) {
        t.no_reply(why);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        config::SystemConfig,
        registry::Registry,
        remote::inbound::tests::{FakeTarget, about_the_node, answered, conn, reliable_watch},
    };

    fn open() -> System {
        System::new(Access::new(&SystemConfig::default()))
    }

    fn untrusted() -> System {
        let mut config = SystemConfig::default();
        config
            .set_untrusted_mode(true)
            .set_lookup_paths(["/user/seven"]);
        System::new(Access::new(&config))
    }

    /// A `/temp` reply slot on `registry`, as an ask registers it.
    fn reply_slot(registry: &Registry) -> Arc<FakeTarget> {
        let slot = Arc::new(FakeTarget::default());
        registry.register("/temp/$a1", slot.clone());
        slot
    }

    #[test]
    fn only_what_changes_beliefs_about_the_node_is_the_nodes_alone() {
        for msg in about_the_node() {
            assert!(only_from_the_node(&msg), "{msg:?}");
        }
        let others = [
            SysWire::Identify {
                id: 1,
                path: "/user/a".into(),
            },
            SysWire::Watch {
                path: "/user/a".into(),
                watch_id: 1,
            },
            SysWire::Unwatch {
                path: "/user/a".into(),
                watch_id: 1,
            },
            SysWire::Terminated {
                watch_id: 1,
                reason: StopReason::Stopped,
            },
            SysWire::Stop {
                path: "/user/a".into(),
            },
            SysWire::Reliable {
                epoch: 1,
                seq: 1,
                body: Vec::new(),
            },
            SysWire::Credit { id: 1, total: 10 },
            SysWire::Undeliverable {
                reply: "/temp/a".into(),
                reason: "gone".into(),
            },
            SysWire::NoReply {
                reply: "/temp/a".into(),
                why: NoReply::Dropped,
            },
        ];
        for msg in others {
            assert!(!only_from_the_node(&msg), "{msg:?}");
        }
    }

    #[test]
    fn the_reliable_stream_is_delivered_once_in_order_and_acked() {
        let (mut conn, peer, _) = conn(true);
        let system = open();
        system.on_frame(&mut conn, &reliable_watch(11));
        // Resent (our ack was lost): acknowledged again, not delivered.
        system.on_frame(&mut conn, &reliable_watch(11));
        // A gap: neither delivered nor acknowledged.
        let gap = SysWire::Reliable {
            epoch: 1,
            seq: 3,
            body: SysWire::Stop {
                path: "/user/seven".into(),
            }
            .encode()
            .to_vec(),
        };
        system.on_frame(&mut conn, &gap.encode());
        assert_eq!(peer.events(), ["terminated 11 stopped"]);
        assert_eq!(
            answered(&conn),
            ["Ack { epoch: 1, seq: 1 }", "Ack { epoch: 1, seq: 1 }"]
        );
    }

    #[test]
    fn the_reliable_stream_carries_only_its_own_kinds() {
        let (mut conn, peer, registry) = conn(true);
        let system = open();
        let credit = SysWire::Reliable {
            epoch: 1,
            seq: 1,
            body: SysWire::Credit { id: 1, total: 10 }.encode().to_vec(),
        };
        system.on_frame(&mut conn, &credit.encode());
        // Malformed, but acknowledged: it was the stream's message 1.
        assert_eq!(registry.dead_letter_count(), 1);
        assert!(peer.events().is_empty(), "{:?}", peer.events());
        assert_eq!(answered(&conn), ["Ack { epoch: 1, seq: 1 }"]);
        system.on_frame(&mut conn, b"\xff\xff not a system message");
        assert_eq!(registry.dead_letter_count(), 2);
    }

    #[test]
    fn identify_is_answered_within_what_access_allows() {
        let (mut conn, _, registry) = conn(true);
        reply_slot(&registry);
        let identify = |path: &str| {
            SysWire::Identify {
                id: 5,
                path: path.into(),
            }
            .encode()
        };
        open().on_frame(&mut conn, &identify("/user/seven"));
        // A reply slot is never looked up: only a node handed its ref may
        // address it.
        open().on_frame(&mut conn, &identify("/temp/$a1"));
        untrusted().on_frame(&mut conn, &identify("/user/seven"));
        untrusted().on_frame(&mut conn, &identify("/user/other"));
        let found = r#"Identity { id: 5, manifest: Some((7, "test.Seven")) }"#;
        let absent = "Identity { id: 5, manifest: None }";
        assert_eq!(answered(&conn), [found, absent, found, absent]);
    }

    #[test]
    fn a_remote_stop_is_refused_in_untrusted_mode() {
        let (mut conn, _, registry) = conn(true);
        let target = Arc::new(FakeTarget::default());
        registry.register("/user/t", target.clone());
        let stop = SysWire::Stop {
            path: "/user/t".into(),
        }
        .encode();
        untrusted().on_frame(&mut conn, &stop);
        assert!(!target.stopped.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(registry.dead_letter_count(), 1);
        open().on_frame(&mut conn, &stop);
        assert!(target.stopped.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_watch_of_no_actor_hears_at_once_that_there_is_none() {
        let (mut conn, peer, _) = conn(true);
        let watch = SysWire::Watch {
            path: "/user/none".into(),
            watch_id: 8,
        };
        open().on_frame(&mut conn, &watch.encode());
        assert_eq!(
            peer.events(),
            [format!("terminated 8 {}", StopReason::NotFound)]
        );
    }

    #[test]
    fn failed_asks_fail_at_once_and_only_reply_slots_can_be_failed() {
        let (mut conn, _, registry) = conn(true);
        let slot = reply_slot(&registry);
        let system = open();
        let undeliverable = |reply: &str| {
            SysWire::Undeliverable {
                reply: reply.into(),
                reason: "no actor\n".into(),
            }
            .encode()
        };
        system.on_frame(&mut conn, &undeliverable("/temp/$a1"));
        let no_reply = SysWire::NoReply {
            reply: "/temp/$a1".into(),
            why: NoReply::HandlerFailed("boom".into()),
        };
        system.on_frame(&mut conn, &no_reply.encode());
        // The peer's text is shown escaped.
        assert_eq!(
            *slot.failed.lock().unwrap(),
            [
                PeerText("no actor\n").to_string(),
                format!("{:?}", NoReply::HandlerFailed("boom".into()))
            ]
        );
        assert_eq!(registry.dead_letter_count(), 0);
        // Any other path is no ask's: malformed, and nothing fails.
        system.on_frame(&mut conn, &undeliverable("/user/seven"));
        let no_reply = SysWire::NoReply {
            reply: "/user/seven".into(),
            why: NoReply::Dropped,
        };
        system.on_frame(&mut conn, &no_reply.encode());
        assert_eq!(registry.dead_letter_count(), 2);
        assert_eq!(slot.failed.lock().unwrap().len(), 2);
    }

    #[test]
    fn credit_goes_to_the_association_with_the_connections_generation() {
        let (mut conn, peer, _) = conn(false);
        let credit = SysWire::Credit { id: 4, total: 900 };
        open().on_frame(&mut conn, &credit.encode());
        assert_eq!(peer.events(), ["credit 3 4 900"]);
    }
}
