//! Operator messages for failed connections: TLS verification, a server without TLS and
//! authentication failures name the setting and the fix.

use rustls::CertificateError;

use super::url::{PgConnectConfig, RootCert};

pub(super) fn no_tls_message(config: &PgConnectConfig, host: &str) -> String {
    format!(
        "the PostgreSQL server at {host} does not support TLS but sslmode={} requires it: \
         enable ssl on the server, or lower sslmode (prefer) if plaintext is acceptable",
        config.tls.mode.as_str()
    )
}

pub(super) fn tls_message(
    config: &PgConnectConfig,
    host: &str,
    tls_error: &rustls::Error,
) -> String {
    let root = match &config.tls.root_cert {
        Some(RootCert::File(p)) => p.display().to_string(),
        Some(RootCert::System) => "system".into(),
        None => "~/.postgresql/root.crt".into(),
    };
    match tls_error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server certificate of {host} is signed by an unknown CA (sslmode={}, \
             sslrootcert={root}): set sslrootcert to the CA certificate that signed the \
             server's certificate",
            config.tls.mode.as_str()
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "hostname mismatch under sslmode=verify-full: the server certificate of {host} is \
             not valid for that host name: connect with a name the certificate lists, or use \
             sslmode=verify-ca to check the CA only"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => {
            let when = match tls_error {
                rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
                    not_after,
                    ..
                }) => format!(" on {}", utc(not_after.as_secs())),
                _ => String::new(),
            };
            format!(
                "the server certificate of {host} has expired{when} (sslmode={}, \
                 sslrootcert={root}): renew the server's certificate (ssl_cert_file on the \
                 server) and reload PostgreSQL (SELECT pg_reload_conf())",
                config.tls.mode.as_str()
            )
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => format!(
            "the server certificate of {host} is not valid yet (sslmode={}): check the clock \
             of this machine and of the server, or the certificate's start date",
            config.tls.mode.as_str()
        ),
        other => format!("TLS handshake with {host} failed: {other}"),
    }
}

/// Seconds since the Unix epoch as `2020-01-02 00:00:00 UTC`.
fn utc(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map_or_else(
            || format!("{secs} s after the Unix epoch"),
            |time| time.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

pub(super) fn host_name(config: &PgConnectConfig) -> String {
    describe_host(&config.pg)
}

/// `host:port` of the first host, for messages.
pub fn describe_host(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// A message for a failed connection: TLS verification and authentication failures name the
/// setting and the fix; anything else is tokio-postgres's text.
pub fn explain(config: &PgConnectConfig, error: &tokio_postgres::Error) -> String {
    let host = host_name(config);
    if let Some(tls_error) = crate::crypto::find_rustls_error(error) {
        return tls_message(config, &host, tls_error);
    }
    let text = error.to_string();
    if server_without_tls(error) {
        return no_tls_message(config, &host);
    }
    if let Some(db) = error.as_db_error() {
        let code = db.code().code();
        if code == "28P01" || code == "28000" {
            let user = config.pg.get_user().unwrap_or("(default)");
            return format!(
                "PostgreSQL at {host} refused user `{user}`: {} — check the password in \
                 source.postgres.url, PGPASSWORD or ~/.pgpass, and pg_hba.conf for the \
                 authentication method",
                db.message()
            );
        }
    }
    format!("cannot connect to PostgreSQL at {host}: {text}")
}

/// tokio-postgres reports a server that answers `N` under `require` as a TLS error whose cause
/// says so.
pub(super) fn server_without_tls(error: &tokio_postgres::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.to_string().contains("server does not support TLS") {
            return true;
        }
        current = e.source();
    }
    false
}
