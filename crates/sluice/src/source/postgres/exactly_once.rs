//! Exactly-once delivery for the PostgreSQL source: what is committed to Kafka, as the
//! offsets topic holds it (see [`crate::delivery::exactly_once`] for the transactions).
//!
//! Two records per pipeline, both in the compacted offsets topic
//! (`delivery.offsets_topic`, default `<topic_prefix>.sluice_offsets`):
//!
//! - key `<pipeline>`: the position of the newest change committed to Kafka,
//!   `{"pipeline", "system_identifier", "commit_lsn": "0/16B3748", "tx_index": 4}`. A change
//!   is at or below it when its (commit LSN, index within its transaction) is; such changes are
//!   skipped when the stream replays them after a restart.
//! - key `<pipeline>.snapshot`: the initial snapshot's finished chunks,
//!   `{"pipeline", "system_identifier", "consistent_point", "done": [0, 3, …]}`, written in
//!   the transaction that holds the last of their rows; a restarted snapshot skips them.
//!
//! A record of another server (a different system identifier) or of another snapshot (a
//! different consistent point) is ignored with a warning: its positions mean nothing here.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::Lsn;

use super::config::PgPipelineConfig;
use crate::delivery::exactly_once::{self, Transactions};
use crate::error::PipelineError;
use crate::kafka::{self, OutRecord, PipelineProducer};

/// The newest committed position record.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StreamRecord {
    pipeline: String,
    system_identifier: String,
    commit_lsn: String,
    tx_index: u32,
}

/// The snapshot's committed chunks.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SnapshotRecord {
    pipeline: String,
    system_identifier: String,
    consistent_point: String,
    done: Vec<usize>,
}

/// What the offsets topic says is committed, for one run.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The offsets topic.
    pub offsets_topic: String,
    /// The pipeline.
    pipeline: String,
    /// The server's system identifier.
    system_identifier: String,
    /// The snapshot's consistent point (the slot's position while a snapshot is pending).
    consistent_point: Lsn,
    /// The newest committed change: (commit LSN, index in its transaction).
    pub stream: Option<(Lsn, u32)>,
    /// The snapshot chunks committed as finished.
    pub snapshot_done: Vec<usize>,
}

impl Committed {
    /// Creates the offsets topic when missing (with `kafka.create_topics`), initializes the
    /// producer's transactions (fencing older instances), and reads what is committed.
    ///
    /// # Errors
    ///
    /// Retryable when Kafka cannot be reached; fatal when a record cannot be parsed.
    pub async fn start(
        config: &PgPipelineConfig,
        producer: &Arc<PipelineProducer>,
        system_identifier: &str,
        consistent_point: Lsn,
    ) -> Result<Self, PipelineError> {
        let offsets_topic = config
            .delivery
            .offsets_topic
            .clone()
            .unwrap_or_else(|| exactly_once::default_offsets_topic(&config.kafka.topic_prefix));
        if config.kafka.create_topics {
            kafka::ensure_offsets_topic(&config.kafka, &offsets_topic).await?;
        }
        exactly_once::init_transactions(producer).await?;
        let values = exactly_once::read_committed(&config.kafka, &offsets_topic).await?;
        let mut committed = Self {
            offsets_topic,
            pipeline: config.name.clone(),
            system_identifier: system_identifier.to_owned(),
            consistent_point,
            stream: None,
            snapshot_done: Vec::new(),
        };
        let unreadable = |key: &str, e: &dyn std::fmt::Display| {
            PipelineError::fatal(
                format!(
                    "cannot read the committed position {key:?} in the offsets topic {}: {e}",
                    committed_topic(config)
                ),
                "the offsets topic (delivery.offsets_topic) holds records sluice did not write: give this pipeline a topic of its own",
            )
        };
        if let Some(value) = values.get(config.name.as_bytes()) {
            let record: StreamRecord =
                serde_json::from_slice(value).map_err(|e| unreadable(&config.name, &e))?;
            let lsn: Lsn = record
                .commit_lsn
                .parse()
                .map_err(|e| unreadable(&config.name, &e))?;
            if record.system_identifier == system_identifier {
                committed.stream = Some((lsn, record.tx_index));
            } else {
                tracing::warn!(
                    recorded = record.system_identifier,
                    found = system_identifier,
                    "the committed position in the offsets topic is of another PostgreSQL server: ignoring it"
                );
            }
        }
        let snapshot_key = format!("{}.snapshot", config.name);
        if let Some(value) = values.get(snapshot_key.as_bytes()) {
            let record: SnapshotRecord =
                serde_json::from_slice(value).map_err(|e| unreadable(&snapshot_key, &e))?;
            if record.system_identifier == system_identifier
                && record.consistent_point == consistent_point.to_string()
            {
                committed.snapshot_done = record.done;
            }
        }
        tracing::info!(
            offsets_topic = committed.offsets_topic,
            position = committed
                .stream
                .map_or_else(|| "none".to_owned(), |(lsn, i)| format!("{lsn}:{i}")),
            snapshot_chunks_done = committed.snapshot_done.len(),
            "exactly once: read the committed position"
        );
        Ok(committed)
    }

    /// The stream's transactions: the offsets record is the position of a transaction's
    /// newest record (from its position headers).
    pub fn stream_transactions(&self, config: &PgPipelineConfig) -> Transactions {
        let pipeline = self.pipeline.clone();
        let system_identifier = self.system_identifier.clone();
        Transactions {
            offsets_topic: Arc::from(self.offsets_topic.as_str()),
            key: Arc::from(self.pipeline.as_bytes()),
            position_value: Arc::new(move |record: &OutRecord| {
                let (commit_lsn, tx_index) = record_position(record)?;
                serde_json::to_vec(&StreamRecord {
                    pipeline: pipeline.clone(),
                    system_identifier: system_identifier.clone(),
                    commit_lsn: commit_lsn.to_string(),
                    tx_index,
                })
                .ok()
            }),
            interval: Duration::from_millis(config.delivery.transaction_interval_ms),
            max_bytes: config.delivery.transaction_max_bytes,
        }
    }

    /// The snapshot's transactions: the offsets record lists the finished chunks.
    pub fn snapshot_transactions(&self, config: &PgPipelineConfig) -> SnapshotTransactions {
        let pipeline = self.pipeline.clone();
        let system_identifier = self.system_identifier.clone();
        let consistent_point = self.consistent_point.to_string();
        SnapshotTransactions {
            offsets_topic: Arc::from(self.offsets_topic.as_str()),
            key: Arc::from(format!("{}.snapshot", self.pipeline).into_bytes()),
            done: self.snapshot_done.clone(),
            value: Box::new(move |done: &[usize]| {
                serde_json::to_vec(&SnapshotRecord {
                    pipeline: pipeline.clone(),
                    system_identifier: system_identifier.clone(),
                    consistent_point: consistent_point.clone(),
                    done: done.to_vec(),
                })
                .unwrap_or_default()
            }),
            interval: Duration::from_millis(config.delivery.transaction_interval_ms),
        }
    }
}

/// What the initial snapshot needs to commit chunks exactly once.
pub struct SnapshotTransactions {
    /// The compacted topic of committed positions.
    pub offsets_topic: Arc<str>,
    /// The snapshot record's key.
    pub key: Arc<[u8]>,
    /// The chunks committed as finished by earlier runs.
    pub done: Vec<usize>,
    /// The snapshot record's value for the finished chunks.
    pub value: crate::delivery::exactly_once::ChunksValue,
    /// How often a transaction commits (once the chunks in it are whole).
    pub interval: Duration,
}

fn committed_topic(config: &PgPipelineConfig) -> String {
    config
        .delivery
        .offsets_topic
        .clone()
        .unwrap_or_else(|| exactly_once::default_offsets_topic(&config.kafka.topic_prefix))
}

/// A record's (commit LSN, index) from its position headers.
fn record_position(record: &OutRecord) -> Option<(Lsn, u32)> {
    let header = |name: &str| {
        record
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    let commit_lsn: u64 = header(crate::event::HEADER_COMMIT_LSN)?.parse().ok()?;
    let index: u32 = header(crate::event::HEADER_TX_INDEX)?.parse().ok()?;
    Some((Lsn(commit_lsn), index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_position_comes_from_its_headers() {
        let record = OutRecord {
            topic: Arc::from("t"),
            key: None,
            value: None,
            headers: vec![
                (crate::event::HEADER_COMMIT_LSN.into(), "4096".to_owned()),
                (crate::event::HEADER_LSN.into(), "4000".to_owned()),
                (crate::event::HEADER_TX_INDEX.into(), "7".to_owned()),
            ],
        };
        assert_eq!(record_position(&record), Some((Lsn(4096), 7)));
        let bare = OutRecord {
            headers: Vec::new(),
            ..record
        };
        assert_eq!(record_position(&bare), None);
    }
}
