//! What incremental (ad-hoc) snapshots share across sources: the operator's requests (the
//! signal table's rows as Debezium writes them, parsed into [`Signal`]s), the queue of tables
//! and the progress kept in the state file ([`IncrementalState`]), the ids of the requests
//! already accepted (a signal replayed after a restart runs once), the side connection's
//! chunk reads and when they are tried again ([`ChunkReader`]), and the states waiting for the
//! checkpoint ([`Progress`]).
//!
//! How a chunk is read consistently with the stream is the source's own (DBLog's watermarks,
//! written where the source's log carries them, and the window the stream loop keeps): see
//! [`crate::source::postgres::incremental`] and [`crate::source::mysql::incremental`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::config::parse_table_name;
use crate::error::{Interruption, PipelineError};
use crate::runtime::status::IncrementalStatus;
pub use crate::runtime::status::{RefusedRequest, Signal};
use crate::sql::{SqlDialect, check_condition};

/// How many accepted request ids are remembered (a signal replayed after a restart is
/// recognised and not run twice).
const REMEMBERED_IDS: usize = 64;

/// How many refused requests are kept (in the state file and the status).
const REMEMBERED_REFUSALS: usize = 16;

/// How long a chunk that failed for connection trouble waits before it is read again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long a chunk dropped at its watermark (stale, or its read late) waits to be read again.
const REREAD_AFTER: Duration = Duration::from_millis(100);

/// The persisted state of incremental snapshots (part of the state file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalState<K = Vec<String>> {
    /// Tables still to read; the first is being read.
    #[serde(default)]
    pub queue: VecDeque<TableSnapshot<K>>,
    /// The newest accepted request ids.
    #[serde(default)]
    pub accepted: VecDeque<String>,
    /// The newest refused requests, oldest first.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub refused: VecDeque<RefusedRequest>,
    /// The captured tables the pipeline knows (for `snapshot_new_tables`); `None` until the
    /// first run records them.
    #[serde(default)]
    pub known_tables: Option<BTreeSet<String>>,
    /// PostgreSQL, `partitions = "root"`: the leaves of captured partitioned tables the
    /// pipeline knows (a leaf attached since is snapshotted under its root); `None` until
    /// the first run records them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_partitions: Option<BTreeSet<String>>,
    /// PostgreSQL, `partitions = "root"`: the OIDs of those leaves (a table of the same name
    /// with another OID is another table).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partition_oids: BTreeMap<String, u32>,
    /// PostgreSQL, `partitions = "root"`: the tables that were partitions of a captured
    /// partitioned table and were detached from it, with their OIDs. They are left out of the
    /// captured tables (no topic, no snapshot) unless `tables` names them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detached_partitions: BTreeMap<String, u32>,
    /// PostgreSQL, `partitions = "leaves"`: the transaction snapshot taken at the last start
    /// (see [`StartHorizon`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<StartHorizon>,
    /// The stream position (commit LSN, index) from which on this state holds: under exactly
    /// once, the newer of the state store's copy and the offsets topic's is resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<(u64, u32)>,
}

/// PostgreSQL: a transaction snapshot taken at a run's start, once the slot existed and the
/// publication was set up, with the capture settings of that run. A partition created as one
/// by a transaction that started after it, in a schema the publication published whole since
/// before it, had every row streamed: it joins the captured set without a snapshot (see
/// [`crate::source::postgres::partition::Creation`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartHorizon {
    /// `txid_current_snapshot()` as text (`xmin:xmax:xip,…`, epoch-extended ids).
    pub snapshot: String,
    /// The capture settings then (schemas, tables, exclusions, row filters, partitions mode,
    /// publication): the horizon holds only while they are unchanged.
    pub capture: String,
}

/// One table's incremental snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot<K = Vec<String>> {
    /// The request it belongs to.
    pub request: String,
    /// `schema.table`.
    pub table: String,
    /// An SQL condition on the table's rows (the request's `additional-conditions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// The primary key of the last row read (PostgreSQL: the text forms; MySQL: the values);
    /// `None` before the first chunk.
    #[serde(default)]
    pub after: Option<K>,
    /// Rows published so far.
    #[serde(default)]
    pub rows: u64,
    /// Chunks read so far.
    #[serde(default)]
    pub chunks: u64,
    /// Republication: after the last chunk, tombstones for the keys live in the table's topic
    /// that are no longer in the table (PostgreSQL only: see
    /// [`crate::source::postgres::incremental`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tombstones: bool,
}

/// Debezium's signal data: `{"data-collections": [...], "type": "incremental",
/// "additional-conditions": [{"data-collection": ..., "filter": ...}]}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SignalData {
    #[serde(default)]
    data_collections: Vec<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    additional_conditions: Vec<Condition>,
    /// sluice's own: republication with tombstones (see [`Republication`]).
    #[serde(default)]
    tombstones: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Condition {
    data_collection: String,
    filter: String,
}

impl Signal {
    /// Parses a signal table row (`id`, `type`, `data`). `Ok(None)`: a signal type sluice
    /// doesn't act on.
    ///
    /// # Errors
    ///
    /// What is wrong with the row, for the log.
    pub fn parse(id: &str, kind: &str, data: &str) -> Result<Option<Self>, String> {
        let stop = match kind {
            "execute-snapshot" => false,
            "stop-snapshot" => true,
            _ => return Ok(None),
        };
        let data: SignalData = serde_json::from_str(if data.trim().is_empty() {
            "{}"
        } else {
            data
        })
        .map_err(|e| {
            format!(
                "data is not the expected JSON ({e}): expected {{\"data-collections\": [\"schema.table\"], \"additional-conditions\": [{{\"data-collection\": \"schema.table\", \"filter\": \"…\"}}]}}"
            )
        })?;
        if let Some(kind) = data.kind.as_deref()
            && !kind.eq_ignore_ascii_case("incremental")
        {
            return Err(format!(
                "snapshot type {kind:?} is not supported: expected \"incremental\""
            ));
        }
        for table in &data.data_collections {
            if parse_table_name(table).is_none() {
                return Err(format!(
                    "data-collections entry {table:?}: expected schema.table"
                ));
            }
        }
        if stop {
            return Ok(Some(Self::Stop {
                id: id.to_owned(),
                tables: data.data_collections,
            }));
        }
        if data.data_collections.is_empty() {
            return Err("data-collections is empty: name the tables to snapshot".into());
        }
        if data.tombstones && !data.additional_conditions.is_empty() {
            return Err(
                "tombstones with additional-conditions would delete the rows outside the filter \
                 from the topic: republish whole tables to have tombstones"
                    .into(),
            );
        }
        let tables = data
            .data_collections
            .iter()
            .map(|table| {
                let filter = data
                    .additional_conditions
                    .iter()
                    .find(|c| &c.data_collection == table)
                    .map(|c| c.filter.clone());
                (table.clone(), filter)
            })
            .collect();
        Ok(Some(Self::Snapshot {
            id: id.to_owned(),
            tables,
            tombstones: data.tombstones,
        }))
    }

    /// Checks the request's filters as conditions of `dialect` (see
    /// [`check_condition`]): a filter that could be more than one condition is refused.
    ///
    /// # Errors
    ///
    /// Which table's filter is wrong and why.
    pub fn check_filters(&self, dialect: SqlDialect) -> Result<(), String> {
        let Self::Snapshot { tables, .. } = self else {
            return Ok(());
        };
        for (table, filter) in tables {
            if let Some(filter) = filter {
                check_condition(dialect, filter).map_err(|problem| {
                    format!(
                        "the filter for {table} {problem}: a filter is one SQL condition on the table's rows (no ';', no comments, no dollar quotes, quotes and parentheses balanced)"
                    )
                })?;
            }
        }
        Ok(())
    }

    /// The request's id.
    pub fn id(&self) -> &str {
        match self {
            Self::Snapshot { id, .. } | Self::Stop { id, .. } => id,
        }
    }
}

impl<K> IncrementalState<K> {
    /// The newer of two copies (by [`position`](Self::position); `stored` on a tie).
    pub fn newer(stored: Option<Self>, committed: Option<Self>) -> Option<Self> {
        match (stored, committed) {
            (Some(stored), Some(committed)) => Some(if committed.position > stored.position {
                committed
            } else {
                stored
            }),
            (stored, committed) => stored.or(committed),
        }
    }

    /// For `/health`: the running table's progress and the queue's length.
    pub fn status(&self) -> Option<IncrementalStatus> {
        let current = self.queue.front()?;
        Some(IncrementalStatus {
            request: current.request.clone(),
            table: current.table.clone(),
            rows: current.rows,
            chunks: current.chunks,
            tables_queued: self.queue.len(),
        })
    }

    /// Refuses the request `id` for `reason` (logged, and kept with the newest refused ones);
    /// returns whether the state changed (a request seen before is not refused again).
    pub fn refuse(&mut self, id: &str, reason: &str) -> bool {
        if self.accepted.iter().any(|seen| seen == id) {
            tracing::debug!(id, "signal seen before; ignored");
            return false;
        }
        tracing::error!(
            id,
            reason,
            "incremental snapshot request {id:?} refused: {reason}"
        );
        self.remember(id);
        self.keep_refused(id, reason);
        true
    }

    /// Keeps `id` with the newest refused requests.
    fn keep_refused(&mut self, id: &str, reason: &str) {
        self.refused.push_back(RefusedRequest {
            id: id.to_owned(),
            reason: reason.to_owned(),
        });
        while self.refused.len() > REMEMBERED_REFUSALS {
            self.refused.pop_front();
        }
    }

    /// Remembers `id` as taken (a replay is ignored).
    fn remember(&mut self, id: &str) {
        self.accepted.push_back(id.to_owned());
        while self.accepted.len() > REMEMBERED_IDS {
            self.accepted.pop_front();
        }
    }

    /// The refused requests, for the status.
    pub fn refused(&self) -> Vec<RefusedRequest> {
        self.refused.iter().cloned().collect()
    }

    /// Applies a signal; returns whether the state changed. Tables that are not `captured`
    /// are refused with a warning.
    pub fn accept(&mut self, signal: &Signal, captured: &dyn Fn(&str) -> bool) -> bool {
        if self.accepted.iter().any(|id| id == signal.id()) {
            tracing::debug!(id = signal.id(), "signal seen before; ignored");
            return false;
        }
        self.remember(signal.id());
        match signal {
            Signal::Snapshot {
                id,
                tables,
                tombstones,
            } => {
                for (table, filter) in tables {
                    if !captured(table) {
                        tracing::warn!(
                            id,
                            table,
                            "incremental snapshot: {table} is not captured by this pipeline; skipped"
                        );
                        continue;
                    }
                    tracing::info!(
                        id,
                        table,
                        filter = filter.as_deref().unwrap_or(""),
                        tombstones,
                        "incremental snapshot: queued"
                    );
                    self.queue.push_back(TableSnapshot {
                        request: id.clone(),
                        table: table.clone(),
                        filter: filter.clone(),
                        after: None,
                        rows: 0,
                        chunks: 0,
                        tombstones: *tombstones && filter.is_none(),
                    });
                }
            }
            Signal::Stop { id, tables } => {
                let before = self.queue.len();
                self.queue
                    .retain(|t| !tables.is_empty() && !tables.contains(&t.table));
                tracing::info!(
                    id,
                    stopped = before - self.queue.len(),
                    "incremental snapshot: stop requested"
                );
            }
        }
        true
    }
}

/// Why a chunk could not be read.
pub enum ChunkError {
    /// The table cannot be snapshotted incrementally (gone, no primary key, bad filter, no
    /// right to write watermarks): it is dropped from the queue.
    Table(String),
    /// Connection trouble or a conflict that passes: retried.
    Retry(PipelineError),
}

/// A chunk being read: its token (carried by its watermarks), the table and request it
/// belongs to, and the source's window on the stream (`W`: what the stream loop noted since
/// the window opened).
pub struct Chunk<W> {
    /// The chunk's token, unique per run.
    pub token: String,
    /// The request the table belongs to.
    pub request: String,
    /// `schema.table` (MySQL: `database.table`).
    pub table: String,
    /// What the stream loop notes while the chunk is read.
    pub window: W,
}

/// An open chunk and the side connection's task reading it.
struct OpenChunk<W, R> {
    chunk: Chunk<W>,
    task: Option<JoinHandle<Result<R, ChunkError>>>,
    result: Option<Result<R, ChunkError>>,
}

/// A chunk's read on the side connection, borrowing it.
pub type ChunkRead<'a, R> = Pin<Box<dyn Future<Output = Result<R, ChunkError>> + Send + 'a>>;

/// The chunk reads of one run: at most one open chunk, read by a task on a side connection
/// (`C`, kept between chunks, dropped after connection trouble) into `R`, and when the next
/// chunk may start (a failed read waits `RETRY_AFTER`, a dropped chunk `REREAD_AFTER`).
pub struct ChunkReader<C, W, R> {
    open: Option<OpenChunk<W, R>>,
    connection: Arc<tokio::sync::Mutex<Option<C>>>,
    token_base: String,
    next_chunk: u64,
    retry_at: Option<Instant>,
}

impl<C, W, R> ChunkReader<C, W, R>
where
    C: Send + 'static,
    R: Send + 'static,
{
    /// No chunk open yet; the chunks' tokens are `token_base:<n>` (unique per run).
    pub fn new(token_base: String) -> Self {
        Self {
            open: None,
            connection: Arc::new(tokio::sync::Mutex::new(None)),
            token_base,
            next_chunk: 0,
            retry_at: None,
        }
    }

    /// The open chunk.
    pub fn open(&self) -> Option<&Chunk<W>> {
        self.open.as_ref().map(|open| &open.chunk)
    }

    /// The open chunk, to note changes in its window.
    pub fn open_mut(&mut self) -> Option<&mut Chunk<W>> {
        self.open.as_mut().map(|open| &mut open.chunk)
    }

    /// Whether a chunk may start now: none is open and no wait is running.
    pub fn may_start(&self) -> bool {
        self.open.is_none() && self.retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// Opens a chunk of `request`'s `table` with `window` and starts reading it: `read` runs
    /// on the side connection with the chunk's token, once `connect` made one when there is
    /// none. A read that fails with [`ChunkError::Retry`] drops the connection.
    pub fn start<F>(
        &mut self,
        request: String,
        table: String,
        window: W,
        connect: impl Future<Output = Result<C, ChunkError>> + Send + 'static,
        read: F,
    ) where
        F: for<'a> FnOnce(&'a mut C, String) -> ChunkRead<'a, R> + Send + 'static,
    {
        self.retry_at = None;
        let token = format!("{}:{}", self.token_base, self.next_chunk);
        self.next_chunk += 1;
        let connection = Arc::clone(&self.connection);
        let task_token = token.clone();
        let task = tokio::spawn(async move {
            let mut guard = connection.lock().await;
            let conn = match guard.as_mut() {
                Some(conn) => conn,
                None => guard.insert(connect.await?),
            };
            let result = read(conn, task_token).await;
            if matches!(result, Err(ChunkError::Retry(_))) {
                *guard = None;
            }
            result
        });
        self.open = Some(OpenChunk {
            chunk: Chunk {
                token,
                request,
                table,
                window,
            },
            task: Some(task),
            result: None,
        });
    }

    /// Collects the open chunk's read when it finished; a failed read closes the chunk, and
    /// its table and error are returned (for [`on_error`](Self::on_error)). Call on every
    /// status tick.
    pub async fn failed(&mut self) -> Option<(String, ChunkError)> {
        let open = self.open.as_mut()?;
        if open.result.is_none() && open.task.as_ref().is_some_and(JoinHandle::is_finished) {
            open.result = Some(join(open.task.take()).await);
        }
        if let Some(Err(_)) = &open.result {
            let Some(OpenChunk {
                result: Some(Err(error)),
                chunk,
                ..
            }) = self.open.take()
            else {
                return None;
            };
            return Some((chunk.table, error));
        }
        None
    }

    /// A failed read of `table`: a table that cannot be read is abandoned (dropped from
    /// `state`'s queue when it is the one running: returns `true`, the state is to be
    /// recorded); connection trouble waits `RETRY_AFTER`.
    pub fn on_error<K>(
        &mut self,
        state: &mut IncrementalState<K>,
        table: &str,
        error: ChunkError,
    ) -> bool {
        match error {
            ChunkError::Table(problem) => {
                tracing::error!(
                    table,
                    "incremental snapshot of {table} abandoned: {problem}"
                );
                if state.queue.front().is_some_and(|t| t.table == table) {
                    if let Some(abandoned) = state.queue.pop_front() {
                        state.keep_refused(&abandoned.request, &format!("{table}: {problem}"));
                    }
                    return true;
                }
            }
            ChunkError::Retry(error) => {
                tracing::warn!(table, error = %error.chain(), "incremental snapshot: reading a chunk failed; retrying in 5 s");
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
            }
        }
        false
    }

    /// Closes the open chunk at its closing watermark: the chunk and what its read returned.
    /// A read not done within `deadline` is given up (`late` is logged) and the chunk read
    /// again after `REREAD_AFTER`: `None`.
    pub async fn close(
        &mut self,
        deadline: Duration,
        late: &str,
    ) -> Option<(Chunk<W>, Result<R, ChunkError>)> {
        let mut open = self.open.take()?;
        let result = match open.result.take() {
            Some(result) => result,
            None => match tokio::time::timeout(deadline, join(open.task.take())).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::warn!(table = %open.chunk.table, "{late}");
                    self.read_again();
                    return None;
                }
            },
        };
        Some((open.chunk, result))
    }

    /// A closed chunk was dropped (stale): the next is read after `REREAD_AFTER`.
    pub fn read_again(&mut self) {
        self.retry_at = Some(Instant::now() + REREAD_AFTER);
    }

    /// Keeps the next chunk from starting for `wait` (tests outside a runtime, where its task
    /// cannot start).
    #[cfg(test)]
    pub fn hold_for(&mut self, wait: Duration) {
        self.retry_at = Some(Instant::now() + wait);
    }
}

/// What the side connection's task returned.
async fn join<R>(task: Option<JoinHandle<Result<R, ChunkError>>>) -> Result<R, ChunkError> {
    match task {
        Some(task) => task.await.unwrap_or_else(|e| {
            Err(ChunkError::Retry(PipelineError::retryable(
                "the incremental snapshot reader failed",
                e,
            )))
        }),
        None => Err(ChunkError::Retry(PipelineError::retryable(
            "the incremental snapshot reader is gone",
            Interruption::NoReaderTask,
        ))),
    }
}

/// States of incremental snapshots waiting for the checkpoint to pass their position (`P`),
/// each with the admin request it records (its sequence number on the status board; 0 for
/// none).
pub struct Progress<P, K> {
    pending: VecDeque<(P, IncrementalState<K>, u64)>,
    /// The newest admin request among the states [`confirmed`](Self::confirmed) handed out.
    confirmed_request: u64,
}

impl<P: PartialOrd, K> Default for Progress<P, K> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            confirmed_request: 0,
        }
    }
}

impl<P: PartialOrd, K> Progress<P, K> {
    /// Queues `state`, which holds from `at` on, for `request`.
    pub fn push(&mut self, at: P, state: IncrementalState<K>, request: u64) {
        self.pending.push_back((at, state, request));
    }

    /// The newest state whose position `checkpoint` covers, to save with it.
    pub fn confirmed(&mut self, checkpoint: P) -> Option<IncrementalState<K>> {
        let mut newest = None;
        while self
            .pending
            .front()
            .is_some_and(|(at, _, _)| *at <= checkpoint)
        {
            if let Some((_, state, request)) = self.pending.pop_front() {
                self.confirmed_request = self.confirmed_request.max(request);
                newest = Some(state);
            }
        }
        newest
    }

    /// The newest admin request in the states [`confirmed`](Self::confirmed) handed out: once
    /// the state file is written, it and every earlier request are in it.
    pub fn confirmed_request(&self) -> u64 {
        self.confirmed_request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debezium_signals() {
        let signal = Signal::parse(
            "s1",
            "execute-snapshot",
            r#"{"data-collections": ["public.a", "public.b"], "type": "incremental",
                "additional-conditions": [{"data-collection": "public.b", "filter": "id > 10"}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            signal,
            Signal::Snapshot {
                id: "s1".into(),
                tables: vec![
                    ("public.a".into(), None),
                    ("public.b".into(), Some("id > 10".into()))
                ],
                tombstones: false,
            }
        );
        assert_eq!(
            Signal::parse("s2", "stop-snapshot", "").unwrap().unwrap(),
            Signal::Stop {
                id: "s2".into(),
                tables: vec![]
            }
        );
        assert_eq!(Signal::parse("s3", "log", "{}").unwrap(), None);
        let error =
            Signal::parse("s4", "execute-snapshot", r#"{"data-collections": ["a"]}"#).unwrap_err();
        assert!(error.contains("expected schema.table"), "{error}");
        let error = Signal::parse(
            "s5",
            "execute-snapshot",
            r#"{"data-collections": ["public.a"], "type": "blocking"}"#,
        )
        .unwrap_err();
        assert!(error.contains("\"blocking\" is not supported"), "{error}");
        assert!(
            Signal::parse("s6", "execute-snapshot", "not json")
                .unwrap_err()
                .contains("expected {")
        );
        assert_eq!(
            Signal::parse(
                "s7",
                "execute-snapshot",
                r#"{"data-collections": ["public.a"], "tombstones": true}"#
            )
            .unwrap()
            .unwrap(),
            Signal::Snapshot {
                id: "s7".into(),
                tables: vec![("public.a".into(), None)],
                tombstones: true,
            }
        );
        let error = Signal::parse(
            "s8",
            "execute-snapshot",
            r#"{"data-collections": ["public.a"], "tombstones": true,
                "additional-conditions": [{"data-collection": "public.a", "filter": "id > 1"}]}"#,
        )
        .unwrap_err();
        assert!(
            error.contains("tombstones with additional-conditions"),
            "{error}"
        );
    }

    #[test]
    fn a_request_whose_filter_is_not_one_condition_is_refused_once() {
        let signal = Signal::parse(
            "bad",
            "execute-snapshot",
            r#"{"data-collections": ["public.a", "public.b"],
                "additional-conditions": [{"data-collection": "public.b", "filter": "true; DELETE FROM x"}]}"#,
        )
        .unwrap()
        .unwrap();
        let problem = signal.check_filters(SqlDialect::Postgres).unwrap_err();
        assert!(
            problem.starts_with("the filter for public.b contains ';'"),
            "{problem}"
        );
        let mysql = Signal::Snapshot {
            id: "m".into(),
            tables: vec![("db.t".into(), Some("id > 1 # x".into()))],
            tombstones: false,
        };
        assert!(mysql.check_filters(SqlDialect::Mysql).is_err());
        assert!(
            mysql.check_filters(SqlDialect::Postgres).is_ok(),
            "# is an operator in PostgreSQL"
        );
        let mut state: IncrementalState = IncrementalState::default();
        assert!(state.refuse("bad", &problem));
        assert!(
            !state.refuse("bad", &problem),
            "a replay is not refused again"
        );
        assert!(
            !state.accept(&signal, &|_| true),
            "nor accepted after being refused"
        );
        assert!(state.queue.is_empty());
        assert_eq!(
            state.refused(),
            [RefusedRequest {
                id: "bad".into(),
                reason: problem.clone()
            }]
        );
        // The state file keeps them, bounded.
        for n in 0..40 {
            state.refuse(&format!("r{n}"), "x");
        }
        assert_eq!(state.refused.len(), REMEMBERED_REFUSALS);
        let json = serde_json::to_string(&state).unwrap();
        let back: IncrementalState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
        // A state file of an older version has none.
        let old: IncrementalState = serde_json::from_str(r#"{"queue": []}"#).unwrap();
        assert!(old.refused.is_empty());
    }

    #[test]
    fn accepts_each_request_once_and_stops_by_table() {
        let mut state: IncrementalState = IncrementalState::default();
        let captured = |t: &str| t != "public.other";
        let request = Signal::Snapshot {
            id: "r1".into(),
            tables: vec![
                ("public.a".into(), None),
                ("public.b".into(), None),
                ("public.other".into(), None),
            ],
            tombstones: false,
        };
        assert!(state.accept(&request, &captured));
        assert_eq!(state.queue.len(), 2, "the uncaptured table is skipped");
        assert!(
            !state.accept(&request, &captured),
            "a replayed id is ignored"
        );
        assert_eq!(state.queue.len(), 2);
        let stop = Signal::Stop {
            id: "r2".into(),
            tables: vec!["public.a".into()],
        };
        assert!(state.accept(&stop, &captured));
        assert_eq!(
            state
                .queue
                .iter()
                .map(|t| t.table.as_str())
                .collect::<Vec<_>>(),
            ["public.b"]
        );
        let stop_all = Signal::Stop {
            id: "r3".into(),
            tables: vec![],
        };
        state.accept(&stop_all, &captured);
        assert!(state.queue.is_empty());
        for n in 0..100 {
            state.accept(
                &Signal::Stop {
                    id: format!("x{n}"),
                    tables: vec![],
                },
                &captured,
            );
        }
        assert_eq!(state.accepted.len(), REMEMBERED_IDS, "ids are bounded");
    }
}
