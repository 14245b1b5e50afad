//! Kafka's `Cast` (`$Key`/`$Value`): fields of a struct, or the whole key or value, cast to
//! another primitive type, as Connect's `Cast` casts them (Java's narrowing and widening
//! conversions, `toString`, `parseInt`…), the schema rebuilt as Connect rebuilds it.
//!
//! The input's type comes from its Connect schema when the events carry one. Without schemas
//! (`schemas_enable = false`) only the JSON is known, where Connect's records still have their
//! schema: a JSON integer is read as an int64, a fraction as a float64, a string as a string
//! (docs/transforms.md names what this changes: a Decimal, bytes and a float32 input).

use base64::Engine as _;

use super::field::Part;
use super::javadate::JavaFormat;
use super::json::{Data, Members, ObjectWriter, Schema, as_str, string};
use super::record::Record;
use super::schema;

/// A type `spec` casts to (Connect's `SUPPORTED_CAST_OUTPUT_TYPES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastType {
    /// `int8`.
    Int8,
    /// `int16`.
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
    /// `boolean`.
    Boolean,
    /// `string`.
    String,
}

impl CastType {
    /// The types by Connect's names (`Schema.Type`, read case-insensitively).
    pub const NAMES: [(&'static str, CastType); 8] = [
        ("int8", CastType::Int8),
        ("int16", CastType::Int16),
        ("int32", CastType::Int32),
        ("int64", CastType::Int64),
        ("float32", CastType::Float32),
        ("float64", CastType::Float64),
        ("boolean", CastType::Boolean),
        ("string", CastType::String),
    ];

    /// The type's name in a schema as JsonConverter writes it.
    fn json_type(self) -> &'static str {
        match self {
            CastType::Int8 => "int8",
            CastType::Int16 => "int16",
            CastType::Int32 => "int32",
            CastType::Int64 => "int64",
            CastType::Float32 => "float",
            CastType::Float64 => "double",
            CastType::Boolean => "boolean",
            CastType::String => "string",
        }
    }
}

/// A parsed `spec`: the whole value's type, or the fields' types.
pub type Spec = (Option<CastType>, Vec<(String, CastType)>);

/// Parses Connect's `spec`: `type` (the whole key or value) or `field:type,…`.
///
/// # Errors
///
/// Connect's `ConfigException`s: no entry, an entry with more than one `:`, a type that is not
/// one of [`CastType::NAMES`], a whole-value type with other entries.
pub fn parse_spec(entries: &[String]) -> Result<Spec, String> {
    if entries.is_empty() {
        return Err("Must specify at least one field to cast: expected a type (int8, int16, int32, int64, float32, float64, boolean, string) or field:type pairs separated by commas".into());
    }
    let kind = |name: &str| -> Result<CastType, String> {
        let lower = name.trim().to_ascii_lowercase();
        match CastType::NAMES.iter().find(|(n, _)| *n == lower) {
            Some((_, t)) => Ok(*t),
            None if matches!(lower.as_str(), "bytes" | "array" | "map" | "struct") => Err(format!(
                "Cast transformation does not support casting to {}: expected int8, int16, int32, int64, float32, float64, boolean or string",
                lower.to_ascii_uppercase()
            )),
            None => Err(format!(
                "Invalid type found in casting spec: {:?}: expected int8, int16, int32, int64, float32, float64, boolean or string",
                name.trim()
            )),
        }
    };
    let mut whole = None;
    let mut fields = Vec::new();
    for entry in entries {
        let parts: Vec<&str> = entry.split(':').collect();
        match parts.as_slice() {
            [only] => whole = Some(kind(only)?),
            [field, to] => fields.push((field.trim().to_owned(), kind(to)?)),
            _ => {
                return Err(format!(
                    "Invalid cast mapping: {entry:?}: expected field:type"
                ));
            }
        }
    }
    if whole.is_some() && entries.len() > 1 {
        return Err("Cast transformations that specify a type to cast the entire value to may only specify a single cast in their spec".into());
    }
    Ok((whole, fields))
}

/// `Cast`.
#[derive(Debug)]
pub struct Cast {
    /// The key or the value.
    pub part: Part,
    /// The type the whole key or value is cast to (`spec` = a type).
    pub whole: Option<CastType>,
    /// Field → type (`spec` = `field:type,…`).
    pub fields: Vec<(String, CastType)>,
}

impl Cast {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A value Connect refuses: a struct, array or map cast, a string that is not a number of
    /// the type, a field cast on a value that is not a struct.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        // Connect returns a record with a null key or value as it is (its schema too).
        let Some(text) = data.value.as_deref() else {
            return Ok(record);
        };
        if let Some(to) = self.whole {
            let field_schema = match &data.schema {
                Schema::Json(s) => Some(s.as_str()),
                _ => None,
            };
            let value = cast(field_schema, text, to)?;
            let schema = match &data.schema {
                Schema::Json(s) => Schema::Json(cast_schema(s, to, false)?),
                other => other.clone(),
            };
            *data = Data {
                schema,
                value: Some(value),
            };
            return Ok(record);
        }
        let members = Members::parse(text).map_err(|_| {
            format!(
                "Only Struct objects supported for [cast types], found: {}",
                kind_of(text)
            )
        })?;
        let target = |name: &str| self.fields.iter().find(|(f, _)| f == name).map(|(_, t)| *t);
        let field_schemas = match &data.schema {
            Schema::Json(s) => Some(schema::fields(s).into_iter().zip(schema::field_names(s))),
            _ => None,
        }
        .map(Iterator::collect::<Vec<_>>);
        let mut out = ObjectWriter::new();
        for (name, value) in &members.0 {
            let Some(to) = target(name) else {
                out.member(name, value.get());
                continue;
            };
            let field_schema = field_schemas
                .as_ref()
                .and_then(|f| f.iter().find(|(_, n)| n == name))
                .map(|(f, _)| f.as_str());
            out.member(name, &cast(field_schema, value.get(), to)?);
        }
        if let (Schema::Json(s), Some(field_schemas)) = (&data.schema, &field_schemas) {
            let mut fields = Vec::with_capacity(field_schemas.len());
            for (field, name) in field_schemas {
                fields.push(match target(name) {
                    Some(to) => cast_schema(field, to, true)?,
                    None => field.clone(),
                });
            }
            data.schema = Schema::Json(schema::with_fields(s, &fields));
        }
        data.value = Some(out.finish());
        Ok(record)
    }
}

/// The schema of a value cast to `to` (`field`: of a struct's field, keeping its `"field"`):
/// Connect's `convertFieldType`, optional when the input is, its default cast. A whole value's
/// schema keeps its name, version, doc and parameters (`SchemaUtil.copySchemaBasics`); a field's
/// does not.
fn cast_schema(input: &str, to: CastType, field: bool) -> Result<String, String> {
    let members = Members::parse(input)?;
    let mut out = ObjectWriter::new();
    out.member("type", &string(to.json_type()));
    let optional = members.get("optional").is_some_and(|o| o.get() == "true");
    out.member("optional", if optional { "true" } else { "false" });
    if !field {
        for basic in ["name", "version", "doc", "parameters"] {
            if let Some(value) = members.get(basic) {
                out.member(basic, value.get());
            }
        }
    }
    if let Some(default) = members.get("default").filter(|d| d.get() != "null") {
        out.member("default", &cast(Some(input), default.get(), to)?);
    }
    if field && let Some(name) = members.get("field") {
        out.member("field", name.get());
    }
    Ok(out.finish())
}

/// A value as Connect's `Cast` holds it before the cast.
#[derive(Debug, Clone, PartialEq)]
enum Input {
    /// int8 … int64 (Java's `Byte` … `Long`).
    Int(i64),
    /// float32 (`Float`).
    Float32(f32),
    /// float64 (`Double`).
    Float64(f64),
    /// A Decimal (`BigDecimal`): its unscaled value and scale.
    Decimal(i128, i32),
    /// boolean.
    Boolean(bool),
    /// string.
    Text(String),
    /// bytes, as their base64 text (what JsonConverter writes and `Cast` makes of them).
    Bytes(String),
    /// Connect's Date / Time / Timestamp: its milliseconds since the epoch (as a string) and
    /// the integer JSON holds (days, milliseconds of the day or since the epoch), which
    /// `encodeLogicalType` gives the numeric casts.
    Date(i64, i64),
}

const INPUT_TYPES: &str = "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING, BYTES]";

/// The JSON value `text` of the (field) schema `schema` cast to `to`, as JSON text.
fn cast(schema: Option<&str>, text: &str, to: CastType) -> Result<String, String> {
    if text == "null" {
        return Ok(text.to_owned());
    }
    let input = read_input(schema, text)?;
    let out_of_range = || {
        format!(
            "Value ({}) was out of range for requested data type",
            as_str(text).map_or_else(|| text.to_owned(), |s| s.into_owned())
        )
    };
    Ok(match to {
        // `Byte.parseByte` / `Short.parseShort` check the string against their own range.
        CastType::Int8 => match &input {
            Input::Text(s) => java_parse_long(s)
                .and_then(|l| i8::try_from(l).ok())
                .ok_or_else(out_of_range)?
                .to_string(),
            _ => (int_value(&input).ok_or_else(out_of_range)? as i8).to_string(),
        },
        CastType::Int16 => match &input {
            Input::Text(s) => java_parse_long(s)
                .and_then(|l| i16::try_from(l).ok())
                .ok_or_else(out_of_range)?
                .to_string(),
            _ => (int_value(&input).ok_or_else(out_of_range)? as i16).to_string(),
        },
        CastType::Int32 => int_value(&input).ok_or_else(out_of_range)?.to_string(),
        CastType::Int64 => integer(&input).ok_or_else(out_of_range)?.to_string(),
        CastType::Float32 => {
            let value = match &input {
                Input::Int(i) | Input::Date(_, i) => *i as f32,
                Input::Float32(f) => *f,
                Input::Float64(f) => *f as f32,
                Input::Decimal(unscaled, scale) => decimal_text(*unscaled, *scale)
                    .parse::<f32>()
                    .map_err(|_| out_of_range())?,
                Input::Boolean(b) => f32::from(u8::from(*b)),
                Input::Text(s) => java_parse_float(s).ok_or_else(out_of_range)? as f32,
                Input::Bytes(_) => return Err(unsupported_bytes(to)),
            };
            java_float32(value)
        }
        CastType::Float64 => {
            let value = match &input {
                Input::Int(i) | Input::Date(_, i) => *i as f64,
                Input::Float32(f) => f64::from(*f),
                Input::Float64(f) => *f,
                Input::Decimal(unscaled, scale) => decimal_text(*unscaled, *scale)
                    .parse::<f64>()
                    .map_err(|_| out_of_range())?,
                Input::Boolean(b) => f64::from(u8::from(*b)),
                Input::Text(s) => java_parse_float(s).ok_or_else(out_of_range)?,
                Input::Bytes(_) => return Err(unsupported_bytes(to)),
            };
            java_float64(value)
        }
        CastType::Boolean => match &input {
            Input::Boolean(b) => b.to_string(),
            // `Number.longValue() != 0`.
            Input::Text(s) => s.eq_ignore_ascii_case("true").to_string(),
            Input::Bytes(_) => return Err(unsupported_bytes(to)),
            other => (integer(other).ok_or_else(out_of_range)? != 0).to_string(),
        },
        CastType::String => string(&match &input {
            Input::Int(i) => i.to_string(),
            Input::Float32(f) => float32_text(*f),
            Input::Float64(f) => float64_text(*f),
            Input::Decimal(unscaled, scale) => big_decimal_to_string(*unscaled, *scale),
            Input::Boolean(b) => b.to_string(),
            Input::Text(s) | Input::Bytes(s) => s.clone(),
            Input::Date(millis, _) => date_text(*millis),
        }),
    })
}

/// `Number.intValue()` of an input (which `byteValue()` and `shortValue()` narrow further):
/// a float or double narrowed to an int directly (saturated), anything else through its
/// `long` (wrapped); a string parsed as Java's `parseInt` would (within an int's range).
fn int_value(input: &Input) -> Option<i32> {
    match input {
        Input::Float32(f) => Some(*f as i32),
        Input::Float64(f) => Some(*f as i32),
        Input::Text(s) => java_parse_long(s).and_then(|l| i32::try_from(l).ok()),
        other => integer(other).map(|l| l as i32),
    }
}

/// `Number.longValue()` of an input (`None`: a string that is not a Java `long`).
fn integer(input: &Input) -> Option<i64> {
    match input {
        Input::Int(i) | Input::Date(_, i) => Some(*i),
        // Java's narrowing of a float or double: toward zero, saturated, NaN as 0 (as `as`).
        Input::Float32(f) => Some(*f as i64),
        Input::Float64(f) => Some(*f as i64),
        Input::Decimal(unscaled, scale) => {
            // `BigDecimal.longValue()`: the integer part's low 64 bits.
            let whole = if *scale >= 0 {
                unscaled / 10i128.checked_pow(scale.unsigned_abs())?
            } else {
                unscaled.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?
            };
            Some(whole as i64)
        }
        Input::Boolean(b) => Some(i64::from(*b)),
        Input::Text(s) => java_parse_long(s),
        Input::Bytes(_) => None,
    }
}

fn unsupported_bytes(to: CastType) -> String {
    format!(
        "Unexpected type in Cast transformation: bytes cannot be cast to {}: only to string",
        to.json_type()
    )
}

/// What a JSON value is, for an error message.
fn kind_of(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// Reads the JSON value `text` as the type its schema names (or, without one, its JSON type).
fn read_input(schema: Option<&str>, text: &str) -> Result<Input, String> {
    let Some(schema) = schema else {
        return match text.as_bytes().first() {
            Some(b'"') => Ok(Input::Text(as_str(text).unwrap_or_default().into_owned())),
            Some(b't') => Ok(Input::Boolean(true)),
            Some(b'f') => Ok(Input::Boolean(false)),
            Some(b'{') => Err(format!(
                "Cast transformation does not support casting from MAP; supported types are {INPUT_TYPES}"
            )),
            Some(b'[') => Err(format!(
                "Cast transformation does not support casting from ARRAY; supported types are {INPUT_TYPES}"
            )),
            _ => match text.parse::<i64>() {
                Ok(i) => Ok(Input::Int(i)),
                Err(_) => Ok(Input::Float64(json_float(text)?)),
            },
        };
    };
    let kind = schema::type_of(schema).unwrap_or_default();
    let name = schema::name(schema);
    let number = || -> Result<i64, String> {
        text.parse::<i64>()
            .map_err(|_| format!("expected an integer, found {text}"))
    };
    match (kind.as_str(), name.as_deref()) {
        (_, Some("org.apache.kafka.connect.data.Date")) => {
            let days = number()?;
            Ok(Input::Date(days.saturating_mul(86_400_000), days))
        }
        (
            _,
            Some("org.apache.kafka.connect.data.Time" | "org.apache.kafka.connect.data.Timestamp"),
        ) => {
            let millis = number()?;
            Ok(Input::Date(millis, millis))
        }
        ("bytes", Some("org.apache.kafka.connect.data.Decimal")) => {
            let (unscaled, scale) = decimal_of(schema, text)?;
            Ok(Input::Decimal(unscaled, scale))
        }
        ("int8" | "int16" | "int32" | "int64", _) => Ok(Input::Int(number()?)),
        ("float", _) => Ok(Input::Float32(json_float(text)? as f32)),
        ("double", _) => Ok(Input::Float64(json_float(text)?)),
        ("boolean", _) => Ok(Input::Boolean(text == "true")),
        ("string", _) => Ok(Input::Text(
            as_str(text).ok_or("expected a string")?.into_owned(),
        )),
        ("bytes", _) => Ok(Input::Bytes(
            as_str(text).ok_or("expected base64 text")?.into_owned(),
        )),
        (other, _) => Err(format!(
            "Cast transformation does not support casting from {}; supported types are {INPUT_TYPES}",
            other.to_ascii_uppercase()
        )),
    }
}

/// A Decimal's unscaled value and scale: its JSON text (JsonConverter's base64 of the
/// big-endian two's-complement unscaled value) and its schema's `scale` parameter.
pub(super) fn decimal_of(schema: &str, text: &str) -> Result<(i128, i32), String> {
    let scale = Members::parse(schema)
        .ok()
        .and_then(|m| m.get("parameters").map(|p| p.get().to_owned()))
        .and_then(|p| {
            Members::parse(&p)
                .ok()?
                .get("scale")
                .and_then(|s| as_str(s.get()).and_then(|s| s.parse::<i32>().ok()))
        })
        .unwrap_or(0);
    let encoded = as_str(text).ok_or("expected a Decimal's base64 text")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.as_bytes())
        .map_err(|e| format!("a Decimal's base64 text: {e}"))?;
    Ok((unscaled(&bytes)?, scale))
}

/// A JSON number (or Jackson's quoted `"NaN"`, `"Infinity"`, `"-Infinity"`) as a double.
fn json_float(text: &str) -> Result<f64, String> {
    let bare = text.trim_matches('"');
    match bare {
        "NaN" => Ok(f64::NAN),
        "Infinity" => Ok(f64::INFINITY),
        "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => bare
            .parse::<f64>()
            .map_err(|_| format!("expected a number, found {text}")),
    }
}

/// A big-endian two's-complement integer (a Decimal's unscaled value) of up to 16 bytes.
fn unscaled(bytes: &[u8]) -> Result<i128, String> {
    if bytes.len() > 16 {
        return Err(
            "a Decimal's unscaled value of more than 128 bits is not cast by sluice".into(),
        );
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    Ok(i128::from_be_bytes(wide))
}

/// A decimal as plain text (`-12.340`), for parsing as a float.
fn decimal_text(unscaled: i128, scale: i32) -> String {
    format!("{unscaled}e{}", -i64::from(scale))
}

/// Java's `BigDecimal.toString()`: plain when the scale is not negative and the adjusted
/// exponent is at least -6, else scientific (`1.23E+5`, `1E-7`).
fn big_decimal_to_string(unscaled: i128, scale: i32) -> String {
    let negative = unscaled < 0;
    let digits = unscaled.unsigned_abs().to_string();
    let adjusted = digits.len() as i64 - 1 - i64::from(scale);
    let sign = if negative { "-" } else { "" };
    if scale >= 0 && adjusted >= -6 {
        let scale = scale as usize;
        if scale == 0 {
            return format!("{sign}{digits}");
        }
        if digits.len() > scale {
            let (int, frac) = digits.split_at(digits.len() - scale);
            return format!("{sign}{int}.{frac}");
        }
        return format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()));
    }
    let (first, rest) = digits.split_at(1);
    let mantissa = if rest.is_empty() {
        first.to_owned()
    } else {
        format!("{first}.{rest}")
    };
    let exponent_sign = if adjusted >= 0 { "+" } else { "" };
    format!("{sign}{mantissa}E{exponent_sign}{adjusted}")
}

/// Java's `Long.parseLong`: an optional sign and decimal digits, within range.
fn java_parse_long(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.starts_with('+') || digits.starts_with("-+") {
        return None;
    }
    digits.parse::<i64>().ok()
}

/// Java's `Double.parseDouble`: leading and trailing whitespace ignored, an optional `f`/`d`
/// suffix, `NaN` and `Infinity` by Java's spelling.
fn java_parse_float(text: &str) -> Option<f64> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let unsigned = trimmed.trim_start_matches(['+', '-']);
    match unsigned {
        "NaN" => return Some(f64::NAN),
        "Infinity" => {
            return Some(if trimmed.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
        }
        _ => {}
    }
    if unsigned.is_empty() || unsigned.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let number = trimmed
        .strip_suffix(['f', 'F', 'd', 'D'])
        .unwrap_or(trimmed);
    number.parse::<f64>().ok()
}

/// A float as JsonConverter writes a float32 (`Float.toString`; Jackson quotes the
/// non-finite values).
fn java_float32(value: f32) -> String {
    if value.is_finite() {
        float32_text(value)
    } else {
        string(&float32_text(value))
    }
}

/// A double as JsonConverter writes a float64.
fn java_float64(value: f64) -> String {
    if value.is_finite() {
        float64_text(value)
    } else {
        string(&float64_text(value))
    }
}

/// Java's `Float.toString`.
fn float32_text(value: f32) -> String {
    java_number_text(format!("{value:?}"), format!("{value:e}"), f64::from(value))
}

/// Java's `Double.toString`.
fn float64_text(value: f64) -> String {
    java_number_text(format!("{value:?}"), format!("{value:e}"), value)
}

/// Java's `Float`/`Double.toString` from Rust's shortest round-trip forms (`debug`: `1.5`,
/// `scientific`: `1.5e7`): plain from 10⁻³ to 10⁷, else `d.dddE±n`; `NaN`, `Infinity`.
/// Written here because no crate prints Java's forms (the MySQL encoder has its own for
/// doubles).
fn java_number_text(debug: String, scientific: String, value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        return debug;
    }
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
}

/// Connect's `Values.dateFormatFor(date).format(date)` (in UTC): a time of day before the
/// epoch's first day ends, a date at midnight, else a timestamp.
fn date_text(millis: i64) -> String {
    const DAY: i64 = 86_400_000;
    let pattern = if millis < DAY {
        "HH:mm:ss.SSS'Z'"
    } else if millis % DAY == 0 {
        "yyyy-MM-dd"
    } else {
        "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    };
    JavaFormat::new(pattern).map_or_else(|_| millis.to_string(), |f| f.format(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast_json(schema: &str, value: &str, to: CastType) -> String {
        cast(Some(schema), value, to).unwrap()
    }

    #[test]
    fn specs_are_read_as_connect_reads_them() {
        // The entries as `[transforms]` hands them over (config_more::split_list: split on
        // commas, trimmed, empty entries left out), written out here: config_more.rs imports
        // this file, so this file does not import it.
        let spec = |s: &str| {
            let entries: Vec<String> = s
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect();
            parse_spec(&entries)
        };
        assert_eq!(spec("INT32").unwrap(), (Some(CastType::Int32), vec![]));
        assert_eq!(
            spec("a:string, b:Float64").unwrap(),
            (
                None,
                vec![
                    ("a".into(), CastType::String),
                    ("b".into(), CastType::Float64)
                ]
            )
        );
        assert!(spec("").unwrap_err().contains("at least one"));
        assert!(spec("a:bytes").unwrap_err().contains("casting to BYTES"));
        assert!(spec("a:long").unwrap_err().contains("Invalid type"));
        assert!(spec("a:b:c").unwrap_err().contains("field:type"));
        assert!(spec("int8,a:string").unwrap_err().contains("single cast"));
    }

    #[test]
    fn numbers_narrow_widen_and_print_as_java_does() {
        let int64 = r#"{"type":"int64","optional":true}"#;
        let int16 = r#"{"type":"int16","optional":true}"#;
        let double = r#"{"type":"double","optional":true}"#;
        let float = r#"{"type":"float","optional":true}"#;
        // (byte) of a short wraps; (int) of a double truncates and saturates.
        assert_eq!(cast_json(int16, "32767", CastType::Int8), "-1");
        assert_eq!(cast_json(int16, "-129", CastType::Int8), "127");
        assert_eq!(cast_json(double, "-2.9", CastType::Int32), "-2");
        assert_eq!(cast_json(double, "1.0E20", CastType::Int32), "2147483647");
        assert_eq!(cast_json(double, "\"NaN\"", CastType::Int32), "0");
        assert_eq!(cast_json(int64, "4294967297", CastType::Int32), "1");
        // Widened and printed as Float/Double.toString.
        assert_eq!(
            cast_json(float, "0.1", CastType::Float64),
            "0.10000000149011612"
        );
        assert_eq!(cast_json(int64, "10000000000", CastType::Float32), "1.0E10");
        assert_eq!(cast_json(int64, "3", CastType::Float64), "3.0");
        assert_eq!(cast_json(double, "1.0E-4", CastType::String), "\"1.0E-4\"");
        assert_eq!(cast_json(double, "123.5", CastType::String), "\"123.5\"");
        assert_eq!(cast_json(double, "0.5", CastType::Boolean), "false");
        assert_eq!(cast_json(int64, "-3", CastType::Boolean), "true");
        let boolean = r#"{"type":"boolean","optional":false}"#;
        assert_eq!(cast_json(boolean, "true", CastType::Int16), "1");
        assert_eq!(cast_json(boolean, "false", CastType::Float32), "0.0");
        assert_eq!(cast_json(boolean, "true", CastType::String), "\"true\"");
    }

    #[test]
    fn strings_parse_as_java_parses_them() {
        let text = r#"{"type":"string","optional":true}"#;
        assert_eq!(cast_json(text, "\"+42\"", CastType::Int32), "42");
        assert_eq!(cast_json(text, "\" 2.5 \"", CastType::Float64), "2.5");
        assert_eq!(cast_json(text, "\"TRUE\"", CastType::Boolean), "true");
        assert_eq!(cast_json(text, "\"yes\"", CastType::Boolean), "false");
        assert!(cast(Some(text), "\"300\"", CastType::Int8).is_err());
        assert_eq!(cast_json(text, "\"300\"", CastType::Int16), "300");
        assert_eq!(
            cast(Some(text), "\"x1\"", CastType::Int64).unwrap_err(),
            "Value (x1) was out of range for requested data type"
        );
    }

    #[test]
    fn decimals_bytes_and_dates_cast_as_their_java_objects() {
        // 12.3450 (unscaled 123450 = 0x01E23A, scale 4).
        let decimal = r#"{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"4","connect.decimal.precision":"10"}}"#;
        assert_eq!(
            cast_json(decimal, "\"AeI6\"", CastType::String),
            "\"12.3450\""
        );
        assert_eq!(cast_json(decimal, "\"AeI6\"", CastType::Float64), "12.345");
        assert_eq!(cast_json(decimal, "\"AeI6\"", CastType::Int32), "12");
        // -1 (0xFF) scale 4: -0.0001; scale 8: -1E-8.
        assert_eq!(
            cast_json(decimal, "\"/w==\"", CastType::String),
            "\"-0.0001\""
        );
        assert_eq!(big_decimal_to_string(-1, 8), "-1E-8");
        assert_eq!(big_decimal_to_string(123, -2), "1.23E+4");
        let bytes = r#"{"type":"bytes","optional":true}"#;
        assert_eq!(
            cast_json(bytes, "\"3q2+7w==\"", CastType::String),
            "\"3q2+7w==\""
        );
        assert!(cast(Some(bytes), "\"3q2+7w==\"", CastType::Int32).is_err());
        let date = r#"{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Date","version":1}"#;
        assert_eq!(cast_json(date, "19000", CastType::String), "\"2022-01-08\"");
        assert_eq!(cast_json(date, "19000", CastType::Int64), "19000");
        let structure = r#"{"type":"struct","fields":[],"optional":true}"#;
        assert!(
            cast(Some(structure), "{}", CastType::String)
                .unwrap_err()
                .contains("casting from STRUCT")
        );
    }

    #[test]
    fn fields_and_whole_values_get_connects_schemas() {
        let record = |schema: &str, value: &str| Record {
            topic: "t".into(),
            key: Data::null_with(Schema::None),
            value: Data {
                schema: Schema::Json(schema.into()),
                value: Some(value.into()),
            },
            headers: Vec::new(),
            header_schemas: Vec::new(),
            partition: None,
        };
        let schema = r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"default":5,"field":"ts"},{"type":"string","optional":true,"field":"v"}],"optional":false,"name":"p.t.Value"}"#;
        let cast = Cast {
            part: Part::Value,
            whole: None,
            fields: vec![
                ("ts".into(), CastType::String),
                ("id".into(), CastType::Int8),
            ],
        };
        let out = cast
            .apply(record(schema, r#"{"id":300,"ts":7,"v":"x"}"#))
            .unwrap();
        assert_eq!(
            out.value.value.as_deref(),
            Some(r#"{"id":44,"ts":"7","v":"x"}"#)
        );
        assert_eq!(
            out.value.schema,
            Schema::Json(r#"{"type":"struct","fields":[{"type":"int8","optional":false,"field":"id"},{"type":"string","optional":true,"default":"5","field":"ts"},{"type":"string","optional":true,"field":"v"}],"optional":false,"name":"p.t.Value"}"#.into())
        );
        let whole = Cast {
            part: Part::Value,
            whole: Some(CastType::String),
            fields: vec![],
        };
        let out = whole
            .apply(record(
                r#"{"type":"int32","optional":false,"name":"n"}"#,
                "12",
            ))
            .unwrap();
        assert_eq!(out.value.value.as_deref(), Some("\"12\""));
        assert_eq!(
            out.value.schema,
            Schema::Json(r#"{"type":"string","optional":false,"name":"n"}"#.into())
        );
        // A null value is left as it is, schema and all.
        let mut null = record(schema, "{}");
        null.value.value = None;
        let out = cast.apply(null).unwrap();
        assert_eq!(out.value.schema, Schema::Json(schema.into()));
        // Without schemas: the JSON's types.
        let mut plain = record(schema, r#"{"id":2.5,"ts":true}"#);
        plain.value.schema = Schema::Opaque;
        let out = cast.apply(plain).unwrap();
        assert_eq!(out.value.value.as_deref(), Some(r#"{"id":2,"ts":"true"}"#));
    }
}
