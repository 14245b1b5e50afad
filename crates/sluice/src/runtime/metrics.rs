//! Metric names, descriptions and handles.
//!
//! Names follow `sluice_<subsystem>_<name>_<unit>[_total]` (subsystems: `pipeline`, `source`,
//! `delivery`, `kafka`, `verify`); labels are low-cardinality (`pipeline`, set globally,
//! `table`, `state`, `reason`, `kind`, `result`), never keys or values. Every metric is documented in
//! `docs/metrics.md`; a unit test keeps the two in step. Hot-path handles are created
//! once and kept ([`TableMetrics`], [`PipelineMetrics`]) so recording is an atomic add.

use std::sync::Once;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

/// Records produced to Kafka and acknowledged, per table.
pub const PRODUCED_RECORDS: &str = "sluice_kafka_produced_records_total";
/// Bytes (key + value) produced to Kafka and acknowledged, per table.
pub const PRODUCED_BYTES: &str = "sluice_kafka_produced_bytes_total";
/// Row changes read from the source and not yet acknowledged.
pub const INFLIGHT_RECORDS: &str = "sluice_delivery_inflight_records";
/// Bytes held for row changes not yet acknowledged.
pub const INFLIGHT_BYTES: &str = "sluice_delivery_inflight_bytes";
/// The configured in-flight byte budget.
pub const INFLIGHT_BYTES_LIMIT: &str = "sluice_delivery_inflight_limit_bytes";
/// The watermark: the newest LSN such that it and everything before it is acknowledged.
pub const WATERMARK_LSN: &str = "sluice_source_watermark_lsn";
/// The slot's confirmed flush LSN as the server reports it.
pub const SLOT_CONFIRMED_LSN: &str = "sluice_source_slot_confirmed_flush_lsn";
/// WAL bytes between the server's current position and the slot's confirmed position.
pub const REPLICATION_LAG_BYTES: &str = "sluice_source_replication_lag_bytes";
/// Binlog bytes between the server's newest position and the pipeline's confirmed one
/// (MySQL/MariaDB sources).
pub const BINLOG_LAG_BYTES: &str = "sluice_source_binlog_lag_bytes";
/// Seconds since the confirmed binlog transaction committed, while there is more to read.
pub const BINLOG_LAG_SECONDS: &str = "sluice_source_binlog_lag_seconds";
/// Source commit time to Kafka acknowledgement, per record.
pub const END_TO_END_LATENCY: &str = "sluice_pipeline_end_to_end_latency_seconds";
/// Time to write one checkpoint (standby status update with the watermark).
pub const CHECKPOINT_DURATION: &str = "sluice_source_checkpoint_duration_seconds";
/// Checkpoints that could not be written.
pub const CHECKPOINT_FAILURES: &str = "sluice_source_checkpoint_failures_total";
/// Records per produce request, from librdkafka statistics.
pub const RECORDS_PER_REQUEST: &str = "sluice_kafka_records_per_request";
/// Bytes of records in the producer's librdkafka queues (not yet acknowledged), from its
/// statistics (`msg_size`, every `statistics.interval.ms`).
pub const PRODUCER_QUEUE_BYTES: &str = "sluice_kafka_producer_queue_bytes";
/// Restarts of the pipeline, by `reason`: `retryable` (a lost connection), `fatal` (with
/// `restart.policy = "always"`), `requested` (through the admin API).
pub const RESTARTS: &str = "sluice_pipeline_restarts_total";
/// Times this instance took over the active role after waiting as a standby.
pub const HA_TAKEOVERS: &str = "sluice_pipeline_takeovers_total";
/// 1 for this instance's role (label `role`: `active`, `standby`), 0 for the other.
pub const HA_ROLE: &str = "sluice_pipeline_role";
/// Records sent to the dead-letter topic.
pub const DEAD_LETTERED: &str = "sluice_delivery_dead_lettered_records_total";
/// Scheduled verifications that finished, by `result` (`equal`, `differences`,
/// `not_verified`, `error`).
pub const VERIFY_RUNS: &str = "sluice_verify_runs_total";
/// Source rows compared by scheduled verifications.
pub const VERIFY_ROWS_COMPARED: &str = "sluice_verify_rows_compared_total";
/// Key ranges (buckets) that differed in the last scheduled verification.
pub const VERIFY_RANGES_DIFFERING: &str = "sluice_verify_ranges_differing";
/// Unix time of the last scheduled verification that found every table equal.
pub const VERIFY_LAST_SUCCESS: &str = "sluice_verify_last_success_timestamp_seconds";
/// WAL message bytes received from the replication stream.
pub const SOURCE_RECEIVED_BYTES: &str = "sluice_source_received_bytes_total";
/// Transactions received from the source.
pub const SOURCE_TRANSACTIONS: &str = "sluice_source_transactions_total";
/// 1 while the pipeline streams, 0 otherwise.
pub const PIPELINE_UP: &str = "sluice_pipeline_up";
/// 1 for the pipeline's current state (label `state`), 0 for the others.
pub const PIPELINE_STATE: &str = "sluice_pipeline_state";
/// State changes, by the state entered (label `state`).
pub const STATE_TRANSITIONS: &str = "sluice_pipeline_state_transitions_total";
/// The delay before the next restart while the pipeline is in backoff, else 0.
pub const RESTART_BACKOFF: &str = "sluice_pipeline_restart_backoff_seconds";
/// 1 while the server's WAL grows and the slot's confirmed position has not moved for longer
/// than `source.postgres.progress_timeout_ms`.
pub const SOURCE_STALLED: &str = "sluice_source_stalled";
/// Seconds since the slot's confirmed position last moved.
pub const SOURCE_PROGRESS_AGE: &str = "sluice_source_progress_age_seconds";
/// Slots found dropped, recreated, invalidated or on another server, by `kind`.
pub const SLOT_LOSSES: &str = "sluice_source_slot_losses_total";
/// WAL the slot retains on the server (`pg_current_wal_lsn() - restart_lsn`), checked against
/// the WAL budget.
pub const SLOT_RETAINED_WAL: &str = "sluice_source_slot_retained_wal_bytes";
/// WAL bytes the standby the pipeline decodes on has not replayed yet (PostgreSQL 16+
/// decoding on a standby).
pub const STANDBY_REPLAY_LAG_BYTES: &str = "sluice_source_standby_replay_lag_bytes";
/// Seconds since the standby replayed its last transaction, while WAL is left to replay.
pub const STANDBY_REPLAY_LAG_SECONDS: &str = "sluice_source_standby_replay_lag_seconds";
/// `source.postgres.wal_budget`.
pub const WAL_BUDGET: &str = "sluice_source_wal_budget_bytes";
/// The WAL budget's level: 0, 50, 80 or 100 (percent of the budget reached).
pub const WAL_BUDGET_LEVEL: &str = "sluice_source_wal_budget_level";
/// Slots dropped by the WAL budget's `drop_slot` action.
pub const WAL_BUDGET_DROPS: &str = "sluice_source_wal_budget_slot_drops_total";
/// Rows read by snapshots, per table.
pub const SNAPSHOT_ROWS: &str = "sluice_source_snapshot_rows_total";
/// Column values whose text did not parse as their type and were sent as a JSON string of the
/// text instead, per table and column type.
pub const VALUES_AS_TEXT: &str = "sluice_source_values_as_text_total";
/// Every metric name, for the documentation test.
pub const ALL: &[&str] = &[
    PRODUCED_RECORDS,
    PRODUCED_BYTES,
    INFLIGHT_RECORDS,
    INFLIGHT_BYTES,
    INFLIGHT_BYTES_LIMIT,
    WATERMARK_LSN,
    SLOT_CONFIRMED_LSN,
    REPLICATION_LAG_BYTES,
    END_TO_END_LATENCY,
    CHECKPOINT_DURATION,
    CHECKPOINT_FAILURES,
    RECORDS_PER_REQUEST,
    PRODUCER_QUEUE_BYTES,
    RESTARTS,
    BINLOG_LAG_BYTES,
    BINLOG_LAG_SECONDS,
    HA_TAKEOVERS,
    HA_ROLE,
    DEAD_LETTERED,
    VERIFY_RUNS,
    VERIFY_ROWS_COMPARED,
    VERIFY_RANGES_DIFFERING,
    VERIFY_LAST_SUCCESS,
    SOURCE_RECEIVED_BYTES,
    SOURCE_TRANSACTIONS,
    PIPELINE_UP,
    PIPELINE_STATE,
    STATE_TRANSITIONS,
    RESTART_BACKOFF,
    SOURCE_STALLED,
    SOURCE_PROGRESS_AGE,
    SLOT_LOSSES,
    SLOT_RETAINED_WAL,
    STANDBY_REPLAY_LAG_BYTES,
    STANDBY_REPLAY_LAG_SECONDS,
    WAL_BUDGET,
    WAL_BUDGET_LEVEL,
    WAL_BUDGET_DROPS,
    SNAPSHOT_ROWS,
    VALUES_AS_TEXT,
];

/// Histogram buckets for latencies, in seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002, 0.003, 0.005, 0.007_5, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2,
    0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];
/// Histogram buckets for records per request.
pub const COUNT_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0,
    100000.0,
];

/// Registers every description once.
pub fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        describe_counter!(
            PRODUCED_RECORDS,
            "records produced to Kafka and acknowledged"
        );
        describe_counter!(
            PRODUCED_BYTES,
            Unit::Bytes,
            "key and value bytes produced and acknowledged"
        );
        describe_gauge!(
            INFLIGHT_RECORDS,
            "row changes read and not yet acknowledged"
        );
        describe_gauge!(
            INFLIGHT_BYTES,
            Unit::Bytes,
            "bytes held for row changes not yet acknowledged"
        );
        describe_gauge!(
            INFLIGHT_BYTES_LIMIT,
            Unit::Bytes,
            "the in-flight byte budget"
        );
        describe_gauge!(
            WATERMARK_LSN,
            "newest LSN acknowledged together with everything before it"
        );
        describe_gauge!(
            SLOT_CONFIRMED_LSN,
            "the replication slot's confirmed_flush_lsn"
        );
        describe_gauge!(
            REPLICATION_LAG_BYTES,
            Unit::Bytes,
            "pg_current_wal_lsn() minus the slot's confirmed_flush_lsn"
        );
        describe_histogram!(
            END_TO_END_LATENCY,
            Unit::Seconds,
            "source commit to Kafka acknowledgement"
        );
        describe_histogram!(
            CHECKPOINT_DURATION,
            Unit::Seconds,
            "time to write a checkpoint"
        );
        describe_counter!(CHECKPOINT_FAILURES, "checkpoints that failed");
        describe_histogram!(
            RECORDS_PER_REQUEST,
            "records per produce request (librdkafka statistics)"
        );
        describe_gauge!(
            PRODUCER_QUEUE_BYTES,
            Unit::Bytes,
            "bytes of records in librdkafka's producer queues (statistics)"
        );
        describe_counter!(RESTARTS, "pipeline restarts, by reason");
        describe_gauge!(
            BINLOG_LAG_BYTES,
            Unit::Bytes,
            "binlog bytes between the server's newest position and the confirmed one"
        );
        describe_gauge!(
            BINLOG_LAG_SECONDS,
            Unit::Seconds,
            "seconds since the confirmed binlog transaction committed, while there is more to read"
        );
        describe_counter!(
            HA_TAKEOVERS,
            "times this instance took over the active role after waiting as a standby"
        );
        describe_gauge!(HA_ROLE, "1 for this instance's role (active, standby)");
        describe_counter!(DEAD_LETTERED, "records sent to the dead-letter topic");
        describe_counter!(VERIFY_RUNS, "scheduled verifications, by result");
        describe_counter!(
            VERIFY_ROWS_COMPARED,
            "source rows compared by scheduled verifications"
        );
        describe_gauge!(
            VERIFY_RANGES_DIFFERING,
            "key ranges that differed in the last scheduled verification"
        );
        describe_gauge!(
            VERIFY_LAST_SUCCESS,
            Unit::Seconds,
            "unix time of the last scheduled verification that found every table equal"
        );
        describe_counter!(
            SOURCE_RECEIVED_BYTES,
            Unit::Bytes,
            "WAL message bytes received"
        );
        describe_counter!(SOURCE_TRANSACTIONS, "transactions received from the source");
        describe_gauge!(PIPELINE_UP, "1 while the pipeline streams");
        describe_gauge!(PIPELINE_STATE, "1 for the current state, by state");
        describe_counter!(STATE_TRANSITIONS, "state changes, by the state entered");
        describe_gauge!(
            RESTART_BACKOFF,
            Unit::Seconds,
            "delay before the next restart (0 unless in backoff)"
        );
        describe_gauge!(
            SOURCE_STALLED,
            "1 while WAL grows and the slot's confirmed position stands still"
        );
        describe_gauge!(
            SOURCE_PROGRESS_AGE,
            Unit::Seconds,
            "seconds since the slot's confirmed position last moved"
        );
        describe_counter!(SLOT_LOSSES, "slots found dropped, recreated or invalidated");
        describe_gauge!(
            SLOT_RETAINED_WAL,
            Unit::Bytes,
            "pg_current_wal_lsn() minus the slot's restart_lsn: the WAL the slot retains"
        );
        describe_gauge!(
            STANDBY_REPLAY_LAG_BYTES,
            Unit::Bytes,
            "WAL bytes the standby the pipeline decodes on has not replayed yet"
        );
        describe_gauge!(
            STANDBY_REPLAY_LAG_SECONDS,
            Unit::Seconds,
            "seconds since the standby replayed its last transaction, while WAL is left to replay"
        );
        describe_gauge!(WAL_BUDGET, Unit::Bytes, "source.postgres.wal_budget");
        describe_gauge!(
            WAL_BUDGET_LEVEL,
            "percent of the WAL budget reached: 0, 50, 80 or 100"
        );
        describe_counter!(
            WAL_BUDGET_DROPS,
            "slots dropped by the WAL budget's drop_slot action"
        );
        describe_counter!(SNAPSHOT_ROWS, "rows read by snapshots, per table");
    });
}

/// Counters of one table.
#[derive(Debug)]
pub struct TableMetrics {
    /// Records acknowledged.
    pub records: Counter,
    /// Bytes acknowledged.
    pub bytes: Counter,
}

impl TableMetrics {
    /// Handles for `table` (`schema.table`).
    pub fn new(table: &str) -> Self {
        Self {
            records: counter!(PRODUCED_RECORDS, "table" => table.to_owned()),
            bytes: counter!(PRODUCED_BYTES, "table" => table.to_owned()),
        }
    }
}

/// Handles of one pipeline's hot-path metrics.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    /// Per-record end-to-end latency.
    pub latency: Histogram,
    /// Checkpoint durations.
    pub checkpoint_duration: Histogram,
    /// Checkpoint failures.
    pub checkpoint_failures: Counter,
    /// The watermark.
    pub watermark: Gauge,
    /// Received WAL bytes.
    pub received_bytes: Counter,
    /// Received transactions.
    pub transactions: Counter,
    /// Dead-lettered records.
    pub dead_lettered: Counter,
}

impl PipelineMetrics {
    /// Handles for the pipeline.
    pub fn new() -> Self {
        Self {
            latency: histogram!(END_TO_END_LATENCY),
            checkpoint_duration: histogram!(CHECKPOINT_DURATION),
            checkpoint_failures: counter!(CHECKPOINT_FAILURES),
            watermark: gauge!(WATERMARK_LSN),
            received_bytes: counter!(SOURCE_RECEIVED_BYTES),
            transactions: counter!(SOURCE_TRANSACTIONS),
            dead_lettered: counter!(DEAD_LETTERED),
        }
    }
}

impl Default for PipelineMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The producer queue bytes gauge.
pub fn producer_queue_bytes() -> Gauge {
    gauge!(PRODUCER_QUEUE_BYTES)
}

/// The records-per-request histogram.
pub fn records_per_request() -> Histogram {
    histogram!(RECORDS_PER_REQUEST)
}

/// Installs the process's Prometheus recorder, with `pipeline` as a global label.
///
/// # Errors
///
/// When a recorder was installed before.
pub fn install_recorder(pipeline: &str) -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .add_global_label("pipeline", pipeline)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(RECORDS_PER_REQUEST.into()), COUNT_BUCKETS)?
        .install_recorder()?;
    describe();
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../../docs/metrics.md");
    const ALERTS: &str = include_str!("../../../../docs/alerts/sluice.rules.yml");

    #[test]
    fn every_metric_follows_the_scheme_and_is_documented() {
        let subsystems = ["pipeline", "source", "delivery", "kafka", "verify"];
        for name in ALL {
            let rest = name.strip_prefix("sluice_").expect("sluice_ prefix");
            assert!(
                subsystems
                    .iter()
                    .any(|s| rest.starts_with(&format!("{s}_"))),
                "{name}: expected sluice_<subsystem>_…"
            );
            assert!(
                DOC.contains(&format!("`{name}`")),
                "{name} is not in docs/metrics.md"
            );
        }
    }

    /// A metric another page names (in backquotes: `sluice_…` of a metric's subsystem, or
    /// ending in a metric's unit) is one docs/metrics.md lists: a renamed metric cannot live on
    /// in a guide.
    #[test]
    fn every_page_names_only_documented_metrics() {
        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs");
        let mut pages = 0;
        for entry in std::fs::read_dir(docs).expect("docs/") {
            let path = entry.expect("docs/ entry").path();
            if path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            pages += 1;
            let text = std::fs::read_to_string(&path).expect("a docs page");
            for quoted in text.split('`').skip(1).step_by(2) {
                let name = quoted.split(['{', '[', ' ']).next().unwrap_or_default();
                let metric = name.starts_with("sluice_")
                    && name != "sluice_sink_progress" // the PostgreSQL sink's progress table
                    && (["pipeline", "source", "delivery", "kafka", "sink", "verify"]
                        .iter()
                        .any(|s| name.starts_with(&format!("sluice_{s}_")))
                        || [
                            "_total", "_seconds", "_bytes", "_lsn", "_records", "_workers",
                        ]
                        .iter()
                        .any(|unit| name.ends_with(unit)));
                assert!(
                    !metric || DOC.contains(&format!("`{name}`")),
                    "{} names {name}, which docs/metrics.md does not list",
                    path.display()
                );
            }
        }
        assert!(pages >= 10, "read the docs pages");
    }

    #[test]
    fn the_alert_rules_use_only_metrics_that_exist() {
        let mut used = 0;
        for word in ALERTS.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let Some(base) = word.strip_prefix("sluice_") else {
                continue;
            };
            let base = format!("sluice_{base}");
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| base.strip_suffix(suffix))
                .unwrap_or(&base);
            assert!(
                ALL.contains(&base),
                "docs/alerts/sluice.rules.yml uses unknown {word}"
            );
            used += 1;
        }
        assert!(used >= 4, "the alert rules reference sluice's metrics");
    }
}
