//! A TCP proxy for fault tests on loopback: it sits between two nodes and
//! adds delay, stalls, blackholes or resets their connections on command.
//!
//! The kernel of the test machines has no `netem`, so latency comes from
//! here: each chunk read is written out `delay` after it was read, in order,
//! without limiting throughput to one chunk per delay.
//!
//! ```text
//!  client ──► [accept] ──► reader ──(chunk, read at t)──► writer: at t + delay ──► target
//!  client ◄── writer ◄──(chunk, read at t)── reader ◄── target
//! ```
//!
//! Faults ([`Mode`]) apply to existing and new connections alike:
//! - [`Mode::Blackhole`]: nothing is read or written either way, sockets stay
//!   open: a partition. New connections are accepted but the target is not
//!   dialed. On [`Proxy::heal`] everything held is forwarded, as TCP would
//!   retransmit after a partition heals.
//! - [`Mode::StallToTarget`]: the client→target direction is not read: the
//!   target behaves like a peer that stopped reading its socket (the
//!   client's writes fill the kernel buffers, then block). The other
//!   direction still flows. [`Mode::StallToClient`] is the mirror image.
//! - [`Proxy::reset_all`]: every live connection is reset (`RST` to both
//!   ends); what it held is discarded. [`Mode::Refuse`] resets new
//!   connections at once (and holds live ones): set it, then `reset_all`,
//!   and the link is cut until healed.
//!
//! Nothing here sleeps to let things settle: [`Proxy::wait_live`] and
//! [`Proxy::wait_accepted`] wait on a watch channel.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, watch},
    task::JoinHandle,
    time::Instant,
};

use crate::within;

/// Chunks read per direction and not yet written (at most 64 × 16 KiB held
/// per direction).
const HELD_CHUNKS: usize = 64;
/// Bytes per read.
const CHUNK: usize = 16 * 1024;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways, after the configured delay.
    Forward,
    /// Read and write nothing, either way; new connections are accepted and
    /// held without dialing the target.
    Blackhole,
    /// Do not read what the client sends (the target "stops reading"); the
    /// target's data still reaches the client.
    StallToTarget,
    /// Do not read what the target sends; the client's data still reaches
    /// the target.
    StallToClient,
    /// Reset new connections as soon as they are accepted; live ones carry
    /// nothing (as in a blackhole) until reset or healed. With
    /// [`Proxy::reset_all`]: the link is cut and stays down.
    Refuse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    ToTarget,
    ToClient,
}

impl Mode {
    fn moves(self, dir: Dir) -> bool {
        match self {
            Mode::Forward => true,
            Mode::Blackhole | Mode::Refuse => false,
            Mode::StallToTarget => dir == Dir::ToClient,
            Mode::StallToClient => dir == Dir::ToTarget,
        }
    }
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    mode: watch::Sender<Mode>,
    delay: Mutex<Duration>,
    /// Bumped by `reset_all`: connections of older generations reset.
    cuts: watch::Sender<u64>,
    counts: watch::Sender<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    accepted: usize,
    /// Live connections by the `cuts` generation they were accepted in.
    live: BTreeMap<u64, usize>,
}

impl Counts {
    fn live(&self) -> usize {
        self.live.values().sum()
    }
}

impl Shared {
    fn delay(&self) -> Duration {
        *self.delay.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A proxy on `127.0.0.1:0` forwarding to a target; stops when dropped
/// (its connections are reset then).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards every accepted connection to
    /// `target`, in [`Mode::Forward`] without delay.
    ///
    /// # Panics
    /// If binding fails.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(crate::loopback())
            .await
            .expect("the proxy binds 127.0.0.1:0");
        let addr = listener.local_addr().expect("bound");
        let shared = Arc::new(Shared {
            target,
            mode: watch::channel(Mode::Forward).0,
            delay: Mutex::new(Duration::ZERO),
            cuts: watch::channel(0).0,
            counts: watch::channel(Counts::default()).0,
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        s.counts.send_modify(|c| c.accepted += 1);
                        conns.spawn(serve(client, s.clone()));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Each chunk is written `delay` after it was read (order kept).
    pub fn set_delay(&self, delay: Duration) {
        *self
            .shared
            .delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Switches every connection, live and future, to `mode`.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// A partition: [`Mode::Blackhole`].
    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Back to [`Mode::Forward`]: what was held flows on.
    pub fn heal(&self) {
        self.set_mode(Mode::Forward);
    }

    /// Resets every live connection (both ends get `RST`, held data is
    /// discarded) and waits until they are gone. New ones are served as the
    /// mode says.
    ///
    /// # Panics
    /// If the connections do not end within [`crate::TIMEOUT`].
    pub async fn reset_all(&self) {
        let mut now = 0;
        self.shared.cuts.send_modify(|g| {
            *g += 1;
            now = *g;
        });
        let mut rx = self.shared.counts.subscribe();
        within("the reset connections to end", async move {
            rx.wait_for(|c| c.live.range(..now).all(|(_, n)| *n == 0))
                .await
                .map(|_| ())
                .expect("the proxy is running")
        })
        .await;
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.counts.borrow().accepted
    }

    /// Connections open now (accepted and not yet ended on both sides).
    pub fn live(&self) -> usize {
        self.shared.counts.borrow().live()
    }

    /// Waits (at most [`crate::TIMEOUT`]) until the number of live
    /// connections satisfies `pred`.
    ///
    /// # Panics
    /// On timeout, naming `what`.
    #[track_caller]
    pub fn wait_live(
        &self,
        what: &str,
        pred: impl FnMut(usize) -> bool + Send,
    ) -> impl Future<Output = usize> + Send {
        let mut rx = self.shared.counts.subscribe();
        let mut pred = pred;
        within(what, async move {
            rx.wait_for(|c| pred(c.live()))
                .await
                .map(|c| c.live())
                .expect("the proxy is running")
        })
    }

    /// Waits (at most [`crate::TIMEOUT`]) until at least `n` connections
    /// were accepted.
    ///
    /// # Panics
    /// On timeout.
    #[track_caller]
    pub fn wait_accepted(&self, n: usize) -> impl Future<Output = ()> + Send {
        let mut rx = self.shared.counts.subscribe();
        within("connections accepted by the proxy", async move {
            rx.wait_for(|c| c.accepted >= n)
                .await
                .map(|_| ())
                .expect("the proxy is running")
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every
        // connection task; their sockets close.
        self.accept.abort();
    }
}

/// Waits until `mode` lets `dir` move; false if the proxy is gone.
async fn wait_moves(mode: &mut watch::Receiver<Mode>, dir: Dir) -> bool {
    mode.wait_for(|m| m.moves(dir)).await.is_ok()
}

/// One proxied connection, until both directions end or it is reset.
async fn serve(mut client: TcpStream, s: Arc<Shared>) {
    let mut cuts = s.cuts.subscribe();
    let generation = *cuts.borrow_and_update();
    let mut mode = s.mode.subscribe();
    if *mode.borrow() == Mode::Refuse {
        let _ = client.set_zero_linger();
        return;
    }
    s.counts
        .send_modify(|c| *c.live.entry(generation).or_default() += 1);
    let cut = async {
        let _ = cuts.wait_for(|g| *g != generation).await;
    };
    let mut server = None;
    let run = async {
        // A blackholed network does not reach the target either.
        if !wait_moves(&mut mode, Dir::ToTarget).await {
            return;
        }
        let Ok(connected) = TcpStream::connect(s.target).await else {
            return;
        };
        let server: &mut TcpStream = server.insert(connected);
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        tokio::join!(
            pump(cr, sw, Dir::ToTarget, &s),
            pump(sr, cw, Dir::ToClient, &s)
        );
    };
    let was_cut = tokio::select! {
        () = run => false,
        () = cut => true,
    };
    if was_cut {
        // RST rather than FIN, to both ends: a reset, not a close.
        let _ = client.set_zero_linger();
        if let Some(server) = &server {
            let _ = server.set_zero_linger();
        }
    }
    s.counts.send_modify(|c| {
        if let Some(n) = c.live.get_mut(&generation) {
            *n -= 1;
        }
    });
}

/// Copies `r` to `w`: a reader that stamps each chunk and a writer that
/// writes it at stamp + delay, both pausing while the mode holds `dir`.
/// Ends when `r` ends (then shuts `w` down) or `w` fails.
async fn pump(
    mut r: tokio::net::tcp::ReadHalf<'_>,
    mut w: tokio::net::tcp::WriteHalf<'_>,
    dir: Dir,
    s: &Shared,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(HELD_CHUNKS);
    let mut read_mode = s.mode.subscribe();
    let mut write_mode = s.mode.subscribe();
    let reading = async move {
        loop {
            if !wait_moves(&mut read_mode, dir).await {
                return;
            }
            let mut buf = vec![0u8; CHUNK];
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.send((Instant::now(), buf)).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writing = async move {
        while let Some((at, buf)) = rx.recv().await {
            tokio::time::sleep_until(at + s.delay()).await;
            if !wait_moves(&mut write_mode, dir).await || w.write_all(&buf).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    tokio::join!(reading, writing);
}
