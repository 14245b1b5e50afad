//! `sluice verify` of a MySQL/MariaDB → Kafka pipeline: the source side, in MySQL's SQL.
//!
//! **Consistency.** The tables are read in one `START TRANSACTION WITH CONSISTENT SNAPSHOT`
//! whose binlog position is known, opened as the pipeline's own initial snapshot opens one
//! ([`crate::source::mysql::snapshot::open`]): on MariaDB the server reports the snapshot's
//! position (`binlog_snapshot_file`/`binlog_snapshot_position`, without a lock); on MySQL 8.0
//! commits are stopped (`FLUSH TABLES WITH READ LOCK`, or `LOCK TABLES … READ` of the captured
//! tables) while the transaction starts and the position is read, a few milliseconds. The
//! snapshot sees every transaction before that position and none after it. Once the
//! pipeline's saved position has reached it, every change before it is in the topics; each
//! record sluice writes carries its row event's binlog file and position (`sluice.binlog_file`,
//! `sluice.binlog_pos`), so the records after it are left out ([`Cutoff::Binlog`]).
//!
//! **Checksums.** MySQL computes each row's canonical form (the same as PostgreSQL's, see
//! [`super::canonical`]) and its MD5; sluice sums the hashes per bucket. The types compared:
//! integers (`BIGINT UNSIGNED` wrapped as Debezium writes it when the events carry schemas),
//! `YEAR`, `DECIMAL`, the character types, `ENUM`, `SET`, the binary types, `DATE`,
//! `DATETIME`, `TIMESTAMP` and `BIT(1)`; the others (`FLOAT`, `DOUBLE`, `TIME`, `JSON`, `BIT(n)`,
//! spatial types) and generated columns are listed as not compared.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::canonical::ColumnClass;
use super::compare::{self, Limits, RowSource, Side, verify_table};
use super::report::{Report, TableReport};
use super::source::{Buckets, Column, SourceRow, TablePlan, bucket_count};
use super::topic::Cutoff;
use crate::error::PipelineError;
use crate::event::options::TemporalUnit;
use crate::event::{DecimalHandlingMode, EventOptions};
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::mysql::server::{self, BinlogPosition};
use crate::source::mysql::snapshot::{self, CapturedTable};
use crate::sql::quote_mysql_ident as quote;

/// A table's canonical SQL, in MySQL's dialect.
#[derive(Debug, Clone)]
struct TableSql {
    /// The compared columns' canonical text expressions, in column order.
    columns: Vec<String>,
    /// The key columns', in key order.
    key: Vec<String>,
    /// The compared columns' values as the report shows them (binary values in hex).
    shown: Vec<String>,
}

/// The verification's snapshot of a MySQL/MariaDB server.
pub struct MysqlSnapshot {
    conn: tokio::sync::Mutex<Conn>,
    /// The binlog position the snapshot is consistent with.
    pub position: BinlogPosition,
    sql: HashMap<String, TableSql>,
}

impl MysqlSnapshot {
    fn sql_of(&self, plan: &TablePlan) -> Result<&TableSql, PipelineError> {
        self.sql.get(&plan.qualified).ok_or_else(|| {
            PipelineError::fatal("a table was compared without its plan", "report this bug")
        })
    }

    /// Every row's bucket and hash, computed by the server, summed per bucket; at most `rate`
    /// rows a second (0: unbounded).
    async fn checksums(&self, plan: &TablePlan, rate: u64) -> Result<Buckets, PipelineError> {
        let sql = self.sql_of(plan)?;
        let query = format!(
            "SELECT {}, CONV(SUBSTR(MD5({}), 1, 16), 16, 10) FROM {} AS t",
            bucket(&sql.key, plan.buckets),
            form(&sql.columns),
            plan.from
        );
        let mut buckets: Buckets = vec![(0, 0); plan.buckets as usize];
        let mut failed = None;
        self.scan(&query, &plan.qualified, rate, |row| {
            let bucket: Option<u64> = row.get(0);
            let hash: Option<String> = row.get(1);
            match (bucket, hash.and_then(|h| h.parse::<u64>().ok())) {
                (Some(bucket), Some(hash)) => {
                    if let Some(entry) = buckets.get_mut(bucket as usize) {
                        entry.0 += 1;
                        // The first 8 bytes of the MD5, big-endian, as a signed integer.
                        entry.1 += i128::from(hash as i64);
                    }
                }
                _ => failed = Some("a row's bucket or hash is not a number"),
            }
        })
        .await?;
        match failed {
            Some(problem) => Err(PipelineError::fatal(
                format!("cannot read the checksums of {}: {problem}", plan.qualified),
                "report this bug",
            )),
            None => Ok(buckets),
        }
    }

    /// Streams `query`'s rows, at the pace `rate` allows (the server waits on the
    /// connection meanwhile).
    async fn scan(
        &self,
        query: &str,
        table: &str,
        rate: u64,
        mut each: impl FnMut(&mysql_async::Row),
    ) -> Result<(), PipelineError> {
        let mut conn = self.conn.lock().await;
        let error = |e: mysql_async::Error| {
            PipelineError::retryable(format!("cannot read {table}"), anyhow::Error::new(e))
        };
        let mut result = conn.query_iter(query).await.map_err(error)?;
        let started = Instant::now();
        let mut total = 0u64;
        while let Some(row) = result.next().await.map_err(error)? {
            each(&row);
            total += 1;
            if rate > 0 && total.is_multiple_of(1000) {
                let due = Duration::from_secs_f64(total as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        Ok(())
    }
}

impl RowSource for MysqlSnapshot {
    fn rows<'a>(
        &'a self,
        plan: &'a TablePlan,
        _events: &'a EventOptions,
        buckets: &'a [u32],
        rate: u64,
    ) -> BoxFuture<'a, Result<Vec<SourceRow>, PipelineError>> {
        Box::pin(async move {
            let sql = self.sql_of(plan)?;
            let list: Vec<String> = buckets.iter().map(u32::to_string).collect();
            let bucket = bucket(&sql.key, plan.buckets);
            let texts = |exprs: &[String]| -> String { exprs.join(", ") };
            let (keys, columns) = (plan.key.len(), plan.columns.len());
            // The shown values as a JSON array, named by the plan's columns here: no column
            // name goes into the query's text as a literal.
            let query = format!(
                "SELECT {bucket}, {}, {}, CAST(JSON_ARRAY({}) AS CHAR) FROM {} AS t WHERE {bucket} IN ({})",
                texts(&sql.key),
                texts(&sql.columns),
                texts(&sql.shown),
                plan.from,
                list.join(", ")
            );
            let mut rows = Vec::new();
            self.scan(&query, &plan.qualified, rate, |row| {
                let text = |i: usize| {
                    row.get::<Option<Vec<u8>>, _>(i)
                        .flatten()
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                };
                let key: Vec<Option<String>> = (1..=keys).map(text).collect();
                let values: Vec<Option<String>> = (keys + 1..=keys + columns).map(text).collect();
                let shown: Vec<serde_json::Value> = text(keys + columns + 1)
                    .and_then(|j| serde_json::from_str(&j).ok())
                    .unwrap_or_default();
                let json = serde_json::Value::Object(
                    plan.columns
                        .iter()
                        .map(|c| c.name.clone())
                        .zip(shown)
                        .collect(),
                );
                rows.push(SourceRow {
                    bucket: row.get::<Option<u64>, _>(0).flatten().unwrap_or_default() as u32,
                    key_text: key.clone(),
                    key,
                    values,
                    json,
                });
            })
            .await?;
            Ok(rows)
        })
    }
}

/// The canonical piece of the text expression `e` (`N` or `V<byte length>:<text>`), in
/// `utf8mb4`.
fn piece(e: &str) -> String {
    format!("IF(({e}) IS NULL, 'N', CONCAT('V', LENGTH({e}), ':', {e}))")
}

/// The canonical form of the expressions `exprs`, one text value.
fn form(exprs: &[String]) -> String {
    if exprs.is_empty() {
        return "''".into();
    }
    let pieces: Vec<String> = exprs.iter().map(|e| piece(e)).collect();
    format!("CONCAT({})", pieces.join(", "))
}

/// The bucket of the key form of `key` among `buckets` (the first 4 bytes of its MD5, modulo).
fn bucket(key: &[String], buckets: u32) -> String {
    format!(
        "(CONV(SUBSTR(MD5({}), 1, 8), 16, 10) % {buckets})",
        form(key)
    )
}

/// A column as `information_schema.COLUMNS` describes it.
struct MysqlColumn {
    name: String,
    data_type: String,
    column_type: String,
    scale: Option<u64>,
    fsp: Option<u64>,
    generated: bool,
}

/// The class and canonical SQL of a column; `Err`: why it is not compared.
fn classify(
    column: &MysqlColumn,
    events: &EventOptions,
) -> Result<(ColumnClass, String), &'static str> {
    if column.generated {
        return Err("generated (not compared)");
    }
    let c = format!("t.{}", quote(&column.name));
    let text = |e: String| format!("CONVERT({e} USING utf8mb4)");
    let unsigned = column.column_type.contains("unsigned");
    Ok(match column.data_type.as_str() {
        // Debezium's `bigint.unsigned.handling.mode = long` (sluice's events with schemas):
        // values above 2^63-1 wrapped to negative.
        "bigint" if unsigned && events.needs_schemas() => (
            ColumnClass::Int,
            text(format!(
                "CAST(IF({c} > 9223372036854775807, CAST({c} AS DECIMAL(20, 0)) - 18446744073709551616, {c}) AS CHAR)"
            )),
        ),
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => {
            (ColumnClass::Int, text(format!("CAST({c} AS CHAR)")))
        }
        "year" => (ColumnClass::Int, text(format!("CAST({c} + 0 AS CHAR)"))),
        "decimal" | "numeric" => match events.decimal_handling_mode {
            DecimalHandlingMode::Double => {
                return Err("numeric as a double (decimal.handling.mode): not compared");
            }
            _ => (
                ColumnClass::Numeric {
                    scale: Some(column.scale.unwrap_or(0) as u32),
                },
                text(format!("CAST({c} AS CHAR)")),
            ),
        },
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set" => {
            (ColumnClass::Text, text(c))
        }
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            (ColumnClass::Bytea, text(format!("LOWER(HEX({c}))")))
        }
        "date" => (
            ColumnClass::Date,
            text(format!("CAST(DATEDIFF({c}, '1970-01-01') AS CHAR)")),
        ),
        "datetime" => (
            ColumnClass::Timestamp(if column.fsp.unwrap_or(0) <= 3 {
                TemporalUnit::Millis
            } else {
                TemporalUnit::Micros
            }),
            text(format!(
                "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c}) AS CHAR)"
            )),
        ),
        // Read in UTC (the session's time zone), as the events hold it.
        "timestamp" => (
            ColumnClass::Timestamptz,
            text(format!(
                "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c}) AS CHAR)"
            )),
        ),
        "bit" if column.column_type == "bit(1)" => (
            ColumnClass::Bool,
            text(format!(
                "IF({c} IS NULL, NULL, IF({c} + 0 = 1, 'true', 'false'))"
            )),
        ),
        _ => return Err("type not compared"),
    })
}

/// The plan of `table` and its SQL; `Err` says why it cannot be verified.
async fn plan(
    conn: &mut Conn,
    config: &MysqlPipelineConfig,
    table: &CapturedTable,
) -> Result<Result<(TablePlan, TableSql), String>, PipelineError> {
    let events = &config.kafka.events;
    let qualified = format!("{}.{}", table.database, table.table);
    let error = |e: mysql_async::Error| {
        PipelineError::retryable(
            format!("cannot read the columns of {qualified}"),
            anyhow::Error::new(e),
        )
    };
    let described: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_SCALE, DATETIME_PRECISION, EXTRA \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (&table.database, &table.table),
        )
        .await
        .map_err(error)?;
    let key_names: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (&table.database, &table.table),
        )
        .await
        .map_err(error)?;
    if key_names.is_empty() {
        return Ok(Err(
            "no primary key: its records have no key to compare by".into()
        ));
    }
    let mut columns = Vec::new();
    let mut sql = Vec::new();
    let mut shown = Vec::new();
    let mut not_compared = Vec::new();
    for row in described {
        let text = |i: usize| {
            row.get::<Option<String>, _>(i)
                .flatten()
                .unwrap_or_default()
        };
        let column = MysqlColumn {
            name: text(0),
            data_type: text(1).to_ascii_lowercase(),
            column_type: text(2).to_ascii_lowercase(),
            scale: row.get::<Option<u64>, _>(3).flatten(),
            fsp: row.get::<Option<u64>, _>(4).flatten(),
            generated: text(5).to_ascii_uppercase().contains("GENERATED"),
        };
        match classify(&column, events) {
            Ok((class, expr)) => {
                let c = format!("t.{}", quote(&column.name));
                shown.push(match class {
                    ColumnClass::Bytea | ColumnClass::Bool => expr.clone(),
                    _ => c,
                });
                columns.push(Column {
                    name: column.name,
                    class,
                });
                sql.push(expr);
            }
            Err(reason) if key_names.contains(&column.name) => {
                return Ok(Err(format!("key column {:?}: {reason}", column.name)));
            }
            Err(reason) => not_compared.push((column.name, reason.to_owned())),
        }
    }
    let mut key = Vec::new();
    let mut key_sql = Vec::new();
    for name in &key_names {
        match columns.iter().position(|c| &c.name == name) {
            Some(i) => {
                key.push(columns[i].clone());
                key_sql.push(sql[i].clone());
            }
            None => return Ok(Err("its key columns cannot be compared".into())),
        }
    }
    let estimate: Option<u64> = conn
        .exec_first(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&table.database, &table.table),
        )
        .await
        .map_err(error)?
        .flatten();
    let plan = TablePlan {
        topic: format!("{}.{qualified}", config.kafka.topic_prefix),
        qualified,
        columns,
        key,
        not_compared,
        from: format!("{}.{}", quote(&table.database), quote(&table.table)),
        filter: None,
        buckets: bucket_count(estimate.unwrap_or(0) as f64),
    };
    Ok(Ok((
        plan,
        TableSql {
            columns: sql,
            key: key_sql,
            shown,
        },
    )))
}

/// What the pipeline's configuration lets verify compare; `Err` names what does not.
fn check_supported(config: &MysqlPipelineConfig) -> anyhow::Result<()> {
    if !config.transforms.is_empty() {
        anyhow::bail!(
            "the pipeline has [transforms]: verify compares Debezium's envelopes in the default topics, not transformed records"
        );
    }
    let skipped = config.kafka.events.skipped_operations;
    if skipped.create || skipped.update || skipped.delete {
        anyhow::bail!(
            "kafka.events.skipped_operations leaves out inserts, updates or deletes: the topics cannot hold what the tables hold"
        );
    }
    Ok(())
}

/// Verifies the captured tables of a MySQL/MariaDB → Kafka pipeline (`tables`: only these),
/// waiting up to `wait_timeout` seconds for the pipeline to reach the snapshot's position.
///
/// # Errors
///
/// The server or the brokers cannot be reached, the snapshot cannot be opened, the pipeline
/// does not reach the position.
pub async fn verify_mysql(
    config: &MysqlPipelineConfig,
    tables: &[String],
    limits: &Limits,
    wait_timeout: u64,
) -> anyhow::Result<Report> {
    check_supported(config)?;
    let events = &config.kafka.events;
    let avro = super::avro::AvroTopics::new(events, config.schema_registry.as_ref())?;
    let mut conn = server::connect(&config.source)
        .await
        .map_err(compare::explained)?;
    let flavor = server::flavor(&mut conn)
        .await
        .map_err(compare::explained)?;
    let mut captured = snapshot::captured_tables(&mut conn, &config.source)
        .await
        .map_err(compare::explained)?;
    drop(conn);
    if !tables.is_empty() {
        for wanted in tables {
            if !captured
                .iter()
                .any(|t| &format!("{}.{}", t.database, t.table) == wanted)
            {
                anyhow::bail!(
                    "--table {wanted}: not a table this pipeline captures (see `sluice check`)"
                );
            }
        }
        captured.retain(|t| tables.contains(&format!("{}.{}", t.database, t.table)));
    }
    let opened = snapshot::open(&config.source, flavor, 1, &captured)
        .await
        .map_err(compare::explained)?;
    let position = opened.position.clone();
    let Some(mut conn) = opened.connections.into_iter().next() else {
        anyhow::bail!("the consistent snapshot has no connection");
    };
    let mut report = Report::new(position.to_string());
    let mut plans = Vec::new();
    let mut sql = HashMap::new();
    for table in &captured {
        match plan(&mut conn, config, table)
            .await
            .map_err(compare::explained)?
        {
            Ok((plan, table_sql)) => {
                sql.insert(plan.qualified.clone(), table_sql);
                plans.push(plan);
            }
            Err(reason) => report.tables.push(TableReport::not_verified(
                format!("{}.{}", table.database, table.table),
                format!(
                    "{}.{}.{}",
                    config.kafka.topic_prefix, table.database, table.table
                ),
                reason,
            )),
        }
    }
    let snapshot = MysqlSnapshot {
        conn: tokio::sync::Mutex::new(conn),
        position,
        sql,
    };
    let source_started = Instant::now();
    let mut checksums = Vec::new();
    for plan in &plans {
        let buckets = snapshot
            .checksums(plan, limits.rate_limit)
            .await
            .map_err(compare::explained)?;
        report.source_rows += buckets.iter().map(|b| b.0).sum::<u64>();
        checksums.push(buckets);
    }
    report.source_ms = source_started.elapsed().as_millis() as u64;
    wait_for_pipeline(config, &snapshot.position, wait_timeout).await?;
    let consumer = compare::consumer(&config.name, &config.kafka.brokers, &config.kafka.client)?;
    let cutoff = Cutoff::Binlog {
        file: snapshot.position.file.clone(),
        pos: snapshot.position.pos,
    };
    let side = Side {
        db: &snapshot,
        events,
        cutoff: &cutoff,
        avro: avro.as_ref(),
        sink: false,
    };
    let topic_started = Instant::now();
    for (plan, buckets) in plans.iter().zip(&checksums) {
        report.tables.push(
            match verify_table(side, &consumer, limits, plan, buckets).await {
                Ok(table) => table,
                Err(error) => TableReport::not_verified(
                    plan.qualified.clone(),
                    plan.topic.clone(),
                    format!("{error:#}"),
                ),
            },
        );
    }
    report.topic_ms = topic_started.elapsed().as_millis() as u64;
    report.tables.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(report)
}

/// Waits until the pipeline's saved position (its state store) is at or after `position`:
/// every change before it is then in the topics.
async fn wait_for_pipeline(
    config: &MysqlPipelineConfig,
    position: &BinlogPosition,
    timeout: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        let (saved, location) = crate::source::mysql::stream::saved_progress(config)
            .await
            .map_err(compare::explained)?;
        match saved {
            None => anyhow::bail!(
                "the pipeline has saved no position ({location}): has it run? (verify reads its state store)"
            ),
            Some((_, true)) => anyhow::bail!(
                "initial snapshot in progress: the pipeline {:?} has not finished snapshotting its tables (its state {location}), so its topics do not hold them yet; verify again once it streams (/health state \"streaming\")",
                config.name
            ),
            Some((saved, _))
                if (saved.file.as_str(), saved.pos) >= (position.file.as_str(), position.pos) =>
            {
                return Ok(());
            }
            Some((saved, _)) if Instant::now() >= deadline => anyhow::bail!(
                "the pipeline did not reach the verification's position {position} within {timeout} s (its saved position is {saved}, {location}): is it running? (--wait-timeout)"
            ),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Keys per signal (a filter of `(key) IN (…)` values).
const KEYS_PER_SIGNAL: usize = 500;

/// `--repair` on a MySQL/MariaDB pipeline: inserts signals into its signal table
/// (`source.mysql.signal_table`) for incremental snapshots of exactly the differing keys present
/// in the source, as for PostgreSQL. Keys whose values are not written as SQL here (a key
/// column other than an integer or a character type) are named in a hint instead.
///
/// # Errors
///
/// No signal table, or the server refused the signals.
pub async fn repair(
    config: &MysqlPipelineConfig,
    report: &Report,
) -> anyhow::Result<super::report::Repair> {
    use super::report::DifferenceKind;
    let mut repair = super::report::Repair::default();
    let mut signals: Vec<(String, String)> = Vec::new();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    for table in report.tables.iter().filter(|t| !t.repairable.is_empty()) {
        let extra = table
            .repairable
            .iter()
            .filter(|d| d.kind == DifferenceKind::MissingInSource)
            .count();
        if extra > 0 {
            repair.hints.push(format!(
                "{}: {extra} key(s) are in the topic but not in the table: an incremental snapshot cannot delete them; produce their tombstones (null values) to {}",
                table.table, table.topic
            ));
        }
        let keys: Vec<&Vec<Option<String>>> = table
            .repairable
            .iter()
            .filter(|d| d.kind != DifferenceKind::MissingInSource)
            .map(|d| &d.key_text)
            .collect();
        if keys.is_empty() {
            continue;
        }
        let literals: Option<Vec<String>> = keys
            .iter()
            .map(|key| {
                let values: Option<Vec<String>> = key
                    .iter()
                    .zip(&table.key_classes)
                    .map(|(value, class)| key_literal(value.as_deref()?, class))
                    .collect();
                values.map(|v| format!("({})", v.join(", ")))
            })
            .collect();
        let Some(literals) = literals else {
            repair.hints.push(format!(
                "{}: its key's type is not written as SQL by --repair (integers, character types, decimals, binary, dates, datetimes, timestamps and bits are): request an incremental snapshot of the listed keys through {} by hand",
                table.table,
                config.source.signal_table.as_deref().unwrap_or("source.mysql.signal_table")
            ));
            continue;
        };
        let columns: Vec<String> = table.key_columns.iter().map(|c| quote(c)).collect();
        for (n, chunk) in literals.chunks(KEYS_PER_SIGNAL).enumerate() {
            let filter = format!("({}) IN ({})", columns.join(", "), chunk.join(", "));
            let data = serde_json::json!({
                "data-collections": [table.table],
                "type": "incremental",
                "additional-conditions": [{"data-collection": table.table, "filter": filter}],
            });
            signals.push((
                format!("verify-{stamp}-{}-{n}", table.table),
                data.to_string(),
            ));
            repair.keys += chunk.len() as u64;
        }
    }
    if signals.is_empty() {
        return Ok(repair);
    }
    let Some(signal_table) = &config.source.signal_table else {
        anyhow::bail!(
            "--repair needs source.mysql.signal_table (the pipeline's signal table, e.g. \"inventory.sluice_signal\")"
        );
    };
    let (database, name) = crate::config::parse_table_name(signal_table)
        .ok_or_else(|| anyhow::anyhow!("source.mysql.signal_table is not database.table"))?;
    let mut conn = server::connect(&config.source)
        .await
        .map_err(compare::explained)?;
    let insert = format!(
        "INSERT INTO {}.{} (id, type, data) VALUES (?, 'execute-snapshot', ?)",
        quote(database),
        quote(name)
    );
    for (id, data) in signals {
        conn.exec_drop(&insert, (&id, &data)).await.map_err(|e| {
            anyhow::anyhow!("cannot insert the repair signal into {signal_table}: {e}")
        })?;
        repair.signals.push(id);
    }
    let _ = conn.disconnect().await;
    Ok(repair)
}

/// A key value as SQL for the repair's filter, from its canonical text (what the verification's
/// SQL computed, so its form is known, but checked character by character all the same: a
/// literal is built only from text of exactly that form, never quoted through):
///
/// - an integer (and `YEAR`) as itself;
/// - a character value as a `utf8mb4` literal of its bytes (`_utf8mb4 X'…'`, which no quoting
///   or `sql_mode` can change), compared by its bytes;
/// - a `DECIMAL` as its exact decimal text (`-12.50`);
/// - a binary value (its canonical text is lowercase hex) as `X'…'`;
/// - a `DATE` (days since 1970-01-01) as `DATE '1970-01-01' + INTERVAL n DAY`;
/// - a `DATETIME` or a `TIMESTAMP` (microseconds since 1970-01-01 00:00:00, a `TIMESTAMP` in
///   UTC, the time zone of the pipeline's snapshot session) as
///   `TIMESTAMP '1970-01-01 00:00:00' + INTERVAL n MICROSECOND`;
/// - a `BIT(1)` (`true`/`false`) as `b'1'`/`b'0'`.
///
/// `None` for anything else, or text not of its class's form.
fn key_literal(text: &str, class: &ColumnClass) -> Option<String> {
    let integer = |t: &str| {
        let digits = t.strip_prefix('-').unwrap_or(t);
        (!digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.to_owned())
    };
    match class {
        ColumnClass::Int => integer(text),
        ColumnClass::Text | ColumnClass::Enum | ColumnClass::Bpchar => {
            let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
            Some(format!("_utf8mb4 X'{hex}' COLLATE utf8mb4_bin"))
        }
        ColumnClass::Numeric { .. } => {
            let unsigned = text.strip_prefix('-').unwrap_or(text);
            let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, "0"));
            let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
            (digits(whole) && digits(fraction) && unsigned.len() <= 80).then(|| text.to_owned())
        }
        ColumnClass::Bytea => (text.len().is_multiple_of(2)
            && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| format!("X'{text}'")),
        ColumnClass::Date => {
            integer(text).map(|days| format!("(DATE '1970-01-01' + INTERVAL {days} DAY)"))
        }
        ColumnClass::Timestamp(_) | ColumnClass::Timestamptz => integer(text).map(|micros| {
            format!("(TIMESTAMP '1970-01-01 00:00:00' + INTERVAL {micros} MICROSECOND)")
        }),
        ColumnClass::Bool => match text {
            "true" => Some("b'1'".to_owned()),
            "false" => Some("b'0'".to_owned()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{SqlDialect, check_condition};

    #[test]
    fn repair_keys_are_sql_of_their_bytes_or_refused() {
        assert_eq!(
            key_literal("-42", &ColumnClass::Int).as_deref(),
            Some("-42")
        );
        // Hostile text never leaves its literal: it is hex.
        let text = key_literal("a' OR 1=1; -- \\", &ColumnClass::Text).unwrap();
        assert_eq!(
            text,
            "_utf8mb4 X'6127204f5220313d313b202d2d205c' COLLATE utf8mb4_bin"
        );
        assert_eq!(key_literal("1 OR 1=1", &ColumnClass::Int), None);
        assert_eq!(key_literal("", &ColumnClass::Int), None);
        assert_eq!(key_literal("2020-01-01", &ColumnClass::Date), None);
        let filter = format!("(`id`, `name`) IN ((7, {text}))");
        assert_eq!(check_condition(SqlDialect::Mysql, &filter), Ok(()));
    }

    /// Decimals, binary values, dates, datetimes, timestamps and bits are literals of their
    /// canonical text's exact form; anything else in that text (hostile or not) is refused.
    #[test]
    fn repair_keys_of_other_types_are_literals_of_their_form_only() {
        let decimal = ColumnClass::Numeric { scale: Some(2) };
        let micros = ColumnClass::Timestamp(TemporalUnit::Micros);
        let cases: [(&str, &ColumnClass, Option<&str>); 22] = [
            ("-12.50", &decimal, Some("-12.50")),
            ("7", &decimal, Some("7")),
            ("1.5e3", &decimal, None),
            ("1.", &decimal, None),
            (".5", &decimal, None),
            ("1.5 OR 1=1", &decimal, None),
            ("0x41", &decimal, None),
            ("00ff10", &ColumnClass::Bytea, Some("X'00ff10'")),
            ("", &ColumnClass::Bytea, Some("X''")),
            ("0ff", &ColumnClass::Bytea, None),
            ("00FF", &ColumnClass::Bytea, None),
            ("00'; DROP TABLE t; --", &ColumnClass::Bytea, None),
            (
                "18262",
                &ColumnClass::Date,
                Some("(DATE '1970-01-01' + INTERVAL 18262 DAY)"),
            ),
            (
                "-1",
                &ColumnClass::Date,
                Some("(DATE '1970-01-01' + INTERVAL -1 DAY)"),
            ),
            ("18262 DAY) OR (1", &ColumnClass::Date, None),
            (
                "1577836800123456",
                &micros,
                Some("(TIMESTAMP '1970-01-01 00:00:00' + INTERVAL 1577836800123456 MICROSECOND)"),
            ),
            ("1e15", &micros, None),
            (
                "5",
                &ColumnClass::Timestamptz,
                Some("(TIMESTAMP '1970-01-01 00:00:00' + INTERVAL 5 MICROSECOND)"),
            ),
            ("true", &ColumnClass::Bool, Some("b'1'")),
            ("false", &ColumnClass::Bool, Some("b'0'")),
            ("1", &ColumnClass::Bool, None),
            ("99999999999999999999999", &ColumnClass::Date, None),
        ];
        let mut literals = Vec::new();
        for (text, class, want) in cases {
            let got = key_literal(text, class);
            assert_eq!(got.as_deref(), want, "{text:?} as {class:?}");
            literals.extend(got);
        }
        // Every literal keeps the filter one condition of values.
        let filter = format!("(`k`) IN (({}))", literals.join("), ("));
        assert_eq!(
            check_condition(SqlDialect::Mysql, &filter),
            Ok(()),
            "{filter}"
        );
    }
}
