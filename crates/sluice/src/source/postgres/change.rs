//! A decoded row change, a logical message, and the options they are encoded with.

use super::pgoutput::TupleData;
use super::relation::RelationInfo;
use crate::event::EventOptions;
use crate::event::SnapshotMarker;
use crate::event::TransactionOrder;
use bytes::Bytes;
use sluice_engine::Lsn;
use std::sync::Arc;

/// What happened to a row.
#[derive(Debug)]
pub enum ChangeKind {
    /// Insert.
    Insert {
        /// The new row.
        new: TupleData,
    },
    /// Update.
    Update {
        /// The old row ('O', REPLICA IDENTITY FULL) or old key ('K', when the key changed).
        old: Option<TupleData>,
        /// Whether `old` holds only key columns.
        old_is_key_only: bool,
        /// The new row.
        new: TupleData,
        /// Whether the key changed: then the update is written as delete + tombstone + create.
        key_changed: bool,
    },
    /// Delete.
    Delete {
        /// The old row or key.
        old: TupleData,
        /// Whether `old` holds only key columns.
        old_is_key_only: bool,
    },
    /// Truncate.
    Truncate,
    /// A row read by a snapshot (`op: "r"`).
    Read {
        /// The row.
        row: TupleData,
        /// `source.snapshot`: where the row is in the snapshot (`"incremental"` for an
        /// incremental snapshot's rows).
        marker: SnapshotMarker,
    },
}

/// One decoded row change with its position.
#[derive(Debug)]
pub struct RowChange {
    /// The table.
    pub relation: Arc<RelationInfo>,
    /// What happened.
    pub kind: ChangeKind,
    /// The LSN of the transaction's commit record.
    pub commit_lsn: Lsn,
    /// The change's own LSN.
    pub lsn: Lsn,
    /// Index of the change's first record within its transaction.
    pub tx_index: u32,
    /// Transaction id.
    pub xid: u32,
    /// Commit time, Unix microseconds.
    pub commit_unix_micros: i64,
    /// The end LSN of the last transaction the stream saw commit before this change (none yet
    /// since the start, or a snapshot's row): the first of Debezium's `source.sequence`.
    pub last_commit_end: Option<Lsn>,
    /// Bytes the change holds in flight, as charged to the budget.
    pub size_hint: usize,
    /// Debezium's `transaction` block (`provide_transaction_metadata`), of the change's first
    /// event; `None`: `"transaction":null`.
    pub transaction: Option<TransactionOrder>,
}

/// A logical decoding message written with `pg_logical_emit_message`.
#[derive(Debug)]
pub struct LogicalMessage {
    /// The message's topic.
    pub topic: Arc<str>,
    /// Prefix.
    pub prefix: String,
    /// Content.
    pub content: Bytes,
    /// Its LSN.
    pub lsn: Lsn,
    /// Commit LSN of its transaction (its own LSN when non-transactional).
    pub commit_lsn: Lsn,
    /// Index within the transaction.
    pub tx_index: u32,
    /// Transaction id, for transactional messages.
    pub xid: Option<u32>,
    /// Commit time (or receive time for non-transactional messages), Unix microseconds.
    pub commit_unix_micros: i64,
    /// As [`RowChange::last_commit_end`].
    pub last_commit_end: Option<Lsn>,
    /// The message topic's schemas (JSON with schemas, Avro: registered before the message
    /// is queued); `None` for bare JSON.
    pub schemas: Option<Arc<crate::event::schema::RenderedSchemas>>,
}

impl RowChange {
    /// How many Kafka records the change becomes.
    pub fn record_count(&self, tombstones: bool) -> u32 {
        let with_tombstone = 1 + u32::from(tombstones);
        match &self.kind {
            ChangeKind::Insert { .. } | ChangeKind::Truncate | ChangeKind::Read { .. } => 1,
            ChangeKind::Update {
                key_changed: true, ..
            } => with_tombstone + 1,
            ChangeKind::Update { .. } => 1,
            ChangeKind::Delete { .. } => with_tombstone,
        }
    }
}

/// Encoding choices fixed for a pipeline.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Follow deletes with a tombstone.
    pub tombstones: bool,
    /// `[kafka.events]`.
    pub events: EventOptions,
    /// Processing time for the envelope's `ts_ms`, `ts_us`, `ts_ns`, Unix nanoseconds.
    pub now_unix_nanos: i64,
}
