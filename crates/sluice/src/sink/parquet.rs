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
//!   `source`); a record read from Avro ([`crate::sink::avro`]) brings its fields' kinds from
//!   its schema instead ([`ParquetRow::kinds`]: a field that is null in the first record gets
//!   its schema's type);
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

use std::marker::PhantomData;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, NullBufferBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ByteArrayType, Float64Type, GenericBinaryType, GenericStringType, Int32Type, Int64Type,
};
use arrow_array::{Array, ArrayRef, GenericByteArray, RecordBatch};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
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

/// A value column's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// utf8 of a JSON string's text.
    Str,
    /// int64.
    Int,
    /// float64.
    Float,
    /// boolean.
    Bool,
    /// utf8 of any JSON value's text (objects, arrays).
    Json,
}

enum Builder {
    Str(ReusedBytes<Utf8>),
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
            Kind::Str | Kind::Json => Builder::Str(ReusedBytes::new()),
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
                builder.append_value(text.as_bytes());
                true
            }
            (Builder::Str(builder), _) => {
                if !text.starts_with('"') {
                    return false;
                }
                // `raw` is valid JSON already: a string without a backslash is its text
                // between the quotes, with no second scan (memchr is vectorised).
                if memchr::memchr(b'\\', text.as_bytes()).is_none() {
                    builder.append_value(&text.as_bytes()[1..text.len() - 1]);
                    return true;
                }
                match serde_json::from_str::<Cow<'_, str>>(text) {
                    Ok(value) => {
                        builder.append_value(value.as_bytes());
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

    fn finish(&mut self) -> Result<ArrayRef, parquet::errors::ParquetError> {
        Ok(match &mut self.builder {
            Builder::Str(builder) => Arc::new(builder.finish()?),
            Builder::Int(builder) => Arc::new(builder.finish()),
            Builder::Float(builder) => Arc::new(builder.finish()),
            Builder::Bool(builder) => Arc::new(builder.finish()),
        })
    }

    /// Takes back the buffers of `array`, this column's array of the batch just written.
    fn recycle(&mut self, array: ArrayRef) -> bool {
        match &mut self.builder {
            Builder::Str(builder) => builder.recycle(array),
            Builder::Int(_) | Builder::Float(_) | Builder::Bool(_) => false,
        }
    }
}

type Utf8 = GenericStringType<i32>;
type Binary = GenericBinaryType<i32>;

/// A string or binary column's buffers, kept from batch to batch.
///
/// arrow's builders hand their buffers to each array they finish and start the next batch
/// from empty, doubling as they grow: that regrowth was the largest part of a Parquet
/// worker's allocations (per 2M bench records, 1.4 GB of mimalloc's 4 MiB pages and 0.9 GB of
/// blocks over 512 KiB), and mimalloc keeps what each worker frees committed for its purge
/// delay (bench/PROFILE.md, "Parquet memory: the workers' allocations"). Here the buffers go
/// into the batch's array and come back, emptied, once the Parquet writer has encoded it
/// ([`Self::recycle`]); arrow's builders cannot be refilled from a buffer without `unsafe`.
struct ReusedBytes<T: ByteArrayType<Offset = i32>> {
    /// Starts with 0; one end offset per row.
    offsets: Vec<i32>,
    values: Vec<u8>,
    nulls: NullBufferBuilder,
    /// A value ended past `i32::MAX` bytes (never from Kafka: a batch is written at
    /// [`ENCODE_BATCH_BYTES`]); [`Self::finish`] reports it instead of writing wrong offsets.
    overflowed: bool,
    kind: PhantomData<T>,
}

impl<T: ByteArrayType<Offset = i32>> ReusedBytes<T> {
    fn new() -> Self {
        Self {
            offsets: vec![0],
            values: Vec::new(),
            nulls: NullBufferBuilder::new(0),
            overflowed: false,
            kind: PhantomData,
        }
    }

    fn push_offset(&mut self) {
        match i32::try_from(self.values.len()) {
            Ok(end) => self.offsets.push(end),
            Err(_) => {
                self.overflowed = true;
                self.offsets.push(i32::MAX);
            }
        }
    }

    fn append_value(&mut self, value: &[u8]) {
        self.values.extend_from_slice(value);
        self.push_offset();
        self.nulls.append_non_null();
    }

    fn append_null(&mut self) {
        self.push_offset();
        self.nulls.append_null();
    }

    /// The array of the rows appended since the last batch (checked: UTF-8 for strings).
    fn finish(&mut self) -> Result<GenericByteArray<T>, parquet::errors::ParquetError> {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let values = std::mem::take(&mut self.values);
        let nulls = self.nulls.finish();
        if std::mem::take(&mut self.overflowed) {
            return Err(parquet::errors::ParquetError::General(format!(
                "a {} column's values in one batch exceed {} bytes",
                T::PREFIX,
                i32::MAX
            )));
        }
        let array = GenericByteArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(values),
            nulls,
        )?;
        Ok(array)
    }

    /// Takes back the buffers [`Self::finish`] gave `array`, emptied; `false` (and nothing
    /// kept) when `array` is not of this type or its buffers are still shared.
    fn recycle(&mut self, array: ArrayRef) -> bool {
        let Some(owned) = array
            .as_any()
            .downcast_ref::<GenericByteArray<T>>()
            .cloned()
        else {
            return false;
        };
        // The clone shares the buffers; dropping the batch's reference leaves it the only one.
        drop(array);
        let (offsets, values, _) = owned.into_parts();
        let (Ok(mut offsets), Ok(mut values)) = (
            offsets.into_inner().into_inner().into_vec::<i32>(),
            values.into_vec::<u8>(),
        ) else {
            return false;
        };
        offsets.clear();
        offsets.push(0);
        values.clear();
        self.offsets = offsets;
        self.values = values;
        true
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
    /// The kinds of the value's top-level fields when a schema gives them (Avro), over what the
    /// first record's values suggest.
    pub kinds: Option<&'a [(String, Kind)]>,
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
    topic: ReusedBytes<Utf8>,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: Int64Builder,
    key: ReusedBytes<Binary>,
    columns: Vec<Column>,
    index: FxHashMap<String, usize>,
    extra: ReusedBytes<Utf8>,
    filled: Vec<bool>,
    buffered_rows: usize,
    buffered_bytes: usize,
    /// The writer's bytes written plus its estimate of the row group in progress, as of the
    /// last batch: they change only when a batch is written, and computing the estimate walks
    /// every column's encoder (3–4 % of a worker's time when it was done per record).
    encoded_bytes: usize,
    row_group_records: usize,
    /// String and binary columns whose buffers came back after their batch was written.
    buffers_reused: u64,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFile")
            .field("columns", &self.schema.fields().len())
            .field("buffered_rows", &self.buffered_rows)
            .field("buffers_reused", &self.buffers_reused)
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
            let kind = first
                .kinds
                .and_then(|kinds| kinds.iter().find(|(field, _)| field == name.as_ref()))
                .map_or_else(|| infer(raw), |(_, kind)| *kind);
            let column = Column::new(kind);
            fields.push(Field::new(name.as_ref(), column.data_type(), true));
            index.insert(name.clone().into_owned(), columns.len());
            columns.push(column);
        }
        fields.push(Field::new("_extra", DataType::Utf8, true));
        let schema = Arc::new(Schema::new(fields));
        let props = WriterProperties::builder()
            .set_compression(self::compression(compression))
            // Offsets never repeat within a file, however few rows it has.
            .set_column_dictionary_enabled(ColumnPath::from("_offset"), false)
            .set_max_row_group_row_count(Some(row_group_records))
            .set_max_row_group_bytes(Some(row_group_bytes.max(1)));
        let filled = vec![false; columns.len()];
        Ok(Self {
            writer: None,
            pending: Some(PendingWriter { file, props }),
            schema,
            topic: ReusedBytes::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: Int64Builder::new(),
            key: ReusedBytes::new(),
            columns,
            index,
            extra: ReusedBytes::new(),
            filled,
            buffered_rows: 0,
            buffered_bytes: 0,
            encoded_bytes: 0,
            row_group_records,
            buffers_reused: 0,
        })
    }

    /// Appends a row; writes a row group when enough rows are buffered.
    ///
    /// # Errors
    ///
    /// When the row group cannot be written.
    pub fn append(&mut self, row: &ParquetRow<'_>) -> Result<(), parquet::errors::ParquetError> {
        self.topic.append_value(row.topic.as_bytes());
        self.partition.append_value(row.partition);
        self.offset.append_value(row.offset);
        self.timestamp.append_option(row.timestamp_ms);
        match row.key {
            Some(key) => self.key.append_value(key),
            None => self.key.append_null(),
        }
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
            self.extra.append_value(extra.as_bytes());
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
            Arc::new(self.topic.finish()?),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.key.finish()?),
        ];
        for column in &mut self.columns {
            arrays.push(column.finish()?);
        }
        arrays.push(Arc::new(self.extra.finish()?));
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
        self.recycle(batch);
        Ok(())
    }

    /// Takes the string and binary buffers of `batch`, just written, back into the builders.
    fn recycle(&mut self, batch: RecordBatch) {
        let (_, arrays, _) = batch.into_parts();
        let mut arrays = arrays.into_iter();
        let mut reused = 0;
        let mut next = || arrays.next();
        if let Some(topic) = next() {
            reused += u64::from(self.topic.recycle(topic));
        }
        // `_partition`, `_offset`, `_timestamp_ms`: fixed-width, 64 KiB a batch at most.
        let _ = (next(), next(), next());
        if let Some(key) = next() {
            reused += u64::from(self.key.recycle(key));
        }
        for column in &mut self.columns {
            if let Some(array) = next() {
                reused += u64::from(column.recycle(array));
            }
        }
        if let Some(extra) = next() {
            reused += u64::from(self.extra.recycle(extra));
        }
        self.buffers_reused += reused;
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

/// Parquet's codec for the sink's `compression` (gzip, JSON Lines' only, is refused by the
/// configuration's validation).
pub fn compression(compression: FileCompression) -> Compression {
    match compression {
        FileCompression::Zstd => Compression::ZSTD(ZstdLevel::default()),
        FileCompression::Snappy => Compression::SNAPPY,
        FileCompression::None | FileCompression::Gzip => Compression::UNCOMPRESSED,
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
        /// String and binary columns whose buffers came back for the next batch, before the
        /// file was finished.
        buffers_reused: u64,
        /// Rows read back whose `text` and `kind` are the ones written for their offset.
        rows_intact: usize,
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
        let mut buffers_reused = 0;
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
                kinds: None,
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
            buffers_reused = writer.buffers_reused;
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
        let mut offsets = Vec::new();
        let mut rows_intact = 0;
        for batch in builder.build().unwrap() {
            let batch = batch.unwrap();
            let column = |name| batch.column_by_name(name).unwrap().as_string::<i32>();
            let (text, kind) = (column("text"), column("kind"));
            for (row, &offset) in batch
                .column(2)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .enumerate()
            {
                offsets.push(offset);
                let expected_kind = format!("k{}", offset % 3);
                if text.value(row).starts_with(&format!("row {offset} "))
                    && kind.value(row) == expected_kind
                {
                    rows_intact += 1;
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        Written {
            groups,
            offsets,
            peak_in_progress,
            dictionaries,
            last_size,
            file_len,
            buffers_reused,
            rows_intact,
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
            buffers_reused,
            rows_intact,
            ..
        } = write_rows("rows", total, 64, 20_000, usize::MAX);
        // Every batch's string and binary buffers (`_topic`, `_key`, `text`, `kind`,
        // `_extra`) come back for the next: 5 full batches before the file is finished.
        assert_eq!(
            buffers_reused,
            5 * 5,
            "buffers taken back after their batch"
        );
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
        assert_eq!(rows_intact, total as usize, "rows read back as written");
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
    fn kinds_from_a_schema_type_columns_whose_first_value_is_null() {
        let dir = std::env::temp_dir().join(format!("sluice-pq-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let kinds = [
            ("n".to_owned(), Kind::Int),
            ("x".to_owned(), Kind::Float),
            ("s".to_owned(), Kind::Str),
        ];
        let values = [
            r#"{"n":null,"x":null,"s":null}"#,
            r#"{"n":7,"x":1.5,"s":"a"}"#,
        ];
        let mut file = None;
        for (offset, value) in values.iter().enumerate() {
            let fields = parse_object(value).ok();
            let row = ParquetRow {
                topic: "t",
                partition: 0,
                offset: offset as i64,
                timestamp_ms: None,
                key: None,
                value,
                fields: fields.as_deref(),
                kinds: Some(&kinds),
            };
            let writer = file.get_or_insert_with(|| {
                ParquetFile::create(
                    File::create(&path).unwrap(),
                    &row,
                    FileCompression::None,
                    100,
                    usize::MAX,
                )
                .unwrap()
            });
            writer.append(&row).unwrap();
        }
        file.unwrap().finish().unwrap().sync_all().unwrap();
        let batch = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let schema = batch.schema();
        let types: Vec<(&str, &DataType)> = schema
            .fields()
            .iter()
            .skip(5)
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(
            types,
            [
                ("n", &DataType::Int64),
                ("x", &DataType::Float64),
                ("s", &DataType::Utf8),
                ("_extra", &DataType::Utf8)
            ]
        );
        let n = batch.column(5).as_primitive::<Int64Type>();
        assert!(n.is_null(0));
        assert_eq!(n.value(1), 7);
        assert_eq!(batch.column(8).null_count(), 2, "nothing went to _extra");
        let _ = std::fs::remove_dir_all(&dir);
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
                kinds: None,
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
