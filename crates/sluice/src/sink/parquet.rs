//! One Parquet output file.
//!
//! The Arrow schema is inferred per file from the first record written to it (cheap: the
//! record's top-level fields are already split for the path template):
//!
//! - metadata columns: `_topic` (utf8), `_partition` (int32), `_offset` (int64),
//!   `_timestamp_ms` (int64, nullable), `_key` (binary, nullable: the key bytes as they were);
//! - one nullable column per top-level field of the first record's value: a JSON string
//!   becomes utf8, an integer int64, another number float64, a boolean boolean, and null,
//!   objects and arrays become utf8 holding the JSON text (Debezium's `before`/`after`/
//!   `source`);
//! - `_extra` (utf8, nullable): a JSON object of the fields of later records that the
//!   schema has no column for or whose value does not fit the column's type, or the whole
//!   value when it is not a JSON object. Nothing is dropped.
//!
//! Each column is dictionary-encoded (Parquet's default) unless at least half of its values in
//! the file's first batch are distinct (and for `_offset`, which never repeats): such a
//! dictionary holds about every value again and costs a hash lookup per value, ~20 % of a
//! Parquet worker's time (bench/PROFILE.md, "Parquet: a dictionary only where values repeat").
//! The writer is created when that first batch is ready.
//!
//! Rows are buffered in Arrow builders and handed to the Parquet writer every
//! [`ENCODE_BATCH_ROWS`] rows or [`ENCODE_BATCH_BYTES`] of raw values; it encodes and
//! compresses them into the row group it is building and writes one every
//! `parquet_row_group_records` rows or `parquet_row_group_bytes` encoded bytes. Memory per open
//! file is bounded by a batch of raw rows plus one row group's encoded pages, whatever the
//! records' size.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;

/// Rows buffered in the Arrow builders before they go to the Parquet writer. Holding a whole
/// row group (65,536 rows by default) as builders, then as arrays while it was encoded, put
/// the files sink's peak RSS ~40 MiB above its JSON Lines figure (bench/PROFILE.md, "Sink
/// memory"); the encoded pages of a row group are a fraction of the raw rows.
pub const ENCODE_BATCH_ROWS: usize = 8192;
/// Raw bytes buffered in the Arrow builders before they go to the Parquet writer, whichever of
/// this and [`ENCODE_BATCH_ROWS`] comes first: 8,192 rows of 4 KB values would hold 32 MiB.
pub const ENCODE_BATCH_BYTES: usize = 4 << 20;
/// The fewest values of a column in a file's first batch from which their distinct share
/// decides its dictionary; a smaller sample keeps the default (a dictionary).
const DICTIONARY_SAMPLE_MIN: usize = 64;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::value::RawValue;

use crate::sink::config::FileCompression;

/// Names of the metadata columns (value fields with these names go to `_extra`).
const RESERVED: &[&str] = &[
    "_topic",
    "_partition",
    "_offset",
    "_timestamp_ms",
    "_key",
    "_extra",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Int,
    Float,
    Bool,
    Json,
}

enum Builder {
    Str(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
}

struct Column {
    kind: Kind,
    builder: Builder,
}

impl Column {
    fn new(kind: Kind) -> Self {
        let builder = match kind {
            Kind::Str | Kind::Json => Builder::Str(StringBuilder::new()),
            Kind::Int => Builder::Int(Int64Builder::new()),
            Kind::Float => Builder::Float(Float64Builder::new()),
            Kind::Bool => Builder::Bool(BooleanBuilder::new()),
        };
        Self { kind, builder }
    }

    fn data_type(&self) -> DataType {
        match self.kind {
            Kind::Str | Kind::Json => DataType::Utf8,
            Kind::Int => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Bool => DataType::Boolean,
        }
    }

    /// Appends a JSON value; `false` when it does not fit this column's type.
    fn append(&mut self, raw: &RawValue) -> bool {
        let text = raw.get();
        if text == "null" {
            self.append_null();
            return true;
        }
        match (&mut self.builder, self.kind) {
            (Builder::Str(builder), Kind::Json) => {
                builder.append_value(text);
                true
            }
            (Builder::Str(builder), _) => {
                if !text.starts_with('"') {
                    return false;
                }
                // `raw` is valid JSON already: a string without a backslash is its text
                // between the quotes, with no second scan (memchr is vectorised).
                if memchr::memchr(b'\\', text.as_bytes()).is_none() {
                    builder.append_value(&text[1..text.len() - 1]);
                    return true;
                }
                match serde_json::from_str::<Cow<'_, str>>(text) {
                    Ok(value) => {
                        builder.append_value(value);
                        true
                    }
                    Err(_) => false,
                }
            }
            (Builder::Int(builder), _) => match text.parse::<i64>() {
                Ok(value) => {
                    builder.append_value(value);
                    true
                }
                Err(_) => false,
            },
            (Builder::Float(builder), _) => {
                let numeric = text
                    .as_bytes()
                    .first()
                    .is_some_and(|b| b.is_ascii_digit() || *b == b'-');
                match text.parse::<f64>() {
                    Ok(value) if numeric => {
                        builder.append_value(value);
                        true
                    }
                    _ => false,
                }
            }
            (Builder::Bool(builder), _) => match text {
                "true" => {
                    builder.append_value(true);
                    true
                }
                "false" => {
                    builder.append_value(false);
                    true
                }
                _ => false,
            },
        }
    }

    fn append_null(&mut self) {
        match &mut self.builder {
            Builder::Str(builder) => builder.append_null(),
            Builder::Int(builder) => builder.append_null(),
            Builder::Float(builder) => builder.append_null(),
            Builder::Bool(builder) => builder.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match &mut self.builder {
            Builder::Str(builder) => Arc::new(builder.finish()),
            Builder::Int(builder) => Arc::new(builder.finish()),
            Builder::Float(builder) => Arc::new(builder.finish()),
            Builder::Bool(builder) => Arc::new(builder.finish()),
        }
    }
}

fn infer(raw: &RawValue) -> Kind {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => Kind::Str,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'-' | b'0'..=b'9') if text.parse::<i64>().is_ok() => Kind::Int,
        Some(b'-' | b'0'..=b'9') => Kind::Float,
        _ => Kind::Json,
    }
}

/// One record as the Parquet writer takes it.
#[derive(Debug)]
pub struct ParquetRow<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// The whole value (JSON text).
    pub value: &'a str,
    /// Its top-level fields when it is an object, else `None`.
    pub fields: Option<&'a [(Cow<'a, str>, &'a RawValue)]>,
}

/// A file and the properties of its writer until its first batch is ready.
struct PendingWriter {
    file: File,
    props: WriterPropertiesBuilder,
}

/// The pending writer, taken to be opened (once).
fn take_pending(
    pending: &mut Option<PendingWriter>,
) -> Result<PendingWriter, parquet::errors::ParquetError> {
    pending.take().ok_or_else(|| {
        parquet::errors::ParquetError::General("the Parquet writer was already created".into())
    })
}

impl PendingWriter {
    /// The writer, its columns' dictionaries chosen from `first`, the file's first batch.
    fn open(
        self,
        schema: &SchemaRef,
        first: &RecordBatch,
    ) -> Result<ArrowWriter<BufWriter<File>>, parquet::errors::ParquetError> {
        let mut props = self.props;
        for (field, values) in schema.fields().iter().zip(first.columns()) {
            if mostly_distinct(values.as_ref()) {
                props = props
                    .set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), false);
            }
        }
        ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, self.file),
            Arc::clone(schema),
            Some(props.build()),
        )
    }
}

/// An open Parquet file; see the [module docs](self).
pub struct ParquetFile {
    /// Created from `pending` with the first batch, whose values choose the columns'
    /// dictionaries.
    writer: Option<ArrowWriter<BufWriter<File>>>,
    pending: Option<PendingWriter>,
    schema: SchemaRef,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: Int64Builder,
    key: BinaryBuilder,
    columns: Vec<Column>,
    index: FxHashMap<String, usize>,
    extra: StringBuilder,
    filled: Vec<bool>,
    buffered_rows: usize,
    buffered_bytes: usize,
    /// The writer's bytes written plus its estimate of the row group in progress, as of the
    /// last batch: they change only when a batch is written, and computing the estimate walks
    /// every column's encoder (3–4 % of a worker's time when it was done per record).
    encoded_bytes: usize,
    row_group_records: usize,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFile")
            .field("columns", &self.schema.fields().len())
            .field("buffered_rows", &self.buffered_rows)
            .finish_non_exhaustive()
    }
}

impl ParquetFile {
    /// Creates a file whose schema is inferred from `first`.
    ///
    /// # Errors
    ///
    /// When the writer cannot be created.
    pub fn create(
        file: File,
        first: &ParquetRow<'_>,
        compression: FileCompression,
        row_group_records: usize,
        row_group_bytes: usize,
    ) -> Result<Self, parquet::errors::ParquetError> {
        let mut fields = vec![
            Field::new("_topic", DataType::Utf8, false),
            Field::new("_partition", DataType::Int32, false),
            Field::new("_offset", DataType::Int64, false),
            Field::new("_timestamp_ms", DataType::Int64, true),
            Field::new("_key", DataType::Binary, true),
        ];
        let mut columns = Vec::new();
        let mut index = FxHashMap::default();
        for (name, raw) in first.fields.unwrap_or_default() {
            if RESERVED.contains(&name.as_ref()) || index.contains_key(name.as_ref()) {
                continue;
            }
            let column = Column::new(infer(raw));
            fields.push(Field::new(name.as_ref(), column.data_type(), true));
            index.insert(name.clone().into_owned(), columns.len());
            columns.push(column);
        }
        fields.push(Field::new("_extra", DataType::Utf8, true));
        let schema = Arc::new(Schema::new(fields));
        let compression = match compression {
            FileCompression::Zstd => Compression::ZSTD(ZstdLevel::default()),
            FileCompression::Snappy => Compression::SNAPPY,
            FileCompression::None | FileCompression::Gzip => Compression::UNCOMPRESSED,
        };
        let props = WriterProperties::builder()
            .set_compression(compression)
            // Offsets never repeat within a file, however few rows it has.
            .set_column_dictionary_enabled(ColumnPath::from("_offset"), false)
            .set_max_row_group_row_count(Some(row_group_records))
            .set_max_row_group_bytes(Some(row_group_bytes.max(1)));
        let filled = vec![false; columns.len()];
        Ok(Self {
            writer: None,
            pending: Some(PendingWriter { file, props }),
            schema,
            topic: StringBuilder::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: Int64Builder::new(),
            key: BinaryBuilder::new(),
            columns,
            index,
            extra: StringBuilder::new(),
            filled,
            buffered_rows: 0,
            buffered_bytes: 0,
            encoded_bytes: 0,
            row_group_records,
        })
    }

    /// Appends a row; writes a row group when enough rows are buffered.
    ///
    /// # Errors
    ///
    /// When the row group cannot be written.
    pub fn append(&mut self, row: &ParquetRow<'_>) -> Result<(), parquet::errors::ParquetError> {
        self.topic.append_value(row.topic);
        self.partition.append_value(row.partition);
        self.offset.append_value(row.offset);
        self.timestamp.append_option(row.timestamp_ms);
        self.key.append_option(row.key);
        self.filled.iter_mut().for_each(|f| *f = false);
        let mut extra = String::new();
        match row.fields {
            Some(fields) => {
                for (name, raw) in fields {
                    let fitted = match self.index.get(name.as_ref()) {
                        Some(&i) if !self.filled[i] => {
                            let ok = self.columns[i].append(raw);
                            self.filled[i] = ok;
                            ok
                        }
                        _ => false,
                    };
                    if !fitted {
                        extra.push(if extra.is_empty() { '{' } else { ',' });
                        // Keys come from valid JSON: re-escaping cannot fail.
                        extra.push_str(&serde_json::to_string(name.as_ref()).unwrap_or_default());
                        extra.push(':');
                        extra.push_str(raw.get());
                    }
                }
                if !extra.is_empty() {
                    extra.push('}');
                }
            }
            None => extra.push_str(row.value),
        }
        for (column, filled) in self.columns.iter_mut().zip(&self.filled) {
            if !filled {
                column.append_null();
            }
        }
        if extra.is_empty() {
            self.extra.append_null();
        } else {
            self.extra.append_value(&extra);
        }
        self.buffered_rows += 1;
        self.buffered_bytes += row.value.len() + row.key.map_or(0, <[u8]>::len) + 32;
        if self.buffered_rows >= ENCODE_BATCH_ROWS.min(self.row_group_records)
            || self.buffered_bytes >= ENCODE_BATCH_BYTES
        {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Bytes written plus an estimate of what is buffered.
    pub fn size(&self) -> u64 {
        (self.encoded_bytes + self.buffered_bytes) as u64
    }

    fn write_batch(&mut self) -> Result<(), parquet::errors::ParquetError> {
        if self.buffered_rows == 0 {
            return Ok(());
        }
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.key.finish()),
        ];
        arrays.extend(self.columns.iter_mut().map(Column::finish));
        arrays.push(Arc::new(self.extra.finish()));
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)?;
        let writer = match &mut self.writer {
            Some(writer) => writer,
            None => {
                let opened = take_pending(&mut self.pending)?.open(&self.schema, &batch)?;
                self.writer.insert(opened)
            }
        };
        // The writer closes a row group by itself when it reaches
        // `set_max_row_group_row_count` rows.
        writer.write(&batch)?;
        self.encoded_bytes = writer.bytes_written() + writer.in_progress_size();
        self.buffered_rows = 0;
        self.buffered_bytes = 0;
        Ok(())
    }

    /// Writes what is buffered and the footer; returns the file to be synced.
    ///
    /// # Errors
    ///
    /// When writing fails.
    pub fn finish(mut self) -> Result<File, parquet::errors::ParquetError> {
        self.write_batch()?;
        let writer = match self.writer.take() {
            Some(writer) => writer,
            // No row at all: a file with the schema and no row group.
            None => {
                let empty = RecordBatch::new_empty(Arc::clone(&self.schema));
                take_pending(&mut self.pending)?.open(&self.schema, &empty)?
            }
        };
        let buffered = writer.into_inner()?;
        buffered
            .into_inner()
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e.into_error())))
    }
}

/// Whether at least half of an array's values (of at least [`DICTIONARY_SAMPLE_MIN`]) are
/// distinct: a dictionary of them would be about as large as the values, and cost a hash
/// lookup per value to build. Stops counting once past half.
fn mostly_distinct(values: &dyn Array) -> bool {
    let present = values.len() - values.null_count();
    if present < DICTIONARY_SAMPLE_MIN {
        return false;
    }
    let limit = present / 2;
    match values.data_type() {
        DataType::Int64 => over(values.as_primitive::<Int64Type>().iter().flatten(), limit),
        DataType::Int32 => over(values.as_primitive::<Int32Type>().iter().flatten(), limit),
        DataType::Float64 => over(
            values
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .map(f64::to_bits),
            limit,
        ),
        DataType::Utf8 => over(values.as_string::<i32>().iter().flatten(), limit),
        DataType::Binary => over(values.as_binary::<i32>().iter().flatten(), limit),
        // Booleans have no dictionary in Parquet.
        _ => false,
    }
}

/// Whether `values` hold more than `limit` distinct ones.
fn over<T: std::hash::Hash + Eq>(mut values: impl Iterator<Item = T>, limit: usize) -> bool {
    let mut seen = FxHashSet::default();
    values.any(|value| seen.insert(value) && seen.len() > limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::template::parse_object;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// What [`write_rows`] wrote.
    struct Written {
        /// The row groups' (rows, uncompressed bytes).
        groups: Vec<(i64, i64)>,
        /// The offsets read back.
        offsets: Vec<i64>,
        /// The most rows held as builders at once.
        peak_in_progress: usize,
        /// The columns whose chunk in the first group has a dictionary.
        dictionaries: Vec<String>,
        /// `size()` after the last row, and the finished file's length.
        last_size: u64,
        file_len: u64,
    }

    /// Writes `total` rows of ~`text` bytes each.
    fn write_rows(
        name: &str,
        total: i64,
        text: usize,
        row_group_records: usize,
        row_group_bytes: usize,
    ) -> Written {
        let dir = std::env::temp_dir().join(format!("sluice-pq-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let mut file = None;
        let mut peak_in_progress = 0;
        let mut last_size = 0;
        for offset in 0..total {
            // Pseudo-random letters (a 64-bit LCG seeded by the offset) so that neither the
            // dictionary nor the compression folds the rows together.
            let mut state = (offset as u64).wrapping_mul(6_364_136_223_846_793_005) | 1;
            let text: String = (0..text)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    char::from(b'a' + ((state >> 33) % 26) as u8)
                })
                .collect();
            let kind = offset % 3;
            let value =
                format!(r#"{{"id":{offset},"text":"row {offset} {text}","kind":"k{kind}"}}"#);
            let fields = parse_object(&value).ok();
            let row = ParquetRow {
                topic: "t",
                partition: 0,
                offset,
                timestamp_ms: None,
                key: None,
                value: &value,
                fields: fields.as_deref(),
            };
            let writer = file.get_or_insert_with(|| {
                ParquetFile::create(
                    File::create(&path).unwrap(),
                    &row,
                    FileCompression::Snappy,
                    row_group_records,
                    row_group_bytes,
                )
                .unwrap()
            });
            writer.append(&row).unwrap();
            peak_in_progress = peak_in_progress.max(writer.buffered_rows);
            last_size = writer.size();
        }
        file.unwrap().finish().unwrap().sync_all().unwrap();
        let file_len = std::fs::metadata(&path).unwrap().len();
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let groups = builder
            .metadata()
            .row_groups()
            .iter()
            .map(|g| (g.num_rows(), g.total_byte_size()))
            .collect();
        let first = builder.metadata().row_group(0);
        let dictionaries = first
            .columns()
            .iter()
            .filter(|chunk| chunk.dictionary_page_offset().is_some())
            .map(|chunk| chunk.column_path().string())
            .collect();
        let offsets = builder
            .build()
            .unwrap()
            .flat_map(|b| {
                b.unwrap()
                    .column(2)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        Written {
            groups,
            offsets,
            peak_in_progress,
            dictionaries,
            last_size,
            file_len,
        }
    }

    #[test]
    fn row_groups_keep_their_size_while_rows_are_encoded_in_batches() {
        // Row groups of 20,000 rows fed in batches of ENCODE_BATCH_ROWS: 20,000, 20,000, 5,000.
        let total = 45_000;
        let Written {
            groups,
            offsets,
            peak_in_progress,
            dictionaries,
            ..
        } = write_rows("rows", total, 64, 20_000, usize::MAX);
        // The columns whose values repeat have a dictionary (so do those of nulls only, as
        // by default); `_offset`, `id` and `text`, every value distinct, have none.
        assert_eq!(
            dictionaries,
            [
                "_topic",
                "_partition",
                "_timestamp_ms",
                "_key",
                "kind",
                "_extra"
            ],
            "the columns with a dictionary"
        );
        assert_eq!(
            peak_in_progress,
            ENCODE_BATCH_ROWS - 1,
            "rows held as builders"
        );
        let rows: Vec<i64> = groups.iter().map(|g| g.0).collect();
        assert_eq!(rows, [20_000, 20_000, 5_000]);
        assert_eq!(offsets, (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn large_rows_close_a_row_group_at_its_byte_limit() {
        // 20,000 rows of ~1 KB of random letters (~20 MB) against a 65,536-row limit and a
        // 1 MiB byte limit (encoded bytes, what the writer holds until the group is written):
        // a group closes at the first encode batch (ENCODE_BATCH_BYTES of raw rows, ~4,000
        // rows here) that takes it past the limit, so no open file holds a 20 MB row group.
        let total = 20_000;
        let limit = 1 << 20;
        let Written {
            groups,
            offsets,
            peak_in_progress,
            last_size,
            file_len,
            ..
        } = write_rows("bytes", total, 1000, 65_536, limit);
        // The size `roll_bytes` is checked against counts what the writer has encoded, not
        // only the rows still held as builders (at most ENCODE_BATCH_BYTES, a fifth of this
        // file).
        assert!(
            last_size >= file_len / 2,
            "size() {last_size} for a file of {file_len} bytes"
        );
        assert!(
            peak_in_progress < ENCODE_BATCH_ROWS / 2,
            "rows held as builders: {peak_in_progress}"
        );
        assert!(groups.len() >= 5, "row groups: {groups:?}");
        for (rows, bytes) in &groups {
            assert!(
                *bytes <= (ENCODE_BATCH_BYTES + limit) as i64,
                "a row group of {rows} rows holds {bytes} bytes: {groups:?}"
            );
        }
        assert_eq!(offsets, (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn schema_from_first_record_and_extra_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("sluice-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let values = [
            r#"{"id":"a","n":1,"x":1.5,"ok":true,"after":{"k":1}}"#,
            r#"{"id":"b \"q\" \u00e9","n":"two","new":3}"#,
            r#"[1,2]"#,
        ];
        let mut file = None;
        for (offset, value) in values.iter().enumerate() {
            let fields = parse_object(value).ok();
            let row = ParquetRow {
                topic: "t",
                partition: 1,
                offset: offset as i64,
                timestamp_ms: Some(5),
                key: Some(b"k"),
                value,
                fields: fields.as_deref(),
            };
            let writer = file.get_or_insert_with(|| {
                ParquetFile::create(
                    File::create(&path).unwrap(),
                    &row,
                    FileCompression::Zstd,
                    2,
                    usize::MAX,
                )
                .unwrap()
            });
            writer.append(&row).unwrap();
        }
        file.unwrap().finish().unwrap().sync_all().unwrap();

        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 3);
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "_topic",
                "_partition",
                "_offset",
                "_timestamp_ms",
                "_key",
                "id",
                "n",
                "x",
                "ok",
                "after",
                "_extra"
            ]
        );
        let offsets: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(2).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(offsets, [0, 1, 2]);
        let strings = |column: usize| -> Vec<Option<String>> {
            batches
                .iter()
                .flat_map(|b| {
                    b.column(column)
                        .as_string::<i32>()
                        .iter()
                        .map(|v| v.map(str::to_owned))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert_eq!(
            strings(10),
            [
                None,
                Some(r#"{"n":"two","new":3}"#.to_owned()),
                Some("[1,2]".to_owned())
            ]
        );
        // Strings come unescaped, with and without escapes in the JSON.
        assert_eq!(
            strings(5),
            [Some("a".to_owned()), Some("b \"q\" é".to_owned()), None]
        );
        let after = batches[0].column(9).as_string::<i32>().value(0).to_owned();
        assert_eq!(after, r#"{"k":1}"#);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
