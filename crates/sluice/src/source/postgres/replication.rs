//! The PostgreSQL streaming replication protocol, spoken over a plain TCP connection.
//!
//! Why by hand: upstream `tokio-postgres` cannot run the replication protocol (it has no
//! CopyBoth / `START_REPLICATION` support; the forks that do are not on crates.io). The
//! protocol is small: a startup message with `replication=database`, authentication, simple
//! queries, then `START_REPLICATION … LOGICAL`, after which both sides exchange CopyData
//! frames: the server sends XLogData (`w`) and primary keepalives (`k`), the client sends
//! standby status updates (`r`). The `postgres-protocol` crate encodes the frontend messages
//! and does the authentication exchanges (MD5, SCRAM-SHA-256); the framing of backend messages
//! is done here because that crate's parser does not know CopyBothResponse.
//!
//! Backpressure: the stream reads from the socket only when the caller asks for the next
//! message, into a buffer of at most one frame plus [`READ_CHUNK`] bytes, so a caller that stops
//! asking stops the server (TCP flow control). [`ReplicationStream::next`] is cancel-safe: bytes
//! read are kept in the buffer when its future is dropped inside `select!`.
//!
//! TLS is not supported yet: `sslmode=require` is refused with a clear error.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use sluice_engine::Lsn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 * 1024;
/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// What the server said about itself (`IDENTIFY_SYSTEM`).
#[derive(Debug, Clone)]
pub struct SystemIdentity {
    /// The cluster's system identifier.
    pub systemid: String,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position.
    pub xlogpos: Lsn,
    /// The database the connection is bound to.
    pub dbname: Option<String>,
}

/// A replication protocol failure.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The socket failed.
    #[error("replication connection I/O failed")]
    Io(#[source] std::io::Error),
    /// The server answered with an error.
    #[error("server error {code}: {message}{}{}", .detail.as_ref().map(|d| format!(" (detail: {d})")).unwrap_or_default(), .hint.as_ref().map(|h| format!(" (hint: {h})")).unwrap_or_default())]
    Server {
        /// Severity (ERROR, FATAL, PANIC).
        severity: String,
        /// SQLSTATE.
        code: String,
        /// The message.
        message: String,
        /// The detail, if any.
        detail: Option<String>,
        /// The hint, if any.
        hint: Option<String>,
    },
    /// The server sent something the protocol does not allow here.
    #[error("replication protocol violation: {0}")]
    Protocol(String),
    /// Authentication could not be done.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The connection setting is not supported.
    #[error("unsupported connection setting: {0}")]
    Unsupported(String),
    /// The server closed the connection.
    #[error("the server closed the replication connection")]
    Closed,
    /// Connecting took too long.
    #[error("connecting to {0} timed out")]
    Timeout(String),
}

impl ReplicationError {
    /// The SQLSTATE of a server error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Self::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether reconnecting may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Io(_) | Self::Closed | Self::Timeout(_) | Self::Protocol(_) => true,
            Self::Auth(_) | Self::Unsupported(_) => false,
            Self::Server { code, .. } => !matches!(
                code.as_str(),
                "28000" | "28P01" | "42704" | "55000" | "42501" | "3D000" | "0A000" | "42P01"
            ),
        }
    }
}

impl From<std::io::Error> for ReplicationError {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

/// One backend frame.
struct Frame {
    tag: u8,
    body: Bytes,
}

/// The socket with its read buffer.
struct Wire {
    socket: TcpStream,
    buffer: BytesMut,
}

impl Wire {
    /// Reads one whole frame. Cancel-safe: partial data stays in the buffer.
    async fn frame(&mut self) -> Result<Frame, ReplicationError> {
        loop {
            if self.buffer.len() >= 5 {
                let len = i32::from_be_bytes([
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                    self.buffer[4],
                ]);
                let len = usize::try_from(len)
                    .ok()
                    .filter(|len| *len >= 4)
                    .ok_or_else(|| ReplicationError::Protocol(format!("frame length {len}")))?;
                if self.buffer.len() > len {
                    let mut frame = self.buffer.split_to(len + 1);
                    let tag = frame[0];
                    frame.advance(5);
                    return Ok(Frame {
                        tag,
                        body: frame.freeze(),
                    });
                }
                self.buffer.reserve(len + 1 - self.buffer.len());
            }
            if self.buffer.capacity() - self.buffer.len() < READ_CHUNK / 4 {
                self.buffer.reserve(READ_CHUNK);
            }
            let read = self.socket.read_buf(&mut self.buffer).await?;
            if read == 0 {
                return Err(ReplicationError::Closed);
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), ReplicationError> {
        self.socket.write_all(bytes).await?;
        self.socket.flush().await?;
        Ok(())
    }

    /// Skips notices and parameter reports; turns an ErrorResponse into an error.
    async fn significant_frame(&mut self) -> Result<Frame, ReplicationError> {
        loop {
            let frame = self.frame().await?;
            match frame.tag {
                b'N' => tracing::debug!(notice = %describe_fields(&frame.body), "server notice"),
                b'S' => {}
                b'E' => return Err(server_error(&frame.body)),
                _ => return Ok(frame),
            }
        }
    }
}

/// A replication connection before streaming starts.
pub struct ReplicationConnection {
    wire: Wire,
}

impl ReplicationConnection {
    /// Connects with `replication=database` and authenticates (trust, password, MD5,
    /// SCRAM-SHA-256).
    ///
    /// # Errors
    ///
    /// I/O and timeouts (retryable), authentication and unsupported settings (fatal).
    pub async fn connect(
        config: &tokio_postgres::Config,
        application_name: &str,
    ) -> Result<Self, ReplicationError> {
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(ReplicationError::Unsupported(
                "sslmode=require: sluice does not support TLS to PostgreSQL yet; use sslmode=disable or prefer".into(),
            ));
        }
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            Some(tokio_postgres::config::Host::Unix(_)) => {
                return Err(ReplicationError::Unsupported(
                    "Unix-socket hosts: give a TCP host in source.postgres.url".into(),
                ));
            }
            None => "localhost".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let address = format!("{host}:{port}");
        let socket = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(&address))
            .await
            .map_err(|_| ReplicationError::Timeout(address.clone()))??;
        socket.set_nodelay(true)?;
        let mut wire = Wire {
            socket,
            buffer: BytesMut::with_capacity(READ_CHUNK),
        };
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let dbname = config.get_dbname().unwrap_or(&user).to_owned();
        let params = [
            ("user", user.as_str()),
            ("database", dbname.as_str()),
            ("replication", "database"),
            ("application_name", application_name),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("TimeZone", "UTC"),
            ("IntervalStyle", "iso_8601"),
            ("extra_float_digits", "3"),
            ("bytea_output", "hex"),
        ];
        let mut buf = BytesMut::new();
        frontend::startup_message(params.iter().copied(), &mut buf)?;
        wire.send(&buf).await?;
        authenticate(&mut wire, &user, config.get_password()).await?;
        loop {
            let frame = wire.significant_frame().await?;
            match frame.tag {
                b'K' => {}
                b'Z' => return Ok(Self { wire }),
                tag => {
                    return Err(ReplicationError::Protocol(format!(
                        "unexpected message {:?} after authentication",
                        tag as char
                    )));
                }
            }
        }
    }

    /// `IDENTIFY_SYSTEM`.
    ///
    /// # Errors
    ///
    /// Server errors and I/O.
    pub async fn identify_system(&mut self) -> Result<SystemIdentity, ReplicationError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let row = rows
            .first()
            .ok_or_else(|| ReplicationError::Protocol("IDENTIFY_SYSTEM returned no row".into()))?;
        let field = |index: usize| row.get(index).cloned().flatten().unwrap_or_default();
        Ok(SystemIdentity {
            systemid: field(0),
            timeline: field(1).parse().unwrap_or(0),
            xlogpos: field(2).parse().unwrap_or_default(),
            dbname: row.get(3).cloned().flatten(),
        })
    }

    /// Runs a simple query; returns its rows as text.
    ///
    /// # Errors
    ///
    /// Server errors and I/O.
    pub async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        let mut buf = BytesMut::new();
        frontend::query(sql, &mut buf)?;
        self.wire.send(&buf).await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let frame = match self.wire.significant_frame().await {
                Ok(frame) => frame,
                Err(e @ ReplicationError::Server { .. }) => {
                    // Wait for ReadyForQuery so the connection stays usable.
                    error = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            match frame.tag {
                b'T' | b'C' | b'I' => {}
                b'D' => rows.push(parse_data_row(frame.body)?),
                b'Z' => break,
                tag => {
                    return Err(ReplicationError::Protocol(format!(
                        "unexpected message {:?} in a query result",
                        tag as char
                    )));
                }
            }
        }
        match error {
            Some(error) => Err(error),
            None => Ok(rows),
        }
    }

    /// `START_REPLICATION SLOT slot LOGICAL start (options…)`; returns once the server
    /// switched to streaming.
    ///
    /// # Errors
    ///
    /// Server errors (a missing slot or publication, an active slot) and I/O.
    pub async fn start_logical(
        mut self,
        slot: &str,
        start: Lsn,
        options: &[(&str, &str)],
    ) -> Result<ReplicationStream, ReplicationError> {
        let options: Vec<String> = options
            .iter()
            .map(|(name, value)| {
                format!(
                    "\"{}\" '{}'",
                    name.replace('"', "\"\""),
                    value.replace('\'', "''")
                )
            })
            .collect();
        let sql = format!(
            "START_REPLICATION SLOT \"{}\" LOGICAL {start} ({})",
            slot.replace('"', "\"\""),
            options.join(", ")
        );
        let mut buf = BytesMut::new();
        frontend::query(&sql, &mut buf)?;
        self.wire.send(&buf).await?;
        let frame = self.wire.significant_frame().await?;
        if frame.tag != b'W' {
            return Err(ReplicationError::Protocol(format!(
                "expected CopyBothResponse, got {:?}",
                frame.tag as char
            )));
        }
        Ok(ReplicationStream { wire: self.wire })
    }
}

/// A message of the replication stream.
#[derive(Debug, Clone)]
pub enum ReplicationMessage {
    /// WAL data: one pgoutput message.
    XLogData {
        /// The position of the data.
        wal_start: Lsn,
        /// The server's current end of WAL.
        wal_end: Lsn,
        /// The server's clock, microseconds since 2000-01-01.
        server_time_micros: i64,
        /// The payload.
        data: Bytes,
    },
    /// A keepalive.
    Keepalive {
        /// The server's current end of WAL.
        wal_end: Lsn,
        /// The server's clock, microseconds since 2000-01-01.
        server_time_micros: i64,
        /// The server wants a status update now (or it will time the connection out).
        reply_requested: bool,
    },
}

/// A streaming replication connection.
pub struct ReplicationStream {
    wire: Wire,
}

impl ReplicationStream {
    /// The next message; `None` when the server ended the stream. Cancel-safe.
    ///
    /// # Errors
    ///
    /// Server errors, protocol violations and I/O.
    pub async fn next(&mut self) -> Result<Option<ReplicationMessage>, ReplicationError> {
        loop {
            let frame = self.wire.significant_frame().await?;
            match frame.tag {
                b'd' => return parse_copy_data(frame.body).map(Some),
                b'c' => return Ok(None),
                b'C' | b'Z' => {}
                tag => {
                    return Err(ReplicationError::Protocol(format!(
                        "unexpected message {:?} while streaming",
                        tag as char
                    )));
                }
            }
        }
    }

    /// Sends a standby status update.
    ///
    /// # Errors
    ///
    /// I/O.
    pub async fn send_status(
        &mut self,
        write: Lsn,
        flush: Lsn,
        apply: Lsn,
        reply_requested: bool,
    ) -> Result<(), ReplicationError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
            - PG_EPOCH_OFFSET_MICROS;
        let mut body = BytesMut::with_capacity(34);
        body.put_u8(b'r');
        body.put_u64(write.0);
        body.put_u64(flush.0);
        body.put_u64(apply.0);
        body.put_i64(now);
        body.put_u8(u8::from(reply_requested));
        let mut frame = BytesMut::with_capacity(40);
        frame.put_u8(b'd');
        frame.put_i32(4 + body.len() as i32);
        frame.put_slice(&body);
        self.wire.send(&frame).await
    }

    /// Ends the stream politely (CopyDone, then waits briefly for the server's end).
    ///
    /// # Errors
    ///
    /// I/O.
    pub async fn close(mut self) -> Result<(), ReplicationError> {
        let mut buf = BytesMut::new();
        frontend::copy_done(&mut buf);
        frontend::terminate(&mut buf);
        self.wire.send(&buf).await?;
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while self.wire.frame().await.is_ok() {}
        })
        .await;
        Ok(())
    }
}

async fn authenticate(
    wire: &mut Wire,
    user: &str,
    password: Option<&[u8]>,
) -> Result<(), ReplicationError> {
    let need_password = || {
        password.ok_or_else(|| {
            ReplicationError::Auth(
                "the server asks for a password but source.postgres.url has none".into(),
            )
        })
    };
    loop {
        let frame = wire.significant_frame().await?;
        if frame.tag != b'R' {
            return Err(ReplicationError::Protocol(format!(
                "expected an authentication request, got {:?}",
                frame.tag as char
            )));
        }
        let mut body = frame.body;
        if body.remaining() < 4 {
            return Err(ReplicationError::Protocol(
                "short authentication request".into(),
            ));
        }
        let mut buf = BytesMut::new();
        match body.get_i32() {
            0 => return Ok(()),
            3 => {
                frontend::password_message(need_password()?, &mut buf)?;
                wire.send(&buf).await?;
            }
            5 => {
                if body.remaining() < 4 {
                    return Err(ReplicationError::Protocol("short MD5 salt".into()));
                }
                let salt = [body[0], body[1], body[2], body[3]];
                let hash = postgres_protocol::authentication::md5_hash(
                    user.as_bytes(),
                    need_password()?,
                    salt,
                );
                frontend::password_message(hash.as_bytes(), &mut buf)?;
                wire.send(&buf).await?;
            }
            10 => {
                let mechanisms: Vec<&[u8]> = body.split(|b| *b == 0).collect();
                if !mechanisms.contains(&sasl::SCRAM_SHA_256.as_bytes()) {
                    return Err(ReplicationError::Auth(
                        "the server offers no SASL mechanism sluice supports (SCRAM-SHA-256)"
                            .into(),
                    ));
                }
                let mut scram = ScramSha256::new(need_password()?, ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), &mut buf)?;
                wire.send(&buf).await?;
                let frame = wire.significant_frame().await?;
                let mut body = frame.body;
                if frame.tag != b'R' || body.remaining() < 4 || body.get_i32() != 11 {
                    return Err(ReplicationError::Protocol("expected SASL continue".into()));
                }
                scram
                    .update(&body)
                    .map_err(|e| ReplicationError::Auth(format!("SCRAM: {e}")))?;
                let mut buf = BytesMut::new();
                frontend::sasl_response(scram.message(), &mut buf)?;
                wire.send(&buf).await?;
                let frame = wire.significant_frame().await?;
                let mut body = frame.body;
                if frame.tag != b'R' || body.remaining() < 4 || body.get_i32() != 12 {
                    return Err(ReplicationError::Protocol("expected SASL final".into()));
                }
                scram
                    .finish(&body)
                    .map_err(|e| ReplicationError::Auth(format!("SCRAM: {e}")))?;
            }
            other => {
                return Err(ReplicationError::Auth(format!(
                    "the server asks for authentication method {other}, which sluice does not support (use scram-sha-256, md5, password or trust)"
                )));
            }
        }
    }
}

fn parse_copy_data(mut body: Bytes) -> Result<ReplicationMessage, ReplicationError> {
    let short = || ReplicationError::Protocol("short CopyData message".into());
    if body.is_empty() {
        return Err(short());
    }
    match body.get_u8() {
        b'w' => {
            if body.remaining() < 24 {
                return Err(short());
            }
            let wal_start = Lsn(body.get_u64());
            let wal_end = Lsn(body.get_u64());
            let server_time_micros = body.get_i64();
            Ok(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_time_micros,
                data: body,
            })
        }
        b'k' => {
            if body.remaining() < 17 {
                return Err(short());
            }
            let wal_end = Lsn(body.get_u64());
            let server_time_micros = body.get_i64();
            let reply_requested = body.get_u8() == 1;
            Ok(ReplicationMessage::Keepalive {
                wal_end,
                server_time_micros,
                reply_requested,
            })
        }
        tag => Err(ReplicationError::Protocol(format!(
            "unknown CopyData message {:?}",
            tag as char
        ))),
    }
}

fn parse_data_row(mut body: Bytes) -> Result<Vec<Option<String>>, ReplicationError> {
    let short = || ReplicationError::Protocol("short DataRow".into());
    if body.remaining() < 2 {
        return Err(short());
    }
    let count = body.get_i16();
    let mut row = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        if body.remaining() < 4 {
            return Err(short());
        }
        let len = body.get_i32();
        if len < 0 {
            row.push(None);
            continue;
        }
        let len = len as usize;
        if body.remaining() < len {
            return Err(short());
        }
        let value = body.split_to(len);
        row.push(Some(String::from_utf8_lossy(&value).into_owned()));
    }
    Ok(row)
}

/// The fields of an ErrorResponse or NoticeResponse: (code, value) pairs.
fn fields(body: &[u8]) -> Vec<(u8, String)> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
        out.push((code, String::from_utf8_lossy(&tail[..end]).into_owned()));
        rest = tail.get(end + 1..).unwrap_or_default();
    }
    out
}

fn describe_fields(body: &[u8]) -> String {
    fields(body)
        .into_iter()
        .find(|(code, _)| *code == b'M')
        .map(|(_, message)| message)
        .unwrap_or_default()
}

fn server_error(body: &[u8]) -> ReplicationError {
    let fields = fields(body);
    let get = |code: u8| {
        fields
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.clone())
    };
    ReplicationError::Server {
        severity: get(b'S').unwrap_or_else(|| "ERROR".into()),
        code: get(b'C').unwrap_or_default(),
        message: get(b'M').unwrap_or_default(),
        detail: get(b'D'),
        hint: get(b'H'),
    }
}

impl fmt::Debug for ReplicationConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationConnection")
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_data_messages_parse() {
        let mut w = BytesMut::new();
        w.put_u8(b'w');
        w.put_u64(0x10);
        w.put_u64(0x20);
        w.put_i64(5);
        w.put_slice(b"Bxyz");
        match parse_copy_data(w.freeze()).unwrap() {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                data,
                ..
            } => {
                assert_eq!((wal_start, wal_end), (Lsn(0x10), Lsn(0x20)));
                assert_eq!(&data[..], b"Bxyz");
            }
            other => panic!("{other:?}"),
        }
        let mut k = BytesMut::new();
        k.put_u8(b'k');
        k.put_u64(0x30);
        k.put_i64(7);
        k.put_u8(1);
        assert!(matches!(
            parse_copy_data(k.freeze()).unwrap(),
            ReplicationMessage::Keepalive {
                wal_end: Lsn(0x30),
                reply_requested: true,
                ..
            }
        ));
        for bad in [&b""[..], b"w123", b"k", b"x"] {
            assert!(parse_copy_data(Bytes::copy_from_slice(bad)).is_err());
        }
    }

    #[test]
    fn error_fields_parse() {
        let body = b"SERROR\0C42704\0Mreplication slot \"x\" does not exist\0\0";
        let error = server_error(body);
        assert_eq!(error.sqlstate(), Some("42704"));
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("does not exist"));
        assert!(
            ReplicationError::Server {
                severity: "FATAL".into(),
                code: "57P01".into(),
                message: "terminating connection due to administrator command".into(),
                detail: None,
                hint: None
            }
            .is_retryable()
        );
    }

    #[test]
    fn data_rows_parse_without_panicking() {
        let mut row = BytesMut::new();
        row.put_i16(2);
        row.put_i32(2);
        row.put_slice(b"ab");
        row.put_i32(-1);
        assert_eq!(
            parse_data_row(row.freeze()).unwrap(),
            vec![Some("ab".to_owned()), None]
        );
        assert!(parse_data_row(Bytes::from_static(&[0, 1, 0, 0, 0, 9])).is_err());
    }
}
