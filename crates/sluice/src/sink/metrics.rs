//! The sink's metric names and handles (see [`crate::runtime::metrics`] for the conventions).

use metrics::{Counter, counter, describe_counter, describe_gauge};

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
    });
}

/// [`RECORDS_COMMITTED`].
pub fn records_committed() -> Counter {
    counter!(RECORDS_COMMITTED)
}

/// [`FILES_COMMITTED`].
pub fn files_committed() -> Counter {
    counter!(FILES_COMMITTED)
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
        ] {
            assert!(name.starts_with("sluice_sink_"), "{name}");
            assert!(
                DOC.contains(&format!("`{name}`")),
                "{name} is not in docs/metrics.md"
            );
        }
    }
}
