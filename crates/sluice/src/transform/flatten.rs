//! Kafka's `Flatten` (`$Key`/`$Value`): nested structs flattened into one struct, each field
//! named by the path to it joined with `delimiter` (`after.id` → `after_id` with `_`), as
//! Kafka 4's `Flatten` does: primitives and arrays copied, structs flattened, maps refused; a
//! field under an optional struct becomes optional, keeps its name, version, parameters and
//! default; the flattened struct keeps the top struct's name, version, doc and parameters and
//! is required. A null key or value is left as it is.
//!
//! A null struct's fields (an insert's `before`) are null in Connect's output, or their
//! default when they have one (JsonConverter's `replace.null.with.default`). Without schemas
//! (`schemas_enable = false`) sluice does not know a null struct's fields: it writes the
//! struct's own name with null (docs/transforms.md).

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema};
use super::record::Record;
use super::schema;

/// `Flatten`.
#[derive(Debug)]
pub struct Flatten {
    /// The key or the value.
    pub part: Part,
    /// `delimiter` (`.` by default).
    pub delimiter: String,
}

impl Flatten {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// The key or value is not a struct (an object), or holds a map (with schemas).
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(text) = data.value.as_deref() else {
            return Ok(record);
        };
        let members = Members::parse(text).map_err(|_| {
            format!(
                "Only Struct objects supported for [flattening], found: {}",
                if text.starts_with('[') {
                    "an array"
                } else {
                    "a primitive"
                }
            )
        })?;
        let mut out = ObjectWriter::new();
        match &data.schema {
            Schema::Json(s) => {
                let mut fields = Vec::new();
                self.with_schema(s, Some(&members), "", false, &mut fields, &mut out)?;
                *data = Data {
                    schema: Schema::Json(schema::copied_struct(s, &fields)),
                    value: Some(out.finish()),
                };
            }
            other => {
                let mut path = String::with_capacity(64);
                self.without_schema(&members, &mut path, &mut out);
                *data = Data {
                    schema: other.clone(),
                    value: Some(out.finish()),
                };
            }
        }
        Ok(record)
    }

    fn name(&self, prefix: &str, field: &str) -> String {
        if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}{}{field}", self.delimiter)
        }
    }

    /// Flattens the struct of schema `s` and value `members` (`None`: null) into `fields` (the
    /// flattened fields' schemas) and `out`.
    fn with_schema(
        &self,
        s: &str,
        members: Option<&Members<'_>>,
        prefix: &str,
        optional: bool,
        fields: &mut Vec<String>,
        out: &mut ObjectWriter,
    ) -> Result<(), String> {
        for (field, name) in schema::fields(s).into_iter().zip(schema::field_names(s)) {
            let flat = self.name(prefix, &name);
            let field_optional = optional || schema::is_optional(&field);
            let value = members.and_then(|m| m.get(&name)).map(|v| v.get());
            match schema::type_of(&field).as_deref() {
                Some("struct") => {
                    let nested = value
                        .filter(|v| *v != "null")
                        .map(Members::parse)
                        .transpose()?;
                    self.with_schema(&field, nested.as_ref(), &flat, field_optional, fields, out)?;
                }
                Some("map") => {
                    return Err(format!(
                        "Flatten transformation does not support MAP for record with schemas (for field {flat})."
                    ));
                }
                _ => {
                    let field_schema = flattened_field(&field, &flat, field_optional);
                    let value = match value {
                        Some(v) if v != "null" => v.to_owned(),
                        // JsonConverter writes a null field's default.
                        _ => Members::parse(&field)
                            .ok()
                            .and_then(|m| m.get("default").map(|d| d.get().to_owned()))
                            .unwrap_or_else(|| "null".to_owned()),
                    };
                    out.member(&flat, &value);
                    fields.push(field_schema);
                }
            }
        }
        Ok(())
    }

    /// Flattens JSON objects (without schemas): nested objects flattened, other values copied.
    /// `path` is the flattened name of the object (empty at the top), given back as it came.
    fn without_schema(&self, members: &Members<'_>, path: &mut String, out: &mut ObjectWriter) {
        let at = path.len();
        for (name, value) in &members.0 {
            if at > 0 {
                path.push_str(&self.delimiter);
            }
            path.push_str(name);
            // Only an object is read further (trying every value as one cost an error
            // message per member).
            match value
                .get()
                .starts_with('{')
                .then(|| Members::parse(value.get()))
            {
                Some(Ok(nested)) => self.without_schema(&nested, path, out),
                _ => out.member(path, value.get()),
            }
            path.truncate(at);
        }
    }
}

/// A field's schema as a flattened field: renamed `name`, optional when `optional`.
fn flattened_field(field: &str, name: &str, optional: bool) -> String {
    let renamed = schema::renamed(field, name);
    if !optional {
        return renamed;
    }
    let Ok(members) = Members::parse(&renamed) else {
        return renamed;
    };
    let mut out = ObjectWriter::new();
    for (member, value) in &members.0 {
        if member == "optional" {
            out.member("optional", "true");
        } else {
            out.member(member, value.get());
        }
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(schema: Schema, value: &str) -> Record {
        Record {
            topic: "t".into(),
            key: Data::null_with(Schema::None),
            value: Data {
                schema,
                value: Some(value.into()),
            },
            headers: Vec::new(),
            header_schemas: Vec::new(),
            partition: None,
        }
    }

    const ENVELOPE: &str = r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int32","optional":true,"default":7,"field":"b"},{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"tags"}],"optional":true,"name":"p.t.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int32","optional":true,"default":7,"field":"b"},{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"tags"}],"optional":true,"name":"p.t.Value","field":"after"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.t.Envelope","version":2}"#;

    #[test]
    fn structs_flatten_with_connects_names_and_schemas() {
        let flatten = Flatten {
            part: Part::Value,
            delimiter: "_".into(),
        };
        let out = flatten
            .apply(record(
                Schema::Json(ENVELOPE.into()),
                r#"{"before":null,"after":{"id":1,"b":null,"tags":["x"]},"op":"c"}"#,
            ))
            .unwrap();
        // The null before's fields and a null field: null, or their default.
        assert_eq!(
            out.value.value.as_deref(),
            Some(
                r#"{"before_id":null,"before_b":7,"before_tags":null,"after_id":1,"after_b":7,"after_tags":["x"],"op":"c"}"#
            )
        );
        assert_eq!(
            out.value.schema,
            Schema::Json(r#"{"type":"struct","fields":[{"type":"int32","optional":true,"field":"before_id"},{"type":"int32","optional":true,"default":7,"field":"before_b"},{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"before_tags"},{"type":"int32","optional":true,"field":"after_id"},{"type":"int32","optional":true,"default":7,"field":"after_b"},{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"after_tags"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.t.Envelope","version":2}"#.into())
        );
        // Without schemas: objects flattened by the default delimiter, a null kept as it is.
        let dotted = Flatten {
            part: Part::Value,
            delimiter: ".".into(),
        };
        let out = dotted
            .apply(record(
                Schema::Opaque,
                r#"{"before":null,"after":{"id":1,"s":{"x":2}},"op":"c"}"#,
            ))
            .unwrap();
        assert_eq!(
            out.value.value.as_deref(),
            Some(r#"{"before":null,"after.id":1,"after.s.x":2,"op":"c"}"#)
        );
        // A map is refused with schemas; a primitive value too.
        let map = r#"{"type":"struct","fields":[{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"string","optional":true},"optional":true,"field":"m"}],"optional":false}"#;
        assert!(
            flatten
                .apply(record(Schema::Json(map.into()), r#"{"m":{}}"#))
                .unwrap_err()
                .contains("does not support MAP")
        );
        assert!(flatten.apply(record(Schema::Opaque, "5")).is_err());
    }
}
