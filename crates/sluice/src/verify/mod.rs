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
//!
//! Steps 2 to 4 are [`compare`]'s, the same for every kind of pipeline. A MySQL/MariaDB source
//! ([`mysql`]) is read under a consistent snapshot whose binlog position is known, its
//! checksums computed by MySQL, and its topics up to the records of that position. A Kafka →
//! PostgreSQL sink ([`sink`]) is compared the same way, its target tables in the place of the
//! source's, read under one snapshot with the sink's progress table: its topics are read up to
//! the offsets the sink has applied. A Kafka → files sink ([`files`]) is compared offset by
//! offset with its topics, up to its committed states; a Kafka → Iceberg sink ([`iceberg`])
//! table by table, up to the offsets its snapshot records.

pub mod avro;
pub mod canonical;
pub mod compare;
pub mod files;
pub mod iceberg;
pub mod mysql;
pub mod repair;
pub mod report;
pub mod sink;
pub mod source;
pub mod topic;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use self::avro::AvroTopics;
use self::compare::{Limits, Side, explained, verify_table};
use self::report::{Report, TableReport};
use self::source::{Buckets, SourceSnapshot, TablePlan};
use self::topic::Cutoff;
use crate::pipeline_file::PipelineFile;
use crate::sink::config::SinkConfig;
use crate::sink::iceberg::config::IcebergMode;
use crate::source::postgres::config::PgPipelineConfig;
use crate::source::postgres::slot_state::SlotRecord;

/// Default rows a second read from the source.
pub const DEFAULT_RATE: u64 = 100_000;

/// `sluice verify`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// The pipeline file (TOML) of a PostgreSQL → Kafka, MySQL/MariaDB → Kafka, Kafka →
    /// PostgreSQL, Kafka → files or Kafka → Iceberg pipeline.
    pub pipeline: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Verify only this table (`schema.table`; repeatable). Default: every captured table
    /// (a sink: every target table).
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
    /// `source.postgres.signal_table` or `source.mysql.signal_table`), so that the topic
    /// converges. For a Kafka → PostgreSQL pipeline (or the missing rows of a Kafka → Iceberg
    /// upsert table), through the source pipeline of `--source-pipeline`: the sink then applies
    /// the rows read again.
    #[arg(long)]
    pub repair: bool,
    /// With `--repair` on a Kafka → PostgreSQL or Kafka → Iceberg (upsert) pipeline: the
    /// pipeline file of the PostgreSQL → Kafka pipeline that writes the sink's topics. The differing keys are mapped to its
    /// tables and primary keys, and their incremental snapshot is requested through its
    /// `source.postgres.signal_table`.
    #[arg(long, value_name = "FILE", requires = "repair")]
    pub source_pipeline: Option<PathBuf>,
}

impl VerifyArgs {
    /// What the verification may read and hold.
    pub fn limits(&self) -> Limits {
        Limits {
            rate_limit: self.rate_limit,
            memory_mb: self.memory_mb,
            narrow_rows: self.narrow_rows,
            max_keys: self.max_keys,
        }
    }
}

/// Runs `sluice verify`: prints the report; exit code 0 equal, 1 differences, 2 could not
/// verify.
///
/// # Errors
///
/// Only for broken output: failures to verify are reported (exit code 2).
pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let outcome = verify_file(&args).await;
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

/// Verifies the pipeline of `args.pipeline`: the report, before [`Report::settle`].
///
/// # Errors
///
/// It could not verify (a server, the brokers, the pipeline's position, the file).
pub async fn verify_file(args: &VerifyArgs) -> anyhow::Result<Report> {
    let file = PipelineFile::load(&args.pipeline)?;
    if args.source_pipeline.is_some()
        && !matches!(&file, PipelineFile::Files(c) if !matches!(c.sink, SinkConfig::Files(_)))
    {
        anyhow::bail!(
            "--source-pipeline: only for a Kafka → PostgreSQL or Kafka → Iceberg (upsert) pipeline, with --repair; a source pipeline's --repair uses its own signal table"
        );
    }
    match file {
        PipelineFile::Postgres(config) => verify_postgres(&config, args).await,
        PipelineFile::Files(config) => match &config.sink {
            SinkConfig::Postgres(target) => {
                if args.repair && args.source_pipeline.is_none() {
                    anyhow::bail!(
                        "--repair on a Kafka → PostgreSQL pipeline needs --source-pipeline FILE: the pipeline file of the PostgreSQL → Kafka pipeline that writes its topics (the differing keys' incremental snapshot is requested through its signal table, and the sink applies the rows read again); a row written into the target from outside the sink could overwrite a newer one the running sink applies meanwhile"
                    );
                }
                let mut report =
                    sink::verify_sink(&config, target, &args.tables, &args.limits()).await?;
                // The sink applies the re-read rows itself: nothing is written into its tables
                // from outside (docs/verify.md, "Repair of a sink").
                if let Some(source) = args.source_pipeline.as_ref().filter(|_| args.repair) {
                    report.repair = Some(
                        repair::from_sink(
                            &report,
                            source,
                            args.max_keys,
                            repair::SinkKind::Postgres,
                        )
                        .await?,
                    );
                }
                Ok(report)
            }
            SinkConfig::Files(files) if !args.repair => {
                files::verify_files(&config, files, &args.limits()).await
            }
            // A files sink's output is an archive of the topic: a missing or changed record
            // is restored by reading it again, which only the sink (its epochs and states)
            // can do without breaking exactly-once; a snapshot's record is a new offset, not
            // the missing one.
            SinkConfig::Files(_) => Err(anyhow::anyhow!(
                "--repair: not for Kafka → files pipelines: the files are the sink's committed epochs, and a missing offset cannot be re-created (a snapshot's record would be a new one); restore a missing or changed record from the topic (the report lists its partition and offset), or write the output again into a new sink.files.path"
            )),
            SinkConfig::Iceberg(settings) if !args.repair => {
                iceberg::verify_iceberg(&config, settings, &args.tables, &args.limits()).await
            }
            // An upsert table as a PostgreSQL sink: through the source pipeline.
            SinkConfig::Iceberg(settings) if settings.mode == IcebergMode::Upsert => {
                let Some(source) = &args.source_pipeline else {
                    anyhow::bail!(
                        "--repair on a Kafka → Iceberg pipeline needs --source-pipeline FILE: the pipeline file of the PostgreSQL → Kafka pipeline that writes its topics (the differing keys' incremental snapshot is requested through its signal table, and the sink applies the rows read again); rows written into the table from outside the sink would race with its commits"
                    );
                };
                let mut report =
                    iceberg::verify_iceberg(&config, settings, &args.tables, &args.limits())
                        .await?;
                report.repair = Some(
                    repair::from_sink(
                        &report,
                        source,
                        args.max_keys,
                        repair::SinkKind::IcebergUpsert,
                    )
                    .await?,
                );
                Ok(report)
            }
            // An append table is compared offset by offset: a snapshot's record is a new row
            // at a new offset.
            SinkConfig::Iceberg(_) => Err(anyhow::anyhow!(
                "--repair: not for Kafka → Iceberg pipelines in append mode: the table is compared offset by offset, and a missing or changed offset cannot be re-created (a snapshot's record would be a new row at a new offset); restore it from the topic (the report lists its partition and offset)"
            )),
        },
        PipelineFile::Mysql(config) => {
            let mut report =
                mysql::verify_mysql(&config, &args.tables, &args.limits(), args.wait_timeout)
                    .await?;
            if args.repair {
                report.repair = Some(mysql::repair(&config, &report).await?);
            }
            Ok(report)
        }
    }
}

/// Scheduled verification (`verify_interval_s`): verifies the pipeline of `file` every
/// `interval` while it streams, reading at most `rate` source rows a second, and records each
/// outcome in `board` (`/health`'s `verification`) and the `sluice_verify_*` metrics. Runs
/// until dropped.
pub async fn scheduled(
    file: PathBuf,
    interval: Duration,
    rate: u64,
    board: std::sync::Arc<crate::runtime::status::StatusBoard>,
) {
    use crate::runtime::metrics as m;
    use crate::runtime::status::VerificationStatus;
    let args = VerifyArgs {
        pipeline: file,
        json: false,
        tables: Vec::new(),
        rate_limit: rate,
        memory_mb: 512,
        narrow_rows: 200_000,
        max_keys: 20,
        wait_timeout: 120,
        repair: false,
        source_pipeline: None,
    };
    loop {
        tokio::time::sleep(interval).await;
        // Only while the pipeline streams: during its initial snapshot the topics do not hold
        // the rows yet (the slot's consistent point can be after the verification's position),
        // and a slot being created waits for the verification's snapshot.
        if board.state() != crate::runtime::status::PipelineState::Streaming {
            continue;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let status = match verify_file(&args).await {
            Ok(mut report) => {
                report.settle();
                let ranges: u64 = report.tables.iter().map(|t| t.buckets_differing).sum();
                let not_verified: Vec<String> = report
                    .tables
                    .iter()
                    .filter(|t| t.status == report::TableStatus::NotVerified)
                    .map(|t| format!("{}: {}", t.table, t.reason.as_deref().unwrap_or("")))
                    .collect();
                VerificationStatus {
                    status: report.status.to_owned(),
                    finished_unix_ms: now_ms,
                    last_success_unix_ms: (report.status == "equal").then_some(now_ms),
                    rows_compared: report.source_rows,
                    tables_differing: report
                        .tables
                        .iter()
                        .filter(|t| t.status == report::TableStatus::Differs)
                        .count() as u64,
                    ranges_differing: ranges,
                    differences_found: report.tables.iter().map(|t| t.differences_found).sum(),
                    error: (!not_verified.is_empty()).then(|| not_verified.join("; ")),
                }
            }
            Err(error) => VerificationStatus {
                status: "error".into(),
                finished_unix_ms: now_ms,
                error: Some(format!("{error:#}")),
                ..VerificationStatus::default()
            },
        };
        match status.status.as_str() {
            "equal" => tracing::info!(rows = status.rows_compared, "scheduled verification: equal"),
            other => tracing::warn!(
                result = other,
                tables_differing = status.tables_differing,
                differences = status.differences_found,
                error = status.error.as_deref().unwrap_or(""),
                "scheduled verification did not find the topics equal to the tables (run `sluice verify` for the keys)"
            ),
        }
        ::metrics::counter!(m::VERIFY_RUNS, "result" => status.status.clone()).increment(1);
        ::metrics::counter!(m::VERIFY_ROWS_COMPARED).increment(status.rows_compared);
        ::metrics::gauge!(m::VERIFY_RANGES_DIFFERING).set(status.ranges_differing as f64);
        if let Some(ms) = status
            .last_success_unix_ms
            .filter(|_| status.status == "equal")
        {
            ::metrics::gauge!(m::VERIFY_LAST_SUCCESS).set(ms as f64 / 1000.0);
        }
        board.set_verification(status);
    }
}

async fn verify_postgres(config: &PgPipelineConfig, args: &VerifyArgs) -> anyhow::Result<Report> {
    source::check_supported(config)?;
    let events = &config.kafka.events;
    let avro = AvroTopics::new(events, config.schema_registry.as_ref())?;
    let snapshot = SourceSnapshot::open(config).await.map_err(explained)?;
    let position = snapshot.position;
    // Before reading anything: a pipeline still in its initial snapshot is not waited for.
    initial_snapshot_done(config, position).await?;
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
                let buckets = source::checksums(snapshot.client(), &plan, events, args.rate_limit)
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
    // Again: a slot created after the position (its snapshot began meanwhile) confirms it at
    // once, while the snapshot's rows are not in the topics yet.
    initial_snapshot_done(config, position).await?;
    let consumer = compare::consumer(&config.name, &config.kafka.brokers, &config.kafka.client)?;
    let topic_started = Instant::now();
    let cutoff = Cutoff::CommitLsn(position.0);
    let side = Side {
        db: snapshot.client(),
        events,
        cutoff: &cutoff,
        avro: avro.as_ref(),
        sink: false,
    };
    let limits = args.limits();
    for (plan, source_buckets) in &plans {
        let table = verify_table(side, &consumer, &limits, plan, source_buckets).await;
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
        report.repair = Some(repair::request_postgres(config, &report, args.max_keys).await?);
    }
    Ok(report)
}

/// Whether the pipeline's topics can hold the tables as of `position`, by its state (its
/// slot record): not while its initial snapshot (or the snapshot of a recreated slot) is
/// unfinished, whose rows are not all in the topics; nor when its slot was created at or after
/// `position`, as the snapshot's rows then carry that later position and are left out as
/// changes after the verification's. Without a record (the state directory is on the
/// pipeline's machine) nothing can be told, and the comparison goes on.
///
/// # Errors
///
/// "initial snapshot in progress", or the slot newer than the position (verify again), or the
/// state could not be read.
async fn initial_snapshot_done(
    config: &PgPipelineConfig,
    position: sluice_engine::Lsn,
) -> anyhow::Result<()> {
    let (record, location) = source::pipeline_record(config).await.map_err(explained)?;
    let Some(record) = record else {
        tracing::debug!(%location, "no pipeline state: the initial snapshot is taken as done");
        return Ok(());
    };
    match snapshot_problem(&record, position, &config.name, &location) {
        Some(problem) => Err(anyhow::anyhow!(problem)),
        None => Ok(()),
    }
}

/// Why the pipeline whose slot record is `record` cannot be compared at `position` (see
/// [`initial_snapshot_done`]); `None` when it can.
fn snapshot_problem(
    record: &SlotRecord,
    position: sluice_engine::Lsn,
    pipeline: &str,
    location: &str,
) -> Option<String> {
    if record.snapshot_pending {
        return Some(format!(
            "initial snapshot in progress: the pipeline {pipeline:?} has not finished snapshotting its tables (its state {location}), so its topics do not hold them yet; verify again once it streams (/health state \"streaming\")"
        ));
    }
    (record.created_by_sluice && record.first_lsn >= position).then(|| {
        format!(
            "the pipeline's slot {:?} was created at {}, after the verification's position {position}: its initial snapshot's rows are newer than the verification's snapshot; verify again",
            record.slot, record.first_lsn
        )
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::Lsn;

    fn record(first: u64, pending: bool, created: bool) -> SlotRecord {
        SlotRecord {
            first_lsn: Lsn(first),
            confirmed_lsn: Lsn(first),
            snapshot_pending: pending,
            created_by_sluice: created,
            ..SlotRecord::creating("1", "sluice_p")
        }
    }

    #[test]
    fn a_pipeline_snapshotting_or_with_a_newer_slot_cannot_be_compared() {
        let at = Lsn(1000);
        let problem = |r: &SlotRecord| snapshot_problem(r, at, "p", "state");
        let pending = problem(&record(10, true, true)).unwrap();
        assert!(
            pending.starts_with("initial snapshot in progress"),
            "{pending}"
        );
        // Its slot (and so its snapshot's rows) is newer than the verification's position.
        let newer = problem(&record(1000, false, true)).unwrap();
        assert!(
            newer.contains("after the verification's position"),
            "{newer}"
        );
        assert!(problem(&record(2000, false, true)).is_some());
        assert_eq!(problem(&record(999, false, true)), None);
        // An adopted slot (a takeover) has no snapshot of sluice's.
        assert_eq!(problem(&record(2000, false, false)), None);
    }
}
