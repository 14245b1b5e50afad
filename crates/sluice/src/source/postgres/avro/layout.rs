//! How a relation's events are written as Avro, prepared once per relation: the registered
//! ids, each column's field schema and writer, the `source` block's constant parts.

use crate::event::avro::write_bytes;
use crate::event::schema::{RenderedSchemas, Schema, SchemaType};

use super::super::column::{ColumnInfo, ColumnTreatment};

/// The `source` block's constant parts as Avro: `version`, `connector`, `name`; `db`;
/// `schema`, `table`.
#[derive(Debug, Default)]
pub struct AvroSource {
    pub(super) head: Vec<u8>,
    pub(super) db: Vec<u8>,
    pub(super) tail: Vec<u8>,
}

impl AvroSource {
    /// The parts of a relation's events (`server_name`: the topic prefix).
    pub fn new(server_name: &str, database: &str, schema: &str, table: &str) -> Self {
        let mut head = Vec::new();
        write_bytes(env!("CARGO_PKG_VERSION").as_bytes(), &mut head);
        write_bytes(b"postgresql", &mut head);
        write_bytes(server_name.as_bytes(), &mut head);
        let mut db = Vec::new();
        write_bytes(database.as_bytes(), &mut db);
        let mut tail = Vec::new();
        write_bytes(schema.as_bytes(), &mut tail);
        write_bytes(table.as_bytes(), &mut tail);
        Self { head, db, tail }
    }
}

/// The `source` block's fields, in `io.debezium.connector.postgresql.Source`'s order.
pub(in crate::source::postgres) const SOURCE_FIELDS: [&str; 16] = [
    "version",
    "connector",
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "sequence",
    "ts_us",
    "ts_ns",
    "schema",
    "table",
    "txId",
    "lsn",
    "xmin",
    "origin",
    "origin_lsn",
];

/// The envelope's fields before sluice's own (`unavailable_columns`).
pub(super) const ENVELOPE_FIELDS: [&str; 8] = [
    "before",
    "after",
    "source",
    "transaction",
    "op",
    "ts_ms",
    "ts_us",
    "ts_ns",
];

/// How a relation's events are written as Avro: its registered ids and, per column, its
/// field's schema and writer. Made once per relation (its Relation message and schemas).
#[derive(Debug)]
pub struct AvroLayout {
    pub(super) key_id: Option<u32>,
    pub(super) value_id: u32,
    /// Per column (tuple order): its field in the row record; `None` when it is not a field.
    pub(super) row: Vec<Option<FieldWriter>>,
    /// Per key column.
    pub(super) key: Vec<FieldWriter>,
    /// Whether the envelope ends with `unavailable_columns`.
    pub(super) unavailable_columns: bool,
}

#[derive(Debug)]
pub(super) struct FieldWriter {
    pub(super) schema: Schema,
    pub(super) direct: Direct,
}

/// A value written without JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direct {
    /// `text`, `varchar`, `bpchar` as an Avro string: the text's bytes.
    Text,
    /// `int2`, `int4`, `int8` as an Avro `int`/`long`.
    Integer,
    /// `bool`.
    Boolean,
    /// Through the JSON value writer.
    No,
}

impl FieldWriter {
    pub(super) fn new(column: &ColumnInfo, schema: &Schema) -> Self {
        let plain = column.treatment == ColumnTreatment::Keep && !column.is_hstore;
        let direct = match (column.value_type, &schema.schema_type) {
            (25 | 1043 | 1042, SchemaType::String) if plain => Direct::Text,
            (21, SchemaType::Int16) | (23, SchemaType::Int32) | (20, SchemaType::Int64)
                if plain =>
            {
                Direct::Integer
            }
            (16, SchemaType::Boolean) if plain => Direct::Boolean,
            _ => Direct::No,
        };
        Self {
            schema: schema.clone(),
            direct,
        }
    }
}

pub(super) fn struct_fields(schema: &Schema) -> Option<&[crate::event::schema::Field]> {
    match &schema.schema_type {
        SchemaType::Struct(fields) => Some(fields),
        _ => None,
    }
}

impl AvroLayout {
    /// The layout of the events of a relation of `columns` (its key: `key_columns`) under its registered `schemas`; `None` when they are not
    /// registered, or not the shape this writer knows (then events are converted from JSON).
    pub fn new(
        columns: &[ColumnInfo],
        key_columns: &[usize],
        schemas: &RenderedSchemas,
    ) -> Option<Self> {
        let registered = schemas.registered?;
        let envelope = struct_fields(&schemas.envelope)?;
        let names: Vec<&str> = envelope.iter().map(|f| f.name.as_str()).collect();
        let unavailable_columns = match names.len() {
            8 => false,
            9 if names[8] == "unavailable_columns" => true,
            _ => return None,
        };
        if names[..8] != ENVELOPE_FIELDS {
            return None;
        }
        let source = struct_fields(&envelope[2].schema)?;
        if source.iter().map(|f| f.name.as_str()).ne(SOURCE_FIELDS) {
            return None;
        }
        let row_fields = struct_fields(&envelope[0].schema)?;
        let mut fields = row_fields.iter();
        let mut row = Vec::with_capacity(columns.len());
        for column in columns {
            if column.treatment == ColumnTreatment::Exclude || column.left_out {
                row.push(None);
                continue;
            }
            let field = fields.next().filter(|f| f.name == column.name)?;
            row.push(Some(FieldWriter::new(column, &field.schema)));
        }
        if fields.next().is_some() {
            return None;
        }
        let key = match (&schemas.key, registered.key) {
            (Some(key), Some(_)) => {
                let key_fields = struct_fields(key)?;
                if key_fields.len() != key_columns.len() {
                    return None;
                }
                key_columns
                    .iter()
                    .zip(key_fields)
                    .map(|(&index, field)| {
                        let column = &columns[index];
                        (field.name == column.name).then(|| FieldWriter::new(column, &field.schema))
                    })
                    .collect::<Option<Vec<_>>>()?
            }
            _ => Vec::new(),
        };
        Some(Self {
            key_id: registered.key,
            value_id: registered.value,
            row,
            key,
            unavailable_columns,
        })
    }
}
