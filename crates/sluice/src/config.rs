//! The pipeline file: one TOML document per pipeline.
//!
//! This module holds what every pipeline shares (`[kafka]`, `[delivery]`, `[admin]`,
//! `[restart]`, loading and its errors); each source's section (`[source.<kind>]`, a
//! [`SourceSection`]) lives with the source, each sink's configuration with the sink, and
//! `crate::pipeline_file` tells the kinds apart.
//!
//! Loading goes in three steps, all before any network I/O:
//! 1. parse the TOML;
//! 2. replace `${NAME}` and `${NAME:-default}` in every string value with the environment's
//!    value (a missing variable without a default is an error that names the key), and
//!    `${file:PATH}` with a file's contents without its trailing newline (a secret, e.g. a
//!    password mounted at `/run/secrets/…`; an unreadable file is an error that names the key
//!    and the path, never the contents);
//! 3. deserialize strictly (unknown keys are errors that name the key's path and the keys that
//!    are allowed there) and [`PipelineConfig::validate`] every field, collecting all errors.
//!
//! Defaults live in `DEFAULT_*` constants and nowhere else. Field names carry their units.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::str::FromStr;

use serde::Deserialize;

/// Default `delivery.memory_limit`: the memory a pipeline's queues are sized for.
pub const DEFAULT_MEMORY_LIMIT: u64 = 128 * 1024 * 1024;
/// The share of `delivery.memory_limit` given to the in-flight byte budget when
/// `delivery.max_in_flight_bytes` is not set: the budget's bytes are held about 2.5 times
/// (the admitted changes, librdkafka's copy of each record, its batches and their compressed
/// requests) on top of a fixed part (runtime, buffers, allocator) that measured ~70 MiB
/// during a backlog (bench/PROFILE.md, "Memory").
pub const IN_FLIGHT_SHARE_OF_MEMORY_LIMIT: u64 = 8;
/// The in-flight byte budget at the default memory limit (16 MiB).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u32 =
    (DEFAULT_MEMORY_LIMIT / IN_FLIGHT_SHARE_OF_MEMORY_LIMIT) as u32;
/// Default in-flight record budget.
pub const DEFAULT_MAX_IN_FLIGHT_RECORDS: u32 = 100_000;
/// Default topic prefix.
pub const DEFAULT_TOPIC_PREFIX: &str = "sluice";
/// Default partition count of topics sluice creates.
pub const DEFAULT_TOPIC_PARTITIONS: u32 = 1;
/// Default admin server address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8089";
/// Default first delay before reconnecting after a retryable failure.
pub const DEFAULT_RESTART_INITIAL_BACKOFF_MS: u64 = 500;
/// Default cap of the reconnect delay.
pub const DEFAULT_RESTART_MAX_BACKOFF_MS: u64 = 30_000;
/// Default cap on the value bytes copied into a dead-letter record.
pub const DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES: u32 = 900_000;
/// Default longest time an exactly-once Kafka transaction stays open before it commits.
pub const DEFAULT_TRANSACTION_INTERVAL_MS: u64 = 100;
/// Default bytes of records after which an exactly-once Kafka transaction commits early.
pub const DEFAULT_TRANSACTION_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// A whole change-data-capture pipeline file: the source section `S` (`[source.<S::KEY>]`,
/// e.g. `crate::source::postgres::config::PgPipelineConfig`) and what every source shares.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "S: SourceSection"))]
pub struct PipelineConfig<S> {
    /// The pipeline's name: used in metric labels, the default names the source gives what it
    /// creates (e.g. a replication slot), and the source connection's application name.
    pub name: String,
    /// Where changes come from: the one section under `[source]`.
    #[serde(deserialize_with = "deserialize_source")]
    pub source: S,
    /// Where they go.
    pub kafka: KafkaConfig,
    /// In-flight limits and what to do with records Kafka refuses.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// The admin HTTP server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Restarts after failures.
    #[serde(default)]
    pub restart: RestartConfig,
    /// Where sluice keeps what it must remember between runs (the slot's identity and the last
    /// position it confirmed); default `$XDG_STATE_HOME/sluice` or `~/.local/state/sluice`.
    pub state_dir: Option<String>,
    /// Where that state lives: `"local"` (`state_dir`, the default, for a single instance) or
    /// `"kafka"` (a compacted topic every instance can read, for a standby that takes over).
    #[serde(default)]
    pub state_store: StateStoreKind,
    /// With `state_store = "kafka"`: the compacted topic (default `_sluice_state`), created when
    /// missing; pipelines share it (documents are keyed by pipeline).
    pub state_topic: Option<String>,
    /// Active/standby: several instances of one pipeline, exactly one streams.
    #[serde(default)]
    pub ha: HaConfig,
    /// The schema registry Avro keys and values are written through (`kafka.events.format`).
    pub schema_registry: Option<crate::registry::RegistryConfig>,
    /// Kafka Connect's single message transforms, by Connect's names (`[transforms]`, with
    /// the predicates of `[predicates]`).
    #[serde(default)]
    pub transforms: crate::transform::TransformsConfig,
    /// The predicates `[transforms]` name.
    #[serde(default)]
    pub predicates: crate::transform::PredicatesConfig,
}

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

/// The default `state_topic`.
pub const DEFAULT_STATE_TOPIC: &str = "_sluice_state";

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

fn default_failover_timeout_ms() -> u64 {
    10_000
}

fn default_standby_poll_ms() -> u64 {
    500
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

/// A source's section of a pipeline file (`[source.<KEY>]`): its keys, defaults and rules
/// live with the source; [`PipelineConfig`] holds it.
pub trait SourceSection: serde::de::DeserializeOwned {
    /// The section's key under `[source]`, e.g. `"postgres"` for `[source.postgres]`.
    const KEY: &'static str;

    /// Whether the source elects an active instance and keeps its state with
    /// `state_store = "kafka"` (see docs/high-availability.md).
    const ELECTS_ACTIVE_INSTANCE: bool = false;

    /// The `[kafka.events]` options the source applies (`None`: every one); a source that
    /// applies only some (and `tombstones_on_delete`, which every source does) refuses the
    /// others rather than ignore them.
    const APPLIED_EVENT_OPTIONS: Option<&'static [&'static str]> = None;

    /// Whether the source writes column changes to `kafka.schema_changes_topic`; a source
    /// with a schema-change topic of its own (MySQL: `<topic_prefix>`, Debezium's) refuses it
    /// rather than ignore it.
    const APPLIES_SCHEMA_CHANGES_TOPIC: bool = true;

    /// Whether the source can deliver with `delivery.guarantee = "exactly_once"` (Kafka
    /// transactions committed with the source's position; see docs/postgres-source.md).
    const SUPPORTS_EXACTLY_ONCE: bool = false;

    /// Checks every rule that serde's types do not express; each issue's key is the full path
    /// (`source.<KEY>.…`).
    fn validate(&self) -> Vec<ConfigIssue>;

    /// The source's own rules on `[kafka.events]` values (beyond which keys it applies).
    fn validate_events(_events: &crate::event::EventOptions) -> Vec<ConfigIssue> {
        Vec::new()
    }
}

/// Deserializes `[source]`: exactly one table, whose key is `S::KEY` (the messages are serde's
/// for an externally tagged enum, as when `[source]` was one).
fn deserialize_source<'de, D, S>(deserializer: D) -> Result<S, D::Error>
where
    D: serde::Deserializer<'de>,
    S: SourceSection,
{
    struct Section<S>(std::marker::PhantomData<S>);

    impl<'de, S: SourceSection> serde::de::Visitor<'de> for Section<S> {
        type Value = S;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table [source.{}]", S::KEY)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<S, A::Error> {
            use serde::de::Error as _;
            let more = || A::Error::custom("wanted exactly 1 element, more than 1 element");
            if map.size_hint().is_some_and(|n| n > 1) {
                return Err(more());
            }
            let Some(kind) = map.next_key::<String>()? else {
                return Err(A::Error::custom(
                    "wanted exactly 1 element, found 0 elements",
                ));
            };
            if kind != S::KEY {
                return Err(A::Error::unknown_variant(&kind, &[S::KEY]));
            }
            let section = map.next_value::<S>()?;
            if map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                return Err(more());
            }
            Ok(section)
        }
    }

    deserializer.deserialize_map(Section(std::marker::PhantomData))
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

/// A size in bytes from the pipeline file: an integer, or a string of a number and a unit
/// (`B`, `KiB`, `MiB`, `GiB`; `KB`, `MB`, `GB` as powers of 1000).
pub fn deserialize_byte_size<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer).map_err(|_| {
        serde::de::Error::custom(
            "expected a size: bytes as an integer, or a string like \"128MiB\"",
        )
    })? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_byte_size(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?}: expected a size like \"128MiB\", \"1GiB\" or a number of bytes"
            ))
        }),
    }
}

/// `"128MiB"`, `"1 GiB"`, `"4096"` → bytes (see [`deserialize_byte_size`]).
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
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

const fn default_true() -> bool {
    true
}
fn default_topic_prefix() -> String {
    DEFAULT_TOPIC_PREFIX.to_owned()
}
const fn default_topic_partitions() -> u32 {
    DEFAULT_TOPIC_PARTITIONS
}
const fn default_memory_limit() -> u64 {
    DEFAULT_MEMORY_LIMIT
}
const fn default_max_in_flight_records() -> u32 {
    DEFAULT_MAX_IN_FLIGHT_RECORDS
}
const fn default_transaction_interval_ms() -> u64 {
    DEFAULT_TRANSACTION_INTERVAL_MS
}

const fn default_transaction_max_bytes() -> u64 {
    DEFAULT_TRANSACTION_MAX_BYTES
}

const fn default_dead_letter_max_value_bytes() -> u32 {
    DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES
}
fn default_admin_listen() -> String {
    DEFAULT_ADMIN_LISTEN.to_owned()
}
const fn default_initial_backoff_ms() -> u64 {
    DEFAULT_RESTART_INITIAL_BACKOFF_MS
}
const fn default_max_backoff_ms() -> u64 {
    DEFAULT_RESTART_MAX_BACKOFF_MS
}

pub use crate::error::ConfigIssue;
pub use load::{ConfigError, EnvLookup};
use load::{load_file, parse_pipeline};

pub(crate) mod load;

/// The `[kafka.events]` keys set to other than their defaults, `tombstones_on_delete` aside.
fn non_default_event_options(events: &crate::event::EventOptions) -> Vec<&'static str> {
    let d = crate::event::EventOptions::default();
    let e = events;
    [
        (
            "decimal_handling_mode",
            e.decimal_handling_mode != d.decimal_handling_mode,
        ),
        (
            "time_precision_mode",
            e.time_precision_mode != d.time_precision_mode,
        ),
        (
            "binary_handling_mode",
            e.binary_handling_mode != d.binary_handling_mode,
        ),
        (
            "interval_handling_mode",
            e.interval_handling_mode != d.interval_handling_mode,
        ),
        (
            "hstore_handling_mode",
            e.hstore_handling_mode != d.hstore_handling_mode,
        ),
        (
            "money_fraction_digits",
            e.money_fraction_digits != d.money_fraction_digits,
        ),
        (
            "skipped_operations",
            e.skipped_operations != d.skipped_operations,
        ),
        (
            "unavailable_value_placeholder",
            e.unavailable_value_placeholder != d.unavailable_value_placeholder,
        ),
        (
            "provide_transaction_metadata",
            e.provide_transaction_metadata != d.provide_transaction_metadata,
        ),
        ("embed_json", e.embed_json != d.embed_json),
        (
            "unavailable_columns",
            e.unavailable_columns != d.unavailable_columns,
        ),
        ("schemas_enable", e.schemas_enable != d.schemas_enable),
        ("format", e.format != d.format),
        ("key_format", e.key_format != d.key_format),
        ("value_format", e.value_format != d.value_format),
        (
            "column_propagate_source_type",
            e.column_propagate_source_type != d.column_propagate_source_type,
        ),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(key, _)| key)
    .collect()
}

impl<S: SourceSection> PipelineConfig<S> {
    /// The transform chain of `[transforms]` (`None`: none), for the events this pipeline
    /// writes. The configuration is validated on loading, so this only fails for one built in
    /// code (its problems are then in the error).
    ///
    /// # Errors
    ///
    /// The chain's problems, each naming its key.
    pub fn transform_chain(
        &self,
    ) -> Result<Option<std::sync::Arc<crate::transform::Chain>>, Vec<ConfigIssue>> {
        crate::transform::config::build(&self.transforms, &self.predicates, &self.kafka.events)
            .map(|chain| chain.map(std::sync::Arc::new))
    }

    /// `topics` and the topics `[transforms]`' routers send their records to, each once.
    pub fn routed_topics(&self, topics: &[String]) -> Vec<String> {
        self.transforms.topics_for(&self.predicates, topics)
    }

    /// Reads, interpolates, parses and validates a pipeline file.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and every invalid key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_file(path, Self::from_toml)
    }

    /// Parses and validates pipeline text; `env` looks up variables for interpolation.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `origin` and every invalid key.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        parse_pipeline(text, origin, env, Self::validate)
    }

    /// Checks every rule that serde's types do not express; returns all broken ones.
    pub fn validate(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if !is_identifier(&self.name) {
            issues.push(ConfigIssue {
                key: "name".to_owned(),
                problem: format!(
                    "{:?} is not a valid name: expected 1-40 characters of a-z, 0-9 and _",
                    self.name
                ),
            });
        }
        issues.extend(self.source.validate());
        if let Err(problems) =
            crate::transform::config::build(&self.transforms, &self.predicates, &self.kafka.events)
        {
            issues.extend(problems);
        }
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if let Some(applied) = S::APPLIED_EVENT_OPTIONS {
            for source_issue in S::validate_events(&self.kafka.events) {
                issue(&source_issue.key, source_issue.problem);
            }
            for key in non_default_event_options(&self.kafka.events) {
                if applied.contains(&key) {
                    continue;
                }
                issue(
                    &format!("kafka.events.{key}"),
                    format!(
                        "not applied by the {} source, which applies only tombstones_on_delete{}{}: \
                         remove it",
                        S::KEY,
                        if applied.is_empty() { "" } else { ", " },
                        applied.join(", ")
                    ),
                );
            }
        }
        if !S::APPLIES_SCHEMA_CHANGES_TOPIC && self.kafka.schema_changes_topic.is_some() {
            issue(
                "kafka.schema_changes_topic",
                format!(
                    "not applied by the {} source, which writes its schema changes (Debezium's \
                     form) to the topic named kafka.topic_prefix (source.{}.include_schema_changes): \
                     remove it",
                    S::KEY,
                    S::KEY
                ),
            );
        }
        if !self.kafka.allow_unsafe_producer_settings {
            for (key, reason) in guarantee_breaking_overrides(&self.kafka.producer) {
                issue(
                    &format!("kafka.producer.\"{key}\""),
                    format!(
                        "{reason}: remove the override, or set kafka.allow_unsafe_producer_settings = true to accept that"
                    ),
                );
            }
        }
        if self.kafka.brokers.trim().is_empty() {
            issue(
                "kafka.brokers",
                "empty: expected host:port[,host:port...]".into(),
            );
        }
        if !is_topic_name(&self.kafka.topic_prefix) {
            issue(
                "kafka.topic_prefix",
                format!(
                    "{:?} is not valid: expected characters a-z, A-Z, 0-9, '.', '_' and '-'",
                    self.kafka.topic_prefix
                ),
            );
        }
        if let Some(topic) = &self.kafka.schema_changes_topic
            && !is_topic_name(topic)
        {
            issue(
                "kafka.schema_changes_topic",
                format!("{topic:?} is not a valid topic name"),
            );
        }
        let events = &self.kafka.events;
        if events.needs_schemas() && events.embed_json {
            issue(
                "kafka.events.embed_json",
                "cannot be combined with kafka.events.schemas_enable or an Avro format: an \
                 embedded document has no Connect schema (Debezium's is a string, \
                 io.debezium.data.Json); turn one off"
                    .into(),
            );
        }
        if events.schemas_enable
            && (events.format.is_some()
                || events.key_format.is_some()
                || events.value_format.is_some())
        {
            issue(
                "kafka.events.schemas_enable",
                "cannot be combined with kafka.events.format / key_format / value_format: \
                 use format = \"json_with_schemas\" instead"
                    .into(),
            );
        }
        if events.uses_avro() && self.schema_registry.is_none() {
            issue(
                "schema_registry",
                "is missing: kafka.events asks for Avro, which needs a schema registry \
                 ([schema_registry] url = \"http://host:8081\")"
                    .into(),
            );
        }
        if let Some(registry) = &self.schema_registry
            && events.uses_avro()
        {
            for (key, problem) in registry.issues() {
                issue(&format!("schema_registry.{key}"), problem);
            }
        }
        if let (Some(new), Some(old)) = (
            self.kafka.events.tombstones_on_delete,
            self.kafka.tombstones_on_delete_alias,
        ) && new != old
        {
            issue(
                "kafka.tombstones_on_delete",
                format!(
                    "{old} disagrees with kafka.events.tombstones_on_delete = {new}: \
                     kafka.tombstones_on_delete is its older name; keep only \
                     kafka.events.tombstones_on_delete"
                ),
            );
        }
        if let Some(truncate) = self.kafka.events.truncate {
            issue(
                "kafka.events.truncate",
                format!(
                    "replaced by Debezium's skipped_operations: write skipped_operations = {} \
                     instead (a comma-separated list of c, u, d, t, or \"none\"; the default \
                     \"t\" leaves TRUNCATE out)",
                    if truncate { "\"none\"" } else { "\"t\"" }
                ),
            );
        }
        if self.kafka.topic_partitions == 0 {
            issue("kafka.topic_partitions", "0: expected at least 1".into());
        }
        let topic_configs =
            std::iter::once(("kafka.topic_config".to_owned(), &self.kafka.topic_config)).chain(
                self.kafka
                    .topic_config_by_topic
                    .iter()
                    .map(|(topic, configs)| {
                        (format!("kafka.topic_config_by_topic.\"{topic}\""), configs)
                    }),
            );
        for (section, configs) in topic_configs {
            for (key, value) in configs {
                if key.trim().is_empty() || value.trim().is_empty() {
                    issue(
                        &section,
                        format!(
                            "{key:?} = {value:?}: expected a Kafka topic config name and a value, e.g. \"cleanup.policy\" = \"compact\""
                        ),
                    );
                } else if key == "cleanup.policy"
                    && !value
                        .split(',')
                        .all(|p| matches!(p.trim(), "compact" | "delete"))
                {
                    issue(
                        &format!("{section}.\"cleanup.policy\""),
                        format!(
                            "{value:?}: expected \"compact\", \"delete\" or \"compact,delete\""
                        ),
                    );
                }
            }
        }
        if let Some(bytes) = self.delivery.max_in_flight_bytes
            && bytes < 1024
        {
            issue(
                "delivery.max_in_flight_bytes",
                format!("{bytes} is too small: expected at least 1024 (bytes)"),
            );
        }
        if self.delivery.memory_limit < 16 * 1024 * 1024 {
            issue(
                "delivery.memory_limit",
                format!(
                    "{} bytes is too small: expected at least \"16MiB\" (sluice's fixed part alone is larger)",
                    self.delivery.memory_limit
                ),
            );
        }
        if self.delivery.max_in_flight_records == 0 {
            issue(
                "delivery.max_in_flight_records",
                "0: expected at least 1".into(),
            );
        }
        match (
            self.delivery.on_permanent_error,
            &self.delivery.dead_letter_topic,
        ) {
            (PermanentErrorPolicy::DeadLetter, None) => issue(
                "delivery.dead_letter_topic",
                "missing: required when on_permanent_error = \"dead_letter\"".into(),
            ),
            (_, Some(topic)) if !is_topic_name(topic) => issue(
                "delivery.dead_letter_topic",
                format!("{topic:?} is not a valid topic name"),
            ),
            _ => {}
        }
        if self.delivery.guarantee == DeliveryGuarantee::ExactlyOnce {
            for (key, problem) in exactly_once_issues::<S>(&self.delivery, &self.kafka) {
                issue(&key, problem);
            }
        }
        if let Some(topic) = &self.delivery.offsets_topic
            && !is_topic_name(topic)
        {
            issue(
                "delivery.offsets_topic",
                format!("{topic:?} is not a valid topic name"),
            );
        }
        if SocketAddr::from_str(&self.admin.listen).is_err() {
            issue(
                "admin.listen",
                format!(
                    "{:?} is not an address: expected ip:port, e.g. 127.0.0.1:8089",
                    self.admin.listen
                ),
            );
        }
        if self.restart.initial_backoff_ms == 0
            || self.restart.initial_backoff_ms > self.restart.max_backoff_ms
        {
            issue(
                "restart.initial_backoff_ms",
                "expected at least 1 and at most restart.max_backoff_ms".into(),
            );
        }
        if let Some((key, problem)) = self.admin.tls_issue() {
            issue(key, problem);
        }
        if let Some(token) = &self.admin.token
            && token.trim().len() < 16
        {
            issue(
                "admin.token",
                "too short: expected at least 16 characters (e.g. `openssl rand -hex 16`)".into(),
            );
        }
        if !(1_000..=3_600_000).contains(&self.ha.failover_timeout_ms) {
            issue(
                "ha.failover_timeout_ms",
                format!(
                    "{} is out of range: expected milliseconds from 1000 to 3600000 (default 10000)",
                    self.ha.failover_timeout_ms
                ),
            );
        }
        if !(50..=60_000).contains(&self.ha.standby_poll_ms) {
            issue(
                "ha.standby_poll_ms",
                format!(
                    "{} is out of range: expected milliseconds from 50 to 60000 (default 500)",
                    self.ha.standby_poll_ms
                ),
            );
        }
        if self.state_store == StateStoreKind::Kafka && !S::ELECTS_ACTIVE_INSTANCE {
            issue(
                "state_store",
                format!(
                    "\"kafka\" is supported for [source.postgres] and [source.mysql] pipelines only: a [source.{}] pipeline keeps its state in state_dir (remove state_store)",
                    S::KEY
                ),
            );
        }
        if let Some(topic) = &self.state_topic
            && (topic.trim().is_empty() || self.state_store != StateStoreKind::Kafka)
        {
            issue(
                "state_topic",
                if topic.trim().is_empty() {
                    "empty: expected a topic name, or leave the key out for _sluice_state".into()
                } else {
                    "only used with state_store = \"kafka\": set it too, or remove state_topic"
                        .into()
                },
            );
        }
        if let Some(dir) = &self.state_dir
            && dir.trim().is_empty()
        {
            issue(
                "state_dir",
                "empty: expected a directory path, or leave the key out for the default".into(),
            );
        }
        issues
    }

    /// The compacted topic of `state_store = "kafka"`.
    pub fn state_topic(&self) -> &str {
        self.state_topic.as_deref().unwrap_or(DEFAULT_STATE_TOPIC)
    }

    /// The directory of this pipeline's state file (see [`PipelineConfig::state_dir`]).
    pub fn state_dir(&self) -> std::path::PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.into();
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|home| std::path::PathBuf::from(home).join(".local").join("state"))
            })
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        base.join("sluice")
    }

    /// The byte budget as the engine takes it (validated to be at least 1024).
    pub fn max_in_flight_bytes(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.in_flight_bytes()).unwrap_or(NonZeroU32::MIN)
    }

    /// The record budget as the engine takes it (validated to be at least 1).
    pub fn max_in_flight_records(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.max_in_flight_records).unwrap_or(NonZeroU32::MIN)
    }
}

/// The producer overrides (of a CDC pipeline's `[kafka.producer]`) that break sluice's
/// guarantees, each with why: per-key order and no duplicates from retries need idempotence,
/// `acks=all` and at most 5 requests in flight per connection.
pub fn guarantee_breaking_overrides(producer: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (key, value) in producer {
        let value = value.trim();
        let reason = match key.as_str() {
            "enable.idempotence" if value.eq_ignore_ascii_case("false") => Some(format!(
                "{value}: without idempotence a retried batch can be written twice or overtake the one before it (per-key order lost)"
            )),
            "acks" | "request.required.acks"
                if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
            {
                Some(format!(
                    "{value}: a record acknowledged by fewer than all in-sync replicas can be lost with its leader, after sluice confirmed its position to the source"
                ))
            }
            "max.in.flight.requests.per.connection" | "max.in.flight"
                if value.parse::<u64>().map_or(true, |n| n > 5) =>
            {
                Some(format!(
                    "{value}: more than 5 requests in flight per connection loses per-partition order on retries (expected 1 to 5)"
                ))
            }
            _ => None,
        };
        if let Some(reason) = reason {
            found.push((key.clone(), reason));
        }
    }
    found
}

/// The settings that cannot hold `delivery.guarantee = "exactly_once"`: (key, problem).
fn exactly_once_issues<S: SourceSection>(
    delivery: &DeliveryConfig,
    kafka: &KafkaConfig,
) -> Vec<(String, String)> {
    let mut found = Vec::new();
    if !S::SUPPORTS_EXACTLY_ONCE {
        found.push((
            "delivery.guarantee".to_owned(),
            format!(
                "\"exactly_once\" is supported for PostgreSQL sources only, not [source.{}]: use \"at_least_once\" (records carry their source position in headers, so consumers can drop duplicates)",
                S::KEY
            ),
        ));
    }
    if delivery.on_permanent_error == PermanentErrorPolicy::DeadLetter {
        found.push((
            "delivery.on_permanent_error".to_owned(),
            "\"dead_letter\" cannot be combined with delivery.guarantee = \"exactly_once\": a refused record aborts the whole Kafka transaction; use \"stop\"".to_owned(),
        ));
    }
    if delivery.transaction_interval_ms == 0 || delivery.transaction_interval_ms > 30_000 {
        found.push((
            "delivery.transaction_interval_ms".to_owned(),
            format!(
                "{}: expected 1 to 30000 (milliseconds; a transaction must commit well within the producer's transaction.timeout.ms)",
                delivery.transaction_interval_ms
            ),
        ));
    }
    if delivery.transaction_max_bytes < 1024 {
        found.push((
            "delivery.transaction_max_bytes".to_owned(),
            format!(
                "{} is too small: expected at least 1024 (bytes)",
                delivery.transaction_max_bytes
            ),
        ));
    }
    for key in ["transactional.id", "enable.idempotence"] {
        if kafka.producer.contains_key(key) {
            found.push((
                format!("kafka.producer.\"{key}\""),
                format!(
                    "sluice sets {key} itself with delivery.guarantee = \"exactly_once\" (the transactional id is derived from the pipeline's name, so a restarted instance fences the old one): remove the override"
                ),
            ));
        }
    }
    let transaction_timeout = kafka
        .producer
        .get("transaction.timeout.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(60_000);
    if let Some(value) = kafka.producer.get("message.timeout.ms")
        && value
            .trim()
            .parse::<u64>()
            .map_or(true, |ms| ms == 0 || ms > transaction_timeout)
    {
        found.push((
            "kafka.producer.\"message.timeout.ms\"".to_owned(),
            format!(
                "{value}: with delivery.guarantee = \"exactly_once\" it must be between 1 and transaction.timeout.ms ({transaction_timeout}): a record still undelivered when its transaction times out aborts it"
            ),
        ));
    }
    found
}

/// When a CDC source snapshots its tables (`source.<kind>.snapshot`), Debezium's
/// `snapshot.mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// When the pipeline has no saved position (PostgreSQL: its slot is new): read every
    /// captured table consistently with the position streaming then starts from.
    #[default]
    Initial,
    /// Never: stream only the changes after the first start.
    Never,
    /// Snapshot like `initial`, then stop (no streaming).
    InitialOnly,
    /// Like `initial`, and also when the saved position cannot be resumed from any more
    /// (PostgreSQL: a lost slot recreated with `on_slot_loss = "recreate"`; MySQL: a purged
    /// binlog).
    WhenNeeded,
}

/// A glob over dotted names (`*` matches any characters, dots included).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .is_ok_and(|glob| glob.compile_matcher().is_match(name))
}

/// Splits `schema.table`.
pub fn parse_table_name(name: &str) -> Option<(&str, &str)> {
    let (schema, table) = name.split_once('.')?;
    (!schema.is_empty() && !table.is_empty() && !table.contains('.')).then_some((schema, table))
}

pub(crate) fn is_identifier(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A byte count for messages: `12.3 MiB`.
pub fn human_bytes(bytes: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

pub(crate) fn is_topic_name(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source section for the tests of what every source shares.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TestSource {
        url: String,
    }

    impl SourceSection for TestSource {
        const KEY: &'static str = "test";

        fn validate(&self) -> Vec<ConfigIssue> {
            if self.url.is_empty() {
                vec![ConfigIssue {
                    key: "source.test.url".into(),
                    problem: "empty".into(),
                }]
            } else {
                Vec::new()
            }
        }
    }

    const MINIMAL: &str = r#"
        name = "orders"
        [source.test]
        url = "${PG_URL}"
        [kafka]
        brokers = "${KAFKA_BROKERS:-127.0.0.1:9092}"
        topic_prefix = "${TOPIC_PREFIX:-sluice}"
    "#;

    fn env(name: &str) -> Option<String> {
        (name == "PG_URL").then(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    fn parse(text: &str) -> Result<PipelineConfig<TestSource>, ConfigError> {
        PipelineConfig::from_toml(text, "test.toml", &env)
    }

    fn issues(text: &str) -> Vec<ConfigIssue> {
        match parse(text) {
            Err(ConfigError::Invalid { issues, .. }) => issues,
            other => panic!("expected invalid config, got {other:?}"),
        }
    }

    #[test]
    fn unknown_key_names_its_path_and_the_allowed_keys() {
        let text = MINIMAL.replace("topic_prefix", "topic_prefx");
        let issues = issues(&text);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].key, "kafka.topic_prefx");
        assert!(issues[0].problem.contains("unknown field `topic_prefx`"));
        assert!(issues[0].problem.contains("topic_prefix"), "{issues:?}");
    }

    #[test]
    fn state_store_and_ha_keys_are_checked_with_the_key_named() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.state_store, StateStoreKind::Local);
        assert_eq!(config.ha.failover_timeout_ms, 10_000);
        assert_eq!(config.ha.standby_poll_ms, 500);
        assert!(config.ha.instance_id().contains(':'), "<host>:<pid>");
        let with = |top: &str, ha: &str| format!("{top}\n{MINIMAL}\n[ha]\n{ha}\n");
        let keys =
            |text: String| -> Vec<String> { issues(&text).into_iter().map(|i| i.key).collect() };
        // The test source does not elect an active instance.
        assert_eq!(keys(with("state_store = \"kafka\"", "")), ["state_store"]);
        assert_eq!(
            keys(with("state_topic = \"st\"", "")),
            ["state_topic"],
            "state_topic without state_store = kafka"
        );
        assert_eq!(
            keys(with("", "failover_timeout_ms = 10\nstandby_poll_ms = 0")),
            ["ha.failover_timeout_ms", "ha.standby_poll_ms"]
        );
        let named = parse(&with("", "instance_id = \"east-1\"")).unwrap();
        assert_eq!(named.ha.instance_id(), "east-1");
        assert_eq!(named.state_topic(), DEFAULT_STATE_TOPIC);
    }

    #[test]
    fn topic_config_merges_per_topic_and_fills_compacted_defaults() {
        let text = format!(
            "{MINIMAL}\n[kafka.topic_config]\n\"cleanup.policy\" = \"compact\"\n\"segment.ms\" = \"60000\"\n\
             [kafka.topic_config_by_topic.\"sluice.public.audit\"]\n\"cleanup.policy\" = \"delete\"\n"
        );
        let config = parse(&text).unwrap();
        let orders = config.kafka.topic_configs("sluice.public.orders", true);
        assert_eq!(orders["cleanup.policy"], "compact");
        assert_eq!(
            orders["segment.ms"], "60000",
            "set values win over the defaults"
        );
        assert_eq!(orders["min.compaction.lag.ms"], "0");
        assert_eq!(orders["delete.retention.ms"], "86400000");
        let audit = config.kafka.topic_configs("sluice.public.audit", true);
        assert_eq!(
            audit.get("cleanup.policy").map(String::as_str),
            Some("delete")
        );
        assert_eq!(audit.get("min.compaction.lag.ms"), None);
        // Not an events topic (the dead-letter topic): only its own entry applies.
        assert!(config.kafka.topic_configs("sluice.dlq", false).is_empty());
        let bad = format!("{MINIMAL}\n[kafka.topic_config]\n\"cleanup.policy\" = \"compacted\"\n");
        let issues = issues(&bad);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].key, "kafka.topic_config.\"cleanup.policy\"");
        assert!(
            issues[0].problem.contains("\"compact,delete\""),
            "{issues:?}"
        );
    }

    #[test]
    fn schemas_enable_refuses_embedded_json() {
        let both = format!("{MINIMAL}\n[kafka.events]\nschemas_enable = true\nembed_json = true\n");
        let issues = issues(&both);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].key, "kafka.events.embed_json");
        let alone = format!("{MINIMAL}\n[kafka.events]\nschemas_enable = true\n");
        assert!(parse(&alone).is_ok());
    }

    #[test]
    fn column_propagate_source_type_takes_debeziums_regexes() {
        let with = |value: &str| {
            format!("{MINIMAL}\n[kafka.events]\ncolumn_propagate_source_type = {value}\n")
        };
        let config = parse(&with(r#""public\\.t\\.a, .*\\.B""#)).expect("valid");
        let patterns = config.kafka.events.column_propagate_source_type;
        assert!(patterns.matches("public.t.a"));
        assert!(
            patterns.matches("other.u.b"),
            "case-insensitive, as Debezium"
        );
        assert!(!patterns.matches("public.t.ab"), "the whole name");
        assert!(!patterns.matches("public_t.a"));
        let list = parse(&with(r#"["public\\.t\\.a"]"#)).expect("valid");
        assert!(
            list.kafka
                .events
                .column_propagate_source_type
                .matches("public.t.a")
        );
        let issues = issues(&with(r#""(unclosed""#));
        assert_eq!(issues[0].key, "kafka.events.column_propagate_source_type");
        assert!(
            issues[0].problem.contains("not a valid regular expression"),
            "{issues:?}"
        );
    }

    #[test]
    fn producer_overrides_that_break_the_guarantees_are_refused_unless_allowed() {
        let unsafe_overrides = "[kafka.producer]\n\"enable.idempotence\" = \"false\"\nacks = \"1\"\n\
             \"max.in.flight.requests.per.connection\" = \"10\"\n\"linger.ms\" = \"20\"\n";
        let text = MINIMAL.replace("[kafka]\n", &format!("{unsafe_overrides}[kafka]\n"));
        let issues = issues(&text);
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "kafka.producer.\"acks\"",
                "kafka.producer.\"enable.idempotence\"",
                "kafka.producer.\"max.in.flight.requests.per.connection\"",
            ],
            "{issues:?}"
        );
        assert!(
            issues[0].problem.contains("allow_unsafe_producer_settings"),
            "{issues:?}"
        );
        assert!(issues[1].problem.contains("per-key order"), "{issues:?}");
        let allowed = text.replace(
            "[kafka]\n",
            "[kafka]\nallow_unsafe_producer_settings = true\n",
        );
        let config = parse(&allowed).unwrap();
        assert_eq!(config.kafka.producer["acks"], "1");
        // Safe spellings pass.
        let safe = "[kafka.producer]\nacks = \"-1\"\n\"enable.idempotence\" = \"true\"\n\
             \"max.in.flight.requests.per.connection\" = \"5\"\n";
        let text = MINIMAL.replace("[kafka]\n", &format!("{safe}[kafka]\n"));
        parse(&text).unwrap();
    }

    #[test]
    fn wrong_type_names_the_key() {
        let text = format!("{MINIMAL}\n[delivery]\nmax_in_flight_bytes = \"lots\"\n");
        let issues = issues(&text);
        assert_eq!(issues[0].key, "delivery.max_in_flight_bytes");
    }

    #[test]
    fn memory_limit_sizes_the_in_flight_budget_unless_it_is_set() {
        let sized = |extra: &str| {
            let text = format!("{MINIMAL}\n[delivery]\n{extra}\n");
            let config: DeliveryConfig = toml::from_str::<toml::Table>(&text).unwrap()["delivery"]
                .clone()
                .try_into()
                .unwrap();
            (config.memory_limit, config.in_flight_bytes())
        };
        assert_eq!(sized(""), (128 << 20, 16 << 20));
        assert_eq!(sized("memory_limit = \"256MiB\""), (256 << 20, 32 << 20));
        assert_eq!(sized("memory_limit = \"1 GiB\""), (1 << 30, 128 << 20));
        assert_eq!(sized("memory_limit = 67108864"), (64 << 20, 8 << 20));
        assert_eq!(
            sized("memory_limit = \"64MiB\"\nmax_in_flight_bytes = 1048576"),
            (64 << 20, 1 << 20)
        );
        let bad = issues(&format!("{MINIMAL}\n[delivery]\nmemory_limit = \"lots\"\n"));
        assert_eq!(bad[0].key, "delivery.memory_limit");
        assert!(bad[0].problem.contains("128MiB"), "{:?}", bad[0].problem);
        let small = issues(&format!("{MINIMAL}\n[delivery]\nmemory_limit = \"8MiB\"\n"));
        assert_eq!(small[0].key, "delivery.memory_limit");
    }

    #[test]
    fn the_source_section_is_one_table_of_the_sections_kind() {
        let base = MINIMAL.replace("[source.test]\n        url = \"${PG_URL}\"\n", "");
        let with = |section: &str| base.replace("[kafka]", &format!("{section}\n[kafka]"));
        let one = |text: &str| {
            let found = issues(text);
            assert_eq!(found.len(), 1, "{found:?}");
            found.into_iter().next().unwrap()
        };
        let issue = one(&with("[source.mysql]\nurl = \"x\""));
        assert_eq!(issue.key, "source");
        assert!(
            issue
                .problem
                .starts_with("unknown variant `mysql`, expected `test`"),
            "{issue:?}"
        );
        let issue = one(&with("[source]"));
        assert_eq!(issue.key, "source");
        assert!(
            issue
                .problem
                .starts_with("wanted exactly 1 element, found 0")
        );
        let issue = one(&with("[source.test]\nurl = \"x\"\n[source.other]\nx = 1"));
        assert_eq!(issue.key, "source");
        assert!(
            issue
                .problem
                .starts_with("wanted exactly 1 element, more than 1")
        );
        let issue = one(&with("[source.test]\nurl = 5"));
        assert_eq!(issue.key, "source.test.url");
        assert!(
            issue
                .problem
                .starts_with("invalid type: integer (value not shown), expected a string")
        );
        let issue = one(&with("[source.test]\nurl = \"x\"\nuri = \"y\""));
        assert_eq!(issue.key, "source.test.uri");
        assert!(
            issue
                .problem
                .starts_with("unknown field `uri`, expected `url`")
        );
        let issue = one(&base);
        assert_eq!(issue.key, "(top level)");
        assert!(issue.problem.starts_with("missing field `source`"));
        // The section's own rules come after the name's and before the shared sections'.
        let text = with("[source.test]\nurl = \"\"").replace("\"orders\"", "\"Orders\"")
            + "\n[admin]\nlisten = \"localhost\"\n";
        let keys: Vec<_> = issues(&text).into_iter().map(|i| i.key).collect();
        assert_eq!(keys, ["name", "source.test.url", "admin.listen"]);
    }
}
