//! What an [`Endpoint`](crate::Endpoint) does to a TCP stream before the
//! protocol handshake: nothing ([`Plain`]) or a TLS handshake
//! ([`Tls`](crate::Tls)).
//!
//! The endpoint is generic over its [`Security`], and the connection over
//! the stream it produces, so each choice is compiled into its own code: a
//! plaintext connection is a bare `TcpStream` with no branch or indirection
//! per read or write, and a TLS connection is rustls's concrete server or
//! client stream type. No enum of stream kinds is matched per call.

use std::{future::Future, io, net::SocketAddr};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

use crate::{
    auth::ChannelBinding,
    error::{HandshakeError, TransportError},
    handshake::Hello,
    shared::PeerVerified,
};

/// A stream a connection can run on: a TCP stream, or rustls's server or
/// client stream over one.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static + sealed::SplitIo {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static + sealed::SplitIo> Stream for T {}

/// Turns accepted and dialled TCP streams into the streams connections run
/// on, and checks the peer's identity once its hello is known.
///
/// Implemented by [`Plain`] and [`Tls`](crate::Tls); the trait is public so
/// that `Endpoint<S>` can name it, and sealed so it can grow. Its methods
/// are the endpoint's own (they take the handshake's internal types) and
/// are hidden from these docs.
pub trait Security: Send + Sync + 'static + sealed::Sealed {
    /// The stream of an inbound connection.
    type Accepted: Stream;
    /// The stream of an outbound connection.
    type Dialed: Stream;

    /// What one inbound connection in its handshake holds with this
    /// layer, charged to an [`Admission`](crate::Admission):
    /// [`PENDING_HANDSHAKE_COST`](crate::PENDING_HANDSHAKE_COST) for
    /// plaintext, `PENDING_TLS_HANDSHAKE_COST` for TLS.
    #[doc(hidden)]
    const PENDING_HANDSHAKE_COST: usize;

    /// Secures an inbound TCP stream from `peer`.
    #[doc(hidden)]
    fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> impl Future<Output = Result<Self::Accepted, TransportError>> + Send;

    /// Secures an outbound TCP stream to `addr`.
    #[doc(hidden)]
    fn connect(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
    ) -> impl Future<Output = Result<Self::Dialed, TransportError>> + Send;

    /// Checks that what secured `stream` proves the identity `peer`
    /// advertises in its hello, and says how strongly:
    /// [`PeerVerified::Unauthenticated`] when this layer proves nothing
    /// (the shared secret, checked by the handshake, may still).
    ///
    /// # Errors
    /// [`HandshakeError::Identity`] saying why not.
    #[doc(hidden)]
    fn verify_accepted(
        &self,
        stream: &Self::Accepted,
        peer: &Hello,
    ) -> Result<PeerVerified, HandshakeError>;

    /// As [`verify_accepted`](Self::verify_accepted), for a dialled stream.
    ///
    /// # Errors
    /// [`HandshakeError::Identity`] saying why not.
    #[doc(hidden)]
    fn verify_dialed(
        &self,
        stream: &Self::Dialed,
        peer: &Hello,
    ) -> Result<PeerVerified, HandshakeError>;

    /// Keying material exported from the secure session of an inbound
    /// stream, which the shared-secret proof is bound to; `None` for a
    /// stream with no session (plaintext).
    #[doc(hidden)]
    fn channel_binding_accepted(&self, stream: &Self::Accepted) -> Option<ChannelBinding> {
        let _ = stream;
        None
    }

    /// As [`channel_binding_accepted`](Self::channel_binding_accepted),
    /// for a dialled stream.
    #[doc(hidden)]
    fn channel_binding_dialed(&self, stream: &Self::Dialed) -> Option<ChannelBinding> {
        let _ = stream;
        None
    }

    /// Whether this layer authenticates dialers by itself (mutual TLS that
    /// checks identities): decides how loud the warning is when shared-
    /// secret authentication is turned off.
    #[doc(hidden)]
    fn authenticates_dialers(&self) -> bool {
        false
    }

    /// The error to report for an IO error on the secured stream during the
    /// protocol handshake (TLS reports a peer's alert this way).
    #[doc(hidden)]
    fn handshake_io_error(&self, peer: SocketAddr, error: io::Error) -> TransportError {
        let _ = peer;
        TransportError::Io(error)
    }
}

/// No transport security: connections run on the bare `TcpStream`. The
/// default for [`Endpoint`](crate::Endpoint).
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

impl Security for Plain {
    type Accepted = TcpStream;
    type Dialed = TcpStream;

    const PENDING_HANDSHAKE_COST: usize = crate::PENDING_HANDSHAKE_COST;

    async fn accept(&self, tcp: TcpStream, _: SocketAddr) -> Result<TcpStream, TransportError> {
        Ok(tcp)
    }

    async fn connect(&self, tcp: TcpStream, _: SocketAddr) -> Result<TcpStream, TransportError> {
        Ok(tcp)
    }

    fn verify_accepted(&self, _: &TcpStream, _: &Hello) -> Result<PeerVerified, HandshakeError> {
        Ok(PeerVerified::Unauthenticated)
    }

    fn verify_dialed(&self, _: &TcpStream, _: &Hello) -> Result<PeerVerified, HandshakeError> {
        Ok(PeerVerified::Unauthenticated)
    }
}

pub(crate) mod sealed {
    use tokio::io::AsyncWrite;

    use crate::reader::ReadIo;

    /// Keeps [`Security`](super::Security) implementable only here.
    pub trait Sealed {}
    impl Sealed for super::Plain {}
    // `Tls` is sealed in `tls`, so that this module does not import it
    // back.

    /// How a connection's stream splits into its reader's and writer's
    /// halves (and keeps [`Stream`](super::Stream) implementable only
    /// here).
    pub trait SplitIo: Sized {
        /// The reader task's half.
        type Read: ReadIo;
        /// The writer task's half.
        type Write: AsyncWrite + Unpin + Send + 'static;
        /// Splits the stream.
        fn split_io(self) -> (Self::Read, Self::Write);
    }

    macro_rules! tokio_split {
        ($($t:ty),*) => {
            $(impl SplitIo for $t {
                type Read = tokio::io::ReadHalf<$t>;
                type Write = tokio::io::WriteHalf<$t>;
                fn split_io(self) -> (Self::Read, Self::Write) {
                    tokio::io::split(self)
                }
            })*
        };
    }

    // The in-memory stream is for unit tests of the connection tasks.
    tokio_split!(tokio::net::TcpStream, tokio::io::DuplexStream);

    // TLS streams (`tls_read::TlsStream`) split into our record layer's
    // halves; their `SplitIo` lives in `tls_read`, which this module does
    // not import.
}
