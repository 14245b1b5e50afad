//! Incremental (ad-hoc) snapshots while streaming from MySQL/MariaDB, with DBLog's watermark
//! technique; the requests, the queue and the progress are shared with the PostgreSQL source
//! ([`crate::source::incremental`]).
//!
//! A table (or the rows of it a filter selects) is read in primary-key order, one chunk of
//! `incremental_chunk_rows` rows at a time, on a side connection, while the binlog streams.
//! The watermarks are rows of the signal table (`source.mysql.signal_table`), as Debezium's
//! MySQL connector writes them: each is a transaction that inserts a row (`id` the chunk's
//! token, `type` `snapshot-window-open` or `snapshot-window-close`) and deletes it again, so the
//! table stays empty and the binlog carries the insert. For each chunk the side connection:
//!
//! 1. writes the **opening watermark** L and waits for its commit;
//! 2. reads the chunk in one statement (`SELECT * … WHERE key > last key [AND filter] ORDER BY
//!    key LIMIT n`: one consistent read, its read view taken after L committed);
//! 3. writes the **closing watermark** H.
//!
//! The stream loop notes, from L's row event on, the event key of every streamed change to the
//! table (an update's old and new key, a delete's key); at H's row event the chunk's rows whose
//! keys were not noted are published as `op: "r"` events (`source.snapshot: "incremental"`) at
//! H's place in the binlog, inside H's transaction, and the window closes.
//!
//! **Why no row of a chunk ever overwrites a newer streamed change.** InnoDB commits a
//! transaction in two phases with the binlog: it is prepared, written (and synced) to the
//! binlog, and only then committed in the engine, where it becomes visible to new reads — so,
//! as on PostgreSQL, a replica can receive a transaction before other sessions can see it. What
//! makes the window sound is the order of those engine commits: MySQL commits in binlog order
//! (`binlog_order_commits = ON`, the default: the group commit's last stage commits each
//! group's transactions in order, one group after the other), and MariaDB always does
//! (`commit_ordered`, the engine call made in binlog order, is where InnoDB makes a transaction
//! visible). Take a chunk row of key k that is published, so k was not noted between L and H:
//!
//! - a transaction T changing k that is before L in the binlog committed in the engine before
//!   L did, and L's commit had returned before the read began: the read sees T;
//! - a transaction between L and H changing k would have been noted: there is none;
//! - a transaction the read sees had committed in the engine before the read, so it had been
//!   written to the binlog before the read, which is before H was written: it is before H.
//!
//! So the row is k's state at H in binlog order, and every later change of k follows it in the
//! topic; a noted key's row is dropped (its streamed change, before H, is at least as new). On
//! MySQL with `binlog_order_commits = OFF` the first point fails: chunks are refused then (the
//! request's table is abandoned with the fix in the log).
//!
//! A DDL statement on a captured table while a window is open (the chunk's columns may no
//! longer be the table's), a key that cannot be computed, or an opening watermark the loop did
//! not see: the chunk is dropped at H and read again.
//!
//! **Progress** (the queue of tables, the last key read of the current one, the ids of the
//! requests accepted) is part of the state file, saved with the binlog position: the state a
//! chunk reaches is saved once the checkpoint passed H's transaction, that is once Kafka
//! acknowledged the chunk's rows (they precede H's commit). After a crash the snapshot resumes
//! at the first chunk not saved (read again: its rows may be published twice, never a row
//! older than a streamed change). Watermarks of an earlier run carry another token and are
//! ignored. A signal row replayed after a restart (its transaction was not saved) is accepted
//! again only if its id is not remembered.
//!
//! Republication (`tombstones`) is PostgreSQL's only: a MySQL request with it is refused.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Row, Value};

use super::config::{MysqlPipelineConfig, MysqlSourceConfig};
use super::encode::{TableInfo, event_key};
use super::server::{BinlogSeq, Flavor, sql_error};
use super::snapshot::{KeyValue, compare, params, quote};
use crate::config::parse_table_name;
use crate::error::PipelineError;
use crate::runtime::metrics::TableMetrics;
use crate::runtime::status::IncrementalStatus;
use crate::source::incremental::{
    ChunkError, ChunkReader, IncrementalState, Progress, RefusedRequest, Signal, TableSnapshot,
};
use crate::sql::{SqlDialect, check_condition};

/// The MySQL source's incremental snapshot state: keys are column values.
pub type MysqlIncrementalState = IncrementalState<Vec<KeyValue>>;

/// `type` of an opening watermark's row in the signal table.
pub const WINDOW_OPEN: &str = "snapshot-window-open";
/// `type` of a closing watermark's row.
pub const WINDOW_CLOSE: &str = "snapshot-window-close";

/// How long the loop waits, at the closing watermark, for the side task to hand over its rows
/// (it wrote the watermark, so only the commit's answer is left).
const JOIN_DEADLINE: Duration = Duration::from_secs(10);

/// How long the side connection waits for a table lock (`lock_wait_timeout`).
const LOCK_WAIT_TIMEOUT_S: u32 = 10;

/// Server errors that pass (a lock wait timeout, a deadlock, an interrupted query, the server
/// shutting down): the chunk is read again later.
const TRANSIENT_ERRORS: [u16; 5] = [1205, 1213, 1317, 1053, 1927];

/// Creates the signal table when it is missing.
///
/// # Errors
///
/// Fatal when it is missing and cannot be created.
pub async fn ensure_signal_table(
    conn: &mut Conn,
    source: &MysqlSourceConfig,
) -> Result<(), PipelineError> {
    let Some((database, table)) = source.signal_table.as_deref().and_then(parse_table_name) else {
        return Ok(());
    };
    let exists: Option<u8> = conn
        .exec_first(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (database, table),
        )
        .await
        .map_err(sql_error("cannot look up the signal table"))?;
    if exists.is_some() {
        return Ok(());
    }
    let qualified = format!("{}.{}", quote(database), quote(table));
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {qualified} (id VARCHAR(64) NOT NULL PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT) ENGINE=InnoDB"
    );
    conn.query_drop(&create).await.map_err(|e| {
        PipelineError::fatal_with(
            format!(
                "cannot create the signal table {database}.{table} (source.mysql.signal_table)"
            ),
            format!(
                "create it yourself: {create}; and GRANT INSERT, DELETE ON {qualified} TO <user> (incremental snapshots write their watermarks there)"
            ),
            e,
        )
    })?;
    tracing::info!(table = %format!("{database}.{table}"), "signal table created");
    Ok(())
}

/// What the side connection read for one chunk.
pub struct ChunkRows {
    /// The table as the encoder needs it (from the chunk's result set).
    pub table: Arc<TableInfo>,
    /// The rows, in key order.
    pub rows: Vec<Vec<Value>>,
    /// The last row's key, to continue after.
    pub last_key: Option<Vec<KeyValue>>,
    /// Whether the chunk was full (more rows may follow).
    pub full: bool,
}

fn classify(what: &str, table: &str, error: mysql_async::Error) -> ChunkError {
    match &error {
        mysql_async::Error::Server(server) if !TRANSIENT_ERRORS.contains(&server.code) => {
            ChunkError::Table(format!("{what} ({table}): {}", server.message))
        }
        _ => ChunkError::Retry(PipelineError::retryable(format!("{what} ({table})"), error)),
    }
}

/// Writes a watermark: inserts and deletes the row `(token, kind, table)` of the signal table
/// in one transaction.
async fn write_watermark(
    conn: &mut Conn,
    signal_table: &str,
    token: &str,
    kind: &str,
    table: &str,
) -> Result<(), ChunkError> {
    let result = async {
        conn.query_drop("START TRANSACTION").await?;
        conn.exec_drop(
            format!("INSERT INTO {signal_table} (id, type, data) VALUES (?, ?, ?)"),
            (token, kind, table),
        )
        .await?;
        conn.exec_drop(format!("DELETE FROM {signal_table} WHERE id = ?"), (token,))
            .await?;
        conn.query_drop("COMMIT").await
    }
    .await;
    if let Err(error) = result {
        let _ = conn.query_drop("ROLLBACK").await;
        return Err(
            match classify("cannot write a snapshot watermark", table, error) {
                ChunkError::Table(problem) => ChunkError::Table(format!(
                    "{problem}: GRANT INSERT, DELETE ON {signal_table} TO <user> (watermarks are written there)"
                )),
                retry => retry,
            },
        );
    }
    Ok(())
}

/// Opens the side connection: the snapshot session of [`super::snapshot`], and on MySQL a
/// check that engine commits follow the binlog's order (see the module docs).
async fn connect(source: &MysqlSourceConfig, flavor: Flavor) -> Result<Conn, ChunkError> {
    let mut conn = super::snapshot::reader(source)
        .await
        .map_err(ChunkError::Retry)?;
    // A table locked by someone else (LOCK TABLES, a DDL statement) is waited for so long,
    // then the chunk is retried (error 1205), rather than the server's default of a year.
    conn.query_drop(format!(
        "SET SESSION lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}"
    ))
    .await
    .map_err(|e| ChunkError::Retry(PipelineError::retryable("cannot set up a session", e)))?;
    if flavor == Flavor::Mysql {
        let ordered: Option<i64> = conn
            .query_first("SELECT @@GLOBAL.binlog_order_commits")
            .await
            .map_err(|e| {
                ChunkError::Retry(PipelineError::retryable(
                    "cannot read binlog_order_commits",
                    e,
                ))
            })?;
        if ordered == Some(0) {
            return Err(ChunkError::Table(
                "binlog_order_commits is OFF: transactions may become visible out of binlog order, and a chunk could then be older than a change already streamed; SET GLOBAL binlog_order_commits = ON (the default) and request the snapshot again".into(),
            ));
        }
    }
    Ok(conn)
}

/// Reads the chunk after `snapshot.after` between the watermarks `token` (see the module docs).
///
/// # Errors
///
/// [`ChunkError`].
async fn read_chunk(
    conn: &mut Conn,
    config: &MysqlPipelineConfig,
    reader: &ChunkContext,
    snapshot: &TableSnapshot<Vec<KeyValue>>,
    limit: u32,
    token: &str,
) -> Result<ChunkRows, ChunkError> {
    let name = snapshot.table.as_str();
    let Some((database, table)) = parse_table_name(name) else {
        return Err(ChunkError::Table(format!("{name:?} is not database.table")));
    };
    let Some(signal_table) = config
        .source
        .signal_table
        .as_deref()
        .and_then(parse_table_name)
        .map(|(d, t)| format!("{}.{}", quote(d), quote(t)))
    else {
        return Err(ChunkError::Table(
            "no source.mysql.signal_table: incremental snapshots write their watermarks there"
                .into(),
        ));
    };
    let key: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(|e| classify("cannot read the primary key", name, e))?;
    if key.is_empty() {
        let exists: Option<u8> = conn
            .exec_first(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (database, table),
            )
            .await
            .map_err(|e| classify("cannot look up the table", name, e))?;
        return Err(ChunkError::Table(if exists.is_none() {
            format!("table {name} does not exist (any more)")
        } else {
            format!(
                "table {name} has no primary key: incremental snapshots read in key order (add a primary key)"
            )
        }));
    }
    // The columns as declared: POINT, and what the schemas need.
    let catalog = super::schema::column_catalog(conn, reader.flavor, database, table)
        .await
        .map_err(|e| {
            if e.is_retryable() {
                ChunkError::Retry(e)
            } else {
                ChunkError::Table(e.chain())
            }
        })?;
    let points: Vec<String> = catalog
        .iter()
        .filter(|c| c.data_type == "point")
        .map(|c| c.name.clone())
        .collect();
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    if let Some(after) = &snapshot.after {
        conditions.push(compare(&key, after, ">", ">", &mut values));
    }
    if let Some(filter) = &snapshot.filter {
        // Checked when the request came; again here for requests queued by an older version.
        check_condition(SqlDialect::Mysql, filter).map_err(|problem| {
            ChunkError::Table(format!(
                "the request's filter {problem}: a filter is one SQL condition"
            ))
        })?;
        conditions.push(format!("({filter})"));
    }
    let order: Vec<String> = key.iter().map(|c| quote(c)).collect();
    let sql = format!(
        "SELECT * FROM {}.{}{} ORDER BY {} LIMIT {limit}",
        quote(database),
        quote(table),
        if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        },
        order.join(", "),
    );
    write_watermark(conn, &signal_table, token, WINDOW_OPEN, name).await?;
    // One prepared statement (the server parses it as one: a filter cannot end it and run
    // another) in a read-only transaction (nothing in it can write); its read view is taken by
    // the read, after the opening watermark committed.
    let read = async {
        conn.query_drop("START TRANSACTION READ ONLY").await?;
        let mut result = conn.exec_iter(sql, params(values)).await?;
        let columns = result.columns_ref().to_vec();
        let rows: Vec<Row> = result.collect().await?;
        conn.query_drop("COMMIT").await?;
        Ok::<_, mysql_async::Error>((columns, rows))
    };
    let (columns, rows) = match read.await {
        Ok(read) => read,
        Err(error) => {
            let _ = conn.query_drop("ROLLBACK").await;
            return Err(classify(
                "cannot read an incremental snapshot chunk",
                name,
                error,
            ));
        }
    };
    // The names as the server keeps them (the request's may differ in case), as the stream's
    // TABLE_MAP events carry them: the topic is the stream's.
    let (database, table) = columns
        .first()
        .map(|c| (c.schema_str().into_owned(), c.org_table_str().into_owned()))
        .filter(|(d, t)| !d.is_empty() && !t.is_empty())
        .unwrap_or_else(|| (database.to_owned(), table.to_owned()));
    let mut info = TableInfo::of_result(
        &config.kafka.topic_prefix,
        &database,
        &table,
        &columns,
        &key,
        &points,
        Arc::new(TableMetrics::new(name)),
        &config.kafka.events,
    )
    .map_err(|e| ChunkError::Table(e.chain()))?;
    info.prepare_schemas(&catalog, &config.kafka.events, reader.registry.as_deref())
        .await
        .map_err(|e| ChunkError::Table(e.chain()))?;
    let rows: Vec<Vec<Value>> = rows.into_iter().map(Row::unwrap).collect();
    let last_key = rows.last().map(|row| {
        info.key_columns
            .iter()
            .map(|&i| KeyValue::from(row.get(i).cloned().unwrap_or(Value::NULL)))
            .collect()
    });
    // Tests widen the window between the read and the closing watermark here.
    crate::delay_point!("mysql_incremental::close");
    write_watermark(conn, &signal_table, token, WINDOW_CLOSE, name).await?;
    Ok(ChunkRows {
        table: Arc::new(info),
        full: rows.len() >= limit as usize,
        rows,
        last_key,
    })
}

/// What the stream loop notes while a chunk is read.
#[derive(Default)]
struct Window {
    /// The opening watermark was streamed: changes to the table are noted from now on.
    opened: bool,
    /// Event keys of the changes streamed since the window opened.
    keys: HashSet<Vec<u8>>,
    /// Why the chunk cannot be trusted (it is read again).
    stale: Option<&'static str>,
}

/// Rows of a chunk to publish at its closing watermark.
pub struct ChunkToPublish {
    /// The table.
    pub table: Arc<TableInfo>,
    /// The rows whose keys had no streamed change in the window.
    pub rows: Vec<Vec<BinlogValue<'static>>>,
}

/// What a signal table row was.
pub enum SignalRow {
    /// A request (applied or refused), another run's watermark, or an opening watermark.
    Taken,
    /// The open chunk's closing watermark: call [`IncrementalRun::on_close`].
    Close,
}

/// The incremental snapshots of one run: the state, the open chunk and the progress waiting
/// for confirmation. Owned by the stream loop.
pub struct IncrementalRun {
    state: MysqlIncrementalState,
    /// States to save once the checkpoint passed their transaction.
    progress: Progress<BinlogSeq, Vec<KeyValue>>,
    chunks: ChunkReader<Conn, Window, ChunkRows>,
    config: Arc<MysqlPipelineConfig>,
    flavor: Flavor,
    /// The schema registry, when keys or values are Avro.
    registry: Option<Arc<crate::registry::Registry>>,
}

/// What a chunk's read needs of the run beyond the configuration.
struct ChunkContext {
    flavor: Flavor,
    registry: Option<Arc<crate::registry::Registry>>,
}

impl IncrementalRun {
    /// The run's incremental snapshots, from the state file's `state`.
    pub fn new(
        config: Arc<MysqlPipelineConfig>,
        flavor: Flavor,
        registry: Option<Arc<crate::registry::Registry>>,
        state: Option<MysqlIncrementalState>,
    ) -> Self {
        let state = state.unwrap_or_default();
        if let Some(current) = state.queue.front() {
            tracing::info!(
                table = %current.table,
                request = %current.request,
                rows = current.rows,
                tables_queued = state.queue.len(),
                "incremental snapshot: resuming"
            );
        }
        Self {
            state,
            progress: Progress::default(),
            // Short (the signal table's id column): unique per run.
            chunks: ChunkReader::new(format!("sluice-{:x}", crate::delivery::unix_micros_now())),
            config,
            flavor,
            registry,
        }
    }

    /// Queues the current state to be saved once the checkpoint passed `at`.
    fn record(&mut self, at: BinlogSeq, request: u64) {
        self.progress.push(at, self.state.clone(), request);
    }

    /// The newest admin request in the states [`confirmed`](Self::confirmed) handed out: once
    /// the state file is written, it and every earlier request are in it.
    pub fn confirmed_request(&self) -> u64 {
        self.progress.confirmed_request()
    }

    /// The newest refused requests, for the status.
    pub fn refused(&self) -> Vec<RefusedRequest> {
        self.state.refused()
    }

    /// Applies an operator's signal seen at `at` (the transaction of the signal row, or the
    /// newest checkpoint for an API request, then `request` is its sequence number on the
    /// status board; 0 for a signal row).
    pub fn accept(&mut self, signal: &Signal, at: BinlogSeq, request: u64) {
        let refused = match signal {
            Signal::Snapshot {
                tombstones: true, ..
            } => Some(
                "republication (tombstones) is not supported for MySQL/MariaDB sources; request it without tombstones".to_owned(),
            ),
            _ => signal.check_filters(SqlDialect::Mysql).err(),
        };
        if let Some(reason) = refused {
            if self.state.refuse(signal.id(), &reason) || request != 0 {
                self.record(at, request);
            }
            return;
        }
        let source = &self.config.source;
        let changed = self.state.accept(signal, &|t| source.captures_name(t));
        if changed
            && let Some(chunk) = self.chunks.open()
            && !self.state.queue.iter().any(|t| t.table == chunk.table)
        {
            tracing::info!(table = %chunk.table, "incremental snapshot stopped");
        }
        if changed || request != 0 {
            self.record(at, request);
        }
        self.maybe_start();
    }

    /// A row inserted into the signal table, in the transaction that commits as `at`.
    pub fn on_signal_row(&mut self, id: &str, kind: &str, data: &str, at: BinlogSeq) -> SignalRow {
        match kind {
            WINDOW_OPEN => {
                if let Some(chunk) = self.chunks.open_mut().filter(|c| c.token == id) {
                    chunk.window.opened = true;
                }
                SignalRow::Taken
            }
            WINDOW_CLOSE => {
                if self.chunks.open().is_some_and(|c| c.token == id) {
                    SignalRow::Close
                } else {
                    SignalRow::Taken // an earlier run's, or a chunk given up
                }
            }
            _ => {
                match Signal::parse(id, kind, data) {
                    Ok(Some(signal)) => self.accept(&signal, at, 0),
                    Ok(None) => tracing::debug!(id, kind, "signal ignored (not a snapshot signal)"),
                    Err(problem) => {
                        if self.state.refuse(id, &format!("signal row: {problem}")) {
                            self.record(at, 0);
                        }
                    }
                }
                SignalRow::Taken
            }
        }
    }

    /// Notes the keys of a streamed change of `table` while a window on it is open.
    pub fn note(
        &mut self,
        table: &TableInfo,
        before: Option<&[BinlogValue<'static>]>,
        after: Option<&[BinlogValue<'static>]>,
    ) {
        let Some(chunk) = self.chunks.open_mut() else {
            return;
        };
        // Names compared as a server with case-insensitive names would (noting a key too many
        // only drops a row the stream carries anyway).
        let same = parse_table_name(&chunk.table).is_some_and(|(database, name)| {
            database.eq_ignore_ascii_case(&table.database)
                && name.eq_ignore_ascii_case(&table.table)
        });
        let window = &mut chunk.window;
        if !window.opened || !same {
            return;
        }
        for row in [before, after].into_iter().flatten() {
            match event_key(table, row) {
                Some(key) => {
                    window.keys.insert(key);
                }
                None => window.stale = Some("a streamed change's key could not be computed"),
            }
        }
    }

    /// A DDL statement on a captured table or database: an open window's chunk is read again.
    pub fn on_schema_change(&mut self) {
        if let Some(chunk) = self.chunks.open_mut().filter(|c| c.window.opened) {
            chunk.window.stale = Some("a schema change was streamed while it was read");
        }
    }

    /// Opens the next chunk's window and starts reading it, when a table is queued and no
    /// chunk is open.
    pub fn maybe_start(&mut self) {
        if !self.chunks.may_start() {
            return;
        }
        let Some(snapshot) = self.state.queue.front().cloned() else {
            return;
        };
        let config = Arc::clone(&self.config);
        let flavor = self.flavor;
        let reader = ChunkContext {
            flavor,
            registry: self.registry.clone(),
        };
        let limit = config.source.incremental_chunk_rows.max(1);
        let (request, table) = (snapshot.request.clone(), snapshot.table.clone());
        let connect = {
            let config = Arc::clone(&config);
            async move { connect(&config.source, flavor).await }
        };
        self.chunks.start(
            request,
            table,
            Window::default(),
            connect,
            move |conn: &mut Conn, token: String| {
                Box::pin(async move {
                    read_chunk(conn, &config, &reader, &snapshot, limit, &token).await
                })
            },
        );
    }

    /// Collects a finished read; a failed one is dropped (its table skipped, or retried
    /// later). Call on every status tick.
    pub async fn poll(&mut self, at: BinlogSeq) {
        if let Some((table, error)) = self.chunks.failed().await {
            self.on_error(&table, error, at);
        }
        self.maybe_start();
    }

    fn on_error(&mut self, table: &str, error: ChunkError, at: BinlogSeq) {
        if self.chunks.on_error(&mut self.state, table, error) {
            self.record(at, 0);
        }
    }

    /// The open chunk's closing watermark, in the transaction that commits as `at`: returns
    /// the chunk's rows to publish there (before anything streamed after it) and records the
    /// progress.
    pub async fn on_close(&mut self, at: BinlogSeq) -> Option<ChunkToPublish> {
        let (chunk, result) = self
            .chunks
            .close(
                JOIN_DEADLINE,
                "incremental snapshot: the chunk's reader did not answer after its watermark; reading it again",
            )
            .await?;
        let rows = match result {
            Ok(rows) => rows,
            Err(error) => {
                self.on_error(&chunk.table, error, at);
                return None;
            }
        };
        let window = chunk.window;
        let stale = window
            .stale
            .or((!window.opened).then_some("its opening watermark was not seen"));
        if let Some(why) = stale {
            tracing::info!(table = %chunk.table, "incremental snapshot: chunk dropped ({why}); reading it again");
            self.chunks.read_again();
            return None;
        }
        let current = self.state.queue.front_mut()?;
        if current.table != chunk.table || current.request != chunk.request {
            return None; // stopped meanwhile
        }
        let read = rows.rows.len();
        let publish: Vec<Vec<BinlogValue<'static>>> = rows
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(BinlogValue::Value).collect::<Vec<_>>())
            .filter(|row| event_key(&rows.table, row).is_none_or(|key| !window.keys.contains(&key)))
            .collect();
        if let Some(last) = rows.last_key {
            current.after = Some(last);
        }
        current.rows += publish.len() as u64;
        current.chunks += 1;
        tracing::debug!(table = %current.table, read, published = publish.len(), noted = window.keys.len(), "incremental snapshot: chunk");
        if !rows.full {
            tracing::info!(
                table = %current.table,
                request = %current.request,
                rows = current.rows,
                chunks = current.chunks,
                "incremental snapshot: table done"
            );
            self.state.queue.pop_front();
        }
        self.record(at, 0);
        Some(ChunkToPublish {
            table: rows.table,
            rows: publish,
        })
    }

    /// The newest state whose transaction `watermark` covers, to save with it.
    pub fn confirmed(&mut self, watermark: BinlogSeq) -> Option<MysqlIncrementalState> {
        self.progress.confirmed(watermark)
    }

    /// For `/health`: the running table's progress and the queue's length.
    pub fn status(&self) -> Option<IncrementalStatus> {
        self.state.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> IncrementalRun {
        let text = "name = \"shop\"\n[source.mysql]\nurl = \"mysql://u@h:3306\"\nserver_id = 7\n\
                    include_tables = [\"shop.*\"]\nsignal_table = \"shop.sig\"\n\
                    [kafka]\nbrokers = \"127.0.0.1:9092\"\n";
        let config = MysqlPipelineConfig::from_toml(text, "t.toml", &|_| None).unwrap();
        IncrementalRun::new(Arc::new(config), Flavor::Mariadb, None, None)
    }

    fn snapshot(id: &str, tables: &[&str], tombstones: bool) -> Signal {
        Signal::Snapshot {
            id: id.into(),
            tables: tables.iter().map(|t| ((*t).to_owned(), None)).collect(),
            tombstones,
        }
    }

    #[test]
    fn progress_is_handed_out_once_the_checkpoint_passed_it() {
        let mut run = run();
        // Outside a runtime the chunk's task cannot start: keep it from trying.
        run.chunks.hold_for(Duration::from_secs(3600));
        run.accept(
            &snapshot("r1", &["shop.orders", "other.t", "shop.sig"], false),
            BinlogSeq(5),
            0,
        );
        assert_eq!(
            run.status().map(|s| (s.table, s.tables_queued)),
            Some(("shop.orders".to_owned(), 1)),
            "tables not captured (and the signal table) are skipped"
        );
        assert_eq!(run.confirmed(BinlogSeq(4)), None);
        let state = run.confirmed(BinlogSeq(5)).expect("recorded at 5");
        assert_eq!(state.accepted, ["r1"]);
        // A replayed signal changes nothing; an admin request is answered even so.
        run.accept(&snapshot("r1", &["shop.orders"], false), BinlogSeq(6), 0);
        assert_eq!(run.confirmed(BinlogSeq(6)), None);
        run.accept(&snapshot("r1", &["shop.orders"], false), BinlogSeq(6), 3);
        assert!(run.confirmed(BinlogSeq(6)).is_some());
        assert_eq!(run.confirmed_request(), 3);
        // Republication is refused: nothing queued.
        run.accept(&snapshot("r2", &["shop.items"], true), BinlogSeq(7), 4);
        let state = run.confirmed(BinlogSeq(7)).unwrap();
        assert_eq!(state.queue.len(), 1);
        assert_eq!(run.confirmed_request(), 4);
    }

    #[test]
    fn watermarks_of_other_runs_are_ignored_and_requests_parsed() {
        let mut run = run();
        run.chunks.hold_for(Duration::from_secs(3600));
        assert!(matches!(
            run.on_signal_row("sluice-1:0", WINDOW_CLOSE, "shop.orders", BinlogSeq(1)),
            SignalRow::Taken
        ));
        run.on_signal_row(
            "s1",
            "execute-snapshot",
            r#"{"data-collections": ["shop.orders"], "type": "incremental"}"#,
            BinlogSeq(2),
        );
        assert_eq!(run.status().map(|s| s.request), Some("s1".to_owned()));
        run.on_signal_row("s2", "stop-snapshot", "", BinlogSeq(3));
        assert!(run.status().is_none());
    }

    #[test]
    fn the_last_key_survives_the_state_file() {
        let mut state = MysqlIncrementalState::default();
        state.queue.push_back(TableSnapshot {
            request: "r".into(),
            table: "shop.orders".into(),
            filter: None,
            after: Some(vec![KeyValue::Int(42), KeyValue::Base64("YWI=".into())]),
            rows: 10,
            chunks: 1,
            tombstones: false,
        });
        let text = serde_json::to_string(&state).unwrap();
        assert!(
            text.contains(r#""after":[{"int":42},{"base64":"YWI="}]"#),
            "{text}"
        );
        let back: MysqlIncrementalState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
    }
}
