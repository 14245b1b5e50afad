//! Incremental (ad-hoc) snapshots while streaming, with DBLog's watermark technique.
//!
//! A table (or the rows of it a filter selects) is read in primary-key order, one chunk of
//! `incremental_chunk_rows` rows at a time, on a side connection, while the stream goes on.
//! For each chunk:
//!
//! 1. the stream loop opens a **window**: from now on it notes the key of every streamed
//!    change to the table (insert, update — old and new key —, delete; a truncate marks every
//!    key);
//! 2. the side connection reads the chunk (`WHERE key > last key [AND filter] ORDER BY key
//!    LIMIT n`, one statement, so one snapshot taken after the window opened; an
//!    extended-protocol statement, the last key's values bound as parameters, in a read-only
//!    transaction: a request's filter — checked as one condition when it came — can neither
//!    end the statement nor write), keeps the rows,
//!    then writes the **closing watermark** into the WAL: a non-transactional logical message
//!    (`pg_logical_emit_message(false, 'sluice.snapshot', token)`);
//! 3. when the stream reaches the watermark, the chunk's rows whose keys were not noted are
//!    published as `op: "r"` events (`source.snapshot: "incremental"`) at that position, and
//!    the window closes.
//!
//! Why no row of a chunk ever overwrites a newer streamed change: a noted key's row is
//! dropped, and its streamed change (committed before the watermark) is at least as new as
//! the row the chunk read, because every transaction the chunk's snapshot saw committed
//! before the watermark was written. A key not noted had no change between the window's
//! opening and the watermark, so the chunk's row is its current state at the watermark; every
//! later change follows it in the topic. (DBLog opens the window with a low watermark; here
//! it opens when the loop asks for the chunk, which is earlier and so only drops more.)
//!
//! One case that reasoning misses on PostgreSQL: a transaction's commit record is written (and
//! can be decoded and streamed) before the transaction becomes visible to other sessions —
//! microseconds on every commit, as long as a synchronous standby takes to answer when one is
//! configured. A change streamed before the window opened whose transaction was still
//! invisible to the chunk's read would be followed by the chunk's older row. So the chunk is
//! read in a repeatable-read transaction that also returns its snapshot
//! (`txid_current_snapshot()`), the loop remembers the transaction ids of the last
//! [`RECENT_COMMITS`] commits it decoded, and a chunk whose snapshot does not see one of those
//! decoded before its window opened is dropped at its watermark and read again.
//!
//! Progress (the queue of tables, the last key read of the current one) is part of the state
//! file and advances only when the records of a chunk are acknowledged and the slot confirmed
//! past its watermark: after a crash the snapshot resumes at the first chunk not confirmed
//! (a chunk read twice publishes its rows twice; never a row older than a streamed change).
//! Under exactly once, a chunk's rows commit in one Kafka transaction together with the
//! progress that follows them (see [`super::exactly_once`]), so no chunk is published twice.
//! Watermarks from an earlier run carry another token and are ignored.
//!
//! A request with `tombstones` is a **republication** (see `Republication`): after the last
//! chunk, the keys still live in the table's topic but gone from the table get tombstones.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_engine::Lsn;
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::types::Type;

use super::config::{PgPipelineConfig, PostgresSourceConfig};
use super::encode::{ChangeKind, RelationInfo, SourceIdentity, write_key};
use super::pgoutput::{Datum, TupleData};
use super::setup::{PgCatalog, quote_ident};
use crate::config::parse_table_name;
use crate::error::{PipelineError, classify_pg};
use crate::kafka::keys::{HashedSet, hash_key};
use crate::source::incremental::{Chunk, ChunkError, ChunkReader, Progress};
pub use crate::source::incremental::{IncrementalState, Signal, TableSnapshot};
use crate::sql::{SqlDialect, TextParam, check_condition, pg_text_output};

/// The prefix of the closing watermarks' logical messages.
pub const WATERMARK_PREFIX: &str = "sluice.snapshot";

/// How many decoded commits' transaction ids the loop remembers for the visibility check.
pub const RECENT_COMMITS: usize = 8192;

/// A key's column values in text form (`None`: SQL NULL or not sent).
pub type KeyValues = Vec<Option<Bytes>>;

/// The key of `tuple` by the relation's key columns.
pub fn tuple_key(relation: &RelationInfo, tuple: &TupleData) -> KeyValues {
    relation
        .key_columns
        .iter()
        .map(|&index| match tuple.0.get(index) {
            Some(Datum::Text(bytes) | Datum::Binary(bytes)) => Some(bytes.clone()),
            _ => None,
        })
        .collect()
}

/// What the side connection read for one chunk.
pub struct ChunkRows {
    /// The table as the encoder needs it (read from the catalog with the chunk).
    pub relation: Arc<RelationInfo>,
    /// The rows, in key order.
    pub rows: Vec<TupleData>,
    /// The last row's key (text), to continue after.
    pub last_key: Option<Vec<String>>,
    /// Whether the chunk was full (more rows may follow).
    pub full: bool,
    /// The snapshot the rows were read under.
    pub snapshot: XidSnapshot,
}

/// A transaction snapshot as `txid_current_snapshot()` gives it (`xmin:xmax:xip,…`), reduced
/// to 32-bit transaction ids as pgoutput sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidSnapshot {
    xmin: u32,
    xmax: u32,
    in_progress: Vec<u32>,
}

impl XidSnapshot {
    /// Parses `xmin:xmax:xip1,xip2,…` (64-bit, epoch-extended ids).
    pub fn parse(text: &str) -> Option<Self> {
        // The low 32 bits of a 64-bit id are the transaction id.
        let xid = |part: &str| part.trim().parse::<u64>().ok().map(|v| v as u32);
        let mut parts = text.trim().splitn(3, ':');
        let xmin = xid(parts.next()?)?;
        let xmax = xid(parts.next()?)?;
        let in_progress = match parts.next() {
            Some(list) if !list.trim().is_empty() => {
                list.split(',').map(xid).collect::<Option<Vec<u32>>>()?
            }
            _ => Vec::new(),
        };
        Some(Self {
            xmin,
            xmax,
            in_progress,
        })
    }

    /// Whether the transaction `xid` started after the snapshot was taken (its id was assigned
    /// at or past the snapshot's `xmax`; ids compare modulo 2^32).
    pub fn started_after(&self, xid: u32) -> bool {
        (xid.wrapping_sub(self.xmax) as i32) >= 0
    }

    /// Whether the snapshot sees the (committed) transaction `xid`: it had finished before the
    /// snapshot was taken (PostgreSQL's `XidInMVCCSnapshot`, negated; ids compare modulo 2^32).
    pub fn sees(&self, xid: u32) -> bool {
        let precedes = |a: u32, b: u32| (a.wrapping_sub(b) as i32) < 0;
        if precedes(xid, self.xmin) {
            return true;
        }
        if !precedes(xid, self.xmax) {
            return false;
        }
        !self.in_progress.contains(&xid)
    }
}

/// Reads the chunk after `after` of `table` and then writes the closing watermark `token`.
///
/// # Errors
///
/// [`ChunkError`].
pub async fn read_chunk(
    catalog: &PgCatalog,
    identity: &SourceIdentity,
    rules: &PostgresSourceConfig,
    events: &crate::event::EventOptions,
    snapshot: &TableSnapshot,
    limit: u32,
    token: &str,
) -> Result<ChunkRows, ChunkError> {
    let Some((schema, table)) = parse_table_name(&snapshot.table) else {
        return Err(ChunkError::Table(format!(
            "{:?} is not schema.table",
            snapshot.table
        )));
    };
    let relation = super::snapshot::relation_info(catalog, identity, rules, events, schema, table)
        .await
        .map_err(ChunkError::Retry)?;
    if relation.outbox.is_some() {
        return Err(ChunkError::Table(format!(
            "{} is the outbox table: its rows are events, routed when inserted; there is \
             nothing to snapshot",
            snapshot.table
        )));
    }
    if relation.columns.is_empty() {
        return Err(ChunkError::Table(format!(
            "table {} does not exist (any more)",
            snapshot.table
        )));
    }
    if relation.key_columns.is_empty() {
        return Err(ChunkError::Table(format!(
            "table {} has no primary key: incremental snapshots read in key order (add a primary key)",
            snapshot.table
        )));
    }
    let key_names: Vec<String> = relation
        .key_columns
        .iter()
        .map(|&i| relation.columns[i].name.clone())
        .collect();
    let client = catalog.client();
    let types: Vec<String> = client
        .query(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM unnest($2::text[]) WITH ORDINALITY AS k(name, n) \
             JOIN pg_attribute a ON a.attrelid = to_regclass($1::text) AND a.attname = k.name ORDER BY k.n",
            &[&format!("{}.{}", quote_ident(schema), quote_ident(table)), &key_names],
        )
        .await
        .map_err(|e| ChunkError::Retry(classify_pg("cannot read the key's types", e)))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let key_list: Vec<String> = key_names.iter().map(|k| quote_ident(k)).collect();
    let key_list = key_list.join(", ");
    let mut conditions = Vec::new();
    // The last key's values are parameters in text form, cast to the key columns' types.
    let mut params: Vec<TextParam<'_>> = Vec::new();
    if let Some(after) = &snapshot.after {
        let placeholders: Vec<String> = after
            .iter()
            .zip(&types)
            .map(|(value, sql_type)| {
                params.push(TextParam(value));
                format!("${}::{sql_type}", params.len())
            })
            .collect();
        conditions.push(format!("({key_list}) > ({})", placeholders.join(", ")));
    }
    // The pipeline's row filter (as the publication applies it), then the request's: each
    // one condition (checked when the pipeline file was read and when the request came; again
    // here for requests queued by an older version).
    if let Some(filter) = rules.row_filter_of(&relation.rule_names()) {
        conditions.push(format!("({filter})"));
    }
    if let Some(filter) = &snapshot.filter {
        check_condition(SqlDialect::Postgres, filter).map_err(|problem| {
            ChunkError::Table(format!(
                "the request's filter {problem}: a filter is one SQL condition"
            ))
        })?;
        conditions.push(format!("({filter})"));
    }
    // Every column as its type's output function writes it (as the stream's values).
    let columns: Vec<String> = relation
        .columns
        .iter()
        .map(|c| pg_text_output(&quote_ident(&c.name)))
        .collect();
    let sql = format!(
        "SELECT {} FROM {}.{}{} ORDER BY {key_list} LIMIT {limit}",
        columns.join(", "),
        quote_ident(schema),
        quote_ident(table),
        if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        },
    );
    // A repeatable-read, read-only transaction: its snapshot, then the chunk read under it as
    // ONE extended-protocol statement (the server parses it as one statement: a filter cannot
    // end it and run another; and nothing in it can write).
    let read = async {
        let messages = client
            .simple_query(
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SELECT txid_current_snapshot()::text",
            )
            .await?;
        let xid_snapshot = messages.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(XidSnapshot::parse),
            _ => None,
        });
        let typed: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), Type)> = params
            .iter()
            .map(|p| {
                (
                    p as &(dyn tokio_postgres::types::ToSql + Sync),
                    Type::UNKNOWN,
                )
            })
            .collect();
        let rows: Vec<TupleData> = client
            .query_typed(&sql, &typed)
            .await?
            .iter()
            .map(|row| {
                TupleData(
                    (0..row.len())
                        .map(|i| super::snapshot::text_datum(row.get::<_, Option<&str>>(i)))
                        .collect(),
                )
            })
            .collect();
        client.batch_execute("COMMIT").await?;
        Ok::<_, tokio_postgres::Error>((xid_snapshot, rows))
    };
    let (xid_snapshot, rows) = match read.await {
        Ok(read) => read,
        Err(e) => {
            // The transaction is aborted: end it, so the connection can be used again.
            let _ = client.batch_execute("ROLLBACK").await;
            // Waits and conflicts that pass (a lock held by someone else: lock_timeout; a
            // statement_timeout; serialization failures and deadlocks; the server shutting
            // down) are retried; other server errors mean the filter or the table is wrong.
            let transient = e.as_db_error().is_some_and(|db| {
                matches!(
                    db.code().code(),
                    "55P03" | "57014" | "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300"
                )
            });
            return Err(if let Some(db) = e.as_db_error().filter(|_| !transient) {
                ChunkError::Table(format!(
                    "cannot read {}: {} (the filter or the table is wrong)",
                    snapshot.table,
                    db.message()
                ))
            } else {
                ChunkError::Retry(classify_pg("cannot read an incremental snapshot chunk", e))
            });
        }
    };
    let xid_snapshot = xid_snapshot.ok_or_else(|| {
        ChunkError::Retry(PipelineError::retryable(
            "cannot read an incremental snapshot chunk",
            NoXidSnapshot,
        ))
    })?;
    let last_key = rows.last().map(|row| {
        relation
            .key_columns
            .iter()
            .map(|&i| match row.0.get(i) {
                Some(Datum::Text(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect()
    });
    client
        .execute(
            "SELECT pg_logical_emit_message(false, $1, $2)",
            &[&WATERMARK_PREFIX, &token],
        )
        .await
        .map_err(|e| ChunkError::Retry(classify_pg("cannot write a snapshot watermark", e)))?;
    Ok(ChunkRows {
        relation: Arc::new(relation),
        full: rows.len() >= limit as usize,
        rows,
        last_key,
        snapshot: xid_snapshot,
    })
}

/// `partitions = "leaves"`: whether every row of a partition created while sluice was stopped
/// was streamed (see [`super::partition::Creation`]): `horizon` is the last start's
/// transaction snapshot, `now` this start's (both as `txid_current_snapshot()` writes them).
/// False when in doubt (ids too far apart to compare modulo 2^32, a snapshot unreadable, an
/// id frozen or special): a partition snapshotted whose rows were streamed is a duplicate
/// `op: "r"`, one not snapshotted whose rows were not would be rows lost.
pub fn streamed_since(horizon: &str, now: &str, creation: &super::partition::Creation) -> bool {
    let xmax64 = |text: &str| -> Option<u64> { text.split(':').nth(1)?.trim().parse().ok() };
    let (Some(then), Some(then_xmax), Some(now_xmax)) =
        (XidSnapshot::parse(horizon), xmax64(horizon), xmax64(now))
    else {
        return false;
    };
    // Within 2^30 ids of the horizon, 32-bit ids still compare (VACUUM freezes long before
    // 2^31).
    let close = now_xmax >= then_xmax && now_xmax - then_xmax < 1 << 30;
    // Ids below 3 are PostgreSQL's invalid, bootstrap and frozen ones.
    let normal = creation.xid >= 3 && creation.published_by >= 3;
    close && normal && then.sees(creation.published_by) && then.started_after(creation.xid)
}

/// Creates the signal table when configured and missing; returns it as a table to publish.
///
/// # Errors
///
/// Fatal when creating it is refused.
pub async fn create_signal_table(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
) -> Result<Option<super::setup::CapturedTable>, PipelineError> {
    let Some(name) = config.source.signal_table.as_deref() else {
        return Ok(None);
    };
    let Some((schema, table)) = parse_table_name(name) else {
        return Ok(None);
    };
    let qualified = format!("{}.{}", quote_ident(schema), quote_ident(table));
    // Looked up first: a standby (which cannot run CREATE, even IF NOT EXISTS) has it once the
    // primary has.
    let exists = catalog
        .client()
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&qualified])
        .await
        .map_err(|e| classify_pg("cannot look up the signal table", e))?
        .get::<_, bool>(0);
    let signal = super::setup::CapturedTable {
        schema: schema.to_owned(),
        table: table.to_owned(),
        replica_identity: 'd',
        has_primary_key: true,
        ancestors: Vec::new(),
        oid: 0,
    };
    if exists {
        return Ok(Some(signal));
    }
    catalog
        .client()
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {qualified} (id text PRIMARY KEY, type text NOT NULL, data text)"
        ))
        .await
        .map_err(|e| {
            PipelineError::fatal_with(
                format!("cannot create the signal table {name} (source.postgres.signal_table)"),
                format!(
                    "create it yourself (on the primary when source.postgres.url is a standby): CREATE TABLE {qualified} (id text PRIMARY KEY, type text NOT NULL, data text); or grant CREATE on schema {schema}"
                ),
                e,
            )
        })?;
    Ok(Some(signal))
}

/// Adds the signal table to the publication when it isn't in it (a publication sluice does
/// not manage, or one created before the signal table was configured).
///
/// # Errors
///
/// Fatal when adding it is refused.
pub async fn publish_signal_table(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
) -> Result<(), PipelineError> {
    let Some(name) = config.source.signal_table.as_deref() else {
        return Ok(());
    };
    let Some((schema, table)) = parse_table_name(name) else {
        return Ok(());
    };
    let qualified = format!("{}.{}", quote_ident(schema), quote_ident(table));
    let client = catalog.client();
    let publication = config.publication_name();
    let published = client
        .query_opt(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
            &[&publication, &schema, &table],
        )
        .await
        .map_err(|e| classify_pg("cannot read the publication's tables", e))?
        .is_some();
    if !published {
        client
            .batch_execute(&format!(
                "ALTER PUBLICATION {} ADD TABLE {qualified}",
                quote_ident(&publication)
            ))
            .await
            .map_err(|e| {
                PipelineError::fatal_with(
                    format!("cannot add the signal table {name} to publication {publication:?}"),
                    format!(
                        "run ALTER PUBLICATION {} ADD TABLE {qualified} as the publication's owner",
                        quote_ident(&publication)
                    ),
                    e,
                )
            })?;
        tracing::info!(table = name, %publication, "signal table added to the publication");
    }
    Ok(())
}

/// The keys a window noted.
#[derive(Debug, Default)]
pub struct Window {
    /// How many commits the loop had decoded when the window opened.
    pub opened_at: u64,
    /// Keys changed since the window opened.
    pub keys: HashSet<KeyValues>,
    /// A truncate was streamed: every row of the chunk is stale.
    pub truncated: bool,
}

/// What the side connection's task read before writing its watermark.
pub enum ChunkRead {
    /// A chunk of rows.
    Rows(ChunkRows),
    /// A republication's sweep: the keys live in the topic whose hash was not in the key set
    /// copied when the sweep started.
    Missing {
        /// The table.
        relation: Arc<RelationInfo>,
        /// Event keys (bytes as in the topic).
        keys: Vec<Vec<u8>>,
    },
}

/// How long a republication's sweep may take to read the table's topic.
const SWEEP_DEADLINE: Duration = Duration::from_secs(3600);

/// A republication: an incremental snapshot of a whole table that ends with a tombstone for
/// every key still live in the table's topic but no longer in the table (rows deleted while
/// their deletes did not reach the topic: a slot recreated, a topic restored from elsewhere,
/// `skipped_operations`), so a compacted topic can be rebuilt without replaying history.
///
/// While the table's chunks run, the loop keeps the hashes ([`hash_key`]) of the event keys
/// the table holds: every row a chunk publishes, every key a streamed insert or update writes;
/// a streamed delete removes its key, a truncate all. After the last chunk, a side task reads
/// the topic from the beginning to its high watermarks (taken then), collects the keys whose
/// newest record has a value and whose hash is not in a copy of the set, and writes a closing
/// watermark; at the watermark the keys still not in the set (changes streamed during the read
/// are in it by then) get tombstones, in stream order: a key inserted after the watermark
/// follows its tombstone.
///
/// Memory: the set, 8 bytes per row (about 16 MiB per million rows with the table's slack),
/// twice during the sweep (the copy), and the missing keys. The set is not in the state file:
/// after a restart the table's republication starts over from its first chunk.
struct Republication {
    request: String,
    table: String,
    present: HashedSet,
    /// The last chunk is done: the sweep of the topic is next.
    sweeping: bool,
}

impl Republication {
    fn add(&mut self, key: Option<Vec<u8>>) {
        if let Some(key) = key {
            self.present.insert(hash_key(&key));
        }
    }

    fn remove(&mut self, key: Option<Vec<u8>>) {
        if let Some(key) = key {
            self.present.remove(&hash_key(&key));
        }
    }
}

/// The outcome of a chunk's visibility check (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visibility {
    /// The chunk's snapshot saw every transaction decoded before its window opened.
    SawAll,
    /// It did not see this one: its rows may be older than what was streamed.
    Missed(u32),
    /// The commits before the window are no longer remembered (more than
    /// [`RECENT_COMMITS`] were decoded since): the check cannot be made.
    Unknown {
        /// Commits decoded since the window opened.
        after_opening: usize,
    },
}

/// The incremental snapshots of one run: the state, the open chunk and the progress waiting
/// for confirmation. Owned by the stream loop.
pub struct IncrementalRun {
    state: IncrementalState,
    /// States to record once the slot is confirmed past their position.
    progress: Progress<Lsn, Vec<String>>,
    chunks: ChunkReader<PgCatalog, Window, ChunkRead>,
    /// The transaction ids of the last [`RECENT_COMMITS`] commits decoded, oldest first.
    recent_commits: VecDeque<u32>,
    /// How many commits were decoded in all.
    commits: u64,
    captured: HashSet<String>,
    signal_table: Option<String>,
    snapshot_new_tables: bool,
    config: Arc<PgPipelineConfig>,
    identity: SourceIdentity,
    /// Exactly once: where progress goes to be committed with the records it follows.
    offsets: Option<Arc<super::exactly_once::IncrementalOffsets>>,
    /// The running republication's key set.
    republication: Option<Republication>,
    /// `partitions = "leaves"`: the captured leaves of each partitioned table, which a request
    /// naming the partitioned table stands for.
    leaves_of: std::collections::HashMap<String, Vec<String>>,
}

/// Rows of a chunk to publish at its watermark.
pub struct ChunkToPublish {
    /// The table.
    pub relation: Arc<RelationInfo>,
    /// The rows whose keys had no streamed change in the window.
    pub rows: Vec<TupleData>,
    /// A republication's tombstones (event keys), after the rows.
    pub tombstones: Vec<Vec<u8>>,
}

impl IncrementalRun {
    /// The run's incremental snapshots: `state` from the state file (or, under exactly once,
    /// the newer of it and the offsets topic's), `captured` the tables captured now. Tables
    /// captured now but unknown to the state are queued for a snapshot (with
    /// `snapshot_new_tables` and a snapshot mode other than `never`). Under exactly once,
    /// progress also goes to `offsets`.
    /// `streamed`: tables whose every row was streamed (partitions created while sluice was
    /// stopped, see [`streamed_since`]): they join without a snapshot.
    pub fn new(
        config: Arc<PgPipelineConfig>,
        identity: SourceIdentity,
        state: Option<IncrementalState>,
        captured: HashSet<String>,
        start: Lsn,
        offsets: Option<Arc<super::exactly_once::IncrementalOffsets>>,
        streamed: &HashSet<String>,
    ) -> Self {
        let pg = &config.source;
        let mut run = Self {
            state: state.unwrap_or_default(),
            progress: Progress::default(),
            chunks: ChunkReader::new(format!(
                "{}-{}",
                std::process::id(),
                crate::delivery::unix_micros_now()
            )),
            recent_commits: VecDeque::with_capacity(RECENT_COMMITS),
            commits: 0,
            signal_table: pg.signal_table.clone(),
            snapshot_new_tables: pg.snapshot_new_tables
                && pg.snapshot != super::config::SnapshotMode::Never,
            captured,
            config,
            identity,
            offsets,
            republication: None,
            leaves_of: std::collections::HashMap::new(),
        };
        for table in run.state.queue.iter_mut().filter(|t| t.tombstones) {
            if table.after.is_some() || table.chunks > 0 {
                tracing::info!(
                    table = %table.table,
                    request = %table.request,
                    "republication: its key set is kept in memory only, so after a restart the table is read again from its first chunk"
                );
                table.after = None;
                table.rows = 0;
                table.chunks = 0;
            }
        }
        match run.state.known_tables.clone() {
            None => {
                run.state.known_tables = Some(run.captured.iter().cloned().collect());
                run.record(start);
            }
            Some(known) => {
                let (joined_streamed, new): (Vec<String>, Vec<String>) = run
                    .captured
                    .iter()
                    .filter(|t| !known.contains(*t))
                    .cloned()
                    .partition(|t| streamed.contains(t));
                if !joined_streamed.is_empty() {
                    tracing::info!(
                        tables = ?joined_streamed,
                        "partitions created while sluice was stopped joined the captured set: their rows were all streamed, nothing to snapshot"
                    );
                }
                let gone = known.iter().any(|t| !run.captured.contains(t));
                if !new.is_empty() || !joined_streamed.is_empty() || gone {
                    run.state.known_tables = Some(run.captured.iter().cloned().collect());
                    if run.snapshot_new_tables && !new.is_empty() {
                        tracing::info!(tables = ?new, "tables joined the captured set: snapshotting them while streaming");
                        let signal = Signal::Snapshot {
                            id: format!("new-tables@{start}"),
                            tables: new.into_iter().map(|t| (t, None)).collect(),
                            tombstones: false,
                        };
                        run.state.accept(&signal, &|_| true);
                    }
                    run.record(start);
                }
            }
        }
        run
    }

    /// Whether `table` is captured (known at the start, or joined since).
    pub fn captures(&self, table: &str) -> bool {
        self.captured.contains(table)
    }

    /// Whether `table` is the signal table.
    pub fn is_signal_table(&self, table: &str) -> bool {
        self.signal_table.as_deref() == Some(table)
    }

    /// Queues the current state to be recorded once the slot is confirmed past `at`.
    fn record(&mut self, at: Lsn) {
        self.record_request(at, 0);
    }

    /// [`record`](Self::record), for the admin request `request` (its sequence number).
    fn record_request(&mut self, at: Lsn, request: u64) {
        self.record_at((at, u32::MAX), request);
    }

    /// Queues the state reached by publishing a chunk of `rows` rows at `watermark` (its rows
    /// are at `(watermark, 0..rows)`); under exactly once they commit in one transaction,
    /// with the state.
    fn record_chunk(&mut self, watermark: Lsn, rows: usize) {
        if let Some(offsets) = &self.offsets {
            offsets.chunk(watermark, rows);
        }
        let last = u32::try_from(rows.saturating_sub(1)).unwrap_or(u32::MAX);
        self.record_at((watermark, last), 0);
    }

    /// Queues the current state as holding from `position` on: for the state store once the
    /// slot is confirmed past it, and under exactly once for the transaction holding it.
    fn record_at(&mut self, position: (Lsn, u32), request: u64) {
        self.state.position = Some((position.0.0, position.1));
        if let Some(offsets) = &self.offsets {
            offsets.record(position, self.state.clone());
        }
        self.progress.push(position.0, self.state.clone(), request);
    }

    /// The newest admin request in the states [`confirmed`](Self::confirmed) handed out: once
    /// the state file is written, it and every earlier request are in it.
    pub fn confirmed_request(&self) -> u64 {
        self.progress.confirmed_request()
    }

    /// Applies an operator's signal seen at `at` (the signal row's commit, or the newest
    /// checkpoint for an API request, then `request` is its sequence number on the status
    /// board; 0 for a signal row).
    pub fn accept(&mut self, signal: &Signal, at: Lsn, request: u64) {
        let signal = &self.expand(signal);
        if let Err(problem) = signal.check_filters(SqlDialect::Postgres) {
            if self.state.refuse(signal.id(), &problem) || request != 0 {
                self.record_request(at, request);
            }
            return;
        }
        let captured = &self.captured;
        let changed = self.state.accept(signal, &|t| captured.contains(t));
        if changed
            && let Some(chunk) = self.chunks.open()
            && !self.state.queue.iter().any(|t| t.table == chunk.table)
        {
            // The running table was stopped: its chunk is dropped at its watermark.
            tracing::info!(table = %chunk.table, "incremental snapshot stopped");
        }
        if changed || request != 0 {
            // An admin request is answered once recorded, even when it changed nothing.
            self.record_request(at, request);
        }
    }

    /// `partitions = "leaves"`: the captured tables that are partitions, by their partitioned
    /// table (`schema.table` each), for requests that name the partitioned table.
    pub fn set_leaves(&mut self, tables: &[super::setup::CapturedTable]) {
        self.leaves_of.clear();
        for table in tables {
            for partitioned in &table.ancestors {
                self.leaves_of
                    .entry(partitioned.clone())
                    .or_default()
                    .push(table.qualified());
            }
        }
    }

    /// A request with each partitioned table it names replaced by its captured leaves (with
    /// the same filter).
    fn expand(&self, signal: &Signal) -> Signal {
        let leaves = |table: &String| {
            self.leaves_of
                .get(table)
                .filter(|_| !self.captured.contains(table))
                .cloned()
                .unwrap_or_else(|| vec![table.clone()])
        };
        match signal {
            Signal::Snapshot {
                id,
                tables,
                tombstones,
            } => Signal::Snapshot {
                id: id.clone(),
                tables: tables
                    .iter()
                    .flat_map(|(table, filter)| {
                        leaves(table)
                            .into_iter()
                            .map(move |leaf| (leaf, filter.clone()))
                    })
                    .collect(),
                tombstones: *tombstones,
            },
            Signal::Stop { id, tables } => Signal::Stop {
                id: id.clone(),
                tables: tables.iter().flat_map(leaves).collect(),
            },
        }
    }

    /// A signal table row: parsed and applied, or logged when it is wrong.
    pub fn on_signal_row(&mut self, relation: &RelationInfo, row: &TupleData, at: Lsn) {
        let column = |name: &str| -> String {
            relation
                .columns
                .iter()
                .position(|c| c.name == name)
                .and_then(|i| match row.0.get(i) {
                    Some(Datum::Text(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
                    _ => None,
                })
                .unwrap_or_default()
        };
        let (id, kind, data) = (column("id"), column("type"), column("data"));
        match Signal::parse(&id, &kind, &data) {
            Ok(Some(signal)) => self.accept(&signal, at, 0),
            Ok(None) => tracing::debug!(id, kind, "signal ignored (not a snapshot signal)"),
            Err(problem) => {
                let reason = format!("signal row in {}: {problem}", relation.name);
                if self.state.refuse(&id, &reason) {
                    self.record(at);
                }
            }
        }
    }

    /// The newest refused requests, for the status.
    pub fn refused(&self) -> Vec<crate::source::incremental::RefusedRequest> {
        self.state.refused()
    }

    /// A table seen in the stream: when it is not captured yet (created in or moved into a
    /// captured schema while running), it joins the captured set and is snapshotted.
    /// `streamed`: every row it holds was streamed (a partition created as one in a
    /// publication that published it from its creation): it joins without a snapshot.
    pub fn on_table(&mut self, table: &str, at: Lsn, streamed: bool) {
        if self.captured.contains(table) || self.is_signal_table(table) {
            return;
        }
        self.captured.insert(table.to_owned());
        if let Some(known) = &mut self.state.known_tables {
            known.insert(table.to_owned());
        }
        if streamed {
            tracing::info!(
                table,
                "a partition created while running joined the captured set: its rows were all streamed, nothing to snapshot"
            );
        } else if self.snapshot_new_tables {
            tracing::info!(
                table,
                "a table joined the captured set: snapshotting it while streaming"
            );
            let signal = Signal::Snapshot {
                id: format!("new-table:{table}@{at}"),
                tables: vec![(table.to_owned(), None)],
                tombstones: false,
            };
            self.state.accept(&signal, &|_| true);
        }
        self.record(at);
    }

    /// The state as it is now (recorded or not yet).
    pub fn state(&self) -> &IncrementalState {
        &self.state
    }

    /// `partitions = "leaves"`: this start's horizon (see
    /// [`crate::source::incremental::StartHorizon`]), recorded once confirmed past `at`.
    pub fn set_horizon(&mut self, horizon: crate::source::incremental::StartHorizon, at: Lsn) {
        self.state.horizon = Some(horizon);
        self.record(at);
    }

    /// `partitions = "root"`: the tables left out because they were partitions of a captured
    /// partitioned table and were detached ([`super::partition::detached`]), seen at `at`.
    /// Each newly left out is logged.
    pub fn set_detached(&mut self, detached: std::collections::BTreeMap<String, u32>, at: Lsn) {
        if detached == self.state.detached_partitions {
            return;
        }
        for table in detached
            .keys()
            .filter(|t| !self.state.detached_partitions.contains_key(*t))
        {
            tracing::info!(
                table = %table,
                "a partition detached from a captured partitioned table is left out (no topic, no snapshot): its changes up to the detach are in its root's topic; name it in source.postgres.tables to capture it as a table of its own"
            );
        }
        self.state.detached_partitions = detached;
        self.record(at);
    }

    /// `partitions = "root"`: whether the table `name` (OID `oid`) is a detached partition
    /// left out.
    pub fn is_detached(&self, name: &str, oid: u32) -> bool {
        self.state.detached_partitions.get(name) == Some(&oid)
    }

    /// `partitions = "root"`: the leaves of the captured partitioned tables now (listed at the
    /// start, before the initial snapshot, and at every table refresh), seen at `at`. Leaves
    /// unknown to the state that were attached are snapshotted once under their root (with
    /// `snapshot_new_tables`), restricted to their rows; see [`super::partition`].
    pub fn on_partitions(&mut self, current: &[super::partition::Partition], at: Lsn) {
        let names: std::collections::BTreeSet<String> =
            current.iter().map(|p| p.leaf.clone()).collect();
        let oids: std::collections::BTreeMap<String, u32> =
            current.iter().map(|p| (p.leaf.clone(), p.oid)).collect();
        let Some(known) = self.state.known_partitions.as_ref() else {
            // The first run: the initial snapshot reads them all through their roots.
            self.state.known_partitions = Some(names);
            self.state.partition_oids = oids;
            self.record(at);
            return;
        };
        if *known == names {
            if self.state.partition_oids != oids {
                self.state.partition_oids = oids;
                self.record(at);
            }
            return;
        }
        let joined: Vec<&super::partition::Partition> = current
            .iter()
            .filter(|p| !known.contains(&p.leaf))
            .collect();
        for gone in known.iter().filter(|leaf| !names.contains(*leaf)) {
            tracing::info!(
                partition = %gone,
                "a partition was detached or dropped: its later changes are no longer published under its root"
            );
        }
        let mut roots: Vec<&str> = joined.iter().map(|p| p.root.as_str()).collect();
        roots.dedup();
        for root in roots {
            let of_root = |attached: bool| -> Vec<&super::partition::Partition> {
                joined
                    .iter()
                    .filter(|p| p.root == root && p.attached == attached)
                    .copied()
                    .collect()
            };
            let (attached, created) = (of_root(true), of_root(false));
            if !created.is_empty() {
                tracing::info!(
                    table = root,
                    partitions = ?created.iter().map(|p| &p.leaf).collect::<Vec<_>>(),
                    "partitions created: their changes are captured under their root"
                );
            }
            if attached.is_empty() {
                continue;
            }
            let leaves: Vec<&str> = attached.iter().map(|p| p.leaf.as_str()).collect();
            if !self.snapshot_new_tables {
                tracing::warn!(
                    table = root,
                    partitions = ?leaves,
                    "partitions attached: their changes are captured under their root, but their existing rows are not snapshotted (snapshot_new_tables = false or snapshot = \"never\")"
                );
                continue;
            }
            tracing::info!(
                table = root,
                partitions = ?leaves,
                "partitions attached: snapshotting their existing rows under their root while streaming"
            );
            let signal = Signal::Snapshot {
                id: format!("attached:{}@{at}", leaves.join(",")),
                tables: vec![(root.to_owned(), Some(super::partition::rows_of(&attached)))],
                tombstones: false,
            };
            self.state.accept(&signal, &|_| true);
        }
        self.state.known_partitions = Some(names);
        self.state.partition_oids = oids;
        self.record(at);
    }

    /// A decoded commit: remembered for the visibility check of chunks (see the module docs).
    pub fn on_commit(&mut self, xid: u32) {
        if self.recent_commits.len() == RECENT_COMMITS {
            self.recent_commits.pop_front();
        }
        self.recent_commits.push_back(xid);
        self.commits += 1;
    }

    /// Whether the chunk's snapshot saw every transaction decoded before the window opened
    /// (`opened_at`, a count of commits).
    fn missed_commit(&self, opened_at: u64, snapshot: &XidSnapshot) -> Visibility {
        check_visibility(&self.recent_commits, self.commits, opened_at, snapshot)
    }

    /// Notes the keys a streamed change touches while a window on its table is open.
    pub fn note(&mut self, relation: &RelationInfo, kind: &ChangeKind) {
        if let Some(republication) = &mut self.republication
            && republication.table == relation.name
        {
            let events = &self.config.kafka.events;
            let key = |tuple| write_key(relation, tuple, events, true);
            match kind {
                ChangeKind::Insert { new } => republication.add(key(new)),
                ChangeKind::Update {
                    old,
                    new,
                    key_changed,
                    ..
                } => {
                    if *key_changed && let Some(old) = old {
                        republication.remove(key(old));
                    }
                    republication.add(key(new));
                }
                ChangeKind::Delete { old, .. } => republication.remove(key(old)),
                ChangeKind::Truncate => republication.present.clear(),
                ChangeKind::Read { .. } => {}
            }
        }
        let Some(chunk) = self.chunks.open_mut() else {
            return;
        };
        if chunk.table != relation.name {
            return;
        }
        let window = &mut chunk.window;
        match kind {
            ChangeKind::Insert { new } => {
                window.keys.insert(tuple_key(relation, new));
            }
            ChangeKind::Update { old, new, .. } => {
                window.keys.insert(tuple_key(relation, new));
                if let Some(old) = old {
                    window.keys.insert(tuple_key(relation, old));
                }
            }
            ChangeKind::Delete { old, .. } => {
                window.keys.insert(tuple_key(relation, old));
            }
            ChangeKind::Truncate => window.truncated = true,
            ChangeKind::Read { .. } => {}
        }
    }

    /// Opens the next chunk's window and starts reading it, when a table is queued and no
    /// chunk is open.
    pub fn maybe_start(&mut self) {
        if !self.chunks.may_start() {
            return;
        }
        let Some(snapshot) = self.state.queue.front().cloned() else {
            self.republication = None;
            return;
        };
        let (request, table) = (snapshot.request.clone(), snapshot.table.clone());
        if !snapshot.tombstones {
            self.republication = None;
        } else if self
            .republication
            .as_ref()
            .is_none_or(|r| r.request != request || r.table != table)
        {
            tracing::info!(%table, %request, "republication: keeping the table's keys while its chunks run, for the tombstones after them");
            self.republication = Some(Republication {
                request: request.clone(),
                table: table.clone(),
                present: HashedSet::default(),
                sweeping: false,
            });
        }
        let sweep = self
            .republication
            .as_ref()
            .filter(|r| r.sweeping)
            .map(|r| Arc::new(r.present.clone()));
        let config = Arc::clone(&self.config);
        let identity = self.identity.clone();
        let limit = config.source.incremental_chunk_rows.max(1);
        let connect = {
            let config = Arc::clone(&config);
            let table = table.clone();
            async move {
                // Watermarks are WAL writes: on a standby, the chunks are read and the
                // watermarks written on the primary (in the stream's order all the same).
                let catalog = PgCatalog::connect(&config)
                    .await
                    .map_err(ChunkError::Retry)?;
                if !super::standby::in_recovery(&catalog)
                    .await
                    .map_err(ChunkError::Retry)?
                {
                    return Ok(catalog);
                }
                match PgCatalog::connect_primary(&config).await {
                    Ok(Some(primary)) => Ok(primary),
                    Ok(None) => Err(ChunkError::Table(format!(
                        "cannot snapshot {table} incrementally: source.postgres.url is a standby, which cannot write the snapshot's watermarks; set source.postgres.primary_url (the chunks are then read on the primary)"
                    ))),
                    Err(error) => Err(ChunkError::Retry(error)),
                }
            }
        };
        let window = Window {
            opened_at: self.commits,
            ..Window::default()
        };
        self.chunks.start(
            request,
            table,
            window,
            connect,
            move |catalog: &mut PgCatalog, token: String| {
                Box::pin(async move {
                    match sweep {
                        Some(present) => {
                            sweep_topic(catalog, &identity, &config, &snapshot, present, &token)
                                .await
                        }
                        None => read_chunk(
                            catalog,
                            &identity,
                            &config.source,
                            &config.kafka.events,
                            &snapshot,
                            limit,
                            &token,
                        )
                        .await
                        .map(ChunkRead::Rows),
                    }
                })
            },
        );
    }

    /// Collects a finished read; a failed one is dropped (its table skipped, or retried
    /// later). Call on every status tick.
    pub async fn poll(&mut self, at: Lsn) {
        if let Some((table, error)) = self.chunks.failed().await {
            self.on_error(&table, error, at);
        }
        self.maybe_start();
    }

    fn on_error(&mut self, table: &str, error: ChunkError, at: Lsn) {
        if self.chunks.on_error(&mut self.state, table, error) {
            self.republication = None;
            self.record(at);
        }
    }

    /// A watermark message at `at`: when it closes the open chunk, returns the chunk's rows to
    /// publish there (before anything streamed after it) and records the progress.
    pub async fn on_watermark(&mut self, content: &[u8], at: Lsn) -> Option<ChunkToPublish> {
        if self
            .chunks
            .open()
            .is_none_or(|c| c.token.as_bytes() != content)
        {
            return None; // an earlier run's, or a chunk given up
        }
        // The loop waits for the read only so long (see `deadline::LOOP_DEADLINE`): a chunk
        // still being read then is given up and read again later.
        let (chunk, result) = self
            .chunks
            .close(
                super::deadline::LOOP_DEADLINE,
                "incremental snapshot: the chunk's read outlasted the loop's deadline; reading it again later",
            )
            .await?;
        let rows = match result {
            Ok(ChunkRead::Rows(rows)) => rows,
            Ok(ChunkRead::Missing { relation, keys }) => {
                return self.on_swept(&chunk, relation, keys, at);
            }
            Err(error) => {
                self.on_error(&chunk.table, error, at);
                return None;
            }
        };
        match self.missed_commit(chunk.window.opened_at, &rows.snapshot) {
            Visibility::SawAll => {}
            Visibility::Missed(xid) => {
                tracing::info!(
                    table = %chunk.table,
                    xid,
                    "incremental snapshot: the chunk was read before transaction {xid}, already streamed, became visible; reading it again"
                );
                self.chunks.read_again();
                return None;
            }
            Visibility::Unknown { after_opening } => {
                tracing::info!(
                    table = %chunk.table,
                    after_opening,
                    "incremental snapshot: {after_opening} commits were decoded while the chunk was read, more than the {RECENT_COMMITS} remembered for its visibility check; reading it again"
                );
                self.chunks.read_again();
                return None;
            }
        }
        let current = self.state.queue.front_mut()?;
        if current.table != chunk.table || current.request != chunk.request {
            return None; // stopped meanwhile
        }
        let read = rows.rows.len();
        let window = chunk.window;
        let publish: Vec<TupleData> = if window.truncated {
            Vec::new()
        } else {
            rows.rows
                .into_iter()
                .filter(|row| !window.keys.contains(&tuple_key(&rows.relation, row)))
                .collect()
        };
        if let Some(last) = rows.last_key {
            current.after = Some(last);
        }
        current.rows += publish.len() as u64;
        current.chunks += 1;
        tracing::debug!(table = %current.table, read, published = publish.len(), noted = window.keys.len(), "incremental snapshot: chunk");
        let republication = self
            .republication
            .as_mut()
            .filter(|r| r.table == chunk.table && r.request == chunk.request);
        if let Some(republication) = republication {
            let events = &self.config.kafka.events;
            for row in &publish {
                republication.add(write_key(&rows.relation, row, events, false));
            }
            if !rows.full {
                tracing::info!(
                    table = %current.table,
                    request = %current.request,
                    rows = current.rows,
                    keys = republication.present.len(),
                    "republication: rows done; reading the topic for keys gone from the table"
                );
                republication.sweeping = true;
            }
        } else if !rows.full {
            tracing::info!(
                table = %current.table,
                request = %current.request,
                rows = current.rows,
                chunks = current.chunks,
                "incremental snapshot: table done"
            );
            self.state.queue.pop_front();
        }
        self.record_chunk(at, publish.len());
        Some(ChunkToPublish {
            relation: rows.relation,
            rows: publish,
            tombstones: Vec::new(),
        })
    }

    /// A republication's sweep closed at `at`: tombstones for the keys still not in the table,
    /// and the table is done.
    fn on_swept(
        &mut self,
        chunk: &Chunk<Window>,
        relation: Arc<RelationInfo>,
        keys: Vec<Vec<u8>>,
        at: Lsn,
    ) -> Option<ChunkToPublish> {
        let current = self.state.queue.front()?;
        if current.table != chunk.table || current.request != chunk.request {
            return None; // stopped meanwhile
        }
        let republication = self
            .republication
            .take()
            .filter(|r| r.table == chunk.table && r.request == chunk.request)?;
        let found = keys.len();
        let tombstones: Vec<Vec<u8>> = keys
            .into_iter()
            .filter(|key| !republication.present.contains(&hash_key(key)))
            .collect();
        tracing::info!(
            table = %current.table,
            request = %current.request,
            rows = current.rows,
            tombstones = tombstones.len(),
            written_back_meanwhile = found - tombstones.len(),
            "republication done: rows republished, tombstones for the keys gone from the table"
        );
        self.state.queue.pop_front();
        self.record_chunk(at, tombstones.len());
        Some(ChunkToPublish {
            relation,
            rows: Vec::new(),
            tombstones,
        })
    }

    /// The newest state whose position `confirmed` covers, to record with it.
    pub fn confirmed(&mut self, confirmed: Lsn) -> Option<IncrementalState> {
        self.progress.confirmed(confirmed)
    }

    /// For `/health`: the running table's progress and the queue's length.
    pub fn status(&self) -> Option<crate::runtime::status::IncrementalStatus> {
        self.state.status()
    }
}

/// A republication's sweep (see [`Republication`]): reads the table's topic for the keys live
/// there whose hash is not in `present`, then writes the closing watermark `token`.
async fn sweep_topic(
    catalog: &PgCatalog,
    identity: &SourceIdentity,
    config: &PgPipelineConfig,
    snapshot: &TableSnapshot,
    present: Arc<HashedSet>,
    token: &str,
) -> Result<ChunkRead, ChunkError> {
    crate::delay_point!("incremental::sweep");
    let Some((schema, table)) = parse_table_name(&snapshot.table) else {
        return Err(ChunkError::Table(format!(
            "{:?} is not schema.table",
            snapshot.table
        )));
    };
    let relation = super::snapshot::relation_info(
        catalog,
        identity,
        &config.source,
        &config.kafka.events,
        schema,
        table,
    )
    .await
    .map_err(ChunkError::Retry)?;
    if relation.outbox.is_some() {
        return Err(ChunkError::Table(format!(
            "{} is an outbox table: its topics are not entity topics, no tombstones",
            snapshot.table
        )));
    }
    let client = crate::kafka::client_config(&config.kafka.brokers, &config.kafka.client);
    let topic = relation.topic.to_string();
    let keys = tokio::task::spawn_blocking(move || {
        crate::kafka::keys::live_keys_missing(client, &topic, &present, SWEEP_DEADLINE)
    })
    .await
    .map_err(|e| {
        ChunkError::Retry(PipelineError::retryable(
            "the republication's topic reader failed",
            e,
        ))
    })?
    .map_err(|e| {
        ChunkError::Retry(PipelineError::retryable(
            format!(
                "cannot read {} for the republication's tombstones",
                relation.topic
            ),
            e,
        ))
    })?;
    catalog
        .client()
        .execute(
            "SELECT pg_logical_emit_message(false, $1, $2)",
            &[&WATERMARK_PREFIX, &token],
        )
        .await
        .map_err(|e| ChunkError::Retry(classify_pg("cannot write a snapshot watermark", e)))?;
    Ok(ChunkRead::Missing {
        relation: Arc::new(relation),
        keys,
    })
}

/// The visibility check of a chunk opened after `opened_at` of `commits` decoded commits, the
/// newest of which are `recent` (oldest first, at most [`RECENT_COMMITS`]).
fn check_visibility(
    recent: &VecDeque<u32>,
    commits: u64,
    opened_at: u64,
    snapshot: &XidSnapshot,
) -> Visibility {
    let after_opening = usize::try_from(commits - opened_at).unwrap_or(usize::MAX);
    if opened_at > 0 && after_opening >= recent.len() {
        // So many commits were decoded while the chunk was read that the ones before it are no
        // longer remembered: they cannot be checked, so the chunk cannot be trusted.
        return Visibility::Unknown { after_opening };
    }
    let before = recent.len() - after_opening;
    match recent
        .iter()
        .take(before)
        .rev()
        .copied()
        .find(|&xid| !snapshot.sees(xid))
    {
        Some(xid) => Visibility::Missed(xid),
        None => Visibility::SawAll,
    }
}

/// `txid_current_snapshot()` returned NULL with a chunk's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("txid_current_snapshot() returned no snapshot")]
struct NoXidSnapshot;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_checked_against_the_commits_before_its_window() {
        let snapshot = XidSnapshot {
            xmin: 100,
            xmax: 110,
            in_progress: vec![104],
        };
        let recent: VecDeque<u32> = [101, 102, 103, 200, 201].into_iter().collect();
        // Opened after 3 commits (101..=103), 2 more since: all three seen.
        assert_eq!(
            check_visibility(&recent, 5, 3, &snapshot),
            Visibility::SawAll
        );
        let recent: VecDeque<u32> = [101, 104, 103, 200].into_iter().collect();
        assert_eq!(
            check_visibility(&recent, 4, 3, &snapshot),
            Visibility::Missed(104),
            "104 was decoded before the window but the snapshot has it in progress"
        );
        // Nothing decoded before the window: nothing to miss.
        assert_eq!(
            check_visibility(&recent, 4, 0, &snapshot),
            Visibility::SawAll
        );
    }

    #[test]
    fn a_chunk_whose_commit_history_overflowed_is_read_again() {
        let snapshot = XidSnapshot {
            xmin: 100,
            xmax: 110,
            in_progress: vec![],
        };
        // The history holds only commits decoded after the window opened: the ones before it
        // are forgotten, and the chunk must not be accepted.
        let recent: VecDeque<u32> = (200..200 + RECENT_COMMITS as u32).collect();
        let commits = 50 + RECENT_COMMITS as u64;
        assert_eq!(
            check_visibility(&recent, commits, 50, &snapshot),
            Visibility::Unknown {
                after_opening: RECENT_COMMITS
            }
        );
        // One commit before the window still remembered: it is checked.
        assert_eq!(
            check_visibility(&recent, commits, 51, &snapshot),
            Visibility::Missed(200)
        );
    }

    #[test]
    fn a_snapshot_sees_what_finished_before_it() {
        let snapshot = XidSnapshot::parse("4294967396:4294967406:4294967400,4294967405").unwrap();
        // Epoch 1: the ids are 100, 110 and 104, 109 in progress.
        assert_eq!(
            snapshot,
            XidSnapshot {
                xmin: 100,
                xmax: 110,
                in_progress: vec![104, 109]
            }
        );
        assert!(snapshot.sees(99), "before xmin");
        assert!(snapshot.sees(103), "between, not in progress");
        assert!(!snapshot.sees(104), "in progress");
        assert!(!snapshot.sees(110), "xmax and later");
        assert!(!snapshot.sees(200));
        assert!(
            snapshot.sees(4_000_000_000),
            "2^32 - 294M precedes 100 modulo 2^32"
        );
        assert_eq!(
            XidSnapshot::parse("5:5:"),
            Some(XidSnapshot {
                xmin: 5,
                xmax: 5,
                in_progress: Vec::new()
            })
        );
        assert_eq!(XidSnapshot::parse("5:x:"), None);
        // Around wraparound: xmin near 2^32, xmax past it.
        let wrapped = XidSnapshot::parse("4294967290:4294967300:").unwrap();
        assert!(wrapped.sees(4_294_967_280));
        assert!(wrapped.sees(4_294_967_295));
        assert!(!wrapped.sees(4), "4294967300 is 4 of the next epoch: xmax");
    }

    fn run(state: Option<IncrementalState>) -> IncrementalRun {
        let text = r#"
            name = "p"
            [source.postgres]
            url = "postgres://u@db/app"
            schemas = ["public"]
            [kafka]
            brokers = "127.0.0.1:9092"
        "#;
        let config = PgPipelineConfig::from_toml(text, "test.toml", &|_| None).unwrap();
        let identity = SourceIdentity {
            server_name: "p".into(),
            database: "app".into(),
            registry: None,
        };
        let captured = ["public.events".to_owned()].into_iter().collect();
        IncrementalRun::new(
            Arc::new(config),
            identity,
            state,
            captured,
            Lsn(1),
            None,
            &HashSet::new(),
        )
    }

    fn leaf(name: &str, oid: u32, attached: bool) -> super::super::partition::Partition {
        super::super::partition::Partition {
            leaf: format!("public.{name}"),
            oid,
            root: "public.events".into(),
            attached,
        }
    }

    #[test]
    fn an_attached_partition_is_snapshotted_under_its_root_and_a_created_one_is_not() {
        let mut first = run(None);
        let start = [leaf("events_01", 100, false), leaf("events_02", 101, true)];
        first.on_partitions(&start, Lsn(2));
        assert!(
            first.state.queue.is_empty(),
            "the first run's snapshot reads them through the root"
        );
        // After a restart: one created and one attached while stopped, one detached.
        let mut next = run(Some(first.state.clone()));
        let now = [
            leaf("events_01", 100, false),
            leaf("events_03", 102, false),
            leaf("events_04", 103, true),
        ];
        next.on_partitions(&now, Lsn(3));
        let queued: Vec<(&str, Option<&str>)> = next
            .state
            .queue
            .iter()
            .map(|t| (t.table.as_str(), t.filter.as_deref()))
            .collect();
        assert_eq!(queued, [("public.events", Some("tableoid IN (103)"))]);
        let known: Vec<&str> = next
            .state
            .known_partitions
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(
            known,
            ["public.events_01", "public.events_03", "public.events_04"]
        );
        // Seen again: nothing more.
        next.on_partitions(&now, Lsn(4));
        assert_eq!(next.state.queue.len(), 1);
    }

    #[test]
    fn a_partition_created_after_the_last_starts_horizon_had_every_row_streamed() {
        use super::super::partition::Creation;
        let created = |xid, published_by| Creation { xid, published_by };
        // xmin 1000, xmax 1005, 1002 in progress.
        let (horizon, now) = ("1000:1005:1002", "2000:2000:");
        assert!(streamed_since(horizon, now, &created(1005, 990)));
        assert!(streamed_since(horizon, now, &created(1500, 1001)));
        // Created by a transaction that started before the horizon.
        assert!(!streamed_since(horizon, now, &created(1004, 990)));
        assert!(!streamed_since(horizon, now, &created(1002, 990)));
        // Published whole by a transaction the horizon did not see committed.
        assert!(!streamed_since(horizon, now, &created(1500, 1002)));
        assert!(!streamed_since(horizon, now, &created(1500, 1007)));
        // Frozen or special ids, too many ids since, unreadable snapshots: snapshotted.
        assert!(!streamed_since(horizon, now, &created(2, 990)));
        assert!(!streamed_since(horizon, now, &created(1500, 2)));
        let far = format!("{0}:{0}:", 1_u64 << 31);
        assert!(!streamed_since(horizon, &far, &created(1500, 990)));
        assert!(!streamed_since("", now, &created(1500, 990)));
        assert!(!streamed_since(horizon, "now", &created(1500, 990)));
        // Across a 32-bit wraparound (epoch-extended ids in the snapshots).
        let epoch = 1_u64 << 32;
        let horizon = format!("{}:{}:", epoch - 10, epoch - 5);
        let now = format!("{0}:{0}:", epoch + 100);
        assert!(streamed_since(&horizon, &now, &created(50, u32::MAX - 20)));
        assert!(!streamed_since(
            &horizon,
            &now,
            &created(u32::MAX - 6, u32::MAX - 20)
        ));
    }

    #[test]
    fn under_leaves_a_request_for_a_partitioned_table_snapshots_its_leaves() {
        let mut run = run(None);
        run.captured = ["public.events_01", "public.events_02", "public.plain"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let captured = |table: &str, root: Option<&str>| super::super::setup::CapturedTable {
            schema: "public".into(),
            table: table.into(),
            replica_identity: 'd',
            has_primary_key: true,
            ancestors: root.map(str::to_owned).into_iter().collect(),
            oid: 0,
        };
        run.set_leaves(&[
            captured("events_01", Some("public.events")),
            captured("events_02", Some("public.events")),
            captured("plain", None),
        ]);
        let request = Signal::Snapshot {
            id: "r1".into(),
            tables: vec![
                ("public.events".into(), Some("v > 1".into())),
                ("public.plain".into(), None),
            ],
            tombstones: false,
        };
        run.accept(&request, Lsn(5), 0);
        let queued: Vec<(&str, Option<&str>)> = run
            .state
            .queue
            .iter()
            .map(|t| (t.table.as_str(), t.filter.as_deref()))
            .collect();
        assert_eq!(
            queued,
            [
                ("public.events_01", Some("v > 1")),
                ("public.events_02", Some("v > 1")),
                ("public.plain", None),
            ]
        );
        let stop = Signal::Stop {
            id: "r2".into(),
            tables: vec!["public.events".into()],
        };
        run.accept(&stop, Lsn(6), 0);
        assert_eq!(run.state.queue.len(), 1, "{:?}", run.state.queue);
    }
}
