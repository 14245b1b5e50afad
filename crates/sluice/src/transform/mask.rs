//! Kafka's `MaskField` (`$Key`/`$Value`): fields replaced by their type's zero value (`""`,
//! `0`, `0.0`, `false`, `[]`, `{}`) or by `replacement` (numeric and string fields).
//!
//! A field's type comes from its Connect schema when the events carry it, else from its JSON:
//! a number written with a fraction or an exponent is a floating-point one (Connect's
//! JsonConverter writes every float and double so), `true`/`false` a boolean.

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema, string};
use super::record::Record;
use super::schema;

/// `MaskField`.
#[derive(Debug)]
pub struct MaskField {
    /// The key or the value.
    pub part: Part,
    /// `fields`.
    pub fields: Vec<String>,
    /// `replacement` (`None`: the zero values).
    pub replacement: Option<String>,
}

/// A masked field's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Boolean,
    Integer,
    Float,
    String,
    Array,
    Map,
    /// Bytes, decimals and structs: refused, as Connect refuses them.
    Other,
}

impl MaskField {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A null value (Connect: "Only Struct objects supported for [mask fields]"), or a field
    /// of a type Connect does not mask (bytes, structs; a boolean or an array with a
    /// replacement).
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(text) = data.value.as_deref() else {
            return Err(
                "the value is null: MaskField needs a struct (skip null values with a RecordIsTombstone predicate and negate = true)"
                    .into(),
            );
        };
        let members = Members::parse(text)?;
        let field_schemas: Vec<(String, String)> = match &data.schema {
            Schema::Json(s) => schema::field_names(s)
                .into_iter()
                .zip(schema::fields(s))
                .collect(),
            _ => Vec::new(),
        };
        let mut out = ObjectWriter::new();
        for (name, value) in &members.0 {
            let value = value.get();
            if value == "null" || !self.fields.iter().any(|f| f == name) {
                out.member(name, value);
                continue;
            }
            let kind = match field_schemas.iter().find(|(n, _)| n == name) {
                Some((_, s)) => type_of_schema(s),
                None => type_of_json(value),
            };
            out.member(name, &self.masked(name, kind)?);
        }
        *data = Data {
            schema: data.schema.clone(),
            value: Some(out.finish()),
        };
        Ok(record)
    }

    fn masked(&self, name: &str, kind: Type) -> Result<String, String> {
        let refused = || format!("Cannot mask value of field {name:?} ({kind:?})");
        match &self.replacement {
            None => Ok(match kind {
                Type::Boolean => "false".into(),
                Type::Integer => "0".into(),
                Type::Float => "0.0".into(),
                Type::String => "\"\"".into(),
                Type::Array => "[]".into(),
                Type::Map => "{}".into(),
                Type::Other => return Err(refused()),
            }),
            Some(replacement) => match kind {
                Type::String => Ok(string(replacement)),
                Type::Integer => replacement
                    .trim()
                    .parse::<i64>()
                    .map(|n| n.to_string())
                    .map_err(|_| {
                        format!("Unable to convert {replacement} to the type of field {name:?}")
                    }),
                Type::Float => {
                    let f: f64 = replacement.trim().parse().map_err(|_| {
                        format!("Unable to convert {replacement} to the type of field {name:?}")
                    })?;
                    let text = f.to_string();
                    Ok(if text.contains(['.', 'e', 'N', 'i']) {
                        text
                    } else {
                        format!("{text}.0")
                    })
                }
                _ => Err(format!("{} with custom replacement", refused())),
            },
        }
    }
}

fn type_of_schema(field_schema: &str) -> Type {
    if schema::name(field_schema).as_deref() == Some("org.apache.kafka.connect.data.Decimal") {
        return Type::Other;
    }
    match schema::type_of(field_schema).as_deref() {
        Some("boolean") => Type::Boolean,
        Some("int8" | "int16" | "int32" | "int64") => Type::Integer,
        Some("float" | "double") => Type::Float,
        Some("string") => Type::String,
        Some("array") => Type::Array,
        Some("map") => Type::Map,
        _ => Type::Other,
    }
}

fn type_of_json(value: &str) -> Type {
    match value.as_bytes().first() {
        Some(b't' | b'f') => Type::Boolean,
        Some(b'"') => Type::String,
        Some(b'[') => Type::Array,
        Some(b'{') => Type::Other,
        _ if value.contains(['.', 'e', 'E']) => Type::Float,
        _ => Type::Integer,
    }
}
