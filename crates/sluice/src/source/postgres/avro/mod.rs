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

pub mod layout;
#[cfg(test)]
mod tests;

use self::layout::{AvroLayout, Direct, FieldWriter};
use super::cell::{Cell, cell, write_cell, write_datum};
use super::change::{ChangeKind, EncodeOptions, RowChange};
use super::column::ColumnInfo;
use super::pgoutput::{Datum, TupleData};
use super::relation::RelationInfo;
use super::value;
use crate::event::avro::{write_absent, write_bytes, write_header, write_long, write_present};
use crate::event::schema::SchemaType;
use crate::event::{EventOptions, Op, SnapshotMarker, TransactionOrder};

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
            convert(rel, column, field, &scratch, &mut out);
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
                convert(rel, column, field, scratch, out);
            }
            Cell::Value(datum) => {
                if !write_direct(field, datum, out) {
                    scratch.clear();
                    write_cell(&rel.name, column, datum, events, streamed, scratch);
                    convert(rel, column, field, scratch, out);
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
fn convert(
    rel: &RelationInfo,
    column: &ColumnInfo,
    field: &FieldWriter,
    json: &[u8],
    out: &mut Vec<u8>,
) {
    if let Err(mut error) = crate::event::avro::write_value(&field.schema, json, out) {
        // The value is written alone: its path starts at the column.
        error.path = if error.path == "(top)" {
            column.name.clone()
        } else {
            format!("{}.{}", column.name, error.path)
        };
        panic!("{}: {error}", rel.name);
    }
}
