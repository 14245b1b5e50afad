//! Kafka Connect schemas as `JsonConverter` (`schemas.enable=true`) writes them, and the parts
//! of a Debezium change event's schema every connector shares: the envelope
//! (`<prefix>.<schema>.<table>.Envelope`), the `transaction` block (`event.block`), the common
//! head of the `source` block. A source builds its column schemas and its connector's `source`
//! fields with these types; the event then is `{"schema":…,"payload":…}` with the schema
//! rendered once per table (see [`RenderedSchemas`]) and spliced before every payload.
//!
//! Member order is `JsonConverter`'s (`type`, `fields`/`items`/`keys`+`values`, `optional`,
//! `name`, `version`, `doc`, `parameters`, `default`, `field`): Connect's schemas are ordered,
//! and consumers comparing schemas byte for byte (registries, caches) see the same text.

use super::write_json_str;

/// A Connect schema type.
#[derive(Debug, Clone, PartialEq)]
pub enum SchemaType {
    /// `boolean`.
    Boolean,
    /// `int8`.
    Int8,
    /// `int16`.
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `float` (32-bit).
    Float32,
    /// `double`.
    Float64,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `struct` with its fields in order.
    Struct(Vec<Field>),
    /// `array` of an element schema.
    Array(Box<Schema>),
    /// `map` of key and value schemas.
    Map(Box<Schema>, Box<Schema>),
}

impl SchemaType {
    fn name(&self) -> &'static str {
        match self {
            SchemaType::Boolean => "boolean",
            SchemaType::Int8 => "int8",
            SchemaType::Int16 => "int16",
            SchemaType::Int32 => "int32",
            SchemaType::Int64 => "int64",
            SchemaType::Float32 => "float",
            SchemaType::Float64 => "double",
            SchemaType::String => "string",
            SchemaType::Bytes => "bytes",
            SchemaType::Struct(_) => "struct",
            SchemaType::Array(_) => "array",
            SchemaType::Map(..) => "map",
        }
    }
}

/// A struct's field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// Its schema.
    pub schema: Schema,
}

impl Field {
    /// A field.
    pub fn new(name: impl Into<String>, schema: Schema) -> Self {
        Self {
            name: name.into(),
            schema,
        }
    }
}

/// A Connect schema: a type, whether null is allowed, and the optional logical name, version,
/// doc, parameters and default.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    /// The type.
    pub schema_type: SchemaType,
    /// Whether the value may be null.
    pub optional: bool,
    /// The logical name (`io.debezium.time.Date`, …).
    pub name: Option<String>,
    /// The logical type's version.
    pub version: Option<i32>,
    /// A description.
    pub doc: Option<String>,
    /// Parameters, in order.
    pub parameters: Vec<(String, String)>,
    /// The default value as JSON text.
    pub default: Option<String>,
}

impl Schema {
    /// A plain schema of a type.
    pub fn of(schema_type: SchemaType, optional: bool) -> Self {
        Self {
            schema_type,
            optional,
            name: None,
            version: None,
            doc: None,
            parameters: Vec::new(),
            default: None,
        }
    }

    /// A logical type: `name`, version 1.
    pub fn logical(schema_type: SchemaType, name: &str, optional: bool) -> Self {
        Self::of(schema_type, optional).named(name, Some(1))
    }

    /// Sets the logical name and version.
    pub fn named(mut self, name: &str, version: Option<i32>) -> Self {
        self.name = Some(name.to_owned());
        self.version = version;
        self
    }

    /// Adds a parameter.
    pub fn parameter(mut self, key: &str, value: impl Into<String>) -> Self {
        self.parameters.push((key.to_owned(), value.into()));
        self
    }

    /// `org.apache.kafka.connect.data.Decimal` (bytes of the unscaled value) with its `scale`
    /// and, when known, `connect.decimal.precision`.
    pub fn decimal(scale: i32, precision: Option<i32>, optional: bool) -> Self {
        let schema = Self::logical(
            SchemaType::Bytes,
            "org.apache.kafka.connect.data.Decimal",
            optional,
        )
        .parameter("scale", scale.to_string());
        match precision {
            Some(precision) => schema.parameter("connect.decimal.precision", precision.to_string()),
            None => schema,
        }
    }

    /// Debezium's `io.debezium.data.VariableScaleDecimal`: `{"scale","value"}`.
    pub fn variable_scale_decimal(optional: bool) -> Self {
        let mut schema = Self::logical(
            SchemaType::Struct(vec![
                Field::new("scale", Self::of(SchemaType::Int32, false)),
                Field::new("value", Self::of(SchemaType::Bytes, false)),
            ]),
            "io.debezium.data.VariableScaleDecimal",
            optional,
        );
        schema.doc = Some("Variable scaled decimal".into());
        schema
    }

    /// Debezium's `io.debezium.data.Enum` of its allowed values.
    pub fn enumeration(allowed: &[String], optional: bool) -> Self {
        Self::logical(SchemaType::String, "io.debezium.data.Enum", optional)
            .parameter("allowed", allowed.join(","))
    }

    /// Debezium's `io.debezium.data.geometry.Point`.
    pub fn point(optional: bool) -> Self {
        let mut schema = Self::logical(
            SchemaType::Struct(vec![
                Field::new("x", Self::of(SchemaType::Float64, false)),
                Field::new("y", Self::of(SchemaType::Float64, false)),
                Field::new("wkb", Self::of(SchemaType::Bytes, true)),
                Field::new("srid", Self::of(SchemaType::Int32, true)),
            ]),
            "io.debezium.data.geometry.Point",
            optional,
        );
        schema.doc = Some("Geometry (POINT)".into());
        schema
    }

    /// Debezium's `io.debezium.data.geometry.Geometry` (version 2).
    pub fn geometry(optional: bool) -> Self {
        let strings = || Box::new(Self::of(SchemaType::String, false));
        let mut schema = Self::of(
            SchemaType::Struct(vec![
                Field::new("wkb", Self::of(SchemaType::Bytes, false)),
                Field::new("srid", Self::of(SchemaType::Int32, true)),
                Field::new(
                    "extensions",
                    Self::of(SchemaType::Map(strings(), strings()), true),
                ),
            ]),
            optional,
        )
        .named("io.debezium.data.geometry.Geometry", Some(2));
        schema.doc = Some("Geometry".into());
        schema
    }

    /// Appends the schema as `JsonConverter` writes it; `field` is the name when it is a
    /// struct's field.
    pub fn write_json(&self, field: Option<&str>, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.schema_type.name().as_bytes());
        out.push(b'"');
        match &self.schema_type {
            SchemaType::Struct(fields) => {
                out.extend_from_slice(b",\"fields\":[");
                for (n, f) in fields.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    f.schema.write_json(Some(&f.name), out);
                }
                out.push(b']');
            }
            SchemaType::Array(items) => {
                out.extend_from_slice(b",\"items\":");
                items.write_json(None, out);
            }
            SchemaType::Map(keys, values) => {
                out.extend_from_slice(b",\"keys\":");
                keys.write_json(None, out);
                out.extend_from_slice(b",\"values\":");
                values.write_json(None, out);
            }
            _ => {}
        }
        out.extend_from_slice(if self.optional {
            b",\"optional\":true"
        } else {
            b",\"optional\":false"
        });
        if let Some(name) = &self.name {
            out.extend_from_slice(b",\"name\":");
            write_json_str(out, name);
        }
        if let Some(version) = self.version {
            out.extend_from_slice(b",\"version\":");
            super::write_int(out, version);
        }
        if let Some(doc) = &self.doc {
            out.extend_from_slice(b",\"doc\":");
            write_json_str(out, doc);
        }
        if !self.parameters.is_empty() {
            out.extend_from_slice(b",\"parameters\":{");
            for (n, (key, value)) in self.parameters.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json_str(out, key);
                out.push(b':');
                write_json_str(out, value);
            }
            out.push(b'}');
        }
        if let Some(default) = &self.default {
            out.extend_from_slice(b",\"default\":");
            out.extend_from_slice(default.as_bytes());
        }
        if let Some(field) = field {
            out.extend_from_slice(b",\"field\":");
            write_json_str(out, field);
        }
        out.push(b'}');
    }

    /// The schema as JSON text.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.write_json(None, &mut out);
        out
    }
}

/// The fields every Debezium connector's `source` block starts with (`version` … `ts_ns`);
/// the connector appends its own (PostgreSQL: `schema`, `table`, `txId`, `lsn`, …).
pub fn source_common_fields() -> Vec<Field> {
    let string = |optional| Schema::of(SchemaType::String, optional);
    let int64 = |optional| Schema::of(SchemaType::Int64, optional);
    let mut snapshot = Schema::logical(SchemaType::String, "io.debezium.data.Enum", true)
        .parameter(
            "allowed",
            "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental",
        );
    snapshot.default = Some("\"false\"".into());
    vec![
        Field::new("version", string(false)),
        Field::new("connector", string(false)),
        Field::new("name", string(false)),
        Field::new("ts_ms", int64(false)),
        Field::new("snapshot", snapshot),
        Field::new("db", string(false)),
        Field::new("sequence", string(true)),
        Field::new("ts_us", int64(true)),
        Field::new("ts_ns", int64(true)),
    ]
}

/// The envelope's `transaction` block (`event.block`).
pub fn transaction_block() -> Schema {
    Schema::of(
        SchemaType::Struct(vec![
            Field::new("id", Schema::of(SchemaType::String, false)),
            Field::new("total_order", Schema::of(SchemaType::Int64, false)),
            Field::new(
                "data_collection_order",
                Schema::of(SchemaType::Int64, false),
            ),
        ]),
        true,
    )
    .named("event.block", Some(1))
}

/// The transaction topic's key and value schemas (`provide.transaction.metadata`), as every
/// Debezium connector registers them: `io.debezium.connector.common.TransactionMetadataKey`
/// (`id`) and `TransactionMetadataValue` (`status`, `id`, `event_count`, `data_collections` of
/// `event.collection`, `ts_ms`).
pub fn transaction_topic_schemas() -> RenderedSchemas {
    let string = || Schema::of(SchemaType::String, false);
    let key = Schema::of(SchemaType::Struct(vec![Field::new("id", string())]), false).named(
        "io.debezium.connector.common.TransactionMetadataKey",
        Some(1),
    );
    let collection = Schema::of(
        SchemaType::Struct(vec![
            Field::new("data_collection", string()),
            Field::new("event_count", Schema::of(SchemaType::Int64, false)),
        ]),
        true,
    )
    .named("event.collection", Some(1));
    let value = Schema::of(
        SchemaType::Struct(vec![
            Field::new("status", string()),
            Field::new("id", string()),
            Field::new("event_count", Schema::of(SchemaType::Int64, true)),
            Field::new(
                "data_collections",
                Schema::of(SchemaType::Array(Box::new(collection)), true),
            ),
            Field::new("ts_ms", Schema::of(SchemaType::Int64, false)),
        ]),
        false,
    )
    .named(
        "io.debezium.connector.common.TransactionMetadataValue",
        Some(1),
    );
    RenderedSchemas::of(Some(key), value)
}

/// A table's key and envelope schemas, rendered once (per relation) and spliced before every
/// record's payload.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedSchemas {
    /// `{"schema":<key schema>,"payload":` (`None`: the table has no key, keys are null).
    pub key_head: Option<Box<[u8]>>,
    /// `{"schema":<envelope schema>,"payload":`.
    pub value_head: Box<[u8]>,
    /// The key schema (`None`: no key).
    pub key: Option<Schema>,
    /// The envelope schema.
    pub envelope: Schema,
    /// The schema registry's ids of the key and envelope schemas, once registered (Avro).
    pub registered: Option<RegisteredIds>,
}

/// A table's schema ids in the schema registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisteredIds {
    /// The key schema's id (`None`: no key).
    pub key: Option<u32>,
    /// The envelope schema's id.
    pub value: u32,
}

impl RenderedSchemas {
    /// Renders a table's schemas. `topic` is `<prefix>.<schema>.<table>` (the record names'
    /// stem); `columns` are the row's fields (`before`/`after`), `key` the key's, `source` the
    /// connector's `source` schema; `extra` are envelope fields sluice adds after `ts_ns`.
    pub fn render(
        topic: &str,
        columns: Vec<Field>,
        key: Option<Vec<Field>>,
        source: Schema,
        extra: Vec<Field>,
    ) -> Self {
        let key = key.map(|fields| {
            Schema::of(SchemaType::Struct(fields), false).named(&format!("{topic}.Key"), None)
        });
        let row =
            Schema::of(SchemaType::Struct(columns), true).named(&format!("{topic}.Value"), None);
        let int64 = Schema::of(SchemaType::Int64, true);
        let mut fields = vec![
            Field::new("before", row.clone()),
            Field::new("after", row),
            Field::new("source", source),
            Field::new("transaction", transaction_block()),
            Field::new("op", Schema::of(SchemaType::String, false)),
            Field::new("ts_ms", int64.clone()),
            Field::new("ts_us", int64.clone()),
            Field::new("ts_ns", int64),
        ];
        fields.extend(extra);
        let envelope = Schema::of(SchemaType::Struct(fields), false)
            .named(&format!("{topic}.Envelope"), Some(2));
        Self::of(key, envelope)
    }

    /// The schemas of a topic whose records are not change events (a connector's own topics:
    /// schema changes, transactions), `value` in place of the envelope.
    pub fn of(key: Option<Schema>, value: Schema) -> Self {
        let head = |schema: &Schema| {
            let mut out = Vec::with_capacity(1024);
            out.extend_from_slice(b"{\"schema\":");
            schema.write_json(None, &mut out);
            out.extend_from_slice(b",\"payload\":");
            out.into_boxed_slice()
        };
        Self {
            key_head: key.as_ref().map(head),
            value_head: head(&value),
            key,
            envelope: value,
            registered: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_order_is_json_converters() {
        let mut schema = Schema::decimal(2, Some(8), true);
        schema.default = Some("\"AQ==\"".into());
        let mut out = Vec::new();
        schema.write_json(Some("c"), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.\
             Decimal\",\"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.\
             precision\":\"8\"},\"default\":\"AQ==\",\"field\":\"c\"}"
        );
        let map = Schema::geometry(true).to_json();
        let text = String::from_utf8(map).unwrap();
        assert!(
            text.contains(
                "{\"type\":\"map\",\"keys\":{\"type\":\"string\",\"optional\":false},\
                 \"values\":{\"type\":\"string\",\"optional\":false},\"optional\":true,\
                 \"field\":\"extensions\"}"
            ),
            "{text}"
        );
    }
}
