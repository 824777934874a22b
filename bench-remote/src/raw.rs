//! The pattern over the raw transport: frames through `transport`'s
//! batching writer and zero-copy reader, no actors. Each burst is queued
//! with one `Sender::send_many_with`, and the receiver reads bodies in
//! place (`Handler::BORROW`).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use anyhow::{Context, Result, anyhow};
use bytes::{BufMut, Bytes};
use tokio::runtime::Handle;
use transport::{
    ConnStats, Connection, Endpoint, Frame, FrameKind, Handler, Inbound, Sender, TransportConfig,
    TrySendFrameError,
};

use crate::pattern::{Link, Marker, Outcome, Shape, TAG_MARKER, TAG_PAYLOAD, drive, marker_from};

struct RawLink {
    conn: Connection,
    sender: Sender,
    inbound: Inbound,
    payload: Vec<u8>,
}

impl Link for RawLink {
    async fn send_burst(&mut self, n: u64, marker: Marker) -> Result<()> {
        let payload = &self.payload[..];
        // The burst in one call: the queue's lock and the writer's wake-up
        // are paid per run of frames that fit, not per frame.
        self.sender
            .send_many_with(FrameKind::Message, n as usize, |b| {
                b.put_u8(TAG_PAYLOAD);
                b.put_slice(payload);
            })
            .await?;
        self.sender
            .send_with(FrameKind::Message, |b| marker.encode(b))
            .await?;
        Ok(())
    }

    async fn recv_marker(&mut self) -> Result<Marker> {
        let f = self.inbound.recv().await.ok_or_else(|| {
            anyhow!(
                "connection to the receiver ended: {}",
                self.conn
                    .close_reason()
                    .map_or_else(|| "unknown".into(), |r| r.to_string())
            )
        })?;
        marker_from(&f.body)
    }
}

/// Counts payloads and echoes markers on the reader task.
struct Echo {
    sender: Option<Sender>,
    count: u64,
    received: Arc<AtomicU64>,
    pending: Vec<Bytes>,
}

impl Echo {
    /// A marker read in place: copied out to be echoed.
    #[cold]
    #[inline(never)]
    fn marker(&mut self, kind: FrameKind, body: &[u8]) {
        self.on_frame(Frame {
            kind,
            body: Bytes::copy_from_slice(body),
        });
    }
}

impl Handler for Echo {
    fn on_start(&mut self, sender: &Sender) {
        self.sender = Some(sender.clone());
    }

    // Bodies are read in place in the read buffer: payloads are only
    // counted, and the rare marker is copied out to be echoed.
    const BORROW: bool = true;

    // Inline, with the marker's path out of line: the loop that calls it
    // is instantiated in this crate, and whether the compiler inlined the
    // handler there depended on how the crate's other code was split into
    // codegen units (18 instructions a frame on the receiving thread when
    // it did not).
    #[inline]
    fn on_frame_ref(&mut self, kind: FrameKind, body: &[u8]) {
        if body.first() == Some(&TAG_MARKER) {
            self.marker(kind, body);
        } else {
            self.count += 1;
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        if frame.body.first() == Some(&TAG_MARKER) {
            let sender = self.sender.as_ref().expect("on_start runs first");
            if self.pending.is_empty() {
                // Closed: the sender side is gone, nothing to echo to.
                if let Err(TrySendFrameError::Full(f)) = sender.try_send(frame) {
                    self.pending.push(f.body);
                }
            } else {
                self.pending.push(frame.body);
            }
        } else {
            self.count += 1;
        }
    }

    async fn on_batch_end(&mut self) {
        self.received.store(self.count, Relaxed);
        if let Some(sender) = &self.sender {
            for body in self.pending.drain(..) {
                let _ = sender.send(Frame::message(body)).await;
            }
        }
    }
}

/// The result of a raw run.
#[derive(Debug)]
pub struct RawRun {
    /// Timing and round-trips.
    pub outcome: Outcome,
    /// Payloads the receiver counted (warm-up included).
    pub received: u64,
    /// Counters of the sending connection.
    pub stats: ConnStats,
}

/// Runs the pattern once over the transport, both nodes in this process.
pub async fn run(
    recv: &Handle,
    shape: Shape,
    config: TransportConfig,
    verbose: bool,
) -> Result<RawRun> {
    let any = "127.0.0.1:0".parse().expect("literal address");
    let a = Endpoint::bind(any, config.clone()).await?;
    // The receiving node lives on the receiving runtime.
    let b = recv.spawn(Endpoint::bind(any, config)).await??;
    let b_addr = b.local_addr();
    let received = Arc::new(AtomicU64::new(0));
    let count = received.clone();
    let server = recv.spawn(async move {
        let inc = b.accept().await.context("endpoint closed")??;
        let conn = inc.start(Echo {
            sender: None,
            count: 0,
            received: count,
            pending: Vec::new(),
        });
        anyhow::Ok((b, conn))
    });
    let out = a.connect(b_addr).await.context("connect")?;
    let (_b, server) = server.await??;
    let (conn, inbound) = out.start_channel(64);
    let mut link = RawLink {
        sender: conn.sender(),
        conn,
        inbound,
        payload: vec![7u8; shape.payload],
    };
    let outcome = tokio::spawn(async move {
        let r = drive(&mut link, shape, verbose).await;
        (r, link)
    })
    .await?;
    let (outcome, link) = outcome;
    let outcome = outcome?;
    let stats = link.conn.stats();
    link.conn.close("benchmark done").await;
    server.closed().await;
    Ok(RawRun {
        outcome,
        received: received.load(Relaxed),
        stats,
    })
}
