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

use crate::event::decimal::write_unscaled;
use crate::event::temporal::{civil_from_days, days_from_civil, write_padded};
use base64::Engine as _;

use crate::event::options::{IntervalParts, write_interval_iso};
use crate::event::{
    BinaryHandlingMode, DecimalHandlingMode, EventOptions, HstoreHandlingMode,
    IntervalHandlingMode, TemporalUnit, needs_escape, push_escape, write_escaped, write_json_str,
};

/// Microseconds in a second.
const SECOND_MICROS: i64 = 1_000_000;
/// Microseconds in a minute.
const MINUTE_MICROS: i64 = 60 * SECOND_MICROS;
/// Microseconds in an hour.
const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
/// Microseconds in a day.
const DAY_MICROS: i64 = 24 * HOUR_MICROS;
/// Microseconds in Debezium's average month of 365.25 / 12 = 30.4375 days (exactly
/// 2,629,800 seconds).
const MONTH_MICROS: i64 = 2_629_800 * SECOND_MICROS;
/// The PostgreSQL JDBC driver's `infinity` timestamp (milliseconds), which Debezium writes as
/// is for a `timestamp(0..3)` (`io.debezium.time.Timestamp`).
const TIMESTAMP_INFINITY_MILLIS: i64 = 9_223_372_036_825_200_000;
/// The same for `-infinity`.
const TIMESTAMP_NEG_INFINITY_MILLIS: i64 = -9_223_372_036_832_400_000;
/// Debezium's `date` of `infinity` (the driver's sentinel, converted to days with overflow).
const DATE_INFINITY_DAYS: i64 = -622_191_234;
/// Debezium's `date` of `-infinity`.
const DATE_NEG_INFINITY_DAYS: i64 = -625_821_272;
/// The most dimensions a PostgreSQL array can have (`MAXDIM`).
const MAX_ARRAY_DIMENSIONS: usize = 6;
/// How deeply a `json` value may nest before it is refused (and sent as a string instead).
const MAX_JSON_DEPTH: usize = 512;
/// Decoded bytes per base64 chunk: a multiple of 3, so only the last chunk is padded.
const BYTEA_CHUNK: usize = 768;
/// Debezium's `date` of `infinity` in a streamed (pgoutput) change, where its decoder
/// converts the text itself rather than through the JDBC driver (golden files).
const STREAMED_DATE_INFINITY_DAYS: i64 = 2_146_033_979;
/// The same for `-infinity`.
const STREAMED_DATE_NEG_INFINITY_DAYS: i64 = -2_147_472_691;
/// `name`.
const NAME_OID: u32 = 19;
/// `date`.
const DATE_OID: u32 = 1082;
/// Not a PostgreSQL type (`InvalidOid`): what sluice maps an array of an enum type to (the catalog tells
/// which arrays those are). Its elements are strings; a NULL element makes Debezium write the
/// whole array as `null`.
pub(crate) const ENUM_ARRAY_OID: u32 = 0;

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

/// Appends an `hstore` value (`"k"=>"v", "n"=>NULL`) as `hstore_handling_mode` writes it.
///
/// # Errors
///
/// Text that is not an `hstore` value; `out` is left as it was.
pub(crate) fn write_hstore(
    text: &[u8],
    out: &mut Vec<u8>,
    mode: HstoreHandlingMode,
) -> Result<(), ValueError> {
    let pairs = parse_hstore(text).ok_or(ValueError::Invalid {
        type_name: "hstore",
    })?;
    mode.write(&pairs, out);
    Ok(())
}

/// Parses `hstore`'s output: `"key"=>"value"` pairs (or `=>NULL`) separated by `, `, strings
/// double-quoted with `\` escaping `"` and `\`.
fn parse_hstore(text: &[u8]) -> Option<Vec<(String, Option<String>)>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut chars = text.chars().peekable();
    let mut pairs = Vec::new();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            chars.next();
        }
    };
    let quoted = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<String> {
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(value),
                '\\' => value.push(chars.next()?),
                c => value.push(c),
            }
        }
    };
    skip_ws(&mut chars);
    while chars.peek().is_some() {
        let key = quoted(&mut chars)?;
        skip_ws(&mut chars);
        if chars.next()? != '=' || chars.next()? != '>' {
            return None;
        }
        skip_ws(&mut chars);
        let value = if chars.peek() == Some(&'"') {
            Some(quoted(&mut chars)?)
        } else {
            for expected in ['N', 'U', 'L', 'L'] {
                if chars.next()?.to_ascii_uppercase() != expected {
                    return None;
                }
            }
            None
        };
        pairs.push((key, value));
        skip_ws(&mut chars);
        match chars.next() {
            None => break,
            Some(',') => skip_ws(&mut chars),
            Some(_) => return None,
        }
    }
    Some(pairs)
}

/// Why a column value could not be mapped to JSON. It never holds the value itself, so it is
/// safe to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// A value that must become a JSON string was not UTF-8.
    #[error("the value is not valid UTF-8")]
    InvalidUtf8,
    /// The text is not a value of the type, in the form the session settings produce.
    #[error("the text is not a valid {type_name} value")]
    Invalid {
        /// The PostgreSQL type.
        type_name: &'static str,
    },
    /// The value parsed but its JSON form does not fit: a 64-bit integer of microseconds or
    /// milliseconds, for the temporal types.
    #[error("the {type_name} value is out of range")]
    OutOfRange {
        /// The PostgreSQL type.
        type_name: &'static str,
    },
}

impl ValueError {
    /// The name of the type whose value failed.
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            ValueError::InvalidUtf8 => "text",
            ValueError::Invalid { type_name } | ValueError::OutOfRange { type_name } => type_name,
        }
    }
}

/// How a value of a type becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `bool`: `true` or `false`.
    Bool,
    /// `int2`, `int4`, `int8`, `oid`: a JSON integer.
    Integer,
    /// `float8`: a JSON number, or a string for `NaN` and the infinities.
    Float,
    /// `float4`: the same, its digits chosen as for a 32-bit float.
    Float4,
    /// `bit(n)`: `true`/`false` for `bit(1)`, otherwise as `varbit`.
    Bit,
    /// `varbit`: base64 of the bits as Java's `BitSet.toByteArray` (the last bit is bit 0,
    /// little-endian bytes, trailing zero bytes dropped), as Debezium.
    VarBit,
    /// `numeric` (`decimal.handling.mode=string`): a string of the exact decimal, Debezium's
    /// `NAN`, `POSITIVE_INFINITY`, `NEGATIVE_INFINITY` for the specials.
    Numeric,
    /// `numeric` (`precise`): base64 of the unscaled value's bytes with the column's scale, or
    /// `{"scale","value"}` without one; `null` for the specials.
    NumericPrecise,
    /// `numeric` (`double`): a JSON number, strings for the specials.
    NumericDouble,
    /// `money` (`string`): a string of the amount with this many fraction digits.
    Money(u8),
    /// `money` (`precise`): base64 of the unscaled amount's bytes at this scale.
    MoneyPrecise(u8),
    /// `money` (`double`): a JSON number.
    MoneyDouble,
    /// Text-like and unknown types: a string of the text.
    Text,
    /// `bytea`: a string in the mode's encoding.
    Bytea(BinaryHandlingMode),
    /// `json`, `jsonb`: embedded as is.
    Json,
    /// `date`: days since 1970-01-01.
    Date,
    /// `time`: microseconds or milliseconds since midnight.
    Time(TemporalUnit),
    /// `timetz`: an ISO-8601 time string in UTC.
    TimeTz,
    /// `timestamp`: microseconds or milliseconds since the epoch.
    Timestamp(TemporalUnit),
    /// `timestamptz`: an ISO-8601 timestamp string in UTC.
    TimestampTz,
    /// `interval`: microseconds, or an ISO-8601 string.
    Interval(IntervalHandlingMode),
    /// `point`: `io.debezium.data.geometry.Point`, `{"x","y","wkb","srid"}`.
    Point,
    /// `box`: `io.debezium.data.geometry.Geometry`, a polygon's `{"wkb","srid","extensions"}`.
    Box,
    /// An enum's array elements: strings, but a NULL element nulls the array.
    EnumText,
}

impl Kind {
    /// The type's name, for errors.
    fn name(self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Integer => "integer",
            Kind::Float | Kind::Float4 => "floating-point",
            Kind::Bit | Kind::VarBit => "bit",
            Kind::Numeric | Kind::NumericPrecise | Kind::NumericDouble => "numeric",
            Kind::Money(_) | Kind::MoneyPrecise(_) | Kind::MoneyDouble => "money",
            Kind::Text => "text",
            Kind::Bytea(_) => "bytea",
            Kind::Json => "json",
            Kind::Date => "date",
            Kind::Time(_) => "time",
            Kind::TimeTz => "timetz",
            Kind::Timestamp(_) => "timestamp",
            Kind::TimestampTz => "timestamptz",
            Kind::Interval(_) => "interval",
            Kind::Point => "point",
            Kind::Box => "box",
            Kind::EnumText => "enum",
        }
    }

    /// The error for text that is not a value of this kind.
    fn invalid(self) -> ValueError {
        ValueError::Invalid {
            type_name: self.name(),
        }
    }

    /// The error for a value of this kind whose JSON form does not fit.
    fn out_of_range(self) -> ValueError {
        ValueError::OutOfRange {
            type_name: self.name(),
        }
    }

    /// Whether values of this kind become JSON strings of their (unescaped) text.
    fn is_text(self) -> bool {
        matches!(self, Kind::Text | Kind::EnumText)
    }
}

/// The kind of a non-array type; unknown types are text.
fn scalar_kind(type_oid: u32) -> Kind {
    match type_oid {
        16 => Kind::Bool,
        // int8, int2, int4, oid.
        20 | 21 | 23 | 26 => Kind::Integer,
        700 => Kind::Float4,
        701 => Kind::Float,
        1560 => Kind::Bit,
        1562 => Kind::VarBit,
        1700 => Kind::Numeric,
        790 => Kind::Money(2),
        17 => Kind::Bytea(BinaryHandlingMode::Bytes),
        // json, jsonb.
        114 | 3802 => Kind::Json,
        1082 => Kind::Date,
        1083 => Kind::Time(TemporalUnit::Micros),
        1266 => Kind::TimeTz,
        1114 => Kind::Timestamp(TemporalUnit::Micros),
        1184 => Kind::TimestampTz,
        1186 => Kind::Interval(IntervalHandlingMode::Numeric),
        600 => Kind::Point,
        603 => Kind::Box,
        // text, varchar, bpchar, name, "char", xml, money, inet, cidr, macaddr, uuid, enums,
        // and everything else.
        _ => Kind::Text,
    }
}

/// The element kind of an array type sluice maps element by element; `None` for other types,
/// including arrays of unknown element types, which become a string of the whole literal.
fn array_element_kind(type_oid: u32) -> Option<Kind> {
    Some(match type_oid {
        1000 => Kind::Bool,
        // _int2, _int4, _int8, _oid.
        1005 | 1007 | 1016 | 1028 => Kind::Integer,
        1021 => Kind::Float4,
        1022 => Kind::Float,
        1231 => Kind::Numeric,
        // _text, _varchar, _bpchar, _uuid, _char, _inet, _cidr, _macaddr, _macaddr8.
        1009 | 1015 | 1014 | 2951 | 1002 | 1041 | 651 | 1040 | 775 => Kind::Text,
        // _json, _jsonb.
        199 | 3807 => Kind::Json,
        1001 => Kind::Bytea(BinaryHandlingMode::Bytes),
        1182 => Kind::Date,
        1183 => Kind::Time(TemporalUnit::Micros),
        1270 => Kind::TimeTz,
        1115 => Kind::Timestamp(TemporalUnit::Micros),
        1185 => Kind::TimestampTz,
        1187 => Kind::Interval(IntervalHandlingMode::Numeric),
        ENUM_ARRAY_OID => Kind::EnumText,
        _ => return None,
    })
}

/// Appends the JSON form of one scalar value.
fn write_scalar(
    kind: Kind,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    match kind {
        Kind::Bool => match text {
            b"t" => out.extend_from_slice(b"true"),
            b"f" => out.extend_from_slice(b"false"),
            _ => return Err(kind.invalid()),
        },
        Kind::Integer => {
            parse_integer(text).ok_or(kind.invalid())?;
            out.extend_from_slice(text);
        }
        Kind::Float => write_float(text, false, out)?,
        Kind::Float4 => write_float(text, true, out)?,
        Kind::Bit if type_modifier == 1 => match text {
            b"1" => out.extend_from_slice(b"true"),
            b"0" => out.extend_from_slice(b"false"),
            _ => return Err(kind.invalid()),
        },
        Kind::Bit | Kind::VarBit => {
            if !text.iter().all(|b| matches!(b, b'0' | b'1')) {
                return Err(kind.invalid());
            }
            let mut bytes = vec![0u8; text.len().div_ceil(8)];
            for (i, bit) in text.iter().rev().enumerate() {
                if *bit == b'1' {
                    bytes[i / 8] |= 1 << (i % 8);
                }
            }
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(&bytes)
                    .as_bytes(),
            );
            out.push(b'"');
        }
        Kind::Numeric => write_numeric(text, out)?,
        Kind::NumericPrecise => write_numeric_precise(type_modifier, text, out)?,
        Kind::NumericDouble => {
            if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
                write_ascii_string(text, out);
            } else {
                split_decimal(text).ok_or(Kind::Numeric.invalid())?;
                write_double(text, out)?;
            }
        }
        Kind::MoneyDouble => {
            let (negative, int, frac) = parse_money(text, 2)?;
            let sign = if negative { "-" } else { "" };
            let int = if int.is_empty() { "0" } else { int.as_str() };
            write_double(format!("{sign}{int}.{frac}").as_bytes(), out)?;
        }
        Kind::Money(digits) => {
            let (negative, int, frac) = parse_money(text, digits)?;
            out.push(b'"');
            if negative
                && (int.trim_start_matches('0').len() + frac.trim_end_matches('0').len()) > 0
            {
                out.push(b'-');
            }
            out.extend_from_slice(if int.is_empty() { b"0" } else { int.as_bytes() });
            if !frac.is_empty() {
                out.push(b'.');
                out.extend_from_slice(frac.as_bytes());
            }
            out.push(b'"');
        }
        Kind::MoneyPrecise(digits) => {
            let (negative, int, frac) = parse_money(text, digits)?;
            write_unscaled(negative, &format!("{int}{frac}"), out);
        }
        Kind::Text | Kind::EnumText => write_string(text, out)?,
        Kind::Point => write_point(text, out)?,
        Kind::Box => write_box(text, out)?,
        Kind::Bytea(mode) => write_bytea(mode, text, out)?,
        Kind::Json => write_embedded_json(text, out)?,
        Kind::Date => write_date(text, out)?,
        Kind::Time(unit) => write_time(unit, text, out)?,
        Kind::TimeTz => write_timetz(text, out)?,
        Kind::Timestamp(unit) => write_timestamp(unit, text, out)?,
        Kind::TimestampTz => write_timestamptz(type_modifier, text, out)?,
        Kind::Interval(IntervalHandlingMode::Numeric) => write_int(out, parse_interval(text)?),
        Kind::Interval(IntervalHandlingMode::String) => write_interval_string(text, out)?,
    }
    Ok(())
}

/// Parses a decimal integer in JSON's form (no `+`, no leading zeros) that fits in an `i64`.
fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        // Accumulating negatively reaches i64::MIN too.
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// Appends a `float4` (`single`) or `float8`: a JSON number, or a string for `NaN`, `Infinity`
/// and `-Infinity`, which JSON numbers cannot express. The digits are Java's (Debezium's):
/// PostgreSQL's shortest exact form, except that where it has one significant digit Java writes
/// the two-digit decimal nearest the value (`1e-45` → `1.4E-45`, `5e-324` → `4.9E-324`).
fn write_float(text: &[u8], single: bool, out: &mut Vec<u8>) -> Result<(), ValueError> {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        write_ascii_string(text, out);
        return Ok(());
    }
    // The text must be a JSON number as it stands and, parsed, finite: JSON parsers refuse
    // numbers that overflow a double.
    let finite = is_json_number(text)
        && std::str::from_utf8(text)
            .ok()
            .and_then(|text| text.parse::<f64>().ok())
            .is_some_and(f64::is_finite);
    if !finite {
        return Err(Kind::Float.invalid());
    }
    let mantissa = text
        .split(|b| *b == b'e' || *b == b'E')
        .next()
        .unwrap_or(text);
    let significant: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(u8::is_ascii_digit)
        .skip_while(|b| *b == b'0')
        .collect();
    let trimmed = significant.len() - significant.iter().rev().take_while(|b| **b == b'0').count();
    if trimmed == 1 {
        let text = std::str::from_utf8(text).unwrap_or_default();
        let two = if single {
            text.parse::<f32>().map(|v| format!("{v:.1e}")).ok()
        } else {
            text.parse::<f64>().map(|v| format!("{v:.1e}")).ok()
        };
        // Only when the second digit is not 0: otherwise the value is the same.
        if let Some(two) = two.filter(|t| t.split('e').next().is_some_and(|m| !m.ends_with('0'))) {
            out.extend_from_slice(two.as_bytes());
            return Ok(());
        }
    }
    out.extend_from_slice(text);
    Ok(())
}

/// Appends an exact decimal as the nearest 64-bit float (Debezium's
/// `decimal.handling.mode=double`, `BigDecimal.doubleValue()`), in the shortest form that
/// reads back as the same float; a value past the float range is `"Infinity"` or
/// `"-Infinity"`, as Java's conversion makes it.
fn write_double(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let value = std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .ok_or(Kind::NumericDouble.invalid())?;
    if value.is_infinite() {
        write_ascii_string(
            if value > 0.0 {
                b"Infinity"
            } else {
                b"-Infinity"
            },
            out,
        );
        return Ok(());
    }
    // `{:?}` is the shortest round-trip form, with an exponent for very large or small values.
    write_float(format!("{value:?}").as_bytes(), false, out)
}

/// Whether `text` is a number in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]?
/// [0-9]+)?`.
fn is_json_number(text: &[u8]) -> bool {
    let mut cursor = Cursor::new(text);
    cursor.eat(b'-');
    match cursor.peek() {
        Some(b'0') => cursor.pos += 1,
        Some(b'1'..=b'9') => {
            cursor.skip_digits();
        }
        _ => return false,
    }
    if cursor.eat(b'.') && cursor.skip_digits() == 0 {
        return false;
    }
    if cursor.eat(b'e') || cursor.eat(b'E') {
        if !cursor.eat(b'+') {
            cursor.eat(b'-');
        }
        if cursor.skip_digits() == 0 {
            return false;
        }
    }
    cursor.at_end()
}

/// Appends a `numeric` as a string of its exact decimal text (Debezium's
/// `decimal.handling.mode=string`); `NaN` and the infinities keep their names.
fn write_numeric(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let special: &[u8] = match text {
        b"NaN" => b"NAN",
        b"Infinity" => b"POSITIVE_INFINITY",
        b"-Infinity" => b"NEGATIVE_INFINITY",
        _ => {
            split_decimal(text).ok_or(Kind::Numeric.invalid())?;
            text
        }
    };
    write_ascii_string(special, out);
    Ok(())
}

/// A decimal's text `-?digits(.digits)?` as (negative, integer digits, fraction digits).
fn split_decimal(text: &[u8]) -> Option<(bool, &str, &str)> {
    let text = std::str::from_utf8(text).ok()?;
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!int.is_empty() && digits(int) && digits(frac) && (!frac.is_empty() || !rest.ends_with('.')))
        .then_some((negative, int, frac))
}

/// `numeric` in Debezium's `precise` mode: with a declared scale, base64 of the unscaled
/// value's bytes (`org.apache.kafka.connect.data.Decimal`); without one,
/// `{"scale":s,"value":…}` with trailing fraction zeros dropped
/// (`io.debezium.data.VariableScaleDecimal`). NaN and the infinities, which neither can hold,
/// are `null` (as Debezium).
fn write_numeric_precise(
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    let (negative, int, frac) = split_decimal(text).ok_or(Kind::Numeric.invalid())?;
    if type_modifier >= 4 {
        // numeric(p, s): PostgreSQL prints exactly s fraction digits.
        write_unscaled(negative, &format!("{int}{frac}"), out);
    } else {
        let frac = frac.trim_end_matches('0');
        out.extend_from_slice(b"{\"scale\":");
        write_int(out, frac.len() as i64);
        out.extend_from_slice(b",\"value\":");
        write_unscaled(negative, &format!("{int}{frac}"), out);
        out.push(b'}');
    }
    Ok(())
}

/// A `money` text as PostgreSQL formats it (`-$1,234.56`, `($1.00)`, with `lc_monetary`'s
/// symbol and grouping) as (negative, integer digits, `digits` fraction digits), rounded half
/// up to Debezium's `money.fraction.digits`.
fn parse_money(text: &[u8], digits: u8) -> Result<(bool, String, String), ValueError> {
    let invalid = ValueError::Invalid { type_name: "money" };
    let text = std::str::from_utf8(text).map_err(|_| invalid)?;
    let negative = text.contains('-') || text.contains('(');
    let (int, frac) = text.rsplit_once('.').unwrap_or((text, ""));
    let int: String = int.chars().filter(char::is_ascii_digit).collect();
    let mut frac: String = frac.chars().filter(char::is_ascii_digit).collect();
    if int.is_empty() && frac.is_empty() {
        return Err(invalid);
    }
    let digits = usize::from(digits);
    let round_up = frac.as_bytes().get(digits).is_some_and(|d| *d >= b'5');
    frac.truncate(digits);
    while frac.len() < digits {
        frac.push('0');
    }
    if !round_up {
        return Ok((negative, int, frac));
    }
    // Add one unit of the last kept digit to int.frac, as decimal text.
    let mut all: Vec<u8> = format!("{int}{frac}").into_bytes();
    let mut carry = true;
    for digit in all.iter_mut().rev() {
        if *digit == b'9' {
            *digit = b'0';
        } else {
            *digit += 1;
            carry = false;
            break;
        }
    }
    if carry {
        all.insert(0, b'1');
    }
    let split = all.len() - digits;
    let frac = String::from_utf8_lossy(&all[split..]).into_owned();
    let int = String::from_utf8_lossy(&all[..split]).into_owned();
    Ok((negative, int, frac))
}

/// Appends `text`, which must be UTF-8, as a JSON string.
fn write_string(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    out.push(b'"');
    write_escaped(text, out);
    out.push(b'"');
    Ok(())
}

/// Appends text known to need no escaping (digits, letters, signs) as a JSON string.
fn write_ascii_string(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(text);
    out.push(b'"');
}

/// Appends the body of a JSON string for an array element that still holds PostgreSQL's
/// backslash escapes: each backslash is dropped and the byte after it taken literally.
fn write_escaped_unquoting(element: &[u8], out: &mut Vec<u8>) {
    let mut bytes = element.iter();
    while let Some(&byte) = bytes.next() {
        let byte = if byte == b'\\' {
            match bytes.next() {
                Some(&escaped) => escaped,
                None => break,
            }
        } else {
            byte
        };
        if needs_escape(byte) {
            push_escape(byte, out);
        } else {
            out.push(byte);
        }
    }
}

/// Appends a `bytea` in hex format (`\x0a0b…`) as a string in `binary_handling_mode`'s
/// encoding: base64 (standard or URL-safe alphabet, padded) or lowercase hex.
fn write_bytea(mode: BinaryHandlingMode, text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let invalid = Kind::Bytea(mode).invalid();
    let hex = text.strip_prefix(b"\\x").ok_or(invalid)?;
    if !hex.len().is_multiple_of(2) {
        return Err(invalid);
    }
    let Some(engine) = mode.base64_engine() else {
        if !hex.iter().all(|b| hex_digit(*b).is_some()) {
            return Err(invalid);
        }
        out.push(b'"');
        out.extend(hex.iter().map(u8::to_ascii_lowercase));
        out.push(b'"');
        return Ok(());
    };
    let encoded_len =
        base64::encoded_len(hex.len() / 2, true).ok_or(Kind::Bytea(mode).out_of_range())?;
    out.push(b'"');
    let start = out.len();
    out.resize(start.saturating_add(encoded_len), 0);
    let mut written = 0;
    let mut chunk = [0u8; BYTEA_CHUNK];
    for pairs in hex.chunks(BYTEA_CHUNK * 2) {
        let mut len = 0;
        for (slot, pair) in chunk.iter_mut().zip(pairs.chunks_exact(2)) {
            let [high, low] = pair else {
                return Err(invalid);
            };
            *slot = (hex_digit(*high).ok_or(invalid)? << 4) | hex_digit(*low).ok_or(invalid)?;
            len += 1;
        }
        let input = chunk.get(..len).ok_or(invalid)?;
        let target = out.get_mut(start + written..).ok_or(invalid)?;
        written += engine.encode_slice(input, target).map_err(|_| invalid)?;
    }
    out.truncate(start + written);
    out.push(b'"');
    Ok(())
}

/// The value of one hexadecimal digit.
fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Appends a `json` or `jsonb` value as is, after checking that it is one JSON value.
///
/// PostgreSQL only stores valid JSON, but one bad value would make the whole event unreadable,
/// so the check is worth its single pass.
fn write_embedded_json(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    if !JsonChecker::new(text).check() {
        return Err(Kind::Json.invalid());
    }
    out.extend_from_slice(text);
    Ok(())
}

/// Appends a `date` as days since 1970-01-01 (Debezium's `io.debezium.time.Date`);
/// `infinity` and `-infinity` become the day numbers Debezium writes for them.
fn write_date(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let infinity = match text {
        b"infinity" => Some(DATE_INFINITY_DAYS),
        b"-infinity" => Some(DATE_NEG_INFINITY_DAYS),
        _ => None,
    };
    if let Some(days) = infinity {
        write_int(out, days);
        return Ok(());
    }
    let (body, bc) = strip_bc(text);
    let mut cursor = Cursor::new(body);
    let days = cursor
        .date(bc)
        .filter(|_| cursor.at_end())
        .ok_or(Kind::Date.invalid())?;
    // The JDBC driver Debezium reads snapshots (and arrays) with drops the era: a `BC` date is
    // the same day of the same-numbered year AD.
    let days = if bc {
        Cursor::new(body).date(false).unwrap_or(days)
    } else {
        days
    };
    write_int(out, days);
    Ok(())
}

/// A point's coordinates: each as its text and its value.
type Coordinates<'a> = (&'a [u8], &'a [u8], f64, f64);

/// Parses `(x,y)` into its two coordinates, checked as floats.
fn parse_point(text: &[u8], kind: Kind) -> Result<Coordinates<'_>, ValueError> {
    let inner = text
        .strip_prefix(b"(")
        .and_then(|t| t.strip_suffix(b")"))
        .ok_or(kind.invalid())?;
    let comma = inner
        .iter()
        .position(|b| *b == b',')
        .ok_or(kind.invalid())?;
    let (x, y) = (&inner[..comma], &inner[comma + 1..]);
    let parse = |t: &[u8]| {
        std::str::from_utf8(t)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .ok_or(kind.invalid())
    };
    Ok((x, y, parse(x)?, parse(y)?))
}

/// Appends a `point` as Debezium's `io.debezium.data.geometry.Point`.
fn write_point(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let (x_text, y_text, x, y) = parse_point(text, Kind::Point)?;
    out.extend_from_slice(b"{\"x\":");
    write_float(x_text, false, out)?;
    out.extend_from_slice(b",\"y\":");
    write_float(y_text, false, out)?;
    out.extend_from_slice(b",\"wkb\":");
    crate::event::geometry::write_wkb(&crate::event::geometry::point_wkb(x, y), out);
    out.extend_from_slice(b",\"srid\":null}");
    Ok(())
}

/// Appends a `box` (`(x1,y1),(x2,y2)`) as Debezium's `io.debezium.data.geometry.Geometry`: a
/// polygon's WKB, no SRID, `"extensions":{"type":"box"}`.
fn write_box(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let split = text
        .windows(3)
        .position(|w| w == b"),(")
        .ok_or(Kind::Box.invalid())?;
    let (_, _, x1, y1) = parse_point(&text[..=split], Kind::Box)?;
    let (_, _, x2, y2) = parse_point(&text[split + 2..], Kind::Box)?;
    out.extend_from_slice(b"{\"wkb\":");
    crate::event::geometry::write_wkb(&crate::event::geometry::box_wkb(x1, y1, x2, y2), out);
    out.extend_from_slice(b",\"srid\":null,\"extensions\":{\"type\":\"box\"}}");
    Ok(())
}

/// Appends a `time` as microseconds or milliseconds since midnight (the unit
/// `time_precision_mode` chose for the column).
fn write_time(unit: TemporalUnit, text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let mut cursor = Cursor::new(text);
    let micros = cursor
        .time_of_day()
        .filter(|_| cursor.at_end())
        .ok_or(Kind::Time(unit).invalid())?;
    if unit == TemporalUnit::Millis {
        write_int(out, micros / 1000);
    } else {
        write_int(out, micros);
    }
    Ok(())
}

/// Appends a `timetz` as a string `HH:MM:SS[.ffffff]Z` normalized to UTC, trailing zeros of
/// the fraction trimmed (`io.debezium.time.ZonedTime`).
fn write_timetz(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let mut cursor = Cursor::new(text);
    let (micros, offset) = cursor
        .time_of_day()
        .and_then(|micros| Some((micros, cursor.offset_seconds()?)))
        .filter(|_| cursor.at_end())
        .ok_or(Kind::TimeTz.invalid())?;
    // The end of the day at UTC stays 24:00:00, as Debezium keeps it; anything else wraps.
    let utc = if micros == DAY_MICROS && offset == 0 {
        DAY_MICROS
    } else {
        (micros - offset * SECOND_MICROS).rem_euclid(DAY_MICROS)
    };
    out.push(b'"');
    write_clock(utc, None, out);
    out.extend_from_slice(b"Z\"");
    Ok(())
}

/// Appends a `timestamp` as microseconds or milliseconds since the epoch (the unit
/// `time_precision_mode` chose for the column). `infinity` and `-infinity` become the values
/// Debezium uses for them.
fn write_timestamp(unit: TemporalUnit, text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    // Debezium: the driver's sentinels as they are in milliseconds, the `i64` limits in
    // microseconds.
    let millis = unit == TemporalUnit::Millis;
    let infinity = match (text, millis) {
        (b"infinity", true) => Some(TIMESTAMP_INFINITY_MILLIS),
        (b"-infinity", true) => Some(TIMESTAMP_NEG_INFINITY_MILLIS),
        (b"infinity", false) => Some(i64::MAX),
        (b"-infinity", false) => Some(i64::MIN),
        _ => None,
    };
    if let Some(value) = infinity {
        write_int(out, value);
        return Ok(());
    }
    let exact = parse_timestamp(Kind::Timestamp(unit), text)?;
    if millis {
        // Milliseconds reach past the microseconds' `i64` range (year 294276 is
        // 9224318015999999 ms, as Debezium writes it).
        let millis = i64::try_from(exact.div_euclid(1000))
            .map_err(|_| Kind::Timestamp(unit).out_of_range())?;
        write_int(out, millis);
    } else {
        // Past the `i64` range, Debezium's Java arithmetic (saturate, then wrap).
        write_int(out, crate::event::temporal::java_epoch_micros(exact));
    }
    Ok(())
}

/// Appends a `timestamptz` as an ISO-8601 string in UTC (`io.debezium.time.ZonedTimestamp`)
/// with as many fractional digits as the column's precision, 6 when it has none;
/// `infinity` and `-infinity` stay strings of their names.
fn write_timestamptz(type_modifier: i32, text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    if matches!(text, b"infinity" | b"-infinity") {
        write_ascii_string(text, out);
        return Ok(());
    }
    let micros = parse_timestamp(Kind::TimestampTz, text)?;
    let day_micros = i128::from(DAY_MICROS);
    let days = i64::try_from(micros.div_euclid(day_micros))
        .map_err(|_| Kind::TimestampTz.out_of_range())?;
    // In 0..DAY_MICROS, so it fits.
    let time = i64::try_from(micros.rem_euclid(day_micros)).unwrap_or(0);
    let digits = usize::try_from(type_modifier)
        .ok()
        .filter(|&digits| digits <= 5)
        .unwrap_or(6);
    let (year, month, day) = civil_from_days(days);
    out.push(b'"');
    write_year(year, out);
    out.push(b'-');
    write_padded(u64::from(month), 2, out);
    out.push(b'-');
    write_padded(u64::from(day), 2, out);
    out.push(b'T');
    write_clock(time, Some(digits), out);
    out.extend_from_slice(b"Z\"");
    Ok(())
}

/// Parses a `timestamp` (`YYYY-MM-DD HH:MM:SS[.f][ BC]`) or, for [`Kind::TimestampTz`], a
/// `timestamptz` (the same with an offset before the era) into microseconds since the epoch,
/// in UTC. The result is wide: PostgreSQL's latest timestamps (year 294276) are past `i64`
/// microseconds since 1970.
fn parse_timestamp(kind: Kind, text: &[u8]) -> Result<i128, ValueError> {
    let (body, bc) = strip_bc(text);
    let mut cursor = Cursor::new(body);
    let days = cursor.date(bc).ok_or(kind.invalid())?;
    if !cursor.eat(b' ') {
        return Err(kind.invalid());
    }
    let time = cursor.time_of_day().ok_or(kind.invalid())?;
    let offset = if kind == Kind::TimestampTz {
        cursor.offset_seconds().ok_or(kind.invalid())?
    } else {
        0
    };
    if !cursor.at_end() {
        return Err(kind.invalid());
    }
    Ok(i128::from(days) * i128::from(DAY_MICROS) + i128::from(time)
        - i128::from(offset) * i128::from(SECOND_MICROS))
}

/// Parses an `interval` in `iso_8601` style (`P1Y2M3DT4H5M6.5S`, `PT0S`, with a sign on any
/// component) into microseconds (`io.debezium.time.MicroDuration`), a month counting 30.4375
/// days as in Debezium.
///
/// The sum is exact, in integers; Debezium computes it in floating point and truncates, so its
/// value can be 1 µs off for some fractional seconds.
fn parse_interval(text: &[u8]) -> Result<i64, ValueError> {
    let invalid = Kind::Interval(IntervalHandlingMode::Numeric).invalid();
    let body = text.strip_prefix(b"P").ok_or(invalid)?;
    let mut cursor = Cursor::new(body);
    let mut total: i128 = 0;
    let mut in_time = false;
    let mut components = 0;
    while !cursor.at_end() {
        if !in_time && cursor.eat(b'T') {
            in_time = true;
            components = 0;
            continue;
        }
        let negative = cursor.eat(b'-');
        if !negative {
            cursor.eat(b'+');
        }
        let whole = cursor.number(1, 19).ok_or(invalid)?;
        let fraction = if in_time && cursor.peek() == Some(b'.') {
            Some(cursor.fraction_micros().ok_or(invalid)?)
        } else {
            None
        };
        let unit = cursor.next().ok_or(invalid)?;
        let scale = match (in_time, unit) {
            (false, b'Y') => 12 * MONTH_MICROS,
            (false, b'M') => MONTH_MICROS,
            (false, b'W') => 7 * DAY_MICROS,
            (false, b'D') => DAY_MICROS,
            (true, b'H') => HOUR_MICROS,
            (true, b'M') => MINUTE_MICROS,
            (true, b'S') => SECOND_MICROS,
            _ => return Err(invalid),
        };
        if fraction.is_some() && unit != b'S' {
            return Err(invalid);
        }
        let value = i128::from(whole) * i128::from(scale) + i128::from(fraction.unwrap_or(0));
        let value = if negative { -value } else { value };
        total = total
            .checked_add(value)
            .ok_or(Kind::Interval(IntervalHandlingMode::Numeric).out_of_range())?;
        components += 1;
    }
    // `P` alone, or a `T` with nothing after it, is not an interval.
    if components == 0 {
        return Err(invalid);
    }
    // Debezium saturates an interval past the `i64` range at its limits.
    Ok(i64::try_from(total).unwrap_or(if total < 0 { i64::MIN } else { i64::MAX }))
}

/// Appends an `interval` in `iso_8601` style as Debezium's `interval.handling.mode=string`
/// (`io.debezium.time.Interval`): the components as the server splits them, each one written.
fn write_interval_string(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let invalid = Kind::Interval(IntervalHandlingMode::String).invalid();
    let body = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.strip_prefix('P'))
        .ok_or(invalid)?;
    let mut parts = IntervalParts {
        seconds: "0",
        ..IntervalParts::default()
    };
    let (date, time) = body.split_once('T').unwrap_or((body, ""));
    let mut components = 0;
    for (part, in_time) in [(date, false), (time, true)] {
        let mut rest = part;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| c.is_ascii_alphabetic())
                .ok_or(invalid)?;
            let (number, unit) = (&rest[..end], rest.as_bytes()[end]);
            rest = &rest[end + 1..];
            components += 1;
            if in_time && unit == b'S' {
                let (negative, digits) = match number.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, number.strip_prefix('+').unwrap_or(number)),
                };
                let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
                if whole.is_empty()
                    || !whole
                        .bytes()
                        .chain(fraction.bytes())
                        .all(|b| b.is_ascii_digit())
                {
                    return Err(invalid);
                }
                parts.seconds_negative = negative;
                parts.seconds = whole;
                parts.fraction = fraction;
                continue;
            }
            let value: i64 = number.parse().map_err(|_| invalid)?;
            let slot = match (in_time, unit) {
                (false, b'Y') => &mut parts.years,
                (false, b'M') => &mut parts.months,
                (false, b'D') => &mut parts.days,
                (true, b'H') => &mut parts.hours,
                (true, b'M') => &mut parts.minutes,
                _ => return Err(invalid),
            };
            *slot = value;
        }
    }
    if components == 0 {
        return Err(invalid);
    }
    write_interval_iso(&parts, out);
    Ok(())
}

/// Splits PostgreSQL's era suffix ` BC` off a date or timestamp.
fn strip_bc(text: &[u8]) -> (&[u8], bool) {
    match text.strip_suffix(b" BC") {
        Some(body) => (body, true),
        None => (text, false),
    }
}

/// Appends a time of day in microseconds as `HH:MM:SS`, then the fraction: exactly `digits`
/// digits when given (none for 0), else the six digits with trailing zeros trimmed (none for
/// a whole second).
fn write_clock(micros: i64, digits: Option<usize>, out: &mut Vec<u8>) {
    let micros = micros.unsigned_abs();
    let seconds = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    write_padded(seconds / 3600, 2, out);
    out.push(b':');
    write_padded(seconds / 60 % 60, 2, out);
    out.push(b':');
    write_padded(seconds % 60, 2, out);
    let (fraction, digits) = match digits {
        Some(digits) => {
            let digits = digits.min(6);
            // Six digits, keeping the first `digits` of them.
            let divisor = 10u64.pow(u32::try_from(6 - digits).unwrap_or(0));
            (fraction / divisor, digits)
        }
        None => {
            let mut fraction = fraction;
            let mut digits = 6;
            while fraction != 0 && fraction.is_multiple_of(10) {
                fraction /= 10;
                digits -= 1;
            }
            (fraction, if fraction == 0 { 0 } else { digits })
        }
    };
    if digits > 0 {
        out.push(b'.');
        write_padded(fraction, digits, out);
    }
}

/// Appends a year as Java's ISO formatter does: four digits at least, a `+` above 9999, a `-`
/// before the zero-padded magnitude of a negative (astronomical) year.
fn write_year(year: i64, out: &mut Vec<u8>) {
    if year > 9999 {
        out.push(b'+');
    } else if year < 0 {
        out.push(b'-');
    }
    write_padded(year.unsigned_abs(), 4, out);
}

/// Appends an integer in decimal.
fn write_int(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The number of days in a month of an (astronomical) year.
fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        _ => 28,
    }
}

/// A checked reader over the text of one value.
struct Cursor<'a> {
    /// The text.
    text: &'a [u8],
    /// The offset of the next unread byte.
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Starts reading `text` at its first byte.
    fn new(text: &'a [u8]) -> Self {
        Self { text, pos: 0 }
    }

    /// The next byte, without taking it.
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Takes the next byte.
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    /// Takes the next byte if it is `byte`.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Whether everything was read.
    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    /// Takes ASCII digits while there are any; returns how many.
    fn skip_digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Reads a decimal number of `min` to `max` digits (at most 19, so it fits).
    fn number(&mut self, min: usize, max: usize) -> Option<u64> {
        let mut value: u64 = 0;
        let mut count = 0;
        while count < max {
            match self.peek() {
                Some(digit @ b'0'..=b'9') => {
                    value = value * 10 + u64::from(digit - b'0');
                    self.pos += 1;
                    count += 1;
                }
                _ => break,
            }
        }
        (count >= min).then_some(value)
    }

    /// Reads `.` and 1 to 6 digits as microseconds.
    fn fraction_micros(&mut self) -> Option<i64> {
        if !self.eat(b'.') {
            return None;
        }
        let start = self.pos;
        let value = self.number(1, 6)?;
        let digits = self.pos - start;
        if self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let scale = 10u64.pow(u32::try_from(6 - digits).ok()?);
        i64::try_from(value * scale).ok()
    }

    /// Reads a date `Y…Y-MM-DD` (the year in 1 to 9 digits) as days since 1970-01-01; `bc`
    /// says the era suffix was ` BC`.
    fn date(&mut self, bc: bool) -> Option<i64> {
        let year = i64::try_from(self.number(1, 9)?).ok()?;
        if !self.eat(b'-') {
            return None;
        }
        let month = u32::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b'-') {
            return None;
        }
        let day = u32::try_from(self.number(2, 2)?).ok()?;
        // There is no year 0 in either era; 1 BC is astronomical year 0.
        if year < 1 {
            return None;
        }
        let year = if bc { 1 - year } else { year };
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        Some(days_from_civil(year, month, day))
    }

    /// Reads a time of day `HH:MM:SS[.f]` as microseconds; `24:00:00` is the end of the day.
    fn time_of_day(&mut self) -> Option<i64> {
        let hour = i64::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b':') {
            return None;
        }
        let minute = i64::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b':') {
            return None;
        }
        let second = i64::try_from(self.number(2, 2)?).ok()?;
        let fraction = if self.peek() == Some(b'.') {
            self.fraction_micros()?
        } else {
            0
        };
        if hour > 24 || minute > 59 || second > 59 {
            return None;
        }
        let micros =
            hour * HOUR_MICROS + minute * MINUTE_MICROS + second * SECOND_MICROS + fraction;
        (micros <= DAY_MICROS).then_some(micros)
    }

    /// Reads a UTC offset `±HH[:MM[:SS]]` as seconds east of UTC.
    fn offset_seconds(&mut self) -> Option<i64> {
        let sign = match self.next()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let hours = i64::try_from(self.number(2, 2)?).ok()?;
        let minutes = if self.eat(b':') {
            i64::try_from(self.number(2, 2)?).ok()?
        } else {
            0
        };
        let seconds = if self.eat(b':') {
            i64::try_from(self.number(2, 2)?).ok()?
        } else {
            0
        };
        if minutes > 59 || seconds > 59 {
            return None;
        }
        Some(sign * (hours * 3600 + minutes * 60 + seconds))
    }
}

/// Appends an array literal (`{1,2,NULL}`, `[0:1]={a,b}`, quoted elements with backslash
/// escapes) as a JSON array, each element mapped as a value of `element` with the column's
/// type modifier. As Debezium: a multi-dimensional array is its outer list with every
/// sub-array `null`; returns `false` (the caller writes `null` instead) when Debezium cannot
/// convert an element — a `numeric` NaN or infinity, an enum array's NULL.
fn write_array(
    element: Kind,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, ValueError> {
    /// Where the parser is within a list.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum State {
        /// Just after `{`: an element, a sub-array or `}`.
        Opened,
        /// After `,`: an element or a sub-array.
        Element,
        /// After an element or a sub-array: `,` or `}`.
        Separator,
    }

    let invalid = ValueError::Invalid { type_name: "array" };
    if element.is_text() {
        // Escaping works on bytes, so string elements are checked once, here.
        std::str::from_utf8(text).map_err(|_| ValueError::InvalidUtf8)?;
    }
    let mut pos = skip_dimensions(text).ok_or(invalid)?;
    pos = skip_whitespace(text, pos);
    if text.get(pos) != Some(&b'{') {
        return Err(invalid);
    }
    pos += 1;
    out.push(b'[');
    let mut depth = 1;
    let mut state = State::Opened;
    // Unescaped elements that are parsed as values go here; allocated only if one is needed.
    let mut scratch = Vec::new();
    while depth > 0 {
        pos = skip_whitespace(text, pos);
        let byte = *text.get(pos).ok_or(invalid)?;
        match (state, byte) {
            (State::Opened | State::Separator, b'}') => {
                out.push(b']');
                pos += 1;
                depth -= 1;
                state = State::Separator;
            }
            (State::Separator, b',') => {
                out.push(b',');
                pos += 1;
                state = State::Element;
            }
            (State::Separator, _) => return Err(invalid),
            (_, b'{') => {
                // A sub-array: Debezium's element is null.
                pos = skip_sub_array(text, pos).ok_or(invalid)?;
                out.extend_from_slice(b"null");
                state = State::Separator;
            }
            (_, b'"') => {
                let (raw, escaped, end) = quoted_element(text, pos + 1).ok_or(invalid)?;
                if matches!(element, Kind::Numeric | Kind::NumericPrecise)
                    && matches!(raw, b"NaN" | b"Infinity" | b"-Infinity")
                {
                    return Ok(false);
                }
                write_element(element, type_modifier, raw, escaped, out, &mut scratch)?;
                pos = end;
                state = State::Separator;
            }
            (_, b',' | b'}') => return Err(invalid),
            _ => {
                let (raw, escaped, end) = unquoted_element(text, pos).ok_or(invalid)?;
                if !escaped && raw.eq_ignore_ascii_case(b"NULL") {
                    if element == Kind::EnumText {
                        return Ok(false);
                    }
                    out.extend_from_slice(b"null");
                } else if matches!(element, Kind::Numeric | Kind::NumericPrecise)
                    && matches!(raw, b"NaN" | b"Infinity" | b"-Infinity")
                {
                    return Ok(false);
                } else {
                    write_element(element, type_modifier, raw, escaped, out, &mut scratch)?;
                }
                pos = end;
                state = State::Separator;
            }
        }
    }
    if skip_whitespace(text, pos) != text.len() {
        return Err(invalid);
    }
    Ok(true)
}

/// The position after the sub-array that starts (`{`) at `start`, nested at most
/// [`MAX_ARRAY_DIMENSIONS`] deep, quoted elements skipped whole.
fn skip_sub_array(text: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0;
    let mut pos = start;
    loop {
        match *text.get(pos)? {
            b'{' => {
                depth += 1;
                if depth >= MAX_ARRAY_DIMENSIONS {
                    return None;
                }
                pos += 1;
            }
            b'}' => {
                depth -= 1;
                pos += 1;
                if depth == 0 {
                    return Some(pos);
                }
            }
            b'"' => pos = quoted_element(text, pos + 1)?.2,
            b'\\' => pos += 2,
            _ => pos += 1,
        }
    }
}

/// Skips the optional dimension decoration (`[1:2][0:3]=`) of an array literal; returns where
/// the literal proper starts.
fn skip_dimensions(text: &[u8]) -> Option<usize> {
    if text.first() != Some(&b'[') {
        return Some(0);
    }
    let mut cursor = Cursor::new(text);
    while cursor.eat(b'[') {
        cursor.eat(b'-');
        cursor.number(1, 10)?;
        if !cursor.eat(b':') {
            return None;
        }
        cursor.eat(b'-');
        cursor.number(1, 10)?;
        if !cursor.eat(b']') {
            return None;
        }
    }
    cursor.eat(b'=').then_some(cursor.pos)
}

/// The position of the first byte at or after `pos` that is not ASCII whitespace.
fn skip_whitespace(text: &[u8], mut pos: usize) -> usize {
    while text.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// Finds the end of a quoted element whose content starts at `start`: returns the raw content
/// (escapes still in), whether it holds escapes, and the position after the closing quote.
fn quoted_element(text: &[u8], start: usize) -> Option<(&[u8], bool, usize)> {
    let mut pos = start;
    let mut escaped = false;
    loop {
        match *text.get(pos)? {
            b'"' => return Some((text.get(start..pos)?, escaped, pos + 1)),
            b'\\' => {
                escaped = true;
                // The escaped byte must exist; it is taken literally.
                text.get(pos + 1)?;
                pos += 2;
            }
            _ => pos += 1,
        }
    }
}

/// Finds the end of an unquoted element starting at `start` (at a non-whitespace byte): it
/// runs to the next unescaped `,` or `}`, less trailing whitespace. Returns the raw content,
/// whether it holds escapes, and the position after it.
fn unquoted_element(text: &[u8], start: usize) -> Option<(&[u8], bool, usize)> {
    let mut pos = start;
    let mut escaped = false;
    // The end of the content so far, past its last non-whitespace (or escaped) byte.
    let mut end = start;
    loop {
        match *text.get(pos)? {
            b',' | b'}' => break,
            b'{' | b'"' => return None,
            b'\\' => {
                escaped = true;
                text.get(pos + 1)?;
                pos += 2;
                end = pos;
            }
            byte => {
                pos += 1;
                if !byte.is_ascii_whitespace() {
                    end = pos;
                }
            }
        }
    }
    Some((text.get(start..end)?, escaped, end))
}

/// Appends one non-null array element: string elements are unescaped straight into the
/// output; others are unescaped into `scratch` first when they hold escapes, then mapped.
fn write_element(
    element: Kind,
    type_modifier: i32,
    raw: &[u8],
    escaped: bool,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if element.is_text() {
        out.push(b'"');
        if escaped {
            write_escaped_unquoting(raw, out);
        } else {
            write_escaped(raw, out);
        }
        out.push(b'"');
        return Ok(());
    }
    if !escaped {
        return write_scalar(element, type_modifier, raw, out);
    }
    scratch.clear();
    let mut bytes = raw.iter();
    while let Some(&byte) = bytes.next() {
        if byte == b'\\' {
            match bytes.next() {
                Some(&escaped) => scratch.push(escaped),
                None => break,
            }
        } else {
            scratch.push(byte);
        }
    }
    write_scalar(element, type_modifier, scratch, out)
}

/// A validator of JSON text (RFC 8259) that needs no allocation: the kinds of the open
/// containers live in a fixed bit stack, which bounds nesting at [`MAX_JSON_DEPTH`].
struct JsonChecker<'a> {
    /// The text, already known to be UTF-8.
    text: &'a [u8],
    /// The offset of the next unread byte.
    pos: usize,
    /// One bit per open container, set for an object.
    stack: [u64; MAX_JSON_DEPTH / 64],
    /// How many containers are open.
    depth: usize,
}

impl<'a> JsonChecker<'a> {
    /// Starts checking `text`.
    fn new(text: &'a [u8]) -> Self {
        Self {
            text,
            pos: 0,
            stack: [0; MAX_JSON_DEPTH / 64],
            depth: 0,
        }
    }

    /// Whether the text is exactly one JSON value, with optional surrounding whitespace.
    fn check(mut self) -> bool {
        self.value_sequence().is_some()
    }

    /// Walks the whole text; `None` on the first error.
    fn value_sequence(&mut self) -> Option<()> {
        loop {
            // A value; a non-empty container opens and its first element follows.
            self.whitespace();
            match self.peek()? {
                b'{' => {
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b'}' {
                        self.pos += 1;
                    } else {
                        self.push(true)?;
                        self.key()?;
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b']' {
                        self.pos += 1;
                    } else {
                        self.push(false)?;
                        continue;
                    }
                }
                b'"' => self.string()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers, or go on to the next element.
            loop {
                self.whitespace();
                if self.depth == 0 {
                    return (self.pos == self.text.len()).then_some(());
                }
                let in_object = self.top();
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if in_object {
                            self.whitespace();
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if in_object => {
                        self.pos += 1;
                        self.depth -= 1;
                    }
                    b']' if !in_object => {
                        self.pos += 1;
                        self.depth -= 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The next byte, without taking it.
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Takes the next byte.
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    /// Skips JSON whitespace.
    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Opens a container.
    fn push(&mut self, is_object: bool) -> Option<()> {
        let word = self.stack.get_mut(self.depth / 64)?;
        let bit = 1u64 << (self.depth % 64);
        if is_object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        self.depth += 1;
        Some(())
    }

    /// Whether the innermost open container is an object.
    fn top(&self) -> bool {
        let index = self.depth.saturating_sub(1);
        self.stack
            .get(index / 64)
            .is_some_and(|word| word & (1u64 << (index % 64)) != 0)
    }

    /// Reads an object key and its colon.
    fn key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.whitespace();
        (self.next()? == b':').then_some(())
    }

    /// Reads a string, from its opening quote.
    fn string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            if !self.next()?.is_ascii_hexdigit() {
                                return None;
                            }
                        }
                    }
                    _ => return None,
                },
                0x00..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// Reads `true`, `false` or `null`.
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(word.len())?;
        if self.text.get(self.pos..end)? != word {
            return None;
        }
        self.pos = end;
        Some(())
    }

    /// Reads a number.
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.pos += 1;
        }
        is_json_number(self.text.get(start..self.pos)?).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The options these tests map values with: sluice's embedded JSON, numerics as strings.
    fn sluice() -> EventOptions {
        EventOptions {
            decimal_handling_mode: crate::event::DecimalHandlingMode::String,
            embed_json: true,
            unavailable_columns: true,
            ..EventOptions::default()
        }
    }

    /// The JSON for a value under `events`.
    fn with(events: &EventOptions, type_oid: u32, type_modifier: i32, text: &str) -> String {
        let mut out = Vec::new();
        write_json(type_oid, type_modifier, text.as_bytes(), &mut out, events)
            .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
        String::from_utf8(out).expect("UTF-8")
    }

    /// A NOT NULL column's value where there is none: Debezium's zero of the type, under
    /// Debezium's default options (`tests/debezium/defaults/dbzcap.public.nn_default.jsonl`, the
    /// delete's `before`) and with `decimal.handling.mode=string`.
    #[test]
    fn required_defaults_are_debeziums_zeros() {
        let zero = |events: &EventOptions, oid: u32, modifier: i32| {
            let mut out = Vec::new();
            write_required_default(oid, modifier, &mut out, events).unwrap();
            String::from_utf8(out).unwrap()
        };
        let debezium = EventOptions::default();
        let numeric_10_4 = ((10 << 16) | 4) + 4;
        for (oid, modifier, expected) in [
            (16, -1, "false"),
            (23, -1, "0"),
            (701, -1, "0"),
            (25, -1, r#""""#),
            (2950, -1, r#""""#),
            (17, -1, r#""""#),
            (1560, 3, r#""""#),
            (1560, 1, "false"),
            (1700, -1, r#"{"scale":0,"value":"AA=="}"#),
            (1700, numeric_10_4, r#""AA==""#),
            (1082, -1, "0"),
            (1083, -1, "0"),
            (1266, -1, r#""00:00:00Z""#),
            (1114, -1, "0"),
            (1184, 6, r#""1970-01-01T00:00:00Z""#),
            (1186, -1, "0"),
            (1007, -1, "[]"),
        ] {
            assert_eq!(
                zero(&debezium, oid, modifier),
                expected,
                "type {oid}({modifier})"
            );
        }
        let string =
            events(|e| e.decimal_handling_mode = crate::event::DecimalHandlingMode::String);
        assert_eq!(zero(&string, 1700, numeric_10_4), r#""0.0000""#);
        assert_eq!(zero(&string, 1700, -1), r#""0""#);
        assert_eq!(zero(&string, 790, -1), r#""0.00""#);
    }

    /// The JSON for a value, or the error.
    fn json(type_oid: u32, type_modifier: i32, text: &str) -> Result<String, ValueError> {
        json_bytes(type_oid, type_modifier, text.as_bytes())
    }

    fn json_bytes(type_oid: u32, type_modifier: i32, text: &[u8]) -> Result<String, ValueError> {
        let mut out = b"prefix".to_vec();
        let result = write_json(type_oid, type_modifier, text, &mut out, &sluice());
        let written = out.strip_prefix(b"prefix").expect("the prefix is kept");
        match result {
            Ok(()) => {
                let written = String::from_utf8(written.to_vec()).expect("UTF-8");
                serde_json::from_str::<serde::de::IgnoredAny>(&written).expect("valid JSON");
                Ok(written)
            }
            Err(error) => {
                assert!(written.is_empty(), "nothing written on error");
                Err(error)
            }
        }
    }

    /// The JSON of a value in a streamed change (Debezium's defaults).
    fn streamed(type_oid: u32, text: &str) -> String {
        let mut out = Vec::new();
        write_streamed_json(
            type_oid,
            -1,
            text.as_bytes(),
            &mut out,
            &EventOptions::default(),
        )
        .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
        String::from_utf8(out).unwrap()
    }

    fn ok(type_oid: u32, type_modifier: i32, text: &str) -> String {
        json(type_oid, type_modifier, text)
            .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"))
    }

    fn invalid(type_name: &'static str) -> Result<String, ValueError> {
        Err(ValueError::Invalid { type_name })
    }

    const BOOL: u32 = 16;
    const BYTEA: u32 = 17;
    const INT8: u32 = 20;
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const TEXT: u32 = 25;
    const OID: u32 = 26;
    const JSON: u32 = 114;
    const FLOAT4: u32 = 700;
    const FLOAT8: u32 = 701;
    const VARCHAR: u32 = 1043;
    const DATE: u32 = 1082;
    const TIME: u32 = 1083;
    const TIMESTAMP: u32 = 1114;
    const TIMESTAMPTZ: u32 = 1184;
    const INTERVAL: u32 = 1186;
    const TIMETZ: u32 = 1266;
    const NUMERIC: u32 = 1700;
    const UUID: u32 = 2950;
    const JSONB: u32 = 3802;

    #[test]
    fn booleans() {
        assert_eq!(ok(BOOL, -1, "t"), "true");
        assert_eq!(ok(BOOL, -1, "f"), "false");
        assert_eq!(json(BOOL, -1, "true"), invalid("boolean"));
        assert_eq!(json(BOOL, -1, ""), invalid("boolean"));
    }

    #[test]
    fn integers() {
        assert_eq!(ok(INT2, -1, "-32768"), "-32768");
        assert_eq!(ok(INT4, -1, "0"), "0");
        assert_eq!(ok(INT8, -1, "9223372036854775807"), "9223372036854775807");
        assert_eq!(ok(INT8, -1, "-9223372036854775808"), "-9223372036854775808");
        assert_eq!(ok(OID, -1, "4294967295"), "4294967295");
        for bad in [
            "",
            "-",
            "+1",
            "01",
            "-01",
            "1.0",
            "1e3",
            "12a",
            " 1",
            "9223372036854775808",
        ] {
            assert_eq!(json(INT8, -1, bad), invalid("integer"), "{bad:?}");
        }
    }

    #[test]
    fn floats() {
        assert_eq!(ok(FLOAT8, -1, "1.5"), "1.5");
        assert_eq!(ok(FLOAT8, -1, "-0"), "-0");
        assert_eq!(ok(FLOAT8, -1, "1e+20"), "1e+20");
        assert_eq!(
            ok(FLOAT8, -1, "1.2345678901234567e-05"),
            "1.2345678901234567e-05"
        );
        assert_eq!(
            ok(FLOAT8, -1, "1.7976931348623157e+308"),
            "1.7976931348623157e+308"
        );
        assert_eq!(ok(FLOAT4, -1, "3.4028235e+38"), "3.4028235e+38");
        assert_eq!(ok(FLOAT4, -1, "NaN"), "\"NaN\"");
        assert_eq!(ok(FLOAT8, -1, "Infinity"), "\"Infinity\"");
        assert_eq!(ok(FLOAT8, -1, "-Infinity"), "\"-Infinity\"");
        for bad in [
            "", "1e400", ".5", "1.", "inf", "nan", "0x10", "+1", "01", "1e", "1 ",
        ] {
            assert_eq!(json(FLOAT8, -1, bad), invalid("floating-point"), "{bad:?}");
        }
    }

    /// The JSON for a value with Debezium's default options.
    fn debezium(type_oid: u32, type_modifier: i32, text: &str) -> String {
        let mut out = Vec::new();
        write_json(
            type_oid,
            type_modifier,
            text.as_bytes(),
            &mut out,
            &EventOptions::default(),
        )
        .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numerics_and_money_are_debezium_precise_decimals_by_default() {
        // numeric(10,4): base64 of the unscaled value (1234500), two's complement.
        assert_eq!(
            debezium(NUMERIC, (10 << 16) + 4 + 4, "123.4500"),
            "\"EtZE\""
        );
        assert_eq!(
            debezium(NUMERIC, (10 << 16) + 2 + 4, "-99999999.99"),
            "\"/av0HAE=\""
        );
        assert_eq!(debezium(NUMERIC, (38 << 16) + 4, "0"), "\"AA==\"");
        assert_eq!(
            debezium(NUMERIC, (38 << 16) + 4, "12345678901234567890"),
            "\"AKtUqYzrHwrS\""
        );
        assert_eq!(debezium(NUMERIC, (5 << 16) + 2 + 4, "-0.01"), "\"/w==\"");
        // No declared scale: VariableScaleDecimal, trailing fraction zeros dropped.
        assert_eq!(
            debezium(NUMERIC, -1, "123.4500"),
            r#"{"scale":2,"value":"MDk="}"#
        );
        assert_eq!(
            debezium(NUMERIC, -1, "0.000"),
            r#"{"scale":0,"value":"AA=="}"#
        );
        assert_eq!(
            debezium(NUMERIC, -1, "-99999999999999999999.999999999999"),
            r#"{"scale":12,"value":"+xHSkr6kelMQfwAAAAE="}"#
        );
        for special in ["NaN", "Infinity", "-Infinity"] {
            assert_eq!(debezium(NUMERIC, -1, special), "null");
        }
        assert_eq!(debezium(790, -1, "-$1,234.56"), "\"/h3A\"");
        assert_eq!(
            debezium(790, -1, "-$92,233,720,368,547,758.08"),
            "\"gAAAAAAAAAA=\""
        );
        assert_eq!(debezium(790, -1, "$0.00"), "\"AA==\"");
    }

    #[test]
    fn json_is_a_string_by_default_and_embedded_on_request() {
        assert_eq!(
            debezium(JSON, -1, r#"{"a": [1, 2]}"#),
            r#""{\"a\": [1, 2]}""#
        );
        assert_eq!(debezium(JSONB, -1, "null"), r#""null""#);
        assert_eq!(
            debezium(3807, -1, r#"{"{\"a\": 1}",NULL}"#),
            r#"["{\"a\": 1}",null]"#
        );
        assert_eq!(ok(JSON, -1, r#"{"a": [1, 2]}"#), r#"{"a": [1, 2]}"#);
    }

    #[test]
    fn bits_are_debezium_booleans_and_bitset_bytes() {
        assert_eq!(ok(1560, 1, "1"), "true");
        assert_eq!(ok(1560, 1, "0"), "false");
        assert_eq!(ok(1560, 3, "101"), "\"BQ==\"");
        assert_eq!(ok(1560, 3, "000"), "\"\"");
        assert_eq!(ok(1562, 10, "1100"), "\"DA==\"");
        assert_eq!(ok(1562, 10, "1000000001"), "\"AQI=\"");
        assert_eq!(ok(1562, -1, ""), "\"\"");
        assert_eq!(json(1562, -1, "12"), invalid("bit"));
    }

    #[test]
    fn intervals_past_i64_saturate_as_debezium() {
        assert_eq!(ok(INTERVAL, -1, "P178000000Y"), "9223372036854775807");
        assert_eq!(ok(INTERVAL, -1, "P-178000000Y"), "-9223372036854775808");
    }

    #[test]
    fn floats_with_one_significant_digit_take_javas_two() {
        assert_eq!(ok(FLOAT8, -1, "5e-324"), "4.9e-324");
        assert_eq!(ok(700, -1, "1e-45"), "1.4e-45");
        assert_eq!(ok(FLOAT8, -1, "0.5"), "0.5");
        assert_eq!(ok(700, -1, "3e+38"), "3e+38");
        assert_eq!(ok(FLOAT8, -1, "1.5e-05"), "1.5e-05");
    }

    #[test]
    fn numerics_are_exact_strings() {
        assert_eq!(ok(NUMERIC, -1, "123.4500"), "\"123.4500\"");
        assert_eq!(ok(NUMERIC, 655366, "-0.5"), "\"-0.5\"");
        assert_eq!(
            ok(NUMERIC, -1, "123456789012345678901234567890.123456789"),
            "\"123456789012345678901234567890.123456789\""
        );
        // Debezium's spelling of the specials (decimal.handling.mode=string).
        assert_eq!(ok(NUMERIC, -1, "NaN"), "\"NAN\"");
        assert_eq!(ok(NUMERIC, -1, "Infinity"), "\"POSITIVE_INFINITY\"");
        assert_eq!(ok(NUMERIC, -1, "-Infinity"), "\"NEGATIVE_INFINITY\"");
        for bad in ["", "1e5", "abc", "1.", ".1", "--1", "1.2.3"] {
            assert_eq!(json(NUMERIC, -1, bad), invalid("numeric"), "{bad:?}");
        }
    }

    #[test]
    fn text_types_are_escaped_strings() {
        assert_eq!(ok(TEXT, -1, "plain"), "\"plain\"");
        assert_eq!(ok(TEXT, -1, ""), "\"\"");
        assert_eq!(
            ok(TEXT, -1, "a \"q\" \\ b\nc\rd\te\u{8}f\u{c}g\u{1}h\u{1f}"),
            r#""a \"q\" \\ b\nc\rd\te\bf\fg\u0001h\u001f""#
        );
        assert_eq!(ok(VARCHAR, 14, "héllo wörld ✓ 🎉"), "\"héllo wörld ✓ 🎉\"");
        // bpchar, name, "char", xml, money, inet, cidr, macaddr, uuid, an enum, unknown types.
        for oid in [1042, 19, 18, 142, 869, 650, 829, UUID, 91_234, u32::MAX] {
            assert_eq!(ok(oid, -1, "x y"), "\"x y\"", "{oid}");
        }
        assert_eq!(
            ok(UUID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\""
        );
        // money: the amount (decimal.handling.mode=string), as Debezium.
        assert_eq!(ok(790, -1, "-$1,234.56"), "\"-1234.56\"");
        assert_eq!(ok(790, -1, "$0.00"), "\"0.00\"");
        assert_eq!(
            json_bytes(TEXT, -1, b"ab\xffcd"),
            Err(ValueError::InvalidUtf8)
        );
        assert_eq!(
            json_bytes(91_234, -1, b"\xc3"),
            Err(ValueError::InvalidUtf8)
        );
    }

    #[test]
    fn bytea_is_base64() {
        assert_eq!(ok(BYTEA, -1, "\\x"), "\"\"");
        assert_eq!(ok(BYTEA, -1, "\\x0a0b0c"), "\"CgsM\"");
        assert_eq!(ok(BYTEA, -1, "\\xff"), "\"/w==\"");
        assert_eq!(ok(BYTEA, -1, "\\xDEADbeef"), "\"3q2+7w==\"");
        // Longer than one chunk, with a length that needs padding.
        let bytes: Vec<u8> = (0..2000u32).map(|i| (i * 7 % 256) as u8).collect();
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert_eq!(
            ok(BYTEA, -1, &format!("\\x{hex}")),
            format!("\"{expected}\"")
        );
        for bad in ["", "\\x0", "\\xzz", "abc", "\\x0g", "\\\\x00", "\\x 00"] {
            assert_eq!(json(BYTEA, -1, bad), invalid("bytea"), "{bad:?}");
        }
    }

    #[test]
    fn json_is_embedded() {
        let document = r#"{"a": [1, -2.5e10, "x\u00e9\n", true, false, null], "b": {}, "c": []}"#;
        assert_eq!(ok(JSON, -1, document), document);
        assert_eq!(ok(JSONB, -1, "[]"), "[]");
        assert_eq!(ok(JSONB, -1, " \"s\" "), " \"s\" ");
        assert_eq!(ok(JSONB, -1, "-0.0e-7"), "-0.0e-7");
        assert_eq!(ok(JSON, -1, "1e400"), "1e400");
        // An empty innermost container is never pushed on the stack.
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert_eq!(ok(JSON, -1, &deep), deep);
        let deeper = format!("[{deep}]");
        assert_eq!(json(JSON, -1, &deeper), invalid("json"));
        for bad in [
            "",
            "{",
            "[1,]",
            "{'a':1}",
            "tru",
            "01",
            "\"\u{1}\"",
            "1 2",
            "{\"a\"}",
            "{\"a\":}",
            "[}",
            "{]",
            "\"\\x\"",
            "\"\\u12g4\"",
            "[1]]",
            "{\"a\":1,}",
            "nul",
            "+1",
            "NaN",
        ] {
            assert_eq!(json(JSON, -1, bad), invalid("json"), "{bad:?}");
        }
        assert_eq!(
            json_bytes(JSONB, -1, b"\"\xff\""),
            Err(ValueError::InvalidUtf8)
        );
    }

    #[test]
    fn names_are_null_when_streamed_as_debezium() {
        assert_eq!(ok(19, -1, "a_name"), "\"a_name\"");
        assert_eq!(streamed(19, "a_name"), "null");
    }

    #[test]
    fn points_and_boxes_are_debezium_geometries() {
        assert_eq!(
            debezium(600, -1, "(1.5,2.5)"),
            r#"{"x":1.5,"y":2.5,"wkb":"AQEAAAAAAAAAAAD4PwAAAAAAAARA","srid":null}"#
        );
        assert_eq!(
            debezium(600, -1, "(-0,1e+300)"),
            r#"{"x":-0,"y":1e+300,"wkb":"AQEAAAAAAAAAAAAAgJx1AIg85Dd+","srid":null}"#
        );
        let text = debezium(603, -1, "(1,1),(-1,-1)");
        assert_eq!(
            text,
            r#"{"wkb":"AQMAAAABAAAABQAAAAAAAAAAAPA/AAAAAAAA8D8AAAAAAADwPwAAAAAAAPC/AAAAAAAA8L8AAAAAAADwvwAAAAAAAPC/AAAAAAAA8D8AAAAAAADwPwAAAAAAAPA/","srid":null,"extensions":{"type":"box"}}"#
        );
        assert_eq!(json(600, -1, "(1,2"), invalid("point"));
        assert_eq!(json(603, -1, "(1,1)"), invalid("box"));
    }

    #[test]
    fn arrays_debezium_cannot_convert_are_null() {
        // A numeric NaN or infinity element, an enum array's NULL element: the whole array.
        assert_eq!(debezium(1231, -1, "{1.50,NaN,NULL}"), "null");
        assert_eq!(ok(1231, -1, "{1.50,Infinity}"), "null");
        assert_eq!(ok(1231, -1, "{1.50,NULL}"), r#"["1.50",null]"#);
        assert_eq!(debezium(ENUM_ARRAY_OID, -1, "{happy,NULL}"), "null");
        assert_eq!(
            debezium(ENUM_ARRAY_OID, -1, "{happy,\"NULL\"}"),
            r#"["happy","NULL"]"#
        );
        assert_eq!(debezium(ENUM_ARRAY_OID, -1, "{}"), "[]");
        // A multi-dimensional array: its outer list, each sub-array null.
        assert_eq!(debezium(1007, -1, "{{1,2},{3,NULL}}"), "[null,null]");
        assert_eq!(
            debezium(1009, -1, "{{\"}\",b},{c,d},{e,f}}"),
            "[null,null,null]"
        );
        assert_eq!(debezium(1007, -1, "[0:1]={7,8}"), "[7,8]");
        assert!(is_left_out(1187) && is_left_out(791) && is_left_out(1003) && is_left_out(143));
        assert!(!is_left_out(1007));
    }

    #[test]
    fn timestamps_past_i64_micros_are_debeziums_java_arithmetic() {
        assert_eq!(
            debezium(TIMESTAMP, -1, "294276-12-31 23:59:59.999999"),
            "-9223372036853775810"
        );
        assert_eq!(
            debezium(TIMESTAMP, -1, "4713-01-01 00:00:00 BC"),
            "-210863520000000000"
        );
    }

    #[test]
    fn dates_are_epoch_days() {
        assert_eq!(ok(DATE, -1, "1970-01-01"), "0");
        assert_eq!(ok(DATE, -1, "1969-12-31"), "-1");
        assert_eq!(ok(DATE, -1, "2016-11-04"), "17109");
        assert_eq!(ok(DATE, -1, "2024-02-29"), "19782");
        assert_eq!(ok(DATE, -1, "0001-01-01"), "-719162");
        // Streamed (pgoutput), Debezium keeps the era: 1 BC is year 0, a leap year.
        assert_eq!(streamed(DATE, "0001-12-31 BC"), "-719163");
        assert_eq!(streamed(DATE, "0001-01-01 BC"), "-719528");
        assert_eq!(streamed(DATE, "0005-02-29 BC"), "-720930");
        assert_eq!(json(DATE, -1, "0004-02-29 BC"), invalid("date"));
        assert_eq!(streamed(DATE, "4713-01-01 BC"), "-2440550");
        assert_eq!(streamed(DATE, "5874897-12-31"), "2145042905");
        // Read by a snapshot (the JDBC driver), the era is lost (tests/debezium golden files).
        assert_eq!(ok(DATE, -1, "0001-01-01 BC"), "-719162");
        assert_eq!(ok(DATE, -1, "4713-01-01 BC"), "1001860");
        assert_eq!(ok(DATE, -1, "5874897-12-31"), "2145042905");
        // Debezium's day numbers for the infinities (golden files), read and streamed.
        assert_eq!(ok(DATE, -1, "infinity"), "-622191234");
        assert_eq!(ok(DATE, -1, "-infinity"), "-625821272");
        assert_eq!(streamed(DATE, "infinity"), "2146033979");
        assert_eq!(streamed(DATE, "-infinity"), "-2147472691");
        for bad in [
            "",
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-01-32",
            "2024-1-01",
            "0000-01-01",
            "2024-01-01 AD",
            "2024-01-01 ",
            "2024/01/01",
            " BC",
            "0000-01-01 BC",
        ] {
            assert_eq!(json(DATE, -1, bad), invalid("date"), "{bad:?}");
        }
    }

    #[test]
    fn times_follow_the_precision() {
        assert_eq!(ok(TIME, -1, "00:00:00"), "0");
        assert_eq!(ok(TIME, -1, "13:51:30"), "49890000000");
        assert_eq!(ok(TIME, -1, "13:51:30.123456"), "49890123456");
        assert_eq!(ok(TIME, 6, "13:51:30.123456"), "49890123456");
        assert_eq!(ok(TIME, 4, "13:51:30.1235"), "49890123500");
        assert_eq!(ok(TIME, 3, "13:51:30.123"), "49890123");
        assert_eq!(ok(TIME, 0, "13:51:30"), "49890000");
        assert_eq!(ok(TIME, -1, "24:00:00"), "86400000000");
        assert_eq!(ok(TIME, 2, "24:00:00"), "86400000");
        // One to six fractional digits.
        for (fraction, micros) in [
            ("1", 100_000),
            ("12", 120_000),
            ("123", 123_000),
            ("1234", 123_400),
            ("12345", 123_450),
            ("123456", 123_456),
            ("000001", 1),
        ] {
            assert_eq!(
                ok(TIME, -1, &format!("00:00:00.{fraction}")),
                micros.to_string()
            );
        }
        for bad in [
            "",
            "24:00:01",
            "24:00:00.000001",
            "25:00:00",
            "12:60:00",
            "12:00:60",
            "12:00",
            "12:00:00.1234567",
            "12:00:00.",
            "1:00:00",
            "12:00:00+00",
            "12:00:00 ",
        ] {
            assert_eq!(json(TIME, -1, bad), invalid("time"), "{bad:?}");
        }
    }

    #[test]
    fn timetz_is_utc_text() {
        assert_eq!(ok(TIMETZ, -1, "13:51:30.123789+02"), "\"11:51:30.123789Z\"");
        assert_eq!(ok(TIMETZ, 3, "13:51:30.12+02"), "\"11:51:30.12Z\"");
        assert_eq!(ok(TIMETZ, -1, "11:51:02+00"), "\"11:51:02Z\"");
        assert_eq!(ok(TIMETZ, -1, "13:51:30.100000+00"), "\"13:51:30.1Z\"");
        assert_eq!(ok(TIMETZ, -1, "00:30:00-01:30"), "\"02:00:00Z\"");
        assert_eq!(ok(TIMETZ, -1, "01:00:00+02"), "\"23:00:00Z\"");
        assert_eq!(ok(TIMETZ, -1, "12:00:00+05:30:15"), "\"06:29:45Z\"");
        assert_eq!(
            ok(TIMETZ, -1, "00:00:00.000001-15:59"),
            "\"15:59:00.000001Z\""
        );
        assert_eq!(ok(TIMETZ, -1, "24:00:00+00"), "\"24:00:00Z\"");
        assert_eq!(ok(TIMETZ, -1, "24:00:00+02"), "\"22:00:00Z\"");
        for bad in [
            "",
            "12:00:00",
            "12:00:00Z",
            "12:00:00+1",
            "12:00:00+01:60",
            "12:00:00 +01",
        ] {
            assert_eq!(json(TIMETZ, -1, bad), invalid("timetz"), "{bad:?}");
        }
    }

    #[test]
    fn timestamps_are_epoch_micros_or_millis() {
        assert_eq!(ok(TIMESTAMP, -1, "1970-01-01 00:00:00"), "0");
        assert_eq!(
            ok(TIMESTAMP, -1, "2016-11-04 13:51:30.123456"),
            "1478267490123456"
        );
        assert_eq!(
            ok(TIMESTAMP, 6, "2016-11-04 13:51:30.5"),
            "1478267490500000"
        );
        assert_eq!(ok(TIMESTAMP, 3, "2016-11-04 13:51:30.123"), "1478267490123");
        assert_eq!(ok(TIMESTAMP, 0, "2016-11-04 13:51:30"), "1478267490000");
        assert_eq!(
            ok(TIMESTAMP, -1, "1936-10-25 22:10:12.608"),
            "-1047174587392000"
        );
        assert_eq!(
            ok(TIMESTAMP, 3, "1936-10-25 22:10:12.608"),
            "-1047174587392"
        );
        assert_eq!(ok(TIMESTAMP, -1, "1969-12-31 23:59:59.999999"), "-1");
        assert_eq!(ok(TIMESTAMP, 1, "1969-12-31 23:59:59.9"), "-100");
        assert_eq!(
            ok(TIMESTAMP, -1, "0001-01-01 00:00:00 BC"),
            (-719_528i64 * 86_400_000_000).to_string()
        );
        assert_eq!(
            ok(TIMESTAMP, -1, "294247-01-10 04:00:54.775807"),
            i64::MAX.to_string()
        );
        // Past `i64` microseconds: Debezium's Java arithmetic (saturated, then wrapped).
        assert_eq!(
            ok(TIMESTAMP, -1, "294247-01-10 04:00:54.775808"),
            i64::MIN.to_string()
        );
        // Milliseconds reach further than microseconds: Debezium's value (time-connect capture).
        assert_eq!(
            ok(TIMESTAMP, 3, "294276-12-31 23:59:59.999"),
            "9224318015999999"
        );
        // Debezium's: the i64 limits in microseconds, the driver's sentinels as they are in
        // milliseconds.
        assert_eq!(ok(TIMESTAMP, -1, "infinity"), "9223372036854775807");
        assert_eq!(ok(TIMESTAMP, -1, "-infinity"), "-9223372036854775808");
        assert_eq!(ok(TIMESTAMP, 3, "infinity"), "9223372036825200000");
        assert_eq!(ok(TIMESTAMP, 0, "-infinity"), "-9223372036832400000");
        for bad in [
            "",
            "2016-11-04",
            "2016-11-04T13:51:30",
            "2016-11-04 13:51",
            "2016-11-04 13:51:30+00",
            "2016-02-30 00:00:00",
            "infinity ",
            "2016-11-04 13:51:30 AD",
        ] {
            assert_eq!(json(TIMESTAMP, -1, bad), invalid("timestamp"), "{bad:?}");
        }
    }

    #[test]
    fn timestamptz_is_iso_text_in_utc() {
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "2016-11-04 13:51:30.123456+02"),
            "\"2016-11-04T11:51:30.123456Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "2020-04-01 11:51:02+00"),
            "\"2020-04-01T11:51:02.000000Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, 6, "2020-04-01 11:51:02.5+00"),
            "\"2020-04-01T11:51:02.500000Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, 3, "2020-04-01 11:51:02.1+00"),
            "\"2020-04-01T11:51:02.100Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, 1, "2020-04-01 11:51:02.1+00"),
            "\"2020-04-01T11:51:02.1Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, 0, "2020-04-01 11:51:02+00"),
            "\"2020-04-01T11:51:02Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "2000-01-01 00:30:00+01"),
            "\"1999-12-31T23:30:00.000000Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "2000-01-01 00:00:00-05:30:10"),
            "\"2000-01-01T05:30:10.000000Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "21016-11-04 06:51:30.123456+00"),
            "\"+21016-11-04T06:51:30.123456Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "294276-12-31 23:59:59.999999+00"),
            "\"+294276-12-31T23:59:59.999999Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "9999-12-31 23:59:59.999999+00"),
            "\"9999-12-31T23:59:59.999999Z\""
        );
        // Astronomical years, as Java's formatter writes them: 1 BC is 0000, 4714 BC is -4713.
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "0001-01-01 00:00:00+00 BC"),
            "\"0000-01-01T00:00:00.000000Z\""
        );
        assert_eq!(
            ok(TIMESTAMPTZ, -1, "4714-12-31 23:59:59.999999+00 BC"),
            "\"-4713-12-31T23:59:59.999999Z\""
        );
        assert_eq!(ok(TIMESTAMPTZ, -1, "infinity"), "\"infinity\"");
        assert_eq!(ok(TIMESTAMPTZ, -1, "-infinity"), "\"-infinity\"");
        for bad in [
            "",
            "2016-11-04 13:51:30",
            "2016-11-04 13:51:30Z",
            "2016-11-04 13:51:30 +00",
            "2016-11-04 13:51:30+00 AD",
            "2016-11-04 13:51:30 BC+00",
        ] {
            assert_eq!(
                json(TIMESTAMPTZ, -1, bad),
                invalid("timestamptz"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn intervals_are_micros() {
        assert_eq!(ok(INTERVAL, -1, "PT0S"), "0");
        // Debezium's own expectation for 1 year 2 months 3 days 04:05:06.78.
        assert_eq!(ok(INTERVAL, -1, "P1Y2M3DT4H5M6.78S"), "37091106780000");
        assert_eq!(ok(INTERVAL, -1, "P1M"), "2629800000000");
        assert_eq!(ok(INTERVAL, -1, "P1Y"), "31557600000000");
        assert_eq!(ok(INTERVAL, -1, "P1W"), "604800000000");
        assert_eq!(ok(INTERVAL, -1, "P1D"), "86400000000");
        assert_eq!(ok(INTERVAL, -1, "PT1H"), "3600000000");
        assert_eq!(ok(INTERVAL, -1, "PT1M"), "60000000");
        assert_eq!(ok(INTERVAL, -1, "PT-0.000001S"), "-1");
        assert_eq!(ok(INTERVAL, -1, "PT6.5S"), "6500000");
        assert_eq!(ok(INTERVAL, -1, "P-1Y-2M3DT-4H-5M-6.5S"), "-36572706500000");
        assert_eq!(ok(INTERVAL, -1, "P-1DT2H"), "-79200000000");
        assert_eq!(ok(INTERVAL, -1, "PT2562047788H"), "9223372036800000000");
        for bad in [
            "",
            "P",
            "PT",
            "P1DT",
            "1Y",
            "P1.5Y",
            "P1X",
            "PT1D",
            "P1H",
            "PT1.1234567S",
            "PT1.5H",
            "P 1D",
            "PT1S ",
            "@ 1 day",
            "1 day",
        ] {
            assert_eq!(json(INTERVAL, -1, bad), invalid("interval"), "{bad:?}");
        }
        // Past the i64 range: Debezium's saturation.
        assert_eq!(
            ok(INTERVAL, -1, "P999999999999999999Y"),
            "9223372036854775807"
        );
    }

    #[test]
    fn arrays_of_scalars() {
        assert_eq!(ok(1007, -1, "{1,2,NULL}"), "[1,2,null]");
        assert_eq!(ok(1007, -1, "{}"), "[]");
        assert_eq!(
            ok(1016, -1, "{-9223372036854775808}"),
            "[-9223372036854775808]"
        );
        // Multi-dimensional: Debezium's outer list of nulls.
        assert_eq!(ok(1005, -1, "{{1,2},{3,4}}"), "[null,null]");
        assert_eq!(ok(1005, -1, "{{{1},{2}},{{3},{4}}}"), "[null,null]");
        assert_eq!(ok(1007, -1, "[0:1]={7,8}"), "[7,8]");
        assert_eq!(ok(1007, -1, "[-2:-1][1:1]={{1},{2}}"), "[null,null]");
        assert_eq!(ok(1007, -1, " { 1 , 2 , null } "), "[1,2,null]");
        assert_eq!(ok(1028, -1, "{1,4294967295}"), "[1,4294967295]");
        assert_eq!(ok(1000, -1, "{t,f,NULL}"), "[true,false,null]");
        assert_eq!(
            ok(1022, -1, "{1.5,NaN,-Infinity,1e-05}"),
            r#"[1.5,"NaN","-Infinity",1e-05]"#
        );
        assert_eq!(ok(1021, -1, "{Infinity}"), r#"["Infinity"]"#);
        // Debezium cannot convert a NaN element: the array is null (golden files).
        assert_eq!(ok(1231, 655366, "{1.20,3.40,NaN}"), "null");
        assert_eq!(ok(1231, 655366, "{1.20,3.40}"), r#"["1.20","3.40"]"#);
        assert_eq!(
            ok(2951, -1, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}"),
            r#"["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",null]"#
        );
    }

    #[test]
    fn arrays_of_strings() {
        assert_eq!(
            ok(1009, -1, r#"{a,"b c","d\"e","f\\g",NULL,"NULL","",null}"#),
            r#"["a","b c","d\"e","f\\g",null,"NULL","",null]"#
        );
        assert_eq!(
            ok(
                1015,
                -1,
                r#"{héllo,"wörld ✓","tab	and
newline"}"#
            ),
            "[\"héllo\",\"wörld ✓\",\"tab\\tand\\nnewline\"]"
        );
        assert_eq!(
            ok(1014, 14, r#"{"cone      ","ctwo      "}"#),
            r#"["cone      ","ctwo      "]"#
        );
        assert_eq!(ok(1009, -1, r"{a\,b}"), r#"["a,b"]"#);
        assert_eq!(ok(1009, -1, "{{a,b},{c,d}}"), "[null,null]");
        assert_eq!(
            json_bytes(1009, -1, b"{\xff}"),
            Err(ValueError::InvalidUtf8)
        );
    }

    #[test]
    fn arrays_of_temporal_values() {
        assert_eq!(
            ok(1182, -1, "{2016-11-04,infinity,NULL}"),
            r#"[17109,-622191234,null]"#
        );
        assert_eq!(
            ok(1115, -1, r#"{"2020-04-01 00:01:02","2020-04-01 01:02:03"}"#),
            "[1585699262000000,1585702923000000]"
        );
        assert_eq!(
            ok(1115, 3, r#"{"2020-04-01 00:01:02.123"}"#),
            "[1585699262123]"
        );
        assert_eq!(
            ok(
                1185,
                -1,
                r#"{"2020-04-01 11:51:02+00","2020-04-01 12:51:03+00"}"#
            ),
            r#"["2020-04-01T11:51:02.000000Z","2020-04-01T12:51:03.000000Z"]"#
        );
        assert_eq!(ok(1183, -1, "{00:01:02,01:02:03}"), "[62000000,3723000000]");
        assert_eq!(
            ok(1270, -1, "{11:51:02+00,13:51:03+01}"),
            r#"["11:51:02Z","12:51:03Z"]"#
        );
        assert_eq!(
            ok(1187, -1, "{PT1S,P1D,NULL}"),
            "[1000000,86400000000,null]"
        );
    }

    #[test]
    fn arrays_of_escaped_values() {
        assert_eq!(
            ok(1001, -1, r#"{"\\x0102",NULL,"\\x"}"#),
            r#"["AQI=",null,""]"#
        );
        assert_eq!(
            ok(199, -1, r#"{"{\"a\": 1}","[1, \"x\\\\y\"]",NULL,3}"#),
            r#"[{"a": 1},[1, "x\\y"],null,3]"#
        );
        assert_eq!(ok(3807, -1, r#"{"\"s\""}"#), r#"["s"]"#);
        assert_eq!(ok(1007, -1, r#"{"1","2"}"#), "[1,2]");
        assert_eq!(ok(1007, -1, r#"{\1}"#), "[1]");
    }

    #[test]
    fn arrays_of_unknown_elements_are_strings() {
        // _money, _xml, an array of an enum.
        assert_eq!(ok(791, -1, "{$1.00,$2.00}"), r#""{$1.00,$2.00}""#);
        assert_eq!(ok(143, -1, "{<a/>}"), r#""{<a/>}""#);
        assert_eq!(
            ok(91_235, -1, r#"{happy,"so sad"}"#),
            r#""{happy,\"so sad\"}""#
        );
    }

    #[test]
    fn malformed_arrays_are_errors() {
        let array = invalid("array");
        for bad in [
            "",
            "1,2",
            "{1,2",
            "{1,,2}",
            "{,1}",
            "{1,}",
            "1,2}",
            "{1}x",
            "{{1},2",
            "{\"1}",
            "{1\"2\"}",
            "{1{2}}",
            "{{1}{2}}",
            "[1:2]{1,2}",
            "[1]={1}",
            "[1:2=]{1}",
            "{1}}",
            "{{{{{{{1}}}}}}}",
            "{\\",
        ] {
            assert_eq!(json(1007, -1, bad), array, "{bad:?}");
        }
        assert_eq!(json(1007, -1, "{1,a}"), invalid("integer"));
        assert_eq!(json(1182, -1, "{2024-02-30}"), invalid("date"));
        assert_eq!(json(199, -1, r#"{"{"}"#), invalid("json"));
        assert_eq!(ok(1007, -1, "{{{{{{1}}}}}}"), "[null]");
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in (-3_000_000..3_000_000).step_by(997) {
            let (year, month, day) = civil_from_days(days);
            assert!((1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day));
            assert_eq!(days_from_civil(year, month, day), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-719_528), (0, 1, 1));
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
            2
        );
        assert_eq!(
            days_from_civil(1900, 3, 1) - days_from_civil(1900, 2, 28),
            1
        );
    }

    /// Type OIDs worth generating: everything the module knows, and a few it does not.
    fn type_oid() -> impl Strategy<Value = u32> {
        prop_oneof![
            proptest::sample::select(vec![
                16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 142, 700, 701, 790, 1042, 1043, 1082,
                1083, 1114, 1184, 1186, 1266, 1700, 2950, 3802, 1000, 1001, 1002, 1005, 1007, 1009,
                1014, 1015, 1016, 1021, 1022, 1028, 1115, 1182, 1183, 1185, 1187, 1231, 1270, 199,
                2951, 3807, 651, 775, 1040, 1041, 791,
            ]),
            any::<u32>(),
        ]
    }

    fn type_modifier() -> impl Strategy<Value = i32> {
        prop_oneof![Just(-1), 0..=6, any::<i32>()]
    }

    /// Text made of the characters PostgreSQL values are made of.
    fn value_text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..48),
            "[-+0-9:. TPYMWDHSZBCx{}\\[\\]=,\"\\\\NUaninfty]{0,40}".prop_map(String::into_bytes),
            "[-0-9]{1,6}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,7})?)?([+-][0-9]{2}(:[0-9]{2})?)?( BC)?"
                .prop_map(String::into_bytes),
            "[\\[\\]{}\",:0-9a-z\\\\ .eE+-]{0,40}".prop_map(String::into_bytes),
        ]
    }

    /// Arbitrary JSON documents.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |number| number.is_finite())
                .prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,4}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn write_json_never_panics_and_writes_valid_json(
            oid in type_oid(),
            modifier in type_modifier(),
            text in value_text(),
        ) {
            let mut out = b"[".to_vec();
            match write_json(oid, modifier, &text, &mut out, &sluice()) {
                Ok(()) => {
                    out.push(b']');
                    let written = std::str::from_utf8(&out).expect("UTF-8");
                    serde_json::from_str::<serde::de::IgnoredAny>(written).expect("valid JSON");
                    if !matches!(oid, 114 | 3802 | 199 | 3807) {
                        serde_json::from_str::<serde_json::Value>(written).expect("parses fully");
                    }
                }
                Err(_) => prop_assert_eq!(out, b"[".to_vec()),
            }
        }

        #[test]
        fn strings_round_trip(text in any::<String>()) {
            let written = json(TEXT, -1, &text).expect("any string");
            prop_assert_eq!(serde_json::from_str::<String>(&written).expect("a string"), text);
        }

        #[test]
        fn json_checker_agrees_with_serde_json(text in "[\\[\\]{}\",:0-9tfrulsena\\\\ .eE+-]{0,24}") {
            let ours = JsonChecker::new(text.as_bytes()).check();
            let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", text);
        }

        #[test]
        fn json_checker_accepts_json_and_agrees_on_edits(
            value in json_value(),
            pretty in any::<bool>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            }
            .expect("serializable");
            prop_assert!(JsonChecker::new(text.as_bytes()).check(), "{}", text);
            let mut edited: Vec<char> = text.chars().collect();
            edited.remove(cut.index(edited.len()));
            let edited: String = edited.into_iter().collect();
            let ours = JsonChecker::new(edited.as_bytes()).check();
            let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&edited).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", edited);
        }

        #[test]
        fn timestamps_round_trip(micros in -210_863_520_000_000_000i64..i64::MAX) {
            let days = micros.div_euclid(DAY_MICROS);
            let (year, month, day) = civil_from_days(days);
            let mut time = Vec::new();
            write_clock(micros.rem_euclid(DAY_MICROS), None, &mut time);
            let time = String::from_utf8(time).expect("ASCII");
            let date = if year <= 0 {
                format!("{:04}-{month:02}-{day:02} BC", 1 - year)
            } else {
                format!("{year:04}-{month:02}-{day:02}")
            };
            let timestamp = match date.strip_suffix(" BC") {
                Some(date) => format!("{date} {time} BC"),
                None => format!("{date} {time}"),
            };
            prop_assert_eq!(ok(TIMESTAMP, -1, &timestamp), micros.to_string());
            prop_assert_eq!(streamed(DATE, &date), days.to_string());
        }
    }
    // ---- Debezium's options (`[kafka.events]`), exact bytes ----

    const MONEY: u32 = 790;
    const BYTEA_ARRAY: u32 = 1001;
    const TIME_ARRAY: u32 = 1183;
    const TIMESTAMP_ARRAY: u32 = 1115;

    fn events(edit: impl FnOnce(&mut EventOptions)) -> EventOptions {
        let mut events = EventOptions::default();
        edit(&mut events);
        events
    }

    #[test]
    fn time_precision_modes() {
        use crate::event::TimePrecisionMode::*;
        let connect = events(|e| e.time_precision_mode = Connect);
        let micro = events(|e| e.time_precision_mode = AdaptiveTimeMicroseconds);
        let adaptive = EventOptions::default();
        // connect: milliseconds whatever the precision (golden `time-connect`).
        assert_eq!(with(&connect, TIME, -1, "13:51:30.123456"), "49890123");
        assert_eq!(with(&connect, TIME, 6, "13:51:30.123456"), "49890123");
        assert_eq!(
            with(&connect, TIMESTAMP, -1, "2016-11-04 13:51:30.123456"),
            "1478267490123"
        );
        assert_eq!(
            with(&connect, TIMESTAMP, -1, "-infinity"),
            "-9223372036832400000"
        );
        assert_eq!(
            with(&connect, TIME_ARRAY, -1, "{13:51:30.5,NULL}"),
            "[49890500,null]"
        );
        assert_eq!(
            with(
                &connect,
                TIMESTAMP_ARRAY,
                6,
                "{\"2016-11-04 13:51:30.123456\"}"
            ),
            "[1478267490123]"
        );
        assert_eq!(with(&connect, DATE, -1, "1970-01-02"), "1");
        // adaptive_time_microseconds: time always in microseconds, timestamps adaptive.
        assert_eq!(with(&micro, TIME, 0, "13:51:30"), "49890000000");
        assert_eq!(
            with(&micro, TIMESTAMP, 3, "2016-11-04 13:51:30.123"),
            "1478267490123"
        );
        assert_eq!(with(&adaptive, TIME, 0, "13:51:30"), "49890000");
        // timetz/timestamptz are strings in every mode.
        assert_eq!(with(&connect, TIMETZ, -1, "13:51:30+00"), "\"13:51:30Z\"");
    }

    #[test]
    fn binary_handling_modes() {
        use crate::event::BinaryHandlingMode::*;
        let w = |mode, oid, text| with(&events(|e| e.binary_handling_mode = mode), oid, -1, text);
        assert_eq!(w(Bytes, BYTEA, "\\xfbff000a"), "\"+/8ACg==\"");
        assert_eq!(w(Base64, BYTEA, "\\xfbff000a"), "\"+/8ACg==\"");
        assert_eq!(w(Base64UrlSafe, BYTEA, "\\xfbff000a"), "\"-_8ACg==\"");
        assert_eq!(w(Hex, BYTEA, "\\xFBff000a"), "\"fbff000a\"");
        assert_eq!(w(Hex, BYTEA, "\\x"), "\"\"");
        assert_eq!(
            w(Hex, BYTEA_ARRAY, "{\"\\\\x0a0b\",NULL}"),
            "[\"0a0b\",null]"
        );
        // bit/varbit stay io.debezium.data.Bits bytes (golden `binary-hex`).
        assert_eq!(w(Hex, 1560, "101"), "\"BQ==\"");
        let mut out = Vec::new();
        assert!(
            write_json(
                BYTEA,
                -1,
                b"\\x0g",
                &mut out,
                &events(|e| e.binary_handling_mode = Hex)
            )
            .is_err()
        );
    }

    #[test]
    fn unavailable_placeholders_follow_the_options() {
        let placeholder = |events: &EventOptions, oid| {
            let mut out = Vec::new();
            write_unavailable(oid, events, &mut out);
            String::from_utf8(out).unwrap()
        };
        let default = EventOptions::default();
        assert_eq!(
            placeholder(&default, BYTEA),
            "\"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==\""
        );
        assert_eq!(
            placeholder(&default, TEXT),
            "\"__debezium_unavailable_value\""
        );
        let custom = events(|e| e.unavailable_value_placeholder = "gone".into());
        assert_eq!(placeholder(&custom, TEXT), "\"gone\"");
        assert_eq!(placeholder(&custom, BYTEA), "\"Z29uZQ==\"");
        assert_eq!(placeholder(&custom, 1009), "[\"gone\"]");
        let hex = events(|e| e.binary_handling_mode = crate::event::BinaryHandlingMode::Hex);
        assert_eq!(placeholder(&hex, BYTEA), "\"__debezium_unavailable_value\"");
    }

    #[test]
    fn interval_handling_modes() {
        let string = events(|e| e.interval_handling_mode = IntervalHandlingMode::String);
        let w = |text| with(&string, INTERVAL, -1, text);
        assert_eq!(w("P1Y2M3DT4H5M6.78S"), "\"P1Y2M3DT4H5M6.78S\"");
        assert_eq!(w("PT0S"), "\"P0Y0M0DT0H0M0S\"");
        assert_eq!(w("P-1Y-2M3DT-4H-5M-6.5S"), "\"P-1Y-2M3DT-4H-5M-6.5S\"");
        assert_eq!(w("PT27H"), "\"P0Y0M0DT27H0M0S\"");
        assert_eq!(w("P3D"), "\"P0Y0M3DT0H0M0S\"");
        assert_eq!(
            with(&string, 1187, -1, "{P1D,NULL}"),
            "[\"P0Y0M1DT0H0M0S\",null]"
        );
        assert_eq!(
            with(&EventOptions::default(), INTERVAL, -1, "P1D"),
            "86400000000"
        );
        for bad in ["", "P", "1D", "P1X", "PT1.5H", "PTS"] {
            let mut out = Vec::new();
            assert!(
                write_json(INTERVAL, -1, bad.as_bytes(), &mut out, &string).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn decimal_double_and_money_fraction_digits() {
        use crate::event::DecimalHandlingMode::*;
        let double = events(|e| e.decimal_handling_mode = Double);
        assert_eq!(with(&double, NUMERIC, -1, "1234.5"), "1234.5");
        assert_eq!(with(&double, NUMERIC, 393_222, "-0.10"), "-0.1");
        assert_eq!(with(&double, NUMERIC, -1, "NaN"), "\"NaN\"");
        assert_eq!(with(&double, NUMERIC, -1, "-Infinity"), "\"-Infinity\"");
        assert_eq!(with(&double, 1231, -1, "{1.5,NULL}"), "[1.5,null]");
        assert_eq!(with(&double, MONEY, -1, "-$1,234.56"), "-1234.56");
        assert_eq!(
            with(&double, NUMERIC, -1, &format!("-{}", "9".repeat(400))),
            "\"-Infinity\""
        );
        let mut out = Vec::new();
        assert!(write_json(NUMERIC, -1, b"1e5", &mut out, &double).is_err());
        // money.fraction.digits: the scale of the amount, rounded half up.
        let string = |digits| {
            events(|e| {
                e.decimal_handling_mode = String;
                e.money_fraction_digits = digits;
            })
        };
        assert_eq!(with(&string(2), MONEY, -1, "$1,234.56"), "\"1234.56\"");
        assert_eq!(with(&string(4), MONEY, -1, "$1,234.56"), "\"1234.5600\"");
        assert_eq!(with(&string(1), MONEY, -1, "$1,234.56"), "\"1234.6\"");
        assert_eq!(with(&string(0), MONEY, -1, "$9.50"), "\"10\"");
        assert_eq!(with(&string(1), MONEY, -1, "-$99.96"), "\"-100.0\"");
        let precise = |digits| events(|e| e.money_fraction_digits = digits);
        // 123456 = 0x01E240; 12345600 = 0xBC6100.
        assert_eq!(with(&precise(2), MONEY, -1, "$1,234.56"), "\"AeJA\"");
        assert_eq!(with(&precise(4), MONEY, -1, "$1,234.56"), "\"ALxhAA==\"");
    }

    #[test]
    fn hstore_values_follow_the_mode() {
        let w = |mode, text: &str| {
            let mut out = Vec::new();
            write_hstore(text.as_bytes(), &mut out, mode).map(|()| String::from_utf8(out).unwrap())
        };
        let text = r#""a"=>"1", "b"=>NULL, "q\"t"=>"x\\y""#;
        assert_eq!(
            w(HstoreHandlingMode::Map, text).unwrap(),
            r#"{"a":"1","b":null,"q\"t":"x\\y"}"#
        );
        assert_eq!(
            w(HstoreHandlingMode::Json, r#""a"=>"1", "b"=>NULL"#).unwrap(),
            r#""{\"a\":\"1\",\"b\":null}""#
        );
        assert_eq!(w(HstoreHandlingMode::Json, "").unwrap(), r#""{}""#);
        for bad in [r#""a"=>"#, r#""a"=>"1" "b"=>"2""#, r#"a=>1"#, r#""a"=>NUL"#] {
            assert!(w(HstoreHandlingMode::Map, bad).is_err(), "{bad:?}");
        }
    }
}
