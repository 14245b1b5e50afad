//! The comparison of one table with its topic, the same for every kind of pipeline: checksums
//! per bucket on both sides, then the differing buckets key by key.

use std::collections::HashMap;

use anyhow::Context as _;
use futures::future::BoxFuture;
use rdkafka::consumer::BaseConsumer;
use serde_json::Value;
use tokio_postgres::Client;

use super::avro::AvroTopics;
use super::canonical::{Piece, digest, push_piece, row_hash};
use super::report::{Difference, DifferenceKind, TableReport, TableStatus};
use super::source::{self, Buckets, SourceRow, TablePlan};
use super::topic::{self, Cutoff, KeyState, PassFilter, TopicView, read_topic};
use crate::error::PipelineError;
use crate::event::EventOptions;

/// How much a verification may read and hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Rows read from the database per second, at most (0: unbounded).
    pub rate_limit: u64,
    /// Memory for a topic's keys, in MiB.
    pub memory_mb: u64,
    /// Rows of differing buckets compared key by key, at most.
    pub narrow_rows: u64,
    /// Differing keys listed per table, at most.
    pub max_keys: usize,
}

/// A database read under the verification's snapshot: the rows of differing buckets.
pub trait RowSource: Sync {
    /// The rows of `buckets` (sorted) of `plan`'s table, with their canonical texts; at most
    /// `rate` rows a second (0: unbounded).
    fn rows<'a>(
        &'a self,
        plan: &'a TablePlan,
        events: &'a EventOptions,
        buckets: &'a [u32],
        rate: u64,
    ) -> BoxFuture<'a, Result<Vec<SourceRow>, PipelineError>>;
}

impl RowSource for Client {
    fn rows<'a>(
        &'a self,
        plan: &'a TablePlan,
        events: &'a EventOptions,
        buckets: &'a [u32],
        rate: u64,
    ) -> BoxFuture<'a, Result<Vec<SourceRow>, PipelineError>> {
        Box::pin(source::rows(self, plan, events, buckets, rate))
    }
}

/// The database side of a comparison, and how its topic is read.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    /// The database, under the snapshot.
    pub db: &'a dyn RowSource,
    /// The events' encoding options.
    pub events: &'a EventOptions,
    /// The records the database side has seen.
    pub cutoff: &'a Cutoff,
    /// The Avro reading, when records are Avro.
    pub avro: Option<&'a AvroTopics>,
    /// Whether the table is a PostgreSQL sink's target (see [`TopicView::as_sink_applies`]).
    pub sink: bool,
}

/// A [`PipelineError`] with its fix, as the command's error.
pub fn explained(error: PipelineError) -> anyhow::Error {
    match error.hint() {
        Some(hint) => anyhow::anyhow!("{} (fix: {hint})", error.chain()),
        None => anyhow::anyhow!("{}", error.chain()),
    }
}

/// A consumer that reads topics from their start, read committed, with no group offsets;
/// `client` are the pipeline's librdkafka client properties.
///
/// # Errors
///
/// librdkafka refuses the properties.
pub fn consumer(
    name: &str,
    brokers: &str,
    client: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<BaseConsumer> {
    let mut config = crate::kafka::client_config(brokers, client);
    config
        .set(
            "group.id",
            format!("sluice-verify-{name}-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest");
    for (key, value) in crate::kafka::keys::LEAN_PREFETCH {
        config.set(*key, *value);
    }
    config.create().context(
        "cannot create the Kafka consumer (the brokers, the pipeline's Kafka client settings)",
    )
}

/// Compares one table, whose checksums per bucket are `source`, with its topic: the topic's
/// sums per bucket (in passes that fit `limits.memory_mb`), then the differing buckets key by
/// key (their rows read through `client`, under the snapshot).
///
/// # Errors
///
/// The topic or the table cannot be read (the table is then not verified).
pub async fn verify_table(
    side: Side<'_>,
    consumer: &BaseConsumer,
    limits: &Limits,
    plan: &TablePlan,
    source: &Buckets,
) -> anyhow::Result<TableReport> {
    let Side {
        db,
        events,
        cutoff,
        avro,
        sink,
    } = side;
    let source_rows: u64 = source.iter().map(|b| b.0).sum();
    let keys_per_pass = (limits.memory_mb.max(1) << 20) / 64;
    let passes = source_rows.div_ceil(keys_per_pass).max(1);
    let buckets = u64::from(plan.buckets);
    let mut topic: Buckets = vec![(0, 0); plan.buckets as usize];
    let mut partial = vec![false; plan.buckets as usize];
    let mut table = TableReport::new(plan);
    table.source_rows = source_rows;
    for pass in 0..passes {
        let lo = (pass * buckets / passes) as u32;
        let hi = ((pass + 1) * buckets / passes) as u32;
        let mut view = TopicView::new(plan, events, cutoff, PassFilter::Range(lo, hi))
            .with_avro(avro)
            .as_sink_applies(sink);
        match tokio::task::block_in_place(|| {
            read_topic(consumer, &plan.topic, cutoff, |r| view.apply(r))
        }) {
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
        if !narrowed.is_empty() && held + rows > limits.narrow_rows {
            break;
        }
        held += rows;
        narrowed.push(b);
    }
    narrowed.sort_unstable();
    table.buckets_narrowed = narrowed.len() as u64;
    if !narrowed.is_empty() {
        let rows = db
            .rows(plan, events, &narrowed, limits.rate_limit)
            .await
            .map_err(explained)?;
        let mut view = TopicView::new(plan, events, cutoff, PassFilter::Detail(narrowed.clone()))
            .with_avro(avro)
            .as_sink_applies(sink);
        tokio::task::block_in_place(|| {
            read_topic(consumer, &plan.topic, cutoff, |r| view.apply(r))
        })?;
        compare_keys(sink, plan, rows, view.keys, &mut table, limits.max_keys);
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
            "{unsettled} bucket(s) hold keys whose newest events lack values (unchanged TOASTed values{}) and did not fit in --narrow-rows ({}): raise it{}",
            if sink {
                ", columns the events do not carry"
            } else {
                ""
            },
            limits.narrow_rows,
            if sink {
                ""
            } else {
                ", or set source.postgres.unchanged_toast = \"reread\""
            }
        ));
        TableStatus::NotVerified
    } else {
        TableStatus::Equal
    };
    Ok(table)
}

/// Compares the source rows and topic keys of the narrowed buckets key by key.
fn compare_keys(
    sink: bool,
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
                // For a sink, the table is the side that lacks the key.
                kind: if sink {
                    DifferenceKind::MissingInTable
                } else {
                    DifferenceKind::MissingInSource
                },
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
