//! Test harness for the integration tests: real endpoints on `127.0.0.1:0`,
//! bounded waits, and a hand-written handshake for tests that play a
//! misbehaving peer with a raw socket.
//!
//! # Layout
//! - [`TIMEOUT`], [`within`], [`eventually`]: every wait is bounded and
//!   fails with a message that says what was awaited.
//! - [`TEST_SECRET`], [`secured`]: every node a test starts proves this
//!   shared secret (so no test reads or creates the real
//!   `~/.actors.cookie`), unless the test configures authentication itself.
//! - [`endpoint`], [`pair`], [`connect`]: endpoints and started connections.
//! - [`raw_connect`], [`client_preface`], [`raw_handshake`]: a raw
//!   `TcpStream` peer that speaks bytes by hand (the authenticated
//!   handshake, with [`TEST_SECRET`]).
//! - [`actor_system`], [`actor_system_with`], [`actor_path`]: actor systems
//!   on loopback and the paths of their actors.
//! - [`raw_actor_peer`], [`envelope`], [`frame_bytes`], [`wait_closed`]: a
//!   hand-written remote node that speaks envelopes to an actor system.
//! - [`proxy`]: a TCP proxy that delays, stalls, blackholes or resets the
//!   connections between two nodes, for fault tests on loopback.

pub mod proxy;

use std::{future::Future, net::SocketAddr, time::Duration};

use bytes::BytesMut;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use transport::{
    Connection, Endpoint, Established, Inbound, SharedSecret, TransportConfig,
    auth::{NONCE_LEN, Role},
    handshake::{Handshake, Hello},
};

/// The shared secret test nodes and raw test clients prove (see
/// [`secured`]).
pub const TEST_SECRET: &[u8] = b"integration-tests-shared-secret-0123456789";

/// [`TEST_SECRET`] as a [`SharedSecret`].
pub fn test_secret() -> SharedSecret {
    SharedSecret::new(TEST_SECRET)
}

/// `config` with [`TEST_SECRET`] as its shared secret, unless it already
/// says how to authenticate (an explicit secret, a cookie file, or the
/// insecure opt-in): test nodes never fall back to the user's real cookie
/// file, and raw test clients know their secret.
pub fn secured(mut config: TransportConfig) -> TransportConfig {
    if config.shared_secret().is_none()
        && config.cookie_file().is_none()
        && !config.insecure_no_authentication()
    {
        config
            .set_shared_secret(Some(test_secret()))
            .expect("the test secret is long enough");
    }
    config
}

/// A fresh random nonce for a raw client's handshake.
fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    for chunk in n.chunks_exact_mut(8) {
        chunk.copy_from_slice(&transport::random_uid().to_le_bytes());
    }
    n
}

/// A raw client's side of the authenticated handshake as `hello`, proving
/// [`TEST_SECRET`].
pub fn raw_client_handshake(hello: Hello) -> Handshake {
    raw_side_handshake(hello, Role::Dialer)
}

/// As [`raw_client_handshake`], for either end of the connection.
pub fn raw_side_handshake(hello: Hello, role: Role) -> Handshake {
    Handshake::with_secret(
        hello,
        std::time::Instant::now(),
        TIMEOUT,
        role,
        test_secret(),
        nonce(),
    )
}

/// The longest any single awaited event may take before a test fails. Far
/// above what any event needs on a loaded CI machine, so a failure means a
/// hang, not slowness.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Inbound channel capacity (batches) used by [`connect`].
pub const INBOUND_BATCHES: usize = 64;

/// Awaits `fut` for at most [`TIMEOUT`].
///
/// # Panics
/// If `fut` does not complete in time, naming `what` was awaited.
#[track_caller]
pub fn within<F: Future>(what: &str, fut: F) -> impl Future<Output = F::Output> {
    let caller = std::panic::Location::caller();
    let what = what.to_owned();
    async move {
        match tokio::time::timeout(TIMEOUT, fut).await {
            Ok(v) => v,
            Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what} (at {caller})"),
        }
    }
}

/// Waits until `cond` holds, re-checking after yielding to the scheduler
/// (never sleeping), for at most [`TIMEOUT`]. For state that is published
/// by another task without an event to await, such as counters.
///
/// # Panics
/// If `cond` does not hold in time, naming `what` was awaited.
#[track_caller]
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) -> impl Future<Output = ()> {
    within(what, async move {
        while !cond() {
            tokio::task::yield_now().await;
        }
    })
}

/// An endpoint bound to `127.0.0.1:0` with `config`, [`secured`].
///
/// # Panics
/// If binding fails.
pub async fn endpoint(config: TransportConfig) -> Endpoint {
    Endpoint::bind(loopback(), secured(config))
        .await
        .expect("binding 127.0.0.1:0 succeeds")
}

/// Two endpoints with the default configuration.
pub async fn pair() -> (Endpoint, Endpoint) {
    (
        endpoint(TransportConfig::default()).await,
        endpoint(TransportConfig::default()).await,
    )
}

/// `127.0.0.1:0`.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Dials `server` from `client` and accepts on `server`, returning both
/// handshakes completed but not started.
///
/// # Panics
/// If the connect or the accept fails or does not finish within [`TIMEOUT`].
pub async fn establish(
    client: &Endpoint,
    server: &Endpoint,
) -> (Established<TcpStream>, Established<TcpStream>) {
    let (dialed, accepted) = within("connect and accept", async {
        tokio::join!(client.connect(server.local_addr()), server.accept())
    })
    .await;
    let dialed = dialed.expect("connect succeeds");
    let accepted = accepted
        .expect("endpoint is open")
        .expect("inbound handshake succeeds");
    assert_eq!(dialed.peer().uid, server.uid());
    assert_eq!(accepted.peer().uid, client.uid());
    (dialed, accepted)
}

/// A started connection from `client` to `server`, with inbound channels:
/// `(client side, client inbound, server side, server inbound)`.
pub async fn connect(
    client: &Endpoint,
    server: &Endpoint,
) -> (Connection, Inbound, Connection, Inbound) {
    let (dialed, accepted) = establish(client, server).await;
    let (c, c_in) = dialed.start_channel(INBOUND_BATCHES);
    let (s, s_in) = accepted.start_channel(INBOUND_BATCHES);
    (c, c_in, s, s_in)
}

/// Sends one frame each way on a fresh connection between `client` and
/// `server` and checks it arrives: proves both endpoints still work.
pub async fn assert_round_trip(client: &Endpoint, server: &Endpoint) {
    let (c, mut c_in, s, mut s_in) = connect(client, server).await;
    c.send(transport::Frame::message(&b"ping"[..]))
        .await
        .expect("send ping");
    let got = within("ping", s_in.recv()).await.expect("ping arrives");
    assert_eq!(&got.body[..], b"ping");
    s.send(transport::Frame::message(&b"pong"[..]))
        .await
        .expect("send pong");
    let got = within("pong", c_in.recv()).await.expect("pong arrives");
    assert_eq!(&got.body[..], b"pong");
}

/// A raw TCP connection to `addr`, for speaking bytes by hand.
///
/// # Panics
/// If the connect fails.
pub async fn raw_connect(addr: SocketAddr) -> TcpStream {
    within("raw connect", TcpStream::connect(addr))
        .await
        .expect("raw connect succeeds")
}

/// The bytes a well-behaved node sends first: preface (with the
/// authentication flag), hello frame and challenge, built by the
/// transport's own sans-IO handshake.
pub fn client_preface(uid: u64, addr: &str) -> BytesMut {
    let hello = Hello {
        uid,
        addr: addr.to_owned(),
    };
    let mut out = BytesMut::new();
    assert!(raw_client_handshake(hello).poll_transmit(&mut out));
    out
}

/// Runs `hs` to completion on a raw stream: sends what it has to send
/// (first flight, then the proof), reads the peer's until its hello is
/// proven. Returns the peer's hello and any bytes sent after the
/// handshake.
///
/// # Panics
/// If the peer's handshake is invalid or does not arrive in time.
pub async fn run_raw_handshake(stream: &mut TcpStream, mut hs: Handshake) -> (Hello, BytesMut) {
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    within("the peer's handshake", async {
        loop {
            let step = hs.handle_input(&mut buf);
            out.clear();
            if hs.poll_transmit(&mut out) {
                stream.write_all(&out).await.expect("write handshake");
            }
            if let Some(peer) = step.expect("valid peer handshake") {
                return (peer, buf);
            }
            let n = stream.read_buf(&mut buf).await.expect("read handshake");
            assert_ne!(n, 0, "the peer closed during the handshake");
        }
    })
    .await
}

/// Completes a handshake by hand on a raw stream (proving
/// [`TEST_SECRET`]): sends our preface, hello and proof, reads the
/// endpoint's and checks it is `expected_uid`'s. Returns any bytes the
/// endpoint sent after its handshake.
///
/// # Panics
/// If the endpoint's handshake is invalid or does not arrive in time.
pub async fn raw_handshake(stream: &mut TcpStream, expected_uid: u64) -> BytesMut {
    raw_handshake_as(stream, expected_uid, Role::Dialer).await
}

/// As [`raw_handshake`], as the `role` end of the connection (a raw
/// socket that accepted a node's connection is the listener).
pub async fn raw_handshake_as(stream: &mut TcpStream, expected_uid: u64, role: Role) -> BytesMut {
    let hs = raw_side_handshake(
        Hello {
            uid: 0x5eed,
            addr: "raw-peer:1".into(),
        },
        role,
    );
    let (peer, buf) = run_raw_handshake(stream, hs).await;
    assert_eq!(peer.uid, expected_uid);
    buf
}

/// `config` with its transport config [`secured`].
pub fn secured_system(mut config: actors::SystemConfig) -> actors::SystemConfig {
    let transport = secured(config.transport_mut().clone());
    *config.transport_mut() = transport;
    config
}

/// Cluster settings for tests on loopback: 200 ms probes (100 ms round
/// trips), 50 ms announces, down members kept 30 s, and `stable_after`
/// as given.
///
/// # Panics
/// Never: the values are valid.
pub fn fast_cluster(stable_after: std::time::Duration) -> actors::cluster::ClusterConfig {
    use std::time::Duration;
    let mut config = actors::cluster::ClusterConfig::new();
    config
        .set_probe(Duration::from_millis(200), Duration::from_millis(100))
        .expect("valid probe periods")
        .set_stable_after(stable_after)
        .set_remove_down_after(Duration::from_secs(30))
        .set_announce_interval(Duration::from_millis(50))
        .expect("a valid interval");
    config
}

/// A copy of `config` that joins through `seed` (`host:port`): the
/// membership settings of every node of a test cluster but its first.
///
/// # Panics
/// If `seed` is not `host:port`.
pub fn seeded(
    config: &actors::cluster::ClusterConfig,
    seed: impl Into<String>,
) -> actors::cluster::ClusterConfig {
    let mut config = config.clone();
    config.set_seeds([seed.into()]).expect("a host:port seed");
    config
}

/// An actor system with remoting on `127.0.0.1:0`.
///
/// # Panics
/// If the system cannot bind.
pub async fn actor_system(name: &str) -> actors::ActorSystem {
    actor_system_with(name, actors::SystemConfig::default()).await
}

/// An actor system with remoting on `127.0.0.1:0` and `config`, its
/// transport config [`secured`].
///
/// # Panics
/// If the system cannot bind.
pub async fn actor_system_with(name: &str, config: actors::SystemConfig) -> actors::ActorSystem {
    actors::ActorSystem::with_config(name, Some(loopback()), secured_system(config))
        .await
        .expect("an actor system binds 127.0.0.1:0")
}

/// The path of the actor named `name` on `system`: `tcp://node/user/name`.
pub fn actor_path(system: &actors::ActorSystem, name: &str) -> String {
    format!("tcp://{}/user/{name}", system.node())
}

/// The node address a [`raw_actor_peer`] advertises.
pub const RAW_NODE: &str = "raw@127.0.0.1:9";

/// A raw TCP connection to `system` that has completed the handshake as the
/// node [`RAW_NODE`]; the system now treats it as a link from that node.
/// Returns the stream and any bytes the system sent after its hello.
///
/// # Panics
/// If the handshake fails or does not finish in time.
pub async fn raw_actor_peer(system: &actors::ActorSystem) -> (TcpStream, BytesMut) {
    let addr = system.local_addr().expect("a system with remoting");
    let mut stream = raw_connect(addr).await;
    let hs = raw_client_handshake(Hello {
        uid: 0x0bad_5eed,
        addr: RAW_NODE.into(),
    });
    let (_, buf) = run_raw_handshake(&mut stream, hs).await;
    (stream, buf)
}

/// An envelope (the body of a `Message` frame): recipient `id`, defined
/// as `path` if given, then the manifest id and the payload. Written by
/// the library's own envelope writer ([`actors::wire`]), so the harness
/// keeps no copy of the format.
pub fn envelope(id: u32, path: Option<&str>, manifest: u32, payload: &[u8]) -> Vec<u8> {
    let to = match path {
        Some(p) => actors::wire::To::Define(id, p),
        None => actors::wire::To::Id(id),
    };
    actors::wire::envelope(to, manifest, false, payload)
}

/// `body` framed as one transport frame of `kind`.
pub fn frame_bytes(kind: transport::FrameKind, body: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    transport::frame::encode_header(kind, body.len(), &mut b);
    b.extend_from_slice(body);
    b.to_vec()
}

/// Reads (and discards) from `stream` until the other side closes it, by
/// end of stream or reset.
///
/// # Panics
/// If the stream is still open after [`TIMEOUT`].
#[track_caller]
pub fn wait_closed(stream: &mut TcpStream) -> impl Future<Output = ()> + '_ {
    within("the node to close the connection", async move {
        let mut b = vec![0u8; 64 * 1024];
        loop {
            match stream.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
}

/// Starts the `peer` binary (`tests/src/bin/peer.rs`; pass
/// `env!("CARGO_BIN_EXE_peer")`) as node `name` bound to `bind`, with
/// [`TEST_SECRET`] as its `ACTORS_COOKIE` (set on the child only), and
/// waits for its `ready <node>` line. Returns the child and the node it
/// advertises (`name@host:port`).
pub async fn spawn_peer(bin: &str, name: &str, bind: &str) -> (std::process::Child, String) {
    spawn_peer_args(bin, name, bind, &[]).await
}

/// As [`spawn_peer`], with more arguments for the peer (its flags, e.g.
/// `["--evolve", node]`).
pub async fn spawn_peer_args(
    bin: &str,
    name: &str,
    bind: &str,
    args: &[&str],
) -> (std::process::Child, String) {
    use std::{
        io::{BufRead, BufReader},
        process::{Command, Stdio},
    };
    let mut child = Command::new(bin)
        .args([name, bind])
        .args(args)
        .env(
            transport::COOKIE_ENV,
            std::str::from_utf8(TEST_SECRET).expect("the test secret is ascii"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the peer binary starts");
    let stdout = child.stdout.take().expect("piped");
    let line = within(
        "the peer's ready line",
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .expect("read the peer's stdout");
            line
        }),
    )
    .await
    .expect("the reader does not panic");
    let node = line
        .trim()
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("unexpected peer output {line:?}"))
        .to_owned();
    (child, node)
}

/// The messages of the `peer` binary's counter actor, shared by the binary
/// and the tests that talk to it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum PeerCount {
    /// Adds to the total.
    Add(u64),
    /// Replies with the total.
    Get(actors::ActorRef<u64>),
    /// Bulk for memory tests: ignored.
    Blob(actors::SharedBytes),
    /// Keeps the reply ref and never answers: an ask that stays in flight
    /// for as long as the peer lives.
    Hold(actors::ActorRef<u64>),
}

impl actors::RemoteMessage for PeerCount {
    const MANIFEST: &'static str = "peer.Count";
}

/// Starts the `echo_node` binary (`tests/src/bin/echo_node.rs`; pass
/// `env!("CARGO_BIN_EXE_echo_node")`) with `args`, and waits for its
/// `ready ADDR` line: a transport endpoint in its own process that echoes
/// `Message` frames, proving [`TEST_SECRET`]. Returns the child (kill it
/// when done; it also ends when its stdin closes) and its address.
pub async fn spawn_echo_node(bin: &str, args: &[&str]) -> (std::process::Child, SocketAddr) {
    use std::{
        io::{BufRead, BufReader},
        process::{Command, Stdio},
    };
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the echo_node binary starts");
    let stdout = child.stdout.take().expect("piped");
    let line = within(
        "the echo node's ready line",
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .expect("read the echo node's stdout");
            line
        }),
    )
    .await
    .expect("the reader does not panic");
    let addr = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected echo_node output {line:?}"));
    (child, addr)
}

/// The resident set of process `pid` in bytes, from `/proc/PID/status`
/// (Linux); 0 if it cannot be read.
pub fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A raw TCP connection to `addr` from the local address `from` (any
/// `127.x.y.z` works on Linux loopback, so one test can play several
/// hosts), with `SO_RCVBUF` set to `recv_buffer` if given (a peer that
/// reads little).
///
/// # Panics
/// If the connect fails.
pub async fn raw_connect_from(
    from: std::net::IpAddr,
    addr: SocketAddr,
    recv_buffer: Option<u32>,
) -> TcpStream {
    let socket = match from {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .expect("a socket");
    if let Some(n) = recv_buffer {
        socket.set_recv_buffer_size(n).expect("SO_RCVBUF");
    }
    socket
        .bind(SocketAddr::new(from, 0))
        .expect("bind the source address");
    within("raw connect", socket.connect(addr))
        .await
        .expect("raw connect succeeds")
}

/// A connection handler that sends every `Message` frame back on the
/// connection it came on (dropped if the queue is full).
#[derive(Debug, Default)]
pub struct Echo(Option<transport::Sender>);

impl transport::Handler for Echo {
    fn on_start(&mut self, sender: &transport::Sender) {
        self.0 = Some(sender.clone());
    }

    fn on_frame(&mut self, frame: transport::Frame) {
        if frame.kind == transport::FrameKind::Message
            && let Some(s) = &self.0
        {
            let _ = s.try_send(frame);
        }
    }
}

/// Dials the echo node at `addr` from `client`, sends `body` and waits
/// for its echo: proves a well-behaved peer is served. Closes the
/// connection after.
///
/// # Panics
/// If the connect fails or the echo does not come back in time.
pub async fn echo_round_trip(client: &Endpoint, addr: SocketAddr, body: &[u8]) {
    let est = within("connect to the echo node", client.connect(addr))
        .await
        .unwrap_or_else(|e| panic!("a well-behaved peer connects: {e}"));
    let (conn, mut inbound) = est.start_channel(INBOUND_BATCHES);
    conn.send(transport::Frame::message(bytes::Bytes::copy_from_slice(
        body,
    )))
    .await
    .expect("send");
    let echo = within("the echo", inbound.recv())
        .await
        .expect("the echo arrives");
    assert_eq!(&echo.body[..], body);
    conn.close("done").await;
}

/// Log lines written while a [`LogCapture`] is installed on this thread
/// (a `#[tokio::test]` runs every task on its one thread).
#[allow(missing_debug_implementations)]
pub struct LogCapture {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct CaptureWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Captures events at `level` and above from this thread, formatted as
    /// an application's `tracing-subscriber` would print them (no colour).
    pub fn install(level: tracing::Level) -> Self {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = CaptureWriter(buf.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        Self {
            buf,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().expect("log buffer")).into_owned()
    }

    /// Lines captured so far that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }
}

/// A node in a child process (the `peer` binary, see [`spawn_peer`]),
/// killed when dropped.
#[derive(Debug)]
pub struct PeerProcess {
    child: std::process::Child,
    /// The node it advertises (`name@host:port`).
    pub node: String,
}

impl PeerProcess {
    /// Starts `bin` (pass `env!("CARGO_BIN_EXE_peer")`) as node `name`
    /// bound to `bind`.
    pub async fn spawn(bin: &str, name: &str, bind: &str) -> Self {
        Self::spawn_args(bin, name, bind, &[]).await
    }

    /// As [`spawn`](Self::spawn), with flags for the peer.
    pub async fn spawn_args(bin: &str, name: &str, bind: &str, args: &[&str]) -> Self {
        let (child, node) = spawn_peer_args(bin, name, bind, args).await;
        Self { child, node }
    }

    /// The path of its counter actor.
    pub fn counter_path(&self) -> String {
        format!("tcp://{}/user/counter", self.node)
    }

    /// SIGSTOP: the process stops reading; its sockets stay open.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn stop(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-STOP", &self.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "SIGSTOP delivered");
    }

    /// SIGKILL: no Close frame, no shutdown notice; the kernel closes its
    /// sockets and its port refuses connections from then on.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `Connected` and `Disconnected` events received so far.
pub fn link_events(
    events: &mut tokio::sync::broadcast::Receiver<actors::RemoteEvent>,
) -> (usize, usize) {
    let (mut up, mut down) = (0, 0);
    while let Ok(e) = events.try_recv() {
        match e {
            actors::RemoteEvent::Connected { .. } => up += 1,
            actors::RemoteEvent::Disconnected { .. } => down += 1,
            _ => {}
        }
    }
    (up, down)
}

/// The next event on `events` that `pick` accepts, within [`TIMEOUT`].
///
/// # Panics
/// If none comes in time, or the stream lags or closes.
pub async fn next_event(
    events: &mut tokio::sync::broadcast::Receiver<actors::RemoteEvent>,
    what: &str,
    mut pick: impl FnMut(&actors::RemoteEvent) -> bool,
) -> actors::RemoteEvent {
    within(what, async {
        loop {
            match events.recv().await {
                Ok(e) if pick(&e) => return e,
                Ok(_) => {}
                Err(e) => panic!("event stream: {e}"),
            }
        }
    })
    .await
}

/// A [`transport::Admission`] that takes every pending handshake and
/// counts the bytes its charges hold: what the tests read to see what an
/// endpoint charged, and that it gave it all back.
#[derive(Debug, Default)]
pub struct CountingAdmission(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

struct GiveBack(std::sync::Arc<std::sync::atomic::AtomicUsize>, usize);

impl Drop for GiveBack {
    fn drop(&mut self) {
        self.0
            .fetch_sub(self.1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl transport::Admission for CountingAdmission {
    fn charge_pending(
        &self,
        _: std::net::IpAddr,
        bytes: usize,
    ) -> Option<transport::PendingCharge> {
        self.0.fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
        Some(transport::PendingCharge::new(GiveBack(
            self.0.clone(),
            bytes,
        )))
    }
}
