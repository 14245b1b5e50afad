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
//! - key `<pipeline>.incremental`: the incremental snapshots' progress
//!   `{"pipeline", "system_identifier", "state": {…}}` (as the state store keeps it), written in
//!   the transaction that holds the last row of the chunk it follows. A chunk's rows commit in
//!   one transaction (a [`Boundary`](crate::delivery::exactly_once::Boundary)), so a restart
//!   resumes after the last chunk committed: its rows are never published twice. The state
//!   store's copy is used instead when it is newer (progress without records, such as an
//!   accepted request, reaches it with the slot's confirmation).
//!
//! A record of another server (a different system identifier) or of another snapshot (a
//! different consistent point) is ignored with a warning: its positions mean nothing here.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_engine::Lsn;

use super::config::PgPipelineConfig;
use super::incremental::IncrementalState;
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

/// The incremental snapshots' committed progress.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct IncrementalRecord {
    pipeline: String,
    system_identifier: String,
    state: IncrementalState,
}

/// Exactly once: the incremental snapshots' progress, handed from the stream loop to the
/// transactions that commit the records it follows.
#[derive(Debug, Default)]
pub struct IncrementalOffsets {
    inner: Mutex<IncrementalLog>,
}

#[derive(Debug, Default)]
struct IncrementalLog {
    /// States by the position of the newest record they follow, oldest first.
    states: VecDeque<((Lsn, u32), IncrementalState)>,
    /// Chunks being published, by watermark: the index of their last row.
    chunks: HashMap<Lsn, u32>,
}

impl IncrementalOffsets {
    /// A state that holds once every record up to `position` is committed.
    pub fn record(&self, position: (Lsn, u32), state: IncrementalState) {
        if let Ok(mut log) = self.inner.lock() {
            log.states.push_back((position, state));
        }
    }

    /// A chunk of `rows` rows published at `watermark` (positions `(watermark, 0..rows)`): no
    /// transaction may end inside it.
    pub fn chunk(&self, watermark: Lsn, rows: usize) {
        if rows > 1
            && let Ok(mut log) = self.inner.lock()
        {
            log.chunks
                .insert(watermark, u32::try_from(rows - 1).unwrap_or(u32::MAX));
        }
    }

    /// The newest state that holds once `position` is committed, if one was not handed out
    /// yet (the ones before it are dropped).
    fn state_through(&self, position: (Lsn, u32)) -> Option<IncrementalState> {
        let mut log = self.inner.lock().ok()?;
        let mut newest = None;
        while log.states.front().is_some_and(|(at, _)| *at <= position) {
            newest = log.states.pop_front().map(|(_, state)| state);
        }
        newest
    }

    /// Whether a transaction may end after the record at `position`: not inside a chunk.
    fn boundary(&self, position: (Lsn, u32)) -> bool {
        let Ok(mut log) = self.inner.lock() else {
            return true;
        };
        log.chunks.retain(|watermark, _| *watermark >= position.0);
        match log.chunks.get(&position.0) {
            Some(last) if position.1 < *last => false,
            Some(_) => {
                log.chunks.remove(&position.0);
                true
            }
            None => true,
        }
    }
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
    /// The incremental snapshots' committed progress.
    pub incremental: Option<IncrementalState>,
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
            incremental: None,
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
        let incremental_key = incremental_key(&config.name);
        if let Some(value) = values.get(incremental_key.as_bytes()) {
            let record: IncrementalRecord =
                serde_json::from_slice(value).map_err(|e| unreadable(&incremental_key, &e))?;
            if record.system_identifier == system_identifier {
                committed.incremental = Some(record.state);
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

    /// The stream's transactions: the offsets records are the position of a transaction's
    /// newest record (from its position headers) and the incremental snapshots' progress that
    /// holds once it is committed; no transaction ends inside an incremental chunk.
    pub fn stream_transactions(
        &self,
        config: &PgPipelineConfig,
        incremental: Arc<IncrementalOffsets>,
    ) -> Transactions {
        let pipeline = self.pipeline.clone();
        let system_identifier = self.system_identifier.clone();
        let boundary_log = Arc::clone(&incremental);
        Transactions {
            offsets_topic: Arc::from(self.offsets_topic.as_str()),
            position_value: Arc::new(move |record: &OutRecord| {
                let Some((commit_lsn, tx_index)) = record_position(record) else {
                    return Vec::new();
                };
                let stream = StreamRecord {
                    pipeline: pipeline.clone(),
                    system_identifier: system_identifier.clone(),
                    commit_lsn: commit_lsn.to_string(),
                    tx_index,
                };
                let mut records: Vec<(Vec<u8>, Vec<u8>)> = serde_json::to_vec(&stream)
                    .ok()
                    .map(|value| (pipeline.as_bytes().to_vec(), value))
                    .into_iter()
                    .collect();
                if let Some(state) = incremental.state_through((commit_lsn, tx_index)) {
                    let record = IncrementalRecord {
                        pipeline: pipeline.clone(),
                        system_identifier: system_identifier.clone(),
                        state,
                    };
                    if let Ok(value) = serde_json::to_vec(&record) {
                        records.push((incremental_key(&pipeline).into_bytes(), value));
                    }
                }
                records
            }),
            boundary: Some(Arc::new(move |record: &OutRecord| {
                record_position(record).is_none_or(|position| boundary_log.boundary(position))
            })),
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

/// The incremental progress record's key.
fn incremental_key(pipeline: &str) -> String {
    format!("{pipeline}.incremental")
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

    fn state(table: &str) -> IncrementalState {
        let mut state = IncrementalState::default();
        state.accepted.push_back(table.to_owned());
        state
    }

    #[test]
    fn a_chunk_commits_whole_and_its_state_with_its_last_row() {
        let log = IncrementalOffsets::default();
        log.record((Lsn(100), u32::MAX), state("accepted"));
        log.chunk(Lsn(200), 3);
        log.record((Lsn(200), 2), state("chunk"));
        assert!(log.boundary((Lsn(150), 4)), "outside a chunk");
        assert!(!log.boundary((Lsn(200), 0)));
        assert!(!log.boundary((Lsn(200), 1)));
        assert_eq!(log.state_through((Lsn(200), 1)), Some(state("accepted")));
        assert_eq!(log.state_through((Lsn(200), 1)), None, "handed out once");
        assert!(log.boundary((Lsn(200), 2)), "the chunk's last row");
        assert_eq!(log.state_through((Lsn(200), 2)), Some(state("chunk")));
        // A chunk whose last row was not the last of a batch is forgotten once passed.
        log.chunk(Lsn(300), 5);
        assert!(log.boundary((Lsn(400), 0)));
        assert!(log.inner.lock().unwrap().chunks.is_empty());
        // One row: nothing to keep together.
        log.chunk(Lsn(500), 1);
        assert!(log.boundary((Lsn(500), 0)));
    }

    #[test]
    fn a_record_position_comes_from_its_headers() {
        let record = OutRecord {
            partition: None,
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
