//! The sink pipeline file: `[source.kafka]` + `[sink.files]` (+ `[delivery]`, `[admin]`,
//! `[restart]`).
//!
//! Loaded like the CDC pipeline file (see [`crate::config`]): `${NAME}` / `${NAME:-default}`
//! substitution, strict keys whose errors name their path, and [`SinkPipelineConfig::validate`]
//! collecting every broken rule. Defaults live in the `DEFAULT_*` constants below.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::str::FromStr;

use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::config::{
    AdminConfig, ConfigError, ConfigIssue, DEFAULT_MEMORY_LIMIT, RestartConfig, is_identifier,
    is_topic_name,
};
use crate::sink::kafka_source::{KafkaSourceConfig, TopicSelector, whole_match};
use crate::sink::object::S3Config;
use crate::sink::template::PathTemplate;

/// Default path template: one directory per topic and record date (UTC).
pub const DEFAULT_PATH_TEMPLATE: &str = "{topic}/dt={timestamp:%Y-%m-%d}/";
/// Default records per file before it is rolled.
pub const DEFAULT_ROLL_RECORDS: u64 = 1_000_000;
/// Default bytes per file before it is rolled (uncompressed for JSON Lines, in-memory
/// estimate plus written bytes for Parquet).
pub const DEFAULT_ROLL_BYTES: u64 = 128 * 1024 * 1024;
/// Default age of open files before they are rolled.
pub const DEFAULT_ROLL_INTERVAL_MS: u64 = 60_000;
/// Default sub-partitions per Kafka partition.
pub const DEFAULT_SUB_PARTITIONS: u32 = 4;
/// The share of `delivery.memory_limit` each partition's queue and each partition's librdkafka
/// prefetch (`queued.max.messages.kbytes`) get unless set themselves: 4 MiB each at the default
/// 128 MiB.
///
/// When a partition's queue is full its librdkafka queue is no longer polled (see
/// `sink::PartitionQueues`), and librdkafka holds up to its prefetch more. Each byte queued
/// costs about two in RSS (librdkafka's fetch buffers and message headers, the copy taken for
/// the worker). Measured on a 1-partition topic of 1,000,000 ~300-byte records, 1
/// sub-partition (`bench/run --cases sink --runs 1 --sink-records 1000000
/// --sink-sub-partitions 1`, bench/PROFILE.md "Sink memory"): 16 MiB + 16 MiB peaked at
/// 149 MiB (JSON Lines), 4 MiB + 4 MiB at 96 MiB, at the same rate (the workers, not the
/// queues, are the limit; 64 MiB / 200,000 records date from when a full partition was
/// paused, which librdkafka resumed up to ~1 s late).
pub const QUEUE_SHARE_OF_MEMORY_LIMIT: u64 = 32;
/// mimalloc's purge delay for a files sink (JSON Lines or Parquet), in milliseconds (the
/// PostgreSQL sink keeps mimalloc's default, 1,000 ms); applied at start-up by
/// `runtime::allocator`, unless `MIMALLOC_PURGE_DELAY` is set.
///
/// Chosen by measurement (bench/PROFILE.md, "Sink memory: the allocator's purge delay" and
/// "Parquet memory: the workers' allocations"; `bench/run --cases sink,sink-pg`, 2,000,000
/// records on 1 partition, alternated rounds): every sink frees its batches' buffers in large
/// blocks that mimalloc keeps committed for the delay. At 100 ms JSON Lines peaked at 78 / 83
/// / 89 MiB (1 / 2 / 4 sub-partitions) against 96 / 99 / 131, at the same rate within the
/// noise. Parquet, once its string buffers were reused from batch to batch, peaked at 100 /
/// 144 MiB (1 / 4 sub-partitions) against 127 / 195, for 1 % / 7 % less rate and ~8 % more
/// CPU per record (4 rounds; before the reuse it cost 12–16 % of the rate, so Parquet kept
/// the default until 2026-11-28). The PostgreSQL sink (93 / 110 / 137 against 118 / 140 /
/// 181) paid 10–30 % more CPU per record and 12–16 % less rate at 2 and 4 sub-partitions,
/// so it keeps the default; `MIMALLOC_PURGE_DELAY=100` makes that trade for it.
pub const ALLOCATOR_PURGE_DELAY_MS: i64 = 100;
/// A sink fetches at most a 16th of its prefetch per partition and request
/// (`max.partition.fetch.bytes`, 256 KiB at the default `memory_limit`; see `consumer_config`).
pub const FETCH_SHARE_OF_PREFETCH: u64 = 16;
/// Default per-partition queue limit in records (the byte limit is derived from
/// `delivery.memory_limit`, see [`QUEUE_SHARE_OF_MEMORY_LIMIT`]).
pub const DEFAULT_MAX_QUEUED_RECORDS_PER_PARTITION: u32 = 50_000;
/// Default time a worker may spend on one record or one file commit.
pub const DEFAULT_PROCESSING_TIMEOUT_MS: u64 = 60_000;
/// Default time to finish in-flight work when partitions are revoked or on shutdown.
pub const DEFAULT_REVOKE_TIMEOUT_MS: u64 = 30_000;
/// Default count of worker threads given up on that may still run when the pipeline restarts.
pub const DEFAULT_MAX_ABANDONED_WORKERS: u32 = 16;
/// Default attempts of a failing record with `on_failure = "retry"`.
pub const DEFAULT_RETRY_MAX_ATTEMPTS: u32 = 5;
/// Default first retry delay; doubles per attempt.
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 100;
/// Default rows per Parquet row group.
pub const DEFAULT_PARQUET_ROW_GROUP_RECORDS: usize = 65_536;
/// Default encoded bytes per Parquet row group.
pub const DEFAULT_PARQUET_ROW_GROUP_BYTES: usize = 16 * 1024 * 1024;

/// A whole Kafka → files pipeline file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkPipelineConfig {
    /// The pipeline's name: metric label and the default consumer group (`sluice_<name>`).
    pub name: String,
    /// `[source.kafka]`.
    pub source: SinkSourceConfig,
    /// `[sink.files]`.
    pub sink: SinkConfig,
    /// Queue limits, failure policy.
    #[serde(default)]
    pub delivery: SinkDeliveryConfig,
    /// The admin HTTP server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Restarts after retryable failures.
    #[serde(default)]
    pub restart: RestartConfig,
    /// `[schema_registry]`: where Avro records' writer schemas are fetched by id (with
    /// `source.kafka.format = "avro"`); the section the sources write through.
    #[serde(default)]
    pub schema_registry: Option<crate::registry::RegistryConfig>,
    /// Scheduled verification: `sluice verify` of this pipeline (its sink's tables or files
    /// against the topics) every this many seconds while it runs (docs/verify.md,
    /// "Scheduled"); off when left out.
    pub verify_interval_s: Option<u64>,
    /// The scheduled verification's rate limit: rows read from a PostgreSQL target per second.
    #[serde(default = "default_verify_rate_limit")]
    pub verify_rate_limit: u64,
}

const fn default_verify_rate_limit() -> u64 {
    crate::config::DEFAULT_VERIFY_RATE_LIMIT
}

/// The source section of a sink pipeline: exactly one source kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum SinkSourceConfig {
    /// Kafka topics, read as a consumer group.
    Kafka(KafkaSourceConfig),
}

/// Consumer settings sluice sets unless the pipeline file overrides them.
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("auto.offset.reset", "earliest"),
    ("enable.partition.eof", "false"),
    // Fetch in large chunks; the per-partition queue budget bounds what waits for workers.
    ("fetch.max.bytes", "52428800"),
    // librdkafka waits 1 s before fetching again when its local queue is over its thresholds,
    // and backs a partition off after a pause discards its in-flight fetch: both left the
    // consumer idle for most of each second whenever the workers briefly fell behind. At 10 ms
    // the prefetch queue (a few MiB, a few ms of records) still ran dry during each back-off:
    // 1 ms gave 1.23x the JSON Lines rate at 1 sub-partition and 1.18x at 2 (bench/RESULTS.md,
    // "Files sink: librdkafka's fetch back-off at 1 ms").
    ("fetch.queue.backoff.ms", "1"),
    ("fetch.error.backoff.ms", "50"),
];

/// Builds the consumer's configuration.
pub fn consumer_config(config: &SinkPipelineConfig) -> ClientConfig {
    let kafka = config.kafka();
    let mut client = crate::kafka::client_config(&kafka.brokers, &kafka.client);
    client
        .set("group.id", config.group_id())
        .set("client.id", format!("sluice-{}", config.name));
    for (key, value) in CONSUMER_DEFAULTS {
        client.set(*key, *value);
    }
    // librdkafka's own prefetch per partition (its default is 64 MiB), on top of the
    // partition queue: sized from `delivery.memory_limit`.
    client.set(
        "queued.max.messages.kbytes",
        config.prefetch_kbytes().to_string(),
    );
    // A fetch response's records stay in one buffer, decompressed, until the last of them is
    // taken: with librdkafka's 1 MiB of compressed records per partition and fetch (~7 MiB of
    // change events decompressed), its queue overshot the prefetch by a fetch or more
    // (heaptrack: 26 MiB in lz4 buffers at the PostgreSQL sink's peak, bench/PROFILE.md
    // "PostgreSQL sink memory"). Every sink fetches a 16th of its prefetch instead: the files
    // sink peaked 18-30 MiB lower on three partitions of change events, its rate and the
    // consumer's alone unchanged within a loaded machine's noise (bench/PROFILE.md, "Files
    // sink: the fetch size").
    client.set(
        "max.partition.fetch.bytes",
        (config.prefetch_kbytes() * 1024 / FETCH_SHARE_OF_PREFETCH).to_string(),
    );
    for (key, value) in &kafka.properties {
        client.set(key, value);
    }
    client.set("enable.auto.commit", "false");
    client
}

/// The sink section: exactly one sink kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum SinkConfig {
    /// Files on the local filesystem.
    Files(FilesSinkConfig),
    /// Tables of a PostgreSQL database.
    Postgres(crate::sink::postgres::config::PostgresSinkConfig),
    /// Apache Iceberg tables.
    Iceberg(crate::sink::iceberg::config::IcebergSinkConfig),
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// JSON Lines: one record per line.
    Jsonl,
    /// Apache Parquet.
    Parquet,
}

/// How a Parquet file's value columns are made (`sink.files.parquet_columns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ParquetColumns {
    /// One column per top-level field of a file's first value, of the kind its JSON value
    /// suggests (objects and arrays as JSON text), plus `_extra`.
    #[default]
    Inferred,
    /// Columns typed from each record's Connect schema (JSON with schemas), a change event
    /// unwrapped to its row (`crate::sink::typed::file`).
    Typed,
}

/// Compression of output files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileCompression {
    /// None.
    None,
    /// gzip (JSON Lines only).
    Gzip,
    /// zstd (whole-file for JSON Lines, per page for Parquet).
    Zstd,
    /// snappy (Parquet only).
    Snappy,
}

/// `[sink.files]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSinkConfig {
    /// The root directory of the output; with `url`, the local directory where files are
    /// staged before their upload.
    pub path: PathBuf,
    /// An object store to write to instead of `path`: `s3://bucket/prefix`.
    pub url: Option<String>,
    /// `[sink.files.s3]`: the S3 client's settings (with `url`).
    #[serde(default)]
    pub s3: S3Config,
    /// Directories under `path` per record: `{topic}`, `{partition}`, `{timestamp:%Y-%m-%d}`
    /// (record timestamp, UTC), `{field.path}` and `{field.path:%Y-%m-%d}` (value fields).
    #[serde(default = "default_path_template")]
    pub path_template: String,
    /// `jsonl` or `parquet`.
    pub format: FileFormat,
    /// `none`, `gzip` or `zstd` for JSON Lines; `none`, `snappy` or `zstd` for Parquet;
    /// default none for JSON Lines, snappy for Parquet.
    pub compression: Option<FileCompression>,
    /// Records per file before it is rolled.
    #[serde(default = "default_roll_records")]
    pub roll_records: u64,
    /// Bytes per file before it is rolled.
    #[serde(default = "default_roll_bytes")]
    pub roll_bytes: u64,
    /// Age of open files before they are rolled.
    #[serde(default = "default_roll_interval_ms")]
    pub roll_interval_ms: u64,
    /// Sub-partitions per Kafka partition (by key hash); fixed for an output root.
    #[serde(default = "default_sub_partitions")]
    pub sub_partitions: u32,
    /// Add `_topic`, `_partition`, `_offset`, `_timestamp_ms` and `_key` to every JSON line.
    #[serde(default = "default_true")]
    pub metadata: bool,
    /// Skip records with a null value (tombstones); when false they are failures.
    #[serde(default = "default_true")]
    pub skip_tombstones: bool,
    /// Rows per Parquet row group.
    #[serde(default = "default_parquet_row_group_records")]
    pub parquet_row_group_records: usize,
    /// Encoded bytes per Parquet row group (whichever of the two limits comes first closes
    /// it): a row group's pages stay in memory until it is written, so this bounds each open
    /// Parquet file's memory whatever the records' size.
    #[serde(default = "default_parquet_row_group_bytes")]
    pub parquet_row_group_bytes: usize,
    /// `inferred` (from each file's first value) or `typed` (from each record's Connect
    /// schema, change events unwrapped).
    #[serde(default)]
    pub parquet_columns: ParquetColumns,
}

/// What happens to a record that cannot be written (not JSON, a template field missing or
/// unparsable, a null value with `skip_tombstones = false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Stop the pipeline with the reason; nothing at or after the record is committed.
    #[default]
    Stop,
    /// Retry with exponential backoff (`retry_max_attempts`), then stop.
    Retry,
    /// Send the original key and value to `dead_letter_topic` with the reason in headers.
    DeadLetter,
}

/// `[delivery]` of a sink pipeline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkDeliveryConfig {
    /// What to do with a record that cannot be written.
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// The dead-letter topic (required with `on_failure = "dead_letter"`).
    pub dead_letter_topic: Option<String>,
    /// A dead-lettered record's key and value are cut to this many bytes (a header gives the
    /// original size), so that it fits the dead-letter topic.
    #[serde(default = "default_dead_letter_max_value_bytes")]
    pub dead_letter_max_value_bytes: u32,
    /// Attempts per record with `on_failure = "retry"`.
    #[serde(default = "default_retry_max_attempts")]
    pub retry_max_attempts: u32,
    /// First retry delay; doubles per attempt.
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// The memory the pipeline's queues are sized for (bytes, or a string with a unit:
    /// `"256MiB"`): each partition's queue and librdkafka's prefetch per partition get a
    /// [`QUEUE_SHARE_OF_MEMORY_LIMIT`]th of it unless set themselves.
    #[serde(
        default = "default_memory_limit",
        deserialize_with = "crate::config::deserialize_byte_size"
    )]
    pub memory_limit: u64,
    /// Bytes queued per partition between the consumer and its workers; when full, the
    /// partition's records wait in librdkafka (default: a 32nd of `memory_limit`).
    #[serde(default)]
    pub max_queued_bytes_per_partition: Option<u32>,
    /// Records queued per partition; when full, the partition is paused.
    #[serde(default = "default_max_queued_records")]
    pub max_queued_records_per_partition: u32,
    /// Time a worker may spend on one record (then the record is a failure: `on_failure`
    /// applies) or one file commit (then the run fails and is restarted from the committed
    /// files).
    #[serde(default = "default_processing_timeout_ms")]
    pub processing_timeout_ms: u64,
    /// Time to finish in-flight files when partitions are revoked or on shutdown; what is
    /// not committed by then is abandoned and read again by the next owner.
    #[serde(default = "default_revoke_timeout_ms")]
    pub revoke_timeout_ms: u64,
    /// Worker threads given up on (past `processing_timeout_ms` or `revoke_timeout_ms`) that
    /// may still be running when the pipeline would restart; beyond it the pipeline stops.
    #[serde(default = "default_max_abandoned_workers")]
    pub max_abandoned_workers: u32,
}

impl Default for SinkDeliveryConfig {
    fn default() -> Self {
        Self {
            on_failure: FailurePolicy::default(),
            dead_letter_topic: None,
            dead_letter_max_value_bytes: crate::config::DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES,
            retry_max_attempts: DEFAULT_RETRY_MAX_ATTEMPTS,
            retry_backoff_ms: DEFAULT_RETRY_BACKOFF_MS,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            max_queued_bytes_per_partition: None,
            max_queued_records_per_partition: DEFAULT_MAX_QUEUED_RECORDS_PER_PARTITION,
            processing_timeout_ms: DEFAULT_PROCESSING_TIMEOUT_MS,
            revoke_timeout_ms: DEFAULT_REVOKE_TIMEOUT_MS,
            max_abandoned_workers: DEFAULT_MAX_ABANDONED_WORKERS,
        }
    }
}

const fn default_dead_letter_max_value_bytes() -> u32 {
    crate::config::DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES
}

const fn default_true() -> bool {
    true
}
fn default_path_template() -> String {
    DEFAULT_PATH_TEMPLATE.to_owned()
}
const fn default_roll_records() -> u64 {
    DEFAULT_ROLL_RECORDS
}
const fn default_roll_bytes() -> u64 {
    DEFAULT_ROLL_BYTES
}
const fn default_roll_interval_ms() -> u64 {
    DEFAULT_ROLL_INTERVAL_MS
}
const fn default_sub_partitions() -> u32 {
    DEFAULT_SUB_PARTITIONS
}
const fn default_parquet_row_group_records() -> usize {
    DEFAULT_PARQUET_ROW_GROUP_RECORDS
}
const fn default_parquet_row_group_bytes() -> usize {
    DEFAULT_PARQUET_ROW_GROUP_BYTES
}
const fn default_retry_max_attempts() -> u32 {
    DEFAULT_RETRY_MAX_ATTEMPTS
}
const fn default_retry_backoff_ms() -> u64 {
    DEFAULT_RETRY_BACKOFF_MS
}
const fn default_memory_limit() -> u64 {
    DEFAULT_MEMORY_LIMIT
}
const fn default_max_queued_records() -> u32 {
    DEFAULT_MAX_QUEUED_RECORDS_PER_PARTITION
}
const fn default_processing_timeout_ms() -> u64 {
    DEFAULT_PROCESSING_TIMEOUT_MS
}
const fn default_revoke_timeout_ms() -> u64 {
    DEFAULT_REVOKE_TIMEOUT_MS
}
const fn default_max_abandoned_workers() -> u32 {
    DEFAULT_MAX_ABANDONED_WORKERS
}

/// The rules of `[sink.files]`.
fn validate_files(files: &FilesSinkConfig, issue: &mut impl FnMut(&str, String)) {
    if files.path.as_os_str().is_empty() {
        issue("sink.files.path", "empty: expected a directory".into());
    }
    if let Some(url) = &files.url
        && let Err(problem) = crate::sink::object::parse_s3_url(url)
    {
        issue("sink.files.url", problem);
    }
    if files.s3.upload_part_bytes < crate::sink::object::MIN_UPLOAD_PART_BYTES {
        issue(
            "sink.files.s3.upload_part_bytes",
            format!(
                "{} is too small: expected at least {} (5 MiB, S3's smallest part)",
                files.s3.upload_part_bytes,
                crate::sink::object::MIN_UPLOAD_PART_BYTES
            ),
        );
    }
    if files.url.is_some() && files.roll_bytes > crate::sink::object::MAX_ROLL_BYTES {
        issue(
            "sink.files.roll_bytes",
            format!(
                "{} is too large for an object store: committed objects are copied from their staged keys with one CopyObject (at most 5 GiB), so expected at most {} (4 GiB)",
                files.roll_bytes,
                crate::sink::object::MAX_ROLL_BYTES
            ),
        );
    }
    if let Err(problem) = PathTemplate::parse(&files.path_template) {
        issue("sink.files.path_template", problem);
    }
    match (files.format, files.compression) {
        (FileFormat::Jsonl, Some(FileCompression::Snappy)) => issue(
            "sink.files.compression",
            "\"snappy\" is for Parquet: expected \"none\", \"gzip\" or \"zstd\" with format = \"jsonl\"".into(),
        ),
        (FileFormat::Parquet, Some(FileCompression::Gzip)) => issue(
            "sink.files.compression",
            "\"gzip\" is for JSON Lines: expected \"none\", \"snappy\" or \"zstd\" with format = \"parquet\"".into(),
        ),
        _ => {}
    }
    if files.roll_records == 0 {
        issue("sink.files.roll_records", "0: expected at least 1".into());
    }
    if files.roll_bytes < 1024 {
        issue(
            "sink.files.roll_bytes",
            format!(
                "{} is too small: expected at least 1024 (bytes)",
                files.roll_bytes
            ),
        );
    }
    if files.roll_interval_ms == 0 {
        issue(
            "sink.files.roll_interval_ms",
            "0: expected at least 1 (milliseconds)".into(),
        );
    }
    if !(1..=256).contains(&files.sub_partitions) {
        issue(
            "sink.files.sub_partitions",
            format!(
                "{} is out of range: expected 1 to 256",
                files.sub_partitions
            ),
        );
    }
    if files.parquet_columns == ParquetColumns::Typed && files.format != FileFormat::Parquet {
        issue(
            "sink.files.parquet_columns",
            "\"typed\" makes Parquet columns: expected format = \"parquet\" with it (or leave parquet_columns out)".into(),
        );
    }
    if files.parquet_row_group_records == 0 {
        issue(
            "sink.files.parquet_row_group_records",
            "0: expected at least 1".into(),
        );
    }
    if files.parquet_row_group_bytes < 1024 {
        issue(
            "sink.files.parquet_row_group_bytes",
            format!(
                "{} is too small: expected at least 1024 (bytes)",
                files.parquet_row_group_bytes
            ),
        );
    }
}

impl SinkPipelineConfig {
    /// Parses and validates sink pipeline text; `env` looks up variables for interpolation.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `origin` and every invalid key.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        crate::config::load::parse_pipeline(text, origin, env, |_| Vec::new(), Self::validate)
    }

    /// Checks every rule that serde's types do not express; returns all broken ones.
    pub fn validate(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if !is_identifier(&self.name) {
            issue(
                "name",
                format!(
                    "{:?} is not a valid name: expected 1-40 characters of a-z, 0-9 and _",
                    self.name
                ),
            );
        }
        if self.verify_interval_s == Some(0) {
            issue(
                "verify_interval_s",
                "0: expected the seconds between scheduled verifications (at least 1; e.g. 3600), or leave the key out to turn them off".into(),
            );
        }
        let kafka = self.kafka();
        if kafka.brokers.trim().is_empty() {
            issue(
                "source.kafka.brokers",
                "empty: expected host:port[,host:port...]".into(),
            );
        }
        if kafka.selectors().is_empty() {
            issue(
                "source.kafka.topics",
                "empty: expected at least one topic, e.g. [\"orders\"], a comma-separated list or a /regex/".into(),
            );
        }
        for selector in kafka.selectors() {
            match selector {
                TopicSelector::Name(topic) if !is_topic_name(&topic) => issue(
                    "source.kafka.topics",
                    format!(
                        "{topic:?} is not a valid topic name: expected characters a-z, A-Z, 0-9, '.', '_' and '-', or a regular expression between slashes (/cdc\\.public\\..*/)"
                    ),
                ),
                TopicSelector::Pattern(pattern) => {
                    if let Err(error) = whole_match(&pattern, "") {
                        issue(
                            "source.kafka.topics",
                            format!("/{pattern}/ is not a valid regular expression: {error}"),
                        );
                    }
                }
                TopicSelector::Name(_) => {}
            }
        }
        if kafka.group_id.as_deref().is_some_and(str::is_empty) {
            issue(
                "source.kafka.group_id",
                "empty: expected a group name".into(),
            );
        }
        if kafka.commit_interval_ms == 0 || kafka.commit_interval_ms > 600_000 {
            issue(
                "source.kafka.commit_interval_ms",
                format!(
                    "{} is out of range: expected 1 to 600000 (milliseconds)",
                    kafka.commit_interval_ms
                ),
            );
        }
        for key in kafka.properties.keys() {
            if matches!(
                key.as_str(),
                "enable.auto.commit" | "group.id" | "bootstrap.servers"
            ) {
                issue(
                    &format!("source.kafka.properties.\"{key}\""),
                    "set by sluice (offsets are committed from the files' watermark; group.id and bootstrap.servers have their own keys)".into(),
                );
            }
        }
        if kafka.uses_avro() && self.schema_registry.is_none() {
            issue(
                "schema_registry",
                "missing: source.kafka's format, key_format or value_format is \"avro\", which \
                 needs the registry the records' schemas are in ([schema_registry] url = \
                 \"http://host:8081\")"
                    .into(),
            );
        }
        if let Some(registry) = &self.schema_registry
            && kafka.uses_avro()
        {
            for (key, problem) in registry.issues() {
                issue(&format!("schema_registry.{key}"), problem);
            }
        }
        if let SinkConfig::Postgres(postgres) = &self.sink {
            issues.extend(postgres.validate(kafka));
        }
        if let SinkConfig::Iceberg(iceberg) = &self.sink {
            issues.extend(iceberg.validate(kafka));
        }
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if let Some(files) = self.files() {
            validate_files(files, &mut issue);
            if files.parquet_columns == ParquetColumns::Typed
                && kafka.value_format() == crate::event::EventFormat::Avro
            {
                issue(
                    "sink.files.parquet_columns",
                    "\"typed\" reads JSON values with schemas; Avro values already give Parquet their schema's types: expected parquet_columns = \"inferred\" (the default) with source.kafka's Avro values".into(),
                );
            }
        }
        let delivery = &self.delivery;
        match (delivery.on_failure, &delivery.dead_letter_topic) {
            (FailurePolicy::DeadLetter, None) => issue(
                "delivery.dead_letter_topic",
                "missing: required when on_failure = \"dead_letter\"".into(),
            ),
            (_, Some(topic)) if !is_topic_name(topic) => issue(
                "delivery.dead_letter_topic",
                format!("{topic:?} is not a valid topic name"),
            ),
            (_, Some(topic)) if kafka.selects(topic) => issue(
                "delivery.dead_letter_topic",
                format!("{topic:?} is also a source topic: expected a topic sluice does not read"),
            ),
            _ => {}
        }
        if delivery.retry_max_attempts == 0 {
            issue(
                "delivery.retry_max_attempts",
                "0: expected at least 1".into(),
            );
        }
        if let Some(bytes) = delivery.max_queued_bytes_per_partition
            && bytes < 1024
        {
            issue(
                "delivery.max_queued_bytes_per_partition",
                format!("{bytes} is too small: expected at least 1024 (bytes)"),
            );
        }
        if delivery.memory_limit < 16 * 1024 * 1024 {
            issue(
                "delivery.memory_limit",
                format!(
                    "{} is too small: expected at least 16 MiB (bytes, or a string such as \"256MiB\")",
                    delivery.memory_limit
                ),
            );
        }
        if delivery.max_queued_records_per_partition == 0 {
            issue(
                "delivery.max_queued_records_per_partition",
                "0: expected at least 1".into(),
            );
        }
        if delivery.processing_timeout_ms < 100 {
            issue(
                "delivery.processing_timeout_ms",
                format!(
                    "{} is too small: expected at least 100 (milliseconds)",
                    delivery.processing_timeout_ms
                ),
            );
        }
        if delivery.revoke_timeout_ms == 0 {
            issue(
                "delivery.revoke_timeout_ms",
                "0: expected at least 1 (milliseconds)".into(),
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
        issues
    }

    /// `[source.kafka]`.
    pub fn kafka(&self) -> &KafkaSourceConfig {
        let SinkSourceConfig::Kafka(kafka) = &self.source;
        kafka
    }

    /// `[sink.files]`, when the sink writes files.
    pub fn files(&self) -> Option<&FilesSinkConfig> {
        match &self.sink {
            SinkConfig::Files(files) => Some(files),
            SinkConfig::Postgres(_) | SinkConfig::Iceberg(_) => None,
        }
    }

    /// `[sink.postgres]`, when the sink writes to PostgreSQL.
    pub fn postgres(&self) -> Option<&crate::sink::postgres::config::PostgresSinkConfig> {
        match &self.sink {
            SinkConfig::Postgres(postgres) => Some(postgres),
            SinkConfig::Files(_) | SinkConfig::Iceberg(_) => None,
        }
    }

    /// `[sink.iceberg]`, when the sink writes Iceberg tables.
    pub fn iceberg(&self) -> Option<&crate::sink::iceberg::config::IcebergSinkConfig> {
        match &self.sink {
            SinkConfig::Iceberg(iceberg) => Some(iceberg),
            SinkConfig::Files(_) | SinkConfig::Postgres(_) => None,
        }
    }

    /// The allocator purge delay this sink runs with, in milliseconds: `None` keeps
    /// mimalloc's default (the PostgreSQL sink, which pays for faster purging in CPU); see
    /// [`ALLOCATOR_PURGE_DELAY_MS`].
    pub fn allocator_purge_delay_ms(&self) -> Option<i64> {
        self.files().map(|_| ALLOCATOR_PURGE_DELAY_MS)
    }

    /// Sub-partitions per Kafka partition.
    pub fn sub_partitions(&self) -> u32 {
        match &self.sink {
            SinkConfig::Files(files) => files.sub_partitions,
            SinkConfig::Postgres(postgres) => postgres.sub_partitions,
            SinkConfig::Iceberg(iceberg) => iceberg.sub_partitions,
        }
    }

    /// The consumer group.
    pub fn group_id(&self) -> String {
        self.kafka()
            .group_id
            .clone()
            .unwrap_or_else(|| format!("sluice_{}", self.name))
    }

    /// The output compression, with the format's default (none without files).
    pub fn compression(&self) -> FileCompression {
        let Some(files) = self.files() else {
            return FileCompression::None;
        };
        files.compression.unwrap_or(match files.format {
            FileFormat::Jsonl => FileCompression::None,
            FileFormat::Parquet => FileCompression::Snappy,
        })
    }

    /// Per-partition queue byte limit as the budget takes it: `max_queued_bytes_per_partition`
    /// (validated to be at least 1024), else a [`QUEUE_SHARE_OF_MEMORY_LIMIT`]th of
    /// `memory_limit`.
    pub fn queued_bytes(&self) -> NonZeroU32 {
        let bytes = self
            .delivery
            .max_queued_bytes_per_partition
            .unwrap_or_else(|| {
                u32::try_from(self.delivery.memory_limit / QUEUE_SHARE_OF_MEMORY_LIMIT)
                    .unwrap_or(u32::MAX)
            });
        NonZeroU32::new(bytes).unwrap_or(NonZeroU32::MIN)
    }

    /// librdkafka's prefetch per partition in KiB (`queued.max.messages.kbytes`) unless the
    /// pipeline file sets it: a [`QUEUE_SHARE_OF_MEMORY_LIMIT`]th of `memory_limit`.
    pub fn prefetch_kbytes(&self) -> u64 {
        (self.delivery.memory_limit / QUEUE_SHARE_OF_MEMORY_LIMIT / 1024).max(1024)
    }

    /// Per-partition queue record limit as the budget takes it (validated to be at least 1).
    pub fn queued_records(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.max_queued_records_per_partition).unwrap_or(NonZeroU32::MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "orders_files"
        [source.kafka]
        brokers = "${KAFKA_BROKERS:-127.0.0.1:9092}"
        topics = ["orders"]
        [sink.files]
        path = "${OUTPUT_DIR}"
        format = "${FORMAT:-jsonl}"
    "#;

    fn env(name: &str) -> Option<String> {
        (name == "OUTPUT_DIR").then(|| "/tmp/out".to_owned())
    }

    fn issues(text: &str) -> Vec<ConfigIssue> {
        match SinkPipelineConfig::from_toml(text, "test.toml", &env) {
            Err(ConfigError::Invalid { issues, .. }) => issues,
            other => panic!("expected invalid config, got {other:?}"),
        }
    }

    #[test]
    fn avro_records_need_a_registry_and_formats_name_their_key() {
        let avro = MINIMAL.replace(
            "topics = [\"orders\"]",
            "topics = [\"orders\"]\nvalue_format = \"avro\"",
        );
        let keys: Vec<String> = issues(&avro).into_iter().map(|i| i.key).collect();
        assert_eq!(keys, ["schema_registry"]);
        let config = SinkPipelineConfig::from_toml(
            &format!("{avro}\n[schema_registry]\nurl = \"http://r:8081\"\n"),
            "test.toml",
            &env,
        )
        .unwrap();
        assert_eq!(config.kafka().key_format(), crate::event::EventFormat::Json);
        assert_eq!(
            config.kafka().value_format(),
            crate::event::EventFormat::Avro
        );
        let bad = MINIMAL.replace(
            "topics = [\"orders\"]",
            "topics = [\"orders\"]\nformat = \"protobuf\"",
        );
        let issues = issues(&bad);
        assert_eq!(issues[0].key, "source.kafka.format", "{issues:?}");
        assert!(issues[0].problem.contains("avro"), "{issues:?}");
        // A registry section without Avro is not checked (the examples leave its URL empty).
        let unused = format!("{MINIMAL}\n[schema_registry]\nurl = \"\"\n");
        assert!(SinkPipelineConfig::from_toml(&unused, "test.toml", &env).is_ok());
    }

    #[test]
    fn topics_take_lists_and_patterns_and_name_bad_ones() {
        let config = SinkPipelineConfig::from_toml(
            &MINIMAL.replace(
                r#"["orders"]"#,
                r#"["orders, refunds", "/cdc\\.app\\..+/"]"#,
            ),
            "t.toml",
            &env,
        )
        .unwrap();
        let kafka = config.kafka();
        assert_eq!(kafka.topic_names(), ["orders", "refunds"]);
        assert_eq!(
            kafka.subscription(),
            ["orders", "refunds", r"^(cdc\.app\..+)$"]
        );
        assert!(kafka.selects("cdc.app.items") && kafka.selects("refunds"));
        assert!(!kafka.selects("cdc.app.") && !kafka.selects("xcdc.app.items"));
        let found = issues(&MINIMAL.replace(r#"["orders"]"#, r#"["/cdc(/", "bad topic"]"#));
        let problems: Vec<String> = found
            .iter()
            .map(|i| format!("{}: {}", i.key, i.problem))
            .collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("source.kafka.topics: /cdc(/ is not a valid regular expression"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("\"bad topic\" is not a valid topic name"),
            "{problems:?}"
        );
    }

    #[test]
    fn kafka_source_selects_the_sink_kind_with_defaults() {
        let config = SinkPipelineConfig::from_toml(MINIMAL, "t.toml", &env).unwrap();
        assert_eq!(config.group_id(), "sluice_orders_files");
        assert_eq!(config.files().unwrap().path, PathBuf::from("/tmp/out"));
        assert_eq!(config.files().unwrap().format, FileFormat::Jsonl);
        assert_eq!(config.compression(), FileCompression::None);
        assert_eq!(
            config.files().unwrap().sub_partitions,
            DEFAULT_SUB_PARTITIONS
        );
        assert_eq!(config.files().unwrap().path_template, DEFAULT_PATH_TEMPLATE);
        assert_eq!(config.delivery.on_failure, FailurePolicy::Stop);
    }

    #[test]
    fn memory_limit_sizes_the_partition_queues_unless_they_are_set() {
        let sized = |delivery: &str| {
            let config = SinkPipelineConfig::from_toml(
                &format!("{MINIMAL}\n[delivery]\n{delivery}\n"),
                "t.toml",
                &env,
            )
            .unwrap();
            let client = consumer_config(&config);
            let prefetch = client.get("queued.max.messages.kbytes").unwrap().to_owned();
            (config.queued_bytes().get(), prefetch)
        };
        assert_eq!(sized(""), (4 << 20, "4096".to_owned()));
        assert_eq!(
            sized("memory_limit = \"1GiB\""),
            (32 << 20, "32768".to_owned())
        );
        assert_eq!(
            sized("max_queued_bytes_per_partition = 1048576"),
            (1 << 20, "4096".to_owned())
        );
        // A property set in the pipeline file wins over the derived prefetch.
        let config = SinkPipelineConfig::from_toml(
            &MINIMAL.replace(
                "topics = [\"orders\"]",
                "topics = [\"orders\"]\nproperties = { \"queued.max.messages.kbytes\" = \"65536\" }",
            ),
            "t.toml",
            &env,
        )
        .unwrap();
        let client = consumer_config(&config);
        assert_eq!(client.get("queued.max.messages.kbytes"), Some("65536"));
        let small = issues(&format!("{MINIMAL}\n[delivery]\nmemory_limit = \"8MiB\"\n"));
        assert_eq!(small[0].key, "delivery.memory_limit");
        assert!(
            small[0].problem.contains("at least 16 MiB"),
            "{:?}",
            small[0]
        );
    }

    #[test]
    fn a_sink_fetches_a_sixteenth_of_its_prefetch_per_partition() {
        let postgres = |extra: &str| {
            let config = SinkPipelineConfig::from_toml(
                &format!(
                    r#"
                    name = "to_pg"
                    [source.kafka]
                    brokers = "127.0.0.1:9092"
                    topics = ["orders"]
                    {extra}
                    [sink.postgres]
                    url = "postgres://u@localhost/db"
                    table = "orders"
                    "#
                ),
                "t.toml",
                &env,
            )
            .unwrap();
            consumer_config(&config)
                .get("max.partition.fetch.bytes")
                .map(str::to_owned)
        };
        assert_eq!(postgres("").as_deref(), Some("262144"));
        // A property set in the pipeline file wins.
        assert_eq!(
            postgres(r#"properties = { "max.partition.fetch.bytes" = "1048576" }"#).as_deref(),
            Some("1048576")
        );
        let files = SinkPipelineConfig::from_toml(MINIMAL, "t.toml", &env).unwrap();
        assert_eq!(
            consumer_config(&files).get("max.partition.fetch.bytes"),
            Some("262144")
        );
        // From the memory limit: a 32nd of it is the prefetch, a 16th of that one fetch.
        let larger = SinkPipelineConfig::from_toml(
            &format!("{MINIMAL}\n[delivery]\nmemory_limit = \"512MiB\"\n"),
            "t.toml",
            &env,
        )
        .unwrap();
        assert_eq!(
            consumer_config(&larger).get("max.partition.fetch.bytes"),
            Some("1048576")
        );
    }

    #[test]
    fn parquet_defaults_to_snappy() {
        let text = MINIMAL.replace("${FORMAT:-jsonl}", "parquet");
        let config = SinkPipelineConfig::from_toml(&text, "t.toml", &env).unwrap();
        assert_eq!(config.compression(), FileCompression::Snappy);
        let files = config.files().unwrap();
        assert_eq!(
            files.parquet_row_group_bytes,
            DEFAULT_PARQUET_ROW_GROUP_BYTES
        );
        let issues = issues(&format!("{text}\nparquet_row_group_bytes = 100\n"));
        assert_eq!(issues[0].key, "sink.files.parquet_row_group_bytes");
        assert!(issues[0].problem.contains("at least 1024"), "{issues:?}");
    }

    #[test]
    fn typed_parquet_columns_need_parquet_and_json() {
        let parquet = MINIMAL.replace("${FORMAT:-jsonl}", "parquet");
        let typed = format!("{parquet}\nparquet_columns = \"typed\"\n");
        let config = SinkPipelineConfig::from_toml(&typed, "t.toml", &env).unwrap();
        assert_eq!(
            config.files().unwrap().parquet_columns,
            ParquetColumns::Typed
        );
        let jsonl = issues(&format!("{MINIMAL}\nparquet_columns = \"typed\"\n"));
        assert_eq!(jsonl[0].key, "sink.files.parquet_columns", "{jsonl:?}");
        assert!(
            jsonl[0].problem.contains("format = \"parquet\""),
            "{jsonl:?}"
        );
        let avro = issues(&format!(
            "{}\n[schema_registry]\nurl = \"http://r:8081\"\n",
            typed.replace(
                "topics = [\"orders\"]",
                "topics = [\"orders\"]\nformat = \"avro\""
            )
        ));
        assert_eq!(avro[0].key, "sink.files.parquet_columns", "{avro:?}");
        let wrong = issues(&format!("{parquet}\nparquet_columns = \"strict\"\n"));
        assert_eq!(wrong[0].key, "sink.files.parquet_columns", "{wrong:?}");
        assert!(wrong[0].problem.contains("typed"), "{wrong:?}");
    }

    #[test]
    fn unknown_keys_and_wrong_enums_name_the_key() {
        let issues = issues(&MINIMAL.replace("format =", "fromat ="));
        assert_eq!(issues[0].key, "sink.files.fromat");
        let issues = self::issues(&MINIMAL.replace("${FORMAT:-jsonl}", "csv"));
        assert_eq!(issues[0].key, "sink.files.format");
        assert!(issues[0].problem.contains("jsonl"), "{issues:?}");
    }

    #[test]
    fn rules_are_all_reported() {
        let text = format!(
            "{}\nsub_partitions = 0\ncompression = \"gzip\"\npath_template = \"{{topic}}/{{nope:%Q\"\n[delivery]\non_failure = \"dead_letter\"\n",
            MINIMAL.replace("${FORMAT:-jsonl}", "parquet")
        );
        let keys: Vec<_> = issues(&text).into_iter().map(|i| i.key).collect();
        assert_eq!(
            keys,
            [
                "sink.files.path_template",
                "sink.files.compression",
                "sink.files.sub_partitions",
                "delivery.dead_letter_topic"
            ]
        );
    }

    #[test]
    fn reserved_consumer_properties_are_refused() {
        let text =
            format!("{MINIMAL}\n[source.kafka.properties]\n\"enable.auto.commit\" = \"true\"\n");
        let issues = issues(&text);
        assert!(
            issues
                .iter()
                .any(|i| i.key == "source.kafka.properties.\"enable.auto.commit\""),
            "{issues:?}"
        );
    }

    #[test]
    fn the_allocator_purge_delay_follows_the_sink() {
        let load = |text: &str| SinkPipelineConfig::from_toml(text, "t.toml", &env).unwrap();
        let jsonl = load(MINIMAL);
        assert_eq!(
            jsonl.allocator_purge_delay_ms(),
            Some(ALLOCATOR_PURGE_DELAY_MS)
        );
        let parquet = load(&MINIMAL.replace("${FORMAT:-jsonl}", "parquet"));
        assert_eq!(
            parquet.allocator_purge_delay_ms(),
            Some(ALLOCATOR_PURGE_DELAY_MS)
        );
        let postgres = load(
            r#"
            name = "to_pg"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["orders"]
            [sink.postgres]
            url = "postgres://u@localhost/db"
            table = "orders"
        "#,
        );
        assert_eq!(postgres.allocator_purge_delay_ms(), None);
    }

    #[test]
    fn a_postgres_sink_names_its_broken_keys() {
        let text = r#"
            name = "to_pg"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["cdc.public.orders", "orders"]
            [sink.postgres]
            url = "postgres://u@localhost/db?sslmode=nope"
            batch_records = 0
        "#;
        let issues = issues(text);
        let keys: Vec<_> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "sink.postgres.url",
                "sink.postgres.table",
                "sink.postgres.batch_records"
            ],
            "{issues:?}"
        );
        assert!(issues[1].problem.contains("\"orders\""), "{issues:?}");
        let issues = self::issues(&text.replace("batch_records = 0", "tabel = \"x\""));
        assert_eq!(issues[0].key, "sink.postgres.tabel");
    }

    #[test]
    fn the_examples_load() {
        let env = |name: &str| match name {
            "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
            "SOURCE_TOPIC" => Some("orders".to_owned()),
            "OUTPUT_DIR" => Some("/tmp/out".to_owned()),
            "S3_URL" => Some("s3://bucket/orders".to_owned()),
            _ => None,
        };
        for text in [
            include_str!("../../../../examples/kafka-to-files.toml"),
            include_str!("../../../../examples/kafka-to-s3.toml"),
        ] {
            let config = SinkPipelineConfig::from_toml(text, "t.toml", &env).unwrap();
            assert_eq!(config.kafka().topics, ["orders"]);
        }
        let text = include_str!("../../../../examples/kafka-to-s3.toml");
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &env).unwrap();
        assert_eq!(
            config.files().unwrap().url.as_deref(),
            Some("s3://bucket/orders")
        );
        assert_eq!(
            config.files().unwrap().s3.upload_part_bytes,
            crate::sink::object::DEFAULT_UPLOAD_PART_BYTES
        );
        let text = include_str!("../../../../examples/kafka-to-iceberg.toml");
        let iceberg_env = |name: &str| match name {
            "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
            "SOURCE_TOPICS" => Some("cdc.public.orders".to_owned()),
            "ICEBERG_CATALOG_URI" => Some("postgres://u@catalog/iceberg".to_owned()),
            "ICEBERG_WAREHOUSE" => Some("file:///var/lib/warehouse".to_owned()),
            "ICEBERG_NAMESPACE" => Some("cdc".to_owned()),
            _ => None,
        };
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &iceberg_env).unwrap();
        let iceberg = config.iceberg().unwrap();
        assert_eq!(iceberg.table_for("cdc.public.orders").unwrap(), "orders");
        assert_eq!(iceberg.namespace, "cdc");
        assert!(iceberg.auto_create);
        assert_eq!(
            iceberg.mode,
            crate::sink::iceberg::config::IcebergMode::Upsert
        );
        // The REST catalog and an S3 warehouse.
        let rest = |name: &str| match name {
            "ICEBERG_CATALOG_URI" => Some("https://catalog.example:8181/api".to_owned()),
            "ICEBERG_WAREHOUSE" => Some("s3://bucket/wh".to_owned()),
            other => iceberg_env(other),
        };
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &rest).unwrap();
        assert!(config.iceberg().unwrap().is_rest());
        // OAuth2 client credentials from the environment.
        let oauth = |name: &str| match name {
            "ICEBERG_CREDENTIAL" => Some("sluice:secret".to_owned()),
            other => rest(other),
        };
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &oauth).unwrap();
        assert_eq!(
            config.iceberg().unwrap().catalog_credential.as_deref(),
            Some("sluice:secret")
        );
        let no_warehouse = |name: &str| match name {
            "ICEBERG_WAREHOUSE" => Some("gs://bucket/wh".to_owned()),
            other => iceberg_env(other),
        };
        let error = SinkPipelineConfig::from_toml(text, "t.toml", &no_warehouse)
            .unwrap_err()
            .to_string();
        assert!(error.contains("sink.iceberg.warehouse"), "{error}");
        let text = include_str!("../../../../examples/kafka-to-postgres.toml");
        let env = |name: &str| match name {
            "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
            "SOURCE_TOPICS" => Some("cdc.public.orders, cdc.public.items".to_owned()),
            "TARGET_PG_URL" => Some("postgres://u@replica/app?sslmode=verify-full".to_owned()),
            _ => None,
        };
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &env).unwrap();
        assert!(!config.kafka().uses_avro());
        let avro = |name: &str| match name {
            "EVENT_FORMAT" => Some("avro".to_owned()),
            "SCHEMA_REGISTRY_URL" => Some("http://registry:8081".to_owned()),
            _ => env(name),
        };
        let with_avro = SinkPipelineConfig::from_toml(text, "t.toml", &avro).unwrap();
        assert_eq!(
            with_avro.kafka().value_format(),
            crate::event::EventFormat::Avro
        );
        assert_eq!(
            with_avro.schema_registry.as_ref().unwrap().url.0,
            ["http://registry:8081"]
        );
        let no_registry = |name: &str| match name {
            "EVENT_FORMAT" => Some("avro".to_owned()),
            _ => env(name),
        };
        let error = SinkPipelineConfig::from_toml(text, "t.toml", &no_registry)
            .unwrap_err()
            .to_string();
        assert!(error.contains("schema_registry.url"), "{error}");
        let postgres = config.postgres().unwrap();
        assert_eq!(
            postgres.table_for("cdc.public.orders").unwrap().to_string(),
            "public.orders"
        );
        assert_eq!(config.sub_partitions(), 4);
        assert_eq!(
            config.kafka().subscription(),
            ["cdc.public.orders", "cdc.public.items"]
        );
        // SOURCE_TOPICS as a regular expression.
        let env = |name: &str| match name {
            "SOURCE_TOPICS" => Some(r"/cdc\.public\..*/".to_owned()),
            other => env(other),
        };
        let config = SinkPipelineConfig::from_toml(text, "t.toml", &env).unwrap();
        assert_eq!(config.kafka().subscription(), [r"^(cdc\.public\..*)$"]);
        assert!(config.kafka().selects("cdc.public.orders"));
        assert!(!config.kafka().selects("cdc.other.orders"));
        assert!(!config.kafka().selects("xcdc.public.orders"));
        let issues = issues(&format!(
            "{MINIMAL}\nurl = \"/data\"\n[sink.files.s3]\nupload_part_bytes = 1000\n"
        ));
        let keys: Vec<_> = issues.into_iter().map(|i| i.key).collect();
        assert_eq!(keys, ["sink.files.url", "sink.files.s3.upload_part_bytes"]);
        let too_large = self::issues(&format!(
            "{MINIMAL}\nurl = \"s3://b/p\"\nroll_bytes = 5000000000\n"
        ));
        let keys: Vec<_> = too_large.into_iter().map(|i| i.key).collect();
        assert_eq!(keys, ["sink.files.roll_bytes"]);
    }
}
