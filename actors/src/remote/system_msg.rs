//! System messages on the wire: the body of transport `System` frames, in
//! bincode's format. What they mean is handled by the association and the
//! inbound dispatcher; reliable delivery (sequence numbers, acks) is
//! `reliable`.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use transport::{Frame, FrameKind};

use crate::{
    error::SerializationError,
    lifecycle::StopReason,
    reply::NoReply,
    serialization::{Bincode, Serializer},
};

/// System messages between nodes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum SysWire {
    /// Does an actor live at `path`?
    Identify { id: u64, path: String },
    /// The answer: its manifest id and name, or none.
    Identity {
        id: u64,
        manifest: Option<(u32, String)>,
    },
    /// Tell me (`watch_id`) when the actor at `path` terminates.
    Watch { path: String, watch_id: u64 },
    /// The actor watched under `watch_id` terminated.
    Terminated { watch_id: u64, reason: StopReason },
    /// Stop the actor at `path`.
    Stop { path: String },
    /// A system message (`Watch`, `Terminated`, `Stop`, encoded) delivered
    /// exactly once, in order: number `seq` of the sender's stream `epoch`.
    Reliable { epoch: u64, seq: u64, body: Vec<u8> },
    /// Everything up to `seq` of stream `epoch` has been delivered.
    Ack { epoch: u64, seq: u64 },
    /// The sender's system is shutting down: do not wait for the failure
    /// detector.
    Shutdown,
    /// The receiver has processed large message `msg` up to `received`
    /// bytes (flow control of the large-message lane).
    LargeAck { msg: u32, received: u32 },
    /// Flow control: the sender may send recipient `id` of this
    /// connection up to `total` envelope bytes in all (see `flow`).
    Credit { id: u32, total: u64 },
    /// The ask whose reply slot is `reply` (a `/temp` path on the node
    /// that receives this) will get no reply: its request was a dead
    /// letter here, for `reason`.
    Undeliverable { reply: String, reason: String },
    /// Forget watch `watch_id` of the actor at `path` (delivered reliably,
    /// like `Watch`).
    Unwatch { path: String, watch_id: u64 },
    /// The ask whose reply slot is `reply` (a `/temp` path on the node
    /// that receives this) will get no reply: the handler that had its
    /// request failed, or every ref to the slot was dropped unanswered
    /// (see `reply`).
    NoReply { reply: String, why: NoReply },
}

impl SysWire {
    /// The encoded message. System messages are small and made of plain
    /// data, so this fails only on a bug; the failure is logged and an
    /// empty body returned, which the peer counts as malformed.
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        if let Err(e) = Bincode.serialize(self, &mut out) {
            tracing::error!(error = %e, "system message does not encode");
        }
        out.freeze()
    }

    /// A `System` frame carrying this message.
    pub(crate) fn frame(&self) -> Frame {
        system_frame(self.encode())
    }

    /// Decodes a system frame's body.
    pub(crate) fn decode(body: &[u8]) -> Result<Self, SerializationError> {
        Bincode.deserialize(body)
    }

    /// Whether this message travels in the reliable stream (inside
    /// `Reliable`); the others are sent as they are.
    pub(crate) fn is_reliable_kind(&self) -> bool {
        matches!(
            self,
            Self::Watch { .. } | Self::Unwatch { .. } | Self::Terminated { .. } | Self::Stop { .. }
        )
    }
}

/// A `System` frame with an encoded body.
pub(crate) fn system_frame(body: Bytes) -> Frame {
    Frame {
        kind: FrameKind::System,
        body,
    }
}

/// A `Reliable` system frame carrying `body` as number `seq` of `epoch`.
pub(crate) fn reliable_frame(epoch: u64, seq: u64, body: &[u8]) -> Frame {
    SysWire::Reliable {
        epoch,
        seq,
        body: body.to_vec(),
    }
    .frame()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reliable_frame_carries_its_body() {
        let inner = SysWire::Stop {
            path: "/user/a".into(),
        };
        let frame = reliable_frame(2, 5, &inner.encode());
        assert_eq!(frame.kind, FrameKind::System);
        let SysWire::Reliable { epoch, seq, body } = SysWire::decode(&frame.body).unwrap() else {
            panic!("not reliable")
        };
        assert_eq!((epoch, seq), (2, 5));
        let inner = SysWire::decode(&body).unwrap();
        assert!(inner.is_reliable_kind());
        assert!(matches!(inner, SysWire::Stop { path } if path == "/user/a"));
    }

    #[test]
    fn garbage_does_not_decode() {
        assert!(SysWire::decode(&[0xff, 0xff, 0xff]).is_err());
        assert!(!SysWire::Shutdown.is_reliable_kind());
    }
}
