//! Checks of a Kafka → Iceberg sink's tables: small data files and position-delete files
//! piling up in the current snapshot, and snapshots piling up in the table's metadata — each
//! with the maintenance to run (Spark's `rewrite_data_files` / `expire_snapshots` procedures,
//! pyiceberg's `expire_snapshots`). The thresholds are the `*_MIN` / `*_MAX` constants below,
//! listed in docs/doctor.md.
//!
//! The sink commits a snapshot every `commit_interval_ms` with a data file per written
//! partition and sub-partition (and, in upsert mode, position-delete files): a table that
//! nobody compacts or expires gathers small files (each read opens every one) and snapshots
//! (each commit rewrites the metadata file that lists them all).

use std::collections::BTreeMap;
use std::time::Duration;

use iceberg::spec::{DataContentType, PartitionSpec, TableMetadata};
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::json;

use super::finding::{Finding, Severity, finding};
use crate::config::human_bytes;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::iceberg::config::{IcebergMode, IcebergSinkConfig};
use crate::sink::kafka_source::TopicSelector;

/// A partition (or an unpartitioned table) holding at least this many data files …
pub const SMALL_FILES_MIN: u64 = 32;
/// … whose average size is under this is reported as small files.
pub const SMALL_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// At least this many position-delete files in the current snapshot are reported (every read
/// of the table applies each of them).
pub const DELETE_FILES_MIN: u64 = 32;
/// More snapshots than this are reported …
pub const SNAPSHOTS_MAX: usize = 500;
/// … and so is an oldest snapshot older than this (7 days).
pub const SNAPSHOT_AGE_MAX_MS: i64 = 7 * 24 * 3600 * 1000;

/// How long doctor waits for the catalog and for each table's manifests.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What doctor reads of a table: its snapshots and the current snapshot's live files.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TableStats {
    /// Snapshots in the table's metadata.
    pub snapshots: usize,
    /// The oldest one's commit time (Unix ms).
    pub oldest_snapshot_ms: Option<i64>,
    /// Data files of the current snapshot by partition (`month=2024-01`, `""` unpartitioned):
    /// (files, bytes).
    pub partitions: BTreeMap<String, (u64, u64)>,
    /// Position- and equality-delete files of the current snapshot.
    pub delete_files: u64,
}

impl TableStats {
    /// Data files of the current snapshot.
    pub fn data_files(&self) -> u64 {
        self.partitions.values().map(|(files, _)| files).sum()
    }

    /// Their bytes.
    pub fn data_bytes(&self) -> u64 {
        self.partitions.values().map(|(_, bytes)| bytes).sum()
    }
}

/// The findings for the Iceberg sink of `config`: catalog reachable, then each table of its
/// topics (named topics, and those its patterns match in Kafka now).
pub async fn checks(config: &SinkPipelineConfig, findings: &mut Vec<Finding>) {
    let Some(iceberg) = config.iceberg() else {
        return;
    };
    let kafka = config.kafka().clone();
    let topics = tokio::task::spawn_blocking(move || topics(&kafka))
        .await
        .unwrap_or_default();
    let catalog = match crate::sink::iceberg::writer::open_catalog("doctor", iceberg) {
        Ok(catalog) => catalog,
        Err(error) => {
            findings.push(unreachable(iceberg, &error.to_string()));
            return;
        }
    };
    let namespace = NamespaceIdent::new(iceberg.namespace.clone());
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut seen = std::collections::BTreeSet::new();
    for topic in topics {
        let Ok(name) = iceberg.table_for(&topic) else {
            continue;
        };
        if !seen.insert(name.clone()) {
            continue;
        }
        let ident = TableIdent::new(namespace.clone(), name);
        let table = match tokio::time::timeout(TIMEOUT, catalog.load_table(&ident)).await {
            Ok(Ok(table)) => table,
            Ok(Err(error)) if error.kind() == iceberg::ErrorKind::TableNotFound => {
                findings.push(finding(
                    "iceberg.table_missing",
                    if iceberg.auto_create {
                        Severity::Info
                    } else {
                        Severity::Critical
                    },
                    format!("table {ident} (topic {topic:?}) does not exist yet"),
                    &[("table", ident.to_string().into())],
                    if iceberg.auto_create {
                        "none: sink.iceberg.auto_create makes it from the first event"
                    } else {
                        "create it, or set sink.iceberg.auto_create = true"
                    },
                ));
                continue;
            }
            Ok(Err(error)) => {
                findings.push(unreachable(iceberg, &error.to_string()));
                return;
            }
            Err(_) => {
                findings.push(unreachable(
                    iceberg,
                    &format!("no answer within {TIMEOUT:?}"),
                ));
                return;
            }
        };
        match tokio::time::timeout(TIMEOUT, table_stats(&table)).await {
            Ok(Ok(stats)) => {
                findings.extend(assess(&ident.to_string(), &stats, now_ms, iceberg));
            }
            Ok(Err(error)) => findings.push(finding(
                "iceberg.manifests_unreadable",
                Severity::Warning,
                format!("cannot read the manifests of table {ident}: {error}"),
                &[("table", ident.to_string().into())],
                "check the warehouse's storage ([sink.iceberg.s3], the file system) from this machine",
            )),
            Err(_) => findings.push(finding(
                "iceberg.manifests_unreadable",
                Severity::Warning,
                format!("the manifests of table {ident} were not read within {TIMEOUT:?}"),
                &[("table", ident.to_string().into())],
                "check the warehouse's storage from this machine",
            )),
        }
    }
}

fn unreachable(iceberg: &IcebergSinkConfig, error: &str) -> Finding {
    finding(
        "iceberg.unreachable",
        Severity::Critical,
        format!("cannot read the Iceberg catalog: {error}"),
        &[(
            "catalog_uri",
            crate::pg_connect::redact_url(&iceberg.catalog_uri).into(),
        )],
        "check sink.iceberg.catalog_uri (and catalog_token or catalog_credential) and that the catalog is up",
    )
}

/// The pipeline's topics: named ones, and those its patterns match in Kafka now (none when
/// Kafka does not answer).
fn topics(kafka: &crate::sink::kafka_source::KafkaSourceConfig) -> Vec<String> {
    let mut topics = kafka.topic_names();
    if kafka
        .selectors()
        .iter()
        .any(|s| matches!(s, TopicSelector::Pattern(_)))
        && let Ok(metadata) = crate::kafka::probe(
            &kafka.brokers,
            &kafka.client,
            "source.kafka.client",
            Duration::from_secs(10),
            None,
        )
    {
        topics.extend(
            metadata
                .topics()
                .iter()
                .map(|t| t.name().to_owned())
                .filter(|name| !name.starts_with("__") && kafka.selects(name)),
        );
    }
    topics
}

/// Reads `table`'s snapshots and its current snapshot's manifests.
///
/// # Errors
///
/// The manifest list's or a manifest's.
pub async fn table_stats(table: &Table) -> iceberg::Result<TableStats> {
    let metadata = table.metadata();
    let mut stats = TableStats {
        snapshots: metadata.snapshots().count(),
        oldest_snapshot_ms: metadata.snapshots().map(|s| s.timestamp_ms()).min(),
        ..TableStats::default()
    };
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(stats);
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    for manifest in list.entries() {
        let manifest = manifest.load_manifest(table.file_io()).await?;
        let spec = manifest.metadata().partition_spec();
        for entry in manifest.entries() {
            if !entry.is_alive() {
                continue;
            }
            let file = entry.data_file();
            match file.content_type() {
                DataContentType::Data => {
                    let partition = partition_name(metadata, spec, file);
                    let slot = stats.partitions.entry(partition).or_default();
                    slot.0 += 1;
                    slot.1 += file.file_size_in_bytes();
                }
                DataContentType::PositionDeletes | DataContentType::EqualityDeletes => {
                    stats.delete_files += 1;
                }
            }
        }
    }
    Ok(stats)
}

/// A data file's partition as `name=value/…` (`""` unpartitioned); without a panic on a
/// partition that does not match its spec (a manifest is outside input).
fn partition_name(
    metadata: &TableMetadata,
    spec: &PartitionSpec,
    file: &iceberg::spec::DataFile,
) -> String {
    let Ok(ty) = spec.partition_type(metadata.current_schema()) else {
        return format!("spec {}", spec.spec_id());
    };
    spec.fields()
        .iter()
        .zip(ty.fields())
        .zip(file.partition().iter())
        .map(|((field, typed), value)| {
            format!(
                "{}={}",
                field.name,
                field.transform.to_human_string(&typed.field_type, value)
            )
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The findings for one table's stats (`now_ms`: the time to age snapshots against).
pub fn assess(
    table: &str,
    stats: &TableStats,
    now_ms: i64,
    settings: &IcebergSinkConfig,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let upsert = settings.mode == IcebergMode::Upsert;
    let average = |(files, bytes): (u64, u64)| bytes.checked_div(files).unwrap_or(0);
    let small: Vec<(&String, &(u64, u64))> = stats
        .partitions
        .iter()
        .filter(|(_, slot)| slot.0 >= SMALL_FILES_MIN && average(**slot) < SMALL_FILE_BYTES)
        .collect();
    let files = stats.data_files();
    let evidence = |extra: Vec<(&'static str, serde_json::Value)>| {
        let mut all = vec![
            ("table", table.into()),
            ("data_files", files.into()),
            ("data_bytes", stats.data_bytes().into()),
            ("partitions", stats.partitions.len().into()),
            ("commit_interval_ms", settings.commit_interval_ms.into()),
        ];
        all.extend(extra);
        all
    };
    if small.is_empty() {
        out.push(finding(
            "iceberg.data_files",
            Severity::Ok,
            format!(
                "table {table}: {files} data file(s) in {} partition(s), {} on average",
                stats.partitions.len(),
                human_bytes(average((files, stats.data_bytes())) as i64)
            ),
            &evidence(Vec::new()),
            "",
        ));
    } else {
        let worst = small
            .iter()
            .max_by_key(|(_, slot)| slot.0)
            .map(|(name, slot)| (name.as_str(), **slot))
            .unwrap_or_default();
        out.push(finding(
            "iceberg.small_files",
            Severity::Warning,
            format!(
                "table {table}: {} partition(s) hold {SMALL_FILES_MIN}+ data files averaging under {}; the most: {:?} with {} files of {} on average — every read opens each one",
                small.len(),
                human_bytes(SMALL_FILE_BYTES as i64),
                worst.0,
                worst.1.0,
                human_bytes(average(worst.1) as i64)
            ),
            &evidence(vec![
                ("small_file_partitions", small.len().into()),
                (
                    "worst_partition",
                    json!({"partition": worst.0, "files": worst.1.0, "average_bytes": average(worst.1)}),
                ),
            ]),
            if upsert {
                format!(
                    "raise sink.iceberg.commit_interval_ms (now {} ms) for fewer, larger files; do not compact an upsert table with rewrite_data_files yet (sluice's key index finds rows in the files it wrote: docs/kafka-to-iceberg.md, Limits); expire old snapshots",
                    settings.commit_interval_ms
                )
            } else {
                format!(
                    "compact the table: Spark `CALL <catalog>.system.rewrite_data_files(table => '{table}')` (or Trino's `ALTER TABLE … EXECUTE optimize`), then expire the old snapshots to free the files; fewer, larger files from sluice: raise sink.iceberg.commit_interval_ms (now {} ms)",
                    settings.commit_interval_ms
                )
            },
        ));
    }
    if stats.delete_files >= DELETE_FILES_MIN {
        out.push(finding(
            "iceberg.delete_files",
            Severity::Warning,
            format!(
                "table {table}: {} delete files in the current snapshot — every read applies each of them",
                stats.delete_files
            ),
            &[
                ("table", table.into()),
                ("delete_files", stats.delete_files.into()),
            ],
            if upsert {
                "merge them: Spark `CALL <catalog>.system.rewrite_position_delete_files(table => '…')` (not rewrite_data_files on an upsert table yet: docs/kafka-to-iceberg.md, Limits), then expire_snapshots; fewer of them from sluice: raise sink.iceberg.commit_interval_ms".to_owned()
            } else {
                format!(
                    "rewrite the deleted rows away: Spark `CALL <catalog>.system.rewrite_data_files(table => '{table}', options => map('delete-file-threshold', '1'))` (or `rewrite_position_delete_files` to merge them), then `expire_snapshots`"
                )
            },
        ));
    }
    let age_ms = stats.oldest_snapshot_ms.map(|t| now_ms.saturating_sub(t));
    let snapshot_evidence = [
        ("table", table.into()),
        ("snapshots", stats.snapshots.into()),
        ("oldest_snapshot_age_s", age_ms.map(|ms| ms / 1000).into()),
    ];
    let old = age_ms.is_some_and(|ms| ms > SNAPSHOT_AGE_MAX_MS);
    out.push(if stats.snapshots > SNAPSHOTS_MAX || old {
        finding(
            "iceberg.snapshots",
            Severity::Warning,
            format!(
                "table {table}: {} snapshots, the oldest {} old — each commit rewrites the metadata that lists them all, and their files stay on storage",
                stats.snapshots,
                age_ms.map_or_else(|| "?".into(), |ms| human_duration(ms / 1000))
            ),
            &snapshot_evidence,
            format!(
                "expire old snapshots: Spark `CALL <catalog>.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '…', retain_last => 10)`, or pyiceberg `table.maintenance.expire_snapshots().older_than(datetime).commit()`; keep the newest snapshots: sluice resumes from the Kafka offsets in the table's latest one"
            ),
        )
    } else {
        finding(
            "iceberg.snapshots",
            Severity::Ok,
            format!(
                "table {table}: {} snapshot(s), the oldest {} old",
                stats.snapshots,
                age_ms.map_or_else(|| "-".into(), |ms| human_duration(ms / 1000))
            ),
            &snapshot_evidence,
            "",
        )
    });
    out
}

fn human_duration(seconds: i64) -> String {
    match seconds {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 2 * 3600 => format!("{} hours", s / 3600),
        s if s >= 120 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> IcebergSinkConfig {
        let text = r#"
            name = "t"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["cdc.app.t"]
            [sink.iceberg]
            catalog_uri = "postgres://u@127.0.0.1/c"
            warehouse = "file:///tmp/w"
            namespace = "cdc"
        "#;
        SinkPipelineConfig::from_toml(text, "t.toml", &|_| None)
            .unwrap()
            .iceberg()
            .unwrap()
            .clone()
    }

    fn codes(findings: &[Finding]) -> Vec<(&str, Severity)> {
        findings.iter().map(|f| (f.code, f.severity)).collect()
    }

    /// Under the thresholds: ok findings with the counts; at them: warnings naming the
    /// maintenance to run, the worst partition and the snapshots' age.
    #[test]
    fn small_files_deletes_and_snapshots_past_their_thresholds_are_warnings() {
        let now = 1_800_000_000_000;
        let mut stats = TableStats {
            snapshots: 12,
            oldest_snapshot_ms: Some(now - 3_600_000),
            partitions: BTreeMap::from([
                ("m=2024-01".to_owned(), (SMALL_FILES_MIN - 1, 1 << 20)),
                ("m=2024-02".to_owned(), (3, 300 << 20)),
            ]),
            delete_files: DELETE_FILES_MIN - 1,
        };
        let quiet = assess("cdc.t", &stats, now, &settings());
        assert_eq!(
            codes(&quiet),
            [
                ("iceberg.data_files", Severity::Ok),
                ("iceberg.snapshots", Severity::Ok)
            ]
        );
        assert_eq!(quiet[0].evidence["data_files"], json!(SMALL_FILES_MIN + 2));
        assert_eq!(quiet[1].evidence["oldest_snapshot_age_s"], json!(3600));

        stats.partitions.insert(
            "m=2024-03".to_owned(),
            (SMALL_FILES_MIN, SMALL_FILES_MIN * (SMALL_FILE_BYTES - 1)),
        );
        stats.delete_files = DELETE_FILES_MIN;
        stats.oldest_snapshot_ms = Some(now - SNAPSHOT_AGE_MAX_MS - 1);
        let loud = assess("cdc.t", &stats, now, &settings());
        assert_eq!(
            codes(&loud),
            [
                ("iceberg.small_files", Severity::Warning),
                ("iceberg.delete_files", Severity::Warning),
                ("iceberg.snapshots", Severity::Warning)
            ]
        );
        assert_eq!(
            loud[0].evidence["worst_partition"]["partition"],
            json!("m=2024-03")
        );
        assert!(
            loud[0].fix.contains("rewrite_data_files"),
            "{}",
            loud[0].fix
        );
        assert!(loud[2].fix.contains("expire_snapshots"), "{}", loud[2].fix);
        assert!(loud[2].summary.contains("7 days"), "{}", loud[2].summary);

        // An upsert table is not to be compacted by rewriting its data files.
        let mut upsert = settings();
        upsert.mode = IcebergMode::Upsert;
        let upsert = assess("cdc.t", &stats, now, &upsert);
        assert!(
            upsert[0].fix.contains("do not compact"),
            "{}",
            upsert[0].fix
        );
        assert!(upsert[1].fix.contains("rewrite_position_delete_files"));

        // Many snapshots, however young.
        stats.oldest_snapshot_ms = Some(now);
        stats.snapshots = SNAPSHOTS_MAX + 1;
        let many = assess("cdc.t", &stats, now, &settings());
        assert_eq!(many[2].severity, Severity::Warning);
    }
}
