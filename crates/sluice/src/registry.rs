//! The schema registry: `[schema_registry]` and a client of the Confluent Schema Registry API
//! (Confluent's server, Apicurio's `/apis/ccompat/v7`, Karapace, Redpanda's).
//!
//! Settings keep the names Confluent's serializers use (`basic.auth.user.info`,
//! `auto.register.schemas`, `key.subject.name.strategy`, …), so a converter's configuration
//! carries over. Ids are cached per subject and schema text: a schema is registered (or looked
//! up) once per process, never per record.
//!
//! What the client does when the registry answers badly:
//! - no answer, a connection error, a timeout, a 5xx: the next URL, then again after a backoff
//!   (1 s doubling to 30 s), for ever: nothing is written meanwhile, so nothing is lost; each
//!   failure is logged with the URL and the error;
//! - 409 (the subject's compatibility rule refuses the schema), 401/403, 404 on a look-up
//!   without `auto.register.schemas`, 422 (an invalid schema): an error naming the subject,
//!   the registry's message and the fix; the pipeline stops.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

/// How subjects are named (Confluent's `*.subject.name.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectNameStrategy {
    /// `<topic>-key` / `<topic>-value` (the default).
    #[default]
    TopicName,
    /// The record's full name.
    RecordName,
    /// `<topic>-<record full name>`.
    TopicRecordName,
}

impl<'de> Deserialize<'de> for SubjectNameStrategy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // Confluent's class names are accepted as well as the short ones.
        let short = text.rsplit('.').next().unwrap_or(&text);
        match short {
            "TopicNameStrategy" => Ok(Self::TopicName),
            "RecordNameStrategy" => Ok(Self::RecordName),
            "TopicRecordNameStrategy" => Ok(Self::TopicRecordName),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is not a subject name strategy: expected TopicNameStrategy, \
                 RecordNameStrategy or TopicRecordNameStrategy"
            ))),
        }
    }
}

impl SubjectNameStrategy {
    /// The subject of a topic's key or value schema whose record is `record`.
    pub fn subject(self, topic: &str, is_key: bool, record: &str) -> String {
        match self {
            Self::TopicName => format!("{topic}-{}", if is_key { "key" } else { "value" }),
            Self::RecordName => record.to_owned(),
            Self::TopicRecordName => format!("{topic}-{record}"),
        }
    }
}

/// One URL or several (tried in turn), as a string (comma-separated, as Confluent's
/// `schema.registry.url`) or an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls(pub Vec<String>);

impl<'de> Deserialize<'de> for Urls {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            List(Vec<String>),
        }
        let urls = match Form::deserialize(deserializer)? {
            Form::Text(text) => text.split(',').map(|u| u.trim().to_owned()).collect(),
            Form::List(list) => list,
        };
        Ok(Self(
            urls.into_iter()
                .filter(|u| !u.is_empty())
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
        ))
    }
}

impl Urls {
    /// The URLs as they may be shown (logs, status, `check`, `doctor`): a password in one
    /// (`http://user:password@host`) is replaced by `***`.
    pub fn shown(&self) -> String {
        self.0
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The first URL, as it may be shown.
    pub fn first_shown(&self) -> String {
        self.0.first().map(|u| redact(u)).unwrap_or_default()
    }
}

/// `url` without the password of its user information.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// `[schema_registry]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The registry's base URL(s), e.g. `http://registry:8081` or Apicurio's
    /// `http://registry:8080/apis/ccompat/v7`.
    pub url: Urls,
    /// `user:password` for HTTP basic authentication.
    #[serde(rename = "basic.auth.user.info", default)]
    pub basic_auth_user_info: Option<String>,
    /// A bearer token (`Authorization: Bearer …`).
    #[serde(rename = "bearer.auth.token", default)]
    pub bearer_auth_token: Option<String>,
    /// A PEM file of CA certificates to trust (added to the system's).
    #[serde(rename = "ssl.ca.location", default)]
    pub ssl_ca_location: Option<String>,
    /// A PEM file holding the client certificate (chain) and its private key, for mutual TLS.
    #[serde(rename = "ssl.keystore.location", default)]
    pub ssl_keystore_location: Option<String>,
    /// Each request's timeout (ms, default 10,000).
    #[serde(rename = "request.timeout.ms", default = "default_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Register schemas the registry does not hold yet (default true); off: look them up, and
    /// stop when one is missing.
    #[serde(rename = "auto.register.schemas", default = "yes")]
    pub auto_register_schemas: bool,
    /// Write with the subject's latest version's id (its schema must equal sluice's).
    #[serde(rename = "use.latest.version", default)]
    pub use_latest_version: bool,
    /// Ask the registry to normalize schemas before it compares them (`?normalize=true`).
    #[serde(rename = "normalize.schemas", default)]
    pub normalize_schemas: bool,
    /// Subject names of key schemas.
    #[serde(rename = "key.subject.name.strategy", default)]
    pub key_subject_name_strategy: SubjectNameStrategy,
    /// Subject names of value schemas.
    #[serde(rename = "value.subject.name.strategy", default)]
    pub value_subject_name_strategy: SubjectNameStrategy,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("url", &self.url.shown())
            .field(
                "basic.auth.user.info",
                &self.basic_auth_user_info.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "bearer.auth.token",
                &self.bearer_auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ssl.ca.location", &self.ssl_ca_location)
            .field("ssl.keystore.location", &self.ssl_keystore_location)
            .field("request.timeout.ms", &self.request_timeout_ms)
            .field("auto.register.schemas", &self.auto_register_schemas)
            .field("use.latest.version", &self.use_latest_version)
            .field("normalize.schemas", &self.normalize_schemas)
            .finish()
    }
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn yes() -> bool {
    true
}

impl RegistryConfig {
    /// What is wrong with the section, as (key, problem) pairs.
    pub fn issues(&self) -> Vec<(&'static str, String)> {
        let mut issues = Vec::new();
        if self.url.0.is_empty() {
            issues.push((
                "url",
                "is empty: expected http(s)://host:port[/path]".into(),
            ));
        }
        for url in &self.url.0 {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                issues.push(("url", format!("{url:?} is not an http:// or https:// URL")));
            }
        }
        if let Some(info) = &self.basic_auth_user_info
            && !info.contains(':')
        {
            issues.push(("basic.auth.user.info", "expected \"user:password\"".into()));
        }
        if self.basic_auth_user_info.is_some() && self.bearer_auth_token.is_some() {
            issues.push((
                "bearer.auth.token",
                "cannot be combined with basic.auth.user.info: choose one".into(),
            ));
        }
        if self.request_timeout_ms == 0 {
            issues.push(("request.timeout.ms", "expected at least 1 (ms)".into()));
        }
        issues
    }
}

/// An error the registry answered that retrying will not fix.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry refused the schema (HTTP 409: the subject's compatibility rule).
    #[error(
        "the schema registry refused the new schema for subject {subject:?} ({status}): \
         {message}. Its compatibility level is {level}: the change breaks it. Either make the \
         change compatible (e.g. add the column as nullable), or let the subject take it \
         (PUT {url}/config/{subject} {{\"compatibility\":\"NONE\"}}, then put it back), or \
         write to a new subject"
    )]
    Incompatible {
        /// The subject.
        subject: String,
        /// The HTTP status.
        status: u16,
        /// The registry's message.
        message: String,
        /// The subject's compatibility level (or why it is unknown).
        level: String,
        /// The registry URL.
        url: String,
    },
    /// Anything else the registry refused.
    #[error("the schema registry answered {status} for subject {subject:?}: {message}. {fix}")]
    Refused {
        /// The subject.
        subject: String,
        /// The HTTP status.
        status: u16,
        /// The registry's message.
        message: String,
        /// What to do.
        fix: &'static str,
    },
    /// The client could not be built (a TLS file, …).
    #[error("schema_registry: {0}")]
    Config(String),
}

/// The schema of one id, once fetched.
type SchemaCell = std::sync::Arc<tokio::sync::OnceCell<std::sync::Arc<(String, String)>>>;

/// Why a schema was not fetched by id.
enum Unfetched {
    /// The registry holds no such id, or answered without a schema: the message.
    Missing(String),
    /// It refused the request.
    Refused(RegistryError),
}

/// Told when the registry stops answering (`Some(error)`) and answers again (`None`).
pub type HealthObserver = Box<dyn Fn(Option<String>) + Send + Sync>;

/// A client of the registry, with its id cache.
pub struct Registry {
    config: RegistryConfig,
    http: reqwest::Client,
    /// (subject, schema text) → id.
    ids: Mutex<HashMap<(String, String), u32>>,
    /// id → (schema type, schema text), fetched by consumers (the sinks): one cell per id, so
    /// that workers asking for the same id at once wait for one request.
    schemas: Mutex<HashMap<u32, SchemaCell>>,
    observer: Option<HealthObserver>,
    failing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("config", &self.config)
            .finish()
    }
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

#[derive(Deserialize)]
struct LatestAnswer {
    id: u32,
    schema: String,
}

/// The answer of one request: success, or a status and message.
enum Answer {
    Ok(bytes::Bytes),
    Status(u16, String),
}

impl Registry {
    /// A client for `config`.
    ///
    /// # Errors
    ///
    /// A TLS file that cannot be read or parsed.
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        let timeout = Duration::from_millis(config.request_timeout_ms);
        crate::crypto::install();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ssl_ca_location {
            let pem = std::fs::read(path).map_err(|e| {
                RegistryError::Config(format!("ssl.ca.location {path:?} cannot be read: {e}"))
            })?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                RegistryError::Config(format!("ssl.ca.location {path:?} is not PEM: {e}"))
            })? {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some(path) = &config.ssl_keystore_location {
            let pem = std::fs::read(path).map_err(|e| {
                RegistryError::Config(format!(
                    "ssl.keystore.location {path:?} cannot be read: {e}"
                ))
            })?;
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                RegistryError::Config(format!(
                    "ssl.keystore.location {path:?} must hold a PEM certificate and its \
                     private key: {e}"
                ))
            })?;
            builder = builder.identity(identity);
        }
        let http = builder
            .build()
            .map_err(|e| RegistryError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            config,
            http,
            ids: Mutex::new(HashMap::new()),
            schemas: Mutex::new(HashMap::new()),
            observer: None,
            failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Tells `observer` when the registry stops answering and when it answers again (the
    /// pipeline's status shows it).
    #[must_use]
    pub fn with_observer(mut self, observer: HealthObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    fn report(&self, error: Option<String>) {
        use std::sync::atomic::Ordering;
        let failing = error.is_some();
        if (failing || self.failing.load(Ordering::Relaxed))
            && let Some(observer) = &self.observer
        {
            observer(error);
        }
        self.failing.store(failing, Ordering::Relaxed);
    }

    /// The settings.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// The subject of a key or value schema of `topic` whose record is `record`.
    pub fn subject(&self, topic: &str, is_key: bool, record: &str) -> String {
        let strategy = if is_key {
            self.config.key_subject_name_strategy
        } else {
            self.config.value_subject_name_strategy
        };
        strategy.subject(topic, is_key, record)
    }

    /// The id of `schema` (Avro schema text) under `subject`: from the cache, else registered
    /// (or looked up, or the latest version's, per the settings). Retries what a retry can fix.
    ///
    /// # Errors
    ///
    /// What the registry refused, with the fix.
    pub async fn id(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let cache_key = (subject.to_owned(), schema.to_owned());
        if let Some(&id) = self.ids.lock().expect("not poisoned").get(&cache_key) {
            return Ok(id);
        }
        let id = if self.config.use_latest_version {
            self.latest(subject, schema).await?
        } else {
            self.register(subject, schema).await?
        };
        self.ids.lock().expect("not poisoned").insert(cache_key, id);
        Ok(id)
    }

    /// The schema registered under `id` (`GET /schemas/ids/{id}`), as (schema type, schema
    /// text); the type is `AVRO` when the registry leaves it out (Confluent's API does for Avro).
    /// A schema found is cached: each id is asked for once per process (ids never change their
    /// schema), callers asking for the same id at once waiting for one request. Retries what a
    /// retry can fix, as [`Registry::id`] does.
    ///
    /// # Errors
    ///
    /// `Ok(Err(message))`: the registry holds no such id (404), or answered without a schema;
    /// `Err`: it refused the request (credentials, …).
    pub async fn schema_by_id(
        &self,
        id: u32,
    ) -> Result<Result<std::sync::Arc<(String, String)>, String>, RegistryError> {
        #[derive(Deserialize)]
        struct SchemaAnswer {
            schema: String,
            #[serde(rename = "schemaType", default)]
            schema_type: Option<String>,
        }
        let cell = std::sync::Arc::clone(
            self.schemas
                .lock()
                .expect("not poisoned")
                .entry(id)
                .or_default(),
        );
        let fetched = cell
            .get_or_try_init(|| async {
                let path = format!("/schemas/ids/{id}");
                match self.request(reqwest::Method::GET, &path, None).await {
                    Answer::Ok(bytes) => serde_json::from_slice::<SchemaAnswer>(&bytes)
                        .map(|answer| {
                            std::sync::Arc::new((
                                answer.schema_type.unwrap_or_else(|| "AVRO".into()),
                                answer.schema,
                            ))
                        })
                        .map_err(|e| {
                            Unfetched::Missing(format!(
                                "the registry answered GET /schemas/ids/{id} without a schema: {e}"
                            ))
                        }),
                    Answer::Status(404, message) => Err(Unfetched::Missing(format!(
                        "schema id {id} is unknown to the registry at {} ({message})",
                        self.config.url.shown()
                    ))),
                    Answer::Status(status, message) => Err(Unfetched::Refused(refused(
                        &format!("(schema id {id})"),
                        status,
                        message,
                    ))),
                }
            })
            .await;
        match fetched {
            Ok(found) => Ok(Ok(std::sync::Arc::clone(found))),
            Err(Unfetched::Missing(message)) => Ok(Err(message)),
            Err(Unfetched::Refused(error)) => Err(error),
        }
    }

    async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let body = serde_json::json!({ "schema": schema }).to_string();
        let path = if self.config.auto_register_schemas {
            format!("/subjects/{}/versions", encode_subject(subject))
        } else {
            format!("/subjects/{}", encode_subject(subject))
        };
        let path = if self.config.normalize_schemas {
            format!("{path}?normalize=true")
        } else {
            path
        };
        match self.request(reqwest::Method::POST, &path, Some(body)).await {
            Answer::Ok(bytes) => serde_json::from_slice::<IdAnswer>(&bytes)
                .map(|a| a.id)
                .map_err(|e| RegistryError::Refused {
                    subject: subject.to_owned(),
                    status: 200,
                    message: format!("an answer without an id: {e}"),
                    fix: "Check that schema_registry.url points at the Confluent API \
                          (Apicurio: .../apis/ccompat/v7).",
                }),
            Answer::Status(409, message) => Err(RegistryError::Incompatible {
                subject: subject.to_owned(),
                status: 409,
                message,
                level: self.compatibility(subject).await,
                url: self.config.url.first_shown(),
            }),
            Answer::Status(404, message) if !self.config.auto_register_schemas => {
                Err(RegistryError::Refused {
                    subject: subject.to_owned(),
                    status: 404,
                    message,
                    fix: "auto.register.schemas is off and the registry does not hold this \
                          schema: register it (or turn auto.register.schemas on).",
                })
            }
            Answer::Status(status, message) => Err(refused(subject, status, message)),
        }
    }

    async fn latest(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let path = format!("/subjects/{}/versions/latest", encode_subject(subject));
        match self.request(reqwest::Method::GET, &path, None).await {
            Answer::Ok(bytes) => {
                let latest: LatestAnswer =
                    serde_json::from_slice(&bytes).map_err(|e| RegistryError::Refused {
                        subject: subject.to_owned(),
                        status: 200,
                        message: format!("an answer without id and schema: {e}"),
                        fix: "Check that schema_registry.url points at the Confluent API.",
                    })?;
                let same = serde_json::from_str::<serde_json::Value>(&latest.schema).ok()
                    == serde_json::from_str::<serde_json::Value>(schema).ok();
                if !same {
                    return Err(RegistryError::Refused {
                        subject: subject.to_owned(),
                        status: 200,
                        message: format!(
                            "use.latest.version is on and the latest version (id {}) differs \
                             from the schema sluice writes",
                            latest.id
                        ),
                        fix: "Register sluice's schema as the latest version, or turn \
                              use.latest.version off.",
                    });
                }
                Ok(latest.id)
            }
            Answer::Status(status, message) => Err(refused(subject, status, message)),
        }
    }

    /// Reaches the registry (every URL in turn, once): its global compatibility level, or why
    /// it cannot be reached (`sluice check`).
    ///
    /// # Errors
    ///
    /// No URL answered, or the registry refused the credentials.
    pub async fn probe(&self) -> Result<String, String> {
        #[derive(Deserialize)]
        struct Level {
            #[serde(alias = "compatibility", alias = "compatibilityLevel")]
            level: String,
        }
        match self.request_once(reqwest::Method::GET, "/config", None).await {
            Answer::Ok(bytes) => serde_json::from_slice::<Level>(&bytes)
                .map(|l| l.level)
                .map_err(|e| format!("GET /config answered without a compatibility level ({e}): is this the Confluent API (Apicurio: .../apis/ccompat/v7)?")),
            Answer::Status(0, message) => Err(format!("no answer: {message}")),
            Answer::Status(status @ (401 | 403), message) => Err(format!(
                "{status} {message}: check basic.auth.user.info or bearer.auth.token"
            )),
            Answer::Status(status, message) => Err(format!("{status}: {message}")),
        }
    }

    /// How many versions `subject` has (0: none yet), or why that is unknown.
    pub async fn versions(&self, subject: &str) -> Result<usize, String> {
        let path = format!("/subjects/{}/versions", encode_subject(subject));
        match self.request_once(reqwest::Method::GET, &path, None).await {
            Answer::Ok(bytes) => serde_json::from_slice::<Vec<serde_json::Value>>(&bytes)
                .map(|v| v.len())
                .map_err(|e| format!("an answer that is not a list of versions: {e}")),
            Answer::Status(404, _) => Ok(0),
            Answer::Status(status, message) => Err(format!("{status}: {message}")),
        }
    }

    /// The subject's compatibility level (its own, else the registry's), or why it is unknown.
    pub async fn compatibility(&self, subject: &str) -> String {
        #[derive(Deserialize)]
        struct Level {
            #[serde(alias = "compatibility", alias = "compatibilityLevel")]
            level: String,
        }
        // The subject's own level, else (404: none set) the registry's. A dropped connection
        // or a 5xx is asked again a few times: falling back to the global level then would
        // name the wrong rule in the error an operator acts on.
        for path in [
            format!("/config/{}", encode_subject(subject)),
            "/config".to_owned(),
        ] {
            let mut pause = Duration::from_millis(200);
            for attempt in 1..=4 {
                match self.request_once(reqwest::Method::GET, &path, None).await {
                    Answer::Ok(bytes) => match serde_json::from_slice::<Level>(&bytes) {
                        Ok(level) => return level.level,
                        Err(_) => break,
                    },
                    Answer::Status(status, _) if (status == 0 || status >= 500) && attempt < 4 => {
                        tokio::time::sleep(pause).await;
                        pause *= 2;
                    }
                    Answer::Status(_, _) => break,
                }
            }
        }
        "unknown (GET /config did not answer)".into()
    }

    /// One request, retried over the URLs and with a backoff until an answer that is not a
    /// connection error or a 5xx.
    async fn request(&self, method: reqwest::Method, path: &str, body: Option<String>) -> Answer {
        let mut backoff = Duration::from_secs(1);
        loop {
            match self.request_once(method.clone(), path, body.clone()).await {
                Answer::Status(status, message) if status == 0 || status >= 500 => {
                    self.report(Some(format!(
                        "{} does not answer ({}); retrying in {} s",
                        self.config.url.shown(),
                        if status == 0 {
                            message
                        } else {
                            format!("{status}: {message}")
                        },
                        backoff.as_secs()
                    )));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
                answer => {
                    self.report(None);
                    return answer;
                }
            }
        }
    }

    /// One try over every URL: the first answer that is not a connection error or a 5xx (status
    /// 0: none answered).
    async fn request_once(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> Answer {
        let mut last = Answer::Status(0, "no URL".into());
        for base in &self.config.url.0 {
            let url = format!("{base}{path}");
            let shown = redact(&url);
            let mut request = self
                .http
                .request(method.clone(), &url)
                .header("Accept", "application/vnd.schemaregistry.v1+json");
            if let Some(body) = &body {
                request = request
                    .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                    .body(body.clone());
            }
            if let Some(info) = &self.config.basic_auth_user_info {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                request = request.basic_auth(user, Some(password));
            }
            if let Some(token) = &self.config.bearer_auth_token {
                request = request.bearer_auth(token);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let bytes = response.bytes().await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        return Answer::Ok(bytes);
                    }
                    let message = message_of(&bytes);
                    if status < 500 {
                        return Answer::Status(status, message);
                    }
                    tracing::warn!(url = %shown, status, %message, "schema registry: a server error; trying again");
                    last = Answer::Status(status, message);
                }
                Err(error) => {
                    // reqwest's message names the URL, password included: left out.
                    let error = error_chain(&error.without_url());
                    tracing::warn!(url = %shown, %error, "schema registry: no answer; trying again");
                    last = Answer::Status(0, error);
                }
            }
        }
        last
    }
}

fn refused(subject: &str, status: u16, message: String) -> RegistryError {
    let fix = match status {
        401 | 403 => {
            "Check schema_registry's credentials (basic.auth.user.info or bearer.auth.token) \
             and the principal's rights on the subject."
        }
        404 => "Check schema_registry.url (Apicurio: .../apis/ccompat/v7).",
        422 => "The registry found the schema invalid: report this as a bug of sluice.",
        _ => "See the registry's log.",
    };
    RegistryError::Refused {
        subject: subject.to_owned(),
        status,
        message,
        fix,
    }
}

/// The registry's `message` (Confluent's `{"error_code":…,"message":…}`), else the body.
fn message_of(bytes: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Message {
        message: String,
    }
    match serde_json::from_slice::<Message>(bytes) {
        Ok(m) => m.message,
        Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned(),
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A subject as a URL path segment (record names hold dots only, topics `[A-Za-z0-9._-]`;
/// anything else is percent-encoded).
fn encode_subject(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for byte in subject.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Registers a table's Avro key and envelope schemas (those `events` writes as Avro) and
/// returns their ids; `None` when neither keys nor values are Avro. `table` names the table
/// in errors. Every source calls it before the first record that needs the schemas.
///
/// # Errors
///
/// Avro is asked for without a registry; a name Avro does not allow; what the registry
/// refused (e.g. a change its compatibility rule forbids): the pipeline stops with the fix,
/// before any record that needs the schema is written.
pub async fn register_schemas(
    registry: Option<&Registry>,
    topic: &str,
    schemas: &crate::event::schema::RenderedSchemas,
    events: &crate::event::EventOptions,
    table: &str,
) -> Result<Option<crate::event::schema::RegisteredIds>, crate::error::PipelineError> {
    use crate::error::PipelineError;
    use crate::event::{EventFormat, avro};
    if !events.uses_avro() {
        return Ok(None);
    }
    let registry = registry.ok_or_else(|| {
        PipelineError::fatal(
            "kafka.events asks for Avro and no [schema_registry] is configured",
            "add [schema_registry] url = \"http://registry:8081\"",
        )
    })?;
    let one = |schema: &crate::event::schema::Schema, is_key: bool| {
        let text = avro::schema_text(schema);
        let subject = registry.subject(topic, is_key, &avro::record_name(schema));
        async move {
            let text = text.map_err(|e| {
                PipelineError::fatal(
                    format!("table {table}: {e}"),
                    "rename the column, or leave it out of the pipeline (column rules); Avro \
                     names are letters, digits and _",
                )
            })?;
            registry.id(&subject, &text).await.map_err(|e| {
                PipelineError::fatal(
                    format!("table {table}: {e}"),
                    "see the message: the pipeline stopped before writing any record that needs \
                     this schema, nothing is lost; it resumes from there once fixed",
                )
            })
        }
    };
    let key = match (&schemas.key, events.key_format() == EventFormat::Avro) {
        (Some(schema), true) => Some(one(schema, true).await?),
        _ => None,
    };
    let value = if events.value_format() == EventFormat::Avro {
        one(&schemas.envelope, false).await?
    } else {
        0
    };
    Ok(Some(crate::event::schema::RegisteredIds { key, value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry of one schema (id 1) on loopback that counts the requests it answers.
    async fn one_schema_registry() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&hits);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let hits = std::sync::Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = socket.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                    }
                    hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // Slow enough for concurrent callers to overlap.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let (status, body) = if request.starts_with(b"GET /schemas/ids/1 ") {
                        ("200 OK", r#"{"schema":"{\"type\":\"string\"}"}"#)
                    } else {
                        (
                            "404 Not Found",
                            r#"{"error_code":40403,"message":"Schema not found"}"#,
                        )
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, hits)
    }

    #[tokio::test]
    async fn a_schema_is_fetched_by_id_once_and_an_unknown_id_is_named() {
        let (url, hits) = one_schema_registry().await;
        let config: RegistryConfig = toml::from_str(&format!("url = \"{url}\"")).unwrap();
        let registry = std::sync::Arc::new(Registry::new(config).unwrap());
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let registry = std::sync::Arc::clone(&registry);
                tokio::spawn(async move { registry.schema_by_id(1).await })
            })
            .collect();
        for caller in callers {
            let found = caller.await.unwrap().unwrap().unwrap();
            assert_eq!(
                *found,
                ("AVRO".to_owned(), "{\"type\":\"string\"}".to_owned())
            );
        }
        for _ in 0..100 {
            registry.schema_by_id(1).await.unwrap().unwrap();
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        let missing = registry.schema_by_id(7).await.unwrap().unwrap_err();
        assert!(
            missing.contains("schema id 7 is unknown to the registry"),
            "{missing}"
        );
        assert!(missing.contains("Schema not found"), "{missing}");
    }

    #[test]
    fn subjects_follow_the_strategies() {
        let t = SubjectNameStrategy::TopicName;
        assert_eq!(
            t.subject("p.public.t", true, "p.public.t.Key"),
            "p.public.t-key"
        );
        assert_eq!(t.subject("p.public.t", false, "x"), "p.public.t-value");
        assert_eq!(
            SubjectNameStrategy::RecordName.subject("p.public.t", false, "p.public.t.Envelope"),
            "p.public.t.Envelope"
        );
        assert_eq!(
            SubjectNameStrategy::TopicRecordName.subject("top", false, "a.B"),
            "top-a.B"
        );
        let long: SubjectNameStrategy =
            serde_json::from_str("\"io.confluent.kafka.serializers.subject.RecordNameStrategy\"")
                .unwrap();
        assert_eq!(long, SubjectNameStrategy::RecordName);
        let error = serde_json::from_str::<SubjectNameStrategy>("\"Nope\"").unwrap_err();
        assert!(error.to_string().contains("TopicNameStrategy"), "{error}");
    }

    #[test]
    fn the_section_reads_confluents_names_and_names_what_is_wrong() {
        let config: RegistryConfig = toml::from_str(
            "url = \"http://a:8081/, http://b:8081\"\n\"basic.auth.user.info\" = \"u:p\"\n\
             \"auto.register.schemas\" = false\n",
        )
        .unwrap();
        assert_eq!(config.url.0, ["http://a:8081", "http://b:8081"]);
        assert!(!config.auto_register_schemas);
        assert!(config.issues().is_empty());
        assert!(!format!("{config:?}").contains("u:p"));
        let bad: RegistryConfig =
            toml::from_str("url = \"a:8081\"\n\"basic.auth.user.info\" = \"nopass\"\n").unwrap();
        let keys: Vec<_> = bad.issues().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["url", "basic.auth.user.info"]);
        assert_eq!(encode_subject("a b/c"), "a%20b%2Fc");
        let secret: RegistryConfig =
            toml::from_str("url = \"https://sluice:s3cret@reg:8081/x, http://b:8081\"\n").unwrap();
        assert_eq!(
            secret.url.shown(),
            "https://sluice:***@reg:8081/x, http://b:8081"
        );
        assert!(!format!("{secret:?}").contains("s3cret"));
    }
}
