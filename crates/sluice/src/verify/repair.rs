//! `--repair`: incremental snapshots of the differing keys, requested through a PostgreSQL →
//! Kafka pipeline's signal table, for its own verification ([`request_postgres`]) or for a
//! Kafka → PostgreSQL sink's ([`from_sink`]).
//!
//! A sink's differing keys are mapped back to the source pipeline that writes the sink's
//! topics: the topic `<topic_prefix>.<schema>.<table>` names the captured table, the record
//! key's fields its primary-key columns. Each key is looked up in that table (by its typed
//! value, inside the pipeline's row filter); the keys found are requested with the table's own
//! text of them, and the running source pipeline publishes their rows as `op: "r"` records in
//! order with its stream (the watermarks of its incremental snapshot), which the sink applies
//! as it applies every record. Nothing is written into the sink's tables from outside the
//! sink, so the repair cannot race with it.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;
use tokio_postgres::Client;

use super::canonical::ColumnClass;
use super::compare::explained;
use super::report::{Difference, DifferenceKind, Repair, Report, Requested, TableReport};
use super::source::{self, TablePlan};
use crate::event::{DecimalHandlingMode, EventOptions};
use crate::pipeline_file::PipelineFile;
use crate::source::postgres::config::PgPipelineConfig;
use crate::source::postgres::setup::PgCatalog;
use crate::sql::{quote_ident, quote_pg_literal};

/// Keys per signal (a filter of `(key) IN (…)` values).
const KEYS_PER_SIGNAL: usize = 500;

/// Key lookups in flight on the source connection at once (pipelined by the client).
const LOOKUPS_IN_FLIGHT: usize = 32;

/// Inserts signals into the pipeline's signal table for incremental snapshots of the
/// differing keys of `report` present in the source (their `key_text`: the source's text of
/// each key column, in `key_columns` order); lists the first `max_keys` keys of each table.
///
/// # Errors
///
/// No signal table, or the signals cannot be inserted.
pub async fn request_postgres(
    config: &PgPipelineConfig,
    report: &Report,
    max_keys: usize,
) -> anyhow::Result<Repair> {
    let mut repair = Repair::default();
    let wanted: Vec<&TableReport> = report
        .tables
        .iter()
        .filter(|t| !t.repairable.is_empty())
        .collect();
    if wanted.is_empty() {
        return Ok(repair);
    }
    let Some(signal_table) = &config.source.signal_table else {
        anyhow::bail!(
            "--repair needs source.postgres.signal_table (the pipeline's signal table, e.g. \"public.sluice_signal\")"
        );
    };
    let (schema, name) = crate::config::parse_table_name(signal_table)
        .context("source.postgres.signal_table is not schema.table")?;
    let signal = format!("{}.{}", quote_ident(schema), quote_ident(name));
    let catalog = PgCatalog::connect(config).await.map_err(explained)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    for table in wanted {
        let keys: Vec<&Difference> = table
            .repairable
            .iter()
            .filter(|d| d.kind != DifferenceKind::MissingInSource)
            .collect();
        let extra = table.repairable.len() - keys.len();
        if extra > 0 {
            repair.hints.push(format!(
                "{}: {extra} key(s) are in the topic but not in the table: an incremental snapshot cannot delete them; request a republication (POST /api/v1/pipelines/{}/snapshots with {{\"tables\": [\"{}\"], \"tombstones\": true}})",
                table.table, config.name, table.table
            ));
        }
        if keys.is_empty() {
            continue;
        }
        let columns: Vec<String> = table.key_columns.iter().map(|c| quote_ident(c)).collect();
        for (n, chunk) in keys.chunks(KEYS_PER_SIGNAL).enumerate() {
            let tuples: Vec<String> = chunk
                .iter()
                .map(|d| {
                    let values: Vec<String> = d
                        .key_text
                        .iter()
                        .map(|v| v.as_deref().map_or("NULL".to_owned(), quote_pg_literal))
                        .collect();
                    format!("({})", values.join(", "))
                })
                .collect();
            let filter = format!("({}) IN ({})", columns.join(", "), tuples.join(", "));
            let id = format!("verify-{stamp}-{}-{n}", table.table);
            let data = serde_json::json!({
                "data-collections": [table.table],
                "type": "incremental",
                "additional-conditions": [{"data-collection": table.table, "filter": filter}],
            });
            catalog
                .client()
                .execute(
                    &format!(
                        "INSERT INTO {signal} (id, type, data) VALUES ($1, 'execute-snapshot', $2)"
                    ),
                    &[&id, &data.to_string()],
                )
                .await
                .with_context(|| format!("cannot insert the repair signal into {signal_table}"))?;
            repair.signals.push(id);
            repair.keys += chunk.len() as u64;
        }
        repair.requested.push(Requested {
            table: table.table.clone(),
            source_table: None,
            keys: keys.len() as u64,
            listed: keys.iter().take(max_keys).map(|d| d.key.clone()).collect(),
        });
    }
    Ok(repair)
}

/// `--repair --source-pipeline FILE` of a Kafka → PostgreSQL sink: maps each differing key of
/// `report` (the sink's verification) to the table and primary key of the PostgreSQL → Kafka
/// pipeline of `source_file` that writes its topic, and requests an incremental snapshot of
/// the keys that table holds through that pipeline's signal table ([`request_postgres`]).
/// What cannot be mapped is left out, with the reason in the hints.
///
/// # Errors
///
/// The file is not a PostgreSQL → Kafka pipeline whose topics verify can read, its database
/// cannot be reached, or the signals cannot be inserted.
pub async fn from_sink(
    report: &Report,
    source_file: &Path,
    max_keys: usize,
    sink: SinkKind,
) -> anyhow::Result<Repair> {
    let shown = source_file.display();
    let config = match PipelineFile::load(source_file)
        .with_context(|| format!("--source-pipeline {shown}"))?
    {
        PipelineFile::Postgres(config) => config,
        PipelineFile::Mysql(_) => anyhow::bail!(
            "--source-pipeline {shown}: a MySQL/MariaDB → Kafka pipeline; a sink's repair requests the snapshots through a PostgreSQL → Kafka pipeline's signal table only (for now): insert an execute-snapshot signal for the keys the report lists into its source.mysql.signal_table by hand"
        ),
        PipelineFile::Files(_) => anyhow::bail!(
            "--source-pipeline {shown}: a Kafka → sink pipeline; expected the PostgreSQL → Kafka pipeline that writes the sink's topics"
        ),
    };
    // Transforms would name other topics and reshape the keys.
    source::check_supported(&config).with_context(|| format!("--source-pipeline {shown}"))?;
    let mut repair = Repair {
        source_pipeline: Some(config.name.clone()),
        ..Repair::default()
    };
    let wanted: Vec<&TableReport> = report
        .tables
        .iter()
        .filter(|t| !t.repairable.is_empty())
        .collect();
    if wanted.is_empty() {
        return Ok(repair);
    }
    let catalog = PgCatalog::connect(&config).await.map_err(explained)?;
    let mut captured = catalog.captured_tables(&config).await.map_err(explained)?;
    // The signal table's rows are signals; the outbox table's topics are per aggregate.
    captured.retain(|t| {
        let name = t.qualified();
        config.source.signal_table.as_ref() != Some(&name)
            && config
                .source
                .outbox
                .as_ref()
                .is_none_or(|o| o.table != name)
    });
    let mut requests = Report::new(String::new());
    // Source table → the sink's table it feeds.
    let mut sink_table: HashMap<String, String> = HashMap::new();
    for table in wanted {
        let topic_of = |qualified: String| format!("{}.{qualified}", config.kafka.topic_prefix);
        let Some(source_table) = captured
            .iter()
            .find(|c| topic_of(c.qualified()) == table.topic)
        else {
            repair.hints.push(format!(
                "{}: not requested: its topic {} is not the topic of a table the pipeline {:?} captures (<topic_prefix>.<schema>.<table>, kafka.topic_prefix = {:?})",
                table.table, table.topic, config.name, config.kafka.topic_prefix
            ));
            continue;
        };
        let plan = match source::plan_captured(catalog.client(), &config, source_table)
            .await
            .map_err(explained)?
        {
            Ok(plan) => plan,
            Err(reason) => {
                repair.hints.push(format!(
                    "{}: not requested: its source table {}: {reason}",
                    table.table,
                    source_table.qualified()
                ));
                continue;
            }
        };
        let (request, hints) =
            map_keys(catalog.client(), &plan, table, sink, &config.kafka.events).await;
        repair.hints.extend(hints);
        if let Some(request) = request {
            sink_table.insert(request.table.clone(), table.table.clone());
            requests.tables.push(request);
        }
    }
    let requested = request_postgres(&config, &requests, max_keys).await?;
    repair.keys = requested.keys;
    repair.signals = requested.signals;
    repair.hints.extend(requested.hints);
    repair.requested = requested
        .requested
        .into_iter()
        .map(|mut r| {
            let sink = sink_table.get(&r.table).cloned().unwrap_or_default();
            r.source_table = Some(std::mem::replace(&mut r.table, sink));
            r
        })
        .collect();
    Ok(repair)
}

/// The sink a repair is for: what the re-sent rows can restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// Kafka → PostgreSQL: an upsert of the whole row restores a changed or missing row.
    Postgres,
    /// Kafka → Iceberg in upsert mode: the sink replaces only the rows of its own files, so
    /// only missing rows are restored (a row another writer changed would stay beside).
    IcebergUpsert,
}

/// Whether a key column's values in a record key (and in a sink table's JSON of the row) are
/// text its type reads back as the same value. Others (dates, times and timestamps as numbers,
/// bytea as base64, numerics as bytes, intervals, floats, arrays) are not mapped.
fn mappable(class: &ColumnClass, events: &EventOptions) -> bool {
    match class {
        ColumnClass::Int
        | ColumnClass::Text
        | ColumnClass::Enum
        | ColumnClass::Bpchar
        | ColumnClass::Bool
        | ColumnClass::Timestamptz => true,
        // `precise` (the default) writes base64 bytes or `{scale, value}`.
        ColumnClass::Numeric { .. } => events.decimal_handling_mode == DecimalHandlingMode::String,
        _ => false,
    }
}

/// The text of a key field's JSON value, when it is a scalar.
fn key_value_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The sink's differing keys of `table` as keys of the source table `plan`, each looked up
/// there: a report of the keys found (with the source's text of them) for
/// [`request_postgres`], and hints for the rest.
async fn map_keys(
    client: &Client,
    plan: &TablePlan,
    table: &TableReport,
    kind: SinkKind,
    events: &EventOptions,
) -> (Option<TableReport>, Vec<String>) {
    let sink = &table.table;
    let source = &plan.qualified;
    let mut hints = Vec::new();
    let key_names: Vec<&str> = plan.key.iter().map(|c| c.name.as_str()).collect();
    if let Some(column) = plan.key.iter().find(|c| !mappable(&c.class, events)) {
        hints.push(format!(
            "{sink}: not requested: key column {:?} of {source} is of a type whose record values --repair does not map back (integers, character types, uuid, booleans, timestamptz, and numerics with decimal_handling_mode = \"string\" are): request an incremental snapshot of the listed keys through the source pipeline's signal table by hand",
            column.name
        ));
        return (None, hints);
    }
    let sink_key: BTreeSet<&str> = table.key_columns.iter().map(String::as_str).collect();
    if !table.key_columns.is_empty() && sink_key != key_names.iter().copied().collect() {
        hints.push(format!(
            "{sink}: not requested: its key ({}) is not the primary key of {source} ({})",
            table.key_columns.join(", "),
            key_names.join(", ")
        ));
        return (None, hints);
    }
    let lookup = match lookup_statement(client, plan).await {
        Ok(sql) => sql,
        Err(error) => {
            hints.push(format!(
                "{sink}: not requested: cannot read the key of {source}: {error:#}"
            ));
            return (None, hints);
        }
    };
    let unlisted = table
        .differences_found
        .saturating_sub(table.repairable.len() as u64);
    if unlisted > 0 {
        hints.push(format!(
            "{sink}: {unlisted} more differing key(s) were not listed (--max-keys): not requested; raise --max-keys, or repair again"
        ));
    }
    let mut other = 0u64;
    let mut foreign = 0u64;
    let mut unmapped = 0u64;
    let mut keys: Vec<(&Difference, Vec<String>)> = Vec::new();
    for difference in &table.repairable {
        if !matches!(
            difference.kind,
            DifferenceKind::Differs
                | DifferenceKind::MissingInTable
                | DifferenceKind::MissingInTopic
        ) {
            other += 1;
            continue;
        }
        if kind == SinkKind::IcebergUpsert && difference.kind != DifferenceKind::MissingInTable {
            foreign += 1;
            continue;
        }
        let values: Option<Vec<String>> = difference.key.as_object().and_then(|fields| {
            (fields.len() == key_names.len())
                .then(|| {
                    key_names
                        .iter()
                        .map(|name| fields.get(*name).and_then(key_value_text))
                        .collect()
                })
                .flatten()
        });
        match values {
            Some(values) => keys.push((difference, values)),
            None => unmapped += 1,
        }
    }
    if other > 0 {
        hints.push(format!(
            "{sink}: {other} difference(s) that are not a key's row (a key in several rows): not requested; a snapshot cannot remove a row"
        ));
    }
    if foreign > 0 {
        hints.push(format!(
            "{sink}: {foreign} key(s) whose row differs from the topic's, or that the topic does not hold live: not requested: an upsert table's sink replaces only the rows of its own files (its key index), so a row another writer put there would stay beside the one sent again; delete those rows with an Iceberg engine (Spark, pyiceberg), then repair again (they are then missing in the table)"
        ));
    }
    if unmapped > 0 {
        hints.push(format!(
            "{sink}: {unmapped} key(s) whose fields are not the columns of {source}'s primary key ({}): not requested",
            key_names.join(", ")
        ));
    }
    let found = lookup_all(client, &lookup, &keys).await;
    let found = match found {
        Ok(found) => found,
        Err(error) => {
            hints.push(format!(
                "{sink}: not requested: its keys cannot be read as the key of {source} ({}): request an incremental snapshot of the listed keys through the source pipeline's signal table by hand",
                explained_pg(&error)
            ));
            return (None, hints);
        }
    };
    let mut request = TableReport::not_verified(source.clone(), plan.topic.clone(), String::new());
    request.key_columns = key_names.iter().map(|&n| n.to_owned()).collect();
    let (mut gone_from_table, mut gone_live) = (0u64, 0u64);
    for ((difference, _), source_key) in keys.iter().zip(found) {
        match source_key {
            Some(key_text) => request.repairable.push(Difference {
                kind: DifferenceKind::Differs,
                key_text,
                ..(*difference).clone()
            }),
            None if difference.kind == DifferenceKind::MissingInTopic => gone_from_table += 1,
            None => gone_live += 1,
        }
    }
    if gone_from_table > 0 {
        hints.push(format!(
            "{sink}: {gone_from_table} key(s) in the table but not live in the topic are not in {source} either: a snapshot cannot delete them; delete those rows (listed as missing in the topic) from {sink} by hand, as the sink writes such a key again only when the source inserts it"
        ));
    }
    if gone_live > 0 {
        hints.push(format!(
            "{sink}: {gone_live} key(s) live in the topic are not in {source} (deleted there since, or the topic lacks their deletes): not requested; `sluice verify --repair` on the source pipeline's file finds the latter"
        ));
    }
    ((!request.repairable.is_empty()).then_some(request), hints)
}

/// Looks every key of `keys` up with the query `lookup` ([`lookup_statement`]), a few at once:
/// per key, the source's text of it, or `None` when the table does not hold it.
async fn lookup_all(
    client: &Client,
    lookup: &str,
    keys: &[(&Difference, Vec<String>)],
) -> Result<Vec<Option<Vec<Option<String>>>>, tokio_postgres::Error> {
    let statement = client.prepare(lookup).await?;
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(LOOKUPS_IN_FLIGHT) {
        let mut pending = Vec::with_capacity(chunk.len());
        for (_, values) in chunk {
            pending.push(lookup_one(client, &statement, values));
        }
        for row in futures::future::join_all(pending).await {
            found.push(row?);
        }
    }
    Ok(found)
}

/// One key's lookup (see [`lookup_all`]).
async fn lookup_one(
    client: &Client,
    statement: &tokio_postgres::Statement,
    values: &[String],
) -> Result<Option<Vec<Option<String>>>, tokio_postgres::Error> {
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
        .iter()
        .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let row = client.query_opt(statement, &params).await?;
    Ok(row.map(|row| (0..row.len()).map(|i| row.get(i)).collect()))
}

/// The query that looks a key up in the source table by its key columns' text values
/// (`$1`, `$2`, … read as the columns' types), inside the pipeline's row filter: the source's
/// text of the key, or no row.
async fn lookup_statement(client: &Client, plan: &TablePlan) -> anyhow::Result<String> {
    let names: Vec<String> = plan.key.iter().map(|c| c.name.clone()).collect();
    let types: HashMap<String, String> = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = $1::text::regclass AND a.attname = ANY($2) AND NOT a.attisdropped",
            &[&plan_quoted(plan), &names],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut select = Vec::new();
    let mut conditions = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let column = quote_ident(name);
        let Some(ty) = types.get(name) else {
            anyhow::bail!("no column {name:?}");
        };
        select.push(format!("{column}::text"));
        conditions.push(format!("{column} = ${}::text::{ty}", n + 1));
    }
    Ok(format!(
        "SELECT {} FROM {}{} LIMIT 1",
        select.join(", "),
        plan.from,
        plan.where_clause(Some(&conditions.join(" AND ")))
    ))
}

/// The table quoted for SQL (its `FROM` target without `ONLY`).
fn plan_quoted(plan: &TablePlan) -> String {
    plan.from
        .strip_prefix("ONLY ")
        .unwrap_or(&plan.from)
        .to_owned()
}

/// A PostgreSQL error's message (the server's, when it sent one).
fn explained_pg(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_whose_record_values_are_their_text_are_mapped() {
        let default = EventOptions::default();
        let string = EventOptions {
            decimal_handling_mode: DecimalHandlingMode::String,
            ..EventOptions::default()
        };
        assert!(mappable(&ColumnClass::Int, &default));
        assert!(mappable(&ColumnClass::Text, &default));
        assert!(mappable(&ColumnClass::Timestamptz, &default));
        // Base64 bytes under `precise`, the default.
        let numeric = ColumnClass::Numeric { scale: Some(2) };
        assert!(!mappable(&numeric, &default));
        assert!(mappable(&numeric, &string));
        assert!(!mappable(&ColumnClass::Date, &default));
        assert!(!mappable(&ColumnClass::Bytea, &default));
        assert_eq!(
            key_value_text(&serde_json::json!("a'b")).as_deref(),
            Some("a'b")
        );
        assert_eq!(key_value_text(&serde_json::json!(7)).as_deref(), Some("7"));
        assert_eq!(key_value_text(&serde_json::json!({"a": 1})), None);
        assert_eq!(key_value_text(&Value::Null), None);
    }
}
