//! `[sink.iceberg]`: the catalog, the warehouse, the topic → table mapping and commits.
//!
//! ```toml
//! [sink.iceberg]
//! catalog_uri = "${ICEBERG_CATALOG_URI}"   # postgres://… (SQL catalog) or http(s)://… (REST)
//! warehouse = "${ICEBERG_WAREHOUSE}"       # file:///path or s3://bucket/prefix
//! namespace = "${ICEBERG_NAMESPACE}"
//! table = "{table}"                        # from topics named <prefix>.<schema>.<table>
//! mode = "append"                         # or "upsert"
//! apply_truncates = false                  # upsert: a truncate empties the table
//! auto_create = true
//! auto_evolve = true                       # add the columns new events have
//! [sink.iceberg.tables]                    # per-topic overrides
//! "cdc.public.orders" = "orders_audit"
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::ConfigIssue;
use crate::pg_connect::PgConnectConfig;
use crate::sink::kafka_source::KafkaSourceConfig;
use crate::sink::object::{S3Config, parse_s3_url};

/// Default table template: the source table's name.
pub const DEFAULT_TABLE_TEMPLATE: &str = "{table}";
/// Default catalog name (the `catalog_name` column of the catalog's tables; pyiceberg's
/// `SqlCatalog(name, …)` and Java's `JdbcCatalog` name it when they open the catalog).
pub const DEFAULT_CATALOG_NAME: &str = "sluice";
/// Default namespace.
pub const DEFAULT_NAMESPACE: &str = "default";
/// Default sub-partitions per Kafka partition: each commits its own snapshots, so more of them
/// mean more commits racing on a table and more small files.
pub const DEFAULT_SUB_PARTITIONS: u32 = 1;
/// Default age of an open epoch before it is written and committed (one snapshot per
/// sub-partition and commit: readers see new rows this often).
pub const DEFAULT_COMMIT_INTERVAL_MS: u64 = 10_000;
/// Default records per commit at most.
pub const DEFAULT_COMMIT_RECORDS: u64 = 500_000;
/// Default size of a data file before the writer starts another (the `iceberg` crate's
/// rolling writer; Iceberg's `write.target-file-size-bytes` default).
pub const DEFAULT_TARGET_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// How change events become rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IcebergMode {
    /// Every change event a row: the row image (`after`, or `before` for a delete) and the
    /// event's operation, timestamps and source position (an audit log).
    #[default]
    Append,
    /// The table mirrors the source table: inserts, updates and deletes applied by the record
    /// key (the table's identifier fields), deletes as position deletes.
    Upsert,
}

/// `[sink.iceberg]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergSinkConfig {
    /// The catalog: the SQL catalog's database, a libpq URL with the TLS and authentication
    /// options of `source.postgres.url` (`postgres://user@host/db?sslmode=…`), or a REST
    /// catalog's base URL (`http(s)://host:port[/path]`, the `/v1/…` routes under it).
    pub catalog_uri: String,
    /// A REST catalog's bearer token (`"${ICEBERG_TOKEN}"` from the environment).
    #[serde(default)]
    pub catalog_token: Option<String>,
    /// A REST catalog's OAuth2 client credentials, `client_id:client_secret` (or the secret
    /// alone), exchanged for a bearer token (the `client_credentials` grant; pyiceberg's and
    /// Java's `credential`).
    #[serde(default)]
    pub catalog_credential: Option<String>,
    /// The OAuth2 token endpoint `catalog_credential` goes to (pyiceberg's and Java's
    /// `oauth2-server-uri`; default `<catalog_uri>/v1/oauth/tokens`).
    #[serde(default)]
    pub catalog_oauth2_server_uri: Option<String>,
    /// The scope `catalog_credential` asks for (default `catalog`, as pyiceberg and Java).
    #[serde(default)]
    pub catalog_scope: Option<String>,
    /// The catalog's name (a column of the catalog's tables).
    #[serde(default = "default_catalog_name")]
    pub catalog_name: String,
    /// Where tables' files go: `file:///absolute/path` or `s3://bucket/prefix`. With a REST
    /// catalog, also the `warehouse` the catalog's config is asked for (the server chooses
    /// new tables' locations).
    pub warehouse: String,
    /// `[sink.iceberg.s3]`: the S3 client's settings for an `s3://` warehouse (the keys of
    /// `[sink.files.s3]`; unset ones from the `AWS_*` environment).
    #[serde(default)]
    pub s3: S3Config,
    /// The namespace of the tables.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The table of a topic named `<prefix>.<schema>.<table>`: `{schema}`, `{table}`,
    /// `{prefix}` and `{topic}` are replaced (dots in the result become `_`).
    #[serde(default = "default_table")]
    pub table: String,
    /// Per-topic tables, taking precedence over `table`.
    #[serde(default)]
    pub tables: BTreeMap<String, String>,
    /// `append` (every event a row) or `upsert` (the table mirrors the source table).
    #[serde(default)]
    pub mode: IcebergMode,
    /// In `upsert` mode, a truncate event empties the table; otherwise truncates are ignored.
    #[serde(default)]
    pub apply_truncates: bool,
    /// Create a missing table (and its namespace) from the first event's Connect schema.
    #[serde(default)]
    pub auto_create: bool,
    /// Add to a table the columns an event's schema has and the table lacks (optional
    /// columns), and widen `int` to `long`, `float` to `double`, a decimal's precision;
    /// never drop, narrow or otherwise retype.
    #[serde(default)]
    pub auto_evolve: bool,
    /// `auto_create`: the new table's partition spec, `transform(column)` each (Iceberg's
    /// transforms: `identity`, `year`, `month`, `day`, `hour`, `bucket[N]`, `truncate[W]`),
    /// or a bare column for `identity`.
    #[serde(default)]
    pub partition_by: Vec<String>,
    /// Sub-partitions per Kafka partition (by key hash).
    #[serde(default = "default_sub_partitions")]
    pub sub_partitions: u32,
    /// Age of an open epoch before it is committed.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Records per commit at most.
    #[serde(default = "default_commit_records")]
    pub commit_records: u64,
    /// Bytes of a data file before the next one starts.
    #[serde(default = "default_target_file_bytes")]
    pub target_file_bytes: u64,
}

impl std::fmt::Debug for IcebergSinkConfig {
    // The URL may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergSinkConfig")
            .field(
                "catalog_uri",
                &crate::pg_connect::redact_url(&self.catalog_uri),
            )
            .field("catalog_token", &self.catalog_token.as_ref().map(|_| "***"))
            .field(
                "catalog_credential",
                &self.catalog_credential.as_ref().map(|_| "***"),
            )
            .field("catalog_oauth2_server_uri", &self.catalog_oauth2_server_uri)
            .field("catalog_scope", &self.catalog_scope)
            .field("catalog_name", &self.catalog_name)
            .field("warehouse", &self.warehouse)
            .field("s3", &self.s3)
            .field("namespace", &self.namespace)
            .field("table", &self.table)
            .field("tables", &self.tables)
            .field("mode", &self.mode)
            .field("apply_truncates", &self.apply_truncates)
            .field("auto_create", &self.auto_create)
            .field("auto_evolve", &self.auto_evolve)
            .field("partition_by", &self.partition_by)
            .field("sub_partitions", &self.sub_partitions)
            .field("commit_interval_ms", &self.commit_interval_ms)
            .field("commit_records", &self.commit_records)
            .field("target_file_bytes", &self.target_file_bytes)
            .finish()
    }
}

fn default_catalog_name() -> String {
    DEFAULT_CATALOG_NAME.to_owned()
}
fn default_namespace() -> String {
    DEFAULT_NAMESPACE.to_owned()
}
fn default_table() -> String {
    DEFAULT_TABLE_TEMPLATE.to_owned()
}
const fn default_sub_partitions() -> u32 {
    DEFAULT_SUB_PARTITIONS
}
const fn default_commit_interval_ms() -> u64 {
    DEFAULT_COMMIT_INTERVAL_MS
}
const fn default_commit_records() -> u64 {
    DEFAULT_COMMIT_RECORDS
}
const fn default_target_file_bytes() -> u64 {
    DEFAULT_TARGET_FILE_BYTES
}

/// One `partition_by` entry: its column and transform (`day(updated)`, `bucket[16](id)`,
/// `id`).
///
/// # Errors
///
/// What is wrong with `text`, with the expected form.
pub fn parse_partition(text: &str) -> Result<(String, iceberg::spec::Transform), String> {
    let form =
        "expected transform(column), e.g. \"day(updated_at)\", \"bucket[16](id)\", or a column";
    let text = text.trim();
    let (transform, column) = match text.split_once('(') {
        Some((transform, rest)) => match rest.strip_suffix(')') {
            Some(column) => (transform.trim(), column.trim()),
            None => return Err(format!("{text:?}: no closing parenthesis: {form}")),
        },
        None => ("identity", text),
    };
    if column.is_empty() || column.contains(['(', ')', ',']) {
        return Err(format!("{text:?} names no column: {form}"));
    }
    let parsed: iceberg::spec::Transform = transform
        .parse()
        .map_err(|_| format!("{text:?}: {transform:?} is not an Iceberg transform (identity, year, month, day, hour, bucket[N], truncate[W]): {form}"))?;
    if matches!(
        parsed,
        iceberg::spec::Transform::Unknown | iceberg::spec::Transform::Void
    ) {
        return Err(format!(
            "{text:?}: {transform:?} partitions nothing: {form}"
        ));
    }
    Ok((column.to_owned(), parsed))
}

/// Whether `name` can name a namespace or table: 1-255 characters (the catalog's columns),
/// no dot (a level separator), no `/` (a path segment of the table's location).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.contains(['.', '/', '\\'])
        && !name.chars().any(char::is_control)
}

impl IcebergSinkConfig {
    /// Whether `catalog_uri` names a REST catalog (`http(s)://`).
    pub fn is_rest(&self) -> bool {
        self.catalog_uri.starts_with("http://") || self.catalog_uri.starts_with("https://")
    }

    /// The table of `topic` (in [`IcebergSinkConfig::namespace`]).
    ///
    /// # Errors
    ///
    /// The key to change and the expected form.
    pub fn table_for(&self, topic: &str) -> Result<String, ConfigIssue> {
        if let Some(table) = self.tables.get(topic) {
            if valid_name(table) {
                return Ok(table.clone());
            }
            return Err(ConfigIssue {
                key: format!("sink.iceberg.tables.\"{topic}\""),
                problem: format!(
                    "{table:?} is not a table name: expected 1-255 characters without '.', '/' or '\\'"
                ),
            });
        }
        let issue = |problem: String| ConfigIssue {
            key: "sink.iceberg.table".into(),
            problem,
        };
        let parts: Vec<&str> = topic.split('.').collect();
        let uses_parts = ["{schema}", "{table}", "{prefix}"]
            .iter()
            .any(|p| self.table.contains(p));
        if uses_parts && parts.len() < 3 {
            return Err(issue(format!(
                "the template {:?} needs topics named <prefix>.<schema>.<table>, but topic {topic:?} is not: expected such a topic, or a table for it in [sink.iceberg.tables]",
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
        let rendered = rendered.replace('.', "_");
        if valid_name(&rendered) {
            Ok(rendered)
        } else {
            Err(issue(format!(
                "renders {rendered:?} for topic {topic:?}: expected 1-255 characters without '/' or '\\'"
            )))
        }
    }

    /// Every broken rule, for the source topics of `kafka` (tables of topics matched by a
    /// pattern are checked when the topics are assigned).
    pub fn validate(&self, kafka: &KafkaSourceConfig) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if self.is_rest() {
            if reqwest::Url::parse(&self.catalog_uri).is_err() {
                issue(
                    "sink.iceberg.catalog_uri",
                    format!(
                        "{:?} is not a URL: expected http(s)://host[:port][/path] (a REST catalog)",
                        crate::pg_connect::redact_url(&self.catalog_uri)
                    ),
                );
            }
        } else if !(self.catalog_uri.starts_with("postgres://")
            || self.catalog_uri.starts_with("postgresql://"))
        {
            issue(
                "sink.iceberg.catalog_uri",
                format!(
                    "{:?} is not a catalog this sluice can use: expected postgres://user[:password]@host[:port]/database (the SQL catalog) or http(s)://host[:port][/path] (a REST catalog)",
                    crate::pg_connect::redact_url(&self.catalog_uri)
                ),
            );
        } else if let Err(error) = PgConnectConfig::parse(&self.catalog_uri) {
            issue(
                "sink.iceberg.catalog_uri",
                error
                    .0
                    .replace("source.postgres.url", "sink.iceberg.catalog_uri"),
            );
        }
        if self.catalog_token.as_deref().is_some_and(|t| !t.is_empty()) && !self.is_rest() {
            issue(
                "sink.iceberg.catalog_token",
                "a bearer token applies to a REST catalog only: expected catalog_uri = \"http(s)://…\", or no catalog_token".into(),
            );
        }
        let credential = self.catalog_credential.as_deref();
        if credential.is_some_and(|c| !c.is_empty()) {
            if !self.is_rest() {
                issue(
                    "sink.iceberg.catalog_credential",
                    "OAuth2 client credentials apply to a REST catalog only: expected catalog_uri = \"http(s)://…\", or no catalog_credential".into(),
                );
            } else if self.catalog_token.as_deref().is_some_and(|t| !t.is_empty()) {
                issue(
                    "sink.iceberg.catalog_credential",
                    "set with catalog_token: expected one of them (a token as it is, or client credentials exchanged for one)".into(),
                );
            }
        }
        if credential
            .is_some_and(|c| !c.is_empty() && c.split_once(':').map_or(c, |(_, s)| s).is_empty())
        {
            issue(
                "sink.iceberg.catalog_credential",
                "an empty client secret: expected \"client_id:client_secret\" or the secret alone"
                    .into(),
            );
        }
        for (key, value) in [
            ("catalog_oauth2_server_uri", &self.catalog_oauth2_server_uri),
            ("catalog_scope", &self.catalog_scope),
        ] {
            if value.is_some() && credential.is_none_or(str::is_empty) {
                issue(
                    &format!("sink.iceberg.{key}"),
                    "applies with catalog_credential only: expected catalog_credential = \"client_id:client_secret\", or no such key".into(),
                );
            }
        }
        if let Some(server) = &self.catalog_oauth2_server_uri
            && !(server.starts_with("http://") || server.starts_with("https://"))
        {
            issue(
                "sink.iceberg.catalog_oauth2_server_uri",
                format!("{server:?}: expected an http(s):// URL of the OAuth2 token endpoint"),
            );
        }
        if self.catalog_name.is_empty() || self.catalog_name.len() > 255 {
            issue(
                "sink.iceberg.catalog_name",
                format!("{:?}: expected 1-255 characters", self.catalog_name),
            );
        }
        match self.warehouse.strip_prefix("file://") {
            Some(path) if path.starts_with('/') => {}
            _ if self.warehouse.starts_with("s3://") => {
                if let Err(problem) = parse_s3_url(&self.warehouse) {
                    issue("sink.iceberg.warehouse", problem);
                }
            }
            _ => issue(
                "sink.iceberg.warehouse",
                format!(
                    "{:?} is not a warehouse this sluice can write: expected file:///absolute/path or s3://bucket/prefix",
                    self.warehouse
                ),
            ),
        }
        if !valid_name(&self.namespace) {
            issue(
                "sink.iceberg.namespace",
                format!(
                    "{:?} is not a namespace: expected 1-255 characters without '.', '/' or '\\' (one level)",
                    self.namespace
                ),
            );
        }
        if self.apply_truncates && self.mode != IcebergMode::Upsert {
            issue(
                "sink.iceberg.apply_truncates",
                "true applies to mode = \"upsert\" only (in \"append\" mode a truncate is a row): expected false, or mode = \"upsert\"".into(),
            );
        }
        for entry in &self.partition_by {
            if let Err(problem) = parse_partition(entry) {
                issue("sink.iceberg.partition_by", problem);
            }
        }
        if !(1..=256).contains(&self.sub_partitions) {
            issue(
                "sink.iceberg.sub_partitions",
                format!("{} is out of range: expected 1 to 256", self.sub_partitions),
            );
        }
        if self.commit_interval_ms == 0 {
            issue(
                "sink.iceberg.commit_interval_ms",
                "0: expected at least 1 (milliseconds)".into(),
            );
        }
        if !(1..=10_000_000).contains(&self.commit_records) {
            issue(
                "sink.iceberg.commit_records",
                format!(
                    "{} is out of range: expected 1 to 10000000",
                    self.commit_records
                ),
            );
        }
        if self.target_file_bytes < 1024 * 1024 {
            issue(
                "sink.iceberg.target_file_bytes",
                format!(
                    "{} is too small: expected at least 1048576 (1 MiB)",
                    self.target_file_bytes
                ),
            );
        }
        for topic in kafka.topic_names() {
            if let Err(found) = self.table_for(&topic) {
                issues.push(found);
            }
        }
        for topic in self.tables.keys() {
            if !kafka.selects(topic) {
                issues.push(ConfigIssue {
                    key: format!("sink.iceberg.tables.\"{topic}\""),
                    problem: format!(
                        "{topic:?} is not a source topic: expected one of source.kafka.topics (or a topic its patterns match)"
                    ),
                });
            }
        }
        issues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> IcebergSinkConfig {
        IcebergSinkConfig {
            catalog_uri: "postgres://u@localhost/db".into(),
            catalog_token: None,
            catalog_credential: None,
            catalog_oauth2_server_uri: None,
            catalog_scope: None,
            s3: S3Config::default(),
            catalog_name: DEFAULT_CATALOG_NAME.into(),
            warehouse: "file:///tmp/warehouse".into(),
            namespace: "cdc".into(),
            table: DEFAULT_TABLE_TEMPLATE.into(),
            tables: BTreeMap::from([("other".to_owned(), "renamed".to_owned())]),
            mode: IcebergMode::Append,
            apply_truncates: false,
            auto_create: true,
            auto_evolve: false,
            partition_by: Vec::new(),
            sub_partitions: 1,
            commit_interval_ms: 1000,
            commit_records: 1000,
            target_file_bytes: DEFAULT_TARGET_FILE_BYTES,
        }
    }

    fn kafka(topics: &[&str]) -> KafkaSourceConfig {
        KafkaSourceConfig {
            brokers: "localhost:9092".into(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            group_id: None,
            commit_interval_ms: 1000,
            properties: BTreeMap::new(),
            client: BTreeMap::new(),
            format: None,
            key_format: None,
            value_format: None,
        }
    }

    #[test]
    fn topics_map_to_tables_by_template_and_override() {
        let c = config();
        assert_eq!(c.table_for("cdc.public.orders").unwrap(), "orders");
        assert_eq!(c.table_for("other").unwrap(), "renamed");
        let mut c = config();
        c.table = "{schema}_{table}".into();
        assert_eq!(
            c.table_for("a.b.inventory.items").unwrap(),
            "inventory_items"
        );
        c.table = "t_{topic}".into();
        assert_eq!(
            c.table_for("cdc.public.orders").unwrap(),
            "t_cdc_public_orders"
        );
    }

    #[test]
    fn partition_entries_parse_as_transform_and_column() {
        use iceberg::spec::Transform;
        assert_eq!(
            parse_partition("day(updated_at)").unwrap(),
            ("updated_at".to_owned(), Transform::Day)
        );
        assert_eq!(
            parse_partition(" bucket[16]( id ) ").unwrap(),
            ("id".to_owned(), Transform::Bucket(16))
        );
        assert_eq!(
            parse_partition("region").unwrap(),
            ("region".to_owned(), Transform::Identity)
        );
        for bad in [
            "day(",
            "week(x)",
            "day()",
            "void(x)",
            "bucket[x](id)",
            "f(a,b)",
        ] {
            let problem = parse_partition(bad).unwrap_err();
            assert!(
                problem.contains("expected transform(column)"),
                "{bad}: {problem}"
            );
        }
    }

    #[test]
    fn oauth2_settings_need_a_rest_catalog_and_a_credential() {
        let keys = |c: &IcebergSinkConfig| -> Vec<String> {
            c.validate(&kafka(&["cdc.public.orders"]))
                .into_iter()
                .map(|i| i.key)
                .collect()
        };
        let mut c = config();
        c.tables.clear();
        c.catalog_credential = Some("id:secret".into());
        c.catalog_scope = Some("catalog".into());
        assert_eq!(keys(&c), ["sink.iceberg.catalog_credential"], "SQL catalog");
        c.catalog_uri = "https://catalog.example/api".into();
        assert!(keys(&c).is_empty(), "{:?}", keys(&c));
        c.catalog_oauth2_server_uri = Some("https://idp.example/token".into());
        assert!(keys(&c).is_empty(), "{:?}", keys(&c));
        c.catalog_token = Some("t".into());
        assert_eq!(
            keys(&c),
            ["sink.iceberg.catalog_credential"],
            "token and credential"
        );
        c.catalog_token = None;
        c.catalog_credential = Some("id:".into());
        assert_eq!(
            keys(&c),
            ["sink.iceberg.catalog_credential"],
            "empty secret"
        );
        c.catalog_credential = None;
        c.catalog_oauth2_server_uri = Some("idp.example/token".into());
        assert_eq!(
            keys(&c),
            [
                "sink.iceberg.catalog_oauth2_server_uri",
                "sink.iceberg.catalog_scope",
                "sink.iceberg.catalog_oauth2_server_uri",
            ]
        );
        // The secret is never in the settings' Debug form.
        c.catalog_credential = Some("id:hunter2".into());
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn bad_settings_name_the_key_and_the_form() {
        let issue = config().table_for("orders").unwrap_err();
        assert_eq!(issue.key, "sink.iceberg.table");
        assert!(
            issue.problem.contains("<prefix>.<schema>.<table>"),
            "{issue:?}"
        );
        let mut c = config();
        c.catalog_uri = "mysql://rest:8181".into();
        c.warehouse = "gs://bucket/wh".into();
        c.namespace = "a.b".into();
        c.apply_truncates = true;
        c.partition_by = vec!["day(updated".into()];
        c.sub_partitions = 0;
        c.tables.insert("a.b.c".into(), "x/y".into());
        let issues = c.validate(&kafka(&["a.b.c"]));
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "sink.iceberg.catalog_uri",
                "sink.iceberg.warehouse",
                "sink.iceberg.namespace",
                "sink.iceberg.apply_truncates",
                "sink.iceberg.partition_by",
                "sink.iceberg.sub_partitions",
                "sink.iceberg.tables.\"a.b.c\"",
                "sink.iceberg.tables.\"other\"",
            ],
            "{issues:?}"
        );
        assert!(issues[0].problem.contains("postgres://"), "{issues:?}");
        assert!(issues[1].problem.contains("file:///"), "{issues:?}");
        assert!(issues[3].problem.contains("\"upsert\""), "{issues:?}");
        let mut c = config();
        c.tables.clear();
        assert!(c.validate(&kafka(&["cdc.public.orders"])).is_empty());
        // A REST catalog and an S3 warehouse.
        c.catalog_uri = "http://127.0.0.1:8181".into();
        c.warehouse = "s3://bucket/wh".into();
        c.catalog_token = Some("t".into());
        assert!(c.validate(&kafka(&["cdc.public.orders"])).is_empty());
        c.catalog_uri = "http://".into();
        c.warehouse = "s3:///wh".into();
        let issues = c.validate(&kafka(&["cdc.public.orders"]));
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            ["sink.iceberg.catalog_uri", "sink.iceberg.warehouse"],
            "{issues:?}"
        );
    }
}
