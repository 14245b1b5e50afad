//! Avro → Kafka Connect, as Confluent's `AvroData.toConnectSchema` and `JsonConverter` do:
//! a writer schema (Avro's JSON) becomes the Connect schema `AvroData` derives from it (the
//! inverse of [`crate::event::avro`]'s derivation: `connect.name`, `connect.version`,
//! `connect.parameters`, `connect.doc`, `connect.type` and the `decimal` / `date` /
//! `time-millis` / `timestamp-millis` logical types, `["null", T]` as an optional `T`, arrays of
//! `io.confluent.connect.avro.MapEntry` as maps) and a decoding plan; a record's Avro binary
//! becomes the JSON `JsonConverter` writes for it.
//!
//! Values are Connect's JSON forms: bytes, `fixed` and decimals as base64 (`decimal.format`
//! `BASE64`, the default), dates as days, times and timestamps as the integers Avro holds,
//! enums as their symbol, floats as numbers (`"NaN"`, `"Infinity"`, `"-Infinity"` quoted, as
//! Jackson writes them).
//!
//! Written here rather than taken from the `apache-avro` crate (not a dependency of sluice): it
//! writes Connect's JSON straight from the binary guided by the prepared plan, with no value
//! tree per record, and the Connect mapping needs the schema's `connect.*` properties, which a
//! generic Avro library leaves aside; Avro's binary encoding is a page of the specification
//! (zig-zag varints, length-prefixed bytes, blocked arrays and maps, union branch indexes), as
//! [`crate::event::avro`]'s encoder does the other way.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;

use crate::event::schema::{Field, Schema, SchemaType};
use crate::event::write_json_str;
use crate::sink::parquet::Kind;

/// How a value is decoded (a node of the plan prepared from the writer schema).
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    /// `bytes` (decimals included): base64.
    Bytes,
    String,
    /// `fixed` of a size: base64.
    Fixed(usize),
    /// Symbols.
    Enum(Arc<[String]>),
    Record(Arc<[(String, Node)]>),
    Array(Box<Node>),
    /// An array of `MapEntry` records (a Connect map with non-string keys): `[[k, v], …]`.
    Entries(Box<Node>, Box<Node>),
    /// Values of string keys.
    Map(Box<Node>),
    /// `["null", T]` or `[T, "null"]`: the index of the null branch, and `T`.
    Optional(u8, Box<Node>),
}

/// A writer schema prepared for decoding.
#[derive(Debug)]
pub struct Reader {
    node: Node,
    /// The Connect schema as `JsonConverter` writes it.
    connect_json: Vec<u8>,
    /// A record's top-level fields as Parquet columns (by their Connect types).
    value_kinds: Option<Arc<[(String, Kind)]>>,
}

/// The Parquet column of a field of Connect schema `schema`: what its JSON form is.
fn column_kind(schema: &Schema) -> Kind {
    match schema.schema_type {
        SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64 => Kind::Int,
        SchemaType::Float32 | SchemaType::Float64 => Kind::Float,
        SchemaType::Boolean => Kind::Bool,
        // Bytes are base64 text.
        SchemaType::String | SchemaType::Bytes => Kind::Str,
        SchemaType::Struct(_) | SchemaType::Array(_) | SchemaType::Map(..) => Kind::Json,
    }
}

impl Reader {
    /// Prepares the Avro schema `text`.
    ///
    /// # Errors
    ///
    /// Not JSON, not an Avro schema, or nothing Connect can hold (named).
    pub fn parse(text: &str) -> Result<Self, String> {
        let json: Value =
            serde_json::from_str(text).map_err(|e| format!("the schema is not JSON: {e}"))?;
        let mut parser = Parser::default();
        let (node, connect) = parser.parse(&json, "")?;
        let value_kinds = match &connect.schema_type {
            SchemaType::Struct(fields) => Some(
                fields
                    .iter()
                    .map(|f| (f.name.clone(), column_kind(&f.schema)))
                    .collect(),
            ),
            _ => None,
        };
        Ok(Self {
            node,
            connect_json: connect.to_json(),
            value_kinds,
        })
    }

    /// The Parquet columns of a record's top-level fields (`None`: not a record).
    pub fn value_kinds(&self) -> Option<&Arc<[(String, Kind)]>> {
        self.value_kinds.as_ref()
    }

    /// The Connect schema (JSON text).
    pub fn connect_json(&self) -> &[u8] {
        &self.connect_json
    }

    /// Appends the Avro binary `bytes` (after the wire format's header) as Connect's JSON.
    ///
    /// # Errors
    ///
    /// The bytes do not match the schema.
    pub fn write_json(&self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let mut cursor = Cursor {
            bytes,
            at: 0,
            items: 0,
        };
        write_node(&self.node, &mut cursor, out)?;
        if cursor.at != bytes.len() {
            return Err(format!(
                "{} byte(s) left after the value: the bytes do not match the writer schema",
                bytes.len() - cursor.at
            ));
        }
        Ok(())
    }
}

/// Named types seen so far (a reference names one defined earlier, Avro's rule).
#[derive(Default)]
struct Parser {
    named: HashMap<String, (Node, Schema)>,
    /// Records being defined: a reference to one is a recursive type.
    open: Vec<String>,
}

const PRIMITIVES: &[&str] = &[
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

fn full_name(name: &str, namespace: Option<&str>, enclosing: &str) -> String {
    if name.contains('.') {
        return name.to_owned();
    }
    match namespace.unwrap_or(enclosing) {
        "" => name.to_owned(),
        ns => format!("{ns}.{name}"),
    }
}

fn namespace_of(full: &str) -> &str {
    full.rsplit_once('.').map_or("", |(ns, _)| ns)
}

impl Parser {
    /// The plan and Connect schema of `json` (an Avro schema) in namespace `ns`.
    fn parse(&mut self, json: &Value, ns: &str) -> Result<(Node, Schema), String> {
        match json {
            Value::String(name) => self.named_or_primitive(name, ns, None),
            Value::Array(branches) => self.union(branches, ns),
            Value::Object(object) => {
                let kind = object
                    .get("type")
                    .ok_or_else(|| "a schema object without \"type\"".to_owned())?;
                let kind = match kind {
                    Value::String(kind) => kind.as_str(),
                    other => {
                        // {"type": {…}} or {"type": [...]}: the inner schema.
                        return self.parse(other, ns);
                    }
                };
                match kind {
                    "record" | "error" => self.record(object, ns),
                    "enum" => {
                        let (full, _) = self.name_of(object, ns)?;
                        let symbols: Vec<String> = object
                            .get("symbols")
                            .and_then(Value::as_array)
                            .ok_or_else(|| format!("enum {full} without symbols"))?
                            .iter()
                            .map(|s| s.as_str().unwrap_or_default().to_owned())
                            .collect();
                        let schema = connect_props(
                            Schema::of(SchemaType::String, false),
                            object,
                            Some(&full),
                        )?;
                        let parsed = (Node::Enum(symbols.into()), schema);
                        self.named.insert(full, parsed.clone());
                        Ok(parsed)
                    }
                    "fixed" => {
                        let (full, _) = self.name_of(object, ns)?;
                        let size = object
                            .get("size")
                            .and_then(Value::as_u64)
                            .ok_or_else(|| format!("fixed {full} without a size"))?;
                        let schema = logical(Schema::of(SchemaType::Bytes, false), object)?;
                        let schema = connect_props(schema, object, None)?;
                        let parsed = (Node::Fixed(size as usize), schema);
                        self.named.insert(full, parsed.clone());
                        Ok(parsed)
                    }
                    "array" => {
                        let items = object
                            .get("items")
                            .ok_or_else(|| "an array without \"items\"".to_owned())?;
                        let (node, schema) = self.parse(items, ns)?;
                        let entry = matches!(&schema.schema_type, SchemaType::Struct(fields)
                            if fields.len() == 2 && fields[0].name == "key" && fields[1].name == "value")
                            && schema
                                .name
                                .as_deref()
                                .is_some_and(|n| n.ends_with("MapEntry"));
                        if entry
                            && let (Node::Record(fields), SchemaType::Struct(connect)) =
                                (&node, &schema.schema_type)
                        {
                            let out = Schema::of(
                                SchemaType::Map(
                                    Box::new(connect[0].schema.clone()),
                                    Box::new(connect[1].schema.clone()),
                                ),
                                false,
                            );
                            let out = connect_props(out, object, None)?;
                            return Ok((
                                Node::Entries(
                                    Box::new(fields[0].1.clone()),
                                    Box::new(fields[1].1.clone()),
                                ),
                                out,
                            ));
                        }
                        let out = connect_props(
                            Schema::of(SchemaType::Array(Box::new(schema)), false),
                            object,
                            None,
                        )?;
                        Ok((Node::Array(Box::new(node)), out))
                    }
                    "map" => {
                        let values = object
                            .get("values")
                            .ok_or_else(|| "a map without \"values\"".to_owned())?;
                        let (node, schema) = self.parse(values, ns)?;
                        let out = connect_props(
                            Schema::of(
                                SchemaType::Map(
                                    Box::new(Schema::of(SchemaType::String, false)),
                                    Box::new(schema),
                                ),
                                false,
                            ),
                            object,
                            None,
                        )?;
                        Ok((Node::Map(Box::new(node)), out))
                    }
                    primitive => self.named_or_primitive(primitive, ns, Some(object)),
                }
            }
            other => Err(format!("{other} is not an Avro schema")),
        }
    }

    fn name_of(
        &self,
        object: &serde_json::Map<String, Value>,
        ns: &str,
    ) -> Result<(String, String), String> {
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| "a named type without \"name\"".to_owned())?;
        let full = full_name(name, object.get("namespace").and_then(Value::as_str), ns);
        let inner = namespace_of(&full).to_owned();
        Ok((full, inner))
    }

    fn named_or_primitive(
        &mut self,
        name: &str,
        ns: &str,
        object: Option<&serde_json::Map<String, Value>>,
    ) -> Result<(Node, Schema), String> {
        let (node, schema_type) = match name {
            "null" => (Node::Null, SchemaType::String),
            "boolean" => (Node::Boolean, SchemaType::Boolean),
            "int" => (Node::Int, SchemaType::Int32),
            "long" => (Node::Long, SchemaType::Int64),
            "float" => (Node::Float, SchemaType::Float32),
            "double" => (Node::Double, SchemaType::Float64),
            "bytes" => (Node::Bytes, SchemaType::Bytes),
            "string" => (Node::String, SchemaType::String),
            _ => {
                debug_assert!(!PRIMITIVES.contains(&name));
                let full = full_name(name, None, ns);
                for candidate in [full.as_str(), name] {
                    if self.open.iter().any(|o| o == candidate) {
                        return Err(format!(
                            "record {candidate} refers to itself: a recursive type has no \
                             Connect schema"
                        ));
                    }
                    if let Some(found) = self.named.get(candidate) {
                        return Ok(found.clone());
                    }
                }
                return Err(format!(
                    "{name:?} is neither an Avro type nor a type defined before"
                ));
            }
        };
        let mut schema = Schema::of(schema_type, false);
        if let Some(object) = object {
            if object.get("connect.type").and_then(Value::as_str) == Some("int8") {
                schema.schema_type = SchemaType::Int8;
            } else if object.get("connect.type").and_then(Value::as_str) == Some("int16") {
                schema.schema_type = SchemaType::Int16;
            }
            schema = logical(schema, object)?;
            schema = connect_props(schema, object, None)?;
        }
        Ok((node, schema))
    }

    fn union(&mut self, branches: &[Value], ns: &str) -> Result<(Node, Schema), String> {
        let null_at = branches.iter().position(|b| b.as_str() == Some("null"));
        match (branches.len(), null_at) {
            (2, Some(null_at)) => {
                let (node, mut schema) = self.parse(&branches[1 - null_at], ns)?;
                schema.optional = true;
                Ok((Node::Optional(null_at as u8, Box::new(node)), schema))
            }
            (1, _) => self.parse(&branches[0], ns),
            _ => Err(format!(
                "the union {} has several non-null types: sluice's sinks read unions of null and \
                 one type (what Connect's converters write for optional fields)",
                Value::Array(branches.to_vec())
            )),
        }
    }

    fn record(
        &mut self,
        object: &serde_json::Map<String, Value>,
        ns: &str,
    ) -> Result<(Node, Schema), String> {
        let (full, inner) = self.name_of(object, ns)?;
        self.open.push(full.clone());
        let fields = object
            .get("fields")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("record {full} without fields"))?;
        let mut nodes = Vec::with_capacity(fields.len());
        let mut connect = Vec::with_capacity(fields.len());
        for field in fields {
            let name = field
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("a field of record {full} without a name"))?;
            let schema = field
                .get("type")
                .ok_or_else(|| format!("field {full}.{name} without a type"))?;
            let (node, schema) = self
                .parse(schema, &inner)
                .map_err(|e| format!("field {full}.{name}: {e}"))?;
            nodes.push((name.to_owned(), node));
            connect.push(Field::new(name, schema));
        }
        self.open.pop();
        let mut schema = Schema::of(SchemaType::Struct(connect), false);
        // AvroData names a struct by its record unless the record is Connect's placeholder.
        if !full.starts_with("io.confluent.connect.avro.ConnectDefault") {
            schema.name = Some(full.clone());
        }
        if let Some(doc) = object.get("doc").and_then(Value::as_str) {
            schema.doc = Some(doc.to_owned());
        }
        let schema = connect_props(schema, object, None)?;
        let parsed = (Node::Record(nodes.into()), schema);
        self.named.insert(full, parsed.clone());
        Ok(parsed)
    }
}

/// Connect's logical types from Avro's (when no `connect.name` says otherwise).
fn logical(mut schema: Schema, object: &serde_json::Map<String, Value>) -> Result<Schema, String> {
    let Some(logical) = object.get("logicalType").and_then(Value::as_str) else {
        return Ok(schema);
    };
    let connect = |name: &str| format!("org.apache.kafka.connect.data.{name}");
    match (logical, &schema.schema_type) {
        ("decimal", SchemaType::Bytes) => {
            let scale = object.get("scale").and_then(Value::as_i64).unwrap_or(0);
            let precision = object.get("precision").and_then(Value::as_i64);
            schema = Schema::decimal(
                i32::try_from(scale).map_err(|_| format!("decimal scale {scale}"))?,
                precision.and_then(|p| i32::try_from(p).ok()),
                false,
            );
        }
        ("date", SchemaType::Int32) => schema = schema.named(&connect("Date"), Some(1)),
        ("time-millis", SchemaType::Int32) => schema = schema.named(&connect("Time"), Some(1)),
        ("timestamp-millis", SchemaType::Int64) => {
            schema = schema.named(&connect("Timestamp"), Some(1));
        }
        // Other logical types (micros, uuid, …) are their base type to Connect.
        _ => {}
    }
    Ok(schema)
}

/// Connect's metadata properties (`connect.name`, …) of a base schema.
fn connect_props(
    mut schema: Schema,
    object: &serde_json::Map<String, Value>,
    default_name: Option<&str>,
) -> Result<Schema, String> {
    if let Some(name) = object.get("connect.name").and_then(Value::as_str) {
        schema.name = Some(name.to_owned());
    } else if let Some(name) = default_name {
        schema.name = Some(name.to_owned());
    }
    if let Some(version) = object.get("connect.version").and_then(Value::as_i64) {
        schema.version = i32::try_from(version).ok();
    }
    if let Some(doc) = object.get("connect.doc").and_then(Value::as_str) {
        schema.doc = Some(doc.to_owned());
    }
    if let Some(parameters) = object.get("connect.parameters") {
        let parameters = parameters
            .as_object()
            .ok_or_else(|| "connect.parameters is not an object".to_owned())?;
        schema.parameters = parameters
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect();
    }
    Ok(schema)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Array and map items read so far: bounded by the record's size (see [`Cursor::block`]).
    items: usize,
}

/// Items of zero bytes each (nulls) a record may hold beyond one per byte.
const FREE_ITEMS: usize = 1 << 16;

impl<'a> Cursor<'a> {
    fn truncated(&self) -> String {
        format!(
            "the value ends after {} byte(s) inside a field: the bytes do not match the writer \
             schema",
            self.at
        )
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.truncated())?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// A zig-zag varint.
    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.bytes.get(self.at).ok_or_else(|| self.truncated())?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(format!("a varint longer than 10 bytes at byte {}", self.at))
    }

    fn len(&mut self) -> Result<usize, String> {
        let len = self.long()?;
        usize::try_from(len).map_err(|_| format!("a negative length {len} at byte {}", self.at))
    }

    /// The next block's item count (0: the end).
    fn block(&mut self) -> Result<usize, String> {
        let count = self.long()?;
        let count = if count < 0 {
            self.long()?; // the block's size in bytes
            count.unsigned_abs()
        } else {
            count as u64
        };
        // Each item takes at least a byte but nulls; a count beyond that is garbage. Counted
        // over the whole record too: blocks of nulls, a few bytes each, would otherwise let a
        // small hostile record expand into gigabytes of JSON.
        let left = (self.bytes.len() - self.at) as u64;
        let budget = (self.bytes.len() + FREE_ITEMS).saturating_sub(self.items) as u64;
        if count > left.max(FREE_ITEMS as u64) || count > budget {
            return Err(format!(
                "a block of {count} items in {left} byte(s) (after {} items in a record of {} bytes)",
                self.items,
                self.bytes.len()
            ));
        }
        self.items += count as usize;
        Ok(count as usize)
    }
}

fn write_float(value: f64, out: &mut Vec<u8>, single: bool) {
    if value.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if value.is_infinite() {
        out.extend_from_slice(if value > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else if single {
        // serde_json writes an f32 by its own shortest form (0.1, not 0.10000000149011612).
        let _ = serde_json::to_writer(&mut *out, &(value as f32));
    } else {
        let _ = serde_json::to_writer(&mut *out, &value);
    }
}

fn write_node(node: &Node, cursor: &mut Cursor<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    match node {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Boolean => match cursor.take(1)?[0] {
            0 => out.extend_from_slice(b"false"),
            1 => out.extend_from_slice(b"true"),
            other => return Err(format!("a boolean byte {other}")),
        },
        Node::Int | Node::Long => crate::event::write_int(out, cursor.long()?),
        Node::Float => {
            let bytes: [u8; 4] = cursor.take(4)?.try_into().expect("4 bytes");
            write_float(f64::from(f32::from_le_bytes(bytes)), out, true);
        }
        Node::Double => {
            let bytes: [u8; 8] = cursor.take(8)?.try_into().expect("8 bytes");
            write_float(f64::from_le_bytes(bytes), out, false);
        }
        Node::Bytes => {
            let len = cursor.len()?;
            write_base64(cursor.take(len)?, out);
        }
        Node::Fixed(size) => write_base64(cursor.take(*size)?, out),
        Node::String => {
            let len = cursor.len()?;
            let text = simdutf8::basic::from_utf8(cursor.take(len)?)
                .map_err(|_| format!("a string that is not UTF-8 at byte {}", cursor.at))?;
            write_json_str(out, text);
        }
        Node::Enum(symbols) => {
            let index = cursor.long()?;
            let symbol = usize::try_from(index)
                .ok()
                .and_then(|i| symbols.get(i))
                .ok_or_else(|| format!("enum index {index} of {} symbols", symbols.len()))?;
            write_json_str(out, symbol);
        }
        Node::Record(fields) => {
            out.push(b'{');
            for (n, (name, field)) in fields.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json_str(out, name);
                out.push(b':');
                write_node(field, cursor, out)?;
            }
            out.push(b'}');
        }
        Node::Array(items) => {
            out.push(b'[');
            let mut first = true;
            loop {
                let count = cursor.block()?;
                if count == 0 {
                    break;
                }
                for _ in 0..count {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    write_node(items, cursor, out)?;
                }
            }
            out.push(b']');
        }
        Node::Entries(key, value) => {
            out.push(b'[');
            let mut first = true;
            loop {
                let count = cursor.block()?;
                if count == 0 {
                    break;
                }
                for _ in 0..count {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    out.push(b'[');
                    write_node(key, cursor, out)?;
                    out.push(b',');
                    write_node(value, cursor, out)?;
                    out.push(b']');
                }
            }
            out.push(b']');
        }
        Node::Map(values) => {
            out.push(b'{');
            let mut first = true;
            loop {
                let count = cursor.block()?;
                if count == 0 {
                    break;
                }
                for _ in 0..count {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    write_node(&Node::String, cursor, out)?;
                    out.push(b':');
                    write_node(values, cursor, out)?;
                }
            }
            out.push(b'}');
        }
        Node::Optional(null_at, inner) => {
            let branch = cursor.long()?;
            if branch == i64::from(*null_at) {
                out.extend_from_slice(b"null");
            } else if branch == i64::from(1 - *null_at) {
                write_node(inner, cursor, out)?;
            } else {
                return Err(format!("union branch {branch} of a union of 2"));
            }
        }
    }
    Ok(())
}

fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let start = out.len();
    out.resize(
        start + base64::encoded_len(bytes.len(), true).unwrap_or(0),
        0,
    );
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

/// The schema id of Confluent's wire format, and the Avro binary after it.
///
/// # Errors
///
/// Not in the wire format (what the bytes start with).
pub fn unframe(bytes: &[u8]) -> Result<(u32, &[u8]), String> {
    match bytes {
        [crate::event::avro::MAGIC, a, b, c, d, rest @ ..] => {
            Ok((u32::from_be_bytes([*a, *b, *c, *d]), rest))
        }
        _ => {
            let shown: Vec<String> = bytes.iter().take(5).map(|b| format!("{b:02x}")).collect();
            Err(format!(
                "not in Confluent's Avro wire format (the byte 0x00 and a 4-byte schema id): \
                 {} byte(s) starting with [{}]",
                bytes.len(),
                shown.join(" ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::avro;
    use crate::sink::postgres::decode::ConnectSchema;

    /// A row of most kinds Debezium writes, with its Connect schema.
    fn row_schema() -> Schema {
        let optional = |t: SchemaType| Schema::of(t, true);
        let mut row = Schema::of(
            SchemaType::Struct(vec![
                Field::new("id", Schema::of(SchemaType::Int32, false)),
                Field::new("small", optional(SchemaType::Int16)),
                Field::new("big", optional(SchemaType::Int64)),
                Field::new("real", optional(SchemaType::Float32)),
                Field::new("dbl", optional(SchemaType::Float64)),
                Field::new("flag", optional(SchemaType::Boolean)),
                Field::new("name", Schema::of(SchemaType::String, false)),
                Field::new("raw", optional(SchemaType::Bytes)),
                Field::new("amount", Schema::decimal(2, Some(10), true)),
                Field::new("any_numeric", Schema::variable_scale_decimal(true)),
                Field::new(
                    "day",
                    Schema::logical(SchemaType::Int32, "io.debezium.time.Date", true),
                ),
                Field::new(
                    "at",
                    Schema::logical(SchemaType::Int64, "io.debezium.time.MicroTimestamp", true),
                ),
                Field::new(
                    "connect_day",
                    Schema::of(SchemaType::Int32, true)
                        .named("org.apache.kafka.connect.data.Date", Some(1)),
                ),
                Field::new(
                    "tags",
                    optional(SchemaType::Array(Box::new(Schema::of(
                        SchemaType::String,
                        true,
                    )))),
                ),
                Field::new(
                    "attrs",
                    optional(SchemaType::Map(
                        Box::new(Schema::of(SchemaType::String, false)),
                        Box::new(Schema::of(SchemaType::String, true)),
                    )),
                ),
                Field::new("location", Schema::point(true)),
            ]),
            true,
        )
        .named("p.public.t.Value", None);
        row.doc = None;
        Schema::of(
            SchemaType::Struct(vec![
                Field::new("before", row.clone()),
                Field::new("after", row),
                Field::new("op", Schema::of(SchemaType::String, false)),
                Field::new("ts_ms", Schema::of(SchemaType::Int64, true)),
            ]),
            false,
        )
        .named("p.public.t.Envelope", Some(2))
    }

    const PAYLOAD: &str = r#"{"before":null,"after":{"id":7,"small":-3,"big":9007199254740993,"real":0.1,"dbl":-2.5e-7,"flag":true,"name":"a \"q\" é\n","raw":"AAH/","amount":"MDk=","any_numeric":{"scale":3,"value":"Aw=="},"day":19000,"at":1700000000123456,"connect_day":-1,"tags":["x",null,""],"attrs":{"k":"v","n":null},"location":{"x":1.5,"y":-2.0,"wkb":null,"srid":4326}},"op":"c","ts_ms":null}"#;

    #[test]
    fn what_sluice_writes_as_avro_reads_back_as_its_json_and_connect_schema() {
        let schema = row_schema();
        let text = avro::schema_text(&schema).unwrap();
        let wire = avro::to_wire("t", &schema, 42, PAYLOAD.as_bytes());
        let (id, body) = unframe(&wire).unwrap();
        assert_eq!(id, 42);
        let reader = Reader::parse(&text).unwrap();
        let mut out = Vec::new();
        reader.write_json(body, &mut out).unwrap();
        let decoded: Value = serde_json::from_slice(&out).unwrap();
        let expected: Value = serde_json::from_str(PAYLOAD).unwrap();
        assert_eq!(decoded, expected, "{}", String::from_utf8_lossy(&out));
        // Parquet columns by the schema's types.
        let kinds = reader.value_kinds().unwrap();
        assert_eq!(
            kinds
                .iter()
                .map(|(n, k)| (n.as_str(), *k))
                .collect::<Vec<_>>(),
            [
                ("before", Kind::Json),
                ("after", Kind::Json),
                ("op", Kind::Str),
                ("ts_ms", Kind::Int)
            ]
        );
        // f32 keeps its shortest form.
        assert!(String::from_utf8_lossy(&out).contains("\"real\":0.1,"));
        // The Connect schema the PostgreSQL sink reads is the one the events were written from.
        let back: ConnectSchema = serde_json::from_slice(reader.connect_json()).unwrap();
        let original: ConnectSchema = serde_json::from_slice(&schema.to_json()).unwrap();
        assert_eq!(
            back,
            original,
            "{}",
            String::from_utf8_lossy(reader.connect_json())
        );
    }

    #[test]
    fn avro_logical_types_become_connects() {
        let reader = Reader::parse(
            r#"{"type":"record","name":"R","namespace":"n","fields":[
                {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}},
                {"name":"day","type":{"type":"int","logicalType":"date"}},
                {"name":"ms","type":["null",{"type":"long","logicalType":"timestamp-millis"}]},
                {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
                {"name":"f","type":{"type":"fixed","name":"F2","size":2}},
                {"name":"again","type":["null","F2"]},
                {"name":"entries","type":{"type":"array","items":{"type":"record","name":"MapEntry","namespace":"io.confluent.connect.avro","fields":[{"name":"key","type":"int"},{"name":"value","type":"string"}]}}}
            ]}"#,
        )
        .unwrap();
        let schema: Value = serde_json::from_slice(reader.connect_json()).unwrap();
        let fields = schema["fields"].as_array().unwrap();
        assert_eq!(fields[0]["name"], "org.apache.kafka.connect.data.Decimal");
        assert_eq!(fields[0]["parameters"]["scale"], "2");
        assert_eq!(fields[1]["name"], "org.apache.kafka.connect.data.Date");
        assert_eq!(fields[2]["name"], "org.apache.kafka.connect.data.Timestamp");
        assert_eq!(fields[2]["optional"], true);
        assert_eq!(fields[3]["type"], "string");
        assert_eq!(fields[6]["type"], "map");
        assert_eq!(fields[6]["keys"]["type"], "int32");
        // 0x3039 = 12345; day 1; ms branch 1 = 5; GREEN; fixed "ab"; null; one entry {3: "x"}.
        let body = [4, 0x30, 0x39, 2, 2, 10, 2, b'a', b'b', 0, 2, 6, 2, b'x', 0];
        let mut out = Vec::new();
        reader.write_json(&body, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"d":"MDk=","day":1,"ms":5,"e":"GREEN","f":"YWI=","again":null,"entries":[[3,"x"]]}"#
        );
    }

    #[test]
    fn blocks_of_nulls_cannot_blow_a_small_record_up() {
        let reader = Reader::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"null"}}]}"#,
        )
        .unwrap();
        // Blocks of 60,000 nulls, three bytes each: 300 bytes would be 6,000,000 nulls.
        let mut body = Vec::new();
        for _ in 0..100 {
            body.extend_from_slice(&[0xc0, 0xa9, 0x07]); // zig-zag 60,000
        }
        body.push(0);
        let error = reader.write_json(&body, &mut Vec::new()).unwrap_err();
        assert!(error.contains("items in"), "{error}");
        // A few nulls are fine.
        let mut out = Vec::new();
        reader.write_json(&[6, 0], &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"a":[null,null,null]}"#);
    }

    #[test]
    fn framing_and_schema_errors_say_what_is_wrong() {
        let error = unframe(b"{\"id\":1}").unwrap_err();
        assert!(
            error.contains("not in Confluent's Avro wire format"),
            "{error}"
        );
        assert!(error.contains("[7b 22 69 64 22]"), "{error}");
        assert!(unframe(&[0, 0, 0]).unwrap_err().contains("3 byte(s)"));
        assert_eq!(unframe(&[0, 0, 0, 1, 2, 9]).unwrap(), (258, &[9u8][..]));

        let reader = Reader::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        let short = reader.write_json(&[20, b'a'], &mut out).unwrap_err();
        assert!(short.contains("do not match the writer schema"), "{short}");
        let long = reader
            .write_json(&[2, b'a', 0], &mut Vec::new())
            .unwrap_err();
        assert!(long.contains("1 byte(s) left"), "{long}");

        let union = Reader::parse(r#"["null","int","string"]"#).unwrap_err();
        assert!(union.contains("several non-null types"), "{union}");
        let recursive = Reader::parse(
            r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#,
        )
        .unwrap_err();
        assert!(recursive.contains("refers to itself"), "{recursive}");
        let unknown = Reader::parse(r#"{"type":"array","items":"Nope"}"#).unwrap_err();
        assert!(unknown.contains("\"Nope\""), "{unknown}");
    }
}
