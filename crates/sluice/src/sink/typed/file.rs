//! A Parquet file of typed columns: the files sink's `parquet_columns = "typed"`.
//!
//! The columns come from each record's Connect schema (JSON with schemas), by the Debezium
//! logical types the Iceberg sink uses ([`super::cells`]): decimals with their precision and
//! scale, dates, times and timestamps in microseconds (with the UTC zone for
//! `ZonedTimestamp`), UUIDs as 16 bytes, binary, JSON as text. A file's columns:
//!
//! - `_topic` (utf8), `_partition` (int32), `_offset` (int64), `_timestamp_ms` (int64,
//!   nullable), `_key` (binary, nullable), as in the inferred layout ([`crate::sink::parquet`]);
//! - the row's fields, nullable, in the schema's order: the value itself when it is a row (a
//!   change event unwrapped upstream by `ExtractNewRecordState`), or a Debezium change
//!   event's `after` row (`before` for a delete);
//! - for a change event, `_op` (utf8), `_event_ts` and `_source_ts` (timestamps, UTC) and
//!   `_source_position` (utf8: PostgreSQL's LSN, MySQL's `file:pos`), as in the Iceberg
//!   sink's `append` tables.
//!
//! A file holds one layout. A record whose schema makes another layout (a column added
//! upstream, another table routed to the topic) goes to the directory's open file of that
//! layout, or a new one the epoch starts for it ([`crate::sink::files::Epoch::write`]); file
//! names carry their first and last offsets, so all are kept. A value that does not fit its column fails the record,
//! which follows `delivery.on_failure`; nothing of it is written.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use arrow_schema::{Field, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::ArrowWriter;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::cells::{self, Cell, Read, Rows, iceberg_type};
use super::event::Event;
use crate::sink::config::FileCompression;
use crate::sink::parquet::{ENCODE_BATCH_BYTES, ENCODE_BATCH_ROWS, compression};
use crate::sink::postgres::decode::ConnectSchema;

/// The columns before the row's.
const METADATA: [&str; 5] = ["_topic", "_partition", "_offset", "_timestamp_ms", "_key"];
/// The columns after a change event's row.
const EVENT: [&str; 4] = ["_op", "_event_ts", "_source_ts", "_source_position"];

/// The columns of the files of one Connect schema.
#[derive(Debug)]
pub struct Layout {
    /// The row's schema it was made from (the same `Arc` while the schema text repeats).
    row: Arc<ConnectSchema>,
    /// Whether the records are change events (the `_op`… columns).
    envelope: bool,
    arrow: SchemaRef,
    /// The row's fields: name, column type, how its values are read.
    fields: Vec<(String, PrimitiveType, Read)>,
}

impl Layout {
    /// The layout of rows of `row` (`envelope`: from change events).
    ///
    /// # Errors
    ///
    /// A field named like one of the added columns, two fields of one name.
    pub fn new(row: &Arc<ConnectSchema>, envelope: bool) -> Result<Self, String> {
        let string = || Type::Primitive(PrimitiveType::String);
        let mut columns = vec![
            NestedField::required(1, METADATA[0], string()),
            NestedField::required(2, METADATA[1], Type::Primitive(PrimitiveType::Int)),
            NestedField::required(3, METADATA[2], Type::Primitive(PrimitiveType::Long)),
            NestedField::optional(4, METADATA[3], Type::Primitive(PrimitiveType::Long)),
            NestedField::optional(5, METADATA[4], Type::Primitive(PrimitiveType::Binary)),
        ];
        let mut fields = Vec::with_capacity(row.fields.len());
        for field in &row.fields {
            if METADATA.contains(&field.field.as_str())
                || (envelope && EVENT.contains(&field.field.as_str()))
            {
                return Err(format!(
                    "the row has a column {:?}, a name of the columns sluice adds",
                    field.field
                ));
            }
            let Type::Primitive(ty) = iceberg_type(&field.schema) else {
                return Err(format!("column {:?} is not a primitive", field.field));
            };
            columns.push(NestedField::optional(
                columns.len() as i32 + 1,
                &field.field,
                Type::Primitive(ty.clone()),
            ));
            fields.push((field.field.clone(), ty, Read::of(Some(&field.schema))));
        }
        if envelope {
            let tstz = || Type::Primitive(PrimitiveType::Timestamptz);
            for (name, ty) in EVENT.into_iter().zip([string(), tstz(), tstz(), string()]) {
                columns.push(NestedField::optional(columns.len() as i32 + 1, name, ty));
            }
        }
        let schema = Schema::builder()
            .with_fields(columns.into_iter().map(Arc::new))
            .build()
            .map_err(|e| format!("cannot make the file's columns from the row's schema: {e}"))?;
        let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).map_err(|e| e.to_string())?;
        // Iceberg's field ids mean nothing in a plain Parquet file: the fields go without them.
        let arrow = ArrowSchema::new(
            arrow
                .fields()
                .iter()
                .map(|f| Field::new(f.name(), f.data_type().clone(), f.is_nullable()))
                .collect::<Vec<_>>(),
        );
        Ok(Self {
            row: Arc::clone(row),
            envelope,
            arrow: Arc::new(arrow),
            fields,
        })
    }

    /// Whether this is the layout of rows of `row` (`envelope`: from change events).
    pub fn is_for(&self, row: &Arc<ConnectSchema>, envelope: bool) -> bool {
        self.envelope == envelope && (Arc::ptr_eq(&self.row, row) || *self.row == **row)
    }

    /// Whether files of this layout and of `other` have the same columns.
    pub fn same_columns(&self, other: &Self) -> bool {
        self.arrow == other.arrow
    }

    /// The cells of `event`'s row, written in `topic`/`partition` at `offset`, one per column
    /// (all converted before any is appended).
    ///
    /// # Errors
    ///
    /// A value that does not fit its column, named.
    pub fn cells(&self, event: &Event, at: &Place<'_>) -> Result<Vec<Cell>, String> {
        let mut out = Vec::with_capacity(self.arrow.fields().len());
        out.push(Cell::Str(at.topic.to_owned()));
        out.push(Cell::I32(at.partition));
        out.push(Cell::I64(at.offset));
        out.push(at.timestamp_ms.map_or(Cell::Null, Cell::I64));
        out.push(at.key.map_or(Cell::Null, |k| Cell::Bytes(k.to_vec())));
        for (name, ty, read) in &self.fields {
            out.push(match event.row.as_ref().and_then(|r| r.get(name)) {
                Some(value) => {
                    cells::convert(value, ty, *read).map_err(|e| format!("column {name:?}: {e}"))?
                }
                None => Cell::Null,
            });
        }
        if self.envelope {
            out.push(event.op.clone().map_or(Cell::Null, Cell::Str));
            out.push(event.event_ts.map_or(Cell::Null, Cell::I64));
            out.push(event.source_ts.map_or(Cell::Null, Cell::I64));
            out.push(event.source_position.clone().map_or(Cell::Null, Cell::Str));
        }
        Ok(out)
    }
}

/// Where a record was read.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
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
}

/// A record's row as a typed file takes it.
#[derive(Debug, Clone, Copy)]
pub struct TypedRow<'a> {
    /// The columns.
    pub layout: &'a Arc<Layout>,
    /// One cell per column.
    pub cells: &'a [Cell],
}

/// An open typed Parquet file; see the [module docs](self).
pub struct TypedParquetFile {
    layout: Arc<Layout>,
    rows: Rows,
    writer: ArrowWriter<BufWriter<File>>,
    /// Raw bytes of the rows held as builders.
    buffered_bytes: usize,
    /// The writer's bytes written plus its estimate of the row group in progress, as of the
    /// last batch.
    encoded_bytes: usize,
    row_group_records: usize,
}

impl std::fmt::Debug for TypedParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedParquetFile")
            .field("columns", &self.layout.arrow.fields().len())
            .field("buffered_rows", &self.rows.len())
            .finish_non_exhaustive()
    }
}

impl TypedParquetFile {
    /// A file of `layout`'s columns.
    ///
    /// # Errors
    ///
    /// When the writer cannot be created.
    pub fn create(
        file: File,
        layout: &Arc<Layout>,
        codec: FileCompression,
        row_group_records: usize,
        row_group_bytes: usize,
    ) -> Result<Self, ParquetError> {
        let props = WriterProperties::builder()
            .set_compression(compression(codec))
            // Offsets never repeat within a file.
            .set_column_dictionary_enabled(ColumnPath::from("_offset"), false)
            .set_max_row_group_row_count(Some(row_group_records))
            .set_max_row_group_bytes(Some(row_group_bytes.max(1)))
            .build();
        let schema = Arc::clone(&layout.arrow);
        let writer = ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            Arc::clone(&schema),
            Some(props),
        )?;
        Ok(Self {
            layout: Arc::clone(layout),
            rows: Rows::for_arrow(schema).map_err(ParquetError::General)?,
            writer,
            buffered_bytes: 0,
            encoded_bytes: 0,
            row_group_records,
        })
    }

    /// Whether rows of `layout` fit this file.
    pub fn accepts(&self, layout: &Arc<Layout>) -> bool {
        Arc::ptr_eq(&self.layout, layout) || self.layout.same_columns(layout)
    }

    /// Appends a row of `raw_bytes` bytes in Kafka; writes a batch when enough rows wait.
    ///
    /// # Errors
    ///
    /// When the batch cannot be written.
    pub fn append(&mut self, row: &TypedRow<'_>, raw_bytes: usize) -> Result<(), ParquetError> {
        self.rows.push(row.cells).map_err(ParquetError::General)?;
        self.buffered_bytes += raw_bytes + 32;
        if self.rows.len() >= ENCODE_BATCH_ROWS.min(self.row_group_records)
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

    fn write_batch(&mut self) -> Result<(), ParquetError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let batch = self.rows.take().map_err(ParquetError::General)?;
        self.writer.write(&batch)?;
        self.encoded_bytes = self.writer.bytes_written() + self.writer.in_progress_size();
        self.buffered_bytes = 0;
        Ok(())
    }

    /// Writes what is buffered and the footer; returns the file to be synced.
    ///
    /// # Errors
    ///
    /// When writing fails.
    pub fn finish(mut self) -> Result<File, ParquetError> {
        self.write_batch()?;
        self.writer
            .into_inner()?
            .into_inner()
            .map_err(|e| ParquetError::External(Box::new(e.into_error())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::typed::event::{SchemaCache, decode_event};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Decimal128Type, TimestampMicrosecondType};
    use arrow_schema::{DataType, TimeUnit};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// A change event's row becomes typed columns (decimal with its scale, date, timestamps
    /// with and without zone), with the operation and source columns; a null stays null.
    #[test]
    fn change_events_write_typed_columns() {
        let value = br#"{"schema":{"type":"struct","fields":[{"field":"before","type":"struct","optional":true,"fields":[{"field":"id","type":"int32"}]},{"field":"after","type":"struct","optional":true,"fields":[{"field":"id","type":"int32"},{"field":"price","type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"10"}},{"field":"born","type":"int32","optional":true,"name":"io.debezium.time.Date"},{"field":"at","type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp"},{"field":"note","type":"string","optional":true}]}]},"payload":{"before":null,"after":{"id":7,"price":"MDk=","born":19000,"at":1700000000000001,"note":null},"source":{"ts_ms":5,"lsn":99},"op":"c","ts_ms":6}}"#;
        let event = decode_event(value, &mut SchemaCache::default()).unwrap();
        let (_, row) = event.schema.clone().unwrap();
        let layout = Arc::new(Layout::new(&row, event.op.is_some()).unwrap());
        let place = Place {
            topic: "t",
            partition: 0,
            offset: 3,
            timestamp_ms: None,
            key: Some(b"{\"id\":7}"),
        };
        let cells = layout.cells(&event, &place).unwrap();
        let dir = std::env::temp_dir().join(format!("sluice-typed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let mut file = TypedParquetFile::create(
            File::create(&path).unwrap(),
            &layout,
            FileCompression::Snappy,
            100,
            1 << 20,
        )
        .unwrap();
        file.append(
            &TypedRow {
                layout: &layout,
                cells: &cells,
            },
            value.len(),
        )
        .unwrap();
        file.finish().unwrap().sync_all().unwrap();
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
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        assert_eq!(
            types[5..],
            [
                ("id", &DataType::Int32),
                ("price", &DataType::Decimal128(10, 2)),
                ("born", &DataType::Date32),
                ("at", &DataType::Timestamp(TimeUnit::Microsecond, None)),
                ("note", &DataType::Utf8),
                ("_op", &DataType::Utf8),
                ("_event_ts", &tz),
                ("_source_ts", &tz),
                ("_source_position", &DataType::Utf8),
            ]
        );
        let column = |name: &str| batch.column_by_name(name).unwrap().clone();
        assert_eq!(
            column("price").as_primitive::<Decimal128Type>().value(0),
            12345
        );
        assert_eq!(column("born").as_primitive::<Date32Type>().value(0), 19000);
        assert_eq!(
            column("at")
                .as_primitive::<TimestampMicrosecondType>()
                .value(0),
            1_700_000_000_000_001
        );
        assert!(column("note").is_null(0));
        assert_eq!(column("_op").as_string::<i32>().value(0), "c");
        assert_eq!(column("_source_position").as_string::<i32>().value(0), "99");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
