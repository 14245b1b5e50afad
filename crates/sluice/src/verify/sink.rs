//! `sluice verify` of a Kafka → PostgreSQL sink: each target table against the newest record
//! per key of its topic, among the records the sink has applied.
//!
//! The sink applies each batch of a sub-partition (a hash of the record key within a Kafka
//! partition) in one transaction that also moves the sub-partition's row of
//! `sluice_sink_progress` to the offset after the batch's last record. So one `REPEATABLE
//! READ` snapshot of the target database sees the tables exactly as the records before those
//! offsets left them: the topic is read up to them ([`Cutoff::Applied`]), and the records the
//! sink has not applied yet (in flight, or waiting while it is stopped) are left out instead
//! of being reported as differences. Both sides are then compared as for a source: checksums
//! per bucket computed by PostgreSQL, the differing buckets key by key.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use tokio_postgres::Client;

use super::avro::AvroTopics;
use super::compare::{self, Limits, Side, explained, verify_table};
use super::report::{Report, TableReport};
use super::source::{self, PlanRules};
use super::topic::Cutoff;
use crate::error::ConfigIssue;
use crate::event::EventOptions;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::postgres::config::PostgresSinkConfig;

/// The events' encoding options as the sink reads them (`[sink.postgres]`'s Debezium options,
/// `[source.kafka]`'s formats).
fn event_options(config: &SinkPipelineConfig, target: &PostgresSinkConfig) -> EventOptions {
    let kafka = config.kafka();
    EventOptions {
        decimal_handling_mode: target.decimal_handling_mode,
        time_precision_mode: target.time_precision_mode,
        binary_handling_mode: target.binary_handling_mode,
        unavailable_value_placeholder: target.unavailable_value_placeholder.clone(),
        key_format: Some(kafka.key_format()),
        value_format: Some(kafka.value_format()),
        ..EventOptions::default()
    }
}

/// The applied offsets of one topic, from the progress table.
#[derive(Debug, Default)]
struct Applied {
    /// Partition → next offset per sub-partition.
    next: HashMap<i32, Vec<i64>>,
    /// A sub-partition beyond `sub_partitions` has applied records (`sub_partitions` was
    /// changed): which records the rows hold is then not known.
    stale: Option<i32>,
}

/// Verifies the target tables of a Kafka → PostgreSQL pipeline (`tables`: only these).
///
/// # Errors
///
/// The target database or the brokers cannot be reached, the progress table cannot be read.
pub async fn verify_sink(
    config: &SinkPipelineConfig,
    target: &PostgresSinkConfig,
    tables: &[String],
    limits: &Limits,
) -> anyhow::Result<Report> {
    let kafka = config.kafka();
    let events = event_options(config, target);
    let avro = AvroTopics::new(&events, config.schema_registry.as_ref())?;
    let consumer = compare::consumer(&config.name, &kafka.brokers, &kafka.client)?;
    let topics = tokio::task::block_in_place(|| topics(&consumer, config))?;
    let client = snapshot(config, target).await?;
    let applied = progress(&client, config, target).await?;
    let subs = config.sub_partitions();
    let mut report = Report::new(format!(
        "the offsets applied in {} ({} topic(s), {} partition(s))",
        target.progress_table(),
        applied.len(),
        applied.values().map(|a| a.next.len()).sum::<usize>()
    ));
    report.kind = "sink";
    // Target table → its topics.
    let by_table = tables_of_topics(
        &topics,
        |topic| target.table_for(topic).map(|t| t.to_string()),
        tables,
        &mut report,
    )?;
    let started = Instant::now();
    for (table, topics) in &by_table {
        let [topic] = topics.as_slice() else {
            report.tables.push(TableReport::not_verified(
                table.clone(),
                topics.join(", "),
                "several topics go to this table: the newest record of a key is not defined across topics".into(),
            ));
            continue;
        };
        let applied = applied.get(topic);
        if let Some(sub) = applied.and_then(|a| a.stale) {
            report.tables.push(TableReport::not_verified(
                table.clone(),
                topic.clone(),
                format!(
                    "the progress table holds applied records of sub-partition {sub}, but sink.postgres.sub_partitions is {subs} (it was changed): which records the table holds is not known"
                ),
            ));
            continue;
        }
        let cutoff = Cutoff::Applied {
            sub_partitions: subs,
            next: applied.map(|a| a.next.clone()).unwrap_or_default(),
        };
        let side = Side {
            db: &client,
            events: &events,
            cutoff: &cutoff,
            avro: avro.as_ref(),
            sink: true,
        };
        let outcome = verify_one(&client, side, &consumer, limits, target, table, topic).await;
        match outcome {
            Ok((table_report, rows)) => {
                report.source_rows += rows;
                report.tables.push(table_report);
            }
            Err(error) => report.tables.push(TableReport::not_verified(
                table.clone(),
                topic.clone(),
                format!("{error:#}"),
            )),
        }
    }
    report.topic_ms = started.elapsed().as_millis() as u64;
    report.tables.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(report)
}

/// A sink's topics grouped by the target table each goes to (`table_for`); a topic whose
/// table cannot be told (the [`ConfigIssue`]) is reported as not verified. With `tables`, only
/// those (each must be one of the sink's, else `Err`), and nothing else reported.
///
/// # Errors
///
/// A table of `tables` that no topic goes to.
pub(super) fn tables_of_topics(
    topics: &[String],
    table_for: impl Fn(&str) -> Result<String, ConfigIssue>,
    tables: &[String],
    report: &mut Report,
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut by_table: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for topic in topics {
        match table_for(topic) {
            Ok(table) => by_table.entry(table).or_default().push(topic.clone()),
            Err(issue) => report.tables.push(TableReport::not_verified(
                String::new(),
                topic.clone(),
                format!("{}: {}", issue.key, issue.problem),
            )),
        }
    }
    if !tables.is_empty() {
        for wanted in tables {
            if !by_table.contains_key(wanted) {
                anyhow::bail!(
                    "--table {wanted}: not a table this sink writes (its topics go to: {})",
                    by_table.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
        }
        by_table.retain(|table, _| tables.contains(table));
        report.tables.clear();
    }
    Ok(by_table)
}

/// One target table against its topic; the report and the table's rows.
async fn verify_one(
    client: &Client,
    side: Side<'_>,
    consumer: &BaseConsumer,
    limits: &Limits,
    target: &PostgresSinkConfig,
    table: &str,
    topic: &str,
) -> anyhow::Result<(TableReport, u64)> {
    let name = target
        .table_for(topic)
        .map_err(|issue| anyhow::anyhow!("{}: {}", issue.key, issue.problem))?;
    let quoted = name.quoted();
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&quoted])
        .await
        .with_context(|| format!("cannot read the catalog of {table}"))?
        .get(0);
    if !exists {
        anyhow::bail!("table {table} does not exist in the target database");
    }
    let plan = source::plan_table(
        client,
        &PlanRules {
            qualified: table.to_owned(),
            quoted,
            topic: topic.to_owned(),
            events: side.events,
            left_out: &|_| None,
            generated: Some("generated (the sink does not write it)"),
            filter: None,
        },
    )
    .await
    .map_err(explained)?;
    let plan = match plan {
        Ok(plan) => plan,
        Err(reason) => anyhow::bail!("{reason}"),
    };
    let buckets = source::checksums(client, &plan, side.events, limits.rate_limit)
        .await
        .map_err(explained)?;
    let rows = buckets.iter().map(|b| b.0).sum();
    let report = verify_table(side, consumer, limits, &plan, &buckets).await?;
    Ok((report, rows))
}

/// The topics the sink reads: those named, and those its patterns match now (internal topics
/// left out).
pub(super) fn topics(
    consumer: &BaseConsumer,
    config: &SinkPipelineConfig,
) -> anyhow::Result<Vec<String>> {
    let kafka = config.kafka();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(30))
        .context("cannot read the topics of the Kafka cluster (source.kafka.brokers)")?;
    let mut topics: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|name| !name.starts_with("__") && kafka.selects(name))
        .collect();
    // A named topic that does not exist yet: reported (not verified) by its table.
    for name in kafka.topic_names() {
        if !topics.contains(&name) {
            topics.push(name);
        }
    }
    topics.sort();
    topics.dedup();
    Ok(topics)
}

/// A connection to the target database in a `REPEATABLE READ` read-only transaction: the
/// snapshot both the progress table and the target tables are read under.
async fn snapshot(
    config: &SinkPipelineConfig,
    target: &PostgresSinkConfig,
) -> anyhow::Result<Client> {
    let mut connect = crate::pg_connect::PgConnectConfig::parse(&target.url)
        .map_err(|e| anyhow::anyhow!("sink.postgres.url: {e}"))?;
    if connect.pg.get_connect_timeout().is_none() {
        connect.pg.connect_timeout(Duration::from_secs(10));
    }
    let (client, _driver) = crate::pg_connect::connect_sql(&connect)
        .await
        .context("cannot connect to the target database (sink.postgres.url)")?;
    client
        .batch_execute(&format!(
            "SET application_name = {}; \
             BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
             SET LOCAL idle_in_transaction_session_timeout = 0",
            crate::sql::quote_pg_literal(&format!("sluice-verify-{}", config.name))
        ))
        .await
        .context("cannot open a snapshot of the target database")?;
    Ok(client)
}

/// The applied offsets of every topic, from the progress table (under the snapshot).
async fn progress(
    client: &Client,
    config: &SinkPipelineConfig,
    target: &PostgresSinkConfig,
) -> anyhow::Result<HashMap<String, Applied>> {
    let table = target.progress_table();
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .context("cannot read the target database's catalog")?
        .get(0);
    if !exists {
        anyhow::bail!(
            "the progress table {table} does not exist: the sink has applied nothing yet (has it run? sink.postgres.progress_schema)"
        );
    }
    let rows = client
        .query(
            &format!(
                "SELECT topic, kafka_partition, sub_partition, next_offset FROM {table} \
                 WHERE pipeline = $1"
            ),
            &[&config.name],
        )
        .await
        .with_context(|| format!("cannot read the progress table {table}"))?;
    let subs = config.sub_partitions();
    let mut applied: HashMap<String, Applied> = HashMap::new();
    for row in rows {
        let (topic, partition, sub, next): (String, i32, i32, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let entry = applied.entry(topic).or_default();
        match usize::try_from(sub) {
            Ok(sub) if sub < subs as usize => {
                entry
                    .next
                    .entry(partition)
                    .or_insert_with(|| vec![0; subs as usize])[sub] = next;
            }
            _ if next > 0 => entry.stale = Some(sub),
            _ => {}
        }
    }
    Ok(applied)
}
