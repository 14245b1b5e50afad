//! Typed columns from Connect schemas, shared by the Iceberg sink and the files sink's typed
//! Parquet (`parquet_columns = "typed"`): a Connect field's column type (Iceberg's primitive
//! types, whose Arrow mapping both write), its JSON values as [`Cell`]s, and Arrow builders
//! filled a row at a time ([`Rows`]).
//!
//! A column's Iceberg type comes from the event's Connect schema (JsonConverter with
//! `schemas.enable`), by Debezium's logical types:
//!
//! | Connect (logical name) | Iceberg |
//! | --- | --- |
//! | `int8`, `int16`, `int32` | `int` |
//! | `int64` | `long` |
//! | `float32` / `float64` | `float` / `double` |
//! | `boolean` | `boolean` |
//! | `string`, `io.debezium.data.Json`, `io.debezium.time.ZonedTime`, … | `string` |
//! | `bytes` | `binary` |
//! | `org.apache.kafka.connect.data.Decimal` (`scale`, `connect.decimal.precision`) | `decimal(p, s)` (p ≤ 38, else `string`) |
//! | `io.debezium.time.Date`, `org.apache.kafka.connect.data.Date` | `date` |
//! | `io.debezium.time.Time`, `MicroTime`, `NanoTime`, `org.apache.kafka.connect.data.Time` | `time` (µs) |
//! | `io.debezium.time.Timestamp`, `MicroTimestamp`, `NanoTimestamp`, `org.apache.kafka.connect.data.Timestamp` | `timestamp` (µs; nanoseconds truncated) |
//! | `io.debezium.time.ZonedTimestamp` | `timestamptz` |
//! | `io.debezium.data.Uuid` | `uuid` |
//! | `struct`, `array`, `map` (and `VariableScaleDecimal`) | `string` (the value's JSON) |
//!
//! Values are converted by the column's type and the field's logical type (the unit of a
//! time); a value that does not fit its column (text in a number column, a decimal with more
//! digits than its scale) fails the record, which then follows `delivery.on_failure`.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder, Float32Builder,
    Float64Builder, Int32Builder, Int64Builder, LargeBinaryBuilder, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use base64::Engine as _;
use iceberg::spec::{PrimitiveType, Schema, Type};
use serde_json::Value;

use crate::sink::postgres::decode::ConnectSchema;

/// The Iceberg type of a Connect field.
pub fn iceberg_type(field: &ConnectSchema) -> Type {
    let primitive = match field.name.as_deref() {
        Some("org.apache.kafka.connect.data.Decimal") => {
            let scale = field.int_parameter("scale").unwrap_or(0);
            let precision = field
                .int_parameter("connect.decimal.precision")
                .unwrap_or(38);
            if (0..=38).contains(&precision) && (0..=precision).contains(&scale) {
                PrimitiveType::Decimal {
                    precision: precision as u32,
                    scale: scale as u32,
                }
            } else {
                PrimitiveType::String
            }
        }
        Some("io.debezium.time.Date" | "org.apache.kafka.connect.data.Date") => PrimitiveType::Date,
        Some(
            "io.debezium.time.Time"
            | "io.debezium.time.MicroTime"
            | "io.debezium.time.NanoTime"
            | "org.apache.kafka.connect.data.Time",
        ) => PrimitiveType::Time,
        Some(
            "io.debezium.time.Timestamp"
            | "io.debezium.time.MicroTimestamp"
            | "io.debezium.time.NanoTimestamp"
            | "org.apache.kafka.connect.data.Timestamp",
        ) => PrimitiveType::Timestamp,
        Some("io.debezium.time.ZonedTimestamp") => PrimitiveType::Timestamptz,
        Some("io.debezium.data.Uuid") => PrimitiveType::Uuid,
        _ => match field.kind.as_str() {
            "int8" | "int16" | "int32" => PrimitiveType::Int,
            "int64" => PrimitiveType::Long,
            "float32" => PrimitiveType::Float,
            "float64" => PrimitiveType::Double,
            "boolean" => PrimitiveType::Boolean,
            "bytes" => PrimitiveType::Binary,
            _ => PrimitiveType::String,
        },
    };
    Type::Primitive(primitive)
}

/// A time's unit in the event (from the field's logical type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds (`io.debezium.time.Time`, `Timestamp`, Connect's `Time`, `Timestamp`).
    Milli,
    /// Microseconds (`MicroTime`, `MicroTimestamp`; the default without a schema).
    Micro,
    /// Nanoseconds (`NanoTime`, `NanoTimestamp`).
    Nano,
}

impl Unit {
    /// The unit of a field with this logical name.
    pub fn of(logical: Option<&str>) -> Self {
        match logical {
            Some(
                "io.debezium.time.Time"
                | "io.debezium.time.Timestamp"
                | "org.apache.kafka.connect.data.Time"
                | "org.apache.kafka.connect.data.Timestamp",
            ) => Self::Milli,
            Some("io.debezium.time.NanoTime" | "io.debezium.time.NanoTimestamp") => Self::Nano,
            _ => Self::Micro,
        }
    }

    fn to_micros(self, value: i64) -> i64 {
        match self {
            Self::Milli => value.saturating_mul(1000),
            Self::Micro => value,
            Self::Nano => value.div_euclid(1000),
        }
    }
}

/// How a decimal column's text values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalText {
    /// Base64 of the unscaled bytes (a Connect `bytes` field: `decimal.format=BASE64`).
    Base64,
    /// A number as text (a Connect `string` field: `decimal.handling.mode=string`).
    Numeric,
    /// Unknown (no schema): base64 if the text is base64, else a number. Text of digits only
    /// whose length is a multiple of 4 is both; it is read as base64, Debezium's precise form.
    Either,
}

/// How a field's values are read: the unit of its times and the form of its decimals, from its
/// Connect schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Times' unit.
    pub unit: Unit,
    /// Decimals' text form.
    pub decimal: DecimalText,
}

impl Read {
    /// How to read a field with this Connect schema (`None`: the event has no schema).
    pub fn of(field: Option<&ConnectSchema>) -> Self {
        Self {
            unit: Unit::of(field.and_then(|f| f.name.as_deref())),
            decimal: match field.map(|f| f.kind.as_str()) {
                Some("bytes") => DecimalText::Base64,
                Some(_) => DecimalText::Numeric,
                None => DecimalText::Either,
            },
        }
    }
}

impl From<Unit> for Read {
    fn from(unit: Unit) -> Self {
        Self {
            unit,
            decimal: DecimalText::Either,
        }
    }
}

/// A converted value, before it is appended (a record's values are all converted before any
/// is appended, so that a failing record leaves no partial row).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Null.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `int`, `date` (days).
    I32(i32),
    /// `long`, `time`, `timestamp`, `timestamptz` (µs).
    I64(i64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
    /// `decimal` (unscaled).
    I128(i128),
    /// `string`.
    Str(String),
    /// `binary`, `uuid` (16 bytes).
    Bytes(Vec<u8>),
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `value` as a cell of a column of type `ty`, read as `read` says.
///
/// # Errors
///
/// What does not fit.
pub fn convert(value: &Value, ty: &PrimitiveType, read: impl Into<Read>) -> Result<Cell, String> {
    let Read {
        unit,
        decimal: text,
    } = read.into();
    if value.is_null() {
        return Ok(Cell::Null);
    }
    let wrong = || format!("{} does not fit a {ty} column", type_name(value));
    let int = || value.as_i64().ok_or_else(wrong);
    Ok(match ty {
        PrimitiveType::Boolean => Cell::Bool(value.as_bool().ok_or_else(wrong)?),
        PrimitiveType::Int => Cell::I32(
            i32::try_from(int()?)
                .map_err(|_| format!("{value} is out of an int column's range"))?,
        ),
        PrimitiveType::Date => Cell::I32(
            i32::try_from(int()?).map_err(|_| format!("{value} is out of a date's range"))?,
        ),
        PrimitiveType::Long => Cell::I64(int()?),
        PrimitiveType::Time | PrimitiveType::Timestamp => match value {
            Value::String(text) => Cell::I64(parse_local_micros(text).ok_or_else(|| {
                format!("{text:?} is not a date-time (expected YYYY-MM-DDTHH:MM:SS[.f])")
            })?),
            _ => Cell::I64(unit.to_micros(int()?)),
        },
        PrimitiveType::Timestamptz => match value {
            Value::String(text) => Cell::I64(
                chrono::DateTime::parse_from_rfc3339(text)
                    .map_err(|e| format!("{text:?} is not an RFC 3339 timestamp: {e}"))?
                    .timestamp_micros(),
            ),
            _ => Cell::I64(unit.to_micros(int()?)),
        },
        PrimitiveType::Float => Cell::F32(float(value).ok_or_else(wrong)? as f32),
        PrimitiveType::Double => Cell::F64(float(value).ok_or_else(wrong)?),
        PrimitiveType::Decimal { scale, .. } => Cell::I128(decimal(value, *scale, text)?),
        PrimitiveType::String => match value {
            Value::String(text) => Cell::Str(text.clone()),
            other => Cell::Str(other.to_string()),
        },
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => match value {
            Value::String(text) => Cell::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| format!("bytes that are not base64: {e}"))?,
            ),
            _ => return Err(wrong()),
        },
        PrimitiveType::Uuid => match value {
            Value::String(text) => Cell::Bytes(
                uuid::Uuid::parse_str(text)
                    .map_err(|e| format!("{text:?} is not a UUID: {e}"))?
                    .as_bytes()
                    .to_vec(),
            ),
            _ => return Err(wrong()),
        },
        other => return Err(format!("sluice cannot write {other} columns yet")),
    })
}

/// A number, or the special values Debezium writes as strings.
fn float(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.f]` or `HH:MM:SS[.f]` (a time of day) as microseconds.
fn parse_local_micros(text: &str) -> Option<i64> {
    if let Ok(t) = chrono::NaiveTime::parse_from_str(text, "%H:%M:%S%.f") {
        return Some(
            i64::from(chrono::Timelike::num_seconds_from_midnight(&t)) * 1_000_000
                + i64::from(chrono::Timelike::nanosecond(&t) / 1000),
        );
    }
    let parsed = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f"))
        .ok()?;
    Some(parsed.and_utc().timestamp_micros())
}

/// A Connect decimal as its unscaled value at `scale`: JsonConverter's base64 of the
/// big-endian two's-complement unscaled bytes (`decimal.format=BASE64`, the default), or a
/// number or numeric string (`decimal.format=NUMERIC`, `decimal.handling.mode=string`); text
/// is read as `text` says.
fn decimal(value: &Value, scale: u32, text: DecimalText) -> Result<i128, String> {
    match (value, text) {
        (Value::Number(n), _) => decimal_text(&n.to_string(), scale),
        (Value::String(s), DecimalText::Numeric) => decimal_text(s, scale),
        (Value::String(s), DecimalText::Base64) => decimal_base64(s),
        (Value::String(s), DecimalText::Either) => {
            decimal_base64(s).or_else(|_| decimal_text(s, scale))
        }
        (other, _) => Err(format!(
            "{} does not fit a decimal column",
            type_name(other)
        )),
    }
}

/// Base64 of a big-endian two's-complement unscaled value.
fn decimal_base64(text: &str) -> Result<i128, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| format!("{text:?} is not a decimal's base64"))?;
    if bytes.is_empty() || bytes.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes: expected 1 to 16",
            bytes.len()
        ));
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(&bytes);
    Ok(i128::from_be_bytes(wide))
}

/// A decimal number's text (`-12.345`, `1e3` not accepted) as its unscaled value at `scale`.
/// By hand: a few lines where a decimal crate would be a dependency for one parse.
fn decimal_text(text: &str, scale: u32) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a decimal number");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let kept = fraction.trim_end_matches('0');
    if kept.len() > scale as usize {
        return Err(format!(
            "{text} has more fractional digits than the column's scale {scale}"
        ));
    }
    let mut unscaled: i128 = 0;
    let padded = format!("{whole}{fraction:0<width$}", width = scale as usize);
    let padded = &padded[..whole.len() + scale as usize];
    for b in padded.bytes() {
        unscaled = unscaled
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(b - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if negative { -unscaled } else { unscaled })
}

/// Arrow column builders for a table's schema (the `iceberg` crate's Arrow mapping, with its
/// field ids), filled a row at a time.
pub struct Rows {
    schema: SchemaRef,
    columns: Vec<Column>,
    len: usize,
}

enum Column {
    Bool(BooleanBuilder),
    I32(Int32Builder),
    Date(Date32Builder),
    I64(Int64Builder),
    Time(Time64MicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    F32(Float32Builder),
    F64(Float64Builder),
    Decimal(Decimal128Builder),
    Str(StringBuilder),
    Bytes(LargeBinaryBuilder),
    Fixed(FixedSizeBinaryBuilder),
}

impl Column {
    fn new(ty: &DataType) -> Result<Self, String> {
        Ok(match ty {
            DataType::Boolean => Self::Bool(BooleanBuilder::new()),
            DataType::Int32 => Self::I32(Int32Builder::new()),
            DataType::Date32 => Self::Date(Date32Builder::new()),
            DataType::Int64 => Self::I64(Int64Builder::new()),
            DataType::Time64(_) => Self::Time(Time64MicrosecondBuilder::new()),
            DataType::Timestamp(_, zone) => {
                Self::Timestamp(TimestampMicrosecondBuilder::new().with_timezone_opt(zone.clone()))
            }
            DataType::Float32 => Self::F32(Float32Builder::new()),
            DataType::Float64 => Self::F64(Float64Builder::new()),
            DataType::Decimal128(p, s) => Self::Decimal(
                Decimal128Builder::new()
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| e.to_string())?,
            ),
            DataType::Utf8 => Self::Str(StringBuilder::new()),
            DataType::LargeBinary => Self::Bytes(LargeBinaryBuilder::new()),
            DataType::FixedSizeBinary(width) => Self::Fixed(FixedSizeBinaryBuilder::new(*width)),
            other => return Err(format!("sluice cannot write {other} columns yet")),
        })
    }

    fn append(&mut self, cell: &Cell) -> Result<(), String> {
        match (self, cell) {
            (Self::Bool(b), Cell::Bool(v)) => b.append_value(*v),
            (Self::I32(b), Cell::I32(v)) => b.append_value(*v),
            (Self::Date(b), Cell::I32(v)) => b.append_value(*v),
            (Self::I64(b), Cell::I64(v)) => b.append_value(*v),
            (Self::Time(b), Cell::I64(v)) => b.append_value(*v),
            (Self::Timestamp(b), Cell::I64(v)) => b.append_value(*v),
            (Self::F32(b), Cell::F32(v)) => b.append_value(*v),
            (Self::F64(b), Cell::F64(v)) => b.append_value(*v),
            (Self::Decimal(b), Cell::I128(v)) => b.append_value(*v),
            (Self::Str(b), Cell::Str(v)) => b.append_value(v),
            (Self::Bytes(b), Cell::Bytes(v)) => b.append_value(v),
            (Self::Fixed(b), Cell::Bytes(v)) => b.append_value(v).map_err(|e| e.to_string())?,
            (column, Cell::Null) => column.append_null(),
            (_, cell) => return Err(format!("a {cell:?} in a column of another type")),
        }
        Ok(())
    }

    fn append_null(&mut self) {
        match self {
            Self::Bool(b) => b.append_null(),
            Self::I32(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
            Self::I64(b) => b.append_null(),
            Self::Time(b) => b.append_null(),
            Self::Timestamp(b) => b.append_null(),
            Self::F32(b) => b.append_null(),
            Self::F64(b) => b.append_null(),
            Self::Decimal(b) => b.append_null(),
            Self::Str(b) => b.append_null(),
            Self::Bytes(b) => b.append_null(),
            Self::Fixed(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Bool(b) => Arc::new(b.finish()),
            Self::I32(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::I64(b) => Arc::new(b.finish()),
            Self::Time(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
            Self::F32(b) => Arc::new(b.finish()),
            Self::F64(b) => Arc::new(b.finish()),
            Self::Decimal(b) => Arc::new(b.finish()),
            Self::Str(b) => Arc::new(b.finish()),
            Self::Bytes(b) => Arc::new(b.finish()),
            Self::Fixed(b) => Arc::new(b.finish()),
        }
    }
}

impl Rows {
    /// Builders for `schema`.
    ///
    /// # Errors
    ///
    /// A column type sluice does not write.
    pub fn new(schema: &Schema) -> Result<Self, String> {
        let arrow = iceberg::arrow::schema_to_arrow_schema(schema).map_err(|e| e.to_string())?;
        Self::for_arrow(Arc::new(arrow))
    }

    /// Builders for an Arrow schema (of the types [`Rows::new`] makes).
    ///
    /// # Errors
    ///
    /// A column type sluice does not write.
    pub fn for_arrow(schema: SchemaRef) -> Result<Self, String> {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::new(f.data_type()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            schema,
            columns,
            len: 0,
        })
    }

    /// The Arrow schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Appends a row: one cell per column, in order, converted for their columns.
    ///
    /// # Errors
    ///
    /// A row of another length, or a cell of the wrong kind (a bug: [`convert`] makes them by
    /// the column's type).
    pub fn push(&mut self, cells: &[Cell]) -> Result<(), String> {
        if cells.len() != self.columns.len() {
            return Err(format!(
                "a row of {} cells for {} columns",
                cells.len(),
                self.columns.len()
            ));
        }
        for (column, cell) in self.columns.iter_mut().zip(cells) {
            column.append(cell)?;
        }
        self.len += 1;
        Ok(())
    }

    /// Rows appended since the last [`Rows::take`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no row waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows as a record batch; the builders start empty again.
    ///
    /// # Errors
    ///
    /// Arrow's, when a required column holds a null.
    pub fn take(&mut self) -> Result<RecordBatch, String> {
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(Column::finish).collect();
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), arrays).map_err(|e| e.to_string())
    }
}

/// The value of row `row` of `array` as a [`Cell`] (a key column read back from a data file,
/// [`crate::sink::iceberg::upsert`]): the cell [`convert`] makes for the same value.
///
/// # Errors
///
/// An Arrow type sluice does not write.
pub fn cell_at(array: &dyn arrow_array::Array, row: usize) -> Result<Cell, String> {
    use arrow_array::cast::AsArray as _;
    use arrow_array::types::{
        Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
        Time64MicrosecondType, TimestampMicrosecondType,
    };
    if array.is_null(row) {
        return Ok(Cell::Null);
    }
    Ok(match array.data_type() {
        DataType::Boolean => Cell::Bool(array.as_boolean().value(row)),
        DataType::Int32 => Cell::I32(array.as_primitive::<Int32Type>().value(row)),
        DataType::Date32 => Cell::I32(array.as_primitive::<Date32Type>().value(row)),
        DataType::Int64 => Cell::I64(array.as_primitive::<Int64Type>().value(row)),
        DataType::Time64(arrow_schema::TimeUnit::Microsecond) => {
            Cell::I64(array.as_primitive::<Time64MicrosecondType>().value(row))
        }
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => {
            Cell::I64(array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Float32 => Cell::F32(array.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => Cell::F64(array.as_primitive::<Float64Type>().value(row)),
        DataType::Decimal128(_, _) => Cell::I128(array.as_primitive::<Decimal128Type>().value(row)),
        DataType::Utf8 => Cell::Str(array.as_string::<i32>().value(row).to_owned()),
        DataType::LargeUtf8 => Cell::Str(array.as_string::<i64>().value(row).to_owned()),
        DataType::Binary => Cell::Bytes(array.as_binary::<i32>().value(row).to_vec()),
        DataType::LargeBinary => Cell::Bytes(array.as_binary::<i64>().value(row).to_vec()),
        DataType::FixedSizeBinary(_) => {
            Cell::Bytes(array.as_fixed_size_binary().value(row).to_vec())
        }
        other => return Err(format!("sluice cannot read {other} key columns")),
    })
}

/// An optional Connect field schema of `kind`, with its logical `name` and `parameters`: for
/// the tests of the typed conversions (here and the Iceberg sink's).
#[cfg(test)]
pub(crate) fn test_field(kind: &str, name: Option<&str>, params: &[(&str, &str)]) -> ConnectSchema {
    ConnectSchema {
        kind: kind.into(),
        optional: true,
        name: name.map(Into::into),
        parameters: (!params.is_empty()).then(|| {
            params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        fields: Vec::new(),
        items: None,
    }
}

#[cfg(test)]
mod tests {
    use super::test_field as field;
    use super::*;

    #[test]
    fn debezium_logical_types_become_iceberg_types() {
        let p = |t: Type| match t {
            Type::Primitive(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            p(iceberg_type(&field(
                "bytes",
                Some("org.apache.kafka.connect.data.Decimal"),
                &[("scale", "2"), ("connect.decimal.precision", "10")]
            ))),
            PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            }
        );
        assert_eq!(
            p(iceberg_type(&field(
                "int32",
                Some("io.debezium.time.Date"),
                &[]
            ))),
            PrimitiveType::Date
        );
        assert_eq!(
            p(iceberg_type(&field(
                "int64",
                Some("io.debezium.time.MicroTimestamp"),
                &[]
            ))),
            PrimitiveType::Timestamp
        );
        assert_eq!(
            p(iceberg_type(&field(
                "string",
                Some("io.debezium.time.ZonedTimestamp"),
                &[]
            ))),
            PrimitiveType::Timestamptz
        );
        assert_eq!(
            p(iceberg_type(&field(
                "string",
                Some("io.debezium.data.Uuid"),
                &[]
            ))),
            PrimitiveType::Uuid
        );
        assert_eq!(
            p(iceberg_type(&field("int16", None, &[]))),
            PrimitiveType::Int
        );
        assert_eq!(
            p(iceberg_type(&field("struct", None, &[]))),
            PrimitiveType::String
        );
    }

    #[test]
    fn values_convert_by_column_type_and_unit() {
        let dec = PrimitiveType::Decimal {
            precision: 10,
            scale: 2,
        };
        // 12345 unscaled = 123.45: JsonConverter's base64 of 0x3039.
        assert_eq!(
            convert(&Value::from("MDk="), &dec, Unit::Micro),
            Ok(Cell::I128(12345))
        );
        // -1 unscaled: 0xff.
        assert_eq!(
            convert(&Value::from("/w=="), &dec, Unit::Micro),
            Ok(Cell::I128(-1))
        );
        assert_eq!(
            convert(&Value::from("-1.5"), &dec, Unit::Micro),
            Ok(Cell::I128(-150))
        );
        // "+048" is both a number and base64 (0xfb4e3c = -307652): a `bytes` field is base64,
        // a `string` field a number.
        let bytes_field = Read::of(Some(&field("bytes", None, &[])));
        let string_field = Read::of(Some(&field("string", None, &[])));
        assert_eq!(
            convert(&Value::from("+048"), &dec, bytes_field),
            Ok(Cell::I128(-307_652))
        );
        assert_eq!(
            convert(&Value::from("+048"), &dec, string_field),
            Ok(Cell::I128(4800))
        );
        assert!(convert(&Value::from("1.5"), &dec, bytes_field).is_err());
        assert_eq!(
            convert(&serde_json::json!(7.25), &dec, Unit::Micro),
            Ok(Cell::I128(725))
        );
        assert!(convert(&Value::from("1.234"), &dec, Unit::Micro).is_err());
        assert_eq!(
            convert(
                &serde_json::json!(1_700_000_000_123_i64),
                &PrimitiveType::Timestamp,
                Unit::Milli
            ),
            Ok(Cell::I64(1_700_000_000_123_000))
        );
        assert_eq!(
            convert(
                &Value::from("2024-01-02T03:04:05.5Z"),
                &PrimitiveType::Timestamptz,
                Unit::Micro
            ),
            Ok(Cell::I64(1_704_164_645_500_000))
        );
        assert_eq!(
            convert(
                &Value::from("00000000-0000-0000-0000-000000000001"),
                &PrimitiveType::Uuid,
                Unit::Micro
            ),
            Ok(Cell::Bytes([&[0u8; 15][..], &[1]].concat()))
        );
        assert_eq!(
            convert(
                &serde_json::json!({"a": 1}),
                &PrimitiveType::String,
                Unit::Micro
            ),
            Ok(Cell::Str(r#"{"a":1}"#.into()))
        );
        assert!(convert(&Value::from("x"), &PrimitiveType::Long, Unit::Micro).is_err());
        assert!(
            convert(
                &serde_json::json!(1_i64 << 40),
                &PrimitiveType::Int,
                Unit::Micro
            )
            .is_err()
        );
    }
}
