//! Kafka's `InsertField` (`$Key`/`$Value`): the record's topic, its partition and a static
//! text added as fields.

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema, string};
use super::record::Record;
use super::schema;

/// A field to add: its name and whether its schema is optional (`name?`, the default) or
/// required (`name!`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The field's name.
    pub name: String,
    /// Its schema is optional.
    pub optional: bool,
}

impl Spec {
    /// Connect's `InsertionSpec.parse`: `name`, `name?` (optional) or `name!` (required);
    /// `None` for an empty name.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        Some(match text.strip_suffix('!') {
            Some(name) => Spec {
                name: name.to_owned(),
                optional: false,
            },
            None => Spec {
                name: text.strip_suffix('?').unwrap_or(text).to_owned(),
                optional: true,
            },
        })
    }
}

/// `InsertField`.
#[derive(Debug)]
pub struct InsertField {
    /// The key or the value.
    pub part: Part,
    /// `topic.field`.
    pub topic: Option<Spec>,
    /// `partition.field`: always null (sluice leaves the partition to the producer, as
    /// Debezium's records do).
    pub partition: Option<Spec>,
    /// `static.field` and `static.value`.
    pub fixed: Option<(Spec, String)>,
}

impl InsertField {
    /// Applies the transform (a null key or value is left as it is, as Connect does).
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let topic = record.topic.clone();
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(text) = data.value.as_deref() else {
            return Ok(record);
        };
        let members = Members::parse(text)?;
        let mut out = ObjectWriter::new();
        for (name, value) in &members.0 {
            out.member(name, value.get());
        }
        let with_schema = matches!(data.schema, Schema::Json(_));
        let mut added = Vec::new();
        let mut add = |spec: &Spec, kind: &str, value: Option<String>, out: &mut ObjectWriter| {
            added.push(format!(
                "{{\"type\":\"{kind}\",\"optional\":{},\"field\":{}}}",
                spec.optional,
                string(&spec.name)
            ));
            match value {
                Some(v) => out.member(&spec.name, &v),
                // Without schemas Connect's map gets no member for an absent value.
                None if with_schema => out.member(&spec.name, "null"),
                None => {}
            }
        };
        if let Some(spec) = &self.topic {
            add(spec, "string", Some(string(&topic)), &mut out);
        }
        if let Some(spec) = &self.partition {
            add(spec, "int32", None, &mut out);
        }
        if let Some((spec, value)) = &self.fixed {
            add(spec, "string", Some(string(value)), &mut out);
        }
        let schema = match &data.schema {
            Schema::Json(s) => {
                let mut fields = schema::fields(s);
                fields.extend(added);
                Schema::Json(schema::copied_struct(s, &fields))
            }
            other => other.clone(),
        };
        *data = Data {
            schema,
            value: Some(out.finish()),
        };
        Ok(record)
    }
}
