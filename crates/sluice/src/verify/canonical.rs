//! The canonical row form both sides of a verification agree on.
//!
//! PostgreSQL computes it from the table's rows in SQL ([`ColumnClass::sql`]); sluice computes
//! it from a change event's `after` object ([`ColumnClass::from_json`]), undoing Debezium's
//! encoding of each type. A value's canonical text is chosen so that both are exact and cheap:
//!
//! | class | canonical text (SQL) | from the event |
//! | --- | --- | --- |
//! | integers | `c::text` | the JSON number |
//! | text-like (text, varchar, name, uuid, json, jsonb, xml, inet, cidr, macaddr, enums) | `c::text` | the JSON string |
//! | `char(n)` | `format('%s', c)` (padded, as pgoutput sends it) | the JSON string |
//! | `bool` | `c::text` (`true`/`false`) | the JSON boolean |
//! | `numeric` | `c::text`, `trim_scale(c)::text` without a declared scale (NaN and ±Infinity: NULL under `precise`) | `precise`: the unscaled bytes with the column's scale (or `{scale, value}`); `string`: the string |
//! | `float4`/`float8` | `encode(float4send(c), 'hex')` (the IEEE bits) | the number's bits |
//! | `date` | days since 1970-01-01 | the number |
//! | `time`, `timestamp`, `timestamptz` | microseconds since midnight / the epoch (floored to the millisecond where the events hold milliseconds) | milli- or microseconds by `time.precision.mode`; `timestamptz`'s ISO string |
//! | `bytea` | `encode(c, 'hex')` | base64 or hex by `binary.handling.mode`, as hex |
//! | `interval`, `numeric` mode | microseconds, a month counting 30.4375 days, saturated at the `int8` limits (from `extract` of its fields, exact) | the number |
//! | `interval`, `string` mode | Debezium's `P<y>Y<m>M<d>DT<h>H<m>M<s>S` (from `extract` of its fields) | the string |
//! | arrays of the types above | each element's canonical piece (`N` or `V<length>:<text>`), in order | each element's, in order |
//!
//! Arrays follow Debezium's mapping: a multi-dimensional array is its outer list with every
//! sub-array null (so only its outer length is compared); a `numeric` array holding NaN or an
//! infinity, and an enum array holding NULL, are null as a whole; an empty array is the empty
//! text, not NULL. Not compared (the report lists them): other types (`money`, `timetz`,
//! geometry, ranges, composites, …), arrays of them or of domains, the arrays Debezium leaves
//! out of its events (`interval[]`, `money[]`, `name[]`, `xml[]`), and columns the pipeline
//! excludes, hashes or masks.
//!
//! A row's canonical form is its compared columns in column order, each `N` for NULL or
//! `V<byte length>:<text>`, so that no two rows share one. Its hash is the first 8 bytes of the
//! form's MD5, as a signed 64-bit integer (PostgreSQL: `('x' || substr(md5(…), 1, 16))::bit(64)
//! ::bigint`); a table's checksum is the sum of its rows' hashes (an exact `numeric` sum, no
//! overflow) with the row count. The key's canonical form (its key columns the same way) picks
//! a row's bucket: the first 4 bytes of its MD5 modulo the bucket count. An update to a column
//! whose value the event does not carry (an unchanged TOASTed value, `unavailable_columns`) is
//! marked `U`, and its key compared one by one with the source row treated the same way.

use base64::Engine as _;
use md5::Digest as _;
use serde_json::Value;

use serde_json::value::RawValue;

use crate::event::options::{BinaryHandlingMode, TemporalUnit, TimePrecisionMode};
use crate::event::{DecimalHandlingMode, EventOptions, IntervalHandlingMode};
use crate::source::postgres::value::{ColumnKind, column_kind, is_left_out};
use crate::sql::quote_ident;

/// An event's value of a form its column's encoding never produces (it then differs from any
/// source value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a value of an unexpected form")]
pub struct UnexpectedForm;

/// How a column's values are compared (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnClass {
    /// `int2`, `int4`, `int8`, `oid`.
    Int,
    /// Types Debezium writes as their text output.
    Text,
    /// An enum: its label (as [`ColumnClass::Text`]; an enum array holding NULL is null).
    Enum,
    /// `char(n)`: padded.
    Bpchar,
    /// `bool`.
    Bool,
    /// `numeric`, with the column's scale when declared.
    Numeric {
        /// The declared scale; `None`: unconstrained (`{scale, value}` under `precise`).
        scale: Option<u32>,
    },
    /// `float4`.
    Float4,
    /// `float8`.
    Float8,
    /// `date`.
    Date,
    /// `time` with the unit the events carry.
    Time(TemporalUnit),
    /// `timestamp` with the unit the events carry.
    Timestamp(TemporalUnit),
    /// `timestamptz` (an ISO string in the events).
    Timestamptz,
    /// `bytea`.
    Bytea,
    /// `interval` in its `interval.handling.mode`.
    Interval(IntervalHandlingMode),
    /// A one-dimensional array of elements of a class.
    Array(Box<ColumnClass>),
}

/// An array's element type, as [`ColumnClass::of`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayElement {
    /// The element type's OID (`pg_type.typelem`).
    pub type_oid: u32,
    /// Whether it is an enum.
    pub is_enum: bool,
}

/// Microseconds in Debezium's month (30.4375 days: `io.debezium.time.MicroDuration`).
const MONTH_MICROS: i64 = 2_629_800_000_000;

/// Type OIDs (`pg_type.oid`) of the built-in types compared.
mod oid {
    pub(super) const BOOL: u32 = 16;
    pub(super) const BYTEA: u32 = 17;
    pub(super) const NAME: u32 = 19;
    pub(super) const INT8: u32 = 20;
    pub(super) const INT2: u32 = 21;
    pub(super) const INT4: u32 = 23;
    pub(super) const TEXT: u32 = 25;
    pub(super) const OID: u32 = 26;
    pub(super) const JSON: u32 = 114;
    pub(super) const XML: u32 = 142;
    pub(super) const CIDR: u32 = 650;
    pub(super) const FLOAT4: u32 = 700;
    pub(super) const FLOAT8: u32 = 701;
    pub(super) const MACADDR8: u32 = 774;
    pub(super) const MACADDR: u32 = 829;
    pub(super) const INET: u32 = 869;
    pub(super) const BPCHAR: u32 = 1042;
    pub(super) const VARCHAR: u32 = 1043;
    pub(super) const DATE: u32 = 1082;
    pub(super) const TIME: u32 = 1083;
    pub(super) const TIMESTAMP: u32 = 1114;
    pub(super) const TIMESTAMPTZ: u32 = 1184;
    pub(super) const INTERVAL: u32 = 1186;
    pub(super) const NUMERIC: u32 = 1700;
    pub(super) const UUID: u32 = 2950;
    pub(super) const JSONB: u32 = 3802;
}

impl ColumnClass {
    /// The class of a column of base type `type_oid` (a domain's base type), `typtype` `e` for
    /// an enum, type modifier `typmod` (`-1`: none) and, for an array type, its `element`;
    /// `Err` names why it is not compared.
    ///
    /// # Errors
    ///
    /// The reason the column's values cannot be compared.
    pub fn of(
        type_oid: u32,
        is_enum: bool,
        typmod: i32,
        element: Option<ArrayElement>,
        events: &EventOptions,
    ) -> Result<Self, &'static str> {
        if let Some(element) = element {
            if is_left_out(type_oid) {
                return Err("an array Debezium leaves out of its events");
            }
            // Arrays the events map element by element: the built-in ones and enums'.
            let mapped = matches!(column_kind(type_oid, typmod, events), ColumnKind::Array(_));
            if !mapped && !element.is_enum {
                return Err("array type not compared");
            }
            let inner = ColumnClass::of(element.type_oid, element.is_enum, typmod, None, events)
                .map_err(|_| "array of a type not compared")?;
            return Ok(ColumnClass::Array(Box::new(inner)));
        }
        // `time(p)`/`timestamp(p)`: the modifier is the precision; `numeric(p, s)`:
        // `((p << 16) | s) + 4`.
        let precision = (typmod >= 0).then_some(typmod as u32);
        let mode: TimePrecisionMode = events.time_precision_mode;
        Ok(match type_oid {
            _ if is_enum => ColumnClass::Enum,
            oid::INT2 | oid::INT4 | oid::INT8 | oid::OID => ColumnClass::Int,
            oid::JSON | oid::JSONB if events.embed_json => {
                return Err("json embedded as JSON (embed_json): not compared");
            }
            // Debezium's streaming decoder writes `null` for a `name` value (its snapshot reader
            // the text), and sluice does the same: a key's newest event does not hold the row's.
            oid::NAME => return Err("name: the stream's events hold null for it (as Debezium's)"),
            oid::TEXT
            | oid::VARCHAR
            | oid::UUID
            | oid::JSON
            | oid::JSONB
            | oid::XML
            | oid::INET
            | oid::CIDR
            | oid::MACADDR
            | oid::MACADDR8 => ColumnClass::Text,
            oid::BPCHAR => ColumnClass::Bpchar,
            oid::BOOL => ColumnClass::Bool,
            oid::NUMERIC => match events.decimal_handling_mode {
                DecimalHandlingMode::Double => {
                    return Err("numeric as a double (decimal.handling.mode): not compared");
                }
                _ => ColumnClass::Numeric {
                    scale: (typmod >= 4).then(|| ((typmod - 4) & 0xffff) as u32),
                },
            },
            oid::FLOAT4 => ColumnClass::Float4,
            oid::FLOAT8 => ColumnClass::Float8,
            oid::DATE => ColumnClass::Date,
            oid::TIME => ColumnClass::Time(mode.time_unit(precision)),
            oid::TIMESTAMP => ColumnClass::Timestamp(mode.timestamp_unit(precision)),
            oid::TIMESTAMPTZ => ColumnClass::Timestamptz,
            oid::BYTEA => ColumnClass::Bytea,
            oid::INTERVAL => ColumnClass::Interval(events.interval_handling_mode),
            _ => return Err("type not compared"),
        })
    }

    /// The SQL expression of column `name`'s canonical text (NULL for SQL NULL).
    pub fn sql(&self, name: &str, events: &EventOptions) -> String {
        self.sql_of(&quote_ident(name), events)
    }

    /// The SQL expression of the canonical text of the value of SQL expression `c`.
    fn sql_of(&self, c: &str, events: &EventOptions) -> String {
        match self {
            ColumnClass::Int | ColumnClass::Text | ColumnClass::Enum | ColumnClass::Bool => {
                format!("{c}::text")
            }
            ColumnClass::Bpchar => format!("CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END"),
            ColumnClass::Numeric { scale } => {
                // Without a declared scale, trailing zeros are not kept (Debezium's
                // `VariableScaleDecimal` drops them).
                let text = match scale {
                    Some(_) => format!("{c}::text"),
                    None => format!("trim_scale({c})::text"),
                };
                match events.decimal_handling_mode {
                    DecimalHandlingMode::Precise => format!(
                        "CASE WHEN {c} NOT IN ('NaN'::numeric, 'Infinity'::numeric, '-Infinity'::numeric) THEN {text} END"
                    ),
                    _ => text,
                }
            }
            ColumnClass::Float4 => format!("encode(float4send({c}), 'hex')"),
            ColumnClass::Float8 => format!("encode(float8send({c}), 'hex')"),
            ColumnClass::Date => {
                format!("CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text END")
            }
            // In milliseconds, the events hold the value floored to the millisecond
            // (`time.precision.mode` `connect` keeps no more whatever the precision).
            ColumnClass::Time(unit) => format!("{}::text", micros_sql(c, *unit)),
            ColumnClass::Timestamp(unit) => format!(
                "CASE WHEN isfinite({c}) THEN {}::text END",
                micros_sql(c, *unit)
            ),
            ColumnClass::Timestamptz => format!(
                "CASE WHEN isfinite({c}) THEN {}::text END",
                micros_sql(c, TemporalUnit::Micros)
            ),
            ColumnClass::Bytea => format!("encode({c}, 'hex')"),
            ColumnClass::Interval(mode) => {
                // `extract` of an interval is exact (`numeric`) from PostgreSQL 14 on; the
                // fields as the server splits them (each with the sign of its part).
                let field = |f: &str| format!("extract({f} FROM {c})");
                let (years, months, days, hours, minutes) = (
                    field("year"),
                    field("month"),
                    field("day"),
                    field("hour"),
                    field("minute"),
                );
                let text = match mode {
                    IntervalHandlingMode::Numeric => format!(
                        "LEAST(GREATEST(({years} * 12 + {months}) * {MONTH_MICROS} + {days} * 86400000000 \
                         + ({hours} * 3600 + {minutes} * 60) * 1000000 + {}, \
                         -9223372036854775808), 9223372036854775807)::int8::text",
                        field("microseconds")
                    ),
                    IntervalHandlingMode::String => format!(
                        "format('P%sY%sM%sDT%sH%sM%sS', {years}, {months}, {days}, {hours}, {minutes}, trim_scale({}))",
                        field("second")
                    ),
                };
                // PostgreSQL 17's infinite intervals: their text, which the events keep as a
                // string (the value writer's fallback).
                format!("CASE WHEN isfinite({c}) THEN {text} ELSE {c}::text END")
            }
            ColumnClass::Array(element) => {
                let e = element.sql_of("__v.e", events);
                let piece = piece_sql(&e);
                // Debezium's array is null as a whole when an element cannot be converted.
                let whole_null = match **element {
                    ColumnClass::Numeric { .. } => {
                        Some("__v.e IN ('NaN'::numeric, 'Infinity'::numeric, '-Infinity'::numeric)")
                    }
                    ColumnClass::Enum => Some("__v.e IS NULL"),
                    _ => None,
                }
                .map(|cond| {
                    format!(
                        " WHEN EXISTS (SELECT 1 FROM unnest({c}) AS __v(e) WHERE {cond}) THEN NULL"
                    )
                })
                .unwrap_or_default();
                format!(
                    "CASE WHEN {c} IS NULL THEN NULL \
                     WHEN array_ndims({c}) > 1 THEN repeat('N', array_length({c}, 1)){whole_null} \
                     ELSE coalesce((SELECT string_agg({piece}, '' ORDER BY __v.i) \
                     FROM unnest({c}) WITH ORDINALITY AS __v(e, i)), '') END"
                )
            }
        }
    }

    /// [`ColumnClass::from_json`] of a value's JSON text. Floats are parsed from the text
    /// itself (correctly rounded: serde_json's own float parsing may be one unit off in the
    /// last place).
    ///
    /// # Errors
    ///
    /// As [`ColumnClass::from_json`].
    pub fn from_raw(
        &self,
        raw: &str,
        events: &EventOptions,
    ) -> Result<Option<String>, UnexpectedForm> {
        let raw = raw.trim();
        let number = !raw.starts_with('"') && raw != "null";
        match self {
            ColumnClass::Array(element) => {
                let Some(items) = serde_json::from_str::<Option<Vec<&RawValue>>>(raw)
                    .map_err(|_| UnexpectedForm)?
                else {
                    return Ok(None);
                };
                if let [only] = items.as_slice()
                    && let Some(text) = placeholder_array(only.get(), events)
                {
                    return Ok(Some(text));
                }
                let mut out = Vec::new();
                for item in items {
                    let text = element.from_raw(item.get(), events)?;
                    push_piece(&mut out, &text.as_deref().map_or(Piece::Null, Piece::Value));
                }
                String::from_utf8(out).map(Some).map_err(|_| UnexpectedForm)
            }
            ColumnClass::Float4 if number => {
                let v: f32 = raw.parse().map_err(|_| UnexpectedForm)?;
                Ok(Some(hex(&v.to_be_bytes())))
            }
            ColumnClass::Float8 if number => {
                let v: f64 = raw.parse().map_err(|_| UnexpectedForm)?;
                Ok(Some(hex(&v.to_be_bytes())))
            }
            _ => {
                let value: Value = serde_json::from_str(raw).map_err(|_| UnexpectedForm)?;
                self.from_json(&value, events)
            }
        }
    }

    /// Whether `canonical` is Debezium's unavailable-value placeholder `placeholder` (written
    /// for an unchanged TOASTed value), as a value of this class.
    pub fn is_placeholder(&self, canonical: &str, placeholder: &str) -> bool {
        match self {
            ColumnClass::Text | ColumnClass::Enum | ColumnClass::Bpchar => canonical == placeholder,
            ColumnClass::Bytea => canonical == hex(placeholder.as_bytes()),
            // A one-element array holding the placeholder string.
            ColumnClass::Array(_) => canonical == piece_text(placeholder),
            _ => false,
        }
    }

    /// The canonical text of an event's value of this class: `Ok(None)` for JSON null,
    /// `Err` for a value of another shape (which then differs from any source value).
    ///
    /// # Errors
    ///
    /// A value this class's encoding never produces.
    pub fn from_json(
        &self,
        value: &Value,
        events: &EventOptions,
    ) -> Result<Option<String>, UnexpectedForm> {
        if value.is_null() {
            return Ok(None);
        }
        let text = match (self, value) {
            (ColumnClass::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            (ColumnClass::Text | ColumnClass::Enum | ColumnClass::Bpchar, Value::String(s)) => {
                s.clone()
            }
            (ColumnClass::Array(_), Value::Array(_)) => {
                return self.from_raw(&value.to_string(), events);
            }
            (ColumnClass::Interval(IntervalHandlingMode::Numeric), Value::Number(n)) => {
                n.as_i64().ok_or(UnexpectedForm)?.to_string()
            }
            (ColumnClass::Interval(IntervalHandlingMode::Numeric), Value::String(s))
                if s == "infinity" || s == "-infinity" =>
            {
                s.clone()
            }
            (ColumnClass::Interval(IntervalHandlingMode::String), Value::String(s)) => s.clone(),
            (ColumnClass::Bool, Value::Bool(b)) => b.to_string(),
            (ColumnClass::Numeric { scale }, value) => {
                let scale = *scale;
                let text = numeric_text(value, scale, events)?;
                match scale {
                    Some(_) => text,
                    None => trim_scale(&text).to_owned(),
                }
            }
            (ColumnClass::Float4, value) => {
                let v = float(value)? as f32;
                hex(&v.to_be_bytes())
            }
            (ColumnClass::Float8, value) => hex(&float(value)?.to_be_bytes()),
            (ColumnClass::Date, Value::Number(n)) => n.as_i64().ok_or(UnexpectedForm)?.to_string(),
            (ColumnClass::Time(unit) | ColumnClass::Timestamp(unit), Value::Number(n)) => {
                let v = n.as_i64().ok_or(UnexpectedForm)?;
                match *unit {
                    TemporalUnit::Millis => v.checked_mul(1000).ok_or(UnexpectedForm)?,
                    TemporalUnit::Micros => v,
                }
                .to_string()
            }
            (ColumnClass::Timestamptz, Value::String(s)) => {
                let at = chrono::DateTime::parse_from_rfc3339(s).map_err(|_| UnexpectedForm)?;
                at.timestamp_micros().to_string()
            }
            (ColumnClass::Bytea, Value::String(s)) => {
                hex(&decode_binary(s, events.binary_handling_mode)?)
            }
            _ => return Err(UnexpectedForm),
        };
        Ok(Some(text))
    }
}

/// The canonical piece of a value `text` (`V<byte length>:<text>`).
fn piece_text(text: &str) -> String {
    let mut out = Vec::new();
    push_piece(&mut out, &Piece::Value(text));
    String::from_utf8(out).unwrap_or_default()
}

/// The canonical text of an array whose only element is `raw`, when it is Debezium's
/// placeholder for an unchanged TOASTed array (a one-element array of the placeholder
/// string, whatever the element type).
fn placeholder_array(raw: &str, events: &EventOptions) -> Option<String> {
    let text: String = serde_json::from_str(raw).ok()?;
    (text == events.unavailable_value_placeholder).then(|| piece_text(&text))
}

/// The SQL of the microseconds since midnight or the epoch of the time or timestamp `c`, floored
/// to `unit` (exact: `extract` is `numeric`).
fn micros_sql(c: &str, unit: TemporalUnit) -> String {
    match unit {
        TemporalUnit::Micros => format!("(extract(epoch FROM {c}) * 1000000)::int8"),
        TemporalUnit::Millis => format!("(floor(extract(epoch FROM {c}) * 1000) * 1000)::int8"),
    }
}

/// The SQL of a canonical piece of the text expression `e` (`N` or `V<length>:<text>`).
fn piece_sql(e: &str) -> String {
    format!("CASE WHEN ({e}) IS NULL THEN 'N' ELSE 'V' || octet_length({e}) || ':' || ({e}) END")
}

/// A JSON number, or the strings Kafka's JSON converter writes for NaN and the infinities.
fn float(value: &Value) -> Result<f64, UnexpectedForm> {
    match value {
        Value::Number(n) => n.as_f64().ok_or(UnexpectedForm),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(UnexpectedForm),
        },
        _ => Err(UnexpectedForm),
    }
}

fn decode_binary(text: &str, mode: BinaryHandlingMode) -> Result<Vec<u8>, UnexpectedForm> {
    match mode.base64_engine() {
        Some(engine) => engine.decode(text).map_err(|_| UnexpectedForm),
        None => (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(UnexpectedForm)
            })
            .collect(),
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// `text` without trailing fraction zeros (PostgreSQL's `trim_scale`; NaN and the
/// infinities as they are).
fn trim_scale(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// A `numeric` event value as PostgreSQL's text output.
fn numeric_text(
    value: &Value,
    scale: Option<u32>,
    events: &EventOptions,
) -> Result<String, UnexpectedForm> {
    match (events.decimal_handling_mode, value) {
        (DecimalHandlingMode::String, Value::String(s)) => Ok(s.clone()),
        (DecimalHandlingMode::Precise, Value::String(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| UnexpectedForm)?;
            Ok(decimal_text(&bytes, scale.ok_or(UnexpectedForm)?))
        }
        (DecimalHandlingMode::Precise, Value::Object(object)) => {
            let scale = object
                .get("scale")
                .and_then(Value::as_u64)
                .ok_or(UnexpectedForm)?;
            let b64 = object
                .get("value")
                .and_then(Value::as_str)
                .ok_or(UnexpectedForm)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| UnexpectedForm)?;
            Ok(decimal_text(
                &bytes,
                u32::try_from(scale).map_err(|_| UnexpectedForm)?,
            ))
        }
        _ => Err(UnexpectedForm),
    }
}

/// The decimal text of Kafka Connect's `Decimal`: `unscaled` (big-endian two's complement, as
/// Java's `BigInteger.toByteArray`) divided by 10^`scale`, with exactly `scale` fraction digits
/// (as PostgreSQL writes a `numeric` of that scale).
///
/// By hand: a base conversion of a few bytes by repeated division, not worth a big-integer
/// dependency.
pub fn decimal_text(unscaled: &[u8], scale: u32) -> String {
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude: Vec<u8> = unscaled.to_vec();
    if negative {
        // Two's complement: invert and add one.
        for byte in &mut magnitude {
            *byte = !*byte;
        }
        for byte in magnitude.iter_mut().rev() {
            let (v, overflow) = byte.overflowing_add(1);
            *byte = v;
            if !overflow {
                break;
            }
        }
    }
    let mut digits = Vec::new();
    while magnitude.iter().any(|b| *b != 0) {
        let mut remainder = 0u32;
        for byte in &mut magnitude {
            let v = (remainder << 8) | u32::from(*byte);
            *byte = (v / 10) as u8;
            remainder = v % 10;
        }
        digits.push(b'0' + remainder as u8);
    }
    let scale = scale as usize;
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let (int, frac) = digits.split_at(digits.len() - scale);
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(int).unwrap_or("0"));
    if scale > 0 {
        out.push('.');
        out.push_str(std::str::from_utf8(frac).unwrap_or(""));
    }
    out
}

/// One compared value of a row: SQL NULL, a value, or unavailable (not in the event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// SQL NULL.
    Null,
    /// The canonical text.
    Value(&'a str),
    /// Not carried by the event (an unchanged TOASTed value).
    Unavailable,
}

/// Appends a piece of a canonical form.
pub fn push_piece(out: &mut Vec<u8>, piece: &Piece<'_>) {
    match piece {
        Piece::Null => out.push(b'N'),
        Piece::Unavailable => out.push(b'U'),
        Piece::Value(text) => {
            out.push(b'V');
            out.extend_from_slice(text.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// The SQL of the canonical form of `columns` (name, class), one text value.
pub fn form_sql(columns: &[(&str, &ColumnClass)], events: &EventOptions) -> String {
    if columns.is_empty() {
        return "''".into();
    }
    let parts: Vec<String> = columns
        .iter()
        .map(|(name, class)| piece_sql(&class.sql(name, events)))
        .collect();
    format!("concat({})", parts.join(", "))
}

/// The SQL of a form's hash (see [`row_hash`]).
pub fn hash_sql(form: &str) -> String {
    format!("('x' || substr(md5({form}), 1, 16))::bit(64)::bigint")
}

/// The SQL of a key form's bucket among `buckets` (see [`bucket_of`]).
pub fn bucket_sql(key_form: &str, buckets: u32) -> String {
    format!(
        "((('x' || lpad(substr(md5({key_form}), 1, 8), 16, '0'))::bit(64)::bigint) % {buckets})::int4"
    )
}

/// The MD5 of a canonical form.
pub fn digest(form: &[u8]) -> [u8; 16] {
    md5::Md5::digest(form).into()
}

/// A row form's hash: the first 8 bytes of its MD5, big-endian, signed.
pub fn row_hash(form: &[u8]) -> i64 {
    let d = digest(form);
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// A key form's bucket: the first 4 bytes of its MD5 (big-endian, unsigned) modulo `buckets`.
pub fn bucket_of(key_digest: &[u8; 16], buckets: u32) -> u32 {
    u32::from_be_bytes([key_digest[0], key_digest[1], key_digest[2], key_digest[3]]) % buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `name` column is listed as not compared: the stream's events hold `null` for it (as
    /// Debezium's do), so a key whose newest event was streamed would show a false difference.
    #[test]
    fn name_columns_are_not_compared() {
        let class = ColumnClass::of(oid::NAME, false, -1, None, &EventOptions::default());
        assert_eq!(
            class.err(),
            Some("name: the stream's events hold null for it (as Debezium's)")
        );
    }
    use serde_json::json;

    fn events() -> EventOptions {
        EventOptions::default()
    }

    #[test]
    fn decimals_as_postgresql_writes_them() {
        // 1250 = 0x04e2.
        assert_eq!(decimal_text(&[0x04, 0xe2], 2), "12.50");
        assert_eq!(decimal_text(&[0x05], 2), "0.05");
        assert_eq!(decimal_text(&[0xfb], 2), "-0.05");
        assert_eq!(decimal_text(&[0x00], 3), "0.000");
        assert_eq!(decimal_text(&[0x00], 0), "0");
        assert_eq!(decimal_text(&[0x80], 0), "-128");
        assert_eq!(decimal_text(&[0x00, 0xff], 1), "25.5");
        // 10^20 with scale 0: more than 64 bits.
        let mut out = Vec::new();
        crate::event::decimal::write_unscaled(false, "123456789012345678901234567890", &mut out);
        let b64: String = serde_json::from_slice(&out).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(decimal_text(&bytes, 5), "1234567890123456789012345.67890");
        let mut out = Vec::new();
        crate::event::decimal::write_unscaled(true, "1", &mut out);
        let b64: String = serde_json::from_slice(&out).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(decimal_text(&bytes, 1), "-0.1");
    }

    #[test]
    fn event_values_to_canonical_text() {
        let e = events();
        let text = |class: ColumnClass, v: Value| class.from_json(&v, &e);
        assert_eq!(text(ColumnClass::Int, json!(-7)), Ok(Some("-7".into())));
        assert_eq!(text(ColumnClass::Int, json!(1.5)), Err(UnexpectedForm));
        assert_eq!(
            text(ColumnClass::Bool, json!(true)),
            Ok(Some("true".into()))
        );
        assert_eq!(text(ColumnClass::Text, Value::Null), Ok(None));
        assert_eq!(
            text(
                ColumnClass::Numeric { scale: None },
                json!({"scale": 1, "value": "Dw=="})
            ),
            Ok(Some("1.5".into()))
        );
        // Without a declared scale, trailing zeros go (`trim_scale`).
        assert_eq!(
            text(
                ColumnClass::Numeric { scale: None },
                json!({"scale": 2, "value": "ZA=="})
            ),
            Ok(Some("1".into()))
        );
        assert_eq!(
            text(ColumnClass::Numeric { scale: Some(2) }, json!("ZA==")),
            Ok(Some("1.00".into()))
        );
        assert_eq!(
            text(ColumnClass::Float8, json!(0.1)),
            Ok(Some("3fb999999999999a".into()))
        );
        assert_eq!(
            text(ColumnClass::Float4, json!(1.5)),
            Ok(Some("3fc00000".into()))
        );
        // Correctly rounded from the text (90.33333333333331 = 0x40569555 55555554).
        assert_eq!(
            ColumnClass::Float8.from_raw("90.33333333333331", &e),
            Ok(Some(hex(&90.33333333333331f64.to_be_bytes())))
        );
        assert_eq!(
            ColumnClass::Float8.from_raw("90.33333333333331", &e),
            Ok(Some("4056955555555554".into()))
        );
        assert_eq!(
            text(ColumnClass::Float8, json!("NaN")),
            Ok(Some("7ff8000000000000".into()))
        );
        assert_eq!(
            text(ColumnClass::Timestamp(TemporalUnit::Millis), json!(1_000)),
            Ok(Some("1000000".into()))
        );
        assert_eq!(
            text(ColumnClass::Timestamptz, json!("1970-01-01T00:00:01.5Z")),
            Ok(Some("1500000".into()))
        );
        assert_eq!(
            text(ColumnClass::Bytea, json!("3q2+7w==")),
            Ok(Some("deadbeef".into()))
        );
        // An unchanged TOASTed array: Debezium's placeholder string as its only element,
        // whatever the element type.
        let ints = ColumnClass::Array(Box::new(ColumnClass::Int));
        let placeholder = text(ints.clone(), json!(["__debezium_unavailable_value"]))
            .unwrap()
            .unwrap();
        assert!(ints.is_placeholder(&placeholder, "__debezium_unavailable_value"));
        assert_eq!(
            text(ints.clone(), json!([1, null])),
            Ok(Some("V1:1N".into()))
        );
        assert_eq!(text(ints, json!(["1"])), Err(UnexpectedForm));
        assert_eq!(
            text(
                ColumnClass::Interval(IntervalHandlingMode::Numeric),
                json!(-1)
            ),
            Ok(Some("-1".into()))
        );
        // PostgreSQL 17's infinite interval, kept as its text by the value writer.
        assert_eq!(
            text(
                ColumnClass::Interval(IntervalHandlingMode::Numeric),
                json!("-infinity")
            ),
            Ok(Some("-infinity".into()))
        );
        assert_eq!(
            text(
                ColumnClass::Interval(IntervalHandlingMode::Numeric),
                json!("P1D")
            ),
            Err(UnexpectedForm)
        );
    }

    #[test]
    fn forms_are_unambiguous() {
        let form = |pieces: &[Piece<'_>]| {
            let mut out = Vec::new();
            pieces.iter().for_each(|p| push_piece(&mut out, p));
            out
        };
        assert_ne!(
            form(&[Piece::Value("ab"), Piece::Value("c")]),
            form(&[Piece::Value("a"), Piece::Value("bc")])
        );
        assert_ne!(form(&[Piece::Null]), form(&[Piece::Value("N")]));
        assert_eq!(form(&[Piece::Value("é"), Piece::Null]), "V2:éN".as_bytes());
    }

    #[test]
    fn classes_follow_the_pipeline_options() {
        let mut e = events();
        assert_eq!(
            ColumnClass::of(oid::NUMERIC, false, ((10 << 16) | 2) + 4, None, &e),
            Ok(ColumnClass::Numeric { scale: Some(2) })
        );
        assert_eq!(
            ColumnClass::of(oid::TIMESTAMP, false, 3, None, &e),
            Ok(ColumnClass::Timestamp(TemporalUnit::Millis))
        );
        assert_eq!(
            ColumnClass::of(oid::TIMESTAMP, false, -1, None, &e),
            Ok(ColumnClass::Timestamp(TemporalUnit::Micros))
        );
        assert_eq!(
            ColumnClass::of(oid::INTERVAL, false, -1, None, &e),
            Ok(ColumnClass::Interval(IntervalHandlingMode::Numeric))
        );
        let element = |type_oid| {
            Some(ArrayElement {
                type_oid,
                is_enum: false,
            })
        };
        // int4[], and interval[] (which Debezium leaves out of its events).
        assert_eq!(
            ColumnClass::of(1007, false, -1, element(oid::INT4), &e),
            Ok(ColumnClass::Array(Box::new(ColumnClass::Int)))
        );
        assert!(ColumnClass::of(1187, false, -1, element(oid::INTERVAL), &e).is_err());
        // An enum's array (its OID is the enum's own).
        assert_eq!(
            ColumnClass::of(
                90_001,
                false,
                -1,
                Some(ArrayElement {
                    type_oid: 90_000,
                    is_enum: true
                }),
                &e
            ),
            Ok(ColumnClass::Array(Box::new(ColumnClass::Enum)))
        );
        e.decimal_handling_mode = DecimalHandlingMode::Double;
        assert!(ColumnClass::of(oid::NUMERIC, false, -1, None, &e).is_err());
    }

    /// Arrays and intervals, hostile values included, under several `[kafka.events]` options:
    /// each value's text output (as pgoutput sends it, under the walsender's session settings)
    /// encoded by sluice's own value writer, its canonical text from that JSON equals the
    /// server's; the class comes from the catalog as verify's source side reads it.
    async fn through_the_encoder(client: &tokio_postgres::Client) {
        client
            .batch_execute(
                "SET IntervalStyle = iso_8601; SET extra_float_digits = 3; \
                 SET bytea_output = hex; SET DateStyle = 'ISO, MDY'; \
                 DROP TYPE IF EXISTS pg_temp.verify_mood CASCADE; \
                 CREATE TYPE pg_temp.verify_mood AS ENUM ('sad', 'ok,\"x\"}', 'NULL');",
            )
            .await
            .unwrap();
        let values: &[(&str, &str)] = &[
            ("int2[]", "'{-32768,32767}'"),
            ("int4[]", "'{1,NULL,-3}'"),
            ("int4[]", "'{}'"),
            ("int4[]", "'{NULL}'"),
            ("int4[]", "'{{1,2},{3,4}}'"),
            ("int4[]", "'[0:2]={7,8,9}'"),
            ("int8[]", "'{-9223372036854775808,9223372036854775807}'"),
            (
                "text[]",
                "ARRAY['a,b', 'c\"d', 'e\\f', '{x}', 'NULL', NULL, '', ' sp ', 'é', \
                 E'tab\\there', 'x}y{', '\\\"', 'N', 'V1:a']",
            ),
            ("text[]", "ARRAY[[' a', 'b'], ['c', NULL]]"),
            ("varchar(5)[]", "ARRAY['ab', NULL]"),
            ("char(3)[]", "ARRAY['a', 'abc', NULL, '']"),
            ("bool[]", "'{t,f,NULL}'"),
            (
                "numeric[]",
                "'{1.50,-2,NULL,0.000001,123456789012345678901234567890.5,-0.0}'",
            ),
            ("numeric(10,2)[]", "'{1.5,-0.01,NULL}'"),
            ("numeric[]", "'{1,NaN}'"),
            ("numeric[]", "'{1,-Infinity}'"),
            ("numeric[]", "'{{1,NaN}}'"),
            ("float4[]", "'{0.1,NaN,-Infinity,1e-45,3.4028235e38,-0}'"),
            ("float8[]", "'{0.1,1e300,-0,NULL,4.9e-324,Infinity}'"),
            ("date[]", "'{1969-12-31,2020-02-29,NULL,0001-01-01}'"),
            ("time[]", "'{00:00:00,23:59:59.999999}'"),
            ("time(3)[]", "'{00:00:01.5}'"),
            (
                "timestamp[]",
                "'{1960-01-01 00:00:00.000001,2020-01-01 00:00:00,NULL}'",
            ),
            ("timestamp(3)[]", "'{2020-01-01 00:00:00.12}'"),
            (
                "timestamptz[]",
                "'{2020-01-01 01:00:00.5+01,1900-01-01 00:00:00Z}'",
            ),
            ("bytea[]", "ARRAY['\\x00ff'::bytea, NULL, '\\x'::bytea]"),
            (
                "jsonb[]",
                "ARRAY['{\"b\": 1, \"a\": \"x,}\"}'::jsonb, NULL]",
            ),
            ("uuid[]", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'"),
            (
                "pg_temp.verify_mood[]",
                "ARRAY['sad', 'ok,\"x\"}', 'NULL']::pg_temp.verify_mood[]",
            ),
            (
                "pg_temp.verify_mood[]",
                "ARRAY['sad', NULL]::pg_temp.verify_mood[]",
            ),
            ("interval", "'1 year 2 months 3 days 04:05:06.789'"),
            ("interval", "'-1 year -2 mons +3 days -04:05:06.5'"),
            ("interval", "'0'"),
            ("interval", "'-0.5 seconds'"),
            ("interval", "'178000000 years'"),
            ("interval", "'-178000000 years'"),
            ("interval", "'1 mon -1 day 1 hour'"),
            ("interval", "'100000 hours 59 minutes 59.999999 seconds'"),
            ("interval", "'-1 hour +30 minutes'"),
            (
                "interval",
                "'-2147483648 months -2147483648 days -2562047788 hours'",
            ),
            ("interval(0)", "'1 day 00:00:01.7'"),
        ];
        let options = [
            EventOptions::default(),
            EventOptions {
                interval_handling_mode: IntervalHandlingMode::String,
                decimal_handling_mode: DecimalHandlingMode::String,
                binary_handling_mode: BinaryHandlingMode::Hex,
                time_precision_mode: TimePrecisionMode::Connect,
                ..EventOptions::default()
            },
            EventOptions {
                binary_handling_mode: BinaryHandlingMode::Base64UrlSafe,
                time_precision_mode: TimePrecisionMode::AdaptiveTimeMicroseconds,
                ..EventOptions::default()
            },
        ];
        for (ty, literal) in values {
            client
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS pg_temp.canon; CREATE TEMP TABLE canon (c {ty}); \
                     INSERT INTO canon VALUES ({literal});"
                ))
                .await
                .unwrap();
            // The column as `source::SourceSnapshot::plan` reads it.
            let column = client
                .query_one(
                    "SELECT t.oid, t.typtype::text, a.atttypmod, e.oid, e.typtype::text \
                     FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                     LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem \
                     WHERE a.attrelid = 'pg_temp.canon'::regclass AND a.attname = 'c'",
                    &[],
                )
                .await
                .unwrap();
            let type_oid: u32 = column.get(0);
            let typmod: i32 = column.get(2);
            let element = column
                .get::<_, Option<u32>>(3)
                .map(|type_oid| ArrayElement {
                    type_oid,
                    is_enum: column.get::<_, Option<String>>(4).as_deref() == Some("e"),
                });
            for events in &options {
                let class = ColumnClass::of(
                    type_oid,
                    column.get::<_, String>(1) == "e",
                    typmod,
                    element,
                    events,
                )
                .unwrap_or_else(|e| panic!("{ty}: {e}"));
                let row = client
                    .query_one(
                        &format!("SELECT c::text, {} FROM canon", class.sql("c", events)),
                        &[],
                    )
                    .await
                    .unwrap();
                let text: Option<String> = row.get(0);
                let server: Option<String> = row.get(1);
                // The enum array's OID as the source's relation model gives it.
                let encoded_oid = match element {
                    Some(ArrayElement { is_enum: true, .. }) => {
                        crate::source::postgres::value::ENUM_ARRAY_OID
                    }
                    _ => type_oid,
                };
                let mut json = Vec::new();
                match &text {
                    Some(text) => crate::source::postgres::value::write_json(
                        encoded_oid,
                        typmod,
                        text.as_bytes(),
                        &mut json,
                        events,
                    )
                    .unwrap_or_else(|e| panic!("{ty} {literal}: {e}")),
                    None => json.extend_from_slice(b"null"),
                }
                let json = String::from_utf8(json).unwrap();
                let ours = class.from_raw(&json, events);
                assert_eq!(
                    Ok(server),
                    ours,
                    "{ty} {literal} ({text:?}) encoded as {json} under interval {:?}, decimal \
                     {:?}, binary {:?}",
                    events.interval_handling_mode,
                    events.decimal_handling_mode,
                    events.binary_handling_mode
                );
            }
        }
        client
            .batch_execute("DROP TABLE pg_temp.canon; DROP TYPE pg_temp.verify_mood")
            .await
            .unwrap();
    }

    /// PostgreSQL's canonical text of each type (the SQL of [`ColumnClass::sql`]) equals what
    /// sluice derives from the value's Debezium encoding, and the server's hash and bucket of
    /// a form equal [`row_hash`] and [`bucket_of`].
    #[tokio::test]
    #[ignore = "needs the dev stack's PostgreSQL (PG_URL); scripts/test runs it (--include-ignored)"]
    async fn postgres_computes_the_same_canonical_forms() {
        let Ok(url) = std::env::var("PG_URL") else {
            panic!("PG_URL is not set: run `eval \"$(scripts/dev-stack env)\"` or scripts/test");
        };
        let config = crate::pg_connect::PgConnectConfig::parse(&url).expect("a postgres URL");
        let (client, _driver) = crate::pg_connect::connect_sql(&config)
            .await
            .expect("PG_URL accepts SQL connections");
        client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
        let e = events();
        // (SQL type, literal, class, the value as Debezium's JSON encodes it).
        let cases: Vec<(&str, &str, ColumnClass, Value)> = vec![
            (
                "int8",
                "-9007199254740993",
                ColumnClass::Int,
                json!(-9007199254740993i64),
            ),
            ("text", "'a''b é'", ColumnClass::Text, json!("a'b é")),
            ("char(4)", "'ab'", ColumnClass::Bpchar, json!("ab  ")),
            ("bool", "false", ColumnClass::Bool, json!(false)),
            (
                "numeric(10,2)",
                "-1.5",
                ColumnClass::Numeric { scale: Some(2) },
                json!("/2o="),
            ),
            (
                "numeric",
                "2.50",
                ColumnClass::Numeric { scale: None },
                json!({"scale": 1, "value": "GQ=="}),
            ),
            (
                "numeric",
                "'NaN'",
                ColumnClass::Numeric { scale: None },
                Value::Null,
            ),
            ("float4", "0.1", ColumnClass::Float4, json!(0.1)),
            (
                "float8",
                "'-Infinity'",
                ColumnClass::Float8,
                json!("-Infinity"),
            ),
            ("float8", "1e300", ColumnClass::Float8, json!(1e300)),
            ("date", "'1969-12-31'", ColumnClass::Date, json!(-1)),
            (
                "time",
                "'23:59:59.999999'",
                ColumnClass::Time(TemporalUnit::Micros),
                json!(86_399_999_999i64),
            ),
            (
                "time(3)",
                "'00:00:01.5'",
                ColumnClass::Time(TemporalUnit::Millis),
                json!(1500),
            ),
            (
                "timestamp",
                "'1960-01-01 00:00:00.000001'",
                ColumnClass::Timestamp(TemporalUnit::Micros),
                json!(-315_619_199_999_999i64),
            ),
            (
                "timestamp(3)",
                "'2020-01-01 00:00:00.12'",
                ColumnClass::Timestamp(TemporalUnit::Millis),
                json!(1_577_836_800_120i64),
            ),
            (
                "timestamptz",
                "'2020-01-01 01:00:00.5+01'",
                ColumnClass::Timestamptz,
                json!("2020-01-01T00:00:00.5Z"),
            ),
            ("bytea", "'\\x00ff'", ColumnClass::Bytea, json!("AP8=")),
            (
                "jsonb",
                "'{\"b\": 1, \"a\": [1, 2]}'",
                ColumnClass::Text,
                json!("{\"a\": [1, 2], \"b\": 1}"),
            ),
            (
                "uuid",
                "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
                ColumnClass::Text,
                json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            ),
            (
                "int4[]",
                "'{1,NULL,-3}'",
                ColumnClass::Array(Box::new(ColumnClass::Int)),
                json!([1, null, -3]),
            ),
            (
                "int4[]",
                "'{}'",
                ColumnClass::Array(Box::new(ColumnClass::Int)),
                json!([]),
            ),
            // Debezium: the outer list, each sub-array null.
            (
                "int4[]",
                "'{{1,2},{3,4},{5,6}}'",
                ColumnClass::Array(Box::new(ColumnClass::Int)),
                json!([null, null, null]),
            ),
            (
                "text[]",
                "ARRAY['a,b', 'c\"d', 'e\\f', '{x}', 'NULL', NULL, '']",
                ColumnClass::Array(Box::new(ColumnClass::Text)),
                json!(["a,b", "c\"d", "e\\f", "{x}", "NULL", null, ""]),
            ),
            (
                "numeric[]",
                "'{1,NaN}'",
                ColumnClass::Array(Box::new(ColumnClass::Numeric { scale: None })),
                Value::Null,
            ),
            (
                "interval",
                "'1 year 2 months 3 days 04:05:06.789'",
                ColumnClass::Interval(IntervalHandlingMode::Numeric),
                // 14 months of 30.4375 days, 3 days, 4 h 5 min 6.789 s.
                json!(14 * MONTH_MICROS + 3 * 86_400_000_000 + 14_706_789_000),
            ),
            (
                "interval",
                "'-1 year -2 mons +3 days -04:05:06.5'",
                ColumnClass::Interval(IntervalHandlingMode::String),
                json!("P-1Y-2M3DT-4H-5M-6.5S"),
            ),
        ];
        for (ty, literal, class, encoded) in cases {
            let sql = format!(
                "SELECT {} FROM (SELECT {literal}::{ty} AS c) AS t",
                class.sql("c", &e)
            );
            let server: Option<String> = client.query_one(&sql, &[]).await.unwrap().get(0);
            let ours = class.from_json(&encoded, &e).unwrap();
            assert_eq!(server, ours, "{ty} {literal} as {encoded}");
        }
        through_the_encoder(&client).await;
        for form in ["", "V1:aN", "V3:abcUN", "V2:\u{e9}"] {
            let row: (i64, i32) = {
                let r = client
                    .query_one(
                        &format!(
                            "SELECT {}, {}",
                            hash_sql("$1::text"),
                            bucket_sql("$1::text", 977)
                        ),
                        &[&form],
                    )
                    .await
                    .unwrap();
                (r.get(0), r.get(1))
            };
            assert_eq!(row.0, row_hash(form.as_bytes()), "{form:?}");
            assert_eq!(
                row.1 as u32,
                bucket_of(&digest(form.as_bytes()), 977),
                "{form:?}"
            );
        }
    }
}
