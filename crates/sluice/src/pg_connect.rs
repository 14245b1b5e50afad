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

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Client;
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, ConfigError> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(ConfigError(format!(
                    "sslmode is `{other}`: expected one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                )));
            }
        })
    }

    /// The name libpq uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Allow => "allow",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// Where the trusted roots come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    File(PathBuf),
    /// `sslrootcert=system`: the operating system's trust store.
    System,
}

/// What the verifier checks, derived from `sslmode` and `sslrootcert` as libpq does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    Nothing,
    Chain,
    ChainAndHost,
}

/// The TLS half of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub sni: bool,
}

impl TlsSettings {
    /// What the server's certificate is checked for. `require` with a root certificate file
    /// checks the chain, as libpq does.
    pub fn verify(&self) -> Verify {
        match self.mode {
            SslMode::VerifyFull => Verify::ChainAndHost,
            SslMode::VerifyCa => Verify::Chain,
            _ if matches!(self.root_cert, Some(RootCert::File(_))) => Verify::Chain,
            _ => Verify::Nothing,
        }
    }
}

/// A parsed, validated connection string.
#[derive(Clone)]
pub struct PgConnectConfig {
    /// Everything but TLS; its `ssl_mode` is what tokio-postgres should do on the wire.
    pub pg: tokio_postgres::Config,
    pub tls: TlsSettings,
}

impl fmt::Debug for PgConnectConfig {
    // tokio_postgres::Config's Debug redacts the password; ours adds nothing secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConnectConfig")
            .field("pg", &self.pg)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A connection string that cannot be used; the message names the key and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

const TLS_KEYS: [&str; 6] = [
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslsni",
    "passfile",
];

/// Backend options every connection starts with (after the URL's own `options`, so they win).
pub const PINNED_OPTIONS: &str = "-c standard_conforming_strings=on";

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl PgConnectConfig {
    /// Parses a libpq URL or key/value string, with the `PG*` environment as fallback.
    ///
    /// # Errors
    ///
    /// A message naming the parameter, what was found and the fix.
    pub fn parse(url: &str) -> Result<Self, ConfigError> {
        Self::parse_with_env(url, &env_var)
    }

    /// [`PgConnectConfig::parse`] with the environment given (for tests).
    ///
    /// # Errors
    ///
    /// As [`PgConnectConfig::parse`].
    pub fn parse_with_env(
        url: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let (rest, found) = split_tls_params(url);
        let mut pg = tokio_postgres::Config::from_str(&rest).map_err(|e| {
            ConfigError(format!(
                "source.postgres.url is not a valid connection string ({e}): expected \
                 postgres://user[:password]@host[:port]/database[?sslmode=...]"
            ))
        })?;
        let get = |key: &str, var: &str| -> Option<String> {
            found
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| env(var))
        };
        let mode = match get("sslmode", "PGSSLMODE") {
            Some(v) => SslMode::parse(&v)?,
            None => SslMode::Prefer,
        };
        let root_cert = get("sslrootcert", "PGSSLROOTCERT").map(|v| {
            if v == "system" {
                RootCert::System
            } else {
                RootCert::File(PathBuf::from(v))
            }
        });
        let sni = match get("sslsni", "PGSSLSNI").as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(ConfigError(format!(
                    "sslsni is `{other}`: expected 1 (send the host name) or 0"
                )));
            }
        };
        if root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
            return Err(ConfigError(format!(
                "sslmode is `{}` with sslrootcert=system: the system's trust store is only used \
                 with host name checks; set sslmode=verify-full",
                mode.as_str()
            )));
        }
        let cert = get("sslcert", "PGSSLCERT").map(PathBuf::from);
        let key = get("sslkey", "PGSSLKEY").map(PathBuf::from);
        if cert.is_some() != key.is_some() {
            return Err(ConfigError(
                "sslcert and sslkey go together: a client certificate needs its key (set both, \
                 or neither)"
                    .into(),
            ));
        }
        if pg.get_password().is_none()
            && let Some(password) = env("PGPASSWORD")
        {
            pg.password(password);
        }
        if pg.get_password().is_none() {
            let passfile = get("passfile", "PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".pgpass")));
            if let Some(password) = passfile.and_then(|path| pgpass_lookup(&path, &pg)) {
                pg.password(password);
            }
        }
        // Every connection, SQL or replication, reads a backslash in a literal as itself, whatever
        // the server's, database's or role's setting: the few literals sluice writes (fixed
        // text, the replication grammar's options) mean what they say.
        let options = match pg.get_options() {
            Some(options) if !options.trim().is_empty() => {
                format!("{options} {PINNED_OPTIONS}")
            }
            _ => PINNED_OPTIONS.to_owned(),
        };
        pg.options(&options);
        let unix_only =
            !pg.get_hosts().is_empty() && pg.get_hosts().iter().all(|h| matches!(h, Host::Unix(_)));
        // libpq never uses TLS over a unix socket; tokio-postgres is told what to do on the wire.
        pg.ssl_mode(match mode {
            _ if unix_only => PgSslMode::Disable,
            SslMode::Disable => PgSslMode::Disable,
            // `allow`: plaintext first; connect_sql tries TLS when the server refuses it.
            SslMode::Allow => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
        });
        Ok(Self {
            pg,
            tls: TlsSettings {
                mode,
                root_cert,
                cert,
                key,
                sni,
            },
        })
    }

    /// Under `sslmode=allow`, whether a connection the server refused in plaintext is tried
    /// again over TLS (as libpq): not over unix sockets, which never use TLS.
    pub fn allow_retries_with_tls(&self) -> bool {
        self.tls.mode == SslMode::Allow
            && !self
                .pg
                .get_hosts()
                .iter()
                .all(|h| matches!(h, Host::Unix(_)))
    }

    /// The same settings with `sslmode=require`: the TLS attempt of `allow`.
    pub fn with_tls_required(&self) -> Self {
        let mut config = self.clone();
        config.tls.mode = SslMode::Require;
        config.pg.ssl_mode(PgSslMode::Require);
        config
    }

    /// Whether any host is reached over the network rather than loopback or a unix socket.
    pub fn has_remote_host(&self) -> bool {
        self.pg.get_hosts().iter().any(|h| match h {
            Host::Unix(_) => false,
            Host::Tcp(name) => {
                name != "localhost"
                    && !name
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
        })
    }
}

/// The password for `pg`'s first host, port, database and user in a libpq password file
/// (`hostname:port:database:username:password`, `*` matches anything, `\:` and `\\` escape).
/// Like libpq, a file readable by group or others is ignored (with a warning), as is a missing one.
fn pgpass_lookup(path: &Path, pg: &tokio_postgres::Config) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    if meta.mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "password file has group or world access; permissions should be u=rw (0600) or less: ignored"
        );
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let host = match pg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(_)) | None => "localhost".to_owned(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = pg.get_user()?;
    let db = pg.get_dbname().unwrap_or(user);
    let wanted = [host.as_str(), port.as_str(), db, user];
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass_line(line)?;
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, want)| field == "*" || field == want);
            matches.then(|| fields[4].clone())
        })
}

fn split_pgpass_line(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.push(chars.next()?),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

/// A connection string fit to show: the password replaced by `***`, wherever it is (the
/// URL's user info, a `password` query parameter, a `password=` key/value pair). Where the
/// string is ambiguous, more is hidden rather than less.
pub fn redact_url(url: &str) -> String {
    if let Some(scheme_end) = ["postgres://", "postgresql://"]
        .iter()
        .find(|scheme| url.starts_with(*scheme))
        .map(|scheme| scheme.len())
    {
        let rest = &url[scheme_end..];
        // The user info ends at the last `@` (a password may hold `@`, `?` or `/`).
        let (user_info, after) = match rest.rfind('@') {
            Some(at) => {
                let user = rest[..at].split(':').next().unwrap_or("");
                let hidden = if rest[..at].contains(':') { ":***" } else { "" };
                (format!("{user}{hidden}@"), &rest[at + 1..])
            }
            None => (String::new(), rest),
        };
        let after = match after.split_once('?') {
            Some((location, query)) => {
                let params: Vec<String> = query
                    .split('&')
                    .map(|part| match part.split_once('=') {
                        Some((key, _)) if percent_decode(key) == "password" => {
                            format!("{key}=***")
                        }
                        _ => part.to_owned(),
                    })
                    .collect();
                format!("{location}?{}", params.join("&"))
            }
            None => after.to_owned(),
        };
        return format!("{}{user_info}{after}", &url[..scheme_end]);
    }
    // key=value form: `password = value`, `password='quoted \' value'`.
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find("password") {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        let after = &rest[at + "password".len()..];
        let trimmed = after.trim_start();
        if !starts_word || !trimmed.starts_with('=') {
            out.push_str(&rest[..at + "password".len()]);
            rest = after;
            continue;
        }
        let value = trimmed[1..].trim_start();
        out.push_str(&rest[..at]);
        out.push_str("password=***");
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted
                .char_indices()
                .find(|&(_, c)| {
                    let close = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                })
                .map_or(quoted.len(), |(i, _)| i + 1);
            1 + close
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        rest = &value[end.min(value.len())..];
    }
    out.push_str(rest);
    out
}

/// Takes the TLS parameters out of a URL's query (or a key/value string), percent-decoded.
fn split_tls_params(url: &str) -> (String, Vec<(String, String)>) {
    let mut found = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_owned(), found);
        };
        let mut kept = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let k = percent_decode(k);
            if TLS_KEYS.contains(&k.as_str()) {
                found.push((k, percent_decode(v)));
            } else {
                kept.push(part);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        (rest, found)
    } else {
        // key=value form; values with spaces must be quoted, which TLS paths rarely need.
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            match token.split_once('=') {
                Some((k, v)) if TLS_KEYS.contains(&k.trim()) => {
                    found.push((k.trim().to_owned(), v.trim_matches('\'').to_owned()));
                }
                _ => kept.push(token),
            }
        }
        (kept.join(" "), found)
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// --- rustls ---------------------------------------------------------------------------------

/// The crypto provider: aws-lc-rs, which the S3 client already builds into the binary (ring
/// would be a second provider to compile).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The rustls client configuration for these settings.
///
/// # Errors
///
/// Unreadable or invalid certificate and key files, with the key and the fix.
pub fn rustls_config(tls: &TlsSettings) -> Result<ClientConfig, ConfigError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(format!("TLS setup failed: {e}")))?;
    let verify = tls.verify();
    let verifier: Arc<dyn ServerCertVerifier> = if verify == Verify::Nothing {
        Arc::new(AcceptAnyCert(provider.clone()))
    } else {
        let roots = Arc::new(root_store(tls)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| ConfigError(format!("sslrootcert holds no usable CA: {e}")))?;
        if verify == Verify::Chain {
            Arc::new(ChainOnly(webpki))
        } else {
            webpki
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert, "sslcert")?;
            check_key_permissions(key)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                ConfigError(format!(
                    "sslkey {} cannot be read as a PEM private key ({e}): give the client \
                     certificate's key file",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                ConfigError(format!(
                    "sslcert {} and sslkey {} do not make a client identity ({e})",
                    cert.display(),
                    key.display()
                ))
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    config.enable_sni = tls.sni;
    Ok(config)
}

fn root_store(tls: &TlsSettings) -> Result<RootCertStore, ConfigError> {
    let mut store = RootCertStore::empty();
    match &tls.root_cert {
        Some(RootCert::System) => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ignored = store.add(cert);
            }
            if store.is_empty() {
                return Err(ConfigError(
                    "sslrootcert=system but the system's trust store is empty: install the CA \
                     certificates (ca-certificates) or give sslrootcert=<file>"
                        .into(),
                ));
            }
        }
        Some(RootCert::File(path)) => {
            for cert in read_certs(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    ConfigError(format!(
                        "sslrootcert {} holds a certificate that is not a usable CA ({e})",
                        path.display()
                    ))
                })?;
            }
        }
        None => {
            let default =
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql/root.crt"));
            match default.filter(|p| p.exists()) {
                Some(path) => {
                    for cert in read_certs(&path, "sslrootcert")? {
                        let _ignored = store.add(cert);
                    }
                }
                None => {
                    return Err(ConfigError(format!(
                        "sslmode={} needs a root certificate but sslrootcert is not set (and \
                         ~/.postgresql/root.crt does not exist): set sslrootcert=<CA file> or \
                         sslrootcert=system, or use sslmode=require to skip verification",
                        tls.mode.as_str()
                    )));
                }
            }
        }
    }
    Ok(store)
}

fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            ConfigError(format!(
                "{key} {} cannot be read as PEM certificates ({e}): give a readable PEM file",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(ConfigError(format!(
            "{key} {} holds no certificate: give a PEM file with BEGIN CERTIFICATE blocks",
            path.display()
        )));
    }
    Ok(certs)
}

/// libpq refuses a private key others can read: owned by us, mode 0600 or less; owned by root,
/// 0640 or less.
fn check_key_permissions(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        ConfigError(format!(
            "sslkey {} cannot be read ({e}): give the client certificate's key file",
            path.display()
        ))
    })?;
    let mode = meta.mode() & 0o777;
    let allowed = if meta.uid() == 0 { 0o640 } else { 0o600 };
    if mode & !allowed != 0 {
        return Err(ConfigError(format!(
            "sslkey {} has permissions {mode:04o}: the private key must not be readable by \
             others (u=rw (0600) or less if owned by you, u=rw,g=r (0640) or less if owned by \
             root); run chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// `require` without a root certificate: encrypted, not authenticated (as libpq). Signatures
/// are still checked so the handshake proves possession of the certificate's key.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the host name is not checked. webpki
/// checks the chain before the name, so a name error means the chain was good.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

// --- tokio-postgres adapter -----------------------------------------------------------------

/// tokio-postgres's TLS factory over rustls.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl MakeRustls {
    pub fn new(config: ClientConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // tokio-postgres asks for every host, unix sockets (domain "") included, before it
        // knows whether TLS will be used: an invalid name fails only if a handshake happens.
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
        Ok(RustlsConnect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One TLS handshake.
pub struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: io::Result<ServerName<'static>>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = self.connector.connect(self.name?, stream).await?;
            Ok(RustlsStream(tls))
        })
    }
}

/// A TLS stream with its channel binding.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> RustlsStream<S> {
    /// `tls-server-end-point` (RFC 5929): the hash of the server's certificate. The hash should
    /// follow the certificate's signature algorithm; SHA-256 is right for SHA-256 and weaker
    /// signatures (nearly every server certificate), not for SHA-384/512-signed ones.
    pub fn server_end_point(&self) -> Option<Vec<u8>> {
        let (_, session) = self.0.get_ref();
        let cert = session.peer_certificates()?.first()?;
        Some(Sha256::digest(cert.as_ref()).to_vec())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        match self.server_end_point() {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

// --- the replication connection's own handshake ---------------------------------------------

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

fn no_tls_message(config: &PgConnectConfig, host: &str) -> String {
    format!(
        "the PostgreSQL server at {host} does not support TLS but sslmode={} requires it: \
         enable ssl on the server, or lower sslmode (prefer) if plaintext is acceptable",
        config.tls.mode.as_str()
    )
}

fn tls_message(config: &PgConnectConfig, host: &str, tls_error: &rustls::Error) -> String {
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

// --- connecting -----------------------------------------------------------------------------

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

fn host_name(config: &PgConnectConfig) -> String {
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
    if let Some(tls_error) = find_rustls_error(error) {
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
fn server_without_tls(error: &tokio_postgres::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.to_string().contains("server does not support TLS") {
            return true;
        }
        current = e.source();
    }
    false
}

fn find_rustls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(io) = e.downcast_ref::<io::Error>()
            && let Some(found) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str, env: &[(&str, &str)]) -> Result<PgConnectConfig, ConfigError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        PgConnectConfig::parse_with_env(url, &move |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn passwords_are_redacted_wherever_they_are() {
        for (url, shown) in [
            (
                "postgres://u:s3cret@h:5432/db?sslmode=require",
                "postgres://u:***@h:5432/db?sslmode=require",
            ),
            ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://h/db", "postgres://h/db"),
            (
                "postgres://u@h/db?sslmode=verify-full&password=s3cret&sslsni=1",
                "postgres://u@h/db?sslmode=verify-full&password=***&sslsni=1",
            ),
            (
                "host=h user=u password=s3cret dbname=db",
                "host=h user=u password=*** dbname=db",
            ),
            (
                "host=h password = 's3 c\\'ret' dbname=db",
                "host=h password=*** dbname=db",
            ),
            ("password=s3cret", "password=***"),
            (
                "host=h passwordless=1 user=u",
                "host=h passwordless=1 user=u",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("s3"), "{url}");
        }
    }

    #[test]
    fn default_is_prefer_without_verification() {
        let c = parse("postgres://u@db.example.com/app", &[]).unwrap();
        assert_eq!(c.tls.mode, SslMode::Prefer);
        assert_eq!(c.tls.verify(), Verify::Nothing);
        assert_eq!(c.pg.get_ssl_mode(), PgSslMode::Prefer);
        assert!(c.has_remote_host());
    }

    #[test]
    fn every_connection_pins_standard_conforming_strings() {
        let c = parse("postgres://u@db/app", &[]).unwrap();
        assert_eq!(
            c.pg.get_options(),
            Some("-c standard_conforming_strings=on")
        );
        // After the URL's own options, so that the pinned value wins.
        let c = parse(
            "postgres://u@db/app?options=-c%20standard_conforming_strings%3Doff",
            &[],
        )
        .unwrap();
        assert_eq!(
            c.pg.get_options(),
            Some("-c standard_conforming_strings=off -c standard_conforming_strings=on")
        );
    }

    #[test]
    fn url_parameters_are_taken_out_and_decoded() {
        let c = parse(
            "postgres://u:p@db/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x&sslsni=0",
            &[],
        )
        .unwrap();
        assert_eq!(c.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            c.tls.root_cert,
            Some(RootCert::File(PathBuf::from("/etc/ca.pem")))
        );
        assert!(!c.tls.sni);
        assert_eq!(c.tls.verify(), Verify::ChainAndHost);
        assert_eq!(c.pg.get_ssl_mode(), PgSslMode::Require);
        assert_eq!(c.pg.get_application_name(), Some("x"));
    }

    #[test]
    fn require_with_a_root_file_checks_the_chain_as_libpq() {
        let c = parse(
            "postgres://u@db/app?sslmode=require&sslrootcert=/ca.pem",
            &[],
        )
        .unwrap();
        assert_eq!(c.tls.verify(), Verify::Chain);
        let c = parse("postgres://u@db/app?sslmode=require", &[]).unwrap();
        assert_eq!(c.tls.verify(), Verify::Nothing);
        let c = parse("postgres://u@db/app?sslmode=verify-ca", &[]).unwrap();
        assert_eq!(c.tls.verify(), Verify::Chain);
    }

    #[test]
    fn environment_fills_what_the_url_leaves_out() {
        let env = [
            ("PGSSLMODE", "verify-ca"),
            ("PGSSLROOTCERT", "/env/ca.pem"),
            ("PGPASSWORD", "from-env"),
        ];
        let c = parse("postgres://u@db/app", &env).unwrap();
        assert_eq!(c.tls.mode, SslMode::VerifyCa);
        assert_eq!(c.pg.get_password(), Some(&b"from-env"[..]));
        let c = parse("postgres://u:url@db/app?sslmode=disable", &env).unwrap();
        assert_eq!(c.tls.mode, SslMode::Disable);
        assert_eq!(c.pg.get_password(), Some(&b"url"[..]));
        assert_eq!(c.pg.get_ssl_mode(), PgSslMode::Disable);
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let e = parse("postgres://u@db/app?sslmode=strict", &[]).unwrap_err();
        assert!(e.0.contains("sslmode is `strict`"), "{e}");
        assert!(e.0.contains("verify-full"), "{e}");
        let e = parse(
            "postgres://u@db/app?sslmode=require&sslrootcert=system",
            &[],
        )
        .unwrap_err();
        assert!(e.0.contains("sslmode=verify-full"), "{e}");
        let e = parse("postgres://u@db/app?sslcert=/c.pem", &[]).unwrap_err();
        assert!(e.0.contains("sslkey"), "{e}");
        let e = parse("postgres://u@db/app?sslsni=yes", &[]).unwrap_err();
        assert!(e.0.contains("sslsni is `yes`"), "{e}");
    }

    #[test]
    fn unix_socket_hosts_never_use_tls() {
        let c = parse(
            "host=/var/run/postgresql user=u dbname=app sslmode=require",
            &[],
        )
        .unwrap();
        assert_eq!(c.tls.mode, SslMode::Require);
        assert_eq!(c.pg.get_ssl_mode(), PgSslMode::Disable);
        assert!(!c.has_remote_host());
        let c = parse("postgres://u@%2Fvar%2Frun%2Fpostgresql/app", &[]).unwrap();
        assert!(matches!(c.pg.get_hosts()[0], Host::Unix(_)));
        assert!(
            !parse("postgres://u@127.0.0.1/app", &[])
                .unwrap()
                .has_remote_host()
        );
    }

    #[test]
    fn password_file_is_read_as_libpq() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-pgpass-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:u:nope\ndb:5433:app:u:wrong-port\ndb:*:app:u:pa\\:ss\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file_text = file.display().to_string();
        let env = [("PGPASSFILE", file_text.as_str())];
        let c = parse("postgres://u@db/app", &env).unwrap();
        assert_eq!(c.pg.get_password(), Some(&b"pa:ss"[..]));
        // The URL's password, then PGPASSWORD, come first.
        let c = parse("postgres://u:url@db/app", &env).unwrap();
        assert_eq!(c.pg.get_password(), Some(&b"url"[..]));
        let c = parse("postgres://u@db/app", &[env[0], ("PGPASSWORD", "env")]).unwrap();
        assert_eq!(c.pg.get_password(), Some(&b"env"[..]));
        // No line matches another user; a file others can read is ignored.
        assert_eq!(
            parse("postgres://x@db/app", &env)
                .unwrap()
                .pg
                .get_password(),
            None
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            parse("postgres://u@db/app", &env)
                .unwrap()
                .pg
                .get_password(),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loose_key_permissions_are_refused_as_libpq() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-key-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("client.key");
        std::fs::write(&key, "not a key").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key_permissions(&key).unwrap_err();
        assert!(e.0.contains("0644") && e.0.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_permissions(&key).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verification_without_a_root_certificate_is_refused_with_the_way_out() {
        let tls = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(RootCert::File(PathBuf::from("/nonexistent/ca.pem"))),
            cert: None,
            key: None,
            sni: true,
        };
        let e = rustls_config(&tls).unwrap_err();
        assert!(e.0.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
    }
}
