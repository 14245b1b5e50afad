//! Connection problems only an operator can fix (credentials, SASL mechanism, certificates,
//! TLS on one side only), recognized in librdkafka's error and log text and turned into the
//! pipeline file key to change; [`ConnectionWatch`] is the client context that watches for
//! them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::PipelineError;

/// A connection problem only an operator can fix, as librdkafka reports it: which setting is
/// wrong, what sluice found there, and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// The pipeline file key to change, e.g. `kafka.client."sasl.password"`.
    pub key: String,
    /// What is wrong, with what was found (never a password).
    pub what: String,
    /// What to change.
    pub fix: String,
}

/// The kinds of connection problems an operator must fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Problem {
    Credentials,
    Mechanism,
    CertificateExpired,
    HostnameMismatch,
    UnknownCa,
    /// A plaintext client on a TLS listener.
    ListenerWantsTls,
    /// A TLS client on a plaintext listener.
    ListenerHasNoTls,
}

impl Problem {
    /// How many reports of it make it certain. A client and a listener that disagree about
    /// TLS show as dropped connections, which a broker restarting can also cause once.
    fn reports_needed(self) -> u32 {
        match self {
            Self::ListenerWantsTls | Self::ListenerHasNoTls => 2,
            _ => 1,
        }
    }
}

fn problem_of(reason: &str) -> Option<Problem> {
    let r = reason.to_ascii_lowercase();
    Some(
        if r.contains("unsupported sasl mechanism")
            || r.contains("mechanism") && r.contains("not enabled")
        {
            Problem::Mechanism
        } else if r.contains("sasl authentication error")
            || r.contains("invalid credentials")
            || r.contains("authentication failed")
        {
            Problem::Credentials
        } else if r.contains("certificate has expired") || r.contains("certificate expired") {
            Problem::CertificateExpired
        } else if r.contains("hostname mismatch")
            || r.contains("does not match") && r.contains("certificate")
        {
            Problem::HostnameMismatch
        } else if r.contains("certificate verify failed")
            || r.contains("could not be verified")
            || r.contains("unable to get local issuer certificate")
            || r.contains("self-signed certificate in certificate chain")
            || r.contains("self signed certificate in certificate chain")
        {
            Problem::UnknownCa
        } else if r.contains("incorrect security.protocol")
            || r.contains("connecting to a ssl listener")
        {
            Problem::ListenerWantsTls
        } else if r.contains("wrong version number")
            || r.contains("packet length too long")
            || r.contains("connecting to a plaintext")
            || r.contains("ssl handshake failed")
                && (r.contains("eof") || r.contains("disconnected"))
        {
            Problem::ListenerHasNoTls
        } else {
            return None;
        },
    )
}

/// The text after `marker` in `reason` up to the next `(` or end, trimmed.
fn after<'a>(reason: &'a str, marker: &str) -> Option<&'a str> {
    let at = reason.to_ascii_lowercase().find(marker)? + marker.len();
    let rest = &reason[at..];
    Some(rest.split(['(', ';']).next().unwrap_or(rest).trim())
}

fn diagnosis_of(
    problem: Problem,
    reason: &str,
    section: &str,
    client: &BTreeMap<String, String>,
) -> Diagnosis {
    let setting = |key: &str| {
        client
            .get(key)
            .filter(|v| !v.is_empty())
            .map_or_else(|| "not set".to_owned(), |v| format!("{v:?}"))
    };
    let key = |name: &str| format!("{section}.\"{name}\"");
    // `kafka.client` -> `kafka.brokers`, `source.kafka.client` -> `source.kafka.brokers`.
    let brokers_key = format!(
        "{}.brokers",
        section.strip_suffix(".client").unwrap_or(section)
    );
    let protocol = client
        .get("security.protocol")
        .filter(|v| !v.is_empty())
        .map_or_else(|| "not set (PLAINTEXT)".to_owned(), |v| format!("{v:?}"));
    match problem {
        Problem::Credentials => Diagnosis {
            key: key("sasl.password"),
            what: format!(
                "Kafka refused the SASL credentials: authentication of {} = {} with {} = {} failed (wrong password or unknown user)",
                key("sasl.username"),
                setting("sasl.username"),
                key("sasl.mechanism"),
                setting("sasl.mechanism"),
            ),
            fix: format!(
                "set {} (and {}) to the credentials of a user the broker knows for this mechanism; sluice does not retry a refused password",
                key("sasl.password"),
                key("sasl.username"),
            ),
        },
        Problem::Mechanism => {
            let offered = after(reason, "supported mechanisms:")
                .filter(|m| !m.is_empty())
                .map_or_else(String::new, |m| format!(" (the broker enables: {m})"));
            Diagnosis {
                key: key("sasl.mechanism"),
                what: format!(
                    "the broker's listener does not enable {} = {}{offered}",
                    key("sasl.mechanism"),
                    setting("sasl.mechanism"),
                ),
                fix: format!(
                    "set {} to one of the mechanisms the listener enables (its sasl.enabled.mechanisms, e.g. SCRAM-SHA-512), with a user created for it",
                    key("sasl.mechanism"),
                ),
            }
        }
        Problem::CertificateExpired => Diagnosis {
            key: brokers_key.clone(),
            what: "the broker's TLS certificate has expired".to_owned(),
            fix: "renew the certificate on the broker (sluice checks its validity period)"
                .to_owned(),
        },
        Problem::HostnameMismatch => Diagnosis {
            key: brokers_key.clone(),
            what: "the broker's TLS certificate does not name the address sluice connects to"
                .to_owned(),
            fix: format!(
                "set {brokers_key} to addresses the certificate names (and the broker's advertised.listeners), or fix the certificate's subject alternative names"
            ),
        },
        Problem::UnknownCa => Diagnosis {
            key: key("ssl.ca.location"),
            what: format!(
                "the broker's TLS certificate is not signed by a CA sluice trusts ({} = {})",
                key("ssl.ca.location"),
                setting("ssl.ca.location"),
            ),
            fix: format!(
                "set {} to the PEM file of the CA that signed the broker's certificate (a broker signed by a public CA needs no setting)",
                key("ssl.ca.location"),
            ),
        },
        Problem::ListenerWantsTls => Diagnosis {
            key: key("security.protocol"),
            what: format!(
                "the broker's listener expects TLS but {} = {protocol} connects without it",
                key("security.protocol"),
            ),
            fix: format!(
                "set {} to the listener's protocol (SSL, or SASL_SSL with sasl.mechanism, sasl.username and sasl.password), or point {brokers_key} at a PLAINTEXT listener",
                key("security.protocol"),
            ),
        },
        Problem::ListenerHasNoTls => Diagnosis {
            key: key("security.protocol"),
            what: format!(
                "the broker's listener does not speak TLS but {} = {protocol} starts a TLS handshake",
                key("security.protocol"),
            ),
            fix: format!(
                "set {} to the listener's protocol (PLAINTEXT or SASL_PLAINTEXT), or point {brokers_key} at the broker's SSL / SASL_SSL listener",
                key("security.protocol"),
            ),
        },
    }
}

/// What an operator must change when librdkafka reports `reason` for a connection made with
/// the settings `client` of pipeline file section `section` (`kafka.client` or
/// `source.kafka.client`): bad credentials, a mechanism the broker does not enable, an untrusted
/// or expired certificate, a name mismatch, a client and a listener that disagree about TLS.
/// `None` for errors that retrying may fix (a broker down).
pub fn diagnose(
    reason: &str,
    section: &str,
    client: &BTreeMap<String, String>,
) -> Option<Diagnosis> {
    problem_of(reason).map(|problem| diagnosis_of(problem, reason, section, client))
}

/// [`diagnose`]'s fix for a `[kafka.client]` connection, without the settings.
pub fn connection_fix(reason: &str) -> Option<String> {
    diagnose(reason, "kafka.client", &BTreeMap::new()).map(|d| d.fix)
}

#[derive(Debug, Default)]
struct Watched {
    reports: std::collections::HashMap<Problem, u32>,
    fatal: Option<(String, Diagnosis)>,
}

/// A client context that keeps the first connection error only an operator can fix (see
/// [`diagnose`]), so a command fails at once with it instead of timing out. Clones share
/// what was seen.
#[derive(Debug, Clone, Default)]
pub struct ConnectionWatch {
    section: Arc<str>,
    client: Arc<BTreeMap<String, String>>,
    seen: Arc<Mutex<Watched>>,
}

impl ConnectionWatch {
    /// A watch of clients made with `client`, the settings of pipeline file section `section`.
    pub fn new(section: &str, client: &BTreeMap<String, String>) -> Self {
        Self {
            section: Arc::from(section),
            client: Arc::new(client.clone()),
            seen: Arc::default(),
        }
    }

    /// The first such error so far: (librdkafka's reason, the diagnosis).
    pub fn fatal(&self) -> Option<(String, Diagnosis)> {
        self.seen.lock().ok().and_then(|s| s.fatal.clone())
    }

    /// Waits until an error only an operator can fix arrives.
    pub(super) async fn wait_fatal(&self) -> (String, Diagnosis) {
        loop {
            if let Some(fatal) = self.fatal() {
                return fatal;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`problem_of`], and what the client's settings tell: a plaintext client whose
    /// connections are closed while it asks for the API versions (its first request) talks to
    /// a TLS listener, which takes the request for a broken handshake.
    fn problem_of(&self, reason: &str) -> Option<Problem> {
        problem_of(reason).or_else(|| {
            let r = reason.to_ascii_lowercase();
            let plaintext = self
                .client
                .get("security.protocol")
                .is_none_or(|p| p.is_empty() || p.to_ascii_uppercase().ends_with("PLAINTEXT"));
            (plaintext
                && r.contains("in state apiversion_query")
                && (r.contains("connection closed by peer") || r.contains("disconnected")))
            .then_some(Problem::ListenerWantsTls)
        })
    }

    fn note(&self, reason: &str, problem: Option<Problem>) {
        let Some(problem) = problem else {
            return;
        };
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let count = seen.reports.entry(problem).or_default();
        *count += 1;
        if *count >= problem.reports_needed() && seen.fatal.is_none() {
            let diagnosis = diagnosis_of(problem, reason, &self.section, &self.client);
            seen.fatal = Some((reason.to_owned(), diagnosis));
        }
    }
}

/// The fatal error for a connection problem found while `what`.
pub(super) fn diagnosed_error(what: &str, reason: String, diagnosis: Diagnosis) -> PipelineError {
    PipelineError::fatal_with(
        format!("{what}: {} [{}]", diagnosis.what, diagnosis.key),
        diagnosis.fix,
        ClientReport(reason),
    )
}

impl ClientContext for ConnectionWatch {
    // librdkafka reports failed authentications and TLS handshakes in its log (called from its
    // own threads); an admin client's error events are not always polled.
    // Clients with this context log at debug level (see `watched_config`): a plaintext client
    // on a TLS listener only shows as connections closed at debug level.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            tracing::warn!(facility, "librdkafka: {message}");
        } else {
            tracing::debug!(facility, "librdkafka: {message}");
        }
        self.note(message, self.problem_of(message));
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka client error");
        let problem = self
            .problem_of(reason)
            .or(match error.rdkafka_error_code() {
                Some(RDKafkaErrorCode::Authentication) => Some(Problem::Credentials),
                _ => None,
            });
        self.note(reason, problem);
    }
}

impl rdkafka::consumer::ConsumerContext for ConnectionWatch {}

/// What librdkafka reported about the connection problem a [`Diagnosis`] explains.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct ClientReport(String);

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn librdkafka_reasons_name_the_key_to_change() {
        let client = settings(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "app"),
            ("sasl.password", "secret-value"),
        ]);
        let cases = [
            (
                "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                "source.kafka.client.\"sasl.password\"",
            ),
            (
                "SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-256,SCRAM-SHA-512",
                "source.kafka.client.\"sasl.mechanism\"",
            ),
            (
                "SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a PLAINTEXT broker listener? (after 0ms in state SSL_HANDSHAKE)",
                "source.kafka.client.\"security.protocol\"",
            ),
            (
                "ssl/statem/statem_clnt.c:2125:tls_post_process_server_certificate error:0A000086:SSL routines::certificate verify failed",
                "source.kafka.client.\"ssl.ca.location\"",
            ),
        ];
        for (reason, key) in cases {
            let d = diagnose(reason, "source.kafka.client", &client).expect(reason);
            assert_eq!(d.key, key, "{reason}");
            assert!(!d.what.contains("secret-value") && !d.fix.contains("secret-value"));
        }
        let d = diagnose(cases[1].0, "kafka.client", &client).unwrap();
        assert!(
            d.what
                .contains("= \"PLAIN\" (the broker enables: SCRAM-SHA-256,SCRAM-SHA-512)"),
            "{}",
            d.what
        );
        assert_eq!(
            diagnose("Connection refused", "kafka.client", &client),
            None
        );
    }

    #[test]
    fn a_plaintext_client_closed_during_its_first_request_talks_to_a_tls_listener() {
        let closed = "127.0.0.1:9093/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 1ms in state APIVERSION_QUERY)";
        let plaintext = ConnectionWatch::new("kafka.client", &BTreeMap::new());
        plaintext.note(closed, plaintext.problem_of(closed));
        assert_eq!(plaintext.fatal(), None, "once may be a broker restarting");
        plaintext.note(closed, plaintext.problem_of(closed));
        let (_, d) = plaintext.fatal().expect("twice is a TLS listener");
        assert_eq!(d.key, "kafka.client.\"security.protocol\"");
        let tls = ConnectionWatch::new("kafka.client", &settings(&[("security.protocol", "SSL")]));
        assert_eq!(tls.problem_of(closed), None);
    }
}
