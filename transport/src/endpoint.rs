//! A node's presence on the network: a listener, an identity, and a pool of
//! buffers shared by its connections.

use std::{
    fmt,
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
    config::TransportConfig,
    conn::{Established, PeerInfo},
    error::{AcceptError, ConfigError, HandshakeError, TransportError},
    handshake::{Handshake, Hello, MAX_ADDR_LEN},
    pool::BufferPool,
};

/// Established inbound connections waiting for [`Endpoint::accept`]. When
/// the application does not accept, handshakes wait here and the listener
/// slows down instead of buffering without bound.
pub const ACCEPT_QUEUE: usize = 64;

/// Pooled buffers a buffer may grow to and still be kept: past this a
/// buffer is freed rather than pooled.
const MAX_RETAINED_BUFFER: usize = 8 * 1024 * 1024;

/// A bound node: accepts and dials connections under one identity.
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
pub struct Endpoint {
    inner: Arc<Inner>,
    incoming: Mutex<mpsc::Receiver<Result<Established<TcpStream>, AcceptError>>>,
}

struct Inner {
    config: Arc<TransportConfig>,
    hello: Hello,
    local_addr: SocketAddr,
    pool: BufferPool,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl fmt::Debug for Endpoint {
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

impl Endpoint {
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
        config.validate()?;
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
        let inner = Arc::new(Inner {
            pool: BufferPool::new(config.write_buffer_size, MAX_RETAINED_BUFFER),
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

    /// The next inbound connection that completed its handshake, or an
    /// inbound connection that failed (the listener keeps going: log it and
    /// call again). `None` once the endpoint is closed.
    pub async fn accept(&self) -> Option<Result<Established<TcpStream>, AcceptError>> {
        self.incoming.lock().await.recv().await
    }

    /// Dials `addr` and completes the handshake.
    ///
    /// # Errors
    /// Connect failure or timeout, or a failed handshake (which says why).
    pub async fn connect(
        &self,
        addr: SocketAddr,
    ) -> Result<Established<TcpStream>, TransportError> {
        let config = &self.inner.config;
        let socket = new_socket(&addr, config)?;
        let stream = match tokio::time::timeout(config.connect_timeout, socket.connect(addr)).await
        {
            Ok(s) => s?,
            Err(_) => {
                return Err(TransportError::ConnectTimeout {
                    addr,
                    after: config.connect_timeout,
                });
            }
        };
        stream.set_nodelay(config.nodelay)?;
        self.inner.establish(stream, addr).await
    }

    /// Stops accepting; established connections are not affected.
    pub fn close(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    async fn establish<T>(
        &self,
        mut stream: T,
        peer_addr: SocketAddr,
    ) -> Result<Established<T>, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let (peer, leftover) =
            handshake(&mut stream, &self.hello, self.config.handshake_timeout).await?;
        Ok(Established {
            stream,
            leftover,
            peer: PeerInfo {
                addr: peer.addr,
                uid: peer.uid,
                socket_addr: peer_addr,
            },
            config: self.config.clone(),
            pool: self.pool.clone(),
        })
    }
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

async fn accept_loop(
    listener: TcpListener,
    inner: Arc<Inner>,
    tx: mpsc::Sender<Result<Established<TcpStream>, AcceptError>>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = inner.cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let inner2 = inner.clone();
        let tx = tx.clone();
        inner.tasks.spawn(async move {
            if let Err(e) = stream.set_nodelay(inner2.config.nodelay) {
                tracing::warn!(%peer, error = %e, "set_nodelay failed");
            }
            let res = tokio::select! {
                () = inner2.cancel.cancelled() => return,
                r = inner2.establish(stream, peer) => r,
            };
            match res {
                Ok(est) => {
                    tracing::debug!(%peer, uid = est.peer.uid, addr = %est.peer.addr, "inbound connection established");
                    let _ = tx.send(Ok(est)).await;
                }
                Err(error) => {
                    tracing::warn!(%peer, %error, "inbound handshake failed");
                    // Reported if someone is accepting; never blocks the task.
                    let _ = tx.try_send(Err(AcceptError { peer, error }));
                }
            }
        });
    }
}

/// Runs the handshake over `stream`: sends our hello, reads the peer's,
/// under the timeout. Returns the peer's hello and any bytes read past it.
pub(crate) async fn handshake<T>(
    stream: &mut T,
    local: &Hello,
    timeout: Duration,
) -> Result<(Hello, BytesMut), HandshakeError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let now = tokio::time::Instant::now();
    let mut hs = Handshake::new(local.clone(), now.into_std(), timeout);
    let deadline = tokio::time::Instant::from_std(hs.poll_timeout());
    let mut out = BytesMut::new();
    hs.poll_transmit(&mut out);
    let mut buf = BytesMut::with_capacity(512);
    let io = async {
        stream.write_all(&out).await.map_err(|_| hs.handle_eof())?;
        stream.flush().await.map_err(|_| hs.handle_eof())?;
        loop {
            if let Some(peer) = hs.handle_input(&mut buf)? {
                return Ok(peer);
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return Err(hs.handle_eof()),
                Ok(_) => {}
            }
        }
    };
    match tokio::time::timeout_at(deadline, io).await {
        Ok(Ok(peer)) => Ok((peer, buf)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(hs
            .handle_timeout(tokio::time::Instant::now().into_std())
            .err()
            .unwrap_or(HandshakeError::Timeout {
                timeout,
                received: 0,
            })),
    }
}
