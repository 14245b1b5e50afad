//! `[source.postgres]`: the PostgreSQL source's section of a pipeline file, its defaults and
//! its rules. The file around it (`name`, `[kafka]`, `[delivery]`, …) and the loading steps
//! are [`crate::config`]'s; [`PgPipelineConfig`] is a whole PostgreSQL → Kafka pipeline file.
//!
//! Defaults live in `DEFAULT_*` constants and nowhere else. Field names carry their units.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::config::{
    ConfigIssue, PipelineConfig, SourceSection, glob_matches, is_topic_name, parse_table_name,
};

/// Default interval between standby status updates (checkpoints) sent to PostgreSQL.
pub const DEFAULT_STATUS_INTERVAL_MS: u64 = 1_000;
/// Default interval between heartbeat messages written to the WAL; 0 disables them.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 10_000;
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
/// Default interval between two checks of the WAL the slot retains against `wal_budget`.
pub const DEFAULT_WAL_BUDGET_CHECK_INTERVAL_MS: u64 = 10_000;
/// The prefix of sluice's own heartbeat messages in the WAL.
pub const HEARTBEAT_MESSAGE_PREFIX: &str = "sluice.heartbeat";

/// A PostgreSQL → Kafka pipeline file.
pub type PgPipelineConfig = PipelineConfig<PostgresSourceConfig>;

/// `[source.postgres]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSourceConfig {
    /// A `postgres://user:password@host:port/db` URL (or a key=value connection string).
    pub url: String,
    /// libpq's connection parameters as keys of this section, the same as in the URL (a key
    /// set in both places must agree): see [`PostgresSourceConfig::connection_string`].
    pub sslmode: Option<String>,
    /// `sslrootcert`: the CA file, or `system` for the OS trust store.
    pub sslrootcert: Option<String>,
    /// `sslcert`: the client certificate file.
    pub sslcert: Option<String>,
    /// `sslkey`: the client key file (not group- or world-readable, as libpq checks).
    pub sslkey: Option<String>,
    /// `sslsni`: `1` (default) or `0`.
    pub sslsni: Option<String>,
    /// `channel_binding`: `disable`, `prefer` (default) or `require`.
    pub channel_binding: Option<String>,
    /// `passfile`: the password file (default `~/.pgpass`).
    pub passfile: Option<String>,
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
    /// The most WAL the slot may retain on the server (`pg_current_wal_lsn() - restart_lsn`):
    /// bytes, or a string with a unit (`"10GiB"`); 0 (default) sets no budget. Warnings at 50 %
    /// and 80 % of it, and `wal_budget_action` at 100 % (see
    /// [`super::wal_budget`]).
    #[serde(default, deserialize_with = "crate::config::deserialize_byte_size")]
    pub wal_budget: u64,
    /// What happens when the slot retains `wal_budget` or more.
    #[serde(default)]
    pub wal_budget_action: WalBudgetAction,
    /// How often the retained WAL is checked against `wal_budget` (on a connection of its own,
    /// beside the stream).
    #[serde(default = "default_wal_budget_check_interval_ms")]
    pub wal_budget_check_interval_ms: u64,
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
    /// The most rows fetched per round trip while snapshotting (a worker asks for about
    /// 512 KiB of values per fetch, within this).
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
    /// How a partitioned table is captured: `"root"` (one table and topic under the root's
    /// name; the default on PostgreSQL 13 or later) or `"leaves"` (each partition its own
    /// table and topic; the default before 13). See [`PartitionMode`].
    pub partitions: Option<PartitionMode>,
    /// Capture stored generated columns (PostgreSQL 18's `publish_generated_columns = stored`
    /// on the publication; the snapshot reads them too). Off by default, as Debezium, whose
    /// events leave them out; refused on older servers.
    #[serde(default)]
    pub publish_generated_columns: bool,
    /// Make the slot a failover slot (PostgreSQL 17+: `FAILOVER`), which standbys with
    /// `sync_replication_slots = on` keep a copy of, so that the pipeline resumes on a promoted
    /// standby. Default: on where the server has it; `true` on an older server is refused.
    pub failover: Option<bool>,
    /// The primary's URL when `url` is a physical standby (logical decoding on a standby,
    /// PostgreSQL 16+): what a standby cannot do goes there — creating or altering the
    /// publication and the signal table, `pg_log_standby_snapshot()` so that the slot's
    /// creation on the standby need not wait for the primary's next running-xacts record,
    /// heartbeats, incremental snapshots (their watermarks are WAL writes) — and the standby's
    /// replay lag is measured against its WAL. The initial snapshot and the stream read the
    /// standby only. The section's TLS keys (`sslmode`, …) apply to both URLs.
    pub primary_url: Option<String>,
}

/// `source.postgres.partitions`: how a declaratively partitioned table is captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionMode {
    /// The partitioned table is one logical table: the publication publishes its partitions'
    /// changes under the root (`publish_via_partition_root = true`, PostgreSQL 13 or later),
    /// its rows are snapshotted once by reading the root, and every change of every
    /// partition, present or future, goes to the root's topic under the root's key. The
    /// partitions are not captured on their own.
    Root,
    /// Each partition (leaf) is a table of its own with its own topic; the partitioned tables
    /// themselves are not captured (a partitioned table named in `tables` stands for its
    /// leaves).
    Leaves,
}

impl PartitionMode {
    /// The mode the pipeline file asks for on a server of major `version`: the configured one,
    /// or `Root` on 13 or later and `Leaves` before.
    ///
    /// # Errors
    ///
    /// `Root` asked for on a server older than 13 (no `publish_via_partition_root`): the
    /// key and the fix.
    pub fn resolve(configured: Option<Self>, version: u32) -> Result<Self, (String, String)> {
        match configured {
            Some(Self::Root) if version < 13 => Err((
                format!(
                    "source.postgres.partitions = \"root\" needs PostgreSQL 13 or later (publish_via_partition_root); the server is {version}"
                ),
                "set source.postgres.partitions = \"leaves\" (each partition its own topic), or upgrade PostgreSQL".to_owned(),
            )),
            Some(mode) => Ok(mode),
            None if version >= 13 => Ok(Self::Root),
            None => Ok(Self::Leaves),
        }
    }

    /// The value as written in the pipeline file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::Leaves => "leaves",
        }
    }
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

    /// Whether a table is excluded by one of its rule names (`schema.table`, then under
    /// `partitions = "leaves"` the partitioned tables above it: excluding a partitioned
    /// table excludes its partitions).
    pub fn excludes_any(&self, names: &[String]) -> bool {
        names.iter().any(|name| self.excludes_table(name))
    }

    /// The row filter of a table by its rule names (see [`Self::excludes_any`]): the filters
    /// of the table and of the partitioned tables above it, each in parentheses, joined by
    /// `AND` (every one holds).
    pub fn row_filter_of(&self, names: &[String]) -> Option<String> {
        let filters: Vec<&str> = names.iter().filter_map(|n| self.row_filter(n)).collect();
        match filters.as_slice() {
            [] => None,
            [one] => Some((*one).to_owned()),
            many => Some(
                many.iter()
                    .map(|f| format!("({f})"))
                    .collect::<Vec<_>>()
                    .join(" AND "),
            ),
        }
    }
}

/// When to snapshot (shared with the MySQL source).
pub use crate::config::SnapshotMode;

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
    /// The columns written as headers, each `column` or `column:header` (Debezium's router
    /// writes its event id column as `id`: `["id"]`); unset: every column but the three
    /// above, each under its own name.
    pub headers: Option<Vec<String>>,
}

impl OutboxConfig {
    /// The header columns as (column, header name), when they are listed.
    pub fn header_columns(&self) -> Option<Vec<(&str, &str)>> {
        self.headers.as_ref().map(|list| {
            list.iter()
                .map(|entry| match entry.split_once(':') {
                    Some((column, header)) => (column.trim(), header.trim()),
                    None => (entry.trim(), entry.trim()),
                })
                .collect()
        })
    }
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

/// `source.postgres.wal_budget_action`: what happens when the slot retains `wal_budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WalBudgetAction {
    /// Keep warning (log, `/health`, metrics) and keep the slot: the server's disk is the
    /// operator's to protect (e.g. with `max_slot_wal_keep_size`).
    #[default]
    Alert,
    /// Stop streaming, drop the slot so the server frees its WAL, record that a re-snapshot is
    /// needed and stop the pipeline; the next run creates the slot anew and republishes every
    /// captured table (requires `snapshot = "when_needed"`).
    DropSlot,
}

impl WalBudgetAction {
    /// The action's name in the pipeline file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alert => "alert",
            Self::DropSlot => "drop_slot",
        }
    }
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

impl PostgresSourceConfig {
    /// The connection parameters given as keys of the section, by their libpq names.
    fn parameter_keys(&self) -> [(&'static str, Option<&str>); 7] {
        [
            ("sslmode", self.sslmode.as_deref()),
            ("sslrootcert", self.sslrootcert.as_deref()),
            ("sslcert", self.sslcert.as_deref()),
            ("sslkey", self.sslkey.as_deref()),
            ("sslsni", self.sslsni.as_deref()),
            ("channel_binding", self.channel_binding.as_deref()),
            ("passfile", self.passfile.as_deref()),
        ]
    }

    /// The connection string sluice connects with: `url` and the connection parameters set as
    /// keys of the section (`sslmode = "verify-full"` is `?sslmode=verify-full`).
    ///
    /// # Errors
    ///
    /// A parameter set both as a key and in the URL with another value: (the key, the problem).
    pub fn connection_string(&self) -> Result<String, (String, String)> {
        let in_url = url_parameters(&self.url);
        let mut out = self.url.clone();
        let is_url = out.starts_with("postgres://") || out.starts_with("postgresql://");
        for (key, value) in self.parameter_keys() {
            let Some(value) = value else { continue };
            match in_url.iter().find(|(k, _)| k == key) {
                Some((_, there)) if there == value => continue,
                Some((_, there)) => {
                    return Err((
                        format!("source.postgres.{key}"),
                        format!(
                            "is `{value}` but source.postgres.url sets {key}={there}: set it in one place"
                        ),
                    ));
                }
                None => {}
            }
            if is_url {
                out.push(if out.contains('?') { '&' } else { '?' });
                out.push_str(key);
                out.push('=');
                out.push_str(&percent_encode(value));
            } else {
                let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                out.push_str(&format!(" {key}='{quoted}'"));
            }
        }
        Ok(out)
    }

    /// [`PostgresSourceConfig::connection_string`] of a validated section (where the keys and
    /// the URL agree).
    pub fn connection(&self) -> String {
        self.connection_string()
            .unwrap_or_else(|_| self.url.clone())
    }

    /// `primary_url` with the section's connection parameters, as
    /// [`PostgresSourceConfig::connection_string`] makes `url`'s.
    ///
    /// # Errors
    ///
    /// A parameter set both as a key and in `primary_url` with another value: (the key, the
    /// problem).
    pub fn primary_connection_string(&self) -> Option<Result<String, (String, String)>> {
        let primary = self.primary_url.as_ref()?;
        let as_url = Self {
            url: primary.clone(),
            ..self.clone()
        };
        Some(as_url.connection_string().map_err(|(key, problem)| {
            (
                key,
                problem.replace("source.postgres.url", "source.postgres.primary_url"),
            )
        }))
    }

    /// [`PostgresSourceConfig::primary_connection_string`] of a validated section.
    pub fn primary_connection(&self) -> Option<String> {
        self.primary_connection_string()
            .map(|c| c.unwrap_or_else(|_| self.primary_url.clone().unwrap_or_default()))
    }

    /// The replication slot's name: `slot`, default `sluice_<pipeline name>`.
    pub fn slot_name(&self, pipeline: &str) -> String {
        self.slot
            .clone()
            .unwrap_or_else(|| format!("sluice_{pipeline}"))
    }

    /// The publication's name: `publication`, default `sluice_<pipeline name>`.
    pub fn publication_name(&self, pipeline: &str) -> String {
        self.publication
            .clone()
            .unwrap_or_else(|| format!("sluice_{pipeline}"))
    }
}

impl PgPipelineConfig {
    /// The replication slot's name.
    pub fn slot_name(&self) -> String {
        self.source.slot_name(&self.name)
    }

    /// The publication's name.
    pub fn publication_name(&self) -> String {
        self.source.publication_name(&self.name)
    }
}

impl SourceSection for PostgresSourceConfig {
    const KEY: &'static str = "postgres";
    const ELECTS_ACTIVE_INSTANCE: bool = true;
    const SUPPORTS_EXACTLY_ONCE: bool = true;

    /// Debezium's outbox `EventRouter` named as the chain's first transform becomes the
    /// outbox router (`outbox`), as `[source.postgres.outbox]` would write it.
    fn adopt_transforms(
        &mut self,
        transforms: &mut crate::transform::TransformsConfig,
        predicates: &mut crate::transform::PredicatesConfig,
        topic_prefix: &str,
    ) -> Vec<ConfigIssue> {
        use crate::transform::config_outbox::{outbox_table, take_event_router};
        let settings = match take_event_router(transforms, predicates) {
            Ok(Some(settings)) => settings,
            Ok(None) => return Vec::new(),
            Err(issues) => return issues,
        };
        let key = format!("transforms.{}", settings.name);
        if self.outbox.is_some() {
            return vec![ConfigIssue {
                key,
                problem: "an EventRouter and [source.postgres.outbox] both: keep one (they are the same router)".into(),
            }];
        }
        let table = match outbox_table(&settings, topic_prefix, &self.tables) {
            Ok(table) => table,
            Err(problem) => return vec![ConfigIssue { key, problem }],
        };
        // The outbox table gets no change-event topic of its own: routed only.
        self.tables.retain(|t| *t != table);
        self.outbox = Some(OutboxConfig {
            table,
            aggregate_type_column: settings.aggregate_type_column,
            aggregate_id_column: settings.aggregate_id_column,
            payload_column: settings.payload_column,
            topic: settings.topic,
            headers: Some(settings.headers),
        });
        Vec::new()
    }

    fn validate(&self) -> Vec<ConfigIssue> {
        let pg = self;
        let mut issues = Vec::new();
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
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
        if pg.wal_budget > 0 && !(100..=3_600_000).contains(&pg.wal_budget_check_interval_ms) {
            issue(
                "source.postgres.wal_budget_check_interval_ms",
                format!(
                    "{} is out of range: expected 100 to 3600000 (milliseconds between checks of the retained WAL)",
                    pg.wal_budget_check_interval_ms
                ),
            );
        }
        if pg.wal_budget_action == WalBudgetAction::DropSlot {
            if pg.wal_budget == 0 {
                issue(
                    "source.postgres.wal_budget",
                    "wal_budget_action = \"drop_slot\" needs a budget: expected a size such as wal_budget = \"10GiB\"".into(),
                );
            }
            if pg.snapshot != SnapshotMode::WhenNeeded {
                issue(
                    "source.postgres.wal_budget_action",
                    format!(
                        "\"drop_slot\" with snapshot = \"{}\": the changes the dropped slot held would be missing; expected snapshot = \"when_needed\" (the next run republishes the captured tables), or wal_budget_action = \"alert\"",
                        match pg.snapshot {
                            SnapshotMode::Initial => "initial",
                            SnapshotMode::Never => "never",
                            SnapshotMode::InitialOnly => "initial_only",
                            SnapshotMode::WhenNeeded => "when_needed",
                        }
                    ),
                );
            }
        }
        // The connection parameters (sslmode, certificates, …) as the source reads them.
        match pg.connection_string() {
            Err((key, problem)) => issue(&key, problem),
            Ok(connection) => {
                if let Err(error) = crate::pg_connect::PgConnectConfig::parse(&connection) {
                    issue("source.postgres.url", error.to_string());
                }
            }
        }
        match pg.primary_connection_string() {
            None => {}
            Some(Err((key, problem))) => issue(&key, problem),
            Some(Ok(connection)) => {
                if let Err(error) = crate::pg_connect::PgConnectConfig::parse(&connection) {
                    issue(
                        "source.postgres.primary_url",
                        format!(
                            "{error}: expected postgres://user[:password]@primary-host[:port]/database"
                        ),
                    );
                }
            }
        }
        issues
    }
}

/// The `key=value` parameters of a connection string (URL query or key=value form), decoded.
fn url_parameters(url: &str) -> Vec<(String, String)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((_, query)) = url.split_once('?') else {
            return Vec::new();
        };
        query
            .split('&')
            .filter_map(|part| part.split_once('='))
            .map(|(k, v)| {
                (
                    crate::pg_connect::percent_decode(k),
                    crate::pg_connect::percent_decode(v),
                )
            })
            .collect()
    } else {
        url.split_whitespace()
            .filter_map(|token| token.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim_matches('\'').to_owned()))
            .collect()
    }
}

/// RFC 3986 percent-encoding of a query value (everything but unreserved characters); a few
/// lines, not worth a crate.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
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
const fn default_wal_budget_check_interval_ms() -> u64 {
    DEFAULT_WAL_BUDGET_CHECK_INTERVAL_MS
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

/// Checks that a row filter is one SQL expression that cannot end the `WHERE (…)` it is put
/// in (see [`crate::sql::check_condition`]).
fn check_row_filter(filter: &str) -> Result<(), &'static str> {
    crate::sql::check_condition(crate::sql::SqlDialect::Postgres, filter)
}

fn is_slot_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigError, DEFAULT_MAX_IN_FLIGHT_BYTES};

    /// The example reads EVENT_FORMAT (unset: JSON, no registry needed) and
    /// SCHEMA_REGISTRY_URL; Avro without a registry URL is refused naming the key.
    #[test]
    fn the_example_picks_its_event_format_from_the_environment() {
        use crate::event::EventFormat;
        let text = include_str!("../../../../../examples/postgres-to-kafka.toml");
        let load = |format: Option<&'static str>, registry: Option<&'static str>| {
            PgPipelineConfig::from_toml(text, "example", &move |name: &str| match name {
                "PG_URL" => Some("postgres://u@127.0.0.1/db".to_owned()),
                "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
                "EVENT_FORMAT" => format.map(str::to_owned),
                "SCHEMA_REGISTRY_URL" => registry.map(str::to_owned),
                _ => None,
            })
        };
        let json = load(None, None).unwrap();
        assert_eq!(json.kafka.events.value_format(), EventFormat::Json);
        let avro = load(Some("avro"), Some("http://127.0.0.1:8081")).unwrap();
        assert_eq!(avro.kafka.events.key_format(), EventFormat::Avro);
        assert_eq!(
            avro.schema_registry.unwrap().url.0,
            ["http://127.0.0.1:8081"]
        );
        let ConfigError::Invalid { issues, .. } = load(Some("avro"), None).unwrap_err() else {
            panic!("not an invalid-config error");
        };
        assert_eq!(issues[0].key, "schema_registry.url", "{issues:?}");
    }

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
        match PgPipelineConfig::from_toml(text, "test.toml", &env) {
            Err(ConfigError::Invalid { issues, .. }) => issues,
            other => panic!("expected invalid config, got {other:?}"),
        }
    }

    #[test]
    fn the_wal_budget_takes_sizes_and_its_mistakes_name_the_key() {
        let with = |extra: &str| {
            MINIMAL.replace(
                "schemas = [\"public\"]",
                &format!("schemas = [\"public\"]\n{extra}"),
            )
        };
        let config = PgPipelineConfig::from_toml(MINIMAL, "test.toml", &env).unwrap();
        assert_eq!(config.source.wal_budget, 0, "no budget by default");
        assert_eq!(config.source.wal_budget_action, WalBudgetAction::Alert);
        assert_eq!(
            config.source.wal_budget_check_interval_ms,
            DEFAULT_WAL_BUDGET_CHECK_INTERVAL_MS
        );
        let text = with(
            "wal_budget = \"10GiB\"\nwal_budget_action = \"drop_slot\"\nsnapshot = \"when_needed\"",
        );
        let config = PgPipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
        assert_eq!(config.source.wal_budget, 10 << 30);
        assert_eq!(config.source.wal_budget_action, WalBudgetAction::DropSlot);
        let config =
            PgPipelineConfig::from_toml(&with("wal_budget = 4096"), "test.toml", &env).unwrap();
        assert_eq!(config.source.wal_budget, 4096);

        let one = |extra: &str| {
            let found = issues(&with(extra));
            assert_eq!(found.len(), 1, "{found:?}");
            found.into_iter().next().unwrap()
        };
        let issue = one("wal_budget = \"10 gigs\"");
        assert_eq!(issue.key, "source.postgres.wal_budget");
        assert!(
            issue.problem.contains("expected a size like \"128MiB\""),
            "{issue:?}"
        );
        let issue = one("wal_budget_action = \"panic\"");
        assert_eq!(issue.key, "source.postgres.wal_budget_action");
        assert!(
            issue
                .problem
                .starts_with("unknown variant `panic`, expected `alert` or `drop_slot`"),
            "{issue:?}"
        );
        let issue = one("wal_budget_action = \"drop_slot\"\nsnapshot = \"when_needed\"");
        assert_eq!(issue.key, "source.postgres.wal_budget");
        assert!(issue.problem.contains("needs a budget"), "{issue:?}");
        let issue = one("wal_budget = \"1GiB\"\nwal_budget_action = \"drop_slot\"");
        assert_eq!(issue.key, "source.postgres.wal_budget_action");
        assert!(
            issue.problem.contains("snapshot = \"initial\"")
                && issue
                    .problem
                    .contains("expected snapshot = \"when_needed\""),
            "{issue:?}"
        );
        let issue = one("wal_budget = \"1GiB\"\nwal_budget_check_interval_ms = 5");
        assert_eq!(issue.key, "source.postgres.wal_budget_check_interval_ms");
        assert!(
            issue.problem.contains("expected 100 to 3600000"),
            "{issue:?}"
        );
    }

    #[test]
    fn minimal_file_gets_defaults() {
        let config = PgPipelineConfig::from_toml(MINIMAL, "test.toml", &env).unwrap();
        assert_eq!(config.kafka.brokers, "127.0.0.1:9092");
        assert_eq!(config.kafka.topic_prefix, "sluice");
        assert_eq!(config.slot_name(), "sluice_orders");
        assert_eq!(config.publication_name(), "sluice_orders");
        assert_eq!(
            config.delivery.in_flight_bytes(),
            DEFAULT_MAX_IN_FLIGHT_BYTES
        );
        assert_eq!(config.delivery.memory_limit, 128 * 1024 * 1024);
        assert!(config.kafka.tombstones_on_delete());
    }

    #[test]
    fn avro_with_transforms_runs_its_sources_in_json_with_schemas() {
        use crate::event::EventFormat;
        let file = format!(
            "{MINIMAL}\n[kafka.events]\nkey_format = \"json\"\nvalue_format = \"avro\"\n\
             [schema_registry]\nurl = \"http://127.0.0.1:1\"\n[transforms]\nchain = \"unwrap\"\n\
             [transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n"
        );
        let loaded = PgPipelineConfig::from_toml(&file, "test.toml", &env).unwrap();
        let run = loaded.clone().for_run();
        // The sources encode the value in its Connect form, the key as the file says; what is
        // written is still the file's.
        assert_eq!(run.kafka.events.key_format(), EventFormat::Json);
        assert_eq!(
            run.kafka.events.value_format(),
            EventFormat::JsonWithSchemas
        );
        assert!(!run.kafka.events.uses_avro());
        assert_eq!(run.output_events(), &loaded.kafka.events);
        assert_eq!(run.clone().for_run().output_events(), &loaded.kafka.events);
        // Without [transforms]: unchanged (the direct Avro writers).
        let plain = file.split("[transforms]").next().unwrap().to_owned();
        let plain = PgPipelineConfig::from_toml(&plain, "test.toml", &env).unwrap();
        assert_eq!(plain.clone().for_run().kafka.events, plain.kafka.events);
        assert!(plain.for_run().converted_events.is_none());
    }

    #[test]
    fn transforms_load_at_the_top_level_and_their_mistakes_name_the_key() {
        let chain = "\n[transforms]\nchain = \"unwrap,route\"\n[transforms.unwrap]\n\
            type = \"io.debezium.transforms.ExtractNewRecordState\"\n[transforms.route]\n\
            type = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
            regex = '([^.]+)\\.([^.]+)\\.([^.]+)'\nreplacement = \"$1.$3\"\n";
        let config =
            PgPipelineConfig::from_toml(&format!("{MINIMAL}{chain}"), "test.toml", &env).unwrap();
        assert!(config.transform_chain().unwrap().is_some());
        assert_eq!(
            config.routed_topics(&["sluice.public.orders".to_owned()]),
            ["sluice.orders"]
        );
        let bad = issues(&format!(
            "{MINIMAL}{chain}\"delete.handling.mode\" = \"nope\"\n"
        ));
        assert_eq!(
            bad[0].key, "transforms.route.\"delete.handling.mode\"",
            "{bad:?}"
        );
        // Transforms apply with exactly-once delivery too.
        let eos = PgPipelineConfig::from_toml(
            &format!("{MINIMAL}{chain}[delivery]\nguarantee = \"exactly_once\"\n"),
            "test.toml",
            &env,
        );
        assert!(eos.is_ok(), "{eos:?}");
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
        let config = PgPipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
        assert_eq!(
            config.source.url,
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
    fn missing_variable_names_the_key() {
        let text = MINIMAL.replace("${PG_URL}", "${NOPE_NOT_SET}");
        let issues = issues(&text);
        assert_eq!(issues[0].key, "source.postgres.url");
        assert!(issues[0].problem.contains("NOPE_NOT_SET"));
    }

    #[test]
    fn exactly_once_refuses_what_cannot_hold_it_by_key() {
        let ok = format!("{MINIMAL}\n[delivery]\nguarantee = \"exactly_once\"\n");
        let config = PgPipelineConfig::from_toml(&ok, "test.toml", &env).unwrap();
        assert_eq!(
            config.delivery.guarantee,
            crate::config::DeliveryGuarantee::ExactlyOnce
        );
        assert_eq!(config.delivery.transaction_interval_ms, 100);
        let text = MINIMAL.to_owned()
            + "\n[kafka.producer]\n\"transactional.id\" = \"x\"\n\"message.timeout.ms\" = \"0\"\n"
            + "\n[delivery]\nguarantee = \"exactly_once\"\non_permanent_error = \"dead_letter\"\ndead_letter_topic = \"dlq\"\ntransaction_interval_ms = 0\n";
        let keys: Vec<_> = issues(&text).into_iter().map(|i| i.key).collect();
        assert_eq!(
            keys,
            [
                "delivery.on_permanent_error",
                "delivery.transaction_interval_ms",
                "kafka.producer.\"transactional.id\"",
                "kafka.producer.\"message.timeout.ms\"",
            ]
        );
    }

    #[test]
    fn schema_change_events_are_refused_under_avro() {
        let topic = "schema_changes_topic = \"ddl\"\n";
        let text = MINIMAL.replace("[kafka]\n", &format!("[kafka]\n{topic}"))
            + "\n[kafka.events]\nvalue_format = \"avro\"\n[schema_registry]\nurl = \"http://r:8081\"\n";
        let found = issues(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "kafka.schema_changes_topic");
        assert!(found[0].problem.contains("Avro"), "{}", found[0].problem);
        let json = MINIMAL.replace("[kafka]\n", &format!("[kafka]\n{topic}"));
        assert!(PgPipelineConfig::from_toml(&json, "test.toml", &env).is_ok());
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
        let config = PgPipelineConfig::from_toml(&ok, "test.toml", &env).unwrap();
        assert_eq!(
            config.source.row_filter("public.orders"),
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
    fn partitions_default_to_the_root_where_the_server_can_publish_via_it() {
        let config = PgPipelineConfig::from_toml(MINIMAL, "test.toml", &env).unwrap();
        assert_eq!(config.source.partitions, None);
        assert_eq!(PartitionMode::resolve(None, 15), Ok(PartitionMode::Root));
        assert_eq!(PartitionMode::resolve(None, 12), Ok(PartitionMode::Leaves));
        assert_eq!(
            PartitionMode::resolve(Some(PartitionMode::Leaves), 16),
            Ok(PartitionMode::Leaves)
        );
        let (problem, fix) = PartitionMode::resolve(Some(PartitionMode::Root), 12).unwrap_err();
        assert!(
            problem.starts_with("source.postgres.partitions = \"root\" needs PostgreSQL 13"),
            "{problem}"
        );
        assert!(fix.contains("partitions = \"leaves\""), "{fix}");
        let text = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\npartitions = \"leaves\"",
        );
        let config = PgPipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
        assert_eq!(config.source.partitions, Some(PartitionMode::Leaves));
        let text = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\npartitions = \"all\"",
        );
        let issue = issues(&text).into_iter().next().unwrap();
        assert_eq!(issue.key, "source.postgres.partitions");
        assert!(
            issue
                .problem
                .starts_with("unknown variant `all`, expected `root` or `leaves`"),
            "{issue:?}"
        );
    }

    #[test]
    fn primary_url_is_checked_as_url_is_and_takes_the_section_s_tls_keys() {
        let with = |extra: &str| {
            MINIMAL.replace(
                "schemas = [\"public\"]",
                &format!("schemas = [\"public\"]\n{extra}"),
            )
        };
        let found = issues(&with("primary_url = \"postgres://u@h/db?sslmode=bogus\""));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "source.postgres.primary_url");
        assert!(
            found[0]
                .problem
                .contains("expected postgres://user[:password]@primary-host[:port]/database"),
            "{found:?}"
        );
        let found = issues(&with(
            "sslmode = \"require\"\nprimary_url = \"postgres://u@h/db?sslmode=disable\"",
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "source.postgres.sslmode");
        assert!(
            found[0]
                .problem
                .contains("source.postgres.primary_url sets sslmode=disable"),
            "{found:?}"
        );
        let config = PgPipelineConfig::from_toml(
            &with("sslmode = \"require\"\nprimary_url = \"postgres://u@primary/db\""),
            "test.toml",
            &env,
        )
        .expect("valid config");
        assert_eq!(
            config.source.primary_connection().as_deref(),
            Some("postgres://u@primary/db?sslmode=require")
        );
    }

    #[test]
    fn today_s_errors_for_the_section_s_keys_and_values() {
        let one = |extra: &str| {
            let text = MINIMAL.replace(
                "schemas = [\"public\"]",
                &format!("schemas = [\"public\"]\n{extra}"),
            );
            let found = issues(&text);
            assert_eq!(found.len(), 1, "{found:?}");
            found.into_iter().next().unwrap()
        };
        let issue = one("bogus = 1");
        assert_eq!(issue.key, "source.postgres.bogus");
        assert!(
            issue.problem.starts_with(
                "unknown field `bogus`, expected one of `url`, `sslmode`, `sslrootcert`"
            ),
            "{issue:?}"
        );
        let issue = one("snapshot = \"sometimes\"");
        assert_eq!(issue.key, "source.postgres.snapshot");
        assert!(issue.problem.starts_with(
            "unknown variant `sometimes`, expected one of `initial`, `never`, `initial_only`, `when_needed`"
        ));
        let issue = one("[source.postgres.columns]\nexclud = []");
        assert_eq!(issue.key, "source.postgres.columns.exclud");
        assert!(
            issue
                .problem
                .starts_with("unknown field `exclud`, expected one of `exclude`, `hash`, `mask`")
        );
        let issue = issues(&MINIMAL.replace("[source.postgres]", "[source.mysql]"))
            .into_iter()
            .next()
            .unwrap();
        assert_eq!(issue.key, "source");
        assert!(
            issue
                .problem
                .starts_with("unknown variant `mysql`, expected `postgres`")
        );
        // The connection parameters as the source reads them.
        let text = MINIMAL.replace("${PG_URL}", "postgres://u@db/app?sslmode=sometimes");
        let issue = issues(&text).into_iter().next().unwrap();
        assert_eq!(issue.key, "source.postgres.url");
        assert!(
            issue.problem.contains("sslmode is `sometimes`"),
            "{issue:?}"
        );
    }

    #[test]
    fn connection_parameters_can_be_keys_of_the_section() {
        use crate::pg_connect::{PgConnectConfig, RootCert, SslMode};
        let text = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\nsslmode = \"verify-full\"\nsslrootcert = \"/etc/pg ca/root.crt\"\nchannel_binding = \"require\"",
        );
        let config = PgPipelineConfig::from_toml(&text, "test.toml", &env).unwrap();
        let connection = config.source.connection();
        assert_eq!(
            connection,
            "postgres://postgres@127.0.0.1:5432/postgres?sslmode=verify-full&sslrootcert=/etc/pg%20ca/root.crt&channel_binding=require"
        );
        let parsed = PgConnectConfig::parse(&connection).unwrap();
        assert_eq!(parsed.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            parsed.tls.root_cert,
            Some(RootCert::File("/etc/pg ca/root.crt".into()))
        );
        assert_eq!(
            parsed.pg.get_channel_binding(),
            tokio_postgres::config::ChannelBinding::Require
        );
        // The key=value form takes them as key=value pairs.
        let mut source = config.source.clone();
        source.url = "host=db dbname=app user=sluice".to_owned();
        source.sslrootcert = None;
        source.channel_binding = None;
        assert_eq!(
            source.connection(),
            "host=db dbname=app user=sluice sslmode='verify-full'"
        );
        let parsed = PgConnectConfig::parse(&source.connection()).unwrap();
        assert_eq!(parsed.tls.mode, SslMode::VerifyFull);
        // The same value in both places is fine; another is named with both.
        let both = text.replace(
            "${PG_URL}",
            "postgres://postgres@127.0.0.1:5432/postgres?sslmode=verify-full",
        );
        assert!(PgPipelineConfig::from_toml(&both, "test.toml", &env).is_ok());
        let conflict = text.replace(
            "${PG_URL}",
            "postgres://postgres@127.0.0.1:5432/postgres?sslmode=require",
        );
        let issue = issues(&conflict).into_iter().next().unwrap();
        assert_eq!(issue.key, "source.postgres.sslmode");
        assert!(
            issue
                .problem
                .contains("source.postgres.url sets sslmode=require")
                && issue.problem.contains("set it in one place"),
            "{issue:?}"
        );
        // A key's value is checked as the URL's would be.
        let bad = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\nsslmode = \"sometimes\"",
        );
        let issue = issues(&bad).into_iter().next().unwrap();
        assert!(
            issue.problem.contains("sslmode is `sometimes`"),
            "{issue:?}"
        );
    }
    #[test]
    fn debeziums_event_options_by_their_names() {
        let with = |section: &str| format!("{MINIMAL}\n[kafka.events]\n{section}\n");
        let config = PgPipelineConfig::from_toml(
            &with(
                "time_precision_mode = \"adaptive_time_microseconds\"\n\
                 binary_handling_mode = \"base64-url-safe\"\n\
                 interval_handling_mode = \"string\"\n\
                 hstore_handling_mode = \"map\"\n\
                 decimal_handling_mode = \"double\"\n\
                 money_fraction_digits = 4\n\
                 skipped_operations = \"c,d\"\n\
                 tombstones_on_delete = false\n\
                 unavailable_value_placeholder = \"n/a\"",
            ),
            "test.toml",
            &env,
        )
        .unwrap();
        let events = &config.kafka.events;
        assert_eq!(
            events.time_precision_mode,
            crate::event::TimePrecisionMode::AdaptiveTimeMicroseconds
        );
        assert_eq!(
            events.binary_handling_mode,
            crate::event::BinaryHandlingMode::Base64UrlSafe
        );
        assert_eq!(events.money_fraction_digits, 4);
        assert!(events.skipped_operations.create && events.skipped_operations.delete);
        assert!(!events.skipped_operations.truncate);
        assert!(!config.kafka.tombstones_on_delete());
        assert_eq!(events.unavailable_value_placeholder, "n/a");

        // Defaults: Debezium's.
        let config = PgPipelineConfig::from_toml(MINIMAL, "test.toml", &env).unwrap();
        assert_eq!(config.kafka.events, crate::event::EventOptions::default());
        assert!(config.kafka.events.skipped_operations.truncate);
        assert_eq!(config.kafka.events.money_fraction_digits, 2);

        // The older name of tombstones_on_delete still works; the two must not disagree.
        let old = MINIMAL.replace("[kafka]", "[kafka]\ntombstones_on_delete = false");
        let config = PgPipelineConfig::from_toml(&old, "test.toml", &env).unwrap();
        assert!(!config.kafka.tombstones_on_delete());
        let both = format!("{old}\n[kafka.events]\ntombstones_on_delete = true\n");
        let issue = issues(&both).remove(0);
        assert_eq!(issue.key, "kafka.tombstones_on_delete");
        assert!(
            issue
                .problem
                .contains("keep only kafka.events.tombstones_on_delete"),
            "{issue:?}"
        );

        // Unknown values: the key and the supported values.
        for (line, key, expected) in [
            (
                "time_precision_mode = \"nanos\"",
                "kafka.events.time_precision_mode",
                "unknown variant `nanos`, expected one of `adaptive`, \
                 `adaptive_time_microseconds`, `connect`",
            ),
            (
                "binary_handling_mode = \"base32\"",
                "kafka.events.binary_handling_mode",
                "unknown variant `base32`, expected one of `bytes`, `base64`, \
                 `base64-url-safe`, `hex`",
            ),
            (
                "decimal_handling_mode = \"float\"",
                "kafka.events.decimal_handling_mode",
                "unknown variant `float`, expected one of `precise`, `string`, `double`",
            ),
            (
                "interval_handling_mode = \"iso\"",
                "kafka.events.interval_handling_mode",
                "unknown variant `iso`, expected `numeric` or `string`",
            ),
            (
                "hstore_handling_mode = \"text\"",
                "kafka.events.hstore_handling_mode",
                "unknown variant `text`, expected `json` or `map`",
            ),
            (
                "skipped_operations = \"c,r\"",
                "kafka.events.skipped_operations",
                "unknown operation \"r\" in \"c,r\": expected a comma-separated list of \
                 `c`, `u`, `d`, `t`, or `none`",
            ),
            (
                "truncate = true",
                "kafka.events.truncate",
                "replaced by Debezium's skipped_operations: write skipped_operations = \"none\"",
            ),
        ] {
            let found = issues(&with(line));
            assert_eq!(found.len(), 1, "{line}: {found:?}");
            assert_eq!(found[0].key, key, "{line}");
            assert!(
                found[0].problem.starts_with(expected),
                "{line}: {:?}",
                found[0].problem
            );
        }
    }
}
