//! The MySQL source's changes as the delivery core encodes them: row changes, schema changes and
//! transaction boundaries.

use std::sync::Arc;

use super::config::MysqlPipelineConfig;
use super::ddl::SchemaChange;
use super::encode::{self, BinlogSource, RowChange};
use crate::delivery::{Encode, FailedChange, Origin};
use crate::kafka::OutRecord;
use crate::runtime::metrics::TableMetrics;

/// Encodes the MySQL source's changes.
pub struct MysqlEncoder {
    pub(super) prefix: Arc<str>,
    pub(super) tombstones: bool,
    pub(super) now_micros: i64,
    /// The pipeline's configuration (`[kafka.events]`).
    pub(super) events: Arc<MysqlPipelineConfig>,
    /// The schema-change topic's schemas (JSON with schemas, Avro).
    pub(super) schema_changes: Option<Arc<crate::event::schema::RenderedSchemas>>,
}

/// The MySQL source's change in the delivery core: a row change or a schema change.
pub enum MysqlChange {
    /// A row event's row.
    Row(RowChange),
    /// A DDL statement on a captured database or table.
    Schema(Box<StreamedSchemaChange>),
    /// A transaction's BEGIN or END on the transaction topic (`provide_transaction_metadata`),
    /// in its topic's formats.
    Transaction(Box<TransactionEvent>),
}

/// A transaction boundary record and where it is in the binlog.
pub struct TransactionEvent {
    /// The record.
    pub record: OutRecord,
    /// Its `source` (the place of the transaction's first change, or of its commit).
    pub source: BinlogSource,
    /// The counters of the transaction topic.
    pub metrics: Arc<TableMetrics>,
}

/// A streamed schema change and where it is in the binlog.
pub struct StreamedSchemaChange {
    /// The event.
    pub change: SchemaChange,
    /// Its `source` (the QUERY event's place).
    pub source: BinlogSource,
    /// `<topic_prefix>`.
    pub topic: Arc<str>,
    /// The counters of the schema-change topic.
    pub metrics: Arc<TableMetrics>,
}

impl Encode<MysqlChange> for MysqlEncoder {
    fn encode(&self, change: &MysqlChange, out: &mut Vec<OutRecord>) -> Origin {
        match change {
            MysqlChange::Row(change) => {
                encode::encode(change, &self.prefix, self.tombstones, self.now_micros, out);
            }
            MysqlChange::Schema(schema) => out.push(super::schema::wrap_schema_change(
                self.schema_changes.as_deref(),
                &self.events.kafka.events,
                schema
                    .change
                    .record(&schema.topic, &self.prefix, &schema.source, self.now_micros),
            )),
            MysqlChange::Transaction(event) => out.push(event.record.clone()),
        }
        origin(change)
    }

    fn describe(&self, change: &MysqlChange, reason: &str) -> FailedChange {
        let (source, table, topic) = match change {
            MysqlChange::Row(change) => (
                &change.source,
                format!("{}.{}", change.table.database, change.table.table),
                Arc::clone(&change.table.topic),
            ),
            MysqlChange::Schema(schema) => (
                &schema.source,
                schema.change.database.clone(),
                Arc::clone(&schema.topic),
            ),
            MysqlChange::Transaction(event) => (
                &event.source,
                "(transaction)".to_owned(),
                Arc::clone(&event.record.topic),
            ),
        };
        let position = format!(
            "binlog {}:{} row {}, table {table}",
            source.file, source.pos, source.row
        );
        let description = serde_json::to_vec(&serde_json::json!({
            "table": table,
            "file": &*source.file,
            "pos": source.pos,
            "row": source.row,
            "gtid": source.gtid.as_deref(),
            "error": reason,
        }))
        .unwrap_or_default();
        FailedChange {
            reason: reason.to_owned(),
            topic,
            position,
            description,
            origin: origin(change),
        }
    }
}

pub(super) fn origin(change: &MysqlChange) -> Origin {
    match change {
        MysqlChange::Row(change) => Origin {
            commit_unix_micros: i64::from(change.source.ts_sec) * 1_000_000,
            table: Arc::clone(&change.table.metrics),
        },
        MysqlChange::Schema(schema) => Origin {
            commit_unix_micros: i64::from(schema.source.ts_sec) * 1_000_000,
            table: Arc::clone(&schema.metrics),
        },
        MysqlChange::Transaction(event) => Origin {
            commit_unix_micros: i64::from(event.source.ts_sec) * 1_000_000,
            table: Arc::clone(&event.metrics),
        },
    }
}
