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
//! | `time`, `timestamp`, `timestamptz` | microseconds since midnight / the epoch | milli- or microseconds by `time.precision.mode`; `timestamptz`'s ISO string |
//! | `bytea` | `encode(c, 'hex')` | base64 or hex by `binary.handling.mode`, as hex |
//!
//! Other types (arrays, intervals, money, geometry, ranges, composites, …) and columns the
//! pipeline excludes, hashes or masks are not compared (the report lists them).
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

use crate::event::options::{BinaryHandlingMode, TemporalUnit, TimePrecisionMode};
use crate::event::{DecimalHandlingMode, EventOptions};
use crate::sql::quote_ident;

/// An event's value of a form its column's encoding never produces (it then differs from any
/// source value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a value of an unexpected form")]
pub struct UnexpectedForm;

/// How a column's values are compared (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnClass {
    /// `int2`, `int4`, `int8`, `oid`.
    Int,
    /// Types Debezium writes as their text output.
    Text,
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
}

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
    pub(super) const NUMERIC: u32 = 1700;
    pub(super) const UUID: u32 = 2950;
    pub(super) const JSONB: u32 = 3802;
}

impl ColumnClass {
    /// The class of a column of base type `type_oid` (a domain's base type), `typtype` `e` for
    /// an enum, and type modifier `typmod` (`-1`: none); `Err` names why it is not compared.
    ///
    /// # Errors
    ///
    /// The reason the column's values cannot be compared.
    pub fn of(
        type_oid: u32,
        is_enum: bool,
        typmod: i32,
        events: &EventOptions,
    ) -> Result<Self, &'static str> {
        // `time(p)`/`timestamp(p)`: the modifier is the precision; `numeric(p, s)`:
        // `((p << 16) | s) + 4`.
        let precision = (typmod >= 0).then_some(typmod as u32);
        let mode: TimePrecisionMode = events.time_precision_mode;
        Ok(match type_oid {
            _ if is_enum => ColumnClass::Text,
            oid::INT2 | oid::INT4 | oid::INT8 | oid::OID => ColumnClass::Int,
            oid::JSON | oid::JSONB if events.embed_json => {
                return Err("json embedded as JSON (embed_json): not compared");
            }
            oid::TEXT
            | oid::VARCHAR
            | oid::NAME
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
            _ => return Err("type not compared"),
        })
    }

    /// The SQL expression of column `name`'s canonical text (NULL for SQL NULL).
    pub fn sql(self, name: &str, events: &EventOptions) -> String {
        let c = quote_ident(name);
        match self {
            ColumnClass::Int | ColumnClass::Text | ColumnClass::Bool => format!("{c}::text"),
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
            ColumnClass::Time(_) => format!("(extract(epoch FROM {c}) * 1000000)::bigint::text"),
            ColumnClass::Timestamp(_) | ColumnClass::Timestamptz => format!(
                "CASE WHEN isfinite({c}) THEN (extract(epoch FROM {c}) * 1000000)::bigint::text END"
            ),
            ColumnClass::Bytea => format!("encode({c}, 'hex')"),
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
        self,
        raw: &str,
        events: &EventOptions,
    ) -> Result<Option<String>, UnexpectedForm> {
        let raw = raw.trim();
        let number = !raw.starts_with('"') && raw != "null";
        match self {
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
    pub fn is_placeholder(self, canonical: &str, placeholder: &str) -> bool {
        match self {
            ColumnClass::Text | ColumnClass::Bpchar => canonical == placeholder,
            ColumnClass::Bytea => canonical == hex(placeholder.as_bytes()),
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
        self,
        value: &Value,
        events: &EventOptions,
    ) -> Result<Option<String>, UnexpectedForm> {
        if value.is_null() {
            return Ok(None);
        }
        let text = match (self, value) {
            (ColumnClass::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            (ColumnClass::Text | ColumnClass::Bpchar, Value::String(s)) => s.clone(),
            (ColumnClass::Bool, Value::Bool(b)) => b.to_string(),
            (ColumnClass::Numeric { scale }, value) => {
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
                match unit {
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
pub fn form_sql(columns: &[(&str, ColumnClass)], events: &EventOptions) -> String {
    if columns.is_empty() {
        return "''".into();
    }
    let parts: Vec<String> = columns
        .iter()
        .map(|(name, class)| {
            let e = class.sql(name, events);
            format!(
                "CASE WHEN ({e}) IS NULL THEN 'N' ELSE 'V' || octet_length({e}) || ':' || ({e}) END"
            )
        })
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
            ColumnClass::of(oid::NUMERIC, false, ((10 << 16) | 2) + 4, &e),
            Ok(ColumnClass::Numeric { scale: Some(2) })
        );
        assert_eq!(
            ColumnClass::of(oid::TIMESTAMP, false, 3, &e),
            Ok(ColumnClass::Timestamp(TemporalUnit::Millis))
        );
        assert_eq!(
            ColumnClass::of(oid::TIMESTAMP, false, -1, &e),
            Ok(ColumnClass::Timestamp(TemporalUnit::Micros))
        );
        assert!(ColumnClass::of(1186, false, -1, &e).is_err(), "interval");
        e.decimal_handling_mode = DecimalHandlingMode::Double;
        assert!(ColumnClass::of(oid::NUMERIC, false, -1, &e).is_err());
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
