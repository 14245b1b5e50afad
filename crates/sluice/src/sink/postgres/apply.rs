//! Applying a sub-partition's change events to its table, exactly once.
//!
//! - **Input.** sluice's default change events (Debezium JSON without schemas): `c`, `r` and
//!   `u` upsert the row in `after`; `d` and tombstones delete the row of the record's key.
//!   A value without `op` is a plain JSON row, upserted. The record key (a JSON object) names
//!   the key columns.
//! - **Batches.** A writer stages records until `batch_records` or `batch_interval_ms`, then
//!   collapses them per key to the last change (a key lives in one sub-partition, so no two
//!   changes of one key are ever reordered) and applies them in one transaction: one
//!   `DELETE … USING jsonb_populate_recordset(…)` for the deleted keys and one
//!   `INSERT … SELECT … FROM jsonb_populate_recordset(…) ON CONFLICT (key) DO UPDATE` for the
//!   upserted rows. The JSON is sent as one text parameter; the table's row type decides how
//!   each value is converted, as a cast from its JSON text would.
//! - **Exactly once.** The same transaction moves the sub-partition's row in the progress
//!   table (`sluice_sink_progress`) from the offset the writer started from to the offset
//!   after its last record, with a compare-and-set: a writer whose sub-partition was applied
//!   by another owner meanwhile (a zombie after a rebalance) fails its transaction instead of
//!   applying twice. On assignment the runtime recovers each sub-partition from that row and
//!   skips what it has applied, as it does with committed files.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::SinkExt as _;
use tokio_postgres::Client;

use crate::error::PipelineError;
use crate::pg_connect::{ConnectError, PgConnectConfig};
use crate::sink::config::FailurePolicy;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::files::{Recovered, SubPartitionId};
use crate::sink::metrics as m;
use crate::sink::postgres::config::{PostgresSinkConfig, TableName, quote_ident};
use crate::sink::postgres::convert::{
    self, ColumnConversion, ColumnSets, EventEncoding, Placeholders, PreparedRow, TargetColumn,
};
use crate::sink::postgres::ddl;
use crate::sink::postgres::decode::{self, Change, ConnectSchema, SchemaCache};
use crate::sink::worker::{
    DeadLetter, FailureSettings, Reclaim, RecordData, RecordLayout, SubPartitionWriter,
    WriteFailure,
};

/// How long a connection attempt to the target may take (unless the URL sets
/// `connect_timeout`).
const TARGET_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `statement_timeout` of the target sessions (unless the URL's `options` set one): a batch
/// that waits longer fails and is retried.
const TARGET_STATEMENT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a cancel request for a given-up worker's statement may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// The target database, shared by a run's writers.
pub struct PgTarget {
    connect: PgConnectConfig,
    settings: PostgresSinkConfig,
    pipeline: String,
    runtime: tokio::runtime::Handle,
    /// The connection recoveries use (on the intake thread).
    recovery: Mutex<Option<Client>>,
    /// The forms of the unavailable-value placeholder.
    placeholders: Placeholders,
    /// The bytes a writer's open batch may stage ([`crate::sink::postgres::config::batch_bytes`]).
    batch_bytes: usize,
}

impl PgTarget {
    /// The target of `config`'s `[sink.postgres]`; connects on first use.
    ///
    /// # Errors
    ///
    /// Fatal when the URL is unusable.
    pub fn open(
        config: &SinkPipelineConfig,
        settings: &PostgresSinkConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, PipelineError> {
        let mut connect = PgConnectConfig::parse(&settings.url).map_err(|e| {
            PipelineError::fatal(
                e.0.replace("source.postgres.url", "sink.postgres.url"),
                "fix sink.postgres.url",
            )
        })?;
        // Every wait on the target is bounded: the connection attempt, a peer that vanished
        // (TCP keepalives), and each statement (a batch stuck behind someone's lock fails and
        // is retried instead of holding its worker for good). The URL's own settings win.
        if connect.pg.get_connect_timeout().is_none() {
            connect.pg.connect_timeout(TARGET_CONNECT_TIMEOUT);
        }
        connect
            .pg
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
        // The sessions are the pipeline's in pg_stat_activity (unless the URL names them).
        if connect.pg.get_application_name().is_none() {
            connect
                .pg
                .application_name(format!("sluice-{}", config.name));
        }
        let options = connect.pg.get_options().unwrap_or_default().to_owned();
        if !options.contains("statement_timeout") {
            connect.pg.options(
                format!(
                    "-c statement_timeout={} {options}",
                    TARGET_STATEMENT_TIMEOUT.as_millis()
                )
                .trim_end(),
            );
        }
        Ok(Self {
            connect,
            settings: settings.clone(),
            pipeline: config.name.clone(),
            runtime,
            recovery: Mutex::new(None),
            placeholders: Placeholders::new(&settings.unavailable_value_placeholder),
            batch_bytes: crate::sink::postgres::config::batch_bytes(
                config.delivery.memory_limit,
                settings.sub_partitions,
            ),
        })
    }

    /// The database, for logs (no password).
    pub fn describe(&self) -> String {
        crate::pg_connect::redact_url(&self.settings.url)
    }

    /// Closes the recoveries' connection (at the end of a run).
    pub fn close(&self) {
        self.recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    fn connect(&self) -> Result<Client, PipelineError> {
        self.connect_with_task().map(|(client, _task)| client)
    }

    /// A new session, and the task that drives its connection (aborting it closes the
    /// connection).
    fn connect_with_task(&self) -> Result<(Client, tokio::task::JoinHandle<()>), PipelineError> {
        let connected = self
            .runtime
            .block_on(crate::pg_connect::connect_sql(&self.connect));
        match connected {
            Ok(connected) => Ok(connected),
            Err(error @ ConnectError::Config(_)) => Err(PipelineError::fatal_with(
                "cannot connect to the target database",
                "fix sink.postgres.url (and its TLS files)",
                error,
            )),
            Err(error) if error.is_tls_refusal() => Err(PipelineError::fatal_with(
                "cannot connect to the target database",
                "fix sink.postgres.url's sslmode / sslrootcert or the server's certificate",
                error,
            )),
            Err(error) => Err(PipelineError::retryable(
                format!(
                    "cannot connect to the target database {}",
                    crate::pg_connect::describe_host(&self.connect.pg)
                ),
                error,
            )),
        }
    }

    /// The progress of `id`: `Some` when it has applied records.
    ///
    /// # Errors
    ///
    /// Retryable when the database cannot be reached.
    pub fn recover(&self, id: &SubPartitionId) -> Result<Option<Recovered>, PipelineError> {
        let mut guard = self
            .recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            let client = self.connect()?;
            self.runtime
                .block_on(client.batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {} (
                        pipeline text NOT NULL,
                        topic text NOT NULL,
                        kafka_partition integer NOT NULL,
                        sub_partition integer NOT NULL,
                        next_offset bigint NOT NULL,
                        updated_at timestamptz NOT NULL DEFAULT now(),
                        PRIMARY KEY (pipeline, topic, kafka_partition, sub_partition)
                    )",
                    self.settings.progress_table()
                )))
                .map_err(|e| self.sql_error("cannot create the progress table", e))?;
            *guard = Some(client);
        }
        let Some(client) = guard.as_ref() else {
            return Ok(None);
        };
        let read = self.runtime.block_on(async {
            client
                .execute(
                    &format!(
                        "INSERT INTO {} (pipeline, topic, kafka_partition, sub_partition, next_offset)
                         VALUES ($1, $2, $3, $4, 0) ON CONFLICT DO NOTHING",
                        self.settings.progress_table()
                    ),
                    &[&self.pipeline, &id.topic, &id.partition, &(id.sub as i32)],
                )
                .await?;
            client
                .query_one(
                    &format!(
                        "SELECT next_offset FROM {} WHERE pipeline = $1 AND topic = $2
                         AND kafka_partition = $3 AND sub_partition = $4",
                        self.settings.progress_table()
                    ),
                    &[&self.pipeline, &id.topic, &id.partition, &(id.sub as i32)],
                )
                .await
        });
        let row = match read {
            Ok(row) => row,
            Err(error) => {
                *guard = None;
                return Err(self.sql_error(
                    &format!(
                        "cannot read the progress of {}/{} sub-partition {}",
                        id.topic, id.partition, id.sub
                    ),
                    error,
                ));
            }
        };
        let next_offset: i64 = row.get(0);
        Ok((next_offset > 0).then(|| Recovered {
            last_offset: next_offset - 1,
            epoch: 0,
            skipped: Vec::new(),
        }))
    }

    /// The writer of `id`, which has applied every record before `last_offset + 1`.
    pub fn writer(
        self: &Arc<Self>,
        id: SubPartitionId,
        last_offset: i64,
        failure: FailureSettings,
        dead_letter: Option<Arc<DeadLetter>>,
    ) -> PgWriter {
        let table = self
            .settings
            .table_for(&id.topic)
            .map_err(|issue| format!("{}: {}", issue.key, issue.problem));
        PgWriter {
            target: Arc::clone(self),
            table,
            id,
            client: None,
            copy_staging: false,
            session: Arc::new(PgSession {
                target: Arc::clone(self),
                slot: Mutex::default(),
            }),
            shape: None,
            progress: (last_offset + 1).max(0),
            batch: Batch::default(),
            column_sets: ColumnSets::default(),
            schemas: SchemaCache::default(),
            failure,
            dead_letter,
            last_offset: None,
            last_timestamp_ms: None,
            records: 0,
            opened_at: None,
            metrics: None,
        }
    }

    /// A SQL failure: retryable unless the server said the statement itself is wrong.
    fn sql_error(&self, what: &str, error: tokio_postgres::Error) -> PipelineError {
        let code = error.code().map(|c| c.code().to_owned());
        let class = code.as_deref().map(|c| &c[..2]);
        if is_record_error(&error) {
            return PipelineError::fatal_with(
                format!("{what}: {}", describe_db_error(&error)),
                "fix the target table or the records; the pipeline resumes from the progress table",
                error,
            );
        }
        match class {
            // Data exception, integrity constraint, syntax or access rule, feature not
            // supported, invalid authorization, insufficient privilege (42501 is class 42).
            Some("22" | "23" | "42" | "0A" | "28") => PipelineError::fatal_with(
                format!("{what}: {}", describe_db_error(&error)),
                "fix the target table or the records (a batch that PostgreSQL refuses is not dead-lettered yet); the pipeline resumes from the progress table",
                error,
            ),
            _ => PipelineError::retryable(format!("{what}: {}", describe_db_error(&error)), error),
        }
    }
}

/// Whether PostgreSQL refused a row rather than the statement: a data exception (a value
/// that does not fit its column), an integrity constraint violation, or a program limit a
/// value reached (class 54: a JSON value nested 100,000 levels deep exceeds the stack depth
/// limit while it is parsed). A batch refused so is applied a record at a time, and a record
/// refused alone follows `delivery.on_failure`; before, a limit error restarted the run on
/// the same record forever.
fn is_record_error(error: &tokio_postgres::Error) -> bool {
    error
        .code()
        .is_some_and(|code| matches!(&code.code()[..2], "22" | "23" | "54"))
}

fn describe_db_error(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => error.to_string(),
    }
}

/// A writer's session on the target as the intake sees it, so that it can close it when the
/// watchdog gives up on the writer's worker ([`Reclaim`]).
///
/// Closing takes two steps, neither of which needs the blocked worker: the task driving the
/// connection is aborted, which closes the socket (the worker's statement returns at once with
/// an error, and nothing more can be sent on the session); then a cancel request stops what the
/// backend is running (a wait on someone's lock): the backend then reads the closed socket and
/// exits. A closed socket alone is not enough: a backend waiting on a lock does not look at its
/// socket until the wait ends. `pg_terminate_backend` from another session would need the same
/// role or `pg_signal_backend` and a pid that may meanwhile belong to another session; the
/// cancel request carries the session's secret key, so it needs no privilege and reaches no
/// other session. If the cancel request cannot be sent (the server does not answer) the backend
/// goes when its statement ends (`statement_timeout`).
pub struct PgSession {
    target: Arc<PgTarget>,
    slot: Mutex<SessionSlot>,
}

/// The current connection of a [`PgSession`].
#[derive(Default)]
struct SessionSlot {
    /// The task that drives the connection: aborting it closes the socket.
    connection: Option<tokio::task::AbortHandle>,
    /// Cancels the session's running statement.
    cancel: Option<tokio_postgres::CancelToken>,
    /// The backend's process id, for logs.
    pid: Option<i32>,
    /// Closed for good: no new connection may be made.
    reclaimed: bool,
}

impl std::fmt::Debug for PgSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slot = self.lock();
        f.debug_struct("PgSession")
            .field("pid", &slot.pid)
            .field("reclaimed", &slot.reclaimed)
            .finish_non_exhaustive()
    }
}

impl PgSession {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionSlot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn given_up() -> PipelineError {
        PipelineError::Retryable {
            what: "the worker was given up on: its session on the target is closed".into(),
            source: None,
        }
    }

    /// A new connection, registered so that [`Reclaim::reclaim`] can close it.
    fn connect(&self) -> Result<Client, PipelineError> {
        if self.lock().reclaimed {
            return Err(Self::given_up());
        }
        let (client, task) = self.target.connect_with_task()?;
        let pid = self
            .target
            .runtime
            .block_on(client.query_one("SELECT pg_backend_pid()", &[]))
            .ok()
            .map(|row| row.get::<_, i32>(0));
        let mut slot = self.lock();
        if slot.reclaimed {
            task.abort();
            return Err(Self::given_up());
        }
        slot.connection = Some(task.abort_handle());
        slot.cancel = Some(client.cancel_token());
        slot.pid = pid;
        Ok(client)
    }
}

impl Reclaim for PgSession {
    fn reclaim(&self) {
        let (connection, cancel, pid) = {
            let mut slot = self.lock();
            slot.reclaimed = true;
            (slot.connection.take(), slot.cancel.take(), slot.pid.take())
        };
        if let Some(connection) = connection {
            connection.abort();
        }
        let Some(token) = cancel else {
            return;
        };
        let target = Arc::clone(&self.target);
        self.target.runtime.spawn(async move {
            let cancelled = tokio::time::timeout(
                CANCEL_TIMEOUT,
                crate::pg_connect::cancel(&target.connect, &token),
            )
            .await;
            match cancelled {
                Ok(Ok(())) => tracing::info!(
                    pid,
                    "closed a given-up sink worker's session on the target and cancelled its statement"
                ),
                Ok(Err(error)) => tracing::warn!(
                    pid,
                    error = %error,
                    "cannot cancel a given-up sink worker's statement: its backend ends when the statement does (statement_timeout); SELECT pg_terminate_backend(pid) ends it now"
                ),
                Err(_) => tracing::warn!(
                    pid,
                    "the cancel request for a given-up sink worker's statement timed out: its backend ends when the statement does (statement_timeout); SELECT pg_terminate_backend(pid) ends it now"
                ),
            }
        });
    }
}

/// The open batch: its changes, and their records' bytes in one buffer kept from batch to
/// batch (no allocation per record, and no copy of a record's key and row besides the record).
#[derive(Debug, Default)]
struct Batch {
    /// The records as consumed (for the dead-letter topic), and the keys and rows that are
    /// not part of them (a decoded Avro record's).
    arena: Vec<u8>,
    staged: Vec<Staged>,
}

/// A staged change: its parts are ranges of [`Batch::arena`].
#[derive(Debug)]
struct Staged {
    offset: i64,
    timestamp_ms: Option<i64>,
    /// The record as consumed.
    record: Range<usize>,
    layout: RecordLayout,
    key: Range<usize>,
    change: StagedChange,
}

/// What a staged change does (its key and row in the arena).
#[derive(Debug)]
enum StagedChange {
    Upsert {
        row: Range<usize>,
        event: bool,
        schema: Option<Arc<ConnectSchema>>,
        unavailable: Vec<String>,
    },
    Delete,
    Truncate,
}

/// A staged change as the apply reads it.
enum View<'a> {
    /// Insert or update `row` (see [`Change::Upsert`]).
    Upsert {
        row: &'a str,
        event: bool,
        schema: Option<&'a Arc<ConnectSchema>>,
        unavailable: &'a [String],
    },
    Delete,
    Truncate,
}

impl Batch {
    fn len(&self) -> usize {
        self.staged.len()
    }

    /// The bytes staged.
    fn bytes(&self) -> usize {
        self.arena.len() + self.staged.len() * std::mem::size_of::<Staged>()
    }

    /// Stages `data` as `change` (whose key and row are borrowed from `data`).
    fn push(&mut self, data: &RecordData, change: Change<'_>) {
        let original = data.original();
        let (bytes, layout) = original
            .parts()
            .unwrap_or_else(|| unreachable!("an original record is not decoded"));
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        let record = start..self.arena.len();
        // A key or row inside the record's own bytes is a range of them; else (a decoded
        // record's) it is added.
        let stored = data.parts().map(|(bytes, _)| bytes);
        let mut place = |part: &[u8]| -> Range<usize> {
            if let Some(within) = stored.and_then(|bytes| offset_within(bytes, part)) {
                return start + within..start + within + part.len();
            }
            let at = self.arena.len();
            self.arena.extend_from_slice(part);
            at..self.arena.len()
        };
        let key = place(change.key());
        let change = match change {
            Change::Upsert {
                row,
                event,
                schema,
                unavailable,
                ..
            } => StagedChange::Upsert {
                row: place(row.as_bytes()),
                event,
                schema,
                unavailable,
            },
            Change::Delete { .. } => StagedChange::Delete,
            Change::Truncate => StagedChange::Truncate,
        };
        self.staged.push(Staged {
            offset: data.offset,
            timestamp_ms: data.timestamp_ms,
            record,
            layout,
            key,
            change,
        });
    }

    /// The record key of change `index` (empty for a truncate).
    fn key(&self, index: usize) -> &[u8] {
        &self.arena[self.staged[index].key.clone()]
    }

    fn view(&self, index: usize) -> View<'_> {
        match &self.staged[index].change {
            StagedChange::Upsert {
                row,
                event,
                schema,
                unavailable,
            } => View::Upsert {
                // Staged from a `&str`: always UTF-8.
                row: std::str::from_utf8(&self.arena[row.clone()]).unwrap_or_default(),
                event: *event,
                schema: schema.as_ref(),
                unavailable,
            },
            StagedChange::Delete => View::Delete,
            StagedChange::Truncate => View::Truncate,
        }
    }

    fn is_truncate(&self, index: usize) -> bool {
        matches!(self.staged[index].change, StagedChange::Truncate)
    }

    fn offset(&self, index: usize) -> i64 {
        self.staged[index].offset
    }

    /// Change `index`'s record as consumed (for the dead-letter topic).
    fn record(&self, index: usize) -> RecordData {
        let staged = &self.staged[index];
        RecordData::from_parts(
            staged.offset,
            staged.timestamp_ms,
            &self.arena[staged.record.clone()],
            staged.layout,
        )
    }

    /// Empties the batch; keeps the arena's memory for the next one, up to `keep` bytes (a
    /// batch that grew past it for one large record gives the rest back).
    fn clear(&mut self, keep: usize) {
        self.arena.clear();
        self.staged.clear();
        if self.arena.capacity() > keep.saturating_mul(2) {
            self.arena.shrink_to(keep);
            self.staged.shrink_to(0);
        }
    }
}

/// Where `part` starts within `whole`, when it is a slice of it.
fn offset_within(whole: &[u8], part: &[u8]) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start)
}

/// What the writer knows of its table.
#[derive(Debug)]
struct TableShape {
    /// Columns that can be written (not generated), in table order.
    columns: Vec<TargetColumn>,
    /// The key columns, from the first record key.
    key: Vec<String>,
    /// The conversions of the rows of each Connect schema seen (`None`: events without
    /// schemas, by the columns' types), by the schema's address.
    plans: Vec<(Option<Arc<ConnectSchema>>, Plan)>,
}

/// The conversions of a row's columns, sorted by name.
type Plan = Arc<[(String, ColumnConversion)]>;

impl TableShape {
    fn has_column(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c.name == name)
    }

    /// The conversions of a change event's row with `schema` (without: by the columns' types
    /// and `encoding`).
    fn plan(&mut self, schema: Option<&Arc<ConnectSchema>>, encoding: &EventEncoding) -> Plan {
        let same = |known: &Option<Arc<ConnectSchema>>| match (known, schema) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if let Some((_, plan)) = self.plans.iter().find(|(known, _)| same(known)) {
            return Arc::clone(plan);
        }
        let mut plan: Vec<(String, ColumnConversion)> = self
            .columns
            .iter()
            .filter_map(|column| {
                let conversion = match schema {
                    // A bit string's schema (`Bits`, or a boolean for `bit(1)`) lacks the
                    // column's length, a box's says only `Geometry`: the column's type decides.
                    Some(_)
                        if matches!(
                            column.type_name.as_str(),
                            "bit" | "varbit" | "box" | "hstore"
                        ) =>
                    {
                        ColumnConversion::from_column(column, encoding)
                    }
                    Some(schema) => schema
                        .field(&column.name)
                        .and_then(ColumnConversion::from_schema),
                    None => ColumnConversion::from_column(column, encoding),
                };
                conversion.map(|c| (column.name.clone(), c))
            })
            .collect();
        // By name: `convert::prepare_row_in` looks names up in it.
        plan.sort_by(|a, b| a.0.cmp(&b.0));
        let plan: Plan = plan.into();
        // A few schemas per table at most (one per version of the source table).
        if self.plans.len() >= 16 {
            self.plans.clear();
        }
        self.plans.push((schema.cloned(), Arc::clone(&plan)));
        plan
    }
}

/// The temporary table a batch's upserted rows are copied into (`COPY … FROM STDIN`) before one
/// `INSERT … SELECT … ON CONFLICT` merges them into the target: one JSON document per row, and
/// the number of the statement that reads it. Created in each transaction that uses it when
/// the session has none yet (so a session a pooler hands over works too); emptied at commit.
const STAGING_TABLE: &str = "pg_temp.sluice_staging";

/// One statement of a batch's transaction.
struct Statement {
    sql: String,
    /// Its JSON parameter (`None`: none).
    json: Option<String>,
    /// The rows to copy into [`STAGING_TABLE`] before it runs (`COPY`'s text format).
    copy: Option<bytes::Bytes>,
    /// The rows it must change (`None`: any number): an update of rows that must be in the
    /// table already.
    expect: Option<u64>,
}

impl Statement {
    fn new(sql: String, json: Option<String>) -> Self {
        Self {
            sql,
            json,
            copy: None,
            expect: None,
        }
    }
}

/// Appends `text` as a field of `COPY`'s text format (backslash, newline, carriage return
/// and tab escaped).
fn push_copy_field(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    if !bytes
        .iter()
        .any(|b| matches!(b, b'\\' | b'\n' | b'\r' | b'\t'))
    {
        out.extend_from_slice(bytes);
        return;
    }
    for &byte in bytes {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            other => out.push(other),
        }
    }
}

/// The outcome of a batch's transaction.
enum Transacted {
    /// Committed.
    Committed,
    /// The progress was not where this writer left it: nothing applied.
    Fenced,
    /// An update of unavailable columns found fewer rows than it updates: rolled back.
    MissingRows,
}

/// The PostgreSQL writer of one sub-partition.
pub struct PgWriter {
    target: Arc<PgTarget>,
    table: Result<TableName, String>,
    id: SubPartitionId,
    client: Option<Client>,
    /// Whether the session may create [`STAGING_TABLE`] (the `TEMPORARY` privilege on the
    /// database, which every role has unless revoked): upserts go through it; otherwise
    /// they are a JSON array parameter.
    copy_staging: bool,
    /// What the intake closes when it gives up on this writer's worker.
    session: Arc<PgSession>,
    shape: Option<TableShape>,
    /// The progress table's `next_offset` for this sub-partition (what the next transaction
    /// expects to find).
    progress: i64,
    batch: Batch,
    /// The column sets of the rows prepared, shared between rows.
    column_sets: ColumnSets,
    schemas: SchemaCache,
    failure: FailureSettings,
    dead_letter: Option<Arc<DeadLetter>>,
    last_offset: Option<i64>,
    /// The newest Kafka timestamp of the open batch (for the lag metric).
    last_timestamp_ms: Option<i64>,
    records: u64,
    opened_at: Option<Instant>,
    metrics: Option<m::PgTableMetrics>,
}

/// The outcome of one attempt at a batch's transaction.
enum Attempt {
    /// Committed: rows upserted and deleted.
    Committed { upserted: u64, deleted: u64 },
    /// The progress was not where this writer left it: nothing applied.
    Fenced,
}

impl PgWriter {
    fn table(&self) -> Result<&TableName, PipelineError> {
        self.table.as_ref().map_err(|problem| {
            PipelineError::fatal(
                format!("topic {:?} has no target table: {problem}", self.id.topic),
                "fix sink.postgres.table or [sink.postgres.tables]",
            )
        })
    }

    /// The table's writable columns (not generated), in table order; empty when the table
    /// does not exist.
    fn read_columns(
        &self,
        client: &Client,
        table: &TableName,
    ) -> Result<Vec<TargetColumn>, PipelineError> {
        let rows = self
            .target
            .runtime
            .block_on(client.query(
                // A domain's column is read as its base type's (`price AS numeric(8,2)`).
                "SELECT a.attname::text, t.typname::text,
                        CASE WHEN m.typmod < 0 THEN NULL
                             WHEN t.typname IN ('numeric', '_numeric') THEN (m.typmod - 4) & 65535
                             WHEN t.typname IN ('bit', '_bit') THEN m.typmod
                             WHEN t.typname IN ('timestamp', 'timestamptz', 'time', 'timetz',
                                                '_timestamp', '_timestamptz', '_time', '_timetz')
                                  THEN m.typmod
                        END
                 FROM pg_attribute a
                 JOIN pg_type d ON d.oid = a.atttypid
                 JOIN pg_type t ON t.oid = CASE WHEN d.typtype = 'd' THEN d.typbasetype ELSE d.oid END
                 CROSS JOIN LATERAL (SELECT CASE WHEN d.typtype = 'd' THEN d.typtypmod ELSE a.atttypmod END AS typmod) m
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.attgenerated = ''
                 ORDER BY a.attnum",
                &[&table.quoted()],
            ))
            .map_err(|e| {
                self.target
                    .sql_error(&format!("cannot read the columns of {table}"), e)
            })?;
        Ok(rows
            .iter()
            .map(|r| TargetColumn {
                name: r.get(0),
                type_name: r.get(1),
                modifier: r.get(2),
            })
            .collect())
    }

    /// Runs DDL under a transaction-level advisory lock on the table's name, so that the
    /// writers of one table never race on it.
    fn run_ddl(
        &self,
        client: &mut Client,
        table: &TableName,
        sql: &str,
    ) -> Result<(), PipelineError> {
        tracing::info!(table = %table, statement = %sql, "changing the target table's schema");
        let name = table.to_string();
        self.target
            .runtime
            .block_on(async {
                let transaction = client.transaction().await?;
                transaction
                    .execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])
                    .await?;
                transaction.batch_execute(sql).await?;
                transaction.commit().await
            })
            .map_err(|e| {
                self.target
                    .sql_error(&format!("cannot change the schema of {table}"), e)
            })
    }

    /// Whether the session may create temporary tables (for [`STAGING_TABLE`]).
    fn may_create_temporary_tables(&self, client: &Client) -> bool {
        let allowed = self.target.runtime.block_on(client.query_one(
            "SELECT has_database_privilege(current_database(), 'TEMPORARY')",
            &[],
        ));
        match allowed {
            Ok(row) => {
                let allowed: bool = row.get(0);
                if !allowed {
                    tracing::info!(
                        "the target role may not create temporary tables: batches are applied without COPY"
                    );
                }
                allowed
            }
            Err(error) => {
                tracing::warn!(error = %error, "cannot read the TEMPORARY privilege on the target database: batches are applied without COPY");
                false
            }
        }
    }

    /// Loads the table's columns and the key columns (from the first key of the batch);
    /// creates the table when it is missing and `auto_create` is on.
    fn load_shape(&mut self, client: &mut Client) -> Result<(), PipelineError> {
        // A shape loaded for a batch of truncates only has no key columns yet.
        if self.shape.as_ref().is_some_and(|s| !s.key.is_empty()) {
            return Ok(());
        }
        let table = self.table()?.clone();
        let Some(first_key) = (0..self.batch.len())
            .map(|index| self.batch.key(index))
            .find(|k| !k.is_empty())
        else {
            // Truncates only: the table's columns, no key needed.
            let columns = self.read_columns(client, &table)?;
            if !columns.is_empty() {
                self.shape = Some(TableShape {
                    columns,
                    key: Vec::new(),
                    plans: Vec::new(),
                });
            }
            return Ok(());
        };
        let key: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(first_key)
            .map_err(|e| {
                PipelineError::fatal(
                    format!(
                        "a record key of {:?} is not a JSON object: {e}",
                        self.id.topic
                    ),
                    "the PostgreSQL sink takes keys as sluice's CDC source writes them",
                )
            })?;
        let key: Vec<String> = key.keys().cloned().collect();
        if key.is_empty() {
            return Err(PipelineError::fatal(
                format!("a record key of {:?} is an empty object", self.id.topic),
                "the PostgreSQL sink applies changes by key",
            ));
        }
        let mut columns = self.read_columns(client, &table)?;
        if columns.is_empty() {
            let first_row = (0..self.batch.len()).find_map(|index| match self.batch.view(index) {
                View::Upsert { row, schema, .. } => Some((row, schema)),
                _ => None,
            });
            match first_row {
                Some((row, schema)) if self.target.settings.auto_create => {
                    let new = ddl::columns_of(row, schema.map(|s| &**s), &key).map_err(|e| {
                        PipelineError::fatal(
                            format!(
                                "cannot create {table} from a record of {:?}: {e}",
                                self.id.topic
                            ),
                            "create the table yourself",
                        )
                    })?;
                    let sql = ddl::create_table(&table, &new, &key);
                    self.run_ddl(client, &table, &sql)?;
                    columns = self.read_columns(client, &table)?;
                }
                // Only deletes and truncates for a table that does not exist: nothing to do.
                None if self.target.settings.auto_create => return Ok(()),
                _ => {
                    return Err(PipelineError::fatal(
                        format!(
                            "the target table {table} of topic {:?} does not exist",
                            self.id.topic
                        ),
                        "create it with the key's columns as its primary key, or set sink.postgres.auto_create = true",
                    ));
                }
            }
        }
        if let Some(missing) = key.iter().find(|k| !columns.iter().any(|c| &c.name == *k)) {
            return Err(PipelineError::fatal(
                format!("the record key's column {missing:?} is not a column of {table}"),
                "the target table needs the key's columns (with a primary key or unique index on them)",
            ));
        }
        self.shape = Some(TableShape {
            columns,
            key,
            plans: Vec::new(),
        });
        Ok(())
    }

    /// Makes sure the table has every column the batch's rows carry: reloads the columns
    /// (another writer may have added them) and, with `auto_evolve`, adds the missing ones.
    fn ensure_columns(&mut self, client: &mut Client) -> Result<(), PipelineError> {
        let Some(shape) = &self.shape else {
            return Ok(());
        };
        // The first row carrying each column the table lacks.
        let mut missing: Vec<(String, usize)> = Vec::new();
        for index in 0..self.batch.len() {
            let View::Upsert { row, .. } = self.batch.view(index) else {
                continue;
            };
            for (name, _) in convert::fields(row).unwrap_or_default() {
                if !shape.has_column(&name) && !missing.iter().any(|(m, _)| *m == name) {
                    missing.push((name.into_owned(), index));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let table = self.table()?.clone();
        let mut columns = self.read_columns(client, &table)?;
        missing.retain(|(name, _)| !columns.iter().any(|c| &c.name == name));
        if !missing.is_empty() {
            if !self.target.settings.auto_evolve {
                let names: Vec<&str> = missing.iter().map(|(n, _)| n.as_str()).collect();
                return Err(PipelineError::fatal(
                    format!(
                        "the records of {:?} have column(s) {names:?} that {table} lacks",
                        self.id.topic
                    ),
                    "add the column(s) to the target table, or set sink.postgres.auto_evolve = true",
                ));
            }
            let mut new = Vec::new();
            for (name, index) in &missing {
                let View::Upsert { row, schema, .. } = self.batch.view(*index) else {
                    continue;
                };
                let all = ddl::columns_of(row, schema.map(|s| &**s), &[]).unwrap_or_default();
                if let Some(column) = all.into_iter().find(|c| &c.name == name) {
                    new.push(column);
                }
            }
            self.run_ddl(client, &table, &ddl::add_columns(&table, &new))?;
            columns = self.read_columns(client, &table)?;
        }
        if let Some(shape) = &mut self.shape {
            shape.columns = columns;
            shape.plans.clear();
        }
        Ok(())
    }

    /// The rows of the staged upserts in PostgreSQL's input form (Debezium's encodings
    /// converted, unavailable values left out); `Err`: the changes whose values cannot be
    /// converted, with why.
    fn prepare_rows(&mut self) -> (Vec<Option<PreparedRow>>, Vec<(usize, String)>) {
        let mut rows = Vec::with_capacity(self.batch.len());
        let mut refused = Vec::new();
        let placeholders = &self.target.placeholders;
        let encoding = self.target.settings.event_encoding();
        for index in 0..self.batch.len() {
            let View::Upsert {
                row,
                event,
                schema,
                unavailable,
            } = self.batch.view(index)
            else {
                rows.push(None);
                continue;
            };
            let Some(shape) = self.shape.as_mut() else {
                rows.push(None);
                continue;
            };
            let (plan, placeholders) = if !event && schema.is_none() {
                // A plain JSON row: applied as it is.
                (Plan::from(Vec::new()), None)
            } else {
                (shape.plan(schema, &encoding), event.then_some(placeholders))
            };
            match convert::prepare_row_in(
                row,
                &plan,
                placeholders,
                unavailable,
                &mut self.column_sets,
            ) {
                Ok(prepared) => rows.push(Some(prepared)),
                Err(reason) => {
                    refused.push((index, format!("a value cannot be converted: {reason}")));
                    rows.push(None);
                }
            }
        }
        (rows, refused)
    }

    /// The statements that apply the changes of `indices` (in offset order) between
    /// truncates, and the rows upserted and deleted. Per key: a delete, then the upserts after
    /// it merged into one row (a later value wins; a column a later change does not carry
    /// keeps the earlier change's value). Rows are grouped by the columns they carry: an
    /// `INSERT` names only those (the others take their defaults) and its `ON CONFLICT DO
    /// UPDATE` sets only those (the others keep their values); a row with unavailable columns
    /// (unchanged TOASTed values) is an `UPDATE` of those it carries, which must find the row.
    /// With `copy`, an `INSERT`'s rows are copied into [`STAGING_TABLE`] first and read from
    /// there; otherwise they are its parameter, a JSON array.
    fn statements(
        &self,
        indices: &[usize],
        rows: &[Option<PreparedRow>],
        copy: bool,
    ) -> Result<(Vec<Statement>, u64, u64), PipelineError> {
        let table = self.table()?.quoted();
        let Some(shape) = &self.shape else {
            // No table (auto_create with only deletes and truncates so far): nothing to do.
            return Ok((Vec::new(), 0, 0));
        };
        let keys: Vec<String> = shape.key.iter().map(|k| quote_ident(k)).collect();
        let mut statements = Vec::new();
        let (mut upserted_total, mut deleted_total) = (0, 0);
        for segment in indices.split(|i| self.batch.is_truncate(*i)) {
            // Per key: whether it is deleted first, and its row afterwards (`None`: deleted).
            let mut net: HashMap<&[u8], (bool, Option<std::borrow::Cow<'_, PreparedRow>>)> =
                HashMap::with_capacity(segment.len());
            // Keys in the order of their first change.
            let mut order: Vec<&[u8]> = Vec::with_capacity(segment.len());
            for &index in segment {
                let key = self.batch.key(index);
                let entry = net.entry(key).or_insert_with(|| {
                    order.push(key);
                    (false, None)
                });
                match self.batch.view(index) {
                    View::Delete => *entry = (true, None),
                    View::Upsert { .. } => {
                        let Some(row) = rows[index].as_ref() else {
                            continue;
                        };
                        entry.1 = Some(match entry.1.take() {
                            Some(earlier) => std::borrow::Cow::Owned(
                                convert::merge_rows(&earlier, row).map_err(|e| {
                                    PipelineError::fatal(
                                        format!("cannot merge two changes of a key: {e}"),
                                        "report this: prepared rows are JSON objects",
                                    )
                                })?,
                            ),
                            None => std::borrow::Cow::Borrowed(row),
                        });
                    }
                    View::Truncate => {}
                }
            }
            let mut deletes = String::from("[");
            let mut deleted = 0u64;
            // (columns, whether the row must exist) → the rows' JSON.
            let mut groups: std::collections::BTreeMap<(&[String], bool), Vec<&str>> =
                std::collections::BTreeMap::new();
            let mut seen: HashSet<&str> = HashSet::new();
            for key in &order {
                let (delete_first, row) = &net[key];
                if *delete_first {
                    if deleted > 0 {
                        deletes.push(',');
                    }
                    deletes.push_str(&String::from_utf8_lossy(key));
                    deleted += 1;
                }
                let Some(row) = row else {
                    continue;
                };
                groups
                    .entry((&*row.columns, !row.unavailable.is_empty()))
                    .or_default()
                    .push(&row.json);
                seen.extend(row.columns.iter().map(String::as_str));
            }
            deletes.push(']');
            if let Some(unknown) = seen.iter().find(|c| !shape.has_column(c)) {
                return Err(PipelineError::fatal(
                    format!(
                        "the records of {:?} have a column {unknown:?} that {table} lacks",
                        self.id.topic
                    ),
                    "add the column to the target table, or set sink.postgres.auto_evolve = true",
                ));
            }
            if deleted > 0 {
                let matches: Vec<String> = keys.iter().map(|k| format!("t.{k} = k.{k}")).collect();
                statements.push(Statement::new(
                    format!(
                        "DELETE FROM {table} AS t USING jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS k WHERE {}",
                        matches.join(" AND ")
                    ),
                    Some(deletes),
                ));
            }
            let mut upserted = 0u64;
            for ((columns, must_exist), group) in groups {
                let count = group.len() as u64;
                upserted += count;
                // The rows as one JSON array (a statement's parameter).
                let json_array = || {
                    let mut json = String::with_capacity(
                        group.iter().map(|row| row.len() + 1).sum::<usize>() + 2,
                    );
                    json.push('[');
                    for (at, row) in group.iter().enumerate() {
                        if at > 0 {
                            json.push(',');
                        }
                        json.push_str(row);
                    }
                    json.push(']');
                    json
                };
                // In table order.
                let columns: Vec<String> = shape
                    .columns
                    .iter()
                    .filter(|c| columns.contains(&c.name))
                    .map(|c| quote_ident(&c.name))
                    .collect();
                let values: Vec<&String> = columns.iter().filter(|c| !keys.contains(c)).collect();
                if must_exist {
                    let mut sets: Vec<String> =
                        values.iter().map(|c| format!("{c} = r.{c}")).collect();
                    if sets.is_empty() {
                        sets = keys.iter().map(|k| format!("{k} = r.{k}")).collect();
                    }
                    let matches: Vec<String> =
                        keys.iter().map(|k| format!("t.{k} = r.{k}")).collect();
                    statements.push(Statement {
                        sql: format!(
                            "UPDATE {table} AS t SET {} FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS r WHERE {}",
                            sets.join(", "),
                            matches.join(" AND ")
                        ),
                        json: Some(json_array()),
                        copy: None,
                        expect: Some(count),
                    });
                    continue;
                }
                let action = if values.is_empty() {
                    "NOTHING".to_owned()
                } else {
                    let updates: Vec<String> = values
                        .iter()
                        .map(|c| format!("{c} = EXCLUDED.{c}"))
                        .collect();
                    format!("UPDATE SET {}", updates.join(", "))
                };
                let list = columns.join(", ");
                if copy {
                    // Copied into the staging table, then merged by one statement: no JSON
                    // array of the whole group parsed as one value.
                    let number = statements.len();
                    let tag = format!("{number}\t");
                    let mut data = Vec::with_capacity(
                        group
                            .iter()
                            .map(|row| row.len() + tag.len() + 1)
                            .sum::<usize>(),
                    );
                    for row in &group {
                        data.extend_from_slice(tag.as_bytes());
                        push_copy_field(&mut data, row);
                        data.push(b'\n');
                    }
                    let selected: Vec<String> = columns.iter().map(|c| format!("r.{c}")).collect();
                    statements.push(Statement {
                        sql: format!(
                            "INSERT INTO {table} ({list}) SELECT {} FROM {STAGING_TABLE} AS s CROSS JOIN LATERAL jsonb_populate_record(NULL::{table}, s.doc) AS r WHERE s.g = {number} ON CONFLICT ({}) DO {action}",
                            selected.join(", "),
                            keys.join(", ")
                        ),
                        json: None,
                        copy: Some(data.into()),
                        expect: None,
                    });
                    continue;
                }
                statements.push(Statement::new(
                    format!(
                        "INSERT INTO {table} ({list}) SELECT {list} FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) ON CONFLICT ({}) DO {action}",
                        keys.join(", ")
                    ),
                    Some(json_array()),
                ));
            }
            upserted_total += upserted;
            deleted_total += deleted;
            statements.push(Statement::new(format!("TRUNCATE {table}"), None));
        }
        // The segments end with a truncate each, but for the last.
        statements.pop();
        Ok((statements, upserted_total, deleted_total))
    }

    /// Runs `statements` and moves the progress to `next` in one transaction; rolled back
    /// when the progress was not where this writer left it or an update of unavailable columns
    /// did not find all its rows.
    fn transact(
        &self,
        client: &mut Client,
        statements: &[Statement],
        next: i64,
    ) -> Result<Transacted, tokio_postgres::Error> {
        let progress_sql = format!(
            "UPDATE {} SET next_offset = $1, updated_at = now() WHERE pipeline = $2 AND topic = $3
             AND kafka_partition = $4 AND sub_partition = $5 AND next_offset = $6",
            self.target.settings.progress_table()
        );
        let id = &self.id;
        let sub = id.sub as i32;
        self.target.runtime.block_on(async {
            let transaction = client.transaction().await?;
            if statements.iter().any(|s| s.copy.is_some()) {
                transaction
                    .batch_execute(&format!(
                        "SET LOCAL client_min_messages = warning;
                         CREATE TEMP TABLE IF NOT EXISTS {STAGING_TABLE} (g integer NOT NULL, doc jsonb NOT NULL) ON COMMIT DELETE ROWS"
                    ))
                    .await?;
            }
            for statement in statements {
                if let Some(data) = &statement.copy {
                    let sink = transaction
                        .copy_in(&format!("COPY {STAGING_TABLE} (g, doc) FROM STDIN"))
                        .await?;
                    let mut sink = std::pin::pin!(sink);
                    sink.send(data.clone()).await?;
                    sink.as_mut().finish().await?;
                }
                let changed = match &statement.json {
                    Some(json) => transaction.execute(statement.sql.as_str(), &[json]).await?,
                    None => transaction.execute(statement.sql.as_str(), &[]).await?,
                };
                if statement.expect.is_some_and(|expect| changed < expect) {
                    transaction.rollback().await?;
                    return Ok(Transacted::MissingRows);
                }
            }
            let moved = transaction
                .execute(
                    progress_sql.as_str(),
                    &[
                        &next,
                        &self.target.pipeline,
                        &id.topic,
                        &id.partition,
                        &sub,
                        &self.progress,
                    ],
                )
                .await?;
            if moved != 1 {
                transaction.rollback().await?;
                return Ok(Transacted::Fenced);
            }
            transaction.commit().await?;
            Ok(Transacted::Committed)
        })
    }

    /// The staged changes PostgreSQL refuses, found by applying them one at a time in a
    /// transaction that is rolled back: (index in the batch, PostgreSQL's reason). An update
    /// of unavailable columns (unchanged TOASTed values) whose row is not in the table is
    /// refused too: inserting it would write the row without those values.
    fn find_refused(
        &self,
        client: &mut Client,
        rejected: &HashSet<usize>,
        rows: &[Option<PreparedRow>],
    ) -> Result<Vec<(usize, String)>, PipelineError> {
        let runtime = &self.target.runtime;
        let failed = |e| {
            self.target
                .sql_error("cannot look for the refused records", e)
        };
        let transaction = runtime.block_on(client.transaction()).map_err(failed)?;
        let mut refused = Vec::new();
        for index in 0..self.batch.len() {
            if rejected.contains(&index) {
                continue;
            }
            runtime
                .block_on(transaction.batch_execute("SAVEPOINT sluice_one"))
                .map_err(failed)?;
            for statement in self.statements(&[index], rows, false)?.0 {
                let sql = statement.sql.as_str();
                let executed = match &statement.json {
                    Some(json) => runtime.block_on(transaction.execute(sql, &[json])),
                    None => runtime.block_on(transaction.execute(sql, &[])),
                };
                match executed {
                    Ok(changed) if statement.expect.is_some_and(|expect| changed < expect) => {
                        let unavailable = rows[index]
                            .as_ref()
                            .map(|r| r.unavailable.join(", "))
                            .unwrap_or_default();
                        refused.push((
                            index,
                            format!(
                                "an update without the values of column(s) {unavailable} (unchanged TOASTed values the source did not send: the unavailable-value placeholder or unavailable_columns) for a row that is not in the target table: inserting it would write the row without them"
                            ),
                        ));
                        runtime
                            .block_on(transaction.batch_execute("ROLLBACK TO SAVEPOINT sluice_one"))
                            .map_err(failed)?;
                        break;
                    }
                    Ok(_) => {}
                    Err(error) if is_record_error(&error) => {
                        refused.push((index, describe_db_error(&error)));
                        runtime
                            .block_on(transaction.batch_execute("ROLLBACK TO SAVEPOINT sluice_one"))
                            .map_err(failed)?;
                        break;
                    }
                    Err(error) => return Err(failed(error)),
                }
            }
        }
        runtime.block_on(transaction.rollback()).map_err(failed)?;
        Ok(refused)
    }

    /// Records that cannot be applied follow `delivery.on_failure`: dead-lettered (added to
    /// `rejected`), retried after a backoff (`Ok(())` with nothing added), or the end of the
    /// run.
    fn refuse(
        &self,
        refused: &[(usize, String)],
        rejected: &mut HashSet<usize>,
        attempt: &mut u32,
    ) -> Result<(), PipelineError> {
        let Some((first, reason)) = refused.first() else {
            return Ok(());
        };
        let id = &self.id;
        let table = self.table()?;
        let offset = self.batch.offset(*first);
        let what = format!(
            "record {}/{} offset {offset} cannot be applied to {table}: {reason}",
            id.topic, id.partition
        );
        match (self.failure.policy, &self.dead_letter) {
            (FailurePolicy::DeadLetter, Some(dead_letter)) => {
                for (index, reason) in refused {
                    let data = self.batch.record(*index);
                    tracing::warn!(
                        topic = %id.topic,
                        partition = id.partition,
                        offset = data.offset,
                        reason = %reason,
                        dead_letter_topic = %dead_letter.topic,
                        "record sent to the dead-letter topic"
                    );
                    dead_letter.send(&id.topic, id.partition, &data, reason)?;
                    rejected.insert(*index);
                }
                Ok(())
            }
            (FailurePolicy::Retry, _) if *attempt < self.failure.retry_max_attempts => {
                tracing::warn!(topic = %id.topic, partition = id.partition, offset, attempt = *attempt, reason = %reason, "record refused; retrying its batch");
                let delay = self.failure.retry_backoff * 2u32.saturating_pow(*attempt - 1);
                std::thread::sleep(delay.min(Duration::from_secs(30)));
                *attempt += 1;
                Ok(())
            }
            _ => Err(PipelineError::fatal(
                format!("{what} (after {attempt} attempt(s))"),
                "fix the target table or the record's producer, or set delivery.on_failure = \"dead_letter\" with a delivery.dead_letter_topic; the pipeline resumes from the progress table",
            )),
        }
    }

    /// Applies the staged batch and the progress in one transaction; records PostgreSQL
    /// refuses follow `delivery.on_failure`.
    fn apply(&mut self) -> Result<(), PipelineError> {
        let Some(last_offset) = self.last_offset else {
            return Ok(());
        };
        let next = last_offset + 1;
        let mut client = match self.client.take() {
            Some(client) if !client.is_closed() => client,
            _ => {
                let client = self.session.connect()?;
                self.copy_staging = self.may_create_temporary_tables(&client);
                client
            }
        };
        self.load_shape(&mut client)?;
        self.ensure_columns(&mut client)?;
        let table = self.table()?.clone();
        let id = self.id.clone();
        let target = Arc::clone(&self.target);
        let batch_error = |e| {
            target.sql_error(
                &format!(
                    "cannot apply a batch of {}/{} sub-partition {} to {table}",
                    id.topic, id.partition, id.sub
                ),
                e,
            )
        };
        let started = Instant::now();
        let (rows, unconvertible) = self.prepare_rows();
        let mut rejected: HashSet<usize> = HashSet::new();
        let mut attempt = 1;
        while !unconvertible.is_empty() && rejected.is_empty() {
            // Values that cannot be converted never will be: dead-lettered or the end.
            self.refuse(&unconvertible, &mut rejected, &mut attempt)?;
        }
        let outcome = loop {
            let indices: Vec<usize> = (0..self.batch.len())
                .filter(|index| !rejected.contains(index))
                .collect();
            let (statements, upserted, deleted) =
                self.statements(&indices, &rows, self.copy_staging)?;
            let refused = match self.transact(&mut client, &statements, next) {
                Ok(Transacted::Committed) => break Attempt::Committed { upserted, deleted },
                Ok(Transacted::Fenced) => break Attempt::Fenced,
                Ok(Transacted::MissingRows) => {
                    let refused = self.find_refused(&mut client, &rejected, &rows)?;
                    if refused.is_empty() {
                        return Err(PipelineError::Retryable {
                            what: format!(
                                "an update of {table} found fewer rows than it updates, but no record alone misses its row; retrying"
                            ),
                            source: None,
                        });
                    }
                    refused
                }
                Err(error) if is_record_error(&error) => {
                    let refused = self.find_refused(&mut client, &rejected, &rows)?;
                    if refused.is_empty() {
                        return Err(batch_error(error));
                    }
                    refused
                }
                Err(error) => return Err(batch_error(error)),
            };
            self.refuse(&refused, &mut rejected, &mut attempt)?;
        };
        let (upserted, deleted) = match outcome {
            Attempt::Committed { upserted, deleted } => (upserted, deleted),
            Attempt::Fenced => {
                return Err(PipelineError::Retryable {
                    what: format!(
                        "the progress of {}/{} sub-partition {} moved past offset {} in the target database: another consumer applied it; restarting from the progress table",
                        id.topic, id.partition, id.sub, self.progress
                    ),
                    source: None,
                });
            }
        };
        crate::crash_point!("sink::postgres::batch_committed");
        m::records_committed().increment(self.records);
        let metrics = self
            .metrics
            .get_or_insert_with(|| m::PgTableMetrics::new(&table.to_string()));
        metrics.applied(upserted, deleted, self.records, started.elapsed());
        if let Some(timestamp_ms) = self.last_timestamp_ms {
            metrics.lag(timestamp_ms);
        }
        tracing::debug!(
            topic = %id.topic,
            partition = id.partition,
            sub = id.sub,
            records = self.records,
            upserted,
            deleted,
            rejected = rejected.len(),
            next_offset = next,
            "batch applied"
        );
        self.client = Some(client);
        self.progress = next;
        Ok(())
    }

    fn clear(&mut self) {
        self.batch.clear(self.target.batch_bytes);
        self.last_offset = None;
        self.last_timestamp_ms = None;
        self.records = 0;
        self.opened_at = None;
    }
}

impl SubPartitionWriter for PgWriter {
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure> {
        let change = decode::decode(data.key(), data.value(), &mut self.schemas)
            .map_err(WriteFailure::Record)?;
        if matches!(change, Change::Truncate) && !self.target.settings.truncate {
            return Err(WriteFailure::Record(
                "a truncate event: truncates are applied only with sink.postgres.truncate = true"
                    .into(),
            ));
        }
        // Kept for the dead-letter topic: the record as consumed (Avro's bytes, not the larger
        // JSON with schemas it was read as), the change's key and row as parts of it.
        self.batch.push(data, change);
        if data.timestamp_ms.is_some() {
            self.last_timestamp_ms = data.timestamp_ms;
        }
        self.note(data.offset);
        Ok(())
    }

    fn note(&mut self, offset: i64) {
        self.records += 1;
        self.last_offset = Some(offset);
        self.opened_at.get_or_insert_with(Instant::now);
    }

    fn records(&self) -> u64 {
        self.records
    }

    fn opened_at(&self) -> Option<Instant> {
        self.opened_at
    }

    fn is_full(&self) -> bool {
        self.records >= self.target.settings.batch_records
            || self.batch.bytes() >= self.target.batch_bytes
    }

    fn max_age(&self) -> Duration {
        Duration::from_millis(self.target.settings.batch_interval_ms)
    }

    fn commit(&mut self) -> Result<(), PipelineError> {
        let result = self.apply();
        self.clear();
        result
    }

    fn forget(&mut self) {
        self.clear();
    }

    fn discard(&mut self) {
        self.clear();
    }

    fn reclaimer(&self) -> Option<Arc<dyn Reclaim>> {
        Some(Arc::clone(&self.session) as Arc<dyn Reclaim>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_fields_escape_what_copy_text_reads_as_escapes_or_separators() {
        let mut out = Vec::new();
        push_copy_field(&mut out, r#"{"a":"plain"}"#);
        assert_eq!(out, br#"{"a":"plain"}"#);
        out.clear();
        push_copy_field(&mut out, "{\"q\":\"say \\\"hi\\\"\",\n\t\"r\":1}\r\\.");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"q\":\"say \\\\\"hi\\\\\"\",\\n\\t\"r\":1}\\r\\\\."
        );
    }

    /// A writer's batch is full at its share of `delivery.memory_limit` long before
    /// `batch_records`: 16 MiB / 32 / 4 sub-partitions = 128 KiB of ~1 KiB records.
    #[test]
    fn a_batch_is_full_at_its_share_of_the_memory_limit() {
        let config = SinkPipelineConfig::from_toml(
            r#"
            name = "to_pg"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["orders"]
            [sink.postgres]
            url = "postgres://u@127.0.0.1:1/db"
            table = "orders"
            sub_partitions = 4
            [delivery]
            memory_limit = "16MiB"
            "#,
            "t.toml",
            &|_: &str| None,
        )
        .expect("a valid pipeline");
        let settings = config.postgres().expect("a PostgreSQL sink").clone();
        assert_eq!(settings.batch_records, 5_000);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let target =
            Arc::new(PgTarget::open(&config, &settings, runtime.handle().clone()).expect("opened"));
        let id = SubPartitionId {
            topic: "orders".into(),
            partition: 0,
            sub: 0,
        };
        let failure = FailureSettings {
            policy: FailurePolicy::Stop,
            retry_max_attempts: 1,
            retry_backoff: Duration::from_millis(1),
        };
        let mut writer = target.writer(id, -1, failure, None);
        let padding = "x".repeat(1000);
        let mut offset = 0;
        while !writer.is_full() {
            let value = format!(r#"{{"after":{{"id":{offset},"pad":"{padding}"}},"op":"c"}}"#);
            let key = format!(r#"{{"id":{offset}}}"#);
            let data = RecordData::new(offset, Some(key.as_bytes()), Some(value.as_bytes()), None);
            writer.write(&data).expect("a change event");
            offset += 1;
        }
        assert!((100..=130).contains(&offset), "full after {offset} records");
        writer.discard();
        assert_eq!(writer.records(), 0);
        assert!(!writer.is_full());
    }

    #[test]
    fn a_staged_key_and_row_are_ranges_of_the_record() {
        let key = br#"{"id":7}"#;
        let value = br#"{"before":null,"after":{"id":7,"n":"x"},"op":"c"}"#;
        let data = RecordData::new(41, Some(key), Some(value), Some(5));
        let mut batch = Batch::default();
        let change = decode::decode(data.key(), data.value(), &mut SchemaCache::default())
            .expect("a change event");
        batch.push(&data, change);
        // Nothing but the record is stored.
        assert_eq!(batch.arena.len(), data.size());
        assert_eq!(batch.key(0), key);
        assert!(matches!(batch.view(0), View::Upsert { row, .. } if row == r#"{"id":7,"n":"x"}"#));
        let record = batch.record(0);
        assert_eq!(
            (record.offset, record.key(), record.value()),
            (41, Some(&key[..]), Some(&value[..]))
        );
        assert_eq!(record.timestamp_ms, Some(5));
        batch.clear(1024);
        assert_eq!((batch.len(), batch.bytes()), (0, 0));
    }
}
