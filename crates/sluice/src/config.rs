//! The pipeline file: one TOML document per pipeline.
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

/// Default in-flight byte budget: 64 MiB.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u32 = 64 * 1024 * 1024;
/// Default in-flight record budget.
pub const DEFAULT_MAX_IN_FLIGHT_RECORDS: u32 = 100_000;
/// Default interval between standby status updates (checkpoints) sent to PostgreSQL.
pub const DEFAULT_STATUS_INTERVAL_MS: u64 = 1_000;
/// Default interval between heartbeat messages written to the WAL; 0 disables them.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 10_000;
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
/// Default time the server's WAL may grow while the slot's confirmed position stands still
/// before the pipeline is reported stalled.
pub const DEFAULT_PROGRESS_TIMEOUT_MS: u64 = 120_000;
/// Default time the replication connection may stay silent (no data, no keepalive) while
/// sluice reads before it is replaced; a reply is asked for at half of it.
pub const DEFAULT_SILENCE_TIMEOUT_MS: u64 = 30_000;
/// Default `statement_timeout` of sluice's SQL sessions (catalog, snapshot and incremental
/// reads, TOAST re-reads, heartbeats).
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 300_000;
/// Default `lock_timeout` of sluice's SQL sessions.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 30_000;
/// The prefix of sluice's own heartbeat messages in the WAL.
pub const HEARTBEAT_MESSAGE_PREFIX: &str = "sluice.heartbeat";

/// A whole pipeline file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// The pipeline's name: used in metric labels, the default slot and publication names, and
    /// the PostgreSQL `application_name`.
    pub name: String,
    /// Where changes come from.
    pub source: SourceConfig,
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
}

/// The source section: exactly one source kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum SourceConfig {
    /// PostgreSQL logical replication.
    Postgres(PostgresSourceConfig),
}

/// `[source.postgres]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSourceConfig {
    /// A `postgres://user:password@host:port/db` URL (or a key=value connection string).
    pub url: String,
    /// Replication slot name; default `sluice_<pipeline name>`.
    pub slot: Option<String>,
    /// Publication name; default `sluice_<pipeline name>`.
    pub publication: Option<String>,
    /// Create the publication when it does not exist.
    #[serde(default = "default_true")]
    pub create_publication: bool,
    /// Capture every table of these schemas.
    #[serde(default)]
    pub schemas: Vec<String>,
    /// Capture these tables, each `schema.table`.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Interval between standby status updates (checkpoints).
    #[serde(default = "default_status_interval_ms")]
    pub status_interval_ms: u64,
    /// Interval between heartbeat messages written to the WAL; 0 disables them.
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// What to do when the slot this pipeline fed is gone, was recreated or was invalidated.
    #[serde(default)]
    pub on_slot_loss: SlotLossPolicy,
    /// How long the server's WAL may grow while the slot's confirmed position stands still
    /// before the pipeline is reported stalled (status, metric, log); 0 disables the watchdog.
    #[serde(default = "default_progress_timeout_ms")]
    pub progress_timeout_ms: u64,
    /// How long the replication connection may stay silent while sluice reads (no data and no
    /// keepalive, even after asking the server for one at half this time) before it is taken
    /// for dead and replaced; 0 disables the check.
    #[serde(default = "default_silence_timeout_ms")]
    pub silence_timeout_ms: u64,
    /// `statement_timeout` of sluice's SQL sessions; 0 disables it.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// `lock_timeout` of sluice's SQL sessions; 0 disables it.
    #[serde(default = "default_lock_timeout_ms")]
    pub lock_timeout_ms: u64,
    /// The transactional outbox: a table whose inserted rows become events on per-aggregate
    /// topics instead of change events.
    pub outbox: Option<OutboxConfig>,
    /// A table (`schema.table`) whose inserted rows are signals to sluice, as Debezium's signal
    /// table: `(id text PRIMARY KEY, type text, data text)`; created when missing and added to
    /// the publication. Signals: `execute-snapshot` and `stop-snapshot`.
    pub signal_table: Option<String>,
    /// Rows per chunk of an incremental snapshot (held in memory between its watermarks).
    #[serde(default = "default_incremental_chunk_rows")]
    pub incremental_chunk_rows: u32,
    /// Snapshot (incrementally, while streaming) a table that joins the captured set after the
    /// pipeline's first start: added to the configuration, or created in / moved into a
    /// captured schema.
    #[serde(default = "default_true")]
    pub snapshot_new_tables: bool,
    /// How often the captured schemas are listed for tables created in or moved into them while
    /// running (they are then published, when the publication lists tables by name, and
    /// snapshotted with `snapshot_new_tables`); 0 disables.
    #[serde(default = "default_table_refresh_interval_ms")]
    pub table_refresh_interval_ms: u64,
    /// Unchanged TOASTed columns of an update: `"unavailable"` (listed in
    /// `unavailable_columns`) or `"reread"` (their current value, read from the table).
    #[serde(default)]
    pub unchanged_toast: UnchangedToast,
    /// When to read the captured tables' current rows (`op: "r"`) before streaming.
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// Rows fetched per round trip while snapshotting.
    #[serde(default = "default_snapshot_fetch_rows")]
    pub snapshot_fetch_rows: u32,
    /// Tables to leave out (`schema.table` globs, `*` matches any characters), e.g. of a
    /// captured schema.
    #[serde(default)]
    pub exclude_tables: Vec<String>,
    /// What to do with columns' values in change events (`schema.table.column` globs).
    #[serde(default)]
    pub columns: ColumnRules,
    /// Row filters by table (`"schema.table" = "SQL condition"`): only rows for which the
    /// condition is true are snapshotted and streamed. Pushed down to the publication
    /// (PostgreSQL 15 or later; refused on older servers). With updates and deletes published,
    /// PostgreSQL only accepts conditions on the table's replica-identity columns.
    #[serde(default)]
    pub row_filters: BTreeMap<String, String>,
    /// Push `columns.exclude` down to the publication as column lists (PostgreSQL 15 or later),
    /// so excluded columns never leave the server. Columns added to such a table while sluice
    /// runs are published from its next start.
    #[serde(default = "default_true")]
    pub publication_column_lists: bool,
    /// Connections reading snapshot chunks in parallel (across and within tables).
    #[serde(default = "default_snapshot_workers")]
    pub snapshot_workers: u32,
    /// Rows per snapshot chunk (tables are split by primary-key ranges, or page ranges when they
    /// have no single-column key; finished chunks are not read again after a restart).
    #[serde(default = "default_snapshot_chunk_rows")]
    pub snapshot_chunk_rows: u32,
}

/// `[source.postgres.columns]`: column rules, each a list of `schema.table.column` globs. The
/// first rule that matches wins, in the order exclude, hash, mask. Key columns keep their values
/// in the record key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnRules {
    /// Leave these columns out of `before` and `after`.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Replace their values by the hex SHA-256 of the value's text (joinable, not readable).
    #[serde(default)]
    pub hash: Vec<String>,
    /// Replace their values by `"****"`.
    #[serde(default)]
    pub mask: Vec<String>,
}

/// A glob over dotted names (`*` matches any characters, dots included).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .is_ok_and(|glob| glob.compile_matcher().is_match(name))
}

impl PostgresSourceConfig {
    /// The row filter of `schema.table`, if any.
    pub fn row_filter(&self, qualified: &str) -> Option<&str> {
        self.row_filters.get(qualified).map(String::as_str)
    }

    /// Whether `schema.table` is captured by name or by schema (and not excluded).
    pub fn captures_table(&self, qualified: &str) -> bool {
        let Some((schema, _)) = parse_table_name(qualified) else {
            return false;
        };
        let listed = self.tables.iter().any(|t| t == qualified)
            || self.outbox.as_ref().is_some_and(|o| o.table == qualified);
        (listed || self.schemas.iter().any(|s| s == schema)) && !self.excludes_table(qualified)
    }

    /// Whether `schema.table` is excluded.
    pub fn excludes_table(&self, qualified: &str) -> bool {
        self.exclude_tables
            .iter()
            .any(|p| glob_matches(p, qualified))
    }
}

/// When to snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// When the slot is new: read every captured table under the slot's exported snapshot,
    /// then stream from the slot's consistent point.
    #[default]
    Initial,
    /// Never: stream only the changes after the slot's creation.
    Never,
    /// Snapshot like `initial`, then stop (no streaming).
    InitialOnly,
    /// Like `initial`, and also after a lost slot was recreated (`on_slot_loss = "recreate"`).
    WhenNeeded,
}

/// `[source.postgres.outbox]`: the outbox pattern without a separate transform. Column names
/// default to Debezium's outbox event router's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// The outbox table, `schema.table`; captured even when not listed in `tables`.
    pub table: String,
    /// The column whose value routes the event (`{aggregate_type}` in `topic`).
    #[serde(default = "default_outbox_type_column")]
    pub aggregate_type_column: String,
    /// The column whose value is the record key.
    #[serde(default = "default_outbox_id_column")]
    pub aggregate_id_column: String,
    /// The column whose value (its text form, e.g. a JSON document) is the record value.
    #[serde(default = "default_outbox_payload_column")]
    pub payload_column: String,
    /// The topic, with `{aggregate_type}` replaced per row.
    #[serde(default = "default_outbox_topic")]
    pub topic: String,
}

/// What to do when the replication slot this pipeline fed was dropped, recreated (by someone
/// else, or by sluice after a drop) or invalidated by the server: changes were skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SlotLossPolicy {
    /// Stop the pipeline with what happened and the fix.
    #[default]
    Stop,
    /// Log the gap loudly, count it (`sluice_source_slot_losses_total`), create the slot anew
    /// and go on from the server's current position.
    Recreate,
}

/// What an update's unchanged TOASTed columns (values PostgreSQL does not send) become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnchangedToast {
    /// Left out of `after` and listed in `unavailable_columns`.
    #[default]
    Unavailable,
    /// Read from the table by the row's key when the change is decoded: the column's current
    /// value, which may be newer than the change (still `unavailable` when the row is gone).
    Reread,
}

impl fmt::Debug for PostgresSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold a password: never print it.
        f.debug_struct("PostgresSourceConfig")
            .field("url", &"<redacted>")
            .field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("schemas", &self.schemas)
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

/// `[kafka]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// Topics are `<topic_prefix>.<schema>.<table>`.
    #[serde(default = "default_topic_prefix")]
    pub topic_prefix: String,
    /// Write a tombstone (null value) after each delete.
    #[serde(default = "default_true")]
    pub tombstones_on_delete: bool,
    /// Create missing topics.
    #[serde(default = "default_true")]
    pub create_topics: bool,
    /// Partitions of the topics sluice creates.
    #[serde(default = "default_topic_partitions")]
    pub topic_partitions: u32,
    /// Replication factor of the topics sluice creates; unset = the broker's default.
    pub topic_replication_factor: Option<u16>,
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

/// `[delivery]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Bytes of change events between the source and Kafka's acknowledgement.
    #[serde(default = "default_max_in_flight_bytes")]
    pub max_in_flight_bytes: u32,
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
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            max_in_flight_records: DEFAULT_MAX_IN_FLIGHT_RECORDS,
            on_permanent_error: PermanentErrorPolicy::default(),
            dead_letter_topic: None,
            dead_letter_max_value_bytes: DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES,
        }
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

const fn default_true() -> bool {
    true
}
const fn default_status_interval_ms() -> u64 {
    DEFAULT_STATUS_INTERVAL_MS
}
const fn default_heartbeat_interval_ms() -> u64 {
    DEFAULT_HEARTBEAT_INTERVAL_MS
}
fn default_topic_prefix() -> String {
    DEFAULT_TOPIC_PREFIX.to_owned()
}
const fn default_topic_partitions() -> u32 {
    DEFAULT_TOPIC_PARTITIONS
}
const fn default_max_in_flight_bytes() -> u32 {
    DEFAULT_MAX_IN_FLIGHT_BYTES
}
const fn default_max_in_flight_records() -> u32 {
    DEFAULT_MAX_IN_FLIGHT_RECORDS
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
fn default_outbox_type_column() -> String {
    "aggregatetype".into()
}
fn default_outbox_id_column() -> String {
    "aggregateid".into()
}
fn default_outbox_payload_column() -> String {
    "payload".into()
}
fn default_outbox_topic() -> String {
    "outbox.event.{aggregate_type}".into()
}
const fn default_snapshot_fetch_rows() -> u32 {
    10_000
}
const fn default_snapshot_workers() -> u32 {
    4
}
const fn default_incremental_chunk_rows() -> u32 {
    4096
}

const fn default_snapshot_chunk_rows() -> u32 {
    50_000
}
const fn default_table_refresh_interval_ms() -> u64 {
    10_000
}
const fn default_progress_timeout_ms() -> u64 {
    DEFAULT_PROGRESS_TIMEOUT_MS
}

const fn default_silence_timeout_ms() -> u64 {
    DEFAULT_SILENCE_TIMEOUT_MS
}

const fn default_statement_timeout_ms() -> u64 {
    DEFAULT_STATEMENT_TIMEOUT_MS
}

const fn default_lock_timeout_ms() -> u64 {
    DEFAULT_LOCK_TIMEOUT_MS
}

/// One broken rule of the pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The key's path, e.g. `source.postgres.tables[1]`.
    pub key: String,
    /// What is wrong and the expected form.
    pub problem: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

/// The pipeline file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read pipeline file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("pipeline file {path} is not valid TOML")]
    Syntax {
        /// The file.
        path: String,
        /// Where and why.
        #[source]
        source: toml::de::Error,
    },
    /// Keys are unknown, values of the wrong form, or rules broken.
    #[error("pipeline file {path} is invalid:\n{}", format_issues(.issues))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem found.
        issues: Vec<ConfigIssue>,
    },
}

fn format_issues(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|issue| format!("  - {issue}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl PipelineConfig {
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
        let SourceConfig::Postgres(pg) = &self.source;
        for (key, name) in [
            ("source.postgres.slot", &pg.slot),
            ("source.postgres.publication", &pg.publication),
        ] {
            if let Some(name) = name.as_deref().filter(|name| !is_slot_name(name)) {
                issue(
                    key,
                    format!("{name:?} is not valid: expected 1-63 characters of a-z, 0-9 and _"),
                );
            }
        }
        if pg.schemas.is_empty() && pg.tables.is_empty() && pg.outbox.is_none() {
            issue(
                "source.postgres",
                "nothing to capture: set `schemas = [\"public\"]` and/or `tables = [\"schema.table\"]`"
                    .into(),
            );
        }
        for (index, table) in pg.tables.iter().enumerate() {
            if parse_table_name(table).is_none() {
                issue(
                    &format!("source.postgres.tables[{index}]"),
                    format!("{table:?} is not a table name: expected \"schema.table\""),
                );
            }
        }
        if let Some(outbox) = &pg.outbox {
            if parse_table_name(&outbox.table).is_none() {
                issue(
                    "source.postgres.outbox.table",
                    format!(
                        "{:?} is not a table name: expected \"schema.table\"",
                        outbox.table
                    ),
                );
            }
            if !outbox.topic.contains("{aggregate_type}")
                || !is_topic_name(&outbox.topic.replace("{aggregate_type}", "x"))
            {
                issue(
                    "source.postgres.outbox.topic",
                    format!(
                        "{:?} is not valid: expected a topic name containing {{aggregate_type}}, e.g. \"outbox.event.{{aggregate_type}}\"",
                        outbox.topic
                    ),
                );
            }
        }
        if pg.snapshot_fetch_rows == 0 {
            issue(
                "source.postgres.snapshot_fetch_rows",
                "0: expected at least 1".into(),
            );
        }
        let globs = pg
            .exclude_tables
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("source.postgres.exclude_tables[{i}]"), p))
            .chain(
                [
                    ("exclude", &pg.columns.exclude),
                    ("hash", &pg.columns.hash),
                    ("mask", &pg.columns.mask),
                ]
                .into_iter()
                .flat_map(|(key, list)| {
                    list.iter()
                        .enumerate()
                        .map(move |(i, p)| (format!("source.postgres.columns.{key}[{i}]"), p))
                }),
            );
        for (key, pattern) in globs {
            if let Err(error) = globset::Glob::new(pattern) {
                issue(
                    &key,
                    format!(
                        "{pattern:?} is not a valid pattern ({error}): expected e.g. \"public.users.*\""
                    ),
                );
            }
        }
        for (table, filter) in &pg.row_filters {
            let key = format!("source.postgres.row_filters.{table:?}");
            if parse_table_name(table).is_none() {
                issue(
                    &key,
                    format!(
                        "{table:?} is not a table name: expected \"schema.table\" = \"SQL condition\""
                    ),
                );
            } else if !pg.captures_table(table) {
                issue(
                    &key,
                    format!(
                        "{table} is not captured: expected a table of source.postgres.schemas or tables (and not excluded)"
                    ),
                );
            }
            if let Err(problem) = check_row_filter(filter) {
                issue(
                    &key,
                    format!(
                        "{filter:?} {problem}: expected one SQL condition on the table's columns, e.g. \"status <> 'draft'\""
                    ),
                );
            }
        }
        if pg.snapshot_workers == 0 || pg.snapshot_workers > 64 {
            issue(
                "source.postgres.snapshot_workers",
                format!("{} is out of range: expected 1 to 64", pg.snapshot_workers),
            );
        }
        if pg.snapshot_chunk_rows == 0 {
            issue(
                "source.postgres.snapshot_chunk_rows",
                "0: expected at least 1".into(),
            );
        }
        if pg.incremental_chunk_rows == 0 || pg.incremental_chunk_rows > 1_000_000 {
            issue(
                "source.postgres.incremental_chunk_rows",
                format!(
                    "{} is out of range: expected 1 to 1000000 (rows held in memory per chunk)",
                    pg.incremental_chunk_rows
                ),
            );
        }
        if let Some(table) = &pg.signal_table
            && parse_table_name(table).is_none()
        {
            issue(
                "source.postgres.signal_table",
                format!("{table:?}: expected schema.table, e.g. \"public.sluice_signal\""),
            );
        }
        if pg.status_interval_ms == 0 || pg.status_interval_ms > 60_000 {
            issue(
                "source.postgres.status_interval_ms",
                format!(
                    "{} is out of range: expected 1 to 60000 (milliseconds; keep it well below the server's wal_sender_timeout)",
                    pg.status_interval_ms
                ),
            );
        }
        if pg.silence_timeout_ms != 0 && pg.silence_timeout_ms < 2 * pg.status_interval_ms {
            issue(
                "source.postgres.silence_timeout_ms",
                format!(
                    "{} is below twice status_interval_ms ({}): expected 0 (off) or at least {} (milliseconds)",
                    pg.silence_timeout_ms,
                    pg.status_interval_ms,
                    2 * pg.status_interval_ms
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
        if self.kafka.topic_partitions == 0 {
            issue("kafka.topic_partitions", "0: expected at least 1".into());
        }
        if self.delivery.max_in_flight_bytes < 1024 {
            issue(
                "delivery.max_in_flight_bytes",
                format!(
                    "{} is too small: expected at least 1024 (bytes)",
                    self.delivery.max_in_flight_bytes
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

    /// The PostgreSQL source section.
    pub fn postgres(&self) -> &PostgresSourceConfig {
        let SourceConfig::Postgres(pg) = &self.source;
        pg
    }

    /// The replication slot's name.
    pub fn slot_name(&self) -> String {
        self.postgres()
            .slot
            .clone()
            .unwrap_or_else(|| format!("sluice_{}", self.name))
    }

    /// The publication's name.
    pub fn publication_name(&self) -> String {
        self.postgres()
            .publication
            .clone()
            .unwrap_or_else(|| format!("sluice_{}", self.name))
    }

    /// The byte budget as the engine takes it (validated to be at least 1024).
    pub fn max_in_flight_bytes(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.max_in_flight_bytes).unwrap_or(NonZeroU32::MIN)
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

/// Looks up an environment variable for `${…}`.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;
/// A pipeline type's `from_toml(text, origin, env)`.
type ParseFn<T> = fn(&str, &str, EnvLookup<'_>) -> Result<T, ConfigError>;

/// Reads a pipeline file and parses it with `parse` (the environment fills `${…}`).
pub(crate) fn load_file<T>(path: &Path, parse: ParseFn<T>) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string(), &|name| {
        std::env::var(name).ok()
    })
}

/// The three steps of loading (see the module docs) for a pipeline type: parse and
/// interpolate, deserialize strictly, validate; every issue names its key.
pub(crate) fn parse_pipeline<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
    validate: fn(&T) -> Vec<ConfigIssue>,
) -> Result<T, ConfigError> {
    let invalid = |issues| ConfigError::Invalid {
        path: origin.to_owned(),
        issues,
    };
    let value = parse_interpolated(text, origin, env)?;
    let config: T = deserialize_strict(value).map_err(invalid)?;
    let issues = validate(&config);
    if issues.is_empty() {
        Ok(config)
    } else {
        Err(invalid(issues))
    }
}

/// Parses TOML text and replaces `${…}` in every string; the issues name the keys.
pub(crate) fn parse_interpolated(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<toml::Value, ConfigError> {
    let mut value: toml::Value = toml::from_str(text).map_err(|source| ConfigError::Syntax {
        path: origin.to_owned(),
        source,
    })?;
    let mut issues = Vec::new();
    interpolate(&mut value, &mut String::new(), env, &mut issues);
    if issues.is_empty() {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            path: origin.to_owned(),
            issues,
        })
    }
}

/// Deserializes strictly; an error names the key's path.
pub(crate) fn deserialize_strict<T: serde::de::DeserializeOwned>(
    value: toml::Value,
) -> Result<T, Vec<ConfigIssue>> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let key = error.path().to_string();
        vec![ConfigIssue {
            key: if key == "." {
                "(top level)".into()
            } else {
                key
            },
            problem: error.into_inner().to_string(),
        }]
    })
}

/// Checks that a row filter is one SQL expression that cannot end the `WHERE (…)` it is put
/// in: not empty, parentheses balanced outside quotes, no `;` and no comments.
fn check_row_filter(filter: &str) -> Result<(), &'static str> {
    if filter.trim().is_empty() {
        return Err("is empty");
    }
    let mut depth = 0usize;
    let mut chars = filter.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // A quoted literal or identifier; a doubled quote is an escaped one.
                loop {
                    match chars.next() {
                        Some(q) if q == c => {
                            if chars.peek() == Some(&c) {
                                chars.next();
                            } else {
                                break;
                            }
                        }
                        Some(_) => {}
                        None => return Err("has an unterminated quote"),
                    }
                }
            }
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or("has a ')' without its '('")?;
            }
            ';' => return Err("contains ';'"),
            '-' if chars.peek() == Some(&'-') => return Err("contains a comment"),
            '/' if chars.peek() == Some(&'*') => return Err("contains a comment"),
            _ => {}
        }
    }
    if depth == 0 {
        Ok(())
    } else {
        Err("has a '(' without its ')'")
    }
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

fn is_slot_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

pub(crate) fn is_topic_name(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Replaces `${NAME}` / `${NAME:-default}` in every string of `value`; `path` is the key path
/// of `value`, for error messages.
fn interpolate(
    value: &mut toml::Value,
    path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
    issues: &mut Vec<ConfigIssue>,
) {
    match value {
        toml::Value::String(text) => match expand(text, env) {
            Ok(expanded) => *text = expanded,
            Err(problem) => issues.push(ConfigIssue {
                key: path.clone(),
                problem,
            }),
        },
        toml::Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                interpolate(item, path, env, issues);
                path.truncate(len);
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                interpolate(item, path, env, issues);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Expands `${NAME}`, `${NAME:-default}` and `${file:PATH}`; `$$` is a literal `$`.
/// The contents of a secret file for `${file:PATH}`, without one trailing newline (as secrets
/// mounted by Docker or Kubernetes, or written with `echo`, usually end). The error names the
/// path, never the contents.
fn read_secret_file(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("${file:} needs a path, e.g. ${file:/run/secrets/pg_password}".to_owned());
    }
    let mut text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the secret file {path}: {e}"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body) = after.strip_prefix('{') {
            // The text is not quoted back: it may hold a secret.
            let end = body.find('}').ok_or_else(|| {
                "unterminated ${: expected ${NAME}, ${NAME:-default} or ${file:/path}".to_owned()
            })?;
            if let Some(path) = body[..end].strip_prefix("file:") {
                out.push_str(&read_secret_file(path)?);
                rest = &body[end + 1..];
                continue;
            }
            let (name, default) = match body[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&body[..end], None),
            };
            match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (use ${{{name}:-default}} for a default)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "orders"
        [source.postgres]
        url = "${PG_URL}"
        schemas = ["public"]
        [kafka]
        brokers = "${KAFKA_BROKERS:-127.0.0.1:9092}"
        topic_prefix = "${TOPIC_PREFIX:-sluice}"
    "#;

    fn env(name: &str) -> Option<String> {
        (name == "PG_URL").then(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    fn issues(text: &str) -> Vec<ConfigIssue> {
        match PipelineConfig::from_toml(text, "test.toml", &env) {
            Err(ConfigError::Invalid { issues, .. }) => issues,
            other => panic!("expected invalid config, got {other:?}"),
        }
    }

    #[test]
    fn minimal_file_gets_defaults() {
        let config = PipelineConfig::from_toml(MINIMAL, "test.toml", &env).unwrap();
        assert_eq!(config.kafka.brokers, "127.0.0.1:9092");
        assert_eq!(config.kafka.topic_prefix, "sluice");
        assert_eq!(config.slot_name(), "sluice_orders");
        assert_eq!(config.publication_name(), "sluice_orders");
        assert_eq!(
            config.delivery.max_in_flight_bytes,
            DEFAULT_MAX_IN_FLIGHT_BYTES
        );
        assert!(config.kafka.tombstones_on_delete);
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
        let config = PipelineConfig::from_toml(&allowed, "test.toml", &env).unwrap();
        assert_eq!(config.kafka.producer["acks"], "1");
        // Safe spellings pass.
        let safe = "[kafka.producer]\nacks = \"-1\"\n\"enable.idempotence\" = \"true\"\n\
             \"max.in.flight.requests.per.connection\" = \"5\"\n";
        let text = MINIMAL.replace("[kafka]\n", &format!("{safe}[kafka]\n"));
        PipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
    }

    #[test]
    fn a_value_can_come_from_a_secret_file_and_errors_never_quote_it() {
        let dir = std::env::temp_dir().join(format!("sluice-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pg_password");
        std::fs::write(&file, "s3cr3t-p4ss\n").unwrap();
        let text = MINIMAL.replace(
            "${PG_URL}",
            &format!("postgres://sluice:${{file:{}}}@db:5432/app", file.display()),
        );
        let config = PipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
        assert_eq!(
            config.postgres().url,
            "postgres://sluice:s3cr3t-p4ss@db:5432/app"
        );
        let missing = MINIMAL.replace("${PG_URL}", "${file:/no/such/secret}");
        let problems = issues(&missing);
        assert_eq!(problems[0].key, "source.postgres.url");
        assert!(
            problems[0]
                .problem
                .contains("cannot read the secret file /no/such/secret"),
            "{problems:?}"
        );
        let unterminated = MINIMAL.replace("${PG_URL}", "postgres://u:hunter2@db/${DB");
        let problems = issues(&unterminated);
        assert!(!problems[0].problem.contains("hunter2"), "{problems:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_type_names_the_key() {
        let text = format!("{MINIMAL}\n[delivery]\nmax_in_flight_bytes = \"lots\"\n");
        let issues = issues(&text);
        assert_eq!(issues[0].key, "delivery.max_in_flight_bytes");
    }

    #[test]
    fn missing_variable_names_the_key() {
        let text = MINIMAL.replace("${PG_URL}", "${NOPE_NOT_SET}");
        let issues = issues(&text);
        assert_eq!(issues[0].key, "source.postgres.url");
        assert!(issues[0].problem.contains("NOPE_NOT_SET"));
    }

    #[test]
    fn rules_are_all_reported() {
        let text = MINIMAL.replace("schemas = [\"public\"]", "tables = [\"nodot\"]")
            + "\n[delivery]\non_permanent_error = \"dead_letter\"\n[admin]\nlisten = \"localhost\"\n";
        let keys: Vec<_> = issues(&text).into_iter().map(|i| i.key).collect();
        assert_eq!(
            keys,
            [
                "source.postgres.tables[0]",
                "delivery.dead_letter_topic",
                "admin.listen"
            ]
        );
    }

    #[test]
    fn row_filters_name_the_key_and_the_expected_form() {
        let ok = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\nrow_filters = { \"public.orders\" = \"status <> 'dr''aft;' AND (id > 0)\" }",
        );
        let config = PipelineConfig::from_toml(&ok, "test.toml", &env).unwrap();
        assert_eq!(
            config.postgres().row_filter("public.orders"),
            Some("status <> 'dr''aft;' AND (id > 0)")
        );
        let bad = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\nrow_filters = { \"orders\" = \"x > 1\", \"other.t\" = \"x > 1\", \"public.a\" = \"x > 1); DROP TABLE t; --\", \"public.b\" = \" \", \"public.c\" = \"(x > 1\" }",
        );
        let issues = issues(&bad);
        let keys: Vec<_> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "source.postgres.row_filters.\"orders\"",
                "source.postgres.row_filters.\"other.t\"",
                "source.postgres.row_filters.\"public.a\"",
                "source.postgres.row_filters.\"public.b\"",
                "source.postgres.row_filters.\"public.c\"",
            ],
            "{issues:?}"
        );
        assert!(issues[0].problem.contains("expected \"schema.table\""));
        assert!(issues[1].problem.contains("not captured"));
        assert!(issues[2].problem.contains("')' without"), "{issues:?}");
        assert!(issues[3].problem.contains("empty"));
        assert!(issues[4].problem.contains("'(' without"));
    }

    #[test]
    fn expansion() {
        let env = |name: &str| (name == "A").then(|| "x".to_owned());
        assert_eq!(expand("a${A}b", &env).unwrap(), "axb");
        assert_eq!(expand("${B:-d}", &env).unwrap(), "d");
        assert_eq!(expand("$$1 $x", &env).unwrap(), "$1 $x");
        assert!(expand("${A", &env).is_err());
        assert!(expand("${B}", &env).is_err());
    }
}
