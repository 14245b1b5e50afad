//! Kafka's `ExtractField` and `HoistField` (`$Key`/`$Value`): a struct's field in place of the
//! struct, and the key or value wrapped in a struct of one field.

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema};
use super::{Record, schema};

/// `ExtractField`: the field `field` of the struct in place of the struct.
#[derive(Debug)]
pub struct ExtractField {
    /// The key or the value.
    pub part: Part,
    /// The field's name.
    pub field: String,
}

impl ExtractField {
    /// Applies the transform (a null key or value is left null, with the field's schema).
    ///
    /// # Errors
    ///
    /// The key or value is not a struct, or its schema has no such field (Connect: "Unknown
    /// field").
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = part(&mut record, self.part);
        let value = match data.value.as_deref() {
            None => None,
            Some(text) => {
                let members = Members::parse(text)?;
                members.get(&self.field).map(|v| v.get().to_owned())
            }
        };
        let schema = match &data.schema {
            // Schemaless (Connect's map): a missing field is null.
            Schema::None => Schema::None,
            Schema::Opaque => {
                if data.value.is_some() && value.is_none() {
                    return Err(format!("Unknown field: {}", self.field));
                }
                Schema::Opaque
            }
            Schema::Json(s) => {
                let Some(field) = schema::field(s, &self.field) else {
                    return Err(format!("Unknown field: {}", self.field));
                };
                Schema::Json(schema::extracted(&field))
            }
        };
        *data = Data {
            schema,
            value: value.filter(|v| v != "null"),
        };
        Ok(record)
    }
}

/// `HoistField`: the key or value wrapped in a struct whose one field is `field`.
#[derive(Debug)]
pub struct HoistField {
    /// The key or the value.
    pub part: Part,
    /// The field's name.
    pub field: String,
}

impl HoistField {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Record {
        let data = part(&mut record, self.part);
        let mut out = ObjectWriter::new();
        out.member(&self.field, data.value.as_deref().unwrap_or("null"));
        let schema = match &data.schema {
            // Schemaless (a tombstone's null too): a map of one entry, without a schema.
            Schema::None => Schema::None,
            Schema::Opaque => Schema::Opaque,
            Schema::Json(s) => Schema::Json(schema::anonymous_struct(&[schema::as_field(
                s,
                &self.field,
            )])),
        };
        *data = Data {
            schema,
            value: Some(out.finish()),
        };
        record
    }
}

fn part(record: &mut Record, part: Part) -> &mut Data {
    match part {
        Part::Key => &mut record.key,
        Part::Value => &mut record.value,
    }
}
