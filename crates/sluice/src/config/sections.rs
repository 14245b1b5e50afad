//! The sections every pipeline shares: `[kafka]` (with its producer overrides, shown redacted),
//! `[delivery]`, `[admin]`, `[restart]`, `[ha]` and where state is kept.

use super::defaults::{
    DEFAULT_ADMIN_LISTEN, DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES, DEFAULT_MAX_IN_FLIGHT_RECORDS,
    DEFAULT_MEMORY_LIMIT, DEFAULT_RESTART_INITIAL_BACKOFF_MS, DEFAULT_RESTART_MAX_BACKOFF_MS,
    DEFAULT_TRANSACTION_INTERVAL_MS, DEFAULT_TRANSACTION_MAX_BYTES,
    IN_FLIGHT_SHARE_OF_MEMORY_LIMIT, default_admin_listen, default_dead_letter_max_value_bytes,
    default_failover_timeout_ms, default_initial_backoff_ms, default_max_backoff_ms,
    default_max_in_flight_records, default_memory_limit, default_standby_poll_ms,
    default_topic_partitions, default_topic_prefix, default_transaction_interval_ms,
    default_transaction_max_bytes, default_true,
};
use super::values::deserialize_byte_size;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// Where a pipeline's state is kept (`state_store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StateStoreKind {
    /// Files in `state_dir`: readable by this machine only.
    #[default]
    Local,
    /// A compacted Kafka topic (`state_topic`), written in Kafka transactions whose
    /// `transactional.id` is the pipeline's, so an instance that took over fences the writes of
    /// the one it replaced.
    Kafka,
}

/// `[ha]`: how instances of one pipeline elect the one that streams (see docs/high-availability.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    /// How this instance is named in `/health` and in the source's session list; default
    /// `<hostname>:<pid>`.
    pub instance_id: Option<String>,
    /// How long the source server waits for a silent active instance (a lost network, a
    /// frozen machine) before it ends that instance's sessions, so that a standby can take
    /// over: PostgreSQL's `idle_session_timeout` of the session that holds the active role and
    /// `wal_sender_timeout` of the replication connection; MySQL's `wait_timeout` of the
    /// session that holds the role and `net_write_timeout` of the binlog dump (in seconds,
    /// rounded up). A killed process is noticed at once; this bounds the takeover after a
    /// silent loss.
    #[serde(default = "default_failover_timeout_ms")]
    pub failover_timeout_ms: u64,
    /// How often a standby asks whether it may take over.
    #[serde(default = "default_standby_poll_ms")]
    pub standby_poll_ms: u64,
}

impl Default for HaConfig {
    fn default() -> Self {
        Self {
            instance_id: None,
            failover_timeout_ms: default_failover_timeout_ms(),
            standby_poll_ms: default_standby_poll_ms(),
        }
    }
}

impl HaConfig {
    /// `instance_id`, or `<hostname>:<pid>`.
    pub fn instance_id(&self) -> String {
        if let Some(id) = self.instance_id.as_ref().filter(|id| !id.trim().is_empty()) {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("{host}:{}", std::process::id())
    }
}

/// Whether a librdkafka property holds a secret: librdkafka's sensitive properties
/// (`sasl.password`, `ssl.key.password`, `ssl.keystore.password`, `ssl.key.pem`,
/// `sasl.oauthbearer.client.secret`, …) and anything named like one.
pub fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        ".pem",
        "ssl_key",
        "oauthbearer.config",
        "jaas",
    ]
    .iter()
    .any(|part| key.contains(part))
}

/// Debug-prints librdkafka properties with the values of secret ones (see
/// [`is_secret_property`]) replaced by `<redacted>`.
pub struct RedactedProperties<'a>(pub &'a BTreeMap<String, String>);

impl fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(key, value)| {
                let shown = if is_secret_property(key) {
                    "<redacted>"
                } else {
                    value.as_str()
                };
                (key, shown)
            }))
            .finish()
    }
}

/// `[kafka]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// Topics are `<topic_prefix>.<schema>.<table>`.
    #[serde(default = "default_topic_prefix")]
    pub topic_prefix: String,
    /// The older name of `[kafka.events] tombstones_on_delete` (still accepted); read
    /// [`KafkaConfig::tombstones_on_delete`].
    #[serde(default, rename = "tombstones_on_delete")]
    pub tombstones_on_delete_alias: Option<bool>,
    /// Create missing topics.
    #[serde(default = "default_true")]
    pub create_topics: bool,
    /// Partitions of the topics sluice creates.
    #[serde(default = "default_topic_partitions")]
    pub topic_partitions: u32,
    /// Replication factor of the topics sluice creates; unset = the broker's default.
    pub topic_replication_factor: Option<u16>,
    /// Topic configs (Kafka's names, e.g. `"cleanup.policy" = "compact"`) for every topic
    /// sluice creates; see [`KafkaConfig::topic_configs`] for the defaults a compacted topic gets.
    #[serde(default)]
    pub topic_config: BTreeMap<String, String>,
    /// Topic configs for one topic by its full name; they override `topic_config`.
    #[serde(default)]
    pub topic_config_by_topic: BTreeMap<String, BTreeMap<String, String>>,
    /// librdkafka properties for every client sluice makes (producer, admin, metadata):
    /// security (`security.protocol`, `ssl.*`, `sasl.*`) and the like, by their own names.
    #[serde(default)]
    pub client: BTreeMap<String, String>,
    /// librdkafka producer properties by their own names; they override sluice's defaults and
    /// `[kafka.client]`.
    #[serde(default)]
    pub producer: BTreeMap<String, String>,
    /// Accept producer overrides that break sluice's guarantees (idempotence off, `acks` other
    /// than `all`, more than 5 requests in flight); refused at start otherwise.
    #[serde(default)]
    pub allow_unsafe_producer_settings: bool,
    /// When set, a captured table's column changes (added, dropped, type changed) seen
    /// mid-stream become events on this topic, keyed by the table.
    pub schema_changes_topic: Option<String>,
    /// `[kafka.events]`: Debezium's options and sluice's additions to its events (all off:
    /// Debezium's default output).
    #[serde(default)]
    pub events: crate::event::EventOptions,
}

impl fmt::Debug for KafkaConfig {
    // `client` and `producer` may hold `sasl.password` and the like.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("topic_prefix", &self.topic_prefix)
            .field("tombstones_on_delete", &self.tombstones_on_delete())
            .field("create_topics", &self.create_topics)
            .field("topic_partitions", &self.topic_partitions)
            .field("topic_replication_factor", &self.topic_replication_factor)
            .field("topic_config", &self.topic_config)
            .field("topic_config_by_topic", &self.topic_config_by_topic)
            .field("client", &RedactedProperties(&self.client))
            .field("producer", &RedactedProperties(&self.producer))
            .field(
                "allow_unsafe_producer_settings",
                &self.allow_unsafe_producer_settings,
            )
            .field("schema_changes_topic", &self.schema_changes_topic)
            .field("events", &self.events)
            .finish()
    }
}

/// What a compacted topic sluice creates gets unless `topic_config` says otherwise: a segment
/// rolls at least hourly (the active segment is never cleaned, and Kafka's default
/// `segment.ms` is 7 days), records are compactable at once, tombstones stay a day.
pub const COMPACTED_TOPIC_DEFAULTS: &[(&str, &str)] = &[
    ("segment.ms", "3600000"),
    ("min.compaction.lag.ms", "0"),
    ("delete.retention.ms", "86400000"),
];

impl KafkaConfig {
    /// The configs sluice creates `topic` with: `topic_config` (for change-event topics only:
    /// `events_topic`), then `topic_config_by_topic.<topic>`, then, when `cleanup.policy`
    /// contains `compact`, [`COMPACTED_TOPIC_DEFAULTS`] for the keys still unset.
    pub fn topic_configs(&self, topic: &str, events_topic: bool) -> BTreeMap<String, String> {
        let mut configs = if events_topic {
            self.topic_config.clone()
        } else {
            BTreeMap::new()
        };
        if let Some(own) = self.topic_config_by_topic.get(topic) {
            configs.extend(own.clone());
        }
        let compacted = configs
            .get("cleanup.policy")
            .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"));
        if compacted {
            for (key, value) in COMPACTED_TOPIC_DEFAULTS {
                configs
                    .entry((*key).to_owned())
                    .or_insert_with(|| (*value).to_owned());
            }
        }
        configs
    }

    /// Whether a delete is followed by a tombstone (null value): Debezium's
    /// `tombstones.on.delete`, `[kafka.events] tombstones_on_delete` or its older name
    /// `kafka.tombstones_on_delete`; true when neither is set.
    pub fn tombstones_on_delete(&self) -> bool {
        self.events
            .tombstones_on_delete
            .or(self.tombstones_on_delete_alias)
            .unwrap_or(true)
    }
}

/// What to do with a record Kafka rejects permanently (too large, not authorized, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermanentErrorPolicy {
    /// Stop the pipeline with the reason; nothing after the record is confirmed to the source.
    #[default]
    Stop,
    /// Send the record to `delivery.dead_letter_topic` with the reason in headers, then go on.
    DeadLetter,
}

/// `delivery.guarantee`: what a crash may do to the records in Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryGuarantee {
    /// Nothing is lost; records after the last confirmed position may be written again.
    #[default]
    AtLeastOnce,
    /// Records and the position they lead to are committed in one Kafka transaction: consumers
    /// with `isolation.level = read_committed` see every change exactly once (PostgreSQL
    /// sources).
    ExactlyOnce,
}

/// `[delivery]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// `at_least_once` (default) or `exactly_once`.
    #[serde(default)]
    pub guarantee: DeliveryGuarantee,
    /// Exactly once: the longest a Kafka transaction stays open before it commits.
    #[serde(default = "default_transaction_interval_ms")]
    pub transaction_interval_ms: u64,
    /// Exactly once: a transaction commits as soon as it holds this many record bytes.
    #[serde(default = "default_transaction_max_bytes")]
    pub transaction_max_bytes: u64,
    /// Exactly once: the compacted topic of committed positions (default
    /// `<topic_prefix>.sluice_offsets`).
    pub offsets_topic: Option<String>,
    /// The memory the pipeline's queues are sized for (bytes, or a string with a unit:
    /// `"256MiB"`): the in-flight byte budget and librdkafka's queue are derived from it
    /// unless set themselves.
    #[serde(
        default = "default_memory_limit",
        deserialize_with = "deserialize_byte_size"
    )]
    pub memory_limit: u64,
    /// Bytes of change events between the source and Kafka's acknowledgement (default: an
    /// eighth of `memory_limit`); see [`DeliveryConfig::in_flight_bytes`].
    #[serde(default)]
    pub max_in_flight_bytes: Option<u32>,
    /// Row changes between the source and Kafka's acknowledgement.
    #[serde(default = "default_max_in_flight_records")]
    pub max_in_flight_records: u32,
    /// What to do with a record Kafka rejects permanently.
    #[serde(default)]
    pub on_permanent_error: PermanentErrorPolicy,
    /// The dead-letter topic (required with `on_permanent_error = "dead_letter"`).
    pub dead_letter_topic: Option<String>,
    /// Values larger than this are left out of dead-letter records (the headers say so).
    #[serde(default = "default_dead_letter_max_value_bytes")]
    pub dead_letter_max_value_bytes: u32,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            guarantee: DeliveryGuarantee::default(),
            transaction_interval_ms: DEFAULT_TRANSACTION_INTERVAL_MS,
            transaction_max_bytes: DEFAULT_TRANSACTION_MAX_BYTES,
            offsets_topic: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            max_in_flight_bytes: None,
            max_in_flight_records: DEFAULT_MAX_IN_FLIGHT_RECORDS,
            on_permanent_error: PermanentErrorPolicy::default(),
            dead_letter_topic: None,
            dead_letter_max_value_bytes: DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES,
        }
    }
}

impl DeliveryConfig {
    /// The in-flight byte budget: `max_in_flight_bytes`, else `memory_limit` divided by
    /// [`IN_FLIGHT_SHARE_OF_MEMORY_LIMIT`] (at least 1 MiB).
    pub fn in_flight_bytes(&self) -> u32 {
        self.max_in_flight_bytes.unwrap_or_else(|| {
            u32::try_from(self.memory_limit / IN_FLIGHT_SHARE_OF_MEMORY_LIMIT)
                .unwrap_or(u32::MAX)
                .max(1024 * 1024)
        })
    }
}

/// `[admin]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `ip:port` of the admin HTTP server (`/health`, `/metrics`); loopback by default.
    #[serde(default = "default_admin_listen")]
    pub listen: String,
    /// When set, `/api/v1/*` requires `Authorization: Bearer <token>` (use `${ENV}` to keep it
    /// out of the file). `/health`, `/metrics` and the status page stay open.
    pub token: Option<String>,
    /// PEM file of the admin server's certificate (and its chain): with `tls_key`, the server
    /// speaks HTTPS only.
    pub tls_cert: Option<String>,
    /// PEM file of the private key of `tls_cert`.
    pub tls_key: Option<String>,
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the token.
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish()
    }
}

impl AdminConfig {
    /// The TLS files as (certificate, key), when both are set.
    pub fn tls_files(&self) -> Option<(&str, &str)> {
        match (self.tls_cert.as_deref(), self.tls_key.as_deref()) {
            (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => Some((cert, key)),
            _ => None,
        }
    }

    /// A certificate without its key, or a key without its certificate: (key, problem).
    pub fn tls_issue(&self) -> Option<(&'static str, String)> {
        let set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        match (set(&self.tls_cert), set(&self.tls_key)) {
            (true, false) => Some((
                "admin.tls_key",
                "missing: admin.tls_cert is set, so the server needs the PEM file of its private key too".into(),
            )),
            (false, true) => Some((
                "admin.tls_cert",
                "missing: admin.tls_key is set, so the server needs the PEM file of its certificate too".into(),
            )),
            _ => None,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_ADMIN_LISTEN.to_owned(),
            token: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// `[restart]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartConfig {
    /// Which failures restart the pipeline.
    #[serde(default)]
    pub policy: RestartPolicy,
    /// With `policy = "on-failure"`: consecutive failed runs after which the pipeline stops;
    /// 0 = no limit. A run that streamed for a minute resets the count.
    #[serde(default)]
    pub max_restarts: u32,
    /// First delay before restarting; doubles per consecutive failure, with jitter.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    /// Cap of the delay.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            policy: RestartPolicy::default(),
            max_restarts: 0,
            initial_backoff_ms: DEFAULT_RESTART_INITIAL_BACKOFF_MS,
            max_backoff_ms: DEFAULT_RESTART_MAX_BACKOFF_MS,
        }
    }
}

/// Which failures restart a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Restart after retryable failures (lost connections, unreachable servers), up to
    /// `max_restarts` in a row; stop on failures that need an operator (settings, permissions).
    #[default]
    OnFailure,
    /// Restart after every failure, those that need an operator too (the fix may come while
    /// sluice waits); the backoff still grows to its cap.
    Always,
    /// Never restart: the first failure stops the pipeline (for an outside supervisor).
    Never,
}

impl RestartPolicy {
    /// The policy's name as written in the pipeline file.
    pub fn name(self) -> &'static str {
        match self {
            Self::OnFailure => "on-failure",
            Self::Always => "always",
            Self::Never => "never",
        }
    }
}
