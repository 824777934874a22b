//! The hand-written tokio ceiling: the same pattern and the same framing
//! bytes, with no transport and no actors. The sender encodes a whole burst
//! into one reused buffer and writes it with one `write_all`; the receiver
//! reads into a large buffer and parses frames in place. `run_rate` is the
//! ping-pong ceiling of `--rate`: every message echoed, on the same
//! schedule and the same generator as the actors' run.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
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

use crate::{
    pacer::{self, Lateness, Pacer, RateRun, Timer},
    pattern::{Link, MARKER_LEN, Marker, Outcome, Shape, TAG_MARKER, TAG_PAYLOAD, drive, now_ns},
    report::Report,
};

/// Read buffer of both ends.
const READ_BUF: usize = 256 * 1024;

struct CeilingLink {
    wr: OwnedWriteHalf,
    rd: OwnedReadHalf,
    out: BytesMut,
    inb: BytesMut,
    payload: Vec<u8>,
    /// With `--echo-all`: each payload carries its send time, and each
    /// echo's round trip is recorded here, as the actors' sender does
    /// (`ToReceiver::Timed`, `ToSender::TimedEcho`), so both sides do the
    /// same work per message.
    per_message: Option<Report>,
}

/// A payload stamped with its send time (`--echo-all`), as the actors'
/// `Timed` messages are.
fn put_timed_payload(out: &mut BytesMut, payload: &[u8]) {
    out.put_u32(1 + 8 + payload.len() as u32);
    out.put_u8(FrameKind::Message as u8);
    out.put_u8(TAG_PAYLOAD);
    out.put_u64(now_ns());
    out.put_slice(payload);
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
            if self.per_message.is_some() {
                put_timed_payload(&mut self.out, &self.payload);
            } else {
                put_payload(&mut self.out, &self.payload);
            }
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
                // In echo-all mode payload echoes come first: their round
                // trips are recorded.
                let marker = (body.first() == Some(&TAG_MARKER)).then(|| Marker::decode(body));
                if marker.is_none()
                    && let Some(r) = &mut self.per_message
                    && let Some(sent) = body.get(1..9)
                {
                    let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
                    r.record_rtt(Duration::from_nanos(now_ns().saturating_sub(sent)));
                }
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
        per_message: echo_all.then(|| Report::new(shape)),
    };
    // The sender runs in its own task, as the transport's does.
    let outcome = tokio::spawn(async move {
        let r = drive(&mut link, shape, verbose).await;
        r.map(|mut o| {
            o.per_message = link.per_message.take();
            o
        })
    })
    .await??;
    server.await??;
    // Warm-up payloads are counted too.
    Ok((outcome, received.load(Relaxed)))
}

/// Body of a `--rate` ceiling message: the payload tag, the scheduled and
/// the sent time (ns since the epoch), then the payload bytes. The
/// receiver echoes it whole.
fn put_timed(out: &mut BytesMut, scheduled: u64, sent: u64, payload: &[u8]) {
    out.put_u32(1 + 16 + payload.len() as u32);
    out.put_u8(FrameKind::Message as u8);
    out.put_u8(TAG_PAYLOAD);
    out.put_u64(scheduled);
    out.put_u64(sent);
    out.put_slice(payload);
}

/// Reads `expected` echoed timed messages and records each one's latency
/// from its scheduled and from its sent time.
async fn collect_echoes(mut rd: OwnedReadHalf, shape: Shape) -> Result<(Report, Report)> {
    let mut hist = Report::new(shape);
    let mut from_sent = Report::new(shape);
    let mut inb = BytesMut::with_capacity(READ_BUF);
    let mut seen = 0;
    while seen < shape.messages {
        if inb.capacity() - inb.len() < READ_BUF / 2 {
            inb.reserve(READ_BUF);
        }
        if rd.read_buf(&mut inb).await? == 0 {
            bail!(
                "ceiling receiver closed after {seen} of {} echoes",
                shape.messages
            );
        }
        let now = now_ns();
        let mut pos = 0;
        while inb.len() - pos >= HEADER_LEN {
            let len = u32::from_be_bytes(inb[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            if inb.len() - pos < HEADER_LEN + len {
                break;
            }
            let body = &inb[pos + HEADER_LEN..pos + HEADER_LEN + len];
            if len < 17 || body[0] != TAG_PAYLOAD {
                bail!("ceiling echo of {len} bytes is not a timed message");
            }
            let scheduled = u64::from_be_bytes(body[1..9].try_into().expect("8 bytes"));
            let sent = u64::from_be_bytes(body[9..17].try_into().expect("8 bytes"));
            hist.record_rtt(Duration::from_nanos(now.saturating_sub(scheduled)));
            from_sent.record_rtt(Duration::from_nanos(now.saturating_sub(sent)));
            seen += 1;
            pos += HEADER_LEN + len;
        }
        inb.advance(pos);
    }
    Ok((hist, from_sent))
}

/// The `--rate` ceiling: a hand-written ping-pong on the same schedule as
/// the actors' run. The generator writes every message that is due with
/// one `write_all` (several only when it is behind); the receiver echoes
/// each message whole, one write per read; a reader task on the sending
/// runtime records each echo's latency from its scheduled time. Same
/// layout as the actors: the generator and the reader on the sending
/// node's runtime, the receiver on `recv`.
pub async fn run_rate(
    recv: &Handle,
    shape: Shape,
    rate: f64,
    spin: Duration,
    stall: Duration,
) -> Result<RateRun> {
    let listener = recv
        .spawn(async { TcpListener::bind("127.0.0.1:0").await })
        .await??;
    let addr = listener.local_addr()?;
    let server = recv.spawn(async move {
        let (s, _) = listener.accept().await?;
        receive(s, Arc::new(AtomicU64::new(0)), true).await
    });
    let stream = TcpStream::connect(addr).await.context("ceiling connect")?;
    stream.set_nodelay(true)?;
    let (rd, mut wr) = stream.into_split();
    let echoes = tokio::spawn(collect_echoes(rd, shape));
    let payload = vec![7u8; shape.payload];
    let mut pacer = Pacer::new(now_ns() + 1_000_000, rate, shape.messages, spin);
    let started = std::time::Instant::now();
    let generator = tokio::spawn(async move {
        let mut lateness = Lateness::new();
        let mut out = BytesMut::with_capacity(4096);
        let timer = Timer::new().context("the generator's timer")?;
        while let Some(due) = pacer::next(&mut pacer, &timer).await? {
            out.clear();
            let now = now_ns();
            for i in due {
                let scheduled = pacer.due(i);
                lateness.record(scheduled, now);
                put_timed(&mut out, scheduled, now, &payload);
            }
            wr.write_all(&out).await?;
        }
        // `wr` stays open until the echoes are in; dropping it ends the
        // receiver.
        anyhow::Ok((lateness, started.elapsed(), wr))
    });
    let (lateness, sent_for, wr) = generator.await.context("the generator panicked")??;
    let budget = stall + Duration::from_secs_f64(shape.messages as f64 / rate) * 2;
    let (latency, from_sent) = tokio::time::timeout(budget, echoes)
        .await
        .map_err(|_| anyhow!("not every ceiling echo arrived within {budget:?}"))?
        .context("the ceiling reader panicked")??;
    let elapsed = started.elapsed();
    drop(wr);
    server.await??;
    Ok(RateRun {
        latency,
        from_sent,
        lateness,
        achieved: shape.messages as f64 / sent_for.as_secs_f64(),
        elapsed,
    })
}
