//! A resumed initial snapshot: the rows the stream will deliver, left out of the snapshot.
//!
//! The first run of a snapshot reads every chunk under the snapshot the slot exported at its
//! consistent point `C`: each row as it was at `C`, and the stream that follows delivers every
//! change committed after `C`. The exported snapshot dies with its connection, so after a crash
//! the unfinished chunks are read under a fresh snapshot `S`, which already shows the changes
//! committed between `C` and `S` — and the stream delivers them again. A row inserted in that
//! window would arrive as `op: "r"` and then as `op: "c"`: a duplicate, even for an exactly-once
//! consumer.
//!
//! So a resumed snapshot first pins `S` (one snapshot, exported to every worker), takes the WAL
//! position `P` after it (every transaction `S` sees committed before `P`), waits until the WAL
//! is flushed to `P`, and peeks at the slot (`pg_logical_slot_peek_binary_changes`, which reads
//! from `C` and confirms nothing) up to `P`: every key the transactions between `C` and `P`
//! inserted, updated or deleted is noted, and the resumed chunks leave those rows out. Each of
//! them is delivered by the stream alone (the key's changes after `C`, in commit order); every
//! row unchanged since `C` is delivered once, as `op: "r"`, as under the exported snapshot. A
//! transaction committed before `P` but after `S` is noted too: its rows, read as they were
//! before it, are left out as well, and the stream delivers its change; nothing is lost by
//! leaving out more.
//!
//! Tables without a primary key have no key to note: there the row images the window added
//! (inserts, the new side of updates) minus the ones it removed (deletes and the old side of
//! updates, with `REPLICA IDENTITY FULL`) are counted per image, and as many rows of each image
//! are left out as the window added net. A row whose image cannot be known (an unchanged TOASTed
//! value without the old row) is not left out: it may arrive twice, and a warning says so.
//!
//! The noted keys are kept as 128-bit hashes (SipHash-1-3 under two random keys: unpredictable
//! to whoever writes the rows), 16 bytes per changed key plus the set's overhead; a window with
//! many millions of changed keys needs memory in proportion, logged when the peek ends.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_engine::Lsn;

use super::config::PgPipelineConfig;
use super::encode::{ColumnTreatment, RelationInfo};
use super::pgoutput::{self, Datum, PgOutputMessage, TupleData};
use super::setup::PgCatalog;
use crate::error::{PipelineError, classify_pg};

/// How long the WAL may take to be flushed up to the resumed snapshot's position (the WAL
/// writer flushes asynchronous commits within `wal_writer_delay`, 200 ms by default).
const FLUSH_WAIT: Duration = Duration::from_secs(60);

/// How long to wait for the WAL writer before a synchronous commit flushes the WAL.
const NUDGE_AFTER: Duration = Duration::from_secs(1);

/// The WAL position after a fresh snapshot: every transaction the snapshot sees has committed
/// before it. On a primary the insert position (a commit record is inserted before the
/// transaction becomes visible, also with `synchronous_commit = off`); on a standby what it
/// replayed.
pub const POSITION_SQL: &str = "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
     ELSE pg_current_wal_insert_lsn() END)::text";

/// The columns a table's rows are recognised by: its key, or every column the snapshot reads
/// when it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Column names, sorted (both sides hash them in this order).
    columns: Vec<String>,
    /// Whether `columns` are a key (each row at most once) or the whole row (a multiset).
    keyed: bool,
}

impl Identity {
    /// The identity of `relation`'s rows as the snapshot reads them: the key columns, or every
    /// column read (not excluded) when the table has no key.
    pub fn of(relation: &RelationInfo) -> Self {
        let keyed = !relation.key_columns.is_empty();
        let mut columns: Vec<String> = if keyed {
            relation
                .key_columns
                .iter()
                .map(|&i| relation.columns[i].name.clone())
                .collect()
        } else {
            relation
                .columns
                .iter()
                .filter(|c| c.treatment != ColumnTreatment::Exclude)
                .map(|c| c.name.clone())
                .collect()
        };
        columns.sort();
        Self { columns, keyed }
    }
}

/// Rows changed between the consistent point and the resumed snapshot, per table.
#[derive(Debug, Default)]
pub struct ChangedRows {
    hasher: RowHasher,
    tables: HashMap<String, TableChanges>,
}

#[derive(Debug)]
struct TableChanges {
    identity: Identity,
    /// Keyed tables: the keys changed.
    keys: HashSet<u128>,
    /// Tables without a key: images added net, counted down as rows are left out.
    images: std::sync::Mutex<HashMap<u128, i64>>,
}

/// Counts of what a peek found, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PeekSummary {
    /// Changes to captured tables read.
    changes: u64,
    /// Changes whose row could not be recognised (may arrive twice).
    unknown: u64,
}

impl ChangedRows {
    /// Nothing changed (a snapshot under the exported snapshot, or nothing left to read).
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads, from the slot, the rows of `tables` changed by the transactions that committed
    /// between the slot's consistent point and `upto`. The slot must not be streaming.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble (the slot busy included) or when the WAL is not flushed
    /// to `upto` in time.
    pub async fn read(
        config: &PgPipelineConfig,
        upto: Lsn,
        tables: HashMap<String, Identity>,
    ) -> Result<Self, PipelineError> {
        let catalog = PgCatalog::connect(config).await?;
        let client = catalog.client();
        wait_for_flush(client, upto).await?;
        // The peek returns nothing before the server decoded the whole window: no statement
        // timeout for it (its connection has TCP keepalives).
        client
            .batch_execute("SET statement_timeout = 0")
            .await
            .map_err(|e| classify_pg("cannot prepare the slot's peek", e))?;
        let upto_text = upto.to_string();
        let slot = config.slot_name();
        let publication = config.publication_name();
        let started = Instant::now();
        let rows = client
            .query_raw(
                "SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL, \
                 'proto_version', '1', 'publication_names', $3)",
                [
                    &slot as &(dyn tokio_postgres::types::ToSql + Sync),
                    &upto_text,
                    &publication,
                ],
            )
            .await
            .map_err(|e| classify_pg("cannot peek at the slot's changes", e))?;
        let mut changed = Self {
            hasher: RowHasher::default(),
            tables: tables
                .into_iter()
                .map(|(table, identity)| {
                    (
                        table,
                        TableChanges {
                            identity,
                            keys: HashSet::new(),
                            images: std::sync::Mutex::new(HashMap::new()),
                        },
                    )
                })
                .collect(),
        };
        let mut relations: HashMap<u32, (String, Vec<String>)> = HashMap::new();
        let mut summary = PeekSummary::default();
        let mut rows = std::pin::pin!(rows);
        while let Some(row) = rows
            .try_next()
            .await
            .map_err(|e| classify_pg("cannot peek at the slot's changes", e))?
        {
            let data: Vec<u8> = row.get(0);
            let message = pgoutput::decode(Bytes::from(data)).map_err(|e| {
                PipelineError::retryable("the slot's peek returned an undecodable message", e)
            })?;
            changed.note(message, &mut relations, &mut summary);
        }
        let keys: usize = changed.tables.values().map(|t| t.keys.len()).sum();
        tracing::info!(
            changes = summary.changes,
            changed_keys = keys,
            unrecognised = summary.unknown,
            elapsed_ms = started.elapsed().as_millis() as u64,
            upto = %upto,
            "snapshot: read the changes since the consistent point; their rows come from the stream alone"
        );
        if summary.unknown > 0 {
            tracing::warn!(
                changes = summary.unknown,
                "snapshot: some changed rows of tables without a primary key could not be recognised (an unchanged TOASTed value without REPLICA IDENTITY FULL): they may arrive twice, as op \"r\" and as the change"
            );
        }
        Ok(changed)
    }

    /// Notes one decoded message of the window.
    fn note(
        &mut self,
        message: PgOutputMessage,
        relations: &mut HashMap<u32, (String, Vec<String>)>,
        summary: &mut PeekSummary,
    ) {
        let (relation_id, added, removed) = match message {
            PgOutputMessage::Relation(relation) => {
                let name = format!("{}.{}", relation.namespace, relation.name);
                let columns = relation.columns.into_iter().map(|c| c.name).collect();
                relations.insert(relation.id, (name, columns));
                return;
            }
            PgOutputMessage::Insert { relation_id, new } => (relation_id, Some(new), Vec::new()),
            PgOutputMessage::Update {
                relation_id,
                old,
                key,
                new,
            } => (relation_id, Some(new), old.into_iter().chain(key).collect()),
            PgOutputMessage::Delete {
                relation_id,
                old,
                key,
            } => (relation_id, None, old.into_iter().chain(key).collect()),
            _ => return,
        };
        let Some((name, columns)) = relations.get(&relation_id) else {
            return;
        };
        let Some(table) = self.tables.get_mut(name) else {
            return;
        };
        summary.changes += 1;
        let value_of = |tuple: &TupleData, column: &str| -> Option<Datum> {
            let index = columns.iter().position(|c| c == column)?;
            tuple.0.get(index).cloned()
        };
        let identity = &table.identity;
        if identity.keyed {
            // Every key the change touches: the new row's, and the old one's when the key
            // changed (or the row was deleted).
            for tuple in added.iter().chain(removed.iter()) {
                let values: Option<Vec<Datum>> = identity
                    .columns
                    .iter()
                    .map(|c| value_of(tuple, c).filter(is_known))
                    .collect();
                if let Some(values) = values {
                    table
                        .keys
                        .insert(self.hasher.hash(&identity.columns, &values));
                }
            }
            return;
        }
        let old = removed.first();
        let images = table
            .images
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(new) = &added {
            // An unchanged TOASTed value is the old row's (sent in full with REPLICA IDENTITY
            // FULL).
            let values: Option<Vec<Datum>> = identity
                .columns
                .iter()
                .map(|c| match value_of(new, c)? {
                    Datum::UnchangedToast => old.and_then(|o| value_of(o, c)).filter(is_known),
                    value => Some(value),
                })
                .collect();
            match values {
                Some(values) => {
                    *images
                        .entry(self.hasher.hash(&identity.columns, &values))
                        .or_default() += 1;
                }
                None => summary.unknown += 1,
            }
        }
        if let Some(old) = old {
            let values: Option<Vec<Datum>> = identity
                .columns
                .iter()
                .map(|c| value_of(old, c).filter(is_known))
                .collect();
            if let Some(values) = values {
                *images
                    .entry(self.hasher.hash(&identity.columns, &values))
                    .or_default() -= 1;
            }
        }
    }

    /// Whether the snapshot leaves out `row` of `table` (read as `relation`'s columns): the
    /// stream delivers its changes. For a table without a key, each call that answers yes uses
    /// up one of the window's added rows of that image.
    pub fn leaves_out(&self, table: &str, relation: &RelationInfo, row: &TupleData) -> bool {
        let Some(changes) = self.tables.get(table) else {
            return false;
        };
        let identity = &changes.identity;
        let values: Option<Vec<Datum>> = identity
            .columns
            .iter()
            .map(|name| {
                let index = relation.columns.iter().position(|c| &c.name == name)?;
                row.0.get(index).cloned()
            })
            .collect();
        let Some(values) = values else {
            return false;
        };
        let hash = self.hasher.hash(&identity.columns, &values);
        if identity.keyed {
            return changes.keys.contains(&hash);
        }
        let mut images = changes
            .images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match images.get_mut(&hash) {
            Some(count) if *count > 0 => {
                *count -= 1;
                true
            }
            _ => false,
        }
    }

    /// Whether nothing is left out.
    pub fn is_empty(&self) -> bool {
        self.tables
            .values()
            .all(|t| t.keys.is_empty() && t.images.lock().map_or(true, |i| i.is_empty()))
    }
}

fn is_known(datum: &Datum) -> bool {
    !matches!(datum, Datum::UnchangedToast)
}

/// 128-bit hashes of rows' identities: two SipHash-1-3 hashers under independent random keys.
/// (A 64-bit hash over millions of keys would make a collision — a row wrongly left out, so
/// lost — possible; 128 bits make it negligible.)
#[derive(Debug, Default)]
struct RowHasher {
    first: RandomState,
    second: RandomState,
}

impl RowHasher {
    fn hash(&self, columns: &[String], values: &[Datum]) -> u128 {
        let mut first = self.first.build_hasher();
        let mut second = self.second.build_hasher();
        for (column, value) in columns.iter().zip(values) {
            for hasher in [&mut first, &mut second] {
                hasher.write_usize(column.len());
                hasher.write(column.as_bytes());
                match value {
                    Datum::Null => hasher.write_u8(0),
                    Datum::UnchangedToast => hasher.write_u8(1),
                    Datum::Text(bytes) => {
                        hasher.write_u8(2);
                        hasher.write_usize(bytes.len());
                        hasher.write(bytes);
                    }
                    Datum::Binary(bytes) => {
                        hasher.write_u8(3);
                        hasher.write_usize(bytes.len());
                        hasher.write(bytes);
                    }
                }
            }
        }
        (u128::from(first.finish()) << 64) | u128::from(second.finish())
    }
}

/// Waits until the server flushed its WAL up to `upto` (a peek reads flushed WAL only). The WAL
/// writer flushes asynchronous commits soon, but records after the last commit (a standby
/// snapshot record of an idle server, say) may wait for the next commit: when the WAL is not
/// flushed after [`NUDGE_AFTER`], a transactional heartbeat message (ignored by the stream)
/// commits synchronously, which flushes everything before it.
async fn wait_for_flush(client: &tokio_postgres::Client, upto: Lsn) -> Result<(), PipelineError> {
    let started = Instant::now();
    let deadline = started + FLUSH_WAIT;
    let mut nudged = false;
    loop {
        let flushed: String = client
            .query_one(
                "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                 ELSE pg_current_wal_flush_lsn() END)::text",
                &[],
            )
            .await
            .map_err(|e| classify_pg("cannot read the server's WAL position", e))?
            .get(0);
        let flushed: Lsn = flushed.parse().map_err(|e| {
            PipelineError::retryable("the server returned an unreadable WAL position", e)
        })?;
        if flushed >= upto {
            return Ok(());
        }
        if !nudged && started.elapsed() >= NUDGE_AFTER {
            nudged = true;
            client
                .batch_execute("SET synchronous_commit = local")
                .await
                .map_err(|e| classify_pg("cannot flush the server's WAL", e))?;
            client
                .execute(
                    "SELECT pg_logical_emit_message(true, $1, '') \
                     WHERE NOT pg_is_in_recovery()",
                    &[&super::config::HEARTBEAT_MESSAGE_PREFIX],
                )
                .await
                .map_err(|e| classify_pg("cannot flush the server's WAL", e))?;
        }
        if Instant::now() >= deadline {
            return Err(PipelineError::retryable(
                format!(
                    "the server's WAL is not flushed up to {upto} after {FLUSH_WAIT:?} (flushed: {flushed})"
                ),
                WalNotFlushed,
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's WAL was not flushed up to the wanted position in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("WAL flush")]
struct WalNotFlushed;
