//! The hand-written tokio ceiling: the same pattern and the same framing
//! bytes, with no transport and no actors. The sender encodes a whole burst
//! into one reused buffer and writes it with one `write_all`; the receiver
//! reads into a large buffer and parses frames in place.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use anyhow::{Context, Result, bail};
use bytes::{Buf, BufMut, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    runtime::Handle,
};
use transport::{FrameKind, frame::HEADER_LEN};

use crate::pattern::{Link, MARKER_LEN, Marker, Outcome, Shape, TAG_MARKER, TAG_PAYLOAD, drive};

/// Read buffer of both ends.
const READ_BUF: usize = 256 * 1024;

struct CeilingLink {
    wr: OwnedWriteHalf,
    rd: OwnedReadHalf,
    out: BytesMut,
    inb: BytesMut,
    payload: Vec<u8>,
}

fn put_payload(out: &mut BytesMut, payload: &[u8]) {
    out.put_u32(1 + payload.len() as u32);
    out.put_u8(FrameKind::Message as u8);
    out.put_u8(TAG_PAYLOAD);
    out.put_slice(payload);
}

fn put_marker(out: &mut BytesMut, m: &Marker) {
    out.put_u32(MARKER_LEN as u32);
    out.put_u8(FrameKind::Message as u8);
    m.encode(out);
}

impl Link for CeilingLink {
    async fn send_burst(&mut self, n: u64, marker: Marker) -> Result<()> {
        self.out.clear();
        for _ in 0..n {
            put_payload(&mut self.out, &self.payload);
        }
        put_marker(&mut self.out, &marker);
        self.wr.write_all(&self.out).await?;
        Ok(())
    }

    async fn recv_marker(&mut self) -> Result<Marker> {
        loop {
            while self.inb.len() >= HEADER_LEN {
                let len = u32::from_be_bytes(self.inb[..4].try_into().expect("4 bytes")) as usize;
                if self.inb.len() < HEADER_LEN + len {
                    break;
                }
                let body = &self.inb[HEADER_LEN..HEADER_LEN + len];
                // In echo-all mode payload echoes come first: skip them.
                let marker = (body.first() == Some(&TAG_MARKER)).then(|| Marker::decode(body));
                self.inb.advance(HEADER_LEN + len);
                if let Some(m) = marker {
                    return m;
                }
            }
            self.inb.reserve(READ_BUF);
            if self.rd.read_buf(&mut self.inb).await? == 0 {
                bail!("ceiling receiver closed the connection");
            }
        }
    }
}

/// The echoing receiver: counts payloads, echoes markers.
async fn receive(stream: TcpStream, received: Arc<AtomicU64>, echo_all: bool) -> Result<()> {
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let mut inb = BytesMut::with_capacity(READ_BUF);
    let mut out = BytesMut::with_capacity(1024);
    loop {
        if inb.capacity() - inb.len() < READ_BUF / 2 {
            inb.reserve(READ_BUF);
        }
        if rd.read_buf(&mut inb).await? == 0 {
            return Ok(());
        }
        let mut pos = 0;
        let mut count = 0;
        while inb.len() - pos >= HEADER_LEN {
            let len = u32::from_be_bytes(inb[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            if inb.len() - pos < HEADER_LEN + len {
                break;
            }
            let body = &inb[pos + HEADER_LEN..pos + HEADER_LEN + len];
            if echo_all || body.first() == Some(&TAG_MARKER) {
                if body.first() != Some(&TAG_MARKER) {
                    count += 1;
                }
                out.put_u32(len as u32);
                out.put_u8(FrameKind::Message as u8);
                out.put_slice(body);
            } else {
                count += 1;
            }
            pos += HEADER_LEN + len;
        }
        inb.advance(pos);
        received.fetch_add(count, Relaxed);
        if !out.is_empty() {
            wr.write_all(&out).await?;
            out.clear();
        }
    }
}

/// Runs the pattern once over hand-written tokio on loopback. Returns the
/// outcome and the payloads the receiver counted.
pub async fn run(
    recv: &Handle,
    shape: Shape,
    verbose: bool,
    echo_all: bool,
) -> Result<(Outcome, u64)> {
    // The receiving node's socket belongs to the receiving runtime.
    let listener = recv
        .spawn(async { TcpListener::bind("127.0.0.1:0").await })
        .await??;
    let addr = listener.local_addr()?;
    let received = Arc::new(AtomicU64::new(0));
    let rx_count = received.clone();
    let server = recv.spawn(async move {
        let (s, _) = listener.accept().await?;
        receive(s, rx_count, echo_all).await
    });
    let stream = TcpStream::connect(addr).await.context("ceiling connect")?;
    stream.set_nodelay(true)?;
    let (rd, wr) = stream.into_split();
    let mut link = CeilingLink {
        wr,
        rd,
        out: BytesMut::with_capacity(shape.burst as usize * (HEADER_LEN + 1 + shape.payload) + 64),
        inb: BytesMut::with_capacity(READ_BUF),
        payload: vec![7u8; shape.payload],
    };
    // The sender runs in its own task, as the transport's does.
    let outcome = tokio::spawn(async move {
        let r = drive(&mut link, shape, verbose).await;
        drop(link);
        r
    })
    .await??;
    server.await??;
    // Warm-up payloads are counted too.
    Ok((outcome, received.load(Relaxed)))
}
