//! The PostgreSQL streaming replication protocol, spoken over a plain TCP connection.
//!
//! # Why by hand
//!
//! Upstream `tokio-postgres` 0.7 cannot run the replication protocol: it has no CopyBoth mode,
//! so `START_REPLICATION` cannot be issued through it (the forks that can are not on
//! crates.io). The protocol is small, so sluice speaks it itself over a tokio [`TcpStream`],
//! and leaves the parts that are easy to get subtly wrong to the `postgres-protocol` crate:
//!
//! - frontend messages (startup, query, password, SASL, CopyData, CopyDone, Terminate) are
//!   encoded with `postgres_protocol::message::frontend`;
//! - backend messages are decoded with `postgres_protocol::message::backend::Message::parse`;
//! - MD5 and SCRAM-SHA-256 are computed by `postgres_protocol::authentication::md5_hash` and
//!   `postgres_protocol::authentication::sasl::ScramSha256`.
//!
//! Only the framing of backend messages is done here: `Message::parse` does not know
//! CopyBothResponse (`W`), and it reserves the whole length a frame announces before the
//! bytes arrive, which this module must not do (see backpressure below).
//!
//! # The protocol
//!
//! The startup message carries `replication=database`, which makes the backend a WAL sender
//! bound to one database. After authentication (trust, cleartext password, MD5 or
//! SCRAM-SHA-256) the connection accepts simple queries only: replication commands such as
//! `IDENTIFY_SYSTEM` and `CREATE_REPLICATION_SLOT`, and a few SQL commands. Then
//! `START_REPLICATION SLOT … LOGICAL …` switches it to copy-both mode: the server sends
//! CopyData frames holding XLogData (`w`, one output plugin message each) and primary
//! keepalives (`k`), and the client sends CopyData frames holding standby status updates
//! (`r`), whose flush position becomes the slot's `confirmed_flush_lsn`. Either side ends its
//! direction with CopyDone; after both have, the server completes the command and is ready for
//! queries again. A server that shuts down sends CommandComplete without CopyDone, and an
//! error during streaming arrives as an ErrorResponse.
//!
//! The session settings are fixed in the startup message (`DateStyle=ISO, MDY`,
//! `TimeZone=UTC`, `IntervalStyle=iso_8601`, `extra_float_digits=3`, `bytea_output=hex`,
//! `client_encoding=UTF8`) because pgoutput sends values as text rendered with them, and the
//! decoder relies on one rendering.
//!
//! # Backpressure and cancel safety
//!
//! `ReplicationStream::next` reads from the socket only when no complete frame is buffered,
//! and each read takes at most what the current frame still lacks or `READ_CHUNK` (64 KiB),
//! whichever is more. So the buffer never holds more than one frame plus `READ_CHUNK` (64 KiB),
//! and a caller that stops asking for messages stops the server through TCP flow control. The
//! buffer grows with the bytes that actually arrive, never to a length the server merely
//! announces.
//!
//! The only `.await` inside `ReplicationStream::next` is the socket read (`read_buf`, which is
//! cancel-safe), and the bytes it read stay in the stream's buffer, so the future can be
//! dropped inside `tokio::select!` without losing data. Outgoing messages are queued in a
//! buffer that is drained by the next write: a dropped `ReplicationStream::send_status`
//! future never leaves half a message on the wire.
//!
//! # Limits
//!
//! TLS is not supported yet: `sslmode=require` (and `channel_binding=require`) are refused
//! with a clear error, and `sslmode=prefer` connects without TLS. Unix-socket hosts are
//! refused too; give a TCP host.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::backend::{
    AuthenticationSaslBody, DataRowBody, ErrorFields, ErrorResponseBody, Message,
};
use postgres_protocol::message::frontend;
use sluice_engine::Lsn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::config::{ChannelBinding as ChannelBindingMode, Host};

use crate::pg_connect::{NegotiateError, PgConnectConfig, PgStream, negotiate_tls};
use tokio_postgres::fallible_iterator::FallibleIterator;

/// The most bytes one socket read takes beyond what the frame being assembled still lacks.
const READ_CHUNK: usize = 64 * 1024;
/// How long connecting to one address (TCP, authentication, ReadyForQuery) may take when the
/// URL sets no `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`ReplicationStream::close`] waits for the server to end the stream.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Microseconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01 00:00:00 UTC.
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
/// The length of a backend frame header: the tag byte and the Int32 length.
const HEADER_LEN: usize = 5;

/// What the server says about itself in answer to `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SystemIdentity {
    /// The cluster's unique system identifier, as decimal text.
    pub(crate) systemid: String,
    /// The current timeline.
    pub(crate) timeline: u32,
    /// The current WAL flush position.
    pub(crate) xlogpos: Lsn,
    /// The database the connection is bound to (`None` on a physical replication connection).
    pub(crate) dbname: Option<String>,
}

/// A failure of the replication connection.
///
/// [`ReplicationError::is_retryable`] sorts them: connection trouble and servers that are
/// shutting down or busy are retried; bad credentials, missing slots and wrong server settings
/// need an operator.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicationError {
    /// Opening the TCP connection failed.
    #[error("cannot connect to {address}")]
    Connect {
        /// The `host:port` that was tried.
        address: String,
        /// Why the connection failed.
        #[source]
        source: io::Error,
    },
    /// Connecting and authenticating took longer than the connect timeout.
    #[error("connecting to {address} timed out after {timeout:?}")]
    ConnectTimeout {
        /// The `host:port` that was tried.
        address: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// Reading from or writing to the socket failed.
    #[error("replication connection I/O failed")]
    Io(#[source] io::Error),
    /// The server answered with an ErrorResponse.
    #[error("{severity} {code}: {message}{}{}", Labeled("detail", .detail), Labeled("hint", .hint))]
    Server {
        /// The severity (`ERROR`, `FATAL` or `PANIC`), not localized when the server says so.
        severity: String,
        /// The SQLSTATE.
        code: String,
        /// The primary message.
        message: String,
        /// The detail, if any.
        detail: Option<String>,
        /// The hint, if any.
        hint: Option<String>,
    },
    /// The server sent a message the protocol does not allow at this point.
    #[error("replication protocol violation: {0}")]
    Protocol(String),
    /// The server sent a frame that cannot be decoded.
    #[error("the server sent a malformed {what}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why it could not be decoded.
        #[source]
        source: io::Error,
    },
    /// Authentication cannot be done as the server asks (no password, unsupported method).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The SCRAM-SHA-256 exchange failed on the client side (for example, the server could not
    /// prove that it knows the password).
    #[error("the SCRAM-SHA-256 exchange failed")]
    Scram(#[source] io::Error),
    /// TLS was refused or failed verification; the message names the setting and the fix.
    #[error("{0}")]
    Tls(String),
    /// The connection settings are incomplete.
    #[error("invalid connection settings: {0}")]
    InvalidConfig(String),
    /// The server is not what `target_session_attrs` asks for (e.g. a standby under
    /// `read-write`); retryable, since a standby may be promoted.
    #[error("the server at {address} is {found} (target_session_attrs={wanted})")]
    SessionAttrs {
        /// The host and port.
        address: String,
        /// What it is: `read-only` or `read-write`.
        found: &'static str,
        /// The URL's `target_session_attrs`.
        wanted: &'static str,
    },
    /// A message could not be encoded (a name or value holds a NUL byte).
    #[error("cannot encode a message to the server")]
    Encode(#[source] io::Error),
    /// The server closed the connection, or the stream had already ended.
    #[error("the server closed the replication connection")]
    Closed,
    /// The server did not end the stream in time after the client's CopyDone.
    #[error("the server did not end the replication stream within {0:?}")]
    CloseTimeout(Duration),
}

impl ReplicationError {
    /// The SQLSTATE of a server error.
    pub(crate) fn sqlstate(&self) -> Option<&str> {
        match self {
            Self::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether reconnecting (with backoff) may succeed without an operator.
    ///
    /// Retryable: I/O failures, timeouts, closed connections, protocol violations (the state
    /// of the connection is unknown; a new one starts clean), and server errors other than
    /// the ones below, in particular administrator shutdown (`57P01`, `57P02`, `57P03`), too
    /// many connections (`53300`) and an active slot (`55006`, another consumer or a previous
    /// connection that the server has not noticed as gone yet).
    ///
    /// Not retryable: authentication (client-side failures and class `28`), an unknown database
    /// (`3D000`) or a dropped one (`57P04`), class `42` (`42704` undefined object such as a
    /// missing slot or publication, `42501` insufficient privilege, syntax errors), `55000`
    /// object not in prerequisite state (`wal_level` below `logical`, an invalidated slot),
    /// `0A000` feature not supported, `22023` invalid parameter value (an option pgoutput
    /// rejects), and unsupported or invalid connection settings.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::Io(_)
            | Self::Protocol(_)
            | Self::Malformed { .. }
            | Self::Closed
            | Self::CloseTimeout(_)
            | Self::SessionAttrs { .. } => true,
            Self::Auth(_)
            | Self::Scram(_)
            | Self::Tls(_)
            | Self::InvalidConfig(_)
            | Self::Encode(_) => false,
            Self::Server { code, .. } => {
                let fatal = code.starts_with("28")
                    || code.starts_with("42")
                    || matches!(
                        code.as_str(),
                        "3D000" | "57P04" | "55000" | "0A000" | "22023"
                    );
                !fatal
            }
        }
    }
}

/// Displays an optional field of a server error as `; label: value`, or nothing.
struct Labeled<'a>(&'static str, &'a Option<String>);

impl fmt::Display for Labeled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(value) => write!(f, "; {}: {value}", self.0),
            None => Ok(()),
        }
    }
}

/// A replication connection that is ready for commands, before streaming starts.
///
/// Generic over the socket so that tests can run it over an in-memory pipe; the pipeline
/// uses the default, a [`TcpStream`].
pub(crate) struct ReplicationConnection<S = PgStream> {
    /// The socket and its buffers.
    wire: Wire<S>,
}

impl ReplicationConnection<PgStream> {
    /// Connects with `replication=database` and authenticates, then waits for ReadyForQuery.
    ///
    /// The socket is TCP with TLS as `sslmode` says (the SSLRequest handshake, see
    /// [`negotiate_tls`]) or a unix socket. Authentication may be trust, cleartext password, MD5
    /// or SCRAM-SHA-256, with channel binding (SCRAM-SHA-256-PLUS) over TLS unless
    /// `channel_binding=disable`. The startup message sets `application_name` and the
    /// session settings the decoder relies on (see the module docs). The hosts of `config` are
    /// tried in order; each attempt (TCP connect, authentication, ReadyForQuery) is bounded by
    /// the URL's `connect_timeout`, 10 s when it has none. The socket has `TCP_NODELAY` set,
    /// so status updates are not held back by Nagle's algorithm.
    ///
    /// # Errors
    ///
    /// [`ReplicationError::Tls`] for refused or unverifiable TLS; [`ReplicationError::InvalidConfig`] without a user or a host;
    /// connection, timeout and I/O errors (retryable); authentication failures and other
    /// server errors. With several hosts, the error of the last one is returned.
    pub(crate) async fn connect(
        tls_config: &PgConnectConfig,
        application_name: &str,
    ) -> Result<Self, ReplicationError> {
        let config = &tls_config.pg;
        let settings = StartupSettings::from_config(config, application_name)?;
        let timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let mut last_error = None;
        for target in connect_targets(config)? {
            let address = target.to_string();
            let attempt = tokio::time::timeout(timeout, async {
                let socket = target.connect(tls_config).await?;
                let binding = socket.server_end_point();
                match Self::handshake(socket, &settings, binding).await {
                    // libpq's `allow`: the server refused the plaintext connection
                    // (pg_hba.conf); the same again over TLS.
                    Err(error @ ReplicationError::Server { .. })
                        if tls_config.allow_retries_with_tls()
                            && !matches!(target, ConnectTarget::Unix(..)) =>
                    {
                        tracing::debug!(error = %error, "plaintext refused under sslmode=allow: trying TLS");
                        let socket = target.connect(&tls_config.with_tls_required()).await?;
                        let binding = socket.server_end_point();
                        Self::handshake(socket, &settings, binding).await
                    }
                    other => other,
                }
            });
            let error = match attempt.await {
                Ok(Ok(mut connection)) => {
                    match connection
                        .check_session_attrs(config.get_target_session_attrs(), &address)
                        .await
                    {
                        Ok(()) => return Ok(connection),
                        Err(error) => error,
                    }
                }
                Ok(Err(error)) => error,
                Err(_) => ReplicationError::ConnectTimeout {
                    address: address.clone(),
                    timeout,
                },
            };
            tracing::debug!(address = %address, error = %error, "replication connection attempt failed");
            last_error = Some(error);
        }
        Err(last_error
            .unwrap_or_else(|| ReplicationError::InvalidConfig("the URL names no host".to_owned())))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> ReplicationConnection<S> {
    /// libpq's `target_session_attrs` (`read-write`, `read-only`; `any` checks nothing): asks
    /// the server whether it is read-only (`SHOW transaction_read_only`, as libpq and
    /// tokio-postgres do), so that with several hosts the connection goes to the primary.
    async fn check_session_attrs(
        &mut self,
        attrs: tokio_postgres::config::TargetSessionAttrs,
        address: &str,
    ) -> Result<(), ReplicationError> {
        use tokio_postgres::config::TargetSessionAttrs;
        let (want_read_only, wanted) = match attrs {
            TargetSessionAttrs::ReadWrite => (false, "read-write"),
            TargetSessionAttrs::ReadOnly => (true, "read-only"),
            _ => return Ok(()),
        };
        let rows = self.simple_query("SHOW transaction_read_only").await?;
        let read_only = rows
            .first()
            .and_then(|row| row.first())
            .and_then(|value| value.as_deref())
            == Some("on");
        if read_only == want_read_only {
            return Ok(());
        }
        Err(ReplicationError::SessionAttrs {
            address: address.to_owned(),
            found: if read_only { "read-only" } else { "read-write" },
            wanted,
        })
    }

    /// Runs the startup exchange on an open socket: the startup message, authentication, and
    /// the parameter reports up to ReadyForQuery.
    async fn handshake(
        socket: S,
        settings: &StartupSettings,
        binding: Option<Vec<u8>>,
    ) -> Result<Self, ReplicationError> {
        let mut wire = Wire::new(socket);
        wire.queue(|buf| frontend::startup_message(settings.params(), buf))?;
        wire.send().await?;
        authenticate(&mut wire, settings, binding).await?;
        loop {
            match wire.receive().await? {
                Backend::Message(Message::BackendKeyData(_)) => {}
                Backend::Message(Message::ReadyForQuery(_)) => return Ok(Self { wire }),
                Backend::Message(Message::ErrorResponse(body)) => return Err(server_error(&body)),
                other => return Err(unexpected(&other, "after authentication")),
            }
        }
    }

    /// Runs `IDENTIFY_SYSTEM`.
    ///
    /// # Errors
    ///
    /// Server errors and I/O; [`ReplicationError::Protocol`] when the answer is not one row of
    /// a system identifier, a timeline and an LSN.
    pub(crate) async fn identify_system(&mut self) -> Result<SystemIdentity, ReplicationError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let [row] = rows.as_slice() else {
            return Err(ReplicationError::Protocol(format!(
                "IDENTIFY_SYSTEM returned {} rows, expected 1",
                rows.len()
            )));
        };
        let column = |index: usize| row.get(index).and_then(Option::as_deref);
        let invalid = |name: &str, index: usize| {
            ReplicationError::Protocol(format!(
                "IDENTIFY_SYSTEM returned {name} {:?}",
                column(index)
            ))
        };
        let systemid = column(0).ok_or_else(|| invalid("systemid", 0))?.to_owned();
        let timeline = column(1)
            .and_then(|text| text.parse::<u32>().ok())
            .ok_or_else(|| invalid("timeline", 1))?;
        let xlogpos = column(2)
            .and_then(|text| text.parse::<Lsn>().ok())
            .ok_or_else(|| invalid("xlogpos", 2))?;
        Ok(SystemIdentity {
            systemid,
            timeline,
            xlogpos,
            dbname: column(3).map(str::to_owned),
        })
    }

    /// Runs one command with the simple query protocol and returns its rows as text (`None`
    /// for SQL NULL), for replication commands such as `CREATE_REPLICATION_SLOT` and for
    /// `SHOW`.
    ///
    /// On a server error the result is read to the end, so the connection stays usable. Not
    /// cancel-safe: a dropped future leaves the answer unread and the connection unusable.
    /// Commands that enter copy mode (`START_REPLICATION`) belong to
    /// [`ReplicationConnection::start_logical`].
    ///
    /// # Errors
    ///
    /// The first server error of the command; I/O; [`ReplicationError::Encode`] when `sql`
    /// holds a NUL byte; [`ReplicationError::Protocol`] for a command that enters copy mode.
    pub(crate) async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        self.wire.queue(|buf| frontend::query(sql, buf))?;
        self.wire.send().await?;
        let mut rows = Vec::new();
        let mut failure = None;
        loop {
            match self.wire.receive().await? {
                Backend::Message(
                    Message::RowDescription(_)
                    | Message::CommandComplete(_)
                    | Message::EmptyQueryResponse,
                ) => {}
                Backend::Message(Message::DataRow(body)) => rows.push(data_row(&body)?),
                Backend::Message(Message::ErrorResponse(body)) => {
                    failure.get_or_insert_with(|| server_error(&body));
                }
                Backend::Message(Message::ReadyForQuery(_)) => break,
                other => return Err(unexpected(&other, "in a query result")),
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(rows),
        }
    }

    /// Sends `START_REPLICATION SLOT "slot" LOGICAL start ("name" 'value', …)` and returns the
    /// stream once the server answered with CopyBothResponse.
    ///
    /// The slot and option names are quoted as identifiers and the values as string literals,
    /// so any text is safe. `start` may be [`Lsn::ZERO`]: the server then starts at the slot's
    /// `confirmed_flush_lsn`, which it also does for any earlier position.
    ///
    /// # Errors
    ///
    /// Server errors (a missing slot or publication: `42704`; a slot in use: `55006`;
    /// `wal_level` not logical: `55000`), I/O, and [`ReplicationError::Encode`] for names or
    /// values with a NUL byte.
    pub(crate) async fn start_logical(
        mut self,
        slot: &str,
        start: Lsn,
        options: &[(&str, &str)],
    ) -> Result<ReplicationStream<S>, ReplicationError> {
        let command = start_replication_command(slot, start, options);
        self.wire.queue(|buf| frontend::query(&command, buf))?;
        self.wire.send().await?;
        match self.wire.receive().await? {
            Backend::CopyBothResponse => Ok(ReplicationStream {
                wire: self.wire,
                phase: StreamPhase::Streaming,
            }),
            Backend::Message(Message::ErrorResponse(body)) => Err(server_error(&body)),
            other => Err(unexpected(&other, "in answer to START_REPLICATION")),
        }
    }
}

impl<S> fmt::Debug for ReplicationConnection<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationConnection")
            .field("buffered_bytes", &self.wire.inbound.len())
            .finish_non_exhaustive()
    }
}

/// A message of the logical replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReplicationMessage {
    /// WAL data: with pgoutput, exactly one pgoutput message.
    XLogData {
        /// The WAL position of the data.
        wal_start: Lsn,
        /// The server's current end of WAL.
        wal_end: Lsn,
        /// The server's clock when it sent the message, in microseconds since 2000-01-01.
        server_time_micros: i64,
        /// The output plugin's message, a zero-copy slice of the receive buffer.
        data: Bytes,
    },
    /// A primary keepalive.
    Keepalive {
        /// The server's current end of WAL.
        wal_end: Lsn,
        /// The server's clock when it sent the message, in microseconds since 2000-01-01.
        server_time_micros: i64,
        /// The server wants a status update now, or it will end the connection at
        /// `wal_sender_timeout`.
        reply_requested: bool,
    },
}

/// Where a stream is in ending copy-both mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamPhase {
    /// Both directions are open.
    Streaming,
    /// The server sent CopyDone: it sends no more data, but still takes status updates until
    /// the client's own CopyDone.
    ServerDone,
    /// The command is over: the server sent CommandComplete without CopyDone (a WAL sender
    /// shutting down) or an ErrorResponse.
    Ended,
}

/// A replication connection in copy-both mode, after `START_REPLICATION`.
pub(crate) struct ReplicationStream<S = PgStream> {
    /// The socket and its buffers.
    wire: Wire<S>,
    /// Which directions are still open.
    phase: StreamPhase,
}

impl<S: AsyncRead + AsyncWrite + Unpin> ReplicationStream<S> {
    /// Returns the next message from the server, or `None` once the server ended the copy
    /// stream (CopyDone, or CommandComplete from a WAL sender that shuts down); every later
    /// call returns `None` too.
    ///
    /// Cancel-safe: bytes read before the future is dropped stay buffered in the stream, so
    /// this can be a branch of `tokio::select!`. Notices and parameter reports are logged at
    /// debug level and skipped.
    ///
    /// # Errors
    ///
    /// An ErrorResponse as [`ReplicationError::Server`] (after which the stream has ended);
    /// I/O and [`ReplicationError::Closed`]; protocol violations and malformed messages.
    pub(crate) async fn next(&mut self) -> Result<Option<ReplicationMessage>, ReplicationError> {
        if self.phase != StreamPhase::Streaming {
            return Ok(None);
        }
        match self.wire.receive().await? {
            Backend::Message(Message::CopyData(body)) => {
                parse_copy_data(body.into_bytes()).map(Some)
            }
            Backend::Message(Message::CopyDone) => {
                self.phase = StreamPhase::ServerDone;
                Ok(None)
            }
            Backend::Message(Message::CommandComplete(_)) => {
                tracing::debug!("the wal sender completed the command without copydone");
                self.phase = StreamPhase::Ended;
                Ok(None)
            }
            Backend::Message(Message::ErrorResponse(body)) => {
                self.phase = StreamPhase::Ended;
                Err(server_error(&body))
            }
            other => Err(unexpected(&other, "while streaming")),
        }
    }

    /// Sends a standby status update: the positions written, flushed and applied, the client's
    /// clock, and whether the server should answer at once with a keepalive.
    ///
    /// The flush position is what the server records as the slot's `confirmed_flush_lsn`.
    /// Writes the whole message and flushes the socket. If the future is dropped, the unwritten
    /// rest of the message stays queued and goes out first on the next send, so the stream is
    /// never left with a torn message.
    ///
    /// # Errors
    ///
    /// I/O; [`ReplicationError::Closed`] when the server has already ended the command.
    pub(crate) async fn send_status(
        &mut self,
        write: Lsn,
        flush: Lsn,
        apply: Lsn,
        reply_requested: bool,
    ) -> Result<(), ReplicationError> {
        if self.phase == StreamPhase::Ended {
            return Err(ReplicationError::Closed);
        }
        let update = standby_status_update(write, flush, apply, pg_now_micros(), reply_requested);
        self.wire.queue(|buf| {
            frontend::CopyData::new(&update[..])?.write(buf);
            Ok(())
        })?;
        self.wire.send().await
    }

    /// Ends the stream politely: sends CopyDone, reads (and discards) what the server still
    /// sends until its ReadyForQuery, then sends Terminate and shuts the socket down.
    ///
    /// The whole exchange is bounded by a 5 s timeout, because a WAL sender that is decoding a
    /// large transaction may not look at the client's CopyDone until it is done; the socket is
    /// closed in any case when `self` is dropped.
    ///
    /// # Errors
    ///
    /// [`ReplicationError::CloseTimeout`]; I/O; a server error reported while ending.
    #[allow(
        dead_code,
        reason = "the stream loop drops the stream instead of closing it yet"
    )]
    pub(crate) async fn close(mut self) -> Result<(), ReplicationError> {
        match tokio::time::timeout(CLOSE_TIMEOUT, self.finish()).await {
            Ok(result) => result,
            Err(_) => Err(ReplicationError::CloseTimeout(CLOSE_TIMEOUT)),
        }
    }

    /// The body of [`ReplicationStream::close`], without its timeout.
    async fn finish(&mut self) -> Result<(), ReplicationError> {
        if self.phase == StreamPhase::Ended {
            // The server has ended the command and may be gone already: say goodbye if it
            // still listens.
            self.wire.queue(|buf| {
                frontend::terminate(buf);
                Ok(())
            })?;
            if let Err(error) = self.wire.send().await {
                tracing::debug!(error = %error, "terminate after the end of the stream failed");
            }
            return Ok(());
        }
        self.wire.queue(|buf| {
            frontend::copy_done(buf);
            Ok(())
        })?;
        self.wire.send().await?;
        let mut failure = None;
        loop {
            match self.wire.receive().await? {
                Backend::Message(Message::ReadyForQuery(_)) => break,
                Backend::Message(Message::ErrorResponse(body)) => {
                    failure.get_or_insert_with(|| server_error(&body));
                }
                // The data the server sent before it saw the CopyDone, its own CopyDone, the
                // end of the command and, after a timeline switch, a result row.
                Backend::Message(
                    Message::CopyData(_)
                    | Message::CopyDone
                    | Message::CommandComplete(_)
                    | Message::RowDescription(_)
                    | Message::DataRow(_),
                ) => {}
                other => return Err(unexpected(&other, "while ending the stream")),
            }
        }
        self.phase = StreamPhase::Ended;
        self.wire.queue(|buf| {
            frontend::terminate(buf);
            Ok(())
        })?;
        self.wire.send().await?;
        self.wire
            .socket
            .shutdown()
            .await
            .map_err(ReplicationError::Io)?;
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl<S> fmt::Debug for ReplicationStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationStream")
            .field("phase", &self.phase)
            .field("buffered_bytes", &self.wire.inbound.len())
            .finish_non_exhaustive()
    }
}

/// The startup parameters and credentials taken from the connection URL.
struct StartupSettings {
    /// The role to log in as.
    user: String,
    /// The database to bind the WAL sender to.
    database: String,
    /// The password, if the URL has one.
    password: Option<Vec<u8>>,
    /// Command-line options for the backend (the URL's `options`).
    options: Option<String>,
    /// The `application_name` shown in `pg_stat_replication`.
    application_name: String,
    /// `channel_binding`: whether SCRAM-SHA-256-PLUS is used, or required.
    channel_binding: ChannelBindingMode,
}

impl StartupSettings {
    /// Takes the settings from `config`, refusing what this module cannot do.
    fn from_config(
        config: &tokio_postgres::Config,
        application_name: &str,
    ) -> Result<Self, ReplicationError> {
        let user = config
            .get_user()
            .ok_or_else(|| ReplicationError::InvalidConfig("the URL names no user".to_owned()))?
            .to_owned();
        Ok(Self {
            database: config.get_dbname().unwrap_or(&user).to_owned(),
            password: config.get_password().map(<[u8]>::to_vec),
            options: config.get_options().map(str::to_owned),
            application_name: application_name.to_owned(),
            channel_binding: config.get_channel_binding(),
            user,
        })
    }

    /// The parameters of the startup message.
    fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        [
            ("user", self.user.as_str()),
            ("database", self.database.as_str()),
            ("replication", "database"),
            ("application_name", self.application_name.as_str()),
            ("client_encoding", "UTF8"),
        ]
        .into_iter()
        .chain(SESSION_SETTINGS)
        .chain(self.options.as_deref().map(|options| ("options", options)))
    }
}

/// The settings that decide how values are rendered as text. pgoutput renders with the
/// walsender's session settings and the snapshot reads rows as text on SQL connections, so
/// every connection that reads row values uses these (the replication connection in its
/// startup message, SQL connections with `SET` right after connecting), whatever the role's or
/// database's defaults: the decoder in `value/` relies on one rendering.
pub const SESSION_SETTINGS: [(&str, &str); 5] = [
    ("DateStyle", "ISO, MDY"),
    ("TimeZone", "UTC"),
    ("IntervalStyle", "iso_8601"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
];

/// One address to try.
enum ConnectTarget {
    /// A host name (or IP address as text), resolved when connecting.
    Name(String, u16),
    /// An IP address given as `hostaddr`.
    Address(SocketAddr),
    /// A Unix-socket directory and the port that names the socket file in it.
    Unix(std::path::PathBuf, u16),
}

impl ConnectTarget {
    /// Opens the connection: TCP (with `TCP_NODELAY`, so status updates are not held back by
    /// Nagle's algorithm) and TLS as `sslmode` says, or a unix socket (never TLS, as libpq).
    async fn connect(&self, config: &PgConnectConfig) -> Result<PgStream, ReplicationError> {
        let connect_error = |source| ReplicationError::Connect {
            address: self.to_string(),
            source,
        };
        let (connected, host) = match self {
            Self::Name(host, port) => (
                TcpStream::connect((host.as_str(), *port)).await,
                host.clone(),
            ),
            Self::Address(address) => (TcpStream::connect(address).await, address.ip().to_string()),
            Self::Unix(dir, port) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                return tokio::net::UnixStream::connect(&path)
                    .await
                    .map(PgStream::Unix)
                    .map_err(connect_error);
            }
        };
        let socket = connected.map_err(connect_error)?;
        socket.set_nodelay(true).map_err(connect_error)?;
        negotiate_tls(socket, &host, config)
            .await
            .map_err(|e| match e {
                NegotiateError::Refused(message) => ReplicationError::Tls(message),
                NegotiateError::Io(source) => connect_error(source),
            })
    }
}

impl fmt::Display for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(host, port) => write!(f, "{host}:{port}"),
            Self::Address(address) => write!(f, "{address}"),
            Self::Unix(dir, port) => write!(f, "{}/.s.PGSQL.{port}", dir.display()),
        }
    }
}

/// The addresses of `config` in the order to try them, paired with ports the way
/// `tokio-postgres` pairs them (one port for all hosts, or one per host; 5432 by default).
fn connect_targets(
    config: &tokio_postgres::Config,
) -> Result<Vec<ConnectTarget>, ReplicationError> {
    let hosts = config.get_hosts();
    let hostaddrs = config.get_hostaddrs();
    let ports = config.get_ports();
    if !hosts.is_empty() && !hostaddrs.is_empty() && hosts.len() != hostaddrs.len() {
        return Err(ReplicationError::InvalidConfig(format!(
            "the URL has {} hosts but {} hostaddrs",
            hosts.len(),
            hostaddrs.len()
        )));
    }
    let count = hosts.len().max(hostaddrs.len());
    let targets = (0..count)
        .map(|index| {
            let port = ports
                .get(index)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match (hostaddrs.get(index), hosts.get(index)) {
                (Some(address), _) => ConnectTarget::Address(SocketAddr::new(*address, port)),
                (None, Some(Host::Tcp(host))) => ConnectTarget::Name(host.clone(), port),
                (None, Some(Host::Unix(path))) => ConnectTarget::Unix(path.clone(), port),
                (None, None) => ConnectTarget::Name("localhost".to_owned(), port),
            }
        })
        .collect();
    Ok(targets)
}

/// A decoded backend message.
enum Backend {
    /// A message `postgres-protocol` decodes.
    Message(Message),
    /// CopyBothResponse, which `postgres-protocol` does not know; its column formats are not
    /// needed.
    CopyBothResponse,
}

/// The socket with its inbound and outbound buffers.
struct Wire<S> {
    /// The connection to the server.
    socket: S,
    /// Bytes read and not yet consumed: at most one frame plus [`READ_CHUNK`] bytes.
    inbound: BytesMut,
    /// Encoded messages not yet written.
    outbound: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Wire<S> {
    /// Wraps a connected socket.
    fn new(socket: S) -> Self {
        Self {
            socket,
            inbound: BytesMut::with_capacity(READ_CHUNK),
            outbound: BytesMut::new(),
        }
    }

    /// Returns the next message, skipping (and logging) notices and parameter reports.
    ///
    /// Cancel-safe: the only `.await` is the socket read in [`Wire::fill`].
    async fn receive(&mut self) -> Result<Backend, ReplicationError> {
        loop {
            let Some(frame) = self.take_frame()? else {
                self.fill().await?;
                continue;
            };
            match decode(frame)? {
                Some(Backend::Message(Message::NoticeResponse(body))) => log_notice(body.fields()),
                Some(Backend::Message(Message::ParameterStatus(body))) => {
                    tracing::debug!(
                        name = body.name().unwrap_or_default(),
                        value = body.value().unwrap_or_default(),
                        "server parameter"
                    );
                }
                Some(message) => return Ok(message),
                None => {}
            }
        }
    }

    /// Splits the first frame off the buffer if it is complete.
    fn take_frame(&mut self) -> Result<Option<BytesMut>, ReplicationError> {
        if self.inbound.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = frame_len(&self.inbound)?;
        if self.inbound.len() < len {
            return Ok(None);
        }
        Ok(Some(self.inbound.split_to(len)))
    }

    /// Reads more bytes: at most what the first frame still lacks or [`READ_CHUNK`], whichever
    /// is more, into a buffer that grows with what arrives (doubling at most), not with what a
    /// header announces.
    async fn fill(&mut self) -> Result<(), ReplicationError> {
        let buffered = self.inbound.len();
        let missing = if buffered < HEADER_LEN {
            HEADER_LEN - buffered
        } else {
            frame_len(&self.inbound)?.saturating_sub(buffered).max(1)
        };
        let limit = missing.max(READ_CHUNK);
        self.inbound.reserve(limit.min(buffered.max(READ_CHUNK)));
        let read = self
            .socket
            .read_buf(&mut (&mut self.inbound).limit(limit))
            .await
            .map_err(ReplicationError::Io)?;
        if read == 0 {
            return Err(ReplicationError::Closed);
        }
        Ok(())
    }

    /// Appends an encoded message to the outbound buffer; on failure nothing is appended.
    fn queue(
        &mut self,
        encode: impl FnOnce(&mut BytesMut) -> io::Result<()>,
    ) -> Result<(), ReplicationError> {
        let mark = self.outbound.len();
        match encode(&mut self.outbound) {
            Ok(()) => Ok(()),
            Err(source) => {
                self.outbound.truncate(mark);
                Err(ReplicationError::Encode(source))
            }
        }
    }

    /// Writes out everything queued and flushes the socket.
    ///
    /// If the future is dropped, what was not written stays queued for the next call.
    async fn send(&mut self) -> Result<(), ReplicationError> {
        while !self.outbound.is_empty() {
            let written = self
                .socket
                .write_buf(&mut self.outbound)
                .await
                .map_err(ReplicationError::Io)?;
            if written == 0 {
                return Err(ReplicationError::Io(io::ErrorKind::WriteZero.into()));
            }
        }
        self.socket.flush().await.map_err(ReplicationError::Io)
    }
}

/// The total length (tag included) of the frame whose header starts `buffer`.
fn frame_len(buffer: &[u8]) -> Result<usize, ReplicationError> {
    let header = buffer
        .get(1..HEADER_LEN)
        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
        .ok_or_else(|| ReplicationError::Protocol("a frame header is incomplete".to_owned()))?;
    let len = i32::from_be_bytes(header);
    match usize::try_from(len) {
        Ok(len) if len >= 4 => Ok(len + 1),
        _ => Err(ReplicationError::Protocol(format!(
            "the server sent a frame of length {len}"
        ))),
    }
}

/// Decodes one complete frame; `None` for messages that are skipped (NegotiateProtocolVersion,
/// which is only sent in answer to options sluice does not request).
fn decode(mut frame: BytesMut) -> Result<Option<Backend>, ReplicationError> {
    match frame.first() {
        Some(b'W') => Ok(Some(Backend::CopyBothResponse)),
        Some(b'v') => {
            tracing::debug!("the server sent negotiateprotocolversion");
            Ok(None)
        }
        _ => match Message::parse(&mut frame) {
            Ok(Some(message)) => Ok(Some(Backend::Message(message))),
            Ok(None) => Err(ReplicationError::Protocol(
                "a frame ended before its announced length".to_owned(),
            )),
            Err(source) => Err(ReplicationError::Malformed {
                what: "backend message",
                source,
            }),
        },
    }
}

/// Runs the authentication exchange up to AuthenticationOk.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    wire: &mut Wire<S>,
    settings: &StartupSettings,
    binding: Option<Vec<u8>>,
) -> Result<(), ReplicationError> {
    let mut bound = false;
    let password = || {
        settings.password.as_deref().ok_or_else(|| {
            ReplicationError::Auth("the server asks for a password but the URL has none".to_owned())
        })
    };
    loop {
        match wire.receive().await? {
            Backend::Message(Message::AuthenticationOk) => {
                if settings.channel_binding == ChannelBindingMode::Require && !bound {
                    return Err(ReplicationError::Auth(
                        "channel_binding=require but the server authenticated without \
                         SCRAM-SHA-256-PLUS (it needs TLS and scram-sha-256 in pg_hba.conf): use \
                         sslmode=verify-full with a scram-sha-256 role, or channel_binding=prefer"
                            .to_owned(),
                    ));
                }
                return Ok(());
            }
            Backend::Message(Message::AuthenticationCleartextPassword) => {
                let password = password()?;
                wire.queue(|buf| frontend::password_message(password, buf))?;
                wire.send().await?;
            }
            Backend::Message(Message::AuthenticationMd5Password(body)) => {
                let hash = md5_hash(settings.user.as_bytes(), password()?, body.salt());
                wire.queue(|buf| frontend::password_message(hash.as_bytes(), buf))?;
                wire.send().await?;
            }
            Backend::Message(Message::AuthenticationSasl(body)) => {
                let binding = match settings.channel_binding {
                    ChannelBindingMode::Disable => None,
                    _ => binding.clone(),
                };
                bound = scram_sha_256(wire, &body, password()?, binding).await?;
            }
            Backend::Message(Message::ErrorResponse(body)) => return Err(server_error(&body)),
            Backend::Message(
                Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential
                | Message::AuthenticationGss
                | Message::AuthenticationGssContinue(_)
                | Message::AuthenticationSspi,
            ) => {
                return Err(ReplicationError::Auth(
                    "the server asks for Kerberos, GSSAPI, SSPI or SCM authentication, which sluice does not support: use scram-sha-256, md5, password or trust in pg_hba.conf".to_owned(),
                ));
            }
            other => return Err(unexpected(&other, "during authentication")),
        }
    }
}

/// Runs a SCRAM-SHA-256 exchange up to the server's final message, with channel binding
/// (SCRAM-SHA-256-PLUS, `tls-server-end-point`) when `binding` is given and the server offers
/// it. Returns whether the exchange was channel-bound.
async fn scram_sha_256<S: AsyncRead + AsyncWrite + Unpin>(
    wire: &mut Wire<S>,
    offer: &AuthenticationSaslBody,
    password: &[u8],
    binding: Option<Vec<u8>>,
) -> Result<bool, ReplicationError> {
    let mut mechanisms = offer.mechanisms();
    let mut offered = false;
    let mut offered_plus = false;
    while let Some(mechanism) = mechanisms
        .next()
        .map_err(|source| ReplicationError::Malformed {
            what: "list of SASL mechanisms",
            source,
        })?
    {
        offered |= mechanism == sasl::SCRAM_SHA_256;
        offered_plus |= mechanism == sasl::SCRAM_SHA_256_PLUS;
    }
    if !offered {
        return Err(ReplicationError::Auth(
            "the server offers no SASL mechanism sluice supports (SCRAM-SHA-256 without channel binding)".to_owned(),
        ));
    }
    let (mechanism, channel_binding, bound) = match binding {
        Some(hash) if offered_plus => (
            sasl::SCRAM_SHA_256_PLUS,
            ChannelBinding::tls_server_end_point(hash),
            true,
        ),
        // TLS without PLUS on offer: tell the server the client could bind (`y`), so a
        // stripped offer is detected; without TLS: `n`.
        Some(_) => (sasl::SCRAM_SHA_256, ChannelBinding::unrequested(), false),
        None => (sasl::SCRAM_SHA_256, ChannelBinding::unsupported(), false),
    };
    let mut scram = ScramSha256::new(password, channel_binding);
    wire.queue(|buf| frontend::sasl_initial_response(mechanism, scram.message(), buf))?;
    wire.send().await?;
    match wire.receive().await? {
        Backend::Message(Message::AuthenticationSaslContinue(body)) => {
            scram.update(body.data()).map_err(ReplicationError::Scram)?
        }
        Backend::Message(Message::ErrorResponse(body)) => return Err(server_error(&body)),
        other => return Err(unexpected(&other, "instead of SASL continue")),
    }
    wire.queue(|buf| frontend::sasl_response(scram.message(), buf))?;
    wire.send().await?;
    match wire.receive().await? {
        Backend::Message(Message::AuthenticationSaslFinal(body)) => scram
            .finish(body.data())
            .map(|()| bound)
            .map_err(ReplicationError::Scram),
        Backend::Message(Message::ErrorResponse(body)) => Err(server_error(&body)),
        other => Err(unexpected(&other, "instead of SASL final")),
    }
}

/// Builds the `START_REPLICATION` command with quoted names and values.
fn start_replication_command(slot: &str, start: Lsn, options: &[(&str, &str)]) -> String {
    let mut command = format!(
        "START_REPLICATION SLOT {} LOGICAL {start}",
        quote_identifier(slot)
    );
    if !options.is_empty() {
        let options: Vec<String> = options
            .iter()
            .map(|(name, value)| format!("{} {}", quote_identifier(name), quote_literal(value)))
            .collect();
        command.push_str(" (");
        command.push_str(&options.join(", "));
        command.push(')');
    }
    command
}

// The replication command grammar quotes as SQL does (its string literals have no backslash
// escapes).
use crate::sql::{quote_ident as quote_identifier, quote_pg_literal as quote_literal};

/// Decodes the payload of a CopyData frame from the server.
fn parse_copy_data(mut body: Bytes) -> Result<ReplicationMessage, ReplicationError> {
    let short = |what: &str| ReplicationError::Protocol(format!("a {what} message is too short"));
    if body.is_empty() {
        return Err(ReplicationError::Protocol(
            "an empty CopyData message".to_owned(),
        ));
    }
    match body.get_u8() {
        b'w' => {
            if body.remaining() < 24 {
                return Err(short("XLogData"));
            }
            Ok(ReplicationMessage::XLogData {
                wal_start: Lsn(body.get_u64()),
                wal_end: Lsn(body.get_u64()),
                server_time_micros: body.get_i64(),
                data: body,
            })
        }
        b'k' => {
            if body.remaining() < 17 {
                return Err(short("primary keepalive"));
            }
            Ok(ReplicationMessage::Keepalive {
                wal_end: Lsn(body.get_u64()),
                server_time_micros: body.get_i64(),
                reply_requested: body.get_u8() == 1,
            })
        }
        tag => Err(ReplicationError::Protocol(format!(
            "unknown CopyData message type {:?}",
            char::from(tag)
        ))),
    }
}

/// Encodes the payload of a standby status update (`r`).
fn standby_status_update(
    write: Lsn,
    flush: Lsn,
    apply: Lsn,
    client_time_micros: i64,
    reply_requested: bool,
) -> BytesMut {
    let mut update = BytesMut::with_capacity(34);
    update.put_u8(b'r');
    update.put_u64(write.0);
    update.put_u64(flush.0);
    update.put_u64(apply.0);
    update.put_i64(client_time_micros);
    update.put_u8(u8::from(reply_requested));
    update
}

/// The current time in microseconds since 2000-01-01 00:00:00 UTC.
fn pg_now_micros() -> i64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_unix.as_micros())
        .unwrap_or(i64::MAX)
        .saturating_sub(PG_EPOCH_UNIX_MICROS)
}

/// The text columns of a DataRow.
fn data_row(body: &DataRowBody) -> Result<Vec<Option<String>>, ReplicationError> {
    let malformed = |source| ReplicationError::Malformed {
        what: "DataRow",
        source,
    };
    let buffer = body.buffer();
    let mut row = Vec::new();
    let mut ranges = body.ranges();
    while let Some(range) = ranges.next().map_err(malformed)? {
        let value =
            match range.and_then(|range| buffer.get(range)) {
                Some(bytes) => Some(String::from_utf8(bytes.to_vec()).map_err(|error| {
                    malformed(io::Error::new(io::ErrorKind::InvalidData, error))
                })?),
                None => None,
            };
        row.push(value);
    }
    Ok(row)
}

/// The fields of an ErrorResponse or NoticeResponse that sluice reports.
#[derive(Default)]
struct ServerFields {
    /// `S`: the severity, possibly localized.
    severity: Option<String>,
    /// `V`: the severity, never localized (PostgreSQL 9.6 and later).
    severity_plain: Option<String>,
    /// `C`: the SQLSTATE.
    code: Option<String>,
    /// `M`: the primary message.
    message: Option<String>,
    /// `D`: the detail.
    detail: Option<String>,
    /// `H`: the hint.
    hint: Option<String>,
}

impl ServerFields {
    /// Collects the fields; a malformed tail ends the collection instead of hiding the fields
    /// before it.
    fn collect(mut fields: ErrorFields<'_>) -> Self {
        let mut collected = Self::default();
        while let Ok(Some(field)) = fields.next() {
            let value = || Some(String::from_utf8_lossy(field.value_bytes()).into_owned());
            match field.type_() {
                b'S' => collected.severity = value(),
                b'V' => collected.severity_plain = value(),
                b'C' => collected.code = value(),
                b'M' => collected.message = value(),
                b'D' => collected.detail = value(),
                b'H' => collected.hint = value(),
                _ => {}
            }
        }
        collected
    }

    /// The non-localized severity if the server sent it, else the localized one.
    fn severity(&mut self) -> String {
        self.severity_plain
            .take()
            .or_else(|| self.severity.take())
            .unwrap_or_else(|| "ERROR".to_owned())
    }
}

/// Turns an ErrorResponse into [`ReplicationError::Server`].
fn server_error(body: &ErrorResponseBody) -> ReplicationError {
    let mut fields = ServerFields::collect(body.fields());
    ReplicationError::Server {
        severity: fields.severity(),
        code: fields.code.take().unwrap_or_default(),
        message: fields.message.take().unwrap_or_default(),
        detail: fields.detail.take(),
        hint: fields.hint.take(),
    }
}

/// Logs a NoticeResponse at debug level.
fn log_notice(fields: ErrorFields<'_>) {
    let mut fields = ServerFields::collect(fields);
    tracing::debug!(
        severity = %fields.severity(),
        code = fields.code.as_deref().unwrap_or_default(),
        message = fields.message.as_deref().unwrap_or_default(),
        "server notice"
    );
}

/// A protocol violation: `message` arrived `when` it may not.
fn unexpected(message: &Backend, when: &str) -> ReplicationError {
    ReplicationError::Protocol(format!("unexpected {} {when}", message_name(message)))
}

/// The protocol name of a backend message, for errors.
fn message_name(message: &Backend) -> &'static str {
    let Backend::Message(message) = message else {
        return "CopyBothResponse";
    };
    match message {
        Message::AuthenticationOk
        | Message::AuthenticationCleartextPassword
        | Message::AuthenticationMd5Password(_)
        | Message::AuthenticationSasl(_)
        | Message::AuthenticationSaslContinue(_)
        | Message::AuthenticationSaslFinal(_)
        | Message::AuthenticationKerberosV5
        | Message::AuthenticationScmCredential
        | Message::AuthenticationGss
        | Message::AuthenticationGssContinue(_)
        | Message::AuthenticationSspi => "authentication request",
        Message::BackendKeyData(_) => "BackendKeyData",
        Message::CommandComplete(_) => "CommandComplete",
        Message::CopyData(_) => "CopyData",
        Message::CopyDone => "CopyDone",
        Message::CopyInResponse(_) => "CopyInResponse",
        Message::CopyOutResponse(_) => "CopyOutResponse",
        Message::DataRow(_) => "DataRow",
        Message::EmptyQueryResponse => "EmptyQueryResponse",
        Message::ErrorResponse(_) => "ErrorResponse",
        Message::NoticeResponse(_) => "NoticeResponse",
        Message::NotificationResponse(_) => "NotificationResponse",
        Message::ParameterStatus(_) => "ParameterStatus",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        Message::RowDescription(_) => "RowDescription",
        _ => "extended-query message",
    }
}

/// Hostile server bytes, tried systematically (see [`crate::hostile`]).
#[cfg(test)]
#[path = "replication_hostile.rs"]
mod hostile;

#[cfg(test)]
mod tests {

    use tokio::io::{DuplexStream, duplex};

    use super::*;

    /// A frame as the server sends it.
    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut frame = vec![tag];
        frame.extend_from_slice(&(i32::try_from(body.len()).unwrap() + 4).to_be_bytes());
        frame.extend_from_slice(body);
        frame
    }

    /// A CopyData frame with an XLogData payload.
    fn xlog_data(start: u64, end: u64, time: i64, data: &[u8]) -> Vec<u8> {
        let mut payload = vec![b'w'];
        payload.extend_from_slice(&start.to_be_bytes());
        payload.extend_from_slice(&end.to_be_bytes());
        payload.extend_from_slice(&time.to_be_bytes());
        payload.extend_from_slice(data);
        frame(b'd', &payload)
    }

    /// A CopyData frame with a primary keepalive payload.
    fn keepalive(end: u64, time: i64, reply: bool) -> Vec<u8> {
        let mut payload = vec![b'k'];
        payload.extend_from_slice(&end.to_be_bytes());
        payload.extend_from_slice(&time.to_be_bytes());
        payload.push(u8::from(reply));
        frame(b'd', &payload)
    }

    /// An ErrorResponse (`E`) or NoticeResponse (`N`) frame.
    fn fields_frame(tag: u8, fields: &[(u8, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (code, value) in fields {
            body.push(*code);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        frame(tag, &body)
    }

    /// An authentication request frame.
    fn auth(code: i32, extra: &[u8]) -> Vec<u8> {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(extra);
        frame(b'R', &body)
    }

    /// A ParameterStatus frame.
    fn parameter_status(name: &str, value: &str) -> Vec<u8> {
        frame(b'S', format!("{name}\0{value}\0").as_bytes())
    }

    /// A CommandComplete frame.
    fn command_complete(tag: &str) -> Vec<u8> {
        frame(b'C', format!("{tag}\0").as_bytes())
    }

    /// A ReadyForQuery frame (idle).
    fn ready() -> Vec<u8> {
        frame(b'Z', b"I")
    }

    /// A RowDescription frame with no column details (the client ignores them).
    fn row_description() -> Vec<u8> {
        frame(b'T', &[0, 0])
    }

    /// A DataRow frame.
    fn data_row_frame(values: &[Option<&str>]) -> Vec<u8> {
        let mut body = i16::try_from(values.len()).unwrap().to_be_bytes().to_vec();
        for value in values {
            match value {
                Some(value) => {
                    body.extend_from_slice(&i32::try_from(value.len()).unwrap().to_be_bytes());
                    body.extend_from_slice(value.as_bytes());
                }
                None => body.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        frame(b'D', &body)
    }

    /// The server end of an in-memory connection.
    struct FakeServer {
        /// The server's side of the pipe.
        socket: DuplexStream,
    }

    impl FakeServer {
        /// Sends raw bytes to the client.
        async fn send(&mut self, bytes: &[u8]) {
            self.socket.write_all(bytes).await.unwrap();
        }

        /// Reads the startup message and returns its parameters.
        async fn startup(&mut self) -> Vec<(String, String)> {
            let len = self.socket.read_i32().await.unwrap();
            let mut body = vec![0; usize::try_from(len).unwrap() - 4];
            self.socket.read_exact(&mut body).await.unwrap();
            assert_eq!(body[..4], 196_608i32.to_be_bytes(), "protocol 3.0");
            let text = String::from_utf8(body[4..].to_vec()).unwrap();
            let parts: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
            parts
                .chunks(2)
                .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
                .collect()
        }

        /// Reads one tagged frontend message.
        async fn message(&mut self) -> (u8, Vec<u8>) {
            let tag = self.socket.read_u8().await.unwrap();
            let len = self.socket.read_i32().await.unwrap();
            let mut body = vec![0; usize::try_from(len).unwrap() - 4];
            self.socket.read_exact(&mut body).await.unwrap();
            (tag, body)
        }

        /// Reads a Query message and returns its text.
        async fn query(&mut self) -> String {
            let (tag, body) = self.message().await;
            assert_eq!(tag, b'Q');
            String::from_utf8(body.strip_suffix(b"\0").unwrap().to_vec()).unwrap()
        }
    }

    /// A connected pipe with `capacity` bytes of buffering in each direction.
    fn pipe(capacity: usize) -> (DuplexStream, FakeServer) {
        let (client, server) = duplex(capacity);
        (client, FakeServer { socket: server })
    }

    /// A stream in copy-both mode over a pipe.
    fn streaming(capacity: usize) -> (ReplicationStream<DuplexStream>, FakeServer) {
        let (client, server) = pipe(capacity);
        let stream = ReplicationStream {
            wire: Wire::new(client),
            phase: StreamPhase::Streaming,
        };
        (stream, server)
    }

    /// A connection that has finished the handshake, over a pipe.
    fn ready_connection() -> (ReplicationConnection<DuplexStream>, FakeServer) {
        let (client, server) = pipe(1 << 16);
        (
            ReplicationConnection {
                wire: Wire::new(client),
            },
            server,
        )
    }

    /// Startup settings for handshakes over a pipe.
    fn settings(password: Option<&str>) -> StartupSettings {
        StartupSettings {
            user: "sluice".to_owned(),
            database: "shop".to_owned(),
            password: password.map(|password| password.as_bytes().to_vec()),
            options: None,
            application_name: "sluice-test".to_owned(),
            channel_binding: ChannelBindingMode::Prefer,
        }
    }

    fn server_error_with_code(code: &str) -> ReplicationError {
        ReplicationError::Server {
            severity: "ERROR".to_owned(),
            code: code.to_owned(),
            message: "m".to_owned(),
            detail: None,
            hint: None,
        }
    }

    #[test]
    fn copy_data_payloads_decode() {
        let frame = xlog_data(0x10, 0x20, 5, b"Bxyz");
        let message = parse_copy_data(Bytes::copy_from_slice(&frame[5..])).unwrap();
        assert_eq!(
            message,
            ReplicationMessage::XLogData {
                wal_start: Lsn(0x10),
                wal_end: Lsn(0x20),
                server_time_micros: 5,
                data: Bytes::from_static(b"Bxyz"),
            }
        );
        let frame = keepalive(0x30, 7, true);
        let message = parse_copy_data(Bytes::copy_from_slice(&frame[5..])).unwrap();
        assert_eq!(
            message,
            ReplicationMessage::Keepalive {
                wal_end: Lsn(0x30),
                server_time_micros: 7,
                reply_requested: true,
            }
        );
        for bad in [&b""[..], b"w123", b"k", b"k12345678", b"x"] {
            assert!(matches!(
                parse_copy_data(Bytes::copy_from_slice(bad)),
                Err(ReplicationError::Protocol(_))
            ));
        }
    }

    #[test]
    fn standby_status_update_has_the_documented_layout() {
        let update = standby_status_update(Lsn(1), Lsn(2), Lsn(3), 4, true);
        let mut expected = vec![b'r'];
        for value in [1u64, 2, 3, 4] {
            expected.extend_from_slice(&value.to_be_bytes());
        }
        expected.push(1);
        assert_eq!(&update[..], &expected[..]);
        assert_eq!(
            standby_status_update(Lsn(1), Lsn(2), Lsn(3), 4, false)[33],
            0
        );
        // The client clock is after 2024 in PostgreSQL's epoch.
        assert!(pg_now_micros() > 24 * 365 * 86_400 * 1_000_000);
    }

    #[test]
    fn start_replication_quotes_names_and_values() {
        assert_eq!(
            start_replication_command(
                "slot\"x",
                Lsn(0x16_B374_D848),
                &[("proto_version", "1"), ("publication_names", "a'b")]
            ),
            "START_REPLICATION SLOT \"slot\"\"x\" LOGICAL 16/B374D848 (\"proto_version\" '1', \"publication_names\" 'a''b')"
        );
        assert_eq!(
            start_replication_command("s", Lsn::ZERO, &[]),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
        );
    }

    #[test]
    fn errors_are_sorted_into_retryable_and_fatal() {
        for code in [
            "57P01", "57P02", "57P03", "53300", "55006", "08006", "XX000",
        ] {
            assert!(server_error_with_code(code).is_retryable(), "{code}");
        }
        for code in [
            "28P01", "28000", "42704", "55000", "42501", "42601", "3D000", "57P04", "22023",
        ] {
            assert!(!server_error_with_code(code).is_retryable(), "{code}");
        }
        assert!(ReplicationError::Closed.is_retryable());
        assert!(ReplicationError::Io(io::ErrorKind::ConnectionReset.into()).is_retryable());
        assert!(!ReplicationError::Auth("no password".to_owned()).is_retryable());
        assert!(!ReplicationError::Tls("unknown CA".to_owned()).is_retryable());
        assert_eq!(server_error_with_code("42704").sqlstate(), Some("42704"));
        assert_eq!(ReplicationError::Closed.sqlstate(), None);
    }

    #[tokio::test]
    async fn messages_and_interleaved_reports_decode_from_one_read() {
        let (mut stream, mut server) = streaming(1 << 16);
        let mut bytes = fields_frame(b'N', &[(b'S', "WARNING"), (b'M', "careful")]);
        bytes.extend(parameter_status("TimeZone", "UTC"));
        bytes.extend(xlog_data(0x10, 0x20, 5, b"Bxyz"));
        bytes.extend(keepalive(0x30, 7, false));
        server.send(&bytes).await;
        let Some(ReplicationMessage::XLogData { data, .. }) = stream.next().await.unwrap() else {
            panic!("expected XLogData");
        };
        assert_eq!(&data[..], b"Bxyz");
        assert!(matches!(
            stream.next().await.unwrap(),
            Some(ReplicationMessage::Keepalive {
                wal_end: Lsn(0x30),
                reply_requested: false,
                ..
            })
        ));
        assert!(stream.wire.inbound.is_empty());
    }

    #[tokio::test]
    async fn frames_split_across_reads_are_reassembled() {
        let (mut stream, mut server) = streaming(1 << 16);
        let mut bytes = xlog_data(0x10, 0x20, 5, b"Ixyz");
        bytes.extend(keepalive(0x30, 7, true));
        let writer = tokio::spawn(async move {
            for byte in bytes {
                server.send(&[byte]).await;
                tokio::task::yield_now().await;
            }
            server
        });
        let Some(ReplicationMessage::XLogData {
            data, wal_start, ..
        }) = stream.next().await.unwrap()
        else {
            panic!("expected XLogData");
        };
        assert_eq!((wal_start, &data[..]), (Lsn(0x10), &b"Ixyz"[..]));
        assert!(matches!(
            stream.next().await.unwrap(),
            Some(ReplicationMessage::Keepalive {
                reply_requested: true,
                ..
            })
        ));
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_next_loses_no_bytes() {
        let (mut stream, mut server) = streaming(1 << 16);
        let bytes = xlog_data(0x10, 0x20, 5, b"Ixyz");
        server.send(&bytes[..12]).await;
        tokio::select! {
            biased;
            _ = stream.next() => panic!("a partial frame must not complete"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        assert_eq!(
            stream.wire.inbound.len(),
            12,
            "the partial frame stays buffered"
        );
        server.send(&bytes[12..]).await;
        let Some(ReplicationMessage::XLogData { data, .. }) = stream.next().await.unwrap() else {
            panic!("expected XLogData");
        };
        assert_eq!(&data[..], b"Ixyz");
    }

    #[tokio::test]
    async fn reads_take_at_most_one_frame_plus_a_chunk() {
        let (mut stream, mut server) = streaming(8 << 20);
        let payload = vec![b'I'; 256 * 1024];
        let mut bytes = Vec::new();
        for index in 0..8 {
            bytes.extend(xlog_data(index, index, 0, &payload));
        }
        server.send(&bytes).await;
        for index in 0..8 {
            let Some(ReplicationMessage::XLogData {
                wal_start, data, ..
            }) = stream.next().await.unwrap()
            else {
                panic!("expected XLogData");
            };
            assert_eq!((wal_start, data.len()), (Lsn(index), payload.len()));
            assert!(
                stream.wire.inbound.len() <= READ_CHUNK,
                "buffered {} bytes beyond the frame",
                stream.wire.inbound.len()
            );
        }
    }

    #[tokio::test]
    async fn an_announced_length_is_not_allocated_up_front() {
        let (mut stream, mut server) = streaming(1 << 16);
        let mut bytes = vec![b'd'];
        bytes.extend_from_slice(&(1i32 << 30).to_be_bytes());
        bytes.extend_from_slice(&[0; 100]);
        server.send(&bytes).await;
        drop(server);
        assert!(matches!(stream.next().await, Err(ReplicationError::Closed)));
        assert!(stream.wire.inbound.capacity() < 1 << 20);
    }

    #[tokio::test]
    async fn malformed_frames_are_errors() {
        let cases: [(&str, Vec<u8>); 4] = [
            ("negative length", vec![b'd', 0xff, 0xff, 0xff, 0xff]),
            ("length below 4", vec![b'd', 0, 0, 0, 3]),
            ("unknown tag", frame(b'?', b"")),
            ("short ReadyForQuery", frame(b'Z', b"")),
        ];
        for (case, bytes) in cases {
            let (mut stream, mut server) = streaming(1 << 16);
            server.send(&bytes).await;
            let error = stream.next().await.unwrap_err();
            assert!(
                matches!(
                    error,
                    ReplicationError::Protocol(_) | ReplicationError::Malformed { .. }
                ),
                "{case}: {error:?}"
            );
        }
        let (mut stream, mut server) = streaming(1 << 16);
        server.send(&frame(b'Z', b"I")).await;
        assert!(matches!(
            stream.next().await,
            Err(ReplicationError::Protocol(text)) if text.contains("ReadyForQuery")
        ));
    }

    #[tokio::test]
    async fn an_error_response_while_streaming_is_a_server_error() {
        let (mut stream, mut server) = streaming(1 << 16);
        server
            .send(&fields_frame(
                b'E',
                &[
                    (b'S', "FEHLER"),
                    (b'V', "ERROR"),
                    (b'C', "55000"),
                    (b'M', "cannot read from logical replication slot \"s\""),
                    (b'D', "This slot has been invalidated."),
                    (b'H', "Recreate the slot."),
                ],
            ))
            .await;
        let error = stream.next().await.unwrap_err();
        let ReplicationError::Server {
            severity,
            code,
            detail,
            hint,
            ..
        } = &error
        else {
            panic!("expected a server error, got {error:?}");
        };
        assert_eq!((severity.as_str(), code.as_str()), ("ERROR", "55000"));
        assert_eq!(detail.as_deref(), Some("This slot has been invalidated."));
        assert_eq!(hint.as_deref(), Some("Recreate the slot."));
        assert_eq!(
            error.to_string(),
            "ERROR 55000: cannot read from logical replication slot \"s\"; detail: This slot has been invalidated.; hint: Recreate the slot."
        );
        assert!(!error.is_retryable());
        assert!(
            stream.next().await.unwrap().is_none(),
            "the stream has ended"
        );
        assert!(matches!(
            stream.send_status(Lsn(1), Lsn(1), Lsn(1), false).await,
            Err(ReplicationError::Closed)
        ));
    }

    #[tokio::test]
    async fn copy_done_and_command_complete_end_the_stream() {
        let (mut stream, mut server) = streaming(1 << 16);
        server.send(&frame(b'c', b"")).await;
        assert!(stream.next().await.unwrap().is_none());
        assert!(
            stream.next().await.unwrap().is_none(),
            "no read after the end"
        );
        assert_eq!(stream.phase, StreamPhase::ServerDone);

        let (mut stream, mut server) = streaming(1 << 16);
        server.send(&command_complete("COPY 0")).await;
        assert!(stream.next().await.unwrap().is_none());
        assert_eq!(stream.phase, StreamPhase::Ended);
        drop(server);
        stream.close().await.unwrap();

        let (mut stream, server) = streaming(1 << 16);
        drop(server);
        assert!(matches!(stream.next().await, Err(ReplicationError::Closed)));
    }

    #[tokio::test]
    async fn md5_handshake_sends_the_session_settings() {
        let (client, mut server) = pipe(1 << 16);
        let settings = settings(Some("pw"));
        let handshake =
            tokio::spawn(
                async move { ReplicationConnection::handshake(client, &settings, None).await },
            );
        let params = server.startup().await;
        for expected in [
            ("user", "sluice"),
            ("database", "shop"),
            ("replication", "database"),
            ("application_name", "sluice-test"),
            ("DateStyle", "ISO, MDY"),
            ("TimeZone", "UTC"),
            ("IntervalStyle", "iso_8601"),
            ("extra_float_digits", "3"),
            ("bytea_output", "hex"),
            ("client_encoding", "UTF8"),
        ] {
            assert!(
                params.contains(&(expected.0.to_owned(), expected.1.to_owned())),
                "{expected:?} in {params:?}"
            );
        }
        server.send(&auth(5, &[1, 2, 3, 4])).await;
        let (tag, body) = server.message().await;
        assert_eq!(tag, b'p');
        let expected = md5_hash(b"sluice", b"pw", [1, 2, 3, 4]);
        assert_eq!(body, [expected.as_bytes(), b"\0"].concat());
        let mut bytes = auth(0, b"");
        bytes.extend(parameter_status("server_version", "15.8"));
        bytes.extend(frame(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]));
        bytes.extend(ready());
        server.send(&bytes).await;
        handshake.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn cleartext_handshake_and_missing_password() {
        let (client, mut server) = pipe(1 << 16);
        let handshake = tokio::spawn(async move {
            ReplicationConnection::handshake(client, &settings(Some("pw")), None).await
        });
        server.startup().await;
        server.send(&auth(3, b"")).await;
        assert_eq!(server.message().await, (b'p', b"pw\0".to_vec()));
        server.send(&[auth(0, b""), ready()].concat()).await;
        handshake.await.unwrap().unwrap();

        let (client, mut server) = pipe(1 << 16);
        let handshake = tokio::spawn(async move {
            ReplicationConnection::handshake(client, &settings(None), None).await
        });
        server.startup().await;
        server.send(&auth(3, b"")).await;
        let error = handshake.await.unwrap().unwrap_err();
        assert!(matches!(error, ReplicationError::Auth(_)), "{error:?}");
        assert!(!error.is_retryable());
    }

    #[tokio::test]
    async fn rejected_and_unsupported_authentication_are_fatal() {
        let (client, mut server) = pipe(1 << 16);
        let handshake = tokio::spawn(async move {
            ReplicationConnection::handshake(client, &settings(Some("pw")), None).await
        });
        server.startup().await;
        server.send(&auth(3, b"")).await;
        server.message().await;
        server
            .send(&fields_frame(
                b'E',
                &[
                    (b'S', "FATAL"),
                    (b'C', "28P01"),
                    (b'M', "password authentication failed for user \"sluice\""),
                ],
            ))
            .await;
        let error = handshake.await.unwrap().unwrap_err();
        assert_eq!(error.sqlstate(), Some("28P01"));
        assert!(!error.is_retryable());

        let (client, mut server) = pipe(1 << 16);
        let handshake = tokio::spawn(async move {
            ReplicationConnection::handshake(client, &settings(Some("pw")), None).await
        });
        server.startup().await;
        server.send(&auth(7, b"")).await;
        let error = handshake.await.unwrap().unwrap_err();
        assert!(matches!(error, ReplicationError::Auth(_)), "{error:?}");

        let (client, mut server) = pipe(1 << 16);
        let handshake = tokio::spawn(async move {
            ReplicationConnection::handshake(client, &settings(Some("pw")), None).await
        });
        server.startup().await;
        server.send(&auth(10, b"SCRAM-SHA-256-PLUS\0\0")).await;
        let error = handshake.await.unwrap().unwrap_err();
        assert!(matches!(error, ReplicationError::Auth(_)), "{error:?}");
    }

    #[tokio::test]
    async fn simple_query_returns_rows_and_survives_errors() {
        let (mut connection, mut server) = ready_connection();
        let server = tokio::spawn(async move {
            assert_eq!(server.query().await, "SHOW x");
            let mut bytes = row_description();
            bytes.extend(data_row_frame(&[Some("a"), None, Some("")]));
            bytes.extend(command_complete("SHOW"));
            bytes.extend(ready());
            server.send(&bytes).await;
            assert_eq!(server.query().await, "BAD");
            let mut bytes = fields_frame(
                b'E',
                &[(b'S', "ERROR"), (b'C', "42601"), (b'M', "syntax error")],
            );
            bytes.extend(ready());
            server.send(&bytes).await;
            assert_eq!(server.query().await, "IDENTIFY_SYSTEM");
            let mut bytes = row_description();
            bytes.extend(data_row_frame(&[
                Some("7300000000000000001"),
                Some("1"),
                Some("0/16B3748"),
                Some("shop"),
            ]));
            bytes.extend(command_complete("IDENTIFY_SYSTEM"));
            bytes.extend(ready());
            server.send(&bytes).await;
            assert_eq!(server.query().await, "IDENTIFY_SYSTEM");
            let mut bytes = data_row_frame(&[Some("7"), Some("one"), Some("0/1"), None]);
            bytes.extend(ready());
            server.send(&bytes).await;
        });
        assert_eq!(
            connection.simple_query("SHOW x").await.unwrap(),
            vec![vec![Some("a".to_owned()), None, Some(String::new())]]
        );
        let error = connection.simple_query("BAD").await.unwrap_err();
        assert_eq!(error.sqlstate(), Some("42601"));
        assert_eq!(
            connection.identify_system().await.unwrap(),
            SystemIdentity {
                systemid: "7300000000000000001".to_owned(),
                timeline: 1,
                xlogpos: Lsn(0x16B_3748),
                dbname: Some("shop".to_owned()),
            }
        );
        assert!(matches!(
            connection.identify_system().await,
            Err(ReplicationError::Protocol(text)) if text.contains("timeline")
        ));
        server.await.unwrap();
        assert!(matches!(
            connection.simple_query("nul\0byte").await,
            Err(ReplicationError::Encode(_))
        ));
        assert!(
            connection.wire.outbound.is_empty(),
            "nothing half-encoded stays queued"
        );
    }

    #[tokio::test]
    async fn start_logical_streams_reports_and_closes() {
        let (connection, mut server) = ready_connection();
        let server = tokio::spawn(async move {
            assert_eq!(
                server.query().await,
                "START_REPLICATION SLOT \"s\" LOGICAL 0/10 (\"proto_version\" '1', \"publication_names\" 'pub')"
            );
            let mut bytes = frame(b'W', &[0, 0, 0]);
            bytes.extend(xlog_data(0x10, 0x20, 0, b"Ixyz"));
            server.send(&bytes).await;
            let (tag, body) = server.message().await;
            assert_eq!(tag, b'd');
            assert_eq!(body.len(), 34);
            assert_eq!(body[0], b'r');
            assert_eq!(body[1..9], 0x20u64.to_be_bytes());
            assert_eq!(body[9..17], 0x18u64.to_be_bytes());
            assert_eq!(body[17..25], 0x18u64.to_be_bytes());
            assert_eq!(body[33], 1);
            assert_eq!(server.message().await, (b'c', Vec::new()));
            let mut bytes = xlog_data(0x20, 0x30, 0, b"Cxyz");
            bytes.extend(frame(b'c', b""));
            bytes.extend(command_complete("COPY 0"));
            bytes.extend(command_complete("START_REPLICATION"));
            bytes.extend(ready());
            server.send(&bytes).await;
            assert_eq!(server.message().await, (b'X', Vec::new()));
        });
        let mut stream = connection
            .start_logical(
                "s",
                Lsn(0x10),
                &[("proto_version", "1"), ("publication_names", "pub")],
            )
            .await
            .unwrap();
        assert!(matches!(
            stream.next().await.unwrap(),
            Some(ReplicationMessage::XLogData {
                wal_end: Lsn(0x20),
                ..
            })
        ));
        stream
            .send_status(Lsn(0x20), Lsn(0x18), Lsn(0x18), true)
            .await
            .unwrap();
        stream.close().await.unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn start_logical_reports_a_missing_slot() {
        let (connection, mut server) = ready_connection();
        let server = tokio::spawn(async move {
            server.query().await;
            let mut bytes = fields_frame(
                b'E',
                &[
                    (b'S', "ERROR"),
                    (b'C', "42704"),
                    (b'M', "replication slot \"s\" does not exist"),
                ],
            );
            bytes.extend(ready());
            server.send(&bytes).await;
        });
        let error = connection
            .start_logical("s", Lsn::ZERO, &[])
            .await
            .unwrap_err();
        assert_eq!(error.sqlstate(), Some("42704"));
        assert!(!error.is_retryable());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn connect_refuses_what_it_cannot_do() {
        let config = |url: &str| PgConnectConfig::parse(url).unwrap();
        let error = ReplicationConnection::connect(&config("host=127.0.0.1"), "t")
            .await
            .unwrap_err();
        assert!(
            matches!(error, ReplicationError::InvalidConfig(_)),
            "{error:?}"
        );
    }

    /// `sslmode=require` against a server that answers the SSLRequest with `N`: refused with
    /// the setting and the fix, not retried.
    #[tokio::test]
    async fn require_against_a_server_without_tls_is_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 8];
            socket.read_exact(&mut request).await.unwrap();
            assert_eq!(request, [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
            socket.write_all(b"N").await.unwrap();
        });
        let url = format!("postgres://u@127.0.0.1:{port}/db?sslmode=require");
        let error = ReplicationConnection::connect(&PgConnectConfig::parse(&url).unwrap(), "t")
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("does not support TLS"), "{text}");
        assert!(text.contains("sslmode=require"), "{text}");
        assert!(!error.is_retryable());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn connect_failures_are_retryable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("postgres://u@127.0.0.1:{port}/db");
        let config = PgConnectConfig::parse(&url).unwrap();
        let error = ReplicationConnection::connect(&config, "t")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ReplicationError::Connect { address, .. } if *address == format!("127.0.0.1:{port}")),
            "{error:?}"
        );
        assert!(error.is_retryable());

        // A server that accepts but never answers runs into the connect timeout.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("postgres://u@127.0.0.1:{port}/db?connect_timeout=1");
        let config = PgConnectConfig::parse(&url).unwrap();
        let (result, accepted) = tokio::join!(
            ReplicationConnection::connect(&config, "t"),
            listener.accept()
        );
        let _silent = accepted.unwrap();
        let error = result.unwrap_err();
        assert!(
            matches!(error, ReplicationError::ConnectTimeout { .. }),
            "{error:?}"
        );
        assert!(error.is_retryable());
    }

    /// Streams a real insert through a real server: `PG_URL` names a PostgreSQL with
    /// `wal_level=logical` and a superuser (the dev stack's).
    #[tokio::test]
    #[ignore = "needs the dev stack's PostgreSQL (PG_URL); scripts/test runs it (--include-ignored)"]
    async fn real_server_streams_an_insert() {
        let Ok(url) = std::env::var("PG_URL") else {
            panic!("PG_URL is not set: run `eval \"$(scripts/dev-stack env)\"` or scripts/test");
        };
        let config = PgConnectConfig::parse(&url).expect("PG_URL is a postgres URL");
        let (client, driver) = crate::pg_connect::connect_sql(&config)
            .await
            .expect("PG_URL accepts SQL connections");
        let name = format!("sluice_repl_test_{:08x}", rand::random::<u32>());
        let result = stream_an_insert(&client, &config, &name).await;
        // Clean up even when the test failed: a leftover slot would retain WAL.
        for _ in 0..50 {
            let active = client
                .query_opt(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    &[&name],
                )
                .await
                .unwrap();
            match active {
                Some(row) if row.get::<_, bool>(0) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(_) => {
                    client
                        .execute("SELECT pg_drop_replication_slot($1)", &[&name])
                        .await
                        .unwrap();
                    break;
                }
                None => break,
            }
        }
        client
            .batch_execute(&format!(
                "DROP PUBLICATION IF EXISTS {name}; DROP TABLE IF EXISTS {name}"
            ))
            .await
            .unwrap();
        drop(client);
        driver.await.unwrap();
        result.unwrap();
    }

    /// The body of [`real_server_streams_an_insert`], separated so that cleanup always runs.
    async fn stream_an_insert(
        client: &tokio_postgres::Client,
        config: &PgConnectConfig,
        name: &str,
    ) -> anyhow::Result<()> {
        client
            .batch_execute(&format!(
                "CREATE TABLE {name} (id int PRIMARY KEY, note text);
                 CREATE PUBLICATION {name} FOR TABLE {name}"
            ))
            .await?;

        let mut connection =
            ReplicationConnection::connect(config, "sluice-replication-test").await?;
        let system = connection.identify_system().await?;
        anyhow::ensure!(system.timeline >= 1, "timeline {}", system.timeline);
        anyhow::ensure!(system.xlogpos > Lsn::ZERO, "xlogpos {}", system.xlogpos);
        anyhow::ensure!(
            system.dbname.as_deref() == config.pg.get_dbname(),
            "dbname {:?}",
            system.dbname
        );
        let rows = connection
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT \"{name}\" LOGICAL pgoutput NOEXPORT_SNAPSHOT"
            ))
            .await?;
        anyhow::ensure!(rows.len() == 1 && rows[0].len() == 4, "slot row {rows:?}");
        anyhow::ensure!(rows[0][0].as_deref() == Some(name), "slot row {rows:?}");
        let consistent_point: Lsn = rows[0][1].as_deref().unwrap_or_default().parse()?;
        anyhow::ensure!(
            consistent_point > Lsn::ZERO,
            "consistent point {consistent_point}"
        );
        let error = connection
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT \"{name}\" LOGICAL pgoutput"
            ))
            .await
            .expect_err("the slot exists already");
        anyhow::ensure!(error.sqlstate() == Some("42710"), "{error:?}");

        client
            .execute(&format!("INSERT INTO {name} VALUES (1, 'one')"), &[])
            .await?;
        let mut stream = connection
            .start_logical(
                name,
                Lsn::ZERO,
                &[("proto_version", "1"), ("publication_names", name)],
            )
            .await?;
        let insert_end = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match stream.next().await? {
                    Some(ReplicationMessage::XLogData { wal_end, data, .. }) => {
                        if data.first() == Some(&b'I') {
                            return Ok(wal_end);
                        }
                    }
                    Some(ReplicationMessage::Keepalive {
                        wal_end,
                        reply_requested: true,
                        ..
                    }) => {
                        stream
                            .send_status(wal_end, Lsn::ZERO, Lsn::ZERO, false)
                            .await?
                    }
                    Some(ReplicationMessage::Keepalive { .. }) => {}
                    None => anyhow::bail!("the server ended the stream"),
                }
            }
        })
        .await??;
        stream
            .send_status(insert_end, insert_end, insert_end, true)
            .await?;
        stream.close().await?;

        // A missing slot is a fatal server error.
        let connection = ReplicationConnection::connect(config, "sluice-replication-test").await?;
        let error = connection
            .start_logical(&format!("{name}_missing"), Lsn::ZERO, &[])
            .await
            .expect_err("the slot does not exist");
        anyhow::ensure!(error.sqlstate() == Some("42704"), "{error:?}");
        anyhow::ensure!(!error.is_retryable());
        Ok(())
    }
}
