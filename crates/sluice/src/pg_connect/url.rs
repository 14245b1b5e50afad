//! libpq connection strings: the URL and key/value forms, their TLS parameters and the `PG*`
//! environment, the password file, and a redacted form fit to show.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::config::{Host, SslMode as PgSslMode};

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

pub(crate) fn percent_decode(s: &str) -> String {
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
}
