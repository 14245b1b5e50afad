//! The sink's metric names and handles (see [`crate::runtime::metrics`] for the conventions).

use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

/// Records whose epoch committed (in a file with its final name, skipped as a tombstone, or
/// dead-lettered).
pub const RECORDS_COMMITTED: &str = "sluice_sink_records_committed_total";
/// Files committed under their final names.
pub const FILES_COMMITTED: &str = "sluice_sink_files_committed_total";
/// Records read from Kafka.
pub const RECORDS_CONSUMED: &str = "sluice_sink_records_consumed_total";
/// Times a partition's queue became full and intake from it stopped (backpressure).
pub const PARTITION_PAUSES: &str = "sluice_sink_partition_pauses_total";
/// Watermark offset commits sent to the consumer group.
pub const OFFSET_COMMITS: &str = "sluice_sink_offset_commits_total";
/// Partitions assigned to this process.
pub const ASSIGNED_PARTITIONS: &str = "sluice_sink_assigned_partitions";
/// Worker threads the runtime gave up on (stuck past `processing_timeout_ms` or
/// `revoke_timeout_ms`, their destination connection closed) that have not ended yet.
pub const ABANDONED_WORKERS: &str = "sluice_sink_abandoned_workers";

/// PostgreSQL sink: rows applied, by `table` and `op` (`upsert`, `delete`).
pub const PG_ROWS_APPLIED: &str = "sluice_sink_postgres_rows_applied_total";
/// PostgreSQL sink: records per applied batch (before collapsing per key).
pub const PG_BATCH_RECORDS: &str = "sluice_sink_postgres_batch_records";
/// PostgreSQL sink: time to apply a batch (statements and commit), by `table`.
pub const PG_APPLY_DURATION: &str = "sluice_sink_postgres_apply_duration_seconds";
/// PostgreSQL sink: age of the newest record of the last applied batch (now minus its Kafka
/// timestamp), by `table`.
pub const PG_LAG: &str = "sluice_sink_postgres_lag_seconds";

/// Iceberg sink: snapshots committed, by `table`.
pub const ICEBERG_COMMITS: &str = "sluice_sink_iceberg_commits_total";
/// Iceberg sink: data files committed, by `table`.
pub const ICEBERG_FILES: &str = "sluice_sink_iceberg_files_total";
/// Iceberg sink: rows committed, by `table`.
pub const ICEBERG_ROWS: &str = "sluice_sink_iceberg_rows_total";
/// Iceberg sink: rows deleted by position (upsert mode: updated, deleted and truncated-away
/// rows), by `table`.
pub const ICEBERG_DELETES: &str = "sluice_sink_iceberg_deleted_rows_total";
/// Iceberg sink: time to commit an epoch's files (read the table, write the manifests and
/// metadata, swap the catalog's pointer), by `table`.
pub const ICEBERG_COMMIT_DURATION: &str = "sluice_sink_iceberg_commit_duration_seconds";
/// Iceberg sink: commits that lost the race to another sub-partition's and were checked and
/// made again, by `table`.
pub const ICEBERG_CONFLICTS: &str = "sluice_sink_iceberg_commit_conflicts_total";
/// Iceberg sink: commits refused because another writer had committed for the same
/// sub-partition (a zombie fenced), by `table`.
pub const ICEBERG_FENCED: &str = "sluice_sink_iceberg_fenced_total";

/// Registers the descriptions.
pub fn describe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        describe_counter!(
            RECORDS_COMMITTED,
            "records whose epoch committed (final file name, skipped tombstone or dead-lettered)"
        );
        describe_counter!(FILES_COMMITTED, "files committed under their final names");
        describe_counter!(RECORDS_CONSUMED, "records read from Kafka");
        describe_counter!(
            PARTITION_PAUSES,
            "times a partition's queue became full and intake from it stopped"
        );
        describe_counter!(OFFSET_COMMITS, "watermark offset commits sent to Kafka");
        describe_gauge!(ASSIGNED_PARTITIONS, "partitions assigned to this process");
        describe_gauge!(
            ABANDONED_WORKERS,
            "sink worker threads given up on (stuck past processing_timeout_ms or revoke_timeout_ms) that are still running"
        );
        describe_counter!(
            PG_ROWS_APPLIED,
            "rows applied to PostgreSQL tables, by table and op (upsert, delete)"
        );
        describe_histogram!(
            PG_BATCH_RECORDS,
            "records per batch applied to PostgreSQL (before collapsing per key)"
        );
        describe_histogram!(
            PG_APPLY_DURATION,
            Unit::Seconds,
            "time to apply a batch to PostgreSQL, statements and commit"
        );
        describe_counter!(ICEBERG_COMMITS, "Iceberg snapshots committed, by table");
        describe_counter!(ICEBERG_FILES, "Iceberg data files committed, by table");
        describe_counter!(ICEBERG_ROWS, "rows committed to Iceberg tables, by table");
        describe_counter!(
            ICEBERG_DELETES,
            "rows of Iceberg tables deleted by position (upsert mode), by table"
        );
        describe_histogram!(
            ICEBERG_COMMIT_DURATION,
            Unit::Seconds,
            "time to commit an epoch's data files to an Iceberg table"
        );
        describe_counter!(
            ICEBERG_CONFLICTS,
            "Iceberg commits that lost the race to another sub-partition's and were made again"
        );
        describe_counter!(
            ICEBERG_FENCED,
            "Iceberg commits refused because another writer committed for the same sub-partition"
        );
        describe_gauge!(
            PG_LAG,
            Unit::Seconds,
            "now minus the Kafka timestamp of the newest record applied to the table"
        );
    });
}

/// [`ABANDONED_WORKERS`].
pub fn abandoned_workers() -> Gauge {
    gauge!(ABANDONED_WORKERS)
}

/// [`RECORDS_COMMITTED`].
pub fn records_committed() -> Counter {
    counter!(RECORDS_COMMITTED)
}

/// [`FILES_COMMITTED`].
pub fn files_committed() -> Counter {
    counter!(FILES_COMMITTED)
}

/// The PostgreSQL sink's handles of one table (made once per writer).
#[derive(Debug)]
pub struct PgTableMetrics {
    upserted: Counter,
    deleted: Counter,
    batch_records: Histogram,
    apply_duration: Histogram,
    lag: Gauge,
}

impl PgTableMetrics {
    /// The handles of `table`.
    pub fn new(table: &str) -> Self {
        let table = table.to_owned();
        Self {
            upserted: counter!(PG_ROWS_APPLIED, "table" => table.clone(), "op" => "upsert"),
            deleted: counter!(PG_ROWS_APPLIED, "table" => table.clone(), "op" => "delete"),
            batch_records: histogram!(PG_BATCH_RECORDS),
            apply_duration: histogram!(PG_APPLY_DURATION, "table" => table.clone()),
            lag: gauge!(PG_LAG, "table" => table),
        }
    }

    /// A batch of `records` applied in `took`: `upserted` and `deleted` rows.
    pub fn applied(&self, upserted: u64, deleted: u64, records: u64, took: Duration) {
        self.upserted.increment(upserted);
        self.deleted.increment(deleted);
        self.batch_records.record(records as f64);
        self.apply_duration.record(took.as_secs_f64());
    }

    /// The newest applied record's Kafka timestamp.
    pub fn lag(&self, timestamp_ms: i64) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        self.lag.set((now_ms - timestamp_ms).max(0) as f64 / 1000.0);
    }
}

/// [`ICEBERG_COMMITS`] of `table`.
pub fn iceberg_commits(table: &str) -> Counter {
    counter!(ICEBERG_COMMITS, "table" => table.to_owned())
}

/// [`ICEBERG_FILES`] of `table`.
pub fn iceberg_files(table: &str) -> Counter {
    counter!(ICEBERG_FILES, "table" => table.to_owned())
}

/// [`ICEBERG_ROWS`] of `table`.
pub fn iceberg_rows(table: &str) -> Counter {
    counter!(ICEBERG_ROWS, "table" => table.to_owned())
}

/// [`ICEBERG_DELETES`] of `table`.
pub fn iceberg_deletes(table: &str) -> Counter {
    counter!(ICEBERG_DELETES, "table" => table.to_owned())
}

/// [`ICEBERG_COMMIT_DURATION`] of `table`.
pub fn iceberg_commit_duration(table: &str) -> Histogram {
    histogram!(ICEBERG_COMMIT_DURATION, "table" => table.to_owned())
}

/// [`ICEBERG_CONFLICTS`] of `table`.
pub fn iceberg_conflicts(table: &str) -> Counter {
    counter!(ICEBERG_CONFLICTS, "table" => table.to_owned())
}

/// [`ICEBERG_FENCED`] of `table`.
pub fn iceberg_fenced(table: &str) -> Counter {
    counter!(ICEBERG_FENCED, "table" => table.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../../docs/metrics.md");

    #[test]
    fn the_sink_metrics_follow_the_scheme_and_are_documented() {
        for name in [
            RECORDS_COMMITTED,
            FILES_COMMITTED,
            RECORDS_CONSUMED,
            PARTITION_PAUSES,
            OFFSET_COMMITS,
            ASSIGNED_PARTITIONS,
            PG_ROWS_APPLIED,
            PG_BATCH_RECORDS,
            PG_APPLY_DURATION,
            PG_LAG,
            ICEBERG_COMMITS,
            ICEBERG_FILES,
            ICEBERG_ROWS,
            ICEBERG_COMMIT_DURATION,
            ICEBERG_CONFLICTS,
            ICEBERG_FENCED,
            ICEBERG_DELETES,
        ] {
            assert!(name.starts_with("sluice_sink_"), "{name}");
            assert!(
                DOC.contains(&format!("`{name}`")),
                "{name} is not in docs/metrics.md"
            );
        }
    }
}
