//! `sluice verify`: compares the source tables with the newest record per key in their topics,
//! while the pipeline keeps running (docs/verify.md).
//!
//! 1. [`source::SourceSnapshot`]: a snapshot of the source whose position is known (a
//!    temporary slot's consistent point).
//! 2. Per table, PostgreSQL computes every row's bucket and hash ([`canonical`]); sluice sums
//!    them per bucket, at a bounded rate.
//! 3. Once the pipeline's slot confirmed the position, [`topic::TopicView`] reads the topic and
//!    keeps each key's newest record before the position; the same sums per bucket. Avro
//!    records are read as the JSON the same events have ([`avro`]).
//! 4. Differing buckets are narrowed: their rows and records are compared key by key, and the
//!    differing keys listed with both sides' values.
//! 5. `--repair` asks the pipeline (its signal table) for an incremental snapshot of exactly
//!    those keys.

pub mod avro;
pub mod canonical;
pub mod report;
pub mod source;
pub mod topic;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::BaseConsumer;
use serde_json::Value;

use self::avro::AvroTopics;
use self::canonical::{Piece, digest, push_piece, row_hash};
use self::report::{Difference, DifferenceKind, Report, TableReport, TableStatus};
use self::source::{Buckets, SourceRow, SourceSnapshot, TablePlan};
use self::topic::{KeyState, PassFilter, TopicView, read_topic};
use crate::error::PipelineError;
use crate::pipeline_file::PipelineFile;
use crate::source::postgres::config::PgPipelineConfig;

/// Default rows a second read from the source.
pub const DEFAULT_RATE: u64 = 100_000;

/// `sluice verify`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// The pipeline file (TOML) of a PostgreSQL → Kafka pipeline.
    pub pipeline: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Verify only this table (`schema.table`; repeatable). Default: every captured table.
    #[arg(long = "table", value_name = "SCHEMA.TABLE")]
    pub tables: Vec<String>,
    /// Rows read from the source per second, at most (0: unbounded).
    #[arg(long, default_value_t = DEFAULT_RATE, value_name = "ROWS")]
    pub rate_limit: u64,
    /// Memory for the topic's keys, in MiB (about 64 bytes a key); a bigger table is read in
    /// several passes over its topic.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub memory_mb: u64,
    /// Rows of differing buckets compared key by key, at most (their rows and records are held
    /// in memory).
    #[arg(long, default_value_t = 200_000, value_name = "ROWS")]
    pub narrow_rows: u64,
    /// Differing keys listed per table, at most.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub max_keys: usize,
    /// How long to wait for the pipeline to confirm the verification's position, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub wait_timeout: u64,
    /// Request an incremental snapshot of the differing keys (through the pipeline's
    /// `source.postgres.signal_table`), so that the topic converges.
    #[arg(long)]
    pub repair: bool,
}

/// Runs `sluice verify`: prints the report; exit code 0 equal, 1 differences, 2 could not
/// verify.
///
/// # Errors
///
/// Only for broken output: failures to verify are reported (exit code 2).
pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let outcome = match PipelineFile::load(&args.pipeline) {
        Ok(PipelineFile::Postgres(config)) => verify_postgres(&config, &args).await,
        Ok(_) => Err(anyhow::anyhow!(
            "{}: `sluice verify` verifies PostgreSQL → Kafka pipelines (MySQL/MariaDB and sinks: not yet)",
            args.pipeline.display()
        )),
        Err(error) => Err(error.into()),
    };
    match outcome {
        Ok(mut report) => {
            report.elapsed_ms = started.elapsed().as_millis() as u64;
            report.settle();
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report::render(&report));
            }
            Ok(ExitCode::from(report.exit_code()))
        }
        Err(error) => {
            let message = format!("{error:#}");
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "status": "error",
                        "error": message,
                    }))?
                );
            } else {
                println!("could not verify: {message}");
            }
            Ok(ExitCode::from(2))
        }
    }
}

/// A [`PipelineError`] with its fix, as the command's error.
fn explained(error: PipelineError) -> anyhow::Error {
    match error.hint() {
        Some(hint) => anyhow::anyhow!("{} (fix: {hint})", error.chain()),
        None => anyhow::anyhow!("{}", error.chain()),
    }
}

/// What the pipeline's configuration lets verify compare; `Err` names what does not.
fn check_supported(config: &PgPipelineConfig) -> anyhow::Result<()> {
    let events = &config.kafka.events;
    if !config.transforms.is_empty() {
        anyhow::bail!(
            "the pipeline has [transforms]: verify compares Debezium's envelopes in the default topics, not transformed records"
        );
    }
    let skipped = events.skipped_operations;
    if skipped.create || skipped.update || skipped.delete {
        anyhow::bail!(
            "kafka.events.skipped_operations leaves out inserts, updates or deletes: the topics cannot hold what the tables hold"
        );
    }
    if config.source.outbox.is_some() {
        tracing::info!("outbox tables are not verified (their topics are per aggregate)");
    }
    Ok(())
}

async fn verify_postgres(config: &PgPipelineConfig, args: &VerifyArgs) -> anyhow::Result<Report> {
    check_supported(config)?;
    let events = &config.kafka.events;
    let avro = AvroTopics::new(events, config.schema_registry.as_ref())?;
    let snapshot = SourceSnapshot::open(config).await.map_err(explained)?;
    let position = snapshot.position;
    let mut captured = snapshot.tables(config).await.map_err(explained)?;
    // The outbox table's topics are per aggregate; the signal table's rows are signals.
    captured.retain(|t| {
        let name = t.qualified();
        config
            .source
            .outbox
            .as_ref()
            .is_none_or(|o| o.table != name)
            && config.source.signal_table.as_ref() != Some(&name)
    });
    if !args.tables.is_empty() {
        for wanted in &args.tables {
            if !captured.iter().any(|t| &t.qualified() == wanted) {
                anyhow::bail!(
                    "--table {wanted}: not a table this pipeline captures (see `sluice check`)"
                );
            }
        }
        captured.retain(|t| args.tables.contains(&t.qualified()));
    }
    let mut report = Report::new(position.to_string());
    let mut plans: Vec<(TablePlan, Buckets)> = Vec::new();
    let source_started = Instant::now();
    let mut source_rows = 0u64;
    for table in &captured {
        match snapshot.plan(config, table).await.map_err(explained)? {
            Ok(plan) => {
                let buckets = snapshot
                    .checksums(&plan, events, args.rate_limit)
                    .await
                    .map_err(explained)?;
                source_rows += buckets.iter().map(|b| b.0).sum::<u64>();
                plans.push((plan, buckets));
            }
            Err(reason) => report.tables.push(TableReport::not_verified(
                table.qualified(),
                format!("{}.{}", config.kafka.topic_prefix, table.qualified()),
                reason,
            )),
        }
    }
    report.source_rows = source_rows;
    report.source_ms = source_started.elapsed().as_millis() as u64;
    wait_for_pipeline(&snapshot, config, position, args.wait_timeout).await?;
    let consumer = consumer(config)?;
    let topic_started = Instant::now();
    for (plan, source_buckets) in &plans {
        let table = verify_table(
            &snapshot,
            &consumer,
            config,
            args,
            plan,
            source_buckets,
            avro.as_ref(),
        )
        .await;
        report.tables.push(match table {
            Ok(table) => table,
            Err(error) => TableReport::not_verified(
                plan.qualified.clone(),
                plan.topic.clone(),
                format!("{error:#}"),
            ),
        });
    }
    report.topic_ms = topic_started.elapsed().as_millis() as u64;
    report.tables.sort_by(|a, b| a.table.cmp(&b.table));
    drop(snapshot);
    if args.repair {
        report.repair = Some(repair(config, &report).await?);
    }
    Ok(report)
}

/// Waits until the pipeline's slot confirmed `position`: every change before it is then in
/// the topics.
async fn wait_for_pipeline(
    snapshot: &SourceSnapshot,
    config: &PgPipelineConfig,
    position: sluice_engine::Lsn,
    timeout: u64,
) -> anyhow::Result<()> {
    let slot = config.slot_name();
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        match snapshot.slot_confirmed(&slot).await.map_err(explained)? {
            None => anyhow::bail!(
                "the pipeline's replication slot {slot:?} does not exist: has the pipeline run?"
            ),
            Some(confirmed) if confirmed >= position => return Ok(()),
            Some(confirmed) if Instant::now() >= deadline => anyhow::bail!(
                "the pipeline did not confirm the verification's position {position} within {timeout} s (slot {slot:?} is at {confirmed}): is it running? (--wait-timeout)"
            ),
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn consumer(config: &PgPipelineConfig) -> anyhow::Result<BaseConsumer> {
    let mut client = crate::kafka::client_config(&config.kafka.brokers, &config.kafka.client);
    client
        .set(
            "group.id",
            format!("sluice-verify-{}-{}", config.name, std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest");
    for (key, value) in crate::compaction::scan::LEAN_PREFETCH {
        client.set(*key, *value);
    }
    client
        .create()
        .context("cannot create the Kafka consumer (kafka.brokers, [kafka.client])")
}

async fn verify_table(
    snapshot: &SourceSnapshot,
    consumer: &BaseConsumer,
    config: &PgPipelineConfig,
    args: &VerifyArgs,
    plan: &TablePlan,
    source: &Buckets,
    avro: Option<&AvroTopics>,
) -> anyhow::Result<TableReport> {
    let events = &config.kafka.events;
    let position = snapshot.position.0;
    let source_rows: u64 = source.iter().map(|b| b.0).sum();
    let keys_per_pass = (args.memory_mb.max(1) << 20) / 64;
    let passes = source_rows.div_ceil(keys_per_pass).max(1);
    let buckets = u64::from(plan.buckets);
    let mut topic: Buckets = vec![(0, 0); plan.buckets as usize];
    let mut partial = vec![false; plan.buckets as usize];
    let mut table = TableReport::new(plan);
    table.source_rows = source_rows;
    for pass in 0..passes {
        let lo = (pass * buckets / passes) as u32;
        let hi = ((pass + 1) * buckets / passes) as u32;
        let mut view =
            TopicView::new(plan, events, position, PassFilter::Range(lo, hi)).with_avro(avro);
        match tokio::task::block_in_place(|| read_topic(consumer, &plan.topic, |r| view.apply(r))) {
            // An empty table whose topic was never written: equal.
            Err(error) if source_rows == 0 && error.is::<topic::MissingTopic>() => {}
            other => other?,
        }
        for state in view.keys.values() {
            let b = state.bucket as usize;
            topic[b].0 += 1;
            topic[b].1 += i128::from(state.hash);
            partial[b] |= state.partial;
            table.partial_keys += u64::from(state.partial);
        }
        table.read.add(&view.stats);
    }
    table.passes = passes;
    table.topic_keys = topic.iter().map(|b| b.0).sum();
    if table.read.unreadable > 0 {
        anyhow::bail!(
            "{} records of {} could not be read ({})",
            table.read.unreadable,
            plan.topic,
            table.read.first_problem.clone().unwrap_or_default()
        );
    }
    let settled = |b: u32| !partial[b as usize];
    let counts_equal = |b: u32| source[b as usize].0 == topic[b as usize].0;
    let mut differing: Vec<u32> = (0..plan.buckets)
        .filter(|&b| source[b as usize] != topic[b as usize] || partial[b as usize])
        .collect();
    // A bucket holding a key whose newest event lacks values (unchanged TOASTed columns) has a
    // checksum that cannot match: it is settled key by key. Buckets whose checksum differs with
    // complete events (a certain difference) are narrowed first.
    differing.sort_by_key(|&b| (!settled(b) && counts_equal(b), b));
    let mut narrowed = Vec::new();
    let mut held = 0u64;
    for &b in &differing {
        let rows = source[b as usize].0 + topic[b as usize].0;
        if !narrowed.is_empty() && held + rows > args.narrow_rows {
            break;
        }
        held += rows;
        narrowed.push(b);
    }
    narrowed.sort_unstable();
    table.buckets_narrowed = narrowed.len() as u64;
    if !narrowed.is_empty() {
        let rows = snapshot
            .rows(plan, events, &narrowed, args.rate_limit)
            .await
            .map_err(explained)?;
        let mut view = TopicView::new(plan, events, position, PassFilter::Detail(narrowed.clone()))
            .with_avro(avro);
        tokio::task::block_in_place(|| read_topic(consumer, &plan.topic, |r| view.apply(r)))?;
        compare_keys(plan, rows, view.keys, &mut table, args.max_keys);
    }
    let found: std::collections::BTreeSet<u32> =
        table.differing_bucket_ids.iter().copied().collect();
    let (mut differs, mut unsettled) = (0u64, 0u64);
    for &b in &differing {
        if narrowed.binary_search(&b).is_ok() {
            // Compared key by key: exact.
            differs += u64::from(found.contains(&b));
        } else if settled(b) || !counts_equal(b) {
            differs += 1;
        } else {
            unsettled += 1;
        }
    }
    table.buckets_differing = differs;
    table.status = if differs > 0 {
        TableStatus::Differs
    } else if unsettled > 0 {
        table.reason = Some(format!(
            "{unsettled} bucket(s) hold updates whose events lack unchanged TOASTed values and did not fit in --narrow-rows ({}): raise it, or set source.postgres.unchanged_toast = \"reread\"",
            args.narrow_rows
        ));
        TableStatus::NotVerified
    } else {
        TableStatus::Equal
    };
    Ok(table)
}

/// Compares the source rows and topic keys of the narrowed buckets key by key.
fn compare_keys(
    plan: &TablePlan,
    rows: Vec<SourceRow>,
    mut topic: HashMap<u128, KeyState>,
    table: &mut TableReport,
    max_keys: usize,
) {
    let found = |table: &mut TableReport, difference: Difference, bucket: u32| {
        table.differences_found += 1;
        if !table.differing_bucket_ids.contains(&bucket) {
            table.differing_bucket_ids.push(bucket);
        }
        if table.differences.len() < max_keys {
            table.differences.push(difference.clone());
        }
        table.repairable.push(difference);
    };
    for row in rows {
        let mut key_form = Vec::new();
        for text in &row.key {
            push_piece(
                &mut key_form,
                &text.as_deref().map_or(Piece::Null, Piece::Value),
            );
        }
        let id = u128::from_be_bytes(digest(&key_form));
        let source_json = compared_json(plan, &row.json);
        let key_json = Value::Object(
            plan.key
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        row.json.get(&c.name).cloned().unwrap_or_default(),
                    )
                })
                .collect(),
        );
        let Some(state) = topic.remove(&id) else {
            found(
                table,
                Difference {
                    kind: DifferenceKind::MissingInTopic,
                    key: key_json,
                    key_text: row.key_text.clone(),
                    source: Some(source_json),
                    topic: None,
                    columns: Vec::new(),
                },
                row.bucket,
            );
            continue;
        };
        let detail = state.detail.as_deref();
        let mut form = Vec::new();
        let mut columns = Vec::new();
        for (i, (column, value)) in plan.columns.iter().zip(&row.values).enumerate() {
            let carried = detail.and_then(|d| d.values.get(i));
            match carried {
                Some(None) => push_piece(&mut form, &Piece::Unavailable),
                _ => push_piece(
                    &mut form,
                    &value.as_deref().map_or(Piece::Null, Piece::Value),
                ),
            }
            if let Some(Some(topic_value)) = carried
                && topic_value != value
            {
                columns.push(column.name.clone());
            }
        }
        if row_hash(&form) != state.hash {
            found(
                table,
                Difference {
                    kind: DifferenceKind::Differs,
                    key: key_json,
                    key_text: row.key_text.clone(),
                    source: Some(source_json),
                    topic: detail.map(|d| d.after.clone()),
                    columns,
                },
                row.bucket,
            );
        }
    }
    let mut extra: Vec<KeyState> = topic.into_values().collect();
    extra.sort_by_key(|s| s.bucket);
    for state in extra {
        let detail = state.detail.as_deref();
        found(
            table,
            Difference {
                kind: DifferenceKind::MissingInSource,
                key: detail.map(|d| d.key.clone()).unwrap_or_default(),
                key_text: Vec::new(),
                source: None,
                topic: detail.map(|d| d.after.clone()),
                columns: Vec::new(),
            },
            state.bucket,
        );
    }
}

/// The compared columns of a `to_jsonb` row.
fn compared_json(plan: &TablePlan, row: &Value) -> Value {
    Value::Object(
        plan.columns
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    row.get(&c.name).cloned().unwrap_or_default(),
                )
            })
            .collect(),
    )
}

/// Keys per signal (a filter of `(key) IN (…)` values).
const KEYS_PER_SIGNAL: usize = 500;

/// Inserts signals for incremental snapshots of the differing keys present in the source.
async fn repair(config: &PgPipelineConfig, report: &Report) -> anyhow::Result<report::Repair> {
    use crate::sql::{quote_ident, quote_pg_literal};
    let mut repair = report::Repair::default();
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
    let catalog = crate::source::postgres::setup::PgCatalog::connect(config)
        .await
        .map_err(explained)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    for table in wanted {
        let keys: Vec<&Vec<Option<String>>> = table
            .repairable
            .iter()
            .filter(|d| d.kind != DifferenceKind::MissingInSource)
            .map(|d| &d.key_text)
            .collect();
        let extra = table
            .repairable
            .iter()
            .filter(|d| d.kind == DifferenceKind::MissingInSource)
            .count();
        if extra > 0 {
            repair.hints.push(format!(
                "{}: {extra} key(s) are in the topic but not in the table: an incremental snapshot cannot delete them; request a republication (POST /api/v1/pipelines/{}/snapshots with {{\"tables\": [\"{}\"], \"tombstones\": true}})",
                table.table, config.name, table.table
            ));
        }
        let columns: Vec<String> = table.key_columns.iter().map(|c| quote_ident(c)).collect();
        for (n, chunk) in keys.chunks(KEYS_PER_SIGNAL).enumerate() {
            let tuples: Vec<String> = chunk
                .iter()
                .map(|key| {
                    let values: Vec<String> = key
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
    }
    Ok(repair)
}
