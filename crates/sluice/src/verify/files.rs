//! `sluice verify` of a Kafka → files sink: every offset of the committed range of each
//! sub-partition is in the files exactly once, with the bytes the sink writes for it.
//!
//! The files sink commits each sub-partition's epochs with a state version naming the epoch's
//! last offset ([`crate::sink::files`]): every record of the sub-partition up to it is in a
//! committed file, none after it. So the cut is the states, read first; the files are then
//! listed (an epoch committed meanwhile only adds offsets past the cut, which are left out;
//! the last epoch's files still under their staged names are read there), and the topic is
//! read up to the cut. Both sides are summed per range of [`RANGE_OFFSETS`] offsets of a
//! partition (a count and a sum of each record's hash); differing ranges are compared offset
//! by offset, and the differing offsets listed. Memory: a few bytes per range, and the
//! narrowed ranges' hashes (`--narrow-rows`).
//!
//! What "the bytes" are: JSON Lines (with `metadata`, the default) — the line the sink writes
//! for the record (its metadata fields and the value's bytes; the sink's own
//! [`crate::sink::files::write_line`]); Parquet — the metadata columns and the value's top-level fields as text
//! (a column's value or one in `_extra`), whatever column each landed in.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use serde_json::value::RawValue;

use super::canonical::row_hash;
use super::compare::{self, Limits};
use super::report::{Difference, DifferenceKind, Report, TableReport, TableStatus};
use crate::sink::avro::{AvroDecoder, Output};
use crate::sink::config::{FileFormat, FilesSinkConfig, SinkPipelineConfig};
use crate::sink::files::{FileSettings, OutputRecord, OutputRoot, STATE_DIR, SubPartitionId};
use crate::sink::parquet::ParquetRow;
use crate::sink::template::{PathTemplate, RenderInput, parse_object};
use crate::sink::worker::{RecordData, WriteFailure, sub_partition};

/// Offsets per compared range of a partition.
pub const RANGE_OFFSETS: i64 = 10_000;

/// A range: partition and `offset / RANGE_OFFSETS`.
pub(super) type RangeId = (i32, i64);

/// The last committed epochs' files: staged path, final path.
type StagedFiles = Vec<(PathBuf, PathBuf)>;

/// A record as one file holds it: its hash, text and file.
type FileCopy = (i64, String, String);

/// A range's count and sum of record hashes.
pub(super) type Sums = BTreeMap<RangeId, (u64, i128)>;

/// How the sink turns a record into file content: the pipeline's settings.
struct Writing {
    settings: FileSettings,
    template: PathTemplate,
    skip_tombstones: bool,
    split_fields: bool,
    avro: Option<AvroDecoder>,
}

/// One record as the files should hold it, or why they should not.
enum Expected {
    /// Its hash and its text (the line, or the Parquet row's canonical form).
    Written(i64, String),
    /// The sink skips it (a tombstone with `skip_tombstones`).
    Skipped,
    /// The sink cannot write it (not JSON, a template field missing, an Avro record that
    /// cannot be read): it went to the dead-letter topic, or the sink stopped before it.
    Unwritable(String),
}

impl Writing {
    fn new(config: &SinkPipelineConfig, files: &FilesSinkConfig) -> anyhow::Result<Self> {
        let settings =
            crate::sink::destination::worker_settings(config, files).map_err(compare::explained)?;
        let avro = super::avro::sink_decoder(config, Output::Plain)?;
        let split_fields = files.format == FileFormat::Parquet || settings.template.uses_fields();
        Ok(Self {
            settings: settings.files,
            template: settings.template,
            skip_tombstones: files.skip_tombstones,
            split_fields,
            avro,
        })
    }

    /// What the sink writes for `data` of `topic`/`partition` (as `FilesWriter` does).
    fn expected(
        &self,
        topic: &str,
        topic_json: &str,
        partition: i32,
        data: &RecordData,
    ) -> Expected {
        let decoded;
        let data = match &self.avro {
            Some(avro) => match avro.decode_record(data) {
                Ok(d) => {
                    decoded = d;
                    &decoded
                }
                Err(WriteFailure::Record(reason)) => return Expected::Unwritable(reason),
                Err(WriteFailure::Run(error)) => {
                    return Expected::Unwritable(format!("the registry: {}", error.chain()));
                }
            },
            None => data,
        };
        let Some(value) = data.value() else {
            return if self.skip_tombstones {
                Expected::Skipped
            } else {
                Expected::Unwritable("a tombstone with skip_tombstones = false".into())
            };
        };
        let Ok(text) = std::str::from_utf8(value) else {
            return Expected::Unwritable("value is not UTF-8".into());
        };
        let object = text.trim_start().starts_with('{');
        let fields = if object && self.split_fields {
            match parse_object(text) {
                Ok(fields) => Some(fields),
                Err(e) => return Expected::Unwritable(format!("value is not valid JSON: {e}")),
            }
        } else {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
                return Expected::Unwritable(format!("value is not valid JSON: {e}"));
            }
            object.then(Vec::new)
        };
        let mut dir = String::new();
        if let Err(problem) = self.template.render(
            &RenderInput {
                topic,
                partition,
                timestamp_ms: data.timestamp_ms,
                fields: fields.as_deref().unwrap_or_default(),
            },
            &mut dir,
        ) {
            return Expected::Unwritable(problem);
        }
        let row = ParquetRow {
            topic,
            partition,
            offset: data.offset,
            timestamp_ms: data.timestamp_ms,
            key: data.key(),
            value: text,
            fields: fields.as_deref(),
            kinds: data.value_kinds(),
        };
        match self.settings.format {
            FileFormat::Jsonl => {
                let mut line = Vec::with_capacity(text.len() + 128);
                let record = OutputRecord {
                    row,
                    topic_json,
                    typed: None,
                };
                // Writing into a Vec cannot fail.
                let _ = crate::sink::files::write_line(&mut line, &record, &self.settings);
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                Expected::Written(row_hash(&line), String::from_utf8_lossy(&line).into_owned())
            }
            FileFormat::Parquet => {
                let mut pieces: Vec<(String, String)> = Vec::new();
                let whole = match row.fields {
                    Some(fields) => {
                        for (name, raw) in fields {
                            if let Some(text) = field_text(raw) {
                                pieces.push((name.to_string(), text));
                            }
                        }
                        None
                    }
                    None => Some(text),
                };
                let form = ParquetForm {
                    partition,
                    offset: data.offset,
                    timestamp_ms: data.timestamp_ms,
                    key: data.key(),
                    whole,
                    fields: pieces,
                };
                form.expected()
            }
        }
    }
}

/// A JSON value as a Parquet file holds it, as text (`None`: null, which a file does not tell
/// from an absent field): a string's text, an integer in decimal, another number as the
/// `f64` it is stored as, `true`/`false`, an object or array as its JSON text.
fn field_text(raw: &RawValue) -> Option<String> {
    let text = raw.get().trim();
    match text.as_bytes().first() {
        None => None,
        Some(b'n') if text == "null" => None,
        Some(b'"') => serde_json::from_str::<String>(text).ok(),
        Some(b'-' | b'0'..=b'9') => Some(match text.parse::<i64>() {
            Ok(n) => n.to_string(),
            Err(_) => text
                .parse::<f64>()
                .map_or_else(|_| text.to_owned(), |f| f.to_string()),
        }),
        _ => Some(raw.get().to_owned()),
    }
}

/// A Parquet row's compared content.
struct ParquetForm<'a> {
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<&'a [u8]>,
    /// A value that is not an object (held whole in `_extra`).
    whole: Option<&'a str>,
    /// Field name and text, any order.
    fields: Vec<(String, String)>,
}

impl ParquetForm<'_> {
    /// Its hash and its text (a JSON object, to show).
    fn expected(mut self) -> Expected {
        self.fields.sort();
        let mut form = Vec::new();
        let mut piece = |bytes: Option<&[u8]>| match bytes {
            None => form.push(b'N'),
            Some(bytes) => {
                form.push(b'V');
                form.extend_from_slice(bytes.len().to_string().as_bytes());
                form.push(b':');
                form.extend_from_slice(bytes);
            }
        };
        piece(Some(self.partition.to_string().as_bytes()));
        piece(Some(self.offset.to_string().as_bytes()));
        piece(
            self.timestamp_ms
                .map(|t| t.to_string())
                .as_deref()
                .map(str::as_bytes),
        );
        piece(self.key);
        piece(self.whole.map(str::as_bytes));
        for (name, text) in &self.fields {
            piece(Some(name.as_bytes()));
            piece(Some(text.as_bytes()));
        }
        let shown = serde_json::json!({
            "_partition": self.partition,
            "_offset": self.offset,
            "_timestamp_ms": self.timestamp_ms,
            "_key": self.key.map(|k| String::from_utf8_lossy(k).into_owned()),
            "value": match self.whole {
                Some(whole) => Value::String(whole.to_owned()),
                None => Value::Object(
                    self.fields
                        .iter()
                        .map(|(n, t)| (n.clone(), Value::String(t.clone())))
                        .collect(),
                ),
            },
        });
        Expected::Written(row_hash(&form), shown.to_string())
    }
}

/// A committed output file of a topic.
#[derive(Debug, Clone)]
struct OutputFile {
    path: PathBuf,
    partition: i32,
    sub: u32,
    first: i64,
}

/// One record read from a file.
struct FileRecord {
    partition: i32,
    offset: i64,
    hash: i64,
    text: String,
}

/// Parses `part-<topic>+<partition>+s<sub>+<first>-<last>.<ext>`: topic, partition, sub,
/// first offset.
fn parse_name(name: &str) -> Option<(&str, i32, u32, i64)> {
    let stem = name.strip_prefix("part-")?;
    // Topic names hold dots: the extension starts at the first dot after the last `+`.
    let mut parts = stem.rsplitn(4, '+');
    let range = parts.next()?;
    let range = &range[..range.find('.')?];
    let sub = parts.next()?.strip_prefix('s')?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    let topic = parts.next()?;
    let (first, _) = range.split_once('-')?;
    Some((topic, partition, sub, first.parse().ok()?))
}

/// The committed files under `root` (the state directory left out), by topic.
fn list_files(root: &Path) -> anyhow::Result<BTreeMap<String, Vec<OutputFile>>> {
    let mut out: BTreeMap<String, Vec<OutputFile>> = BTreeMap::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list the directory {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if dir == root && entry.file_name() == STATE_DIR {
                    continue;
                }
                dirs.push(path);
            } else if kind.is_file()
                && let Some((topic, partition, sub, first)) =
                    entry.file_name().to_str().and_then(parse_name)
            {
                out.entry(topic.to_owned()).or_default().push(OutputFile {
                    path,
                    partition,
                    sub,
                    first,
                });
            }
        }
    }
    Ok(out)
}

/// Reads the records of a file, calling `each`; a line or row that cannot be read is a
/// problem (`Err` text, with where).
fn read_file(
    file: &Path,
    format: FileFormat,
    mut each: impl FnMut(Result<FileRecord, String>),
) -> anyhow::Result<()> {
    let opened = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let name = file.to_string_lossy();
    if format == FileFormat::Parquet {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(opened)
            .and_then(|b| b.build());
        let reader = match reader {
            Ok(reader) => reader,
            Err(error) => {
                each(Err(format!("{name}: not a readable Parquet file: {error}")));
                return Ok(());
            }
        };
        for batch in reader {
            match batch {
                Ok(batch) => parquet_rows(&batch, &name, &mut each),
                Err(error) => {
                    each(Err(format!("{name}: {error}")));
                    return Ok(());
                }
            }
        }
        return Ok(());
    }
    let body: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(opened))
    } else if name.ends_with(".zst") {
        Box::new(zstd::stream::read::Decoder::new(opened)?)
    } else {
        Box::new(opened)
    };
    let mut reader = BufReader::with_capacity(1 << 18, body);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(error) => {
                each(Err(format!("{name}: after line {number}: {error}")));
                return Ok(());
            }
        }
        number += 1;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        each(line_record(&line).map_err(|problem| format!("{name} line {number}: {problem}")));
    }
}

/// A JSON line's partition and offset (its first `_partition` and `_offset` fields, the
/// metadata the sink puts first), its hash and text.
fn line_record(line: &[u8]) -> Result<FileRecord, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_owned())?;
    let fields = parse_object(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.get());
    let partition = field("_partition")
        .and_then(|v| v.parse().ok())
        .ok_or("no _partition")?;
    let offset = field("_offset")
        .and_then(|v| v.parse().ok())
        .ok_or("no _offset")?;
    Ok(FileRecord {
        partition,
        offset,
        hash: row_hash(line),
        text: text.to_owned(),
    })
}

/// The rows of a Parquet batch as [`FileRecord`]s.
fn parquet_rows(
    batch: &RecordBatch,
    name: &str,
    each: &mut impl FnMut(Result<FileRecord, String>),
) {
    let schema = batch.schema();
    let column = |n: &str| schema.index_of(n).ok().map(|i| batch.column(i));
    let (Some(partition), Some(offset)) = (column("_partition"), column("_offset")) else {
        return each(Err(format!("{name}: no _partition or _offset column")));
    };
    let (Some(partition), Some(offset)) = (
        partition.as_primitive_opt::<Int32Type>(),
        offset.as_primitive_opt::<Int64Type>(),
    ) else {
        return each(Err(format!(
            "{name}: _partition or _offset of another type"
        )));
    };
    let timestamp = column("_timestamp_ms").and_then(|c| c.as_primitive_opt::<Int64Type>());
    let key = column("_key").and_then(|c| c.as_binary_opt::<i32>());
    let extra = column("_extra").and_then(|c| c.as_string_opt::<i32>());
    let values: Vec<(String, &dyn Array)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| !METADATA.contains(&f.name().as_str()))
        .map(|(f, c)| (f.name().clone(), c.as_ref()))
        .collect();
    for row in 0..batch.num_rows() {
        if partition.is_null(row) || offset.is_null(row) {
            each(Err(format!("{name} row {row}: null _partition or _offset")));
            continue;
        }
        let mut fields = Vec::new();
        let mut problem = None;
        for (field, array) in &values {
            if array.is_null(row) {
                continue;
            }
            let text = match array.data_type() {
                DataType::Utf8 => array.as_string::<i32>().value(row).to_owned(),
                DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
                DataType::Float64 => array.as_primitive::<Float64Type>().value(row).to_string(),
                DataType::Boolean => array.as_boolean().value(row).to_string(),
                other => {
                    problem = Some(format!("column {field} of type {other}"));
                    continue;
                }
            };
            fields.push((field.clone(), text));
        }
        let mut whole = None;
        if let Some(extra) = extra.filter(|e| !e.is_null(row)) {
            let text = extra.value(row);
            match parse_object(text) {
                Ok(members) => {
                    for (n, raw) in members {
                        if let Some(text) = field_text(raw) {
                            fields.push((n.into_owned(), text));
                        }
                    }
                }
                Err(_) => whole = Some(text),
            }
        }
        if let Some(problem) = problem {
            each(Err(format!("{name} row {row}: {problem}")));
            continue;
        }
        let form = ParquetForm {
            partition: partition.value(row),
            offset: offset.value(row),
            timestamp_ms: timestamp.filter(|t| !t.is_null(row)).map(|t| t.value(row)),
            key: key.filter(|k| !k.is_null(row)).map(|k| k.value(row)),
            whole,
            fields,
        };
        let (partition, offset) = (form.partition, form.offset);
        if let Expected::Written(hash, text) = form.expected() {
            each(Ok(FileRecord {
                partition,
                offset,
                hash,
                text,
            }));
        }
    }
}

/// The metadata columns of a Parquet output file.
const METADATA: &[&str] = &[
    "_topic",
    "_partition",
    "_offset",
    "_timestamp_ms",
    "_key",
    "_extra",
];

/// One partition's cut: per sub-partition the last committed offset and the skipped offsets.
#[derive(Debug, Default, Clone)]
struct PartitionCut {
    last: Vec<i64>,
    skipped: HashSet<i64>,
}

impl PartitionCut {
    fn takes(&self, sub: u32, offset: i64) -> bool {
        self.last.get(sub as usize).is_some_and(|&l| offset <= l) && !self.skipped.contains(&offset)
    }

    fn end(&self) -> i64 {
        self.last.iter().copied().max().unwrap_or(-1) + 1
    }
}

/// Verifies a Kafka → files pipeline's output root against its topics.
///
/// # Errors
///
/// It could not verify: no output root, an object store, the brokers.
pub async fn verify_files(
    config: &SinkPipelineConfig,
    files: &FilesSinkConfig,
    limits: &Limits,
) -> anyhow::Result<Report> {
    if let Some(url) = &files.url {
        anyhow::bail!(
            "sink.files.url = {url:?}: verify reads local output roots only (an object store's files: not yet)"
        );
    }
    if files.parquet_columns == crate::sink::config::ParquetColumns::Typed {
        anyhow::bail!(
            "sink.files.parquet_columns = \"typed\": verify compares the inferred layout's columns (typed files unwrap the events into the source row's columns: not yet)"
        );
    }
    if files.format == FileFormat::Jsonl && !files.metadata {
        anyhow::bail!(
            "sink.files.metadata = false: the lines do not carry their partition and offset, so they cannot be matched with the topic's records"
        );
    }
    let Some((root, subs)) = OutputRoot::open_existing(&files.path)
        .with_context(|| format!("cannot read the output root {}", files.path.display()))?
    else {
        anyhow::bail!(
            "{} holds no output root ({} is missing): has the sink run? (sink.files.path)",
            files.path.display(),
            crate::sink::files::ROOT_MARKER
        );
    };
    let writing = Writing::new(config, files)?;
    let kafka = config.kafka();
    let consumer = compare::consumer(&config.name, &kafka.brokers, &kafka.client)?;
    let topics = tokio::task::block_in_place(|| super::sink::topics(&consumer, config))?;
    let dead = match &config.delivery.dead_letter_topic {
        Some(topic) => tokio::task::block_in_place(|| dead_lettered(&consumer, topic))?,
        None => HashSet::new(),
    };
    let mut report = Report::new(format!(
        "the committed state of {} ({subs} sub-partition(s) per partition)",
        files.path.display()
    ));
    report.kind = "files";
    let started = Instant::now();
    for topic in &topics {
        let table = tokio::task::block_in_place(|| {
            verify_topic(
                &consumer, &root, subs, &writing, topic, &dead, limits, files,
            )
        });
        report.tables.push(table.unwrap_or_else(|error| {
            TableReport::not_verified(
                files.path.display().to_string(),
                topic.clone(),
                format!("{error:#}"),
            )
        }));
    }
    report.topic_ms = started.elapsed().as_millis() as u64;
    report.source_rows = report.tables.iter().map(|t| t.source_rows).sum();
    Ok(report)
}

/// The (topic, partition, offset) of every record in the dead-letter topic that a sink put
/// there (its `sluice.dlq.*` headers).
pub(super) fn dead_lettered(
    consumer: &BaseConsumer,
    topic: &str,
) -> anyhow::Result<HashSet<(String, i32, i64)>> {
    let mut found = HashSet::new();
    let ends = partitions(consumer, topic)?;
    let ranges: BTreeMap<i32, (i64, i64)> = ends.into_iter().collect();
    read_ranges(consumer, topic, &ranges, |message| {
        let header = |name: &str| {
            message.headers().and_then(|headers| {
                headers
                    .iter()
                    .filter(|h| h.key == name)
                    .last()
                    .and_then(|h| h.value)
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .map(str::to_owned)
            })
        };
        if let (Some(t), Some(p), Some(o)) = (
            header(crate::dead_letter::HEADER_TOPIC),
            header(crate::dead_letter::HEADER_PARTITION).and_then(|p| p.parse().ok()),
            header(crate::dead_letter::HEADER_OFFSET).and_then(|o| o.parse().ok()),
        ) {
            found.insert((t, p, o));
        }
    })
    .or_else(|error| {
        if error.is::<super::topic::MissingTopic>() {
            Ok(())
        } else {
            Err(error)
        }
    })?;
    Ok(found)
}

/// A topic's partitions and their low and high watermarks.
pub(super) fn partitions(
    consumer: &BaseConsumer,
    topic: &str,
) -> anyhow::Result<BTreeMap<i32, (i64, i64)>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .with_context(|| format!("cannot read the metadata of topic {topic}"))?;
    let meta = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .with_context(|| format!("topic {topic} not found"))?;
    if let Some(error) = meta.error() {
        let code = rdkafka::error::RDKafkaErrorCode::from(error);
        if code == rdkafka::error::RDKafkaErrorCode::UnknownTopicOrPartition {
            return Err(super::topic::MissingTopic(topic.to_owned()).into());
        }
        anyhow::bail!("topic {topic}: {code:?}");
    }
    let mut out = BTreeMap::new();
    for partition in meta.partitions() {
        let p = partition.id();
        let marks = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(30))
            .with_context(|| format!("cannot read the watermarks of {topic} partition {p}"))?;
        out.insert(p, marks);
    }
    Ok(out)
}

/// Reads each partition of `ranges` from its start to its end (exclusive), read committed.
pub(super) fn read_ranges(
    consumer: &BaseConsumer,
    topic: &str,
    ranges: &BTreeMap<i32, (i64, i64)>,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> anyhow::Result<()> {
    let mut assignment = TopicPartitionList::new();
    let mut pending: HashMap<i32, i64> = HashMap::new();
    for (&p, &(start, end)) in ranges {
        if end > start {
            assignment.add_partition_offset(topic, p, Offset::Offset(start))?;
            pending.insert(p, end);
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    consumer.assign(&assignment)?;
    while !pending.is_empty() {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(message)) => {
                let p = message.partition();
                let Some(&end) = pending.get(&p) else {
                    continue;
                };
                if message.offset() >= end {
                    pending.remove(&p);
                    continue;
                }
                each(&message);
                if message.offset() + 1 >= end {
                    pending.remove(&p);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            Some(Err(error)) => return Err(error).context(format!("reading topic {topic}")),
            None => {}
        }
    }
    consumer.unassign()?;
    Ok(())
}

/// The cut of every partition of `topic`: the committed states.
fn cut_of(
    root: &OutputRoot,
    subs: u32,
    topic: &str,
    partitions: &BTreeMap<i32, (i64, i64)>,
) -> anyhow::Result<(BTreeMap<i32, PartitionCut>, StagedFiles)> {
    let mut cut = BTreeMap::new();
    let mut last_files = Vec::new();
    for &partition in partitions.keys() {
        let mut entry = PartitionCut {
            last: vec![-1; subs as usize],
            skipped: HashSet::new(),
        };
        for sub in 0..subs {
            let id = SubPartitionId {
                topic: topic.to_owned(),
                partition,
                sub,
            };
            let committed = root.committed(&id).with_context(|| {
                format!("cannot read the state of {topic}/{partition} sub-partition {sub}")
            })?;
            if let Some(committed) = committed {
                entry.last[sub as usize] = committed.last_offset;
                entry.skipped.extend(committed.skipped);
                last_files.extend(committed.files);
            }
        }
        cut.insert(partition, entry);
    }
    Ok((cut, last_files))
}

/// The files to read for `topic`: the listed ones, and the last epochs' files still under
/// their staged names.
fn files_of(
    listed: &BTreeMap<String, Vec<OutputFile>>,
    topic: &str,
    last_files: &[(PathBuf, PathBuf)],
) -> Vec<OutputFile> {
    let mut out: Vec<OutputFile> = listed.get(topic).cloned().unwrap_or_default();
    let known: HashSet<PathBuf> = out.iter().map(|f| f.path.clone()).collect();
    for (staged, fin) in last_files {
        if known.contains(fin) {
            continue;
        }
        // Renamed since the listing, or still under its staged name (the staged name first:
        // the sink renames, so the final name exists once the staged one is gone).
        let path = if staged.exists() {
            staged
        } else if fin.exists() {
            fin
        } else {
            continue;
        };
        if let Some((_, partition, sub, first)) = fin
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_name)
        {
            out.push(OutputFile {
                path: path.clone(),
                partition,
                sub,
                first,
            });
        }
    }
    out
}

/// What the comparison of one topic saw, besides the sums.
#[derive(Default)]
struct Seen {
    file_records: u64,
    topic_records: u64,
    after_cut: u64,
    below_start: u64,
    left_out: u64,
    problems: Vec<(String, Option<String>)>,
}

#[allow(clippy::too_many_arguments)]
fn verify_topic(
    consumer: &BaseConsumer,
    root: &OutputRoot,
    subs: u32,
    writing: &Writing,
    topic: &str,
    dead: &HashSet<(String, i32, i64)>,
    limits: &Limits,
    config: &FilesSinkConfig,
) -> anyhow::Result<TableReport> {
    let marks = partitions(consumer, topic)?;
    // The cut first: files committed after it only add offsets past it.
    let (cut, last_files) = cut_of(root, subs, topic, &marks)?;
    let listed = list_files(&config.path)?;
    let files = files_of(&listed, topic, &last_files);
    let topic_json = serde_json::to_string(topic)?;
    let mut seen = Seen::default();
    let low = |p: i32| marks.get(&p).map_or(0, |m| m.0);
    // The file side, per range.
    let mut file_sums = Sums::new();
    let mut unreadable: Vec<String> = Vec::new();
    let in_cut = |p: i32, sub: u32, offset: i64| cut.get(&p).is_some_and(|c| c.takes(sub, offset));
    for file in &files {
        let cut_last = cut
            .get(&file.partition)
            .and_then(|c| c.last.get(file.sub as usize).copied())
            .unwrap_or(-1);
        if file.first > cut_last {
            continue;
        }
        read_file(&file.path, writing.settings.format, |record| match record {
            Ok(r) => {
                if !in_cut(r.partition, file.sub, r.offset) {
                    seen.after_cut += 1;
                } else if r.offset < low(r.partition) {
                    seen.below_start += 1;
                } else {
                    seen.file_records += 1;
                    let sums = file_sums
                        .entry((r.partition, r.offset / RANGE_OFFSETS))
                        .or_default();
                    sums.0 += 1;
                    sums.1 += i128::from(r.hash);
                }
            }
            Err(problem) => unreadable.push(problem),
        })?;
    }
    // The topic side, per range, up to the cut.
    let ranges: BTreeMap<i32, (i64, i64)> = marks
        .iter()
        .map(|(&p, &(l, h))| (p, (l, cut.get(&p).map_or(0, PartitionCut::end).min(h))))
        .collect();
    let mut topic_sums = Sums::new();
    read_ranges(consumer, topic, &ranges, |message| {
        let p = message.partition();
        let offset = message.offset();
        let sub = sub_partition(message.key(), offset, subs);
        if !in_cut(p, sub, offset) {
            seen.after_cut += 1;
            return;
        }
        if dead.contains(&(topic.to_owned(), p, offset)) {
            seen.left_out += 1;
            return;
        }
        let data = RecordData::new(
            offset,
            message.key(),
            message.payload(),
            message.timestamp().to_millis(),
        );
        match writing.expected(topic, &topic_json, p, &data) {
            Expected::Written(hash, _) => {
                seen.topic_records += 1;
                let sums = topic_sums.entry((p, offset / RANGE_OFFSETS)).or_default();
                sums.0 += 1;
                sums.1 += i128::from(hash);
            }
            Expected::Skipped => seen.left_out += 1,
            Expected::Unwritable(reason) => {
                seen.left_out += 1;
                if seen.problems.len() < 5 {
                    seen.problems.push((format!("{p}/{offset}"), Some(reason)));
                }
            }
        }
    })?;
    let ids: BTreeSet<RangeId> = file_sums.keys().chain(topic_sums.keys()).copied().collect();
    let differing: Vec<RangeId> = ids
        .iter()
        .filter(|id| file_sums.get(id) != topic_sums.get(id))
        .copied()
        .collect();
    let mut table = TableReport::not_verified(
        config.path.display().to_string(),
        topic.to_owned(),
        String::new(),
    );
    table.status = TableStatus::Equal;
    table.reason = None;
    table.source_rows = seen.file_records;
    table.topic_keys = seen.topic_records;
    table.buckets = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    table.buckets_differing = differing.len() as u64;
    table.read.records = seen.topic_records + seen.left_out;
    table.read.after_position = seen.after_cut;
    table.read.unpositioned = seen.below_start;
    table.passes = 1;
    for problem in &unreadable {
        table.differences_found += 1;
        if table.differences.len() < limits.max_keys {
            table.differences.push(Difference {
                kind: DifferenceKind::Unreadable,
                key: Value::Null,
                key_text: Vec::new(),
                source: Some(Value::String(problem.clone())),
                topic: None,
                columns: Vec::new(),
            });
        }
    }
    // Narrowing: the differing ranges, as many as fit in --narrow-rows.
    let mut narrowed: Vec<RangeId> = Vec::new();
    let mut held = 0u64;
    for id in &differing {
        let rows = file_sums.get(id).map_or(0, |s| s.0) + topic_sums.get(id).map_or(0, |s| s.0);
        if !narrowed.is_empty() && held + rows > limits.narrow_rows {
            break;
        }
        held += rows;
        narrowed.push(*id);
    }
    table.buckets_narrowed = narrowed.len() as u64;
    if !narrowed.is_empty() {
        let wanted: HashSet<RangeId> = narrowed.iter().copied().collect();
        let mut in_files: BTreeMap<(i32, i64), Vec<FileCopy>> = BTreeMap::new();
        for file in &files {
            let path = file.path.display().to_string();
            read_file(&file.path, writing.settings.format, |record| {
                if let Ok(r) = record
                    && wanted.contains(&(r.partition, r.offset / RANGE_OFFSETS))
                    && in_cut(r.partition, file.sub, r.offset)
                    && r.offset >= low(r.partition)
                {
                    in_files.entry((r.partition, r.offset)).or_default().push((
                        r.hash,
                        r.text,
                        path.clone(),
                    ));
                }
            })?;
        }
        let mut in_topic: BTreeMap<(i32, i64), (i64, String)> = BTreeMap::new();
        let mut narrow_ranges: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        for &(p, r) in &narrowed {
            let (start, end) = (r * RANGE_OFFSETS, (r + 1) * RANGE_OFFSETS);
            let span = narrow_ranges.entry(p).or_insert((start, end));
            span.0 = span.0.min(start);
            span.1 = span.1.max(end);
        }
        for (p, span) in &mut narrow_ranges {
            let (l, h) = ranges.get(p).copied().unwrap_or((0, 0));
            span.0 = span.0.max(l);
            span.1 = span.1.min(h);
        }
        read_ranges(consumer, topic, &narrow_ranges, |message| {
            let p = message.partition();
            let offset = message.offset();
            if !wanted.contains(&(p, offset / RANGE_OFFSETS))
                || !in_cut(p, sub_partition(message.key(), offset, subs), offset)
                || dead.contains(&(topic.to_owned(), p, offset))
            {
                return;
            }
            let data = RecordData::new(
                offset,
                message.key(),
                message.payload(),
                message.timestamp().to_millis(),
            );
            if let Expected::Written(hash, text) = writing.expected(topic, &topic_json, p, &data) {
                in_topic.insert((p, offset), (hash, text));
            }
        })?;
        let offsets: BTreeSet<(i32, i64)> =
            in_files.keys().chain(in_topic.keys()).copied().collect();
        let mut found_ranges: BTreeSet<RangeId> = BTreeSet::new();
        for at in offsets {
            let file = in_files.get(&at);
            let expected = in_topic.get(&at);
            let (kind, shown_file) = match (file.map(Vec::as_slice), expected) {
                (None | Some([]), Some(_)) => (DifferenceKind::MissingInFiles, None),
                (Some([one]), Some((hash, _))) if one.0 == *hash => continue,
                (Some([one]), Some(_)) => (DifferenceKind::Differs, Some(one)),
                (Some([one, ..]), Some(_)) => (DifferenceKind::Duplicated, Some(one)),
                (Some([one, ..]), None) => (DifferenceKind::MissingInTopic, Some(one)),
                (None | Some([]), None) => continue,
            };
            found_ranges.insert((at.0, at.1 / RANGE_OFFSETS));
            table.differences_found += 1;
            if table.differences.len() < limits.max_keys {
                // Every file holding the offset, when several do.
                let files: Vec<Value> = file
                    .filter(|f| f.len() > 1)
                    .map(|f| {
                        f.iter()
                            .map(|(_, _, path)| Value::String(path.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                table.differences.push(Difference {
                    kind,
                    key: serde_json::json!({"partition": at.0, "offset": at.1}),
                    key_text: Vec::new(),
                    source: shown_file.map(|(_, text, path)| {
                        let mut shown = serde_json::json!({"file": path, "record": shown(text)});
                        if !files.is_empty() {
                            shown["files"] = Value::Array(files);
                        }
                        shown
                    }),
                    topic: expected.map(|(_, text)| Value::String(shown(text))),
                    columns: Vec::new(),
                });
            }
        }
        // A narrowed range whose sums differ but whose records all match cannot be: count
        // what was compared key by key exactly.
        let narrowed_set: BTreeSet<RangeId> = narrowed.iter().copied().collect();
        table.buckets_differing = differing
            .iter()
            .filter(|id| !narrowed_set.contains(id) || found_ranges.contains(id))
            .count() as u64;
    }
    if let Some((at, Some(reason))) = seen.problems.first() {
        table.read.first_problem = Some(format!(
            "{} record(s) the sink cannot write were left out (dead-lettered, or the sink stopped there), e.g. offset {at}: {reason}",
            seen.left_out
        ));
    }
    if table.differences_found > 0 || table.buckets_differing > 0 {
        table.status = TableStatus::Differs;
    }
    Ok(table)
}

/// A record's text cut for the report.
pub(super) fn shown(text: &str) -> String {
    const MAX: usize = 2000;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_hostile_ones_do_not() {
        assert_eq!(
            parse_name("part-orders.v1+3+s2+100-199.jsonl.gz"),
            Some(("orders.v1", 3, 2, 100))
        );
        assert_eq!(
            parse_name("part-a+b+1+s0+5-9.parquet"),
            Some(("a+b", 1, 0, 5))
        );
        for bad in [
            "part-x",
            "part-x+1+0+5-9.jsonl",
            "x+1+s0+5-9.jsonl",
            "part-x+1+s0+5.jsonl",
            "part-+q+s0+1-2",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn field_texts_are_what_a_parquet_file_holds() {
        let text = |s: &str| field_text(&serde_json::from_str::<Box<RawValue>>(s).unwrap());
        assert_eq!(text("null"), None);
        assert_eq!(text(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(text("-0").as_deref(), Some("0"));
        assert_eq!(text("1.50").as_deref(), Some("1.5"));
        assert_eq!(text("5.0").as_deref(), Some("5"));
        assert_eq!(text(r#"{"a": 1}"#).as_deref(), Some(r#"{"a": 1}"#));
        assert_eq!(text("true").as_deref(), Some("true"));
    }

    #[test]
    fn a_line_without_its_offset_is_a_problem() {
        assert!(line_record(br#"{"_topic":"t","_partition":0,"_offset":7,"a":1}"#).is_ok());
        assert!(line_record(br#"{"_topic":"t","_partition":0}"#).is_err());
        assert!(line_record(b"\xff\xfe").is_err());
        assert!(line_record(b"[1,2]").is_err());
        // A value field of the same name comes after the metadata: the first one counts.
        let r = line_record(br#"{"_partition":1,"_offset":7,"_offset":9}"#).unwrap();
        assert_eq!((r.partition, r.offset), (1, 7));
    }
}
