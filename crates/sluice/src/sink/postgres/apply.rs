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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_postgres::Client;

use crate::error::PipelineError;
use crate::pg_connect::{ConnectError, PgConnectConfig};
use crate::sink::config::FailurePolicy;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::files::{Recovered, SubPartitionId};
use crate::sink::metrics as m;
use crate::sink::postgres::config::{PostgresSinkConfig, TableName, quote_ident};
use crate::sink::worker::{
    DeadLetter, FailureSettings, RecordData, SubPartitionWriter, WriteFailure,
};

/// The target database, shared by a run's writers.
pub struct PgTarget {
    connect: PgConnectConfig,
    settings: PostgresSinkConfig,
    pipeline: String,
    runtime: tokio::runtime::Handle,
    /// The connection recoveries use (on the intake thread).
    recovery: Mutex<Option<Client>>,
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
        let connect = PgConnectConfig::parse(&settings.url).map_err(|e| {
            PipelineError::fatal(
                e.0.replace("source.postgres.url", "sink.postgres.url"),
                "fix sink.postgres.url",
            )
        })?;
        Ok(Self {
            connect,
            settings: settings.clone(),
            pipeline: config.name.clone(),
            runtime,
            recovery: Mutex::new(None),
        })
    }

    /// The database, for logs (no password).
    pub fn describe(&self) -> String {
        crate::pg_connect::redact_url(&self.settings.url)
    }

    fn connect(&self) -> Result<Client, PipelineError> {
        let connected = self
            .runtime
            .block_on(crate::pg_connect::connect_sql(&self.connect));
        match connected {
            Ok((client, _task)) => Ok(client),
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
            shape: None,
            progress: (last_offset + 1).max(0),
            batch: Vec::new(),
            failure,
            dead_letter,
            last_offset: None,
            records: 0,
            opened_at: None,
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
/// that does not fit its column) or an integrity constraint violation.
fn is_record_error(error: &tokio_postgres::Error) -> bool {
    error
        .code()
        .is_some_and(|code| matches!(&code.code()[..2], "22" | "23"))
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

/// One staged change.
#[derive(Debug)]
enum Change {
    /// The row, as JSON text.
    Upsert { key: Vec<u8>, row: String },
    /// The key, as JSON text.
    Delete { key: Vec<u8> },
}

/// A staged change and its record (for the dead-letter topic).
#[derive(Debug)]
struct Staged {
    change: Change,
    data: RecordData,
}

impl Change {
    fn key(&self) -> &[u8] {
        match self {
            Self::Upsert { key, .. } | Self::Delete { key } => key,
        }
    }
}

/// A record as the change it stands for; `Err`: why it is none (the failure policy decides).
fn decode(data: &RecordData) -> Result<Change, String> {
    let key = data.key().ok_or_else(|| {
        "the record has no key: the PostgreSQL sink applies changes by key".to_owned()
    })?;
    if !key.trim_ascii_start().starts_with(b"{") {
        return Err("the record key is not a JSON object of the key columns".into());
    }
    let key = key.to_vec();
    let Some(value) = data.value() else {
        return Ok(Change::Delete { key });
    };
    let text =
        std::str::from_utf8(value).map_err(|_| "the value is not UTF-8, so not JSON".to_owned())?;
    let envelope: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| format!("the value is not a JSON object: {e}"))?;
    match envelope.op {
        Some("c" | "r" | "u") => match envelope.after {
            Some(after) if after.get().starts_with('{') => Ok(Change::Upsert {
                key,
                row: after.get().to_owned(),
            }),
            _ => Err("a create/read/update event without an `after` row".into()),
        },
        Some("d") => Ok(Change::Delete { key }),
        Some("t") => Err("a truncate event: truncates are not applied (yet)".into()),
        Some(other) => Err(format!("an event with op {other:?}: expected c, r, u or d")),
        None if envelope.payload.is_some() => Err(
            "a JSON value with schemas (schema/payload): not supported yet; produce events without schemas"
                .into(),
        ),
        None => Ok(Change::Upsert {
            key,
            row: text.to_owned(),
        }),
    }
}

/// The fields of a change event the writer reads.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    op: Option<&'a str>,
    #[serde(borrow)]
    after: Option<&'a RawValue>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
}

/// What the writer knows of its table.
#[derive(Debug)]
struct TableShape {
    /// Columns that can be written (not generated), in table order.
    columns: Vec<String>,
    /// The key columns, from the first record key.
    key: Vec<String>,
}

/// The PostgreSQL writer of one sub-partition.
pub struct PgWriter {
    target: Arc<PgTarget>,
    table: Result<TableName, String>,
    id: SubPartitionId,
    client: Option<Client>,
    shape: Option<TableShape>,
    /// The progress table's `next_offset` for this sub-partition (what the next transaction
    /// expects to find).
    progress: i64,
    batch: Vec<Staged>,
    failure: FailureSettings,
    dead_letter: Option<Arc<DeadLetter>>,
    last_offset: Option<i64>,
    records: u64,
    opened_at: Option<Instant>,
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

    /// Loads the table's columns and the key columns (from the first key of the batch).
    fn load_shape(&mut self, client: &Client, first_key: &[u8]) -> Result<(), PipelineError> {
        if self.shape.is_some() {
            return Ok(());
        }
        let table = self.table()?.clone();
        let rows = self
            .target
            .runtime
            .block_on(client.query(
                "SELECT a.attname::text FROM pg_attribute a
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.attgenerated = ''
                 ORDER BY a.attnum",
                &[&table.quoted()],
            ))
            .map_err(|e| {
                self.target
                    .sql_error(&format!("cannot read the columns of {table}"), e)
            })?;
        let columns: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if columns.is_empty() {
            return Err(PipelineError::fatal(
                format!(
                    "the target table {table} of topic {:?} does not exist",
                    self.id.topic
                ),
                "create it with the key's columns as its primary key (auto_create is not supported yet)",
            ));
        }
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
        if let Some(missing) = key.iter().find(|k| !columns.contains(k)) {
            return Err(PipelineError::fatal(
                format!("the record key's column {missing:?} is not a column of {table}"),
                "the target table needs the key's columns (with a primary key or unique index on them)",
            ));
        }
        if key.is_empty() {
            return Err(PipelineError::fatal(
                format!("a record key of {:?} is an empty object", self.id.topic),
                "the PostgreSQL sink applies changes by key",
            ));
        }
        self.shape = Some(TableShape { columns, key });
        Ok(())
    }

    /// The statements that apply `changes` (in offset order), collapsed per key to the last
    /// change: (SQL, the batch as a JSON array).
    fn statements(&self, changes: &[&Change]) -> Result<Vec<(String, String)>, PipelineError> {
        let Some(shape) = &self.shape else {
            return Ok(Vec::new());
        };
        let table = self.table()?.quoted();
        // The last change of each key.
        let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(changes.len());
        for (index, change) in changes.iter().enumerate() {
            last.insert(change.key(), index);
        }
        let mut upserts = String::from("[");
        let mut deletes = String::from("[");
        let mut upserted = 0u64;
        let mut deleted = 0u64;
        let mut seen: HashSet<String> = HashSet::new();
        for (index, change) in changes.iter().enumerate() {
            if last.get(change.key()) != Some(&index) {
                continue;
            }
            match change {
                Change::Upsert { row, .. } => {
                    if upserted > 0 {
                        upserts.push(',');
                    }
                    upserts.push_str(row);
                    upserted += 1;
                    let fields: HashMap<String, serde::de::IgnoredAny> =
                        serde_json::from_str(row).unwrap_or_default();
                    for name in fields.into_keys() {
                        if !seen.contains(&name) {
                            seen.insert(name);
                        }
                    }
                }
                Change::Delete { key } => {
                    if deleted > 0 {
                        deletes.push(',');
                    }
                    deletes.push_str(&String::from_utf8_lossy(key));
                    deleted += 1;
                }
            }
        }
        upserts.push(']');
        deletes.push(']');
        if let Some(unknown) = seen.iter().find(|c| !shape.columns.contains(c)) {
            return Err(PipelineError::fatal(
                format!(
                    "the records of {:?} have a column {unknown:?} that {table} lacks",
                    self.id.topic
                ),
                "add the column to the target table (auto_evolve is not supported yet)",
            ));
        }
        let mut statements = Vec::new();
        let keys: Vec<String> = shape.key.iter().map(|k| quote_ident(k)).collect();
        if deleted > 0 {
            let matches: Vec<String> = keys.iter().map(|k| format!("t.{k} = k.{k}")).collect();
            statements.push((
                format!(
                    "DELETE FROM {table} AS t USING jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS k WHERE {}",
                    matches.join(" AND ")
                ),
                deletes,
            ));
        }
        if upserted > 0 {
            let columns: Vec<String> = shape
                .columns
                .iter()
                .filter(|c| seen.contains(*c))
                .map(|c| quote_ident(c))
                .collect();
            let updates: Vec<String> = columns
                .iter()
                .filter(|c| !keys.contains(c))
                .map(|c| format!("{c} = EXCLUDED.{c}"))
                .collect();
            let action = if updates.is_empty() {
                "NOTHING".to_owned()
            } else {
                format!("UPDATE SET {}", updates.join(", "))
            };
            let list = columns.join(", ");
            statements.push((
                format!(
                    "INSERT INTO {table} ({list}) SELECT {list} FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) ON CONFLICT ({}) DO {action}",
                    keys.join(", ")
                ),
                upserts,
            ));
        }
        Ok(statements)
    }

    /// Runs `statements` and moves the progress to `next` in one transaction; `false`: the
    /// progress was not where this writer left it (nothing applied).
    fn transact(
        &self,
        client: &mut Client,
        statements: &[(String, String)],
        next: i64,
    ) -> Result<bool, tokio_postgres::Error> {
        let progress_sql = format!(
            "UPDATE {} SET next_offset = $1, updated_at = now() WHERE pipeline = $2 AND topic = $3
             AND kafka_partition = $4 AND sub_partition = $5 AND next_offset = $6",
            self.target.settings.progress_table()
        );
        let id = &self.id;
        let sub = id.sub as i32;
        self.target.runtime.block_on(async {
            let transaction = client.transaction().await?;
            for (sql, json) in statements {
                transaction.execute(sql.as_str(), &[json]).await?;
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
                return Ok(false);
            }
            transaction.commit().await?;
            Ok(true)
        })
    }

    /// The staged changes PostgreSQL refuses, found by applying them one at a time in a
    /// transaction that is rolled back: (index in the batch, PostgreSQL's reason).
    fn find_refused(
        &self,
        client: &mut Client,
        rejected: &HashSet<usize>,
    ) -> Result<Vec<(usize, String)>, PipelineError> {
        let runtime = &self.target.runtime;
        let failed = |e| {
            self.target
                .sql_error("cannot look for the refused records", e)
        };
        let transaction = runtime.block_on(client.transaction()).map_err(failed)?;
        let mut refused = Vec::new();
        for (index, staged) in self.batch.iter().enumerate() {
            if rejected.contains(&index) {
                continue;
            }
            runtime
                .block_on(transaction.batch_execute("SAVEPOINT sluice_one"))
                .map_err(failed)?;
            for (sql, json) in self.statements(&[&staged.change])? {
                match runtime.block_on(transaction.execute(sql.as_str(), &[&json])) {
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

    /// Applies the staged batch and the progress in one transaction; records PostgreSQL
    /// refuses follow `delivery.on_failure`.
    fn apply(&mut self) -> Result<(), PipelineError> {
        let Some(last_offset) = self.last_offset else {
            return Ok(());
        };
        let next = last_offset + 1;
        let mut client = match self.client.take() {
            Some(client) if !client.is_closed() => client,
            _ => self.target.connect()?,
        };
        if let Some(first) = self.batch.first() {
            let key = first.change.key().to_vec();
            self.load_shape(&client, &key)?;
        }
        let table = self.table()?.clone();
        let id = self.id.clone();
        let batch_error = |e| {
            self.target.sql_error(
                &format!(
                    "cannot apply a batch of {}/{} sub-partition {} to {table}",
                    id.topic, id.partition, id.sub
                ),
                e,
            )
        };
        let mut rejected: HashSet<usize> = HashSet::new();
        let mut attempt = 1;
        loop {
            let changes: Vec<&Change> = self
                .batch
                .iter()
                .enumerate()
                .filter(|(index, _)| !rejected.contains(index))
                .map(|(_, staged)| &staged.change)
                .collect();
            let statements = self.statements(&changes)?;
            match self.transact(&mut client, &statements, next) {
                Ok(true) => break,
                Ok(false) => {
                    return Err(PipelineError::Retryable {
                        what: format!(
                            "the progress of {}/{} sub-partition {} moved past offset {} in the target database: another consumer applied it; restarting from the progress table",
                            id.topic, id.partition, id.sub, self.progress
                        ),
                        source: None,
                    });
                }
                Err(error) if is_record_error(&error) => {
                    let refused = self.find_refused(&mut client, &rejected)?;
                    let Some((first, reason)) = refused.first() else {
                        return Err(batch_error(error));
                    };
                    let offset = self.batch[*first].data.offset;
                    let what = format!(
                        "record {}/{} offset {offset} cannot be applied to {table}: {reason}",
                        id.topic, id.partition
                    );
                    match (self.failure.policy, &self.dead_letter) {
                        (FailurePolicy::DeadLetter, Some(dead_letter)) => {
                            for (index, reason) in &refused {
                                let data = &self.batch[*index].data;
                                tracing::warn!(
                                    topic = %id.topic,
                                    partition = id.partition,
                                    offset = data.offset,
                                    reason = %reason,
                                    dead_letter_topic = %dead_letter.topic,
                                    "record sent to the dead-letter topic"
                                );
                                dead_letter.send(&id.topic, id.partition, data, reason)?;
                                rejected.insert(*index);
                            }
                        }
                        (FailurePolicy::Retry, _) if attempt < self.failure.retry_max_attempts => {
                            tracing::warn!(topic = %id.topic, partition = id.partition, offset, attempt, reason = %reason, "record refused; retrying its batch");
                            let delay =
                                self.failure.retry_backoff * 2u32.saturating_pow(attempt - 1);
                            std::thread::sleep(delay.min(Duration::from_secs(30)));
                            attempt += 1;
                        }
                        _ => {
                            return Err(PipelineError::fatal(
                                format!("{what} (after {attempt} attempt(s))"),
                                "fix the target table or the record's producer, or set delivery.on_failure = \"dead_letter\" with a delivery.dead_letter_topic; the pipeline resumes from the progress table",
                            ));
                        }
                    }
                }
                Err(error) => return Err(batch_error(error)),
            }
        }
        crate::crash_point!("sink::postgres::batch_committed");
        m::records_committed().increment(self.records);
        tracing::debug!(
            topic = %id.topic,
            partition = id.partition,
            sub = id.sub,
            records = self.records,
            rejected = rejected.len(),
            next_offset = next,
            "batch applied"
        );
        self.client = Some(client);
        self.progress = next;
        Ok(())
    }

    fn clear(&mut self) {
        self.batch.clear();
        self.last_offset = None;
        self.records = 0;
        self.opened_at = None;
    }
}

impl SubPartitionWriter for PgWriter {
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure> {
        let change = decode(data).map_err(WriteFailure::Record)?;
        self.batch.push(Staged {
            change,
            data: RecordData::new(data.offset, data.key(), data.value(), data.timestamp_ms),
        });
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
    }

    fn due_after_batch(&self) -> bool {
        self.opened_at
            .is_some_and(|opened| opened.elapsed() >= self.max_age())
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: Option<&str>, value: Option<&str>) -> RecordData {
        RecordData::new(7, key.map(str::as_bytes), value.map(str::as_bytes), None)
    }

    #[test]
    fn change_events_become_upserts_and_deletes() {
        let key = Some(r#"{"id":1}"#);
        for op in ["c", "r", "u"] {
            let value =
                format!(r#"{{"before":null,"after":{{"id":1,"n":2}},"source":{{}},"op":"{op}"}}"#);
            match decode(&record(key, Some(&value))).unwrap() {
                Change::Upsert { key, row } => {
                    assert_eq!(key, br#"{"id":1}"#);
                    assert_eq!(row, r#"{"id":1,"n":2}"#);
                }
                other => panic!("{op}: {other:?}"),
            }
        }
        let delete = r#"{"before":{"id":1},"after":null,"op":"d"}"#;
        assert!(matches!(
            decode(&record(key, Some(delete))).unwrap(),
            Change::Delete { .. }
        ));
        assert!(matches!(
            decode(&record(key, None)).unwrap(),
            Change::Delete { .. }
        ));
        // A plain JSON row is upserted as it is.
        match decode(&record(key, Some(r#"{"id":1,"n":3}"#))).unwrap() {
            Change::Upsert { row, .. } => assert_eq!(row, r#"{"id":1,"n":3}"#),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_that_are_no_change_say_why() {
        let key = Some(r#"{"id":1}"#);
        let cases = [
            (None, Some(r#"{"op":"c","after":{"id":1}}"#), "no key"),
            (
                Some("42"),
                Some(r#"{"op":"c","after":{"id":1}}"#),
                "not a JSON object",
            ),
            (key, Some(r#"{"op":"t"}"#), "truncate"),
            (
                key,
                Some(r#"{"op":"u","after":null}"#),
                "without an `after`",
            ),
            (
                key,
                Some(r#"{"schema":{},"payload":{"op":"c"}}"#),
                "schemas",
            ),
            (key, Some("{oops"), "not a JSON object"),
        ];
        for (key, value, expected) in cases {
            let error = decode(&record(key, value)).unwrap_err();
            assert!(error.contains(expected), "{value:?}: {error}");
        }
    }
}
