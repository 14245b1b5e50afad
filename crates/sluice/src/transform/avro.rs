//! Avro after the transforms, as Kafka Connect's Avro converter writes a transformed record:
//! the chain works on the record in its Connect form (the JSON with schemas the sources write
//! for it), and the converter then derives the Avro schema from the transformed Connect schema
//! (`AvroData.fromConnectSchema`, [`crate::event::avro::schema_text`]), registers it under the
//! subjects of the record's topic (the routed one) and writes the value in Confluent's wire
//! format ([`crate::event::avro::write_value`]).
//!
//! A transformed schema is parsed, derived and registered once per (topic, key or value,
//! Connect schema text): the cache holds the parsed schema and its registry id, and a record
//! costs a hash of its schema's text and the value's encoding.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::json::{Data, Members, Schema as DataSchema, elements};
use crate::event::avro::{AvroError, record_name, schema_text, write_header, write_value};
use crate::event::schema::{Field, Schema, SchemaType};

/// Registers an Avro schema (its JSON text) for a topic's key (`true`) or value, whose record is
/// named `record` (for the subject name strategy): `(topic, is_key, record, schema) → id`.
/// Called once per distinct schema and topic; may block (the registry is asked in place).
pub type RegisterHook = Box<dyn Fn(&str, bool, &str, &str) -> Result<u32, String> + Send + Sync>;

/// A transformed Connect schema as the converter writes it: the parsed schema and its id.
#[derive(Debug)]
struct Converted {
    schema: Schema,
    id: u32,
}

/// Per topic: the key's and the value's schemas by their Connect text.
type PerTopic = [HashMap<Box<str>, Arc<Converted>, rustc_hash::FxBuildHasher>; 2];

/// Writes keys and/or values as Avro after the chain (Connect's `AvroConverter`).
pub struct AvroOutput {
    /// Keys are written as Avro.
    pub key: bool,
    /// Values are written as Avro.
    pub value: bool,
    register: RegisterHook,
    cache: RwLock<HashMap<Arc<str>, PerTopic, rustc_hash::FxBuildHasher>>,
}

impl std::fmt::Debug for AvroOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroOutput")
            .field("key", &self.key)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

impl AvroOutput {
    /// Avro keys (`key`) and/or values (`value`), their schemas registered by `register`.
    pub fn new(key: bool, value: bool, register: RegisterHook) -> Self {
        Self {
            key,
            value,
            register,
            cache: RwLock::new(HashMap::default()),
        }
    }

    /// The record's key or value (`is_key`) of `topic` in Confluent's wire format; `None`: a
    /// null (Kafka's null, as the converter writes a null value whatever its schema).
    ///
    /// # Errors
    ///
    /// The schema is not a Connect schema Avro can hold (a name Avro refuses), the registry
    /// refused it, or the value does not match it.
    pub fn write(
        &self,
        topic: &Arc<str>,
        is_key: bool,
        data: &Data,
    ) -> Result<Option<Vec<u8>>, String> {
        let Some(value) = &data.value else {
            return Ok(None);
        };
        let DataSchema::Json(text) = &data.schema else {
            return Err(
                "a value without a Connect schema cannot be written as Avro (a transform \
                 dropped it)"
                    .into(),
            );
        };
        let converted = self.converted(topic, is_key, text)?;
        let mut out = Vec::with_capacity(value.len() / 2 + 16);
        write_header(converted.id, &mut out);
        write_value(&converted.schema, value.as_bytes(), &mut out).map_err(|e| e.to_string())?;
        Ok(Some(out))
    }

    /// The cached schema of `text` for `topic`'s keys or values, parsed, derived and
    /// registered the first time.
    fn converted(
        &self,
        topic: &Arc<str>,
        is_key: bool,
        text: &str,
    ) -> Result<Arc<Converted>, String> {
        let side = usize::from(!is_key);
        if let Some(found) = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic.as_ref())
            .and_then(|sides| sides[side].get(text))
        {
            return Ok(Arc::clone(found));
        }
        let schema = parse_connect_schema(text)
            .map_err(|e| format!("the transformed Connect schema cannot be read: {e}"))?;
        let avro = schema_text(&schema).map_err(|e: AvroError| e.to_string())?;
        let id = (self.register)(topic, is_key, &record_name(&schema), &avro)?;
        let converted = Arc::new(Converted { schema, id });
        self.cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(Arc::clone(topic))
            .or_default()[side]
            .insert(text.into(), Arc::clone(&converted));
        Ok(converted)
    }
}

/// Nesting allowed in a Connect schema (Debezium's envelopes nest four or five levels).
const MAX_DEPTH: usize = 64;

/// Reads a Connect schema as `JsonConverter` writes it (`asConnectSchema`'s members: `type`,
/// `optional`, `name`, `version`, `doc`, `parameters` in their order, `default` as its JSON
/// text, a struct's `fields` each with its `field` name, `items`, `keys` and `values`).
///
/// # Errors
///
/// The text is not such a schema (what is wrong, and where).
pub fn parse_connect_schema(text: &str) -> Result<Schema, String> {
    parse_at(text, 0)
}

fn parse_at(text: &str, depth: usize) -> Result<Schema, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    let members = Members::parse(text)?;
    let string = |name: &str| -> Result<Option<String>, String> {
        match members.get(name) {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => super::json::as_str(raw.get())
                .map(|s| Some(s.into_owned()))
                .ok_or_else(|| format!("\"{name}\" is not a string: {}", raw.get())),
        }
    };
    let inner = |name: &str| -> Result<Box<Schema>, String> {
        let raw = members
            .get(name)
            .ok_or_else(|| format!("the schema has no \"{name}\""))?;
        parse_at(raw.get(), depth + 1)
            .map(Box::new)
            .map_err(|e| format!("{name}: {e}"))
    };
    let kind = string("type")?.ok_or("the schema has no \"type\"")?;
    let schema_type = match kind.as_str() {
        "boolean" => SchemaType::Boolean,
        "int8" => SchemaType::Int8,
        "int16" => SchemaType::Int16,
        "int32" => SchemaType::Int32,
        "int64" => SchemaType::Int64,
        "float" => SchemaType::Float32,
        "double" => SchemaType::Float64,
        "string" => SchemaType::String,
        "bytes" => SchemaType::Bytes,
        "array" => SchemaType::Array(inner("items")?),
        "map" => SchemaType::Map(inner("keys")?, inner("values")?),
        "struct" => {
            let list = members.get("fields").map_or("[]", |r| r.get());
            let items = elements(list).ok_or("\"fields\" is not an array")?;
            let mut fields = Vec::with_capacity(items.len());
            for item in items {
                let field = Members::parse(item.get())?;
                let name = field
                    .get("field")
                    .and_then(|r| super::json::as_str(r.get()))
                    .ok_or("a field has no \"field\" name")?;
                let schema = parse_at(item.get(), depth + 1).map_err(|e| format!("{name}: {e}"))?;
                fields.push(Field::new(name.into_owned(), schema));
            }
            SchemaType::Struct(fields)
        }
        other => return Err(format!("{other:?} is not a Connect schema type")),
    };
    let optional = match members.get("optional").map(|r| r.get()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(format!("\"optional\" is not a boolean: {other}")),
    };
    let version = match members.get("version").map(|r| r.get()) {
        None | Some("null") => None,
        Some(text) => Some(
            text.parse::<i32>()
                .map_err(|_| format!("\"version\" is not an integer: {text}"))?,
        ),
    };
    let mut parameters = Vec::new();
    if let Some(raw) = members.get("parameters").filter(|r| r.get() != "null") {
        for (key, value) in Members::parse(raw.get())?.0 {
            let value = super::json::as_str(value.get())
                .ok_or_else(|| format!("parameter {key:?} is not a string"))?;
            parameters.push((key.into_owned(), value.into_owned()));
        }
    }
    Ok(Schema {
        schema_type,
        optional,
        name: string("name")?,
        version,
        doc: string("doc")?,
        parameters,
        default: members
            .get("default")
            .map(|r| r.get())
            .filter(|t| *t != "null")
            .map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_schemas_read_back_as_written() {
        let mut decimal = Schema::decimal(2, Some(8), true);
        decimal.default = Some("\"AQ==\"".into());
        let row = Schema::of(
            SchemaType::Struct(vec![
                Field::new("id", Schema::of(SchemaType::Int32, false)),
                Field::new("amount", decimal),
                Field::new(
                    "tags",
                    Schema::of(
                        SchemaType::Array(Box::new(Schema::of(SchemaType::String, true))),
                        true,
                    ),
                ),
                Field::new("point", Schema::point(true)),
                Field::new("geometry", Schema::geometry(true)),
            ]),
            true,
        )
        .named("p.public.t.Value", None);
        let text = String::from_utf8(row.to_json()).unwrap();
        assert_eq!(parse_connect_schema(&text).unwrap(), row);
    }

    #[test]
    fn schemas_that_are_not_connects_are_errors_not_panics() {
        for text in [
            "",
            "{}",
            "{\"type\":\"nope\"}",
            "{\"type\":\"array\"}",
            "{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\"}]}",
            "{\"type\":\"int32\",\"optional\":1}",
            "{\"type\":\"int32\",\"version\":\"x\"}",
            "{\"type\":\"int32\",\"parameters\":{\"a\":1}}",
        ] {
            assert!(parse_connect_schema(text).is_err(), "{text:?} was read");
        }
        let deep = "{\"type\":\"array\",\"items\":".repeat(100)
            + "{\"type\":\"int32\"}"
            + &"}".repeat(100);
        assert!(parse_connect_schema(&deep).is_err());
    }

    #[test]
    fn each_schema_is_registered_once_per_topic_and_side() {
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let output = AvroOutput::new(
            true,
            true,
            Box::new(move |topic, is_key, record, _schema| {
                let mut calls = seen.lock().unwrap();
                calls.push(format!("{topic} {is_key} {record}"));
                Ok(calls.len() as u32)
            }),
        );
        let value = |text: &str| {
            Data {
            schema: DataSchema::Json(
                "{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"id\"}],\"optional\":false,\"name\":\"r.Value\"}".into(),
            ),
            value: Some(text.into()),
        }
        };
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        assert_eq!(
            output
                .write(&a, false, &value("{\"id\":1}"))
                .unwrap()
                .unwrap(),
            [0, 0, 0, 0, 1, 2]
        );
        assert_eq!(
            output
                .write(&a, false, &value("{\"id\":2}"))
                .unwrap()
                .unwrap(),
            [0, 0, 0, 0, 1, 4]
        );
        assert_eq!(
            output
                .write(&b, false, &value("{\"id\":1}"))
                .unwrap()
                .unwrap(),
            [0, 0, 0, 0, 2, 2]
        );
        assert_eq!(
            output
                .write(&a, true, &value("{\"id\":1}"))
                .unwrap()
                .unwrap(),
            [0, 0, 0, 0, 3, 2]
        );
        assert_eq!(
            *calls.lock().unwrap(),
            ["a false r.Value", "b false r.Value", "a true r.Value"]
        );
        // A null value is Kafka's null, whatever its schema.
        let null = Data {
            schema: value("1").schema,
            value: None,
        };
        assert_eq!(output.write(&a, false, &null).unwrap(), None);
    }
}
