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

use base64::Engine as _;
use serde_json::{Map, Value};

use super::decode::ConnectSchema;
use crate::event::temporal::civil_from_days;

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
    /// Base64 → `\x` and hex (`bytea`'s input).
    Bytes,
    /// A JSON document as a string (`io.debezium.data.Json`) → the document.
    Json,
    /// Microseconds (`io.debezium.time.MicroDuration`) → an interval.
    MicroDuration,
    /// `{"x", "y", "wkb", "srid"}` (`io.debezium.data.geometry.Point`) → `(x,y)`.
    Point,
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
        None if schema.kind == "bytes" => Conversion::Bytes,
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

/// The conversion a column needs when the events carry no schemas: from its type, assuming
/// Debezium's default options.
pub fn from_column(column: &TargetColumn) -> Option<Conversion> {
    // `time.precision.mode = adaptive`: precision 0-3 as milliseconds, else microseconds.
    let unit = match column.modifier {
        Some(0..=3) => Unit::Millis,
        _ => Unit::Micros,
    };
    let conversion = match column.type_name.as_str() {
        "date" => Conversion::Date,
        "timestamp" => Conversion::Timestamp(unit),
        "time" => Conversion::Time(unit),
        "numeric" => match column.modifier {
            Some(scale) => Conversion::Decimal {
                scale: u32::try_from(scale).unwrap_or(0),
            },
            None => Conversion::VariableDecimal,
        },
        // `money.fraction.digits` defaults to 2.
        "money" => Conversion::Decimal { scale: 2 },
        "bytea" => Conversion::Bytes,
        "json" | "jsonb" => Conversion::Json,
        "interval" => Conversion::MicroDuration,
        "point" => Conversion::Point,
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
            let ticks = i128::from(n.as_i64().ok_or("a timestamp that is not an integer")?);
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
        (Conversion::Bytes, Value::String(text)) => {
            let bytes = base64(text)?;
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

/// Converts the fields of `row` (a JSON object's text) named in `plan`; the row as it is when
/// nothing needs converting.
///
/// # Errors
///
/// A field whose value is not a valid encoding, named.
pub fn convert_row(row: &str, plan: &[(String, Conversion)]) -> Result<String, String> {
    if plan.is_empty() {
        return Ok(row.to_owned());
    }
    let mut object: Map<String, Value> =
        serde_json::from_str(row).map_err(|e| format!("the row is not a JSON object: {e}"))?;
    let mut changed = false;
    for (column, conversion) in plan {
        let Some(value) = object.get_mut(column) else {
            continue;
        };
        if let Some(converted) = convert(*conversion, value)
            .map_err(|e| format!("column {column:?}: {e} ({conversion:?}): {value}"))?
        {
            *value = converted;
            changed = true;
        }
    }
    if !changed {
        return Ok(row.to_owned());
    }
    serde_json::to_string(&object).map_err(|e| e.to_string())
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
            converted(Conversion::Bytes, json!("AQL/")),
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
        assert!(convert(Conversion::Bytes, &json!("%%%")).is_err());
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
            from_column(&column("timestamp", Some(3))),
            Some(Conversion::Timestamp(Unit::Millis))
        );
        assert_eq!(
            from_column(&column("timestamp", None)),
            Some(Conversion::Timestamp(Unit::Micros))
        );
        assert_eq!(
            from_column(&column("numeric", Some(2))),
            Some(Conversion::Decimal { scale: 2 })
        );
        assert_eq!(
            from_column(&column("numeric", None)),
            Some(Conversion::VariableDecimal)
        );
        assert_eq!(from_column(&column("timestamptz", None)), None);
        assert_eq!(from_column(&column("text", None)), None);
    }

    #[test]
    fn rows_are_converted_by_their_plan() {
        let plan = vec![
            ("d".to_owned(), Conversion::Date),
            ("b".to_owned(), Conversion::Bytes),
        ];
        let row = convert_row(r#"{"id":1,"d":1,"b":null}"#, &plan).unwrap();
        let row: Value = serde_json::from_str(&row).unwrap();
        assert_eq!(row, json!({"id": 1, "d": "1970-01-02", "b": null}));
        assert_eq!(convert_row(r#"{"id":1}"#, &[]).unwrap(), r#"{"id":1}"#);
        let error = convert_row(r#"{"b":"%"}"#, &plan).unwrap_err();
        assert!(error.contains("column \"b\""), "{error}");
    }
}
