//! Debezium's encodings of column values turned back into what PostgreSQL's input functions
//! read, so that `jsonb_populate_recordset` gives each target column the source's value.
//!
//! The encoding of a field is known from its Connect schema when the events carry schemas
//! (`io.debezium.time.Date`, `org.apache.kafka.connect.data.Decimal` with its `scale`, …).
//! Without schemas it is inferred from the target column's type and the JSON value's kind,
//! assuming Debezium's default options (`decimal.handling.mode = precise`,
//! `time.precision.mode = adaptive`, `binary.handling.mode = bytes`,
//! `interval.handling.mode = numeric`): a `date` column receiving a number receives days since
//! the epoch, a `bytea` column receiving a string receives base64, and so on. Plain JSON rows
//! (no `op`) are never converted.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::decode::ConnectSchema;
use crate::event::temporal::civil_from_days;
use crate::event::{BinaryHandlingMode, DecimalHandlingMode, TemporalUnit, TimePrecisionMode};

/// The Debezium options the events without schemas were written with (Debezium's names:
/// `decimal.handling.mode`, `time.precision.mode`, `binary.handling.mode`): they decide how a
/// target column's values are read. Events with schemas say it themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventEncoding {
    /// `decimal.handling.mode`.
    pub decimal: DecimalHandlingMode,
    /// `time.precision.mode`.
    pub time: TimePrecisionMode,
    /// `binary.handling.mode`.
    pub binary: BinaryHandlingMode,
}

/// The resolution of a temporal number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds.
    Millis,
    /// Microseconds.
    Micros,
    /// Nanoseconds.
    Nanos,
}

impl Unit {
    const fn per_second(self) -> i128 {
        match self {
            Self::Millis => 1_000,
            Self::Micros => 1_000_000,
            Self::Nanos => 1_000_000_000,
        }
    }
}

/// How a column's JSON value is turned into PostgreSQL's input form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Days since 1970-01-01 → `YYYY-MM-DD`.
    Date,
    /// Time since the epoch (no zone) → `YYYY-MM-DD HH:MM:SS.ffffff`.
    Timestamp(Unit),
    /// Time since midnight → `HH:MM:SS.ffffff`.
    Time(Unit),
    /// Base64 of a big-endian two's-complement unscaled value → a decimal text.
    Decimal {
        /// Digits after the point.
        scale: u32,
    },
    /// `{"scale": s, "value": base64}` (`io.debezium.data.VariableScaleDecimal`) → a decimal
    /// text.
    VariableDecimal,
    /// Base64 (or the `binary.handling.mode`'s encoding) → `\x` and hex (`bytea`'s input).
    Bytes(BinaryHandlingMode),
    /// A JSON document as a string (`io.debezium.data.Json`) → the document.
    Json,
    /// Microseconds (`io.debezium.time.MicroDuration`) → an interval.
    MicroDuration,
    /// `{"x", "y", "wkb", "srid"}` (`io.debezium.data.geometry.Point`) → `(x,y)`.
    Point,
    /// `io.debezium.data.Bits` (the bit string's value as little-endian bytes, in base64) or a
    /// boolean (`bit(1)`) → the bit string, left-padded to the column's length when known.
    Bits {
        /// `bit(n)`'s `n` (`None`: `varbit` or unknown).
        length: Option<u32>,
    },
    /// `{"wkb", "srid"}` (`io.debezium.data.geometry.Geometry`) of a `box`: the polygon's
    /// bounding box → `(x2,y2),(x1,y1)`.
    Box,
    /// An `hstore` as a JSON object, or its text (`hstore.handling.mode = json`) → `hstore`'s
    /// input (`"k"=>"v", "n"=>NULL`).
    Hstore,
    /// A decimal's text (`decimal.handling.mode = string`): Debezium's `POSITIVE_INFINITY`,
    /// `NEGATIVE_INFINITY` and `NAN` → PostgreSQL's `Infinity`, `-Infinity`, `NaN`.
    DecimalText,
    /// ISO 8601 with an offset (`io.debezium.time.ZonedTimestamp`): years before 1 (`-4712-…`,
    /// ISO's 4713 BC) and after 9999 (`+294276-…`) → PostgreSQL's `… BC` and unsigned forms;
    /// others (and `infinity`, `-infinity`) as they are.
    ZonedTimestamp,
}

/// Debezium's encodings of `infinity` and `-infinity` dates (days since the epoch): what
/// PostgreSQL's `date` cannot hold, so never a finite date. Streamed (pgoutput's text,
/// `DateTimeFormat` → `PostgresValueConverter.POSITIVE_INFINITY_LOCAL_DATE` /
/// `NEGATIVE_INFINITY_LOCAL_DATE`) and snapshotted (JDBC's `PGStatement.DATE_POSITIVE_INFINITY`
/// / `DATE_NEGATIVE_INFINITY` milliseconds turned into an `int32` day count), as Debezium
/// 3.7.0.Final writes them (the golden captures, `tests/debezium/*/…specials.jsonl`).
const DATE_INFINITY: [(i64, &str); 4] = [
    (2_146_033_979, "infinity"),
    (-622_191_234, "infinity"),
    (-2_147_472_691, "-infinity"),
    (-625_821_272, "-infinity"),
];

/// Debezium's encodings of `infinity` and `-infinity` timestamps: `Long.MAX_VALUE` /
/// `Long.MIN_VALUE` (micro- and nanosecond modes, `POSITIVE_INFINITY_INSTANT`…) and
/// `PGStatement.DATE_POSITIVE_INFINITY` / `DATE_NEGATIVE_INFINITY` (milliseconds:
/// `time.precision.mode = connect`, `timestamp(0-3)` in `adaptive`).
fn timestamp_infinity(ticks: i64, unit: Unit) -> Option<&'static str> {
    match (ticks, unit) {
        (i64::MAX, _) | (9_223_372_036_825_200_000, Unit::Millis) => Some("infinity"),
        (i64::MIN, _) | (-9_223_372_036_832_400_000, Unit::Millis) => Some("-infinity"),
        _ => None,
    }
}

/// The conversion a field needs, from its Connect schema.
pub fn from_schema(schema: &ConnectSchema) -> Option<Conversion> {
    let conversion = match schema.name.as_deref() {
        Some("io.debezium.time.Date" | "org.apache.kafka.connect.data.Date") => Conversion::Date,
        Some("io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp") => {
            Conversion::Timestamp(Unit::Millis)
        }
        Some("io.debezium.time.MicroTimestamp") => Conversion::Timestamp(Unit::Micros),
        Some("io.debezium.time.NanoTimestamp") => Conversion::Timestamp(Unit::Nanos),
        Some("io.debezium.time.Time" | "org.apache.kafka.connect.data.Time") => {
            Conversion::Time(Unit::Millis)
        }
        Some("io.debezium.time.MicroTime") => Conversion::Time(Unit::Micros),
        Some("io.debezium.time.NanoTime") => Conversion::Time(Unit::Nanos),
        Some("org.apache.kafka.connect.data.Decimal") => Conversion::Decimal {
            scale: u32::try_from(schema.int_parameter("scale").unwrap_or(0)).unwrap_or(0),
        },
        Some("io.debezium.data.VariableScaleDecimal") => Conversion::VariableDecimal,
        Some("io.debezium.data.Json") => Conversion::Json,
        Some("io.debezium.time.MicroDuration") => Conversion::MicroDuration,
        Some("io.debezium.data.geometry.Point") => Conversion::Point,
        Some("io.debezium.time.ZonedTimestamp") => Conversion::ZonedTimestamp,
        None if schema.kind == "bytes" => Conversion::Bytes(BinaryHandlingMode::Bytes),
        _ => return None,
    };
    Some(conversion)
}

/// A column of a target table, as the sink reads it from the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetColumn {
    /// Its name.
    pub name: String,
    /// `pg_type.typname` (`date`, `numeric`, `_int4` for arrays, …).
    pub type_name: String,
    /// The declared precision of `timestamp(p)`/`time(p)`, the declared scale of
    /// `numeric(p, s)`; `None` when unconstrained.
    pub modifier: Option<i32>,
}

/// The conversion a column needs when the events carry no schemas: from its type and the
/// options the events were written with.
pub fn from_column(column: &TargetColumn, encoding: &EventEncoding) -> Option<Conversion> {
    let precision = column.modifier.and_then(|m| u32::try_from(m).ok());
    let unit = |unit| match unit {
        TemporalUnit::Millis => Unit::Millis,
        TemporalUnit::Micros => Unit::Micros,
    };
    let precise = encoding.decimal == DecimalHandlingMode::Precise;
    let conversion = match column.type_name.as_str() {
        "date" => Conversion::Date,
        "timestamp" => Conversion::Timestamp(unit(encoding.time.timestamp_unit(precision))),
        "time" => Conversion::Time(unit(encoding.time.time_unit(precision))),
        "numeric" if precise => match column.modifier {
            Some(scale) => Conversion::Decimal {
                scale: u32::try_from(scale).unwrap_or(0),
            },
            None => Conversion::VariableDecimal,
        },
        // `money.fraction.digits` defaults to 2.
        "money" if precise => Conversion::Decimal { scale: 2 },
        "numeric" if encoding.decimal == DecimalHandlingMode::String => Conversion::DecimalText,
        "bytea" => Conversion::Bytes(encoding.binary),
        "json" | "jsonb" => Conversion::Json,
        "interval" => Conversion::MicroDuration,
        "point" => Conversion::Point,
        "timestamptz" => Conversion::ZonedTimestamp,
        "bit" => Conversion::Bits { length: precision },
        "varbit" => Conversion::Bits { length: None },
        "box" => Conversion::Box,
        "hstore" => Conversion::Hstore,
        _ => return None,
    };
    Some(conversion)
}

/// `value` in PostgreSQL's input form; `Ok(None)`: it is left as it is (not the encoding the
/// conversion reads, e.g. a date that is already a string).
///
/// # Errors
///
/// The value has the conversion's kind but is not a valid encoding (bad base64, …).
pub fn convert(conversion: Conversion, value: &Value) -> Result<Option<Value>, String> {
    let text = match (conversion, value) {
        (Conversion::Date, Value::Number(n)) => {
            let days = n.as_i64().ok_or("a date that is not an integer")?;
            if let Some((_, infinity)) = DATE_INFINITY.iter().find(|(d, _)| *d == days) {
                return Ok(Some(Value::String((*infinity).to_owned())));
            }
            // PostgreSQL's dates are 32-bit day numbers; far beyond, the calendar arithmetic
            // would overflow.
            if i32::try_from(days).is_err() {
                return Err("a date out of PostgreSQL's range".into());
            }
            let mut out = String::with_capacity(14);
            push_date(days, &mut out);
            out
        }
        (Conversion::Timestamp(unit), Value::Number(n)) => {
            let ticks = n.as_i64().ok_or("a timestamp that is not an integer")?;
            if let Some(infinity) = timestamp_infinity(ticks, unit) {
                return Ok(Some(Value::String(infinity.to_owned())));
            }
            let ticks = i128::from(ticks);
            let per_day = 86_400 * unit.per_second();
            let days = i64::try_from(ticks.div_euclid(per_day)).map_err(|_| "out of range")?;
            let mut out = String::with_capacity(32);
            push_date(days, &mut out);
            out.push(' ');
            push_time(ticks.rem_euclid(per_day), unit, &mut out);
            if let Some(era) = out.find(" BC") {
                // `YYYY-MM-DD BC HH:MM:SS`: the era goes last.
                out.replace_range(era..era + 3, "");
                out.push_str(" BC");
            }
            out
        }
        (Conversion::Time(unit), Value::Number(n)) => {
            let ticks = i128::from(n.as_i64().ok_or("a time that is not an integer")?);
            let mut out = String::with_capacity(16);
            push_time(ticks, unit, &mut out);
            out
        }
        (Conversion::Decimal { .. } | Conversion::DecimalText, Value::String(text))
            if decimal_special(text).is_some() =>
        {
            decimal_special(text).unwrap_or_default().to_owned()
        }
        (Conversion::Decimal { scale }, Value::String(text)) => {
            if is_decimal_text(text) {
                return Ok(None);
            }
            decimal_text(&base64(text)?, checked_scale(u64::from(scale))?)
        }
        (Conversion::VariableDecimal, Value::Object(object)) => {
            let scale = object
                .get("scale")
                .and_then(Value::as_u64)
                .ok_or("a variable-scale decimal without a scale")?;
            let value = object
                .get("value")
                .and_then(Value::as_str)
                .ok_or("a variable-scale decimal without a value")?;
            decimal_text(&base64(value)?, checked_scale(scale)?)
        }
        (Conversion::Bytes(mode), Value::String(text)) => {
            let bytes = match mode {
                BinaryHandlingMode::Bytes | BinaryHandlingMode::Base64 => base64(text)?,
                BinaryHandlingMode::Base64UrlSafe => {
                    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
                    GeneralPurpose::new(
                        &base64::alphabet::URL_SAFE,
                        GeneralPurposeConfig::new()
                            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
                    )
                    .decode(text)
                    .map_err(|e| format!("not URL-safe base64: {e}"))?
                }
                BinaryHandlingMode::Hex => hex_bytes(text).ok_or("not hex")?,
            };
            let mut out = String::with_capacity(2 + bytes.len() * 2);
            out.push_str("\\x");
            for byte in bytes {
                out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
                out.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
            }
            out
        }
        (Conversion::Json, Value::String(text)) => {
            return Ok(serde_json::from_str(text).ok());
        }
        (Conversion::MicroDuration, Value::Number(n)) => {
            format!("{n} microseconds")
        }
        (Conversion::Bits { length }, Value::Bool(bit)) => {
            let bit = if *bit { "1" } else { "0" };
            let width = length.unwrap_or(1) as usize;
            format!("{bit:0>width$}")
        }
        (Conversion::Bits { length }, Value::String(text)) => {
            let bytes = base64(text)?;
            let mut bits: String = bytes.iter().rev().map(|b| format!("{b:08b}")).collect();
            let significant = bits.find('1').unwrap_or(bits.len());
            bits.drain(..significant);
            match length {
                Some(width) => format!("{bits:0>width$}", width = width as usize),
                None => bits,
            }
        }
        (Conversion::Hstore, Value::String(text)) if text.starts_with('{') => {
            let map: Map<String, Value> =
                serde_json::from_str(text).map_err(|e| format!("not an hstore's JSON: {e}"))?;
            hstore_text(&map)
        }
        (Conversion::Hstore, Value::Object(map)) => hstore_text(map),
        (Conversion::Box, Value::Object(object)) => {
            let wkb = object
                .get("wkb")
                .and_then(Value::as_str)
                .ok_or("a geometry without wkb")?;
            let (x1, y1, x2, y2) =
                wkb_bounds(&base64(wkb)?).ok_or("a wkb that is not a polygon")?;
            format!("({x2},{y2}),({x1},{y1})")
        }
        (Conversion::ZonedTimestamp, Value::String(text)) => match zoned_timestamp(text) {
            Some(text) => text,
            None => return Ok(None),
        },
        (Conversion::Point, Value::Object(object)) => {
            let coordinate = |name| {
                object
                    .get(name)
                    .and_then(Value::as_f64)
                    .ok_or("a point without x and y")
            };
            format!("({},{})", coordinate("x")?, coordinate("y")?)
        }
        _ => return Ok(None),
    };
    Ok(Some(Value::String(text)))
}

/// A column's conversion: of its value, or of each element of its array (nested arrays
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnConversion {
    /// The value's (or each element's) conversion.
    pub conversion: Conversion,
    /// Whether the column is an array whose elements are converted.
    pub elements: bool,
}

impl ColumnConversion {
    /// The conversion of a field with Connect schema `schema` (an array's by its items).
    pub fn from_schema(schema: &ConnectSchema) -> Option<Self> {
        if schema.kind == "array" {
            let conversion = from_schema(schema.items.as_deref()?)?;
            return Some(Self {
                conversion,
                elements: true,
            });
        }
        from_schema(schema).map(|conversion| Self {
            conversion,
            elements: false,
        })
    }

    /// The conversion of a target column without schemas (an array's by its element type,
    /// `_date` → `date`).
    pub fn from_column(column: &TargetColumn, encoding: &EventEncoding) -> Option<Self> {
        if let Some(element) = column.type_name.strip_prefix('_') {
            let element = TargetColumn {
                name: String::new(),
                type_name: element.to_owned(),
                modifier: column.modifier,
            };
            return from_column(&element, encoding).map(|conversion| Self {
                conversion,
                elements: true,
            });
        }
        from_column(column, encoding).map(|conversion| Self {
            conversion,
            elements: false,
        })
    }

    /// `value` converted; `Ok(false)`: left as it is.
    fn apply(self, value: &mut Value) -> Result<bool, String> {
        if self.elements {
            let Value::Array(items) = value else {
                return Ok(false);
            };
            let mut changed = false;
            for item in items {
                let nested = Self {
                    conversion: self.conversion,
                    elements: item.is_array(),
                };
                changed |= nested.apply(item)?;
            }
            return Ok(changed);
        }
        match convert(self.conversion, value)? {
            Some(converted) => {
                *value = converted;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The forms of Debezium's `unavailable.value.placeholder` (an unchanged TOASTed value the
/// server did not send), as `UnchangedToastedPlaceholder` writes them for each column type:
/// the string (text, `json`, `xml`, …, and `bytea` with `binary.handling.mode = hex`); its
/// bytes as `bytea` in base64 (`bytes`, `base64`), base64-url-safe or hex; a one-element array
/// of those (text and `bytea` arrays); its bytes as numbers (`int2[]`, `int4[]`, `int8[]`);
/// a map of the string to itself (`hstore`, as an object or as JSON text).
#[derive(Debug, Clone)]
pub struct Placeholders {
    /// Each string form, and the same as JSON text (escaped, without quotes).
    strings: Vec<(String, String)>,
    /// The bytes as numbers (Java's signed bytes).
    numbers: Vec<i64>,
    /// The numbers as JSON text (`95,95,100,…`).
    numbers_text: String,
    /// The string form.
    text: String,
}

impl Placeholders {
    /// The forms of `placeholder` (Debezium's syntax: `hex:` and hex digits for raw bytes).
    pub fn new(placeholder: &str) -> Self {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
        let bytes = placeholder
            .strip_prefix("hex:")
            .and_then(hex_bytes)
            .unwrap_or_else(|| placeholder.as_bytes().to_vec());
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut forms = vec![
            text.clone(),
            STANDARD.encode(&bytes),
            URL_SAFE.encode(&bytes),
            URL_SAFE_NO_PAD.encode(&bytes),
            hex.to_uppercase(),
            hex,
        ];
        // The hstore map as JSON text (`hstore.handling.mode = json`).
        forms.push(serde_json::json!({ text.clone(): text.clone() }).to_string());
        forms.dedup();
        let strings = forms
            .into_iter()
            .filter(|f| !f.is_empty())
            .map(|f| {
                let json = serde_json::to_string(&f).unwrap_or_default();
                let json = json[1..json.len().saturating_sub(1).max(1)].to_owned();
                (f, json)
            })
            .collect();
        let numbers: Vec<i64> = bytes.iter().map(|b| i64::from(*b as i8)).collect();
        let numbers_text = numbers
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Self {
            strings,
            numbers,
            numbers_text,
            text,
        }
    }

    /// Whether the row's JSON text may hold a placeholder (a quick test before parsing it).
    pub fn may_hold(&self, row: &str) -> bool {
        self.strings
            .iter()
            .any(|(_, json)| row.contains(json.as_str()))
            || (!self.numbers_text.is_empty() && row.contains(&self.numbers_text))
    }

    /// Whether `value` is a form of the placeholder.
    pub fn holds(&self, value: &Value) -> bool {
        match value {
            Value::String(text) => self.strings.iter().any(|(form, _)| form == text),
            Value::Array(items) if items.len() == 1 && items[0].is_string() => {
                self.holds(&items[0])
            }
            Value::Array(items)
                if !self.numbers.is_empty() && items.len() == self.numbers.len() =>
            {
                items
                    .iter()
                    .zip(&self.numbers)
                    .all(|(item, n)| item.as_i64() == Some(*n))
            }
            Value::Object(map) if map.len() == 1 => {
                map.get(&self.text).and_then(Value::as_str) == Some(self.text.as_str())
            }
            _ => false,
        }
    }
}

impl Default for Placeholders {
    fn default() -> Self {
        Self::new(DEFAULT_UNAVAILABLE_VALUE_PLACEHOLDER)
    }
}

/// Debezium's default `unavailable.value.placeholder`.
pub const DEFAULT_UNAVAILABLE_VALUE_PLACEHOLDER: &str = "__debezium_unavailable_value";

fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A row ready to apply: its JSON object in PostgreSQL's input forms, without the columns
/// whose values are unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRow {
    /// The JSON object's text.
    pub json: String,
    /// Its fields (the columns it sets), sorted; shared by the rows with the same fields
    /// ([`ColumnSets`]).
    pub columns: Arc<[String]>,
    /// The columns the change did not carry a value for (unchanged TOASTed values: a
    /// placeholder, or listed in sluice's `unavailable_columns`), sorted.
    pub unavailable: Vec<String>,
}

/// The column sets of the rows prepared so far, so that rows with the same fields share one
/// list of names instead of a `Vec<String>` each.
#[derive(Debug, Default)]
pub struct ColumnSets {
    known: Vec<Arc<[String]>>,
}

impl ColumnSets {
    /// A handful per table at most (rows of one source table, a few versions of it).
    const MAX: usize = 16;

    /// The shared set of `names` (sorted, no duplicates).
    fn get(&mut self, names: &[&str]) -> Arc<[String]> {
        if let Some(known) = self.known.iter().find(|known| {
            known.len() == names.len() && known.iter().zip(names).all(|(a, b)| a == b)
        }) {
            return Arc::clone(known);
        }
        let set: Arc<[String]> = names.iter().map(|n| (*n).to_owned()).collect();
        if self.known.len() >= Self::MAX {
            self.known.clear();
        }
        self.known.push(Arc::clone(&set));
        set
    }
}

/// A field name as it is in the row's text when it has no escapes (borrowed), unescaped
/// otherwise.
struct FieldName<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for FieldName<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> serde::de::Visitor<'de> for Name {
            type Value = FieldName<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The fields of a JSON object's text in order, their values as text: read without building a
/// `serde_json::Map` (a node, a `String` and a `Value` per field).
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8).min(64));
                while let Some((name, value)) = map.next_entry::<FieldName<'de>, &'de RawValue>()? {
                    fields.push((name.0, value));
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// The fields of `row` (a JSON object's text), in order, with their values' text.
///
/// # Errors
///
/// The row is not a JSON object.
pub fn fields(row: &str) -> Result<Vec<(Cow<'_, str>, &RawValue)>, String> {
    serde_json::from_str::<Fields<'_>>(row)
        .map(|f| f.0)
        .map_err(|e| format!("the row is not a JSON object: {e}"))
}

/// Converts the fields of `row` (a JSON object's text) named in `plan` and leaves out the
/// fields holding a placeholder (`placeholders`; `None`: a plain row, never checked) or named
/// in `listed` (sluice's `unavailable_columns`).
///
/// # Errors
///
/// A field whose value is not a valid encoding, named.
pub fn prepare_row(
    row: &str,
    plan: &[(String, ColumnConversion)],
    placeholders: Option<&Placeholders>,
    listed: &[String],
) -> Result<PreparedRow, String> {
    prepare_row_in(row, plan, placeholders, listed, &mut ColumnSets::default())
}

/// [`prepare_row`], the row's column set shared through `sets`.
///
/// The row is read field by field ([`fields`]): a field without a conversion is copied as it
/// is, a converted one is parsed alone. A name that comes twice keeps its last value, as
/// `serde_json::Map` and `jsonb` do.
///
/// # Errors
///
/// A field whose value is not a valid encoding, named.
pub fn prepare_row_in(
    row: &str,
    plan: &[(String, ColumnConversion)],
    placeholders: Option<&Placeholders>,
    listed: &[String],
    sets: &mut ColumnSets,
) -> Result<PreparedRow, String> {
    let fields = fields(row)?;
    let check = placeholders.filter(|p| p.may_hold(row));
    let mut unavailable: Vec<String> = listed.to_vec();
    if let Some(placeholders) = check {
        for (name, value) in &fields {
            if !placeholders.may_hold(value.get()) || unavailable.iter().any(|u| u == name) {
                continue;
            }
            let value: Value =
                serde_json::from_str(value.get()).map_err(|e| format!("column {name:?}: {e}"))?;
            if placeholders.holds(&value) {
                unavailable.push(name.clone().into_owned());
            }
        }
    }
    // The fields written: the last of each name, none unavailable.
    let mut order: Vec<(&str, usize)> = fields
        .iter()
        .enumerate()
        .map(|(index, (name, _))| (name.as_ref(), index))
        .collect();
    order.sort_unstable();
    let mut kept = vec![false; fields.len()];
    let mut names: Vec<&str> = Vec::with_capacity(order.len());
    for (at, (name, index)) in order.iter().enumerate() {
        let last = order.get(at + 1).is_none_or(|(next, _)| next != name);
        if last && !unavailable.iter().any(|u| u == name) {
            kept[*index] = true;
            names.push(name);
        }
    }
    let duplicates_or_gaps = names.len() != fields.len();
    let conversion_of = |name: &str| {
        if plan.len() <= 8 {
            plan.iter().find(|(c, _)| c == name).map(|(_, c)| *c)
        } else {
            plan.binary_search_by(|(c, _)| c.as_str().cmp(name))
                .ok()
                .map(|at| plan[at].1)
        }
    };
    let json = if !duplicates_or_gaps && fields.iter().all(|(n, _)| conversion_of(n).is_none()) {
        // Nothing to change.
        row.to_owned()
    } else {
        let mut json = String::with_capacity(row.len() + 32);
        json.push('{');
        for ((name, value), _) in fields.iter().zip(&kept).filter(|(_, kept)| **kept) {
            if json.len() > 1 {
                json.push(',');
            }
            match name {
                // A name read without unescaping has nothing to escape.
                Cow::Borrowed(name) => {
                    json.push('"');
                    json.push_str(name);
                    json.push('"');
                }
                Cow::Owned(name) => json.push_str(&Value::from(name.as_str()).to_string()),
            }
            json.push(':');
            match conversion_of(name) {
                Some(conversion) => {
                    let mut parsed: Value = serde_json::from_str(value.get())
                        .map_err(|e| format!("column {name:?}: {e}"))?;
                    conversion.apply(&mut parsed).map_err(|e| {
                        format!(
                            "column {name:?}: {e} ({:?}): {parsed}",
                            conversion.conversion
                        )
                    })?;
                    json.push_str(&parsed.to_string());
                }
                None => json.push_str(value.get()),
            }
        }
        json.push('}');
        json
    };
    unavailable.sort();
    Ok(PreparedRow {
        json,
        columns: sets.get(&names),
        unavailable,
    })
}

/// `later` over `earlier` (two upserts of one key in a batch, in this order): the later
/// values win; the columns the later one does not carry keep the earlier one's values.
///
/// # Errors
///
/// A row that is not a JSON object (never: both were prepared).
pub fn merge_rows(earlier: &PreparedRow, later: &PreparedRow) -> Result<PreparedRow, String> {
    let unavailable = |columns: &[String]| {
        let mut unavailable: Vec<String> = earlier
            .unavailable
            .iter()
            .chain(&later.unavailable)
            .filter(|c| !columns.contains(*c))
            .cloned()
            .collect();
        unavailable.sort();
        unavailable.dedup();
        unavailable
    };
    if earlier.columns.iter().all(|c| later.columns.contains(c)) {
        return Ok(PreparedRow {
            json: later.json.clone(),
            columns: Arc::clone(&later.columns),
            unavailable: unavailable(&later.columns),
        });
    }
    let mut object: Map<String, Value> =
        serde_json::from_str(&earlier.json).map_err(|e| e.to_string())?;
    let newer: Map<String, Value> = serde_json::from_str(&later.json).map_err(|e| e.to_string())?;
    object.extend(newer);
    let columns: Arc<[String]> = object.keys().cloned().collect();
    let unavailable = unavailable(&columns);
    Ok(PreparedRow {
        json: serde_json::to_string(&object).map_err(|e| e.to_string())?,
        columns,
        unavailable,
    })
}

/// `hstore`'s input of a map of strings (or nulls).
fn hstore_text(map: &Map<String, Value>) -> String {
    let quote = |text: &str| format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
    let pairs: Vec<String> = map
        .iter()
        .map(|(key, value)| match value {
            Value::Null => format!("{}=>NULL", quote(key)),
            Value::String(text) => format!("{}=>{}", quote(key), quote(text)),
            other => format!("{}=>{}", quote(key), quote(&other.to_string())),
        })
        .collect();
    pairs.join(", ")
}

/// The bounding box `(min x, min y, max x, max y)` of a WKB polygon's rings.
fn wkb_bounds(wkb: &[u8]) -> Option<(f64, f64, f64, f64)> {
    let little = *wkb.first()? == 1;
    let u32_at = |at: usize| -> Option<u32> {
        let bytes: [u8; 4] = wkb.get(at..at + 4)?.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    };
    let f64_at = |at: usize| -> Option<f64> {
        let bytes: [u8; 8] = wkb.get(at..at + 8)?.try_into().ok()?;
        Some(if little {
            f64::from_le_bytes(bytes)
        } else {
            f64::from_be_bytes(bytes)
        })
    };
    if u32_at(1)? != 3 {
        return None;
    }
    let mut at = 9;
    let mut bounds = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    for _ in 0..u32_at(5)? {
        let points = u32_at(at)?;
        at += 4;
        for _ in 0..points {
            let (x, y) = (f64_at(at)?, f64_at(at + 8)?);
            at += 16;
            bounds = (
                bounds.0.min(x),
                bounds.1.min(y),
                bounds.2.max(x),
                bounds.3.max(y),
            );
        }
    }
    (bounds.0 <= bounds.2).then_some(bounds)
}

/// PostgreSQL's text of Debezium's special decimals (`decimal.handling.mode = string`).
fn decimal_special(text: &str) -> Option<&'static str> {
    match text {
        "POSITIVE_INFINITY" | "Infinity" => Some("Infinity"),
        "NEGATIVE_INFINITY" | "-Infinity" => Some("-Infinity"),
        "NAN" | "NaN" => Some("NaN"),
        _ => None,
    }
}

/// `text` (ISO 8601, `[+-]YYYYYY-MM-DDTHH:MM:SS…`) in PostgreSQL's form when its year has a
/// sign (ISO's year 0 is 1 BC, -1 is 2 BC); `None` for the others, which PostgreSQL reads.
fn zoned_timestamp(text: &str) -> Option<String> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' if text != "-infinity" => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        b'0'..=b'9' if text.starts_with("0000-") => (false, text),
        _ => return None,
    };
    let (year, rest) = rest.split_once('-')?;
    let year: i64 = year.parse().ok()?;
    let year = if negative { -year } else { year };
    let rest = rest.replacen('T', " ", 1);
    Some(if year <= 0 {
        format!("{:04}-{rest} BC", 1 - year)
    } else {
        format!("{year:04}-{rest}")
    })
}

/// The largest scale PostgreSQL's `numeric` has (its display scale is 14 bits).
const MAX_SCALE: u64 = 16_383;

/// A decimal's scale, which comes from the record: the number of digits written after the
/// point, so one beyond [`MAX_SCALE`] is refused rather than allocated.
fn checked_scale(scale: u64) -> Result<u32, String> {
    u32::try_from(scale)
        .ok()
        .filter(|s| u64::from(*s) <= MAX_SCALE)
        .ok_or_else(|| format!("a decimal scale of {scale}: PostgreSQL's largest is {MAX_SCALE}"))
}

fn base64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))
}

/// Whether `text` is a decimal number's text (`decimal.handling.mode = string`), rather than
/// base64: it has a point or a sign (characters base64 never has), or is `NaN`/`Infinity`.
/// A string of digits only is read as base64 (Debezium's default), which is ambiguous: events
/// with schemas say. Letters (`E518` is base64 of 1285500) prove nothing.
fn is_decimal_text(text: &str) -> bool {
    matches!(text, "NaN" | "Infinity" | "-Infinity")
        || (text.contains(['.', '-'])
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-')))
}

/// Appends `YYYY-MM-DD` (with ` BC` for years before 1).
fn push_date(days: i64, out: &mut String) {
    let (year, month, day) = civil_from_days(days);
    let (shown, bc) = if year <= 0 {
        (1 - year, true)
    } else {
        (year, false)
    };
    out.push_str(&format!("{shown:04}-{month:02}-{day:02}"));
    if bc {
        out.push_str(" BC");
    }
}

/// Appends `HH:MM:SS[.fraction]` of `ticks` since midnight.
fn push_time(ticks: i128, unit: Unit, out: &mut String) {
    let per_second = unit.per_second();
    let seconds = ticks.div_euclid(per_second);
    let fraction = ticks.rem_euclid(per_second);
    out.push_str(&format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    ));
    if fraction != 0 {
        let width = match unit {
            Unit::Millis => 3,
            Unit::Micros => 6,
            Unit::Nanos => 9,
        };
        out.push_str(&format!(".{fraction:0width$}"));
    }
}

/// The decimal text of a big-endian two's-complement unscaled value and its scale.
fn decimal_text(bytes: &[u8], scale: u32) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude, big-endian: the two's complement negated for negative values.
    let mut magnitude: Vec<u8> = bytes.to_vec();
    if negative {
        for byte in &mut magnitude {
            *byte = !*byte;
        }
        for byte in magnitude.iter_mut().rev() {
            let (sum, carry) = byte.overflowing_add(1);
            *byte = sum;
            if !carry {
                break;
            }
        }
    }
    // Base 256 to base 10 by repeated division (Connect decimals have no size limit; no
    // big-integer crate is needed for this one conversion).
    let mut digits = Vec::new();
    let mut number: Vec<u8> = magnitude.into_iter().skip_while(|b| *b == 0).collect();
    while !number.is_empty() {
        let mut remainder = 0u32;
        let mut quotient = Vec::with_capacity(number.len());
        for byte in &number {
            let current = remainder * 256 + u32::from(*byte);
            let digit = (current / 10) as u8;
            remainder = current % 10;
            if !quotient.is_empty() || digit != 0 {
                quotient.push(digit);
            }
        }
        digits.push(b'0' + remainder as u8);
        number = quotient;
    }
    let scale = scale as usize;
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let mut out = String::with_capacity(digits.len() + 2);
    if negative {
        out.push('-');
    }
    let point = digits.len() - scale;
    out.push_str(std::str::from_utf8(&digits[..point]).unwrap_or("0"));
    if scale > 0 {
        out.push('.');
        out.push_str(std::str::from_utf8(&digits[point..]).unwrap_or("0"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn converted(conversion: Conversion, value: Value) -> Value {
        convert(conversion, &value).unwrap().unwrap_or(value)
    }

    #[test]
    fn debezium_encodings_become_postgres_input() {
        assert_eq!(converted(Conversion::Date, json!(0)), json!("1970-01-01"));
        assert_eq!(
            converted(Conversion::Date, json!(20417)),
            json!("2025-11-25")
        );
        assert_eq!(
            converted(Conversion::Date, json!(-719_528)),
            json!("0001-01-01 BC"),
            "year 0 is 1 BC"
        );
        assert_eq!(
            converted(
                Conversion::Timestamp(Unit::Micros),
                json!(1_764_064_800_123_456_i64)
            ),
            json!("2025-11-25 10:00:00.123456")
        );
        assert_eq!(
            converted(Conversion::Timestamp(Unit::Millis), json!(-1)),
            json!("1969-12-31 23:59:59.999")
        );
        assert_eq!(
            converted(Conversion::Time(Unit::Micros), json!(45_296_000_001_i64)),
            json!("12:34:56.000001")
        );
        assert_eq!(
            converted(Conversion::Time(Unit::Millis), json!(86_400_000)),
            json!("24:00:00")
        );
        // 1234.56 and -1234.56 as Connect's Decimal (unscaled 123456, big-endian).
        assert_eq!(
            converted(Conversion::Decimal { scale: 2 }, json!("AeJA")),
            json!("1234.56")
        );
        assert_eq!(
            converted(Conversion::Decimal { scale: 2 }, json!("/h3A")),
            json!("-1234.56")
        );
        assert_eq!(
            converted(Conversion::Decimal { scale: 3 }, json!("AQ==")),
            json!("0.001")
        );
        assert_eq!(
            converted(Conversion::Decimal { scale: 0 }, json!("AA==")),
            json!("0")
        );
        // Wider than 128 bits: 2^128 = 340282366920938463463374607431768211456.
        let wide = base64::engine::general_purpose::STANDARD.encode({
            let mut b = vec![1u8];
            b.extend([0u8; 16]);
            b
        });
        assert_eq!(
            converted(Conversion::Decimal { scale: 6 }, json!(wide)),
            json!("340282366920938463463374607431768.211456")
        );
        // Base64 that looks like an exponent is base64 (1285500).
        assert_eq!(
            converted(Conversion::Decimal { scale: 2 }, json!("E518")),
            json!("12855.00")
        );
        // decimal.handling.mode = string passes.
        assert_eq!(
            converted(Conversion::Decimal { scale: 2 }, json!("-12.50")),
            json!("-12.50")
        );
        assert_eq!(
            converted(
                Conversion::VariableDecimal,
                json!({"scale": 1, "value": "AeJA"})
            ),
            json!("12345.6")
        );
        assert_eq!(
            converted(Conversion::Bytes(BinaryHandlingMode::Bytes), json!("AQL/")),
            json!("\\x0102ff")
        );
        assert_eq!(
            converted(Conversion::Json, json!(r#"{"a":[1,2]}"#)),
            json!({"a": [1, 2]})
        );
        assert_eq!(
            converted(Conversion::MicroDuration, json!(90_000_000)),
            json!("90000000 microseconds")
        );
        assert_eq!(
            converted(
                Conversion::Point,
                json!({"x": 1.5, "y": -2.0, "wkb": "", "srid": null})
            ),
            json!("(1.5,-2)")
        );
        // Values that are already PostgreSQL's text are left alone.
        assert_eq!(
            converted(Conversion::Date, json!("2025-11-25")),
            json!("2025-11-25")
        );
        assert!(convert(Conversion::Bytes(BinaryHandlingMode::Bytes), &json!("%%%")).is_err());
    }

    #[test]
    fn conversions_come_from_schemas_or_column_types() {
        let schema: ConnectSchema = serde_json::from_value(json!({
            "type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "3"}
        }))
        .unwrap();
        assert_eq!(from_schema(&schema), Some(Conversion::Decimal { scale: 3 }));
        let text: ConnectSchema =
            serde_json::from_value(json!({"type": "string", "optional": true})).unwrap();
        assert_eq!(from_schema(&text), None);
        let column = |type_name: &str, modifier| TargetColumn {
            name: "c".into(),
            type_name: type_name.into(),
            modifier,
        };
        assert_eq!(
            from_column(&column("timestamp", Some(3)), &EventEncoding::default()),
            Some(Conversion::Timestamp(Unit::Millis))
        );
        assert_eq!(
            from_column(&column("timestamp", None), &EventEncoding::default()),
            Some(Conversion::Timestamp(Unit::Micros))
        );
        assert_eq!(
            from_column(&column("numeric", Some(2)), &EventEncoding::default()),
            Some(Conversion::Decimal { scale: 2 })
        );
        assert_eq!(
            from_column(&column("numeric", None), &EventEncoding::default()),
            Some(Conversion::VariableDecimal)
        );
        assert_eq!(
            from_column(&column("timestamptz", None), &EventEncoding::default()),
            Some(Conversion::ZonedTimestamp)
        );
        assert_eq!(
            ColumnConversion::from_column(&column("_numeric", Some(2)), &EventEncoding::default()),
            Some(ColumnConversion {
                conversion: Conversion::Decimal { scale: 2 },
                elements: true
            })
        );
        assert_eq!(
            from_column(&column("text", None), &EventEncoding::default()),
            None
        );
        // Other options: `connect` is milliseconds whatever the precision; `hex` bytes;
        // `string` decimals as they are.
        let other = EventEncoding {
            decimal: DecimalHandlingMode::String,
            time: TimePrecisionMode::Connect,
            binary: BinaryHandlingMode::Hex,
        };
        assert_eq!(
            from_column(&column("timestamp", None), &other),
            Some(Conversion::Timestamp(Unit::Millis))
        );
        assert_eq!(
            from_column(&column("numeric", Some(2)), &other),
            Some(Conversion::DecimalText)
        );
        let hex = from_column(&column("bytea", None), &other).unwrap();
        assert_eq!(converted(hex, json!("0a0bff")), json!("\\x0a0bff"));
        assert_eq!(
            converted(Conversion::DecimalText, json!("POSITIVE_INFINITY")),
            json!("Infinity")
        );
        assert_eq!(
            converted(Conversion::DecimalText, json!("NAN")),
            json!("NaN")
        );
        // Bits: B'101' is 5, B'1100' 12, B'000' no bytes; bit(1) a boolean.
        let bits = |length| Conversion::Bits { length };
        assert_eq!(converted(bits(Some(3)), json!("BQ==")), json!("101"));
        assert_eq!(converted(bits(None), json!("DA==")), json!("1100"));
        assert_eq!(converted(bits(Some(3)), json!("")), json!("000"));
        assert_eq!(
            converted(bits(Some(10)), json!("AwI=")),
            json!("1000000011")
        );
        assert_eq!(converted(bits(Some(1)), json!(true)), json!("1"));
        assert_eq!(
            converted(
                Conversion::Hstore,
                json!(r#"{"a":"1","b":null,"q\"":"\\"}"#)
            ),
            json!(r#""a"=>"1", "b"=>NULL, "q\""=>"\\""#)
        );
        // A box as Debezium's geometry: ((0,0),(1,1)) from the golden capture.
        let wkb = "AQMAAAABAAAABQAAAAAAAAAAAPA/AAAAAAAA8D8AAAAAAADwPwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA8D8AAAAAAADwPwAAAAAAAPA/";
        assert_eq!(
            converted(Conversion::Box, json!({"wkb": wkb, "srid": null})),
            json!("(1,1),(0,0)")
        );
        let url = Conversion::Bytes(BinaryHandlingMode::Base64UrlSafe);
        assert_eq!(converted(url, json!("_-8")), json!("\\xffef"));
    }

    #[test]
    fn rows_are_converted_by_their_plan() {
        let plain = |conversion| ColumnConversion {
            conversion,
            elements: false,
        };
        let plan = vec![
            ("d".to_owned(), plain(Conversion::Date)),
            (
                "b".to_owned(),
                plain(Conversion::Bytes(BinaryHandlingMode::Bytes)),
            ),
            (
                "ds".to_owned(),
                ColumnConversion {
                    conversion: Conversion::Date,
                    elements: true,
                },
            ),
        ];
        let row = prepare_row(
            r#"{"id":1,"d":1,"b":null,"ds":[[0,null],[2146033979,1]]}"#,
            &plan,
            None,
            &[],
        )
        .unwrap();
        let json: Value = serde_json::from_str(&row.json).unwrap();
        assert_eq!(
            json,
            json!({"id": 1, "d": "1970-01-02", "b": null,
                   "ds": [["1970-01-01", null], ["infinity", "1970-01-02"]]})
        );
        assert_eq!(*row.columns, ["b", "d", "ds", "id"]);
        assert!(row.unavailable.is_empty());
        let same = prepare_row(r#"{"id":1}"#, &[], None, &[]).unwrap();
        assert_eq!(same.json, r#"{"id":1}"#);
        let error = prepare_row(r#"{"b":"%"}"#, &plan, None, &[]).unwrap_err();
        assert!(error.contains("column \"b\""), "{error}");
    }

    #[test]
    fn infinities_and_years_outside_1_to_9999_are_postgres_input() {
        for (days, expected) in [
            (2_146_033_979, "infinity"),
            (-622_191_234, "infinity"),
            (-2_147_472_691, "-infinity"),
            (-625_821_272, "-infinity"),
            (2_145_042_905, "5874897-12-31"),
            (-2_440_550, "4713-01-01 BC"),
        ] {
            assert_eq!(converted(Conversion::Date, json!(days)), json!(expected));
        }
        for (unit, ticks, expected) in [
            (Unit::Micros, i64::MAX, "infinity"),
            (Unit::Micros, i64::MIN, "-infinity"),
            (Unit::Millis, 9_223_372_036_825_200_000, "infinity"),
            (Unit::Millis, -9_223_372_036_832_400_000, "-infinity"),
            (Unit::Nanos, i64::MAX, "infinity"),
            (
                Unit::Micros,
                -210_863_520_000_000_000,
                "4713-01-01 00:00:00 BC",
            ),
        ] {
            assert_eq!(
                converted(Conversion::Timestamp(unit), json!(ticks)),
                json!(expected),
                "{unit:?} {ticks}"
            );
        }
        for (text, expected) in [
            (
                "-4712-01-01T00:00:00.000000Z",
                "4713-01-01 00:00:00.000000Z BC",
            ),
            (
                "+294276-12-31T23:59:59.999999Z",
                "294276-12-31 23:59:59.999999Z",
            ),
            ("0000-03-01T00:00:00Z", "0001-03-01 00:00:00Z BC"),
            ("2020-04-01T11:51:02Z", "2020-04-01T11:51:02Z"),
            ("infinity", "infinity"),
            ("-infinity", "-infinity"),
        ] {
            assert_eq!(
                converted(Conversion::ZonedTimestamp, json!(text)),
                json!(expected)
            );
        }
    }

    #[test]
    fn placeholders_are_found_in_every_form_and_left_out() {
        let p = Placeholders::default();
        let forms = [
            json!("__debezium_unavailable_value"),
            json!("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
            json!("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ"),
            json!("5f5f646562657a69756d5f756e617661696c61626c655f76616c7565"),
            json!(["__debezium_unavailable_value"]),
            json!(["X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="]),
            json!({"__debezium_unavailable_value": "__debezium_unavailable_value"}),
            json!("{\"__debezium_unavailable_value\":\"__debezium_unavailable_value\"}"),
            serde_json::to_value(b"__debezium_unavailable_value".to_vec()).unwrap(),
        ];
        for form in &forms {
            assert!(p.holds(form), "{form}");
            let row = json!({"id": 1, "big": form, "small": "s"}).to_string();
            assert!(p.may_hold(&row), "{row}");
            let prepared = prepare_row(&row, &[], Some(&p), &[]).unwrap();
            assert_eq!(prepared.json, r#"{"id":1,"small":"s"}"#, "{form}");
            assert_eq!(prepared.unavailable, ["big"]);
            assert_eq!(*prepared.columns, ["id", "small"]);
        }
        for other in [
            json!("__debezium_unavailable_valu"),
            json!(["__debezium_unavailable_value", "x"]),
            json!(null),
            json!(95),
        ] {
            assert!(!p.holds(&other), "{other}");
        }
        // A plain row is never checked; a configured placeholder, `hex:` included.
        let row = r#"{"id":1,"big":"__debezium_unavailable_value"}"#;
        assert!(
            prepare_row(row, &[], None, &[])
                .unwrap()
                .unavailable
                .is_empty()
        );
        let gone = Placeholders::new("hex:676f6e65");
        assert!(gone.holds(&json!("gone")) && gone.holds(&json!("Z29uZQ==")));
        assert!(!gone.holds(&json!("__debezium_unavailable_value")));
        // sluice's `unavailable_columns`.
        let listed = prepare_row(r#"{"id":1}"#, &[], Some(&p), &["bio".to_owned()]).unwrap();
        assert_eq!(listed.unavailable, ["bio"]);
    }

    #[test]
    fn later_changes_of_a_key_merge_over_earlier_ones() {
        let p = Placeholders::default();
        let prepare = |row: &str| prepare_row(row, &[], Some(&p), &[]).unwrap();
        let full = prepare(r#"{"id":1,"small":"a","big":"B1"}"#);
        let toast = prepare(r#"{"id":1,"small":"b","big":"__debezium_unavailable_value"}"#);
        // A placeholder over a full value keeps the full value.
        let merged = merge_rows(&full, &toast).unwrap();
        assert_eq!(merged.json, r#"{"big":"B1","id":1,"small":"b"}"#);
        assert!(merged.unavailable.is_empty());
        // A later full value wins.
        let later = prepare(r#"{"id":1,"small":"c","big":"B2"}"#);
        let merged = merge_rows(&merged, &later).unwrap();
        assert_eq!(merged.json, later.json);
        // Two placeholders: still unavailable.
        let merged = merge_rows(&toast, &toast).unwrap();
        assert_eq!(merged.unavailable, ["big"]);
        assert_eq!(*merged.columns, ["id", "small"]);
    }
}
