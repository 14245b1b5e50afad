//! `[source.mysql]`: the MySQL/MariaDB source's section of a pipeline file, its defaults and its
//! rules. The file around it (`name`, `[kafka]` with `topic_prefix`, `[delivery]`, …) is
//! [`crate::config`]'s; [`MysqlPipelineConfig`] is a whole MySQL → Kafka pipeline file.

use std::fmt;

use serde::Deserialize;

use crate::config::{ConfigIssue, PipelineConfig, SnapshotMode, SourceSection, glob_matches};

/// Default interval between checkpoints (the watermark's position saved in the state store).
pub const DEFAULT_STATUS_INTERVAL_MS: u64 = 1_000;
/// Default binlog heartbeat period asked of the server (`@master_heartbeat_period`): an idle
/// stream still receives an event this often, and a connection silent for three periods is
/// taken for dead and replaced.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 10_000;
/// Default connections reading snapshot chunks in parallel.
pub const DEFAULT_SNAPSHOT_WORKERS: u32 = 4;
/// Default rows per snapshot chunk.
pub const DEFAULT_SNAPSHOT_CHUNK_ROWS: u32 = 50_000;
/// Default rows per chunk of an incremental snapshot.
pub const DEFAULT_INCREMENTAL_CHUNK_ROWS: u32 = 4096;
/// The databases never captured (the server's own).
pub const SYSTEM_DATABASES: [&str; 4] =
    ["mysql", "sys", "information_schema", "performance_schema"];

/// A MySQL/MariaDB → Kafka pipeline file.
pub type MysqlPipelineConfig = PipelineConfig<MysqlSourceConfig>;

/// `[source.mysql]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSourceConfig {
    /// `mysql://user:password@host:port[/db][?require_ssl=true&…]` (mysql_async's URL
    /// parameters).
    pub url: String,
    /// A PEM file of the CA certificates that sign the server's certificate (a private CA, or a
    /// cloud provider's bundle such as Amazon RDS's): TLS is then required and the server's
    /// chain and host name verified against them, besides the system's roots (the URL's
    /// `verify_ca=false` / `verify_identity=false` still loosen that).
    #[serde(default)]
    pub ssl_ca: Option<std::path::PathBuf>,
    /// The server id sluice registers with as a replica: unique among the server's replicas
    /// (and not the server's own `server_id`).
    pub server_id: u32,
    /// Tables to capture (`database.table` globs, `*` matches any characters); default every
    /// table outside the server's own databases.
    #[serde(default)]
    pub include_tables: Vec<String>,
    /// Tables to leave out (`database.table` globs), e.g. of an included database.
    #[serde(default)]
    pub exclude_tables: Vec<String>,
    /// Interval between checkpoints.
    #[serde(default = "default_status_interval_ms")]
    pub status_interval_ms: u64,
    /// Binlog heartbeat period asked of the server; 0 disables heartbeats (and the check for
    /// a silent connection).
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// When to snapshot the captured tables (`initial`: when there is no saved position).
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// Connections reading snapshot chunks in parallel (1 to 64), each in a transaction of the
    /// same consistent snapshot.
    #[serde(default = "default_snapshot_workers")]
    pub snapshot_workers: u32,
    /// Rows per snapshot chunk (tables are split by primary-key ranges).
    #[serde(default = "default_snapshot_chunk_rows")]
    pub snapshot_chunk_rows: u32,
    /// Write schema-change events (the snapshot's definitions, then each DDL statement on a
    /// captured database or table) to the topic named `kafka.topic_prefix`, as Debezium's
    /// `include.schema.changes` (on by default).
    #[serde(default = "default_include_schema_changes")]
    pub include_schema_changes: bool,
    /// A table (`database.table`) whose inserted rows are signals to sluice, as Debezium's
    /// signal table: `(id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)`;
    /// created when missing. Signals: `execute-snapshot` and `stop-snapshot`. Incremental
    /// snapshots need it: their watermarks are rows written to it (the user needs `INSERT` and
    /// `DELETE` on it). Never captured.
    #[serde(default)]
    pub signal_table: Option<String>,
    /// Rows per chunk of an incremental snapshot (held in memory between its watermarks).
    #[serde(default = "default_incremental_chunk_rows")]
    pub incremental_chunk_rows: u32,
}

fn default_incremental_chunk_rows() -> u32 {
    DEFAULT_INCREMENTAL_CHUNK_ROWS
}

fn default_include_schema_changes() -> bool {
    true
}

fn default_status_interval_ms() -> u64 {
    DEFAULT_STATUS_INTERVAL_MS
}

fn default_heartbeat_interval_ms() -> u64 {
    DEFAULT_HEARTBEAT_INTERVAL_MS
}

fn default_snapshot_workers() -> u32 {
    DEFAULT_SNAPSHOT_WORKERS
}

fn default_snapshot_chunk_rows() -> u32 {
    DEFAULT_SNAPSHOT_CHUNK_ROWS
}

impl fmt::Debug for MysqlSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlSourceConfig")
            .field("url", &redact_url(&self.url))
            .field("ssl_ca", &self.ssl_ca)
            .field("server_id", &self.server_id)
            .field("include_tables", &self.include_tables)
            .field("exclude_tables", &self.exclude_tables)
            .field("status_interval_ms", &self.status_interval_ms)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("snapshot", &self.snapshot)
            .field("snapshot_workers", &self.snapshot_workers)
            .field("snapshot_chunk_rows", &self.snapshot_chunk_rows)
            .field("include_schema_changes", &self.include_schema_changes)
            .field("signal_table", &self.signal_table)
            .field("incremental_chunk_rows", &self.incremental_chunk_rows)
            .finish()
    }
}

/// `url` without its password (and without the query, which may hold one).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not shown)".to_owned();
    };
    let rest = rest.split('?').next().unwrap_or_default();
    match rest.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        None => format!("{scheme}://{rest}"),
    }
}

impl MysqlSourceConfig {
    /// Whether `database.table` is captured (the signal table never is).
    pub fn captures(&self, database: &str, table: &str) -> bool {
        let qualified = format!("{database}.{table}");
        if self.signal_table.as_deref() == Some(qualified.as_str()) {
            return false;
        }
        let included = if self.include_tables.is_empty() {
            !SYSTEM_DATABASES.contains(&database)
        } else {
            self.include_tables
                .iter()
                .any(|p| glob_matches(p, &qualified))
        };
        included
            && !self
                .exclude_tables
                .iter()
                .any(|p| glob_matches(p, &qualified))
    }
}

impl MysqlSourceConfig {
    /// Whether `database.table` is the signal table.
    pub fn is_signal_table(&self, database: &str, table: &str) -> bool {
        self.signal_table
            .as_deref()
            .and_then(crate::config::parse_table_name)
            .is_some_and(|(d, t)| d == database && t == table)
    }

    /// Whether `database.table` (one string) is captured.
    pub fn captures_name(&self, qualified: &str) -> bool {
        crate::config::parse_table_name(qualified).is_some_and(|(d, t)| self.captures(d, t))
    }

    /// Whether the include list reaches `database` (some captured table may be in it): a
    /// database-level DDL statement on it is a schema change to report.
    pub fn captures_database(&self, database: &str) -> bool {
        if self.include_tables.is_empty() {
            return !SYSTEM_DATABASES.contains(&database);
        }
        self.include_tables.iter().any(|p| {
            let db_part = p.split_once('.').map_or(p.as_str(), |(db, _)| db);
            glob_matches(db_part, database)
        })
    }
}

impl SourceSection for MysqlSourceConfig {
    const APPLIES_SCHEMA_CHANGES_TOPIC: bool = false;

    const KEY: &'static str = "mysql";
    const ELECTS_ACTIVE_INSTANCE: bool = true;
    const APPLIED_EVENT_OPTIONS: Option<&'static [&'static str]> = Some(&[
        "schemas_enable",
        "format",
        "key_format",
        "value_format",
        "decimal_handling_mode",
        "binary_handling_mode",
        "time_precision_mode",
        "provide_transaction_metadata",
    ]);

    /// `time_precision_mode`: only Debezium MySQL's default, `adaptive_time_microseconds` (which
    /// the source writes when the key is unset too).
    fn validate_events(events: &crate::event::EventOptions) -> Vec<ConfigIssue> {
        use crate::event::TimePrecisionMode;
        match events.time_precision_mode {
            TimePrecisionMode::Adaptive | TimePrecisionMode::AdaptiveTimeMicroseconds => Vec::new(),
            TimePrecisionMode::Connect => vec![ConfigIssue {
                key: "kafka.events.time_precision_mode".to_owned(),
                problem: "\"connect\" is not applied by the mysql source, which writes Debezium \
                          MySQL's default, \"adaptive_time_microseconds\": remove it (or set that)"
                    .to_owned(),
            }],
        }
    }

    fn validate(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        match mysql_async::Opts::from_url(&self.url) {
            Ok(_) => {}
            Err(error) => issue(
                "source.mysql.url",
                format!(
                    "{} is not valid ({error}): expected mysql://user:password@host:port",
                    redact_url(&self.url)
                ),
            ),
        }
        if let Some(ca) = &self.ssl_ca
            && let Err(problem) = check_pem_certificates(ca)
        {
            issue("source.mysql.ssl_ca", problem);
        }
        if self.server_id == 0 {
            issue(
                "source.mysql.server_id",
                "0: expected a replica id from 1 to 4294967295, unique among the server's replicas"
                    .into(),
            );
        }
        let globs = self
            .include_tables
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("source.mysql.include_tables[{i}]"), p))
            .chain(
                self.exclude_tables
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (format!("source.mysql.exclude_tables[{i}]"), p)),
            );
        for (key, pattern) in globs {
            let valid = globset::Glob::new(pattern).map(|_| pattern.contains('.'));
            match valid {
                Ok(true) => {}
                Ok(false) => issue(
                    &key,
                    format!("{pattern:?} names no table: expected database.table, e.g. \"shop.*\""),
                ),
                Err(error) => issue(
                    &key,
                    format!(
                        "{pattern:?} is not a valid pattern ({error}): expected database.table, e.g. \"shop.*\""
                    ),
                ),
            }
        }
        if self.status_interval_ms == 0 {
            issue(
                "source.mysql.status_interval_ms",
                "0: expected at least 1 (milliseconds)".into(),
            );
        }
        if !(1..=64).contains(&self.snapshot_workers) {
            issue(
                "source.mysql.snapshot_workers",
                format!("{}: expected 1 to 64", self.snapshot_workers),
            );
        }
        if self.snapshot_chunk_rows == 0 {
            issue(
                "source.mysql.snapshot_chunk_rows",
                "0: expected at least 1 (rows)".into(),
            );
        }
        if !(1..=1_000_000).contains(&self.incremental_chunk_rows) {
            issue(
                "source.mysql.incremental_chunk_rows",
                format!(
                    "{} is out of range: expected 1 to 1000000 (rows held in memory per chunk)",
                    self.incremental_chunk_rows
                ),
            );
        }
        if let Some(table) = &self.signal_table {
            match crate::config::parse_table_name(table) {
                None => issue(
                    "source.mysql.signal_table",
                    format!("{table:?}: expected database.table, e.g. \"shop.sluice_signal\""),
                ),
                Some((database, _)) if SYSTEM_DATABASES.contains(&database) => issue(
                    "source.mysql.signal_table",
                    format!(
                        "{table:?} is in the server's own database {database:?}: put it in a database of yours, e.g. \"shop.sluice_signal\""
                    ),
                ),
                Some(_) => {}
            }
        }
        issues
    }
}

/// `Ok` when `path` is a readable file holding at least one PEM certificate; otherwise what is
/// wrong and the form expected.
fn check_pem_certificates(path: &std::path::Path) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    match CertificateDer::pem_file_iter(path).map(|certs| certs.collect::<Result<Vec<_>, _>>()) {
        Ok(Ok(certs)) if !certs.is_empty() => Ok(()),
        Ok(_) => Err(format!(
            "{}: holds no PEM certificate: expected a file of CA certificates \
             (-----BEGIN CERTIFICATE-----)",
            path.display()
        )),
        Err(e) => Err(format!(
            "{}: cannot be read ({e}): expected a PEM file of CA certificates",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(section: &str) -> Result<MysqlPipelineConfig, crate::config::ConfigError> {
        let text = format!(
            "name = \"shop\"\n[source.mysql]\n{section}\n[kafka]\nbrokers = \"127.0.0.1:9092\"\n"
        );
        MysqlPipelineConfig::from_toml(&text, "t.toml", &|_| None)
    }

    #[test]
    fn a_valid_section_loads_with_defaults() {
        let config =
            load("url = \"mysql://u:secret@127.0.0.1:3306\"\nserver_id = 7\ninclude_tables = [\"shop.*\"]")
                .unwrap();
        assert_eq!(config.source.server_id, 7);
        assert_eq!(
            config.source.heartbeat_interval_ms,
            DEFAULT_HEARTBEAT_INTERVAL_MS
        );
        assert!(config.source.captures("shop", "orders"));
        assert!(!config.source.captures("other", "orders"));
        assert!(!format!("{config:?}").contains("secret"));
    }

    #[test]
    fn schema_changes_are_on_by_default_and_the_postgres_topic_is_refused() {
        let config =
            load("url = \"mysql://u@h:3306\"\nserver_id = 7\ninclude_tables = [\"sh*.orders\"]")
                .unwrap();
        assert!(config.source.include_schema_changes);
        assert!(config.source.captures_database("shop"));
        assert!(!config.source.captures_database("other"));
        let off = load("url = \"mysql://u@h:3306\"\nserver_id = 7\ninclude_schema_changes = false")
            .unwrap();
        assert!(!off.source.include_schema_changes);
        assert!(off.source.captures_database("anything"));
        assert!(!off.source.captures_database("mysql"));
        let text = "name = \"shop\"\n[source.mysql]\nurl = \"mysql://u@h:3306\"\nserver_id = 7\n\
                    [kafka]\nbrokers = \"127.0.0.1:9092\"\nschema_changes_topic = \"ddl\"\n";
        let error = MysqlPipelineConfig::from_toml(text, "t.toml", &|_| None).unwrap_err();
        let crate::config::ConfigError::Invalid { issues, .. } = error else {
            panic!("{error:?}");
        };
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].key, "kafka.schema_changes_topic");
        assert!(issues[0].problem.contains("include_schema_changes"));
    }

    #[test]
    fn an_ssl_ca_that_is_no_pem_file_is_named() {
        let dir = std::env::temp_dir().join(format!("sluice-ssl-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let good = dir.join("ca.pem");
        std::fs::write(
            &good,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, expected) in [
            (dir.join("missing.pem"), "cannot be read"),
            (not_pem, "holds no PEM certificate"),
        ] {
            let error = load(&format!(
                "url = \"mysql://u@h:3306\"\nserver_id = 7\nssl_ca = {:?}",
                path.display().to_string()
            ))
            .unwrap_err();
            let crate::config::ConfigError::Invalid { issues, .. } = error else {
                panic!("{error:?}");
            };
            assert_eq!(issues.len(), 1, "{issues:?}");
            assert_eq!(issues[0].key, "source.mysql.ssl_ca");
            assert!(issues[0].problem.contains(expected), "{issues:?}");
        }
        let config = load(&format!(
            "url = \"mysql://u@h:3306\"\nserver_id = 7\nssl_ca = {:?}",
            good.display().to_string()
        ))
        .unwrap();
        assert_eq!(config.source.ssl_ca, Some(good));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_table_outside_the_system_databases_by_default_minus_the_excluded() {
        let config =
            load("url = \"mysql://u@h:3306\"\nserver_id = 7\nexclude_tables = [\"shop.audit_*\"]")
                .unwrap();
        assert!(config.source.captures("shop", "orders"));
        assert!(!config.source.captures("shop", "audit_log"));
        assert!(!config.source.captures("mysql", "user"));
    }

    #[test]
    fn invalid_keys_are_named_with_the_expected_form() {
        let error = load(
            "url = \"postgres://u@h\"\nserver_id = 0\ninclude_tables = [\"shop\"]\nexclude_tables = [\"a.[\"]\nsnapshot_workers = 0\nsnapshot_chunk_rows = 0\nincremental_chunk_rows = 0\nsignal_table = \"sluice_signal\"",
        )
        .unwrap_err();
        let crate::config::ConfigError::Invalid { issues, .. } = error else {
            panic!("{error:?}");
        };
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "source.mysql.url",
                "source.mysql.server_id",
                "source.mysql.include_tables[0]",
                "source.mysql.exclude_tables[0]",
                "source.mysql.snapshot_workers",
                "source.mysql.snapshot_chunk_rows",
                "source.mysql.incremental_chunk_rows",
                "source.mysql.signal_table"
            ],
            "{issues:?}"
        );
        assert!(
            issues[0]
                .problem
                .contains("expected mysql://user:password@host:port")
        );
        assert!(issues[2].problem.contains("expected database.table"));
        assert!(issues[4].problem.contains("expected 1 to 64"));
        assert!(issues[7].problem.contains("expected database.table"));
    }

    /// `[kafka.events]` options the MySQL source does not apply are refused by name, not
    /// ignored; `tombstones_on_delete`, the formats and the decimal and binary modes apply.
    #[test]
    fn event_options_it_does_not_apply_are_refused() {
        let text = "name = \"shop\"\n[source.mysql]\nurl = \"mysql://u@h:3306\"\nserver_id = 7\n\
                    [kafka]\nbrokers = \"127.0.0.1:9092\"\n[kafka.events]\n\
                    tombstones_on_delete = false\ntime_precision_mode = \"connect\"\n\
                    money_fraction_digits = 4\nschemas_enable = true\n";
        let error = MysqlPipelineConfig::from_toml(text, "t.toml", &|_| None).unwrap_err();
        let crate::config::ConfigError::Invalid { issues, .. } = error else {
            panic!("{error:?}");
        };
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "kafka.events.time_precision_mode",
                "kafka.events.money_fraction_digits"
            ]
        );
        assert!(
            issues[0].problem.contains("adaptive_time_microseconds"),
            "{issues:?}"
        );
        assert!(
            issues[1]
                .problem
                .contains("not applied by the mysql source")
        );
        assert!(
            issues[1].problem.contains("format, key_format"),
            "{issues:?}"
        );
        // Debezium MySQL's default, which the source writes, is accepted by name.
        let micro = text.replace("\"connect\"", "\"adaptive_time_microseconds\"");
        let error = MysqlPipelineConfig::from_toml(&micro, "t.toml", &|_| None).unwrap_err();
        assert!(
            !error
                .to_string()
                .contains("kafka.events.time_precision_mode"),
            "{error}"
        );
        let text = text
            .replace("time_precision_mode = \"connect\"\n", "")
            .replace("money_fraction_digits = 4\n", "")
            + "provide_transaction_metadata = true\n";
        let config = MysqlPipelineConfig::from_toml(&text, "t.toml", &|_| None).unwrap();
        assert!(config.kafka.events.provide_transaction_metadata);
        assert!(!config.kafka.tombstones_on_delete());
        assert!(config.kafka.events.needs_schemas());
    }

    #[test]
    fn snapshot_modes_are_debeziums_and_an_unknown_one_is_named() {
        let config = load("url = \"mysql://u@h:3306\"\nserver_id = 7").unwrap();
        assert_eq!(config.source.snapshot, SnapshotMode::Initial);
        assert_eq!(config.source.snapshot_workers, DEFAULT_SNAPSHOT_WORKERS);
        let config =
            load("url = \"mysql://u@h:3306\"\nserver_id = 7\nsnapshot = \"when_needed\"").unwrap();
        assert_eq!(config.source.snapshot, SnapshotMode::WhenNeeded);
        let error = load("url = \"mysql://u@h:3306\"\nserver_id = 7\nsnapshot = \"sometimes\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("source.mysql.snapshot"), "{error}");
        assert!(error.contains("initial_only"), "{error}");
    }

    #[test]
    fn the_example_file_loads() {
        let text = include_str!("../../../../../examples/mysql-to-kafka.toml");
        let env = |name: &str| match name {
            "MYSQL_URL" => Some("mysql://sluice:pw@127.0.0.1:3306".to_owned()),
            "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
            _ => None,
        };
        let config = MysqlPipelineConfig::from_toml(text, "example", &env).unwrap();
        assert_eq!(config.source.server_id, 5701);
        assert_eq!(config.kafka.topic_prefix, "sluice");
        assert!(!config.kafka.events.needs_schemas());
        let avro = |name: &str| match name {
            "EVENT_FORMAT" => Some("avro".to_owned()),
            "SCHEMA_REGISTRY_URL" => Some("http://127.0.0.1:8081".to_owned()),
            other => env(other),
        };
        let config = MysqlPipelineConfig::from_toml(text, "example", &avro).unwrap();
        assert!(config.kafka.events.uses_avro());
        assert!(config.schema_registry.is_some());
    }

    #[test]
    fn the_signal_table_is_never_captured() {
        let config = load(
            "url = \"mysql://u@h:3306\"\nserver_id = 7\nsignal_table = \"shop.sluice_signal\"",
        )
        .unwrap();
        assert!(config.source.captures("shop", "orders"));
        assert!(!config.source.captures("shop", "sluice_signal"));
        assert!(config.source.is_signal_table("shop", "sluice_signal"));
        assert!(config.source.captures_name("shop.orders"));
        assert!(!config.source.captures_name("shop"));
        assert_eq!(
            config.source.incremental_chunk_rows,
            DEFAULT_INCREMENTAL_CHUNK_ROWS
        );
    }

    #[test]
    fn a_missing_server_id_is_named() {
        let error = load("url = \"mysql://u@h:3306\"").unwrap_err();
        assert!(error.to_string().contains("server_id"), "{error}");
    }
}
