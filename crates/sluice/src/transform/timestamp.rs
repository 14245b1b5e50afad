//! Kafka's `TimestampConverter` (`$Key`/`$Value`): a timestamp field (or the whole key or
//! value) converted between unix time, a `SimpleDateFormat` string and Connect's
//! `Date`/`Time`/`Timestamp`.
//!
//! The input's kind comes from its Connect schema, as Connect reads it (Debezium's records
//! always have one): `Timestamp`/`Date`/`Time` by their logical names, other strings by
//! `format`, other int64s (Debezium's `MicroTimestamp`, `Timestamp`, …) as unix time in
//! `unix.precision`. Without schemas in the events, a JSON number is read as unix time and a
//! string by `format`.

use super::field::Part;
use super::javadate::JavaFormat;
use super::json::{Data, Members, ObjectWriter, Schema, string};
use super::record::Record;
use super::schema;

const TIMESTAMP: &str = "org.apache.kafka.connect.data.Timestamp";
const DATE: &str = "org.apache.kafka.connect.data.Date";
const TIME: &str = "org.apache.kafka.connect.data.Time";
const MILLIS_PER_DAY: i64 = 86_400_000;

/// `target.type` (and the kind of an input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `string`: text by `format`.
    String,
    /// `unix`: an int64 in `unix.precision`.
    Unix,
    /// `Date`: Connect's Date (days, int32).
    Date,
    /// `Time`: Connect's Time (milliseconds of the day, int32).
    Time,
    /// `Timestamp`: Connect's Timestamp (milliseconds, int64).
    Timestamp,
}

impl Kind {
    /// The kinds by Connect's names.
    pub const NAMES: [(&'static str, Kind); 5] = [
        ("string", Kind::String),
        ("unix", Kind::Unix),
        ("Date", Kind::Date),
        ("Time", Kind::Time),
        ("Timestamp", Kind::Timestamp),
    ];

    /// The Connect schema of a value of this kind, as JsonConverter writes it.
    fn schema(self, optional: bool) -> String {
        let (kind, name) = match self {
            Kind::String => ("string", None),
            Kind::Unix => ("int64", None),
            Kind::Date => ("int32", Some(DATE)),
            Kind::Time => ("int32", Some(TIME)),
            Kind::Timestamp => ("int64", Some(TIMESTAMP)),
        };
        match name {
            Some(name) => format!(
                "{{\"type\":\"{kind}\",\"optional\":{optional},\"name\":\"{name}\",\"version\":1}}"
            ),
            None => format!("{{\"type\":\"{kind}\",\"optional\":{optional}}}"),
        }
    }

    /// The kind of a value with the (field) schema `schema`, as Connect's
    /// `timestampTypeFromSchema` decides it.
    fn of_schema(schema: &str) -> Result<Kind, String> {
        match schema::name(schema).as_deref() {
            Some(TIMESTAMP) => return Ok(Kind::Timestamp),
            Some(DATE) => return Ok(Kind::Date),
            Some(TIME) => return Ok(Kind::Time),
            _ => {}
        }
        match schema::type_of(schema).as_deref() {
            Some("string") => Ok(Kind::String),
            Some("int64") => Ok(Kind::Unix),
            _ => Err(format!(
                "Schema {schema} does not correspond to a known timestamp type format"
            )),
        }
    }
}

/// `unix.precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// `seconds`.
    Seconds,
    /// `milliseconds` (the default).
    Millis,
    /// `microseconds`.
    Micros,
    /// `nanoseconds`.
    Nanos,
}

impl Precision {
    /// The precisions by Connect's names.
    pub const NAMES: [(&'static str, Precision); 4] = [
        ("seconds", Precision::Seconds),
        ("milliseconds", Precision::Millis),
        ("microseconds", Precision::Micros),
        ("nanoseconds", Precision::Nanos),
    ];

    /// `value` in this unit as milliseconds.
    fn millis_of(self, value: i64) -> i64 {
        // Java's TimeUnit: truncated toward zero.
        match self {
            Precision::Seconds => value.saturating_mul(1000),
            Precision::Millis => value,
            Precision::Micros => value / 1000,
            Precision::Nanos => value / 1_000_000,
        }
    }

    /// `millis` in this unit.
    fn of_millis(self, millis: i64) -> i64 {
        match self {
            Precision::Seconds => millis / 1000,
            Precision::Millis => millis,
            Precision::Micros => millis.saturating_mul(1000),
            Precision::Nanos => millis.saturating_mul(1_000_000),
        }
    }
}

/// `TimestampConverter`.
#[derive(Debug)]
pub struct TimestampConverter {
    /// The key or the value.
    pub part: Part,
    /// `field` (`None`: the whole key or value).
    pub field: Option<String>,
    /// `target.type`.
    pub target: Kind,
    /// `format` (required for `target.type` string; reads string inputs).
    pub format: Option<JavaFormat>,
    /// `unix.precision`.
    pub precision: Precision,
}

impl TimestampConverter {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(field) = &self.field else {
            let (kind, schema) = match &data.schema {
                Schema::Json(s) => (
                    Some(Kind::of_schema(s)?),
                    Schema::Json(self.target.schema(schema::is_optional(s))),
                ),
                other => (None, other.clone()),
            };
            let value = match data.value.as_deref() {
                Some(v) => Some(self.convert(v, kind)?),
                None => None,
            };
            *data = Data { schema, value };
            return Ok(record);
        };
        let Some(text) = data.value.as_deref() else {
            // A null value keeps its (updated) schema.
            if let Schema::Json(s) = &data.schema {
                data.schema = Schema::Json(self.struct_schema(s, field)?.0);
            }
            return Ok(record);
        };
        let members = Members::parse(text)?;
        let (schema, kind) = match &data.schema {
            Schema::Json(s) => {
                let (updated, kind) = self.struct_schema(s, field)?;
                (Schema::Json(updated), kind)
            }
            other => (other.clone(), None),
        };
        let mut out = ObjectWriter::new();
        for (name, value) in &members.0 {
            if name == field {
                out.member(name, &self.convert(value.get(), kind)?);
            } else {
                out.member(name, value.get());
            }
        }
        *data = Data {
            schema,
            value: Some(out.finish()),
        };
        Ok(record)
    }

    /// The struct schema with `field`'s schema the target's, and the field's input kind
    /// (`None`: the struct has no such field).
    fn struct_schema(&self, s: &str, field: &str) -> Result<(String, Option<Kind>), String> {
        let mut kind = None;
        let mut fields = Vec::new();
        for (f, name) in schema::fields(s).into_iter().zip(schema::field_names(s)) {
            if name == field {
                kind = Some(Kind::of_schema(&f)?);
                let optional = schema::is_optional(&f);
                fields.push(schema::replaced_field(&f, &self.target.schema(optional)));
            } else {
                fields.push(f);
            }
        }
        Ok((schema::with_fields(s, &fields), kind))
    }

    /// A value's JSON text converted (`kind`: its input kind when its schema is known).
    fn convert(&self, value: &str, kind: Option<Kind>) -> Result<String, String> {
        if value == "null" {
            return Ok(value.to_owned());
        }
        let kind = match kind {
            Some(k) => k,
            None if value.starts_with('"') => Kind::String,
            None => Kind::Unix,
        };
        let number = || {
            value
                .parse::<i64>()
                .map_err(|_| format!("expected an integer timestamp, found {value}"))
        };
        let millis = match kind {
            Kind::String => {
                let text: String = serde_json::from_str(value).map_err(|e| e.to_string())?;
                let Some(format) = &self.format else {
                    return Err(format!(
                        "the string {text:?} needs format (a SimpleDateFormat pattern) to be read"
                    ));
                };
                format.parse(&text)?
            }
            Kind::Unix => self.precision.millis_of(number()?),
            Kind::Date => number()?.saturating_mul(MILLIS_PER_DAY),
            Kind::Time | Kind::Timestamp => number()?,
        };
        Ok(match self.target {
            Kind::String => {
                let format = self.format.as_ref().ok_or("format is missing")?;
                string(&format.format(millis))
            }
            Kind::Unix => self.precision.of_millis(millis).to_string(),
            Kind::Date => millis.div_euclid(MILLIS_PER_DAY).to_string(),
            Kind::Time => millis.rem_euclid(MILLIS_PER_DAY).to_string(),
            Kind::Timestamp => millis.to_string(),
        })
    }
}
