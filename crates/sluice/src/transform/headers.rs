//! Kafka's header transforms: `InsertHeader`, `DropHeaders` and `HeaderFrom` (`$Key`/`$Value`),
//! and Debezium's `HeaderToValue`.
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
        let mut header_schemas = Vec::new();
        for (field, header) in &self.pairs {
            // Connect's header carries the field's schema (for HeaderToValue).
            if let Schema::Json(s) = &data.schema
                && let Some(f) = schema::field(s, field)
            {
                header_schemas.push((header.clone(), schema::extracted(&f)));
            }
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
        record.header_schemas.extend(header_schemas);
        Ok(record)
    }
}

/// Debezium's `HeaderToValue`: headers copied or moved into fields of the value (a struct),
/// each field with the header's Connect schema (the field's whose value a transform put in
/// the header, else a string's). Top-level fields only.
#[derive(Debug)]
pub struct HeaderToValue {
    /// Header name → field name, in `headers`' order.
    pub pairs: Vec<(String, String)>,
    /// `operation = "move"`: the headers are removed.
    pub remove: bool,
}

impl HeaderToValue {
    /// Applies the transform (a null value is left as it is, as Debezium leaves a tombstone).
    ///
    /// # Errors
    ///
    /// The value is not a struct.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let Some(text) = record.value.value.as_deref() else {
            return Ok(record);
        };
        let members = Members::parse(text)
            .map_err(|_| "Only Struct objects supported for [Header field insertion]".to_owned())?;
        // Each header of the list, in the record's order (a header twice: both, the first's
        // schema and the last's value, as Connect's Struct and SchemaBuilder make them).
        let mut entries: Vec<(&str, String, &str)> = Vec::new();
        for (name, value) in &record.headers {
            if let Some((_, field)) = self.pairs.iter().find(|(h, _)| h == name) {
                let schema = record.header_schema(name);
                let json = match schema::type_of(schema).as_deref() {
                    Some("string") | Some("bytes") | None => super::json::string(value),
                    _ => value.clone(),
                };
                entries.push((field.as_str(), json, schema));
            }
        }
        if entries.is_empty() {
            return Ok(record);
        }
        let mut out = ObjectWriter::new();
        let mut written: Vec<&str> = Vec::new();
        for (name, value) in &members.0 {
            let last = entries.iter().rev().find(|(f, _, _)| f == name);
            out.member(name, last.map_or(value.get(), |(_, v, _)| v.as_str()));
            written.push(name);
        }
        let schema = match &record.value.schema {
            Schema::Json(s) => {
                let mut fields = schema::fields(s);
                let mut names = schema::field_names(s);
                for (field, _, field_schema) in &entries {
                    if !names.iter().any(|n| n == field) {
                        fields.push(schema::as_field(field_schema, field));
                        names.push((*field).to_owned());
                    }
                }
                Schema::Json(schema::copied_struct(s, &fields))
            }
            other => other.clone(),
        };
        for (field, _, _) in &entries {
            if !written.contains(field) {
                let (_, value, _) = entries
                    .iter()
                    .rev()
                    .find(|(f, _, _)| f == field)
                    .expect("listed");
                out.member(field, value);
                written.push(field);
            }
        }
        let value = out.finish();
        if self.remove {
            record
                .headers
                .retain(|(name, _)| !self.pairs.iter().any(|(h, _)| h == name));
        }
        record.value = Data {
            schema,
            value: Some(value),
        };
        Ok(record)
    }
}

fn part_name(part: Part) -> &'static str {
    match part {
        Part::Key => "key",
        Part::Value => "value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_to_value_adds_fields_with_the_headers_schemas() {
        let mut record = Record {
            topic: "t".into(),
            key: Data::null_with(Schema::None),
            value: Data {
                schema: Schema::Json(
                    r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"p.t.Value"}"#.into(),
                ),
                value: Some(r#"{"id":1}"#.into()),
            },
            headers: vec![
                ("__op".into(), "c".into()),
                ("ts".into(), "17".into()),
                ("other".into(), "x".into()),
            ],
            header_schemas: vec![
                ("__op".into(), r#"{"type":"string","optional":true}"#.into()),
                ("ts".into(), r#"{"type":"int64","optional":true}"#.into()),
            ],
            partition: None,
        };
        let t = HeaderToValue {
            pairs: vec![
                ("__op".into(), "op".into()),
                ("ts".into(), "ts_ms".into()),
                ("origin".into(), "origin".into()),
            ],
            remove: true,
        };
        record = t.apply(record).unwrap();
        assert_eq!(
            record.value.value.as_deref(),
            Some(r#"{"id":1,"op":"c","ts_ms":17}"#)
        );
        assert_eq!(
            record.value.schema,
            Schema::Json(r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"p.t.Value"}"#.into())
        );
        // Moved: the headers are gone, the others stay.
        let names: Vec<&str> = record.headers.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["other"]);
        // A header of unknown origin is a required string; a tombstone is left as it is.
        record.headers.push(("origin".into(), "dbz".into()));
        record = t.apply(record).unwrap();
        assert!(
            matches!(&record.value.schema, Schema::Json(s) if s.contains(r#"{"type":"string","optional":false,"field":"origin"}"#))
        );
        record.value = Data::null_with(Schema::None);
        record.headers.push(("__op".into(), "d".into()));
        let out = t.apply(record).unwrap();
        assert_eq!(out.headers.len(), 2);
    }
}
