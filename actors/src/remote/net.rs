//! The transport endpoint behind remoting, with its security erased: plain
//! TCP and TLS endpoints have different stream types, but remoting only
//! needs "accept or dial a connection, see the peer, start it".

use std::{future::Future, net::SocketAddr, pin::Pin};

use transport::{
    AcceptError, Connection, Endpoint, Established, PeerInfo, Security, Stream, TransportError,
};

use super::inbound::Dispatch;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A connection whose handshake succeeded, not yet started.
pub(crate) struct Incoming {
    peer: PeerInfo,
    start: Box<dyn FnOnce(Dispatch) -> Connection + Send>,
}

impl Incoming {
    fn new<T: Stream>(est: Established<T>) -> Self {
        Self {
            peer: est.peer().clone(),
            start: Box::new(move |h| est.start(h)),
        }
    }

    pub(crate) fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    pub(crate) fn start(self, handler: Dispatch) -> Connection {
        (self.start)(handler)
    }
}

/// What remoting needs of an endpoint.
pub(crate) trait Net: Send + Sync + 'static {
    fn local_addr(&self) -> SocketAddr;
    fn advertised_addr(&self) -> &str;
    /// This incarnation's uid, as the handshake tells peers.
    fn uid(&self) -> u64;
    /// The shared secret in force (resolved at bind), if any.
    fn shared_secret(&self) -> Option<&transport::SharedSecret>;
    fn accept(&self) -> BoxFuture<'_, Option<Result<Incoming, AcceptError>>>;
    /// Dials each address in turn (`Endpoint::connect_any`).
    fn connect(&self, addrs: Vec<SocketAddr>) -> BoxFuture<'_, Result<Incoming, TransportError>>;
    /// Closes (`Endpoint::close`), and waits until the listener is closed
    /// (`Endpoint::closed`).
    fn closed(&self) -> BoxFuture<'_, ()>;
}

impl<S: Security> Net for Endpoint<S> {
    fn local_addr(&self) -> SocketAddr {
        Endpoint::local_addr(self)
    }

    fn advertised_addr(&self) -> &str {
        Endpoint::advertised_addr(self)
    }

    fn uid(&self) -> u64 {
        Endpoint::uid(self)
    }

    fn shared_secret(&self) -> Option<&transport::SharedSecret> {
        Endpoint::shared_secret(self)
    }

    fn accept(&self) -> BoxFuture<'_, Option<Result<Incoming, AcceptError>>> {
        Box::pin(async move { Some(Endpoint::accept(self).await?.map(Incoming::new)) })
    }

    fn connect(&self, addrs: Vec<SocketAddr>) -> BoxFuture<'_, Result<Incoming, TransportError>> {
        Box::pin(async move { Endpoint::connect_any(self, &addrs).await.map(Incoming::new) })
    }

    fn closed(&self) -> BoxFuture<'_, ()> {
        Box::pin(Endpoint::closed(self))
    }
}
