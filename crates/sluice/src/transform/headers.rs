//! Kafka's header transforms: `InsertHeader`, `DropHeaders` and `HeaderFrom` (`$Key`/`$Value`).
//!
//! Headers are written as Connect's default `SimpleHeaderConverter` writes them: a string's
//! characters, a number's or a boolean's text. A null header value cannot be carried by
//! sluice's text headers and is left out (docs/transforms.md).

use std::borrow::Cow;

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema, header_text};
use super::{Record, schema};

/// `InsertHeader`: the header `header` with the literal `value.literal` added to every record.
#[derive(Debug)]
pub struct InsertHeader {
    /// The header's name.
    pub header: String,
    /// Its value.
    pub value: String,
}

impl InsertHeader {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Record {
        record
            .headers
            .push((Cow::Owned(self.header.clone()), self.value.clone()));
        record
    }
}

/// `DropHeaders`: every header named in `headers` removed.
#[derive(Debug)]
pub struct DropHeaders {
    /// The names.
    pub headers: Vec<String>,
}

impl DropHeaders {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Record {
        record
            .headers
            .retain(|(name, _)| !self.headers.iter().any(|h| h == name));
        record
    }
}

/// `HeaderFrom`: fields of the key or the value copied or moved into headers.
#[derive(Debug)]
pub struct HeaderFrom {
    /// The key or the value.
    pub part: Part,
    /// Field name → header name, in order.
    pub pairs: Vec<(String, String)>,
    /// `operation = "move"`: the fields are removed from the struct.
    pub remove: bool,
}

impl HeaderFrom {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A null key or value, or one that is not a struct (Connect: "Only Struct objects
    /// supported"), or a field its schema does not have.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(text) = data.value.as_deref() else {
            return Err(format!(
                "the {} is null: HeaderFrom needs a struct (filter tombstones out first, e.g. with a RecordIsTombstone predicate)",
                part_name(self.part)
            ));
        };
        let members = Members::parse(text)?;
        let mut headers = Vec::with_capacity(self.pairs.len());
        for (field, header) in &self.pairs {
            let value = members.get(field).map(|v| v.get());
            if value.is_none() && data.schema != Schema::None {
                // Connect's records carry their schema: a field it lacks fails there too.
                return Err(format!(
                    "the {} has no field {field:?}",
                    part_name(self.part)
                ));
            }
            if let Some(text) = value.and_then(header_text) {
                headers.push((Cow::Owned(header.clone()), text));
            }
        }
        if self.remove {
            let moved = |name: &str| self.pairs.iter().any(|(f, _)| f == name);
            let mut out = ObjectWriter::new();
            for (name, value) in members.0.iter().filter(|(n, _)| !moved(n)) {
                out.member(name, value.get());
            }
            let schema = match &data.schema {
                Schema::Json(s) => {
                    let fields: Vec<String> = schema::fields(s)
                        .into_iter()
                        .zip(schema::field_names(s))
                        .filter(|(_, name)| !moved(name))
                        .map(|(f, _)| f)
                        .collect();
                    Schema::Json(schema::copied_struct(s, &fields))
                }
                other => other.clone(),
            };
            *data = Data {
                schema,
                value: Some(out.finish()),
            };
        }
        record.headers.extend(headers);
        Ok(record)
    }
}

fn part_name(part: Part) -> &'static str {
    match part {
        Part::Key => "key",
        Part::Value => "value",
    }
}
