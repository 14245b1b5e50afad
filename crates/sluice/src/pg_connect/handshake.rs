//! The replication connection's own handshake: the socket of the hand-written protocol client
//! and libpq's `sslmode` on it (SSLRequest, then TLS or plaintext).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::adapter::RustlsStream;
use super::explain::{no_tls_message, tls_message};
use super::tls::rustls_config;
use super::url::{PgConnectConfig, SslMode};

/// The socket of a hand-written protocol client: plain TCP, TLS over TCP, or a unix socket.
pub enum PgStream {
    Tcp(tokio::net::TcpStream),
    Tls(Box<RustlsStream<tokio::net::TcpStream>>),
    Unix(tokio::net::UnixStream),
}

impl PgStream {
    /// The `tls-server-end-point` channel binding data, over TLS.
    pub fn server_end_point(&self) -> Option<Vec<u8>> {
        match self {
            Self::Tls(tls) => tls.server_end_point(),
            _ => None,
        }
    }

    /// Whether the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }
}

impl AsyncRead for PgStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PgStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Why the SSLRequest handshake failed.
#[derive(Debug)]
pub enum NegotiateError {
    /// Retrying cannot help (a refused certificate, no TLS under a mode that needs it, bad
    /// files); the message names the setting and the fix.
    Refused(String),
    /// The socket failed.
    Io(io::Error),
}

/// The SSLRequest code (protocol message `SSLRequest`).
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Does what libpq does with `sslmode` on a fresh TCP socket to `host`: no request for
/// `disable` and `allow` (plain first; when the server refuses, the caller tries again with
/// [`PgConnectConfig::with_tls_required`]), SSLRequest otherwise, falling back to plain on `N`
/// for `prefer` only.
///
/// # Errors
///
/// [`NegotiateError`].
pub async fn negotiate_tls(
    mut socket: tokio::net::TcpStream,
    host: &str,
    config: &PgConnectConfig,
) -> Result<PgStream, NegotiateError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if matches!(config.tls.mode, SslMode::Disable | SslMode::Allow) {
        return Ok(PgStream::Tcp(socket));
    }
    let client_config = rustls_config(&config.tls).map_err(|e| NegotiateError::Refused(e.0))?;
    socket
        .write_all(&SSL_REQUEST)
        .await
        .map_err(NegotiateError::Io)?;
    let mut answer = [0u8; 1];
    socket
        .read_exact(&mut answer)
        .await
        .map_err(NegotiateError::Io)?;
    match answer[0] {
        b'S' => {}
        b'N' if config.tls.mode == SslMode::Prefer => return Ok(PgStream::Tcp(socket)),
        b'N' => return Err(NegotiateError::Refused(no_tls_message(config, host))),
        other => {
            return Err(NegotiateError::Refused(format!(
                "the server at {host} answered the TLS request with {other:#04x} instead of S or N: \
                 is it a PostgreSQL server?"
            )));
        }
    }
    let name = ServerName::try_from(host.to_owned()).map_err(|e| {
        NegotiateError::Refused(format!("the host name `{host}` is not valid for TLS: {e}"))
    })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    match connector.connect(name, socket).await {
        Ok(tls) => Ok(PgStream::Tls(Box::new(RustlsStream(tls)))),
        Err(error) => match error
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
        {
            Some(tls_error) => Err(NegotiateError::Refused(tls_message(
                config, host, tls_error,
            ))),
            None => Err(NegotiateError::Io(error)),
        },
    }
}
