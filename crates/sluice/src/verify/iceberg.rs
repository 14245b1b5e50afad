//! `sluice verify` of a Kafka → Iceberg sink: each table against its topic, up to the offsets
//! the table's snapshots record.
//!
//! The sink commits each sub-partition's epoch in one snapshot whose summary records the
//! epoch's last offset ([`crate::sink::iceberg::writer`]). So the table's current snapshot is
//! the cut: it holds exactly the records of each sub-partition up to the offset the newest
//! snapshot naming it records (walking back from the current one). `verify` loads the table
//! once, takes those offsets, reads the snapshot's rows with the `iceberg` crate's scan
//! (position deletes applied), and reads the topic up to the offsets, turning each record
//! into the row the sink writes for it (the sink's own decoding and conversion,
//! [`Layout::cells`]).
//!
//! - **Append mode**: one row per record, located by its `_kafka_partition` and
//!   `_kafka_offset` columns: per range of offsets a count and a sum of row hashes on both
//!   sides, the differing ranges compared offset by offset (as for a files sink).
//! - **Upsert mode**: the table's rows against the newest record per key (the identifier
//!   fields): a delete removes the key, a truncate empties the table with `apply_truncates`.
//!   Per key a 16-byte digest and the row's hash are held (about 64 bytes a key; more keys
//!   than `--memory-mb` holds: not verified).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use anyhow::Context as _;
use arrow_array::RecordBatch;
use futures::StreamExt as _;
use iceberg::table::Table;
use iceberg::{ErrorKind, NamespaceIdent, TableIdent};
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::Message as _;
use serde_json::Value;

use super::canonical::{digest, row_hash};
use super::compare::{self, Limits, explained};
use super::files::{RANGE_OFFSETS, RangeId, Sums, dead_lettered, partitions, read_ranges};
use super::report::{Difference, DifferenceKind, Report, TableReport, TableStatus};
use crate::sink::avro::{AvroDecoder, Output};
use crate::sink::config::SinkPipelineConfig;
use crate::sink::files::SubPartitionId;
use crate::sink::iceberg::config::{IcebergMode, IcebergSinkConfig};
use crate::sink::iceberg::convert;
use crate::sink::iceberg::upsert::key_bytes;
use crate::sink::iceberg::writer::{Layout, OFFSETS_PROPERTY, offsets_entry, recorded_offset};
use crate::sink::typed::cells::{Cell, cell_at};
use crate::sink::typed::event::{SchemaCache, decode_event};
use crate::sink::worker::{RecordData, WriteFailure, sub_partition};

/// A row as the sink writes it: its cells, hashed.
struct Row {
    cells: Vec<Cell>,
}

impl Row {
    fn hash(&self) -> Result<i64, String> {
        Ok(row_hash(&key_bytes(&self.cells)?))
    }
}

/// A cell as JSON, to show.
fn cell_json(cell: &Cell) -> Value {
    match cell {
        Cell::Null => Value::Null,
        Cell::Bool(v) => Value::Bool(*v),
        Cell::I32(v) => Value::from(*v),
        Cell::I64(v) => Value::from(*v),
        Cell::F32(v) => {
            serde_json::Number::from_f64(f64::from(*v)).map_or(Value::Null, Value::Number)
        }
        Cell::F64(v) => serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number),
        Cell::I128(v) => Value::String(v.to_string()),
        Cell::Str(v) => Value::String(v.clone()),
        Cell::Bytes(v) => Value::String(v.iter().map(|b| format!("{b:02x}")).collect()),
    }
}

/// The columns' cells as a JSON object, to show.
fn row_json(names: &[String], cells: &[Cell]) -> Value {
    Value::Object(
        names
            .iter()
            .zip(cells)
            .map(|(n, c)| (n.clone(), cell_json(c)))
            .collect(),
    )
}

/// Turns records into the rows the sink writes for them.
struct Rows<'a> {
    table: &'a Table,
    avro: Option<&'a AvroDecoder>,
    schemas: SchemaCache,
    layouts: HashMap<Option<String>, Layout>,
}

/// What the sink does with a record.
enum Effect {
    /// Writes this row (upsert: puts it for its key).
    Put(Row),
    /// Upsert: deletes the key of this row.
    Delete(Row),
    /// Upsert with `apply_truncates`: empties the table.
    Truncate,
    /// Nothing (a tombstone; a truncate otherwise).
    Nothing,
    /// The record fails (dead-lettered, or the sink stopped there): why.
    Fails(String),
}

impl Rows<'_> {
    fn effect(
        &mut self,
        data: &RecordData,
        partition: i32,
        upsert: bool,
        truncates: bool,
    ) -> Effect {
        let decoded;
        let data = match self.avro {
            Some(avro) => match avro.decode_record(data) {
                Ok(d) => {
                    decoded = d;
                    &decoded
                }
                Err(WriteFailure::Record(reason)) => return Effect::Fails(reason),
                Err(WriteFailure::Run(error)) => return Effect::Fails(error.chain()),
            },
            None => data,
        };
        let Some(value) = data.value() else {
            return Effect::Nothing;
        };
        let event = match decode_event(value, &mut self.schemas) {
            Ok(event) => event,
            Err(reason) => return Effect::Fails(reason),
        };
        let text = event.schema.as_ref().map(|(t, _)| t.clone());
        if !self.layouts.contains_key(&text) {
            match Layout::of(self.table, &event) {
                Ok(layout) => {
                    self.layouts.insert(text.clone(), layout);
                }
                Err(reason) => return Effect::Fails(reason),
            }
        }
        let Some(layout) = self.layouts.get(&text) else {
            return Effect::Nothing;
        };
        if upsert && event.op.as_deref() == Some("t") {
            return if truncates {
                Effect::Truncate
            } else {
                Effect::Nothing
            };
        }
        match layout.cells(&event, partition, data.offset) {
            Ok(cells) if upsert && event.op.as_deref() == Some("d") => {
                Effect::Delete(Row { cells })
            }
            Ok(cells) => Effect::Put(Row { cells }),
            Err(reason) => Effect::Fails(reason),
        }
    }
}

/// Verifies the tables of a Kafka → Iceberg pipeline against their topics (`tables`: only
/// these, `namespace.table`).
///
/// # Errors
///
/// The catalog or the brokers cannot be reached.
pub async fn verify_iceberg(
    config: &SinkPipelineConfig,
    settings: &IcebergSinkConfig,
    tables: &[String],
    limits: &Limits,
) -> anyhow::Result<Report> {
    let catalog =
        crate::sink::iceberg::writer::open_catalog(&config.name, settings).map_err(explained)?;
    let kafka = config.kafka();
    let avro = super::avro::sink_decoder(config, Output::WithSchemas)?;
    let consumer = compare::consumer(&config.name, &kafka.brokers, &kafka.client)?;
    let topics = tokio::task::block_in_place(|| super::sink::topics(&consumer, config))?;
    let dead = match &config.delivery.dead_letter_topic {
        Some(topic) => tokio::task::block_in_place(|| dead_lettered(&consumer, topic))?,
        None => HashSet::new(),
    };
    let offsets_key = format!("{OFFSETS_PROPERTY}{}", config.group_id());
    let mut report = Report::new(format!(
        "the offsets the tables' snapshots record ({offsets_key})"
    ));
    report.kind = "iceberg";
    let by_table = super::sink::tables_of_topics(
        &topics,
        |topic| {
            settings
                .table_for(topic)
                .map(|name| format!("{}.{name}", settings.namespace))
        },
        tables,
        &mut report,
    )?;
    let started = Instant::now();
    for (qualified, topics) in &by_table {
        let [topic] = topics.as_slice() else {
            report.tables.push(TableReport::not_verified(
                qualified.clone(),
                topics.join(", "),
                "several topics go to this table: its rows do not say which topic they came from"
                    .into(),
            ));
            continue;
        };
        let name = qualified
            .strip_prefix(&format!("{}.", settings.namespace))
            .unwrap_or(qualified);
        let ident = TableIdent::new(
            NamespaceIdent::new(settings.namespace.clone()),
            name.to_owned(),
        );
        let table = match catalog.load_table(&ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound => {
                report.tables.push(TableReport::not_verified(
                    qualified.clone(),
                    topic.clone(),
                    "the table does not exist (the sink creates it with its first record, with auto_create)".into(),
                ));
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot read table {ident} from the catalog")));
            }
        };
        let check = Check {
            consumer: &consumer,
            table: &table,
            avro: avro.as_ref(),
            topic,
            qualified,
            offsets_key: &offsets_key,
            subs: config.sub_partitions(),
            dead: &dead,
            limits,
            upsert: settings.mode == IcebergMode::Upsert,
            truncates: settings.apply_truncates,
        };
        let outcome = check.run().await;
        report.tables.push(outcome.unwrap_or_else(|error| {
            TableReport::not_verified(qualified.clone(), topic.clone(), format!("{error:#}"))
        }));
    }
    report.topic_ms = started.elapsed().as_millis() as u64;
    report.source_rows = report.tables.iter().map(|t| t.source_rows).sum();
    Ok(report)
}

/// One table against its topic.
struct Check<'a> {
    consumer: &'a BaseConsumer,
    table: &'a Table,
    avro: Option<&'a AvroDecoder>,
    topic: &'a str,
    qualified: &'a str,
    offsets_key: &'a str,
    subs: u32,
    dead: &'a HashSet<(String, i32, i64)>,
    limits: &'a Limits,
    upsert: bool,
    truncates: bool,
}

/// Per partition: the last offset each sub-partition's records are in the table up to.
type Cut = BTreeMap<i32, Vec<i64>>;

/// Per partition: the offsets to read (start, end exclusive).
type Spans = BTreeMap<i32, (i64, i64)>;

impl Check<'_> {
    fn rows(&self) -> Rows<'_> {
        Rows {
            table: self.table,
            avro: self.avro,
            schemas: SchemaCache::default(),
            layouts: HashMap::new(),
        }
    }

    fn names(&self) -> Vec<String> {
        self.table
            .metadata()
            .current_schema()
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    /// Reads every row of the current snapshot (deletes applied), calling `each` with its
    /// cells.
    async fn table_rows(&self, mut each: impl FnMut(Vec<Cell>)) -> anyhow::Result<()> {
        if self.table.metadata().current_snapshot().is_none() {
            return Ok(());
        }
        let scan = self
            .table
            .scan()
            .select_all()
            .build()
            .with_context(|| format!("cannot scan table {}", self.qualified))?;
        let mut stream = scan
            .to_arrow()
            .await
            .with_context(|| format!("cannot read table {}", self.qualified))?;
        while let Some(batch) = stream.next().await {
            let batch: RecordBatch =
                batch.with_context(|| format!("cannot read table {}", self.qualified))?;
            for row in 0..batch.num_rows() {
                let cells = batch
                    .columns()
                    .iter()
                    .map(|c| cell_at(c.as_ref(), row))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| anyhow::anyhow!("table {}: {e}", self.qualified))?;
                each(cells);
            }
        }
        Ok(())
    }

    /// The cut, and the topic's partitions with the offsets to read (start, end).
    fn cut(&self) -> anyhow::Result<(Cut, Spans)> {
        let marks = partitions(self.consumer, self.topic)?;
        let mut cut = Cut::new();
        let mut ranges = BTreeMap::new();
        for (&partition, &(low, high)) in &marks {
            let last: Vec<i64> = (0..self.subs)
                .map(|sub| {
                    let id = SubPartitionId {
                        topic: self.topic.to_owned(),
                        partition,
                        sub,
                    };
                    recorded_offset(self.table, self.offsets_key, &offsets_entry(&id)).unwrap_or(-1)
                })
                .collect();
            let end = last.iter().copied().max().unwrap_or(-1) + 1;
            ranges.insert(partition, (low, end.min(high)));
            cut.insert(partition, last);
        }
        Ok((cut, ranges))
    }

    /// Whether the record at `partition`/`offset` of `key` is in the table's cut (and not
    /// dead-lettered).
    fn takes(&self, cut: &Cut, partition: i32, offset: i64, key: Option<&[u8]>) -> bool {
        let sub = sub_partition(key, offset, self.subs) as usize;
        cut.get(&partition)
            .and_then(|l| l.get(sub))
            .is_some_and(|&last| offset <= last)
            && !self
                .dead
                .contains(&(self.topic.to_owned(), partition, offset))
    }

    async fn run(&self) -> anyhow::Result<TableReport> {
        let (cut, ranges) = tokio::task::block_in_place(|| self.cut())?;
        let mut table = TableReport::not_verified(
            self.qualified.to_owned(),
            self.topic.to_owned(),
            String::new(),
        );
        table.status = TableStatus::Equal;
        table.reason = None;
        table.passes = 1;
        if self.upsert {
            self.run_upsert(&cut, &ranges, &mut table).await?;
        } else {
            self.run_append(&cut, &ranges, &mut table).await?;
        }
        if table.differences_found > 0 || table.buckets_differing > 0 {
            table.status = TableStatus::Differs;
        }
        Ok(table)
    }

    /// Reads the topic's records in the cut, calling `each` with the partition, offset and
    /// the sink's effect.
    fn topic_effects(
        &self,
        cut: &Cut,
        ranges: &BTreeMap<i32, (i64, i64)>,
        table: &mut TableReport,
        mut each: impl FnMut(i32, u32, i64, Effect),
    ) -> anyhow::Result<()> {
        let mut rows = self.rows();
        let mut left_out = 0u64;
        let mut first = None;
        tokio::task::block_in_place(|| {
            read_ranges(self.consumer, self.topic, ranges, |message| {
                let (p, offset) = (message.partition(), message.offset());
                table.read.records += 1;
                if !self.takes(cut, p, offset, message.key()) {
                    table.read.after_position += 1;
                    return;
                }
                let data = RecordData::new(
                    offset,
                    message.key(),
                    message.payload(),
                    message.timestamp().to_millis(),
                );
                let sub = sub_partition(message.key(), offset, self.subs);
                match rows.effect(&data, p, self.upsert, self.truncates) {
                    Effect::Fails(reason) => {
                        left_out += 1;
                        first.get_or_insert(format!("{p}/{offset}: {reason}"));
                    }
                    effect => each(p, sub, offset, effect),
                }
            })
        })?;
        if let Some(first) = first {
            table.read.first_problem = Some(format!(
                "{left_out} record(s) the sink cannot write were left out (dead-lettered, or the sink stopped there), e.g. offset {first}"
            ));
        }
        Ok(())
    }

    async fn run_append(
        &self,
        cut: &Cut,
        ranges: &BTreeMap<i32, (i64, i64)>,
        table: &mut TableReport,
    ) -> anyhow::Result<()> {
        let names = self.names();
        let position = |name: &str| names.iter().position(|n| n == name);
        let (Some(p_at), Some(o_at)) = (
            position(convert::KAFKA_PARTITION_COLUMN),
            position(convert::KAFKA_OFFSET_COLUMN),
        ) else {
            anyhow::bail!(
                "the table has no {} and {} columns (append mode's): its rows cannot be matched with the topic's records",
                convert::KAFKA_PARTITION_COLUMN,
                convert::KAFKA_OFFSET_COLUMN
            );
        };
        let locate = |cells: &[Cell]| match (cells.get(p_at), cells.get(o_at)) {
            (Some(Cell::I32(p)), Some(Cell::I64(o))) => Some((*p, *o)),
            _ => None,
        };
        let low = |p: i32| ranges.get(&p).map_or(0, |r| r.0);
        let mut table_sums = Sums::new();
        let mut unlocated = 0u64;
        let mut failed = None;
        self.table_rows(|cells| {
            let Some((p, o)) = locate(&cells) else {
                unlocated += 1;
                return;
            };
            if o < low(p) {
                table.read.unpositioned += 1;
                return;
            }
            match (Row { cells }).hash() {
                Ok(hash) => {
                    table.source_rows += 1;
                    let sums = table_sums.entry((p, o / RANGE_OFFSETS)).or_default();
                    sums.0 += 1;
                    sums.1 += i128::from(hash);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        })
        .await?;
        if let Some(e) = failed {
            anyhow::bail!("a row of the table cannot be hashed: {e}");
        }
        let mut topic_sums = Sums::new();
        let mut hash_failed = None;
        self.topic_effects(cut, ranges, table, |p, _, o, effect| {
            if let Effect::Put(row) = effect {
                match row.hash() {
                    Ok(hash) => {
                        table_keys_add(&mut topic_sums, p, o, hash);
                    }
                    Err(e) => {
                        hash_failed.get_or_insert(e);
                    }
                }
            }
        })?;
        if let Some(e) = hash_failed {
            anyhow::bail!("a record's row cannot be hashed: {e}");
        }
        table.topic_keys = topic_sums.values().map(|s| s.0).sum();
        let ids: BTreeSet<RangeId> = table_sums
            .keys()
            .chain(topic_sums.keys())
            .copied()
            .collect();
        let differing: Vec<RangeId> = ids
            .iter()
            .filter(|id| table_sums.get(id) != topic_sums.get(id))
            .copied()
            .collect();
        table.buckets = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        table.buckets_differing = differing.len() as u64;
        if unlocated > 0 {
            table.differences_found += unlocated;
            table.differences.push(Difference {
                kind: DifferenceKind::Unreadable,
                key: Value::Null,
                key_text: Vec::new(),
                source: Some(Value::String(format!(
                    "{unlocated} row(s) without {} or {}",
                    convert::KAFKA_PARTITION_COLUMN,
                    convert::KAFKA_OFFSET_COLUMN
                ))),
                topic: None,
                columns: Vec::new(),
            });
        }
        let mut narrowed = Vec::new();
        let mut held = 0u64;
        for id in &differing {
            let rows =
                table_sums.get(id).map_or(0, |s| s.0) + topic_sums.get(id).map_or(0, |s| s.0);
            if !narrowed.is_empty() && held + rows > self.limits.narrow_rows {
                break;
            }
            held += rows;
            narrowed.push(*id);
        }
        table.buckets_narrowed = narrowed.len() as u64;
        if narrowed.is_empty() {
            return Ok(());
        }
        let wanted: HashSet<RangeId> = narrowed.iter().copied().collect();
        let mut in_table: BTreeMap<(i32, i64), Vec<(i64, Value)>> = BTreeMap::new();
        self.table_rows(|cells| {
            if let Some((p, o)) = locate(&cells)
                && wanted.contains(&(p, o / RANGE_OFFSETS))
                && o >= low(p)
            {
                let shown = row_json(&names, &cells);
                if let Ok(hash) = (Row { cells }).hash() {
                    in_table.entry((p, o)).or_default().push((hash, shown));
                }
            }
        })
        .await?;
        let mut narrow_ranges: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        for &(p, r) in &narrowed {
            let (l, h) = ranges.get(&p).copied().unwrap_or((0, 0));
            let span = narrow_ranges.entry(p).or_insert((i64::MAX, i64::MIN));
            span.0 = span.0.min((r * RANGE_OFFSETS).max(l));
            span.1 = span.1.max(((r + 1) * RANGE_OFFSETS).min(h));
        }
        let mut in_topic: BTreeMap<(i32, i64), (i64, Value)> = BTreeMap::new();
        let mut scratch = TableReport::not_verified(String::new(), String::new(), String::new());
        self.topic_effects(cut, &narrow_ranges, &mut scratch, |p, _, o, effect| {
            if let Effect::Put(row) = effect
                && wanted.contains(&(p, o / RANGE_OFFSETS))
            {
                let shown = row_json(&names, &row.cells);
                if let Ok(hash) = row.hash() {
                    in_topic.insert((p, o), (hash, shown));
                }
            }
        })?;
        let offsets: BTreeSet<(i32, i64)> =
            in_table.keys().chain(in_topic.keys()).copied().collect();
        let mut found: BTreeSet<RangeId> = BTreeSet::new();
        for at in offsets {
            let rows = in_table.get(&at).map(Vec::as_slice).unwrap_or_default();
            let expected = in_topic.get(&at);
            let (kind, shown_row) = match (rows, expected) {
                ([], Some(_)) => (DifferenceKind::MissingInTable, None),
                ([one], Some((hash, _))) if one.0 == *hash => continue,
                ([one], Some(_)) => (DifferenceKind::Differs, Some(one)),
                ([one, ..], Some(_)) => (DifferenceKind::Duplicated, Some(one)),
                ([one, ..], None) => (DifferenceKind::MissingInTopic, Some(one)),
                ([], None) => continue,
            };
            found.insert((at.0, at.1 / RANGE_OFFSETS));
            push(
                table,
                self.limits,
                Difference {
                    kind,
                    key: serde_json::json!({"partition": at.0, "offset": at.1}),
                    key_text: Vec::new(),
                    source: shown_row.map(|(_, row)| row.clone()),
                    topic: expected.map(|(_, row)| row.clone()),
                    columns: columns_differing(shown_row.map(|r| &r.1), expected.map(|r| &r.1)),
                },
            );
        }
        let narrowed: BTreeSet<RangeId> = narrowed.into_iter().collect();
        table.buckets_differing = differing
            .iter()
            .filter(|id| !narrowed.contains(id) || found.contains(id))
            .count() as u64;
        Ok(())
    }

    /// With `apply_truncates`, where the table's rows begin: a truncate's snapshot keeps none
    /// of the table's files, the rows other sub-partitions committed before it included (a
    /// truncate is not ordered with other partitions' records). So for the newest truncate in
    /// the cut (by the snapshot that committed it), each sub-partition's records count from
    /// after the offset it had recorded in the snapshots up to that one, and the truncating
    /// sub-partition's from after the truncate. `None`: no truncate applies.
    fn truncated(
        &self,
        cut: &Cut,
        ranges: &BTreeMap<i32, (i64, i64)>,
    ) -> anyhow::Result<Option<HashMap<(i32, u32), i64>>> {
        if !self.truncates {
            return Ok(None);
        }
        // Per sub-partition, its last truncate in the cut.
        let mut truncates: HashMap<(i32, u32), i64> = HashMap::new();
        let mut scratch = TableReport::not_verified(String::new(), String::new(), String::new());
        self.topic_effects(cut, ranges, &mut scratch, |p, sub, offset, effect| {
            if matches!(effect, Effect::Truncate) {
                truncates.insert((p, sub), offset);
            }
        })?;
        if truncates.is_empty() {
            return Ok(None);
        }
        // The snapshots, oldest first.
        let metadata = self.table.metadata();
        let mut chain = Vec::new();
        let mut snapshot = metadata.current_snapshot().cloned();
        while let Some(current) = snapshot {
            snapshot = current
                .parent_snapshot_id()
                .and_then(|id| metadata.snapshot_by_id(id).cloned());
            chain.push(current);
        }
        chain.reverse();
        let recorded = |at: usize| -> HashMap<String, i64> {
            chain[at]
                .summary()
                .additional_properties
                .get(self.offsets_key)
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default()
        };
        let entry = |p: i32, sub: u32| {
            offsets_entry(&SubPartitionId {
                topic: self.topic.to_owned(),
                partition: p,
                sub,
            })
        };
        // The snapshot that committed each truncate: the first recording its sub-partition at
        // or past it. The newest of them is the truncate that holds.
        let mut newest: Option<(usize, (i32, u32), i64)> = None;
        for (&(p, sub), &offset) in &truncates {
            let name = entry(p, sub);
            if let Some(at) =
                (0..chain.len()).find(|&at| recorded(at).get(&name).is_some_and(|&o| o >= offset))
                && newest.is_none_or(|(n, ..)| at > n)
            {
                newest = Some((at, (p, sub), offset));
            }
        }
        let Some((at, truncating, offset)) = newest else {
            return Ok(None);
        };
        let mut base = HashMap::new();
        for (&p, lasts) in cut {
            for sub in 0..lasts.len() as u32 {
                let name = entry(p, sub);
                let before = (0..=at).rev().find_map(|i| recorded(i).get(&name).copied());
                base.insert((p, sub), before.unwrap_or(-1));
            }
        }
        base.insert(truncating, offset);
        Ok(Some(base))
    }

    async fn run_upsert(
        &self,
        cut: &Cut,
        ranges: &BTreeMap<i32, (i64, i64)>,
        table: &mut TableReport,
    ) -> anyhow::Result<()> {
        let names = self.names();
        let schema = self.table.metadata().current_schema();
        let key_at: Vec<usize> = schema
            .identifier_field_ids()
            .filter_map(|id| schema.as_struct().fields().iter().position(|f| f.id == id))
            .collect();
        if key_at.is_empty() {
            anyhow::bail!("the table has no identifier fields: upsert mode finds rows by them");
        }
        let key_of = |cells: &[Cell]| -> Result<u128, String> {
            let key = key_bytes(key_at.iter().filter_map(|at| cells.get(*at)))?;
            Ok(u128::from_be_bytes(digest(&key)))
        };
        let most = (self.limits.memory_mb.max(1) << 20) / 64;
        let base = self.truncated(cut, ranges)?;
        let applies = |p: i32, sub: u32, offset: i64| {
            base.as_ref()
                .is_none_or(|b| b.get(&(p, sub)).is_none_or(|&from| offset > from))
        };
        // Key → the newest row's hash, and whether the table had it.
        let mut topic: HashMap<u128, (i64, bool)> = HashMap::new();
        let mut failed = None;
        self.topic_effects(cut, ranges, table, |p, sub, offset, effect| {
            // Past the memory budget nothing more is held (the table is then not verified).
            if !applies(p, sub, offset) || topic.len() as u64 > most {
                return;
            }
            let outcome = match effect {
                Effect::Put(row) => {
                    key_of(&row.cells)
                        .and_then(|k| Ok((k, row.hash()?)))
                        .map(|(k, h)| {
                            topic.insert(k, (h, false));
                        })
                }
                Effect::Delete(row) => key_of(&row.cells).map(|k| {
                    topic.remove(&k);
                }),
                Effect::Truncate => {
                    topic.clear();
                    Ok(())
                }
                Effect::Nothing | Effect::Fails(_) => Ok(()),
            };
            if let Err(e) = outcome {
                failed.get_or_insert(e);
            }
        })?;
        if let Some(e) = failed {
            anyhow::bail!("a record's key or row cannot be read: {e}");
        }
        if topic.len() as u64 > most {
            anyhow::bail!(
                "the topic holds {} keys, more than --memory-mb ({}) holds (about 64 bytes a key): raise it",
                topic.len(),
                self.limits.memory_mb
            );
        }
        table.topic_keys = topic.len() as u64;
        table.buckets = 1;
        // The table's rows, key by key.
        let mut listed: Vec<(u128, DifferenceKind, Value)> = Vec::new();
        let mut found = 0u64;
        let mut table_failed = None;
        self.table_rows(|cells| {
            table.source_rows += 1;
            let (key, hash) = match key_of(&cells).and_then(|k| {
                Ok((
                    k,
                    (Row {
                        cells: cells.clone(),
                    })
                    .hash()?,
                ))
            }) {
                Ok(kh) => kh,
                Err(e) => {
                    table_failed.get_or_insert(e);
                    return;
                }
            };
            let kind = match topic.get_mut(&key) {
                Some((h, seen @ false)) if *h == hash => {
                    *seen = true;
                    return;
                }
                Some((_, true)) => DifferenceKind::Duplicated,
                Some((_, seen)) => {
                    *seen = true;
                    DifferenceKind::Differs
                }
                None => DifferenceKind::MissingInTopic,
            };
            found += 1;
            if listed.len() < self.limits.max_keys {
                listed.push((key, kind, row_json(&names, &cells)));
            }
        })
        .await?;
        if let Some(e) = table_failed {
            anyhow::bail!("a row of the table cannot be read: {e}");
        }
        for (key, (_, seen)) in &topic {
            if !seen {
                found += 1;
                if listed.len() < self.limits.max_keys {
                    listed.push((*key, DifferenceKind::MissingInTable, Value::Null));
                }
            }
        }
        table.differences_found = found;
        table.buckets_differing = u64::from(found > 0);
        table.buckets_narrowed = u64::from(found > 0);
        if listed.is_empty() {
            return Ok(());
        }
        // The listed keys' newest records, to show.
        let wanted: HashSet<u128> = listed.iter().map(|(k, ..)| *k).collect();
        let mut newest: HashMap<u128, Option<Value>> = HashMap::new();
        let mut scratch = TableReport::not_verified(String::new(), String::new(), String::new());
        self.topic_effects(
            cut,
            ranges,
            &mut scratch,
            |p, sub, offset, effect| match effect {
                _ if !applies(p, sub, offset) => {}
                Effect::Put(row) => {
                    if let Ok(k) = key_of(&row.cells)
                        && wanted.contains(&k)
                    {
                        newest.insert(k, Some(row_json(&names, &row.cells)));
                    }
                }
                Effect::Delete(row) => {
                    if let Ok(k) = key_of(&row.cells) {
                        newest.remove(&k);
                    }
                }
                Effect::Truncate => newest.clear(),
                Effect::Nothing | Effect::Fails(_) => {}
            },
        )?;
        for (key, kind, row) in listed {
            let topic_row = newest.get(&key).cloned().flatten();
            let shown_key = |row: &Value| {
                Value::Object(
                    key_at
                        .iter()
                        .filter_map(|at| names.get(*at))
                        .map(|n| (n.clone(), row.get(n).cloned().unwrap_or_default()))
                        .collect(),
                )
            };
            let key_json = if row.is_null() {
                topic_row.as_ref().map(shown_key).unwrap_or_default()
            } else {
                shown_key(&row)
            };
            let source = (!row.is_null()).then_some(row);
            let difference = Difference {
                kind,
                key: key_json,
                key_text: Vec::new(),
                columns: columns_differing(source.as_ref(), topic_row.as_ref()),
                source,
                topic: topic_row,
            };
            // For `--repair --source-pipeline`: the listed keys (the first --max-keys).
            table.repairable.push(difference.clone());
            table.differences.push(difference);
        }
        table.key_columns = key_at
            .iter()
            .filter_map(|at| names.get(*at).cloned())
            .collect();
        Ok(())
    }
}

/// Adds a record's hash to its range.
fn table_keys_add(sums: &mut Sums, partition: i32, offset: i64, hash: i64) {
    let entry = sums.entry((partition, offset / RANGE_OFFSETS)).or_default();
    entry.0 += 1;
    entry.1 += i128::from(hash);
}

/// Adds a difference, listing it while there is room.
fn push(table: &mut TableReport, limits: &Limits, difference: Difference) {
    table.differences_found += 1;
    if table.differences.len() < limits.max_keys {
        table.differences.push(difference);
    }
}

/// The columns whose values differ between two shown rows.
fn columns_differing(table: Option<&Value>, topic: Option<&Value>) -> Vec<String> {
    let (Some(Value::Object(a)), Some(Value::Object(b))) = (table, topic) else {
        return Vec::new();
    };
    a.iter()
        .filter(|(name, value)| b.get(*name) != Some(value))
        .map(|(name, _)| name.clone())
        .collect()
}
