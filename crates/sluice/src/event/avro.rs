//! Avro in the Confluent wire format, as Kafka Connect's Avro converters write Debezium's events.
//!
//! A change event is a Connect schema ([`super::schema`]) and a payload; `JsonConverter` writes
//! the payload as JSON, an Avro converter as Avro binary under the Avro schema it derives from
//! the Connect schema (Confluent's `AvroData.fromConnectSchema`, which Apicurio's converter
//! ports): this module is that derivation and that encoding, so every source that can describe
//! its events with Connect schemas gets Avro from its JSON payloads, as a Connect worker gets it
//! from any connector by changing converters.
//!
//! The schema derivation, rule for rule:
//! - `int8`/`int16` are Avro `int` with `"connect.type":"int8"`/`"int16"`; `int32` `int`,
//!   `int64` `long`, `float` `float`, `double` `double`, `boolean`, `string`, `bytes`;
//!   `array` → `array`; `map` with string keys → `map`, else an array of
//!   `io.confluent.connect.avro.MapEntry` records (`key`, `value`);
//! - a `struct` is a `record` named by its Connect name (namespace: up to the last dot), or
//!   `io.confluent.connect.avro.ConnectDefault` (then `ConnectDefault2`, …) without one;
//! - an optional schema is the union `["null", T]`, or `[T, "null"]` when it has a default;
//!   a field of an optional schema defaults to `null` without a default of its own;
//! - Connect's metadata become properties of the base schema in this order: `connect.doc`,
//!   `connect.version`, `connect.parameters`, `connect.default`, `connect.name`,
//!   `connect.type`; `org.apache.kafka.connect.data.Decimal` adds `logicalType: decimal` with
//!   `precision` (`connect.decimal.precision`, else 64) and `scale`;
//! - a named type is defined once; later uses name it (Avro's rule), short when it is in the
//!   enclosing namespace, as Avro's Java library writes schemas.
//!
//! Values: a null for a required (non-optional) field is written as the type's zero (`""`, 0,
//! `false`, no bytes), as Debezium fills the `before` image of a delete whose old row holds
//! only the key (Connect's required fields cannot be null).
//!
//! The encoder is written here rather than taken from the `apache-avro` crate: it encodes
//! straight from the JSON payload, guided by the Connect schema (which knows what Avro's schema
//! does not: base64 bytes, `connect.type`), without building a value tree per record; Avro's
//! binary encoding is a page of the specification (zig-zag varints, length-prefixed bytes,
//! records in field order, union branch indexes, blocked arrays and maps).

use std::collections::HashSet;
use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value;

use super::schema::{Schema, SchemaType};

/// The Confluent wire format's first byte.
pub const MAGIC: u8 = 0;

const NAMESPACE: &str = "io.confluent.connect.avro";
const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// Why a payload could not be written as Avro.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cannot write the value at {path} as Avro: {problem}")]
pub struct AvroError {
    /// The field path (`after.amount`).
    pub path: String,
    /// What was wrong.
    pub problem: String,
}

/// The Avro schema (JSON text) of a Connect schema, as `AvroData.fromConnectSchema` derives it.
///
/// # Errors
///
/// A field or record name Avro does not allow (`[A-Za-z_][A-Za-z0-9_]*`), named.
pub fn schema_text(schema: &Schema) -> Result<String, AvroError> {
    let mut writer = SchemaWriter {
        out: String::with_capacity(2048),
        defined: HashSet::new(),
        space: None,
        default_names: 0,
    };
    writer.write(schema, false, "")?;
    Ok(writer.out)
}

/// The full name of the record a Connect struct schema becomes (`RecordNameStrategy`'s subject).
pub fn record_name(schema: &Schema) -> String {
    match &schema.name {
        Some(name) => name.clone(),
        None => format!("{NAMESPACE}.ConnectDefault"),
    }
}

struct SchemaWriter {
    out: String,
    /// Full names already defined.
    defined: HashSet<String>,
    /// The enclosing record's namespace.
    space: Option<String>,
    default_names: u32,
}

fn split_name(name: &str) -> (Option<&str>, &str) {
    match name.rfind('.') {
        Some(dot) => (Some(&name[..dot]), &name[dot + 1..]),
        None => (None, name),
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn json_str(out: &mut String, text: &str) {
    // serde_json's escaping: the same as Jackson's for every character that matters to a parser.
    out.push_str(&serde_json::to_string(text).expect("a string serializes"));
}

impl SchemaWriter {
    fn error(path: &str, problem: String) -> AvroError {
        AvroError {
            path: if path.is_empty() {
                "(top)".into()
            } else {
                path.into()
            },
            problem,
        }
    }

    /// Writes `schema`; `ignore_optional` writes the base type of an optional schema.
    fn write(
        &mut self,
        schema: &Schema,
        ignore_optional: bool,
        path: &str,
    ) -> Result<(), AvroError> {
        if schema.optional && !ignore_optional {
            if schema.default.is_some() {
                self.out.push('[');
                self.write(schema, true, path)?;
                self.out.push_str(",\"null\"]");
            } else {
                self.out.push_str("[\"null\",");
                self.write(schema, true, path)?;
                self.out.push(']');
            }
            return Ok(());
        }
        let (connect_type, base) = match &schema.schema_type {
            SchemaType::Int8 => (Some("int8"), "int"),
            SchemaType::Int16 => (Some("int16"), "int"),
            SchemaType::Int32 => (None, "int"),
            SchemaType::Int64 => (None, "long"),
            SchemaType::Float32 => (None, "float"),
            SchemaType::Float64 => (None, "double"),
            SchemaType::Boolean => (None, "boolean"),
            SchemaType::String => (None, "string"),
            SchemaType::Bytes => (None, "bytes"),
            SchemaType::Array(_) => (None, "array"),
            SchemaType::Map(keys, _)
                if keys.schema_type == SchemaType::String && !keys.optional =>
            {
                (None, "map")
            }
            SchemaType::Map(..) => (None, "map_entries"),
            SchemaType::Struct(_) => (None, "record"),
        };
        let props = self.props(schema, connect_type);
        match &schema.schema_type {
            SchemaType::Struct(fields) => {
                let full = match &schema.name {
                    Some(name) => name.clone(),
                    None => {
                        self.default_names += 1;
                        if self.default_names > 1 {
                            format!("{NAMESPACE}.ConnectDefault{}", self.default_names)
                        } else {
                            format!("{NAMESPACE}.ConnectDefault")
                        }
                    }
                };
                let (space, name) = split_name(&full);
                if !valid_name(name) {
                    return Err(Self::error(
                        path,
                        format!("{name:?} (of {full:?}) is not a valid Avro record name"),
                    ));
                }
                if self.defined.contains(&full) {
                    self.name_ref(&full);
                    return Ok(());
                }
                self.defined.insert(full.clone());
                self.out.push_str("{\"type\":\"record\",\"name\":");
                json_str(&mut self.out, name);
                if let Some(space) = space
                    && self.space.as_deref() != Some(space)
                {
                    self.out.push_str(",\"namespace\":");
                    json_str(&mut self.out, space);
                }
                self.out.push_str(",\"fields\":[");
                let outer = std::mem::replace(&mut self.space, space.map(str::to_owned));
                for (n, field) in fields.iter().enumerate() {
                    if n > 0 {
                        self.out.push(',');
                    }
                    let field_path = if path.is_empty() {
                        field.name.clone()
                    } else {
                        format!("{path}.{}", field.name)
                    };
                    self.field(&field.name, &field.schema, &field_path)?;
                }
                self.space = outer;
                self.out.push(']');
                self.out.push_str(&props);
                self.out.push('}');
                return Ok(());
            }
            SchemaType::Array(items) => {
                self.out.push_str("{\"type\":\"array\",\"items\":");
                self.write(items, false, path)?;
            }
            SchemaType::Map(keys, values) if base == "map" => {
                let _ = keys;
                self.out.push_str("{\"type\":\"map\",\"values\":");
                self.write(values, false, path)?;
            }
            SchemaType::Map(keys, values) => {
                self.out.push_str("{\"type\":\"array\",\"items\":");
                let full = format!("{NAMESPACE}.MapEntry");
                if self.defined.contains(&full) {
                    self.name_ref(&full);
                } else {
                    self.defined.insert(full);
                    self.out
                        .push_str("{\"type\":\"record\",\"name\":\"MapEntry\"");
                    if self.space.as_deref() != Some(NAMESPACE) {
                        self.out
                            .push_str(",\"namespace\":\"io.confluent.connect.avro\"");
                    }
                    self.out.push_str(",\"fields\":[");
                    let outer = self.space.replace(NAMESPACE.to_owned());
                    self.field("key", keys, path)?;
                    self.out.push(',');
                    self.field("value", values, path)?;
                    self.space = outer;
                    self.out.push_str("]}");
                }
            }
            _ => {
                if props.is_empty() {
                    self.out.push('"');
                    self.out.push_str(base);
                    self.out.push('"');
                    return Ok(());
                }
                self.out.push_str("{\"type\":\"");
                self.out.push_str(base);
                self.out.push('"');
            }
        }
        self.out.push_str(&props);
        self.out.push('}');
        Ok(())
    }

    fn name_ref(&mut self, full: &str) {
        let (space, name) = split_name(full);
        if space.is_some() && space == self.space.as_deref() {
            json_str(&mut self.out, name);
        } else {
            json_str(&mut self.out, full);
        }
    }

    fn field(&mut self, name: &str, schema: &Schema, path: &str) -> Result<(), AvroError> {
        if !valid_name(name) {
            return Err(Self::error(
                path,
                format!(
                    "{name:?} is not a valid Avro field name (letters, digits and _, not starting with a digit)"
                ),
            ));
        }
        self.out.push_str("{\"name\":");
        json_str(&mut self.out, name);
        self.out.push_str(",\"type\":");
        self.write(schema, false, path)?;
        match &schema.default {
            Some(default) => {
                self.out.push_str(",\"default\":");
                let value = avro_default(schema, default).map_err(|p| Self::error(path, p))?;
                self.out.push_str(&value.to_string());
            }
            None if schema.optional => self.out.push_str(",\"default\":null"),
            None => {}
        }
        self.out.push('}');
        Ok(())
    }

    /// The Connect metadata properties, each as `,"key":value`, in `AvroData`'s order.
    fn props(&self, schema: &Schema, connect_type: Option<&str>) -> String {
        let mut props = String::new();
        if let Some(doc) = &schema.doc {
            props.push_str(",\"connect.doc\":");
            json_str(&mut props, doc);
        }
        if let Some(version) = schema.version {
            let _ = write!(props, ",\"connect.version\":{version}");
        }
        if !schema.parameters.is_empty() {
            props.push_str(",\"connect.parameters\":{");
            for (n, (key, value)) in schema.parameters.iter().enumerate() {
                if n > 0 {
                    props.push(',');
                }
                json_str(&mut props, key);
                props.push(':');
                json_str(&mut props, value);
            }
            props.push('}');
        }
        if let Some(default) = &schema.default
            && let Ok(value) = avro_default(schema, default)
        {
            props.push_str(",\"connect.default\":");
            props.push_str(&value.to_string());
        }
        if let Some(name) = &schema.name {
            props.push_str(",\"connect.name\":");
            json_str(&mut props, name);
        }
        if let Some(connect_type) = connect_type {
            let _ = write!(props, ",\"connect.type\":\"{connect_type}\"");
        }
        if schema.name.as_deref() == Some(DECIMAL) {
            let parameter = |key: &str| {
                schema
                    .parameters
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.parse::<i64>().ok())
            };
            let precision = parameter("connect.decimal.precision").unwrap_or(64);
            let scale = parameter("scale").unwrap_or(0);
            let _ = write!(
                props,
                ",\"logicalType\":\"decimal\",\"precision\":{precision},\"scale\":{scale}"
            );
        }
        props
    }
}

/// A Connect default (JSON as `JsonConverter` writes it) as Avro's default: the same JSON but
/// for bytes, which Avro writes as a string of ISO-8859-1 characters, one per byte.
fn avro_default(schema: &Schema, default: &str) -> Result<Value, String> {
    let value: Value = serde_json::from_str(default)
        .map_err(|e| format!("the default {default:?} is not JSON: {e}"))?;
    connect_default_to_avro(schema, value)
}

fn connect_default_to_avro(schema: &Schema, value: Value) -> Result<Value, String> {
    Ok(match (&schema.schema_type, value) {
        (SchemaType::Bytes, Value::String(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| format!("the bytes default is not base64: {e}"))?;
            Value::String(bytes.iter().map(|&b| char::from(b)).collect())
        }
        (SchemaType::Struct(fields), Value::Object(mut members)) => {
            let mut out = serde_json::Map::new();
            for field in fields {
                let member = members.remove(&field.name).unwrap_or(Value::Null);
                out.insert(
                    field.name.clone(),
                    connect_default_to_avro(&field.schema, member)?,
                );
            }
            Value::Object(out)
        }
        (SchemaType::Array(items), Value::Array(elements)) => Value::Array(
            elements
                .into_iter()
                .map(|e| connect_default_to_avro(items, e))
                .collect::<Result<_, _>>()?,
        ),
        (_, value) => value,
    })
}

/// Appends the Confluent wire format's header: the magic byte and the schema id (big-endian).
pub fn write_header(id: u32, out: &mut Vec<u8>) {
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
}

/// Writes `payload` (JSON as `JsonConverter` writes a value of `schema`) as Avro binary.
///
/// # Errors
///
/// A payload that does not match the schema (a bug in the source's encoder, or a value Avro
/// cannot hold), with the field's path.
pub fn write_value(schema: &Schema, payload: &[u8], out: &mut Vec<u8>) -> Result<(), AvroError> {
    let value: Value = serde_json::from_slice(payload).map_err(|e| AvroError {
        path: "(top)".into(),
        problem: format!("the payload is not JSON: {e}"),
    })?;
    let mut path = String::new();
    write_datum(schema, &value, out, &mut path)
}

fn write_long(value: i64, out: &mut Vec<u8>) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    loop {
        if zigzag < 0x80 {
            out.push(zigzag as u8);
            return;
        }
        out.push((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
}

fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_long(bytes.len() as i64, out);
    out.extend_from_slice(bytes);
}

fn mismatch(path: &str, expected: &str, value: &Value) -> AvroError {
    let found = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    AvroError {
        path: if path.is_empty() {
            "(top)".into()
        } else {
            path.to_owned()
        },
        problem: format!("expected {expected}, found {found}"),
    }
}

fn float_of(path: &str, value: &Value) -> Result<f64, AvroError> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| mismatch(path, "a number", value)),
        // JsonConverter's NaN and infinities.
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(mismatch(path, "a number", value)),
        },
        _ => Err(mismatch(path, "a number", value)),
    }
}

fn write_datum(
    schema: &Schema,
    value: &Value,
    out: &mut Vec<u8>,
    path: &mut String,
) -> Result<(), AvroError> {
    if schema.optional {
        // The union's branch: `["null", T]`, or `[T, "null"]` with a default.
        let null_first = schema.default.is_none();
        if value.is_null() {
            write_long(if null_first { 0 } else { 1 }, out);
            return Ok(());
        }
        write_long(if null_first { 1 } else { 0 }, out);
    }
    match (&schema.schema_type, value) {
        (SchemaType::Boolean, Value::Bool(b)) => out.push(u8::from(*b)),
        (SchemaType::Boolean, Value::Null) => out.push(0),
        (
            SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64,
            Value::Number(n),
        ) => {
            let v = n
                .as_i64()
                .ok_or_else(|| mismatch(path, "an integer", value))?;
            let fits = match schema.schema_type {
                SchemaType::Int8 => i8::try_from(v).is_ok(),
                SchemaType::Int16 => i16::try_from(v).is_ok(),
                SchemaType::Int32 => i32::try_from(v).is_ok(),
                _ => true,
            };
            if !fits {
                return Err(AvroError {
                    path: path.clone(),
                    problem: format!("{v} is out of the field's integer range"),
                });
            }
            write_long(v, out);
        }
        (
            SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64,
            Value::Null,
        ) => out.push(0),
        (SchemaType::Float32, Value::Null) => out.extend_from_slice(&0f32.to_le_bytes()),
        (SchemaType::Float64, Value::Null) => out.extend_from_slice(&0f64.to_le_bytes()),
        (SchemaType::Float32, _) => {
            out.extend_from_slice(&(float_of(path, value)? as f32).to_le_bytes());
        }
        (SchemaType::Float64, _) => out.extend_from_slice(&float_of(path, value)?.to_le_bytes()),
        (SchemaType::String, Value::String(s)) => write_bytes(s.as_bytes(), out),
        (SchemaType::String, Value::Null) => out.push(0),
        (SchemaType::Bytes, Value::String(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| AvroError {
                    path: path.clone(),
                    problem: format!("bytes are not base64: {e}"),
                })?;
            write_bytes(&bytes, out);
        }
        (SchemaType::Bytes, Value::Null) => out.push(0),
        (SchemaType::Array(items), Value::Array(elements)) => {
            if !elements.is_empty() {
                write_long(elements.len() as i64, out);
                for (n, element) in elements.iter().enumerate() {
                    let len = path.len();
                    let _ = write!(path, "[{n}]");
                    write_datum(items, element, out, path)?;
                    path.truncate(len);
                }
            }
            out.push(0);
        }
        (SchemaType::Array(_), Value::Null) => out.push(0),
        (SchemaType::Map(keys, values), Value::Object(members)) => {
            let string_keys = keys.schema_type == SchemaType::String && !keys.optional;
            if !members.is_empty() {
                write_long(members.len() as i64, out);
                for (key, member) in members {
                    if string_keys {
                        write_bytes(key.as_bytes(), out);
                    } else {
                        write_datum(keys, &Value::String(key.clone()), out, path)?;
                    }
                    let len = path.len();
                    let _ = write!(path, "[{key:?}]");
                    write_datum(values, member, out, path)?;
                    path.truncate(len);
                }
            }
            out.push(0);
        }
        (SchemaType::Map(..), Value::Null) => out.push(0),
        (SchemaType::Struct(fields), Value::Object(members)) => {
            for field in fields {
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(&field.name);
                let member = members.get(&field.name).unwrap_or(&Value::Null);
                write_datum(&field.schema, member, out, path)?;
                path.truncate(len);
            }
        }
        (SchemaType::Struct(fields), Value::Null) => {
            for field in fields {
                write_datum(&field.schema, &Value::Null, out, path)?;
            }
        }
        (schema_type, value) => {
            return Err(mismatch(path, schema_type_name(schema_type), value));
        }
    }
    Ok(())
}

fn schema_type_name(schema_type: &SchemaType) -> &'static str {
    match schema_type {
        SchemaType::Boolean => "a boolean",
        SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64 => {
            "an integer"
        }
        SchemaType::Float32 | SchemaType::Float64 => "a number",
        SchemaType::String => "a string",
        SchemaType::Bytes => "base64 bytes",
        SchemaType::Struct(_) => "an object",
        SchemaType::Array(_) => "an array",
        SchemaType::Map(..) => "an object (a map)",
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{Field, RenderedSchemas};
    use super::*;

    fn envelope() -> Schema {
        let columns = vec![
            Field::new("id", Schema::of(SchemaType::Int32, false)),
            Field::new("name", Schema::of(SchemaType::String, true)),
            Field::new("small", Schema::of(SchemaType::Int16, false)),
            Field::new("price", Schema::decimal(2, Some(8), true)),
        ];
        let key = vec![Field::new("id", Schema::of(SchemaType::Int32, false))];
        let source = Schema::of(
            SchemaType::Struct(super::super::schema::source_common_fields()),
            false,
        )
        .named("io.debezium.connector.postgresql.Source", Some(1));
        RenderedSchemas::render("p.public.t", columns, Some(key), source, Vec::new())
            .envelope
            .clone()
    }

    #[test]
    fn an_envelope_schema_is_avro_datas() {
        let text = schema_text(&envelope()).unwrap();
        let schema: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(schema["name"], "Envelope");
        assert_eq!(schema["namespace"], "p.public.t");
        assert_eq!(schema["connect.version"], 2);
        assert_eq!(schema["connect.name"], "p.public.t.Envelope");
        let before = &schema["fields"][0];
        assert_eq!(before["name"], "before");
        assert_eq!(before["default"], Value::Null);
        assert_eq!(before["type"][0], "null");
        let row = &before["type"][1];
        assert_eq!(row["name"], "Value");
        assert!(row.get("namespace").is_none(), "same namespace: {row}");
        assert_eq!(row["fields"][2]["type"]["connect.type"], "int16");
        let price = &row["fields"][3];
        assert_eq!(price["type"][0], "null");
        assert_eq!(price["type"][1]["logicalType"], "decimal");
        assert_eq!(price["type"][1]["precision"], 8);
        assert_eq!(price["type"][1]["scale"], 2);
        // The second use of the row record names it.
        assert_eq!(
            schema["fields"][1]["type"],
            serde_json::json!(["null", "Value"])
        );
        let source = &schema["fields"][2]["type"];
        assert_eq!(source["namespace"], "io.debezium.connector.postgresql");
        // An optional field with a default: `[T, "null"]`, the default and connect.default.
        let snapshot = &source["fields"][4];
        assert_eq!(snapshot["name"], "snapshot");
        assert_eq!(snapshot["default"], "false");
        assert_eq!(snapshot["type"][1], "null");
        assert_eq!(snapshot["type"][0]["connect.default"], "false");
        assert_eq!(snapshot["type"][0]["connect.name"], "io.debezium.data.Enum");
    }

    #[test]
    fn values_are_avro_binary() {
        let schema = Schema::of(
            SchemaType::Struct(vec![
                Field::new("a", Schema::of(SchemaType::Int64, false)),
                Field::new("b", Schema::of(SchemaType::String, true)),
                Field::new("c", Schema::of(SchemaType::Bytes, false)),
                Field::new("d", Schema::of(SchemaType::Boolean, false)),
                Field::new("e", Schema::of(SchemaType::Float64, false)),
            ]),
            false,
        );
        let mut out = Vec::new();
        write_value(
            &schema,
            br#"{"a":-3,"b":"hi","c":"AQI=","d":true,"e":"NaN"}"#,
            &mut out,
        )
        .unwrap();
        let mut expected = vec![5, 2, 4, b'h', b'i', 4, 1, 2, 1];
        expected.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(out, expected);
        // A required field's null is its type's zero (Debezium's delete with only the key).
        out.clear();
        write_value(
            &schema,
            br#"{"a":1,"b":null,"c":null,"d":null,"e":null}"#,
            &mut out,
        )
        .unwrap();
        let mut expected = vec![2, 0, 0, 0];
        expected.extend_from_slice(&0f64.to_le_bytes());
        assert_eq!(out, expected);
        let error = write_value(&schema, br#"{"a":"x"}"#, &mut Vec::new()).unwrap_err();
        assert_eq!(error.path, "a");
    }

    #[test]
    fn varints_are_zigzag() {
        for (value, bytes) in [
            (0i64, vec![0u8]),
            (-1, vec![1]),
            (1, vec![2]),
            (-64, vec![0x7f]),
            (64, vec![0x80, 1]),
            (
                i64::MIN,
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1],
            ),
        ] {
            let mut out = Vec::new();
            write_long(value, &mut out);
            assert_eq!(out, bytes, "{value}");
        }
    }

    #[test]
    fn invalid_names_are_named() {
        let schema = Schema::of(
            SchemaType::Struct(vec![Field::new(
                "a-b",
                Schema::of(SchemaType::Int64, false),
            )]),
            false,
        )
        .named("x.y.Value", None);
        let error = schema_text(&schema).unwrap_err();
        assert_eq!(error.path, "a-b");
        assert!(
            error.problem.contains("not a valid Avro field name"),
            "{error}"
        );
    }
}
