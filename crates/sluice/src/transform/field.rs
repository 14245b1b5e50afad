//! Kafka's field transforms: `ReplaceField` (`$Key`/`$Value`) and `ValueToKey`.

use super::json::{Data, Members, ObjectWriter, Schema};
use super::record::Record;
use super::schema;

/// Which part of a record a `$Key`/`$Value` transform works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The key.
    Key,
    /// The value.
    Value,
}

/// `ReplaceField`: fields excluded (`exclude`, formerly `blacklist`), kept (`include`,
/// formerly `whitelist`) and renamed (`renames`, `old:new,…`).
#[derive(Debug)]
pub struct ReplaceField {
    /// The key or the value.
    pub part: Part,
    /// Fields left out.
    pub exclude: Vec<String>,
    /// When not empty, the only fields kept.
    pub include: Vec<String>,
    /// Old name → new name.
    pub renames: Vec<(String, String)>,
}

impl ReplaceField {
    /// `exclude` = `fields`, nothing else.
    pub fn excluding(part: Part, fields: Vec<String>) -> Self {
        Self {
            part,
            exclude: fields,
            include: Vec::new(),
            renames: Vec::new(),
        }
    }

    fn keeps(&self, name: &str) -> bool {
        !self.exclude.iter().any(|e| e == name)
            && (self.include.is_empty() || self.include.iter().any(|i| i == name))
    }

    fn renamed<'a>(&'a self, name: &'a str) -> &'a str {
        self.renames
            .iter()
            .find(|(old, _)| old == name)
            .map_or(name, |(_, new)| new.as_str())
    }

    /// Applies the transform (a null key or value is left as it is).
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
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
            if self.keeps(name) {
                out.member(self.renamed(name), value.get());
            }
        }
        let schema = match &data.schema {
            Schema::Json(s) => {
                let fields: Vec<String> = schema::fields(s)
                    .into_iter()
                    .zip(schema::field_names(s))
                    .filter(|(_, name)| self.keeps(name))
                    .map(|(f, name)| schema::renamed(&f, self.renamed(&name)))
                    .collect();
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

/// `ValueToKey`: the key becomes a struct of the value's `fields`.
#[derive(Debug)]
pub struct ValueToKey {
    /// The fields, in the key's order.
    pub fields: Vec<String>,
}

impl ValueToKey {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A null value (Connect: "Only Struct objects supported"), or a field the value does not
    /// have.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let Some(text) = record.value.value.as_deref() else {
            return Err(
                "the value is null: ValueToKey needs a value (filter tombstones out first, e.g. with a RecordIsTombstone predicate)"
                    .into(),
            );
        };
        let members = Members::parse(text)?;
        let mut key = ObjectWriter::new();
        let mut key_fields = Vec::with_capacity(self.fields.len());
        for field in &self.fields {
            // Connect's records always have their schema (the converter only decides whether
            // to write it), so a field the value lacks fails as Connect's does.
            let Some(value) = members.get(field).map(|v| v.get()) else {
                return Err(format!("Field does not exist: {field}"));
            };
            if let Schema::Json(s) = &record.value.schema {
                let Some(f) = schema::field(s, field) else {
                    return Err(format!("the value has no field {field:?}"));
                };
                key_fields.push(f);
            }
            key.member(field, value);
        }
        let key_schema = match &record.value.schema {
            Schema::Json(_) => Schema::Json(schema::anonymous_struct(&key_fields)),
            _ => Schema::Opaque,
        };
        record.key = Data {
            schema: key_schema,
            value: Some(key.finish()),
        };
        Ok(record)
    }
}
