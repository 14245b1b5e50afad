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
//!   `precision` (`connect.decimal.precision`, else 64) and `scale`; Connect's `Date`, `Time`
//!   and `Timestamp` add `logicalType` `date`, `time-millis`, `timestamp-millis`;
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

/// A JSON payload as Avro in the Confluent wire format (`id`: the schema's registry id); `table`
/// names the table in the panic. A payload its schema cannot hold is a bug: the panic makes the
/// delivery core apply `delivery.on_permanent_error` to the change.
pub fn to_wire(table: &str, schema: &Schema, id: u32, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() / 2 + 16);
    write_header(id, &mut out);
    if let Err(error) = write_value(schema, json, &mut out) {
        panic!("{table}: {error}");
    }
    out
}

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
        // Connect's logical types of time (`time.precision.mode=connect`), as `AvroData` marks them.
        let time = match schema.name.as_deref() {
            Some("org.apache.kafka.connect.data.Date") => Some("date"),
            Some("org.apache.kafka.connect.data.Time") => Some("time-millis"),
            Some("org.apache.kafka.connect.data.Timestamp") => Some("timestamp-millis"),
            _ => None,
        };
        if let Some(logical) = time {
            let _ = write!(props, ",\"logicalType\":\"{logical}\"");
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
            // The converter's text: `scale` and `precision` first, `logicalType` last
            // (`"type":"bytes","scale":2,"precision":8,"connect.version":1,…,
            // "logicalType":"decimal"`, the captures' schemas.json).
            props.insert_str(0, &format!(",\"scale\":{scale},\"precision\":{precision}"));
            props.push_str(",\"logicalType\":\"decimal\"");
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
/// One pass over the JSON text, guided by the schema, with no value tree: an object whose
/// members come in the schema's field order (as every sluice encoder writes them) is streamed;
/// one in another order, with members missing or unknown, is indexed first (its members'
/// spans) and written in the schema's order.
///
/// # Errors
///
/// A payload that does not match the schema (a bug in the source's encoder, or a value Avro
/// cannot hold), with the field's path.
pub fn write_value(schema: &Schema, payload: &[u8], out: &mut Vec<u8>) -> Result<(), AvroError> {
    let mut reader = Reader {
        text: payload,
        at: 0,
        scratch: Vec::new(),
    };
    let mut path = String::new();
    reader.datum(schema, out, &mut path)?;
    reader.ws();
    if reader.at != payload.len() {
        return Err(reader.error(&path, "text after the value"));
    }
    Ok(())
}

/// The JSON reader of [`write_value`].
struct Reader<'a> {
    text: &'a [u8],
    at: usize,
    scratch: Vec<u8>,
}

/// Nesting allowed when skipping a value the schema does not name (sluice's own payloads
/// nest a few levels).
const MAX_SKIP_DEPTH: usize = 128;

impl<'a> Reader<'a> {
    fn error(&self, path: &str, problem: &str) -> AvroError {
        AvroError {
            path: if path.is_empty() {
                "(top)".into()
            } else {
                path.to_owned()
            },
            problem: format!("{problem} (at byte {})", self.at),
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        self.ws();
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    /// A number's text.
    fn number(&mut self) -> &'a [u8] {
        self.ws();
        let start = self.at;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.text.get(self.at) {
            self.at += 1;
        }
        &self.text[start..self.at]
    }

    /// A string's content, unescaped: borrowed when it has no escape, else in `scratch`
    /// (`Err(())` when it is not a valid JSON string).
    fn string(&mut self) -> Result<StringRef<'a>, ()> {
        if !self.eat(b'"') {
            return Err(());
        }
        let start = self.at;
        match memchr::memchr2(b'"', b'\\', &self.text[self.at..]) {
            Some(n) if self.text[self.at + n] == b'"' => {
                self.at += n + 1;
                return Ok(StringRef::Borrowed(&self.text[start..start + n]));
            }
            None => return Err(()),
            Some(_) => {}
        }
        // Escapes: through serde_json, from the opening quote.
        let mut stream =
            serde_json::Deserializer::from_slice(&self.text[start - 1..]).into_iter::<String>();
        let text = stream.next().ok_or(())?.map_err(|_| ())?;
        self.at = start - 1 + stream.byte_offset();
        self.scratch.clear();
        self.scratch.extend_from_slice(text.as_bytes());
        Ok(StringRef::Scratch)
    }

    fn string_bytes(&self, s: &StringRef<'a>) -> &[u8] {
        match s {
            StringRef::Borrowed(b) => b,
            StringRef::Scratch => &self.scratch,
        }
    }

    /// Skips one value; returns its span.
    fn skip(&mut self, path: &str) -> Result<(usize, usize), AvroError> {
        self.ws();
        let start = self.at;
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Some(b'{' | b'[') => {
                    depth += 1;
                    if depth > MAX_SKIP_DEPTH {
                        return Err(self.error(path, "nested too deep"));
                    }
                    self.at += 1;
                    continue;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.at += 1;
                }
                Some(b'"') => {
                    self.string()
                        .map_err(|()| self.error(path, "an invalid string"))?;
                    if depth > 0 && self.eat(b':') {
                        continue;
                    }
                }
                Some(b'n') if self.literal(b"null") => {}
                Some(b't') if self.literal(b"true") => {}
                Some(b'f') if self.literal(b"false") => {}
                Some(b'-' | b'0'..=b'9') => {
                    self.number();
                }
                _ => return Err(self.error(path, "not a JSON value")),
            }
            if depth == 0 {
                return Ok((start, self.at));
            }
            if !self.eat(b',') && !matches!(self.peek(), Some(b'}' | b']')) {
                return Err(self.error(path, "expected , or a closing bracket"));
            }
        }
    }

    /// Writes one value of `schema`.
    fn datum(
        &mut self,
        schema: &Schema,
        out: &mut Vec<u8>,
        path: &mut String,
    ) -> Result<(), AvroError> {
        let is_null = self.peek() == Some(b'n');
        if schema.optional {
            let null_first = schema.default.is_none();
            if is_null {
                if !self.literal(b"null") {
                    return Err(self.error(path, "not a JSON value"));
                }
                write_long(if null_first { 0 } else { 1 }, out);
                return Ok(());
            }
            write_long(if null_first { 1 } else { 0 }, out);
        } else if is_null {
            if !self.literal(b"null") {
                return Err(self.error(path, "not a JSON value"));
            }
            write_zero(schema, out);
            return Ok(());
        }
        match &schema.schema_type {
            SchemaType::Boolean => {
                if self.literal(b"true") {
                    out.push(1);
                } else if self.literal(b"false") {
                    out.push(0);
                } else {
                    return Err(self.error(path, "expected a boolean"));
                }
            }
            SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64 => {
                let text = self.number();
                let v: i64 = std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| self.error(path, "expected an integer"))?;
                let fits = match schema.schema_type {
                    SchemaType::Int8 => i8::try_from(v).is_ok(),
                    SchemaType::Int16 => i16::try_from(v).is_ok(),
                    SchemaType::Int32 => i32::try_from(v).is_ok(),
                    _ => true,
                };
                if !fits {
                    return Err(
                        self.error(path, &format!("{v} is out of the field's integer range"))
                    );
                }
                write_long(v, out);
            }
            SchemaType::Float32 | SchemaType::Float64 => {
                let v = if self.peek() == Some(b'"') {
                    // JsonConverter's NaN and infinities.
                    let s = self
                        .string()
                        .map_err(|()| self.error(path, "an invalid string"))?;
                    match self.string_bytes(&s) {
                        b"NaN" => f64::NAN,
                        b"Infinity" => f64::INFINITY,
                        b"-Infinity" => f64::NEG_INFINITY,
                        _ => return Err(self.error(path, "expected a number")),
                    }
                } else {
                    let text = self.number();
                    std::str::from_utf8(text)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.error(path, "expected a number"))?
                };
                if schema.schema_type == SchemaType::Float32 {
                    out.extend_from_slice(&(v as f32).to_le_bytes());
                } else {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            SchemaType::String => {
                let s = self
                    .string()
                    .map_err(|()| self.error(path, "expected a string"))?;
                write_bytes(self.string_bytes(&s), out);
            }
            SchemaType::Bytes => {
                let s = self
                    .string()
                    .map_err(|()| self.error(path, "expected base64 bytes"))?;
                // Decoded first: Avro's length prefix comes before the bytes.
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(self.string_bytes(&s))
                    .map_err(|e| self.error(path, &format!("bytes are not base64: {e}")))?;
                write_bytes(&decoded, out);
            }
            SchemaType::Struct(fields) => self.record(fields, out, path)?,
            SchemaType::Array(items) => {
                if !self.eat(b'[') {
                    return Err(self.error(path, "expected an array"));
                }
                let mut spans = Vec::new();
                if !self.eat(b']') {
                    loop {
                        spans.push(self.skip(path)?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.error(path, "expected , or ]"));
                        }
                    }
                }
                let end = self.at;
                if !spans.is_empty() {
                    write_long(spans.len() as i64, out);
                    for (n, (start, _)) in spans.iter().enumerate() {
                        let len = path.len();
                        let _ = write!(path, "[{n}]");
                        self.at = *start;
                        self.datum(items, out, path)?;
                        path.truncate(len);
                    }
                }
                self.at = end;
                out.push(0);
            }
            SchemaType::Map(keys, values) => {
                if !self.eat(b'{') {
                    return Err(self.error(path, "expected an object (a map)"));
                }
                let string_keys = keys.schema_type == SchemaType::String && !keys.optional;
                let mut entries = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        let key = self.skip(path)?;
                        if !self.eat(b':') {
                            return Err(self.error(path, "expected :"));
                        }
                        entries.push((key, self.skip(path)?));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.error(path, "expected , or }"));
                        }
                    }
                }
                let end = self.at;
                if !entries.is_empty() {
                    write_long(entries.len() as i64, out);
                    for ((key, _), (value, _)) in entries {
                        self.at = key;
                        if string_keys {
                            let s = self.string().map_err(|()| self.error(path, "a map key"))?;
                            write_bytes(self.string_bytes(&s), out);
                        } else {
                            self.datum(keys, out, path)?;
                        }
                        self.at = value;
                        self.datum(values, out, path)?;
                    }
                }
                self.at = end;
                out.push(0);
            }
        }
        Ok(())
    }

    /// A record: streamed while the members come in the fields' order; otherwise its members
    /// are indexed and written in the fields' order (absent ones as null).
    fn record(
        &mut self,
        fields: &[super::schema::Field],
        out: &mut Vec<u8>,
        path: &mut String,
    ) -> Result<(), AvroError> {
        let object_start = self.at;
        let out_start = out.len();
        if !self.eat(b'{') {
            return Err(self.error(path, "expected an object"));
        }
        let mut in_order = true;
        let mut next = 0;
        if !self.eat(b'}') {
            loop {
                let key = self
                    .string()
                    .map_err(|()| self.error(path, "expected a member name"))?;
                let matches = fields
                    .get(next)
                    .is_some_and(|f| f.name.as_bytes() == self.string_bytes(&key));
                if !matches || !self.eat(b':') {
                    in_order = false;
                    break;
                }
                let field = &fields[next];
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(&field.name);
                self.datum(&field.schema, out, path)?;
                path.truncate(len);
                next += 1;
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.error(path, "expected , or }"));
                }
            }
        }
        if in_order && next == fields.len() {
            return Ok(());
        }
        // Out of order, or fields absent: index the members, then write every field.
        out.truncate(out_start);
        self.at = object_start;
        self.eat(b'{');
        let mut members: Vec<(&'a [u8], usize)> = Vec::with_capacity(fields.len());
        let mut escaped = false;
        if !self.eat(b'}') {
            loop {
                let key = self
                    .string()
                    .map_err(|()| self.error(path, "expected a member name"))?;
                let name = match key {
                    StringRef::Borrowed(b) => b,
                    StringRef::Scratch => {
                        escaped = true;
                        b""
                    }
                };
                if !self.eat(b':') {
                    return Err(self.error(path, "expected :"));
                }
                let (start, _) = self.skip(path)?;
                members.push((name, start));
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.error(path, "expected , or }"));
                }
            }
        }
        if escaped {
            return Err(self.error(
                path,
                "a member name with escapes (not from sluice's encoders)",
            ));
        }
        let end = self.at;
        for field in fields {
            let len = path.len();
            if len > 0 {
                path.push('.');
            }
            path.push_str(&field.name);
            match members
                .iter()
                .find(|(name, _)| *name == field.name.as_bytes())
            {
                Some(&(_, start)) => {
                    self.at = start;
                    self.datum(&field.schema, out, path)?;
                }
                None => write_absent(&field.schema, out),
            }
            path.truncate(len);
        }
        self.at = end;
        Ok(())
    }
}

enum StringRef<'a> {
    Borrowed(&'a [u8]),
    Scratch,
}

/// A field a payload leaves out: null for an optional schema (its union's null branch), else
/// its type's zero.
pub fn write_absent(schema: &Schema, out: &mut Vec<u8>) {
    if schema.optional {
        write_long(if schema.default.is_none() { 0 } else { 1 }, out);
    } else {
        write_zero(schema, out);
    }
}

/// The union branch of a present value of `schema` when it is optional (`["null", T]`: 1;
/// `[T, "null"]`, with a default: 0); nothing for a required schema.
pub fn write_present(schema: &Schema, out: &mut Vec<u8>) {
    if schema.optional {
        write_long(if schema.default.is_none() { 1 } else { 0 }, out);
    }
}

/// A required value's null: its type's zero (a record: each field's).
fn write_zero(schema: &Schema, out: &mut Vec<u8>) {
    match &schema.schema_type {
        SchemaType::Float32 => out.extend_from_slice(&0f32.to_le_bytes()),
        SchemaType::Float64 => out.extend_from_slice(&0f64.to_le_bytes()),
        SchemaType::Struct(fields) => {
            for field in fields {
                if field.schema.optional {
                    write_long(if field.schema.default.is_none() { 0 } else { 1 }, out);
                } else {
                    write_zero(&field.schema, out);
                }
            }
        }
        // false, 0, "", no bytes, an empty array or map: one zero byte.
        _ => out.push(0),
    }
}

/// Avro's `int`/`long`: a zig-zag varint.
pub fn write_long(value: i64, out: &mut Vec<u8>) {
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

/// Avro's `bytes`/`string`: the length, then the bytes.
pub fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_long(bytes.len() as i64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
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

#[cfg(test)]
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

/// The encoding over a parsed value: the tests' oracle for [`write_value`].
#[cfg(test)]
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

#[cfg(test)]
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
    fn connect_time_types_carry_avros_logical_types() {
        for (schema_type, name, text) in [
            (
                SchemaType::Int32,
                "Date",
                r#"{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}"#,
            ),
            (
                SchemaType::Int32,
                "Time",
                r#"{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Time","logicalType":"time-millis"}"#,
            ),
            (
                SchemaType::Int64,
                "Timestamp",
                r#"{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}"#,
            ),
        ] {
            let name = format!("org.apache.kafka.connect.data.{name}");
            let schema = Schema::logical(schema_type, &name, false);
            assert_eq!(schema_text(&schema).unwrap(), text);
        }
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

    fn mixed() -> Schema {
        let opt = |t| Schema::of(t, true);
        Schema::of(
            SchemaType::Struct(vec![
                Field::new("zeta", Schema::of(SchemaType::Int64, false)),
                Field::new("name", opt(SchemaType::String)),
                Field::new("blob", Schema::of(SchemaType::Bytes, false)),
                Field::new(
                    "list",
                    opt(SchemaType::Array(Box::new(Schema::of(
                        SchemaType::Int32,
                        false,
                    )))),
                ),
                Field::new(
                    "inner",
                    opt(SchemaType::Struct(vec![
                        Field::new("x", Schema::of(SchemaType::Float64, false)),
                        Field::new("flag", Schema::of(SchemaType::Boolean, false)),
                    ])),
                ),
                Field::new(
                    "tags",
                    opt(SchemaType::Map(
                        Box::new(Schema::of(SchemaType::String, false)),
                        Box::new(Schema::of(SchemaType::String, true)),
                    )),
                ),
                Field::new("small", Schema::of(SchemaType::Int16, false)),
            ]),
            false,
        )
    }

    proptest::proptest! {
        /// The streaming encoder writes what the parsed-value oracle writes, whatever the
        /// members' order (the schema's, alphabetical) and with members left out.
        #[test]
        fn streaming_equals_the_oracle(
            zeta in proptest::num::i64::ANY,
            name in proptest::option::of("[a-z\"\\\\\u{e9}\u{1F600}\n]{0,12}"),
            blob in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
            list in proptest::option::of(proptest::collection::vec(proptest::num::i32::ANY, 0..5)),
            inner in proptest::option::of((proptest::num::f64::NORMAL, proptest::bool::ANY)),
            tags in proptest::option::of(proptest::collection::btree_map("[a-z]{1,4}", proptest::option::of("[a-z]{0,4}"), 0..4)),
            small in proptest::num::i16::ANY,
            drop_name in proptest::bool::ANY,
        ) {
            let schema = mixed();
            let b64 = base64::engine::general_purpose::STANDARD.encode(&blob);
            let inner = inner.map(|(x, flag)| serde_json::json!({"x": x, "flag": flag}));
            // In the schema's order, as text written by hand.
            let mut members = vec![format!("\"zeta\":{zeta}")];
            if !drop_name {
                members.push(format!("\"name\":{}", serde_json::to_string(&name).unwrap()));
            }
            members.push(format!("\"blob\":\"{b64}\""));
            members.push(format!("\"list\":{}", serde_json::to_string(&list).unwrap()));
            members.push(format!("\"inner\":{}", serde_json::to_string(&inner).unwrap()));
            members.push(format!("\"tags\":{}", serde_json::to_string(&tags).unwrap()));
            members.push(format!("\"small\":{small}"));
            let ordered = format!("{{{}}}", members.join(","));
            // The oracle's value from the typed parts (serde_json's own float parsing is not
            // correctly rounded; the text above is ryu's shortest, which Rust parses back exactly).
            let mut value = serde_json::json!({
                "zeta": zeta, "blob": b64, "list": list, "inner": inner, "tags": tags, "small": small,
            });
            if !drop_name {
                value["name"] = serde_json::json!(name);
            }
            // Alphabetical (serde_json's map order): out of the schema's order.
            let shuffled = serde_json::to_vec(&value).unwrap();
            let mut oracle = Vec::new();
            write_datum(&schema, &value, &mut oracle, &mut String::new()).unwrap();
            let mut streamed = Vec::new();
            write_value(&schema, ordered.as_bytes(), &mut streamed).unwrap();
            proptest::prop_assert_eq!(&streamed, &oracle);
            let mut streamed = Vec::new();
            write_value(&schema, &shuffled, &mut streamed).unwrap();
            proptest::prop_assert_eq!(&streamed, &oracle);
        }

        /// Arbitrary bytes never panic the encoder.
        #[test]
        fn arbitrary_bytes_are_an_error_not_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = write_value(&mixed(), &bytes, &mut Vec::new());
        }
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
