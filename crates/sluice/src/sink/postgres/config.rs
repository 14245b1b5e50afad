//! `[sink.postgres]`: the target database, the topic → table mapping and batching.
//!
//! ```toml
//! [sink.postgres]
//! url = "${TARGET_PG_URL}"          # libpq URL; sslmode, sslrootcert… as for source.postgres.url
//! table = "{schema}.{table}"        # from topics named <prefix>.<schema>.<table>
//! [sink.postgres.tables]            # per-topic overrides
//! "cdc.public.orders" = "replica.orders_copy"
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::ConfigIssue;
use crate::event::{BinaryHandlingMode, DecimalHandlingMode, TimePrecisionMode};
use crate::pg_connect::PgConnectConfig;
use crate::sink::kafka_source::KafkaSourceConfig;

/// Default table template: the source's schema and table.
pub const DEFAULT_TABLE_TEMPLATE: &str = "{schema}.{table}";
/// Default records per transaction (per sub-partition); the batch's bytes are bounded too
/// ([`batch_bytes`]).
pub const DEFAULT_BATCH_RECORDS: u64 = 5_000;
/// The share of `delivery.memory_limit` the staged batches of one Kafka partition's
/// sub-partitions hold together (split evenly between them): 4 MiB at the default 128 MiB, 1 MiB
/// per sub-partition at the default 4 (about 1,000 change events of ~1 KB).
///
/// A batch costs several times its records' bytes at its peak (the records, their converted
/// rows, the statement's data, what the allocator keeps of them for a while) on each
/// sub-partition's thread at once: with 5,000 records per batch and no byte bound the sink
/// peaked at 162–179 MiB at 4 sub-partitions, with 1,000 records at 116 MiB, at the same rate
/// within the noise (bench/PROFILE.md, "PostgreSQL sink memory").
pub const BATCH_SHARE_OF_MEMORY_LIMIT: u64 = 32;

/// The bytes a sub-partition's open batch may stage (its records as consumed) before it is
/// applied: a [`BATCH_SHARE_OF_MEMORY_LIMIT`]th of `memory_limit` split between the
/// `sub_partitions`, at least 64 KiB. A record larger than that is applied alone.
pub fn batch_bytes(memory_limit: u64, sub_partitions: u32) -> usize {
    let bytes = memory_limit / BATCH_SHARE_OF_MEMORY_LIMIT / u64::from(sub_partitions.max(1));
    usize::try_from(bytes.max(64 * 1024)).unwrap_or(usize::MAX)
}
/// Default sub-partitions per Kafka partition.
pub const DEFAULT_SUB_PARTITIONS: u32 = 4;
/// Default age of an open batch before it is applied.
pub const DEFAULT_BATCH_INTERVAL_MS: u64 = 100;
/// The progress table sluice keeps in the target database (in `progress_schema`).
pub const PROGRESS_TABLE: &str = "sluice_sink_progress";

/// `[sink.postgres]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// The target database: a libpq URL with the TLS and authentication options of
    /// `source.postgres.url`.
    pub url: String,
    /// The target table of a topic named `<prefix>.<schema>.<table>`: `{schema}`, `{table}`,
    /// `{prefix}` and `{topic}` are replaced; the result is `table` or `schema.table`.
    #[serde(default = "default_table")]
    pub table: String,
    /// Per-topic target tables (`schema.table` or `table`), taking precedence over `table`.
    #[serde(default)]
    pub tables: BTreeMap<String, String>,
    /// Sub-partitions per Kafka partition (by key hash): the parallelism per partition.
    #[serde(default = "default_sub_partitions")]
    pub sub_partitions: u32,
    /// Records per transaction at most (the batch's bytes are bounded by
    /// `delivery.memory_limit` too, see [`batch_bytes`]).
    #[serde(default = "default_batch_records")]
    pub batch_records: u64,
    /// Age of an open batch before it is applied (records arriving slowly).
    #[serde(default = "default_batch_interval_ms")]
    pub batch_interval_ms: u64,
    /// Schema of the progress table `sluice_sink_progress` (created when missing).
    #[serde(default = "default_progress_schema")]
    pub progress_schema: String,
    /// Create a missing target table (and its schema) from the first change's row: column
    /// types from the events' Connect schemas (`schemas_enable`), else from the JSON values.
    #[serde(default)]
    pub auto_create: bool,
    /// Add the columns that the events carry and the table lacks (nullable; never dropped or
    /// narrowed).
    #[serde(default)]
    pub auto_evolve: bool,
    /// Apply truncate events (`op: "t"`) as `TRUNCATE`; otherwise they follow
    /// `delivery.on_failure`.
    #[serde(default)]
    pub truncate: bool,
    /// The value that stands for an unchanged TOASTed column the source did not send, as the
    /// source's `unavailable.value.placeholder` (Debezium's name; `hex:` and hex digits for
    /// raw bytes): a column holding it in any of its forms is not written.
    #[serde(default = "default_unavailable_value_placeholder")]
    pub unavailable_value_placeholder: String,
    /// Debezium's `decimal.handling.mode` of the events without schemas (`precise`, `string`,
    /// `double`).
    #[serde(default)]
    pub decimal_handling_mode: DecimalHandlingMode,
    /// Debezium's `time.precision.mode` of the events without schemas (`adaptive`,
    /// `adaptive_time_microseconds`, `connect`).
    #[serde(default)]
    pub time_precision_mode: TimePrecisionMode,
    /// Debezium's `binary.handling.mode` of the events without schemas (`bytes`, `base64`,
    /// `base64-url-safe`, `hex`).
    #[serde(default)]
    pub binary_handling_mode: BinaryHandlingMode,
}

impl std::fmt::Debug for PostgresSinkConfig {
    // The URL may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSinkConfig")
            .field("url", &crate::pg_connect::redact_url(&self.url))
            .field("table", &self.table)
            .field("tables", &self.tables)
            .field("sub_partitions", &self.sub_partitions)
            .field("batch_records", &self.batch_records)
            .field("batch_interval_ms", &self.batch_interval_ms)
            .field("progress_schema", &self.progress_schema)
            .field("auto_create", &self.auto_create)
            .field("auto_evolve", &self.auto_evolve)
            .field("truncate", &self.truncate)
            .field(
                "unavailable_value_placeholder",
                &self.unavailable_value_placeholder,
            )
            .field("decimal_handling_mode", &self.decimal_handling_mode)
            .field("time_precision_mode", &self.time_precision_mode)
            .field("binary_handling_mode", &self.binary_handling_mode)
            .finish()
    }
}

fn default_table() -> String {
    DEFAULT_TABLE_TEMPLATE.to_owned()
}
const fn default_sub_partitions() -> u32 {
    DEFAULT_SUB_PARTITIONS
}
const fn default_batch_records() -> u64 {
    DEFAULT_BATCH_RECORDS
}
const fn default_batch_interval_ms() -> u64 {
    DEFAULT_BATCH_INTERVAL_MS
}
fn default_unavailable_value_placeholder() -> String {
    super::convert::DEFAULT_UNAVAILABLE_VALUE_PLACEHOLDER.to_owned()
}
fn default_progress_schema() -> String {
    "public".to_owned()
}

/// A target table: optional schema and name, unquoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// Schema; `None`: the connection's `search_path`.
    pub schema: Option<String>,
    /// Table.
    pub name: String,
}

impl TableName {
    /// `"schema"."table"`, quoted for SQL.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(&self.name)),
            None => quote_ident(&self.name),
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

pub use crate::sql::quote_ident;

/// Parses `schema.table` or `table`.
fn parse_table(text: &str) -> Result<TableName, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let valid = |part: &str| !part.is_empty() && part.len() <= 63;
    match parts.as_slice() {
        [name] if valid(name) => Ok(TableName {
            schema: None,
            name: (*name).to_owned(),
        }),
        [schema, name] if valid(schema) && valid(name) => Ok(TableName {
            schema: Some((*schema).to_owned()),
            name: (*name).to_owned(),
        }),
        _ => Err(format!(
            "{text:?} is not a table name: expected \"schema.table\" or \"table\" (each 1-63 characters)"
        )),
    }
}

impl PostgresSinkConfig {
    /// The Debezium options of the events without schemas.
    pub fn event_encoding(&self) -> super::convert::EventEncoding {
        super::convert::EventEncoding {
            decimal: self.decimal_handling_mode,
            time: self.time_precision_mode,
            binary: self.binary_handling_mode,
        }
    }

    /// The target table of `topic`.
    ///
    /// # Errors
    ///
    /// The key to change and the expected form.
    pub fn table_for(&self, topic: &str) -> Result<TableName, ConfigIssue> {
        if let Some(table) = self.tables.get(topic) {
            return parse_table(table).map_err(|problem| ConfigIssue {
                key: format!("sink.postgres.tables.\"{topic}\""),
                problem,
            });
        }
        let issue = |problem: String| ConfigIssue {
            key: "sink.postgres.table".into(),
            problem,
        };
        let parts: Vec<&str> = topic.split('.').collect();
        let uses_parts = ["{schema}", "{table}", "{prefix}"]
            .iter()
            .any(|p| self.table.contains(p));
        if uses_parts && parts.len() < 3 {
            return Err(issue(format!(
                "the template {:?} needs topics named <prefix>.<schema>.<table>, but topic {topic:?} is not: expected such a topic, or a table for it in [sink.postgres.tables]",
                self.table
            )));
        }
        let rendered = if parts.len() >= 3 {
            let n = parts.len();
            self.table
                .replace("{schema}", parts[n - 2])
                .replace("{table}", parts[n - 1])
                .replace("{prefix}", &parts[..n - 2].join("."))
                .replace("{topic}", topic)
        } else {
            self.table.replace("{topic}", topic)
        };
        if rendered.contains('{') || rendered.contains('}') {
            return Err(issue(format!(
                "{:?} has an unknown placeholder: expected {{schema}}, {{table}}, {{prefix}} or {{topic}}",
                self.table
            )));
        }
        parse_table(&rendered).map_err(|problem| {
            issue(format!(
                "renders {problem} for topic {topic:?} (template {:?})",
                self.table
            ))
        })
    }

    /// The progress table, quoted.
    pub fn progress_table(&self) -> String {
        format!(
            "{}.{}",
            quote_ident(&self.progress_schema),
            quote_ident(PROGRESS_TABLE)
        )
    }

    /// Every broken rule, for the source topics of `kafka` (tables of topics matched by a
    /// pattern are checked when the topics are assigned).
    pub fn validate(&self, kafka: &KafkaSourceConfig) -> Vec<ConfigIssue> {
        let topics = kafka.topic_names();
        let mut issues = Vec::new();
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if self.url.trim().is_empty() {
            issue(
                "sink.postgres.url",
                "empty: expected postgres://user[:password]@host[:port]/database[?sslmode=...]"
                    .into(),
            );
        } else if let Err(error) = PgConnectConfig::parse(&self.url) {
            issue(
                "sink.postgres.url",
                error.0.replace("source.postgres.url", "sink.postgres.url"),
            );
        }
        for topic in &topics {
            if let Err(found) = self.table_for(topic) {
                issues.push(found);
            }
        }
        for topic in self.tables.keys() {
            if !kafka.selects(topic) {
                issues.push(ConfigIssue {
                    key: format!("sink.postgres.tables.\"{topic}\""),
                    problem: format!(
                        "{topic:?} is not a source topic: expected one of source.kafka.topics (or a topic its patterns match)"
                    ),
                });
            }
        }
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if !(1..=256).contains(&self.sub_partitions) {
            issue(
                "sink.postgres.sub_partitions",
                format!("{} is out of range: expected 1 to 256", self.sub_partitions),
            );
        }
        if !(1..=1_000_000).contains(&self.batch_records) {
            issue(
                "sink.postgres.batch_records",
                format!(
                    "{} is out of range: expected 1 to 1000000",
                    self.batch_records
                ),
            );
        }
        if self.batch_interval_ms == 0 {
            issue(
                "sink.postgres.batch_interval_ms",
                "0: expected at least 1 (milliseconds)".into(),
            );
        }
        if self.progress_schema.is_empty() || self.progress_schema.len() > 63 {
            issue(
                "sink.postgres.progress_schema",
                format!(
                    "{:?} is not a schema name: expected 1-63 characters",
                    self.progress_schema
                ),
            );
        }
        issues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_get_a_32nd_of_the_memory_limit_split_between_the_sub_partitions() {
        assert_eq!(batch_bytes(128 << 20, 4), 1 << 20);
        assert_eq!(batch_bytes(128 << 20, 1), 4 << 20);
        assert_eq!(batch_bytes(1 << 30, 8), 4 << 20);
        // Never below 64 KiB (nor a division by zero).
        assert_eq!(batch_bytes(16 << 20, 64), 64 << 10);
        assert_eq!(batch_bytes(128 << 20, 0), 4 << 20);
    }

    fn config(table: &str) -> PostgresSinkConfig {
        PostgresSinkConfig {
            url: "postgres://u@localhost/db".into(),
            table: table.into(),
            tables: BTreeMap::from([("other".to_owned(), "x.y".to_owned())]),
            sub_partitions: 4,
            batch_records: 10,
            batch_interval_ms: 10,
            progress_schema: "public".into(),
            auto_create: false,
            auto_evolve: false,
            truncate: false,
            unavailable_value_placeholder: default_unavailable_value_placeholder(),
            decimal_handling_mode: DecimalHandlingMode::default(),
            time_precision_mode: TimePrecisionMode::default(),
            binary_handling_mode: BinaryHandlingMode::default(),
        }
    }

    #[test]
    fn topics_map_to_tables_by_template_and_override() {
        let c = config(DEFAULT_TABLE_TEMPLATE);
        let t = c.table_for("cdc.public.orders").unwrap();
        assert_eq!(t.to_string(), "public.orders");
        assert_eq!(t.quoted(), "\"public\".\"orders\"");
        assert_eq!(
            c.table_for("a.b.inventory.items").unwrap().to_string(),
            "inventory.items"
        );
        assert_eq!(c.table_for("other").unwrap().to_string(), "x.y");
        let c = config("replica.{schema}_{table}");
        assert_eq!(
            c.table_for("cdc.public.orders").unwrap().to_string(),
            "replica.public_orders"
        );
        assert_eq!(
            config("t_{topic}").table_for("orders").unwrap().name,
            "t_orders"
        );
    }

    #[test]
    fn bad_mappings_name_the_key_and_the_form() {
        let issue = config(DEFAULT_TABLE_TEMPLATE)
            .table_for("orders")
            .unwrap_err();
        assert_eq!(issue.key, "sink.postgres.table");
        assert!(
            issue.problem.contains("<prefix>.<schema>.<table>"),
            "{issue:?}"
        );
        let issue = config("{nope}").table_for("a.b.c").unwrap_err();
        assert!(issue.problem.contains("placeholder"), "{issue:?}");
        let mut c = config(DEFAULT_TABLE_TEMPLATE);
        c.tables.insert("a.b.c".into(), "too.many.dots".into());
        let issue = c.table_for("a.b.c").unwrap_err();
        assert_eq!(issue.key, "sink.postgres.tables.\"a.b.c\"");
        assert!(issue.problem.contains("schema.table"), "{issue:?}");
        let mut c = config(DEFAULT_TABLE_TEMPLATE);
        c.url = "postgres://u@localhost/db?sslmode=sometimes".into();
        c.sub_partitions = 0;
        let keys: Vec<String> = c
            .validate(&KafkaSourceConfig {
                brokers: "localhost:9092".into(),
                topics: vec!["a.b.c".into(), "/x\\..*/".into()],
                group_id: None,
                commit_interval_ms: 1000,
                properties: BTreeMap::new(),
                client: BTreeMap::new(),
                format: None,
                key_format: None,
                value_format: None,
            })
            .into_iter()
            .map(|i| i.key)
            .collect();
        assert_eq!(
            keys,
            [
                "sink.postgres.url",
                "sink.postgres.tables.\"other\"",
                "sink.postgres.sub_partitions"
            ]
        );
        // A per-topic table for a topic the pattern matches is fine.
        c.tables = BTreeMap::from([("x.a.b".to_owned(), "x.y".to_owned())]);
        c.url = "postgres://u@localhost/db".into();
        c.sub_partitions = 1;
        let kafka = KafkaSourceConfig {
            brokers: "localhost:9092".into(),
            topics: vec!["/x\\..*/".into()],
            group_id: None,
            commit_interval_ms: 1000,
            properties: BTreeMap::new(),
            client: BTreeMap::new(),
            format: None,
            key_format: None,
            value_format: None,
        };
        assert!(c.validate(&kafka).is_empty(), "{:?}", c.validate(&kafka));
    }
}
