//! The initial snapshot: every captured table's current rows as `op: "r"` events, consistent
//! with the stream that follows.
//!
//! When the slot is created, `CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT` returns the slot's
//! consistent point and the name of a snapshot of the database exactly at that point. The
//! snapshot connection imports it (`SET TRANSACTION SNAPSHOT`) before the replication
//! connection runs any other command, reads every table with a cursor, and publishes the rows
//! through the same producer and in-flight budget as the stream. Only when every snapshot
//! record is acknowledged does the pipeline start streaming from the consistent point, so per
//! key the snapshot row precedes every later change, no change is lost and none counted twice.
//!
//! A snapshot interrupted by a crash is marked pending in the state file and runs again on the
//! next start, under a fresh snapshot: the slot has not moved past the consistent point (nothing
//! is confirmed during a snapshot), so the stream that follows replays every change since, and
//! the newest event per key is the row's current state. (Resuming at the first unfinished chunk
//! and parallel chunked reads are not built yet: the whole snapshot is read again.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::error::KafkaError;
use sluice_engine::{InFlightBudget, Lsn, Seq};
use tokio::sync::mpsc;
use tokio_postgres::SimpleQueryMessage;

use super::encode::{
    ChangeKind, EncodeOptions, RelationInfo, RowChange, SourceIdentity, encode_change,
};
use super::pgoutput::{Datum, ReplicaIdentity, TupleData};
use super::setup::{CapturedTable, PgCatalog, quote_ident};
use super::stream::{SendError, try_send};
use crate::admin::metrics::{self as m, TableMetrics};
use crate::config::PipelineConfig;
use crate::error::{PipelineError, classify_pg};
use crate::kafka::{Delivery, DeliveryEvent, PipelineProducer};

/// What a snapshot needs from the run.
pub struct SnapshotContext<'a> {
    /// The pipeline.
    pub config: &'a PipelineConfig,
    /// Topic prefix and database, for the envelopes.
    pub identity: &'a SourceIdentity,
    /// The producer (shared with the stream that follows).
    pub producer: &'a Arc<PipelineProducer>,
    /// Its delivery reports.
    pub deliveries: &'a mut mpsc::UnboundedReceiver<DeliveryEvent>,
    /// The in-flight budget.
    pub budget: &'a InFlightBudget,
    /// The position the snapshot is consistent with (the records' `commit_lsn`).
    pub consistent_point: Lsn,
    /// Stop early.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
}

/// Reads `tables` under `exported` (a snapshot name from the slot's creation) or, when `None`,
/// under a fresh repeatable-read snapshot, and publishes every row. Returns the rows read once
/// every record is acknowledged.
///
/// # Errors
///
/// Retryable on connection trouble (the snapshot then runs again), fatal when Kafka refuses a
/// record for good.
pub async fn run(
    ctx: SnapshotContext<'_>,
    tables: &[CapturedTable],
    exported: Option<&str>,
) -> Result<u64, PipelineError> {
    let catalog = PgCatalog::connect(ctx.config).await?;
    let client = catalog.client();
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await
        .map_err(|e| classify_pg("cannot begin the snapshot transaction", e))?;
    if let Some(name) = exported {
        client
            .batch_execute(&format!(
                "SET TRANSACTION SNAPSHOT '{}'",
                name.replace('\'', "")
            ))
            .await
            .map_err(|e| classify_pg("cannot import the slot's exported snapshot", e))?;
    }
    let started = Instant::now();
    let mut total = 0u64;
    let mut tx_index = 0u32;
    let fetch = ctx.config.postgres().snapshot_fetch_rows;
    tracing::info!(
        tables = tables.len(),
        consistent_point = %ctx.consistent_point,
        exported = exported.is_some(),
        "snapshot: starting"
    );
    let mut ctx = ctx;
    for table in tables {
        let relation = Arc::new(relation_info(&catalog, ctx.identity, table).await?);
        let columns: Vec<String> = relation
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect();
        client
            .batch_execute(&format!(
                "DECLARE sluice_snapshot NO SCROLL CURSOR FOR SELECT {} FROM {}.{}",
                if columns.is_empty() {
                    "NULL".to_owned()
                } else {
                    columns.join(", ")
                },
                quote_ident(&table.schema),
                quote_ident(&table.table)
            ))
            .await
            .map_err(|e| {
                classify_pg(
                    format!("cannot read {} for the snapshot", table.qualified()),
                    e,
                )
            })?;
        let rows_metric = metrics::counter!(m::SNAPSHOT_ROWS, "table" => table.qualified());
        let mut table_rows = 0u64;
        let mut last_log = Instant::now();
        loop {
            if ctx.shutdown.is_cancelled() {
                return Err(PipelineError::retryable(
                    "stopped during the snapshot (it runs again on the next start)",
                    std::io::Error::other("shutdown"),
                ));
            }
            let messages = client
                .simple_query(&format!("FETCH FORWARD {fetch} FROM sluice_snapshot"))
                .await
                .map_err(|e| {
                    classify_pg(
                        format!("cannot read {} for the snapshot", table.qualified()),
                        e,
                    )
                })?;
            let rows: Vec<TupleData> = messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(TupleData(
                        (0..row.len())
                            .map(|i| match row.get(i) {
                                Some(text) => Datum::Text(Bytes::copy_from_slice(text.as_bytes())),
                                None => Datum::Null,
                            })
                            .collect(),
                    )),
                    _ => None,
                })
                .collect();
            if rows.is_empty() {
                break;
            }
            let count = rows.len() as u64;
            publish_rows(&mut ctx, &relation, rows, &mut tx_index).await?;
            table_rows += count;
            total += count;
            rows_metric.increment(count);
            if last_log.elapsed() >= Duration::from_secs(10) {
                last_log = Instant::now();
                tracing::info!(table = %table.qualified(), rows = table_rows, "snapshot: progress");
            }
        }
        client
            .batch_execute("CLOSE sluice_snapshot")
            .await
            .map_err(|e| classify_pg("cannot close the snapshot cursor", e))?;
        tracing::info!(table = %table.qualified(), rows = table_rows, "snapshot: table done");
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| classify_pg("cannot end the snapshot transaction", e))?;
    // Every record acknowledged before the stream starts.
    while ctx.budget.in_flight_records() > 0 {
        drain(&mut ctx, true).await?;
    }
    tracing::info!(
        rows = total,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot: done; streaming from the consistent point"
    );
    Ok(total)
}

/// The relation as the encoder needs it, from the catalog (columns in attribute order,
/// generated columns left out as pgoutput does).
async fn relation_info(
    catalog: &PgCatalog,
    identity: &SourceIdentity,
    table: &CapturedTable,
) -> Result<RelationInfo, PipelineError> {
    let rows = catalog
        .client()
        .query(
            "SELECT a.attname::text, a.atttypid::oid, a.atttypmod, c.oid \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attgenerated = '' \
             ORDER BY a.attnum",
            &[&table.schema, &table.table],
        )
        .await
        .map_err(|e| classify_pg("cannot read the table's columns", e))?;
    let oid: u32 = rows.first().map_or(0, |r| r.get(3));
    let key_names = catalog.primary_key(oid).await?;
    let qualified = table.qualified();
    Ok(RelationInfo::new(
        identity,
        &table.schema,
        &table.table,
        rows.iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    r.get::<_, u32>(1),
                    r.get::<_, i32>(2),
                )
            })
            .collect(),
        &key_names,
        match table.replica_identity {
            'f' => ReplicaIdentity::Full,
            'n' => ReplicaIdentity::Nothing,
            'i' => ReplicaIdentity::Index,
            _ => ReplicaIdentity::Default,
        },
        Arc::new(TableMetrics::new(&qualified)),
    ))
}

/// Encodes (on the blocking pool) and produces one fetch of rows within the budget.
async fn publish_rows(
    ctx: &mut SnapshotContext<'_>,
    relation: &Arc<RelationInfo>,
    rows: Vec<TupleData>,
    tx_index: &mut u32,
) -> Result<(), PipelineError> {
    let options = EncodeOptions {
        tombstones: false,
        now_unix_ms: now_micros() / 1000,
    };
    let commit_unix_micros = now_micros();
    let consistent_point = ctx.consistent_point;
    let first_index = *tx_index;
    *tx_index = tx_index.wrapping_add(rows.len() as u32);
    let encode_relation = Arc::clone(relation);
    let records = tokio::task::spawn_blocking(move || {
        let mut out = Vec::with_capacity(rows.len());
        for (n, row) in rows.into_iter().enumerate() {
            let change = RowChange {
                size_hint: 0,
                relation: Arc::clone(&encode_relation),
                kind: ChangeKind::Read { row },
                commit_lsn: consistent_point,
                lsn: consistent_point,
                tx_index: first_index.wrapping_add(n as u32),
                xid: 0,
                commit_unix_micros,
            };
            encode_change(&change, options, &mut out);
        }
        out
    })
    .await
    .map_err(|e| PipelineError::retryable("the snapshot encoder failed", e))?;
    for record in records {
        let size = record.len().max(1);
        let permit = loop {
            if let Some(permit) = ctx.budget.try_acquire(size) {
                break permit;
            }
            // Full: wait for acknowledgements to free the budget.
            drain(ctx, true).await?;
        };
        let delivery = Box::new(Delivery {
            seq: Seq(0),
            permit: Arc::new(permit),
            commit_unix_micros,
            table: Arc::clone(&relation.metrics),
            bytes: u32::try_from(record.len()).unwrap_or(u32::MAX),
        });
        let mut pending = (record, delivery);
        loop {
            match try_send(ctx.producer, pending.0, pending.1) {
                Ok(()) => break,
                Err(SendError::QueueFull(record, delivery)) => {
                    pending = (record, delivery);
                    drain(ctx, true).await?;
                }
                Err(SendError::Refused(error, record, _)) => {
                    return Err(refused(&error, &record.topic));
                }
            }
        }
    }
    drain(ctx, false).await
}

/// Takes delivery reports: acknowledged records free their budget; a refused one stops the
/// snapshot. With `wait`, waits (up to 100 ms) for at least one report.
async fn drain(ctx: &mut SnapshotContext<'_>, wait: bool) -> Result<(), PipelineError> {
    let mut events = Vec::new();
    if wait {
        let _ = tokio::time::timeout(
            Duration::from_millis(100),
            ctx.deliveries.recv_many(&mut events, 4096),
        )
        .await;
    }
    while let Ok(event) = ctx.deliveries.try_recv() {
        events.push(event);
    }
    for event in events {
        match event {
            DeliveryEvent::Acked(delivery) => {
                delivery.table.records.increment(1);
                delivery.table.bytes.increment(u64::from(delivery.bytes));
            }
            DeliveryEvent::Failed { error, record, .. } => {
                return Err(refused(&error, &record.topic));
            }
        }
    }
    if ctx.shutdown.is_cancelled() {
        return Err(PipelineError::retryable(
            "stopped during the snapshot (it runs again on the next start)",
            std::io::Error::other("shutdown"),
        ));
    }
    Ok(())
}

fn refused(error: &KafkaError, topic: &str) -> PipelineError {
    PipelineError::fatal(
        format!("Kafka refused a snapshot record for topic {topic}: {error}"),
        super::stream::rejection_hint(error),
    )
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
