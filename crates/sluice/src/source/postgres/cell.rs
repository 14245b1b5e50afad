//! A row's value for one column, written as JSON under the column's rule: the one writer of cells
//! both event formats use.

use super::column::{ColumnInfo, ColumnTreatment};
use super::pgoutput::Datum;
use super::pgoutput::TupleData;
use super::value;
use crate::event::EventOptions;
use crate::event::write_json_str;
use base64::Engine as _;

/// What a row holds for one of its columns.
pub(super) enum Cell<'a> {
    /// Not a field of the row (excluded by a column rule, or left out as Debezium does).
    Skip,
    /// An unchanged TOASTed value the server did not send, left out
    /// (`kafka.events.unavailable_columns`).
    Unavailable,
    /// An unchanged TOASTed value the server did not send: Debezium's placeholder.
    Placeholder,
    /// A value (`None`: the tuple has no value for the column, as an old key's other columns).
    Value(Option<&'a Datum>),
}

/// The column `index` of `row`; unchanged TOASTed values are taken from `old` when it has them.
pub(super) fn cell<'a>(
    column: &ColumnInfo,
    index: usize,
    row: &'a TupleData,
    old: Option<&'a TupleData>,
    events: &EventOptions,
) -> Cell<'a> {
    if column.treatment == ColumnTreatment::Exclude || column.left_out {
        return Cell::Skip;
    }
    let datum = row.0.get(index);
    if matches!(datum, Some(Datum::UnchangedToast)) {
        return match old.and_then(|old| old.0.get(index)) {
            Some(previous @ (Datum::Text(_) | Datum::Binary(_) | Datum::Null)) => {
                Cell::Value(Some(previous))
            }
            _ if events.unavailable_columns => Cell::Unavailable,
            _ => Cell::Placeholder,
        };
    }
    Cell::Value(datum)
}

/// Appends a row's value as JSON, as the column's rule says (masked, hashed or as it is).
pub(super) fn write_cell(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    events: &EventOptions,
    streamed: bool,
    out: &mut Vec<u8>,
) {
    match (column.treatment, datum) {
        (ColumnTreatment::Mask, Some(Datum::Text(_) | Datum::Binary(_))) => {
            out.extend_from_slice(b"\"****\"");
        }
        (ColumnTreatment::Hash, Some(Datum::Text(value) | Datum::Binary(value))) => {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(value);
            out.push(b'"');
            for byte in digest {
                out.extend_from_slice(format!("{byte:02x}").as_bytes());
            }
            out.push(b'"');
        }
        _ => write_datum(table, column, datum, out, events, streamed),
    }
}

/// Counts a value sent as text (`write_datum`) and logs the first one of the process.
fn value_kept_as_text(table: &str, column: &ColumnInfo, error: &value::ValueError) {
    static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let type_name = error.type_name();
    metrics::counter!(
        crate::runtime::metrics::VALUES_AS_TEXT,
        "table" => table.to_owned(),
        "type" => type_name
    )
    .increment(1);
    if !LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            table,
            column = %column.name,
            r#type = %type_name,
            error = %error,
            "a value did not parse as its type and was sent as a JSON string of its text; \
             sluice_source_values_as_text_total counts them (this is logged once)"
        );
    }
}

/// Appends one value; `streamed` says it comes from pgoutput (a change) rather than a
/// snapshot's query, which Debezium maps differently for a few types.
pub(super) fn write_datum(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    out: &mut Vec<u8>,
    events: &EventOptions,
    streamed: bool,
) {
    let start = out.len();
    write_nullable_datum(table, column, datum, out, events, streamed);
    if column.not_null && out[start..] == *b"null" {
        // Debezium's value for a NOT NULL column it has none for: its type's zero (issue 41).
        out.truncate(start);
        let written = if column.is_hstore {
            value::write_hstore(b"", out, events.hstore_handling_mode)
        } else {
            value::write_required_default(column.value_type, column.value_modifier, out, events)
        };
        if written.is_err() {
            out.truncate(start);
            out.extend_from_slice(b"null");
        }
    }
}

/// [`write_datum`] before a NOT NULL column's null is replaced.
fn write_nullable_datum(
    table: &str,
    column: &ColumnInfo,
    datum: Option<&Datum>,
    out: &mut Vec<u8>,
    events: &EventOptions,
    streamed: bool,
) {
    match datum {
        None | Some(Datum::Null) | Some(Datum::UnchangedToast) => out.extend_from_slice(b"null"),
        Some(Datum::Text(text)) => {
            let start = out.len();
            let (oid, modifier) = (column.value_type, column.value_modifier);
            let written = if column.is_hstore {
                value::write_hstore(text, out, events.hstore_handling_mode)
            } else if streamed {
                value::write_streamed_json(oid, modifier, text, out, events)
            } else {
                value::write_json(oid, modifier, text, out, events)
            };
            if let Err(error) = written {
                // The text did not parse as its type: keep it, as a string, rather than lose it,
                // and tell the operator (once per process in the log, always in the metric).
                out.truncate(start);
                write_json_str(out, &String::from_utf8_lossy(text));
                value_kept_as_text(table, column, &error);
            }
        }
        Some(Datum::Binary(bytes)) => {
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
}
