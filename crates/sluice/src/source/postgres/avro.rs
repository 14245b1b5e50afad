//! Row changes as Avro binary, written straight from the decoded tuples, as
//! [`super::encode`] writes JSON: the Avro schema's walk (which field each column is, how its
//! values are written, the `source` block's constant parts) is prepared once per relation
//! ([`AvroLayout`]), and a change is written field by field with no JSON in between for the
//! envelope, the `source` block and the common column types (integers, booleans, text). The
//! other types' values are written by the JSON value writer into a scratch buffer and that one
//! value is converted ([`crate::event::avro::write_value`]): one mapping of PostgreSQL's types
//! to Debezium's, for both formats. The bytes are those of converting the whole JSON event
//! (the tests compare both on every kind of change).

use bytes::Bytes;

use super::encode::{
    Cell, ChangeKind, ColumnInfo, ColumnTreatment, EncodeOptions, RelationInfo, RowChange, cell,
    write_cell, write_datum,
};
use super::pgoutput::{Datum, TupleData};
use super::value;
use crate::event::avro::{write_absent, write_bytes, write_header, write_long, write_present};
use crate::event::schema::{RenderedSchemas, Schema, SchemaType};
use crate::event::{EventOptions, Op, SnapshotMarker, TransactionOrder};

/// The `source` block's constant parts as Avro: `version`, `connector`, `name`; `db`;
/// `schema`, `table`.
#[derive(Debug, Default)]
pub struct AvroSource {
    head: Vec<u8>,
    db: Vec<u8>,
    tail: Vec<u8>,
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
const SOURCE_FIELDS: [&str; 16] = [
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
const ENVELOPE_FIELDS: [&str; 8] = [
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
    key_id: Option<u32>,
    value_id: u32,
    /// Per column (tuple order): its field in the row record; `None` when it is not a field.
    row: Vec<Option<FieldWriter>>,
    /// Per key column.
    key: Vec<FieldWriter>,
    /// Whether the envelope ends with `unavailable_columns`.
    unavailable_columns: bool,
}

#[derive(Debug)]
struct FieldWriter {
    schema: Schema,
    direct: Direct,
}

/// A value written without JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direct {
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
    fn new(column: &ColumnInfo, schema: &Schema) -> Self {
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

fn struct_fields(schema: &Schema) -> Option<&[crate::event::schema::Field]> {
    match &schema.schema_type {
        SchemaType::Struct(fields) => Some(fields),
        _ => None,
    }
}

impl AvroLayout {
    /// The layout of `rel`'s events under its registered `schemas`; `None` when they are not
    /// registered, or not the shape this writer knows (then events are converted from JSON).
    pub fn new(rel: &RelationInfo, schemas: &RenderedSchemas) -> Option<Self> {
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
        let mut row = Vec::with_capacity(rel.columns.len());
        for column in &rel.columns {
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
                if key_fields.len() != rel.key_columns.len() {
                    return None;
                }
                rel.key_columns
                    .iter()
                    .zip(key_fields)
                    .map(|(&index, field)| {
                        let column = &rel.columns[index];
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

/// The key record in Confluent's wire format, or `None` when the relation has no key.
pub fn write_key(
    layout: &AvroLayout,
    rel: &RelationInfo,
    tuple: &TupleData,
    events: &EventOptions,
    streamed: bool,
) -> Option<Vec<u8>> {
    let id = layout.key_id?;
    let mut out = Vec::with_capacity(32);
    write_header(id, &mut out);
    let mut scratch = Vec::new();
    for (field, &index) in layout.key.iter().zip(&rel.key_columns) {
        let column = &rel.columns[index];
        let datum = tuple.0.get(index);
        if !write_direct(field, datum, &mut out) {
            scratch.clear();
            write_datum(&rel.name, column, datum, &mut scratch, events, streamed);
            convert(rel, field, &scratch, &mut out);
        }
    }
    Some(out)
}

/// The envelope in Confluent's wire format: the same fields, in the same order, as
/// [`super::encode`]'s JSON envelope.
pub fn write_envelope(
    layout: &AvroLayout,
    change: &RowChange,
    options: &EncodeOptions,
    before: Option<&TupleData>,
    after: Option<(&TupleData, Option<&TupleData>)>,
    op: Op,
    transaction: Option<TransactionOrder>,
) -> Vec<u8> {
    let rel = &change.relation;
    let streamed = !matches!(change.kind, ChangeKind::Read { .. });
    let events = &options.events;
    let mut out = Vec::with_capacity(rel.envelope_overhead / 2 + 32 * rel.columns.len());
    write_header(layout.value_id, &mut out);
    let mut scratch = Vec::new();
    let mut unavailable = Vec::new();
    match before {
        Some(row) => {
            out.push(2);
            write_row(
                layout,
                rel,
                row,
                None,
                events,
                streamed,
                &mut out,
                &mut unavailable,
                &mut scratch,
            );
            unavailable.clear();
        }
        None => out.push(0),
    }
    match after {
        Some((row, old)) => {
            out.push(2);
            write_row(
                layout,
                rel,
                row,
                old,
                events,
                streamed,
                &mut out,
                &mut unavailable,
                &mut scratch,
            );
        }
        None => out.push(0),
    }
    // source
    let source = &rel.avro_source;
    out.extend_from_slice(&source.head);
    write_long(change.commit_unix_micros.div_euclid(1000), &mut out);
    let marker = match &change.kind {
        ChangeKind::Read { marker, .. } => *marker,
        _ => SnapshotMarker::False,
    };
    // `snapshot` has a default: `[string, "null"]`.
    out.push(0);
    write_bytes(marker.as_str().as_bytes(), &mut out);
    out.extend_from_slice(&source.db);
    out.push(2);
    let mut sequence = Vec::with_capacity(48);
    sequence.push(b'[');
    match change.last_commit_end {
        Some(end) => {
            sequence.push(b'"');
            sequence.extend_from_slice(itoa::Buffer::new().format(end.0).as_bytes());
            sequence.push(b'"');
        }
        None => sequence.extend_from_slice(b"null"),
    }
    sequence.extend_from_slice(b",\"");
    sequence.extend_from_slice(itoa::Buffer::new().format(change.lsn.0).as_bytes());
    sequence.extend_from_slice(b"\"]");
    write_bytes(&sequence, &mut out);
    out.push(2);
    write_long(change.commit_unix_micros, &mut out);
    out.push(2);
    write_long(change.commit_unix_micros.saturating_mul(1000), &mut out);
    out.extend_from_slice(&source.tail);
    out.push(2);
    write_long(i64::from(change.xid), &mut out);
    out.push(2);
    write_long(change.lsn.0 as i64, &mut out);
    // xmin, origin, origin_lsn: null.
    out.extend_from_slice(&[0, 0, 0]);
    match transaction {
        None => out.push(0),
        Some(order) => {
            out.push(2);
            let mut id = Vec::with_capacity(32);
            id.extend_from_slice(itoa::Buffer::new().format(order.xid).as_bytes());
            id.push(b':');
            id.extend_from_slice(itoa::Buffer::new().format(change.lsn.0).as_bytes());
            write_bytes(&id, &mut out);
            write_long(order.total_order as i64, &mut out);
            write_long(order.data_collection_order as i64, &mut out);
        }
    }
    write_bytes(op.code().as_bytes(), &mut out);
    let now = options.now_unix_nanos;
    for time in [now.div_euclid(1_000_000), now.div_euclid(1000), now] {
        out.push(2);
        write_long(time, &mut out);
    }
    if layout.unavailable_columns {
        if unavailable.is_empty() {
            out.push(0);
        } else {
            out.push(2);
            write_long(unavailable.len() as i64, &mut out);
            for index in &unavailable {
                write_bytes(rel.columns[*index].name.as_bytes(), &mut out);
            }
            out.push(0);
        }
    }
    out
}

/// The row record's fields (see [`super::encode`]'s `write_row` for TOASTed values).
#[allow(clippy::too_many_arguments)]
fn write_row(
    layout: &AvroLayout,
    rel: &RelationInfo,
    row: &TupleData,
    old: Option<&TupleData>,
    events: &EventOptions,
    streamed: bool,
    out: &mut Vec<u8>,
    unavailable: &mut Vec<usize>,
    scratch: &mut Vec<u8>,
) {
    for (index, (column, field)) in rel.columns.iter().zip(&layout.row).enumerate() {
        let Some(field) = field else { continue };
        match cell(column, index, row, old, events) {
            Cell::Skip => {}
            Cell::Unavailable => {
                unavailable.push(index);
                write_absent(&field.schema, out);
            }
            Cell::Placeholder => {
                scratch.clear();
                value::write_unavailable(column.value_type, events, scratch);
                convert(rel, field, scratch, out);
            }
            Cell::Value(datum) => {
                if !write_direct(field, datum, out) {
                    scratch.clear();
                    write_cell(&rel.name, column, datum, events, streamed, scratch);
                    convert(rel, field, scratch, out);
                }
            }
        }
    }
}

/// Writes a value of the common types straight from its text; `false` (nothing written) for
/// other types, a null or a text that is not the type's canonical form (the JSON writer then
/// decides, as for JSON events).
fn write_direct(field: &FieldWriter, datum: Option<&Datum>, out: &mut Vec<u8>) -> bool {
    let Some(Datum::Text(text)) = datum else {
        return false;
    };
    let text: &Bytes = text;
    match field.direct {
        Direct::No => false,
        Direct::Text => {
            if std::str::from_utf8(text).is_err() {
                return false;
            }
            write_present(&field.schema, out);
            write_bytes(text, out);
            true
        }
        Direct::Boolean => {
            let value = match &text[..] {
                b"t" => 1,
                b"f" => 0,
                _ => return false,
            };
            write_present(&field.schema, out);
            out.push(value);
            true
        }
        Direct::Integer => {
            let Some(value) = canonical_integer(text) else {
                return false;
            };
            let fits = match field.schema.schema_type {
                SchemaType::Int16 => i16::try_from(value).is_ok(),
                SchemaType::Int32 => i32::try_from(value).is_ok(),
                _ => true,
            };
            if !fits {
                return false;
            }
            write_present(&field.schema, out);
            write_long(value, out);
            true
        }
    }
}

/// An integer in PostgreSQL's output form (`-`, digits, no leading zero).
fn canonical_integer(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty()
        || (digits.len() > 1 && digits[0] == b'0')
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// One value's JSON as Avro. A value its schema cannot hold is a bug: the panic makes the
/// delivery core apply `delivery.on_permanent_error` to the change (as converting the whole
/// event did).
fn convert(rel: &RelationInfo, field: &FieldWriter, json: &[u8], out: &mut Vec<u8>) {
    if let Err(error) = crate::event::avro::write_value(&field.schema, json, out) {
        panic!("{}: {error}", rel.name);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_engine::Lsn;

    use super::super::encode::{
        ChangeKind, ColumnTreatment, EncodeOptions, RelationInfo, RowChange, SourceIdentity,
        encode_change,
    };
    use super::super::pgoutput::{Datum, ReplicaIdentity, TupleData};
    use super::super::schema::{ColumnCatalog, render};
    use crate::event::schema::RegisteredIds;
    use crate::event::{EventFormat, EventOptions};
    use crate::event::{SnapshotMarker, TransactionOrder};
    use crate::kafka::OutRecord;
    use crate::runtime::metrics::TableMetrics;

    /// A column: name, type OID, type modifier, NOT NULL.
    type Column = (&'static str, u32, i32, bool);

    fn text(s: &str) -> Datum {
        Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// A relation of `columns` (`(name, type oid, modifier, not null)`; the first is the key)
    /// with its schemas rendered under `events` and registered as ids 7 (key) and 8 (value).
    fn relation(columns: &[(&str, u32, i32, bool)], events: &EventOptions) -> Arc<RelationInfo> {
        let mut rel = RelationInfo::new(
            &SourceIdentity {
                server_name: "bench".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "t",
            columns
                .iter()
                .map(|(name, oid, modifier, _)| ((*name).to_owned(), *oid, *modifier))
                .collect(),
            &[columns[0].0.to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.t")),
        );
        let catalog: Vec<ColumnCatalog> = columns
            .iter()
            .map(|(name, oid, modifier, not_null)| ColumnCatalog {
                name: (*name).to_owned(),
                not_null: *not_null,
                base_oid: *oid,
                base_modifier: *modifier,
                type_type: 'b',
                ..ColumnCatalog::default()
            })
            .collect();
        rel.mark_not_null(&catalog);
        let mut schemas = render(&rel, &catalog, events);
        schemas.registered = Some(RegisteredIds {
            key: Some(7),
            value: 8,
        });
        rel.set_schemas(schemas);
        Arc::new(rel)
    }

    fn options(format: EventFormat, events: EventOptions) -> EncodeOptions {
        EncodeOptions {
            tombstones: true,
            events: EventOptions {
                format: Some(format),
                ..events
            },
            now_unix_nanos: 1_700_000_000_123_456_789,
        }
    }

    fn insert(rel: &Arc<RelationInfo>, i: u64, row: Vec<Datum>) -> RowChange {
        RowChange {
            relation: Arc::clone(rel),
            kind: ChangeKind::Insert {
                new: TupleData(row),
            },
            commit_lsn: Lsn(0x1000_0000 + i * 200),
            lsn: Lsn(0x1000_0000 + i * 200),
            tx_index: i as u32,
            xid: 77,
            commit_unix_micros: 1_700_000_000_123_456,
            last_commit_end: Some(Lsn(0x1000_0000)),
            size_hint: 1,
            transaction: None,
        }
    }

    /// Converts a JSON-encoded record as the Avro path did before writing directly: the
    /// oracle of the direct writer.
    fn converted(rel: &RelationInfo, record: &OutRecord) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let schemas = rel.schemas.as_ref().unwrap();
        let key = record.key.as_ref().map(|key| {
            crate::event::avro::to_wire(&rel.name, schemas.key.as_ref().unwrap(), 7, key)
        });
        let value = record
            .value
            .as_ref()
            .map(|value| crate::event::avro::to_wire(&rel.name, &schemas.envelope, 8, value));
        (key, value)
    }

    const TYPES: &[(&str, u32, i32, bool)] = &[
        ("id", 20, -1, true),
        ("i4", 23, -1, true),
        ("i2", 21, -1, false),
        ("note", 25, -1, true),
        ("label", 1043, 4 + 20, false),
        ("flag", 16, -1, false),
        ("amount", 1700, (10 << 16) + 2 + 4, true),
        ("at", 1184, -1, false),
        ("day", 1082, -1, true),
        ("raw", 17, -1, false),
        ("doc", 3802, -1, false),
        ("uid", 2950, -1, false),
        ("tags", 1009, -1, false),
        ("ratio", 701, -1, false),
        ("secret", 25, -1, false),
        ("hashed", 25, -1, false),
        ("gone", 25, -1, false),
    ];

    fn full_row(i: i64) -> Vec<Datum> {
        vec![
            text(&i.to_string()),
            text("-2147483648"),
            text("32767"),
            text("tab\there \"quoted\" \u{e9}\u{1F600}"),
            text("short"),
            text(if i % 2 == 0 { "t" } else { "f" }),
            text("-1234.56"),
            text("2020-04-01 11:51:02.123456+00"),
            text("2020-04-01"),
            text("\\x00ff10"),
            text(r#"{"a": [1, 2]}"#),
            text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            text(r#"{a,"b c",NULL}"#),
            text("NaN"),
            text("hidden"),
            text("digest me"),
            text("excluded"),
        ]
    }

    /// The direct writer writes the bytes of converting the JSON event, for every kind of
    /// change, nulls, NOT NULL columns without a value, TOASTed values, column rules,
    /// transaction blocks, a default (a `[T, "null"]` union) and odd texts that fall back to
    /// the JSON writer.
    #[test]
    fn direct_avro_is_the_converted_json() {
        for unavailable_columns in [false, true] {
            let events = EventOptions {
                format: Some(EventFormat::Avro),
                unavailable_columns,
                ..EventOptions::default()
            };
            let mut rel = RelationInfo::new(
                &SourceIdentity {
                    server_name: "app".into(),
                    database: "db".into(),
                    registry: None,
                },
                "public",
                "all_types",
                TYPES
                    .iter()
                    .map(|(name, oid, modifier, _)| ((*name).to_owned(), *oid, *modifier))
                    .collect(),
                &["id".to_owned(), "i4".to_owned()],
                ReplicaIdentity::Default,
                Arc::new(TableMetrics::new("public.all_types")),
            );
            let catalog: Vec<ColumnCatalog> = TYPES
                .iter()
                .map(|(name, oid, modifier, not_null)| ColumnCatalog {
                    name: (*name).to_owned(),
                    not_null: *not_null,
                    default: (*name == "label").then(|| "'n/a'::character varying".into()),
                    base_oid: *oid,
                    base_modifier: *modifier,
                    type_type: 'b',
                    ..ColumnCatalog::default()
                })
                .collect();
            rel.mark_not_null(&catalog);
            for column in &mut rel.columns {
                column.treatment = match column.name.as_str() {
                    "secret" => ColumnTreatment::Mask,
                    "hashed" => ColumnTreatment::Hash,
                    "gone" => ColumnTreatment::Exclude,
                    _ => ColumnTreatment::Keep,
                };
            }
            let mut schemas = render(&rel, &catalog, &events);
            schemas.registered = Some(RegisteredIds {
                key: Some(7),
                value: 8,
            });
            rel.set_schemas(schemas);
            assert!(rel.avro.is_some(), "the layout is made");
            let rel = Arc::new(rel);
            let mut nulls = vec![Datum::Null; TYPES.len()];
            nulls[0] = text("5");
            nulls[1] = text("6");
            let mut toasted = full_row(3);
            toasted[3] = Datum::UnchangedToast;
            toasted[12] = Datum::UnchangedToast;
            let mut odd = full_row(4);
            // Text that is not UTF-8 (kept as its lossy text), a binary datum.
            odd[3] = Datum::Text(Bytes::from_static(b"a\xff\xfeb"));
            odd[4] = Datum::Binary(Bytes::from_static(b"\x01\x02"));
            let key_only = TupleData(vec![text("8"), text("9")]);
            let order = TransactionOrder {
                xid: 77,
                total_order: 3,
                data_collection_order: 2,
            };
            let kinds = vec![
                ChangeKind::Insert {
                    new: TupleData(full_row(1)),
                },
                ChangeKind::Insert {
                    new: TupleData(nulls),
                },
                ChangeKind::Insert {
                    new: TupleData(odd),
                },
                ChangeKind::Update {
                    old: None,
                    old_is_key_only: false,
                    new: TupleData(toasted.clone()),
                    key_changed: false,
                },
                ChangeKind::Update {
                    old: Some(TupleData(full_row(3))),
                    old_is_key_only: false,
                    new: TupleData(toasted),
                    key_changed: false,
                },
                ChangeKind::Update {
                    old: Some(key_only.clone()),
                    old_is_key_only: true,
                    new: TupleData(full_row(9)),
                    key_changed: true,
                },
                ChangeKind::Delete {
                    old: key_only,
                    old_is_key_only: true,
                },
                ChangeKind::Delete {
                    old: TupleData(full_row(2)),
                    old_is_key_only: false,
                },
                ChangeKind::Truncate,
                ChangeKind::Read {
                    row: TupleData(full_row(6)),
                    marker: SnapshotMarker::Last,
                },
            ];
            for (n, kind) in kinds.into_iter().enumerate() {
                let mut change = insert(&rel, n as u64, Vec::new());
                change.kind = kind;
                change.transaction = (n % 2 == 0).then_some(order);
                change.last_commit_end = (n % 3 != 0).then_some(Lsn(99));
                let mut direct = Vec::new();
                encode_change(
                    &change,
                    &options(EventFormat::Avro, events.clone()),
                    &mut direct,
                );
                let mut json = Vec::new();
                let json_events = EventOptions {
                    format: Some(EventFormat::Json),
                    ..events.clone()
                };
                encode_change(&change, &options(EventFormat::Json, json_events), &mut json);
                assert_eq!(direct.len(), json.len());
                for (direct, json) in direct.iter().zip(&json) {
                    let (key, value) = converted(&rel, json);
                    assert_eq!(direct.key, key, "change {n}: key");
                    assert_eq!(
                        direct.value,
                        value,
                        "change {n} ({unavailable_columns}): value of {:?}",
                        json.value
                            .as_ref()
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    );
                }
            }
        }
    }

    /// JSON vs Avro: the encoder's time per change (medians of rounds) and bytes per record, on
    /// bench/run's backlog rows (`id bigint PRIMARY KEY, payload text` of ~200 bytes) and on a
    /// row of mixed types. A debug build's figures are what `cargo test` gives; compare the
    /// ratio. One JSON line per measurement, then the ratio:
    /// `cargo test -p sluice --lib -- --ignored avro_encode_cost --nocapture`.
    #[test]
    #[ignore = "a measurement, run on demand"]
    fn avro_encode_cost() {
        const ROUNDS: usize = 7;
        let changes = if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        };
        let cases: [(&str, &[Column]); 2] = [
            (
                "backlog",
                &[("id", 20, -1, true), ("payload", 25, -1, false)],
            ),
            (
                "mixed",
                &[
                    ("id", 20, -1, true),
                    ("v", 23, -1, true),
                    ("payload", 25, -1, false),
                    ("amount", 1700, (10 << 16) + 2 + 4, false),
                    ("at", 1184, -1, false),
                    ("flag", 16, -1, false),
                ],
            ),
        ];
        for (case, columns) in cases {
            // Both formats' rows first, then rounds alternating the formats (a shared machine's
            // noise falls on both).
            let prepared: Vec<(EventFormat, EncodeOptions, Vec<RowChange>)> =
                [EventFormat::Json, EventFormat::Avro]
                    .into_iter()
                    .map(|format| {
                        let options = options(format, EventOptions::default());
                        let rel = relation(columns, &options.events);
                        let rows = (0..changes as u64)
                            .map(|i| {
                                let payload = format!("{i:0200}");
                                let row = match case {
                                    "backlog" => vec![text(&i.to_string()), text(&payload)],
                                    _ => vec![
                                        text(&i.to_string()),
                                        text("0"),
                                        text(&payload),
                                        text("1234.56"),
                                        text("2020-04-01 11:51:02.123456+00"),
                                        text("t"),
                                    ],
                                };
                                insert(&rel, i, row)
                            })
                            .collect();
                        (format, options, rows)
                    })
                    .collect();
            let mut times = vec![Vec::with_capacity(ROUNDS); prepared.len()];
            let mut bytes = vec![0; prepared.len()];
            for _ in 0..ROUNDS {
                for (side, (_, options, rows)) in prepared.iter().enumerate() {
                    let mut out = Vec::with_capacity(rows.len());
                    let started = std::time::Instant::now();
                    for change in rows {
                        encode_change(change, options, &mut out);
                    }
                    times[side].push(started.elapsed().as_secs_f64() * 1e9 / rows.len() as f64);
                    bytes[side] = out
                        .iter()
                        .map(|r| {
                            r.value.as_ref().map_or(0, Vec::len)
                                + r.key.as_ref().map_or(0, Vec::len)
                        })
                        .sum::<usize>()
                        / out.len();
                }
            }
            let mut medians = Vec::new();
            for (side, (format, _, rows)) in prepared.iter().enumerate() {
                let times = &mut times[side];
                times.sort_by(f64::total_cmp);
                let median = times[ROUNDS / 2];
                medians.push(median);
                println!(
                    "{}",
                    serde_json::json!({
                        "measure": "avro_encode_cost", "rows": case,
                        "format": format!("{format:?}").to_lowercase(),
                        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
                        "changes": rows.len(), "rounds": ROUNDS,
                        "ns_per_change_median": median.round(),
                        "ns_per_change_min": times[0].round(),
                        "bytes_per_record": bytes[side],
                    })
                );
            }
            println!(
                "{}",
                serde_json::json!({
                    "measure": "avro_encode_cost", "rows": case,
                    "avro_over_json": (medians[1] / medians[0] * 1000.0).round() / 1000.0,
                })
            );
            assert!(
                medians[1] <= medians[0],
                "{case}: Avro must not cost more than JSON ({:.0} vs {:.0} ns per change)",
                medians[1],
                medians[0]
            );
        }
    }
}
