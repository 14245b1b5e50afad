//! The initial snapshot: every captured table's rows as `op: "r"` events, consistent with the
//! binlog position streaming then starts from, read in parallel chunks and resumable.
//!
//! **Consistency.** Each snapshot worker reads in a `START TRANSACTION WITH CONSISTENT
//! SNAPSHOT` (REPEATABLE READ, read only); all of them see the database at one point, and the
//! binlog position of that point is where streaming starts:
//!
//! - MariaDB, without any lock: the server reports the binlog position of each connection's
//!   snapshot (`binlog_snapshot_file`/`binlog_snapshot_position`, kept consistent with InnoDB by
//!   its group commit; `BINLOG_GTID_POS` gives the GTID position there). Workers whose snapshots
//!   are at the same position see the same data; the largest such group of the connections
//!   opened is kept (a few tries when commits keep them apart), so under heavy writes fewer
//!   workers may read than configured, never an inconsistent one.
//! - MySQL 8.0 has no such variable, so commits are stopped while the workers start their
//!   transactions and the position is read: `FLUSH TABLES WITH READ LOCK` (Debezium's default;
//!   needs `RELOAD`), or, without `RELOAD` (Amazon RDS), `LOCK TABLES … READ` of the captured
//!   tables (needs `LOCK TABLES`): commits to them wait until every worker's snapshot is open,
//!   a few milliseconds, and then the locks are released (`UNLOCK TABLES`) before any row is
//!   read. (`LOCK INSTANCE FOR BACKUP` with `performance_schema.log_status` does not stop
//!   commits, so a position read that way is not the snapshot's.)
//!
//! **Chunks.** Tables are split by primary key into chunks of `snapshot_chunk_rows` rows (the
//! boundaries read under the snapshot by keyset pagination: `ORDER BY key LIMIT 1 OFFSET n`);
//! a table without a primary key is one chunk. The workers take chunks across and within
//! tables and hand their rows to a delivery core ([`crate::source::chunked`]) with the producer
//! and in-flight budget the stream uses. A chunk is finished when Kafka has acknowledged all of its
//! records; the plan and the finished chunks are in the state file with the snapshot's binlog
//! position.
//!
//! **Restart.** After a crash only the unfinished chunks are read, under a fresh consistent
//! snapshot, and streaming starts from the first snapshot's position: every change since is
//! replayed after the rows, so per key the newest event is the row's current state.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tracing::Instrument as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Row, Value};
use rdkafka::producer::Producer as _;
use serde::{Deserialize, Serialize};
use sluice_engine::InFlightBudget;
use tokio::sync::mpsc;

use super::config::MysqlSourceConfig;
use super::encode::{self, BinlogSource, RowChange, TableInfo};
use super::server::{self, BinlogPosition, Flavor, MariadbGtidPos, sql_error};
use crate::delivery::{Encode, FailedChange, Origin};
use crate::error::{Interruption, PipelineError};
use crate::event::{Op, SnapshotMarker};
use crate::kafka::{DeliveryEvent, OutRecord, PipelineProducer};
use crate::runtime::metrics::{self as m, TableMetrics};
use crate::runtime::status::StatusBoard;
use crate::source::chunked::{self, ChunkMessage};

/// Rows encoded and produced together.
const BATCH_ROWS: usize = 1024;

/// How long the lock that stops commits (MySQL) may be waited for.
const LOCK_WAIT_TIMEOUT_S: u32 = 10;

/// Tries at opening MariaDB snapshots at one position before reading with fewer workers.
const MARIADB_TRIES: usize = 3;

/// A captured table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedTable {
    /// Its database.
    pub database: String,
    /// Its name.
    pub table: String,
}

impl CapturedTable {
    pub(super) fn quoted(&self) -> String {
        format!("{}.{}", quote(&self.database), quote(&self.table))
    }
}

pub(super) use crate::sql::quote_mysql_ident as quote;

/// The base tables `source` captures, in database and table order.
///
/// # Errors
///
/// Retryable when the query fails.
pub async fn captured_tables(
    conn: &mut Conn,
    source: &MysqlSourceConfig,
) -> Result<Vec<CapturedTable>, PipelineError> {
    let rows: Vec<(String, String)> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME",
        )
        .await
        .map_err(sql_error("cannot list the tables"))?;
    Ok(rows
        .into_iter()
        .filter(|(database, table)| source.captures(database, table))
        .map(|(database, table)| CapturedTable { database, table })
        .collect())
}

/// Connections in transactions of one consistent snapshot and the binlog position it is
/// consistent with.
pub struct ConsistentSnapshot {
    /// One per worker (at least one).
    pub connections: Vec<Conn>,
    /// The binlog position of the snapshot.
    pub position: BinlogPosition,
}

/// Opens up to `workers` connections in transactions of one consistent snapshot (see the module
/// docs for how, per server).
///
/// # Errors
///
/// Retryable on connection trouble or a lock not granted in time; fatal when MySQL refuses
/// both locks (privileges).
pub async fn open(
    source: &MysqlSourceConfig,
    flavor: Flavor,
    workers: usize,
    tables: &[CapturedTable],
) -> Result<ConsistentSnapshot, PipelineError> {
    let workers = workers.max(1);
    match flavor {
        Flavor::Mariadb => open_mariadb(source, workers).await,
        Flavor::Mysql => open_locked(source, flavor, workers, tables).await,
    }
}

/// A connection for snapshot reads: UTC session (TIMESTAMP values), long write timeout (the
/// server waits while the in-flight budget is full).
pub(super) async fn reader(source: &MysqlSourceConfig) -> Result<Conn, PipelineError> {
    let mut conn = server::connect(source).await?;
    conn.query_drop("SET SESSION time_zone = '+00:00', SESSION net_write_timeout = 3600")
        .await
        .map_err(sql_error("cannot set up a snapshot session"))?;
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(sql_error("cannot set up a snapshot session"))?;
    Ok(conn)
}

async fn begin(conn: &mut Conn) -> Result<(), PipelineError> {
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        .await
        .map_err(sql_error(
            "START TRANSACTION WITH CONSISTENT SNAPSHOT failed",
        ))
}

/// Begins a consistent snapshot on MariaDB; returns it with the snapshot's binlog position.
async fn mariadb_begin(mut conn: Conn) -> Result<(Conn, (String, u64)), PipelineError> {
    begin(&mut conn).await?;
    let status: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(sql_error("cannot read the snapshot's binlog position"))?;
    let get = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    match (
        get("binlog_snapshot_file"),
        get("binlog_snapshot_position").and_then(|p| p.parse::<u64>().ok()),
    ) {
        (Some(file), Some(pos)) => Ok((conn, (file, pos))),
        _ => Err(PipelineError::fatal(
            "the server reports no binlog position for a consistent snapshot",
            "start the server with log_bin",
        )),
    }
}

async fn open_mariadb(
    source: &MysqlSourceConfig,
    workers: usize,
) -> Result<ConsistentSnapshot, PipelineError> {
    let mut best: Vec<(Conn, (String, u64))> = Vec::new();
    for _ in 0..MARIADB_TRIES {
        let mut connections = Vec::with_capacity(workers);
        for _ in 0..workers {
            connections.push(reader(source).await?);
        }
        // The transactions begin together, so that commits rarely fall between them.
        let opened: Vec<(Conn, (String, u64))> =
            futures::future::try_join_all(connections.into_iter().map(mariadb_begin)).await?;
        // The largest group of connections whose snapshots are at one position.
        let mut counts: HashMap<(String, u64), usize> = HashMap::new();
        for (_, position) in &opened {
            *counts.entry(position.clone()).or_default() += 1;
        }
        let (position, _) = counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .unwrap_or_default();
        let group: Vec<_> = opened.into_iter().filter(|(_, p)| *p == position).collect();
        if group.len() > best.len() {
            best = group;
        }
        if best.len() == workers {
            break;
        }
    }
    if best.len() < workers {
        tracing::info!(
            workers = best.len(),
            configured = workers,
            "snapshot: commits kept the workers' snapshots apart; reading with fewer workers"
        );
    }
    let (file, pos) = best[0].1.clone();
    let mut connections: Vec<Conn> = best.into_iter().map(|(conn, _)| conn).collect();
    let gtids: Option<Option<String>> = connections[0]
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
        .await
        .map_err(sql_error("SELECT BINLOG_GTID_POS failed"))?;
    let gtid_set = Some(MariadbGtidPos::parse(&gtids.flatten().unwrap_or_default())?.to_string());
    Ok(ConsistentSnapshot {
        connections,
        position: BinlogPosition {
            file,
            pos,
            gtid_set,
        },
    })
}

/// MySQL: error 1227, "Access denied; you need (at least one of) the RELOAD privilege(s)".
const ER_SPECIFIC_ACCESS_DENIED_ERROR: u16 = 1227;

async fn open_locked(
    source: &MysqlSourceConfig,
    flavor: Flavor,
    workers: usize,
    tables: &[CapturedTable],
) -> Result<ConsistentSnapshot, PipelineError> {
    let mut lock = server::connect(source).await?;
    lock.query_drop(format!(
        "SET SESSION lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}"
    ))
    .await
    .map_err(sql_error("cannot set lock_wait_timeout"))?;
    let locked = match lock.query_drop("FLUSH TABLES WITH READ LOCK").await {
        Ok(()) => "global read lock",
        Err(mysql_async::Error::Server(e)) if e.code == ER_SPECIFIC_ACCESS_DENIED_ERROR => {
            if !tables.is_empty() {
                let list: Vec<String> = tables
                    .iter()
                    .map(|t| format!("{} READ", t.quoted()))
                    .collect();
                lock.query_drop(format!("LOCK TABLES {}", list.join(", ")))
                    .await
                    .map_err(|e| {
                        PipelineError::fatal_with(
                            "cannot lock the captured tables for the snapshot (FLUSH TABLES WITH READ LOCK was refused too)",
                            "GRANT RELOAD ON *.* (or LOCK TABLES) TO the pipeline's user, or set source.mysql.snapshot = \"never\"",
                            e,
                        )
                    })?;
            }
            "table locks"
        }
        Err(e) => {
            return Err(PipelineError::retryable(
                format!(
                    "FLUSH TABLES WITH READ LOCK failed (waited up to {LOCK_WAIT_TIMEOUT_S} s for running statements)"
                ),
                e,
            ));
        }
    };
    let started = std::time::Instant::now();
    let result = async {
        let mut connections = Vec::with_capacity(workers);
        for _ in 0..workers {
            let mut conn = reader(source).await?;
            begin(&mut conn).await?;
            connections.push(conn);
        }
        let position = server::current_position(&mut lock, flavor).await?;
        Ok::<_, PipelineError>(ConsistentSnapshot {
            connections,
            position,
        })
    }
    .await;
    let unlocked = lock.query_drop("UNLOCK TABLES").await;
    tracing::info!(
        lock = locked,
        held_ms = started.elapsed().as_millis() as u64,
        "snapshot: commits stopped while the snapshot opened"
    );
    let snapshot = result?;
    unlocked.map_err(sql_error("UNLOCK TABLES failed"))?;
    Ok(snapshot)
}

/// A primary-key value of a chunk boundary, as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyValue {
    /// NULL (not in a primary key; kept for completeness).
    Null,
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A float.
    Float(f32),
    /// A double.
    Double(f64),
    /// Bytes (strings, decimals, binary), base64.
    Base64(String),
    /// A date or date-time: year, month, day, hour, minute, second, microseconds.
    Date(u16, u8, u8, u8, u8, u8, u32),
    /// A time: negative, days, hours, minutes, seconds, microseconds.
    Time(bool, u32, u8, u8, u8, u32),
}

impl From<Value> for KeyValue {
    fn from(value: Value) -> Self {
        match value {
            Value::NULL => Self::Null,
            Value::Int(n) => Self::Int(n),
            Value::UInt(n) => Self::Uint(n),
            Value::Float(f) => Self::Float(f),
            Value::Double(f) => Self::Double(f),
            Value::Bytes(bytes) => Self::Base64(BASE64.encode(bytes)),
            Value::Date(y, mo, d, h, mi, s, us) => Self::Date(y, mo, d, h, mi, s, us),
            Value::Time(neg, d, h, mi, s, us) => Self::Time(neg, d, h, mi, s, us),
        }
    }
}

impl From<&KeyValue> for Value {
    fn from(value: &KeyValue) -> Self {
        match value {
            KeyValue::Null => Value::NULL,
            KeyValue::Int(n) => Value::Int(*n),
            KeyValue::Uint(n) => Value::UInt(*n),
            KeyValue::Float(f) => Value::Float(*f),
            KeyValue::Double(f) => Value::Double(*f),
            KeyValue::Base64(text) => Value::Bytes(BASE64.decode(text).unwrap_or_default()),
            KeyValue::Date(y, mo, d, h, mi, s, us) => Value::Date(*y, *mo, *d, *h, *mi, *s, *us),
            KeyValue::Time(neg, d, h, mi, s, us) => Value::Time(*neg, *d, *h, *mi, *s, *us),
        }
    }
}

/// The chunks of a snapshot, persisted in the state file so a restart reads only the
/// unfinished ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotPlan {
    /// Every chunk, in table and key order.
    pub chunks: Vec<Chunk>,
}

/// One chunk: the rows of `table` whose key is at or after `lower` and before `upper`
/// (unbounded when `None`); no `key`: the whole table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// The table.
    pub table: CapturedTable,
    /// The primary-key columns, in key order.
    pub key: Vec<String>,
    /// The first key of the chunk.
    pub lower: Option<Vec<KeyValue>>,
    /// The first key of the next chunk.
    pub upper: Option<Vec<KeyValue>>,
    /// Acknowledged by Kafka.
    pub done: bool,
}

impl Chunk {
    /// `WHERE …` for the chunk's key range and its parameters.
    fn range(&self) -> (String, Vec<Value>) {
        let mut conditions = Vec::new();
        let mut params = Vec::new();
        if let Some(lower) = &self.lower {
            conditions.push(compare(&self.key, lower, ">", ">=", &mut params));
        }
        if let Some(upper) = &self.upper {
            conditions.push(compare(&self.key, upper, "<", "<", &mut params));
        }
        let clause = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        (clause, params)
    }

    fn order(&self) -> String {
        if self.key.is_empty() {
            String::new()
        } else {
            let columns: Vec<String> = self.key.iter().map(|c| quote(c)).collect();
            format!(" ORDER BY {}", columns.join(", "))
        }
    }
}

/// `(k1, k2, …) <op> (v1, v2, …)` in the form range scans use:
/// `k1 > v1 OR (k1 = v1 AND (k2 > v2 OR (k2 = v2 AND k3 >= v3)))` (`strict` for all but the
/// last column, `last` for it).
pub(super) fn compare(
    key: &[String],
    values: &[KeyValue],
    strict: &str,
    last: &str,
    params: &mut Vec<Value>,
) -> String {
    let n = key.len().min(values.len());
    let mut text = String::new();
    for i in 0..n {
        let column = quote(&key[i]);
        if i + 1 == n {
            text.push_str(&format!("{column} {last} ?"));
            params.push(Value::from(&values[i]));
        } else {
            text.push_str(&format!("({column} {strict} ? OR ({column} = ? AND ("));
            params.push(Value::from(&values[i]));
            params.push(Value::from(&values[i]));
        }
    }
    for _ in 1..n {
        text.push_str(")))");
    }
    format!("({text})")
}

pub(super) fn params(values: Vec<Value>) -> Params {
    if values.is_empty() {
        Params::Empty
    } else {
        Params::Positional(values)
    }
}

impl SnapshotPlan {
    /// Splits `tables` into chunks of about `chunk_rows` rows by primary key, reading the
    /// boundaries on `conn` (in the snapshot's transaction). Every chunk of a split table holds
    /// at least one row under the snapshot.
    ///
    /// # Errors
    ///
    /// Retryable on connection trouble.
    pub async fn build(
        conn: &mut Conn,
        tables: &[CapturedTable],
        chunk_rows: u32,
    ) -> Result<Self, PipelineError> {
        let mut chunks = Vec::new();
        for table in tables {
            let key: Vec<String> = conn
                .exec(
                    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
                     WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
                     ORDER BY ORDINAL_POSITION",
                    (table.database.as_str(), table.table.as_str()),
                )
                .await
                .map_err(sql_error("cannot read a primary key"))?;
            let mut chunk = Chunk {
                table: table.clone(),
                key,
                lower: None,
                upper: None,
                done: false,
            };
            if chunk.key.is_empty() {
                chunks.push(chunk);
                continue;
            }
            let columns: Vec<String> = chunk.key.iter().map(|c| quote(c)).collect();
            loop {
                let (range, values) = chunk.range();
                let next: Option<Row> = conn
                    .exec_first(
                        format!(
                            "SELECT {} FROM {}{range}{} LIMIT 1 OFFSET {chunk_rows}",
                            columns.join(", "),
                            table.quoted(),
                            chunk.order()
                        ),
                        params(values),
                    )
                    .await
                    .map_err(sql_error("cannot split a table into chunks"))?;
                let next = next.map(|row| row.unwrap().into_iter().map(KeyValue::from).collect());
                chunk.upper.clone_from(&next);
                let lower = next.clone();
                chunks.push(chunk.clone());
                if next.is_none() {
                    break;
                }
                chunk.lower = lower;
                chunk.upper = None;
            }
        }
        Ok(Self { chunks })
    }
}

/// What a snapshot needs from the run.
pub struct SnapshotContext<'a> {
    /// `kafka.topic_prefix`.
    pub prefix: &'a str,
    /// The producer (shared with the stream that follows).
    pub producer: &'a Arc<PipelineProducer>,
    /// Its delivery reports.
    pub deliveries: &'a mut mpsc::UnboundedReceiver<DeliveryEvent>,
    /// The in-flight budget.
    pub budget: &'a InFlightBudget,
    /// The binlog position the records show (`source.file`/`pos`).
    pub position: &'a BinlogPosition,
    /// Stop early.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
    /// The status board (progress).
    pub board: &'a StatusBoard,
    /// The pipeline's `[delivery]` (what a refused record becomes).
    pub delivery: &'a crate::config::DeliveryConfig,
    /// Where a record came from in the binlog, as operators read it.
    pub position_of: fn(&crate::kafka::OutRecord) -> String,
    /// `[transforms]`.
    pub transforms: Option<Arc<crate::transform::Chain>>,
    /// The server's flavor (how `information_schema` writes defaults).
    pub flavor: Flavor,
    /// `[kafka.events]`.
    pub events: &'a crate::event::EventOptions,
    /// The schema registry, when keys or values are Avro.
    pub registry: Option<Arc<crate::registry::Registry>>,
    /// With `include_schema_changes`: the tables' schema-change records, delivered before any
    /// row (the first chunk to finish covers them).
    pub schema_changes: Vec<OutRecord>,
}

/// What the workers hand to the delivery core: a row, or (first, from the run itself) one of
/// the snapshot's schema-change records.
pub(super) enum SnapshotItem {
    /// A row read by a worker.
    Row(RowChange),
    /// A schema-change record, already encoded.
    Schema(OutRecord),
}

/// Reads the plan's unfinished chunks on `snapshot`'s connections and publishes every row;
/// `record` is called with the plan whenever chunks finish (to persist it). Returns the rows
/// read once every record is acknowledged.
///
/// # Errors
///
/// Retryable on connection trouble (the unfinished chunks are read on the next start), fatal
/// when Kafka refuses a record for good or a column's type is not mapped.
pub async fn run(
    ctx: SnapshotContext<'_>,
    snapshot: ConsistentSnapshot,
    plan: &mut SnapshotPlan,
    mut record: impl FnMut(&SnapshotPlan) -> Result<(), PipelineError>,
) -> Result<u64, PipelineError> {
    let mut connections = snapshot.connections;
    let todo: VecDeque<usize> = (0..plan.chunks.len())
        .filter(|i| !plan.chunks[*i].done)
        .collect();
    tracing::info!(
        chunks = plan.chunks.len(),
        remaining = todo.len(),
        workers = connections.len(),
        position = %ctx.position,
        "snapshot: starting"
    );
    let ends = ends_of_snapshot(&mut connections[0], plan).await?;
    let places: Vec<chunked::ChunkPlace> = (0..plan.chunks.len())
        .map(|i| {
            let table = |j: usize| plan.chunks.get(j).map(|c| &c.table);
            chunked::ChunkPlace {
                first_of_all: ends.0 == Some(i),
                last_of_all: ends.1 == Some(i),
                first_in_table: i == 0 || table(i - 1) != table(i),
                last_in_table: table(i + 1) != table(i),
            }
        })
        .collect();
    let shared = Arc::new(Shared {
        chunks: plan.chunks.clone(),
        places,
        queue: std::sync::Mutex::new(todo),
        metrics: std::sync::Mutex::new(HashMap::new()),
        prefix: ctx.prefix.to_owned(),
        source: BinlogSource {
            server_id: 0,
            ts_sec: 0,
            gtid: None,
            file: Arc::from(ctx.position.file.as_str()),
            pos: ctx.position.pos,
            row: 0,
            thread: None,
            snapshot: SnapshotMarker::True,
        },
        shutdown: ctx.shutdown.clone(),
        flavor: ctx.flavor,
        events: ctx.events.clone(),
        registry: ctx.registry.clone(),
    });
    let (changes_tx, changes_rx) = mpsc::channel(connections.len().max(1));
    let schema_metrics = Arc::new(TableMetrics::new(ctx.prefix));
    if !ctx.schema_changes.is_empty() {
        let count = ctx.schema_changes.len();
        let items = ctx
            .schema_changes
            .into_iter()
            .map(|record| {
                let size = record.len().max(1);
                (SnapshotItem::Schema(record), size, 1)
            })
            .collect();
        // The channel holds one message before the delivery below reads it.
        chunked::hand_over(&changes_tx, items).await?;
        tracing::info!(events = count, "snapshot: schema changes handed over");
    }
    let mut workers = tokio::task::JoinSet::new();
    for conn in connections {
        workers.spawn(worker(conn, Arc::clone(&shared), changes_tx.clone()));
    }
    drop(changes_tx);
    let chunks_done = plan.chunks.iter().filter(|c| c.done).count();
    let prefix: Arc<str> = Arc::from(ctx.prefix);
    chunked::deliver(
        chunked::ChunkDelivery {
            producer: ctx.producer,
            deliveries: ctx.deliveries,
            events: ctx.producer.context().deliveries().clone(),
            budget: ctx.budget,
            delivery: ctx.delivery,
            position_of: ctx.position_of,
            transforms: ctx.transforms,
            shutdown: ctx.shutdown,
            board: ctx.board,
            chunks_total: plan.chunks.len(),
            chunks_done,
            // MySQL's exactly once is not offered (config validation refuses it).
            commits: None,
        },
        workers,
        changes_rx,
        move || ReadEncoder {
            prefix: Arc::clone(&prefix),
            now_micros: crate::delivery::unix_micros_now(),
            schema_metrics: Arc::clone(&schema_metrics),
        },
        |finished| {
            for &chunk in finished {
                plan.chunks[chunk].done = true;
            }
            record(plan)
        },
    )
    .await
}

/// The chunks holding the snapshot's first row (the first chunk of the first table with a
/// row) and its last (the last chunk of the last table with a row), for Debezium's `first` and
/// `last` markers; read under the snapshot.
async fn ends_of_snapshot(
    conn: &mut Conn,
    plan: &SnapshotPlan,
) -> Result<(Option<usize>, Option<usize>), PipelineError> {
    let chunks = &plan.chunks;
    let mut first = None;
    for i in 0..chunks.len() {
        if i > 0 && chunks[i - 1].table == chunks[i].table {
            continue;
        }
        if table_has_rows(conn, &chunks[i].table).await? {
            first = Some(i);
            break;
        }
    }
    let mut last = None;
    for i in (0..chunks.len()).rev() {
        if chunks
            .get(i + 1)
            .is_some_and(|n| n.table == chunks[i].table)
        {
            continue;
        }
        if table_has_rows(conn, &chunks[i].table).await? {
            last = Some(i);
            break;
        }
    }
    Ok((first, last))
}

async fn table_has_rows(conn: &mut Conn, table: &CapturedTable) -> Result<bool, PipelineError> {
    let row: Option<u8> = conn
        .query_first(format!("SELECT 1 FROM {} LIMIT 1", table.quoted()))
        .await
        .map_err(sql_error("cannot read a table for the snapshot"))?;
    Ok(row.is_some())
}

/// What the workers share.
struct Shared {
    chunks: Vec<Chunk>,
    places: Vec<chunked::ChunkPlace>,
    queue: std::sync::Mutex<VecDeque<usize>>,
    metrics: std::sync::Mutex<HashMap<String, Arc<TableMetrics>>>,
    prefix: String,
    /// The `source` block of every record (its marker and time set per row).
    source: BinlogSource,
    shutdown: tokio_util::sync::CancellationToken,
    flavor: Flavor,
    events: crate::event::EventOptions,
    registry: Option<Arc<crate::registry::Registry>>,
}

impl Shared {
    fn next_chunk(&self) -> Option<usize> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }

    fn table_metrics(&self, name: &str) -> Arc<TableMetrics> {
        let mut metrics = self
            .metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            metrics
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(TableMetrics::new(name))),
        )
    }
}

/// One snapshot worker: takes chunks from the queue and hands their rows to the delivery core;
/// ends its transaction when the queue is empty.
async fn worker(
    mut conn: Conn,
    shared: Arc<Shared>,
    changes: mpsc::Sender<ChunkMessage<SnapshotItem>>,
) -> Result<(), PipelineError> {
    while let Some(chunk) = shared.next_chunk() {
        if shared.shutdown.is_cancelled() {
            break;
        }
        let span = tracing::info_span!(
            "snapshot_chunk",
            table = %format_args!("{}.{}", shared.chunks[chunk].table.database, shared.chunks[chunk].table.table),
            chunk
        );
        let rows = read_chunk(&mut conn, &shared, chunk, &changes)
            .instrument(span)
            .await?;
        if changes
            .send(ChunkMessage::Read { chunk, rows })
            .await
            .is_err()
        {
            // The delivery ended (its error is the run's).
            break;
        }
    }
    let _ = conn.query_drop("COMMIT").await;
    let _ = conn.disconnect().await;
    Ok(())
}

/// Reads one chunk and hands its rows over; returns its row count.
async fn read_chunk(
    conn: &mut Conn,
    shared: &Shared,
    chunk_id: usize,
    changes: &mpsc::Sender<ChunkMessage<SnapshotItem>>,
) -> Result<u64, PipelineError> {
    let chunk = &shared.chunks[chunk_id];
    let place = &shared.places[chunk_id];
    let name = format!("{}.{}", chunk.table.database, chunk.table.table);
    let (range, values) = chunk.range();
    let sql = format!(
        "SELECT * FROM {}{range}{}",
        chunk.table.quoted(),
        chunk.order()
    );
    let read_error = || format!("cannot read {name} for the snapshot");
    // The columns as declared: POINT (Debezium's Point struct; a result set says GEOMETRY),
    // and what the schemas need (widths, NOT NULL, defaults, ENUM labels).
    let catalog = super::schema::column_catalog(
        conn,
        shared.flavor,
        &chunk.table.database,
        &chunk.table.table,
    )
    .await?;
    let points: Vec<String> = catalog
        .iter()
        .filter(|c| c.data_type == "point")
        .map(|c| c.name.clone())
        .collect();
    let mut result = conn
        .exec_iter(sql, params(values))
        .await
        .map_err(|e| PipelineError::retryable(read_error(), e))?;
    let mut table = TableInfo::of_result(
        &shared.prefix,
        &chunk.table.database,
        &chunk.table.table,
        result.columns_ref(),
        &chunk.key,
        &points,
        shared.table_metrics(&name),
        &shared.events,
    )?;
    table
        .prepare_schemas(&catalog, &shared.events, shared.registry.as_deref())
        .await?;
    let table = Arc::new(table);
    let rows_metric = metrics::counter!(m::SNAPSHOT_ROWS, "table" => name.clone());
    let mut records = 0u64;
    let mut read = 0u64;
    let mut held: Option<Vec<Value>> = None;
    let mut batch: Vec<(Vec<Value>, SnapshotMarker)> = Vec::with_capacity(BATCH_ROWS);
    loop {
        if shared.shutdown.is_cancelled() {
            return Err(PipelineError::retryable(
                "stopped during the snapshot",
                Interruption::Shutdown,
            ));
        }
        let row = result
            .next()
            .await
            .map_err(|e| PipelineError::retryable(read_error(), e))?;
        let end = row.is_none();
        // The last row read is held back until the next shows whether it is the chunk's last.
        if let Some(previous) = held.take() {
            batch.push((previous, place.marker(read == 0, end)));
            read += 1;
        }
        held = row.map(Row::unwrap);
        if batch.len() >= BATCH_ROWS || (end && !batch.is_empty()) {
            rows_metric.increment(batch.len() as u64);
            let rows = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_ROWS));
            records += hand_over(shared, &table, rows, changes).await?;
        }
        if end {
            break;
        }
    }
    Ok(records)
}

/// Hands rows over to the delivery core as read events; returns how many.
async fn hand_over(
    shared: &Shared,
    table: &Arc<TableInfo>,
    rows: Vec<(Vec<Value>, SnapshotMarker)>,
    changes: &mpsc::Sender<ChunkMessage<SnapshotItem>>,
) -> Result<u64, PipelineError> {
    let count = rows.len() as u64;
    let now_micros = crate::delivery::unix_micros_now();
    let mut source = shared.source.clone();
    source.ts_sec = u32::try_from(now_micros.div_euclid(1_000_000)).unwrap_or(u32::MAX);
    let batch = rows
        .into_iter()
        .map(|(row, marker)| {
            // As a streamed row: its values thrice (escaped, numbers as text) and the envelope.
            let size = row_bytes(&row) * 3 + 512;
            let change = RowChange {
                table: Arc::clone(table),
                op: Op::Read,
                before: None,
                after: Some(
                    row.into_iter()
                        .map(mysql_async::binlog::value::BinlogValue::Value)
                        .collect(),
                ),
                source: BinlogSource {
                    snapshot: marker,
                    ..source.clone()
                },
                transaction: None,
            };
            let records = change.records(false);
            (SnapshotItem::Row(change), size, records)
        })
        .collect();
    chunked::hand_over(changes, batch).await?;
    Ok(count)
}

/// Encodes the snapshot's rows in the delivery core.
struct ReadEncoder {
    /// `kafka.topic_prefix`.
    prefix: Arc<str>,
    /// The envelopes' processing time.
    now_micros: i64,
    /// The schema-change topic's counters.
    schema_metrics: Arc<TableMetrics>,
}

impl Encode<SnapshotItem> for ReadEncoder {
    fn encode(&self, item: &SnapshotItem, out: &mut Vec<OutRecord>) -> Origin {
        let change = match item {
            SnapshotItem::Row(change) => change,
            SnapshotItem::Schema(record) => {
                out.push(record.clone());
                return Origin {
                    commit_unix_micros: self.now_micros,
                    table: Arc::clone(&self.schema_metrics),
                };
            }
        };
        encode::encode(change, &self.prefix, false, self.now_micros, out);
        Origin {
            commit_unix_micros: self.now_micros,
            table: Arc::clone(&change.table.metrics),
        }
    }

    fn describe(&self, item: &SnapshotItem, reason: &str) -> FailedChange {
        let change = match item {
            SnapshotItem::Row(change) => change,
            SnapshotItem::Schema(record) => {
                return FailedChange {
                    reason: reason.to_owned(),
                    topic: Arc::clone(&record.topic),
                    position: format!("a schema-change record of the snapshot ({})", record.topic),
                    description: Vec::new(),
                    origin: Origin {
                        commit_unix_micros: self.now_micros,
                        table: Arc::clone(&self.schema_metrics),
                    },
                };
            }
        };
        let table = format!("{}.{}", change.table.database, change.table.table);
        let position = format!(
            "a snapshot row of {table} (binlog {}:{})",
            change.source.file, change.source.pos
        );
        let description = serde_json::to_vec(&serde_json::json!({
            "table": table,
            "snapshot": true,
            "file": &*change.source.file,
            "pos": change.source.pos,
            "error": reason,
        }))
        .unwrap_or_default();
        FailedChange {
            reason: reason.to_owned(),
            topic: Arc::clone(&change.table.topic),
            position,
            description,
            origin: Origin {
                commit_unix_micros: self.now_micros,
                table: Arc::clone(&change.table.metrics),
            },
        }
    }
}

/// The bytes of a row's values.
fn row_bytes(row: &[Value]) -> usize {
    row.iter()
        .map(|value| match value {
            Value::Bytes(bytes) => bytes.len(),
            _ => 8,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_key_ranges_are_written_for_range_scans() {
        let chunk = Chunk {
            table: CapturedTable {
                database: "shop".into(),
                table: "orders".into(),
            },
            key: vec!["a".into(), "b".into()],
            lower: Some(vec![KeyValue::Int(1), KeyValue::Base64(BASE64.encode("x"))]),
            upper: Some(vec![KeyValue::Int(5), KeyValue::Uint(2)]),
            done: false,
        };
        let (clause, values) = chunk.range();
        assert_eq!(
            clause,
            " WHERE ((`a` > ? OR (`a` = ? AND (`b` >= ?)))) AND ((`a` < ? OR (`a` = ? AND (`b` < ?))))"
        );
        assert_eq!(
            values,
            [
                Value::Int(1),
                Value::Int(1),
                Value::Bytes(b"x".to_vec()),
                Value::Int(5),
                Value::Int(5),
                Value::UInt(2)
            ]
        );
        assert_eq!(chunk.order(), " ORDER BY `a`, `b`");
        let single = Chunk {
            key: vec!["id".into()],
            lower: None,
            upper: Some(vec![KeyValue::Int(7)]),
            ..chunk
        };
        assert_eq!(single.range().0, " WHERE (`id` < ?)");
    }

    #[test]
    fn a_plan_survives_the_state_file() {
        let plan = SnapshotPlan {
            chunks: vec![Chunk {
                table: CapturedTable {
                    database: "d".into(),
                    table: "t".into(),
                },
                key: vec!["id".into()],
                lower: Some(vec![
                    KeyValue::Uint(u64::MAX),
                    KeyValue::Date(2024, 2, 29, 1, 2, 3, 4),
                ]),
                upper: None,
                done: true,
            }],
        };
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<SnapshotPlan>(&text).unwrap(), plan);
    }
}
