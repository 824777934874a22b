//! The TLS handshake on rustls's unbuffered API, and the hand-over: once
//! the handshake is complete, rustls's kernel API gives each direction's
//! keys and sequence number to our record layer ([`Established`]), and
//! both ends derive the session's channel binding from the initial keys.
//!
//! ```text
//!  TcpStream ─► handshake(): process → encode / transmit / read more,
//!                until rustls has nothing left to send and the handshake
//!                is complete; rustls is given no input after that
//!     │  error ─► fail(): rustls's queued alert, then the stream back
//!     ▼
//!  dangerous_into_kernel_connection ─► Keys (tx, rx), Kernel, binding
//! ```

use std::io;

use bytes::{Buf, BytesMut};
use rustls::{
    ConnectionTrafficSecrets, Error as RustlsError, SupportedCipherSuite,
    client::{ClientConnectionData, UnbufferedClientConnection},
    server::{ServerConnectionData, UnbufferedServerConnection},
    unbuffered::{ConnectionState, EncodeError, UnbufferedStatus},
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Established, Kernel, invalid, rustls_io};
use crate::{
    auth::{CHANNEL_BINDING_LABEL, ChannelBinding},
    tls_record::{self, Keys, Role},
};

/// rustls's unbuffered connection of either side, as the handshake drives
/// it.
pub(crate) trait Unbuffered: Send {
    /// `ClientConnectionData` or `ServerConnectionData`.
    type Data;
    /// Which side this is.
    const ROLE: Role;
    /// `process_tls_records`.
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// The state every connection shares.
    fn common(&self) -> &rustls::CommonState;
    /// `dangerous_into_kernel_connection`.
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError>;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    const ROLE: Role = Role::Client;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError> {
        let (secrets, k) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Client(k)))
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    const ROLE: Role = Role::Server;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), RustlsError> {
        let (secrets, k) = self.dangerous_into_kernel_connection()?;
        Ok((secrets, Kernel::Server(k)))
    }
}

/// What the handshake loop does next, decided while rustls borrows the
/// buffers and done after.
enum Step {
    /// Process again.
    Again,
    /// Write what is encoded.
    Write,
    /// Read more from the peer.
    Read,
    /// The TLS handshake is complete.
    Done,
}

/// Runs the TLS handshake of `conn` over `io`, then takes the connection
/// out of rustls. On failure, the error (a rustls error inside an
/// `InvalidData` IO error, as tokio-rustls reports them) and the stream,
/// after our alert, if any, was sent.
pub(crate) async fn handshake<C: Unbuffered, T: AsyncRead + AsyncWrite + Unpin>(
    mut conn: C,
    mut io: T,
) -> Result<Established<T>, (io::Error, T)> {
    let mut incoming = BytesMut::with_capacity(tls_record::MAX_RECORD);
    let mut outgoing = Vec::new();
    // Application data rustls decrypted with the handshake's last records.
    let mut carry = BytesMut::new();
    let mut peer_closed = false;
    loop {
        // Once the handshake is complete rustls is given no more input:
        // what follows is for our record layer.
        let handshaking = conn.common().is_handshaking();
        let mut none = [0u8; 0];
        let input: &mut [u8] = if handshaking {
            &mut incoming
        } else {
            &mut none
        };
        let status = conn.process(input);
        let discard = status.discard;
        let step = match status.state {
            Err(e) => {
                incoming.advance(discard);
                return Err((rustls_io(e.clone()), fail(conn, io).await));
            }
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let at = outgoing.len();
                let need = match enc.encode(&mut []) {
                    Err(EncodeError::InsufficientSize(s)) => s.required_size,
                    _ => 0,
                };
                outgoing.resize(at + need, 0);
                let n = enc.encode(&mut outgoing[at..]).unwrap_or(0);
                outgoing.truncate(at + n);
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // Written right below, before rustls is called again.
                t.done();
                Step::Write
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                while let Some(record) = r.next_record() {
                    match record {
                        Ok(record) => carry.extend_from_slice(record.payload),
                        Err(e) => {
                            drop(r);
                            incoming.advance(discard);
                            return Err((rustls_io(e.clone()), fail(conn, io).await));
                        }
                    }
                }
                Step::Again
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                peer_closed = true;
                if handshaking { Step::Read } else { Step::Done }
            }
            // A server is complete when it has the client's Finished, not
            // when it may send (0.5-RTT).
            Ok(ConnectionState::WriteTraffic(_)) if handshaking => Step::Read,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Done,
            Ok(other) => {
                let e = RustlsError::General(format!("unexpected TLS state {other:?}"));
                incoming.advance(discard);
                return Err((rustls_io(e.clone()), fail(conn, io).await));
            }
        };
        incoming.advance(discard);
        match step {
            Step::Again => {}
            Step::Write => {
                if let Err(e) = write_out(&mut io, &mut outgoing).await {
                    return Err((e, io));
                }
            }
            Step::Read if peer_closed => {
                return Err((
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed TLS during the handshake",
                    ),
                    io,
                ));
            }
            Step::Read => {
                incoming.reserve(tls_record::MAX_RECORD);
                match io.read_buf(&mut incoming).await {
                    Ok(0) => {
                        return Err((
                            io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof"),
                            io,
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => return Err((e, io)),
                }
            }
            Step::Done => break,
        }
    }
    if let Err(e) = write_out(&mut io, &mut outgoing).await {
        return Err((e, io));
    }
    let common = conn.common();
    let peer_certificates = common.peer_certificates().map(<[_]>::to_vec);
    let limit = match common.negotiated_cipher_suite() {
        Some(SupportedCipherSuite::Tls13(s)) => s.common.confidentiality_limit,
        _ => 0,
    };
    let taken = conn.into_kernel().and_then(|(secrets, kernel)| {
        let unknown = || RustlsError::General("cipher suite not supported".into());
        let tx = Keys::new(&secrets.tx.1, secrets.tx.0).ok_or_else(unknown)?;
        let rx = Keys::new(&secrets.rx.1, secrets.rx.0).ok_or_else(unknown)?;
        let binding = match C::ROLE {
            Role::Client => channel_binding(&secrets.tx.1, &secrets.rx.1),
            Role::Server => channel_binding(&secrets.rx.1, &secrets.tx.1),
        };
        Ok((tx, rx, kernel, binding))
    });
    match taken {
        Ok((tx, rx, kernel, binding)) => Ok(Established {
            io,
            incoming,
            carry,
            peer_closed,
            tx,
            rx,
            limit,
            kernel,
            role: C::ROLE,
            peer_certificates,
            binding,
        }),
        Err(e) => Err((invalid(format!("TLS handover from rustls failed: {e}")), io)),
    }
}

/// Writes what rustls encoded.
async fn write_out<T: AsyncWrite + Unpin>(io: &mut T, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        io.flush().await?;
        out.clear();
    }
    Ok(())
}

/// After a handshake error: sends the alert rustls queued, if any.
///
/// rustls is called only while it has records queued: those are handed
/// out before it looks at any input. Past them it would deframe again,
/// and a handshake message it was joining from several records is kept as
/// ranges of the earlier input buffer (an empty one makes rustls panic;
/// the real one would be parsed again, after the error).
async fn fail<C: Unbuffered, T: AsyncWrite + Unpin>(mut conn: C, mut io: T) -> T {
    let mut out = Vec::new();
    // An alert is one record; a few rounds are plenty.
    for _ in 0..4 {
        if !conn.common().wants_write() {
            break;
        }
        match conn.process(&mut []).state {
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let mut buf = [0u8; 64];
                if let Ok(n) = enc.encode(&mut buf) {
                    out.extend_from_slice(&buf[..n]);
                }
            }
            _ => break,
        }
    }
    let _ = write_out(&mut io, &mut out).await;
    io
}

/// The channel binding of a TLS session: a hash of both directions'
/// initial traffic keys, which only the two ends of this session hold
/// (docs/PROTOCOL.md, "Shared secret").
fn channel_binding(
    client: &ConnectionTrafficSecrets,
    server: &ConnectionTrafficSecrets,
) -> ChannelBinding {
    let mut h = Sha256::new();
    h.update(CHANNEL_BINDING_LABEL);
    for s in [client, server] {
        if let ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } = s
        {
            h.update(key.as_ref());
            h.update(iv.as_ref());
        }
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::crypto::cipher::{AeadKey, Iv};

    use super::*;
    use crate::tls_read::tests::{SUITES, configs, memory, ours, pair};

    fn secrets(key: u8, iv: u8) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([key; 32]),
            iv: Iv::from([iv; 12]),
        }
    }

    #[test]
    fn the_channel_binding_covers_both_directions_in_order() {
        let (client, server) = (secrets(1, 2), secrets(3, 4));
        let binding = channel_binding(&client, &server);
        assert_eq!(binding, channel_binding(&secrets(1, 2), &secrets(3, 4)));
        // Each direction's key and iv count, and which side is which.
        for other in [
            channel_binding(&server, &client),
            channel_binding(&secrets(9, 2), &server),
            channel_binding(&secrets(1, 9), &server),
            channel_binding(&client, &secrets(9, 4)),
            channel_binding(&client, &secrets(3, 9)),
        ] {
            assert_ne!(binding, other);
        }
        // The label keeps it apart from a bare hash of the keys.
        let mut bare = Sha256::new();
        for s in [&client, &server] {
            if let ConnectionTrafficSecrets::Aes256Gcm { key, iv } = s {
                bare.update(key.as_ref());
                bare.update(iv.as_ref());
            }
        }
        let bare: ChannelBinding = bare.finalize().into();
        assert_ne!(binding, bare);
    }

    #[tokio::test]
    async fn both_ends_of_a_session_have_its_binding_and_no_other_session_does() {
        for suite in SUITES {
            let (server, client) = pair(suite).await;
            assert_eq!(server.channel_binding(), client.channel_binding());
            let (again, _) = pair(suite).await;
            assert_ne!(server.channel_binding(), again.channel_binding());
        }
    }

    #[tokio::test]
    async fn the_client_configuration_is_shared_not_copied() {
        let (server, client) = configs(SUITES[0], memory());
        let (s, c) = ours(server, client.clone()).await;
        // The client's kernel connection holds the configuration itself.
        assert_eq!(Arc::strong_count(&client), 2);
        drop((s, c));
        assert_eq!(Arc::strong_count(&client), 1);
    }
}
