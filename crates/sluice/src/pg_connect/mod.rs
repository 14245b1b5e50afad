//! Building PostgreSQL connections with libpq's TLS semantics.
//!
//! One place turns `source.postgres.url` into a connection: the libpq TLS parameters
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `sslsni`) are taken out of the URL (and from
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, `PGSSLSNI`, `PGPASSWORD` where the URL
//! leaves them out), the rest goes to `tokio_postgres::Config`, and [`connect_sql`] opens a SQL
//! connection over rustls, plain TCP or a unix socket.
//!
//! tokio-postgres only knows `disable`, `prefer` and `require`, so verification is done here: the
//! rustls verifier checks nothing (`require` without a root certificate, as libpq), the chain
//! only (`verify-ca`, and `require` with a root certificate file, as libpq) or chain and host name
//! (`verify-full`). The TLS adapter for tokio-postgres is written here (about forty lines) rather
//! than taken from a crate so it can report the `tls-server-end-point` channel binding that
//! `channel_binding=require` (SCRAM-SHA-256-PLUS) needs and keep the rustls error for the message.
//!
//! The files: `url` parses the connection string (libpq's rules, the `PG*` environment, the
//! password file); `tls` builds the rustls configuration and verifiers; `adapter` is the
//! tokio-postgres TLS adapter; `handshake` is the replication connection's SSLRequest; `explain`
//! turns connection errors into operator messages; this file connects.

mod adapter;
mod explain;
mod handshake;
mod tls;
mod url;

pub use self::adapter::{MakeRustls, RustlsConnect, RustlsStream};
pub use self::explain::{describe_host, explain};
pub use self::handshake::{NegotiateError, PgStream, negotiate_tls};
pub use self::tls::rustls_config;
pub(crate) use self::url::percent_decode;
pub use self::url::{
    ConfigError, PINNED_OPTIONS, PgConnectConfig, RootCert, SslMode, TlsSettings, Verify,
    redact_url,
};

use std::fmt;

use tokio_postgres::Client;
use tokio_postgres::config::SslMode as PgSslMode;

use self::explain::{host_name, server_without_tls};
use crate::crypto::find_rustls_error;

/// Why a SQL connection could not be opened.
#[derive(Debug)]
pub enum ConnectError {
    /// The connection string or a TLS file is unusable.
    Config(ConfigError),
    /// The server refused or the handshake failed; `message` says what to do.
    Connect {
        message: String,
        source: tokio_postgres::Error,
    },
}

impl ConnectError {
    /// Whether retrying cannot help: a bad certificate or a server without TLS under a mode
    /// that needs it (authentication failures are judged by SQLSTATE where this is used).
    pub fn is_tls_refusal(&self) -> bool {
        match self {
            Self::Config(_) => true,
            Self::Connect { source, .. } => {
                matches!(
                    find_rustls_error(source),
                    Some(rustls::Error::InvalidCertificate(_))
                ) || server_without_tls(source)
            }
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::Connect { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(_) => None,
            Self::Connect { source, .. } => Some(source),
        }
    }
}

/// Opens a SQL connection and drives it on a task; the task ends with the connection.
///
/// # Errors
///
/// [`ConnectError`], with a message a user can act on for TLS and authentication failures.
pub async fn connect_sql(
    config: &PgConnectConfig,
) -> Result<(Client, tokio::task::JoinHandle<()>), ConnectError> {
    let tls = MakeRustls::new(rustls_config(&config.tls).map_err(ConnectError::Config)?);
    let connected = match config.pg.connect(tls.clone()).await {
        // libpq's `allow`: the server refused the plaintext connection (pg_hba.conf); the
        // same again over TLS.
        Err(error) if config.allow_retries_with_tls() && error.as_db_error().is_some() => {
            tracing::debug!(error = %error, "plaintext refused under sslmode=allow: trying TLS");
            let mut pg = config.pg.clone();
            pg.ssl_mode(PgSslMode::Require);
            pg.connect(tls).await
        }
        other => other,
    };
    let (client, connection) = connected.map_err(|e| ConnectError::Connect {
        message: explain(config, &e),
        source: e,
    })?;
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(error = %error, "sql connection ended");
        }
    });
    Ok((client, task))
}

/// Asks the server to cancel what the session of `token` is running: PostgreSQL's cancel
/// request, on a new connection (with `config`'s TLS settings) carrying the session's secret
/// key, so it needs no privilege and cannot hit another session.
///
/// # Errors
///
/// The cancel request could not be sent.
pub async fn cancel(
    config: &PgConnectConfig,
    token: &tokio_postgres::CancelToken,
) -> Result<(), ConnectError> {
    let tls = MakeRustls::new(rustls_config(&config.tls).map_err(ConnectError::Config)?);
    token
        .cancel_query(tls)
        .await
        .map_err(|source| ConnectError::Connect {
            message: format!(
                "cannot send a cancel request to PostgreSQL at {}: {source}",
                host_name(config)
            ),
            source,
        })
}

/// [`connect_sql`] from a URL.
///
/// # Errors
///
/// As [`connect_sql`], and an unusable URL.
pub async fn connect_sql_url(
    url: &str,
) -> Result<(Client, tokio::task::JoinHandle<()>), ConnectError> {
    let mut config = PgConnectConfig::parse(url).map_err(ConnectError::Config)?;
    // Bounded unless the URL says otherwise (`doctor`, `slots`, `check` and the admin
    // server's `/doctor` wait on it).
    if config.pg.get_connect_timeout().is_none() {
        config
            .pg
            .connect_timeout(std::time::Duration::from_secs(10));
    }
    connect_sql(&config).await
}
