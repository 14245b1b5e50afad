//! PostgreSQL text-format values to JSON, as Debezium's PostgreSQL connector maps them.
//!
//! pgoutput sends column values in their type's text output format, which depends on session
//! settings; sluice sets the walsender session to `DateStyle=ISO, MDY`, `TimeZone=UTC`,
//! `IntervalStyle=iso_8601`, `extra_float_digits=3` and `bytea_output=hex`, and this module
//! parses exactly those forms. `write_json` turns one value into JSON text appended straight to
//! the event's output buffer: no intermediate `serde_json::Value`, no allocation per value
//! beyond the buffer (an array of `bytea`, `json` or other escaped elements reuses one scratch
//! buffer for the whole array).
//!
//! The mapping follows Debezium's, its options (`[kafka.events]`: `decimal_handling_mode`,
//! `time_precision_mode`, `binary_handling_mode`, `interval_handling_mode`, …) deciding a
//! column's form in one place, `representation`, through each option's own function in
//! `crate::event::options`. Where JSON or sluice differ from Debezium, `docs/type-mapping.md`
//! says so; that file is the reference table of every mapping.
//!
//! Values come from the server, so parsing never panics: every access is checked and a value
//! that does not parse as its type is a `ValueError`, after which the caller may fall back to
//! a JSON string of the text. Whatever `write_json` appends on success is valid JSON; on
//! failure it appends nothing.

mod array;
mod cursor;
mod geometry;
mod json;
mod kind;
mod numeric;
mod scalar;
mod temporal;
mod text;

use self::array::write_array;
use self::cursor::{Cursor, strip_bc, write_int};
pub(crate) use self::kind::{ENUM_ARRAY_OID, Kind, ValueError};
use self::kind::{array_element_kind, scalar_kind};
use self::scalar::write_scalar;
pub(crate) use self::text::write_hstore;
use crate::event::DecimalHandlingMode;
use crate::event::EventOptions;
use crate::event::write_json_str;

/// Debezium's `date` of `infinity` in a streamed (pgoutput) change, where its decoder
/// converts the text itself rather than through the JDBC driver (golden files).
const STREAMED_DATE_INFINITY_DAYS: i64 = 2_146_033_979;
/// The same for `-infinity`.
const STREAMED_DATE_NEG_INFINITY_DAYS: i64 = -2_147_472_691;
/// `name`.
const NAME_OID: u32 = 19;
/// `date`.
const DATE_OID: u32 = 1082;
/// Whether Debezium leaves a column of this (built-in) type out of its events: arrays of
/// `interval`, `money`, `name`, `xml` (it has no array mapping for them).
pub(crate) fn is_left_out(type_oid: u32) -> bool {
    matches!(type_oid, 1187 | 791 | 1003 | 143)
}

/// [`write_json`] for a value of a streamed change (pgoutput): where Debezium's streaming
/// decoder maps a scalar differently from its snapshot reader (the JDBC driver) —
/// `name` is `null`, a `date` keeps its era (`BC` dates are exact) and the infinities are other
/// day numbers. Everything else is [`write_json`].
///
/// # Errors
///
/// As [`write_json`].
pub(crate) fn write_streamed_json(
    type_oid: u32,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
    events: &EventOptions,
) -> Result<(), ValueError> {
    match type_oid {
        NAME_OID => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        DATE_OID => {
            let days = match text {
                b"infinity" => STREAMED_DATE_INFINITY_DAYS,
                b"-infinity" => STREAMED_DATE_NEG_INFINITY_DAYS,
                _ => {
                    let (body, bc) = strip_bc(text);
                    let mut cursor = Cursor::new(body);
                    cursor
                        .date(bc)
                        .filter(|_| cursor.at_end())
                        .ok_or(Kind::Date.invalid())?
                }
            };
            write_int(out, days);
            Ok(())
        }
        _ => write_json(type_oid, type_modifier, text, out, events),
    }
}

/// Appends the JSON form of one non-null column value to `out`.
///
/// `type_oid` and `type_modifier` are the column's, from its Relation message; `text` is the
/// value in the type's text output format. Types sluice does not know (including enums and other
/// user-defined types, and arrays of them) become a JSON string of the text.
///
/// # Errors
///
/// Returns a [`ValueError`] when `text` does not parse as a value of the type, or is not UTF-8
/// where a string is needed. `out` is then left as it was.
pub(crate) fn write_json(
    type_oid: u32,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
    events: &EventOptions,
) -> Result<(), ValueError> {
    let start = out.len();
    let result = match column_kind(type_oid, type_modifier, events) {
        ColumnKind::Array(element) => write_array(element, type_modifier, text, out).map(|whole| {
            if !whole {
                // Debezium cannot convert an element: the whole array is null.
                out.truncate(start);
                out.extend_from_slice(b"null");
            }
        }),
        ColumnKind::Scalar(kind) => write_scalar(kind, type_modifier, text, out),
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// How a column's values are written: the kind of a scalar type, or of an array type's
/// elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnKind {
    /// A scalar.
    Scalar(Kind),
    /// An array mapped element by element.
    Array(Kind),
}

/// The kind of a column's values under the event options: the one place that decides a
/// type's Debezium form, for the value writer and the schema (`schema.rs`) alike.
pub(crate) fn column_kind(type_oid: u32, type_modifier: i32, events: &EventOptions) -> ColumnKind {
    let adjust = |kind: Kind| representation(kind, type_modifier, events);
    match array_element_kind(type_oid) {
        Some(element) => ColumnKind::Array(adjust(element)),
        None => ColumnKind::Scalar(adjust(scalar_kind(type_oid))),
    }
}

/// The representation of a column's values (or an array's elements) under the event options:
/// the one place where Debezium's options meet a PostgreSQL type, each through its option's
/// own deciding function (`crate::event::options`).
fn representation(kind: Kind, type_modifier: i32, events: &EventOptions) -> Kind {
    let precision = u32::try_from(type_modifier).ok();
    let decimal = events.decimal_handling_mode;
    let digits = events.money_fraction_digits;
    match kind {
        // `json`/`jsonb` are Debezium's strings holding the document unless embedded.
        Kind::Json if !events.embed_json => Kind::Text,
        Kind::Numeric | Kind::NumericPrecise | Kind::NumericDouble => match decimal {
            DecimalHandlingMode::Precise => Kind::NumericPrecise,
            DecimalHandlingMode::String => Kind::Numeric,
            DecimalHandlingMode::Double => Kind::NumericDouble,
        },
        Kind::Money(_) | Kind::MoneyPrecise(_) | Kind::MoneyDouble => match decimal {
            DecimalHandlingMode::Precise => Kind::MoneyPrecise(digits),
            DecimalHandlingMode::String => Kind::Money(digits),
            DecimalHandlingMode::Double => Kind::MoneyDouble,
        },
        Kind::Bytea(_) => Kind::Bytea(events.binary_handling_mode),
        Kind::Time(_) => Kind::Time(events.time_precision_mode.time_unit(precision)),
        Kind::Timestamp(_) => Kind::Timestamp(events.time_precision_mode.timestamp_unit(precision)),
        Kind::Interval(_) => Kind::Interval(events.interval_handling_mode),
        kind => kind,
    }
}

/// The text of the value Debezium gives a NOT NULL column it has no value for (a delete's old
/// key under REPLICA IDENTITY DEFAULT or USING INDEX holds only the key or index columns; a
/// value it does not map, such as a streamed `name`): its type's zero, Connect's required
/// fields being unable to hold null. Written by the type's writer: `""` for text-like types,
/// `0`/`false` for numbers, the epoch for dates and timestamps, midnight for times, zero for
/// decimals at the column's scale, `[]` for arrays, `{}` for `hstore`, the point (0,0), and for
/// `box` the unit square from (0,0).
pub(crate) fn required_default_text(type_oid: u32, type_modifier: i32) -> Vec<u8> {
    if array_element_kind(type_oid).is_some() {
        return b"{}".to_vec();
    }
    let zero: &[u8] = match scalar_kind(type_oid) {
        Kind::Bool => b"f",
        Kind::Integer | Kind::Float | Kind::Float4 => b"0",
        // bit(n) holds n bits (its type modifier is n).
        Kind::Bit => return vec![b'0'; usize::try_from(type_modifier).unwrap_or(1).max(1)],
        Kind::Numeric => {
            // numeric(p, s): the modifier is ((p << 16) | s) + 4.
            let scale = u32::try_from(type_modifier - 4).map_or(0, |m| m & 0xffff);
            let mut zero = b"0".to_vec();
            if scale > 0 {
                zero.push(b'.');
                zero.extend(std::iter::repeat_n(b'0', scale as usize));
            }
            return zero;
        }
        Kind::Money(_) | Kind::MoneyPrecise(_) | Kind::MoneyDouble => b"0.00",
        Kind::Bytea(_) => b"\\x",
        Kind::Date => b"1970-01-01",
        Kind::Time(_) => b"00:00:00",
        // The session's IntervalStyle is iso_8601.
        Kind::Interval(_) => b"PT0S",
        Kind::TimeTz => b"00:00:00+00",
        Kind::Timestamp(_) => b"1970-01-01 00:00:00",
        Kind::TimestampTz => b"1970-01-01 00:00:00+00",
        Kind::Point => b"(0,0)",
        Kind::Box => b"(0,0),(1,1)",
        _ => b"",
    };
    zero.to_vec()
}

/// Appends [`required_default_text`]'s value as the column's writer writes it, but for
/// `timestamptz`, whose zero Debezium writes without a fraction (`1970-01-01T00:00:00Z`) whatever
/// the column's precision.
///
/// # Errors
///
/// As [`write_json`] (not expected: the texts are valid values).
pub(crate) fn write_required_default(
    type_oid: u32,
    type_modifier: i32,
    out: &mut Vec<u8>,
    events: &EventOptions,
) -> Result<(), ValueError> {
    if array_element_kind(type_oid).is_none() && matches!(scalar_kind(type_oid), Kind::TimestampTz)
    {
        out.extend_from_slice(b"\"1970-01-01T00:00:00Z\"");
        return Ok(());
    }
    let zero = required_default_text(type_oid, type_modifier);
    write_json(type_oid, type_modifier, &zero, out, events)
}

/// The value of an unchanged TOASTed column the server did not send: Debezium's placeholder
/// (`unavailable_value_placeholder`) in the column's form: for `bytea`, as
/// `binary_handling_mode` writes it; a one-element array for arrays; the string otherwise.
pub(crate) fn write_unavailable(type_oid: u32, events: &EventOptions, out: &mut Vec<u8>) {
    let placeholder = events.unavailable_value_placeholder.as_str();
    match (type_oid, array_element_kind(type_oid)) {
        (17, _) => events
            .binary_handling_mode
            .write_placeholder(placeholder, out),
        (_, Some(_)) => {
            out.push(b'[');
            write_json_str(out, placeholder);
            out.push(b']');
        }
        _ => write_json_str(out, placeholder),
    }
}

#[cfg(test)]
mod tests;
