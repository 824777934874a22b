//! A node's presence on the network: a listener, an identity, and a pool of
//! buffers shared by its connections.

use std::{
    fmt, io,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::BytesMut;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpSocket, TcpStream},
    sync::{Mutex, mpsc},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    auth::{ChannelBinding, NONCE_LEN, Role, SharedSecret},
    config::TransportConfig,
    conn::Established,
    error::{AcceptError, ConfigError, HandshakeError, TlsError, TransportError},
    frame::{self, FrameKind},
    handshake::{Handshake, Hello, MAX_ADDR_LEN},
    log_limit::LogLimit,
    peer_text::PeerText,
    pool::BufferPool,
    security::{Plain, Security},
    shared::{PeerInfo, PeerVerified},
    slots::{self, Admitted, Slots},
};

/// Log lines a peer can trigger from the accept loop, each sampled (see
/// `log_limit`): refused connections, evictions, failed handshakes, and
/// failed accepts (a connection flood causes EMFILE).
static REFUSED: LogLimit = LogLimit::new();
static EVICTED: LogLimit = LogLimit::new();
static HANDSHAKE_FAILED: LogLimit = LogLimit::new();
static ACCEPT_FAILED: LogLimit = LogLimit::new();

/// Established inbound connections waiting for [`Endpoint::accept`]. When
/// the application does not accept, handshakes wait here and the listener
/// slows down instead of buffering without bound.
pub const ACCEPT_QUEUE: usize = 64;

/// Pooled buffers a buffer may grow to and still be kept: past this a
/// buffer is freed rather than pooled.
const MAX_RETAINED_BUFFER: usize = 8 * 1024 * 1024;

/// A bound node: accepts and dials connections under one identity.
///
/// `S` is what secures each TCP stream before the handshake: [`Plain`]
/// (the default: connections run on `TcpStream`) or [`Tls`](crate::Tls)
/// (connections run on rustls streams; see
/// [`bind_tls`](Endpoint::bind_tls)). Everything else is the same code.
///
/// ```no_run
/// # async fn f() -> Result<(), transport::TransportError> {
/// use transport::{Endpoint, Frame, TransportConfig};
/// let a = Endpoint::bind("127.0.0.1:0".parse().unwrap(), TransportConfig::default()).await?;
/// let b = Endpoint::bind("127.0.0.1:0".parse().unwrap(), TransportConfig::default()).await?;
/// let (to_b, _) = a.connect(b.local_addr()).await?.start_channel(16);
/// let (_, mut from_a) = b.accept().await.unwrap().unwrap().start_channel(16);
/// to_b.send(Frame::message(&b"hi"[..])).await.unwrap();
/// assert_eq!(&from_a.recv().await.unwrap().body[..], b"hi");
/// # Ok(()) }
/// ```
pub struct Endpoint<S: Security = Plain> {
    inner: Arc<Inner<S>>,
    incoming: Mutex<mpsc::Receiver<Accepted<S>>>,
}

/// What the accept loop hands to [`Endpoint::accept`].
type Accepted<S> = Result<Established<<S as Security>::Accepted>, AcceptError>;

struct Inner<S> {
    security: S,
    config: Arc<TransportConfig>,
    /// The shared secret in force, resolved once at bind; `None` only with
    /// the insecure opt-in.
    secret: Option<SharedSecret>,
    hello: Hello,
    local_addr: SocketAddr,
    pool: BufferPool,
    /// Inbound connection slots: global, per address, idle eviction.
    slots: Arc<Slots>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl<S: Security> fmt::Debug for Endpoint<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("local_addr", &self.inner.local_addr)
            .field("advertised", &self.inner.hello.addr)
            .field("uid", &self.inner.hello.uid)
            .finish()
    }
}

/// A fresh random incarnation id.
pub fn random_uid() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: fall back to std's randomly keyed hasher, which
        // still differs per process and per call.
        use std::hash::{BuildHasher, RandomState};
        return RandomState::new().hash_one(Instant::now());
    }
    u64::from_le_bytes(b)
}

impl Endpoint<Plain> {
    /// Binds a listener on `addr` (port 0 picks a free port) and advertises
    /// the bound address.
    ///
    /// # Errors
    /// Invalid config, or the address cannot be bound.
    pub async fn bind(addr: SocketAddr, config: TransportConfig) -> Result<Self, TransportError> {
        Self::bind_advertised(addr, None, config).await
    }

    /// As [`bind`](Self::bind), advertising `advertised` (`host:port`, what
    /// peers should dial, e.g. behind NAT) instead of the bound address.
    ///
    /// # Errors
    /// Invalid config, an advertised address over 255 bytes, or the address
    /// cannot be bound.
    pub async fn bind_advertised(
        addr: SocketAddr,
        advertised: Option<String>,
        config: TransportConfig,
    ) -> Result<Self, TransportError> {
        Self::bind_with(addr, config, |local| {
            advertised.unwrap_or_else(|| local.to_string())
        })
        .await
    }

    /// As [`bind`](Self::bind), advertising what `advertise` makes of the
    /// bound address (useful with port 0, e.g. `|a| format!("sys@{a}")`).
    ///
    /// # Errors
    /// As [`bind_advertised`](Self::bind_advertised).
    pub async fn bind_with(
        addr: SocketAddr,
        config: TransportConfig,
        advertise: impl FnOnce(SocketAddr) -> String,
    ) -> Result<Self, TransportError> {
        Self::bind_secure(addr, config, Plain, advertise).await
    }
}

impl<S: Security> Endpoint<S> {
    /// As [`Endpoint::bind_with`], with every connection secured by
    /// `security` before its handshake.
    ///
    /// Every bind (of any kind) resolves the shared secret once (see
    /// [`TransportConfig::resolve_shared_secret`]): the configured one, else
    /// `ACTORS_COOKIE`, else the cookie file, created on first start. With
    /// [`TransportConfig::set_insecure_no_authentication`] it logs a warning
    /// that any TCP client can join.
    ///
    /// # Errors
    /// As [`Endpoint::bind_advertised`], and a shared secret that cannot be
    /// resolved (an unreadable or group-readable cookie file, a short
    /// secret).
    pub async fn bind_secure(
        addr: SocketAddr,
        config: TransportConfig,
        security: S,
        advertise: impl FnOnce(SocketAddr) -> String,
    ) -> Result<Self, TransportError> {
        // The setters refuse what `validate` would: nothing to report here.
        debug_assert_eq!(config.validate(), Ok(()), "a TransportConfig is valid");
        let secret = config.resolve_shared_secret()?;
        let socket = new_socket(&addr, &config)?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(config.accept_backlog)?;
        let local_addr = listener.local_addr()?;
        let advertised = advertise(local_addr);
        if advertised.len() > MAX_ADDR_LEN {
            return Err(ConfigError::AddressTooLong {
                len: advertised.len(),
                limit: MAX_ADDR_LEN,
            }
            .into());
        }
        match &secret {
            None if security.authenticates_dialers() => tracing::warn!(
                %local_addr,
                "shared-secret authentication is turned off (set_insecure_no_authentication): peers are authenticated by their TLS certificates only"
            ),
            None => tracing::warn!(
                %local_addr,
                "INSECURE: authentication is turned off (set_insecure_no_authentication): any TCP client that can reach this port can join this node"
            ),
            Some(s) => {
                if config.insecure_no_authentication {
                    tracing::warn!(
                        "set_insecure_no_authentication is ignored: an explicit shared secret is configured and stays in force"
                    );
                }
                tracing::debug!(source = %s.source(), "shared secret in force");
            }
        }
        let inner = Arc::new(Inner {
            security,
            secret,
            pool: BufferPool::new(config.write_buffer_size, MAX_RETAINED_BUFFER),
            slots: Arc::new(Slots::new(
                config.max_inbound_connections,
                config.max_inbound_connections_per_ip,
                config.max_unproven_per_ip,
                config.idle_eviction_after,
            )),
            config: Arc::new(config),
            hello: Hello {
                uid: random_uid(),
                addr: advertised,
            },
            local_addr,
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        inner.tasks.spawn(accept_loop(listener, inner.clone(), tx));
        tracing::debug!(%local_addr, uid = inner.hello.uid, "endpoint bound");
        Ok(Self {
            inner,
            incoming: Mutex::new(rx),
        })
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// The address advertised to peers.
    pub fn advertised_addr(&self) -> &str {
        &self.inner.hello.addr
    }

    /// This incarnation's id.
    pub fn uid(&self) -> u64 {
        self.inner.hello.uid
    }

    /// The configuration.
    pub fn config(&self) -> &TransportConfig {
        &self.inner.config
    }

    /// The shared secret every handshake proves, as resolved at bind
    /// (its [`source`](SharedSecret::source) says where it came from);
    /// `None` only when authentication is explicitly turned off.
    pub fn shared_secret(&self) -> Option<&SharedSecret> {
        self.inner.secret.as_ref()
    }

    /// What secures this endpoint's connections.
    pub fn security(&self) -> &S {
        &self.inner.security
    }

    /// The next inbound connection that completed its handshake, or an
    /// inbound connection that failed (the listener keeps going: log it and
    /// call again). `None` once the endpoint is closed.
    pub async fn accept(&self) -> Option<Accepted<S>> {
        self.incoming.lock().await.recv().await
    }

    /// Dials `addr` and completes the handshake.
    ///
    /// # Errors
    /// Connect failure or timeout, or a failed handshake (which says why).
    pub async fn connect(
        &self,
        addr: SocketAddr,
    ) -> Result<Established<S::Dialed>, TransportError> {
        self.connect_any(&[addr]).await
    }

    /// Dials each of `addrs` in turn until a TCP connect succeeds, then
    /// completes the handshake with that address, as
    /// [`TcpStream::connect`] walks the addresses a name resolves to (a
    /// host name may resolve to `::1` and `127.0.0.1`, with the node
    /// listening on one of them only).
    ///
    /// The whole walk takes at most the connect timeout
    /// ([`TransportConfig::set_connect_timeout`]). Each attempt may use an
    /// equal share of what is left of it (the last one all of it), so an
    /// address that swallows the connect (a firewall that drops it) leaves
    /// time for the next; a refused connect fails at once and costs
    /// nothing. Only the TCP connect moves on to the next address: a
    /// failed handshake is an answer from whatever listens there, and is
    /// returned.
    ///
    /// # Errors
    /// No address given; the last connect failure when every address
    /// failed; [`TransportError::ConnectTimeout`] (naming the address being
    /// tried) when the timeout passes; or a failed handshake.
    pub async fn connect_any(
        &self,
        addrs: &[SocketAddr],
    ) -> Result<Established<S::Dialed>, TransportError> {
        let config = &self.inner.config;
        let (stream, addr) = dial_each(addrs, config.connect_timeout, |addr| async move {
            new_socket(&addr, config)?.connect(addr).await
        })
        .await?;
        stream.set_nodelay(config.nodelay)?;
        self.inner.dialed(stream, addr).await
    }

    /// Stops accepting; established connections are not affected. The
    /// listening socket is closed shortly after, by the accept task:
    /// await [`closed`](Self::closed) to know it is.
    pub fn close(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
    }

    /// Closes the endpoint (as [`close`](Self::close)) and waits until
    /// its accept task and every inbound handshake in flight have ended:
    /// the listening socket and the sockets of unfinished handshakes are
    /// closed when this returns, so the address can be bound again at
    /// once.
    pub async fn closed(&self) {
        self.close();
        self.inner.tasks.wait().await;
    }
}

impl<S: Security> Drop for Endpoint<S> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<S: Security> Inner<S> {
    /// Secures an inbound stream, runs the handshake as listener, and checks
    /// the peer's identity against its hello.
    async fn accepted(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> Result<Established<S::Accepted>, TransportError> {
        let timeout = self.config.handshake_timeout;
        let mut stream = match tokio::time::timeout(timeout, self.security.accept(tcp, peer)).await
        {
            Ok(s) => s?,
            Err(_) => return Err(TlsError::Timeout { peer, timeout }.into()),
        };
        let binding = self.security.channel_binding_accepted(&stream);
        let (hello, leftover) = self
            .handshake(&mut stream, peer, Role::Listener, binding)
            .await?;
        let verified = match self.security.verify_accepted(&stream, &hello.0) {
            Ok(v) => v,
            Err(e) => {
                refuse(&mut stream, &e).await;
                return Err(e.into());
            }
        };
        Ok(self.established(stream, hello, leftover, peer, verified))
    }

    /// As [`accepted`](Self::accepted), for an outbound stream.
    async fn dialed(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> Result<Established<S::Dialed>, TransportError> {
        let timeout = self.config.handshake_timeout;
        let mut stream = match tokio::time::timeout(timeout, self.security.connect(tcp, peer)).await
        {
            Ok(s) => s?,
            Err(_) => return Err(TlsError::Timeout { peer, timeout }.into()),
        };
        let binding = self.security.channel_binding_dialed(&stream);
        let (hello, leftover) = self
            .handshake(&mut stream, peer, Role::Dialer, binding)
            .await?;
        let verified = match self.security.verify_dialed(&stream, &hello.0) {
            Ok(v) => v,
            Err(e) => {
                refuse(&mut stream, &e).await;
                return Err(e.into());
            }
        };
        Ok(self.established(stream, hello, leftover, peer, verified))
    }

    fn established<T>(
        &self,
        stream: T,
        (peer, app_flags): (Hello, u8),
        leftover: BytesMut,
        peer_addr: SocketAddr,
        by_security: PeerVerified,
    ) -> Established<T> {
        // The handshake only completes once the peer proved the secret.
        let by_secret = if self.secret.is_some() {
            PeerVerified::Secret
        } else {
            PeerVerified::Unauthenticated
        };
        Established {
            stream,
            leftover,
            peer: PeerInfo {
                addr: peer.addr,
                uid: peer.uid,
                socket_addr: peer_addr,
                verified: by_security.max(by_secret),
                app_flags,
            },
            config: self.config.clone(),
            pool: self.pool.clone(),
            slot: None,
        }
    }

    /// Runs the handshake over `stream` under the handshake timeout: sends
    /// what the state machine has to send, reads until it has the peer's
    /// hello (and proof, with a shared secret, bound to `binding` if the
    /// stream has a TLS session). Returns the peer's hello and any bytes
    /// read past the handshake.
    ///
    /// Until the handshake completes, `buf` holds at most one partial
    /// handshake frame (each kind's limit is checked from its header before
    /// anything is buffered) plus one read, and nothing else is parsed.
    async fn handshake<T>(
        &self,
        stream: &mut T,
        peer: SocketAddr,
        role: Role,
        binding: Option<ChannelBinding>,
    ) -> Result<((Hello, u8), BytesMut), TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let timeout = self.config.handshake_timeout;
        let now = tokio::time::Instant::now();
        let mut hs = match &self.secret {
            None => Handshake::new(self.hello.clone(), now.into_std(), timeout),
            Some(secret) => Handshake::with_secret(
                self.hello.clone(),
                now.into_std(),
                timeout,
                role,
                secret.clone(),
                random_nonce(),
            ),
        };
        if let Some(b) = binding {
            hs.set_channel_binding(b);
        }
        hs.set_app_flags(self.config.app_flags);
        let deadline = tokio::time::Instant::from_std(hs.poll_timeout());
        let mut out = BytesMut::new();
        let mut buf = BytesMut::with_capacity(512);
        // A TLS layer reports the peer's alert as InvalidData; anything else
        // (reset, broken pipe) means the peer hung up.
        let io_error = |hs: &Handshake, e: io::Error| -> TransportError {
            if e.kind() == io::ErrorKind::InvalidData {
                self.security.handshake_io_error(peer, e)
            } else {
                hs.handle_eof().into()
            }
        };
        let io = async {
            loop {
                let step = hs.handle_input(&mut buf);
                out.clear();
                // Send what is due even when the peer's input just failed:
                // our proof lets the peer report the mismatch too.
                if hs.poll_transmit(&mut out) {
                    let sent = async {
                        stream.write_all(&out).await?;
                        stream.flush().await
                    };
                    if let Err(e) = sent.await
                        && step.is_ok()
                    {
                        return Err(io_error(&hs, e));
                    }
                }
                if let Some(peer) = step? {
                    return Ok(peer);
                }
                match stream.read_buf(&mut buf).await {
                    Ok(0) => return Err(hs.handle_eof().into()),
                    Ok(_) => {}
                    Err(e) => return Err(io_error(&hs, e)),
                }
            }
        };
        match tokio::time::timeout_at(deadline, io).await {
            Ok(Ok(peer)) => Ok(((peer, hs.peer_app_flags()), buf)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(hs
                .handle_timeout(tokio::time::Instant::now().into_std())
                .err()
                .unwrap_or(HandshakeError::Timeout {
                    timeout,
                    received: 0,
                })
                .into()),
        }
    }
}

/// How long a refusal waits for its Close frame to be written: the peer has
/// finished its handshake and is not reading slowly, so this only matters
/// for a stuck peer.
const REFUSE_TIMEOUT: Duration = Duration::from_millis(500);

/// Tells a peer whose handshake completed why we refuse it: a Close frame
/// carrying the error, then end of stream. Best effort and bounded: the
/// peer's own `connect` or `accept` has already succeeded, so this is the
/// only way it learns the reason.
async fn refuse<T: AsyncWrite + Unpin>(stream: &mut T, error: &HandshakeError) {
    let reason = format!("handshake refused: {error}");
    let mut out = BytesMut::new();
    frame::encode_header(FrameKind::Close, reason.len(), &mut out);
    out.extend_from_slice(reason.as_bytes());
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, async {
        stream.write_all(&out).await?;
        stream.shutdown().await
    })
    .await;
}

/// A fresh random handshake nonce.
fn random_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    if getrandom::fill(&mut n).is_err() {
        // No OS randomness: four random uids still never repeat in practice.
        for chunk in n.chunks_exact_mut(8) {
            chunk.copy_from_slice(&random_uid().to_le_bytes());
        }
    }
    n
}

fn new_socket(addr: &SocketAddr, config: &TransportConfig) -> std::io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(n) = config.send_buffer_size {
        socket.set_send_buffer_size(n)?;
    }
    if let Some(n) = config.recv_buffer_size {
        socket.set_recv_buffer_size(n)?;
    }
    Ok(socket)
}

/// Tries `dial` on each address in order until one succeeds, within
/// `timeout` in all (see [`Endpoint::connect_any`] for how it is shared).
/// The dial is a parameter so that tests can script each address's fate
/// under a paused clock.
async fn dial_each<T, F, Fut>(
    addrs: &[SocketAddr],
    timeout: Duration,
    mut dial: F,
) -> Result<(T, SocketAddr), TransportError>
where
    F: FnMut(SocketAddr) -> Fut,
    Fut: Future<Output = io::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    for (i, &addr) in addrs.iter().enumerate() {
        let left = addrs.len() - i;
        let now = tokio::time::Instant::now();
        // An equal share of the time left; the last address gets all of it.
        // `left` is at least 1 (i < len) and at most the slice's length.
        let share =
            deadline.saturating_duration_since(now) / u32::try_from(left).unwrap_or(u32::MAX);
        let until = if left == 1 { deadline } else { now + share };
        match tokio::time::timeout_at(until, dial(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, addr)),
            Ok(Err(e)) => {
                tracing::debug!(%addr, error = %e, remaining = left - 1, "connect failed");
                last = Some(TransportError::Io(e));
            }
            Err(_) if left == 1 => {
                return Err(TransportError::ConnectTimeout {
                    addr,
                    after: timeout,
                });
            }
            Err(_) => {
                tracing::debug!(%addr, after = ?share, remaining = left - 1, "connect timed out, trying the next address");
                last = Some(TransportError::ConnectTimeout {
                    addr,
                    after: timeout,
                });
            }
        }
    }
    Err(last.unwrap_or_else(|| {
        TransportError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no address to connect to",
        ))
    }))
}

async fn accept_loop<S: Security>(
    listener: TcpListener,
    inner: Arc<Inner<S>>,
    tx: mpsc::Sender<Accepted<S>>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = inner.cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    if let Some(s) = ACCEPT_FAILED.sample() {
                        tracing::warn!(error = %e, total = s.total, suppressed = s.suppressed, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        // Before reading anything: a flood costs one accept and one close
        // per connection. The charge comes first, so that a refused one
        // leaves the slots untouched.
        let charged = inner.config.admission.as_ref().map(|admission| {
            inner
                .slots
                .charge_pending(peer.ip(), &**admission, S::PENDING_HANDSHAKE_COST)
        });
        let admitted = charged.transpose().and_then(|charge| {
            let admitted = inner.slots.admit(peer.ip(), Instant::now())?;
            Ok((admitted, charge))
        });
        let admitted = match admitted {
            Ok((admitted, charge)) => {
                if let Some((charge, evicted)) = charge {
                    if let Some((ip, unproven)) = evicted
                        && let Some(s) = EVICTED.sample()
                    {
                        tracing::info!(%peer, victim = %ip, unproven, total = s.total, suppressed = s.suppressed, "evicting a connection still in its handshake: the memory budget for peers is full");
                    }
                    admitted.slot().hold(charge);
                }
                admitted
            }
            Err(error) => {
                drop(stream);
                if let Some(s) = REFUSED.sample() {
                    tracing::warn!(%peer, %error, total = s.total, suppressed = s.suppressed, "inbound connection refused");
                }
                let _ = tx.try_send(Err(AcceptError { peer, error }));
                continue;
            }
        };
        let inner2 = inner.clone();
        let tx = tx.clone();
        inner.tasks.spawn(async move {
            let mut slot = match admitted {
                Admitted::Now(slot) => slot,
                Admitted::EvictedUnproven {
                    mut slot,
                    ip,
                    unproven,
                } => {
                    if let Some(s) = EVICTED.sample() {
                        tracing::info!(%peer, victim = %ip, unproven, total = s.total, suppressed = s.suppressed, "evicting a connection still in its handshake for a new one");
                    }
                    let wait = inner2.config.handshake_timeout;
                    let evict = slot.eviction();
                    let got = tokio::select! {
                        () = inner2.cancel.cancelled() => return,
                        () = evict.cancelled() => None,
                        got = slot.wait_permit(wait) => Some(got),
                    };
                    let Some(got) = got else {
                        report_evicted::<S>(&tx, peer, slot.evicted_with());
                        return;
                    };
                    if !got {
                        let limit = inner2.slots.limit();
                        let error = TransportError::TooManyConnections { limit };
                        let _ = tx.try_send(Err(AcceptError { peer, error }));
                        return;
                    }
                    slot
                }
                Admitted::AfterEviction {
                    mut slot,
                    victim,
                    idle,
                } => {
                    let limit = inner2.slots.limit();
                    let reason = format!(
                        "evicted: no application frame for {:.1}s and the endpoint is at its limit of {limit} inbound connections",
                        idle.as_secs_f64()
                    );
                    if let Some(s) = EVICTED.sample() {
                        tracing::info!(%peer, victim = %victim.peer.socket_addr, idle_ms = idle.as_millis() as u64, total = s.total, suppressed = s.suppressed, "evicting an idle inbound connection for a new one");
                    }
                    let wait = inner2.config.handshake_timeout;
                    let got = tokio::select! {
                        () = inner2.cancel.cancelled() => return,
                        (_, got) = async { tokio::join!(slots::evict(victim, reason), slot.wait_permit(wait)) } => got,
                    };
                    if !got {
                        let error = TransportError::TooManyConnections { limit };
                        let _ = tx.try_send(Err(AcceptError { peer, error }));
                        return;
                    }
                    slot
                }
            };
            if let Err(e) = stream.set_nodelay(inner2.config.nodelay)
                && let Some(s) = ACCEPT_FAILED.sample()
            {
                // A peer that resets at once causes this: sampled.
                tracing::warn!(%peer, error = %e, total = s.total, suppressed = s.suppressed, "set_nodelay failed");
            }
            // Until the peer has proved itself, a newer connection may
            // evict this one (see `slots`): the handshake is dropped
            // where it stands, and the slot with it.
            let res = tokio::select! {
                () = inner2.cancel.cancelled() => return,
                unproven = slot.evicted() => {
                    report_evicted::<S>(&tx, peer, unproven);
                    return;
                }
                r = inner2.accepted(stream, peer) => r,
            };
            match res {
                Ok(mut est) => {
                    slot.proven();
                    est.slot = Some(slot);
                    tracing::debug!(%peer, uid = est.peer.uid, addr = %PeerText(&est.peer.addr), "inbound connection established");
                    let _ = tx.send(Ok(est)).await;
                }
                Err(error) => {
                    if let Some(s) = HANDSHAKE_FAILED.sample() {
                        tracing::warn!(%peer, %error, total = s.total, suppressed = s.suppressed, "inbound handshake failed");
                    }
                    // Reported if someone is accepting; never blocks the task.
                    let _ = tx.try_send(Err(AcceptError { peer, error }));
                }
            }
        });
    }
}

/// Reports an inbound connection evicted in its handshake (logged by the
/// newcomer that evicted it).
fn report_evicted<S: Security>(tx: &mpsc::Sender<Accepted<S>>, peer: SocketAddr, unproven: usize) {
    let error = TransportError::HandshakeEvicted {
        ip: peer.ip(),
        unproven,
    };
    let _ = tx.try_send(Err(AcceptError { peer, error }));
}

#[cfg(test)]
mod tests {
    use std::{future::pending, io, net::SocketAddr, time::Duration};

    use super::dial_each;
    use crate::error::TransportError;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test]
    async fn a_refused_address_is_followed_by_the_next_one() {
        // A port that was just free: nothing listens there, so the connect
        // is refused (deterministic on loopback).
        let closed = tokio::net::TcpListener::bind(addr(0)).await.unwrap();
        let closed_addr = closed.local_addr().unwrap();
        drop(closed);
        let live = tokio::net::TcpListener::bind(addr(0)).await.unwrap();
        let live_addr = live.local_addr().unwrap();
        let (stream, used) = dial_each(
            &[closed_addr, live_addr],
            Duration::from_secs(5),
            tokio::net::TcpStream::connect,
        )
        .await
        .unwrap();
        assert_eq!(used, live_addr);
        assert_eq!(stream.peer_addr().unwrap(), live_addr);
        let (_, from) = live.accept().await.unwrap();
        assert_eq!(from, stream.local_addr().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_that_never_answers_leaves_time_for_the_next() {
        let start = tokio::time::Instant::now();
        let (n, used) = dial_each(
            &[addr(1), addr(2)],
            Duration::from_secs(4),
            |a| async move {
                if a.port() == 1 {
                    pending::<io::Result<u16>>().await
                } else {
                    Ok(a.port())
                }
            },
        )
        .await
        .unwrap();
        assert_eq!((n, used), (2, addr(2)));
        // The first address had half of the timeout.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_whole_walk_is_bounded_by_the_timeout() {
        let start = tokio::time::Instant::now();
        let err = dial_each(&[addr(1), addr(2), addr(3)], Duration::from_secs(3), |_| {
            pending::<io::Result<()>>()
        })
        .await
        .unwrap_err();
        assert!(
            matches!(err, TransportError::ConnectTimeout { addr: a, .. } if a == addr(3)),
            "{err}"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test]
    async fn every_address_failing_returns_the_last_error_and_none_is_an_error() {
        let err = dial_each(
            &[addr(1), addr(2)],
            Duration::from_secs(1),
            |a| async move {
                Err::<(), _>(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    a.to_string(),
                ))
            },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("127.0.0.1:2"), "{err}");
        let err = dial_each(&[], Duration::from_secs(1), |_| async { Ok(()) })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no address"), "{err}");
    }
}
